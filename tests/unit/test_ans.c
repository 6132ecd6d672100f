/*
 * test_ans.c — unit tests of the archive encoding (codec/ckc_ans.h).
 *
 * Truth is the original weights: every chunk of every tensor decodes to
 * them, with every implementation this CPU has (portable, AVX2, AVX-512),
 * which must agree bit for bit.  Damage is checked the way the container
 * relies on it: a damaged blob or chunk is refused, or (raw low bits, whose
 * damage only the container's chunk hash can see) decodes to other bytes;
 * never to an error-free copy of the original from damaged input that
 * carries information, and never past the stream (run under ASan by
 * tests/hardening/sanitize.sh).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckc_ans.h"
#include "ckc_ans_internal.h"
#include "test_util.h"

static uint64_t seed = 0x2545F4914F6CDD1Dull;

static double unit(void) { return ((xorshift64(&seed) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static double gauss(void) { return sqrt(-2.0 * log(unit())) * cos(6.283185307179586 * unit()); }

enum { D_COLS, D_ROWS, D_SPECIAL, D_UNIFORM, D_SINGLE, D_FEW, N_D };

/* Weights with a per-column (or per-row) scale, as trained matrices have. */
static void fill(int kind, uint16_t *w, uint64_t n, uint64_t cols)
{
    static const uint16_t sp[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFFF, 0x0001, 0x3F80};
    for (uint64_t i = 0; i < n; i++) {
        uint64_t line = kind == D_COLS ? i % cols : i / cols;
        double scale = 0.02 * (1 + (double)(line * 2654435761u % 97) / 12.0);
        switch (kind) {
        case D_COLS:
        case D_ROWS: w[i] = bf16_rne((float)(scale * gauss())); break;
        case D_SPECIAL: w[i] = (xorshift64(&seed) & 3) ? sp[xorshift64(&seed) % 8] : bf16_rne((float)gauss()); break;
        case D_UNIFORM: w[i] = (uint16_t)xorshift64(&seed); break;
        case D_SINGLE: w[i] = (uint16_t)(0x3C00 | (xorshift64(&seed) & 0x7F)); break;
        default: w[i] = (uint16_t)(0x3C00 | (i % 3) << 7); break;
        }
    }
}

static const ckc_impl impls[] = {CKC_IMPL_PORTABLE, CKC_IMPL_AVX2, CKC_IMPL_AVX512};

static int impl_ok(ckc_impl i)
{
    if (i == CKC_IMPL_AVX512)
        return ckc_ans_avx512_supported();
    return ckc_impl_available(i);
}

#define CHUNK 65536u

typedef struct {
    uint8_t *buf;
    size_t off[64], len[64];
    size_t n_chunks;
} encoded;

/* Encodes every chunk with every encoder this CPU has, each into a buffer
 * of exactly ckc_ans_chunk_bound bytes (ASan sees any store past it), and
 * checks that they write the same bytes; e keeps them. */
static void encode_all(const ckc_ans_plan *p, const uint16_t *w, uint64_t n, uint32_t chunk, encoded *e)
{
    size_t cap = 0, pos = 0;
    e->n_chunks = (n + chunk - 1) / chunk;
    ck_assert_uint_le(e->n_chunks, 64);
    for (size_t c = 0; c < e->n_chunks; c++)
        cap += ckc_ans_chunk_bound(chunk);
    e->buf = malloc(cap);
    for (size_t c = 0; c < e->n_chunks; c++) {
        uint64_t first = c * chunk, m = n - first < chunk ? n - first : chunk;
        size_t bound = ckc_ans_chunk_bound(m), len;
        for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
            uint8_t *dst = malloc(bound);
            if (!impl_ok(impls[k])) {
                free(dst);
                continue;
            }
            ck_assert_int_eq(ckc_ans_encode_chunk_impl(impls[k], p, w + first, m, first, dst, bound, &len), CKC_OK);
            if (k == 0) {
                memcpy(e->buf + pos, dst, len);
                e->len[c] = len;
            } else {
                ck_assert_uint_eq(len, e->len[c]);
                ck_assert_msg(memcmp(dst, e->buf + pos, len) == 0, "chunk %zu: %s encoder writes other bytes", c,
                              ckc_impl_name(impls[k]));
            }
            free(dst);
        }
        e->off[c] = pos;
        pos += e->len[c];
    }
}

