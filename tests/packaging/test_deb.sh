#!/usr/bin/env bash
# test_deb.sh — build the Debian package, install it, and use ONLY what it
# installed: pack a tiny safetensors model with /usr/bin/ckptfs, mount it with
# `mount -t fuse.ckptfs` (which must find /usr/sbin/mount.fuse.ckptfs), compare
# every file with the original, unmount, check the package's file list, the
# pkg-config file and the codec library, then remove the package.
#
# Usage: test_deb.sh [SOURCE_DIR]      (ctest: packaging_deb, label packaging)
# It installs and removes a system package, so it needs root and dpkg and is
# meant for disposable CI machines; it exits 77 (skipped) otherwise, and also
# when a ckptfs package is already installed (CKPTFS_TEST_DEB_FORCE=1 replaces
# it).  CKPTFS_TEST_JOBS sets the build parallelism (default 2);
# CKPTFS_TEST_KEEP=1 keeps the work directory.
set -euo pipefail

SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
JOBS=${CKPTFS_TEST_JOBS:-2}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $*"; }

[ "$(id -u)" = 0 ] || skip "needs root (dpkg -i, mount)"
for t in dpkg dpkg-deb dpkg-query cmake cpack python3 mount umount mountpoint findmnt sha256sum cc pkg-config flock; do
    command -v "$t" >/dev/null 2>&1 || skip "$t not found"
done
[ -c /dev/fuse ] || skip "/dev/fuse missing"
PY=$(command -v python3)
"$PY" -c 'import numpy' 2>/dev/null || skip "python3 numpy missing"
# One run at a time per machine: two suites at once (engineers sharing a
# machine) would install and remove the one system package under each other
# (dpkg's lock held by the other run's `dpkg -r`, or the package gone
# mid-test).  The lock is held until this script exits, cleanup included.
exec 9>/run/lock/ckptfs-test-deb.lock
flock 9
if [ "$(dpkg-query -W -f='${db:Status-Abbrev}' ckptfs 2>/dev/null || true)" = "ii " ] \
   && [ "${CKPTFS_TEST_DEB_FORCE:-0}" != 1 ]; then
    skip "a ckptfs package is already installed (CKPTFS_TEST_DEB_FORCE=1 replaces and then removes it)"
fi

WORK=$(mktemp -d /tmp/ckptfs-deb.XXXXXX)
MODEL=$WORK/model PACKED=$WORK/model.packed MNT=$WORK/mnt MNT2=$WORK/mnt2
installed=0
cleanup() {
    rc=$?
    for m in "$MNT" "$MNT2"; do
        if mountpoint -q "$m" 2>/dev/null; then umount "$m" 2>/dev/null || umount -l "$m" || true; fi
    done
    if [ "$installed" = 1 ]; then dpkg -P ckptfs >/dev/null 2>&1 || true; fi
    if [ "${CKPTFS_TEST_KEEP:-0}" = 1 ] || [ "$rc" != 0 ]; then
        echo "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT

# ---- build the package -------------------------------------------------------
step "configure + build (Release, no GPU) in $WORK/build"
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DCKPTFS_GPU=OFF \
      -DCMAKE_INSTALL_PREFIX=/usr >"$WORK/configure.log" 2>&1 \
    || { tail -30 "$WORK/configure.log"; fail "configure"; }
cmake --build "$WORK/build" -j "$JOBS" >"$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/build.log"; fail "build"; }
step "cpack -G DEB"
(cd "$WORK/build" && cpack -G DEB) >"$WORK/cpack.log" 2>&1 \
    || { tail -30 "$WORK/cpack.log"; fail "cpack"; }
DEB=$(ls "$WORK"/build/ckptfs_*.deb)
version=$(dpkg-deb -f "$DEB" Version)
depends=$(dpkg-deb -f "$DEB" Depends)
echo "package: $(basename "$DEB")  Depends: $depends"
for d in fuse3 libfuse3-3 libzstd1 libcjson1 libssl3; do
    [[ ", $depends," == *", $d"[\ ,]* ]] || fail "Depends lacks $d"
