/*
 * test_readpath.c — the mount daemon without a mount: the FUSE-free read
 * path (fs/mount/readpath.h) over a packed directory written here, the inode
 * table built from manifests made here, and the mount command line.
 * Truth is the original bytes written into the packed files, the manifest's
 * entries, and the documented option defaults.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "craft.h" /* first: fuzz_util.h defines _GNU_SOURCE */
#include "container.h"
#include "inode_table.h"
#include "manifest.h"
#include "mount_opts.h"
#include "plane_window.h"
#include "readpath.h"
#include "test_util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { return xorshift64(&rng); }

static void setup(void) { tmpdir_make("readpath"); }

/* ---- a packed directory --------------------------------------------------- */

#define W_BYTES (5 * 2 * CKP_BF16_CHUNK_WEIGHTS + 2 * 1234) /* 5 chunks and a part */
#define RAW_BYTES 70001

/* BF16 weights near N(0, 0.02) (the exponent range K15 codes without escapes
 * most of the time) with some rare values that become escapes. */
static uint16_t weight(void)
{
    uint64_t r = rnd();
    if (r % 97 == 0)
        return (uint16_t)(r >> 16);
    return (uint16_t)(((r >> 8) & 0x8000) | (0x3C00 + (r >> 20) % 0x180));
}

typedef struct {
    uint8_t *orig;        /* the original bytes of "d/w.bin" */
    uint64_t size;
    char packed[512];     /* its packed file */
} model;

/* The encoding of the weights' extent write_model writes. */
static uint32_t w_enc = CKC_ENC_K15;

/* path: a packed file of orig (an extent of W_BYTES encoded as w_enc, then
 * a raw extent) recorded as d/w.bin. */
static void pack_to(const char *path, const uint8_t *orig, uint64_t size)
{
    ckp_writer_opts o = {.path = "d/w.bin", .kind = CKP_KIND_BLOB, .mode = 0644, .mtime_ns = 42};
    const test_extent x[] = {{w_enc, W_BYTES, "w", 0}, {CKC_ENC_RAW, size - W_BYTES, "", 0}};
    uint8_t sha[32] = {0};
    write_packed(path, &o, orig, x, 2, sha);
}

/* Original bytes of "d/w.bin": weights, then random bytes. */
static uint8_t *make_orig(uint64_t size)
{
    uint8_t *orig = malloc(size);
    for (uint64_t i = 0; i < W_BYTES; i += 2) {
        uint16_t w = weight();
        memcpy(orig + i, &w, 2);
    }
    for (uint64_t i = W_BYTES; i < size; i++)
        orig[i] = (uint8_t)rnd();
    return orig;
}

/* tmpdir/d/w.bin.ckpt: a K15 extent of W_BYTES then a raw extent; the
 * manifest lists d/ and d/w.bin. */
static void write_model(model *md)
{
    md->size = W_BYTES + RAW_BYTES;
    md->orig = make_orig(md->size);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/d", tmpdir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(md->packed, sizeof md->packed, "%s/d/w.bin%s", tmpdir, CKP_SUFFIX);
    pack_to(md->packed, md->orig, md->size);
    ckm_file f = {.path = "d/w.bin", .size = md->size, .mode = 0644, .mtime_ns = 42, .kind = CKP_KIND_BLOB};
    ckm_dir d = {.path = "d", .mode = 0755};
    ckm_manifest m = {.files = &f, .n_files = 1, .dirs = &d, .n_dirs = 1};
    char err[512];
    ck_assert_msg(ckm_write(tmpdir, &m, err, sizeof err) == 0, "%s", err);
}

/* A loaded context with its cache started (prefetch threads as given). */
static void ctx_open(ckfs_ctx *c, unsigned prefetch_threads, uint64_t prefetch)
{
    char err[1024];
    memset(c, 0, sizeof *c);
    c->o.dst = tmpdir;
    c->o.cache_size = 64ull << 20;
    c->o.prefetch = prefetch;
    c->o.prefetch_threads = prefetch_threads;
    c->o.mmap = 1;
    c->o.drop_packed = 0;
    ck_assert_msg(ckfs_ctx_load(c, err, sizeof err) == CKFS_OK, "%s", err);
    ck_assert_int_eq(ckfs_cache_start(c), CKFS_OK);
}

static void ctx_close(ckfs_ctx *c)
{
    ckfs_cache_stop(c);
    ckfs_ctx_free(c);
}

/* write_model, then ctx_open over it. */
static void open_model(model *md, ckfs_ctx *c, unsigned prefetch_threads, uint64_t prefetch)
{
    write_model(md);
    ctx_open(c, prefetch_threads, prefetch);
}

/* ctx_close, and the model's original bytes freed. */
static void close_model(ckfs_ctx *c, model *md)
{
    ctx_close(c);
    free(md->orig);
}

/* Open d/w.bin through the tree, as the glue does. */
static ckfs_ofile *open_w(ckfs_ctx *c, uint64_t *size, int *err)
{
    uint64_t d = cki_lookup(c->t, CKI_ROOT, "d"), ino = d ? cki_lookup(c->t, d, "w.bin") : 0;
    ck_assert_uint_ne(ino, 0);
    const cki_node *n = cki_get(c->t, ino);
    ckfs_ofile *of = NULL;
    *size = n->size;
    *err = ckfs_file_open(c, (uint32_t)n->file, &of);
    return of;
}

/* Read [off, off+len) and compare with the original; @return errno or 0. */
static int read_check(ckfs_ctx *c, ckfs_ofile *of, const model *md, uint64_t off, size_t len)
{
    ckfs_pieces p;
    int err = ckfs_read(c, of, md->size, off, len, &p);
    if (err) {
        ck_assert_uint_eq(p.n, 0);
        return err;
    }
    uint64_t want = off >= md->size ? 0 : (off + len < md->size ? len : md->size - off);
    ck_assert_uint_eq(p.total, want);
    uint64_t at = off, sum = 0;
    for (size_t i = 0; i < p.n; i++) {
        ck_assert_msg(memcmp(p.iov[i].iov_base, md->orig + at, p.iov[i].iov_len) == 0,
                      "piece %zu of read %llu+%zu differs", i, (unsigned long long)off, len);
        at += p.iov[i].iov_len;
        sum += p.iov[i].iov_len;
    }
    ck_assert_uint_eq(sum, want);
    char *flat = ckfs_pieces_copy(&p);
    ck_assert_ptr_nonnull(flat);
    ck_assert(want == 0 || memcmp(flat, md->orig + off, want) == 0);
    free(flat);
    ckfs_pieces_release(c, &p, 1);
    return 0;
}

START_TEST(reads_return_the_original_bytes)
{
    model md;
    ckfs_ctx c;
    uint64_t size;
    int err;
    open_model(&md, &c, _i, 1u << 20);  /* without and with prefetch workers */
    ckfs_ofile *of = open_w(&c, &size, &err);
    ck_assert_int_eq(err, 0);
    ck_assert_uint_eq(size, md.size);
    /* whole file in one read, chunk edges, the extent boundary, the end */
    ck_assert_int_eq(read_check(&c, of, &md, 0, md.size + 100), 0);
    static const uint64_t edges[] = {0, 2 * CKP_BF16_CHUNK_WEIGHTS, W_BYTES, W_BYTES + CKP_BLOB_CHUNK};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        for (int d = -3; d <= 3; d++)
            if ((int64_t)edges[i] + d >= 0)
                ck_assert_int_eq(read_check(&c, of, &md, edges[i] + d, 7), 0);
    ck_assert_int_eq(read_check(&c, of, &md, md.size - 5, 4096), 0);  /* clipped */
    ck_assert_int_eq(read_check(&c, of, &md, md.size, 4096), 0);      /* past the end: nothing */
    ck_assert_int_eq(read_check(&c, of, &md, 10, 0), 0);
    for (int it = 0; it < 300; it++)
        ck_assert_int_eq(read_check(&c, of, &md, rnd() % md.size, 1 + rnd() % (1u << 20)), 0);
    /* sequential 128 KiB reads, as the kernel sends them */
    for (uint64_t off = 0; off < md.size; off += 128 << 10)
        ck_assert_int_eq(read_check(&c, of, &md, off, 128 << 10), 0);
    ckfs_file_close(of);
    close_model(&c, &md);
}
END_TEST

/* Files still open at unmount (libfuse sends no release after
 * fusermount3 -uz) are on the context's list and freed with it: under the
 * sanitizer builds, LeakSanitizer fails this test if they are not. */
START_TEST(open_files_freed_with_the_context)
{
    model md;
    ckfs_ctx c;
    uint64_t size;
    int err;
    open_model(&md, &c, 0, 0);
    ckfs_ofile *a = open_w(&c, &size, &err), *b = open_w(&c, &size, &err), *d = open_w(&c, &size, &err);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(d);
    ckfs_file_close(b); /* from the middle of the list */
    ck_assert_ptr_eq(c.ofiles, d);
    ck_assert_ptr_eq(d->next, a);
    ck_assert_ptr_eq(a->prev, d);
    close_model(&c, &md); /* a and d are still open */
    ck_assert_ptr_null(c.ofiles);
}
END_TEST

/* Sequential readers get decode-ahead; one random read does not. */
START_TEST(sequential_reads_prefetch)
{
    model md;
    ckfs_ctx c;
    uint64_t size;
    int err;
    ckcache_stats s;
    open_model(&md, &c, 1, 4u << 20);
    ckfs_ofile *of = open_w(&c, &size, &err);
    ck_assert_int_eq(read_check(&c, of, &md, 300000, 4096), 0);
    ckcache_get_stats(c.cache, &s);
    ck_assert_uint_eq(s.prefetch_queued, 0);
    for (uint64_t off = 0; off < 3 * 4096; off += 4096)
        ck_assert_int_eq(read_check(&c, of, &md, off, 4096), 0);
    ckcache_get_stats(c.cache, &s);
    ck_assert_uint_gt(s.prefetch_queued, 0);
    ck_assert_uint_eq(atomic_load(&c.reads), 4);
    ck_assert_uint_eq(atomic_load(&c.read_bytes), 4 * 4096);
    ckfs_file_close(of);
    close_model(&c, &md);
}
END_TEST

