#!/usr/bin/env python3
"""gen_model.py OUT — write a small, deterministic model directory for the
mount tests: three safetensors shards (BF16 weights spanning several chunks,
F32 and I64 tensors, a tiny odd-sized tensor, __metadata__), an index.json, a
config.json, a nested directory with text and random blobs, a hidden file, an
empty file, and files with unusual modes and nanosecond mtimes."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import st_write  # noqa: E402

rng = np.random.default_rng(20261130)


def bf16(shape, std=0.02):
    f = (rng.standard_normal(shape) * std).astype(np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)   # round to nearest even
    return r


write_safetensors = st_write.write_safetensors


def main(out):
    os.makedirs(out, exist_ok=True)
    shards = [
        [("model.embed.weight", "BF16", bf16((640, 1024))),          # 10 chunks
         ("model.layers.0.attn.q.weight", "BF16", bf16((256, 768))),  # 3 chunks, partial last
         ("model.layers.0.norm.weight", "F32", rng.standard_normal(1000).astype(np.float32)),
         ("model.layers.0.tiny", "BF16", bf16((3,)))],
        [("model.layers.1.mlp.up.weight", "BF16", bf16((512, 640))),
         ("model.layers.1.positions", "I64", np.arange(70000, dtype=np.int64)),
         ("model.layers.1.norm.weight", "F32", np.ones(4096, dtype=np.float32))],
        [("lm_head.weight", "BF16", bf16((384, 1024), std=0.05)),
         ("model.scalar", "F32", np.array(3.5, dtype=np.float32))],
    ]
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        total += write_safetensors(os.path.join(out, name), tensors, {"format": "pt"})
        for t in tensors:
            weight_map[t[0]] = name
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"architectures": ["TestForCausalLM"], "hidden_size": 1024, "torch_dtype": "bfloat16"}, f)
    os.makedirs(os.path.join(out, "sub", "deeper"), exist_ok=True)
    with open(os.path.join(out, "sub", "notes.txt"), "w") as f:
        f.write("hello ckptfs\n" * 30000)                       # compressible blob, > 1 chunk
    with open(os.path.join(out, "sub", "deeper", "random.bin"), "wb") as f:
        f.write(rng.integers(0, 256, 700001, dtype=np.uint8).tobytes())
    with open(os.path.join(out, ".hidden"), "w") as f:
        f.write("hidden\n")
    open(os.path.join(out, "empty.txt"), "w").close()
    os.chmod(os.path.join(out, "config.json"), 0o600)
    os.chmod(os.path.join(out, "sub", "notes.txt"), 0o754)
    os.utime(os.path.join(out, "config.json"), ns=(1700000000123456789, 1700000000123456789))
    os.utime(os.path.join(out, "sub", "deeper", "random.bin"), ns=(1600000000000000001, 1600000000000000001))


if __name__ == "__main__":
    main(sys.argv[1])
