/*
 * ckg_arch.h — every device intrinsic, launch and shared-memory declaration
 * the kernels of gpu/ use, behind one name each, so that the same kernel
 * source (ckg_kernels.cu) compiles for a GPU (nvcc: the CUDA intrinsic or
 * the inline PTX below) and for the CPU emulator (CKG_EMU defined:
 * gpu/emu/ckg_emu.h, which runs each CUDA thread as a fiber and implements
 * each of these to the CUDA/PTX specification).  Kernels must use only
 * these, plain loads/stores, `__shared__` arrays, `__device__`/`__global__`
 * functions and threadIdx/blockIdx/blockDim/gridDim; anything else will not
 * build in the emulator.
 *
 * What exists (all device-side, lane = threadIdx.x % 32):
 *   barriers   ckg_syncthreads(), ckg_syncwarp(mask)
 *   shuffles   ckg_shfl_sync(mask, v, src, width), ckg_shfl_xor_sync(mask, v, lanemask, width),
 *              ckg_shfl_up_sync(mask, v, delta, width), ckg_shfl_down_sync(mask, v, delta, width)
 *              (v: unsigned, int or float; width 1..32, a power of two, default 32)
 *   votes      ckg_ballot_sync(mask, pred), ckg_any_sync, ckg_all_sync,
 *              ckg_reduce_add_sync(mask, unsigned)
 *   bits       ckg_clz, ckg_byte_perm(x, y, s)
 *              (__byte_perm: low 3 bits of each selector nibble), ckg_funnelshift_r(lo, hi, s)
 *              (s & 31), ckg_u32_as_f32, ckg_f32_to_bf16_rn (bits, round to nearest even);
 *              ckg_tile.h has the host+device ones: ckg_popc, ckg_ffs0 (0-based), ckg_prmt, ckg_funnel
 *   memory     ckg_ld16(p) / ckg_st16(p, uint4): a 16-byte load / store (p must be
 *              16-byte aligned: the emulator aborts otherwise, and counts the bytes
 *              stored, ckg_emu_st16_bytes_ull()), ckg_atomic_add(u32 *, u32), ckg_atomic_add_f32(float *, float)
 *              (global or shared memory)
 *   async copy ckg_cp_async16(smem, gmem, valid) (cp.async.cg 16 bytes, zero-fill when
 *              !valid), ckg_cp_async_commit(), ckg_cp_async_wait<N>() (cp.async.wait_group N);
 *              in the emulator a copy lands at a random point before its wait_group, and
 *              its race detector requires a barrier between the wait and other lanes' reads
 *   tensor     ckg_mma_bf16_16816(d[4], a0, a1, a2, a3, b0, b1): mma.sync.aligned
 *              .m16n8k16.row.col.f32.bf16.bf16.f32, d += A*B, fragments as in the PTX ISA
 *              ("Matrix Fragments for mma.m16n8k16": g = lane/4, t = lane%4; a0 = A[g][2t..2t+1],
 *              a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]; b0 = B[2t..2t+1][g],
 *              b1 = B[2t+8..2t+9][g]; d0,d1 = D[g][2t..2t+1], d2,d3 = D[g+8][2t..2t+1];
 *              each u32 holds the lower column/row in its low half)
 *              ckg_ldmatrix_x4(r[4], smem_row_ptr), ckg_ldmatrix_x2(r[2], ptr),
 *              ckg_ldmatrix_x4_trans(r[4], ptr): ldmatrix.sync.aligned.m8n8.{x4,x2}[.trans].shared.b16
 *              (lane i gives the address of row i%8 of matrix i/8; r[j] = matrix j,
 *              row lane/4, columns 2*(lane%4)..+1)
 *   launch     CKG_LAUNCH(kernel, grid, block, smem, stream, args...)  (no <<<>>> in kernels)
 *              CKG_LAUNCH_PDL(pdl, kernel, ...): the same, with programmatic dependent launch
 *              when pdl (sm_90: the kernel may start before the stream's previous kernel has
 *              finished; it calls ckg_grid_dependency_wait() before touching anything that
 *              kernel may write; the emulator runs a stream's kernels one after the other)
 *              CKG_DYN_SMEM(type, name): declares the dynamic shared buffer `type name[]`
 *              (16-byte aligned)
 * Planted faults for the emulator's self-test: CKG_PLANT(n) is 1 when the
 * build defines CKG_PLANT_FAULT=n, else 0 (1: wrong escape rank in the GEMV,
 * 2: missing __syncwarp after the GEMV's cp.async wait, 3: swapped MMA
 * operands, 4: missing __syncwarp in decode's staging, 5: the GEMV's
 * split-K accumulators single-buffered (a group's flush races the next
 * group's adds), 6: a plain += instead of an atomic add in the tile flush,
 * 7: a ring stage refilled without the __syncwarp that frees it, 8: decode's
 * stage rewritten without its final __syncwarp); a kernel that replaces one
 * keeps an equivalent site, since gpu/CMakeLists.txt runs a test per fault
 * that must fail (5-8 are races: the emulator's race detector reports them).
 */
