#!/usr/bin/env python3
"""interrupted_repack.py — `ckptfs repack` killed at every durable step and
with SIGKILL at random moments (fs/cli/repack.c's invariants): nothing may
be lost, and a rerun must finish.

A model (tests/cli/gen_model.py: every kind of tensor, nested files) is
packed as K15 once.  Step sweep: for every N until a run completes, a fresh
copy of that pack, `repack --format archive` with CKPTFS_FAULT=step:N (the
Nth fsync/rename/unlink ends the process as a kill there would); after it,
`verify` passes and `unpack` gives back every original file bit for bit
(each packed file is the old one or the new one, never neither); then the
same command runs to the end, leaves no temporary file, and every BF16
tensor is archive.  Random kills: SIGKILL after a random delay, 1-3 times
in a row on the same pack, the same checks after each, then a run to the
end, then `repack --format k15` back, which must give K15's exact bytes.
Environment: CKPTFS, PYTHON."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from files import files_under, sha256_file as sha  # noqa: E402

CK = os.environ["CKPTFS"]
T = tempfile.mkdtemp(prefix="ckptfs-rekill.")
SRC, PACKED, WORK, OUT = (os.path.join(T, x) for x in ("src", "packed", "work", "out"))
failures = []


def run(args, env=None, check=True):
    r = subprocess.run([CK] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if check and r.returncode != 0:
        raise RuntimeError(f"{args}: exit {r.returncode}: {r.stderr.decode(errors='replace')[-800:]}")
    return r


def intact(label):
    """verify passes and unpack gives back every original file."""
    r = run(["verify", WORK], check=False)
    if r.returncode != 0:
        failures.append(f"{label}: verify exit {r.returncode}: {r.stderr.decode(errors='replace')[-400:]}")
        return
    shutil.rmtree(OUT, ignore_errors=True)
    run(["unpack", WORK, OUT])
    if files_under(OUT) != files_under(SRC) or any(sha(os.path.join(OUT, f)) != sha(os.path.join(SRC, f))
                                                   for f in files_under(SRC)):
        failures.append(f"{label}: unpack differs from the originals")
    shutil.rmtree(OUT)


def finished(label, fmt):
    """A run to the end: exit 0, no temporaries, no BF16 extent left in another encoding."""
    run(["repack", "--format", fmt, WORK])
    left = [f for f in files_under(WORK) if f.endswith(".tmp")]
    if left:
        failures.append(f"{label}: temporaries left: {left}")
    again = run(["repack", "--format", fmt, WORK]).stdout.decode()
    if not again.startswith("repacked 0 of"):
        failures.append(f"{label}: a second run still converted files: {again.strip()}")
    intact(label + " (finished)")


def main():
    subprocess.run([os.environ.get("PYTHON", sys.executable), os.path.join(HERE, "..", "cli", "gen_model.py"), SRC],
                   check=True)
    run(["pack", "--format", "k15", SRC, PACKED])
    steps = 0
    for n in range(1, 200):
        shutil.rmtree(WORK, ignore_errors=True)
        shutil.copytree(PACKED, WORK)
        env = dict(os.environ, CKPTFS_FAULT=f"step:{n}")
        r = run(["repack", "--format", "archive", WORK], env=env, check=False)
        if r.returncode == 0:
            steps = n - 1
            break
        if r.returncode != 86:
            failures.append(f"step {n}: exit {r.returncode}: {r.stderr.decode(errors='replace')[-400:]}")
            break
        intact(f"step {n}")
        finished(f"step {n}", "archive")
    if steps < 4:
        failures.append(f"only {steps} durable steps: the fault hook is not reached")
    rnd = random.Random(28)
    shutil.rmtree(WORK, ignore_errors=True)
    shutil.copytree(PACKED, WORK)
    t0 = time.monotonic()
    run(["repack", "--format", "archive", WORK])
    full = time.monotonic() - t0
    for k in range(6):
        shutil.rmtree(WORK, ignore_errors=True)
        shutil.copytree(PACKED, WORK)
        for _ in range(rnd.randint(1, 3)):
            p = subprocess.Popen([CK, "repack", "--format", "archive", WORK], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            time.sleep(rnd.uniform(0, full))
            p.send_signal(signal.SIGKILL)
            p.wait()
            intact(f"kill {k}")
        finished(f"kill {k}", "archive")
    # and back: repack to K15 gives the bytes pack writes
    finished("back to k15", "k15")
    for f in files_under(PACKED):
        if f.endswith(".ckpt") and sha(os.path.join(PACKED, f)) != sha(os.path.join(WORK, f)):
            failures.append(f"{f}: repack to k15 differs from pack's k15 file")
    print(f"interrupted_repack: {steps} durable steps swept, 6 random kill series")


try:
    main()
finally:
    shutil.rmtree(T, ignore_errors=True)
for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
