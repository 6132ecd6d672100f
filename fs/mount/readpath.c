/*
 * readpath.c — the read path of the mount daemon, without FUSE (readpath.h).
 *
 * A read of original bytes [off, end) of a file: the chunks overlapping it
 * (ckp_locate) -> cache entries (ckcache_get: decoded once, shared, verified
 * against their hashes by the container reader) -> pieces pointing into the
 * entries, which fuse_ll.c hands to the kernel without a copy.  Sequential
 * readers get decode-ahead on the cache's prefetch threads and a disk
 * readahead hint for the packed planes (with drop_packed: the packed bytes
 * read ahead with O_DIRECT, and pages read otherwise dropped once decoded;
 * packed_io.h).  Everything served is immutable while
 * mounted (a packed file that changes under the mount is refused from then
 * on, unless a file there passes re-validation: identity.h): no lock is held longer than a cache lookup or the few
 * fields of an open file's read-ahead state.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "identity.h"
#include "packed_io.h"
#include "plane_window.h"
#include "readpath.h"
#include "s3_mount.h"
#include "util.h"

#include <cjson/cJSON.h>

#define MAX_PREFETCH_CHUNKS 64     /* chunks queued per read request */
#define SEQ_SLACK (4ull << 20)     /* a read this near the last ones continues their run */
#define HINT_MAX (16ull << 20)     /* disk readahead: at most this far past a read */
#define DIRECT_WINDOWS 64          /* drop_packed: O_DIRECT windows (~0.7 MiB each) */
#define DIRECT_THREADS 4           /* drop_packed: threads reading them (several reads at once) */

/* Where the daemon logs: stderr until it detaches (and with -f); then
 * syslog, or g_log_fd with -o log=FILE / log=stderr (hosts and containers
 * without syslog).  Each line is one write(2), with time and pid, there. */
static int g_syslog;               /* log to syslog once daemonized */
static int g_log_fd = -1;          /* -o log=: a file or a copy of stderr */

void ckfs_log_to_syslog(void)
{
    openlog("ckptfs", LOG_PID, LOG_DAEMON);
    g_syslog = 1;
}

void ckfs_log_to_fd(int fd) { g_log_fd = fd; }

static void ckfs_vlog(int prio, const char *fmt, va_list ap)
{
    if (g_log_fd >= 0) {
        char line[2048];
        time_t now = time(NULL);
        struct tm tm;
        size_t n = strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
        n += (size_t)snprintf(line + n, sizeof line - n, " ckptfs[%d]: ", (int)getpid());
        int k = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
        n = k < 0 ? n : n + (size_t)k < sizeof line - 1 ? n + (size_t)k : sizeof line - 2;
        line[n++] = '\n';
        if (write(g_log_fd, line, n) < 0) {
            /* nowhere left to say it */
        }
    } else if (g_syslog) {
        vsyslog(prio, fmt, ap);
    } else {
        fputs("ckptfs: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
}

void ckfs_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ckfs_vlog(LOG_ERR, fmt, ap);
    va_end(ap);
}

void ckfs_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ckfs_vlog(LOG_INFO, fmt, ap);
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

int ckfs_open_reader(ckfs_ctx *c, uint32_t i, ckp_reader **out, char *msg, size_t msgCapacity)
{
    const ckm_file *f = &c->m->files[i];
    char why[512];
    msg[0] = 0;
    if (c->s3) {
        int e = ckfs_s3_open_reader(c, i, out);
        if (e)
            return e; /* s3_mount.c logged why */
    } else {
        ckp_status st = ckp_open_at(c->dst, f->path, c->o.mmap ? CKP_OPEN_MMAP : 0, out, why, sizeof why);
        if (st != CKP_OK) {
            snprintf(msg, msgCapacity, "%s: cannot open packed file: %s", CKU_ESC(f->path), why);
            return ckp_status_errno(st);
        }
    }
    const ckp_info *in = ckp_get_info(*out);
    if (in->original_size != f->size || strcmp(in->path, f->path) || memcmp(in->sha256, f->sha256, 32)) {
        /* bound to its manifest entry by path, size and the original's
         * SHA-256 in its TOC: another valid pack copied over it is refused */
        snprintf(msg, msgCapacity, "%s: packed file holds %s (%llu bytes), not the manifest's entry (%llu bytes%s)",
                 CKU_ESC(f->path), CKU_ESC(in->path), (unsigned long long)in->original_size,
                 (unsigned long long)f->size, memcmp(in->sha256, f->sha256, 32) ? ", another SHA-256" : "");
        ckp_close(*out);
        *out = NULL;
        return EIO;
    }
    return 0;
}

static int get_reader(ckfs_ctx *c, uint32_t i, const ckp_reader **out)
{
    ckfs_mfile *f = &c->files[i];
    ckp_reader *r = atomic_load_explicit(&f->r, memory_order_acquire);
    int err = 0;
    if (!r) {
        pthread_mutex_lock(&f->lock);
        r = atomic_load_explicit(&f->r, memory_order_relaxed);
        err = f->open_err;
        if (!r && !err) {
            char msg[1024];
            err = ckfs_open_reader(c, i, &r, msg, sizeof msg);
            if (err && msg[0])
                ckfs_log("%s", msg);
            if (!err && !c->s3 && fstat(ckp_fd(r), &f->bound) != 0) {
                ckfs_log("%s: cannot look at packed file: %s", CKU_ESC(c->m->files[i].path), strerror(errno));
                ckp_close(r);
                r = NULL;
                err = EIO;
            }
            if (err == EIO)
                f->open_err = err;     /* damage does not heal; other errors may */
            else if (err == EAGAIN)
                err = EIO;             /* s3://: the server failed; a later open tries again */
            else if (!err) {
                if (c->o.drop_packed)
                    ckfs_no_readahead(r);
                atomic_store_explicit(&f->r, r, memory_order_release);
            }
        }
        pthread_mutex_unlock(&f->lock);
    }
    *out = r;
    return err;
}

#define CHECK_NS 10000000 /* a decode checks its file's identity if the last check is older (10 ms) */

/* 1 if a decode of f should check its identity now (and note that it did). */
static int check_due(ckfs_mfile *f)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    uint64_t last = atomic_load_explicit(&f->checked_ns, memory_order_relaxed);
    return now - last >= CHECK_NS &&
           atomic_compare_exchange_strong_explicit(&f->checked_ns, &last, now, memory_order_relaxed,
                                                   memory_order_relaxed);
}

