"""format_dtypes.py — the dtype codes of docs/format.md §4.3, read from the
spec itself, and a safetensors file holding one tensor of each, for tests
that names and bytes survive a pack and a read."""
import json
import os
import random
import re
import struct

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "format.md")

# bits per element, as the safetensors library defines each dtype
_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
         "F32": 32, "F64": 64, "I64": 64, "U64": 64, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4,
         "F6_E2M3": 6, "F6_E3M2": 6, "C64": 64, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8}


def format_dtypes(spec=SPEC):
    """{code: name} of §4.3's table, code 0 ("none") left out."""
    text = open(spec, encoding="utf-8").read()
    sec = text[text.index("### 4.3 dtype codes"):]
    sec = sec[:sec.index("**Informational**")]
    table = {int(c): n for c, n in re.findall(r"(\d+) ([A-Z][A-Z0-9_]*)", sec)}
    assert table and sorted(table) == list(range(1, len(table) + 1)), table
    return table


def write_every_dtype(path, seed=5):
    """A safetensors file with a [2, 4] tensor "t.NAME" of every dtype of
    §4.3 (8 elements: whole bytes for every element size), random bytes
    (BOOL: 0 or 1).  @return {tensor name: (dtype, shape, bytes)}."""
    rng = random.Random(seed)
    tensors, header, off = {}, {}, 0
    for code, dt in sorted(format_dtypes().items()):
        n = _BITS[dt]  # 8 elements of n bits: n bytes
        data = bytes(rng.randrange(2) if dt == "BOOL" else rng.randrange(256) for _ in range(n))
        tensors["t." + dt] = (dt, [2, 4], data)
        header["t." + dt] = {"dtype": dt, "shape": [2, 4], "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(d for _, _, d in tensors.values()))
    return tensors
