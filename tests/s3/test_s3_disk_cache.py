"""test_s3_disk_cache.py — `ckptfs mount s3://... -o cache_dir=DIR,cache_dir_size=SIZE`
against a real S3 server (SeaweedFS, s3fixture.py), every byte compared with
the originals: a remount with a warm cache fetches (almost) nothing (the
daemon's counters); entries with flipped bytes, truncated, or replaced by
another entry's file are detected, deleted and fetched again (the bytes
still right, never EIO); an object replaced on the server after it was
cached gives EIO (another ETag: no old entry is used); the space the cache
takes (du) stays within cache_dir_size plus one window, least recently used
entries evicted; a daemon killed with SIGKILL mid-fill leaves a cache the
next daemon uses with no bad entry and no temporary file left; two daemons
sharing one cache_dir, filling and evicting it at once, both read every byte
right and leave no bad entry.
Usage: test_s3_disk_cache.py CKPTFS      (root and /dev/fuse; else skipped: 77)
"""
import errno
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3check import MB, Mount, check, mount_test, sha, tree  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])


def safetensors(path, tensors):
    """A safetensors file of BF16 tensors {name: (rows, cols)}, N(0, 0.02)."""
    rng = np.random.default_rng(7)
    meta, blobs, off = {}, [], 0
    for name, shape in tensors.items():
        w = (rng.standard_normal(shape[0] * shape[1], dtype=np.float32) * 0.02).view(np.uint32)
        b = (w >> 16).astype(np.uint16).tobytes()
        meta[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(meta).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def entries(cache):
    return sorted(p for p in glob.glob(os.path.join(cache, "v1", "*", "*")) if not p.startswith(os.path.join(cache, "v1", "tmp")))


def uncached(cache, psize):
    """Packed bytes no entry holds: the union of every object's entries
    (named OFF-LEN in hex) taken from the packed size.  A window is one GET
    across the padding between its planes (plane_window.c), so a refetch may
    take a few such never-cached bytes along (a remount's windows need not
    be cut where the first mount's were)."""
    spans = {}
    for p in entries(cache):
        off, ln = (int(x, 16) for x in os.path.basename(p).split("-")[:2])
        spans.setdefault(os.path.dirname(p), []).append((off, off + ln))
    covered = 0
    for v in spans.values():
        end = 0
        for a, b in sorted(v):
            covered += max(0, b - max(a, end))
            end = max(end, b)
    return max(0, psize - covered)


def du(path):
    return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True, check=True).stdout.split()[0]) * 1024


def main():
    return mount_test("ckptfs-s3dc-", run)


