#!/usr/bin/env python3
"""sass_budget.py — instructions per weight of the fused GEMV, read off its SASS.

Compiles gpu/ckg_kernels.cu for sm_90 (nvcc), disassembles each
gemv_fused_kernel with cuobjdump (CUDA's, or the copy Triton's package
carries) and counts, per lane and 512-column unit (128 weights), the
instructions of the full-unit decode + MMA block: the straight-line block
that holds the unit's 32 HMMA.  gpu/NOTES.md has the budget these are held
against.  Prints one line per encoding; exits 1 when a tool is missing.

usage: gpu/sass_budget.py [--keep DIR]
"""
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE = re.compile(r'\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)')


def cuobjdump():
    found = shutil.which('cuobjdump')
    if found:
        return found
    hits = glob.glob(os.path.join(sys.prefix, 'lib', 'python3*', 'site-packages', 'triton', 'backends', 'nvidia',
                                  'bin', 'cuobjdump'))
    return hits[0] if hits else None


def unit_block(sass):
    """Opcodes of the first straight-line block holding 32 HMMA (the full unit)."""
    ops = [m.group(2) for m in map(LINE.match, sass.splitlines()) if m]
    hmma = [i for i, op in enumerate(ops) if op.startswith('HMMA')]
    if len(hmma) < 32:
        return None
    lo, hi = hmma[0], hmma[31]
    while lo > 0 and not ops[lo - 1].startswith('BRA'):
        lo -= 1
    while hi < len(ops) and not ops[hi].startswith('BRA'):
        hi += 1
    return ops[lo:hi + 1]


def main():
    keep = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == '--keep' else None
    dump, nvcc = cuobjdump(), shutil.which('nvcc') or '/usr/local/cuda/bin/nvcc'
    if not dump or not os.path.exists(nvcc):
        print('sass_budget: needs nvcc and cuobjdump', file=sys.stderr)
        return 1
    work = keep or tempfile.mkdtemp()
    obj = os.path.join(work, 'ckg_kernels.o')
    subprocess.run([nvcc, '-std=c++17', '-arch=sm_90', '-I' + os.path.join(ROOT, 'gpu'), '-I' + os.path.join(ROOT, 'codec'),
                    '-I' + os.path.join(ROOT, 'fs', 'format'),
                    '-c', os.path.join(ROOT, 'gpu', 'ckg_kernels.cu'), '-o', obj], check=True)
    names = subprocess.run([dump, '-symbols', obj], check=True, capture_output=True, text=True).stdout
    for k15, enc in ((1, 'k15'), (0, 'bytesplit')):
        sym = re.search(r'(\S*gemv_fused_kernelILb%d\S*)' % k15, names)
        sass = subprocess.run([dump, '-sass', '-fun', sym.group(1), obj], check=True, capture_output=True,
                              text=True).stdout
        block = unit_block(sass)
        if block is None:
            print('sass_budget: no 32-HMMA block in the %s kernel' % enc, file=sys.stderr)
            return 1
        c = collections.Counter(op.split('.')[0] for op in block)
        top = ', '.join('%s %d' % kv for kv in c.most_common(7))
        print('%-9s decode+MMA of a full unit: %d instructions per lane per 128 weights = %.2f per weight (%s)'
              % (enc, len(block), len(block) / 128, top))
    if not keep:
        shutil.rmtree(work)
    return 0


if __name__ == '__main__':
    sys.exit(main())
