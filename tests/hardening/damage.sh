#!/bin/sh
# damage: damaged packs must be refused by verify/unpack, never read as wrong
# bytes, and leave undamaged files and chunks readable (see damage.py).
: "${CKPTFS:?set CKPTFS}" "${CKPT_CHUNKS:?set CKPT_CHUNKS}"
exec "${PYTHON:-python3}" "$(dirname "$0")/damage.py"
