/*
 * ckc_ans_plan.c — the archive encoder's planner: reads a whole tensor once
 * into histograms, estimates the exact size of each mode (quantized tables
 * and their bytes included), keeps the smallest, and writes the tensor's
 * table blob (docs/format.md §5.3) and the encoder's symbol tables.
 *
 * Candidates: raw; coded with M = 0..4 mantissa bits modelled (chosen on its
 * own: mantissa tables depend on the sign+exponent only) and with either no
 * context or K = 2, 4, 8, 16 classes of columns or of rows.  Classes are
 * found by sorting lines (columns or rows) by their mean exponent, cutting
 * into K equal groups, then a few rounds of moving each line to the class
 * whose statistics code it cheapest (k-means with code length as distance).
 */
#include "ckc_ans_internal.h"

#include <math.h>
#include <stdlib.h>

#define EXP_SCALE (1u << CKC_ANS_EXP_BITS)
#define MAN_SCALE (1u << CKC_ANS_MAN_BITS)
#define LLOYD_ROUNDS 3
#define LLOYD_BUDGET 50000000ull /* line * symbol steps per search (x 16 classes in SIMD) */

typedef struct {
    const uint16_t *w;
    uint64_t n, n_cols;
    uint64_t hist[512];
    uint64_t mh[512][16];  /* symbol x top 4 mantissa bits */
    unsigned A;
    uint16_t symval[CKC_ANS_MAX_SYMS];
    uint16_t idx[512];
} stats;

static unsigned varint_len(uint32_t v) { return v < 128 ? 1u : 2u; }

static uint8_t *put_varint(uint8_t *p, uint32_t v)
{
    if (v < 128) {
        *p++ = (uint8_t)v;
    } else {
        *p++ = (uint8_t)(0x80u | (v & 0x7Fu));
        *p++ = (uint8_t)(v >> 7);
    }
    return p;
}

static unsigned class_bits(unsigned k) { return k <= 1 ? 0 : k <= 2 ? 1 : k <= 4 ? 2 : k <= 8 ? 3 : 4; }

/* Frequencies summing to scale for counts cnt[0..a): every counted symbol
 * gets at least 1; rounding is repaired where it costs least. */
static void quantize(const uint64_t *cnt, unsigned a, uint32_t scale, uint32_t *f)
{
    uint64_t tot = 0;
    uint32_t sum = 0;

    for (unsigned s = 0; s < a; s++)
        tot += cnt[s];
    if (tot == 0) {
        memset(f, 0, a * sizeof *f);
        f[0] = scale;
        return;
    }
    for (unsigned s = 0; s < a; s++) {
        f[s] = cnt[s] ? (uint32_t)((double)cnt[s] * scale / (double)tot + 0.5) : 0;
        if (cnt[s] && f[s] == 0)
            f[s] = 1;
        sum += f[s];
    }
    while (sum != scale) {
        unsigned best = a;
        double bc = 0;
        for (unsigned s = 0; s < a; s++) {
            double c;
            if (sum > scale && f[s] <= 1)
                continue;
            if (sum < scale && !cnt[s])
                continue;
            c = sum > scale ? (double)cnt[s] * log2((double)f[s] / (f[s] - 1))
                            : -(double)cnt[s] * log2((double)(f[s] + 1) / f[s]);
            if (best == a || c < bc) {
                best = s;
                bc = c;
            }
        }
        if (sum > scale) {
            f[best]--;
            sum--;
        } else {
            f[best]++;
            sum++;
        }
    }
}

/* Bits to code cnt with its quantized table, plus the table's varints. */
static double table_cost(const uint64_t *cnt, unsigned a, uint32_t scale, uint32_t *f)
{
    double bits = 0;
    quantize(cnt, a, scale, f);
    for (unsigned s = 0; s < a; s++) {
        bits += 8.0 * varint_len(f[s]);
        if (cnt[s])
            bits += (double)cnt[s] * log2((double)scale / f[s]);
    }
    return bits;
}

static void collect(stats *s)
{
    memset(s->hist, 0, sizeof s->hist);
    memset(s->mh, 0, sizeof s->mh);
    for (uint64_t i = 0; i < s->n; i++)
        s->mh[s->w[i] >> 7][(s->w[i] >> 3) & 15u]++;
    s->A = 0;
    for (unsigned v = 0; v < 512; v++) {
        for (unsigned h = 0; h < 16; h++)
            s->hist[v] += s->mh[v][h];
        s->idx[v] = 0xFFFF;
        if (s->hist[v] && s->A < CKC_ANS_MAX_SYMS) {
            s->idx[v] = (uint16_t)s->A;
            s->symval[s->A] = (uint16_t)v;
        }
        s->A += s->hist[v] != 0;
    }
}

