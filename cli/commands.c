/*
 * commands.c — `ckptfs unpack`, `verify` and `stat`: read-only uses of the
 * container reader, without FUSE (the same reader the daemon uses).
 */
#define _GNU_SOURCE
#include "commands.h"
#include "container.h"
#include "manifest.h"
#include "safetensors.h"
#include "hashing.h"
#include "progress.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define IO_BLOCK (4u << 20)

/* Open DST/<rel>.ckpt and check it against its manifest entry; *why (if
 * given) gets the status of a failed open (CKP_ERR_VERSION: a newer format). */
static ckp_reader *open_member_why(const char *cmd, const char *dst, const ckm_file *f, ckp_status *why)
{
    char path[PATH_MAX], err[768];
    snprintf(path, sizeof path, "%s/%s%s", dst, f->path, CKP_SUFFIX);
    ckp_reader *r;
    ckp_status st = ckp_open(path, &r, err, sizeof err);
    if (why)
        *why = st == CKP_OK ? CKP_ERR_CORRUPT : st;
    if (st != CKP_OK) {
        fprintf(stderr, "ckptfs %s: %s\n", cmd, err);
        return NULL;
    }
    const ckp_info *in = ckp_get_info(r);
    if (in->original_size != f->size || memcmp(in->sha256, f->sha256, 32) || strcmp(in->path, f->path)) {
        fprintf(stderr, "ckptfs %s: %s: does not match its manifest entry\n", cmd, path);
        ckp_close(r);
        return NULL;
    }
    return r;
}

static ckp_reader *open_member(const char *cmd, const char *dst, const ckm_file *f)
{
    return open_member_why(cmd, dst, f, NULL);
}

static void describe_chunk(const ckp_reader *r, uint32_t e, uint64_t c, char *out, size_t cap)
{
    const ckp_extent *x = ckp_get_extent(r, e);
    uint64_t a = x->orig_offset + c * x->chunk_size;
    snprintf(out, cap, "%s, chunk %llu (original bytes %llu-%llu)",
             *x->name ? x->name : (e == 0 && ckp_get_info(r)->kind == CKP_KIND_SAFETENSORS ? "header" : "data"),
             (unsigned long long)c, (unsigned long long)a, (unsigned long long)(a + ckp_chunk_len(x, c) - 1));
}

/* Bytes of the packed files of m and its manifest (for the summaries). */
static uint64_t packed_size(const char *dst, const ckm_manifest *m)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dst, CKP_MANIFEST_NAME);
    uint64_t n = stat(path, &st) ? 0 : (uint64_t)st.st_size;
    for (size_t i = 0; i < m->n_files; i++) {
        snprintf(path, sizeof path, "%s/%s%s", dst, m->files[i].path, CKP_SUFFIX);
        n += stat(path, &st) ? 0 : (uint64_t)st.st_size;
    }
    return n;
}

/* ---- unpack --------------------------------------------------------------- */

#define BATCH_BYTES (8u << 20) /* decoded bytes per write and per hashing step */

/* Capacity of one batch buffer for the packed file r: BATCH_BYTES, or its
 * largest chunk if that is larger (chunks are decoded whole into a batch; the
 * format allows up to CKP_MAX_CHUNK, validated by ckp_open). */
static size_t batch_capacity(const ckp_reader *r)
{
    size_t cap = BATCH_BYTES;
    for (uint32_t e = 0; e < ckp_get_info(r)->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        uint64_t biggest = x->n_chunks > 1 ? x->chunk_size : x->orig_size; /* <= CKP_MAX_CHUNK */
        if (biggest > cap)
            cap = (size_t)biggest;
    }
    return cap;
}

/* Write a batch of decoded bytes at their place and hand it to the hasher.
 * @return 0, or -1 after saying why. */
static int unpack_flush(int fd, const char *tmp, cku_sha256_pipe *sha, const uint8_t *b, uint64_t used, uint64_t at)
{
    if (used && cku_pwrite_full(fd, b, used, at)) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    cku_sha256_pipe_submit(sha, used);
    return 0;
}

