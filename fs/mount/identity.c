/*
 * identity.c — a packed file's identity while mounted, and the
 * re-validation of a file found changed (identity.h).
 *
 * State of each file (ckfs_mfile, by its lock): `bound` is what the reader
 * in use was when it was bound; `changed` is EIO while the file at the path
 * is refused, and `refused` the version (device, inode, size, mtime,
 * ctime) refused last, so that a refused file is opened and checked again
 * only once it changes again.  A re-validated file in place of the bound
 * one (rename, rsync) gets a reader of its own, published in f->r; the old
 * reader is kept on f->retired until unmount, since requests and windows
 * in flight may still decode from it (its bytes are checked against the
 * same chunk hashes).  At most MAX_RETIRED per file: a file replaced more
 * often than that is refused until the next mount, so that what the daemon
 * holds stays bounded.  A file rewritten in place (the same inode) keeps
 * its reader: only `bound` moves on.
 */
#define _GNU_SOURCE
#include "identity.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "packed_io.h"
#include "s3_mount.h"
#include "util.h"

#define MAX_RETIRED 16 /* readers replaced by re-validated files, per file, until unmount */

typedef struct ckfs_retired {
    struct ckfs_retired *next;
    ckp_reader *r;
    int dfd;                       /* its O_DIRECT descriptor, or -1 */
} ckfs_retired;

