/*
 * ckc.h — public interface of the ckptfs codec.
 *
 * The codec does the format's math on memory spans and nothing else: it
 * splits BF16 weights into planes, chooses a tensor's codebook, encodes and
 * decodes K15 and byte-split chunks with their escapes, and computes chunk
 * checksums.  No file I/O, no printing, no global state, no FUSE or CUDA
 * types.  All scratch memory comes from the caller.  Bit layouts are defined
 * in docs/format.md; this header is the contract for using them.
 *
 * Conventions (after zstd): sizes are in bytes unless named *Count or
 * n_weights; a function that writes into a buffer takes its capacity and
 * returns (or stores) how much it wrote; errors are ckc_status values with a
 * name from ckc_status_name().
 */
#ifndef CKC_H
#define CKC_H

#include <stddef.h>
#include <stdint.h>

#include "ckc_decode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pinned error codes: values never change once released. */
typedef enum {
    CKC_OK = 0,
    CKC_ERR_ARG = 1,        /* bad argument (NULL, zero size where forbidden) */
    CKC_ERR_CAPACITY = 2,   /* destination buffer too small */
    CKC_ERR_CORRUPT = 3,    /* encoded data inconsistent (escape stream short, bad codebook entry) */
    CKC_ERR_CHECKSUM = 4,   /* decoded bytes do not match their checksum */
    CKC_ERR_ENCODING = 5,   /* unknown encoding tag */
    CKC_ERR_RESERVED6 = 6,  /* not used by the codec (zstd lives in format/) */
    CKC_ERR_NOMEM = 7       /* allocation failed (only functions that say they allocate) */
} ckc_status;

/* @return a static, human-readable name for a status ("ok", "corrupt data", ...). */
const char *ckc_status_name(ckc_status s);

/* Per-tensor encoding tags, as stored in the container (docs/format.md §4). */
typedef enum {
    CKC_ENC_RAW = 0,     /* bytes stored as is */
    CKC_ENC_ZSTD = 1,    /* one zstd frame per chunk */
    CKC_ENC_K15 = 2,     /* BF16: 4-bit code for the 9-bit sign+exponent, 7-bit mantissa raw */
    CKC_ENC_BSPLIT = 3,  /* BF16: 4-bit code for the high byte, low byte raw */
    CKC_ENC_ARCHIVE = 4  /* BF16: rANS, tables per tensor (ckc_ans.h; format 1.1) */
} ckc_encoding;

/* @return "raw", "zstd", "k15", "bytesplit", "archive", or "unknown". */
const char *ckc_encoding_name(uint32_t enc);

/* ---- codebooks ----------------------------------------------------------
 * A codebook maps codes 0..14 to symbols; code 15 (CKC_ESCAPE) means "the
 * exact symbol is the next entry of the escape stream".  For K15 a symbol is
 * the 9-bit sign+exponent (w >> 7); for byte-split the high byte (w >> 8). */

/* Count symbol frequencies of n_weights BF16 values (host byte order, i.e. the
 * little-endian file bytes read as uint16_t on a little-endian host) into
 * hist[512] (K15) or hist[256] (byte-split); hist is accumulated into, not
 * cleared, so a tensor can be counted chunk by chunk. */
void ckc_histogram(uint32_t enc, const uint16_t *w, size_t n_weights, uint64_t *hist);

/* Choose the codebook from a histogram: the 15 most frequent symbols, in
 * order of decreasing count (ties: smaller symbol first).  Unused entries
 * (fewer than 15 distinct symbols) are 0.  cb->sym[15] is always 0.
 * @return CKC_ERR_ENCODING for an encoding that has no codebook. */
ckc_status ckc_codebook_from_hist(uint32_t enc, const uint64_t *hist, ckc_codebook *cb);

/* @return CKC_OK if every entry is a valid symbol for enc (< 512 for K15,
 * < 256 for byte-split) and sym[15] == 0; CKC_ERR_CORRUPT otherwise. */
