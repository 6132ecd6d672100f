#!/bin/sh
# mount_revalidate: a packed directory rewritten under the mount, as on a
# shared file system (NFS, CephFS, Lustre) where another host copies the
# pack again (issue #25).  A .ckpt replaced by a copy with the same bytes
# (cp to a temporary, then rename: a new inode), or written again in place,
# is re-validated (the manifest's SHA-256, the same table of contents and
# chunk hashes) and served on, byte for byte; replaced by another valid
# pack of the same size it is EIO; the right file put back, it is served
# again.  Readers reading all along get the original bytes or EIO, never
# other bytes.  Each case with the default mount (mapped packed files) and
# with drop_packed (pread and O_DIRECT windows).  Until 3 December any
# change made the file EIO until the next mount.
. "$(dirname "$0")/lib.sh"
make_pristine

run() {
    name=$1
    shift
    mount_pristine "m$name" ${1:+-o "$1"}
    "$PY" - "$T/m$name" "$T/src" "$T/dst" "$T/pristine" <<'PYEOF' || fail "$name: checks"
import errno, os, random, shutil, sys, threading, time
from mount_checks import others_read_exactly
mnt, src, dst, pristine = sys.argv[1:]
path = os.path.join(mnt, "a.bin")
orig = open(os.path.join(src, "a.bin"), "rb").read()
packed = os.path.join(dst, "a.bin.ckpt")
right = os.path.join(pristine, "a.bin.ckpt")
other = os.path.join(pristine, "b.bin.ckpt")      # valid, the same size, another file

def put(what, in_place=False):
    time.sleep(0.02)                               # past the coarse clock's tick
    if in_place:
        shutil.copyfile(what, packed)              # same inode, O_TRUNC, written again
    else:
        shutil.copyfile(what, packed + ".new")     # a new inode renamed over it
        os.rename(packed + ".new", packed)

def read_all(fd):
    """The whole file through fd, past the kernel's cached pages; None for EIO."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    try:
        got = os.pread(fd, len(orig) + 1, 0)
    except OSError as e:
        assert e.errno == errno.EIO, e
        return None
    assert got == orig, "wrong bytes"
    return got

def open_a():
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as e:
        assert e.errno == errno.EIO, e
        return None

held = os.open(path, os.O_RDONLY)
assert read_all(held) == orig
# 1. the same bytes, a new inode (cp + rename), then in place: served on
for in_place in (False, True):
    put(right, in_place)
    fd = open_a()
    assert fd is not None, "a.bin refused after a copy of the same bytes (in place: %s)" % in_place
    assert read_all(fd) == orig and read_all(held) == orig, "EIO after a copy of the same bytes"
    os.close(fd)
# 2. another valid pack of the same size: EIO (open, and reads of the open file)
put(other)
assert open_a() is None, "a.bin opened with b.bin's pack in its place"
for _ in range(100):                               # the kernel's pages are dropped asynchronously
    if read_all(held) is None:
        break
    time.sleep(0.02)
else:
    raise AssertionError("a.bin still read 2 s after b.bin's pack took its place")
# 3. the right one put back: served again, through the open file too
put(right)
fd = open_a()
assert fd is not None, "a.bin refused once the right pack was back"
assert read_all(fd) == orig and read_all(held) == orig
os.close(fd)
# 4. readers all along while it is swapped back and forth: the original's
# bytes or EIO, never others; every byte once the right one is back
stop, bad, good = threading.Event(), [], [0]
def reader(seed):
    rnd = random.Random(seed)
    while not stop.is_set():
        fd = open_a()
        if fd is None:
            time.sleep(0.005)
            continue
        for _ in range(8):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            off = rnd.randrange(len(orig))
            try:
                got = os.pread(fd, 1 << 20, off)
            except OSError as e:
                if e.errno != errno.EIO:
                    bad.append(repr(e))
                continue
            if got != orig[off:off + len(got)]:
                bad.append("wrong bytes at %d+%d" % (off, len(got)))
            good[0] += 1
        os.close(fd)
threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
for k in range(8):
    put(other if k % 2 == 0 else right)
    time.sleep(0.1)
stop.set()
for t in threads:
    t.join(60)
    assert not t.is_alive(), "a reader hung"
assert not bad, bad[:5]
assert good[0] > 0, "no read succeeded"
fd = open_a()
assert fd is not None and read_all(fd) == orig and read_all(held) == orig, "a.bin not served at the end"
os.close(fd)
os.close(held)
others_read_exactly(src, mnt, "a.bin")
print("%s: served on after copies of the same bytes, EIO for another pack, served again after" %
      os.path.basename(mnt))
PYEOF
    kill -0 "$PID" 2>/dev/null || fail "$name: daemon died"
    stop_daemon TERM "$PID"
    wait_unmounted "$T/m$name"
    grep -q "a.bin: packed file replaced while mounted.*re-validated.*served again" "$T/log.m$name" ||
        fail "$name: no line saying a.bin was re-validated"
    grep -q "a.bin: packed file .*refused (a.bin: packed file holds b.bin" "$T/log.m$name" ||
        fail "$name: no line saying b.bin's pack was refused"
    grep -v "^ckptfs: a.bin: " "$T/log.m$name" | grep -q "b.bin\|c.bin" && fail "$name: a line about another file"
    return 0
}
run mapped ""
run drop_packed "drop_packed,nommap"
echo "mount_revalidate: ok"
