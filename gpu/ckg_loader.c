/*
 * ckg_loader.c — packed directory to device memory (ckgpu.h, loader part).
 *
 * A model holds the format library's tensor table of the directory
 * (fs/format/ckread.h: one container reader per safetensors file, the tensors
 * of each file's header matched with its TOC's extents) and two pinned
 * staging buffers.  An upload reads each plane
 * range with pread into one staging buffer while the other is being copied to
 * the device (cudaMemcpyAsync + an event per buffer), then builds the escape
 * index and the escape patch list of the uploaded rows (the fused GEMV's
 * side structure: column and exact value of each escape, 32 bits each) on
 * the device and, unless told not to, decodes the same chunks on the host to
 * check their hashes before it returns.
 *
 * Invariants: staging[b] is not written while ev[b] (its last copy) is
 * pending; a tensor owns every device buffer its planes point to.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "ckgpu.h"
#include "ckread.h"
#include "container.h"
#include "util.h"

#define STAGING_BYTES (8u << 20)
#define DEV_PAD 64u  /* zeroed bytes after each device plane (wide loads read past the end) */

struct ckg_model {
    ckr_model *tab;              /* tensors and their readers */
    ckp_scratch *scratch;
    void *staging[2];
    cudaEvent_t ev[2];
    int staging_dev;             /* device the events belong to, -1 before the first upload */
    unsigned next_buf;           /* staging buffer for the next piece (alternates) */
    void *chunk_buf;             /* host decode target for hash checks */
    size_t chunk_buf_size;
};

struct ckg_tensor {
    int packed;
    ckg_planes planes;           /* device pointers into the buffers below */
    void *d_codes, *d_low, *d_esc, *d_index, *d_raw;
    void *d_prow, *d_patch;      /* escape patch list of the uploaded rows (NULL: none) */
    uint64_t rows, cols, elem_off, nbytes, dev_bytes;
    uint32_t dtype;
};


/* The one place where the format library's statuses become ckgpu's: out of
 * memory, I/O, an unsupported version, damage and a bug stay apart.  Each
 * lands where ckread's from_ckp puts it (fs/format/ckread.c): an invalid
 * safetensors header (CKP_ERR_SOURCE) is an invalid header; a range, damaged
 * metadata and a damaged chunk are damage here (the loader computes every
 * range from the packed extents). */
static ckg_status from_ckp(ckp_status s)
{
    switch (s) {
    case CKP_OK: return CKG_OK;
    case CKP_ERR_ARG: return CKG_ERR_ARG;
    case CKP_ERR_IO: return CKG_ERR_IO;
    case CKP_ERR_NOMEM: return CKG_ERR_NOMEM;
    case CKP_ERR_FORMAT: case CKP_ERR_SOURCE: return CKG_ERR_FORMAT;
    case CKP_ERR_VERSION: return CKG_ERR_UNSUPPORTED;
    case CKP_ERR_CORRUPT: case CKP_ERR_CHUNK: case CKP_ERR_RANGE: return CKG_ERR_CORRUPT;
    case CKP_ERR_INTERNAL: return CKG_ERR_INTERNAL;
    }
    return CKG_ERR_INTERNAL; /* not a ckp_status */
}

/* ckread's statuses (the same classes, one level up) as ckgpu's. */
static ckg_status from_ckr(ckr_status s)
{
    switch (s) {
    case CKR_OK: return CKG_OK;
    case CKR_ERR_ARG: return CKG_ERR_ARG;
    case CKR_ERR_IO: return CKG_ERR_IO;
    case CKR_ERR_FORMAT: return CKG_ERR_FORMAT;
    case CKR_ERR_NOMEM: return CKG_ERR_NOMEM;
    case CKR_ERR_NOTFOUND: return CKG_ERR_NOTFOUND;
    case CKR_ERR_UNSUPPORTED: return CKG_ERR_UNSUPPORTED;
    case CKR_ERR_CORRUPT: return CKG_ERR_CORRUPT;
    case CKR_ERR_INTERNAL: return CKG_ERR_INTERNAL;
    }
    return CKG_ERR_INTERNAL; /* not a ckr_status */
}

/* ---- open ------------------------------------------------------------------- */

/* The GPU kernels decode K15 and byte-split planes; an ARCHIVE extent (format
 * §5.3, CPU only) in a file holding a tensor is refused at open with the
 * command that converts the pack.  NULL if there is none. */