/* ---- decoding ------------------------------------------------------------ */

/* Decode chunks k..k+n-1 of r into dst[i], each one's status in st[i]
 * (ckp_read_chunks_to); a SIGBUS from r's mapping is CKP_ERR_IO for all
 * with *bus set.  Its own function: nothing of the caller's lives across
 * the jump. */
static __attribute__((noinline)) void read_chunks_guarded(const ckp_reader *r, const ckcache_key *k, unsigned n,
                                                          void *const dst[], ckp_status st[], ckp_scratch *s,
                                                          int *bus)
{
    *bus = 0;
    if (!ckp_is_mapped(r)) {
        if (ckp_read_chunks_to(r, k->extent, k->chunk, n, dst, st, s) == CKP_ERR_ARG)
            for (unsigned i = 0; i < n; i++)
                st[i] = CKP_ERR_ARG;
        return;
    }
    if (sigsetjmp(bus_jmp, 0) == 0) {
        bus_armed = 1;
        if (ckp_read_chunks_to(r, k->extent, k->chunk, n, dst, st, s) == CKP_ERR_ARG)
            for (unsigned i = 0; i < n; i++)
                st[i] = CKP_ERR_ARG;
        bus_armed = 0;
    } else {
        for (unsigned i = 0; i < n; i++)
            st[i] = CKP_ERR_IO; /* SIGBUS: the packed file shrank under us */
        *bus = 1;
    }
}

/* Decode chunk k of r into dst (through a window when there is one). */
static ckp_status decode_chunk(ckfs_ctx *c, const ckcache_key *k, const ckp_reader *r, void *dst, ckp_scratch *s,
                               int *bus, ckw_window **win)
{
    ckp_planes pl;
    *bus = 0;
    *win = c->windows ? ckw_get(c->windows, k->file, r, k->extent, k->chunk, &pl) : NULL;
    if (!*win && c->s3 && c->windows) {
        /* s3://: through a window too (one of this chunk alone if need be),
         * so that no chunk's bytes are fetched twice, by a window and here */
        ckw_prefetch(c->windows, k->file, r, -1, k->extent, k->chunk, k->chunk + 1);
        *win = ckw_get(c->windows, k->file, r, k->extent, k->chunk, &pl);
    }
    ckp_status st;
    if (*win)
        st = ckp_read_chunk_from(r, k->extent, k->chunk, &pl, dst, s);
    else
        read_chunks_guarded(r, k, 1, &dst, &st, s, bus);
    /* s3://: marked decoded before its window may go (ckw_put), so that no
     * window (a reader's, or ckfs_window_fill's for the rest of a shared
     * tensor) fetches its bytes again in between */
    if (*win && c->s3 && st == CKP_OK)
        ckfs_drop_decoded(c, k, r, 0);
    if (*win)
        ckw_put(c->windows, *win, k->chunk, st == CKP_OK);
    if (*win && st == CKP_ERR_CHUNK && ckp_get_source(r)) {
        /* a network window's bytes failed the chunk's hash: read the chunk
         * once more without it (ckp_read_chunks_to asks the source again,
         * past its disk cache if need be) */
        *win = NULL;
        read_chunks_guarded(r, k, 1, &dst, &st, s, bus);
    }
    return st;
}

/* A decode of chunk k failed (st): log it.  @return its errno. */
static int chunk_failed(ckfs_ctx *c, const ckcache_key *k, const ckp_reader *r, size_t len, ckp_status st,
                        int bus)
{
    atomic_fetch_add_explicit(&c->decode_errors, 1, memory_order_relaxed);
    if (c->s3 && st == CKP_ERR_IO)
        return EAGAIN; /* the server failed (logged by s3_mount.c): EIO for this read, not
                        * remembered by the cache as damage; a later read tries again */
    const ckp_extent *x = ckp_get_extent(r, k->extent);
    uint64_t start = x->orig_offset + k->chunk * x->chunk_size;
    if (bus)
        ckfs_log("%s: packed file changed size while mounted (SIGBUS reading it)",
                 CKU_ESC(c->m->files[k->file].path));
    ckfs_log("%s: extent %u (%s) chunk %llu (original bytes %llu-%llu) unreadable: %s; "
             "reads touching it fail with EIO",
             CKU_ESC(c->m->files[k->file].path), k->extent, x->name[0] ? CKU_ESC(x->name) : "header",
             (unsigned long long)k->chunk, (unsigned long long)start,
             (unsigned long long)(start + len), ckp_status_name(st));
    return ckp_status_errno(st);
}

/* Chunk fill for the cache: decode and verify one chunk.  A file refused
 * (changed, identity.h) is EAGAIN, not EIO: the cache does not remember it,
 * so its chunks are decoded again once a file that passes is back.  A
 * decode that failed because the file was being rewritten is tried once
 * more when the file there now passes re-validation. */
