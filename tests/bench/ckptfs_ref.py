#!/usr/bin/env python3
"""Python reference of the K15 / byte-split encodings with the ckptfs CLI's shape.

Not the ckptfs format: planes are laid out as docs/format.md §5 says (code
nibbles, LSB-first mantissa / escape bit streams, each plane padded to
round_up(exact, 8) + 8 bytes) but stored in .npz files, one per source file.
It exists to check the corpus test and compare.py against an independent
encoder, and to decode bit-exactly what it encoded.

  ckptfs_ref.py pack [--format k15|bytesplit] [--jobs N] SRC DST
  ckptfs_ref.py unpack DST OUT
  ckptfs_ref.py verify [--against SRC] DST
  ckptfs_ref.py stat [--json] DST
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from files import sha256_file as sha256  # noqa: E402

CHUNK_WEIGHTS = 65536


def padded(nbytes):
    return (nbytes + 7) // 8 * 8 + 8


def pack_bits(values, width, nbytes):
    """LSB-first bit stream of `width`-bit values, padded to nbytes."""
    bits = ((values[:, None].astype(np.uint32) >> np.arange(width, dtype=np.uint32)) & 1).astype(np.uint8)
    out = np.packbits(bits.reshape(-1), bitorder="little")
    return np.concatenate([out, np.zeros(nbytes - out.size, np.uint8)])


def unpack_bits(stream, width, count):
    bits = np.unpackbits(stream, bitorder="little")[: width * count].reshape(count, width)
    return (bits.astype(np.uint32) << np.arange(width, dtype=np.uint32)).sum(1).astype(np.uint16)


def encode(w, fmt):
    shift, width = (7, 9) if fmt == "k15" else (8, 8)
    sym = w >> shift
    counts = np.bincount(sym, minlength=1 << width)
    order = sorted(range(1 << width), key=lambda s: (-counts[s], s))
    book = np.array([s for s in order[:15] if counts[s] > 0] , np.uint16)
    lut = np.full(1 << width, 15, np.uint8)
    lut[book] = np.arange(book.size, dtype=np.uint8)
    codes = lut[sym]
    n = w.size
    c = np.concatenate([codes, np.zeros(n & 1, np.uint8)])
    plane0 = np.concatenate([(c[0::2] | (c[1::2] << 4)).astype(np.uint8),
                             np.zeros(padded((4 * n + 7) // 8) - c.size // 2, np.uint8)])
    esc = sym[codes == 15]
    if fmt == "k15":
        plane1 = pack_bits(w & 0x7F, 7, padded((7 * n + 7) // 8))
        plane2 = pack_bits(esc, 9, padded((9 * esc.size + 7) // 8))
    else:
        plane1 = np.concatenate([(w & 0xFF).astype(np.uint8), np.zeros(padded(n) - n, np.uint8)])
        plane2 = np.concatenate([esc.astype(np.uint8), np.zeros(padded(esc.size) - esc.size, np.uint8)])
    codebook = np.zeros(16, np.uint16)
    codebook[: book.size] = book
    return codebook, plane0, plane1, plane2, int(esc.size)


def decode(fmt, n, codebook, plane0, plane1, plane2, n_esc):
    codes = np.empty(n + (n & 1), np.uint8)
    codes[0::2], codes[1::2] = plane0[: (n + 1) // 2] & 15, plane0[: (n + 1) // 2] >> 4
    codes = codes[:n]
    sym = codebook[np.minimum(codes, 14)].astype(np.uint16)
    if fmt == "k15":
        sym[codes == 15] = unpack_bits(plane2, 9, n_esc)
        return (sym << 7) | unpack_bits(plane1, 7, n)
    sym[codes == 15] = plane2[:n_esc]
    return (sym << 8) | plane1[:n].astype(np.uint16)


def walk(root):
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            yield os.path.relpath(os.path.join(d, f), root)


def pack_file(src, dst, fmt):
    blob = open(src, "rb").read()
    arrays = {"blob": np.frombuffer(blob, np.uint8)}
    meta = {"kind": "blob", "tensors": []}
    if src.endswith(".safetensors"):
        (hn,) = struct.unpack_from("<Q", blob)
        header = json.loads(blob[8:8 + hn])
        header.pop("__metadata__", None)
        keep = np.ones(len(blob), bool)
        for i, (name, t) in enumerate(header.items()):
            a, b = (x + 8 + hn for x in t["data_offsets"])
            if t["dtype"] != "BF16" or b == a:
                continue
            w = np.frombuffer(blob, "<u2", count=(b - a) // 2, offset=a)
            cb, p0, p1, p2, e = encode(w, fmt)
            arrays.update({f"cb{i}": cb, f"p0_{i}": p0, f"p1_{i}": p1, f"p2_{i}": p2})
            meta["tensors"].append({"i": i, "off": a, "n": int(w.size), "esc": e})
            keep[a:b] = False
        arrays["blob"] = arrays["blob"][keep]
        meta["kind"] = "safetensors"
    meta["size"] = len(blob)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    with open(dst, "wb") as f:
        np.savez(f, **arrays)


def unpack_file(src, dst, fmt):
    z = np.load(src)
    meta = json.loads(bytes(z["meta"]))
    out = np.zeros(meta["size"], np.uint8)
    keep = np.ones(meta["size"], bool)
    for t in meta["tensors"]:
        i = t["i"]
        w = decode(fmt, t["n"], z[f"cb{i}"], z[f"p0_{i}"], z[f"p1_{i}"], z[f"p2_{i}"], t["esc"])
        out[t["off"]: t["off"] + 2 * t["n"]] = w.astype("<u2").view(np.uint8)
        keep[t["off"]: t["off"] + 2 * t["n"]] = False
    out[keep] = z["blob"]
    with open(dst, "wb") as f:
        f.write(out.tobytes())


def cmd_pack(a):
    os.makedirs(a.dst)
    files = []
    for rel in walk(a.src):
        os.makedirs(os.path.dirname(os.path.join(a.dst, rel)) or ".", exist_ok=True)
        pack_file(os.path.join(a.src, rel), os.path.join(a.dst, rel + ".ckpt"), a.format)
        files.append({"path": rel, "size": os.path.getsize(os.path.join(a.src, rel)),
                      "sha256": sha256(os.path.join(a.src, rel))})
    with open(os.path.join(a.dst, "ckptfs.manifest"), "w") as f:
        json.dump({"format": a.format, "files": files}, f)


def manifest(dst):
    with open(os.path.join(dst, "ckptfs.manifest")) as f:
        return json.load(f)


def cmd_unpack(a):
    m = manifest(a.dst)
    for f in m["files"]:
        out = os.path.join(a.out, f["path"])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        unpack_file(os.path.join(a.dst, f["path"] + ".ckpt"), out, m["format"])
        if sha256(out) != f["sha256"]:
            sys.exit(f"{f['path']}: sha256 mismatch")


def cmd_verify(a):
    tmp = a.dst.rstrip("/") + ".verify"
    cmd_unpack(argparse.Namespace(dst=a.dst, out=tmp))
    if a.against:
        for rel in walk(a.against):
            if sha256(os.path.join(a.against, rel)) != sha256(os.path.join(tmp, rel)):
                sys.exit(f"{rel}: differs")
    shutil.rmtree(tmp)


def cmd_stat(a):
    m = manifest(a.dst)
    n = esc = bits = 0
    for f in m["files"]:
        z = np.load(os.path.join(a.dst, f["path"] + ".ckpt"))
        meta = json.loads(bytes(z["meta"]))
        for t in meta["tensors"]:
            i = t["i"]
            size = z[f"p0_{i}"].size + z[f"p1_{i}"].size + z[f"p2_{i}"].size
            size += 32 + 16 * -(-t["n"] // CHUNK_WEIGHTS)
            n, esc, bits = n + t["n"], esc + t["esc"], bits + 8 * size
    total = sum(os.path.getsize(os.path.join(a.dst, r)) for r in walk(a.dst))
    st = {"original_bytes": sum(f["size"] for f in m["files"]), "packed_bytes": total,
          "bf16_weights": n, "bf16_bits_per_weight": bits / max(n, 1),
          "escape_rate": esc / max(n, 1), "encodings": {m["format"]: n}}
    print(json.dumps(st, indent=2) if a.json else st)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--format", default="k15", choices=["k15", "bytesplit"])
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("src")
    p.add_argument("dst")
    p = sub.add_parser("unpack")
    p.add_argument("dst")
    p.add_argument("out")
    p = sub.add_parser("verify")
    p.add_argument("--against")
    p.add_argument("dst")
    p = sub.add_parser("stat")
    p.add_argument("--json", action="store_true")
    p.add_argument("dst")
    a = ap.parse_args()
    {"pack": cmd_pack, "unpack": cmd_unpack, "verify": cmd_verify, "stat": cmd_stat}[a.cmd](a)


if __name__ == "__main__":
    main()
