/*
 * ckc_internal.h — private interface between the codec's portable core
 * (ckc.c) and its ISA-specific hot loops (ckc_x86.c), and the switch the
 * unit tests use to run one implementation or the other.  Not installed, not
 * for use outside codec/ and tests/.
 *
 * The public ckc_encode_chunk / ckc_decode_chunk pick the fastest
 * implementation the running CPU supports (CKC_IMPL_AUTO).  The tests call
 * the *_impl variants to force each one and compare them bit for bit.  There
 * is no global switch: the choice is an argument, so the codec keeps no
 * mutable state.
 */
#ifndef CKC_INTERNAL_H
#define CKC_INTERNAL_H

#include "ckc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CKC_IMPL_AUTO = 0,     /* best available on this CPU */
    CKC_IMPL_PORTABLE = 1, /* plain C11, any CPU */
    CKC_IMPL_AVX512 = 2,   /* x86-64 AVX-512 F/BW/VL/VBMI/VBMI2, chosen at run time */
    CKC_IMPL_AVX2 = 3      /* x86-64 AVX2 decode (encode is portable), chosen at run time */
} ckc_impl;

/* @return 1 if impl can run on this CPU (AUTO and PORTABLE always can). */
int ckc_impl_available(ckc_impl impl);

/* @return "auto", "portable", "avx512", "avx2" or "unknown". */
const char *ckc_impl_name(ckc_impl impl);

/* ckc_encode_chunk / ckc_decode_chunk with a forced implementation.  An
 * implementation that is not available falls back to the portable one. */
ckc_status ckc_encode_chunk_impl(ckc_impl impl, uint32_t enc, const ckc_codebook *cb,
                                 const uint16_t *w, size_t n_weights, uint64_t first,
                                 uint8_t *codes, uint8_t *low, uint16_t *esc_syms,
                                 uint64_t *n_escapes);
ckc_status ckc_decode_chunk_impl(ckc_impl impl, uint32_t enc, const ckc_codebook *cb,
                                 const ckc_cplanes *p, uint64_t first, size_t n_weights,
                                 uint64_t esc_first, uint64_t esc_count, uint16_t *out);

/* ---- between ckc.c and ckc_x86.c ---------------------------------------- */

/* Sequential reader of a chunk's escapes.  Bounds were checked by the caller:
 * escapes [pos, end) lie wholly inside the first `size` bytes of `esc`. */
typedef struct {
    const uint8_t *esc;
    uint64_t size; /* bytes that may be read */
    uint64_t pos;  /* index of the next escape */
    uint64_t end;  /* one past the chunk's last escape */
} ckc_esc_reader;

/* Decode state of one chunk, prepared and validated by ckc.c. */
typedef struct {
    int is_k15;
    uint16_t shifted[16]; /* sym[c] << low_bits for c < 15; shifted[15] = 0 */
    const uint8_t *codes; /* the tensor's code plane */
    const uint8_t *low;   /* the tensor's low plane */
    uint64_t low_size;    /* bytes of low that may be read (a group's 8-byte load) */
    ckc_esc_reader er;
} ckc_dec_ctx;

/* Decode weights first+j .. first+j+8*n_groups (j a multiple of 8, groups of
 * 8 wholly inside the checked plane range) into out[j..).
 * @return CKC_ERR_CORRUPT if more code-15 entries than escapes remain. */
ckc_status ckc_decode_groups_portable(ckc_dec_ctx *d, uint64_t first, size_t j,
                                      size_t n_groups, uint16_t *out);

/* AVX-512 bulk decode/encode: handle a prefix of the chunk in blocks of 32
 * (decode) or 64 (encode) weights and return how many weights were done.
 * Decode returns (size_t)-1 on an escape overrun.  Only called when
 * ckc_avx512_supported(). */
size_t ckc_decode_bulk_avx512(ckc_dec_ctx *d, uint64_t first, size_t n_weights, uint16_t *out);
size_t ckc_encode_bulk_avx512(int is_k15, const ckc_codebook *cb, const uint16_t *w,
                              size_t n_weights, uint64_t first, uint8_t *codes, uint8_t *low,
                              uint16_t *esc_syms, uint64_t *n_escapes);
int ckc_avx512_supported(void);

/* AVX2 bulk decode, blocks of 16 weights; same contract as the AVX-512 one.
 * Only called when ckc_avx2_supported(). */
size_t ckc_decode_bulk_avx2(ckc_dec_ctx *d, uint64_t first, size_t n_weights, uint16_t *out);
int ckc_avx2_supported(void);

#ifdef CKC_HASH_AVX2
/* XXH3-64 built with -mavx2 (ckc_hash_avx2.c).  Only called when
 * ckc_avx2_supported(). */
uint64_t ckc_hash64_avx2(const void *p, size_t size);
#endif

/* Next escape symbol; the caller has checked er->pos < er->end. */
static inline unsigned ckc_esc_next(ckc_esc_reader *er, int is_k15)
{
    uint64_t k = er->pos++;
    if (!is_k15)
        return er->esc[k];
    return ckc_bits_at_bounded(er->esc, er->size, k * CKC_K15_SYM_BITS, CKC_K15_SYM_BITS);
}

static inline unsigned ckc_popcount32(uint32_t x)
{
#if defined(__GNUC__)
    return (unsigned)__builtin_popcount(x);
#else
    unsigned n = 0;
    for (; x; x &= x - 1)
        n++;
    return n;
#endif
}

static inline unsigned ckc_ctz32(uint32_t x) /* x != 0 */
{
#if defined(__GNUC__)
    return (unsigned)__builtin_ctz(x);
#else
    unsigned n = 0;
    while (!(x & 1u)) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

/* OR the chunk's next escape symbols, in order, into the weights marked in
 * mask: bit b marks out[b / lane_bits].  The decoders' scalar escape patch.
 * @return CKC_ERR_CORRUPT if the chunk has fewer escapes left than marks. */
static inline ckc_status ckc_patch_escapes(ckc_dec_ctx *d, uint32_t mask, unsigned lane_bits, uint16_t *out)
{
    unsigned lb = ckc_low_bits(d->is_k15);
    if (ckc_popcount32(mask) > d->er.end - d->er.pos)
        return CKC_ERR_CORRUPT;
    for (; mask; mask &= mask - 1)
        out[ckc_ctz32(mask) / lane_bits] |= (uint16_t)(ckc_esc_next(&d->er, d->is_k15) << lb);
    return CKC_OK;
}

#ifdef __cplusplus
}
#endif
#endif /* CKC_INTERNAL_H */
