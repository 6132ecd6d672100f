"""packcheck.py — what a packed directory holds, as the repack and damage
tests check it: the encodings of a packed file's BF16 extents, whether
`verify` passes and `unpack` gives back every original file bit for bit,
and the SHA-256 of every file of a tree (to see that nothing changed)."""
import os
import shutil
import struct
import subprocess

from files import files_under, sha256_file

ENCODINGS = {2: "k15", 3: "bytesplit", 4: "archive"}


def bf16_encodings(path):
    """The set of encoding names of the BF16 extents of one packed file
    (docs/format.md §3-§4: the TOC at toc_offset, 192-byte extent records
    after its 96-byte header, the encoding a u32 at record offset 16)."""
    with open(path, "rb") as f:
        b = f.read()
    toc = struct.unpack_from("<Q", b, 24)[0]
    n = struct.unpack_from("<I", b, toc + 4)[0]
    encs = (struct.unpack_from("<I", b, toc + 96 + 192 * i + 16)[0] for i in range(n))
    return {ENCODINGS[e] for e in encs if e in ENCODINGS}


def pack_encodings(packed):
    """The set of BF16 encodings of all the packed files under packed."""
    out = set()
    for f in files_under(packed):
        if f.endswith(".ckpt"):
            out |= bf16_encodings(os.path.join(packed, f))
    return out


def tree_sums(root):
    """{relative path: SHA-256} of every file under root."""
    return {f: sha256_file(os.path.join(root, f)) for f in files_under(root)}


def intact(ck, packed, src, out):
    """None if `verify packed` passes and `unpack packed out` gives back
    exactly src's files; else what is wrong.  out is removed after."""
    r = subprocess.run([ck, "verify", packed], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        return "verify exit %d: %s" % (r.returncode, r.stderr.decode(errors="replace")[-400:])
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([ck, "unpack", packed, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if r.returncode != 0:
            return "unpack exit %d: %s" % (r.returncode, r.stderr.decode(errors="replace")[-400:])
        if tree_sums(out) != tree_sums(src):
            return "unpack differs from the originals"
        return None
    finally:
        shutil.rmtree(out, ignore_errors=True)
