/*
 * fuzz_util.h — pieces shared by the fuzz targets (tests/fuzz/fuzz_*.c), the
 * seed generator and the golden-error replay (tests/hardening/golden_replay.c),
 * so that a replayed input takes exactly the path the fuzzer took.
 *
 *  - ckz_fixup_ckpt: a mutated packed file almost never passes the header,
 *    TOC and chunk-index checksums, so the container target also opens a copy
 *    whose checksums (and file_size field) are recomputed.  That lets the
 *    fuzzer reach the TOC, extent, index and plane checks behind them.
 *  - ckz_memfile: the input as a file the reader can open by name (a memfd
 *    reached through /proc/self/fd), no disk I/O.
 *  - ckz_decode_case: the layout of the chunk-decoder target's input.
 */
#ifndef CKZ_FUZZ_UTIL_H
#define CKZ_FUZZ_UTIL_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckc.h"
#include "container_internal.h"
#include "util.h"

/* Recompute, where the fields allow it, every chunk-index hash, the TOC hash,
 * file_size and the header hash of the packed file in buf (modified in place). */
static inline void ckz_fixup_ckpt(uint8_t *buf, size_t size)
{
    if (size < CKP_HEADER_SIZE)
        return;
    cku_put64(buf + H_FILE_SIZE, size);
    uint64_t toc_off = cku_le64(buf + H_TOC_OFF), toc_size = cku_le64(buf + H_TOC_SIZE);
    if (toc_off >= CKP_HEADER_SIZE && toc_off <= size && toc_size >= CKP_TOC_HEADER_SIZE &&
        toc_size <= size - toc_off) {
        uint8_t *t = buf + toc_off;
        uint64_t n = cku_le32(t + T_NEXT);
        for (uint64_t i = 0; i < n && CKP_TOC_HEADER_SIZE + (i + 1) * CKP_EXTENT_SIZE <= toc_size; i++) {
            uint8_t *rec = t + CKP_TOC_HEADER_SIZE + i * CKP_EXTENT_SIZE;
            uint64_t ioff = cku_le64(rec + X_INDEX_OFF), nch = cku_le64(rec + X_NCHUNKS);
            if (ioff <= size && nch <= (size - ioff) / CKP_INDEX_ENTRY)
                cku_put64(rec + X_INDEX_HASH, ckc_hash64(buf + ioff, nch * CKP_INDEX_ENTRY));
        }
        cku_put64(buf + H_TOC_HASH, ckc_hash64(t, toc_size));
    }
    cku_put64(buf + H_HASH, ckc_hash64(buf, H_HASH));
}

/* A memfd holding data; *path names it for open(2).  @return fd or -1. */
static inline int ckz_memfile(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("ckz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* Input of fuzz_decode: a 64-byte header, then the three planes back to back.
 *   0  u8   flags: bit 0 K15 (else byte-split); bit 1 try the AVX-512 path too
 *   1  u8   unused
 *   2  u16  n_weights (0..65535)
 *   4  u32  first (rounded down to a multiple of 8, taken mod 2^17)
 *   8  u32  esc_first
 *   12 u32  esc_count
 *   16 u16  codes_size, 18 u16 low_size, 20 u16 esc_size (clamped to what follows)
 *   22 u16  unused
 *   24 32B  codebook (16 x u16)
 *   56 8B   unused
 * Each plane is copied into a buffer of exactly its size, so any read past it
 * is an AddressSanitizer error. */
#define CKZ_DECODE_HDR 64u
typedef struct {
    uint32_t enc;
    int try_vector;
    size_t n_weights;
    uint64_t first, esc_first, esc_count;
    ckc_codebook cb;
    uint8_t *plane[3];
    uint64_t size[3];
} ckz_decode_case;

static inline int ckz_decode_parse(const uint8_t *d, size_t n, ckz_decode_case *c)
{
    memset(c, 0, sizeof *c);
    if (n < CKZ_DECODE_HDR)
        return -1;
    c->enc = (d[0] & 1) ? CKC_ENC_K15 : CKC_ENC_BSPLIT;
    c->try_vector = (d[0] >> 1) & 1;
    c->n_weights = cku_le16(d + 2);
    c->first = (cku_le32(d + 4) % (1u << 17)) / 8 * 8;
    c->esc_first = cku_le32(d + 8);
    c->esc_count = cku_le32(d + 12);
    for (int k = 0; k < 16; k++)
        c->cb.sym[k] = cku_le16(d + 24 + 2 * k);
    const uint8_t *p = d + CKZ_DECODE_HDR;
    size_t left = n - CKZ_DECODE_HDR;
    for (int k = 0; k < 3; k++) {
        uint64_t want = cku_le16(d + 16 + 2 * k);
        c->size[k] = want < left ? want : left;
        c->plane[k] = malloc(c->size[k] ? c->size[k] : 1);
        if (!c->plane[k])
            return -1;
        memcpy(c->plane[k], p, c->size[k]);
        p += c->size[k];
        left -= c->size[k];
    }
    return 0;
}

static inline void ckz_decode_free(ckz_decode_case *c)
{
    for (int k = 0; k < 3; k++)
        free(c->plane[k]);
}

#endif
