/*
 * ckc_ans_x86.c — vector loops of the archive decoder: the 16 rANS states
 * of a chunk in one AVX-512 register (or two AVX2 registers), one group of
 * 16 weights per step:
 *   sign+exponent  slot = x & 4095; gather exp_dec[class << 12 | slot];
 *                  x = freq * (x >> 12) + bias
 *   renormalize    lanes with x < L take the next words in lane order: the
 *                  words are zero-extended to 32 bits and spread into those
 *                  lanes (vpexpandd; AVX2: a permutation made with pdep)
 *   mantissa       gather man_dec[a << 8 | (x & 255)], the same step with
 *                  scale 2^8; the entry's top half is the weight's high bits
 *   low bits       OR'd in from the chunk's raw low bits (a byte shuffle and
 *                  a shift a lane, tables.low_*): work off the dependency
 *                  chain, where it costs next to nothing, instead of a pass
 *                  over the chunk afterwards
 * Each step reads at most 32 words, so a group runs only while 32 remain;
 * ckc_ans_dec.c's scalar loop finishes the chunk with checked reads.  The
 * arithmetic is the scalar loop's, lane for lane, so the results are
 * bit-identical (tests/unit/test_ans.c compares them).
 *
 * Classes of a group: one 16-byte load of the column classes when the
 * group's columns do not wrap, one broadcast for the row axis when the group
 * lies in one row, else looked up one by one.
 */
#include "ckc_ans_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,popcnt")))
#define T256 __attribute__((target("avx2,bmi,bmi2,popcnt")))
#define INL __attribute__((always_inline)) inline

int ckc_ans_avx512_supported(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* Column and row of the next group's first weight (when there are classes),
 * kept without a division per group. */
typedef struct {
    uint64_t col, row;
} gpos;

static gpos gpos_at(const ckc_ans_tables *t, uint64_t i)
{
    gpos g = {0, 0};
    if (t->cls) {
        g.col = i % t->n_cols;
        g.row = i / t->n_cols;
    }
    return g;
}

static INL void gpos_next(const ckc_ans_tables *t, gpos *g)
{
    if (!t->cls)
        return;
    g->col += 16;
    while (g->col >= t->n_cols) {
        g->col -= t->n_cols;
        g->row++;
    }
}

/* The classes of the 16 weights from g into k[16] (t->cls is set). */
static void group_classes(const ckc_ans_tables *t, gpos g, uint8_t k[16])
{
    uint64_t C = t->n_cols, col = g.col, row = g.row;
    for (unsigned l = 0; l < 16; l++) {
        k[l] = t->cls[t->axis == CKC_ANS_AXIS_COL ? col : row];
        if (++col == C) {
            col = 0;
            row++;
        }
    }
}

T512 static INL __m512i classes512(const ckc_ans_tables *t, gpos g)
{
    uint8_t k[16];
    if (!t->cls)
        return _mm512_setzero_si512();
    if (g.col + 16 <= t->n_cols) {
        if (t->axis == CKC_ANS_AXIS_COL)
            return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(t->cls + g.col)));
        return _mm512_set1_epi32(t->cls[g.row]);
    }
    group_classes(t, g, k);
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)k));
}

T512 static INL __m512i renorm512(__m512i x, const uint8_t *words, size_t *ps)
{
    __mmask16 m = _mm512_cmplt_epu32_mask(x, _mm512_set1_epi32((int)CKC_ANS_L));
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(words + 2 * *ps)));
    w = _mm512_maskz_expand_epi32(m, w);
    *ps += (size_t)__builtin_popcount(m);
    return _mm512_mask_mov_epi32(x, m, _mm512_or_si512(_mm512_slli_epi32(x, 16), w));
}

/* The raw low bits of the group whose bits start at low (t->low_*), one a
 * 32-bit lane.  The 16-byte load stays within the chunk: the words follow
 * the low bits, and a group runs only while 32 of them remain. */
