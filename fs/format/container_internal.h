/*
 * container_internal.h — on-disk field offsets and sizes shared by the
 * container reader and writer (docs/format.md §3–§4).  Not installed.
 */
#ifndef CKP_CONTAINER_INTERNAL_H
#define CKP_CONTAINER_INTERNAL_H

#include "ckc_ans.h"
#include "container.h"

#define CKP_MAGIC "\x89" "CKPTFS\n"
#define CKP_HEADER_SIZE 64u
#define CKP_TOC_HEADER_SIZE 96u
#define CKP_EXTENT_SIZE 192u
#define CKP_INDEX_ENTRY 16u
#define CKP_MAX_TOC (1ull << 30)
#define CKP_MAX_EXTENTS (1u << 24)
#define CKP_MAX_NAME 65535u
#define CKP_BIG_TENSOR_WEIGHTS (4ull << 20)  /* planes of tensors this large are 4 KiB aligned */

/* file header */
enum { H_MAGIC = 0, H_MAJOR = 8, H_MINOR = 10, H_FLAGS = 12, H_ORIG = 16, H_TOC_OFF = 24,
       H_TOC_SIZE = 32, H_TOC_HASH = 40, H_FILE_SIZE = 48, H_HASH = 56 };
/* TOC header */
enum { T_MAGIC = 0, T_NEXT = 4, T_ORIG = 8, T_SHA = 16, T_KIND = 48, T_MODE = 52, T_MTIME = 56,
       T_PATH_LEN = 64, T_STRTAB = 68, T_RESERVED = 72 };
/* extent record */
enum { X_ORIG_OFF = 0, X_ORIG_SIZE = 8, X_ENC = 16, X_CHUNK = 20, X_NCHUNKS = 24, X_INDEX_OFF = 32,
       X_INDEX_HASH = 40, X_P0_OFF = 48, X_P0_SIZE = 56, X_P1_OFF = 64, X_P1_SIZE = 72,
       X_P2_OFF = 80, X_P2_SIZE = 88, X_NESC = 96, X_CODEBOOK = 104, X_NAME_OFF = 136,
       X_NAME_LEN = 140, X_DTYPE = 144, X_RESERVED = 148 };

typedef struct ckp_ans_state ckp_ans_state;

/* An open reader (container_read.c); immutable after ckp_open but for the
 * ARCHIVE decode tables, built once each on first use (ckp_ans_state). */
struct ckp_reader {
    int fd;                 /* -1 when reading from src */
    ckp_source *src;        /* ckp_open_source: where the bytes come from (owned), or NULL */
    const uint8_t *map;     /* whole file mapped read-only (CKP_OPEN_MMAP), or NULL */
    char *file;             /* path given to ckp_open */
    ckp_info info;
    ckp_extent *x;          /* info.n_extents */
    ckp_chunk_entry *index; /* all chunk indexes, one allocation */
    char *strings;          /* NUL-terminated copies: path, then names */
    ckp_ans_state *ans;     /* ARCHIVE extents' tables (container_ans.c), or NULL */
    /* While a source's reader opens: the file's first opening_len bytes,
     * read at once, from which reads inside them are served; NULL after. */
    uint8_t *opening;
    size_t opening_len;
};

/* Bytes [off, off+len) of the packed file, wanted at dst. */
typedef struct {
    uint64_t off, len;
    uint8_t *dst;
} ckp_range;
/* Read ranges v[0..n) of a source's reader (its chunk indexes and ARCHIVE
 * tables, at open) in
 * few reads: ranges lying close together in the file by one read of the
 * span holding them, spans in parallel (container_index.c).  Checks
 * nothing.  @return 0 or an errno value. */
int ckp_read_ranges(const ckp_reader *r, const ckp_range *v, uint32_t n);

/* ARCHIVE extents (container_ans.c): each extent's table blob, read and
 * checked at open, and its decode tables, built on first use (a reader is
 * shared between threads: the first to finish installs them). */
#define CKP_ANS_MAX_BLOB (64ull << 20)  /* plane0_size of an ARCHIVE extent (R29) */
/* Extent e's blob buffer (plane0_size bytes, kept with r), creating r's
 * state if needed; NULL when out of memory. */
uint8_t *ckp_ans_blob(ckp_reader *r, uint32_t e);
/* Reads (unless have: already read into ckp_ans_blob(r, e)) and checks
 * extent e's blob (R29). */
ckp_status ckp_ans_load(ckp_reader *r, uint32_t e, int have, char *err, size_t cap);
/* Extent e's decode tables: kept ones (built on first use while the
 * reader's kept tables fit in their budget, §9.1), or, past it, a copy
 * built for this decode alone, also in *own, which the caller frees with
 * ckc_ans_tables_free after the decode (*own NULL otherwise).  NULL: out
 * of memory.  Thread-safe. */
const ckc_ans_tables *ckp_ans_tables(const ckp_reader *r, uint32_t e, ckc_ans_tables **own);
void ckp_ans_free(ckp_ans_state *a, uint32_t n_extents);

/* Writer side (container_write_ans.c): encode the planned tensor w[0..n)
 * in chunks of chunk_w weights with up to jobs threads, handing each chunk's
 * bytes to sink in order; sets ix[c].datum (offset in plane 1) and hash.
 * @return CKP_ERR_NOMEM, CKP_ERR_INTERNAL (the encoder refused), or the
 * sink's status. */
typedef ckp_status (*ckp_ans_sink)(void *ctx, const uint8_t *p, size_t n);
ckp_status ckp_ans_encode_chunks(const ckc_ans_plan *plan, const uint16_t *w, uint64_t n, uint64_t chunk_w,
                                 int jobs, ckp_chunk_entry *ix, ckp_ans_sink sink, void *ctx);

#endif
