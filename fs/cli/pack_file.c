/*
 * pack_file.c — packing one source file, and the files of a run in parallel.
 *
 * A file is mapped, hashed (SHA-256, in its own thread) while it is encoded
 * into a temporary packed file, then fsynced while it is read back and
 * compared with the source chunk by chunk; only then is it renamed into
 * place, its directory fsynced, and (with --delete-source) the source
 * deleted if its name still holds the file that was read (pack.c's
 * invariants).
 */
#define _GNU_SOURCE
#include "hashing.h"
#include "pack_internal.h"
#include "source_map.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

void *sha_thread(void *arg)
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
 * destination; on a full disk say what is free there (tmp removed), what the files not yet
 * packed need at most, and how to finish. */
static void write_failed(pack_ctx *c, const char *tmp, int tfd, const char *why, int err)
{
    struct statvfs sv;
    int full = err == ENOSPC || err == EDQUOT || strstr(why, strerror(ENOSPC)) || strstr(why, strerror(EDQUOT));
    if (dst_lost(c))
        return;
    if (!full || fstatvfs(c->lock_fd, &sv)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(tmp), why);
        return;
    }
    /* what is free once this partial file is removed (its caller does) */
    struct stat pt;
    uint64_t partial = tfd >= 0 && fstat(tfd, &pt) == 0 ? (uint64_t)pt.st_blocks * 512 : 0;
    char free_s[32], need_s[32];
    cku_human((uint64_t)sv.f_bavail * sv.f_frsize + partial, free_s);
    cku_human(atomic_load(&c->left), need_s);
    fprintf(stderr,
            "ckptfs pack: %s: No space left on device (writing %s): %s free there; the files not yet packed\n"
            "  need up to %s more (their size before packing).  Free some space, or move %s to a larger\n"
            "  disk, and run the same command again to finish it.\n",
            c->dst, CKU_ESC(tmp), free_s, need_s, c->dst);
}

ckp_status ckpt_add_extents(ckp_writer *w, uint32_t enc, const uint8_t *p, uint64_t size, const st_header *h,
                            cku_progress *progress)
{
    ckp_status s = CKP_OK;
    if (!h) {
        s = ckp_writer_add(w, CKC_ENC_ZSTD, p, size, NULL, 0);
        cku_progress_add(progress, size);
        return s;
    }
    s = ckp_writer_add(w, CKC_ENC_ZSTD, p, h->data_start, NULL, 0); /* JSON: zstd if it saves 3% */
    cku_progress_add(progress, h->data_start);
    for (size_t i = 0; s == CKP_OK && i < h->n_tensors; i++) {
        const st_tensor *t = &h->tensors[i];
        uint32_t e = t->dtype == 7 ? enc : CKC_ENC_ZSTD; /* 7 = BF16 */
        uint64_t cols = t->ndim >= 2 ? t->shape[t->ndim - 1] : 0; /* archive's column/row contexts */
        s = ckp_writer_add_shaped(w, e, p + h->data_start + t->begin, t->end - t->begin, t->name, t->dtype, cols);
        cku_progress_add(progress, t->end - t->begin);
    }
    return s;
}

