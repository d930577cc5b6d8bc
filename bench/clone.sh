#!/usr/bin/env bash
# Clone-latency benchmark (issue 3): `scion clone` against btrfs subvolume snapshots, btrfs and
# XFS `cp --reflink`, ext4 `cp -a` and overlayfs, in one run, each target on a fresh loop-device
# filesystem. It reuses the targets, helpers and conventions of ../shared/bench/peers.sh (sourced
# up to its main()) and adds two workloads. Run as root:
#
#   bench/clone.sh                                   # all targets, full sizes (~40 min)
#   bench/clone.sh btrfs-snap overlay scion          # some targets
#   SKIP_BUILD=1 SCION=/path/to/scion bench/clone.sh scion
#   SCALE_SIZES="1000 10000" CONSEC=50 bench/clone.sh btrfs-snap overlay ext4-copy   # quick
#   bench/clone.sh --cleanup                         # undo the mounts/loops of a killed run
#
# Workloads, per target, each on its own fresh filesystem:
#   scale   trees of SCALE_SIZES files are made (peers.sh's `scale` trees: 4 KiB random files,
#           fan-out 30, same seeds) and synced; then each tree is cloned REPS times in each of
#           SCALE_MODES, every clone followed by `sync` (clone+sync) and dropped again (timed,
#           +sync) before the next:
#             cold     sync + drop_caches before the clone: peers.sh's convention (workload
#                      "scale" in the CSV, comparable with ../shared/bench/README.md). NB this also
#                      evicts the clone tool's own executable: a cold exec of `btrfs` costs ~10 ms
#                      and of the 25 MB scion binary ~20 ms here, whatever the tree size.
#             warmbin  as cold, then the clone tool's executable and shared libraries are read
#                      back into the page cache (untimed): a cold tree, a warm tool ("scale-warmbin")
#             warm     no cache drop ("scale-warm")
#           Per-file copy targets (COPY_TARGETS) only get the sizes <= COPY_MAX: their clone is
#           linear in the tree (100,000 files take 7-18 s), so 1,000,000 files would add ~15-30
#           minutes per target. COPY_MAX=1000000 runs them all.
#   consec  one tree of CONSEC_FILES files, then CONSEC clones of it, one after another, all
#           kept (clone i+1 is made while clones 1..i exist). Each clone is timed alone and then
#           followed by a `sync` (recorded as clone+sync), so that writeback of one clone does not
#           land in the next one's time. Caches are NOT dropped (sync + drop_caches + re-reading
#           the tool per clone would take longer than most clones; `scale` covers cold clones):
#           this series is warm. CONSEC_DROPCACHES=1 drops them before every clone instead.
#           COPY_TARGETS make at most CONSEC_COPY_MAX clones (each is a full copy: 1,000 x 1,000
#           files would be 1M files / 4 GiB).
#
# Environment (defaults):
#   CLONE_WORKLOADS="scale consec"
#   SCALE_SIZES="1000 10000 100000 1000000"   REPS=3   SCALE_MODES="cold warmbin warm"
#   COPY_MAX=100000  COPY_TARGETS="ext4-copy btrfs-reflink xfs-reflink"
#   CONSEC=1000  CONSEC_FILES=1000  CONSEC_COPY_MAX=100  CONSEC_DROPCACHES=0
#   SKIP_BUILD=1        do not run cargo build (use SCION, default target/release/scion)
#   NO_INSTALL=1        do not apt-get missing tools (btrfs-progs, xfsprogs, python3-matplotlib)
#   KEEP_RESULTS=0      do not copy the results to bench/results/
#   PB=/tmp/peerbench   work dir; loop images are sized per target from the trees (sparse)
# Results: $PB/clone-results.{csv,txt,png}, copied to bench/results/<timestamp>-clone.*;
# log in $PB/clone-run.log. The issue's targets are checked at the end of the text report;
# `python3 bench/clone_report.py A.csv B.csv` merges runs (e.g. scion next to an earlier peer run).
set -u -o pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peers=${PEERS:-$here/../shared/bench/peers.sh}
report=$here/bench/clone_report.py
[ -f "$peers" ] || { echo "bench/clone.sh: $peers not found (the shared benchmark scripts)" >&2; exit 1; }

