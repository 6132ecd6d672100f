/*
 * s3_source.h — an S3 object as a source of packed bytes for the format
 * library's reader (container.h, ckp_source): "these byte ranges of this
 * file, from this version of it".  Every read is a ranged GET carrying
 * If-Match with the ETag the source was bound to, so an object replaced
 * later is never mixed with the bytes read before: the read fails with
 * ESTALE and the source stays marked changed.
 *
 *   cks3_source_ctx sc = {.c = client, .bucket = "b", .fail_fast_ms = 1000};
 *   ckp_source *src;  cks3_source_open(&sc, key, &src, ...);   (one GET, no HEAD)
 *   ckp_open_source(src, key, &reader, ...);
 *
 * One cks3_source_ctx (owned by the caller, outliving its sources) is
 * shared by the sources of one mount or command: its counters add up their
 * reads.  Thread-safe.
 */
#ifndef CKS3_SOURCE_H
#define CKS3_SOURCE_H

#include <stdatomic.h>
#include <stdint.h>

#include "container.h"
#include "s3.h"

typedef struct ckdc ckdc;          /* disk_cache.h */

typedef struct {
    cks3_client *c;
    const char *bucket;
    /* After a read gave up on a network or server failure (the client's
     * retries spent), reads of every source of this ctx fail at once (EIO)
     * for this long, so that a request touching many chunks fails within
     * one retry budget, not one per chunk; 0: never. */
    unsigned fail_fast_ms;
    /* Each failed read's message (names the object and what happened; no
     * secret), or NULL. */
    void (*on_error)(void *arg, const char *msg);
    void *on_error_arg;
    /* The local disk cache of fetched ranges (disk_cache.h; owned by the
     * caller), or NULL: reads take what its entries hold and fetch, then
     * keep, the rest.  The counters below count fetched bytes only. */
    ckdc *disk;
    _Atomic uint64_t bytes;        /* packed bytes read (successful GETs) */
    _Atomic uint64_t reads;        /* successful GETs */
    _Atomic uint64_t errors;       /* failed reads */
    _Atomic uint64_t down_until_ms;/* fail-fast until then (CLOCK_MONOTONIC ms) */
} cks3_source_ctx;

/* A source reading key of ctx->bucket, bound to o (its size and ETag).
 * @return NULL when out of memory. */
ckp_source *cks3_source_new(cks3_source_ctx *ctx, const char *key, const cks3_object *o);
/* The source of key as it is now, in one ranged GET of its first
 * CKP_SOURCE_PREFIX bytes, without If-Match (cks3_get_first): that
 * response's ETag binds the source and its Content-Range gives the size,
 * so no HEAD is needed; its bytes are kept while the file is open, and every
 * read within them takes its part from there (ckp_open_source reads exactly
 * them first: the header, and the TOC and chunk indexes of a small file;
 * dropped once a chunk's hash fails in them).  Within the
 * fail-fast time of ctx it fails at once (CKS3_ERR_NETWORK, "not tried");
 * a transient failure starts that time, as a failed read does.
 * @return CKS3_OK with *out set; the client's status (CKS3_ERR_NOT_FOUND,
 * ...) with err saying why. */
cks3_status cks3_source_open(cks3_source_ctx *ctx, const char *key, ckp_source **out, char *err,
                             size_t errCapacity);
/* 1 once a read of s found the object replaced (ESTALE). */
int cks3_source_changed(const ckp_source *s);
/* The ETag s is bound to. */
const char *cks3_source_etag(const ckp_source *s);

#endif
