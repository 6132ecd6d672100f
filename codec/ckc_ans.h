/*
 * ckc_ans.h — the `archive` BF16 encoding: rANS with 16 interleaved 32-bit
 * states, tables stored once per tensor and shared by its chunks, any chunk
 * decodable on its own (docs/format.md §5.3 defines every byte).
 *
 * Model, per tensor (chosen by ckc_ans_plan_new from histogram cost
 * estimates, table bytes included, then encoded once):
 *   - raw: the chunk is the weights' bytes (tiny or incompressible tensors);
 *   - coded: the 9-bit sign+exponent of each weight is coded with an order-0
 *     table (scale 2^12) of its context class, the top M (0..4) mantissa bits
 *     with a table (scale 2^8) of its sign+exponent, the low 7-M bits raw.
 *     The class of a weight is 0 (K = 1), or the class of its column
 *     (i mod C) or of its row (i div C) of a C-column 2-D tensor, one of K <= 16
 *     classes stored once per tensor.
 *
 * Memory: the two functions that say they allocate are the only ones that
 * do; everything else works on caller memory and keeps no state.
 */
#ifndef CKC_ANS_H
#define CKC_ANS_H

#include <stddef.h>
#include <stdint.h>

#include "ckc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKC_ANS_LANES 16u          /* interleaved states: weight i uses state i mod 16 */
#define CKC_ANS_L (1u << 15)       /* states lie in [L, 2^31) */
#define CKC_ANS_EXP_BITS 12u       /* sign+exponent tables sum to 2^12 */
#define CKC_ANS_MAN_BITS 8u        /* mantissa tables sum to 2^8 */
#define CKC_ANS_MAX_CLASSES 16u
#define CKC_ANS_MAX_MBITS 4u
#define CKC_ANS_MAX_SYMS 256u      /* distinct sign+exponent values of a coded tensor */
#define CKC_ANS_HEADER 12u         /* fixed part of a tensor's table blob */
#define CKC_ANS_CHUNK_HINT 65536u  /* weights per chunk the size estimate assumes */

/* Modes (byte 0 of the table blob). */
enum { CKC_ANS_RAW = 0, CKC_ANS_CODED = 1 };
/* Context axes (byte 3). */
enum { CKC_ANS_AXIS_COL = 0, CKC_ANS_AXIS_ROW = 1 };

/* What the planner chose for a tensor (for stat / bench output). */
typedef struct {
    unsigned mode, mbits, n_classes, axis;
    uint64_t n_cols;        /* C of the context (0 when n_classes == 1) */
    unsigned n_syms;
    double est_bits;        /* estimated total bits: chunks + tables */
} ckc_ans_choice;

/* ---- encode -------------------------------------------------------------- */

typedef struct ckc_ans_plan ckc_ans_plan;

/* Analyse a whole tensor of n BF16 weights (host order) and choose its mode;
 * n_cols is the length of its last dimension when it is 2-D or more (0 when
 * unknown or 1-D), enabling the column / row contexts.  Allocates the plan.
 * @return CKC_ERR_ARG (w NULL with n > 0), CKC_ERR_NOMEM. */
ckc_status ckc_ans_plan_new(const uint16_t *w, uint64_t n, uint64_t n_cols, ckc_ans_plan **out);
/* The same with the choice forced (tests, benchmarks): mode, mbits,
 * n_classes, axis as in ckc_ans_choice; classes need n_cols >= 1 (row axis:
 * n a multiple of n_cols).  @return CKC_ERR_ARG if the choice is invalid or
 * impossible for these weights (more than 256 sign+exponent values). */
ckc_status ckc_ans_plan_forced(const uint16_t *w, uint64_t n, uint64_t n_cols, unsigned mode,
                               unsigned mbits, unsigned n_classes, unsigned axis, ckc_ans_plan **out);
void ckc_ans_plan_free(ckc_ans_plan *p);
void ckc_ans_plan_choice(const ckc_ans_plan *p, ckc_ans_choice *c);

/* The tensor's table blob (plane 0 of its extent): size, and bytes. */
size_t ckc_ans_blob_size(const ckc_ans_plan *p);
const uint8_t *ckc_ans_blob(const ckc_ans_plan *p);

/* Most bytes a chunk of n weights can take (dst capacity for encode). */
size_t ckc_ans_chunk_bound(size_t n_weights);

/* Encode weights first..first+n of the planned tensor (w points at weight
 * `first`; first a multiple of 16) into dst, *written bytes.  Thread-safe
 * for one plan.  @return CKC_ERR_CAPACITY, CKC_ERR_ARG. */
ckc_status ckc_ans_encode_chunk(const ckc_ans_plan *p, const uint16_t *w, size_t n, uint64_t first,
                                uint8_t *dst, size_t capacity, size_t *written);

/* ---- decode -------------------------------------------------------------- */

typedef struct ckc_ans_tables ckc_ans_tables;

/* Validate a table blob for a tensor of n_weights weights and build its
 * decode tables (allocates).  @return CKC_ERR_CORRUPT on any inconsistency
 * (docs/format.md §5.3's rules), CKC_ERR_NOMEM. */
ckc_status ckc_ans_tables_new(const uint8_t *blob, size_t size, uint64_t n_weights,
                              ckc_ans_tables **out);
void ckc_ans_tables_free(ckc_ans_tables *t);
/* The validation of ckc_ans_tables_new alone (no decode tables built, no
 * allocation but the class map's check): what a reader runs at open. */
ckc_status ckc_ans_blob_check(const uint8_t *blob, size_t size, uint64_t n_weights);
/* Bytes the decode tables hold (for cache accounting). */
size_t ckc_ans_tables_bytes(const ckc_ans_tables *t);
unsigned ckc_ans_tables_mode(const ckc_ans_tables *t);

/* Decode the chunk src[0..size) holding weights first..first+n (first a
 * multiple of 16) into out.  Reads nothing outside src.  @return
 * CKC_ERR_CORRUPT if the stream is inconsistent: a state out of range, too
 * few or too many words, a final state other than L. */
ckc_status ckc_ans_decode_chunk(const ckc_ans_tables *t, const uint8_t *src, size_t size,
                                uint64_t first, size_t n, uint16_t *out);

/* One chunk of a ckc_ans_decode_chunks batch: the arguments of
 * ckc_ans_decode_chunk, and its result. */
typedef struct {
    const ckc_ans_tables *t;
    const uint8_t *src;
    size_t size;
    uint64_t first;
    size_t n;
    uint16_t *out;
    ckc_status status; /* set by ckc_ans_decode_chunks */
} ckc_ans_chunk;

/* Decode count chunks (of one tensor or several) as ckc_ans_decode_chunk
 * would, each into its own out, with the same results byte for byte; the
 * vector loops decode up to 4 of them interleaved, so that one core decodes
 * more bytes per second than chunk by chunk (one chunk's steps wait on each
 * other; two chunks' do not).  Outputs must not overlap.  @return CKC_OK
 * if every chunk decoded, else the status of the first that did not (every
 * chunk's own in its status). */
ckc_status ckc_ans_decode_chunks(ckc_ans_chunk *c, size_t count);

#ifdef __cplusplus
}
#endif
#endif /* CKC_ANS_H */
