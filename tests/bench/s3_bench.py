#!/usr/bin/env python3
"""s3_bench.py CKPTFS_OR_BUILD_DIR [OUT.md] — issue 25 item 4: a model loaded
cold from S3-compatible storage, side by side in one run (a benchmark, not a
test: it prints figures, as ratios measured in the same run, and fails only
when a command fails or a reader gets wrong bytes).

One SeaweedFS server (tests/s3/s3fixture.py) runs in a network namespace of
its own, behind a veth pair; its data lives in /dev/shm, so the server side is
always warm and only the node is cold.  Bucket `originals` holds the model's
files (uploaded with boto3), bucket `packed` its pack (`ckptfs pack SRC
s3://packed/model`).  For each link (the veth uncapped, which is in-kernel
like loopback; then capped with `tc qdisc ... tbf` on both ends, 10 and
2 Gbit/s, and 500 Mbit/s, a cap that binds on a small loaded machine where
2 Gbit/s is more than any of the three gets), each access pattern and each
reader count N, three ways to load the model, each cold (a new mount or an empty local copy, and
`echo 3 >/proc/sys/vm/drop_caches`) and in turn so that the machine's noise
hits them alike:

  ckptfs  `ckptfs mount s3://packed/model` (default options), N readers;
  s3fs    s3fs (Debian) mounting the bucket of originals (path-style, the
          server's URL, a passwd file; S3FS_OPTS adds options), N readers;
  plain   a parallel ranged-GET download of the originals (boto3, 8 MiB
          ranges, N worker processes) to local disk, then the N readers on
          that copy: what a node does today before it can load.

Patterns (the model is read once in total, by N processes at once):
  whole  the shards dealt to the N readers, each read whole (1 MiB reads);
  slice  safetensors safe_open(...).get_slice: every tensor's rows in eighths
         (tensor parallelism over 8 ranks), the 8 eighths dealt to the N
         readers, so with N = 8 each reader takes an eighth of every tensor.

Every reader hashes what it read (xxh3-128), checked against hashes of the
original files made here from their bytes (shards whole; for slices, the
byte range of each eighth found from the safetensors header): a fast wrong
answer fails the run.  The table (markdown) goes to OUT.md, with its figures
in OUT.md.json, or to stdout without OUT.md.  Bytes from the server per case: the host end of the
veth's rx_bytes (wire bytes: HTTP and TCP/IP headers included), and for
ckptfs its own counter of packed bytes fetched (target <= 1.02x packed).

Needs root, /dev/fuse, ip and tc (iproute2), s3fs, python3 with boto3,
numpy, torch, safetensors, xxhash.  Environment: S3B_DIR (data kept between
runs, default /var/tmp/ckptfs-s3bench), S3B_SHARDS x S3B_SHARD_MIB (the
model: 16 x 32 MiB of BF16 safetensors from mount_gen.py), S3B_LINKS
(default "veth,10gbit,2gbit,500mbit"), S3B_READERS ("1,4,8"), S3B_PATTERNS
("whole,slice"), S3B_METHODS ("ckptfs,s3fs,plain"), CKPTFS_OPTS (extra -o
for the ckptfs mount), S3FS_OPTS.  Everything stays on this machine; the
namespace, mounts and daemons are removed on every way out (a stale
namespace of a killed run is removed by the next).
"""
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "s3"))
from s3fixture import ACCESS_KEY, SECRET_KEY, SeaweedS3, netns_prefix  # noqa: E402

MIB = 1 << 20
RANGE = 8 * MIB
EIGHTHS = 8
CLEANUP = []          # callables run in reverse order on the way out


def env_list(name, default):
    return [x for x in os.environ.get(name, default).split(",") if x]


