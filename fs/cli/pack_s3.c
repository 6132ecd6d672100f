/*
 * pack_s3.c — ckptfs pack SRC s3://BUCKET/PREFIX (issue 25; docs/
 * object-storage.md).  The usual pack (pack*.c) runs on a local staging
 * directory, with hooks (pack_s3_send.c) that send each packed file on as
 * soon as it is made and read back: a few files are packed at a time (2,
 * CKPTFS_STAGE_FILES), each uploaded by multipart upload by the worker that
 * made it, then removed, so the staging directory holds at most that many
 * packed files.  The state goes up before anything is sent, the manifest
 * last.  Killed at any moment, the same command goes on: the remote state
 * is put back in the staging directory, an unfinished multipart upload of a
 * file is resumed if its parts are this run's bytes (pack_s3_resume.c) and
 * the others under the prefix are aborted, and a packed object already there is kept if its
 * header and table of contents (ranged GETs) say it is the packed copy of
 * the source as it is now.  Once the manifest is up, packed files it does
 * not list (an earlier pack's) are deleted (pack_s3_prune.c).  --delete-source deletes a source only after its
 * object is complete, read back from the server and decoded equal to it.
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
#include <sys/file.h>
#include <unistd.h>

#include "cmd_common.h"
#include "pack_s3.h"
#include "remote.h"
#include "s3_pack.h"
#include "util.h"

#define DEFAULT_PART_MIB 16u

static size_t part_size(void)
{
    const char *e = getenv("CKPTFS_S3_PART_MIB"); /* S3's minimum is 5 MiB */
    unsigned long v = e ? strtoul(e, NULL, 10) : DEFAULT_PART_MIB;
    if (v < 5 || v > 1024)
        v = DEFAULT_PART_MIB;
    return (size_t)v << 20;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p) ? -1 : 0;
}

/* Files packed, and so staged, at once: $CKPTFS_STAGE_FILES (1 to 64), else 2
 * (one file packed while the one before is uploaded). */
static int stage_files(void)
{
    const char *e = getenv("CKPTFS_STAGE_FILES");
    unsigned long v = e ? strtoul(e, NULL, 10) : 2;
    return v < 1 || v > 64 ? 2 : (int)v;
}

/* Lock path (a file beside the staging directory) for this run: a second
 * pack to the same prefix from this machine fails here before it touches
 * the staging directory.  @return the descriptor, or -1 after saying why. */
static int lock_stage(const char *path, const char *url)
{
    for (int tries = 0; tries < 8; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        struct stat a, b;
        if (fd < 0) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", path, strerror(errno));
            return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB)) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", url,
                    errno == EWOULDBLOCK ? "another ckptfs pack to it is running on this machine; wait for it to "
                                           "finish" : strerror(errno));
            close(fd);
            return -1;
        }
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            return fd; /* still the file at that name: not one the run before us removed */
        close(fd);
    }
    fprintf(stderr, "ckptfs pack: %s: cannot lock it\n", path);
    return -1;
}

/* The staging directory holds nothing a rerun needs but the state, and the
 * one that counts is the remote one: stage is emptied, then given the state
 * stored under the prefix if there is one (written before anything was sent
 * or deleted, it lists the files the pack holds, among them those whose
 * sources a --delete-source run deleted).  Also keeps the remote manifest
 * in s (old_manifest).  @return 0, or -1 after saying why. */
