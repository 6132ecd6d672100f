#!/bin/sh
# mount_drop_packed: with -o drop_packed (the default for a model over half
# of memory) a reader streaming a file through the mount leaves its packed
# pages out of the page cache, so a model larger than memory is not cached
# twice; with keep_packed they stay.  Measured per file with fincore, after
# evicting the packed files (POSIX_FADV_DONTNEED), so nothing else on the
# machine can blur it.  The bytes read are compared with the originals.
# Where the file system takes O_DIRECT, most chunks come from the daemon's
# O_DIRECT windows (plane_window.h; its counters from `ckptfs stat`).
. "$(dirname "$0")/lib.sh"
command -v fincore >/dev/null || { echo "SKIP: no fincore (util-linux)"; exit 77; }
# one shard of 32 MiB in 16 MiB tensors and one of 16 MiB (what the option is for)
"$PY" "$HERE/../bench/mount_gen.py" "$T/src" 32 16 1 >/dev/null
"$CKPTFS" pack "$T/src" "$T/dst" >"$T/log.pack" 2>&1 || fail "ckptfs pack failed"
# cached_pct: % of the packed shards' bytes in the page cache
cached_pct() {
    fincore -b -n -o RES,SIZE "$T"/dst/*.safetensors.ckpt |
        awk '{r += $1; s += $2} END {printf "%d\n", s ? 100 * r / s : 0}'
}
evict() {
    "$PY" - "$T"/dst/*.ckpt <<'PYEOF'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PYEOF
}
for opt in drop_packed keep_packed; do
    evict
    [ "$(cached_pct)" -le 5 ] || fail "could not evict the packed files ($(cached_pct)% cached)"
    mount_fg "m_$opt" -o "$opt,stats"
    # the packed pages cached while the reads run, not only after: sampled
    : >"$T/samples"
    touch "$T/sampling"
    (while [ -e "$T/sampling" ]; do cached_pct >>"$T/samples"; sleep 0.01; done) &
    for f in "$T"/src/*.safetensors; do
        cmp "$f" "$T/m_$opt/$(basename "$f")" || { rm -f "$T/sampling"; fail "$opt: $(basename "$f") differs"; }
    done
    rm -f "$T/sampling"
    wait $!
    pct=$(cached_pct)
    peak=$( (cat "$T/samples"; echo "$pct") | sort -n | tail -1)
    echo "$opt: ${pct}% of the packed shards cached after reading them all, at most ${peak}% while reading ($(wc -l <"$T/samples") samples)"
    if [ "$opt" = drop_packed ] && "$PY" -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT))' "$T"/dst/*00001*.ckpt 2>/dev/null; then
        "$CKPTFS" stat --json "$T/m_$opt" >"$T/stats.json" || fail "ckptfs stat of the mount failed"
        "$PY" - "$T/stats.json" <<'PYEOF' || fail "drop_packed: the O_DIRECT windows served too few chunks"
import json, sys
o = json.load(open(sys.argv[1]))
# 48 MiB read in one pass: all but the first chunks of each file's run
print("drop_packed: %d of %d chunks decoded from O_DIRECT windows (%d loads)" % (o["direct_hits"], o["cache_misses"], o["direct_loads"]))
sys.exit(0 if o["direct_failures"] == 0 and o["direct_hits"] >= o["cache_misses"] // 2 else 1)
PYEOF
        # the text form shows the same windows' counters
        "$CKPTFS" stat "$T/m_$opt" >"$T/stats.txt" || fail "ckptfs stat (text) of the mount failed"
        loads=$("$PY" -c 'import json, sys; o = json.load(open(sys.argv[1])); print(o["direct_loads"], o["direct_hits"])' "$T/stats.json")
        grep -q "^  O_DIRECT windows ${loads% *} loads (.*), ${loads#* } chunks decoded from them, " "$T/stats.txt" ||
            fail "ckptfs stat text lacks the windows' counters ($loads): $(cat "$T/stats.txt")"
    fi
    case $opt in
    # 0% seen here at load 12; a little room for a page sitting in another
    # CPU's LRU batch through every drop that covers it.  Before the daemon
    # kept readahead off the packed files 38-42% stayed (large folios, which
    # are dropped only whole), and 2-25% when it dropped pages of chunks not
    # decoded yet (read again from disk, then never dropped)
    drop_packed) [ "$pct" -le 10 ] && [ "$peak" -le 10 ] || fail "drop_packed left ${pct}% of the packed bytes cached (${peak}% while reading)" ;;
    keep_packed) [ "$pct" -ge 50 ] || fail "keep_packed left only ${pct}% cached" ;;
    esac
    stop_daemon TERM "$PID"
    # -o stats: the counters at unmount, every byte served counted
    want=$(cat "$T"/src/*.safetensors | wc -c)
    line=$(grep -m1 '^ckptfs: stats: ' "$T/log.m_$opt") || fail "$opt,stats: no stats line at unmount: $(cat "$T/log.m_$opt")"
    "$PY" - "$want" "$opt" "$line" <<'PYEOF' || fail "$opt,stats: $line"
import sys
want, opt, line = int(sys.argv[1]), sys.argv[2], sys.argv[3]
w = line.split(": ", 2)[2].split()
o = {w[i]: int(w[i + 1]) for i in range(0, len(w), 2)}
assert o["read_bytes"] >= want and o["decode_errors"] == 0 and o["cache_misses"] > 0, o
assert opt == "drop_packed" or "direct_loads" not in o, o
PYEOF
done
echo "PASS mount_drop_packed"
