#!/usr/bin/env python3
"""mount_stress.py MNT SRC PID CACHE_BYTES SECONDS — load on a ckptfs mount
(issue "Hardening", part 4).  The mount engineer's read_check.py checks
correctness of reads once; this runs them concurrently for a bounded time and
watches the daemon (pid PID):

  1. fd leak: the daemon's open descriptors (/proc/PID/fd) are counted, then
     4 threads do 4000 open/pread/close cycles over all files; after a first
     round the count may grow by at most one descriptor per packed file (a
     daemon may keep each packed file open), and a second round of 4000 must
     not grow it further.
  2. stress for SECONDS: 6 threads here and 3 forked processes loop over
     random files doing pread at random offsets and sizes (1 B .. 2 MiB,
     chunk-boundary and end-of-file cases included), mmap(MAP_SHARED) slices,
     whole-file sequential reads with odd buffer sizes, and open/close churn;
     each file's page cache is dropped now and then (posix_fadvise) so the
     daemon keeps serving.  Every byte is compared with SRC.
  3. memory: the daemon's anonymous memory (RssAnon, sampled every 0.1 s)
     stays under CACHE_BYTES + MARGIN (48 MiB: program, libraries,
     per-thread decode scratch and request buffers), and its VmHWM, which
     also counts the page-cache pages of the packed files it maps, under
     that plus PACKED_BYTES.
"""
import multiprocessing as mp
import os
import mmap
import random
import sys
import threading
import time

MARGIN = 48 << 20
CHUNK = 128 << 10


def proc_status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def load(src):
    data = {}
    for root, _, files in os.walk(src):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                data[os.path.relpath(p, src)] = fh.read()
    return data


def churn(mnt, names, n, seed):
    rnd = random.Random(seed)
    for _ in range(n):
        fd = os.open(os.path.join(mnt, rnd.choice(names)), os.O_RDONLY)
        try:
            os.pread(fd, 64, 0)
        finally:
            os.close(fd)


def worker(mnt, data, deadline, seed, counts, errors):
    rnd = random.Random(seed)
    names = sorted(data)
    ops = nbytes = 0
    while time.time() < deadline and len(errors) < 5:
        rel = rnd.choice(names)
        want = data[rel]
        size = len(want)
        path = os.path.join(mnt, rel)
        op = rnd.random()
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if rnd.random() < 0.3:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                if op < 0.55:  # random preads, some aligned on chunk boundaries
                    for _ in range(rnd.randint(1, 8)):
                        if size and rnd.random() < 0.3:
                            off = max(0, rnd.randrange(0, size, CHUNK) + rnd.randint(-3, 3))
                        else:
                            off = rnd.randint(0, size + 10)
                        n = rnd.choice((1, 7, 4096, 65537, CHUNK, CHUNK + 1, rnd.randint(1, 2 << 20)))
                        got = os.pread(fd, n, off)
                        if got != want[off:off + n]:
                            errors.append("pread %s at %d+%d: %d bytes, differ" % (rel, off, n, len(got)))
                        nbytes += len(got)
                elif op < 0.75 and size:  # mmap MAP_SHARED slices
                    m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
                    try:
                        for _ in range(rnd.randint(1, 6)):
                            off = rnd.randrange(size)
                            n = rnd.randint(1, 300000)
                            if m[off:off + n] != want[off:off + n]:
                                errors.append("mmap %s at %d+%d differs" % (rel, off, n))
                            nbytes += min(n, size - off)
                    finally:
                        m.close()
                elif op < 0.9:  # whole file, sequential, odd buffer size
                    bs = rnd.choice((4095, 65536, 1 << 20, 3 << 19))
                    off, parts = 0, []
                    while True:
                        b = os.read(fd, bs)
                        if not b:
                            break
                        parts.append(b)
                        off += len(b)
                    if b"".join(parts) != want:
                        errors.append("sequential read of %s (bs %d) differs" % (rel, bs))
                    nbytes += off
                else:  # churn: reopen a few times
                    for _ in range(20):
                        f2 = os.open(path, os.O_RDONLY)
                        os.close(f2)
            finally:
                os.close(fd)
        except OSError as e:
            errors.append("%s: %s" % (rel, e))
        ops += 1
    counts.append((ops, nbytes))


