/*
 * ckread.c — a packed directory read from host code (ckread.h).
 *
 * A model holds the manifest, one open container reader per safetensors
 * file, and the tensor table built from each file's safetensors header
 * (decoded and parsed by safetensors.h) placed among the TOC's extents: a
 * tensor is usually one extent (ckptfs writes them so), but any tiling the
 * format allows is read (§4: split tensors, names that differ).  Tensor rows are
 * read with ckp_pread (decodes only the chunks they touch, checks their
 * hashes); other files are opened on demand and read whole.
 *
 * Invariants: info[i].file points into readers[t_file[i]]'s info; scratch is
 * used only under lock.
 */
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckread.h"
#include "container.h"
#include "manifest.h"
#include "safetensors.h"
#include "util.h"

struct ckr_model {
    char *dir;
    ckm_manifest *man;
    ckp_reader **readers;       /* one per safetensors file */
    size_t n_files;
    ckr_tensor_info *info;      /* names owned here */
    uint32_t *t_file;           /* per tensor: index into readers */
    uint64_t *t_offset;         /* per tensor: offset of its bytes in the original file */
    uint32_t *t_extent;         /* per tensor: its extent, UINT32_MAX for empty tensors */
    size_t n;
    pthread_mutex_t lock;       /* protects scratch */
    ckp_scratch *scratch;
};

const char *ckr_status_name(ckr_status s)
{
    static const char *const names[] = {"ok",           "bad argument",    "I/O error",
                                        "not a packed model", "corrupt data", "out of memory",
                                        "not found",    "unsupported version", "internal error"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "unknown status";
}

/* The one place where the format library's statuses become ckread's: each
 * class of ckr_status is what a caller acts on, and every ckp_status lands in
 * the one that means the same here.  Pairs share a class: a range is a bad
 * argument of the caller (ckread checks its own first); an invalid
 * safetensors header (st_parse's CKP_ERR_SOURCE) is a packed file whose header
 * is invalid; damaged metadata and a damaged chunk are both corrupt packed
 * data (the call that fails tells them apart: ckr_open, or a read). */
static ckr_status from_ckp(ckp_status s)
{
    switch (s) {
    case CKP_OK: return CKR_OK;
    case CKP_ERR_ARG: case CKP_ERR_RANGE: return CKR_ERR_ARG;
    case CKP_ERR_IO: return CKR_ERR_IO;
    case CKP_ERR_FORMAT: case CKP_ERR_SOURCE: return CKR_ERR_FORMAT;
    case CKP_ERR_VERSION: return CKR_ERR_UNSUPPORTED;
    case CKP_ERR_CORRUPT: case CKP_ERR_CHUNK: return CKR_ERR_CORRUPT;
    case CKP_ERR_NOMEM: return CKR_ERR_NOMEM;
    case CKP_ERR_INTERNAL: return CKR_ERR_INTERNAL;
    }
    return CKR_ERR_INTERNAL; /* not a ckp_status */
}

/* Open dir/rel.ckpt (no link below dir followed: ckp_open_at), bound to
 * rel's manifest entry: its TOC's path, size and SHA-256 must be the entry's
 * (format R30, R52), as verify, unpack and the mount require, so a .ckpt
 * copied over another one of the same size is refused, never read as it. */
static ckp_status open_packed(const ckr_model *m, const char *rel, ckp_reader **r, char *err, size_t cap)
{
    ckp_status st = ckp_open_at(m->dir, rel, 0, r, err, cap);
    if (st != CKP_OK)
        return st;
    const ckp_info *in = ckp_get_info(*r);
    const ckm_file *f = ckm_find_file(m->man, rel);
    if (!f || in->original_size != f->size || memcmp(in->sha256, f->sha256, 32) || strcmp(in->path, rel)) {
        ckp_close(*r);
        *r = NULL;
        return cku_errf(err, cap, CKP_ERR_CORRUPT, "%s/%s%s: does not match its manifest entry",
                        CKU_ESC(m->dir), CKU_ESC(rel), CKP_SUFFIX);
    }
    return CKP_OK;
}

static ckp_status grow_table(ckr_model *m, size_t cap_n)
{
    ckr_tensor_info *ni = realloc(m->info, cap_n * sizeof *ni);
    if (!ni)
        return CKP_ERR_NOMEM;
    m->info = ni;
    uint32_t *nf = realloc(m->t_file, cap_n * sizeof *nf);
    if (!nf)
        return CKP_ERR_NOMEM;
    m->t_file = nf;
    uint64_t *no = realloc(m->t_offset, cap_n * sizeof *no);
    if (!no)
        return CKP_ERR_NOMEM;
    m->t_offset = no;
    uint32_t *ne = realloc(m->t_extent, cap_n * sizeof *ne);
    if (!ne)
        return CKP_ERR_NOMEM;
    m->t_extent = ne;
    return CKP_OK;
}

/* The extent of r that holds original byte off (the extents tile the file
 * in order, format §4: a binary search), or fi->n_extents if none does. */
static uint32_t extent_at(const ckp_reader *r, uint64_t off)
{
    uint32_t lo = 0, hi = ckp_get_info(r)->n_extents;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const ckp_extent *x = ckp_get_extent(r, mid);
        if (off < x->orig_offset)
            hi = mid;
        else if (off - x->orig_offset >= x->orig_size)
            lo = mid + 1;
        else
            return mid;
    }
    return ckp_get_info(r)->n_extents;
}

