/*
 * s3_pack.c — a packed directory under an S3 prefix (s3_pack.h): its
 * manifest, with what is there instead when it is not; its files opened on
 * sources bound to their ETags; the messages of each way that fails; a
 * source that reads a whole object in large blocks (a read-back).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3_pack.h"

void cks3_pack_explain(cks3_client *c, const char *url, const char *bucket, cks3_status st, const char *msg,
                       char *err, size_t cap)
{
    const char *ep = cks3_endpoint(c);
    switch (st) {
    case CKS3_ERR_AUTH:
        snprintf(err, cap,
                 "%s: access denied by %s with the credentials from %s (%s): check AWS_ACCESS_KEY_ID and "
                 "AWS_SECRET_ACCESS_KEY (or the profile: AWS_PROFILE) and that they may read bucket %s",
                 url, ep, cks3_cred_source(c), msg, bucket);
        break;
    case CKS3_ERR_NO_BUCKET:
        snprintf(err, cap,
                 "%s: bucket %s does not exist at %s (region %s): check the bucket's name, and the endpoint "
                 "(AWS_ENDPOINT_URL) and region (AWS_REGION)",
                 url, bucket, ep, cks3_region(c));
        break;
    case CKS3_ERR_NETWORK:
        snprintf(err, cap, "%s: cannot reach the S3 server %s (%s): check the endpoint (-o endpoint=, "
                 "AWS_ENDPOINT_URL) and the network, or wait longer (-o s3_timeout=SECONDS)", url, ep, msg);
        break;
    case CKS3_ERR_SERVER: /* it answered: 500, 502, 503 (SlowDown), 504 */
        snprintf(err, cap, "%s: the S3 server %s kept failing (%s): try again later, or wait longer "
                 "(-o s3_timeout=SECONDS)", url, ep, msg);
        break;
    case CKS3_ERR_NOMEM:
        snprintf(err, cap, "%s: out of memory", url);
        break;
    default:
        snprintf(err, cap, "%s: %s", url, msg);
    }
}

/* No manifest under the prefix: say what is there instead. */
static cks3_status explain_missing(cks3_client *c, const char *url, const char *bucket, const char *prefix,
                                   char *err, size_t cap)
{
    char msg[1024];
    cks3_list_result l;
    char *dir = *prefix ? cks3_key(prefix, "") : strdup("");
    if (!dir) {
        snprintf(err, cap, "%s: out of memory", url);
        return CKS3_ERR_NOMEM;
    }
    cks3_status st = cks3_list(c, bucket, dir, &l, msg, sizeof msg);
    free(dir);
    if (st != CKS3_OK) { /* the caller explains it, as a failed GET */
        snprintf(err, cap, "%s", msg);
        return st;
    }
    int unfinished = 0;
    char below[1024] = "";          /* a packed directory further down, if any */
    size_t skip = *prefix ? strlen(prefix) + 1 : 0;
    for (size_t i = 0; i < l.n; i++) {
        const char *rel = l.v[i].key + skip, *base = strrchr(rel, '/');
        unfinished |= !strcmp(rel, CKP_STATE_NAME);
        if (!below[0] && base && !strcmp(base + 1, CKP_MANIFEST_NAME))
            snprintf(below, sizeof below, "; s3://%s/%.*s holds one", bucket, (int)(base - l.v[i].key), l.v[i].key);
    }
    size_t n = l.n;
    cks3_list_free(&l);
    if (unfinished)
        snprintf(err, cap,
                 "%s: not a packed directory yet: a pack to it is unfinished (%s is there, %s is not); run the "
                 "same ckptfs pack command again to finish it",
                 url, CKP_STATE_NAME, CKP_MANIFEST_NAME);
    else if (!n)
        snprintf(err, cap,
                 "%s: nothing is stored under this prefix in bucket %s: check the prefix, or pack a model there "
                 "first (ckptfs pack SRC %s)",
                 url, bucket, url);
    else
        snprintf(err, cap,
                 "%s: not a packed directory: %zu objects under it but no %s; name the prefix that holds %s (the "
                 "directory ckptfs pack wrote)%s",
                 url, n, CKP_MANIFEST_NAME, CKP_MANIFEST_NAME, below);
    return CKS3_ERR_NOT_FOUND;
}

