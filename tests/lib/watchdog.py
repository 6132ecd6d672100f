#!/usr/bin/env python3
"""watchdog.py [--name NAME] --timeout S [--ctest-timeout S] -- CMD [ARGS...]

Runs one ctest that mounts (tests/CMakeLists.txt: ckptfs_watched_test) and
makes a hang say where it is.  ctest's own TIMEOUT kills the test tree and
prints nothing; this fires S seconds in (below ctest's limit) and prints,
into the test's output:
  - every process of the test (found by the CKPTFS_WATCHDOG token in its
    environment, which detached daemons keep too, and by parentage): state,
    CPU seconds, command line, and each thread's kernel stack
    (/proc/PID/task/TID/stack), threads with the same stack grouped;
  - the Python stacks of its Python processes (py-spy dump, or without
    py-spy, faulthandler via SIGUSR1 for those that called python_hook());
  - each FUSE mount of the test with its connection's `waiting` count
    (/sys/fs/fuse/connections/N, fusectl mounted if it is not);
  - the last lines of the logs under its temporary directories;
then aborts those connections, detaches the mounts (fusermount3 -uz), kills
the test's processes (daemons included) and exits 1.

A test that ends by itself keeps its exit status (77: skipped), unless it
left a mount of its own behind: that one is unmounted and the test fails.
The test's TMPDIR is a fresh directory, removed afterwards.
"""
import faulthandler
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TOKEN_VAR, DIR_VAR = "CKPTFS_WATCHDOG", "CKPTFS_WATCHDOG_DIR"


def python_hook():
    """In a Python process of a watched test: SIGUSR1 appends all threads'
    stacks to the watchdog's file (its fallback when py-spy is missing).
    Forked children inherit it."""
    d = os.environ.get(DIR_VAR)
    if d and os.path.isdir(d) and hasattr(faulthandler, "register"):
        global _hook_file
        _hook_file = open(os.path.join(d, "py-stacks"), "a")
        faulthandler.register(signal.SIGUSR1, file=_hook_file, all_threads=True)


def say(*a):
    print(*a, flush=True)


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return b"" if "b" in mode else ""


