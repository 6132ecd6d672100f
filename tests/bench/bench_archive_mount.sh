#!/usr/bin/env bash
# bench_archive_mount.sh CKPTFS [SRC] — first read through `ckptfs mount` of
# an archive pack against a K15 pack of the same model, in the same run
# (issue 28: target archive >= 0.5x K15).  A benchmark: it prints figures and
# never fails on them.
#
# SRC (default: the corpus's minilm-l6, tests/corpus/make_corpus.py, built in
# $BENCH_DIR/corpus) is packed both ways.  For each prefetch_threads=N (the
# daemon's decode-ahead workers: 1, 2, 4, 8) and each pack: a fresh mount
# (FUSE's page cache empty; the packed files in the page cache, read once
# before), then every *.safetensors shard read sequentially (dd bs=1M, one
# reader), wall time; the best of $REPS (default 3) runs.  Prints MB/s of
# original bytes and archive/K15.  With BASE=another ckptfs executable (an
# older build, say), the archive pack is also read through its mount in the
# same run: a before/after of a change to the read path.  Needs root,
# /dev/fuse, fusermount3.  Each daemon runs in the foreground and is waited
# for after its unmount (tests/bench/lib.sh), so no run overlaps the last
# one's teardown; whatever happens, the mount point is unmounted.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_args "$1"
CK=$CKPTFS
bench_start archive_mount
W=${BENCH_DIR:-/var/tmp/ckptfs-bench-archive}
REPS=${REPS:-3}
mkdir -p "$W"
SRC=${2:-}
if [ -z "$SRC" ]; then
    python3 "$HERE/../corpus/make_corpus.py" "$W/corpus" >/dev/null
    SRC=$W/corpus/minilm-l6
fi
for f in k15 archive; do
    [ -e "$W/p-$f/ckptfs.manifest" ] || { rm -rf "$W/p-$f"; "$CK" pack --format "$f" --progress=none "$SRC" "$W/p-$f" >/dev/null; }
    cat "$W/p-$f"/*.ckpt >/dev/null
done
shards=$(cd "$SRC" && ls ./*.safetensors)
bytes=$(cd "$SRC" && cat $shards | wc -c)

# seconds of the best of REPS first reads of every shard through a fresh mount
# (of ckptfs $3, default CK)
first_read() {
    local pack=$1 opts=$2 ck=${3:-$CK} best=
    for _ in $(seq "$REPS"); do
        start_daemon "$T/mount.log" "$ck" mount -f -o "$opts" "$pack" "$MNT" >/dev/null
        wait_mount fuse.ckptfs "$T/mount.log"
        local t0 t1
        t0=$(date +%s.%N)
        for s in $shards; do dd if="$MNT/$s" of=/dev/null bs=1M status=none; done
        t1=$(date +%s.%N)
        unmount
        best=$(python3 -c "import sys; a=float('$t1')-float('$t0'); b='$best'; print(min(a, float(b)) if b else a)")
    done
    echo "$best"
}

echo "source: $SRC ($((bytes / 1000000)) MB of shards); load $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
BASE=${BASE:+$(readlink -f "$BASE")}
if [ -n "$BASE" ]; then
    echo "| prefetch_threads | K15 MB/s | archive MB/s | archive / K15 | archive, BASE, MB/s | BASE / K15 |"
    echo "|---:|---:|---:|---:|---:|---:|"
else
    echo "| prefetch_threads | K15 MB/s | archive MB/s | archive / K15 |"
    echo "|---:|---:|---:|---:|"
fi
for n in ${THREADS:-1 2 4 8}; do
    tk=$(first_read "$W/p-k15" "prefetch_threads=$n")
    ta=$(first_read "$W/p-archive" "prefetch_threads=$n")
    tb=0
    [ -z "$BASE" ] || tb=$(first_read "$W/p-archive" "prefetch_threads=$n" "$BASE")
    python3 -c "b=$bytes; k=$tk; a=$ta; t=$tb
row = f'| $n | {b/k/1e6:.0f} | {b/a/1e6:.0f} | {k/a:.2f} |'
print(row + (f' {b/t/1e6:.0f} | {k/t:.2f} |' if t else ''))"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
