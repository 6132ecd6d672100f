"""test_s3_careless.py — s3:// as a careless user and a careless script use
it (issue 25), against a real S3 server (SeaweedFS, s3fixture.py), boto3
and the source files the independent truth.

Two writers to one prefix.  `ckptfs pack` A is held in the middle of its
upload (a proxy holds its first part) while `pack --force` B runs to the
end (a second node started by the same script): once released, A stops
with a message naming the other pack, leaves no manifest of its own and no
upload billed, and the pack there is B's, whole (verify, unpack gives B's
bytes).  On the code before, A went on, replaced B's objects and put its
own manifest, and B, told exit 0, had lost its pack.  B held just before
it puts its state (it found the prefix empty) while A packs it from start
to end: B stops naming the other pack, A's pack stays (before: B replaced
it, both exited 0).  Then two packs of two
sources started at once, a few times: whatever each exits with, a pack that
verifies is one source's, byte for byte, and it is the source of the run
that exited 0 (on the code before, both exited 0 and the pack there failed
verify: a manifest of one over objects of the other).  A node with the
pack mounted and reading while `pack --force` replaces it: each read the
old bytes or an error, never a mix.

Names.  A tree whose file and directory names hold spaces, + % # ? & = ~ *
; ' " < >, UTF-8 (é, 中文, emoji), a leading - or ., a tab and a newline,
names of 245 bytes, empty files, a symbolic link, and 1,100 small files in
nested directories (ListObjectsV2 pages of 1,000), packed to a prefix that
holds such characters too: verify --against the source, stat, unpack (every
byte, the link as the link), the mount (as root: every byte), a rerun that
sends nothing.  A backslash on its own (backslash(): SeaweedFS stores `a\\b` as
`a/b`): a pack that exits 0 is whole, else exit 1 naming the file.

The recipe.  docs/object-storage.md's "Recipe: fstab and systemd" run as
written (see recipe()): before 2026-12-07 it put the credentials in
/etc/ckptfs/aws-credentials, which no fstab mount reads (mount.ckptfs
failed: profile models is in neither ~/.aws/credentials nor ~/.aws/config),
and never made the unit's EnvironmentFile.
Usage: test_s3_careless.py CKPTFS
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3proxy import FaultProxy  # noqa: E402
from s3fixture import ACCESS_KEY, SECRET_KEY  # noqa: E402
from s3check import Mount, check, pack_and_upload, server_test, sha  # noqa: E402
from s3util import make_model  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])


def ck(env, *args, timeout=300):
    return subprocess.run([CKPTFS, *args], capture_output=True, text=True, env=env, timeout=timeout)


def digest(root):
    """{relative path: sha256, or ('link', target)} of every file and link below root."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = ("link", os.readlink(p)) if os.path.islink(p) else sha(p)
    return out


def two_sources(tmp):
    """A and B: the same names and sizes, every file's bytes different."""
    a, b = os.path.join(tmp, "A"), os.path.join(tmp, "B")
    make_model(a)
    shutil.copytree(a, b)
    for d, _x, files in os.walk(b):
        for n in files:
            p = os.path.join(d, n)
            data = bytearray(open(p, "rb").read())
            at = 8 + int.from_bytes(data[:8], "little") + 10 if n.endswith(".safetensors") else len(data) - 1
            data[at] ^= 0x40
            with open(p, "wb") as f:
                f.write(data)
    return a, b


def uploads(s3, prefix):
    return s3.client().list_multipart_uploads(Bucket=s3.bucket, Prefix=prefix + "/").get("Uploads", [])


