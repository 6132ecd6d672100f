/*
 * ckc_x86.c — x86-64 vector loops for K15 / byte-split chunks: AVX-512 (F,
 * BW, VL, VBMI, VBMI2: Ice Lake, Sapphire Rapids, Zen 4 and later) encode and
 * decode, and an AVX2 decode for the CPUs without them (see the AVX2 section).
 *
 * Compiled for any x86-64 target: the vector functions carry
 * __attribute__((target)) and ckc.c calls them only when the running CPU
 * supports the instructions (ckc_avx512_supported), so the binary runs on
 * any x86-64.  On other architectures the entry points are stubs that do
 * nothing and report "unsupported".
 *
 * Decode works in blocks of 32 weights (64 bytes of BF16):
 *   codes  16 bytes  -> vpermb spreads byte i/2 to u16 lane i, vpsrlvw by
 *                       4*(i&1), AND 15       -> 32 code indexes
 *   symbol            vpermw of a 16-entry table of (sym << low_bits)
 *   K15 low 28 bytes  -> masked load (never past the 28 bytes), vpermb puts
 *                       bytes 7i/8 and 7i/8+1 in lane i, vpsrlvw by 7i%8,
 *                       AND 0x7F               -> 32 mantissas
 *   escapes           the chunk's escape symbols are unpacked, pre-shifted,
 *                       into a small buffer ahead of use (a refill every few
 *                       hundred escapes); vpexpandw drops the next ones into
 *                       the lanes with code 15 (table entry 0).  No branch
 *                       depends on where escapes fall: with ~2% escapes, 40%
 *                       of blocks have one, where a scalar patch loop's
 *                       branches mispredict.
 * Encode (64 weights per step) looks codes up in the symbol -> code map
 * held in registers (vpermt2b), packs nibbles with a shift and vpmovwb, and
 * packs mantissas 8 per u64 with three shift/mask steps and a vpermb that
 * drops every 8th byte.
 */
#include "ckc_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#define CKC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi,popcnt")))

int ckc_avx512_supported(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("avx512vbmi2");
}

/* Lane tables, derived from the layout rather than typed in. */
typedef struct {
    uint8_t code_perm[64];  /* byte b of u16 lane b/2 <- code byte (b/2)/2 */
    uint16_t code_shift[32];
    uint8_t low_perm[64];   /* lane i <- bytes 7i/8, 7i/8+1 */
    uint16_t low_shift[32];
} dec_tables;

static void make_dec_tables(dec_tables *t)
{
    for (unsigned i = 0; i < 32; i++) {
        t->code_perm[2 * i] = t->code_perm[2 * i + 1] = (uint8_t)(i / 2);
        t->code_shift[i] = (uint16_t)(4 * (i & 1));
        t->low_perm[2 * i] = (uint8_t)(7 * i / 8);
        t->low_perm[2 * i + 1] = (uint8_t)(7 * i / 8 + 1);
        t->low_shift[i] = (uint16_t)(7 * i % 8);
    }
}

#define ESC_BUF 512 /* escapes unpacked ahead; a refill keeps >= 32 when the stream has them */

/* Move the unconsumed escapes to the front of eb and unpack more from the
 * stream behind them; returns how many eb now holds. */
static unsigned refill_escapes(ckc_dec_ctx *d, uint16_t *eb, unsigned pos, unsigned len)
{
    unsigned lb = ckc_low_bits(d->is_k15), keep = len - pos;
    memmove(eb, eb + pos, keep * sizeof *eb);
    uint64_t avail = d->er.end - d->er.pos;
    unsigned take = avail < ESC_BUF - keep ? (unsigned)avail : ESC_BUF - keep;
    for (unsigned k = 0; k < take; k++)
        eb[keep + k] = (uint16_t)(ckc_esc_next(&d->er, d->is_k15) << lb);
    return keep + take;
}