/* ---- read-ahead decisions (ckfs_ahead_next) ------------------------------- */

#define MiB (1ull << 20)
#define KiB (1ull << 10)

/* A file of a 64 KiB header extent and then extents (tensors) of 16 MiB:
 * the extent holding byte end-1, as the read path finds it. */
static void tensor_of(uint64_t end, uint64_t fsize, uint64_t *xstart, uint64_t *xend)
{
    const uint64_t head = 64 * KiB, tensor = 16 * MiB;
    *xstart = end - 1 < head ? 0 : head + (end - 1 - head) / tensor * tensor;
    *xend = *xstart ? *xstart + tensor : head;
    if (*xend > fsize)
        *xend = fsize;
}

static void ahead(ckfs_ahead *a, uint64_t window, uint64_t off, uint64_t end, uint64_t fsize, ckfs_ahead_plan *p)
{
    uint64_t xs, xe;
    tensor_of(end, fsize, &xs, &xe);
    ckfs_ahead_next(a, window, off, end, fsize, xs, xe, UINT64_MAX, p);
}

/* Bytes of [from, to) outside [lo, hi). */
static uint64_t outside(uint64_t from, uint64_t to, uint64_t lo, uint64_t hi)
{
    uint64_t n = 0;
    if (from < lo)
        n += (to < lo ? to : lo) - from;
    if (to > hi)
        n += to - (from > hi ? from : hi);
    return from < to ? n : 0;
}

/* One run of reads over [lo, hi) in req-byte requests (the default depth): adds
 * the bytes it queued to *queued, those queued outside [lo, hi) to *qpast,
 * and those hinted outside it to *hpast. */
static void read_run(ckfs_ahead *a, uint64_t lo, uint64_t hi, uint64_t req, uint64_t fsize, uint64_t *queued,
                     uint64_t *qpast, uint64_t *hpast)
{
    ckfs_ahead_plan p;
    for (uint64_t off = lo; off < hi; off += req) {
        ahead(a, CKFS_DEFAULT_PREFETCH, off, off + req, fsize, &p);
        if (p.to > p.from)
            *queued += p.to - p.from, *qpast += outside(p.from, p.to, lo, hi);
        if (p.hto > p.hfrom)
            *hpast += outside(p.hfrom, p.hto, lo, hi);
    }
}

/* A tensor-parallel reader takes an eighth of every tensor's rows: 2 MiB
 * runs, 16 MiB apart, in 256 KiB requests.  Decode-ahead (and the disk
 * hint) past each run is bytes nobody reads: at most a quarter of the run
 * may be queued past it, half of it hinted. */
START_TEST(ahead_slices_queue_little_past_each_run)
{
    const uint64_t tensor = 16 * MiB, run = 2 * MiB, req = 256 * KiB, fsize = 64 * KiB + 8 * tensor;
    ckfs_ahead a = {0};
    uint64_t past = 0, hinted_past = 0, queued = 0;
    for (uint64_t t = 0; t < 8; t++) {
        uint64_t lo = 64 * KiB + t * tensor + 3 * run;
        read_run(&a, lo, lo + run, req, fsize, &queued, &past, &hinted_past);
    }
    ck_assert_uint_gt(queued, 0); /* runs of 8 requests are sequential */
    ck_assert_msg(past <= 8 * run / 4, "%llu bytes queued past 8 runs of 2 MiB",
                  (unsigned long long)past);
    ck_assert_msg(hinted_past <= 8 * run / 2, "%llu bytes hinted past 8 runs of 2 MiB",
                  (unsigned long long)hinted_past);
}
END_TEST

/* The same reader through a mapping (safetensors' get_slice, as
 * bench_readers.sh traced it): the kernel asks for a 2 MiB slice from
 * 512 KiB before it to several MiB past it, 7 MiB in 1 MiB requests, and
 * every byte of that is read anyway.  At the default depth decode-ahead goes
 * at most one such request past each run (a quarter of the run, 1.75 MiB,
 * with the 4 MiB window before 2 December: twice the decodes of the bytes
 * asked for one slicer, the whole tensor after the slice). */
START_TEST(ahead_mapped_slices_decode_one_request_past)
{
    const uint64_t tensor = 16 * MiB, fsize = 64 * KiB + 8 * tensor;
    ckfs_ahead a = {0};
    uint64_t past = 0, hinted_past = 0, queued = 0;
    for (uint64_t t = 0; t < 8; t++) {
        uint64_t lo = 64 * KiB + t * tensor + 6 * MiB - 512 * KiB;
        read_run(&a, lo, lo + 7 * MiB, MiB, fsize, &queued, &past, &hinted_past);
    }
    ck_assert_uint_gt(queued, 0);
    ck_assert_msg(past <= 8 * CKFS_MAX_REQUEST, "%llu bytes queued past 8 runs of 7 MiB",
                  (unsigned long long)past);
}
END_TEST

/* One reader streams a 64 MiB file in 128 KiB requests, the kernel's
 * readahead sending two at a time out of order: once the run is long,
 * decode-ahead reaches the whole depth past each read, every byte after
 * the first MiB is queued before it is asked for, nothing is queued twice
 * or past the end of the file, and the disk hint stays past the
 * decode-ahead (with drop_packed, a page hinted after its chunk was decoded
 * is read again and stays cached). */
START_TEST(ahead_long_run_gets_the_window)
{
    const uint64_t window = CKFS_DEFAULT_PREFETCH, req = 128 * KiB, fsize = 64 * MiB;
    ckfs_ahead a = {0};
    ckfs_ahead_plan p;
    uint64_t queued_to = 0, queued = 0;
    for (uint64_t pair = 0; pair < fsize; pair += 2 * req) {
        for (int k = 1; k >= 0; k--) {
            uint64_t off = pair + (uint64_t)k * req;
            if (off >= MiB)
                ck_assert_msg(off + req <= queued_to || off + req == fsize,
                              "read at %llu not queued ahead (queued to %llu)",
                              (unsigned long long)off, (unsigned long long)queued_to);
            ahead(&a, window, off, off + req, fsize, &p);
            if (p.to > p.from) {
                ck_assert_uint_ge(p.from, queued_to);
                ck_assert_uint_le(p.to, fsize);
                queued += p.to - p.from;
                queued_to = p.to;
            }
            if (p.hto > p.hfrom) /* never bytes whose chunks may be decoded (and dropped) */
                ck_assert_msg(p.hfrom >= queued_to, "read at %llu hints from %llu, queued to %llu",
                              (unsigned long long)off, (unsigned long long)p.hfrom,
                              (unsigned long long)queued_to);
            if (off >= 16 * MiB && off + req + window <= fsize)
                ck_assert_uint_ge(queued_to, off + req + window - req);
        }
    }
    ck_assert_uint_eq(queued_to, fsize);
    ck_assert_uint_le(queued, fsize);
}
END_TEST

/* A loader taking whole tensors in name order (layers.1, layers.10, ...:
 * not the file's order) reads each as a run of its own: nothing is queued
 * or hinted past the tensor's end, while the tensor itself is queued ahead
 * of its reads once its run is long.  (A run that crosses into the next
 * tensor is a stream and reads on: cat, or layers.10 -> layers.11.) */
START_TEST(ahead_tensor_runs_stop_at_the_tensor)
{
    const uint64_t tensor = 16 * MiB, req = 1 * MiB, fsize = 64 * KiB + 8 * tensor;
    static const int order[] = {3, 0, 5, 2, 7, 4, 1, 6}; /* no two in file order */
    ckfs_ahead a = {0};
    uint64_t past = 0, queued = 0;
    for (int i = 0; i < 8; i++) {
        uint64_t lo = 64 * KiB + (uint64_t)order[i] * tensor;
        read_run(&a, lo, lo + tensor, req, fsize, &queued, &past, &past); /* queued or hinted */
    }
    ck_assert_uint_gt(queued, 4 * tensor);
    ck_assert_msg(past == 0, "%llu bytes queued or hinted past the tensors read", (unsigned long long)past);
}
END_TEST

/* A read far from the last one starts a new run: nothing is queued for it. */
START_TEST(ahead_random_read_queues_nothing)
{
    ckfs_ahead a = {0};
    ckfs_ahead_plan p;
    for (uint64_t off = 0; off < 4 * MiB; off += 128 * KiB)
        ahead(&a, 4 * MiB, off, off + 128 * KiB, 64 * MiB, &p);
    ahead(&a, 4 * MiB, 40 * MiB, 40 * MiB + 4096, 64 * MiB, &p);
    ck_assert_uint_ge(p.from, p.to);
    ck_assert_uint_ge(p.hfrom, p.hto);
}
END_TEST

/* ---- drop_packed ------------------------------------------------------------ */

/* How many of the pages holding bytes [a, b) of the packed file (mincore
 * vector vec) are in the page cache, and how many there are. */
static void resident(const unsigned char *vec, uint64_t a, uint64_t b, unsigned *in, unsigned *all)
{
    long page = sysconf(_SC_PAGESIZE);
    *in = *all = 0;
    for (uint64_t pg = a / page; a < b && pg <= (b - 1) / page; pg++, ++*all)
        *in += vec[pg] & 1;
}

static unsigned char *cached_pages(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    *len = (size_t)st.st_size;
    void *m = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *vec = malloc((*len + page - 1) / page);
    ck_assert_int_eq(mincore(m, *len, vec), 0);
    munmap(m, *len);
    close(fd);
    return vec;
}

/* Chunk c's plane bytes [lo, hi) of plane p, with the 8 bytes past its end
 * that the decoder reads. */
static void chunk_bytes(const ckp_extent *x, uint64_t c, int p, uint64_t *lo, uint64_t *hi)
{
    ckp_span sp;
    ckp_chunk_span(x, c, c + 1, &sp);
    *lo = x->plane_offset[p] + sp.off[p];
    *hi = x->plane_offset[p] + (sp.end[p] + 8 < x->plane_size[p] ? sp.end[p] + 8 : x->plane_size[p]);
}

