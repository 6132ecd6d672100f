/*
 * ckpt_chunks.c — test helper: read every chunk of a packed file with
 * ckp_read_chunk and say which fail; with the original file, compare every
 * chunk that reads OK with the original bytes.
 *   ckpt_chunks FILE.ckpt [ORIGINAL]
 * Prints "bad EXTENT CHUNK NAME" per failed chunk, then "chunks N bad M".
 * Exit: 0 all chunks good, 1 some chunks refused, 2 open refused,
 *       3 a chunk returned CKP_OK with bytes other than the original's.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "container.h"
#include "util.h"

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: ckpt_chunks FILE.ckpt [ORIGINAL]\n");
        return 64;
    }
    char err[1024];
    ckp_reader *r;
    ckp_status st = ckp_open(argv[1], &r, err, sizeof err);
    if (st != CKP_OK) {
        printf("open refused: %s: %s\n", ckp_status_name(st), err);
        return 2;
    }
    int ofd = argc == 3 ? open(argv[2], O_RDONLY) : -1;
    if (argc == 3 && ofd < 0) {
        perror(argv[2]);
        return 64;
    }
    const ckp_info *in = ckp_get_info(r);
    ckp_scratch *s = ckp_scratch_new();
    uint8_t *buf = malloc(CKP_MAX_CHUNK), *orig = malloc(CKP_MAX_CHUNK);
    uint64_t n = 0, bad = 0, wrong = 0;
    off_t osize = ofd >= 0 ? lseek(ofd, 0, SEEK_END) : 0;
    if (ofd >= 0 && (uint64_t)osize != in->original_size) {
        printf("WRONG size %" PRIu64 ", original has %lld\n", in->original_size, (long long)osize);
        wrong++;
    }
    for (uint32_t e = 0; e < in->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        for (uint64_t c = 0; c < x->n_chunks; c++, n++) {
            uint64_t len = ckp_chunk_len(x, c), at = x->orig_offset + c * x->chunk_size;
            if (ckp_read_chunk(r, e, c, buf, s) != CKP_OK) {
                printf("bad %" PRIu32 " %" PRIu64 " %s\n", e, c, *x->name ? x->name : "-");
                bad++;
            } else if (ofd >= 0 && (cku_pread_full(ofd, orig, len, at) || memcmp(buf, orig, len))) {
                printf("WRONG %" PRIu32 " %" PRIu64 " %s\n", e, c, *x->name ? x->name : "-");
                wrong++;
            }
        }
    }
    printf("chunks %" PRIu64 " bad %" PRIu64 " wrong %" PRIu64 "\n", n, bad, wrong);
    free(buf);
    free(orig);
    ckp_scratch_free(s);
    ckp_close(r);
    return wrong ? 3 : bad ? 1 : 0;
}
