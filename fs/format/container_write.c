/*
 * container_write.c — writing one packed file (docs/format.md §3–§6).
 *
 * The writer appends extents in original order.  Payloads are written as they
 * are produced (pwrite from offset 64 on); the extent records and the string
 * table are kept in memory and written as the TOC by ckp_writer_finish, which
 * then writes the file header.  Memory is bounded by one tensor's escapes
 * and index plus a batch of planes per thread.
 * BF16 tensors are encoded in two passes, each split over `jobs` threads by
 * chunk: histogram, then encode + chunk hashes, each thread writing its
 * batches of the code and low planes to the file as it goes; each chunk's
 * escapes are kept apart and packed in order once the escape prefix counts
 * are known, then written after the low plane.
 */
#include "container.h"
#include "container_internal.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

struct ckp_writer {
    int fd;
    ckp_writer_opts o;
    uint64_t pos;          /* next free byte of the file */
    uint64_t orig_pos;     /* original bytes covered so far */
    uint8_t *recs;         /* n_extents records of CKP_EXTENT_SIZE bytes */
    uint32_t n_extents, cap_extents;
    uint8_t *strtab;
    uint32_t strtab_size, strtab_cap;
    ZSTD_CCtx *cctx;
    uint16_t minor;        /* format minor version the file needs (ARCHIVE: 1) */
    char err[512];
};

/* A failure, its message kept for ckp_writer_error. */
#define werr(w, s, ...) ((ckp_status)cku_errf((w)->err, sizeof (w)->err, (s), __VA_ARGS__))

const char *ckp_writer_error(const ckp_writer *w) { return w->err; }

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static ckp_status put_string(ckp_writer *w, const char *s, uint32_t *off, uint32_t *len)
{
    size_t n = strlen(s);
    if (n > CKP_MAX_NAME)
        return werr(w, CKP_ERR_SOURCE, "name of %zu bytes is over the limit", n);
    if (w->strtab_size + n > w->strtab_cap) {
        uint32_t cap = (uint32_t)((w->strtab_cap + n) * 2);
        uint8_t *p = realloc(w->strtab, cap);
        if (!p)
            return werr(w, CKP_ERR_NOMEM, "out of memory");
        w->strtab = p;
        w->strtab_cap = cap;
    }
    *off = w->strtab_size;
    *len = (uint32_t)n;
    memcpy(w->strtab + w->strtab_size, s, n);
    w->strtab_size += (uint32_t)n;
    return CKP_OK;
}

ckp_status ckp_writer_new(int fd, const ckp_writer_opts *o, ckp_writer **out)
{
    *out = NULL;
    if (!o || !o->path || !*o->path || strlen(o->path) > CKP_MAX_PATH)
        return CKP_ERR_ARG;
    ckp_writer *w = calloc(1, sizeof *w);
    if (!w)
        return CKP_ERR_NOMEM;
    w->fd = fd;
    w->o = *o;
    w->pos = CKP_HEADER_SIZE;
    uint32_t off, len;
    if (put_string(w, o->path, &off, &len) != CKP_OK) {
        ckp_writer_free(w);
        return CKP_ERR_NOMEM;
    }
    *out = w;
    return CKP_OK;
}

void ckp_writer_free(ckp_writer *w)
{
    if (!w)
        return;
    ZSTD_freeCCtx(w->cctx);
    free(w->recs);
    free(w->strtab);
    free(w);
}

static uint8_t *new_record(ckp_writer *w)
{
    if (w->n_extents == w->cap_extents) {
        uint32_t cap = w->cap_extents ? w->cap_extents * 2 : 16;
        uint8_t *p = realloc(w->recs, (size_t)cap * CKP_EXTENT_SIZE);
        if (!p)
            return NULL;
        w->recs = p;
        w->cap_extents = cap;
    }
    uint8_t *r = w->recs + (size_t)w->n_extents * CKP_EXTENT_SIZE;
    memset(r, 0, CKP_EXTENT_SIZE);
    return r;
}

static ckp_status write_at(ckp_writer *w, const void *p, size_t n, uint64_t off)
{
    if (cku_pwrite_full(w->fd, p, n, off))
        return werr(w, CKP_ERR_IO, "write failed: %s", strerror(errno));
    return CKP_OK;
}