/* Every page that chunks k0, k0 + step, ... <= k1 of x read, in each plane,
 * is cached in vec (mincore of the packed file). */
static void assert_chunks_cached(const unsigned char *vec, const ckp_extent *x, uint64_t k0, uint64_t k1,
                                 uint64_t step)
{
    uint64_t lo, hi;
    unsigned in, all;
    for (int p = 0; p < 3; p++)
        for (uint64_t k = k0; k <= k1; k += step) {
            chunk_bytes(x, k, p, &lo, &hi);
            resident(vec, lo, hi, &in, &all);
            ck_assert_msg(in == all, "plane %d: %u of the %u pages chunk %llu reads dropped", p, all - in, all,
                          (unsigned long long)k);
        }
}

/* -o drop_packed: a decode drops the packed pages of the chunks decoded
 * around it, never a page a chunk not decoded yet reads (decodes run out of
 * order: dropping "the chunks before this one" made the daemon read them
 * from disk again).  Truth is mincore(2) on the packed file. */
START_TEST(drop_packed_keeps_the_pages_of_chunks_to_come)
{
    model md;
    ckfs_ctx c;
    char err[1024];
    uint64_t size;
    int e;
    unsigned in, all;
    size_t len;
    write_model(&md);
    memset(&c, 0, sizeof c);
    c.o.dst = tmpdir;
    c.o.cache_size = 64ull << 20;
    c.o.drop_packed = 1; /* no prefetch: only the reads below decode */
    ck_assert_msg(ckfs_ctx_load(&c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ckfs_cache_start(&c), 0);
    ckfs_ofile *of = open_w(&c, &size, &e);
    ck_assert_int_eq(e, 0);
    const ckp_extent *x = ckp_get_extent(atomic_load(&c.files[0].r), 0);
    ck_assert_uint_ge(x->n_chunks, 6);
    /* the whole packed file in the page cache, clean (written back: dirty
     * pages are never dropped), in single pages (FADV_RANDOM: no large
     * folios, which the kernel drops only whole) */
    int fd = open(md.packed, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fsync(fd), 0);
    ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
    char buf[4096];
    for (off_t o = 0; pread(fd, buf, sizeof buf, o) > 0; o += sizeof buf)
        ;
    close(fd);
    unsigned char *vec = cached_pages(md.packed, &len);
    resident(vec, 0, len, &in, &all);
    ck_assert_uint_eq(in, all);
    free(vec);
    const uint64_t ch = 2 * CKP_BF16_CHUNK_WEIGHTS;
    ck_assert_int_eq(read_check(&c, of, &md, 3 * ch, ch), 0); /* chunk 3 alone */
    vec = cached_pages(md.packed, &len);
    assert_chunks_cached(vec, x, 2, 4, 2);
    uint64_t lo3, hi3, lo4, hi4;
    chunk_bytes(x, 3, 0, &lo3, &hi3);
    chunk_bytes(x, 4, 0, &lo4, &hi4);
    resident(vec, lo3 + 4096, lo4 - 4096, &in, &all); /* chunk 3's own code pages */
    ck_assert_uint_gt(all, 0);
    ck_assert_msg(in == 0, "%u of chunk 3's %u code pages still cached", in, all);
    free(vec);
    /* chunks 2 and 4 decoded too: the pages they shared with 3 go now,
     * those of 1 and 5 stay */
    ck_assert_int_eq(read_check(&c, of, &md, 2 * ch, ch), 0);
    ck_assert_int_eq(read_check(&c, of, &md, 4 * ch, ch), 0);
    vec = cached_pages(md.packed, &len);
    resident(vec, lo3, lo3 + 1, &in, &all);
    ck_assert_msg(in == 0, "the code page chunks 2 and 3 share is still cached");
    assert_chunks_cached(vec, x, 1, 5, 4);
    free(vec);
    ckfs_file_close(of);
    close_model(&c, &md);
}
END_TEST

/* ---- O_DIRECT windows (plane_window.h) ------------------------------------- */

/* Windows loaded ahead decode every chunk to the original bytes; a window
 * leaves once each of its chunks was decoded from it; with every slot taken
 * by a loaded window nobody holds, a prefetch replaces the oldest; a window
 * whose load failed is not used.  (The descriptor need not be O_DIRECT:
 * the windows ask for whole aligned blocks either way.) */
START_TEST(windows_decode_the_original_bytes)
{
    model md;
    ckp_reader *r;
    char err[512];
    write_model(&md);
    ck_assert_int_eq(ckp_open(md.packed, &r, err, sizeof err), CKP_OK);
    int fd = open(md.packed, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ckp_scratch *s = ckp_scratch_new();
    uint8_t *buf = malloc(CKP_MAX_CHUNK);
    ckw_set *w = ckw_new(1, 2);
    ck_assert_ptr_nonnull(w);
    ckw_stats st;
    ckp_planes pl;
    ckw_window *win;
    for (uint32_t e = 0; e < 2; e++) { /* the K15 extent, then the raw one */
        const ckp_extent *x = ckp_get_extent(r, e);
        ck_assert_uint_ge(ckw_window_chunks(x), x->n_chunks); /* one window holds the extent */
        ckw_prefetch(w, 7, r, fd, e, 0, UINT64_MAX);
        for (uint64_t c = 0; c < x->n_chunks; c++) {
            win = ckw_get(w, 7, r, e, c, &pl);
            ck_assert_ptr_nonnull(win);
            ck_assert_int_eq(ckp_read_chunk_from(r, e, c, &pl, buf, s), CKP_OK);
            uint64_t at = x->orig_offset + c * x->chunk_size;
            ck_assert(memcmp(buf, md.orig + at, ckp_chunk_len(x, c)) == 0);
            ckw_put(w, win, c, 1);
        }
        ck_assert_ptr_null(ckw_get(w, 7, r, e, 0, &pl)); /* all served: gone */
    }
    ckw_get_stats(w, &st);
    ck_assert_uint_eq(st.loads, 2);
    ck_assert_uint_eq(st.hits, ckp_get_extent(r, 0)->n_chunks + ckp_get_extent(r, 1)->n_chunks);
    /* a window starts at the chunk its prefetch names (those before were
     * asked for already) */
    ckw_prefetch(w, 7, r, fd, 0, 2, UINT64_MAX);
    ck_assert_ptr_null(ckw_get(w, 7, r, 0, 1, &pl));
    win = ckw_get(w, 7, r, 0, 2, &pl);
    ck_assert_ptr_nonnull(win);
    ck_assert_int_eq(ckp_read_chunk_from(r, 0, 2, &pl, buf, s), CKP_OK);
    ck_assert_int_eq(ckp_read_chunk_from(r, 0, 1, &pl, buf, s), CKP_ERR_ARG); /* not in it */
    for (uint64_t c = 2; c < ckp_get_extent(r, 0)->n_chunks; c++)
        ckw_put(w, win, c, 1), win = c + 1 < ckp_get_extent(r, 0)->n_chunks ? ckw_get(w, 7, r, 0, c + 1, &pl) : NULL;
    ck_assert_ptr_null(ckw_get(w, 7, r, 0, 2, &pl)); /* used up */
    ckw_prefetch(w, 7, r, fd, 0, 0, 2); /* chunks 0 and 1 only */
    win = ckw_get(w, 7, r, 0, 1, &pl);
    ck_assert_ptr_nonnull(win);
    ck_assert_ptr_null(ckw_get(w, 7, r, 0, 2, &pl));
    ckw_put(w, win, 1, 1);
    ckw_put(w, ckw_get(w, 7, r, 0, 0, &pl), 0, 1);
    ck_assert_ptr_null(ckw_get(w, 7, r, 0, 0, &pl)); /* used up */
    /* one slot: a loaded window nobody used is replaced by the next prefetch */
    ckw_prefetch(w, 7, r, fd, 0, 0, UINT64_MAX);
    ckw_put(w, ckw_get(w, 7, r, 0, 0, &pl), 0, 0); /* waits for the load; nothing decoded */
    ckw_prefetch(w, 7, r, fd, 1, 0, UINT64_MAX);
    win = ckw_get(w, 7, r, 1, 0, &pl);
    ck_assert_ptr_nonnull(win);
    ck_assert_ptr_null(ckw_get(w, 7, r, 0, 0, &pl));
    ckw_get_stats(w, &st);
    ck_assert_uint_eq(st.replaced, 1);
    /* held: a prefetch finds no slot and is dropped */
    ckw_prefetch(w, 8, r, fd, 0, 0, UINT64_MAX);
    ckw_get_stats(w, &st);
    ck_assert_uint_eq(st.dropped, 1);
    ckw_put(w, win, 0, 0);
    /* a load that fails (a file with nothing in it) is not used */
    char empty[300];
    snprintf(empty, sizeof empty, "%s/empty", tmpdir);
    int efd = open(empty, O_RDWR | O_CREAT, 0644);
    ck_assert_int_ge(efd, 0);
    ckw_prefetch(w, 9, r, efd, 0, 0, UINT64_MAX);
    ck_assert_ptr_null(ckw_get(w, 9, r, 0, 0, &pl));
    ckw_get_stats(w, &st);
    ck_assert_uint_eq(st.failures, 1);
    ckw_prefetch(w, 10, r, -1, 0, 0, UINT64_MAX); /* no descriptor: nothing */
    ck_assert_ptr_null(ckw_get(w, 10, r, 0, 0, &pl));
    ckw_free(w);
    close(efd);
    close(fd);
    free(buf);
    ckp_scratch_free(s);
    ckp_close(r);
    free(md.orig);
}
END_TEST

/* path: a packed file of 2 x 256 KiB of text as one ZSTD extent whose
 * chunk 0 claims a frame of `claim` bytes: its frame then `claim` - len
 * zero bytes, up to chunk 1's frame (R47 refuses it: longer than zstd's
 * bound).  @return the original bytes (caller frees). */
static uint8_t *write_long_frame(const char *path, uint64_t claim)
{
    const uint32_t cs = 256 << 10;
    uint8_t *orig = malloc(2 * cs), sha[32] = {0};
    for (uint32_t i = 0; i < 2 * cs; i++)
        orig[i] = (uint8_t)"ckptfs windows "[i % 15] + (uint8_t)(i / 4096 % 3);
    size_t bound = ZSTD_compressBound(cs), n = 0;
    uint8_t *payload = calloc(1, claim + bound);
    size_t n0 = ZSTD_compress(payload, bound, orig, cs, 3);
    size_t n1 = ZSTD_compress(payload + claim, bound, orig + cs, cs, 3);
    ck_assert(!ZSTD_isError(n0) && !ZSTD_isError(n1) && claim > n0);
    ckp_chunk_entry ix[2] = {{0, ckc_hash64(orig, cs)}, {claim, ckc_hash64(orig + cs, cs)}};
    uint8_t *b = ckz_craft_extent(CKC_ENC_ZSTD, payload, claim + n1, 2 * cs, cs, ix, "big.bin", CKP_KIND_BLOB,
                                  sha, 0644, &n);
    ck_assert_ptr_nonnull(b);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(cku_pwrite_full(fd, b, n, 0), 0);
    close(fd);
    free(b);
    free(payload);
    return orig;
}

/* A window never loads what a chunk refused unread claims (R47: a frame
 * over zstd's bound; the decode reads nothing of it): it ends before that
 * chunk, and there is none for it.  A pack whose extents share one plane
 * of such a frame made the daemon hold a window of the whole plane per
 * extent (a 128 MiB file of 16 extents: 2 GiB held at cache_size=0).
 * And a window holds at most CKW_MAX_CHUNKS chunks (one bit each). */
START_TEST(windows_load_only_bounded_chunks)
{
    char path[300], err[512];
    const uint64_t claim = 32ull << 20;
    snprintf(path, sizeof path, "%s/big.bin%s", tmpdir, CKP_SUFFIX);
    uint8_t *orig = write_long_frame(path, claim);
    ckp_reader *r;
    ck_assert_msg(ckp_open(path, &r, err, sizeof err) == CKP_OK, "%s", err);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ckp_scratch *s = ckp_scratch_new();
    uint8_t *buf = malloc(256 << 10);
    ck_assert_int_eq(ckp_read_chunk(r, 0, 0, buf, s), CKP_ERR_CHUNK);
    ck_assert_int_eq(ckp_read_chunk(r, 0, 1, buf, s), CKP_OK);
    ck_assert_uint_eq(ckp_bounded_run(r, 0, 0, 2), 0);
    ck_assert_uint_eq(ckp_bounded_run(r, 0, 1, UINT64_MAX), 2);
    ckw_set *w = ckw_new(2, 1);
    ckw_stats st;
    ckp_planes pl;
    ckw_prefetch(w, 0, r, fd, 0, 0, UINT64_MAX);
    ck_assert_ptr_null(ckw_get(w, 0, r, 0, 0, &pl));
    ckw_prefetch(w, 0, r, fd, 0, 1, UINT64_MAX);
    ckw_window *win = ckw_get(w, 0, r, 0, 1, &pl);
    ck_assert_ptr_nonnull(win);
    ck_assert_int_eq(ckp_read_chunk_from(r, 0, 1, &pl, buf, s), CKP_OK);
    ck_assert(memcmp(buf, orig + (256 << 10), 256 << 10) == 0);
    ckw_put(w, win, 1, 1);
    ckw_get_stats(w, &st);
    ck_assert_msg(st.load_bytes <= (256 << 10), "windows loaded %llu bytes for a frame of at most 256 KiB",
                  (unsigned long long)st.load_bytes);
    ckw_free(w);
    ckp_close(r);
    close(fd);
    free(orig);
    /* one-byte chunks: a window of CKW_MAX_CHUNKS of them, not CKW_BYTES */
    uint8_t data[4096], sha[32] = {0};
    size_t n;
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)rnd();
    uint8_t *b = ckz_craft_raw(data, sizeof data, 1, "big.bin", sha, 0644, &n);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_eq(cku_pwrite_full(fd, b, n, 0), 0);
    close(fd);
    free(b);
    ck_assert_msg(ckp_open(path, &r, err, sizeof err) == CKP_OK, "%s", err);
    ck_assert_uint_eq(ckw_window_chunks(ckp_get_extent(r, 0)), CKW_MAX_CHUNKS);
    fd = open(path, O_RDONLY);
    w = ckw_new(1, 1);
    ckw_prefetch(w, 0, r, fd, 0, 0, UINT64_MAX);
    for (uint64_t c = 0; c < CKW_MAX_CHUNKS; c++) {
        ck_assert_ptr_nonnull(win = ckw_get(w, 0, r, 0, c, &pl));
        ck_assert_int_eq(ckp_read_chunk_from(r, 0, c, &pl, buf, s), CKP_OK);
        ck_assert_uint_eq(buf[0], data[c]);
        ckw_put(w, win, c, 1);
    }
    ck_assert_ptr_null(ckw_get(w, 0, r, 0, 0, &pl)); /* used up: gone */
    ck_assert_ptr_null(ckw_get(w, 0, r, 0, CKW_MAX_CHUNKS, &pl)); /* never in it */
    ckw_free(w);
    ckp_close(r);
    close(fd);
    free(buf);
    ckp_scratch_free(s);
}
END_TEST

/* A read of more chunks than one reply's pieces is copied as it goes: the
 * request holds at most CKFS_MAX_IOV cache entries, not one per chunk (a
 * 1 MiB read of one-byte chunks held 2^20 entries, ~170 MiB, and every
 * lookup of the cache's fixed table walked chains of them: minutes per read
 * under the cache's one lock).  The bytes are the original's. */
/* tmpdir/big.bin.ckpt: size random bytes as one RAW extent of one-byte
 * chunks (format §4.1), the manifest listing it alone.  @return the bytes;
 * *plane: where they lie in the packed file. */
static uint8_t *write_one_byte_chunks(uint64_t size, uint64_t *plane)
{
    uint8_t *data = malloc(size), sha[32] = {0};
    for (uint64_t i = 0; i < size; i++)
        data[i] = (uint8_t)rnd();
    size_t n = 0;
    uint8_t *b = ckz_craft_raw(data, size, 1, "big.bin", sha, 0644, &n);
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/big.bin%s", tmpdir, CKP_SUFFIX);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_eq(cku_pwrite_full(fd, b, n, 0), 0);
    close(fd);
    free(b);
    ckm_file f = {.path = "big.bin", .size = size, .mode = 0644, .kind = CKP_KIND_BLOB};
    ckm_manifest m = {.files = &f, .n_files = 1};
    ck_assert_int_eq(ckm_write(tmpdir, &m, err, sizeof err), CKP_OK);
    ckp_reader *r;
    ck_assert_int_eq(ckp_open(path, &r, err, sizeof err), CKP_OK);
    *plane = ckp_get_extent(r, 0)->plane_offset[0];
    ckp_close(r);
    return data;
}

START_TEST(read_of_many_chunks_holds_few)
{
    const uint64_t size = 64 << 10;
    uint64_t plane;
    uint8_t *data = write_one_byte_chunks(size, &plane);
    ckfs_ctx c;
    ctx_open(&c, 0, 0);
    ckfs_ofile *of;
    ck_assert_int_eq(ckfs_file_open(&c, 0, &of), 0);
    for (uint64_t off = 0; off < size; off += 40000) { /* a read of 40000 chunks, then the rest */
        ckfs_pieces p;
        ck_assert_int_eq(ckfs_read(&c, of, size, off, 40000, &p), 0);
        ckcache_stats st;
        ckcache_get_stats(c.cache, &st);
        ck_assert_uint_le(p.n, CKFS_MAX_IOV);
        ck_assert_msg(st.entries <= CKFS_MAX_IOV, "the read holds %llu cache entries",
                      (unsigned long long)st.entries);
        uint64_t want = size - off < 40000 ? size - off : 40000;
        ck_assert_uint_eq(p.total, want);
        char *flat = ckfs_pieces_copy(&p);
        ck_assert(memcmp(flat, data + off, want) == 0);
        free(flat);
        ckfs_pieces_release(&c, &p, 1);
    }
    ckfs_file_close(of);
    ctx_close(&c);
    free(data);
}
END_TEST

/* Bytes malloc has handed out and not had back (glibc's own count; 0 under
 * ASan, whose malloc it is then). */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* The cache's limit counts each entry's bookkeeping (~130 bytes), not only
 * its decoded bytes: a pack of one-byte chunks (legal, §4.1) whose reads
 * fail on a damaged chunk leaves each read's chunks cached unserved, and
 * 100 such reads under cache_size=256K held 100,000 entries counted as
 * 100 KiB: ~13 MiB of heap.  Now the heap the reads leave behind stays
 * within the limit, and intact bytes still read back exactly. */
START_TEST(one_byte_chunks_keep_the_cache_limit)
{
    const uint64_t size = 100 * 1000;
    uint64_t plane;
    uint8_t *data = write_one_byte_chunks(size, &plane);
    char path[300];
    snprintf(path, sizeof path, "%s/big.bin%s", tmpdir, CKP_SUFFIX);
    for (uint64_t k = 0; k < size / 1000; k++)
        flip(path, plane + k * 1000 + 999);          /* the last byte of every 1000 */
    ckfs_ctx c;
    char err[512];
    memset(&c, 0, sizeof c);
    c.o.dst = tmpdir;
    c.o.cache_size = 256u << 10;
    c.o.mmap = 1;
    ck_assert_msg(ckfs_ctx_load(&c, err, sizeof err) == CKFS_OK, "%s", err);
    ck_assert_int_eq(ckfs_cache_start(&c), CKFS_OK);
    ckfs_ofile *of;
    ck_assert_int_eq(ckfs_file_open(&c, 0, &of), 0);
    size_t base = heap_in_use();
    for (uint64_t off = 0; off < size; off += 1000) {
        ckfs_pieces p;
        ck_assert_int_eq(ckfs_read(&c, of, size, off, 1000, &p), EIO);
    }
    ckcache_stats st;
    ckcache_get_stats(c.cache, &st);
    size_t held = heap_in_use() - base;
    ck_assert_msg(st.entries * 64 <= c.o.cache_size, "%llu entries under cache_size=%llu",
                  (unsigned long long)st.entries, (unsigned long long)c.o.cache_size);
    /* 64 KiB: what malloc's per-thread caches and the reads' own buffers may keep */
    ck_assert_msg(held <= c.o.cache_size + (64u << 10), "the reads left %zu bytes of heap (%llu entries)", held,
                  (unsigned long long)st.entries);
    ckfs_pieces p;
    ck_assert_int_eq(ckfs_read(&c, of, size, 1000, 999, &p), 0);
    char *flat = ckfs_pieces_copy(&p);
    ck_assert(p.total == 999 && memcmp(flat, data + 1000, 999) == 0);
    free(flat);
    ckfs_pieces_release(&c, &p, 1);
    ckfs_file_close(of);
    ctx_close(&c);
    free(data);
}
END_TEST

/* Damage in one chunk: reads touching it fail with EIO, every time; the
 * other chunks still read back exactly. */
START_TEST(damaged_chunk_is_eio)
{
    model md;
    ckfs_ctx c;
    uint64_t size;
    int err;
    write_model(&md);
    ckp_reader *r;
    char msg[512];
    ck_assert_int_eq(ckp_open(md.packed, &r, msg, sizeof msg), CKP_OK);
    const ckp_extent *x = ckp_get_extent(r, 0);
    ckp_span sp;
    ckp_chunk_span(x, 2, 3, &sp);
    uint64_t at = x->plane_offset[1] + sp.off[1] + 1000; /* a low byte of chunk 2 */
    ckp_close(r);
    flip(md.packed, at);
    ctx_open(&c, 0, 0);
    ckfs_ofile *of = open_w(&c, &size, &err);
    ck_assert_int_eq(err, 0);
    uint64_t c2 = 2 * 2 * CKP_BF16_CHUNK_WEIGHTS;
    ck_assert_int_eq(read_check(&c, of, &md, c2 + 10, 10), EIO);
    ck_assert_int_eq(read_check(&c, of, &md, c2 - 10, 20), EIO); /* spans chunks 1 and 2 */
    ck_assert_int_eq(read_check(&c, of, &md, c2 + 10, 10), EIO); /* still */
    ck_assert_int_eq(read_check(&c, of, &md, 0, c2), 0);
    ck_assert_int_eq(read_check(&c, of, &md, c2 + 2 * CKP_BF16_CHUNK_WEIGHTS, md.size), 0);
    ckfs_file_close(of);
    close_model(&c, &md);
}
END_TEST

/* An archive extent's chunks are decoded in runs of 2-4 for the
 * decode-ahead (the cache's run fill, fill_chunks): sequential reads get
 * the original bytes, and damage in one chunk is EIO for the reads touching
 * it alone, every time, whichever chunk of a run it is (the runs are formed
 * by the threads' timing: rounds until one of more than 2 was, 20 at
 * most). */
START_TEST(archive_runs_keep_damage_to_its_chunk)
{
    model md;
    ckfs_ctx c;
    uint64_t size;
    int err;
    ckcache_stats s = {0};
    w_enc = CKC_ENC_ARCHIVE;
    write_model(&md);
    w_enc = CKC_ENC_K15;
    ckp_reader *r;
    char msg[512];
    ck_assert_int_eq(ckp_open(md.packed, &r, msg, sizeof msg), CKP_OK);
    const ckp_extent *x = ckp_get_extent(r, 0);
    ck_assert_uint_eq(x->encoding, CKC_ENC_ARCHIVE);
    ckp_span sp;
    ckp_chunk_span(x, (uint64_t)_i + 1, (uint64_t)_i + 2, &sp);
    uint64_t at = x->plane_offset[1] + sp.off[1] + 200; /* a word of chunk _i + 1 */
    uint64_t bad0 = ((uint64_t)_i + 1) * x->chunk_size, bad1 = bad0 + x->chunk_size;
    ckp_close(r);
    flip(md.packed, at);
    /* Whether a run longer than 2 forms depends on when the workers take
     * the queued jobs: 1-5 rounds here idle, but 20 were not enough once
     * at load 20.  Rounds are short (the whole test takes ~3.5 s); 200 stay
     * within the test's timeout even under a sanitizer. */
    for (int round = 0; round < 200 && s.run_chunks <= 2 * s.runs; round++) {
        s = (ckcache_stats){0};
        ctx_open(&c, 2, 4u << 20);
        ckfs_ofile *of = open_w(&c, &size, &err);
        ck_assert_int_eq(err, 0);
        for (int pass = 0; pass < 2; pass++) { /* requests of 2, then 4 chunks: the decode-ahead queues that many */
            uint64_t rq = (pass ? 512 : 256) * KiB;
            for (uint64_t off = 0; off < md.size; off += rq) {
                int hit = off < bad1 && off + rq > bad0;
                ck_assert_int_eq(read_check(&c, of, &md, off, rq), hit ? EIO : 0);
            }
        }
        ckcache_get_stats(c.cache, &s);
        ckfs_file_close(of);
        ctx_close(&c);
    }
    ck_assert_uint_gt(s.runs, 0);
    ck_assert_uint_gt(s.run_chunks, 2 * s.runs);
    ck_assert_uint_le(s.run_chunks, CKCACHE_RUN_MAX * s.runs);
    free(md.orig);
}
END_TEST

/* A packed file that is gone or not a packed file: open fails (EIO for
 * damage, remembered), and loading a directory without a manifest names it. */
START_TEST(bad_packed_files)
{
    model md;
    ckfs_ctx c;
    uint64_t size;
    int err;
    char msg[1024];
    write_model(&md);
    int fd = open(md.packed, O_WRONLY | O_TRUNC);
    ck_assert_int_eq(write(fd, "not a packed file", 17), 17);
    close(fd);
    ctx_open(&c, 0, 0);
    ck_assert_ptr_null(open_w(&c, &size, &err));
    ck_assert_int_eq(err, EIO);
    /* what the mount command checks before it mounts */
    ck_assert_int_eq(ckfs_open_all(&c, msg, sizeof msg), CKFS_ERR_DAMAGED);
    ck_assert_msg(strstr(msg, "1 of 1 packed files cannot be read") != NULL, "%s", msg);
    ck_assert_int_eq(unlink(md.packed), 0);
    ck_assert_ptr_null(open_w(&c, &size, &err));
    ck_assert_int_eq(err, EIO); /* damage does not heal */
    ctx_close(&c);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/d", tmpdir);
    memset(&c, 0, sizeof c);
    c.o.dst = sub;
    ck_assert_int_eq(ckfs_ctx_load(&c, msg, sizeof msg), CKFS_ERR_NOT_PACKED);
    ck_assert_msg(strstr(msg, sub) != NULL, "message does not name the directory: %s", msg);
    ckfs_ctx_free(&c);
    /* a directory that is not there: an I/O error, not "not packed" */
    snprintf(sub, sizeof sub, "%s/gone", tmpdir);
    memset(&c, 0, sizeof c);
    c.o.dst = sub;
    ck_assert_int_eq(ckfs_ctx_load(&c, msg, sizeof msg), CKFS_ERR_IO);
    ck_assert_msg(strstr(msg, sub) != NULL && strstr(msg, strerror(ENOENT)) != NULL, "%s", msg);
    ckfs_ctx_free(&c);
    free(md.orig);
}
END_TEST

/* ---- a packed file changed while mounted ------------------------------------ */

static uint32_t changed_calls, changed_file;
static void note_change(void *arg, uint32_t file)
{
    ck_assert_ptr_eq(arg, &changed_calls);
    changed_calls++;
    changed_file = file;
}

/* c's changes counted in changed_calls (from 0) and changed_file. */
static void watch_changes(ckfs_ctx *c)
{
    changed_calls = 0;
    c->on_change = note_change;
    c->on_change_arg = &changed_calls;
}

/* Changes made to d/w.bin.ckpt under a running context: the first three
 * leave a file that passes re-validation (the same bytes, or the same file
 * packed again: the same table of contents), the rest one that does not. */
enum { CH_REPACKED, CH_WRITTEN, CH_WRITTEN_MTIME_BACK, CH_KEPT,
       CH_OTHER = CH_KEPT, CH_RELAYOUT, CH_REMOVED, CH_TRUNCATED, CH_N };

/* path: orig packed as one raw extent (the same path, size and SHA-256 as
 * pack_to's, another table of contents). */
static void pack_raw_to(const char *path, const uint8_t *orig, uint64_t size)
{
    ckp_writer_opts o = {.path = "d/w.bin", .kind = CKP_KIND_BLOB, .mode = 0644, .mtime_ns = 42};
    const test_extent x[] = {{CKC_ENC_RAW, size, "", 0}};
    uint8_t sha[32] = {0};
    write_packed(path, &o, orig, x, 1, sha);
}

static void change_packed(const model *md, int how)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", md->packed);
    struct stat st;
    ck_assert_int_eq(stat(md->packed, &st), 0);
    usleep(20000); /* past the coarse clock's tick: the file's times can change */
    if (how == CH_REPACKED || how == CH_OTHER || how == CH_RELAYOUT) {
        /* the same file packed again (or packed otherwise), or another
         * valid pack of the same path and size, renamed over it (a pack
         * updated under the mount) */
        uint8_t *other = how == CH_OTHER ? make_orig(md->size) : NULL;
        if (how == CH_RELAYOUT)
            pack_raw_to(tmp, md->orig, md->size);
        else
            pack_to(tmp, other ? other : md->orig, md->size);
        free(other);
        ck_assert_int_eq(rename(tmp, md->packed), 0);
    } else if (how == CH_WRITTEN || how == CH_WRITTEN_MTIME_BACK) {
        /* the same byte written back in place: the bytes are unchanged */
        int fd = open(md->packed, O_RDWR);
        uint8_t b;
        ck_assert_int_eq(pread(fd, &b, 1, 100), 1);
        ck_assert_int_eq(pwrite(fd, &b, 1, 100), 1);
        if (how == CH_WRITTEN_MTIME_BACK) { /* the mtime set back: only the ctime tells */
            struct timespec ts[2] = {st.st_atim, st.st_mtim};
            ck_assert_int_eq(futimens(fd, ts), 0);
        }
        close(fd);
    } else if (how == CH_REMOVED) {
        ck_assert_int_eq(unlink(md->packed), 0);
    } else {
        ck_assert_int_eq(truncate(md->packed, st.st_size - 1), 0);
    }
}

