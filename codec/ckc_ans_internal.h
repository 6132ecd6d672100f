/*
 * ckc_ans_internal.h — what the archive encoder (ckc_ans_plan.c,
 * ckc_ans_enc.c), its portable decoder (ckc_ans_dec.c) and its vector
 * decoders (ckc_ans_x86.c) share.  Not installed.
 *
 * Decode table entries (built from a validated blob, so every field is in
 * range):
 *   exp_dec[k * 4096 + slot]  bits 0-7 symbol index a, 8-19 freq-1,
 *                             20-31 slot - cum (the bias)
 *   man_dec[a * 256 + slot]   bits 0-7 freq-1, 8-15 slot - cum, 16-31 the
 *                             weight's bits above the raw ones:
 *                             symval[a] << 7 | hi << (7 - M)
 * A step is x = (freq) * (x >> bits) + bias, then, if x < L, x = x << 16 |
 * the next 16-bit word of the stream.
 */
#ifndef CKC_ANS_INTERNAL_H
#define CKC_ANS_INTERNAL_H

#include "ckc_ans.h"
#include "ckc_internal.h"

#include <string.h>

#define CKC_ANS_HDR_BYTES (4u * CKC_ANS_LANES) /* the 16 initial states */

struct ckc_ans_tables {
    unsigned mode, mbits, n_classes, axis, n_syms;
    uint64_t n_cols, lines, n_weights;
    uint8_t *cls;          /* lines entries, each < n_classes (NULL when K = 1) */
    uint32_t *exp_dec;     /* n_classes * 4096 */
    uint32_t *man_dec;     /* n_syms * 256 */
    size_t bytes;
};

/* Encoder view of one symbol of a table (ryg_rans's reciprocal form). */
typedef struct {
    uint32_t x_max;  /* state at or above which a word goes out first; 0: freq 0 */
    uint32_t rcp;
    uint32_t bias;
    uint16_t cmpl;   /* scale - freq */
    uint8_t shift;
} ckc_ans_esym;

struct ckc_ans_plan {
    ckc_ans_choice ch;
    uint64_t lines;
    uint16_t sym_idx[512];  /* symbol -> index, 0xFFFF if absent */
    uint8_t *cls;           /* lines entries (NULL when K = 1) */
    ckc_ans_esym *exp_enc;  /* n_classes * n_syms */
    ckc_ans_esym *man_enc;  /* n_syms * 16 */
    uint8_t *blob;
    size_t blob_size;
};

static inline uint32_t ckc_ans_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint16_t ckc_ans_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Bytes of the raw low bits of n weights keeping 7 - M bits each. */
static inline size_t ckc_ans_low_bytes(size_t n, unsigned mbits) { return (n * (7u - mbits) + 7u) / 8u; }

/* Class of weight i of the tensor. */
static inline unsigned ckc_ans_class_of(const uint8_t *cls, unsigned axis, uint64_t n_cols, uint64_t i)
{
    if (!cls)
        return 0;
    return cls[axis == CKC_ANS_AXIS_COL ? i % n_cols : i / n_cols];
}

/* Vector decode of the chunk's full groups (ckc_ans_x86.c): decodes groups
 * of 16 weights while at least 32 words remain, from states x[16] and
 * word position *pos of words[0..n_words), writing the high parts into out.
 * @return the number of weights done (a multiple of 16). */
size_t ckc_ans_decode_avx512(const ckc_ans_tables *t, uint32_t x[16], const uint8_t *words,
                             size_t n_words, size_t *pos, uint64_t first, size_t n, uint16_t *out);
size_t ckc_ans_decode_avx2(const ckc_ans_tables *t, uint32_t x[16], const uint8_t *words,
                           size_t n_words, size_t *pos, uint64_t first, size_t n, uint16_t *out);
int ckc_ans_avx512_supported(void);

/* ckc_ans_decode_chunk with a forced implementation (tests, bench). */
ckc_status ckc_ans_decode_chunk_impl(ckc_impl impl, const ckc_ans_tables *t, const uint8_t *src,
                                     size_t size, uint64_t first, size_t n, uint16_t *out);

#endif /* CKC_ANS_INTERNAL_H */
