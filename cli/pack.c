/*
 * pack.c — `ckptfs pack`: store a model directory as a packed directory.
 *
 * Invariants (DESIGN §4):
 *  - the source is never modified, except that with --delete-source a file is
 *    unlinked after its packed copy is written, fsynced, renamed into place,
 *    its directory fsynced, and read back equal to the source byte for byte;
 *  - each packed file is written under a temporary name and renamed only
 *    after that read-back, so a kill at any moment leaves either no packed
 *    file or a complete, verified one;
 *  - DST/ckptfs.state records the source, encoding and the files DST is to
 *    hold, so rerunning the same command (on the source where it is now)
 *    resumes: complete packed files whose source is unchanged (or already
 *    deleted) are kept, leftovers are removed, and the manifest is rebuilt
 *    from the packed files themselves;
 *  - every name and every safetensors header is validated before anything
 *    is written or deleted; DST is locked (flock) for the run;
 *  - a source is deleted only if its name still holds the file that was read
 *    (device, inode, size, mtime); a source truncated while it is read is an
 *    error (source_map.h), not SIGBUS.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "container.h"
#include "manifest.h"
#include "safetensors.h"
#include "hashing.h"
#include "progress.h"
#include "source_map.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define STATE_NAME CKP_STATE_NAME
#define TMP_SUFFIX ".ckpt.tmp"

typedef struct {
    char *rel;        /* relative path */
    int is_dir;
    struct stat st;   /* of the file (symlinks followed) */
} src_entry;

typedef struct {
    src_entry *v;
    size_t n, cap;
} src_list;

typedef struct {
    const ckpt_pack_opts *o;
    char src_root[PATH_MAX];  /* directory holding the files */
    int single_file;          /* SRC was one file */
    char dst[PATH_MAX];       /* resolved: absolute, no symbolic links */
    int src_missing;          /* SRC is gone (a rerun after a finished single-file --delete-source) */
    int lock_fd;              /* DST opened and flock'ed for the run, or -1 */
    src_list list;
    cku_progress *progress;
    int jobs_each;            /* encoder / read-back threads per file in flight */
    atomic_uint_fast64_t left; /* source bytes of the files not yet packed */
    /* for the summary: files kept from an earlier run, sources deleted */
    atomic_uint_fast64_t kept, deleted, deleted_bytes;
    uint64_t packed_bytes;     /* of the finished pack, manifest included */
} pack_ctx;

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int list_add(src_list *l, const char *rel, int is_dir, const struct stat *st)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        src_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].rel = strdup(rel);
    l->v[l->n].is_dir = is_dir;
    l->v[l->n].st = *st;
    return l->v[l->n++].rel ? 0 : -1;
}

static void list_free(src_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].rel);
    free(l->v);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const src_entry *)a)->rel, ((const src_entry *)b)->rel);
}

/* Walk root/rel recursively.  File symlinks are followed (their content is
 * packed); directory symlinks are refused, so the walk cannot loop. */
