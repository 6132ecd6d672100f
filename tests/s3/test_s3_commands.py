"""test_s3_commands.py — `ckptfs verify`, `stat` and `unpack` of
s3://BUCKET/PREFIX against a real S3 server (SeaweedFS, s3fixture.py): a
model packed here with `ckptfs pack` and uploaded with boto3 (the
independent uploader).  verify of the good pack passes; of a copy with one
byte of one object's chunk data changed, exits 3 naming that file (the local
copy of the same bytes does too: the damage is real); unpack gives every
original byte; stat's figures equal the local pack's; a prefix without a
pack, a missing bucket and wrong credentials fail with exit 1 saying which.
Usage: test_s3_commands.py CKPTFS
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3fixture import SECRET_KEY, SeaweedS3  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])
FAILS = []
MB = 1 << 20


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def digest_tree(root):
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


def ck(env, *args):
    return subprocess.run([CKPTFS, *args], capture_output=True, text=True, env=env, timeout=300)


def main():
    tmp = tempfile.mkdtemp(prefix="ckptfs-s3c-")
    try:
        with SeaweedS3() as s3:
            run(s3, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: " + "; ".join(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


def run(s3, tmp):
    src, packed = os.path.join(tmp, "src"), os.path.join(tmp, "packed")
    make_model(src)
    subprocess.run([CKPTFS, "pack", src, packed], check=True, capture_output=True)
    s3.upload_dir(packed, "models/m1")
    env, url = s3.env(), s3.url("models/m1")

    # verify of the good pack
    r = ck(env, "verify", url)
    check(r.returncode == 0 and "all checksums ok" in r.stdout, f"verify {url}: exit 0 ({r.returncode}: {r.stderr.strip()})")
    r = ck(env, "verify", "--against", src, url)
    check(r.returncode == 0, f"verify --against SRC {url}: exit 0 ({r.returncode}: {r.stderr.strip()})")

    # unpack: every original byte
    out = os.path.join(tmp, "out")
    r = ck(env, "unpack", url, out)
    check(r.returncode == 0, f"unpack {url}: exit 0 ({r.returncode}: {r.stderr.strip()})")
    check(r.returncode == 0 and digest_tree(out) == digest_tree(src), "unpack from s3://: the same tree and bytes as the source")

    # stat: the local pack's figures
    a, b = ck(env, "stat", "--json", packed), ck(env, "stat", "--json", url)
    check(a.returncode == 0 and b.returncode == 0, f"stat --json local and s3:// exit 0 ({b.stderr.strip()})")
    if a.returncode == 0 and b.returncode == 0:
        ja, jb = json.loads(a.stdout), json.loads(b.stdout)
        ja.pop("path", None)
        jb.pop("path", None)
        check(ja == jb, f"stat --json of s3:// equals the local pack's figures ({ja} vs {jb})")
    t = ck(env, "stat", url)
    check(t.returncode == 0 and t.stdout.startswith(url + ":"), "stat s3:// (text) names the URL")
    j = json.loads(ck(env, "unpack", "--json", url, os.path.join(tmp, "out2")).stdout or "{}")
    want = json.loads(a.stdout).get("packed_bytes") if a.returncode == 0 else None
    check(want is not None and j.get("packed_bytes") == want,
          f"unpack --json of s3:// counts every object's bytes and the manifest's ({j.get('packed_bytes')} == {want})")

    # one byte of one object's chunk data changed (a copy under another prefix)
    bad = os.path.join(tmp, "bad")
    shutil.copytree(packed, bad)
    victim = os.path.join(bad, "sub", "more.safetensors.ckpt")
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.seek(size // 2)
        c = f.read(1)
        f.seek(size // 2)
        f.write(bytes([c[0] ^ 0x40]))
    s3.upload_dir(bad, "models/bad")
    r = ck(env, "verify", bad)
    check(r.returncode == 3, f"verify of the local damaged copy: exit 3 (the damage is real: {r.returncode})")
    r = ck(env, "verify", s3.url("models/bad"))
    check(r.returncode == 3 and "sub/more.safetensors" in r.stderr,
          f"verify of the damaged s3:// pack: exit 3 naming sub/more.safetensors ({r.returncode}: {r.stderr.strip()})")
    r = ck(env, "unpack", s3.url("models/bad"), os.path.join(tmp, "out3"))
    check(r.returncode != 0 and not os.path.exists(os.path.join(tmp, "out3")),
          f"unpack of the damaged s3:// pack fails, nothing in OUT ({r.returncode})")

    # what is not a pack, or not reachable
    r = ck(env, "verify", s3.url("models"))
    check(r.returncode == 1 and "not a packed directory" in r.stderr and "holds one" in r.stderr,
          f"verify of a prefix above a pack: exit 1, says where one is ({r.stderr.strip()})")
    r = ck(env, "verify", "s3://no-such-bucket-ckptfs/x")
    check(r.returncode == 1 and "does not exist" in r.stderr, f"verify of a missing bucket: exit 1 ({r.stderr.strip()})")
    r = ck(s3.env(AWS_SECRET_ACCESS_KEY="wrong-secret"), "stat", url)
    check(r.returncode == 1 and "access denied" in r.stderr and SECRET_KEY not in r.stderr + r.stdout,
          f"stat with a wrong secret: exit 1, access denied, no secret ({r.stderr.strip()})")


if __name__ == "__main__":
    sys.exit(main())