def rival(s3, tmp):
    a, b = two_sources(tmp)
    want = {a: digest(a), b: digest(b)}

    def env(tag, **over):
        return s3.env(CKPTFS_STAGE_DIR=os.path.join(tmp, "stage-" + tag), CKPTFS_S3_PART_MIB="5", **over)

    def result(url, tag):
        """(verify's exit, the source whose bytes unpack gives, or None)."""
        v = ck(s3.env(), "verify", url)
        out = os.path.join(tmp, "out-" + tag)
        u = ck(s3.env(), "unpack", url, out) if v.returncode == 0 else None
        got = digest(out) if u is not None and u.returncode == 0 else None
        shutil.rmtree(out, ignore_errors=True)
        return v.returncode, next((s for s, d in want.items() if d == got), None)

    def while_held(url, stop_at, what, held, held_tag, other, other_tag):
        """`ckptfs pack *held url` through a proxy that holds its first
        request stop_at(method, path) matches while `ckptfs pack *other url`
        runs to its end; then the held one goes on.  @return the held run's
        exit and stderr, and the other's CompletedProcess."""
        gated, release = threading.Event(), threading.Event()

        def gate(m, p, h):
            if stop_at(m, p) and not gated.is_set():
                gated.set()
                release.wait(120)
            return False

        with FaultProxy(s3.port, every=1 << 40, burst=0, gate=gate) as px:
            ph = subprocess.Popen([CKPTFS, "pack", *held, url], env=env(held_tag, AWS_ENDPOINT_URL=px.endpoint),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            check(gated.wait(120), what)
            ro = ck(env(other_tag), "pack", *other, url)
            release.set()
            _o, eh = ph.communicate(timeout=300)
        return ph.returncode, eh, ro

    # A held at its first part while pack --force B runs to the end
    url = s3.url("rival/held")
    rca, ea, rb = while_held(url, lambda m, p: m == "PUT" and "partNumber=" in p,
                             "pack A reached its first part upload", [a], "a", ["--force", b], "b")
    check(rb.returncode == 0, f"pack --force B while A runs: exit 0 ({rb.returncode}: {rb.stderr.strip()[-300:]})")
    check(rca == 1 and "another ckptfs pack to this prefix" in ea,
          f"pack A, overtaken by B: exit 1 naming the other pack ({rca}: {ea.strip()[-1500:]})")
    rc, src = result(url, "held")
    check(rc == 0 and src == b, f"the pack there is B's, whole (verify exit {rc}; unpack gives "
                                f"{'A' if src == a else 'B' if src == b else 'neither'})")
    check(not uploads(s3, "rival/held"), "no multipart upload left billed by the run that stopped")

    # B found no state at its start, and is held before it puts its own
    # while A packs the prefix from start to end: B must not then replace A
    url = s3.url("rival/late")
    rcb, eb, ra = while_held(url, lambda m, p: m in ("HEAD", "PUT") and
                             p.split("?")[0].endswith("/rival/late/ckptfs.state"),
                             "pack B reached its state", [b], "lb", [a], "la")
    check(ra.returncode == 0, f"pack A from start to end while B waits: exit 0 ({ra.returncode}: "
                              f"{ra.stderr.strip()[-300:]})")
    check(rcb == 1 and "another ckptfs pack to this prefix" in eb,
          f"pack B, whose prefix A packed meanwhile: exit 1 naming the other pack ({rcb}: "
          f"{eb.strip()[-400:]})")
    rc, src = result(url, "late")
    check(rc == 0 and src == a, f"the pack there is A's, whole (verify exit {rc}; unpack gives "
                                f"{'A' if src == a else 'B' if src == b else 'neither'})")

    # two packs started at once: a pack that verifies is one source's, the one whose run exited 0
    for t in range(3):
        url = s3.url(f"rival/at-once-{t}")
        ps = [subprocess.Popen([CKPTFS, "pack", s, url], env=env(f"{t}{i}"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for i, s in enumerate((a, b))]
        res = [(p.wait(timeout=300), p.communicate()[1]) for p in ps]
        rc, src = result(url, str(t))
        winners = [s for s, (code, _e) in zip((a, b), res) if code == 0]
        check(rc != 3 and len(winners) <= 1 and (rc != 0 or src in winners),
              f"two packs at once, round {t}: exits {[r[0] for r in res]}, verify {rc}, unpack gives "
              f"{'A' if src == a else 'B' if src == b else 'neither'} "
              f"({'; '.join(e.strip()[-200:] for _c, e in res)})")


def mounted_force(s3, tmp):
    """A node has the pack mounted, two threads reading every file again and
    again, while `pack --force` of another source replaces it: each read
    gives the old bytes or fails (EIO), never anything else (passed before
    this audit too: it guards the promise)."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("skip (mounted while replaced): needs root and /dev/fuse")
        return
    a, b = two_sources(os.path.join(tmp, "mf"))
    da, db = digest(a), digest(b)
    env, url = s3.env(), s3.url("mounted/m")
    r = ck(env, "pack", a, url)
    check(r.returncode == 0, f"pack A: exit 0 ({r.returncode}: {r.stderr.strip()[-300:]})")
    res = {"old": 0, "new": 0, "error": 0, "other": []}
    stop = threading.Event()
    with Mount(url, os.path.join(tmp, "mf-mnt"), env, binary=CKPTFS) as m:
        def reader():
            while not stop.is_set():
                for rel in da:
                    try:
                        h = sha(os.path.join(m.mnt, rel))
                    except OSError:
                        res["error"] += 1
                        continue
                    if h in (da[rel], db[rel]):
                        res["old" if h == da[rel] else "new"] += 1
                    else:
                        res["other"].append(rel)
        ths = [threading.Thread(target=reader) for _ in range(2)]
        for th in ths:
            th.start()
        time.sleep(0.5)
        r = ck(env, "pack", "--force", b, url)
        time.sleep(1)
        stop.set()
        for th in ths:
            th.join()
    check(r.returncode == 0 and res["old"] > 0 and not res["other"],
          f"reads of a mounted pack while pack --force replaces it: the old bytes or an error, never a mix "
          f"(pack exit {r.returncode}; {res})")


NAMES = ["with space", "plus+sign", "pct%20x", "hash#", "q?x", "amp&amp;x", "eq=x", "tilde~", "star*", "semi;c",
         "quote'\"", "lt<gt>", "é", "中文", "emoji😀", "-lead", ".hidden", "tab\tx", "nl\nx", "y" * 245]


def names(s3, tmp):
    src = os.path.join(tmp, "names-src")
    make_model(src)
    odd = os.path.join(src, "dir with ü+%#&=~ 中")
    os.makedirs(odd)
    for i, n in enumerate(NAMES):
        for d in (src, odd):
            with open(os.path.join(d, n), "wb") as f:
                f.write(os.urandom(100 + i))
    shutil.copy(os.path.join(src, "model.safetensors"), os.path.join(odd, "m é+%.safetensors"))
    for n in ("empty", "-empty é"):
        open(os.path.join(odd, n), "wb").close()
    os.symlink("../model.safetensors", os.path.join(odd, "link+é"))
    for i in range(1100):  # past a ListObjectsV2 page
        d = os.path.join(src, "many", f"d{i % 7}", f"e{i % 3}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f {i}+.bin"), "wb") as f:
            f.write(i.to_bytes(4, "little") * (i % 5))
    truth = digest(src)
    env = s3.env()
    prefix = "odd pre+fix/é%20#&=~中"
    url = s3.url(prefix)
    r = ck(env, "pack", src, url)
    check(r.returncode == 0, f"pack of odd names to {url!r}: exit 0 ({r.returncode}: {r.stderr.strip()[-400:]})")
    r = ck(env, "verify", "--against", src, url)
    check(r.returncode == 0, f"verify --against SRC: exit 0 ({r.returncode}: {r.stderr.strip()[-400:]})")
    r = ck(env, "stat", "--json", url)
    n = json.loads(r.stdout).get("files") if r.returncode == 0 and r.stdout.strip().startswith("{") else None
    check(r.returncode == 0, f"stat: exit 0 ({r.returncode}: {r.stderr.strip()[-300:]}; files {n})")
    out = os.path.join(tmp, "names-out")
    r = ck(env, "unpack", url, out)
    got = digest(out) if r.returncode == 0 else {}
    check(r.returncode == 0 and got == truth, f"unpack: every name, byte and link ({r.returncode}: "
                                              f"{r.stderr.strip()[-300:]}; differ: {sorted(set(got) ^ set(truth))[:5]})")
    r = ck(env, "pack", "-v", src, url)
    check(r.returncode == 0 and " 0 packed files sent" in r.stdout,
          f"a rerun sends nothing ({r.returncode}: {r.stdout.strip()[-300:]} {r.stderr.strip()[-300:]})")
    if os.geteuid() == 0 and os.path.exists("/dev/fuse"):
        with Mount(url, os.path.join(tmp, "names-mnt"), env, binary=CKPTFS) as m:
            got = digest(m.mnt)
            check(got == truth, f"the mount: every name, byte and link (differ: {sorted(set(got) ^ set(truth))[:5]})")


def recipe(s3, tmp):
    """docs/object-storage.md's "Recipe: fstab and systemd", as written: its
    shell blocks run (with /root and /etc/ckptfs moved under tmp, and the
    fixture's keys for the placeholders), its fstab line mounted by the
    mount(8) helper (packaging/mount.ckptfs, as `mount -a` runs it: no AWS_*
    in the environment, HOME standing for /root), the bucket, prefix and
    endpoint the fixture's, user svc played by nobody; nobody reads every
    file through it, `umount` unmounts it."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("skip (the recipe): needs root and /dev/fuse")
        return
    root = os.path.dirname(os.path.dirname(HERE))
    doc = open(os.path.join(root, "docs", "object-storage.md"), encoding="utf-8").read()
    sec = doc.split("## Recipe: fstab and systemd")[1].split("\n## ")[0]
    blocks = re.findall(r"```(\w*)\n(.*?)```", sec, re.S)
    fake_root, fake_etc = os.path.join(tmp, "recipe-root"), os.path.join(tmp, "recipe-etc")
    os.makedirs(fake_root, mode=0o700)

    def moved(text):
        return text.replace("/root/", fake_root + "/").replace("/etc/ckptfs", fake_etc)

    for lang, body in blocks:
        if lang == "sh":
            body = moved(body).replace("AKIA...", ACCESS_KEY).replace("= ...\n", "= " + SECRET_KEY + "\n")
            body = body.replace("=...\n", "=" + SECRET_KEY + "\n")
            if re.search(r"/root\b|/etc/", body):  # never the real ones
                check(False, f"the recipe's shell block writes only below /root/ and /etc/ckptfs ({body!r})")
                continue
            r = subprocess.run(["sh", "-e"], input=body, capture_output=True, text=True)
            check(r.returncode == 0, f"the recipe's shell block runs ({r.returncode}: {r.stderr.strip()[-300:]})")
    fstab = [ln.split() for lang, body in blocks if not lang for ln in body.splitlines() if ln.startswith("s3://")]
    check(len(fstab) == 1 and fstab[0][2] == "ckptfs", f"the recipe has one fstab line of type ckptfs ({fstab})")
    if len(fstab) != 1:
        return
    _url, _mnt, _typ, opts = fstab[0][:4]
    src, _packed, _env, url = pack_and_upload(CKPTFS, s3, os.path.join(tmp, "recipe-pack"), make_model, "recipe/m")
    opts = re.sub(r"endpoint=[^,]*", "endpoint=" + s3.endpoint, opts).replace("=svc", "=nobody")
    opts = opts.replace("gid=nobody", "gid=nogroup")
    mnt = os.path.join(tmp, "recipe-mnt")
    os.makedirs(mnt)
    os.chmod(tmp, 0o755)  # nobody must reach the mount point
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=fake_root, CKPTFS=CKPTFS)
    helper = os.path.join(root, "packaging", "mount.ckptfs")

    def nobody_reads(what):
        bad = []
        for rel, want in digest(src).items():
            got = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sha256sum",
                                  os.path.join(mnt, rel)], capture_output=True, text=True).stdout.split(" ")[0]
            if got != want:
                bad.append(rel)
        check(not bad, f"{what}: user nobody (uid=nobody) reads every original byte through it (differ: {bad})")

    r = subprocess.run([helper, url, mnt, "-o", opts], capture_output=True, text=True, env=env, timeout=120)
    check(r.returncode == 0, f"mount.ckptfs {url} MNT -o {opts} (the fstab line): exit 0 "
                             f"({r.returncode}: {r.stderr.strip()[-400:]})")
    try:
        if r.returncode == 0:
            nobody_reads("the fstab line")
    finally:
        u = subprocess.run(["umount", mnt], capture_output=True, text=True)
        if r.returncode == 0:
            check(u.returncode == 0, f"umount MNT: exit 0 ({u.returncode}: {u.stderr.strip()})")
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)

    # the unit: ExecStart= with EnvironmentFile= as systemd reads it (KEY=value lines), then ExecStop=
    unit = next((b for lang, b in blocks if lang == "ini"), "")
    conf = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
    envfile = moved(conf.get("EnvironmentFile", ""))
    uenv = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if os.path.isfile(envfile):
        uenv.update(re.findall(r"^(\w+)=(.*)$", open(envfile).read(), re.M))
    cmd = conf.get("ExecStart", "").split()
    check(bool(cmd) and os.path.isfile(envfile) and oct(os.stat(envfile).st_mode & 0o777) == "0o600",
          f"the unit has ExecStart= and its EnvironmentFile= {envfile} is there, mode 0600")
    if not cmd or not os.path.isfile(envfile):
        return
    cmd = [CKPTFS] + [re.sub(r"endpoint=[^,]*", "endpoint=" + s3.endpoint, a).replace("=svc", "=nobody")
                      .replace("gid=nobody", "gid=nogroup") for a in cmd[1:-2]] + [url, mnt]
    p = subprocess.Popen(["setpriv", "--pdeathsig", "TERM", "--"] + cmd, env=uenv, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not os.path.ismount(mnt) and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        check(os.path.ismount(mnt), f"the unit's ExecStart= mounts ({p.poll()}: "
                                    f"{p.stderr.read().strip()[-400:] if p.poll() is not None else ''})")
        if os.path.ismount(mnt):
            nobody_reads("the unit")
            stop = conf.get("ExecStop", "").split()
            u = subprocess.run([os.path.basename(stop[0])] + stop[1:-1] + [mnt], capture_output=True, text=True)
            check(u.returncode == 0 and p.wait(timeout=30) == 0, f"the unit's ExecStop= unmounts, the daemon exits 0 "
                                                                 f"({u.returncode}: {u.stderr.strip()})")
    finally:
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
        if p.poll() is None:
            p.kill()
        p.wait()
        os.chmod(tmp, 0o700)


def endpoints(s3, tmp):
    """Endpoints as people type them, and a clock that is off: stat of a
    pack either works or exits 1 saying what is wrong and what to do (not
    blaming the credentials when they are right), never showing the secret."""
    src, _packed, env, url = pack_and_upload(CKPTFS, s3, os.path.join(tmp, "ep"), make_model, "ep/m")
    hostport = s3.endpoint.split("://", 1)[1]
    for ep in ("HTTP://" + hostport, s3.endpoint + "/"):
        r = ck(s3.env(AWS_ENDPOINT_URL=ep), "stat", url)
        check(r.returncode == 0, f"endpoint {ep!r}: stat works ({r.returncode}: {r.stderr.strip()[-300:]})")
    for ep in (s3.endpoint + "?x=1", s3.endpoint + "/#frag", s3.endpoint + " "):
        r = ck(s3.env(AWS_ENDPOINT_URL=ep), "stat", url)
        check(r.returncode == 1 and "no query, fragment or space" in r.stderr and "AWS_SECRET" not in r.stderr and
              SECRET_KEY not in r.stderr + r.stdout,
              f"endpoint {ep!r}: exit 1 saying what is wrong with it ({r.returncode}: {r.stderr.strip()[-300:]})")
    if not shutil.which("faketime"):
        print("skip (clock skew): no faketime")
        return
    # libfaketime is preloaded ahead of an ASan build's runtime (the sanitizer
    # run of CI): ASan refuses that order unless told not to check it
    asan = env.get("ASAN_OPTIONS", os.environ.get("ASAN_OPTIONS", ""))
    fenv = dict(env, ASAN_OPTIONS=(asan + ":" if asan else "") + "verify_asan_link_order=0")
    for off in ("+2h", "-20m"):
        r = subprocess.run(["faketime", "-f", off, CKPTFS, "stat", url], capture_output=True, text=True, env=fenv,
                           timeout=300)
        check(r.returncode == 1 and "clock" in r.stderr and "check AWS_ACCESS_KEY_ID" not in r.stderr and
              SECRET_KEY not in r.stderr + r.stdout,
              f"the clock off by {off}: exit 1 saying the clock is wrong, not the keys ({r.returncode}: "
              f"{r.stderr.strip()[-400:]})")


def removed(s3, tmp):
    """A file removed from the source, then the pack run again (a shard
    dropped when a model is re-sharded): the rerun is refused naming it
    (pack alone deletes nothing), `--force` makes the pack the source's as
    it is now, locally and to s3:// (the old file's object deleted).  On
    the code before, both kept the file: verify --against SRC exit 4 and the
    mount showed a shard that is no longer there."""
    src = os.path.join(tmp, "rm-src")
    make_model(src)
    local, url, env = os.path.join(tmp, "rm-packed"), s3.url("removed/m"), s3.env()
    for dst in (local, url):
        r = ck(env, "pack", src, dst)
        check(r.returncode == 0, f"pack SRC {dst}: exit 0 ({r.returncode}: {r.stderr.strip()[-300:]})")
    os.remove(os.path.join(src, "sub", "blob.bin"))
    for dst in (local, url):
        r = ck(env, "pack", src, dst)
        check(r.returncode == 1 and f"{dst}: already exists" in r.stderr and "sub/blob.bin is no longer in the source"
              in r.stderr and "--force" in r.stderr,
              f"pack SRC {dst} again, sub/blob.bin removed from SRC: refused naming it ({r.returncode}: "
              f"{r.stderr.strip()[-300:]})")
        r = ck(env, "pack", "--force", src, dst)
        v = ck(env, "verify", "--against", src, dst)
        check(r.returncode == 0 and v.returncode == 0, f"pack --force SRC {dst}, then verify --against SRC: exit 0, 0 "
                                                       f"({r.returncode}, {v.returncode}: {v.stderr.strip()[-300:]})")
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="removed/m/").get("Contents", [])]
    check("removed/m/sub/blob.bin.ckpt" not in keys and "removed/m/config.json.ckpt" in keys,
          f"the removed file's object is deleted, the others kept ({sorted(keys)})")


