/*
 * fuse_ll.c — `ckptfs mount`: the FUSE low-level glue (DESIGN §7).
 *
 * The only file that includes <fuse_lowlevel.h>, and it only translates:
 * kernel requests become calls of the inode table (inode_table.h) and of the
 * FUSE-free read path (readpath.h), whose results become replies:
 *   read(ino, off, len) -> ckfs_read: pieces of cache entries (decoded once,
 *   shared) -> fuse_reply_iov straight from them.
 * Everything served is immutable while mounted, so entries and attributes are
 * cached by the kernel forever, files are opened with keep_cache, and no
 * handler takes a lock longer than a cache lookup.  (A packed file that
 * changes under the mount is refused from then on, and its cached pages are
 * dropped: on_change below.)
 *
 * Every handler replies exactly once, on every path.  The daemon's life
 * around these callbacks (the session, its loop, the log, the page-cache
 * notifier) is daemon.c's.
 */
#define _GNU_SOURCE
#include "fuse_ll.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "mount.h"
#include "readpath.h"
#include "util.h"

#define TIMEOUT_FOREVER 1e9        /* seconds (~31 years): nothing ever changes */

/* ---- attributes ---------------------------------------------------------- */

static void fill_stat(const ckfs_ctx *c, uint64_t ino, const cki_node *n, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_mode = S_ISLNK(n->mode) ? n->mode : ckfs_apply_mask(&c->o, n->mode);
    st->st_nlink = S_ISDIR(n->mode) ? 2 + n->n_subdirs : 1;
    st->st_uid = c->uid;
    st->st_gid = c->gid;
    st->st_size = (off_t)n->size;
    st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
    st->st_blksize = 128 << 10;
    st->st_mtim.tv_sec = n->mtime_ns / 1000000000;
    st->st_mtim.tv_nsec = n->mtime_ns % 1000000000;
    if (st->st_mtim.tv_nsec < 0) {
        st->st_mtim.tv_sec--;
        st->st_mtim.tv_nsec += 1000000000;
    }
    st->st_atim = st->st_ctim = st->st_mtim;
}

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
    /* max_write also sets max_pages (libfuse derives one from the other),
     * which bounds read requests too: up to 1 MiB per request. */
    conn->max_write = CKFS_MAX_REQUEST;
    conn->max_read = CKFS_MAX_REQUEST;
    conn->max_readahead = CKFS_MAX_REQUEST;
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;   /* files never change */
    conn->time_gran = 1;
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.attr_timeout = e.entry_timeout = TIMEOUT_FOREVER;
    const cki_node *d = cki_get(c->t, parent);
    if (!d) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (!S_ISDIR(d->mode)) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    uint64_t ino = cki_lookup(c->t, parent, name);
    if (ino) {                     /* ino 0: a negative entry, cached forever too */
        e.ino = ino;
        fill_stat(c, ino, cki_get(c->t, ino), &e.attr);
    }
    fuse_reply_entry(req, &e);
}

static void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    fuse_reply_none(req);          /* inodes live as long as the mount */
}

static void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    fuse_reply_none(req);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    const cki_node *n = cki_get(c->t, ino);
    if (!n) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct stat st;
    fill_stat(c, ino, n, &st);
    fuse_reply_attr(req, &st, TIMEOUT_FOREVER);
}

static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    fuse_reply_err(req, (mask & W_OK) ? EROFS : 0);
}

/* ---- files --------------------------------------------------------------- */

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    const cki_node *n = cki_get(c->t, ino);
    if (!n) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (!S_ISREG(n->mode)) { /* the kernel opens the target of a link, never the link */
        fuse_reply_err(req, S_ISDIR(n->mode) ? EISDIR : ELOOP);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        fuse_reply_err(req, EROFS);
        return;
    }
    ckfs_ofile *of;
    int err = ckfs_file_open(c, (uint32_t)n->file, &of);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    ckfs_file_owner(of, fuse_req_ctx(req)->pid);
    fi->fh = (uint64_t)(uintptr_t)of;
    fi->keep_cache = 1;
    fi->noflush = 1;
    if (fuse_reply_open(req, fi) != 0)  /* interrupted: no release will come */
        ckfs_file_close(of);
}

