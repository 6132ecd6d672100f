/*
 * test_chunk_cache.c — the mount daemon's chunk cache (fs/chunk_cache.h),
 * against a fill function that counts its calls and writes bytes derived
 * from the key, so that every byte a caller sees can be checked.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chunk_cache.h"
#include "test_util.h"

#define LEN 4096u

#define MAXCH 64u

typedef struct {
    atomic_int calls;
    atomic_int runs;       /* run fills (fill_run) */
    atomic_int per_chunk[MAXCH]; /* decodes of each chunk, alone or in a run */
    unsigned run_len;      /* what run_len answers */
    uint64_t gate_chunk;   /* this chunk's fill waits until gate_open */
    pthread_mutex_t gate_lock;
    pthread_cond_t gate_cond;
    int gate_open;
    int delay_ms;          /* each fill sleeps this long */
    uint64_t slow_chunk;   /* ... or only this chunk's fill, when delay_ms is 0 */
    uint64_t eio_chunk;    /* chunk number that fails with EIO */
    uint64_t eagain_chunk; /* chunk number that fails with EAGAIN */
} filler;

static uint8_t byte_of(const ckcache_key *k, size_t i)
{
    return (uint8_t)(k->file * 131u + k->extent * 31u + k->chunk * 7u + i * 3u);
}

/* Wait at the gate when k is the gated chunk. */
static void gate(filler *f, const ckcache_key *k)
{
    if (k->chunk != f->gate_chunk)
        return;
    pthread_mutex_lock(&f->gate_lock);
    while (!f->gate_open)
        pthread_cond_wait(&f->gate_cond, &f->gate_lock);
    pthread_mutex_unlock(&f->gate_lock);
}

static void gate_release(filler *f)
{
    pthread_mutex_lock(&f->gate_lock);
    f->gate_open = 1;
    pthread_cond_broadcast(&f->gate_cond);
    pthread_mutex_unlock(&f->gate_lock);
}

static int fill(void *arg, const ckcache_key *k, void *dst, size_t len)
{
    filler *f = arg;
    atomic_fetch_add(&f->calls, 1);
    if (k->chunk < MAXCH)
        atomic_fetch_add(&f->per_chunk[k->chunk], 1);
    gate(f, k);
    if (f->delay_ms)
        usleep((useconds_t)f->delay_ms * 1000u);
    else if (k->chunk == f->slow_chunk)
        usleep(500 * 1000u);
    if (k->chunk == f->eio_chunk)
        return EIO;
    if (k->chunk == f->eagain_chunk)
        return EAGAIN;
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)dst)[i] = byte_of(k, i);
    return 0;
}

static filler new_filler(void)
{
    return (filler){.eio_chunk = UINT64_MAX, .eagain_chunk = UINT64_MAX, .slow_chunk = UINT64_MAX,
                    .gate_chunk = UINT64_MAX, .gate_lock = PTHREAD_MUTEX_INITIALIZER,
                    .gate_cond = PTHREAD_COND_INITIALIZER, .run_len = 1};
}

/* A run fill as the owner's must be: each chunk filled (and failed) as
 * fill would alone; one call counted in runs. */
static void fill_run(void *arg, const ckcache_key *k, unsigned n, void *const dst[], const size_t len[],
                     int err[])
{
    filler *f = arg;
    ck_assert_uint_ge(n, 2);
    ck_assert_uint_le(n, f->run_len);
    atomic_fetch_add(&f->runs, 1);
    for (unsigned i = 0; i < n; i++) {
        ckcache_key ki = *k;
        ki.chunk += i;
        err[i] = fill(arg, &ki, dst[i], len[i]);
        atomic_fetch_sub(&f->calls, 1); /* calls: fills of one chunk alone */
    }
}

static unsigned run_len(void *arg, const ckcache_key *k)
{
    (void)k;
    return ((filler *)arg)->run_len;
}

static void check_invariants(ckcache *c)
{
    const char *bad = ckcache_check(c);
    ck_assert_msg(bad == NULL, "cache invariant %s", bad ? bad : "");
}

static int data_ok(const ckcache_entry *e, const ckcache_key *k)
{
    const uint8_t *d = ckcache_data(e);
    for (size_t i = 0; i < ckcache_len(e); i++)
        if (d[i] != byte_of(k, i))
            return 0;
    return 1;
}

