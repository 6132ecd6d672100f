#!/usr/bin/env bash
# bench_bigmodel.sh CKPTFS [OUT.md] — a model larger than memory (issue
# "Scale", part 2).  "Memory" is a memory cgroup (v1 or v2) limited to LIMIT
# (default 2 GiB) holding the reader, the daemon and their page cache; the
# model is RATIO (default 1.3) times that.  In one run, cold (drop_caches
# before each), inside the cgroup:
#   cat        every shard through the mount, then the originals
#   load_file  safetensors.torch.load_file shard by shard, same two ways
#   unpack / verify of the packed model
# Reports wall time and the ratio original / mount (target >= 1.2), the
# peaks of the cgroup's page cache and anonymous memory (its memory.stat,
# sampled every 0.1 s), the bytes read from storage by the command and the
# daemon (/proc/PID/io) and
# the daemon's peak RssAnon; the originals' cold cat is the disk's rate in
# this run (it varies a lot during the day); and, without the limit,
# the page cache the mount leaves behind after one cat of the model against
# the originals' (target: no more: the daemon drops the packed pages it has
# decoded, -o drop_packed, which the mount turns on by itself for a model
# over half of the machine's memory; here it is given, since "memory" is the
# cgroup's).  With LIMIT=0 it runs at the machine's own size (RATIO x
# MemTotal of data; needs 1.7 times that on disk), the cgroup only
# accounting, without unpack (a third copy) or the unlimited part.
# Mount and originals alternate, REPS rounds (default 1; medians), cat and
# load_file first.  ROWS_ONLY=1 skips unpack, verify and the unlimited part.
# Env: LIMIT (bytes, or with M/G), RATIO, REPS, CK_OPTS (more mount options),
# BENCH_DIR (/var/tmp/ckptfs-big).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../bench/lib.sh"
bench_args "$@"
W=${BENCH_DIR:-/var/tmp/ckptfs-big}
LIMIT=$(numfmt --from=iec "${LIMIT:-2G}")
RATIO=${RATIO:-1.3}
REPS=${REPS:-1}
LOAD0=$(cut -d" " -f1-3 /proc/loadavg)
START=$(date -u +%Y-%m-%dT%H:%MZ)
MEM=$(awk '/MemTotal/ {printf "%d", $2 * 1024}' /proc/meminfo)
BASE=$([ "$LIMIT" -gt 0 ] && echo "$LIMIT" || echo "$MEM")
MODEL_MIB=$(awk -v b="$BASE" -v r="$RATIO" 'BEGIN {printf "%d", b * r / 1048576}')
CG=""
cleanup_more() { sleep 0.2; rmdir "$CG" 2>/dev/null || true; }
bench_start big
mkdir -p "$W"

# ---- the cgroup -------------------------------------------------------------
# Always one, for the accounting; limited to LIMIT unless LIMIT=0.
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then    # v2
    CG=/sys/fs/cgroup/ckptfs-big-$$
    mkdir "$CG"
    [ "$LIMIT" -gt 0 ] && echo "$LIMIT" >"$CG/memory.max"
    STAT_FILE=file STAT_ANON=anon
else                                                  # v1
    CG=/sys/fs/cgroup/memory/ckptfs-big-$$
    mkdir "$CG"
    [ "$LIMIT" -gt 0 ] && echo "$LIMIT" >"$CG/memory.limit_in_bytes"
    STAT_FILE=total_cache STAT_ANON=total_rss
fi
IN_CG='echo $$ >"$0/cgroup.procs" && exec "$@"'   # sh -c "$IN_CG" CG CMD...: CMD in the cgroup CG
incg() { sh -c "$IN_CG" "$CG" "$@"; }
MOUNT_CG=$CG
# page cache and anonymous bytes charged to the cgroup, every 0.1 s until
# $T/sampling goes; peaks in $T/mem
mem_now() {
    awk -v f="$STAT_FILE" -v a="$STAT_ANON" '$1 == f {c = $2} $1 == a {n = $2} END {print c, n}' "$CG/memory.stat"
}
sample_mem() {
    while [ -e "$T/sampling" ]; do mem_now; sleep 0.1; done |
        awk '$1 > c {c = $1} $2 > a {a = $2} END {print int(c / 1048576), int(a / 1048576)}' >"$T/mem"
}

