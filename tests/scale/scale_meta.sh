#!/usr/bin/env bash
# scale_meta.sh CKPTFS [OUT.md] — ckptfs at GLM-5.2's shape (issue "Scale",
# part 1): a model directory with 282 shards and 59,509 BF16 tensors
# (tests/scale/glm_gen.py, shapes scaled down), generated at 1/8, 1/2 and the
# full tensor count, each packed, verified, stat'ed, mounted, listed, every
# shard opened and read, a sample of shards loaded with
# safetensors.torch.load_file through the mount and compared with the
# originals bit for bit.  Prints one table of how each cost grows with the
# tensor count (a benchmark: it fails only when a command fails or a byte
# differs, never on a figure).
#
# Columns:
#   pack s, and pack ms/tensor beyond the data: (pack time - the time to pack
#     the same bytes as 16 MiB tensors, measured in this run) / tensors
#   meta B/tensor: packed bytes that are not a BF16 plane (codes, mantissas or
#     low bytes, escapes) nor another file's payload, i.e. safetensors headers
#     kept byte for byte, TOCs, codebooks, chunk index, padding, manifest, per
#     BF16 tensor; "w/o st hdr" leaves out the safetensors headers (the
#     original files carry them too)
#   ready s: `ckptfs mount` started -> first successful stat in the mount
#   RssAnon rest / after: the daemon's anonymous memory after start-up and
#     after every byte was read (cache_size=CACHE)
#   open ms: mean time to open a shard through the mount and read its header
# Env: CACHE (daemon cache_size, default 256M), JOBS (pack --jobs, default 2),
# FRACTIONS (default "0.125 0.5 1"), SCALE_DIR (default /var/tmp/ckptfs-scale;
# kept between runs; rm -rf it to free ~10 GiB).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../bench/lib.sh"
bench_args "$@"
W=${SCALE_DIR:-/var/tmp/ckptfs-scale}
CACHE=${CACHE:-256M}
JOBS=${JOBS:-2}
FRACTIONS=${FRACTIONS:-0.125 0.5 1}
bench_start scale
mkdir -p "$W"