ALL_TARGETS="btrfs-snap btrfs-reflink xfs-reflink ext4-copy overlay scion"
SCALE_SIZES=${SCALE_SIZES:-"1000 10000 100000 1000000"}
COPY_TARGETS=${COPY_TARGETS:-"ext4-copy btrfs-reflink xfs-reflink"}
COPY_MAX=${COPY_MAX:-100000}
SCALE_MODES=${SCALE_MODES:-"cold warmbin warm"}
CLONE_WORKLOADS=${CLONE_WORKLOADS:-"scale consec"}
CONSEC=${CONSEC:-1000}
CONSEC_FILES=${CONSEC_FILES:-1000}
CONSEC_COPY_MAX=${CONSEC_COPY_MAX:-100}
CONSEC_DROPCACHES=${CONSEC_DROPCACHES:-0}
PB=${PB:-/tmp/peerbench}
CSV=${CSV:-$PB/clone-results.csv}
TXT=${TXT:-$PB/clone-results.txt}
PNG=${PNG:-$PB/clone-results.png}
LOG=${LOG:-$PB/clone-run.log}
SCION=${SCION:-$here/target/release/scion}

# peers.sh is a script, not a library: its function main() and the lines after it run the
# benchmark. Source everything above main() (settings, helpers, targets, workloads, run_target).
if ! grep -q '^main() {$' "$peers"; then
  echo "bench/clone.sh: no 'main() {' line in $peers; its layout changed" >&2; exit 1
fi
# shellcheck disable=SC1090
source <(sed '/^main() {$/,$d' "$peers")
for f in run_target mkloopfs release_loopfs cleanup_all call timeit rec log warn env_info; do
  declare -F "$f" >/dev/null || { echo "bench/clone.sh: $peers no longer defines $f" >&2; exit 1; }
done
# peers.sh derives its own directory from BASH_SOURCE, which is /dev/fd/N when sourced like this
HERE=$(cd "$(dirname "$peers")" && pwd)
UTIL="python3 $HERE/peerbench_util.py"
# own bookkeeping, so that this script's start-up cleanup never touches a peers.sh run's mounts
STATE=$PB/clone-state; IMGDIR=$PB/clone-img; MNTDIR=$PB/clone-mnt
MKFS_EXT4_BASE=("${MKFS_EXT4[@]}")

is_copy_target() { [[ " $COPY_TARGETS " == *" $1 "* ]]; }

# size_fs TARGET NFILES_ALIVE : IMG_GB and ext4 inode count for a fs that must hold NFILES_ALIVE
# files of SCALE_FILE_BYTES at once (sparse images: only what is written takes host space)
size_fs() {
  local t=$1 files=$2 fb=$(( (SCALE_FILE_BYTES + 4095) / 4096 * 4096 )) factor=1.3
  [[ $t == scion ]] && factor=2   # the store's packs, journal and checkpoints: leave headroom
  IMG_GB=$(awk -v n="$files" -v b="$fb" -v f="$factor" \
    'BEGIN{g = int(n * (b + 2048) * f / 1073741824) + 3; if (g < 6) g = 6; print g}')
  local inodes=$(( files + files / 10 + 65536 ))
  MKFS_EXT4=("${MKFS_EXT4_BASE[@]}")
  (( inodes > IMG_GB * 65536 )) && MKFS_EXT4+=(-N "$inodes")   # default: one inode per 16 KiB
  return 0
}

# ----------------------------------------------------------------------------- scale workload
# the executables a target's clone runs (their pages are what drop_caches makes a clone re-read)
clone_bins() { case $T in btrfs-*) echo btrfs ;; overlay) echo mkdir mount ;; scion) echo "$SCION" ;; esac; echo cp; }
warm_bins() { local b p; for b in "$@"; do p=$(command -v "$b") || continue
  # shellcheck disable=SC2046
  cat "$p" $(ldd "$p" 2>/dev/null | grep -o '/[^ ]*') > /dev/null 2>&1; done; return 0; }

wl_scale() {
  local base=$TMNT/scale n rep mode wl src dst c cs d
  mkdir -p "$base"
  for n in $SCALE_SIZES; do
    call mktree "$base/t$n" || return 1
    timeit $UTIL mksmall "$base/t$n" "$n" "$SCALE_FANOUT" "$SCALE_FILE_BYTES" "$n" || return 1
    log "[$T/scale] created $n files in ${T_MS} ms"
    rec scale-tree "$T" "$n" 1 create_ms "$T_MS"
  done
  call sync
  for n in $SCALE_SIZES; do
    src=$base/t$n
    for ((rep = 1; rep <= REPS; rep++)); do
      for mode in $SCALE_MODES; do
        case $mode in
          cold)    wl=scale; call dropcaches ;;
          warmbin) wl=scale-warmbin; call dropcaches; warm_bins $(clone_bins) ;;
          warm)    wl=scale-warm ;;
          *) warn "unknown SCALE_MODES entry $mode"; return 1 ;;
        esac
        dst=$base/t$n.$mode$rep
        timeit call clone "$src" "$dst" || { warn "clone failed"; return 1; }; c=$T_MS
        timeit call sync; cs=$(fadd "$c" "$T_MS")
        timeit call drop "$dst"; d=$T_MS; timeit call sync; d=$(fadd "$d" "$T_MS")
        log "[$T/scale] n=$n rep=$rep $mode: clone=${c}ms clone+sync=${cs}ms drop+sync=${d}ms"
        rec "$wl" "$T" "$n" "$rep" clone_ms "$c"; rec "$wl" "$T" "$n" "$rep" clone_sync_ms "$cs"
        rec "$wl" "$T" "$n" "$rep" drop_ms "$d"
      done
    done
  done
  return 0
}

