"""What several S3 tests share besides the server and the checks
(s3fixture.py, s3check.py): ck, one ckptfs command run; make_model, a small
model of BF16 safetensors files and a blob; digest_tree, the SHA-256 of
every file of a tree.  The tests run as `test_s3_X.py BINARY`: ck runs
sys.argv[1] unless given another binary."""
import hashlib
import json
import os
import subprocess
import sys

from s3check import MB


def ck(env, *args, binary=None):
    """`ckptfs ARGS` (binary, or sys.argv[1]) with env: its CompletedProcess (text)."""
    return subprocess.run([os.path.abspath(binary or sys.argv[1]), *args], capture_output=True, text=True, env=env,
                          timeout=300)


def digest_tree(root):
    """{path relative to root: SHA-256 hex} of every file under root."""
    out = {}
    for d, _dirs, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def make_model(src):
    """Two BF16 safetensors files (several chunks each) and a random blob,
    written with numpy only (BF16 as the top halves of float32s)."""
    import numpy as np
    rng = np.random.default_rng(7)

    def bf16(shape):
        a = (rng.standard_normal(shape).astype(np.float32) * 0.02).view(np.uint32)
        return (a >> 16).astype(np.uint16).tobytes()

    def save(path, tensors):
        hdr, off, blobs = {}, 0, []
        for name, (shape, data) in tensors.items():
            hdr[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + len(data)]}
            off += len(data)
            blobs.append(data)
        h = json.dumps(hdr).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))

    os.makedirs(os.path.join(src, "sub"))
    save(os.path.join(src, "model.safetensors"), {"a": ((2048, 2048), bf16((2048, 2048))),
                                                  "b": ((512, 300), bf16((512, 300)))})
    save(os.path.join(src, "sub", "more.safetensors"), {"c": ((1024, 1536), bf16((1024, 1536)))})
    with open(os.path.join(src, "sub", "blob.bin"), "wb") as f:
        f.write(os.urandom(3 * MB + 5))
    with open(os.path.join(src, "config.json"), "w") as f:
        f.write('{"model_type": "test"}\n')