ROWS=""
for f in $FRACTIONS; do
    SRC=$W/src-$f
    made "$SRC" "$SRC/.done" "$PY" "$HERE/glm_gen.py" "$SRC" --fraction "$f" >"$T/gen.txt"
    read -r N_SHARDS TENSORS SRC_BYTES < <("$PY" - "$SRC" <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
shards = sorted(x for x in os.listdir(d) if x.endswith(".safetensors"))
tensors = 0
for s in shards:
    with open(os.path.join(d, s), "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        tensors += sum(1 for k in json.loads(fh.read(n)) if k != "__metadata__")
size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d) if not x.startswith("."))
print(len(shards), tensors, size)
EOF
)
    # the data baseline: the same bytes as 16 MiB tensors in one shard
    BASE=$W/dense-$f
    MIB=$(( SRC_BYTES >> 20 ))
    made "$BASE" "$BASE/.done" "$PY" "$BENCH_LIB/mount_gen.py" "$BASE" "$MIB" 1 0 >/dev/null
    log "$f: $N_SHARDS shards, $TENSORS tensors, $SRC_BYTES bytes"
    sync
    rm -rf "$T/pb" && t=$(now)
    "$CKPTFS" pack --jobs "$JOBS" "$BASE" "$T/pb" >/dev/null 2>&1
    base_s=$(since "$t")
    rm -rf "$T/pb"
    PK=$W/packed-$f
    rm -rf "$PK" && t=$(now)
    quiet "$T/pack.log" "$CKPTFS" pack --jobs "$JOBS" "$SRC" "$PK"
    pack_s=$(since "$t")
    base_scaled=$(awk -v s="$base_s" -v a="$SRC_BYTES" -v m="$MIB" 'BEGIN {print s * a / ((m + 1) * 1048576)}')
    t=$(now)
    quiet "$T/verify.log" "$CKPTFS" verify --jobs "$JOBS" "$PK"
    verify_s=$(since "$t")
    "$CKPTFS" stat --json "$PK" >"$T/stat.json"
    read -r META META_NOHDR < <("$PY" - "$T/stat.json" "$SRC" <<'EOF'
import json, os, struct, sys
s = json.load(open(sys.argv[1]))
d = sys.argv[2]
hdr = 0
for x in os.listdir(d):
    if x.endswith(".safetensors"):
        with open(os.path.join(d, x), "rb") as fh:
            hdr += 8 + struct.unpack("<Q", fh.read(8))[0]
planes = s["code_plane_bytes"] + s["low_plane_bytes"] + s["escape_plane_bytes"]
other = sum(v["packed_bytes"] for k, v in s["by_encoding"].items() if k in ("raw", "zstd"))
meta = s["packed_bytes"] - planes - other
n = s["by_dtype"]["BF16"]["count"]
print("%.0f %.0f" % (meta / n, (meta - hdr) / n))
EOF
)
    # mount: start-up to the first successful stat
    drop_caches
    t=$(now)
    start_daemon "$T/daemon.log" "$CKPTFS" mount -f -o cache_size="$CACHE" "$PK" "$MNT"
    until stat "$MNT/config.json" >/dev/null 2>&1; do
        kill -0 "$PID" 2>/dev/null || { cat "$T/daemon.log"; exit 1; }
        sleep 0.005
    done
    ready_s=$(since "$t")
    sleep 0.5
    rss_rest=$(rss_anon_kib "$PID")
    n_listed=$(ls "$MNT" | wc -l)
    [ "$n_listed" -ge "$N_SHARDS" ] || { echo "listed $n_listed entries, expected >= $N_SHARDS" >&2; exit 1; }
    open_ms=$("$PY" - "$MNT" <<'EOF'
import os, struct, sys, time
d = sys.argv[1]
shards = sorted(x for x in os.listdir(d) if x.endswith(".safetensors"))
t = time.perf_counter()
for s in shards:
    with open(os.path.join(d, s), "rb") as fh:
        struct.unpack("<Q", fh.read(8))
print("%.3f" % ((time.perf_counter() - t) * 1e3 / len(shards)))
EOF
)
    t=$(now)
    cat "$MNT"/*.safetensors >/dev/null
    read_s=$(since "$t")
    rss_after=$(rss_anon_kib "$PID")
    # a sample of shards through the real loader, against the originals
    "$PY" - "$MNT" "$SRC" <<'EOF'
import os, sys
import torch
from safetensors.torch import load_file
m, s = sys.argv[1], sys.argv[2]
shards = sorted(x for x in os.listdir(s) if x.endswith(".safetensors"))
sample = shards[:: max(1, len(shards) // 8)]
for x in sample:
    a, b = load_file(os.path.join(m, x)), load_file(os.path.join(s, x))
    assert a.keys() == b.keys(), x
    for k in a:
        assert torch.equal(a[k].view(torch.int16), b[k].view(torch.int16)), (x, k)
print("[scale] load_file of %d shards through the mount: bit-exact" % len(sample), file=sys.stderr)
EOF
    cmp <(cd "$SRC" && cat model-00001-*.safetensors) "$MNT"/model-00001-*.safetensors
    unmount
    per_t=$(awk -v p="$pack_s" -v b="$base_scaled" -v n="$TENSORS" 'BEGIN {printf "%.3f", (p - b) * 1e3 / n}')
    ROWS+=$(printf '| %s | %d | %d | %.1f | %.2f | %s | %s | %s | %.1f | %.3f | %s | %s | %s | %.2f |' \
        "$f" "$N_SHARDS" "$TENSORS" "$(awk -v b="$SRC_BYTES" 'BEGIN {print b / 1073741824}')" "$pack_s" \
        "$per_t" "$META" "$META_NOHDR" "$verify_s" "$ready_s" "$(awk -v k="$rss_rest" 'BEGIN {printf "%.1f", k / 1024}')" \
        "$(awk -v k="$rss_after" 'BEGIN {printf "%.1f", k / 1024}')" "$open_ms" "$(awk -v b="$SRC_BYTES" -v s="$read_s" 'BEGIN {print b / s / 1e9}')")$'\n'
done
{
    echo "GLM-5.2-shaped model (tests/scale/glm_gen.py), ckptfs $("$CKPTFS" --version 2>/dev/null | head -1), $(nproc) cores, pack --jobs $JOBS, cache_size=$CACHE, $(date -u +%Y-%m-%d)"
    echo
    echo "| fraction | shards | tensors | GiB | pack s | pack ms/tensor beyond data | meta B/tensor | w/o st hdr | verify s | mount ready s | RssAnon rest MiB | RssAnon after MiB | open ms/shard | cat GB/s |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s' "$ROWS"
} | tee ${OUT_MD:+"$OUT_MD"}
