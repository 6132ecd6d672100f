/*
 * ckc_ans_internal.h — what the archive encoder (ckc_ans_plan.c,
 * ckc_ans_enc.c), its portable decoder (ckc_ans_dec.c) and its vector
 * decoders (ckc_ans_x86.c) share.  Not installed.
 *
 * Decode table entries (built from a validated blob, so every field is in
 * range; a layout of the decoder's own, not of the stream):
 *   exp_dec[k * 4096 + slot]  bits 0-7 symbol index a, 8-19 slot - cum (the
 *                             bias), 20-31 freq-1
 *   man_dec[a * 256 + slot]   bits 0-7 freq-1, 8-15 slot - cum, 16-31 the
 *                             weight's bits above the raw ones:
 *                             symval[a] << 7 | hi << (7 - M)
 * A step is x = freq * (x >> bits) + bias, computed as
 * (freq-1) * q + (q + bias) with q = x >> bits (the multiply waits only for
 * one shift of the entry), then, if x < L, x = x << 16 | the next 16-bit
 * word of the stream.
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
    /* The raw low bits (7 - mbits a weight) of a group of 16 weights, for
     * the vector loops: they take 2 * (7 - mbits) bytes (low_gbytes), and
     * weight w's, from bit w * (7 - mbits), lie in the 2 bytes from byte
     * low_ctl[4w] of a 16-byte load, shifted by low_sh[w]: a byte shuffle
     * (16 bytes broadcast to each 128-bit lane, lanes of 4 bytes: the 2
     * bytes and two zeros), a shift and low_mask give the 16 values. */
    uint8_t low_ctl[64];
    uint32_t low_sh[16];
    uint32_t low_mask, low_gbytes;
};

/* Encoder view of one symbol of a table (ryg_rans's reciprocal form),
 * packed in 64 bits so that a vector encoder gathers it in one load:
 *   bits 0-31 rcp, 32-44 bias, 45-57 freq (0: not codable), 58-61 shift.
 * A step of state x, table scale 2^b: x >= freq << (31 - b) puts x's low
 * 16 bits out and x >>= 16; then q = (x * rcp) >> 32 >> shift and
 * x += bias + q * (2^b - freq). */
typedef uint64_t ckc_ans_esym;
#define CKC_ANS_ESYM_BIAS(e) ((uint32_t)((e) >> 32) & 0x1FFFu)
#define CKC_ANS_ESYM_FREQ(e) ((uint32_t)((e) >> 45) & 0x1FFFu)
#define CKC_ANS_ESYM_SHIFT(e) ((uint32_t)((e) >> 58) & 0xFu)

struct ckc_ans_plan {
    ckc_ans_choice ch;
    uint64_t lines;
    uint8_t *cls;           /* lines entries (NULL when K = 1) */
    ckc_ans_esym *exp_enc;  /* [class * 512 + symbol]: frequency 0 where not codable */
    ckc_ans_esym *man_enc;  /* [symbol * 16 + top M mantissa bits] */
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

/* One chunk being decoded: its stream (words[0..n_words), the next at pos),
 * its 16 states, and the weights done so far (j of n, from weight `first`
 * of the tensor).  ckc_ans_dec.c fills it from a chunk's header, the vector
 * loops take the bulk, the scalar loop the rest. */
typedef struct {
    const ckc_ans_tables *t;
    const uint8_t *words;
    size_t n_words, pos, j, n;
    uint64_t first;
    uint16_t *out;
    const uint8_t *low;    /* the chunk's raw low bits; the vector loops OR them into out */
    uint32_t x[CKC_ANS_LANES];
} ckc_ans_stream;

#define CKC_ANS_MAX_STREAMS 4u /* chunks one vector loop decodes interleaved */

/* Vector decode (ckc_ans_x86.c) of count <= CKC_ANS_MAX_STREAMS chunks,
 * interleaved (their dependency chains overlap): groups of 16 weights while
 * a stream has at least 32 words left, advancing each stream's x, pos and j
 * (j stays a multiple of 16); out[0..j) gets whole weights (high bits and
 * raw low bits). */
void ckc_ans_decode_avx512(ckc_ans_stream *s, size_t count);
void ckc_ans_decode_avx2(ckc_ans_stream *s, size_t count);
int ckc_ans_avx512_supported(void);

/* Vector encode of groups g_end-1 down to 0 of a chunk (ckc_ans_enc_x86.c):
 * the rANS steps of ckc_ans_enc.c's scalar loop, lane for lane, words
 * stored below *wp (which moves down).  @return CKC_OK, or CKC_ERR_ARG for
 * a weight the plan cannot code. */
ckc_status ckc_ans_encode_avx512(const ckc_ans_plan *p, const uint16_t *w, uint64_t first, size_t g_end,
                                 uint32_t x[16], uint8_t **wp);
ckc_status ckc_ans_encode_avx2(const ckc_ans_plan *p, const uint16_t *w, uint64_t first, size_t g_end,
                               uint32_t x[16], uint8_t **wp);

/* ckc_ans_encode_chunk / ckc_ans_decode_chunk with a forced implementation
 * (tests, bench); one this CPU lacks falls back to the portable one. */
ckc_status ckc_ans_encode_chunk_impl(ckc_impl impl, const ckc_ans_plan *p, const uint16_t *w, size_t n,
                                     uint64_t first, uint8_t *dst, size_t capacity, size_t *written);
ckc_status ckc_ans_decode_chunk_impl(ckc_impl impl, const ckc_ans_tables *t, const uint8_t *src,
                                     size_t size, uint64_t first, size_t n, uint16_t *out);
ckc_status ckc_ans_decode_chunks_impl(ckc_impl impl, ckc_ans_chunk *c, size_t count);

#endif /* CKC_ANS_INTERNAL_H */