static int walk(pack_ctx *c, const char *rel)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s%s%s", c->src_root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!cku_utf8_ok(e->d_name)) { /* the manifest is JSON and the spec's names are UTF-8 */
            fprintf(stderr, "ckptfs pack: %s/%s: name is not valid UTF-8; rename it to pack it\n", dir, e->d_name);
            rc = -1;
            break;
        }
        char r[PATH_MAX], full[PATH_MAX];
        if (strlen(c->src_root) + strlen(rel) + strlen(e->d_name) + 64 > PATH_MAX) {
            fprintf(stderr, "ckptfs pack: %s/%s: path too long\n", dir, e->d_name);
            rc = -1;
            break;
        }
        snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", c->src_root, r);
        struct stat st, lst;
        if (lstat(full, &lst) || stat(full, &st)) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", full, strerror(errno));
            rc = -1;
        } else if (S_ISDIR(st.st_mode) && S_ISLNK(lst.st_mode)) {
            fprintf(stderr, "ckptfs pack: %s: symbolic link to a directory is not supported\n", full);
            rc = -1;
        } else if (S_ISDIR(st.st_mode)) {
            if (!*rel && (!strcmp(e->d_name, CKP_MANIFEST_NAME) || !strcmp(e->d_name, STATE_NAME))) {
                fprintf(stderr, "ckptfs pack: %s: this name is reserved for ckptfs\n", full);
                rc = -1;
            } else {
                rc = list_add(&c->list, r, 1, &st) ? -1 : walk(c, r);
            }
        } else if (S_ISREG(st.st_mode)) {
            rc = list_add(&c->list, r, 0, &st);
        } else {
            fprintf(stderr, "ckptfs pack: %s: not a regular file or directory\n", full);
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

/* Validate a safetensors file's header; @return parsed header or NULL. */
static st_header *check_safetensors(const char *path, const uint8_t *p, uint64_t size)
{
    char err[512];
    st_header *h = NULL;
    if (st_parse(p, p ? size : 0, size, &h, err, sizeof err)) {
        fprintf(stderr, "ckptfs pack: %s: invalid safetensors file: %s\n", path, err);
        return NULL;
    }
    return h;
}

typedef struct {
    const uint8_t *p;
    uint64_t size;
    uint8_t sha[32];
} sha_job;

static void *sha_thread(void *arg)
{
    sha_job *j = arg;
    cku_sha256 *s = cku_sha256_new();
    for (uint64_t off = 0; s && off < j->size; off += 64u << 20)
        cku_sha256_update(s, j->p + off, j->size - off < (64u << 20) ? j->size - off : 64u << 20);
    if (s)
        cku_sha256_final(s, j->sha);
    return NULL;
}

/* Writing the packed file tmp failed with message why (errno err): name the
 * destination; on a full disk say what is free there, what the files not yet
 * packed need at most, and how to finish. */
static void write_failed(pack_ctx *c, const char *tmp, const char *why, int err)
{
    struct statvfs sv;
    int full = err == ENOSPC || err == EDQUOT || strstr(why, strerror(ENOSPC)) || strstr(why, strerror(EDQUOT));
    if (!full || statvfs(c->dst, &sv)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", tmp, why);
        return;
    }
    char free_s[32], need_s[32];
    cku_human((uint64_t)sv.f_bavail * sv.f_frsize, free_s);
    cku_human(atomic_load(&c->left), need_s);
    fprintf(stderr,
            "ckptfs pack: %s: No space left on device (writing %s): %s free there; the files not yet packed\n"
            "  need up to %s more (their size before packing).  Free some space, or move %s to a larger\n"
            "  disk, and run the same command again to finish it.\n",
            c->dst, tmp, free_s, need_s, c->dst);
}

/* Encode src into the writer: header extent + one extent per tensor, or one blob extent. */
static int write_extents(pack_ctx *c, ckp_writer *w, const char *tmp, const uint8_t *p, uint64_t size,
                         st_header *h)
{
    ckp_status s = CKP_OK;
    if (!h) {
        s = ckp_writer_add(w, CKC_ENC_ZSTD, p, size, NULL, 0);
        cku_progress_add(c->progress, size);
    } else {
        s = ckp_writer_add(w, CKC_ENC_ZSTD, p, h->data_start, NULL, 0); /* JSON: zstd if it saves 3% */
        cku_progress_add(c->progress, h->data_start);
        for (size_t i = 0; s == CKP_OK && i < h->n_tensors; i++) {
            const st_tensor *t = &h->tensors[i];
            uint32_t enc = t->dtype == 7 ? c->o->encoding : CKC_ENC_ZSTD; /* 7 = BF16 */
            s = ckp_writer_add(w, enc, p + h->data_start + t->begin, t->end - t->begin, t->name, t->dtype);
            cku_progress_add(c->progress, t->end - t->begin);
        }
    }
    if (s != CKP_OK) {
        char why[640];
        snprintf(why, sizeof why, "%s: %s", ckp_status_name(s), ckp_writer_error(w));
        write_failed(c, tmp, why, 0);
    }
    return s == CKP_OK ? 0 : -1;
}

/* The read-back: every chunk of the packed file decoded and compared with
 * the source, split over threads that take batches of chunks in file order. */
typedef struct {
    const ckp_reader *r;
    const uint8_t *p;
    const uint64_t *first;  /* first[e]: flat number of extent e's chunk 0; first[n_extents]: total */
    atomic_uint_fast64_t next;
    atomic_int bad;
} cmp_job;

#define CMP_BATCH 8

static void *cmp_thread(void *arg)
{
    cmp_job *j = arg;
    const ckp_info *in = ckp_get_info(j->r);
    const uint64_t total = j->first[in->n_extents];
    ckp_scratch *s = ckp_scratch_new();
    uint8_t *buf = malloc(CKP_MAX_CHUNK);
    uint32_t e = 0;
    if (!s || !buf)
        atomic_store(&j->bad, 1);
    while (!atomic_load(&j->bad)) {
        uint64_t k = atomic_fetch_add(&j->next, CMP_BATCH), end = k + CMP_BATCH < total ? k + CMP_BATCH : total;
        if (k >= total)
            break;
        for (; k < end; k++) {
            while (j->first[e + 1] <= k) /* batches come in increasing order: e only moves on */
                e++;
            const ckp_extent *x = ckp_get_extent(j->r, e);
            uint64_t c = k - j->first[e], len = ckp_chunk_len(x, c), at = x->orig_offset + c * x->chunk_size;
            if (ckp_read_chunk(j->r, e, c, buf, s) != CKP_OK || memcmp(buf, j->p + at, len)) {
                atomic_store(&j->bad, 1);
                break;
            }
        }
    }
    free(buf);
    ckp_scratch_free(s);
    return NULL;
}

/* Decode every chunk of r with `jobs` threads and compare it with the source
 * bytes p[0..size); the recorded size and SHA-256 must be the source's too. */
static int compare_with_source(const ckp_reader *r, const char *src_path, const uint8_t *p, uint64_t size,
                               const uint8_t sha[32], int jobs)
{
    const ckp_info *in = ckp_get_info(r);
    uint64_t *first = malloc(((size_t)in->n_extents + 1) * sizeof *first);
    int rc = -1;
    if (!first || in->original_size != size || memcmp(in->sha256, sha, 32))
        goto out;
    first[0] = 0;
    for (uint32_t e = 0; e < in->n_extents; e++)
        first[e + 1] = first[e] + ckp_get_extent(r, e)->n_chunks;
    cmp_job j = {.r = r, .p = p, .first = first};
    atomic_init(&j.next, 0);
    atomic_init(&j.bad, 0);
    uint64_t batches = (first[in->n_extents] + CMP_BATCH - 1) / CMP_BATCH;
    cku_run_threads(jobs < 1 ? 1 : (uint64_t)jobs > batches ? (int)(batches ? batches : 1) : jobs, cmp_thread, &j);
    rc = atomic_load(&j.bad) ? -1 : 0;
out:
    if (rc)
        fprintf(stderr, "ckptfs pack: %s: packed copy does not read back equal to the source\n", src_path);
    free(first);
    return rc;
}

/* fsync in a thread, so that the read-back (from the page cache, like any
 * read before or after the sync) overlaps the disk's work. */
typedef struct {
    int fd, err;
} sync_job;

static void *sync_thread(void *arg)
{
    sync_job *j = arg;
    cku_fault_point();
    j->err = fsync(j->fd) ? errno : 0;
    return NULL;
}

/* Open the packed file just written and compare it with the source. */
static int read_back(const char *tmp, const char *src_path, const uint8_t *p, uint64_t size,
                     const uint8_t sha[32], int jobs)
{
    char err[512];
    ckp_reader *r;
    if (ckp_open(tmp, &r, err, sizeof err) != CKP_OK) {
        fprintf(stderr, "ckptfs pack: read-back failed: %s\n", err);
        return -1;
    }
    int rc = compare_with_source(r, src_path, p, size, sha, jobs);
    ckp_close(r);
    return rc;
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

static void join_path(char *out, size_t cap, const char *a, const char *b, const char *suffix)
{
    snprintf(out, cap, "%s/%s%s", a, b, suffix);
}

/* The temporary name of a packed file: ".<base>.ckpt.tmp" beside it, or
 * where that is over NAME_MAX, ".ckptfs-<hash of base>.ckpt.tmp". */
static void tmp_path(char *out, size_t cap, const char *dst, const char *rel)
{
    const char *slash = strrchr(rel, '/'), *base = slash ? slash + 1 : rel;
    int dir_len = slash ? (int)(slash - rel) : 0;
    char name[NAME_MAX + 1];
    if (1 + strlen(base) + strlen(TMP_SUFFIX) <= NAME_MAX)
        snprintf(name, sizeof name, ".%s" TMP_SUFFIX, base);
    else
        snprintf(name, sizeof name, ".ckptfs-%016llx" TMP_SUFFIX,
                 (unsigned long long)ckc_hash64(base, strlen(base)));
    snprintf(out, cap, "%s/%.*s%s%s", dst, dir_len, rel, slash ? "/" : "", name);
}

/* Delete the source file that was read (identity `read`: device, inode,
 * size, mtime); if the name now holds another file, or this one changed,
 * keep it and say so. */
static int delete_source(pack_ctx *c, const char *src_path, const struct stat *read)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", src_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    cku_fault_point();
    struct stat now;
    if (stat(src_path, &now) == 0 && !cks_same_file(&now, read)) {
        fprintf(stderr,
                "ckptfs pack: %s: not deleted: it was replaced or changed while it was being packed "
                "(its packed copy holds what was read); run the same command again to pack it\n",
                src_path);
        return -1;
    }
    if (unlink(src_path) || cku_fsync_dir(slash ? dir : ".")) {
        fprintf(stderr, "ckptfs pack: %s: cannot delete source: %s\n", src_path, strerror(errno));
        return -1;
    }
    atomic_fetch_add(&c->deleted, 1);
    atomic_fetch_add(&c->deleted_bytes, (uint64_t)read->st_size);
    return 0;
}

/* Pack one file; on success the packed file is durable and verified. */
static int pack_file(pack_ctx *c, const src_entry *e)
{
    char src_path[PATH_MAX], final[PATH_MAX], tmp[PATH_MAX];
    join_path(src_path, sizeof src_path, c->src_root, e->rel, "");
    join_path(final, sizeof final, c->dst, e->rel, CKP_SUFFIX);
    tmp_path(tmp, sizeof tmp, c->dst, e->rel);
    int tfd = -1, rc = -1;
    cks_map sm;
    st_header *h = NULL;
    ckp_writer *w = NULL;
    sha_job sj = {0};
    pthread_t sha_th;
    int sha_started = 0;
    if (cks_map_open(src_path, &sm)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", src_path, strerror(errno));
        goto out;
    }
    const uint8_t *p = sm.p;
    uint64_t size = sm.size;
    if (!cks_same_file(&sm.st, &e->st)) {
        fprintf(stderr, "ckptfs pack: %s: changed since the start of this run; run the same command again\n",
                src_path);
        goto out;
    }
    int is_st = has_suffix(e->rel, ".safetensors");
    if (is_st && !(h = check_safetensors(src_path, p, size)))
        goto out;
    sj.p = p;
    sj.size = size;
    sha_started = pthread_create(&sha_th, NULL, sha_thread, &sj) == 0;
    if (!sha_started)
        sha_thread(&sj);
    tfd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cku_fault_point(); /* a kill test's step: the temporary exists, the source is being read */
    if (tfd >= 0 && fchmod(tfd, (e->st.st_mode & 0777) | 0400)) { /* the source's mode, whatever the umask */
        fprintf(stderr, "ckptfs pack: %s: %s\n", tmp, strerror(errno));
        goto out;
    }
    ckp_writer_opts wo = {.path = e->rel, .kind = is_st ? CKP_KIND_SAFETENSORS : CKP_KIND_BLOB,
                          .mode = e->st.st_mode & 07777, .mtime_ns = mtime_ns(&e->st), .jobs = c->jobs_each};
    if (tfd < 0 || ckp_writer_new(tfd, &wo, &w) != CKP_OK) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", tmp, tfd < 0 ? strerror(errno) : "cannot start writer");
        goto out;
    }
    if (write_extents(c, w, tmp, p, size, h))
        goto out;
    if (sha_started)
        pthread_join(sha_th, NULL);
    sha_started = 0;
    if (ckp_writer_finish(w, sj.sha) != CKP_OK) {
        int err = errno;
        write_failed(c, tmp, *ckp_writer_error(w) ? ckp_writer_error(w) : strerror(err), err);
        goto out;
    }
    /* fsync and read back at once; the rename waits for both */
    sync_job sy = {.fd = tfd};
    pthread_t sync_th;
    int sync_started = pthread_create(&sync_th, NULL, sync_thread, &sy) == 0;
    if (!sync_started)
        sync_thread(&sy);
    struct stat now;
    int changed = fstat(sm.fd, &now) || !cks_same_file(&now, &e->st) || cks_map_truncated(&sm);
    int bad = changed || read_back(tmp, src_path, p, size, sj.sha, c->jobs_each);
    if (sync_started)
        pthread_join(sync_th, NULL);
    if (changed)
        fprintf(stderr, "ckptfs pack: %s: source changed while it was being packed\n", src_path);
    if (sy.err)
        write_failed(c, tmp, strerror(sy.err), sy.err);
    if (bad || sy.err)
        goto out;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", final);
    *strrchr(dir, '/') = 0;
    cku_fault_point();
    if (rename(tmp, final) || cku_fsync_dir(dir)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", final, strerror(errno));
        goto out;
    }
    rc = 0;
    if (c->o->delete_source)
        rc = delete_source(c, src_path, &e->st);
out:
    if (sha_started)
        pthread_join(sha_th, NULL);
    if (rc && tfd >= 0)
        unlink(tmp);
    if (tfd >= 0)
        close(tfd);
    ckp_writer_free(w);
    st_free(h);
    cks_map_close(&sm);
    return rc;
}

