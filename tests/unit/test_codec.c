/*
 * test_codec.c — unit tests of the codec (codec/ckc.h) with libcheck.
 *
 * The codec is checked against a second, deliberately naive implementation
 * written here from docs/format.md §5 alone (bit-by-bit plane writer and
 * reader, qsort codebook, size formulas), not from ckc_decode.h, and against
 * the original weights.  Every round trip runs once per implementation the
 * CPU has (portable C, AVX-512) via the private switch in ckc_internal.h, and
 * the implementations are compared with each other bit for bit.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckc.h"
#include "ckc_internal.h"
#include "container.h"
#include "test_util.h"

/* xxHash's XXH3-64 compiled here, for baseline x86-64 (its SSE2 loop) or
 * whatever this target's default is: the reference for ckc_hash64, which
 * may take another loop (ckc_hash_avx2.c). */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* ---- data ---------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rnd_unit(void) { return ((rnd() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static void fill_gauss(uint16_t *w, size_t n, double sigma)
{
    for (size_t i = 0; i < n; i++) {
        double r = sqrt(-2.0 * log(rnd_unit())), t = 6.283185307179586 * rnd_unit();
        w[i] = bf16_rne((float)(sigma * r * cos(t)));
    }
}

static const uint16_t specials[] = {
    0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFFF, 0x7FFF, 0x0001, 0x8001,
    0x007F, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x0040, 0x00FF, 0x0100,
};

enum { DATA_GAUSS, DATA_SPECIAL, DATA_UNIFORM, DATA_SINGLE, N_DATA };

static void fill(int kind, uint16_t *w, size_t n)
{
    size_t ns = sizeof specials / sizeof specials[0];
    uint16_t one = (uint16_t)(rnd() & 0xFF80);
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case DATA_GAUSS: fill_gauss(w + i, 1, 0.02); break;
        case DATA_SPECIAL: w[i] = (rnd() & 3) ? specials[rnd() % ns] : (uint16_t)rnd(); break;
        case DATA_UNIFORM: w[i] = (uint16_t)rnd(); break;
        default: w[i] = (uint16_t)(one | (rnd() & 0x7F)); break; /* one K15 symbol */
        }
    }
}

/* ---- reference implementation, from docs/format.md §5 only ------------- */

static int is_k15(uint32_t enc) { return enc == CKC_ENC_K15; }
static unsigned ref_sym(uint32_t enc, uint16_t w) { return is_k15(enc) ? w >> 7 : w >> 8; }
static unsigned ref_lowv(uint32_t enc, uint16_t w) { return is_k15(enc) ? w & 0x7F : w & 0xFF; }
static unsigned ref_lowbits(uint32_t enc) { return is_k15(enc) ? 7 : 8; }
static unsigned ref_symbits(uint32_t enc) { return is_k15(enc) ? 9 : 8; }

/* round_up(ceil(bits/8), 8) + 8 */
static uint64_t ref_plane(uint64_t count, unsigned bits)
{
    uint64_t exact = 0, total = count * bits;
    while (exact * 8 < total)
        exact++;
    while (exact % 8)
        exact++;
    return exact + 8;
}

static void put_bits(uint8_t *s, uint64_t pos, unsigned v, unsigned bits)
{
    for (unsigned b = 0; b < bits; b++, pos++)
        if (v >> b & 1)
            s[pos / 8] |= (uint8_t)(1u << (pos % 8));
}

static unsigned get_bits(const uint8_t *s, uint64_t pos, unsigned bits)
{
    unsigned v = 0;
    for (unsigned b = 0; b < bits; b++, pos++)
        v |= (unsigned)(s[pos / 8] >> (pos % 8) & 1) << b;
    return v;
}

static const uint64_t *sort_hist;
static int by_rank(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    if (sort_hist[x] != sort_hist[y])
        return sort_hist[x] > sort_hist[y] ? -1 : 1;
    return x < y ? -1 : 1;
}

static void ref_codebook(uint32_t enc, const uint64_t *hist, ckc_codebook *cb)
{
    unsigned order[512], ns = is_k15(enc) ? 512 : 256;
    for (unsigned s = 0; s < ns; s++)
        order[s] = s;
    sort_hist = hist;
    qsort(order, ns, sizeof order[0], by_rank);
    memset(cb, 0, sizeof *cb);
    for (unsigned c = 0; c < 15; c++)
        if (hist[order[c]])
            cb->sym[c] = (uint16_t)order[c];
}

typedef struct {
    uint8_t *p[3];
    uint64_t size[3];
    uint64_t n_esc;
    ckc_codebook cb;
} planes;

static void planes_free(planes *t)
{
    for (int k = 0; k < 3; k++)
        free(t->p[k]);
    memset(t, 0, sizeof *t);
}

static int ref_code_of(const ckc_codebook *cb, unsigned sym)
{
    for (int c = 0; c < 15; c++)
        if (cb->sym[c] == sym)
            return c;
    return 15;
}

/* Whole-tensor encode, bit by bit; cb given (or NULL: from the histogram). */
static void ref_encode(uint32_t enc, const ckc_codebook *cb, const uint16_t *w, size_t n, planes *t)
{
    uint64_t hist[512] = {0}, ne = 0;
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < n; i++)
        hist[ref_sym(enc, w[i])]++;
    if (cb)
        t->cb = *cb;
    else
        ref_codebook(enc, hist, &t->cb);
    for (size_t i = 0; i < n; i++)
        ne += ref_code_of(&t->cb, ref_sym(enc, w[i])) == 15;
    t->size[0] = ref_plane(n, 4);
    t->size[1] = ref_plane(n, ref_lowbits(enc));
    t->size[2] = ref_plane(ne, ref_symbits(enc));
    for (int k = 0; k < 3; k++)
        t->p[k] = calloc(t->size[k], 1);
    for (size_t i = 0, k = 0; i < n; i++) {
        unsigned s = ref_sym(enc, w[i]);
        int c = ref_code_of(&t->cb, s);
        put_bits(t->p[0], 4 * (uint64_t)i, (unsigned)c, 4);
        put_bits(t->p[1], ref_lowbits(enc) * (uint64_t)i, ref_lowv(enc, w[i]), ref_lowbits(enc));
        if (c == 15)
            put_bits(t->p[2], ref_symbits(enc) * (uint64_t)k++, s, ref_symbits(enc));
    }
    t->n_esc = ne;
}

