/*
 * pack_s3.c — ckptfs pack SRC s3://BUCKET/PREFIX (issue 25): the pack is
 * made in a local staging directory by the usual machinery (pack*.c, which
 * resumes), then each packed file is uploaded by multipart upload in parts
 * of CKPT_S3_PART bytes (one part in memory), and the manifest LAST, so a
 * reader never takes a half-written pack for a whole one.  Killed at any
 * moment, the same command continues: an object already there is kept if it
 * reads back equal, byte for byte, to the staged packed file; any
 * unfinished multipart upload under the prefix is aborted (none is left
 * billed); a remote manifest is deleted before any object under it is
 * replaced.  The staging directory is removed once the manifest is up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "cmd_common.h"
#include "manifest.h"
#include "s3.h"
#include "util.h"

#define DEFAULT_PART_MIB 16u

typedef struct {
    cks3_client *c;
    char *bucket, *prefix;
    size_t part;
    uint8_t *buf, *back;   /* one part, and what a readback GET returns */
    char err[1536];
} s3pack;

static size_t part_size(void)
{
    const char *e = getenv("CKPTFS_S3_PART_MIB"); /* S3's minimum is 5 MiB */
    unsigned long v = e ? strtoul(e, NULL, 10) : DEFAULT_PART_MIB;
    if (v < 5 || v > 1024)
        v = DEFAULT_PART_MIB;
    return (size_t)v << 20;
}

/* Read up to len bytes at off of fd (fewer only at the end). */
static ssize_t read_at(int fd, uint8_t *p, size_t len, uint64_t off)
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

/* 1 if key holds exactly the size bytes of fd, 0 if not (or not there), -1 on a failure to say. */
static int object_equals(s3pack *s, const char *key, int fd, uint64_t size)
{
    cks3_object o;
    cks3_status st = cks3_head(s->c, s->bucket, key, &o, s->err, sizeof s->err);
    if (st == CKS3_ERR_NOT_FOUND)
        return 0;
    if (st != CKS3_OK)
        return -1;
    if (o.size != size)
        return 0;
    for (uint64_t off = 0; off < size; off += s->part) {
        size_t n = size - off < s->part ? (size_t)(size - off) : s->part;
        if (read_at(fd, s->buf, n, off) != (ssize_t)n) {
            snprintf(s->err, sizeof s->err, "%s", strerror(errno ? errno : EIO));
            return -1;
        }
        st = cks3_get_range(s->c, s->bucket, key, o.etag, off, n, s->back, s->err, sizeof s->err);
        if (st == CKS3_ERR_CHANGED || st == CKS3_ERR_RANGE || st == CKS3_ERR_NOT_FOUND)
            return 0;
        if (st != CKS3_OK)
            return -1;
        if (memcmp(s->buf, s->back, n))
            return 0;
    }
    return 1;
}

/* Abort every unfinished multipart upload under pfx (a key or "PREFIX/"). */
static int abort_uploads(s3pack *s, const char *pfx)
{
    cks3_upload_list l;
    if (cks3_mpu_list_uploads(s->c, s->bucket, pfx, &l, s->err, sizeof s->err) != CKS3_OK)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < l.n && !rc; i++)
        if (cks3_mpu_abort(s->c, s->bucket, l.v[i].key, l.v[i].upload_id, s->err, sizeof s->err) != CKS3_OK)
            rc = -1;
    cks3_upload_list_free(&l);
    return rc;
}

