/*
 * verify.c — `ckptfs verify PACKED [--against SRC]`: every chunk of every
 * packed file decoded and checked, each file's SHA-256 recomputed, and with
 * --against every byte compared with the source tree.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "cmd_common.h"
#include "container.h"
#include "manifest.h"
#include "remote.h"
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
#include <sys/xattr.h>
#include <unistd.h>

enum { VERIFY_OK = 0, VERIFY_DAMAGED = 1, VERIFY_DIFFERS = 2, VERIFY_UNSUPPORTED = 3, VERIFY_UNREADABLE = 4,
       VERIFY_NOT_READ = 5 };

/* Decode the next chunks of extent e from c0 into the pipe's buffer (*b,
 * *used bytes taken; submitted first when they would not fit): up to
 * CKP_RUN_MAX of an ARCHIVE extent in one ckp_read_chunks_to (decoded
 * interleaved, each checked on its own: a damaged chunk is still named
 * alone), else one.  Statuses in st.  @return how many were read (the
 * caller's loop takes *used past each). */
static uint64_t run_fill(const ckp_reader *r, uint32_t e, uint64_t c0, cku_sha256_pipe *sha, size_t cap,
                         uint8_t **b, uint64_t *used, ckp_status st[], ckp_scratch *s)
{
    const ckp_extent *x = ckp_get_extent(r, e);
    uint64_t k = x->encoding == CKC_ENC_ARCHIVE ? CKP_RUN_MAX : 1, total = 0;
    void *to[CKP_RUN_MAX];
    if (k > x->n_chunks - c0)
        k = x->n_chunks - c0;
    while (k > 1 && (total = (uint64_t)x->chunk_size * (k - 1) + ckp_chunk_len(x, c0 + k - 1)) > cap)
        k--;
    if (k == 1)
        total = ckp_chunk_len(x, c0);
    if (*used + total > cap) {
        cku_sha256_pipe_submit(sha, *used);
        *b = cku_sha256_pipe_buffer(sha);
        *used = 0;
    }
    if (k == 1) {
        st[0] = ckp_read_chunk(r, e, c0, *b + *used, s);
        return 1;
    }
    for (uint64_t i = 0; i < k; i++) {
        to[i] = *b + *used + i * x->chunk_size;
        st[i] = CKP_ERR_ARG;
    }
    ckp_read_chunks_to(r, e, c0, k, to, st, s);
    return k;
}

/* Check every chunk of one packed file; with a source file (src_path), every
 * byte too.  Returns VERIFY_DAMAGED if the packed file fails a check (that
 * wins), VERIFY_DIFFERS if only the source is missing or differs,
 * VERIFY_UNSUPPORTED if it is of a format version this ckptfs cannot read,
 * VERIFY_UNREADABLE if the source file is there but cannot be read (not a
 * difference: nothing could be compared), VERIFY_NOT_READ if an s3://
 * object could not be read (the server down or failing after the retries,
 * access refused, the object replaced meanwhile: not damage, and nothing
 * more of the file is checked). */