/* Is the packed file for e already complete and made from this source? */
static int already_packed(pack_ctx *c, const src_entry *e)
{
    char final[PATH_MAX], err[512];
    join_path(final, sizeof final, c->dst, e->rel, CKP_SUFFIX);
    ckp_reader *r;
    if (access(final, F_OK) || ckp_open(final, &r, err, sizeof err) != CKP_OK)
        return 0;
    const ckp_info *in = ckp_get_info(r);
    int same = in->original_size == (uint64_t)e->st.st_size && in->mtime_ns == mtime_ns(&e->st) &&
               !strcmp(in->path, e->rel);
    if (!same || !c->o->delete_source) {
        ckp_close(r);
        return same;
    }
    /* About to delete: the source must hash to what the packed copy records,
     * and the packed copy must read back equal to it now (it may have been
     * damaged since the run that wrote it; then it is packed again). */
    int equal = 0;
    cks_map sm;
    sha_job sj = {0};
    char src_path[PATH_MAX];
    join_path(src_path, sizeof src_path, c->src_root, e->rel, "");
    if (cks_map_open(src_path, &sm) == 0 && cks_same_file(&sm.st, &e->st)) {
        sj.p = sm.p;
        sj.size = sm.size;
        sha_thread(&sj);
        equal = compare_with_source(r, src_path, sm.p, sm.size, sj.sha, c->jobs_each) == 0 &&
                !cks_map_truncated(&sm);
    }
    cks_map_close(&sm);
    ckp_close(r);
    return equal && delete_source(c, src_path, &e->st) == 0 ? 2 : 0;
}