def stat_fields(pid, tid=None):
    """(state, ppid, cpu seconds) from /proc/PID[/task/TID]/stat, or None."""
    s = read("/proc/%d/task/%d/stat" % (pid, tid) if tid else "/proc/%d/stat" % pid)
    if ")" not in s:
        return None
    f = s.rsplit(")", 1)[1].split()
    return f[0], int(f[1]), (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def alive(pid):
    st = stat_fields(pid)
    return bool(st) and st[0] != "Z"


def tasks(pid):
    try:
        return sorted(int(t) for t in os.listdir("/proc/%d/task" % pid))
    except OSError:
        return []


def cmdline(pid):
    return [a.decode(errors="replace") for a in read("/proc/%d/cmdline" % pid, "rb").split(b"\0")[:-1]]


def command(pid, n=300):
    """The command line of pid, on one line, at most n characters."""
    return " ".join(cmdline(pid)).replace("\n", "\\n")[:n]


def pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def test_procs(token, root):
    """The test's processes: those with our token in their environment and
    the descendants of root (the test command)."""
    me, mark, parent, out = os.getpid(), ("%s=%s" % (TOKEN_VAR, token)).encode(), {}, set()
    for p in pids():
        st = stat_fields(p)
        if st and p != me:
            parent[p] = st[1]
            if mark in read("/proc/%d/environ" % p, "rb").split(b"\0"):
                out.add(p)
    todo = [root]
    while todo:
        q = todo.pop()
        kids = [c for c, pp in parent.items() if pp == q and c not in out]
        out.update(kids)
        todo += kids
    if root in parent:
        out.add(root)
    return sorted(out)


def unescape(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def fuse_mounts():
    """{mount point: (source, "major:minor")} of the FUSE mounts now."""
    out = {}
    for line in read("/proc/self/mountinfo").splitlines():
        a, b = line.split(" - ", 1)
        a, b = a.split(), b.split()
        if b[0].startswith("fuse") and b[0] != "fusectl":
            out[unescape(a[4])] = (unescape(b[1]), a[2])
    return out


def daemon_mount_points(procs):
    """Mount points named by `ckptfs mount ... PACKED MNT` among procs."""
    out = set()
    for p in procs:
        a = cmdline(p)
        if "mount" in a[1:3] and len(a) >= 4 and os.path.isabs(a[-1]) and "ckptfs" in os.path.basename(a[0]):
            out.add(os.path.normpath(a[-1]))
    return out


def fusectl():
    """/sys/fs/fuse/connections, mounted (as root) if it is not."""
    d = "/sys/fs/fuse/connections"
    if os.path.isdir(d) and not any(l.split()[2] == "fusectl" for l in read("/proc/mounts").splitlines()):
        subprocess.call(["mount", "-t", "fusectl", "fusectl", d], stderr=subprocess.DEVNULL)
    return d


def conn_dir(majmin):
    ma, mi = (int(x) for x in majmin.split(":"))
    return os.path.join(fusectl(), str(ma << 20 | mi))


class Test:
    def __init__(self, name, cmd):
        self.name, self.token = name, "%d-%d" % (os.getpid(), time.time_ns())
        self.tmp = tempfile.mkdtemp(prefix="ckptfs-wd.")
        os.chmod(self.tmp, 0o711)  # tests that serve a mount to another user (uid=nobody) pass through
        self.dir = os.path.join(self.tmp, ".watchdog")
        os.mkdir(self.dir)
        env = dict(os.environ, TMPDIR=self.tmp, **{TOKEN_VAR: self.token, DIR_VAR: self.dir})
        self.before = set(fuse_mounts())
        self.seen = set()          # mount points its daemons were started with
        self.proc = subprocess.Popen(cmd, env=env, start_new_session=True)

    def procs(self):
        p = test_procs(self.token, self.proc.pid)
        self.seen |= daemon_mount_points(p)
        return p

    def mounts(self, procs):
        """The test's FUSE mounts: under its TMPDIR, or named by its daemons."""
        self.seen |= daemon_mount_points(procs)
        return {m: v for m, v in fuse_mounts().items() if m not in self.before and
                (m in self.seen or m.startswith(self.tmp + "/"))}

    def dump(self, procs, mounts):
        say("-- load average %s" % read("/proc/loadavg").strip())
        say("-- processes of the test (%d), each thread's kernel stack:" % len(procs))
        for p in procs:
            st = stat_fields(p)
            if not st:
                continue
            say("pid %d ppid %d %s cpu %.2f s: %s" % (p, st[1], st[0], st[2], command(p)))
            groups = {}
            for t in tasks(p):
                ts = stat_fields(p, t)
                frames = [l.split()[1].split("+")[0] for l in read("/proc/%d/task/%d/stack" % (p, t)).splitlines() if len(l.split()) > 1]
                key = (ts[0] if ts else "?", " <- ".join(frames) or read("/proc/%d/task/%d/wchan" % (p, t)) or "-")
                groups.setdefault(key, []).append(t)
            for (state, stack), tids in groups.items():
                say("   %d thread%s %s (%s): %s" % (len(tids), "s" if len(tids) > 1 else "", state,
                                                  ",".join(map(str, tids[:8])) + ("..." if len(tids) > 8 else ""), stack))
        self.python_stacks(procs)
        say("-- FUSE mounts of the test (%d):" % len(mounts))
        for m, (src, dev) in sorted(mounts.items()):
            c = conn_dir(dev)
            say("%s (%s, connection %s): waiting %s, max_background %s, congestion_threshold %s" % (
                m, src, os.path.basename(c), read(c + "/waiting").strip() or "?",
                read(c + "/max_background").strip() or "?", read(c + "/congestion_threshold").strip() or "?"))
        self.logs()

    def python_stacks(self, procs):
        pys = [p for p in procs if os.path.basename(os.path.realpath("/proc/%d/exe" % p)).startswith("python")]
        spy = shutil.which("py-spy") if not os.environ.get("CKPTFS_WATCHDOG_NO_PYSPY") else None
        say("-- Python stacks of %d processes (%s):" % (len(pys), "py-spy dump" if spy else "faulthandler, SIGUSR1"))
        stacks, deadline = os.path.join(self.dir, "py-stacks"), time.monotonic() + 20
        for p in pys:
            if time.monotonic() > deadline:
                say("(out of time for the rest)")
                break
            say("- pid %d: %s" % (p, command(p, 200)))
            if spy:
                r = subprocess.run([spy, "dump", "--nonblocking", "--pid", str(p)], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=10, check=False)
                say(r.stdout.decode(errors="replace").rstrip())
                continue
            caught = re.search(r"^SigCgt:\s*([0-9a-f]+)", read("/proc/%d/status" % p), re.M)
            if not caught or not int(caught.group(1), 16) >> (signal.SIGUSR1 - 1) & 1:
                say("  (no SIGUSR1 handler: it did not call watchdog.python_hook())")
                continue
            at = os.path.getsize(stacks) if os.path.exists(stacks) else 0
            os.kill(p, signal.SIGUSR1)
            time.sleep(0.5)
            with open(stacks) as f:
                f.seek(at)
                say(f.read().rstrip() or "  (nothing written: in a system call a signal waits for its end, e.g. a FUSE request\x27s)")

    def logs(self):
        """The last lines of the logs the test keeps in its TMPDIR.  Never
        looks into a mount point (a hung one would hang this too): the walk
        goes by the type readdir gives, without a stat."""
        skip = {unescape(l.split()[4]) for l in read("/proc/self/mountinfo").splitlines()}
        todo = [self.tmp]
        while todo:
            d = todo.pop()
            try:
                entries = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if e.path not in skip:
                        todo.append(e.path)
                elif e.name.endswith(".log") or e.name.startswith("log.") or e.name == "log":
                    lines = read(e.path, "rb").decode(errors="replace").splitlines()
                    say("-- %s (last %d of %d lines):" % (e.path, min(20, len(lines)), len(lines)))
                    for l in lines[-20:]:
                        say("   " + l[:400])

    def unmount(self, mounts):
        for m, (src, dev) in sorted(mounts.items()):
            try:
                with open(conn_dir(dev) + "/abort", "w") as f:
                    f.write("1")
            except OSError:
                pass
            if subprocess.call(["fusermount3", "-uz", m], stderr=subprocess.DEVNULL) != 0:
                subprocess.call(["umount", "-l", m], stderr=subprocess.DEVNULL)
            say("watchdog: %s: connection aborted, detached (fusermount3 -uz)%s" % (
                m, "" if m not in fuse_mounts() else "; STILL MOUNTED"))

    def kill(self, procs):
        """SIGTERM (and SIGCONT, for a stopped one), then SIGKILL."""
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 3)):
            procs = [p for p in procs if alive(p)]
            for p in procs:
                for s in (sig, signal.SIGCONT):
                    try:
                        os.kill(p, s)
                    except OSError:
                        pass
            end = time.monotonic() + wait
            while procs and time.monotonic() < end and any(alive(p) for p in procs):
                self.proc.poll()   # reap the test command
                time.sleep(0.1)
        self.proc.poll()
        left = [p for p in procs if alive(p)]
        if left:
            say("watchdog: still there after SIGKILL: %s" % ", ".join("%d (%s)" % (p, stat_fields(p)[0]) for p in left))

    def finish(self):
        if not any(True for _ in fuse_mounts() if _.startswith(self.tmp + "/")):
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            say("watchdog: %s kept: a mount is still below it" % self.tmp)


