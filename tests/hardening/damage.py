#!/usr/bin/env python3
"""damage.py — damaged packs (issue "Hardening", part 2).

Packs a generated model (K15 and byte-split), then damages copies of the
packed directory one way at a time: bit flips and zero-filled ranges in each
plane of a BF16 tensor, a zstd frame, a raw blob chunk, the safetensors header
extent, the chunk index, the TOC, the file header, truncation and appended
bytes, and damage to the manifest; then random bit flips anywhere.  Each time:
  - `ckptfs verify` exits non-zero and names the damaged file (and, for plane
    damage, the tensor and the chunk);
  - `ckptfs unpack` exits non-zero and leaves no OUT behind;
  - every chunk of every packed file is read with ckp_read_chunk
    (ckpt_chunks): undamaged files read whole and equal to the originals, the
    damaged file fails exactly in the damaged chunk (or at open, for
    metadata damage), and no chunk ever returns bytes other than the original's.
Environment: CKPTFS, CKPT_CHUNKS (tests/hardening/ckpt_chunks), PYTHON."""
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "lib")]
from ckpt_layout import chunk_bytes, layout  # noqa: E402
from files import files_under  # noqa: E402

CK = os.environ["CKPTFS"]
CH = os.environ["CKPT_CHUNKS"]
T = tempfile.mkdtemp(prefix="ckptfs-damage.")
SRC = os.path.join(T, "src")
failures = []


def run(*args):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def packed_files(d):
    return [f for f in files_under(d) if f.endswith(".ckpt")]


def flip(path, off, mask=0x10):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ mask]))


def zero(path, off, n):
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(bytes(n))


def truncate(path, n):
    os.truncate(path, n)


def check_reads(d, bad_rel, expect):
    """ckpt_chunks on every packed file of d.  expect for bad_rel: a set of
    (extent, chunk) that must fail, "open" (must be refused at open), or None
    (either).  Other files must read whole and equal."""
    for rel in packed_files(d):
        orig = os.path.join(SRC, rel[:-5])
        rc, out, _ = run(CH, os.path.join(d, rel), orig)
        if rc == 3 or "WRONG" in out:
            fail("%s: a chunk returned wrong bytes:\n%s" % (rel, out))
        elif rel != bad_rel:
            if rc != 0:
                fail("%s is undamaged but does not read whole (rc %d):\n%s" % (rel, rc, out))
        elif expect == "open":
            if rc != 2:
                fail("%s: expected open to be refused, rc %d:\n%s" % (rel, rc, out))
        elif expect is not None:
            bad = {(int(l.split()[1]), int(l.split()[2])) for l in out.splitlines() if l.startswith("bad ")}
            if rc != 1 or bad != expect:
                fail("%s: expected exactly chunks %s to fail, got %s (rc %d)" % (rel, sorted(expect), sorted(bad), rc))
        elif rc not in (1, 2):
            fail("%s: damage not detected by the reader (rc %d)" % (rel, rc))


def case(name, base, damage, bad_rel, must_name, expect=None):
    """Copy base, apply damage(d), run the checks."""
    t0 = time.time()
    d = os.path.join(T, "case")
    out = os.path.join(T, "out")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    damage(d)
    rc, _, err = run(CK, "verify", d)
    if rc == 0:
        fail("%s: verify exited 0" % name)
    for s in must_name:
        if s not in err:
            fail("%s: verify output does not name %r:\n%s" % (name, s, err))
    rc, _, err2 = run(CK, "unpack", d, out)
    if rc == 0 or os.path.exists(out):
        fail("%s: unpack did not refuse (rc %d, OUT %s)" % (name, rc, "left" if os.path.exists(out) else "absent"))
        shutil.rmtree(out, ignore_errors=True)
    if bad_rel is not None:
        check_reads(d, bad_rel, expect)
    shutil.rmtree(d)
    first = err.strip().splitlines()[0] if err.strip() else ""
    print("ok   %-34s %.2fs  %s" % (name, time.time() - t0, first[:150]), flush=True)


def tensor(base, rel, name):
    for x in layout(os.path.join(base, rel))["extents"]:
        if x.name == name:
            return x
    raise SystemExit("no tensor %s in %s" % (name, rel))


