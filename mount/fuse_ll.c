/*
 * fuse_ll.c — `ckptfs mount`: the FUSE low-level glue (DESIGN §7).
 *
 * The only file that includes <fuse_lowlevel.h>.  It maps kernel requests
 * onto the inode table (inode_table.c), the container reader (container.h)
 * and the chunk cache (chunk_cache.c):
 *   read(ino, off, len) -> the chunks overlapping [off, off+len) -> cache
 *   entries (decoded once, shared) -> fuse_reply_iov straight from them.
 * Everything served is immutable while mounted, so entries and attributes are
 * cached by the kernel forever, files are opened with keep_cache, and no
 * handler takes a lock longer than a cache lookup.
 *
 * Every handler replies exactly once, on every path.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <syslog.h>
#include <unistd.h>

#include "chunk_cache.h"
#include "container.h"
#include "inode_table.h"
#include "manifest.h"
#include "mount.h"
#include "mount_opts.h"

#define TIMEOUT_FOREVER 1e9        /* seconds (~31 years): nothing ever changes */
#define MAX_IOV 1000               /* below IOV_MAX, leaving room for the header */
#define MAX_PREFETCH_CHUNKS 64     /* chunks queued per read request */
#define HINT_WINDOWS 4             /* disk readahead: this many prefetch windows ahead */

/* A packed file, opened on first open(2) and kept open until unmount. */
typedef struct {
    pthread_mutex_t lock;          /* serializes the first open */
    _Atomic(ckp_reader *) r;
    int open_err;                  /* remembered damage (EIO) after a failed open; by lock */
} mfile;

typedef struct {
    ckfs_mount_opts o;
    char *dst;                     /* absolute path of the packed directory */
    ckm_manifest *m;
    cki_table *t;
    mfile *files;                  /* one per manifest file */
    ckcache *cache;
    uid_t uid;
    gid_t gid;
    uint64_t total_size;
    atomic_ulong reads, read_bytes, big_reads; /* big: >= 512 KiB */
} ckfs_ctx;

/* An open file: the state of sequential-read detection (by lock). */
typedef struct {
    uint32_t file;
    pthread_mutex_t lock;
    uint64_t next_off;             /* end of the furthest recent read */
    unsigned seq;                  /* near-sequential reads in a row */
    uint64_t ahead_to;             /* decode-ahead requested up to here */
    uint64_t hint_to;              /* disk readahead hinted up to here */
} ofile;

static int g_syslog;               /* log to syslog once daemonized */

static void ckfs_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (g_syslog) {
        vsyslog(LOG_ERR, fmt, ap);
    } else {
        fputs("ckptfs: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

/* ---- per-thread decode scratch ------------------------------------------ */

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *p) { ckp_scratch_free(p); }
static void scratch_key_init(void) { pthread_key_create(&scratch_key, scratch_destroy); }

static ckp_scratch *thread_scratch(void)
{
    pthread_once(&scratch_once, scratch_key_init);
    ckp_scratch *s = pthread_getspecific(scratch_key);
    if (!s && (s = ckp_scratch_new()) != NULL)
        pthread_setspecific(scratch_key, s);
    return s;
}

/* ---- SIGBUS from mapped packed files ------------------------------------- */

/* Packed files are mapped (CKP_OPEN_MMAP): if one shrinks while mounted (it
 * should never change, but it is someone else's file), loading a page past
 * its new end raises SIGBUS in the thread decoding.  The handler jumps back
 * out of the decode, which fails with EIO; a SIGBUS anywhere else (not armed)
 * gets the default action.  The jump leaves only the decode's thread scratch
 * (a zstd context reset on its next use) and the cache buffer, which the
 * cache frees on error.  SA_NODEFER: the jump does not restore a mask, so
 * SIGBUS must not stay blocked after it. */
static __thread sigjmp_buf bus_jmp;
static __thread volatile sig_atomic_t bus_armed;

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
    (void)si;
    (void)uctx;
    if (bus_armed) {
        bus_armed = 0;
        siglongjmp(bus_jmp, 1);
    }
    signal(sig, SIG_DFL);      /* not ours: die as without the handler */
    raise(sig);
}

static int install_sigbus(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGBUS, &sa, NULL);
}

/* ---- readers and chunks -------------------------------------------------- */