static const char *archive_tensor(const ckr_model *tab)
{
    for (size_t i = 0; i < ckr_count(tab); i++) {
        const ckp_reader *r = NULL;
        uint32_t e;
        if (ckr_tensor_source(tab, i, &r, &e) != CKR_OK || !r)
            continue;
        for (uint32_t k = 0; k < ckp_get_info(r)->n_extents; k++)
            if (ckp_get_extent(r, k)->encoding == CKC_ENC_ARCHIVE)
                return ckr_info(tab, i)->name;
    }
    return NULL;
}

ckg_status ckg_model_open(const char *dir, ckg_model **out, char *err, size_t cap)
{
    if (!out)
        return CKG_ERR_ARG;
    *out = NULL;
    if (!dir)
        return CKG_ERR_ARG;
    ckg_model *m = calloc(1, sizeof *m);
    if (!m)
        return CKG_ERR_NOMEM;
    m->staging_dev = -1;
    ckg_status st = CKG_ERR_NOMEM;
    if (!(m->scratch = ckp_scratch_new()))
        goto fail;
    st = from_ckr(ckr_open(dir, &m->tab, err, cap));
    if (st != CKG_OK)
        goto fail;
    const char *name = archive_tensor(m->tab);
    if (name) {
        if (err && cap)
            snprintf(err, cap,
                     "%s: tensor %s is packed in the archive encoding, which the GPU loader does not read; "
                     "convert the pack with `ckptfs repack --format k15 %s`",
                     CKU_ESC(dir), CKU_ESC(name), CKU_ESC(dir));
        st = CKG_ERR_UNSUPPORTED;
        goto fail;
    }
    *out = m;
    return CKG_OK;
fail:
    ckg_model_close(m);
    return st;
}

void ckg_model_close(ckg_model *m)
{
    if (!m)
        return;
    ckr_close(m->tab);
    for (int b = 0; b < 2; b++) {
        if (m->staging[b])
            cudaFreeHost(m->staging[b]);
        if (m->staging_dev >= 0)
            cudaEventDestroy(m->ev[b]);
    }
    ckp_scratch_free(m->scratch);
    free(m->chunk_buf);
    free(m);
}

size_t ckg_model_count(const ckg_model *m) { return m ? ckr_count(m->tab) : 0; }

const ckg_tensor_info *ckg_model_info(const ckg_model *m, size_t i) { return m ? ckr_info(m->tab, i) : NULL; }

ckg_status ckg_model_find(const ckg_model *m, const char *name, size_t *index)
{
    return m ? from_ckr(ckr_find(m->tab, name, index)) : CKG_ERR_ARG;
}

/* ---- staging ---------------------------------------------------------------- */

static ckg_status staging_ready(ckg_model *m)
{
    int dev;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return CKG_ERR_NODEVICE;
    if (m->staging_dev == dev)
        return CKG_OK;
    if (m->staging_dev >= 0) {
        for (int b = 0; b < 2; b++) {
            cudaEventSynchronize(m->ev[b]);
            cudaEventDestroy(m->ev[b]);
        }
        m->staging_dev = -1;
    }
    for (int b = 0; b < 2; b++)
        if (!m->staging[b] && cudaHostAlloc(&m->staging[b], STAGING_BYTES, cudaHostAllocDefault) != cudaSuccess)
            return CKG_ERR_CUDA;
    if (cudaEventCreateWithFlags(&m->ev[0], cudaEventDisableTiming) != cudaSuccess)
        return CKG_ERR_CUDA;
    if (cudaEventCreateWithFlags(&m->ev[1], cudaEventDisableTiming) != cudaSuccess) {
        cudaEventDestroy(m->ev[0]);
        return CKG_ERR_CUDA;
    }
    m->staging_dev = dev;
    return CKG_OK;
}

/* A source of bytes for stage_copy: plain pread of the packed file, or
 * ckp_pread (decoded, hash-checked) of original bytes. */
typedef struct {
    ckg_model *m;
    const ckp_reader *r;
    int decoded;
} source;

static ckg_status source_read(const source *s, void *buf, size_t len, uint64_t off)
{
    if (s->decoded) {
        size_t got = 0;
        ckp_status ps = ckp_pread(s->r, buf, len, off, &got, s->m->scratch);
        if (ps != CKP_OK)
            return from_ckp(ps);
        return got == len ? CKG_OK : CKG_ERR_CORRUPT;
    }
    return cku_pread_full(ckp_fd(s->r), buf, len, off) ? CKG_ERR_IO : CKG_OK;
}

