"""make_golden.py CKPTFS — regenerate tests/golden/: small source files with
every kind of content, packed by the ckptfs of this format version.  Run only
when the format version changes (add, never replace: old goldens must keep
decoding).  The sources are rebuilt deterministically, so only the packed
files and SHA256SUMS of the originals are committed."""
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16(x):
    """float32 -> bf16 bits, round to nearest even (as torch does)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    r[nan] = (u[nan] >> 16).astype(np.uint16) | 0x40
    return r


def safetensors(tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes); keeps the given order."""
    hdr, off, data = {}, 0, b""
    if meta:
        hdr["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    import json
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def sources(d):
    rng = np.random.default_rng(1234)
    w = bf16(rng.normal(0, 0.02, 70000))               # 2 chunks, ~1.6% escapes
    allesc = np.arange(4096, dtype=np.uint16) * 16      # > 15 symbols: many escapes
    special = bf16(np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, -1e-41, 3.0, 65504.0], np.float32))
    f32 = rng.normal(0, 1, 333).astype(np.float32)
    i64 = np.arange(1000, dtype=np.int64)
    st = safetensors([
        ("w", "BF16", (70000,), w.tobytes()),
        ("all_escapes", "BF16", (64, 64), allesc.tobytes()),
        ("special", "BF16", (8,), special.tobytes()),
        ("empty", "BF16", (0, 3), b""),
        ("f32", "F32", (333,), f32.tobytes()),
        ("i64", "I64", (10, 100), i64.tobytes()),
        ("odd", "U8", (7,), bytes(range(7))),
        ("w_after_odd", "BF16", (9,), bf16(rng.normal(0, 1, 9)).tobytes()),
    ], meta={"format": "pt"})
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(st)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"hidden_size": 64}\n' * 50)
    open(os.path.join(d, "empty.bin"), "wb").close()


def main(ckptfs):
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "src")
        os.mkdir(src)
        sources(src)
        sums = []
        for name in sorted(os.listdir(src)):
            with open(os.path.join(src, name), "rb") as f:
                sums.append(f"{hashlib.sha256(f.read()).hexdigest()}  {name}\n")
        for fmt in ("k15", "bytesplit"):
            dst = os.path.join(tmp, fmt)
            subprocess.run([ckptfs, "pack", "--format", fmt, src, dst], check=True)
            out = os.path.join(HERE, "v1.0", fmt)
            os.makedirs(out, exist_ok=True)
            for name in os.listdir(dst):
                if name.endswith(".ckpt"):
                    shutil.copy(os.path.join(dst, name), out)
        with open(os.path.join(HERE, "v1.0", "SHA256SUMS"), "w") as f:
            f.writelines(sums)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main(sys.argv[1])
