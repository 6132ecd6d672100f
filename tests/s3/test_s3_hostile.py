"""test_s3_hostile.py — ckptfs against an S3 server that lies (issue 25):
a real SeaweedFS (s3fixture.py) behind s3proxy.FaultProxy, whose `lie`
answers chosen requests itself.  Ranged GETs answered with the whole object
(200, or 206 with the asked-for Content-Range), another range, a body
shorter than its Content-Length then closed, a longer body, flipped bytes,
another ETag, an object's first GET (which binds its ETag and size)
answered with the whole object, another range or a Content-Range with
a wrong total or none, 304/412, redirects to another listener, a slow trickle, huge
headers, a huge Content-Length; listings and error bodies of malformed XML,
entity bombs, external entities, a continuation token that never ends, keys
with ../, absolute paths and control characters.

What must hold: `verify`/`unpack` of the s3:// URL exit non-zero naming
the object and the problem (or pass, when the lie is harmless), within a
bound, never writing outside OUT; through a mount, every byte read equals
the original or the read fails with EIO, within s3_timeout plus a slack,
and the daemon stays up and serves the other files after (its peak RSS
bounded); the redirect target never sees a request.  And the disk cache:
bytes the server sent damaged are never served again (a second read and a
remount read right).
Usage: test_s3_hostile.py CKPTFS     (root and /dev/fuse; else skipped: 77)
"""
import errno
import hashlib
import glob
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import s3proxy as sp  # noqa: E402
from s3fixture import SECRET_KEY  # noqa: E402
from s3check import Mount, check, mount_test, sha, tree  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])
TIMEOUT = 2          # -o s3_timeout= of every command and mount here
SANITIZED = bool(os.environ.get("CKPTFS_SANITIZER_BUILD"))  # slower; RSS is the sanitizer's
SLACK = 60 if SANITIZED else 20  # seconds past it a failure may take, at load 20
N_FILES = 30


def safetensors(path, seed):
    """One BF16 tensor of 512 x 1024, N(0, 0.02): 1 MiB, 8 chunks."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(512 * 1024, dtype=np.float32) * 0.02).view(np.uint32)
    b = (w >> 16).astype(np.uint16).tobytes()
    h = json.dumps({"w": {"dtype": "BF16", "shape": [512, 1024], "data_offsets": [0, len(b)]}}).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b)


def name(i):
    return f"f{i:02d}.safetensors"


class Listener:
    """An HTTP server on a free port that records every request's headers
    (the target of the redirects) and answers 200 "hijacked"."""

    def __init__(self):
        self.seen = []
        me = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def any(self):
                me.seen.append((self.command, self.path, dict(self.headers)))
                body = b"hijacked"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Switch:
    """The proxy's lie, changed between cases: (predicate, act, times) or
    None; times: how many matching requests get it (None: all)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.case = None
        self.hits = []

    def set(self, pred=None, act=None, times=None):
        with self.lock:
            self.case = (pred, act, times) if pred else None
            self.hits = []

    def __call__(self, req):
        with self.lock:
            if not self.case:
                return None
            pred, act, times = self.case
            if not pred(req) or (times is not None and len(self.hits) >= times):
                return None
            self.hits.append((req.method, req.path, req.range()))
            return act


def data_get(key):
    """Ranged GETs of key's chunk data (not its header: those start at 0
    and are small)."""
    def pred(req):
        r = req.range()
        return req.method == "GET" and req.path.split("?")[0].endswith("/" + key) and r and r[0] > 0 and \
            r[1] - r[0] + 1 >= 16384
    return pred


def first_get(key):
    """An object's first GET: its first 64 KiB, no If-Match (its answer
    gives the ETag and size a reader binds to; no HEAD before it)."""
    def pred(req):
        return req.method == "GET" and req.path.split("?")[0].endswith("/" + key) and req.range() == (0, 65535) \
            and not req.headers.get("If-Match")
    return pred


def listing(req):
    return req.is_list()


def list_xml(keys, truncated=False, token=None, extra=""):
    """A ListBucketResult of keys (names, or (name, size) pairs)."""
    keys = [k if isinstance(k, tuple) else (k, 1) for k in keys]
    items = "".join(f"<Contents><Key>{k}</Key><Size>{n}</Size><ETag>&quot;x&quot;</ETag></Contents>"
                    for k, n in keys)
    t = "true" if truncated else "false"
    tok = f"<NextContinuationToken>{token}</NextContinuationToken>" if token else ""
    return (f'<?xml version="1.0" encoding="UTF-8"?>{extra}<ListBucketResult '
            f'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>h/</Prefix>'
            f"<IsTruncated>{t}</IsTruncated>{tok}{items}</ListBucketResult>").encode()