/* Tensor t's place among the extents of r: its one extent when exactly one
 * covers its bytes [off, off + n) (whatever the extent's name: names are
 * informational, format §3.2), else UINT32_MAX, with its encoding (the
 * first extent's) and packed bytes (of every extent it touches, which may
 * hold other bytes too) in ti.  A tensor split over several extents, or
 * sharing one, is valid (§4); it is read with ckp_pread like any other. */
static uint32_t place_tensor(const ckp_reader *r, uint64_t off, uint64_t n, ckr_tensor_info *ti)
{
    uint32_t e = extent_at(r, off), n_ext = ckp_get_info(r)->n_extents;
    const ckp_extent *x = ckp_get_extent(r, e);
    /* st_parse checked [off, off + n) against original_size, which the extents tile */
    assert(e < n_ext);
    ti->encoding = x->encoding;
    if (x->orig_offset == off && x->orig_size == n) {
        ti->packed_bytes = x->plane_size[0] + x->plane_size[1] + x->plane_size[2];
        return e;
    }
    ti->packed_bytes = 0;
    for (; e < n_ext && (x = ckp_get_extent(r, e))->orig_offset < off + n; e++)
        ti->packed_bytes += x->plane_size[0] + x->plane_size[1] + x->plane_size[2];
    return UINT32_MAX;
}

/* Add the tensors of header h of reader r (the last one opened). */
static ckp_status add_tensors(ckr_model *m, const ckp_reader *r, const st_header *h, char *err, size_t cap)
{
    const ckp_info *fi = ckp_get_info(r);
    if (grow_table(m, m->n + h->n_tensors) != CKP_OK)
        return cku_errf(err, cap, CKP_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < h->n_tensors; k++) {
        const st_tensor *t = &h->tensors[k];
        ckr_tensor_info *ti = &m->info[m->n];
        memset(ti, 0, sizeof *ti);
        ti->encoding = CKC_ENC_RAW;
        m->t_extent[m->n] = UINT32_MAX;
        if (t->end > t->begin)
            m->t_extent[m->n] = place_tensor(r, h->data_start + t->begin, t->end - t->begin, ti);
        if (!(ti->name = strdup(t->name)))
            return cku_errf(err, cap, CKP_ERR_NOMEM, "out of memory");
        ti->file = fi->path;
        ti->dtype = t->dtype;
        ti->ndim = t->ndim < CKR_MAX_DIMS ? t->ndim : CKR_MAX_DIMS;
        for (uint32_t d = 0; d < ti->ndim; d++)
            ti->shape[d] = t->shape[d];
        ti->nbytes = t->end - t->begin;
        m->t_file[m->n] = (uint32_t)(m->n_files - 1);
        m->t_offset[m->n] = h->data_start + t->begin;
        m->n++;
    }
    return CKP_OK;
}