/* Every chunk with every implementation equals the original. */
static void check_round_trip(const ckc_ans_plan *p, const uint16_t *w, uint64_t n, uint32_t chunk)
{
    encoded e;
    ckc_ans_tables *t;
    uint16_t *out = malloc((size_t)chunk * 2);
    encode_all(p, w, n, chunk, &e);
    ck_assert_int_eq(ckc_ans_tables_new(ckc_ans_blob(p), ckc_ans_blob_size(p), n, &t), CKC_OK);
    for (size_t c = 0; c < e.n_chunks; c++) {
        uint64_t first = c * chunk, m = n - first < chunk ? n - first : chunk;
        for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
            if (!impl_ok(impls[k]))
                continue;
            memset(out, 0xA5, (size_t)chunk * 2);
            ck_assert_int_eq(ckc_ans_decode_chunk_impl(impls[k], t, e.buf + e.off[c], e.len[c], first, m, out), CKC_OK);
            ck_assert_msg(memcmp(out, w + first, m * 2) == 0, "chunk %zu impl %s differs", c, ckc_impl_name(impls[k]));
        }
    }
    /* all chunks at once (interleaved by fours, then pairs, then alone) */
    ckc_ans_chunk *b = malloc(e.n_chunks * sizeof *b);
    uint16_t *all = malloc(n * 2 + 2);
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!impl_ok(impls[k]))
            continue;
        memset(all, 0xA5, n * 2);
        for (size_t c = 0; c < e.n_chunks; c++) {
            uint64_t first = c * chunk, m = n - first < chunk ? n - first : chunk;
            b[c] = (ckc_ans_chunk){t, e.buf + e.off[c], e.len[c], first, m, all + first, CKC_ERR_ARG};
        }
        ck_assert_int_eq(ckc_ans_decode_chunks_impl(impls[k], b, e.n_chunks), CKC_OK);
        for (size_t c = 0; c < e.n_chunks; c++)
            ck_assert_int_eq(b[c].status, CKC_OK);
        ck_assert_msg(memcmp(all, w, n * 2) == 0, "batch of %zu chunks, impl %s differs", e.n_chunks,
                      ckc_impl_name(impls[k]));
    }
    free(all);
    free(b);
    ckc_ans_tables_free(t);
    free(e.buf);
    free(out);
}

START_TEST(round_trip_forced_modes)
{
    /* cols: a multiple of 16, one that is not, one wider than a chunk */
    static const uint64_t shapes[][2] = {{384, 512}, {100, 700}, {70000, 3}, {48, 37}};
    for (size_t s = 0; s < 4; s++) {
        uint64_t cols = shapes[s][0], n = cols * shapes[s][1];
        uint16_t *w = malloc(n * 2);
        fill(_i % 2 ? D_ROWS : D_COLS, w, n, cols);
        for (unsigned m = 0; m <= CKC_ANS_MAX_MBITS; m++)
            for (unsigned k = 1; k <= 16; k *= 2)
                for (unsigned axis = 0; axis < (k > 1 ? 2u : 1u); axis++) {
                    ckc_ans_plan *p;
                    ckc_ans_choice ch;
                    if ((m + k + axis) % 3 && s) /* a sample of the grid for the smaller shapes */
                        continue;
                    ck_assert_int_eq(ckc_ans_plan_forced(w, n, cols, CKC_ANS_CODED, m, k, axis, &p), CKC_OK);
                    ckc_ans_plan_choice(p, &ch);
                    ck_assert_uint_eq(ch.mbits, m);
                    ck_assert_uint_eq(ch.n_classes, k);
                    check_round_trip(p, w, n, CHUNK);
                    ckc_ans_plan_free(p);
                }
        free(w);
    }
}
END_TEST

START_TEST(round_trip_auto)
{
    static const uint64_t sizes[] = {1, 15, 16, 17, 255, 256, 4099, 65536, 65536 + 48, 200000};
    for (int kind = 0; kind < N_D; kind++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            uint64_t n = sizes[s], cols = n % 16 == 0 ? 16 : 1;
            uint16_t *w = malloc(n * 2);
            ckc_ans_plan *p;
            fill(kind, w, n, cols);
            ck_assert_int_eq(ckc_ans_plan_new(w, n, cols, &p), CKC_OK);
            check_round_trip(p, w, n, CHUNK);
            check_round_trip(p, w, n, 4096); /* other chunk sizes, multiples of 16 */
            ckc_ans_plan_free(p);
            free(w);
        }
}
END_TEST