static int unpack_file(const char *dst, const char *out, const ckm_file *f, ckp_scratch *s)
{
    ckp_reader *r = open_member("unpack", dst, f);
    if (!r)
        return -1;
    /* written in place: out is the staging directory, renamed to OUT only
     * once every file is complete (ckpt_unpack) */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/%s", out, f->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600), rc = -1;
    /* decoded bytes go out in batches: written here while the previous batch
     * is hashed on the pipe's thread */
    size_t cap = batch_capacity(r);
    cku_sha256_pipe *sha = fd >= 0 ? cku_sha256_pipe_new(cap) : NULL;
    uint8_t d[32];
    if (fd < 0 || !sha) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", tmp, fd < 0 ? strerror(errno) : "out of memory");
        goto out;
    }
    const ckp_info *in = ckp_get_info(r);
    uint8_t *b = cku_sha256_pipe_buffer(sha);
    uint64_t used = 0, b_at = 0;
    for (uint32_t e = 0; e < in->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        for (uint64_t c = 0; c < x->n_chunks; c++) {
            uint64_t len = ckp_chunk_len(x, c), at = x->orig_offset + c * x->chunk_size;
            if (used && (used + len > cap || at != b_at + used)) {
                if (unpack_flush(fd, tmp, sha, b, used, b_at))
                    goto out;
                b = cku_sha256_pipe_buffer(sha);
                used = 0;
            }
            if (!used)
                b_at = at;
            ckp_status st = ckp_read_chunk(r, e, c, b + used, s);
            if (st != CKP_OK) {
                char where[512];
                describe_chunk(r, e, c, where, sizeof where);
                fprintf(stderr, "ckptfs unpack: %s%s: %s: %s; refusing to unpack damaged data\n", f->path,
                        CKP_SUFFIX, where, ckp_status_name(st));
                goto out;
            }
            used += len;
        }
    }
    if (unpack_flush(fd, tmp, sha, b, used, b_at))
        goto out;
    cku_sha256_pipe_final(sha, d);
    sha = NULL;
    if (memcmp(d, in->sha256, 32)) {
        fprintf(stderr, "ckptfs unpack: %s: SHA-256 of the decoded file differs from the recorded one\n", f->path);
        goto out;
    }
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT},
                             {.tv_sec = f->mtime_ns / 1000000000, .tv_nsec = f->mtime_ns % 1000000000}};
    if (ts[1].tv_nsec < 0) {
        ts[1].tv_sec -= 1;
        ts[1].tv_nsec += 1000000000;
    }
    if (fchmod(fd, f->mode) || futimens(fd, ts) || (cku_fault_point(), fsync(fd))) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", tmp, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (sha)
        cku_sha256_pipe_final(sha, d);
    if (fd >= 0)
        close(fd);
    if (rc)
        unlink(tmp);
    ckp_close(r);
    return rc;
}

/* rm -r p, never following a symbolic link. */
static void remove_tree(const char *p)
{
    struct stat st;
    DIR *d = lstat(p, &st) == 0 && S_ISDIR(st.st_mode) ? opendir(p) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char c[PATH_MAX];
            snprintf(c, sizeof c, "%s/%s", p, e->d_name);
            remove_tree(c);
        }
        closedir(d);
        rmdir(p);
    } else {
        unlink(p);
    }
}

/* Files unpacked or verified at once: each uses two threads (decode, and
 * its SHA-256). */
static int files_at_once(int jobs)
{
    return jobs / 2 < 1 ? 1 : jobs / 2 > CKPT_MAX_FILES_AT_ONCE ? CKPT_MAX_FILES_AT_ONCE : jobs / 2;
}

typedef struct {
    const char *dst, *out;
    const ckm_manifest *m;
    cku_progress *pr;
    atomic_size_t next;
    atomic_int failed;
} unpack_pool;

