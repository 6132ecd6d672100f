#!/usr/bin/env bash
# bench_readers.sh CKPTFS [OUT.md] — many readers at once (issue "Scale",
# part 3), as tensor-parallel loaders start one process per GPU.  For 1, 2, 4
# and 8 processes, each
#   whole: reads every shard of the model (cat), or
#   slice: reads a disjoint eighth of each tensor's rows with
#          safetensors' safe_open(...).get_slice (process r takes rows
#          [r R/8, (r+1) R/8) of every tensor) and copies it (get_slice
#          returns a view of safetensors' mapping of the file: without the
#          copy only the faults of the pages it maps would be timed),
# from three sources, in the same run, each a fresh mount (the FUSE page cache
# empty) over files warm in the page cache:
#   ckptfs   `ckptfs mount` of the packed model (counters read with
#            `ckptfs stat --json MOUNTPOINT` before unmounting)
#   noop     tests/bench/noop_fuse --dir: the same original files served from
#            memory by a do-nothing FUSE fs (the FUSE ceiling), at the
#            read_ahead_kb the ckptfs mount had
#   orig     the original files (page cache)
# One round runs the three back to back for each mode and count, so a burst
# of others' load hits them alike; figures are medians over REPS rounds.
# Prints aggregate GB/s (bytes handed to the readers / wall time), the ratio
# ckptfs / noop (target >= 0.8 at every count), each daemon's CPU seconds per
# GiB handed to the readers, decodes per chunk (decoded bytes / the model's;
# 1.00: every chunk decoded once) and the bytes the kernel asked the daemon
# for per byte the readers took (readahead overshoot).
# A benchmark: it fails only when a command fails or bytes differ.
# Env: MODEL_MIB (default 1024: one 512 MiB and two 256 MiB shards of 16 MiB
# tensors, tests/bench/mount_gen.py), READERS (default "1 2 4 8"), THREADS
# (daemon and noop threads, default: ckptfs's default / 16), CK_EXTRA (more
# -o options for ckptfs), REPS (3), BENCH_DIR (default /var/tmp/ckptfs-readers),
# BASE (another ckptfs binary, e.g. main's: measured as a fourth source in
# every round, before ckptfs, with its own default options; a before/after
# comparison in one run).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../bench/lib.sh"
bench_args "$@"
BASE=${BASE:+$(readlink -f "$BASE")}
W=${BENCH_DIR:-/var/tmp/ckptfs-readers}
MODEL_MIB=${MODEL_MIB:-1024}
READERS=${READERS:-1 2 4 8}
REPS=${REPS:-3}
LOAD0=$(cut -d" " -f1-3 /proc/loadavg)
START=$(date -u +%Y-%m-%dT%H:%MZ)
bench_start readers
mkdir -p "$W"