static int verify_file(const char *dst, const char *src_path, const ckm_file *f, ckp_scratch *s,
                       uint8_t *src_buf)
{
    char esc[PATH_MAX]; /* a path as messages print it */
    ckp_status why;
    ckp_reader *r = ckpt_open_member_why("verify", dst, f, &why);
    if (!r && why == CKP_ERR_IO && ckpt_is_remote(dst) && ckpt_remote_unreadable(NULL))
        return VERIFY_NOT_READ; /* the line printed says which object and what failed */
    if (!r)
        return why == CKP_ERR_VERSION ? VERIFY_UNSUPPORTED : VERIFY_DAMAGED;
    int bad = 0, sfd = -1, differs = 0, unreadable = 0, not_read = 0;
    if (src_path) {
        struct stat st;
        char msg[512];
        /* the source as pack took it (links followed), but never a FIFO */
        sfd = cku_open_regular(NULL, src_path, &st, msg, sizeof msg);
        int e = errno;
        if (sfd < 0 && e != ENOENT && !cku_open_refused(e)) { /* there, but not readable: EACCES, EIO */
            fprintf(stderr, "ckptfs verify: %s: %s (the source cannot be read: not compared)\n",
                    cku_escape(src_path, esc, sizeof esc), msg);
            unreadable = 1;
        } else if (sfd < 0 || (uint64_t)st.st_size != f->size) {
            fprintf(stderr, "ckptfs verify: %s: %s\n", cku_escape(src_path, esc, sizeof esc),
                    sfd < 0 ? msg : "size differs from the packed file's original");
            differs = 1;
        }
    }
    /* decoded batches are hashed on the pipe's thread while the next is decoded */
    size_t cap = ckpt_batch_capacity(r);
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
    for (uint32_t e = 0; e < in->n_extents && !not_read; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        for (uint64_t c0 = 0, k; c0 < x->n_chunks && !not_read; c0 += k) {
            ckp_status sts[CKP_RUN_MAX];
            k = run_fill(r, e, c0, sha, cap, &b, &used, sts, s);
            for (uint64_t c = c0; c < c0 + k && !not_read; c++) {
                uint64_t len = ckp_chunk_len(x, c), at = x->orig_offset + c * x->chunk_size;
                char where[512];
                ckp_status st = sts[c - c0];
                const uint8_t *got = b + used; /* each chunk of a run has its place, damaged or not */
                used += len;
                if (st == CKP_ERR_IO && ckpt_is_remote(dst)) {
                    /* the bytes never came: not damage, and the rest of the file
                     * would not come either (the server failed after its retries) */
                    char what[1200];
                    ckpt_remote_read_failure(what, sizeof what);
                    ckpt_describe_chunk(r, e, c, where, sizeof where);
                    fprintf(stderr, "ckptfs verify: %s/%s%s: %s: cannot be read, not checked (not damage: %s)\n", dst,
                            cku_escape(f->path, esc, sizeof esc), CKP_SUFFIX, where, what);
                    not_read = 1;
                    continue;
                }
                if (st != CKP_OK) {
                    ckpt_describe_chunk(r, e, c, where, sizeof where);
                    fprintf(stderr, "ckptfs verify: %s%s: %s: %s\n", cku_escape(f->path, esc, sizeof esc), CKP_SUFFIX,
                            where, ckp_status_name(st));
                    bad = 1;
                    chunks_ok = 0; /* the hash is of no use now: keep going to name every damaged chunk */
                    continue;
                }
                if (sfd >= 0 && !differs && !unreadable && cku_pread_full(sfd, src_buf, len, at)) {
                    fprintf(stderr, "ckptfs verify: %s: %s (the source cannot be read: not compared)\n",
                            cku_escape(src_path, esc, sizeof esc), strerror(errno));
                    unreadable = 1;
                } else if (sfd >= 0 && !differs && !unreadable && memcmp(got, src_buf, len)) {
                    ckpt_describe_chunk(r, e, c, where, sizeof where);
                    char esrc[PATH_MAX];
                    fprintf(stderr, "ckptfs verify: %s: %s differs from the source %s\n",
                            cku_escape(f->path, esc, sizeof esc), where, cku_escape(src_path, esrc, sizeof esrc));
                    differs = 1;
                }
            }
        }
    }
    uint8_t d[32];
    cku_sha256_pipe_submit(sha, used);
    cku_sha256_pipe_final(sha, d);
    if (chunks_ok && !not_read && memcmp(d, in->sha256, 32)) {
        fprintf(stderr, "ckptfs verify: %s: SHA-256 differs from the recorded one\n",
                cku_escape(f->path, esc, sizeof esc));
        bad = 1;
    }
    if (sfd >= 0)
        close(sfd);
    ckp_close(r);
    return bad ? VERIFY_DAMAGED : not_read ? VERIFY_NOT_READ : unreadable ? VERIFY_UNREADABLE
           : differs ? VERIFY_DIFFERS : VERIFY_OK;
}

/* Files verified at once, like unpack's (files_at_once). */
typedef struct {
    const char *dst, *against;
    int against_file;
    const ckm_manifest *m;
    cku_progress *pr;
    atomic_size_t next, damaged, differ, newer, unreadable, not_read;
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
        else if (r == VERIFY_UNSUPPORTED)
            atomic_fetch_add(&v->newer, 1);
        else if (r == VERIFY_UNREADABLE)
            atomic_fetch_add(&v->unreadable, 1);
        else if (r == VERIFY_NOT_READ)
            atomic_fetch_add(&v->not_read, 1);
        else if (ckpt_verbosity >= 2 && !ckpt_json)
            printf("  ok: %s\n", CKU_ESC(v->m->files[i].path));
        cku_progress_add(v->pr, v->m->files[i].size);
    }
    free(src_buf);
    ckp_scratch_free(s);
    return NULL;
}