T512 static INL __m512i low512(const ckc_ans_tables *t, const uint8_t *low)
{
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)low));
    v = _mm512_shuffle_epi8(v, _mm512_loadu_si512(t->low_ctl));
    return _mm512_and_si512(_mm512_srlv_epi32(v, _mm512_loadu_si512(t->low_sh)),
                            _mm512_set1_epi32((int)t->low_mask));
}

/* One group of 16 weights of one stream, in two halves that the loops
 * below interleave across streams (one stream's sign+exponent step, then
 * the next's, then the mantissa steps: each gather has the other streams'
 * work to overlap it).  exp512: states X, next word *ps, classes from g;
 * *a gets each lane's mantissa table row. */
T512 static INL __m512i exp512(const ckc_ans_tables *t, __m512i X, const uint8_t *words, size_t *ps, gpos g,
                                __m512i *a)
{
    const __m512i m12 = _mm512_set1_epi32(0xFFF), m8 = _mm512_set1_epi32(0xFF);
    __m512i kb = _mm512_slli_epi32(classes512(t, g), CKC_ANS_EXP_BITS);
    __m512i q = _mm512_srli_epi32(X, CKC_ANS_EXP_BITS);
    __m512i e = _mm512_i32gather_epi32(_mm512_add_epi32(kb, _mm512_and_si512(X, m12)), t->exp_dec, 4);
    X = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_srli_epi32(e, 20), q),
                         _mm512_add_epi32(q, _mm512_and_si512(_mm512_srli_epi32(e, 8), m12)));
    *a = _mm512_slli_epi32(_mm512_and_si512(e, m8), CKC_ANS_MAN_BITS);
    return renorm512(X, words, ps);
}

/* The mantissa half: row a, raw low bits from low; the 16 weights to out. */
T512 static INL __m512i man512(const ckc_ans_tables *t, __m512i X, __m512i a, const uint8_t *words, size_t *ps,
                                const uint8_t *low, uint16_t *out)
{
    const __m512i m8 = _mm512_set1_epi32(0xFF);
    __m512i q, e2;
    if (t->mbits) {
        q = _mm512_srli_epi32(X, CKC_ANS_MAN_BITS);
        e2 = _mm512_i32gather_epi32(_mm512_add_epi32(a, _mm512_and_si512(X, m8)), t->man_dec, 4);
        X = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(e2, m8), q),
                             _mm512_add_epi32(q, _mm512_and_si512(_mm512_srli_epi32(e2, 8), m8)));
        X = renorm512(X, words, ps);
    } else {
        e2 = _mm512_i32gather_epi32(a, t->man_dec, 4);
    }
    e2 = _mm512_or_si512(_mm512_srli_epi32(e2, 16), low512(t, low));
    _mm256_storeu_si256((__m256i *)out, _mm512_cvtepi32_epi16(e2));
    return X;
}

/* A stream can take a vector group: 16 weights left and the 32 words a
 * group may read. */
static INL int can_group(const ckc_ans_stream *s, size_t ps, size_t j)
{
    return j + 16 <= s->n && s->n_words - ps >= 32;
}

/* One stream's loop state, kept in registers (each run below names its
 * streams, so the compiler has no array to keep in memory). */
typedef struct {
    ckc_ans_stream *s;
    size_t ps, j;
    gpos g;
} cursor;

static INL cursor cur_at(ckc_ans_stream *s)
{
    cursor c = {s, s->pos, s->j, gpos_at(s->t, s->first + s->j)};
    return c;
}

static INL int cur_can(const cursor *c) { return can_group(c->s, c->ps, c->j); }

static INL void cur_done(cursor *c)
{
    c->s->pos = c->ps;
    c->s->j = c->j;
}

/* Where the raw low bits of c's next group start. */
static INL const uint8_t *cur_low(const cursor *c) { return c->s->low + c->j / 16 * c->s->t->low_gbytes; }

T512 static INL void exp_half(cursor *c, __m512i *X, __m512i *a)
{
    *X = exp512(c->s->t, *X, c->s->words, &c->ps, c->g, a);
}