static ckcache_key key(uint64_t chunk) { return (ckcache_key){.file = 1, .extent = 2, .chunk = chunk}; }

/* A cache of `chunks` entries of LEN bytes over f's fill, with `workers`
 * prefetch threads. */
static ckcache *new_cache(filler *f, size_t chunks, unsigned workers)
{
    ckcache *c = ckcache_new(chunks * ckcache_cost(LEN), workers, fill, f);
    ck_assert_ptr_nonnull(c);
    return c;
}

/* Get chunk's entry (it must succeed) and put it back; @return whether its
 * bytes were right. */
static int get_put(ckcache *c, uint64_t chunk)
{
    ckcache_key k = key(chunk);
    ckcache_entry *e;
    ck_assert_int_eq(ckcache_get(c, &k, LEN, &e), 0);
    int ok = data_ok(e, &k);
    ckcache_put(c, e);
    return ok;
}

/* The end of every test: the invariants hold, and the cache is freed. */
static void check_and_free(ckcache *c)
{
    check_invariants(c);
    ckcache_free(c);
}

START_TEST(test_hit_after_miss)
{
    filler f = new_filler();
    ckcache *c = new_cache(&f, 16, 0);
    ck_assert(get_put(c, 5));
    ck_assert(get_put(c, 5));
    ckcache_stats st;
    ckcache_get_stats(c, &st);
    ck_assert_int_eq(atomic_load(&f.calls), 1);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.bytes, ckcache_cost(LEN));
    check_and_free(c);
}
END_TEST

START_TEST(test_limit_evicts_lru)
{
    filler f = new_filler();
    ckcache *c = new_cache(&f, 4, 0);
    for (uint64_t i = 0; i < 10; i++) {
        ck_assert(get_put(c, i));
        ckcache_stats st;
        ckcache_get_stats(c, &st);
        ck_assert_uint_le(st.bytes, 4 * ckcache_cost(LEN));
        check_invariants(c);
    }
    /* the 4 most recent are cached, the oldest is not */
    int before = atomic_load(&f.calls);
    for (uint64_t i = 6; i < 10; i++)
        get_put(c, i);
    ck_assert_int_eq(atomic_load(&f.calls), before);
    ck_assert(get_put(c, 0));
    ck_assert_int_eq(atomic_load(&f.calls), before + 1);
    check_and_free(c);
}
END_TEST

/* An entry evicted while referenced stays valid until its last put. */
START_TEST(test_evicted_while_referenced)
{
    filler f = new_filler();
    ckcache *c = new_cache(&f, 2, 0);
    ckcache_key k0 = key(0);
    ckcache_entry *held;
    ck_assert_int_eq(ckcache_get(c, &k0, LEN, &held), 0);
    for (uint64_t i = 1; i < 6; i++)
        get_put(c, i);
    ck_assert(data_ok(held, &k0));
    ckcache_put(c, held);
    check_and_free(c);
}
END_TEST

START_TEST(test_served_out)
{
    filler f = new_filler();
    ckcache *c = new_cache(&f, 64, 0);
    ckcache_key k = key(3);
    ckcache_entry *e;
    ck_assert_int_eq(ckcache_get(c, &k, LEN, &e), 0);
    ckcache_put_served(c, e, LEN / 2);     /* half of it: still cached */
    ck_assert_int_eq(ckcache_get(c, &k, LEN, &e), 0);
    ck_assert_int_eq(atomic_load(&f.calls), 1);
    ck_assert(data_ok(e, &k));
    ckcache_put_served(c, e, LEN - LEN / 2); /* all of it: gone */
    ckcache_stats st;
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.served_out, 1);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_int_eq(ckcache_get(c, &k, LEN, &e), 0); /* decoded again, same bytes */
    ck_assert_int_eq(atomic_load(&f.calls), 2);
    ck_assert(data_ok(e, &k));
    ckcache_put_served(c, e, 0);           /* a reply that did not go out */
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.entries, 1);

    /* served out while another reader holds it: its bytes stay valid */
    ckcache_entry *a, *b;
    ckcache_key k2 = key(4);
    ck_assert_int_eq(ckcache_get(c, &k2, LEN, &a), 0);
    ck_assert_int_eq(ckcache_get(c, &k2, LEN, &b), 0);
    ckcache_put_served(c, a, LEN);
    ck_assert(data_ok(b, &k2));
    ckcache_put_served(c, b, LEN);
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.served_out, 2);
    check_and_free(c);
}
END_TEST

