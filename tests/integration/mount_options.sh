#!/bin/sh
# mount_options: what `ckptfs mount` promises before and around serving.
#  - uid=, gid=, umask= (fmask=, dmask=) through a real mount: a 0600 shard
#    is readable by the uid given (and only then) and reads back exactly;
#    the root has the packed directory's mode;
#  - a mount point that is already a live mount, or not empty, is refused
#    (-o nonempty allows the latter);
#  - a pack with an unreadable packed file (a newer format version, a
#    damaged header) fails the mount command itself with the reason;
#  - -o log=FILE gets the start-up line of a detached daemon;
#  - `ckptfs stat MOUNTPOINT` shows the running daemon's counters.
. "$(dirname "$0")/lib.sh"
"$PY" "$HERE/gen_model.py" "$T/src"
SHARD=model-00002-of-00003.safetensors
chmod 0600 "$T/src/$SHARD"
"$CKPTFS" pack "$T/src" "$T/dst" >"$T/log.pack" 2>&1 || fail "ckptfs pack failed"
chmod 0755 "$T"            # nobody must reach the mount points under $T
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# without uid=: the shard belongs to root, 0600: nobody is refused
mount_fg m -o allow_other
as_nobody cat "$T/m/$SHARD" >/dev/null 2>&1 && fail "nobody read a 0600 shard owned by root"
stop_daemon TERM "$PID"
# uid=/gid= by name and number: nobody owns every file and reads the shard
mount_fg m -o allow_other,uid=nobody,gid=65534
[ "$(stat -c '%u %g %a' "$T/m/$SHARD")" = "65534 65534 600" ] ||
    fail "uid/gid: $(stat -c '%u %g %a' "$T/m/$SHARD")"
as_nobody cat "$T/m/$SHARD" > "$T/read" || fail "uid=nobody: nobody cannot read the 0600 shard"
cmp "$T/read" "$T/src/$SHARD" || fail "uid=nobody: the shard read back differs"
stop_daemon TERM "$PID"
# umask=0022 narrows the stored modes (mode & ~mask), never widens them: the
# 0600 shard stays 0600 (nobody is refused), 0644/0755 stay as they are
mount_fg m -o allow_other,umask=0022
[ "$(stat -c %a "$T/m/$SHARD")" = 600 ] || fail "umask=0022: shard mode $(stat -c %a "$T/m/$SHARD"), stored 600"
[ "$(stat -c %a "$T/m/sub")" = 755 ] || fail "umask=0022: directory mode $(stat -c %a "$T/m/sub")"
as_nobody cat "$T/m/$SHARD" >/dev/null 2>&1 && fail "umask=0022: nobody read a shard stored 0600"
stop_daemon TERM "$PID"
# ... and the mount said so: without uid=, the 0600 shard is root's alone
grep -q "warning: 2 files and directories (first config.json, mode 0600) can be read only by root (uid 0).*Permission denied" "$T/log.m" ||
    fail "no warning about the owner-only shard: $(cat "$T/log.m")"
grep -q "add uid=USER,gid=GROUP" "$T/log.m" || fail "the warning does not say what to do: $(cat "$T/log.m")"
# file_mode=/dir_mode= set the modes outright (a mask still narrows them)
mount_fg m -o allow_other,file_mode=0644,dir_mode=0755
[ "$(stat -c %a "$T/m/$SHARD") $(stat -c %a "$T/m/sub")" = "644 755" ] ||
    fail "file_mode/dir_mode: $(stat -c %a "$T/m/$SHARD") $(stat -c %a "$T/m/sub")"
