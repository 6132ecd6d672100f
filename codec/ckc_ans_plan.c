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
    uint64_t cnt[CKC_ANS_MAX_CLASSES * CKC_ANS_MAX_SYMS]; /* the chosen context's class histograms */
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
    static const uint64_t block = 1ull << 31; /* a 32-bit count cannot overflow */
    uint32_t m32[512 * 16];                   /* 32 KiB: in L1, where 64-bit counts are not */

    memset(s->hist, 0, sizeof s->hist);
    memset(s->mh, 0, sizeof s->mh);
    for (uint64_t b = 0; b < s->n; b += block) {
        const uint16_t *w = s->w + b;
        uint64_t *mh = &s->mh[0][0], n = s->n - b < block ? s->n - b : block, i = 0;
        memset(m32, 0, sizeof m32);
        for (; i + 2 <= n; i += 2) {
            m32[w[i] >> 3]++; /* [symbol][top 4 mantissa bits] */
            m32[w[i + 1] >> 3]++;
        }
        if (i < n)
            m32[w[i] >> 3]++;
        for (unsigned j = 0; j < 512 * 16; j++)
            mh[j] += m32[j];
    }
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

/* The histograms of a tensor's lines (columns or rows), sparse: line l's
 * nonzero counts are e[start[l] .. start[l+1]), by ascending symbol index
 * (which keeps every float sum below in the order of the dense loops it
 * replaces, skipping the zeros). */
typedef struct {
    uint32_t a, cnt;
} lent;

typedef struct {
    uint64_t lines, n_ent;
    uint64_t *start; /* lines + 1 */
    lent *e;
} lhist;

static void lhist_free(lhist *h)
{
    free(h->start);
    free(h->e);
    h->start = NULL;
    h->e = NULL;
}

static int lhist_alloc(lhist *h, uint64_t lines, uint64_t max_ent)
{
    h->lines = lines;
    h->n_ent = 0;
    h->start = malloc((lines + 1) * sizeof *h->start);
    h->e = malloc((max_ent ? max_ent : 1) * sizeof *h->e);
    return h->start && h->e ? 0 : -1;
}

/* Appends the nonzero counts of a dense line histogram d[0..A) (zeroing
 * them) as line l's entries; `touched` lists the t symbols counted. */
static void lhist_emit(lhist *h, uint64_t l, uint32_t *d, unsigned A, uint8_t *touched, unsigned t)
{
    h->start[l] = h->n_ent;
    if (t < A / 4) { /* few symbols (short lines): sort them rather than scan A */
        for (unsigned i = 1; i < t; i++)
            for (unsigned j = i; j > 0 && touched[j - 1] > touched[j]; j--) {
                uint8_t x = touched[j];
                touched[j] = touched[j - 1];
                touched[j - 1] = x;
            }
        for (unsigned i = 0; i < t; i++) {
            h->e[h->n_ent++] = (lent){touched[i], d[touched[i]]};
            d[touched[i]] = 0;
        }
        return;
    }
    for (unsigned a = 0; a < A; a++)
        if (d[a]) {
            h->e[h->n_ent++] = (lent){a, d[a]};
            d[a] = 0;
        }
}

/* Both axes' line histograms of a C-column tensor in one pass over it. */
static int line_hists(const stats *s, lhist *col, lhist *row)
{
    unsigned A = s->A;
    uint64_t C = s->n_cols, R = s->n / C;
    uint32_t *ch = calloc(C * A, sizeof *ch), rh[CKC_ANS_MAX_SYMS] = {0}, rh2[CKC_ANS_MAX_SYMS] = {0};
    uint8_t touched[CKC_ANS_MAX_SYMS];
    uint8_t ai[512];

    if (!ch || lhist_alloc(col, C, C * A) < 0 || lhist_alloc(row, R, R * (C < A ? C : A)) < 0) {
        free(ch);
        return -1;
    }
    for (unsigned v = 0; v < 512; v++)
        ai[v] = (uint8_t)s->idx[v]; /* every symbol of the tensor has an index < 256 */
    for (uint64_t r = 0; r < R; r++) {
        const uint16_t *w = s->w + r * C;
        uint32_t *cl = ch;
        unsigned t = 0;
        if (C >= A) { /* long rows: lhist_emit scans all A symbols, no list needed */
            uint64_t c = 0;
            for (; c + 2 <= C; c += 2, cl += 2 * A) { /* two row counts: no chain of increments */
                unsigned a0 = ai[w[c] >> 7], a1 = ai[w[c + 1] >> 7];
                rh[a0]++;
                rh2[a1]++;
                cl[a0]++;
                cl[A + a1]++;
            }
            if (c < C) {
                unsigned a0 = ai[w[c] >> 7];
                rh[a0]++;
                cl[a0]++;
            }
            for (unsigned a = 0; a < A; a++) {
                rh[a] += rh2[a];
                rh2[a] = 0;
            }
            t = A;
        } else {
            for (uint64_t c = 0; c < C; c++, cl += A) {
                unsigned a = ai[w[c] >> 7];
                touched[t] = (uint8_t)a;
                t += rh[a]++ == 0;
                cl[a]++;
            }
        }
        lhist_emit(row, r, rh, A, touched, t);
    }
    row->start[R] = row->n_ent;
    for (uint64_t c = 0; c < C; c++) {
        col->start[c] = col->n_ent;
        for (unsigned a = 0; a < A; a++)
            if (ch[c * A + a])
                col->e[col->n_ent++] = (lent){a, ch[c * A + a]};
    }
    col->start[C] = col->n_ent;
    free(ch);
    return 0;
}

