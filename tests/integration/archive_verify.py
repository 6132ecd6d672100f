#!/usr/bin/env python3
"""archive_verify.py — `ckptfs verify` of an ARCHIVE pack decodes an
extent's chunks in runs of up to 4 (fs/cli/verify.c) and must still name
every damaged chunk on its own, and no other: the model of
tests/integration/gen_model.py is packed with --format archive, chunks 1 and
3 of its 10-chunk embedding (one run: 0-3) and chunk 9 (the last, a run of
2: 8-9) damaged.  `verify` and `verify --against SRC` exit 3 (damaged) and
name exactly those three chunks; none of the others is called damaged or
different from the source.  The undamaged pack verifies against the source.
Environment: CKPTFS, PYTHON."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "lib"), os.path.join(HERE, "..", "hardening")]
from checks import check, done  # noqa: E402
from ckpt_layout import layout  # noqa: E402

CK = os.environ["CKPTFS"]
PY = os.environ.get("PYTHON", sys.executable)
ARCHIVE = 4
TENSOR = "model.embed.weight"
BAD = (1, 3, 9)


def run(*args):
    p = subprocess.run([CK, "verify", "--progress=none", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stderr.decode(errors="replace")


def damage(pack):
    """Flip a byte in the middle of each BAD chunk's stream of TENSOR."""
    for root, _, names in os.walk(pack):
        for n in names:
            path = os.path.join(root, n)
            if not n.endswith(".ckpt"):
                continue
            for x in layout(path)["extents"]:
                if x.name != TENSOR:
                    continue
                check("%s is an ARCHIVE extent of 10 chunks" % TENSOR, x.encoding == ARCHIVE and x.n_chunks == 10,
                      "encoding %d, %d chunks" % (x.encoding, x.n_chunks))
                with open(path, "r+b") as f:
                    for c in BAD:
                        end = x.datums[c + 1] if c + 1 < x.n_chunks else x.planes[1][1]
                        at = x.planes[1][0] + (x.datums[c] + end) // 2
                        f.seek(at)
                        v = f.read(1)[0]
                        f.seek(at)
                        f.write(bytes([v ^ 0x10]))
                return
    check("the pack holds %s" % TENSOR, False)


def main(t):
    src, pack = os.path.join(t, "src"), os.path.join(t, "pack")
    subprocess.run([PY, os.path.join(HERE, "gen_model.py"), src], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([CK, "pack", "--format", "archive", "--progress=none", src, pack], check=True,
                   stdout=subprocess.DEVNULL)
    rc, err = run("--against", src, pack)
    check("intact archive pack: verify --against exits 0", rc == 0, err)
    damage(pack)
    for args in ([pack], ["--against", src, pack]):
        rc, err = run(*args)
        named = sorted(int(c) for c in re.findall(re.escape(TENSOR) + r", chunk (\d+) .*damaged chunk", err))
        what = "verify %s" % ("--against" if len(args) > 1 else "")
        check(what + ": exit 3 (damaged)", rc == 3, "exit %d: %s" % (rc, err))
        check(what + ": names chunks 1, 3 and 9, each once, and no other", named == list(BAD), err)
        check(what + ": no chunk called different from the source", "differs" not in err, err)


t = tempfile.mkdtemp(prefix="ckptfs-archive-verify.")
try:
    main(t)
finally:
    shutil.rmtree(t, ignore_errors=True)
sys.exit(done("archive_verify"))
