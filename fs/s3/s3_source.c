/*
 * s3_source.c — an S3 object as a ckp_source (s3_source.h): ranged GETs
 * with If-Match, the fail-fast window after a failure, the counters.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "disk_cache.h"
#include "s3_source.h"

typedef struct {
    ckp_source base;               /* first: a ckp_source * is one of these */
    cks3_source_ctx *ctx;
    char *key;
    char etag[CKS3_ETAG_MAX];
    ckdc_obj *disk;                /* its entries in ctx->disk, or NULL */
    atomic_int changed;
    /* cks3_source_open: the first first_len bytes of the object, which its
     * first GET brought (the reader's open reads them first).  Kept while
     * the file is open and never written after cks3_source_open, so every
     * later read takes its part in them from here and fetches only the
     * rest: the first window of a file does not fetch them again (a
     * small file's planes lie wholly in them).  first_ok drops to 0 when
     * bytes in them failed a chunk's hash (src_distrust): from then on
     * they are fetched again like any others. */
    uint8_t *first;
    size_t first_len;
    atomic_int first_ok;
} s3_src;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A ranged GET of the object (ckdc_fetch_fn). */
static int fetch(void *arg, void *dst, size_t len, uint64_t off)
{
    s3_src *s = arg;
    cks3_source_ctx *x = s->ctx;
    char err[1024];
    if (atomic_load(&s->changed))
        return ESTALE;
    if (x->fail_fast_ms && now_ms() < atomic_load(&x->down_until_ms)) {
        atomic_fetch_add(&x->errors, 1);
        return EIO;
    }
    cks3_status st = cks3_get_range(x->c, x->bucket, s->key, s->etag, off, len, dst, err, sizeof err);
    if (st == CKS3_OK) {
        atomic_fetch_add(&x->bytes, len);
        atomic_fetch_add(&x->reads, 1);
        return 0;
    }
    atomic_fetch_add(&x->errors, 1);
    if (cks3_status_transient(st) && x->fail_fast_ms)
        atomic_store(&x->down_until_ms, now_ms() + x->fail_fast_ms);
    /* 412: another object under the key; 404 or a short range: it was
     * removed or truncated.  Either way not the version bound. */
    int stale = st == CKS3_ERR_CHANGED || st == CKS3_ERR_RANGE || st == CKS3_ERR_NOT_FOUND;
    if (stale)
        atomic_store(&s->changed, 1);
    if (x->on_error)
        x->on_error(x->on_error_arg, err);
    return stale ? ESTALE : st == CKS3_ERR_NOMEM ? ENOMEM : EIO;
}

/* The huge pages lying wholly in [p, p + len) marked for transparent huge
 * pages (MADV_HUGEPAGE; the system's "madvise" mode, the default).  A
 * network window's buffer (plane_window.c: ~11 MiB, malloc'd, so a fresh
 * mmap) is written first here, by the receive; in 4 KiB pages every 4 KiB
 * received took a page fault (zeroing, memcg charge, LRU, and the unmap at
 * free): 22% of the daemon's CPU loading a model from a fresh mount
 * (perf, docs/object-storage.md "Measured").  Advice only: the bytes, and
 * every check of them, are the same either way, and a kernel without THP
 * just says no. */
#define HUGE_PAGE ((uintptr_t)2 << 20)
static void advise_huge(void *p, size_t len)
{
    uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t b = ((uintptr_t)p + len) & ~(HUGE_PAGE - 1);
    if (len >= 2 * HUGE_PAGE && b > a)
        (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
}

static int src_pread(ckp_source *base, void *dst, size_t len, uint64_t off)
{
    s3_src *s = (s3_src *)base;
    advise_huge(dst, len);
    /* once replaced, not even what the disk cache holds of it */
    if (atomic_load(&s->changed))
        return ESTALE;
    if (s->first && off < s->first_len && atomic_load(&s->first_ok)) {
        size_t in = len < s->first_len - off ? len : (size_t)(s->first_len - off);
        memcpy(dst, s->first + off, in);
        if (in == len)
            return 0;
        dst = (uint8_t *)dst + in, len -= in, off += in;
    }
    return s->disk ? ckdc_read(s->disk, dst, len, off, fetch, s) : fetch(s, dst, len, off);
}

/* Bytes it gave failed a chunk's hash: the disk cache's entries holding
 * them go (the next read fetches them); without a cache, nothing kept. */
static void src_distrust(ckp_source *base, uint64_t off, uint64_t len)
{
    s3_src *s = (s3_src *)base;
    if (off < s->first_len)
        atomic_store(&s->first_ok, 0);
    if (s->disk)
        ckdc_drop(s->disk, off, len);
}

static void src_close(ckp_source *base)
{
    s3_src *s = (s3_src *)base;
    free(s->first);
    ckdc_obj_free(s->disk);
    free(s->key);
    free(s);
}

ckp_source *cks3_source_new(cks3_source_ctx *ctx, const char *key, const cks3_object *o)
{
    s3_src *s = calloc(1, sizeof *s);
    if (!s || !(s->key = strdup(key))) {
        free(s);
        return NULL;
    }
    s->base.pread = src_pread;
    s->base.close = src_close;
    s->base.distrust = src_distrust;
    s->base.size = o->size;
    s->ctx = ctx;
    memcpy(s->etag, o->etag, sizeof s->etag);
    if (ctx->disk && !(s->disk = ckdc_obj_new(ctx->disk, ctx->bucket, key, o->etag, o->size))) {
        free(s->key);
        free(s);
        return NULL;
    }
    return &s->base;
}

int cks3_source_changed(const ckp_source *s) { return atomic_load(&((const s3_src *)s)->changed); }
const char *cks3_source_etag(const ckp_source *s) { return ((const s3_src *)s)->etag; }

cks3_status cks3_source_open(cks3_source_ctx *ctx, const char *key, ckp_source **out, char *err, size_t cap)
{
    *out = NULL;
    if (ctx->fail_fast_ms && now_ms() < atomic_load(&ctx->down_until_ms)) {
        atomic_fetch_add(&ctx->errors, 1);
        snprintf(err, cap, "s3://%s/%s: not tried: the server failed just before", ctx->bucket, key);
        return CKS3_ERR_NETWORK;
    }
    uint8_t *first = malloc(CKP_SOURCE_PREFIX);
    if (!first) {
        snprintf(err, cap, "out of memory");
        return CKS3_ERR_NOMEM;
    }
    cks3_object o;
    size_t got = 0;
    cks3_status st = cks3_get_first(ctx->c, ctx->bucket, key, CKP_SOURCE_PREFIX, first, &o, &got, err, cap);
    if (st != CKS3_OK) {
        free(first);
        atomic_fetch_add(&ctx->errors, 1);
        if (cks3_status_transient(st) && ctx->fail_fast_ms)
            atomic_store(&ctx->down_until_ms, now_ms() + ctx->fail_fast_ms);
        return st;
    }
    atomic_fetch_add(&ctx->bytes, got);
    atomic_fetch_add(&ctx->reads, 1);
    s3_src *s = (s3_src *)cks3_source_new(ctx, key, &o);
    if (!s) {
        free(first);
        snprintf(err, cap, "out of memory");
        return CKS3_ERR_NOMEM;
    }
    s->first = first;
    s->first_len = got;
    atomic_store(&s->first_ok, 1);
    *out = &s->base;
    return CKS3_OK;
}
