#!/usr/bin/env python3
"""interrupted_pack.py — `ckptfs pack --delete-source` killed at every
durable step and with SIGKILL at random moments (fs/cli/pack.c describes resume).

Step sweep (issue 11): the CKPTFS_FAULT=step:N test hook (fs/format/util.h)
makes the Nth fsync/rename/unlink/rmdir step of a run end the process, as a
kill there would.  For a directory source (with a name of 248 bytes, whose
temporary name is the hashed form) and a single-file source, for every N
until a run completes: a fresh SRC, `pack --delete-source SRC DST` killed at
step N, nothing lost; then every other N the source is moved (the directory
renamed, the file put in another directory) and the same command is run on
it, else the same command as is; it must finish and give back every original
bit for bit.  With STEP_KILLS=2 (ctest interrupted_pack_long, label `big`:
out of the default run, run by .ci/run) the rerun is killed too, at every
STEP_STRIDE-th (default 4th) step of its own, before a third run finishes.

Random kills: restore SRC from a pristine copy, start with no DST, then 1-3 times
start `pack --delete-source SRC DST` and SIGKILL it after a random delay
(uniform over the time a full run takes), and after each kill check that no
original file is lost: each one still exists in SRC with its original bytes,
or DST/<file>.ckpt reads back (every chunk, ckp_read_chunk) equal to the
original.  Then rerun the same command to the end: exit 0, SRC emptied,
`verify` ok, `unpack` equal to the originals (SHA-256).  First, one fixed
case: a packed copy damaged after a plain pack must not let a later
`pack --delete-source` delete its source.
Hugging Face cache (format 1.1 links): the step sweep again on a hub
cache's layout (blobs/ named by hash, a safetensors one among them,
refs/main, snapshots/REV/* relative links into ../../blobs): after a kill
at any step each blob is in SRC or read back from its .ckpt, and each link
is in SRC or listed by DST's durable manifest; the rerun leaves SRC without
a file or a link, and unpack gives back the blobs and the links (targets as
written).
Random kills bounded by KILL_BUDGET_S (default 10 s) and KILLS (default 40).
Environment: CKPTFS, CKPT_CHUNKS, PYTHON."""
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
CH = os.environ["CKPT_CHUNKS"]
T = tempfile.mkdtemp(prefix="ckptfs-kill.")
PRISTINE = os.path.join(T, "pristine")
SRC = os.path.join(T, "src")
DST = os.path.join(T, "dst")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def pack_cmd(src=None):
    return [CK, "pack", "--delete-source", src or SRC, DST]


