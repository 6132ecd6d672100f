/*
 * container_read.c — the one reader of packed files (docs/format.md).
 *
 * ckp_open reads and validates all metadata up front (header, TOC, extent
 * tiling, payload bounds, plane sizes, codebooks, chunk indexes with their
 * hashes), so that the per-read path only has to decode and hash one chunk.
 * After ckp_open the reader is immutable: concurrent readers share it, each
 * with its own ckp_scratch.
 */
#define _GNU_SOURCE /* asprintf */
#include "container.h"
#include "container_internal.h"
#include "util.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameHeader: the zstd profile check */
#include <zstd.h>

/* struct ckp_reader: container_internal.h (container_ans.c reads it too). */

/* Scratch holds one chunk's packed bytes (in) or decoded bytes (chunk): at
 * most ~1.25x a chunk, and so at most ~20 MiB at the format's 16 MiB chunk
 * limit.  Buffers larger than SCRATCH_KEEP are freed after the read that
 * needed them, so an idle thread keeps at most 2 x SCRATCH_KEEP (the writer's
 * chunks, 128-256 KiB, never exceed it). */
#define SCRATCH_KEEP (1u << 20)
struct ckp_scratch {
    uint8_t *in;
    size_t in_cap;
    uint8_t *chunk;
    size_t chunk_cap;
    ZSTD_DCtx *dctx;
};

const char *ckp_status_name(ckp_status s)
{
    switch (s) {
    case CKP_OK: return "ok";
    case CKP_ERR_ARG: return "invalid argument";
    case CKP_ERR_IO: return "I/O error";
    case CKP_ERR_FORMAT: return "not a ckptfs packed file";
    case CKP_ERR_VERSION: return "unsupported format version";
    case CKP_ERR_CORRUPT: return "damaged metadata";
    case CKP_ERR_CHUNK: return "damaged chunk";
    case CKP_ERR_NOMEM: return "out of memory";
    case CKP_ERR_RANGE: return "offset out of range";
    case CKP_ERR_SOURCE: return "invalid source file";
    case CKP_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

int ckp_status_errno(ckp_status s)
{
    switch (s) {
    case CKP_OK: return 0;
    case CKP_ERR_ARG: return EINVAL;
    case CKP_ERR_NOMEM: return ENOMEM;
    case CKP_ERR_RANGE: return EINVAL;
    default: return EIO; /* damage of any kind is EIO: never wrong bytes */
    }
}

/* A failure of the file named file (escaped: a name from a packed directory). */
#define rerr(err, cap, file, s, ...) ((ckp_status)cku_errf_at((err), (cap), (s), (file), __VA_ARGS__))

/* 1 if [off, off+size) lies within [lo, hi]. */
static int in_range(uint64_t off, uint64_t size, uint64_t lo, uint64_t hi)
{
    return off >= lo && off <= hi && size <= hi - off;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Validate one extent record and fill x; names point into r->strings. */
static ckp_status parse_extent(ckp_reader *r, const uint8_t *rec, uint32_t i, uint64_t expect_off,
                               uint64_t toc_off, const uint8_t *strtab, uint32_t strtab_size,
                               char **names_end, char *err, size_t cap)
{
    ckp_extent *x = &r->x[i];
    const char *f = r->file;
    x->orig_offset = cku_le64(rec + X_ORIG_OFF);
    x->orig_size = cku_le64(rec + X_ORIG_SIZE);
    x->encoding = cku_le32(rec + X_ENC);
    x->chunk_size = cku_le32(rec + X_CHUNK);
    x->n_chunks = cku_le64(rec + X_NCHUNKS);
    for (int p = 0; p < 3; p++) {
        x->plane_offset[p] = cku_le64(rec + X_P0_OFF + 16 * p);
        x->plane_size[p] = cku_le64(rec + X_P0_SIZE + 16 * p);
    }
    x->n_escapes = cku_le64(rec + X_NESC);
    for (int k = 0; k < 16; k++)
        x->codebook.sym[k] = cku_le16(rec + X_CODEBOOK + 2 * k);
    x->dtype = cku_le32(rec + X_DTYPE);
    uint32_t noff = cku_le32(rec + X_NAME_OFF), nlen = cku_le32(rec + X_NAME_LEN);
    if (x->orig_offset != expect_off || x->orig_size == 0 ||
        x->orig_size > r->info.original_size - expect_off)
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u does not tile the original file", i);
    if (x->encoding > CKC_ENC_ARCHIVE || (x->encoding == CKC_ENC_ARCHIVE && r->info.version_minor < 1))
        return rerr(err, cap, f, CKP_ERR_VERSION, "extent %u has unknown encoding %u%s", i, x->encoding,
                    x->encoding == CKC_ENC_ARCHIVE ? " (archive is format 1.1; this file says 1.0)" : "");
    int bf16 = x->encoding == CKC_ENC_K15 || x->encoding == CKC_ENC_BSPLIT, ans = x->encoding == CKC_ENC_ARCHIVE;
    if (x->chunk_size == 0 || x->chunk_size > CKP_MAX_CHUNK || (bf16 && x->chunk_size % 16) ||
        (ans && x->chunk_size % 32))
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u has invalid chunk size %u", i, x->chunk_size);
    if (x->n_chunks != (x->orig_size + x->chunk_size - 1) / x->chunk_size)
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u has a wrong chunk count", i);
    if (!all_zero(rec + X_RESERVED, CKP_EXTENT_SIZE - X_RESERVED))
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: reserved bytes are not zero", i);
    if (nlen > CKP_MAX_NAME)
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: name_len %u is over %u", i, nlen, CKP_MAX_NAME);
    if (!in_range(noff, nlen, 0, strtab_size))
        return rerr(err, cap, f, CKP_ERR_CORRUPT,
                    "extent %u: name (name_off %u, name_len %u) lies outside the string table of %u bytes", i,
                    noff, nlen, strtab_size);
    int nplanes = bf16 ? 3 : ans ? 2 : 1;
    for (int p = 0; p < 3; p++) {
        int used = p < nplanes;
        if (!used && (x->plane_offset[p] || x->plane_size[p]))
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: unused plane %d is set", i, p);
        if (used && !in_range(x->plane_offset[p], x->plane_size[p], CKP_HEADER_SIZE, toc_off))
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: plane %d lies outside the file", i, p);
    }
    if (x->n_chunks > (toc_off - CKP_HEADER_SIZE) / CKP_INDEX_ENTRY ||
        !in_range(cku_le64(rec + X_INDEX_OFF), x->n_chunks * CKP_INDEX_ENTRY, CKP_HEADER_SIZE, toc_off))
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: chunk index lies outside the file", i);
    if (bf16) {
        uint64_t n = x->orig_size / 2;
        if (x->orig_size % 2 || x->plane_size[0] != ckc_code_plane_size(n) ||
            x->plane_size[1] != ckc_low_plane_size(x->encoding, n) ||
            x->n_escapes > n || x->plane_size[2] != ckc_escape_plane_size(x->encoding, x->n_escapes))
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: plane sizes do not match", i);
        if (ckc_codebook_check(x->encoding, &x->codebook) != CKC_OK)
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: invalid codebook", i);
    } else if (ans) {
        if (x->orig_size % 2 || x->plane_size[0] < CKC_ANS_HEADER || x->plane_size[0] > CKP_ANS_MAX_BLOB ||
            x->n_escapes || !all_zero(rec + X_CODEBOOK, 32))
            return rerr(err, cap, f, CKP_ERR_CORRUPT,
                        "extent %u: an archive extent with an odd size, tables of %llu bytes, escapes or a codebook",
                        i, (unsigned long long)x->plane_size[0]);
    } else {
        const char *enc = ckc_encoding_name(x->encoding);
        if (x->n_escapes)
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: n_escapes is set on a %s extent", i, enc);
        if (!all_zero(rec + X_CODEBOOK, 32))
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: codebook is set on a %s extent", i, enc);
        if (x->encoding == CKC_ENC_RAW && x->plane_size[0] != x->orig_size)
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: plane0_size %llu of a raw extent is not "
                        "its orig_size %llu", i, (unsigned long long)x->plane_size[0],
                        (unsigned long long)x->orig_size);
    }
    /* Names may point at the same bytes of the table, but their lengths add
     * up to at most strtab_size (R19): after the path, r->strings has room
     * for that and one NUL per extent. */
    const char *names_cap = r->strings + strlen(r->info.path) + 1 + strtab_size + r->info.n_extents;
    if ((size_t)(names_cap - *names_end) < (size_t)nlen + 1)
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "extent %u: names take more room than the string table holds", i);
    memcpy(*names_end, strtab + noff, nlen);
    x->name = *names_end;
    (*names_end)[nlen] = 0;
    *names_end += nlen + 1;
    return CKP_OK;
}

/* Check datums of one extent's index (format §4.2). */
static int index_ok(const ckp_extent *x)
{
    const ckp_chunk_entry *ix = x->index;
    for (uint64_t c = 0; c < x->n_chunks; c++) {
        uint64_t d = ix[c].datum, prev = c ? ix[c - 1].datum : 0;
        switch (x->encoding) {
        case CKC_ENC_RAW:
            if (d)
                return 0;
            break;
        case CKC_ENC_ZSTD:
            if ((c == 0 && d) || (c && d <= prev) || d >= x->plane_size[0])
                return 0;
            break;
        case CKC_ENC_ARCHIVE:
            if ((c == 0 && d) || (c && d <= prev) || d >= x->plane_size[1])
                return 0;
            break;
        default:
            if ((c == 0 && d) || d < prev || d > x->n_escapes)
                return 0;
        }
    }
    return 1;
}

/* Bytes [off, off+len) of r's packed file: pread on its descriptor, or its
 * source.  @return 0, or -1 with errno set. */
static int read_at(const ckp_reader *r, void *buf, size_t len, uint64_t off)
{
    if (!r->src)
        return cku_pread_full(r->fd, buf, len, off);
    if (r->opening && off <= r->opening_len && len <= r->opening_len - off) {
        memcpy(buf, r->opening + off, len);
        return 0;
    }
    int e = r->src->pread(r->src, buf, len, off);
    if (e)
        errno = e;
    return e ? -1 : 0;
}

ckp_status ckp_read_packed(const ckp_reader *r, void *buf, size_t len, uint64_t off)
{
    return read_at(r, buf, len, off) ? (errno == ENOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO) : CKP_OK;
}

ckp_source *ckp_get_source(const ckp_reader *r) { return r->src; }

/* Every index of a source's reader into buf, extent i's at entry at[i],
 * and every ARCHIVE extent's tables into its ckp_ans_blob, in few reads
 * (ckp_read_ranges).  @return 0 or an errno value. */
static int read_indexes(ckp_reader *r, const uint8_t *toc, uint8_t *buf, const uint64_t *at)
{
    uint32_t n = r->info.n_extents, m = 0;
    ckp_range *v = malloc((n ? 2 * (size_t)n : 1) * sizeof *v);
    if (!v)
        return ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        const ckp_extent *x = &r->x[i];
        v[m++] = (ckp_range){cku_le64(toc + CKP_TOC_HEADER_SIZE + (size_t)i * CKP_EXTENT_SIZE + X_INDEX_OFF),
                             x->n_chunks * CKP_INDEX_ENTRY, buf + at[i] * CKP_INDEX_ENTRY};
        uint8_t *blob = x->encoding == CKC_ENC_ARCHIVE ? ckp_ans_blob(r, i) : NULL;
        if (x->encoding == CKC_ENC_ARCHIVE && !blob) {
            free(v);
            return ENOMEM;
        }
        if (blob)
            v[m++] = (ckp_range){x->plane_offset[0], x->plane_size[0], blob};
    }
    int e = ckp_read_ranges(r, v, m);
    free(v);
    return e;
}

