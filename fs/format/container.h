/*
 * container.h — reading and writing one packed file (.ckpt), docs/format.md.
 *
 * The reader is the one reader of the format: unpack, verify, stat, the FUSE
 * daemon and the GPU loader all use it.  It knows nothing of FUSE.  An open
 * reader is immutable and safe to share between threads: every read goes
 * through pread(2) on its descriptor and decodes into caller-provided memory.
 * ckp_open validates everything that can be validated without decoding
 * (header, TOC, tiling, plane sizes, chunk indexes and their hashes); each
 * chunk is checked against its hash when it is decoded.
 */
#ifndef CKP_CONTAINER_H
#define CKP_CONTAINER_H

#include <stddef.h>
#include <stdint.h>

#include "ckc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKP_VERSION_MAJOR 1
#define CKP_VERSION_MINOR 1   /* 1.1: ARCHIVE extents */
#define CKP_SUFFIX ".ckpt"
#define CKP_MANIFEST_NAME "ckptfs.manifest"
#define CKP_STATE_NAME "ckptfs.state"        /* written by pack while it runs (resume) */
#define CKP_MAX_CHUNK (16u << 20)
#define CKP_MAX_PATH 4096u   /* longest relative path a pack records (§2) */
#define CKP_MAX_COMPONENT 255u /* longest component of such a path (§2: NAME_MAX) */
#define CKP_BF16_CHUNK_WEIGHTS (64u << 10)   /* 128 KiB of BF16 per chunk */
#define CKP_BLOB_CHUNK (256u << 10)

/* Pinned status codes of the container layer. */
typedef enum {
    CKP_OK = 0,
    CKP_ERR_ARG = 1,      /* bad argument */
    CKP_ERR_IO = 2,       /* read/write failed (errno kept in the message) */
    CKP_ERR_FORMAT = 3,   /* not a ckptfs packed file (magic) */
    CKP_ERR_VERSION = 4,  /* a version or flag this reader does not know */
    CKP_ERR_CORRUPT = 5,  /* metadata damaged or inconsistent */
    CKP_ERR_CHUNK = 6,    /* a chunk failed to decode or its hash differs */
    CKP_ERR_NOMEM = 7,
    CKP_ERR_RANGE = 8,    /* offset past the end */
    CKP_ERR_SOURCE = 9,   /* the source file is invalid (writer side) */
    CKP_ERR_INTERNAL = 10 /* the writer broke its own invariant (a bug, not bad input) */
} ckp_status;

const char *ckp_status_name(ckp_status s);
/* The one place where container errors become errno values (EIO for damage). */
int ckp_status_errno(ckp_status s);

typedef enum { CKP_KIND_BLOB = 0, CKP_KIND_SAFETENSORS = 1 } ckp_kind;

typedef struct {
    uint64_t datum; /* RAW 0; ZSTD frame offset in plane 0; K15/BS escape prefix;
                     * ARCHIVE chunk offset in plane 1 */
    uint64_t hash;  /* XXH3 of the chunk's decoded bytes */
} ckp_chunk_entry;

typedef struct {
    uint64_t orig_offset, orig_size;
    uint32_t encoding;          /* ckc_encoding */
    uint32_t chunk_size;        /* bytes of original per chunk */
    uint64_t n_chunks;
    uint64_t plane_offset[3], plane_size[3];
    uint64_t n_escapes;
    ckc_codebook codebook;
    uint32_t dtype;             /* format.md §4.3 */
    const char *name;           /* tensor name, NUL-terminated ("" if none) */
    const ckp_chunk_entry *index; /* n_chunks entries, verified at open */
} ckp_extent;

typedef struct {
    uint64_t original_size;
    uint64_t packed_size;
    uint8_t sha256[32];
    ckp_kind kind;
    uint32_t mode;
    int64_t mtime_ns;
    const char *path;           /* relative path of the source, NUL-terminated */
    uint32_t n_extents;
    uint16_t version_major, version_minor;
} ckp_info;

typedef struct ckp_reader ckp_reader;