#ifndef CKG_ARCH_H
#define CKG_ARCH_H

#include <stdint.h>

#ifndef CKG_PLANT_FAULT
#define CKG_PLANT_FAULT 0
#endif
#define CKG_PLANT(n) (CKG_PLANT_FAULT == (n))

#if defined(CKG_EMU)
#include "emu/ckg_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <utility>

#define CKG_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
template <typename... P, typename... A>
static inline cudaError_t ckg_launch_pdl(bool pdl, void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                         A &&...args)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
}
#define CKG_LAUNCH_PDL(pdl, kernel, grid, block, smem, stream, ...) \
    ckg_launch_pdl((pdl), kernel, dim3(grid), dim3(block), (smem), (stream), __VA_ARGS__)
/* griddepcontrol.wait: the stream's earlier kernels have completed and their writes are visible
 * (returns at once without programmatic dependent launch, and before sm_90) */
__device__ __forceinline__ void ckg_grid_dependency_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
#define CKG_DYN_SMEM(type, name) extern __shared__ __align__(16) type name[]

__device__ __forceinline__ void ckg_syncthreads() { __syncthreads(); }
__device__ __forceinline__ void ckg_syncwarp(unsigned mask = 0xFFFFFFFFu) { __syncwarp(mask); }

template <typename T>
__device__ __forceinline__ T ckg_shfl_sync(unsigned mask, T v, int src, int width = 32) { return __shfl_sync(mask, v, src, width); }
template <typename T>
__device__ __forceinline__ T ckg_shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) { return __shfl_xor_sync(mask, v, lm, width); }
template <typename T>
__device__ __forceinline__ T ckg_shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) { return __shfl_up_sync(mask, v, d, width); }
template <typename T>
__device__ __forceinline__ T ckg_shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) { return __shfl_down_sync(mask, v, d, width); }
__device__ __forceinline__ unsigned ckg_ballot_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred); }
__device__ __forceinline__ int ckg_any_sync(unsigned mask, int pred) { return __any_sync(mask, pred); }
__device__ __forceinline__ int ckg_all_sync(unsigned mask, int pred) { return __all_sync(mask, pred); }
__device__ __forceinline__ unsigned ckg_reduce_add_sync(unsigned mask, unsigned v) { return __reduce_add_sync(mask, v); }

__device__ __forceinline__ int ckg_clz(unsigned v) { return __clz((int)v); }
__device__ __forceinline__ unsigned ckg_byte_perm(unsigned x, unsigned y, unsigned s) { return __byte_perm(x, y, s); }
__device__ __forceinline__ unsigned ckg_funnelshift_r(unsigned lo, unsigned hi, unsigned s) { return __funnelshift_r(lo, hi, s); }
__device__ __forceinline__ float ckg_u32_as_f32(unsigned v) { return __uint_as_float(v); }
__device__ __forceinline__ uint16_t ckg_f32_to_bf16_rn(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

__device__ __forceinline__ uint4 ckg_ld16(const void *p) { return *reinterpret_cast<const uint4 *>(p); }
__device__ __forceinline__ void ckg_st16(void *p, uint4 v) { *reinterpret_cast<uint4 *>(p) = v; }
__device__ __forceinline__ unsigned ckg_atomic_add(unsigned *p, unsigned v) { return atomicAdd(p, v); }
__device__ __forceinline__ float ckg_atomic_add_f32(float *p, float v) { return atomicAdd(p, v); }

__device__ __forceinline__ void ckg_cp_async16(void *smem, const void *gmem, bool valid)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;  /* 0: zero-fill */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void ckg_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void ckg_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ckg_mma_bf16_16816(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                   uint32_t b0, uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ckg_ldmatrix_x4(uint32_t r[4], const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ckg_ldmatrix_x4_trans(uint32_t r[4], const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ckg_ldmatrix_x2(uint32_t r[2], const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}
#endif /* CKG_EMU */

#endif /* CKG_ARCH_H */