static ckp_status load_indexes(ckp_reader *r, const uint8_t *toc, char *err, size_t cap)
{
    uint64_t total = 0;
    uint64_t *at = malloc(((size_t)r->info.n_extents + 1) * sizeof *at);
    for (uint32_t i = 0; at && i < r->info.n_extents; i++) {
        at[i] = total;
        total += r->x[i].n_chunks;
    }
    r->index = malloc((total ? total : 1) * sizeof *r->index);
    uint8_t *buf = malloc(total ? total * CKP_INDEX_ENTRY : 1);
    ckp_status s = CKP_OK;
    if (!r->index || !buf || !at) {
        s = rerr(err, cap, r->file, CKP_ERR_NOMEM, "out of memory");
        goto out;
    }
    int pre = r->src != NULL; /* all read already, each at buf + at[i] entries (container_index.c) */
    if (pre) {
        int e = read_indexes(r, toc, buf, at);
        if (e) {
            s = rerr(err, cap, r->file, e == ENOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO, "reading chunk index: %s",
                     strerror(e));
            goto out;
        }
    }
    ckp_chunk_entry *next = r->index;
    for (uint32_t i = 0; i < r->info.n_extents; i++) {
        ckp_extent *x = &r->x[i];
        const uint8_t *rec = toc + CKP_TOC_HEADER_SIZE + (size_t)i * CKP_EXTENT_SIZE;
        size_t bytes = (size_t)x->n_chunks * CKP_INDEX_ENTRY;
        uint8_t *ib = pre ? buf + at[i] * CKP_INDEX_ENTRY : buf;
        if (!pre && read_at(r, buf, bytes, cku_le64(rec + X_INDEX_OFF))) {
            s = rerr(err, cap, r->file, CKP_ERR_IO, "reading chunk index: %s", strerror(errno));
            goto out;
        }
        if (ckc_hash64(ib, bytes) != cku_le64(rec + X_INDEX_HASH)) {
            s = rerr(err, cap, r->file, CKP_ERR_CORRUPT, "chunk index of extent %u (%s) is damaged", i,
                     *x->name ? x->name : "header");
            goto out;
        }
        x->index = next;
        for (uint64_t c = 0; c < x->n_chunks; c++, next++) {
            next->datum = cku_le64(ib + c * CKP_INDEX_ENTRY);
            next->hash = cku_le64(ib + c * CKP_INDEX_ENTRY + 8);
        }
        if (!index_ok(x)) {
            s = rerr(err, cap, r->file, CKP_ERR_CORRUPT, "chunk index of extent %u is inconsistent", i);
            goto out;
        }
        if (x->encoding == CKC_ENC_ARCHIVE && (s = ckp_ans_load(r, i, pre, err, cap)) != CKP_OK)
            goto out;
    }
out:
    free(at);
    free(buf);
    return s;
}

