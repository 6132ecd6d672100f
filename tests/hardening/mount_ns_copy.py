#!/usr/bin/env python3
"""mount_ns_copy.py — a mount's daemon and copies of the mount in other
mount namespaces (docs/ci.md).  A process started in a new mount namespace
while a ckptfs mount is up holds a copy of it, and the daemon serves that
copy after `fusermount3 -u` here returns, until the process ends: twice a
test's daemon did not exit within 15 s of its unmount while a benchmark's
server ran under `ip netns exec`, which makes such a namespace.
  1. the hazard, with `unshare -m --propagation slave` (what `ip netns exec`
     does): after the unmount the daemon still runs, and the Python Mount's
     overstay report (tests/python/conftest.py) names the holder; once the
     holder is killed the daemon exits 0;
  2. the S3 tests' way into a network namespace (s3fixture.netns_prefix,
     used by the benchmark's server) makes no copy: the same process started
     through it, in a network namespace of its own, keeps the daemon from
     nothing (exit 0 within the hang guard's 60 s after the unmount).
Needs root, /dev/fuse, unshare and nsenter (util-linux); skips (77) without."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "s3")]
import conftest  # noqa: E402
from s3fixture import netns_prefix  # noqa: E402

CKPTFS = os.environ["CKPTFS"]
FAILS = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def holder(cmd):
    """cmd (a command prefix) running `sleep`, until killed; waits until it
    has its namespace (the prefix has exec'd sleep)."""
    p = subprocess.Popen(cmd + ["sleep", "600"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/comm" % p.pid) as f:
                if f.read().strip() == "sleep":
                    return p
        except OSError:
            break
        time.sleep(0.02)
    p.kill()
    raise RuntimeError("%s did not start sleep" % cmd)


def main():
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not all(map(shutil.which, ("unshare", "nsenter"))):
        print("SKIP: needs root, /dev/fuse, unshare and nsenter")
        return 77
    t = tempfile.mkdtemp(prefix="ckptfs-nscopy.")
    procs = []
    try:
        os.makedirs(t + "/src")
        with open(t + "/src/a.bin", "wb") as f:
            f.write(os.urandom(300000))
        subprocess.run([CKPTFS, "pack", t + "/src", t + "/packed"], check=True, capture_output=True)

        # 1. a copy in a slave mount namespace pins the mount
        m = conftest.Mount(CKPTFS, t + "/packed", t + "/m1")
        m.exit_timeout = 2   # expected to overstay: the report is the point
        m.start()
        p = holder(["unshare", "-m", "--propagation", "slave"])
        procs.append(p)
        rc = m.stop()
        check(rc == -9 and "held by pid %d " % p.pid in m.hang,
              "1: a copy in another mount namespace keeps the daemon after fusermount3 -u, and the report names "
              "its holder (rc %s): %s" % (rc, m.hang[-300:]))

        m = conftest.Mount(CKPTFS, t + "/packed", t + "/m2")
        m.start()
        p2 = holder(["unshare", "-m", "--propagation", "slave"])
        procs.append(p2)
        subprocess.run(["fusermount3", "-u", m.path], check=True)
        time.sleep(0.5)  # not synchronisation: the daemon must still be there after any delay
        check(m.proc.poll() is None, "1: ... still serving the copy after the unmount here")
        p2.kill()
        p2.wait()
        rc = m.stop()
        check(rc == 0, "1: ... and once the holder is gone the daemon exits 0 (rc %s)%s" % (rc, m.hang))

        # 2. netns_prefix: a network namespace only
        ns = t + "/netns"
        open(ns, "w").close()
        subprocess.run(["unshare", "--net=" + ns, "true"], check=True)
        m = conftest.Mount(CKPTFS, t + "/packed", t + "/m3")
        m.start()
        p3 = holder(netns_prefix(ns))
        procs.append(p3)
        same_mnt = os.readlink("/proc/%d/ns/mnt" % p3.pid) == os.readlink("/proc/self/ns/mnt")
        other_net = os.readlink("/proc/%d/ns/net" % p3.pid) != os.readlink("/proc/self/ns/net")
        check(same_mnt and other_net, "2: netns_prefix runs in another network namespace and our mount namespace")
        rc = m.stop()
        check(rc == 0, "2: ... and the daemon exits 0 after fusermount3 -u while it runs (rc %s)%s" % (rc, m.hang))
        subprocess.run(["umount", ns])
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for d in ("m1", "m2", "m3"):
            if conftest.is_mounted(os.path.join(t, d)):
                subprocess.call(["umount", "-l", os.path.join(t, d)])
        if os.path.ismount(t + "/netns"):
            subprocess.call(["umount", t + "/netns"])
        shutil.rmtree(t, ignore_errors=True)
    print("mount_ns_copy: %s" % ("%d failures" % len(FAILS) if FAILS else "PASS"))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
