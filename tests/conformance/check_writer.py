#!/usr/bin/env python3
"""check_writer.py — does `ckptfs pack` write only what docs/format.md's
"writer MUST" rules allow?

Packs a small model (BF16 tensors of odd and even length, an incompressible
F32 tensor and blobs that make the writer fall back from zstd to raw, an
empty file, a UTF-8 name) twice, with --jobs 1 and --jobs 2, in K15 and in
ARCHIVE, and checks with
a parser of its own (struct + xxhash, not the project's reader):
  - the two packs are byte-identical (reproducible output);
  - every byte that no field, payload or index covers is zero (§3);
  - padding bits of the BF16 planes are zero (§5.1), reserved fields zero;
  - TOC mode has no bits above 07777, kind follows the .safetensors suffix,
    toc_offset is a multiple of 8, paths and names are UTF-8 (§2, §3.2);
  - the spec's second reader (ckread.py) reads every source file's bytes
    back, and the manifest lists its entries sorted by path (§7);
and that a source name that is not UTF-8 is refused, naming the file, with
no manifest written.
Usage: check_writer.py CKPTFS
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import bf16, noise  # noqa: E402
from ckread import Reject, read_pack  # noqa: E402



def write_safetensors(path, tensors):
    """tensors: {name: (dtype, shape, bytes)} in data order."""
    header, off = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(t[2] for t in tensors.values()))


def sources(d):
    rnd = random.Random(5)
    write_safetensors(os.path.join(d, "model.safetensors"), {
        "a.weight": ("BF16", [33, 31], bf16(33 * 31, seed=11)),
        "b.weight": ("BF16", [70000], bf16(70000, seed=12)),
        "c.bias": ("F32", [250], noise(1000, seed=13)),
    })
    for name, size in (("noise.bin", 1000), ("noise2.bin", 262144 + 77), ("z.bin", 300000)):
        with open(os.path.join(d, name), "wb") as f:
            f.write(noise(size, seed=size) if name != "z.bin" else bytes(rnd.choice(b"ab\n") for _ in range(size)))
    os.mkdir(os.path.join(d, "données"))
    with open(os.path.join(d, "données", "vide"), "wb"):
        pass


def stored(exact):
    return (exact + 7) // 8 * 8 + 8


def check_bits_zero(buf, first_bit, what):
    """Every bit of buf from first_bit on is zero."""
    if first_bit % 8 and buf[first_bit // 8] >> (first_bit % 8):
        return "%s: padding bits set" % what
    if any(buf[(first_bit + 7) // 8:]):
        return "%s: padding bytes set" % what
    return None


def check_file(path, rel):
    """Problems with one packed file, as a list of strings."""
    b = open(path, "rb").read()
    bad = []
    (magic, major, minor, flags, orig, toc_off, toc_size, toc_hash, fsize, hhash) = \
        struct.unpack_from("<8sHHIQQQQQQ", b, 0)
    if toc_off % 8 or fsize != len(b) or flags:
        bad.append("header fields")
    covered = [(0, 64), (toc_off, toc_off + toc_size)]
    (tmagic, n, torig, sha, kind, mode, mtime, plen, ssize) = struct.unpack_from("<4sIQ32sIIqII", b, toc_off)
    if any(b[toc_off + 72:toc_off + 96]):
        bad.append("TOC reserved")
    if mode & ~0o7777:
        bad.append("TOC mode has bits above 07777")
    if kind != (1 if rel.endswith(".safetensors") else 0):
        bad.append("kind does not follow the .safetensors suffix")
    st = b[toc_off + 96 + 192 * n:toc_off + toc_size]
    try:
        if st[:plen].decode("utf-8") != rel:
            bad.append("TOC path %r is not %r" % (st[:plen], rel))
    except UnicodeDecodeError:
        bad.append("TOC path not UTF-8")
    for i in range(n):
        r = toc_off + 96 + 192 * i
        (o, size, enc, cs, nch, ix_off, ix_hash, p0, s0, p1, s1, p2, s2, nesc) = \
            struct.unpack_from("<QQIIQQQQQQQQQQ", b, r)
        noff, nlen, dtype = struct.unpack_from("<III", b, r + 136)
        try:
            st[noff:noff + nlen].decode("utf-8")
        except UnicodeDecodeError:
            bad.append("extent %d name not UTF-8" % i)
        if any(b[r + 148:r + 192]):
            bad.append("extent %d reserved" % i)
        covered += [(ix_off, ix_off + 16 * nch), (p0, p0 + s0), (p1, p1 + s1), (p2, p2 + s2)]
        if enc in (2, 3):
            nw = size // 2
            k15 = enc == 2
            for (po, ps, bits, w) in ((p0, s0, 4 * nw, "codes"), (p1, s1, (7 if k15 else 8) * nw, "low"),
                                      (p2, s2, (9 if k15 else 8) * nesc, "escapes")):
                if ps != stored((bits + 7) // 8):
                    bad.append("extent %d %s plane size" % (i, w))
                why = check_bits_zero(b[po:po + ps], bits, "extent %d %s" % (i, w))
                if why:
                    bad.append(why)
    covered.sort()
    pos = 0
    for lo, hi in covered:
        if lo > pos and any(b[pos:lo]):
            bad.append("nonzero gap bytes at %d-%d" % (pos, lo))
        pos = max(pos, hi)
    return bad


def check_with_reader(dst, src):
    """The pack read by the spec's second reader (ckread.py): every source file's bytes
    back, and the manifest's entries sorted by path in byte order (§7, writer MUST)."""
    try:
        got = read_pack(dst)
    except Reject as e:
        return ["ckread.py refused the pack: %s" % e]
    bad = []
    for root, _, names in os.walk(src):
        for name in names:
            rel = os.fsencode(os.path.relpath(os.path.join(root, name), src))
            if got.get(rel) != open(os.path.join(root, name), "rb").read():
                bad.append("ckread.py: %r is not the source's bytes" % rel)
    doc = json.loads(open(os.path.join(dst, "ckptfs.manifest"), "rb").read().split(b"\n", 1)[1])
    for key in ("files", "dirs"):
        paths = [e["path"].encode() for e in doc[key]]
        if paths != sorted(paths):
            bad.append("manifest: %s not sorted by path in byte order" % key)
    return bad


