#!/bin/sh
# emu_fault.sh REGEX PROGRAM [ARGS...] — a planted-fault build of an emulator test
# (gpu/CMakeLists.txt, gpu_emu_fault_*) must fail, and its output must match REGEX
# (the check that caught it: a result check or the race detector's kernel error,
# which aborts the program, so ctest cannot match it itself).
want=$1
shift
ulimit -c 0 2>/dev/null
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out" | tail -n 4
if [ "$rc" -eq 0 ]; then
    echo "emu_fault: $1 passed: the planted fault was not caught"
    exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$want"; then
    echo "emu_fault: $1 failed (exit $rc), but not with /$want/"
    exit 1
fi
echo "emu_fault: caught (exit $rc)"