as_nobody cat "$T/m/$SHARD" > "$T/read" || fail "file_mode=0644: nobody cannot read the shard"
cmp "$T/read" "$T/src/$SHARD" || fail "file_mode=0644: the shard read back differs"
grep -q warning "$T/log.m" && fail "warned although everyone can read: $(cat "$T/log.m")"
stop_daemon TERM "$PID"
mount_fg m -o file_mode=0666,fmask=0027
[ "$(stat -c %a "$T/m/$SHARD")" = 640 ] || fail "file_mode=0666,fmask=0027: $(stat -c %a "$T/m/$SHARD")"
stop_daemon TERM "$PID"
# uid= of another user without allow_other: that user would be refused by
# the kernel; the mount refuses it with the reason
rc=0; "$CKPTFS" mount -o uid=nobody "$T/dst" "$T/m" 2>"$T/err" || rc=$?
[ $rc = 2 ] || fail "uid=nobody without allow_other: exit $rc, expected 2"
grep -q "uid=65534 without allow_other: " "$T/err" && grep -q "^Add allow_other" "$T/err" || fail "uid= without allow_other: $(cat "$T/err")"
is_mounted "$T/m" && fail "mounted uid=nobody without allow_other"
# the recipe of the packaged example (ckptfs@.service's OPTIONS, with its
# service user vllm replaced by nobody), mounted by root as the unit does:
# the service user reads the 0600 shard, and nothing is warned
opts=$(sed -n 's/^OPTIONS=//p' "$HERE/../../packaging/systemd/example.conf")
case $opts in *uid=vllm*gid=vllm*) ;; *) fail "example.conf's OPTIONS lack uid=/gid=: $opts" ;; esac
opts=$(echo "$opts" | sed 's/uid=vllm/uid=nobody/; s/gid=vllm/gid=65534/; s/cache_size=1G/cache_size=64M/')
mount_fg m -o "ro,$opts" --
as_nobody cat "$T/m/$SHARD" > "$T/read" || fail "the recipe ($opts): the service user cannot read the 0600 shard"
cmp "$T/read" "$T/src/$SHARD" || fail "the recipe: the shard read back differs"
grep -q warning "$T/log.m" && fail "the recipe warned: $(cat "$T/log.m")"
stop_daemon TERM "$PID"
# a user without access to /dev/fuse is told what to change, and no
# "after serving" line (nothing was served)
mkdir "$T/nm" && chown 65534 "$T/nm"
if as_nobody sh -c 'test -r /dev/fuse && test -w /dev/fuse'; then
    echo "note: nobody may use /dev/fuse here; its refusal is not checked"
else
    rc=0; as_nobody "$CKPTFS" mount -f "$T/dst" "$T/nm" 2>"$T/err" || rc=$?
    [ $rc = 1 ] || fail "mount by nobody without /dev/fuse: exit $rc"
    grep -q "cannot use /dev/fuse: Permission denied" "$T/err" && grep -q "chmod 0666 /dev/fuse" "$T/err" &&
        grep -q "group fuse" "$T/err" || fail "no /dev/fuse advice: $(cat "$T/err")"
    grep -q "after serving" "$T/err" && fail "'after serving' though nothing was served: $(cat "$T/err")"
fi
mount_fg m -o fmask=0077,dmask=0022
[ "$(stat -c %a "$T/m/config.json") $(stat -c %a "$T/m/sub")" = "600 755" ] ||
    fail "fmask/dmask: $(stat -c %a "$T/m/config.json") $(stat -c %a "$T/m/sub")"
stop_daemon TERM "$PID"
# the mount's root has the packed directory's mode (it was always 0755): a
# 0700 packed directory keeps its 0644 files (file_mode=0644 makes them so)
# from other users through an allow_other mount as it does on disk
chmod 0700 "$T/dst"
mount_fg m -o allow_other,file_mode=0644
[ "$(stat -c %a "$T/m")" = 700 ] || fail "root of the mount: mode $(stat -c %a "$T/m"), packed directory 700"
[ "$(stat -c %a "$T/m/config.json")" = 644 ] || fail "config.json: mode $(stat -c %a "$T/m/config.json")"
as_nobody cat "$T/m/config.json" >/dev/null 2>&1 && fail "nobody read a file of a 0700 packed directory"
stop_daemon TERM "$PID"
chmod 0755 "$T/dst"
if "$CKPTFS" mount -o umask=999 "$T/dst" "$T/m" 2>"$T/err"; then fail "umask=999 accepted"; fi
if "$CKPTFS" mount -o uid=no-such-user-here "$T/dst" "$T/m" 2>"$T/err"; then fail "unknown user accepted"; fi
grep -q "no such user" "$T/err" || fail "unknown user: $(cat "$T/err")"

# what ckptfs@.service runs with an empty OPTIONS=: "-o ro," and "--" before
# SOURCE (an empty option is skipped; SOURCE is not taken for options)
grep -q 'ckptfs mount -f -o ro,${OPTIONS} -- ${SOURCE} ${MOUNTPOINT}$' "$HERE/../../packaging/systemd/ckptfs@.service.in" ||
    fail "the unit's ExecStart changed: check this test"