/* What an open reader guarantees (ckp_open checks each before returning a
 * reader; ckp_check verifies them again, and debug builds assert it):
 *   R1. the extents tile [0, original_size) in order, each orig_size > 0;
 *   R2. encoding is RAW, ZSTD, K15, BSPLIT or ARCHIVE (in a 1.1 file);
 *       0 < chunk_size <= CKP_MAX_CHUNK, a multiple of 16 for K15/BSPLIT
 *       and of 32 for ARCHIVE, whose orig_size is even;
 *   R3. n_chunks = ceil(orig_size / chunk_size);
 *   R4. each used plane lies in the file between the header and the TOC, and
 *       unused planes (1 and 2 of RAW/ZSTD) are offset 0, size 0;
 *   R5. K15/BSPLIT plane sizes are ckc_*_plane_size of orig_size/2 weights and
 *       n_escapes <= orig_size/2 escapes; the codebook passes ckc_codebook_check;
 *       RAW/ZSTD have no escapes, and RAW's plane 0 is orig_size bytes;
 *   R6. chunk index datums: RAW 0; ZSTD 0 first, then strictly increasing and
 *       < plane_size[0]; K15/BSPLIT 0 first, non-decreasing, <= n_escapes;
 *   R7. info.path is a safe relative path (ckp_path_ok); every name is
 *       NUL-terminated.
 * Chunk bytes are not covered: each chunk is checked against its hash when it
 * is decoded. */

/* Open and validate a packed file.  On failure *out is NULL and, if err is
 * given, a message naming the file and the problem is written to it.
 * The reader owns its descriptor. */
ckp_status ckp_open(const char *path, ckp_reader **out, char *err, size_t errCapacity);
void ckp_close(ckp_reader *r);
/* Verify R1-R7 above on an open reader.  @return NULL, or the number and
 * text of the first one broken (a bug in ckp_open). */
const char *ckp_check(const ckp_reader *r);

/* Flags of ckp_open_ex. */
#define CKP_OPEN_MMAP 1u  /* decode straight from a read-only shared mapping of
                           * the file instead of pread into scratch (falls back
                           * to pread if the file cannot be mapped) */

/* ckp_open with flags (0: exactly ckp_open).  With CKP_OPEN_MMAP, chunk
 * reads load from the mapping: if the file shrinks while the reader is open,
 * ckp_read_chunk/ckp_pread raise SIGBUS in the calling thread.  The library
 * installs no signal handler: a caller that maps must catch SIGBUS around
 * its reads (e.g. sigsetjmp/siglongjmp) and treat it as EIO. */
ckp_status ckp_open_ex(const char *path, unsigned flags, ckp_reader **out, char *err,
                       size_t errCapacity);
/* ckp_open_ex of DIR/REL.ckpt, the packed file of a manifest entry REL:
 * how every reader of a packed directory opens its members.  No symbolic link
 * below DIR is followed, and only a regular file is opened: a FIFO, device or
 * socket is refused without being opened (CKP_ERR_FORMAT, the message naming
 * the path and what is there; util.h, cku_open_regular).  ckp_open and
 * ckp_open_ex take a path the caller chose (links in it are followed) and
 * also open nothing but a regular file. */
ckp_status ckp_open_at(const char *dir, const char *rel, unsigned flags, ckp_reader **out, char *err,
                       size_t errCapacity);
/* ckp_open of DIR/REL exactly (no suffix added), DIR being the directory
 * open at dirfd (which stays open) and named dir in messages; no link below
 * it is followed, as ckp_open_at.  How `ckptfs pack` reads the packed files
 * of the directory it writes, wherever that directory's name now leads. */
ckp_status ckp_open_in(int dirfd, const char *dir, const char *rel, ckp_reader **out, char *err,
                       size_t errCapacity);
/* Where the packed bytes of a file come from when they are not a local
 * file (DESIGN §2): "these byte ranges of this file, from this version of
 * it".  An object in S3-compatible storage is one (fs/s3/s3_source.h).  The
 * reader asks for exactly the bytes it needs (header, TOC, chunk indexes,
 * plane ranges of chunks); everything it reads is checked as for a file. */
