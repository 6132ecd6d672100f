/*
 * chunk_cache.h — a bounded LRU of decoded chunks for the mount daemon.
 *
 * The cache knows nothing of FUSE or of the container format: a chunk is a
 * key (file, extent, chunk) and a length, and the cache's owner supplies one
 * fill function that decodes a chunk into memory the cache allocated.  What
 * the cache guarantees:
 *   - a chunk is decoded at most once at a time: a request for a chunk that
 *     is being decoded waits for that decode instead of starting another;
 *   - entries are reference counted, so a caller may send straight from
 *     entry memory (no copy) while other threads evict;
 *   - the bytes held by entries in the table (each entry's bookkeeping as
 *     well as its decoded bytes: chunks may be one byte), plus the buffers
 *     kept for reuse, stay under the limit; beyond it there are only the chunks that
 *     callers hold or are decoding (entries evicted while referenced are
 *     freed when their last reference goes), a run (CKCACHE_RUN_MAX at most)
 *     per prefetch worker and per request in flight, and the chunks each
 *     request holds;
 *   - a chunk whose fill failed with EIO (damage) is remembered as failed:
 *     later requests get EIO without decoding (and without logging) again.
 *     Other errors are not remembered.
 *   - a small pool of worker threads decodes ahead on request (prefetch).
 * All functions are thread-safe.
 */
#ifndef CKFS_CHUNK_CACHE_H
#define CKFS_CHUNK_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t file;   /* owner's file number */
    uint32_t extent; /* extent within the file */
    uint64_t chunk;  /* chunk within the extent */
} ckcache_key;

/* Decode the chunk k into dst[0..len).  Called without any cache lock held,
 * on the requesting thread or on a prefetch worker.
 * @return 0, or a positive errno (EIO: the chunk is damaged). */
typedef int (*ckcache_fill_fn)(void *arg, const ckcache_key *k, void *dst, size_t len);

/* The most chunks one run fill decodes. */
#define CKCACHE_RUN_MAX 4u

/* Optional (ckcache_set_run): decode chunks k->chunk .. k->chunk + n - 1
 * (2 <= n <= CKCACHE_RUN_MAX) of k's file and extent in one go, chunk i into
 * dst[i][0..len[i]), setting err[i] as the fill function would for that
 * chunk alone (0, or a positive errno): a damaged chunk must leave the
 * others' bytes and errors alone.  Called without any cache lock held. */
typedef void (*ckcache_fill_run_fn)(void *arg, const ckcache_key *k, unsigned n, void *const dst[],
                                    const size_t len[], int err[]);

/* Optional: how many chunks from k (1 .. CKCACHE_RUN_MAX; 1: none with it)
 * are worth one run fill, for an encoding that decodes several chunks
 * faster than one by one.  Called with the cache's lock held: it must not
 * block nor call the cache. */
typedef unsigned (*ckcache_run_len_fn)(void *arg, const ckcache_key *k);

typedef struct ckcache ckcache;
typedef struct ckcache_entry ckcache_entry;

typedef struct {
    uint64_t hits, misses, waits;  /* waits: found the chunk being decoded */
    uint64_t evictions, failures;
    uint64_t served_out;           /* dropped once every byte was served */
    uint64_t prefetch_queued, prefetch_done, prefetch_dropped;
    uint64_t prefetch_cancelled;   /* queued, then served out before a worker got to it */
    uint64_t bytes, entries;       /* now held in the table (bytes: what counts against the limit) */
    uint64_t buckets;              /* the table's size: it doubles past two entries a bucket */
    uint64_t runs, run_chunks;     /* run fills, and the chunks they decoded */
} ckcache_stats;

/* Create a cache holding at most limitBytes of decoded chunks (counted by
 * ckcache_cost), with
 * prefetchThreads workers (0: prefetch requests are ignored).
 * @return NULL when out of memory or threads cannot be started. */
ckcache *ckcache_new(size_t limitBytes, unsigned prefetchThreads, ckcache_fill_fn fill,
                     void *fillArg);

/* Let the cache decode consecutive chunks of one extent together: when it
 * decodes chunk k (a prefetch worker's job, or a miss of ckcache_get) and
 * prefetch jobs are queued for the chunks after it (up to runLen(k) in
 * all, none of them cached or being decoded), it takes those jobs and
 * fills all the chunks with one call of fillRun.  Every guarantee above
 * holds for each chunk of a run (decoded once; a damaged one remembered
 * alone).  Call before any other use of c. */
void ckcache_set_run(ckcache *c, ckcache_run_len_fn runLen, ckcache_fill_run_fn fillRun);

/* What a cached chunk of len bytes counts against the limit: its decoded
 * bytes and the entry's bookkeeping, as the heap holds them. */
size_t ckcache_cost(size_t len);

/* Stop the workers (queued prefetches are dropped) and free everything.
 * No entry may still be referenced. */
void ckcache_free(ckcache *c);

/* Get chunk k of length len (> 0), decoding it if needed.
 * @return 0 and a referenced entry in *out, or a positive errno. */
int ckcache_get(ckcache *c, const ckcache_key *k, size_t len, ckcache_entry **out);

/* Drop a reference taken by ckcache_get. */
void ckcache_put(ckcache *c, ckcache_entry *e);

/* Drop a reference taken by ckcache_get after `served` bytes of the chunk
 * were handed to a reader.  Once as many bytes as the chunk holds have been
 * served, the chunk leaves the cache (its buffer is reused for the next
 * decode): the kernel's page cache holds what was served (keep_cache), so a
 * streaming reader's chunks would only push out everything else and make the
 * cache fault in fresh memory for each new chunk. */
void ckcache_put_served(ckcache *c, ckcache_entry *e, size_t served);

const void *ckcache_data(const ckcache_entry *e);
size_t ckcache_len(const ckcache_entry *e);

/* Ask a worker to decode chunk k if it is neither cached nor being decoded.
 * Best effort: dropped when the queue is full. */
void ckcache_prefetch(ckcache *c, const ckcache_key *k, size_t len);

void ckcache_get_stats(ckcache *c, ckcache_stats *st);

/* Check the cache's invariants (listed at the top of chunk_cache.c); for
 * tests and debug builds, O(entries) under the lock.
 * @return NULL if they hold, else which one is broken. */
const char *ckcache_check(ckcache *c);

#endif
