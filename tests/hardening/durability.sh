#!/bin/sh
# durability: pack --delete-source unlinks a source only once its packed
# file's every name and byte is durable, unpack exits only once OUT's are
# (from strace: see durability.py).
: "${CKPTFS:?set CKPTFS}"
exec "${PYTHON:-python3}" "$(dirname "$0")/durability.py"
