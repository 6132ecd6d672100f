#!/bin/sh
# mount_exit_race: the daemon's exit status when its unmount races a
# signal, the teardown of every test that mounts.  libfuse 3.14's session
# loop returns 0 for an unmount (the kernel's ENODEV), the signal's number
# for SIGTERM (libfuse's handler records it; workers block signals, so no
# EINTR reaches them) and -errno only for a real failure, which the daemon
# logs ('session loop failed', then 'exiting with status 1 after serving').
# ROUNDS (default 30) mounts, each with a reader of every file running, end
# by fusermount3 -u and SIGTERM in either order a random 0-30 ms apart, or
# by a lazy fusermount3 -uz with a file held open, then SIGTERM, or by
# SIGTERM the moment fusermount3 -u returns (the daemon is tearing down:
# until it ignored signals there, libfuse's restored default action killed
# it, status 143, seen under ASan in CI): every exit
# must be 0 with nothing logged but the 'serving' line (libfuse 3.14 alone
# said 'fuse: failed to unmount ...: Invalid argument' after the lazy one).
# Then: a daemon whose mount was detached lazily (a file held open) and a
# new mount at the same path; SIGTERM to the old daemon must leave the new
# mount serving (libfuse 3.14 alone unmounted the path, the new mount).
. "$(dirname "$0")/lib.sh"
make_model
ROUNDS=${ROUNDS:-30}
r=1
while [ $r -le "$ROUNDS" ]; do
    mount_fg m -o threads=4
    (cat "$T"/m/* >/dev/null 2>&1 &)
    gap=$(awk "BEGIN { srand($r + $$); printf \"%.3f\", rand() * 0.03 }")
    case $((r % 4)) in
    3) until fusermount3 -u "$T/m" 2>/dev/null; do sleep 0.01; done; kill -TERM "$PID" 2>/dev/null || true ;;
    0) fusermount3 -u "$T/m" 2>/dev/null & sleep "$gap"; kill -TERM "$PID" 2>/dev/null || true ;;
    1) kill -TERM "$PID" & sleep "$gap"; fusermount3 -u "$T/m" 2>/dev/null || true ;;
    2) exec 7<"$T/m/config.json"; fusermount3 -uz "$T/m"; sleep "$gap"; kill -TERM "$PID" 2>/dev/null || true; exec 7<&- ;;
    esac
    rc=0
    wait "$PID" || rc=$?
    wait || true # the unmount or signal sent in the background
    [ $rc = 0 ] || fail "round $r (case $((r % 4)), ${gap} s apart): daemon exit status $rc"
    # libfuse's own 'reading device: Software caused connection abort' may
    # follow a lazy unmount (case 2), when the kernel aborts the detached
    # connection while a worker waits on /dev/fuse: the loop then ends as for
    # an unmount (exit 0, checked above).  Any other line fails.
    if grep -v -e "serving " -e "^fuse: reading device: Software caused connection abort$" "$T/log.m" | grep -q .; then
        fail "round $r (case $((r % 4))): the daemon logged: $(cat "$T/log.m")"
    fi
    is_mounted "$T/m" && fusermount3 -u "$T/m"
    r=$((r + 1))
done
mount_fg m
OLD=$PID
exec 7<"$T/m/config.json"
fusermount3 -uz "$T/m"
mount_fg m
kill -TERM "$OLD"
wait "$OLD" || fail "the detached daemon's exit status $?"
exec 7<&-
is_mounted "$T/m" || fail "the old daemon's exit unmounted the new mount at its path"
cmp "$T/src/config.json" "$T/m/config.json" || fail "the new mount does not serve after the old daemon's exit"
stop_daemon TERM "$PID"
echo "PASS: mount_exit_race ($ROUNDS rounds)"