CKC_AVX512 size_t ckc_decode_bulk_avx512(ckc_dec_ctx *d, uint64_t first, size_t n, uint16_t *out)
{
    dec_tables t;
    size_t j;
    uint16_t eb[ESC_BUF];
    unsigned e_pos = 0, e_len = 0;
    make_dec_tables(&t);
    const __m512i cperm = _mm512_loadu_si512(t.code_perm);
    const __m512i cshift = _mm512_loadu_si512(t.code_shift);
    const __m512i lperm = _mm512_loadu_si512(t.low_perm);
    const __m512i lshift = _mm512_loadu_si512(t.low_shift);
    const __m512i tbl = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)d->shifted));
    const __m512i m15 = _mm512_set1_epi16(15), m7f = _mm512_set1_epi16(0x7F);

    for (j = 0; j + 32 <= n; j += 32) {
        uint64_t i = first + j;
        __m512i cb = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(d->codes + i / 2)));
        __m512i ci = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi8(cperm, cb), cshift), m15);
        __m512i v = _mm512_permutexvar_epi16(ci, tbl), lo;
        __mmask32 em = _mm512_cmpeq_epi16_mask(ci, m15);
        unsigned ne = (unsigned)__builtin_popcount(em);
        if (e_len - e_pos < ne) { /* rare: every few hundred escapes */
            e_len = refill_escapes(d, eb, e_pos, e_len);
            e_pos = 0;
            if (e_len < ne) {
                d->er.pos -= e_len; /* more code-15 lanes than escapes: corrupt */
                return (size_t)-1;
            }
        }
        if (d->is_k15) {
            __m512i lb = _mm512_maskz_loadu_epi8(0x0FFFFFFFu, d->low + i / 8 * 7);
            lo = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi8(lperm, lb), lshift), m7f);
        } else {
            lo = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(d->low + i)));
        }
        __m512i esc = _mm512_maskz_expandloadu_epi16(em, eb + e_pos);
        e_pos += ne;
        _mm512_storeu_si512(out + j, _mm512_or_si512(_mm512_or_si512(v, lo), esc));
    }
    d->er.pos -= e_len - e_pos; /* unpacked ahead but not used: the tail's */
    return j;
}

/* ---- AVX2 decode (x86-64 CPUs without AVX-512 VBMI2: Zen 2/3, Haswell..) --
 * Blocks of 16 weights, one 256-bit vector of BF16 (lane k = weight k):
 *   codes  8 bytes -> nibbles split and interleaved into 16 code bytes,
 *                     zero-extended to u16 lanes
 *   symbol two vpshufb lookups of the code (sym << low_bits, low and high
 *                     byte), the index's other byte set to 0x80 (gives 0)
 *   K15 low 16 bytes broadcast to both halves, vpshufb puts bytes 7k/8 and
 *                     7k/8+1 in lane k, and (x << (8 - 7k%8)) >> 8 & 0x7F
 *                     extracts the mantissa (vpmullw by a power of two:
 *                     AVX2 has no per-lane 16-bit shift)
 *   escapes           a scalar patch over the block's code-15 mask. */
#define CKC_AVX2 __attribute__((target("avx2,bmi,popcnt")))

int ckc_avx2_supported(void) { return __builtin_cpu_supports("avx2"); }

