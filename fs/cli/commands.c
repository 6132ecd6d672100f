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
#include <sys/xattr.h>
#include <unistd.h>

#define IO_BLOCK (4u << 20)

int ckpt_fail(const char *cmd, ckp_status st, const char *msg)
{
    if (st == CKP_OK)
        return CKPT_EXIT_OK;
    fprintf(stderr, "ckptfs %s: %s\n", cmd, msg);
    return CKPT_EXIT_FAIL;
}

/* Open DST/<rel>.ckpt and check it against its manifest entry; *why (if
 * given) gets the status of a failed open (CKP_ERR_VERSION: a newer format). */
static ckp_reader *open_member_why(const char *cmd, const char *dst, const ckm_file *f, ckp_status *why)
{
    char path[PATH_MAX], err[768];
    snprintf(path, sizeof path, "%s/%s%s", dst, f->path, CKP_SUFFIX);
    ckp_reader *r;
    ckp_status st = ckp_open_at(dst, f->path, 0, &r, err, sizeof err);
    if (why)
        *why = st == CKP_OK ? CKP_ERR_CORRUPT : st;
    if (st != CKP_OK) {
        fprintf(stderr, "ckptfs %s: %s\n", cmd, err);
        return NULL;
    }
    const ckp_info *in = ckp_get_info(r);
    if (in->original_size != f->size || memcmp(in->sha256, f->sha256, 32) || strcmp(in->path, f->path)) {
        fprintf(stderr, "ckptfs %s: %s: does not match its manifest entry\n", cmd, cku_escape(path, err, sizeof err));
        ckp_close(r);
        return NULL;
    }
    return r;
}

static ckp_reader *open_member(const char *cmd, const char *dst, const ckm_file *f)
{
    return open_member_why(cmd, dst, f, NULL);
}

/* A shared lock on DST while a command reads it.  `pack` holds an exclusive
 * one while it writes (pack_dst.c), so reading a pack being written is
 * refused with that reason (not "no manifest", or damage reported in files
 * half replaced), and no pack starts writing under a reader.  The mount
 * takes none: it notices files replaced under it instead.
 * @return the locked descriptor (close it to release), -1 if DST cannot be
 * opened (loading the manifest then says why), -2 after saying it is busy. */
static int read_lock(const char *cmd, const char *dst)
{
    int fd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0)
        return fd;
    int e = errno;
    close(fd);
    if (e != EWOULDBLOCK)
        return -1;
    fprintf(stderr, "ckptfs %s: %s: a ckptfs pack is writing it; run this again once it has finished\n", cmd,
            CKU_ESC(dst));
    return -2;
}

/* Run a reading command under read_lock. */
static int locked(const char *cmd, const char *dst, int (*fn)(const char *, const char *, int), const char *arg,
                  int jobs)
{
    int lock = read_lock(cmd, dst);
    if (lock == -2)
        return CKPT_EXIT_FAIL;
    int rc = fn(dst, arg, jobs);
    if (lock >= 0)
        close(lock);
    return rc;
}

static void describe_chunk(const ckp_reader *r, uint32_t e, uint64_t c, char *out, size_t cap)
{
    const ckp_extent *x = ckp_get_extent(r, e);
    uint64_t a = x->orig_offset + c * x->chunk_size;
    char esc[CKU_ESC_NAME];
    snprintf(out, cap, "%s, chunk %llu (original bytes %llu-%llu)",
             *x->name ? cku_escape(x->name, esc, sizeof esc)
                      : (e == 0 && ckp_get_info(r)->kind == CKP_KIND_SAFETENSORS ? "header" : "data"),
             (unsigned long long)c, (unsigned long long)a, (unsigned long long)(a + ckp_chunk_len(x, c) - 1));
}

/* Bytes of the packed files of m and its manifest (for the summaries). */
static uint64_t packed_size(const char *dst, const ckm_manifest *m)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dst, CKP_MANIFEST_NAME);
    uint64_t n = lstat(path, &st) ? 0 : (uint64_t)st.st_size;
    for (size_t i = 0; i < m->n_files; i++) {
        snprintf(path, sizeof path, "%s/%s%s", dst, m->files[i].path, CKP_SUFFIX);
        n += lstat(path, &st) ? 0 : (uint64_t)st.st_size;
    }
    return n;
}

