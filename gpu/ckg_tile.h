/*
 * ckg_tile.h — the word-level decode tricks of the GPU kernels, written once
 * for host and device (like codec/ckc_decode.h, which it builds on).
 *
 * A "lane group" is 32 consecutive weights starting at a multiple of 32: its
 * codes are 4 little-endian u32 words (16 bytes), its K15 mantissas 7 words
 * (28 bytes, 224 bits), its BSPLIT low bytes 8 words.  The kernels load those
 * words with wide loads and turn them into 16 BF16 pairs (a u32 holding
 * weight 2p in its low half, 2p+1 in its high half), the operand format of
 * the tensor-core MMA.  Codes index a 32-entry table: lut[c] = sym << 7 (K15)
 * or sym << 8 (BSPLIT) for the low half, lut[16 + c] = the same << 16 for the
 * high half, and lut[15] = lut[31] = 0, so an escape decodes to its low part
 * alone; callers fix escapes afterwards (the decoder rewrites them; the
 * fused GEMV has its own table, ckg_gemv.cuh, in which they decode to 0).
 * tests/test_gpu_tile.c checks every function here against ckc_decode.h on
 * random planes.
 */
#ifndef CKG_TILE_H
#define CKG_TILE_H

#include <stdint.h>

#include "ckc_decode.h"

/* Funnel shift: bits [s, s+32) of the 64-bit hi:lo, s < 32. */
CKC_HD uint32_t ckg_funnel(uint32_t lo, uint32_t hi, unsigned s)
{
#if defined(__CUDA_ARCH__)
    return __funnelshift_r(lo, hi, s);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> s);
#endif
}

/* Byte permute (PRMT without sign modes): byte i of the result is byte
 * (sel >> 4i) & 7 of the 8-byte value y:x. */