typedef struct {
    ckcache *c;
    ckcache_key k;
    int err, ok;
} getter;

static void *get_thread(void *arg)
{
    getter *g = arg;
    ckcache_entry *e;
    g->err = ckcache_get(g->c, &g->k, LEN, &e);
    if (!g->err) {
        g->ok = data_ok(e, &g->k);
        ckcache_put(g->c, e);
    }
    return NULL;
}

/* Readers of a chunk being decoded wait for that decode. */
START_TEST(test_concurrent_single_decode)
{
    filler f = new_filler();
    f.delay_ms = 100;
    ckcache *c = new_cache(&f, 64, 0);
    pthread_t t[6];
    getter g[6];
    for (int i = 0; i < 6; i++) {
        g[i] = (getter){.c = c, .k = key(9)};
        pthread_create(&t[i], NULL, get_thread, &g[i]);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(g[i].err, 0);
        ck_assert(g[i].ok);
    }
    ck_assert_int_eq(atomic_load(&f.calls), 1);
    ckcache_stats st;
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.hits + st.waits, 5);
    check_and_free(c);
}
END_TEST

START_TEST(test_failures)
{
    filler f = new_filler();
    f.eio_chunk = 7;
    f.eagain_chunk = 8;
    ckcache *c = new_cache(&f, 64, 0);
    ckcache_entry *e = (ckcache_entry *)1;
    ckcache_key k7 = key(7), k8 = key(8);
    ck_assert_int_eq(ckcache_get(c, &k7, LEN, &e), EIO);
    ck_assert_ptr_null(e);
    ck_assert_int_eq(ckcache_get(c, &k7, LEN, &e), EIO); /* remembered */
    ck_assert_int_eq(atomic_load(&f.calls), 1);
    ck_assert_int_eq(ckcache_get(c, &k8, LEN, &e), EAGAIN);
    ck_assert_int_eq(ckcache_get(c, &k8, LEN, &e), EAGAIN); /* not remembered */
    ck_assert_int_eq(atomic_load(&f.calls), 3);
    ckcache_stats st;
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.failures, 3);
    check_and_free(c);
}
END_TEST

START_TEST(test_prefetch)
{
    filler f = new_filler();
    ckcache *c = new_cache(&f, 64, 2);
    for (uint64_t i = 0; i < 8; i++) {
        ckcache_key k = key(i);
        ckcache_prefetch(c, &k, LEN);
    }
    ckcache_stats st;
    for (int i = 0; i < 500; i++) { /* up to 5 s */
        ckcache_get_stats(c, &st);
        if (st.prefetch_done == 8)
            break;
        usleep(10000);
    }
    ck_assert_uint_eq(st.prefetch_done, 8);
    int calls = atomic_load(&f.calls);
    ck_assert_int_eq(calls, 8);
    for (uint64_t i = 0; i < 8; i++)
        ck_assert(get_put(c, i));
    ck_assert_int_eq(atomic_load(&f.calls), calls); /* all hits */
    check_and_free(c);
}
END_TEST

/* A chunk served out is not decoded again for prefetch: jobs queued for it
 * are cancelled, and later prefetch requests for it are ignored. */
START_TEST(test_no_prefetch_after_served_out)
{
    filler f = new_filler();
    f.slow_chunk = 1;            /* keeps the one worker busy for 500 ms */
    ckcache *c = new_cache(&f, 64, 1);
    ckcache_key k1 = key(1), k2 = key(2);
    ckcache_stats st;
    ckcache_prefetch(c, &k1, LEN);
    for (int i = 0; i < 100 && atomic_load(&f.calls) == 0; i++)
        usleep(1000);            /* the worker has taken k1 */
    ckcache_prefetch(c, &k2, LEN); /* queued behind it */
    ckcache_entry *e;
    ck_assert_int_eq(ckcache_get(c, &k2, LEN, &e), 0);
    ckcache_put_served(c, e, LEN);
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.prefetch_cancelled, 1);
    ckcache_prefetch(c, &k2, LEN); /* recently served: ignored */
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.prefetch_queued, 2);
    ck_assert_int_eq(ckcache_get(c, &k1, LEN, &e), 0); /* waits for the worker */
    ckcache_put(c, e);
    usleep(50 * 1000);
    ck_assert_int_eq(atomic_load(&f.calls), 2); /* k1 once, k2 once */
    ck_assert(get_put(c, 2)); /* a reader still gets it */
    ck_assert_int_eq(atomic_load(&f.calls), 3);
    check_and_free(c);
}
END_TEST

