/*
 * ckc_ans_dec.c — the archive decoder: validates a tensor's table blob into
 * decode tables, and decodes chunks (the portable loop here; the AVX-512
 * and AVX2 loops of ckc_ans_x86.c take the bulk of a chunk where the CPU
 * has them, and this loop the rest: all bit-identical).
 *
 * Nothing is trusted: the blob must follow docs/format.md §5.3 exactly
 * (every field in range, each table summing to its scale, no trailing
 * byte); a chunk's states must lie in [L, 2^31), each word is read only
 * after checking it exists, every word must be used, and every final state
 * must be L.  A state in range stays in range whatever the words (§5.3), so
 * these checks bound every access.
 */
#include "ckc_ans_internal.h"

#include <stdlib.h>

#define EXP_SCALE (1u << CKC_ANS_EXP_BITS)
#define MAN_SCALE (1u << CKC_ANS_MAN_BITS)

typedef struct {
    const uint8_t *p, *end;
    int bad;
} rd;

static unsigned rd8(rd *r)
{
    if (r->p >= r->end) {
        r->bad = 1;
        return 0;
    }
    return *r->p++;
}

static unsigned rd16(rd *r)
{
    unsigned lo = rd8(r);
    return lo | rd8(r) << 8;
}

/* One or two bytes, canonical (a two-byte value is >= 128). */
static unsigned rd_varint(rd *r)
{
    unsigned b0 = rd8(r), b1;
    if (!(b0 & 0x80u))
        return b0;
    b1 = rd8(r);
    if (b1 == 0 || (b1 & 0x80u))
        r->bad = 1;
    return (b0 & 0x7Fu) | b1 << 7;
}

/* Reads one table of n frequencies summing to scale into f. */
static int rd_table(rd *r, unsigned n, unsigned scale, uint32_t *f)
{
    uint32_t sum = 0;
    for (unsigned s = 0; s < n; s++) {
        f[s] = rd_varint(r);
        if (f[s] > scale)
            return -1;
        sum += f[s];
    }
    return r->bad || sum != scale ? -1 : 0;
}

static unsigned class_bits(unsigned k) { return k <= 1 ? 0 : k <= 2 ? 1 : k <= 4 ? 2 : k <= 8 ? 3 : 4; }

static int parse_classes(rd *r, ckc_ans_tables *t)
{
    unsigned cb = class_bits(t->n_classes);
    uint64_t bits = t->lines * cb, bytes = (bits + 7) / 8;

    if ((uint64_t)(r->end - r->p) < bytes)
        return -1;
    t->cls = malloc(t->lines);
    if (!t->cls)
        return -2;
    for (uint64_t l = 0; l < t->lines; l++) {
        unsigned v = 0;
        for (unsigned b = 0; b < cb; b++)
            v |= ((r->p[(l * cb + b) / 8] >> ((l * cb + b) % 8)) & 1u) << b;
        if (v >= t->n_classes)
            return -1;
        t->cls[l] = (uint8_t)v;
    }
    if (bits % 8 && (r->p[bytes - 1] >> (bits % 8)))
        return -1; /* padding bits must be zero */
    r->p += bytes;
    return 0;
}

