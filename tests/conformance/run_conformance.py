#!/usr/bin/env python3
"""run_conformance.py — ckptfs against the verdicts of tests/conformance/cases.py.

Each case's packed directory is written by ckpack.py (not by ckptfs), then
  accept: `ckptfs verify DST` succeeds, `ckptfs unpack DST OUT` rebuilds
          every file as exactly its original bytes, and `ckptfs stat DST`
          and `stat --json DST` describe it (JSON without repeated keys);
  reject: both fail (non-zero exit), the message contains the case's `expect`
          text, and unpack leaves no output file behind.
With --mount, accepted packs are also mounted and read back through FUSE; a
pack with a damaged chunk (R40-R48) is mounted and the chunk's pages give EIO
there; any other rejected pack (metadata, manifest, R51, R52) is not mounted
at all (format §9.3).
Usage: run_conformance.py CKPTFS [--mount] [--keep DIR] [--only NAME]
Prints one line per case and exits 1 if ckptfs disagrees with any verdict,
or if a rule id of docs/format.md §8 has no case.
"""
import argparse
import errno
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpack  # noqa: E402
from cases import cases  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stderr.decode(errors="replace")


def files_under(d):
    out = []
    for root, _, names in os.walk(d):
        out += [os.path.relpath(os.path.join(root, n), d) for n in names]
    return out


def unique_keys(pairs):
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError("repeated keys %s" % dup)
    return dict(pairs)


