/*
 * fuzz_decode.c — libFuzzer target: ckc_decode_chunk with arbitrary planes,
 * codebook, chunk position and escape counts (input layout: fuzz_util.h).
 *
 * Oracles: no out-of-bounds access (each plane sits in a buffer of exactly
 * its size under ASan); a call that returns CKC_OK produced exactly what a
 * plain scalar decoder (below, written from docs/format.md §5) produces and
 * used exactly esc_count escapes; every input the scalar decoder finds
 * consistent is accepted; the portable and AVX-512 paths agree.
 */
#include "fuzz_util.h"
#include "ckc_internal.h"

/* Reference: 0 and out filled if the chunk is consistent, else -1. */
static int ref_decode(const ckz_decode_case *c, uint16_t *out)
{
    int k15 = c->enc == CKC_ENC_K15;
    if (ckc_codebook_check(c->enc, &c->cb) != CKC_OK)
        return -1;
    uint64_t end = c->first + c->n_weights, esc_end = c->esc_first + c->esc_count;
    if (c->esc_count > c->n_weights || (end + 1) / 2 > c->size[0] || (k15 ? (7 * end + 7) / 8 : end) > c->size[1] ||
        (k15 ? (9 * esc_end + 7) / 8 : esc_end) > c->size[2])
        return -1;
    uint64_t k = c->esc_first;
    for (size_t j = 0; j < c->n_weights; j++) {
        uint64_t i = c->first + j;
        unsigned code = (c->plane[0][i / 2] >> (4 * (i & 1))) & 15, sym, lo = 0;
        if (code == 15) {
            if (k == esc_end)
                return -1;
            if (k15) {
                sym = 0;
                for (unsigned b = 0; b < 9; b++) /* bit by bit: no 2-byte load */
                    sym |= (unsigned)((c->plane[2][(9 * k + b) / 8] >> ((9 * k + b) % 8)) & 1) << b;
            } else {
                sym = c->plane[2][k];
            }
            k++;
        } else {
            sym = c->cb.sym[code];
        }
        if (k15)
            for (unsigned b = 0; b < 7; b++)
                lo |= (unsigned)((c->plane[1][(7 * i + b) / 8] >> ((7 * i + b) % 8)) & 1) << b;
        else
            lo = c->plane[1][i];
        out[j] = (uint16_t)(sym << (k15 ? 7 : 8) | lo);
    }
    return k == esc_end ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ckz_decode_case c;
    if (ckz_decode_parse(data, size, &c)) {
        ckz_decode_free(&c);
        return 0;
    }
    size_t n = c.n_weights;
    uint16_t *ref = malloc((n + 1) * 2), *out = malloc((n + 1) * 2);
    ckc_cplanes p = {c.plane[0], c.plane[1], c.plane[2], c.size[0], c.size[1], c.size[2]};
    int ref_ok = ref_decode(&c, ref) == 0;
    ckc_impl impls[3] = {CKC_IMPL_PORTABLE, CKC_IMPL_AVX512, CKC_IMPL_AVX2};
    for (int m = 0; m < (c.try_vector ? 3 : 1); m++) {
        if (!ckc_impl_available(impls[m]))
            continue;
        ckc_status st = ckc_decode_chunk_impl(impls[m], c.enc, &c.cb, &p, c.first, n, c.esc_first,
                                              c.esc_count, out);
        if (st == CKC_OK && !ref_ok) {
            fprintf(stderr, "%s decoder accepted an inconsistent chunk\n", ckc_impl_name(impls[m]));
            abort();
        }
        if (st != CKC_OK && ref_ok) {
            fprintf(stderr, "%s decoder rejected a consistent chunk: %s\n", ckc_impl_name(impls[m]),
                    ckc_status_name(st));
            abort();
        }
        if (st == CKC_OK && memcmp(out, ref, n * 2)) {
            fprintf(stderr, "%s decoder returned other weights than the reference\n", ckc_impl_name(impls[m]));
            abort();
        }
    }
    /* the public entry point must agree too */
    ckc_status st = ckc_decode_chunk(c.enc, &c.cb, &p, c.first, n, c.esc_first, c.esc_count, out);
    if ((st == CKC_OK) != ref_ok || (st == CKC_OK && memcmp(out, ref, n * 2)))
        abort();
    free(ref);
    free(out);
    ckz_decode_free(&c);
    return 0;
}