static ckp_status parse_header(ckp_reader *r, const uint8_t *h, uint64_t file_size, char *err, size_t cap)
{
    if (memcmp(h + H_MAGIC, CKP_MAGIC, 8))
        return rerr(err, cap, r->file, CKP_ERR_FORMAT, "not a ckptfs packed file (bad magic)");
    if (ckc_hash64(h, H_HASH) != cku_le64(h + H_HASH))
        return rerr(err, cap, r->file, CKP_ERR_CORRUPT, "file header is damaged (checksum mismatch)");
    r->info.version_major = cku_le16(h + H_MAJOR);
    r->info.version_minor = cku_le16(h + H_MINOR);
    if (r->info.version_major < CKP_VERSION_MAJOR) /* 0: no ckptfs release wrote it */
        return rerr(err, cap, r->file, CKP_ERR_VERSION,
                    "format version %u.%u is not one that any ckptfs release writes (a pre-release pack?); "
                    "this one reads %d.0-%d.%d",
                    r->info.version_major, r->info.version_minor, CKP_VERSION_MAJOR, CKP_VERSION_MAJOR,
                    CKP_VERSION_MINOR);
    if (r->info.version_major != CKP_VERSION_MAJOR || r->info.version_minor > CKP_VERSION_MINOR ||
        cku_le32(h + H_FLAGS))
        return rerr(err, cap, r->file, CKP_ERR_VERSION,
                    "format version %u.%u (flags %#x) was written by a newer ckptfs; upgrade ckptfs to read it "
                    "(this one reads %d.0-%d.%d)",
                    r->info.version_major, r->info.version_minor, cku_le32(h + H_FLAGS), CKP_VERSION_MAJOR,
                    CKP_VERSION_MAJOR, CKP_VERSION_MINOR);
    if (cku_le64(h + H_FILE_SIZE) != file_size)
        return rerr(err, cap, r->file, CKP_ERR_CORRUPT, "file is %llu bytes but its header says %llu (%s)",
                    (unsigned long long)file_size, (unsigned long long)cku_le64(h + H_FILE_SIZE),
                    file_size < cku_le64(h + H_FILE_SIZE) ? "truncated?" : "bytes appended after its end");
    uint64_t toc_off = cku_le64(h + H_TOC_OFF), toc_size = cku_le64(h + H_TOC_SIZE);
    if (toc_off % 8 || toc_off < CKP_HEADER_SIZE || toc_size < CKP_TOC_HEADER_SIZE ||
        toc_size > CKP_MAX_TOC || toc_off > file_size || file_size - toc_off != toc_size)
        return rerr(err, cap, r->file, CKP_ERR_CORRUPT, "table of contents lies outside the file");
    r->info.original_size = cku_le64(h + H_ORIG);
    r->info.packed_size = file_size;
    return CKP_OK;
}

static ckp_status parse_toc(ckp_reader *r, const uint8_t *t, uint64_t toc_off, uint64_t toc_size,
                            char *err, size_t cap)
{
    const char *f = r->file;
    if (memcmp(t + T_MAGIC, "TOC1", 4) || !all_zero(t + T_RESERVED, CKP_TOC_HEADER_SIZE - T_RESERVED))
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "table of contents has a bad magic or reserved field");
    uint32_t n = cku_le32(t + T_NEXT), path_len = cku_le32(t + T_PATH_LEN), strtab_size = cku_le32(t + T_STRTAB);
    if (n > CKP_MAX_EXTENTS || toc_size != CKP_TOC_HEADER_SIZE + (uint64_t)n * CKP_EXTENT_SIZE + strtab_size)
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "table of contents has inconsistent sizes");
    if (cku_le64(t + T_ORIG) != r->info.original_size)
        return rerr(err, cap, f, CKP_ERR_CORRUPT,
                    "table of contents: original_size %llu differs from the header's %llu",
                    (unsigned long long)cku_le64(t + T_ORIG), (unsigned long long)r->info.original_size);
    if (cku_le32(t + T_KIND) > CKP_KIND_SAFETENSORS)
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "table of contents: unknown kind %u", cku_le32(t + T_KIND));
    if (path_len == 0)
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "table of contents: path_len is 0 (no recorded path)");
    if (path_len > CKP_MAX_PATH || path_len > strtab_size)
        return rerr(err, cap, f, CKP_ERR_CORRUPT,
                    "table of contents: path_len %u is over %u or over the string table's %u bytes", path_len,
                    CKP_MAX_PATH, strtab_size);
    memcpy(r->info.sha256, t + T_SHA, 32);
    r->info.kind = (ckp_kind)cku_le32(t + T_KIND);
    r->info.mode = cku_le32(t + T_MODE) & 07777;
    r->info.mtime_ns = (int64_t)cku_le64(t + T_MTIME);
    r->info.n_extents = n;
    const uint8_t *strtab = t + CKP_TOC_HEADER_SIZE + (size_t)n * CKP_EXTENT_SIZE;
    /* every string is copied NUL-terminated; names are at most the table's size in all
     * (parse_extent checks: overlapping name references could exceed it) */
    r->strings = malloc((size_t)path_len + 1 + (size_t)strtab_size + n + 1);
    r->x = calloc(n ? n : 1, sizeof *r->x);
    if (!r->strings || !r->x)
        return rerr(err, cap, f, CKP_ERR_NOMEM, "out of memory");
    memcpy(r->strings, strtab, path_len);
    r->strings[path_len] = 0;
    r->info.path = r->strings;
    if (memchr(r->strings, 0, path_len))
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "recorded path is not a safe relative path: it holds a NUL");
    if (ckp_file_path_problem(r->strings))
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "recorded path is not a safe relative path: it %s",
                    ckp_file_path_problem(r->strings));
    char *names_end = r->strings + path_len + 1;
    uint64_t pos = 0, chunks = 0, max_chunks = (toc_off - CKP_HEADER_SIZE) / CKP_INDEX_ENTRY, tables = 0;
    for (uint32_t i = 0; i < n; i++) {
        ckp_status s = parse_extent(r, t + CKP_TOC_HEADER_SIZE + (size_t)i * CKP_EXTENT_SIZE, i, pos,
                                    toc_off, strtab, strtab_size, &names_end, err, cap);
        if (s != CKP_OK)
            return s;
        pos += r->x[i].orig_size;
        /* The indexes are loaded into memory: together they must fit in the
         * file, or overlapping ones would make memory grow with its square. */
        chunks += r->x[i].n_chunks; /* each <= max_chunks: no overflow */
        if (chunks > max_chunks)
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "chunk indexes take more room than the file holds");
        /* So are ARCHIVE tables (R29): shared ones would multiply it. */
        if (r->x[i].encoding == CKC_ENC_ARCHIVE)
            tables += r->x[i].plane_size[0]; /* each <= 64 MiB, n <= 2^24: no overflow */
        if (tables > toc_off - CKP_HEADER_SIZE)
            return rerr(err, cap, f, CKP_ERR_CORRUPT, "archive tables take more room than the file holds");
    }
    if (pos != r->info.original_size)
        return rerr(err, cap, f, CKP_ERR_CORRUPT, "extents cover %llu of %llu bytes",
                    (unsigned long long)pos, (unsigned long long)r->info.original_size);
    return load_indexes(r, t, err, cap);
}

