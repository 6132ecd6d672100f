/*
 * s3tool.c — every call of the S3 client (fs/s3/s3.h) from the command line,
 * for tests/s3/test_s3_client.py, which checks each against boto3 on a real
 * server (s3fixture.py).  Configuration from the environment (AWS_*), as
 * the daemon takes it.  Exit 0, or 10 + the cks3_status with its message on
 * stderr.
 *   s3tool head B K | get B K OFF LEN [ETAG] | cat B K | list B PREFIX
 *   s3tool put B K FILE | delete B K | mpu B K FILE PARTSIZE
 *   s3tool mpu-create B K | mpu-part B K ID N FILE | mpu-abort B K ID
 *   s3tool uploads B PREFIX | parts B K ID | url URL | config
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3.h"

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = b ? fread(b, 1, (size_t)sz, f) : 0;
    fclose(f);
    return b;
}

static int done(cks3_status st, const char *err)
{
    if (st == CKS3_OK)
        return 0;
    fprintf(stderr, "s3tool: %s: %s\n", cks3_status_name(st), err);
    return 10 + (int)st;
}

static int mpu(cks3_client *c, char **a, char *err, size_t cap)
{
    size_t n = 0, part = strtoull(a[3], NULL, 10);
    char *data = slurp(a[2], &n), *id = NULL, etag[CKS3_ETAG_MAX];
    if (!data || !part)
        return 2;
    cks3_status st = cks3_mpu_create(c, a[0], a[1], &id, err, cap);
    cks3_part parts[10000];
    size_t k = 0;
    for (size_t off = 0; st == CKS3_OK && (off < n || k == 0) && k < 10000; off += part, k++) {
        size_t len = n - off < part ? n - off : part;
        parts[k].number = (int)k + 1;
        st = cks3_mpu_upload_part(c, a[0], a[1], id, (int)k + 1, data + off, len, parts[k].etag, err, cap);
    }
    if (st == CKS3_OK)
        st = cks3_mpu_complete(c, a[0], a[1], id, parts, k, etag, err, cap);
    if (st == CKS3_OK)
        printf("%s %zu\n", etag, k);
    free(id);
    free(data);
    return done(st, err);
}

int main(int argc, char **argv)
{
    char err[2048] = "";
    if (argc < 2)
        return 2;
    const char *cmd = argv[1];
    char **a = argv + 2;
    int na = argc - 2;
    if (!strcmp(cmd, "url") && na == 1) {
        char *b, *p;
        cks3_status st = cks3_parse_url(a[0], &b, &p, err, sizeof err);
        if (st == CKS3_OK)
            printf("%s|%s\n", b, p);
        free(b);
        free(p);
        return done(st, err);
    }
    cks3_config cfg = {0};
    cfg.retry_ms = getenv("S3TOOL_RETRY_MS") ? (unsigned)atoi(getenv("S3TOOL_RETRY_MS")) : 0;
    cks3_client *c;
    cks3_status st = cks3_client_new(&cfg, &c, err, sizeof err);
    if (st != CKS3_OK)
        return done(st, err);
    int rc = 2;
    if (!strcmp(cmd, "config")) {
        printf("%s|%s|%s\n", cks3_endpoint(c), cks3_region(c), cks3_cred_source(c));
        rc = 0;
    } else if (!strcmp(cmd, "head") && na == 2) {
        cks3_object o;
        if ((rc = done(cks3_head(c, a[0], a[1], &o, err, sizeof err), err)) == 0)
            printf("%llu %s\n", (unsigned long long)o.size, o.etag);
    } else if (!strcmp(cmd, "get") && (na == 4 || na == 5)) {
        size_t len = strtoull(a[3], NULL, 10);
        char *buf = malloc(len ? len : 1);
        rc = done(cks3_get_range(c, a[0], a[1], na == 5 ? a[4] : NULL, strtoull(a[2], NULL, 10), len, buf, err,
                                 sizeof err), err);
        if (rc == 0)
            fwrite(buf, 1, len, stdout);
        free(buf);
    } else if (!strcmp(cmd, "first") && na == 3) { /* "SIZE ETAG GOT\n" then the bytes */
        size_t len = strtoull(a[2], NULL, 10), got = 0;
        char *buf = malloc(len ? len : 1);
        cks3_object o;
        if ((rc = done(cks3_get_first(c, a[0], a[1], len, buf, &o, &got, err, sizeof err), err)) == 0) {
            printf("%llu %s %zu\n", (unsigned long long)o.size, o.etag[0] ? o.etag : "-", got);
            fwrite(buf, 1, got, stdout);
        }
        free(buf);
    } else if (!strcmp(cmd, "cat") && na == 2) {
        char *buf;
        size_t n;
        if ((rc = done(cks3_get_object(c, a[0], a[1], 64u << 20, NULL, &buf, &n, err, sizeof err), err)) == 0)
            fwrite(buf, 1, n, stdout);
        if (rc == 0)
            free(buf);
    } else if (!strcmp(cmd, "list") && na == 2) {
        cks3_list_result l;
        if ((rc = done(cks3_list(c, a[0], a[1], &l, err, sizeof err), err)) == 0) {
            for (size_t i = 0; i < l.n; i++)
                printf("%s\t%llu\t%s\n", l.v[i].key, (unsigned long long)l.v[i].size, l.v[i].etag);
            cks3_list_free(&l);
        }
    } else if (!strcmp(cmd, "put") && na == 3) {
        size_t n;
        char *data = slurp(a[2], &n), etag[CKS3_ETAG_MAX];
        if ((rc = done(cks3_put(c, a[0], a[1], data, n, etag, err, sizeof err), err)) == 0)
            printf("%s\n", etag);
        free(data);
    } else if (!strcmp(cmd, "delete") && na == 2) {
        rc = done(cks3_delete(c, a[0], a[1], err, sizeof err), err);
    } else if (!strcmp(cmd, "mpu") && na == 4) {
        rc = mpu(c, a, err, sizeof err);
    } else if (!strcmp(cmd, "mpu-create") && na == 2) {
        char *id;
        if ((rc = done(cks3_mpu_create(c, a[0], a[1], &id, err, sizeof err), err)) == 0) {
            printf("%s\n", id);
            free(id);
        }
    } else if (!strcmp(cmd, "mpu-part") && na == 5) {
        size_t n;
        char *data = slurp(a[4], &n), etag[CKS3_ETAG_MAX];
        if ((rc = done(cks3_mpu_upload_part(c, a[0], a[1], a[2], atoi(a[3]), data, n, etag, err, sizeof err),
                       err)) == 0)
            printf("%s\n", etag);
        free(data);
    } else if (!strcmp(cmd, "mpu-abort") && na == 3) {
        rc = done(cks3_mpu_abort(c, a[0], a[1], a[2], err, sizeof err), err);
    } else if (!strcmp(cmd, "uploads") && na == 2) {
        cks3_upload_list l;
        if ((rc = done(cks3_mpu_list_uploads(c, a[0], a[1], &l, err, sizeof err), err)) == 0) {
            for (size_t i = 0; i < l.n; i++)
                printf("%s\t%s\n", l.v[i].key, l.v[i].upload_id);
            cks3_upload_list_free(&l);
        }
    } else if (!strcmp(cmd, "parts") && na == 3) {
        cks3_part_list l;
        if ((rc = done(cks3_mpu_list_parts(c, a[0], a[1], a[2], &l, err, sizeof err), err)) == 0) {
            for (size_t i = 0; i < l.n; i++)
                printf("%d\t%llu\t%s\n", l.v[i].number, (unsigned long long)l.v[i].size, l.v[i].etag);
            cks3_part_list_free(&l);
        }
    }
    cks3_stats s;
    cks3_get_stats(c, &s);
    if (getenv("S3TOOL_STATS"))
        fprintf(stderr, "stats requests %llu retries %llu failures %llu\n", (unsigned long long)s.requests,
                (unsigned long long)s.retries, (unsigned long long)s.failures);
    cks3_client_free(c);
    return rc;
}