BOMB = ('<!DOCTYPE lolz [<!ENTITY lol "lollollollollollollollollollol">'
        + "".join(f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 if i > 1 else "")) * 10}">' for i in range(1, 10))
        + "]>")
XXE = '<!DOCTYPE r [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'


def main():
    listener = Listener()
    return mount_test("ckptfs-s3h-", lambda s3, tmp, mounts: run(s3, tmp, mounts, listener), listener.close)


def run(s3, tmp, mounts, listener):
    src, packed = os.path.join(tmp, "src"), os.path.join(tmp, "packed")
    os.makedirs(src)
    for i in range(N_FILES):
        safetensors(os.path.join(src, name(i)), i)
    subprocess.run([CKPTFS, "pack", src, packed], check=True, capture_output=True)
    s3.upload_dir(packed, "h")
    # the commands' pack: one file (each verify reads it all, through the proxy)
    one_src, one = os.path.join(tmp, "one-src"), os.path.join(tmp, "one")
    os.makedirs(one_src)
    shutil.copy(os.path.join(src, name(3)), one_src)
    subprocess.run([CKPTFS, "pack", one_src, one], check=True, capture_output=True)
    s3.upload_dir(one, "v")
    url = s3.url("h")
    want = {k: sha(p) for k, p in tree(src).items()}
    blobs = {os.path.basename(p): open(p, "rb").read() for p in tree(packed).values()}

    def obj(h):
        """The packed bytes of the object h asks for."""
        return blobs[h.path.split("?")[0].rsplit("/", 1)[1]]

    sw = Switch()
    with sp.FaultProxy(s3.port, every=1, burst=0, lie=sw) as px:
        env = s3.env(AWS_ENDPOINT_URL=px.endpoint)
        commands(s3, tmp, env, s3.url("v"), sw, listener, obj)
        listings(s3, tmp, env, url, want, sw, mounts)
        mount_cases(tmp, env, url, want, sw, mounts, listener, obj)
        disk_cache(tmp, env, url, want, sw, mounts)
    check(not listener.seen, f"the redirect target never got a request ({len(listener.seen)}: "
          f"{[(m, p, 'Authorization' in h) for m, p, h in listener.seen][:3]})")


