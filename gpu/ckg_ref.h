/*
 * ckg_ref.h — plain-C references of the GPU kernels, on planes in host
 * memory (a ckg_planes whose pointers are host pointers).
 *
 * They follow docs/format.md §5.2 literally (one weight at a time, escapes
 * counted in weight order) with the accessors of codec/ckc_decode.h, so the
 * kernels are checked against the format, not against themselves.  Tests
 * check these against the codec's ckc_decode_chunk and the original data.
 */
#ifndef CKG_REF_H
#define CKG_REF_H

#include <stddef.h>
#include <stdint.h>

#include "ckgpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reference of ckg_escape_index: index_out gets ceil(n/1024) ranks;
 * *bad_chunks the number of chunks whose code-15 count differs from
 * prefix[c+1] - prefix[c]. */
ckg_status ckg_ref_escape_index(const ckg_planes *p, uint64_t chunk_weights,
                                const uint32_t *prefix, uint64_t n_chunks,
                                uint32_t *index_out, uint32_t *bad_chunks);

/* Reference of ckg_decode (does not use p->esc_index). */
ckg_status ckg_ref_decode(const ckg_planes *p, uint64_t first, uint64_t count, uint16_t *out);

/* Reference of ckg_gemv in double: y[b*rows + r] = sum_c w*x and
 * yabs[b*rows + r] = sum_c |w*x| (for the tolerance).  x is BF16 bits. */
ckg_status ckg_ref_gemv(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                        const uint16_t *x, int batch, double *y, double *yabs);

/* The stated tolerance of ckg_gemv against ckg_ref_gemv: FP32 sums in any
 * order, products exact: |y - ref| <= 2^-14 * sum|w*x| + 1e-30, plus half a
 * BF16 ulp of the reference (2^-8 |ref|) for BF16 output. */
double ckg_gemv_tolerance(double ref, double ref_abs, int bf16_out);

/* BF16 bits <-> float (round to nearest even; NaN stays NaN). */
float ckg_bf16_to_float(uint16_t w);
uint16_t ckg_float_to_bf16(float f);

#ifdef __cplusplus
}
#endif
#endif