/* Class histograms ch[c * A + a] and totals tot[c] of an assignment. */
static void class_counts(const lhist *h, unsigned A, unsigned k, const uint8_t *cls, uint64_t *ch, uint64_t *tot)
{
    memset(ch, 0, (size_t)k * A * sizeof *ch);
    memset(tot, 0, k * sizeof *tot);
    for (uint64_t l = 0; l < h->lines; l++) {
        uint64_t *c = ch + (size_t)cls[l] * A, sum = 0;
        for (uint64_t j = h->start[l]; j < h->start[l + 1]; j++) {
            c[h->e[j].a] += h->e[j].cnt;
            sum += h->e[j].cnt;
        }
        tot[cls[l]] += sum;
    }
}

/* Moves line l from class `from` to class `to` in the class histograms. */
static void move_line(const lhist *h, unsigned A, uint64_t l, unsigned from, unsigned to, uint64_t *ch, uint64_t *tot)
{
    uint64_t *cf = ch + (size_t)from * A, *ct = ch + (size_t)to * A;
    for (uint64_t j = h->start[l]; j < h->start[l + 1]; j++) {
        cf[h->e[j].a] -= h->e[j].cnt;
        ct[h->e[j].a] += h->e[j].cnt;
        tot[from] -= h->e[j].cnt;
        tot[to] += h->e[j].cnt;
    }
}

/* Exact cost of an assignment whose class histograms are ch: class tables +
 * class map. */
static double assign_cost(const stats *s, const lhist *h, unsigned k, const uint64_t *ch)
{
    uint32_t f[CKC_ANS_MAX_SYMS];
    double bits = 8.0 * (double)((h->lines * class_bits(k) + 7) / 8);
    for (unsigned c = 0; c < k; c++)
        bits += table_cost(ch + (size_t)c * s->A, s->A, EXP_SCALE, f);
    return bits;
}

/* A line's code length under each class: the sum over its symbols of
 * count x lc[symbol][class], in floats, four classes a vector (GCC/clang
 * vector extensions: SIMD where the target has it, the same IEEE single
 * products and sums lane by lane everywhere, as -ffp-contract=off keeps
 * them unfused); only the first 4 * nv classes are summed.  Two lines are
 * summed side by side (two independent chains of additions, each in its
 * line's order: the same sums as one line at a time). */
typedef float v4f __attribute__((vector_size(16), aligned(4)));

static inline __attribute__((always_inline)) void add_entry(v4f acc[4], const lent *e, const float *lc, unsigned nv)
{
    float n = (float)e->cnt;
    const v4f *row = (const v4f *)(const void *)(lc + (size_t)e->a * CKC_ANS_MAX_CLASSES);
    acc[0] += n * row[0];
    if (nv > 1)
        acc[1] += n * row[1];
    if (nv > 2) {
        acc[2] += n * row[2];
        acc[3] += n * row[3];
    }
}

/* The first class of least cost among the k of acc. */
static inline __attribute__((always_inline)) unsigned pick_class(const v4f acc[4], unsigned k)
{
    float cost[CKC_ANS_MAX_CLASSES], best;
    unsigned pick = 0;

    memcpy(cost, acc, sizeof cost);
    best = cost[0];
    for (unsigned c = 1; c < k; c++)
        if (cost[c] < best) {
            best = cost[c];
            pick = c;
        }
    return pick;
}

/* The cheapest classes of lines l (entries e0..end0) and l + 1 (e1..end1). */
static inline __attribute__((always_inline)) void cheapest2(const lent *e0, const lent *end0, const lent *e1,
                                                            const lent *end1, const float *lc, unsigned nv,
                                                            unsigned k, unsigned pick[2])
{
    v4f a[4] = {{0}}, b[4] = {{0}};

    for (; e0 < end0 && e1 < end1; e0++, e1++) {
        add_entry(a, e0, lc, nv);
        add_entry(b, e1, lc, nv);
    }
    for (; e0 < end0; e0++)
        add_entry(a, e0, lc, nv);
    for (; e1 < end1; e1++)
        add_entry(b, e1, lc, nv);
    pick[0] = pick_class(a, k);
    pick[1] = pick_class(b, k);
}