static int cmp_file_path(const void *key, const void *f) { return strcmp(key, ((const ckm_file *)f)->path); }
static int cmp_dir_path(const void *key, const void *d) { return strcmp(key, ((const ckm_dir *)d)->path); }

/* With --against a directory: what SRC holds below rel that the pack does
 * not (a file added since the pack, or one it never took), each named on
 * stderr; a directory the pack lacks is named once, not its files.  Such a
 * file is lost to `verify --against SRC P && rm -r SRC`, which verify's
 * "every byte against the source ok" invited.  @return how many. */
static size_t not_in_pack(const char *src, const char *rel, const ckm_manifest *m)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s%s%s", src, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d)
        return 0; /* SRC itself was stat'ed; a subdirectory gone meanwhile is not the pack's business */
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char r[PATH_MAX], full[PATH_MAX];
        if ((size_t)snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= sizeof r)
            continue;
        snprintf(full, sizeof full, "%s/%s", src, r);
        struct stat st, lst;
        int is_dir = stat(full, &st) == 0 && S_ISDIR(st.st_mode) && lstat(full, &lst) == 0 && !S_ISLNK(lst.st_mode);
        if (is_dir && (m->n_dirs && bsearch(r, m->dirs, m->n_dirs, sizeof *m->dirs, cmp_dir_path))) {
            n += not_in_pack(src, r, m);
            continue;
        }
        if (!is_dir && m->n_files && bsearch(r, m->files, m->n_files, sizeof *m->files, cmp_file_path))
            continue;
        if (lstat(full, &lst) == 0 && S_ISLNK(lst.st_mode) && ckm_find_link(m, r))
            continue; /* compared by links_differ */
        fprintf(stderr, "ckptfs verify: %s: %s the source but not in the pack\n", CKU_ESC(full),
                is_dir ? "a directory in" : "in");
        n++;
    }
    closedir(d);
    return n;
}

/* With --against a directory: each link the pack lists must be a link in
 * SRC with the same target text (format §7), each difference named on
 * stderr.  @return how many differ. */
static size_t links_differ(const char *src, const ckm_manifest *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_links; i++) {
        char full[PATH_MAX], t[CKM_TARGET_MAX + 2];
        snprintf(full, sizeof full, "%s/%s", src, m->links[i].path);
        ssize_t k = readlink(full, t, sizeof t - 1);
        if (k >= 0)
            t[k] = 0;
        if (k < 0 || strcmp(t, m->links[i].target)) {
            fprintf(stderr, "ckptfs verify: %s: %s\n", CKU_ESC(full),
                    k >= 0 ? "the source's link has another target than the packed one"
                    : errno == EINVAL ? "a symbolic link in the pack but not in the source"
                                      : strerror(errno));
            n++;
        }
    }
    return n;
}

