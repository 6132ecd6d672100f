/*
 * ckc.c — the codec's portable core: names, histograms, codebooks, plane
 * sizes, K15/byte-split chunk encode and decode, escape packing, checksums.
 *
 * The bit layouts are those of docs/format.md §5 (see also ckc_decode.h).
 * Every function works on caller-owned memory, keeps no state between calls
 * and never prints.  The AVX-512 and AVX2 loops live in ckc_x86.c; this file validates
 * arguments, prepares tables, dispatches, and runs the portable path and the
 * tails of chunks that the vector loops leave over.
 *
 * Decode trusts nothing: before touching a plane it checks that the chunk's
 * weights and its escape range lie inside the sizes it was given, and while
 * decoding it never takes more escapes than the chunk owns; a code-15 count
 * that differs from esc_count is CKC_ERR_CORRUPT.
 */
#include "ckc_internal.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Largest weight / escape index accepted; keeps 9 * index far from overflow.
 * A plane this large cannot exist, so larger values are corrupt input. */
#define CKC_MAX_INDEX (UINT64_C(1) << 60)

const char *ckc_status_name(ckc_status s)
{
    switch (s) {
    case CKC_OK: return "ok";
    case CKC_ERR_ARG: return "bad argument";
    case CKC_ERR_CAPACITY: return "destination too small";
    case CKC_ERR_CORRUPT: return "corrupt data";
    case CKC_ERR_CHECKSUM: return "checksum mismatch";
    case CKC_ERR_ENCODING: return "unknown encoding";
    case CKC_ERR_RESERVED6: return "reserved";
    case CKC_ERR_NOMEM: return "out of memory";
    }
    return "unknown status";
}

const char *ckc_encoding_name(uint32_t enc)
{
    switch (enc) {
    case CKC_ENC_RAW: return "raw";
    case CKC_ENC_ZSTD: return "zstd";
    case CKC_ENC_K15: return "k15";
    case CKC_ENC_BSPLIT: return "bytesplit";
    case CKC_ENC_ARCHIVE: return "archive";
    }
    return "unknown";
}

const char *ckc_impl_name(ckc_impl impl)
{
    switch (impl) {
    case CKC_IMPL_AUTO: return "auto";
    case CKC_IMPL_PORTABLE: return "portable";
    case CKC_IMPL_AVX512: return "avx512";
    case CKC_IMPL_AVX2: return "avx2";
    }
    return "unknown";
}

int ckc_impl_available(ckc_impl impl)
{
    if (impl == CKC_IMPL_AUTO || impl == CKC_IMPL_PORTABLE)
        return 1;
    if (impl == CKC_IMPL_AVX512)
        return ckc_avx512_supported();
    if (impl == CKC_IMPL_AVX2)
        return ckc_avx2_supported();
    return 0;
}

static int use_avx512(ckc_impl impl)
{
    return (impl == CKC_IMPL_AUTO || impl == CKC_IMPL_AVX512) && ckc_avx512_supported();
}

/* AVX2 decode: when asked for, or by AUTO where AVX-512 is missing. */
static int use_avx2(ckc_impl impl)
{
    return (impl == CKC_IMPL_AVX2 || (impl == CKC_IMPL_AUTO && !ckc_avx512_supported())) &&
           ckc_avx2_supported();
}

static int is_bf16_enc(uint32_t enc) { return enc == CKC_ENC_K15 || enc == CKC_ENC_BSPLIT; }

static unsigned n_symbols(uint32_t enc) { return enc == CKC_ENC_K15 ? 512u : 256u; }


/* ---- histograms and codebooks ------------------------------------------ */

/* Four interleaved sub-histograms hide the store-to-load latency of runs of
 * equal symbols; 32-bit counters are flushed before they can overflow. */