static void *unpack_worker(void *arg)
{
    unpack_pool *u = arg;
    ckp_scratch *s = ckp_scratch_new();
    if (!s)
        atomic_store(&u->failed, 1);
    while (!atomic_load(&u->failed)) {
        size_t i = atomic_fetch_add(&u->next, 1);
        if (i >= u->m->n_files)
            break;
        if (unpack_file(u->dst, u->out, &u->m->files[i], s))
            atomic_store(&u->failed, 1);
        else
            cku_progress_add(u->pr, u->m->files[i].size);
    }
    ckp_scratch_free(s);
    return NULL;
}

/* Make the staging directory OUT.ckptfs-partial, where unpack writes before
 * renaming it to OUT, and lock it; one left by an interrupted unpack (not
 * locked: its process is gone) is removed first.  @return its locked
 * descriptor, or -1 after saying why. */
static int make_staging(const char *out, const char *stage)
{
    struct stat st;
    int there = lstat(out, &st) == 0;
    if (there || errno != ENOENT) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", out, there ? "already exists" : strerror(errno));
        return -1;
    }
    int fd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        if (flock(fd, LOCK_EX | LOCK_NB)) {
            fprintf(stderr, "ckptfs unpack: %s: another ckptfs unpack is writing it\n", stage);
            close(fd);
            return -1;
        }
        fprintf(stderr, "ckptfs unpack: %s: removing what an interrupted unpack left; starting over\n", stage);
        remove_tree(stage);
        close(fd);
    }
    if (mkdir(stage, 0700) || (fd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
        flock(fd, LOCK_EX | LOCK_NB)) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", stage, strerror(errno));
        return -1;
    }
    return fd;
}

int ckpt_unpack(const char *dst, const char *out_arg, int jobs)
{
    char err[768], out[PATH_MAX], stage[PATH_MAX + 32];
    ckm_manifest *m;
    if (ckm_load(dst, &m, err, sizeof err)) {
        fprintf(stderr, "ckptfs unpack: %s\n", err);
        return 1;
    }
    snprintf(out, sizeof out, "%s", out_arg);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--)
        out[n - 1] = 0;
    snprintf(stage, sizeof stage, "%s.ckptfs-partial", out);
    int rc = 1, stage_fd = make_staging(out, stage);
    if (stage_fd < 0) {
        ckm_free(m);
        return 1;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < m->n_files; i++)
        total += m->files[i].size;
    cku_progress *pr = cku_progress_new("unpacking", total);
    for (size_t i = 0; i < m->n_dirs; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", stage, m->dirs[i].path);
        if (mkdir(p, m->dirs[i].mode | 0700)) {
            fprintf(stderr, "ckptfs unpack: %s: %s\n", p, strerror(errno));
            goto out;
        }
    }
    unpack_pool u = {.dst = dst, .out = stage, .m = m, .pr = pr};
    atomic_init(&u.next, 0);
    atomic_init(&u.failed, 0);
    cku_run_threads(files_at_once(jobs), unpack_worker, &u);
    if (atomic_load(&u.failed))
        goto out;
    for (size_t i = m->n_dirs; i-- > 0;) { /* modes after content: a 0555 dir must be filled first */
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", stage, m->dirs[i].path);
        chmod(p, m->dirs[i].mode);
    }
    /* OUT as open as the packed directory (pack made that no more open than
     * the source), then in place at once */
    struct stat dst_st;
    if (stat(dst, &dst_st) == 0)
        fchmod(stage_fd, dst_st.st_mode & 0777);
    cku_fault_point();
    if (cku_fsync_dir(stage) || (cku_fault_point(), renameat2(AT_FDCWD, stage, AT_FDCWD, out, RENAME_NOREPLACE))) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", out, errno == EEXIST ? "already exists" : strerror(errno));
        goto out;
    }
    double secs = cku_progress_seconds(pr);
    cku_progress_done(pr);
    pr = NULL;
    char in[16], ob[16], rate[24];
    printf("unpacked %zu files: %s -> %s in %.1f s, %s\n", m->n_files, cku_human(packed_size(dst, m), in),
           cku_human(total, ob), secs, cku_human_rate(total, secs, rate));
    rc = 0;
