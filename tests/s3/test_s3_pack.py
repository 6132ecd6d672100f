"""test_s3_pack.py — `ckptfs pack SRC s3://BUCKET/PREFIX` against a real S3
server (SeaweedFS, s3fixture.py), boto3 the independent other side: the
pack uploads and verifies (verify --against the source, unpack gives every
original byte), no multipart upload is left and the staging directory is
gone; pack killed (SIGKILL) at random points and rerun: whenever a manifest
is there the pack verifies, and the last rerun completes it; a multipart
upload left unfinished under the prefix (as a kill mid-upload leaves one,
made here with boto3) is aborted by the rerun; a rerun of a complete pack
sends nothing.  The staging directory is polled during every pack: it never
holds more than the stated bound (the two largest packed files, the state
and the manifest).  --delete-source: a whole run deletes every source and
the pack unpacks to every original byte; runs SIGKILLed at random points
and when sources start to go (sources deleted, no manifest yet), each then
rerun: after each kill every original file is in the source (unchanged) or
its object is complete under the prefix, and after the rerun unpack gives
every original byte, no multipart upload is left; --force over such a
prefix is refused.  Careless targets, refused before anything is written:
the bucket's root, no bucket name, a prefix holding a pack without its
state (uploaded by hand; --force replaces it), objects that are no pack
(even with --force), a prefix inside another pack's, or above one.
Usage: test_s3_pack.py CKPTFS
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3fixture import SeaweedS3  # noqa: E402
from s3proxy import FaultProxy  # noqa: E402
from s3check import FAILS, check  # noqa: E402
from s3util import ck, digest_tree, make_model  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])


def uploads(s3, prefix):
    return s3.client().list_multipart_uploads(Bucket=s3.bucket, Prefix=prefix).get("Uploads", [])


def has_manifest(s3, prefix):
    return "Contents" in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=prefix + "/ckptfs.manifest")


def objects(s3, prefix):
    """{key below prefix/: size} of every object under prefix ("": the bucket)."""
    out, c, tok, pre = {}, s3.client(), None, prefix + "/" if prefix else ""
    while True:
        kw = {"ContinuationToken": tok} if tok else {}
        r = c.list_objects_v2(Bucket=s3.bucket, Prefix=pre, **kw)
        for o in r.get("Contents", []):
            out[o["Key"][len(pre):]] = o["Size"]
        if not r.get("IsTruncated"):
            return out
        tok = r["NextContinuationToken"]


def stage_bound(s3, prefix, files=2):
    """The staging bound pack --help states: the `files` largest packed files
    (their objects' sizes), the state and the manifest."""
    o = objects(s3, prefix)
    packed = sorted((v for k, v in o.items() if k.endswith(".ckpt")), reverse=True)
    return sum(packed[:files]) + o.get("ckptfs.state", 0) + o.get("ckptfs.manifest", 0), sum(packed)


class StagePoller:
    """Polls the staging base directory in a thread: the most bytes each
    prefix's staging directory held at once."""

    def __init__(self, base):
        self.base, self.most, self.stop = base, {}, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def size(self, d):
        n = 0
        for root, _dirs, files in os.walk(d):
            for f in files:
                try:
                    n += os.lstat(os.path.join(root, f)).st_size
                except OSError:
                    pass
        return n

    def run(self):
        while not self.stop.is_set():
            try:
                names = os.listdir(self.base)
            except OSError:
                names = []
            for n in names:
                d = os.path.join(self.base, n)
                if os.path.isdir(d):
                    self.most[n] = max(self.most.get(n, 0), self.size(d))
            time.sleep(0.002)

    def close(self):
        self.stop.set()
        self.t.join()


def add_files(src):
    """Six more BF16 files in a directory of their own: more files than the
    staging bound, so that staging the whole pack would break it."""
    import numpy as np
    rng = np.random.default_rng(11)
    os.makedirs(os.path.join(src, "extra"))
    for i in range(6):
        a = (rng.standard_normal((512, 1024 + 128 * i)).astype(np.float32) * 0.02).view(np.uint32)
        data = (a >> 16).astype(np.uint16).tobytes()
        h = json.dumps({"w": {"dtype": "BF16", "shape": [512, 1024 + 128 * i], "data_offsets": [0, len(data)]}})
        h = h.encode() + b" " * (-len(h) % 8)
        with open(os.path.join(src, "extra", f"part{i}.safetensors"), "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h + data)


def main():
    tmp = tempfile.mkdtemp(prefix="ckptfs-s3p-")
    poll = None
    try:
        with SeaweedS3() as s3:
            stage = os.path.join(tmp, "stage")
            os.makedirs(stage)
            poll = StagePoller(stage)
            run(s3, tmp, stage)
            careless(s3, tmp, stage)
            poll.close()
            check_bounds(s3, poll)
            delete_source(s3, tmp, stage)
    finally:
        if poll:
            poll.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: " + "; ".join(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


def check_bounds(s3, poll):
    """Every prefix's staging directory stayed within the bound (measured
    against the objects each pack left)."""
    seen = 0
    for name, most in sorted(poll.most.items()):
        if not name.startswith(s3.bucket + "_"):
            continue
        prefix = name[len(s3.bucket) + 1:].replace("_", "/")
        bound, total = stage_bound(s3, prefix)
        seen += most > 0
        check(most <= bound, f"staging of {prefix}: at most {most} bytes at once, bound {bound} (pack {total})")
    check(seen >= 5, f"the staging directories of {seen} packs were measured")


def run(s3, tmp, stage):
    src = os.path.join(tmp, "src")
    make_model(src)
    add_files(src)
    want = digest_tree(src)
    env = s3.env(CKPTFS_STAGE_DIR=stage, CKPTFS_S3_PART_MIB="5")  # 5 MiB parts: several per file

    # 1. pack to s3://, then verify and unpack from it
    url = s3.url("p/one")
    t0 = time.time()
    r = ck(env, "pack", src, url)
    full = time.time() - t0
    check(r.returncode == 0, f"pack SRC {url}: exit 0 ({r.returncode}: {r.stderr.strip()[-300:]})")
    check(not uploads(s3, "p/one/"), "no multipart upload left")
    check(not os.listdir(stage) if os.path.isdir(stage) else True, "the staging directory is removed")
    r = ck(env, "verify", "--against", src, url)
    check(r.returncode == 0, f"verify --against SRC of the uploaded pack: exit 0 ({r.stderr.strip()[-300:]})")
    out = os.path.join(tmp, "out")
    r = ck(env, "unpack", url, out)
    check(r.returncode == 0 and digest_tree(out) == want, "unpack of the uploaded pack: every original byte")
    r = ck(env, "pack", src, url)
    check(r.returncode == 0 and "0 packed files sent" in r.stdout,
          f"a rerun of a complete pack sends nothing ({r.stdout.strip()[-200:]})")
    # another source (one file changed, one gone): refused, then --force
    # replaces the pack; its manifest lists exactly the new source's files
    other = os.path.join(tmp, "other1")
    shutil.copytree(src, other)
    os.remove(os.path.join(other, "sub", "blob.bin"))
    with open(os.path.join(other, "config.json"), "a") as f:
        f.write(" ")
    r = ck(env, "pack", other, url)
    check(r.returncode == 1, f"pack of another source to the prefix: refused without --force ({r.stderr[-200:]})")
    # objects beside the pack that are not ckptfs's: kept by --force
    foreign = {"NOTES.txt": b"notes\n", "sub/lightning.ckpt": b"not a packed file\n"}
    for k, v in foreign.items():
        s3.client().put_object(Bucket=s3.bucket, Key="p/one/" + k, Body=v)
    seen = []
    gate = lambda m, p, h: seen.append((m, urlsplit(p).path.split("/p/one/", 1)[-1])) and False
    with FaultProxy(s3.port, every=1 << 40, burst=0, gate=gate) as px:
        r = ck(dict(env, AWS_ENDPOINT_URL=px.endpoint), "pack", "--force", other, url)
    out1 = os.path.join(tmp, "out1")
    r2 = ck(env, "unpack", url, out1)
    check(r.returncode == 0 and r2.returncode == 0 and digest_tree(out1) == digest_tree(other),
          f"--force from another source: the pack holds exactly its files ({r.stderr[-200:]}{r2.stderr[-200:]})")
    # ... and the bucket too: the gone file's object deleted (billed forever
    # else), after the new manifest is up, the foreign objects kept
    want_keys = {os.path.relpath(os.path.join(d, f), other) + ".ckpt" for d, _x, fs in os.walk(other) for f in fs}
    want_keys |= {"ckptfs.manifest", "ckptfs.state", *foreign}
    have = objects(s3, "p/one")
    dels = [i for i, (m, k) in enumerate(seen) if m == "DELETE" and k.endswith(".ckpt")]
    put_m = [i for i, (m, k) in enumerate(seen) if m == "PUT" and k == "ckptfs.manifest"]
    check(set(have) == want_keys and dels and put_m and min(dels) > max(put_m),
          f"--force from another source: the objects under the prefix are the new pack's and the foreign ones "
          f"(extra {sorted(set(have) - want_keys)}, missing {sorted(want_keys - set(have))}); the old packed "
          f"file deleted after the manifest's PUT ({dels} > {put_m})")
    for k in foreign:
        s3.client().delete_object(Bucket=s3.bucket, Key="p/one/" + k)
    r = ck(env, "pack", "--force", src, url)
    check(r.returncode == 0, f"and back to the first source with --force ({r.stderr[-200:]})")

    # 2. killed at a random point (each on a fresh prefix), then rerun to the end
    rnd = random.Random(int(os.environ.get("S3_PACK_SEED", "0")) or None)
    unfinished = 0
    for i in range(5):
        pk = f"p/k{i}"
        p = subprocess.Popen([CKPTFS, "pack", src, s3.url(pk)], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        delay = rnd.uniform(0.02, full * (0.3 if i == 0 else 0.95))  # the first surely before the end
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
        r = ck(env, "verify", s3.url(pk))
        if has_manifest(s3, pk):
            check(r.returncode == 0, f"kill {i} after {delay:.2f} s: a manifest is there and the pack verifies")
        else:
            unfinished += 1
            check(r.returncode == 1, f"kill {i} after {delay:.2f} s: no manifest yet, verify refuses it (exit 1)")
        r = ck(env, "pack", src, s3.url(pk))
        ok = r.returncode == 0 and not uploads(s3, pk + "/")
        r = ck(env, "verify", "--against", src, s3.url(pk))
        check(ok and r.returncode == 0, f"kill {i}: the rerun completes, no multipart upload left, it verifies")
    check(unfinished >= 1, f"{unfinished} of 5 kills left the pack unfinished (the kills test something)")
    url2, p2 = s3.url("p/k0"), "p/k0"
    r = ck(env, "pack", src, url2)
    r = ck(env, "verify", url2)
    # a multipart upload left unfinished under the prefix, as a kill mid-upload leaves one
    c = s3.client()
    mpu = c.create_multipart_upload(Bucket=s3.bucket, Key=p2 + "/model.safetensors.ckpt")
    c.upload_part(Bucket=s3.bucket, Key=p2 + "/model.safetensors.ckpt", UploadId=mpu["UploadId"], PartNumber=1,
                  Body=os.urandom(5 << 20))
    check(len(uploads(s3, p2 + "/")) >= 1, "an unfinished multipart upload is there before the rerun")
    r = ck(env, "pack", src, url2)
    check(r.returncode == 0, f"rerun after the kills: exit 0 ({r.stderr.strip()[-300:]})")
    check(not uploads(s3, p2 + "/"), "after the rerun no multipart upload is left under the prefix")
    r = ck(env, "verify", "--against", src, url2)
    check(r.returncode == 0, f"the rerun's pack verifies against the source ({r.stderr.strip()[-300:]})")
    out2 = os.path.join(tmp, "out2")
    r = ck(env, "unpack", url2, out2)
    check(r.returncode == 0 and digest_tree(out2) == want, "unpack of the rerun's pack: every original byte")



def careless(s3, tmp, stage):
    """Where a pack must not go: each a clear error naming the URL (exit 2
    for a URL that is wrong as such, 1 for a prefix taken), and nothing
    written to the bucket."""
    src = os.path.join(tmp, "src")
    env = s3.env(CKPTFS_STAGE_DIR=stage, CKPTFS_S3_PART_MIB="5")
    other, packed = os.path.join(tmp, "c-other"), os.path.join(tmp, "c-packed")
    shutil.copytree(src, other)
    with open(os.path.join(other, "config.json"), "a") as f:
        f.write(" ")
    subprocess.run([CKPTFS, "pack", other, packed], check=True, capture_output=True)
    os.remove(os.path.join(packed, "ckptfs.state"))
    s3.upload_dir(packed, "c/hand")                              # a pack uploaded by hand: no ckptfs.state
    s3.client().put_object(Bucket=s3.bucket, Key="c/junk/readme.txt", Body=b"not a pack\n")

    def refused(args, url, code, words, what):
        before, ups = objects(s3, ""), uploads(s3, "")
        r = ck(env, "pack", *args, src, url)
        after = objects(s3, "")
        check(r.returncode == code and url in r.stderr and all(w in r.stderr for w in words) and before == after
              and uploads(s3, "") == ups,
              f"pack to {url} ({what}): exit {r.returncode} (want {code}), says {words}, nothing written "
              f"({r.stderr.strip()[-300:]})")

    refused([], f"s3://{s3.bucket}", 2, ["no prefix"], "the bucket's root")
    refused([], "s3://", 2, ["bucket name"], "no bucket")
    refused([], "s3:///c/x", 2, ["bucket name"], "an empty bucket name")
    refused([], s3.url("c/hand"), 1, ["--force", "no ckptfs.state"], "a pack made by hand")
    refused(["--force"], s3.url("c/junk"), 1, ["objects and no pack"], "objects that are no pack, --force")
    refused([], s3.url("c/hand/sub"), 1, ["inside the pack at " + s3.url("c/hand")], "inside a pack")
    refused([], s3.url("c"), 1, ["another pack further down", "c/hand/ckptfs.manifest"], "above a pack")
    r = ck(env, "pack", "--force", src, s3.url("c/hand"))
    r2 = ck(env, "verify", "--against", src, s3.url("c/hand"))
    check(r.returncode == 0 and r2.returncode == 0,
          f"--force over the pack made by hand replaces it: it verifies against the source "
          f"({r.stderr.strip()[-200:]}{r2.stderr.strip()[-200:]})")


def copy_source(pristine, dst):
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(pristine, dst)  # copy2: sizes and mtimes as the pristine copy's


def count_files(root):
    return sum(len(files) for _d, _dirs, files in os.walk(root))


def accounted(s3, prefix, src, want):
    """Files of want neither in src unchanged nor complete under prefix."""
    o = objects(s3, prefix)
    have = digest_tree(src) if os.path.isdir(src) else {}
    return [r for r, h in want.items() if have.get(r) != h and (r + ".ckpt") not in o]


def delete_source(s3, tmp, stage):
    pristine = os.path.join(tmp, "pristine")
    make_model(pristine)
    add_files(pristine)
    want = digest_tree(pristine)
    env = s3.env(CKPTFS_STAGE_DIR=stage, CKPTFS_S3_PART_MIB="5")
    src = os.path.join(tmp, "dsrc")

    # a whole run: every source deleted, every byte in the bucket
    copy_source(pristine, src)
    poll = StagePoller(stage)
    t0 = time.time()
    r = ck(env, "pack", "--delete-source", src, s3.url("d/all"))
    full = time.time() - t0
    poll.close()
    left = digest_tree(src) if os.path.isdir(src) else {}
    check(r.returncode == 0 and not left,
          f"pack --delete-source to s3://: exit 0, every source file deleted ({r.returncode}, {len(left)} left: "
          f"{r.stderr.strip()[-300:]})")
    bound, total = stage_bound(s3, "d/all")
    most = poll.most.get(s3.bucket + "_d_all", 0)
    check(0 < most <= bound < total,
          f"--delete-source staged at most {most} bytes at once: within the bound {bound}, under the pack's {total}")
    out = os.path.join(tmp, "dout")
    r = ck(env, "unpack", s3.url("d/all"), out)
    check(r.returncode == 0 and digest_tree(out) == want, "unpack after --delete-source: every original byte")
    shutil.rmtree(out, ignore_errors=True)
    r = ck(env, "pack", "--delete-source", src, s3.url("d/all"))
    check(r.returncode == 0 and "0 packed files sent" in r.stdout,
          f"a rerun after a whole --delete-source run sends nothing and exits 0 ({r.stdout.strip()[-200:]}"
          f"{r.stderr.strip()[-300:]})")
    r = ck(env, "verify", s3.url("d/all"))
    check(r.returncode == 0, f"and the pack still verifies ({r.stderr.strip()[-300:]})")
    other = os.path.join(tmp, "other")  # another source: one file differs
    copy_source(pristine, other)
    with open(os.path.join(other, "config.json"), "a") as f:
        f.write(" ")
    r = ck(env, "pack", "--force", other, s3.url("d/all"))
    check(r.returncode != 0 and "--force refused" in r.stderr and has_manifest(s3, "d/all"),
          f"--force over a prefix a --delete-source run packed to: refused, the manifest kept ({r.stderr[-200:]})")

    # the read-back goes in large blocks: through a counting proxy, a
    # --delete-source pack takes few more requests than a plain one (read
    # chunk by chunk it took one to three GETs per 128 KiB chunk)
    reqs = {}
    with FaultProxy(s3.port, every=1 << 40, burst=0) as px:
        penv = dict(env, AWS_ENDPOINT_URL=px.endpoint)
        for how in ("plain", "delete"):
            copy_source(pristine, src)
            before = px.count
            r = ck(penv, "pack", *(["--delete-source"] if how == "delete" else []), src, s3.url("d/" + how))
            reqs[how] = px.count - before
            check(r.returncode == 0, f"pack ({how}) through the counting proxy: exit 0 ({r.stderr.strip()[-200:]})")
    _bound, total = stage_bound(s3, "d/delete")
    allowed = 8 * len(want) + 2 * (total >> 22) + 20
    check(reqs["delete"] - reqs["plain"] <= allowed,
          f"the read-backs of {len(want)} files ({total} bytes) took {reqs['delete'] - reqs['plain']} requests "
          f"(at most {allowed}; the plain pack {reqs['plain']})")

    # killed: when the sources start to go (some deleted, no manifest yet),
    # when half are gone, and at random times; each then rerun
    rnd = random.Random(int(os.environ.get("S3_PACK_SEED", "0")) or None)
    n_src = len(want)
    mid = 0
    for i, when in enumerate([1, n_src // 2, None, None, None]):
        pk = f"d/k{i}"
        copy_source(pristine, src)
        p = subprocess.Popen([CKPTFS, "pack", "--delete-source", src, s3.url(pk)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + (rnd.uniform(0.02, full) if when is None else 120)
        while p.poll() is None and time.time() < deadline:
            if when is not None and n_src - count_files(src) >= when:
                break
            time.sleep(0.002)
        p.send_signal(signal.SIGKILL)
        p.wait()
        gone = n_src - len(digest_tree(src))
        manifest = has_manifest(s3, pk)
        mid += gone > 0 and not manifest
        lost = accounted(s3, pk, src, want)
        check(not lost, f"kill {i} ({gone} sources deleted, manifest {'there' if manifest else 'not yet'}): every "
              f"original file is in the source or its object is complete ({lost})")
        r = ck(env, "pack", "--delete-source", src, s3.url(pk))
        check(r.returncode == 0 and not uploads(s3, pk + "/"),
              f"kill {i}: the rerun completes, no multipart upload left ({r.returncode}: {r.stderr.strip()[-300:]})")
        r = ck(env, "unpack", s3.url(pk), out)
        check(r.returncode == 0 and digest_tree(out) == want,
              f"kill {i}: unpack of the rerun's pack gives every original byte ({r.stderr.strip()[-200:]})")
        shutil.rmtree(out, ignore_errors=True)
    check(mid >= 1, f"{mid} kills came after sources were deleted and before the manifest")


if __name__ == "__main__":
    sys.exit(main())