typedef struct ckp_source ckp_source;
struct ckp_source {
    /* Read exactly len bytes at off into dst; thread-safe.  @return 0, or an
     * errno value: EIO (cannot be read now), ESTALE (the file is no longer
     * the version the source was bound to: none of its bytes may be mixed
     * with earlier ones), ENOMEM. */
    int (*pread)(ckp_source *s, void *dst, size_t len, uint64_t off);
    /* Free the source (ckp_close, or a failed ckp_open_source, calls it). */
    void (*close)(ckp_source *s);
    /* Optional (NULL: none): bytes [off, off+len) it gave failed a check
     * (a chunk's hash): whatever it kept of them (a disk cache) must not be
     * given again; the next pread of them asks the origin.  ckp_read_chunk
     * calls it and reads the chunk once more; thread-safe. */
    void (*distrust)(ckp_source *s, uint64_t off, uint64_t len);
    uint64_t size;                 /* bytes of the packed file */
};

/* ckp_open of the packed file that src reads (named name in messages); the
 * reader owns src from here, also on failure.  No descriptor: ckp_fd is -1,
 * the page cache hints do nothing, CKP_OPEN_MMAP does not apply.  Reads
 * are few (each may be a round trip): first the file's first
 * min(size, CKP_SOURCE_PREFIX) bytes in one read (header; TOC, indexes of
 * a small file), then the TOC, then the chunk indexes, those lying close
 * together in the file in one read each (container_index.c). */
#define CKP_SOURCE_PREFIX (64u << 10)
ckp_status ckp_open_source(ckp_source *src, const char *name, ckp_reader **out, char *err, size_t errCapacity);
/* r's source, or NULL for a reader of a local file. */
ckp_source *ckp_get_source(const ckp_reader *r);
/* Bytes [off, off+len) of r's packed file, unchecked (the O_DIRECT or
 * network windows of the mount read planes ahead with it; decoding checks
 * them).  @return CKP_OK, CKP_ERR_IO (errno kept), CKP_ERR_NOMEM. */
ckp_status ckp_read_packed(const ckp_reader *r, void *buf, size_t len, uint64_t off);

/* 1 if reads of r go through a mapping (ckp_open_ex with CKP_OPEN_MMAP). */
int ckp_is_mapped(const ckp_reader *r);
/* Hint that chunks c0..c1-1 of extent e will be read soon: start reading
 * their plane bytes from disk (readahead; no effect on correctness). */
void ckp_willneed(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1);
/* Drop the page cache of the plane bytes of chunks c0..c1-1 of extent e
 * (after they were decoded): every page that lies wholly in bytes only those
 * chunks read, none that chunk c0-1 or c1 also reads (a decoder of those
 * would read it from disk again).  A reader streaming a file larger than
 * memory that drops each run of decoded chunks then leaves only its decoded
 * bytes cached.  No effect on correctness. */
void ckp_dontneed(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1);

const ckp_info *ckp_get_info(const ckp_reader *r);
const ckp_extent *ckp_get_extent(const ckp_reader *r, uint32_t i);
int ckp_fd(const ckp_reader *r);            /* for loaders that read planes themselves; -1: a source */
const char *ckp_file_name(const ckp_reader *r); /* the path it was opened with */

/* Find the extent and chunk holding original byte off (< original_size). */
ckp_status ckp_locate(const ckp_reader *r, uint64_t off, uint32_t *extent, uint64_t *chunk);

/* Length in bytes of chunk c of extent e. */
uint64_t ckp_chunk_len(const ckp_extent *x, uint64_t c);

/* ---- where a chunk's bytes lie (format.md §5) --------------------------
 * The one place that turns chunks into plane byte ranges: the reader, the
 * writer, the GPU loader and the tests all ask here.  Ranges are relative to
 * the start of each plane and are not clamped to the stored plane sizes: a
 * caller checks end[p] <= plane_size[p] (damaged indexes can point past). */
