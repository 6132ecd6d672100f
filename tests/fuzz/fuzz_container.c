/*
 * fuzz_container.c — libFuzzer target: the packed-file reader.  The input is
 * a whole .ckpt file; it is opened with ckp_open from a memfd, once as it is
 * and once with its checksums recomputed (ckz_fixup_ckpt), and every chunk of
 * every extent is read with ckp_read_chunk, then the whole file with ckp_pread
 * in uneven pieces.
 *
 * Oracles: no crash, hang or sanitizer report; bounded memory (libFuzzer's
 * -malloc_limit_mb); a chunk returned CKP_OK hashes to its index entry; a
 * rejected open returns no reader and a message naming the file; ckp_pread
 * of a file whose chunks all read returns exactly the bytes they returned.
 */
#include "fuzz_util.h"
#include "container.h"

/* Returns 1 if the file was rejected (at open or in some chunk), 0 if it read whole. */
int ckz_read_ckpt(const uint8_t *data, size_t size, char *why, size_t cap);

int ckz_read_ckpt(const uint8_t *data, size_t size, char *why, size_t cap)
{
    char path[64];
    int fd = ckz_memfile(data, size, path, sizeof path);
    if (fd < 0)
        abort();
    ckp_reader *r = NULL;
    char err[1024] = "";
    ckp_status st = ckp_open(path, &r, err, sizeof err);
    close(fd); /* the reader has its own descriptor */
    if (st != CKP_OK) {
        if (r || !strstr(err, path))
            abort(); /* a rejection names the file and returns nothing */
        snprintf(why, cap, "%s: %s", ckp_status_name(st), err);
        return 1;
    }
    if (ckp_check(r))
        abort(); /* an open reader keeps the invariants of container.h */
    const ckp_info *in = ckp_get_info(r);
    ckp_scratch *s = ckp_scratch_new();
    uint64_t total = in->original_size;
    /* Cap the whole-file buffer: original_size is only bounded by the extents. */
    uint8_t *whole = total <= (64u << 20) ? malloc(total ? total : 1) : NULL;
    uint8_t *buf = NULL;
    int bad = 0;
    for (uint32_t e = 0; e < in->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        for (uint64_t c = 0; c < x->n_chunks && c < 4096; c++) {
            uint64_t len = ckp_chunk_len(x, c);
            free(buf);
            buf = malloc(len + 1);
            /* odd destination on every other chunk: the unaligned path */
            uint8_t *dst = buf + (c & 1);
            ckp_status cs = ckp_read_chunk(r, e, c, dst, s);
            if (cs == CKP_OK) {
                if (ckc_hash64(dst, len) != x->index[c].hash)
                    abort(); /* never wrong bytes */
                if (whole)
                    memcpy(whole + x->orig_offset + c * x->chunk_size, dst, len);
            } else {
                if (!bad)
                    snprintf(why, cap, "extent %u chunk %llu: %s", e, (unsigned long long)c, ckp_status_name(cs));
                bad = 1;
            }
        }
        if (x->n_chunks > 4096)
            bad = bad ? bad : 2; /* not read whole; do not compare below */
    }
    if (whole && !bad) {
        /* ckp_pread in uneven pieces must return the same bytes */
        uint8_t *p = malloc(total + 1);
        uint64_t off = 0, step = 1;
        while (off < total) {
            size_t got = 0;
            if (ckp_pread(r, p, step, off, &got, s) != CKP_OK || got == 0 || got > step ||
                memcmp(p, whole + off, got))
                abort();
            off += got;
            step = step * 3 + 7;
        }
        size_t got = 1;
        if (ckp_pread(r, p, 10, total, &got, s) != CKP_OK || got != 0)
            abort();
        free(p);
    }
    free(buf);
    free(whole);
    ckp_scratch_free(s);
    ckp_close(r);
    return bad == 1;
}

#ifndef CKZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[1200];
    ckz_read_ckpt(data, size, why, sizeof why);
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    ckz_fixup_ckpt(copy, size);
    ckz_read_ckpt(copy, size, why, sizeof why);
    free(copy);
    return 0;
}
#endif
