#!/usr/bin/env bash
# test_check_sh.sh — gpu/check.sh against a fake bundle (no GPU needed): a
# failing test must not cost the benchmark (it runs and its figures are
# reported), tests and benchmark are reported apart, the failure shows in
# the result and the exit status, and the output ends with one table.
#
# usage: test_check_sh.sh ROOT WORKDIR
set -u
ROOT=$1 W=$2
rm -rf "$W" && mkdir -p "$W/b/bin" "$W/b/lib" "$W/b/python" || exit 1
fake() { printf '#!/bin/sh\n%s\n' "$2" >"$W/b/bin/$1" && chmod +x "$W/b/bin/$1"; }
fake test_gpu_tile 'exit 0'
fake test_gpu_kernels 'echo "check failed: planted"; exit 1'
fake test_gpu_loader 'exit 0'
fake ckptfs 'exit 0'
fake bench_gpu 'echo "## fake device"; echo "| gemv 64x64 | batch 1 | cuBLAS 1.00 us | k15 0.70 us = 0.700x |"'
: >"$W/b/lib/libckgpu.so"
printf 'import sys\nsys.exit(0)\n' >"$W/b/python/test_ckptfs_gpu.py"
cat >"$W/b/python/serve_check.py" <<'PY'
print("| serve_check | BF16 (transformers) | packed (ckptfs_gpu_hf) |\n|---|---|---|")
print("| load s (disk to ready) | 1.00 | 2.00 |\n| weights bytes | 3 MB | 2 MB (0.70x) |")
print("serve_check: PASS {}")
PY
OUT=$W/out BUILD=$W/build "$ROOT/gpu/check.sh" --prebuilt "$W/b" --no-sanitize >"$W/log" 2>&1
rc=$?
fail() { echo "test_check_sh: $*"; cat "$W/log"; exit 1; }
[ $rc != 0 ] || fail "a failed test must make check.sh exit non-zero"
# the table: everything after the last blank line, every line a row
table=$(awk 'BEGIN{RS=""} {t=$0} END{print t}' "$W/log")
echo "$table" | grep -qv '^|' && fail "the last lines are not one table"
echo "$table" | grep -q '^| test gpu_kernels | FAIL' || fail "the failed test is not reported"
echo "$table" | grep -q '^| test gpu_loader | PASS' || fail "the passing test is not reported"
echo "$table" | grep -q '^| bench bench_gpu | PASS' || fail "the benchmark did not run after a failed test"
echo "$table" | grep -q '^| bench gemv 64x64 | batch 1 | cuBLAS 1.00 us; k15 0.70 us = 0.700x |' ||
    fail "the benchmark's figures are not in the table"
echo "$table" | grep -q '^| serve weights bytes | 3 MB | 2 MB (0.70x) |' ||
    fail "serve_check's rows are not in the table"
echo "$table" | grep -q '^| test serve_check | PASS' || fail "serve_check is not reported"
[ "$(echo "$table" | tail -1 | cut -c1-30)" = "| result | FAIL: gpu_kernels |" ] || fail "last row: $(echo "$table" | tail -1)"
echo "test_check_sh: a failed test keeps the benchmark; one table at the end"