/* ---- files in parallel ---------------------------------------------------- */

/* SHA-256 of a file is one sequential stream (~1.3-2 GB/s a core), so with
 * many cores one file at a time would leave most of them idle: up to
 * CKPT_MAX_FILES_AT_ONCE files are packed at once, each with jobs / files
 * encoder threads. */

typedef struct {
    pack_ctx *c;
    atomic_size_t next;    /* next entry of c->list to look at */
    atomic_int failed;     /* a file failed: take no new ones */
} file_pool;

static void *file_worker(void *arg)
{
    file_pool *fp = arg;
    pack_ctx *c = fp->c;
    for (;;) {
        size_t i = atomic_fetch_add(&fp->next, 1);
        if (i >= c->list.n || atomic_load(&fp->failed))
            break;
        const src_entry *e = &c->list.v[i];
        if (e->is_dir)
            continue;
        if (already_packed(c, e)) {
            cku_progress_skip(c->progress, (uint64_t)e->st.st_size);
            atomic_fetch_add(&c->kept, 1);
        }
        else if (pack_file(c, e))
            atomic_store(&fp->failed, 1);
        if (!atomic_load(&fp->failed))
            atomic_fetch_sub(&c->left, (uint64_t)e->st.st_size);
    }
    return NULL;
}

static int pack_files(pack_ctx *c, size_t n_files)
{
    int jobs = c->o->jobs < 1 ? 1 : c->o->jobs;
    int at_once = (jobs + 1) / 2;  /* at least two threads per file where there are cores for it */
    if (at_once > CKPT_MAX_FILES_AT_ONCE)
        at_once = CKPT_MAX_FILES_AT_ONCE;
    if ((size_t)at_once > n_files)
        at_once = n_files ? (int)n_files : 1;
    c->jobs_each = jobs / at_once > 0 ? jobs / at_once : 1;
    file_pool fp = {.c = c};
    atomic_init(&fp.next, 0);
    atomic_init(&fp.failed, 0);
    cku_run_threads(at_once, file_worker, &fp);
    return atomic_load(&fp.failed) ? -1 : 0;
}

/* ---- DST state ----------------------------------------------------------- */

/* DST/ckptfs.state says what DST is being made from, so that rerunning the
 * command resumes, from wherever the source now is:
 *   "source"   SRC's absolute path when the last run started;
 *   "format"   k15 or bytesplit;
 *   "deletes"  true once a --delete-source run started: DST may then hold
 *              the only copy of a file, and --force must not drop it;
 *   "files"    the files DST is to hold, sorted by path: {"path", "size",
 *              "mtime_ns" (a string)}: the source's, and those whose source
 *              is gone but whose packed file DST holds.
 * A rerun resumes if SRC is the recorded path, or (a moved source) if SRC's
 * files are all recorded with the same size and mtime and every recorded
 * file missing from SRC is held by DST. */

static const char *enc_name(uint32_t enc) { return enc == CKC_ENC_K15 ? "k15" : "bytesplit"; }

static cJSON *read_state(pack_ctx *c)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", c->dst, STATE_NAME);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    char *buf = NULL;
    cJSON *o = NULL;
    if (fd >= 0 && !fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size < (256 << 20) &&
        (buf = malloc((size_t)st.st_size + 1)) && !cku_pread_full(fd, buf, (size_t)st.st_size, 0)) {
        buf[st.st_size] = 0;
        o = cJSON_Parse(buf);
    }
    free(buf);
    if (fd >= 0)
        close(fd);
    return o;
}

static int held_by_dst(pack_ctx *c, const char *rel)
{
    char p[PATH_MAX];
    join_path(p, sizeof p, c->dst, rel, CKP_SUFFIX);
    return access(p, F_OK) == 0;
}

static cJSON *file_item(const char *rel, uint64_t size, int64_t mtime)
{
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)mtime);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", rel);
    cJSON_AddNumberToObject(f, "size", (double)size);
    cJSON_AddStringToObject(f, "mtime_ns", t);
    return f;
}

/* Walk the recorded files (rec: the state's "files", sorted; may be NULL)
 * and SRC's together.  @return 1 if every source file is recorded with the
 * same size and mtime and every recorded file missing from SRC is held by
 * DST, else 0 with the first difference in why.  With out, append to it the
 * files DST is to hold now (see above), in order. */
