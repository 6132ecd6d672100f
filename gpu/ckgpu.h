/*
 * ckgpu.h — the CUDA loader of ckptfs: packed tensors to device memory, a
 * bit-exact decode kernel, and a fused decode+GEMV that reads the packed
 * planes (≈11.2/16 of the BF16 bytes) instead of BF16 weights.
 *
 * Two layers:
 *   1. Kernels on device planes (ckg_planes): ckg_escape_index, ckg_decode,
 *      ckg_gemv.  They take a stream, check shapes, and return a status; they
 *      never synchronize, print or exit.
 *   2. The loader (ckg_model_*, ckg_tensor_*): opens a packed directory with
 *      the container reader (fs/container.h), lists tensors with dtype, shape
 *      and encoding, and uploads a tensor (or a range of its rows, for tensor
 *      parallelism) through pinned staging buffers, double-buffered pread +
 *      cudaMemcpyAsync.  K15/BSPLIT tensors stay packed on the device; other
 *      tensors are uploaded decoded.
 *
 * Device layout of a packed tensor (docs/format.md §5): the three planes of a
 * run of whole chunks, copied as stored, so that weight 0 of the run is at bit
 * 0 of the code and low planes; escape 0 of the run is at bit esc_bit0 of the
 * escape plane.  Kernels find escapes through an escape index: the escape
 * rank of every CKG_ESC_BLOCK-th weight, built on the device from the chunk
 * index's escape prefixes (a block scan of code-15 counts inside each chunk)
 * and checked against them (a chunk whose code-15 count differs from its
 * escape count is corrupt, §8).  The index costs 32 bits per 1024 weights.
 *
 * Conventions: sizes in bytes unless named *_count / n_weights; "rows" is the
 * first dimension of a tensor, a row is everything else (PyTorch Linear
 * weight [out_features, in_features] is rows × cols, row-major).
 * A stream is a cudaStream_t (NULL: the legacy default stream); this header
 * does not include CUDA headers so that C code and ctypes can use it.
 */
#ifndef CKGPU_H
#define CKGPU_H

#include <stddef.h>
#include <stdint.h>

#include "ckc.h"
#include "ckread.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;
typedef struct CUstream_st *ckg_stream; /* == cudaStream_t */

/* Pinned status codes: values never change once released. */
typedef enum {
    CKG_OK = 0,
    CKG_ERR_ARG = 1,         /* bad argument (NULL, range, batch) */
    CKG_ERR_SHAPE = 2,       /* shapes or sizes do not fit together */
    CKG_ERR_UNSUPPORTED = 3, /* valid input this path does not handle (see the function) */
    CKG_ERR_CORRUPT = 4,     /* packed data inconsistent (escape counts, plane sizes) */
    CKG_ERR_IO = 5,          /* reading the packed file failed */
    CKG_ERR_NOMEM = 6,       /* host allocation failed */
    CKG_ERR_CUDA = 7,        /* a CUDA call failed (device memory, launch) */
    CKG_ERR_NODEVICE = 8,    /* no CUDA device */
    CKG_ERR_NOTFOUND = 9,    /* no tensor of that name */
    CKG_ERR_FORMAT = 10,     /* the packed directory or a header is invalid */
    CKG_ERR_INTERNAL = 11    /* a bug in ckptfs, never bad input */
} ckg_status;

/* @return a static name for a status ("ok", "shape mismatch", ...). */
const char *ckg_status_name(ckg_status s);

/* Number of CUDA devices, 0 when there is none or the driver is missing. */
int ckg_device_count(void);

/* ---- kernels on device planes ------------------------------------------ */

#define CKG_ESC_BLOCK 1024u     /* weights per escape-index entry */
#define CKG_MAX_BATCH 8

/* A packed K15/BSPLIT weight run on the device (or, for the CPU references in
 * ckg_ref.h, in host memory).  Plane buffers must be readable 32 bytes past
 * their exact size (the loader allocates and zeroes that padding). */
typedef struct {
    uint32_t encoding;        /* CKC_ENC_K15 or CKC_ENC_BSPLIT */
    ckc_codebook codebook;
    uint64_t n_weights;       /* weights in the run */
    const uint8_t *codes;     /* 4 bits per weight */
    const uint8_t *low;       /* K15: 7 bits per weight; BSPLIT: 1 byte */
    const uint8_t *esc;       /* K15: 9 bits per escape from bit esc_bit0; BSPLIT: 1 byte */
    uint32_t esc_bit0;        /* 0..7 for K15, 0 for BSPLIT */
    uint64_t n_escapes;       /* escapes in the run (< 2^32) */
    const uint32_t *esc_index; /* ceil(n_weights / CKG_ESC_BLOCK) ranks, or NULL before it is built */
    /* Escape patch list of one matrix view (ckg_escape_patches), or NULL:
     * the fused GEMV reads it instead of the escape plane.  It describes
     * the patch_rows x patch_cols matrix whose weight (r, c) is weight
     * patch_elem_off + r*patch_cols + c of the run; a GEMV on rows of it
     * (same cols, elem_off on a row boundary) uses it too. */
    const uint32_t *patch_row; /* patch_rows + 1 escape ranks: row r's escapes are [patch_row[r], patch_row[r+1]) */
    const uint32_t *patch;     /* n_escapes entries, by rank: column | BF16 weight << 16 */
    uint64_t patch_elem_off, patch_rows, patch_cols;
} ckg_planes;