static int fill_chunk(void *arg, const ckcache_key *k, void *dst, size_t len)
{
    ckfs_ctx *c = arg;
    ckfs_mfile *f = &c->files[k->file];
    ckp_scratch *s = thread_scratch();
    for (int tries = 0;; tries++) {
        const ckp_reader *r = atomic_load_explicit(&f->r, memory_order_acquire);
        assert(r); /* a key is made only for a file open for reading (ckfs_read), whose reader is set */
        if (atomic_load_explicit(&f->changed, memory_order_relaxed))
            return c->s3 ? EIO : EAGAIN;
        if (!s)
            return ENOMEM;
        int bus, fresh = 0;
        ckw_window *win;
        ckp_status st = decode_chunk(c, k, r, dst, s, &bus, &win);
        /* After the decode: a change made before or while it read is seen
         * (at most every CHECK_NS per file while decodes succeed: the bytes
         * are checked against their hashes anyway). */
        if ((st != CKP_OK || check_due(f)) && ckfs_check_bound(c, k->file, r, &fresh) != 0) {
            atomic_fetch_add_explicit(&c->decode_errors, 1, memory_order_relaxed);
            return c->s3 ? EIO : EAGAIN;
        }
        if (st != CKP_OK && fresh && tries == 0)
            continue;
        if (st != CKP_OK)
            return chunk_failed(c, k, r, len, st, bus);
        atomic_fetch_add_explicit(&c->decoded_bytes, len, memory_order_relaxed);
        /* The decoded bytes go to the page cache: not both.  s3://: only
         * marked decoded, so that no window fetches its bytes again */
        if (c->o.drop_packed || c->s3)
            ckfs_drop_decoded(c, k, r, !win && c->o.drop_packed);
        return 0;
    }
}

/* The cache's run fill (chunk_cache.h): chunks k..k+n-1 of an ARCHIVE
 * extent decoded together, each checked against its hash.  A chunk that
 * failed is filled again alone (fill_chunk: its retry, its log, its errno),
 * so a damaged chunk fails as it would alone and the others are served. */
static void fill_chunks(void *arg, const ckcache_key *k, unsigned n, void *const dst[], const size_t len[],
                        int err[])
{
    ckfs_ctx *c = arg;
    ckfs_mfile *f = &c->files[k->file];
    ckp_scratch *s = thread_scratch();
    const ckp_reader *r = atomic_load_explicit(&f->r, memory_order_acquire);
    ckp_status st[CKCACHE_RUN_MAX];
    int bus = 0, fresh = 0;
    for (unsigned i = 0; i < n; i++)
        st[i] = CKP_ERR_ARG;           /* not decoded: filled alone below */
    if (s && !atomic_load_explicit(&f->changed, memory_order_relaxed))
        read_chunks_guarded(r, k, n, dst, st, s, &bus);
    if (check_due(f) && ckfs_check_bound(c, k->file, r, &fresh) != 0) {
        atomic_fetch_add_explicit(&c->decode_errors, 1, memory_order_relaxed);
        for (unsigned i = 0; i < n; i++)
            err[i] = c->s3 ? EIO : EAGAIN;
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        ckcache_key ki = *k;
        ki.chunk += i;
        if (st[i] != CKP_OK) {
            err[i] = fill_chunk(arg, &ki, dst[i], len[i]);
            continue;
        }
        err[i] = 0;
        atomic_fetch_add_explicit(&c->decoded_bytes, len[i], memory_order_relaxed);
        if (c->o.drop_packed)
            ckfs_drop_decoded(c, &ki, r, 1);
    }
}

/* How many chunks from k the cache fills in one fill_chunks: up to four of
 * an ARCHIVE extent, which one core decodes faster interleaved than one by
 * one (docs/archive.md), read from the mapping or with pread (not through
 * windows); K15's and the rest one at a time, spread over the workers.
 * Under the cache's lock: reads only. */
static unsigned run_len(void *arg, const ckcache_key *k)
{
    ckfs_ctx *c = arg;
    const ckp_reader *r = atomic_load_explicit(&c->files[k->file].r, memory_order_acquire);
    if (c->windows || c->s3 || !r)
        return 1;
    return ckp_get_extent(r, k->extent)->encoding == CKC_ENC_ARCHIVE ? CKCACHE_RUN_MAX : 1;
}

typedef struct {
    ckcache_key key;
    uint64_t start, len;           /* original bytes the chunk covers */
} chunk_ref;

/* The chunk holding original byte off of file, which every caller takes
 * below the file's size: the manifest's, which is the reader's (bound at
 * open, ckfs_open_reader; a re-validated file has the same TOC), so
 * ckp_locate cannot fail. */
static void chunk_at(const ckp_reader *r, uint32_t file, uint64_t off, chunk_ref *out)
{
    uint32_t e = 0;
    uint64_t ch = 0;
    ckp_status st = ckp_locate(r, off, &e, &ch);
    assert(st == CKP_OK);
    (void)st;
    const ckp_extent *x = ckp_get_extent(r, e);
    out->key = (ckcache_key){.file = file, .extent = e, .chunk = ch};
    out->start = x->orig_offset + ch * x->chunk_size;
    out->len = ckp_chunk_len(x, ch);
}

