#!/usr/bin/env python3
"""mount_gen.py OUT BIG_MIB SMALL_MIB N_SMALL — the synthetic model of
bench_mount.sh: one shard of BIG_MIB and N_SMALL shards of SMALL_MIB of BF16
weights drawn from N(0, 0.02) and rounded to nearest even (DESIGN §5), in
tensors of 16 MiB, plus an index.json and a config.json.  Deterministic;
written in pieces so memory stays at a few hundred MiB."""
import json
import os
import struct
import sys

import numpy as np

TENSOR_BYTES = 16 << 20


def bf16_bytes(rng, n):
    out = np.empty(n, dtype=np.uint16)
    step = 1 << 22
    for i in range(0, n, step):
        m = min(step, n - i)
        u = (rng.standard_normal(m, dtype=np.float32) * np.float32(0.02)).view(np.uint32)
        out[i:i + m] = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return out.tobytes()


def write_shard(path, rng, mib, layer0):
    n_t = max(1, (mib << 20) // TENSOR_BYTES)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for i in range(n_t):
        name = "model.layers.%d.mlp.weight" % (layer0 + i)
        header[name] = {"dtype": "BF16", "shape": [4096, TENSOR_BYTES // 2 // 4096],
                        "data_offsets": [off, off + TENSOR_BYTES]}
        off += TENSOR_BYTES
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in range(n_t):
            f.write(bf16_bytes(rng, TENSOR_BYTES // 2))
    os.rename(path + ".tmp", path)
    return [k for k in header if k != "__metadata__"], off


def main(out, big, small, n_small):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2026)
    sizes = [big] + [small] * n_small
    wmap, total, layer = {}, 0, 0
    for i, mib in enumerate(sizes):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, len(sizes))
        keys, nbytes = write_shard(os.path.join(out, name), rng, mib, layer)
        layer += len(keys)
        total += nbytes
        wmap.update({k: name for k in keys})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"torch_dtype": "bfloat16"}, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