typedef struct {
    uint64_t off[3], end[3]; /* bytes [off[p], end[p]) of plane p; RAW and ZSTD
                              * use plane 0 only (the others are empty) */
    uint64_t w0, w1;         /* K15/BS: the chunks' weights [w0, w1) */
    uint64_t esc0, esc1;     /* K15/BS: their escapes [esc0, esc1) */
    /* Plane 2 starts at escape esc0 & ~7 (groups of 8 escapes start on a
     * byte), so a decoder counting escapes from a byte skips esc0 % 8 of
     * them.  esc_byte/esc_bit say where escape esc0 itself starts (byte of
     * plane 2, bit 0..7 in it; BS: bit 0), for decoders that start there. */
    uint64_t esc_byte;
    uint32_t esc_bit;
} ckp_span;

/* Bytes of weights [w0, w1) and escapes [esc0, esc1) of a K15/BS tensor
 * (enc); w0 must be a multiple of 8 (chunk starts are). */
void ckp_bf16_span(uint32_t enc, uint64_t w0, uint64_t w1, uint64_t esc0, uint64_t esc1, ckp_span *out);
/* Bytes of each plane that chunks c0..c1-1 of x need (c0 < c1 <= n_chunks). */
void ckp_chunk_span(const ckp_extent *x, uint64_t c0, uint64_t c1, ckp_span *out);

/* Per-thread scratch memory for decoding (compressed input, planes).
 * Not shared between threads. */
typedef struct ckp_scratch ckp_scratch;
ckp_scratch *ckp_scratch_new(void);
void ckp_scratch_free(ckp_scratch *s);

/* Decode chunk c of extent e into dst (capacity >= ckp_chunk_len) and check
 * its hash.  @return CKP_ERR_CHUNK if it is damaged; dst is then garbage and
 * must not be returned to anyone. */
ckp_status ckp_read_chunk(const ckp_reader *r, uint32_t e, uint64_t c, void *dst, ckp_scratch *s);

/* Chunks c..c+n-1 of extent e into dst (capacity >= the sum of their
 * lengths), one after another, each checked as by ckp_read_chunk; an
 * ARCHIVE extent's are decoded up to 4 at a time, interleaved, which one
 * core does faster than one by one.  @return the status of the first chunk
 * that failed (*bad, when bad is not NULL: its index), CKP_OK if none did;
 * the bytes of the chunks before it are good, the rest garbage. */
ckp_status ckp_read_chunks(const ckp_reader *r, uint32_t e, uint64_t c, uint64_t n, void *dst, ckp_scratch *s,
                           uint64_t *bad);

/* The most chunks one ckp_read_chunks_to call takes. */
#define CKP_RUN_MAX 4u

/* Chunks c..c+n-1 (n <= CKP_RUN_MAX) of extent e, chunk i into dst[i]
 * (capacity >= its ckp_chunk_len), each checked as by ckp_read_chunk and
 * given a status of its own in st[i]: a damaged chunk leaves the others'
 * bytes and statuses alone (dst[i] of a chunk that failed is garbage).  An
 * ARCHIVE extent's chunks are decoded interleaved, as by ckp_read_chunks.
 * @return CKP_OK if every chunk is good, else the first failure's status
 * (CKP_ERR_ARG: bad arguments, st untouched). */
ckp_status ckp_read_chunks_to(const ckp_reader *r, uint32_t e, uint64_t c, uint64_t n, void *const dst[],
                              ckp_status st[], ckp_scratch *s);

/* Plane bytes of one extent held by the caller (read with O_DIRECT, say):
 * bytes [off[p], off[p] + len[p]) of plane p (offsets within the plane) at
 * base[p]. */
typedef struct {
    const uint8_t *base[3];
    uint64_t off[3], len[3];
} ckp_planes;

/* The bytes of each plane [lo[p], hi[p]) (offsets within the plane, clamped
 * to it; empty when lo == hi) that decoding chunks c0..c1-1 of extent e
 * reads: what ckp_planes must hold for ckp_read_chunk_from.  All zero for
 * chunks outside the extent. */
void ckp_chunk_need(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1, uint64_t lo[3], uint64_t hi[3]);

