/*
 * ckc_ans_enc_x86.c — the archive encoder's vector loop: the 16 rANS states
 * of a chunk in two AVX-512 registers of eight 64-bit lanes (so that the
 * 64-bit products of the reciprocal division need no shuffling), a group of
 * 16 weights per iteration, from the chunk's last full group to its first:
 *   mantissa step  gather the packed entries man_enc[(w >> 7) * 16 + hi]
 *   exponent step  the same from exp_enc[class * 512 + (w >> 7)]
 * (an entry of frequency 0, in either step, is a weight the plan cannot
 * code: refused);
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
        int bad = 0;
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
            bad = step16(vx, man, idx, CKC_ANS_MAN_BITS, &out);
        }
        idx = _mm512_add_epi32(_mm512_slli_epi32(k, 9), v);
        if (step16(vx, exp, idx, CKC_ANS_EXP_BITS, &out) || bad)
            return CKC_ERR_ARG; /* not a symbol of the plan, or frequency 0 in its table */
    }
    _mm256_storeu_si256((__m256i *)(void *)x, _mm512_cvtepi64_epi32(vx[0]));
    _mm256_storeu_si256((__m256i *)(void *)(x + 8), _mm512_cvtepi64_epi32(vx[1]));
    *wp = out;
    return CKC_OK;
}

/* ---- AVX2: the same steps, the 16 states in four registers of four 64-bit
 * lanes.  AVX2 has no compress: the words of 8 lanes that put one out are
 * packed to the top of a 16-byte vector by a permutation made with pext
 * (their lane numbers, in order, shifted up past the lanes that do not), so
 * that one 16-byte store just below the words already written puts them in
 * lane order right under them (lanes 8-15 first, then 0-7 below), as the
 * scalar loop, lane 15 first, downwards, leaves them; what the store writes
 * below the new words is overwritten later or left out of the stream (the
 * chunk bound leaves room for it: see below). ---- */

#define T256 __attribute__((target("avx2,bmi,bmi2,popcnt")))

/* A quarter of a step: lanes 4i..4i+3 with entries e (scale 2^sb).  Returns
 * the lanes that put a word out (bits 0-3); adds frequency-0 lanes to *bad. */
T256 static inline unsigned quarter(__m256i *x, __m256i e, unsigned sb, __m256i *bad)
{
    const __m256i m13 = _mm256_set1_epi64x(0x1FFF);
    __m256i v = *x, freq = _mm256_and_si256(_mm256_srli_epi64(e, 45), m13);
    __m256i bias = _mm256_and_si256(_mm256_srli_epi64(e, 32), m13), q;
    __m256i keep = _mm256_cmpgt_epi64(_mm256_sll_epi64(freq, _mm_cvtsi32_si128((int)(31 - sb))), v); /* < 2^32: signed is exact */
    unsigned out = ~(unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(keep)) & 0xFu;

    v = _mm256_blendv_epi8(_mm256_srli_epi64(v, 16), v, keep);
    q = _mm256_srlv_epi64(_mm256_srli_epi64(_mm256_mul_epu32(v, e), 32), _mm256_srli_epi64(e, 58));
    q = _mm256_mul_epu32(q, _mm256_sub_epi64(_mm256_set1_epi64x(1ll << sb), freq));
    *x = _mm256_add_epi64(_mm256_add_epi64(v, bias), q);
    *bad = _mm256_or_si256(*bad, _mm256_cmpeq_epi64(freq, _mm256_setzero_si256()));
    return out;
}

/* The low 16 bits of the 8 states in a (lanes 0-3) and b (4-7), as 32-bit
 * lanes 0-7. */
T256 static inline __m256i low_words8(__m256i a, __m256i b)
{
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    __m256i v = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(a, even), _mm256_permutevar8x32_epi32(b, even), 0xF0);
    return _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
}

/* Stores the words of the lanes of w (8 words in 32-bit lanes) whose bit is
 * set in m (8 bits), in lane order, just below *wp, and moves *wp down over
 * them; the 16-byte store also writes the 16 - 2 * popcount(m) bytes below
 * them. */
T256 static inline void put_words8(__m256i w, unsigned m, uint8_t **wp)
{
    unsigned cnt = (unsigned)__builtin_popcount(m);
    uint64_t ranks = _pext_u64(0x0706050403020100ull, _pdep_u64(m, 0x0101010101010101ull) * 0xFF);
    __m256i perm;

    ranks = ranks << (4 * (8 - cnt)) << (4 * (8 - cnt)); /* to the top bytes (two shifts: 64 when cnt = 0) */
    perm = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)ranks));
    w = _mm256_permutevar8x32_epi32(w, perm);
    _mm_storeu_si128((__m128i *)(void *)(*wp - 16),
                     _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
    *wp -= 2 * cnt;
}

/* A step of all 16 lanes, entries at indexes idx[0] (lanes 0-7) and idx[1]
 * (8-15) of tab. */
