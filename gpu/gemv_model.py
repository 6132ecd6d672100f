#!/usr/bin/env python3
"""gemv_model.py — latency model of the fused K15 GEMV on an H200, against cuBLAS BF16.

For each shape (rows x cols) and batch it computes, per persistent block and
tile group: the bytes streamed and their time at the SM's share of the
bandwidth; the bytes in flight per SM against Little's law; the longest chain
of dependent loads per group and how much of it the ring's bytes in flight
hide; the shared-table build; the rounds of groups over the blocks (waves)
and the last, partial round (tail).  Three designs: "v1" (the kernel before
issue 26: a patch chain of dependent global loads at every group start, a
table built before any load), "v2" (issue 26's first design, 3a4c2d0..8d7cf92:
escape patches streamed into shared memory a group ahead, applied after the
group's units, the table built under the first loads, a fixed split-K) and
"v3" (the kernel now: v2 with the patches applied after the first half of
each warp's units, while the ring's next units are in flight, and launched
with programmatic dependent launch on sm_90, its weight loads issued before
it waits for the stream's previous kernel).  Their constants are read from
ckg_tile.h, whose ckg_gemv_plan_for the kernel's launcher calls, so the
model follows the code.  Method and tables: gpu/NOTES.md.  Every figure is a
model, not a measurement.

usage: gpu/gemv_model.py [--markdown] [--check PLAN_BINARY]
  --check runs tests/gemv_plan (the kernel's own ckg_gemv_plan_for) on the
  model's shapes, compares its launch plan and shared memory with the
  model's, checks the model's invariants (below) and that gpu/NOTES.md holds
  the current table; exit 1 on any difference.
"""
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- the device (H200 SXM); sources in gpu/NOTES.md ---------------------------
SMS = 132              # multiprocessors (KINDS.md: PyTorch on the lent H200)
BW_COPY = 4.3e12       # B/s a device-to-device copy moves, read + write (KINDS.md, measured here)
ETA = 0.80             # fraction of the copy rate a tuned skinny GEMV streams at (CUTLASS #1139: ~0.7 of datasheet)
L_DRAM = 700e-9        # DRAM latency under load (issue 26's figure; a lead)
L_L2 = 300e-9          # L2 hit latency under load (a lead)
CLOCK = 1.7e9          # SM clock for instruction time (1.98 GHz boost seen; 1.7 is the conservative end)
ISSUE = 128            # thread instructions an SM issues per clock (4 schedulers x 32 lanes)
T_FIXED = 2.0e-6       # launch, ramp and drain common to any kernel under graph replay (a lead)
PDL_HIDE = L_DRAM      # prologue time a PDL launch overlaps with the previous kernel's end (a lead: one DRAM latency)
SMEM_MAX = 227 * 1024  # dynamic shared memory a block may have on sm_90
ESC = 0.0164           # K15 escape rate of N(0, 0.02) BF16 weights (gpu/NOTES.md)
INSTR_PER_WEIGHT = {'k15': 4.61, 'bsplit': 4.0}   # SASS count of the unit loop (NOTES.md, sass_budget.py)

SHAPES = [(8192, 8192), (2048, 6144), (6144, 2048),
          (14336, 4096), (4096, 14336), (4096, 4096), (1024, 4096)]   # rows x cols; Llama-3-8B: gate/up, down, q/o, k/v
BATCHES = [1, 2, 4, 8]


def header_constants():
    """The CKG_GEMV_* defines of ckg_tile.h."""
    text = open(os.path.join(HERE, 'ckg_tile.h')).read()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r'#define CKG_GEMV_(\w+)\s+(\d+)', text)}


C = header_constants()
DESIGNS = {
    # the kernel before issue 26 (commit c60c02d), for the "before" column
    'v1': dict(STEP_COLS=512, SLOTS=8, WARPS=8, BLOCKS_PER_SM=1, STAGES=3, ROW_PIECES=50, LUT_BYTES=65536,
               PATCH_UNROLL=1, patch='chain', build='serial'),
    'v2': dict(C, patch='streamed', build='overlapped', patch_at='end', pdl=False),
    'v3': dict(C, patch='streamed', build='overlapped', patch_at='mid', pdl=True),
}
NOW = 'v3'   # the kernel in ckg_gemv.cuh