static const char *check_extent(const ckp_reader *r, const ckp_extent *x, uint64_t pos)
{
    int bf16 = x->encoding == CKC_ENC_K15 || x->encoding == CKC_ENC_BSPLIT, ans = x->encoding == CKC_ENC_ARCHIVE;
    uint64_t toc_off = r->info.packed_size; /* planes end before the TOC, itself inside the file */
    if (x->orig_offset != pos || x->orig_size == 0 || x->orig_size > r->info.original_size - pos)
        return "R1: the extents do not tile the original file";
    if (x->encoding > CKC_ENC_ARCHIVE || x->chunk_size == 0 || x->chunk_size > CKP_MAX_CHUNK ||
        (bf16 && (x->chunk_size % 16 || x->orig_size % 2)) || (ans && (x->chunk_size % 32 || x->orig_size % 2)))
        return "R2: encoding, chunk size or BF16 parity";
    if (x->n_chunks != (x->orig_size + x->chunk_size - 1) / x->chunk_size)
        return "R3: n_chunks";
    for (int p = 0; p < 3; p++) {
        int used = p == 0 || bf16 || (ans && p == 1);
        if (used ? !in_range(x->plane_offset[p], x->plane_size[p], CKP_HEADER_SIZE, toc_off)
                 : (x->plane_offset[p] || x->plane_size[p]))
            return "R4: a plane outside the file, or an unused plane set";
    }
    uint64_t n = x->orig_size / 2;
    if (bf16 ? (x->plane_size[0] != ckc_code_plane_size(n) ||
                x->plane_size[1] != ckc_low_plane_size(x->encoding, n) || x->n_escapes > n ||
                x->plane_size[2] != ckc_escape_plane_size(x->encoding, x->n_escapes) ||
                ckc_codebook_check(x->encoding, &x->codebook) != CKC_OK)
             : (x->n_escapes || (x->encoding == CKC_ENC_RAW && x->plane_size[0] != x->orig_size) ||
                (ans && x->plane_size[0] < CKC_ANS_HEADER)))
        return "R5: plane sizes, escapes or codebook";
    if (!index_ok(x))
        return "R6: chunk index datums";
    if (!x->name)
        return "R7: a name is missing";
    return NULL;
}

const char *ckp_check(const ckp_reader *r)
{
    uint64_t pos = 0;
    for (uint32_t i = 0; i < r->info.n_extents; i++) {
        const char *bad = check_extent(r, &r->x[i], pos);
        if (bad)
            return bad;
        pos += r->x[i].orig_size;
    }
    if (pos != r->info.original_size)
        return "R1: the extents do not cover the original file";
    if (!r->info.path || !ckp_path_ok(r->info.path))
        return "R7: the recorded path";
    return NULL;
}

static ckp_status open_reader(int rootfd, const char *root, const char *rel, const char *path, unsigned flags,
                              ckp_reader **out, char *err, size_t cap);
static ckp_status read_meta(ckp_reader *r, uint64_t file_size, unsigned flags, char *err, size_t cap);

ckp_status ckp_open(const char *path, ckp_reader **out, char *err, size_t cap)
{
    return ckp_open_ex(path, 0, out, err, cap);
}

ckp_status ckp_open_ex(const char *path, unsigned flags, ckp_reader **out, char *err, size_t cap)
{
    return open_reader(-1, NULL, path, path, flags, out, err, cap);
}

ckp_status ckp_open_at(const char *dir, const char *rel, unsigned flags, ckp_reader **out, char *err, size_t cap)
{
    char *name = NULL, *path = NULL;
    *out = NULL;
    if (asprintf(&name, "%s%s", rel, CKP_SUFFIX) < 0 || asprintf(&path, "%s/%s", dir, name) < 0) {
        free(name);
        return rerr(err, cap, rel, CKP_ERR_NOMEM, "out of memory");
    }
    ckp_status s = open_reader(-1, dir, name, path, flags, out, err, cap);
    free(name);
    free(path);
    return s;
}

ckp_status ckp_open_in(int dirfd, const char *dir, const char *rel, ckp_reader **out, char *err, size_t cap)
{
    char *path = NULL;
    *out = NULL;
    if (asprintf(&path, "%s/%s", dir, rel) < 0)
        return rerr(err, cap, rel, CKP_ERR_NOMEM, "out of memory");
    ckp_status s = open_reader(dirfd, NULL, rel, path, 0, out, err, cap);
    free(path);
    return s;
}

/* Open root/rel (path: the two joined, for messages; root NULL: rel is the
 * path, or with rootfd >= 0 below the directory open there) with
 * cku_open_regular, then read and validate it. */
static ckp_status open_reader(int rootfd, const char *root, const char *rel, const char *path, unsigned flags,
                              ckp_reader **out, char *err, size_t cap)
{
    *out = NULL;
    ckp_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->file = strdup(path))) {
        free(r);
        return rerr(err, cap, path, CKP_ERR_NOMEM, "out of memory");
    }
    struct stat st;
    ckp_status s;
    char why[512];
    r->fd = rootfd >= 0 ? cku_open_regular_at(rootfd, rel, &st, why, sizeof why)
                        : cku_open_regular(root, rel, &st, why, sizeof why);
    if (r->fd < 0) {
        s = rerr(err, cap, path, errno == ENOMEM ? CKP_ERR_NOMEM : cku_open_refused(errno) ? CKP_ERR_FORMAT : CKP_ERR_IO,
                 "%s", why);
        goto fail;
    }
    if ((s = read_meta(r, (uint64_t)st.st_size, flags, err, cap)) != CKP_OK)
        goto fail;
    *out = r;
    return CKP_OK;
fail:
    ckp_close(r);
    return s;
}

ckp_status ckp_open_source(ckp_source *src, const char *name, ckp_reader **out, char *err, size_t cap)
{
    *out = NULL;
    ckp_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->file = strdup(name))) {
        free(r);
        src->close(src);
        return rerr(err, cap, name, CKP_ERR_NOMEM, "out of memory");
    }
    r->fd = -1;
    r->src = src;
    ckp_status s = read_meta(r, src->size, 0, err, cap);
    if (s != CKP_OK) {
        ckp_close(r);
        return s;
    }
    *out = r;
    return CKP_OK;
}

/* Read and validate r's header and TOC (r->file names it in messages):
 * what every open does once the bytes can be read. */
