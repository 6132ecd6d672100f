#!/usr/bin/env python3
"""diff_reader.py — ckptfs verify against the spec's second reader (ckread.py) on
mutated packs: where the two disagree, docs/format.md does not say exactly what
ckptfs accepts (or one of them is wrong).

Each trial writes an accepted conformance case with ckpack.py and changes one
thing, then asks both readers for a verdict:
  packed   1-3 bytes of a .ckpt changed (header and TOC bytes more often), its
           checksums then recomputed 4 times in 5 (the golden-error harness's
           fix-up), so that the change reaches the checks behind them;
  manifest a JSON token inserted, replaced or deleted (a \\u0000, a lone
           surrogate, 01, NaN, a repeated key, ...), the hash recomputed;
  frame    one file of one zstd chunk whose frame has 1-2 bits flipped (the
           chunk hash stays right: only the frame's validity is in question).
A disagreement's pack is kept under --keep.  `--rounds 0` runs nothing.
Usage: diff_reader.py CKPTFS [--seed N] [--rounds N] [--keep DIR]
Exit 1 on any disagreement.  ctest conformance_diff runs a few fixed-seed rounds;
longer runs (--rounds 100 and more, other seeds) are for changes to a reader.
"""
import argparse
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ckpack  # noqa: E402
import zstandard  # noqa: E402
from cases import T, cases  # noqa: E402
from check_reader import fixup  # noqa: E402
from ckpack import ZSTD, Extent, File, xxh3  # noqa: E402
from ckread import Packed, Reject, read_pack  # noqa: E402

TOKENS = [b"\\u0000", b"01", b"1.", b"-0", b"1e5", b"1E-2", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b",", b"[",
          b"]", b"{", b"}", b'"', b"\\", b" ", b"\t", b"\n", b"\x0c", b"\x00", b"\xef\xbb\xbf", b"\xc3\xa9",
          b"\xc0\xaf", b"\xff", b"null", b"true", b"NaN", b"Infinity", b"1.0", b"4.2e2", b"9007199254740993",
          b"1e400", b"-1", b'"path"', b'"mode"', b'"size"', b'"format"', b'"files"', b'"dirs"', b":", b"\\u0061",
          b"/", b"..", b"a/", b"/a"]


def mutate_packed(rnd, dst):
    ckpts = [os.path.join(r, n) for r, _, ns in os.walk(dst) for n in ns
             if n.endswith(".ckpt") and os.path.getsize(os.path.join(r, n)) >= 64]
    if not ckpts:
        return False
    p = rnd.choice(ckpts)
    b = bytearray(open(p, "rb").read())
    toc_off = struct.unpack_from("<Q", b, 24)[0]
    head_or_toc = rnd.random() < 0.6 and toc_off < len(b)
    for _ in range(rnd.choice([1, 1, 2, 3])):
        i = rnd.choice([rnd.randrange(64), rnd.randrange(toc_off, len(b))]) if head_or_toc else rnd.randrange(len(b))
        op = rnd.random()
        if op < 0.5:
            b[i] ^= 1 << rnd.randrange(8)
        elif op < 0.8:
            b[i] = rnd.choice([0, 1, 0xFF, 0x80, 0x7F, 0x10])
        else:
            b[i] = (b[i] + rnd.choice([-1, 1, 8, -8])) & 0xFF
    open(p, "wb").write(fixup(bytes(b)) if rnd.random() < 0.8 else b)
    return True


def mutate_manifest(rnd, dst):
    mp = os.path.join(dst, "ckptfs.manifest")
    m = open(mp, "rb").read()
    js = bytearray(m[m.index(b"\n") + 1:])
    for _ in range(rnd.choice([1, 1, 2])):
        i, op = rnd.randrange(len(js) + 1), rnd.random()
        if op < 0.4:
            js[i:i] = rnd.choice(TOKENS)
        elif op < 0.7:
            tok = rnd.choice(TOKENS)
            js[i:i + len(tok)] = tok
        elif op < 0.85:
            del js[i:i + rnd.randrange(1, 4)]
        else:
            vals = list(re.finditer(rb'(?<=: )("[^"]*"|[-0-9.eE+]+)', bytes(js)))
            if vals:
                v = rnd.choice(vals)
                js[v.start():v.end()] = rnd.choice(TOKENS + [b'"x"', b'""', b'"a/b"', b'"blob"', b"420", b'"-0"'])
    js = bytes(js)
    open(mp, "wb").write(b"CKPTFS-MANIFEST 1 %016x\n" % xxh3(js) + js)
    return True


def frame_files(rnd):
    files = []
    for i in range(20):
        n = rnd.randrange(50, 3000)
        start = rnd.randrange(len(T) - n) if n < len(T) else 0
        d = T[start:start + n]
        fr = bytearray(zstandard.ZstdCompressor(level=rnd.choice([1, 3, 9, 19, -1]),
                                                write_checksum=rnd.random() < 0.3).compress(d))
        for _ in range(rnd.choice([1, 1, 2])):
            fr[rnd.randrange(4, len(fr))] ^= 1 << rnd.randrange(8)
        files.append(File("f%02d.bin" % i, [Extent(ZSTD, d, chunk_size=len(d), frame=lambda b, fr=bytes(fr): fr)]))
    return files


def verdicts(ck, dst):
    """(ckread accepts the pack?, ckptfs verify does?, verify's messages)."""
    try:
        read_pack(dst)
        py = True
    except Reject:
        py = False
    r = subprocess.run([ck, "verify", dst], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return py, r.returncode == 0, r.stderr.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckptfs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--keep")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="ckptfs-diff-")
    keep = a.keep or tmp
    acc = [c for c in cases() if c["verdict"] == "accept" and not c.get("post")]
    bad = trials = 0
    try:
        for _ in range(a.rounds):
            for c in acc + ["frames"]:
                for what in (("frame",) if c == "frames" else ("packed", "manifest")):
                    dst = os.path.join(tmp, "d")
                    shutil.rmtree(dst, ignore_errors=True)
                    if what == "frame":
                        ckpack.write_pack(dst, frame_files(rnd))
                    else:
                        ckpack.write_pack(dst, c["files"], c.get("dirs", ()), c.get("manifest_edit"),
                                          c.get("manifest_damage"), c.get("extra"), c.get("links", ()))
                        if not (mutate_packed if what == "packed" else mutate_manifest)(rnd, dst):
                            continue
                    trials += 1
                    if what == "frame":  # per file: ckptfs verify names each damaged one
                        r = subprocess.run([a.ckptfs, "verify", dst], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.PIPE, timeout=120)
                        err = r.stderr.decode(errors="replace")
                        named = set(re.findall(r"(f\d\d\.bin)\.ckpt", err))
                        for f in sorted(os.listdir(dst)):
                            if f.endswith(".ckpt"):
                                data, e = Packed(open(os.path.join(dst, f), "rb").read()).read_all()
                                if (e is None) != (f[:-5] not in named):
                                    py, ck = e is None, f[:-5] not in named
                                    break
                        else:
                            py = ck = True
                    else:
                        py, ck, err = verdicts(a.ckptfs, dst)
                    if py != ck:
                        bad += 1
                        k = os.path.join(keep, "disagreement-%d" % bad)
                        shutil.rmtree(k, ignore_errors=True)
                        shutil.copytree(dst, k)
                        print("FAIL %s %s: ckread %s, ckptfs %s (%s) -> %s" % (
                            what, c if c == "frames" else c["name"], "accepts" if py else "rejects",
                            "accepts" if ck else "rejects", err.strip().split("\n")[-1][:120], k))
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d trials, %d disagreements" % (trials, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
