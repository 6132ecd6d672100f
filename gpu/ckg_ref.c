/*
 * ckg_ref.c — CPU references of the GPU kernels (see ckg_ref.h).  Slow on
 * purpose: one weight at a time, the format's words, no tricks.
 */
#include "ckg_ref.h"

#include <math.h>
#include <string.h>

float ckg_bf16_to_float(uint16_t w)
{
    uint32_t u = (uint32_t)w << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ckg_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static int planes_ok(const ckg_planes *p)
{
    return p && p->codes && p->low && (p->n_escapes == 0 || p->esc) &&
           (p->encoding == CKC_ENC_K15 || p->encoding == CKC_ENC_BSPLIT);
}

ckg_status ckg_ref_escape_index(const ckg_planes *p, uint64_t chunk_weights,
                                const uint32_t *prefix, uint64_t n_chunks,
                                uint32_t *index_out, uint32_t *bad_chunks)
{
    if (!planes_ok(p) || !prefix || !index_out || !bad_chunks || chunk_weights == 0)
        return CKG_ERR_ARG;
    if (n_chunks != (p->n_weights + chunk_weights - 1) / chunk_weights)
        return CKG_ERR_SHAPE;
    uint64_t k = 0;
    uint32_t bad = 0;
    for (uint64_t c = 0; c < n_chunks; c++) {
        uint64_t a = c * chunk_weights;
        uint64_t b = a + chunk_weights < p->n_weights ? a + chunk_weights : p->n_weights;
        uint64_t k0 = k;
        for (uint64_t i = a; i < b; i++) {
            if (i % CKG_ESC_BLOCK == 0)
                index_out[i / CKG_ESC_BLOCK] = (uint32_t)(prefix[c] + (k - k0));
            k += ckc_code_at(p->codes, i) == CKC_ESCAPE;
        }
        bad += (k - k0) != (uint64_t)(prefix[c + 1] - prefix[c]);
    }
    *bad_chunks = bad;
    return CKG_OK;
}

/* Weight i given its escape rank k (k counts escapes before i). */
static uint16_t ref_weight(const ckg_planes *p, uint64_t i, uint64_t *k)
{
    int k15 = p->encoding == CKC_ENC_K15;
    unsigned c = ckc_code_at(p->codes, i), sym;
    if (c == CKC_ESCAPE) {
        sym = k15 ? ckc_bits_at(p->esc, p->esc_bit0 + *k * CKC_K15_SYM_BITS, CKC_K15_SYM_BITS)
                  : p->esc[*k];
        *k += 1;
    } else {
        sym = p->codebook.sym[c];
    }
    return ckc_join(k15, sym, ckc_low_at(k15, p->low, i));
}

ckg_status ckg_ref_decode(const ckg_planes *p, uint64_t first, uint64_t count, uint16_t *out)
{
    if (!planes_ok(p) || (!out && count))
        return CKG_ERR_ARG;
    if (first > p->n_weights || count > p->n_weights - first)
        return CKG_ERR_SHAPE;
    uint64_t k = 0;
    for (uint64_t i = 0; i < first + count; i++) {
        if (k > p->n_escapes)
            return CKG_ERR_CORRUPT;
        uint16_t w = ref_weight(p, i, &k);
        if (i >= first)
            out[i - first] = w;
    }
    return k <= p->n_escapes ? CKG_OK : CKG_ERR_CORRUPT;
}

ckg_status ckg_ref_gemv(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                        const uint16_t *x, int batch, double *y, double *yabs)
{
    if (!planes_ok(p) || !x || !y || !yabs || batch < 1 || batch > CKG_MAX_BATCH)
        return CKG_ERR_ARG;
    if (cols == 0 || elem_off > p->n_weights || rows > (p->n_weights - elem_off) / cols)
        return CKG_ERR_SHAPE;
    uint64_t k = 0;
    for (uint64_t i = 0; i < elem_off; i++)
        k += ckc_code_at(p->codes, i) == CKC_ESCAPE;
    for (uint64_t r = 0; r < rows; r++) {
        for (int b = 0; b < batch; b++)
            y[(uint64_t)b * rows + r] = yabs[(uint64_t)b * rows + r] = 0;
        for (uint64_t c = 0; c < cols; c++) {
            double w = ckg_bf16_to_float(ref_weight(p, elem_off + r * cols + c, &k));
            for (int b = 0; b < batch; b++) {
                double t = w * ckg_bf16_to_float(x[(uint64_t)b * cols + c]);
                y[(uint64_t)b * rows + r] += t;
                yabs[(uint64_t)b * rows + r] += fabs(t);
            }
        }
    }
    return k <= p->n_escapes ? CKG_OK : CKG_ERR_CORRUPT;
}

double ckg_gemv_tolerance(double ref, double ref_abs, int bf16_out)
{
    double tol = ldexp(ref_abs, -14) + 1e-30;
    if (bf16_out)
        tol += ldexp(fabs(ref), -8);
    return tol;
}