/* Upload the size bytes of fd as key, by multipart upload (an empty file: one PUT). */
static int upload(s3pack *s, const char *key, int fd, uint64_t size)
{
    if (abort_uploads(s, key))
        return -1;
    if (size == 0)
        return cks3_put(s->c, s->bucket, key, "", 0, NULL, s->err, sizeof s->err) == CKS3_OK ? 0 : -1;
    char *id = NULL;
    if (cks3_mpu_create(s->c, s->bucket, key, &id, s->err, sizeof s->err) != CKS3_OK)
        return -1;
    size_t np = (size_t)((size + s->part - 1) / s->part);
    cks3_part *parts = calloc(np, sizeof *parts);
    int rc = parts ? 0 : -1;
    for (size_t i = 0; !rc && i < np; i++) {
        uint64_t off = (uint64_t)i * s->part;
        size_t n = size - off < s->part ? (size_t)(size - off) : s->part;
        parts[i].number = (int)i + 1;
        if (read_at(fd, s->buf, n, off) != (ssize_t)n) {
            snprintf(s->err, sizeof s->err, "reading the staged file: %s", strerror(errno ? errno : EIO));
            rc = -1;
        } else if (cks3_mpu_upload_part(s->c, s->bucket, key, id, parts[i].number, s->buf, n, parts[i].etag, s->err,
                                        sizeof s->err) != CKS3_OK) {
            rc = -1;
        }
    }
    if (!rc && cks3_mpu_complete(s->c, s->bucket, key, id, parts, np, NULL, s->err, sizeof s->err) != CKS3_OK)
        rc = -1;
    if (rc) { /* nothing left billed; a rerun starts this file again */
        char e2[256];
        cks3_mpu_abort(s->c, s->bucket, key, id, e2, sizeof e2);
    }
    free(parts);
    free(id);
    return rc;
}

/* The whole of a small local file (the staged manifest) into *buf. */
static int read_whole(const char *path, char **buf, size_t *len, char *err, size_t cap)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *buf = NULL;
    if (fd < 0 || fstat(fd, &st) || !(*buf = malloc((size_t)st.st_size + 1)) ||
        read_at(fd, (uint8_t *)*buf, (size_t)st.st_size, 0) != (ssize_t)st.st_size) {
        snprintf(err, cap, "%s: %s", path, strerror(errno ? errno : EIO));
        if (fd >= 0)
            close(fd);
        free(*buf);
        *buf = NULL;
        return -1;
    }
    close(fd);
    *len = (size_t)st.st_size;
    return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p) ? -1 : 0;
}

/* Upload the staged pack: objects (kept when equal), then the manifest. */
static int upload_pack(s3pack *s, const char *url, const char *stage)
{
    ckm_manifest *m;
    char path[PATH_MAX];
    if (ckm_load(stage, &m, s->err, sizeof s->err) != CKP_OK)
        return -1;
    char *mkey = cks3_key(s->prefix, CKP_MANIFEST_NAME), *dir = *s->prefix ? cks3_key(s->prefix, "") : strdup("");
    int rc = mkey && dir ? 0 : -1, manifest_gone = 0;
    size_t kept = 0, sent = 0;
    uint64_t bytes = 0;
    if (!rc)
        rc = abort_uploads(s, dir);
    for (size_t i = 0; !rc && i < m->n_files; i++) {
        char rel[PATH_MAX];
        snprintf(rel, sizeof rel, "%s%s", m->files[i].path, CKP_SUFFIX);
        snprintf(path, sizeof path, "%s/%s", stage, rel);
        char *key = cks3_key(s->prefix, rel);
        int fd = key ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        struct stat st;
        if (fd < 0 || fstat(fd, &st)) {
            snprintf(s->err, sizeof s->err, "%s: %s", path, key ? strerror(errno) : "out of memory");
            rc = -1;
        } else {
            int eq = object_equals(s, key, fd, (uint64_t)st.st_size);
            if (eq < 0) {
                rc = -1;
            } else if (eq) {
                kept++;
            } else {
                /* an object is replaced: no manifest may vouch for the mix meanwhile */
                if (!manifest_gone && cks3_delete(s->c, s->bucket, mkey, s->err, sizeof s->err) != CKS3_OK)
                    rc = -1;
                manifest_gone = 1;
                if (!rc && ckpt_verbosity > 1)
                    fprintf(stderr, "ckptfs pack: uploading %s/%s\n", url, CKU_ESC(rel));
                if (!rc && (rc = upload(s, key, fd, (uint64_t)st.st_size)) == 0) {
                    sent++;
                    bytes += (uint64_t)st.st_size;
                }
            }
            if (rc) {
                char e2[sizeof s->err];
                snprintf(e2, sizeof e2, "%s/%s: %s", url, rel, s->err);
                snprintf(s->err, sizeof s->err, "%s", e2);
            }
        }
        if (fd >= 0)
            close(fd);
        free(key);
    }
    if (!rc) { /* the manifest last */
        char *buf = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/%s", stage, CKP_MANIFEST_NAME);
        if (read_whole(path, &buf, &len, s->err, sizeof s->err) != 0 ||
            cks3_put(s->c, s->bucket, mkey, buf, len, NULL, s->err, sizeof s->err) != CKS3_OK)
            rc = -1;
        free(buf);
    }
    if (!rc && ckpt_verbosity > 0)
        printf("uploaded to %s: %zu packed file%s sent (%llu bytes), %zu already there, then the manifest\n", url,
               sent, cku_s(sent), (unsigned long long)bytes, kept);
    ckm_free(m);
    free(mkey);
    free(dir);
    return rc;
}