static int same_time(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* The same version of the same file: device, inode, size, mtime, ctime. */
static int same_version(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           same_time(&a->st_mtim, &b->st_mtim) && same_time(&a->st_ctim, &b->st_ctim);
}

/* What tells the file at f's path (p, or perr: why it cannot be looked at)
 * from the one bound, whose descriptor fd is; "" when nothing does.  A
 * writer can set the mtime back, not the ctime. */
static void describe(const ckfs_mfile *f, int fd, int perr, const struct stat *p, char *what, size_t cap)
{
    const struct stat *b = &f->bound;
    struct stat now;
    what[0] = 0;
    if (perr) {
        if (perr != ENAMETOOLONG) /* longer than PATH_MAX: only the descriptor is checked */
            snprintf(what, cap, "removed while mounted (%s)", strerror(perr));
    } else if (p->st_dev != b->st_dev || p->st_ino != b->st_ino) {
        snprintf(what, cap, "replaced while mounted (its path names another file now)");
    }
    if (what[0] || fstat(fd, &now) != 0)
        return;
    if (now.st_size != b->st_size)
        snprintf(what, cap, "changed size while mounted (%lld bytes, was %lld)", (long long)now.st_size,
                 (long long)b->st_size);
    else if (!same_time(&now.st_mtim, &b->st_mtim))
        snprintf(what, cap, "changed while mounted (written: its mtime changed)");
    else if (!same_time(&now.st_ctim, &b->st_ctim))
        snprintf(what, cap, "changed while mounted (its ctime changed: written, linked, renamed or its "
                            "mode changed)");
}

/* 1 if a and b have the same extent k: what a decode reads (planes,
 * codebook, escapes) and what it checks the bytes against (the chunk
 * index: datums and hashes), so that a cache key, a window and a decode
 * mean the same bytes under either. */
static int same_extent(const ckp_extent *a, const ckp_extent *b)
{
    return a->orig_offset == b->orig_offset && a->orig_size == b->orig_size && a->encoding == b->encoding &&
           a->chunk_size == b->chunk_size && a->n_chunks == b->n_chunks && a->n_escapes == b->n_escapes &&
           a->dtype == b->dtype && !memcmp(a->plane_offset, b->plane_offset, sizeof a->plane_offset) &&
           !memcmp(a->plane_size, b->plane_size, sizeof a->plane_size) &&
           !memcmp(&a->codebook, &b->codebook, sizeof a->codebook) && !strcmp(a->name, b->name) &&
           !memcmp(a->index, b->index, a->n_chunks * sizeof *a->index);
}

/* 1 if readers a and b have the same table of contents (as far as a reader
 * of the original bytes can tell: every extent, and the whole file's
 * size, packed size and SHA-256). */
static int same_toc(const ckp_reader *a, const ckp_reader *b)
{
    const ckp_info *x = ckp_get_info(a), *y = ckp_get_info(b);
    if (x->original_size != y->original_size || x->packed_size != y->packed_size ||
        x->n_extents != y->n_extents || memcmp(x->sha256, y->sha256, 32))
        return 0;
    for (uint32_t e = 0; e < x->n_extents; e++)
        if (!same_extent(ckp_get_extent(a, e), ckp_get_extent(b, e)))
            return 0;
    return 1;
}

/* n (open on the file now at f's path, fstat nst) passed: serve it.  By
 * f->lock.  @return 0, or EIO with why (too many replacements). */
static int adopt(ckfs_ctx *c, ckfs_mfile *f, ckp_reader *n, const struct stat *nst, char *why, size_t cap)
{
    ckp_reader *r = atomic_load_explicit(&f->r, memory_order_relaxed);
    if (nst->st_dev == f->bound.st_dev && nst->st_ino == f->bound.st_ino) {
        ckp_close(n); /* rewritten in place: r reads the same file */
        f->bound = *nst;
        return 0;
    }
    ckfs_retired *old = f->n_retired < MAX_RETIRED ? malloc(sizeof *old) : NULL;
    if (!old) {
        snprintf(why, cap, f->n_retired < MAX_RETIRED ? "out of memory"
                                                      : "replaced more than %d times while mounted: mount it again",
                 MAX_RETIRED);
        ckp_close(n);
        return EIO;
    }
    *old = (ckfs_retired){.next = f->retired, .r = r, .dfd = ckfs_packed_io_detach(f)};
    f->retired = old;
    f->n_retired++;
    f->bound = *nst;
    if (c->o.drop_packed)
        ckfs_no_readahead(n);
    atomic_store_explicit(&f->r, n, memory_order_release);
    return 0;
}

/* Open the file now at file i's path and serve it if it passes (identity.h).
 * By f->lock.  @return 0, or EIO with why in why and its version in *seen
 * (left alone when it could not be opened). */
static int revalidate(ckfs_ctx *c, uint32_t i, struct stat *seen, char *why, size_t cap)
{
    ckfs_mfile *f = &c->files[i];
    ckp_reader *n = NULL;
    int err = ckfs_open_reader(c, i, &n, why, cap);
    if (err)
        return EIO;
    if (fstat(ckp_fd(n), seen) != 0) {
        snprintf(why, cap, "cannot look at it: %s", strerror(errno));
        ckp_close(n);
        return EIO;
    }
    if (!same_toc(atomic_load_explicit(&f->r, memory_order_relaxed), n)) {
        snprintf(why, cap, "its table of contents is not the one mounted (another file, or packed again "
                           "differently: mount it again to serve that)");
        ckp_close(n);
        return EIO;
    }
    return adopt(c, f, n, seen, why, cap);
}

int ckfs_check_bound(ckfs_ctx *c, uint32_t i, const ckp_reader *r, int *fresh)
{
    *fresh = 0;
    if (c->s3) /* an object: its ETag, checked by every GET (If-Match) */
        return ckfs_s3_check(c, i, r);
    ckfs_mfile *f = &c->files[i];
    struct stat p;
    char what[256], why[1024];
    pthread_mutex_lock(&f->lock);
    int perr = fstatat(AT_FDCWD, f->at, &p, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
    int was = atomic_load_explicit(&f->changed, memory_order_relaxed);
    if (!was) {
        describe(f, ckp_fd(atomic_load_explicit(&f->r, memory_order_relaxed)), perr, &p, what, sizeof what);
        if (!what[0]) {
            pthread_mutex_unlock(&f->lock);
            return 0;
        }
    } else if (perr ? perr == f->refused_errno : !f->refused_errno && same_version(&p, &f->refused)) {
        pthread_mutex_unlock(&f->lock);
        return EIO; /* the version refused already */
    } else {
        snprintf(what, sizeof what, "refused before, changed again");
    }
    struct stat seen = p;
    int err = perr && perr != ENAMETOOLONG ? EIO : revalidate(c, i, &seen, why, sizeof why);
    if (err) {
        if (perr)
            snprintf(why, sizeof why, "%s", strerror(perr));
        f->refused = seen;
        f->refused_errno = perr;
        atomic_store(&f->changed, EIO);
    } else {
        atomic_store(&f->changed, 0);
    }
    pthread_mutex_unlock(&f->lock);
    const char *name = CKU_ESC(c->m->files[i].path);
    if (err && !was) {
        ckfs_log("%s: packed file %s; the file there is refused (%s): its opens and reads fail with EIO "
                 "until a copy that passes is put back",
                 name, what, why);
        if (c->on_change)
            c->on_change(c->on_change_arg, i);
    } else if (!err) {
        ckfs_info("%s: packed file %s; re-validated (the manifest's SHA-256, the same table of contents "
                  "and chunk hashes): served again",
                  name, what);
        *fresh = 1;
    }
    return err;
}

void ckfs_identity_free(ckfs_mfile *f)
{
    while (f->retired) {
        ckfs_retired *x = f->retired;
        f->retired = x->next;
        ckp_close(x->r);
        if (x->dfd >= 0)
            close(x->dfd);
        free(x);
    }
}
