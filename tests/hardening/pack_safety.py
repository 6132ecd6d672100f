#!/usr/bin/env python3
"""pack_safety.py — the ways to lose a file or a pack (issue 11, items 3-8
and 11), each checked against the original bytes (SHA-256):

  3  an interrupted `pack --delete-source` resumes from a moved source and
     after its sources were edited, and `--force` refuses to drop a packed
     file whose source was deleted, or a .ckpt that ckptfs did not write;
  4  a finished single-file `pack --delete-source` can be rerun;
  5  names that cannot be packed (a file `zz` beside a directory `zz.ckpt/`,
     reserved names, names too long, links with --delete-source) are refused
     before anything is written or deleted;
  6  a source replaced while it is packed is not deleted; one truncated while
     it is packed is an error naming it (not SIGBUS), one that cannot be read
     an error saying so (not "changed"), and so is one replaced
     by a FIFO or directory after the walk (no hang); a file renamed over the
     source's name at any step of its deletion survives, and a run killed
     while the source is under its private name (.ckptfs-deleting.NAME) puts
     it back on the rerun, or fails naming both if NAME is there again; one
     another process has open for writing, or opens for writing while it is
     packed, is kept; DST removed or replaced while it is packed: the run
     fails and writes nothing into the new DST; a packed file of another
     source at a file's packed name (a case-insensitive DST) is not replaced;
  7  an interrupted `unpack` can be rerun, one to an OUT that exists or is
     inside the packed directory is refused; a failed pack says DST was kept;
  8  modes: a 0600 file stays 0600 packed and unpacked, DST no more open
     than SRC, directories and the manifest whatever the umask; unpack gives
     back no setuid or setgid bit of a file, nor does the mount show one;
  11 SRC/DST overlap through `..` or a bind mount is refused creating
     nothing; two packs into one DST: the second is refused.

Kills and pauses at exact steps use the CKPTFS_FAULT test hook
(fs/format/util.h: step:N exits at the Nth durable step, stop:N stops there).
Environment: CKPTFS."""
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from checks import check, done  # noqa: E402
from files import sha256_file as sha  # noqa: E402

CK = os.environ["CKPTFS"]
FAULT_EXIT = 86
T = tempfile.mkdtemp(prefix="ckptfs-safety.")


