#!/usr/bin/env bash
# test_cli.sh CKPTFS [--big] — the pack/unpack/verify/stat commands, end to end,
# against the original bytes: every file round-trips bit for bit, bad input is
# refused with a message naming the file and no output, an existing DST is not
# overwritten, --delete-source and resume lose nothing.
set -uo pipefail
CK=${1:?usage: test_cli.sh path/to/ckptfs [--big]}
BIG=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/ckptfs-cli.XXXXXX)
trap 'umount "$T/small" 2>/dev/null; rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

# tree_sums DIR: sha256, size and mode of every file, and the directory list
tree_sums() {
  (cd "$1" && find . -type f -printf '%P %s %m\n' | sort && find . -type d -printf 'dir %P\n' | sort &&
   find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

# --big: only a file over 4 GiB, through pack, verify, the mount and unpack.
# Its source is sparse; at most one packed and one unpacked copy exist at a
# time (~7 GiB of disk), since CI machines may have little to spare.
if [ -n "$BIG" ]; then
  python3 "$HERE/gen_model.py" "$T/src" --big || { echo "cannot generate the model"; exit 1; }
  S="$T/src/big.safetensors"
  size=$(stat -c %s "$S")
  for fmt in bytesplit k15; do
    "$CK" pack --format $fmt "$S" "$T/p-$fmt"
    check "over 4 GiB, $fmt: pack exits 0" test $? -eq 0
    check "over 4 GiB, $fmt: verify --against the original" "$CK" verify --against "$S" "$T/p-$fmt"
    [ $fmt = k15 ] || rm -rf "$T/p-$fmt"
  done
  mkdir "$T/mnt"
  "$CK" mount -f "$T/p-k15" "$T/mnt" 2> "$T/mount.log" &
  mpid=$!
  for _ in $(seq 100); do mountpoint -q "$T/mnt" && break; sleep 0.1; done
  trap 'fusermount3 -u "$T/mnt" 2>/dev/null; rm -rf "$T"' EXIT
  check "over 4 GiB, mount: size" test "$(stat -c %s "$T/mnt/big.safetensors")" = "$size"
  range() { dd if="$1" bs=64K iflag=skip_bytes,count_bytes skip="$2" count=300000 status=none; }
  for off in 0 $((2**31 - 4099)) $((2**32 - 150001)) $((2**32 + 8)) $((size - 300000)); do
    check "over 4 GiB, mount: bytes at $off" cmp <(range "$S" $off) <(range "$T/mnt/big.safetensors" $off)
  done
  fusermount3 -u "$T/mnt"
  wait $mpid
  check "over 4 GiB, mount: clean unmount" test $? -eq 0
  "$CK" unpack "$T/p-k15" "$T/u-big"
  check "over 4 GiB: unpack equals the original" cmp "$S" "$T/u-big/big.safetensors"
  echo "$pass passed, $fail failed"
  test $fail -eq 0
  exit
fi

# each command's own --help: its synopsis, its options, an example; exit 0.
# Usage errors exit 2 (mount's too), with the command's synopsis.
for c in pack unpack verify stat mount; do
  "$CK" $c --help > "$T/help" 2>&1
  check "$c --help: exit 0" test $? -eq 0
  check "$c --help: own synopsis and an example" \
    sh -c "grep -q '^usage: ckptfs $c ' '$T/help' && grep -q 'Example: *ckptfs $c ' '$T/help'"
  "$CK" help $c | cmp -s - "$T/help"
  check "ckptfs help $c = ckptfs $c --help" test $? -eq 0
  "$CK" $c > /dev/null 2> "$T/err"
  check "$c without arguments: exit 2" test $? -eq 2
  "$CK" $c --no-such-option a b > /dev/null 2> "$T/err"
  check "$c --no-such-option: exit 2" test $? -eq 2
  check "$c --no-such-option: the message names the command and the option" \
    sh -c "grep -q \"^ckptfs $c: .*no-such-option\" '$T/err'"
done
check "pack --help: names its options and arguments" \
  sh -c "$CK pack --help | grep -q -- '--delete-source' && $CK pack --help | grep -q 'SRC PACKED'"
check "unpack --help: PACKED OUT" sh -c "$CK unpack --help | grep -q '^usage: ckptfs unpack .* PACKED OUT$'"
check "verify --help: documents exit 3 and 4" sh -c "$CK verify --help | grep -q '3 a packed file is damaged, 4'"
check "mount --help: PACKED MOUNTPOINT" sh -c "$CK mount --help | grep -q 'PACKED MOUNTPOINT'"
"$CK" mount -o no_such_option "$T" "$T" 2> "$T/err"
check "mount -o unknown option: exit 2, names it" sh -c "test $? -eq 2 && grep -q no_such_option '$T/err'"
"$CK" mount -o ro,endpiont=http://someone:hunter2@10.9.9.9 "s3://b/p" "$T" 2> "$T/err"
check "mount -o mistyped endpoint: exit 2, names the key, never its value" \
  sh -c "test $? -eq 2 && grep -q \"'endpiont'\" '$T/err' && ! grep -q hunter2 '$T/err'"
"$CK" stat --jobs 2 "$T" 2> "$T/err"
check "stat --jobs: exit 2, says it does not apply" sh -c "test $? -eq 2 && grep -q 'does not apply' '$T/err'"
"$CK" frobnicate 2> /dev/null
check "unknown command: exit 2" test $? -eq 2

python3 "$HERE/gen_model.py" "$T/src" || { echo "cannot generate the model"; exit 1; }
tree_sums "$T/src" > "$T/src.sums"

for fmt in k15 bytesplit; do
  "$CK" pack --format $fmt "$T/src" "$T/p-$fmt" 2> "$T/err" > "$T/out"
  check "$fmt: pack exits 0" test $? -eq 0
  check "$fmt: off a terminal, plain progress lines (start, end), no bar" \
    sh -c "grep -qx 'packing: 1.38 MB to do' '$T/err' && grep -q '^packing: 1.38 MB of 1.38 MB (100%), [0-9.]* [kMG]B/s$' '$T/err' &&
           ! grep -q \"$(printf '\r')\" '$T/err'"
  check "$fmt: a summary: files, bytes in -> out, saved, time, rate" \
    grep -q "^packed 8 files: 1.38 MB -> [0-9.]* [kM]B ([0-9.]*% saved) in [0-9.]* s, [0-9.]* [kMG]B/s$" "$T/out"
  check "$fmt: source untouched" diff -q <(tree_sums "$T/src") "$T/src.sums"
  check "$fmt: verify --against" "$CK" verify --against "$T/src" "$T/p-$fmt"
  "$CK" unpack "$T/p-$fmt" "$T/u-$fmt"
  check "$fmt: unpack equals the source (bytes, sizes, modes, tree)" diff -q <(tree_sums "$T/u-$fmt") "$T/src.sums"
  check "$fmt: mtimes kept" test "$(stat -c %Y "$T/u-$fmt/config.json")" = "$(stat -c %Y "$T/src/config.json")"
  "$CK" stat --json "$T/p-$fmt" > "$T/stat.json"
  check "$fmt: stat --json fields" python3 -c "
import json,sys; s=json.load(open('$T/stat.json'))
for k in ('original_bytes','packed_bytes','bf16_weights','bf16_bits_per_weight','escape_rate'): assert k in s, k
assert s['original_bytes'] > s['packed_bytes'] > 0 and s['bf16_weights'] > 0
lim = 11.6 if '$fmt' == 'k15' else 12.4   # small model: headers and padding weigh more
assert s['bf16_bits_per_weight'] < lim, s['bf16_bits_per_weight']
# per file: every source file once, its original size the source's, the sums the totals
import os
files = {f['path']: f for f in s['by_file']}
src = {os.path.relpath(os.path.join(d, n), '$T/src'): os.path.getsize(os.path.join(d, n))
       for d, _, ns in os.walk('$T/src') for n in ns}
assert set(files) == set(src), (set(files) ^ set(src))
for p, f in files.items():
    assert f['original_bytes'] == src[p], p
    assert f['packed_bytes'] == os.path.getsize('$T/p-$fmt/' + p + '.ckpt'), p
    for k in ('saved_fraction', 'bf16_bits_per_weight', 'escape_rate', 'encodings'): assert k in f, (p, k)
assert sum(f['original_bytes'] for f in files.values()) == s['original_bytes']
assert sum(f['bf16_weights'] for f in files.values()) == s['bf16_weights']
assert s['packed_bytes'] == sum(f['packed_bytes'] for f in files.values()) + s['manifest_bytes']
sh = files['model-00001-of-00002.safetensors']
assert sh['bf16_weights'] > 0 and 0 < sh['escape_rate'] < 0.2 and '$fmt' in sh['encodings'].split('+')"
  "$CK" stat "$T/p-$fmt" > "$T/stat.txt"
  check "$fmt: stat text: human units, a row per file, a total" \
    sh -c "grep -q '^$T/p-$fmt: 8 files, 1.38 MB -> [0-9.]* [kM]B ([0-9.]*% saved)$' '$T/stat.txt' &&
           grep -q '^  file  *original  *packed  *saved  *bits/w  *escapes  *encoding$' '$T/stat.txt' &&
           grep -q '^  model-00002-of-00002.safetensors  *[0-9.]* kB  *[0-9.]* kB  *[0-9.]*%  *1[0-9].[0-9][0-9]  *[0-9.]*%' '$T/stat.txt' &&
           grep -q '^  nested/deeper/tokenizer.json ' '$T/stat.txt' && grep -q '^  total (with the manifest) ' '$T/stat.txt'"
done

# several files at once (--jobs 8: 4 files in flight, 2 encoder threads each)
"$CK" pack --jobs 8 "$T/src" "$T/p-par" 2> "$T/err"
check "--jobs 8: pack exits 0" test $? -eq 0
"$CK" unpack --jobs 8 "$T/p-par" "$T/u-par"
check "--jobs 8: unpack equals the source" diff -q <(tree_sums "$T/u-par") "$T/src.sums"
check "--jobs 8: same packed bytes as one file at a time" \
  sh -c "cd '$T/p-k15' && find . -name '*.ckpt' | sort | xargs sha256sum > '$T/a.sums' && cd '$T/p-par' && sha256sum -c --quiet '$T/a.sums'"
rm -rf "$T/u-par"

# one .safetensors file as SRC
"$CK" pack "$T/src/nested/adapter.safetensors" "$T/p-one" && "$CK" unpack "$T/p-one" "$T/u-one"
check "single file: round trip" cmp "$T/src/nested/adapter.safetensors" "$T/u-one/adapter.safetensors"
check "single file: verify --against the file" "$CK" verify --against "$T/src/nested/adapter.safetensors" "$T/p-one"
"$CK" verify --against "$T/src/config.json" "$T/p-k15" 2> "$T/err"
check "verify --against a file for a directory pack: refused, says why" grep -q "is a file but" "$T/err"
cp -a "$T/src" "$T/changed" && printf 'x' >> "$T/changed/config.json"
"$CK" verify --jobs 8 --against "$T/changed" "$T/p-k15" 2> "$T/err"
check "verify --against a changed source: exit 4 (differs)" test $? -eq 4
check "verify --against a changed source: names it, does not call the pack damaged" \
  sh -c "grep -q 'changed/config.json: size differs' '$T/err' && grep -q '1 of 8 files differs from the source' '$T/err' && ! grep -q damaged '$T/err'"

"$CK" unpack "$T/p-one" "$T/no-such-dir/out" 2> "$T/err"
check "unpack into a directory that does not exist: exit 1 naming OUT, not the staging directory" \
  sh -c "test $? -eq 1 && grep -q 'no-such-dir/out: the directory it would go in does not exist' '$T/err' &&
         ! grep -q ckptfs-partial '$T/err'"
cp -a "$T/src" "$T/added" && printf 'new' > "$T/added/new.bin" && mkdir -p "$T/added/newdir/deeper" &&
  printf 'x' > "$T/added/newdir/deeper/x.bin"
"$CK" verify --against "$T/added" "$T/p-k15" 2> "$T/err"
check "verify --against a source holding files the pack lacks: exit 4, names them (a directory once)" \
  sh -c "test $? -eq 4 && grep -q 'added/new.bin: in the source but not in the pack' '$T/err' &&
         grep -q 'added/newdir: a directory in the source but not in the pack' '$T/err' && ! grep -q deeper '$T/err' &&
         grep -q '2 files or directories of the source .* are not in the pack' '$T/err'"
rm -rf "$T/added"

# an existing DST is not overwritten unless asked; the same command again is
# a resume with nothing left to do
"$CK" pack "$T/src/nested" "$T/p-k15" 2> "$T/err"
check "existing DST of another source: refused" test $? -ne 0
check "existing DST: says so" grep -q "already exists" "$T/err"
check "existing DST: intact" "$CK" verify --against "$T/src" "$T/p-k15"
"$CK" pack --progress=plain "$T/src" "$T/p-k15" > "$T/out" 2> "$T/err"
check "same command again: exit 0, still complete" "$CK" verify --against "$T/src" "$T/p-k15"
check "same command again: the summary says the files were kept, and gives no rate for work not done" \
  sh -c "grep -q '^packed 8 files: .* in [0-9.]* s (8 files already packed by an earlier run, kept)$' '$T/out' &&
         grep -q '^packing: 1.38 MB of 1.38 MB (100%), 0 B/s$' '$T/err'"
"$CK" pack --progress=none "$T/src" "$T/p-k15" > "$T/out" 2> "$T/err"
check "--progress=none: no progress, still the summary" sh -c "test ! -s '$T/err' && grep -q '^packed 8 files' '$T/out'"
"$CK" verify --progress=plain "$T/p-k15" > "$T/out" 2> "$T/err"
check "verify: progress lines off a terminal and a summary with time and rate" \
  sh -c "grep -q '^verifying: 1.38 MB of 1.38 MB (100%)' '$T/err' && grep -q 'all checksums ok ([0-9.]* s, [0-9.]* [kMG]B/s)$' '$T/out'"
"$CK" unpack "$T/p-k15" "$T/u-sum" > "$T/out" 2> "$T/err"
check "unpack: progress lines off a terminal and a summary" \
  sh -c "grep -q '^unpacking: 1.38 MB of 1.38 MB (100%)' '$T/err' && grep -q '^unpacked 8 files: [0-9.]* kB -> 1.38 MB in [0-9.]* s, ' '$T/out'"
rm -rf "$T/u-sum"
"$CK" pack --progress=sometimes "$T/src" "$T/p-k15" 2> "$T/err"
check "--progress=sometimes: exit 2, says the choices" sh -c "test $? -eq 2 && grep -q 'auto, bar, plain or none' '$T/err'"
if command -v script > /dev/null; then
  # script's terminal has no size here: COLUMNS gives one (without, plain lines)
  COLUMNS=100 TERM=xterm script -qc "'$CK' verify '$T/p-k15'" /dev/null > "$T/tty" 2>&1
  check "on a terminal: a bar with bytes, rate and ETA, and the summary" \
    sh -c "grep -q 'verifying \\[#*\\] 100% 1.38 MB / 1.38 MB  .*B/s  ETA 0:00' '$T/tty' && grep -q 'all checksums ok' '$T/tty'"
fi
mkdir "$T/notpack" && echo precious > "$T/notpack/file"
"$CK" pack "$T/src" "$T/notpack" 2> "$T/err"
check "a foreign non-empty directory: refused, no --force advice (it would refuse too)" \
  sh -c "grep -q 'is not a packed directory; pack into a new or empty' '$T/err' && ! grep -q 'use --force' '$T/err'"
"$CK" pack --force "$T/src" "$T/notpack" 2> "$T/err"
check "--force on a foreign directory: refused" test $? -ne 0
check "--force on a foreign directory: file kept" grep -q precious "$T/notpack/file"

# messages that name the object and say what to do
for c in verify stat; do
  "$CK" $c "$T/src" 2> "$T/err"
  check "$c of a source directory: exit 1, says run ckptfs pack first" \
    sh -c "test $? -eq 1 && grep -q '$T/src: not a packed directory (no ckptfs.manifest): run .ckptfs pack SRC $T/src. first' '$T/err'"
done
"$CK" unpack "$T/src" "$T/u-notpacked" 2> "$T/err"
check "unpack of a source directory: says run ckptfs pack first, no output" \
  sh -c "grep -q 'run .ckptfs pack' '$T/err' && test ! -e '$T/u-notpacked'"
cp -a "$T/p-bytesplit" "$T/unfinished" && rm "$T/unfinished/ckptfs.manifest"
"$CK" verify "$T/unfinished" 2> "$T/err"
check "unfinished pack: says run the same pack command again" \
  grep -q "unfinished pack (no ckptfs.manifest yet): run the same .ckptfs pack. command again to finish it" "$T/err"
# set_version FILE MAJOR MINOR: a packed file's format version, its header
# checksum fixed up (format §3.1: version at bytes 8-11, XXH3 of 0-55 at 56)
set_version() {
  python3 - "$@" <<'PY'
import struct, sys, xxhash
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
b[8:12] = struct.pack("<HH", int(sys.argv[2]), int(sys.argv[3]))
b[56:64] = struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(b[:56])))
open(p, "wb").write(b)
PY
}
# a packed file of a newer format version (minor 9)
cp -a "$T/p-bytesplit" "$T/newer"
set_version "$T/newer/config.json.ckpt" 1 9
"$CK" verify "$T/newer" 2> "$T/err"
check "newer format version: verify exits 1, not 3 (damaged)" test $? -eq 1
check "newer format version: says written by a newer ckptfs, upgrade; not damaged" \
  sh -c "grep -q 'config.json.ckpt: format version 1.9 (flags 0) was written by a newer ckptfs; upgrade ckptfs' '$T/err' &&
         grep -q '1 of 8 files uses a format version this ckptfs cannot read' '$T/err' && ! grep -q damaged '$T/err'"
