"""test_s3_opts.py — the S3 options of `ckptfs pack`, `verify`, `stat` and
`unpack` of s3://BUCKET/PREFIX (issue 25): `-o endpoint=,region=,profile=,
s3_timeout=`, the mount's names, values and messages (one parser,
fs/s3/s3_opts.c), against a real S3 server (SeaweedFS, s3fixture.py).

- -o endpoint= wins over AWS_ENDPOINT_URL, for pack as for the readers (a
  dead endpoint in the environment); the pack it makes unpacks to every
  original byte.
- -o profile= takes the keys of that profile from $HOME/.aws/credentials
  (HOME a temporary directory, no keys in the environment); without it
  there are no credentials (exit 1 saying so).  No output shows the secret.
- s3_timeout bounds each request's retries: through a proxy that answers
  503 SlowDown to every request, each command with -o s3_timeout=2 exits 1
  well before the default (30 s) would have given up, naming the object, the
  request and what it retried for how long; with the default the command is
  still retrying at 3 s (then killed), and -v says the default it runs with.
- an unknown option, an option of the mount only, a bad value, -o with a
  local PACKED: exit 2 naming the option (a value never echoed).
Usage: test_s3_opts.py CKPTFS
"""
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3fixture import ACCESS_KEY, SECRET_KEY, free_ports  # noqa: E402
from s3proxy import SLOWDOWN, FaultProxy, status  # noqa: E402
from s3check import MB, check, server_test  # noqa: E402
from s3util import digest_tree  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])
CMDS = ("pack", "verify", "stat", "unpack")