/* Ask the prefetch workers to decode the chunks holding [from, to). */
static void queue_chunks(ckfs_ctx *c, const ckp_reader *r, uint32_t file, uint64_t from,
                         uint64_t to)
{
    chunk_ref cr;
    for (int n = 0; from < to && n < MAX_PREFETCH_CHUNKS; n++) {
        chunk_at(r, file, from, &cr);
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

/* Reads near the end of the previous ones (within SEQ_SLACK: the kernel's
 * readahead sends several at once, in any order) continue a sequential run;
 * from its third read on, the chunks past the run are queued for
 * decode-ahead: a quarter of the bytes the run has read so far, at most
 * depth bytes past the read (the prefetch option: by default one of the
 * largest requests the kernel sends, so the next request finds its chunks
 * decoded), and the disk is hinted for half of them, at most HINT_MAX.  A
 * tensor-parallel reader taking a 2 MiB slice of each tensor gets little
 * past each slice, where every byte decoded is one nobody reads: the
 * kernel's own readahead of a mapping already overshoots each slice by a
 * few MiB, and decode-ahead deeper than one request past it (4 MiB until
 * 2 December) was two fifths of all decodes for one such reader and a fifth
 * of the daemon's CPU for eight, while a streaming reader got no measurably
 * faster from it than from one request.  A run that began in the extent (tensor) the read ends
 * in goes no further than that extent: loaders take tensors in name order,
 * which is not the file's (windows read ahead for the next tensor in the
 * file were a third of all, and went unused, under safetensors'
 * load_file).
 *
 * s3:// (hint_max set): a run that began at or before wstart (it read
 * whole tensors of CKFS_STREAM_MIN bytes or more before this one, see
 * ckfs_stream_start) streams the file and gets the network windows at the
 * full distance (hint_max) at once; the local ramp (half the run) had a
 * whole-file reader wait on each of ~180 windows of 0.8 MB of a 537 MB
 * model, the link idle half the time at 500 Mbit/s (s3_bench,
 * docs/object-storage.md).  Any other run keeps the ramp and never goes
 * past the tensor the read ends in: a slicer's run may begin in the
 * header or in the tensor before (the kernel reads up to half its
 * read-around before a fault), or run into the next one past its slice,
 * and is no stream (until 3 December any run that began before its tensor
 * or read the file's last tensor got the full distance: one slicer taking
 * an eighth of every tensor fetched the whole model).  A run from offset 0
 * is a stream at once when a->streamer is set (its process streamed its
 * previous file to the end: ckfs_file_owner).  Such a run's window is its
 * decode-ahead (depth) past its furthest read, at the file's start (a
 * stream not yet known) half the run. */
void ckfs_ahead_next(ckfs_ahead *a, uint64_t depth, uint64_t off, uint64_t end, uint64_t fsize,
                     uint64_t xstart, uint64_t xend, uint64_t wstart, ckfs_ahead_plan *p)
{
    *p = (ckfs_ahead_plan){0};
    if (off + SEQ_SLACK >= a->next_off && off <= a->next_off + SEQ_SLACK) {
        a->seq++;
        if (off < a->run_start)
            a->run_start = off;
        if (end > a->next_off)
            a->next_off = end;
    } else {
        a->seq = 0;
        a->run_start = off;
        a->next_off = a->ahead_to = a->hint_to = end;
    }
    /* a known streamer's run from offset 0 is one from its first read (its
     * first two reads had windows of their own: 2 of 3 a file, cut short) */
    int known = a->hint_max && a->streamer && !a->run_start;
    if (a->seq < 2 && !known)
        return;
    uint64_t run = a->next_off - a->run_start;
    uint64_t ahead = run / 4 < depth ? run / 4 : depth;
    uint64_t hmax = a->hint_max ? a->hint_max : HINT_MAX;
    int stream = known || (a->hint_max && wstart <= xstart && a->run_start <= wstart);
    if (stream && end >= fsize)
        a->streamed = 1;
    /* a run that began in this tensor stops at its end: a loader taking
     * tensors by name jumps elsewhere next (layers.1 -> layers.10); for
     * s3:// any run but a stream does */
    int in_tensor = a->run_start >= xstart && xend < fsize;
    uint64_t stop = in_tensor || (a->hint_max && !stream) ? xend : fsize;
    uint64_t hint = stream ? hmax : run / 2 < hmax ? run / 2 : hmax;
    if (a->hint_max && !stream && a->run_start)
        hint = 0;
    p->from = a->ahead_to > end ? a->ahead_to : end;
    p->to = end + ahead < stop ? end + ahead : stop;
    if (p->to > p->from)
        a->ahead_to = p->to;
    /* The disk hint in steps of >= 1 MiB, past the decode-ahead: a page
     * hinted after its chunk was decoded (and its packed pages dropped) would
     * be read from disk again for nothing, and stay cached. */
    p->hfrom = a->hint_to > a->ahead_to ? a->hint_to : a->ahead_to;
    if (p->hfrom < end)
        p->hfrom = end;
    p->hto = end + hint < stop ? end + hint : stop;
    if (p->hto > p->hfrom && (p->hto - p->hfrom >= (1u << 20) || p->hto == stop))
        a->hint_to = p->hto;
    else
        p->hto = p->hfrom;
}

uint64_t ckfs_stream_start(const ckp_reader *r, uint32_t e)
{
    uint64_t whole = 0;
    for (uint32_t k = e, steps = 0; k-- > 0 && steps < CKFS_STREAM_EXTENTS; steps++) {
        const ckp_extent *x = ckp_get_extent(r, k);
        if (x->name[0]) /* a tensor, not the header or what is between them */
            whole += x->orig_size;
        if (whole >= CKFS_STREAM_MIN)
            return x->orig_offset;
    }
    return UINT64_MAX;
}

/* Sequential readers: decode-ahead and disk hints (ckfs_ahead_next).
 * s3://: the request's own chunks and those queued for decode-ahead are
 * asked for in one window (one range GET per plane), before the prefetch
 * workers take them: each decode of a chunk no window holds fetches a
 * window of that chunk alone (a slicer's 1 MiB requests became 8 GETs of
 * 128 KiB each, ~4,000 for a 537 MB model).  @return 1 if it asked for
 * the request's own window. */
static int read_ahead(ckfs_ctx *c, ckfs_ofile *of, const ckp_reader *r, uint64_t off, uint64_t end,
                      uint64_t fsize)
{
    ckfs_ahead_plan p;
    if (!c->o.prefetch || !c->o.prefetch_threads)
        return 0;
    uint32_t e;
    uint64_t ch, xstart = 0, xend = fsize, wstart = UINT64_MAX;
    if (ckp_locate(r, end - 1, &e, &ch) == CKP_OK) {
        const ckp_extent *x = ckp_get_extent(r, e);
        xstart = x->orig_offset;
        xend = x->orig_offset + x->orig_size;
        if (c->s3)
            wstart = ckfs_stream_start(r, e);
    }
    pthread_mutex_lock(&of->lock);
    ckfs_ahead_next(&of->ahead, c->o.prefetch, off, end, fsize, xstart, xend, wstart, &p);
    pthread_mutex_unlock(&of->lock);
    int own = c->s3 && c->windows;
    uint64_t to = p.to > end ? p.to : end;
    /* the request's window and the windows ahead as one range when they
     * meet: a stream's window at a tensor's start was the request and its
     * decode-ahead alone (16 chunks), the rest of the tensor another */
    int joined = own && p.hto > p.hfrom && p.hfrom <= to;
    if (own)
        ckfs_window_range(c, of->file, r, off, joined ? p.hto : to, 1);
    if (p.hto > p.hfrom && c->windows && !joined) /* drop_packed's O_DIRECT or s3://'s network windows */
        ckfs_window_range(c, of->file, r, p.hfrom, p.hto, 0);
    else if (p.hto > p.hfrom)
        hint_range(r, p.hfrom, p.hto);
    queue_chunks(c, r, of->file, p.from, p.to);
    return own;
}

/* s3://: the tensors after extent e of file `file` (reader r) in file
 * order, in whole windows, ahead of processes that read e together: then,
 * when they came from the safetensors file before (they read it together
 * too, ckfs_s3_file_shared), those of the next safetensors files of the
 * manifest (sorted by path, as loaders sort shards; opened here if no
 * process has yet), but processes reading one file together get nothing
 * of the others.  Up to ckfs_s3_ahead's distance (the one a stream gets),
 * while more than s3_windows/2 + 1 window slots stay free (a prefetch past
 * them would replace loaded windows not used yet: fetched twice).  Readers
 * slicing the same tensors take them in file order (safe_open's keys() are
 * sorted by name, which is the file's order for tensors of one dtype as
 * save_file writes them), each a part of every one: before 7 December
 * nothing asked for the next tensor until a second reader reached it, and
 * the link idled for a request's latency and the decode of each tensor
 * (2 Gbit/s: 8 slicers 2.42 s, 4 whole readers of the same bytes 1.89 s;
 * docs/object-storage.md).  @return tensors asked for. */
static unsigned share_ahead(ckfs_ctx *c, uint32_t file, const ckp_reader *r, uint32_t e)
{
    uint64_t want = ckfs_s3_ahead(c), got = 0;
    unsigned reserve = c->o.s3_windows / 2 + 1, n = 0;
    uint32_t before = file;
    while (before-- > 0 && c->m->files[before].kind != CKP_KIND_SAFETENSORS)
        ;
    uint32_t last = before != UINT32_MAX && ckfs_s3_file_shared(c, before) ? (uint32_t)c->m->n_files : file + 1;
    for (uint32_t f = file; f < last && got < want; f++) {
        if (f != file) {
            e = UINT32_MAX; /* from its first extent */
            if (c->m->files[f].kind != CKP_KIND_SAFETENSORS || get_reader(c, f, &r) != 0)
                continue;
        }
        uint32_t nx = ckp_get_info(r)->n_extents;
        for (uint32_t k = e + 1; k < nx && got < want; k++) {
            const ckp_extent *x = ckp_get_extent(r, k);
            if (!x->name[0]) /* the header, padding */
                continue;
            if (ckw_free_slots(c->windows) <= reserve || ckfs_window_fill(c, f, r, k) != 0)
                return n;
            got += x->orig_size;
            n++;
        }
    }
    return n;
}

/* s3://: the extent a read begins in, when another process began a read
 * in it just before (ckfs_s3_shared), gets its chunks not yet decoded nor
 * in a window in windows now, before this read's own: readers each slicing
 * a part of every tensor (tensor parallelism; together they read all of
 * it) made a window per slice and per plane, 1,539 range GETs for 8
 * slicers of a 537 MB model (docs/object-storage.md).  Then the tensors
 * after it, whole, ahead of those readers (share_ahead).  A lone slicer's
 * extents are never shared: it keeps fetching only what its reads touch.
 * Only where a read begins: the kernel's readahead past a read of a
 * header (another process's safe_open) is no reader of the tensor. */
static void share_extent(ckfs_ctx *c, ckfs_ofile *of, const ckp_reader *r, uint64_t off)
{
    pid_t pid = of->pid ? of->pid : -1 - (pid_t)((uintptr_t)of % 65536); /* no pid: the open file */
    uint32_t e;
    uint64_t ch;
    if (ckp_locate(r, off, &e, &ch) == CKP_OK && ckfs_s3_shared(c, of->file, e, pid) &&
        ckfs_window_fill(c, of->file, r, e) == 0 && ckp_get_extent(r, e)->name[0])
        atomic_fetch_add_explicit(&c->shared_ahead, share_ahead(c, of->file, r, e), memory_order_relaxed);
}

/* ---- open files ----------------------------------------------------------- */

int ckfs_file_open(ckfs_ctx *c, uint32_t file, ckfs_ofile **out)
{
    const ckp_reader *r;
    *out = NULL;
    int err = get_reader(c, file, &r);
    if (!err)
        err = ckfs_check_bound(c, file, r, &(int){0});
    if (err)
        return err;
    ckfs_ofile *of = calloc(1, sizeof *of);
    if (!of)
        return ENOMEM;
    of->file = file;
    of->c = c;
    of->ahead.hint_max = c->s3 ? ckfs_s3_ahead(c) : 0;
    pthread_mutex_init(&of->lock, NULL);
    pthread_mutex_lock(&c->ofiles_lock);
    of->next = c->ofiles;
    if (c->ofiles)
        c->ofiles->prev = of;
    c->ofiles = of;
    pthread_mutex_unlock(&c->ofiles_lock);
    *out = of;
    return 0;
}

void ckfs_file_owner(ckfs_ofile *of, pid_t pid)
{
    of->pid = pid;
    if (of->c->s3 && pid)
        of->ahead.streamer = ckfs_s3_streamer(of->c, pid, 0);
}

void ckfs_file_close(ckfs_ofile *of)
{
    if (!of)
        return;
    ckfs_ctx *c = of->c;
    if (c->s3 && of->pid && of->ahead.streamed)
        ckfs_s3_streamer(c, of->pid, 1);
    pthread_mutex_lock(&c->ofiles_lock);
    if (of->prev)
        of->prev->next = of->next;
    else
        c->ofiles = of->next;
    if (of->next)
        of->next->prev = of->prev;
    pthread_mutex_unlock(&c->ofiles_lock);
    pthread_mutex_destroy(&of->lock);
    free(of);
}

/* ---- reads ------------------------------------------------------------------ */

static int pieces_push(ckfs_pieces *p, ckcache_entry *e, const void *base, size_t len)
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
    p->total += len;
    p->e[p->n] = e;
    p->iov[p->n] = (struct iovec){.iov_base = (void *)base, .iov_len = len};
    p->n++;
    return 0;
}

void ckfs_pieces_release(ckfs_ctx *c, ckfs_pieces *p, int served)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->e[i])
            ckcache_put_served(c->cache, p->e[i], served ? p->iov[i].iov_len : 0);
    if (p->e != p->e_small) {
        free(p->e);
        free(p->iov);
    }
    free(p->buf);
}

