#!/usr/bin/env bash
# gpu/check.sh — one-shot GPU check of ckgpu, built so that a first device run
# cannot be lost: one deadline for the whole run (--deadline, 540 s by
# default, under a 600 s command limit), each step limited to what is left
# of it; every table row printed (and written to the log) the moment its step
# ends, so a kill keeps every row before it.  Order: device facts, the gpu
# tests, the benchmark (always, whatever the tests said; its figures become
# rows as it prints them), the serving check, then compute-sanitizer
# memcheck and racecheck on the kernel test's small case (test_gpu_kernels
# --small) with the time left; a sanitizer cut short is TIMEOUT, not FAIL.
# A test that skipped its device part is SKIP, never PASS; with no GPU
# visible the last row is "| result | NO DEVICE |" and the exit status 3.
# Installs nothing.
#
#   gpu/check.sh                 build in $BUILD (default /tmp/ckgpu-build) and run
#   gpu/check.sh --quick         smaller benchmark (batches 1 and 8, 256 MiB load test)
#   gpu/check.sh --deadline S    the whole run's limit in seconds (default 540)
#   gpu/check.sh --no-sanitize   skip the compute-sanitizer runs
#   gpu/check.sh --bundle DIR    (on a build machine, no GPU needed) build and copy the
#                                binaries and the non-CUDA shared libraries they need to DIR
#   gpu/check.sh --prebuilt DIR  run from such a bundle instead of building
#
# A bare CUDA machine may lack the -dev packages the project needs (fuse3,
# zstd, cjson, openssl, xxhash); then, without --prebuilt, the script says so
# and looks for a bundle in ./gpu-bundle (ignored by git).  The CUDA libraries
# (libcudart, libcublas: too big to carry) are found at run time in the CUDA
# folders or in PyTorch's wheels (site-packages/nvidia/cu13/lib, nvidia/*/lib)
# and put on LD_LIBRARY_PATH.  Typical use from a session:
#   here:   gpu/check.sh --bundle gpu-bundle
#   device: gpu/check.sh --prebuilt gpu-bundle      (carry gpu-bundle; timeout_s 600)
# Logs go to ${OUT:-$BUILD}/ckgpu_check.log (and bench_gpu_raw.log, serve_check.json).
# Exit status: 0 all passed, 1 a failure or a skipped device part, 3 no device visible.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-${TMPDIR:-/tmp}/ckgpu-build}
MODE=build QUICK= SANITIZE=1 DIR= DEADLINE=540
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=--quick ;;
    --sanitize) SANITIZE=1 ;;   # the default; kept for old command lines
    --no-sanitize) SANITIZE= ;;
    --deadline) DEADLINE=${2:?--deadline SECONDS}; shift ;;
    --bundle) MODE=bundle; DIR=${2:?--bundle DIR}; shift ;;
    --prebuilt) MODE=prebuilt; DIR=${2:?--prebuilt DIR}; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "check.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
LOGDIR=${OUT:-$BUILD}
mkdir -p "$LOGDIR"
LOG=$LOGDIR/ckgpu_check.log
: >"$LOG"
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
die() { say "check.sh: FAIL: $*"; exit 1; }
T0=$(date +%s)

# ---- tools -----------------------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }
if ! have nvcc && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer /opt/nvidia/compute-sanitizer; do
    have compute-sanitizer || { [ -x "$d/compute-sanitizer" ] && export PATH=$PATH:$d; }
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
GPU="none"
if have nvidia-smi; then
    GPU=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
fi
say "== ckgpu check: $(date -u +%FT%TZ) on $(hostname), GPU: ${GPU:-none}"
CC_ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')

missing_tools() {
    local m=
    for t in cmake nvcc; do have $t || m="$m $t"; done
    have cc || have gcc || m="$m gcc"
    have make || have ninja || m="$m make"
    echo "$m"
}
missing_devs() {
    local m=
    if ! have pkg-config; then echo " pkg-config"; return; fi
    for p in fuse3 libzstd libcjson libcrypto; do pkg-config --exists $p || m="$m $p"; done
    [ -f /usr/include/xxhash.h ] || [ -f /usr/local/include/xxhash.h ] || m="$m xxhash.h"
    echo "$m"
}

build() {  # $1: arch list
    local arch=$1
    say "-- configure ($BUILD, CUDA arch $arch)"
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCKPTFS_GPU=ON \
        >>"$LOG" 2>&1 || die "cmake configure failed (see $LOG)"
    say "-- build ckgpu, tests, bench_gpu, ckptfs"
    cmake --build "$BUILD" -j16 --target ckgpu test_gpu_tile test_gpu_kernels test_gpu_loader bench_gpu ckptfs ckread \
        >>"$LOG" 2>&1 || { tail -30 "$LOG"; die "build failed (see $LOG)"; }
}

