"""test_s3_open.py — what a packed file's first open costs over s3://
(issue 25): the requests `ckptfs stat s3://...` makes for each object (it
opens every packed file: header, table of contents, chunk indexes, and
reads no chunk), counted by a proxy in front of a real S3 server
(SeaweedFS, s3fixture.py; s3proxy.FaultProxy's gate sees every request).

The model: "many" (400 small BF16 tensors of 1-8 KiB, and 3 of 2 MiB among
them: 404 extents, each with its own chunk index), "few" (4 tensors of
2 MiB: indexes megabytes apart), "tiny" (a file smaller than 64 KiB).
What must hold:
- no HEAD: the first GET of an object gives its ETag and size;
- "many" opens in at most 7 GETs: its first 64 KiB, the TOC, and one for
  each of the 5 runs of small tensors' indexes between the big tensors'
  planes (one per chunk index before: 400+), and
  what they fetch stays within the rule's bound: 64 KiB + the TOC + at
  most 1 MiB per coalesced GET;
- "few" in at most 2 GETs + one per extent; "tiny" in exactly 1 GET;
- every GET after an object's first carries If-Match with the first's ETag;
- every byte still right: unpack of the s3:// URL equals the originals
  (sha256), and verify passes.
Usage: test_s3_open.py CKPTFS
"""
import json
import os
import struct
import subprocess
import sys
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3proxy import FaultProxy  # noqa: E402
from s3check import MB, check, pack_and_upload, server_test, sha, tree  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])
FILES = ("many.safetensors", "few.safetensors", "tiny.safetensors")


def save(path, tensors):
    """A safetensors file of BF16 tensors {name: bytes} (1-D)."""
    hdr, off = {}, 0
    for name, data in tensors.items():
        hdr[name] = {"dtype": "BF16", "shape": [len(data) // 2], "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(tensors.values()))


def make_model(src):
    os.makedirs(src)
    rng = np.random.default_rng(25)

    def bf16(n):
        a = (rng.standard_normal(n).astype(np.float32) * 0.02).view(np.uint32)
        return (a >> 16).astype(np.uint16).tobytes()

    many = {}
    for i in range(400):
        many[f"layers.{i:03d}.norm"] = bf16(int(rng.integers(512, 4097)))
        if i % 100 == 50:
            many[f"layers.{i:03d}.proj"] = bf16(MB)  # 2 MiB
    save(os.path.join(src, FILES[0]), many)
    save(os.path.join(src, FILES[1]), {f"w{i}": bf16(MB) for i in range(4)})
    save(os.path.join(src, FILES[2]), {"t": bf16(3000)})


def toc_of(path):
    """(n_extents, toc_size, [(index_offset, index_bytes)]) of a packed file
    (format §3.1, §3.2, §4.1)."""
    with open(path, "rb") as f:
        b = f.read()
    toc_off, toc_size = struct.unpack_from("<QQ", b, 24)
    n = struct.unpack_from("<I", b, toc_off + 4)[0]
    idx = []
    for i in range(n):
        rec = toc_off + 96 + 192 * i
        n_chunks, index_off = struct.unpack_from("<QQ", b, rec + 24)
        idx.append((index_off, 16 * n_chunks))
    return n, toc_size, idx


class Counter:
    """A FaultProxy gate recording (method, key, Range, If-Match) of every
    request, forwarding them all."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = []

    def __call__(self, method, path, headers):
        with self.lock:
            self.seen.append((method, path.split("?")[0], headers.get("Range"), headers.get("If-Match")))
        return False

    def of(self, key):
        with self.lock:
            return [s for s in self.seen if s[1].endswith("/" + key)]


def range_len(r):
    a, b = r[len("bytes="):].split("-")
    return int(b) - int(a) + 1


def main():
    return server_test("ckptfs-s3o-", run)


def run(s3, tmp):
    src, packed, _, url = pack_and_upload(CKPTFS, s3, tmp, make_model, "o")
    gate = Counter()
    with FaultProxy(s3.port, every=1 << 40, burst=0, gate=gate) as px:
        env = s3.env(AWS_ENDPOINT_URL=px.endpoint)
        r = subprocess.run([CKPTFS, "stat", "--json", url], capture_output=True, text=True, env=env, timeout=300)
    check(r.returncode == 0, f"stat --json {url}: exit 0 ({r.returncode}: {r.stderr.strip()[-300:]})")
    for f in FILES:
        key = f + ".ckpt"
        n, toc_size, idx = toc_of(os.path.join(packed, key))
        reqs = gate.of(key)
        gets = [q for q in reqs if q[0] == "GET"]
        heads = [q for q in reqs if q[0] == "HEAD"]
        fetched = sum(range_len(q[2]) for q in gets if q[2])
        print(f"{f}: {n} extents, {len(idx)} chunk indexes, packed {os.path.getsize(os.path.join(packed, key))} "
              f"bytes; at open {len(heads)} HEAD, {len(gets)} GETs, {fetched} bytes asked for")
        check(not heads, f"{f}: no HEAD at open ({len(heads)})")
        check(all(q[2] for q in gets), f"{f}: every GET at open is ranged")
        first = gets[0] if gets else None
        check(first is not None and first[2] == "bytes=0-65535" and first[3] is None,
              f"{f}: the first GET is of the first 64 KiB, without If-Match ({first})")
        check(all(q[3] for q in gets[1:]), f"{f}: every later GET carries If-Match")
        if f == FILES[0]:
            check(n > 400 and len(gets) <= 7, f"{f}: {len(gets)} GETs at open <= 7: the first, the TOC, one per run "
                  f"of indexes between the 4 big tensors' planes (one per index was {n} + 3)")
            check(fetched <= (64 << 10) + toc_size + (len(gets) - 1) * MB,
                  f"{f}: {fetched} bytes at open <= 64 KiB + TOC {toc_size} + 1 MiB per further GET")
        elif f == FILES[1]:
            check(len(gets) <= 2 + n, f"{f}: {len(gets)} GETs at open <= 2 + {n} extents")
        else:
            check(len(gets) == 1, f"{f}: {len(gets)} GET at open (the whole file in the first)")

    # every byte: unpack from s3:// equals the originals; verify passes
    out = os.path.join(tmp, "out")
    r = subprocess.run([CKPTFS, "unpack", url, out], capture_output=True, text=True, env=s3.env(), timeout=300)
    want = {k: sha(p) for k, p in tree(src).items()}
    got = {k: sha(p) for k, p in tree(out).items()} if r.returncode == 0 else {}
    check(r.returncode == 0 and got == want, f"unpack {url}: every file's bytes equal the original's "
          f"({r.returncode}: {r.stderr.strip()[-300:]}; {sorted(got)} vs {sorted(want)})")
    r = subprocess.run([CKPTFS, "verify", url], capture_output=True, text=True, env=s3.env(), timeout=300)
    check(r.returncode == 0 and "all checksums ok" in r.stdout, f"verify {url}: exit 0 ({r.stderr.strip()[-300:]})")


if __name__ == "__main__":
    sys.exit(main())
