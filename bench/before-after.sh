#!/bin/sh
# One run of a small workload on a fresh store, for comparing two scion builds side by side
# (alternate them, several runs each, and compare medians of the whole run's wall time):
#   bench/before-after.sh SCION_BINARY untar|write|clone|stat
# untar: /tmp/ba/tree.tar (5,000 files of 0.1-8 KiB in 50 directories: make it first, see
# docs/benchmarks.md); write: 256 MiB + fsync; clone: untar then 10 clones; stat: untar then
# three stat passes over every file.
set -e
B=$1; W=$2; D=$(mktemp -d /tmp/ba/w.XXXX)
$B init $D/st >/dev/null; mkdir $D/mnt; $B mount $D/st $D/mnt >/dev/null
case $W in
  untar) tar xf /tmp/ba/tree.tar -C $D/mnt; sync -f $D/mnt/d1/f1 ;;
  write) dd if=/dev/zero of=$D/mnt/big bs=1M count=256 conv=fsync status=none ;;
  clone) tar xf /tmp/ba/tree.tar -C $D/mnt; for i in 1 2 3 4 5 6 7 8 9 10; do $B clone $D/mnt/d$i $D/mnt/c$i >/dev/null; done ;;
  stat) tar xf /tmp/ba/tree.tar -C $D/mnt; for i in 1 2 3; do find $D/mnt -type f -exec stat -c %s {} + >/dev/null; done ;;
esac
$B umount $D/mnt >/dev/null; rm -rf $D
