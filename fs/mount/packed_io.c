/*
 * packed_io.c — what -o drop_packed does about the packed files' bytes
 * (packed_io.h): which chunks were decoded, the drops of their packed pages,
 * the kernel's readahead turned off, and the O_DIRECT read-ahead windows
 * (plane_window.h) fed from the read-ahead hints.
 */
#define _GNU_SOURCE
#include "packed_io.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "plane_window.h"

#define DROP_LAG 8 /* chunks each side of a decode whose packed pages it drops (again) */

/* One bit per chunk of a packed file, set once the chunk was decoded.  A
 * decode drops the packed pages of the run of decoded chunks around it,
 * never a page that a chunk not decoded yet still reads: decodes run out of
 * order (decode-ahead on the workers, several requests at once), and
 * dropping the pages of chunks still to come (as "the 8 chunks before this
 * one" did) made the daemon read them from disk again, one small synchronous
 * read at a time, since the kernel takes a read whose preceding pages are
 * gone for a random one (the daemon read 1.2-1.8x the packed bytes, and a
 * cold cat took 1.4-2.2x as long).  Going over the neighbours again also
 * catches pages that another CPU's LRU batch kept out of reach of an
 * earlier drop (mm/fadvise.c).
 *
 * The packed file is read without the kernel's readahead (ckfs_no_readahead):
 * it reads ahead in large folios, which are dropped only whole, and once
 * one read has left a readahead mark each read of a marked page reads the
 * next window, however the file was advised (6.5-8 MiB of the 11 MiB of a
 * 16 MiB tensor stayed cached).  The O_DIRECT windows and the hints of
 * read_ahead keep the disk busy instead (the hints read single pages). */
typedef struct ckfs_decoded {
    uint32_t n_extents;
    uint64_t *base;                /* extent e's chunks are bits base[e].. */
    _Atomic uint64_t bits[];
} ckfs_decoded;

/* f's map, made on its first decode. */
static ckfs_decoded *decoded_map(ckfs_mfile *f, const ckp_reader *r)
{
    ckfs_decoded *d = atomic_load_explicit(&f->decoded, memory_order_acquire);
    if (d)
        return d;
    uint32_t n = ckp_get_info(r)->n_extents;
    uint64_t total = 0;
    for (uint32_t e = 0; e < n; e++)
        total += ckp_get_extent(r, e)->n_chunks;
    d = calloc(1, sizeof *d + (total / 64 + 1) * sizeof d->bits[0]);
    uint64_t *base = d ? malloc(((size_t)n + 1) * sizeof *base) : NULL;
    if (!base) {
        free(d);
        return NULL;
    }
    d->n_extents = n;
    d->base = base;
    base[0] = 0;
    for (uint32_t e = 0; e < n; e++)
        base[e + 1] = base[e] + ckp_get_extent(r, e)->n_chunks;
    ckfs_decoded *none = NULL;
    if (!atomic_compare_exchange_strong(&f->decoded, &none, d)) {
        free(d->base);
        free(d);
        return none; /* another thread's */
    }
    return d;
}

void ckfs_no_readahead(const ckp_reader *r)
{
    posix_fadvise(ckp_fd(r), 0, 0, POSIX_FADV_RANDOM);
    posix_fadvise(ckp_fd(r), 0, 0, POSIX_FADV_DONTNEED);
}

void ckfs_packed_io_free(ckfs_mfile *f)
{
    ckfs_decoded *d = atomic_load(&f->decoded);
    if (d) {
        free(d->base);
        free(d);
    }
    if (atomic_load(&f->dfd1) > 0)
        close(atomic_load(&f->dfd1) - 1);
}

int ckfs_packed_io_detach(ckfs_mfile *f)
{
    int d1 = atomic_exchange(&f->dfd1, 0);
    return d1 > 0 ? d1 - 1 : -1;
}

static int is_decoded(ckfs_decoded *d, uint64_t bit)
{
    return (atomic_load(&d->bits[bit / 64]) >> (bit % 64)) & 1;
}

void ckfs_drop_decoded(ckfs_ctx *c, const ckcache_key *k, const ckp_reader *r, int cached)
{
    ckfs_decoded *d = decoded_map(&c->files[k->file], r);
    if (!d || k->extent >= d->n_extents) {
        if (cached)
            ckp_dontneed(r, k->extent, k->chunk, k->chunk + 1); /* out of memory: k alone */
        return;
    }
    uint64_t base = d->base[k->extent], n = d->base[k->extent + 1] - base, a = k->chunk, b = k->chunk + 1;
    /* seq_cst: of two neighbours decoded at once, at least one sees the other */
    atomic_fetch_or(&d->bits[(base + a) / 64], 1ull << (base + a) % 64);
    while (a > 0 && k->chunk - a < DROP_LAG && is_decoded(d, base + a - 1))
        a--;
    while (b < n && b - k->chunk <= DROP_LAG && is_decoded(d, base + b))
        b++;
    if (cached)
        ckp_dontneed(r, k->extent, a, b);
}