/* Bytes malloc has handed out and not had back (glibc's own count). */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* The limit counts each entry's bookkeeping, not only its decoded bytes:
 * chunks may be one byte (format §4.1), and 100,000 of them under a 256 KiB
 * limit held 100,000 entries (~13 MiB, each ~130 bytes counted as 1).  The
 * heap the cache holds (malloc's own count) stays within the limit, and the
 * newest chunks are still there with their bytes. */
START_TEST(test_one_byte_chunks_bounded)
{
    const size_t limit = 256u << 10, n = 100000;
    filler f = new_filler();
    ckcache *c = ckcache_new(limit, 0, fill, &f);
    ck_assert_ptr_nonnull(c);
    size_t base = heap_in_use();
    for (uint64_t i = 0; i < n; i++) {
        ckcache_key k = key(i);
        ckcache_entry *e;
        ck_assert_int_eq(ckcache_get(c, &k, 1, &e), 0);
        ck_assert(data_ok(e, &k));
        ckcache_put(c, e);
    }
    ckcache_stats st;
    ckcache_get_stats(c, &st);
    size_t held = heap_in_use() - base;
    ck_assert_msg(st.entries * 64 <= limit, "%llu one-byte entries under a %zu-byte limit",
                  (unsigned long long)st.entries, limit);
    /* 4 KiB: the freed blocks glibc's per-thread cache keeps count as in use;
     * under ASan malloc is ASan's and glibc's count stays at 0 */
    ck_assert_msg(held <= limit + 4096, "the cache holds %zu bytes of heap under a %zu-byte limit (%llu entries)", held,
                  limit, (unsigned long long)st.entries);
    ck_assert_uint_gt(st.entries, limit / 256);  /* but it still caches */
    int calls = atomic_load(&f.calls);
    for (uint64_t i = n - 100; i < n; i++) {
        ckcache_key k = key(i);
        ckcache_entry *e;
        ck_assert_int_eq(ckcache_get(c, &k, 1, &e), 0);
        ck_assert(data_ok(e, &k));
        ckcache_put(c, e);
    }
    ck_assert_int_eq(atomic_load(&f.calls), calls); /* the newest 100 were hits */
    check_and_free(c);
}
END_TEST

/* A cache holding many small chunks (one byte: format §4.1) grows its table,
 * so that a lookup walks a chain of a few entries, not hundreds: 200,000
 * one-byte chunks under 64 MiB (the table first sized for 1,024 chunks of
 * 64 KiB) are all held, at most two a bucket, and still found. */
START_TEST(test_table_grows_with_small_chunks)
{
    const size_t limit = 64u << 20, n = 200000;
    filler f = new_filler();
    ckcache *c = ckcache_new(limit, 0, fill, &f);
    ck_assert_ptr_nonnull(c);
    for (uint64_t i = 0; i < n; i++) {
        ckcache_key k = key(i);
        ckcache_entry *e;
        ck_assert_int_eq(ckcache_get(c, &k, 1, &e), 0);
        ckcache_put(c, e);
    }
    ckcache_stats st;
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.entries, n);
    ck_assert_msg(st.entries <= 2 * st.buckets, "%llu entries in %llu buckets", (unsigned long long)st.entries,
                  (unsigned long long)st.buckets);
    ck_assert_ptr_null(ckcache_check(c)); /* every entry in the bucket of its key */
    int calls = atomic_load(&f.calls);
    for (uint64_t i = 0; i < n; i += 997) {
        ckcache_key k = key(i);
        ckcache_entry *e;
        ck_assert_int_eq(ckcache_get(c, &k, 1, &e), 0);
        ck_assert(data_ok(e, &k));
        ckcache_put(c, e);
    }
    ck_assert_int_eq(atomic_load(&f.calls), calls); /* all hits after the growth */
    check_and_free(c);
}
END_TEST

