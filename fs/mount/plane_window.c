/*
 * plane_window.c — packed bytes read ahead with O_DIRECT (plane_window.h).
 *
 * One mutex (w->lock) protects every window's state, refs, used, tick and
 * key, the queue and the counters.  A window's buffer and planes are written
 * only by the I/O thread loading it (state LOADING, which nobody reuses) and
 * read only while it is READY and held (refs > 0, which nobody reuses
 * either).  Windows are a fixed array of slots searched linearly: a few
 * dozen, looked at once per decode and per prefetch.
 *
 * A window starts at the chunk its first prefetch names and ends at the
 * next multiple of ckw_window_chunks (or where the next window starts).
 *
 * States: FREE -> QUEUED (ckw_prefetch) -> LOADING (an I/O thread) ->
 * READY or FAILED; a READY or FAILED window nobody holds becomes FREE once
 * every chunk was decoded from it, or is taken over by a prefetch (LRU).
 */
#define _GNU_SOURCE
#include "plane_window.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN 4096u                /* O_DIRECT offsets, lengths and buffers */

enum { W_FREE, W_QUEUED, W_LOADING, W_READY, W_FAILED };

struct ckw_window {
    uint32_t file, e;
    uint64_t c0;                   /* chunks [c0, c0 + n) of extent e */
    unsigned n;
    int state, refs;
    uint64_t used[CKW_MAX_CHUNKS / 64]; /* bit i: chunk c0 + i decoded from it */
    uint64_t tick;                 /* last prefetch or get (LRU) */
    const ckp_reader *r;
    int dfd;
    uint8_t *buf;                  /* ALIGN-aligned, cap bytes (kept when reused) */
    size_t cap;
    ckp_planes pl;
};

struct ckw_set {
    uint64_t window_bytes;         /* original bytes per window (ckw_new_sized) */
    pthread_mutex_t lock;
    pthread_cond_t loaded;         /* some load finished */
    pthread_cond_t work;           /* a window queued, or stopping */
    ckw_window *slot;
    unsigned n_slots;
    unsigned *queue;               /* slots QUEUED, oldest first (ring of n_slots) */
    unsigned q_head, q_len;
    uint64_t tick;
    int stopping;
    pthread_t *threads;
    unsigned n_threads;
    ckw_stats st;
};

static unsigned chunks_of(uint64_t bytes, const ckp_extent *x)
{
    if (!x->chunk_size || x->chunk_size > bytes)
        return 0;
    return bytes / x->chunk_size < CKW_MAX_CHUNKS ? (unsigned)(bytes / x->chunk_size) : CKW_MAX_CHUNKS;
}

unsigned ckw_window_chunks(const ckp_extent *x) { return chunks_of(CKW_BYTES, x); }
unsigned ckw_set_chunks(const ckw_set *w, const ckp_extent *x) { return chunks_of(w->window_bytes, x); }

/* The window holding chunk c of extent e of file, or NULL; with *end the
 * first chunk past c where another window of the extent starts (at most
 * `end` as given).  By w->lock. */
static ckw_window *find(ckw_set *w, uint32_t file, uint32_t e, uint64_t c, uint64_t *end)
{
    for (unsigned i = 0; i < w->n_slots; i++) {
        ckw_window *s = &w->slot[i];
        if (s->state == W_FREE || s->file != file || s->e != e)
            continue;
        if (s->c0 <= c && c - s->c0 < s->n)
            return s;
        if (end && s->c0 > c && s->c0 < *end)
            *end = s->c0;
    }
    return NULL;
}

/* 1 if every chunk of s was decoded from it.  By w->lock. */
static int all_used(const ckw_window *s)
{
    for (unsigned i = 0; i < CKW_MAX_CHUNKS / 64; i++) {
        unsigned n = s->n > 64 * i ? s->n - 64 * i : 0;
        uint64_t want = n >= 64 ? ~0ull : (1ull << n) - 1;
        if (s->used[i] != want)
            return 0;
    }
    return 1;
}

