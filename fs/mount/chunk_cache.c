/*
 * chunk_cache.c — the mount daemon's LRU of decoded chunks (chunk_cache.h).
 *
 * One mutex (c->lock) protects the hash table, the LRU list, every entry's
 * refs/state/err/in_table fields, the byte count and the prefetch queue.
 * Entry data is written only by the thread that fills it, before the entry
 * becomes READY (under the lock), and is read-only afterwards.  Decodes run
 * without the lock; threads waiting for a decode sleep on c->done, which is
 * broadcast whenever any decode finishes (a decode is one chunk's work, long
 * next to a wake-up; a shared condition variable is simpler than one per
 * entry and cheap enough).
 *
 * Run fills (ckcache_set_run): the thread that decodes chunk k may claim,
 * under the lock, the chunks after it whose prefetch jobs are queued (a
 * sequential reader's decode-ahead queues them in order), making each a
 * LOADING entry before it unlocks, so a thread wanting one of them waits
 * for this decode as for any other; a chunk already in the table is never
 * claimed, so two runs never overlap, and a decoding thread waits for
 * nothing while it holds LOADING entries (no deadlock).  Each chunk of a
 * run is published with its own result.
 *
 * Invariants (ckcache_check verifies 1-5 and 7; asserts check 6 where it applies):
 *   1. an entry is in the LRU list iff it is in the table and not LOADING;
 *   2. c->bytes is the cost (entry_cost: the entry and its buffer as the heap
 *      holds them) summed over entries in the table that are not LOADING;
 *   3. c->n_entries counts the entries in the table, each in the bucket of
 *      its key and marked in_table;
 *   4. the LRU list is a well-formed ring through the sentinel c->lru;
 *   5. there are at most MAX_SPARE spare buffers, each of MIN_SPARE bytes or
 *      more, oldest first, and c->bytes + c->spare_bytes <= c->room once a
 *      load or put returns (spares count against the limit; by c->lock);
 *   8. c->room is the limit less the bytes the hash table has grown by (0
 *      if they exceed it): a table grown for many small chunks (table_grow)
 *      counts against the limit too;
 *   6. an entry not in the table is freed when refs reaches 0;
 *   7. the prefetch queue holds at most PREFETCH_QUEUE jobs.
 *
 * A chunk whose every byte has been served leaves the cache at once
 * (ckcache_put_served): the kernel's page cache has those bytes now.  A
 * sequential reader then cycles a prefetch window's worth of buffers, warm
 * in the CPU caches, instead of filling the whole limit with chunks nobody
 * reads again (and takes no page faults on fresh memory).  Prefetch jobs
 * for a chunk served out are cancelled, and recently served chunks are not
 * prefetched again (a table of their keys), or they would be decoded twice.
 *
 * Buffers of evicted entries (MIN_SPARE bytes or more) are kept as spares
 * and reused for new entries of the same length (nearly all chunks have one
 * of two lengths) instead of free() and malloc(): a chunk-sized malloc may be
 * a fresh mmap whose pages fault and get zeroed on first write, and chunks
 * freed all over glibc's per-thread arenas let the resident size drift well
 * above the cache limit.  Spares count against the limit, so that decoded
 * chunks held by the cache never exceed it: at cache_size=0 none are kept,
 * and memory beyond the limit is only what requests in flight hold
 * (chunk_cache.h).
 */
#include "chunk_cache.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { ST_LOADING = 0, ST_READY = 1, ST_FAILED = 2 };
#define PREFETCH_QUEUE 256
#define MAX_SPARE 64               /* buffers kept for reuse, beyond the limit */
#define MIN_SPARE (32u << 10)      /* smaller buffers are just freed */
#define SERVED_SLOTS 4096          /* chunks recently served out, remembered for prefetch */

struct ckcache_entry {
    ckcache_key key;
    ckcache_entry *hnext;          /* hash chain */
    ckcache_entry *lprev, *lnext;  /* LRU, most recent at head */
    size_t len;
    size_t served;                 /* bytes handed to readers so far */
    unsigned char *data;
    int refs;
    int state;
    int err;
    int in_table;
};

typedef struct {
    ckcache_key key;
    size_t len;
} prefetch_job;