T256 static inline void step16_avx2(__m256i x[4], const ckc_ans_esym *tab, const __m256i idx[2], unsigned sb,
                                    uint8_t **wp, __m256i *bad)
{
    const long long *t = (const long long *)(const void *)tab;
    __m256i e0 = _mm256_i32gather_epi64(t, _mm256_castsi256_si128(idx[0]), 8);
    __m256i e1 = _mm256_i32gather_epi64(t, _mm256_extracti128_si256(idx[0], 1), 8);
    __m256i e2 = _mm256_i32gather_epi64(t, _mm256_castsi256_si128(idx[1]), 8);
    __m256i e3 = _mm256_i32gather_epi64(t, _mm256_extracti128_si256(idx[1], 1), 8);
    __m256i lo = low_words8(x[0], x[1]), hi = low_words8(x[2], x[3]); /* the words, before the step */
    unsigned out_lo = quarter(&x[0], e0, sb, bad) | quarter(&x[1], e1, sb, bad) << 4;
    unsigned out_hi = quarter(&x[2], e2, sb, bad) | quarter(&x[3], e3, sb, bad) << 4;

    put_words8(hi, out_hi, wp); /* lanes 8-15 above lanes 0-7 */
    put_words8(lo, out_lo, wp);
}

/* Classes of the 16 weights from column col, row row, as two vectors of 8. */
T256 static inline void group_classes_avx2(const ckc_ans_plan *p, uint64_t col, uint64_t row, __m256i k[2])
{
    uint64_t C = p->ch.n_cols;
    uint32_t kk[16];

    if (!p->cls) {
        k[0] = k[1] = _mm256_setzero_si256();
        return;
    }
    if (col + 16 <= C && p->ch.axis == CKC_ANS_AXIS_ROW) {
        k[0] = k[1] = _mm256_set1_epi32(p->cls[row]);
        return;
    }
    if (col + 16 <= C) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p->cls + col));
        k[0] = _mm256_cvtepu8_epi32(b);
        k[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8));
        return;
    }
    for (unsigned l = 0; l < 16; l++) {
        kk[l] = p->cls[p->ch.axis == CKC_ANS_AXIS_COL ? col : row];
        if (++col == C) {
            col = 0;
            row++;
        }
    }
    k[0] = _mm256_loadu_si256((const __m256i *)(const void *)kk);
    k[1] = _mm256_loadu_si256((const __m256i *)(const void *)(kk + 8));
}

T256 ckc_status ckc_ans_encode_avx2(const ckc_ans_plan *p, const uint16_t *w, uint64_t first, size_t g_end,
                                    uint32_t x[16], uint8_t **wp)
{
    unsigned M = p->ch.mbits;
    uint64_t C = p->ch.n_cols, i0 = first + g_end * 16, col = C ? i0 % C : 0, row = C ? i0 / C : 0;
    const __m256i low7 = _mm256_set1_epi32(0x7F);
    const __m128i shift_m = _mm_cvtsi32_si128((int)(7 - M));
    __m256i vx[4], bad = _mm256_setzero_si256();
    uint8_t *out = *wp; /* a local copy, which the stores through it cannot change */

    for (unsigned i = 0; i < 4; i++)
        vx[i] = _mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)(const void *)(x + 4 * i)));
    for (size_t g = g_end; g-- > 0;) {
        __m256i wv[2], v[2], k[2], idx[2];
        if (C) { /* step back 16 weights */
            int64_t c = (int64_t)col - 16;
            for (; c < 0; c += (int64_t)C)
                row--;
            col = (uint64_t)c;
        }
        for (unsigned h = 0; h < 2; h++) {
            wv[h] = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(w + g * 16 + 8 * h)));
            v[h] = _mm256_srli_epi32(wv[h], 7);
        }
        group_classes_avx2(p, col, row, k);
        if (M) {
            for (unsigned h = 0; h < 2; h++)
                idx[h] = _mm256_add_epi32(_mm256_slli_epi32(v[h], 4),
                                          _mm256_srl_epi32(_mm256_and_si256(wv[h], low7), shift_m));
            step16_avx2(vx, p->man_enc, idx, CKC_ANS_MAN_BITS, &out, &bad); /* refused below if not codable */
        }
        for (unsigned h = 0; h < 2; h++)
            idx[h] = _mm256_add_epi32(_mm256_slli_epi32(k[h], 9), v[h]);
        step16_avx2(vx, p->exp_enc, idx, CKC_ANS_EXP_BITS, &out, &bad);
        if (!_mm256_testz_si256(bad, bad))
            return CKC_ERR_ARG; /* not a symbol of the plan, or frequency 0 in its table */
    }
    for (unsigned i = 0; i < 4; i++) {
        __m256i d = _mm256_permutevar8x32_epi32(vx[i], _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
        _mm_storeu_si128((__m128i *)(void *)(x + 4 * i), _mm256_castsi256_si128(d));
    }
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

ckc_status ckc_ans_encode_avx2(const ckc_ans_plan *p, const uint16_t *w, uint64_t first, size_t g_end,
                               uint32_t x[16], uint8_t **wp)
{
    (void)p, (void)w, (void)first, (void)g_end, (void)x, (void)wp;
    return CKC_ERR_ARG; /* never called: ckc_avx2_supported() is 0 */
}

#endif