/* ---- unpack --------------------------------------------------------------- */

#define BATCH_BYTES (1u << 20) /* decoded bytes per write and per hashing step */

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
        fprintf(stderr, "ckptfs unpack: %s: %s\n", CKU_ESC(tmp), strerror(errno));
        return -1;
    }
    cku_sha256_pipe_submit(sha, used);
    return 0;
}

static int unpack_file(const char *dst, const char *out, const ckm_file *f, ckp_scratch *s)
{
    char esc[PATH_MAX]; /* f->path as messages print it */
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
        int e = errno;
        fprintf(stderr, "ckptfs unpack: %s: %s%s\n", CKU_ESC(tmp), fd < 0 ? strerror(e) : "out of memory",
                fd < 0 && e == EEXIST ? " (another file of the pack took this name: OUT's file system does not tell "
                                        "the two names apart, as a case-insensitive one does not A.bin and a.bin; "
                                        "unpack on one that does)" : "");
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
                fprintf(stderr, "ckptfs unpack: %s%s: %s: %s; refusing to unpack damaged data\n",
                        cku_escape(f->path, esc, sizeof esc), CKP_SUFFIX, where, ckp_status_name(st));
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
        fprintf(stderr, "ckptfs unpack: %s: SHA-256 of the decoded file differs from the recorded one\n",
                cku_escape(f->path, esc, sizeof esc));
        goto out;
    }
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT},
                             {.tv_sec = f->mtime_ns / 1000000000, .tv_nsec = f->mtime_ns % 1000000000}};
    if (ts[1].tv_nsec < 0) {
        ts[1].tv_sec -= 1;
        ts[1].tv_nsec += 1000000000;
    }
    if (fchmod(fd, (mode_t)ckm_file_mode(f)) || futimens(fd, ts) || (cku_fault_point(), fsync(fd))) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", CKU_ESC(tmp), strerror(errno));
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

/* rm -r of what the directory open at dfd holds, through descriptors: no
 * symbolic link is followed, even one put in place of a directory while
 * it runs (a path-based walk that looked with lstat and then opened by name
 * could be sent into another directory, and empty it). */
static void remove_below(int dfd)
{
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) {
            remove_below(sub);
            close(sub);
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
        } else {
            unlinkat(dirfd(d), e->d_name, 0);
        }
    }
    closedir(d);
}

