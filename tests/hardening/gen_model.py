#!/usr/bin/env python3
"""gen_model.py OUT [SCALE] — a small deterministic model directory for the
hardening tests (numpy only, so it starts fast): SCALE (default 1) x 3
safetensors shards of about 1.3 MB each with multi-chunk BF16 tensors (128 KiB
chunks), an odd-sized BF16 tensor, F32 and I64 tensors, __metadata__; an
index.json, a config.json, and a nested directory with a compressible text
blob and an incompressible random blob."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import st_write  # noqa: E402


def bf16(rng, shape, std=0.02):
    f = (rng.standard_normal(shape) * std).astype(np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    st_write.write_safetensors(path, tensors, {"format": "pt"})


def main(out, scale=1):
    rng = np.random.default_rng(20261130)
    os.makedirs(os.path.join(out, "extra", "deeper"), exist_ok=True)
    n = 3 * scale
    weight_map = {}
    for i in range(n):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, n)
        tensors = [("layers.%d.mlp.weight" % i, "BF16", bf16(rng, (512, 1024))),       # 8 chunks
                   ("layers.%d.attn.weight" % i, "BF16", bf16(rng, (300, 256), 0.05)),  # 2 chunks, short last
                   ("layers.%d.norm" % i, "F32", rng.standard_normal(1000).astype(np.float32)),
                   ("layers.%d.pos" % i, "I64", np.arange(40000, dtype=np.int64)),
                   ("layers.%d.odd" % i, "BF16", bf16(rng, (7,)))]
        write_safetensors(os.path.join(out, name), tensors)
        for t in tensors:
            weight_map[t[0]] = name
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"hidden_size": 1024, "torch_dtype": "bfloat16"}, f)
    with open(os.path.join(out, "extra", "notes.txt"), "w") as f:
        f.write("ckptfs hardening\n" * 40000)
    with open(os.path.join(out, "extra", "deeper", "random.bin"), "wb") as f:
        f.write(rng.integers(0, 256, 600001, dtype=np.uint8).tobytes())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
