#!/usr/bin/env python3
"""repack_careless.py — `ckptfs repack` (fs/cli/repack.c) used carelessly:

  - on a full disk (a tmpfs a little too small, at several sizes between
    "the decoded original does not fit" and "the new packed file does not
    fit"): exit 1 with a message that names the file and says the disk is
    full, never a signal; nothing lost (verify, unpack equal to the
    originals); after the tmpfs grows, a rerun finishes;
  - while the pack is mounted and read by 3 threads: every read returns the
    original bytes or EIO, the daemon serves on and exits 0 at unmount;
  - two repacks at once on the same directory: one refuses (naming the
    lock) or both succeed, and the pack ends whole and converted;
  - to the format it already has: nothing rewritten, not one byte;
  - of a directory that is not a pack, of a regular file, of a missing path:
    exit 1, a message naming it, nothing written; of an s3:// URL: exit 1,
    saying repack is for a local directory;
  - of a pack with one damaged packed file: exit 1 naming that file, the
    damaged file untouched, and every other file still whole; one whose
    metadata is broken (cut short): refused before any file is converted;
  - of a pack holding a file named `ckptfs-repack-original`: converted.
Skips (77) without root (tmpfs, mount).  Environment: CKPTFS, PYTHON."""
import errno
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "lib"), os.path.join(HERE, "..", "python")]
from checks import check, done  # noqa: E402
from files import files_under  # noqa: E402
from packcheck import intact, pack_encodings, tree_sums  # noqa: E402

CK = os.environ["CKPTFS"]
PY = os.environ.get("PYTHON", sys.executable)
if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
    print("SKIP: needs root (tmpfs) and /dev/fuse")
    sys.exit(77)
import conftest  # noqa: E402  (after the skip: it needs pytest)

T = tempfile.mkdtemp(prefix="ckptfs-repack-careless.")
SRC, ARCH, OUT, FS = (os.path.join(T, x) for x in ("src", "arch", "out", "fs"))
MOUNTS = []


