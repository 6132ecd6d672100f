#!/usr/bin/env python3
"""run.py --ckptfs PATH [pytest args...] — run the Python loader tests.

Exits 77 (skipped) without root, /dev/fuse, fusermount3 or the Python
packages the tests need, unless CKPTFS_REQUIRE_PYTHON_TESTS=1 makes a missing
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
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        print("SKIP: needs root, /dev/fuse and fusermount3")
        return SKIP
    missing = [m for m in ("pytest", "numpy", "torch", "safetensors")
               if importlib.util.find_spec(m) is None]
    if missing:
        skip("python packages missing: " + " ".join(missing))
    import pytest
    here = os.path.dirname(os.path.abspath(__file__))
    return pytest.main(["-q", "-p", "no:cacheprovider", "--durations=0", here] + argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