/* The log written to fd since it was opened, NUL-terminated in buf. */
static void read_log(int fd, char *buf, size_t cap)
{
    ckfs_log_to_fd(-1);
    ssize_t n = pread(fd, buf, cap - 1, 0);
    close(fd);
    ck_assert_int_ge(n, 0);
    buf[n] = 0;
}

/* The daemon's log to tmpdir/log, from now on. */
static int log_to_file(void)
{
    char logpath[300];
    snprintf(logpath, sizeof logpath, "%s/log", tmpdir);
    int logfd = open(logpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(logfd, 0);
    ckfs_log_to_fd(logfd);
    return logfd;
}

/* The model open in c, its changes watched and its log in a file (*logfd),
 * w.bin open with its chunk 0 read (cached), and then its packed file
 * changed by how (change_packed).  @return w.bin's open file. */
static ckfs_ofile *read_then_change(model *md, ckfs_ctx *c, int how, int *logfd)
{
    uint64_t size;
    int err;
    open_model(md, c, 0, 0);
    watch_changes(c);
    *logfd = log_to_file();
    ckfs_ofile *of = open_w(c, &size, &err);
    ck_assert_int_eq(err, 0);
    ck_assert_int_eq(read_check(c, of, md, 0, 4096), 0); /* chunk 0 now cached */
    change_packed(md, how);
    return of;
}

/* A packed file renamed over by another valid one (another original, or
 * the same packed otherwise: another table of contents), removed or
 * truncated while the context serves it: found at the next decode of one
 * of its chunks (_i even) or the next open (_i odd); one log line names the
 * file and what changed, on_change is called once, and every open and read
 * of it fails with EIO from then on, chunks already cached included.  No
 * read returns a byte other than the original's (read_check). */
START_TEST(changed_packed_file_is_eio)
{
    static const char *what[CH_N] = {[CH_OTHER] = "replaced while mounted", [CH_RELAYOUT] = "replaced while mounted",
                                     [CH_REMOVED] = "removed while mounted",
                                     [CH_TRUNCATED] = "changed size while mounted"};
    static const char *why[CH_N] = {[CH_OTHER] = "table of contents is not the one mounted", /* same SHA-256 */
                                    [CH_RELAYOUT] = "table of contents is not the one mounted",
                                    [CH_REMOVED] = "No such file", [CH_TRUNCATED] = "cannot open packed file"};
    int how = CH_KEPT + _i / 2, by_open = _i % 2, logfd, err;
    model md;
    ckfs_ctx c;
    uint64_t size, chunk = 2 * CKP_BF16_CHUNK_WEIGHTS;
    ckfs_ofile *of = read_then_change(&md, &c, how, &logfd);
    if (by_open) {
        ck_assert_ptr_null(open_w(&c, &size, &err));
        ck_assert_int_eq(err, EIO);
    }
    ck_assert_int_eq(read_check(&c, of, &md, 3 * chunk + 5, 100), EIO);  /* decoded from disk */
    ck_assert_int_eq(read_check(&c, of, &md, 10, 100), EIO);             /* cached */
    ck_assert_int_eq(read_check(&c, of, &md, W_BYTES + 10, 100), EIO);   /* the raw extent */
    ck_assert_ptr_null(open_w(&c, &size, &err));
    ck_assert_int_eq(err, EIO);
    ck_assert_uint_eq(changed_calls, 1);
    ck_assert_uint_eq(changed_file, 0);
    char buf[4096], want[200];
    read_log(logfd, buf, sizeof buf);
    snprintf(want, sizeof want, "d/w.bin: packed file %s", what[how]);
    ck_assert_msg(strstr(buf, want) != NULL, "no line \"%s\" in the log:\n%s", want, buf);
    ck_assert_msg(strstr(buf, why[how]) != NULL, "no \"%s\" in the log:\n%s", why[how], buf);
    ck_assert_msg(strchr(buf, '\n') == buf + strlen(buf) - 1, "not one log line:\n%s", buf);
    ckfs_file_close(of);
    close_model(&c, &md);
}
END_TEST

/* A packed file renamed over by the same file packed again, or written in
 * place with the same bytes (even with its mtime set back), is re-validated
 * at the next decode (_i even) or open (_i odd) and served on: every byte
 * read back exactly, cached or decoded from the new file, on_change never
 * called, one line in the log.  (Until 3 December such a file was EIO until
 * the next mount.) */
START_TEST(rewritten_packed_file_is_served)
{
    int how = _i / 2, by_open = _i % 2, logfd, err;
    model md;
    ckfs_ctx c;
    uint64_t size, chunk = 2 * CKP_BF16_CHUNK_WEIGHTS;
    ckfs_ofile *of = read_then_change(&md, &c, how, &logfd);
    if (by_open) {
        ckfs_ofile *o2 = open_w(&c, &size, &err);
        ck_assert_int_eq(err, 0);
        ckfs_file_close(o2);
    }
    ck_assert_int_eq(read_check(&c, of, &md, 3 * chunk + 5, 100), 0);
    ck_assert_int_eq(read_check(&c, of, &md, 10, 100), 0);
    for (uint64_t off = 0; off < md.size; off += 100000)
        ck_assert_int_eq(read_check(&c, of, &md, off, 100000), 0);
    ck_assert_uint_eq(changed_calls, 0);
    char buf[4096];
    read_log(logfd, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "d/w.bin: packed file ") && strstr(buf, "re-validated") &&
                      strstr(buf, "served again"),
                  "no line about the re-validation in the log:\n%s", buf);
    ck_assert_msg(strchr(buf, '\n') == buf + strlen(buf) - 1, "not one log line:\n%s", buf);
    ckfs_file_close(of);
    close_model(&c, &md);
}
END_TEST