# a live mount point is refused: one daemon, still serving
mount_fg m -o ro, --
if "$CKPTFS" mount "$T/dst" "$T/m" 2>"$T/err"; then fail "mounted over a live mount"; fi
grep -q "$T/m is already mounted (fuse.ckptfs).*fusermount3 -u $T/m" "$T/err" || grep -q "fusermount3 -u $T/m" "$T/err" ||
    fail "live mount message: $(cat "$T/err")"
[ "$(grep -c " $T/m fuse.ckptfs " /proc/mounts)" = 1 ] || fail "a second mount stacked on the first"
cmp "$T/m/config.json" "$T/src/config.json" || fail "the first mount stopped serving"
# ckptfs stat MOUNTPOINT: the running daemon's counters
cat "$T/m/$SHARD" > /dev/null
"$CKPTFS" stat --json "$T/m" > "$T/mstat.json" || fail "stat MOUNTPOINT --json failed"
"$PY" - "$T/mstat.json" "$T/dst" "$(stat -c %s "$T/src/$SHARD")" "$(stat -c %s "$T/src/config.json")" <<'PYEOF' || fail "stat MOUNTPOINT counters: $(cat "$T/mstat.json")"
import json, sys
s = json.load(open(sys.argv[1])); shard, config = int(sys.argv[3]), int(sys.argv[4])
assert s["source"] == sys.argv[2] and s["files"] == 9, s
assert s["read_bytes"] >= shard + config and s["decoded_bytes"] >= shard + config, s
assert s["cache_misses"] > 0 and s["decode_errors"] == 0 and s["reads"] > 0, s
PYEOF
"$CKPTFS" stat "$T/m" > "$T/mstat.txt" || fail "stat MOUNTPOINT failed"
grep -q "^$T/m: ckptfs mount of $T/dst (9 files)" "$T/mstat.txt" && grep -q "decode errors 0" "$T/mstat.txt" &&
    grep -q "^  cache  *[0-9]* hits, [0-9]* misses" "$T/mstat.txt" || fail "stat MOUNTPOINT text: $(cat "$T/mstat.txt")"
stop_daemon TERM "$PID"
# ... also for a packed directory whose path is long (the counters' JSON
# names it: over 2 KiB here)
L="$T"
for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do L="$L/$(printf '%0200d' 0)"; done
mkdir -p "$L" && cp -a "$T/dst" "$L/dst"
new_mnt long
"$CKPTFS" mount "$L/dst" "$T/long" || fail "mount of a packed directory at a long path"
cmp "$T/long/config.json" "$T/src/config.json" || fail "long path: content"
"$CKPTFS" stat "$T/long" > "$T/mstat.txt" 2>&1 && grep -qF "ckptfs mount of $L/dst (9 files)" "$T/mstat.txt" ||
    fail "stat MOUNTPOINT of a packed directory at a long path: $(head -c 300 "$T/mstat.txt")"
"$CKPTFS" stat --json "$T/long" | "$PY" -c 'import json, sys; assert json.load(sys.stdin)["source"] == sys.argv[1]' "$L/dst" ||
    fail "stat --json MOUNTPOINT of a packed directory at a long path"
fusermount3 -u "$T/long" && wait_unmounted "$T/long"
rm -rf "$T/$(printf '%0200d' 0)"

# a mount point over the packed directory, or above it, is refused even
# with -o nonempty: the daemon reads the packed files while it serves
for over in "$T/dst" "$T"; do
    if "$CKPTFS" mount -o nonempty "$T/dst" "$over" 2>"$T/err"; then
        is_mounted "$over" && fusermount3 -u "$over"
        fail "mounted over the packed directory at $over"
    fi
    grep -q "mounting there would hide the packed files" "$T/err" || fail "mount over $over: $(cat "$T/err")"
    is_mounted "$over" && fail "mounted at $over despite the refusal"
done

# a non-empty mount point is refused unless -o nonempty
new_mnt full
echo keep > "$T/full/file"
if "$CKPTFS" mount "$T/dst" "$T/full" 2>"$T/err"; then fail "mounted over a non-empty directory"; fi
grep -q "$T/full is not empty.*" "$T/err" && grep -q "nonempty" "$T/err" || fail "non-empty message: $(cat "$T/err")"
is_mounted "$T/full" && fail "mounted despite the refusal"
"$CKPTFS" mount -o nonempty "$T/dst" "$T/full" || fail "-o nonempty refused"
cmp "$T/full/config.json" "$T/src/config.json" || fail "-o nonempty: content"
fusermount3 -u "$T/full" && wait_unmounted "$T/full"

