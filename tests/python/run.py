#!/usr/bin/env python3
"""run.py --ckptfs PATH [--tests FILE] [pytest args...] — run the Python
loader tests (this folder), or the test file FILE (which needs no mount of
its own: the serving test, gpu/python/test_ckptfs_gpu_hf.py).

Exits 77 (skipped) without root, /dev/fuse, fusermount3 (this folder's tests
only) or the Python packages the tests need, unless CKPTFS_REQUIRE_PYTHON_TESTS=1 makes a missing
package a failure (CI sets it where the packages are installed)."""
import faulthandler
import importlib.util
import os
import shutil
import sys
import threading
import time

SKIP = 77


def skip(why):
    strict = os.environ.get("CKPTFS_REQUIRE_PYTHON_TESTS") == "1"
    print(("FAIL: " if strict else "SKIP: ") + why)
    sys.exit(1 if strict else SKIP)


def descendants(root):
    """PIDs of root's descendants (from /proc/*/stat's parent field)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def dump_stacks(out):
    """What every thread of this run waits on, to the file out: this
    process's Python stacks, then each descendant's (daemons, pool workers)
    kernel stack per thread."""
    faulthandler.dump_traceback(file=out, all_threads=True)
    for pid in descendants(os.getpid()):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
            print("-- pid %d: %s" % (pid, cmd), file=out)
            for tid in sorted(os.listdir("/proc/%d/task" % pid), key=int):
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                try:
                    with open("/proc/%d/task/%s/stack" % (pid, tid)) as f:
                        stack = " <- ".join(l.split()[1].split("+")[0] for l in f if len(l.split()) > 1)
                except OSError:
                    stack = "?"
                print("   tid %s %s %s" % (tid, state, stack), file=out)
        except OSError:
            continue
    out.flush()


def start_watchdog(after):
    """A run still going after `after` seconds (ctest kills it at 300, with no
    word of where it was) prints where it waits, once, and goes on."""
    if after <= 0:
        return
    out = os.fdopen(os.dup(1), "w")  # pytest captures fd 1 while a test runs

    def watch():
        time.sleep(after)
        print("\n== run.py: still running after %.0f s; where every thread waits:" % after, file=out, flush=True)
        dump_stacks(out)
    threading.Thread(target=watch, daemon=True).start()


def main(argv):
    if len(argv) < 2 or argv[0] != "--ckptfs":
        print("usage: run.py --ckptfs PATH [pytest args...]", file=sys.stderr)
        return 2
    os.environ["CKPTFS"] = os.path.abspath(argv[1])
    tests, rest, needs = os.path.dirname(os.path.abspath(__file__)), argv[2:], ["pytest", "numpy", "torch", "safetensors"]
    if rest[:1] == ["--tests"] and len(rest) >= 2:
        tests, rest, needs = rest[1], rest[2:], needs + ["transformers"]
    elif os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        print("SKIP: needs root, /dev/fuse and fusermount3")
        return SKIP
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        skip("python packages missing: " + " ".join(missing))
    start_watchdog(float(os.environ.get("CKPTFS_PY_WATCHDOG_S", "200")))
    import pytest
    return pytest.main(["-q", "-p", "no:cacheprovider", "--durations=0", tests] + rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