/* rm -r p, never following a symbolic link. */
static void remove_tree(const char *p)
{
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        unlink(p);
        return;
    }
    remove_below(fd);
    close(fd);
    rmdir(p);
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
    if (fd >= 0 && (fstat(fd, &st) || st.st_uid != geteuid())) { /* not an unpack of ours: not ours to remove */
        fprintf(stderr, "ckptfs unpack: %s: there already and not made by you; remove it yourself, or unpack "
                "elsewhere\n", CKU_ESC(stage));
        close(fd);
        return -1;
    }
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
    int made = mkdir(stage, 0700) == 0;
    if (!made && errno == ENOENT) { /* name what the user typed, not the staging directory */
        fprintf(stderr, "ckptfs unpack: %s: the directory it would go in does not exist; create it first\n",
                CKU_ESC(out));
        return -1;
    }
    fd = -1;
    if (!made || (fd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
        flock(fd, LOCK_EX | LOCK_NB)) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", stage, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* 1 if OUT (which does not exist yet) would be inside the packed directory
 * dst: its files would be taken for part of the pack there (a later pack
 * into dst removes temporaries and reads .ckpt files anywhere in it). */
static int out_inside(const char *dst, const char *out)
{
    char parent[PATH_MAX], rp[PATH_MAX], rd[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (slash)
        slash[slash == parent] = 0; /* "/x": the parent is "/" */
    if (!realpath(slash ? parent : ".", rp) || !realpath(dst, rd))
        return 0;                   /* staging says what is wrong with OUT */
    size_t n = strlen(rd);
    return !strncmp(rp, rd, n) && (rp[n] == '/' || !rp[n] || n == 1);
}

static int unpack_locked(const char *dst, const char *out_arg, int jobs)
{
    char err[768], out[PATH_MAX], stage[PATH_MAX + 32];
    ckm_manifest *m;
    ckp_status st = ckm_load(dst, &m, err, sizeof err);
    if (st != CKP_OK)
        return ckpt_fail("unpack", st, err);
    snprintf(out, sizeof out, "%s", out_arg);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--)
        out[n - 1] = 0;
    snprintf(stage, sizeof stage, "%s.ckptfs-partial", out);
    if (out_inside(dst, out)) {
        fprintf(stderr, "ckptfs unpack: %s: inside the packed directory %s; unpack it elsewhere\n", CKU_ESC(out),
                CKU_ESC(dst));
        ckm_free(m);
        return 1;
    }
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
            fprintf(stderr, "ckptfs unpack: %s: %s\n", CKU_ESC(p), strerror(errno));
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
        /* its names durable before OUT appears (stage's own just below) */
        if (cku_sync_dirs(p, 0)) {
            fprintf(stderr, "ckptfs unpack: %s: %s\n", CKU_ESC(p), strerror(errno));
            goto out;
        }
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
    /* OUT's name durable before unpack says it is done (`unpack P OUT && rm
     * -r P` must not lose a file to a crash) */
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (slash)
        slash[slash == parent] = 0;
    if (cku_sync_dirs(slash ? parent : ".", 0)) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", CKU_ESC(out), strerror(errno));
        remove_tree(out);
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

enum { VERIFY_OK = 0, VERIFY_DAMAGED = 1, VERIFY_DIFFERS = 2, VERIFY_UNSUPPORTED = 3 };

/* Check every chunk of one packed file; with a source file (src_path), every
 * byte too.  Returns VERIFY_DAMAGED if the packed file fails a check (that
 * wins), VERIFY_DIFFERS if only the source is missing or differs,
 * VERIFY_UNSUPPORTED if it is of a format version this ckptfs cannot read. */
static int verify_file(const char *dst, const char *src_path, const ckm_file *f, ckp_scratch *s,
                       uint8_t *src_buf)
{
    char esc[PATH_MAX]; /* a path as messages print it */
    ckp_status why;
    ckp_reader *r = open_member_why("verify", dst, f, &why);
    if (!r)
        return why == CKP_ERR_VERSION ? VERIFY_UNSUPPORTED : VERIFY_DAMAGED;
    int bad = 0, sfd = -1, differs = 0;
    if (src_path) {
        struct stat st;
        char msg[512];
        /* the source as pack took it (links followed), but never a FIFO */
        sfd = cku_open_regular(NULL, src_path, &st, msg, sizeof msg);
        if (sfd < 0 || (uint64_t)st.st_size != f->size) {
            fprintf(stderr, "ckptfs verify: %s: %s\n", cku_escape(src_path, esc, sizeof esc),
                    sfd < 0 ? msg : "size differs from the packed file's original");
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
                fprintf(stderr, "ckptfs verify: %s%s: %s: %s\n", cku_escape(f->path, esc, sizeof esc), CKP_SUFFIX,
                        where, ckp_status_name(st));
                bad = 1;
                chunks_ok = 0; /* the hash is of no use now: keep going to name every damaged chunk */
                continue;
            }
            if (sfd >= 0 && !differs && (cku_pread_full(sfd, src_buf, len, at) || memcmp(b + used, src_buf, len))) {
                describe_chunk(r, e, c, where, sizeof where);
                char esrc[PATH_MAX];
                fprintf(stderr, "ckptfs verify: %s: %s differs from the source %s\n",
                        cku_escape(f->path, esc, sizeof esc), where, cku_escape(src_path, esrc, sizeof esrc));
                differs = 1;
            }
            used += len;
        }
    }
    uint8_t d[32];
    cku_sha256_pipe_submit(sha, used);
    cku_sha256_pipe_final(sha, d);
    if (chunks_ok && memcmp(d, in->sha256, 32)) {
        fprintf(stderr, "ckptfs verify: %s: SHA-256 differs from the recorded one\n",
                cku_escape(f->path, esc, sizeof esc));
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
        else if (r == VERIFY_UNSUPPORTED)
            atomic_fetch_add(&v->newer, 1);
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
        fprintf(stderr, "ckptfs verify: %s: %s the source but not in the pack\n", CKU_ESC(full),
                is_dir ? "a directory in" : "in");
        n++;
    }
    closedir(d);
    return n;
}

static int verify_locked(const char *dst, const char *against, int jobs)
{
    char err[768];
    ckm_manifest *m;
    ckp_status st = ckm_load(dst, &m, err, sizeof err);
    if (st != CKP_OK)
        return ckpt_fail("verify", st, err);
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
    size_t extra = against && !against_file ? not_in_pack(against, "", m) : 0;
    size_t bad = damaged + differ + newer + extra;
    if (newer)
        fprintf(stderr,
                "ckptfs verify: %s: %zu of %zu files use a format version this ckptfs cannot read (see above; "
                "a newer format needs a newer ckptfs)\n",
                dst, newer, m->n_files);
    if (damaged)
        fprintf(stderr, "ckptfs verify: %s: %zu of %zu files damaged\n", dst, damaged, m->n_files);
    if (differ)
        fprintf(stderr, "ckptfs verify: %s: %zu of %zu files differ from the source %s\n", dst, differ, m->n_files,
                against);
    if (extra)
        fprintf(stderr, "ckptfs verify: %s: %zu files or directories of the source %s are not in the pack\n", dst,
                extra, against);
    char h[16], rate[24];
    if (!bad)
        printf("%s: %zu files, %s: all checksums%s ok (%.1f s, %s)\n", dst, m->n_files, cku_human(bytes, h),
               against ? " and every byte against the source" : "", secs, cku_human_rate(bytes, secs, rate));
    ckm_free(m);
    return damaged ? CKPT_EXIT_DAMAGED : newer ? CKPT_EXIT_FAIL : differ || extra ? CKPT_EXIT_DIFFERS : CKPT_EXIT_OK;
}

int ckpt_unpack(const char *dst, const char *out, int jobs) { return locked("unpack", dst, unpack_locked, out, jobs); }
int ckpt_verify(const char *dst, const char *against, int jobs)
{
    return locked("verify", dst, verify_locked, against, jobs);
}

/* ---- stat ----------------------------------------------------------------- */

typedef struct {
    uint64_t count, original, packed;
} tally;

/* One packed file's figures (and, summed, the whole pack's). */
typedef struct {
    const char *path;
    uint64_t original, packed;
    uint64_t bf16_weights, escapes, bf16_charged; /* charged: packed bytes but non-BF16 payloads */
    unsigned enc_mask;                            /* 1 << encoding of each extent */
} file_stats;

typedef struct {
    file_stats all;
    uint64_t files, code_bytes, low_bytes, esc_bytes, index_bytes;
    uint64_t blob_original, blob_packed;
    tally dtype[33], enc[4]; /* dtype[32]: codes of 32 and over */
} stats;

/* The name stat gives dtype slot k: its safetensors name, or for a code
 * this ckptfs does not name (dtype is informational: format §4.3) "code K",
 * so two unknown codes never share a row or a JSON key. */
static const char *dtype_label(uint32_t k, char buf[16])
{
    if (k == 32)
        return "code>=32";
    uint32_t bits;
    const char *name = st_dtype_name(k);
    if (st_dtype_code(name, &bits) == k)
        return name;
    snprintf(buf, 16, "code %u", k);
    return buf;
}

static void stat_file(const ckp_reader *r, stats *t, file_stats *f)
{
    const ckp_info *in = ckp_get_info(r);
    f->original = in->original_size;
    f->packed = in->packed_size;
    t->files++;
    uint64_t non_bf16 = 0;
    for (uint32_t e = 0; e < in->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        uint64_t payload = x->plane_size[0] + x->plane_size[1] + x->plane_size[2] + x->n_chunks * 16;
        f->enc_mask |= 1u << (x->encoding & 3);
        t->enc[x->encoding & 3].count++;
        t->enc[x->encoding & 3].original += x->orig_size;
        t->enc[x->encoding & 3].packed += payload;
        if (x->dtype) { /* 0: no tensor (a safetensors header, a blob) */
            tally *d = &t->dtype[x->dtype < 32 ? x->dtype : 32];
            d->count++;
            d->original += x->orig_size;
            d->packed += payload;
        }
        if (x->encoding >= CKC_ENC_K15) {
            f->bf16_weights += x->orig_size / 2;
            f->escapes += x->n_escapes;
            t->code_bytes += x->plane_size[0];
            t->low_bytes += x->plane_size[1];
            t->esc_bytes += x->plane_size[2];
            t->index_bytes += x->n_chunks * 16;
        } else if (in->kind == CKP_KIND_SAFETENSORS && e > 0) {
            non_bf16 += payload; /* non-BF16 tensor data is not BF16 overhead */
        }
    }
    if (in->kind == CKP_KIND_SAFETENSORS)
        f->bf16_charged = in->packed_size - non_bf16;
    else {
        t->blob_original += in->original_size;
        t->blob_packed += in->packed_size;
    }
    t->all.original += f->original;
    t->all.packed += f->packed;
    t->all.bf16_weights += f->bf16_weights;
    t->all.escapes += f->escapes;
    t->all.bf16_charged += f->bf16_charged;
    t->all.enc_mask |= f->enc_mask;
}

/* a count for a person: "664k", "1.21M", "7.50G". out: 16 chars. */
static char *count_human(uint64_t n, char *out)
{
    double v = (double)n;
    snprintf(out, 16, v >= 1e9 ? "%.3gG" : v >= 1e6 ? "%.3gM" : v >= 1e3 ? "%.3gk" : "%.0f",
             v >= 1e9 ? v / 1e9 : v >= 1e6 ? v / 1e6 : v >= 1e3 ? v / 1e3 : v);
    return out;
}

static double ratio(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0; }

/* "k15+zstd": the encodings of a file's extents. */
static void enc_list(unsigned mask, char *out, size_t cap)
{
    *out = 0;
    for (uint32_t k = 0; k < 4; k++)
        if (mask & (1u << k))
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", *out ? "+" : "", ckc_encoding_name(k));
}

static cJSON *tally_json(const tally *x)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)x->count);
    cJSON_AddNumberToObject(o, "original_bytes", (double)x->original);
    cJSON_AddNumberToObject(o, "packed_bytes", (double)x->packed);
    return o;
}

