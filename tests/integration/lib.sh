# lib.sh — shared setup of the mount integration tests (sourced).
# Needs: CKPTFS (the binary), optionally PYTHON, CKPT_EXTENTS, CKPTFS_PACK
# (a different binary for `pack`, e.g. to run only the daemon under ASan).
# Skips (77) without root or /dev/fuse.  Every test gets its own temporary directory and
# unmounts whatever it mounted on exit, even on failure.
set -eu
: "${CKPTFS:?set CKPTFS to the ckptfs binary}"
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$HERE/../lib${PYTHONPATH:+:$PYTHONPATH}" # tests/lib: shared Python checks
if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
    echo "SKIP: needs root and /dev/fuse"
    exit 77
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-it.XXXXXX")
MOUNTS=""
PIDS=""

cleanup() {
    for m in $MOUNTS; do
        if is_mounted "$m" || ! stat "$m" >/dev/null 2>&1; then
            fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        fi
    done
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "FAIL: $*" >&2
    for f in "$T"/log.*; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
    exit 1
}

is_mounted() { grep -q " $1 fuse.ckptfs " /proc/mounts; }

wait_mounted() {
    for _ in $(seq 200); do is_mounted "$1" && return 0; sleep 0.05; done
    fail "$1 did not get mounted"
}

wait_unmounted() {
    for _ in $(seq 200); do is_mounted "$1" || return 0; sleep 0.05; done
    fail "$1 is still mounted"
}

# make_model: $T/src (generated) packed into $T/dst.
make_model() {
    "$PY" "$HERE/gen_model.py" "$T/src"
    "${CKPTFS_PACK:-$CKPTFS}" pack "$T/src" "$T/dst" >"$T/log.pack" 2>&1 || fail "ckptfs pack failed"
}

# make_pristine: $T/src holding a.bin and b.bin (3,000,000 random bytes
# each) and c.bin (500,000), packed into $T/pristine, where a.bin.ckpt and
# b.bin.ckpt have the same size: another valid pack of a.bin's size to put
# in its place (the tests of a packed file replaced under the mount).
make_pristine() {
    mkdir -p "$T/src"
    head -c 3000000 /dev/urandom >"$T/src/a.bin"
    head -c 3000000 /dev/urandom >"$T/src/b.bin"
    head -c 500000 /dev/urandom >"$T/src/c.bin"
    "$CKPTFS" pack "$T/src" "$T/pristine" >"$T/log.pack" 2>&1 || fail "pack"
    [ "$(stat -c %s "$T/pristine/a.bin.ckpt")" = "$(stat -c %s "$T/pristine/b.bin.ckpt")" ] ||
        fail "a.bin.ckpt and b.bin.ckpt differ in size"
}

# new_mnt NAME: an empty mount point $T/NAME, unmounted at exit.
new_mnt() {
    mkdir -p "$T/$1"
    MOUNTS="$MOUNTS $T/$1"
}

# mount_fg NAME [ARGS...]: mount $T/dst at $T/NAME with -f in the background;
# sets PID; stderr goes to $T/log.NAME.
mount_fg() {
    _n=$1
    shift
    new_mnt "$_n"
    "$CKPTFS" mount -f "$@" "$T/dst" "$T/$_n" 2>"$T/log.$_n" &
    PID=$!
    PIDS="$PIDS $PID"
    wait_mounted "$T/$_n"
}

# mount_pristine NAME [ARGS...]: $T/dst a new copy of $T/pristine, mounted
# as mount_fg does.
mount_pristine() {
    rm -rf "$T/dst"
    cp -a "$T/pristine" "$T/dst"
    mount_fg "$@"
}

# stop_daemon SIG PID: send SIG, wait (at most 10 s) for a clean exit.
stop_daemon() {
    kill -"$1" "$2"
    for _ in $(seq 200); do
        kill -0 "$2" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$2" 2>/dev/null; then
        kill -KILL "$2"
        fail "daemon ignored SIG$1"
    fi
    wait "$2" || fail "daemon exit status $? after SIG$1"
}