out:
    cku_progress_done(pr);
    if (rc)
        remove_tree(stage); /* no partial output */
    close(stage_fd);
    ckm_free(m);
    return rc;
}

/* ---- verify --------------------------------------------------------------- */

enum { VERIFY_OK = 0, VERIFY_DAMAGED = 1, VERIFY_DIFFERS = 2, VERIFY_NEWER = 3 };

/* Check every chunk of one packed file; with a source file (src_path), every
 * byte too.  Returns VERIFY_DAMAGED if the packed file fails a check (that
 * wins), VERIFY_DIFFERS if only the source is missing or differs,
 * VERIFY_NEWER if it is of a format version this ckptfs cannot read. */
static int verify_file(const char *dst, const char *src_path, const ckm_file *f, ckp_scratch *s,
                       uint8_t *src_buf)
{
    ckp_status why;
    ckp_reader *r = open_member_why("verify", dst, f, &why);
    if (!r)
        return why == CKP_ERR_VERSION ? VERIFY_NEWER : VERIFY_DAMAGED;
    int bad = 0, sfd = -1, differs = 0;
    if (src_path) {
        struct stat st;
        sfd = open(src_path, O_RDONLY | O_CLOEXEC);
        if (sfd < 0 || fstat(sfd, &st) || (uint64_t)st.st_size != f->size) {
            fprintf(stderr, "ckptfs verify: %s: %s\n", src_path,
                    sfd < 0 ? strerror(errno) : "size differs from the packed file's original");
            differs = 1;
        }
    }
    /* decoded batches are hashed on the pipe's thread while the next is decoded */
    size_t cap = batch_capacity(r);
    cku_sha256_pipe *sha = cku_sha256_pipe_new(cap);
    if (!sha) {
        fprintf(stderr, "ckptfs verify: out of memory\n");
        if (sfd >= 0)
            close(sfd);
        ckp_close(r);
        return VERIFY_DAMAGED;
    }
    const ckp_info *in = ckp_get_info(r);
    int chunks_ok = 1;
    uint8_t *b = cku_sha256_pipe_buffer(sha);
    uint64_t used = 0;
    for (uint32_t e = 0; e < in->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        for (uint64_t c = 0; c < x->n_chunks; c++) {
            uint64_t len = ckp_chunk_len(x, c), at = x->orig_offset + c * x->chunk_size;
            char where[512];
            if (used + len > cap) {
                cku_sha256_pipe_submit(sha, used);
                b = cku_sha256_pipe_buffer(sha);
                used = 0;
            }
            ckp_status st = ckp_read_chunk(r, e, c, b + used, s);
            if (st != CKP_OK) {
                describe_chunk(r, e, c, where, sizeof where);
                fprintf(stderr, "ckptfs verify: %s%s: %s: %s\n", f->path, CKP_SUFFIX, where, ckp_status_name(st));
                bad = 1;
                chunks_ok = 0; /* the hash is of no use now: keep going to name every damaged chunk */
                continue;
            }
            if (sfd >= 0 && !differs && (cku_pread_full(sfd, src_buf, len, at) || memcmp(b + used, src_buf, len))) {
                describe_chunk(r, e, c, where, sizeof where);
                fprintf(stderr, "ckptfs verify: %s: %s differs from the source %s\n", f->path, where, src_path);
                differs = 1;
            }
            used += len;
        }
    }
    uint8_t d[32];
    cku_sha256_pipe_submit(sha, used);
    cku_sha256_pipe_final(sha, d);
    if (chunks_ok && memcmp(d, in->sha256, 32)) {
        fprintf(stderr, "ckptfs verify: %s: SHA-256 differs from the recorded one\n", f->path);
        bad = 1;
    }
    if (sfd >= 0)
        close(sfd);
    ckp_close(r);
    return bad ? VERIFY_DAMAGED : differs ? VERIFY_DIFFERS : VERIFY_OK;
}

