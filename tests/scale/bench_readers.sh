#!/usr/bin/env bash
# bench_readers.sh CKPTFS [OUT.md] — many readers at once (issue "Scale",
# part 3), as tensor-parallel loaders start one process per GPU.  For 1, 2, 4
# and 8 processes, each
#   whole: reads every shard of the model (cat), or
#   slice: reads a disjoint eighth of each tensor's rows with
#          safetensors' safe_open(...).get_slice (process r takes rows
#          [r R/8, (r+1) R/8) of every tensor),
# from three sources, in the same run, each a fresh mount (the FUSE page cache
# empty) over files warm in the page cache:
#   ckptfs   `ckptfs mount` of the packed model (-o stats: decodes counted)
#   noop     tests/bench/noop_fuse --dir: the same original files served from
#            memory by a do-nothing FUSE fs (the FUSE ceiling)
#   orig     the original files (page cache)
# Prints aggregate GB/s (bytes handed to the readers / wall time), the ratio
# ckptfs / noop (target >= 0.8 at every count), the daemon's CPU seconds per
# GiB it decoded, and decodes per chunk (1.00: every chunk decoded once).
# A benchmark: it fails only when a command fails or bytes differ.
# Env: MODEL_MIB (default 1024: one 512 MiB and two 256 MiB shards of 16 MiB
# tensors, tests/bench/mount_gen.py), READERS (default "1 2 4 8"), THREADS
# (daemon and noop threads, default: ckptfs's default / 16), REPS (2),
# BENCH_DIR (default /var/tmp/ckptfs-readers).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CKPTFS [OUT.md]" >&2; exit 2; }
CKPTFS=$(readlink -f "$1")
OUT_MD=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
W=${BENCH_DIR:-/var/tmp/ckptfs-readers}
MODEL_MIB=${MODEL_MIB:-1024}
READERS=${READERS:-1 2 4 8}
REPS=${REPS:-2}
[ "$(id -u)" = 0 ] && [ -c /dev/fuse ] || { echo "needs root and /dev/fuse" >&2; exit 2; }
T=$(mktemp -d /tmp/ckptfs-readers.XXXXXX)
MNT=$T/mnt
mkdir -p "$MNT" "$W"
PID=""
cleanup() {
    grep -q " $MNT fuse" /proc/mounts && { fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"; }
    [ -n "$PID" ] && kill "$PID" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
log() { echo "[readers] $*" >&2; }
TICK=$(getconf CLK_TCK)

SRC=$W/src-$MODEL_MIB
if [ ! -f "$SRC/.done" ]; then
    rm -rf "$SRC"
    half=$((MODEL_MIB / 2))
    "$PY" "$HERE/../bench/mount_gen.py" "$SRC" "$half" $((half / 2)) 2 >/dev/null
    touch "$SRC/.done"
fi
PK=$W/packed-$MODEL_MIB
[ -f "$PK/.done" ] || { rm -rf "$PK"; "$CKPTFS" pack "$SRC" "$PK" >/dev/null 2>&1; touch "$PK/.done"; }
MODEL_BYTES=$(cat "$SRC"/*.safetensors | wc -c)
CHUNKS=$("$PY" - "$SRC" <<'EOF'
import json, os, struct, sys
n = 0
for x in os.listdir(sys.argv[1]):
    if x.endswith(".safetensors"):
        with open(os.path.join(sys.argv[1], x), "rb") as f:
            h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for k, v in h.items():
            if k != "__metadata__":
                w = (v["data_offsets"][1] - v["data_offsets"][0]) // 2
                n += -(-w // 65536)
print(n)
EOF
)
NOOP=$T/noop_fuse
cc -O2 -o "$NOOP" "$HERE/../bench/noop_fuse.c" $(pkg-config --cflags --libs fuse3)

wait_mount() {
    for _ in $(seq 400); do grep -q " $MNT $1 " /proc/mounts && return 0; sleep 0.025; done
    echo "mount at $MNT ($1) did not come up" >&2; exit 1
}
start() {   # start SOURCE: sets DIR, the directory readers read from
    case $1 in
    orig) DIR=$SRC ;;
    ckptfs)
        "$CKPTFS" mount -f -o stats${THREADS:+,threads=$THREADS} "$PK" "$MNT" 2>"$T/ck.log" &
        PID=$!
        wait_mount fuse.ckptfs
        DIR=$MNT ;;
    noop)
        "$NOOP" --dir "$SRC" "${THREADS:-16}" "$MNT" 2>/dev/null &
        PID=$!
        wait_mount fuse.noop
        DIR=$MNT ;;
    esac
}
stop() {
    [ -n "$PID" ] || return 0
    CPU=$(awk -v t="$TICK" '{print ($14 + $15) / t}' "/proc/$PID/stat")
    fusermount3 -u "$MNT"
    wait "$PID" 2>/dev/null || true
    PID=""
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
                t = sl[r * rows // 8:(r + 1) * rows // 8]
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

declare -A GB CPUG DEC
for rep in $(seq "$REPS"); do
    for mode in whole slice; do
        for p in $READERS; do
            for src in ckptfs noop orig; do
                cat "$PK"/* "$SRC"/* >/dev/null
                start "$src"
                read -r bytes secs < <(run_readers "$DIR" "$mode" "$p")
                CPU=0
                stop
                key=$mode.$p.$src
                GB[$key]+="$(awk -v b="$bytes" -v s="$secs" 'BEGIN {printf "%.3f", b / s / 1e9}') "
                if [ "$src" = ckptfs ]; then
                    # every decode is a cache miss (a prefetch's too)
                    dec=$(awk '/cache hits/ {for (i = 1; i <= NF; i++) if ($i == "misses") m = $(i+1)} END {print m + 0}' "$T/ck.log")
                    DEC[$key]+="$(awk -v d="$dec" -v c="$CHUNKS" 'BEGIN {printf "%.2f", d / c}') "
                    CPUG[$key]+="$(awk -v c="$CPU" -v d="$dec" 'BEGIN {printf "%.2f", d ? c / (d * 131072 / 1073741824) : 0}') "
                fi
                log "rep $rep $mode P=$p $src: ${GB[$key]}"
            done
        done
    done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.2f", (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
{
    echo "Many readers: $(nproc) cores, model $((MODEL_BYTES >> 20)) MiB of 16 MiB BF16 tensors, medians of $REPS, $(date -u +%Y-%m-%d)"
    echo
    echo "| read | readers | ckptfs GB/s | noop FUSE GB/s | originals GB/s | ckptfs / noop | daemon CPU s per GiB decoded | decodes per chunk |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for mode in whole slice; do
        for p in $READERS; do
            c=$(echo "${GB[$mode.$p.ckptfs]}" | med)
            n=$(echo "${GB[$mode.$p.noop]}" | med)
            o=$(echo "${GB[$mode.$p.orig]}" | med)
            echo "| $mode | $p | $c | $n | $o | $(awk -v a="$c" -v b="$n" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}') | $(echo "${CPUG[$mode.$p.ckptfs]}" | med) | $(echo "${DEC[$mode.$p.ckptfs]}" | med) |"
        done
    done
} | tee ${OUT_MD:+"$OUT_MD"}