def backslash(s3, tmp):
    """A name with a backslash: S3 keeps it, SeaweedFS stores `a\\b` as
    `a/b`.  Either the pack exits 0 and is whole (verify, unpack), or it
    exits 1 naming the file the server did not keep, with no manifest put.
    On the code before: exit 0, and verify found the file missing (exit 3)."""
    src = os.path.join(tmp, "bs-src")
    os.makedirs(src)
    for n in ("back\\slash.bin", "plain.bin"):
        with open(os.path.join(src, n), "wb") as f:
            f.write(os.urandom(1000))
    env, url = s3.env(), s3.url("backslash/m")
    r = ck(env, "pack", src, url)
    v = ck(env, "verify", "--against", src, url)
    if r.returncode == 0:
        check(v.returncode == 0, f"pack of back\\slash.bin exit 0: the pack verifies ({v.returncode}: "
                                 f"{v.stderr.strip()[-300:]})")
    else:
        check(r.returncode == 1 and "back\\\\slash.bin.ckpt: sent, but not in the prefix's listing" in r.stderr and
              v.returncode == 1 and "manifest" not in str(s3.client().list_objects_v2(
                  Bucket=s3.bucket, Prefix="backslash/m/").get("Contents", [])),
              f"pack of back\\slash.bin: exit 1 naming the file the server did not keep, no manifest "
              f"({r.returncode}: {r.stderr.strip()[-300:]}; verify {v.returncode})")


def main():
    # a staging directory of this run's own: the default one is named by
    # bucket and prefix only, and another run of this test at once (another
    # worktree's ctest) would find it locked
    stage = tempfile.mkdtemp(prefix="ckptfs-s3careless-stage-")
    os.environ["CKPTFS_STAGE_DIR"] = stage
    try:
        return server_test("ckptfs-s3careless-", rival, mounted_force, names, recipe, endpoints, removed, backslash)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"{time.time() - t0:.0f} s")
    sys.exit(rc)
