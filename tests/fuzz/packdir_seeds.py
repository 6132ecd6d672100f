#!/usr/bin/env python3
"""packdir_seeds.py DIR — the seeds of fuzz_packdir: every conformance case
(tests/conformance/cases.py, packs written by the independent writer
ckpack.py from docs/format.md, valid and one-rule-broken ones, with small
chunks and odd layouts) serialized as one packed directory each in the
format of tests/fuzz/packdir.h:
  "CKZD" u8 n, then n times: u16 name_len, name, u32 size, bytes
Cases over 64 KiB or with more than 8 files are left out (the fuzzer's
-max_len and packdir.h's limit).  Prints how many it wrote.
"""
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "conformance"))
import ckpack  # noqa: E402
from cases import cases  # noqa: E402

MAX_LEN, MAX_FILES = 65536, 8


def serialize(dst):
    entries = []
    for root, _, names in os.walk(dst):
        for n in sorted(names):
            p = os.path.join(root, n)
            rel = os.fsencode(os.path.relpath(p, dst))
            with open(p, "rb") as f:
                entries.append((rel, f.read()))
    entries.sort(key=lambda e: (e[0] != b"ckptfs.manifest", e[0]))  # the manifest first
    if not entries or len(entries) > MAX_FILES or any(len(n) > 200 for n, _ in entries):
        return None
    out = b"CKZD" + bytes([len(entries)])
    for name, data in entries:
        out += struct.pack("<H", len(name)) + name + struct.pack("<I", len(data)) + data
    return out if len(out) <= MAX_LEN else None


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    n = 0
    with tempfile.TemporaryDirectory(prefix="ckz-seeds-") as tmp:
        for c in cases():
            if c.get("post"):  # links and FIFOs made after writing: not in a serialized directory
                continue
            dst = os.path.join(tmp, c["name"])
            ckpack.write_pack(dst, c["files"], c.get("dirs", ()), c.get("manifest_edit"),
                              c.get("manifest_damage"), c.get("extra"))
            b = serialize(dst)
            if b is not None:
                with open(os.path.join(out, c["verdict"] + "-" + c["name"]), "wb") as f:
                    f.write(b)
                n += 1
    print("packdir_seeds: %d seeds in %s" % (n, out))


if __name__ == "__main__":
    main()