void ckc_histogram(uint32_t enc, const uint16_t *w, size_t n_weights, uint64_t *hist)
{
    enum { BLOCK = 1u << 30 };
    uint32_t sub[4][512];
    unsigned shift = enc == CKC_ENC_K15 ? CKC_K15_LOW_BITS : CKC_BS_LOW_BITS;
    unsigned ns = n_symbols(enc);

    if (!is_bf16_enc(enc) || !hist || (!w && n_weights))
        return;
    while (n_weights) {
        size_t n = n_weights < BLOCK ? n_weights : BLOCK, i = 0;
        memset(sub, 0, sizeof sub);
        for (; i + 4 <= n; i += 4) {
            sub[0][w[i] >> shift]++;
            sub[1][w[i + 1] >> shift]++;
            sub[2][w[i + 2] >> shift]++;
            sub[3][w[i + 3] >> shift]++;
        }
        for (; i < n; i++)
            sub[0][w[i] >> shift]++;
        for (unsigned s = 0; s < ns; s++)
            hist[s] += (uint64_t)sub[0][s] + sub[1][s] + sub[2][s] + sub[3][s];
        w += n;
        n_weights -= n;
    }
}

/* a ranks before b: higher count, then smaller symbol. */
static int ranks_before(const uint64_t *hist, unsigned a, unsigned b)
{
    return hist[a] > hist[b] || (hist[a] == hist[b] && a < b);
}

ckc_status ckc_codebook_from_hist(uint32_t enc, const uint64_t *hist, ckc_codebook *cb)
{
    unsigned used = 0;

    if (!is_bf16_enc(enc))
        return CKC_ERR_ENCODING;
    if (!hist || !cb)
        return CKC_ERR_ARG;
    memset(cb, 0, sizeof *cb);
    /* Insertion into a sorted list of at most 15: O(15 * 512). */
    for (unsigned s = 0; s < n_symbols(enc); s++) {
        unsigned k;
        if (hist[s] == 0)
            continue;
        if (used == 15 && !ranks_before(hist, s, cb->sym[14]))
            continue;
        k = used < 15 ? used++ : 14;
        while (k > 0 && ranks_before(hist, s, cb->sym[k - 1])) {
            cb->sym[k] = cb->sym[k - 1];
            k--;
        }
        cb->sym[k] = (uint16_t)s;
    }
    return CKC_OK;
}

ckc_status ckc_codebook_check(uint32_t enc, const ckc_codebook *cb)
{
    if (!cb || !is_bf16_enc(enc))
        return CKC_ERR_CORRUPT;
    for (int c = 0; c < 15; c++)
        if (cb->sym[c] >= n_symbols(enc))
            return CKC_ERR_CORRUPT;
    return cb->sym[15] == 0 ? CKC_OK : CKC_ERR_CORRUPT;
}

/* symbol -> code; the smallest code wins when a symbol appears twice (only
 * possible for the zero padding of a short codebook). */
static void build_code_map(uint32_t enc, const ckc_codebook *cb, uint8_t map[512])
{
    memset(map, (int)CKC_ESCAPE, 512);
    for (int c = 14; c >= 0; c--)
        map[cb->sym[c] & 511u] = (uint8_t)c;
    (void)enc;
}

/* ---- plane sizes --------------------------------------------------------- */

static uint64_t stored_size(uint64_t exact) { return ((exact + 7u) & ~UINT64_C(7)) + 8u; }

uint64_t ckc_code_plane_size(uint64_t n_weights) { return stored_size(n_weights / 2 + (n_weights & 1)); }

uint64_t ckc_low_plane_size(uint32_t enc, uint64_t n_weights)
{
    if (enc != CKC_ENC_K15)
        return stored_size(n_weights);
    return stored_size(n_weights / 8 * 7 + (n_weights % 8 * 7 + 7) / 8);
}

uint64_t ckc_escape_plane_size(uint32_t enc, uint64_t n_escapes)
{
    if (enc != CKC_ENC_K15)
        return stored_size(n_escapes);
    return stored_size(n_escapes / 8 * 9 + (n_escapes % 8 * 9 + 7) / 8);
}

/* ---- encode -------------------------------------------------------------- */

