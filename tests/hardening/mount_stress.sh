#!/bin/sh
# mount_stress: many readers (threads and processes; pread, mmap, sequential,
# open/close churn) on a mount with a small cache for STRESS_SECONDS (default
# 45); every byte compared; daemon VmHWM under cache_size + 48 MiB; no
# descriptor leak; clean exit on SIGTERM.  Needs root and /dev/fuse (else
# skipped, 77).  See mount_stress.py.
set -eu
: "${CKPTFS:?set CKPTFS}"
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
    echo "SKIP: needs root and /dev/fuse"
    exit 77
fi
CACHE_MB=${STRESS_CACHE_MB:-4}
T=$(mktemp -d /tmp/ckptfs-stress.XXXXXX)
PID=""
cleanup() {
    if grep -q " $T/mnt " /proc/mounts; then
        fusermount3 -u "$T/mnt" 2>/dev/null || umount -l "$T/mnt" 2>/dev/null || true
    fi
    [ -n "$PID" ] && kill "$PID" 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
"$PY" "$HERE/gen_model.py" "$T/src" 2
"$CKPTFS" pack "$T/src" "$T/dst" 2>"$T/log.pack"
mkdir "$T/mnt"
"$CKPTFS" mount -f -o cache_size=${CACHE_MB}M,threads=8 "$T/dst" "$T/mnt" 2>"$T/log.mount" &
PID=$!
i=0
until grep -q " $T/mnt fuse.ckptfs " /proc/mounts; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 "$PID" 2>/dev/null; then
        echo "FAIL: mount did not come up"; cat "$T/log.mount"; exit 1
    fi
    sleep 0.05
done
rc=0
PACKED=$(du -cb "$T/dst" | tail -1 | cut -f1)
"$PY" "$HERE/mount_stress.py" "$T/mnt" "$T/src" "$PID" $((CACHE_MB << 20)) "${STRESS_SECONDS:-45}" "$PACKED" || rc=1
kill -TERM "$PID"
if ! wait "$PID"; then echo "FAIL: daemon exit status $? after SIGTERM"; rc=1; fi
PID=""
if [ $rc != 0 ]; then echo "--- daemon log"; tail -20 "$T/log.mount"; fi
[ $rc = 0 ] && echo "mount_stress: ok"
exit $rc
