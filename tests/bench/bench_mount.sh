#!/usr/bin/env bash
# bench_mount.sh BUILD_DIR_OR_CKPTFS [OUT.md] — how fast `ckptfs mount` serves
# a model, as ratios against baselines measured in the same run (a benchmark,
# not a test: it prints figures and never fails on them).
#
#  1. First sequential read of one big virtual shard (dd bs=1M), packed file
#     in the page cache, a fresh mount per run (FUSE's page cache cold):
#     ckptfs (default and other -o options) vs noop_fuse (a do-nothing FUSE
#     fs serving zeros from memory: the ceiling; target >= 70%) and vs
#     lmz's FUSE mount of the same weights (target >= 3x).
#  2. Cold page cache (drop_caches): every shard through the mount vs the
#     original files (target >= 1.2x faster).
#  3. safetensors.torch.load_file, warm: mount vs original directory
#     (target within 1.5x); also load_file followed by a read of every byte
#     (what moving the weights to a device costs), and the pread backend.
#  4. The daemon's anonymous memory (sampled RssAnon) next to its cache
#     limit, and VmHWM (which also counts the mapped packed files); FUSE request
#     sizes from -o stats.
# Each figure is the median of $REPS runs (default 3).  Needs root,
# /dev/fuse, fusermount3, python3 with numpy (torch + safetensors for 3,
# lmzip for the lmz column), cc and pkg-config fuse3 for noop_fuse.
# Data (~1.5 GiB source, its packs, the lmz store) is kept in $BENCH_DIR
# (default /var/tmp/ckptfs-bench) between runs; BIG_MIB, SMALL_MIB, N_SMALL
# size it; rm -rf it to free the disk.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
bench_args "$@"
REPS=${REPS:-3}
W=${BENCH_DIR:-/var/tmp/ckptfs-bench}
BIG_MIB=${BIG_MIB:-1024}
SMALL_MIB=${SMALL_MIB:-256}
N_SMALL=${N_SMALL:-2}
bench_start bench
mkdir -p "$W"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- data -------------------------------------------------------------------
SRC=$W/src-$BIG_MIB-$SMALL_MIB-$N_SMALL
made "$SRC" "$SRC/.done" "$PY" "$HERE/mount_gen.py" "$SRC" "$BIG_MIB" "$SMALL_MIB" "$N_SMALL"
mapfile -t SHARDS < <(cd "$SRC" && ls model-*.safetensors)
BIG=${SHARDS[0]}
BIG_SIZE=$(stat -c %s "$SRC/$BIG")
SRC_BYTES=0
for s in "${SHARDS[@]}"; do SRC_BYTES=$((SRC_BYTES + $(stat -c %s "$SRC/$s"))); done
PK=$W/packed
rm -rf "$PK"
log "packing ($(basename "$CKPTFS") pack, default format)"
ps=$(now)
quiet "$T/pack.log" "$CKPTFS" pack "$SRC" "$PK"
pack_s=$(since "$ps")
PK_BYTES=$(du -cb "$PK"/*.ckpt | tail -1 | cut -f1)

# ---- helpers ------------------------------------------------------------------
dd_secs() {   # dd_secs FILE: seconds of one dd bs=1M pass
    dd if="$1" of=/dev/null bs=1M 2>&1 | awk '/copied/ {for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/) print $(i-1)}'
}
warm_packed() { cat "$PK"/* >/dev/null; }
HWM_KB=0
note_hwm() {   # VmHWM, and the RssAnon sampler's maximum (see mount_ck)
    local h
    h=$(awk '/VmHWM/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo 0)
    [ "${h:-0}" -gt "$HWM_KB" ] && HWM_KB=$h
    return 0
}
mount_ck() {    # mount_ck OPTS: a fresh ckptfs mount in the foreground, PID set; RssAnon (kB) every 50 ms in anon.kb
    local o=${1:-}
    start_daemon "$T/ck.log" "$CKPTFS" mount -f ${o:+-o "$o"} "$PK" "$MNT"
    sample_anon "$PID" 0.05 >>"$T/anon.kb" &
    wait_mount fuse.ckptfs "$T/ck.log"
}

# ---- 1. first sequential read ---------------------------------------------------
# One round = every configuration once, back to back, so that a burst of
# background load (the machine is shared) hits them alike; $REPS rounds.
cpu_of() {   # cpu_of PID KEY: add the daemon's CPU seconds so far to $T/cpu.KEY
    cpu_s "$1" >>"$T/cpu.$(echo "$2" | tr -c 'a-zA-Z0-9\n' _)"
}
one_ck() {   # one_ck OPTS -> GB/s of one first read through a fresh mount
    warm_packed
    mount_ck "$1"
    gbps "$BIG_SIZE" "$(dd_secs "$MNT/$BIG")"
    cpu_of "$PID" "ck$1"
    note_hwm
    unmount
}
build_noop
one_noop() {   # one_noop READ_AHEAD_KB (0: the kernel's) -> GB/s
    local dev
    start_daemon "$T/noop.log" "$NOOP" "$BIG_SIZE" 16 "$MNT"
    wait_mount fuse.noop "$T/noop.log"
    dev=$(awk -v m="$MNT" '$5 == m {print $3}' /proc/self/mountinfo | tail -1)
    [ "$1" != 0 ] && echo "$1" >"/sys/class/bdi/$dev/read_ahead_kb"
    gbps "$BIG_SIZE" "$(dd_secs "$MNT/zero.bin")"
    cpu_of "$PID" "noop$1"
    unmount
}
LMZ=""
if command -v lmz >/dev/null 2>&1; then
    LS=$W/lmz-$BIG_MIB-$SMALL_MIB-$N_SMALL
    made "$LS" "$LS/.done" quiet "$T/lmz.log" lmz add "$SRC" --store "$LS" --name m -q
    LMZ_BYTES=$(du -cb "$LS"/models/* | tail -1 | cut -f1)
fi
one_lmz() {
    cat "$LS"/models/* >/dev/null
    lmz mount --store "$LS" "$MNT" -q >>"$T/lmz.log" 2>&1 &
    PID=$!
    for _ in $(seq 400); do [ -e "$MNT/m/$BIG" ] && break; sleep 0.05; done
    gbps "$BIG_SIZE" "$(dd_secs "$MNT/m/$BIG")"
    unmount
}

VARIANTS=("" "threads=4" "threads=2" "prefetch=16M" "prefetch_threads=1" "prefetch_threads=4"
          "prefetch=0" "read_ahead_kb=4096" "read_ahead_kb=0")
[ -n "${CK_VARIANTS:-}" ] && IFS=' ' read -r -a VARIANTS <<<"$CK_VARIANTS"
log "1. first sequential read of $BIG ($((BIG_SIZE >> 20)) MiB), $REPS rounds of ${#VARIANTS[@]} ckptfs option sets, noop FUSE${LS:+, lmz}"
declare -A R   # configuration -> the figures of every round, one a line
for round in $(seq "$REPS"); do
    R[noop1m]+="$(one_noop 1024)"$'\n'
    R[noopk]+="$(one_noop 0)"$'\n'
    for v in "${VARIANTS[@]}"; do R["o:$v"]+="$(one_ck "$v")"$'\n'; done
    [ -n "${LS:-}" ] && R[lmz]+="$(one_lmz)"$'\n'
    log "  round $round: noop $(echo ${R[noop1m]} | tr ' ' /), default ckptfs $(echo ${R["o:${VARIANTS[0]}"]} | tr ' ' /) GB/s"
done
med() { printf '%s' "${R[$1]}" | grep . | median; }
declare -A CK
for v in "${VARIANTS[@]}"; do CK["o:$v"]=$(med "o:$v"); done
CK_DEF=${CK["o:"]:-${CK["o:${VARIANTS[0]}"]}}
BEST_V=${VARIANTS[0]}
for v in "${VARIANTS[@]}"; do
    awk -v a="${CK["o:$v"]}" -v b="${CK["o:$BEST_V"]}" 'BEGIN {exit !(a > b)}' && BEST_V=$v
done
CK_BEST=${CK["o:$BEST_V"]}
NOOP_1M=$(med noop1m)
NOOP_KDEF=$(med noopk)
NOOP_BEST=$(printf '%s\n%s\n' "$NOOP_1M" "$NOOP_KDEF" | sort -g | tail -1)
[ -n "${LS:-}" ] && LMZ=$(med lmz)
cpu_med() { median <"$T/cpu.$(echo "$1" | tr -c 'a-zA-Z0-9\n' _)"; }
CPU_CK=$(cpu_med "ck${VARIANTS[0]}")
CPU_NOOP=$(cpu_med noop1024)
GIB=$(awk -v b="$BIG_SIZE" 'BEGIN {print b / 1073741824}')
log "  medians: ckptfs default $CK_DEF, best ($BEST_V) $CK_BEST, noop $NOOP_1M / $NOOP_KDEF (kernel ra), lmz ${LMZ:-n/a} GB/s"

# ---- 2. cold page cache: every shard -------------------------------------------
log "2. cold cache: all ${#SHARDS[@]} shards, $REPS runs each"
seq_secs() { "$PY" "$HERE/mount_read.py" seq "$@" | cut -d' ' -f2; }
r_src=() r_ck=()
for _ in $(seq "$REPS"); do
    drop_caches
    r_src+=("$(seq_secs "${SHARDS[@]/#/$SRC/}")")
    mount_ck ""
    drop_caches
    r_ck+=("$(seq_secs "${SHARDS[@]/#/$MNT/}")")
    note_hwm
    unmount
done
COLD_SRC=$(gbps "$SRC_BYTES" "$(printf '%s\n' "${r_src[@]}" | median)")
COLD_CK=$(gbps "$SRC_BYTES" "$(printf '%s\n' "${r_ck[@]}" | median)")
log "  original $COLD_SRC GB/s, ckptfs $COLD_CK GB/s"

# ---- 3. load_file, warm ----------------------------------------------------------
LOAD=""
if "$PY" -c "import torch, safetensors" 2>/dev/null; then
    log "3. load_file, warm, $REPS runs each"
    ld() { "$PY" "$HERE/mount_read.py" "$@" | cut -d' ' -f2; }
    declare -A L
    for mode in load use pread; do
        a=() b=() c=()
        cat "${SHARDS[@]/#/$SRC/}" >/dev/null
        for _ in $(seq "$REPS"); do
            warm_packed
            mount_ck ""
            b+=("$(ld "$mode" "${SHARDS[@]/#/$MNT/}")")    # fresh mount: FUSE cache cold
            # the original and the warm mount back to back, alternating
            # which goes first: the loader's own allocations swing both
            if [ $((${#a[@]} % 2)) = 0 ]; then
                a+=("$(ld "$mode" "${SHARDS[@]/#/$SRC/}")")
                c+=("$(ld "$mode" "${SHARDS[@]/#/$MNT/}")")    # again: FUSE page cache warm
            else
                c+=("$(ld "$mode" "${SHARDS[@]/#/$MNT/}")")
                a+=("$(ld "$mode" "${SHARDS[@]/#/$SRC/}")")
            fi
            note_hwm
            unmount
        done
        L[$mode.src]=$(printf '%s\n' "${a[@]}" | median)
        L[$mode.fresh]=$(printf '%s\n' "${b[@]}" | median)
        L[$mode.warm]=$(printf '%s\n' "${c[@]}" | median)
        log "  $mode: original ${L[$mode.src]} s, mount fresh ${L[$mode.fresh]} s, mount warm ${L[$mode.warm]} s"
    done
    LOAD=1
fi

# ---- 4. request sizes ------------------------------------------------------------
warm_packed
: >"$T/stats.log"
start_daemon "$T/stats.log" "$CKPTFS" mount -f -o stats "$PK" "$MNT"
wait_mount fuse.ckptfs "$T/stats.log"
dd_secs "$MNT/$BIG" >/dev/null
note_hwm
unmount
STATS=$(grep -m1 '^ckptfs: stats: ' "$T/stats.log" || echo "(no stats line)")
# Diagnostic: the anonymous memory after reading every shard once, with
# glibc's default per-thread malloc arenas and with one arena (does
# fragmentation, rather than the cache, set it?).
hwm_all() {
    local h
    warm_packed
    start_daemon "$T/ck.log" env ${1:+"$1"} "$CKPTFS" mount -f "$PK" "$MNT"
    wait_mount fuse.ckptfs "$T/ck.log"
    cat "${SHARDS[@]/#/$MNT/}" >/dev/null
    h=$(rss_anon_kib "$PID")
    unmount
    echo $((h >> 10))
}
HWM_ARENAS=$(hwm_all "")
HWM_ONE_ARENA=$(hwm_all MALLOC_ARENA_MAX=1)
CACHE_LIMIT=$("$CKPTFS" mount -h 2>&1 | sed -n 's/.*cache_size=BYTES.*default \([^;)]*\).*/\1/p')

# ---- report ----------------------------------------------------------------------
{
echo "## ckptfs mount benchmark"
echo
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, kernel $(uname -r), $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo ?);" \
     "median of $REPS runs; GB = 10^9 bytes; load average at start $LOAD0, at end $(cut -d' ' -f1-3 /proc/loadavg)."
echo "Source: ${#SHARDS[@]} BF16 N(0,0.02) shards, $((SRC_BYTES >> 20)) MiB; packed $((PK_BYTES >> 20)) MiB" \
     "($(ratio "$PK_BYTES" "$SRC_BYTES") of source) in ${pack_s%.*} s${LMZ:+; lmz store $((LMZ_BYTES >> 20)) MiB}."
echo
echo "| measurement | ckptfs | baseline | ratio | target |"
echo "|---|---|---|---|---|"
echo "| first read, $((BIG_SIZE >> 20)) MiB shard, default options | $CK_DEF GB/s | noop FUSE $NOOP_BEST GB/s | $(ratio "$CK_DEF" "$NOOP_BEST") | >= 0.70 |"
echo "| first read, best options (\`${BEST_V:-default}\`) | $CK_BEST GB/s | noop FUSE $NOOP_BEST GB/s | $(ratio "$CK_BEST" "$NOOP_BEST") | >= 0.70 |"
[ -n "$LMZ" ] && echo "| first read vs lmz mount, default options | $CK_DEF GB/s | lmz $LMZ GB/s | $(ratio "$CK_DEF" "$LMZ")x | >= 3x |"
[ -n "$LMZ" ] && echo "| first read vs lmz mount, best options | $CK_BEST GB/s | lmz $LMZ GB/s | $(ratio "$CK_BEST" "$LMZ")x | >= 3x |"
echo "| cold page cache, all shards | $COLD_CK GB/s | original files $COLD_SRC GB/s | $(ratio "$COLD_CK" "$COLD_SRC")x | >= 1.2x |"
if [ -n "$LOAD" ]; then
    for mode in load use pread; do
        what="load_file"; [ "$mode" = pread ] && what='load_file(backend="pread")'
        [ "$mode" = use ] && what="load_file, then every byte read"
        echo "| $what, warm (second pass on a mount) | ${L[$mode.warm]} s | original ${L[$mode.src]} s | $(ratio "${L[$mode.warm]}" "${L[$mode.src]}")x time | <= 1.5x |"
        echo "| $what, fresh mount, packed file cached | ${L[$mode.fresh]} s | original ${L[$mode.src]} s | $(ratio "${L[$mode.fresh]}" "${L[$mode.src]}")x time | (info) |"
    done
fi
echo "| daemon CPU per GiB of first read (\`${VARIANTS[0]:-default}\`; noise-robust) | $(awk -v a="$CPU_CK" -v g="$GIB" 'BEGIN {printf "%.3f", a / g}') s | noop FUSE $(awk -v a="$CPU_NOOP" -v g="$GIB" 'BEGIN {printf "%.3f", a / g}') s | $(ratio "$CPU_CK" "$CPU_NOOP")x | (info) |"
ANON_KB=$(sort -n "$T/anon.kb" 2>/dev/null | tail -1)
echo "| daemon anonymous memory, peak of RssAnon sampled every 50 ms, all runs | $((${ANON_KB:-0} >> 10)) MiB | cache_size ${CACHE_LIMIT:-256M} | | bounded |"
echo "| daemon VmHWM (also counts the mapped packed files' page cache, $((PK_BYTES >> 20)) MiB) | $((HWM_KB >> 10)) MiB | | | (info) |"
echo "| RssAnon after one pass over all shards | $HWM_ARENAS MiB | with MALLOC_ARENA_MAX=1: $HWM_ONE_ARENA MiB | | (diagnostic) |"
echo
echo "First read by mount option (GB/s): $(for v in "${VARIANTS[@]}"; do printf '`%s` %s; ' "${v:-default}" "${CK["o:$v"]}"; done)" \
     "noop FUSE: read_ahead_kb=1024 $NOOP_1M, kernel default $NOOP_KDEF."
echo
echo "Daemon stats, one dd of the big shard: $STATS"
} | tee "$T/report.md"
[ -n "$OUT_MD" ] && cp "$T/report.md" "$OUT_MD"
log "done"
