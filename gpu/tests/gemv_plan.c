/*
 * gemv_plan.c — prints the fused GEMV's launch plan (ckg_gemv_plan_for of
 * ckg_tile.h, the function the kernel's launcher calls) for one shape, and
 * the block's shared memory (CKG_GEMV_SMEM_BYTES, asserted equal to the
 * kernel's layout), so that gpu/gemv_model.py --check compares them with
 * the latency model's.
 * usage: gemv_plan ROWS COLS SMS
 */
#include <stdio.h>
#include <stdlib.h>

#include "ckg_tile.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: gemv_plan ROWS COLS SMS\n");
        return 2;
    }
    ckg_gemv_plan P = ckg_gemv_plan_for((uint32_t)strtoul(argv[1], NULL, 10), (uint32_t)strtoul(argv[2], NULL, 10),
                                        (uint32_t)strtoul(argv[3], NULL, 10));
    printf("S=%u T=%u TG=%u NG=%u L=%u grid=%u smem=%u\n", P.S, P.T, P.TG, P.NG, P.L, P.grid,
           (unsigned)CKG_GEMV_SMEM_BYTES(CKG_GEMV_WARPS));
    return 0;
}
