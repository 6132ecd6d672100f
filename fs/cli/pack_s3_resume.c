/*
 * pack_s3_resume.c — `ckptfs pack SRC s3://...` killed in the middle of a
 * multipart upload leaves the upload unfinished under the prefix; the rerun
 * goes on with it instead of sending the whole packed file again (a 10 GB
 * shard over a slow link).  What makes that safe:
 *   - the pack is deterministic: the same source file (same bytes, size,
 *     mtime) packs to the same bytes, so this run's parts are the earlier
 *     run's parts;
 *   - an upload is resumed only if the state of the run that started it
 *     (PREFIX/ckptfs.state, read before this run puts its own) recorded the
 *     source file with the size and mtime it has now, and its part 1 (the
 *     packed file's header: it names the source's size, mtime and SHA-256)
 *     is, by its ETag, the MD5 of this run's part 1;
 *   - each part is kept only if its ETag is the MD5 of the bytes this run
 *     made for it (pack_s3_send.c, upload); any other is sent again, and
 *     CompleteMultipartUpload gets the exact list.
 * Of several unfinished uploads of one key (older kills), the newest that
 * qualifies is resumed and the others are aborted; uploads no file takes
 * are aborted when the pack completes: nothing is left billed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_common.h"
#include "pack_s3.h"
#include "s3_pack.h"
#include "util.h"

ssize_t s3_read_at(int fd, uint8_t *p, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, p + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

int s3_resume_list(s3_send *s)
{
    char msg[1024], err[1536];
    char *dir = *s->prefix ? cks3_key(s->prefix, "") : strdup("");
    cks3_status st = dir ? cks3_mpu_list_uploads(s->c, s->bucket, dir, &s->pending, msg, sizeof msg)
                         : CKS3_ERR_NOMEM;
    free(dir);
    if (st == CKS3_OK && s->pending.n && !(s->claimed = calloc(s->pending.n, 1)))
        st = CKS3_ERR_NOMEM;
    if (st != CKS3_OK) {
        cks3_pack_explain(s->c, s->url, s->bucket, st, st == CKS3_ERR_NOMEM ? "out of memory" : msg, err,
                          sizeof err);
        fprintf(stderr, "ckptfs pack: %s\n", err);
        return -1;
    }
    return 0;
}

int s3_resume_abort_rest(s3_send *s)
{
    char msg[1024], err[1536];
    cks3_status st = CKS3_OK;
    for (size_t i = 0; st == CKS3_OK && i < s->pending.n; i++) {
        pthread_mutex_lock(&s->lock);
        int mine = !s->claimed[i];
        s->claimed[i] = 1;
        pthread_mutex_unlock(&s->lock);
        if (mine)
            st = cks3_mpu_abort(s->c, s->bucket, s->pending.v[i].key, s->pending.v[i].upload_id, msg, sizeof msg);
    }
    if (st != CKS3_OK) {
        cks3_pack_explain(s->c, s->url, s->bucket, st, msg, err, sizeof err);
        fprintf(stderr, "ckptfs pack: %s\n", err);
    }
    return st == CKS3_OK ? 0 : -1;
}

/* 1 if the state the run started with records the source file of in with
 * the size and mtime it has now (the run that left an upload of it was
 * packing this same file). */
static int state_same(const s3_send *s, const ckp_info *in)
{
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(s->old_state, "files");
    for (const cJSON *f = cJSON_IsArray(files) ? files->child : NULL; f; f = f->next) {
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "path"));
        if (!p || strcmp(p, in->path))
            continue;
        const cJSON *sz = cJSON_GetObjectItemCaseSensitive(f, "size");
        const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "mtime_ns"));
        return cJSON_IsNumber(sz) && mt && (double)in->original_size == sz->valuedouble &&
               strtoll(mt, NULL, 10) == in->mtime_ns;
    }
    return 0;
}

/* The unfinished uploads of key no file took yet, now taken, newest first
 * (Initiated, ISO 8601 as one server writes it, sorts as text): *out, a
 * malloc'ed array of *n indexes of s->pending.  (Out of memory: fewer, the
 * rest aborted by s3_resume_abort_rest.) */
static void take(s3_send *s, const char *key, size_t **out, size_t *n)
{
    *n = 0;
    *out = NULL;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->pending.n; i++) {
        if (s->claimed[i] || strcmp(s->pending.v[i].key, key))
            continue;
        size_t *v = realloc(*out, (*n + 1) * sizeof *v);
        if (!v)
            break;
        *out = v;
        s->claimed[i] = 1;
        size_t j = (*n)++;
        for (; j > 0 && strcmp(s->pending.v[v[j - 1]].initiated, s->pending.v[i].initiated) < 0; j--)
            v[j] = v[j - 1];
        v[j] = i;
    }
    pthread_mutex_unlock(&s->lock);
}

/* 1 if upload u's parts (listed into *have) begin with this run's part 1. */
static int first_part_same(s3_send *s, const cks3_upload *u, int fd, uint64_t size, uint8_t *buf,
                           cks3_part_list *have)
{
    char msg[1024];
    size_t n = size < s->part ? (size_t)size : s->part;
    if (cks3_mpu_list_parts(s->c, s->bucket, u->key, u->upload_id, have, msg, sizeof msg) != CKS3_OK)
        return 0; /* cannot tell: a new upload (this one is aborted) */
    if (have->n && have->v[0].number == 1 && have->v[0].size == n && s3_read_at(fd, buf, n, 0) == (ssize_t)n &&
        cks3_etag_is_md5(have->v[0].etag, buf, n))
        return 1;
    cks3_part_list_free(have);
    return 0;
}

int s3_resume_pick(s3_send *s, const char *key, const ckp_info *in, int fd, uint64_t size, uint8_t *buf, char **id,
                   cks3_part_list *have, char *err, size_t cap)
{
    size_t *v, n;
    int rc = 0, ok = state_same(s, in);
    *id = NULL;
    memset(have, 0, sizeof *have);
    take(s, key, &v, &n);
    for (size_t k = 0; k < n; k++) {
        const cks3_upload *u = &s->pending.v[v[k]];
        if (!rc && !*id && ok && first_part_same(s, u, fd, size, buf, have)) {
            if (!(*id = strdup(u->upload_id))) {
                snprintf(err, cap, "out of memory");
                rc = -1;
            }
            if (ckpt_verbosity > 1)
                fprintf(stderr, "ckptfs pack: s3://%s/%s: resuming upload %s (%zu parts there)\n", s->bucket,
                        CKU_ESC(key), u->upload_id, have->n);
        } else if (!rc && cks3_mpu_abort(s->c, s->bucket, u->key, u->upload_id, err, cap) != CKS3_OK) {
            rc = -1;
        }
    }
    free(v);
    if (!rc && !*id && cks3_mpu_create(s->c, s->bucket, key, id, err, cap) != CKS3_OK)
        rc = -1;
    if (rc) {
        cks3_part_list_free(have);
        free(*id);
        *id = NULL;
    }
    return rc;
}
