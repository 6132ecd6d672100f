"""What the S3 tests share besides the server (s3fixture.py): the pass/fail
record (check, FAILS), file digests, Mount, one `ckptfs mount -f` of an
s3:// URL, and mount_test, the main() of a test that mounts.  The tests run as `test_s3_X.py BINARY`: Mount runs
sys.argv[1] unless given another binary."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

FAILS = []
MB = 1 << 20


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(MB), b""):
            h.update(b)
    return h.hexdigest()


def tree(root):
    """{path relative to root: path} of every file below root."""
    return {os.path.relpath(os.path.join(d, n), root): os.path.join(d, n)
            for d, _, fs in os.walk(root) for n in fs}


def fetch_note(st):
    """The daemon's counters that tell why packed bytes were fetched more than
    once, for a failed fetched-once check: chunks decoded more than once show
    as decoded_bytes above the files' sizes and cache_misses above
    cache_served_out (a chunk the kernel asked for again after it had been
    served whole, its window gone: decoded again from a window of its own)."""
    keys = ("decoded_bytes", "cache_misses", "cache_served_out", "cache_bytes", "cache_evictions",
            "direct_loads", "direct_replaced", "direct_dropped", "direct_failures", "s3_range_gets",
            "s3_retries", "s3_read_errors", "s3_bytes_in")
    return " [" + ", ".join(f"{k} {st[k]}" for k in keys if k in st) + "]"


class Mount:
    """ckptfs mount -f of url at mnt with -o log=MNT.log,OPTS (stderr in
    MNT.err); stopped with fusermount3 -u, or killed and detached lazily
    when it does not exit within 30 s."""

    def __init__(self, url, mnt, env, opts="", binary=None):
        self.mnt, self.log = mnt, mnt + ".log"
        os.makedirs(mnt, exist_ok=True)
        o = "log=" + self.log + (("," + opts) if opts else "")
        exe = os.path.abspath(binary or sys.argv[1])
        # SIGTERM to the daemon if this test dies (a ctest timeout): it unmounts
        self.p = subprocess.Popen(["setpriv", "--pdeathsig", "TERM", "--", exe, "mount", "-f", "-o", o, url, mnt],
                                  env=env, stdout=subprocess.DEVNULL, stderr=open(mnt + ".err", "wb"))
        deadline = time.time() + 60
        while not self.mounted() and self.p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        if not self.mounted():
            self.close()
            raise RuntimeError("not mounted: " + open(mnt + ".err", errors="replace").read())

    def mounted(self):
        with open("/proc/mounts") as f:
            return any(ln.split()[1] == self.mnt for ln in f)

    def stats(self):
        return json.loads(os.getxattr(self.mnt, "user.ckptfs.stats"))

    def rss_peak_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for ln in f:
                if ln.startswith("VmHWM:"):
                    return int(ln.split()[1])
        return -1

    def close(self):
        if self.mounted():
            subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        if self.mounted():  # a killed daemon's mount
            subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def server_test(prefix, *runs):
    """main() of a test that needs a server and no mount: each run(s3, tmp)
    in turn with a SeaweedFS server of its own and a private temporary
    directory, removed on every way out.  1 if a check failed, else 0."""
    from s3fixture import SeaweedS3
    tmp = tempfile.mkdtemp(prefix=prefix)
    os.chmod(tmp, 0o700)
    try:
        with SeaweedS3() as s3:
            for run in runs:
                run(s3, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(FAILS)} failed: " + "; ".join(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


def pack_and_upload(ckptfs, s3, tmp, make_model, prefix):
    """make_model(TMP/src), `ckptfs pack` it to TMP/packed, uploaded under
    prefix with boto3: (src, packed, env, url)."""
    src, packed = os.path.join(tmp, "src"), os.path.join(tmp, "packed")
    make_model(src)
    subprocess.run([ckptfs, "pack", src, packed], check=True, capture_output=True)
    s3.upload_dir(packed, prefix)
    return src, packed, s3.env(), s3.url(prefix)


def mount_test(prefix, run, cleanup=None):
    """main() of a test that mounts: 77 (skipped) without root or /dev/fuse;
    else run(s3, tmp, mounts) with a SeaweedFS server of its own, a private
    temporary directory and a list for its Mounts, which are stopped, and the
    directory removed, on every way out (cleanup() too, if given).  Returns
    what run returns if not None, else 1 if a check failed, 0 if none did."""
    from s3fixture import SeaweedS3
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("SKIP: needs root and /dev/fuse")
        return 77
    tmp = tempfile.mkdtemp(prefix=prefix)
    os.chmod(tmp, 0o700)
    mounts = []
    try:
        with SeaweedS3() as s3:
            rc = run(s3, tmp, mounts)
    finally:
        for m in mounts:
            m.close()
        if cleanup:
            cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    if rc is not None:
        return rc
    print(f"{len(FAILS)} failed: " + "; ".join(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0
