#!/usr/bin/env python3
"""check_loaders.py — the accepted conformance packs through the tensor API.

`verify` and the mount read bytes; loaders read tensors, through libckread
(fs/format/ckread.h), which places each tensor among its file's extents.
For every accepted case of cases.py whose files marked `safetensors` hold a
valid safetensors file (the safetensors library parses the original bytes),
the pack written by ckpack.py (not by ckptfs) is opened with
gpu/python/ckptfs_gpu_hf.PackedDir (libckread via ctypes, as
from_pretrained(device="cpu") does) and every tensor, whole and by rows, must
equal the safetensors library's reading of the original file; every other
file must read back as its original bytes.  Cases whose tensors are split
over several extents, share one, or sit in extents named otherwise
(format §3.2, §4) are among them (st-*): the test fails if none is found.

Usage: check_loaders.py LIBCKREAD
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "gpu", "python"))

import ckpack  # noqa: E402
from cases import cases  # noqa: E402

torch = None
try:
    import torch  # noqa: F811
    from safetensors.torch import load as st_load
except ImportError:  # pragma: no cover - ./dev installs both
    print("check_loaders: torch and safetensors are needed (./dev deps)")
    sys.exit(1)

import ckptfs_gpu_hf as ckhf  # noqa: E402


def tensors_of(f):
    """The safetensors library's tensors of File f's original bytes, or None."""
    try:
        return st_load(f.original())
    except Exception:
        return None


def check_case(lib, c, dst):
    ckpack.write_pack(dst, c["files"], c.get("dirs", ()), c.get("manifest_edit"),
                      c.get("manifest_damage"), c.get("extra"), c.get("links", ()))
    want = {}
    for f in c["files"]:
        if f.kind:
            t = tensors_of(f)
            if t is None:
                return None, "skip"
            want.update(t)
    if not want:
        return None, "skip"
    with ckhf.PackedDir(dst, lib) as p:
        if set(p.tensors) != set(want):
            return False, f"tensors {sorted(p.tensors)} != {sorted(want)}"
        for name, w in want.items():
            got = p.read(name)
            if got.shape != w.shape or got.dtype != w.dtype or not torch.equal(got.view(torch.uint8),
                                                                                w.view(torch.uint8)):
                return False, f"{name}: differs from the original"
            rows = w.shape[0] if w.dim() else 1
            if w.dim() and rows > 2:  # a slice of rows, as tensor-parallel loaders take
                part = p.read(name, rows=(1, rows - 1))
                if not torch.equal(part.view(torch.uint8), w[1:rows - 1].contiguous().view(torch.uint8)):
                    return False, f"{name}: rows [1, {rows - 1}) differ"
        for f in c["files"]:
            if p.read_file(f.path.decode()) != f.original():
                return False, f"{f.path.decode()}: bytes differ"
    return True, f"{len(want)} tensors"


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    lib = sys.argv[1]
    bad, checked, special = 0, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, c in enumerate(x for x in cases() if x["verdict"] == "accept"):
            try:
                ok, why = check_case(lib, c, os.path.join(tmp, str(i)))
            except ckhf.ServingError as e:  # refused: a valid pack the loaders cannot read
                ok, why = False, str(e)
            if ok is None:
                continue
            checked += 1
            special += c["name"].startswith("st-")
            print(f"{'ok ' if ok else 'BAD'} {c['name']}: {why}")
            bad += not ok
    if special < 3:
        print(f"check_loaders: only {special} st-* cases (split tensors, shared extents, other names)")
        return 1
    print(f"{checked} accepted packs read through libckread, {bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