/* The pieces' bytes, in order, into dst (p->total bytes). */
static void pieces_copy_to(const ckfs_pieces *p, char *dst)
{
    size_t at = 0;
    for (size_t i = 0; i < p->n; i++) {
        memcpy(dst + at, p->iov[i].iov_base, p->iov[i].iov_len);
        at += p->iov[i].iov_len;
    }
}

/* p holds CKFS_MAX_IOV pieces of a read of want bytes: copy them into one
 * buffer of want bytes and give their entries back (their bytes count as
 * served: the reply is about to send them), so that the rest of the read is
 * copied chunk by chunk (ckfs_pieces).  @return 0 or ENOMEM. */
static int pieces_flatten(ckfs_ctx *c, ckfs_pieces *p, size_t want)
{
    char *buf = malloc(want);
    if (!buf)
        return ENOMEM;
    pieces_copy_to(p, buf);
    for (size_t i = 0; i < p->n; i++)
        ckcache_put_served(c->cache, p->e[i], p->iov[i].iov_len);
    p->n = 1;
    p->e[0] = NULL;
    p->iov[0] = (struct iovec){.iov_base = buf, .iov_len = p->total};
    p->buf = buf;
    return 0;
}

char *ckfs_pieces_copy(const ckfs_pieces *p)
{
    char *buf = malloc(p->total ? p->total : 1);
    if (buf)
        pieces_copy_to(p, buf);
    return buf;
}

