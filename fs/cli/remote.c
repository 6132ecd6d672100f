/*
 * remote.c — an s3:// packed directory for the reading commands
 * (remote.h): the client and the manifest, once per process; members on S3
 * sources; the objects' sizes for the summaries.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote.h"
#include "s3.h"
#include "s3_pack.h"
#include "s3_source.h"

#define MANIFEST_MAX (1ull << 30)   /* format §7: a manifest is at most 1 GiB */

static struct {
    cks3_client *c;
    char *bucket, *prefix;
    cks3_source_ctx sc;
    uint64_t manifest_size;
} R;

static void remote_free(void)
{
    cks3_client_free(R.c);
    free(R.bucket);
    free(R.prefix);
    memset(&R, 0, sizeof R);
}

int ckpt_is_remote(const char *dst) { return cks3_is_url(dst); }

ckp_status ckpt_load_manifest(const char *dst, ckm_manifest **out, char *err, size_t cap)
{
    char msg[1024];
    *out = NULL;
    if (!ckpt_is_remote(dst))
        return ckm_load(dst, out, err, cap);
    remote_free();
    cks3_status st = cks3_parse_url(dst, &R.bucket, &R.prefix, msg, sizeof msg);
    if (st != CKS3_OK) {
        snprintf(err, cap, "%s", msg);
        return st == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO;
    }
    atexit(remote_free);
    cks3_config cfg = {0};
    if ((st = cks3_client_new(&cfg, &R.c, msg, sizeof msg)) != CKS3_OK) {
        snprintf(err, cap, "%s: %s", dst, msg);
        return st == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO;
    }
    R.sc = (cks3_source_ctx){.c = R.c, .bucket = R.bucket};
    char *buf = NULL, name[4096];
    size_t len = 0;
    st = cks3_pack_manifest(R.c, R.bucket, R.prefix, MANIFEST_MAX, &buf, &len, msg, sizeof msg);
    if (st == CKS3_ERR_NOT_FOUND || st == CKS3_ERR_RANGE)
        snprintf(err, cap, "%s", msg);
    else if (st != CKS3_OK)
        cks3_pack_explain(R.c, dst, R.bucket, st, msg, err, cap);
    if (st != CKS3_OK)
        return st == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : st == CKS3_ERR_RANGE ? CKP_ERR_CORRUPT : CKP_ERR_IO;
    R.manifest_size = len;
    snprintf(name, sizeof name, "s3://%s/%s%s%s", R.bucket, R.prefix, *R.prefix ? "/" : "", CKP_MANIFEST_NAME);
    ckp_status ps = ckm_parse(name, buf, len, out, err, cap);
    free(buf);
    return ps;
}

ckp_status ckpt_remote_open(const char *rel, ckp_reader **out, char *err, size_t cap)
{
    if (!R.c) {
        snprintf(err, cap, "%s: no s3:// pack loaded", rel);
        return CKP_ERR_IO;
    }
    return cks3_pack_open_file(&R.sc, R.prefix, rel, out, err, cap);
}

uint64_t ckpt_remote_manifest_size(void) { return R.manifest_size; }

uint64_t ckpt_remote_packed_size(const ckm_manifest *m)
{
    char msg[1024];
    cks3_list_result l;
    if (!R.c)
        return 0;
    char *dir = *R.prefix ? cks3_key(R.prefix, "") : strdup("");
    if (!dir || cks3_list(R.c, R.bucket, dir, &l, msg, sizeof msg) != CKS3_OK) {
        free(dir);
        return 0;
    }
    size_t skip = strlen(dir);
    free(dir);
    cks3_list_sort(&l);
    uint64_t n = R.manifest_size;
    for (size_t i = 0; i < m->n_files; i++) {
        char want[CKP_MAX_PATH + 8];
        snprintf(want, sizeof want, "%s%s", m->files[i].path, CKP_SUFFIX);
        const cks3_entry *e = cks3_list_find(&l, skip, want);
        if (e)
            n += e->size;
    }
    cks3_list_free(&l);
    return n;
}
