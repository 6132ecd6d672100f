"""test_s3_client.py — the S3 client (fs/s3, through s3tool) against a real
SeaweedFS started here, with boto3 as the independent other side: what one
writes the other reads, byte for byte.  Also: credentials from a profile,
wrong credentials, a missing bucket, If-Match on a replaced object, a range
past the end, the server down (a bounded failure), and no secret in any
message.  Usage: test_s3_client.py S3TOOL
"""
import concurrent.futures
import hashlib
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3fixture import SECRET_KEY, SeaweedS3  # noqa: E402
from s3check import FAILS, check  # noqa: E402

TOOL = sys.argv[1]


def tool(s3, *args, env=None, **kw):
    p = subprocess.run([TOOL, *map(str, args)], capture_output=True, env=env or s3.env(), **kw)
    assert SECRET_KEY.encode() not in p.stderr and SECRET_KEY.encode() not in p.stdout, "secret in output"
    return p


def main():
    rnd = os.urandom(3 << 20)
    with SeaweedS3() as s3, tempfile.TemporaryDirectory() as tmp:
        c, b = s3.client(), s3.bucket
        key = "dir one/obj+name=ä.bin"  # spaces, '+', '=', UTF-8: the URI encoding
        c.put_object(Bucket=b, Key=key, Body=rnd)
        etag = c.head_object(Bucket=b, Key=key)["ETag"]

        p = tool(s3, "head", b, key)
        check(p.returncode == 0 and p.stdout.decode().split() == [str(len(rnd)), etag], "HEAD: size and ETag as boto3")
        for off, n in ((0, 1), (12345, 1 << 20), (len(rnd) - 7, 7), (0, len(rnd))):
            p = tool(s3, "get", b, key, off, n, etag)
            check(p.returncode == 0 and p.stdout == rnd[off:off + n], f"ranged GET {off}+{n} with If-Match: same bytes")
        p = tool(s3, "get", b, key, len(rnd) - 4, 8)
        check(p.returncode == 10 + 8, f"a range past the end: CKS3_ERR_RANGE ({p.returncode}, {p.stderr!r})")
        p = tool(s3, "get", b, key, 0, 10, '"0123456789abcdef0123456789abcdef"')
        check(p.returncode == 10 + 7 and b"412" in p.stderr, f"If-Match of another ETag: CKS3_ERR_CHANGED ({p.stderr!r})")

        # the first GET of an object (its ETag and size with its first bytes, no HEAD):
        # larger than asked, smaller, exactly as large, empty
        for name, body in (("big", rnd), ("small", rnd[:5000]), ("exact", rnd[:65536]), ("empty", b"")):
            c.put_object(Bucket=b, Key=f"first/{name}", Body=body)
            et = c.head_object(Bucket=b, Key=f"first/{name}")["ETag"]
            p = tool(s3, "first", b, f"first/{name}", 65536)
            head, _, data = p.stdout.partition(b"\n")
            f = head.decode().split()
            want = [str(len(body)), et, str(min(len(body), 65536))]
            if not body and len(f) == 3 and f[1] == "-":  # an empty object's 416 may carry no ETag: none needed
                want[1] = "-"
            check(p.returncode == 0 and f == want and data == body[:65536],
                  f"first GET of {len(body)} bytes: size, ETag and bytes as boto3 ({p.returncode}: {head!r} vs {want}; "
                  f"{p.stderr!r})")
        p = tool(s3, "first", b, "first/none", 65536)
        check(p.returncode == 10 + 6, f"first GET of a missing key: CKS3_ERR_NOT_FOUND ({p.returncode}, {p.stderr!r})")

        # listing: more than a page (1000 keys) and a prefix
        names = sorted(f"many/k{i:05d}" for i in range(1100))
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda n: c.put_object(Bucket=b, Key=n, Body=n.encode()), names))
        p = tool(s3, "list", b, "many/")
        got = [ln.split("\t")[0] for ln in p.stdout.decode().splitlines()]
        check(p.returncode == 0 and got == names, f"LIST of 1100 keys over pages: {len(got)} keys, in order")
        p = tool(s3, "list", b, "nothing-here/")
        check(p.returncode == 0 and p.stdout == b"", "LIST of an empty prefix: nothing, no error")

        # PUT and multipart, read back with boto3
        f = os.path.join(tmp, "body")
        with open(f, "wb") as fh:
            fh.write(rnd[:(11 << 20) // 4] * 4)
        body = open(f, "rb").read()
        p = tool(s3, "put", b, "put/one", f)
        got = c.get_object(Bucket=b, Key="put/one")["Body"].read()
        check(p.returncode == 0 and got == body, "PUT: boto3 reads the same bytes")
        p = tool(s3, "mpu", b, "put/multi", f, 5 << 20)
        got = c.get_object(Bucket=b, Key="put/multi")["Body"].read()
        check(p.returncode == 0 and got == body and p.stdout.split()[1] == b"3", "multipart (3 parts): boto3 reads the same bytes")
        p = tool(s3, "mpu-create", b, "put/left")
        upload = p.stdout.decode().strip()
        small = os.path.join(tmp, "small")
        open(small, "wb").write(b"x" * 1000)
        tool(s3, "mpu-part", b, "put/left", upload, 1, small)
        p = tool(s3, "uploads", b, "put/")
        check(p.returncode == 0 and f"put/left\t{upload}" in p.stdout.decode(), "list-uploads: the open upload")
        p = tool(s3, "parts", b, "put/left", upload)
        check(p.returncode == 0 and p.stdout.decode().startswith("1\t1000\t"), f"list-parts: part 1 of 1000 bytes ({p.stdout!r})")
        p = tool(s3, "mpu-abort", b, "put/left", upload)
        up = c.list_multipart_uploads(Bucket=b, Prefix="put/").get("Uploads", [])
        check(p.returncode == 0 and not up, "abort: boto3 lists no upload")
        p = tool(s3, "delete", b, "put/one")
        gone = "Contents" not in c.list_objects_v2(Bucket=b, Prefix="put/one")
        check(p.returncode == 0 and gone, "DELETE: boto3 lists it no more")
        p = tool(s3, "delete", b, "put/one")
        check(p.returncode == 0, "DELETE of a missing key: ok")
        p = tool(s3, "cat", b, key)
        check(p.returncode == 0 and hashlib.sha256(p.stdout).digest() == hashlib.sha256(rnd).digest(), "GET whole object")

        # credentials and buckets
        p = tool(s3, "get", b, key, 0, 10, env=s3.env(AWS_SECRET_ACCESS_KEY="wrong-secret"))
        check(p.returncode == 10 + 4 and b"SignatureDoesNotMatch" in p.stderr, f"a wrong secret: CKS3_ERR_AUTH ({p.stderr!r})")
        p = tool(s3, "list", "no-such-bucket-here", "")
        check(p.returncode == 10 + 5, f"a missing bucket: CKS3_ERR_NO_BUCKET ({p.stderr!r})")
        home = os.path.join(tmp, "home")
        os.makedirs(os.path.join(home, ".aws"))
        with open(os.path.join(home, ".aws", "credentials"), "w") as fh:
            fh.write(f"[default]\naws_access_key_id = nope\naws_secret_access_key = nope\n\n"
                     f"[ck]\naws_access_key_id = {s3.env()['AWS_ACCESS_KEY_ID']}\naws_secret_access_key = {SECRET_KEY}\n")
        with open(os.path.join(home, ".aws", "config"), "w") as fh:
            fh.write(f"[profile ck]\nregion = eu-west-3\nendpoint_url = {s3.endpoint}\n")
        penv = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        penv.update(HOME=home, AWS_PROFILE="ck")
        p = tool(s3, "head", b, key, env=penv)
        check(p.returncode == 0, f"credentials, region and endpoint from profile ck of ~/.aws ({p.stderr!r})")
        p = tool(s3, "config", env=penv)
        check(p.stdout.decode().startswith(f"{s3.endpoint}|eu-west-3|profile ck"), f"config names its sources ({p.stdout!r})")
        p = tool(s3, "config", env=dict(penv, AWS_PROFILE="absent"))
        check(p.returncode == 10 + 3, f"no credentials: CKS3_ERR_CONFIG ({p.stderr!r})")
        p = tool(s3, "url", "s3://Bad_Bucket/x")
        check(p.returncode == 10 + 1, "a bucket name S3 refuses: CKS3_ERR_ARG")
        p = tool(s3, "url", "s3://bucket-a//some/prefix/")
        check(p.stdout == b"bucket-a|some/prefix\n", f"URL split ({p.stdout!r})")

        # If-Match across a replacement of the same size
        c.put_object(Bucket=b, Key=key, Body=os.urandom(len(rnd)))
        p = tool(s3, "get", b, key, 0, 4096, etag)
        check(p.returncode == 10 + 7, "the object replaced: the old ETag gets CKS3_ERR_CHANGED, no bytes")

        # server down: a bounded failure, then it works again
        s3.stop()
        t = time.time()
        p = tool(s3, "head", b, key, env=s3.env(S3TOOL_RETRY_MS="2000", S3TOOL_STATS="1"))
        dt = time.time() - t
        check(p.returncode == 10 + 9 and 1.5 < dt < 6 and b"retries" in p.stderr,
              f"server down: CKS3_ERR_NETWORK after the 2 s budget ({dt:.1f} s, {p.stderr!r})")
        s3.start()
        p = tool(s3, "head", b, key)
        check(p.returncode == 0, "server back: HEAD works")
    print(f"{'FAILED' if FAILS else 'passed'}: {len(FAILS)} failures")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