/* Write the chunk index and fill the record's index fields. */
static ckp_status write_index(ckp_writer *w, uint8_t *rec, const ckp_chunk_entry *ix, uint64_t n)
{
    size_t bytes = (size_t)n * CKP_INDEX_ENTRY;
    uint8_t *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return werr(w, CKP_ERR_NOMEM, "out of memory");
    for (uint64_t c = 0; c < n; c++) {
        cku_put64(buf + c * CKP_INDEX_ENTRY, ix[c].datum);
        cku_put64(buf + c * CKP_INDEX_ENTRY + 8, ix[c].hash);
    }
    uint64_t off = align_up(w->pos, 64);
    ckp_status s = write_at(w, buf, bytes, off);
    if (s == CKP_OK) {
        cku_put64(rec + X_NCHUNKS, n);
        cku_put64(rec + X_INDEX_OFF, off);
        cku_put64(rec + X_INDEX_HASH, ckc_hash64(buf, bytes));
        w->pos = off + bytes;
    }
    free(buf);
    return s;
}

/* RAW extent: the bytes as they are, one hash per chunk. */
static ckp_status add_raw(ckp_writer *w, uint8_t *rec, const uint8_t *src, uint64_t size, uint64_t at)
{
    uint32_t cs = CKP_BLOB_CHUNK;
    uint64_t n = (size + cs - 1) / cs;
    ckp_chunk_entry *ix = calloc(n, sizeof *ix);
    if (!ix)
        return werr(w, CKP_ERR_NOMEM, "out of memory");
    for (uint64_t c = 0; c < n; c++)
        ix[c].hash = ckc_hash64(src + c * cs, c + 1 < n ? cs : size - c * cs);
    ckp_status s = write_at(w, src, size, at);
    cku_put32(rec + X_ENC, CKC_ENC_RAW);
    cku_put32(rec + X_CHUNK, cs);
    cku_put64(rec + X_P0_OFF, at);
    cku_put64(rec + X_P0_SIZE, size);
    if (s == CKP_OK) {
        w->pos = at + size;
        s = write_index(w, rec, ix, n);
    }
    free(ix);
    return s;
}

/* ZSTD extent if it saves >= 3%, else RAW (rewritten over the same bytes). */
static ckp_status add_zstd(ckp_writer *w, uint8_t *rec, const uint8_t *src, uint64_t size)
{
    uint32_t cs = CKP_BLOB_CHUNK;
    uint64_t n = (size + cs - 1) / cs, at = align_up(w->pos, 64), used = 0;
    size_t cap = ZSTD_compressBound(cs);
    ckp_chunk_entry *ix = calloc(n, sizeof *ix);
    uint8_t *buf = malloc(cap);
    if (!w->cctx)
        w->cctx = ZSTD_createCCtx();
    ckp_status s = CKP_OK;
    if (!ix || !buf || !w->cctx) {
        s = werr(w, CKP_ERR_NOMEM, "out of memory");
        goto out;
    }
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, w->o.zstd_level ? w->o.zstd_level : 3);
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 0);
    for (uint64_t c = 0; c < n && used * 100 < size * 97; c++) {
        size_t len = c + 1 < n ? cs : (size_t)(size - c * cs);
        size_t z = ZSTD_compress2(w->cctx, buf, cap, src + c * cs, len);
        if (ZSTD_isError(z)) {
            s = werr(w, CKP_ERR_IO, "zstd: %s", ZSTD_getErrorName(z));
            goto out;
        }
        ix[c].datum = used;
        ix[c].hash = ckc_hash64(src + c * cs, len);
        if ((s = write_at(w, buf, z, at + used)) != CKP_OK)
            goto out;
        used += z;
    }
    if (used * 100 >= size * 97) {
        /* The discarded frames may reach past the raw bytes written over
         * them (by less than the last frame, so buf holds the zeros): format
         * §3 wants every byte between payloads zero. */
        if (used > size) {
            memset(buf, 0, (size_t)(used - size));
            if ((s = write_at(w, buf, (size_t)(used - size), at + size)) != CKP_OK)
                goto out;
        }
        s = add_raw(w, rec, src, size, at);
        goto out;
    }
    cku_put32(rec + X_ENC, CKC_ENC_ZSTD);
    cku_put32(rec + X_CHUNK, cs);
    cku_put64(rec + X_P0_OFF, at);
    cku_put64(rec + X_P0_SIZE, used);
    w->pos = at + used;
    s = write_index(w, rec, ix, n);