/* The safetensors header of packed file r (of relative path rel): its 8-byte
 * length N (at most ST_MAX_HEADER: st_header_len), then the 8 + N bytes
 * decoded and parsed (st_parse checks every tensor's bytes lie within the
 * file, whose extents place_tensor finds).  Not extent 0 as its record sizes it: a few bytes of zstd
 * frames can claim gigabytes (a 38 KiB pack made ckr_open allocate and
 * decode 1 GiB).  @return CKP_OK with *out set, or the failure with err
 * naming rel. */
static ckp_status read_header(ckr_model *m, const ckp_reader *r, const char *rel, st_header **out, char *err,
                              size_t cap)
{
    *out = NULL;
    const ckp_info *fi = ckp_get_info(r);
    if (fi->n_extents == 0)
        return cku_errf(err, cap, CKP_ERR_FORMAT, "%s: empty safetensors file", CKU_ESC(rel));
    uint8_t len8[8], *hdr = NULL;
    uint64_t n = 0;
    size_t got = 0;
    char sterr[256];
    ckp_status st = ckp_pread(r, len8, sizeof len8, 0, &got, m->scratch);
    if (st == CKP_OK && (st = st_header_len(len8, got, fi->original_size, &n, sterr, sizeof sterr)) != CKP_OK)
        return cku_errf(err, cap, st, "%s: %s", CKU_ESC(rel), sterr);
    if (st == CKP_OK && !(hdr = malloc(8 + n)))
        return cku_errf(err, cap, CKP_ERR_NOMEM, "%s: out of memory", CKU_ESC(rel));
    if (st == CKP_OK)
        st = ckp_pread(r, hdr, 8 + n, 0, &got, m->scratch);
    /* st_header_len: 8 + n bytes lie within the file, so a read that succeeds is whole */
    assert(st != CKP_OK || got == 8 + n);
    if (st != CKP_OK)
        cku_errf(err, cap, st, "%s: cannot read the safetensors header: %s", CKU_ESC(rel), ckp_status_name(st));
    else if ((st = st_parse(hdr, got, fi->original_size, out, sterr, sizeof sterr)) != CKP_OK)
        cku_errf(err, cap, st, "%s: %s", CKU_ESC(rel), sterr);
    free(hdr);
    return st;
}

/* Open one safetensors file's packed copy and list its tensors. */
static ckp_status add_file(ckr_model *m, const char *rel, char *err, size_t cap)
{
    ckp_reader *r = NULL;
    ckp_status st = open_packed(m, rel, &r, err, cap);
    if (st != CKP_OK)
        return st;
    m->readers[m->n_files++] = r;
    st_header *h = NULL;
    if ((st = read_header(m, r, rel, &h, err, cap)) == CKP_OK)
        st = add_tensors(m, r, h, err, cap);
    st_free(h);
    return st;
}

/* ckr_open's work, in the format library's statuses. */
static ckp_status open_model(ckr_model *m, const char *dir, char *err, size_t cap)
{
    pthread_mutex_init(&m->lock, NULL);
    if (!(m->dir = strdup(dir)) || !(m->scratch = ckp_scratch_new()))
        return cku_errf(err, cap, CKP_ERR_NOMEM, "%s: out of memory", CKU_ESC(dir));
    ckp_status st = ckm_load(dir, &m->man, err, cap);
    if (st != CKP_OK)
        return st;
    if (!(m->readers = calloc(m->man->n_files ? m->man->n_files : 1, sizeof *m->readers)))
        return cku_errf(err, cap, CKP_ERR_NOMEM, "%s: out of memory", CKU_ESC(dir));
    for (size_t i = 0; i < m->man->n_files && st == CKP_OK; i++)
        if (m->man->files[i].kind == CKP_KIND_SAFETENSORS)
            st = add_file(m, m->man->files[i].path, err, cap);
    return st;
}

