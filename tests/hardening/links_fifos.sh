#!/bin/sh
# links_fifos: a packed directory whose members are FIFOs, devices or symbolic
# links (issue #11 items 9 and 10).  A FIFO in place of a .ckpt or of the
# manifest once hung verify, unpack and the mount (open(2) of a FIFO waits for
# a writer); links were followed, so verify said "all checksums ok" over links
# to another pack's files.  Every command runs under `timeout`: a hang is a
# failure, not a hung suite.  Each must fail promptly, name the file, exit
# non-zero and leave no output; the same pack undamaged (also reached through
# a link to the packed directory itself, which is the user's to make) still
# unpacks and mounts to the original bytes.
set -eu
: "${CKPTFS:?set CKPTFS}"
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/ckptfs-links.XXXXXX)
P=""
cleanup() {
    rc=$?
    set +e
    grep -q " $T/mnt fuse" /proc/mounts && fusermount3 -uz "$T/mnt"
    [ -z "$P" ] || kill -9 "$P" 2>/dev/null
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# run NAME CMD...: CMD under a 20 s timeout, stdout to $T/out, stderr to $T/err;
# sets rc.  A timeout is a hang: fail at once.
run() {
    name=$1
    shift
    rc=0
    timeout -k 5 20 "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then fail "$name: '$*' hung (killed by timeout)"; fi
}

"$PY" "$HERE/gen_model.py" "$T/src" >/dev/null
run pack "$CKPTFS" pack "$T/src" "$T/good"
[ $rc = 0 ] || { cat "$T/err"; fail "pack exit $rc"; }
cp -a "$T/good" "$T/elsewhere" # a valid pack elsewhere for the links to point into

# case NAME FILE SETUP: copy the good pack to $T/bad, run SETUP in it, then
# verify, stat and unpack must fail naming FILE (relative to the pack).
case_() {
    name=$1 file=$2 setup=$3
    rm -rf "$T/bad" "$T/unp" "$T/unp.ckptfs-partial"
    cp -a "$T/good" "$T/bad"
    (cd "$T/bad" && eval "$setup")
    for cmd in verify stat unpack; do
        if [ $cmd = unpack ]; then run "$name" "$CKPTFS" unpack "$T/bad" "$T/unp"; else run "$name" "$CKPTFS" $cmd "$T/bad"; fi
        [ $rc != 0 ] || { cat "$T/out" "$T/err"; fail "$name: $cmd exit 0"; }
        grep -q "$T/bad/$file" "$T/err" || { cat "$T/err"; fail "$name: $cmd does not name $file"; }
        ! grep -q "checksums.*ok" "$T/out" || fail "$name: $cmd says ok: $(cat "$T/out")"
        [ $cmd != stat ] || [ ! -s "$T/out" ] || { cat "$T/out"; fail "$name: stat printed figures"; }
        [ ! -e "$T/unp" ] && [ ! -e "$T/unp.ckptfs-partial" ] || fail "$name: $cmd left output"
    done
    echo "$name: refused ($(grep -m1 "$T/bad/$file" "$T/err"))"
    mount_refused "$name" "$file"
}

# The mount opens every packed file before mounting: it must refuse promptly
# (a FIFO once blocked it), naming the file, and mount nothing.
mount_refused() {
    [ "$(id -u)" = 0 ] && [ -c /dev/fuse ] || return 0
    run "$1" "$CKPTFS" mount -f "$T/bad" "$T/mnt"
    [ $rc != 0 ] || fail "$1: mount exit 0"
    grep -q "$2" "$T/err" || { cat "$T/err"; fail "$1: mount does not name $2"; }
    ! grep -q " $T/mnt fuse" /proc/mounts || fail "$1: mounted anyway"
}
mkdir "$T/mnt"

case_ fifo-ckpt config.json.ckpt 'rm config.json.ckpt && mkfifo config.json.ckpt'
case_ fifo-ckpt-nested extra/deeper/random.bin.ckpt 'rm extra/deeper/random.bin.ckpt && mkfifo extra/deeper/random.bin.ckpt'
case_ fifo-manifest ckptfs.manifest 'rm ckptfs.manifest && mkfifo ckptfs.manifest'
case_ fifo-subdir extra/ 'rm -r extra && mkfifo extra'
case_ link-ckpt model-00002-of-00003.safetensors.ckpt \
    'rm model-00002-of-00003.safetensors.ckpt && ln -s "$T/elsewhere/model-00002-of-00003.safetensors.ckpt" .'
case_ link-manifest ckptfs.manifest 'rm ckptfs.manifest && ln -s "$T/elsewhere/ckptfs.manifest" .'
case_ link-subdir extra/ 'rm -r extra && ln -s "$T/elsewhere/extra" extra'
case_ link-nested-subdir extra/deeper/ 'rm -r extra/deeper && ln -s "$T/elsewhere/extra/deeper" extra/'
case_ relative-link-ckpt config.json.ckpt 'mv config.json.ckpt config.json.real && ln -s config.json.real config.json.ckpt'
case_ dir-ckpt config.json.ckpt 'rm config.json.ckpt && mkdir config.json.ckpt'
if [ "$(id -u)" = 0 ]; then
    case_ device-ckpt config.json.ckpt 'rm config.json.ckpt && mknod config.json.ckpt c 1 3'
fi

# verify --against: a FIFO in the source (links there are followed, as pack
# follows them) is a difference, not a hang.
rm -rf "$T/src2" && cp -a "$T/src" "$T/src2" && rm "$T/src2/config.json" && mkfifo "$T/src2/config.json"
run against-fifo "$CKPTFS" verify --against "$T/src2" "$T/good"
[ $rc != 0 ] && grep -q "$T/src2/config.json: a FIFO" "$T/err" || { cat "$T/err"; fail "verify --against a FIFO: exit $rc"; }

# pack run again with --delete-source over a DST that holds a link: a .ckpt
# linked to a valid pack elsewhere is not "already packed" (the source was
# deleted and the manifest left the file out); a linked subdirectory is
# refused before anything is written or deleted (its files went elsewhere).
rm -rf "$T/src2" "$T/dst2" "$T/unp"
cp -a "$T/src" "$T/src2"
run pack2 "$CKPTFS" pack "$T/src2" "$T/dst2"
rm "$T/dst2/config.json.ckpt" && ln -s "$T/elsewhere/config.json.ckpt" "$T/dst2/config.json.ckpt"
run pack-over-link "$CKPTFS" pack --delete-source "$T/src2" "$T/dst2"
[ $rc = 0 ] || { cat "$T/err"; fail "pack over a linked .ckpt: exit $rc"; }
[ -f "$T/dst2/config.json.ckpt" ] && [ ! -L "$T/dst2/config.json.ckpt" ] || fail "pack kept the linked .ckpt"
run unpack-after-link "$CKPTFS" unpack "$T/dst2" "$T/unp"
[ $rc = 0 ] || { cat "$T/err"; fail "unpack after pack over a linked .ckpt: exit $rc"; }
diff -r "$T/src" "$T/unp" >/dev/null || fail "pack over a linked .ckpt lost a file"
rm -rf "$T/src2" "$T/dst2" "$T/elsewhere2"
cp -a "$T/src" "$T/src2" && cp -a "$T/good" "$T/elsewhere2"
run pack3 "$CKPTFS" pack "$T/src2" "$T/dst2"
rm -r "$T/dst2/extra" && ln -s "$T/elsewhere2/extra" "$T/dst2/extra"
ls -liR "$T/elsewhere2" >"$T/inodes.before"
run pack-over-dirlink "$CKPTFS" pack --delete-source "$T/src2" "$T/dst2"
[ $rc != 0 ] && grep -q "$T/dst2/extra: a symbolic link" "$T/err" ||
    { cat "$T/err"; fail "pack over a linked subdirectory: exit $rc"; }
diff -r "$T/src" "$T/src2" >/dev/null || fail "pack over a linked subdirectory deleted sources"
ls -liR "$T/elsewhere2" | cmp -s - "$T/inodes.before" || fail "pack wrote through a linked subdirectory"
echo "pack over links in DST: no source lost, nothing written through a link"

# The good pack, named through a link (the packed directory itself may be
# one): the original bytes come back.
ln -s "$T/good" "$T/good-link"
run verify-good "$CKPTFS" verify "$T/good-link"
[ $rc = 0 ] || { cat "$T/err"; fail "verify of the good pack through a link: exit $rc"; }
run stat-good "$CKPTFS" stat "$T/good-link"
[ $rc = 0 ] || { cat "$T/err"; fail "stat of the good pack through a link: exit $rc"; }
rm -rf "$T/unp"
run unpack-good "$CKPTFS" unpack "$T/good-link" "$T/unp"
[ $rc = 0 ] || { cat "$T/err"; fail "unpack of the good pack through a link: exit $rc"; }
diff -r "$T/src" "$T/unp" >/dev/null || fail "unpacked bytes differ from the originals"

if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
    echo "links_fifos: ok (mount part skipped: needs root and /dev/fuse)"
    exit 0
fi
timeout -k 5 60 "$CKPTFS" mount -f "$T/good-link" "$T/mnt" 2>"$T/log.mount" &
P=$!
for _ in $(seq 200); do grep -q " $T/mnt fuse" /proc/mounts && break; sleep 0.05; done
grep -q " $T/mnt fuse" /proc/mounts || { cat "$T/log.mount"; fail "the good pack did not mount"; }
timeout -k 5 20 diff -r "$T/src" "$T/mnt" >/dev/null || fail "the mount's bytes differ from the originals"
fusermount3 -u "$T/mnt"
wait $P || fail "daemon exit status $?"
P=""
echo "links_fifos: ok"
