#!/usr/bin/env bash
# demo.sh CKPTFS — pack a small Llama-style model, mount it, load it through
# the mount with transformers, and show what was saved.
set -euo pipefail
CKPTFS=${1:?usage: demo.sh path/to/ckptfs}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/ckptfs-demo.XXXXXX)
MNT=$WORK/mnt
cleanup() {
  mountpoint -q "$MNT" 2>/dev/null && fusermount3 -u "$MNT" || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== 1. a small model: Llama config, random bf16 weights, sharded with an index"
python3 "$HERE/make_model.py" "$WORK/model"
ls -l "$WORK/model"

echo
echo "== 2. ckptfs pack (K15)"
"$CKPTFS" pack "$WORK/model" "$WORK/packed"
"$CKPTFS" stat "$WORK/packed"

echo
echo "== 3. ckptfs mount"
mkdir -p "$MNT"
"$CKPTFS" mount "$WORK/packed" "$MNT"
ls -l "$MNT"

echo
echo "== 4. transformers loads the mount unchanged"
python3 "$HERE/load_compare.py" "$WORK/model" "$MNT"

echo
echo "== 5. savings"
orig=$(du -sb "$WORK/model" | cut -f1)
packed=$(du -sb --exclude=mnt "$WORK/packed" | cut -f1)
python3 -c "o,p=$orig,$packed; print(f'original {o/1e6:.2f} MB, packed {p/1e6:.2f} MB: {100*(1-p/o):.1f}% saved, bit-exact')"
fusermount3 -u "$MNT"
echo "unmounted. done."