# ---- bundle: build here, copy what the device run needs ---------------------
if [ "$MODE" = bundle ]; then
    m=$(missing_tools); [ -z "$m" ] || die "missing tools:$m"
    m=$(missing_devs); [ -z "$m" ] || die "missing development packages:$m"
    build "80;90"
    rm -rf "$DIR" && mkdir -p "$DIR/bin" "$DIR/lib" "$DIR/python" || die "mkdir $DIR"
    for b in gpu/test_gpu_tile gpu/test_gpu_kernels gpu/test_gpu_loader gpu/bench_gpu fs/cli/ckptfs; do
        cp "$BUILD/$b" "$DIR/bin/" || die "copy $b"
    done
    cp "$BUILD/gpu/libckgpu.so" "$BUILD/fs/format/libckread.so" "$DIR/lib/"
    cp "$ROOT/gpu/python/"*.py "$DIR/python/"
    # shared libraries that are neither glibc's nor CUDA's
    for f in "$DIR"/bin/* "$DIR/lib/libckgpu.so"; do
        ldd "$f" | awk '/=> \//{print $3}'
    done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/libcu|/libnv' |
        while read -r l; do cp -L "$l" "$DIR/lib/"; done
    say "bundle in $DIR ($(du -sh "$DIR" | cut -f1)): carry it and run gpu/check.sh --prebuilt $DIR"
    exit 0
fi

# ---- build or use a bundle ----------------------------------------------------
if [ "$MODE" = build ]; then
    mt=$(missing_tools) md=$(missing_devs)
    if [ -n "$mt$md" ]; then
        [ -n "$mt" ] && say "check.sh: missing tools:$mt"
        [ -n "$md" ] && say "check.sh: missing development packages:$md (this script installs nothing)"
        if [ -d "$ROOT/gpu-bundle/bin" ]; then
            say "check.sh: using the prebuilt bundle $ROOT/gpu-bundle"
            MODE=prebuilt DIR=$ROOT/gpu-bundle
        else
            die "cannot build here; on a build machine run 'gpu/check.sh --bundle gpu-bundle' and carry gpu-bundle"
        fi
    fi
fi
if [ "$MODE" = build ]; then
    build "${CC_ARCH:-90}"
    BIN=$BUILD/gpu CKPTFS=$BUILD/fs/cli/ckptfs LIB=$BUILD/gpu/libckgpu.so PY=$ROOT/gpu/python
    READLIB=$BUILD/fs/format/libckread.so
else
    DIR=$(cd "$DIR" && pwd) || die "no bundle $DIR"
    export LD_LIBRARY_PATH=$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    BIN=$DIR/bin CKPTFS=$DIR/bin/ckptfs LIB=$DIR/lib/libckgpu.so PY=$DIR/python
    READLIB=$DIR/lib/libckread.so
fi
say "-- ready after $(( $(date +%s) - T0 )) s"

# ---- CUDA libraries: the CUDA folders, else PyTorch's wheels --------------------------
# Each library a binary needs and the loader cannot find is looked for in the
# candidate folders; the first folder holding it goes on LD_LIBRARY_PATH.
lib_dirs() {
    ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
        /usr/local/cuda-*/targets/x86_64-linux/lib 2>/dev/null
    local py
    for py in python3 /opt/torch/.venv/bin/python3; do
        have "$py" || [ -x "$py" ] || continue
        "$py" - <<'PY' 2>/dev/null
import glob, site, sys, sysconfig
roots = set(site.getsitepackages() + [sysconfig.get_paths()["purelib"]])
for r in sorted(roots):
    for d in sorted(glob.glob(r + "/nvidia/cu1*/lib")) + sorted(glob.glob(r + "/nvidia/*/lib")):
        print(d)
PY
    done
}
resolve_libs() {
    local so d missing
    missing=$(for f in "$BIN/test_gpu_kernels" "$BIN/bench_gpu" "$LIB"; do ldd "$f" 2>/dev/null; done |
        awk '/=> not found/{print $1}' | sort -u)
    for so in $missing; do
        for d in $(lib_dirs); do
            if [ -e "$d/$so" ]; then
                export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
                say "-- $so from $d"
                continue 2
            fi
        done
        say "check.sh: $so not found in the CUDA folders or PyTorch's (bench_gpu/tests will not start)"
    done
}
resolve_libs