/* One k-means round: code lengths from the class histograms ch (tot[c]:
 * class c's weights), then each line to its cheapest class, ch and tot
 * following each move (exact integers: the same as counting again).  lc is
 * [symbol][class], fixed for the round, so a line's choice does not depend
 * on the moves before it: lines are priced two at a time, then moved in
 * order.  @return the number of lines that changed class. */
static uint64_t lloyd_round(const stats *s, const lhist *h, unsigned k, uint8_t *cls, float *lc, uint64_t *ch,
                            uint64_t *tot)
{
    uint64_t moved = 0;
    unsigned A = s->A, nv = (k + 3) / 4;

    for (unsigned c = 0; c < k; c++)
        for (unsigned a = 0; a < A; a++)
            lc[a * CKC_ANS_MAX_CLASSES + c] = (float)-log2((ch[c * A + a] + 0.5) / (tot[c] + 0.5 * A));
    for (uint64_t l = 0; l < h->lines; l += 2) {
        uint64_t l1 = l + 1 < h->lines ? l + 1 : l; /* an odd last line priced twice */
        const lent *e0 = h->e + h->start[l], *end0 = h->e + h->start[l + 1];
        const lent *e1 = h->e + h->start[l1], *end1 = h->e + h->start[l1 + 1];
        unsigned pick[2];
        if (nv == 1)
            cheapest2(e0, end0, e1, end1, lc, 1, k, pick);
        else if (nv == 2)
            cheapest2(e0, end0, e1, end1, lc, 2, k, pick);
        else
            cheapest2(e0, end0, e1, end1, lc, 4, k, pick);
        for (unsigned j = 0; j < 2 && l + j <= l1; j++) /* l, then l + 1 if it exists */
            if (pick[j] != cls[l + j]) {
                move_line(h, A, l + j, cls[l + j], pick[j], ch, tot);
                cls[l + j] = (uint8_t)pick[j];
                moved++;
            }
    }
    return moved;
}

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

/* The lines in order of their mean exponent (ties by line number). */
static line_key *order_lines(const stats *s, const lhist *h)
{
    line_key *keys = malloc(h->lines * sizeof *keys);
    if (!keys)
        return NULL;
    for (uint64_t l = 0; l < h->lines; l++) {
        double sum = 0, cnt = 0;
        for (uint64_t j = h->start[l]; j < h->start[l + 1]; j++) {
            sum += (double)h->e[j].cnt * (s->symval[h->e[j].a] & 0xFFu);
            cnt += h->e[j].cnt;
        }
        keys[l].key = cnt ? sum / cnt : 0;
        keys[l].line = l;
    }
    qsort(keys, h->lines, sizeof *keys, cmp_key);
    return keys;
}

/* Classes for k: the ordered lines cut into k equal groups, then k-means
 * (stopping early once no line moves: later rounds would change nothing);
 * *bits its cost, ch left holding its class histograms. */
static void search_classes(const stats *s, const lhist *h, const line_key *keys, unsigned k, uint8_t *cls,
                           float *lc, uint64_t *ch, double *bits)
{
    uint64_t lines = h->lines, tot[CKC_ANS_MAX_CLASSES];
    for (uint64_t r = 0; r < lines; r++)
        cls[keys[r].line] = (uint8_t)(r * k / lines);
    class_counts(h, s->A, k, cls, ch, tot);
    if ((double)lines * s->A * LLOYD_ROUNDS < (double)LLOYD_BUDGET)
        for (int round = 0; round < LLOYD_ROUNDS; round++)
            if (lloyd_round(s, h, k, cls, lc, ch, tot) == 0)
                break;
    *bits = assign_cost(s, h, k, ch);
}

/* ---- the plan -------------------------------------------------------------- */

static void esym_init(ckc_ans_esym *e, uint32_t start, uint32_t freq, unsigned scale_bits)
{
    uint64_t rcp, bias, shift;
    if (freq == 0) {
        *e = 0;
        return;
    }
    if (freq < 2) {
        rcp = ~0u;
        shift = 0;
        bias = start + (1u << scale_bits) - 1;
    } else {
        unsigned sh = 0;
        while (freq > (1u << sh))
            sh++;
        rcp = ((1ull << (sh + 31)) + freq - 1) / freq;
        shift = sh - 1;
        bias = start;
    }
    *e = rcp | bias << 32 | (uint64_t)freq << 45 | shift << 58;
}