uint64_t ckc_count_escapes(uint32_t enc, const ckc_codebook *cb, const uint16_t *w, size_t n_weights)
{
    uint8_t map[512];
    unsigned shift = enc == CKC_ENC_K15 ? CKC_K15_LOW_BITS : CKC_BS_LOW_BITS;
    uint64_t n = 0;

    if (!cb || !is_bf16_enc(enc) || !w)
        return 0;
    build_code_map(enc, cb, map);
    for (size_t i = 0; i < n_weights; i++)
        n += map[w[i] >> shift] == CKC_ESCAPE;
    return n;
}

/* Encode weights w[j..n) (j a multiple of 8) as first+j.. of the tensor. */
static void encode_portable(int is_k15, const uint8_t map[512], const uint16_t *w, size_t j,
                            size_t n, uint64_t first, uint8_t *codes, uint8_t *low,
                            uint16_t *esc_syms, uint64_t *n_esc)
{
    unsigned shift = is_k15 ? CKC_K15_LOW_BITS : CKC_BS_LOW_BITS;
    uint64_t ne = *n_esc;

    for (; j + 8 <= n; j += 8) {
        uint32_t cw = 0;
        uint64_t mv = 0;
        uint64_t g = first + j;
        for (unsigned k = 0; k < 8; k++) {
            unsigned s = w[j + k] >> shift, c = map[s];
            cw |= (uint32_t)c << (4 * k);
            esc_syms[ne] = (uint16_t)s; /* kept only if escaped */
            ne += c == CKC_ESCAPE;
            mv |= (uint64_t)(w[j + k] & 0x7Fu) << (7 * k);
        }
        memcpy(codes + g / 2, &cw, 4);
        if (is_k15) {
            memcpy(low + g / 8 * 7, &mv, 7);
        } else {
            for (unsigned k = 0; k < 8; k++)
                low[g + k] = (uint8_t)w[j + k];
        }
    }
    /* Tail of the tensor's last chunk: fewer than 8 weights. */
    if (j < n) {
        uint64_t g = first + j, mv = 0;
        size_t r = n - j;
        memset(codes + g / 2, 0, (r + 1) / 2);
        for (size_t k = 0; k < r; k++) {
            unsigned s = w[j + k] >> shift, c = map[s];
            codes[(g + k) / 2] |= (uint8_t)(c << (4 * (k & 1)));
            if (c == CKC_ESCAPE)
                esc_syms[ne++] = (uint16_t)s;
            mv |= (uint64_t)(w[j + k] & 0x7Fu) << (7 * k);
            if (!is_k15)
                low[g + k] = (uint8_t)w[j + k];
        }
        if (is_k15)
            memcpy(low + g / 8 * 7, &mv, (7 * r + 7) / 8);
    }
    *n_esc = ne;
}

ckc_status ckc_encode_chunk_impl(ckc_impl impl, uint32_t enc, const ckc_codebook *cb,
                                 const uint16_t *w, size_t n_weights, uint64_t first,
                                 uint8_t *codes, uint8_t *low, uint16_t *esc_syms,
                                 uint64_t *n_escapes)
{
    uint8_t map[512];
    uint64_t ne = 0;
    size_t done = 0;
    int is_k15 = enc == CKC_ENC_K15;

    if (!is_bf16_enc(enc) || first % 8 != 0 || !cb || !n_escapes)
        return CKC_ERR_ARG;
    if (n_weights && (!w || !codes || !low || !esc_syms))
        return CKC_ERR_ARG;
    if (ckc_codebook_check(enc, cb) != CKC_OK)
        return CKC_ERR_ARG;
    if (first > CKC_MAX_INDEX || n_weights > CKC_MAX_INDEX)
        return CKC_ERR_ARG;
    if (use_avx512(impl))
        done = ckc_encode_bulk_avx512(is_k15, cb, w, n_weights, first, codes, low, esc_syms, &ne);
    build_code_map(enc, cb, map);
    encode_portable(is_k15, map, w, done, n_weights, first, codes, low, esc_syms, &ne);
    *n_escapes = ne;
    return CKC_OK;
}

