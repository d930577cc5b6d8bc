#!/usr/bin/env bash
# `scion versions` of one file across N snapshots (issue 18: goal under 100 ms for 1,000).
# A file in a directory is rewritten every 10th snapshot (so N/10 distinct versions), then
# `scion versions --json` of it is timed REPS times, warm and after dropping the kernel's
# caches (the daemon's own stay). Run as root (drop_caches):
#
#   bench/versions.sh                 # N=1000, REPS=10, store on a fresh directory under /tmp
#   N=200 REPS=5 bench/versions.sh
#
# Prints the medians and writes bench/results/<stamp>-versions.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SCION=${SCION:-$here/target/release/scion}
N=${N:-1000}; REPS=${REPS:-10}
W=$(mktemp -d /tmp/scion-versions.XXXXXX)
cleanup() { "$SCION" umount "$W/mnt" >/dev/null 2>&1 || umount -l "$W/mnt" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/mnt"
"$SCION" init "$W/store" >/dev/null
"$SCION" mount "$W/store" "$W/mnt" >/dev/null
mkdir -p "$W/mnt/proj/src"
f=$W/mnt/proj/src/main.c
t0=$(date +%s.%N)
for i in $(seq 1 "$N"); do
  if (( i % 10 == 1 )); then head -c $((100000 + i)) /dev/urandom > "$f"; fi
  "$SCION" snapshot --name "s$i" "$W/mnt/proj" >/dev/null
done
t1=$(date +%s.%N)
echo "made $N snapshots in $(echo "$t1 - $t0" | bc) s" >&2
ms() { local a b; a=$(date +%s%N); "$@" >/dev/null; b=$(date +%s%N); echo $(( (b - a) / 1000 )); }
warm=(); cold=()
nv=$("$SCION" versions --json "$f" | wc -l)
for r in $(seq 1 "$REPS"); do
  warm+=("$(ms "$SCION" versions --json "$f")")
  sync; echo 3 > /proc/sys/vm/drop_caches
  cold+=("$(ms "$SCION" versions --json "$f")")
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f", m/1000}'; }
out="scion versions of one file across $N snapshots ($nv distinct versions), $REPS runs, $(date -u +%FT%TZ), $(git -C "$here" rev-parse --short HEAD):
  warm: median $(med "${warm[@]}") ms (runs: $(printf '%s ' "${warm[@]}")us)
  after drop_caches: median $(med "${cold[@]}") ms (runs: $(printf '%s ' "${cold[@]}")us)"
echo "$out"
mkdir -p "$here/bench/results"
echo "$out" > "$here/bench/results/$(date +%Y%m%d-%H%M%S)-versions.txt"