/* Decode weights [first, first+n); escapes of the range start at esc_first. */
static void ref_decode(uint32_t enc, const ckc_codebook *cb, const planes *t, uint64_t first,
                       size_t n, uint64_t esc_first, uint16_t *out)
{
    uint64_t k = esc_first;
    for (size_t j = 0; j < n; j++) {
        uint64_t i = first + j;
        unsigned c = get_bits(t->p[0], 4 * i, 4), sym;
        sym = c < 15 ? cb->sym[c] : get_bits(t->p[2], ref_symbits(enc) * k++, ref_symbits(enc));
        out[j] = (uint16_t)(sym << ref_lowbits(enc) | get_bits(t->p[1], ref_lowbits(enc) * i, ref_lowbits(enc)));
    }
}

/* ---- the codec, driven as the container writer would ------------------- */

/* Encode a tensor in chunks of cw weights (last one shorter), chunks written
 * in reverse order to show they are independent; escapes packed in order.
 * prefix[c] receives the escape prefix of chunk c. */
static void codec_encode(ckc_impl impl, uint32_t enc, const ckc_codebook *cb_in, const uint16_t *w,
                         size_t n, size_t cw, planes *t, uint64_t *prefix)
{
    uint64_t hist[512] = {0};
    size_t nc = n ? (n + cw - 1) / cw : 0;
    uint16_t *esc = malloc((n + 1) * sizeof *esc);
    uint64_t *cnt = calloc(nc + 1, sizeof *cnt), tot = 0;

    memset(t, 0, sizeof *t);
    if (cb_in) {
        t->cb = *cb_in;
    } else {
        ckc_histogram(enc, w, n, hist);
        ck_assert_int_eq(ckc_codebook_from_hist(enc, hist, &t->cb), CKC_OK);
    }
    t->size[0] = ckc_code_plane_size(n);
    t->size[1] = ckc_low_plane_size(enc, n);
    t->p[0] = calloc(t->size[0], 1);
    t->p[1] = calloc(t->size[1], 1);
    for (size_t c = nc; c-- > 0;) {
        size_t len = c + 1 < nc ? cw : n - c * cw;
        ck_assert_int_eq(ckc_encode_chunk_impl(impl, enc, &t->cb, w + c * cw, len, c * cw, t->p[0],
                                               t->p[1], esc + c * cw, &cnt[c]),
                         CKC_OK);
        ck_assert_uint_eq(cnt[c], ckc_count_escapes(enc, &t->cb, w + c * cw, len));
    }
    for (size_t c = 0; c < nc; c++) {
        prefix[c] = tot;
        tot += cnt[c];
    }
    t->n_esc = tot;
    t->size[2] = ckc_escape_plane_size(enc, tot);
    t->p[2] = calloc(t->size[2], 1);
    for (size_t c = 0; c < nc; c++)
        ck_assert_int_eq(ckc_pack_escapes(enc, esc + c * cw, cnt[c], prefix[c], t->p[2], t->size[2]), CKC_OK);
    prefix[nc] = tot;
    free(esc);
    free(cnt);
}

static ckc_cplanes cplanes_of(const planes *t)
{
    ckc_cplanes p = {t->p[0], t->p[1], t->p[2], t->size[0], t->size[1], t->size[2]};
    return p;
}

static void assert_same_planes(const planes *a, const planes *b, const char *what)
{
    ck_assert_msg(!memcmp(&a->cb, &b->cb, sizeof a->cb), "%s: codebooks differ", what);
    ck_assert_msg(a->n_esc == b->n_esc, "%s: %llu vs %llu escapes", what,
                  (unsigned long long)a->n_esc, (unsigned long long)b->n_esc);
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(a->size[k] == b->size[k], "%s: plane %d size %llu vs %llu", what, k,
                      (unsigned long long)a->size[k], (unsigned long long)b->size[k]);
        uint64_t i = 0; /* one check per plane: check's asserts are slow */
        while (i < a->size[k] && a->p[k][i] == b->p[k][i])
            i++;
        ck_assert_msg(i == a->size[k], "%s: plane %d byte %llu: %02x vs %02x", what, k,
                      (unsigned long long)i, a->p[k][i], b->p[k][i]);
    }
}

static void assert_same_words(const uint16_t *a, const uint16_t *b, size_t n, const char *what)
{
    size_t i = 0;
    while (i < n && a[i] == b[i])
        i++;
    ck_assert_msg(i == n, "%s: weight %zu: %04x vs %04x", what, i, a[i], b[i]);
}

static const ckc_impl impls[] = {CKC_IMPL_PORTABLE, CKC_IMPL_AVX512, CKC_IMPL_AVX2};
static const uint32_t encs[] = {CKC_ENC_K15, CKC_ENC_BSPLIT};