/* Refused, then the right file put back (packed again, renamed over it):
 * served again at the next read, cached chunks and decodes alike; refused again when
 * another is put there (on_change once per refusal). */
START_TEST(refused_packed_file_served_once_put_back)
{
    model md;
    ckfs_ctx c;
    uint64_t size;
    int err;
    open_model(&md, &c, 1, 1u << 20);
    watch_changes(&c);
    ckfs_ofile *of = open_w(&c, &size, &err);
    ck_assert_int_eq(err, 0);
    ck_assert_int_eq(read_check(&c, of, &md, 0, 4096), 0);
    for (int round = 0; round < 3; round++) {
        change_packed(&md, CH_OTHER);
        ck_assert_ptr_null(open_w(&c, &size, &err)); /* an open checks (a cached chunk's read need not) */
        ck_assert_int_eq(err, EIO);
        ck_assert_int_eq(read_check(&c, of, &md, 10, 100), EIO);
        ck_assert_uint_eq(changed_calls, (unsigned)round + 1);
        change_packed(&md, CH_REPACKED);
        ck_assert_int_eq(read_check(&c, of, &md, 10, 100), 0);
        for (uint64_t off = 0; off < md.size; off += 65536)
            ck_assert_int_eq(read_check(&c, of, &md, off, 65536), 0);
        ckfs_ofile *o2 = open_w(&c, &size, &err);
        ck_assert_int_eq(err, 0);
        ckfs_file_close(o2);
    }
    ckfs_file_close(of);
    close_model(&c, &md);
}
END_TEST