/* The plan of w (n weights in rows of cols) filled with distribution kind,
 * its choice in *ch. */
static ckc_ans_plan *plan_of(int kind, uint16_t *w, uint64_t n, uint64_t cols, ckc_ans_choice *ch)
{
    ckc_ans_plan *p;
    fill(kind, w, n, cols);
    ck_assert_int_eq(ckc_ans_plan_new(w, n, cols, &p), CKC_OK);
    ckc_ans_plan_choice(p, ch);
    return p;
}

/* The planner codes what pays and stores what does not. */
START_TEST(planner_choices)
{
    uint64_t cols = 384, n = cols * 256;
    uint16_t *w = malloc(n * 2);
    ckc_ans_plan *p;
    ckc_ans_choice ch;

    p = plan_of(D_UNIFORM, w, n, cols, &ch);
    ck_assert_uint_eq(ch.mode, CKC_ANS_RAW);
    ckc_ans_plan_free(p);

    p = plan_of(D_COLS, w, n, cols, &ch);
    ck_assert_uint_eq(ch.mode, CKC_ANS_CODED);
    ck_assert_uint_ge(ch.n_classes, 4); /* 97 distinct column scales: classes pay */
    ck_assert_uint_eq(ch.axis, CKC_ANS_AXIS_COL);
    ck_assert(ch.est_bits / n < 10.6);
    ckc_ans_plan_free(p);

    p = plan_of(D_ROWS, w, n, cols, &ch);
    ck_assert_uint_eq(ch.axis, CKC_ANS_AXIS_ROW);
    ckc_ans_plan_free(p);
    free(w);
}
END_TEST

/* The estimate is the size: chunks + blob within a few bytes per chunk. */
START_TEST(estimate_matches_size)
{
    uint64_t cols = 384, n = cols * 1024;
    uint16_t *w = malloc(n * 2);
    ckc_ans_plan *p;
    ckc_ans_choice ch;
    encoded e;
    double bytes;

    p = plan_of(D_COLS, w, n, cols, &ch);
    encode_all(p, w, n, CHUNK, &e);
    bytes = (double)ckc_ans_blob_size(p);
    for (size_t c = 0; c < e.n_chunks; c++)
        bytes += (double)e.len[c];
    ck_assert_msg(fabs(bytes * 8 - ch.est_bits) < 0.002 * bytes * 8, "estimate %.0f bits, size %.0f bits",
                  ch.est_bits, bytes * 8);
    free(e.buf);
    ckc_ans_plan_free(p);
    free(w);
}
END_TEST

/* One ckc_ans_decode_chunks call over chunks of three tensors (classes and
 * 4 mantissa bits; no context and M = 0; raw), of unequal lengths, with a
 * damaged chunk (a state out of range), a truncated one and a misaligned
 * one among them: those three fail with their own status, every other chunk
 * decodes to its weights, the call returns the first failure. */
