#!/usr/bin/env python3
"""check_reader.py — the spec's second reader (ckread.py) against ckptfs's verdicts.

ckread.py is written from docs/format.md alone.  For the spec to say exactly
what ckptfs accepts, it must reach ckptfs's verdict on every input the
project pins one for:
  tests/conformance cases   the case's verdict (ckptfs agrees with each:
                            run_conformance.py), the original bytes of an
                            accepted pack, and for a rejected one a rule the
                            case names (the first rule the pack breaks);
  tests/golden/v1.0         packed files ckptfs wrote: decoded, their SHA-256
                            the one SHA256SUMS gives;
  tests/golden-errors       container/ and manifest/: rejected, with the status
                            of the .expect (pinned there by golden_replay,
                            which feeds them to ckptfs's reader);
  --replay GOLDEN_REPLAY    and the status: the manifest or packed file that
                            ckread rejects in each rejected case is written
                            as a golden-error file with ckread's status, and
                            golden_replay (ckptfs's reader) must agree.
Usage: check_reader.py [--only NAME] [--replay GOLDEN_REPLAY]
Exit 1 on any disagreement.
"""
import argparse
import glob
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ckpack  # noqa: E402
from ckread import Packed, Reject, parse_manifest, read_links, read_pack, xxh3  # noqa: E402
from cases import cases  # noqa: E402

TESTS = os.path.join(HERE, "..")
STATUS = {"not a ckptfs packed file": "not-ckptfs", "unsupported format version": "unsupported",
          "damaged metadata": "corrupt", "damaged chunk": "chunk"}


def verdict_of_file(data):
    """ckread's status for one packed file: "ok", or a Reject's status."""
    try:
        pk = Packed(data)
    except Reject as e:
        return e.status, e
    for x in pk.extents:
        for c in range(x.n_chunks):
            try:
                pk.chunk(x, c)
            except Reject as e:
                return e.status, e
    return "ok", None


def fixup(data):
    """The golden-error harness's checksum fix-up (tests/fuzz/fuzz_util.h ckz_fixup_ckpt)."""
    b = bytearray(data)
    n = len(b)
    if n < 64:
        return bytes(b)
    b[48:56] = struct.pack("<Q", n)
    toc_off, toc_size = struct.unpack_from("<QQ", b, 24)
    if 64 <= toc_off <= n and 96 <= toc_size <= n - toc_off:
        ne = struct.unpack_from("<I", b, toc_off + 4)[0]
        i = 0
        while i < ne and 96 + (i + 1) * 192 <= toc_size:
            r = toc_off + 96 + 192 * i
            nch, ioff = struct.unpack_from("<QQ", b, r + 24)
            if ioff <= n and nch <= (n - ioff) // 16:
                b[r + 40:r + 48] = struct.pack("<Q", xxh3(b[ioff:ioff + 16 * nch]))
            i += 1
        b[40:48] = struct.pack("<Q", xxh3(b[toc_off:toc_off + toc_size]))
    b[56:64] = struct.pack("<Q", xxh3(b[:56]))
    return bytes(b)


def expected_status(path):
    try:
        first = open(path + ".expect", encoding="utf-8").readline()
    except FileNotFoundError:
        return None
    m = re.match(r"status: (.*)", first.strip())
    return STATUS.get(m.group(1)) if m else None


def check_cases(tmp, only):
    bad = []
    for c in cases():
        if only and c["name"] != only:
            continue
        dst = os.path.join(tmp, c["name"])
        ckpack.write_pack(dst, c["files"], c.get("dirs", ()), c.get("manifest_edit"),
                          c.get("manifest_damage"), c.get("extra"), c.get("links", ()))
        if c.get("post"):
            c["post"](dst)
        try:
            got, err = read_pack(dst), None
        except Reject as e:
            got, err = None, e
        why = None
        if c["verdict"] == "accept":
            if err:
                why = "ckread rejected it: %s" % err
            else:
                for f in c["files"]:
                    if got.get(f.path) != f.original():
                        why = "ckread read other bytes for %r" % f.path
                want = {p.encode(): t.encode() for p, t in c.get("links", ())}
                if read_links(dst) != want:
                    why = "ckread read other links: %r" % read_links(dst)
        elif not err:
            why = "ckread accepted it"
        elif err.rule not in re.findall(r"R\d+", c["rule"]):
            why = "ckread rejected it for %s, the case is about %s" % (err, c["rule"])
        print("%-4s case %-28s %s" % ("ok" if not why else "FAIL", c["name"], why or (err or "accepted")))
        bad += [c["name"]] if why else []
        shutil.rmtree(dst)
    return bad


