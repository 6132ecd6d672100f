/*
 * commands.c — what the read-only commands share (unpack.c, verify.c,
 * stat.c): opening a member of a packed directory against its manifest
 * entry, the shared lock that keeps them off a pack being written, naming a
 * chunk in messages, and the sizes of batches and of the work in flight.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "cmd_common.h"
#include "container.h"
#include "manifest.h"
#include "safetensors.h"
#include "hashing.h"
#include "progress.h"
#include "remote.h"
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
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

int ckpt_fail(const char *cmd, ckp_status st, const char *msg)
{
    if (st == CKP_OK)
        return CKPT_EXIT_OK;
    fprintf(stderr, "ckptfs %s: %s\n", cmd, msg);
    return CKPT_EXIT_FAIL;
}

/* Open DST/<rel>.ckpt and check it against its manifest entry; *why (if
 * given) gets the status of a failed open (CKP_ERR_VERSION: a newer format). */
ckp_reader *ckpt_open_member_why(const char *cmd, const char *dst, const ckm_file *f, ckp_status *why)
{
    char path[PATH_MAX], err[768];
    snprintf(path, sizeof path, "%s/%s%s", dst, f->path, CKP_SUFFIX);
    ckp_reader *r;
    ckp_status st;
    if (ckpt_is_remote(dst)) { /* s3://: the object PREFIX/REL.ckpt (remote.c) */
        snprintf(path, sizeof path, "%s%s", f->path, CKP_SUFFIX);
        st = ckpt_remote_open(path, &r, err, sizeof err);
        snprintf(path, sizeof path, "%s/%s%s", dst, f->path, CKP_SUFFIX);
    } else {
        st = ckp_open_at(dst, f->path, 0, &r, err, sizeof err);
    }
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

ckp_reader *ckpt_open_member(const char *cmd, const char *dst, const ckm_file *f)
{
    return ckpt_open_member_why(cmd, dst, f, NULL);
}

/* A shared lock on DST while a command reads it.  `pack` holds an exclusive
 * one while it writes (pack_dst.c), so reading a pack being written is
 * refused with that reason (not "no manifest", or damage reported in files
 * half replaced), and no pack starts writing under a reader.  The mount
 * takes none: it notices files replaced under it instead.
 * @return the locked descriptor (close it to release), -1 if DST cannot be
 * opened (loading the manifest then says why), -2 after saying it is busy. */
int ckpt_read_lock(const char *cmd, const char *dst)
{
    if (ckpt_is_remote(dst)) /* no lock: an s3:// pack's manifest is written last */
        return -1;
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
int ckpt_locked(const char *cmd, const char *dst, int (*fn)(const char *, const char *, int), const char *arg,
                  int jobs)
{
    int lock = ckpt_read_lock(cmd, dst);
    if (lock == -2)
        return CKPT_EXIT_FAIL;
    int rc = fn(dst, arg, jobs);
    if (lock >= 0)
        close(lock);
    return rc;
}

void ckpt_describe_chunk(const ckp_reader *r, uint32_t e, uint64_t c, char *out, size_t cap)
{
    const ckp_extent *x = ckp_get_extent(r, e);
    uint64_t a = x->orig_offset + c * x->chunk_size;
    char esc[CKU_ESC_NAME];
    snprintf(out, cap, "%s, chunk %llu (original bytes %llu-%llu)",
             *x->name ? cku_escape(x->name, esc, sizeof esc)
                      : (e == 0 && ckp_get_info(r)->kind == CKP_KIND_SAFETENSORS ? "header" : "data"),
             (unsigned long long)c, (unsigned long long)a, (unsigned long long)(a + ckp_chunk_len(x, c) - 1));
}

/* Bytes of the packed files of m and its manifest (for the summaries; of
 * s3://, of the members opened so far: call it once every one was). */
uint64_t ckpt_packed_size(const char *dst, const ckm_manifest *m)
{
    char path[PATH_MAX];
    struct stat st;
    if (ckpt_is_remote(dst))
        return ckpt_remote_packed_size();
    snprintf(path, sizeof path, "%s/%s", dst, CKP_MANIFEST_NAME);
    uint64_t n = lstat(path, &st) ? 0 : (uint64_t)st.st_size;
    for (size_t i = 0; i < m->n_files; i++) {
        snprintf(path, sizeof path, "%s/%s%s", dst, m->files[i].path, CKP_SUFFIX);
        n += lstat(path, &st) ? 0 : (uint64_t)st.st_size;
    }
    return n;
}


#define BATCH_BYTES (1u << 20) /* decoded bytes per write and per hashing step */

/* Capacity of one batch buffer for the packed file r: BATCH_BYTES, or its
 * largest chunk if that is larger (chunks are decoded whole into a batch; the
 * format allows up to CKP_MAX_CHUNK, validated by ckp_open). */
size_t ckpt_batch_capacity(const ckp_reader *r)
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

/* Files unpacked or verified at once: each uses two threads (decode, and
 * its SHA-256). */
int ckpt_files_at_once(int jobs)
{
    return jobs / 2 < 1 ? 1 : jobs / 2 > CKPT_MAX_FILES_AT_ONCE ? CKPT_MAX_FILES_AT_ONCE : jobs / 2;
}

int ckpt_is_packed(const char *dir)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, CKP_MANIFEST_NAME);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int ckpt_swapped(const char *cmd, const char *packed, const char *other, const char *order)
{
    if (!other || ckpt_is_packed(packed) || !ckpt_is_packed(other))
        return 0;
    fprintf(stderr, "ckptfs %s: the arguments look swapped: %s is a packed directory and %s is not.\n"
            "The order is: %s\n", cmd, CKU_ESC(other), CKU_ESC(packed), order);
    return 1;
}

int ckpt_space_check = 1;
int ckpt_verbosity = 1;
int ckpt_json = 0;

void ckpt_json_print(cJSON *o)
{
    char *s = o ? cJSON_Print(o) : NULL;
    if (s)
        puts(s);
    free(s);
    cJSON_Delete(o);
}

int ckpt_check_space(const char *cmd, const char *path, uint64_t need, const char *what)
{
    char p[PATH_MAX];
    struct statvfs v;
    if (!ckpt_space_check)
        return 0;
    snprintf(p, sizeof p, "%s", path);
    while (statvfs(p, &v) != 0) /* the nearest part of path that exists */
        if (!cku_path_up(p, sizeof p))
            return 0;
    uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize, want = need + need / 20 + (16ull << 20);
    if (!v.f_blocks || avail >= want)
        return 0; /* f_blocks 0: a file system that does not count */
    char n[16], a[16];
    fprintf(stderr, "ckptfs %s: not enough free space for %s: about %s needed on the file system of %s "
            "(with a 5%% margin), %s free.\nFree some space there, or choose a place on another file system "
            "(--no-space-check goes ahead anyway).\n",
            cmd, what, cku_human(want, n), CKU_ESC(path), cku_human(avail, a));
    return -1;
}

static char interrupt_msg[1024];

static void on_interrupt(int sig)
{
    ssize_t r = write(STDERR_FILENO, interrupt_msg, strlen(interrupt_msg));
    (void)r;
    signal(sig, SIG_DFL);
    raise(sig);
}

void ckpt_on_interrupt(const char *msg)
{
    snprintf(interrupt_msg, sizeof interrupt_msg, "\n%s\n", msg);
    struct sigaction sa = {.sa_handler = on_interrupt}, old;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) /* one ignored (nohup) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
}