/* loop index -> (impl, enc); returns 0 (skip) if impl is not available. */
static int pick(int i, ckc_impl *impl, uint32_t *enc)
{
    *impl = impls[i / 2];
    *enc = encs[i % 2];
    if (!ckc_impl_available(*impl)) {
        fprintf(stderr, "note: %s not available on this CPU, skipped\n", ckc_impl_name(*impl));
        return 0;
    }
    return 1;
}

/* Encode with the codec and the reference, compare the planes, decode each
 * chunk with the codec and the reference, compare with the original. */
static void round_trip(ckc_impl impl, uint32_t enc, const ckc_codebook *cb, const uint16_t *w,
                       size_t n, size_t cw)
{
    char what[96];
    planes t, r;
    uint64_t *prefix = calloc(n / cw + 2, sizeof *prefix);
    uint16_t *out = malloc((n + 1) * 2), *ref = malloc((n + 1) * 2);
    ckc_cplanes p;

    snprintf(what, sizeof what, "%s/%s n=%zu chunk=%zu", ckc_impl_name(impl), ckc_encoding_name(enc), n, cw);
    codec_encode(impl, enc, cb, w, n, cw, &t, prefix);
    ref_encode(enc, cb, w, n, &r);
    assert_same_planes(&t, &r, what);
    p = cplanes_of(&t);
    memset(out, 0xA5, (n + 1) * 2);
    for (size_t c = 0; c * cw < n; c++) {
        size_t len = (c + 1) * cw <= n ? cw : n - c * cw;
        ck_assert_msg(ckc_decode_chunk_impl(impl, enc, &t.cb, &p, c * cw, len, prefix[c],
                                            prefix[c + 1] - prefix[c], out + c * cw) == CKC_OK,
                      "%s: chunk %zu", what, c);
        ref_decode(enc, &t.cb, &r, c * cw, len, prefix[c], ref + c * cw);
    }
    assert_same_words(out, w, n, what);
    assert_same_words(ref, w, n, what);
    ck_assert_msg(out[n] == 0xA5A5, "%s: wrote past the chunk", what);
    planes_free(&t);
    planes_free(&r);
    free(prefix);
    free(out);
    free(ref);
}

/* ---- tests --------------------------------------------------------------- */

START_TEST(test_names)
{
    ck_assert_str_eq(ckc_status_name(CKC_OK), "ok");
    ck_assert_str_eq(ckc_status_name(CKC_ERR_CORRUPT), "corrupt data");
    for (int a = 0; a <= 7; a++)
        for (int b = a + 1; b <= 7; b++)
            ck_assert_str_ne(ckc_status_name((ckc_status)a), ckc_status_name((ckc_status)b));
    ck_assert_str_eq(ckc_encoding_name(CKC_ENC_RAW), "raw");
    ck_assert_str_eq(ckc_encoding_name(CKC_ENC_ZSTD), "zstd");
    ck_assert_str_eq(ckc_encoding_name(CKC_ENC_K15), "k15");
    ck_assert_str_eq(ckc_encoding_name(CKC_ENC_BSPLIT), "bytesplit");
    ck_assert_str_eq(ckc_encoding_name(CKC_ENC_ARCHIVE), "archive");
    ck_assert_str_eq(ckc_encoding_name(5), "unknown");
}
END_TEST

START_TEST(test_plane_sizes)
{
    /* Hand-computed values from §5.1. */
    ck_assert_uint_eq(ckc_code_plane_size(0), 8);
    ck_assert_uint_eq(ckc_code_plane_size(1), 16);
    ck_assert_uint_eq(ckc_code_plane_size(16), 16);
    ck_assert_uint_eq(ckc_code_plane_size(17), 24);
    ck_assert_uint_eq(ckc_low_plane_size(CKC_ENC_K15, 8), 16);
    ck_assert_uint_eq(ckc_low_plane_size(CKC_ENC_K15, 10), 24);
    ck_assert_uint_eq(ckc_low_plane_size(CKC_ENC_BSPLIT, 8), 16);
    ck_assert_uint_eq(ckc_escape_plane_size(CKC_ENC_K15, 7), 16);
    ck_assert_uint_eq(ckc_escape_plane_size(CKC_ENC_K15, 8), 24);
    ck_assert_uint_eq(ckc_escape_plane_size(CKC_ENC_BSPLIT, 0), 8);
    for (uint64_t n = 0; n < 3000; n++) {
        ck_assert_uint_eq(ckc_code_plane_size(n), ref_plane(n, 4));
        ck_assert_uint_eq(ckc_low_plane_size(CKC_ENC_K15, n), ref_plane(n, 7));
        ck_assert_uint_eq(ckc_low_plane_size(CKC_ENC_BSPLIT, n), ref_plane(n, 8));
        ck_assert_uint_eq(ckc_escape_plane_size(CKC_ENC_K15, n), ref_plane(n, 9));
        ck_assert_uint_eq(ckc_escape_plane_size(CKC_ENC_BSPLIT, n), ref_plane(n, 8));
    }
    ck_assert_uint_eq(ckc_low_plane_size(CKC_ENC_K15, 1ull << 40), (7ull << 37) + 8);
    ck_assert_uint_eq(ckc_escape_plane_size(CKC_ENC_K15, (1ull << 40) + 1), (9ull << 37) + 16);
}
END_TEST

START_TEST(test_histogram)
{
    enum { N = 10007 };
    uint16_t *w = malloc(N * 2);
    uint64_t h[512] = {0}, ref[512] = {0};
    for (int e = 0; e < 2; e++) {
        uint32_t enc = encs[e];
        fill(DATA_UNIFORM, w, N);
        memset(h, 0, sizeof h);
        memset(ref, 0, sizeof ref);
        for (size_t i = 0; i < N; i++)
            ref[ref_sym(enc, w[i])] += 2;
        ckc_histogram(enc, w, 5003, h); /* accumulates: count in two parts, then again */
        ckc_histogram(enc, w + 5003, N - 5003, h);
        ckc_histogram(enc, w, N, h);
        for (int s = 0; s < 512; s++)
            ck_assert_uint_eq(h[s], ref[s]);
    }
    free(w);
}
END_TEST