def check_stat(ck, dst):
    rc, err = run([ck, "stat", dst])
    if rc:
        return "stat refused: " + err.strip()
    p = subprocess.run([ck, "stat", "--json", dst], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if p.returncode:
        return "stat --json refused: " + p.stderr.decode(errors="replace").strip()
    try:
        json.loads(p.stdout, object_pairs_hook=unique_keys)
    except ValueError as e:
        return "stat --json printed bad JSON: %s" % e
    return None


def check_accept(ck, c, dst, out):
    why = check_stat(ck, dst)
    if why:
        return why
    rc, err = run([ck, "verify", dst])
    if rc:
        return "verify refused: " + err.strip()
    rc, err = run([ck, "unpack", dst, out])
    if rc:
        return "unpack refused: " + err.strip()
    for f in c["files"]:
        p = os.path.join(out.encode(), f.path)
        if not os.path.exists(p):
            return "unpack did not write %r" % f.path
        with open(p, "rb") as fh:
            if fh.read() != f.original():
                return "unpack wrote other bytes for %r" % f.path
    return check_links(c, out, "unpack")


def check_links(c, root, who):
    """Every link of the case is a symbolic link under root with its target (§7)."""
    for path, target in c.get("links", ()):
        p = os.path.join(root, path)
        if not os.path.islink(p):
            return "%s: %r is not a symbolic link" % (who, path)
        if os.readlink(p) != target:
            return "%s: %r links to %r, not %r" % (who, path, os.readlink(p), target)
    return None


def check_reject(ck, c, dst, out):
    for cmd in (["verify", dst], ["unpack", dst, out]):
        rc, err = run([ck] + cmd)
        err = err.replace(dst, "DST").replace(out, "OUT")  # the case's name is no evidence
        if rc == 0:
            return "%s accepted it" % cmd[0]
        if c["expect"].lower() not in err.lower():
            return "%s refused, but said %r (expected %r)" % (cmd[0], err.strip(), c["expect"])
    left = files_under(out) if os.path.isdir(out) else []
    return "unpack left %s" % left if left else None


def check_pages(path, orig, damaged):
    """Format §9.3: through the mount, a 4 KiB page that shares bytes with the
    damaged original range [lo, hi) is EIO; every other page reads back exactly."""
    lo, hi = damaged
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in range(0, len(orig), 4096):
            want = orig[off:off + 4096]
            try:
                got = os.pread(fd, 4096, off)
            except OSError as e:
                if off < hi and lo < off + 4096 and e.errno == errno.EIO:
                    continue
                return "mount: page at %d: %s" % (off, e)
            if off < hi and lo < off + 4096:
                return "mount: page at %d shares bytes with the damaged chunk but was served" % off
            if got != want:
                return "mount: page at %d: other bytes" % off
    finally:
        os.close(fd)
    return None


def check_mount(ck, c, dst, mnt):
    """Through FUSE: accepted files read back exactly; rejected ones give an error."""
    os.makedirs(mnt)
    p = subprocess.Popen([ck, "mount", dst, mnt], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(600):  # up to 30 s on a loaded machine
        if os.path.ismount(mnt) or p.poll() is not None:
            break
        time.sleep(0.05)
    rule = int(re.match(r"R(\d+)", c["rule"]).group(1)) if c["verdict"] == "reject" else None
    if not os.path.ismount(mnt):
        p.wait(5)
        if rule is not None and 40 <= rule <= 48:
            return "mount refused a pack whose damage (%s) only costs reads of one chunk (§9.3)" % c["rule"].split()[0]
        return None if c["verdict"] == "reject" else "mount refused: " + p.stderr.read().decode()
    if rule is not None and not 40 <= rule <= 48:  # §9.3: metadata, R51 and R52 are checked before mounting
        subprocess.run(["fusermount3", "-u", mnt])
        p.wait(10)
        return "mount served a pack that %s refuses (§9.3: it mounts nothing)" % c["rule"].split()[0]
    try:
        for f in c["files"]:
            path = os.path.join(mnt.encode(), f.path)
            try:
                with open(path, "rb") as fh:
                    got = fh.read()
            except OSError as e:
                if c["verdict"] == "accept":
                    return "mount: %r: %s" % (f.path, e)
                continue
            if c["verdict"] == "accept" and got != f.original():
                return "mount returned other bytes for %r" % f.path
            if c["verdict"] == "reject" and got != f.original():
                return "mount returned bytes other than the original for a rejected %r" % f.path
        if c["verdict"] == "accept" and check_links(c, mnt, "mount"):
            return check_links(c, mnt, "mount")
        if "damaged" in c:
            return check_pages(os.path.join(mnt.encode(), c["files"][0].path), c["files"][0].original(),
                               c["damaged"])
        return None
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        p.wait(10)


def rule_coverage():
    """Problems if a rule id of docs/format.md §8 has no case, or a case names an id §8 lacks."""
    spec = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "format.md")
    ids = set(re.findall(r"^\| (R\d+) \|", open(spec, encoding="utf-8").read(), re.M))
    used = set()
    for c in cases():
        used |= set(re.findall(r"R\d+", c["rule"]))
    return ["§8 rule %s has no case" % r for r in sorted(ids - used)] + \
           ["a case names rule %s, which §8 lacks" % r for r in sorted(used - ids)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckptfs")
    ap.add_argument("--mount", action="store_true")
    ap.add_argument("--keep")
    ap.add_argument("--only")
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="ckptfs-conf-")
    bad = n = 0
    counts = {"accept": 0, "reject": 0}
    try:
        for c in cases():
            if a.only and c["name"] != a.only:
                continue
            n += 1
            counts[c["verdict"]] += 1
            dst = os.path.join(tmp, c["name"])
            out = os.path.join(tmp, c["name"] + ".out")
            for d in (dst, out):
                shutil.rmtree(d, ignore_errors=True)
            ckpack.write_pack(dst, c["files"], c.get("dirs", ()), c.get("manifest_edit"),
                              c.get("manifest_damage"), c.get("extra"), c.get("links", ()))
            if c.get("post"):
                c["post"](dst)
            why = (check_accept if c["verdict"] == "accept" else check_reject)(a.ckptfs, c, dst, out)
            if why is None and a.mount:
                why = check_mount(a.ckptfs, c, dst, os.path.join(tmp, c["name"] + ".mnt"))
            print("%-4s %-22s %-7s %-48s %s" % ("ok" if why is None else "FAIL", c["name"], c["verdict"],
                                               c["rule"], why or ""))
            bad += why is not None
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    for why in rule_coverage() if not a.only else []:
        print("FAIL", why)
        bad += 1
    print("%d cases (%d accept, %d reject), %d disagreements" % (n, counts["accept"], counts["reject"], bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