int ckfs_read(ckfs_ctx *c, ckfs_ofile *of, uint64_t fsize, uint64_t off, size_t size, ckfs_pieces *p)
{
    memset(p, 0, sizeof *p);
    p->e = p->e_small;
    p->iov = p->iov_small;
    p->cap = 32;
    if (off >= fsize || size == 0)
        return 0;
    uint64_t end = off + size < fsize ? off + size : fsize;
    /* cached chunks of a refused file are not served either, until a file
     * that passes is there again */
    if (atomic_load_explicit(&c->files[of->file].changed, memory_order_relaxed) &&
        ckfs_check_bound(c, of->file, atomic_load(&c->files[of->file].r), &(int){0}) != 0)
        return EIO;
    const ckp_reader *r = atomic_load_explicit(&c->files[of->file].r, memory_order_acquire);
    atomic_fetch_add_explicit(&c->reads, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->read_bytes, end - off, memory_order_relaxed);
    if (size >= (512u << 10))
        atomic_fetch_add_explicit(&c->big_reads, 1, memory_order_relaxed);
    if (c->s3 && c->windows)
        share_extent(c, of, r, off);
    int windowed = read_ahead(c, of, r, off, end, fsize);
    if (c->windows && !windowed) /* this request's own packed bytes in a few large reads (a window per plane) */
        ckfs_window_range(c, of->file, r, off, end, 1);
    /* A request spanning several chunks: workers decode the later ones
     * while this thread decodes the first (each is decoded once either way). */
    if (c->o.prefetch_threads && end - off > CKP_BF16_CHUNK_WEIGHTS * 2u) {
        chunk_ref first;
        chunk_at(r, of->file, off, &first);
        queue_chunks(c, r, of->file, first.start + first.len, end);
    }
    int err = 0;
    for (uint64_t pos = off; pos < end && !err;) {
        chunk_ref cr;
        ckcache_entry *e;
        chunk_at(r, of->file, pos, &cr);
        if ((err = ckcache_get(c->cache, &cr.key, cr.len, &e)) != 0)
            break;
        uint64_t stop = cr.start + cr.len < end ? cr.start + cr.len : end;
        const char *from = (const char *)ckcache_data(e) + (pos - cr.start);
        if (!p->buf && p->n == CKFS_MAX_IOV)
            err = pieces_flatten(c, p, (size_t)(end - off));
        if (!err && p->buf) {
            memcpy(p->buf + p->total, from, stop - pos);
            p->total += stop - pos;
            p->iov[0].iov_len = p->total;
            ckcache_put_served(c->cache, e, stop - pos);
        } else if (!err) {
            err = pieces_push(p, e, from, stop - pos);
        }
        if (err)
            ckcache_put(c->cache, e);
        pos = stop;
    }
    if (err) {
        ckfs_pieces_release(c, p, 0);
        memset(p, 0, sizeof *p);
    }
    return err == EAGAIN ? EIO : err; /* s3://: the server failed, see fill_chunk */
}