struct ckcache {
    pthread_mutex_t lock;
    pthread_cond_t done;           /* some decode finished */
    pthread_cond_t work;           /* prefetch queue not empty, or stopping */
    ckcache_fill_fn fill;
    void *fill_arg;
    ckcache_run_len_fn run_len;    /* NULL: one chunk a fill (ckcache_set_run) */
    ckcache_fill_run_fn fill_run;
    size_t limit, bytes, n_entries;
    size_t room;                   /* limit less the table's growth: what entries and spares may hold */
    ckcache_entry **buckets;
    size_t n_buckets;              /* power of two */
    size_t n_buckets0;             /* its first size (limit / 64 KiB, at least 1024) */
    ckcache_entry lru;             /* sentinel */
    prefetch_job queue[PREFETCH_QUEUE];
    unsigned q_head, q_len;
    int stopping;
    pthread_t *workers;
    unsigned n_workers;
    ckcache_stats st;
    struct {
        void *p;
        size_t len;
    } spare[MAX_SPARE];            /* reusable buffers, oldest first */
    unsigned n_spare;
    size_t spare_bytes;            /* sum of the spares' lengths */
    ckcache_key served[SERVED_SLOTS]; /* direct-mapped by key hash; file UINT32_MAX: empty */
};

static uint64_t key_mix(const ckcache_key *k)
{
    uint64_t h = k->chunk * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)k->file << 32 | k->extent) * 0xC2B2AE3D27D4EB4Full;
    return h ^ h >> 29;
}

static size_t key_hash(const ckcache *c, const ckcache_key *k)
{
    return (size_t)key_mix(k) & (c->n_buckets - 1);
}

static int key_eq(const ckcache_key *a, const ckcache_key *b)
{
    return a->file == b->file && a->extent == b->extent && a->chunk == b->chunk;
}

static ckcache_entry *table_find(ckcache *c, const ckcache_key *k)
{
    for (ckcache_entry *e = c->buckets[key_hash(c, k)]; e; e = e->hnext)
        if (key_eq(&e->key, k))
            return e;
    return NULL;
}

static void table_remove(ckcache *c, ckcache_entry *e)
{
    ckcache_entry **p = &c->buckets[key_hash(c, &e->key)];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    e->hnext = NULL;
    e->in_table = 0;
    c->n_entries--;
}

static void lru_unlink(ckcache_entry *e)
{
    e->lprev->lnext = e->lnext;
    e->lnext->lprev = e->lprev;
    e->lprev = e->lnext = NULL;
}

static void lru_push_front(ckcache *c, ckcache_entry *e)
{
    e->lnext = c->lru.lnext;
    e->lprev = &c->lru;
    c->lru.lnext->lprev = e;
    c->lru.lnext = e;
}

/* The heap an allocation of n bytes takes: glibc's chunk, the request and
 * an 8-byte size field rounded up to 16, at least 32 bytes. */
static size_t heap_bytes(size_t n) { return n + 8 + 15 < 32 ? 32 : (n + 8 + 15) & ~(size_t)15; }

/* What an entry in the table costs against the limit: its struct and its
 * decoded bytes as the heap holds them (a remembered failure has none).
 * Chunks may be one byte (format §4.1): counted by their length alone, a
 * table of them held 130 times the limit in bookkeeping. */
static size_t entry_cost(const ckcache_entry *e)
{
    return e->state == ST_FAILED ? heap_bytes(sizeof *e) : ckcache_cost(e->len);
}

size_t ckcache_cost(size_t len) { return heap_bytes(sizeof(ckcache_entry)) + heap_bytes(len); }

static void spare_drop_oldest(ckcache *c)
{
    free(c->spare[0].p);
    c->spare_bytes -= c->spare[0].len;
    memmove(&c->spare[0], &c->spare[1], (c->n_spare - 1) * sizeof c->spare[0]);
    c->n_spare--;
}

/* Free the oldest spares until table and spares fit the limit.  By c->lock. */
static void spares_fit(ckcache *c)
{
    while (c->n_spare && c->bytes + c->spare_bytes > c->room)
        spare_drop_oldest(c);
}

/* Keep a buffer of len bytes for reuse (dropping the oldest spares when
 * full or over the limit), or free it.  By c->lock. */