START_TEST(batch_mixed)
{
    static const struct {
        int kind;
        uint64_t cols, rows;
        unsigned mode, m, k, axis;
    } ts[3] = {{D_COLS, 384, 400, CKC_ANS_CODED, 4, 16, 0},
               {D_ROWS, 100, 1000, CKC_ANS_CODED, 0, 1, 0},
               {D_UNIFORM, 64, 300, CKC_ANS_RAW, 0, 1, 0}};
    /* (tensor, chunk, damage: 0 none, 1 state, 2 cut, 3 misaligned) */
    static const int jobs[][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 1}, {2, 0, 0}, {0, 1, 0}, {1, 1, 2},
                                  {0, 2, 0}, {1, 1, 0}, {0, 2, 3}, {2, 0, 0}, {0, 1, 0}};
    enum { NJ = sizeof jobs / sizeof jobs[0] };
    uint16_t *w[3], *out[NJ];
    ckc_ans_plan *p[3];
    ckc_ans_tables *t[3];
    encoded e[3];
    ckc_ans_chunk c[NJ];
    uint8_t *src[NJ];

    for (int i = 0; i < 3; i++) {
        uint64_t n = ts[i].cols * ts[i].rows;
        w[i] = malloc(n * 2);
        fill(ts[i].kind, w[i], n, ts[i].cols);
        ck_assert_int_eq(ckc_ans_plan_forced(w[i], n, ts[i].cols, ts[i].mode, ts[i].m, ts[i].k, ts[i].axis, &p[i]),
                         CKC_OK);
        encode_all(p[i], w[i], n, CHUNK, &e[i]);
        ck_assert_int_eq(ckc_ans_tables_new(ckc_ans_blob(p[i]), ckc_ans_blob_size(p[i]), n, &t[i]), CKC_OK);
    }
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!impl_ok(impls[k]))
            continue;
        for (int j = 0; j < NJ; j++) {
            int i = jobs[j][0], ch = jobs[j][1], dmg = jobs[j][2];
            uint64_t n = ts[i].cols * ts[i].rows, first = (uint64_t)ch * CHUNK;
            size_t m = n - first < CHUNK ? n - first : CHUNK, len = e[i].len[ch];
            ck_assert_uint_lt((size_t)ch, e[i].n_chunks);
            src[j] = malloc(len);
            memcpy(src[j], e[i].buf + e[i].off[ch], len);
            if (dmg == 1)
                src[j][3] |= 0x80; /* state 0 >= 2^31 */
            out[j] = malloc(m * 2);
            c[j] = (ckc_ans_chunk){t[i], src[j], dmg == 2 ? len - 2 : len, dmg == 3 ? first + 8 : first, m,
                                   out[j], CKC_OK};
        }
        ck_assert_int_eq(ckc_ans_decode_chunks_impl(impls[k], c, NJ), CKC_ERR_CORRUPT);
        for (int j = 0; j < NJ; j++) {
            int i = jobs[j][0], dmg = jobs[j][2];
            ck_assert_msg(c[j].status == (dmg == 0 ? CKC_OK : dmg == 3 ? CKC_ERR_ARG : CKC_ERR_CORRUPT),
                          "%s: chunk %d: %s", ckc_impl_name(impls[k]), j, ckc_status_name(c[j].status));
            if (!dmg)
                ck_assert_msg(memcmp(out[j], w[i] + (uint64_t)jobs[j][1] * CHUNK, c[j].n * 2) == 0,
                              "%s: chunk %d differs", ckc_impl_name(impls[k]), j);
            free(src[j]);
            free(out[j]);
        }
    }
    ck_assert_int_eq(ckc_ans_decode_chunks(c, 0), CKC_OK);
    ck_assert_int_eq(ckc_ans_decode_chunks(NULL, 1), CKC_ERR_ARG);
    for (int i = 0; i < 3; i++) {
        ckc_ans_tables_free(t[i]);
        ckc_ans_plan_free(p[i]);
        free(e[i].buf);
        free(w[i]);
    }
}
END_TEST

/* A decode of damaged input: refused, or other bytes (for the hash). */
static int damaged_ok(const ckc_ans_tables *t, const uint8_t *src, size_t size, uint64_t first, size_t n,
                      const uint16_t *orig, uint16_t *out)
{
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        ckc_status st;
        if (!impl_ok(impls[k]))
            continue;
        st = ckc_ans_decode_chunk_impl(impls[k], t, src, size, first, n, out);
        if (st == CKC_OK && memcmp(out, orig, n * 2) == 0)
            return 0;
    }
    return 1;
}

