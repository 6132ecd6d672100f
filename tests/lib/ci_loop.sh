#!/bin/sh
# ci_loop.sh BUILD N [REGEX] — the CI flake hunt of docs/ci.md: run the
# ctests matching REGEX (default: python_loaders and every mount_ test) N
# times in BUILD, two at a time, beside one busy loop per CPU, all at nice 10
# (a shared machine's other users keep their share).  One line per run
# (status, seconds, load average); a failing run's output is kept in
# BUILD/ci-loop/run.I.log and its last lines printed.  Exit status: the
# number of failed runs (at most 100).
set -u
B=${1:?usage: ci_loop.sh BUILD N [REGEX]}
N=${2:?usage: ci_loop.sh BUILD N [REGEX]}
RE=${3:-python_loaders|mount_}
LOAD=${CI_LOOP_LOAD:-$(nproc)}
D=$B/ci-loop
mkdir -p "$D"
BUSY=""
stop() { for p in $BUSY; do kill "$p" 2>/dev/null; done; }
trap stop EXIT
trap 'exit 130' INT TERM
i=0
while [ $i -lt "$LOAD" ]; do
    nice -n 10 sh -c 'while :; do :; done' &
    BUSY="$BUSY $!"
    i=$((i + 1))
done
echo "ci_loop: $N runs of ctest -R '$RE' beside $LOAD busy loops, nice 10, $(date -u +%H:%M) UTC"
failed=0
i=1
while [ $i -le "$N" ]; do
    t0=$(date +%s)
    if nice -n 10 ctest --test-dir "$B" -j2 -R "$RE" --output-on-failure >"$D/run.$i.log" 2>&1; then
        st=pass
    else
        st=FAIL
        failed=$((failed + 1))
    fi
    echo "run $i: $st in $(($(date +%s) - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
    if [ $st = FAIL ]; then
        grep -E "Failed|Timeout|FAIL|watchdog" "$D/run.$i.log" | head -20
    else
        rm -f "$D/run.$i.log"
    fi
    i=$((i + 1))
done
echo "ci_loop: $((N - failed)) of $N runs passed, $(date -u +%H:%M) UTC"
[ $failed -gt 100 ] && failed=100
exit $failed