ckr_status ckr_open(const char *dir, ckr_model **out, char *err, size_t cap)
{
    if (!out)
        return CKR_ERR_ARG;
    *out = NULL;
    if (!dir)
        return CKR_ERR_ARG;
    ckr_model *m = calloc(1, sizeof *m);
    if (!m)
        return CKR_ERR_NOMEM;
    ckr_status st = from_ckp(open_model(m, dir, err, cap));
    if (st != CKR_OK) {
        ckr_close(m);
        return st;
    }
    *out = m;
    return CKR_OK;
}

void ckr_close(ckr_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        free((char *)m->info[i].name);
    for (size_t i = 0; i < m->n_files; i++)
        ckp_close(m->readers[i]);
    ckm_free(m->man);
    ckp_scratch_free(m->scratch);
    pthread_mutex_destroy(&m->lock);
    free(m->readers);
    free(m->info);
    free(m->t_file);
    free(m->t_offset);
    free(m->t_extent);
    free(m->dir);
    free(m);
}

size_t ckr_count(const ckr_model *m) { return m ? m->n : 0; }

const ckr_tensor_info *ckr_info(const ckr_model *m, size_t i) { return m && i < m->n ? &m->info[i] : NULL; }

ckr_status ckr_find(const ckr_model *m, const char *name, size_t *index)
{
    if (!m || !name || !index)
        return CKR_ERR_ARG;
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->info[i].name, name) == 0) {
            *index = i;
            return CKR_OK;
        }
    return CKR_ERR_NOTFOUND;
}

ckr_status ckr_tensor_offset(const ckr_model *m, size_t i, uint64_t *offset)
{
    if (!m || i >= m->n || !offset)
        return CKR_ERR_ARG;
    *offset = m->t_offset[i];
    return CKR_OK;
}

ckr_status ckr_tensor_source(const ckr_model *m, size_t i, const struct ckp_reader **reader, uint32_t *extent)
{
    if (!m || i >= m->n || !reader || !extent)
        return CKR_ERR_ARG;
    *reader = m->readers[m->t_file[i]];
    *extent = m->t_extent[i];
    return CKR_OK;
}

/* ckp_pread of [off, off+len) of reader r into dst under the model's lock;
 * [off, off+len) lies within r's original file (a tensor's bytes: st_parse
 * checked them against the file size its TOC records; a whole file). */
static ckp_status read_locked(ckr_model *m, const ckp_reader *r, void *dst, uint64_t len, uint64_t off,
                              char *err, size_t cap)
{
    size_t got = 0;
    pthread_mutex_lock(&m->lock);
    ckp_status ps = ckp_pread(r, dst, (size_t)len, off, &got, m->scratch);
    pthread_mutex_unlock(&m->lock);
    assert(ps != CKP_OK || got == len); /* a read within the file is short only on failure */
    if (ps != CKP_OK)
        cku_errf(err, cap, ps, "%s: bytes [%llu, %llu): %s", CKU_ESC(ckp_file_name(r)), (unsigned long long)off,
                 (unsigned long long)(off + len), ckp_status_name(ps));
    return ps;
}

