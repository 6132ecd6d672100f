/*
 * gpu_test_util.h — shared by the gpu tests and bench: random BF16 weights
 * shaped like real ones, and packing them into planes with the codec (the
 * same calls the container writer makes), kept in host memory.
 */
#ifndef GPU_TEST_UTIL_H
#define GPU_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckc.h"
#include "ckgpu.h"

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static uint64_t tu_state = 0x9E3779B97F4A7C15ull;
static inline uint64_t tu_rand(void)
{
    uint64_t z = (tu_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double tu_unif(void) { return (double)(tu_rand() >> 11) * 0x1.0p-53; }
static inline double tu_gauss(void)
{
    double u = tu_unif(), v = tu_unif();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}
static inline uint16_t tu_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* n weights ~ N(0, sigma), plus a fraction `outliers` of random 16-bit
 * patterns (rare symbols: escapes for both encodings) with |w| < 2^21, so
 * that a row of 8192 of them times x ~ N(0, 1) stays far inside FP32's range
 * (random patterns up to 3.4e38 made exact sums overflow to inf). */
#define TU_OUTLIER_MAX_EXP (127 + 20)
static inline void tu_weights(uint16_t *w, uint64_t n, double sigma, double outliers)
{
    for (uint64_t i = 0; i < n; i++) {
        if (tu_unif() < outliers) {
            uint16_t v;
            do
                v = (uint16_t)tu_rand();
            while (((v >> 7) & 0xFF) > TU_OUTLIER_MAX_EXP);
            w[i] = v;
        } else {
            w[i] = tu_bf16((float)(tu_gauss() * sigma));
        }
    }
}

typedef struct {
    uint32_t enc;
    ckc_codebook cb;
    uint64_t n, chunk_w, n_chunks, n_esc;
    uint8_t *codes, *low, *esc;
    uint64_t codes_size, low_size, esc_size;
    uint32_t *prefix;   /* n_chunks + 1 */
} tu_packed;

/* Pack w[0..n) into planes (allocated with 64 extra zero bytes each). */
static inline void tu_pack(uint32_t enc, const uint16_t *w, uint64_t n, uint64_t chunk_w, tu_packed *p)
{
    memset(p, 0, sizeof *p);
    p->enc = enc;
    p->n = n;
    p->chunk_w = chunk_w;
    p->n_chunks = (n + chunk_w - 1) / chunk_w;
    uint64_t hist[512] = {0};
    ckc_histogram(enc, w, n, hist);
    CHECK(ckc_codebook_from_hist(enc, hist, &p->cb) == CKC_OK, "codebook");
    p->codes_size = ckc_code_plane_size(n);
    p->low_size = ckc_low_plane_size(enc, n);
    p->codes = (uint8_t *)calloc(1, p->codes_size + 64);
    p->low = (uint8_t *)calloc(1, p->low_size + 64);
    p->prefix = (uint32_t *)calloc(p->n_chunks + 1, sizeof *p->prefix);
    uint16_t *syms = (uint16_t *)malloc((n + 8) * sizeof *syms);
    CHECK(p->codes && p->low && p->prefix && syms, "alloc");
    uint64_t total = 0;
    for (uint64_t c = 0; c < p->n_chunks; c++) {
        uint64_t a = c * chunk_w, len = n - a < chunk_w ? n - a : chunk_w, ne = 0;
        p->prefix[c] = (uint32_t)total;
        CHECK(ckc_encode_chunk(enc, &p->cb, w + a, len, a, p->codes, p->low, syms + total, &ne) == CKC_OK,
              "encode chunk %llu", (unsigned long long)c);
        total += ne;
    }
    p->prefix[p->n_chunks] = (uint32_t)total;
    p->n_esc = total;
    p->esc_size = ckc_escape_plane_size(enc, total);
    p->esc = (uint8_t *)calloc(1, p->esc_size + 64);
    CHECK(p->esc, "alloc");
    CHECK(ckc_pack_escapes(enc, syms, total, 0, p->esc, p->esc_size) == CKC_OK, "pack escapes");
    free(syms);
}

static inline void tu_free(tu_packed *p)
{
    free(p->codes);
    free(p->low);
    free(p->esc);
    free(p->prefix);
}

/* Host-side ckg_planes view (esc_index may be set by the caller). */
static inline ckg_planes tu_planes(const tu_packed *p)
{
    ckg_planes v;
    memset(&v, 0, sizeof v);
    v.encoding = p->enc;
    v.codebook = p->cb;
    v.n_weights = p->n;
    v.codes = p->codes;
    v.low = p->low;
    v.esc = p->esc;
    v.n_escapes = p->n_esc;
    return v;
}

#endif