CKC_AVX2 size_t ckc_decode_bulk_avx2(ckc_dec_ctx *d, uint64_t first, size_t n, uint16_t *out)
{
    uint8_t tlo[32], thi[32], lidx[32];
    uint16_t lmul[16];
    for (unsigned c = 0; c < 32; c++) {
        tlo[c] = (uint8_t)(d->shifted[c & 15] & 0xFF);
        thi[c] = (uint8_t)(d->shifted[c & 15] >> 8);
    }
    for (unsigned k = 0; k < 16; k++) { /* half h = k / 8 holds weights 8h.. */
        unsigned b = 7 * k / 8;        /* byte of the block's low data */
        lidx[2 * k] = (uint8_t)b;
        lidx[2 * k + 1] = (uint8_t)(b + 1);
        lmul[k] = (uint16_t)(1u << (8 - 7 * k % 8));
    }
    const __m256i vtlo = _mm256_loadu_si256((const __m256i *)tlo);
    const __m256i vthi = _mm256_loadu_si256((const __m256i *)thi);
    const __m256i vlidx = _mm256_loadu_si256((const __m256i *)lidx);
    const __m256i vlmul = _mm256_loadu_si256((const __m256i *)lmul);
    const __m256i hi80 = _mm256_set1_epi16((short)0x8000), lo80 = _mm256_set1_epi16(0x0080);
    const __m256i m7f = _mm256_set1_epi16(0x7F);
    const __m128i m0f = _mm_set1_epi8(15);
    /* K15 blocks read 16 low bytes from i / 8 * 7: stay inside low_size */
    size_t lim = n;
    if (d->is_k15) {
        uint64_t last = d->low_size >= 16 ? (d->low_size - 16) / 7 * 8 : 0; /* last block start */
        lim = d->low_size < 16 || last < first ? 0 : last - first + 16 < n ? (size_t)(last - first + 16) : n;
    }
    size_t j;
    for (j = 0; j + 16 <= lim; j += 16) {
        uint64_t i = first + j;
        __m128i cb = _mm_loadl_epi64((const __m128i *)(d->codes + i / 2));
        __m128i c8 = _mm_unpacklo_epi8(_mm_and_si128(cb, m0f), _mm_and_si128(_mm_srli_epi16(cb, 4), m0f));
        __m256i c16 = _mm256_cvtepu8_epi16(c8);
        __m256i sym = _mm256_or_si256(_mm256_shuffle_epi8(vtlo, _mm256_or_si256(c16, hi80)),
                                      _mm256_shuffle_epi8(vthi, _mm256_or_si256(_mm256_slli_epi16(c16, 8), lo80)));
        __m256i lo;
        if (d->is_k15) {
            __m256i lb16 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(d->low + i / 8 * 7)));
            __m256i x = _mm256_shuffle_epi8(lb16, vlidx);
            lo = _mm256_and_si256(_mm256_srli_epi16(_mm256_mullo_epi16(x, vlmul), 8), m7f);
        } else {
            lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(d->low + i)));
        }
        _mm256_storeu_si256((__m256i *)(out + j), _mm256_or_si256(sym, lo));
        unsigned em = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(c8, m0f));
        if (em && ckc_patch_escapes(d, em, 1, out + j) != CKC_OK)
            return (size_t)-1;
    }
    return j;
}

/* Encode 64 weights per step.  The symbol -> code map (512 or 256 bytes)
 * sits in 8 (4) registers; vpermt2b looks up 128 entries by the symbol's
 * low 7 bits, and blends on bits 7 and 8 pick the right quarter. */
