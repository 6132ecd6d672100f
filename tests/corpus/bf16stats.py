"""BF16 statistics of a model dir, computed from the weights alone (numpy).

Independent of ckptfs: this is what the corpus test checks ckptfs against and
what tests/bench/compare.py prints beside it.

Accounted cost per tensor of n BF16 weights with e escapes (docs/format.md §5):
  K15        4 + 7 bits per weight + 9 bits per escape, symbol = w >> 7
  byte-split 4 + 8 bits per weight + 8 bits per escape, symbol = w >> 8
where the escapes are the weights whose symbol is not among the tensor's 15
most frequent.  Order-0 bounds, per tensor then weighted by n:
  H(sign, exponent) + 7   entropy of w >> 7 plus the raw mantissa
  H(w)                    16-bit joint entropy
"""
import json
import os
import struct

import numpy as np


def safetensors_files(model_dir):
    out = []
    for root, _, files in os.walk(model_dir):
        out += [os.path.join(root, f) for f in files if f.endswith(".safetensors")]
    return sorted(out)


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def iter_bf16(model_dir):
    """Yields (file, tensor name, uint16 array) for every BF16 tensor."""
    for path in safetensors_files(model_dir):
        header, base = read_header(path)
        with open(path, "rb") as f:
            blob = f.read()
        for name, t in header.items():
            if t["dtype"] != "BF16":
                continue
            a, b = t["data_offsets"]
            yield path, name, np.frombuffer(blob, "<u2", count=(b - a) // 2, offset=base + a)


def entropy_bits(counts):
    p = counts[counts > 0].astype(np.float64)
    p /= p.sum()
    return float(-(p * np.log2(p)).sum())


def escapes_top15(counts):
    """Weights whose symbol is not among the 15 most frequent."""
    return int(counts.sum() - np.sort(counts)[::-1][:15].sum())


def tensor_stats(w):
    n = int(w.size)
    c9 = np.bincount(w >> 7, minlength=512)
    c8 = np.bincount(w >> 8, minlength=256)
    c16 = np.bincount(w, minlength=65536)
    e9, e8 = escapes_top15(c9), escapes_top15(c8)
    return {
        "n": n,
        "k15_escapes": e9,
        "bsplit_escapes": e8,
        "k15_bits": 11 * n + 9 * e9,
        "bsplit_bits": 12 * n + 8 * e8,
        "h_se7_bits": (entropy_bits(c9) + 7) * n,
        "h16_bits": entropy_bits(c16) * n,
    }


def kind_of(name):
    """Tensor kind for plots and breakdowns: embedding, attention, mlp, norm, other."""
    s = name.lower()
    if "norm" in s:
        return "norm"
    if "embed" in s:
        return "embedding"
    if "attention" in s or "attn" in s or any(k in s for k in (".q_proj", ".k_proj", ".v_proj", ".o_proj")):
        return "attention"
    if any(k in s for k in ("intermediate", "mlp", "ffn", "output.dense", "fc1", "fc2")):
        return "mlp"
    return "other"


def model_stats(model_dir):
    """Totals over every BF16 tensor of a model dir (+ per-tensor list)."""
    tot = {"n": 0, "k15_escapes": 0, "bsplit_escapes": 0, "k15_bits": 0,
           "bsplit_bits": 0, "h_se7_bits": 0.0, "h16_bits": 0.0}
    tensors = []
    for path, name, w in iter_bf16(model_dir):
        s = tensor_stats(w)
        for k in tot:
            tot[k] += s[k]
        tensors.append({"file": os.path.relpath(path, model_dir), "name": name,
                        "kind": kind_of(name), **s})
    n = max(tot["n"], 1)
    return {
        "bf16_weights": tot["n"],
        "k15_bpw": tot["k15_bits"] / n,
        "k15_escape_rate": tot["k15_escapes"] / n,
        "bsplit_bpw": tot["bsplit_bits"] / n,
        "bsplit_escape_rate": tot["bsplit_escapes"] / n,
        "h_se7_bpw": tot["h_se7_bits"] / n,
        "h16_bpw": tot["h16_bits"] / n,
        "tensors": tensors,
    }


def dir_bytes(path):
    """Total size of the regular files under path (what a packed dir costs)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total