T512 static INL void man_half(cursor *c, __m512i *X, __m512i a)
{
    *X = man512(c->s->t, *X, a, c->s->words, &c->ps, cur_low(c), c->s->out + c->j);
    c->j += 16;
    gpos_next(c->s->t, &c->g);
}

/* 1, 2 or 4 streams interleaved, until one of them cannot take a group. */
T512 static void run512_1(ckc_ans_stream *s)
{
    cursor a = cur_at(s);
    __m512i Xa = _mm512_loadu_si512(s[0].x), Aa;
    while (cur_can(&a)) {
        exp_half(&a, &Xa, &Aa);
        man_half(&a, &Xa, Aa);
    }
    _mm512_storeu_si512(s[0].x, Xa);
    cur_done(&a);
}

T512 static void run512_2(ckc_ans_stream *s)
{
    cursor a = cur_at(s), b = cur_at(s + 1);
    __m512i Xa = _mm512_loadu_si512(s[0].x), Xb = _mm512_loadu_si512(s[1].x), Aa, Ab;
    while (cur_can(&a) && cur_can(&b)) {
        exp_half(&a, &Xa, &Aa);
        exp_half(&b, &Xb, &Ab);
        man_half(&a, &Xa, Aa);
        man_half(&b, &Xb, Ab);
    }
    _mm512_storeu_si512(s[0].x, Xa);
    _mm512_storeu_si512(s[1].x, Xb);
    cur_done(&a);
    cur_done(&b);
}

T512 static void run512_4(ckc_ans_stream *s)
{
    cursor a = cur_at(s), b = cur_at(s + 1), c = cur_at(s + 2), d = cur_at(s + 3);
    __m512i Xa = _mm512_loadu_si512(s[0].x), Xb = _mm512_loadu_si512(s[1].x), Xc = _mm512_loadu_si512(s[2].x),
            Xd = _mm512_loadu_si512(s[3].x), Aa, Ab, Ac, Ad;
    while (cur_can(&a) && cur_can(&b) && cur_can(&c) && cur_can(&d)) {
        exp_half(&a, &Xa, &Aa);
        exp_half(&b, &Xb, &Ab);
        exp_half(&c, &Xc, &Ac);
        exp_half(&d, &Xd, &Ad);
        man_half(&a, &Xa, Aa);
        man_half(&b, &Xb, Ab);
        man_half(&c, &Xc, Ac);
        man_half(&d, &Xd, Ad);
    }
    _mm512_storeu_si512(s[0].x, Xa);
    _mm512_storeu_si512(s[1].x, Xb);
    _mm512_storeu_si512(s[2].x, Xc);
    _mm512_storeu_si512(s[3].x, Xd);
    cur_done(&a);
    cur_done(&b);
    cur_done(&c);
    cur_done(&d);
}

T512 void ckc_ans_decode_avx512(ckc_ans_stream *s, size_t count)
{
    size_t i = 0;
    for (; i + 4 <= count; i += 4)
        run512_4(s + i);
    for (; i + 2 <= count; i += 2)
        run512_2(s + i);
    for (i = 0; i < count; i++) /* what an interleaved run left (a stream ended first) */
        run512_1(s + i);
}

/* ---- AVX2: two registers of 8 states ------------------------------------- */

T256 static INL __m256i renorm256(__m256i x, const uint8_t *words, size_t *ps)
{
    __m256i lt = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)CKC_ANS_L), x); /* states < 2^31: signed ok */
    unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(lt));
    uint64_t ranks = _pdep_u64(0x0706050403020100ull, _pdep_u64(m, 0x0101010101010101ull) * 0xFF);
    __m256i perm = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)ranks));
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(words + 2 * *ps)));
    w = _mm256_permutevar8x32_epi32(w, perm);
    *ps += (size_t)__builtin_popcount(m);
    return _mm256_blendv_epi8(x, _mm256_or_si256(_mm256_slli_epi32(x, 16), w), lt);
}