def run(s3, tmp, mounts):
    src, packed, other_src, other = (os.path.join(tmp, n) for n in ("src", "packed", "osrc", "opacked"))
    os.makedirs(os.path.join(src, "sub"))
    os.makedirs(os.path.join(other_src, "sub"))
    safetensors(os.path.join(src, "model.safetensors"), {"a": (2048, 4096), "b": (1024, 1000)})
    safetensors(os.path.join(src, "sub", "small.safetensors"), {"x": (64, 64)})
    with open(os.path.join(src, "sub", "blob.bin"), "wb") as f:
        f.write(os.urandom(6 * MB))
    with open(os.path.join(other_src, "sub", "blob.bin"), "wb") as f:
        f.write(os.urandom(6 * MB))
    for s, d in ((src, packed), (other_src, other)):
        subprocess.run([CKPTFS, "pack", s, d], check=True, capture_output=True)
    s3.upload_dir(packed, "m")
    url, env = s3.url("m"), s3.env()
    want = {k: sha(p) for k, p in tree(src).items()}
    psize = sum(os.path.getsize(p) for k, p in tree(packed).items() if k.endswith(".ckpt"))
    n = [0]

    def mount(cache, opts=""):
        n[0] += 1
        m = Mount(url, os.path.join(tmp, f"mnt{n[0]}"), env, f"cache_dir={cache}" + ("," + opts if opts else ""))
        mounts.append(m)
        return m

    def right(m):
        try:
            return sorted(tree(m.mnt)) == sorted(want) and all(sha(os.path.join(m.mnt, k)) == v for k, v in want.items())
        except OSError as e:
            print(f"read failed: {e}; log:\n" + open(m.log, errors="replace").read()[-2000:])
            return False

    # 0. options refused before mounting
    def refused(what, packed_url, opts, needle):
        mnt = os.path.join(tmp, "refused")
        os.makedirs(mnt, exist_ok=True)
        p = subprocess.run([CKPTFS, "mount", "-f", "-o", opts, packed_url, mnt], env=env, capture_output=True,
                           timeout=60)
        msg = p.stderr.decode(errors="replace")
        check(p.returncode != 0 and needle in msg and not Mount.mounted(type("M", (), {"mnt": mnt})()),
              f"{what}: refused (exit {p.returncode}: {msg.strip()[:160]})")
    refused("cache_dir= of a local mount", packed, f"cache_dir={tmp}/c0", "s3:// only")
    refused("cache_dir_size under 1 MiB", url, f"cache_dir={tmp}/c0,cache_dir_size=100K", "cache_dir_size")
    open(os.path.join(tmp, "afile"), "w").close()
    refused("cache_dir= a file", url, f"cache_dir={tmp}/afile", "afile")
    os.makedirs(os.path.join(tmp, "open"))
    os.chmod(os.path.join(tmp, "open"), 0o777)
    refused("cache_dir= writable by others", url, f"cache_dir={tmp}/open", "no one else may write")

    cache = os.path.join(tmp, "cache")
    # 1. cold, then warm
    with mount(cache) as m:
        check(right(m), "cold cache: every file right")
        cold = m.stats()
    print("cold:", json.dumps({k: v for k, v in cold.items() if k.startswith(("s3_", "disk_"))}))
    check(cold["disk_cache_stored"] > 0 and cold["s3_packed_bytes_fetched"] >= 0.9 * psize,
          f"cold cache: {cold['s3_packed_bytes_fetched']} bytes fetched of {psize} packed, {cold['disk_cache_stored']} entries stored")
    with mount(cache) as m:
        check(right(m), "warm cache (a remount): every file right")
        warm = m.stats()
    print("warm:", json.dumps({k: v for k, v in warm.items() if k.startswith(("s3_", "disk_"))}))
    check(warm["s3_packed_bytes_fetched"] <= 0.02 * psize and warm["disk_cache_hit_bytes"] >= 0.9 * psize,
          f"warm cache: {warm['s3_packed_bytes_fetched']} bytes fetched (<= 2% of {psize}), "
          f"{warm['disk_cache_hit_bytes']} read from the cache")

    # 2. bad entries: flipped bytes, truncated, another entry's file copied over one
    es = sorted(entries(cache), key=os.path.getsize, reverse=True)
    check(len(es) >= 4, f"{len(es)} entries in the cache")
    flip, trunc, donor, victim = es[:4]
    with open(flip, "r+b") as f:
        f.seek(os.path.getsize(flip) // 2)
        b = f.read(16)
        f.seek(-16, 1)
        f.write(bytes(x ^ 0x5A for x in b))
    with open(trunc, "r+b") as f:
        f.truncate(os.path.getsize(trunc) - 100)
    shutil.copyfile(donor, victim)
    bad_bytes = sum(int(os.path.basename(p).split("-")[1], 16) for p in (flip, trunc, victim))
    never = uncached(cache, psize)
    # and each file's first GET at its open (its first 64 KiB: the ETag the cache is keyed by)
    firsts = sum(min(os.path.getsize(p), 64 << 10) for k, p in tree(packed).items() if k.endswith(".ckpt"))
    with mount(cache) as m:
        check(right(m), "flipped, truncated and swapped entries: every file still right (no EIO)")
        st = m.stats()
    print("bad:", json.dumps({k: v for k, v in st.items() if k.startswith(("s3_", "disk_"))}))
    # the first GETs bypass the cache: they are among the bytes no entry holds
    check(st["disk_cache_bad"] == 3 and 0 < st["s3_packed_bytes_fetched"] <= bad_bytes + max(firsts, never),
          f"3 bad entries detected ({st['disk_cache_bad']}), deleted and fetched again "
          f"({st['s3_packed_bytes_fetched']} bytes fetched <= {bad_bytes}, their lengths, + the larger of "
          f"{firsts}, the files' first GETs, and {never}, the packed bytes no entry held)")
    with mount(cache) as m:
        check(right(m), "after the refetch: every file right")
        st = m.stats()
    check(st["disk_cache_bad"] == 0 and st["s3_packed_bytes_fetched"] <= 0.02 * psize,
          f"after the refetch: no bad entry, {st['s3_packed_bytes_fetched']} bytes fetched")

    # 3. an object replaced on the server after it was cached: EIO, not the old bytes
    c = s3.client()
    key = "m/sub/blob.bin.ckpt"
    check(os.path.getsize(os.path.join(other, "sub", "blob.bin.ckpt")) ==
          os.path.getsize(os.path.join(packed, "sub", "blob.bin.ckpt")), "the replacement packs to the same size")
    c.upload_file(os.path.join(other, "sub", "blob.bin.ckpt"), s3.bucket, key)
    with mount(cache) as m:
        try:
            open(os.path.join(m.mnt, "sub", "blob.bin"), "rb").read()
            eio = False
        except OSError as e:
            eio = e.errno == errno.EIO
        check(eio, "an object replaced after it was cached: EIO (its ETag changed; the old entries unused)")
        check(sha(os.path.join(m.mnt, "model.safetensors")) == want["model.safetensors"], "the other files still right")
    c.upload_file(os.path.join(packed, "sub", "blob.bin.ckpt"), s3.bucket, key)

    # 4. the bound: a cache smaller than the pack
    small, limit = os.path.join(tmp, "small"), 12 * MB
    # prefetch=0: entries of one read each (<= 1 MiB); a streaming reader's
    # windows (5.6 MB packed) exceed limit / 4 and are never stored at all
    with mount(small, f"cache_dir_size={limit},prefetch=0") as m:
        check(right(m), "a cache smaller than the pack: every file right")
        used = du(small)
        st = m.stats()
    window = 6 * MB  # the packed bytes of one 8 MiB window (5.6 MiB for BF16)
    check(st["disk_cache_evicted"] > 0 and used <= limit + window,
          f"cache_dir_size={limit}: du {used} <= {limit} + one window {window} ({st['disk_cache_evicted']} evicted)")
    with mount(small, f"cache_dir_size={limit}") as m:
        check(right(m), "a small cache, remounted: every file right")

    # 5. a daemon killed with SIGKILL mid-fill
    killed = os.path.join(tmp, "killed")
    m = mount(killed, "s3_windows=4")
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                sha(os.path.join(m.mnt, "model.safetensors"))
        except OSError:
            pass
    t = threading.Thread(target=reader)
    t.start()
    deadline = time.time() + 60
    while time.time() < deadline and m.stats()["disk_cache_stored"] < 3:
        time.sleep(0.02)
    os.kill(m.p.pid, signal.SIGKILL)
    stop.set()
    m.close()
    t.join(60)
    # and a temporary file of a writer that is gone (a process that exited)
    dead = subprocess.Popen(["true"])
    dead.wait()
    with open(os.path.join(killed, "v1", "tmp", f"{dead.pid}.0"), "wb") as f:
        f.write(b"half an entry")
    left = len(entries(killed))
    with mount(killed) as m:
        check(right(m), f"after a daemon killed mid-fill ({left} entries left): every file right")
        st = m.stats()
        tmps = os.listdir(os.path.join(killed, "v1", "tmp"))
    check(left > 0 and st["disk_cache_bad"] == 0 and st["disk_cache_hit_bytes"] > 0 and not tmps,
          f"after the kill: the entries it left used ({st['disk_cache_hit_bytes']} bytes), none bad, "
          f"no temporary file left ({tmps})")


    # 6. two daemons sharing one cache_dir, both filling and evicting it at once
    shared, limit = os.path.join(tmp, "shared"), 12 * MB
    a, b = mount(shared, f"cache_dir_size={limit}"), mount(shared, f"cache_dir_size={limit}")
    res = {}
    ts = [threading.Thread(target=lambda m=m: res.__setitem__(m.mnt, right(m) and right(m))) for m in (a, b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    sa, sb = a.stats(), b.stats()
    a.close()
    b.close()
    check(all(res.get(m.mnt) for m in (a, b)) and sa["disk_cache_bad"] == 0 and sb["disk_cache_bad"] == 0,
          f"two daemons sharing a cache_dir, each reading every file twice: every byte right, no bad entry "
          f"({sa['disk_cache_evicted'] + sb['disk_cache_evicted']} evicted, "
          f"{sa['disk_cache_hit_bytes'] + sb['disk_cache_hit_bytes']} bytes from the cache)")
    used = du(shared)
    with mount(shared, f"cache_dir_size={limit}") as m:
        check(right(m), "after them, a third daemon: every file right")
        st = m.stats()
    check(st["disk_cache_bad"] == 0 and st["disk_cache_hit_bytes"] > 0 and used <= limit + 6 * MB,
          f"after them: none of their entries bad, {st['disk_cache_hit_bytes']} bytes used, du {used} <= {limit} + 6 MiB")


if __name__ == "__main__":
    sys.exit(main())