/* Readers while the file is swapped under them, again and again, between
 * the right file and another valid one: every read returns the original's
 * bytes or EIO, never other bytes (a read spanning chunks decoded from
 * both included), and once the right file is back every read succeeds. */
typedef struct {
    ckfs_ctx *c;
    const model *md;
    atomic_int stop;
    int rounds;                    /* opens per reader; 0: until stop */
    atomic_long ok, eio, wrong, other;
} swap_readers;

static void *swap_reader(void *arg)
{
    swap_readers *s = arg;
    uint64_t size;
    int err;
    uint64_t seed = (uint64_t)(uintptr_t)&size;
    for (int round = 0; s->rounds ? round < s->rounds : !atomic_load(&s->stop); round++) {
        ckfs_ofile *of = NULL;
        uint64_t d = cki_lookup(s->c->t, CKI_ROOT, "d"), ino = cki_lookup(s->c->t, d, "w.bin");
        size = cki_get(s->c->t, ino)->size;
        err = ckfs_file_open(s->c, (uint32_t)cki_get(s->c->t, ino)->file, &of);
        for (int k = 0; !err && k < 16; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t off = (seed >> 20) % size, len = 3 * 2 * CKP_BF16_CHUNK_WEIGHTS;
            ckfs_pieces p;
            int e = ckfs_read(s->c, of, size, off, len, &p);
            if (e == EIO) {
                atomic_fetch_add(&s->eio, 1);
                continue;
            }
            if (e) {
                atomic_fetch_add(&s->other, 1);
                continue;
            }
            char *flat = ckfs_pieces_copy(&p);
            if (!flat || memcmp(flat, s->md->orig + off, p.total))
                atomic_fetch_add(&s->wrong, 1);
            else
                atomic_fetch_add(&s->ok, 1);
            free(flat);
            ckfs_pieces_release(s->c, &p, 1);
        }
        if (err && err != EIO)
            atomic_fetch_add(&s->other, 1);
        ckfs_file_close(of);
    }
    return NULL;
}