def run(*args):
    r = subprocess.run([CK] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def fresh(name):
    d = os.path.join(T, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(ARCH, d)
    return d


def full_disk():
    """repack to K15 in tmpfs of a few sizes a little too small."""
    packed = sum(os.path.getsize(os.path.join(ARCH, f)) for f in files_under(ARCH))
    biggest = max(os.path.getsize(os.path.join(SRC, f)) for f in files_under(SRC))
    os.makedirs(FS)
    subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=%dk" % (packed // 1024 + 64), "tmpfs", FS])
    MOUNTS.append(FS)
    # from "the original of the biggest file does not fit" to "its K15 file does not"
    for extra in (biggest // 4, biggest // 2, biggest + 8192, biggest + biggest // 3, biggest + biggest // 2):
        size_k = (packed + extra) // 1024 + 32
        d = os.path.join(FS, "p")
        shutil.rmtree(d, ignore_errors=True)
        subprocess.check_call(["mount", "-o", "remount,size=%dk" % size_k, FS])
        shutil.copytree(ARCH, d)
        rc, _, err = run("repack", "--format", "k15", d)
        tag = "full disk (tmpfs %d KiB)" % size_k
        check(tag + ": exit 0 or 1, no signal", rc in (0, 1), "exit %d: %s" % (rc, err[-300:]))
        if rc == 1:
            check(tag + ": the message says the disk is full and names a file",
                  "No space left on device" in err and ".ckpt" in err, err[-300:])
        check(tag + ": nothing lost", intact(CK, d, SRC, OUT) is None, intact(CK, d, SRC, OUT))
        subprocess.check_call(["mount", "-o", "remount,size=%dk" % (4 * packed // 1024 + 4096), FS])
        rc, _, err = run("repack", "--format", "k15", d)
        check(tag + ": rerun with room finishes", rc == 0 and pack_encodings(d) == {"k15"}, err[-300:])
        check(tag + ": no temporary left", not [f for f in files_under(d) if f.endswith(".tmp")])
        check(tag + ": whole after the rerun", intact(CK, d, SRC, OUT) is None, intact(CK, d, SRC, OUT))


def reader(mnt, names, stop, bad, counts):
    rnd = random.Random()
    while not stop.is_set():
        name = rnd.choice(names)
        with open(os.path.join(SRC, name), "rb") as f:
            want = f.read()
        off = rnd.randrange(len(want) + 1)
        n = rnd.choice((1, 4096, 65536, 1 << 20))
        try:
            fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
            try:
                got = os.pread(fd, n, off)
            finally:
                os.close(fd)
        except OSError as e:
            if e.errno != errno.EIO:
                bad.append("%s: %s" % (name, e))
            counts[1] += 1
            continue
        counts[0] += 1
        # a short read (POSIX allows one: a page before a refused one) must hold exact bytes
        if got != want[off:off + len(got)] or (not got and off < len(want)):
            bad.append("%s at %d+%d: %d bytes, not the original's" % (name, off, n, len(got)))


def while_mounted():
    d = fresh("mounted")
    names = files_under(SRC)
    stop, bad, counts = threading.Event(), [], [0, 0]
    with conftest.Mount(CK, d, os.path.join(T, "mnt")) as m:
        ts = [threading.Thread(target=reader, args=(m.path, names, stop, bad, counts)) for _ in range(3)]
        for t in ts:
            t.start()
        try:
            rc, _, err = run("repack", "--format", "k15", d)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and sum(counts) < 200:
                time.sleep(0.05)
        finally:
            stop.set()
            for t in ts:
                t.join()
        check("mounted: repack exit 0", rc == 0, err[-300:])
        check("mounted: every read the original bytes or EIO (%d right, %d EIO)" % tuple(counts), not bad, bad[:5])
        check("mounted: the daemon is alive", m.proc.poll() is None)
    check("mounted: the daemon exited 0 at unmount", m.proc.returncode == 0, m.log_text()[-300:])
    check("mounted: whole after", intact(CK, d, SRC, OUT) is None, intact(CK, d, SRC, OUT))


def two_at_once():
    d = fresh("twice")
    ps = [subprocess.Popen([CK, "repack", "--format", "bytesplit", d], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE) for _ in range(2)]
    res = [(p.wait(), p.stderr.read().decode(errors="replace")) for p in ps]
    for p in ps:
        p.stdout.close()
        p.stderr.close()
    ok = all(rc == 0 or (rc == 1 and "another ckptfs command" in err) for rc, err in res)
    check("two at once: each succeeds or refuses naming the lock", ok and any(rc == 0 for rc, _ in res), res)
    check("two at once: all bytesplit", pack_encodings(d) == {"bytesplit"}, pack_encodings(d))
    check("two at once: whole", intact(CK, d, SRC, OUT) is None, intact(CK, d, SRC, OUT))


def same_format():
    d = fresh("same")
    before = tree_sums(d)
    rc, out, err = run("repack", "--format", "archive", d)
    check("same format: exit 0, 0 repacked", rc == 0 and out.startswith("repacked 0 of"), out + err)
    check("same format: no byte changed", tree_sums(d) == before)


def not_a_pack():
    before = tree_sums(SRC)
    for what, path in (("a model directory", SRC), ("a file", os.path.join(SRC, "config.json")),
                       ("a missing path", os.path.join(T, "nothing"))):
        rc, _, err = run("repack", "--format", "k15", path)
        check("not a pack (%s): exit 1 naming it" % what, rc == 1 and path in err, "exit %d: %s" % (rc, err))
    rc, _, err = run("repack", "--format", "k15", "s3://bucket/packed")
    check("an s3:// URL: exit 1, says repack is for a local directory", rc == 1 and "local" in err, err)
    check("not a pack: nothing written", tree_sums(SRC) == before and not os.path.exists(os.path.join(T, "nothing")))


def damaged():
    d = fresh("damaged")
    shards = sorted(f for f in files_under(d) if f.endswith(".safetensors.ckpt"))
    bad = shards[-1]
    p = os.path.join(d, bad)
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    before = tree_sums(d)
    rc, _, err = run("repack", "--format", "k15", d)
    check("damaged: exit 1 naming the file", rc == 1 and bad in err, "exit %d: %s" % (rc, err))
    check("damaged: the damaged file untouched", tree_sums(d)[bad] == before[bad])
    check("damaged: no temporary left", not [f for f in files_under(d) if f.endswith(".tmp")])
    shutil.copy(os.path.join(ARCH, bad), p)  # the undamaged copy back: every other file is whole
    check("damaged: the others whole", intact(CK, d, SRC, OUT) is None, intact(CK, d, SRC, OUT))


def broken_metadata():
    """A packed file cut short (its header's file_size, R6): refused before
    any file is converted."""
    d = fresh("cut")
    bad = sorted(f for f in files_under(d) if f.endswith(".safetensors.ckpt"))[-1]
    p = os.path.join(d, bad)
    os.truncate(p, os.path.getsize(p) - 100)
    before = tree_sums(d)
    rc, _, err = run("repack", "--format", "k15", d)
    check("cut short: exit 1 naming the file", rc == 1 and bad in err, "exit %d: %s" % (rc, err))
    check("cut short: no file changed", tree_sums(d) == before,
          [f for f, s in tree_sums(d).items() if before.get(f) != s])


def reserved_looking_name():
    """A model file named as repack's temporary once was (its own temporary
    `.ckptfs-repack-original.ckpt.tmp` was the same file: SIGBUS)."""
    src, d = os.path.join(T, "odd-src"), os.path.join(T, "odd")
    os.makedirs(src)
    shard = sorted(f for f in files_under(SRC) if f.endswith(".safetensors"))[0]
    shutil.copy(os.path.join(SRC, shard), os.path.join(src, "ckptfs-repack-original"))
    rc, _, err = run("pack", "--format", "archive", src, d)
    check("odd name: packed", rc == 0, err[-300:])
    rc, _, err = run("repack", "--format", "k15", d)
    check("odd name: repack exit 0", rc == 0, "exit %d: %s" % (rc, err[-300:]))
    check("odd name: all k15", pack_encodings(d) == {"k15"}, pack_encodings(d))
    check("odd name: whole", intact(CK, d, src, OUT) is None, intact(CK, d, src, OUT))


def main():
    subprocess.run([PY, os.path.join(HERE, "..", "cli", "gen_model.py"), SRC], check=True,
                   stdout=subprocess.DEVNULL)
    rc, _, err = run("pack", "--format", "archive", SRC, ARCH)
    if rc:
        raise RuntimeError("pack: " + err)
    for f in (full_disk, while_mounted, two_at_once, same_format, not_a_pack, damaged, broken_metadata,
              reserved_looking_name):
        f()


try:
    main()
finally:
    for m in MOUNTS:
        subprocess.call(["umount", m]) == 0 or subprocess.call(["umount", "-l", m])
    shutil.rmtree(T, ignore_errors=True)
sys.exit(done("repack_careless"))
