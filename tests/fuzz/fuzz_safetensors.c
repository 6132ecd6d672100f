/*
 * fuzz_safetensors.c — libFuzzer target: st_parse / st_header_len on
 * arbitrary bytes.  The input is a whole safetensors file (file_size = input
 * size); a second call passes only the header bytes with a larger claimed
 * file size, the way pack validates a header before mapping the data.
 *
 * Oracles: no crash or sanitizer report; a rejection carries a message and
 * CKP_ERR_SOURCE (or CKP_ERR_NOMEM): buf always holds the header; an
 * accepted header satisfies everything safetensors.h promises (tensors sorted,
 * contiguous, covering the data buffer exactly, shape x dtype = byte span).
 */
#include "fuzz_util.h"
#include "safetensors.h"

static void check_accepted(const st_header *h, uint64_t file_size)
{
    uint64_t pos = 0;
    if (h->data_start != 8 + h->header_size || h->data_start > file_size || h->header_size > ST_MAX_HEADER)
        abort();
    for (size_t i = 0; i < h->n_tensors; i++) {
        const st_tensor *t = &h->tensors[i];
        if (!t->name || !t->dtype || t->begin != pos || t->end < t->begin || t->ndim > ST_MAX_DIMS)
            abort();
        unsigned __int128 bits = t->elem_bits;
        for (uint32_t d = 0; d < t->ndim; d++)
            bits *= t->shape[d];
        if (bits % 8 || bits / 8 != t->end - t->begin)
            abort();
        pos = t->end;
    }
    if (pos != file_size - h->data_start)
        abort();
}

static void one(const uint8_t *buf, size_t size, uint64_t file_size)
{
    st_header *h = NULL;
    char err[512] = "";
    ckp_status st = st_parse(buf, size, file_size, &h, err, sizeof err);
    if (st == CKP_OK) {
        if (!h)
            abort();
        check_accepted(h, file_size);
        st_free(h);
    } else if (h || !err[0] || (st != CKP_ERR_SOURCE && st != CKP_ERR_NOMEM)) {
        abort(); /* a rejection must say why, return nothing, and blame the file (buf holds its header) */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size, size);
    uint64_t n;
    char err[256];
    if (st_header_len(data, size, size, &n, err, sizeof err) == CKP_OK && 8 + n <= size) {
        /* only the header in memory, plus a data buffer that is not there */
        uint8_t *hdr = malloc(8 + n);
        memcpy(hdr, data, 8 + n);
        one(hdr, 8 + n, size + (size & 0xff) * 2);
        free(hdr);
    }
    return 0;
}
