#!/bin/sh
# mount_truncated: a packed file shrinks while mounted (someone truncates it).
# The daemon maps packed files by default: loads past the new end raise
# SIGBUS, which must turn into EIO for the reads touching it, never a crash
# and never wrong bytes; once the daemon sees the file's new size, every
# read and open of it is EIO (mount_replaced.sh); it keeps serving every
# other file exactly.
# Run once with the mapping (default) and once with -o nommap (pread).
. "$(dirname "$0")/lib.sh"
make_model
SHARD=model-00001-of-00003.safetensors
cp -a "$T/dst" "$T/pristine"
MODES="default nommap"
# A TSan build does not survive jumping out of the SIGBUS handler (its
# runtime kills the daemon on the next fault; not yet understood): under
# TSan only the pread path is checked here (ASan and plain builds check both).
if grep -qa __tsan_init "$CKPTFS"; then
    echo "note: TSan build: the mapped (SIGBUS) case is skipped"
    MODES=nommap
fi
for mode in $MODES; do
    rm -rf "$T/dst"
    cp -a "$T/pristine" "$T/dst"
    if [ "$mode" = nommap ]; then mount_fg "m$mode" -o nommap; else mount_fg "m$mode"; fi
    "$PY" - "$T/m$mode" "$T/src" "$T/dst/$SHARD.ckpt" "$SHARD" <<'PYEOF' || fail "truncated checks ($mode)"
import errno, os, sys
from mount_checks import whole_read_is_eio, others_read_exactly
mnt, src, packed, shard = sys.argv[1:5]
a = os.open(os.path.join(mnt, shard), os.O_RDONLY)   # the daemon opens (maps) the packed file
b = os.open(os.path.join(src, shard), os.O_RDONLY)
size = os.fstat(b).st_size
head = os.pread(a, 4096, 0)
assert head == os.pread(b, 4096, 0)
os.truncate(packed, 64 << 10)                         # planes now lie past the end
def eio_or_exact(off, n):
    try:
        got = os.pread(a, n, off)
    except OSError as e:
        assert e.errno == errno.EIO, e
        return 1
    assert got == os.pread(b, len(got), off), "wrong bytes at %d+%d after truncation" % (off, n)
    return 0
fails = sum(eio_or_exact(off, n) for off, n in
            ((size // 2, 1 << 20), (size - 5000, 5000), (size // 3, 100), (size // 2 + 4096, 10)))
assert fails >= 3, "reads past the new end of the packed file did not fail (%d EIO)" % fails
whole_read_is_eio(os.path.join(mnt, shard), "truncated shard")
# every other file still reads back exactly
others_read_exactly(src, mnt, shard)
print("mount_truncated: EIO after truncation, other files exact")
PYEOF
    kill -0 "$PID" 2>/dev/null || fail "daemon died ($mode)"
    stop_daemon TERM "$PID"
    wait_unmounted "$T/m$mode"
done
[ "$MODES" = nommap ] || grep -q "changed size while mounted" "$T/log.mdefault" || fail "no log line about the packed file changing size"
echo "mount_truncated: ok"