/* A slot for a new window: a free one, else the least recently used window
 * loaded (or failed) that nobody holds; NULL when all are queued, loading
 * or held.  By w->lock. */
static ckw_window *take_slot(ckw_set *w)
{
    ckw_window *lru = NULL;
    for (unsigned i = 0; i < w->n_slots; i++) {
        ckw_window *s = &w->slot[i];
        if (s->state == W_FREE)
            return s;
        if ((s->state == W_READY || s->state == W_FAILED) && s->refs == 0 && (!lru || s->tick < lru->tick))
            lru = s;
    }
    if (lru && lru->state == W_READY && !all_used(lru))
        w->st.replaced++;
    return lru;
}

/* A source's window (s3://) still queued right before or right after
 * chunks [c, end) of extent e that can take them too: n_per chunks at most
 * in all, within the format's bounds (ckp_bounded_run); NULL if none.  A
 * window is loaded with one GET where its planes lie together: slicers of
 * the same tensor starting at once made a window (of 3 GETs) each, beside
 * each other.  A queued window has decoded nothing (used is 0) and holds
 * no bytes yet.  By w->lock. */
static ckw_window *queued_beside(ckw_set *w, const ckp_reader *r, uint32_t file, uint32_t e, uint64_t c,
                                 uint64_t end, unsigned n_per)
{
    for (unsigned i = 0; i < w->n_slots; i++) {
        ckw_window *s = &w->slot[i];
        if (s->state != W_QUEUED || s->file != file || s->e != e || s->r != r || s->dfd >= 0 ||
            s->n + (end - c) > n_per)
            continue;
        uint64_t a = s->c0 == end ? c : s->c0 + s->n == c ? s->c0 : UINT64_MAX;
        if (a != UINT64_MAX && ckp_bounded_run(r, e, a, a + s->n + (end - c)) == a + s->n + (end - c))
            return s;
    }
    return NULL;
}

uint64_t ckw_prefetch(ckw_set *w, uint32_t file, const ckp_reader *r, int dfd, uint32_t e, uint64_t c, uint64_t cEnd)
{
    const ckp_extent *x = ckp_get_extent(r, e);
    unsigned n_per = ckw_set_chunks(w, x);
    if (!n_per || (dfd < 0 && !ckp_get_source(r)) || c >= x->n_chunks || cEnd <= c)
        return c;
    /* From c (the chunks before it were asked for already: a window of
     * chunks decoded otherwise would never be used up) to the next multiple
     * of n_per, cEnd, or the next window */
    uint64_t end = (c / n_per + 1) * n_per < x->n_chunks ? (c / n_per + 1) * n_per : x->n_chunks;
    if (cEnd < end)
        end = cEnd;
    /* not past a chunk whose decode is refused unread: the window would
     * load what that chunk claims, up to the whole plane */
    if ((end = ckp_bounded_run(r, e, c, end)) == c)
        return c;
    uint64_t held = c;
    pthread_mutex_lock(&w->lock);
    /* past the windows holding c, c+1, ...: the rest of [c, end) gets a
     * window of its own (a slicer's 1 MiB request whose first chunk the
     * window before held became a window per chunk: 8 range GETs) */
    ckw_window *s;
    while ((s = find(w, file, e, c, NULL)) != NULL && s->c0 + s->n < end) {
        s->tick = ++w->tick;
        c = s->c0 + s->n;
    }
    if (s) {
        s->tick = ++w->tick;
        held = s->c0 + s->n;
    } else if ((void)find(w, file, e, c, &end), dfd < 0 && (s = queued_beside(w, r, file, e, c, end, n_per))) {
        if (s->c0 == end)
            s->c0 = c;
        s->n += (unsigned)(end - c);
        s->tick = ++w->tick;
        held = end;
    } else if (!w->stopping && (s = take_slot(w)) != NULL) {
        s->file = file, s->e = e, s->c0 = c, s->n = (unsigned)(end - c);
        s->state = W_QUEUED, s->refs = 0, s->tick = ++w->tick;
        memset(s->used, 0, sizeof s->used);
        s->r = r, s->dfd = dfd;
        w->queue[(w->q_head + w->q_len++) % w->n_slots] = (unsigned)(s - w->slot);
        pthread_cond_signal(&w->work);
        held = end;
    } else {
        w->st.dropped++;
    }
    pthread_mutex_unlock(&w->lock);
    return held;
}