/* Files verified at once, like unpack's (files_at_once). */
typedef struct {
    const char *dst, *against;
    int against_file;
    const ckm_manifest *m;
    cku_progress *pr;
    atomic_size_t next, damaged, differ, newer;
} verify_pool;

static void *verify_worker(void *arg)
{
    verify_pool *v = arg;
    ckp_scratch *s = ckp_scratch_new();
    uint8_t *src_buf = malloc(CKP_MAX_CHUNK);
    for (;;) {
        size_t i = atomic_fetch_add(&v->next, 1);
        if (i >= v->m->n_files)
            break;
        char src_path[PATH_MAX];
        if (v->against && !v->against_file)
            snprintf(src_path, sizeof src_path, "%s/%s", v->against, v->m->files[i].path);
        else if (v->against)
            snprintf(src_path, sizeof src_path, "%s", v->against);
        int r = !s || !src_buf ? VERIFY_DAMAGED
                               : verify_file(v->dst, v->against ? src_path : NULL, &v->m->files[i], s, src_buf);
        if (r == VERIFY_DAMAGED)
            atomic_fetch_add(&v->damaged, 1);
        else if (r == VERIFY_DIFFERS)
            atomic_fetch_add(&v->differ, 1);
        else if (r == VERIFY_NEWER)
            atomic_fetch_add(&v->newer, 1);
        cku_progress_add(v->pr, v->m->files[i].size);
    }
    free(src_buf);
    ckp_scratch_free(s);
    return NULL;
}

int ckpt_verify(const char *dst, const char *against, int jobs)
{
    char err[768];
    ckm_manifest *m;
    if (ckm_load(dst, &m, err, sizeof err)) {
        fprintf(stderr, "ckptfs verify: %s\n", err);
        return 1;
    }
    /* SRC as pack took it: a directory, or the one file that was packed */
    struct stat ast;
    int against_file = 0;
    if (against) {
        if (stat(against, &ast)) {
            fprintf(stderr, "ckptfs verify: %s: %s\n", against, strerror(errno));
            ckm_free(m);
            return 1;
        }
        against_file = !S_ISDIR(ast.st_mode);
        if (against_file && m->n_files != 1) {
            fprintf(stderr, "ckptfs verify: %s is a file but %s holds %zu files; give the source directory\n",
                    against, dst, m->n_files);
            ckm_free(m);
            return 1;
        }
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < m->n_files; i++)
        bytes += m->files[i].size;
    verify_pool v = {.dst = dst, .against = against, .against_file = against_file, .m = m,
                     .pr = cku_progress_new("verifying", bytes)};
    atomic_init(&v.next, 0);
    atomic_init(&v.damaged, 0);
    atomic_init(&v.differ, 0);
    atomic_init(&v.newer, 0);
    cku_run_threads(files_at_once(jobs), verify_worker, &v);
    size_t damaged = atomic_load(&v.damaged), differ = atomic_load(&v.differ), newer = atomic_load(&v.newer);
    double secs = cku_progress_seconds(v.pr);
    cku_progress_done(v.pr);
    size_t bad = damaged + differ + newer;
    if (newer)
        fprintf(stderr,
                "ckptfs verify: %s: %zu of %zu files were written by a newer ckptfs (a format version this one "
                "cannot read); upgrade ckptfs to verify them\n",
                dst, newer, m->n_files);
    if (damaged)
        fprintf(stderr, "ckptfs verify: %s: %zu of %zu files damaged\n", dst, damaged, m->n_files);
    if (differ)
        fprintf(stderr, "ckptfs verify: %s: %zu of %zu files differ from the source %s\n", dst, differ, m->n_files,
                against);
    char h[16], rate[24];
    if (!bad)
        printf("%s: %zu files, %s: all checksums%s ok (%.1f s, %s)\n", dst, m->n_files, cku_human(bytes, h),
               against ? " and every byte against the source" : "", secs, cku_human_rate(bytes, secs, rate));
    ckm_free(m);
    return damaged ? CKPT_EXIT_DAMAGED : newer ? CKPT_EXIT_FAIL : differ ? CKPT_EXIT_DIFFERS : CKPT_EXIT_OK;
}