def log(msg):
    print(f"[s3_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(*cmd, check=True, **kw):
    r = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


# ---- the link: a namespace for the server, a veth pair, tc ---------------
class Link:
    def __init__(self):
        for ns in sh("ip", "netns", "list").stdout.split("\n"):   # stale ones of killed runs
            m = re.match(r"ckb(\d+)\b", ns)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                sh("ip", "netns", "del", f"ckb{m.group(1)}", check=False)
        pid = os.getpid()
        self.ns, self.host, self.peer = f"ckb{pid}", f"ckbh{pid}", f"ckbn{pid}"
        used = sh("ip", "-4", "-o", "addr").stdout
        for k in range(pid % 200, pid % 200 + 250):
            net = f"10.213.{k % 250}."
            if net not in used:
                break
        self.host_ip, self.ip = net + "1", net + "2"
        sh("ip", "netns", "add", self.ns)
        CLEANUP.append(self.close)
        sh("ip", "link", "add", self.host, "type", "veth", "peer", "name", self.peer)
        sh("ip", "link", "set", self.peer, "netns", self.ns)
        sh("ip", "addr", "add", self.host_ip + "/30", "dev", self.host)
        sh("ip", "link", "set", self.host, "up")
        self.nsx("ip", "addr", "add", self.ip + "/30", "dev", self.peer)
        self.nsx("ip", "link", "set", self.peer, "up")
        self.nsx("ip", "link", "set", "lo", "up")
        self.rate = None

    def nsx(self, *cmd, **kw):
        return sh(*netns_prefix(self.ns), *cmd, **kw)

    def set_rate(self, rate):
        """rate "10gbit", "2gbit" (tbf on both ends) or None (uncapped)."""
        bits = {"gbit": 1e9, "mbit": 1e6}
        for dev, x in ((self.host, sh), (self.peer, self.nsx)):
            x("tc", "qdisc", "del", "dev", dev, "root", check=False)
            if rate:
                m = re.fullmatch(r"(\d+)(gbit|mbit)", rate)
                bps = int(m.group(1)) * bits[m.group(2)]
                burst = max(256 << 10, int(bps / 8 * 0.004))   # 4 ms of the rate
                x("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
                  "latency", "20ms")
        self.rate = rate

    def rx_bytes(self):
        with open(f"/sys/class/net/{self.host}/statistics/rx_bytes") as f:
            return int(f.read())

    def close(self):
        sh("ip", "link", "del", self.host, check=False)
        sh("ip", "netns", "del", self.ns, check=False)


# ---- the model and its reference hashes ----------------------------------
def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return 8 + n, h


def eighth_rows(rows, k):
    return k * rows // EIGHTHS, (k + 1) * rows // EIGHTHS


def reference(src, shards):
    """{shard: hash} and {(shard, tensor, k): hash} from the original bytes."""
    import xxhash
    whole, sl = {}, {}
    for s in shards:
        p = os.path.join(src, s)
        h = xxhash.xxh3_128()
        with open(p, "rb") as f:
            for b in iter(lambda: f.read(8 * MIB), b""):
                h.update(b)
        whole[s] = h.hexdigest()
        base, hdr = st_header(p)
        with open(p, "rb") as f:
            for name, t in hdr.items():
                a, b = t["data_offsets"]
                rows = t["shape"][0] if t["shape"] else 1
                row = (b - a) // max(rows, 1)
                for k in range(EIGHTHS):
                    r0, r1 = eighth_rows(rows, k)
                    f.seek(base + a + r0 * row)
                    sl[f"{s}|{name}|{k}"] = xxhash.xxh3_128(f.read((r1 - r0) * row)).hexdigest()
    return whole, sl


# ---- readers (forked; import time not counted) -----------------------------
def read_whole(root, shards):
    import xxhash
    buf = bytearray(MIB)
    mv = memoryview(buf)
    out, total = {}, 0
    for s in shards:
        h = xxhash.xxh3_128()
        fd = os.open(os.path.join(root, s), os.O_RDONLY)
        try:
            while True:
                n = os.readv(fd, [mv])
                if n <= 0:
                    break
                h.update(mv[:n])
                total += n
        finally:
            os.close(fd)
        out[s] = h.hexdigest()
    return out, total


def read_slices(root, shards, ks):
    import torch
    import xxhash
    from safetensors import safe_open
    out, total = {}, 0
    for s in shards:
        with safe_open(os.path.join(root, s), framework="pt") as f:
            for name in f.keys():
                sl = f.get_slice(name)
                shape = sl.get_shape()
                rows = shape[0] if shape else 1
                for k in ks:
                    r0, r1 = eighth_rows(rows, k)
                    t = sl[r0:r1].contiguous()
                    b = t.view(torch.uint8).numpy() if t.numel() else b""
                    out[f"{s}|{name}|{k}"] = xxhash.xxh3_128(b).hexdigest()
                    total += t.numel() * t.element_size()
    return out, total


def reader(i, n, pattern, root, shards, go, q):
    go.wait()
    t0 = time.perf_counter()
    if pattern == "whole":
        res = read_whole(root, shards[i::n])
    else:
        res = read_slices(root, shards, list(range(i, EIGHTHS, n)))
    q.put((i, time.perf_counter() - t0, res))


def run_readers(n, pattern, root, shards, before=None):
    """N readers started together; (seconds from the start to the last one
    done, {key: hash}, bytes read, seconds of before()).  before(): timed, run
    first (the plain download)."""
    ctx = mp.get_context("fork")
    go, q = ctx.Event(), ctx.Queue()
    ps = [ctx.Process(target=reader, args=(i, n, pattern, root, shards, go, q)) for i in range(n)]
    for p in ps:
        p.start()
    try:
        t0 = time.perf_counter()
        if before:
            before()
        t_before = time.perf_counter() - t0
        go.set()
        hashes, total = {}, 0
        for _ in ps:
            _i, _dt, (h, b) = q.get(timeout=3600)
            hashes.update(h)
            total += b
        dt = time.perf_counter() - t0
    finally:
        for p in ps:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return dt, hashes, total, t_before


# ---- the plain download ------------------------------------------------------
def dl_worker(i, n, endpoint, bucket, jobs, dest, ready, go, q):
    import boto3
    from botocore.config import Config
    c = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                     aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                     config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}))
    c.head_bucket(Bucket=bucket)          # connected before the clock starts, as a mount is
    ready.put(i)
    go.wait()
    got = 0
    fds = {}
    try:
        for key, a, b in jobs[i::n]:
            if key not in fds:
                fds[key] = os.open(os.path.join(dest, key), os.O_WRONLY)
            body = c.get_object(Bucket=bucket, Key=key, Range=f"bytes={a}-{b - 1}")["Body"].read()
            if len(body) != b - a:
                raise RuntimeError(f"{key} {a}-{b}: got {len(body)} bytes")
            os.pwrite(fds[key], body, a)
            got += len(body)
    finally:
        for fd in fds.values():
            os.close(fd)
    q.put(got)