out:
    free(ix);
    free(buf);
    return s;
}

/* ---- BF16 tensors ------------------------------------------------------- */

typedef struct {
    uint32_t enc;
    const uint16_t *w;       /* the weights, where src is at an even address */
    const uint8_t *src;      /* the tensor's bytes */
    int odd;                 /* src at an odd address: each chunk is copied to an aligned buffer first */
    uint64_t n;              /* weights */
    uint64_t chunk_w;        /* weights per chunk */
    uint64_t n_chunks;
    const ckc_codebook *cb;
    uint64_t *esc_count;     /* per chunk */
    uint16_t **chunk_esc;    /* per chunk: its escaped symbols */
    ckp_chunk_entry *ix;
    int fd;
    uint64_t codes_off, low_off; /* where the code and low planes go in the file */
    atomic_int status;       /* a ckc_status: a failure of any worker (any will do) */
    atomic_int io_errno;     /* a failed pwrite's errno (any will do) */
} bf16_job;

#define WRITE_BATCH 16       /* chunks encoded before one pwrite per plane (1 Mi weights) */

typedef struct {
    bf16_job *j;
    int pass;                /* 0 histogram, 1 encode */
    uint64_t c0, c1;         /* chunk range */
    uint64_t hist[512];
    uint16_t *esc;           /* pass 1: one chunk's escapes */
    uint16_t *aligned;       /* a tensor at an odd address: one chunk's weights, aligned */
    uint8_t *codes, *low;    /* pass 1: a batch's planes (chunk starts are byte-aligned) */
} bf16_task;

/* Write a batch's plane bytes [first, first + nw weights) at their place. */
static void write_batch(bf16_task *t, uint64_t first, uint64_t nw)
{
    bf16_job *j = t->j;
    ckp_span sp;
    ckp_bf16_span(j->enc, first, first + nw, 0, 0, &sp);
    if (cku_pwrite_full(j->fd, t->codes, sp.end[0] - sp.off[0], j->codes_off + sp.off[0]) ||
        cku_pwrite_full(j->fd, t->low, sp.end[1] - sp.off[1], j->low_off + sp.off[1]))
        atomic_store(&j->io_errno, errno ? errno : EIO);
}

/* Pass 1 streams: each batch of chunks is encoded into the task's buffers
 * (as if it started the tensor: chunk starts are multiples of 8 weights, so
 * every plane's bytes are the same) and written to the file at once, so the
 * disk works while the other threads encode. */
static void *bf16_worker(void *arg)
{
    bf16_task *t = arg;
    bf16_job *j = t->j;
    uint64_t batch0 = t->c0;
    for (uint64_t c = t->c0; c < t->c1; c++) {
        uint64_t first = c * j->chunk_w;
        size_t nw = (size_t)(c + 1 < j->n_chunks ? j->chunk_w : j->n - first);
        const uint16_t *src = t->aligned;
        if (!j->odd)
            src = j->w + first;
        else if (t->aligned) /* one chunk at a time: memory stays bounded whatever the tensor's size */
            memcpy(t->aligned, j->src + 2 * first, nw * 2);
        else {
            atomic_store(&j->status, (int)CKC_ERR_NOMEM);
            break;
        }
        if (t->pass == 0) {
            ckc_histogram(j->enc, src, nw, t->hist);
            continue;
        }
        /* the encoder needs room for nw escapes; each chunk's are kept apart
         * until the escape prefix counts are known */
        uint64_t ne = 0, rel = first - batch0 * j->chunk_w;
        ckc_status s = t->esc && t->codes && t->low
                           ? ckc_encode_chunk(j->enc, j->cb, src, nw, rel, t->codes, t->low, t->esc, &ne)
                           : CKC_ERR_NOMEM;
        j->esc_count[c] = ne;
        if (s == CKC_OK && ne && !(j->chunk_esc[c] = malloc(ne * sizeof *t->esc)))
            s = CKC_ERR_NOMEM;
        if (s != CKC_OK) {
            atomic_store(&j->status, (int)s);
            break;
        }
        if (atomic_load(&j->io_errno))
            break; /* the file is lost anyway: stop encoding */
        if (ne)
            memcpy(j->chunk_esc[c], t->esc, ne * sizeof *t->esc);
        j->ix[c].hash = ckc_hash64(src, nw * 2);
        if (c + 1 == t->c1 || c + 1 - batch0 == WRITE_BATCH) {
            write_batch(t, batch0 * j->chunk_w, first + nw - batch0 * j->chunk_w);
            memset(t->codes, 0, ckc_code_plane_size(WRITE_BATCH * j->chunk_w));
            memset(t->low, 0, ckc_low_plane_size(j->enc, WRITE_BATCH * j->chunk_w));
            batch0 = c + 1;
        }
    }
    return NULL;
}