static void buffer_put(ckcache *c, void *data, size_t len)
{
    if (!data || len < MIN_SPARE || c->stopping || len > c->room || c->bytes > c->room - len) {
        free(data);
        return;
    }
    if (c->n_spare == MAX_SPARE)
        spare_drop_oldest(c);
    c->spare[c->n_spare].p = data;
    c->spare[c->n_spare].len = len;
    c->n_spare++;
    c->spare_bytes += len;
    spares_fit(c);
}

/* The newest spare buffer of exactly len bytes, or NULL.  By c->lock. */
static void *buffer_take(ckcache *c, size_t len)
{
    for (unsigned i = c->n_spare; i-- > 0;) {
        if (c->spare[i].len != len)
            continue;
        void *p = c->spare[i].p;
        c->spare_bytes -= len;
        memmove(&c->spare[i], &c->spare[i + 1], (c->n_spare - 1 - i) * sizeof c->spare[0]);
        c->n_spare--;
        return p;
    }
    return NULL;
}

static void entry_free(ckcache *c, ckcache_entry *e)
{
    buffer_put(c, e->data, e->len);
    free(e);
}

/* Take e out of the table and the LRU (it must be READY or FAILED); the
 * last put of a held entry frees it then. */
static void unlist(ckcache *c, ckcache_entry *e)
{
    assert(e->in_table && e->state != ST_LOADING);
    lru_unlink(e);
    table_remove(c, e);
    c->bytes -= entry_cost(e);
}

/* unlist, and free e unless someone still holds it. */
static void drop(ckcache *c, ckcache_entry *e)
{
    unlist(c, e);
    if (e->refs == 0)
        entry_free(c, e);
}

static void evict(ckcache *c, ckcache_entry *e)
{
    c->st.evictions++;
    drop(c, e);
}

static void shrink(ckcache *c)
{
    while (c->bytes > c->room && c->lru.lprev != &c->lru)
        evict(c, c->lru.lprev);
    spares_fit(c);
}

/* A decode of e ended with data (NULL when err) and err: publish it.  An
 * entry failed for a reason other than damage leaves the table, and is
 * freed if no one waits for it (a run's other chunks have no reference of
 * their loader).  By c->lock. */
static void finish(ckcache *c, ckcache_entry *e, unsigned char *data, int err)
{
    e->data = data;
    e->err = err;
    e->state = err ? ST_FAILED : ST_READY;
    if (err)
        c->st.failures++;
    if (err && err != EIO) {
        table_remove(c, e);            /* transient: not remembered */
        if (e->refs == 0)
            entry_free(c, e);
    } else {
        c->bytes += entry_cost(e);
        lru_push_front(c, e);
    }
}

/* Decode es[0..n) (LOADING, consecutive chunks of one extent: run_claim)
 * without the lock, with one run fill when n >= 2; publish them under the
 * lock.  Called and returns with c->lock held. */
static void load_run(ckcache *c, ckcache_entry *const es[], unsigned n)
{
    void *dst[CKCACHE_RUN_MAX];
    size_t len[CKCACHE_RUN_MAX];
    int err[CKCACHE_RUN_MAX], nomem = 0;
    for (unsigned i = 0; i < n; i++) {
        len[i] = es[i]->len;
        dst[i] = buffer_take(c, len[i]);
    }
    pthread_mutex_unlock(&c->lock);
    for (unsigned i = 0; i < n; i++)
        if (!dst[i] && !(dst[i] = malloc(len[i])))
            nomem = 1;
    int run = n >= 2 && !nomem;
    if (run)
        c->fill_run(c->fill_arg, &es[0]->key, n, dst, len, err);
    else
        for (unsigned i = 0; i < n; i++)
            err[i] = dst[i] ? c->fill(c->fill_arg, &es[i]->key, dst[i], len[i]) : ENOMEM;
    for (unsigned i = 0; i < n; i++)
        if (err[i]) {
            free(dst[i]);
            dst[i] = NULL;
        }
    pthread_mutex_lock(&c->lock);
    if (run) {
        c->st.runs++;
        c->st.run_chunks += n;
    }
    for (unsigned i = n; i-- > 0;)     /* the run's first chunk most recent */
        finish(c, es[i], dst[i], err[i]);
    shrink(c);
    pthread_cond_broadcast(&c->done);
}

/* Bytes the table has grown by. */
static size_t table_growth(const ckcache *c) { return (c->n_buckets - c->n_buckets0) * sizeof *c->buckets; }

