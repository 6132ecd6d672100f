#!/bin/sh
# mount_swapped: a .ckpt replaced by another valid one of the same original
# size (equal-shaped shards copied over each other) must be refused by the
# mount with a line naming it, never serve the other file's bytes (it checked only
# the size; it now binds each packed file to its manifest entry by path,
# size and SHA-256, as verify and unpack do).
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/src"
head -c 300000 /dev/urandom >"$T/src/a.bin"
head -c 300000 /dev/urandom >"$T/src/b.bin"
"$CKPTFS" pack "$T/src" "$T/dst" >"$T/log.pack" 2>&1 || fail "pack"
cp "$T/dst/a.bin.ckpt" "$T/dst/b.bin.ckpt"
new_mnt mnt
# Every packed file is opened and bound at mount time: the mount is refused
# with a line naming b.bin (it used to mount and serve a.bin's bytes as b.bin).
if "$CKPTFS" mount "$T/dst" "$T/mnt" 2>"$T/log.mount"; then
    if cmp -s "$T/mnt/b.bin" "$T/src/a.bin"; then fail "b.bin served a.bin's bytes"; fi
    fail "mounted a pack whose b.bin.ckpt holds a.bin"
fi
is_mounted "$T/mnt" && fail "mounted after a refusal"
grep -q "b.bin: packed file holds a.bin.*not the manifest's entry" "$T/log.mount" || fail "no line naming b.bin"
echo "mount_swapped: ok"