static int walk_recorded(pack_ctx *c, const cJSON *rec, cJSON *out, char *why, size_t cap)
{
    const cJSON *r = rec ? rec->child : NULL;
    size_t i = 0;
    int same = rec != NULL;
    if (!rec)
        snprintf(why, cap, "its state lists no files");
    while (r || i < c->list.n) {
        const src_entry *e = i < c->list.n ? &c->list.v[i] : NULL;
        if (e && e->is_dir) {
            i++;
            continue;
        }
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(r, "path");
        const char *rrel = cJSON_IsString(rp) ? rp->valuestring : NULL;
        int d = !r ? 1 : !e ? -1 : !rrel ? -1 : strcmp(rrel, e->rel);
        if (d < 0) { /* recorded, gone from SRC */
            int held = rrel && held_by_dst(c, rrel);
            if (!held && same)
                snprintf(why, cap, "%s is neither in the source nor packed", rrel ? rrel : "an entry");
            same &= held;
            if (held && out)
                cJSON_AddItemToArray(out, cJSON_Duplicate(r, 1));
            r = r->next;
            continue;
        }
        if (d > 0 && same)
            snprintf(why, cap, "%s is not one of its files", e->rel);
        if (d == 0) {
            const cJSON *sz = cJSON_GetObjectItemCaseSensitive(r, "size");
            const cJSON *mt = cJSON_GetObjectItemCaseSensitive(r, "mtime_ns");
            int eq = cJSON_IsNumber(sz) && sz->valuedouble == (double)e->st.st_size && cJSON_IsString(mt) &&
                     strtoll(mt->valuestring, NULL, 10) == mtime_ns(&e->st);
            if (!eq && same)
                snprintf(why, cap, "%s differs in size or time from the file it holds", e->rel);
            same &= eq;
            r = r->next;
        }
        if (d > 0)
            same = 0;
        if (out)
            cJSON_AddItemToArray(out, file_item(e->rel, (uint64_t)e->st.st_size, mtime_ns(&e->st)));
        i++;
    }
    return same;
}

/* Write DST/ckptfs.state for this run; old: the state found (or NULL). */
static int write_state(pack_ctx *c, const char *src_real, const cJSON *old)
{
    char path[PATH_MAX], tmp[PATH_MAX], why[64];
    snprintf(path, sizeof path, "%s/%s", c->dst, STATE_NAME);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", c->dst, STATE_NAME);
    cJSON *o = cJSON_CreateObject(), *files = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "source", src_real);
    cJSON_AddStringToObject(o, "format", enc_name(c->o->encoding));
    cJSON_AddBoolToObject(o, "deletes",
                          c->o->delete_source || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(old, "deletes")));
    walk_recorded(c, cJSON_GetObjectItemCaseSensitive(old, "files"), files, why, sizeof why);
    cJSON_AddItemToObject(o, "files", files);
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), rc = -1;
    if (txt && fd >= 0 && !cku_pwrite_full(fd, txt, strlen(txt), 0) && (cku_fault_point(), !fsync(fd)) &&
        (cku_fault_point(), !rename(tmp, path)) && !cku_fsync_dir(c->dst))
        rc = 0;
    if (rc)
        fprintf(stderr, "ckptfs pack: %s: %s\n", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(txt);
    return rc;
}

/* 1 if the state st says DST is a pack of this source in this format (see
 * above), else 0 with why. */
static int state_matches(pack_ctx *c, const cJSON *st, const char *src_real, char *why, size_t cap)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(st, "source");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(st, "format");
    snprintf(why, cap, "it holds a pack of %s (%s)", cJSON_IsString(s) ? s->valuestring : "?",
             cJSON_IsString(f) ? f->valuestring : "?");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, enc_name(c->o->encoding)))
        return 0;
    if (cJSON_IsString(s) && !strcmp(s->valuestring, src_real) && !c->src_missing)
        return 1;
    size_t n = strlen(why);
    snprintf(why + n, cap - n, " and ");
    return walk_recorded(c, cJSON_GetObjectItemCaseSensitive(st, "files"), NULL, why + n + 5, cap - n - 5);
}

/* Remove what a packed directory holds (for --force): .ckpt files, the
 * manifest, the state, temporaries, and directories left empty. */
static int clear_dst(const char *dir, int top)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (clear_dst(p, 0) == 0)
                rmdir(p);
        } else if (has_suffix(e->d_name, CKP_SUFFIX) || has_suffix(e->d_name, TMP_SUFFIX) ||
                   (top && (!strcmp(e->d_name, CKP_MANIFEST_NAME) || !strcmp(e->d_name, STATE_NAME)))) {
            if (unlink(p))
                rc = -1;
        } else {
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

/* Empty, or holding only the temporary of a first write_state that was
 * interrupted (a kill right after DST was created must not block the rerun). */
static int dir_is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "." STATE_NAME ".tmp"))
            empty = 0;
    closedir(d);
    return empty;
}

static int force_loses_nothing(pack_ctx *c, const cJSON *st);

/* Make DST (created and locked by open_dst) ready: new, resumable, or
 * (with --force) cleared. */
static int prepare_dst(pack_ctx *c, const char *src_real)
{
    if (dir_is_empty(c->dst) && !c->src_missing)
        return write_state(c, src_real, NULL);
    cJSON *st = read_state(c);
    char why[PATH_MAX + 256];
    int m = st ? state_matches(c, st, src_real, why, sizeof why) : -1, rc = -1;
    if (m == 1) { /* resume, recording where the source is now */
        rc = write_state(c, src_real, st);
        goto out;
    }
    if (c->src_missing) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->src, strerror(ENOENT));
        goto out;
    }
    char man[PATH_MAX];
    snprintf(man, sizeof man, "%s/%s", c->dst, CKP_MANIFEST_NAME);
    int is_pack = m == 0 || access(man, F_OK) == 0;
    if (!is_pack) { /* --force or not: never clear what ckptfs did not write */
        fprintf(stderr,
                "ckptfs pack: %s: exists, is not empty and is not a packed directory; pack into a new or empty\n"
                "  directory (--force only replaces an earlier pack)\n",
                c->dst);
        goto out;
    }
    if (!c->o->force) {
        fprintf(stderr, "ckptfs pack: %s: already exists and %s; use --force to replace it\n", c->dst,
                m == 0 ? why : "holds a finished pack");
        goto out;
    }
    if (force_loses_nothing(c, st))
        goto out;
    if (clear_dst(c->dst, 1)) {
        fprintf(stderr,
                "ckptfs pack: %s: refusing to overwrite: it holds files that ckptfs did not write (kept; the\n"
                "  packed files of the earlier pack were removed); move them away, or pack into a new directory\n",
                c->dst);
        goto out;
    }
    rc = write_state(c, src_real, NULL);
