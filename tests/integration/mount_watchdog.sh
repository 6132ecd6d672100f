#!/bin/sh
# mount_watchdog: tests/lib/watchdog.py, which every ctest that mounts runs
# under, on a test that hangs for real: it mounts, stops its daemon
# (SIGSTOP) and reads a file of the mount, which then waits for an answer
# forever.  Given 4 s (15 s on a second try when the reader was not yet
# waiting in the kernel: a loaded machine), the watchdog must print the reader's Python stack
# (py-spy; the faulthandler fallback, which gets no word from the reader:
# a signal waits for the FUSE request to end, but does from its parent), the kernel stacks of the
# threads, the connection's `waiting` count and the daemon's log, then leave
# nothing mounted and no process of the test behind, and fail the test.
. "$(dirname "$0")/lib.sh"
make_model
WD=$HERE/../lib/watchdog.py
cat >"$T/hung.sh" <<'HUNG'
set -eu
mkdir "$TMPDIR/m"
"$CKPTFS" mount -f "$PACKED" "$TMPDIR/m" 2>"$TMPDIR/log.daemon" &
D=$!
until ls "$TMPDIR/m/config.json" >/dev/null 2>&1; do sleep 0.05; done
kill -STOP "$D"
"$PY" -c '
import subprocess, sys, watchdog
watchdog.python_hook()
READ = """
def stuck_reading(p):
    with open(p, "rb") as f:
        return f.read()
stuck_reading(%r)
"""
def stuck_waiting(p):
    return subprocess.call([sys.executable, "-c", READ % p])
stuck_waiting(sys.argv[1] + "/config.json")' "$TMPDIR/m"
HUNG

for how in py-spy faulthandler; do
    [ $how = py-spy ] && ! command -v py-spy >/dev/null && { echo "no py-spy: only the fallback"; continue; }
    nopy=""; [ $how = faulthandler ] && nopy=1
    # The hang must be in place when the watchdog fires: at load 12 the
    # reader, a second Python, was still starting after 4 s (state R, no
    # FUSE wait in the dump).  Then once more, given 15 s.
    for wait_s in 4 15; do
        rc=0
        PY=$PY PACKED=$T/dst CKPTFS_WATCHDOG_NO_PYSPY=$nopy "$PY" "$WD" --name hung --timeout $wait_s \
            --ctest-timeout 60 -- sh "$T/hung.sh" >"$T/out.$how" 2>&1 || rc=$?
        cat "$T/out.$how"
        grep -q "^   .*request_wait_answer\|^   .*fuse_simple_request" "$T/out.$how" && break
        echo "($how: the reader was not yet in its FUSE request after $wait_s s)"
    done
    [ $rc = 1 ] || fail "$how: watchdog exit status $rc, not 1"
    if [ $how = py-spy ]; then
        grep -q "stuck_reading" "$T/out.$how" || fail "py-spy: no stack of the reader"
    fi
    for want in "hung still running after $wait_s s" "stuck_waiting" "waiting 1" "serving $T/dst" \
        "connection aborted, detached" "hung FAILED: timed out"; do
        grep -qF "$want" "$T/out.$how" || fail "$how: no '$want' in the watchdog's output"
    done
    grep -q "^   .*request_wait_answer\|^   .*fuse_simple_request" "$T/out.$how" || fail "$how: no FUSE wait in the kernel stacks"
    tmp=$(sed -n 's|^watchdog: \(.*\)/m: connection aborted.*|\1|p' "$T/out.$how")
    [ -n "$tmp" ] || fail "$how: the test's TMPDIR is not named in the output"
    grep -q "$tmp" /proc/mounts && fail "$how: still mounted under $tmp"
    for p in /proc/[0-9]*; do
        c=$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
        case $c in *"$tmp"*) fail "$how: left behind: $c" ;; esac
    done
    [ -e "$tmp" ] && fail "$how: $tmp not removed"
done
echo "PASS: mount_watchdog"