START_TEST(damaged_chunks_refused)
{
    uint64_t cols = 64, n = cols * 64; /* one chunk of 4 Ki weights */
    uint16_t *w = malloc(n * 2), *out = malloc(n * 2);
    ckc_ans_plan *p;
    ckc_ans_tables *t;
    encoded e;
    uint8_t *copy;
    size_t refused = 0;

    fill(D_COLS, w, n, cols);
    ck_assert_int_eq(ckc_ans_plan_forced(w, n, cols, CKC_ANS_CODED, 3, 4, 0, &p), CKC_OK);
    encode_all(p, w, n, CHUNK, &e);
    ck_assert_int_eq(ckc_ans_tables_new(ckc_ans_blob(p), ckc_ans_blob_size(p), n, &t), CKC_OK);
    copy = malloc(e.len[0] + 4);
    for (size_t b = 0; b < e.len[0]; b++)
        for (unsigned bit = 0; bit < 8; bit += 3) {
            memcpy(copy, e.buf, e.len[0]);
            copy[b] ^= (uint8_t)(1u << bit);
            ck_assert_msg(damaged_ok(t, copy, e.len[0], 0, n, w, out), "flip of byte %zu bit %u decoded", b, bit);
            refused += ckc_ans_decode_chunk(t, copy, e.len[0], 0, n, out) != CKC_OK;
        }
    /* Most flips of a state or a word are refused by the rANS checks alone
     * (states out of range, words left over or missing, a final state other
     * than L); the rest decode to other bytes, which the chunk hash refuses:
     * a flip can move a slot within a symbol's range, or, within a near-
     * uniform mantissa table, to the next symbol with the same bias. */
    ck_assert_uint_ge(refused, (e.len[0] - ckc_ans_low_bytes(n, 3)) * 3 / 2);
    for (size_t cut = 0; cut < e.len[0]; cut += 1 + cut / 2)
        ck_assert_int_ne(ckc_ans_decode_chunk(t, e.buf, cut, 0, n, out), CKC_OK);
    memcpy(copy, e.buf, e.len[0]);
    copy[e.len[0]] = copy[e.len[0] + 1] = 0;
    ck_assert_int_ne(ckc_ans_decode_chunk(t, copy, e.len[0] + 2, 0, n, out), CKC_OK);
    ck_assert_int_eq(ckc_ans_decode_chunk(t, e.buf, e.len[0], 0, n, out), CKC_OK);
    free(copy);
    free(e.buf);
    ckc_ans_tables_free(t);
    ckc_ans_plan_free(p);
    free(w);
    free(out);
}
END_TEST

START_TEST(damaged_tables_refused)
{
    uint64_t cols = 96, n = cols * 64;
    uint16_t *w = malloc(n * 2), *out = malloc(n * 2);
    ckc_ans_plan *p;
    ckc_ans_tables *t;
    encoded e;
    size_t size;
    uint8_t *blob;

    fill(D_COLS, w, n, cols);
    ck_assert_int_eq(ckc_ans_plan_forced(w, n, cols, CKC_ANS_CODED, 2, 8, 0, &p), CKC_OK);
    encode_all(p, w, n, CHUNK, &e);
    size = ckc_ans_blob_size(p);
    blob = malloc(size + 1);
    for (size_t b = 0; b < size; b++)
        for (unsigned bit = 0; bit < 8; bit++) {
            memcpy(blob, ckc_ans_blob(p), size);
            blob[b] ^= (uint8_t)(1u << bit);
            if (ckc_ans_tables_new(blob, size, n, &t) != CKC_OK)
                continue;
            ck_assert_msg(damaged_ok(t, e.buf, e.len[0], 0, n, w, out), "blob flip %zu.%u decoded", b, bit);
            ckc_ans_tables_free(t);
        }
    for (size_t cut = 0; cut < size; cut++)
        ck_assert_int_eq(ckc_ans_tables_new(ckc_ans_blob(p), cut, n, &t), CKC_ERR_CORRUPT);
    memcpy(blob, ckc_ans_blob(p), size);
    blob[size] = 0;
    ck_assert_int_eq(ckc_ans_tables_new(blob, size + 1, n, &t), CKC_ERR_CORRUPT);
    /* another tensor length breaks the column / row count */
    ck_assert_int_eq(ckc_ans_tables_new(ckc_ans_blob(p), size, n + 1, &t), CKC_ERR_CORRUPT);
    free(blob);
    free(e.buf);
    ckc_ans_plan_free(p);
    free(w);
    free(out);
}
END_TEST