ckc_status ckc_codebook_check(uint32_t enc, const ckc_codebook *cb);

/* ---- plane sizes -------------------------------------------------------
 * Stored plane sizes: the exact byte count rounded up to a multiple of 8,
 * plus 8 zero bytes, so that decoders may load 2 (or 8) bytes at any valid
 * bit position without reading past the plane (docs/format.md §5.1). */
uint64_t ckc_code_plane_size(uint64_t n_weights);                 /* codes */
uint64_t ckc_low_plane_size(uint32_t enc, uint64_t n_weights);    /* K15 7 bits, BS 8 bits per weight */
uint64_t ckc_escape_plane_size(uint32_t enc, uint64_t n_escapes); /* K15 9 bits, BS 8 bits per escape */

/* ---- chunk encode / decode ----------------------------------------------
 * A chunk is n_weights consecutive weights of one tensor, starting at weight
 * index `first`, which must be a multiple of 8 (the container's chunk sizes
 * are multiples of 8 weights; only a tensor's last chunk may be shorter), so
 * a chunk's code and low-plane bytes never share a byte with another chunk's
 * and chunks can be encoded concurrently into the same planes.
 *
 * Escapes are produced as an array of symbols and packed into the escape
 * plane by a separate, sequential call, because adjacent chunks' 9-bit K15
 * escapes share bytes.
 */

/* Count the escapes that w[0..n) would produce under cb. */
uint64_t ckc_count_escapes(uint32_t enc, const ckc_codebook *cb, const uint16_t *w, size_t n_weights);

/* Encode w[0..n_weights) (host order) as weights first..first+n of a tensor:
 * writes codes into codes[] and the low parts into low[] at the positions of
 * those weights (planes sized for the whole tensor by the functions above),
 * and the escaped symbols, in order, into esc_syms[0..*n_escapes).
 * esc_syms needs room for n_weights entries in the worst case.
 * @return CKC_ERR_ARG if first is not a multiple of 8 or enc is not K15/BS. */
ckc_status ckc_encode_chunk(uint32_t enc, const ckc_codebook *cb, const uint16_t *w,
                            size_t n_weights, uint64_t first, uint8_t *codes, uint8_t *low,
                            uint16_t *esc_syms, uint64_t *n_escapes);

/* Pack n escape symbols as escapes esc_first..esc_first+n of the escape
 * plane (esc_size bytes, zeroed beforehand: bits are ORed in).
 * @return CKC_ERR_CAPACITY if they do not fit. */
ckc_status ckc_pack_escapes(uint32_t enc, const uint16_t *esc_syms, uint64_t n, uint64_t esc_first,
                            uint8_t *esc, uint64_t esc_size);

/* Planes of a whole tensor, for decoding; sizes are what is available. */
typedef struct {
    const uint8_t *codes;
    const uint8_t *low;
    const uint8_t *esc;
    uint64_t codes_size, low_size, esc_size;
} ckc_cplanes;

/* Decode weights first..first+n_weights into out (n_weights uint16 in host
 * order).  first must be a multiple of 8.  esc_first/esc_count are the
 * chunk's escape range (from the chunk index).  Every plane access is
 * bounds-checked against the *_size fields and the number of code-15
 * entries must equal esc_count.
 * @return CKC_ERR_CORRUPT on any inconsistency; out is then unspecified. */
ckc_status ckc_decode_chunk(uint32_t enc, const ckc_codebook *cb, const ckc_cplanes *p,
                            uint64_t first, size_t n_weights, uint64_t esc_first,
                            uint64_t esc_count, uint16_t *out);

/* ---- checksums ---------------------------------------------------------- */

/* XXH3-64 (seed 0) of a byte span: the checksum of every chunk's decoded
 * bytes and of every piece of container metadata. */
uint64_t ckc_hash64(const void *p, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* CKC_H */