def check_nothing_lost(orig, when, src=None, pristine=None):
    src, pristine = src or SRC, pristine or PRISTINE
    aside = set()
    for rel, h in orig.items():
        s = os.path.join(src, rel)
        a = os.path.join(os.path.dirname(rel), ".ckptfs-deleting." + os.path.basename(rel))
        if not os.path.exists(s) and os.path.exists(os.path.join(src, a)):
            s = os.path.join(src, a)  # killed while deleting it: under its private name, put back by the rerun
            aside.add(a)
        if os.path.exists(s):
            if sha(s) != h:
                fail("%s: %s changed in SRC" % (when, rel))
            continue
        p = os.path.join(DST, rel + ".ckpt")
        if not os.path.exists(p):
            fail("%s: %s LOST: gone from SRC and no %s" % (when, rel, p))
            continue
        r = subprocess.run([CH, p, os.path.join(pristine, rel)], stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            fail("%s: %s LOST: deleted from SRC but its packed copy does not read back:\n%s" %
                 (when, rel, r.stdout))
    extra = set(files_under(src)) - set(orig) - aside if os.path.isdir(src) else set()
    if extra:
        fail("%s: files appeared in SRC: %s" % (when, sorted(extra)))


def finish(orig, when, src=None):
    src = src or SRC
    r = subprocess.run(pack_cmd(src), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("%s: rerun exited %d: %s" % (when, r.returncode, r.stderr.strip()[-500:]))
        return
    left = files_under(src) if os.path.isdir(src) else []
    if os.path.isfile(src):
        left = [src]
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


FAULT_EXIT = 86  # CKU_FAULT_EXIT


def run_at_step(cmd, n):
    env = dict(os.environ, CKPTFS_FAULT="step:%d" % n)
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


def step_sweep(kind, pristine, orig, kills_per_round):
    """Kill at every step N of a fresh run (kind "dir": SRC is a directory,
    "file": SRC is pristine's one file); move the source on every other N;
    with kills_per_round 2, kill the rerun at each of its steps too."""
    rounds = kills = 0
    # under the sanitizers (sanitize.sh) every third step: a run is ~5x slower
    for n in range(1, 10000, 3 if os.environ.get("CKPTFS_SANITIZER_BUILD") else 1):
        stride = int(os.environ.get("STEP_STRIDE", "4"))
        for m in range(1, 10000, stride) if kills_per_round > 1 else [None]:
            base = os.path.join(T, "sweep")
            shutil.rmtree(base, ignore_errors=True)
            shutil.rmtree(DST, ignore_errors=True)
            shutil.copytree(pristine, os.path.join(base, "a"))  # copy2: mtimes kept
            name = next(iter(orig))
            src = os.path.join(base, "a") if kind == "dir" else os.path.join(base, "a", name)
            r = run_at_step(pack_cmd(src), n)
            if r.returncode == 0:
                return rounds, kills
            if r.returncode != FAULT_EXIT:
                fail("%s step %d: exited %d, not at the step: %s" % (kind, n, r.returncode, r.stderr[-300:]))
                return rounds, kills
            kills += 1
            where = "%s source, killed at step %d" % (kind, n)
            check_nothing_lost(orig, where, os.path.join(base, "a"), pristine)
            if n % 2 == 0 and os.path.exists(src):  # move the source
                moved = os.path.join(base, "b")
                if kind == "dir":
                    os.rename(src, moved)
                    src = moved
                else:
                    os.mkdir(moved)
                    os.rename(src, os.path.join(moved, name))
                    src = os.path.join(moved, name)
                where += ", source moved"
            if m is not None:  # kill the rerun at its step m
                r = run_at_step(pack_cmd(src), m)
                if r.returncode == 0:
                    finish(orig, where + ", rerun finished", src)
                    rounds += 1
                    break
                if r.returncode != FAULT_EXIT:
                    fail("%s, rerun at step %d: exited %d: %s" % (where, m, r.returncode, r.stderr[-300:]))
                    break
                kills += 1
                where += ", rerun killed at step %d" % m
            finish(orig, where, src)
            rounds += 1
            if failures:
                return rounds, kills
    return rounds, kills


def sweeps():
    kills_per_round = int(os.environ.get("STEP_KILLS", "1"))
    sweep_dir = os.path.join(T, "sweep-pristine")
    subprocess.check_call([os.environ.get("PYTHON", sys.executable), os.path.join(HERE, "gen_model.py"), sweep_dir, "1"])
    os.remove(os.path.join(sweep_dir, "model-00003-of-00003.safetensors"))
    os.remove(os.path.join(sweep_dir, "model.safetensors.index.json"))
    with open(os.path.join(sweep_dir, "extra", "x" * 248), "wb") as f:
        f.write(os.urandom(5000))
    orig = {rel: sha(os.path.join(sweep_dir, rel)) for rel in files_under(sweep_dir)}
    t0 = time.time()
    rounds, kills = step_sweep("dir", sweep_dir, orig, kills_per_round)
    if kills < (4 if os.environ.get("CKPTFS_SANITIZER_BUILD") else 10):
        fail("only %d kills at steps: does this ckptfs have the CKPTFS_FAULT hook?" % kills)
    print("step sweep, directory source (%d files): %d kills in %d rounds, %.1fs" %
          (len(orig), kills, rounds, time.time() - t0), flush=True)
    one = os.path.join(T, "sweep-one")
    os.mkdir(one)
    shutil.copy2(os.path.join(sweep_dir, "model-00001-of-00003.safetensors"), one)
    orig1 = {rel: sha(os.path.join(one, rel)) for rel in files_under(one)}
    t0 = time.time()
    rounds, kills = step_sweep("file", one, orig1, kills_per_round)
    print("step sweep, single-file source: %d kills in %d rounds, %.1fs" % (kills, rounds, time.time() - t0),
          flush=True)


def hub_tree(d):
    """{rel: ("link", target) or ("file", sha256)} of everything under d but directories."""
    out = {}
    for root, dirs, fs in os.walk(d):
        for f in fs + [x for x in dirs if os.path.islink(os.path.join(root, x))]:
            p = os.path.join(root, f)
            rel = os.path.relpath(p, d)
            out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else ("file", sha(p))
    return out


def make_hub(d):
    """A hub cache as huggingface_hub lays one out (models--ORG--NAME)."""
    import hashlib
    import json
    import struct
    repo = os.path.join(d, "models--org--tiny")
    rev = "0123456789abcdef0123456789abcdef01234567"
    w = b"".join(struct.pack("<H", 0x3c00 + (i * 7919) % 997) for i in range(20000))
    head = json.dumps({"w": {"dtype": "BF16", "shape": [100, 200], "data_offsets": [0, len(w)]}}).encode()
    head += b" " * (-len(head) % 8)
    files = {"model.safetensors": struct.pack("<Q", len(head)) + head + w, "config.json": b'{"model_type": "x"}\n'}
    for sub in ("blobs", "refs", os.path.join("snapshots", rev)):
        os.makedirs(os.path.join(repo, sub))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(rev)
    for name, data in files.items():
        h = hashlib.sha256(data).hexdigest()
        with open(os.path.join(repo, "blobs", h), "wb") as f:
            f.write(data)
        os.symlink("../../blobs/" + h, os.path.join(repo, "snapshots", rev, name))


def hub_nothing_lost(orig, pristine, src, when):
    man = os.path.join(DST, "ckptfs.manifest")
    links = {}
    if os.path.exists(man):
        import json
        with open(man, "rb") as f:
            doc = json.loads(f.read().split(b"\n", 1)[1])
        links = {e["path"]: e["target"] for e in doc.get("links", [])}
    now = hub_tree(src) if os.path.isdir(src) else {}
    for rel, (kind, v) in orig.items():
        if rel in now:
            if now[rel] != (kind, v):
                fail("%s: %s changed in SRC" % (when, rel))
        elif kind == "link":
            if links.get(rel) != v:
                fail("%s: link %s LOST: gone from SRC and not in a durable manifest" % (when, rel))
        else:
            p = os.path.join(DST, rel + ".ckpt")
            r = subprocess.run([CH, p, os.path.join(pristine, rel)], stdout=subprocess.PIPE, text=True) \
                if os.path.exists(p) else None
            if not r or r.returncode != 0:
                fail("%s: %s LOST: deleted from SRC and no packed copy reads back" % (when, rel))


def hub_sweep():
    pristine = os.path.join(T, "hub-pristine")
    make_hub(pristine)
    orig = hub_tree(pristine)
    kills = 0
    for n in range(1, 10000):
        base = os.path.join(T, "hub")
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(DST, ignore_errors=True)
        shutil.copytree(pristine, base, symlinks=True)
        r = run_at_step(pack_cmd(base), n)
        if r.returncode == 0:
            break
        if r.returncode != FAULT_EXIT:
            fail("hub step %d: exited %d, not at the step: %s" % (n, r.returncode, r.stderr[-300:]))
            return
        kills += 1
        hub_nothing_lost(orig, pristine, base, "hub cache, killed at step %d" % n)
        r = subprocess.run(pack_cmd(base), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        left = hub_tree(base)
        if r.returncode != 0 or left:
            fail("hub cache, killed at step %d: rerun exited %d, SRC still holds %s: %s" %
                 (n, r.returncode, sorted(left), r.stderr[-300:]))
        out = os.path.join(T, "hub-out")
        shutil.rmtree(out, ignore_errors=True)
        u = subprocess.run([CK, "unpack", DST, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if u.returncode != 0 or hub_tree(out) != orig:
            fail("hub cache, killed at step %d: unpack after the rerun differs: %s" % (n, u.stderr[-300:]))
        if failures:
            return
    if kills < 5:
        fail("hub cache: only %d kills at steps" % kills)
    print("step sweep, hub cache: %d kills, %d links and blobs back each time" % (kills, len(orig)), flush=True)


def main():
    hub_sweep()
    sweeps()
    budget = float(os.environ.get("KILL_BUDGET_S", "10"))
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