/* Copy len bytes at off of the source to dst (device), double-buffered. */
static ckg_status stage_copy(const source *s, uint64_t off, uint64_t len, void *dst, cudaStream_t stream)
{
    ckg_model *m = s->m;
    for (uint64_t done = 0; done < len;) {
        unsigned b = m->next_buf++ & 1u;
        size_t piece = len - done < STAGING_BYTES ? (size_t)(len - done) : STAGING_BYTES;
        if (cudaEventSynchronize(m->ev[b]) != cudaSuccess)
            return CKG_ERR_CUDA;
        ckg_status st = source_read(s, m->staging[b], piece, off + done);
        if (st != CKG_OK)
            return st;
        if (cudaMemcpyAsync((char *)dst + done, m->staging[b], piece, cudaMemcpyHostToDevice, stream) != cudaSuccess ||
            cudaEventRecord(m->ev[b], stream) != cudaSuccess)
            return CKG_ERR_CUDA;
        done += piece;
    }
    return CKG_OK;
}

/* ---- upload ------------------------------------------------------------------ */

static ckg_status dev_alloc(ckg_tensor *t, void **p, uint64_t len, cudaStream_t stream)
{
    uint64_t size = (len + DEV_PAD + 255) & ~(uint64_t)255;
    if (cudaMalloc(p, size) != cudaSuccess)
        return CKG_ERR_CUDA;
    t->dev_bytes += size;
    return cudaMemsetAsync((char *)*p + len, 0, size - len, stream) == cudaSuccess ? CKG_OK : CKG_ERR_CUDA;
}

/* Upload plane k's bytes [start, start+len) (clipped to the stored plane). */
static ckg_status upload_plane(const source *s, const ckp_extent *x, int k, uint64_t start, uint64_t len,
                               ckg_tensor *t, void **dst, cudaStream_t stream)
{
    if (start > x->plane_size[k] || len > x->plane_size[k] - start)
        return CKG_ERR_CORRUPT;
    ckg_status st = dev_alloc(t, dst, len, stream);
    if (st != CKG_OK)
        return st;
    return stage_copy(s, x->plane_offset[k] + start, len, *dst, stream);
}

static ckg_status verify_chunks(ckg_model *m, const ckp_reader *r, uint32_t e, const ckp_extent *x,
                                uint64_t ca, uint64_t cb)
{
    if (m->chunk_buf_size < x->chunk_size) {
        void *nb = realloc(m->chunk_buf, x->chunk_size);
        if (!nb)
            return CKG_ERR_NOMEM;
        m->chunk_buf = nb;
        m->chunk_buf_size = x->chunk_size;
    }
    for (uint64_t c = ca; c < cb; c++) {
        ckp_status ps = ckp_read_chunk(r, e, c, m->chunk_buf, m->scratch);
        if (ps != CKP_OK)
            return from_ckp(ps);
    }
    return CKG_OK;
}

/* The escape patch list of the uploaded rows (ckg_escape_patches), for the
 * fused GEMV; skipped (the GEMV then uses its generic kernel) where the
 * shape does not allow it.  Device side only: the file is not changed. */
static ckg_status build_patches(ckg_tensor *t, uint64_t elem_off, cudaStream_t stream)
{
    const ckg_planes *p = &t->planes;
    if (t->rows == 0 || t->cols % 32 || elem_off % 32 || t->cols > 65536)
        return CKG_OK;
    ckg_status st;
    if ((st = dev_alloc(t, &t->d_prow, (t->rows + 1) * 4, stream)) != CKG_OK ||
        (st = dev_alloc(t, &t->d_patch, p->n_escapes * 4, stream)) != CKG_OK)
        return st;
    st = ckg_escape_patches(p, elem_off, t->rows, t->cols, t->d_prow, t->d_patch, stream);
    if (st != CKG_OK)
        return st;
    t->planes.patch_row = t->d_prow;
    t->planes.patch = t->d_patch;
    t->planes.patch_elem_off = elem_off;
    t->planes.patch_rows = t->rows;
    t->planes.patch_cols = t->cols;
    return CKG_OK;
}