def make_model(src):
    """One BF16 safetensors file (a few chunks) and a small blob, numpy only."""
    import numpy as np
    rng = np.random.default_rng(25)
    a = (rng.standard_normal((1024, 1024)).astype(np.float32) * 0.02).view(np.uint32)
    data = (a >> 16).astype(np.uint16).tobytes()
    h = json.dumps({"w": {"dtype": "BF16", "shape": [1024, 1024], "data_offsets": [0, len(data)]}}).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(src)
    with open(os.path.join(src, "model.safetensors"), "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + data)
    with open(os.path.join(src, "blob.bin"), "wb") as f:
        f.write(os.urandom(MB + 3))


def ck(env, *args, timeout=300):
    return subprocess.run([CKPTFS, *args], capture_output=True, text=True, env=env, timeout=timeout)


def args_of(cmd, src, url, tmp, n):
    """The positional arguments of cmd on url (pack from src, unpack to a new OUT)."""
    return {"pack": [src, url], "unpack": [url, os.path.join(tmp, f"out-{n}")]}.get(cmd, [url])


def main():
    return server_test("ckptfs-s3o-", run)


def run(s3, tmp):
    src = os.path.join(tmp, "src")
    make_model(src)
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    stage = os.path.join(tmp, "stage")
    seen = []  # every output, for the secret

    def run_ck(env, *a, **kw):
        r = ck(dict(env, CKPTFS_STAGE_DIR=stage), *a, **kw)
        seen.append(r.stdout + r.stderr)
        return r

    # -o endpoint= wins over AWS_ENDPOINT_URL (dead), for every command
    url = s3.url("opts/ep")
    env = s3.env(AWS_ENDPOINT_URL=dead)
    o = f"endpoint={s3.endpoint},region=us-east-1"
    r = run_ck(env, "pack", "-o", o, src, url)
    check(r.returncode == 0, f"pack -o endpoint= over a dead AWS_ENDPOINT_URL: exit 0 ({r.returncode}: "
          f"{r.stderr.strip()[-800:]})")
    keys = [x["Key"] for x in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="opts/ep/").get("Contents", [])]
    check("opts/ep/ckptfs.manifest" in keys, f"the pack is on the server -o endpoint= named ({keys})")
    r = run_ck(env, "verify", "-o", o, url)
    check(r.returncode == 0 and "all checksums ok" in r.stdout, f"verify -o endpoint=: exit 0 ({r.stderr.strip()})")
    r = run_ck(env, "stat", "--json", "-o", o, url)
    check(r.returncode == 0 and json.loads(r.stdout or "{}").get("files") == 2,
          f"stat -o endpoint=: exit 0, 2 files ({r.stderr.strip()})")
    out = os.path.join(tmp, "out-ep")
    r = run_ck(env, "unpack", "-o", o, url, out)
    check(r.returncode == 0 and digest_tree(out) == digest_tree(src),
          f"unpack -o endpoint= of what pack -o endpoint= made: every original byte ({r.stderr.strip()})")
    # the other way round: the right endpoint in the environment, a dead one by -o
    for n, cmd in enumerate(CMDS):
        r = run_ck(s3.env(), cmd, "-o", f"endpoint={dead},s3_timeout=1", *args_of(cmd, src, s3.url("opts/x"), tmp, n))
        check(r.returncode == 1 and dead in r.stderr, f"{cmd} -o endpoint=DEAD over the right AWS_ENDPOINT_URL: "
              f"exit 1 naming the dead one ({r.returncode}: {r.stderr.strip()[-400:]})")

    # -o profile=: keys from $HOME/.aws/credentials only
    home = os.path.join(tmp, "home")
    os.makedirs(os.path.join(home, ".aws"))
    with open(os.path.join(home, ".aws", "credentials"), "w") as f:
        f.write(f"[default]\naws_access_key_id = WRONGKEY\naws_secret_access_key = wrongsecret\n\n"
                f"[ckopts]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    penv = s3.env(HOME=home)
    del penv["AWS_ACCESS_KEY_ID"], penv["AWS_SECRET_ACCESS_KEY"]
    purl = s3.url("opts/profile")
    for n, cmd in enumerate(CMDS):
        r = run_ck(penv, cmd, "-o", "profile=ckopts", *args_of(cmd, src, purl, tmp, 10 + n))
        check(r.returncode == 0, f"{cmd} -o profile=ckopts, keys in $HOME/.aws/credentials only: exit 0 "
              f"({r.returncode}: {r.stderr.strip()[-600:]})")
    check(digest_tree(os.path.join(tmp, "out-13")) == digest_tree(src),
          "unpack -o profile= of what pack -o profile= made: every original byte")
    r = run_ck(penv, "verify", purl)  # the default profile's keys are wrong: the profile made it work
    check(r.returncode == 1 and "profile default" in r.stderr,
          f"verify without -o profile=: the default profile's keys, refused ({r.returncode}: {r.stderr.strip()})")
    r = run_ck(penv, "pack", "-o", "profile=nope", src, s3.url("opts/nope"))
    check(r.returncode == 1 and "profile nope" in r.stderr, f"pack -o profile=nope: exit 1 naming it ({r.stderr.strip()})")

    # s3_timeout: every request answered 503 SlowDown
    with FaultProxy(s3.port, every=1, burst=1) as px:
        env = s3.env(AWS_ENDPOINT_URL=px.endpoint)
        for n, cmd in enumerate(CMDS):
            t0 = time.monotonic()
            r = run_ck(env, cmd, "-o", "s3_timeout=2", *args_of(cmd, src, url if cmd != "pack" else
                                                                 s3.url("opts/t"), tmp, 20 + n), timeout=120)
            dt = time.monotonic() - t0
            err = r.stderr.strip()
            check(r.returncode == 1 and f"s3://{s3.bucket}/opts/" in err and "503" in err,
                  f"{cmd} -o s3_timeout=2, the server answers 503 forever: exit 1 naming the object and the "
                  f"status ({r.returncode}: {err[-600:]})")
            check(re.search(r"\d+ tries in \d+\.\d s, retried for up to s3_timeout=2 s", err),
                  f"{cmd}: the message says what was retried, for how long, and the option that bounds it ({err[-600:]})")
            # the default gives up after 30 s; a command under 2 s gives up at about 2 s
            check(dt < 20, f"{cmd} -o s3_timeout=2: gave up in {dt:.1f} s (the default would retry for 30 s)")
    # the manifest answered, every packed file's GET 503: the members' reads are bounded too
    refuse = lambda req: None if req.path.split("?")[0].endswith("/ckptfs.manifest") else status(503, SLOWDOWN)
    with FaultProxy(s3.port, every=1 << 40, burst=0, lie=refuse) as px:
        env = s3.env(AWS_ENDPOINT_URL=px.endpoint)
        for n, cmd in enumerate(("verify", "unpack")):
            t0 = time.monotonic()
            r = run_ck(env, cmd, "--jobs", "1", "-o", "s3_timeout=2", *args_of(cmd, src, url, tmp, 25 + n),
                       timeout=120)
            dt = time.monotonic() - t0
            err = r.stderr.strip()
            check(r.returncode == 1 and re.search(rf"{url}/\S+\.ckpt", err) and "503" in err and
                  re.search(r"\d+ tries in \d+\.\d s, retried for up to s3_timeout=2 s", err) and dt < 20,
                  f"{cmd} -o s3_timeout=2, every packed file's GET 503: exit 1 (not damage) in {dt:.1f} s naming "
                  f"the object, the status and the retries ({r.returncode}: {err[-600:]})")
    with FaultProxy(s3.port, every=1, burst=1) as px:
        env = s3.env(AWS_ENDPOINT_URL=px.endpoint)
        # the default: still retrying at 3 s (then killed), and -v says it is 30 s
        for n, cmd in enumerate(CMDS):
            p = subprocess.Popen([CKPTFS, cmd, *args_of(cmd, src, url if cmd != "pack" else s3.url("opts/t"),
                                                        tmp, 30 + n)],
                                 env=dict(env, CKPTFS_STAGE_DIR=stage), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
            alive = p.poll() is None
            p.kill()
            p.wait()
            check(alive, f"{cmd} without -o s3_timeout=: still retrying at 3 s (exit {p.returncode})")
    for n, cmd in enumerate(("verify", "stat", "unpack")):
        r = run_ck(s3.env(), cmd, "-v", *args_of(cmd, src, url, tmp, 40 + n))
        check(r.returncode == 0 and f"{url}: endpoint {s3.endpoint}" in r.stdout and "s3_timeout 30 s" in r.stdout,
              f"{cmd} -v: says the endpoint and the default s3_timeout (30 s) ({r.stdout.strip()[:400]})")
    r = run_ck(s3.env(), "pack", "-v", "-o", "s3_timeout=45", src, s3.url("opts/v"))
    check(r.returncode == 0 and f"{s3.url('opts/v')}: endpoint {s3.endpoint}" in r.stdout and "s3_timeout 45 s" in
          r.stdout, f"pack -v -o s3_timeout=45: says so ({r.stdout.strip()[:400]})")

    # usage errors: exit 2, naming the option, never echoing a value
    for n, cmd in enumerate(CMDS):
        a = args_of(cmd, src, s3.url("opts/u"), tmp, 50 + n)
        for opt, says in (("bogus=1", ["unknown option '-o bogus'", "endpoint=", "s3_timeout="]),
                          ("s3_windows=4", ["'-o s3_windows'", "ckptfs mount"]),
                          ("cache_dir=/tmp/x", ["'-o cache_dir'", "ckptfs mount"]),
                          ("s3_timeout=0", ["bad value in option '-o s3_timeout'", "from 1 to 3600"]),
                          ("s3_timeout=2x", ["bad value in option '-o s3_timeout'"]),
                          ("region=", ["bad value in option '-o region'"]),
                          ("endpoint=http://u:hunter2pw@127.0.0.1:1", ["password"])):
            r = run_ck(s3.env(), cmd, "-o", opt, *a)
            check(r.returncode == 2 and all(s in r.stderr for s in says) and "hunter2pw" not in r.stdout + r.stderr,
                  f"{cmd} -o {opt.replace('hunter2pw', 'PW')}: exit 2 saying {says} "
                  f"({r.stderr.strip().replace('hunter2pw', 'PW')[:300]})")
    local = os.path.join(tmp, "local.packed")
    r = run_ck(s3.env(), "pack", "-o", "region=us-east-1", src, local)
    check(r.returncode == 2 and "s3:// PACKED only" in r.stderr and not os.path.exists(local),
          f"pack -o to a local PACKED: exit 2, nothing written ({r.stderr.strip()})")
    check(not any(SECRET_KEY in s for s in seen), "no output shows the secret")


if __name__ == "__main__":
    sys.exit(main())