CKC_HD uint32_t ckg_prmt(uint32_t x, uint32_t y, uint32_t sel)
{
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, sel);
#else
    uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)((v >> (8 * ((sel >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
    return r;
#endif
}

/* The 32-entry table described above. */
CKC_HD void ckg_make_lut(int is_k15, const ckc_codebook *cb, uint32_t lut[32])
{
    unsigned sh = ckc_low_bits(is_k15);
    for (int c = 0; c < 16; c++) {
        uint32_t v = c == (int)CKC_ESCAPE ? 0u : (uint32_t)cb->sym[c] << sh;
        lut[c] = v;
        lut[16 + c] = v << 16;
    }
}

/* Nibble j of c is 15 <=> bit 4j+3 of the result is set. */
CKC_HD uint32_t ckg_esc_bits8(uint32_t c)
{
    return ((c & 0x77777777u) + 0x11111111u) & c & 0x88888888u;
}

CKC_HD unsigned ckg_popc(uint32_t v)
{
#if defined(__CUDA_ARCH__)
    return (unsigned)__popc(v);
#else
    return (unsigned)__builtin_popcount(v);
#endif
}

/* Lowest set bit's index (v != 0). */
CKC_HD unsigned ckg_ffs0(uint32_t v)
{
#if defined(__CUDA_ARCH__)
    return (unsigned)__ffs((int)v) - 1u;
#else
    return (unsigned)__builtin_ctz(v);
#endif
}

/* Escapes among the 32 weights of a lane group. */
CKC_HD unsigned ckg_esc_count32(const uint32_t c[4])
{
    return ckg_popc(ckg_esc_bits8(c[0])) + ckg_popc(ckg_esc_bits8(c[1])) +
           ckg_popc(ckg_esc_bits8(c[2])) + ckg_popc(ckg_esc_bits8(c[3]));
}

/* Escapes among the first `below` (0..32) weights of a lane group. */
CKC_HD unsigned ckg_esc_count_below(const uint32_t c[4], unsigned below)
{
    unsigned n = 0;
    for (int q = 0; q < 4; q++) {
        int keep = (int)below - 8 * q;           /* weights of word q to count */
        uint32_t b = ckg_esc_bits8(c[q]);
        if (keep <= 0)
            b = 0;
        else if (keep < 8)
            b &= (1u << (4 * keep)) - 1u;
        n += ckg_popc(b);
    }
    return n;
}

/* K15: 16 BF16 pairs (escapes without their symbol) from codes c[4] and
 * mantissa words m[7] of a lane group. */
CKC_HD void ckg_k15_pairs32(const uint32_t c[4], const uint32_t m[7], const uint32_t *lut,
                            uint32_t out[16])
{
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int p = 0; p < 16; p++) {
        const int bit = 14 * p, w = bit >> 5, s = bit & 31;
        uint32_t x = ckg_funnel(m[w], w < 6 ? m[w + 1] : 0u, (unsigned)s);
        /* m(2p) to bit 0, m(2p+1) (bits 7..13 of x) to bit 16; x's bits 14.. belong to the next pair */
        uint32_t mant = ((x & 0x7Fu) | (x << 9)) & 0x007F007Fu;
        uint32_t byte = (c[p >> 2] >> (8 * (p & 3))) & 0xFFu;
        out[p] = lut[byte & 15u] | lut[16u + (byte >> 4)] | mant;
    }
}

/* BSPLIT: 16 BF16 pairs from codes c[4] and low-byte words l[8]. */
CKC_HD void ckg_bs_pairs32(const uint32_t c[4], const uint32_t l[8], const uint32_t *lut,
                           uint32_t out[16])
{
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int p = 0; p < 16; p++) {
        uint32_t lows = ckg_prmt(l[p >> 1], 0u, (p & 1) ? 0x4342u : 0x4140u);
        uint32_t byte = (c[p >> 2] >> (8 * (p & 3))) & 0xFFu;
        out[p] = lut[byte & 15u] | lut[16u + (byte >> 4)] | lows;
    }
}

/* BF16 bits to float bits. */
CKC_HD uint32_t ckg_bf16_bits_to_f32_bits(uint16_t w) { return (uint32_t)w << 16; }

/* ---- the fused GEMV's launch plan (ckg_gemv.cuh), host and device ----------
 * gpu/gemv_model.py reads these defines and tests/gemv_plan.c prints
 * ckg_gemv_plan_for() for the model's shapes, so that the latency model in
 * gpu/NOTES.md and the kernel cannot drift apart (ctest gemv_model). */
#define CKG_GEMV_STEP_COLS 512     /* columns of a unit: 8 rows x 512 columns, a warp step */
#define CKG_GEMV_SLOTS 8           /* slots of a tile group: the split-K of its units, fixed */
#define CKG_GEMV_WARPS 8           /* warps of a block (4 where shared memory is short) */
#define CKG_GEMV_BLOCKS_PER_SM 1   /* persistent: one block per SM (gpu/NOTES.md says why) */
#define CKG_GEMV_STAGES 3          /* cp.async ring stages per warp */
#define CKG_GEMV_ROW_PIECES 50     /* 16-byte slots of a staged row (16 code + 34 low) */
#define CKG_GEMV_LUT_BYTES 65536   /* 256 code bytes x 256 B: 32 lanes x 4 B, then 128 B free */
#define CKG_GEMV_PATCH_UNROLL 4    /* escapes per lane in flight in the patch loop */
/* Shared memory of a block: the table (its free half holding two groups'
 * patch entries), slot partials [2][slots][8 batch][8 rows], escape sums
 * [2][8 batch][8 * slots rows], row ranks [3][80], then a ring per warp. */
#define CKG_GEMV_SMEM_FIXED \
    (CKG_GEMV_LUT_BYTES + 2 * CKG_GEMV_SLOTS * 8 * 8 * 4 + 2 * 8 * 8 * CKG_GEMV_SLOTS * 4 + 3 * 80 * 4)
#define CKG_GEMV_SMEM_BYTES(warps) \
    (CKG_GEMV_SMEM_FIXED + (warps) * CKG_GEMV_STAGES * 8 * CKG_GEMV_ROW_PIECES * 16)

typedef struct {
    uint32_t S;     /* units per row */
    uint32_t T;     /* tiles (8 rows) */
    uint32_t TG;    /* tiles per group: TG * S a multiple of CKG_GEMV_SLOTS */
    uint32_t NG;    /* groups */
    uint32_t L;     /* units per slot (a slot never straddles two tiles) */
    uint32_t grid;  /* blocks */
} ckg_gemv_plan;

CKC_HD ckg_gemv_plan ckg_gemv_plan_for(uint32_t rows, uint32_t cols, uint32_t sms)
{
    ckg_gemv_plan P;
    P.S = (cols + CKG_GEMV_STEP_COLS - 1) / CKG_GEMV_STEP_COLS;
    P.T = (rows + 7) / 8;
    uint32_t g = P.S, b = CKG_GEMV_SLOTS;      /* g = gcd(S, slots) */
    while (b) {
        uint32_t r = g % b;
        g = b;
        b = r;
    }
    P.TG = CKG_GEMV_SLOTS / g;
    P.NG = (P.T + P.TG - 1) / P.TG;
    P.L = P.S / g;
    P.grid = P.NG < sms * CKG_GEMV_BLOCKS_PER_SM ? P.NG : sms * CKG_GEMV_BLOCKS_PER_SM;
    return P;
}

#endif /* CKG_TILE_H */