START_TEST(test_codebook)
{
    uint64_t h[512] = {0};
    ckc_codebook cb, ref;

    /* Ties: smaller symbol first; fewer than 15 used: zeros after. */
    h[300] = 5, h[7] = 9, h[100] = 5, h[2] = 1;
    ck_assert_int_eq(ckc_codebook_from_hist(CKC_ENC_K15, h, &cb), CKC_OK);
    ck_assert_uint_eq(cb.sym[0], 7);
    ck_assert_uint_eq(cb.sym[1], 100);
    ck_assert_uint_eq(cb.sym[2], 300);
    ck_assert_uint_eq(cb.sym[3], 2);
    for (int c = 4; c < 16; c++)
        ck_assert_uint_eq(cb.sym[c], 0);
    ck_assert_int_eq(ckc_codebook_from_hist(CKC_ENC_RAW, h, &cb), CKC_ERR_ENCODING);
    ck_assert_int_eq(ckc_codebook_from_hist(CKC_ENC_ZSTD, h, &cb), CKC_ERR_ENCODING);
    memset(h, 0, sizeof h);
    ck_assert_int_eq(ckc_codebook_from_hist(CKC_ENC_BSPLIT, h, &cb), CKC_OK);
    for (int c = 0; c < 16; c++)
        ck_assert_uint_eq(cb.sym[c], 0);
    /* Random histograms with many ties against the qsort reference. */
    for (int it = 0; it < 300; it++) {
        uint32_t enc = encs[it % 2];
        unsigned ns = is_k15(enc) ? 512 : 256;
        for (unsigned s = 0; s < ns; s++)
            h[s] = (rnd() % 3 == 0) ? rnd() % (it % 7 + 1) : 0;
        ck_assert_int_eq(ckc_codebook_from_hist(enc, h, &cb), CKC_OK);
        ref_codebook(enc, h, &ref);
        for (int c = 0; c < 16; c++)
            ck_assert_msg(cb.sym[c] == ref.sym[c], "iter %d code %d: %u vs %u", it, c, cb.sym[c], ref.sym[c]);
        ck_assert_int_eq(ckc_codebook_check(enc, &cb), CKC_OK);
    }
    /* Validation of codebooks read from a file. */
    memset(&cb, 0, sizeof cb);
    cb.sym[14] = 511;
    ck_assert_int_eq(ckc_codebook_check(CKC_ENC_K15, &cb), CKC_OK);
    ck_assert_int_eq(ckc_codebook_check(CKC_ENC_BSPLIT, &cb), CKC_ERR_CORRUPT);
    cb.sym[14] = 255;
    ck_assert_int_eq(ckc_codebook_check(CKC_ENC_BSPLIT, &cb), CKC_OK);
    cb.sym[3] = 512;
    ck_assert_int_eq(ckc_codebook_check(CKC_ENC_K15, &cb), CKC_ERR_CORRUPT);
    cb.sym[3] = 0;
    cb.sym[15] = 1;
    ck_assert_int_eq(ckc_codebook_check(CKC_ENC_K15, &cb), CKC_ERR_CORRUPT);
    cb.sym[15] = 0;
    ck_assert_int_eq(ckc_codebook_check(CKC_ENC_RAW, &cb), CKC_ERR_CORRUPT);
}
END_TEST

static const size_t lengths[] = {0, 1, 7, 8, 9, 31, 32, 33, 65535, 65536 + 3};

/* Loop index: impl x enc. Every data kind, every length, one chunk of 64 Ki. */
START_TEST(test_round_trip)
{
    ckc_impl impl;
    uint32_t enc;
    uint16_t *w = malloc((65536 + 8) * 2);
    if (!pick(_i, &impl, &enc))
        goto done;
    for (int kind = 0; kind < N_DATA; kind++)
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            fill(kind, w, lengths[l]);
            round_trip(impl, enc, NULL, w, lengths[l], 65536);
        }
done:
    free(w);
}
END_TEST

/* Every weight escapes: a codebook of symbols absent from the data. */
START_TEST(test_all_escape)
{
    ckc_impl impl;
    uint32_t enc;
    ckc_codebook cb = {{0}};
    enum { N = 4099 };
    uint16_t *w = malloc(N * 2);
    planes t;
    uint64_t prefix[2];
    if (!pick(_i, &impl, &enc))
        goto done;
    for (int c = 0; c < 15; c++)
        cb.sym[c] = (uint16_t)(is_k15(enc) ? 0x1F0 + c : 0xF0 + c);
    for (size_t i = 0; i < N; i++)
        w[i] = (uint16_t)(rnd() % (is_k15(enc) ? 0xF000 : 0xEF00));
    codec_encode(impl, enc, &cb, w, N, N, &t, prefix);
    ck_assert_uint_eq(t.n_esc, N);
    for (uint64_t i = 0; i < t.size[0]; i++)
        ck_assert_uint_eq(t.p[0][i], i < N / 2 ? 0xFF : i == N / 2 ? 0x0F : 0);
    planes_free(&t);
    round_trip(impl, enc, &cb, w, N, N);
    round_trip(impl, enc, &cb, w, N, 64);
done:
    free(w);
}
END_TEST

/* Chunks of several sizes at offsets, encoded out of order and assembled,
 * must give the same planes as a one-chunk encode; any 8-aligned range
 * decodes on its own given its escape prefix. */
