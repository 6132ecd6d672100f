/*
 * ckread.h — a packed directory read from host code: its tensors (listed
 * from each safetensors file's header, read decoded by rows) and its other
 * files (config.json, tokenizer files), with no CUDA and no FUSE.  Built as
 * the shared library libckread.so so that Python (ctypes) can use it: the
 * CPU path of the serving integration (gpu/python/ckptfs_gpu_hf.py) decodes
 * each layer's weight through it.
 *
 * Every read decodes through the container reader (container.h) and checks
 * the hashes of the chunks it touches: the caller gets the original bytes or
 * an error (DESIGN invariant 1).  A model is safe to share between threads
 * (reads serialize on one lock around its scratch memory).  The library never
 * prints; errors fill err (if given) with the file and the problem, and the
 * status says its class (out of memory, I/O, a newer format, damage, a bad
 * argument stay apart).
 */
#ifndef CKREAD_H
#define CKREAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pinned status codes: values never change once released (Python's ctypes
 * binding, gpu/python, uses them); new ones go at the end.  Each status of
 * the format library (container.h) lands in exactly one (ckread.c, from_ckp). */
typedef enum {
    CKR_OK = 0,
    CKR_ERR_ARG = 1,      /* bad argument (NULL, row or byte range, capacity) */
    CKR_ERR_IO = 2,       /* reading the manifest or a packed file failed */
    CKR_ERR_FORMAT = 3,   /* not a packed directory, or a header is invalid
                           * (a safetensors header, or a TOC that does not match it) */
    CKR_ERR_CORRUPT = 4,  /* packed data is damaged: the manifest, a packed
                           * file's metadata, or a chunk (hash differs) */
    CKR_ERR_NOMEM = 5,
    CKR_ERR_NOTFOUND = 6, /* no tensor or file of that name */
    CKR_ERR_UNSUPPORTED = 7, /* a format version this reader does not know */
    CKR_ERR_INTERNAL = 8  /* a bug in ckptfs, never bad input */
} ckr_status;

const char *ckr_status_name(ckr_status s);

#define CKR_MAX_DIMS 16

typedef struct {
    const char *name;        /* tensor name (owned by the model) */
    const char *file;        /* relative path of its safetensors file */
    uint32_t dtype;          /* format.md §4.3 code (7 = BF16) */
    uint32_t encoding;       /* ckc_encoding of its (first) extent (RAW for empty tensors) */
    uint32_t ndim;
    uint64_t shape[CKR_MAX_DIMS];
    uint64_t nbytes;         /* bytes in the original file */
    uint64_t packed_bytes;   /* bytes of its extent's planes in the packed file (of every
                              * extent it touches, when it is not one extent) */
} ckr_tensor_info;

typedef struct ckr_model ckr_model;

/* Open the packed directory dir: its ckptfs.manifest and every safetensors
 * file's .ckpt.  On failure *out is NULL and err says why. */
ckr_status ckr_open(const char *dir, ckr_model **out, char *err, size_t errCapacity);
void ckr_close(ckr_model *m);

size_t ckr_count(const ckr_model *m);
/* @return info of tensor i (< count), valid until close; NULL if out of range. */
const ckr_tensor_info *ckr_info(const ckr_model *m, size_t i);
/* The first tensor named name (tensors are listed file by file, files in
 * path order; several files may hold a tensor of one name). */
ckr_status ckr_find(const ckr_model *m, const char *name, size_t *index);

/* The bytes of rows [row_begin, row_end) of a tensor (rows: its first
 * dimension; a 0-d tensor has one row): *first = row_begin * nbytes / rows,
 * *len = row_end * nbytes / rows - *first.  Rows outside the tensor, and
 * rows of a sub-byte dtype (F4, F6) that do not start and end on a byte,
 * are CKR_ERR_ARG with err saying so (all rows always do: the whole
 * tensor).  The one place row ranges become bytes: ckr_read_rows and the
 * CUDA loader's ckg_tensor_upload use it. */
ckr_status ckr_row_range(const ckr_tensor_info *ti, uint64_t row_begin, uint64_t row_end, uint64_t *first,
                         uint64_t *len, char *err, size_t errCapacity);

/* Decode rows [row_begin, row_end) of tensor i into dst: the bytes
 * ckr_row_range gives (refused as it refuses them), which dstCapacity must
 * hold. */
ckr_status ckr_read_rows(ckr_model *m, size_t i, uint64_t row_begin, uint64_t row_end, void *dst,
                         size_t dstCapacity, char *err, size_t errCapacity);

/* For loaders that read planes themselves (the CUDA loader, gpu/): the
 * container reader holding tensor i and the index of its extent there, or
 * UINT32_MAX when no one extent holds exactly its bytes: an empty tensor,
 * or one that a pack splits over several extents or stores in an extent
 * with other bytes (format.md §4 allows both); read such a tensor's bytes
 * from the reader at ckr_tensor_offset.  Valid until close. */
struct ckp_reader;
ckr_status ckr_tensor_source(const ckr_model *m, size_t i, const struct ckp_reader **reader,
                             uint32_t *extent);
/* The offset of tensor i's first byte in its original file. */
ckr_status ckr_tensor_offset(const ckr_model *m, size_t i, uint64_t *offset);

/* Files of the directory (every file of the manifest, sorted by path). */
size_t ckr_file_count(const ckr_model *m);
const char *ckr_file_path(const ckr_model *m, size_t i);   /* NULL if out of range */
uint64_t ckr_file_size(const ckr_model *m, size_t i);      /* original size */
/* Read the whole original file at relative path into dst (dstCapacity >= its
 * size; *size = its size).  CKR_ERR_NOTFOUND if the manifest lacks it. */
ckr_status ckr_file_read(ckr_model *m, const char *path, void *dst, size_t dstCapacity, uint64_t *size,
                         char *err, size_t errCapacity);

#ifdef __cplusplus
}
#endif
#endif /* CKREAD_H */
