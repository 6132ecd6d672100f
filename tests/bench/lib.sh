# lib.sh — what the benchmark scripts share (sourced by tests/bench/bench_mount.sh
# and tests/scale/*.sh): the command line, a scratch directory whose mount
# point is unmounted whatever happens, data kept between runs, starting and
# stopping FUSE daemons, timing, medians and ratios, and a daemon's CPU and
# memory.  Benchmarks print figures; they fail only when a command fails.
# shellcheck shell=bash disable=SC2034  # PY, OUT_MD, NOOP...: the scripts' variables

BENCH_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)   # tests/bench
PY=${PYTHON:-python3}
TICK=$(getconf CLK_TCK)

# bench_args "$@": CKPTFS (the binary, or a build directory's fs/cli/ckptfs)
# and OUT_MD (a file to write the report to, or empty).
bench_args() {
    [ $# -ge 1 ] || { echo "usage: $0 CKPTFS_OR_BUILD_DIR [OUT.md]" >&2; exit 2; }
    CKPTFS=$1
    [ -d "$CKPTFS" ] && CKPTFS=$CKPTFS/fs/cli/ckptfs
    CKPTFS=$(readlink -f "$CKPTFS")
    [ -x "$CKPTFS" ] || { echo "no ckptfs binary at $CKPTFS" >&2; exit 2; }
    OUT_MD=${2:-}
}

# bench_start NAME: needs root and /dev/fuse (else exit 2); T, a new scratch
# directory /tmp/ckptfs-NAME.XXXXXX, MNT=$T/mnt, PID (a daemon's) empty.  At
# exit MNT is unmounted, PID killed, cleanup_more run if the script has one,
# and T removed.
bench_start() {
    [ "$(id -u)" = 0 ] && [ -c /dev/fuse ] || { echo "needs root and /dev/fuse" >&2; exit 2; }
    BENCH_NAME=$1
    BENCH_T0=$(date +%s)
    T=$(mktemp -d "/tmp/ckptfs-$1.XXXXXX")
    MNT=$T/mnt
    mkdir -p "$MNT"
    PID=""
    trap bench_cleanup EXIT
    trap 'exit 1' INT TERM
}
bench_cleanup() {
    grep -q " $MNT fuse" /proc/mounts && { fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" || true; }
    [ -n "$PID" ] && { kill "$PID" 2>/dev/null || true; }
    declare -F cleanup_more >/dev/null && cleanup_more
    rm -rf "$T"
}
log() { echo "[$BENCH_NAME $(( $(date +%s) - BENCH_T0 )) s] $*" >&2; }

# made DIR MARK CMD...: unless MARK is there (data kept between runs), DIR
# removed, CMD run (it makes DIR), then MARK.
made() {
    [ -f "$2" ] && return 0
    log "making $1"
    rm -rf "$1"
    "${@:3}"
    touch "$2"
}
# quiet LOG CMD...: CMD with its output in LOG; if it fails, LOG is shown
# and the script exits 1.
quiet() {
    local out=$1
    shift
    "$@" >"$out" 2>&1 || { cat "$out" >&2; exit 1; }
}

# ---- FUSE daemons on MNT --------------------------------------------------
# start_daemon LOG CMD...: CMD (a daemon in the foreground) in the
# background, its stderr appended to LOG; PID is its.
start_daemon() {
    local out=$1
    shift
    "$@" 2>>"$out" &
    PID=$!
}
# wait_mount FSTYPE [LOG]: until MNT is mounted as FSTYPE; after 10 s the
# message, LOG's last lines and exit 1.
wait_mount() {
    for _ in $(seq 400); do grep -q " $MNT $1 " /proc/mounts && return 0; sleep 0.025; done
    echo "mount at $MNT ($1) did not come up" >&2
    [ -n "${2:-}" ] && tail -20 "$2" >&2
    exit 1
}
# unmount: MNT unmounted (lazily if it is busy), the daemon waited for, PID
# empty.
unmount() {
    fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"
    [ -n "$PID" ] && { wait "$PID" 2>/dev/null || true; }
    PID=""
}
# build_noop: NOOP, the do-nothing FUSE fs (tests/bench/noop_fuse.c), built in T.
build_noop() {
    NOOP=$T/noop_fuse
    cc -O2 -o "$NOOP" "$BENCH_LIB/noop_fuse.c" $(pkg-config --cflags --libs fuse3)
}
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# ---- a process's CPU and memory ------------------------------------------
# cpu_s PID: the CPU seconds (user + system) PID has used.
cpu_s() { awk -v t="$TICK" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
# rss_anon_kib PID: its resident anonymous memory (kB).
rss_anon_kib() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status"; }
# sample_anon PID SECONDS: rss_anon_kib PID every SECONDS while PID lives.
sample_anon() {
    while [ -e "/proc/$1/status" ]; do
        rss_anon_kib "$1" 2>/dev/null
        sleep "$2"
    done
}

# ---- figures ----------------------------------------------------------------
now() { date +%s.%N; }
# since T0 [FORMAT]: the seconds from T0 (a `now`) to now, printf FORMAT (%.3f).
since() { awk -v a="$(now)" -v b="$1" -v f="${2:-%.3f}" 'BEGIN {printf f, a - b}'; }
# median [FORMAT]: the median of the numbers on stdin (any number a line),
# printf FORMAT (%.4g); 0 for none.
median() {
    tr -s ' \t' '\n' | sort -g |
        awk -v f="${1:-%.4g}" 'NF {a[++n] = $1} END {printf f "\n", (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2}'
}
# ratio A B: A / B to 2 places (0 when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}'; }
# gbps BYTES SECONDS: GB/s (10^9 bytes) to 3 places.
gbps() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.3f", b / s / 1e9}'; }
