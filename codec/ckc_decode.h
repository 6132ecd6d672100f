/*
 * ckc_decode.h — the decode math shared by the CPU codec and the CUDA kernels.
 *
 * Everything here compiles under gcc (C11) and nvcc: functions are
 * `static inline` and, under __CUDACC__, also __host__ __device__.  The CPU
 * tests exercise exactly these functions, so the GPU runs the same math.
 * Bit layouts (docs/format.md §5):
 *   code plane   4 bits per weight, weight i in byte i/2, low nibble for even i
 *   K15 low      7-bit mantissa of weight i at bit 7*i (LSB-first bit stream)
 *   BS low       low byte of weight i at byte i
 *   K15 escapes  9-bit symbol k at bit 9*k (LSB-first bit stream)
 *   BS escapes   8-bit symbol k at byte k
 * A weight is rebuilt as (sym << 7) | mantissa (K15) or (sym << 8) | low (BS).
 */
#ifndef CKC_DECODE_H
#define CKC_DECODE_H

#include <stdint.h>

#if defined(__CUDACC__)
#define CKC_HD static inline __host__ __device__
#else
#define CKC_HD static inline
#endif

#define CKC_ESCAPE 15u          /* the code that means "read the escape stream" */
#define CKC_K15_SYM_BITS 9u
#define CKC_K15_LOW_BITS 7u
#define CKC_BS_SYM_BITS 8u
#define CKC_BS_LOW_BITS 8u

/* A tensor's codebook: sym[c] for codes c = 0..14; sym[15] is 0 (escape). */
typedef struct {
    uint16_t sym[16];
} ckc_codebook;

/* Shift of the symbol within a BF16 word: 7 for K15, 8 for byte-split. */
CKC_HD unsigned ckc_low_bits(int is_k15) { return is_k15 ? CKC_K15_LOW_BITS : CKC_BS_LOW_BITS; }

/* Code of weight i (0..15). */
CKC_HD unsigned ckc_code_at(const uint8_t *codes, uint64_t i)
{
    return (codes[i >> 1] >> ((i & 1u) * 4u)) & 0xFu;
}

/* Read `bits` (<= 9) bits at bit offset pos of an LSB-first stream.
 * The stream must hold the 2 bytes at pos/8 (callers pad or bound-check). */
CKC_HD unsigned ckc_bits_at(const uint8_t *s, uint64_t pos, unsigned bits)
{
    uint64_t b = pos >> 3;
    unsigned v = (unsigned)s[b] | ((unsigned)s[b + 1] << 8);
    return (v >> (pos & 7u)) & ((1u << bits) - 1u);
}

/* Like ckc_bits_at but never reads past size bytes. */
CKC_HD unsigned ckc_bits_at_bounded(const uint8_t *s, uint64_t size, uint64_t pos, unsigned bits)
{
    uint64_t b = pos >> 3;
    unsigned v = (unsigned)s[b];
    if (b + 1 < size)
        v |= (unsigned)s[b + 1] << 8;
    return (v >> (pos & 7u)) & ((1u << bits) - 1u);
}

/* Low part (mantissa or low byte) of weight i. The K15 form reads 2 bytes. */
CKC_HD unsigned ckc_low_at(int is_k15, const uint8_t *low, uint64_t i)
{
    return is_k15 ? ckc_bits_at(low, i * CKC_K15_LOW_BITS, CKC_K15_LOW_BITS) : low[i];
}

/* Escape symbol k. */
CKC_HD unsigned ckc_escape_at(int is_k15, const uint8_t *esc, uint64_t k)
{
    return is_k15 ? ckc_bits_at(esc, k * CKC_K15_SYM_BITS, CKC_K15_SYM_BITS) : esc[k];
}

/* Rebuild one BF16 word from its symbol and low part. */
CKC_HD uint16_t ckc_join(int is_k15, unsigned sym, unsigned low)
{
    return (uint16_t)((sym << ckc_low_bits(is_k15)) | low);
}

/* Decode 8 K15 mantissas from the 7 bytes at p (p[0..6]). */
CKC_HD void ckc_k15_unpack8(const uint8_t *p, unsigned m[8])
{
    uint64_t v = 0;
    for (int k = 0; k < 7; k++)
        v |= (uint64_t)p[k] << (8 * k);
    for (int k = 0; k < 8; k++)
        m[k] = (unsigned)(v >> (7 * k)) & 0x7Fu;
}

#endif /* CKC_DECODE_H */