static int verify_locked(const char *dst, const char *against, int jobs)
{
    char err[768];
    ckm_manifest *m;
    ckpt_remote_read_whole(); /* s3://: in windows */
    ckp_status st = ckpt_load_manifest(dst, &m, err, sizeof err);
    if (st != CKP_OK && ckpt_swapped("verify", dst, against, "ckptfs verify --against SRC PACKED"))
        return CKPT_EXIT_USAGE;
    if (st != CKP_OK)
        return ckpt_fail("verify", st, err);
    /* SRC as pack took it: a directory, or the one file that was packed */
    struct stat ast;
    int against_file = 0, src_gone = 0;
    const char *against_arg = against;
    if (against) {
        if (stat(against, &ast)) { /* the pack is checked all the same: damage is exit 3 whatever SRC is */
            fprintf(stderr, "ckptfs verify: %s: %s (the source cannot be read: checking the pack alone)\n",
                    against, strerror(errno));
            src_gone = 1;
            against = NULL;
        }
    }
    if (against) {
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
    atomic_init(&v.unreadable, 0);
    atomic_init(&v.not_read, 0);
    cku_run_threads(ckpt_files_at_once(jobs), verify_worker, &v);
    size_t damaged = atomic_load(&v.damaged), differ = atomic_load(&v.differ), newer = atomic_load(&v.newer),
           unreadable = atomic_load(&v.unreadable), not_read = atomic_load(&v.not_read);
    double secs = cku_progress_seconds(v.pr);
    cku_progress_done(v.pr);
    size_t extra = against && !against_file ? not_in_pack(against, "", m) : 0;
    size_t link_differ = against && !against_file ? links_differ(against, m) : 0;
    differ += link_differ;
    size_t bad = damaged + differ + newer + extra + unreadable + not_read + (size_t)src_gone;
    if (newer)
        fprintf(stderr,
                "ckptfs verify: %s: %zu of %zu file%s use%s a format version this ckptfs cannot read (see above; "
                "a newer format needs a newer ckptfs)\n",
                dst, newer, m->n_files, cku_s(m->n_files), newer == 1 ? "s" : "");
    if (damaged)
        fprintf(stderr, "ckptfs verify: %s: %zu of %zu file%s damaged\n", dst, damaged, m->n_files, cku_s(m->n_files));
    if (differ)
        fprintf(stderr, "ckptfs verify: %s: %zu of %zu file%s%s differ%s from the source %s\n", dst, differ,
                m->n_files + m->n_links, cku_s(m->n_files + m->n_links), m->n_links ? " and links" : "",
                differ == 1 ? "s" : "", against);
    if (extra)
        fprintf(stderr, "ckptfs verify: %s: %zu %s of the source %s %s not in the pack\n", dst, extra,
                extra == 1 ? "file or directory" : "files or directories", against, extra == 1 ? "is" : "are");
    if (not_read)
        fprintf(stderr, "ckptfs verify: %s: %zu of %zu packed file%s could not be read from the server (see above): "
                "not checked, which is not damage; run verify again once the server answers\n", dst, not_read,
                m->n_files, cku_s(m->n_files));
    if (unreadable)
        fprintf(stderr, "ckptfs verify: %s: %zu of %zu source file%s cannot be read (see above): not compared; "
                "fix their permissions or run verify as a user who can read them\n", dst, unreadable, m->n_files,
                cku_s(m->n_files));
    int status = damaged                          ? CKPT_EXIT_DAMAGED
                 : newer || unreadable || src_gone || not_read ? CKPT_EXIT_FAIL
                 : differ || extra                 ? CKPT_EXIT_DIFFERS
                                                   : CKPT_EXIT_OK;
    if (ckpt_json) { /* the outcome in every case, for scripts */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "command", "verify");
        cJSON_AddStringToObject(o, "packed", dst);
        if (against || src_gone)
            cJSON_AddStringToObject(o, "against", against ? against : against_arg);
        cJSON_AddNumberToObject(o, "files", (double)m->n_files);
        cJSON_AddNumberToObject(o, "original_bytes", (double)bytes);
        cJSON_AddNumberToObject(o, "damaged", (double)damaged);
        cJSON_AddNumberToObject(o, "newer_format", (double)newer);
        cJSON_AddNumberToObject(o, "not_read", (double)not_read);
        cJSON_AddNumberToObject(o, "differ", (double)differ);
        cJSON_AddNumberToObject(o, "not_in_pack", (double)extra);
        cJSON_AddNumberToObject(o, "source_unreadable", (double)(unreadable + (size_t)src_gone));
        cJSON_AddBoolToObject(o, "ok", status == CKPT_EXIT_OK);
        cJSON_AddNumberToObject(o, "exit_status", status);
        cJSON_AddNumberToObject(o, "seconds", secs);
        ckpt_json_print(o);
        ckm_free(m);
        return status;
    }
    char h[16], rate[24];
    if (src_gone && !damaged && !newer && !not_read)
        fprintf(stderr, "ckptfs verify: %s: %zu file%s, all checksums ok, but nothing was compared with the source "
                "(see above)\n", dst, m->n_files, cku_s(m->n_files));
    if (!bad && ckpt_verbosity >= 1)
        printf("%s: %zu file%s, %s: all checksums%s ok (%.1f s, %s)\n", dst, m->n_files, cku_s(m->n_files), cku_human(bytes, h),
               against ? " and every byte against the source" : "", secs, cku_human_rate(bytes, secs, rate));
    ckm_free(m);
    return status;
}

int ckpt_verify(const char *dst, const char *against, int jobs)
{
    return ckpt_locked("verify", dst, verify_locked, against, jobs);
}