ckr_status ckr_row_range(const ckr_tensor_info *ti, uint64_t row_begin, uint64_t row_end, uint64_t *first,
                         uint64_t *len, char *err, size_t errCapacity)
{
    if (!ti || !first || !len)
        return cku_errf(err, errCapacity, CKR_ERR_ARG, "no tensor info or result");
    uint64_t rows = ti->ndim ? ti->shape[0] : 1;
    if (row_begin > row_end || row_end > rows)
        return cku_errf(err, errCapacity, CKR_ERR_ARG, "%s: rows [%llu, %llu) outside [0, %llu)", CKU_ESC(ti->name),
                        (unsigned long long)row_begin, (unsigned long long)row_end, (unsigned long long)rows);
    /* Row r starts at byte r * nbytes / rows: a whole byte unless a row of a
     * sub-byte dtype (F4, F6) ends inside one (an F4 [2, 3] tensor has rows
     * of 12 bits), which a byte range cannot hold. */
    unsigned __int128 b0 = (unsigned __int128)row_begin * ti->nbytes, b1 = (unsigned __int128)row_end * ti->nbytes;
    if (rows && (b0 % rows || b1 % rows))
        return cku_errf(err, errCapacity, CKR_ERR_ARG,
                        "%s: rows [%llu, %llu) do not start and end on a byte (%llu bytes in %llu rows)",
                        CKU_ESC(ti->name),
                        (unsigned long long)row_begin, (unsigned long long)row_end,
                        (unsigned long long)ti->nbytes, (unsigned long long)rows);
    *first = rows ? (uint64_t)(b0 / rows) : 0;
    *len = rows ? (uint64_t)(b1 / rows) - *first : 0;
    return CKR_OK;
}

ckr_status ckr_read_rows(ckr_model *m, size_t i, uint64_t row_begin, uint64_t row_end, void *dst,
                         size_t cap, char *err, size_t errCapacity)
{
    if (!m || i >= m->n)
        return cku_errf(err, errCapacity, CKR_ERR_ARG, "no tensor %zu", i);
    const ckr_tensor_info *ti = &m->info[i];
    uint64_t first, len;
    ckr_status st = ckr_row_range(ti, row_begin, row_end, &first, &len, err, errCapacity);
    if (st != CKR_OK)
        return st;
    if (len > cap || (len && !dst))
        return cku_errf(err, errCapacity, CKR_ERR_ARG, "%s: %llu bytes do not fit in %zu", CKU_ESC(ti->name),
                        (unsigned long long)len, cap);
    if (len == 0)
        return CKR_OK;
    return from_ckp(read_locked(m, m->readers[m->t_file[i]], dst, len, m->t_offset[i] + first, err, errCapacity));
}

size_t ckr_file_count(const ckr_model *m) { return m ? m->man->n_files : 0; }

const char *ckr_file_path(const ckr_model *m, size_t i)
{
    return m && i < m->man->n_files ? m->man->files[i].path : NULL;
}

uint64_t ckr_file_size(const ckr_model *m, size_t i) { return m && i < m->man->n_files ? m->man->files[i].size : 0; }

ckr_status ckr_file_read(ckr_model *m, const char *path, void *dst, size_t cap, uint64_t *size, char *err,
                         size_t errCapacity)
{
    if (!m || !path || !size)
        return CKR_ERR_ARG;
    const ckm_file *f = ckm_find_file(m->man, path);
    if (!f)
        return cku_errf(err, errCapacity, CKR_ERR_NOTFOUND, "%s: no file %s in the manifest", CKU_ESC(m->dir),
                        CKU_ESC(path));
    *size = f->size;
    if (f->size > cap || (f->size && !dst))
        return cku_errf(err, errCapacity, CKR_ERR_ARG, "%s: %llu bytes do not fit in %zu", CKU_ESC(path),
                        (unsigned long long)f->size, cap);
    ckp_reader *r = NULL;
    ckp_status st = open_packed(m, path, &r, err, errCapacity);
    if (st != CKP_OK)
        return from_ckp(st);
    assert(ckp_get_info(r)->original_size == f->size); /* open_packed bound r to f (R52) */
    if (f->size)
        st = read_locked(m, r, dst, f->size, 0, err, errCapacity);
    ckp_close(r);
    return from_ckp(st);
}