/* The per-file figures as JSON (the same for each file and for the total). */
static void file_json(cJSON *o, const file_stats *f, uint64_t extra_charge)
{
    char enc[64];
    enc_list(f->enc_mask, enc, sizeof enc);
    cJSON_AddNumberToObject(o, "original_bytes", (double)f->original);
    cJSON_AddNumberToObject(o, "packed_bytes", (double)(f->packed + extra_charge));
    cJSON_AddNumberToObject(o, "saved_fraction", f->original ? 1.0 - ratio(f->packed + extra_charge, f->original) : 0);
    cJSON_AddNumberToObject(o, "bf16_weights", (double)f->bf16_weights);
    cJSON_AddNumberToObject(o, "bf16_bits_per_weight", 8.0 * ratio(f->bf16_charged + extra_charge, f->bf16_weights));
    cJSON_AddNumberToObject(o, "escapes", (double)f->escapes);
    cJSON_AddNumberToObject(o, "escape_rate", ratio(f->escapes, f->bf16_weights));
    cJSON_AddStringToObject(o, "encodings", enc);
}

static void print_json(const char *dst, const stats *t, const file_stats *fs, uint64_t manifest_size)
{
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateObject(), *e = cJSON_CreateObject();
    cJSON *files = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "path", dst);
    cJSON_AddNumberToObject(o, "files", (double)t->files);
    file_json(o, &t->all, manifest_size); /* the whole pack is charged the manifest too */
    cJSON_AddNumberToObject(o, "bf16_charged_bytes", (double)(t->all.bf16_charged + manifest_size));
    cJSON_AddNumberToObject(o, "code_plane_bytes", (double)t->code_bytes);
    cJSON_AddNumberToObject(o, "low_plane_bytes", (double)t->low_bytes);
    cJSON_AddNumberToObject(o, "escape_plane_bytes", (double)t->esc_bytes);
    cJSON_AddNumberToObject(o, "chunk_index_bytes", (double)t->index_bytes);
    cJSON_AddNumberToObject(o, "manifest_bytes", (double)manifest_size);
    cJSON_AddNumberToObject(o, "blob_original_bytes", (double)t->blob_original);
    cJSON_AddNumberToObject(o, "blob_packed_bytes", (double)t->blob_packed);
    for (uint64_t i = 0; i < t->files; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "path", fs[i].path);
        file_json(f, &fs[i], 0);
        cJSON_AddItemToArray(files, f);
    }
    cJSON_AddItemToObject(o, "by_file", files);
    char lb[16];
    for (uint32_t k = 1; k <= 32; k++)
        if (t->dtype[k].count)
            cJSON_AddItemToObject(d, dtype_label(k, lb), tally_json(&t->dtype[k]));
    for (uint32_t k = 0; k < 4; k++)
        if (t->enc[k].count)
            cJSON_AddItemToObject(e, ckc_encoding_name(k), tally_json(&t->enc[k]));
    cJSON_AddItemToObject(o, "by_dtype", d);
    cJSON_AddItemToObject(o, "by_encoding", e);
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* One row of the per-file table. */
static void print_row(const char *name, const file_stats *f, uint64_t extra_charge)
{
    char o[16], p[16], bpw[16] = "-", esc[16] = "-", enc[64];
    uint64_t packed = f->packed + extra_charge;
    if (f->bf16_weights) {
        snprintf(bpw, sizeof bpw, "%.2f", 8.0 * ratio(f->bf16_charged + extra_charge, f->bf16_weights));
        snprintf(esc, sizeof esc, "%.3f%%", 100.0 * ratio(f->escapes, f->bf16_weights));
    }
    enc_list(f->enc_mask, enc, sizeof enc);
    printf("  %-36s %9s %9s %6.1f%% %7s %8s  %s\n", name, cku_human(f->original, o), cku_human(packed, p),
           f->original ? 100.0 * (1.0 - ratio(packed, f->original)) : 0.0, bpw, esc, enc);
}