def ck(env, *args, timeout=120):
    t0 = time.monotonic()
    try:
        r = subprocess.run([CKPTFS, *args], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0
    return r, time.monotonic() - t0


def commands(s3, tmp, env, url, sw, listener, blob):
    """verify of the s3:// URL (one file, f03) with its requests lied
    about: exit non-zero naming the object and the problem (needle; None:
    a harmless lie, exit 0 allowed).  Read chunk by chunk
    (CKPTFS_S3_WINDOW_MIB=0): ranged GETs inside the object, not one of it
    all, which the whole-object lies would answer truly."""
    env = dict(env, CKPTFS_S3_WINDOW_MIB="0")
    obj = name(3) + ".ckpt"
    redirect_to = f"http://127.0.0.1:{listener.port}/{s3.bucket}/v/{obj}"
    cases = [
        ("a Range GET answered 200 with the whole object", data_get(obj), sp.whole_object(blob, 200), "range"),
        ("a Range GET answered 206 with the whole object", data_get(obj), sp.whole_object(blob, 206), "range"),
        ("a Range GET answered with another range", data_get(obj), sp.shifted_range(blob), "range"),
        ("a body shorter than its Content-Length, then closed", data_get(obj), sp.short_body(), ""),
        ("a body longer than asked", data_get(obj), sp.long_body(), "range"),
        ("a body longer than its Content-Length", data_get(obj), sp.long_body(declared=False), None),
        ("flipped bytes, the right length", data_get(obj), sp.flipped(), ""),
        ("304 to a Range GET", data_get(obj), sp.status(304), "304"),
        ("412 to a Range GET", data_get(obj), sp.status(412), "412"),
        ("another ETag at the first GET", first_get(obj), sp.other_etag(), ""),
        ("the first GET answered 200 with the whole object", first_get(obj), sp.whole_object(blob, 200), "range"),
        ("the first GET answered 206 with the whole object", first_get(obj), sp.whole_object(blob, 206), "range"),
        ("the first GET answered with another range", first_get(obj), sp.shifted_range(blob), "range"),
        ("the first GET's Content-Range with a smaller total", first_get(obj), sp.wrong_total(-4096), ""),
        ("the first GET's Content-Range with a larger total", first_get(obj), sp.wrong_total(4096), ""),
        ("the first GET's Content-Range without a total", first_get(obj), sp.wrong_total(None), "size"),
        ("a 301 redirect of a Range GET", data_get(obj), sp.redirect(301, redirect_to), "redirect"),
        ("a 307 redirect of the first GET", first_get(obj), sp.redirect(307, redirect_to), "redirect"),
        ("a slow trickle (4 bytes/s)", data_get(obj), sp.trickle(4), ""),
        ("2 MB of headers", first_get(obj), sp.huge_headers(), ""),
        ("a Content-Length of 1 TiB, a small body", data_get(obj), sp.huge_length(), ""),
        ("an error body that is an entity bomb", data_get(obj),
         sp.xml((BOMB + "<Error><Code>lol</Code><Message>&lol9;</Message></Error>").encode(), code=403), ""),
    ]
    for what, pred, act, needle in cases:
        sw.set(pred, act)
        r, dt = ck(env, "verify", "-o", f"s3_timeout={TIMEOUT}", url, timeout=TIMEOUT + SLACK + 60)
        hit = len(sw.hits)
        sw.set()
        if r is None:
            check(False, f"verify, {what}: hung (killed after {dt:.0f} s)")
            continue
        msg = r.stderr.strip().replace("\n", " | ")
        ok = (r.returncode != 0 and obj in r.stderr and (needle or "").lower() in r.stderr.lower()) or \
            (needle is None and r.returncode == 0)
        check(hit > 0 and ok and SECRET_KEY not in r.stderr + r.stdout,
              f"verify, {what}: exit {r.returncode} != 0 naming {obj}" + (f" and '{needle}'" if needle else "")
              + f" ({hit} lies; {msg[:300]})")
        check(dt < 60 + TIMEOUT + SLACK, f"verify, {what}: done in {dt:.1f} s")

    # the server's words in an error: no line of their own, no control character
    sw.set(data_get(obj), sp.xml("<Error><Code>Bad&#10;ckptfs: fake</Code><Message>all ok&#10;ckptfs verify: "
                                 "all checksums ok \u202e\u001b</Message></Error>".replace("\u001b", "").encode(),
                                 code=400))
    r, dt = ck(env, "verify", "-o", f"s3_timeout={TIMEOUT}", url, timeout=TIMEOUT + SLACK + 60)
    sw.set()
    check(r is not None and r.returncode == 1 and "400" in r.stderr and "\nckptfs: fake" not in r.stderr
          and "\nckptfs verify: all checksums ok" not in r.stderr and "\u202e" not in r.stderr,
          f"verify, an error whose text has newlines and a bidi control: exit 1, printed on one line, "
          f"the control replaced ({r.stderr.strip()[-300:] if r else 'hung'})")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    check(SANITIZED or peak < 512 * 1024, f"no command took more than 512 MiB (peak RSS {peak // 1024} MiB)")


def digest(path):
    """The SHA-256 of the file at path, or None when reading it fails."""
    d, _ = read_all(path)
    return hashlib.sha256(d).hexdigest() if d is not None else None


def listings(s3, tmp, env, url, want, sw, mounts):
    """The listing a mount checks the objects with, lied about: the mount
    refused at once (exit 1 naming the URL and the problem), or, with keys
    that climb out or are absolute beside the real ones, mounted with the
    manifest's tree alone; `unpack --json` (which lists to count the packed
    bytes) writes nothing outside OUT."""
    lcases = [
        ("malformed XML", sp.xml(b"<ListBucketResult><Contents><Key>h/x</Key></Cont"), "ListBucketResult"),
        ("an entity bomb", sp.xml(list_xml(["h/&lol9;"], extra=BOMB)), "ListBucketResult"),
        ("an external entity", sp.xml(list_xml(["h/&xxe;"], extra=XXE)), "ListBucketResult"),
        ("an error body with an external entity",
         sp.xml((XXE + "<Error><Code>&xxe;</Code><Message>&xxe;</Message></Error>").encode(), code=403), "403"),
        ("IsTruncated with a token that never changes", sp.xml(list_xml(["h/a"], True, "again")), "token"),
        ("IsTruncated with tokens taking turns", None, "token"),
    ]
    turn = [0]

    def turns(h):
        turn[0] += 1
        sp.xml(list_xml([f"h/p{turn[0] % 2}"], True, f"t{turn[0] % 2}"))(h)

    mnt = os.path.join(tmp, "mnt-list")
    for what, act, needle in lcases:
        sw.set(listing, act or turns)
        t0 = time.monotonic()
        try:
            m = Mount(url, mnt, env, f"s3_timeout={TIMEOUT}")
            mounts.append(m)
            m.close()
            msg = "mounted"
        except RuntimeError as e:
            msg = str(e).replace("\n", " | ")
        dt = time.monotonic() - t0
        hit = len(sw.hits)
        sw.set()
        check(hit > 0 and msg != "mounted" and url in msg and needle.lower() in msg.lower() and "root:" not in msg
              and dt < 30, f"mount, a listing of {what}: refused in {dt:.1f} s naming {url} and '{needle}' "
              f"({hit} lies; {msg[:300]})")

    # keys that climb out, absolute, or with control characters, beside the real ones
    real = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="h/")["Contents"]
    keys = sorted([(o["Key"], o["Size"]) for o in real] +
                  [(k, 4096) for k in ("h/../../escape.safetensors.ckpt", "/etc/abs.ckpt", "h/sub/../../up.ckpt",
                                       "h/../h/" + name(0) + ".ckpt")])
    sw.set(listing, sp.xml(list_xml(keys)))
    try:
        with Mount(url, mnt, env, f"s3_timeout={TIMEOUT}") as m:
            check(sorted(tree(m.mnt)) == sorted(want), "mount, a listing with ../ and absolute keys: "
                  f"the manifest's tree alone ({sorted(tree(m.mnt))[:4]}...)")
    except RuntimeError as e:
        check(False, f"mount, a listing with ../ and absolute keys: mounted ({e})")
    sw.set()
    # unpack --json of the one-file pack "v", the same kind of keys beside its
    # own in any listing (unpack lists nothing since 8f90ddf: the keys it
    # reads are the manifest's; the listing is lied about all the same)
    real = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="v/")["Contents"]
    keys = sorted([(o["Key"], o["Size"]) for o in real] +
                  [(k, 4096) for k in ("v/../../escape.safetensors.ckpt", "/etc/abs.ckpt", "v/sub/../../up.ckpt")])
    sw.set(listing, sp.xml(list_xml(keys)))
    out = os.path.join(tmp, "out")
    before = set(os.listdir(tmp))
    r, dt = ck(env, "unpack", "--json", "-o", f"s3_timeout={TIMEOUT}", s3.url("v"), out,
               timeout=TIMEOUT + SLACK + 60)
    hit = len(sw.hits)
    sw.set()
    after = set(os.listdir(tmp))
    got = tree(out) if os.path.isdir(out) else {}
    check(r is not None and r.returncode == 0 and after - before == {"out"} and sorted(got) == [name(3)],
          f"unpack --json, a listing with ../ and absolute keys: the pack's files alone, nothing outside OUT "
          f"(exit {r.returncode if r else 'hung'}; new in tmp: {sorted(after - before)}; {hit} lies)")
    shutil.rmtree(out, ignore_errors=True)
    check(not glob.glob("/etc/abs*") and not os.path.exists(os.path.join(os.path.dirname(tmp), "escape.safetensors")),
          "no file written at a listed absolute or ../ key")