static int open_reader(ckfs_ctx *c, uint32_t i, ckp_reader **out)
{
    const ckm_file *f = &c->m->files[i];
    char *path, msg[512];
    if (asprintf(&path, "%s/%s%s", c->dst, f->path, CKP_SUFFIX) < 0)
        return ENOMEM;
    ckp_status st = ckp_open_ex(path, c->o.mmap ? CKP_OPEN_MMAP : 0, out, msg, sizeof msg);
    free(path);
    if (st != CKP_OK) {
        ckfs_log("%s: cannot open packed file: %s", f->path, msg);
        return ckp_status_errno(st);
    }
    if (ckp_get_info(*out)->original_size != f->size) {
        ckfs_log("%s: packed file holds %llu bytes, manifest says %llu", f->path,
                 (unsigned long long)ckp_get_info(*out)->original_size,
                 (unsigned long long)f->size);
        ckp_close(*out);
        *out = NULL;
        return EIO;
    }
    return 0;
}

static int get_reader(ckfs_ctx *c, uint32_t i, const ckp_reader **out)
{
    mfile *f = &c->files[i];
    ckp_reader *r = atomic_load_explicit(&f->r, memory_order_acquire);
    int err = 0;
    if (!r) {
        pthread_mutex_lock(&f->lock);
        r = atomic_load_explicit(&f->r, memory_order_relaxed);
        err = f->open_err;
        if (!r && !err) {
            err = open_reader(c, i, &r);
            if (err == EIO)
                f->open_err = err;     /* damage does not heal; other errors may */
            else if (!err)
                atomic_store_explicit(&f->r, r, memory_order_release);
        }
        pthread_mutex_unlock(&f->lock);
    }
    *out = r;
    return err;
}

/* Chunk fill for the cache: decode and verify one chunk. */
static int fill_chunk(void *arg, const ckcache_key *k, void *dst, size_t len)
{
    ckfs_ctx *c = arg;
    const ckp_reader *r = atomic_load_explicit(&c->files[k->file].r, memory_order_acquire);
    ckp_scratch *s = thread_scratch();
    if (!r)
        return EIO;
    if (!s)
        return ENOMEM;
    ckp_status st;
    int bus = 0;
    if (ckp_is_mapped(r)) {
        if (sigsetjmp(bus_jmp, 0) == 0) {
            bus_armed = 1;
            st = ckp_read_chunk(r, k->extent, k->chunk, dst, s);
            bus_armed = 0;
        } else {
            st = CKP_ERR_IO;   /* SIGBUS: the packed file shrank under us */
            bus = 1;
        }
    } else {
        st = ckp_read_chunk(r, k->extent, k->chunk, dst, s);
    }
    if (st == CKP_OK) {
        if (c->o.drop_packed) /* the decoded bytes go to the page cache: not both */
            ckp_dontneed(r, k->extent, k->chunk, k->chunk + 1);
        return 0;
    }
    const ckp_extent *x = ckp_get_extent(r, k->extent);
    uint64_t start = x->orig_offset + k->chunk * x->chunk_size;
    if (bus)
        ckfs_log("%s: packed file changed size while mounted (SIGBUS reading it)",
                 c->m->files[k->file].path);
    ckfs_log("%s: extent %u (%s) chunk %llu (original bytes %llu..%llu) unreadable: %s; "
             "reads touching it fail with EIO",
             c->m->files[k->file].path, k->extent, x->name[0] ? x->name : "header",
             (unsigned long long)k->chunk, (unsigned long long)start,
             (unsigned long long)(start + len), ckp_status_name(st));
    return ckp_status_errno(st);
}

typedef struct {
    ckcache_key key;
    uint64_t start, len;           /* original bytes the chunk covers */
} chunk_ref;

static int chunk_at(const ckp_reader *r, uint32_t file, uint64_t off, chunk_ref *out)
{
    uint32_t e;
    uint64_t ch;
    if (ckp_locate(r, off, &e, &ch) != CKP_OK)
        return EIO;
    const ckp_extent *x = ckp_get_extent(r, e);
    out->key = (ckcache_key){.file = file, .extent = e, .chunk = ch};
    out->start = x->orig_offset + ch * x->chunk_size;
    out->len = ckp_chunk_len(x, ch);
    return 0;
}