ckc_status ckc_encode_chunk(uint32_t enc, const ckc_codebook *cb, const uint16_t *w,
                            size_t n_weights, uint64_t first, uint8_t *codes, uint8_t *low,
                            uint16_t *esc_syms, uint64_t *n_escapes)
{
    return ckc_encode_chunk_impl(CKC_IMPL_AUTO, enc, cb, w, n_weights, first, codes, low,
                                 esc_syms, n_escapes);
}

ckc_status ckc_pack_escapes(uint32_t enc, const uint16_t *esc_syms, uint64_t n, uint64_t esc_first,
                            uint8_t *esc, uint64_t esc_size)
{
    uint64_t end, need;

    if (!is_bf16_enc(enc) || (n && (!esc_syms || !esc)))
        return CKC_ERR_ARG;
    if (esc_first > CKC_MAX_INDEX || n > CKC_MAX_INDEX)
        return CKC_ERR_CAPACITY;
    end = esc_first + n;
    need = enc == CKC_ENC_K15 ? (end * 9 + 7) / 8 : end;
    if (need > esc_size)
        return CKC_ERR_CAPACITY;
    for (uint64_t k = 0; k < n; k++)
        if (esc_syms[k] >= n_symbols(enc))
            return CKC_ERR_ARG;
    if (enc != CKC_ENC_K15) {
        for (uint64_t k = 0; k < n; k++)
            esc[esc_first + k] = (uint8_t)esc_syms[k];
        return CKC_OK;
    }
    /* 9 bits at bit 9k: always spans two bytes, both inside `need`. */
    for (uint64_t k = 0; k < n; k++) {
        uint64_t pos = (esc_first + k) * 9;
        unsigned v = (unsigned)esc_syms[k] << (pos & 7);
        esc[pos >> 3] |= (uint8_t)v;
        esc[(pos >> 3) + 1] |= (uint8_t)(v >> 8);
    }
    return CKC_OK;
}

/* ---- decode -------------------------------------------------------------- */

ckc_status ckc_decode_groups_portable(ckc_dec_ctx *d, uint64_t first, size_t j, size_t n_groups,
                                      uint16_t *out)
{
    for (size_t g = 0; g < n_groups; g++, j += 8) {
        uint64_t i = first + j, mv = 0;
        uint32_t cw, t;
        memcpy(&cw, d->codes + i / 2, 4);
        if (d->is_k15) {
            uint64_t off = i / 8 * 7;
            memcpy(&mv, d->low + off, off + 8 <= d->low_size ? 8 : 7);
            for (unsigned k = 0; k < 8; k++)
                out[j + k] = (uint16_t)(d->shifted[(cw >> (4 * k)) & 15u] | ((mv >> (7 * k)) & 0x7Fu));
        } else {
            for (unsigned k = 0; k < 8; k++)
                out[j + k] = (uint16_t)(d->shifted[(cw >> (4 * k)) & 15u] | d->low[i + k]);
        }
        /* A nibble is 15 iff all its four bits are set. */
        t = cw & (cw >> 1) & (cw >> 2) & (cw >> 3) & 0x11111111u;
        if (t && ckc_patch_escapes(d, t, 4, out + j) != CKC_OK)
            return CKC_ERR_CORRUPT;
    }
    return CKC_OK;
}

/* Weights of the tensor's last, partial group, one by one with bounded reads. */
static ckc_status decode_tail(ckc_dec_ctx *d, uint64_t first, size_t j, size_t n, uint16_t *out)
{
    unsigned lb = ckc_low_bits(d->is_k15);

    for (; j < n; j++) {
        uint64_t i = first + j;
        unsigned c = ckc_code_at(d->codes, i), sym, lo;
        if (c == CKC_ESCAPE) {
            if (d->er.pos >= d->er.end)
                return CKC_ERR_CORRUPT;
            sym = ckc_esc_next(&d->er, d->is_k15);
        } else {
            sym = d->shifted[c] >> lb;
        }
        lo = d->is_k15 ? ckc_bits_at_bounded(d->low, d->low_size, i * 7, 7) : d->low[i];
        out[j] = ckc_join(d->is_k15, sym, lo);
    }
    return CKC_OK;
}

