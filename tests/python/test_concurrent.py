"""Concurrent readers of a ckptfs mount: threads and processes doing os.pread
and mmap (MAP_SHARED and MAP_PRIVATE, windows at random page-aligned
offsets) at random offsets and sizes, each for a fixed time, with a small
decoded-chunk cache (evictions under contention) and the mount's page cache
dropped now and then so the daemon keeps serving; every byte is compared with
the source file.  Bounded: about 4 s per phase."""
import concurrent.futures as cf
import faulthandler
import mmap
import multiprocessing as mp
import os
import random
import time

import numpy as np
import pytest

from conftest import mount_fixture, pack

PHASE_S = float(os.environ.get("CKPTFS_PY_PHASE_S", "4"))
CHUNK = 128 << 10
PAGE = mmap.ALLOCATIONGRANULARITY
NAME = "model.safetensors"
ORIG = {}                   # name -> bytes of the source (shared with forked workers)


def bf16(rng, n, std):
    u = (rng.standard_normal(n, dtype=np.float32) * std).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def make_source(src):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file
    os.makedirs(src)
    rng = np.random.default_rng(77)

    def t16(a):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    t = {"a.weight": t16(bf16(rng, 3 << 20, 0.02).reshape(3072, 1024)),
         "b.weight": t16(bf16(rng, (5 << 20) + 4099, 0.01)),
         "c.bias": torch.from_numpy(rng.standard_normal(100003).astype(np.float32))}
    save_file(t, os.path.join(src, NAME), metadata={"format": "pt"})
    return src


def one_op(rnd, fd, size, orig):
    r = rnd.random()
    if r < 0.6:                                   # pread
        ln = rnd.choice([1, 4095, CHUNK - 1, CHUNK, CHUNK + 1, 1 << 20, rnd.randrange(1, 3 << 20)])
        off = rnd.randrange(0, size + 10) if rnd.random() < 0.7 else \
            max(0, rnd.randrange(1, size // CHUNK + 1) * CHUNK + rnd.randrange(-3, 3))
        got = os.pread(fd, ln, off)
        return got == orig[off:off + ln], "pread off=%d len=%d" % (off, ln), len(got)
    shared = r < 0.8
    off = rnd.randrange(0, size // PAGE) * PAGE
    ln = rnd.randrange(1, min(size - off, 4 << 20) + 1)
    flags = mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE
    prot = mmap.PROT_READ if shared else mmap.PROT_READ | mmap.PROT_WRITE
    m = mmap.mmap(fd, ln, flags=flags, prot=prot, offset=off)
    try:
        a = rnd.randrange(0, ln)
        b = min(ln, a + rnd.randrange(1, 600000))
        ok = m[a:b] == orig[off + a:off + b]
        if ok and not shared:                     # a private write stays private
            m[a:a + 1] = bytes([orig[off + a] ^ 0xFF])
            ok = m[a] == orig[off + a] ^ 0xFF and os.pread(fd, 1, off + a) == orig[off + a:off + a + 1]
        return ok, "mmap %s off=%d len=%d [%d:%d]" % ("shared" if shared else "private", off, ln, a, b), b - a
    finally:
        m.close()


def worker(args):
    path, seed, seconds, dropper = args
    orig = ORIG[NAME]
    rnd = random.Random(seed)
    fd = os.open(path, os.O_RDONLY)
    ops = nbytes = 0
    errors = []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end and len(errors) < 5:
            ok, what, n = one_op(rnd, fd, len(orig), orig)
            ops += 1
            nbytes += n
            if not ok:
                errors.append(what)
            if dropper and ops % 8 == 0:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except Exception as e:                        # report, don't hang the pool
        errors.append("%s: %r" % (seed, e))
    finally:
        os.close(fd)
    return ops, nbytes, errors


@pytest.fixture(scope="module")
def source(workdir):
    src = make_source(os.path.join(workdir, "cc-src"))
    with open(os.path.join(src, NAME), "rb") as f:
        ORIG[NAME] = f.read()
    return src


@pytest.fixture(scope="module", params=["k15", "bytesplit"])
def mounted(request, ckptfs, workdir, source):
    dst = pack(ckptfs, source, os.path.join(workdir, "cc-dst-" + request.param), request.param)
    yield from mount_fixture(ckptfs, dst, dst + ".mnt", os.environ.get("CKPTFS_PY_MOUNT_OPTS", "cache_size=2M,threads=8"))


def check(results, min_ops):
    ops = sum(r[0] for r in results)
    errors = [e for r in results for e in r[2]]
    assert not errors, errors[:5]
    assert ops >= min_ops, "only %d operations" % ops
    return ops


def test_threads(mounted):
    path = os.path.join(mounted.path, NAME)
    with open(path, "rb") as f:                   # start cold
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    with cf.ThreadPoolExecutor(8) as ex:
        res = list(ex.map(worker, [(path, s, PHASE_S, s == 0) for s in range(8)]))
    ops = check(res, 50)
    print("threads: %d ops, %.0f MB" % (ops, sum(r[1] for r in res) / 1e6))


def test_processes(mounted):
    path = os.path.join(mounted.path, NAME)
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    # concurrent.futures, not multiprocessing.Pool: a worker killed (a SIGBUS
    # from a mapping of the mount that got EIO, say) fails the test with
    # BrokenProcessPool instead of leaving Pool.map waiting forever for its
    # task; faulthandler prints the worker's Python stack at such a signal
    with cf.ProcessPoolExecutor(4, mp_context=mp.get_context("fork"), initializer=faulthandler.enable) as ex:
        res = list(ex.map(worker, [(path, 100 + s, PHASE_S, s == 0) for s in range(4)]))
    ops = check(res, 20)
    print("processes: %d ops, %.0f MB" % (ops, sum(r[1] for r in res) / 1e6))


def test_whole_file_after_stress(mounted):
    with open(os.path.join(mounted.path, NAME), "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        assert f.read() == ORIG[NAME]
