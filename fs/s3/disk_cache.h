/*
 * disk_cache.h — a local disk cache of the packed bytes an s3:// mount
 * fetched (`-o cache_dir=DIR,cache_dir_size=SIZE`, docs/object-storage.md
 * "The disk cache"), so that a remount or a restarted daemon reads again
 * from local disk what it already fetched instead of from the network.
 *
 * An entry is one fetched range of one object, exactly as it was fetched
 * (a network window's plane, a header, a chunk index): a file
 * DIR/v1/OBJ/OFF-LEN, OBJ the XXH3-128 of bucket, key and ETag, so another
 * version of the object never finds an old entry.  Its header repeats
 * bucket, key, ETag, offset and length (a file copied over another's name
 * is refused) and holds an XXH3-64 of every 64 KiB of its bytes; every use
 * checks the header and the blocks it serves from.  An entry that fails a
 * check (flipped bytes, truncated, another entry's file, a format of
 * another version) is deleted and its bytes fetched again: a bad entry
 * never gives EIO and never wrong bytes.  Entries are written to
 * DIR/v1/tmp/PID.N and renamed into place, so a daemon killed mid-write
 * leaves only a temporary file, removed by the next daemon to scan the
 * cache once PID is gone; several daemons may share DIR (each writes its
 * own temporary names; rename is atomic; a reader keeps the file it
 * opened even when another daemon deletes or replaces the name).
 *
 * Bounded: the space the files take (du) is kept at most the size limit
 * (plus the entries other daemons are writing at that moment): before an
 * entry is written its space is reserved; past the limit, the least
 * recently used entries (by mtime, set at every use) are deleted down to
 * 15/16 of it.  The whole cache is scanned at open and every limit/16
 * bytes written (to see what other daemons wrote).
 * Library code: never prints; thread-safe.
 */
#ifndef CKS3_DISK_CACHE_H
#define CKS3_DISK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "s3.h"

typedef struct ckdc ckdc;
typedef struct ckdc_obj ckdc_obj;

typedef struct {
    uint64_t hits, hit_bytes;       /* ranges served from entries, and their bytes */
    uint64_t miss_bytes;            /* bytes fetched because no entry held them */
    uint64_t stored, stored_bytes;  /* entries written */
    uint64_t bad;                   /* entries that failed a check: deleted, fetched again */
    uint64_t evicted, evicted_bytes;/* entries deleted to stay under the limit (by this daemon) */
    uint64_t write_errors;          /* entries not written (disk full, ...): served anyway */
    uint64_t used;                  /* bytes of the cache on disk at the last scan, plus those written since */
} ckdc_stats;

/* The cache in directory dir (made, mode 0700, if missing; its parent must
 * exist), holding at most limit bytes.  Scans it: removes dead daemons'
 * temporary files, evicts down to the limit.  @return CKS3_OK, or
 * CKS3_ERR_ARG (dir is not a directory we can write, limit under 1 MiB) /
 * CKS3_ERR_NOMEM with a message naming dir in err. */
cks3_status ckdc_open(const char *dir, uint64_t limit, ckdc **out, char *err, size_t errCapacity);
void ckdc_close(ckdc *dc);
void ckdc_get_stats(ckdc *dc, ckdc_stats *st);

/* The entries of one version of one object (size bytes: an entry named
 * as reaching past them is ignored).  @return NULL
 * when out of memory.  Freed with ckdc_obj_free, before ckdc_close. */
ckdc_obj *ckdc_obj_new(ckdc *dc, const char *bucket, const char *key, const char *etag, uint64_t size);
void ckdc_obj_free(ckdc_obj *o);

/* Fetch len bytes at off: what good entries hold from them, the rest with
 * fetch (one call per gap between entries), which is then stored as a new
 * entry (best effort).  @return 0, or fetch's non-zero return (dst
 * partly written then). */
typedef int (*ckdc_fetch_fn)(void *arg, void *dst, size_t len, uint64_t off);
int ckdc_read(ckdc_obj *o, void *dst, size_t len, uint64_t off, ckdc_fetch_fn fetch, void *arg);

/* Bytes [off, off+len) failed a check above the cache (a chunk's hash):
 * every entry holding any of them is deleted (counted as bad), so that the
 * next ckdc_read fetches them, and damaged bytes the server sent are not
 * kept either. */
void ckdc_drop(ckdc_obj *o, uint64_t off, uint64_t len);

#endif