START_TEST(test_chunks)
{
    static const size_t cws[] = {8, 16, 24, 40, 1000, 4096, 65536};
    ckc_impl impl;
    uint32_t enc;
    enum { N = 70001 };
    uint16_t *w = malloc(N * 2), *out = malloc(N * 2), *ref = malloc(N * 2);
    uint64_t *pre1 = calloc(N / 8 + 2, 8), *pre = calloc(N / 8 + 2, 8);
    planes whole, t;
    if (!pick(_i, &impl, &enc))
        goto done;
    fill(DATA_GAUSS, w, N);
    for (size_t i = 0; i < N; i += 97)
        w[i] = (uint16_t)rnd(); /* extra escapes, some in every chunk size */
    codec_encode(CKC_IMPL_PORTABLE, enc, NULL, w, N, N, &whole, pre1);
    for (size_t k = 0; k < sizeof cws / sizeof cws[0]; k++) {
        char what[64];
        snprintf(what, sizeof what, "%s/%s chunk %zu", ckc_impl_name(impl), ckc_encoding_name(enc), cws[k]);
        codec_encode(impl, enc, NULL, w, N, cws[k], &t, pre);
        assert_same_planes(&t, &whole, what);
        planes_free(&t);
    }
    /* Random 8-aligned ranges of the whole-tensor planes. */
    {
        ckc_cplanes p = cplanes_of(&whole);
        uint64_t *before = calloc(N + 1, 8); /* escapes among w[0..i) */
        for (size_t i = 0; i < N; i++)
            before[i + 1] = before[i] + (ref_code_of(&whole.cb, ref_sym(enc, w[i])) == 15);
        for (int it = 0; it < 300; it++) {
            uint64_t a = (rnd() % (N / 8)) * 8, b = a + rnd() % (N - a + 1);
            if (it % 4 == 0)
                b = N;
            uint64_t e0 = before[a], ec = before[b] - before[a];
            ck_assert_int_eq(ckc_decode_chunk_impl(impl, enc, &whole.cb, &p, a, b - a, e0, ec, out), CKC_OK);
            ref_decode(enc, &whole.cb, &whole, a, b - a, e0, ref);
            assert_same_words(out, w + a, b - a, "range");
            assert_same_words(ref, w + a, b - a, "range (reference)");
        }
        free(before);
    }
    planes_free(&whole);
done:
    free(w);
    free(out);
    free(ref);
    free(pre1);
    free(pre);
}
END_TEST

/* Copy a plane into a heap block of exactly `size` bytes so that ASan
 * catches any read past what the decoder was told it may read. */
static uint8_t *exact_copy(const uint8_t *p, uint64_t size)
{
    uint8_t *q = malloc(size ? size : 1);
    memcpy(q, p, size);
    return q;
}

static ckc_status decode_exact(ckc_impl impl, uint32_t enc, const ckc_codebook *cb, const planes *t,
                               const uint64_t size[3], uint64_t first, size_t n, uint64_t e0,
                               uint64_t ec, uint16_t *out)
{
    uint8_t *q[3];
    ckc_status st;
    for (int k = 0; k < 3; k++)
        q[k] = exact_copy(t->p[k], size[k]);
    ckc_cplanes p = {q[0], q[1], q[2], size[0], size[1], size[2]};
    st = ckc_decode_chunk_impl(impl, enc, cb, &p, first, n, e0, ec, out);
    for (int k = 0; k < 3; k++)
        free(q[k]);
    return st;
}

