"""files.py — files of a tree, as the test scripts compare them: the SHA-256
of a file, and the files under a directory."""
import hashlib
import os


def sha256_file(path):
    """The SHA-256 of a file's bytes, as hex, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def files_under(root):
    """The paths of the files under root, relative to it, sorted."""
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(out)