SRC=$W/src-$MODEL_MIB
half=$((MODEL_MIB / 2))
made "$SRC" "$SRC.done" "$PY" "$BENCH_LIB/mount_gen.py" "$SRC" "$half" $((half / 2)) 2 >/dev/null
PK=$W/packed-$MODEL_MIB
made "$PK" "$PK.done" quiet "$T/pack.log" "$CKPTFS" pack "$SRC" "$PK"
MODEL_BYTES=$(cat "$SRC"/*.safetensors | wc -c)
build_noop

start() {   # start SOURCE: sets DIR, the directory readers read from
    case $1 in
    orig) DIR=$SRC ;;
    ckptfs | base)
        local bin=$CKPTFS opts=$CK_OPTS
        [ "$1" = base ] && bin=$BASE opts=${THREADS:+threads=$THREADS}
        start_daemon "$T/ck.log" "$bin" mount -f ${opts:+-o "$opts"} "$PK" "$MNT"
        wait_mount fuse.ckptfs "$T/ck.log"
        CPU0=$(cpu_s "$PID")
        RA_KB=$(cat "$(bdi)/read_ahead_kb")
        DIR=$MNT ;;
    noop)
        start_daemon "$T/noop.log" "$NOOP" --dir "$SRC" "${THREADS:-16}" "$MNT"
        wait_mount fuse.noop "$T/noop.log"
        CPU0=$(cpu_s "$PID")   # after it has read the files into memory
        echo "$RA_KB" >"$(bdi)/read_ahead_kb"
        DIR=$MNT ;;
    esac
}
bdi() { echo "/sys/class/bdi/$(awk -v m="$MNT" '$5 == m {print $3}' /proc/self/mountinfo | tail -1)"; }
# the ckptfs mount's read_ahead_kb, which the noop mount gets too (ckptfs runs first)
RA_KB=$("$CKPTFS" mount -h | sed -n 's/.*read_ahead_kb=N.*default \([0-9]*\).*/\1/p')
CK_OPTS=${THREADS:+threads=$THREADS}${CK_EXTRA:+${THREADS:+,}$CK_EXTRA}
stop() {
    [ -n "$PID" ] || return 0
    [ "$DIR" = "$MNT" ] && grep -q " $MNT fuse.ckptfs " /proc/mounts && "$CKPTFS" stat --json "$MNT" >"$T/stats.json"
    CPU=$(awk -v a="$(cpu_s "$PID")" -v b="$CPU0" 'BEGIN {print a - b}')
    unmount
}
run_readers() {   # run_readers DIR MODE P -> bytes read by all, seconds
    "$PY" - "$1" "$2" "$3" <<'EOF'
import os, sys, time
from multiprocessing import Process, Queue
import torch  # noqa: F401  imported before the clock starts (forked children share it)
from safetensors import safe_open
d, mode, p = sys.argv[1], sys.argv[2], int(sys.argv[3])
shards = sorted(os.path.join(d, x) for x in os.listdir(d) if x.endswith(".safetensors"))

def whole(q, r):
    n = 0
    for s in shards:
        with open(s, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
    q.put(n)

def part(q, r):
    n = 0
    for s in shards:
        with safe_open(s, framework="pt") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                rows = sl.get_shape()[0]
                t = sl[r * rows // 8:(r + 1) * rows // 8].clone()  # the copy reads it
                n += t.numel() * t.element_size()
    q.put(n)

q = Queue()
fn = whole if mode == "whole" else part
t = time.perf_counter()
ps = [Process(target=fn, args=(q, r % 8)) for r in range(p)]
for x in ps:
    x.start()
total = sum(q.get() for _ in ps)
for x in ps:
    x.join()
print(total, time.perf_counter() - t)
EOF
}

declare -A GB CPUG DEC ASK
for rep in $(seq "$REPS"); do
    for mode in whole slice; do
        for p in $READERS; do
            for src in ${BASE:+base} ckptfs noop orig; do
                cat "$PK"/* "$SRC"/* >/dev/null
                start "$src"
                read -r bytes secs < <(run_readers "$DIR" "$mode" "$p")
                CPU=0
                stop
                key=$mode.$p.$src
                GB[$key]+="$(gbps "$bytes" "$secs") "
                [ "$src" != orig ] && CPUG[$key]+="$(awk -v c="$CPU" -v b="$bytes" 'BEGIN {printf "%.3f", c / (b / 1073741824)}') "
                if [ "$src" = ckptfs ] || [ "$src" = base ]; then
                    read -r dec asked < <("$PY" -c 'import json, sys; o = json.load(open(sys.argv[1])); print(o["decoded_bytes"], o["read_bytes"])' "$T/stats.json")
                    DEC[$key]+="$(awk -v d="$dec" -v m="$MODEL_BYTES" 'BEGIN {printf "%.3f", d / m}') "
                    ASK[$key]+="$(awk -v a="$asked" -v b="$bytes" 'BEGIN {printf "%.3f", a / b}') "
                fi
                log "rep $rep $mode P=$p $src: ${GB[$key]}"
            done
        done
    done
done
med() { median %.2f; }
{
    echo "Many readers: $(nproc) cores, model $((MODEL_BYTES >> 20)) MiB of 16 MiB BF16 tensors, files warm, medians of $REPS interleaved rounds, $START to $(date -u +%H:%MZ), load average $LOAD0 at start, $(cut -d' ' -f1-3 /proc/loadavg) at end; read_ahead_kb $RA_KB${CK_OPTS:+, ckptfs -o $CK_OPTS}${BASE:+; base: $BASE}"
    echo
    echo "| read | readers | ckptfs GB/s | noop FUSE GB/s | originals GB/s | ckptfs / noop | daemon CPU s/GiB ckptfs / noop | decodes per chunk | bytes asked / taken |${BASE:+ base GB/s | base / noop | base decodes per chunk | base bytes asked / taken |}"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|${BASE:+---:|---:|---:|---:|}"
    for mode in whole slice; do
        for p in $READERS; do
            c=$(echo "${GB[$mode.$p.ckptfs]}" | med)
            n=$(echo "${GB[$mode.$p.noop]}" | med)
            o=$(echo "${GB[$mode.$p.orig]}" | med)
            b=""
            if [ -n "$BASE" ]; then
                bg=$(echo "${GB[$mode.$p.base]}" | med)
                b=" $bg | $(ratio "$bg" "$n") | $(echo "${DEC[$mode.$p.base]}" | med) | $(echo "${ASK[$mode.$p.base]}" | med) |"
            fi
            echo "| $mode | $p | $c | $n | $o | $(ratio "$c" "$n") | $(echo "${CPUG[$mode.$p.ckptfs]}" | med) / $(echo "${CPUG[$mode.$p.noop]}" | med) | $(echo "${DEC[$mode.$p.ckptfs]}" | med) | $(echo "${ASK[$mode.$p.ckptfs]}" | med) |$b"
        done
    done
} | tee ${OUT_MD:+"$OUT_MD"}