START_TEST(test_corrupt)
{
    ckc_impl impl;
    uint32_t enc;
    enum { N = 1003 };
    uint16_t *w = malloc(N * 2), *out = malloc(N * 2);
    uint64_t pre[2];
    planes t;
    if (!pick(_i, &impl, &enc))
        goto done;
    fill(DATA_GAUSS, w, N);
    for (size_t i = 0; i < N; i += 50) /* rare symbols: escapes, also in the tail */
        w[i] = (uint16_t)((0x40 + i / 50) << 8 | (i & 0xFF));
    w[N - 1] = 0xFFC1;
    codec_encode(impl, enc, NULL, w, N, N, &t, pre);
    uint64_t e = t.n_esc, s[3];
    uint64_t exact[3] = {(N + 1) / 2, is_k15(enc) ? (7 * N + 7) / 8 : N, is_k15(enc) ? (9 * e + 7) / 8 : e};
    ck_assert_uint_ge(e, 10);
    memcpy(s, t.size, sizeof s);
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, s, 0, N, 0, e, out), CKC_OK);
    assert_same_words(out, w, N, "exact copy");
    /* Exact (unpadded) sizes are enough; one byte less is not. */
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, exact, 0, N, 0, e, out), CKC_OK);
    assert_same_words(out, w, N, "exact sizes");
    for (int k = 0; k < 3; k++) {
        uint64_t z[3];
        memcpy(z, exact, sizeof z);
        z[k]--;
        ck_assert_msg(decode_exact(impl, enc, &t.cb, &t, z, 0, N, 0, e, out) == CKC_ERR_CORRUPT,
                      "plane %d one byte short accepted", k);
        z[k] = 0;
        ck_assert_msg(decode_exact(impl, enc, &t.cb, &t, z, 0, N, 0, e, out) == CKC_ERR_CORRUPT,
                      "plane %d empty accepted", k);
    }
    /* Too few escapes, with an escape plane of exactly that many: the
     * decoder must stop at the first extra code 15, wherever it is (ASan
     * sees a read past the copy). */
    for (uint64_t k = 0; k < e; k++) {
        uint64_t z[3] = {exact[0], exact[1], is_k15(enc) ? (9 * k + 7) / 8 : k};
        ck_assert_msg(decode_exact(impl, enc, &t.cb, &t, z, 0, N, 0, k, out) == CKC_ERR_CORRUPT,
                      "%llu of %llu escapes accepted", (unsigned long long)k, (unsigned long long)e);
    }
    /* A multiple of 8 weights with exact planes: the last group's loads
     * must stay inside (the padding is not there). */
    {
        uint64_t k = 0, z[3];
        for (size_t i = 0; i < 1000; i++)
            k += ref_code_of(&t.cb, ref_sym(enc, w[i])) == 15;
        z[0] = 500, z[1] = is_k15(enc) ? 875 : 1000, z[2] = is_k15(enc) ? (9 * k + 7) / 8 : k;
        ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, z, 0, 1000, 0, k, out), CKC_OK);
        assert_same_words(out, w, 1000, "exact 1000");
    }
    /* Escape counts that do not match the code-15 entries. */
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, exact, 0, N, 0, e - 1, out), CKC_ERR_CORRUPT);
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, s, 0, N, 0, e + 1, out), CKC_ERR_CORRUPT);
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, s, 0, N, 0, 0, out), CKC_ERR_CORRUPT);
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, exact, 0, 512, 0, e, out), CKC_ERR_CORRUPT);
    /* Escape range past the plane. */
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, exact, 0, N, 1, e, out), CKC_ERR_CORRUPT);
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, s, 0, N, UINT64_MAX - 2, e, out), CKC_ERR_CORRUPT);
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, s, 0, N, 0, UINT64_MAX, out), CKC_ERR_CORRUPT);
    {
        uint64_t z[3] = {s[0], s[1], 0}; /* esc_first + esc_count wraps to 0 */
        ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, z, 0, N, 5, UINT64_MAX - 4, out), CKC_ERR_CORRUPT);
    }
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, s, 0, N, 2, N + 1, out), CKC_ERR_CORRUPT);
    /* Weight range past the planes. */
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, exact, 8, N, 0, e, out), CKC_ERR_CORRUPT);
    ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, s, UINT64_MAX - 7, 16, 0, 0, out), CKC_ERR_CORRUPT);
    /* Bad codebooks, arguments, encodings. */
    {
        ckc_codebook bad = t.cb;
        bad.sym[5] = is_k15(enc) ? 512 : 256;
        ck_assert_int_eq(decode_exact(impl, enc, &bad, &t, s, 0, N, 0, e, out), CKC_ERR_CORRUPT);
        bad = t.cb;
        bad.sym[15] = 3;
        ck_assert_int_eq(decode_exact(impl, enc, &bad, &t, s, 0, N, 0, e, out), CKC_ERR_CORRUPT);
        ck_assert_int_eq(decode_exact(impl, CKC_ENC_RAW, &t.cb, &t, s, 0, N, 0, e, out), CKC_ERR_ENCODING);
        ck_assert_int_eq(decode_exact(impl, 9, &t.cb, &t, s, 0, N, 0, e, out), CKC_ERR_ENCODING);
        ck_assert_int_eq(decode_exact(impl, enc, &t.cb, &t, s, 4, 8, 0, 0, out), CKC_ERR_ARG);
        uint64_t ne;
        ck_assert_int_eq(ckc_encode_chunk(enc, &t.cb, w, 8, 12, t.p[0], t.p[1], (uint16_t *)out, &ne), CKC_ERR_ARG);
        ck_assert_int_eq(ckc_encode_chunk(CKC_ENC_RAW, &t.cb, w, 8, 0, t.p[0], t.p[1], (uint16_t *)out, &ne), CKC_ERR_ARG);
    }
    planes_free(&t);
done:
    free(w);
    free(out);
}
END_TEST

/* A chunk's encode writes exactly its own bytes of the code and low planes
 * (neighbouring chunks are encoded concurrently) and overwrites, not ORs. */
START_TEST(test_encode_bytes)
{
    ckc_impl impl;
    uint32_t enc;
    enum { N = 1003 };
    uint16_t w[N], esc[N];
    uint8_t codes[N], low[N + 8];
    planes r;
    if (!pick(_i, &impl, &enc))
        return;
    fill(DATA_SPECIAL, w, N);
    ref_encode(enc, NULL, w, N, &r);
    for (int it = 0; it < 300; it++) {
        uint64_t first = (rnd() % (N / 8)) * 8, ne;
        size_t n = it % 2 ? N - first : rnd() % (N - first + 1);
        if (first + n != N)
            n -= n % 8; /* only the tensor's last chunk may be partial */
        uint64_t c0 = first / 2, c1 = (first + n + 1) / 2, i;
        ckp_span sp;
        ckp_bf16_span(enc, first, first + n, 0, 0, &sp);
        uint64_t l0 = sp.off[1], l1 = sp.end[1];
        memset(codes, 0xAA, sizeof codes);
        memset(low, 0xAA, sizeof low);
        ck_assert_int_eq(ckc_encode_chunk_impl(impl, enc, &r.cb, w + first, n, first, codes, low, esc, &ne), CKC_OK);
        for (i = 0; i < sizeof codes; i++)
            if (codes[i] != (i >= c0 && i < c1 ? r.p[0][i] : 0xAA))
                break;
        ck_assert_msg(i == sizeof codes, "code byte %llu (chunk %llu+%zu)", (unsigned long long)i,
                      (unsigned long long)first, n);
        for (i = 0; i < sizeof low; i++)
            if (low[i] != (i >= l0 && i < l1 ? r.p[1][i] : 0xAA))
                break;
        ck_assert_msg(i == sizeof low, "low byte %llu (chunk %llu+%zu)", (unsigned long long)i,
                      (unsigned long long)first, n);
    }
    planes_free(&r);
}
END_TEST