def run(*args, fault=None):
    env = dict(os.environ)
    env.pop("CKPTFS_FAULT", None)
    if fault:
        env["CKPTFS_FAULT"] = fault
    return subprocess.run([CK] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def tree(d):
    out = {}
    for root, _, fs in os.walk(d):
        for f in fs:
            p = os.path.join(root, f)
            out[os.path.relpath(p, d)] = sha(p)
    return out


def make_src(d, files):
    """files: rel -> bytes (or size for random bytes)."""
    for rel, v in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(os.urandom(v) if isinstance(v, int) else v)
    return tree(d)


def fresh(name):
    p = os.path.join(T, name)
    shutil.rmtree(p, ignore_errors=True)
    return p


def unpacked(dst, want, what):
    out = fresh("out")
    r = run("unpack", dst, out)
    got = tree(out) if r.returncode == 0 else {}
    check(what + ": every original comes back bit for bit", r.returncode == 0 and got == want,
          r.stderr.strip()[-300:] or "differs: %s" % sorted(set(got) ^ set(want)))


def stopped(args, n, action):
    """Run ckptfs args stopped at durable step n; action() while stopped
    (returns False to skip); then continue it.  @return its CompletedProcess-
    like (rc, stderr), or None if it finished before step n."""
    env = dict(os.environ, CKPTFS_FAULT="stop:%d" % n)
    p = subprocess.Popen([CK] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while p.poll() is None:
        try:
            with open("/proc/%d/stat" % p.pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
        except OSError:
            pass
        time.sleep(0.002)
    if p.poll() is not None:
        _, err = p.communicate()
        return None
    action()
    os.kill(p.pid, signal.SIGCONT)
    _, err = p.communicate()
    return p.returncode, err


def kill_after_delete(src, dst):
    """Kill `pack --delete-source --jobs 1 src dst` at the first step after
    which a source file is gone; @return True if such a step was found."""
    pristine = fresh("pristine")
    shutil.copytree(src, pristine)
    for n in range(1, 200):
        shutil.rmtree(src)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(pristine, src)
        r = run("pack", "--delete-source", "--jobs", "1", src, dst, fault="step:%d" % n)
        if r.returncode == 0:
            return False
        if len(tree(src)) < len(tree(pristine)):
            return True
    return False


def item3():
    src, dst = fresh("s3"), fresh("d3")
    want = make_src(src, {"a.bin": 70000, "b.bin": 50000, "sub/c.bin": 30000, "z.bin": 1000})
    check("3: a kill after a source was deleted", kill_after_delete(src, dst))
    other = fresh("other3")
    make_src(other, {"x.bin": 100})
    r = run("pack", "--force", other, dst)
    check("3: --force refuses to drop a packed file whose source was deleted",
          r.returncode != 0 and "only copy" in r.stderr and os.path.exists(os.path.join(dst, "a.bin.ckpt")),
          r.stderr.strip())
    # a link is in no packed file: after --delete-source removed it, only the
    # manifest and the state record it, and --force must not drop them
    src_l, dst_l = fresh("s3l"), fresh("d3l")
    make_src(src_l, {"blob": 3000})
    os.symlink("blob", os.path.join(src_l, "name"))
    p = run("pack", "--delete-source", src_l, dst_l)
    u = run("unpack", dst_l, os.path.join(T, "s3l-out"))
    other_l = fresh("o3l")  # the file (same bytes, another time) elsewhere, not the link: no resume
    os.makedirs(other_l)
    shutil.copy(os.path.join(T, "s3l-out", "blob"), os.path.join(other_l, "blob"))
    os.utime(os.path.join(other_l, "blob"), (1e9, 1e9))
    r = run("pack", "--force", other_l, dst_l)
    check("3: --force refuses to drop the only record of a symbolic link --delete-source removed",
          p.returncode == 0 and u.returncode == 0 and r.returncode != 0 and "symbolic link name" in r.stderr and
          os.path.exists(os.path.join(dst_l, "blob.ckpt")), r.stderr.strip())
    moved = os.path.join(T, "s3-moved")
    shutil.rmtree(moved, ignore_errors=True)
    os.rename(src, moved)
    r = run("pack", "--delete-source", moved, dst)
    check("3: the rerun on the moved source finishes", r.returncode == 0, r.stderr.strip())
    check("3: ... and its summary counts the files the pack holds, deleted sources included",
          r.stdout.startswith("packed %d files: 151 kB -> " % len(want)), r.stdout.strip())
    check("3: ... and empties it", tree(moved) == {}, str(tree(moved)))
    unpacked(dst, want, "3")
    r = run("pack", other, dst)
    check("3: a different source is still refused", r.returncode != 0 and "already exists" in r.stderr, r.stderr)


def item3_edited_and_forced():
    """Killed at each step, then every source still there edited (new bytes,
    the same size, the mtime set back, so only the content tells): the rerun
    must keep the new versions (pack them again, never delete one whose
    packed copy is the old); and `--force` on the moved source after a kill
    must resume or refuse, never drop a file whose only copy is the pack."""
    lost, kills = [], 0
    for n in range(1, 60):
        src, dst = fresh("s3e"), fresh("d3e")
        make_src(src, {"a.bin": 30000, "sub/b.bin": 20000, "z.bin": 1000})
        r = run("pack", "--delete-source", "--jobs", "1", src, dst, fault="step:%d" % n)
        if r.returncode != FAULT_EXIT:
            break
        kills += 1
        want = {}
        for rel, p in ((rel, os.path.join(src, rel)) for rel in ("a.bin", "sub/b.bin", "z.bin")):
            if os.path.exists(p):
                st = os.stat(p)
                with open(p, "r+b") as f:
                    f.write(os.urandom(st.st_size))
                os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
                want[rel] = sha(p)
        r = run("pack", "--delete-source", "--jobs", "1", src, dst)
        out = fresh("o3e")
        u = run("unpack", dst, out)
        got = tree(out) if u.returncode == 0 else {}
        if r.returncode or any(got.get(rel) != h for rel, h in want.items()):
            lost.append((n, r.stderr.strip()[-200:]))
    check("3: sources edited after a kill at each of %d steps (mtime set back): the rerun packs the new bytes"
          % kills, kills >= 10 and not lost, str(lost[:3]))
    bad, kills = [], 0
    for n in range(1, 60):
        src, dst, moved = fresh("s3f"), fresh("d3f"), fresh("m3f")
        want = make_src(src, {"a.bin": 30000, "sub/b.bin": 20000, "z.bin": 1000})
        r = run("pack", "--delete-source", "--jobs", "1", src, dst, fault="step:%d" % n)
        if r.returncode != FAULT_EXIT:
            break
        kills += 1
        os.rename(src, moved)
        r = run("pack", "--force", moved, dst)
        out = fresh("o3f")
        u = run("unpack", dst, out)
        have, got = tree(moved), tree(out) if u.returncode == 0 else {}
        if any(got.get(rel) != h and have.get(rel) != h and
               not (r.returncode and os.path.exists(os.path.join(dst, rel + ".ckpt"))) for rel, h in want.items()):
            bad.append((n, r.returncode, r.stderr.strip()[-200:]))
    check("3: --force on the moved source after a kill at each of %d steps loses nothing" % kills,
          kills >= 10 and not bad, str(bad[:3]))


def force_keeps_foreign():
    """--force replaces an earlier pack and nothing else: a .ckpt it did not
    write (a PyTorch Lightning checkpoint is named so) put in the packed
    directory, at its top or in a subdirectory, was deleted with the packed
    files; it is kept and the run refused, saying so."""
    for where in ("last.ckpt", "sub/last.ckpt"):
        s0, s1, dst = fresh("s3f0"), fresh("s3f1"), fresh("d3f")
        make_src(s0, {"y.bin": 3000, "sub/z.bin": 2000})
        make_src(s1, {"w.bin": 3000})
        run("pack", s0, dst)
        mine = os.urandom(5000)
        with open(os.path.join(dst, where), "wb") as f:
            f.write(mine)
        r = run("pack", "--force", s1, dst)
        p = os.path.join(dst, where)
        check("3: --force over a pack holding a %s it did not write: refused, the file kept" % where,
              r.returncode == 1 and "did not write" in r.stderr and os.path.exists(p) and
              sha(p) == hashlib.sha256(mine).hexdigest(), r.stderr.strip())


def item4():
    d = fresh("s4")
    want = make_src(d, {"only.bin": 40000})
    dst = fresh("d4")
    f = os.path.join(d, "only.bin")
    r1 = run("pack", "--delete-source", f, dst)
    r2 = run("pack", "--delete-source", f, dst)
    check("4: rerunning a finished single-file pack --delete-source succeeds",
          r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr)
    unpacked(dst, {"only.bin": want["only.bin"]}, "4")
    d2 = fresh("s4b")
    make_src(d2, {"k.bin": 1000})
    dst2 = fresh("d4b")
    r1 = run("pack", os.path.join(d2, "k.bin"), dst2)
    r2 = run("pack", os.path.join(d2, "k.bin"), dst2)
    check("4: rerunning a finished single-file pack succeeds", r1.returncode == 0 and r2.returncode == 0,
          r1.stderr + r2.stderr)
    # a SRC that does not exist is not a moved source: a typo in SRC resumed
    # the finished pack, exited 0 ('packed 1 files') and recorded the typo
    # as its source; and a refused run said to run it again to resume
    state = os.path.join(dst2, "ckptfs.state")
    with open(state) as f:
        before = f.read()
    r = run("pack", os.path.join(T, "no-such-model"), dst2)
    with open(state) as f:
        kept = f.read() == before
    check("4: pack of a SRC that does not exist into a finished pack: refused saying so, its state unchanged",
          r.returncode == 1 and kept and "no-such-model: No such file or directory" in r.stderr, r.stderr.strip())
    empty = fresh("s4e")
    os.makedirs(empty)
    r = run("pack", empty, dst2)
    with open(state) as f:
        kept = f.read() == before
    check("4: pack of an empty SRC into a finished pack made without --delete-source: refused, its state unchanged",
          r.returncode == 1 and kept and "s4e holds no file" in r.stderr, r.stderr.strip())
    other = fresh("s4o")
    make_src(other, {"o.bin": 100})
    r = run("pack", other, dst2)
    check("4: pack of another SRC into a finished pack: refused without 'run the same command again to resume'",
          r.returncode == 1 and "already exists" in r.stderr and "run the same command again" not in r.stderr,
          r.stderr.strip())


def refused_before_anything(files, what, needle):
    src, dst = fresh("s5"), fresh("d5")
    want = make_src(src, files)
    r = run("pack", "--delete-source", "--jobs", "1", src, dst)
    check("5: %s: refused, naming it" % what, r.returncode != 0 and needle in r.stderr, r.stderr.strip())
    check("5: %s: nothing deleted" % what, tree(src) == want, str(sorted(tree(src))))
    check("5: %s: nothing written" % what, not os.path.exists(dst), str(os.listdir(dst) if os.path.isdir(dst) else dst))


def links_with_delete_source():
    """A symbolic link in SRC is packed as a link (format §7: its target
    text), never followed: with --delete-source the link itself is removed
    once the manifest listing it is durable, and the file it points to,
    outside SRC, is neither packed nor deleted (before format 1.1 pack
    followed links and --delete-source refused them).  A single file named
    by a link is the user's path: followed, and --delete-source refuses it
    (its target would be deleted).  Hard links are two names of one file:
    both packed, both deleted."""
    src, dst, out = fresh("s5s"), fresh("d5s"), fresh("o5s")
    want = make_src(src, {"aa.bin": 5000, "zz.bin": 5000})
    target = os.path.join(fresh("t5s"), "outside.bin")
    os.makedirs(os.path.dirname(target))
    with open(target, "wb") as f:
        f.write(os.urandom(7000))
    os.symlink(target, os.path.join(src, "mm.bin"))
    r = run("pack", "--delete-source", "--jobs", "1", src, dst)
    check("5: --delete-source with a link to a file outside SRC: packed as a link, noted as pointing outside",
          r.returncode == 0 and "1 symbolic links of" in r.stderr and "point outside it" in r.stderr,
          r.stderr.strip())
    check("5: ... the sources and the link deleted, the file it points to kept",
          os.listdir(src) == [] and sha(target) and os.path.isfile(target), str(os.listdir(src)))
    u = run("unpack", dst, out)
    check("5: ... unpack makes the link again, with its target text",
          u.returncode == 0 and os.path.islink(os.path.join(out, "mm.bin")) and
          os.readlink(os.path.join(out, "mm.bin")) == target and tree(out) == dict(want, **{"mm.bin": sha(target)}),
          u.stderr.strip())
    link = os.path.join(fresh("s5f"), "one.bin")
    os.makedirs(os.path.dirname(link))
    os.symlink(target, link)
    r = run("pack", "--delete-source", link, fresh("d5f"))
    check("5: --delete-source of a single file named by a link: refused, the file kept",
          r.returncode != 0 and "a symbolic link" in r.stderr and os.path.exists(target) and os.path.islink(link),
          r.stderr.strip())
    src, dst, out = fresh("s5h"), fresh("d5h"), fresh("o5h")
    want = make_src(src, {"a.bin": 6000, "sub/c.bin": 100})
    os.link(os.path.join(src, "a.bin"), os.path.join(src, "sub", "b.bin"))
    want["sub/b.bin"] = want["a.bin"]
    r = run("pack", "--delete-source", src, dst)
    u = run("unpack", dst, out)
    check("5: hard links with --delete-source: each name packed and deleted",
          r.returncode == 0 and tree(src) == {} and u.returncode == 0 and tree(out) == want,
          r.stderr.strip() + str(tree(src)))


def item5():
    refused_before_anything({"aa.bin": 5000, "zz": 5000, "zz.ckpt/in.bin": 5000}, "a file zz beside a directory zz.ckpt/", "zz")
    refused_before_anything({"aa.bin": 5000, ".ckptfs.manifest.tmp/x": 10}, "a directory .ckptfs.manifest.tmp",
                            ".ckptfs.manifest.tmp")
    refused_before_anything({"aa.bin": 5000, ".ckptfs.manifest.tmp": 10}, "a file .ckptfs.manifest.tmp",
                            ".ckptfs.manifest.tmp")
    refused_before_anything({"aa.bin": 5000, "ckptfs.state": 10}, "a file ckptfs.state", "ckptfs.state")
    refused_before_anything({"aa.bin": 5000, "n" * 251: 10}, "a name of 251 bytes", "n" * 251)
    refused_before_anything({"aa.bin": 5000, "n" * 249 + "\u00e9": 10}, "a name of 251 bytes ending in a 2-byte character",
                            "n" * 249)
    links_with_delete_source()
    src, dst = fresh("s5l"), fresh("d5l")
    want = make_src(src, {"l" * 246: 3000, "m" * 250: 3000, "sub/" + "k" * 249: 100, "e" * 247 + "\u4e2d": 10,
                          "d" * 255 + "/x.bin": 10})
    r = run("pack", "--delete-source", src, dst)
    check("5: names of 246-250 bytes (one ending in a 3-byte character) and a 255-byte directory are packed",
          r.returncode == 0 and tree(src) == {}, r.stderr.strip())
    unpacked(dst, want, "5: long names")


def item6():
    src, dst = fresh("s6"), fresh("d6")
    files = {"a.bin": os.urandom(200000), "b.bin": os.urandom(1000)}
    new = os.urandom(5000)
    seen = {}

    def replace():
        if not os.path.exists(os.path.join(dst, "a.bin.ckpt")) or seen:
            return
        seen["done"] = True
        with open(os.path.join(src, ".new"), "wb") as f:
            f.write(new)
        os.rename(os.path.join(src, ".new"), os.path.join(src, "a.bin"))
    res = None
    for n in range(1, 30):
        make_src(fresh("s6"), files)
        res = stopped(["pack", "--delete-source", "--jobs", "1", src, dst], n, replace)
        if seen:
            break
        shutil.rmtree(dst, ignore_errors=True)
    ap = os.path.join(src, "a.bin")
    check("6: a source replaced while packed is kept",
          seen and res and os.path.exists(ap) and sha(ap) == hashlib.sha256(new).hexdigest(), str(res))
    check("6: ... and the run says so and fails", bool(res) and res[0] != 0 and "not deleted" in res[1], str(res))
    check("7: a failed pack says DST was kept for resuming", bool(res) and "run the same command again" in res[1],
          str(res))

    src, dst = fresh("s6t"), fresh("d6t")
    make_src(src, {"big.bin": 3 << 20})
    cut = {}

    def truncate():
        if cut or not any(f.endswith(".ckpt.tmp") for f in os.listdir(dst)):
            return
        cut["done"] = True
        os.truncate(os.path.join(src, "big.bin"), 0)
    for n in range(1, 30):
        res = stopped(["pack", "--jobs", "2", src, dst], n, truncate)
        if cut:
            break
        shutil.rmtree(dst, ignore_errors=True)
    check("6: a source truncated while packed: an error naming it, not SIGBUS",
          cut and res and res[0] == 1 and "big.bin" in res[1], str(res))
    left = [f for f in (os.listdir(dst) if os.path.isdir(dst) else []) if f.endswith(".tmp")]
    check("6: ... and no temporary file left", not left, str(left))


@contextlib.contextmanager
def mounted(p, mnt):
    """`ckptfs mount -f P MNT` for the with block (MNT made here)."""
    os.makedirs(mnt)
    daemon = subprocess.Popen([CK, "mount", "-f", p, mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if os.path.ismount(mnt):
                break
            time.sleep(0.05)
        yield mnt
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        daemon.wait(timeout=30)


def source_read_error():
    """A source that cannot be read (EIO from its disk or file system; here
    a ckptfs mount of a damaged pack, a source one may well repack from):
    the kernel answers a read of a mapping with SIGBUS, as for a truncated
    file, and pack said "source changed while it was being packed", which a
    rerun does not cure.  It says that the read failed, where, and why."""
    src, p, mnt, dst = fresh("s6e"), fresh("p6e"), fresh("m6e"), fresh("d6e")
    make_src(src, {"a.bin": 3000000})
    run("pack", src, p)
    with open(os.path.join(p, "a.bin.ckpt"), "r+b") as f:  # a byte of a chunk in the middle
        f.seek(1500000)
        b = f.read(1)
        f.seek(1500000)
        f.write(bytes([b[0] ^ 1]))
    with mounted(p, mnt):
        r = run("pack", os.path.join(mnt, "a.bin"), dst)
        check("6: a source that cannot be read (EIO): an error saying so, naming it and the byte, no DST",
              r.returncode == 1 and "a.bin: cannot read it: Input/output error (at byte " in r.stderr and
              not os.path.exists(dst), r.stderr.strip())


def repack_through_mount():
    """`ckptfs pack --force MNT DST`, MNT a ckptfs mount of DST (to re-encode
    a pack in place): --force cleared DST's packed files, which the mount
    was reading, so every read of it failed (EIO) and the pack was gone,
    the only copy of the model after a `pack --delete-source`.  Refused
    before anything is written, SRC being the mount, a file of it, or a
    directory holding it."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("skip: 6: pack through a mount of DST (needs root and /dev/fuse)")
        return
    src, dst, outer = fresh("s6m"), fresh("d6m"), fresh("o6m")
    want = make_src(src, {"a.bin": 300000, "sub/b.bin": 200000})
    run("pack", "--delete-source", src, dst)
    before = snapshot(dst)
    mnt, links = os.path.join(outer, "mnt"), fresh("l6m")
    os.makedirs(links)
    os.symlink(os.path.join(mnt, "sub", "b.bin"), os.path.join(links, "b.bin"))
    with mounted(dst, mnt):
        for what, arg in (("the mount", mnt), ("a file of the mount", os.path.join(mnt, "a.bin")),
                          ("a directory holding the mount", outer),
                          ("a directory with a link to a file of the mount", links)):
            r = run("pack", "--force", "--format", "bytesplit", arg, dst)
            if arg == links:  # a link is packed as a link, not read through: --force refused as it loses files
                check("6: pack --force of %s into the packed directory it serves: refused, DST unchanged, the "
                      "mount still serves the originals" % what,
                      r.returncode == 1 and snapshot(dst) == before and tree(mnt) == want, r.stderr.strip()[-300:])
                continue
            check("6: pack --force of %s into the packed directory it serves: refused naming the mount, DST "
                  "unchanged, the mount still serves the originals" % what,
                  r.returncode == 1 and "is read through %s, a ckptfs mount of %s" % (mnt, dst) in r.stderr and
                  snapshot(dst) == before and tree(mnt) == want, r.stderr.strip()[-300:])


def replaced_by_special():
    """A source replaced by a FIFO (or a directory) after the walk looked at
    it: pack opened it as it was, and waited on the FIFO for a writer
    forever, holding DST's lock; now only a regular file is opened."""
    for kind in ("fifo", "dir"):
        src, dst = fresh("s6f"), fresh("d6f")
        make_src(src, {"a.bin": 30000, "b.bin": 3000})
        b = os.path.join(src, "b.bin")

        def replace():
            os.unlink(b)
            if kind == "fifo":
                os.mkfifo(b)
            else:
                os.mkdir(b)
        env = dict(os.environ, CKPTFS_FAULT="stop:1")
        p = subprocess.Popen([CK, "pack", "--jobs", "1", src, dst], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        while p.poll() is None:  # stopped at its first step, after the walk
            with open("/proc/%d/stat" % p.pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.002)
        if p.poll() is None:
            replace()
            os.kill(p.pid, signal.SIGCONT)
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            err = "hung (killed after 30 s) " + err
        what = "a FIFO" if kind == "fifo" else "a directory"
        check("6: a source replaced by %s after the walk: an error naming it, no hang" % what,
              p.returncode == 1 and "b.bin: %s, not a regular file" % what in err, err.strip())


def steps_after_final(tag, act, survived, need_source=False):
    """`pack --delete-source --jobs 1` of a fresh SRC holding a.bin (20000
    bytes), stopped at each step n; at each one where a.bin's packed copy is
    final (a.bin.ckpt in DST), and with need_source a.bin still in SRC,
    act(src, dst) runs while it is stopped and may return a callable to run
    once pack has finished;
    survived(src, dst) then says whether what act did was kept.  @return
    (steps acted at, the steps at which it was lost)."""
    lost, steps = [], 0
    for n in range(1, 60):
        src, dst = fresh("s" + tag), fresh("d" + tag)
        make_src(src, {"a.bin": 20000})
        hit = {}

        def at_step():
            if os.path.exists(os.path.join(dst, "a.bin.ckpt")) and (
                    not need_source or os.path.exists(os.path.join(src, "a.bin"))):
                hit["after"] = act(src, dst) or (lambda: None)
        if stopped(["pack", "--delete-source", "--jobs", "1", src, dst], n, at_step) is None:
            break
        if hit:
            hit["after"]()
            steps += 1
            if not survived(src, dst):
                lost.append(n)
    return steps, lost


def aside_and_name_both():
    """A run killed while a source was under its private name
    (.ckptfs-deleting.NAME), and NAME written again before the rerun: the
    rerun cannot put it back.  It said so and went on, exiting 0 with a pack
    whose NAME is the new file: the one that was being deleted was in SRC
    only, under the private name, with nothing to say the pack lacked it.
    Now an error naming it, nothing packed."""
    for n in range(1, 40):
        src, dst = fresh("s6a"), fresh("d6a")
        make_src(src, {"foo.bin": 5000})
        run("pack", "--delete-source", "--jobs", "1", src, dst, fault="step:%d" % n)
        if os.path.exists(os.path.join(src, ".ckptfs-deleting.foo.bin")):
            break
    else:
        check("6: a step leaves a source under its private name", False)
        return
    with open(os.path.join(src, "foo.bin"), "wb") as f:
        f.write(os.urandom(7000))
    before = tree(src)
    r = run("pack", src, dst)
    check("6: the private name and the name both there: the rerun fails naming the private one, nothing packed",
          r.returncode == 1 and ".ckptfs-deleting.foo.bin: a killed run was deleting" in r.stderr and
          tree(src) == before and not os.path.exists(os.path.join(dst, "ckptfs.manifest")), r.stderr.strip())


def item6_window():
    """The window between the identity check and the unlink (issue 11 item 6):
    stopped at each step after the packed copy is final, a new file is
    renamed over the source's name; it must survive whatever step it lands
    in.  Then: killed at each step, the rerun finishes and empties SRC, no
    private name left behind (single-file and directory sources)."""
    new = os.urandom(3000)

    def replace(src, dst):
        with open(os.path.join(src, ".new"), "wb") as f:
            f.write(new)
        os.rename(os.path.join(src, ".new"), os.path.join(src, "a.bin"))

    def survived(src, dst):
        ap = os.path.join(src, "a.bin")
        return os.path.exists(ap) and sha(ap) == hashlib.sha256(new).hexdigest()
    steps, lost = steps_after_final("6w", replace, survived)
    check("6: a file renamed over the source at each of the %d steps after its packed copy is final survives"
          % steps, steps >= 4 and not lost, "lost at steps %s" % lost)
    for single in (False, True):
        bad, kills = [], 0
        for n in range(1, 60):
            src, dst = fresh("s6k"), fresh("d6k")
            want = make_src(src, {"a.bin": 20000} if single else {"a.bin": 20000, "sub/b.bin": 5000})
            arg = os.path.join(src, "a.bin") if single else src
            r = run("pack", "--delete-source", "--jobs", "1", arg, dst, fault="step:%d" % n)
            if r.returncode != FAULT_EXIT:
                break
            kills += 1
            r = run("pack", "--delete-source", "--jobs", "1", arg, dst)
            left = tree(src) if os.path.isdir(src) else {}
            out = fresh("o6k")
            u = run("unpack", dst, out)
            if r.returncode or left or u.returncode or tree(out) != want:
                bad.append((n, r.stderr.strip()[-200:], sorted(left)))
        check("6: %s --delete-source killed at each of its %d steps: the rerun finishes, SRC empty, "
              "every original in the pack" % ("single-file" if single else "directory", kills),
              kills >= 6 and not bad, str(bad[:3]))


def snapshot(d):
    """Every directory and file below d (files with their SHA-256)."""
    out = {}
    for root, ds, fs in os.walk(d):
        for x in ds:
            out[os.path.relpath(os.path.join(root, x), d) + "/"] = None
        for f in fs:
            p = os.path.join(root, f)
            out[os.path.relpath(p, d)] = sha(p)
    return out


def dst_replaced():
    """DST removed (`rm -rf DST`) or moved away during a `pack
    --delete-source`, and another source packed into a new DST at the same
    path: the first run went on by path, writing its packed files, state and
    manifest into the second run's DST (and removing what it took for its
    leftovers), and deleting its sources once their packed copies were
    there.  Now each run is anchored to the directory it locked: stopped at
    each step, the first run fails naming DST, the new DST is left exactly
    as the second run made it, and no source still in SRC when DST was
    removed is deleted after (a source already under its private name
    .ckptfs-deleting.NAME was being deleted then: the check that its packed
    copy is there came before)."""
    bad, steps = [], 0
    for how in ("rm -rf", "mv"):
        for n in range(1, 80):
            src, dst, other = fresh("s6d"), fresh("d6d"), fresh("o6d")
            make_src(src, {"a.bin": 30000, "sub/b.bin": 20000, "z.bin": 1000})
            make_src(other, {"x.bin": 3000, "y/w.bin": 2000})
            seen = {}

            def replace():
                seen["src"] = tree(src)
                seen["finished"] = os.path.exists(os.path.join(dst, "ckptfs.manifest"))
                if how == "mv":
                    os.rename(dst, fresh("d6d-moved"))
                else:
                    shutil.rmtree(dst)
                seen["second"] = run("pack", other, dst)
                seen["dst"] = snapshot(dst)
            res = stopped(["pack", "--delete-source", "--jobs", "1", src, dst], n, replace)
            if res is None:
                break
            steps += 1
            rc, err = res
            now = tree(src)
            why = []
            if seen["second"].returncode:
                why.append("the second pack failed: " + seen["second"].stderr.strip()[-200:])
            if snapshot(dst) != seen["dst"]:
                d = set(snapshot(dst).items()) ^ set(seen["dst"].items())
                why.append("the new DST changed: %s" % sorted(k for k, _ in d))
            v = run("verify", dst)
            if v.returncode:
                why.append("the new DST does not verify: " + v.stderr.strip()[-200:])
            gone = [rel for rel, h in seen["src"].items() if now.get(rel) != h and
                    not os.path.basename(rel).startswith(".ckptfs-deleting.")]
            if gone:
                why.append("sources deleted after DST was removed: %s" % gone)
            if rc == 0 and not seen["finished"]:
                why.append("exit 0 with its pack gone")
            if rc != 0 and not ("%s: removed or replaced while this pack was writing it" % dst in err):
                why.append("exit %d: %s" % (rc, err.strip()[-300:]))
            if why:
                bad.append((how, n, why))
    check("6: DST removed or moved away and a new pack made there, at each of %d steps of a pack --delete-source: "
          "that run fails naming DST, writes nothing into the new DST, deletes no further source" % steps,
          steps >= 40 and not bad, str(bad[:4]))


def one_packed_name_for_two():
    """Two sources whose packed files have one name in DST: on a
    case-insensitive file system A.bin.ckpt and a.bin.ckpt are one file, so
    the rename that made a.bin's packed file final replaced A.bin's, whose
    source --delete-source had deleted: the only copy of A.bin lost.  Before
    that rename, a packed file already at the name must record the same
    source path, else the run is refused naming both and a.bin is kept; so
    is a file there that is not a packed file.  This kernel cannot make a
    case-insensitive directory (no casefold in ext4 or tmpfs here), so the
    test does what such a file system shows the run: at each step where
    a.bin's temporary exists and its packed name is free, a.bin.ckpt is made
    to name A.bin's packed file (a hard link: the same inode under the
    second name), or a file of random bytes."""
    bad, steps = [], 0
    for kind in ("A.bin's packed file", "a file of random bytes"):
        for n in range(1, 40):
            src, dst = fresh("s6c"), fresh("d6c")
            make_src(src, {"A.bin": 20000, "a.bin": 30000})
            want_a = sha(os.path.join(src, "a.bin"))
            planted = {}

            def plant():
                names = os.listdir(dst)
                if ".a.bin.ckpt.tmp" in names and "a.bin.ckpt" not in names:
                    p = os.path.join(dst, "a.bin.ckpt")
                    if kind.startswith("A.bin"):
                        os.link(os.path.join(dst, "A.bin.ckpt"), p)
                    else:
                        with open(p, "wb") as f:
                            f.write(os.urandom(5000))
                    planted["sha"] = sha(p)
            res = stopped(["pack", "--delete-source", "--jobs", "1", src, dst], n, plant)
            if res is None:
                break
            if not planted:
                continue
            steps += 1
            rc, err = res
            ap, pp = os.path.join(src, "a.bin"), os.path.join(dst, "a.bin.ckpt")
            said = ("a.bin.ckpt: holds the packed copy of %s/A.bin, not of %s/a.bin" % (src, src) if kind.startswith("A.bin")
                    else "a.bin.ckpt: is not a packed file")
            if not (rc == 1 and said in err and os.path.exists(ap) and sha(ap) == want_a and sha(pp) == planted["sha"]):
                bad.append((kind, n, rc, err.strip()[-200:]))
    check("6: at each of %d steps, a packed file of another source (A.bin), or a file ckptfs did not write, at "
          "a.bin's packed name: refused naming both, a.bin and that file kept" % steps, steps >= 4 and not bad,
          str(bad[:3]))


def failed_first_pack_leaves_nothing():
    """A first pack that fails before it packed a file removes the DST it
    made, and the directories it made above it (pack makes DST's missing
    parents): they were left behind, empty."""
    src, top = fresh("s6n"), fresh("t6n")
    make_src(src, {"a.bin": 3000})
    with open(os.path.join(src, "a.bin"), "r+b"):  # open for writing: --delete-source refuses it
        r = run("pack", "--delete-source", src, os.path.join(top, "new1", "new2", "dst"))
    check("6: a failed first pack into new directories leaves none of them",
          r.returncode == 1 and "open for writing" in r.stderr and not os.path.exists(top),
          r.stderr.strip()[-200:] + " left: %s" % [os.path.relpath(p, T) for p, _, _ in os.walk(top)])


def open_for_writing():
    """A source another process has open for writing is not deleted: bytes
    written through a shared writable mapping whose pages are already dirty
    change neither the file's size nor its mtime, so a trainer still holding
    a checkpoint mapped lost what it wrote after the read-back (the source
    deleted, the pack holding the bytes read).  pack --delete-source takes a
    read lease on each source: refused while a writer has the file open, and
    not deleted if one opens it (and writes, here setting mtime back) while it
    is packed, at each step after its packed copy is final."""
    import mmap
    src, dst = fresh("s6o"), fresh("d6o")
    make_src(src, {"a.bin": 1 << 20, "b.bin": 5000})
    ap = os.path.join(src, "a.bin")
    fd = os.open(ap, os.O_RDWR)
    m = mmap.mmap(fd, 1 << 20)
    m[:] = os.urandom(1 << 20)  # the writer's pages are dirty before the pack starts
    r = run("pack", "--delete-source", "--jobs", "1", src, dst)
    before = os.stat(ap).st_mtime_ns if os.path.exists(ap) else None
    m[1000:1010] = b"LATE BYTES"  # written after the pack: no new mtime
    check("6: a source open for writing (shared mapping): kept, the run fails naming it",
          r.returncode == 1 and os.path.exists(ap) and "a.bin: open for writing by another process" in r.stderr and
          os.stat(ap).st_mtime_ns == before, r.stderr.strip()[-300:])
    want = hashlib.sha256(m[:]).hexdigest()
    m.close()
    os.close(fd)
    r = run("pack", "--delete-source", "--jobs", "1", src, dst)
    out = fresh("o6o")
    u = run("unpack", dst, out)
    check("6: ... closed, the rerun packs it with what was written and deletes it",
          r.returncode == 0 and tree(src) == {} and u.returncode == 0 and sha(os.path.join(out, "a.bin")) == want,
          r.stderr.strip()[-300:])

    written = {}

    def writer(ap):
        st = os.stat(ap)
        # all through the descriptor: the name may be the private one for a
        # moment while the pack decides not to delete it (a path-based utime
        # failed then, and the check compared a digest of the step before)
        with open(ap, "r+b") as f:  # waits for the (stopped) pack to give up its lease
            f.write(b"WRITTEN IN PLACE")
            f.flush()
            os.utime(f.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back, as rsync -t would
            f.seek(0)
            written["sha"] = hashlib.sha256(f.read()).hexdigest()

    def write_in_place(src, dst):
        ap = os.path.join(src, "a.bin")
        st = os.stat(ap)
        ino = "%02x:%02x:%d " % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
        written.clear()
        t = threading.Thread(target=writer, args=(ap,))
        t.start()
        # its open is under way when the pack goes on: the pack's lease is
        # breaking (/proc/locks; a fixed 0.2 s was too short on a loaded
        # machine), or the pack held none
        for _ in range(500):
            with open("/proc/locks") as f:
                locks = [x for x in f if ino in x and "LEASE" in x]
            if not locks or any("BREAKING" in x for x in locks) or not t.is_alive():
                break
            time.sleep(0.01)
        return t.join

    def survived(src, dst):
        out = fresh("o6p")
        run("unpack", dst, out)
        return any(os.path.exists(p) and sha(p) == written.get("sha")
                   for p in (os.path.join(src, "a.bin"), os.path.join(out, "a.bin")))
    steps, lost = steps_after_final("6p", write_in_place, survived, need_source=True)
    check("6: a source opened for writing (mtime set back) at each of the %d steps after its packed copy is final "
          "keeps what was written" % steps, steps >= 2 and not lost, "lost at steps %s" % lost)


def item7():
    src, dst = fresh("s7"), fresh("d7")
    want = make_src(src, {"a.bin": 30000, "sub/b.bin": 20000, "c.bin": 10})
    r = run("pack", src, dst)
    kills = 0
    for n in range(1, 100):
        out = fresh("out7")
        shutil.rmtree(out + ".ckptfs-partial", ignore_errors=True)
        r = run("unpack", dst, out, fault="step:%d" % n)
        if r.returncode != FAULT_EXIT:
            break
        kills += 1
        r = run("unpack", dst, out)
        ok = r.returncode == 0 and tree(out) == want and not os.path.exists(out + ".ckptfs-partial")
        if not ok:
            check("7: unpack killed at step %d, then rerun" % n, False, r.stderr.strip())
            return
    check("7: unpack killed at each of its %d steps can be rerun, giving the originals" % kills, kills >= 4)
    # OUT on a file system that takes A.bin and a.bin for one name (this
    # kernel has no casefold: a hard link made while unpack is stopped after
    # A.bin shows it what such a file system would): refused saying why, no OUT
    s7c, d7c = fresh("s7c"), fresh("d7c")
    make_src(s7c, {"A.bin": 3000, "a.bin": 4000})
    run("pack", s7c, d7c)
    out = fresh("out7c")
    stage = out + ".ckptfs-partial"

    def alias():  # the staging directory's tree, which becomes OUT, is its "out"
        if os.path.exists(os.path.join(stage, "out", "A.bin")):
            os.link(os.path.join(stage, "out", "A.bin"), os.path.join(stage, "out", "a.bin"))
    res = stopped(["unpack", "--jobs", "1", d7c, out], 1, alias)
    check("7: unpack where two files of the pack take one name: exit 1 saying why, no OUT, no staging left",
          res is not None and res[0] == 1 and "does not tell the two names apart" in res[1] and
          not os.path.exists(out) and not os.path.exists(stage), str(res))
    # an OUT.ckptfs-partial left by someone else (in /tmp, say: another user
    # can make one there first) is not removed as an interrupted unpack's:
    # unpack emptied it and went on
    if os.geteuid() == 0:
        out = fresh("out7o")
        stage = out + ".ckptfs-partial"
        make_src(stage, {"theirs.bin": 100})
        os.chown(stage, 1234, 1234)
        r = run("unpack", dst, out)
        check("7: an OUT.ckptfs-partial of another user: refused naming it, kept",
              r.returncode == 1 and "not made by you" in r.stderr and os.path.exists(os.path.join(stage, "theirs.bin"))
              and not os.path.exists(out), r.stderr.strip())
        shutil.rmtree(stage)
    # ... nor one of the caller's own that unpack did not make (no marker, or
    # a marker that is not unpack's): refused, kept; one an unpack killed
    # left (its marker in it) is removed and the unpack goes on
    for kind in ("no marker", "a foreign marker"):
        out = fresh("out7m")
        stage = out + ".ckptfs-partial"
        make_src(stage, {"mine.bin": 100} if kind == "no marker" else {"ckptfs-unpack": 10})
        before_stage = tree(stage)
        r = run("unpack", dst, out)
        check("7: an OUT.ckptfs-partial of the caller's with %s: refused naming it, kept" % kind,
              r.returncode == 1 and "no marker" in r.stderr and tree(stage) == before_stage and
              not os.path.exists(out), r.stderr.strip())
        shutil.rmtree(stage)
    out = fresh("out7k")
    r = run("unpack", dst, out, fault="step:2")
    stage = out + ".ckptfs-partial"
    left = os.path.isfile(os.path.join(stage, "ckptfs-unpack"))
    r = run("unpack", dst, out)
    check("7: an OUT.ckptfs-partial a killed unpack left (its marker in it): removed, the unpack done",
          left and r.returncode == 0 and tree(out) == want and not os.path.exists(stage), r.stderr.strip())
    # OUT inside the packed directory reached through a bind mount of it: the
    # check compares devices and inodes, not path strings
    if os.geteuid() == 0 and shutil.which("mount"):
        bind = fresh("bind7")
        os.makedirs(bind, exist_ok=True)
        before = tree(dst)
        if subprocess.run(["mount", "--bind", dst, bind], capture_output=True).returncode == 0:
            try:
                r = run("unpack", dst, os.path.join(bind, "out"))
            finally:
                subprocess.run(["umount", bind], capture_output=True)
            check("7: unpack to an OUT inside a bind mount of the packed directory: refused, nothing written",
                  r.returncode == 1 and "inside the packed directory" in r.stderr and tree(dst) == before,
                  r.stderr.strip())
    # OUT that exists (a file, a link to a directory, a dangling link) is
    # refused and left alone; OUT inside the packed directory is refused too
    # (it was unpacked there, where a later pack into DST takes its files
    # for its own: temporaries removed, .ckpt files read as packed ones)
    before = tree(dst)
    for kind in ("file", "link", "dangling", "inside", "inside via .."):
        out = fresh("out7x")
        if kind == "file":
            with open(out, "w") as f:
                f.write("keep")
        elif kind == "link":
            os.makedirs(out + ".target", exist_ok=True)
            os.symlink(out + ".target", out)
        elif kind == "dangling":
            os.symlink(out + ".nowhere", out)
        elif kind == "inside":
            out = os.path.join(dst, "sub", "out")
        else:
            out = os.path.join(dst, "..", os.path.basename(dst), "out")
        r = run("unpack", dst, out)
        check("7: unpack to an OUT that is %s: refused, nothing written" % (
              "inside the packed directory" if kind.startswith("inside") else "a " + kind),
              r.returncode == 1 and tree(dst) == before and not os.path.exists(out + ".ckptfs-partial") and
              (kind != "file" or open(out).read() == "keep") and
              (kind != "link" or os.listdir(out + ".target") == []) and
              ("inside the packed directory" in r.stderr or not kind.startswith("inside")), r.stderr.strip())
        if os.path.islink(out) or os.path.isfile(out):
            os.unlink(out)


def item8():
    src, dst = fresh("s8"), fresh("d8")
    want = make_src(src, {"secret.bin": 3000, "open.bin": 3000})
    os.chmod(os.path.join(src, "secret.bin"), 0o600)
    os.chmod(os.path.join(src, "open.bin"), 0o644)
    os.chmod(src, 0o700)
    r = run("pack", src, dst)
    mode = lambda p: os.stat(p).st_mode & 0o777  # noqa: E731
    check("8: a 0600 file is 0600 packed", r.returncode == 0 and mode(os.path.join(dst, "secret.bin.ckpt")) == 0o600,
          r.stderr)
    check("8: a 0644 file is 0644 packed", mode(os.path.join(dst, "open.bin.ckpt")) == 0o644)
    check("8: DST no more open than SRC (0700)", mode(dst) == 0o700, oct(mode(dst)))
    out = fresh("out8")
    run("unpack", dst, out)
    check("8: unpack restores the modes", mode(os.path.join(out, "secret.bin")) == 0o600 and
          mode(os.path.join(out, "open.bin")) == 0o644 and mode(out) == 0o700, oct(mode(out)))
    dst1 = fresh("d8f")
    run("pack", os.path.join(src, "secret.bin"), dst1)
    check("8: DST of a single 0600 file is 0700", mode(dst1) == 0o700, oct(mode(dst1)))
    # a DST that is there already (empty) was left as open as it was: the
    # 0644 file of the 0700 SRC was readable by every user in a 0755 DST
    # (and in unpack's OUT, which takes DST's mode); so after --force
    for force in (False, True):
        dst2, out = fresh("d8e"), fresh("o8e")
        if force:
            s0 = fresh("s8e")
            make_src(s0, {"x.bin": 100})
            run("pack", s0, dst2)
        else:
            os.makedirs(dst2)
        os.chmod(dst2, 0o2777)
        r = run("pack", *(["--force"] if force else []), src, dst2)
        u = run("unpack", dst2, out)
        check("8: an existing%s 2777 DST, SRC 0700: narrowed to 2700 with a note, so is OUT (0700)" %
              (" packed" if force else " empty"),
              r.returncode == 0 and os.stat(dst2).st_mode & 0o7777 == 0o2700 and "narrowed to 2700" in r.stderr and
              u.returncode == 0 and mode(out) == 0o700, r.stderr.strip() + oct(os.stat(dst2).st_mode & 0o7777))
    # under umask 077 the directories kept the umask's 0700 (recorded so, and
    # given back so by unpack and the mount) and the manifest was 0600 in a
    # 0755 DST: the pack depended on the umask of whoever made it
    src, dst, out = fresh("s8u"), fresh("d8u"), fresh("o8u")
    make_src(src, {"sub/a.bin": 3000, "b.bin": 3000})
    os.chmod(src, 0o755)
    os.chmod(os.path.join(src, "sub"), 0o750)
    os.chmod(os.path.join(src, "sub", "a.bin"), 0o640)
    old = os.umask(0o077)
    try:
        r = run("pack", src, dst)
        u = run("unpack", dst, out)
    finally:
        os.umask(old)
    got = [mode(os.path.join(d, p)) for d in (dst, out) for p in ("", "sub")]
    check("8: umask 077: DST and its directories have the source's modes (0755, 0750), so has unpack's output",
          r.returncode == 0 and u.returncode == 0 and got == [0o755, 0o750] * 2, r.stderr + u.stderr + str(list(map(oct, got))))
    check("8: umask 077: the manifest is readable by whoever can read every packed file (0640: sub/a.bin is 0640 "
          "in a 0750 directory)", mode(os.path.join(dst, "ckptfs.manifest")) == 0o640,
          oct(mode(os.path.join(dst, "ckptfs.manifest"))))
    # the manifest lists every file's name, size and SHA-256: a 0600 file's,
    # or a 0644 file's in a 0700 directory, were readable by every user of a
    # 0755 DST (its hash is what a guess of a secret needs)
    for files, dirs, want in (({"pub.bin": 0o644, "sec.bin": 0o600}, {}, 0o600),
                              ({"pub.bin": 0o644, "priv/x.bin": 0o644}, {"priv": 0o700}, 0o600),
                              ({"pub.bin": 0o644, "grp/x.bin": 0o644}, {"grp": 0o750}, 0o640),
                              ({"pub.bin": 0o644, "sub/x.bin": 0o644}, {"sub": 0o755}, 0o644)):
        s8, d8 = fresh("s8m"), fresh("d8m")
        make_src(s8, {f: 100 for f in files})
        for f, m in files.items():
            os.chmod(os.path.join(s8, f), m)
        for dname, m in dirs.items():
            os.chmod(os.path.join(s8, dname), m)
        os.chmod(s8, 0o755)
        r = run("pack", s8, d8)
        got = mode(os.path.join(d8, "ckptfs.manifest")) if r.returncode == 0 else None
        check("8: the manifest of a 0755 DST holding %s is %s" % (
              ", ".join("%s %s" % (f, oct(m)) for f, m in sorted(files.items())) +
              "".join(", %s/ %s" % (dn, oct(m)) for dn, m in dirs.items()), oct(want)),
              got == want, r.stderr.strip() + " " + str(got and oct(got)))
    check("8: umask 077: files keep their modes packed and unpacked",
          mode(os.path.join(dst, "sub", "a.bin.ckpt")) == 0o640 and mode(os.path.join(out, "sub", "a.bin")) == 0o640)


def setuid_bits():
    """unpack creates every file owned by whoever runs it (the pack keeps no
    owner), so a setuid or setgid bit given back makes the file run as them:
    a user's setuid-to-themselves script packed and unpacked by root came back
    setuid root (and so would any file of a crafted manifest).  unpack drops
    those two bits of a file; a directory keeps its setgid bit (it only gives
    new files the directory's group)."""
    src, dst, out = fresh("s8s"), fresh("d8s"), fresh("o8s")
    want = make_src(src, {"run.sh": b"#!/bin/sh\nid -u\n", "g/tool": b"#!/bin/sh\nid -g\n", "g/plain.bin": 100})
    os.chown(os.path.join(src, "run.sh"), 1234, 1234)
    os.chmod(os.path.join(src, "run.sh"), 0o4755)
    os.chmod(os.path.join(src, "g", "tool"), 0o2750)
    os.chmod(os.path.join(src, "g", "plain.bin"), 0o6640)
    os.chmod(os.path.join(src, "g"), 0o2775)
    r = run("pack", src, dst)
    u = run("unpack", dst, out)
    mode = lambda p: os.stat(os.path.join(out, p)).st_mode & 0o7777  # noqa: E731
    got = [mode(p) for p in ("run.sh", "g/tool", "g/plain.bin", "g")] if u.returncode == 0 else []
    check("8: unpack drops a file's setuid and setgid bits (0755, 0750, 0640) and keeps a setgid directory (2775)",
          r.returncode == 0 and got == [0o755, 0o750, 0o640, 0o2775], r.stderr + u.stderr + str(list(map(oct, got))))
    check("8: ... and the files' bytes", u.returncode == 0 and tree(out) == want)
    # the mount presents the files as its user's, so the same holds there: a
    # root `cp -a` out of a mount made setuid-root files
    with mounted(dst, fresh("m8s")) as mnt:
        got = [os.stat(os.path.join(mnt, p)).st_mode & 0o7777 for p in ("run.sh", "g/tool", "g/plain.bin", "g")]
    check("8: the mount shows the files without setuid and setgid bits (0755, 0750, 0640), the directory 2775",
          got == [0o755, 0o750, 0o640, 0o2775], str(list(map(oct, got))))


def overlap_by_bind_mount():
    """SRC and DST that overlap by a path the other does not start with: a
    bind mount of a directory inside SRC as DST.  The walk took DST's files
    for sources: a first `pack --delete-source` wrote the pack inside SRC,
    and its rerun packed DST's manifest as a source and deleted it (the
    next, its .ckpt files: the originals packed twice).  Refused before
    anything is written or deleted, and so is SRC reached inside DST."""
    if os.geteuid() != 0:
        print("skip: 11: overlap through a bind mount (not root)")
        return
    b = fresh("b11m")
    make_src(os.path.join(b, "a"), {"x.bin": 5000})
    os.makedirs(os.path.join(b, "a", "packed"))
    os.makedirs(os.path.join(b, "bind"))
    mounted = []
    try:
        subprocess.run(["mount", "--bind", os.path.join(b, "a", "packed"), os.path.join(b, "bind")], check=True)
        mounted.append(os.path.join(b, "bind"))
        r = run("pack", "--delete-source", os.path.join(b, "a"), os.path.join(b, "bind"))
        check("11: DST a bind mount of a directory inside SRC: refused, nothing written or deleted",
              r.returncode == 1 and "overlap" in r.stderr and os.listdir(os.path.join(b, "a", "packed")) == [] and
              os.path.exists(os.path.join(b, "a", "x.bin")), r.stderr.strip())
        subprocess.run(["umount", mounted.pop()], check=True)
        # the other way: SRC is a bind mount of a directory inside an existing DST
        dst = os.path.join(b, "dst")
        make_src(os.path.join(b, "s0"), {"y.bin": 3000})
        run("pack", os.path.join(b, "s0"), dst)
        inner = os.path.join(dst, "inner")
        make_src(inner, {"z.ckpt": 2000})
        subprocess.run(["mount", "--bind", inner, os.path.join(b, "bind")], check=True)
        mounted.append(os.path.join(b, "bind"))
        r = run("pack", "--force", os.path.join(b, "bind"), dst)
        check("11: SRC a bind mount of a directory inside DST: refused, its files kept",
              r.returncode == 1 and "overlap" in r.stderr and os.path.exists(os.path.join(inner, "z.ckpt")),
              r.stderr.strip())
    finally:
        for where in mounted:
            subprocess.run(["umount", where])


def item11():
    b = fresh("b11")
    make_src(os.path.join(b, "src"), {"a.bin": 1000})
    r = run("pack", os.path.join(b, "src"), os.path.join(b, "nx", "..", "src"))
    check("11: pack b/src b/nx/../src refused", r.returncode != 0 and "overlap" in r.stderr, r.stderr)
    check("11: ... creating nothing", sorted(os.listdir(b)) == ["src"] and os.listdir(os.path.join(b, "src")) == ["a.bin"],
          str(os.listdir(b)))
    src, dst = os.path.join(b, "src"), fresh("d11")
    second = {}

    other = fresh("o11")
    make_src(other, {"b.bin": 1000})

    def race():
        second["r"] = run("pack", src, dst)
        second["o"] = run("pack", "--force", other, dst)
        second["v"] = run("verify", dst)
        second["s"] = run("stat", dst)
        second["u"] = run("unpack", dst, os.path.join(b, "out"))
    res = stopped(["pack", src, dst], 1, race)
    r2, v, u = second.get("r"), second.get("v"), second.get("u")
    check("11: a second pack into the same DST is refused",
          r2 is not None and r2.returncode != 0 and "another ckptfs command" in r2.stderr, r2 and r2.stderr)
    busy = "a ckptfs pack is writing it"
    r2 = second.get("o")
    check("11: ... and so is a pack --force of another source",
          r2 is not None and r2.returncode != 0 and "another ckptfs command" in r2.stderr, r2 and r2.stderr)
    check("11: verify during a pack says the pack is being written",
          v is not None and v.returncode == 1 and busy in v.stderr, v and v.stderr)
    st = second.get("s")
    check("11: stat during a pack says the pack is being written (not 'not a packed directory')",
          st is not None and st.returncode == 1 and busy in st.stderr, st and st.stderr)
    check("11: unpack during a pack says so and writes nothing",
          u is not None and u.returncode == 1 and busy in u.stderr and not os.path.exists(os.path.join(b, "out")),
          u and u.stderr)
    check("11: ... and the first finishes", res is not None and res[0] == 0, str(res))
    v = run("verify", dst)
    check("11: ... with a good pack", v.returncode == 0, v.stderr)
    # the other way: a pack into a DST that an unpack is reading waits its turn
    third = {}

    def repack():
        third["r"] = run("pack", "--force", src, dst)
    res = stopped(["unpack", dst, os.path.join(b, "out2")], 1, repack)
    r3 = third.get("r")
    check("11: a pack into a DST being unpacked is refused, saying why",
          r3 is not None and r3.returncode != 0 and "verify or unpack" in r3.stderr, r3 and r3.stderr)
    check("11: ... and the unpack finishes", res is not None and res[0] == 0 and
          tree(os.path.join(b, "out2")) == tree(src), str(res))


try:
    for t in (item3, item3_edited_and_forced, force_keeps_foreign, item4, item5, item6, source_read_error,
              repack_through_mount, replaced_by_special, aside_and_name_both, item6_window, dst_replaced,
              one_packed_name_for_two, failed_first_pack_leaves_nothing, open_for_writing, item7, item8,
              setuid_bits, item11, overlap_by_bind_mount):
        t()
finally:
    shutil.rmtree(T, ignore_errors=True)
sys.exit(done("pack_safety"))
