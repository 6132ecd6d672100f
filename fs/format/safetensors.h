/*
 * safetensors.h — parsing and validating a safetensors header.
 *
 * The file is: u64 little-endian N, N bytes of UTF-8 JSON, then the data
 * buffer.  The JSON maps tensor names to {"dtype", "shape", "data_offsets"},
 * plus an optional "__metadata__" object of string values.  st_parse checks
 * everything the format requires (DESIGN §4 invariant 4) and refuses what the
 * reference reader refuses: N within the file and at most 100 MB; UTF-8
 * JSON text without a byte order mark, control characters or numbers other
 * than plain non-negative integers; one object, then only whitespace; no
 * repeated name or field; known dtype, shape whose product times the dtype
 * size equals end - begin, offsets ordered and inside the buffer, tensors
 * contiguous and non-overlapping and covering the whole buffer.  Tensors are
 * returned in data-offset order.  Messages print names escaped (cku_escape).
 */
#ifndef ST_SAFETENSORS_H
#define ST_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "container.h" /* ckp_status: the format library's one status enum */

#ifdef __cplusplus
extern "C" {
#endif

#define ST_MAX_HEADER (100u * 1000u * 1000u)
#define ST_MAX_DIMS 16

typedef struct {
    char *name;
    uint32_t dtype;        /* format.md §4.3 code */
    uint32_t elem_bits;    /* bits per element (F4: 4, F6: 6, BOOL: 8, ...) */
    uint32_t ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;   /* offsets within the data buffer */
} st_tensor;

typedef struct {
    uint64_t header_size;  /* N */
    uint64_t data_start;   /* 8 + N */
    uint64_t file_size;
    st_tensor *tensors;    /* sorted by begin */
    size_t n_tensors;
} st_header;

/* Parse the header of a file of file_size bytes whose first bytes are in
 * buf[0..bufSize) (bufSize >= min(file_size, 8 + N) is needed; call with the
 * first 8 bytes to learn N via st_header_len).
 * @return CKP_OK with *out set, or with *out NULL and a message in err
 * (without the file name; it names the tensor and the field at fault):
 *   CKP_ERR_SOURCE  the header breaks a rule above: the source file is not a
 *                   safetensors file pack can take;
 *   CKP_ERR_NOMEM;
 *   CKP_ERR_ARG     bufSize holds less than the header (the caller's). */
ckp_status st_parse(const uint8_t *buf, size_t bufSize, uint64_t file_size, st_header **out, char *err,
                    size_t errCapacity);
/* N from the first 8 bytes.  @return CKP_OK, CKP_ERR_SOURCE with a message if
 * the file has fewer than 8 bytes or N is too large for it or over
 * ST_MAX_HEADER, CKP_ERR_ARG if bufSize < 8 (the caller's). */
ckp_status st_header_len(const uint8_t *buf, size_t bufSize, uint64_t file_size, uint64_t *n, char *err,
                         size_t errCapacity);
void st_free(st_header *h);

/* dtype name <-> code; 0 if unknown. */
uint32_t st_dtype_code(const char *name, uint32_t *elem_bits);
const char *st_dtype_name(uint32_t code);

#ifdef __cplusplus
}
#endif
#endif