# ---- the table: one row the moment each step ends -----------------------------------------
# From here on stdout carries only table rows (everything else goes to the
# log), so the output ends with one table even when the run is cut short.
WORK=$(mktemp -d /tmp/ckgpu_check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED= SKIPPED= NODEV=
row() { printf '| %s | %s | %s |\n' "$1" "$2" "$3" | tee -a "$LOG"; }
note() { printf '%s\n' "$*" >>"$LOG"; }
left() { echo $(( DEADLINE - 10 - ($(date +%s) - T0) )); }   # 10 s kept for the result row
limit() {  # cap [reserve]: what is left of the deadline less reserve, at most cap
    local l; l=$(( $(left) - ${2:-0} ))
    [ $l -lt 30 ] && l=$(left)                             # a reserve never takes a step's last 30 s
    [ "$1" -lt "$l" ] && l=$1
    echo $l
}
echo
row "ckgpu check $(date -u +%F)" "GPU: ${GPU:-none}" "deadline ${DEADLINE} s"
printf '| --- | --- | --- |\n' | tee -a "$LOG"

runt() {  # name, cap, command...: a test; SKIP where it skipped its device part
    local name=$1 lim; lim=$(limit "$2"); shift 2
    if [ "$lim" -lt 5 ]; then row "test $name" "SKIP (deadline)" "no time left"; SKIPPED="$SKIPPED $name"; return; fi
    local t=$(date +%s) rc out=$WORK/$name.out
    note "== $name (limit $lim s): $*"
    timeout -k 5 "$lim" "$@" >"$out" 2>&1
    rc=$?
    cat "$out" >>"$LOG"
    local dt=$(( $(date +%s) - t ))
    if [ $rc = 0 ] && grep -q "SKIP device part" "$out"; then
        row "test $name" "SKIP (no device)" "$dt s: CPU part passed, device part skipped"
        SKIPPED="$SKIPPED $name"
    elif [ $rc = 0 ]; then
        row "test $name" PASS "$dt s"
    elif [ $rc = 124 ] || [ $rc = 137 ]; then
        row "test $name" "FAIL (timeout ${lim} s)" "see $LOG"; FAILED="$FAILED $name"
    else
        row "test $name" "FAIL (rc $rc)" "$(grep -m1 -E 'check failed|rror|FAIL' "$out" | cut -c1-120)"
        FAILED="$FAILED $name"
    fi
}

# ---- 1. device facts --------------------------------------------------------------------------
t=$(date +%s)
timeout -k 5 "$(limit 30)" "$BIN/bench_gpu" --devices >"$WORK/facts.out" 2>&1
rc=$?
cat "$WORK/facts.out" >>"$LOG"
if [ $rc = 0 ] && grep -q '^| device' "$WORK/facts.out"; then
    grep '^| device' "$WORK/facts.out"
else
    NODEV=1
    row "device" "NO DEVICE" "bench_gpu --devices: rc $rc, $(grep -v '^$' "$WORK/facts.out" | head -1 | cut -c1-100)"
fi

# ---- 2. correctness (label gpu) ---------------------------------------------------------------------
runt gpu_tile 60 "$BIN/test_gpu_tile"
runt gpu_kernels 120 "$BIN/test_gpu_kernels"
runt gpu_loader 120 "$BIN/test_gpu_loader" "$WORK/loader"
if have python3; then
    # its helpers (tests/lib/format_dtypes.py, which reads docs/format.md) come from this
    # checkout: a bundle's python/ has no ../../tests/lib
    runt gpu_python 120 env PYTHONPATH="$ROOT/tests/lib${PYTHONPATH:+:$PYTHONPATH}" \
        python3 "$PY/test_ckptfs_gpu.py" "$LIB" "$CKPTFS" "$WORK/python"
fi

# ---- 3. benchmark: whatever the tests said; each figure a row as bench_gpu prints it -------------
bench_row() {  # "| a | b | c | ... |" -> "| bench a | b | c; ... |"
    local l a r b c
    l=$(printf '%s' "$1" | sed -E 's/^\| *//; s/ *\|$//')
    a=${l%% |*}; r=${l#* | }; b=${r%% |*}; c=${r#* | }; [ "$r" = "$l" ] && b= c=
    [ "$c" = "$r" ] && c=
    row "bench $a" "$b" "${c// | /; }"
}
if [ -n "$NODEV" ]; then
    row "bench bench_gpu" "SKIP (no device)" ""
else
    lim=$(limit 300 150)   # keep 150 s for the serving check and the sanitizers
    q=$QUICK
    [ -z "$q" ] && [ "$lim" -lt 200 ] && q=--quick
    note "-- bench_gpu${q:+ $q} (limit $lim s)"
    t=$(date +%s)
    timeout -k 5 "$lim" "$BIN/bench_gpu" $q --workdir "$WORK/bench" 2>"$WORK/bench.err" |
        while IFS= read -r l; do
            note "$l"
            case "$l" in
            '##'*) row "bench device" "" "${l#\#\# }" ;;
            '|'*) bench_row "$l" ;;
            esac
        done
    rc=${PIPESTATUS[0]}
    cat "$WORK/bench.err" >>"$LOG"
    [ -f "$WORK/bench.log" ] && cp "$WORK/bench.log" "$LOGDIR/bench_gpu_raw.log"
    if [ $rc = 0 ]; then
        row "bench bench_gpu" PASS "$(( $(date +%s) - t )) s$([ -n "$q" ] && echo ", $q")"
    elif [ $rc = 124 ] || [ $rc = 137 ]; then
        row "bench bench_gpu" "FAIL (timeout ${lim} s)" "the figures above are those it finished"
        FAILED="$FAILED bench_gpu"
    else
        row "bench bench_gpu" "FAIL (rc $rc)" "$(tail -1 "$WORK/bench.err" | cut -c1-100)"
        FAILED="$FAILED bench_gpu"
    fi