def read_all(path):
    """(bytes, None) or (None, errno)."""
    try:
        with open(path, "rb") as f:
            return f.read(), None
    except OSError as e:
        return None, e.errno


def mount_cases(tmp, env, url, want, sw, mounts, listener, blob):
    """Through a mount: each lie on its own file; the bytes right or EIO,
    soon; the next file (no lie) right; the daemon up, its RSS bounded."""
    m = Mount(url, os.path.join(tmp, "mnt"), env, f"s3_timeout={TIMEOUT},cache_size=32M,s3_windows=8")
    mounts.append(m)
    redirect = f"http://127.0.0.1:{listener.port}/x"
    cases = [
        ("200 with the whole object", sp.whole_object(blob, 200)),
        ("206 with the whole object", sp.whole_object(blob, 206)),
        ("another range", sp.shifted_range(blob)),
        ("a short body, closed", sp.short_body()),
        ("a longer body", sp.long_body()),
        ("flipped bytes", sp.flipped()),
        ("412", sp.status(412)),
        ("304", sp.status(304)),
        ("a 307 redirect", sp.redirect(307, redirect)),
        ("a slow trickle", sp.trickle(4)),
        ("a Content-Length of 1 TiB", sp.huge_length()),
        ("a Content-Length of 1 TiB, then silence", sp.huge_length(close=False)),
    ]
    assert 2 * len(cases) + 2 <= N_FILES
    for i, (what, act) in enumerate(cases):
        f, nxt = name(2 * i), name(2 * i + 1)
        sw.set(data_get(f + ".ckpt"), act)
        t0 = time.monotonic()
        data, err = read_all(os.path.join(m.mnt, f))
        dt = time.monotonic() - t0
        hit = len(sw.hits)
        sw.set()
        right = data is not None and hashlib.sha256(data).hexdigest() == want[f]
        check(hit > 0 and (right or err == errno.EIO),
              f"mount, {what}: {f} read right or EIO ({hit} lies; "
              f"{'right' if right else 'WRONG BYTES' if data is not None else os.strerror(err or 0)})")
        check(dt < TIMEOUT + SLACK, f"mount, {what}: the read ended in {dt:.1f} s (< s3_timeout {TIMEOUT} + {SLACK})")
        # the next file, no lie: right (after the fail-fast second of a failed read)
        deadline, ok = time.monotonic() + SLACK, False
        while not ok and time.monotonic() < deadline and m.p.poll() is None:
            d, _ = read_all(os.path.join(m.mnt, nxt))
            if d is not None and hashlib.sha256(d).hexdigest() != want[nxt]:
                break
            ok = d is not None
            if not ok:
                time.sleep(0.5)
        check(ok and m.p.poll() is None, f"mount, after {what}: the daemon is up and {nxt} reads right")
    rss = m.rss_peak_kib()
    check(SANITIZED or 0 < rss < 400 * 1024, f"mount: the daemon's peak RSS {rss // 1024} MiB < 400 MiB "
          f"(cache_size=32M, 8 windows of ~1 MiB)")
    log = open(m.log, errors="replace").read()
    check(SECRET_KEY not in log, "the daemon's log holds no secret")
    m.close()