/* ---- setup ------------------------------------------------------------------ */

void ckfs_ctx_free(ckfs_ctx *c)
{
    while (c->ofiles)
        ckfs_file_close(c->ofiles);
    pthread_mutex_destroy(&c->ofiles_lock);
    if (c->files) {
        for (size_t i = 0; i < c->m->n_files; i++) {
            ckp_close(atomic_load(&c->files[i].r));
            free(c->files[i].at);
            ckfs_packed_io_free(&c->files[i]);
            ckfs_identity_free(&c->files[i]);
            pthread_mutex_destroy(&c->files[i].lock);
        }
        free(c->files);
    }
    cki_free(c->t);
    ckm_free(c->m);
    free(c->dst);
    ckfs_s3_free(c);
}

/* ckfs_ctx_load of a local packed directory: c->dst, c->m, and the mode
 * and mtime of the tree's root (the directory's, the manifest's). */
static ckfs_status load_local(ckfs_ctx *c, uint32_t *root_mode, int64_t *mtime, char *err, size_t errCapacity)
{
    c->dst = realpath(c->o.dst, NULL);
    if (!c->dst)
        return cku_errf(err, errCapacity, errno == ENOMEM ? CKFS_ERR_NOMEM : CKFS_ERR_IO, "%s: %s", c->o.dst,
                        strerror(errno));
    ckfs_status ls = ckfs_from_ckp(ckm_load(c->dst, &c->m, err, errCapacity));
    if (ls != CKFS_OK)
        return ls;
    char *mpath;
    struct stat st;
    if (stat(c->dst, &st) == 0)
        *root_mode = st.st_mode & 07777;
    if (asprintf(&mpath, "%s/%s", c->dst, CKP_MANIFEST_NAME) >= 0) {
        if (stat(mpath, &st) == 0)
            *mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        free(mpath);
    }
    return CKFS_OK;
}

ckfs_status ckfs_ctx_load(ckfs_ctx *c, char *err, size_t errCapacity)
{
    pthread_mutex_init(&c->ofiles_lock, NULL);
    int64_t mtime = 0;
    uint32_t root_mode = 0700; /* if the directory cannot be stat'ed: nobody else's */
    ckfs_status ls;
    if (ckfs_is_s3(c->o.dst)) {
        /* objects have no directory: the root is 0755, of the mount's time */
        root_mode = 0755;
        mtime = (int64_t)time(NULL) * 1000000000;
        ls = ckfs_s3_load(c, err, errCapacity);
    } else {
        ls = load_local(c, &root_mode, &mtime, err, errCapacity);
    }
    if (ls != CKFS_OK)
        return ls;
    char msg[1024];
    if ((ls = cki_build(c->m, root_mode, mtime, &c->t, msg, sizeof msg)) != CKFS_OK)
        return cku_errf(err, errCapacity, ls, "%s: %s", c->dst, msg);
    c->files = calloc(c->m->n_files ? c->m->n_files : 1, sizeof *c->files);
    if (!c->files)
        return cku_errf(err, errCapacity, CKFS_ERR_NOMEM, "%s: out of memory", c->dst);
    for (size_t i = 0; i < c->m->n_files; i++) {
        pthread_mutex_init(&c->files[i].lock, NULL);
        if (asprintf(&c->files[i].at, "%s/%s%s", c->dst, c->m->files[i].path, CKP_SUFFIX) < 0) {
            c->files[i].at = NULL;
            return cku_errf(err, errCapacity, CKFS_ERR_NOMEM, "%s: out of memory", c->dst);
        }
        c->total_size += c->m->files[i].size;
    }
    if (c->s3) /* no page cache of packed bytes to drop, no file to map */
        c->o.drop_packed = c->o.mmap = 0;
    if (c->o.drop_packed < 0)
        c->o.drop_packed = ckfs_drop_packed_auto(c->total_size);
    if (c->o.drop_packed) /* pages of a mapping that fault-around mapped again */
        c->o.mmap = 0;    /* cannot be dropped: read with pread instead */
    c->uid = c->o.uid >= 0 ? (uid_t)c->o.uid : getuid();
    c->gid = c->o.gid >= 0 ? (gid_t)c->o.gid : getgid();
    return CKFS_OK;
}

ckfs_status ckfs_open_all(ckfs_ctx *c, char *err, size_t errCapacity)
{
    if (c->s3) /* objects are opened at their first open: here, that each is there */
        return ckfs_s3_check_objects(c, err, errCapacity);
    size_t bad = 0, nomem = 0;
    for (uint32_t i = 0; i < c->m->n_files; i++) {
        const ckp_reader *r;
        int e = get_reader(c, i, &r);
        bad += e != 0; /* get_reader logged why */
        nomem += e == ENOMEM;
    }
    if (bad)
        return cku_errf(err, errCapacity, nomem == bad ? CKFS_ERR_NOMEM : CKFS_ERR_DAMAGED,
                        "%s: %zu of %zu packed files cannot be read (see above); not mounted", c->dst, bad,
                        c->m->n_files);
    return CKFS_OK;
}

