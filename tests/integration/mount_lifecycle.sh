#!/bin/sh
# mount_lifecycle: options and usage errors, clean unmount on SIGTERM and
# SIGINT, stale-mount detection after the daemon is killed, and mounting
# through packaging/mount.ckptfs with the options mount(8)/fstab pass.
. "$(dirname "$0")/lib.sh"
make_model
new_mnt m

"$CKPTFS" mount -h | grep -q "cache_size=" || fail "mount -h prints no usage"
for bad in "-o bogus" "-o cache_size=12X" "-o threads=0" "-o rw" "-x"; do
    # shellcheck disable=SC2086
    if "$CKPTFS" mount $bad "$T/dst" "$T/m" 2>"$T/err"; then fail "accepted '$bad'"; fi
    grep -q "ckptfs mount:" "$T/err" || fail "no clear message for '$bad'"
    is_mounted "$T/m" && fail "mounted despite '$bad'"
done
if "$CKPTFS" mount "$T/src" "$T/m" 2>"$T/err"; then fail "mounted an unpacked directory"; fi
grep -q "manifest" "$T/err" || fail "no message naming the manifest: $(cat "$T/err")"

for sig in TERM INT; do
    mount_fg m -o cache_size=16M,threads=4,prefetch=1M,prefetch_threads=1
    cmp "$T/src/config.json" "$T/m/config.json" || fail "content"
    stop_daemon "$sig" "$PID"
    wait_unmounted "$T/m"
done

# A killed daemon leaves a stale mount: a new mount says what to do.
mount_fg m
kill -KILL "$PID"
wait "$PID" 2>/dev/null || true
if stat "$T/m" >/dev/null 2>&1; then fail "mount point not stale after SIGKILL"; fi
if "$CKPTFS" mount "$T/dst" "$T/m" 2>"$T/err"; then fail "mounted over a stale mount"; fi
grep -q "fusermount3 -u $T/m" "$T/err" || fail "stale mount message: $(cat "$T/err")"
grep -q "fusermount3 -uz $T/m" "$T/err" || fail "stale mount message lacks -uz for a busy mount: $(cat "$T/err")"
fusermount3 -u "$T/m" || fail "fusermount3 -u of the stale mount"
stat "$T/m" >/dev/null || fail "mount point unusable after fusermount3 -u"

# The mount(8) helper drops generic options and keeps ours.
CKPTFS=$CKPTFS sh "$MOUNT_HELPER" "$T/dst" "$T/m" \
    -o rw,noauto,nofail,_netdev,x-systemd.automount,user=nobody,cache_size=16M,allow_other ||
    fail "mount.ckptfs"
is_mounted "$T/m" || fail "mount.ckptfs did not mount"
grep " $T/m fuse.ckptfs " /proc/mounts | grep -q "allow_other" || fail "allow_other not passed"
cmp "$T/src/sub/notes.txt" "$T/m/sub/notes.txt" || fail "content via mount.ckptfs"
if CKPTFS=$CKPTFS sh "$MOUNT_HELPER" "$T/dst" "$T/m" -o bogus 2>"$T/err"; then
    fail "mount.ckptfs passed an unknown option silently"
fi
# the mount's source is the packed directory, as an fstab line names it:
# umount -c by source finds it (fstab and `mount -a` are in tests/packaging;
# without -c, util-linux takes a directory for a mount point)
src=$(awk -v m="$T/m" '$2 == m && $3 == "fuse.ckptfs" { print $1 }' /proc/mounts)
[ "$src" = "$T/dst" ] || fail "the mount's source is '$src', not the packed directory $T/dst"
umount -c "$T/dst" || fail "umount by source (the packed directory)"
wait_unmounted "$T/m"
# its exit status follows mount(8): 1 usage (an unknown option), 32 the
# mount failed (not a packed directory)
rc=0; CKPTFS=$CKPTFS sh "$MOUNT_HELPER" "$T/dst" "$T/m" -o bogus 2>"$T/err" || rc=$?
[ $rc = 1 ] || fail "mount.ckptfs -o bogus: exit $rc, mount(8) wants 1 for a usage error"
rc=0; CKPTFS=$CKPTFS sh "$MOUNT_HELPER" "$T/src" "$T/m" 2>"$T/err" || rc=$?
[ $rc = 32 ] || fail "mount.ckptfs of an unpacked directory: exit $rc, mount(8) wants 32 for a failed mount"
is_mounted "$T/m" && fail "mounted an unpacked directory through mount.ckptfs"
echo "mount_lifecycle: ok"