def plan(rows, cols, d, sms=SMS):
    """ckg_gemv_plan_for of ckg_tile.h."""
    S = -(-cols // d['STEP_COLS'])
    T = -(-rows // 8)
    g = math.gcd(S, d['SLOTS'])
    TG = d['SLOTS'] // g
    NG = -(-T // TG)
    return dict(S=S, T=T, TG=TG, NG=NG, L=S // g, grid=min(NG, sms * d['BLOCKS_PER_SM']))


def bytes_per_weight(enc):
    return 0.5 + (0.875 if enc == 'k15' else 1.0)


def smem_bytes(d, batch=8):
    ring = d['WARPS'] * d['STAGES'] * 8 * d['ROW_PIECES'] * 16
    small = 2 * (d['SLOTS'] * 64 + 8 * 64) * 4 + 3 * 80 * 4   # slot partials, patch sums, row ranks (x2, x3)
    return d['LUT_BYTES'] + ring + small


def patch_capacity(d):
    """Escapes of one group that fit the table's free half (two groups: half each)."""
    return 0 if d['patch'] == 'chain' else d['LUT_BYTES'] // 2 // 2 // 4 - 3


def table_build_time(d):
    if d['build'] == 'serial':   # 8192 entries by 256 threads, ~20 instructions each, no load in flight
        return 8192 * 20 / ISSUE / CLOCK
    # 256 values, 8 rotated 16-byte stores each: ~40 instructions and 256 store wavefronts
    return (256 * 40 / ISSUE + 256) / CLOCK


def ours(rows, cols, batch, d, enc='k15', esc=ESC):
    """Predicted time (s) of the fused GEMV and its parts."""
    P = plan(rows, cols, d)
    rows_g = P['TG'] * 8
    bpw = bytes_per_weight(enc)
    esc_row = cols * esc
    g_bytes = rows_g * cols * bpw + (rows_g + 1) * 4 + rows_g * esc_row * 4
    unit_bytes = 8 * min(cols, d['STEP_COLS']) * bpw
    inflight = d['BLOCKS_PER_SM'] * d['WARPS'] * (d['STAGES'] - 1) * unit_bytes
    bw = BW_COPY * ETA
    rows_per_warp = -(-rows_g // d['WARPS'])
    if d['patch'] == 'chain':       # prow, then per 32 escapes: entry (DRAM), then x (L2)
        chain = rows_per_warp * (L_DRAM + max(1, math.ceil(esc_row / 32)) * (L_DRAM + L_L2))
    else:                           # entries in shared memory; x at escape columns from L2, UNROLL per lane at once
        chain = rows_per_warp * math.ceil(esc_row / (32 * d['PATCH_UNROLL'])) * L_L2
        if rows_g * esc_row > patch_capacity(d):   # overflow read from global, one chain per row
            chain += rows_per_warp * L_DRAM
    alu = rows_g * cols * INSTR_PER_WEIGHT[enc] / ISSUE / CLOCK * d['BLOCKS_PER_SM']
    rounds = [P['grid']] * (P['NG'] // P['grid']) + ([P['NG'] % P['grid']] if P['NG'] % P['grid'] else [])
    t = 0.0
    parts = dict(stream=0.0, exposed=0.0, alu_bound=False)
    for active in rounds:
        sms_active = min(SMS, -(-active // d['BLOCKS_PER_SM']))
        bw_sm = min(bw / sms_active, inflight / L_DRAM)
        t_stream = g_bytes * d['BLOCKS_PER_SM'] / bw_sm
        slack = max(0.0, (inflight - bw_sm * L_DRAM) / bw_sm)
        exposed = max(0.0, chain - slack)
        t += max(t_stream, alu) + exposed
        parts['stream'] += t_stream
        parts['exposed'] += exposed
        parts['alu_bound'] |= alu > t_stream
    if d.get('patch_at') == 'end':  # the last group's chain runs after its units: nothing in flight hides it
        t += chain
        parts['exposed'] += chain
    elif d.get('patch_at') == 'mid':  # the first group's entries: ranks after the wait, entries, chain, under the ring
        first = max(0.0, 2 * L_DRAM + chain - inflight / min(bw / min(SMS, rounds[0]), inflight / L_DRAM))
        t += first
        parts['exposed'] += first
    build = table_build_time(d)
    prologue = build + L_DRAM if d['build'] == 'serial' else max(build, L_DRAM)
    if d.get('pdl'):                # weights' first loads and the table before griddepcontrol.wait
        prologue = max(0.0, prologue - PDL_HIDE)
    total = T_FIXED + prologue + t
    little = bw / SMS * L_DRAM
    return dict(total=total, plan=P, rounds=len(rounds), tail=rounds[-1], g_bytes=g_bytes, inflight=inflight,
                little=little, chain=chain, prologue=prologue, groups_per_block=len(rounds), **parts)


def cublas(rows, cols, batch):
    """cuBLAS BF16 GEMV/GEMM: every byte once at the same streaming rate, no tail."""
    b = rows * cols * 2 + batch * cols * 2 + batch * rows * 2
    return T_FIXED + L_DRAM + b / (BW_COPY * ETA)


def table(markdown):
    out = []
    head = ('shape', 'batch', 'TG', 'groups', 'rounds/tail', 'KB/group', 'inflight KB/SM (Little %.0f)' % (
        BW_COPY * ETA / SMS * L_DRAM / 1e3), 'chain v1 us', 'chain v2/v3 us', 'cuBLAS us', 'v1 us', 'v2 us',
        'v3 us', 'v1/cuBLAS', 'v2/cuBLAS', 'v3/cuBLAS')
    rows_out = []
    for (r, c) in SHAPES:
        for b in BATCHES:
            v1, v2, v3 = (ours(r, c, b, DESIGNS[k]) for k in ('v1', 'v2', 'v3'))
            cb = cublas(r, c, b)
            P = v3['plan']
            rows_out.append(('%dx%d' % (r, c), b, P['TG'], P['NG'], '%d/%d' % (v3['rounds'], v3['tail']),
                             '%.1f' % (v3['g_bytes'] / 1e3), '%.0f' % (v3['inflight'] / 1e3),
                             '%.2f' % (v1['chain'] * 1e6), '%.2f' % (v3['chain'] * 1e6), '%.1f' % (cb * 1e6),
                             '%.1f' % (v1['total'] * 1e6), '%.1f' % (v2['total'] * 1e6), '%.1f' % (v3['total'] * 1e6),
                             '%.2f' % (v1['total'] / cb), '%.2f' % (v2['total'] / cb), '%.2f' % (v3['total'] / cb)))
    if markdown:
        out.append('| ' + ' | '.join(head) + ' |')
        out.append('|' + '---|' * len(head))
        out += ['| ' + ' | '.join(str(x) for x in row) + ' |' for row in rows_out]
    else:
        w = [max(len(str(x)) for x in col) for col in zip(head, *rows_out)]
        out += ['  '.join(str(x).rjust(n) for x, n in zip(row, w)) for row in [head] + rows_out]
    return '\n'.join(out)


def sensitivity():
    """v3/cuBLAS at batch 1 as the fixed cost per call (both kernels) and
    what a PDL launch hides of v3's prologue vary."""
    global T_FIXED, PDL_HIDE
    keep, keep_h, lines = T_FIXED, PDL_HIDE, []
    for h in (0.0, 0.35, 0.7):
        PDL_HIDE = h * 1e-6
        for f in (0.0, 1.0, 2.0, 4.0):
            T_FIXED = f * 1e-6
            lines.append('PDL hides %.2f us, fixed %.0f us: ' % (h, f) + ', '.join(
                '%dx%d %.2f' % (r, c, ours(r, c, 1, DESIGNS[NOW])['total'] / cublas(r, c, 1)) for (r, c) in SHAPES))
    T_FIXED, PDL_HIDE = keep, keep_h
    return '\n'.join(lines)


def other_figures():
    d = DESIGNS[NOW]
    lines = ['v2 shared memory per block: %d B (limit %d); patch capacity per group: %d escapes' % (
        smem_bytes(d), SMEM_MAX, patch_capacity(d))]
    lines.append('table build: v1 %.2f us before any load, v2/v3 %.2f us under the first loads (%.2f us latency)' % (
        table_build_time(DESIGNS['v1']) * 1e6, table_build_time(d) * 1e6, L_DRAM * 1e6))
    for enc in ('k15', 'bsplit'):
        bpw = bytes_per_weight(enc) + 4 * (ESC if enc == 'k15' else 0.0002)
        lines.append('%s: %.3f B/weight streamed = %.3f of BF16; decode writes 2 B/weight: %.2fx the copy rate in '
                     'output bytes if bandwidth-bound' % (enc, bpw, bpw / 2, 4 / (bytes_per_weight(enc) + 2)))
    return '\n'.join(lines)


def check(binary):
    """The kernel's plan (tests/gemv_plan) against the model's, and the model's invariants."""
    bad = []
    for (r, c) in SHAPES + [(40, 1024), (1001, 384), (3, 65536)]:
        got = subprocess.run([binary, str(r), str(c), str(SMS)], check=True, capture_output=True, text=True).stdout
        kern = dict(kv.split('=') for kv in got.split())
        kern = {k: int(v) for k, v in kern.items()}
        mine = plan(r, c, DESIGNS[NOW])
        if kern.pop('smem') != smem_bytes(DESIGNS[NOW]):
            bad.append('kernel shared memory %s, model %d' % (got.split()[-1], smem_bytes(DESIGNS[NOW])))
        if any(kern[k] != mine[k] for k in mine):
            bad.append('%dx%d: kernel plan %s, model %s' % (r, c, kern, mine))
        P = mine
        if (P['TG'] * P['S']) % C['SLOTS'] or P['S'] % P['L'] or P['L'] * C['SLOTS'] != P['TG'] * P['S']:
            bad.append('%dx%d: slots straddle tiles or do not split the group: %s' % (r, c, P))
    d = DESIGNS[NOW]
    if smem_bytes(d) > SMEM_MAX:
        bad.append('shared memory %d > %d' % (smem_bytes(d), SMEM_MAX))
    for (r, c) in SHAPES:
        for b in BATCHES:
            m = ours(r, c, b, d)
            if m['inflight'] < m['little']:
                bad.append('%dx%d: %.0f B in flight per SM < Little %.0f' % (r, c, m['inflight'], m['little']))
            if m['exposed'] > 0:
                bad.append('%dx%d batch %d: %.2f us of dependent loads not hidden' % (r, c, b, m['exposed'] * 1e6))
            if m['plan']['TG'] * 8 * c * ESC > patch_capacity(d):
                bad.append('%dx%d: a group\'s escapes (%.0f) overflow the patch buffer (%d)' % (
                    r, c, m['plan']['TG'] * 8 * c * ESC, patch_capacity(d)))
    for (r, c) in SHAPES:   # the critical path is the streaming: within 2% of the fixed costs + bytes / bandwidth
        m = ours(r, c, 1, d)
        floor = T_FIXED + m['prologue'] + m['plan']['NG'] * m['g_bytes'] / (BW_COPY * ETA)
        if m['total'] > 1.02 * floor:
            bad.append('%dx%d: %.2f us, more than 2%% over its floor %.2f us' % (r, c, m['total'] * 1e6, floor * 1e6))
    if table(True) not in open(os.path.join(HERE, 'NOTES.md')).read():
        bad.append('gpu/NOTES.md does not hold this model\'s table: paste `gpu/gemv_model.py --markdown` there')
    for b in bad:
        print('gemv_model: ' + b, file=sys.stderr)
    print('gemv_model: %s (%d shapes: plan equal to the kernel\'s, invariants %s)' % (
        'FAIL' if bad else 'ok', len(SHAPES) + 3, 'broken' if bad else 'hold'))
    return 1 if bad else 0


def main():
    args = sys.argv[1:]
    if args[:1] == ['--check']:
        return check(args[1])
    print(table('--markdown' in args))
    print()
    print(other_figures())
    print()
    print(sensitivity())
    return 0


if __name__ == '__main__':
    sys.exit(main())