# format major 0 (no release wrote it): unsupported, but not 'newer' and not damage
cp -a "$T/p-bytesplit" "$T/major0"
set_version "$T/major0/config.json.ckpt" 0 0
"$CK" verify "$T/major0" 2> "$T/err"
check "format major 0: verify exits 1, not 3 (damaged)" test $? -eq 1
check "format major 0: says no release writes it, not 'newer', not damaged" \
  sh -c "grep -q 'config.json.ckpt: format version 0.0 is not one that any ckptfs release writes' '$T/err' &&
         ! grep -q 'written by a newer' '$T/err' && ! grep -q damaged '$T/err'"
"$CK" pack --force --format bytesplit "$T/src/nested" "$T/p-k15" 2> "$T/err"
check "--force replaces a pack" "$CK" verify --against "$T/src/nested" "$T/p-k15"
check "--force leaves no stale files" test ! -e "$T/p-k15/config.json.ckpt"
"$CK" pack "$T/src" "$T/src/inside" 2> "$T/err"
check "DST inside SRC: refused" test $? -ne 0 -a ! -e "$T/src/inside"

# bad input: clear error naming the file, non-zero exit, no output
mkbad() { # name, python code writing $T/bad/<name>/x.safetensors
  mkdir -p "$T/bad/$1"
  python3 - "$T/bad/$1/x.safetensors" <<PY
import struct, sys, json
p = sys.argv[1]
def w(h, data=b"", n=None):
    h = h.encode() if isinstance(h, str) else h
    open(p, "wb").write(struct.pack("<Q", len(h) if n is None else n) + h + data)
t = lambda d, s, o: json.dumps({"a": {"dtype": d, "shape": s, "data_offsets": o}})
$2
PY
}
mkbad truncated   'w(t("BF16", [4], [0, 8]), b"\0" * 5)'
mkbad header_past 'w(t("BF16", [2], [0, 4]), b"\0" * 4, n=10**6)'
mkbad short       'open(p, "wb").write(b"\x05\0\0")'
mkbad json        'w("{\"a\": {", b"")'
mkbad dtype       'w(t("BF17", [2], [0, 4]), b"\0" * 4)'
mkbad shape       'w(t("BF16", [3], [0, 4]), b"\0" * 4)'
mkbad reversed    'w(t("BF16", [2], [4, 0]), b"\0" * 4)'
mkbad range       'w(t("BF16", [2], [8, 12]), b"\0" * 4)'
mkbad overlap     'w(json.dumps({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}, "b": {"dtype": "BF16", "shape": [2], "data_offsets": [2, 6]}}), b"\0" * 6)'
mkbad huge        'w("{}", b"", n=200 * 10**6)'
mkbad notobject   'w("[1, 2, 3]", b"")'
for d in "$T"/bad/*; do
  name=$(basename "$d")
  cp "$T/src/config.json" "$d/"   # a good file beside it: must not be packed either
  "$CK" pack "$d" "$T/out-$name" 2> "$T/err"
  rc=$?
  check "bad input $name: non-zero exit" test $rc -ne 0
  check "bad input $name: message names the file" grep -q "x.safetensors" "$T/err"
  check "bad input $name: no output" test ! -e "$T/out-$name"
done

# --delete-source: sources go only when their packed copy is safe
cp -a "$T/src" "$T/del"
"$CK" pack --jobs 6 --delete-source "$T/del" "$T/p-del" > "$T/out"
check "delete-source: exit 0" test $? -eq 0
check "delete-source: the summary says what was removed" \
  grep -qx "deleted 8 source files (1.38 MB) and 2 empty source directories" "$T/out"
check "delete-source: no source files left" test -z "$(find "$T/del" -type f)"
"$CK" unpack "$T/p-del" "$T/u-del"
check "delete-source: everything recoverable" diff -q <(tree_sums "$T/u-del") "$T/src.sums"

# resume: a removed packed file and a stale temporary are repaired by rerunning
cp -a "$T/src" "$T/res"
"$CK" pack "$T/res" "$T/p-res" >/dev/null
rm "$T/p-res/model-00002-of-00002.safetensors.ckpt" "$T/p-res/ckptfs.manifest"
echo junk > "$T/p-res/.config.json.ckpt.tmp"
"$CK" pack "$T/res" "$T/p-res"
check "resume: exit 0" test $? -eq 0
check "resume: temporary removed" test ! -e "$T/p-res/.config.json.ckpt.tmp"
check "resume: complete again" "$CK" verify --against "$T/res" "$T/p-res"
"$CK" pack --format bytesplit "$T/res" "$T/p-res" 2> "$T/err"
check "resume with another format: refused" test $? -ne 0

# out of space (a 600 KiB tmpfs; root only): a clear error, no temporary left,
# and the same command on a disk with room finishes the job
if [ "$(id -u)" = 0 ] && mkdir "$T/small" && mount -t tmpfs -o size=600k tmpfs "$T/small" 2>/dev/null; then
  # checked up front (an estimate with a margin): refused, nothing written
  "$CK" pack "$T/src" "$T/small/p" 2> "$T/err"
  check "out of space: pack refused before writing (exit 1)" test $? -eq 1
  check "out of space: pack says how much is needed and free, and what to do" \
    sh -c "grep -q '^ckptfs pack: not enough free space for packing into $T/small/p: about [0-9.]* [kM]B needed' '$T/err' &&
           grep -q 'free.\$' '$T/err' && grep -q 'Free some space there' '$T/err'"
  check "out of space: nothing written" test ! -e "$T/small/p"
  "$CK" unpack "$T/p-del" "$T/small/u" 2> "$T/err"
  check "out of space: unpack refused before writing, names what it needs" \
    sh -c "test $? -eq 1 && grep -q 'not enough free space for unpacking $T/p-del: about' '$T/err' &&
           test ! -e '$T/small/u' && test ! -e '$T/small/u.ckptfs-partial'"
  # past the check (--no-space-check), unpack's ENOSPC says what to do too
  "$CK" unpack --no-space-check "$T/p-del" "$T/small/u" 2> "$T/err"
  check "out of space: unpack's No space left on device says what to do, leaves nothing" \
    sh -c "test $? -eq 1 && grep -q 'No space left on device; nothing was kept: free space' '$T/err' &&
           grep -q 'run the same command again' '$T/err' && test ! -e '$T/small/u' && test ! -e '$T/small/u.ckptfs-partial'"
  "$CK" pack --no-space-check "$T/src" "$T/small/p" 2> "$T/err"
  check "out of space: pack fails" test $? -ne 0
  check "out of space: says so" grep -q "No space left on device" "$T/err"
  check "out of space: names the destination, what is free and needed, what to do" \
    sh -c "grep -q '^ckptfs pack: $T/small/p: No space left on device (writing $T/small/p/' '$T/err' &&
           grep -q 'free there; the files not yet packed' '$T/err' && grep -q 'need up to [0-9.]* [kM]B more' '$T/err' &&
           grep -q 'run the same command again to finish it' '$T/err'"
  check "out of space: no temporary file left" test -z "$(find "$T/small" -name '*.tmp')"
  # what it says is free is what is free once its partial file is gone (it
  # said "0 B", measured with the partial file still there)
  said=$(sed -n 's/.*): \([0-9.]*\) \([kMG]*B\) free there.*/\1 \2/p' "$T/err" | head -1)
  avail=$(stat -f -c '%a %S' "$T/small" | awk '{print $1 * $2}')
  check "out of space: the free space it states is there after it ($said, $avail B)" \
    awk -v s="$said" -v a="$avail" 'BEGIN { split(s, x, " "); m = x[2] == "kB" ? 1e3 : x[2] == "MB" ? 1e6 : x[2] == "GB" ? 1e9 : 1;
                                          b = x[1] * m; exit !(s != "" && b <= a * 1.01 + 10 && b >= a * 0.99 - 10) }'
  cp -a "$T/small/p" "$T/p-resumed"
  umount "$T/small"
  "$CK" pack "$T/src" "$T/p-resumed"
  check "out of space: rerun elsewhere completes" "$CK" verify --against "$T/src" "$T/p-resumed"
