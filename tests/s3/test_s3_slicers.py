"""test_s3_slicers.py — what `ckptfs mount s3://` fetches for readers that
slice (issue 25: "a slicer fetches only the chunks its slices touch"),
against a real S3 server (SeaweedFS), by the daemon's counters:

1. one process taking an eighth of every tensor's rows with safetensors'
   get_slice (through a mapping, as tensor-parallel loaders do): the right
   tensors, and packed bytes fetched within the bound the mount keeps
   (docs/object-storage.md, How it works): those of the chunks the kernel's
   reads touched (the daemon's read_bytes), plus at most the decode-ahead
   (prefetch, 1 MiB) and a chunk at each end per run of reads (up to 4 runs
   per slice: the kernel's readahead jumps about);
2. the same with read_ahead_kb=128, where the kernel reads little around a
   slice: under 0.3x the packed size for an eighth of every tensor (the
   code before 3 December fetched the rest of a file for a slice of its
   first or last tensor: 0.44x);
3. four such processes at once, two eighths each: every slice right, the
   model fetched once (packed bytes fetched <= 1.02x the packed size);
4. one process streaming every file whole: the model fetched once, in
   windows of several MiB (at most 3 range GETs per MiB of original bytes);
   its second file (the process known as a streamer by then) in windows of
   whole 16 MiB tensors, one range GET each (planes merged): at most
   2 x (1 + tensors) GETs for it (the code before made 19: 8 MiB windows,
   a GET per plane, the file's first reads in windows of their own);
5. eight processes at once, an eighth each, started together: every slice
   right, the model fetched once, and the tensors' rest fetched in whole
   windows once a second process reads them, not a window per slice and
   plane: at most 20 range GETs per tensor besides the files' opens (the
   code before made 167 for 4 tensors: 57 windows of 3 GETs).
6. read-ahead for readers sharing tensors (a model of 3 files): two
   processes at once, each slicing an eighth of the first tensor of the
   first file only, have the daemon fetch the file's next tensor before any
   reader touches it (a third process slicing it makes no range GET), and
   nothing of the next file (no process read a file before together with
   another); two more slicing the first tensor of the second file (coming
   from the first, read together) have it fetch the rest of that file and
   the third file too (opened ahead): a third process slicing every tensor
   not read yet makes no range GET.  Every slice right, the model fetched
   once (<= 1.02x packed).  The code before fetched nothing past a tensor
   until a second reader reached it (the third readers made windows of
   their own: range GETs).
Usage: test_s3_slicers.py CKPTFS          (root and /dev/fuse; else skipped: 77)
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3check import MB, Mount, check, fetch_note, mount_test, sha, tree  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])
FILES, TENSORS, ROWS, COLS = 2, 2, 2048, 4096       # 16 MiB BF16 tensors, 2 per file
CHUNK = 128 << 10                                   # original bytes per BF16 chunk (format §5)
PREFETCH = 1 * MB                                   # the mount's default decode-ahead

# one reader process: the eighths K (comma-separated) of every tensor of every
# file, compared with the original's; prints "ok N" (slices compared) or "bad NAME".
# With a fourth argument it prints "ready" once imported and waits for a line
# on stdin before it reads (slicers started together, however slow the imports);
# a fifth one, F:T,... (file and tensor indexes, files sorted by name), reads
# those tensors only
SLICER = r"""
import os, sys, torch
from safetensors import safe_open
src, mnt, ks = sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3].split(",")]
want = sys.argv[5].split(",") if len(sys.argv) > 5 else None
if len(sys.argv) > 4:
    print("ready", flush=True)
    sys.stdin.readline()
n = 0
for fi, name in enumerate(sorted(x for x in os.listdir(src) if x.endswith(".safetensors"))):
    with safe_open(os.path.join(mnt, name), "pt") as y, safe_open(os.path.join(src, name), "pt") as x:
        for ti, t in enumerate(y.keys()):
            if want is not None and f"{fi}:{ti}" not in want:
                continue
            rows = y.get_slice(t).get_shape()[0]
            for k in ks:
                lo, hi = rows * k // 8, rows * (k + 1) // 8
                if not torch.equal(y.get_slice(t)[lo:hi], x.get_slice(t)[lo:hi]):
                    print("bad", name, t, k)
                    sys.exit(1)
                n += 1