static void print_text(const char *dst, const stats *t, const file_stats *fs, uint64_t manifest_size)
{
    char a[16], b[16], c[16];
    uint64_t packed = t->all.packed + manifest_size;
    printf("%s: %llu files, %s -> %s (%.1f%% saved)\n", dst, (unsigned long long)t->files,
           cku_human(t->all.original, a), cku_human(packed, b),
           t->all.original ? 100.0 * (1.0 - ratio(packed, t->all.original)) : 0.0);
    if (t->all.bf16_weights)
        printf("BF16: %s weights at %.3f bits/weight (every byte of overhead charged), escape rate %.4f%%\n",
               count_human(t->all.bf16_weights, a), 8.0 * ratio(t->all.bf16_charged + manifest_size, t->all.bf16_weights),
               100.0 * ratio(t->all.escapes, t->all.bf16_weights));
    printf("\n  %-36s %9s %9s %7s %7s %8s  %s\n", "file", "original", "packed", "saved", "bits/w", "escapes",
           "encoding");
    for (uint64_t i = 0; i < t->files; i++) {
        char name[PATH_MAX];
        size_t n = strlen(cku_escape(fs[i].path, name, sizeof name));
        print_row(n > 36 ? name + n - 36 : name, &fs[i], 0); /* long paths: their end */
    }
    print_row("total (with the manifest)", &t->all, manifest_size);
    printf("\n  by dtype       %8s %10s %10s\n", "tensors", "original", "payload");
    char lb[16];
    for (uint32_t k = 1; k <= 32; k++)
        if (t->dtype[k].count)
            printf("    %-12s %8llu %10s %10s\n", dtype_label(k, lb), (unsigned long long)t->dtype[k].count,
                   cku_human(t->dtype[k].original, a), cku_human(t->dtype[k].packed, b));
    printf("  by encoding    %8s %10s %10s\n", "extents", "original", "payload");
    for (uint32_t k = 0; k < 4; k++)
        if (t->enc[k].count)
            printf("    %-12s %8llu %10s %10s\n", ckc_encoding_name(k), (unsigned long long)t->enc[k].count,
                   cku_human(t->enc[k].original, a), cku_human(t->enc[k].packed, b));
    char d[16];
    printf("  BF16 planes: codes %s, low %s, escapes %s, chunk index %s\n", cku_human(t->code_bytes, a),
           cku_human(t->low_bytes, b), cku_human(t->esc_bytes, c), cku_human(t->index_bytes, d));
    printf("  (bits/w charge every byte of a safetensors file's packed form except non-BF16 tensor\n"
           "   payloads; the total charges the manifest too)\n");
}