else
  echo "skip out-of-space checks (needs root to mount a tmpfs)"
fi

# every failure names its cause and the next step (issue 27 item 4)
"$CK" pack "$T/nope" "$T/out1" 2> "$T/err"
check "pack of a missing SRC: exit 1, names the source (not the destination), nothing written" \
  sh -c "test $? -eq 1 && grep -q '^ckptfs pack: $T/nope: no such file or directory: the source to pack' '$T/err' &&
         ! grep -q out1 '$T/err' && test ! -e '$T/out1'"
"$CK" help nonexistent > "$T/out" 2> "$T/err"
check "help nonexistent: exit 2, says so" sh -c "test $? -eq 2 && grep -q 'no command \"nonexistent\"' '$T/err'"
mkdir -p "$T/emptydir"
for args in "unpack $T/u-swapped $T/p-bytesplit" "mount $T/emptydir $T/p-bytesplit" \
            "verify --against $T/p-bytesplit $T/src" "pack $T/p-bytesplit $T/src2"; do
  # shellcheck disable=SC2086
  "$CK" $args > /dev/null 2> "$T/err"
  rc=$?
  check "swapped arguments ($args): exit 2, recognised, the right order given" \
    sh -c "test $rc -eq 2 && grep -q '$T/p-bytesplit is a packed directory' '$T/err' && grep -q 'The order is: ckptfs ${args%% *} ' '$T/err'"
