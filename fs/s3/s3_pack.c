/*
 * s3_pack.c — a packed directory under an S3 prefix (s3_pack.h): its
 * manifest, with what is there instead when it is not; its files opened on
 * sources bound to their ETags; the messages of each way that fails.
 */
#define _GNU_SOURCE
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
    case CKS3_ERR_SERVER:
        snprintf(err, cap, "%s: cannot reach the S3 server %s (%s): check the endpoint (AWS_ENDPOINT_URL) and the network",
                 url, ep, msg);
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
    cks3_object o;
    cks3_status st = cks3_head(sc->c, sc->bucket, key, &o, msg, sizeof msg);
    if (st != CKS3_OK) {
        if (st == CKS3_ERR_NOT_FOUND)
            snprintf(err, cap, "%s: not there (the packed directory lacks this packed file)", where);
        else
            snprintf(err, cap, "%s: %s", where, msg);
        free(key);
        return st == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO;
    }
    ckp_source *src = cks3_source_new(sc, key, &o);
    free(key);
    if (!src) {
        snprintf(err, cap, "%s: out of memory", where);
        return CKP_ERR_NOMEM;
    }
    return ckp_open_source(src, where, out, err, cap);
}