/* Build p->esc_index into index_out (device, ceil(n/1024) u32) from the
 * chunk index of the run: chunk c (0..n_chunks) covers weights
 * [c*chunk_weights, ...) and prefix[c] (device, n_chunks + 1 u32, prefix[0]
 * = 0, prefix[n_chunks] = n_escapes) is its escape rank.  chunk_weights must
 * be a multiple of CKG_ESC_BLOCK (the writer uses 65536) else
 * CKG_ERR_UNSUPPORTED.  A chunk whose code-15 count differs from
 * prefix[c+1] - prefix[c] increments *err_count (device u32, zeroed by the
 * caller); read it after the stream completes. */
ckg_status ckg_escape_index(const ckg_planes *p, uint64_t chunk_weights, const uint32_t *prefix,
                            uint64_t n_chunks, uint32_t *index_out, uint32_t *err_count,
                            ckg_stream stream);

/* Decode weights [first, first + count) of the run into out (device,
 * count BF16 words), bit-exact.  Needs p->esc_index. */
ckg_status ckg_decode(const ckg_planes *p, uint64_t first, uint64_t count, uint16_t *out,
                      ckg_stream stream);

/* Build the escape patch list of the rows x cols matrix at elem_off (see
 * ckg_planes.patch_row): row_out (device, rows + 1 u32) and entries_out
 * (device, p->n_escapes u32; only the entries of those rows are written).
 * The caller then points p->patch_row/patch at them and sets patch_elem_off,
 * patch_rows, patch_cols.  Needs p->esc_index; cols % 32 == 0,
 * elem_off % 32 == 0 and cols <= 65536, else CKG_ERR_UNSUPPORTED.  Costs 32
 * bits per escape of device memory (0.5 bit per weight at 1.6% escapes). */
ckg_status ckg_escape_patches(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                              uint32_t *row_out, uint32_t *entries_out, ckg_stream stream);

typedef enum { CKG_OUT_F32 = 0, CKG_OUT_BF16 = 1 } ckg_out_type;

/* y[b][r] = sum_c W[r][c] * x[b][c] for b < batch (1..CKG_MAX_BATCH), with
 * W the rows × cols BF16 matrix whose weight (r, c) is weight
 * elem_off + r*cols + c of the run.  x: device BF16 [batch][cols]; y: device
 * [batch][rows], FP32 or BF16 (round to nearest even).  Products are summed
 * in FP32 (tensor cores or FMA); an escaped weight contributes exactly its
 * own product.  The fused kernel needs cols % 32 == 0, elem_off % 32 == 0
 * (tensor-parallel slices: any row range of a matrix whose columns are a
 * multiple of 32), cols <= 65536, 16-byte aligned planes and x, and (when the run has
 * escapes) a patch list covering these rows in 16-byte aligned buffers (it
 * copies them in 16-byte pieces, so the piece holding the last entry must be
 * readable: cudaMalloc's buffers are); other calls use a slower
 * warp-per-row kernel.  Needs p->esc_index.  The fused kernel's sums are
 * added in a fixed order: the same inputs give the same bits, whatever the
 * device's SM count.  On sm_90 the fused kernel is launched with
 * programmatic dependent launch: it starts reading p's code and low planes
 * before the kernel before it in the stream has finished (x, the patch list
 * and y wait for it), so those two planes must not be written by the
 * stream's previous kernel (uploads write them by copies; CKG_NO_PDL=1 in
 * the environment turns this off). */
ckg_status ckg_gemv(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                    const uint16_t *x, int batch, void *y, ckg_out_type y_type, ckg_stream stream);

/* Which kernel ckg_gemv takes for these arguments, and why not the fused
 * one (a matrix whose columns are not a multiple of 32, or whose first
 * weight is not, runs on the generic kernel). */
typedef enum {
    CKG_GEMV_FUSED = 0,
    CKG_GEMV_GENERIC_COLS = 1,       /* cols % 32 != 0 or cols > 65536 */
    CKG_GEMV_GENERIC_OFFSET = 2,     /* elem_off % 32 != 0 */
    CKG_GEMV_GENERIC_NO_PATCHES = 3, /* escapes but no patch list covering the rows */
    CKG_GEMV_GENERIC_ALIGN = 4,      /* planes, x or patch list not 16-byte aligned */
} ckg_gemv_path;
ckg_gemv_path ckg_gemv_path_of(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                               const uint16_t *x);

/* Same, forcing the slow generic kernel (for tests and benchmarks). */
ckg_status ckg_gemv_generic(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                            const uint16_t *x, int batch, void *y, ckg_out_type y_type,
                            ckg_stream stream);

/* For tests: the fused GEMV runs on at most max_blocks blocks of `warps`
 * warps (4 or 8; 0, 0: the defaults, a block per SM and 8 warps where the
 * shared memory allows).  The output bits must not change with either.  Not
 * thread-safe: call it before the GEMVs it is meant for. */