done
check "swapped arguments: nothing written" sh -c "test ! -e '$T/u-swapped' && test ! -e '$T/src2' && test -z \"\$(ls -A '$T/emptydir')\""
# Ctrl-C (SIGINT) during pack and unpack says how to go on; the rerun finishes
interrupt() { # interrupt OUT ARGS...: run ckptfs ARGS stopped at its 2nd durable step, SIGINT it there
  python3 - "$CK" "$@" <<'PYEOF'
import os, signal, subprocess, sys, time
out, args = sys.argv[2], [sys.argv[1]] + sys.argv[3:]
p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(out, "w"), env=dict(os.environ, CKPTFS_FAULT="stop:2"))
while p.poll() is None and open("/proc/%d/stat" % p.pid).read().rsplit(")", 1)[1].split()[0] != "T":
    time.sleep(0.01)
os.kill(p.pid, signal.SIGINT); os.kill(p.pid, signal.SIGCONT)
sys.exit(0 if p.wait() == -signal.SIGINT else 1)
PYEOF
}
interrupt "$T/err" pack "$T/src" "$T/p-int"
check "Ctrl-C during pack: dies of SIGINT, says the rerun resumes" \
  sh -c "test $? -eq 0 && grep -q 'ckptfs pack: interrupted. The files packed so far are kept: run the same command again to resume' '$T/err'"
