#!/bin/sh
# crafted: packed directories the writer never makes but the format allows,
# built with every checksum right (craft_pack), must be read exactly.
#  - one chunk of 16 MiB (the format's limit): verify and unpack once decoded
#    it into an 8 MiB buffer (heap overflow, exit 134).
set -eu
: "${CKPTFS:?set CKPTFS}" "${CRAFT_PACK:?set CRAFT_PACK}"
T=$(mktemp -d /tmp/ckptfs-crafted.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A 16 MiB chunk and a 9 MiB + 1 tail chunk (sizes that do not fill 8 MiB batches).
for spec in "16777216 16777216" "26214401 16777216" "9437185 9437184"; do
    set -- $spec
    rm -rf "$T/dst" "$T/out"
    "$CRAFT_PACK" "$T/dst" "$1" "$2" "$T/orig" || fail "craft_pack $spec"
    "$CKPTFS" verify "$T/dst" >"$T/log" 2>&1 || { cat "$T/log"; fail "verify of $1 bytes in $2-byte chunks"; }
    "$CKPTFS" verify --against "$T/orig" "$T/dst" >"$T/log" 2>&1 ||
        { cat "$T/log"; fail "verify --against, $1 bytes in $2-byte chunks"; }
    "$CKPTFS" unpack "$T/dst" "$T/out" >"$T/log" 2>&1 || { cat "$T/log"; fail "unpack of $1 bytes in $2-byte chunks"; }
    cmp "$T/orig" "$T/out/big.bin" || fail "unpacked bytes differ ($spec)"
done
echo "crafted: ok"
