#!/usr/bin/env python3
"""glm_gen.py OUT [--fraction F] [--scale S] [--seed N] — a model directory
with GLM-5.2's structure at full tensor and shard count (fraction 1: 282
shards, 59,509 BF16 tensors), each tensor scaled down so the whole fits in a
few GiB.

Structure (a DeepSeek-style MoE, as GLM-5.x): an embedding, 3 dense layers,
75 MoE layers with 256 routed experts (gate/up/down each) plus a shared
expert and a router (weight + score-correction bias), MLA attention
(q_a/q_b/kv_a/kv_b/o projections and their norms), one multi-token-prediction
layer, the final norm and lm_head; q/k norms on the first 17 layers bring the
count to GLM-5.2's 59,509.  The real shapes are divided by --scale (default
24) along each axis, keeping their aspect ratios; vectors (norms, biases)
keep their full length / scale.  --fraction F keeps the first F of the
layers and of the shards (metadata growth is measured at 1/8, 1/2, 1).

Weights are N(0, 0.02) rounded to nearest even (DESIGN §5), from one
deterministic stream; written shard by shard, so memory stays small.  Also
writes model.safetensors.index.json, config.json, tokenizer.json and
generation_config.json.  Prints one line: shards, tensors, weights, bytes.
"""
import argparse
import json
import os
import struct

import numpy as np

FULL = dict(hidden=6144, vocab=154880, dense_inter=12288, moe_inter=2048,
            experts=256, dense_layers=3, moe_layers=75, q_lora=2048,
            kv_lora=512, heads=64, qk_head=192, v_head=128, rope=64,
            shards=282, qk_norm_layers=17)


def layer_tensors(i, moe, S, qk_norm):
    """(name, shape) of layer i: attention, norms, then the MLP or MoE."""
    h = S["hidden"]
    p = "model.layers.%d." % i
    t = [(p + "input_layernorm.weight", (h,)),
         (p + "post_attention_layernorm.weight", (h,)),
         (p + "self_attn.q_a_proj.weight", (S["q_lora"], h)),
         (p + "self_attn.q_a_layernorm.weight", (S["q_lora"],)),
         (p + "self_attn.q_b_proj.weight", (S["heads"] * S["qk_head"], S["q_lora"])),
         (p + "self_attn.kv_a_proj_with_mqa.weight", (S["kv_lora"] + S["rope"], h)),
         (p + "self_attn.kv_a_layernorm.weight", (S["kv_lora"],)),
         (p + "self_attn.kv_b_proj.weight",
          (S["heads"] * (S["qk_head"] - S["rope"] + S["v_head"]), S["kv_lora"])),
         (p + "self_attn.o_proj.weight", (h, S["heads"] * S["v_head"]))]
    if qk_norm:
        t += [(p + "self_attn.q_norm.weight", (S["qk_head"],)),
              (p + "self_attn.k_norm.weight", (S["qk_head"],))]
    if not moe:
        f = S["dense_inter"]
        return t + [(p + "mlp.gate_proj.weight", (f, h)), (p + "mlp.up_proj.weight", (f, h)),
                    (p + "mlp.down_proj.weight", (h, f))]
    f = S["moe_inter"]
    t += [(p + "mlp.gate.weight", (S["experts"], h)),
          (p + "mlp.gate.e_score_correction_bias", (S["experts"],))]
    for e in range(S["experts"]):
        q = p + "mlp.experts.%d." % e
        t += [(q + "gate_proj.weight", (f, h)), (q + "up_proj.weight", (f, h)),
              (q + "down_proj.weight", (h, f))]
    return t + [(p + "mlp.shared_experts.gate_proj.weight", (f, h)),
                (p + "mlp.shared_experts.up_proj.weight", (f, h)),
                (p + "mlp.shared_experts.down_proj.weight", (h, f))]


def model_tensors(S, fraction):
    n_layers = S["dense_layers"] + S["moe_layers"]
    keep = max(1, round(n_layers * fraction))
    t = [("model.embed_tokens.weight", (S["vocab"], S["hidden"]))]
    for i in range(keep):
        t += layer_tensors(i, i >= S["dense_layers"], S, i < S["qk_norm_layers"])
    if fraction >= 1:  # the multi-token-prediction layer, as the last layer
        m = n_layers
        t += layer_tensors(m, True, S, False)
        p = "model.layers.%d." % m
        t += [(p + "enorm.weight", (S["hidden"],)), (p + "hnorm.weight", (S["hidden"],)),
              (p + "eh_proj.weight", (S["hidden"], 2 * S["hidden"])),
              (p + "shared_head.norm.weight", (S["hidden"],))]
    t += [("model.norm.weight", (S["hidden"],)), ("lm_head.weight", (S["vocab"], S["hidden"]))]
    return t


def scaled(shape, scale):
    return tuple(max(8, (d // scale) // 8 * 8) if len(shape) > 1 else max(8, d // scale)
                 for d in shape)


def bf16(rng, n):
    u = (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_shard(path, rng, tensors):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, shape in tensors:
            f.write(bf16(rng, int(np.prod(shape))).tobytes())
    os.rename(path + ".tmp", path)
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--scale", type=int, default=24)
    ap.add_argument("--seed", type=int, default=2026)
    a = ap.parse_args()
    S = dict(FULL)
    tensors = [(n, scaled(s, a.scale)) for n, s in model_tensors(S, a.fraction)]
    n_shards = max(1, round(S["shards"] * a.fraction))
    per = -(-len(tensors) // n_shards)
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    wmap, total, weights = {}, 0, 0
    for k in range(n_shards):
        part = tensors[k * per:(k + 1) * per]
        name = "model-%05d-of-%05d.safetensors" % (k + 1, n_shards)
        total += write_shard(os.path.join(a.out, name), rng, part)
        weights += sum(int(np.prod(s)) for _, s in part)
        wmap.update({n: name for n, _ in part})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)
    cfg = {"architectures": ["GlmMoeForCausalLM"], "model_type": "glm_moe_synthetic",
           "hidden_size": S["hidden"] // a.scale, "num_hidden_layers":
           S["dense_layers"] + S["moe_layers"], "n_routed_experts": S["experts"],
           "first_k_dense_replace": S["dense_layers"], "torch_dtype": "bfloat16",
           "ckptfs_note": "synthetic: GLM-5.2's tensor and shard count, shapes / %d" % a.scale}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"do_sample": False}, f)
    with open(os.path.join(a.out, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {"a%d" % i: i for i in range(2000)}}}, f)
    print("%d shards, %d tensors, %d weights, %d bytes" % (n_shards, len(tensors), weights, total))


if __name__ == "__main__":
    main()
