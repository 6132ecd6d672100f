/*
 * container_index.c — the chunk indexes of a source's reader read at open
 * in few requests (ckp_read_ranges, container_internal.h).  Over S3 each
 * read is a ranged GET: a round trip, and server work (SeaweedFS: ~3.7 ms
 * of CPU a GET on the test machine).  One GET per index cost a shard of 400
 * tensors 400 GETs before its first byte was served.
 *
 * The rule: indexes sorted by offset are merged into one read of the span
 * holding them while the next one starts at most INDEX_GAP bytes after the
 * span's end and the span stays within INDEX_SPAN; the gap bytes are
 * dropped.  Why 256 KiB: reading it costs less than another request on any
 * link of 1 Gbit/s or more (2 ms at 1 Gbit/s, 0.2 ms at 10, against a
 * round trip plus a GET's server work), and the small tensors whose
 * indexes it joins (norms, biases: planes of a few KiB) lie far closer.
 * Why 1 MiB: the bound on what a merged read holds besides the indexes;
 * INDEX_THREADS reads in flight hold at most 16 MiB at once (each freed
 * when its indexes are copied out).  An index larger than a span, or alone
 * in its span, is read straight into its place; one inside the bytes the
 * open read first (r->opening) costs no request.  Each index is checked
 * afterwards by its hash exactly as before (container_read.c).
 */
#include "container_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define INDEX_THREADS 16
#define INDEX_GAP (256u << 10)
#define INDEX_SPAN (1u << 20)

typedef struct {
    uint64_t off, end;   /* the span read */
    uint32_t first, n;   /* its ranges: order[first .. first+n) */
} idx_span;

typedef struct {
    const ckp_reader *r;
    const ckp_range *const *order; /* the ranges by offset */
    const idx_span *sp;
    uint32_t n_sp;
    atomic_uint next;
    atomic_int err;      /* the first failure's errno, 0 if none */
} idx_job;

static int by_offset(const void *a, const void *b)
{
    const ckp_range *x = *(const ckp_range *const *)a, *y = *(const ckp_range *const *)b;
    uint64_t xe = x->off + x->len, ye = y->off + y->len;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : xe < ye ? -1 : xe > ye;
}

/* Read span s: into its one range's place, or whole into a buffer of its
 * own from which each of its ranges is copied.  @return 0 or an errno. */
static int read_span(const idx_job *j, const idx_span *s)
{
    const ckp_range *const *o = j->order + s->first;
    if (s->n == 1)
        return ckp_read_packed(j->r, o[0]->dst, (size_t)o[0]->len, o[0]->off) ? (errno ? errno : EIO) : 0;
    uint8_t *tmp = malloc((size_t)(s->end - s->off));
    if (!tmp)
        return ENOMEM;
    int rc = ckp_read_packed(j->r, tmp, (size_t)(s->end - s->off), s->off) ? (errno ? errno : EIO) : 0;
    for (uint32_t k = 0; !rc && k < s->n; k++)
        memcpy(o[k]->dst, tmp + (o[k]->off - s->off), (size_t)o[k]->len);
    free(tmp);
    return rc;
}

static void *worker(void *arg)
{
    idx_job *j = arg;
    for (uint32_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n_sp && !atomic_load(&j->err);) {
        int rc = read_span(j, &j->sp[i]), none = 0;
        if (rc)
            atomic_compare_exchange_strong(&j->err, &none, rc);
    }
    return NULL;
}

/* The spans of order[0..n) (sorted), into sp; @return how many. */
static uint32_t make_spans(const ckp_range *const *order, uint32_t n, uint64_t opening, idx_span *sp)
{
    uint32_t m = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t off = order[k]->off, oend = off + order[k]->len;
        idx_span *cur = m ? &sp[m - 1] : NULL;
        uint64_t end = cur && oend > cur->end ? oend : cur ? cur->end : 0;
        /* one inside the first bytes read costs nothing: a span of its own */
        int join = cur && oend > opening && cur->off >= opening && off <= cur->end + INDEX_GAP &&
                   end - cur->off <= INDEX_SPAN;
        if (join) {
            cur->end = end;
            cur->n++;
        } else {
            sp[m++] = (idx_span){off, oend, k, 1};
        }
    }
    return m;
}

int ckp_read_ranges(const ckp_reader *r, const ckp_range *v, uint32_t n)
{
    const ckp_range **order = malloc((n ? n : 1) * sizeof *order);
    idx_span *sp = malloc((n ? n : 1) * sizeof *sp);
    uint32_t m = 0;
    if (!order || !sp) {
        free(order);
        free(sp);
        return ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        if (v[i].len)
            order[m++] = &v[i];
    qsort(order, m, sizeof *order, by_offset);
    idx_job j = {.r = r, .order = order, .sp = sp};
    j.n_sp = make_spans(order, m, r->opening ? r->opening_len : 0, sp);
    uint32_t remote = 0; /* spans that are requests */
    for (uint32_t k = 0; k < j.n_sp; k++)
        remote += !r->opening || sp[k].end > r->opening_len;
    pthread_t t[INDEX_THREADS - 1];
    unsigned started = 0, want = remote < INDEX_THREADS ? (remote ? remote - 1 : 0) : INDEX_THREADS - 1;
    while (started < want && pthread_create(&t[started], NULL, worker, &j) == 0)
        started++;
    worker(&j); /* this thread too (and alone if none started) */
    for (unsigned k = 0; k < started; k++)
        pthread_join(t[k], NULL);
    free(order);
    free(sp);
    return atomic_load(&j.err);
}