done

step "dpkg -i"
installed=1
dpkg -i "$DEB" >"$WORK/dpkg-i.log" 2>&1 || { cat "$WORK/dpkg-i.log"; fail "dpkg -i"; }

# From here on only installed files are used: the build tree is removed.
rm -rf "$WORK/build"
CK=/usr/bin/ckptfs
[ -x $CK ] || fail "$CK not installed"

step "ckptfs --version"
vout=$($CK --version) || fail "--version exited $?"
echo "$vout"
grep -qF "$version" <<<"$vout" || fail "--version does not print the program version $version"
grep -qiE 'format.*[0-9]+\.[0-9]+' <<<"$vout" || fail "--version does not print the format version"

# ---- a tiny model ------------------------------------------------------------
step "generate a tiny safetensors model"
mkdir -p "$MODEL" "$MNT" "$MNT2"
"$PY" - "$MODEL" <<'PY'
import json, os, struct, sys
import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(1234)

def bf16(a):
    """float32 -> BF16 bits, round to nearest even (NaN-free input)."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def write_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, data) in tensors.items():
        b = data.tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)

def gauss(*shape):
    return bf16(rng.normal(0.0, 0.02, size=shape)).reshape(shape)

# Shard 1: large enough for several chunks, with an odd-sized tensor and
# values that need escapes (zeros, large magnitudes, negative zero, inf).
w = gauss(300, 1031)
w.flat[::997] = 0x0000
w.flat[5::1009] = 0x8000
w.flat[7::4099] = bf16(np.float32(3.0e4))
w.flat[11] = 0x7F80
write_safetensors(os.path.join(out, "model-00001-of-00002.safetensors"), {
    "model.embed.weight": ("BF16", w.shape, w),
    "model.layers.0.attn.q.weight": ("BF16", (257, 129), gauss(257, 129)),
    "model.layers.0.norm.weight": ("F32", (1031,), rng.normal(1, 0.1, 1031).astype(np.float32)),
}, metadata={"format": "pt"})
# Shard 2: keys not sorted, an empty tensor, an I64 tensor.
write_safetensors(os.path.join(out, "model-00002-of-00002.safetensors"), {
    "lm_head.weight": ("BF16", (64, 4099), gauss(64, 4099)),
    "model.layers.1.empty": ("BF16", (0, 16), np.zeros((0, 16), np.uint16)),
    "model.layers.1.ids": ("I64", (33,), np.arange(33, dtype=np.int64)),
    "model.layers.1.mlp.weight": ("BF16", (3,), gauss(3)),
}, metadata={"format": "pt", "note": "key order and spacing must survive"})
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump({"architectures": ["Tiny"], "hidden_size": 1031, "torch_dtype": "bfloat16"}, f, indent=2)
os.makedirs(os.path.join(out, "tokenizer"), exist_ok=True)
with open(os.path.join(out, "tokenizer", "vocab.txt"), "w") as f:
    f.write("".join("tok%d\n" % i for i in range(5000)))
open(os.path.join(out, "empty.txt"), "w").close()
PY
(cd "$MODEL" && find . -type f | LC_ALL=C sort | xargs -d '\n' sha256sum) >"$WORK/model.sha256"
du -sb "$MODEL"

step "ckptfs pack / verify / stat"
$CK pack "$MODEL" "$PACKED" || fail "pack exited $?"
$CK verify --against "$MODEL" "$PACKED" || fail "verify exited $?"
$CK stat "$PACKED" || fail "stat exited $?"
$CK stat --json "$PACKED" | "$PY" -c 'import json,sys; json.load(sys.stdin)' || fail "stat --json is not JSON"

# ---- mount through mount(8) ----------------------------------------------------
compare_tree() {  # $1 = mount point
    local got
    got=$( (cd "$1" && find . -type f | LC_ALL=C sort | xargs -d '\n' sha256sum) ) || fail "reading $1"
    diff <(echo "$got") "$WORK/model.sha256" || fail "files under $1 differ from the originals"
    # mmap(MAP_SHARED) reads, as older safetensors versions do.
    "$PY" - "$MODEL" "$1" <<'PY' || fail "mmap reads under $1 differ"
import mmap, os, sys
src, mnt = sys.argv[1], sys.argv[2]
for d, _, files in os.walk(src):
    for n in files:
        p = os.path.join(d, n)
        q = os.path.join(mnt, os.path.relpath(p, src))
        want = open(p, "rb").read()
        if not want:
            continue
        with open(q, "rb") as f, mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) as m:
            assert m[:] == want, q
PY
}

step "mount -t fuse.ckptfs (fstab-style options)"
mount -t fuse.ckptfs -o ro,allow_other,cache_size=64M,threads=2,nofail "$PACKED" "$MNT" \
    || fail "mount -t fuse.ckptfs exited $? (is /usr/sbin/mount.fuse.ckptfs installed?)"
mountpoint -q "$MNT" || fail "$MNT is not a mount point after mount"
fstype=$(findmnt -n -o FSTYPE --mountpoint "$MNT")
[ "$fstype" = fuse.ckptfs ] || fail "mount type is '$fstype', expected fuse.ckptfs (subtype=ckptfs)"
findmnt -n -o OPTIONS --mountpoint "$MNT" | grep -qE '(^|,)ro(,|$)' || fail "mount is not read-only"
compare_tree "$MNT"
if touch "$MNT/new" 2>/dev/null; then fail "could create a file on the read-only mount"; fi
step "umount"
umount "$MNT" || fail "umount exited $?"
mountpoint -q "$MNT" && fail "$MNT still mounted after umount"
for _ in $(seq 50); do
    pgrep -f -- "$PACKED" >/dev/null || break
    sleep 0.1
done
pgrep -f -- "$PACKED" >/dev/null && fail "the daemon of $MNT still runs after umount"

# An fstab line (a file of our own: mount -T), mounted by `mount -a` twice:
# the mount's source is the packed directory, so the second run sees the
# line as mounted and does nothing; then unmounted by its source.
# (util-linux takes a directory argument of umount for a mount point first;
# -c, no canonicalization, makes it look the source up in mountinfo.)
step "fstab: mount -a twice, umount by source"
echo "$PACKED $MNT fuse.ckptfs ro,cache_size=16M,nofail 0 0" >"$WORK/fstab"
mount -a -T "$WORK/fstab" || fail "mount -a exited $?"
mountpoint -q "$MNT" || fail "mount -a did not mount $MNT"
src=$(findmnt -n -o SOURCE --mountpoint "$MNT")
[ "$src" = "$PACKED" ] || fail "the mount's source is '$src', the fstab line's is $PACKED"
mount -a -T "$WORK/fstab" || fail "a second mount -a exited $? (the line is mounted already)"
n=$(findmnt -n -o TARGET --mountpoint "$MNT" | wc -l)
[ "$n" = 1 ] || fail "a second mount -a stacked a mount ($n at $MNT)"
cmp "$MODEL/config.json" "$MNT/config.json" || fail "config.json differs after mount -a twice"
umount -c "$PACKED" || fail "umount -c PACKED (by source) exited $?"
mountpoint -q "$MNT" && fail "$MNT still mounted after umount by source"

# What ckptfs@.service does: foreground daemon, stopped by umount(8).
step "ckptfs mount -f, then umount (as the systemd unit does)"
$CK mount -f -o ro "$PACKED" "$MNT2" &
fg_pid=$!
for _ in $(seq 100); do mountpoint -q "$MNT2" && break; sleep 0.1; done
mountpoint -q "$MNT2" || fail "ckptfs mount -f did not mount within 10 s"
cmp "$MODEL/config.json" "$MNT2/config.json" || fail "config.json differs under $MNT2"
umount "$MNT2" || fail "umount $MNT2"
fg_rc=0; wait "$fg_pid" || fg_rc=$?
[ "$fg_rc" = 0 ] || fail "ckptfs mount -f exited $fg_rc after a clean unmount"

# ---- what the package holds --------------------------------------------------
step "dpkg -L ckptfs"
files=$(dpkg -L ckptfs)
for want in /usr/bin/ckptfs /usr/sbin/mount.ckptfs /usr/sbin/mount.fuse.ckptfs \
            /usr/share/man/man1/ckptfs.1.gz /usr/include/ckptfs/ckc.h /usr/include/ckptfs/ckc_decode.h \
            /usr/share/doc/ckptfs/examples/example.mount /usr/share/doc/ckptfs/examples/example.conf \
            /usr/include/ckptfs/ckread.h /usr/lib/python3/dist-packages/ckptfs_gpu_hf.py \
            /usr/lib/python3/dist-packages/ckptfs_gpu.py \
            /usr/share/man/man8/mount.ckptfs.8.gz /usr/share/man/man8/mount.fuse.ckptfs.8.gz \
            /usr/share/bash-completion/completions/ckptfs \
            /usr/share/doc/ckptfs/copyright /usr/share/doc/ckptfs/format.md; do
    grep -qxF "$want" <<<"$files" || fail "package lacks $want"
done
unit=$(grep -E '/systemd/system/ckptfs@\.service$' <<<"$files") || fail "package lacks ckptfs@.service"
pcfile=$(grep -E '/pkgconfig/ckptfs\.pc$' <<<"$files") || fail "package lacks ckptfs.pc"
grep -qE '/libckc\.(a|so)$' <<<"$files" || fail "package lacks libckc"
grep -qE '/libckread\.so$' <<<"$files" || fail "package lacks libckread.so"
grep -q "^ExecStart=/usr/bin/ckptfs mount -f " "$unit" || fail "$unit does not run /usr/bin/ckptfs"
if command -v systemd-analyze >/dev/null 2>&1; then
    systemd-analyze verify --man=no "$(dirname "$unit")/ckptfs@pkgtest.service" || fail "systemd-analyze verify $unit"
fi
if command -v man >/dev/null 2>&1; then
    man -w ckptfs >/dev/null || fail "man -w ckptfs does not find the page"
    MANWIDTH=80 man ckptfs 2>&1 | grep -q "SECURITY AND TRUST" || fail "man ckptfs does not render"
    for page in ckptfs mount.ckptfs mount.fuse.ckptfs; do
        for sec in ENVIRONMENT "EXIT STATUS"; do
            MANWIDTH=80 man "$page" 2>/dev/null | grep -q "^$sec" || fail "man $page has no $sec section"
        done
    done
    MANWIDTH=80 man mount.ckptfs 2>/dev/null | grep -q "^ *32 *The mount failed" || fail "man mount.ckptfs: exit 32 not documented"
fi
zcat /usr/share/man/man8/mount.ckptfs.8.gz | grep -q '^\.SH EXIT STATUS' || fail "mount.ckptfs.8 lacks EXIT STATUS"
grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' /usr/share/doc/ckptfs/copyright ||
    grep -qi 'license' /usr/share/doc/ckptfs/copyright || fail "copyright file states nothing"
grep -q '^# ckptfs' /usr/share/doc/ckptfs/format.md || fail "format.md is not the spec: $(head -1 /usr/share/doc/ckptfs/format.md)"

step "bash completion"
comp=$(bash -c 'source /usr/share/bash-completion/completions/ckptfs && complete -p ckptfs &&
    COMP_WORDS=(ckptfs pa); COMP_CWORD=1; _ckptfs; echo "1:${COMPREPLY[*]}";
    COMP_WORDS=(ckptfs pack --form); COMP_CWORD=2; _ckptfs; echo "2:${COMPREPLY[*]}";
    COMP_WORDS=(ckptfs pack --format ""); COMP_CWORD=3; _ckptfs; echo "3:${COMPREPLY[*]}"') ||
    fail "the installed completion does not load"
grep -q '^complete -F _ckptfs ckptfs$' <<<"$comp" || fail "completion not registered: $comp"
grep -qx '1:pack' <<<"$comp" && grep -qx '2:--format' <<<"$comp" && grep -qx '3:k15 bytesplit archive' <<<"$comp" ||
    fail "completion gives: $comp"

step "pkg-config + link a program against the installed codec"
pkg-config --cflags --libs ckptfs || fail "pkg-config ckptfs"
[ "$(pkg-config --modversion ckptfs)" = "$version" ] || fail "ckptfs.pc version is not $version"
cat >"$WORK/use_ckc.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <ckc.h>
#include <ckptfs/ckc_decode.h>
int main(void) {
    const char *e = ckc_encoding_name(CKC_ENC_K15), *s = ckc_status_name(CKC_OK);
    printf("%s %s\n", e, s);
    return strcmp(e, "k15") != 0;
}
C
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$WORK/use_ckc" "$WORK/use_ckc.c" $(pkg-config --cflags --libs ckptfs) \
    || fail "a program using ckc.h does not build against the installed library"
"$WORK/use_ckc" || fail "the program linked against libckc failed"

step "the installed Python modules and libckread (Debian's python3 -I: nothing from this tree)"
# the system interpreter is the one a package's dist-packages serves (this
# tree's tests may run another, e.g. pyenv's); it has neither torch nor numpy
# here, so tensors are read into ctypes buffers and compared with their bytes
# in the original files
SYSPY=/usr/bin/python3
[ -x "$SYSPY" ] || fail "no $SYSPY, the interpreter the package's modules are for"
(cd / && "$SYSPY" -I - "$MODEL" "$PACKED" <<'PY') || fail "serving modules of the package"
import ctypes, json, os, struct, sys
import ckptfs_gpu_hf as h
model, packed = sys.argv[1], sys.argv[2]
assert h.__file__.startswith("/usr/lib/python3/dist-packages/"), h.__file__
d = h.PackedDir(packed)  # libckread.so through the dynamic loader's search path

class Out:  # what read_rows_into needs of a tensor: a contiguous buffer
    def __init__(self, n):
        self.b = ctypes.create_string_buffer(max(n, 1))
        self.n = n
    def data_ptr(self): return ctypes.addressof(self.b)
    def numel(self): return self.n
    def element_size(self): return 1

n = 0
for rel, size in d.files.items():
    raw = open(os.path.join(model, rel), "rb").read()
    assert size == len(raw), rel
    if not rel.endswith(".safetensors"):
        assert d.read_file(rel) == raw, rel
        continue
    hl = struct.unpack("<Q", raw[:8])[0]
    for name, t in json.loads(raw[8:8 + hl]).items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out = Out(b - a)
        d.read_rows_into(name, out)
        assert out.b.raw[:b - a] == raw[8 + hl + a:8 + hl + b], name
        n += 1
assert n > 0 and any(t.packed for t in d.tensors.values())
print(f"{n} tensors read through libckread, each equal to its bytes in the original file")
PY

# ---- removal -------------------------------------------------------------------
step "dpkg -r ckptfs"
dpkg -r ckptfs >"$WORK/dpkg-r.log" 2>&1 || { cat "$WORK/dpkg-r.log"; fail "dpkg -r"; }
for gone in /usr/bin/ckptfs /usr/sbin/mount.ckptfs /usr/sbin/mount.fuse.ckptfs "$unit" "$pcfile" \
            /usr/lib/python3/dist-packages/ckptfs_gpu_hf.py; do
    if [ -e "$gone" ] || [ -L "$gone" ]; then fail "$gone is still there after dpkg -r"; fi
done
pkg-config --exists ckptfs 2>/dev/null && fail "pkg-config still finds ckptfs after dpkg -r"
# Leave no "rc" (removed, config-files) entry behind.
dpkg -P ckptfs >/dev/null 2>&1 || fail "dpkg -P"
installed=0
[ -z "$(dpkg-query -W -f='${db:Status-Abbrev}' ckptfs 2>/dev/null || true)" ] || fail "dpkg still knows ckptfs after purge"
echo "PASS: packaging_deb"