static int sync_stage(s3_send *s, const char *stage)
{
    char msg[1024], err[1536], path[PATH_MAX + 32];
    char *buf = NULL, *key = cks3_key(s->prefix, CKP_STATE_NAME);
    size_t len = 0;
    struct stat st;
    if (lstat(stage, &st) == 0)
        nftw(stage, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    cks3_object so = {0};
    cks3_status gs = key ? cks3_get_object(s->c, s->bucket, key, 256u << 20, &so, &buf, &len, msg, sizeof msg)
                         : CKS3_ERR_NOMEM;
    if (gs == CKS3_OK) /* the state this run expects there until it puts its own (pack_s3_send.c, still_ours) */
        snprintf(s->my_state, sizeof s->my_state, "%s", so.etag);
    free(key);
    int rc = 0;
    if (gs == CKS3_OK) {
        snprintf(path, sizeof path, "%s/%s", stage, CKP_STATE_NAME);
        int fd = mkdir(stage, 0700) ? -1 : open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        rc = fd < 0 || cku_pwrite_full(fd, buf, len, 0) || fsync(fd) ? -1 : 0;
        if (rc)
            fprintf(stderr, "ckptfs pack: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        s->old_state = cJSON_ParseWithLength(buf, len); /* whose files an unfinished upload may resume */
    } else if (gs != CKS3_ERR_NOT_FOUND) {
        cks3_pack_explain(s->c, s->url, s->bucket, gs, msg, err, sizeof err);
        fprintf(stderr, "ckptfs pack: %s\n", err);
        rc = -1;
    }
    free(buf);
    key = rc ? NULL : cks3_key(s->prefix, CKP_MANIFEST_NAME);
    gs = key ? cks3_get_object(s->c, s->bucket, key, 1u << 30, NULL, &s->old_manifest, &s->old_len, msg, sizeof msg)
             : CKS3_ERR_NOMEM;
    free(key);
    if (!rc && gs == CKS3_OK) { /* parsed for its directories' modes (a copy: ckm_parse changes it) */
        char *copy = malloc(s->old_len + 1);
        if (copy) {
            memcpy(copy, s->old_manifest, s->old_len + 1);
            if (ckm_parse(s->url, copy, s->old_len, &s->old, err, sizeof err) != CKP_OK)
                s->old = NULL;
        }
        free(copy);
    } else if (!rc && gs != CKS3_ERR_NOT_FOUND) {
        cks3_pack_explain(s->c, s->url, s->bucket, gs, msg, err, sizeof err);
        fprintf(stderr, "ckptfs pack: %s\n", err);
        rc = -1;
    }
    return rc;
}

/* 1 if the first n bytes of the prefix name a pack (its state or manifest
 * is there), 0 if not, -1 (st, msg) if the server did not say. */
static int pack_at(s3_send *s, size_t n, cks3_status *st, char *msg, size_t cap)
{
    static const char *const names[] = {CKP_STATE_NAME, CKP_MANIFEST_NAME};
    for (int i = 0; i < 2; i++) {
        char key[2048];
        cks3_object o;
        snprintf(key, sizeof key, "%.*s%s%s", (int)n, s->prefix, n ? "/" : "", names[i]);
        *st = cks3_head(s->c, s->bucket, key, &o, msg, cap);
        if (*st == CKS3_OK)
            return 1;
        if (*st != CKS3_ERR_NOT_FOUND)
            return -1;
    }
    return 0;
}

/* The key of l (past skip bytes) that is another pack's state or manifest
 * further down, NULL if none. */
static const char *pack_below(const cks3_list_result *l, size_t skip)
{
    for (size_t i = 0; i < l->n; i++) {
        const char *k = l->v[i].key + skip, *slash = strrchr(k, '/');
        if (slash && (!strcmp(slash + 1, CKP_STATE_NAME) || !strcmp(slash + 1, CKP_MANIFEST_NAME)))
            return l->v[i].key;
    }
    return NULL;
}

/* A pack goes to a prefix of its own: not inside another pack's prefix, not
 * above one, and not where objects are that no `ckptfs pack` to it put
 * (a pack there without its state, e.g. uploaded by hand: replaced only
 * with --force; other objects: never).  A prefix whose state is there is
 * prepare_dst's to judge (resume, refuse, --force).  Asks before anything
 * is written.  @return 0, or -1 after saying why. */
static int check_prefix(s3_send *s, int force)
{
    char msg[1024], err[1536];
    cks3_status st = CKS3_OK;
    cks3_list_result l = {0};
    const char *why = NULL, *below = NULL;
    size_t n = strlen(s->prefix);
    int rc = 0;
    while (!rc && n > 0) { /* every prefix above: PREFIX minus its last parts, then the bucket's root */
        while (n > 0 && s->prefix[n - 1] != '/')
            n--;
        n -= n > 0;
        if ((rc = pack_at(s, n, &st, msg, sizeof msg)) > 0)
            fprintf(stderr, "ckptfs pack: %s: inside the pack at s3://%s%s%.*s; pack to a prefix outside it\n",
                    s->url, s->bucket, n ? "/" : "", (int)n, s->prefix);
    }
    char *dir = rc ? NULL : cks3_key(s->prefix, "");
    if (!rc && (st = dir ? cks3_list(s->c, s->bucket, dir, &l, msg, sizeof msg) : CKS3_ERR_NOMEM) != CKS3_OK)
        rc = -1;
    else if (!rc && (below = pack_below(&l, strlen(dir))))
        why = "holds another pack further down";
    else if (!rc && l.n && !s->old_state && !s->old_manifest)
        why = "holds objects and no pack; pack to a new or empty prefix (--force only replaces a pack)";
    else if (!rc && !s->old_state && s->old_manifest && !force)
        why = "holds a pack that no `ckptfs pack` to it made (no ckptfs.state: uploaded by hand?); use --force to "
              "replace it";
    if (why) {
        fprintf(stderr, "ckptfs pack: %s: %s%s%s%s\n", s->url, why, below ? " (" : "", below ? below : "",
                below ? "); pack to another prefix" : "");
        rc = 1;
    }
    if (rc < 0 && st != CKS3_OK) {
        cks3_pack_explain(s->c, s->url, s->bucket, st, st == CKS3_ERR_NOMEM ? "out of memory" : msg, err,
                          sizeof err);
        fprintf(stderr, "ckptfs pack: %s\n", err);
    }
    cks3_list_free(&l);
    free(dir);
    return rc ? -1 : 0;
}

int ckpt_pack_s3(const ckpt_pack_opts *o)
{
    s3_send s = {0};
    char msg[1024], stage[PATH_MAX], lock[PATH_MAX + 8];
    int lock_fd = -1;
    if (cks3_parse_url(o->dst, &s.bucket, &s.prefix, msg, sizeof msg) != CKS3_OK) {
        fprintf(stderr, "ckptfs pack: %s\n", msg);
        return CKPT_EXIT_USAGE;
    }
    snprintf(s.url, sizeof s.url, "s3://%s%s%s", s.bucket, *s.prefix ? "/" : "", s.prefix);
    if (!*s.prefix) { /* the root would share the pack's place with everything else in the bucket */
        fprintf(stderr, "ckptfs pack: %s: no prefix; pack to s3://%s/PREFIX, a prefix of the pack's own\n", s.url,
                s.bucket);
        free(s.bucket);
        free(s.prefix);
        return CKPT_EXIT_USAGE;
    }
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
    snprintf(lock, sizeof lock, "%s.lock", stage);
    int rc = CKPT_EXIT_FAIL;
    if (ckpt_remote_client(s.url, 0, &s.c, msg, sizeof msg) != CKS3_OK) { /* -o, or the AWS way */
        fprintf(stderr, "ckptfs pack: %s\n", msg);
        goto out;
    }
    s.part = part_size();
    s.rm.files_at_once = stage_files();
    s3_send_init(&s);
    ckpt_pack_opts lo = *o;
    lo.dst = stage;
    lo.remote = &s.rm;
    if (o->dry_run) {
        rc = ckpt_pack(&lo);
        goto out;
    }
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", stage);
    *strrchr(parent, '/') = 0;
    if ((base && *base ? cku_mkdirs(parent, 0755) : mkdir(parent, 0700)) && errno != EEXIST) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", parent, strerror(errno));
        goto out;
    }
    if ((lock_fd = lock_stage(lock, s.url)) < 0 || sync_stage(&s, stage) || check_prefix(&s, o->force) ||
        s3_resume_list(&s))
        goto out;
    if (ckpt_verbosity > 0)
        printf("packing %s to %s, staging at most %d packed file%s at a time in %s\n", o->src, s.url,
               s.rm.files_at_once, cku_s((size_t)s.rm.files_at_once), stage);
    if ((rc = ckpt_pack(&lo)) != CKPT_EXIT_OK) {
        if (!s.state_put) /* refused before its state went up: a rerun would be refused the same */
            fprintf(stderr, "ckptfs pack: nothing was written to %s\n", s.url);
        else if (!atomic_load(&s.rival)) /* (a rival: said what to do) */
            fprintf(stderr, "ckptfs pack: the pack is not complete at %s (no manifest); run the same command again "
                    "to go on\n", s.url);
        goto out;
    }
    if (s3_resume_abort_rest(&s) || s3_prune(&s, stage))
        goto out;
    if (ckpt_verbosity > 0 && !ckpt_json)
        printf("uploaded to %s: %zu packed file%s sent (%llu bytes, of which %llu in %zu part%s of interrupted "
               "uploads kept, not sent again), %zu already there, then the manifest\n", s.url, s.sent, cku_s(s.sent),
               (unsigned long long)s.sent_bytes, (unsigned long long)s.bytes_reused, s.parts_reused,
               cku_s(s.parts_reused), s.n_held - s.sent);
    if (ckpt_verbosity > 0 && !ckpt_json && (s.pruned || s.foreign))
        printf("%zu packed file%s of the pack there before deleted (not in the new manifest); %zu other object%s "
               "under the prefix kept (not ckptfs's)\n", s.pruned, cku_s(s.pruned), s.foreign, cku_s(s.foreign));
    nftw(stage, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    rc = CKPT_EXIT_OK;
out:
    if (lock_fd >= 0) {
        if (rc == CKPT_EXIT_OK)
            unlink(lock);
        close(lock_fd);
    }
    if (s.rm.open)
        s3_send_free(&s);
    cks3_client_free(s.c);
    free(s.bucket);
    free(s.prefix);
    return rc;
}