# ----------------------------------------------------------------------------- consec workload
wl_consec() {
  local base=$TMNT/consec n=$CONSEC i src dst c cs u0 u1
  is_copy_target "$T" && (( n > CONSEC_COPY_MAX )) && n=$CONSEC_COPY_MAX
  mkdir -p "$base"; src=$base/src
  call mktree "$src" || return 1
  timeit $UTIL mksmall "$src" "$CONSEC_FILES" "$SCALE_FANOUT" "$SCALE_FILE_BYTES" 7 || return 1
  log "[$T/consec] created $CONSEC_FILES files in ${T_MS} ms; $n consecutive clones"
  rec consec "$T" tree 1 files "$CONSEC_FILES"; rec consec "$T" tree 1 dropcaches "$CONSEC_DROPCACHES"
  call sync; u0=$(call used)
  for ((i = 1; i <= n; i++)); do
    dst=$(printf '%s/c%04d' "$base" "$i")
    [[ $CONSEC_DROPCACHES == 1 ]] && call dropcaches
    timeit call clone "$src" "$dst" || { warn "clone $i failed"; return 1; }; c=$T_MS
    timeit call sync; cs=$(fadd "$c" "$T_MS")
    rec consec "$T" "$i" 1 clone_ms "$c"; rec consec "$T" "$i" 1 clone_sync_ms "$cs"
    (( i == 1 || i % 100 == 0 || i == n )) && log "[$T/consec] clone $i: ${c} ms (+sync ${cs} ms)"
  done
  u1=$(call used)
  rec consec "$T" all 1 space_kib_per_clone $(( (u1 - u0) / 1024 / n ))
  return 0
}

# ----------------------------------------------------------------------------- main
# a python3 with matplotlib for the plot (a pyenv python3 first on PATH may lack Debian's)
plot_python() { local p; for p in python3 /usr/bin/python3; do
  "$p" -c 'import matplotlib' 2>/dev/null && { echo "$p"; return 0; }; done; return 1; }