void ckg_gemv_test_launch(unsigned max_blocks, int warps);

/* ---- loader ---------------------------------------------------------------- */

#define CKG_MAX_DIMS 16

/* A tensor's name, file, dtype, encoding, shape and sizes: the format
 * library's tensor table entry (fs/format/ckread.h: name, file, dtype (format.md
 * §4.3 code, 7 = BF16), encoding (RAW for empty tensors), ndim, shape,
 * nbytes in the original file, packed_bytes of its planes). */
typedef ckr_tensor_info ckg_tensor_info;

typedef struct ckg_model ckg_model;

/* Open the packed directory dir (its ckptfs.manifest and every
 * safetensors file's .ckpt).  Other files are ignored.  Allocates nothing on
 * the device.  On failure *out is NULL and err (if given) says why. */
ckg_status ckg_model_open(const char *dir, ckg_model **out, char *err, size_t errCapacity);
void ckg_model_close(ckg_model *m);

size_t ckg_model_count(const ckg_model *m);
/* @return info of tensor i (< count), valid until close; NULL if out of range. */
const ckg_tensor_info *ckg_model_info(const ckg_model *m, size_t i);
ckg_status ckg_model_find(const ckg_model *m, const char *name, size_t *index);

/* Upload flags. */
#define CKG_UPLOAD_NO_VERIFY 1u   /* skip the host check of packed chunks' hashes */
#define CKG_UPLOAD_DECODED 2u     /* upload BF16 tensors decoded (on the host) */

typedef struct ckg_tensor ckg_tensor;

/* Upload rows [row_begin, row_end) of tensor i to the current CUDA device
 * (row_end = UINT64_MAX: to the end): the bytes ckr_read_rows would give
 * (ckr_row_range; rows of F4/F6 that do not start and end on a byte are
 * CKG_ERR_ARG, all rows always work).  A K15/BSPLIT tensor is uploaded as the
 * planes of the chunks covering those rows; unless CKG_UPLOAD_NO_VERIFY, each
 * of those chunks is also decoded on the host and checked against its hash
 * while the copies run (DESIGN invariant 1: right bytes or an error).  Other
 * tensors, and BF16 tensors whose chunks are not a multiple of CKG_ESC_BLOCK
 * weights, are decoded on the host (hash-checked) and uploaded as raw bytes.
 * Returns when the data is on the device.  Not thread-safe per model. */
ckg_status ckg_tensor_upload(ckg_model *m, size_t i, uint64_t row_begin, uint64_t row_end,
                             unsigned flags, ckg_stream stream, ckg_tensor **out);
void ckg_tensor_free(ckg_tensor *t);

/* Is the tensor packed on the device (K15/BSPLIT)?  Then ckg_tensor_planes
 * gives its planes; else ckg_tensor_data gives its raw bytes. */
int ckg_tensor_is_packed(const ckg_tensor *t);
const ckg_planes *ckg_tensor_planes(const ckg_tensor *t);
void *ckg_tensor_data(const ckg_tensor *t);      /* raw tensors: device bytes */
uint64_t ckg_tensor_nbytes(const ckg_tensor *t); /* decoded bytes of the uploaded rows */
uint64_t ckg_tensor_device_bytes(const ckg_tensor *t); /* device memory held */
uint64_t ckg_tensor_rows(const ckg_tensor *t);   /* rows uploaded */
/* Elements per row: the product of the dimensions after the first (1 for a
 * 0-d or 1-d tensor, 0 for one of no rows), not bytes: for F4/F6 a row need
 * not be a whole number of bytes (an F4 [2, 3] tensor: 3 elements, 12 bits
 * a row), so rows [a, b) are bytes a * N / rows .. b * N / rows of the
 * tensor's N (ckg_tensor_info.nbytes), and an upload of rows that do not
 * start and end on a byte is CKG_ERR_ARG (ckr_row_range).  A packed tensor: the 16-bit weights a row
 * of its planes (= elements for BF16), the GEMV's cols. */
uint64_t ckg_tensor_cols(const ckg_tensor *t);
uint64_t ckg_tensor_elem_off(const ckg_tensor *t); /* weight of row 0 in the planes */

/* Decode the uploaded rows into out (device, ckg_tensor_nbytes bytes); for
 * raw tensors a device-to-device copy. */
ckg_status ckg_tensor_decode(const ckg_tensor *t, void *out, size_t outCapacity, ckg_stream stream);
/* GEMV on an uploaded packed tensor: y = W x over its uploaded rows. */
ckg_status ckg_tensor_gemv(const ckg_tensor *t, const uint16_t *x, int batch, void *y,
                           ckg_out_type y_type, ckg_stream stream);
/* ckg_gemv_path_of for a GEMV on the uploaded tensor with this x; a raw
 * (not packed) tensor or NULL: CKG_GEMV_GENERIC_ALIGN (no GEMV at all). */
ckg_gemv_path ckg_tensor_gemv_path(const ckg_tensor *t, const uint16_t *x);

#ifdef __cplusplus
}
#endif
#endif /* CKGPU_H */
