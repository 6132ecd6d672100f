"""test_s3_commands.py — `ckptfs verify`, `stat` and `unpack` of
s3://BUCKET/PREFIX against a real S3 server (SeaweedFS, s3fixture.py): a
model packed here with `ckptfs pack` and uploaded with boto3 (the
independent uploader).  verify of the good pack passes; of a copy with one
byte of one object's chunk data changed, exits 3 naming that file (the local
copy of the same bytes does too: the damage is real); unpack gives every
original byte; stat's figures equal the local pack's; a prefix without a
pack, a missing bucket and wrong credentials fail with exit 1 saying which.
-o endpoint=,region=,profile=,s3_timeout= (mount's options, one parser)
work for verify, stat and unpack and win over the environment; a password
in an endpoint is refused unechoed.  The server stopped in the middle of a
verify (at an object's first GET, and among the chunk reads) is exit 1 naming the
object and what failed, not exit 3 (damage), and the same verify passes once
the server is back.
Usage: test_s3_commands.py CKPTFS
"""
import json
import os
import shutil
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3fixture import ACCESS_KEY, SECRET_KEY, free_ports  # noqa: E402
from s3proxy import FaultProxy, xml  # noqa: E402
from s3check import check, pack_and_upload, server_test  # noqa: E402
from s3util import ck, digest_tree, make_model  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])


def main():
    return server_test("ckptfs-s3c-", run, options, server_stopped)