/* Encode src into the writer: header extent + one extent per tensor, or one blob extent. */
static int write_extents(pack_ctx *c, ckp_writer *w, const char *tmp, int tfd, const uint8_t *p, uint64_t size,
                         st_header *h)
{
    ckp_status s = ckpt_add_extents(w, c->o->encoding, p, size, h, c->progress);
    if (s != CKP_OK) {
        char why[640];
        snprintf(why, sizeof why, "%s: %s", ckp_status_name(s), ckp_writer_error(w));
        write_failed(c, tmp, tfd, why, 0);
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
        fprintf(stderr, "ckptfs pack: %s: packed copy does not read back equal to the source\n", CKU_ESC(src_path));
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
static int read_back(pack_ctx *c, const char *tmp_name, const char *src_path, const uint8_t *p, uint64_t size,
                     const uint8_t sha[32], int jobs)
{
    char err[512];
    ckp_reader *r;
    if (ckp_open_in(c->lock_fd, c->dst, tmp_name, &r, err, sizeof err) != CKP_OK) {
        if (!dst_lost(c))
            fprintf(stderr, "ckptfs pack: read-back failed: %s\n", err);
        return -1;
    }
    int rc = compare_with_source(r, src_path, p, size, sha, jobs);
    ckp_close(r);
    return rc;
}

/* The temporary name of a packed file, relative to DST: ".<base>.ckpt.tmp"
 * beside it, or where that is over NAME_MAX, ".ckptfs-<hash of
 * base>.ckpt.tmp". */
void tmp_rel(char *out, size_t cap, const char *rel)
{
    const char *slash = strrchr(rel, '/'), *base = slash ? slash + 1 : rel;
    int dir_len = slash ? (int)(slash - rel) : 0;
    char name[NAME_MAX + 1];
    if (1 + strlen(base) + strlen(TMP_SUFFIX) <= NAME_MAX)
        snprintf(name, sizeof name, ".%s" TMP_SUFFIX, base);
    else
        snprintf(name, sizeof name, ".ckptfs-%016llx" TMP_SUFFIX,
                 (unsigned long long)ckc_hash64(base, strlen(base)));
    snprintf(out, cap, "%.*s%s%s", dir_len, rel, slash ? "/" : "", name);
}

/* The private name a source file has while it is being deleted
 * (delete_source); "" if base is too long for one. */
static void aside_name(char *out, size_t cap, const char *base)
{
    if (strlen(ASIDE_PREFIX) + strlen(base) <= NAME_MAX)
        snprintf(out, cap, ASIDE_PREFIX "%s", base);
    else
        *out = 0;
}

/* dir/base is gone but dir/<aside name of base> is there: a run was killed
 * while it deleted base (before it checked what it had renamed), so it is
 * put back, and packed or deleted again like any source.  @return 1 if it
 * was put back. */
int restore_aside(const char *dir, const char *base)
{
    char aside[NAME_MAX + 1];
    aside_name(aside, sizeof aside, base);
    int dfd = *aside ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    int put = dfd >= 0 && renameat2(dfd, aside, dfd, base, RENAME_NOREPLACE) == 0 && fsync(dfd) == 0;
    if (put)
        fprintf(stderr, "ckptfs pack: %s/%s: put back from %s, where a killed run was deleting it\n", CKU_ESC(dir),
                CKU_ESC(base), CKU_ESC(aside));
    if (dfd >= 0)
        close(dfd);
    return put;
}

/* 1 if the packed copy of a source (identity packed) is at DST's final_rel
 * where DST's name leads now, or (rr: a pack sent on, c->o->remote) if the
 * remote copy read back through rr is still there as it was: what
 * delete_source requires last. */
static int packed_copy_there(pack_ctx *c, const char *final_rel, const struct stat *packed, const ckp_reader *rr)
{
    char p[PATH_MAX];
    struct stat st;
    if (rr)
        return c->o->remote->unchanged(c->o->remote, final_rel, rr) == 1;
    join_path(p, sizeof p, c->dst, final_rel, "");
    return !dst_lost(c) && lstat(p, &st) == 0 && st.st_dev == packed->st_dev && st.st_ino == packed->st_ino;
}

/* Delete the source file that was read (identity `read`: device, inode,
 * size, mtime; sm: its map, with the read lease taken for this) and no
 * other, unless a process opened it for writing meanwhile (the lease was
 * broken: writes through a shared mapping change neither size nor mtime),
 * or its packed copy (identity packed, at DST's final_rel) is not where
 * DST's name leads now (DST removed or replaced while the run went on).
 * Checking the name and then unlinking it would
 * leave a window in which a file renamed over the name is deleted instead;
 * so the name is first renamed to a private one beside it (atomic: what is
 * moved is what the name held at that instant, and a file put at the name
 * afterwards is not touched), the moved file's identity is checked, and
 * only then is it unlinked.  Another file, or this one changed, is renamed
 * back and kept.  What remains, as POSIX has no "unlink if unchanged":
 * bytes written after the check into the file by a process that holds it
 * open are deleted with it, as with any delete; a kill between the rename
 * and the unlink leaves the file under the private name, which the next
 * run puts back (restore_aside); and for a name too long for a private
 * one (over NAME_MAX - 17 bytes) the check and the unlink are two system
 * calls on the directory's descriptor, the window of before. */
static int delete_source(pack_ctx *c, const char *src_path, const struct stat *read, const cks_map *sm,
                         const char *final_rel, const struct stat *packed, const ckp_reader *rr)
{
    char dir[PATH_MAX], aside[NAME_MAX + 1];
    snprintf(dir, sizeof dir, "%s", src_path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? src_path + (slash - dir) + 1 : src_path;
    if (slash)
        *slash = 0;
    aside_name(aside, sizeof aside, base);
    const char *victim = *aside ? aside : base;
    cku_fault_point();
    struct stat now;
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = -1;
    if (dfd < 0 || (*aside && renameat2(dfd, base, dfd, aside, RENAME_NOREPLACE)))
        goto fail;
    cku_fault_point(); /* the kill sweep's step: the source under its private name */
    int there = 1;
    const char *why = fstatat(dfd, victim, &now, AT_SYMLINK_NOFOLLOW) == 0 && !cks_same_file(&now, read)
                          ? "it was replaced or changed while it was being packed"
                      : !cks_map_lease_kept(sm) ? "a process opened it for writing while it was being packed"
                      : !(there = packed_copy_there(c, final_rel, packed, rr)) ? "its packed copy is not in DST as DST is now"
                                                                             : NULL;
    if (why) {
        if (*aside && renameat2(dfd, aside, dfd, base, RENAME_NOREPLACE))
            fprintf(stderr, "ckptfs pack: %s: not deleted: %s, and another file took its name since; it is kept "
                    "as %s/%s\n", CKU_ESC(src_path), why, CKU_ESC(dir), CKU_ESC(aside));
        else if (!there)
            fprintf(stderr, "ckptfs pack: %s: not deleted: its packed copy is no longer at %s/%s\n",
                    CKU_ESC(src_path), rr ? c->o->remote->url : CKU_ESC(c->dst), CKU_ESC(final_rel));
        else
            fprintf(stderr, "ckptfs pack: %s: not deleted: %s (its packed copy holds what was read); run the same "
                    "command again to pack it\n", CKU_ESC(src_path), why);
        close(dfd);
        return -1;
    }
    cku_fault_point(); /* the step a file put at the name now must survive (pack_safety.py) */
    if (unlinkat(dfd, victim, 0))
        goto fail;
    cku_fault_point();
    if (fsync(dfd))
        goto fail;
    rc = 0;
    atomic_fetch_add(&c->deleted, 1);
    atomic_fetch_add(&c->deleted_bytes, (uint64_t)read->st_size);
fail:
    if (rc)
        fprintf(stderr, "ckptfs pack: %s: cannot delete source: %s\n", CKU_ESC(src_path), strerror(errno));
    if (dfd >= 0)
        close(dfd);
    return rc;
}

/* Encode the source p[0..size) of e (h: its safetensors header, or NULL
 * for a blob) into the new temporary packed file tmp_name below DST (tmp:
 * its path, for messages), its SHA-256 (in sj) computed in a thread
 * meanwhile.  @return the temporary's descriptor, or -1 after saying why,
 * with nothing left at tmp. */
static int write_packed(pack_ctx *c, const src_entry *e, const char *tmp, const char *tmp_name, const uint8_t *p,
                        uint64_t size, st_header *h, sha_job *sj)
{
    ckp_writer *w = NULL;
    pthread_t sha_th;
    sj->p = p;
    sj->size = size;
    int sha_started = pthread_create(&sha_th, NULL, sha_thread, sj) == 0, ok = 0;
    if (!sha_started)
        sha_thread(sj);
    /* O_EXCL: a new file of this run's, 0600 until it has the source's mode
     * (never through a link, never another file's inode); remove_temps took
     * away an interrupted run's */
    int tfd = openat(c->lock_fd, tmp_name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    cku_fault_point(); /* a kill test's step: the temporary exists, the source is being read */
    if (tfd >= 0 && fchmod(tfd, (e->st.st_mode & 0777) | 0400)) { /* the source's mode, whatever the umask */
        fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(tmp), strerror(errno));
        goto out;
    }
    ckp_writer_opts wo = {.path = e->rel, .kind = h ? CKP_KIND_SAFETENSORS : CKP_KIND_BLOB,
                          .mode = e->st.st_mode & 07777, .mtime_ns = mtime_ns(&e->st), .jobs = c->jobs_each};
    if (tfd < 0 || ckp_writer_new(tfd, &wo, &w) != CKP_OK) {
        int err = errno;
        if (tfd >= 0 || !dst_lost(c))
            fprintf(stderr, "ckptfs pack: %s: %s%s\n", CKU_ESC(tmp), tfd >= 0 ? "cannot start writer" : strerror(err),
                    tfd < 0 && err == EEXIST ? " (another file of this pack has this temporary name: is DST's file "
                                               "system case-insensitive?)" : "");
        goto out;
    }
    if (write_extents(c, w, tmp, tfd, p, size, h))
        goto out;
    if (sha_started)
        pthread_join(sha_th, NULL);
    sha_started = 0;
    if (ckp_writer_finish(w, sj->sha) != CKP_OK) {
        int err = errno;
        write_failed(c, tmp, tfd, *ckp_writer_error(w) ? ckp_writer_error(w) : strerror(err), err);
        goto out;
    }
    ok = 1;
out:
    if (sha_started)
        pthread_join(sha_th, NULL);
    ckp_writer_free(w);
    if (!ok && tfd >= 0) {
        unlinkat(c->lock_fd, tmp_name, 0);
        close(tfd);
        tfd = -1;
    }
    return tfd;
}

/* fsync the temporary packed file tmp_name (descriptor tfd; tmp: its path)
 * while it is read back and compared with the source (sm, of e, with SHA-256
 * sha), which must not have changed meanwhile.  @return 0, or -1 after
 * saying why. */
static int sync_and_read_back(pack_ctx *c, int tfd, const cks_map *sm, const src_entry *e, const char *tmp,
                              const char *tmp_name, const char *src_path, const uint8_t sha[32])
{
    sync_job sy = {.fd = tfd};
    pthread_t sync_th;
    int sync_started = pthread_create(&sync_th, NULL, sync_thread, &sy) == 0;
    if (!sync_started)
        sync_thread(&sy);
    struct stat now;
    int changed = fstat(sm->fd, &now) || !cks_same_file(&now, &e->st) || cks_map_truncated(sm);
    int bad = changed || read_back(c, tmp_name, src_path, sm->p, sm->size, sha, c->jobs_each);
    if (sync_started)
        pthread_join(sync_th, NULL);
    uint64_t at;
    int read_err = changed ? cks_map_read_error(sm, &at) : 0;
    if (read_err)
        fprintf(stderr, "ckptfs pack: %s: cannot read it: %s (at byte %llu)\n", CKU_ESC(src_path),
                strerror(read_err), (unsigned long long)at);
    else if (changed)
        fprintf(stderr, "ckptfs pack: %s: source changed while it was being packed\n", CKU_ESC(src_path));
    if (sy.err)
        write_failed(c, tmp, tfd, strerror(sy.err), sy.err);
    return bad || sy.err ? -1 : 0;
}

/* 0 if e's packed file may take DST's final_rel (final: its path): nothing
 * there, a link, or a packed file of e's own path (an earlier run's, of a
 * source changed since, or damaged: replaced as before).  Else -1 after
 * naming both: a packed file of another source there (where DST's file
 * system does not tell the two names apart, A.bin and a.bin: the rename
 * would replace the other's packed copy, maybe its only copy once
 * --delete-source deleted it), or a file that ckptfs did not write. */
static int final_name_free(pack_ctx *c, const char *final_rel, const char *final, const src_entry *e)
{
    struct stat st;
    if (fstatat(c->lock_fd, final_rel, &st, AT_SYMLINK_NOFOLLOW))
        return 0; /* nothing there (the rename says any other error) */
    if (!S_ISREG(st.st_mode))
        return 0;
    ckp_reader *r;
    char err[512], src_esc[PATH_MAX];
    ckp_status s = ckp_open_in(c->lock_fd, c->dst, final_rel, &r, err, sizeof err);
    if (s == CKP_OK) {
        const char *had = ckp_get_info(r)->path;
        int same = !strcmp(had, e->rel);
        if (!same)
            fprintf(stderr,
                    "ckptfs pack: %s: holds the packed copy of %s/%s, not of %s/%s (where a file system does not "
                    "tell case apart, the two packed names are one); not replaced.  Pack into a directory that tells "
                    "the names apart, or rename one of the sources\n",
                    CKU_ESC(final), CKU_ESC(c->src_root), CKU_ESC(had), CKU_ESC(c->src_root),
                    cku_escape(e->rel, src_esc, sizeof src_esc));
        ckp_close(r);
        return same ? 0 : -1;
    }
    if (s == CKP_ERR_FORMAT) {
        fprintf(stderr, "ckptfs pack: %s: is not a packed file (ckptfs did not write it); not replaced: move it "
                "away to pack %s/%s\n", CKU_ESC(final), CKU_ESC(c->src_root), cku_escape(e->rel, src_esc, sizeof src_esc));
        return -1;
    }
    return 0;
}

/* Rename DST's tmp_name to final_rel (e's packed file) and fsync their
 * directory, if DST's name still leads to this run's DST and the final name
 * is free for e (final_name_free).  @return 0, or -1 after saying why. */
static int put_in_place(pack_ctx *c, const char *tmp_name, const char *final_rel, const src_entry *e)
{
    char final[PATH_MAX], dir[PATH_MAX];
    join_path(final, sizeof final, c->dst, final_rel, "");
    snprintf(dir, sizeof dir, "%s", final_rel);
    char *slash = strrchr(dir, '/');
    *(slash ? slash : dir) = 0;
    if (dst_lost(c) || final_name_free(c, final_rel, final, e))
        return -1;
    cku_fault_point();
    /* nothing there: RENAME_NOREPLACE, so that a file another thread put
     * there since (one name for two sources) is checked, not replaced */
    int rc = renameat2(c->lock_fd, tmp_name, c->lock_fd, final_rel, RENAME_NOREPLACE);
    if (rc && errno == EEXIST) {
        if (final_name_free(c, final_rel, final, e))
            return -1;
        rc = renameat(c->lock_fd, tmp_name, c->lock_fd, final_rel);
    } else if (rc && errno == EINVAL) { /* a file system without RENAME_NOREPLACE */
        rc = renameat(c->lock_fd, tmp_name, c->lock_fd, final_rel);
    }
    if (rc || (cku_fault_point(), fsync_at(c->lock_fd, dir))) {
        if (!dst_lost(c))
            fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(final), strerror(errno));
        return -1;
    }
    return 0;
}

/* With --delete-source: the read lease on the source sm (at src_path) that
 * delete_source checks, taken before it is read.  @return 1, or 0 after
 * saying that a process has it open for writing. */
static int lease_for_delete(cks_map *sm, const char *src_path)
{
    if (cks_map_lease(sm) != CKS_LEASE_WRITERS)
        return 1;
    fprintf(stderr, "ckptfs pack: %s: open for writing by another process: not packed, as --delete-source would "
            "delete it with what that process writes next; close it (or pack without --delete-source) and run the "
            "same command again\n", CKU_ESC(src_path));
    return 0;
}

/* A pack sent on (c->o->remote): send DST's packed file final_rel of e
 * (made and read back equal to the source), remove it from DST (a rerun
 * makes it again if need be), then with --delete-source open the remote
 * copy, decode every chunk of it and compare it with the source (sm, its
 * SHA-256 sha) and delete the source only if that copy is still there as it
 * was read.  @return 0, or -1 after saying why. */
static int send_on(pack_ctx *c, const src_entry *e, const char *src_path, const char *final_rel, const cks_map *sm,
                   const uint8_t sha[32])
{
    ckpt_pack_remote *rm = c->o->remote;
    ckp_reader *rr = NULL;
    int rc = rm->send(rm, c, final_rel);
    unlinkat(c->lock_fd, final_rel, 0);
    if (!rc && c->o->delete_source) {
        int o = rm->open(rm, final_rel, 1, &rr);
        if (o == 1)
            fprintf(stderr, "ckptfs pack: %s/%s: not there after it was sent; %s kept\n", rm->url, CKU_ESC(final_rel),
                    CKU_ESC(src_path));
        rc = o != 0 || compare_with_source(rr, src_path, sm->p, sm->size, sha, c->jobs_each) ||
                     cks_map_truncated(sm) || delete_source(c, src_path, &e->st, sm, final_rel, NULL, rr)
                 ? -1
                 : 0;
    }
    if (rr)
        ckp_close(rr);
    return rc;
}

/* Pack one file; on success the packed file is durable and verified: the
 * source mapped and checked, encoded into a temporary, synced and read back
 * equal, renamed into place, then (--delete-source) the source deleted. */
static int pack_file(pack_ctx *c, const src_entry *e)
{
    char src_path[PATH_MAX], final_rel[PATH_MAX], tmp_name[PATH_MAX], tmp[PATH_MAX];
    join_path(src_path, sizeof src_path, c->src_root, e->rel, "");
    snprintf(final_rel, sizeof final_rel, "%s%s", e->rel, CKP_SUFFIX);
    tmp_rel(tmp_name, sizeof tmp_name, e->rel);
    join_path(tmp, sizeof tmp, c->dst, tmp_name, "");
    int tfd = -1, rc = -1;
    cks_map sm;
    st_header *h = NULL;
    sha_job sj = {0};
    char why[512];
    struct stat packed;
    if (cks_map_open(src_path, &sm, why, sizeof why)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(src_path), why);
        goto out;
    }
    if (!cks_same_file(&sm.st, &e->st)) {
        fprintf(stderr, "ckptfs pack: %s: changed since the start of this run; run the same command again\n",
                CKU_ESC(src_path));
        goto out;
    }
    if (c->o->delete_source && !lease_for_delete(&sm, src_path))
        goto out;
    if ((e->is_st || (has_suffix(e->rel, ".safetensors") && !e->as_blob)) &&
        !(h = check_safetensors(src_path, sm.p, sm.size)))
        goto out;
    if ((tfd = write_packed(c, e, tmp, tmp_name, sm.p, sm.size, h, &sj)) < 0 ||
        sync_and_read_back(c, tfd, &sm, e, tmp, tmp_name, src_path, sj.sha) || fstat(tfd, &packed) ||
        put_in_place(c, tmp_name, final_rel, e))
        goto out;
    rc = 0;
    if (c->o->remote)
        rc = send_on(c, e, src_path, final_rel, &sm, sj.sha);
    else if (c->o->delete_source)
        rc = delete_source(c, src_path, &e->st, &sm, final_rel, &packed, NULL);
out:
    if (rc && tfd >= 0)
        unlinkat(c->lock_fd, tmp_name, 0);
    if (tfd >= 0)
        close(tfd);
    st_free(h);
    cks_map_close(&sm);
    return rc;
}

/* Is the packed file for e already complete and made from this source? */
static int already_packed(pack_ctx *c, const src_entry *e)
{
    char final_rel[PATH_MAX], err[512];
    snprintf(final_rel, sizeof final_rel, "%s%s", e->rel, CKP_SUFFIX);
    ckp_reader *r;
    struct stat packed;
    /* no link followed below DST: a link in DST (to a valid pack elsewhere)
     * is not "already packed", else the source was deleted and DST held
     * only the link */
    ckpt_pack_remote *rm = c->o->remote; /* or the remote copy, where the pack is sent on */
    if (rm ? rm->open(rm, final_rel, c->o->delete_source, &r) != 0
           : fstatat(c->lock_fd, final_rel, &packed, AT_SYMLINK_NOFOLLOW) ||
                 ckp_open_in(c->lock_fd, c->dst, final_rel, &r, err, sizeof err) != CKP_OK)
        return 0;
    const ckp_info *in = ckp_get_info(r);
    int same = in->original_size == (uint64_t)e->st.st_size && in->mtime_ns == mtime_ns(&e->st) &&
               !strcmp(in->path, e->rel) && (rm || fstat(ckp_fd(r), &packed) == 0);
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
    /* a source open for writing is left to pack_file, which says so */
    if (cks_map_open(src_path, &sm, err, sizeof err) == 0 && cks_same_file(&sm.st, &e->st) &&
        cks_map_lease(&sm) != CKS_LEASE_WRITERS) {
        sj.p = sm.p;
        sj.size = sm.size;
        sha_thread(&sj);
        equal = compare_with_source(r, src_path, sm.p, sm.size, sj.sha, c->jobs_each) == 0 &&
                !cks_map_truncated(&sm);
    }
    int deleted = equal && delete_source(c, src_path, &e->st, &sm, final_rel, &packed, rm ? r : NULL) == 0;
    ckp_close(r);
    cks_map_close(&sm);
    return deleted ? 2 : 0;
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

int pack_files(pack_ctx *c, size_t n_files)
{
    int jobs = c->o->jobs < 1 ? 1 : c->o->jobs;
    int at_once = (jobs + 1) / 2;  /* at least two threads per file where there are cores for it */
    if (at_once > CKPT_MAX_FILES_AT_ONCE)
        at_once = CKPT_MAX_FILES_AT_ONCE;
    if (c->o->remote) /* each file is sent on by its worker: one staged file a worker */
        at_once = c->o->remote->files_at_once;
    if ((size_t)at_once > n_files)
        at_once = n_files ? (int)n_files : 1;
    c->jobs_each = jobs / at_once > 0 ? jobs / at_once : 1;
    file_pool fp = {.c = c};
    atomic_init(&fp.next, 0);
    atomic_init(&fp.failed, 0);
    cku_run_threads(at_once, file_worker, &fp);
    return atomic_load(&fp.failed) ? -1 : 0;
}
