#!/usr/bin/env bash
# test_check_sh.sh — gpu/check.sh --prebuilt against fake bundles (no GPU
# needed), three runs:
#  1. a failing test must not cost the benchmark (it runs and its figures are
#     reported), tests and benchmark are reported apart, the failure shows in
#     the result and the exit status, and the output ends with one table;
#  2. the deadline: a benchmark that prints a figure and a sanitizer that
#     hangs — the whole run ends within --deadline (60 s), the hung
#     sanitizer is TIMEOUT (not FAIL: the result stays PASS), the one after
#     it is skipped for lack of time, and while the sanitizer hangs every
#     earlier row is already out (a kill would keep them);
#  3. no device: the tests' "SKIP device part" is SKIP, not PASS (only the
#     host-only gpu_tile may pass), and the run ends "| result | NO DEVICE |"
#     with exit status 3.
#
# usage: test_check_sh.sh ROOT WORKDIR
set -u
ROOT=$1 W=$2
fail() { echo "test_check_sh: $*"; cat "$W/log"; exit 1; }
# the table: everything after the last blank line, every line a row
table() { awk 'BEGIN{RS=""} {t=$0} END{print t}' "$W/log"; }

bundle() {  # a fresh fake bundle in $W/b
    rm -rf "$W" && mkdir -p "$W/b/bin" "$W/b/lib" "$W/b/python" "$W/path" || exit 1
    : >"$W/b/lib/libckgpu.so"
    fake test_gpu_tile 'exit 0'
    fake test_gpu_kernels 'exit 0'
    fake test_gpu_loader 'exit 0'
    fake ckptfs 'exit 0'
    fake bench_gpu '[ "$1" = --devices ] && { echo "| device 0 | Fake GPU, cc 9.0 | 2 SMs |"; exit 0; }
echo "## fake device"; echo "| gemv 64x64 | batch 1 | cuBLAS 1.00 us | k15 0.70 us = 0.700x |"'
    printf 'import sys\nsys.exit(0)\n' >"$W/b/python/test_ckptfs_gpu.py"
    cat >"$W/b/python/serve_check.py" <<'PY'
print("| serve_check | BF16 (transformers) | packed (ckptfs_gpu_hf) |\n|---|---|---|")
print("| load s (disk to ready) | 1.00 | 2.00 |\n| weights bytes | 3 MB | 2 MB (0.70x) |")
print("serve_check: PASS {}")
PY
}
fake() { printf '#!/bin/sh\n%s\n' "$2" >"$W/b/bin/$1" && chmod +x "$W/b/bin/$1"; }
check() { OUT=$W/out BUILD=$W/build PATH=$W/path:$PATH "$ROOT/gpu/check.sh" --prebuilt "$W/b" "$@" >"$W/log" 2>&1; }

# ---- 1. a failed test keeps the benchmark ------------------------------------------------
bundle
fake test_gpu_kernels 'echo "check failed: planted"; exit 1'
check --no-sanitize
rc=$?
[ $rc = 1 ] || fail "a failed test must make check.sh exit 1 (got $rc)"
t=$(table)
echo "$t" | grep -qv '^|' && fail "the last lines are not one table"
echo "$t" | grep -q '^| device 0 | Fake GPU' || fail "the device facts are not in the table"
echo "$t" | grep -q '^| test gpu_kernels | FAIL (rc 1) | check failed: planted' || fail "the failed test is not reported"
echo "$t" | grep -q '^| test gpu_loader | PASS' || fail "the passing test is not reported"
echo "$t" | grep -q '^| bench bench_gpu | PASS' || fail "the benchmark did not run after a failed test"
echo "$t" | grep -q '^| bench gemv 64x64 | batch 1 | cuBLAS 1.00 us; k15 0.70 us = 0.700x |' ||
    fail "the benchmark's figures are not in the table"
echo "$t" | grep -q '^| serve weights bytes | 3 MB | 2 MB (0.70x) |' || fail "serve_check's rows are not in the table"
echo "$t" | grep -q '^| test serve_check | PASS' || fail "serve_check is not reported"
[ "$(echo "$t" | tail -1 | cut -c1-30)" = "| result | FAIL: gpu_kernels |" ] || fail "last row: $(echo "$t" | tail -1)"
grep -q '^| result | FAIL' "$W/out/ckgpu_check.log" || fail "the log lacks the table"
echo "test_check_sh: a failed test keeps the benchmark; one table at the end"

# ---- 2. one deadline; a hung sanitizer is TIMEOUT; rows are out as their steps end -----------
bundle
fake bench_gpu '[ "$1" = --devices ] && { echo "| device 0 | Fake GPU, cc 9.0 | 2 SMs |"; exit 0; }
echo "## fake device"; echo "| decode k15 | 64 Mi weights | 100 us |"; sleep 3; echo "| gemv 64x64 | batch 1 | 1 us |"'
printf '#!/bin/sh\n: >"%s/san_started"\nsleep 600\n' "$W" >"$W/path/compute-sanitizer" && chmod +x "$W/path/compute-sanitizer"
deadline=60
t0=$(date +%s)
check --deadline $deadline &
pid=$!
for _ in $(seq 50); do [ -f "$W/san_started" ] && break; sleep 1; done   # memcheck hangs now
early=$(cat "$W/log")
wait $pid
rc=$? el=$(( $(date +%s) - t0 ))
t=$(table)
[ $el -le $deadline ] || fail "the run took $el s, over its deadline of $deadline s"
[ $rc = 0 ] || fail "a sanitizer timeout must not fail the run (exit $rc)"
[ -f "$W/san_started" ] || fail "memcheck never started"
echo "$early" | grep -q '^| bench decode k15 | 64 Mi weights | 100 us |' || fail "while memcheck hangs, the benchmark's rows are not out"
echo "$early" | grep -q '^| test serve_check | PASS' || fail "while memcheck hangs, the serving check's row is not out"
echo "$t" | grep -q '^| sanitizer memcheck | TIMEOUT' || fail "the hung memcheck is not TIMEOUT"
echo "$t" | grep -q '^| sanitizer racecheck | SKIP (deadline)' || fail "racecheck was not skipped for lack of time"
echo "$t" | tail -1 | grep -q '^| result | PASS |' || fail "last row: $(echo "$t" | tail -1)"
echo "test_check_sh: deadline $deadline s kept ($el s), hung sanitizer TIMEOUT, rows out as their steps end"

# ---- 3. no device ---------------------------------------------------------------------------------
bundle
for b in test_gpu_kernels test_gpu_loader; do fake $b 'echo "SKIP device part: no CUDA device"; exit 0'; done
printf 'print("SKIP device part: no CUDA device")\n' >"$W/b/python/test_ckptfs_gpu.py"
fake bench_gpu '[ "$1" = --devices ] && { echo "no CUDA device visible (no device)"; exit 3; }; exit 3'
check
rc=$?
t=$(table)
[ $rc = 3 ] || fail "no device: exit $rc, not 3"
echo "$t" | grep -q '^| device | NO DEVICE |' || fail "no device row"
echo "$t" | grep -q '^| test gpu_kernels | SKIP (no device)' || fail "a skipped device part is not SKIP"
echo "$t" | grep '| PASS |' | grep -qv '^| test gpu_tile |' && fail "no device, yet a device test says PASS"
echo "$t" | tail -1 | grep -q '^| result | NO DEVICE |' || fail "last row: $(echo "$t" | tail -1)"
echo "test_check_sh: no device: SKIP rows, '| result | NO DEVICE |', exit 3"
