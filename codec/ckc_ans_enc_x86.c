/*
 * ckc_ans_enc_x86.c — the archive encoder's vector loop: the 16 rANS states
 * of a chunk in two AVX-512 registers of eight 64-bit lanes (so that the
 * 64-bit products of the reciprocal division need no shuffling), a group of
 * 16 weights per iteration, from the chunk's last full group to its first:
 *   mantissa step  gather the packed entries man_enc[(w >> 7) * 16 + hi]
 *   exponent step  the same from exp_enc[class * 512 + (w >> 7)], frequency
 *                  0 refused (a symbol not in the plan has frequency 0)
 * and a step is: lanes with x >= freq << (31 - b) put their low 16 bits out
 * (compressed in lane order and stored just below the words already
 * written, so lane 0's word is lowest, as the scalar loop's lane 15 first,
 * downwards, leaves them), x >>= 16 there, then x += bias + (2^b - freq) *
 * (mulhi(x, rcp) >> shift).  Every value stays below 2^32 and the sums are
 * exact, so the 64-bit lanes compute what ckc_ans_enc.c's put() computes in
 * 32-bit words: the bytes are the portable encoder's (tests/unit/test_ans.c
 * compares them).
 */
#include "ckc_ans_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stddef.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,popcnt")))

/* Half of a step: 8 lanes (64-bit lanes holding 32-bit states) with the
 * entries e of a table of scale 2^sb.  Sets *out to the lanes that put a
 * word out (x's low 16 bits, before the step) and returns the lanes whose
 * entry has frequency 0 (not codable). */
T512 static inline __mmask8 half_step(__m512i *x, __m512i e, unsigned sb, __mmask8 *out)
{
    const __m512i m13 = _mm512_set1_epi64(0x1FFF);
    __m512i v = *x, freq = _mm512_and_si512(_mm512_srli_epi64(e, 45), m13);
    __m512i bias = _mm512_and_si512(_mm512_srli_epi64(e, 32), m13), q;

    *out = _mm512_cmpge_epu64_mask(v, _mm512_slli_epi64(freq, 31 - sb));
    v = _mm512_mask_srli_epi64(v, *out, v, 16);
    q = _mm512_srlv_epi64(_mm512_srli_epi64(_mm512_mul_epu32(v, e), 32), _mm512_srli_epi64(e, 58));
    q = _mm512_mul_epu32(q, _mm512_sub_epi64(_mm512_set1_epi64(1ll << sb), freq));
    *x = _mm512_add_epi64(_mm512_add_epi64(v, bias), q);
    return _mm512_cmpeq_epi64_mask(freq, _mm512_setzero_si512());
}

/* A step of all 16 lanes (x[0]: lanes 0-7, x[1]: 8-15), entries at indexes
 * idx of tab: the words of the lanes that put one out, in lane order, are
 * stored just below *wp.  Returns nonzero if a lane's entry has frequency
 * 0. */
T512 static inline int step16(__m512i x[2], const ckc_ans_esym *tab, __m512i idx, unsigned sb, uint8_t **wp)
{
    const __m512i lo32 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    __m512i lo = _mm512_i32gather_epi64(_mm512_castsi512_si256(idx), (const void *)tab, 8);
    __m512i hi = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(idx, 1), (const void *)tab, 8);
    __m512i x32 = _mm512_permutex2var_epi32(x[0], lo32, x[1]);
    __mmask8 out_lo, out_hi, bad = half_step(&x[0], lo, sb, &out_lo) | half_step(&x[1], hi, sb, &out_hi);
    __mmask16 out = _mm512_kunpackb(out_hi, out_lo);
    unsigned cnt = (unsigned)__builtin_popcount(out);
    __m256i words = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(out, x32));

    __asm__("" : "+v"(words)); /* keep the store a plain masked store (not a slow vpmovdw to memory) */
    *wp -= 2 * cnt;
    _mm256_mask_storeu_epi16(*wp, (__mmask16)((1u << cnt) - 1u), words);
    return bad != 0;
}

/* Classes of the 16 weights of the group whose first weight is at column
 * col, row row of the tensor. */
T512 static inline __m512i group_classes(const ckc_ans_plan *p, uint64_t col, uint64_t row)
{
    uint64_t C = p->ch.n_cols;
    uint32_t k[16];

    if (!p->cls)
        return _mm512_setzero_si512();
    if (col + 16 <= C) {
        if (p->ch.axis == CKC_ANS_AXIS_ROW)
            return _mm512_set1_epi32(p->cls[row]);
        return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p->cls + col)));
    }
    for (unsigned l = 0; l < 16; l++) {
        k[l] = p->cls[p->ch.axis == CKC_ANS_AXIS_COL ? col : row];
        if (++col == C) {
            col = 0;
            row++;
        }
    }
    return _mm512_loadu_si512(k);
}

T512 ckc_status ckc_ans_encode_avx512(const ckc_ans_plan *p, const uint16_t *w, uint64_t first, size_t g_end,
                                      uint32_t x[16], uint8_t **wp)
{
    unsigned M = p->ch.mbits;
    uint64_t C = p->ch.n_cols, i0 = first + g_end * 16, col = C ? i0 % C : 0, row = C ? i0 / C : 0;
    const ckc_ans_esym *man = p->man_enc, *exp = p->exp_enc;
    uint8_t *out = *wp; /* a local copy, which the stores through it cannot change */
    const __m512i low7 = _mm512_set1_epi32(0x7F);
    __m512i vx[2] = {_mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(const void *)x)),
                     _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(const void *)(x + 8)))};
    __m128i shift_m = _mm_cvtsi32_si128((int)(7 - M));

    for (size_t g = g_end; g-- > 0;) {
        __m512i wv, v, k, idx;
        if (C) { /* step back 16 weights */
            int64_t c = (int64_t)col - 16;
            for (; c < 0; c += (int64_t)C)
                row--;
            col = (uint64_t)c;
        }
        wv = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(w + g * 16)));
        v = _mm512_srli_epi32(wv, 7);
        k = group_classes(p, col, row);
        if (M) {
            idx = _mm512_add_epi32(_mm512_slli_epi32(v, 4), _mm512_srl_epi32(_mm512_and_si512(wv, low7), shift_m));
            step16(vx, man, idx, CKC_ANS_MAN_BITS, &out); /* refused below if not codable */
        }
        idx = _mm512_add_epi32(_mm512_slli_epi32(k, 9), v);
        if (step16(vx, exp, idx, CKC_ANS_EXP_BITS, &out))
            return CKC_ERR_ARG; /* not a symbol of the plan, or frequency 0 in its class */
    }
    _mm256_storeu_si256((__m256i *)(void *)x, _mm512_cvtepi64_epi32(vx[0]));
    _mm256_storeu_si256((__m256i *)(void *)(x + 8), _mm512_cvtepi64_epi32(vx[1]));
    *wp = out;
    return CKC_OK;
}

#else

ckc_status ckc_ans_encode_avx512(const ckc_ans_plan *p, const uint16_t *w, uint64_t first, size_t g_end,
                                 uint32_t x[16], uint8_t **wp)
{
    (void)p, (void)w, (void)first, (void)g_end, (void)x, (void)wp;
    return CKC_ERR_ARG; /* never called: ckc_ans_avx512_supported() is 0 */
}

#endif