/* build 0: check only (no decode tables). */
static ckc_status parse_coded(rd *r, ckc_ans_tables *t, int build)
{
    uint16_t symval[CKC_ANS_MAX_SYMS];
    uint32_t f[CKC_ANS_MAX_SYMS];
    unsigned A = t->n_syms, M = t->mbits;
    int e;

    for (unsigned a = 0; a < A; a++) {
        symval[a] = (uint16_t)rd16(r);
        if (symval[a] >= 512 || (a && symval[a] <= symval[a - 1]))
            return CKC_ERR_CORRUPT;
    }
    if (r->bad)
        return CKC_ERR_CORRUPT;
    if (t->n_classes > 1 && (e = parse_classes(r, t)) != 0)
        return e == -2 ? CKC_ERR_NOMEM : CKC_ERR_CORRUPT;
    if (build) {
        t->exp_dec = malloc((size_t)t->n_classes * EXP_SCALE * sizeof *t->exp_dec);
        t->man_dec = malloc((size_t)A * MAN_SCALE * sizeof *t->man_dec);
        if (!t->exp_dec || !t->man_dec)
            return CKC_ERR_NOMEM;
    }
    for (unsigned k = 0; k < t->n_classes; k++) {
        uint32_t *d = build ? t->exp_dec + (size_t)k * EXP_SCALE : NULL, cum = 0;
        if (rd_table(r, A, EXP_SCALE, f) < 0)
            return CKC_ERR_CORRUPT;
        for (unsigned a = 0; a < A && build; a++) {
            for (uint32_t s = 0; s < f[a]; s++)
                d[cum + s] = a | s << 8 | (f[a] - 1) << 20;
            cum += f[a];
        }
    }
    for (unsigned a = 0; a < A; a++) {
        uint32_t *d = build ? t->man_dec + (size_t)a * MAN_SCALE : NULL, cum = 0;
        unsigned nh = 1u << M, kind = M ? rd8(r) : 0;
        if (kind > 1)
            return CKC_ERR_CORRUPT;
        if (kind == 1) {
            if (rd_table(r, nh, MAN_SCALE, f) < 0)
                return CKC_ERR_CORRUPT;
        } else {
            for (unsigned h = 0; h < nh; h++)
                f[h] = MAN_SCALE >> M;
        }
        for (unsigned h = 0; h < nh && build; h++) {
            uint32_t hi = (uint32_t)symval[a] << 7 | h << (7 - M);
            for (uint32_t s = 0; s < f[h]; s++)
                d[cum + s] = (f[h] - 1) | s << 8 | hi << 16;
            cum += f[h];
        }
    }
    return r->bad ? CKC_ERR_CORRUPT : CKC_OK;
}

/* t->low_*: where each weight of a group finds its raw low bits. */
static void low_layout(ckc_ans_tables *t)
{
    unsigned b = t->mode == CKC_ANS_CODED ? 7u - t->mbits : 0u;
    for (unsigned w = 0; w < 16; w++) {
        unsigned bit = w * b, at = 16 * (w / 4) + 4 * (w % 4);
        t->low_ctl[at] = (uint8_t)(bit / 8);
        t->low_ctl[at + 1] = (uint8_t)(bit / 8 + 1);
        t->low_ctl[at + 2] = t->low_ctl[at + 3] = 0x80; /* zero */
        t->low_sh[w] = bit % 8;
    }
    t->low_mask = (1u << b) - 1u;
    t->low_gbytes = 2 * b;
}