def main(argv):
    name, timeout, limit = "test", None, None
    while argv and argv[0] != "--":
        opt, val, argv = argv[0], argv[1], argv[2:]
        if opt == "--name":
            name = val
        elif opt == "--timeout":
            timeout = float(val)
        elif opt == "--ctest-timeout":
            limit = float(val)
    if not argv[1:] or timeout is None:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    t = Test(name, argv[1:])
    def forward(sig, _):
        try:
            os.killpg(t.proc.pid, sig)
        except OSError:
            pass
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    end = time.monotonic() + timeout
    while True:
        try:
            rc = t.proc.wait(timeout=min(2.0, max(0.01, end - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            t.procs()              # note the mount points its daemons serve
            if time.monotonic() >= end:
                rc = None
                break
    procs = t.procs()
    mounts = t.mounts(procs)
    if rc is None:
        say("\n== watchdog: %s still running after %.0f s%s; what it waits on, then it is unmounted and killed:" % (
            name, timeout, " (ctest kills it at %.0f s)" % limit if limit else ""))
        t.dump(procs, mounts)
        t.unmount(mounts)
        t.kill(procs)
        say("== watchdog: %s FAILED: timed out after %.0f s (dump above)" % (name, timeout))
        t.finish()
        return 1
    if mounts:
        say("== watchdog: %s exited %d but left mounted: %s; unmounting" % (name, rc, " ".join(sorted(mounts))))
        t.dump(procs, mounts)
        t.unmount(mounts)
        rc = rc or 1
    # daemons unmounted just now exit by themselves; under a sanitizer their
    # leak check at exit takes a while, and its report must not be cut off
    end = time.monotonic() + (60 if os.environ.get("CKPTFS_SANITIZER_BUILD") else 10)
    left = [p for p in procs if alive(p)]
    while left and time.monotonic() < end:
        time.sleep(0.2)
        left = [p for p in left if alive(p)]
    if left:
        left = [p for p in t.procs() if alive(p)]
        if left:
            say("watchdog: %s left processes behind; killing them:" % name)
            for p in left:
                say("   pid %d: %s" % (p, command(p, 200)))
            t.kill(left)
    t.finish()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