/* Wait (up to 10 s) until the cache's workers have done `done` prefetch jobs. */
static void wait_prefetched(ckcache *c, uint64_t done)
{
    ckcache_stats st;
    for (int i = 0; i < 1000; i++) {
        ckcache_get_stats(c, &st);
        if (st.prefetch_done >= done)
            return;
        usleep(10000);
    }
    ck_assert_uint_eq(st.prefetch_done, done);
}

/* A cache of f, its one worker held at the gate by chunk 60 while chunks
 * from..to-1 are queued behind it. */
static ckcache *gated_cache(filler *f, size_t chunks, uint64_t from, uint64_t to)
{
    f->gate_chunk = 60;
    ckcache *c = new_cache(f, chunks, 1);
    ckcache_set_run(c, run_len, fill_run);
    ckcache_key g = key(60);
    ckcache_prefetch(c, &g, LEN);
    for (int i = 0; i < 1000 && atomic_load(&f->per_chunk[60]) == 0; i++)
        usleep(10000); /* the worker has taken chunk 60: the jobs below stay queued */
    ck_assert_int_eq(atomic_load(&f->per_chunk[60]), 1);
    for (uint64_t i = from; i < to; i++) {
        ckcache_key k = key(i);
        ckcache_prefetch(c, &k, LEN);
    }
    return c;
}

/* A prefetch worker decodes queued consecutive chunks in runs of run_len:
 * 8 chunks in 4 pair fills, each chunk once, every byte right, all hits. */
START_TEST(test_run_prefetch_pairs)
{
    filler f = new_filler();
    f.run_len = 2;
    ckcache *c = gated_cache(&f, 64, 0, 8);
    gate_release(&f);
    wait_prefetched(c, 9);
    ck_assert_int_eq(atomic_load(&f.runs), 4);
    ck_assert_int_eq(atomic_load(&f.calls), 1); /* chunk 60, alone */
    for (uint64_t i = 0; i < 8; i++) {
        ck_assert_int_eq(atomic_load(&f.per_chunk[i]), 1);
        ck_assert(get_put(c, i));
    }
    ckcache_stats st;
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.runs, 4);
    ck_assert_uint_eq(st.run_chunks, 8);
    ck_assert_uint_eq(st.hits, 8);
    check_and_free(c);
}
END_TEST

/* A reader's miss takes the queued job of the next chunk into a pair.  A
 * chunk of a pair that fails leaves the other served: damage (EIO) is
 * remembered for that chunk alone, a transient error not at all (the
 * chunk is decoded again on the next request), whichever of the pair it is. */
START_TEST(test_run_failures)
{
    filler f = new_filler();
    f.run_len = 2;
    f.eio_chunk = 1;    /* second of the pair (0, 1) */
    f.eagain_chunk = 2; /* first of the pair (2, 3) */
    ckcache *c = gated_cache(&f, 64, 0, 6);
    ckcache_entry *e;
    ckcache_key k0 = key(0), k1 = key(1), k2 = key(2), k4 = key(4), k5 = key(5);
    ck_assert(get_put(c, 0));
    ck_assert_int_eq(atomic_load(&f.runs), 1);
    ck_assert_int_eq(ckcache_get(c, &k1, LEN, &e), EIO);
    ck_assert_int_eq(atomic_load(&f.per_chunk[1]), 1); /* remembered from the pair */
    ck_assert(get_put(c, 0));
    ck_assert_int_eq(ckcache_get(c, &k2, LEN, &e), EAGAIN);
    ck_assert_int_eq(atomic_load(&f.runs), 2);
    ck_assert(get_put(c, 3));                          /* decoded by the pair: a hit */
    ck_assert_int_eq(atomic_load(&f.per_chunk[3]), 1);
    ck_assert_int_eq(ckcache_get(c, &k2, LEN, &e), EAGAIN); /* not remembered */
    ck_assert_int_eq(atomic_load(&f.per_chunk[2]), 2);
    f.eagain_chunk = 5; /* second of the pair (4, 5): freed, never seen by anyone */
    ck_assert(get_put(c, 4));
    ck_assert_int_eq(ckcache_get(c, &k5, LEN, &e), EAGAIN);
    ck_assert_int_eq(atomic_load(&f.per_chunk[5]), 2);
    ck_assert_int_eq(atomic_load(&f.runs), 3);
    ck_assert_int_eq(ckcache_get(c, &k0, LEN, &e), 0);
    ck_assert(data_ok(e, &k0));
    ckcache_put(c, e);
    (void)k4;
    ckcache_stats st;
    ckcache_get_stats(c, &st);
    ck_assert_uint_eq(st.failures, 5); /* 1 (EIO once), 2 twice, 5 twice */
    gate_release(&f);
    check_and_free(c);
}
END_TEST