/* What c->room must be (invariant 8). */
static size_t room_for(const ckcache *c)
{
    size_t g = table_growth(c);
    return c->limit > g ? c->limit - g : 0;
}

/* Double the hash table: called when it holds more than two entries a
 * bucket.  Its first size suits chunks of 64 KiB, but chunks may be one byte
 * (format §4.1), and a cache of them was walked in chains of hundreds of
 * entries under c->lock at every lookup.  The table never shrinks; without
 * memory for a bigger one the old one serves on.  By c->lock. */
static void table_grow(ckcache *c)
{
    size_t n = c->n_buckets * 2;
    ckcache_entry **nb = calloc(n, sizeof *nb);
    if (!nb)
        return;
    for (size_t b = 0; b < c->n_buckets; b++) {
        ckcache_entry *next;
        for (ckcache_entry *e = c->buckets[b]; e; e = next) {
            next = e->hnext;
            size_t h = (size_t)key_mix(&e->key) & (n - 1);
            e->hnext = nb[h];
            nb[h] = e;
        }
    }
    free(c->buckets);
    c->buckets = nb;
    c->n_buckets = n;
    c->room = room_for(c);
    shrink(c);
}

/* A new LOADING entry for k (not in the table), in the table with no
 * reference; NULL when out of memory.  By c->lock. */
static ckcache_entry *claim(ckcache *c, const ckcache_key *k, size_t len)
{
    ckcache_entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->key = *k;
    e->len = len;
    e->state = ST_LOADING;
    e->in_table = 1;
    size_t b = key_hash(c, k);
    e->hnext = c->buckets[b];
    c->buckets[b] = e;
    if (++c->n_entries > 2 * c->n_buckets)
        table_grow(c);
    return e;
}

static int recently_served(ckcache *c, const ckcache_key *k);
static int queue_take(ckcache *c, const ckcache_key *k, size_t *len);

/* Claim, for a run fill starting with es[0] (just claimed), the chunks
 * after it (up to run_len in all) that have prefetch jobs queued and are
 * neither in the table nor served out lately; their jobs are taken.
 * @return the run's length, 1 when none joins.  By c->lock. */
static unsigned run_claim(ckcache *c, ckcache_entry *es[])
{
    unsigned n = 1, want = c->run_len ? c->run_len(c->fill_arg, &es[0]->key) : 1;
    if (want > CKCACHE_RUN_MAX)
        want = CKCACHE_RUN_MAX;
    while (n < want) {
        ckcache_key k = es[0]->key;
        size_t len;
        k.chunk += n;
        if (k.chunk < n || table_find(c, &k) || recently_served(c, &k) || !queue_take(c, &k, &len))
            break;
        if (!(es[n] = claim(c, &k, len)))
            break;                     /* its job is lost: prefetch is best effort */
        c->st.prefetch_done++;
        n++;
    }
    return n;
}

/* Find or start loading k; returns a referenced entry that is READY or
 * FAILED, or NULL when out of memory.  Called with c->lock held. */
static ckcache_entry *acquire(ckcache *c, const ckcache_key *k, size_t len)
{
    ckcache_entry *e = table_find(c, k);
    if (e) {
        e->refs++;
        if (e->state == ST_LOADING) {
            c->st.waits++;
            while (e->state == ST_LOADING)
                pthread_cond_wait(&c->done, &c->lock);
        } else {
            c->st.hits++;
        }
        if (e->in_table && e->state != ST_LOADING) {
            lru_unlink(e);
            lru_push_front(c, e);
        }
        return e;
    }
    ckcache_entry *es[CKCACHE_RUN_MAX];
    if (!(es[0] = claim(c, k, len)))
        return NULL;
    es[0]->refs = 1;
    c->st.misses++;
    load_run(c, es, run_claim(c, es));
    return es[0];
}

static void release_locked(ckcache *c, ckcache_entry *e)
{
    assert(e->refs > 0);
    if (--e->refs == 0 && !e->in_table)
        entry_free(c, e);
}

int ckcache_get(ckcache *c, const ckcache_key *k, size_t len, ckcache_entry **out)
{
    *out = NULL;
    if (len == 0)
        return EINVAL;
    pthread_mutex_lock(&c->lock);
    ckcache_entry *e = acquire(c, k, len);
    int err = e ? e->err : ENOMEM;
    if (e && err) {
        release_locked(c, e);
        e = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    *out = e;
    return err;
}

void ckcache_put(ckcache *c, ckcache_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&c->lock);
    release_locked(c, e);
    pthread_mutex_unlock(&c->lock);
}