fi

# ---- 4. serving: a ~400 MB model from packed weights vs its BF16 original (serve_check.py) -----
if [ -n "$NODEV" ]; then
    row "test serve_check" "SKIP (no device)" ""
elif ! have python3 || [ ! -f "$PY/serve_check.py" ]; then
    row "test serve_check" SKIP "no python3 or no $PY/serve_check.py (a bundle made before it)"
else
    runt serve_check "$(limit 240 60)" env CKPTFS_GPU_LIB="$LIB" CKPTFS_READ_LIB="$READLIB" \
        python3 "$PY/serve_check.py" --ckptfs "$CKPTFS" --work "$WORK/serve" --out "$LOGDIR/serve_check.json"
    # its table's rows "| a | b | c |" become "| serve a | b | c |"
    [ -f "$WORK/serve_check.out" ] && awk '/^\| serve_check \|/{on=1} on && !/^\|/{exit} on' "$WORK/serve_check.out" |
        tail -n +3 | sed -E 's/^\| *//; s/ *\|$//' |
        while IFS= read -r l; do a=${l%% |*}; r=${l#* | }; row "serve $a" "${r%% |*}" "${r#* | }"; done
fi

# ---- 5. compute-sanitizer on the kernel test's small case, with the time left --------------------
sanitize() {  # tool cap [reserve]
    local tool=$1 lim t=$(date +%s) rc out=$WORK/san_$1.log
    lim=$(limit "$2" "${3:-0}")
    if [ "$lim" -lt 10 ]; then row "sanitizer $tool" "SKIP (deadline)" "no time left"; return; fi
    timeout -k 5 "$lim" compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN/test_gpu_kernels" --small >"$out" 2>&1
    rc=$?
    cat "$out" >>"$LOG"
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        row "sanitizer $tool" "TIMEOUT (${lim} s)" "cut short, no verdict: $(grep -c 'ERROR\|Race' "$out") error lines so far"
    elif [ $rc = 0 ] && grep -q "SKIP device part" "$out"; then
        row "sanitizer $tool" "SKIP (no device)" ""
    elif [ $rc = 0 ]; then
        row "sanitizer $tool" PASS "$(( $(date +%s) - t )) s, $(grep -m1 'ERROR SUMMARY' "$out" | sed 's/.*ERROR SUMMARY: //')"
    elif grep -qE 'Device not supported|Unable to find injection|Target application terminated before first instrumented API call' "$out" &&
         ! grep -q 'ERROR SUMMARY: [1-9]' "$out"; then
        row "sanitizer $tool" "UNAVAILABLE" "$(grep -m1 -E 'not supported|Unable|terminated' "$out" | cut -c1-80)"
    else
        row "sanitizer $tool" "FAIL (rc $rc)" "$(grep -m1 'ERROR SUMMARY' "$out" | sed 's/.*ERROR SUMMARY: //') see $LOG"
        FAILED="$FAILED sanitize_$tool"
    fi
}
if [ -z "$SANITIZE" ]; then
    :
elif [ -n "$NODEV" ]; then
    row "sanitizer" "SKIP (no device)" ""
elif ! have compute-sanitizer; then
    row "sanitizer" SKIP "compute-sanitizer not found"
else
    sanitize memcheck 120 60   # keep 60 s for racecheck
    sanitize racecheck 60
fi

# ---- result ------------------------------------------------------------------------------------
if [ -n "$NODEV" ]; then
    RESULT="NO DEVICE" code=3
elif [ -n "$FAILED" ]; then
    RESULT="FAIL:$FAILED" code=1
elif [ -n "$SKIPPED" ]; then
    RESULT="INCOMPLETE: skipped:$SKIPPED" code=1
else
    RESULT=PASS code=0
fi
row result "$RESULT" "$(( $(date +%s) - T0 )) s of ${DEADLINE} s; log: $LOG"
exit $code
