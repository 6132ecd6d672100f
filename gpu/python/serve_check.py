#!/usr/bin/env python3
"""serve_check.py — serving from packed weights against the BF16 original,
side by side (run by gpu/check.sh on the GPU machine; no network needed).

    serve_check.py --ckptfs BIN --work DIR [--device cuda:0] [--size small|tiny] [--out FILE]

1. makes a Llama-style model with random BF16 weights (N(0, 0.02); `small`
   is about 400 MB, `tiny` a few MB for CPU runs), saved by transformers in
   shards, and packs it with `ckptfs pack` (K15);
2. loads the BF16 original with transformers and the packed directory with
   ckptfs_gpu_hf.from_pretrained, each timed from disk to ready;
3. reports: VRAM held by the weights (packed / BF16, target <= 0.72), load
   time, greedy tokens for 64 new tokens (batch 1 and 8) in two modes:
   "decode" (every Linear decodes to the scratch buffer then torch's matmul:
   logits must be bit-identical to the original's) and "fused" (inputs of
   <= 8 rows through the fused GEMV, FP32 sums: tokens may differ only where
   the original's top two logits are within the GEMV tolerance; the script
   prints the max logit difference and the first divergence with its margin),
   and decode tokens/s at batch 1 and 8 for the original and the fused mode.

Steps 1 and 2-3 on device="cpu" (--size tiny) run without a GPU, which is how
the CPU test (test_ckptfs_gpu_hf.py) checks this script.  Exit status 0 when
the decode mode is exact and the packed model loaded; 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_gpu_hf as ckhf  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SIZES = {  # Llama-style shapes: small ~ 205M parameters (~410 MB BF16)
    "small": dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                  num_attention_heads=16, num_key_value_heads=8, shard="100MB"),
    "tiny": dict(vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, shard="200KB"),
}
NEW_TOKENS = 64


def make_model(out, size):
    """Save a random BF16 Llama-style model to out (sharded); returns its config."""
    from transformers import LlamaConfig, LlamaForCausalLM
    kw = dict(SIZES[size])
    shard = kw.pop("shard")
    cfg = LlamaConfig(max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, **kw)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    m.save_pretrained(out, max_shard_size=shard, safe_serialization=True)
    return cfg


def pack(ckptfs, src, dst):
    t = time.perf_counter()
    subprocess.run([ckptfs, "pack", "--format", "k15", src, dst], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def dev_used(dev):
    """Device bytes in use (all allocators), or 0 on the CPU."""
    if dev.type != "cuda":
        return 0
    torch.cuda.synchronize(dev)
    free, total = torch.cuda.mem_get_info(dev)
    return total - free


def load_original(src, dev):
    from transformers import AutoModelForCausalLM
    t = time.perf_counter()
    try:
        m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    except TypeError:       # transformers < 4.56 knows only torch_dtype
        m = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.bfloat16)
    m = m.to(dev).eval()
    sync(dev)
    return m, time.perf_counter() - t


def load_packed(packed, dev):
    t = time.perf_counter()
    m = ckhf.from_pretrained(packed, device=str(dev))
    sync(dev)
    return m, time.perf_counter() - t


def weight_bytes(model):
    """(bytes holding the weights, of which packed Linear planes, scratch bytes)."""
    planes = sum(mod.weight_bytes for mod in model.modules() if isinstance(mod, ckhf.PackedWeight))
    seen, plain = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            plain += p.numel() * p.element_size()
    sc = getattr(model, "ckptfs_scratch", None)
    scratch = sc.buf.numel() * 2 if sc is not None and sc.buf is not None else 0
    return planes + plain, planes, scratch


def prompts(batch, vocab, dev):
    g = torch.Generator().manual_seed(11 + batch)
    return torch.randint(3, vocab, (batch, 16), generator=g).to(dev)


def generate(model, ids):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                              min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)


def tokens_per_s(model, ids, dev, reps):
    generate(model, ids)                      # warm up (kernels, caches)
    sync(dev)
    t = time.perf_counter()
    for _ in range(reps):
        generate(model, ids)
    sync(dev)
    return reps * ids.shape[0] * NEW_TOKENS / (time.perf_counter() - t)


def divergence(ref_model, ids, a, b):
    """First position where token rows differ, and the original's top-2
    logit margin there (how close to a tie the original was)."""
    for r in range(a.shape[0]):
        diff = (a[r] != b[r]).nonzero()
        if len(diff):
            pos = int(diff[0])
            with torch.no_grad():
                lg = ref_model(a[r:r + 1, :pos]).logits[0, -1].float()
            top = lg.topk(2).values
            return {"row": r, "pos": pos - ids.shape[1], "margin": float(top[0] - top[1])}
    return None


def compare(ref, model, vocab, dev, mode, out):
    """Tokens and logits of model against ref in the current mode."""
    ids = prompts(1, vocab, dev)
    with torch.no_grad():
        la, lb = ref(ids).logits, model(ids).logits
        # one decode step (a single row: the GEMV in fused mode)
        step = ids[:, :1]
        sa, sb = ref(step).logits, model(step).logits
    out[f"{mode}_prefill_logits_bit_exact"] = bool(torch.equal(la, lb))
    out[f"{mode}_step_logits_bit_exact"] = bool(torch.equal(sa, sb))
    out[f"{mode}_step_max_abs_diff"] = float((sa.float() - sb.float()).abs().max())
    for batch in (1, 8):
        ids = prompts(batch, vocab, dev)
        a, b = generate(ref, ids), generate(model, ids)
        same = bool(torch.equal(a, b))
        out[f"{mode}_tokens_identical_b{batch}"] = same
        if not same:
            out[f"{mode}_first_divergence_b{batch}"] = divergence(ref, ids, a, b)


def run(args):
    dev = torch.device(args.device)
    os.makedirs(args.work, exist_ok=True)
    src, packed = os.path.join(args.work, "model"), os.path.join(args.work, "packed")
    out = {"size": args.size}
    t = time.perf_counter()
    cfg = make_model(src, args.size)
    out["make_s"] = time.perf_counter() - t
    out["pack_s"] = pack(args.ckptfs, src, packed)
    out["bf16_file_bytes"] = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src)
                                 if f.endswith(".safetensors"))
    if args.make_only:
        return out, True
    out["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"

    base = dev_used(dev)
    ref, out["bf16_load_s"] = load_original(src, dev)
    out["bf16_vram_used"] = dev_used(dev) - base
    out["bf16_weight_bytes"] = weight_bytes(ref)[0]
    base = dev_used(dev)
    model, out["packed_load_s"] = load_packed(packed, dev)
    out["packed_vram_used"] = dev_used(dev) - base       # weights + scratch + allocator slack
    out["packed_weight_bytes"], out["packed_linear_bytes"], out["scratch_bytes"] = weight_bytes(model)
    out["weight_ratio"] = out["packed_weight_bytes"] / out["bf16_weight_bytes"]
    # what pack_embeddings=True would hold (computed from the planes' sizes, not loaded)
    emb = model.ckptfs_packed_dir.tensors["model.embed_tokens.weight"]
    out["weight_ratio_embeddings_packed"] = (out["packed_weight_bytes"] - emb.nbytes + emb.packed_bytes) / \
        out["bf16_weight_bytes"]

    ckhf.PackedLinear.GEMV_MAX_ROWS = 0        # decode mode: every Linear decodes, then torch's matmul
    compare(ref, model, cfg.vocab_size, dev, "decode", out)
    ckhf.PackedLinear.GEMV_MAX_ROWS = 8
    if dev.type == "cuda":
        compare(ref, model, cfg.vocab_size, dev, "fused", out)
    reps = 3 if dev.type == "cuda" else 1
    for batch in (1, 8):
        ids = prompts(batch, cfg.vocab_size, dev)
        out[f"bf16_tok_s_b{batch}"] = tokens_per_s(ref, ids, dev, reps)
        out[f"packed_tok_s_b{batch}"] = tokens_per_s(model, ids, dev, reps)
    ok = out["decode_prefill_logits_bit_exact"] and out["decode_tokens_identical_b1"] and \
        out["decode_tokens_identical_b8"]
    return out, ok


def table(o):
    rows = [("model", f"Llama-style {o['size']}, {o['bf16_file_bytes'] / 1e6:.0f} MB BF16, on {o['device']}", ""),
            ("load s (disk to ready)", f"{o['bf16_load_s']:.2f}", f"{o['packed_load_s']:.2f}"),
            ("weights bytes", f"{o['bf16_weight_bytes'] / 1e6:.1f} MB",
             f"{o['packed_weight_bytes'] / 1e6:.1f} MB ({o['weight_ratio']:.3f}x; + scratch "
             f"{o['scratch_bytes'] / 1e6:.1f} MB; {o['weight_ratio_embeddings_packed']:.3f}x with "
             f"pack_embeddings, computed)"),
            ("device memory used", f"{o['bf16_vram_used'] / 1e6:.1f} MB", f"{o['packed_vram_used'] / 1e6:.1f} MB"),
            ("decode mode: logits bit-exact (prefill, step)", "",
             f"{o['decode_prefill_logits_bit_exact']}, {o['decode_step_logits_bit_exact']}"),
            ("decode mode: 64 greedy tokens identical (b1, b8)", "",
             f"{o['decode_tokens_identical_b1']}, {o['decode_tokens_identical_b8']}")]
    if "fused_tokens_identical_b1" in o:
        rows += [("fused mode: step logits max |diff|", "", f"{o['fused_step_max_abs_diff']:.3g}"),
                 ("fused mode: 64 greedy tokens identical (b1, b8)", "",
                  f"{o['fused_tokens_identical_b1']}, {o['fused_tokens_identical_b8']}")]
        for b in (1, 8):
            if o.get(f"fused_first_divergence_b{b}"):
                rows.append((f"fused b{b}: first divergence", "", str(o[f"fused_first_divergence_b{b}"])))
    for b in (1, 8):
        rows.append((f"decode tokens/s batch {b}", f"{o[f'bf16_tok_s_b{b}']:.1f}",
                     f"{o[f'packed_tok_s_b{b}']:.1f} ({o[f'packed_tok_s_b{b}'] / o[f'bf16_tok_s_b{b}']:.2f}x)"))
    lines = ["| serve_check | BF16 (transformers) | packed (ckptfs_gpu_hf) |", "|---|---|---|"]
    return "\n".join(lines + [f"| {a} | {b} | {c} |" for a, b, c in rows])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckptfs", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--make-only", action="store_true", help="make and pack the model, load nothing")
    args = ap.parse_args(argv)
    out, ok = run(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    if not args.make_only:
        print(table(out))
    print("serve_check:", "PASS" if ok else "FAIL", json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