def main(ck):
    tmp = tempfile.mkdtemp(prefix="ckptfs-wcheck-")
    src = os.path.join(tmp, "src")
    os.mkdir(src)
    sources(src)
    bad = []
    n = 0
    for fmt in ("k15", "archive"):  # archive: format §5.3, a 1.1 file
        packs = []
        for jobs in ("1", "2"):
            dst = os.path.join(tmp, "dst-%s-%s" % (fmt, jobs))
            subprocess.run([ck, "pack", "--format", fmt, "--jobs", jobs, src, dst], check=True,
                           stdout=subprocess.DEVNULL)
            packs.append(dst)
        for root, _, names in os.walk(packs[0]):
            for name in names:
                p = os.path.join(root, name)
                rel = os.path.relpath(p, packs[0])
                other = open(os.path.join(packs[1], rel), "rb").read()
                if open(p, "rb").read() != other:
                    bad.append("%s (%s): not byte-identical across two packs" % (rel, fmt))
                if name.endswith(".ckpt"):
                    n += 1
                    bad += ["%s (%s): %s" % (rel, fmt, w) for w in check_file(p, rel[:-5])]
        bad += ["%s: %s" % (fmt, w) for w in check_with_reader(packs[0], src)]
    # a name that is not UTF-8 is refused, naming the file
    bsrc = os.path.join(tmp, "bad").encode()
    os.mkdir(bsrc)
    open(os.path.join(bsrc, b"caf\xe9.bin"), "wb").close()
    p = subprocess.run([ck, "pack", bsrc, os.path.join(tmp, "bad.out")], stderr=subprocess.PIPE)
    # (printed escaped: the byte 0xe9 as the text \xe9, not raw to the terminal)
    if p.returncode == 0 or b"caf\\xe9.bin" not in p.stderr or b"UTF-8" not in p.stderr:
        bad.append("non-UTF-8 name: exit %d, %r" % (p.returncode, p.stderr))
    if os.path.exists(os.path.join(tmp, "bad.out", "ckptfs.manifest")):
        bad.append("non-UTF-8 name: a manifest was written")
    subprocess.run(["rm", "-rf", tmp])
    for w in bad:
        print("FAIL", w)
    print("%d packed files checked, %d problems" % (n, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