# -o log=FILE: a detached daemon logs its start-up line there
new_mnt lg
"$CKPTFS" mount -o log="$T/daemon.log",cache_size=64M,threads=4 "$T/dst" "$T/lg" || fail "mount with log="
for _ in $(seq 100); do grep -q serving "$T/daemon.log" && break; sleep 0.05; done # written once detached
grep -q "ckptfs\[[0-9]*\]: serving $T/dst at $T/lg: 9 files, [0-9.]* MB; cache 67.1 MB, 4 threads" "$T/daemon.log" ||
    fail "no start-up line in the log file: $(cat "$T/daemon.log")"
fusermount3 -u "$T/lg" && wait_unmounted "$T/lg"
# ... but never through a symbolic link in its place (a root daemon logging
# to /tmp would append to the file a planted link names), nor to a FIFO
echo "precious" >"$T/victim"
ln -s "$T/victim" "$T/link.log"
mkfifo "$T/fifo.log"
for lf in link.log fifo.log; do
    if "$CKPTFS" mount -o log="$T/$lf" "$T/dst" "$T/lg" 2>"$T/err"; then
        fusermount3 -u "$T/lg"
        fail "mounted with log= a $lf"
    fi
    grep -q "log=$T/$lf: .*\(symbolic link\|not a regular file\)" "$T/err" || fail "log=$lf message: $(cat "$T/err")"
    is_mounted "$T/lg" && fail "mounted despite log=$lf"
done
[ "$(cat "$T/victim")" = precious ] || fail "the file a log= link names was written: $(cat "$T/victim")"
# ... nor under the mount point (hidden once mounted; after, the mount point
# is not empty) or inside the packed directory, also reached another way
mkdir -p "$T/lgsub" && ln -s "$T/lg" "$T/lgsub/to-mnt"
for lf in "$T/lg/daemon.log" "$T/lgsub/to-mnt/daemon.log" "$T/dst/daemon.log" "$T/dst/sub/../daemon.log"; do
    rc=0; "$CKPTFS" mount -o log="$lf" "$T/dst" "$T/lg" 2>"$T/err" || rc=$?
    is_mounted "$T/lg" && { fusermount3 -u "$T/lg"; fail "mounted with log=$lf"; }
    [ $rc = 2 ] || fail "log=$lf: exit $rc, expected 2"
    grep -q "log=$lf is \(under the mount point\|inside the packed directory\)" "$T/err" ||
        fail "log=$lf: $(cat "$T/err")"
    [ -e "$lf" ] && fail "log=$lf was created"
done
[ -z "$(ls -A "$T/lg")" ] || fail "the mount point is not empty after the refused log= mounts"

# unreadable packs: the mount command fails with the reason, nothing mounted
cp -a "$T/dst" "$T/newer"
"$PY" - "$T/newer/config.json.ckpt" <<'PYEOF'
import struct, sys, xxhash
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
b[10:12] = struct.pack("<H", 9)
b[56:64] = struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(b[:56])))
open(p, "wb").write(b)
PYEOF
cp -a "$T/dst" "$T/badhdr"
printf '\377' | dd of="$T/badhdr/$SHARD.ckpt" bs=1 seek=20 conv=notrunc status=none
for pack in newer badhdr; do
    new_mnt "u$pack"
    rc=0
    "$CKPTFS" mount "$T/$pack" "$T/u$pack" 2>"$T/err" || rc=$?
    [ $rc = 1 ] || fail "$pack: mount exit status $rc, expected 1"
    is_mounted "$T/u$pack" && fail "$pack: mounted anyway"
    grep -q "1 of 9 packed files cannot be read" "$T/err" || fail "$pack: no summary: $(cat "$T/err")"
done
"$CKPTFS" mount "$T/newer" "$T/unewer" 2>"$T/err" || true
grep -q "config.json.ckpt: format version 1.9 .*written by a newer ckptfs; upgrade" "$T/err" ||
    fail "newer: reason not given: $(cat "$T/err")"
"$CKPTFS" mount "$T/badhdr" "$T/ubadhdr" 2>"$T/err" || true
grep -q "$SHARD.ckpt: file header is damaged" "$T/err" || fail "badhdr: reason not given: $(cat "$T/err")"
echo "mount_options: ok"