static ckc_status tables_new(const uint8_t *blob, size_t size, uint64_t n_weights, int build,
                             ckc_ans_tables **out)
{
    ckc_ans_tables *t;
    ckc_status st = CKC_ERR_CORRUPT;
    rd r = {blob, blob + size, 0};
    unsigned reserved;

    if (!out || (!blob && size))
        return CKC_ERR_ARG;
    *out = NULL;
    if (size < CKC_ANS_HEADER)
        return CKC_ERR_CORRUPT;
    t = calloc(1, sizeof *t);
    if (!t)
        return CKC_ERR_NOMEM;
    t->mode = rd8(&r);
    t->mbits = rd8(&r);
    t->n_classes = rd8(&r);
    t->axis = rd8(&r);
    t->n_cols = rd16(&r);
    t->n_cols |= (uint64_t)rd16(&r) << 16;
    t->n_syms = rd16(&r);
    reserved = rd16(&r);
    t->n_weights = n_weights;
    if (t->mode == CKC_ANS_RAW) {
        if (size != CKC_ANS_HEADER || t->mbits || t->n_classes || t->axis || t->n_cols || t->n_syms || reserved)
            goto fail;
        goto ok;
    }
    if (t->mode != CKC_ANS_CODED || t->mbits > CKC_ANS_MAX_MBITS || t->n_classes < 1 ||
        t->n_classes > CKC_ANS_MAX_CLASSES || t->axis > 1 || reserved || t->n_syms < 1 ||
        t->n_syms > CKC_ANS_MAX_SYMS)
        goto fail;
    if (t->n_classes == 1) {
        if (t->n_cols || t->axis)
            goto fail;
    } else {
        if (t->n_cols < 1 || n_weights % t->n_cols)
            goto fail;
        t->lines = t->axis == CKC_ANS_AXIS_COL ? t->n_cols : n_weights / t->n_cols;
        if (t->lines < 1 || t->lines > size * 8) /* a map longer than the blob cannot fit */
            goto fail;
    }
    st = parse_coded(&r, t, build);
    if (st != CKC_OK)
        goto fail;
    if (r.p != r.end) {
        st = CKC_ERR_CORRUPT;
        goto fail;
    }
ok:
    low_layout(t);
    t->bytes = sizeof *t + t->lines + (t->exp_dec ? (size_t)t->n_classes * EXP_SCALE * 4 : 0) +
               (t->man_dec ? (size_t)t->n_syms * MAN_SCALE * 4 : 0);
    *out = t;
    return CKC_OK;
fail:
    ckc_ans_tables_free(t);
    return st == CKC_OK ? CKC_ERR_CORRUPT : st;
}

ckc_status ckc_ans_tables_new(const uint8_t *blob, size_t size, uint64_t n_weights, ckc_ans_tables **out)
{
    return tables_new(blob, size, n_weights, 1, out);
}

ckc_status ckc_ans_blob_check(const uint8_t *blob, size_t size, uint64_t n_weights)
{
    ckc_ans_tables *t;
    ckc_status st = tables_new(blob, size, n_weights, 0, &t);
    ckc_ans_tables_free(t);
    return st;
}

void ckc_ans_tables_free(ckc_ans_tables *t)
{
    if (!t)
        return;
    free(t->cls);
    free(t->exp_dec);
    free(t->man_dec);
    free(t);
}

size_t ckc_ans_tables_bytes(const ckc_ans_tables *t) { return t ? t->bytes : 0; }
unsigned ckc_ans_tables_mode(const ckc_ans_tables *t) { return t ? t->mode : 0; }

/* ---- chunks ---------------------------------------------------------------- */

/* The rest of stream s (from weight s->j, a multiple of 16), one lane at a
 * time.  @return -1 if a word is missing. */
static int decode_scalar(ckc_ans_stream *s)
{
    const ckc_ans_tables *t = s->t;
    const uint8_t *words = s->words;
    uint32_t *x = s->x;
    size_t ps = s->pos, n_words = s->n_words, n = s->n, j = s->j;
    uint64_t C = t->n_cols, col = C ? (s->first + j) % C : 0, row = C ? (s->first + j) / C : 0;
    uint16_t *out = s->out;

    for (; j < n; j += CKC_ANS_LANES) {
        size_t r = n - j < CKC_ANS_LANES ? n - j : CKC_ANS_LANES;
        uint8_t a[CKC_ANS_LANES];
        for (size_t l = 0; l < r; l++) {
            unsigned k = t->cls ? t->cls[t->axis == CKC_ANS_AXIS_COL ? col : row] : 0;
            uint32_t e = t->exp_dec[(size_t)k << CKC_ANS_EXP_BITS | (x[l] & (EXP_SCALE - 1))];
            x[l] = ((e >> 20) + 1) * (x[l] >> CKC_ANS_EXP_BITS) + ((e >> 8) & 0xFFFu);
            if (x[l] < CKC_ANS_L) {
                if (ps >= n_words)
                    return -1;
                x[l] = x[l] << 16 | ckc_ans_rd16(words + 2 * ps++);
            }
            a[l] = (uint8_t)e;
            if (C && ++col == C) {
                col = 0;
                row++;
            }
        }
        for (size_t l = 0; l < r; l++) {
            uint32_t e = t->man_dec[(size_t)a[l] << CKC_ANS_MAN_BITS | (x[l] & (MAN_SCALE - 1))];
            if (t->mbits) {
                x[l] = ((e & 0xFFu) + 1) * (x[l] >> CKC_ANS_MAN_BITS) + ((e >> 8) & 0xFFu);
                if (x[l] < CKC_ANS_L) {
                    if (ps >= n_words)
                        return -1;
                    x[l] = x[l] << 16 | ckc_ans_rd16(words + 2 * ps++);
                }
            }
            out[j + l] = (uint16_t)(e >> 16);
        }
    }
    s->pos = ps;
    s->j = n;
    return 0;
}

