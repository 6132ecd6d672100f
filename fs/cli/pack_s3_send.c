/*
 * pack_s3_send.c — the hooks through which the local pack (pack*.c) sends a
 * pack on to s3://BUCKET/PREFIX (pack_internal.h, ckpt_pack_remote; the
 * command itself is pack_s3.c): a remote copy opened and checked as a local
 * one (HEAD, then header, TOC and chunk indexes by ranged GETs, bound to the
 * ETag), a staged packed file uploaded by multipart upload (one part in
 * memory per file in flight), the state and the manifest PUT, and the files
 * the pack holds remembered for the manifest.
 *
 * Every hook may run in several pack workers at once: what they share in
 * s3_send is protected by s->lock, the client is thread-safe.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd_common.h"
#include "pack_s3.h"
#include "s3_pack.h"
#include "util.h"

/* Remember that the pack holds the packed file described by in (its object
 * packed bytes long, of ETag etag): the manifest lists it (replacing what an
 * earlier open of the same path found). */
static int remember(s3_send *s, const ckp_info *in, uint64_t packed, const char *etag)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    size_t i = 0;
    while (i < s->n && strcmp(s->files[i].path, in->path))
        i++;
    if (i == s->n && s->n == s->cap) { /* files, packed and etags: s->cap each */
        size_t cap_files = s->cap, cap_packed = s->cap, cap = s->cap;
        ckm_file *f = cku_grow(s->files, &cap_files, s->n, sizeof *f, 64);
        uint64_t *p = f ? cku_grow(s->packed, &cap_packed, s->n, sizeof *p, 64) : NULL;
        char(*e)[CKS3_ETAG_MAX] = p ? cku_grow(s->etags, &cap, s->n, sizeof *e, 64) : NULL;
        if (f)
            s->files = f;
        if (p)
            s->packed = p;
        if (e)
            s->etags = e, s->cap = cap;
        else
            rc = -1;
    }
    char *path = rc ? NULL : i < s->n ? s->files[i].path : strdup(in->path);
    if (!path)
        rc = -1;
    if (!rc) {
        ckm_file *f = &s->files[i];
        f->path = path;
        f->size = in->original_size;
        memcpy(f->sha256, in->sha256, 32);
        f->mode = in->mode;
        f->mtime_ns = in->mtime_ns;
        f->kind = in->kind;
        s->packed[i] = packed;
        snprintf(s->etags[i], sizeof s->etags[i], "%s", etag);
        s->n += i == s->n;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Read-backs fetch blocks of this size, keeping this many (per file). */
#define READBACK_BLOCK (4u << 20)
#define READBACK_BLOCKS 12u

static int hook_open(ckpt_pack_remote *rm, const char *final_rel, int whole, ckp_reader **r)
{
    s3_send *s = (s3_send *)rm;
    char msg[1024], err[1536];
    cks3_object o;
    *r = NULL;
    char *key = cks3_key(s->prefix, final_rel);
    cks3_status st = key ? cks3_head(s->c, s->bucket, key, &o, msg, sizeof msg) : CKS3_ERR_NOMEM;
    if (st != CKS3_OK) {
        if (st != CKS3_ERR_NOT_FOUND)
            fprintf(stderr, "ckptfs pack: %s/%s: %s\n", s->url, CKU_ESC(final_rel), key ? msg : "out of memory");
        free(key);
        return st == CKS3_ERR_NOT_FOUND ? 1 : -1;
    }
    char where[4200];
    snprintf(where, sizeof where, "s3://%s/%s", s->bucket, key);
    ckp_source *src = cks3_source_new(&s->sc, key, &o);
    if (src && whole)
        src = cks3_pack_readahead(src, READBACK_BLOCK, READBACK_BLOCKS);
    free(key);
    ckp_status ps = src ? ckp_open_source(src, where, r, err, sizeof err) : CKP_ERR_NOMEM;
    if (ps == CKP_ERR_IO || ps == CKP_ERR_NOMEM) { /* cannot say: unreachable, replaced meanwhile */
        fprintf(stderr, "ckptfs pack: %s\n", ps == CKP_ERR_NOMEM ? "out of memory" : err);
        return -1;
    }
    if (ps != CKP_OK) /* damaged, or not a packed file: a rerun sends it again */
        return 1;
    const ckp_info *in = ckp_get_info(*r);
    size_t n = strlen(final_rel) - strlen(CKP_SUFFIX);
    /* while the manifest that was there is (nothing sent since it was put),
     * what it records of the file must be what the object says */
    const ckm_file *m = s->old && !atomic_load(&s->manifest_gone) ? ckm_find_file(s->old, in->path) : NULL;
    if (strncmp(in->path, final_rel, n) || in->path[n] ||
        (m && (m->size != in->original_size || memcmp(m->sha256, in->sha256, 32))) || remember(s, in, o.size, o.etag)) {
        ckp_close(*r);
        *r = NULL;
        return 1;
    }
    return 0;
}

static int hook_unchanged(ckpt_pack_remote *rm, const char *final_rel, const ckp_reader *r)
{
    s3_send *s = (s3_send *)rm;
    char msg[1024];
    cks3_object o;
    const ckp_source *src = cks3_pack_inner(ckp_get_source(r));
    char *key = cks3_key(s->prefix, final_rel);
    int same = key && src && !cks3_source_changed(src) &&
               cks3_head(s->c, s->bucket, key, &o, msg, sizeof msg) == CKS3_OK &&
               !strcmp(o.etag, cks3_source_etag(src));
    free(key);
    return same;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(((const cks3_entry *)a)->key, ((const cks3_entry *)b)->key);
}

/* Two packs to one prefix at once (two nodes started by one script, a pack
 * --force while another runs): each puts its state first, so a state there
 * that is not the one this run put means another run has started since.
 * Checked (a HEAD of the state, its ETag: my_state, the one found at the
 * start until this run puts its own) before the state is put and before
 * each object is made (an upload completed), so the run
 * that lost stops before it replaces the winner's objects, and, with
 * objects, before the manifest: every object this run sent or kept must
 * still be there with its ETag (a rival's upload may have replaced it), so
 * that no manifest vouches for a mix of two packs.  No lock S3 offers
 * spans both checks and the PUT that follows: a rival's request in flight
 * at that moment can still replace an object, which readers then refuse
 * (ETag, checksums: EIO, verify exit 3) and a rerun of the winning command
 * mends.  @return 0, or -1 after saying why. */
static int still_ours(s3_send *s, int objects)
{
    char msg[1024], err[1536];
    char *key = cks3_key(s->prefix, CKP_STATE_NAME), *dir = cks3_key(s->prefix, "");
    cks3_object o;
    cks3_list_result l = {0};
    const char *why = NULL;
    cks3_status st = key && dir ? cks3_head(s->c, s->bucket, key, &o, msg, sizeof msg) : CKS3_ERR_NOMEM;
    if (st == CKS3_ERR_NOT_FOUND ? s->my_state[0] != 0 : st == CKS3_OK && strcmp(o.etag, s->my_state))
        why = "its state there is no longer this run's";
    else if (st == CKS3_OK && objects && (st = cks3_list(s->c, s->bucket, dir, &l, msg, sizeof msg)) == CKS3_OK) {
        qsort(l.v, l.n, sizeof *l.v, cmp_key);
        for (size_t i = 0; !why && i < s->n; i++) {
            char *k = NULL;
            cks3_entry want = {.key = asprintf(&k, "%s%s%s", dir, s->files[i].path, CKP_SUFFIX) < 0 ? NULL : k};
            const cks3_entry *e = want.key ? bsearch(&want, l.v, l.n, sizeof *l.v, cmp_key) : NULL;
            if (e && strcmp(e->etag, s->etags[i]))
                why = "a packed file this run sent was replaced meanwhile";
            else if (!e) { /* not a rival's doing, as a rule */
                if (want.key && !atomic_exchange(&s->rival, 1))
                    fprintf(stderr, "ckptfs pack: %s/%s%s: sent, but not in the prefix's listing: the server keeps it "
                            "under another name (SeaweedFS turns '\\' into '/'), or it was deleted meanwhile; "
                            "no manifest put: rename the file, or pack to a server that keeps the name\n",
                            s->url, CKU_ESC(s->files[i].path), CKP_SUFFIX);
                free(k);
                cks3_list_free(&l);
                free(key);
                free(dir);
                return -1;
            }
            free(k);
        }
    }
    if (why && !atomic_exchange(&s->rival, 1)) /* said once, whichever worker finds it */
        fprintf(stderr, "ckptfs pack: %s: another ckptfs pack to this prefix has started since this one (%s); this "
                "run stops, without its manifest. Run one pack to a prefix at a time: wait for the other to finish, "
                "then check it with ckptfs verify %s (or run this command again to make the pack this source's)\n",
                s->url, why, s->url);
    else if (st != CKS3_OK && st != CKS3_ERR_NOT_FOUND) {
        cks3_pack_explain(s->c, s->url, s->bucket, st, st == CKS3_ERR_NOMEM ? "out of memory" : msg, err,
                          sizeof err);
        fprintf(stderr, "ckptfs pack: %s\n", err);
    }
    cks3_list_free(&l);
    free(key);
    free(dir);
    return why || (st != CKS3_OK && st != CKS3_ERR_NOT_FOUND) ? -1 : 0;
}

/* The part of have numbered number, NULL if none (have ascending). */
static const cks3_part *part_there(const cks3_part_list *have, int number)
{
    for (size_t i = 0; i < have->n && have->v[i].number <= number; i++)
        if (have->v[i].number == number)
            return &have->v[i];
    return NULL;
}

/* Upload the size bytes of fd (the packed copy of the file in describes)
 * as key by multipart upload (an empty file: one PUT), a part of s->part
 * bytes in memory at a time.  An interrupted upload of the same file is
 * resumed (pack_s3_resume.c): a part already there is kept if its ETag is
 * the MD5 of this part's bytes, else sent again.  A failed upload (the
 * server down past the retries) is kept, as a kill keeps it: the rerun
 * resumes it, or aborts it if its parts are not this file's (nothing is
 * left billed by a pack that completes).  @return 0, or -1 with the reason
 * in err, else the object's ETag in etag. */
static int upload(s3_send *s, const char *key, const ckp_info *in, int fd, uint64_t size, char *etag, char *err,
                  size_t cap)
{
    if (size == 0)
        return still_ours(s, 0) || cks3_put(s->c, s->bucket, key, "", 0, etag, err, cap) != CKS3_OK ? -1 : 0;
    char *id = NULL;
    cks3_part_list have = {0};
    size_t np = (size_t)((size + s->part - 1) / s->part), reused = 0;
    uint64_t reused_bytes = 0;
    cks3_part *parts = calloc(np, sizeof *parts);
    uint8_t *buf = malloc(s->part);
    if (!parts || !buf) {
        snprintf(err, cap, "out of memory");
        free(buf);
        free(parts);
        return -1;
    }
    int rc = s3_resume_pick(s, key, in, fd, size, buf, &id, &have, err, cap);
    for (size_t i = 0; !rc && i < np; i++) {
        uint64_t off = (uint64_t)i * s->part;
        size_t n = size - off < s->part ? (size_t)(size - off) : s->part;
        const cks3_part *there = part_there(&have, (int)i + 1);
        parts[i].number = (int)i + 1;
        if (s3_read_at(fd, buf, n, off) != (ssize_t)n) {
            snprintf(err, cap, "reading the staged file: %s", strerror(errno ? errno : EIO));
            rc = -1;
        } else if (there && there->size == n && cks3_etag_is_md5(there->etag, buf, n)) {
            memcpy(parts[i].etag, there->etag, sizeof parts[i].etag); /* the same bytes: kept */
            reused++;
            reused_bytes += n;
        } else if (cks3_mpu_upload_part(s->c, s->bucket, key, id, parts[i].number, buf, n, parts[i].etag, err, cap) !=
                   CKS3_OK) {
            rc = -1;
        }
    }
    if (!rc && still_ours(s, 0)) { /* the object appears at complete: not over a rival's, and nothing left billed */
        cks3_mpu_abort(s->c, s->bucket, key, id, err, cap);
        snprintf(err, cap, "not completed (its upload aborted): another ckptfs pack to the prefix runs");
        free(id);
        id = NULL;
        rc = -1;
    }
    if (!rc && cks3_mpu_complete(s->c, s->bucket, key, id, parts, np, etag, err, cap) != CKS3_OK)
        rc = -1;
    if (rc && id) { /* kept, as a kill keeps it: the rerun resumes it or aborts it */
        size_t n = strlen(err);
        snprintf(err + n, cap - n, " (the parts of its upload already stored are kept: the same command resumes it)");
    }
    if (!rc) {
        pthread_mutex_lock(&s->lock);
        s->parts_reused += reused;
        s->bytes_reused += reused_bytes;
        pthread_mutex_unlock(&s->lock);
    }
    cks3_part_list_free(&have);
    free(buf);
    free(parts);
    free(id);
    return rc;
}

/* The remote manifest goes before the first object is replaced or added:
 * no manifest may vouch for a mix of two packs meanwhile.  @return 0, or -1. */
static int manifest_away(s3_send *s, char *err, size_t cap)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock); /* the other workers wait until it is gone */
    if (!atomic_load(&s->manifest_gone)) {
        char *mkey = cks3_key(s->prefix, CKP_MANIFEST_NAME);
        rc = mkey && cks3_delete(s->c, s->bucket, mkey, err, cap) == CKS3_OK ? 0 : -1;
        atomic_store(&s->manifest_gone, !rc);
        free(mkey);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int hook_send(ckpt_pack_remote *rm, pack_ctx *c, const char *final_rel)
{
    s3_send *s = (s3_send *)rm;
    char err[1536], etag[CKS3_ETAG_MAX] = "";
    ckp_reader *r = NULL;
    struct stat st;
    char *key = cks3_key(s->prefix, final_rel);
    int fd = openat(c->lock_fd, final_rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc = -1;
    if (!key || fd < 0 || fstat(fd, &st)) {
        snprintf(err, sizeof err, "%s", key ? strerror(errno) : "out of memory");
    } else if (ckp_open_in(c->lock_fd, c->dst, final_rel, &r, err, sizeof err) == CKP_OK &&
               !manifest_away(s, err, sizeof err)) {
        if (ckpt_verbosity > 1)
            fprintf(stderr, "ckptfs pack: uploading %s/%s\n", s->url, CKU_ESC(final_rel));
        rc = upload(s, key, ckp_get_info(r), fd, (uint64_t)st.st_size, etag, err, sizeof err) ||
                     remember(s, ckp_get_info(r), (uint64_t)st.st_size, etag)
                 ? -1
                 : 0;
    }
    if (rc) {
        fprintf(stderr, "ckptfs pack: %s/%s: %s\n", s->url, CKU_ESC(final_rel), err);
        if (!atomic_load(&s->rival)) /* a rival's --force aborts the uploads it finds: say so if that was it */
            still_ours(s, 0);
    } else {
        pthread_mutex_lock(&s->lock);
        s->sent++;
        s->sent_bytes += (uint64_t)st.st_size;
        pthread_mutex_unlock(&s->lock);
    }
    if (r)
        ckp_close(r);
    if (fd >= 0)
        close(fd);
    free(key);
    return rc;
}

/* PUT DST's file name (the state, the manifest) as PREFIX/name; with
 * unless_same, not if the object there (*same: s->old_manifest) holds the
 * same bytes.  etag (may be NULL): the ETag of the object put.  @return 0,
 * or -1 after saying why. */
static int put_file(s3_send *s, pack_ctx *c, const char *name, const char *same, size_t same_len, char *etag)
{
    char err[1536];
    struct stat st;
    char *buf = NULL, *key = cks3_key(s->prefix, name);
    int fd = openat(c->lock_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc = -1;
    if (!key || fd < 0 || fstat(fd, &st) || !(buf = malloc((size_t)st.st_size + 1)) ||
        s3_read_at(fd, (uint8_t *)buf, (size_t)st.st_size, 0) != (ssize_t)st.st_size)
        snprintf(err, sizeof err, "%s/%s: %s", c->dst, name, key ? strerror(errno ? errno : EIO) : "out of memory");
    else if (same && same_len == (size_t)st.st_size && !memcmp(same, buf, same_len))
        rc = 0; /* a rerun that changed nothing */
    else if (cks3_put(s->c, s->bucket, key, buf, (size_t)st.st_size, etag, err, sizeof err) == CKS3_OK)
        rc = 0;
    if (rc)
        fprintf(stderr, "ckptfs pack: %s/%s: %s\n", s->url, name, err);
    if (fd >= 0)
        close(fd);
    free(buf);
    free(key);
    return rc;
}

static int hook_state_written(ckpt_pack_remote *rm, pack_ctx *c)
{
    s3_send *s = (s3_send *)rm;
    /* the state there must still be the one found at the start (or none):
     * else another run put its own since, and this one must not replace it */
    if (still_ours(s, 0) || put_file(s, c, CKP_STATE_NAME, NULL, 0, s->my_state))
        return -1;
    s->state_put = 1;
    cks3_object o;
    char *key = s->my_state[0] ? NULL : cks3_key(s->prefix, CKP_STATE_NAME), msg[1024];
    if (key && cks3_head(s->c, s->bucket, key, &o, msg, sizeof msg) == CKS3_OK) /* a PUT that gave no ETag */
        snprintf(s->my_state, sizeof s->my_state, "%s", o.etag);
    free(key);
    return 0;
}

static int hook_manifest_written(ckpt_pack_remote *rm, pack_ctx *c)
{
    s3_send *s = (s3_send *)rm;
    if (still_ours(s, 1))
        return -1;
    int rc = put_file(s, c, CKP_MANIFEST_NAME, atomic_load(&s->manifest_gone) ? NULL : s->old_manifest, s->old_len,
                      NULL);
    s->manifest_up = !rc;
    return rc;
}

/* The directory of b named path (its length n), added if missing with the
 * mode the pack's earlier manifest gave it (else 0755): the source
 * directories a --delete-source run emptied and removed are no longer in
 * the staging directory.  @return 0, or -1 out of memory. */
static int need_dir(s3_send *s, mf_build *b, const char *path, size_t n)
{
    for (size_t i = 0; i < b->m.n_dirs; i++)
        if (strlen(b->m.dirs[i].path) == n && !strncmp(b->m.dirs[i].path, path, n))
            return 0;
    uint32_t mode = 0755;
    for (size_t i = 0; s->old && i < s->old->n_dirs; i++)
        if (strlen(s->old->dirs[i].path) == n && !strncmp(s->old->dirs[i].path, path, n))
            mode = s->old->dirs[i].mode;
    return mf_add_dir(b, path, n, mode);
}

/* Every directory above path in b. */
static int parents(s3_send *s, mf_build *b, const char *path)
{
    for (const char *q = strchr(path, '/'); q; q = strchr(q + 1, '/'))
        if (need_dir(s, b, path, (size_t)(q - path)))
            return -1;
    return 0;
}

/* DST's state (the files the pack is to hold), parsed; NULL after saying why. */
static cJSON *load_state(s3_send *s, pack_ctx *c)
{
    struct stat st;
    char *buf = NULL;
    cJSON *o = NULL;
    int fd = openat(c->lock_fd, CKP_STATE_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && !fstat(fd, &st) && (buf = malloc((size_t)st.st_size + 1)) &&
        s3_read_at(fd, (uint8_t *)buf, (size_t)st.st_size, 0) == (ssize_t)st.st_size) {
        buf[st.st_size] = 0;
        o = cJSON_Parse(buf);
    }
    if (!o)
        fprintf(stderr, "ckptfs pack: %s/%s: cannot read it back (%s)\n", c->dst, CKP_STATE_NAME, s->url);
    free(buf);
    if (fd >= 0)
        close(fd);
    return o;
}

/* Add the file s->files[k] (its object s->packed[k]) to b, and its directories. */
static int add_file(s3_send *s, mf_build *b, size_t k)
{
    if (mf_add_file(b, &s->files[k]))
        return -1;
    b->packed += s->packed[k];
    return parents(s, b, s->files[k].path);
}

/* The files the state lists, each as its object says (sent or found there
 * in this run, with the size and mtime the state records), and the
 * directories above them and above the links. */
static int hook_add_files(ckpt_pack_remote *rm, pack_ctx *c, mf_build *b)
{
    s3_send *s = (s3_send *)rm;
    cJSON *st = load_state(s, c);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(st, "files");
    int rc = cJSON_IsArray(files) ? 0 : -1;
    pthread_mutex_lock(&s->lock);
    s->n_held = 0;
    for (const cJSON *f = rc ? NULL : files->child; !rc && f; f = f->next) {
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "path"));
        const cJSON *sz = cJSON_GetObjectItemCaseSensitive(f, "size");
        const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "mtime_ns"));
        size_t k = 0;
        while (p && k < s->n && strcmp(s->files[k].path, p))
            k++;
        if (!p || !mt || !cJSON_IsNumber(sz) || k == s->n || (double)s->files[k].size != sz->valuedouble ||
            s->files[k].mtime_ns != strtoll(mt, NULL, 10)) {
            fprintf(stderr, "ckptfs pack: %s/%s%s: not there as the pack's state records it; run the same command "
                    "again\n", s->url, p ? CKU_ESC(p) : "?", CKP_SUFFIX);
            rc = -1;
        } else if (add_file(s, b, k)) {
            rc = -1;
        } else {
            s->n_held++;
        }
    }
    for (const cJSON *l = c->hold_links ? c->hold_links->child : NULL; !rc && l; l = l->next) {
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "path"));
        rc = p ? parents(s, b, p) : 0;
    }
    pthread_mutex_unlock(&s->lock);
    cJSON_Delete(st);
    return rc;
}

void s3_send_init(s3_send *s)
{
    s->rm.url = s->url;
    s->rm.open = hook_open;
    s->rm.unchanged = hook_unchanged;
    s->rm.send = hook_send;
    s->rm.state_written = hook_state_written;
    s->rm.add_files = hook_add_files;
    s->rm.manifest_written = hook_manifest_written;
    s->sc.c = s->c;
    s->sc.bucket = s->bucket;
    pthread_mutex_init(&s->lock, NULL);
}

void s3_send_free(s3_send *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->files[i].path);
    free(s->files);
    free(s->packed);
    free(s->etags);
    free(s->old_manifest);
    cJSON_Delete(s->old_state);
    cks3_upload_list_free(&s->pending);
    free(s->claimed);
    if (s->old)
        ckm_free(s->old);
    pthread_mutex_destroy(&s->lock);
}
