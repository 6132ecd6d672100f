#!/usr/bin/env python3
"""check_vectors.py — the test vectors of docs/format.md's appendix, checked.

Reads the ```vectors block and the ```hexdump / ```manifest blocks of
docs/format.md and checks them against independent truth:
  xxh3 / sha256 lines  against the xxhash package and hashlib;
  k15 / bsplit lines   against ckpack.py's encoder (the planes of §5.1 from
                       the weights and codebook given on the line);
  the example file     byte for byte against ckpack.py built from the inputs
                       the appendix states, and then through ckptfs: a packed
                       directory of that file and the example manifest must
                       verify and unpack to the stated original bytes.
Usage: check_vectors.py CKPTFS [FORMAT_MD]      (--print: write the blocks)
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpack  # noqa: E402
from ckpack import K15, BSPLIT, Extent, File  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "..", "..", "docs", "format.md")

# The example of the appendix: these inputs, and the bytes they must give.
EX_WEIGHTS = [0x3F80, 0xBF80, 0x3C23, 0x3C24, 0xBC23, 0x4049, 0x0001, 0x7F80]
EX_CODEBOOK = [0x78, 0x7F, 0x178, 0x17F] + [0x1FF] * 11 + [0]


def example_file():
    data = b"".join(w.to_bytes(2, "little") for w in EX_WEIGHTS)
    return File("w.bin", [Extent(K15, data, chunk_size=16, codebook=EX_CODEBOOK, dtype=7)],
                mode=0o644, mtime_ns=1700000000000000000)


def planes(enc, weights, codebook):
    data = b"".join(w.to_bytes(2, "little") for w in weights)
    p, n_esc, _ = ckpack.encode_bf16(enc, data, codebook, 2 * len(weights))
    return p, n_esc


def hexdump(b):
    return "\n".join("%04x: %s" % (i, " ".join("%02x" % x for x in b[i:i + 16])) for i in range(0, len(b), 16))


def unhexdump(text):
    out = bytearray()
    for line in text.strip().splitlines():
        addr, _, rest = line.partition(":")
        assert int(addr, 16) == len(out), "hexdump address %s" % addr
        out += bytes.fromhex(rest.split("|")[0])
    return bytes(out)


def vector_lines():
    lines = ['xxh3 "" %016x' % ckpack.xxh3(b""),
             'xxh3 "abc" %016x' % ckpack.xxh3(b"abc"),
             'xxh3 "ckptfs" %016x' % ckpack.xxh3(b"ckptfs"),
             'sha256 "abc" %s' % hashlib.sha256(b"abc").hexdigest()]
    for name, enc, w, cb in (("k15", K15, EX_WEIGHTS, EX_CODEBOOK),
                             ("bsplit", BSPLIT, [0x3F80, 0xBF80, 0x3C23, 0x0001, 0x4049],
                              [0x3F, 0xBF, 0x3C] + [0xFF] * 12 + [0])):
        p, n_esc = planes(enc, w, cb)
        lines.append("%s weights=%s codebook=%s codes=%s low=%s escapes=%s n_escapes=%d" % (
            name, ",".join("%04x" % x for x in w), ",".join("%x" % x for x in cb),
            p[0].hex(), p[1].hex(), p[2].hex(), n_esc))
    return lines


def blocks(md, kind):
    return re.findall(r"```%s\n(.*?)```" % kind, md, re.S)


def check(ck, md):
    bad = []
    want = vector_lines()
    got = [l.strip() for l in blocks(md, "vectors")[0].strip().splitlines() if l.strip()]
    for w in want:
        if w not in got:
            bad.append("vector missing or wrong in the spec: " + w)
    if len(got) != len(want):
        bad.append("the spec has %d vectors, the checker knows %d" % (len(got), len(want)))
    f = example_file()
    dump = unhexdump(blocks(md, "hexdump")[0])
    if dump != ckpack.build_file(f):
        bad.append("the example file's hexdump differs from the file built from the stated inputs")
    man = blocks(md, "manifest")[0].encode()[:-1]  # the fence's newline is not part of the file
    if man != ckpack.manifest_bytes([f], []):
        bad.append("the example manifest differs from the one built from the stated inputs")
    tmp = tempfile.mkdtemp(prefix="ckptfs-vectors-")
    try:
        dst = os.path.join(tmp, "dst")
        os.mkdir(dst)
        open(os.path.join(dst, "w.bin.ckpt"), "wb").write(dump)
        open(os.path.join(dst, "ckptfs.manifest"), "wb").write(man)
        for cmd in (["verify", dst], ["unpack", dst, os.path.join(tmp, "out")]):
            p = subprocess.run([ck] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if p.returncode:
                bad.append("ckptfs %s refused the example: %s" % (cmd[0], p.stderr.decode()))
        out = os.path.join(tmp, "out", "w.bin")
        if not os.path.exists(out) or open(out, "rb").read() != f.original():
            bad.append("ckptfs unpack did not rebuild the example's original bytes")
    finally:
        shutil.rmtree(tmp)
    return bad


def main():
    if "--print" in sys.argv:
        f = example_file()
        print("```vectors\n%s\n```\n" % "\n".join(vector_lines()))
        print("```hexdump\n%s\n```\n" % hexdump(ckpack.build_file(f)))
        print("```manifest\n%s\n```" % ckpack.manifest_bytes([f], []).decode())
        return 0
    md = open(sys.argv[2] if len(sys.argv) > 2 else SPEC, encoding="utf-8").read()
    bad = check(sys.argv[1], md)
    for b in bad:
        print("FAIL", b)
    print("test vectors of docs/format.md: %d problems" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