def check_golden():
    bad = []
    for sums in glob.glob(os.path.join(TESTS, "golden", "*", "SHA256SUMS")):
        want = dict(reversed(l.split()) for l in open(sums))
        for p in sorted(glob.glob(os.path.join(os.path.dirname(sums), "*", "*.ckpt"))):
            name = os.path.relpath(p, os.path.dirname(sums))
            try:
                data, err = Packed(open(p, "rb").read()).read_all()
            except Reject as e:
                data, err = None, e
            ok = err is None and hashlib.sha256(data).hexdigest() == want.get(os.path.basename(p)[:-5])
            print("%-4s golden %-28s %s" % ("ok" if ok else "FAIL", name, err or ""))
            bad += [] if ok else [name]
    return bad


def check_golden_errors():
    bad = []
    root = os.path.join(TESTS, "golden-errors")
    for p in sorted(glob.glob(os.path.join(root, "container", "*")) + glob.glob(os.path.join(root, "manifest", "*"))):
        if p.endswith(".expect"):
            continue
        name = os.path.relpath(p, root)
        base = os.path.basename(p)
        data = open(p, "rb").read()
        if name.startswith("container/"):
            st, err = verdict_of_file(data)
            if st != "ok" and not base.startswith("raw-"):
                st, err = verdict_of_file(fixup(data))  # the form .expect pins
        else:
            if base.startswith("body-"):
                data = b"CKPTFS-MANIFEST 1 %016x\n" % xxh3(data) + data
            try:
                parse_manifest(data)
                st, err = "ok", None
            except Reject as e:
                st, err = e.status, e
        want = expected_status(p)
        why = "ckread accepted it" if st == "ok" else \
            "ckread says %s, ckptfs %s" % (st, want) if want and st != want else None
        print("%-4s golden-error %-40s %s" % ("ok" if not why else "FAIL", name, why or err))
        bad += [name] if why else []
    return bad


def check_statuses(tmp, replay, only):
    """ckread's status for the file each rejected case breaks, against ckptfs's (golden_replay)."""
    root = os.path.join(tmp, "replay")
    for d in ("safetensors", "container", "decode", "manifest"):  # golden_replay wants each
        os.makedirs(os.path.join(root, d))
    name_of = {v: k for k, v in STATUS.items()}
    n = 0
    for c in cases():
        if c["verdict"] != "reject" or c.get("post") or (only and c["name"] != only):
            continue
        dst = os.path.join(tmp, c["name"])
        ckpack.write_pack(dst, c["files"], c.get("dirs", ()), c.get("manifest_edit"),
                          c.get("manifest_damage"), c.get("extra"), c.get("links", ()))
        data = open(os.path.join(dst, "ckptfs.manifest"), "rb").read()
        try:
            files, _ = parse_manifest(data)
            err, where = None, None
            for rel in sorted(files):
                p = os.path.join(os.fsencode(dst), rel + b".ckpt")
                if os.path.isfile(p) and not os.path.islink(p):
                    data = open(p, "rb").read()
                    st, err = verdict_of_file(data)
                    if err and err.rule != "R45":  # R45 is verify's and unpack's, not the open's
                        where = "container/raw-" + c["name"]
                        break
        except Reject as e:
            err, where = e, "manifest/" + c["name"]
        shutil.rmtree(dst)
        if where:
            with open(os.path.join(root, where), "wb") as f:
                f.write(data)
            with open(os.path.join(root, where + ".expect"), "w") as f:
                f.write("status: %s\n" % name_of[err.status])
            n += 1
    r = subprocess.run([replay, root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    out = r.stdout.decode(errors="replace")
    bad = re.findall(r"FAIL (\S+?):", out)
    for b in bad:
        print("FAIL status %s: ckread's status is not ckptfs's" % b)
    print("%-4s status of %d rejected files: golden_replay %s" % ("ok" if r.returncode == 0 else "FAIL", n,
                                                                 out.strip().split("\n")[-1]))
    return bad or ([] if r.returncode == 0 else ["golden_replay"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--replay")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ckptfs-ckread-")
    try:
        bad = check_cases(tmp, a.only)
        if a.replay:
            bad += check_statuses(tmp, a.replay, a.only)
        if not a.only:
            bad += check_golden() + check_golden_errors()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d disagreements%s" % (len(bad), (": " + ", ".join(bad)) if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