START_TEST(swaps_under_readers_never_mix)
{
    model md;
    ckfs_ctx c;
    open_model(&md, &c, 2, 1u << 20);
    swap_readers s = {.c = &c, .md = &md};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, swap_reader, &s), 0);
    for (int round = 0; round < 12; round++) {
        change_packed(&md, round % 2 ? CH_REPACKED : CH_OTHER);
        usleep(5000);
    }
    change_packed(&md, CH_REPACKED);
    atomic_store(&s.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(atomic_load(&s.wrong), 0);
    ck_assert_int_eq(atomic_load(&s.other), 0);
    uint64_t size;
    int err;
    ckfs_ofile *of = open_w(&c, &size, &err); /* sees the right file: served again */
    ck_assert_int_eq(err, 0);
    for (uint64_t off = 0; off < md.size; off += 65536)
        ck_assert_int_eq(read_check(&c, of, &md, off, 65536), 0);
    ckfs_file_close(of);
    /* the right file there: readers get every byte, nothing refused */
    swap_readers t = {.c = &c, .md = &md, .rounds = 20};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, swap_reader, &t), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(atomic_load(&t.wrong) + atomic_load(&t.other) + atomic_load(&t.eio), 0);
    ck_assert_int_eq(atomic_load(&t.ok), 3 * 20 * 16);
    close_model(&c, &md);
}
END_TEST

/* Reads, opens and the times the reads themselves change (atime) are not
 * changes: a file left alone serves every byte, and on_change is never
 * called. */
START_TEST(unchanged_packed_file_keeps_serving)
{
    model md;
    ckfs_ctx c;
    uint64_t size;
    int err;
    open_model(&md, &c, 1, 1u << 20);
    watch_changes(&c);
    for (int it = 0; it < 3; it++) {
        ckfs_ofile *of = open_w(&c, &size, &err);
        ck_assert_int_eq(err, 0);
        for (uint64_t off = 0; off < md.size; off += 128 << 10)
            ck_assert_int_eq(read_check(&c, of, &md, off, 128 << 10), 0);
        ckfs_file_close(of);
        usleep(10000);
    }
    ck_assert_uint_eq(changed_calls, 0);
    close_model(&c, &md);
}
END_TEST

/* ---- the inode table ------------------------------------------------------- */

START_TEST(inode_table_tree)
{
    ckm_file f[] = {{.path = "a/b/c.bin", .size = 5, .mode = 0100600, .mtime_ns = 7},
                    {.path = "a/x", .size = 9, .mode = 0100644},
                    {.path = "z", .size = 0, .mode = 0100444}};
    ckm_dir d[] = {{.path = "a", .mode = 040700}, {.path = "a/b", .mode = 040750}, {.path = "e", .mode = 040755}};
    ckm_manifest m = {.files = f, .n_files = 3, .dirs = d, .n_dirs = 3};
    cki_table *t;
    char err[256];
    ck_assert_msg(cki_build(&m, 0750, 99, &t, err, sizeof err) == CKFS_OK, "%s", err);
    /* 1 root, 2-4 the listed dirs, 5-7 the files */
    ck_assert_uint_eq(cki_count(t), 7);
    ck_assert_uint_eq(cki_file_ino(t, 0), 5);
    ck_assert_uint_eq(cki_file_ino(t, 2), 7);
    const cki_node *root = cki_get(t, CKI_ROOT);
    ck_assert_uint_eq(root->n_children, 3);
    ck_assert_uint_eq(root->n_subdirs, 2);
    ck_assert_uint_eq(root->parent, CKI_ROOT);
    ck_assert_int_eq(root->mode, 040750); /* the packed directory's mode, given */
    static const char *names[] = {"a", "e", "z"}; /* sorted */
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(cki_get(t, root->children[i])->name, names[i]);
    uint64_t a = cki_lookup(t, CKI_ROOT, "a"), b = cki_lookup(t, a, "b"), cb = cki_lookup(t, b, "c.bin");
    ck_assert_uint_eq(a, 2);
    ck_assert_uint_eq(b, 3);
    ck_assert_uint_eq(cb, 5);
    ck_assert_int_eq(cki_get(t, a)->mode, 040700);
    ck_assert_int_eq(cki_get(t, b)->mode, 040750);
    ck_assert_int_eq(cki_get(t, b)->mtime_ns, 99);
    ck_assert_uint_eq(cki_get(t, b)->parent, a);
    ck_assert_uint_eq(cki_get(t, a)->n_children, 2);
    ck_assert_uint_eq(cki_get(t, a)->n_subdirs, 1);
    const cki_node *n = cki_get(t, cb);
    ck_assert_str_eq(n->path, "a/b/c.bin");
    ck_assert_uint_eq(n->size, 5);
    ck_assert_int_eq(n->mtime_ns, 7);
    ck_assert_int_eq(n->file, 0);
    ck_assert_uint_eq(cki_lookup(t, CKI_ROOT, "nope"), 0);
    ck_assert_uint_eq(cki_lookup(t, CKI_ROOT, "a/x"), 0);
    ck_assert_ptr_null(cki_get(t, 0));
    ck_assert_ptr_null(cki_get(t, 8));
    cki_free(t);
}
END_TEST

/* A manifest the inode table could not build (a directory listed twice, a
 * file under a file, a parent not listed, a path both a file and a
 * directory) never reaches it: ckm_load refuses each (M2-M4, manifest.h),
 * naming the path, so cki_build only asserts that they hold. */