/* Counts of the top M mantissa bits of symbol v. */
static void man_counts(const stats *s, unsigned v, unsigned m, uint64_t *c)
{
    memset(c, 0, 16 * sizeof *c);
    for (unsigned h = 0; h < 16; h++)
        c[h >> (4 - m)] += s->mh[v][h];
}

/* Mantissa cost with M bits modelled; explicit[a] says which tables are
 * written (else uniform). */
static double mantissa_cost(const stats *s, unsigned m, uint8_t *explicit_tab)
{
    double bits = (double)s->n * (7 - m);
    uint64_t c[16];
    uint32_t f[16];

    if (m == 0)
        return bits;
    for (unsigned a = 0; a < s->A; a++) {
        unsigned v = s->symval[a];
        double uni = (double)s->hist[v] * m + 8, ex;
        man_counts(s, v, m, c);
        ex = table_cost(c, 1u << m, MAN_SCALE, f) + 8;
        explicit_tab[a] = ex < uni;
        bits += ex < uni ? ex : uni;
    }
    return bits;
}

/* ---- contexts -------------------------------------------------------------- */

typedef struct {
    double key;
    uint64_t line;
} line_key;

static int cmp_key(const void *a, const void *b)
{
    const line_key *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Per-line histograms over symbol indexes: lh[line * A + a]. */
static uint32_t *line_hists(const stats *s, unsigned axis, uint64_t lines)
{
    uint32_t *lh = calloc(lines * s->A, sizeof *lh);
    uint64_t col = 0, row = 0;
    if (!lh)
        return NULL;
    for (uint64_t i = 0; i < s->n; i++) {
        uint64_t l = axis == CKC_ANS_AXIS_COL ? col : row;
        lh[l * s->A + s->idx[s->w[i] >> 7]]++;
        if (++col == s->n_cols) {
            col = 0;
            row++;
        }
    }
    return lh;
}

/* Exact cost of an assignment: class tables + class map. */
static double assign_cost(const stats *s, const uint32_t *lh, uint64_t lines, unsigned k, const uint8_t *cls)
{
    uint64_t *ch = calloc((size_t)k * s->A, sizeof *ch);
    uint32_t f[CKC_ANS_MAX_SYMS];
    double bits = 8.0 * (double)((lines * class_bits(k) + 7) / 8);
    if (!ch)
        return INFINITY;
    for (uint64_t l = 0; l < lines; l++)
        for (unsigned a = 0; a < s->A; a++)
            ch[cls[l] * s->A + a] += lh[l * s->A + a];
    for (unsigned c = 0; c < k; c++)
        bits += table_cost(ch + (size_t)c * s->A, s->A, EXP_SCALE, f);
    free(ch);
    return bits;
}

/* One k-means round: class statistics from cls, then each line to its
 * cheapest class.  lc is [symbol][class] (floats), so that a line's costs
 * under all k classes add up in one vectorizable loop per symbol it has. */
static void lloyd_round(const stats *s, const uint32_t *lh, uint64_t lines, unsigned k, uint8_t *cls, float *lc)
{
    uint64_t ch[CKC_ANS_MAX_CLASSES][CKC_ANS_MAX_SYMS];
    uint64_t tot[CKC_ANS_MAX_CLASSES] = {0};
    unsigned A = s->A;

    memset(ch, 0, sizeof ch);
    for (uint64_t l = 0; l < lines; l++)
        for (unsigned a = 0; a < A; a++) {
            ch[cls[l]][a] += lh[l * A + a];
            tot[cls[l]] += lh[l * A + a];
        }
    for (unsigned c = 0; c < k; c++)
        for (unsigned a = 0; a < A; a++)
            lc[a * CKC_ANS_MAX_CLASSES + c] = (float)-log2((ch[c][a] + 0.5) / (tot[c] + 0.5 * A));
    for (uint64_t l = 0; l < lines; l++) {
        const uint32_t *h = lh + l * A;
        float cost[CKC_ANS_MAX_CLASSES] = {0}, best;
        for (unsigned a = 0; a < A; a++) {
            float n = (float)h[a];
            const float *row = lc + a * CKC_ANS_MAX_CLASSES;
            if (!h[a])
                continue;
            for (unsigned c = 0; c < CKC_ANS_MAX_CLASSES; c++)
                cost[c] += n * row[c];
        }
        best = cost[0];
        cls[l] = 0;
        for (unsigned c = 1; c < k; c++)
            if (cost[c] < best) {
                best = cost[c];
                cls[l] = (uint8_t)c;
            }
    }
}

/* Classes for k by mean exponent quantiles then k-means; *bits its cost. */
static int search_classes(const stats *s, const uint32_t *lh, uint64_t lines, unsigned k, uint8_t *cls,
                          double *bits)
{
    line_key *keys = malloc(lines * sizeof *keys);
    float *lc = calloc((size_t)CKC_ANS_MAX_CLASSES * s->A, sizeof *lc);
    if (!keys || !lc) {
        free(keys);
        free(lc);
        return -1;
    }
    for (uint64_t l = 0; l < lines; l++) {
        double sum = 0, cnt = 0;
        for (unsigned a = 0; a < s->A; a++) {
            sum += (double)lh[l * s->A + a] * (s->symval[a] & 0xFFu);
            cnt += lh[l * s->A + a];
        }
        keys[l].key = cnt ? sum / cnt : 0;
        keys[l].line = l;
    }
    qsort(keys, lines, sizeof *keys, cmp_key);
    for (uint64_t r = 0; r < lines; r++)
        cls[keys[r].line] = (uint8_t)(r * k / lines);
    if ((double)lines * s->A * LLOYD_ROUNDS < (double)LLOYD_BUDGET)
        for (int round = 0; round < LLOYD_ROUNDS; round++)
            lloyd_round(s, lh, lines, k, cls, lc);
    *bits = assign_cost(s, lh, lines, k, cls);
    free(keys);
    free(lc);
    return 0;
}

/* ---- the plan -------------------------------------------------------------- */

static void esym_init(ckc_ans_esym *e, uint32_t start, uint32_t freq, unsigned scale_bits)
{
    memset(e, 0, sizeof *e);
    if (freq == 0)
        return;
    e->x_max = ((CKC_ANS_L >> scale_bits) << 16) * freq;
    e->cmpl = (uint16_t)((1u << scale_bits) - freq);
    if (freq < 2) {
        e->rcp = ~0u;
        e->shift = 0;
        e->bias = start + (1u << scale_bits) - 1;
    } else {
        unsigned sh = 0;
        while (freq > (1u << sh))
            sh++;
        e->rcp = (uint32_t)(((1ull << (sh + 31)) + freq - 1) / freq);
        e->shift = (uint8_t)(sh - 1);
        e->bias = start;
    }
}

static void put16(uint8_t **p, uint32_t v)
{
    (*p)[0] = (uint8_t)v;
    (*p)[1] = (uint8_t)(v >> 8);
    *p += 2;
}

/* Writes the blob and the encoder tables of a coded plan. */
static ckc_status build_coded(ckc_ans_plan *p, const stats *s, const uint8_t *explicit_tab)
{
    unsigned A = s->A, K = p->ch.n_classes, M = p->ch.mbits, cb = class_bits(K);
    size_t cap = CKC_ANS_HEADER + 2u * A + (p->lines * cb + 7) / 8 + (size_t)K * A * 2 + (size_t)A * 33;
    uint64_t *cnt = calloc((size_t)K * A, sizeof *cnt);
    uint8_t *q;
    uint32_t f[CKC_ANS_MAX_SYMS];

    p->blob = calloc(1, cap);
    p->exp_enc = calloc((size_t)K * A, sizeof *p->exp_enc);
    p->man_enc = calloc((size_t)A * 16, sizeof *p->man_enc);
    if (!cnt || !p->blob || !p->exp_enc || !p->man_enc) {
        free(cnt);
        return CKC_ERR_NOMEM;
    }
    q = p->blob;
    *q++ = CKC_ANS_CODED;
    *q++ = (uint8_t)M;
    *q++ = (uint8_t)K;
    *q++ = (uint8_t)p->ch.axis;
    for (int b = 0; b < 4; b++)
        *q++ = (uint8_t)(p->ch.n_cols >> (8 * b));
    put16(&q, A);
    put16(&q, 0);
    for (unsigned a = 0; a < A; a++)
        put16(&q, s->symval[a]);
    for (uint64_t l = 0; l < p->lines; l++) /* cb bits per line, LSB first */
        for (unsigned b = 0; b < cb; b++)
            q[(l * cb + b) / 8] |= (uint8_t)(((p->cls[l] >> b) & 1u) << ((l * cb + b) % 8));
    q += (p->lines * cb + 7) / 8;
    /* class histograms */
    {
        uint64_t col = 0, row = 0;
        for (uint64_t i = 0; i < s->n; i++) {
            unsigned c = K == 1 ? 0 : p->cls[p->ch.axis == CKC_ANS_AXIS_COL ? col : row];
            cnt[(size_t)c * A + s->idx[s->w[i] >> 7]]++;
            if (s->n_cols && ++col == s->n_cols) {
                col = 0;
                row++;
            }
        }
    }
    for (unsigned c = 0; c < K; c++) {
        uint32_t cum = 0;
        quantize(cnt + (size_t)c * A, A, EXP_SCALE, f);
        for (unsigned a = 0; a < A; a++) {
            q = put_varint(q, f[a]);
            esym_init(&p->exp_enc[(size_t)c * A + a], cum, f[a], CKC_ANS_EXP_BITS);
            cum += f[a];
        }
    }
    for (unsigned a = 0; a < A && M; a++) {
        uint64_t mc[16];
        uint32_t cum = 0;
        man_counts(s, s->symval[a], M, mc);
        if (explicit_tab[a])
            quantize(mc, 1u << M, MAN_SCALE, f);
        else
            for (unsigned h = 0; h < (1u << M); h++)
                f[h] = MAN_SCALE >> M;
        *q++ = explicit_tab[a];
        for (unsigned h = 0; h < (1u << M); h++) {
            if (explicit_tab[a])
                q = put_varint(q, f[h]);
            esym_init(&p->man_enc[a * 16 + h], cum, f[h], CKC_ANS_MAN_BITS);
            cum += f[h];
        }
    }
    p->blob_size = (size_t)(q - p->blob);
    free(cnt);
    return CKC_OK;
}

static ckc_status build_raw(ckc_ans_plan *p)
{
    p->blob = calloc(1, CKC_ANS_HEADER);
    if (!p->blob)
        return CKC_ERR_NOMEM;
    p->blob_size = CKC_ANS_HEADER;
    memset(&p->ch, 0, sizeof p->ch);
    p->lines = 0;
    return CKC_OK;
}

/* Best context for s: sets p->ch.{n_classes,axis,n_cols}, p->cls, p->lines;
 * returns the exponent bits (tables, map included) or a negative on NOMEM. */
static double choose_context(ckc_ans_plan *p, const stats *s, int force_k, int force_axis)
{
    uint64_t hist[CKC_ANS_MAX_SYMS] = {0};
    uint32_t f[CKC_ANS_MAX_SYMS];
    double best;

    for (unsigned a = 0; a < s->A; a++)
        hist[a] = s->hist[s->symval[a]];
    best = force_k > 1 ? INFINITY : table_cost(hist, s->A, EXP_SCALE, f);
    p->ch.n_classes = 1;
    p->ch.axis = 0;
    p->ch.n_cols = 0;
    if (force_k == 1 || s->n_cols < 1 || s->n_cols > UINT32_MAX || s->n % s->n_cols)
        return best;
    for (unsigned axis = 0; axis < 2; axis++) {
        uint64_t lines = axis == CKC_ANS_AXIS_COL ? s->n_cols : s->n / s->n_cols;
        uint32_t *lh;
        uint8_t *cls;
        if ((force_axis >= 0 && (unsigned)force_axis != axis) || (force_k < 0 && lines < 16))
            continue;
        lh = line_hists(s, axis, lines);
        cls = malloc(lines);
        if (!lh || !cls) {
            free(lh);
            free(cls);
            return -1;
        }
        for (unsigned k = 2; k <= CKC_ANS_MAX_CLASSES; k *= 2) {
            double bits;
            if (force_k > 0 && (unsigned)force_k != k)
                continue;
            if (search_classes(s, lh, lines, k, cls, &bits) < 0) {
                free(lh);
                free(cls);
                return -1;
            }
            if (bits < best) {
                best = bits;
                free(p->cls);
                p->cls = malloc(lines);
                if (!p->cls) {
                    free(lh);
                    free(cls);
                    return -1;
                }
                memcpy(p->cls, cls, lines);
                p->lines = lines;
                p->ch.n_classes = k;
                p->ch.axis = axis;
                p->ch.n_cols = s->n_cols;
            }
        }
        free(lh);
        free(cls);
    }
    return best;
}

static ckc_status plan(const uint16_t *w, uint64_t n, uint64_t n_cols, int force_mode, int force_m,
                       int force_k, int force_axis, ckc_ans_plan **out)
{
    ckc_ans_plan *p;
    stats *s;
    uint8_t explicit_tab[CKC_ANS_MAX_SYMS], ex_best[CKC_ANS_MAX_SYMS];
    double raw_bits = 16.0 * (double)n + 8.0 * CKC_ANS_HEADER, exp_bits, man_best = INFINITY;
    ckc_status st;

    if (!out || (!w && n))
        return CKC_ERR_ARG;
    *out = NULL;
    p = calloc(1, sizeof *p);
    s = malloc(sizeof *s);
    if (!p || !s) {
        free(p);
        free(s);
        return CKC_ERR_NOMEM;
    }
    s->w = w;
    s->n = n;
    s->n_cols = n_cols;
    collect(s);
    memcpy(p->sym_idx, s->idx, sizeof p->sym_idx);
    if (force_mode == CKC_ANS_RAW || (force_mode < 0 && (s->A > CKC_ANS_MAX_SYMS || n < 256))) {
        st = build_raw(p);
        goto done;
    }
    if (s->A > CKC_ANS_MAX_SYMS || n == 0) {
        st = CKC_ERR_ARG;
        goto done;
    }
    for (unsigned m = 0; m <= CKC_ANS_MAX_MBITS; m++) {
        double b;
        if (force_m >= 0 && (unsigned)force_m != m)
            continue;
        b = mantissa_cost(s, m, explicit_tab);
        if (b < man_best) {
            man_best = b;
            p->ch.mbits = m;
            memcpy(ex_best, explicit_tab, sizeof ex_best);
        }
    }
    exp_bits = choose_context(p, s, force_k, force_axis);
    if (exp_bits < 0) {
        st = CKC_ERR_NOMEM;
        goto done;
    }
    if (exp_bits == INFINITY) {
        st = CKC_ERR_ARG;
        goto done;
    }
    p->ch.est_bits = exp_bits + man_best + 8.0 * (CKC_ANS_HEADER + 2 * s->A) +
                     8.0 * (CKC_ANS_HDR_BYTES + 1) * (double)((n + CKC_ANS_CHUNK_HINT - 1) / CKC_ANS_CHUNK_HINT);
    if (force_mode < 0 && p->ch.est_bits >= raw_bits) {
        free(p->cls);
        p->cls = NULL;
        st = build_raw(p);
        p->ch.est_bits = raw_bits;
        goto done;
    }
    p->ch.mode = CKC_ANS_CODED;
    p->ch.n_syms = s->A;
    st = build_coded(p, s, ex_best);
done:
    free(s);
    if (st != CKC_OK) {
        ckc_ans_plan_free(p);
        return st;
    }
    if (p->ch.mode == CKC_ANS_RAW)
        p->ch.est_bits = raw_bits;
    *out = p;
    return CKC_OK;
}

ckc_status ckc_ans_plan_new(const uint16_t *w, uint64_t n, uint64_t n_cols, ckc_ans_plan **out)
{
    return plan(w, n, n_cols, -1, -1, -1, -1, out);
}

ckc_status ckc_ans_plan_forced(const uint16_t *w, uint64_t n, uint64_t n_cols, unsigned mode,
                               unsigned mbits, unsigned n_classes, unsigned axis, ckc_ans_plan **out)
{
    if (mode > CKC_ANS_CODED || mbits > CKC_ANS_MAX_MBITS || axis > 1 || n_classes < 1 ||
        n_classes > CKC_ANS_MAX_CLASSES || (n_classes & (n_classes - 1)))
        return CKC_ERR_ARG;
    if (n_classes > 1 && (n_cols < 1 || n % n_cols))
        return CKC_ERR_ARG;
    return plan(w, n, n_cols, (int)mode, (int)mbits, (int)n_classes, (int)axis, out);
}

void ckc_ans_plan_free(ckc_ans_plan *p)
{
    if (!p)
        return;
    free(p->cls);
    free(p->exp_enc);
    free(p->man_enc);
    free(p->blob);
    free(p);
}

void ckc_ans_plan_choice(const ckc_ans_plan *p, ckc_ans_choice *c) { *c = p->ch; }
size_t ckc_ans_blob_size(const ckc_ans_plan *p) { return p->blob_size; }
const uint8_t *ckc_ans_blob(const ckc_ans_plan *p) { return p->blob; }
