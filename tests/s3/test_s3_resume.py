"""test_s3_resume.py — `ckptfs pack SRC s3://...` SIGKILLed in the middle of
a multipart upload, then rerun, against a real S3 server (SeaweedFS,
s3fixture.py), boto3 and a counting proxy (s3proxy.py) the independent other
side.  The pack is deterministic (packed twice here: the same bytes), so the
rerun resumes the interrupted upload: it sends fewer UploadPart requests and
bytes than the file has parts, the result verifies against the source and
unpacks to every original byte, and no multipart upload is left, also of an
older, unrelated upload of the same key (a newer one whose part 1 is other
bytes: skipped and aborted).  The source changed between the kill and the
rerun (rewritten; or rewritten with its size and mtime put back): no part of
the interrupted upload is reused, every part is sent, the result is the new
source's.  The upload is held at part 3 by the proxy (not timed): the kill
comes once ListParts shows 2 parts.  The resumed rerun lists parts one a
page (CKPTFS_S3_LIST_PARTS_MAX=1: ListParts' paging).  An upload that
failed (UploadPart refused past the retries, not a kill) is kept, and the
rerun resumes it.
Usage: test_s3_resume.py CKPTFS
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import parse_qs, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3fixture import SeaweedS3  # noqa: E402
from s3proxy import FaultProxy  # noqa: E402
from s3check import FAILS, check  # noqa: E402
from s3util import ck, digest_tree  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])
PART = 5 << 20
BIG = "big.safetensors"


def write_big(src, seed):
    """A BF16 file of ~38 MB (about 5 parts of 5 MiB packed) and a config."""
    import numpy as np
    rng = np.random.default_rng(seed)
    shape = [4096, 4608]
    a = (rng.standard_normal(shape).astype(np.float32) * 0.02).view(np.uint32)
    data = (a >> 16).astype(np.uint16).tobytes()
    h = json.dumps({"w": {"dtype": "BF16", "shape": shape, "data_offsets": [0, len(data)]}}).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, BIG), "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + data)
    with open(os.path.join(src, "config.json"), "w") as f:
        f.write('{"model_type": "test"}\n')


class Counter:
    """A proxy gate: counts UploadPart requests of the big file and their
    bytes; while
    `hold` is set, holds every UploadPart from part 3 on until released (the
    connection then closed unanswered); with `fail`, closes each of them at
    once (a server that fails uploads: the pack retries each for its bound,
    30 s, then fails)."""

    def __init__(self, hold=False, fail=False):
        self.parts = self.bytes = self.list_parts = 0
        self.hold, self.release = hold, threading.Event()
        if fail:
            self.release.set()
        self.hold |= fail
        self.lock = threading.Lock()

    def __call__(self, method, path, headers):  # (the config's one part not counted)
        u = urlsplit(path)
        q = parse_qs(u.query)
        if method == "GET" and "uploadId" in q and u.path.endswith("/" + BIG + ".ckpt"):
            with self.lock:
                self.list_parts += 1
        if method != "PUT" or "partNumber" not in q or not u.path.endswith("/" + BIG + ".ckpt"):
            return False
        if self.hold and int(q["partNumber"][0]) >= 3:
            self.release.wait(300)
            return True
        with self.lock:
            self.parts += 1
            self.bytes += int(headers.get("Content-Length") or 0)
        return False


def uploads(s3, prefix):
    return s3.client().list_multipart_uploads(Bucket=s3.bucket, Prefix=prefix).get("Uploads", [])


def parts_there(s3, key):
    c, n = s3.client(), 0
    for u in uploads(s3, key):
        if u["Key"] == key:
            n = max(n, len(c.list_parts(Bucket=s3.bucket, Key=key, UploadId=u["UploadId"]).get("Parts", [])))
    return n


def kill_mid_upload(s3, env, src, prefix):
    """Start the pack through a proxy that holds part 3; SIGKILL it once
    ListParts shows 2 parts of the big file.  @return True if it did."""
    key = f"{prefix}/{BIG}.ckpt"
    gate = Counter(hold=True)
    with FaultProxy(s3.port, every=1 << 40, burst=0, gate=gate) as px:
        p = subprocess.Popen([CKPTFS, "pack", src, s3.url(prefix)], env=dict(env, AWS_ENDPOINT_URL=px.endpoint),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline, n = time.time() + 180, 0
        try:
            while p.poll() is None and time.time() < deadline and n < 2:
                n = parts_there(s3, key)
                time.sleep(0.05)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
            gate.release.set()
    ok = n >= 2
    check(ok, f"{prefix}: pack killed with {n} parts of {key} uploaded (>= 2)")
    return ok


def rerun(s3, env, src, prefix, gate=None):
    """Rerun the pack through a counting proxy: (exit status, UploadParts,
    their bytes, stdout+stderr)."""
    gate = gate or Counter()
    with FaultProxy(s3.port, every=1 << 40, burst=0, gate=gate) as px:
        r = ck(dict(env, AWS_ENDPOINT_URL=px.endpoint), "pack", src, s3.url(prefix))
    return r.returncode, gate.parts, gate.bytes, r.stdout + r.stderr


def object_parts(s3, prefix):
    size = s3.client().head_object(Bucket=s3.bucket, Key=f"{prefix}/{BIG}.ckpt")["ContentLength"]
    return (size + PART - 1) // PART, size


def outcome(s3, env, src, prefix, tmp, what):
    """The pack under prefix verifies against src, unpacks to src's bytes, and
    no multipart upload is left."""
    r = ck(env, "verify", "--against", src, s3.url(prefix))
    check(r.returncode == 0, f"{what}: verify --against the source passes ({r.stderr.strip()[-300:]})")
    out = os.path.join(tmp, "out-" + prefix.replace("/", "_"))
    r = ck(env, "unpack", s3.url(prefix), out)
    check(r.returncode == 0 and digest_tree(out) == digest_tree(src),
          f"{what}: unpack gives every byte of the source ({r.stderr.strip()[-200:]})")
    shutil.rmtree(out, ignore_errors=True)
    left = uploads(s3, prefix + "/")
    check(not left, f"{what}: no multipart upload left under the prefix ({len(left)})")


def deterministic(env, src, tmp):
    """The pack of one source twice: the same bytes (what resuming rests on)."""
    a, b = os.path.join(tmp, "det1"), os.path.join(tmp, "det2")
    for d, jobs in ((a, "1"), (b, "4")):
        subprocess.run([CKPTFS, "pack", "--jobs", jobs, src, d], check=True, capture_output=True, env=env)
    with open(os.path.join(a, BIG + ".ckpt"), "rb") as f1, open(os.path.join(b, BIG + ".ckpt"), "rb") as f2:
        check(f1.read() == f2.read(), "the same source packs to the same bytes (--jobs 1 and 4)")
    shutil.rmtree(a)
    shutil.rmtree(b)


def resumed(s3, env, tmp):
    src = os.path.join(tmp, "src")
    write_big(src, 1)
    deterministic(env, src, tmp)
    if not kill_mid_upload(s3, env, src, "r/a"):
        return
    # a newer unfinished upload of the same key whose part 1 is other bytes
    key, c = f"r/a/{BIG}.ckpt", s3.client()
    first = max(u["Initiated"] for u in uploads(s3, key))
    deadline = time.time() + 60
    while time.time() < deadline:  # Initiated may have a resolution of a second: made again until it is later
        m = c.create_multipart_upload(Bucket=s3.bucket, Key=key)
        if [u for u in uploads(s3, key) if u["UploadId"] == m["UploadId"] and u["Initiated"] > first]:
            break
        c.abort_multipart_upload(Bucket=s3.bucket, Key=key, UploadId=m["UploadId"])
        time.sleep(0.2)
    c.upload_part(Bucket=s3.bucket, Key=key, UploadId=m["UploadId"], PartNumber=1, Body=os.urandom(PART))
    check(len(uploads(s3, key)) == 2, "two unfinished uploads of the file before the rerun, the newer other bytes")
    # ListParts a part a page (max-parts=1): the 2 parts kept come from 2
    # pages or more, S3's part-number-marker followed
    gate = Counter()
    rc, n, nbytes, out = rerun(s3, dict(env, CKPTFS_S3_LIST_PARTS_MAX="1"), src, "r/a", gate)
    np_, size = object_parts(s3, "r/a")
    check(rc == 0, f"the rerun after the kill: exit 0 ({out.strip()[-300:]})")
    check(gate.list_parts >= 2, f"the kept parts listed a part a page: {gate.list_parts} ListParts requests (>= 2)")
    check(np_ >= 4 and n <= np_ - 2 and nbytes <= size - 2 * PART,
          f"the rerun resumed: {n} UploadPart requests ({nbytes} bytes) for a file of {np_} parts ({size} bytes)")
    outcome(s3, env, src, "r/a", tmp, "resumed")


def changed(s3, env, tmp, keep_mtime):
    """The source rewritten between the kill and the rerun."""
    prefix = "r/t" if keep_mtime else "r/m"
    src = os.path.join(tmp, "src-" + prefix[-1])
    write_big(src, 2)
    if not kill_mid_upload(s3, env, src, prefix):
        return
    st = os.stat(os.path.join(src, BIG))
    write_big(src, 3)  # other weights, the same size
    if keep_mtime:
        os.utime(os.path.join(src, BIG), ns=(st.st_atime_ns, st.st_mtime_ns))
    rc, n, nbytes, out = rerun(s3, env, src, prefix)
    np_, size = object_parts(s3, prefix)
    what = "rewritten, size and mtime kept" if keep_mtime else "rewritten"
    check(rc == 0 and n == np_ and nbytes == size,
          f"source {what}: the rerun sends every part ({n} of {np_}, {nbytes} of {size} bytes; exit {rc}: "
          f"{out.strip()[-200:]})")
    outcome(s3, env, src, prefix, tmp, f"source {what}")


def failed(s3, env, tmp):
    """The upload fails (not killed): every UploadPart from part 3 on
    refused past the retry bound.  The pack exits non-zero saying so and to
    run it again; the upload's parts are kept (the code before aborted it,
    the server answering the abort); the rerun resumes it."""
    prefix, src = "r/f", os.path.join(tmp, "src-f")
    write_big(src, 4)
    key = f"{prefix}/{BIG}.ckpt"
    with FaultProxy(s3.port, every=1 << 40, burst=0, gate=Counter(fail=True)) as px:
        r = ck(dict(env, AWS_ENDPOINT_URL=px.endpoint), "pack", src, s3.url(prefix))
    err = r.stderr.strip()
    check(r.returncode == 1 and key in err and "run the same command again" in err and "kept" in err,
          f"a failed upload: exit 1, names the object, says its parts are kept and to run it again ({r.returncode}: "
          f"{err[-400:]})")
    n = parts_there(s3, key)
    check(n >= 2, f"the failed upload is kept with its parts ({n} parts there, >= 2)")
    rc, sent, nbytes, out = rerun(s3, env, src, prefix)
    np_, size = object_parts(s3, prefix)
    check(rc == 0 and np_ >= 4 and sent <= np_ - 2 and nbytes <= size - 2 * PART,
          f"the rerun after the failure resumed: {sent} UploadPart requests ({nbytes} bytes) for a file of {np_} "
          f"parts ({size} bytes); exit {rc} ({out.strip()[-200:]})")
    outcome(s3, env, src, prefix, tmp, "failed, then resumed")


def main():
    tmp = tempfile.mkdtemp(prefix="ckptfs-s3r-")
    try:
        with SeaweedS3() as s3:
            stage = os.path.join(tmp, "stage")
            env = s3.env(CKPTFS_STAGE_DIR=stage, CKPTFS_S3_PART_MIB=str(PART >> 20), CKPTFS_STAGE_FILES="1")
            resumed(s3, env, tmp)
            changed(s3, env, tmp, keep_mtime=False)
            changed(s3, env, tmp, keep_mtime=True)
            failed(s3, env, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: " + "; ".join(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