def run(s3, tmp):
    src, packed, env, url = pack_and_upload(CKPTFS, s3, tmp, make_model, "models/m1")

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

    # in windows: verify and unpack fetch each object in a few large GETs
    # (8 MiB windows; chunk by chunk it was one to three per 128 KiB chunk)
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _x, fs in os.walk(packed) for f in fs if f.endswith(".ckpt")]
    allowed = sum((n + (8 << 20) - 1) // (8 << 20) + 2 for n in sizes)
    for cmd in ("verify", "unpack"):
        gets = []  # (key, Range) of each ranged GET
        gate = lambda m, p, h, gets=gets: m == "GET" and h.get("Range") and gets.append((p.split("?")[0],
                                                                                           h["Range"])) and False
        with FaultProxy(s3.port, every=1 << 40, burst=0, gate=gate) as px:
            we = s3.env(AWS_ENDPOINT_URL=px.endpoint)
            we.pop("CKPTFS_S3_WINDOW_MIB", None)  # the default windows, whatever the caller's environment
            r = ck(we, cmd, url,
                   *([os.path.join(tmp, "out-w")] if cmd == "unpack" else []))
        shutil.rmtree(os.path.join(tmp, "out-w"), ignore_errors=True)
        # what went wrong, if it did: each key's GETs, their distinct ranges, the command's last words
        seen = {k: (sum(1 for g in gets if g[0] == k), len({g for g in gets if g[0] == k})) for k, _ in gets}
        check(r.returncode == 0 and len(gets) <= allowed,
              f"{cmd} {url} in windows: {len(gets)} ranged GETs for {len(sizes)} objects (at most {allowed}; exit "
              f"{r.returncode})" + ("" if len(gets) <= allowed else f"; GETs, distinct ranges by key {seen}, first "
                                  f"{gets[:6]}; stderr {r.stderr.strip()[-600:]}"))

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
    # ... with every listing refused (403): counted all the same, from the
    # objects' first GETs (a listing that failed once gave 0 bytes, silently)
    denied = xml(b"<Error><Code>AccessDenied</Code><Message>no listing</Message></Error>", 403)
    with FaultProxy(s3.port, every=1 << 40, burst=0, lie=lambda q: denied if q.is_list() else None) as px:
        pe = s3.env(AWS_ENDPOINT_URL=px.endpoint)
        r = ck(pe, "unpack", "--json", url, os.path.join(tmp, "out-nl"))
        v = ck(pe, "verify", url)
    j = json.loads(r.stdout or "{}") if r.returncode == 0 else {}
    check(r.returncode == 0 and j.get("packed_bytes") == want and v.returncode == 0,
          f"unpack --json and verify of s3:// with every listing refused: exit 0, {j.get('packed_bytes')} packed "
          f"bytes == {want} ({r.returncode}, {v.returncode}: {r.stderr.strip()[-200:]} {v.stderr.strip()[-200:]})")

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



def options(s3, tmp):
    """-o endpoint=,region=,profile=,s3_timeout= of verify, stat and unpack."""
    src, url = os.path.join(tmp, "src"), s3.url("models/m1")
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"                # nothing listens there
    seen = ""                                                     # every message, for the secret
    # the environment names a dead endpoint and no region: -o wins
    env = s3.env(AWS_ENDPOINT_URL=dead)
    del env["AWS_REGION"]
    o = f"endpoint={s3.endpoint},region=us-east-1"
    r = ck(env, "verify", "-o", o, url)
    seen += r.stdout + r.stderr
    check(r.returncode == 0 and "all checksums ok" in r.stdout, f"verify -o endpoint=,region=: exit 0 ({r.stderr.strip()})")
    r = ck(env, "stat", "--json", "-o", o, url)
    seen += r.stdout + r.stderr
    check(r.returncode == 0 and json.loads(r.stdout or "{}").get("files") == 4,
          f"stat -o endpoint=,region=: exit 0, 4 files ({r.stderr.strip()})")
    out = os.path.join(tmp, "out-o")
    r = ck(env, "unpack", "-o", o, url, out)
    seen += r.stdout + r.stderr
    check(r.returncode == 0 and digest_tree(out) == digest_tree(src), f"unpack -o endpoint=: every byte ({r.stderr.strip()})")
    # and the other way round: the right endpoint in the environment, a dead one by -o
    t0 = time.monotonic()
    r = ck(s3.env(), "verify", "-o", f"endpoint={dead},s3_timeout=1", url)
    seen += r.stdout + r.stderr
    check(r.returncode == 1 and "cannot reach" in r.stderr and time.monotonic() - t0 < 30,
          f"verify -o endpoint=DEAD,s3_timeout=1: exit 1 soon, cannot reach ({r.returncode}: {r.stderr.strip()})")
    # profile= from a credentials file, no keys in the environment
    creds = os.path.join(tmp, "credentials")
    with open(creds, "w") as f:
        f.write(f"[ckt]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    env = s3.env(AWS_SHARED_CREDENTIALS_FILE=creds, AWS_CONFIG_FILE=os.path.join(tmp, "no-config"))
    del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    r = ck(env, "verify", "-o", "profile=ckt", url)
    seen += r.stdout + r.stderr
    check(r.returncode == 0, f"verify -o profile=ckt (credentials file only): exit 0 ({r.stderr.strip()})")
    r = ck(env, "stat", "-o", "profile=nope", url)
    seen += r.stdout + r.stderr
    check(r.returncode == 1 and "profile nope" in r.stderr, f"stat -o profile=nope: exit 1 naming it ({r.stderr.strip()})")
    check(SECRET_KEY not in seen, "no message shows the secret")
    # usage errors: a password in the endpoint (never echoed), unknown keys, -o on a local pack
    r = ck(s3.env(), "verify", "-o", f"endpoint=http://{ACCESS_KEY}:hunter2pw@127.0.0.1:1", url)
    check(r.returncode == 2 and "password" in r.stderr and "hunter2pw" not in r.stderr + r.stdout,
          f"a password in -o endpoint=: exit 2, refused, not echoed ({r.stderr.strip()})")
    r = ck(s3.env(), "verify", "-o", "cache_size=1G", url)
    check(r.returncode == 2 and "unknown option '-o cache_size'" in r.stderr, f"-o cache_size=: exit 2 ({r.stderr.strip()})")
    r = ck(s3.env(), "verify", "-o", "s3_timeout=0", url)
    check(r.returncode == 2 and "s3_timeout" in r.stderr, f"-o s3_timeout=0: exit 2 ({r.stderr.strip()})")
    r = ck(s3.env(), "stat", "-o", "region=us-east-1", os.path.join(tmp, "packed"))
    check(r.returncode == 2 and "s3:// PACKED only" in r.stderr, f"-o with a local PACKED: exit 2 ({r.stderr.strip()})")


def server_stopped(s3, tmp):
    """The server stopped in the middle of a verify: a network failure is
    exit 1 naming the object and what failed, never exit 3 (damage).  A
    proxy in front of the server forwards requests until the cut, then
    stops the server and closes every connection without a reply."""
    url = s3.url("models/m1")
    out = os.path.join(tmp, "out-cut")
    def window(h, i):  # a ranged GET of the i-th MiB of an object
        r = h.get("Range") or ""
        return r.startswith("bytes=") and int(r[6:].split("-")[0]) >> 20 == i

    # windows of 1 MiB (the model's 6 MB file spans 6; its open reads the
    # first and the last): the cut at the GET of its fourth, fetched ahead
    # of the chunk reads in the second
    # an object's first GET (its first 64 KiB, which binds its ETag: no HEAD)
    first = lambda m, h, n: m == "GET" and h.get("Range") == "bytes=0-65535" and not h.get("If-Match")
    for cmd, stage, cut_at in (("verify", "an object's first GET", first),
                               ("verify", "the chunk reads", lambda m, h, n: m == "GET" and window(h, 3)),
                               ("unpack", "the chunk reads", lambda m, h, n: m == "GET" and window(h, 3))):
        lock, state = threading.Lock(), {"cut": False, "ranged": 0}

        def gate(method, path, headers, cut_at=cut_at, lock=lock, state=state):
            with lock:
                if not state["cut"] and cut_at(method, headers, state["ranged"]):
                    state["cut"] = True
                    s3.stop()
                state["ranged"] += bool(headers.get("Range"))
                return state["cut"]

        with FaultProxy(s3.port, every=1, burst=0, gate=gate) as px:
            t0 = time.monotonic()
            args = ["--json", url] if cmd == "verify" else [url, out]
            r = ck(s3.env(AWS_ENDPOINT_URL=px.endpoint, CKPTFS_S3_WINDOW_MIB="1"), cmd, "--jobs", "1", "-o",
                   "s3_timeout=2", *args)
            dt = time.monotonic() - t0
        what = f"{cmd}, the server stopped at {stage}"
        check(state["cut"], what)
        if cmd == "verify":
            j = json.loads(r.stdout or "{}")
            check(r.returncode == 1 and j.get("damaged") == 0 and j.get("not_read", 0) >= 1,
                  f"{what}: exit 1, nothing damaged, files not read ({r.returncode}: {r.stdout.strip()})")
            check("could not be read from the server" in r.stderr, f"{what}: the summary says so")
        else:
            check(r.returncode == 1 and "damaged" not in r.stderr and not os.path.exists(out),
                  f"{what}: exit 1, not called damage, nothing in OUT ({r.returncode})")
        check(f"{url}/" in r.stderr and ".ckpt" in r.stderr and "Server returned nothing" in r.stderr,
              f"{what}: names the object and what failed ({r.stderr.strip()})")
        check(dt < 60, f"{what}: ends soon ({dt:.1f} s, s3_timeout=2)")
        s3.start()
        r = ck(s3.env(), "verify", url)
        check(r.returncode == 0, f"after the server is back: verify exit 0 (it was not damage) ({r.stderr.strip()})")


if __name__ == "__main__":
    sys.exit(main())
