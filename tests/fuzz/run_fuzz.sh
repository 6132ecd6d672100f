#!/bin/sh
# run_fuzz.sh BUILD_FUZZ_DIR SECONDS [TARGET...] — run the libFuzzer targets
# (built with -DCMAKE_C_COMPILER=clang -DCKPTFS_FUZZ=ON; BUILD_FUZZ_DIR is
# <build>/tests/fuzz) for SECONDS each, on one core each, sequentially.
#   sh tests/fuzz/run_fuzz.sh /tmp/build-fuzz/tests/fuzz 3600      # an hour each
# Seeds come from seedgen and, for packdir, packdir_seeds.py (the conformance
# packs; needs python3 with xxhash and zstandard), regenerated every run,
# plus the golden-error inputs; the growing corpus is kept in BUILD_FUZZ_DIR/corpus/<target>.
# Crashes land in BUILD_FUZZ_DIR/crashes/<target>/: minimize them
# (fuzz_<target> -minimize_crash=1 FILE), fix the bug, and add the input to
# tests/golden-errors/<target>/ (replayed by the golden_errors test).
# Exit status: 0 if no target found anything.
set -eu
B=$1
SECS=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
GOLDEN=$HERE/../golden-errors
TARGETS=${*:-safetensors container decode manifest packdir ans}
"$B/seedgen" seeds "$B/seeds" >/dev/null
case " $TARGETS " in *" packdir "*) python3 "$HERE/packdir_seeds.py" "$B/seeds/packdir" >/dev/null ;; esac
rc=0
for t in $TARGETS; do
    mkdir -p "$B/corpus/$t" "$B/crashes/$t" "$B/seeds/$t"   # ans: no seeds, the harness builds valid ones
    # per-input limits: 10 s, 2 GiB of malloc (the reader must bound memory)
    if ! "$B/fuzz_$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$B/crashes/$t/" \
        "$B/corpus/$t" "$B/seeds/$t" $(test -d "$GOLDEN/$t" && echo "$GOLDEN/$t") >"$B/fuzz_$t.log" 2>&1; then
        echo "fuzz_$t: FAILED, see $B/fuzz_$t.log and $B/crashes/$t/"
        grep -E "ERROR|SUMMARY|==[0-9]+==|abort" "$B/fuzz_$t.log" | head -20
        rc=1
    else
        echo "fuzz_$t: ok ($(grep -E '^stat::number_of_executed_units' "$B/fuzz_$t.log" | awk '{print $2}') runs," \
            "$(grep -cE '^#[0-9]+.*(NEW|REDUCE)' "$B/fuzz_$t.log") new inputs)"
    fi
done
exit $rc