static ckcache_key *served_slot(ckcache *c, const ckcache_key *k)
{
    return &c->served[key_mix(k) % SERVED_SLOTS]; /* not key_hash: the table may have fewer buckets */
}

/* Was k served out lately?  Then a reader has had it and the kernel caches
 * it: prefetching it again would decode it for nobody.  (A reader that
 * needs it again still gets it, decoded on demand.)  By c->lock. */
static int recently_served(ckcache *c, const ckcache_key *k) { return key_eq(served_slot(c, k), k); }

/* Drop the queued prefetch jobs for k (*len: the length they give).
 * @return how many there were.  By c->lock. */
static unsigned queue_remove(ckcache *c, const ckcache_key *k, size_t *len)
{
    unsigned kept = 0, n = 0;
    for (unsigned i = 0; i < c->q_len; i++) {
        prefetch_job *j = &c->queue[(c->q_head + i) % PREFETCH_QUEUE];
        if (key_eq(&j->key, k)) {
            *len = j->len;
            n++;
            continue;
        }
        c->queue[(c->q_head + kept++) % PREFETCH_QUEUE] = *j;
    }
    c->q_len = kept;
    return n;
}

/* Take k's queued prefetch jobs for a run fill.  @return 1 if there were. */
static int queue_take(ckcache *c, const ckcache_key *k, size_t *len) { return queue_remove(c, k, len) > 0; }

/* Drop queued prefetch jobs for k: a chunk served out must not be decoded
 * again by a job queued before its reader got to it.  By c->lock. */
static void queue_cancel(ckcache *c, const ckcache_key *k)
{
    size_t len;
    c->st.prefetch_cancelled += queue_remove(c, k, &len);
}

void ckcache_put_served(ckcache *c, ckcache_entry *e, size_t served)
{
    if (!e)
        return;
    pthread_mutex_lock(&c->lock);
    e->served += served;
    if (e->served >= e->len && e->in_table && e->state == ST_READY) {
        c->st.served_out++;
        *served_slot(c, &e->key) = e->key;
        queue_cancel(c, &e->key);
        unlist(c, e); /* we hold a reference: release_locked frees it */
    }
    release_locked(c, e);
    pthread_mutex_unlock(&c->lock);
}

void ckcache_set_run(ckcache *c, ckcache_run_len_fn runLen, ckcache_fill_run_fn fillRun)
{
    pthread_mutex_lock(&c->lock);
    c->run_len = fillRun ? runLen : NULL;
    c->fill_run = fillRun;
    pthread_mutex_unlock(&c->lock);
}

const void *ckcache_data(const ckcache_entry *e) { return e->data; }
size_t ckcache_len(const ckcache_entry *e) { return e->len; }

void ckcache_prefetch(ckcache *c, const ckcache_key *k, size_t len)
{
    if (c->n_workers == 0 || len == 0)
        return;
    pthread_mutex_lock(&c->lock);
    if (!table_find(c, k) && !recently_served(c, k)) {
        if (c->q_len == PREFETCH_QUEUE) {
            c->st.prefetch_dropped++;
        } else {
            prefetch_job *j = &c->queue[(c->q_head + c->q_len) % PREFETCH_QUEUE];
            j->key = *k;
            j->len = len;
            c->q_len++;
            c->st.prefetch_queued++;
            pthread_cond_signal(&c->work);
        }
    }
    pthread_mutex_unlock(&c->lock);
}

static void *worker_main(void *arg)
{
    ckcache *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->stopping && c->q_len == 0)
            pthread_cond_wait(&c->work, &c->lock);
        if (c->stopping)
            break;
        prefetch_job j = c->queue[c->q_head];
        c->q_head = (c->q_head + 1) % PREFETCH_QUEUE;
        c->q_len--;
        if (table_find(c, &j.key) || recently_served(c, &j.key))
            continue;                  /* someone got there first */
        ckcache_entry *e = acquire(c, &j.key, j.len);
        if (e)
            release_locked(c, e);
        c->st.prefetch_done++;
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