def plane_cases(base, tag, rel, tname):
    x = tensor(base, rel, tname)
    label = ["code plane", "low plane", "escape plane"]
    for p in range(3):
        for c in (0, 3, x.n_chunks - 1):
            r = chunk_bytes(x, c, p)
            if r is None:
                continue
            off, n = r

            def dmg(d, off=off, n=n):
                flip(os.path.join(d, rel), off + n // 2, 0x01 if p == 2 else 0x40)
            case("%s %s chunk %d flip" % (tag, label[p], c), base, dmg, rel,
                 [rel, tname, "chunk %d " % c], {(x.index, c)})
    # a zero-filled range inside one chunk of the low plane, and one spanning two chunks
    off, n = chunk_bytes(x, 5, 1)

    def z1(d):
        zero(os.path.join(d, rel), off + 100, min(4096, n - 200))
    case("%s zero-fill inside chunk 5" % tag, base, z1, rel, [tname, "chunk 5 "], {(x.index, 5)})
    off4, n4 = chunk_bytes(x, 4, 1)

    def z2(d):
        zero(os.path.join(d, rel), off4 + n4 - 1000, 2000)
    case("%s zero-fill across chunks 4-5" % tag, base, z2, rel, [tname, "chunk 4 ", "chunk 5 "],
         {(x.index, 4), (x.index, 5)})


def main():
    t_start = time.time()
    subprocess.check_call([os.environ.get("PYTHON", sys.executable), os.path.join(HERE, "gen_model.py"), SRC])
    k15 = os.path.join(T, "k15")
    bs = os.path.join(T, "bs")
    for d, fmt in ((k15, "k15"), (bs, "bytesplit")):
        rc, _, err = run(CK, "pack", "--format", fmt, SRC, d)
        if rc:
            raise SystemExit("pack failed: " + err)
        rc, _, err = run(CK, "verify", "--against", SRC, d)
        if rc:
            raise SystemExit("fresh pack does not verify: " + err)
    shard = "model-00002-of-00003.safetensors"
    sk = shard + ".ckpt"
    # --- planes of BF16 tensors
    plane_cases(k15, "k15", sk, "layers.1.mlp.weight")
    plane_cases(bs, "bsplit", sk, "layers.1.mlp.weight")
    x = tensor(k15, sk, "layers.1.attn.weight")  # short last chunk
    off, n = chunk_bytes(x, 1, 1)
    case("k15 short last chunk", k15, lambda d: flip(os.path.join(d, sk), off + n - 1), sk,
         ["layers.1.attn.weight", "chunk 1 "], {(x.index, 1)})
    # --- zstd frame of an I64 tensor, chunk 1
    x = tensor(k15, sk, "layers.1.pos")
    assert x.encoding == 1 and x.n_chunks == 2, "layers.1.pos should be 2 zstd chunks"
    zoff = x.planes[0][0] + x.datums[1] + 20
    case("zstd frame chunk 1", k15, lambda d: flip(os.path.join(d, sk), zoff, 0xFF), sk,
         ["layers.1.pos", "chunk 1 "], {(x.index, 1)})
    # --- the safetensors header extent (RAW)
    h = layout(os.path.join(k15, sk))["extents"][0]
    case("safetensors header bytes", k15, lambda d: flip(os.path.join(d, sk), h.planes[0][0] + 30), sk,
         ["header, chunk 0 "], {(0, 0)})
    # --- a raw (incompressible) blob, chunk 1
    rb = "extra/deeper/random.bin.ckpt"
    x = layout(os.path.join(k15, rb))["extents"][0]
    if x.encoding == 0 and x.n_chunks > 1:
        o, n = chunk_bytes(x, 1, 0)
        case("raw blob chunk 1", k15, lambda d: flip(os.path.join(d, rb), o + 7), rb, [rb, "chunk 1 "], {(0, 1)})
    # --- a zstd blob
    nb = "extra/notes.txt.ckpt"
    x = layout(os.path.join(k15, nb))["extents"][0]
    case("zstd blob", k15, lambda d: flip(os.path.join(d, nb), x.planes[0][0] + x.planes[0][1] // 2, 0x08),
         nb, [nb], None)
    # --- metadata of a packed file: refused at open
    L = layout(os.path.join(k15, sk))
    x1 = L["extents"][1]
    case("chunk index byte", k15, lambda d: flip(os.path.join(d, sk), x1.index_offset + 16 * 3 + 9), sk,
         [sk, "chunk index of extent 1"], "open")
    case("TOC byte", k15, lambda d: flip(os.path.join(d, sk), L["toc_offset"] + 96 + 192 + 57), sk,
         [sk, "table of contents"], "open")
    case("TOC zero-filled", k15, lambda d: zero(os.path.join(d, sk), L["toc_offset"], 96), sk,
         [sk, "table of contents"], "open")
    case("file header byte", k15, lambda d: flip(os.path.join(d, sk), 17), sk, [sk, "file header"], "open")
    case("magic", k15, lambda d: flip(os.path.join(d, sk), 1), sk, [sk, "bad magic"], "open")
    case("truncated by 1000", k15, lambda d: truncate(os.path.join(d, sk), L["size"] - 1000), sk,
         [sk, "truncated"], "open")
    case("truncated to 100", k15, lambda d: truncate(os.path.join(d, sk), 100), sk, [sk], "open")
    case("truncated to 0", k15, lambda d: truncate(os.path.join(d, sk), 0), sk, [sk], "open")

    def append(d):
        with open(os.path.join(d, sk), "ab") as f:
            f.write(b"\0" * 10)
    case("bytes appended", k15, append, sk, [sk], "open")
    case("packed file missing", k15, lambda d: os.unlink(os.path.join(d, sk)), None, [sk])

    def swap(d):
        a, b = os.path.join(d, "config.json.ckpt"), os.path.join(d, "model.safetensors.index.json.ckpt")
        os.rename(a, a + ".x")
        os.rename(b, a)
        os.rename(a + ".x", b)
    case("two packed files swapped", k15, swap, None, ["config.json.ckpt", "manifest entry"])
    # --- the manifest
    man = "ckptfs.manifest"
    msize = os.path.getsize(os.path.join(k15, man))
    case("manifest JSON byte", k15, lambda d: flip(os.path.join(d, man), msize // 2, 0x01), None, [man])
    case("manifest first line", k15, lambda d: flip(os.path.join(d, man), 20, 0x01), None, [man])
    case("manifest truncated", k15, lambda d: truncate(os.path.join(d, man), msize // 2), None, [man])
    case("manifest empty", k15, lambda d: truncate(os.path.join(d, man), 0), None, [man])
    case("manifest missing", k15, lambda d: os.unlink(os.path.join(d, man)), None, [man])
    # --- random single-bit flips anywhere: detected, or harmless (padding),
    # and never wrong bytes
    rnd = random.Random(int(os.environ.get("DAMAGE_SEED", "1")))
    files = packed_files(k15) + [man]
    harmless = 0
    for i in range(int(os.environ.get("DAMAGE_RANDOM", "60"))):
        rel = rnd.choice(files)
        size = os.path.getsize(os.path.join(k15, rel))
        off, bit = rnd.randrange(size), 1 << rnd.randrange(8)
        d = os.path.join(T, "case")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(k15, d)
        flip(os.path.join(d, rel), off, bit)
        rc, _, err = run(CK, "verify", d)
        out = os.path.join(T, "out")
        urc, _, _ = run(CK, "unpack", d, out)
        if rc != 0:
            if rel not in err:
                fail("random flip %s@%d: verify does not name the file: %s" % (rel, off, err))
            if urc == 0 or os.path.exists(out):
                fail("random flip %s@%d: unpack did not refuse" % (rel, off))
        else:
            harmless += 1  # a padding or unused byte: everything must still be exact
            if urc != 0:
                fail("random flip %s@%d: verify ok but unpack failed" % (rel, off))
            else:
                rc2, _, err2 = run(CK, "verify", "--against", out, d)
                for r2 in packed_files(d):
                    with open(os.path.join(out, r2[:-5]), "rb") as a, open(os.path.join(SRC, r2[:-5]), "rb") as b:
                        if hashlib.sha256(a.read()).digest() != hashlib.sha256(b.read()).digest():
                            fail("random flip %s@%d: unpack returned wrong bytes for %s" % (rel, off, r2))
        # detected: that file may fail (at open or in chunks), the others read exact;
        # harmless: every file reads exact
        check_reads(d, rel if rc and rel.endswith(".ckpt") else "", None)
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(d)
    print("random flips: %d detected, %d in unused bytes (all reads exact)" %
          (int(os.environ.get("DAMAGE_RANDOM", "60")) - harmless, harmless))
    print("damage: %d failures, %.1fs" % (len(failures), time.time() - t_start))


try:
    main()
finally:
    shutil.rmtree(T, ignore_errors=True)
sys.exit(1 if failures else 0)
