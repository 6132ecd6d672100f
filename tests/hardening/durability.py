#!/usr/bin/env python3
"""durability.py — the order of ckptfs's durable steps, read from strace: a
name (a file, a directory, a rename's target) survives a power loss only
once the directory holding it is fsynced, and a file's bytes once the file
is; a new directory's own name needs its parent fsynced too (POSIX; ext4's
journal happens to commit them together, other file systems need not).

  pack --delete-source: when a source is unlinked, every name on the path of
    its packed file (DST's parents that pack created, DST, its
    subdirectories, the .ckpt) must be durable and the .ckpt's bytes synced;
    pack into a new DST below directories that do not exist yet, a source
    file in a subdirectory, so that pack creates each kind of name.
  unpack: when it exits 0, OUT, every directory and file in it must be
    durable (`unpack P OUT && rm -r P` must not lose a file to a crash).

strace -f -y names each descriptor's path; every path given is absolute.
Environment: CKPTFS."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from checks import check, done  # noqa: E402

CK = os.environ["CKPTFS"]
T = tempfile.mkdtemp(prefix="ckptfs-durable.")


CALL = re.compile(r'^ *(\w+)\((.*)\) += (-?\d+)')
FD = re.compile(r'(-?\d+|AT_FDCWD)<([^>]*)>')
STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


def unescape(s):
    return s.encode("latin-1").decode("unicode_escape")


class Disk:
    """What a power loss would keep: `pending` names whose directory was not
    fsynced since they appeared, `unsynced` files written since their last
    fsync."""

    def __init__(self):
        self.pending, self.unsynced = set(), set()

    def add(self, path):
        self.pending.add(path)

    def moved(self, a, b):
        for p in [p for p in self.pending | self.unsynced if p == a or p.startswith(a + "/")]:
            for s in (self.pending, self.unsynced):
                if p in s:
                    s.discard(p)
                    s.add(b + p[len(a):])
        self.pending.add(b)

    def fsync(self, path):
        self.unsynced.discard(path)
        self.pending -= {p for p in self.pending if os.path.dirname(p) == path}

    def lost(self, path):
        """The parts of path a power loss now could lose."""
        out, p = [], path
        while p not in ("/", ""):
            if p in self.pending:
                out.append("the name " + p)
            p = os.path.dirname(p)
        return out + (["the bytes of " + path] if path in self.unsynced else [])


def path_args(args):
    """Each path argument of a call, made absolute: (dirfd path or None, string)."""
    fds, strs = FD.findall(args), [unescape(s) for s in STR.findall(args)]
    return fds, strs


def join(dirfd, s):
    return os.path.normpath(s if s.startswith("/") else os.path.join(dirfd, s))


def calls_of(trace):
    """strace's lines, a call that another thread's interrupted joined again
    ('<unfinished ...>' and '<... NAME resumed>')."""
    open_calls = {}
    for line in open(trace, encoding="latin-1"):
        pid, _, rest = line.rstrip("\n").partition(" ")
        rest = rest.lstrip()
        if rest.endswith("<unfinished ...>"):
            open_calls[pid] = rest[:-len("<unfinished ...>")].rstrip()
        elif rest.startswith("<... "):
            yield open_calls.pop(pid, "") + rest.split("resumed>", 1)[1]
        else:
            yield rest


def replay(trace, on_unlink=None):
    """Replay strace's log into a Disk; on_unlink(disk, path) at each unlink."""
    d = Disk()
    for line in calls_of(trace):
        m = CALL.match(line)
        if not m or int(m.group(3)) < 0:
            continue
        call, args = m.group(1), m.group(2)
        fds, strs = path_args(args)
        if call == "mkdir":
            d.add(join("/", strs[0]))
        elif call == "mkdirat":
            d.add(join(fds[0][1], strs[0]))
        elif call in ("open", "openat") and "O_CREAT" in args:
            ret = FD.search(line[m.end(2):])
            p = ret.group(2) if ret else join(fds[0][1] if fds else "/", strs[0])
            d.add(p)
            d.unsynced.add(p)
        elif call in ("rename", "renameat", "renameat2"):
            if call == "rename":
                a, b = join("/", strs[0]), join("/", strs[1])
            else:
                a, b = join(fds[0][1], strs[0]), join(fds[1][1], strs[1])
            d.moved(a, b)
        elif call in ("fsync", "fdatasync"):
            d.fsync(fds[0][1])
        elif call in ("pwrite64", "write", "ftruncate", "fallocate") and fds:
            d.unsynced.add(fds[0][1])
        elif call in ("unlink", "unlinkat") and on_unlink:
            p = join("/", strs[0]) if call == "unlink" else join(fds[0][1], strs[0])
            on_unlink(d, p)
    return d


def traced(args, trace):
    calls = "mkdir,mkdirat,open,openat,rename,renameat,renameat2,fsync,fdatasync,unlink,unlinkat,pwrite64,write,ftruncate"
    # LeakSanitizer cannot run under ptrace (it stops with a fatal error, and
    # the sanitizer build's run failed on it): leaks are checked where the
    # same commands run untraced; ASan and UBSan still check these runs
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    return subprocess.run(["strace", "-f", "-y", "-qq", "-s", "4096", "-e", "trace=" + calls, "-o", trace, CK] + args,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def pack_delete_source():
    src, dst = os.path.join(T, "src"), os.path.join(T, "new", "parents", "dst")
    files = {"top.bin": 30000, "sub/a.bin": 20000, "sub/deeper/b.bin": 10000}
    for rel, n in files.items():
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        with open(os.path.join(src, rel), "wb") as f:
            f.write(os.urandom(n))
    trace = os.path.join(T, "pack.trace")
    seen, at_risk = [], []

    def on_unlink(d, p):
        if not p.startswith(src + "/"):
            return
        rel = os.path.relpath(p, src)
        rel = os.path.join(os.path.dirname(rel), os.path.basename(rel)[len(".ckptfs-deleting."):])
        seen.append(rel)
        lost = d.lost(os.path.join(dst, rel + ".ckpt"))
        if lost:
            at_risk.append("%s unlinked while a crash could lose %s" % (rel, ", ".join(lost)))
    r = traced(["pack", "--delete-source", "--jobs", "1", src, dst], trace)
    replay(trace, on_unlink)
    check("pack --delete-source: exits 0 and deletes the 3 sources", r.returncode == 0 and sorted(seen) ==
          sorted(files), r.stderr.strip()[-300:] + " unlinked: %s" % seen)
    check("pack --delete-source: each source is unlinked only once every name on its packed file's path and "
          "its bytes are durable", not at_risk, "; ".join(at_risk))
    return dst


def unpack(dst):
    out = os.path.join(T, "u", "out")
    os.makedirs(os.path.dirname(out))
    trace = os.path.join(T, "unpack.trace")
    r = traced(["unpack", dst, out], trace)
    d = replay(trace)
    lost = []
    for root, dirs, fs in os.walk(out):
        for name in dirs + fs + ([""] if root == out else []):
            lost += d.lost(os.path.normpath(os.path.join(root, name)))
    check("unpack: exits 0", r.returncode == 0, r.stderr.strip()[-300:])
    check("unpack: when it exits, OUT and every name and byte in it are durable", r.returncode == 0 and not lost,
          "; ".join(sorted(set(lost))))


if not shutil.which("strace"):
    print("durability: strace not installed (./dev deps installs it)")
    sys.exit(77)
try:
    unpack(pack_delete_source())
finally:
    shutil.rmtree(T, ignore_errors=True)
sys.exit(done("durability"))
