/*
 * ckc_ans_enc.c — encodes one chunk of a planned tensor (docs/format.md
 * §5.3): 16 initial states, the raw low mantissa bits, then the rANS words.
 *
 * rANS is last in, first out: the chunk is encoded from its last group of 16
 * weights to its first and, within a group, mantissas before sign+exponents
 * and lane 15 before lane 0, so that the decoder, going forward, decodes
 * each group's 16 sign+exponents (lanes 0..15) and then its 16 mantissas.
 * Words are written downwards from the end of dst and moved into place at
 * the end.  The 16 lanes of a group are independent but for the order of
 * their words, so the vector encoders (ckc_ans_enc_x86.c: AVX-512, AVX2,
 * chosen at run time) do a step of all 16 in one go and give the same
 * bytes.  A weight whose table entry has frequency 0 (a sign+exponent not
 * in the plan or not in its class, mantissa bits its symbol never had) is
 * refused: the plan cannot code it.
 */
#include "ckc_ans_internal.h"

size_t ckc_ans_chunk_bound(size_t n_weights)
{
    /* low bits take at most 7/8 byte a weight, and each weight renormalizes
     * at most once per step (two 16-bit words): format §5.3 rounds this to
     * 64 + 5n + 16 (R48) */
    return CKC_ANS_HDR_BYTES + 5 * n_weights + 16;
}

/* One rANS step with a table of scale 2^sb.  Branch-free renormalization
 * (whether a word goes out is close to a coin toss): the word is always
 * stored below *wp, which moves only if it is kept; the store stays inside
 * dst, as chunk_bound leaves a weight's worth of room below the lowest the
 * words can reach. */
static inline void put(uint32_t *x, ckc_ans_esym e, unsigned sb, uint8_t **wp)
{
    uint32_t v = *x, q, freq = CKC_ANS_ESYM_FREQ(e), out = v >= freq << (31 - sb);
    uint16_t word = (uint16_t)v; /* little-endian host */
    memcpy(*wp - 2, &word, 2);
    *wp -= 2 * out;
    v >>= 16 * out;
    q = (uint32_t)(((uint64_t)v * (uint32_t)e) >> 32) >> CKC_ANS_ESYM_SHIFT(e);
    *x = v + CKC_ANS_ESYM_BIAS(e) + q * ((1u << sb) - freq);
}

/* The low b bits of each of the 4 weights (host order, little-endian) in
 * q, packed LSB first into 4b bits. */
static inline uint64_t pack4(uint64_t q, unsigned b)
{
    q &= ((1ull << b) - 1) * 0x0001000100010001ull;
    q = (q | q >> (16 - b)) & (((1ull << 2 * b) - 1) * 0x0000000100000001ull);
    return (q | q >> (32 - 2 * b)) & ((1ull << 4 * b) - 1);
}

/* LSB-first bit stream of the low b bits of each weight: 8 weights make b
 * bytes, written with an 8-byte store (dst has room for 8 bytes past the
 * stream: the words lie further up, format §5.3's bound). */
static inline __attribute__((always_inline)) void pack_low_b(const uint16_t *w, size_t n, unsigned b,
                                                              uint8_t *dst)
{
    uint64_t acc = 0, q[2];
    size_t j = 0;
    unsigned nb = 0;

    for (; j + 8 <= n; j += 8, dst += b) {
        memcpy(q, w + j, sizeof q);
        q[0] = pack4(q[0], b) | pack4(q[1], b) << (4 * b);
        memcpy(dst, q, 8);
    }
    for (; j < n; j++) {
        acc |= (uint64_t)(w[j] & ((1u << b) - 1u)) << nb;
        nb += b;
    }
    for (; nb > 0; nb = nb > 8 ? nb - 8 : 0, acc >>= 8)
        *dst++ = (uint8_t)acc;
}

