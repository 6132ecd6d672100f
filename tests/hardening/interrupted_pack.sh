#!/bin/sh
# interrupted_pack: kill `ckptfs pack --delete-source` at every durable step
# (CKPTFS_FAULT) and with SIGKILL at random moments;
# nothing may be lost and a rerun must finish (see interrupted_pack.py).
: "${CKPTFS:?set CKPTFS}" "${CKPT_CHUNKS:?set CKPT_CHUNKS}"
exec "${PYTHON:-python3}" "$(dirname "$0")/interrupted_pack.py"
