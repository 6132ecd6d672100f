#!/bin/sh
# mount_replaced: a packed file replaced or changed while mounted.  The
# mount binds each .ckpt to its manifest entry at mount time and keeps it
# open; a .ckpt renamed over or copied over in place by another valid pack
# of the same size must be noticed at the next open or chunk decode: one
# log line naming the file, what changed and why the new one is refused,
# EIO for every open and read of it while it is there (the kernel's cached
# pages of it dropped too), never a byte that is not the original's, and
# the other files served exactly.  It used to go on serving the old file
# silently.  The same file packed again, or written again with the same
# bytes, was EIO here too until 3 December; issue #25 wants it re-validated
# and served: mount_revalidate.sh.
. "$(dirname "$0")/lib.sh"
make_pristine

# case NAME HOW ALT TRIGGER LOGLINE [MOUNT OPTIONS]
#   HOW: rename (ALT renamed over a.bin.ckpt), copy (ALT copied over it in
#   place, O_TRUNC);
#   TRIGGER: read (an uncached page of an open file: a chunk decoded) or
#   open (a new open of a.bin).
case_() {
    name=$1 how=$2 alt=$3 trigger=$4 line=$5
    shift 5
    mount_pristine "m$name" -o "prefetch=0${1:+,$1}"
    "$PY" - "$T/m$name" "$T/src" "$T/dst" "$how" "$alt" "$trigger" <<'PYEOF' || fail "$name: checks"
import errno, os, shutil, sys, time
from mount_checks import others_read_exactly
mnt, src, dst, how, alt, trigger = sys.argv[1:]
path = os.path.join(mnt, "a.bin")
orig = open(os.path.join(src, "a.bin"), "rb").read()
a = os.open(path, os.O_RDONLY)
assert os.pread(a, 4096, 0) == orig[:4096]          # the kernel caches page 0
packed = os.path.join(dst, "a.bin.ckpt")
time.sleep(0.05)                                     # past the coarse clock's tick
if how == "rename":
    shutil.copyfile(alt, packed + ".new")
    os.rename(packed + ".new", packed)
else:
    shutil.copyfile(alt, packed)                      # in place: same inode, O_TRUNC
def read(off, n):
    """The bytes at off, or None for EIO; anything else fails."""
    try:
        got = os.pread(a, n, off)
    except OSError as e:
        assert e.errno == errno.EIO, e
        return None
    assert got == orig[off:off + len(got)], "wrong bytes at %d+%d" % (off, n)
    return got
if trigger == "read":
    assert read(len(orig) - 5000, 5000) is None, "an uncached page read after the change"
try:
    os.close(os.open(path, os.O_RDONLY))
    raise AssertionError("a.bin opened after the change")
except OSError as e:
    assert e.errno == errno.EIO, e
# the kernel's cached page is dropped too (asynchronously): EIO soon
for _ in range(100):
    if read(0, 4096) is None:
        break
    time.sleep(0.02)
else:
    raise AssertionError("page 0 still served from the kernel's cache 2 s after")
for off, n in ((0, len(orig)), (1 << 20, 4096), (len(orig) - 1, 1), (0, 4096)):
    assert read(off, n) is None, "read %d+%d after the change" % (off, n)
others_read_exactly(src, mnt, "a.bin")
print("%s: EIO after the change, other files exact" % os.path.basename(mnt))
PYEOF
    kill -0 "$PID" 2>/dev/null || fail "$name: daemon died"
    stop_daemon TERM "$PID"
    wait_unmounted "$T/m$name"
    [ "$(grep -c "a.bin: packed file" "$T/log.m$name")" = 1 ] || fail "$name: not one log line about a.bin"
    grep -q "a.bin: packed file $line" "$T/log.m$name" || fail "$name: no line 'a.bin: packed file $line'"
    grep -q "a.bin: packed file $line.*refused (a.bin: packed file holds b.bin" "$T/log.m$name" ||
        fail "$name: the line does not say the file there holds b.bin"
    grep -v "^ckptfs: a.bin: " "$T/log.m$name" | grep -q "b.bin\|c.bin" && fail "$name: a line about another file"
    return 0
}
# another valid pack of the same size (b.bin's) renamed over a.bin.ckpt
case_ renamed_other rename "$T/pristine/b.bin.ckpt" read "replaced while mounted"
# the same, found by the next open; pread path
case_ renamed_other_open rename "$T/pristine/b.bin.ckpt" open "replaced while mounted" nommap
# b.bin's pack copied over it in place
case_ copied_other copy "$T/pristine/b.bin.ckpt" read "changed" nommap
echo "mount_replaced: ok"
