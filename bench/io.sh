#!/usr/bin/env bash
# FUSE-cost benchmark (issue: core): scion against native ext4 and a naive FUSE passthrough
# (bindfs), in one run, each on a fresh ext4 loop filesystem. Workloads (../shared/bench/peers.sh
# "io"): dd 1 GiB write + fsync, dd 1 GiB cold read, untar of ~20k files, find and ls -lR cold
# and warm, rm -rf, fio 4 KiB random write / read. Run as root:
#
#   bench/io.sh                  # IO_REPS=5 by default; results in /tmp/peerbench/results.txt
#   IO_REPS=3 bench/io.sh
#
# The ratios against ext4-native are what docs/benchmarks.md reports.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peers=${PEERS:-$here/../shared/bench/peers.sh}
[ -f "$peers" ] || { echo "bench/io.sh: $peers not found (the shared benchmark scripts)" >&2; exit 1; }
need=()
for c in bindfs fio mkfs.ext4 fusermount3; do command -v $c >/dev/null || need+=("$c"); done
if [ ${#need[@]} -gt 0 ]; then
  pk=(); for c in "${need[@]}"; do case $c in mkfs.ext4) pk+=(e2fsprogs);; fusermount3) pk+=(fuse3);; *) pk+=("$c");; esac; done
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pk[@]}" >/dev/null
fi
(cd "$here" && cargo build --release --locked -q)
# scion serves FUSE over io_uring when the fuse module allows it (URING=0: leave it as it is)
uring=/sys/module/fuse/parameters/enable_uring
if [[ ${URING:-1} == 1 && -w $uring ]]; then { echo Y > "$uring"; } 2>/dev/null || true; fi
echo "fuse enable_uring: $(cat "$uring" 2>/dev/null || echo absent)"
export SCION="$here/target/release/scion"
WORKLOADS=io bash "$peers" ext4-native bindfs scion
python3 "$(dirname "$peers")/peerbench_util.py" summarize /tmp/peerbench/results.csv 2>/dev/null || cat /tmp/peerbench/results.txt