/* `ckptfs stat MOUNTPOINT`: a running daemon's counters, read from the
 * xattr user.ckptfs.stats of the mount's root (fs/mount/readpath.h).
 * @return 1 if dst is a ckptfs mount (printed), 0 if not. */
static int stat_mount(const char *dst, int json)
{
    ssize_t n = getxattr(dst, "user.ckptfs.stats", NULL, 0); /* its size: the source path's length varies */
    size_t cap = n > 0 ? (size_t)n + 256 : 0; /* room for counters that grew meanwhile */
    char *buf = cap ? malloc(cap) : NULL;
    if (buf)
        n = getxattr(dst, "user.ckptfs.stats", buf, cap - 1);
    if (!buf || n <= 0) {
        free(buf);
        return 0;
    }
    buf[n] = 0;
    if (json) {
        fputs(buf, stdout);
        free(buf);
        return 1;
    }
    cJSON *o = cJSON_Parse(buf);
    free(buf);
    if (!o)
        return 0;
#define N(k) ((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)))
    char a[16], b[16], c[16];
    const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "source"));
    uint64_t hits = N("cache_hits"), misses = N("cache_misses");
    printf("%s: ckptfs mount of %s (%llu files)\n", dst, src ? src : "?", (unsigned long long)N("files"));
    printf("  reads            %llu (%llu of >= 512 KiB), %s served\n", (unsigned long long)N("reads"),
           (unsigned long long)N("big_reads"), cku_human(N("read_bytes"), a));
    printf("  decoded          %s; decode errors %llu\n", cku_human(N("decoded_bytes"), b),
           (unsigned long long)N("decode_errors"));
    printf("  cache            %llu hits, %llu misses (%.1f%% hits), %llu waits, %llu evictions, %llu served out;"
           " holds %s\n",
           (unsigned long long)hits, (unsigned long long)misses, hits + misses ? 100.0 * hits / (hits + misses) : 0.0,
           (unsigned long long)N("cache_waits"), (unsigned long long)N("cache_evictions"),
           (unsigned long long)N("cache_served_out"), cku_human(N("cache_bytes"), c));
    printf("  prefetch         %llu queued, %llu done, %llu dropped, %llu cancelled\n",
           (unsigned long long)N("prefetch_queued"), (unsigned long long)N("prefetch_done"),
           (unsigned long long)N("prefetch_dropped"), (unsigned long long)N("prefetch_cancelled"));
    if (cJSON_GetObjectItemCaseSensitive(o, "direct_loads")) /* drop_packed */
        printf("  O_DIRECT windows %llu loads (%s), %llu chunks decoded from them, %llu waits, %llu failures,"
               " %llu prefetches dropped (no window free), %llu windows replaced unused\n",
               (unsigned long long)N("direct_loads"), cku_human(N("direct_load_bytes"), a),
               (unsigned long long)N("direct_hits"), (unsigned long long)N("direct_waits"),
               (unsigned long long)N("direct_failures"), (unsigned long long)N("direct_dropped"),
               (unsigned long long)N("direct_replaced"));