/* Runs of 4 in a cache of 2 chunks: the limit holds once the run is in
 * (the entries the cache keeps), and every chunk's bytes are right. */
START_TEST(test_run_limit)
{
    filler f = new_filler();
    f.run_len = 4;
    ckcache *c = gated_cache(&f, 2, 0, 16);
    ckcache_stats st;
    for (uint64_t i = 0; i < 16; i++) {
        ck_assert(get_put(c, i));
        ckcache_get_stats(c, &st);
        ck_assert_uint_le(st.bytes, 2 * ckcache_cost(LEN));
        check_invariants(c);
    }
    ck_assert_int_ge(atomic_load(&f.runs), 1);
    gate_release(&f);
    check_and_free(c);
}
END_TEST

typedef struct {
    ckcache *c;
    unsigned id;
    int bad;
} racer;

/* Prefetch a stretch of chunks and read them in an order of its own:
 * overlapping runs claimed by readers and workers at once. */
static void *race_thread(void *arg)
{
    racer *r = arg;
    for (unsigned round = 0; round < 4; round++) {
        uint64_t from = (r->id * 3 + round * 5) % (MAXCH - 8);
        for (uint64_t i = from; i < from + 8; i++) {
            ckcache_key k = key(i);
            ckcache_prefetch(r->c, &k, LEN);
        }
        for (uint64_t j = 0; j < 8; j++) {
            uint64_t i = from + (r->id & 1 ? 7 - j : j);
            ckcache_key k = key(i);
            ckcache_entry *e;
            if (ckcache_get(r->c, &k, LEN, &e) != 0 || !data_ok(e, &k))
                r->bad++;
            if (e)
                ckcache_put(r->c, e);
        }
    }
    return NULL;
}

/* Readers and workers wanting overlapping runs: no chunk is decoded twice
 * (the cache holds them all), none waits forever, every byte is right. */
START_TEST(test_run_concurrent)
{
    filler f = new_filler();
    f.run_len = 2;
    f.delay_ms = 1; /* decodes overlap */
    ckcache *c = new_cache(&f, 2 * MAXCH, 3);
    ckcache_set_run(c, run_len, fill_run);
    pthread_t t[6];
    racer r[6];
    for (unsigned i = 0; i < 6; i++) {
        r[i] = (racer){.c = c, .id = i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_thread, &r[i]), 0);
    }
    for (unsigned i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(r[i].bad, 0);
    }
    for (unsigned i = 0; i < MAXCH; i++)
        ck_assert_int_le(atomic_load(&f.per_chunk[i]), 1);
    check_and_free(c); /* queued jobs left are dropped */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chunk_cache");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_hit_after_miss);
    tcase_add_test(tc, test_limit_evicts_lru);
    tcase_add_test(tc, test_evicted_while_referenced);
    tcase_add_test(tc, test_served_out);
    tcase_add_test(tc, test_concurrent_single_decode);
    tcase_add_test(tc, test_failures);
    tcase_add_test(tc, test_prefetch);
    tcase_add_test(tc, test_no_prefetch_after_served_out);
    tcase_add_test(tc, test_one_byte_chunks_bounded);
    tcase_add_test(tc, test_table_grows_with_small_chunks);
    tcase_add_test(tc, test_run_prefetch_pairs);
    tcase_add_test(tc, test_run_failures);
    tcase_add_test(tc, test_run_limit);
    tcase_add_test(tc, test_run_concurrent);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