/* Random planes, codebooks and ranges: only OK or CORRUPT, never a crash
 * (ASan), implementations agree, and OK output equals the reference. */
START_TEST(test_fuzz_decode)
{
    ckc_impl impl;
    uint32_t enc;
    uint16_t out[700], out2[700], ref[700];
    int n_ok = 0;
    if (!pick(_i, &impl, &enc))
        return;
    for (int it = 0; it < 4000; it++) {
        planes t;
        memset(&t, 0, sizeof t);
        uint64_t size[3];
        size_t n = rnd() % 600;
        uint64_t first = (rnd() % 40) * 8, e0 = rnd() % 16, ec = rnd() % (n / 4 + 2);
        unsigned ns = is_k15(enc) ? 512 : 256;
        for (int k = 0; k < 3; k++) {
            size[k] = rnd() % 800;
            t.p[k] = malloc(size[k] ? size[k] : 1);
            for (uint64_t i = 0; i < size[k]; i++) /* biased to few escapes */
                t.p[k][i] = (uint8_t)(k == 0 && rnd() % 8 ? rnd() % 0xEE : rnd());
        }
        for (int c = 0; c < 15; c++)
            t.cb.sym[c] = (uint16_t)(rnd() % ns);
        if (it % 2 && (first + n + 1) / 2 <= size[0]) { /* often the right count */
            ec = 0;
            for (uint64_t i = first; i < first + n; i++)
                ec += (t.p[0][i / 2] >> (i % 2 * 4) & 15) == 15;
            ec += it % 7 == 1; /* sometimes one too many */
        }
        ckc_cplanes p = {t.p[0], t.p[1], t.p[2], size[0], size[1], size[2]};
        ckc_status st = ckc_decode_chunk_impl(impl, enc, &t.cb, &p, first, n, e0, ec, out);
        ckc_status st2 = ckc_decode_chunk_impl(CKC_IMPL_PORTABLE, enc, &t.cb, &p, first, n, e0, ec, out2);
        ck_assert_msg(st == CKC_OK || st == CKC_ERR_CORRUPT, "status %d", st);
        ck_assert_int_eq(st, st2);
        if (st == CKC_OK) {
            n_ok++;
            t.size[0] = size[0], t.size[1] = size[1], t.size[2] = size[2];
            ref_decode(enc, &t.cb, &t, first, n, e0, ref);
            assert_same_words(out, ref, n, "fuzz");
            assert_same_words(out2, ref, n, "fuzz portable");
        }
        for (int k = 0; k < 3; k++)
            free(t.p[k]);
    }
    ck_assert_msg(n_ok > 500, "fuzz reached the decoder only %d times", n_ok);
}
END_TEST

/* 9-bit escapes of adjacent chunks share bytes: packed call by call they
 * must equal the reference stream; too small a plane is refused. */
START_TEST(test_pack_escapes)
{
    static const uint64_t counts[] = {1, 2, 3, 0, 5, 7, 8, 1, 9, 13, 1};
    uint16_t syms[64];
    uint8_t esc[64], ref[64];
    uint64_t tot = 0;
    for (int e = 0; e < 2; e++) {
        uint32_t enc = encs[e];
        unsigned bits = ref_symbits(enc);
        /* Hand-checked: 0x1FF then 0x001 share byte 1 (K15). */
        memset(esc, 0, sizeof esc);
        syms[0] = is_k15(enc) ? 0x1FF : 0xFF;
        syms[1] = 1;
        ck_assert_int_eq(ckc_pack_escapes(enc, syms, 1, 0, esc, 16), CKC_OK);
        ck_assert_int_eq(ckc_pack_escapes(enc, syms + 1, 1, 1, esc, 16), CKC_OK);
        ck_assert_uint_eq(esc[0], 0xFF);
        ck_assert_uint_eq(esc[1], is_k15(enc) ? 0x03 : 0x01);
        ck_assert_uint_eq(esc[2], 0);
        /* Many boundaries at every bit phase. */
        for (int it = 0; it < 50; it++) {
            memset(esc, 0, sizeof esc);
            memset(ref, 0, sizeof ref);
            tot = 0;
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                for (uint64_t k = 0; k < counts[c]; k++) {
                    syms[k] = (uint16_t)(rnd() % (1u << bits));
                    put_bits(ref, (tot + k) * bits, syms[k], bits);
                }
                ck_assert_int_eq(ckc_pack_escapes(enc, syms, counts[c], tot, esc, sizeof esc), CKC_OK);
                tot += counts[c];
            }
            ck_assert_mem_eq(esc, ref, sizeof esc);
        }
        /* Capacity: exactly enough fits, one byte less does not. */
        for (uint64_t k = 0; k < tot; k++)
            syms[k] = (uint16_t)(rnd() % (1u << bits));
        uint64_t need = (tot * bits + 7) / 8;
        ck_assert_int_eq(ckc_pack_escapes(enc, syms, tot, 0, esc, need), CKC_OK);
        ck_assert_int_eq(ckc_pack_escapes(enc, syms, tot, 0, esc, need - 1), CKC_ERR_CAPACITY);
        ck_assert_int_eq(ckc_pack_escapes(enc, syms, 1, UINT64_MAX - 1, esc, 64), CKC_ERR_CAPACITY);
        syms[0] = (uint16_t)(1u << bits);
        ck_assert_int_eq(ckc_pack_escapes(enc, syms, 1, 0, esc, 64), CKC_ERR_ARG);
        ck_assert_int_eq(ckc_pack_escapes(CKC_ENC_ZSTD, syms, 1, 0, esc, 64), CKC_ERR_ARG);
    }
}
END_TEST