cks3_status cks3_pack_manifest(cks3_client *c, const char *bucket, const char *prefix, size_t maxSize, char **buf,
                               size_t *len, char *err, size_t cap)
{
    char msg[1024], url[2048];
    snprintf(url, sizeof url, "s3://%s%s%s", bucket, *prefix ? "/" : "", prefix);
    char *key = cks3_key(prefix, CKP_MANIFEST_NAME);
    *buf = NULL;
    *len = 0;
    if (!key) {
        snprintf(err, cap, "%s: out of memory", url);
        return CKS3_ERR_NOMEM;
    }
    cks3_status st = cks3_get_object(c, bucket, key, maxSize, NULL, buf, len, msg, sizeof msg);
    if (st == CKS3_ERR_RANGE)
        snprintf(err, cap, "s3://%s/%s: larger than %zu bytes", bucket, key, maxSize);
    else if (st == CKS3_ERR_NOT_FOUND)
        st = explain_missing(c, url, bucket, prefix, err, cap);
    else if (st != CKS3_OK)
        snprintf(err, cap, "%s", msg);
    free(key);
    return st;
}

ckp_status cks3_pack_open_file(cks3_source_ctx *sc, const char *prefix, const char *rel, ckp_reader **out,
                               char *err, size_t cap)
{
    char msg[1024];
    *out = NULL;
    char *key = cks3_key(prefix, rel);
    if (!key) {
        snprintf(err, cap, "%s: out of memory", rel);
        return CKP_ERR_NOMEM;
    }
    char where[4200];
    snprintf(where, sizeof where, "s3://%s/%s", sc->bucket, key);
    ckp_source *src;
    cks3_status st = cks3_source_open(sc, key, &src, msg, sizeof msg);
    free(key);
    if (st != CKS3_OK) {
        if (st == CKS3_ERR_NOT_FOUND)
            snprintf(err, cap, "%s: not there (the packed directory lacks this packed file)", where);
        else
            snprintf(err, cap, "%s: %s", where, msg);
        return st == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO;
    }
    return ckp_open_source(src, where, out, err, cap);
}

/* ---- read-ahead in blocks (cks3_pack_readahead) ------------------------- */

struct ra_src;

typedef struct {
    uint64_t idx;      /* which block of the object */
    int state;         /* 0 empty, 1 being fetched, 2 holds it */
    int touched;       /* read from since it was fetched */
    uint64_t used;     /* last use (ra.tick), for LRU */
    uint8_t *data;
    struct ra_src *owner;
} ra_block;

typedef struct ra_src {
    ckp_source base;   /* first: a ckp_source * is one of these */
    ckp_source *in;
    size_t bsize;
    unsigned n, ahead;
    pthread_mutex_t mu; /* protects blocks, tick and inflight */
    pthread_cond_t cv;  /* a fetch ended */
    ra_block *b;
    uint64_t tick;
    unsigned inflight;  /* fetches ahead running (their threads) */
} ra_src;

/* The block of r holding idx, ready or being fetched; else a free or least
 * recently used ready one (NULL if every block is being fetched); with
 * used_only, a ready one only if it was read from (a block fetched ahead
 * and not read yet is not dropped for another fetch ahead).  Under r->mu. */
static ra_block *ra_find(ra_src *r, uint64_t idx, int used_only, int *found)
{
    ra_block *victim = NULL;
    *found = 0;
    for (unsigned i = 0; i < r->n; i++) {
        ra_block *b = &r->b[i];
        if (b->state && b->idx == idx) {
            *found = 1;
            return b;
        }
        if (b->state == 1 || (used_only && b->state == 2 && !b->touched))
            continue;
        if (!victim || !b->state || (victim->state && b->used < victim->used))
            victim = b;
    }
    return victim;
}