/* The end of the run of chunks from c0 (before c1, clamped to the extent)
 * whose input is within the format's bounds (§9.1): the first chunk that
 * decoding refuses before reading it (R46: more escapes than weights; R47: a
 * zstd frame longer than zstd's bound of its length), else c1.  So the
 * plane bytes ckp_chunk_need names for chunks c0..end-1 are at most about
 * 1.25x (K15/BSPLIT) or bound(n) of their original bytes: what a caller
 * reading them ahead (O_DIRECT windows) may load.  c0 when e is not an
 * extent of r. */
uint64_t ckp_bounded_run(const ckp_reader *r, uint32_t e, uint64_t c0, uint64_t c1);

/* ckp_read_chunk taking the plane bytes from pl instead of the file (the
 * same checks: the chunk's hash, R46/R47).  @return CKP_ERR_ARG if pl does
 * not hold every byte the chunk reads (ckp_chunk_need). */
ckp_status ckp_read_chunk_from(const ckp_reader *r, uint32_t e, uint64_t c, const ckp_planes *pl, void *dst,
                               ckp_scratch *s);

/* Read original bytes [off, off+len) into buf, decoding only the chunks they
 * touch.  *got = bytes read (short only at end of file).  Fails whole if any
 * chunk touched is damaged. */
ckp_status ckp_pread(const ckp_reader *r, void *buf, size_t len, uint64_t off, size_t *got,
                     ckp_scratch *s);

/* 1 if rel is a safe relative path: well-formed UTF-8, not empty, not
 * absolute, at most CKP_MAX_PATH bytes, no empty, "." or ".." component, no
 * component over CKP_MAX_COMPONENT bytes, no trailing slash (NUL cannot occur in a
 * C string). */
int ckp_path_ok(const char *rel);
/* NULL if rel is a safe relative path, else what is wrong with it ("is
 * absolute", "has a \"..\" component", ...). */
const char *ckp_path_problem(const char *rel);
/* ckp_path_problem for the path of a file, which a packed directory holds
 * as path + CKP_SUFFIX: also its last component at most CKP_MAX_COMPONENT -
 * 5 (250) bytes. */
const char *ckp_file_path_problem(const char *rel);

/* ---- writer ------------------------------------------------------------- */

typedef struct ckp_writer ckp_writer;

typedef struct {
    const char *path;      /* relative path recorded in the TOC */
    ckp_kind kind;
    uint32_t mode;
    int64_t mtime_ns;
    int zstd_level;        /* for RAW/ZSTD extents; 0 = default (3) */
    int jobs;              /* threads for BF16 encoding; <= 1 = none */
} ckp_writer_opts;

/* Start writing a packed file on fd (positioned anywhere; the writer uses
 * pwrite from offset 0 and never reads fd). */
ckp_status ckp_writer_new(int fd, const ckp_writer_opts *o, ckp_writer **out);
/* Append an extent holding src[0..size): RAW (enc = CKC_ENC_RAW), zstd-or-raw
 * (enc = CKC_ENC_ZSTD: zstd only if it saves >= 3%), or BF16 weights
 * (CKC_ENC_K15 / CKC_ENC_BSPLIT / CKC_ENC_ARCHIVE; size must be even).  Extents must be added in
 * original order.  name/dtype are recorded for diagnostics. */
ckp_status ckp_writer_add(ckp_writer *w, uint32_t enc, const void *src, uint64_t size,
                          const char *name, uint32_t dtype);
/* ckp_writer_add with the tensor's last dimension (n_cols; 0 if unknown or
 * 1-D), which CKC_ENC_ARCHIVE's column and row contexts use.  An ARCHIVE
 * extent makes the file format 1.1; a file without one is written as 1.0. */
ckp_status ckp_writer_add_shaped(ckp_writer *w, uint32_t enc, const void *src, uint64_t size,
                                 const char *name, uint32_t dtype, uint64_t n_cols);
/* Write the TOC and header.  sha256 is the whole source's digest. */
ckp_status ckp_writer_finish(ckp_writer *w, const uint8_t sha256[32]);
/* Free; after a failed or unfinished write the file content is undefined. */
void ckp_writer_free(ckp_writer *w);
/* Text of the writer's last error. */
const char *ckp_writer_error(const ckp_writer *w);

#ifdef __cplusplus
}
#endif
#endif /* CKP_CONTAINER_H */