/* ---- stat ----------------------------------------------------------------- */

typedef struct {
    uint64_t count, original, packed;
} tally;

typedef struct {
    uint64_t original, packed, files, packed_other;
    uint64_t bf16_weights, escapes, bf16_charged, code_bytes, low_bytes, esc_bytes, index_bytes;
    uint64_t blob_original, blob_packed;
    tally dtype[32], enc[4];
} stats;

static void stat_file(const ckp_reader *r, stats *t)
{
    const ckp_info *in = ckp_get_info(r);
    t->original += in->original_size;
    t->packed += in->packed_size;
    t->files++;
    uint64_t non_bf16 = 0;
    for (uint32_t e = 0; e < in->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        uint64_t payload = x->plane_size[0] + x->plane_size[1] + x->plane_size[2] + x->n_chunks * 16;
        t->enc[x->encoding].count++;
        t->enc[x->encoding].original += x->orig_size;
        t->enc[x->encoding].packed += payload;
        if (x->dtype < 32) {
            t->dtype[x->dtype].count++;
            t->dtype[x->dtype].original += x->orig_size;
            t->dtype[x->dtype].packed += payload;
        }
        if (x->encoding >= CKC_ENC_K15) {
            t->bf16_weights += x->orig_size / 2;
            t->escapes += x->n_escapes;
            t->code_bytes += x->plane_size[0];
            t->low_bytes += x->plane_size[1];
            t->esc_bytes += x->plane_size[2];
            t->index_bytes += x->n_chunks * 16;
        } else if (in->kind == CKP_KIND_SAFETENSORS && e > 0) {
            non_bf16 += payload; /* non-BF16 tensor data is not BF16 overhead */
        }
    }
    if (in->kind == CKP_KIND_SAFETENSORS)
        t->bf16_charged += in->packed_size - non_bf16;
    else {
        t->blob_original += in->original_size;
        t->blob_packed += in->packed_size;
    }
}

static cJSON *tally_json(const tally *x)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)x->count);
    cJSON_AddNumberToObject(o, "original_bytes", (double)x->original);
    cJSON_AddNumberToObject(o, "packed_bytes", (double)x->packed);
    return o;
}