/* Hand-made blobs: each rule of §5.3 on its own. */
START_TEST(blob_rules)
{
    /* coded, M=0, K=1, A=2: symbols 0x78, 0x79, table 4095 + 1 */
    uint8_t ok[] = {1, 0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0x78, 0, 0x79, 0, 0xFF, 0x1F, 1};
    uint8_t b[sizeof ok];
    ckc_ans_tables *t;
    struct { size_t at; uint8_t v; } bad[] = {
        {0, 2}, {1, 5}, {2, 0}, {2, 17}, {3, 1}, {4, 1}, {8, 0}, {9, 1}, {10, 1},
        {14, 0x78}, {13, 2}, {18, 2}, {17, 0x20}, {16, 0xFE}, {17, 0},
    };
    ck_assert_int_eq(ckc_ans_tables_new(ok, sizeof ok, 100, &t), CKC_OK);
    ckc_ans_tables_free(t);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(b, ok, sizeof ok);
        b[bad[k].at] = bad[k].v;
        ck_assert_msg(ckc_ans_tables_new(b, sizeof b, 100, &t) == CKC_ERR_CORRUPT, "case %zu accepted", k);
    }
    /* raw: 12 bytes, all zero but the mode */
    memset(b, 0, 12);
    ck_assert_int_eq(ckc_ans_tables_new(b, 12, 100, &t), CKC_OK);
    ckc_ans_tables_free(t);
    b[5] = 1;
    ck_assert_int_eq(ckc_ans_tables_new(b, 12, 100, &t), CKC_ERR_CORRUPT);
}
END_TEST

/* The encoder refuses weights its plan cannot code, every implementation,
 * in a full group of 16 and in the chunk's last, partial one. */
static void refuses(const ckc_ans_plan *p, const uint16_t *v, size_t n)
{
    uint8_t dst[4096];
    size_t len;
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++)
        if (impl_ok(impls[k]))
            ck_assert_int_eq(ckc_ans_encode_chunk_impl(impls[k], p, v, n, 0, dst, sizeof dst, &len), CKC_ERR_ARG);
}

START_TEST(encoder_refuses_unplanned)
{
    uint16_t w[72], v[72];
    uint8_t dst[1024];
    size_t len;
    ckc_ans_plan *p;
    fill(D_FEW, w, 72, 1);
    ck_assert_int_eq(ckc_ans_plan_forced(w, 72, 0, CKC_ANS_CODED, 1, 1, 0, &p), CKC_OK);
    for (size_t at = 5; at < 72; at += 62) {
        memcpy(v, w, sizeof v);
        v[at] = 0x4000; /* a symbol the tensor does not have */
        refuses(p, v, 72);
    }
    ck_assert_int_eq(ckc_ans_encode_chunk(p, w, 64, 8, dst, sizeof dst, &len), CKC_ERR_ARG);
    ck_assert_int_eq(ckc_ans_encode_chunk(p, w, 64, 0, dst, 100, &len), CKC_ERR_CAPACITY);
    ckc_ans_plan_free(p);

    /* mantissa bits a symbol never had: frequency 0 in its explicit table */
    ck_assert_int_eq(ckc_ans_plan_forced(w, 72, 0, CKC_ANS_CODED, 2, 1, 0, &p), CKC_OK);
    ck_assert_int_eq(ckc_ans_encode_chunk(p, w, 72, 0, dst, sizeof dst, &len), CKC_OK);
    for (size_t at = 5; at < 72; at += 62) {
        memcpy(v, w, sizeof v);
        v[at] |= 0x40;
        refuses(p, v, 72);
    }
    ckc_ans_plan_free(p);

    /* two column classes, each with a symbol of its own: a symbol of the
     * plan in the other class's column has frequency 0 there */
    for (size_t i = 0; i < 72; i++)
        w[i] = i % 2 ? 0x3C80 : 0x3C00;
    ck_assert_int_eq(ckc_ans_plan_forced(w, 72, 2, CKC_ANS_CODED, 0, 2, CKC_ANS_AXIS_COL, &p), CKC_OK);
    ck_assert_int_eq(ckc_ans_encode_chunk(p, w, 72, 0, dst, sizeof dst, &len), CKC_OK);
    for (size_t at = 6; at < 72; at += 64) {
        memcpy(v, w, sizeof v);
        v[at] = 0x3C80;
        refuses(p, v, 72);
    }
    ckc_ans_plan_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ans");
    TCase *tc = tcase_create("ans");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, round_trip_forced_modes, 0, 2);
    tcase_add_test(tc, round_trip_auto);
    tcase_add_test(tc, planner_choices);
    tcase_add_test(tc, estimate_matches_size);
    tcase_add_test(tc, batch_mixed);
    tcase_add_test(tc, damaged_chunks_refused);
    tcase_add_test(tc, damaged_tables_refused);
    tcase_add_test(tc, blob_rules);
    tcase_add_test(tc, encoder_refuses_unplanned);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
