/*
 * gpu_test_dev.h — for the gpu tests that call the CUDA runtime (the real
 * one, or the CPU emulator's, gpu/emu/include): CU, copies to the device,
 * and packed planes (gpu_test_util.h's tu_packed) on the device.
 */
#ifndef GPU_TEST_DEV_H
#define GPU_TEST_DEV_H

#include <cuda_runtime_api.h>

#include "gpu_test_util.h"

/* A CUDA runtime call that must succeed (CHECK names the call). */
#define CU(call) CHECK((call) == cudaSuccess, "%s", cudaGetErrorString(cudaGetLastError()))

/* A device buffer of len + pad bytes: h[0..len), then zeros. */
static inline void *dev_copy(const void *h, size_t len, size_t pad)
{
    void *d = NULL;
    CU(cudaMalloc(&d, len + pad));
    CU(cudaMemset(d, 0, len + pad));
    if (len)
        CU(cudaMemcpy(d, h, len, cudaMemcpyHostToDevice));
    return d;
}

/* tu_planes(p) with its planes on the device (64 zero bytes past each)
 * and, given idx, its escape index (one entry a CKG_ESC_BLOCK weights). */
static inline ckg_planes tu_dev_planes(const tu_packed *p, const uint32_t *idx)
{
    ckg_planes v = tu_planes(p);
    v.codes = dev_copy(p->codes, p->codes_size, 64);
    v.low = dev_copy(p->low, p->low_size, 64);
    v.esc = dev_copy(p->esc, p->esc_size, 64);
    if (idx)
        v.esc_index = dev_copy(idx, (p->n + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK * 4, 0);
    return v;
}

/* The planes and escape index of v on the device freed. */
static inline void tu_dev_planes_free(ckg_planes *v)
{
    CU(cudaFree((void *)v->codes));
    CU(cudaFree((void *)v->low));
    CU(cudaFree((void *)v->esc));
    if (v->esc_index)
        CU(cudaFree((void *)v->esc_index));
}

#endif