T256 static INL __m256i exp_step256(const ckc_ans_tables *t, __m256i x, __m256i kb, __m256i *a)
{
    const __m256i m12 = _mm256_set1_epi32(0xFFF);
    __m256i q = _mm256_srli_epi32(x, CKC_ANS_EXP_BITS);
    __m256i e = _mm256_i32gather_epi32((const int *)t->exp_dec, _mm256_add_epi32(kb, _mm256_and_si256(x, m12)), 4);
    *a = _mm256_slli_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0xFF)), CKC_ANS_MAN_BITS);
    return _mm256_add_epi32(_mm256_mullo_epi32(_mm256_srli_epi32(e, 20), q),
                            _mm256_add_epi32(q, _mm256_and_si256(_mm256_srli_epi32(e, 8), m12)));
}

T256 static INL __m256i man_step256(const ckc_ans_tables *t, __m256i x, __m256i a, __m256i *e2)
{
    const __m256i m8 = _mm256_set1_epi32(0xFF);
    __m256i q = _mm256_srli_epi32(x, CKC_ANS_MAN_BITS);
    if (!t->mbits) {
        *e2 = _mm256_i32gather_epi32((const int *)t->man_dec, a, 4);
        return x;
    }
    *e2 = _mm256_i32gather_epi32((const int *)t->man_dec, _mm256_add_epi32(a, _mm256_and_si256(x, m8)), 4);
    return _mm256_add_epi32(_mm256_mullo_epi32(_mm256_and_si256(*e2, m8), q),
                            _mm256_add_epi32(q, _mm256_and_si256(_mm256_srli_epi32(*e2, 8), m8)));
}

T256 static INL __m256i classes256(const ckc_ans_tables *t, gpos g, __m256i *hi)
{
    uint8_t k[16];
    if (!t->cls) {
        *hi = _mm256_setzero_si256();
        return *hi;
    }
    if (g.col + 16 <= t->n_cols && t->axis == CKC_ANS_AXIS_ROW) {
        *hi = _mm256_set1_epi32((int)t->cls[g.row] << CKC_ANS_EXP_BITS);
        return *hi;
    }
    if (g.col + 16 <= t->n_cols)
        memcpy(k, t->cls + g.col, 16);
    else
        group_classes(t, g, k);
    *hi = _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(k + 8))), CKC_ANS_EXP_BITS);
    return _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)k)), CKC_ANS_EXP_BITS);
}

/* low512 in two halves: weights 0-7 of the group, or 8-15 (half 1). */
T256 static INL __m256i low256(const ckc_ans_tables *t, __m256i v, unsigned half)
{
    v = _mm256_shuffle_epi8(v, _mm256_loadu_si256((const __m256i *)(t->low_ctl + 32 * half)));
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_loadu_si256((const __m256i *)(t->low_sh + 8 * half))),
                            _mm256_set1_epi32((int)t->low_mask));
}

/* One group of one stream in two halves, as exp512/man512: states X[0]
 * (lanes 0-7) and X[1] (8-15); the words of each renormalisation go to
 * lanes 0-7 first, then 8-15. */
T256 static INL void exp256(const ckc_ans_tables *t, __m256i X[2], const uint8_t *words, size_t *ps, gpos g,
                            __m256i a[2])
{
    __m256i k1, k0 = classes256(t, g, &k1);
    X[0] = renorm256(exp_step256(t, X[0], k0, &a[0]), words, ps);
    X[1] = renorm256(exp_step256(t, X[1], k1, &a[1]), words, ps);
}

T256 static INL void man256(const ckc_ans_tables *t, __m256i X[2], const __m256i a[2], const uint8_t *words,
                            size_t *ps, const uint8_t *low, uint16_t *out)
{
    __m256i e0, e1, v;
    X[0] = man_step256(t, X[0], a[0], &e0);
    if (t->mbits)
        X[0] = renorm256(X[0], words, ps);
    X[1] = man_step256(t, X[1], a[1], &e1);
    if (t->mbits)
        X[1] = renorm256(X[1], words, ps);
    v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)low));
    e0 = _mm256_or_si256(_mm256_srli_epi32(e0, 16), low256(t, v, 0));
    e1 = _mm256_or_si256(_mm256_srli_epi32(e1, 16), low256(t, v, 1));
    v = _mm256_packus_epi32(e0, e1);
    v = _mm256_permute4x64_epi64(v, 0xD8);
    _mm256_storeu_si256((__m256i *)out, v);
}