/* ORs the raw low bits (b per weight, LSB-first) of weights j0..n-1 (j0 a
 * multiple of 8) into out: 8 weights take b whole bytes, read as one
 * little-endian word; the last group bit by bit within the bytes that
 * exist. */
static void unpack_low(const uint8_t *src, size_t bytes, unsigned b, size_t j0, size_t n, uint16_t *out)
{
    uint32_t mask = (1u << b) - 1u;
    size_t j = j0;

    for (; j + 8 <= n; j += 8) { /* the group's b bytes exist: bytes >= (j + 8) * b / 8 */
        size_t off = j / 8 * b;
        uint64_t v = 0;
        if (off + 8 <= bytes)
            memcpy(&v, src + off, 8); /* little-endian hosts */
        else
            memcpy(&v, src + off, bytes - off);
        for (unsigned k = 0; k < 8; k++)
            out[j + k] |= (uint16_t)((v >> (k * b)) & mask);
    }
    for (; j < n; j++) {
        uint64_t bit = (uint64_t)j * b, v = 0;
        size_t byte = bit / 8, m = bytes - byte < 8 ? bytes - byte : 8;
        memcpy(&v, src + byte, m);
        out[j] |= (uint16_t)((v >> (bit % 8)) & mask);
    }
}

static int use_avx512(ckc_impl impl)
{
    return (impl == CKC_IMPL_AUTO || impl == CKC_IMPL_AVX512) && ckc_ans_avx512_supported();
}

static int use_avx2(ckc_impl impl)
{
    return (impl == CKC_IMPL_AVX2 || (impl == CKC_IMPL_AUTO && !ckc_ans_avx512_supported())) &&
           ckc_avx2_supported();
}

/* Checks chunk c's header and sets up its stream in *s.  A raw chunk is
 * decoded here: *done = 1. */
static ckc_status stream_open(const ckc_ans_chunk *c, ckc_ans_stream *s, int *done)
{
    const ckc_ans_tables *t = c->t;
    const uint8_t *src = c->src;
    size_t lowb, size = c->size, n = c->n;

    *done = 0;
    if (!t || (n && !c->out) || (size && !src) || c->first % CKC_ANS_LANES || c->first > t->n_weights ||
        n > t->n_weights - c->first)
        return CKC_ERR_ARG;
    if (t->mode == CKC_ANS_RAW) {
        if (size != 2 * n)
            return CKC_ERR_CORRUPT;
        for (size_t j = 0; j < n; j++)
            c->out[j] = ckc_ans_rd16(src + 2 * j);
        *done = 1;
        return CKC_OK;
    }
    lowb = ckc_ans_low_bytes(n, t->mbits);
    if (size < CKC_ANS_HDR_BYTES + lowb || (size - CKC_ANS_HDR_BYTES - lowb) % 2)
        return CKC_ERR_CORRUPT;
    for (unsigned l = 0; l < CKC_ANS_LANES; l++) {
        s->x[l] = ckc_ans_rd32(src + 4 * l);
        if (s->x[l] < CKC_ANS_L || s->x[l] >= (1u << 31))
            return CKC_ERR_CORRUPT;
    }
    if ((n * (7 - t->mbits)) % 8 && src[CKC_ANS_HDR_BYTES + lowb - 1] >> ((n * (7 - t->mbits)) % 8))
        return CKC_ERR_CORRUPT; /* the low bits' padding must be zero */
    s->t = t;
    s->words = src + CKC_ANS_HDR_BYTES + lowb;
    s->n_words = (size - CKC_ANS_HDR_BYTES - lowb) / 2;
    s->pos = s->j = 0;
    s->n = n;
    s->first = c->first;
    s->out = c->out;
    s->low = src + CKC_ANS_HDR_BYTES;
    return CKC_OK;
}