static void pack_low(const uint16_t *w, size_t n, unsigned b, uint8_t *dst)
{
    switch (b) { /* constant shifts in each */
    case 3: pack_low_b(w, n, 3, dst); break;
    case 4: pack_low_b(w, n, 4, dst); break;
    case 5: pack_low_b(w, n, 5, dst); break;
    case 6: pack_low_b(w, n, 6, dst); break;
    case 7: pack_low_b(w, n, 7, dst); break;
    default: break; /* b = 7 - M is 3..7 */
    }
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

/* Scalar encode of the r (<= 16) weights wg, the first at column col, row
 * row of the tensor. */
static ckc_status encode_group(const ckc_ans_plan *p, const uint16_t *wg, size_t r, uint64_t col, uint64_t row,
                               uint32_t x[CKC_ANS_LANES], uint8_t **wp)
{
    unsigned M = p->ch.mbits;
    uint64_t C = p->ch.n_cols;
    const ckc_ans_esym *man = p->man_enc;
    ckc_ans_esym ex[CKC_ANS_LANES], mx[CKC_ANS_LANES];
    uint8_t *out = *wp; /* a local copy, which the stores through it cannot change */

    if (!p->cls || (p->ch.axis == CKC_ANS_AXIS_ROW && col + r <= C)) { /* one class for the group */
        const ckc_ans_esym *tab = p->exp_enc + (p->cls ? (size_t)p->cls[row] * 512 : 0);
        for (size_t l = 0; l < r; l++)
            ex[l] = tab[wg[l] >> 7];
    } else {
        for (size_t l = 0; l < r; l++) {
            unsigned k = p->cls[p->ch.axis == CKC_ANS_AXIS_COL ? col : row];
            ex[l] = p->exp_enc[(size_t)k * 512 + (wg[l] >> 7)];
            if (++col == C) {
                col = 0;
                row++;
            }
        }
    }
    for (size_t l = 0; l < r; l++) {
        mx[l] = M ? man[(wg[l] >> 7) * 16u + ((wg[l] & 0x7Fu) >> (7 - M))] : 1ull << 45;
        if (!CKC_ANS_ESYM_FREQ(ex[l]) || !CKC_ANS_ESYM_FREQ(mx[l]))
            return CKC_ERR_ARG; /* not a symbol of the plan, or frequency 0 in its table */
    }
    for (size_t l = r; l-- > 0 && M;)
        put(&x[l], mx[l], CKC_ANS_MAN_BITS, &out);
    for (size_t l = r; l-- > 0;)
        put(&x[l], ex[l], CKC_ANS_EXP_BITS, &out);
    *wp = out;
    return CKC_OK;
}

/* Scalar encode of the chunk's full groups g_end-1 down to 0 (w: the
 * chunk's first weight, tensor weight `first`). */
static ckc_status encode_groups(const ckc_ans_plan *p, const uint16_t *w, uint64_t first, size_t g_end,
                                uint32_t x[CKC_ANS_LANES], uint8_t **wp)
{
    uint64_t C = p->ch.n_cols, i0 = first + g_end * CKC_ANS_LANES, col = C ? i0 % C : 0, row = C ? i0 / C : 0;
    ckc_status st = CKC_OK;

    for (size_t g = g_end; st == CKC_OK && g-- > 0;) {
        if (C) { /* step back 16 weights */
            int64_t c = (int64_t)col - CKC_ANS_LANES;
            for (; c < 0; c += (int64_t)C)
                row--;
            col = (uint64_t)c;
        }
        st = encode_group(p, w + g * CKC_ANS_LANES, CKC_ANS_LANES, col, row, x, wp);
    }
    return st;
}

static int use_avx512(ckc_impl impl)
{
    return (impl == CKC_IMPL_AUTO || impl == CKC_IMPL_AVX512) && ckc_ans_avx512_supported();
}

static int use_avx2(ckc_impl impl)
{
    return (impl == CKC_IMPL_AVX2 || (impl == CKC_IMPL_AUTO && !ckc_ans_avx512_supported())) &&
           ckc_avx2_supported();
}

ckc_status ckc_ans_encode_chunk_impl(ckc_impl impl, const ckc_ans_plan *p, const uint16_t *w, size_t n,
                                     uint64_t first, uint8_t *dst, size_t capacity, size_t *written)
{
    size_t lowb, nbytes, full = n / CKC_ANS_LANES;
    uint32_t x[CKC_ANS_LANES];
    uint8_t *wp;
    ckc_status st = CKC_OK;

    if (!p || !written || (n && (!w || !dst)) || first % CKC_ANS_LANES)
        return CKC_ERR_ARG;
    if (p->ch.mode == CKC_ANS_RAW)
        return encode_raw(w, n, dst, capacity, written);
    if (capacity < ckc_ans_chunk_bound(n))
        return CKC_ERR_CAPACITY;
    for (unsigned l = 0; l < CKC_ANS_LANES; l++)
        x[l] = CKC_ANS_L;
    wp = dst + capacity;
    if (n % CKC_ANS_LANES) {
        uint64_t C = p->ch.n_cols, i0 = first + full * CKC_ANS_LANES;
        st = encode_group(p, w + full * CKC_ANS_LANES, n % CKC_ANS_LANES, C ? i0 % C : 0, C ? i0 / C : 0, x, &wp);
    }
    if (st == CKC_OK && use_avx512(impl))
        st = ckc_ans_encode_avx512(p, w, first, full, x, &wp);
    else if (st == CKC_OK && use_avx2(impl))
        st = ckc_ans_encode_avx2(p, w, first, full, x, &wp);
    else if (st == CKC_OK)
        st = encode_groups(p, w, first, full, x, &wp);
    if (st != CKC_OK)
        return st;
    /* the words lie at or above dst + capacity - 4n: past the low bits and
     * the 8 bytes pack_low may store beyond them (capacity >= 64 + 5n + 16),
     * and the 16 bytes the AVX2 encoder stores below the words stay in dst */
    lowb = ckc_ans_low_bytes(n, p->ch.mbits);
    pack_low(w, n, 7 - p->ch.mbits, dst + CKC_ANS_HDR_BYTES);
    for (unsigned l = 0; l < CKC_ANS_LANES; l++)
        for (unsigned b = 0; b < 4; b++)
            dst[4 * l + b] = (uint8_t)(x[l] >> (8 * b));
    nbytes = (size_t)(dst + capacity - wp);
    memmove(dst + CKC_ANS_HDR_BYTES + lowb, wp, nbytes);
    *written = CKC_ANS_HDR_BYTES + lowb + nbytes;
    return CKC_OK;
}

ckc_status ckc_ans_encode_chunk(const ckc_ans_plan *p, const uint16_t *w, size_t n, uint64_t first,
                                uint8_t *dst, size_t capacity, size_t *written)
{
    return ckc_ans_encode_chunk_impl(CKC_IMPL_AUTO, p, w, n, first, dst, capacity, written);
}