class Download:
    """N worker processes, connected, waiting; run() downloads everything."""

    def __init__(self, n, s3, bucket, sizes, dest):
        ctx = mp.get_context("fork")
        jobs = [(k, a, min(a + RANGE, sz)) for k, sz in sorted(sizes.items()) for a in range(0, sz, RANGE)]
        for k, sz in sizes.items():
            with open(os.path.join(dest, k), "wb") as f:
                f.truncate(sz)
        self.go, self.q, ready = ctx.Event(), ctx.Queue(), ctx.Queue()
        self.ps = [ctx.Process(target=dl_worker, args=(i, n, s3.endpoint, bucket, jobs, dest, ready, self.go,
                                                       self.q)) for i in range(n)]
        for p in self.ps:
            p.start()
        for _ in self.ps:
            ready.get(timeout=120)
        self.total = sum(sizes.values())

    def run(self):
        self.go.set()
        got = sum(self.q.get(timeout=3600) for _ in self.ps)
        for p in self.ps:
            p.join(timeout=60)
        if got != self.total:
            raise RuntimeError(f"download: {got} of {self.total} bytes")


# ---- mounts --------------------------------------------------------------------
class Fuse:
    """A FUSE daemon in the foreground on mnt, unmounted on every way out."""

    def __init__(self, cmd, mnt, fstype, env=None, errlog=None):
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        self.err = errlog
        self.p = subprocess.Popen(["setpriv", "--pdeathsig", "TERM", "--"] + cmd, env=env,
                                  stdout=subprocess.DEVNULL, stderr=open(errlog, "ab"))
        CLEANUP.append(self.close)
        for _ in range(1200):
            if self.mounted() or self.p.poll() is not None:
                break
            time.sleep(0.025)
        if not self.mounted():
            self.close()
            with open(errlog, errors="replace") as f:
                raise RuntimeError(f"{fstype} not mounted at {mnt}: {f.read()[-2000:]}")

    def cpu_s(self):
        """The daemon's CPU seconds (user + system) so far."""
        with open(f"/proc/{self.p.pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")

    def mounted(self):
        with open("/proc/mounts") as f:
            return any(ln.split()[1] == self.mnt for ln in f)

    def close(self):
        if self.mounted():
            if subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True).returncode:
                subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        if self.close in CLEANUP:
            CLEANUP.remove(self.close)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