START_TEST(inode_table_conflicts_refused_by_the_manifest)
{
    ckm_file file_under_file[] = {{.path = "a", .size = 1, .mode = 0644}, {.path = "a/b", .size = 1, .mode = 0644}};
    ckm_dir twice[] = {{.path = "x", .mode = 0755}, {.path = "x", .mode = 0755}};
    ckm_file in_x = {.path = "x/f", .size = 1, .mode = 0644};
    ckm_dir a_dir = {.path = "a", .mode = 0755};
    const struct {
        ckm_manifest m;
        const char *why;
    } bad[] = {
        {{.files = file_under_file, .n_files = 2}, "parent directory of \"a/b\" is not listed"},
        {{.files = file_under_file, .n_files = 2, .dirs = &a_dir, .n_dirs = 1}, "\"a\" is both a file and a directory"},
        {{.dirs = twice, .n_dirs = 2}, "duplicate directory \"x\""},
        {{.files = &in_x, .n_files = 1}, "parent directory of \"x/f\" is not listed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[512] = "";
        ckm_manifest m = bad[i].m, *l = NULL;
        ck_assert_int_eq(ckm_write(tmpdir, &m, err, sizeof err), CKP_OK);
        ck_assert_int_eq(ckm_load(tmpdir, &l, err, sizeof err), CKP_ERR_CORRUPT);
        ck_assert_msg(strstr(err, bad[i].why) != NULL, "case %zu: %s", i, err);
        ck_assert_ptr_null(l);
    }
}
END_TEST

#ifndef NDEBUG
/* Given one anyway, a debug build stops at the broken guarantee. */
START_TEST(inode_table_asserts_the_manifest_guarantees)
{
    ckm_dir twice[] = {{.path = "x", .mode = 0755}, {.path = "x", .mode = 0755}};
    ckm_manifest m = {.dirs = twice, .n_dirs = 2};
    cki_table *t = NULL;
    char err[256];
    cki_build(&m, 0755, 0, &t, err, sizeof err); /* raises SIGABRT */
    cki_free(t);
}
END_TEST
#endif

/* ---- mount options ----------------------------------------------------------- */

static ckfs_status parse(ckfs_mount_opts *o, char *err, const char *a1, const char *a2, const char *a3,
                 const char *a4)
{
    char *argv[] = {"mount", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    int argc = 1;
    while (argv[argc])
        argc++;
    err[0] = 0;
    return ckfs_parse_mount_args(argc, argv, o, err, 512);
}

START_TEST(mount_options)
{
    ckfs_mount_opts o;
    char err[512];
    ck_assert_int_eq(parse(&o, err, "P", "M", NULL, NULL), CKFS_OK);
    ck_assert_str_eq(o.dst, "P");
    ck_assert_str_eq(o.mnt, "M");
    ck_assert_uint_eq(o.cache_size, 256ull << 20);
    ck_assert_uint_eq(o.threads, 16);
    ck_assert_uint_eq(o.prefetch, 1ull << 20);
    ck_assert_uint_eq(o.read_ahead_kb, 1024);
    ck_assert_int_eq(o.mmap, 1);
    ck_assert_int_eq(o.drop_packed, -1);
    ck_assert_int_eq(o.foreground, 0);
    ck_assert_int_eq(parse(&o, err, "-o", "cache_size=1G,threads=3,prefetch=0,nommap", "P", "M"), CKFS_OK);
    ck_assert_uint_eq(o.cache_size, 1ull << 30);
    ck_assert_uint_eq(o.threads, 3);
    ck_assert_uint_eq(o.prefetch, 0);
    ck_assert_int_eq(o.mmap, 0);
    ck_assert_int_eq(parse(&o, err, "-ocache_size=3MiB,keep_packed,ro", "-d", "P", "M"), CKFS_OK);
    ck_assert_uint_eq(o.cache_size, 3ull << 20);
    ck_assert_int_eq(o.drop_packed, 0);
    ck_assert_int_eq(o.debug, 1);
    ck_assert_int_eq(o.foreground, 1);
    ck_assert_int_eq(parse(&o, err, "--", "-P", "M", NULL), CKFS_OK);
    ck_assert_str_eq(o.dst, "-P");
    ck_assert_int_eq(parse(&o, err, "-h", NULL, NULL, NULL), CKFS_OK);
    ck_assert_int_eq(o.help, 1);
    /* rejected, with a message naming what is wrong */
    ck_assert_int_eq(parse(&o, err, "-o", "threads=0", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "'threads=0': a whole number from 1 to 1024 expected") != NULL, "%s", err);
    ck_assert_int_eq(parse(&o, err, "-o", "threads=1025", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_int_eq(parse(&o, err, "-o", "threads=1024", "P", "M"), CKFS_OK);
    ck_assert_int_eq(parse(&o, err, "-o", "prefetch_threads=65", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "from 0 to 64 expected") != NULL, "%s", err);
    ck_assert_int_eq(parse(&o, err, "-o", "read_ahead_kb=1048577", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "KiB from 0 to 1048576 expected") != NULL, "%s", err);
    ck_assert_int_eq(parse(&o, err, "-o", "read_ahead_kb=1048576", "P", "M"), CKFS_OK);
    ck_assert_int_eq(parse(&o, err, "-o", "dmask=1000", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "'dmask=1000': an octal mask from 0 to 0777 expected") != NULL, "%s", err);
    ck_assert_int_eq(parse(&o, err, "-o", "cache_size=12Q", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "'cache_size=12Q': a number of bytes, optionally with a K, M, G or T suffix") != NULL,
                  "%s", err);
    /* a number starts with a digit: strtoull read " -1" as 2^64 - 1 (a cache without a limit) */
    const char *signed_values[] = {"cache_size= -1", "cache_size=-1", "cache_size=+64M", "prefetch= 1",
                                   "threads= 4", "threads=+4", "read_ahead_kb= -0", "dmask= 22", "umask=+022"};
    for (size_t i = 0; i < sizeof signed_values / sizeof *signed_values; i++) {
        ck_assert_msg(parse(&o, err, "-o", signed_values[i], "P", "M") == CKFS_ERR_USAGE, "%s: accepted, cache_size %llu",
                      signed_values[i], (unsigned long long)o.cache_size);
        ck_assert_msg(strstr(err, signed_values[i]) != NULL, "%s", err);
    }
    ck_assert_int_eq(parse(&o, err, "-o", "uid= 0", "P", "M"), CKFS_ERR_USAGE); /* not root: no user " 0" */
    ck_assert_int_eq(parse(&o, err, "-o", "allow_other,uid=0,gid=0,umask=022", "P", "M"), CKFS_OK);
    /* uid= of another user needs allow_other (the kernel lets only the mounter in) */
    char own[64], other[64];
    snprintf(own, sizeof own, "uid=%u", (unsigned)getuid());
    snprintf(other, sizeof other, "uid=%u", (unsigned)getuid() + 1);
    ck_assert_int_eq(parse(&o, err, "-o", own, "P", "M"), CKFS_OK);
    ck_assert_int_eq(parse(&o, err, "-o", other, "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "without allow_other") && strstr(err, "Add allow_other"), "%s", err);
    /* masks narrow the stored modes; file_mode=/dir_mode= replace them */
    ck_assert_int_eq(parse(&o, err, "-o", "umask=022", "P", "M"), CKFS_OK);
    ck_assert_uint_eq(ckfs_apply_mask(&o, S_IFREG | 0600), S_IFREG | 0600);
    ck_assert_uint_eq(ckfs_apply_mask(&o, S_IFREG | 0775), S_IFREG | 0755);
    ck_assert_uint_eq(ckfs_apply_mask(&o, S_IFDIR | 0700), S_IFDIR | 0700);
    ck_assert_uint_eq(ckfs_apply_mask(&o, S_IFLNK | 0777), S_IFLNK | 0777);
    ck_assert_int_eq(parse(&o, err, "-o", "file_mode=0644,dir_mode=0755,fmask=0027", "P", "M"), CKFS_OK);
    ck_assert_uint_eq(ckfs_apply_mask(&o, S_IFREG | 0600), S_IFREG | 0640);
    ck_assert_uint_eq(ckfs_apply_mask(&o, S_IFDIR | 0700), S_IFDIR | 0755);
    ck_assert_int_eq(parse(&o, err, "-o", "file_mode=1777", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "an octal mode from 0 to 0777") != NULL, "%s", err);
    ck_assert_int_eq(parse(&o, err, "-o", "colour=blue", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "'colour'") != NULL && strstr(err, "blue") == NULL, "%s", err); /* e115ebb */
    ck_assert_int_eq(parse(&o, err, "-o", "rw", "P", "M"), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "read-only") != NULL, "%s", err);
    ck_assert_int_eq(parse(&o, err, "-x", "P", "M", NULL), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "-x") != NULL, "%s", err);
    ck_assert_int_eq(parse(&o, err, "P", NULL, NULL, NULL), CKFS_ERR_USAGE);
    ck_assert_int_eq(parse(&o, err, "P", "M", "N", NULL), CKFS_ERR_USAGE);
    ck_assert_msg(strstr(err, "'N'") != NULL, "%s", err);
    ck_assert_int_eq(parse(&o, err, "P", "M", "-o", NULL), CKFS_ERR_USAGE);
    ck_assert_int_eq(ckfs_exit_status(CKFS_ERR_USAGE), 2); /* as for every command */
}
END_TEST

/* The mount point checks: what is wrong stays apart from an I/O error, and
 * both from a usage error (exit 1, not 2). */
START_TEST(mount_point_checks)
{
    char err[1024], path[400];
    snprintf(path, sizeof path, "%s/none", tmpdir);
    ck_assert_int_eq(ckfs_check_mountpoint(path, err, sizeof err), CKFS_ERR_IO);
    ck_assert_msg(strstr(err, path) && strstr(err, strerror(ENOENT)), "%s", err);
    ck_assert_int_eq(ckfs_check_mountpoint(tmpdir, err, sizeof err), CKFS_OK);
    snprintf(path, sizeof path, "%s/file", tmpdir);
    FILE *f = fopen(path, "w");
    fclose(f);
    ck_assert_int_eq(ckfs_check_mountpoint(path, err, sizeof err), CKFS_ERR_MOUNTPOINT);
    ck_assert_msg(strstr(err, "not a directory") != NULL, "%s", err);
    ck_assert_int_eq(ckfs_check_mountpoint_free(tmpdir, 0, err, sizeof err), CKFS_ERR_MOUNTPOINT);
    ck_assert_msg(strstr(err, "is not empty") != NULL, "%s", err);
    ck_assert_int_eq(ckfs_check_mountpoint_free(tmpdir, 1, err, sizeof err), CKFS_OK);
    /* a mount point over the packed directory or above it would hide it */
    ck_assert_int_eq(ckfs_check_mountpoint_outside("/m/p", "/m/p", err, sizeof err), CKFS_ERR_MOUNTPOINT);
    ck_assert_msg(strstr(err, "/m/p is the packed directory /m/p") != NULL, "%s", err);
    ck_assert_int_eq(ckfs_check_mountpoint_outside("/m", "/m/p", err, sizeof err), CKFS_ERR_MOUNTPOINT);
    ck_assert_msg(strstr(err, "/m holds the packed directory /m/p") != NULL, "%s", err);
    ck_assert_int_eq(ckfs_check_mountpoint_outside("/m/", "/m/p/q", err, sizeof err), CKFS_ERR_MOUNTPOINT);
    ck_assert_int_eq(ckfs_check_mountpoint_outside("/", "/m/p", err, sizeof err), CKFS_ERR_MOUNTPOINT);
    ck_assert_int_eq(ckfs_check_mountpoint_outside("/m/p/view", "/m/p", err, sizeof err), CKFS_OK);
    ck_assert_int_eq(ckfs_check_mountpoint_outside("/m/pq", "/m/p", err, sizeof err), CKFS_OK);
    ck_assert_int_eq(ckfs_check_mountpoint_outside("/m/p", "/m/pq", err, sizeof err), CKFS_OK);
    ck_assert_int_eq(ckfs_check_mountpoint_outside("/n", "/m/p", err, sizeof err), CKFS_OK);
    ck_assert_int_eq(ckfs_exit_status(CKFS_ERR_IO), 1);
    ck_assert_int_eq(ckfs_exit_status(CKFS_ERR_MOUNTPOINT), 1);
    ck_assert_int_eq(ckfs_exit_status(CKFS_OK), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("readpath");
    TCase *t = tcase_create("readpath");
    tcase_add_checked_fixture(t, setup, tmpdir_remove);
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, reads_return_the_original_bytes, 0, 2);
    tcase_add_test(t, sequential_reads_prefetch);
    tcase_add_test(t, ahead_slices_queue_little_past_each_run);
    tcase_add_test(t, ahead_mapped_slices_decode_one_request_past);
    tcase_add_test(t, ahead_long_run_gets_the_window);
    tcase_add_test(t, ahead_random_read_queues_nothing);
    tcase_add_test(t, ahead_tensor_runs_stop_at_the_tensor);
    tcase_add_test(t, drop_packed_keeps_the_pages_of_chunks_to_come);
    tcase_add_test(t, windows_decode_the_original_bytes);
    tcase_add_test(t, windows_load_only_bounded_chunks);
    tcase_add_test(t, read_of_many_chunks_holds_few);
    tcase_add_test(t, one_byte_chunks_keep_the_cache_limit);
    tcase_add_test(t, open_files_freed_with_the_context);
    tcase_add_test(t, damaged_chunk_is_eio);
    tcase_add_loop_test(t, archive_runs_keep_damage_to_its_chunk, 0, 3);
    tcase_add_test(t, bad_packed_files);
    tcase_add_loop_test(t, changed_packed_file_is_eio, 0, 2 * (CH_N - CH_KEPT));
    tcase_add_loop_test(t, rewritten_packed_file_is_served, 0, 2 * CH_KEPT);
    tcase_add_test(t, refused_packed_file_served_once_put_back);
    tcase_add_test(t, swaps_under_readers_never_mix);
    tcase_add_test(t, unchanged_packed_file_keeps_serving);
    tcase_add_test(t, inode_table_tree);
    tcase_add_test(t, inode_table_conflicts_refused_by_the_manifest);
#ifndef NDEBUG
    tcase_add_test_raise_signal(t, inode_table_asserts_the_manifest_guarantees, SIGABRT);
#endif
    tcase_add_test(t, mount_options);
    tcase_add_test(t, mount_point_checks);
    suite_add_tcase(s, t);
    return run_suite(s);
}
