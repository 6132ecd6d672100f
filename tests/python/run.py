#!/usr/bin/env python3
"""run.py --ckptfs PATH [--tests FILE] [pytest args...] — run the Python
loader tests (this folder), or the test file FILE (which needs no mount of
its own: the serving test, gpu/python/test_ckptfs_gpu_hf.py).

Exits 77 (skipped) without root, /dev/fuse, fusermount3 (this folder's tests
only) or the Python packages the tests need, unless CKPTFS_REQUIRE_PYTHON_TESTS=1 makes a missing
package a failure (CI sets it where the packages are installed)."""
import importlib.util
import os
import shutil
import sys

SKIP = 77


def skip(why):
    strict = os.environ.get("CKPTFS_REQUIRE_PYTHON_TESTS") == "1"
    print(("FAIL: " if strict else "SKIP: ") + why)
    sys.exit(1 if strict else SKIP)


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
    # ctest runs this under tests/lib/watchdog.py, which prints every
    # process's stacks if it hangs; its fallback without py-spy is this hook
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import watchdog
    watchdog.python_hook()
    import pytest
    return pytest.main(["-q", "-p", "no:cacheprovider", "--durations=0", tests] + rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