# ---- data -----------------------------------------------------------------------
SRC=$W/src-$MODEL_MIB
q=$((MODEL_MIB / 8))
made "$SRC" "$SRC.done" "$PY" "$BENCH_LIB/mount_gen.py" "$SRC" $((q * 2)) "$q" 6 >/dev/null
PK=$W/packed-$MODEL_MIB
made "$PK" "$PK.done" quiet "$T/pack.log" "$CKPTFS" pack "$SRC" "$PK"
MODEL_BYTES=$(cat "$SRC"/*.safetensors | wc -c)

# bytes read from storage by a process and the children it waited for
# (/proc/PID/io: others' reads on the shared disk do not count)
io_read() { awk '/^read_bytes/ {print $2}' "/proc/$1/io" 2>/dev/null || echo 0; }
cached_kib() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
ANONMAX=0
mount_ck() {   # mount_ck [OPTS]: PID is the daemon's (sh execs it), in MOUNT_CG; RssAnon (kB) every 0.1 s in anon
    start_daemon "$T/ck.log" sh -c "$IN_CG" "$MOUNT_CG" "$CKPTFS" mount -f ${1:+-o "$1"} "$PK" "$MNT"
    sample_anon "$PID" 0.1 >"$T/anon" &
    wait_mount fuse.ckptfs "$T/ck.log"
}
umount_ck() {
    unmount
    sleep 0.2
    ANONMAX=$(sort -n "$T/anon" | tail -1)
}
# load_file maps the file: its tensors are views of the mapping, read only
# when used.  Each is copied once (what a loader does that keeps or moves
# them), a shard's copies kept until the next shard.
LOAD='import os, sys
from safetensors.torch import load_file
d = sys.argv[1]
for x in sorted(os.listdir(d)):
    if x.endswith(".safetensors"):
        state = {k: v.clone() for k, v in load_file(os.path.join(d, x)).items()}
        del state'
ROWS=""
med() { median %.2f; }
row() {   # row WHAT KEY_MOUNT KEY_ORIG DAEMON_ANON
    local m o
    m=$(echo "${S[$2]}" | med) o=$(echo "${S[$3]}" | med)
    ROWS+="| $1 | $m s | $o s | $(ratio "$o" "$m") | $(echo "${C[$2]}" | med | cut -d. -f1) / $(echo "${C[$3]}" | med | cut -d. -f1) | $(echo "${A[$2]}" | med | cut -d. -f1) / $(echo "${A[$3]}" | med | cut -d. -f1) | $(echo "${D[$2]}" | med | cut -d. -f1) / $(echo "${D[$3]}" | med | cut -d. -f1) | $4 |"$'\n'
}
declare -A S C A D
one() {   # one KEY CMD...: cold wall time of CMD inside the cgroup, page cache and anon peaks, MiB read
    local key=$1 t d0 pc an
    shift
    drop_caches
    d0=$([ -n "$PID" ] && io_read "$PID" || echo 0)   # the daemon's reads count too
    touch "$T/sampling"
    sample_mem &
    local sp=$!
    t=$(now)
    incg sh -c '"$@" >/dev/null; awk "/^read_bytes/ {print \$2}" /proc/$$/io >"$0"' "$T/io" "$@"
    S[$key]+="$(since "$t" %.2f) "
    rm -f "$T/sampling"
    wait "$sp"
    read -r pc an <"$T/mem"
    C[$key]+="$pc " A[$key]+="$an "
    D[$key]+="$(( ($(cat "$T/io") + $([ -n "$PID" ] && io_read "$PID" || echo 0) - d0) >> 20 )) "
}
anon_peak() { awk -v k="$ANONMAX" 'BEGIN {printf "%.1f", k / 1024}'; }
for what in cat load_file; do
    case $what in
    cat) cmd_m=(sh -c 'cat "$0"/*.safetensors' "$MNT"); cmd_o=(sh -c 'cat "$0"/*.safetensors' "$SRC") ;;
    load_file) cmd_m=("$PY" -c "$LOAD" "$MNT"); cmd_o=("$PY" -c "$LOAD" "$SRC") ;;
    esac
    ANONS=""
    for rep in $(seq "$REPS"); do
        for src in $([ $((rep % 2)) = 1 ] && echo "m o" || echo "o m"); do
            if [ "$src" = m ]; then
                drop_caches
                # drop_packed: what auto chooses for a model over half of the (cgroup's) memory
                mount_ck "drop_packed${CK_OPTS:+,$CK_OPTS}"
                one "$what.m" "${cmd_m[@]}"
                umount_ck
                ANONS+="$(anon_peak) "
            else
                one "$what.o" "${cmd_o[@]}"
            fi
        done
        log "$what round $rep: mount ${S[$what.m]}s, originals ${S[$what.o]}s"
    done
    row "$what" "$what.m" "$what.o" "$(echo "$ANONS" | med)"
done
DISK_RATE=$(awk -v b="$MODEL_BYTES" -v s="$(echo "${S[cat.o]}" | med)" 'BEGIN {printf "%.2f", b / s / 1e9}')
if [ -z "${ROWS_ONLY:-}" ]; then
    if [ "$LIMIT" -gt 0 ]; then # at LIMIT=0 the model would not fit on the disk a third time
        rm -rf "$T/out"
        one unpack "$CKPTFS" unpack "$PK" "$T/out"
        rm -rf "$T/out"
        # unpack fsyncs each file it writes (and the directory) before the
        # rename that makes OUT appear: the copy does the same, `sync FILE...`
        one cp sh -c 'cp -r "$0" "$1" && sync "$1"/* "$1"' "$SRC" "$T/out"
        row "unpack (originals: cp -r, then sync of its files)" unpack cp "-"
        rm -rf "$T/out"
    fi
    one verify "$CKPTFS" verify "$PK"
    one sha sh -c 'sha256sum "$0"/*.safetensors' "$SRC"
    row "verify (originals: sha256sum)" verify sha "-"
fi

# ---- page cache left behind, no limit -----------------------------------------
UNLIMITED=""
if [ -z "${ROWS_ONLY:-}" ] && [ "$LIMIT" -gt 0 ]; then
    CG_SAVE=$CG
    incg() { "$@"; }
    MOUNT_CG=$(dirname "$CG")   # the parent: no limit
    for o in drop_packed keep_packed; do
        drop_caches; c0=$(cached_kib)
        mount_ck "$o"
        cat "$MNT"/*.safetensors >/dev/null
        eval "c_$o=$(( ($(cached_kib) - c0) >> 10 ))"
        umount_ck
    done
    drop_caches; c0=$(cached_kib)
    cat "$SRC"/*.safetensors >/dev/null
    c_orig=$(( ($(cached_kib) - c0) >> 10 ))
    CG=$CG_SAVE
    UNLIMITED="Page cache after one cold cat of the model, no limit: through the mount $c_drop_packed MiB with -o drop_packed, $c_keep_packed MiB with keep_packed; originals $c_orig MiB (model $((MODEL_BYTES >> 20)) MiB)."
fi
{
    echo "Model larger than memory: $((MODEL_BYTES >> 20)) MiB of BF16 shards, $([ "$LIMIT" -gt 0 ] && echo "memory cgroup limit $((LIMIT >> 20)) MiB" || echo "no limit: the machine's $((MEM >> 20)) MiB") (ratio $RATIO), cold each time, $(nproc) cores, $START to $(date -u +%H:%MZ), load average $LOAD0 at start, $(cut -d' ' -f1-3 /proc/loadavg) at end; medians of $REPS alternating rounds; the disk read the originals cold at $DISK_RATE GB/s (cat)${CK_OPTS:+; mount -o drop_packed,$CK_OPTS}"
    echo
    echo "| read (cold) | through the mount | originals | originals / mount | page cache peak MiB, mount / orig | anon peak MiB, mount / orig | MiB read from storage, mount / orig | daemon peak RssAnon MiB |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s' "$ROWS"
    [ -n "$UNLIMITED" ] && { echo; echo "$UNLIMITED"; }
} | tee ${OUT_MD:+"$OUT_MD"}