out:
    cJSON_Delete(st);
    return rc;
}

/* ---- manifest from the packed files ----------------------------------- */

typedef struct {
    ckm_manifest m;
    size_t cap_files, cap_dirs;
    uint64_t packed;     /* bytes of the packed files */
} mf_build;

static int scan_dst(const char *root, const char *rel, mf_build *b)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char r[PATH_MAX], full[PATH_MAX], err[512];
        snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, r);
        struct stat st;
        if (lstat(full, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (b->m.n_dirs == b->cap_dirs) {
                b->cap_dirs = b->cap_dirs ? 2 * b->cap_dirs : 16;
                b->m.dirs = realloc(b->m.dirs, b->cap_dirs * sizeof *b->m.dirs);
            }
            b->m.dirs[b->m.n_dirs].path = strdup(r);
            b->m.dirs[b->m.n_dirs++].mode = st.st_mode & 07777;
            rc = scan_dst(root, r, b);
        } else if (S_ISREG(st.st_mode) && has_suffix(e->d_name, CKP_SUFFIX)) {
            ckp_reader *rd;
            if (ckp_open(full, &rd, err, sizeof err) != CKP_OK) {
                fprintf(stderr, "ckptfs pack: %s\n", err);
                rc = -1;
                break;
            }
            const ckp_info *in = ckp_get_info(rd);
            r[strlen(r) - strlen(CKP_SUFFIX)] = 0;
            if (strcmp(in->path, r)) {
                fprintf(stderr, "ckptfs pack: %s: records path \"%s\", expected \"%s\"\n", full, in->path, r);
                rc = -1;
            }
            if (b->m.n_files == b->cap_files) {
                b->cap_files = b->cap_files ? 2 * b->cap_files : 64;
                b->m.files = realloc(b->m.files, b->cap_files * sizeof *b->m.files);
            }
            ckm_file *f = &b->m.files[b->m.n_files++];
            f->path = strdup(r);
            f->size = in->original_size;
            memcpy(f->sha256, in->sha256, 32);
            f->mode = in->mode;
            f->mtime_ns = in->mtime_ns;
            f->kind = in->kind;
            b->packed += in->packed_size;
            ckp_close(rd);
        }
    }
    closedir(d);
    return rc;
}

static void mf_free(mf_build *b)
{
    for (size_t i = 0; i < b->m.n_files; i++)
        free(b->m.files[i].path);
    for (size_t i = 0; i < b->m.n_dirs; i++)
        free(b->m.dirs[i].path);
    free(b->m.files);
    free(b->m.dirs);
}

static int write_manifest(pack_ctx *c)
{
    mf_build b = {0};
    char err[512];
    int rc = scan_dst(c->dst, "", &b);
    if (rc == 0 && ckm_write(c->dst, &b.m, err, sizeof err)) {
        fprintf(stderr, "ckptfs pack: %s\n", err);
        rc = -1;
    }
    char man[PATH_MAX];
    struct stat st;
    snprintf(man, sizeof man, "%s/%s", c->dst, CKP_MANIFEST_NAME);
    c->packed_bytes = b.packed + (stat(man, &st) ? 0 : (uint64_t)st.st_size);
    mf_free(&b);
    return rc;
}

/* For --force over the pack described by state st: 0 if clearing DST loses
 * no file, -1 after saying which one it would lose.  DST can hold the only
 * copy of a file once a --delete-source run started on it (or when it has no
 * state to say otherwise); each packed file must then have its original in
 * SRC: the same path, size and SHA-256. */
static int force_loses_nothing(pack_ctx *c, const cJSON *st)
{
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(st, "deletes");
    if (cJSON_IsFalse(del))
        return 0;
    mf_build b = {0};
    int rc = scan_dst(c->dst, "", &b);
    for (size_t i = 0; rc == 0 && i < b.m.n_files; i++) {
        const ckm_file *f = &b.m.files[i];
        src_entry key = {.rel = f->path};
        const src_entry *e = c->list.n ? bsearch(&key, c->list.v, c->list.n, sizeof key, cmp_entry) : NULL;
        char src_path[PATH_MAX];
        join_path(src_path, sizeof src_path, c->src_root, f->path, "");
        cks_map sm;
        sha_job sj = {0};
        if (e && !e->is_dir && (uint64_t)e->st.st_size == f->size && cks_map_open(src_path, &sm) == 0) {
            sj.p = sm.p;
            sj.size = sm.size;
            sha_thread(&sj);
            if (cks_map_truncated(&sm))
                sj.sha[0] ^= 1;
            cks_map_close(&sm);
        }
        if (!e || memcmp(sj.sha, f->sha256, 32) || sj.size != f->size) {
            fprintf(stderr,
                    "ckptfs pack: %s: --force refused: %s/%s%s may hold the only copy of %s (a --delete-source "
                    "run deleted sources); unpack it first or remove it yourself\n",
                    c->dst, c->dst, f->path, CKP_SUFFIX, f->path);
            rc = -1;
        }
    }
    if (rc && !b.m.n_files)
        fprintf(stderr, "ckptfs pack: %s: --force refused: cannot read what it holds\n", c->dst);
    mf_free(&b);
    return rc;
}

/* Remove temporaries left by an interrupted run. */
static void remove_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_type == DT_DIR && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            remove_temps(p);
        else if (has_suffix(e->d_name, TMP_SUFFIX) || !strcmp(e->d_name, "." CKP_MANIFEST_NAME ".tmp"))
            unlink(p);
    }
    closedir(d);
}

/* With --delete-source: remove source directories left empty, deepest
 * first.  @return how many were removed. */
static size_t remove_empty_dirs(pack_ctx *c)
{
    size_t n = 0;
    for (size_t i = c->list.n; i-- > 0;)
        if (c->list.v[i].is_dir) {
            char p[PATH_MAX];
            join_path(p, sizeof p, c->src_root, c->list.v[i].rel, "");
            cku_fault_point();
            n += rmdir(p) == 0;
        }
    return n;
}

