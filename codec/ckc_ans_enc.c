/*
 * ckc_ans_enc.c — encodes one chunk of a planned tensor (docs/format.md
 * §5.3): 16 initial states, the raw low mantissa bits, then the rANS words.
 *
 * rANS is last in, first out: the chunk is encoded from its last group of 16
 * weights to its first and, within a group, mantissas before sign+exponents
 * and lane 15 before lane 0, so that the decoder, going forward, decodes
 * each group's 16 sign+exponents (lanes 0..15) and then its 16 mantissas.
 * Words are written downwards from the end of dst and moved into place at
 * the end.
 */
#include "ckc_ans_internal.h"

size_t ckc_ans_chunk_bound(size_t n_weights)
{
    /* low bits take at most 7/8 byte a weight, and each weight renormalizes
     * at most once per step (two 16-bit words): format §5.3 rounds this to
     * 64 + 5n + 16 (R48) */
    return CKC_ANS_HDR_BYTES + 5 * n_weights + 16;
}

/* One rANS step.  Branch-free renormalization (whether a word goes out is
 * close to a coin toss): the word is always stored below *wp, which moves
 * only if it is kept; the store stays inside dst, as chunk_bound leaves a
 * weight's worth of room below the lowest the words can reach. */
static inline void put(uint32_t *x, const ckc_ans_esym *e, uint8_t **wp)
{
    uint32_t v = *x, q, out = v >= e->x_max;
    (*wp)[-2] = (uint8_t)v;
    (*wp)[-1] = (uint8_t)(v >> 8);
    *wp -= 2 * out;
    v >>= 16 * out;
    q = (uint32_t)(((uint64_t)v * e->rcp) >> 32) >> e->shift;
    *x = v + e->bias + q * e->cmpl;
}

/* LSB-first bit stream of the low 7-M bits of each weight. */
static void pack_low(const uint16_t *w, size_t n, unsigned b, uint8_t *dst)
{
    uint64_t acc = 0;
    unsigned nb = 0;
    size_t o = 0;

    if (b == 0)
        return;
    for (size_t j = 0; j < n; j++) {
        acc |= (uint64_t)(w[j] & ((1u << b) - 1u)) << nb;
        nb += b;
        while (nb >= 8) {
            dst[o++] = (uint8_t)acc;
            acc >>= 8;
            nb -= 8;
        }
    }
    if (nb)
        dst[o] = (uint8_t)acc;
}

static ckc_status encode_raw(const uint16_t *w, size_t n, uint8_t *dst, size_t cap, size_t *written)
{
    if (cap < 2 * n)
        return CKC_ERR_CAPACITY;
    for (size_t j = 0; j < n; j++) {
        dst[2 * j] = (uint8_t)w[j];
        dst[2 * j + 1] = (uint8_t)(w[j] >> 8);
    }
    *written = 2 * n;
    return CKC_OK;
}

ckc_status ckc_ans_encode_chunk(const ckc_ans_plan *p, const uint16_t *w, size_t n, uint64_t first,
                                uint8_t *dst, size_t capacity, size_t *written)
{
    unsigned M, A, axis;
    uint64_t C;
    size_t lowb, nbytes;
    uint32_t x[CKC_ANS_LANES];
    uint8_t *wp;

    if (!p || !written || (n && (!w || !dst)) || first % CKC_ANS_LANES)
        return CKC_ERR_ARG;
    if (p->ch.mode == CKC_ANS_RAW)
        return encode_raw(w, n, dst, capacity, written);
    if (capacity < ckc_ans_chunk_bound(n))
        return CKC_ERR_CAPACITY;
    M = p->ch.mbits;
    A = p->ch.n_syms;
    axis = p->ch.axis;
    C = p->ch.n_cols;
    lowb = ckc_ans_low_bytes(n, M);
    memset(dst + CKC_ANS_HDR_BYTES, 0, lowb);
    pack_low(w, n, 7 - M, dst + CKC_ANS_HDR_BYTES);
    for (unsigned l = 0; l < CKC_ANS_LANES; l++)
        x[l] = CKC_ANS_L;
    wp = dst + capacity;
    for (size_t g = (n + CKC_ANS_LANES - 1) / CKC_ANS_LANES; g-- > 0;) {
        size_t base = g * CKC_ANS_LANES, r = n - base < CKC_ANS_LANES ? n - base : CKC_ANS_LANES;
        uint16_t a[CKC_ANS_LANES];
        uint8_t k[CKC_ANS_LANES];
        uint64_t i0 = first + base, col = C ? i0 % C : 0, row = C ? i0 / C : 0;
        for (size_t l = 0; l < r; l++) {
            a[l] = p->sym_idx[w[base + l] >> 7];
            if (a[l] >= A)
                return CKC_ERR_ARG; /* not a symbol of the plan */
            k[l] = p->cls ? p->cls[axis == CKC_ANS_AXIS_COL ? col : row] : 0;
            if (C && ++col == C) {
                col = 0;
                row++;
            }
        }
        for (size_t l = r; l-- > 0 && M;)
            put(&x[l], &p->man_enc[a[l] * 16u + ((w[base + l] & 0x7Fu) >> (7 - M))], &wp);
        for (size_t l = r; l-- > 0;) {
            const ckc_ans_esym *e = &p->exp_enc[(size_t)k[l] * A + a[l]];
            if (!e->x_max)
                return CKC_ERR_ARG; /* frequency 0 in its class */
            put(&x[l], e, &wp);
        }
    }
    for (unsigned l = 0; l < CKC_ANS_LANES; l++)
        for (unsigned b = 0; b < 4; b++)
            dst[4 * l + b] = (uint8_t)(x[l] >> (8 * b));
    nbytes = (size_t)(dst + capacity - wp);
    memmove(dst + CKC_ANS_HDR_BYTES + lowb, wp, nbytes);
    *written = CKC_ANS_HDR_BYTES + lowb + nbytes;
    return CKC_OK;
}