/* The scalar rest of stream s, the final checks, and the raw low bits. */
static ckc_status stream_finish(const ckc_ans_chunk *c, ckc_ans_stream *s)
{
    size_t j0 = s->j; /* the vector loops put the low bits of out[0..j0) in */
    if (decode_scalar(s) < 0 || s->pos != s->n_words)
        return CKC_ERR_CORRUPT;
    for (unsigned l = 0; l < CKC_ANS_LANES; l++)
        if (s->x[l] != CKC_ANS_L)
            return CKC_ERR_CORRUPT;
    unpack_low(c->src + CKC_ANS_HDR_BYTES, ckc_ans_low_bytes(s->n, s->t->mbits), 7 - s->t->mbits, j0, s->n,
               s->out);
    return CKC_OK;
}

/* Up to CKC_ANS_MAX_STREAMS chunks: opened, their vector part decoded
 * together, finished one by one. */
static void decode_batch(ckc_impl impl, ckc_ans_chunk *c, size_t count)
{
    ckc_ans_stream s[CKC_ANS_MAX_STREAMS];
    size_t idx[CKC_ANS_MAX_STREAMS], ns = 0;

    for (size_t i = 0; i < count; i++) {
        int done;
        c[i].status = stream_open(&c[i], &s[ns], &done);
        if (c[i].status == CKC_OK && !done)
            idx[ns++] = i;
    }
    if (use_avx512(impl))
        ckc_ans_decode_avx512(s, ns);
    else if (use_avx2(impl))
        ckc_ans_decode_avx2(s, ns);
    for (size_t k = 0; k < ns; k++)
        c[idx[k]].status = stream_finish(&c[idx[k]], &s[k]);
}

ckc_status ckc_ans_decode_chunks_impl(ckc_impl impl, ckc_ans_chunk *c, size_t count)
{
    ckc_status st = CKC_OK;
    if (count && !c)
        return CKC_ERR_ARG;
    for (size_t i = 0; i < count; i += CKC_ANS_MAX_STREAMS)
        decode_batch(impl, c + i, count - i < CKC_ANS_MAX_STREAMS ? count - i : CKC_ANS_MAX_STREAMS);
    for (size_t i = 0; i < count && st == CKC_OK; i++)
        st = c[i].status;
    return st;
}

ckc_status ckc_ans_decode_chunks(ckc_ans_chunk *c, size_t count)
{
    return ckc_ans_decode_chunks_impl(CKC_IMPL_AUTO, c, count);
}

ckc_status ckc_ans_decode_chunk_impl(ckc_impl impl, const ckc_ans_tables *t, const uint8_t *src,
                                     size_t size, uint64_t first, size_t n, uint16_t *out)
{
    ckc_ans_chunk c = {t, src, size, first, n, out, CKC_OK};
    return ckc_ans_decode_chunks_impl(impl, &c, 1);
}

ckc_status ckc_ans_decode_chunk(const ckc_ans_tables *t, const uint8_t *src, size_t size, uint64_t first,
                                size_t n, uint16_t *out)
{
    return ckc_ans_decode_chunk_impl(CKC_IMPL_AUTO, t, src, size, first, n, out);
}
