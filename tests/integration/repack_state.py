#!/usr/bin/env python3
"""repack_state.py — a packed directory's ckptfs.state (fs/cli/pack_state.c)
tells the truth after `ckptfs repack` (fs/cli/repack.c), whole or killed:

  - pack (K15), repack to ARCHIVE: the state names archive; rerunning
    `pack --format archive SRC DST` resumes (exit 0, every file kept, none
    packed again, all still ARCHIVE); rerunning `pack SRC DST` (K15) after a
    new source file appeared is refused naming archive, DST unchanged (no
    K15 file among ARCHIVE ones);
  - repack killed at each of its steps in turn (CKPTFS_FAULT=step:N): the
    state either says "repacking" (and both packs refuse, naming the
    repack, DST unchanged) or names the one encoding every packed file is
    in (and the pack in it resumes, keeping every file); a rerun of the
    repack finishes: all ARCHIVE, the state names archive without
    "repacking", the pack whole (verify, unpack equal to the originals).
No root needed.  Environment: CKPTFS, PYTHON."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "lib")]
from checks import check, done  # noqa: E402
from packcheck import intact, pack_encodings, tree_sums  # noqa: E402

CK = os.environ["CKPTFS"]
PY = os.environ.get("PYTHON", sys.executable)
FAULT_EXIT = 86  # CKU_FAULT_EXIT, fs/format/util.h
T = tempfile.mkdtemp(prefix="ckptfs-repack-state.")
SRC, K15, OUT = (os.path.join(T, x) for x in ("src", "k15", "out"))


def run(*args, env=None):
    r = subprocess.run([CK] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=dict(os.environ, **(env or {})))
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def state(d):
    with open(os.path.join(d, "ckptfs.state")) as f:
        return json.load(f)


def fresh(name):
    d = os.path.join(T, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(K15, d)
    return d


def n_files(src):
    return sum(len(fs) for _, _, fs in os.walk(src))


def repacked_then_packed():
    d = fresh("whole")
    rc, _, err = run("repack", "--format", "archive", d)
    check("repack to archive: exit 0, all archive", rc == 0 and pack_encodings(d) == {"archive"}, err[-300:])
    st = state(d)
    check("the state names archive, not repacking", st.get("format") == "archive" and "repacking" not in st,
          "format %s, repacking %s" % (st.get("format"), st.get("repacking")))
    before = tree_sums(d)
    rc, out, err = run("pack", "--format", "archive", SRC, d)
    n = n_files(SRC)
    check("pack --format archive again: resumes, every file kept",
          rc == 0 and "(%d files already packed by an earlier run, kept)" % n in out, "exit %d: %s%s" % (rc, out, err))
    check("pack --format archive again: no packed file rewritten",
          {f: s for f, s in tree_sums(d).items() if f != "ckptfs.state"} ==
          {f: s for f, s in before.items() if f != "ckptfs.state"})
    check("pack --format archive again: all archive, whole",
          pack_encodings(d) == {"archive"} and intact(CK, d, SRC, OUT) is None, intact(CK, d, SRC, OUT))
    # the old encoding, with a new file in the source: no K15 file among the ARCHIVE ones
    src, d = os.path.join(T, "src-grows"), os.path.join(T, "grows")
    shutil.copytree(SRC, src)
    rc, _, err = run("pack", src, d)
    rc2, _, err2 = run("repack", "--format", "archive", d)
    check("another pack, repacked to archive", rc == 0 and rc2 == 0, err + err2)
    shard = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))[0]
    shutil.copy(os.path.join(src, shard), os.path.join(src, "added.safetensors"))
    before = tree_sums(d)
    rc, out, err = run("pack", src, d)
    check("pack (k15) after the repack to archive: refused, naming archive and --force",
          rc == 1 and "(archive)" in err and "--force" in err, "exit %d: %s%s" % (rc, out, err))
    check("pack (k15) after the repack to archive: nothing changed, all archive",
          tree_sums(d) == before and pack_encodings(d) == {"archive"}, sorted(pack_encodings(d)))


def killed_at_each_step():
    """repack killed at step 1, 2, ... until a run finishes."""
    seen = {"repacking": 0, "one encoding": 0}
    for n in range(1, 400):
        d = fresh("killed")
        rc, _, err = run("repack", "--format", "archive", d, env={"CKPTFS_FAULT": "step:%d" % n})
        if rc == 0:
            check("killed: %d steps seen (%s), the last run finished" % (n - 1, seen), all(seen.values()))
            break
        tag = "killed at step %d" % n
        if rc != FAULT_EXIT:
            check(tag + ": exit %d (the fault's)" % FAULT_EXIT, False, "exit %d: %s" % (rc, err[-300:]))
            break
        st, encs = state(d), pack_encodings(d)
        before = tree_sums(d)
        seen["repacking" if st.get("repacking") is True else "one encoding"] += 1
        if st.get("repacking") is True:
            ok = st.get("format") == "archive"
            for fmt in ("k15", "archive"):
                rc, out, err = run("pack", "--format", fmt, SRC, d)
                ok &= rc == 1 and "repack" in err and tree_sums(d) == before
            check(tag + ": repacking: both packs refuse naming the repack, nothing changed", ok,
                  "exit %d: %s%s" % (rc, out, err))
        else:
            check(tag + ": the state names the encoding of every packed file", encs == {st.get("format")},
                  "state %s, files %s" % (st.get("format"), sorted(encs)))
            rc, out, err = run("pack", "--format", st.get("format", "?"), SRC, d)
            check(tag + ": the pack in it resumes, keeping every file",
                  rc == 0 and "(%d files already packed" % n_files(SRC) in out and pack_encodings(d) == encs,
                  "exit %d: %s%s" % (rc, out, err))
        rc, _, err = run("repack", "--format", "archive", d)
        st = state(d)
        check(tag + ": the rerun finishes, the state says archive",
              rc == 0 and pack_encodings(d) == {"archive"} and st.get("format") == "archive" and
              "repacking" not in st, "exit %d: format %s, repacking %s: %s" % (rc, st.get("format"), st.get("repacking"), err[-300:]))
        check(tag + ": whole after the rerun", intact(CK, d, SRC, OUT) is None, intact(CK, d, SRC, OUT))
    else:
        check("killed: a run finished within 400 steps", False)


def main():
    subprocess.run([PY, os.path.join(HERE, "..", "cli", "gen_model.py"), SRC], check=True,
                   stdout=subprocess.DEVNULL)
    rc, _, err = run("pack", SRC, K15)
    if rc or pack_encodings(K15) != {"k15"}:
        raise RuntimeError("pack: " + err)
    repacked_then_packed()
    killed_at_each_step()


try:
    main()
finally:
    shutil.rmtree(T, ignore_errors=True)
sys.exit(done("repack_state"))
