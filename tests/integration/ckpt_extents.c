/*
 * ckpt_extents.c — test helper: print the extents of a packed file, one per
 * line, so the mount tests can find a tensor's planes and damage one byte.
 *   index encoding chunk_size n_chunks orig_offset orig_size
 *   plane0_offset plane0_size plane1_offset plane1_size plane2_offset
 *   plane2_size name
 * (name is "-" when the extent has none).
 */
#include <inttypes.h>
#include <stdio.h>

#include "container.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ckpt_extents FILE.ckpt\n");
        return 2;
    }
    char err[512];
    ckp_reader *r;
    if (ckp_open(argv[1], &r, err, sizeof err) != CKP_OK) {
        fprintf(stderr, "ckpt_extents: %s\n", err);
        return 1;
    }
    const ckp_info *info = ckp_get_info(r);
    for (uint32_t i = 0; i < info->n_extents; i++) {
        const ckp_extent *x = ckp_get_extent(r, i);
        printf("%" PRIu32 " %" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu64, i,
               x->encoding, x->chunk_size, x->n_chunks, x->orig_offset, x->orig_size);
        for (int p = 0; p < 3; p++)
            printf(" %" PRIu64 " %" PRIu64, x->plane_offset[p], x->plane_size[p]);
        printf(" %s\n", x->name[0] ? x->name : "-");
    }
    ckp_close(r);
    return 0;
}