/* Checks the chunk's ranges against the plane sizes and fills d. */
static ckc_status decode_prepare(uint32_t enc, const ckc_codebook *cb, const ckc_cplanes *p,
                                 uint64_t first, size_t n, uint64_t esc_first, uint64_t esc_count,
                                 ckc_dec_ctx *d)
{
    int is_k15 = enc == CKC_ENC_K15;
    uint64_t end, esc_end, need_codes, need_low, need_esc;

    if (first > CKC_MAX_INDEX || n > CKC_MAX_INDEX || esc_first > CKC_MAX_INDEX)
        return CKC_ERR_CORRUPT;
    if (esc_count > n)
        return CKC_ERR_CORRUPT;
    end = first + n;
    esc_end = esc_first + esc_count;
    need_codes = end / 2 + (end & 1);
    need_low = is_k15 ? end / 8 * 7 + (end % 8 * 7 + 7) / 8 : end;
    need_esc = is_k15 ? (esc_end * 9 + 7) / 8 : esc_end;
    if (need_codes > p->codes_size || need_low > p->low_size || need_esc > p->esc_size)
        return CKC_ERR_CORRUPT;
    if ((n && (!p->codes || !p->low)) || (esc_count && !p->esc))
        return CKC_ERR_ARG;
    d->is_k15 = is_k15;
    for (int c = 0; c < 15; c++)
        d->shifted[c] = (uint16_t)(cb->sym[c] << ckc_low_bits(is_k15));
    d->shifted[15] = 0;
    d->codes = p->codes;
    d->low = p->low;
    d->low_size = p->low_size;
    d->er.esc = p->esc;
    d->er.size = need_esc;
    d->er.pos = esc_first;
    d->er.end = esc_end;
    return CKC_OK;
}

ckc_status ckc_decode_chunk_impl(ckc_impl impl, uint32_t enc, const ckc_codebook *cb,
                                 const ckc_cplanes *p, uint64_t first, size_t n_weights,
                                 uint64_t esc_first, uint64_t esc_count, uint16_t *out)
{
    ckc_dec_ctx d;
    ckc_status st;
    size_t done = 0;

    if (!is_bf16_enc(enc))
        return CKC_ERR_ENCODING;
    if (!cb || !p || (n_weights && !out) || first % 8 != 0)
        return CKC_ERR_ARG;
    if (ckc_codebook_check(enc, cb) != CKC_OK)
        return CKC_ERR_CORRUPT;
    st = decode_prepare(enc, cb, p, first, n_weights, esc_first, esc_count, &d);
    if (st != CKC_OK)
        return st;
    if (use_avx512(impl))
        done = ckc_decode_bulk_avx512(&d, first, n_weights, out);
    else if (use_avx2(impl))
        done = ckc_decode_bulk_avx2(&d, first, n_weights, out);
    if (done == (size_t)-1)
        return CKC_ERR_CORRUPT;
    st = ckc_decode_groups_portable(&d, first, done, (n_weights - done) / 8, out);
    if (st != CKC_OK)
        return st;
    st = decode_tail(&d, first, n_weights / 8 * 8, n_weights, out);
    if (st != CKC_OK)
        return st;
    return d.er.pos == d.er.end ? CKC_OK : CKC_ERR_CORRUPT;
}

ckc_status ckc_decode_chunk(uint32_t enc, const ckc_codebook *cb, const ckc_cplanes *p,
                            uint64_t first, size_t n_weights, uint64_t esc_first,
                            uint64_t esc_count, uint16_t *out)
{
    return ckc_decode_chunk_impl(CKC_IMPL_AUTO, enc, cb, p, first, n_weights, esc_first,
                                 esc_count, out);
}

/* ---- checksums ----------------------------------------------------------- */

uint64_t ckc_hash64(const void *p, size_t size)
{
#ifdef CKC_HASH_AVX2
    if (ckc_avx2_supported())
        return ckc_hash64_avx2(p, size);
#endif
    return XXH3_64bits(p, size);
}