static ckp_status read_meta(ckp_reader *r, uint64_t file_size, unsigned flags, char *err, size_t cap)
{
    uint8_t h[CKP_HEADER_SIZE], *toc = NULL;
    ckp_status s;
    const char *path = r->file;
    if (file_size < CKP_HEADER_SIZE)
        return rerr(err, cap, path, CKP_ERR_FORMAT, "too short for a packed file");
    if (r->src) { /* its first bytes in one read: the header, and what else of the metadata they hold */
        size_t n = file_size < CKP_SOURCE_PREFIX ? (size_t)file_size : CKP_SOURCE_PREFIX;
        uint8_t *first = malloc(n);
        if (!first)
            return rerr(err, cap, path, CKP_ERR_NOMEM, "out of memory");
        if (read_at(r, first, n, 0)) {
            s = rerr(err, cap, path, errno == ENOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO, "%s", strerror(errno));
            free(first);
            return s;
        }
        r->opening = first;
        r->opening_len = n;
    }
    if (read_at(r, h, sizeof h, 0)) {
        s = rerr(err, cap, path, errno == ENOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO, "%s", strerror(errno));
        goto fail;
    }
    if ((s = parse_header(r, h, file_size, err, cap)) != CKP_OK)
        goto fail;
    uint64_t toc_off = cku_le64(h + H_TOC_OFF), toc_size = cku_le64(h + H_TOC_SIZE);
    toc = malloc(toc_size);
    if (!toc) {
        s = rerr(err, cap, path, CKP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (read_at(r, toc, toc_size, toc_off)) {
        s = rerr(err, cap, path, errno == ENOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO, "%s", strerror(errno));
        goto fail;
    }
    if (ckc_hash64(toc, toc_size) != cku_le64(h + H_TOC_HASH)) {
        s = rerr(err, cap, path, CKP_ERR_CORRUPT, "table of contents is damaged (checksum mismatch)");
        goto fail;
    }
    if ((s = parse_toc(r, toc, toc_off, toc_size, err, cap)) != CKP_OK)
        goto fail;
    free(toc);
    free(r->opening);
    r->opening = NULL;
    if ((flags & CKP_OPEN_MMAP) && r->fd >= 0) {
        /* Metadata was read and checked with pread above; only plane bytes
         * are loaded from the mapping.  No mapping: pread, as ckp_open. */
        void *m = mmap(NULL, (size_t)r->info.packed_size, PROT_READ, MAP_SHARED, r->fd, 0);
        if (m != MAP_FAILED)
            r->map = m;
    }
    assert(ckp_check(r) == NULL);
    return CKP_OK;
fail:
    free(toc);
    free(r->opening);
    r->opening = NULL;
    return s;
}

void ckp_close(ckp_reader *r)
{
    if (!r)
        return;
    if (r->map)
        munmap((void *)r->map, (size_t)r->info.packed_size);
    if (r->fd >= 0)
        close(r->fd);
    if (r->src)
        r->src->close(r->src);
    free(r->file);
    free(r->x);
    free(r->index);
    free(r->strings);
    ckp_ans_free(r->ans, r->info.n_extents);
    free(r);
}

const ckp_info *ckp_get_info(const ckp_reader *r) { return &r->info; }
const ckp_extent *ckp_get_extent(const ckp_reader *r, uint32_t i)
{
    return i < r->info.n_extents ? &r->x[i] : NULL;
}
int ckp_fd(const ckp_reader *r) { return r->fd; }
int ckp_is_mapped(const ckp_reader *r) { return r->map != NULL; }
const char *ckp_file_name(const ckp_reader *r) { return r->file; }

uint64_t ckp_chunk_len(const ckp_extent *x, uint64_t c)
{
    uint64_t start = c * x->chunk_size;
    return c + 1 < x->n_chunks ? x->chunk_size : x->orig_size - start;
}

ckp_status ckp_locate(const ckp_reader *r, uint64_t off, uint32_t *extent, uint64_t *chunk)
{
    if (off >= r->info.original_size)
        return CKP_ERR_RANGE;
    uint32_t lo = 0, hi = r->info.n_extents; /* find last extent with orig_offset <= off */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (r->x[mid].orig_offset <= off)
            lo = mid;
        else
            hi = mid;
    }
    *extent = lo;
    *chunk = (off - r->x[lo].orig_offset) / r->x[lo].chunk_size;
    return CKP_OK;
}

ckp_scratch *ckp_scratch_new(void) { return calloc(1, sizeof(ckp_scratch)); }

void ckp_scratch_free(ckp_scratch *s)
{
    if (!s)
        return;
    free(s->in);
    free(s->chunk);
    ZSTD_freeDCtx(s->dctx);
    free(s);
}

static int grow(uint8_t **p, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    uint8_t *q = realloc(*p, need);
    if (!q)
        return -1;
    *p = q;
    *cap = need;
    return 0;
}

/* Free a scratch buffer over SCRATCH_KEEP (see struct ckp_scratch). */
static void trim(uint8_t **p, size_t *cap)
{
    if (*cap > SCRATCH_KEEP) {
        free(*p);
        *p = NULL;
        *cap = 0;
    }
}

/* 0 if a compressed block of the frame sets the reserved bits of its
 * sequences section's Symbol_Compression_Modes byte, which RFC 8878
 * (3.1.1.3.2.1) says must be zero: libzstd before 1.5.6 ignores them and
 * later ones refuse the frame, so a reader's verdict would depend on the
 * library (format §6.1).  in[0..n) is one frame (ZSTD_findFrameCompressedSize);
 * anything else malformed is left to the decoder, which refuses it. */
static int zstd_reserved_bits_ok(const uint8_t *in, size_t n)
{
    size_t pos = ZSTD_frameHeaderSize(in, n);
    if (ZSTD_isError(pos))
        return 1;
    for (;;) {
        if (n - pos < 3)
            return 1;
        uint32_t bh = in[pos] | (uint32_t)in[pos + 1] << 8 | (uint32_t)in[pos + 2] << 16;
        size_t size = bh >> 3, type = (bh >> 1) & 3;
        pos += 3;
        if (type == 2 && size <= n - pos) { /* Compressed_Block: literals, then sequences */
            const uint8_t *b = in + pos;
            size_t lh, lsize, lbt = b[0] & 3, sf = (b[0] >> 2) & 3, k;
            if (lbt < 2) { /* Raw or RLE literals: 1, 2 or 3 header bytes */
                lh = sf == 1 ? 2 : sf == 3 ? 3 : 1;
                if (size < lh)
                    return 1;
                size_t regen = lh == 1 ? b[0] >> 3u : lh == 2 ? (b[0] >> 4u) + ((size_t)b[1] << 4)
                                                     : (b[0] >> 4u) + ((size_t)b[1] << 4) + ((size_t)b[2] << 12);
                lsize = lbt == 0 ? regen : 1;
            } else { /* Compressed or Treeless literals: 3, 3, 4 or 5 header bytes */
                lh = sf < 2 ? 3 : sf == 2 ? 4 : 5;
                if (size < lh)
                    return 1;
                uint64_t v = 0;
                for (k = 0; k < lh; k++)
                    v |= (uint64_t)b[k] << (8 * k);
                unsigned bits = sf < 2 ? 10 : sf == 2 ? 14 : 18;
                lsize = (size_t)(v >> (4 + bits)) & ((1u << bits) - 1);
            }
            size_t at = lh + lsize; /* the sequences section */
            if (at < size) {
                size_t nseq = b[at], hdr = b[at] < 128 ? 1 : b[at] < 255 ? 2 : 3;
                if (nseq && at + hdr < size && (b[at + hdr] & 3))
                    return 0;
            }
        }
        if (bh & 1 || type == 3)
            return 1;
        size_t skip = type == 1 ? 1 : size; /* an RLE block holds one byte */
        if (skip > n - pos)
            return 1;
        pos += skip;
    }
}

/* The zstd profile of format §6.1: a chunk's bytes are exactly one zstd frame
 * (no skippable frame, nothing after it) that names no dictionary and needs a
 * window of at most 16 MiB.  zstd alone would accept several frames. */
static int zstd_profile_ok(const uint8_t *in, size_t n)
{
    ZSTD_frameHeader fh;
    return ZSTD_getFrameHeader(&fh, in, n) == 0 && fh.frameType == ZSTD_frame && fh.dictID == 0 &&
           fh.windowSize <= CKP_MAX_CHUNK && ZSTD_findFrameCompressedSize(in, n) == n &&
           zstd_reserved_bits_ok(in, n);
}

/* Read [off, off+len) of plane p of x into dst.  Every caller's range lies
 * in the plane: a RAW chunk's bytes by R3 and R5 (plane 0 is orig_size
 * bytes), a ZSTD frame by R6 (datums below plane0_size, increasing), a
 * K15/BSPLIT range as read_bf16_chunk clamps it. */
/* Bytes [off, off+len) of plane p of x where they lie in memory: the
 * caller's planes (ckp_read_chunk_from, which checked they hold them) or
 * the mapping; NULL when they must be read with pread. */
static const uint8_t *plane_mem(const ckp_reader *r, const ckp_extent *x, const ckp_planes *pl, int p,
                                uint64_t off)
{
    if (pl)
        return pl->base[p] + (off - pl->off[p]);
    return r->map ? r->map + x->plane_offset[p] + off : NULL;
}

/* Read [off, off+len) of plane p of x into dst. */
static ckp_status read_plane(const ckp_reader *r, const ckp_extent *x, const ckp_planes *pl, int p,
                             uint64_t off, uint64_t len, uint8_t *dst)
{
    assert(off <= x->plane_size[p] && len <= x->plane_size[p] - off);
    const uint8_t *m = plane_mem(r, x, pl, p, off);
    if (m) {
        memcpy(dst, m, len);
        return CKP_OK;
    }
    return ckp_read_packed(r, dst, len, x->plane_offset[p] + off);
}

static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Decode a K15/BS chunk: read only the bytes of each plane that it uses. */
static ckp_status read_bf16_chunk(const ckp_reader *r, const ckp_extent *x, const ckp_planes *pl, uint64_t c,
                                  uint64_t len, uint16_t *dst, ckp_scratch *s)
{
    uint64_t nw = len / 2;
    ckp_span sp;
    ckp_chunk_span(x, c, c + 1, &sp);
    const uint64_t *off = sp.off, *end = sp.end;
    uint64_t got[3], total = 0;
    assert(sp.esc0 <= sp.esc1); /* R6: datums do not decrease and stay <= n_escapes */
    for (int p = 0; p < 3; p++) {
        /* R5, R6: the chunk's first weight and escape lie in the planes
         * (its end may not: the escapes a damaged datum claims) */
        assert(off[p] <= x->plane_size[p] && off[p] <= end[p]);
        got[p] = min64(end[p] - off[p] + 8, x->plane_size[p] - off[p]); /* + tail for 2/8-byte loads */
        total += got[p];
    }
    ckc_cplanes cp;
    if (r->map || pl) {       /* planes lie in memory: decode in place */
        cp = (ckc_cplanes){plane_mem(r, x, pl, 0, off[0]), plane_mem(r, x, pl, 1, off[1]),
                           plane_mem(r, x, pl, 2, off[2]), got[0], got[1], got[2]};
    } else {
        if (grow(&s->in, &s->in_cap, (size_t)total + 1))
            return CKP_ERR_NOMEM;
        uint8_t *b = s->in;
        cp = (ckc_cplanes){b, b + got[0], b + got[0] + got[1], got[0], got[1], got[2]};
        for (int p = 0; p < 3; p++) {
            ckp_status st = read_plane(r, x, NULL, p, off[p], got[p], b);
            if (st != CKP_OK)
                return st;
            b += got[p];
        }
    }
    ckc_status cs = ckc_decode_chunk(x->encoding, &x->codebook, &cp, 0, (size_t)nw, sp.esc0 % 8,
                                     sp.esc1 - sp.esc0, dst); /* escapes counted from their group */
    return cs == CKC_OK ? CKP_OK : CKP_ERR_CHUNK;
}

/* Decode an ARCHIVE chunk: its stream in plane 1 (datum to the next datum
 * or plane1_size), decoded with its extent's tables (built on first use). */
static ckp_status decode_ans_chunk(const ckp_reader *r, uint32_t e, uint64_t c, const ckp_planes *pl,
                                   uint64_t len, void *dst, ckp_scratch *s, const ckc_ans_tables *t)
{
    const ckp_extent *x = &r->x[e];
    ckp_span sp;
    ckp_chunk_span(x, c, c + 1, &sp);
    uint64_t a = sp.off[1], b = sp.end[1];
    assert(a < b && b <= x->plane_size[1]); /* R27: datums increase and stay below plane1_size */
    const uint8_t *in = plane_mem(r, x, pl, 1, a);
    if (!in) {
        if (grow(&s->in, &s->in_cap, (size_t)(b - a) + 1))
            return CKP_ERR_NOMEM;
        if (read_plane(r, x, NULL, 1, a, b - a, s->in) != CKP_OK)
            return CKP_ERR_IO;
        in = s->in;
    }
    uint16_t *out = dst;
    if ((uintptr_t)dst & 1) {
        if (grow(&s->chunk, &s->chunk_cap, len))
            return CKP_ERR_NOMEM;
        out = (uint16_t *)(void *)s->chunk;
    }
    ckc_status cs = ckc_ans_decode_chunk(t, in, (size_t)(b - a), sp.w0, (size_t)(len / 2), out);
    if (cs == CKC_OK && out != dst)
        memcpy(dst, out, len);
    if (out != dst)
        trim(&s->chunk, &s->chunk_cap);
    return cs == CKC_OK ? CKP_OK : CKP_ERR_CHUNK;
}

/* Its tables kept, or built for this chunk alone (ckp_ans_tables). */
static ckp_status read_ans_chunk(const ckp_reader *r, uint32_t e, uint64_t c, const ckp_planes *pl,
                                 uint64_t len, void *dst, ckp_scratch *s)
{
    ckc_ans_tables *own;
    const ckc_ans_tables *t = ckp_ans_tables(r, e, &own);
    ckp_status st = t ? decode_ans_chunk(r, e, c, pl, len, dst, s, t) : CKP_ERR_NOMEM;
    ckc_ans_tables_free(own);
    return st;
}

/* The bytes of each plane that decoding chunks c0..c1-1 of x reads (a
 * K15/BS decoder's 8-byte tail included), clamped to the planes. */
static void chunk_need(const ckp_extent *x, uint64_t c0, uint64_t c1, uint64_t lo[3], uint64_t hi[3])
{
    ckp_span sp;
    ckp_chunk_span(x, c0, c1, &sp);
    int tail = x->encoding == CKC_ENC_K15 || x->encoding == CKC_ENC_BSPLIT ? 8 : 0;
    for (int p = 0; p < 3; p++) {
        lo[p] = min64(sp.off[p], x->plane_size[p]);
        hi[p] = sp.end[p] > lo[p] ? min64(sp.end[p] + tail, x->plane_size[p]) : lo[p];
    }
}

/* 1 if chunk c of x claims more input than a chunk may have (format §9.1),
 * so that decoding it would read more than its length bounds: more escapes
 * than weights (R46) or a zstd frame over zstd's bound (R47).  Such a chunk
 * is refused before any of its bytes are read. */
static int chunk_input_over(const ckp_extent *x, uint64_t c)
{
    ckp_span sp;
    uint64_t len = ckp_chunk_len(x, c);
    if (x->encoding == CKC_ENC_RAW)
        return 0;
    ckp_chunk_span(x, c, c + 1, &sp);
    if (x->encoding == CKC_ENC_ZSTD)
        return sp.end[0] - sp.off[0] > ZSTD_COMPRESSBOUND(len);
    if (x->encoding == CKC_ENC_ARCHIVE)
        return sp.end[1] - sp.off[1] > ckc_ans_chunk_bound(len / 2);
    return sp.esc1 - sp.esc0 > len / 2;
}

uint64_t ckp_bounded_run(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1)
{
    if (e >= r->info.n_extents)
        return c0;
    const ckp_extent *x = &r->x[e];
    if (c1 > x->n_chunks)
        c1 = x->n_chunks;
    uint64_t c = c0;
    while (c < c1 && !chunk_input_over(x, c))
        c++;
    return c;
}

static ckp_status read_chunk(const ckp_reader *r, uint32_t e, uint64_t c, const ckp_planes *pl, void *dst,
                             ckp_scratch *s)
{
    const ckp_extent *x = &r->x[e];
    uint64_t len = ckp_chunk_len(x, c);
    ckp_status st;
    if (chunk_input_over(x, c))
        return CKP_ERR_CHUNK; /* R46, R47: never read its bytes */
    switch (x->encoding) {
    case CKC_ENC_RAW:
        st = read_plane(r, x, pl, 0, c * x->chunk_size, len, dst);
        break;
    case CKC_ENC_ZSTD: {
        ckp_span sp;
        ckp_chunk_span(x, c, c + 1, &sp);
        uint64_t a = sp.off[0], b = sp.end[0];
        assert(a < b && b <= x->plane_size[0]); /* R6: datums increase and stay below plane0_size */
        if (!s->dctx && !(s->dctx = ZSTD_createDCtx()))
            return CKP_ERR_NOMEM;
        const uint8_t *in = plane_mem(r, x, pl, 0, a);
        st = CKP_OK;
        if (!in) {
            if (grow(&s->in, &s->in_cap, (size_t)(b - a) + 1))
                return CKP_ERR_NOMEM;
            st = read_plane(r, x, NULL, 0, a, b - a, s->in);
            in = s->in;
        }
        if (st == CKP_OK && !zstd_profile_ok(in, (size_t)(b - a)))
            st = CKP_ERR_CHUNK;
        if (st == CKP_OK) {
            size_t z = ZSTD_decompressDCtx(s->dctx, dst, len, in, b - a);
            st = ZSTD_isError(z) || z != len ? CKP_ERR_CHUNK : CKP_OK;
        }
        break;
    }
    case CKC_ENC_ARCHIVE:
        st = read_ans_chunk(r, e, c, pl, len, dst, s);
        break;
    default:
        if ((uintptr_t)dst & 1) {
            if (grow(&s->chunk, &s->chunk_cap, len))
                return CKP_ERR_NOMEM;
            st = read_bf16_chunk(r, x, pl, c, len, (uint16_t *)(void *)s->chunk, s);
            if (st == CKP_OK)
                memcpy(dst, s->chunk, len);
            trim(&s->chunk, &s->chunk_cap);
        } else {
            st = read_bf16_chunk(r, x, pl, c, len, dst, s);
        }
    }
    trim(&s->in, &s->in_cap);
    if (st == CKP_OK && ckc_hash64(dst, len) != x->index[c].hash)
        st = CKP_ERR_CHUNK;
    return st;
}

/* Tell r's source that the plane bytes chunk c of extent e read failed
 * its hash (ckp_source.distrust). */
static void distrust_chunk(const ckp_reader *r, uint32_t e, uint64_t c)
{
    uint64_t lo[3], hi[3];
    chunk_need(&r->x[e], c, c + 1, lo, hi);
    for (int p = 0; p < 3; p++)
        if (hi[p] > lo[p])
            r->src->distrust(r->src, r->x[e].plane_offset[p] + lo[p], hi[p] - lo[p]);
}

/* st: how chunk c of extent e read.  A chunk that failed its hash, read
 * from a source that may have kept its bytes (an s3:// mount's disk
 * cache): once more from the origin; bytes that fail again are not kept
 * either.  @return the chunk's status now. */
static ckp_status reread_chunk(const ckp_reader *r, uint32_t e, uint64_t c, void *dst, ckp_scratch *s,
                               ckp_status st)
{
    if (st != CKP_ERR_CHUNK || !r->src || !r->src->distrust || chunk_input_over(&r->x[e], c))
        return st;
    distrust_chunk(r, e, c);
    st = read_chunk(r, e, c, NULL, dst, s);
    if (st == CKP_ERR_CHUNK)
        distrust_chunk(r, e, c);
    return st;
}

ckp_status ckp_read_chunk(const ckp_reader *r, uint32_t e, uint64_t c, void *dst, ckp_scratch *s)
{
    if (e >= r->info.n_extents || c >= r->x[e].n_chunks || !s)
        return CKP_ERR_ARG;
    return reread_chunk(r, e, c, dst, s, read_chunk(r, e, c, NULL, dst, s));
}

#define ANS_BATCH CKP_RUN_MAX /* ARCHIVE chunks decoded interleaved */

/* Chunks c..c+m-1 (2 <= m <= ANS_BATCH, each within its bound) of ARCHIVE
 * extent e, chunk k into dst[k] (even addresses), decoded by one
 * ckc_ans_decode_chunks call; their streams follow each other in plane 1
 * and are read in one piece.  st[k]: chunk k's own status (one chunk's
 * damage leaves the others' results alone: their chains are separate). */
static void read_ans_batch(const ckp_reader *r, uint32_t e, uint64_t c, uint64_t m, void *const dst[],
                           ckp_status st[], ckp_scratch *s)
{
    const ckp_extent *x = &r->x[e];
    ckc_ans_chunk b[ANS_BATCH];
    ckp_span sp, last;
    ckp_status fail = CKP_OK;
    ckc_ans_tables *own;
    const ckc_ans_tables *t = ckp_ans_tables(r, e, &own);
    ckp_chunk_span(x, c, c + 1, &sp);
    ckp_chunk_span(x, c + m - 1, c + m, &last);
    uint64_t a0 = sp.off[1];
    const uint8_t *in = t ? plane_mem(r, x, NULL, 1, a0) : NULL;
    if (!t || (!in && grow(&s->in, &s->in_cap, (size_t)(last.end[1] - a0) + 1)))
        fail = CKP_ERR_NOMEM;
    else if (!in && read_plane(r, x, NULL, 1, a0, last.end[1] - a0, s->in) != CKP_OK)
        fail = CKP_ERR_IO;
    if (fail != CKP_OK) {
        for (uint64_t k = 0; k < m; k++)
            st[k] = fail;
        ckc_ans_tables_free(own);
        return;
    }
    if (!in)
        in = s->in;
    for (uint64_t k = 0; k < m; k++) {
        ckp_chunk_span(x, c + k, c + k + 1, &sp);
        assert(sp.off[1] < sp.end[1] && sp.end[1] <= x->plane_size[1]); /* R27 */
        b[k] = (ckc_ans_chunk){t, in + (sp.off[1] - a0), (size_t)(sp.end[1] - sp.off[1]), sp.w0,
                               (size_t)(ckp_chunk_len(x, c + k) / 2), dst[k], CKC_OK};
    }
    ckc_ans_decode_chunks(b, (size_t)m);
    ckc_ans_tables_free(own); /* NULL when kept (ckp_ans_tables) */
    trim(&s->in, &s->in_cap);
    for (uint64_t k = 0; k < m; k++)
        st[k] = b[k].status == CKC_OK && ckc_hash64(dst[k], ckp_chunk_len(x, c + k)) == x->index[c + k].hash
                    ? CKP_OK
                    : CKP_ERR_CHUNK;
}

/* How many chunks from c (at most m) read_ans_batch may take: ARCHIVE,
 * within their bound (R46/R47 refuse the others unread), even addresses. */
static uint64_t batch_len(const ckp_reader *r, uint32_t e, uint64_t c, uint64_t m, void *const dst[])
{
    if (r->x[e].encoding != CKC_ENC_ARCHIVE)
        return 0;
    m = ckp_bounded_run(r, e, c, c + m) - c;
    for (uint64_t k = 0; k < m; k++)
        if ((uintptr_t)dst[k] & 1)
            return k;
    return m;
}

ckp_status ckp_read_chunks_to(const ckp_reader *r, uint32_t e, uint64_t c, uint64_t n, void *const dst[],
                              ckp_status st[], ckp_scratch *s)
{
    if (e >= r->info.n_extents || c > r->x[e].n_chunks || n > r->x[e].n_chunks - c || n > CKP_RUN_MAX ||
        (n && (!dst || !st || !s)))
        return CKP_ERR_ARG;
    uint64_t m = batch_len(r, e, c, n, dst), i = 0;
    if (m >= 2) {
        read_ans_batch(r, e, c, m, dst, st, s);
        i = m;
    }
    for (; i < n; i++)
        st[i] = read_chunk(r, e, c + i, NULL, dst[i], s);
    for (i = 0; i < n; i++)
        st[i] = reread_chunk(r, e, c + i, dst[i], s, st[i]);
    for (i = 0; i < n; i++)
        if (st[i] != CKP_OK)
            return st[i];
    return CKP_OK;
}

ckp_status ckp_read_chunks(const ckp_reader *r, uint32_t e, uint64_t c, uint64_t n, void *dst, ckp_scratch *s,
                           uint64_t *bad)
{
    uint8_t *d = dst;
    uint64_t i = c;
    if (bad)
        *bad = c;
    if (e >= r->info.n_extents || c > r->x[e].n_chunks || n > r->x[e].n_chunks - c || (n && (!dst || !s)))
        return CKP_ERR_ARG;
    const ckp_extent *x = &r->x[e];
    while (i < c + n) {
        void *to[CKP_RUN_MAX];
        ckp_status st[CKP_RUN_MAX];
        uint64_t m = min64(CKP_RUN_MAX, c + n - i), at = 0;
        for (uint64_t k = 0; k < m; at += ckp_chunk_len(x, i + k), k++)
            to[k] = d + at;
        ckp_read_chunks_to(r, e, i, m, to, st, s);
        for (uint64_t k = 0; k < m; k++, i++) {
            if (st[k] != CKP_OK) {
                if (bad)
                    *bad = i;
                return st[k];
            }
            d += ckp_chunk_len(x, i);
        }
    }
    return CKP_OK;
}

void ckp_chunk_need(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1, uint64_t lo[3], uint64_t hi[3])
{
    memset(lo, 0, 3 * sizeof *lo);
    memset(hi, 0, 3 * sizeof *hi);
    if (e < r->info.n_extents && c0 < c1 && c1 <= r->x[e].n_chunks)
        chunk_need(&r->x[e], c0, c1, lo, hi);
}

ckp_status ckp_read_chunk_from(const ckp_reader *r, uint32_t e, uint64_t c, const ckp_planes *pl, void *dst,
                               ckp_scratch *s)
{
    if (e >= r->info.n_extents || c >= r->x[e].n_chunks || !s || !pl)
        return CKP_ERR_ARG;
    uint64_t lo[3], hi[3];
    chunk_need(&r->x[e], c, c + 1, lo, hi);
    for (int p = 0; p < 3; p++)
        if (hi[p] > lo[p] && (!pl->base[p] || lo[p] < pl->off[p] || hi[p] - pl->off[p] > pl->len[p]))
            return CKP_ERR_ARG; /* not all the chunk reads */
    return read_chunk(r, e, c, pl, dst, s);
}

/* The plane byte ranges of chunks c0..c1-1 of extent e, clamped to the
 * planes; 0 when there are none. */
static int chunk_ranges(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1, uint64_t lo[3],
                        uint64_t hi[3])
{
    if (e >= r->info.n_extents)
        return 0;
    const ckp_extent *x = &r->x[e];
    if (c1 > x->n_chunks)
        c1 = x->n_chunks;
    if (c0 >= c1)
        return 0;
    ckp_span sp;
    ckp_chunk_span(x, c0, c1, &sp);
    for (int p = 0; p < 3; p++)
        lo[p] = sp.off[p], hi[p] = min64(sp.end[p], x->plane_size[p]);
    return 1;
}

void ckp_willneed(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1)
{
    uint64_t lo[3], hi[3];
    if (r->fd < 0 || !chunk_ranges(r, e, c0, c1, lo, hi))
        return;
    for (int p = 0; p < 3; p++)
        if (lo[p] < hi[p])
            posix_fadvise(r->fd, (off_t)(r->x[e].plane_offset[p] + lo[p]), (off_t)(hi[p] - lo[p]),
                          POSIX_FADV_WILLNEED);
}

void ckp_dontneed(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1)
{
    if (r->fd < 0 || e >= r->info.n_extents)
        return;
    const ckp_extent *x = &r->x[e];
    if (c1 > x->n_chunks)
        c1 = x->n_chunks;
    if (c0 >= c1)
        return;
    ckp_span sp, before, after;
    ckp_chunk_span(x, c0, c1, &sp);
    if (c0 > 0)
        ckp_chunk_span(x, c0 - 1, c0, &before);
    if (c1 < x->n_chunks)
        ckp_chunk_span(x, c1, c1 + 1, &after);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    for (int p = 0; p < 3; p++) {
        /* Only bytes no other chunk reads: chunk c0-1 reads up to its end
         * and 8 bytes past (read_bf16_chunk's tail), chunk c1 from its
         * start.  Only pages wholly inside are dropped (the kernel keeps
         * partial ones), so the neighbours' pages stay for their decodes. */
        uint64_t lo = sp.off[p], hi = min64(sp.end[p], x->plane_size[p]);
        if (c0 > 0 && before.end[p] + 8 > lo)
            lo = before.end[p] + 8;
        if (c1 < x->n_chunks && after.off[p] < hi)
            hi = after.off[p];
        if (lo >= hi)
            continue;
        uint64_t a = x->plane_offset[p] + lo, b = x->plane_offset[p] + hi;
        if (r->map) { /* a page still mapped is not dropped: unmap ours first */
            uint64_t ma = (a + page - 1) / page * page, mb = b / page * page;
            if (ma < mb)
                madvise((void *)(r->map + ma), (size_t)(mb - ma), MADV_DONTNEED);
        }
        posix_fadvise(r->fd, (off_t)a, (off_t)(b - a), POSIX_FADV_DONTNEED);
    }
}

ckp_status ckp_pread(const ckp_reader *r, void *buf, size_t len, uint64_t off, size_t *got, ckp_scratch *s)
{
    *got = 0;
    if (off >= r->info.original_size || !len)
        return CKP_OK;
    if (len > r->info.original_size - off)
        len = (size_t)(r->info.original_size - off);
    uint8_t *out = buf;
    ckp_status st = CKP_OK;
    while (*got < len) {
        uint64_t pos = off + *got, c;
        uint32_t e;
        st = ckp_locate(r, pos, &e, &c);
        assert(st == CKP_OK); /* pos < original_size: R1, the extents tile it */
        const ckp_extent *x = &r->x[e];
        uint64_t cstart = x->orig_offset + c * x->chunk_size, clen = ckp_chunk_len(x, c);
        uint64_t skip = pos - cstart, take = min64(clen - skip, len - *got);
        if (skip == 0 && take == clen) {
            st = ckp_read_chunk(r, e, c, out + *got, s);
        } else {
            if (grow(&s->chunk, &s->chunk_cap, clen))
                return CKP_ERR_NOMEM;
            st = ckp_read_chunk(r, e, c, s->chunk, s);
            if (st == CKP_OK)
                memcpy(out + *got, s->chunk + skip, take);
        }
        if (st != CKP_OK)
            break;
        *got += take;
    }
    trim(&s->chunk, &s->chunk_cap);
    return *got == len ? CKP_OK : st;
}

_Static_assert(CKP_MAX_PATH == 4096u && CKP_MAX_COMPONENT == 255u && sizeof CKP_SUFFIX == 6,
               "the messages of ckp_path_problem and ckp_file_path_problem give the limits");

const char *ckp_path_problem(const char *rel)
{
    if (!rel || !*rel)
        return "is empty";
    if (*rel == '/')
        return "is absolute";
    if (!cku_utf8_ok(rel))
        return "is not UTF-8";
    if (strlen(rel) > CKP_MAX_PATH)
        return "is over 4096 bytes";
    for (const char *p = rel;;) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 0)
            return q ? "has an empty component" : "ends with '/'";
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return n == 1 ? "has a \".\" component" : "has a \"..\" component";
        if (n > CKP_MAX_COMPONENT)
            return "has a component over 255 bytes";
        if (!q)
            return NULL;
        p = q + 1;
    }
}

int ckp_path_ok(const char *rel) { return ckp_path_problem(rel) == NULL; }

const char *ckp_file_path_problem(const char *rel)
{
    const char *why = ckp_path_problem(rel);
    if (why)
        return why;
    const char *slash = strrchr(rel, '/');
    if (strlen(slash ? slash + 1 : rel) + strlen(CKP_SUFFIX) > CKP_MAX_COMPONENT)
        return "has a last component over 250 bytes: its packed file's name (with " CKP_SUFFIX
               ") would be over 255 bytes";
    return NULL;
}
