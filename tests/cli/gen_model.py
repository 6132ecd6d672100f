"""gen_model.py OUT [--big] — a model directory with every kind of file the
CLI tests need: BF16/F32/I64/U8 tensors, empty tensors, NaN/Inf/-0/denormals,
an all-escape tensor, odd-sized tensors at odd offsets, nested and hidden
files, an empty file, an index.json.  With --big, only a 4.1 GiB shard (a sparse
BF16 tensor: its offsets pass 2^32)."""
import json
import os
import struct
import sys

import numpy as np


def bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_st(path, tensors, meta=None, pad=True):
    hdr, off, blobs = {}, 0, []
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(hdr, indent=1).encode()  # odd spacing: must be kept byte for byte
    if pad:
        h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def main(out, big=False):
    rng = np.random.default_rng(7)
    if big:
        return write_big(out, rng)
    os.makedirs(os.path.join(out, "nested", "deeper"), exist_ok=True)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-39, 3.4e38], np.float32)
    write_st(os.path.join(out, "model-00001-of-00002.safetensors"), [
        ("layers.0.mlp.weight", "BF16", (512, 700), bf16(rng.normal(0, 0.02, (512, 700))).tobytes()),
        ("layers.0.norm.weight", "BF16", (700,), bf16(1 + rng.normal(0, 0.1, 700)).tobytes()),
        ("special", "BF16", (8,), bf16(special).tobytes()),
        ("all_escapes", "BF16", (4096,), (np.arange(4096, dtype=np.uint16) * 16 + 3).tobytes()),
        ("empty", "BF16", (0,), b""),
        ("zero_dim", "F32", (3, 0), b""),
        ("odd", "U8", (3,), b"\x01\x02\x03"),
        ("after_odd", "BF16", (333,), bf16(rng.normal(0, 1, 333)).tobytes()),
        ("f32", "F32", (1000,), rng.normal(0, 1, 1000).astype(np.float32).tobytes()),
    ], meta={"format": "pt"}, pad=False)
    write_st(os.path.join(out, "model-00002-of-00002.safetensors"), [
        ("embed", "BF16", (1000, 300), bf16(rng.normal(0, 0.05, (1000, 300))).tobytes()),
        ("ids", "I64", (1000,), np.arange(1000, dtype=np.int64).tobytes()),
    ])
    index = {"metadata": {"total_size": 0}, "weight_map": {
        "layers.0.mlp.weight": "model-00001-of-00002.safetensors", "embed": "model-00002-of-00002.safetensors"}}
    json.dump(index, open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
    json.dump({"hidden_size": 700}, open(os.path.join(out, "config.json"), "w"))
    open(os.path.join(out, ".hidden"), "w").write("secret\n")
    open(os.path.join(out, "nested", "empty.txt"), "w").close()
    open(os.path.join(out, "nested", "deeper", "tokenizer.json"), "w").write('{"v": 1}' * 5000)
    write_st(os.path.join(out, "nested", "adapter.safetensors"), [
        ("lora", "BF16", (64, 8), bf16(rng.normal(0, 0.01, (64, 8))).tobytes())])


def write_big(out, rng):
    os.makedirs(out, exist_ok=True)
    n = (4 << 30) // 2 + 3 * 65536 + 5  # weights: past 4 GiB of data
    path = os.path.join(out, "big.safetensors")
    hdr = json.dumps({"w": {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr)
        start = f.tell()
        f.truncate(start + 2 * n)
        for at in (0, 2**31, 2**32 - 7, 2 * n - 64):  # some non-zero bytes, one across 4 GiB
            f.seek(start + at)
            f.write(bf16(rng.normal(0, 0.02, 32)).tobytes())


if __name__ == "__main__":
    main(sys.argv[1], "--big" in sys.argv)