/* The final summary (stdout): files, bytes in -> out, saved, time, rate;
 * files kept from an earlier run; what --delete-source removed. */
static void print_summary(pack_ctx *c, size_t n_files, uint64_t total, double secs, uint64_t worked,
                          size_t dirs_removed)
{
    char in[16], out[16], rate[24], del[16];
    printf("packed %zu files: %s -> %s (%.1f%% saved) in %.1f s", n_files, cku_human(total, in),
           cku_human(c->packed_bytes, out), total ? 100.0 * (1.0 - (double)c->packed_bytes / (double)total) : 0.0,
           secs);
    if (worked) /* the rate of the work done in this run only */
        printf(", %s", cku_human_rate(worked, secs, rate));
    uint64_t kept = atomic_load(&c->kept);
    if (kept)
        printf(" (%llu files already packed by an earlier run, kept)", (unsigned long long)kept);
    printf("\n");
    if (c->o->delete_source)
        printf("deleted %llu source files (%s) and %zu empty source directories\n",
               (unsigned long long)atomic_load(&c->deleted), cku_human(atomic_load(&c->deleted_bytes), del),
               dirs_removed);
}

static int validate_all(pack_ctx *c, uint64_t *total)
{
    *total = 0;
    for (size_t i = 0; i < c->list.n; i++) {
        const src_entry *e = &c->list.v[i];
        if (e->is_dir)
            continue;
        *total += (uint64_t)e->st.st_size;
        if (!has_suffix(e->rel, ".safetensors"))
            continue;
        char path[PATH_MAX];
        join_path(path, sizeof path, c->src_root, e->rel, "");
        cks_map sm;
        if (cks_map_open(path, &sm)) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", path, strerror(errno));
            return -1;
        }
        st_header *h = check_safetensors(path, sm.p, sm.size);
        cks_map_close(&sm);
        if (!h)
            return -1;
        st_free(h);
    }
    return 0;
}

/* The absolute, symlink-free form of path, which may not exist: components
 * resolved while they exist, the missing rest appended with "." and ".."
 * applied lexically (as mkdir -p would apply them).  @return 0, or -1 with
 * errno. */
static int resolve_path(const char *path, char *out)
{
    char abs[PATH_MAX], cwd[PATH_MAX], next[PATH_MAX], *save = NULL;
    if (*path == '/')
        snprintf(abs, sizeof abs, "%s", path);
    else if (getcwd(cwd, sizeof cwd))
        snprintf(abs, sizeof abs, "%s/%s", cwd, path);
    else
        return -1;
    strcpy(out, "/");
    int missing = 0; /* components at the end of out that do not exist */
    for (char *comp = strtok_r(abs, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
        if (!strcmp(comp, "."))
            continue;
        if (!strcmp(comp, "..")) { /* out is resolved: its lexical parent is its real one */
            char *slash = strrchr(out, '/');
            slash[slash == out] = 0;
            missing -= missing > 0;
            continue;
        }
        if (strlen(out) + strlen(comp) + 2 > sizeof next) {
            errno = ENAMETOOLONG;
            return -1;
        }
        snprintf(next, sizeof next, "%s%s%s", out, out[1] ? "/" : "", comp);
        char real[PATH_MAX];
        if (!missing && realpath(next, real)) {
            strcpy(out, real);
            continue;
        }
        if (!missing && errno != ENOENT)
            return -1;
        missing++;
        strcpy(out, next);
    }
    return 0;
}

static int setup_source(pack_ctx *c, char *src_real)
{
    const ckpt_pack_opts *o = c->o;
    struct stat st;
    if (resolve_path(o->src, src_real) || stat(src_real, &st)) {
        if (errno != ENOENT || !*src_real) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", o->src, strerror(errno));
            return -1;
        }
        c->src_missing = 1; /* acceptable only if DST's state says it packed all of it: see prepare_dst */
        snprintf(c->src_root, sizeof c->src_root, "%s", src_real);
        return 0;
    }
    if (S_ISREG(st.st_mode)) {
        c->single_file = 1;
        snprintf(c->src_root, sizeof c->src_root, "%s", src_real);
        char *slash = strrchr(c->src_root, '/');
        *slash = 0;
        if (!*c->src_root)
            strcpy(c->src_root, "/");
        return list_add(&c->list, slash + 1, 0, &st);
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ckptfs pack: %s: not a directory or a regular file\n", o->src);
        return -1;
    }
    snprintf(c->src_root, sizeof c->src_root, "%s", src_real);
    return walk(c, "");
}

/* 1 if DST is SRC or inside it (unless SRC is one file), or SRC is inside DST. */
static int overlap(const char *src_real, const char *dst_real, int single_file)
{
    size_t ls = strlen(src_real), ld = strlen(dst_real);
    int dst_in_src = !strncmp(dst_real, src_real, ls) && (dst_real[ls] == '/' || !dst_real[ls] || ls == 1);
    int src_in_dst = !strncmp(src_real, dst_real, ld) && (src_real[ld] == '/' || !src_real[ld] || ld == 1);
    return (!single_file && dst_in_src) || src_in_dst;
}

/* Names DST keeps for itself at its top. */
static int reserved_name(const char *rel)
{
    static const char *const names[] = {CKP_MANIFEST_NAME, "." CKP_MANIFEST_NAME ".tmp", STATE_NAME,
                                        "." STATE_NAME ".tmp"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(rel, names[i]))
            return 1;
    return 0;
}

/* 1 if the list holds a directory named rel. */
static int list_has_dir(const pack_ctx *c, const char *rel)
{
    src_entry key = {.rel = (char *)rel};
    const src_entry *e = c->list.n ? bsearch(&key, c->list.v, c->list.n, sizeof key, cmp_entry) : NULL;
    return e && e->is_dir;
}

/* Every name checked before anything is written or deleted: each must be
 * storable (a valid relative path within the format's limits, a packed name
 * within NAME_MAX), not reserved, and not collide in DST with another
 * entry's packed or temporary name.  @return 0, or -1 after naming it. */