"$CK" pack "$T/src" "$T/p-int" > /dev/null 2>&1 && "$CK" verify --against "$T/src" "$T/p-int" > /dev/null 2>&1
check "Ctrl-C during pack: the same command again finishes the pack" test $? -eq 0
interrupt "$T/err" unpack "$T/p-int" "$T/u-int"
check "Ctrl-C during unpack: dies of SIGINT, says to run it again, no OUT" \
  sh -c "test $? -eq 0 && grep -q 'ckptfs unpack: interrupted. Nothing is in OUT yet: run the same command again' '$T/err' && test ! -e '$T/u-int'"
"$CK" unpack "$T/p-int" "$T/u-int" > /dev/null 2>&1
check "Ctrl-C during unpack: the same command again gives the originals" diff -q <(tree_sums "$T/u-int") "$T/src.sums"

# one wording: "1 file", a file that grew is said to grow (not "0.0% saved"),
# a long path in stat's table keeps its start and end around a marker
mkdir -p "$T/grow/a-rather-long-directory-name/and-another-deeper-one"
head -c 10 /dev/urandom > "$T/grow/a-rather-long-directory-name/and-another-deeper-one/tiny-file.bin"
"$CK" pack --progress=none "$T/grow" "$T/p-grow" > "$T/out" 2>&1
check "wording: 'packed 1 file', grown: '(grew N%)'" grep -q '^packed 1 file: 10 B -> [0-9]* B (grew [0-9.]*%) in ' "$T/out"
"$CK" stat "$T/p-grow" > "$T/out"
check "wording: stat says '1 file' and 'grew'" grep -q "^$T/p-grow: 1 file, 10 B -> [0-9]* B (grew [0-9.]*%)$" "$T/out"
check "stat table: a long path shortened in the middle with a marker, its end whole" \
  sh -c "grep -q '^  a-rather-lon\.\.\.per-one/tiny-file.bin  *10 B  *[0-9]* B  *grew ' '$T/out' && ! grep -q '% saved\|0\.0%' '$T/out'"
