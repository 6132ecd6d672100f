#!/usr/bin/env python3
"""read_check.py MNT SRC — compare a ckptfs mount with its source tree.

Checks: the same entries with the same types, sizes, modes and mtimes; the
same SHA-256 for every file; writes of every kind fail with EROFS; random
preads (odd sizes, chunk and end-of-file boundaries) from threads and from
processes, with the file's page cache dropped first so the daemon serves
them; mmap MAP_SHARED and MAP_PRIVATE; safetensors' own loader."""
import concurrent.futures as cf
import errno
import hashlib
import mmap
import multiprocessing as mp
import os
import random
import stat
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from files import sha256_file as sha  # noqa: E402

CHUNK = 128 << 10


def tree(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", 0, stat.S_IMODE(st.st_mode), None)
            else:
                out[rel] = ("f", st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


def expect_erofs(what, fn):
    try:
        fn()
    except OSError as e:
        if e.errno != errno.EROFS:
            raise AssertionError("%s: expected EROFS, got %s" % (what, e))
        return
    raise AssertionError("%s: succeeded on a read-only mount" % what)


def check_erofs(mnt):
    f = os.path.join(mnt, "config.json")
    expect_erofs("open O_WRONLY", lambda: os.open(f, os.O_WRONLY))
    expect_erofs("open O_RDWR", lambda: os.open(f, os.O_RDWR))
    expect_erofs("open O_TRUNC", lambda: os.open(f, os.O_RDONLY | os.O_TRUNC))
    expect_erofs("create", lambda: os.open(os.path.join(mnt, "new"), os.O_WRONLY | os.O_CREAT, 0o644))
    expect_erofs("mkdir", lambda: os.mkdir(os.path.join(mnt, "newdir")))
    expect_erofs("unlink", lambda: os.unlink(f))
    expect_erofs("rmdir", lambda: os.rmdir(os.path.join(mnt, "sub", "deeper")))
    expect_erofs("rename", lambda: os.rename(f, os.path.join(mnt, "x")))
    expect_erofs("chmod", lambda: os.chmod(f, 0o777))
    expect_erofs("truncate", lambda: os.truncate(f, 0))
    expect_erofs("utime", lambda: os.utime(f, (0, 0)))
    expect_erofs("symlink", lambda: os.symlink("x", os.path.join(mnt, "lnk")))
    expect_erofs("setxattr", lambda: os.setxattr(f, "user.x", b"1"))


def jobs_for(rel, size, rnd, n):
    lens = [1, 7, 4095, 4096, 65536, CHUNK - 1, CHUNK, CHUNK + 3, 300000, 1 << 20]
    out = []
    for _ in range(n):
        ln = rnd.choice(lens) if rnd.random() < 0.7 else rnd.randrange(1, 3 << 20)
        r = rnd.random()
        if r < 0.3 and size > CHUNK:
            off = rnd.randrange(1, size // CHUNK + 1) * CHUNK + rnd.randrange(-5, 5)
        elif r < 0.4:
            off = size - rnd.randrange(0, 10)
        else:
            off = rnd.randrange(0, size + 100)
        out.append((rel, max(0, off), ln))
    return out


def run_job(args):
    mnt, src, (rel, off, ln) = args
    with open(os.path.join(mnt, rel), "rb", buffering=0) as a, \
         open(os.path.join(src, rel), "rb", buffering=0) as b:
        got, want = os.pread(a.fileno(), ln, off), os.pread(b.fileno(), ln, off)
    return None if got == want else "%s off=%d len=%d: got %d bytes, differ" % (rel, off, ln, len(got))


def drop_cache(mnt, files):
    for rel in files:
        fd = os.open(os.path.join(mnt, rel), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def check_mmap(mnt, src, rel, size, rnd):
    with open(os.path.join(src, rel), "rb") as f:
        want = f.read()
    fd = os.open(os.path.join(mnt, rel), os.O_RDONLY)
    try:
        for flags, prot in ((mmap.MAP_SHARED, mmap.PROT_READ),
                            (mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)):
            m = mmap.mmap(fd, size, flags=flags, prot=prot)
            for _ in range(20):
                off = rnd.randrange(0, size)
                ln = rnd.randrange(1, 300000)
                assert m[off:off + ln] == want[off:off + ln], "mmap %s at %d" % (rel, off)
            assert hashlib.sha256(m).digest() == hashlib.sha256(want).digest(), "mmap " + rel
            if flags == mmap.MAP_PRIVATE:
                m[0:1] = b"\x00"            # copy-on-write stays private
            m.close()
    finally:
        os.close(fd)
    with open(os.path.join(mnt, rel), "rb") as f:
        assert f.read() == want, "after MAP_PRIVATE write " + rel


def check_loader(mnt, src):
    try:
        import torch
        from safetensors.torch import load_file
    except ImportError:
        print("read_check: safetensors/torch not installed; loader check skipped")
        return
    for rel in sorted(os.listdir(src)):
        if rel.endswith(".safetensors"):
            a, b = load_file(os.path.join(mnt, rel)), load_file(os.path.join(src, rel))
            assert a.keys() == b.keys(), rel
            for k in a:
                assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), rel + ":" + k


def main(mnt, src):
    ta, tb = tree(mnt), tree(src)
    assert ta.keys() == tb.keys(), "listing differs: %s" % sorted(set(ta) ^ set(tb))
    for rel in tb:
        if tb[rel][0] == "d":
            assert ta[rel][:3] == tb[rel][:3], "%s: %s != %s" % (rel, ta[rel], tb[rel])
        else:
            assert ta[rel] == tb[rel], "%s: %s != %s" % (rel, ta[rel], tb[rel])
    files = sorted(r for r in tb if tb[r][0] == "f")
    for rel in files:
        assert sha(os.path.join(mnt, rel)) == sha(os.path.join(src, rel)), "sha256 " + rel
    print("read_check: %d entries, listing/attributes/sha256 equal" % len(tb))
    check_erofs(mnt)
    rnd = random.Random(7)
    nonempty = [r for r in files if tb[r][1] > 0]
    jobs = []
    for rel in nonempty:
        jobs += jobs_for(rel, tb[rel][1], rnd, 40)
    drop_cache(mnt, nonempty)
    with cf.ThreadPoolExecutor(8) as ex:
        bad = [e for e in ex.map(run_job, [(mnt, src, j) for j in jobs]) if e]
    assert not bad, bad[:5]
    drop_cache(mnt, nonempty)
    with mp.get_context("fork").Pool(3) as pool:
        bad = [e for e in pool.map(run_job, [(mnt, src, j) for j in jobs], chunksize=8) if e]
    assert not bad, bad[:5]
    print("read_check: %d random preads from threads and processes equal" % (2 * len(jobs)))
    drop_cache(mnt, nonempty)
    for rel in nonempty:
        check_mmap(mnt, src, rel, tb[rel][1], rnd)
    print("read_check: mmap shared/private equal")
    drop_cache(mnt, nonempty)
    check_loader(mnt, src)
    print("read_check: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
