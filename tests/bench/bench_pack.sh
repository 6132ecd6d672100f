#!/usr/bin/env bash
# bench_pack.sh CKPTFS [GiB] — end-to-end pack and unpack of one synthetic
# N(0, 0.02) BF16 shard, beside baselines measured in the same run on the same
# file: copying it with cp + sync (the disk's floor for writing a copy),
# OpenSSL SHA-256 of it (pack hashes every source), and memcpy.  Pack includes
# SHA-256, encoding, writing, fsync, and a full read-back against the source.
# Prints best of 3.  Not a test: the numbers are for reading.
set -euo pipefail
CK=${1:?usage: bench_pack.sh path/to/ckptfs [GiB]}
GIB=${2:-1}
T=$(mktemp -d /tmp/ckptfs-bench-pack.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir "$T/src"
python3 - "$T/src/model.safetensors" "$GIB" <<'PY'
import json, struct, sys
import numpy as np
path, gib = sys.argv[1], float(sys.argv[2])
n = int(gib * (1 << 30)) // 2
rng = np.random.default_rng(1)
with open(path, "wb") as f:
    h = json.dumps({"w": {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}}).encode()
    h += b" " * (-len(h) % 8)  # aligned data, as the safetensors library writes it
    f.write(struct.pack("<Q", len(h)) + h)
    for a in range(0, n, 1 << 26):
        x = (rng.standard_normal(min(1 << 26, n - a), dtype=np.float32) * 0.02).view(np.uint32).astype(np.uint64)
        f.write(((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16).tobytes())
PY
SIZE=$(stat -c %s "$T/src/model.safetensors")
cat "$T/src/model.safetensors" > /dev/null
best() { # command...: best wall time of 3 runs, seconds
  local b=999999 t0 t1
  for _ in 1 2 3; do
    "$@" pre >&2
    t0=$(date +%s.%N); "$@" run >&2; t1=$(date +%s.%N)   # their output is not the time
    b=$(python3 -c "print(min($b, $t1 - $t0))")
  done
  echo "$b"
}
do_cp() { if [ "$1" = pre ]; then rm -f "$T/copy"; else cp "$T/src/model.safetensors" "$T/copy" && sync "$T/copy"; fi; }
do_sha() { [ "$1" = pre ] || openssl dgst -sha256 "$T/src/model.safetensors" > /dev/null; }
do_pack1() { if [ "$1" = pre ]; then rm -rf "$T/p"; else "$CK" pack --jobs 1 "$T/src" "$T/p"; fi; }
do_packN() { if [ "$1" = pre ]; then rm -rf "$T/p"; else "$CK" pack --jobs "$(nproc)" "$T/src" "$T/p"; fi; }
do_unpack() { if [ "$1" = pre ]; then rm -rf "$T/u"; else "$CK" unpack "$T/p" "$T/u"; fi; }
t_cp=$(best do_cp); t_sha=$(best do_sha); t_p1=$(best do_pack1); t_pn=$(best do_packN)
"$CK" pack "$T/src" "$T/p" >/dev/null 2>&1 || true
t_un=$(best do_unpack)
t_mem=$(python3 -c "
import numpy as np, time
a = np.ones(1 << 28, np.uint8); b = np.empty_like(a); best = 9
for _ in range(5):
    t = time.perf_counter(); np.copyto(b, a); best = min(best, time.perf_counter() - t)
print(best * $SIZE / (1 << 28))")
python3 - "$SIZE" "$t_cp" "$t_sha" "$t_p1" "$t_pn" "$t_un" "$t_mem" "$(nproc)" <<'PY'
import sys
size, cp, sha, p1, pn, un, mem, n = map(float, sys.argv[1:])
gb = size / 1e9
rows = [("memcpy (limit)", mem), ("cp + sync (disk floor for a copy)", cp), ("OpenSSL SHA-256", sha),
        ("ckptfs pack --jobs 1", p1), (f"ckptfs pack --jobs {int(n)}", pn), ("ckptfs unpack", un)]
print(f"| {gb:.2f} GB BF16 shard | seconds | GB/s | vs cp+sync |")
print("|---|---:|---:|---:|")
for name, t in rows:
    print(f"| {name} | {t:.2f} | {gb / t:.2f} | {cp / t:.2f}x |")
PY
