/*
 * ckg_emu.h — the emulator side of ckg_arch.h: what a kernel source needs to
 * compile as host C++ (g++/clang++) and run on the CPU.  Each CUDA thread of
 * a block is a fiber with its own stack (ckg_emu.cpp); a block's fibers run
 * one at a time, each until it blocks at a barrier or a warp collective,
 * the next one picked at random (seed CKG_EMU_SEED), so that a thread runs
 * as far ahead of the others as the barriers allow: a read of data another
 * lane writes without a barrier in between sees the old data.  Warp
 * collectives (shuffles, votes, mma, ldmatrix, __syncwarp) complete when every
 * lane of their mask has arrived with the same operation and mask; block
 * barriers when every thread of the block has.  Anything else — a lane
 * outside the mask, a different operation or mask, a barrier at two different
 * lines, a thread exiting while others wait, a deadlock, a misaligned 16-byte
 * load, cp.async or ldmatrix address — aborts with "ckg-emu: kernel error".
 * A thread is also switched out at random inside its shared-memory accesses
 * (so a plain read-modify-write can be split), and a cp.async copy lands at
 * a random point between its issue and its wait_group (CKG_EMU_SEED picks
 * all of it).  Kernel sources are compiled with the compiler's
 * thread-sanitizer instrumentation (its calls come to ckg_emu.cpp): the race
 * detector (ckg_emu_race.cpp) sees every shared-memory access and reports
 * two conflicting ones that no __syncthreads or __syncwarp orders as a
 * kernel error with both source lines (CKG_EMU_RACES=0 turns it off).
 * `__shared__` variables are function statics: blocks run one after another
 * (one host thread at a time launches), so each block sees one instance.
 */
#ifndef CKG_EMU_H
#define CKG_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* static __shared__ variables live in one section, which the emulator
 * poisons at each block start and whose bytes the race detector watches */
#define __shared__ static __attribute__((section("ckg_emu_shared")))
extern "C" uint8_t __start_ckg_emu_shared[] __attribute__((weak)), __stop_ckg_emu_shared[] __attribute__((weak));
#define __align__(n) __attribute__((aligned(n)))

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }

/* The running CUDA thread. */
struct ckg_emu_thread {
    uint3 tid, bid, bdim, gdim;
};
extern ckg_emu_thread *ckg_emu_cur;
#define threadIdx (ckg_emu_cur->tid)
#define blockIdx (ckg_emu_cur->bid)
#define blockDim (ckg_emu_cur->bdim)
#define gridDim (ckg_emu_cur->gdim)

/* ---- the emulator's entry points (ckg_emu.cpp) ---------------------------- */
enum ckg_emu_op {
    CKG_EMU_SYNCWARP, CKG_EMU_SHFL, CKG_EMU_SHFL_XOR, CKG_EMU_SHFL_UP, CKG_EMU_SHFL_DOWN,
    CKG_EMU_BALLOT, CKG_EMU_ANY, CKG_EMU_ALL, CKG_EMU_REDUCE_ADD, CKG_EMU_MMA_BF16_16816,
    CKG_EMU_LDMATRIX_X1, CKG_EMU_LDMATRIX_X2, CKG_EMU_LDMATRIX_X4, CKG_EMU_LDMATRIX_X4_TRANS
};
/* A warp collective: in[0..nin) this lane's operands, arg/width the
 * operation's, ptr an address (ldmatrix); out[0..3] this lane's results. */
void ckg_emu_warp(int op, unsigned mask, const uint32_t *in, int nin, int arg, int width, const void *ptr,
                  uint32_t *out, int line);
void ckg_emu_syncthreads(int line);
void *ckg_emu_dyn_smem(void);
void ckg_emu_cp_async(void *smem, const void *gmem, int n, int src_bytes);
void ckg_emu_cp_commit(void);
void ckg_emu_cp_wait(int n);
[[noreturn]] void ckg_emu_fail(const char *fmt, ...);
cudaError_t ckg_emu_launch_body(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                std::function<void()> body);

/* ---- launch and shared memory ------------------------------------------------ */
template <typename... P, typename... A>
static cudaError_t ckg_emu_launch(const char *name, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                                  cudaStream_t s, A &&...args)
{
    std::tuple<typename std::decay<P>::type...> t(std::forward<A>(args)...);
    return ckg_emu_launch_body(name, grid, block, smem, s, [k, t]() { std::apply(k, t); });
}
#define CKG_LAUNCH(kernel, grid, block, smem, stream, ...) \
    ckg_emu_launch(#kernel, kernel, dim3(grid), dim3(block), (smem), (stream), __VA_ARGS__)
#define CKG_DYN_SMEM(type, name) type *name = reinterpret_cast<type *>(ckg_emu_dyn_smem())
/* A stream's kernels run one after the other here: programmatic dependent
 * launch changes nothing, and its wait returns at once. */
#define CKG_LAUNCH_PDL(pdl, kernel, grid, block, smem, stream, ...) \
    ((void)(pdl), CKG_LAUNCH(kernel, grid, block, smem, stream, __VA_ARGS__))
static inline void ckg_grid_dependency_wait() {}

/* ---- intrinsics ----------------------------------------------------------------- */
#define ckg_syncthreads() ckg_emu_syncthreads(__LINE__)
#define ckg_syncwarp(...) ckg_emu_syncwarp(__LINE__, ##__VA_ARGS__)
static inline void ckg_emu_syncwarp(int line, unsigned mask = 0xFFFFFFFFu)
{
    ckg_emu_warp(CKG_EMU_SYNCWARP, mask, nullptr, 0, 0, 32, nullptr, nullptr, line);
}

template <typename T>
static inline T ckg_emu_shfl(int op, unsigned mask, T v, int arg, int width)
{
    static_assert(sizeof(T) == 4, "32-bit shuffles only");
    uint32_t in, out[4];
    memcpy(&in, &v, 4);
    ckg_emu_warp(op, mask, &in, 1, arg, width, nullptr, out, 0);
    T r;
    memcpy(&r, &out[0], 4);
    return r;
}
template <typename T> static inline T ckg_shfl_sync(unsigned m, T v, int src, int w = 32) { return ckg_emu_shfl(CKG_EMU_SHFL, m, v, src, w); }
template <typename T> static inline T ckg_shfl_xor_sync(unsigned m, T v, int lm, int w = 32) { return ckg_emu_shfl(CKG_EMU_SHFL_XOR, m, v, lm, w); }
template <typename T> static inline T ckg_shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return ckg_emu_shfl(CKG_EMU_SHFL_UP, m, v, (int)d, w); }
template <typename T> static inline T ckg_shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return ckg_emu_shfl(CKG_EMU_SHFL_DOWN, m, v, (int)d, w); }

