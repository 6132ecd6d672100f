/*
 * fuzz_ans.c — libFuzzer target: the archive decoder (codec/ckc_ans.h) on
 * arbitrary table blobs and chunk streams, and on valid encodings with
 * damage.
 *
 * Input: byte 0 flags (bit 0: build the case from weights: the rest are
 * weights, planned and encoded, then byte 1 says which byte of the stream
 * to flip, if any; else: raw blob and stream), bytes 2-3 the blob length,
 * 4-5 the chunk's weight count (<= 4096), 6 the chunk's first weight / 16,
 * then the blob, then the stream.  Blob and stream each sit in a buffer of
 * exactly their size, so a read past either is an ASan error.
 *
 * Oracles: a blob accepted by ckc_ans_tables_new is accepted by
 * ckc_ans_blob_check and the other way round; every implementation this CPU
 * has reaches the same status and, on success, the same weights as a plain
 * decoder written here from docs/format.md §5.3.2 (which accepts exactly
 * what the spec accepts); a valid, undamaged encoding decodes to its
 * weights.  Each implementation also decodes the stream interleaved with
 * copies of itself less 1-3 bytes (ckc_ans_decode_chunks), with the same
 * oracle for each.
 */
#include "fuzz_util.h"
#include "ckc_ans.h"
#include "ckc_ans_internal.h"

/* §5.3.2, straight from the pseudo-code, on the decoder's own tables
 * (validated by ckc_ans_tables_new): 0 and out, or -1. */
static int ref_decode(const ckc_ans_tables *t, const uint8_t *s, size_t size, uint64_t first, size_t n,
                      uint16_t *out)
{
    uint32_t x[16];
    unsigned m = t->mbits, lb = 7 - m;
    size_t low = (n * lb + 7) / 8, pos = 0, nw;
    if (t->mode == CKC_ANS_RAW) {
        if (size != 2 * n)
            return -1;
        for (size_t j = 0; j < n; j++)
            out[j] = (uint16_t)(s[2 * j] | s[2 * j + 1] << 8);
        return 0;
    }
    if (size < 64 + low || (size - 64 - low) % 2)
        return -1;
    nw = (size - 64 - low) / 2;
    for (int l = 0; l < 16; l++) {
        x[l] = (uint32_t)s[4 * l] | (uint32_t)s[4 * l + 1] << 8 | (uint32_t)s[4 * l + 2] << 16 |
               (uint32_t)s[4 * l + 3] << 24;
        if (x[l] < 32768 || x[l] >= 0x80000000u)
            return -1;
    }
    for (size_t g = 0; g < n; g += 16) {
        size_t r = n - g < 16 ? n - g : 16;
        unsigned a[16];
        for (size_t l = 0; l < r; l++) {
            uint64_t i = first + g + l;
            unsigned k = t->cls ? t->cls[t->axis ? i / t->n_cols : i % t->n_cols] : 0;
            uint32_t e = t->exp_dec[k * 4096 + (x[l] & 4095)], f = (e >> 20) + 1, bias = (e >> 8) & 4095;
            x[l] = f * (x[l] >> 12) + bias;
            if (x[l] < 32768) {
                if (pos == nw)
                    return -1;
                x[l] = x[l] << 16 | s[64 + low + 2 * pos] | (uint32_t)s[64 + low + 2 * pos + 1] << 8;
                pos++;
            }
            a[l] = e & 255;
        }
        for (size_t l = 0; l < r; l++) {
            uint32_t e = t->man_dec[a[l] * 256 + (x[l] & 255)];
            if (m) {
                x[l] = ((e & 255) + 1) * (x[l] >> 8) + ((e >> 8) & 255);
                if (x[l] < 32768) {
                    if (pos == nw)
                        return -1;
                    x[l] = x[l] << 16 | s[64 + low + 2 * pos] | (uint32_t)s[64 + low + 2 * pos + 1] << 8;
                    pos++;
                }
            }
            unsigned lo = 0;
            for (unsigned b = 0; b < lb; b++) {
                size_t bit = (g + l) * lb + b;
                lo |= (unsigned)((s[64 + bit / 8] >> (bit % 8)) & 1) << b;
            }
            out[g + l] = (uint16_t)((e >> 16) | lo);
        }
    }
    if (n * lb % 8 && s[64 + low - 1] >> (n * lb % 8))
        return -1;
    for (int l = 0; l < 16; l++)
        if (x[l] != 32768)
            return -1;
    return pos == nw ? 0 : -1;
}

/* The stream decoded interleaved with three copies of itself less its last
 * 1, 2 and 3 bytes, each in a buffer of its exact size, by one
 * ckc_ans_decode_chunks call (the vector loops' run of 4 streams): each
 * reaches the reference's status and weights, and the call returns the
 * first failure. */