static ckg_status upload_packed(ckg_model *m, const ckp_reader *r, uint32_t e, uint64_t w_begin,
                                uint64_t w_end, unsigned flags, ckg_tensor *t, cudaStream_t stream)
{
    const ckp_extent *x = ckp_get_extent(r, e);
    const uint64_t cw = x->chunk_size / 2;
    const uint64_t ca = w_begin / cw, cb = (w_end + cw - 1) / cw;
    ckp_span sp;
    ckp_chunk_span(x, ca, cb, &sp);
    const uint64_t W0 = sp.w0, nw = sp.w1 - sp.w0, e0 = sp.esc0, e1 = sp.esc1;
    if (e1 < e0 || e1 - e0 >= (1ull << 32) || cb - ca >= (1ull << 31))
        return CKG_ERR_UNSUPPORTED;
    source s = {m, r, 0};
    ckg_status st;
    if ((st = upload_plane(&s, x, 0, sp.off[0], sp.end[0] - sp.off[0], t, &t->d_codes, stream)) != CKG_OK ||
        (st = upload_plane(&s, x, 1, sp.off[1], sp.end[1] - sp.off[1], t, &t->d_low, stream)) != CKG_OK ||
        (st = upload_plane(&s, x, 2, sp.esc_byte, sp.end[2] - sp.esc_byte, t, &t->d_esc, stream)) != CKG_OK)
        return st;

    /* chunk prefixes relative to the run, then the escape index */
    uint64_t nc = cb - ca, n_idx = (nw + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK;
    uint32_t *prefix = malloc((nc + 1) * sizeof *prefix), err_count = 0;
    void *d_prefix = NULL, *d_err = NULL;
    if (!prefix)
        return CKG_ERR_NOMEM;
    for (uint64_t j = 0; j < nc; j++)
        prefix[j] = (uint32_t)(x->index[ca + j].datum - e0);
    prefix[nc] = (uint32_t)(e1 - e0);
    st = CKG_ERR_CUDA;
    if (dev_alloc(t, &t->d_index, n_idx * 4, stream) != CKG_OK || cudaMalloc(&d_prefix, (nc + 1) * 4) != cudaSuccess ||
        cudaMalloc(&d_err, 4) != cudaSuccess || cudaMemsetAsync(d_err, 0, 4, stream) != cudaSuccess ||
        cudaMemcpyAsync(d_prefix, prefix, (nc + 1) * 4, cudaMemcpyHostToDevice, stream) != cudaSuccess)
        goto out;
    t->planes = (ckg_planes){.encoding = x->encoding, .codebook = x->codebook, .n_weights = nw,
                             .codes = t->d_codes, .low = t->d_low, .esc = t->d_esc,
                             .esc_bit0 = sp.esc_bit, .n_escapes = e1 - e0};
    st = ckg_escape_index(&t->planes, cw, d_prefix, nc, t->d_index, d_err, stream);
    if (st != CKG_OK)
        goto out;
    t->planes.esc_index = t->d_index;
    if ((st = build_patches(t, w_begin - W0, stream)) != CKG_OK)
        goto out;
    if (!(flags & CKG_UPLOAD_NO_VERIFY) && (st = verify_chunks(m, r, e, x, ca, cb)) != CKG_OK)
        goto out;
    st = CKG_ERR_CUDA;
    if (cudaMemcpyAsync(&err_count, d_err, 4, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess)
        goto out;
    st = err_count ? CKG_ERR_CORRUPT : CKG_OK;
    t->packed = 1;
    t->elem_off = w_begin - W0;
out:
    cudaStreamSynchronize(stream);
    cudaFree(d_prefix);
    cudaFree(d_err);
    free(prefix);
    return st;
}

/* Original bytes [base + b_begin, base + b_end) of r, decoded, into t->d_raw. */
static ckg_status upload_raw(ckg_model *m, const ckp_reader *r, uint64_t base, uint64_t b_begin,
                             uint64_t b_end, ckg_tensor *t, cudaStream_t stream)
{
    ckg_status st = dev_alloc(t, &t->d_raw, b_end - b_begin, stream);
    if (st != CKG_OK)
        return st;
    source s = {m, r, 1};
    st = stage_copy(&s, base + b_begin, b_end - b_begin, t->d_raw, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess && st == CKG_OK)
        st = CKG_ERR_CUDA;
    return st;
}

ckg_status ckg_tensor_upload(ckg_model *m, size_t i, uint64_t row_begin, uint64_t row_end,
                             unsigned flags, ckg_stream stream_, ckg_tensor **out)
{
    if (!out)
        return CKG_ERR_ARG;
    *out = NULL;
    const ckg_tensor_info *ti = m ? ckr_info(m->tab, i) : NULL;
    const ckp_reader *r = NULL;
    uint32_t e = 0;
    if (!ti || ckr_tensor_source(m->tab, i, &r, &e) != CKR_OK)
        return CKG_ERR_ARG;
    cudaStream_t stream = (cudaStream_t)stream_;
    uint64_t rows = ti->ndim ? ti->shape[0] : 1, first = 0, len = 0;
    if (row_end == UINT64_MAX)
        row_end = rows;
    /* the rows' bytes, as ckr_read_rows takes them: rows of F4/F6 that do
     * not start and end on a byte are refused */
    if (ckr_row_range(ti, row_begin, row_end, &first, &len, NULL, 0) != CKR_OK)
        return CKG_ERR_ARG;
    if (ckg_device_count() == 0)
        return CKG_ERR_NODEVICE;
    ckg_status st = staging_ready(m);
    if (st != CKG_OK)
        return st;
    ckg_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return CKG_ERR_NOMEM;
    t->rows = row_end - row_begin;
    t->dtype = ti->dtype;
    t->nbytes = len;
    t->cols = rows ? 1 : 0;   /* elements per row: the product of the other dimensions */
    for (uint32_t d = 1; rows && d < ti->ndim; d++)   /* rows x cols elements: no overflow */
        t->cols *= ti->shape[d];
    if (t->nbytes == 0) {
        *out = t;
        return CKG_OK;
    }
    /* a tensor not in one extent of its own (ckr_tensor_source): its decoded bytes */
    const ckp_extent *x = e == UINT32_MAX ? NULL : ckp_get_extent(r, e);
    uint64_t base = x ? x->orig_offset : 0;
    int bf16 = x && (x->encoding == CKC_ENC_K15 || x->encoding == CKC_ENC_BSPLIT);
    if (!x && ckr_tensor_offset(m->tab, i, &base) != CKR_OK)
        st = CKG_ERR_ARG;
    else if (bf16 && (ti->nbytes % rows || ti->nbytes / rows % 2))
        st = CKG_ERR_FORMAT;   /* planes of 16-bit weights: a whole number of them a row */
    else if (bf16 && !(flags & CKG_UPLOAD_DECODED) && (x->chunk_size / 2) % CKG_ESC_BLOCK == 0) {
        t->cols = ti->nbytes / rows / 2;   /* the planes' weights a row (dtype is informational, §4.3) */
        st = upload_packed(m, r, e, first / 2, (first + len) / 2, flags, t, stream);
    } else
        st = upload_raw(m, r, base, first, first + len, t, stream);
    if (st != CKG_OK) {
        ckg_tensor_free(t);
        return st;
    }
    *out = t;
    return CKG_OK;
}

void ckg_tensor_free(ckg_tensor *t)
{
    if (!t)
        return;
    cudaFree(t->d_codes);
    cudaFree(t->d_low);
    cudaFree(t->d_esc);
    cudaFree(t->d_index);
    cudaFree(t->d_raw);
    cudaFree(t->d_prow);
    cudaFree(t->d_patch);
    free(t);
}

int ckg_tensor_is_packed(const ckg_tensor *t) { return t && t->packed; }
const ckg_planes *ckg_tensor_planes(const ckg_tensor *t) { return t && t->packed ? &t->planes : NULL; }
void *ckg_tensor_data(const ckg_tensor *t) { return t ? t->d_raw : NULL; }
uint64_t ckg_tensor_nbytes(const ckg_tensor *t) { return t ? t->nbytes : 0; }
uint64_t ckg_tensor_device_bytes(const ckg_tensor *t) { return t ? t->dev_bytes : 0; }
uint64_t ckg_tensor_rows(const ckg_tensor *t) { return t ? t->rows : 0; }
uint64_t ckg_tensor_cols(const ckg_tensor *t) { return t ? t->cols : 0; }
uint64_t ckg_tensor_elem_off(const ckg_tensor *t) { return t ? t->elem_off : 0; }

ckg_status ckg_tensor_decode(const ckg_tensor *t, void *out, size_t cap, ckg_stream stream)
{
    if (!t || (!out && t->nbytes))
        return CKG_ERR_ARG;
    if (cap < t->nbytes)
        return CKG_ERR_SHAPE;
    if (t->nbytes == 0)
        return CKG_OK;
    if (t->packed)
        return ckg_decode(&t->planes, t->elem_off, t->nbytes / 2, out, stream);
    return cudaMemcpyAsync(out, t->d_raw, t->nbytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream) == cudaSuccess
               ? CKG_OK
               : CKG_ERR_CUDA;
}

ckg_gemv_path ckg_tensor_gemv_path(const ckg_tensor *t, const uint16_t *x)
{
    if (!t || !t->packed)
        return CKG_GEMV_GENERIC_ALIGN;
    return ckg_gemv_path_of(&t->planes, t->elem_off, t->rows, t->cols, x);
}

ckg_status ckg_tensor_gemv(const ckg_tensor *t, const uint16_t *x, int batch, void *y,
                           ckg_out_type y_type, ckg_stream stream)
{
    if (!t)
        return CKG_ERR_ARG;
    if (!t->packed)
        return CKG_ERR_UNSUPPORTED;
    return ckg_gemv(&t->planes, t->elem_off, t->rows, t->cols, x, batch, y, y_type, stream);
}
