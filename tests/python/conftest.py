"""Shared fixtures of the Python loader tests: the ckptfs binary ($CKPTFS),
one temporary directory per run (removed at the end), `pack` and `Mount`.

A Mount runs `ckptfs mount -f` as a child process and is always unmounted
(fusermount3 -u, then umount -l) and reaped in teardown, on failure too;
SIGTERM (ctest's timeout) is turned into KeyboardInterrupt so pytest still
runs the finalizers."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest


_MAIN_PID = os.getpid()


def _term(signum, frame):
    if os.getpid() != _MAIN_PID:          # a forked worker: die as usual
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise KeyboardInterrupt("SIGTERM")


signal.signal(signal.SIGTERM, _term)


def is_mounted(mnt):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt and line.split()[2] == "fuse.ckptfs" for line in f)


def _threads_of(pid):
    """Where each thread of a daemon that would not exit is waiting (kernel
    wait channel and stack), for the failure message."""
    out = ["\n--- daemon %d did not exit; its threads:" % pid]
    try:
        tids = sorted(os.listdir("/proc/%d/task" % pid), key=int)
    except OSError as e:
        return "\n--- daemon %d: %s" % (pid, e)
    for t in tids:
        base = "/proc/%d/task/%s/" % (pid, t)
        parts = []
        for name in ("comm", "wchan", "stack"):
            try:
                with open(base + name, errors="replace") as f:
                    parts.append(f.read().strip())
            except OSError:
                pass
        out.append(" | ".join(parts))
    return "\n".join(out)


def _mount_dev(mnt):
    """The device ("major:minor") of the ckptfs mount at mnt, or None."""
    with open("/proc/self/mountinfo") as f:
        devs = [a[2] for a in map(str.split, f) if a[4] == mnt and a[a.index("-") + 1] == "fuse.ckptfs"]
    return devs[-1] if devs else None   # the last one at mnt: just mounted, ours


def _holders(dev):
    """Processes in other mount namespaces that hold a copy of mount dev: it
    outlives its unmount here, and its daemon serves the copy until they
    exit (`ip netns exec`, `unshare -m` started while it was mounted)."""
    own, seen, out = os.readlink("/proc/self/ns/mnt"), set(), []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            ns = os.readlink("/proc/%s/ns/mnt" % p)
            if ns == own or ns in seen:
                continue
            with open("/proc/%s/mountinfo" % p) as f:
                if not any(l.split()[2] == dev for l in f):
                    continue
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        seen.add(ns)
        out.append("pid %s (%s): %s" % (p, ns, cmd[:200]))
    return out


class Mount:
    """`with Mount(binary, dst, mnt, opts) as m:` serves dst at m.path."""

    def __init__(self, binary, dst, mnt, opts=None):
        self.binary, self.dst, self.path, self.opts = binary, dst, os.path.abspath(mnt), opts
        self.proc = None
        self.lazy = False
        self.hang = ""
        self.log = self.path + ".log"
        self.dev = None
        self.exit_timeout = 60   # a hang guard, not a speed check (see stop)

    def start(self):
        os.makedirs(self.path, exist_ok=True)
        cmd = [self.binary, "mount", "-f"] + (["-o", self.opts] if self.opts else []) + [self.dst, self.path]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not is_mounted(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("ckptfs mount failed (rc=%s): %s" % (self.proc.returncode, self.log_text()))
            time.sleep(0.02)
        self.dev = _mount_dev(self.path)
        return self

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        """Unmount and reap the daemon; returns its exit status."""
        if is_mounted(self.path):
            if subprocess.call(["fusermount3", "-u", self.path], stderr=subprocess.DEVNULL) != 0:
                self.lazy = True   # busy (a file still open): detach, then kill
                subprocess.call(["umount", "-l", self.path], stderr=subprocess.DEVNULL)
        if self.proc is None:
            return None
        # A hang guard, not a speed check: a daemon's exit after the unmount
        # once took over 15 s on a 2-core box at load 20 (the old limit),
        # most likely held by a copy of the mount in another mount namespace
        # (a benchmark's server under `ip netns exec`): _holders names them.
        try:
            return self.proc.wait(timeout=self.exit_timeout // 2 if self.lazy else self.exit_timeout)
        except subprocess.TimeoutExpired:
            held = _holders(self.dev) if self.dev else []
            self.hang = _threads_of(self.proc.pid) + "".join(
                "\n--- the mount lives on in another mount namespace, held by " + h for h in held)
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        rc = self.stop()
        if exc[0] is None and rc not in (0, None):
            how = "fusermount3 -u failed (busy), then umount -l" if self.lazy else "fusermount3 -u"
            raise AssertionError("ckptfs mount exited with %s after %s: %s%s" % (rc, how, self.log_text(), self.hang))
        return False


@pytest.fixture(scope="session")
def ckptfs():
    b = os.environ.get("CKPTFS")
    if not b or not os.access(b, os.X_OK):
        pytest.skip("set CKPTFS to the ckptfs binary (run.py --ckptfs PATH does)")
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        pytest.skip("needs root, /dev/fuse and fusermount3")
    return b


@pytest.fixture(scope="session")
def workdir():
    d = tempfile.mkdtemp(prefix="ckptfs-py.")
    yield d
    # Mounts below d are stopped by their own fixtures first; be safe anyway.
    with open("/proc/mounts") as f:
        left = [l.split()[1] for l in f if l.split()[1].startswith(d + "/")]
    for m in left:
        subprocess.call(["fusermount3", "-u", m]) == 0 or subprocess.call(["umount", "-l", m])
    shutil.rmtree(d, ignore_errors=True)


def pack(binary, src, dst, fmt=None):
    cmd = [binary, "pack"] + (["--format", fmt] if fmt else []) + [src, dst]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert r.returncode == 0, "ckptfs pack failed: %s" % r.stdout.decode(errors="replace")[-4000:]
    return dst


def mount_fixture(ckptfs, dst, mnt, opts=None):
    """A generator for yield fixtures: mounted for the fixture's scope."""
    with Mount(ckptfs, dst, mnt, opts) as m:
        yield m
