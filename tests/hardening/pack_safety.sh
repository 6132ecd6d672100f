#!/bin/sh
# pack_safety: the ways to lose a file or a pack (see pack_safety.py).
: "${CKPTFS:?set CKPTFS}"
exec "${PYTHON:-python3}" "$(dirname "$0")/pack_safety.py"