static void print_stats(const char *dst, const stats *t, uint64_t manifest_size, int json)
{
    uint64_t packed = t->packed + manifest_size;
    double bpw = t->bf16_weights ? 8.0 * (double)(t->bf16_charged + manifest_size) / (double)t->bf16_weights : 0;
    double esc = t->bf16_weights ? (double)t->escapes / (double)t->bf16_weights : 0;
    if (json) {
        cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateObject(), *e = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", dst);
        cJSON_AddNumberToObject(o, "files", (double)t->files);
        cJSON_AddNumberToObject(o, "original_bytes", (double)t->original);
        cJSON_AddNumberToObject(o, "packed_bytes", (double)packed);
        cJSON_AddNumberToObject(o, "saved_fraction", t->original ? 1.0 - (double)packed / (double)t->original : 0);
        cJSON_AddNumberToObject(o, "bf16_weights", (double)t->bf16_weights);
        cJSON_AddNumberToObject(o, "bf16_bits_per_weight", bpw);
        cJSON_AddNumberToObject(o, "bf16_charged_bytes", (double)(t->bf16_charged + manifest_size));
        cJSON_AddNumberToObject(o, "escapes", (double)t->escapes);
        cJSON_AddNumberToObject(o, "escape_rate", esc);
        cJSON_AddNumberToObject(o, "code_plane_bytes", (double)t->code_bytes);
        cJSON_AddNumberToObject(o, "low_plane_bytes", (double)t->low_bytes);
        cJSON_AddNumberToObject(o, "escape_plane_bytes", (double)t->esc_bytes);
        cJSON_AddNumberToObject(o, "chunk_index_bytes", (double)t->index_bytes);
        cJSON_AddNumberToObject(o, "manifest_bytes", (double)manifest_size);
        cJSON_AddNumberToObject(o, "blob_original_bytes", (double)t->blob_original);
        cJSON_AddNumberToObject(o, "blob_packed_bytes", (double)t->blob_packed);
        for (uint32_t k = 1; k < 32; k++)
            if (t->dtype[k].count)
                cJSON_AddItemToObject(d, st_dtype_name(k), tally_json(&t->dtype[k]));
        for (uint32_t k = 0; k < 4; k++)
            if (t->enc[k].count)
                cJSON_AddItemToObject(e, ckc_encoding_name(k), tally_json(&t->enc[k]));
        cJSON_AddItemToObject(o, "by_dtype", d);
        cJSON_AddItemToObject(o, "by_encoding", e);
        char *s = cJSON_Print(o);
        puts(s);
        free(s);
        cJSON_Delete(o);
        return;
    }
    printf("%s: %llu files\n", dst, (unsigned long long)t->files);
    printf("  original   %15llu bytes\n  packed     %15llu bytes (%.2f%% saved, manifest included)\n",
           (unsigned long long)t->original, (unsigned long long)packed,
           t->original ? 100.0 * (1.0 - (double)packed / (double)t->original) : 0.0);
    printf("  BF16       %15llu weights, %.4f bits/weight with every byte of overhead charged\n",
           (unsigned long long)t->bf16_weights, bpw);
    printf("             escape rate %.4f%%; planes: codes %llu, low %llu, escapes %llu, chunk index %llu bytes\n",
           100 * esc, (unsigned long long)t->code_bytes, (unsigned long long)t->low_bytes,
           (unsigned long long)t->esc_bytes, (unsigned long long)t->index_bytes);
    printf("  by dtype:     %8s %15s %15s\n", "tensors", "original", "payload");
    for (uint32_t k = 1; k < 32; k++)
        if (t->dtype[k].count)
            printf("    %-11s %8llu %15llu %15llu\n", st_dtype_name(k), (unsigned long long)t->dtype[k].count,
                   (unsigned long long)t->dtype[k].original, (unsigned long long)t->dtype[k].packed);
    printf("  by encoding:  %8s %15s %15s\n", "extents", "original", "payload");
    for (uint32_t k = 0; k < 4; k++)
        if (t->enc[k].count)
            printf("    %-11s %8llu %15llu %15llu\n", ckc_encoding_name(k), (unsigned long long)t->enc[k].count,
                   (unsigned long long)t->enc[k].original, (unsigned long long)t->enc[k].packed);
    printf("  (BF16 bits/weight charge every byte of the packed safetensors files except non-BF16\n"
           "   tensor payloads, plus the manifest; other files: %llu -> %llu bytes)\n",
           (unsigned long long)t->blob_original, (unsigned long long)t->blob_packed);
}

int ckpt_stat(const char *dst, int json)
{
    char err[768];
    ckm_manifest *m;
    if (ckm_load(dst, &m, err, sizeof err)) {
        fprintf(stderr, "ckptfs stat: %s\n", err);
        return 1;
    }
    stats t;
    memset(&t, 0, sizeof t);
    int rc = 0;
    for (size_t i = 0; i < m->n_files; i++) {
        ckp_reader *r = open_member("stat", dst, &m->files[i]);
        if (!r) {
            rc = 1;
            continue;
        }
        stat_file(r, &t);
        ckp_close(r);
    }
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dst, CKP_MANIFEST_NAME);
    uint64_t msize = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (rc == 0)
        print_stats(dst, &t, msize, json);
    ckm_free(m);
    return rc;
}
