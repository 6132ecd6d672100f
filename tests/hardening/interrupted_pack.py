#!/usr/bin/env python3
"""interrupted_pack.py — `ckptfs pack --delete-source` killed with SIGKILL at
random moments (issue "Hardening", part 3; fs/pack.c describes resume).

Rounds: restore SRC from a pristine copy, start with no DST, then 1-3 times
start `pack --delete-source SRC DST` and SIGKILL it after a random delay
(uniform over the time a full run takes), and after each kill check that no
original file is lost: each one still exists in SRC with its original bytes,
or DST/<file>.ckpt reads back (every chunk, ckp_read_chunk) equal to the
original.  Then rerun the same command to the end: exit 0, SRC emptied,
`verify` ok, `unpack` equal to the originals (SHA-256).  First, one fixed
case: a packed copy damaged after a plain pack must not let a later
`pack --delete-source` delete its source.
Bounded by KILL_BUDGET_S (default 60 s) and KILLS (default 40).
Environment: CKPTFS, CKPT_CHUNKS, PYTHON."""
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CK = os.environ["CKPTFS"]
CH = os.environ["CKPT_CHUNKS"]
T = tempfile.mkdtemp(prefix="ckptfs-kill.")
PRISTINE = os.path.join(T, "pristine")
SRC = os.path.join(T, "src")
DST = os.path.join(T, "dst")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def files_under(d):
    out = []
    for root, _, fs in os.walk(d):
        out += [os.path.relpath(os.path.join(root, f), d) for f in fs]
    return sorted(out)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def pack_cmd():
    return [CK, "pack", "--delete-source", SRC, DST]


def check_nothing_lost(orig, when):
    for rel, h in orig.items():
        s = os.path.join(SRC, rel)
        if os.path.exists(s):
            if sha(s) != h:
                fail("%s: %s changed in SRC" % (when, rel))
            continue
        p = os.path.join(DST, rel + ".ckpt")
        if not os.path.exists(p):
            fail("%s: %s LOST: gone from SRC and no %s" % (when, rel, p))
            continue
        r = subprocess.run([CH, p, os.path.join(PRISTINE, rel)], stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            fail("%s: %s LOST: deleted from SRC but its packed copy does not read back:\n%s" %
                 (when, rel, r.stdout))
    extra = set(files_under(SRC)) - set(orig) if os.path.isdir(SRC) else set()
    if extra:
        fail("%s: files appeared in SRC: %s" % (when, sorted(extra)))


def finish(orig, when):
    r = subprocess.run(pack_cmd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("%s: rerun exited %d: %s" % (when, r.returncode, r.stderr.strip()[-500:]))
        return
    left = files_under(SRC) if os.path.isdir(SRC) else []
    if left:
        fail("%s: SRC still holds %s after a complete --delete-source run" % (when, left))
    r = subprocess.run([CK, "verify", DST], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("%s: verify after rerun: %s" % (when, r.stderr.strip()))
    out = os.path.join(T, "out")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([CK, "unpack", DST, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("%s: unpack after rerun: %s" % (when, r.stderr.strip()))
        return
    got = {rel: sha(os.path.join(out, rel)) for rel in files_under(out)}
    if got != orig:
        fail("%s: unpacked files differ from the originals: %s" %
             (when, sorted(k for k in set(got) | set(orig) if got.get(k) != orig.get(k))))
    shutil.rmtree(out)
    leftovers = [f for f in files_under(DST) if f.endswith(".tmp")]
    if leftovers:
        fail("%s: temporaries left in DST: %s" % (when, leftovers))


def damaged_resume(orig):
    """A packed copy damaged between a plain pack and a --delete-source rerun
    must not let the rerun delete its source: the copy is packed again."""
    sys.path.insert(0, HERE)
    from ckpt_layout import chunk_bytes, layout
    shutil.rmtree(SRC, ignore_errors=True)
    shutil.rmtree(DST, ignore_errors=True)
    shutil.copytree(PRISTINE, SRC)
    subprocess.check_call([CK, "pack", SRC, DST], stderr=subprocess.DEVNULL)
    rel = "model-00001-of-00012.safetensors"
    p = os.path.join(DST, rel + ".ckpt")
    off, n = chunk_bytes(layout(p)["extents"][1], 2, 1)
    with open(p, "r+b") as f:
        f.seek(off + 5)
        b = f.read(1)
        f.seek(off + 5)
        f.write(bytes([b[0] ^ 1]))
    check_nothing_lost(orig, "damaged copy, before the rerun")
    finish(orig, "--delete-source over a damaged packed copy")
    print("damaged packed copy + pack --delete-source: %s" % ("ok" if not failures else "FAILED"), flush=True)


def main():
    budget = float(os.environ.get("KILL_BUDGET_S", "60"))
    max_kills = int(os.environ.get("KILLS", "40"))
    rnd = random.Random(int(os.environ.get("KILL_SEED", str(int(time.time())))))
    subprocess.check_call([os.environ.get("PYTHON", sys.executable), os.path.join(HERE, "gen_model.py"), PRISTINE, "4"])
    orig = {rel: sha(os.path.join(PRISTINE, rel)) for rel in files_under(PRISTINE)}
    # how long a whole run takes here (median of 3)
    times = []
    for _ in range(3):
        shutil.rmtree(SRC, ignore_errors=True)
        shutil.rmtree(DST, ignore_errors=True)
        shutil.copytree(PRISTINE, SRC)
        t0 = time.time()
        subprocess.check_call(pack_cmd(), stderr=subprocess.DEVNULL)
        times.append(time.time() - t0)
        finish(orig, "reference run")
    full = max(sorted(times)[1], 0.01)
    print("model: %d files, a full pack --delete-source takes %.3fs" % (len(orig), full), flush=True)
    damaged_resume(orig)
    kills = rounds = 0
    scale = full
    outcomes = {}
    t_start = time.time()
    while kills < max_kills and time.time() - t_start < budget:
        rounds += 1
        shutil.rmtree(SRC, ignore_errors=True)
        shutil.rmtree(DST, ignore_errors=True)
        shutil.copytree(PRISTINE, SRC)  # copy2: mtimes kept
        for k in range(rnd.randint(1, 3)):
            delay = rnd.uniform(0, scale)
            p = subprocess.Popen(pack_cmd(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            rc = p.wait()
            # aim the delays at the time a run really takes (resumed runs are shorter)
            scale = scale * 0.7 if rc == 0 else min(scale * 1.1, full)
            kills += rc != 0
            deleted = sum(not os.path.exists(os.path.join(SRC, r)) for r in orig)
            key = "finished" if rc == 0 else "%d/%d deleted" % (deleted, len(orig))
            outcomes[key] = outcomes.get(key, 0) + 1
            check_nothing_lost(orig, "round %d kill %d after %.1f ms (%s)" % (rounds, k + 1, delay * 1e3, key))
        finish(orig, "round %d" % rounds)
    print("%d kills in %d rounds, %.1fs; states at the kill: %s" %
          (kills, rounds, time.time() - t_start, ", ".join("%s: %d" % kv for kv in sorted(outcomes.items()))))
    print("interrupted_pack: %d failures" % len(failures))


try:
    main()
finally:
    shutil.rmtree(T, ignore_errors=True)
sys.exit(1 if failures else 0)