T256 static INL void exp_half256(cursor *c, __m256i X[2], __m256i a[2])
{
    exp256(c->s->t, X, c->s->words, &c->ps, c->g, a);
}

T256 static INL void man_half256(cursor *c, __m256i X[2], const __m256i a[2])
{
    man256(c->s->t, X, a, c->s->words, &c->ps, cur_low(c), c->s->out + c->j);
    c->j += 16;
    gpos_next(c->s->t, &c->g);
}

T256 static INL void load256(const ckc_ans_stream *s, __m256i X[2])
{
    X[0] = _mm256_loadu_si256((const __m256i *)s->x);
    X[1] = _mm256_loadu_si256((const __m256i *)(s->x + 8));
}

T256 static INL void store256(ckc_ans_stream *s, const __m256i X[2])
{
    _mm256_storeu_si256((__m256i *)s->x, X[0]);
    _mm256_storeu_si256((__m256i *)(s->x + 8), X[1]);
}

T256 static void run256_1(ckc_ans_stream *s)
{
    cursor a = cur_at(s);
    __m256i Xa[2], Aa[2];
    load256(s, Xa);
    while (cur_can(&a)) {
        exp_half256(&a, Xa, Aa);
        man_half256(&a, Xa, Aa);
    }
    store256(s, Xa);
    cur_done(&a);
}

T256 static void run256_2(ckc_ans_stream *s)
{
    cursor a = cur_at(s), b = cur_at(s + 1);
    __m256i Xa[2], Xb[2], Aa[2], Ab[2];
    load256(s, Xa);
    load256(s + 1, Xb);
    while (cur_can(&a) && cur_can(&b)) {
        exp_half256(&a, Xa, Aa);
        exp_half256(&b, Xb, Ab);
        man_half256(&a, Xa, Aa);
        man_half256(&b, Xb, Ab);
    }
    store256(s, Xa);
    store256(s + 1, Xb);
    cur_done(&a);
    cur_done(&b);
}

T256 static void run256_4(ckc_ans_stream *s)
{
    cursor a = cur_at(s), b = cur_at(s + 1), c = cur_at(s + 2), d = cur_at(s + 3);
    __m256i Xa[2], Xb[2], Xc[2], Xd[2], Aa[2], Ab[2], Ac[2], Ad[2];
    load256(s, Xa);
    load256(s + 1, Xb);
    load256(s + 2, Xc);
    load256(s + 3, Xd);
    while (cur_can(&a) && cur_can(&b) && cur_can(&c) && cur_can(&d)) {
        exp_half256(&a, Xa, Aa);
        exp_half256(&b, Xb, Ab);
        exp_half256(&c, Xc, Ac);
        exp_half256(&d, Xd, Ad);
        man_half256(&a, Xa, Aa);
        man_half256(&b, Xb, Ab);
        man_half256(&c, Xc, Ac);
        man_half256(&d, Xd, Ad);
    }
    store256(s, Xa);
    store256(s + 1, Xb);
    store256(s + 2, Xc);
    store256(s + 3, Xd);
    cur_done(&a);
    cur_done(&b);
    cur_done(&c);
    cur_done(&d);
}

T256 void ckc_ans_decode_avx2(ckc_ans_stream *s, size_t count)
{
    size_t i = 0;
    for (; i + 4 <= count; i += 4)
        run256_4(s + i);
    for (; i + 2 <= count; i += 2)
        run256_2(s + i);
    for (i = 0; i < count; i++)
        run256_1(s + i);
}

#else /* not x86-64 */

int ckc_ans_avx512_supported(void) { return 0; }

void ckc_ans_decode_avx512(ckc_ans_stream *s, size_t count) { (void)s, (void)count; }
void ckc_ans_decode_avx2(ckc_ans_stream *s, size_t count) { (void)s, (void)count; }
#endif