def disk_cache(tmp, env, url, want, sw, mounts):
    """-o cache_dir=: the first answer for f28's chunk data flipped, later
    ones right: it reads right (the chunk read once more, past the cache),
    and a second time; f29 flipped at every answer: EIO; a remount with
    the server honest again reads both right (on the code before, the
    cache served the flipped bytes again: EIO for good)."""
    cache = os.path.join(tmp, "cache")
    f, g = name(N_FILES - 2), name(N_FILES - 1)
    opts = f"s3_timeout={TIMEOUT},cache_dir={cache}"
    m = Mount(url, os.path.join(tmp, "mnt-dc"), env, opts)
    mounts.append(m)
    sw.set(data_get(f + ".ckpt"), sp.flipped(), times=1)
    first, err = read_all(os.path.join(m.mnt, f))
    hits = list(sw.hits)
    sw.set()
    check(len(hits) == 1 and (first is None or hashlib.sha256(first).hexdigest() == want[f]),
          f"cache_dir: the first answer flipped: {f} read right or EIO ({len(hits)} lies; "
          f"{'right' if first is not None else os.strerror(err or 0)})")
    check(digest(os.path.join(m.mnt, f)) == want[f],
          f"cache_dir: a second read of {f} is right")
    sw.set(data_get(g + ".ckpt"), sp.flipped())
    _, err = read_all(os.path.join(m.mnt, g))
    flipped = [r for _, _, r in sw.hits]
    sw.set()
    check(err == errno.EIO, f"cache_dir: every answer flipped: {g} gives EIO ({len(flipped)} lies)")
    m.close()
    # a remount, the server honest again: both right (what the cache kept of
    # the damaged answers is dropped when it fails the chunks' checksums)
    m = Mount(url, os.path.join(tmp, "mnt-dc2"), env, opts)
    mounts.append(m)
    for h in (f, g):
        check(digest(os.path.join(m.mnt, h)) == want[h], f"cache_dir: a remount reads {h} right")
    st = m.stats()
    check(st.get("disk_cache_hit_bytes", 0) > 0, f"cache_dir: the remount read from the cache "
          f"({st.get('disk_cache_hit_bytes')} bytes; {st.get('disk_cache_bad')} entries dropped)")
    m.close()


if __name__ == "__main__":
    sys.exit(main())
