#!/bin/sh
# mount_corrupt: one damaged byte in a packed tensor plane.  Reads touching
# that chunk fail with EIO, one log line names the file, tensor and chunk,
# every other byte (same tensor's other chunks, other files) stays exact,
# and the daemon keeps serving.
. "$(dirname "$0")/lib.sh"
: "${CKPT_EXTENTS:?set CKPT_EXTENTS to the ckpt_extents helper}"
make_model
SHARD=model-00001-of-00003.safetensors
TENSOR=model.embed.weight
CH=3
"$CKPT_EXTENTS" "$T/dst/$SHARD.ckpt" >"$T/extents" || fail "ckpt_extents"
# Flip one byte of the low (mantissa / low-byte) plane inside chunk $CH;
# print the chunk's original byte range.
RANGE=$("$PY" - "$T/extents" "$T/dst/$SHARD.ckpt" "$TENSOR" "$CH" <<'PYEOF'
import sys
ext, path, name, ch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
for line in open(ext):
    f = line.split()
    if f[-1] == name:
        enc, csize, nch, ooff = int(f[1]), int(f[2]), int(f[3]), int(f[4])
        p1 = int(f[8])
        break
else:
    sys.exit("tensor %s not found" % name)
assert enc in (2, 3) and nch > ch + 1, line
w = ch * (csize // 2) + 1000                  # a weight inside chunk ch
pos = p1 + (w * 7 // 8 if enc == 2 else w)    # K15: 7-bit stream; BSPLIT: bytes
with open(path, "r+b") as fh:
    fh.seek(pos)
    b = fh.read(1)
    fh.seek(pos)
    fh.write(bytes([b[0] ^ 0x5A]))
print(ooff + ch * csize, ooff + (ch + 1) * csize)
PYEOF
) || fail "could not damage the packed file"
mount_fg mnt
"$PY" - "$T/mnt" "$T/src" "$SHARD" $RANGE <<'PYEOF' || fail "corrupt checks"
import errno, hashlib, os, sys
from mount_checks import whole_read_is_eio, others_read_exactly
mnt, src, shard, lo, hi = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
a = os.open(os.path.join(mnt, shard), os.O_RDONLY)
b = os.open(os.path.join(src, shard), os.O_RDONLY)
# Buffered reads go through the page cache: a 4 KiB page that holds bytes of
# the damaged chunk cannot be read at all (never partly, never other bytes).
plo, phi = lo // 4096 * 4096, -(-hi // 4096) * 4096
def eio(off, n):
    """A read touching the damaged chunk fails, or (POSIX short read) returns
    only exact bytes that end before the chunk."""
    try:
        got = os.pread(a, n, off)
    except OSError as e:
        assert e.errno == errno.EIO, e
        return
    assert off + len(got) <= plo and got == os.pread(b, len(got), off), \
        "read at %d+%d of the damaged chunk returned %d bytes" % (off, n, len(got))
for off, n in ((lo, 1), (lo + 5000, 100), (hi - 1, 1), (lo - 10, 20), (0, hi + 10)):
    eio(off, n)
# Everything around the damaged chunk reads back exactly.
size = os.fstat(b).st_size
for off, n in ((0, plo), (phi, size - phi), (plo - 4096, 4096), (phi, 1)):
    assert os.pread(a, n, off) == os.pread(b, n, off), "bytes at %d+%d differ" % (off, n)
whole_read_is_eio(os.path.join(mnt, shard), "damaged shard")
# Other files are intact and the daemon still serves.
others_read_exactly(src, mnt, shard)
eio(lo + 77, 3)
print("mount_corrupt: EIO on chunk [%d, %d), exact elsewhere" % (lo, hi))
PYEOF
kill -0 "$PID" || fail "daemon died"
[ "$(grep -c "$SHARD.*$TENSOR.*chunk $CH" "$T/log.mnt")" = 1 ] ||
    fail "expected one log line naming $SHARD, $TENSOR and chunk $CH"
grep "$TENSOR" "$T/log.mnt"
stop_daemon TERM "$PID"
wait_unmounted "$T/mnt"
echo "mount_corrupt: ok"