/* drop_packed: f's file opened again with O_DIRECT (through /proc/self/fd:
 * the same file, whatever its path names now), once; -1 when it cannot be
 * (a file system without O_DIRECT: then the page cache is used, and
 * dropped). */
static int direct_fd(ckfs_mfile *f, const ckp_reader *r)
{
    if (ckp_get_source(r))
        return -1; /* no file: its windows read the source */
    int d1 = atomic_load_explicit(&f->dfd1, memory_order_acquire);
    if (d1)
        return d1 - 1 >= 0 ? d1 - 1 : -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", ckp_fd(r));
    int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    int want = fd >= 0 ? fd + 1 : -1, none = 0;
    if (!atomic_compare_exchange_strong(&f->dfd1, &none, want)) {
        if (fd >= 0)
            close(fd);
        want = none; /* another thread's */
    }
    return want > 0 ? want - 1 : -1;
}

void ckfs_window_range(ckfs_ctx *c, uint32_t file, const ckp_reader *r, uint64_t from, uint64_t to, int demand)
{
    int dfd = direct_fd(&c->files[file], r);
    while (from < to) {
        uint32_t e;
        uint64_t ch, next;
        if (ckp_locate(r, from, &e, &ch) != CKP_OK)
            return;
        const ckp_extent *x = ckp_get_extent(r, e);
        uint64_t xend = x->orig_offset + x->orig_size;
        unsigned n = ckw_set_chunks(c->windows, x);
        if (n && (dfd >= 0 || ckp_get_source(r))) {
            /* From the first chunk wholly past `from` (the one holding it
             * may be queued for decode already: the decode-ahead ends
             * there) to the next multiple of n, only chunks not decoded yet:
             * a reader's run starts again after a jump, and bytes of
             * decoded chunks loaded again would never be used (a third of
             * the windows, under load_file). */
            uint64_t c0 = !demand && from > x->orig_offset + ch * x->chunk_size ? ch + 1 : ch;
            uint64_t c1 = (c0 / n + 1) * n < x->n_chunks ? (c0 / n + 1) * n : x->n_chunks;
            uint64_t last = to < xend ? (to - 1 - x->orig_offset) / x->chunk_size + 1 : x->n_chunks;
            uint64_t cut = demand && last < c1 ? last : c1; /* a request: its own chunks only */
            ckfs_decoded *d = atomic_load_explicit(&c->files[file].decoded, memory_order_acquire);
            uint64_t base = d ? d->base[e] : 0;
            while (d && c0 < cut && is_decoded(d, base + c0))
                c0++;
            uint64_t stop = c0;
            while (stop < cut && !(d && is_decoded(d, base + stop)))
                stop++;
            if (c0 < stop)
                ckw_prefetch(c->windows, file, r, dfd, e, c0, stop);
            next = c1 < x->n_chunks ? x->orig_offset + c1 * x->chunk_size : xend;
        } else {
            next = to < xend ? to : xend;
            ckp_willneed(r, e, ch, (next - x->orig_offset + x->chunk_size - 1) / x->chunk_size);
        }
        from = next;
    }
}

int ckfs_window_fill(ckfs_ctx *c, uint32_t file, const ckp_reader *r, uint32_t e)
{
    const ckp_extent *x = ckp_get_extent(r, e);
    if (!c->windows || !ckp_get_source(r) || !x || !ckw_set_chunks(c->windows, x))
        return 0;
    ckfs_decoded *d = atomic_load_explicit(&c->files[file].decoded, memory_order_acquire);
    uint64_t base = d ? d->base[e] : 0;
    for (uint64_t k = 0; k < x->n_chunks;) {
        if (d && is_decoded(d, base + k)) {
            k++;
            continue;
        }
        uint64_t stop = k + 1;
        while (stop < x->n_chunks && !(d && is_decoded(d, base + stop)))
            stop++;
        while (k < stop) {
            uint64_t held = ckw_prefetch(c->windows, file, r, -1, e, k, stop);
            if (held <= k)
                return -1; /* every slot taken: the reads get windows of their own */
            k = held;
        }
    }
    return 0;
}