/* Read [a, b) of fd (a aligned) into dst with O_DIRECT, asking for whole
 * ALIGN blocks; the end of the file may come first.  @return 0 if all of
 * [a, b) arrived. */
static int read_direct(int fd, uint8_t *dst, uint64_t a, uint64_t b)
{
    uint64_t want = (b - a + ALIGN - 1) / ALIGN * ALIGN, got = 0;
    while (got < b - a) {
        ssize_t n = pread(fd, dst + got, want - got, (off_t)(a + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (uint64_t)n;
        if (got % ALIGN)
            break; /* the end of the file */
    }
    return got >= b - a ? 0 : -1;
}

/* Reads of a window from a source (an S3 object, ~3.7 ms of the server's
 * CPU per ranged GET, SeaweedFS on this machine: as much as 4.6 MB at
 * 10 Gbit/s) merge planes that lie close together in the file: a gap of a
 * plane's alignment padding (at most MERGE_PAD: a window of a whole extent,
 * where the planes follow each other, is then one GET, not three), or any
 * gaps together at most 1/MERGE_DIV of the bytes the window needs (the
 * mantissas and escapes of an extent's last chunks: between them lie only
 * the escapes of the chunks before, ~1.3% of a plane's worth of bytes).
 * So a window reads at most 1/128 more than it needs, plus padding, and
 * packed bytes fetched stay <= 1.02x (with 1/64, 8 slicers fetched 1.020x:
 * such windows' gaps are bytes other windows fetched). */
#define MERGE_PAD 4096u
#define MERGE_DIV 128u

/* The planes' ranges [a[p], b[p]) of the file (empty ones left out) in
 * reads: read k covers [ra[k], rb[k]) and holds planes first[k].. in file
 * order ord[]; @return the number of reads. */
static unsigned plan_reads(const uint64_t a[3], const uint64_t b[3], uint64_t need, unsigned ord[3],
                           unsigned *n_ord, uint64_t ra[3], uint64_t rb[3], unsigned first[3])
{
    unsigned n = 0, k = 0;
    for (unsigned p = 0; p < 3; p++) {
        if (b[p] <= a[p])
            continue;
        unsigned i = n++;
        for (; i > 0 && a[ord[i - 1]] > a[p]; i--) /* insertion: by offset */
            ord[i] = ord[i - 1];
        ord[i] = p;
    }
    *n_ord = n;
    uint64_t budget = need / MERGE_DIV;
    for (unsigned i = 0; i < n; i++) {
        unsigned p = ord[i];
        uint64_t gap = k && a[p] > rb[k - 1] ? a[p] - rb[k - 1] : 0;
        if (k && (gap <= MERGE_PAD || gap <= budget)) {
            if (gap > MERGE_PAD)
                budget -= gap;
            if (b[p] > rb[k - 1])
                rb[k - 1] = b[p];
            continue;
        }
        ra[k] = a[p], rb[k] = b[p], first[k] = i;
        k++;
    }
    return k;
}

/* Load window s from its reader's source (no descriptor): one read (a
 * ranged GET) per plane, or fewer (plan_reads), no alignment.  @return
 * bytes read, or 0. */
static uint64_t load_source(ckw_window *s)
{
    const ckp_extent *x = ckp_get_extent(s->r, s->e);
    uint64_t lo[3], hi[3], a[3], b[3], ra[3], rb[3];
    unsigned ord[3], first[3], n_ord;
    size_t need = 0, span = 0;
    ckp_chunk_need(s->r, s->e, s->c0, s->c0 + s->n, lo, hi);
    for (int p = 0; p < 3; p++) {
        a[p] = x->plane_offset[p] + lo[p];
        b[p] = x->plane_offset[p] + hi[p];
        need += hi[p] > lo[p] ? hi[p] - lo[p] : 0;
    }
    unsigned n = plan_reads(a, b, need, ord, &n_ord, ra, rb, first);
    for (unsigned k = 0; k < n; k++)
        span += rb[k] - ra[k];
    if (span > s->cap || (s->cap > 2 * span && s->cap > (1u << 20))) {
        free(s->buf);
        s->cap = 0;
        if (!(s->buf = malloc(span ? span : 1)))
            return 0;
        s->cap = span ? span : 1;
    }
    memset(&s->pl, 0, sizeof s->pl);
    uint64_t at = 0;
    for (unsigned k = 0; k < n; k++) {
        if (ckp_read_packed(s->r, s->buf + at, rb[k] - ra[k], ra[k]) != CKP_OK)
            return 0;
        for (unsigned i = first[k]; i < (k + 1 < n ? first[k + 1] : n_ord); i++) {
            unsigned p = ord[i];
            s->pl.base[p] = s->buf + at + (a[p] - ra[k]);
            s->pl.off[p] = lo[p];
            s->pl.len[p] = hi[p] - lo[p];
        }
        at += rb[k] - ra[k];
    }
    return at ? at : 1;
}

/* Load window s (LOADING: only this thread touches its buffer), one pread
 * per plane.  Called without the lock.  @return bytes read, or 0 on failure. */
static uint64_t load(ckw_window *s)
{
    if (s->dfd < 0)
        return load_source(s);
    const ckp_extent *x = ckp_get_extent(s->r, s->e);
    uint64_t c0 = s->c0, lo[3], hi[3], a[3], b[3];
    size_t need = 0;
    ckp_chunk_need(s->r, s->e, c0, c0 + s->n, lo, hi);
    for (int p = 0; p < 3; p++) {
        a[p] = (x->plane_offset[p] + lo[p]) / ALIGN * ALIGN;
        b[p] = x->plane_offset[p] + hi[p];
        if (hi[p] > lo[p])
            need += (b[p] - a[p] + ALIGN - 1) / ALIGN * ALIGN;
    }
    if (need > s->cap) {
        void *nb = NULL;
        free(s->buf);
        s->buf = NULL;
        s->cap = 0;
        if (posix_memalign(&nb, ALIGN, need) != 0)
            return 0;
        s->buf = nb;
        s->cap = need;
    }
    memset(&s->pl, 0, sizeof s->pl);
    uint64_t at = 0, bytes = 0;
    for (int p = 0; p < 3; p++) {
        if (hi[p] <= lo[p])
            continue;
        if (read_direct(s->dfd, s->buf + at, a[p], b[p]) != 0)
            return 0;
        s->pl.base[p] = s->buf + at + (x->plane_offset[p] + lo[p] - a[p]);
        s->pl.off[p] = lo[p];
        s->pl.len[p] = hi[p] - lo[p];
        bytes += b[p] - a[p];
        at += (b[p] - a[p] + ALIGN - 1) / ALIGN * ALIGN;
    }
    return bytes ? bytes : 1;
}

static void *io_main(void *arg)
{
    ckw_set *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->stopping && w->q_len == 0)
            pthread_cond_wait(&w->work, &w->lock);
        if (w->stopping)
            break;
        ckw_window *s = &w->slot[w->queue[w->q_head]];
        w->q_head = (w->q_head + 1) % w->n_slots;
        w->q_len--;
        s->state = W_LOADING;
        pthread_mutex_unlock(&w->lock);
        uint64_t bytes = load(s);
        pthread_mutex_lock(&w->lock);
        s->state = bytes ? W_READY : W_FAILED;
        if (bytes) {
            w->st.loads++;
            w->st.load_bytes += bytes;
        } else {
            w->st.failures++;
        }
        pthread_cond_broadcast(&w->loaded);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

ckw_window *ckw_get(ckw_set *w, uint32_t file, const ckp_reader *r, uint32_t e, uint64_t c, ckp_planes *pl)
{
    if (!ckw_set_chunks(w, ckp_get_extent(r, e)))
        return NULL;
    pthread_mutex_lock(&w->lock);
    ckw_window *s = find(w, file, e, c, NULL);
    if (s) {
        s->refs++; /* held: not taken over while we wait */
        if (s->state == W_QUEUED || s->state == W_LOADING)
            w->st.waits++;
        while (s->state == W_QUEUED || s->state == W_LOADING)
            pthread_cond_wait(&w->loaded, &w->lock);
        s->tick = ++w->tick;
        if (s->state == W_READY) {
            *pl = s->pl;
            w->st.hits++;
        } else {
            s->refs--;
            s = NULL;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return s;
}

void ckw_put(ckw_set *w, ckw_window *s, uint64_t c, int decoded)
{
    if (!s)
        return;
    pthread_mutex_lock(&w->lock);
    if (decoded)
        s->used[(c - s->c0) / 64] |= 1ull << ((c - s->c0) % 64);
    if (--s->refs == 0 && all_used(s))
        s->state = W_FREE; /* every chunk served from it: the slot (and its buffer) for the next */
    pthread_mutex_unlock(&w->lock);
}

void ckw_get_stats(ckw_set *w, ckw_stats *st)
{
    pthread_mutex_lock(&w->lock);
    *st = w->st;
    pthread_mutex_unlock(&w->lock);
}

unsigned ckw_free_slots(ckw_set *w)
{
    unsigned n = 0;
    pthread_mutex_lock(&w->lock);
    for (unsigned i = 0; i < w->n_slots; i++)
        n += w->slot[i].state == W_FREE;
    pthread_mutex_unlock(&w->lock);
    return n;
}

ckw_set *ckw_new(unsigned maxWindows, unsigned ioThreads) { return ckw_new_sized(maxWindows, ioThreads, CKW_BYTES); }

ckw_set *ckw_new_sized(unsigned maxWindows, unsigned ioThreads, uint64_t windowBytes)
{
    ckw_set *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->window_bytes = windowBytes;
    w->n_slots = maxWindows ? maxWindows : 1;
    w->slot = calloc(w->n_slots, sizeof *w->slot);
    w->queue = calloc(w->n_slots, sizeof *w->queue);
    w->threads = calloc(ioThreads ? ioThreads : 1, sizeof *w->threads);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->loaded, NULL);
    pthread_cond_init(&w->work, NULL);
    if (!w->slot || !w->queue || !w->threads) {
        ckw_free(w);
        return NULL;
    }
    for (; w->n_threads < (ioThreads ? ioThreads : 1); w->n_threads++)
        if (pthread_create(&w->threads[w->n_threads], NULL, io_main, w) != 0) {
            ckw_free(w);
            return NULL;
        }
    return w;
}

void ckw_free(ckw_set *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_broadcast(&w->work);
    pthread_mutex_unlock(&w->lock);
    for (unsigned i = 0; i < w->n_threads; i++)
        pthread_join(w->threads[i], NULL);
    for (unsigned i = 0; w->slot && i < w->n_slots; i++)
        free(w->slot[i].buf);
    free(w->slot);
    free(w->queue);
    free(w->threads);
    pthread_cond_destroy(&w->work);
    pthread_cond_destroy(&w->loaded);
    pthread_mutex_destroy(&w->lock);
    free(w);
}