ckcache *ckcache_new(size_t limitBytes, unsigned prefetchThreads, ckcache_fill_fn fill,
                     void *fillArg)
{
    ckcache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fill = fill;
    c->fill_arg = fillArg;
    c->limit = limitBytes;
    c->n_buckets = 1024;
    while (c->n_buckets < limitBytes / (64u << 10) && c->n_buckets < (1u << 22))
        c->n_buckets <<= 1;
    c->n_buckets0 = c->n_buckets;
    c->buckets = calloc(c->n_buckets, sizeof *c->buckets);
    if (!c->buckets)
        goto fail_buckets;
    c->room = room_for(c);
    c->lru.lnext = c->lru.lprev = &c->lru;
    for (unsigned i = 0; i < SERVED_SLOTS; i++)
        c->served[i].file = UINT32_MAX;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    pthread_cond_init(&c->work, NULL);
    if (prefetchThreads) {
        c->workers = calloc(prefetchThreads, sizeof *c->workers);
        if (!c->workers)
            goto fail_workers;
        for (; c->n_workers < prefetchThreads; c->n_workers++)
            if (pthread_create(&c->workers[c->n_workers], NULL, worker_main, c) != 0)
                goto fail_workers;
    }
    return c;

fail_workers:
    ckcache_free(c);
    return NULL;
fail_buckets:
    free(c);
    return NULL;
}

/* Invariants 1-5 and 7 of the top comment, under the lock. */
const char *ckcache_check(ckcache *c)
{
    const char *bad = NULL;
    size_t n = 0, linked = 0, bytes = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t b = 0; b < c->n_buckets && !bad; b++)
        for (ckcache_entry *e = c->buckets[b]; e && !bad; e = e->hnext, n++) {
            if (!e->in_table || key_hash(c, &e->key) != b || e->refs < 0)
                bad = "3: an entry of the table is not marked in_table, in the wrong bucket, "
                      "or has negative refs";
            else if ((e->state == ST_LOADING) != (e->lprev == NULL))
                bad = "1: an entry of the table is in the LRU list iff it is not LOADING";
            if (e->state != ST_LOADING)
                bytes += entry_cost(e), linked++;
        }
    if (!bad && n != c->n_entries)
        bad = "3: n_entries differs from the entries in the table";
    if (!bad && bytes != c->bytes)
        bad = "2: bytes differs from the cost of the table's entries not LOADING";
    size_t in_lru = 0;
    for (ckcache_entry *e = c->lru.lnext; !bad && e != &c->lru; e = e->lnext, in_lru++)
        if (!e->lnext || e->lnext->lprev != e || !e->in_table || e->state == ST_LOADING ||
            in_lru > linked)
            bad = "4/1: the LRU ring is broken or holds an entry out of the table or LOADING";
    if (!bad && in_lru != linked)
        bad = "1: the LRU list misses entries of the table";
    for (unsigned i = 0; !bad && i < c->n_spare; i++)
        if (c->n_spare > MAX_SPARE || !c->spare[i].p || c->spare[i].len < MIN_SPARE)
            bad = "5: too many spare buffers or a spare below MIN_SPARE";
    if (!bad && c->room != room_for(c))
        bad = "8: room is not the limit less the table's growth";
    if (!bad && c->q_len > PREFETCH_QUEUE)
        bad = "7: the prefetch queue is over PREFETCH_QUEUE";
    pthread_mutex_unlock(&c->lock);
    return bad;
}

void ckcache_free(ckcache *c)
{
    if (!c)
        return;
    assert(ckcache_check(c) == NULL);
    pthread_mutex_lock(&c->lock);
    c->stopping = 1;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->lock);
    for (unsigned i = 0; i < c->n_workers; i++)
        pthread_join(c->workers[i], NULL);
    free(c->workers);
    for (size_t b = 0; b < c->n_buckets; b++) {
        ckcache_entry *e = c->buckets[b];
        while (e) {
            ckcache_entry *next = e->hnext;
            assert(e->refs == 0);
            entry_free(c, e);
            e = next;
        }
    }
    while (c->n_spare)
        spare_drop_oldest(c);
    free(c->buckets);
    pthread_cond_destroy(&c->work);
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void ckcache_get_stats(ckcache *c, ckcache_stats *st)
{
    pthread_mutex_lock(&c->lock);
    *st = c->st;
    st->bytes = c->bytes;
    st->entries = c->n_entries;
    st->buckets = c->n_buckets;
    pthread_mutex_unlock(&c->lock);
}
