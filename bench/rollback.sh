#!/usr/bin/env bash
# `scion rollback` of a clone of FILES files (issue 18: goal under 20 ms for 100,000): a tree of
# FILES small files in 1,000 directories is written, cloned and snapshotted; then REPS times,
# a few files of the clone change and `scion rollback CLONE --to SNAP` is timed (the whole
# command: process start, the control socket, the rollback and its checkpoint), beside a
# command with nothing to do (`scion snapshot schedule --list`) for the command's own cost. Run as root or
# as the owner of a FUSE mount:
#
#   bench/rollback.sh                 # FILES=100000, REPS=10, store on a fresh directory in /tmp
#   FILES=10000 REPS=5 bench/rollback.sh
#
# Prints the median and writes bench/results/<stamp>-rollback.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SCION=${SCION:-$here/target/release/scion}
FILES=${FILES:-100000}; REPS=${REPS:-10}
W=$(mktemp -d /tmp/scion-rollback.XXXXXX)
cleanup() { "$SCION" umount "$W/mnt" >/dev/null 2>&1 || umount -l "$W/mnt" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/mnt"
"$SCION" init "$W/store" >/dev/null
"$SCION" mount "$W/store" "$W/mnt" >/dev/null
t0=$(date +%s.%N)
python3 - "$W/mnt/src" "$FILES" <<'PY'
import os, sys
top, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(top, f"d{i % 1000:03d}")
    if i < 1000:
        os.makedirs(d)
    with open(os.path.join(d, f"f{i}"), "w") as f:
        f.write(f"file {i}\n")
PY
t1=$(date +%s.%N)
echo "wrote $FILES files in $(echo "$t1 - $t0" | bc) s" >&2
"$SCION" clone "$W/mnt/src" "$W/mnt/sandbox" >/dev/null
"$SCION" snapshot --name clean "$W/mnt/sandbox" >/dev/null
times=(); base=()
for r in $(seq 1 "$REPS"); do
  for k in 1 2 3; do echo "change $r" >> "$W/mnt/sandbox/d00$k/f$k"; done
  rm -f "$W/mnt/sandbox/d009/f9"
  sync
  # The same round trip with nothing to do: the command's own cost (start, socket, reply).
  a=$(date +%s%N)
  "$SCION" snapshot schedule --list "$W/mnt" >/dev/null
  b=$(date +%s%N)
  base+=($(( (b - a) / 1000 )))
  a=$(date +%s%N)
  "$SCION" rollback "$W/mnt/sandbox" --to clean >/dev/null
  b=$(date +%s%N)
  times+=($(( (b - a) / 1000 )))
done
# The rolled-back clone holds what the snapshot held.
cmp <(cat "$W/mnt/sandbox/d001/f1") <(echo "file 1") >/dev/null
[ -e "$W/mnt/sandbox/d009/f9" ]
n=$(find "$W/mnt/sandbox" -type f | wc -l)
[ "$n" = "$FILES" ] || { echo "the rolled-back clone holds $n files, not $FILES" >&2; exit 1; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
med=$(median "${times[@]}"); bmed=$(median "${base[@]}")
mkdir -p "$here/bench/results"
out="$here/bench/results/$(date +%Y%m%d-%H%M%S)-rollback.txt"
{
  echo "scion rollback of a clone of $FILES files (1,000 directories), 3 files changed and 1 removed before each"
  echo "runs (us): ${times[*]}"
  echo "median: $med us"
  echo "a command with nothing to do (snapshot schedule --list), same mount, runs (us): ${base[*]}"
  echo "its median: $bmed us"
} | tee "$out"
