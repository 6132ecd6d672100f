#!/usr/bin/env bash
# gpu/check.sh — one-shot GPU check of ckgpu: build the GPU targets, run the
# gpu-labelled tests on the device, run bench_gpu, print a table.  Meant for
# one call on a machine with one GPU, under 5 minutes.  Installs nothing.
#
#   gpu/check.sh                 build in $BUILD (default build-gpu-check) and run
#   gpu/check.sh --quick         smaller benchmark (batches 1 and 8, 256 MiB load test)
#   gpu/check.sh --sanitize      also run test_gpu_kernels under compute-sanitizer memcheck
#   gpu/check.sh --bundle DIR    (on a build machine, no GPU needed) build and copy the
#                                binaries and the non-CUDA shared libraries they need to DIR
#   gpu/check.sh --prebuilt DIR  run from such a bundle instead of building
#
# A bare CUDA machine may lack the -dev packages the project needs (fuse3,
# zstd, cjson, openssl, xxhash); then, without --prebuilt, the script says so
# and looks for a bundle in ./gpu-bundle.  Typical use from a session:
#   here:   gpu/check.sh --bundle gpu-bundle
#   device: gpu/check.sh --prebuilt gpu-bundle      (carry gpu-bundle)
# Logs go to ${OUT:-$BUILD}/ckgpu_check.log.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-${TMPDIR:-/tmp}/ckgpu-build}
MODE=build QUICK= SANITIZE= DIR=
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=--quick ;;
    --sanitize) SANITIZE=1 ;;
    --bundle) MODE=bundle; DIR=${2:?--bundle DIR}; shift ;;
    --prebuilt) MODE=prebuilt; DIR=${2:?--prebuilt DIR}; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
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
    cmake --build "$BUILD" -j16 --target ckgpu test_gpu_tile test_gpu_kernels test_gpu_loader bench_gpu ckptfs \
        >>"$LOG" 2>&1 || { tail -30 "$LOG"; die "build failed (see $LOG)"; }
}

# ---- bundle: build here, copy what the device run needs ---------------------
if [ "$MODE" = bundle ]; then
    m=$(missing_tools); [ -z "$m" ] || die "missing tools:$m"
    m=$(missing_devs); [ -z "$m" ] || die "missing development packages:$m"
    build "80;90"
    rm -rf "$DIR" && mkdir -p "$DIR/bin" "$DIR/lib" "$DIR/python" || die "mkdir $DIR"
    for b in gpu/test_gpu_tile gpu/test_gpu_kernels gpu/test_gpu_loader gpu/bench_gpu cli/ckptfs; do
        cp "$BUILD/$b" "$DIR/bin/" || die "copy $b"
    done
    cp "$BUILD/gpu/libckgpu.so" "$DIR/lib/"
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
    BIN=$BUILD/gpu CKPTFS=$BUILD/cli/ckptfs LIB=$BUILD/gpu/libckgpu.so PY=$ROOT/gpu/python
else
    DIR=$(cd "$DIR" && pwd) || die "no bundle $DIR"
    export LD_LIBRARY_PATH=$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    BIN=$DIR/bin CKPTFS=$DIR/bin/ckptfs LIB=$DIR/lib/libckgpu.so PY=$DIR/python
fi
say "-- ready after $(( $(date +%s) - T0 )) s"

# ---- tests (label gpu) ------------------------------------------------------------
WORK=$(mktemp -d /tmp/ckgpu_check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=
runt() {  # name, command...
    local name=$1; shift
    local t=$(date +%s)
    if timeout 300 "$@" >>"$LOG" 2>&1; then
        say "| test $name | PASS | $(( $(date +%s) - t )) s |"
    else
        say "| test $name | FAIL (rc $?) | see $LOG |"; FAILED="$FAILED $name"
    fi
}
runt gpu_tile "$BIN/test_gpu_tile"
runt gpu_kernels "$BIN/test_gpu_kernels"
runt gpu_loader "$BIN/test_gpu_loader" "$WORK/loader"
if have python3; then
    runt gpu_python python3 "$PY/test_ckptfs_gpu.py" "$LIB" "$CKPTFS" "$WORK/python"
fi
grep -q "SKIP device part" "$LOG" && say "NOTE: some test skipped its device part (no CUDA device visible?)"
if [ -n "$SANITIZE" ]; then
    if have compute-sanitizer; then
        runt sanitize_kernels compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_gpu_kernels"
    else
        say "| test sanitize_kernels | SKIP: compute-sanitizer not found |"
    fi
fi

# ---- benchmark ------------------------------------------------------------------------
say "-- bench_gpu $QUICK"
if [ -z "$FAILED" ]; then
    timeout 400 "$BIN/bench_gpu" $QUICK --workdir "$WORK/bench" 2>&1 | tee -a "$LOG" >"$WORK/bench.out"
    rc=${PIPESTATUS[0]}
    [ -f "$WORK/bench.log" ] && cp "$WORK/bench.log" "$LOGDIR/bench_gpu_raw.log"
    [ "$rc" = 0 ] || FAILED="$FAILED bench_gpu(rc=$rc)"
else
    say "bench skipped: tests failed:$FAILED"
fi

say ""
say "== summary ($(( $(date +%s) - T0 )) s, GPU: ${GPU:-none}) =="
grep -E '^\| test ' "$LOG" | sort -u
[ -f "$WORK/bench.out" ] && grep -E '^(##|\|)' "$WORK/bench.out"
[ -f "$WORK/bench.out" ] && grep -vE '^(##|\|)' "$WORK/bench.out" | tail -5
if [ -n "$FAILED" ]; then
    say "RESULT: FAIL:$FAILED"
    exit 1
fi
say "RESULT: PASS"
