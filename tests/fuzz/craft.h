/*
 * craft.h — building packed files by hand from docs/format.md, for tests and
 * fuzz targets that need what the real writer never produces (a 16 MiB
 * chunk, a TOC naming another file) yet must pass every checksum.
 *
 *  - ckz_craft_extent: a whole .ckpt of one RAW or ZSTD extent from its
 *    plane bytes and chunk index (frames longer than zstd's bound, a few
 *    bytes of frames claiming gigabytes); ckz_craft_raw: data[0..size) as one
 *    RAW extent of any chunk size (1..16 MiB), its chunk hashes computed.
 *    The path, kind and SHA-256 given are recorded in the TOC; every hash of
 *    the metadata (index, TOC, header) is computed.
 *  - ckz_fixup_ckpt (fuzz_util.h) recomputes the hashes after a mutation.
 */
#ifndef CKZ_CRAFT_H
#define CKZ_CRAFT_H

#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include "container.h"

/* A whole .ckpt of one extent (none when origSize is 0) of encoding enc
 * (RAW or ZSTD) holding origSize original bytes in chunks of chunk bytes:
 * plane 0 is payload[0..payloadSize), the chunk index ix (n_chunks entries:
 * datum, then the hash of the chunk's decoded bytes), recorded as path of
 * kind with sha256 and mode.  Every hash of the metadata (index, TOC,
 * header) is computed; the index entries are the caller's.
 * @return the buffer (caller frees; *outSize its size) or NULL when out of
 * memory or chunk is 0. */
static inline uint8_t *ckz_craft_extent(uint32_t enc, const uint8_t *payload, uint64_t payloadSize,
                                        uint64_t origSize, uint32_t chunk, const ckp_chunk_entry *ix,
                                        const char *path, ckp_kind kind, const uint8_t sha256[32], uint32_t mode,
                                        size_t *outSize)
{
    if (chunk == 0)
        return NULL;
    uint32_t n_ext = origSize ? 1 : 0;
    uint64_t n_chunks = origSize ? (origSize + chunk - 1) / chunk : 0;
    uint64_t index_off = (64 + payloadSize + 7) / 8 * 8;
    uint64_t toc_off = (index_off + 16 * n_chunks + 7) / 8 * 8;
    size_t path_len = strlen(path);
    uint64_t toc_size = CKP_TOC_HEADER_SIZE + (uint64_t)n_ext * CKP_EXTENT_SIZE + path_len;
    size_t total = (size_t)(toc_off + toc_size);
    uint8_t *b = calloc(1, total);
    if (!b)
        return NULL;
    memcpy(b, CKP_MAGIC, 8);
    cku_put16(b + H_MAJOR, 1);
    cku_put64(b + H_ORIG, origSize);
    cku_put64(b + H_TOC_OFF, toc_off);
    cku_put64(b + H_TOC_SIZE, toc_size);
    if (payloadSize)
        memcpy(b + 64, payload, payloadSize);
    for (uint64_t c = 0; c < n_chunks; c++) {
        cku_put64(b + index_off + 16 * c, ix[c].datum);
        cku_put64(b + index_off + 16 * c + 8, ix[c].hash);
    }
    uint8_t *t = b + toc_off;
    memcpy(t + T_MAGIC, "TOC1", 4);
    cku_put32(t + T_NEXT, n_ext);
    cku_put64(t + T_ORIG, origSize);
    memcpy(t + T_SHA, sha256, 32);
    cku_put32(t + T_KIND, kind);
    cku_put32(t + T_MODE, mode);
    cku_put32(t + T_PATH_LEN, (uint32_t)path_len);
    cku_put32(t + T_STRTAB, (uint32_t)path_len);
    if (n_ext) {
        uint8_t *x = t + CKP_TOC_HEADER_SIZE;
        cku_put64(x + X_ORIG_SIZE, origSize);
        cku_put32(x + X_ENC, enc);
        cku_put32(x + X_CHUNK, chunk);
        cku_put64(x + X_NCHUNKS, n_chunks);
        cku_put64(x + X_INDEX_OFF, index_off);
        cku_put64(x + X_P0_OFF, 64);
        cku_put64(x + X_P0_SIZE, payloadSize);
    }
    memcpy(t + CKP_TOC_HEADER_SIZE + (size_t)n_ext * CKP_EXTENT_SIZE, path, path_len);
    ckz_fixup_ckpt(b, total); /* index hash, TOC hash, file size, header hash */
    *outSize = total;
    return b;
}

/* data[0..size) as one RAW extent of any chunk size (1..16 MiB), a blob.
 * @return as ckz_craft_extent. */
static inline uint8_t *ckz_craft_raw(const uint8_t *data, uint64_t size, uint32_t chunk, const char *path,
                                     const uint8_t sha256[32], uint32_t mode, size_t *outSize)
{
    if (chunk == 0)
        return NULL;
    uint64_t n_chunks = (size + chunk - 1) / chunk;
    ckp_chunk_entry *ix = calloc(n_chunks ? n_chunks : 1, sizeof *ix);
    if (!ix)
        return NULL;
    for (uint64_t c = 0; c < n_chunks; c++) {
        uint64_t at = c * chunk, len = size - at < chunk ? size - at : chunk;
        ix[c].hash = ckc_hash64(data + at, len);
    }
    uint8_t *b = ckz_craft_extent(CKC_ENC_RAW, data, size, size, chunk, ix, path, CKP_KIND_BLOB, sha256, mode,
                                  outSize);
    free(ix);
    return b;
}

#endif