/* Ask the prefetch workers to decode the chunks holding [from, to). */
static void queue_chunks(ckfs_ctx *c, const ckp_reader *r, uint32_t file, uint64_t from,
                         uint64_t to)
{
    chunk_ref cr;
    for (int n = 0; from < to && n < MAX_PREFETCH_CHUNKS; n++) {
        if (chunk_at(r, file, from, &cr) != 0)
            break;
        ckcache_prefetch(c->cache, &cr.key, cr.len);
        from = cr.start + cr.len;
    }
}

/* Ask the kernel to read from disk the packed bytes that original bytes
 * [from, to) decode from (a hint: the planes of an extent are three streams
 * at different places of the file, which defeats the kernel's readahead). */
static void hint_range(const ckp_reader *r, uint64_t from, uint64_t to)
{
    while (from < to) {
        uint32_t e;
        uint64_t c0;
        if (ckp_locate(r, from, &e, &c0) != CKP_OK)
            return;
        const ckp_extent *x = ckp_get_extent(r, e);
        uint64_t xend = x->orig_offset + x->orig_size, stop = to < xend ? to : xend;
        uint64_t c1 = (stop - x->orig_offset + x->chunk_size - 1) / x->chunk_size;
        ckp_willneed(r, e, c0, c1);
        from = stop;
    }
}

/* Sequential-read detection: reads near the end of the previous ones (the
 * kernel's readahead sends several at once, in any order) count as
 * sequential; from the third on, queue decode-ahead of the next bytes. */
static void read_ahead(ckfs_ctx *c, ofile *of, const ckp_reader *r, uint64_t off, uint64_t end,
                       uint64_t fsize)
{
    uint64_t window = c->o.prefetch, from = 0, to = 0, hfrom = 0, hto = 0;
    if (!window || !c->o.prefetch_threads)
        return;
    pthread_mutex_lock(&of->lock);
    if (off + window >= of->next_off && off <= of->next_off + window) {
        of->seq++;
        if (end > of->next_off)
            of->next_off = end;
    } else {
        of->seq = 0;
        of->next_off = of->ahead_to = of->hint_to = end;
    }
    if (of->seq >= 2) {
        from = of->ahead_to > end ? of->ahead_to : end;
        to = end + window < fsize ? end + window : fsize;
        if (to > from)
            of->ahead_to = to;
        /* disk readahead HINT_WINDOWS windows ahead, in steps of >= 1 MiB */
        hfrom = of->hint_to > end ? of->hint_to : end;
        hto = end + HINT_WINDOWS * window < fsize ? end + HINT_WINDOWS * window : fsize;
        if (hto > hfrom && (hto - hfrom >= (1u << 20) || hto == fsize))
            of->hint_to = hto;
        else
            hto = hfrom;
    }
    pthread_mutex_unlock(&of->lock);
    if (hto > hfrom)
        hint_range(r, hfrom, hto);
    queue_chunks(c, r, of->file, from, to);
}

/* ---- attributes ---------------------------------------------------------- */

static void fill_stat(const ckfs_ctx *c, uint64_t ino, const cki_node *n, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_mode = n->mode;
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
    const ckp_reader *r;
    int err = get_reader(c, (uint32_t)n->file, &r);
    ofile *of = err ? NULL : calloc(1, sizeof *of);
    if (!err && !of)
        err = ENOMEM;
    if (err) {
        fuse_reply_err(req, err);
        return;
    }
    of->file = (uint32_t)n->file;
    pthread_mutex_init(&of->lock, NULL);
    fi->fh = (uint64_t)(uintptr_t)of;
    fi->keep_cache = 1;
    fi->noflush = 1;
    if (fuse_reply_open(req, fi) != 0) {  /* interrupted: no release will come */
        pthread_mutex_destroy(&of->lock);
        free(of);
    }
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ofile *of = (ofile *)(uintptr_t)fi->fh;
    if (of) {
        pthread_mutex_destroy(&of->lock);
        free(of);
    }
    fuse_reply_err(req, 0);
}

/* Reply with the pieces; copies only when there are too many for one iov.
 * @return 0 if the data went out. */