static void put16(uint8_t **p, uint32_t v)
{
    (*p)[0] = (uint8_t)v;
    (*p)[1] = (uint8_t)(v >> 8);
    *p += 2;
}

/* Writes the blob and the encoder tables of a coded plan. */
static ckc_status build_coded(ckc_ans_plan *p, const stats *s, const uint8_t *explicit_tab, const uint64_t *cnt)
{
    unsigned A = s->A, K = p->ch.n_classes, M = p->ch.mbits, cb = class_bits(K);
    size_t cap = CKC_ANS_HEADER + 2u * A + (p->lines * cb + 7) / 8 + (size_t)K * A * 2 + (size_t)A * 33;
    uint8_t *q;
    uint32_t f[CKC_ANS_MAX_SYMS];

    p->blob = calloc(1, cap);
    p->exp_enc = calloc((size_t)K * 512, sizeof *p->exp_enc);
    p->man_enc = calloc((size_t)512 * 16, sizeof *p->man_enc);
    if (!p->blob || !p->exp_enc || !p->man_enc)
        return CKC_ERR_NOMEM;
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
    for (unsigned c = 0; c < K; c++) {
        uint32_t cum = 0;
        quantize(cnt + (size_t)c * A, A, EXP_SCALE, f);
        for (unsigned a = 0; a < A; a++) {
            q = put_varint(q, f[a]);
            esym_init(&p->exp_enc[(size_t)c * 512 + s->symval[a]], cum, f[a], CKC_ANS_EXP_BITS);
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
            esym_init(&p->man_enc[s->symval[a] * 16u + h], cum, f[h], CKC_ANS_MAN_BITS);
            cum += f[h];
        }
    }
    p->blob_size = (size_t)(q - p->blob);
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

/* Best context for s: sets p->ch.{n_classes,axis,n_cols}, p->cls, p->lines
 * and cnt[c * A + a], the class histograms (room for 16 classes); returns
 * the exponent bits (tables, map included) or a negative on NOMEM. */
static double choose_context(ckc_ans_plan *p, const stats *s, int force_k, int force_axis, uint64_t *cnt)
{
    uint32_t f[CKC_ANS_MAX_SYMS];
    uint64_t *ch = NULL;
    uint8_t *cls = NULL;
    float *lc = NULL;
    lhist lh[2] = {{0}};
    double best;

    for (unsigned a = 0; a < s->A; a++)
        cnt[a] = s->hist[s->symval[a]];
    best = force_k > 1 ? INFINITY : table_cost(cnt, s->A, EXP_SCALE, f);
    p->ch.n_classes = 1;
    p->ch.axis = 0;
    p->ch.n_cols = 0;
    if (force_k == 1 || s->n_cols < 1 || s->n_cols > UINT32_MAX || s->n % s->n_cols)
        return best;
    ch = malloc((size_t)CKC_ANS_MAX_CLASSES * s->A * sizeof *ch);
    lc = calloc((size_t)CKC_ANS_MAX_CLASSES * s->A, sizeof *lc);
    cls = malloc(s->n_cols > s->n / s->n_cols ? s->n_cols : s->n / s->n_cols);
    if (!ch || !lc || !cls || line_hists(s, &lh[CKC_ANS_AXIS_COL], &lh[CKC_ANS_AXIS_ROW]) < 0)
        goto nomem;
    for (unsigned axis = 0; axis < 2; axis++) {
        const lhist *h = &lh[axis];
        line_key *keys;
        if ((force_axis >= 0 && (unsigned)force_axis != axis) || (force_k < 0 && h->lines < 16))
            continue;
        if (!(keys = order_lines(s, h)))
            goto nomem;
        for (unsigned k = 2; k <= CKC_ANS_MAX_CLASSES; k *= 2) {
            double bits;
            if (force_k > 0 && (unsigned)force_k != k)
                continue;
            search_classes(s, h, keys, k, cls, lc, ch, &bits);
            if (bits < best) {
                best = bits;
                free(p->cls);
                if (!(p->cls = malloc(h->lines))) {
                    free(keys);
                    goto nomem;
                }
                memcpy(p->cls, cls, h->lines);
                memcpy(cnt, ch, (size_t)k * s->A * sizeof *cnt);
                p->lines = h->lines;
                p->ch.n_classes = k;
                p->ch.axis = axis;
                p->ch.n_cols = s->n_cols;
            }
        }
        free(keys);
    }
    goto out;
nomem:
    best = -1;
out:
    lhist_free(&lh[0]);
    lhist_free(&lh[1]);
    free(ch);
    free(lc);
    free(cls);
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
    exp_bits = choose_context(p, s, force_k, force_axis, s->cnt);
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
    st = build_coded(p, s, ex_best, s->cnt);
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
