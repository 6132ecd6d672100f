/*
 * chunk_span.c — which bytes of which plane a run of chunks needs
 * (docs/format.md §5).  The arithmetic of the plane layouts lives here and
 * nowhere else: 4-bit codes (two weights a byte), K15's 7-bit low plane and
 * 9-bit escapes packed LSB-first in groups of 8 that start on a byte, and
 * byte-split's whole bytes; RAW chunks are fixed slices of plane 0 and ZSTD
 * chunks are frames at the offsets of the chunk index, ARCHIVE chunks
 * streams of plane 1 at those offsets.
 */
#include <string.h>

#include "container.h"

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* First byte holding bit n*bits, and the end of the byte holding its last. */
static uint64_t bits_floor(uint64_t n, unsigned bits) { return n / 8 * bits + n % 8 * bits / 8; }
static uint64_t bits_ceil(uint64_t n, unsigned bits) { return n / 8 * bits + (n % 8 * bits + 7) / 8; }

void ckp_bf16_span(uint32_t enc, uint64_t w0, uint64_t w1, uint64_t esc0, uint64_t esc1, ckp_span *out)
{
    const unsigned low_bits = enc == CKC_ENC_K15 ? 7 : 8, esc_bits = enc == CKC_ENC_K15 ? 9 : 8;
    memset(out, 0, sizeof *out);
    out->w0 = w0, out->w1 = w1, out->esc0 = esc0, out->esc1 = esc1;
    out->off[0] = w0 / 2, out->end[0] = w1 / 2 + w1 % 2;
    out->off[1] = bits_floor(w0, low_bits), out->end[1] = bits_ceil(w1, low_bits);
    out->off[2] = bits_floor(esc0 / 8 * 8, esc_bits), out->end[2] = bits_ceil(esc1, esc_bits);
    out->esc_byte = bits_floor(esc0, esc_bits);
    out->esc_bit = (uint32_t)(esc0 % 8 * esc_bits % 8);
}

void ckp_chunk_span(const ckp_extent *x, uint64_t c0, uint64_t c1, ckp_span *out)
{
    memset(out, 0, sizeof *out);
    if (x->encoding == CKC_ENC_RAW) {
        out->off[0] = c0 * x->chunk_size;
        out->end[0] = min64(c1 * x->chunk_size, x->orig_size);
    } else if (x->encoding == CKC_ENC_ZSTD) {
        out->off[0] = x->index[c0].datum;
        out->end[0] = c1 < x->n_chunks ? x->index[c1].datum : x->plane_size[0];
    } else if (x->encoding == CKC_ENC_ARCHIVE) {
        /* the tables (plane 0) are read at open; chunks read plane 1 only */
        out->w0 = c0 * (x->chunk_size / 2);
        out->w1 = min64(c1 * (x->chunk_size / 2), x->orig_size / 2);
        out->off[1] = x->index[c0].datum;
        out->end[1] = c1 < x->n_chunks ? x->index[c1].datum : x->plane_size[1];
    } else {
        uint64_t cw = x->chunk_size / 2;
        ckp_bf16_span(x->encoding, c0 * cw, min64(c1 * cw, x->orig_size / 2), x->index[c0].datum,
                      c1 < x->n_chunks ? x->index[c1].datum : x->n_escapes, out);
    }
}