# ---- one case -----------------------------------------------------------------
class Bench:
    def __init__(self, ckptfs, s3, link, work, shards, sizes, ref):
        self.ckptfs, self.s3, self.link, self.work = ckptfs, s3, link, work
        self.shards, self.sizes, self.ref = shards, sizes, ref
        self.passwd = os.path.join(work, "s3fs.passwd")
        with open(os.open(self.passwd, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(f"{ACCESS_KEY}:{SECRET_KEY}\n")

    def check(self, what, pattern, hashes, nbytes):
        want = self.ref[0] if pattern == "whole" else self.ref[1]
        bad = [k for k in want if hashes.get(k) != want[k]]
        if bad or len(hashes) != len(want):
            raise RuntimeError(f"{what}: {len(bad)} of {len(want)} pieces differ from the originals "
                               f"(first: {bad[:3]}), {len(hashes)} read")
        return nbytes

    def case(self, method, pattern, n):
        mnt = os.path.join(self.work, "mnt")
        extra = {}
        dl = None
        if method == "ckptfs":
            o = "log=" + os.path.join(self.work, "ckptfs.log")
            if os.environ.get("CKPTFS_OPTS"):
                o += "," + os.environ["CKPTFS_OPTS"]
            m = Fuse([self.ckptfs, "mount", "-f", "-o", o, self.s3.url("model"), mnt], mnt, "ckptfs",
                     env=self.s3.env(), errlog=os.path.join(self.work, "ckptfs.err"))
            root = mnt
        elif method == "s3fs":
            o = (f"ro,url={self.s3.endpoint},use_path_request_style,passwd_file={self.passwd},endpoint=us-east-1")
            if os.environ.get("S3FS_OPTS"):
                o += "," + os.environ["S3FS_OPTS"]
            m = Fuse(["s3fs", "originals", mnt, "-f", "-o", o], mnt, "s3fs",
                     errlog=os.path.join(self.work, "s3fs.err"))
            root = mnt
        else:
            m = None
            root = os.path.join(self.work, "copy")
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
        try:
            drop_caches()
            if method == "plain":
                dl = Download(n, self.s3, "originals", self.sizes, root)
            rx0, cpu0 = self.link.rx_bytes(), m.cpu_s() if m else 0
            dt, hashes, nbytes, t_dl = run_readers(n, pattern, root, self.shards, before=dl.run if dl else None)
            rx = self.link.rx_bytes() - rx0
            if m:
                extra["daemon_cpu_s"] = m.cpu_s() - cpu0
            if method == "plain":
                extra = {"download_s": t_dl}
            if method == "ckptfs":
                st = json.loads(os.getxattr(mnt, "user.ckptfs.stats"))
                extra.update({"fetched": st["s3_packed_bytes_fetched"], "s3_bytes_in": st.get("s3_bytes_in", 0),
                         "gets": st.get("s3_range_gets", 0)})
        finally:
            if m:
                m.close()
            if method == "plain":
                shutil.rmtree(root, ignore_errors=True)
        self.check(f"{method} {pattern} N={n} link={self.link.rate or 'veth'}", pattern, hashes, nbytes)
        return dict(seconds=dt, rx=rx, read=nbytes, **extra)


# ---- the run --------------------------------------------------------------------
def prepare(ckptfs, s3, work):
    d = os.environ.get("S3B_DIR", "/var/tmp/ckptfs-s3bench")
    n, mib = int(os.environ.get("S3B_SHARDS", "16")), int(os.environ.get("S3B_SHARD_MIB", "32"))
    src = os.path.join(d, f"src-{mib}x{n}")
    if not os.path.exists(os.path.join(src, ".done")):
        log(f"making the model: {n} shards of {mib} MiB in {src}")
        shutil.rmtree(src, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(HERE, "mount_gen.py"), src, str(mib), str(mib), str(n - 1)],
                       check=True)
        open(os.path.join(src, ".done"), "w").close()
    shards = sorted(x for x in os.listdir(src) if x.endswith(".safetensors"))
    sizes = {x: os.path.getsize(os.path.join(src, x)) for x in os.listdir(src) if not x.startswith(".")}
    refp = os.path.join(src, ".ref.json")
    if not os.path.exists(refp):
        log("hashing the originals (the reference)")
        with open(refp + ".tmp", "w") as f:
            json.dump(reference(src, shards), f)
        os.rename(refp + ".tmp", refp)
    with open(refp) as f:
        ref = json.load(f)
    log("uploading the originals (boto3) and packing to s3://packed/model (ckptfs pack)")
    c = s3.client()
    c.create_bucket(Bucket="originals")
    for k in sorted(sizes):
        c.upload_file(os.path.join(src, k), "originals", k)
    stage = os.path.join(work, "stage")
    t0 = time.perf_counter()
    r = subprocess.run([ckptfs, "pack", src, s3.url("model")], env=s3.env(CKPTFS_STAGE_DIR=stage),
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"ckptfs pack: exit {r.returncode}: {r.stderr[-2000:]}")
    pack_s = time.perf_counter() - t0
    objs = c.list_objects_v2(Bucket="packed", Prefix="model/").get("Contents", [])
    packed = sum(o["Size"] for o in objs)
    return src, shards, sizes, ref, packed, pack_s


def fmt_table(rows, orig, packed):
    out = ["| link | pattern | N | ckptfs s | s3fs s | plain s | s3fs / ckptfs | plain / ckptfs | "
           "ckptfs fetched / packed | wire bytes / packed: ckptfs, s3fs, plain |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for (link, pat, n), r in rows.items():
        def sec(m):
            return f"{r[m]['seconds']:.2f}" if m in r else "-"

        def ratio(m):
            return f"{r[m]['seconds'] / r['ckptfs']['seconds']:.2f}x" if m in r and "ckptfs" in r else "-"
        fetched = f"{r['ckptfs']['fetched'] / packed:.3f}" if "ckptfs" in r else "-"
        wire = ", ".join(f"{r[m]['rx'] / packed:.2f}" if m in r else "-" for m in ("ckptfs", "s3fs", "plain"))
        out.append(f"| {link} | {pat} | {n} | {sec('ckptfs')} | {sec('s3fs')} | {sec('plain')} | "
                   f"{ratio('s3fs')} | {ratio('plain')} | {fetched} | {wire} |")
    return "\n".join(out)


def main():
    if len(sys.argv) < 2:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    ckptfs = sys.argv[1]
    if os.path.isdir(ckptfs):
        ckptfs = os.path.join(ckptfs, "fs", "cli", "ckptfs")
    ckptfs = os.path.realpath(ckptfs)
    out_md = sys.argv[2] if len(sys.argv) > 2 else None   # else the table goes to stdout
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("s3_bench: needs root and /dev/fuse", file=sys.stderr)
        return 2
    for tool in ("s3fs", "tc", "ip", "fusermount3"):
        if not shutil.which(tool):
            print(f"s3_bench: {tool} not found (./dev deps installs it)", file=sys.stderr)
            return 2
    links = env_list("S3B_LINKS", "veth,10gbit,2gbit,500mbit")
    readers = [int(x) for x in env_list("S3B_READERS", "1,4,8")]
    patterns = env_list("S3B_PATTERNS", "whole,slice")
    methods = env_list("S3B_METHODS", "ckptfs,s3fs,plain")
    import safetensors  # noqa: F401  (imported once, before the readers fork)
    import torch  # noqa: F401
    import xxhash  # noqa: F401
    load0 = open("/proc/loadavg").read().split()[:3]
    t_start = time.time()
    work = tempfile.mkdtemp(prefix="ckptfs-s3bench-", dir="/var/tmp")
    CLEANUP.append(lambda: shutil.rmtree(work, ignore_errors=True))
    link = Link()
    old_tmp = tempfile.tempdir
    tempfile.tempdir = "/dev/shm"           # the server's data: in memory, never dropped
    s3 = SeaweedS3(bucket="packed", ip=link.ip, netns=link.ns)
    tempfile.tempdir = old_tmp
    CLEANUP.append(s3.close)
    s3.start()
    src, shards, sizes, ref, packed, pack_s = prepare(ckptfs, s3, work)
    orig = sum(sizes.values())
    log(f"model: {len(shards)} shards, {orig} bytes; packed {packed} bytes ({packed / orig:.3f}x); "
        f"pack + upload {pack_s:.1f} s")
    b = Bench(ckptfs, s3, link, work, shards, sizes, ref)
    rows = {}
    for ln in links:
        link.set_rate(None if ln == "veth" else ln)
        for pat in patterns:
            for n in readers:
                r = rows.setdefault((ln, pat, n), {})
                for m in methods:
                    r[m] = b.case(m, pat, n)
                    log(f"{ln} {pat} N={n} {m}: {r[m]['seconds']:.2f} s, wire {r[m]['rx'] / 1e6:.0f} MB"
                        + (f", fetched {r[m]['fetched'] / packed:.3f}x packed" if m == "ckptfs" else ""))
    load1 = open("/proc/loadavg").read().split()[:3]
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    head = (f"s3_bench {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t_start))}, {os.cpu_count()} CPUs "
            f"({cpu}), load average {' '.join(load0)} at start, {' '.join(load1)} at end, "
            f"{(time.time() - t_start) / 60:.1f} min\n"
            f"model: {len(shards)} BF16 safetensors shards, {orig:,} bytes; packed {packed:,} bytes "
            f"({packed / orig:.3f}x); seconds for the whole model read once by N processes, cold; "
            f"ratios > 1: ckptfs faster; wire bytes: veth rx of the node, HTTP and TCP/IP included\n")
    text = head + "\n" + fmt_table(rows, orig, packed) + "\n"
    if not out_md:
        sys.stdout.write(text)
        return 0
    # OUT.md (and its .json) written whole under another name, then renamed,
    # and the table not printed as well: stdout redirected (or tee'd) to the
    # same path writes into the old file, never into the table (the lead found
    # the last two rows twice in an OUT.md)
    write_whole(out_md, text)
    write_whole(out_md + ".json", json.dumps({"orig": orig, "packed": packed, "load": [load0, load1],
                                              "rows": {"|".join(map(str, k)): v for k, v in rows.items()}},
                                             indent=1))
    log(f"table in {out_md} (and {out_md}.json)")
    return 0


def write_whole(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def cleanup():
    while CLEANUP:
        try:
            CLEANUP.pop()()
        except Exception as e:  # keep cleaning
            print(f"s3_bench: cleanup: {e}", file=sys.stderr)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    try:
        rc = main()
    finally:
        cleanup()
    sys.exit(rc)
