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
# cgroup's peak memory and the daemon's peak RssAnon; and, without the limit,
# the page cache the mount leaves behind after one cat of the model against
# the originals' (target: no more: the daemon drops the packed pages it has
# decoded, -o drop_packed, which the mount turns on by itself for a model
# over half of the machine's memory; here it is given, since "memory" is the
# cgroup's).  With LIMIT=0 it runs at the machine's own size
# (MODEL_GIB of data, default 1.3 x MemTotal; needs that much disk twice).
# Env: LIMIT (bytes, or with M/G), RATIO, BENCH_DIR (/var/tmp/ckptfs-big).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CKPTFS [OUT.md]" >&2; exit 2; }
CKPTFS=$(readlink -f "$1")
OUT_MD=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
W=${BENCH_DIR:-/var/tmp/ckptfs-big}
LIMIT=$(numfmt --from=iec "${LIMIT:-2G}")
RATIO=${RATIO:-1.3}
[ "$(id -u)" = 0 ] && [ -c /dev/fuse ] || { echo "needs root and /dev/fuse" >&2; exit 2; }
MEM=$(awk '/MemTotal/ {print $2 * 1024}' /proc/meminfo)
BASE=$([ "$LIMIT" -gt 0 ] && echo "$LIMIT" || echo "$MEM")
MODEL_MIB=$(awk -v b="$BASE" -v r="$RATIO" 'BEGIN {printf "%d", b * r / 1048576}')
T=$(mktemp -d /tmp/ckptfs-big.XXXXXX)
MNT=$T/mnt
mkdir -p "$MNT" "$W"
PID=""
CG=""
cleanup() {
    grep -q " $MNT fuse" /proc/mounts && { fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"; }
    [ -n "$PID" ] && kill "$PID" 2>/dev/null
    [ -n "$CG" ] && { sleep 0.2; rmdir "$CG" 2>/dev/null || true; }
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
log() { echo "[big] $*" >&2; }

# ---- the cgroup -------------------------------------------------------------
if [ "$LIMIT" -gt 0 ]; then
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then    # v2
        CG=/sys/fs/cgroup/ckptfs-big-$$
        mkdir "$CG"
        echo "$LIMIT" >"$CG/memory.max"
        peak() { cat "$CG/memory.peak" 2>/dev/null || echo 0; }
        reset_peak() { echo 0 >"$CG/memory.peak" 2>/dev/null || true; }
    else                                                  # v1
        CG=/sys/fs/cgroup/memory/ckptfs-big-$$
        mkdir "$CG"
        echo "$LIMIT" >"$CG/memory.limit_in_bytes"
        peak() { cat "$CG/memory.max_usage_in_bytes"; }
        reset_peak() { echo 0 >"$CG/memory.max_usage_in_bytes"; }
    fi
    incg() { sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$@"; }
else
    peak() { echo 0; }
    reset_peak() { :; }
    incg() { "$@"; }
fi

# ---- data -----------------------------------------------------------------------
SRC=$W/src-$MODEL_MIB
if [ ! -f "$SRC/.done" ]; then
    rm -rf "$SRC"
    log "generating $MODEL_MIB MiB in $SRC"
    q=$((MODEL_MIB / 8))
    "$PY" "$HERE/../bench/mount_gen.py" "$SRC" $((q * 2)) "$q" 6 >/dev/null
    touch "$SRC/.done"
fi
PK=$W/packed-$MODEL_MIB
[ -f "$PK/.done" ] || { rm -rf "$PK"; "$CKPTFS" pack "$SRC" "$PK" >/dev/null 2>&1; touch "$PK/.done"; }
MODEL_BYTES=$(cat "$SRC"/*.safetensors | wc -c)

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN {printf "%.2f", a - b}'; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
cached_kib() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
ANONMAX=0
sample_anon() { while [ -e "/proc/$1/status" ]; do awk '/RssAnon/ {print $2}' "/proc/$1/status" 2>/dev/null; sleep 0.1; done >"$T/anon"; }
mount_ck() {   # mount_ck [OPTS]
    incg "$CKPTFS" mount -f ${1:+-o "$1"} "$PK" "$MNT" 2>>"$T/ck.log" &
    PID=$!
    sample_anon "$PID" &
    for _ in $(seq 400); do grep -q " $MNT fuse.ckptfs " /proc/mounts && return 0; sleep 0.025; done
    cat "$T/ck.log" >&2; exit 1
}
umount_ck() {
    fusermount3 -u "$MNT"
    wait "$PID" 2>/dev/null || true
    PID=""
    sleep 0.2
    ANONMAX=$(sort -n "$T/anon" | tail -1)
}
LOAD='import os, sys
from safetensors.torch import load_file
d = sys.argv[1]
for x in sorted(os.listdir(d)):
    if x.endswith(".safetensors"):
        t = load_file(os.path.join(d, x))
        del t'
ROWS=""
row() { ROWS+="| $1 | $2 | $3 | $(awk -v a="$3" -v b="$2" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}') | $4 | $5 |"$'\n'; }
one() {   # one CMD...: cold wall time of CMD inside the cgroup; sets S, P
    drop
    reset_peak
    local t
    t=$(now)
    incg "$@" >/dev/null
    S=$(since "$t")
    P=$(( $(peak) >> 20 ))
}
for what in cat load_file; do
    case $what in
    cat) cmd_m=(sh -c 'cat "$0"/*.safetensors' "$MNT"); cmd_o=(sh -c 'cat "$0"/*.safetensors' "$SRC") ;;
    load_file) cmd_m=("$PY" -c "$LOAD" "$MNT"); cmd_o=("$PY" -c "$LOAD" "$SRC") ;;
    esac
    drop
    mount_ck drop_packed   # what auto chooses for a model over half of the (cgroup's) memory
    one "${cmd_m[@]}"
    sm=$S pm=$P
    umount_ck
    one "${cmd_o[@]}"
    row "$what" "$sm" "$S" "$pm / $P" "$(awk -v k="$ANONMAX" 'BEGIN {printf "%.1f", k / 1024}')"
    log "$what: mount $sm s, originals $S s"
done
rm -rf "$T/out"
one "$CKPTFS" unpack "$PK" "$T/out"
su=$S pu=$P
rm -rf "$T/out"
one cp -r "$SRC" "$T/out"
row "unpack (originals: cp -r)" "$su" "$S" "$pu / $P" "-"
rm -rf "$T/out"
one "$CKPTFS" verify "$PK"
sv=$S pv=$P
one sh -c 'sha256sum "$0"/*.safetensors' "$SRC"
row "verify (originals: sha256sum)" "$sv" "$S" "$pv / $P" "-"

# ---- page cache left behind, no limit -----------------------------------------
CG_SAVE=$CG
incg() { "$@"; }
for o in drop_packed keep_packed; do
    drop; c0=$(cached_kib)
    mount_ck "$o"
    cat "$MNT"/*.safetensors >/dev/null
    eval "c_$o=$(( ($(cached_kib) - c0) >> 10 ))"
    umount_ck
done
drop; c0=$(cached_kib)
cat "$SRC"/*.safetensors >/dev/null
c_orig=$(( ($(cached_kib) - c0) >> 10 ))
CG=$CG_SAVE
{
    echo "Model larger than memory: $((MODEL_BYTES >> 20)) MiB of BF16 shards, memory cgroup limit $((LIMIT >> 20)) MiB (ratio $RATIO), cold each time, $(nproc) cores, $(date -u +%Y-%m-%d)"
    echo
    echo "| read | through the mount s | originals s | originals / mount | cgroup peak MiB (mount / orig) | daemon peak RssAnon MiB |"
    echo "|---|---:|---:|---:|---:|---:|"
    printf '%s' "$ROWS"
    echo
    echo "Page cache after one cold cat of the model, no limit: through the mount $c_drop_packed MiB with -o drop_packed, $c_keep_packed MiB with keep_packed; originals $c_orig MiB (model $((MODEL_BYTES >> 20)) MiB)."
} | tee ${OUT_MD:+"$OUT_MD"}
