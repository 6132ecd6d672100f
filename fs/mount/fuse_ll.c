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
 * Every handler replies exactly once, on every path.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
    st->st_mode = ckfs_apply_mask(&c->o, n->mode);
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
    if (S_ISDIR(n->mode)) {
        fuse_reply_err(req, EISDIR);
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
    fi->fh = (uint64_t)(uintptr_t)of;
    fi->keep_cache = 1;
    fi->noflush = 1;
    if (fuse_reply_open(req, fi) != 0)  /* interrupted: no release will come */
        ckfs_file_close(of);
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

static const struct fuse_lowlevel_ops ckfs_ops = {
    .init = ll_init,
    .lookup = ll_lookup,
    .forget = ll_forget,
    .forget_multi = ll_forget_multi,
    .getattr = ll_getattr,
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

/* ---- the kernel's pages of a packed file changed while mounted ------------ */

/* When the read path finds a packed file changed since it was bound
 * (readpath.h: its opens and reads are EIO from then on), the pages the
 * kernel cached of its inode are dropped too, so that readers holding it
 * open (or mapped) get EIO from then on as well, not some of its bytes from
 * the cache and EIO for the rest.  Those pages hold the original bytes
 * (each chunk was checked against its hash when decoded): dropping them is
 * for a failure that is the same at every offset, not for correctness.
 * The kernel locks each cached page to drop it, waiting for reads of the
 * file in flight, which only this daemon's workers answer: so it is done on
 * a thread of its own (the finder may be a worker inside such a read), and
 * at exit, while it is still at it, the main thread answers requests
 * itself (stop_inval). */
static struct {
    struct fuse_session *se;
    const cki_table *t;
    int pipe[2];                  /* file numbers from on_change to inval_main */
    pthread_t thread;
    int started;
    pthread_mutex_t lock;         /* busy, stopping */
    int busy, stopping;
} g_inval = {.pipe = {-1, -1}, .lock = PTHREAD_MUTEX_INITIALIZER};

static void on_change(void *arg, uint32_t file)
{
    (void)arg;
    /* once per file; a full pipe (thousands of files changed at once)
     * leaves the pages of the rest to the kernel's reclaim */
    pthread_mutex_lock(&g_inval.lock);
    if (!g_inval.stopping && write(g_inval.pipe[1], &file, sizeof file) != (ssize_t)sizeof file) {
    }
    pthread_mutex_unlock(&g_inval.lock);
}

static void *inval_main(void *arg)
{
    ckfs_ctx *c = arg;
    uint32_t file;
    while (read(g_inval.pipe[0], &file, sizeof file) == (ssize_t)sizeof file) {
        pthread_mutex_lock(&g_inval.lock);
        int go = !g_inval.stopping;
        g_inval.busy = go;
        pthread_mutex_unlock(&g_inval.lock);
        if (!go)
            continue;
        int rc = fuse_lowlevel_notify_inval_inode(g_inval.se, (fuse_ino_t)cki_file_ino(g_inval.t, file), 0, 0);
        if (rc && rc != -ENOENT) /* ENOENT: the kernel holds no inode (nor pages) of it */
            ckfs_log("%s: cannot drop the kernel's cached pages of it: %s", CKU_ESC(c->m->files[file].path),
                     strerror(-rc));
        pthread_mutex_lock(&g_inval.lock);
        g_inval.busy = 0;
        pthread_mutex_unlock(&g_inval.lock);
    }
    return NULL;
}

/* Start the thread (after fuse_daemonize: threads do not survive its fork)
 * and hook it to the read path.  Without it (no pipe or thread) changed
 * files are EIO all the same; only their cached pages stay. */
static void start_inval(ckfs_ctx *c, struct fuse_session *se)
{
    g_inval.se = se;
    g_inval.t = c->t;
    if (pipe2(g_inval.pipe, O_CLOEXEC) != 0) {
        ckfs_log("cannot start the page cache notifier: %s", strerror(errno));
        return;
    }
    fcntl(g_inval.pipe[1], F_SETFL, O_NONBLOCK);
    if ((errno = pthread_create(&g_inval.thread, NULL, inval_main, c)) != 0) {
        ckfs_log("cannot start the page cache notifier: %s", strerror(errno));
        close(g_inval.pipe[0]);
        close(g_inval.pipe[1]);
        g_inval.pipe[0] = g_inval.pipe[1] = -1;
        return;
    }
    g_inval.started = 1;
    c->on_change_arg = NULL;
    c->on_change = on_change;
}

static int inval_busy(void)
{
    pthread_mutex_lock(&g_inval.lock);
    int b = g_inval.busy;
    pthread_mutex_unlock(&g_inval.lock);
    return b;
}

/* After the loop: no new invalidation starts; one in progress may wait for
 * reads that no worker will answer any more, so answer them here until it
 * returns; then end the thread. */
static void stop_inval(struct fuse_session *se)
{
    pthread_mutex_lock(&g_inval.lock);
    g_inval.stopping = 1;         /* on_change writes nothing more (prefetch workers still run) */
    if (g_inval.pipe[1] >= 0)
        close(g_inval.pipe[1]);   /* inval_main reads what is left, skips it, and returns */
    g_inval.pipe[1] = -1;
    pthread_mutex_unlock(&g_inval.lock);
    if (inval_busy()) {
        fuse_session_reset(se); /* a request read while exited is dropped unanswered */
        while (inval_busy()) {
            struct pollfd p = {.fd = fuse_session_fd(se), .events = POLLIN};
            if (poll(&p, 1, 20) <= 0)
                continue;
            if (!(p.revents & POLLIN))
                break;           /* the connection is gone: the kernel let go of the pages */
            struct fuse_buf fb = {.mem = NULL};
            int res = fuse_session_receive_buf(se, &fb);
            if (res > 0)
                fuse_session_process_buf(se, &fb);
            free(fb.mem);
            if (res <= 0 && res != -EINTR && res != -EAGAIN)
                break;
        }
        fuse_session_exit(se);
    }
    if (g_inval.started)
        pthread_join(g_inval.thread, NULL);
    if (g_inval.pipe[0] >= 0)
        close(g_inval.pipe[0]);
    g_inval.pipe[0] = -1;
    g_inval.started = 0;
}

/* ---- setup and the loop -------------------------------------------------- */

/* Readers stay open for the whole mount: allow as many descriptors as the
 * hard limit lets us (a model has at most a few thousand shards). */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* The -o list handed to libfuse: our fixed options plus the user's. */
static char *fuse_opt_string(const ckfs_ctx *c)
{
    char *esc = malloc(2 * strlen(c->dst) + 1), *w = esc, *s = NULL;
    if (!esc)
        return NULL;
    for (const char *r = c->dst; *r; r++) {
        if (*r == ',' || *r == '\\')
            *w++ = '\\';
        *w++ = *r;
    }
    *w = 0;
    if (asprintf(&s, "ro,nosuid,nodev,fsname=ckptfs:%s,subtype=ckptfs,max_read=%u%s%s%s", esc,
                 CKFS_MAX_REQUEST, c->o.allow_other ? ",allow_other,default_permissions" : "",
                 c->o.noexec ? ",noexec" : "", c->o.noatime ? ",noatime" : "") < 0)
        s = NULL;
    free(esc);
    return s;
}

/* Mount, serve until unmounted or signalled, unmount.  @return exit status. */
/* bytes for a person, in the units of the options (K/M/G, powers of 1024). */
static char *human(uint64_t b, char *out)
{
    static const char u[] = "BKMGTP";
    int i = 0;
    double v = (double)b;
    while (v >= 1024 && i < 5) {
        v /= 1024;
        i++;
    }
    snprintf(out, 32, i ? "%.1f%c" : "%.0f%c", v, u[i]);
    return out;
}

/* -o log=: "stderr" (a copy survives daemonizing) or a regular file,
 * appended to.  The file is opened without following a symbolic link in
 * its place and must be a regular file: a daemon run as root with its log
 * in a directory others can write (/tmp) would otherwise append its lines
 * to whatever file a link planted there names, or block on a FIFO.
 * @return 0, or -1 with a message. */
static int open_log(const char *where)
{
    if (!strcmp(where, "stderr")) {
        int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (fd < 0) {
            fprintf(stderr, "ckptfs mount: log=stderr: %s\n", strerror(errno));
            return -1;
        }
        ckfs_log_to_fd(fd);
        return 0;
    }
    struct stat st;
    int fd = open(where, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0640);
    if (fd < 0 && errno != ENXIO) { /* ENXIO: a FIFO nobody reads */
        fprintf(stderr, "ckptfs mount: log=%s: %s\n", where,
                errno == ELOOP ? "a symbolic link: name the log file itself" : strerror(errno));
        return -1;
    }
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ckptfs mount: log=%s: not a regular file (log=stderr logs to a pipe or terminal)\n",
                where);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    ckfs_log_to_fd(fd);
    return 0;
}

static int serve(ckfs_ctx *c, const char *mnt)
{
    int status = 1;
    char *opts = fuse_opt_string(c);
    char *fargv[] = {"ckptfs", "-o", opts, c->o.debug ? "-d" : NULL, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(c->o.debug ? 4 : 3, fargv);
    struct fuse_session *se = opts ? fuse_session_new(&args, &ckfs_ops, sizeof ckfs_ops, c) : NULL;
    if (!se)
        goto out_opts;
    /* libfuse leaves a signal alone when it is ignored, and shells start
     * background jobs with SIGINT ignored: unmount cleanly on all three. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    if (fuse_session_mount(se, mnt) != 0)
        goto out_signals;
    if (c->o.read_ahead_kb && ckfs_set_read_ahead_kb(mnt, c->o.read_ahead_kb) != 0 &&
        geteuid() == 0)
        fprintf(stderr, "ckptfs mount: warning: cannot set read_ahead_kb: %s\n", strerror(errno));
    if (fuse_daemonize(c->o.foreground) != 0)
        goto out_unmount;
    if (!c->o.foreground)
        ckfs_log_to_syslog();
    /* Threads start only now: fuse_daemonize forks. */
    if (ckfs_cache_start(c) != 0)
        goto out_unmount;
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    if (!cfg) {
        ckfs_log("out of memory");
        goto out_cache;
    }
    start_inval(c, se);
    fuse_loop_cfg_set_max_threads(cfg, c->o.threads);
    fuse_loop_cfg_set_clone_fd(cfg, 0);
    char size_s[32], cache_s[32];
    ckfs_info("serving %s at %s: %zu files, %s; cache %s, %u threads, prefetch %llu KiB on %u workers, %s%s",
              c->dst, mnt, c->m->n_files, human(c->total_size, size_s), human(c->o.cache_size, cache_s),
              c->o.threads, (unsigned long long)(c->o.prefetch >> 10), c->o.prefetch_threads,
              c->o.mmap ? "mapped" : "pread", c->o.drop_packed ? ", drop_packed" : "");
    int rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
    stop_inval(se);
    /* 0: unmounted (fusermount3 -u); > 0: the signal that stopped us
     * (libfuse's handlers record it); < 0: -errno of a failure. */
    if (rc < 0)
        ckfs_log("session loop failed: %s (%d)", strerror(-rc), rc);
    status = rc < 0 ? 1 : 0;
    if (c->o.stats)
        ckfs_print_stats(c);
out_cache:
    ckfs_cache_stop(c);
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out_opts:
    free(opts);
    fuse_opt_free_args(&args);
    return status;
}

int ckptfs_mount_main(int argc, char **argv)
{
    ckfs_ctx c;
    char err[1024];
    memset(&c, 0, sizeof c);
    ckfs_status st = ckfs_parse_mount_args(argc, argv, &c.o, err, sizeof err);
    if (st == CKFS_OK && c.o.help) {
        fputs(ckfs_mount_usage(), stdout);
        return 0;
    }
    if (st == CKFS_OK)
        st = ckfs_check_mountpoint(c.o.mnt, err, sizeof err);
    if (st != CKFS_OK) {
        fprintf(stderr, "%s\n", err);
        return ckfs_exit_status(st); /* 2 for a usage error, as for every command */
    }
    char *mnt = realpath(c.o.mnt, NULL);
    int status = 1, served = 0;
    /* Buffers of 1 MiB and more (chunks over the writer's sizes, their
     * scratch) are mapped and unmapped by malloc itself: with glibc's
     * moving threshold, freed ones stayed in each thread's arena and the
     * daemon grew far past cache_size reading a pack of 16 MiB chunks. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    raise_fd_limit(); /* before ckfs_open_all opens every packed file */
    /* complaints until the log opens go to stderr */
    if (!mnt) {
        fprintf(stderr, "ckptfs mount: %s: %s\n", c.o.mnt, strerror(errno));
        status = ckfs_exit_status(errno == ENOMEM ? CKFS_ERR_NOMEM : CKFS_ERR_IO);
    } else if ((st = ckfs_check_mountpoint_free(mnt, c.o.nonempty, err, sizeof err)) != CKFS_OK) {
        fprintf(stderr, "%s\n", err);
        status = ckfs_exit_status(st);
    } else if ((st = ckfs_ctx_load(&c, err, sizeof err)) != CKFS_OK) {
        fprintf(stderr, "ckptfs mount: %s\n", err);
        status = ckfs_exit_status(st);
    } else if ((st = ckfs_check_mountpoint_outside(mnt, c.dst, err, sizeof err)) != CKFS_OK) {
        fprintf(stderr, "%s\n", err);
        status = ckfs_exit_status(st);
    } else if ((st = ckfs_open_all(&c, err, sizeof err)) != CKFS_OK) {
        fprintf(stderr, "ckptfs mount: %s\n", err);
        status = ckfs_exit_status(st);
    } else if (!c.o.log[0] || open_log(c.o.log) == 0) {
        status = serve(&c, mnt);
        served = 1;
    }
    ckfs_ctx_free(&c);
    free(mnt);
    if (status && served)
        ckfs_log("exiting with status %d after serving", status); /* every such exit says why above */
    return status;
}