static int reply_pieces(fuse_req_t req, const struct iovec *iov, size_t n, size_t total)
{
    if (n <= MAX_IOV)
        return fuse_reply_iov(req, iov, (int)n);
    char *buf = malloc(total);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return -1;
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(buf + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    int rc = fuse_reply_buf(req, buf, total);
    free(buf);
    return rc;
}

typedef struct {
    ckcache_entry *e_small[32], **e;
    struct iovec iov_small[32], *iov;
    size_t n, cap;
} pieces;

static int pieces_push(pieces *p, ckcache_entry *e, const void *base, size_t len)
{
    if (p->n == p->cap) {
        size_t cap = p->cap * 4;
        ckcache_entry **ne = malloc(cap * sizeof *ne);
        struct iovec *ni = malloc(cap * sizeof *ni);
        if (!ne || !ni) {
            free(ne);
            free(ni);
            return ENOMEM;
        }
        memcpy(ne, p->e, p->n * sizeof *ne);
        memcpy(ni, p->iov, p->n * sizeof *ni);
        if (p->e != p->e_small) {
            free(p->e);
            free(p->iov);
        }
        p->e = ne;
        p->iov = ni;
        p->cap = cap;
    }
    p->e[p->n] = e;
    p->iov[p->n] = (struct iovec){.iov_base = (void *)base, .iov_len = len};
    p->n++;
    return 0;
}

/* served: the reply went out, so each piece's bytes count as served. */
static void pieces_release(ckcache *cache, pieces *p, int served)
{
    for (size_t i = 0; i < p->n; i++)
        ckcache_put_served(cache, p->e[i], served ? p->iov[i].iov_len : 0);
    if (p->e != p->e_small) {
        free(p->e);
        free(p->iov);
    }
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    ckfs_ctx *c = fuse_req_userdata(req);
    ofile *of = (ofile *)(uintptr_t)fi->fh;
    const cki_node *n = cki_get(c->t, ino);
    if (!n || !of || off < 0) {
        fuse_reply_err(req, n ? EINVAL : ENOENT);
        return;
    }
    if ((uint64_t)off >= n->size || size == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    uint64_t end = (uint64_t)off + size < n->size ? (uint64_t)off + size : n->size;
    const ckp_reader *r = atomic_load_explicit(&c->files[of->file].r, memory_order_acquire);
    atomic_fetch_add_explicit(&c->reads, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->read_bytes, end - (uint64_t)off, memory_order_relaxed);
    if (size >= (512u << 10))
        atomic_fetch_add_explicit(&c->big_reads, 1, memory_order_relaxed);
    read_ahead(c, of, r, (uint64_t)off, end, n->size);
    /* A request spanning several chunks: workers decode the later ones
     * while this thread decodes the first (each is decoded once either way). */
    if (c->o.prefetch_threads && end - (uint64_t)off > CKP_BF16_CHUNK_WEIGHTS * 2u) {
        chunk_ref first;
        if (chunk_at(r, of->file, (uint64_t)off, &first) == 0)
            queue_chunks(c, r, of->file, first.start + first.len, end);
    }

    pieces p = {.e = NULL, .n = 0, .cap = 32};
    p.e = p.e_small;
    p.iov = p.iov_small;
    int err = 0;
    for (uint64_t pos = (uint64_t)off; pos < end && !err;) {
        chunk_ref cr;
        ckcache_entry *e;
        if ((err = chunk_at(r, of->file, pos, &cr)) != 0 ||
            (err = ckcache_get(c->cache, &cr.key, cr.len, &e)) != 0)
            break;
        uint64_t stop = cr.start + cr.len < end ? cr.start + cr.len : end;
        err = pieces_push(&p, e, (const char *)ckcache_data(e) + (pos - cr.start), stop - pos);
        if (err)
            ckcache_put(c->cache, e);
        pos = stop;
    }
    int served = 0;
    if (err)
        fuse_reply_err(req, err);
    else
        served = reply_pieces(req, p.iov, p.n, end - (uint64_t)off) == 0;
    pieces_release(c->cache, &p, served);
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
    .removexattr = ll_removexattr,
    .fallocate = ll_fallocate,
};

/* ---- setup and the loop -------------------------------------------------- */

static void ctx_free(ckfs_ctx *c)
{
    if (c->files) {
        for (size_t i = 0; i < c->m->n_files; i++) {
            ckp_close(atomic_load(&c->files[i].r));
            pthread_mutex_destroy(&c->files[i].lock);
        }
        free(c->files);
    }
    cki_free(c->t);
    ckm_free(c->m);
    free(c->dst);
}

/* Load the manifest and build the tree.  @return 0 or -1 (message printed). */
static int ctx_load(ckfs_ctx *c)
{
    char err[1024];
    c->dst = realpath(c->o.dst, NULL);
    if (!c->dst) {
        fprintf(stderr, "ckptfs mount: %s: %s\n", c->o.dst, strerror(errno));
        return -1;
    }
    if (ckm_load(c->dst, &c->m, err, sizeof err) != 0) {
        fprintf(stderr, "ckptfs mount: %s\n", err);
        return -1;
    }
    char *mpath;
    struct stat st;
    int64_t mtime = 0;
    if (asprintf(&mpath, "%s/%s", c->dst, CKP_MANIFEST_NAME) >= 0) {
        if (stat(mpath, &st) == 0)
            mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        free(mpath);
    }
    if (cki_build(c->m, mtime, &c->t, err, sizeof err) != 0) {
        fprintf(stderr, "ckptfs mount: %s: %s\n", c->dst, err);
        return -1;
    }
    c->files = calloc(c->m->n_files ? c->m->n_files : 1, sizeof *c->files);
    if (!c->files) {
        fprintf(stderr, "ckptfs mount: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < c->m->n_files; i++) {
        pthread_mutex_init(&c->files[i].lock, NULL);
        c->total_size += c->m->files[i].size;
    }
    if (c->o.drop_packed < 0)
        c->o.drop_packed = ckfs_drop_packed_auto(c->total_size);
    if (c->o.drop_packed) /* pages of a mapping that fault-around mapped again */
        c->o.mmap = 0;    /* cannot be dropped: read with pread instead */
    c->uid = getuid();
    c->gid = getgid();
    return 0;
}

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

static void print_stats(ckfs_ctx *c)
{
    ckcache_stats s;
    ckcache_get_stats(c->cache, &s);
    fprintf(stderr,
            "ckptfs: reads %lu (%lu bytes, %lu of >= 512 KiB); cache hits %llu misses %llu "
            "waits %llu evictions %llu served-out %llu failures %llu; prefetch queued %llu done %llu "
            "dropped %llu cancelled %llu\n",
            atomic_load(&c->reads), atomic_load(&c->read_bytes), atomic_load(&c->big_reads),
            (unsigned long long)s.hits, (unsigned long long)s.misses,
            (unsigned long long)s.waits, (unsigned long long)s.evictions, (unsigned long long)s.served_out,
            (unsigned long long)s.failures, (unsigned long long)s.prefetch_queued,
            (unsigned long long)s.prefetch_done, (unsigned long long)s.prefetch_dropped,
            (unsigned long long)s.prefetch_cancelled);
}

/* Mount, serve until unmounted or signalled, unmount.  @return exit status. */
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
    if (!c->o.foreground) {
        openlog("ckptfs", LOG_PID, LOG_DAEMON);
        g_syslog = 1;
    }
    if (install_sigbus() != 0) {
        ckfs_log("cannot install the SIGBUS handler: %s", strerror(errno));
        goto out_unmount;
    }
    /* Threads start only now: fuse_daemonize forks. */
    c->cache = ckcache_new(c->o.cache_size, c->o.prefetch_threads, fill_chunk, c);
    if (!c->cache) {
        ckfs_log("cannot create the chunk cache");
        goto out_unmount;
    }
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    if (!cfg) {
        ckfs_log("out of memory");
        goto out_cache;
    }
    fuse_loop_cfg_set_max_threads(cfg, c->o.threads);
    fuse_loop_cfg_set_clone_fd(cfg, 0);
    int rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
    /* 0: unmounted (fusermount3 -u); > 0: the signal that stopped us
     * (libfuse's handlers record it); < 0: -errno of a failure. */
    if (rc < 0)
        ckfs_log("session loop failed: %s", strerror(-rc));
    status = rc < 0 ? 1 : 0;
    if (c->o.stats)
        print_stats(c);
out_cache:
    ckcache_free(c->cache);
    c->cache = NULL;
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
    if (ckfs_parse_mount_args(argc, argv, &c.o, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2; /* usage error, as for every command */
    }
    if (c.o.help) {
        fputs(ckfs_mount_usage(), stdout);
        return 0;
    }
    if (ckfs_check_mountpoint(c.o.mnt, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    char *mnt = realpath(c.o.mnt, NULL);
    int status = 1;
    if (mnt && ctx_load(&c) == 0) {
        raise_fd_limit();
        status = serve(&c, mnt);
    } else if (!mnt) {
        fprintf(stderr, "ckptfs mount: %s: %s\n", c.o.mnt, strerror(errno));
    }
    ctx_free(&c);
    free(mnt);
    return status;
}