static int check_names(const pack_ctx *c)
{
    for (size_t i = 0; i < c->list.n; i++) {
        const src_entry *e = &c->list.v[i];
        const char *base = strrchr(e->rel, '/') ? strrchr(e->rel, '/') + 1 : e->rel;
        char packed[PATH_MAX], tmp[PATH_MAX];
        snprintf(packed, sizeof packed, "%s%s", e->rel, CKP_SUFFIX);
        tmp_path(tmp, sizeof tmp, "", e->rel);
        const char *why = NULL;
        if (!ckp_path_ok(e->rel) || strlen(e->rel) > CKP_MAX_PATH)
            why = "this path cannot be stored in a pack";
        else if (!e->is_dir && strlen(base) + strlen(CKP_SUFFIX) > NAME_MAX)
            why = "name too long: the packed file's name (with " CKP_SUFFIX ") would be over 255 bytes";
        else if (base == e->rel && reserved_name(e->rel))
            why = "this name is reserved for ckptfs";
        else if (!e->is_dir && (list_has_dir(c, packed) || list_has_dir(c, tmp + 1)))
            why = "its packed name is also the name of a directory in the source";
        if (why) {
            fprintf(stderr, "ckptfs pack: %s/%s: %s; nothing was packed\n", c->src_root, e->rel, why);
            return -1;
        }
    }
    return 0;
}

/* The mode of a new DST: no more open than the source (for a single file,
 * a directory readable by whoever can read the file). */
static mode_t dst_mode(const pack_ctx *c)
{
    struct stat st;
    mode_t m = c->single_file ? c->list.v[0].st.st_mode : stat(c->src_root, &st) ? 0700 : st.st_mode;
    if (c->single_file)
        m = (m & 0044) | (m & 0044) >> 2;
    return (m & 0777) | 0700;
}

/* Create DST if needed (*created = 1) and lock it for this run: a second
 * pack into the same DST fails here instead of mixing its files in. */
static int open_dst(pack_ctx *c, int *created)
{
    struct stat st;
    *created = 0;
    if (stat(c->dst, &st)) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", c->dst);
        *strrchr(parent, '/') = 0;
        if (errno != ENOENT || c->src_missing || (*parent && cku_mkdirs(parent, 0755)) ||
            (mkdir(c->dst, 0700) && errno != EEXIST)) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->dst, strerror(c->src_missing ? ENOENT : errno));
            return -1;
        }
        *created = 1;
    }
    c->lock_fd = open(c->dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->lock_fd < 0) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->dst, errno == ENOTDIR ? "exists and is not a directory" : strerror(errno));
        return -1;
    }
    if (flock(c->lock_fd, LOCK_EX | LOCK_NB)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->dst,
                errno == EWOULDBLOCK ? "another ckptfs pack is writing to it; wait for it to finish" : strerror(errno));
        close(c->lock_fd);
        c->lock_fd = -1;
        *created = 0;
        return -1;
    }
    if (*created && fchmod(c->lock_fd, dst_mode(c))) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->dst, strerror(errno));
        return -1;
    }
    return 0;
}

/* After a failure: remove DST if this run created it and nothing is in it
 * but the state, else say that what was packed is kept for a rerun. */
static void leave_dst(pack_ctx *c, int created)
{
    DIR *d = opendir(c->dst);
    struct dirent *e;
    int only_state = 1;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, STATE_NAME) &&
            strcmp(e->d_name, "." STATE_NAME ".tmp"))
            only_state = 0;
    if (d)
        closedir(d);
    if (created && only_state) {
        char state[PATH_MAX];
        snprintf(state, sizeof state, "%s/%s", c->dst, STATE_NAME);
        unlink(state);
        rmdir(c->dst);
    } else if (!only_state) {
        fprintf(stderr, "ckptfs pack: %s: kept what was packed so far; run the same command again to resume\n",
                c->o->dst);
    }
}

int ckpt_pack(const ckpt_pack_opts *o)
{
    pack_ctx c = {.o = o, .lock_fd = -1};
    char src_real[PATH_MAX];
    int rc = 1, created = 0;
    if (setup_source(&c, src_real))
        goto out;
    if (resolve_path(o->dst, c.dst)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", o->dst, strerror(errno));
        goto out;
    }
    if (overlap(src_real, c.dst, c.single_file)) { /* the walk would pack DST, or --force clear SRC */
        fprintf(stderr, "ckptfs pack: %s and %s overlap\n", o->src, o->dst);
        goto out;
    }
    if (c.list.n) /* an emptied SRC (rerun after --delete-source) has no list: qsort(NULL) is UB */
        qsort(c.list.v, c.list.n, sizeof *c.list.v, cmp_entry);
    uint64_t total;
    if (check_names(&c) || validate_all(&c, &total))
        goto out;
    atomic_init(&c.left, total);
    atomic_init(&c.kept, 0);
    atomic_init(&c.deleted, 0);
    atomic_init(&c.deleted_bytes, 0);
    if (open_dst(&c, &created) || prepare_dst(&c, src_real))
        goto out;
    remove_temps(c.dst);
    c.progress = cku_progress_new("packing", total);
    size_t n_files = 0;
    for (size_t i = 0; i < c.list.n; i++) { /* directories first (a parent sorts before its children) */
        const src_entry *e = &c.list.v[i];
        char path[PATH_MAX];
        join_path(path, sizeof path, c.dst, e->rel, "");
        n_files += !e->is_dir;
        if (e->is_dir && mkdir(path, (e->st.st_mode & 07777) | 0700) && errno != EEXIST) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", path, strerror(errno));
            goto out;
        }
    }
    if (pack_files(&c, n_files))
        goto out;
    if (write_manifest(&c))
        goto out;
    size_t dirs_removed = o->delete_source && !c.single_file ? remove_empty_dirs(&c) : 0;
    double secs = cku_progress_seconds(c.progress);
    uint64_t worked = cku_progress_worked(c.progress);
    cku_progress_done(c.progress);
    c.progress = NULL;
    print_summary(&c, n_files, total, secs, worked, dirs_removed);
    rc = 0;
out:
    cku_progress_done(c.progress);
    if (rc && c.lock_fd >= 0)
        leave_dst(&c, created);
    if (c.lock_fd >= 0)
        close(c.lock_fd);
    list_free(&c.list);
    return rc;
}