/* A task's buffers: for a tensor at an odd address, a chunk's aligned
 * weights; in pass 1, a chunk's escapes and a batch's planes (zeroed: the
 * encoder ORs bits into them). */
static void task_buffers(bf16_task *t)
{
    uint64_t bw = WRITE_BATCH * t->j->chunk_w;
    if (t->j->odd)
        t->aligned = malloc(t->j->chunk_w * sizeof *t->aligned);
    if (t->pass == 0)
        return;
    t->esc = malloc(t->j->chunk_w * sizeof *t->esc);
    t->codes = calloc(1, ckc_code_plane_size(bw));
    t->low = calloc(1, ckc_low_plane_size(t->j->enc, bw));
}

static void task_buffers_free(bf16_task *t)
{
    free(t->aligned);
    free(t->esc);
    free(t->codes);
    free(t->low);
}

/* Run one pass over all chunks with up to `jobs` threads. */
static void run_pass(bf16_job *j, int pass, int jobs, uint64_t *hist)
{
    if (jobs < 1)
        jobs = 1;
    if ((uint64_t)jobs > j->n_chunks)
        jobs = (int)(j->n_chunks ? j->n_chunks : 1);
    bf16_task *t = calloc((size_t)jobs, sizeof *t);
    pthread_t *th = calloc((size_t)jobs, sizeof *th);
    int started = 0;
    for (int i = 0; t && th && i < jobs; i++) {
        t[i].j = j;
        t[i].pass = pass;
        t[i].c0 = j->n_chunks * (uint64_t)i / (uint64_t)jobs;
        t[i].c1 = j->n_chunks * (uint64_t)(i + 1) / (uint64_t)jobs;
        task_buffers(&t[i]);
    }
    if (!t || !th) { /* fall back to the calling thread */
        bf16_task one = {.j = j, .pass = pass, .c0 = 0, .c1 = j->n_chunks};
        task_buffers(&one);
        bf16_worker(&one);
        task_buffers_free(&one);
        if (hist)
            for (int k = 0; k < 512; k++)
                hist[k] += one.hist[k];
        free(t);
        free(th);
        return;
    }
    for (int i = 1; i < jobs; i++)
        if (pthread_create(&th[i], NULL, bf16_worker, &t[i]) == 0)
            started = i;
        else
            bf16_worker(&t[i]);
    bf16_worker(&t[0]);
    for (int i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    if (hist)
        for (int i = 0; i < jobs; i++)
            for (int k = 0; k < 512; k++)
                hist[k] += t[i].hist[k];
    for (int i = 0; i < jobs; i++)
        task_buffers_free(&t[i]);
    free(t);
    free(th);
}

static ckp_status write_plane(ckp_writer *w, uint8_t *rec, int plane, const void *p, uint64_t size,
                              uint64_t align)
{
    uint64_t off = align_up(w->pos, align);
    ckp_status s = write_at(w, p, size, off);
    cku_put64(rec + X_P0_OFF + 16 * plane, off);
    cku_put64(rec + X_P0_SIZE + 16 * plane, size);
    w->pos = off + size;
    return s;
}

/* The job of a BF16 tensor of size bytes at src: its chunks, the weights
 * (at an odd address, a tensor at an odd file offset, each chunk is
 * copied to an aligned buffer of its task as it is encoded: a copy of the
 * whole tensor made pack's memory grow with the largest one) and the
 * per-chunk tables.  Free with bf16_job_free whatever it returns. */
static ckp_status bf16_job_init(ckp_writer *w, bf16_job *j, uint32_t enc, const uint8_t *src, uint64_t size)
{
    *j = (bf16_job){.enc = enc, .n = size / 2, .chunk_w = CKP_BF16_CHUNK_WEIGHTS, .fd = w->fd, .src = src,
                    .odd = (int)((uintptr_t)src & 1)};
    j->n_chunks = (j->n + j->chunk_w - 1) / j->chunk_w;
    j->w = j->odd ? NULL : (const uint16_t *)(const void *)src;
    j->esc_count = calloc(j->n_chunks, sizeof *j->esc_count);
    j->chunk_esc = calloc(j->n_chunks, sizeof *j->chunk_esc);
    j->ix = calloc(j->n_chunks, sizeof *j->ix);
    if (!j->esc_count || !j->chunk_esc || !j->ix)
        return werr(w, CKP_ERR_NOMEM, "out of memory for a tensor of %llu bytes", (unsigned long long)size);
    return CKP_OK;
}

static void bf16_job_free(bf16_job *j)
{
    for (uint64_t c = 0; j->chunk_esc && c < j->n_chunks; c++)
        free(j->chunk_esc[c]);
    free(j->chunk_esc);
    free(j->esc_count);
    free(j->ix);
}

/* The two passes over the chunks: the histogram, whose codebook goes to *cb,
 * then the encode, which writes the code and low planes at their places
 * (aligned to align from w->pos on) and keeps each chunk's escapes.  Fills
 * the record's fields of planes 0 and 1. */
static ckp_status encode_planes(ckp_writer *w, bf16_job *j, uint8_t *rec, uint64_t align, ckc_codebook *cb)
{
    uint64_t hist[512] = {0}, codes_sz = ckc_code_plane_size(j->n), low_sz = ckc_low_plane_size(j->enc, j->n);
    j->codes_off = align_up(w->pos, align);
    j->low_off = align_up(j->codes_off + codes_sz, align);
    run_pass(j, 0, w->o.jobs, hist);
    ckc_codebook_from_hist(j->enc, hist, cb);
    j->cb = cb;
    run_pass(j, 1, w->o.jobs, NULL);
    if (atomic_load(&j->io_errno))
        return werr(w, CKP_ERR_IO, "write failed: %s", strerror(atomic_load(&j->io_errno)));
    for (int k = 0; k < 2; k++) {
        cku_put64(rec + X_P0_OFF + 16 * k, k ? j->low_off : j->codes_off);
        cku_put64(rec + X_P0_SIZE + 16 * k, k ? low_sz : codes_sz);
    }
    w->pos = j->low_off + low_sz;
    return CKP_OK;
}

/* The escape plane: each chunk's escapes packed at its prefix count (the
 * chunk's datum, set here), in order (K15 escapes of adjacent chunks share
 * bytes), then written after the low plane.  Fills the record's plane 2 and
 * n_escapes fields. */
static ckp_status write_escapes(ckp_writer *w, bf16_job *j, uint8_t *rec, uint64_t align)
{
    uint64_t n_esc = 0;
    for (uint64_t c = 0; c < j->n_chunks; c++) {
        j->ix[c].datum = n_esc;
        n_esc += j->esc_count[c];
    }
    uint64_t esc_sz = ckc_escape_plane_size(j->enc, n_esc);
    uint8_t *esc = calloc(1, esc_sz);
    ckc_status enc_st = (ckc_status)atomic_load(&j->status);
    ckp_status s = CKP_OK;
    if (!esc || enc_st == CKC_ERR_NOMEM)
        s = werr(w, CKP_ERR_NOMEM, "out of memory");
    else if (enc_st != CKC_OK) /* the encoder rejected what this writer gave it */
        s = werr(w, CKP_ERR_INTERNAL, "internal encoder error: %s", ckc_status_name(enc_st));
    for (uint64_t c = 0; s == CKP_OK && c < j->n_chunks; c++)
        if (ckc_pack_escapes(j->enc, j->chunk_esc[c], j->esc_count[c], j->ix[c].datum, esc, esc_sz) != CKC_OK)
            s = werr(w, CKP_ERR_INTERNAL, "internal encoder error: escapes do not fit");
    if (s == CKP_OK) {
        cku_put64(rec + X_NESC, n_esc);
        s = write_plane(w, rec, 2, esc, esc_sz, align);
    }
    free(esc);
    return s;
}

/* An ARCHIVE extent: plane 0 the tables, plane 1 the chunks (§5.3). */
typedef struct {
    ckp_writer *w;
    uint64_t pos;
} ans_sink_ctx;

static ckp_status ans_sink(void *ctx, const uint8_t *p, size_t n)
{
    ans_sink_ctx *a = ctx;
    ckp_status s = write_at(a->w, p, n, a->pos);
    a->pos += n;
    return s;
}

static ckp_status add_archive(ckp_writer *w, uint8_t *rec, const uint8_t *src, uint64_t size, uint64_t n_cols)
{
    uint64_t n = size / 2, chunk_w = CKP_BF16_CHUNK_WEIGHTS, n_chunks = (n + chunk_w - 1) / chunk_w;
    uint64_t align = n >= CKP_BIG_TENSOR_WEIGHTS ? 4096 : 64;
    uint16_t *copy = NULL;
    const uint16_t *wt = (const uint16_t *)(const void *)src;
    ckp_chunk_entry *ix = calloc(n_chunks, sizeof *ix);
    ckc_ans_plan *plan = NULL;
    ckp_status s = CKP_OK;
    ckc_status cs;

    if ((uintptr_t)src & 1) { /* a tensor at an odd address: the planner reads it whole */
        copy = malloc(size);
        if (copy)
            memcpy(copy, src, size);
        wt = copy;
    }
    if (!ix || !wt) {
        s = werr(w, CKP_ERR_NOMEM, "out of memory for a tensor of %llu bytes", (unsigned long long)size);
        goto out;
    }
    cs = ckc_ans_plan_new(wt, n, n_cols, &plan);
    if (cs != CKC_OK) {
        s = werr(w, cs == CKC_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_INTERNAL, "archive planner: %s", ckc_status_name(cs));
        goto out;
    }
    s = write_plane(w, rec, 0, ckc_ans_blob(plan), ckc_ans_blob_size(plan), 64);
    if (s == CKP_OK) {
        ans_sink_ctx a = {w, align_up(w->pos, align)};
        cku_put64(rec + X_P1_OFF, a.pos);
        s = ckp_ans_encode_chunks(plan, wt, n, chunk_w, w->o.jobs, ix, ans_sink, &a);
        if (s == CKP_ERR_NOMEM || s == CKP_ERR_INTERNAL)
            s = werr(w, s, "archive encoder: %s", s == CKP_ERR_NOMEM ? "out of memory" : "refused the tensor");
        cku_put64(rec + X_P1_SIZE, a.pos - cku_le64(rec + X_P1_OFF));
        w->pos = a.pos;
    }
    if (s == CKP_OK) {
        cku_put32(rec + X_ENC, CKC_ENC_ARCHIVE);
        cku_put32(rec + X_CHUNK, (uint32_t)(chunk_w * 2));
        s = write_index(w, rec, ix, n_chunks);
        w->minor = 1;
    }
out:
    ckc_ans_plan_free(plan);
    free(copy);
    free(ix);
    return s;
}

/* A K15 / byte-split extent: planes, escapes, codebook, index. */
static ckp_status add_bf16(ckp_writer *w, uint8_t *rec, uint32_t enc, const uint8_t *src, uint64_t size)
{
    bf16_job j;
    ckc_codebook cb;
    ckp_status s = bf16_job_init(w, &j, enc, src, size);
    uint64_t align = j.n >= CKP_BIG_TENSOR_WEIGHTS ? 4096 : 64;
    if (s == CKP_OK)
        s = encode_planes(w, &j, rec, align, &cb);
    if (s == CKP_OK)
        s = write_escapes(w, &j, rec, align);
    if (s == CKP_OK) {
        cku_put32(rec + X_ENC, enc);
        cku_put32(rec + X_CHUNK, (uint32_t)(j.chunk_w * 2));
        for (int k = 0; k < 16; k++)
            cku_put16(rec + X_CODEBOOK + 2 * k, cb.sym[k]);
        s = write_index(w, rec, j.ix, j.n_chunks);
    }
    bf16_job_free(&j);
    return s;
}

ckp_status ckp_writer_add(ckp_writer *w, uint32_t enc, const void *src, uint64_t size,
                          const char *name, uint32_t dtype)
{
    return ckp_writer_add_shaped(w, enc, src, size, name, dtype, 0);
}

ckp_status ckp_writer_add_shaped(ckp_writer *w, uint32_t enc, const void *src, uint64_t size,
                                 const char *name, uint32_t dtype, uint64_t n_cols)
{
    if (size == 0)
        return CKP_OK; /* empty ranges have no extent (format §4) */
    if ((enc == CKC_ENC_K15 || enc == CKC_ENC_BSPLIT || enc == CKC_ENC_ARCHIVE) && size % 2)
        return werr(w, CKP_ERR_ARG, "BF16 extent of odd size %llu", (unsigned long long)size);
    if (w->n_extents >= CKP_MAX_EXTENTS)
        return werr(w, CKP_ERR_SOURCE, "too many extents");
    uint8_t *rec = new_record(w);
    if (!rec)
        return werr(w, CKP_ERR_NOMEM, "out of memory");
    uint32_t noff = 0, nlen = 0;
    ckp_status s = name && *name ? put_string(w, name, &noff, &nlen) : CKP_OK;
    if (s != CKP_OK)
        return s;
    cku_put64(rec + X_ORIG_OFF, w->orig_pos);
    cku_put64(rec + X_ORIG_SIZE, size);
    cku_put32(rec + X_NAME_OFF, noff);
    cku_put32(rec + X_NAME_LEN, nlen);
    cku_put32(rec + X_DTYPE, dtype);
    switch (enc) {
    case CKC_ENC_RAW: s = add_raw(w, rec, src, size, align_up(w->pos, 64)); break;
    case CKC_ENC_ZSTD: s = add_zstd(w, rec, src, size); break;
    case CKC_ENC_K15:
    case CKC_ENC_BSPLIT: s = add_bf16(w, rec, enc, src, size); break;
    case CKC_ENC_ARCHIVE: s = add_archive(w, rec, src, size, n_cols); break;
    default: return werr(w, CKP_ERR_ARG, "unknown encoding %u", enc);
    }
    if (s == CKP_OK) {
        w->n_extents++;
        w->orig_pos += size;
    }
    return s;
}

ckp_status ckp_writer_finish(ckp_writer *w, const uint8_t sha256[32])
{
    uint64_t toc_off = align_up(w->pos, 8);
    uint64_t toc_size = CKP_TOC_HEADER_SIZE + (uint64_t)w->n_extents * CKP_EXTENT_SIZE + w->strtab_size;
    if (toc_size > CKP_MAX_TOC)
        return werr(w, CKP_ERR_SOURCE, "table of contents over 1 GiB");
    uint8_t *toc = calloc(1, toc_size);
    if (!toc)
        return werr(w, CKP_ERR_NOMEM, "out of memory");
    memcpy(toc + T_MAGIC, "TOC1", 4);
    cku_put32(toc + T_NEXT, w->n_extents);
    cku_put64(toc + T_ORIG, w->orig_pos);
    memcpy(toc + T_SHA, sha256, 32);
    cku_put32(toc + T_KIND, w->o.kind);
    cku_put32(toc + T_MODE, w->o.mode & 07777);
    cku_put64(toc + T_MTIME, (uint64_t)w->o.mtime_ns);
    cku_put32(toc + T_PATH_LEN, (uint32_t)strlen(w->o.path));
    cku_put32(toc + T_STRTAB, w->strtab_size);
    if (w->n_extents) /* an empty source has no extents and no records */
        memcpy(toc + CKP_TOC_HEADER_SIZE, w->recs, (size_t)w->n_extents * CKP_EXTENT_SIZE);
    memcpy(toc + CKP_TOC_HEADER_SIZE + (size_t)w->n_extents * CKP_EXTENT_SIZE, w->strtab, w->strtab_size);
    uint8_t hdr[CKP_HEADER_SIZE] = {0};
    memcpy(hdr + H_MAGIC, CKP_MAGIC, 8);
    cku_put16(hdr + H_MAJOR, CKP_VERSION_MAJOR);
    cku_put16(hdr + H_MINOR, w->minor); /* the lowest that expresses the file (§10) */
    cku_put64(hdr + H_ORIG, w->orig_pos);
    cku_put64(hdr + H_TOC_OFF, toc_off);
    cku_put64(hdr + H_TOC_SIZE, toc_size);
    cku_put64(hdr + H_TOC_HASH, ckc_hash64(toc, toc_size));
    cku_put64(hdr + H_FILE_SIZE, toc_off + toc_size);
    cku_put64(hdr + H_HASH, ckc_hash64(hdr, H_HASH));
    ckp_status s = write_at(w, toc, toc_size, toc_off);
    if (s == CKP_OK && ftruncate(w->fd, (off_t)(toc_off + toc_size)))
        s = werr(w, CKP_ERR_IO, "truncate failed: %s", strerror(errno));
    if (s == CKP_OK)
        s = write_at(w, hdr, sizeof hdr, 0);
    free(toc);
    return s;
}