ckfs_status ckfs_cache_start(ckfs_ctx *c)
{
    if (install_sigbus() != 0) {
        ckfs_log("cannot install the SIGBUS handler: %s", strerror(errno));
        return CKFS_ERR_INTERNAL;
    }
    c->cache = ckcache_new(c->o.cache_size, c->o.prefetch_threads, fill_chunk, c);
    if (!c->cache) {
        ckfs_log("cannot create the chunk cache (out of memory or threads)");
        return CKFS_ERR_NOMEM;
    }
    ckcache_set_run(c->cache, run_len, fill_chunks);
    /* drop_packed: sequential readers' packed bytes come through O_DIRECT
     * windows (without, through the page cache, dropped once decoded) */
    if (c->o.drop_packed && c->o.prefetch && c->o.prefetch_threads &&
        !(c->windows = ckw_new(DIRECT_WINDOWS, DIRECT_THREADS)))
        ckfs_log("cannot start the O_DIRECT read-ahead (out of memory or threads): reading through the page cache");
    /* s3://: chunks come through network windows (a range GET per plane
     * of up to 8 MiB of original bytes), many in flight */
    if (c->s3 && !(c->windows = ckfs_s3_windows(c)))
        ckfs_log("cannot start the network windows (out of memory or threads): a range GET per chunk");
    return CKFS_OK;
}

void ckfs_cache_stop(ckfs_ctx *c)
{
    ckcache_free(c->cache); /* its workers decode from the windows: first */
    c->cache = NULL;
    ckw_free(c->windows);
    c->windows = NULL;
}

/* The daemon's counters, in the order `ckptfs stat` and -o stats show them:
 * up to CKFS_N_COUNTERS, the O_DIRECT windows' only with drop_packed.  An
 * s3:// mount with a disk cache shows 38: room is left for more, and a
 * counter past the limit fails the debug builds' assert (tests run them)
 * rather than vanish from `ckptfs stat`. */
#define CKFS_N_COUNTERS 64
typedef struct {
    const char *name;
    uint64_t v;
} ckfs_counter;

typedef struct {
    ckfs_counter *n;
    size_t *k;
} counter_sink;

static void put_counter(void *arg, const char *name, uint64_t v)
{
    counter_sink *s = arg;
    static atomic_int said;
    if (*s->k < CKFS_N_COUNTERS)
        s->n[(*s->k)++] = (ckfs_counter){name, v};
    else if (!atomic_exchange(&said, 1))
        ckfs_log("counter %s and those after it not shown: more than CKFS_N_COUNTERS (%d)", name, CKFS_N_COUNTERS);
}

static size_t counters(ckfs_ctx *c, ckfs_counter *n)
{
    ckcache_stats s;
    ckcache_get_stats(c->cache, &s);
    size_t k = 0;
#define PUT(nm, val) (n[k++] = (ckfs_counter){nm, (uint64_t)(val)})
    PUT("files", c->m->n_files);
    PUT("reads", atomic_load(&c->reads));
    PUT("read_bytes", atomic_load(&c->read_bytes));
    PUT("big_reads", atomic_load(&c->big_reads));
    PUT("decoded_bytes", atomic_load(&c->decoded_bytes));
    PUT("decode_errors", atomic_load(&c->decode_errors));
    PUT("cache_hits", s.hits);
    PUT("cache_misses", s.misses);
    PUT("cache_waits", s.waits);
    PUT("cache_evictions", s.evictions);
    PUT("cache_served_out", s.served_out);
    PUT("cache_failures", s.failures);
    PUT("cache_bytes", s.bytes);
    PUT("cache_limit", c->o.cache_size);
    PUT("prefetch_queued", s.prefetch_queued);
    PUT("prefetch_done", s.prefetch_done);
    PUT("prefetch_dropped", s.prefetch_dropped);
    PUT("prefetch_cancelled", s.prefetch_cancelled);
    PUT("decode_runs", s.runs);             /* archive chunks decoded in runs of 2-4 (fill_chunks) */
    PUT("decode_run_chunks", s.run_chunks);
    if (c->windows) {
        ckw_stats w;
        ckw_get_stats(c->windows, &w);
        PUT("direct_loads", w.loads);
        PUT("direct_load_bytes", w.load_bytes);
        PUT("direct_hits", w.hits);
        PUT("direct_waits", w.waits);
        PUT("direct_failures", w.failures);
        PUT("direct_dropped", w.dropped);
        PUT("direct_replaced", w.replaced);
    }
    if (c->s3)
        PUT("s3_shared_ahead", atomic_load(&c->shared_ahead));
#undef PUT
    if (c->s3) {
        counter_sink sink = {n, &k};
        ckfs_s3_counters(c, put_counter, &sink);
    }
    assert(k <= CKFS_N_COUNTERS);
    return k;
}

int ckfs_stats_json(ckfs_ctx *c, char *buf, size_t cap)
{
    ckfs_counter n[CKFS_N_COUNTERS];
    size_t k = counters(c, n);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", c->dst);
    for (size_t i = 0; i < k; i++)
        cJSON_AddNumberToObject(o, n[i].name, (double)n[i].v);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int len = txt ? snprintf(buf, cap, "%s\n", txt) : -1;
    free(txt);
    return len;
}

void ckfs_print_stats(ckfs_ctx *c)
{
    ckfs_counter n[CKFS_N_COUNTERS];
    size_t k = counters(c, n);
    fputs("ckptfs: stats:", stderr);
    for (size_t i = 0; i < k; i++)
        fprintf(stderr, " %s %llu", n[i].name, (unsigned long long)n[i].v);
    fputc('\n', stderr);
}