static inline uint32_t ckg_emu_vote(int op, unsigned mask, uint32_t v)
{
    uint32_t out[4];
    ckg_emu_warp(op, mask, &v, 1, 0, 32, nullptr, out, 0);
    return out[0];
}
static inline unsigned ckg_ballot_sync(unsigned m, int pred) { return ckg_emu_vote(CKG_EMU_BALLOT, m, pred != 0); }
static inline int ckg_any_sync(unsigned m, int pred) { return (int)ckg_emu_vote(CKG_EMU_ANY, m, pred != 0); }
static inline int ckg_all_sync(unsigned m, int pred) { return (int)ckg_emu_vote(CKG_EMU_ALL, m, pred != 0); }
static inline unsigned ckg_reduce_add_sync(unsigned m, unsigned v) { return ckg_emu_vote(CKG_EMU_REDUCE_ADD, m, v); }

static inline int ckg_clz(unsigned v) { return v ? __builtin_clz(v) : 32; }
static inline unsigned ckg_byte_perm(unsigned x, unsigned y, unsigned s)
{
    uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
    return r;
}
static inline unsigned ckg_funnelshift_r(unsigned lo, unsigned hi, unsigned s)
{
    return (unsigned)((((uint64_t)hi << 32) | lo) >> (s & 31u));
}
static inline float ckg_u32_as_f32(unsigned v)
{
    float f;
    memcpy(&f, &v, 4);
    return f;
}
static inline uint16_t ckg_f32_to_bf16_rn(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40u);   /* NaN stays NaN (quiet) */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline uint4 ckg_ld16(const void *p)
{
    if ((uintptr_t)p & 15)
        ckg_emu_fail("misaligned 16-byte load from %p", p);
    uint4 v;
    memcpy(&v, p, 16);
    return v;
}
extern uint64_t ckg_emu_st16_count;
static inline void ckg_st16(void *p, uint4 v)
{
    if ((uintptr_t)p & 15)
        ckg_emu_fail("misaligned 16-byte store to %p", p);
    memcpy(p, &v, 16);
    __atomic_fetch_add(&ckg_emu_st16_count, 16, __ATOMIC_RELAXED);
}
static inline unsigned ckg_atomic_add(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline float ckg_atomic_add_f32(float *p, float v)   /* compare-and-swap on the bits, like the GPU's */
{
    uint32_t *u = (uint32_t *)p, old = __atomic_load_n(u, __ATOMIC_RELAXED), nu;
    do {
        float f;
        memcpy(&f, &old, 4);
        f += v;
        memcpy(&nu, &f, 4);
    } while (!__atomic_compare_exchange_n(u, &old, nu, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    float o;
    memcpy(&o, &old, 4);
    return o;
}

static inline void ckg_cp_async16(void *smem, const void *gmem, bool valid) { ckg_emu_cp_async(smem, gmem, 16, valid ? 16 : 0); }
static inline void ckg_cp_async_commit() { ckg_emu_cp_commit(); }
template <int N> static inline void ckg_cp_async_wait() { ckg_emu_cp_wait(N); }

static inline void ckg_mma_bf16_16816(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1)
{
    uint32_t in[10] = {a0, a1, a2, a3, b0, b1}, out[4];
    memcpy(in + 6, d, 16);
    ckg_emu_warp(CKG_EMU_MMA_BF16_16816, 0xFFFFFFFFu, in, 10, 0, 32, nullptr, out, 0);
    memcpy(d, out, 16);
}
static inline void ckg_ldmatrix_x4(uint32_t r[4], const void *p) { ckg_emu_warp(CKG_EMU_LDMATRIX_X4, 0xFFFFFFFFu, nullptr, 0, 0, 32, p, r, 0); }
static inline void ckg_ldmatrix_x4_trans(uint32_t r[4], const void *p) { ckg_emu_warp(CKG_EMU_LDMATRIX_X4_TRANS, 0xFFFFFFFFu, nullptr, 0, 0, 32, p, r, 0); }
static inline void ckg_ldmatrix_x2(uint32_t r[2], const void *p)
{
    uint32_t o[4];
    ckg_emu_warp(CKG_EMU_LDMATRIX_X2, 0xFFFFFFFFu, nullptr, 0, 0, 32, p, o, 0);
    r[0] = o[0];
    r[1] = o[1];
}

#endif /* CKG_EMU_H */