#define NB 4
static void batch_check(ckc_impl impl, const ckc_ans_tables *t, const uint8_t *s, size_t ssize, uint64_t first,
                        size_t n)
{
    ckc_ans_chunk c[NB];
    int ref_ok[NB];
    uint16_t *ref[NB], *out[NB];
    ckc_status want = CKC_OK;
    for (int i = 0; i < NB; i++) {
        size_t len = ssize > (size_t)i ? ssize - (size_t)i : 0;
        uint8_t *copy = malloc(len + 1);
        memcpy(copy, s, len);
        ref[i] = malloc((n + 1) * 2);
        out[i] = malloc((n + 1) * 2);
        ref_ok[i] = ref_decode(t, copy, len, first, n, ref[i]) == 0;
        c[i] = (ckc_ans_chunk){t, copy, len, first, n, out[i], CKC_OK};
    }
    ckc_status st = ckc_ans_decode_chunks_impl(impl, c, NB);
    for (int i = 0; i < NB; i++) {
        if ((c[i].status == CKC_OK) != ref_ok[i] || (ref_ok[i] && memcmp(out[i], ref[i], n * 2))) {
            fprintf(stderr, "%s, chunk %d of %d: %s, reference %s\n", ckc_impl_name(impl), i, NB,
                    ckc_status_name(c[i].status), ref_ok[i] ? "ok" : "refuses");
            abort();
        }
        if (want == CKC_OK)
            want = c[i].status;
    }
    if (st != want)
        abort();
    for (int i = 0; i < NB; i++) {
        free((void *)c[i].src);
        free(ref[i]);
        free(out[i]);
    }
}

static void check(const uint8_t *blob, size_t bsize, const uint8_t *s, size_t ssize, uint64_t n_weights,
                  uint64_t first, size_t n, const uint16_t *want)
{
    ckc_ans_tables *t = NULL;
    ckc_status st = ckc_ans_tables_new(blob, bsize, n_weights, &t);
    uint16_t *ref = malloc((n + 1) * 2), *out = malloc((n + 1) * 2);
    if ((st == CKC_OK) != (ckc_ans_blob_check(blob, bsize, n_weights) == CKC_OK))
        abort();
    if (st == CKC_OK && first + n <= n_weights) {
        int ref_ok = ref_decode(t, s, ssize, first, n, ref) == 0;
        ckc_impl impls[3] = {CKC_IMPL_PORTABLE, CKC_IMPL_AVX2, CKC_IMPL_AVX512};
        for (int k = 0; k < 3; k++) {
            if (!(k == 2 ? ckc_ans_avx512_supported() : ckc_impl_available(impls[k])))
                continue;
            st = ckc_ans_decode_chunk_impl(impls[k], t, s, ssize, first, n, out);
            if ((st == CKC_OK) != ref_ok || (ref_ok && memcmp(out, ref, n * 2))) {
                fprintf(stderr, "%s: %s, reference %s\n", ckc_impl_name(impls[k]), ckc_status_name(st),
                        ref_ok ? "ok" : "refuses");
                abort();
            }
            batch_check(impls[k], t, s, ssize, first, n);
        }
        if (want && (!ref_ok || memcmp(ref, want, n * 2)))
            abort(); /* a valid encoding that does not decode to its weights */
    }
    ckc_ans_tables_free(t);
    free(ref);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    if (size < 8)
        return 0;
    size_t bl = cku_le16(d + 2), n = cku_le16(d + 4) % 4097;
    uint64_t first = 16u * d[6];
    const uint8_t *p = d + 8;
    size_t left = size - 8;
    if (d[0] & 1) { /* weights -> plan -> encode, maybe one flipped byte */
        size_t nw = left / 2;
        uint16_t *w = malloc((nw + 1) * 2);
        ckc_ans_plan *pl = NULL;
        memcpy(w, p, nw * 2);
        if (nw && ckc_ans_plan_new(w, nw, d[7] % 64, &pl) == CKC_OK) {
            size_t cap = ckc_ans_chunk_bound(nw), len = 0;
            uint8_t *s = malloc(cap), *blob = malloc(ckc_ans_blob_size(pl) + 1);
            memcpy(blob, ckc_ans_blob(pl), ckc_ans_blob_size(pl));
            if (ckc_ans_encode_chunk(pl, w, nw, 0, s, cap, &len) != CKC_OK)
                abort(); /* the plan's own weights */
            uint8_t *exact = malloc(len + 1);
            memcpy(exact, s, len);
            if (d[1] && len) {
                exact[(d[1] * 131u + d[5]) % len] ^= (uint8_t)(1u << (d[1] & 7));
                check(blob, ckc_ans_blob_size(pl), exact, len, nw, 0, nw, NULL);
            } else {
                check(blob, ckc_ans_blob_size(pl), exact, len, nw, 0, nw, w);
            }
            free(exact);
            free(s);
            free(blob);
        }
        ckc_ans_plan_free(pl);
        free(w);
        return 0;
    }
    if (bl > left)
        bl = left;
    uint8_t *blob = malloc(bl + 1), *s = malloc(left - bl + 1);
    memcpy(blob, p, bl);
    memcpy(s, p + bl, left - bl);
    check(blob, bl, s, left - bl, first + n + 16u * d[7], first, n, NULL);
    free(blob);
    free(s);
    return 0;
}