int ckpt_pack_s3(const ckpt_pack_opts *o)
{
    s3pack s = {0};
    char msg[1024], stage[PATH_MAX], url[2048];
    if (o->delete_source) {
        fprintf(stderr, "ckptfs pack: --delete-source with an s3:// destination is not supported yet; pack "
                        "without it, check with ckptfs verify --against SRC %s, then delete the source\n", o->dst);
        return CKPT_EXIT_USAGE;
    }
    if (cks3_parse_url(o->dst, &s.bucket, &s.prefix, msg, sizeof msg) != CKS3_OK) {
        fprintf(stderr, "ckptfs pack: %s\n", msg);
        return CKPT_EXIT_USAGE;
    }
    snprintf(url, sizeof url, "s3://%s%s%s", s.bucket, *s.prefix ? "/" : "", s.prefix);
    const char *base = getenv("CKPTFS_STAGE_DIR");
    char key[1024];
    snprintf(key, sizeof key, "%s/%s", s.bucket, s.prefix);
    for (char *p = key; *p; p++)
        if (*p == '/')
            *p = '_';
    if (base && *base)
        snprintf(stage, sizeof stage, "%s/%s", base, key);
    else
        snprintf(stage, sizeof stage, "/var/tmp/ckptfs-stage-%u/%s", (unsigned)getuid(), key);
    int rc = CKPT_EXIT_FAIL;
    cks3_config cfg = {0};
    if (cks3_client_new(&cfg, &s.c, msg, sizeof msg) != CKS3_OK) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", url, msg);
        goto out;
    }
    if (o->dry_run) {
        ckpt_pack_opts lo = *o;
        lo.dst = stage;
        rc = ckpt_pack(&lo);
        goto out;
    }
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", stage);
    *strrchr(parent, '/') = 0;
    if (!(base && *base) && mkdir(parent, 0700) && errno != EEXIST) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", parent, strerror(errno));
        goto out;
    }
    if (ckpt_verbosity > 0)
        printf("staging the pack in %s, then uploading to %s\n", stage, url);
    /* the staging directory is this command's own: one killed before pack
     * wrote its state file is debris (pack refuses a non-empty directory
     * that is not a pack), cleared here; one with a state or a manifest is
     * resumed by pack */
    char probe[PATH_MAX + 32];
    struct stat pst;
    int resumable = 0;
    snprintf(probe, sizeof probe, "%s/%s", stage, CKP_STATE_NAME);
    resumable |= lstat(probe, &pst) == 0;
    snprintf(probe, sizeof probe, "%s/%s", stage, CKP_MANIFEST_NAME);
    resumable |= lstat(probe, &pst) == 0;
    if (!resumable && lstat(stage, &pst) == 0)
        nftw(stage, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    ckpt_pack_opts lo = *o;
    lo.dst = stage;
    if ((rc = ckpt_pack(&lo)) != CKPT_EXIT_OK)
        goto out;
    s.part = part_size();
    s.buf = malloc(s.part);
    s.back = malloc(s.part);
    if (!s.buf || !s.back) {
        fprintf(stderr, "ckptfs pack: out of memory\n");
        rc = CKPT_EXIT_FAIL;
        goto out;
    }
    if (upload_pack(&s, url, stage)) {
        fprintf(stderr, "ckptfs pack: %s\nThe pack is not complete there (no manifest); run the same command "
                        "again to go on (the staged pack in %s is kept)\n", s.err, stage);
        rc = CKPT_EXIT_FAIL;
        goto out;
    }
    nftw(stage, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    rc = CKPT_EXIT_OK;
out:
    free(s.buf);
    free(s.back);
    cks3_client_free(s.c);
    free(s.bucket);
    free(s.prefix);
    return rc;
}