have_cmds() { local c; for c in "$@"; do command -v "$c" >/dev/null || return 1; done; }
install_missing() {
  [[ ${NO_INSTALL:-0} == 1 ]] && return 0
  local pk=() t
  for t in "${targets[@]}"; do
    case $t in
      btrfs-*) have_cmds mkfs.btrfs btrfs || pk+=(btrfs-progs) ;;
      xfs-*) have_cmds mkfs.xfs || pk+=(xfsprogs) ;;
      scion) have_cmds fusermount3 || pk+=(fuse3) ;;
    esac
  done
  have_cmds mkfs.ext4 || pk+=(e2fsprogs)
  plot_python >/dev/null || pk+=(python3-matplotlib)
  [[ ${#pk[@]} -gt 0 ]] || return 0
  readarray -t pk < <(printf '%s\n' "${pk[@]}" | sort -u)
  log "installing ${pk[*]}"
  { apt-get install -y -qq "${pk[@]}" || { apt-get update -qq && apt-get install -y -qq "${pk[@]}"; }; } \
    >/dev/null 2>&1 </dev/null || warn "apt-get install ${pk[*]} failed"
}

main() {
  [[ $(id -u) == 0 ]] || { echo "bench/clone.sh: run as root" >&2; exit 1; }
  mkdir -p "$PB" "$STATE" "$IMGDIR" "$MNTDIR"
  [[ ${1:-} == --cleanup ]] && { cleanup_all; exit 0; }
  targets=("$@"); [[ ${#targets[@]} -gt 0 ]] || read -r -a targets <<< "$ALL_TARGETS"
  local t ok=()
  for t in "${targets[@]}"; do
    declare -F "tgt_${t//-/_}_setup" >/dev/null && ok+=("$t") || warn "unknown target $t (known: $ALL_TARGETS)"
  done
  targets=("${ok[@]}")
  [[ ${#targets[@]} -gt 0 ]] || exit 1
  export DEBIAN_FRONTEND=noninteractive
  install_missing
  if [[ " ${targets[*]} " == *" scion "* ]]; then
    if [[ ${SKIP_BUILD:-0} != 1 ]]; then
      log "cargo build --release --locked"
      (cd "$here" && cargo build --release --locked -q) || { warn "cargo build failed"; exit 1; }
      SCION=$here/target/release/scion
    fi
    [[ -x $SCION ]] || command -v "$SCION" >/dev/null || { warn "no scion binary at $SCION"; exit 1; }
  fi
  cleanup_all   # leftovers of a killed earlier run (only what this script recorded)
  trap cleanup_all EXIT
  trap 'exit 130' INT TERM
  echo "workload,target,param,rep,metric,value" > "$CSV"
  { env_info
    echo "clone.sh: loop images sized per target and workload (see the log); targets: ${targets[*]};" \
         "COPY_TARGETS='$COPY_TARGETS' COPY_MAX=$COPY_MAX;" \
         "SCALE_MODES='$SCALE_MODES' CONSEC=$CONSEC CONSEC_FILES=$CONSEC_FILES CONSEC_COPY_MAX=$CONSEC_COPY_MAX CONSEC_DROPCACHES=$CONSEC_DROPCACHES"
    [[ " ${targets[*]} " == *" scion "* ]] && echo "scion: $SCION ($("$SCION" --version 2>/dev/null); git $(git -C "$here" describe --always --dirty 2>/dev/null))"
  } > "$PB/clone-env.txt"
  cat "$PB/clone-env.txt" >&2
  local all_sizes=$SCALE_SIZES t0=$EPOCHREALTIME n sizes skipped alive maxn
  for t in "${targets[@]}"; do
    sizes=; skipped=; alive=0; maxn=0
    for n in $all_sizes; do
      if is_copy_target "$t" && (( n > COPY_MAX )); then skipped+=" $n"; rec note "$t" scale "$n" skipped_size "$n"; continue; fi
      sizes+=" $n"; alive=$(( alive + n )); (( n > maxn )) && maxn=$n
    done
    if [[ -n $skipped ]]; then
      log "NOTE: $t: sizes${skipped} not run (per-file copy; over COPY_MAX=$COPY_MAX; COPY_MAX=1000000 runs them)"
    fi
    if [[ -n $sizes && " $CLONE_WORKLOADS " == *" scale "* ]]; then
      is_copy_target "$t" && alive=$(( alive + maxn ))   # a clone is a second copy
      SCALE_SIZES=${sizes# }; size_fs "$t" "$alive"; WORKLOADS=scale
      log "[$t/scale] sizes '$SCALE_SIZES', image ${IMG_GB}G"
      run_target "$t"
    fi
    if (( CONSEC > 0 )) && [[ " $CLONE_WORKLOADS " == *" consec "* ]]; then
      n=$CONSEC; is_copy_target "$t" && (( n > CONSEC_COPY_MAX )) && n=$CONSEC_COPY_MAX
      if is_copy_target "$t"; then alive=$(( CONSEC_FILES * (n + 1) )); else alive=$(( CONSEC_FILES * 2 )); fi
      size_fs "$t" "$alive"; WORKLOADS=consec
      log "[$t/consec] $n clones of $CONSEC_FILES files, image ${IMG_GB}G"
      run_target "$t"
    fi
  done
  SCALE_SIZES=$all_sizes
  local total; total=$(ms_between "$t0" "$EPOCHREALTIME")
  { cat "$PB/clone-env.txt"
    echo "total wall: $(awk -v m="$total" 'BEGIN{printf "%.1f", m/60000}') min"; echo
    rm -f "$PNG"; "$(plot_python || echo python3)" "$report" "$CSV" --plot "$PNG"; } > "$TXT"
  cat "$TXT"
  if [[ ${KEEP_RESULTS:-1} == 1 ]]; then
    local stamp; stamp=$(date +%Y%m%d-%H%M%S); mkdir -p "$here/bench/results"
    cp "$CSV" "$here/bench/results/$stamp-clone.csv"; cp "$TXT" "$here/bench/results/$stamp-clone.txt"
    [[ -s $PNG ]] && cp "$PNG" "$here/bench/results/$stamp-clone.png"
    log "CSV: $CSV  report: $TXT  plot: $PNG  (copies in bench/results/$stamp-clone.*)"
  fi
}

mkdir -p "$PB"
case "${1:-}" in
  --cleanup) main "$@" ;;
  -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' ;;
  *) main "$@" 2>&1 | tee "$LOG" ;;
esac