CKC_AVX512 size_t ckc_encode_bulk_avx512(int is_k15, const ckc_codebook *cb, const uint16_t *w,
                                         size_t n, uint64_t first, uint8_t *codes, uint8_t *low,
                                         uint16_t *esc_syms, uint64_t *n_escapes)
{
    uint8_t map[512], drop8[64];
    uint64_t ne = *n_escapes;
    unsigned shift = is_k15 ? 7 : 8;
    size_t j;
    __m512i tab[8];

    memset(map, (int)CKC_ESCAPE, sizeof map);
    for (int c = 14; c >= 0; c--) /* smallest code wins on duplicates */
        map[cb->sym[c] & 511u] = (uint8_t)c;
    for (int k = 0; k < 8; k++)
        tab[k] = _mm512_loadu_si512(map + 64 * k);
    for (unsigned b = 0; b < 64; b++) /* byte b of the packed 56 <- byte b + b/7 */
        drop8[b] = (uint8_t)(b < 56 ? b + b / 7 : 63);
    const __m512i drop = _mm512_loadu_si512(drop8);
    const __m512i m15 = _mm512_set1_epi8(15);
    const __m512i k1a = _mm512_set1_epi64(0x007F007F007F007FLL), k1b = _mm512_set1_epi64(0x3F803F803F803F80LL);
    const __m512i k2a = _mm512_set1_epi64(0x00003FFF00003FFFLL), k2b = _mm512_set1_epi64(0x0FFFC0000FFFC000LL);
    const __m512i k3a = _mm512_set1_epi64(0x000000000FFFFFFFLL), k3b = _mm512_set1_epi64(0x00FFFFFFF0000000LL);

    for (j = 0; j + 64 <= n; j += 64) {
        uint64_t i = first + j;
        __m512i w0 = _mm512_loadu_si512(w + j), w1 = _mm512_loadu_si512(w + j + 32);
        __m512i s8 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srli_epi16(w0, shift))),
                                        _mm512_cvtepi16_epi8(_mm512_srli_epi16(w1, shift)), 1);
        __mmask64 b7 = _mm512_movepi8_mask(s8);
        __m512i code = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(tab[0], s8, tab[1]),
                                              _mm512_permutex2var_epi8(tab[2], s8, tab[3]));
        if (is_k15) {
            __mmask64 b8 = (__mmask64)_mm512_movepi16_mask(w0) | (__mmask64)_mm512_movepi16_mask(w1) << 32;
            __m512i hi = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(tab[4], s8, tab[5]),
                                                _mm512_permutex2var_epi8(tab[6], s8, tab[7]));
            code = _mm512_mask_blend_epi8(b8, code, hi);
        }
        __mmask64 em = _mm512_cmpeq_epi8_mask(code, m15);
        __m512i pair = _mm512_or_si512(code, _mm512_srli_epi16(code, 4));
        _mm256_storeu_si256((__m256i *)(codes + i / 2), _mm512_cvtepi16_epi8(pair));
        __m512i lb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(w0)), _mm512_cvtepi16_epi8(w1), 1);
        if (is_k15) {
            __m512i x = lb;
            x = _mm512_or_si512(_mm512_and_si512(x, k1a), _mm512_and_si512(_mm512_srli_epi64(x, 1), k1b));
            x = _mm512_or_si512(_mm512_and_si512(x, k2a), _mm512_and_si512(_mm512_srli_epi64(x, 2), k2b));
            x = _mm512_or_si512(_mm512_and_si512(x, k3a), _mm512_and_si512(_mm512_srli_epi64(x, 4), k3b));
            _mm512_mask_storeu_epi8(low + i / 8 * 7, 0x00FFFFFFFFFFFFFFull, _mm512_permutexvar_epi8(drop, x));
        } else {
            _mm512_storeu_si512(low + i, lb);
        }
        for (uint64_t m = em; m; m &= m - 1)
            esc_syms[ne++] = (uint16_t)(w[j + (size_t)__builtin_ctzll(m)] >> shift);
    }
    *n_escapes = ne;
    return j;
}

#else /* not x86-64 GCC/Clang */

int ckc_avx512_supported(void) { return 0; }
int ckc_avx2_supported(void) { return 0; }

size_t ckc_decode_bulk_avx2(ckc_dec_ctx *d, uint64_t first, size_t n, uint16_t *out)
{
    (void)d, (void)first, (void)n, (void)out;
    return 0;
}

size_t ckc_decode_bulk_avx512(ckc_dec_ctx *d, uint64_t first, size_t n, uint16_t *out)
{
    (void)d, (void)first, (void)n, (void)out;
    return 0;
}

size_t ckc_encode_bulk_avx512(int is_k15, const ckc_codebook *cb, const uint16_t *w, size_t n,
                              uint64_t first, uint8_t *codes, uint8_t *low, uint16_t *esc_syms,
                              uint64_t *n_escapes)
{
    (void)is_k15, (void)cb, (void)w, (void)n, (void)first, (void)codes, (void)low;
    (void)esc_syms, (void)n_escapes;
    return 0;
}
#endif
