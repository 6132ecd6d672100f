"""bench_disk_cache.py — what -o cache_dir= saves a remount, against a real
S3 server (SeaweedFS, s3fixture.py) on loopback: a 256 MiB BF16 file packed
and uploaded, then per round an empty cache_dir, one mount reading the file
(cold: every packed byte from S3), a remount reading it again (warm: from
the cache).  Prints each read's seconds and packed bytes fetched, and the
warm/cold time ratio of each round (a ratio in the same run, not a timed
test; the cache files are in the page cache then, as on a remount soon
after).  Not a ctest.  Usage: bench_disk_cache.py CKPTFS [ROUNDS]  (root)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3fixture import SeaweedS3  # noqa: E402
from test_s3_disk_cache import CKPTFS, Mount, safetensors, sha  # noqa: E402


def read_once(url, env, mnt, cache):
    m = Mount(url, mnt, env, f"cache_dir={cache}")
    try:
        t0 = time.monotonic()
        sha(os.path.join(m.mnt, "m.safetensors"))
        dt = time.monotonic() - t0
        st = m.stats()
    finally:
        m.close()
    return dt, st["s3_packed_bytes_fetched"], st["disk_cache_hit_bytes"]


def main():
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    tmp = tempfile.mkdtemp(prefix="ckptfs-s3dcb-")
    try:
        with SeaweedS3() as s3:
            src, packed = os.path.join(tmp, "src"), os.path.join(tmp, "packed")
            os.makedirs(src)
            safetensors(os.path.join(src, "m.safetensors"), {f"w{i}": (4096, 4096) for i in range(8)})
            subprocess.run([CKPTFS, "pack", src, packed], check=True, capture_output=True)
            s3.upload_dir(packed, "b")
            psize = os.path.getsize(os.path.join(packed, "m.safetensors.ckpt"))
            print(f"file {os.path.getsize(os.path.join(src, 'm.safetensors'))} bytes, packed {psize}")
            cache = os.path.join(tmp, "cache")
            for r in range(rounds):
                shutil.rmtree(cache, ignore_errors=True)
                cold = read_once(s3.url("b"), s3.env(), os.path.join(tmp, f"c{r}"), cache)
                warm = read_once(s3.url("b"), s3.env(), os.path.join(tmp, f"w{r}"), cache)
                print(f"round {r}: cold {cold[0]:.2f} s ({cold[1]} bytes fetched), warm {warm[0]:.2f} s "
                      f"({warm[1]} fetched, {warm[2]} from the cache): warm/cold {warm[0] / cold[0]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