#undef N
    cJSON_Delete(o);
    return 1;
}

int ckpt_stat(const char *dst, int json)
{
    char err[768];
    ckm_manifest *m;
    if (stat_mount(dst, json))
        return 0;
    /* as verify and unpack: a pack being written is not a damaged one (its
     * first run has no manifest yet; a rerun replaces files the old one
     * lists, which read as 'does not match its manifest entry') */
    int lock = read_lock("stat", dst);
    if (lock == -2)
        return CKPT_EXIT_FAIL;
    ckp_status ls = ckm_load(dst, &m, err, sizeof err);
    if (ls != CKP_OK) {
        if (lock >= 0)
            close(lock);
        return ckpt_fail("stat", ls, err);
    }
    stats t;
    memset(&t, 0, sizeof t);
    file_stats *fs = calloc(m->n_files ? m->n_files : 1, sizeof *fs);
    int rc = fs ? 0 : ckpt_fail("stat", CKP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; fs && i < m->n_files; i++) {
        ckp_reader *r = open_member("stat", dst, &m->files[i]);
        if (!r) {
            rc = 1;
            continue;
        }
        fs[t.files].path = m->files[i].path;
        stat_file(r, &t, &fs[t.files]);
        ckp_close(r);
    }
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dst, CKP_MANIFEST_NAME);
    uint64_t msize = lstat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (rc == 0 && json)
        print_json(dst, &t, fs, msize);
    else if (rc == 0)
        print_text(dst, &t, fs, msize);
    free(fs);
    ckm_free(m);
    if (lock >= 0)
        close(lock);
    return rc;
}
