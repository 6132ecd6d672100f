"""test_s3_pack.py — `ckptfs pack SRC s3://BUCKET/PREFIX` against a real S3
server (SeaweedFS, s3fixture.py), boto3 the independent other side: the
pack uploads and verifies (verify --against the source, unpack gives every
original byte), no multipart upload is left and the staging directory is
gone; pack killed (SIGKILL) at random points and rerun: whenever a manifest
is there the pack verifies, and the last rerun completes it; a multipart
upload left unfinished under the prefix (as a kill mid-upload leaves one,
made here with boto3) is aborted by the rerun; a rerun of a complete pack
sends nothing; --delete-source is refused (not yet supported), the source
kept.
Usage: test_s3_pack.py CKPTFS
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3fixture import SeaweedS3  # noqa: E402
from test_s3_commands import check, ck, digest_tree, make_model, FAILS  # noqa: E402
import test_s3_commands  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])
test_s3_commands.CKPTFS = CKPTFS


def uploads(s3, prefix):
    return s3.client().list_multipart_uploads(Bucket=s3.bucket, Prefix=prefix).get("Uploads", [])


def has_manifest(s3, prefix):
    return "Contents" in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=prefix + "/ckptfs.manifest")


def main():
    tmp = tempfile.mkdtemp(prefix="ckptfs-s3p-")
    try:
        with SeaweedS3() as s3:
            run(s3, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: " + "; ".join(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


def run(s3, tmp):
    src = os.path.join(tmp, "src")
    make_model(src)
    want = digest_tree(src)
    stage = os.path.join(tmp, "stage")
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

    # 3. --delete-source is refused for now; nothing deleted
    r = ck(env, "pack", "--delete-source", src, s3.url("p/three"))
    check(r.returncode != 0 and "not supported yet" in r.stderr and digest_tree(src) == want,
          f"--delete-source to s3:// refused, the source kept ({r.stderr.strip()[-200:]})")


if __name__ == "__main__":
    sys.exit(main())