print("ok", n)
"""


def start(src, mnt, jobs):
    """One SLICER process per (eighth, tensors) in jobs, each imported and
    waiting at its gate on return."""
    ps = [subprocess.Popen([sys.executable, "-c", SLICER, src, mnt, str(k), "gate", ",".join(ts)],
                           stdout=subprocess.PIPE,
                           stdin=subprocess.PIPE, text=True) for k, ts in jobs]
    return ps, [p.stdout.readline().strip() == "ready" for p in ps]


def release(started, jobs):
    """Open the gates of start()'s processes at once; True if each got its
    slices right."""
    ps, ready = started
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=300)[0] for p in ps]
    return all(ready) and all(p.returncode == 0 and o.split() == ["ok", str(len(ts))]
                              for p, o, (_k, ts) in zip(ps, outs, jobs)), outs


def make_model(src, files=FILES):
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(25)
    for f in range(files):
        save_file({f"layers.{f * TENSORS + t}.weight": (torch.randn(ROWS, COLS) * 0.02).to(torch.bfloat16)
                   for t in range(TENSORS)}, os.path.join(src, f"model-{f}.safetensors"))


def slicers(src, mnt, groups, gate=False):
    """One process per group of eighths, all at once (gate: all imported
    before any reads); True if each got its slices right."""
    extra = ["gate"] if gate else []
    ps = [subprocess.Popen([sys.executable, "-c", SLICER, src, mnt, g] + extra, stdout=subprocess.PIPE,
                           stdin=subprocess.PIPE, text=True) for g in groups]
    if gate:
        ready = [p.stdout.readline().strip() == "ready" for p in ps]
        for p in ps:
            p.stdin.write("go\n")
            p.stdin.flush()
        if not all(ready):
            for p in ps:
                p.kill()
    outs = [p.communicate(timeout=300)[0] for p in ps]
    return all(p.returncode == 0 and o.split() == ["ok", str(FILES * TENSORS * len(g.split(",")))]
               for p, o, g in zip(ps, outs, groups)), outs


def main():
    return mount_test("ckptfs-s3sl-", run)


def run(s3, tmp, mounts):
    src, packed = os.path.join(tmp, "src"), os.path.join(tmp, "packed")
    os.makedirs(src)
    make_model(src)
    subprocess.run([CKPTFS, "pack", src, packed], check=True, capture_output=True)
    s3.upload_dir(packed, "m")
    orig = sum(os.path.getsize(p) for p in tree(src).values())
    psize = sum(os.path.getsize(p) for k, p in tree(packed).items() if k.endswith(".ckpt"))
    ratio = psize / orig

    def mount(name, opts=""):
        m = Mount(s3.url("m"), os.path.join(tmp, name), s3.env(), opts)
        mounts.append(m)
        return m

    # 1. one slicer alone, an eighth (the fourth: mid-tensor) of every tensor
    with mount("one") as m:
        ok, outs = slicers(src, m.mnt, ["3"])
        check(ok, f"one slicer: every eighth equals the original's ({outs[0].strip()})")
        st = m.stats()
        runs = FILES * TENSORS * 4 + FILES   # runs of reads: up to 4 per slice (the kernel's reads jump), the headers
        bound = ratio * 1.1 * (st["read_bytes"] + runs * (PREFETCH + 2 * CHUNK))
        got = st["s3_packed_bytes_fetched"]
        print(f"one slicer: kernel asked {st['read_bytes']} bytes of {orig}; fetched {got} packed bytes "
              f"({got / psize:.3f}x packed), {st['s3_range_gets']} range GETs; bound {bound:.0f}")
        check(got <= bound, f"one slicer: packed bytes fetched {got} <= those of the bytes read + "
              f"prefetch past each run ({bound:.0f})")

    # 2. the same with the kernel's readahead at 128 KiB (read_ahead_kb=128):
    #    the kernel's reads around a slice are few
    with mount("one128", "read_ahead_kb=128") as m:
        ok, outs = slicers(src, m.mnt, ["3"])
        check(ok, f"one slicer, read_ahead_kb=128: every eighth equals the original's ({outs[0].strip()})")
        st = m.stats()
        got = st["s3_packed_bytes_fetched"]
        print(f"one slicer, read_ahead_kb=128: kernel asked {st['read_bytes']} bytes; fetched {got / psize:.3f}x packed")
        check(got < psize * 0.3, f"one slicer of an eighth, read_ahead_kb=128: packed bytes fetched {got} < 0.3 x "
              f"packed {psize}")

    # 3. four slicers at once, two eighths each (k and k + 4): the model fetched once
    with mount("four") as m:
        ok, outs = slicers(src, m.mnt, [f"{k},{k + 4}" for k in range(4)])
        check(ok, "4 slicers at once: every eighth equals the original's")
        st = m.stats()
        got = st["s3_packed_bytes_fetched"]
        print(f"4 slicers: fetched {got / psize:.3f}x packed, {st['s3_range_gets']} range GETs")
        check(got <= 1.02 * psize, f"4 slicers: packed bytes fetched {got} <= 1.02 x packed {psize}" + fetch_note(st))

    # 4. one streaming reader, file after file; the second file's GETs apart
    #    (opened first: its header, TOC and indexes are s3open's)
    with mount("stream") as m:
        names = sorted(tree(src))
        same = sha(os.path.join(m.mnt, names[0])) == sha(os.path.join(src, names[0]))
        fd = os.open(os.path.join(m.mnt, names[1]), os.O_RDONLY)
        try:
            g0 = m.stats()["s3_range_gets"]
            same &= sha(os.path.join(m.mnt, names[1])) == sha(os.path.join(src, names[1]))
            second = m.stats()["s3_range_gets"] - g0
        finally:
            os.close(fd)
        check(same, "a streaming reader: every file's SHA-256 right")
        st = m.stats()
        got, gets = st["s3_packed_bytes_fetched"], st["s3_range_gets"]
        print(f"stream: fetched {got / psize:.3f}x packed, {gets} range GETs, {second} for the second file's reads")
        check(got <= 1.02 * psize, f"stream: packed bytes fetched {got} <= 1.02 x packed {psize}" + fetch_note(st))
        check(gets <= 3 * orig / MB, f"stream: {gets} range GETs <= 3 per MiB of original bytes ({3 * orig // MB})")
        check(second <= 2 * (1 + TENSORS), f"stream: the second file read in {second} range GETs <= "
              f"{2 * (1 + TENSORS)} (windows of whole tensors, one GET each)")

    # 5. eight slicers at once, an eighth each, started together (files opened
    #    first, so that the GETs counted are the windows')
    with mount("eight") as m:
        fds = [os.open(os.path.join(m.mnt, k), os.O_RDONLY) for k in sorted(tree(src))]
        try:
            g0 = m.stats()["s3_range_gets"]
            ok, outs = slicers(src, m.mnt, [str(k) for k in range(8)], gate=True)
        finally:
            for fd in fds:
                os.close(fd)
        check(ok, "8 slicers at once: every eighth equals the original's")
        st = m.stats()
        got, gets = st["s3_packed_bytes_fetched"], st["s3_range_gets"] - g0
        print(f"8 slicers: fetched {got / psize:.3f}x packed, {gets} range GETs after the opens, "
              f"{st['direct_loads']} windows")
        check(got <= 1.02 * psize, f"8 slicers: packed bytes fetched {got} <= 1.02 x packed {psize}" + fetch_note(st))
        check(gets <= 20 * FILES * TENSORS, f"8 slicers: {gets} range GETs <= 20 per tensor ({20 * FILES * TENSORS})")

    # 6. readers sharing tensors get the next ones ahead (a model of 3 files)
    ahead(s3, tmp, mounts)


def ahead(s3, tmp, mounts):
    src, packed = os.path.join(tmp, "src3"), os.path.join(tmp, "packed3")
    os.makedirs(src)
    make_model(src, 3)
    subprocess.run([CKPTFS, "pack", src, packed], check=True, capture_output=True)
    s3.upload_dir(packed, "m3")
    ck = {k: os.path.getsize(p) for k, p in tree(packed).items() if k.endswith(".ckpt")}
    psize = sum(ck.values())
    m = Mount(s3.url("m3"), os.path.join(tmp, "ahead"), s3.env(), "read_ahead_kb=128")
    mounts.append(m)
    with m:
        # all imported first: the second pair starts right after the first
        # (within the 10 s in which a file counts as read together)
        first, second = [(0, ["0:0"]), (4, ["0:0"])], [(0, ["1:0"]), (4, ["1:0"])]
        p1, p2 = start(src, m.mnt, first), start(src, m.mnt, second)
        ok, outs = release(p1, first)
        check(ok, f"2 slicers of the first file's first tensor: their eighths equal the original's ({outs})")
        st = m.stats()
        got, bound = st["s3_packed_bytes_fetched"], 1.02 * ck["model-0.safetensors.ckpt"]
        print(f"ahead: 2 slicers of the first file's first tensor: fetched {got} packed bytes "
              f"({got / psize:.3f}x packed), {st.get('s3_shared_ahead')} tensors asked for ahead")
        check(got <= bound, f"ahead: nothing of the next file fetched for 2 processes reading one file together: "
              f"packed bytes fetched {got} <= 1.02 x the first file's ({bound:.0f})")
        check(st.get("s3_shared_ahead", 0) <= TENSORS - 1, f"ahead: tensors asked for ahead of them "
              f"{st.get('s3_shared_ahead', 0)} <= {TENSORS - 1} (the first file's)")
        ok, outs = release(p2, second)
        check(ok, f"2 slicers of the second file's first tensor: their eighths equal the original's ({outs})")
        g0 = m.stats()["s3_range_gets"]
        rest = ["0:1", "1:1", "2:0", "2:1"]
        ok, outs = release(start(src, m.mnt, [(2, rest)]), [(2, rest)])
        check(ok, f"a third reader of tensors {rest}: its eighths equal the original's ({outs})")
        st = m.stats()
        gets, got = st["s3_range_gets"] - g0, st["s3_packed_bytes_fetched"]
        print(f"ahead: the third reader of tensors {rest} made {gets} range GETs; fetched {got / psize:.3f}x packed; "
              f"{st.get('s3_shared_ahead')} tensors asked for ahead")
        check(gets == 0, f"ahead: tensors {rest} were fetched before any reader touched them: the third reader "
              f"made {gets} range GETs (0)")
        check(got <= 1.02 * psize, f"ahead: packed bytes fetched {got} <= 1.02 x packed {psize}")


if __name__ == "__main__":
    sys.exit(main())