def proc_main(mnt, src, deadline, seed, q):
    data = load(src)
    counts, errors = [], []
    worker(mnt, data, deadline, seed, counts, errors)
    q.put((counts, errors))


def main():
    mnt, src, pid, cache, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    packed = int(sys.argv[6])
    data = load(src)
    names = sorted(data)
    fails = []
    rss0 = proc_status(pid, "VmRSS")

    # 1. descriptors
    fd0 = nfds(pid)
    for rnd in (1, 2):
        ts = [threading.Thread(target=churn, args=(mnt, names, 1000, rnd * 10 + i)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        time.sleep(0.5)  # releases are asynchronous
        if rnd == 1:
            fd1 = nfds(pid)
        else:
            fd2 = nfds(pid)
    print("fds: %d before, %d after 4000 open/close, %d after 8000 (%d files)" % (fd0, fd1, fd2, len(names)))
    if fd1 > fd0 + len(names) or fd2 > fd1:
        fails.append("descriptor leak: %d -> %d -> %d" % (fd0, fd1, fd2))

    # 2. stress, with an RSS sampler
    deadline = time.time() + secs
    anon_seen = [0]

    def sampler():
        while time.time() < deadline + 0.5:
            try:
                anon_seen[0] = max(anon_seen[0], proc_status(pid, "RssAnon"))
            except (OSError, KeyError):
                break
            time.sleep(0.1)

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=proc_main, args=(mnt, src, deadline, 1000 + i, q)) for i in range(3)]
    for p in procs:
        p.start()
    counts, errors = [], []
    ts = [threading.Thread(target=worker, args=(mnt, data, deadline, i, counts, errors)) for i in range(6)]
    ts.append(threading.Thread(target=sampler))
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for p in procs:
        c, e = q.get(timeout=secs + 60)
        counts += c
        errors += e
    for p in procs:
        p.join()
    ops = sum(c[0] for c in counts)
    nbytes = sum(c[1] for c in counts)
    print("stress: %d operations, %.1f MiB compared, %d errors, %.0f s" % (ops, nbytes / 2**20, len(errors), secs))
    fails += errors[:10]
    if ops < 100:
        fails.append("only %d operations in %.0f s" % (ops, secs))

    # 3. memory
    hwm = proc_status(pid, "VmHWM")
    print("daemon memory: VmRSS %.1f MiB at start, RssAnon sampled max %.1f MiB, VmHWM %.1f MiB; "
          "limit cache %.0f MiB + %.0f MiB (+ %.1f MiB of packed files for VmHWM)"
          % (rss0 / 2**20, anon_seen[0] / 2**20, hwm / 2**20, cache / 2**20, MARGIN / 2**20, packed / 2**20))
    if os.environ.get("CKPTFS_SANITIZER_BUILD"):
        print("(sanitizer build: memory bound not checked)")
    else:
        if anon_seen[0] > cache + MARGIN:
            fails.append("daemon RssAnon %.1f MiB is over cache_size + margin (%.1f MiB)"
                         % (anon_seen[0] / 2**20, (cache + MARGIN) / 2**20))
        if hwm > cache + MARGIN + packed:
            fails.append("daemon VmHWM %.1f MiB is over cache_size + margin + packed files (%.1f MiB)"
                         % (hwm / 2**20, (cache + MARGIN + packed) / 2**20))
    fd3 = nfds(pid)
    if fd3 > fd1:
        fails.append("descriptors grew during the stress: %d -> %d" % (fd1, fd3))
    for f in fails:
        print("FAIL:", f)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