/* A symbolic link's target, as packed (format §7): the kernel resolves it. */
static void ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    const cki_node *n = cki_get(c->t, ino);
    if (!n || !S_ISLNK(n->mode))
        fuse_reply_err(req, n ? EINVAL : ENOENT);
    else
        fuse_reply_readlink(req, n->target);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ckfs_file_close((ckfs_ofile *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

/* Reply with the pieces (at most CKFS_MAX_IOV: ckfs_read copies a read of
 * more chunks).  @return 0 if the data went out. */
static int reply_pieces(fuse_req_t req, const ckfs_pieces *p)
{
    return fuse_reply_iov(req, p->iov, (int)p->n);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    ckfs_ofile *of = (ckfs_ofile *)(uintptr_t)fi->fh;
    const cki_node *n = cki_get(c->t, ino);
    if (!n || !of || off < 0) {
        fuse_reply_err(req, n ? EINVAL : ENOENT);
        return;
    }
    ckfs_pieces p;
    int err = ckfs_read(c, of, n->size, (uint64_t)off, size, &p);
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    if (p.total == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    ckfs_pieces_release(c, &p, reply_pieces(req, &p) == 0);
}

/* ---- directories --------------------------------------------------------- */

static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    const cki_node *n = cki_get(c->t, ino);
    if (!n || !S_ISDIR(n->mode)) {
        fuse_reply_err(req, n ? ENOTDIR : ENOENT);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EROFS);
        return;
    }
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

/* Offsets: 0 ".", 1 "..", 2+i the i-th child (sorted by name). */
static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    const cki_node *d = cki_get(c->t, ino);
    if (!d || !S_ISDIR(d->mode) || off < 0) {
        fuse_reply_err(req, !d ? ENOENT : off < 0 ? EINVAL : ENOTDIR);
        return;
    }
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    for (uint64_t i = (uint64_t)off; i < 2ull + d->n_children; i++) {
        uint64_t cino = i == 0 ? ino : i == 1 ? d->parent : d->children[i - 2];
        const char *name = i == 0 ? "." : i == 1 ? ".." : cki_get(c->t, cino)->name;
        struct stat st = {.st_ino = cino, .st_mode = cki_get(c->t, cino)->mode & S_IFMT};
        size_t need = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)(i + 1));
        if (need > size - used)
            break;
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void ll_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fuse_reply_err(req, 0);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    struct statvfs sv;
    memset(&sv, 0, sizeof sv);
    sv.f_bsize = sv.f_frsize = 4096;
    sv.f_blocks = (c->total_size + 4095) / 4096;
    sv.f_files = cki_count(c->t);
    sv.f_namemax = 255;
    sv.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
    fuse_reply_statfs(req, &sv);
}

/* ---- everything that would change the tree: EROFS ------------------------ */

static void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    fuse_reply_err(req, EROFS);
}
static void ll_mknod(fuse_req_t req, fuse_ino_t p, const char *name, mode_t mode, dev_t rdev)
{
    fuse_reply_err(req, EROFS);
}
static void ll_mkdir(fuse_req_t req, fuse_ino_t p, const char *name, mode_t mode)
{
    fuse_reply_err(req, EROFS);
}
static void ll_unlink(fuse_req_t req, fuse_ino_t p, const char *name)
{
    fuse_reply_err(req, EROFS);
}
static void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t p, const char *name)
{
    fuse_reply_err(req, EROFS);
}
static void ll_rename(fuse_req_t req, fuse_ino_t p, const char *name, fuse_ino_t np,
                      const char *newname, unsigned int flags)
{
    fuse_reply_err(req, EROFS);
}
static void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t np, const char *newname)
{
    fuse_reply_err(req, EROFS);
}
static void ll_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    fuse_reply_err(req, EROFS);
}
static void ll_create(fuse_req_t req, fuse_ino_t p, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    fuse_reply_err(req, EROFS);
}
/* The daemon's counters, as the xattr user.ckptfs.stats of the root (not
 * listed, so copies of the tree do not carry it); no other xattrs. */
static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    if (ino != FUSE_ROOT_ID || strcmp(name, CKFS_STATS_XATTR)) {
        fuse_reply_err(req, ENODATA);
        return;
    }
    char small[2048], *buf = small;
    int n = ckfs_stats_json(c, buf, sizeof small);
    if (n >= (int)sizeof small && (buf = malloc((size_t)n + 1))) /* a long source path */
        n = ckfs_stats_json(c, buf, (size_t)n + 1);
    if (n < 0 || !buf)
        fuse_reply_err(req, n < 0 ? EIO : ENOMEM);
    else if (size == 0)
        fuse_reply_xattr(req, (size_t)n);
    else if (size < (size_t)n)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, buf, (size_t)n);
    if (buf != small)
        free(buf);
}

static void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    fuse_reply_err(req, EROFS);
}
static void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    fuse_reply_err(req, EROFS);
}
static void ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi)
{
    fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops ckfs_ll_ops = {
    .init = ll_init,
    .lookup = ll_lookup,
    .forget = ll_forget,
    .forget_multi = ll_forget_multi,
    .getattr = ll_getattr,
    .readlink = ll_readlink,
    .access = ll_access,
    .open = ll_open,
    .read = ll_read,
    .release = ll_release,
    .opendir = ll_opendir,
    .readdir = ll_readdir,
    .releasedir = ll_releasedir,
    .statfs = ll_statfs,
    .setattr = ll_setattr,
    .mknod = ll_mknod,
    .mkdir = ll_mkdir,
    .unlink = ll_unlink,
    .rmdir = ll_unlink,
    .symlink = ll_symlink,
    .rename = ll_rename,
    .link = ll_link,
    .write = ll_write,
    .create = ll_create,
    .setxattr = ll_setxattr,
    .getxattr = ll_getxattr,
    .removexattr = ll_removexattr,
    .fallocate = ll_fallocate,
};
