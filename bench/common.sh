# Shared by bench/dookubench, bench/container-clone and bench/everyday; sourced at the top level
# of those scripts (not from a function: peers.sh's `declare -A` would then make locals).
#
# Before sourcing, a script sets NAME (the prefix of its files in $PB) and any defaults it wants
# to differ from peers.sh's (e.g. ROUNDS, REPS). This file then
#   - sources ../shared/bench/peers.sh up to its main() (settings, helpers, targets, workloads,
#     run_target), as bench/clone.sh does, with this script's own bookkeeping ($PB/NAME-state,
#     -img, -mnt) so that its start-up cleanup and --cleanup never touch another script's mounts;
#   - keeps the scion daemon's log: STORE/daemon.log of every scion filesystem is appended to
#     $PB/NAME-scion-daemon.log before the loop image is thrown away;
#   - defines pb_begin (root check, targets, installs, build, cleanup trap, CSV header, env file),
#     pb_keep (copy results to bench/results/<stamp>-...) and pb_dispatch (--cleanup, --help, run).
# shellcheck shell=bash disable=SC2034
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
peers=${PEERS:-$here/../shared/bench/peers.sh}
[ -f "$peers" ] || { echo "bench/$NAME: $peers not found (the shared benchmark scripts)" >&2; exit 1; }
PB=${PB:-/tmp/peerbench}
CSV=${CSV:-$PB/$NAME-results.csv}
TXT=${TXT:-$PB/$NAME-results.txt}
LOG=${LOG:-$PB/$NAME-run.log}
SCION=${SCION:-$here/target/release/scion}
REPORT=$here/bench/issue5_report.py

# peers.sh is a script, not a library: its function main() and the lines after it run the
# benchmark. Source everything above main().
if ! grep -q '^main() {$' "$peers"; then
  echo "bench/$NAME: no 'main() {' line in $peers; its layout changed" >&2; exit 1
fi
# shellcheck disable=SC1090
source <(sed '/^main() {$/,$d' "$peers")
for f in run_target mkloopfs release_loopfs cleanup_all call timeit rec log warn env_info fadd; do
  declare -F "$f" >/dev/null || { echo "bench/$NAME: $peers no longer defines $f" >&2; exit 1; }
done
# peers.sh derives its own directory from BASH_SOURCE, which is /dev/fd/N when sourced like this
HERE=$(cd "$(dirname "$peers")" && pwd)
UTIL="python3 $HERE/peerbench_util.py"
STATE=$PB/$NAME-state; IMGDIR=$PB/$NAME-img; MNTDIR=$PB/$NAME-mnt

# scion-wt: scion mounted with `-o cache=writethrough` (the kernel sends each write(2) as it is
# made, so a small write into an uncached page is not preceded by a read of the page; small
# buffered writes each cost a round trip instead). Everything but the mount is scion's.
tgt_scion_wt_setup() {
  mkloopfs scion-wt-backing "${MKFS_EXT4[@]}" || return 1
  SCION_BACK=$TMNT; mkdir -p "$SCION_BACK/store" "$MNTDIR/scion-wt"
  "$SCION" init "$SCION_BACK/store" >/dev/null || return 1
  "$SCION" mount -o cache=writethrough "$SCION_BACK/store" "$MNTDIR/scion-wt" || return 1
  local i; for i in $(seq 100); do mountpoint -q "$MNTDIR/scion-wt" && break; sleep 0.1; done
  track_mount "$MNTDIR/scion-wt"; TMNT=$MNTDIR/scion-wt
}
for op in clone drop used teardown workloads; do
  eval "tgt_scion_wt_$op() { tgt_scion_$op \"\$@\"; }"
done
unset op
# any scion target among the given ones
has_scion() { [[ " $* " == *" scion "* || " $* " == *" scion-wt "* ]]; }

# keep the daemon's log of every scion store: release_loopfs is what throws the image away, and
# tgt_scion_teardown calls it after the unmount (so the log is complete) with TMNT = backing fs
eval "$(declare -f release_loopfs | sed '1s/release_loopfs/peers_release_loopfs/')"
release_loopfs() {
  if [[ ${T:-} == scion* && -f ${TMNT:-}/store/daemon.log ]]; then
    { echo "===== $T, workload ${w:-?}, $(date -Is): $TMNT/store/daemon.log"
      cat "$TMNT/store/daemon.log"; } >> "$PB/$NAME-scion-daemon.log"
  fi
  peers_release_loopfs
}

have_cmds() { local c; for c in "$@"; do command -v "$c" >/dev/null || return 1; done; }
# a python3 with matplotlib for the plots (a pyenv python3 first on PATH may lack Debian's)
plot_python() { local p; for p in python3 /usr/bin/python3; do
  "$p" -c 'import matplotlib' 2>/dev/null && { echo "$p"; return 0; }; done; return 1; }
report_python() { plot_python || echo python3; }

