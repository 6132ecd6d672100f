#!/bin/sh
# mount_basic: the mount presents the source tree byte for byte (listing,
# sizes, modes, mtimes, SHA-256, random reads from threads and processes,
# mmap shared and private, a real safetensors loader), refuses every write
# with EROFS, and unmounts with fusermount3 -u.
. "$(dirname "$0")/lib.sh"
make_model
new_mnt mnt
"$CKPTFS" mount -o cache_size=8M "$T/dst" "$T/mnt" 2>"$T/log.mount" || fail "ckptfs mount failed"
is_mounted "$T/mnt" || fail "not mounted after ckptfs mount returned"
"$PY" "$HERE/read_check.py" "$T/mnt" "$T/src" || fail "read_check"
cmp "$T/src/model-00002-of-00003.safetensors" "$T/mnt/model-00002-of-00003.safetensors" ||
    fail "cmp"
fusermount3 -u "$T/mnt" || fail "fusermount3 -u"
wait_unmounted "$T/mnt"
echo "mount_basic: ok"