/* A fetch ahead, on a thread of its own: block b (state 1, data allocated). */
static void *ra_fetch_ahead(void *arg)
{
    ra_block *b = arg;
    ra_src *r = b->owner;
    uint64_t at = b->idx * r->bsize;
    size_t n = r->in->size - at < r->bsize ? (size_t)(r->in->size - at) : r->bsize;
    int rc = r->in->pread(r->in, b->data, n, at); /* a failure: the reader fetches it again, and says why */
    pthread_mutex_lock(&r->mu);
    b->state = rc ? 0 : 2;
    b->touched = 0;
    b->used = ++r->tick;
    r->inflight--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Start fetching the r->ahead blocks after idx that are neither there nor
 * being fetched, each on a thread (a reader of the whole object: every
 * block is read).  Under r->mu. */
static void ra_ahead(ra_src *r, uint64_t idx)
{
    for (uint64_t j = idx + 1; j <= idx + r->ahead && j * r->bsize < r->in->size; j++) {
        int found;
        ra_block *b = ra_find(r, j, 1, &found);
        if (found)
            continue;
        if (!b || (!b->data && !(b->data = malloc(r->bsize))))
            return;
        pthread_attr_t a;
        pthread_t t;
        b->idx = j;
        b->state = 1;
        b->owner = r;
        r->inflight++;
        int ok = !pthread_attr_init(&a) && !pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) &&
                 !pthread_create(&t, &a, ra_fetch_ahead, b);
        pthread_attr_destroy(&a);
        if (!ok) {
            b->state = 0;
            r->inflight--;
            return;
        }
    }
}

/* Copy [off, off+len) of one block of r into dst, fetching the block if it
 * is not there.  @return 0 or an errno value (the inner source's). */
static int ra_copy(ra_src *r, uint8_t *dst, size_t len, uint64_t off)
{
    uint64_t idx = off / r->bsize;
    int found, rc = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        ra_block *b = ra_find(r, idx, 0, &found);
        if (found && b->state == 2) {
            memcpy(dst, b->data + (off - idx * r->bsize), len);
            b->used = ++r->tick;
            if (!b->touched && r->ahead) /* a reader came to this block: the next ones are wanted */
                ra_ahead(r, idx);
            b->touched = 1;
            break;
        }
        if (found || !b) { /* being fetched, or every block is: wait */
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        if (!b->data && !(b->data = malloc(r->bsize))) {
            rc = ENOMEM;
            break;
        }
        uint64_t at = idx * r->bsize;
        size_t n = r->in->size - at < r->bsize ? (size_t)(r->in->size - at) : r->bsize;
        b->idx = idx;
        b->state = 1;
        if (r->ahead)
            ra_ahead(r, idx);
        pthread_mutex_unlock(&r->mu);
        rc = r->in->pread(r->in, b->data, n, at);
        pthread_mutex_lock(&r->mu);
        b->state = rc ? 0 : 2;
        b->touched = 0;
        b->used = ++r->tick;
        pthread_cond_broadcast(&r->cv);
        if (rc)
            break;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int ra_pread(ckp_source *base, void *dst, size_t len, uint64_t off)
{
    ra_src *r = (ra_src *)base;
    if (off > r->in->size || len > r->in->size - off)
        return EIO;
    while (len) {
        size_t in_block = r->bsize - (size_t)(off % r->bsize), n = len < in_block ? len : in_block;
        int rc = ra_copy(r, dst, n, off);
        if (rc)
            return rc;
        dst = (uint8_t *)dst + n;
        off += n;
        len -= n;
    }
    return 0;
}

static void ra_close(ckp_source *base)
{
    ra_src *r = (ra_src *)base;
    pthread_mutex_lock(&r->mu);
    while (r->inflight) /* the fetches ahead use r->in and the blocks */
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    r->in->close(r->in);
    for (unsigned i = 0; i < r->n; i++)
        free(r->b[i].data);
    free(r->b);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

ckp_source *cks3_pack_readahead(ckp_source *inner, size_t block, unsigned blocks)
{
    return cks3_pack_windows(inner, block, blocks, 0);
}

ckp_source *cks3_pack_windows(ckp_source *inner, size_t block, unsigned blocks, unsigned ahead)
{
    ra_src *r = inner && block && blocks ? calloc(1, sizeof *r) : NULL;
    if (r && !(r->b = calloc(blocks, sizeof *r->b))) {
        free(r);
        r = NULL;
    }
    if (!r) {
        if (inner)
            inner->close(inner);
        return NULL;
    }
    r->base.pread = ra_pread;
    r->base.close = ra_close;
    r->base.size = inner->size;
    r->in = inner;
    r->bsize = block;
    r->n = blocks;
    r->ahead = ahead;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return &r->base;
}

const ckp_source *cks3_pack_inner(const ckp_source *s)
{
    return s && s->close == ra_close ? ((const ra_src *)s)->in : s;
}