"$CK" verify "$T/p-grow" > "$T/out"
check "wording: verify says '1 file'" grep -q "^$T/p-grow: 1 file, 10 B: all checksums ok" "$T/out"

# the progress bar on a terminal: one line, never wider than the terminal
# (each redraw), plain lines where TERM=dumb; a 24 MB shard gives redraws
python3 - "$T/bar-src/w.safetensors" <<'PYEOF'
import json, os, struct, sys
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
n = 12 << 20
h = json.dumps({"w": {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}}).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + os.urandom(2 * n))
PYEOF
onpty() { # onpty COLS TERM OUT ARGS...: run ckptfs ARGS with stderr on a pseudo-terminal COLS wide
  python3 - "$CK" "$@" <<'PYEOF'
import fcntl, os, pty, struct, subprocess, sys, termios
ck, cols, term, out, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
m, s = pty.openpty()
fcntl.ioctl(s, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
env = dict(os.environ, TERM=term); env.pop("COLUMNS", None)
p = subprocess.Popen([ck] + args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=s, env=env)
os.close(s)
data = b""
while True:
    try:
        b = os.read(m, 65536)
    except OSError:
        break
    if not b:
        break
    data += b
p.wait()
open(out, "wb").write(data)
PYEOF
}
for cols in 50 30; do
  rm -rf "$T/bar-p"
  onpty $cols xterm "$T/bar.out" pack "$T/bar-src" "$T/bar-p"
  check "progress bar, $cols columns: every redraw fits, one line, a bar where it fits" python3 - "$T/bar.out" $cols <<'PYEOF'
import sys
d = open(sys.argv[1], "rb").read().decode().replace("\033[K", "")
cols = int(sys.argv[2])
lines = d.replace("\r\n", "\n").split("\n")
bar = [x for x in lines if "\r" in x]  # the bar's line: redraws after \r
assert len(bar) == 1, lines
draws = [x for x in bar[0].split("\r") if x]
assert draws and all(len(x) < cols for x in draws), [(len(x), x) for x in draws]
assert all(x.startswith("packing") for x in draws), draws
assert (cols >= 50) == ("[" in draws[-1] and "100%" in draws[-1]), draws[-1]
print(len(draws), "redraws, widest", max(map(len, draws)))
PYEOF
done
rm -rf "$T/bar-p"
onpty 50 dumb "$T/bar.out" pack "$T/bar-src" "$T/bar-p"
check "progress on a TERM=dumb terminal: plain lines, no redraw" python3 - "$T/bar.out" <<'PYEOF'
import re, sys
d = open(sys.argv[1], "rb").read().decode().replace("\r\n", "\n")
assert "\r" not in d and "\033" not in d and "[#" not in d, repr(d[:300])
assert re.search(r"^packing: .* to do$", d, re.M), d
PYEOF

# a bad safetensors file: named, "nothing was packed" and the ways on; all
# of them, not only the first; --skip-bad stores it as an opaque file
mkdir -p "$T/badst/sub" && : > "$T/badst/empty.safetensors" && printf 'not a header' > "$T/badst/sub/junk.safetensors" &&
  cp "$T/src/config.json" "$T/badst/"
"$CK" pack "$T/badst" "$T/p-badst" > /dev/null 2> "$T/err"
check "bad safetensors: exit 1, each named, nothing was packed, --skip-bad or remove" \
  sh -c "test $? -eq 1 && grep -q 'badst/empty.safetensors: invalid safetensors file' '$T/err' &&
         grep -q 'badst/sub/junk.safetensors: invalid safetensors file' '$T/err' &&
         grep -q '2 bad safetensors files (see above): nothing was packed' '$T/err' && grep -q -- '--skip-bad' '$T/err' &&
         test ! -e '$T/p-badst'"
"$CK" pack --skip-bad "$T/badst" "$T/p-badst" > /dev/null 2> "$T/err" && "$CK" unpack "$T/p-badst" "$T/u-badst" > /dev/null 2>&1
check "--skip-bad: packed as opaque files, unpacked byte for byte" \
  sh -c "cmp '$T/badst/sub/junk.safetensors' '$T/u-badst/sub/junk.safetensors' && cmp '$T/badst/empty.safetensors' '$T/u-badst/empty.safetensors' &&
         grep -q 'stored as an opaque file, byte for byte (--skip-bad)' '$T/err'"

# the conventions: -V, -q, -v on every command; --dry-run; --json summaries
for c in pack unpack verify stat mount; do
  check "$c -V: the version" sh -c "'$CK' $c -V | grep -q '^ckptfs [0-9]' && '$CK' $c --version | grep -q '^format '"
done
"$CK" pack -q "$T/src" "$T/p-q" > "$T/out" 2> "$T/err"
check "pack -q: exit 0, nothing on stdout or stderr" sh -c "test $? -eq 0 && test ! -s '$T/out' && test ! -s '$T/err'"
"$CK" unpack -q "$T/p-q" "$T/u-q" > "$T/out" 2> "$T/err" && "$CK" verify -q "$T/p-q" >> "$T/out" 2>> "$T/err"
check "unpack -q, verify -q: silent" sh -c "test ! -s '$T/out' && test ! -s '$T/err'"
"$CK" verify -v --progress=none "$T/p-q" > "$T/out"
check "verify -v: a line per file" sh -c "test \$(grep -c '^  ok: ' '$T/out') -eq 8 && grep -q '^  ok: nested/deeper/tokenizer.json$' '$T/out'"
rm -rf "$T/p-v"; "$CK" pack -v --progress=none "$T/src" "$T/p-v" > "$T/out"
check "pack -v: a line per file with its sizes" sh -c "test \$(grep -c '^  .*: [0-9.]* [kM]*B -> [0-9.]* [kM]*B (' '$T/out') -eq 8"
"$CK" pack --dry-run "$T/src" "$T/p-dry" > "$T/out" 2> "$T/err"
check "pack --dry-run: exit 0, each file with encoding and estimate, the space check, nothing written" \
  sh -c "test $? -eq 0 && test ! -e '$T/p-dry' && grep -q '(dry run: nothing is written)' '$T/out' &&
         grep -q '^  model-00001-of-00002.safetensors  *[0-9.]* kB -> ~[0-9.]* kB  *safetensors: BF16 k15' '$T/out' &&
         grep -q '^  config.json .* zstd, or stored as is' '$T/out' && grep -q '^8 files: 1.38 MB -> about ' '$T/out' &&
         grep -q '^free space: enough' '$T/out'"
"$CK" pack --dry-run "$T/badst" "$T/p-dry" > "$T/out" 2> "$T/err"
check "pack --dry-run of a source with bad files: exit 1, lists both, nothing written" \
  sh -c "test $? -eq 1 && test ! -e '$T/p-dry' && test \$(grep -c 'BAD: not a valid safetensors file' '$T/out') -eq 2 &&
         grep -q '^2 bad files: pack would refuse' '$T/out'"
rm -rf "$T/p-json" "$T/u-json"
"$CK" pack --json "$T/src" "$T/p-json" > "$T/pack.json" 2>/dev/null &&
  "$CK" unpack --json "$T/p-json" "$T/u-json" > "$T/unpack.json" 2>/dev/null &&
  "$CK" verify --json --against "$T/src" "$T/p-json" > "$T/verify.json" 2>/dev/null
cp -a "$T/p-json" "$T/p-jdmg"
printf '\xff' | dd of="$T/p-jdmg/model-00002-of-00002.safetensors.ckpt" bs=1 seek=$((4096 + 4000)) conv=notrunc status=none
"$CK" verify --json "$T/p-jdmg" > "$T/vdmg.json" 2>/dev/null; vrc=$?
check "--json: pack, unpack and verify summaries are JSON with the figures (verify's on failure too)" \
  python3 - "$T" "$(du -sb "$T/p-json" | cut -f1)" $vrc <<'PYEOF'
import json, sys
t, vrc = sys.argv[1], int(sys.argv[3])
p = json.load(open(t + "/pack.json")); u = json.load(open(t + "/unpack.json"))
v = json.load(open(t + "/verify.json")); d = json.load(open(t + "/vdmg.json"))
assert p["command"] == "pack" and p["files"] == 8 and p["original_bytes"] == 1381675, p
assert 0 < p["packed_bytes"] < p["original_bytes"] and p["saved_bytes"] == p["original_bytes"] - p["packed_bytes"], p
assert u["command"] == "unpack" and u["files"] == 8 and u["original_bytes"] == 1381675, u
assert v["ok"] is True and v["exit_status"] == 0 and v["damaged"] == 0 and v["against"].endswith("/src"), v
assert d["ok"] is False and d["damaged"] == 1 and d["exit_status"] == 3 == vrc, (d, vrc)
PYEOF

# damaged data: verify names it, unpack refuses and leaves nothing
cp -a "$T/p-k15" "$T/dmg" 2>/dev/null; rm -rf "$T/dmg"; cp -a "$T/p-bytesplit" "$T/dmg"
f="$T/dmg/model-00002-of-00002.safetensors.ckpt"
printf '\xff' | dd of="$f" bs=1 seek=$((4096 + 4000)) conv=notrunc status=none
"$CK" verify "$T/dmg" 2> "$T/err"
check "damage: verify exits 3 (damaged)" test $? -eq 3
check "damage: verify names file, tensor and chunk" grep -q "model-00002-of-00002.safetensors.ckpt: embed, chunk" "$T/err"
"$CK" verify --jobs 8 "$T/dmg" 2> "$T/err"
check "damage: verify --jobs 8 fails, names it, counts one file" \
  sh -c "test $? -ne 0 && grep -q 'embed, chunk' '$T/err' && grep -q '1 of 8 files damaged' '$T/err'"
"$CK" unpack "$T/dmg" "$T/u-dmg" 2> "$T/err"
check "damage: unpack refuses with exit 3, as verify" test $? -eq 3
check "damage: unpack says verify names every damaged file" grep -q "is damaged; nothing was unpacked (ckptfs verify" "$T/err"
check "damage: unpack leaves no output" test ! -e "$T/u-dmg"
"$CK" unpack --jobs 8 "$T/dmg" "$T/u-dmg" 2> "$T/err"
check "damage: unpack of several files at once refuses, leaves no output" test $? -ne 0 -a ! -e "$T/u-dmg"
# verify --against: damage is exit 3 whatever SRC is (missing, or a copy
# with a file that cannot be read); a source that cannot be read is exit 1
"$CK" verify --against "$T/no-such-src" "$T/dmg" 2> "$T/err"
check "damage: verify --against a missing SRC still checks the pack: exit 3" test $? -eq 3
"$CK" verify --against "$T/no-such-src" "$T/p-k15" 2> "$T/err"
check "verify --against a missing SRC of an intact pack: exit 1, says the pack was checked alone" \
  sh -c "test $? -eq 1 && grep -q 'no-such-src: No such file or directory (the source cannot be read: checking the pack alone)' '$T/err'"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  cp -a "$T/src" "$T/unread" && chmod 0600 "$T/unread/config.json" && chmod -R a+rX "$T/p-bytesplit" "$T/dmg" &&
    chmod a+rx "$T" && chmod -R a+rX "$T/unread" && chmod 0600 "$T/unread/config.json"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$CK" verify --against "$T/unread" "$T/p-bytesplit" 2> "$T/err"
  check "verify --against a source file that cannot be read: exit 1 (not 4, differs)" test $? -eq 1
  check "... names it and says it was not compared" grep -q "unread/config.json: .*(the source cannot be read: not compared)" "$T/err"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$CK" verify --against "$T/unread" "$T/dmg" 2> "$T/err"
  check "damage: verify --against a source that cannot be read: exit 3" test $? -eq 3
fi

# names with control characters (newline, ANSI escapes) from the files are
# printed escaped: no escape byte reaches the terminal, a message stays one
# line; stat --json keeps them exact (cJSON escapes them)
N="$T/names"; mkdir -p "$N/src" "$N/bad"
python3 - "$N" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
def st(path, name, dtype="BF16"):
    data = bytes(range(256)) * 64
    h = json.dumps({name: {"dtype": dtype, "shape": [len(data) // 2], "data_offsets": [0, len(data)]}}).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
st(os.path.join(d, "src", "m\n\x1b[2J.safetensors"), "w\n\x1b[31mred")
open(os.path.join(d, "src", "c\x1b[31m.json"), "w").write("{}")
st(os.path.join(d, "bad", "b\n\x1b[2J.safetensors"), "t\x1b[1m", dtype="X")
PY
ESC=$(printf '\033')
"$CK" pack "$N/src" "$N/p" > "$N/out" 2>&1
check "names: pack of names with control characters" test $? -eq 0
"$CK" stat "$N/p" > "$N/out" 2>&1
check "names: stat prints no escape byte" sh -c "! grep -q '$ESC' '$N/out'"
check "names: stat prints the names escaped" sh -c "grep -qF 'm\\n\\x1b[2J.safetensors' '$N/out' && grep -qF 'c\\x1b[31m.json' '$N/out'"
"$CK" stat --json "$N/p" > "$N/json"
check "names: stat --json is valid JSON" python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$N/json"
python3 - "$N/p" <<PY
import sys; sys.path.insert(0, "$HERE/../hardening")
import ckpt_layout
f = sys.argv[1] + "/m\n\x1b[2J.safetensors.ckpt"
x = [x for x in ckpt_layout.layout(f)["extents"] if x.name == "w\n\x1b[31mred"][0]
b = bytearray(open(f, "rb").read()); b[x.planes[0][0] + 5] ^= 0xff; open(f, "wb").write(b)
PY
"$CK" verify "$N/p" 2> "$N/err"
check "names: verify names the damaged tensor, escaped" grep -qF 'm\n\x1b[2J.safetensors.ckpt: w\n\x1b[31mred, chunk 0' "$N/err"
check "names: verify prints no escape byte" sh -c "! grep -q '$ESC' '$N/err'"
printf '\377' | dd of="$N/p/m"$'\n\e[2J'".safetensors.ckpt" bs=1 seek=20 conv=notrunc status=none
mkdir "$N/mnt"
"$CK" mount "$N/p" "$N/mnt" 2> "$N/err"
rc=$?
mountpoint -q "$N/mnt" && fusermount3 -u "$N/mnt"
check "names: mount refuses a damaged file and names it escaped" sh -c "test $rc -ne 0 &&
  grep -qF 'm\\n\\x1b[2J.safetensors: cannot open packed file' '$N/err' && ! grep -q '$ESC' '$N/err'"
"$CK" pack "$N/bad" "$N/pb" 2> "$N/err"
check "names: a bad header's message is one line, names escaped (then the two of what to do)" sh -c "test \$(wc -l < '$N/err') -eq 3 &&
  grep -q 'nothing was packed' '$N/err' &&
  grep -qF 'b\\n\\x1b[2J.safetensors: invalid safetensors file: tensor \"t\\x1b[1m\" has unknown dtype' '$N/err'"
# a DST that holds an unfinished pack of other files: the refusal names the
# file that differs, escaped, on one line
mkdir -p "$N/other"
cp "$N/src/c"$'\e[31m'".json" "$N/other/x.json"
CKPTFS_FAULT=step:3 "$CK" pack "$N/src" "$N/pk" >/dev/null 2>&1
"$CK" pack "$N/other" "$N/pk" 2> "$N/err"
check "names: a refused resume names the files escaped, on one line" sh -c "test $? -ne 0 && test \$(wc -l < '$N/err') -eq 1 &&
  grep -qF 'c\x1b[31m.json is neither in the source nor packed; use --force' '$N/err' && ! grep -q '$ESC' '$N/err'"

echo "$pass passed, $fail failed"
test $fail -eq 0