# pb_install PKG... : apt-get install the packages (unless NO_INSTALL=1); failures are warnings
pb_install() {
  [[ ${NO_INSTALL:-0} == 1 || $# == 0 ]] && return 0
  local pk; readarray -t pk < <(printf '%s\n' "$@" | grep . | sort -u)
  [[ ${#pk[@]} -gt 0 ]] || return 0
  log "installing ${pk[*]}"
  { apt-get install -y -qq "${pk[@]}" || { apt-get update -qq && apt-get install -y -qq "${pk[@]}"; }; } \
    >/dev/null 2>&1 </dev/null || warn "apt-get install ${pk[*]} failed"
}
# target_pkgs TARGET... : the Debian packages the targets' tools come from, if missing
target_pkgs() {
  local t
  for t in "$@"; do
    case $t in
      btrfs-*) have_cmds mkfs.btrfs btrfs || echo btrfs-progs ;;
      xfs-*) have_cmds mkfs.xfs || echo xfsprogs ;;
      scion|scion-wt) have_cmds fusermount3 || echo fuse3 ;;
      bindfs*) have_cmds bindfs || echo bindfs ;;
    esac
  done
  have_cmds mkfs.ext4 || echo e2fsprogs
  plot_python >/dev/null || echo python3-matplotlib
}

# pb_begin ALL_TARGETS [TARGET...] : sets the global array `targets` (default: ALL_TARGETS),
# installs what the targets need, builds scion (unless SKIP_BUILD=1), cleans up what a killed
# run of this script left, arms the cleanup trap, writes the CSV header and $PB/NAME-env.txt.
# The caller installs its own extra packages before calling (EXTRA_PKGS).
pb_begin() {
  [[ $(id -u) == 0 ]] || { echo "bench/$NAME: run as root" >&2; exit 1; }
  local all=$1; shift
  mkdir -p "$PB" "$STATE" "$IMGDIR" "$MNTDIR"
  targets=("$@"); [[ ${#targets[@]} -gt 0 ]] || read -r -a targets <<< "$all"
  local t ok=()
  for t in "${targets[@]}"; do
    declare -F "tgt_${t//-/_}_setup" >/dev/null && ok+=("$t") || warn "unknown target $t (known: $all)"
  done
  targets=("${ok[@]}")
  [[ ${#targets[@]} -gt 0 ]] || exit 1
  export DEBIAN_FRONTEND=noninteractive
  local pk; readarray -t pk < <(target_pkgs "${targets[@]}"; printf '%s\n' ${EXTRA_PKGS:-})
  pb_install "${pk[@]}"
  if has_scion "${targets[@]}"; then
    if [[ ${SKIP_BUILD:-0} != 1 ]]; then
      log "cargo build --release --locked"
      (cd "$here" && cargo build --release --locked -q) || { warn "cargo build failed"; exit 1; }
      SCION=$here/target/release/scion
    fi
    [[ -x $SCION ]] || command -v "$SCION" >/dev/null || { warn "no scion binary at $SCION"; exit 1; }
  fi
  has_scion "${targets[@]}" && pb_enable_uring
  cleanup_all   # leftovers of a killed earlier run (only what this script recorded)
  trap cleanup_all EXIT
  trap 'exit 130' INT TERM
  rm -f "$PB/$NAME-scion-daemon.log"
  echo "workload,target,param,rep,metric,value" > "$CSV"
  { env_info
    echo "bench/$NAME: targets: ${targets[*]}"
    echo "fuse enable_uring: $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo absent)"
    has_scion "${targets[@]}" &&
      echo "scion: $SCION ($("$SCION" --version 2>/dev/null); git $(git -C "$here" describe --always --dirty 2>/dev/null))"
  } > "$PB/$NAME-env.txt"
  cat "$PB/$NAME-env.txt" >&2
  T0=$EPOCHREALTIME
}

# pb_enable_uring : lets scion serve FUSE over io_uring (the fuse module's enable_uring, off by
# default; scion mounts with uring=auto use it when on). URING=0 leaves the parameter alone.
pb_enable_uring() {
  local p=/sys/module/fuse/parameters/enable_uring
  [[ ${URING:-1} == 1 && -w $p ]] || return 0
  [[ $(cat "$p") == Y ]] || { log "turning on FUSE over io_uring ($p = Y)"; echo Y > "$p"; }
}

# pb_env_footer : the env file and total wall time, for the top of the text report
pb_env_footer() {
  cat "$PB/$NAME-env.txt"
  echo "total wall: $(awk -v m="$(ms_between "$T0" "$EPOCHREALTIME")" 'BEGIN{printf "%.1f", m/60000}') min"
  [[ -s $PB/$NAME-scion-daemon.log ]] && echo "scion daemon logs: $PB/$NAME-scion-daemon.log"
  echo
}

# pb_keep SRC:SUFFIX... : copy results to bench/results/<stamp>-SUFFIX (unless KEEP_RESULTS=0)
pb_keep() {
  [[ ${KEEP_RESULTS:-1} == 1 ]] || return 0
  local stamp a; stamp=$(date +%Y%m%d-%H%M%S); mkdir -p "$here/bench/results"
  for a in "$@"; do [[ -s ${a%%:*} ]] && cp "${a%%:*}" "$here/bench/results/$stamp-${a#*:}"; done
  log "results copied to bench/results/$stamp-*"
}

# pb_dispatch "$@" : --cleanup, -h/--help (this script's header), or main "$@" logged to $LOG
pb_dispatch() {
  mkdir -p "$PB"
  case "${1:-}" in
    --cleanup) [[ $(id -u) == 0 ]] || { echo "run as root" >&2; exit 1; }
               mkdir -p "$STATE"; cleanup_all; exit 0 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    *) main "$@" 2>&1 | tee "$LOG" ;;
  esac
}
