/*
 * unpack.c — `ckptfs unpack PACKED OUT`: every original file written back,
 * decoded chunk by chunk and checked against its SHA-256, into a staging
 * directory beside OUT that becomes OUT only once all of it is complete.
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

/* Write a batch of decoded bytes at their place and hand it to the hasher.
 * @return 0, or -1 after saying why. */
static int unpack_flush(int fd, const char *tmp, cku_sha256_pipe *sha, const uint8_t *b, uint64_t used, uint64_t at)
{
    if (used && cku_pwrite_full(fd, b, used, at)) {
        int e = errno;
        fprintf(stderr, "ckptfs unpack: %s: %s%s\n", CKU_ESC(tmp), strerror(e),
                e == ENOSPC || e == EDQUOT ? "; nothing was kept: free space on OUT's file system (unpack needs "
                                             "the original size of the model there), or unpack elsewhere, then "
                                             "run the same command again" : "");
        return -1;
    }
    cku_sha256_pipe_submit(sha, used);
    return 0;
}

/* A packed file's failure to open or read: damage (exit 3, as verify's)
 * unless the system failed (I/O, memory). */
static int damage_or_failure(ckp_status st) { return st == CKP_ERR_IO || st == CKP_ERR_NOMEM ? -1 : -3; }

/* @return 0, -1 on a failure (I/O, space), -3 on damaged packed data. */
static int unpack_file(const char *dst, const char *out, const ckm_file *f, ckp_scratch *s)
{
    char esc[PATH_MAX]; /* f->path as messages print it */
    ckp_status why;
    ckp_reader *r = ckpt_open_member_why("unpack", dst, f, &why);
    if (!r)
        return damage_or_failure(why);
    /* written in place: out is the staging directory, renamed to OUT only
     * once every file is complete (ckpt_unpack) */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/%s", out, f->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600), rc = -1;
    /* decoded bytes go out in batches: written here while the previous batch
     * is hashed on the pipe's thread */
    size_t cap = ckpt_batch_capacity(r);
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
        for (uint64_t c = 0, k; c < x->n_chunks; c += k) {
            uint64_t len = ckp_chunk_len(x, c), at = x->orig_offset + c * x->chunk_size, bad;
            if (used && (used + len > cap || at != b_at + used)) {
                if (unpack_flush(fd, tmp, sha, b, used, b_at))
                    goto out;
                b = cku_sha256_pipe_buffer(sha);
                used = 0;
            }
            if (!used)
                b_at = at;
            /* up to 4 chunks a call (archive chunks decode faster together) */
            for (k = 1; k < 4 && c + k < x->n_chunks && used + len + ckp_chunk_len(x, c + k) <= cap; k++)
                len += ckp_chunk_len(x, c + k);
            ckp_status st = ckp_read_chunks(r, e, c, k, b + used, s, &bad);
            if (st != CKP_OK) {
                char where[512];
                char what[1200];
                ckpt_describe_chunk(r, e, bad, where, sizeof where);
                if (st == CKP_ERR_IO && ckpt_is_remote(dst)) /* the bytes never came: not damage */
                    fprintf(stderr, "ckptfs unpack: %s/%s%s: %s: cannot be read (%s)\n", dst,
                            cku_escape(f->path, esc, sizeof esc), CKP_SUFFIX, where,
                            ckpt_remote_read_failure(what, sizeof what));
                else
                    fprintf(stderr, "ckptfs unpack: %s%s: %s: %s; refusing to unpack damaged data\n",
                            cku_escape(f->path, esc, sizeof esc), CKP_SUFFIX, where, ckp_status_name(st));
                rc = damage_or_failure(st);
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
        rc = -3;
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


typedef struct {
    const char *dst, *out;
    const ckm_manifest *m;
    cku_progress *pr;
    atomic_size_t next;
    atomic_int failed, damaged;
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
        int r = unpack_file(u->dst, u->out, &u->m->files[i], s);
        if (r == -3)
            atomic_store(&u->damaged, 1);
        if (r)
            atomic_store(&u->failed, 1);
        else
            cku_progress_add(u->pr, u->m->files[i].size);
    }
    ckp_scratch_free(s);
    return NULL;
}

/* The staging directory OUT.ckptfs-partial holds the marker STAGE_MARKER
 * (a file whose content is STAGE_MAGIC) and the tree STAGE_TREE that
 * becomes OUT: the marker's name cannot be one of the pack's, and a
 * directory without it was not made by ckptfs unpack. */
#define STAGE_MARKER "ckptfs-unpack"
#define STAGE_TREE "out"
#define STAGE_MAGIC "ckptfs unpack staging directory: removed by the next ckptfs unpack to the same OUT\n"

/* 1 if the staging directory open at fd is one of ours: it and its marker
 * belong to the caller and the marker says what it is. */
static int stage_is_ours(int fd)
{
    struct stat st;
    char buf[sizeof STAGE_MAGIC];
    if (fstat(fd, &st) || st.st_uid != geteuid())
        return 0;
    int m = openat(fd, STAGE_MARKER, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (m < 0)
        return 0;
    ssize_t n = fstat(m, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()
                    ? pread(m, buf, sizeof buf - 1, 0) : -1;
    close(m);
    return n == (ssize_t)sizeof STAGE_MAGIC - 1 && !memcmp(buf, STAGE_MAGIC, (size_t)n);
}

/* Make the staging directory OUT.ckptfs-partial, where unpack writes before
 * renaming its tree to OUT, with its marker, and lock it; one left by an
 * interrupted unpack (marked, the caller's, not locked: its process is gone)
 * is removed first, anything else there is left alone.  @return its locked
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
    if (fd < 0 && lstat(stage, &st) == 0) {
        fprintf(stderr, "ckptfs unpack: %s: there already and not a directory ckptfs unpack made; remove it "
                "yourself, or unpack elsewhere\n", CKU_ESC(stage));
        return -1;
    }
    if (fd >= 0 && !stage_is_ours(fd)) { /* not an unpack of ours: not ours to remove */
        fprintf(stderr, "ckptfs unpack: %s: there already and not made by you with ckptfs unpack (no marker "
                "%s of yours in it); remove it yourself, or unpack elsewhere\n", CKU_ESC(stage), STAGE_MARKER);
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
    int m = -1;
    if (!made || (fd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
        flock(fd, LOCK_EX | LOCK_NB) ||
        (m = openat(fd, STAGE_MARKER, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0 ||
        cku_pwrite_full(m, STAGE_MAGIC, sizeof STAGE_MAGIC - 1, 0) || mkdirat(fd, STAGE_TREE, 0700)) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", stage, strerror(errno));
        if (m >= 0)
            close(m);
        if (fd >= 0) {
            remove_tree(stage);
            close(fd);
        }
        return -1;
    }
    close(m);
    return fd;
}

static int unpack_locked(const char *dst, const char *out_arg, int jobs)
{
    char err[768], out[PATH_MAX], stage[PATH_MAX + 32], tree[PATH_MAX + 48];
    ckm_manifest *m;
    ckpt_remote_read_whole(); /* s3://: in windows */
    ckp_status st = ckpt_load_manifest(dst, &m, err, sizeof err);
    if (st != CKP_OK && ckpt_swapped("unpack", dst, out_arg, "ckptfs unpack PACKED OUT"))
        return CKPT_EXIT_USAGE;
    if (st != CKP_OK)
        return ckpt_fail("unpack", st, err);
    snprintf(out, sizeof out, "%s", out_arg);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--)
        out[n - 1] = 0;
    snprintf(stage, sizeof stage, "%s.ckptfs-partial", out);
    snprintf(tree, sizeof tree, "%s/" STAGE_TREE, stage);
    /* OUT inside the packed directory: its files would be taken for part of
     * the pack there (a later pack into it removes temporaries and reads
     * .ckpt files anywhere in it).  Devices and inodes, not path strings: a
     * bind mount of the packed directory is the packed directory. */
    if (cku_path_within(out, dst) == 1) {
        fprintf(stderr, "ckptfs unpack: %s: inside the packed directory %s; unpack it elsewhere\n", CKU_ESC(out),
                CKU_ESC(dst));
        ckm_free(m);
        return 1;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < m->n_files; i++)
        total += m->files[i].size;
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "unpacking %s", dst);
    struct stat ost;
    if (lstat(out, &ost) != 0 && ckpt_check_space("unpack", out, total, what)) {
        ckm_free(m);
        return 1;
    }
    int rc = 1, damaged = 0, stage_fd = make_staging(out, stage);
    if (stage_fd < 0) {
        ckm_free(m);
        return 1;
    }
    cku_progress *pr = cku_progress_new("unpacking", total);
    for (size_t i = 0; i < m->n_dirs; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", tree, m->dirs[i].path);
        if (mkdir(p, m->dirs[i].mode | 0700)) {
            fprintf(stderr, "ckptfs unpack: %s: %s\n", CKU_ESC(p), strerror(errno));
            goto out;
        }
    }
    unpack_pool u = {.dst = dst, .out = tree, .m = m, .pr = pr};
    atomic_init(&u.next, 0);
    atomic_init(&u.failed, 0);
    atomic_init(&u.damaged, 0);
    cku_run_threads(ckpt_files_at_once(jobs), unpack_worker, &u);
    if ((damaged = atomic_load(&u.damaged)))
        fprintf(stderr, "ckptfs unpack: %s is damaged; nothing was unpacked (ckptfs verify %s names every damaged "
                "file)\n", CKU_ESC(dst), CKU_ESC(dst));
    if (atomic_load(&u.failed))
        goto out;
    /* links as links, their targets as packed (format §7), after the files:
     * nothing is written below a link (a link is no listed directory, R55) */
    for (size_t i = 0; i < m->n_links; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", tree, m->links[i].path);
        if (symlink(m->links[i].target, p)) {
            fprintf(stderr, "ckptfs unpack: %s: %s\n", CKU_ESC(p), strerror(errno));
            goto out;
        }
    }
    for (size_t i = m->n_dirs; i-- > 0;) { /* modes after content: a 0555 dir must be filled first */
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", tree, m->dirs[i].path);
        /* its names durable before OUT appears (the tree's own just below) */
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
        chmod(tree, dst_st.st_mode & 0777);
    cku_fault_point();
    if (cku_fsync_dir(tree) || (cku_fault_point(), renameat2(AT_FDCWD, tree, AT_FDCWD, out, RENAME_NOREPLACE))) {
        fprintf(stderr, "ckptfs unpack: %s: %s\n", out, errno == EEXIST ? "already exists" : strerror(errno));
        goto out;
    }
    /* the staging directory, its tree gone, goes (marker first: a crash in
     * between leaves one without a marker, which the next unpack leaves alone) */
    unlinkat(stage_fd, STAGE_MARKER, 0);
    rmdir(stage);
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
    uint64_t packed_size = ckpt_packed_size(dst, m);
    if (ckpt_json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "command", "unpack");
        cJSON_AddStringToObject(o, "packed", dst);
        cJSON_AddStringToObject(o, "out", out);
        cJSON_AddNumberToObject(o, "files", (double)m->n_files);
        cJSON_AddNumberToObject(o, "packed_bytes", (double)packed_size);
        cJSON_AddNumberToObject(o, "original_bytes", (double)total);
        cJSON_AddNumberToObject(o, "seconds", secs);
        ckpt_json_print(o);
        rc = 0;
        goto out;
    }
    for (size_t i = 0; ckpt_verbosity >= 2 && i < m->n_files; i++)
        printf("  %s: %s\n", CKU_ESC(m->files[i].path), cku_human(m->files[i].size, ob));
    if (ckpt_verbosity >= 1)
    printf("unpacked %zu file%s: %s -> %s in %.1f s, %s\n", m->n_files, cku_s(m->n_files), cku_human(packed_size, in),
           cku_human(total, ob), secs, cku_human_rate(total, secs, rate));
    rc = 0;
out:
    cku_progress_done(pr);
    if (damaged)
        rc = CKPT_EXIT_DAMAGED;
    if (rc)
        remove_tree(stage); /* no partial output */
    close(stage_fd);
    ckm_free(m);
    return rc;
}


int ckpt_unpack(const char *dst, const char *out, int jobs) { return ckpt_locked("unpack", dst, unpack_locked, out, jobs); }
