#!/usr/bin/env python3
"""archive_memory.py — a reader's ARCHIVE decode tables stay within their
budget (docs/format.md §9.1) on a valid file crafted to amplify them.

ckpack.py (the independent writer) writes one file of E ARCHIVE extents
that all point at one extent's planes (§3 lets payloads overlap): tables of
16 classes and ~120 symbols, a few KB stored, ~370 KiB once built, plus a
RAW extent that makes the file big enough for R29 (all extents' tables fit
in it).  A reader that kept every extent's decode tables until it closes
would hold E x 370 KiB; ckptfs keeps at most 64 MiB + the file's size / 8
of them and builds the rest per decode.  `ckptfs verify` (every byte
checked against the SHA-256) and `ckptfs unpack` (the bytes compared with
the original here) must pass with a peak RSS under that budget plus
BASE_MB for the process itself.
Usage: archive_memory.py CKPTFS"""
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpack import ARCHIVE, RAW, Ans, Extent, File, write_pack  # noqa: E402

E = 1000          # extents sharing one extent's tables
N = 2048          # weights per extent (one chunk)
BASE_MB = 48      # the process without kept tables (ckptfs verify: ~10 MB)
SANITIZED = bool(os.environ.get("CKPTFS_SANITIZER_BUILD"))  # ASan inflates RSS: bound not checked


def weights(rng):
    """N BF16 weights over ~120 sign/exponent symbols: big decode tables."""
    w = [(rng.randrange(2) << 15) | (rng.randrange(100, 160) << 7) | rng.randrange(128) for _ in range(N)]
    return struct.pack("<%dH" % N, *w)


def peak_mb(argv):
    """Runs argv; (exit status, its peak RSS in MB, its stderr)."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, ru.ru_maxrss / 1024, err.decode(errors="replace")


def main():
    ck = sys.argv[1]
    rng = random.Random(28)
    data = weights(rng)
    ans = Ans(m=3, k=16, axis=0, c=16)
    exts = [Extent(ARCHIVE, data, chunk_size=2 * N, ans=ans)]
    exts += [Extent(ARCHIVE, data, chunk_size=2 * N, share=0) for _ in range(E - 1)]
    tables = len(exts[0].payload()[0][0])
    exts.append(Extent(RAW, bytes(rng.randrange(256) for _ in range(64)) * (E * tables // 64 + 1)))
    f = File("m.bin", exts)
    t = tempfile.mkdtemp(prefix="ckptfs-archive-memory.")
    fails = 0
    try:
        packed, out = os.path.join(t, "p"), os.path.join(t, "out")
        write_pack(packed, [f])
        size = os.path.getsize(os.path.join(packed, "m.bin.ckpt"))
        bound = 64 + size / 8 / 2**20 + BASE_MB
        print(f"file {size / 1e6:.1f} MB, {E} extents sharing {tables} bytes of tables; bound {bound:.0f} MB")
        for name, argv in (("verify", [ck, "verify", "-q", "--jobs", "4", packed]), ("unpack", [ck, "unpack", "-q", packed, out])):
            rc, mb, err = peak_mb(argv)
            ok = rc == 0 and (mb < bound or SANITIZED)
            print(f"{'ok' if ok else 'FAIL'}: {name} exit {rc}, peak RSS {mb:.0f} MB (bound {bound:.0f} MB) {err.strip()}")
            fails += not ok
        got = os.path.join(out, "m.bin")
        with open(got, "rb") if os.path.exists(got) else open(os.devnull, "rb") as o:
            same = o.read() == f.original()
        print(f"{'ok' if same else 'FAIL'}: unpacked bytes equal the original")
        fails += not same
    finally:
        shutil.rmtree(t, ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