/* The vector and the portable paths give identical planes, escapes and
 * decoded words on the same input (the round trips compare each with the
 * reference too; this also covers lengths around the 32-weight blocks). */
START_TEST(test_impls_agree)
{
    uint32_t enc = encs[_i];
    uint16_t *w = malloc(3000 * 2);
    if (!ckc_impl_available(CKC_IMPL_AVX512)) {
        fprintf(stderr, "note: avx512 not available, impl comparison skipped\n");
        goto done;
    }
    for (size_t n = 0; n < 3000; n += 1 + n / 3) {
        planes a, b;
        uint64_t pa[400], pb[400];
        fill((int)(n % N_DATA), w, n);
        codec_encode(CKC_IMPL_PORTABLE, enc, NULL, w, n, 64 + 8 * (n % 5), &a, pa);
        codec_encode(CKC_IMPL_AVX512, enc, NULL, w, n, 64 + 8 * (n % 5), &b, pb);
        assert_same_planes(&a, &b, "portable vs avx512");
        planes_free(&a);
        planes_free(&b);
    }
done:
    free(w);
}
END_TEST

/* The helpers of ckc_decode.h (which the GPU kernels use) read the planes
 * the way the reference does. */
START_TEST(test_decode_header)
{
    uint32_t enc = encs[_i];
    int k15 = is_k15(enc);
    enum { N = 2051 };
    uint16_t w[N];
    planes r;
    fill(DATA_SPECIAL, w, N);
    ref_encode(enc, NULL, w, N, &r);
    ck_assert_uint_eq(ckc_low_bits(k15), ref_lowbits(enc));
    for (uint64_t i = 0, bad = N; i < N; i++) {
        unsigned lo = get_bits(r.p[1], ref_lowbits(enc) * i, ref_lowbits(enc));
        if (ckc_code_at(r.p[0], i) != get_bits(r.p[0], 4 * i, 4) || ckc_low_at(k15, r.p[1], i) != lo ||
            ckc_bits_at_bounded(r.p[1], r.size[1], ref_lowbits(enc) * i, ref_lowbits(enc)) != lo ||
            ckc_join(k15, ref_sym(enc, w[i]), lo) != w[i])
            bad = i;
        ck_assert_msg(bad == N, "weight %llu", (unsigned long long)i);
    }
    for (uint64_t k = 0; k < r.n_esc; k++)
        ck_assert_uint_eq(ckc_escape_at(k15, r.p[2], k), get_bits(r.p[2], ref_symbits(enc) * k, ref_symbits(enc)));
    if (k15)
        for (uint64_t g = 0; g + 8 <= N; g += 8) {
            unsigned m[8];
            ckc_k15_unpack8(r.p[1] + g / 8 * 7, m);
            for (int k = 0; k < 8; k++)
                ck_assert_uint_eq(m[k], w[g + k] & 0x7Fu);
        }
    planes_free(&r);
}
END_TEST

START_TEST(test_hash)
{
    const char *a = "ckptfs", *b = "ckptfT";
    ck_assert_uint_eq(ckc_hash64("", 0), 0x2D06800538D394C2ull); /* XXH3-64, seed 0, empty */
    ck_assert_uint_ne(ckc_hash64(a, 6), ckc_hash64(b, 6));
    ck_assert_uint_ne(ckc_hash64(a, 6), ckc_hash64(a, 5));
    ck_assert_uint_eq(ckc_hash64(a, 6), ckc_hash64("ckptfs", 6));
}
END_TEST

/* ckc_hash64 (the AVX2 build of XXH3 where the CPU has it) gives xxHash's
 * value at every length of its code paths (0-16, 17-128, 129-240, stripes,
 * 1 KiB blocks, a chunk and odd tails) and at every alignment. */
START_TEST(test_hash_matches_xxhash)
{
    size_t max = (128u << 10) + 1031;
    unsigned char *buf = malloc(max + 8);
    ck_assert_ptr_nonnull(buf);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < max + 8; i++)
        buf[i] = (unsigned char)xorshift64(&seed);
    for (size_t n = 0; n <= 4200; n++)
        ck_assert_uint_eq(ckc_hash64(buf + n % 8, n), XXH3_64bits(buf + n % 8, n));
    for (size_t n = 4200; n <= max; n += 4093)
        for (unsigned at = 0; at < 8; at++)
            ck_assert_uint_eq(ckc_hash64(buf + at, n), XXH3_64bits(buf + at, n));
    ck_assert_uint_eq(ckc_hash64(buf, max), XXH3_64bits(buf, max));
    free(buf);
}
END_TEST

static Suite *codec_suite(void)
{
    Suite *s = suite_create("codec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_plane_sizes);
    tcase_add_test(tc, test_histogram);
    tcase_add_test(tc, test_codebook);
    tcase_add_test(tc, test_pack_escapes);
    tcase_add_test(tc, test_hash);
    tcase_add_test(tc, test_hash_matches_xxhash);
    tcase_add_loop_test(tc, test_round_trip, 0, 6);
    tcase_add_loop_test(tc, test_all_escape, 0, 6);
    tcase_add_loop_test(tc, test_chunks, 0, 6);
    tcase_add_loop_test(tc, test_corrupt, 0, 6);
    tcase_add_loop_test(tc, test_fuzz_decode, 0, 6);
    tcase_add_loop_test(tc, test_encode_bytes, 0, 6);
    tcase_add_loop_test(tc, test_impls_agree, 0, 2);
    tcase_add_loop_test(tc, test_decode_header, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(codec_suite()); }
