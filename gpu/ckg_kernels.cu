/*
 * ckg_kernels.cu — the device side of ckgpu: escape index, bit-exact decode,
 * fused decode + GEMV/small GEMM, and their launch wrappers (ckgpu.h).
 *
 * Device intrinsics, inline PTX and launches go through ckg_arch.h only, so
 * that this file also builds for the CPU emulator (gpu/emu).  Every kernel
 * decodes with ckc_decode.h / ckg_tile.h, the same functions the
 * CPU references and tests run.  Escapes are located with the escape index
 * (the rank of every 1024th weight, built from the chunk index by
 * escape_index_kernel) plus an in-group count: a warp scan of per-lane
 * code-15 counts (32 weights per lane), or a ballot in the generic kernel.
 *
 * The fused GEMV (ckg_gemv.cuh) streams 8-row tiles through per-warp
 * cp.async rings, decodes BF16 pairs with a per-lane shared table, feeds
 * mma.m16n8k16 and adds escapes exactly from an upload-time patch list.
 */
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "ckg_arch.h"
#include "ckg_tile.h"
#include "ckgpu.h"

namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kGroup = 32;                      /* weights per lane group */

/* ---- small device helpers ------------------------------------------------ */

/* A little-endian u32 at p, any alignment (planes may start anywhere). */
__device__ __forceinline__ uint32_t ld4_any(const uint8_t *p)
{
    if (((uintptr_t)p & 3) == 0)
        return *reinterpret_cast<const uint32_t *>(p);
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 16 bytes at p as 4 words: one 16-byte load when p is aligned (always, for
 * planes the loader allocates; the branch is uniform), else 4 word reads. */
__device__ __forceinline__ void ld16_any(const uint8_t *p, uint32_t w[4])
{
    if (((uintptr_t)p & 15) == 0) {
        uint4 v = ckg_ld16(p);
        w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
        return;
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = ld4_any(p + 4 * i);
}

__device__ __forceinline__ void load_codes(const uint8_t *codes, uint64_t q, uint32_t c[4])
{
    ld16_any(codes + q / 2, c);
}

__device__ __forceinline__ unsigned esc_sym(const ckg_planes &P, uint64_t k)
{
    if (k >= P.n_escapes)     /* only on corrupt data, which upload rejects */
        return 0;
    return P.encoding == CKC_ENC_K15
               ? ckc_bits_at(P.esc, P.esc_bit0 + k * CKC_K15_SYM_BITS, CKC_K15_SYM_BITS)
               : P.esc[k];
}

__device__ __forceinline__ float bf16f(uint16_t w) { return ckg_u32_as_f32((uint32_t)w << 16); }

/* Escape rank of weight pos, computed by the G aligned lanes of a group
 * (gl = lane in group); every lane of the warp must call it. */
template <int G>
__device__ uint32_t rank_at(const ckg_planes &P, uint64_t pos, int gl, bool active)
{
    uint32_t n = 0, base = 0;
    if (active) {
        base = P.esc_index[pos / CKG_ESC_BLOCK];
        uint64_t q0 = pos & ~(uint64_t)(CKG_ESC_BLOCK - 1);
        for (uint64_t q = q0 + (uint64_t)kGroup * gl; q < pos; q += (uint64_t)kGroup * G) {
            uint32_t c[4];
            load_codes(P.codes, q, c);
            uint64_t below = pos - q;
            n += ckg_esc_count_below(c, below < 32 ? (unsigned)below : 32u);
        }
    }
#pragma unroll
    for (int d = 1; d < G; d <<= 1)
        n += ckg_shfl_xor_sync(kFull, n, d);
    return base + n;
}

/* ---- escape index ----------------------------------------------------------
 * One block per chunk: warps count code-15s per 1024-weight block into shared
 * memory, warp 0 scans them and adds the chunk's prefix. */
__global__ void escape_index_kernel(ckg_planes P, uint64_t chunk_w, const uint32_t *prefix,
                                    uint32_t *index_out, uint32_t *err_count)
{
    CKG_DYN_SMEM(uint32_t, cnt);
    const uint64_t c = blockIdx.x;
    const uint64_t a = c * chunk_w;
    const uint64_t b = a + chunk_w < P.n_weights ? a + chunk_w : P.n_weights;
    const int nb = (int)((b - a + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;

    for (int j = warp; j < nb; j += nwarps) {
        uint64_t q = a + (uint64_t)j * CKG_ESC_BLOCK + (uint64_t)kGroup * lane;
        uint32_t n = 0;
        if (q < b) {
            uint32_t cw[4];
            load_codes(P.codes, q, cw);
            n = ckg_esc_count_below(cw, b - q < 32 ? (unsigned)(b - q) : 32u);
        }
        n = ckg_reduce_add_sync(kFull, n);
        if (lane == 0)
            cnt[j] = n;
    }
    ckg_syncthreads();
    if (warp != 0)
        return;
    uint32_t carry = prefix[c];
    for (int j0 = 0; j0 < nb; j0 += 32) {
        uint32_t v = j0 + lane < nb ? cnt[j0 + lane] : 0, incl = v;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            uint32_t t = ckg_shfl_up_sync(kFull, incl, d);
            if (lane >= d)
                incl += t;
        }
        if (j0 + lane < nb)
            index_out[a / CKG_ESC_BLOCK + j0 + lane] = carry + incl - v;
        carry += ckg_shfl_sync(kFull, incl, 31);
    }
    if (lane == 0 && carry != prefix[c + 1])
        ckg_atomic_add(err_count, 1u);
}

/* ---- decode ------------------------------------------------------------------
 * A warp per 1024-weight block, 32 weights per lane: wide loads of codes and
 * low parts, pairs from the table, a warp scan for the escape ranks, then the
 * escapes are rewritten with their symbols. */
__device__ __forceinline__ void load_low(const ckg_planes &P, bool k15, uint64_t q, uint32_t l[8])
{
    if (k15) {
        const uint8_t *m = P.low + q / 8 * 7;
#pragma unroll
        for (int i = 0; i < 7; i++)
            l[i] = ld4_any(m + 4 * i);
        l[7] = 0;
    } else {
        ld16_any(P.low + q, l);
        ld16_any(P.low + q + 16, l + 4);
    }
}

/* Slot of 16-byte piece i (0..3) of lane `lane`'s 64 decoded bytes in the
 * warp's 2 KiB staging buffer, swizzled so that both the per-lane writes and
 * the coalesced read-out (piece r*32 + lane) hit 8 different bank groups per
 * quarter warp. */
__device__ __forceinline__ int out_slot(int lane, int i) { return lane * 4 + (i ^ ((lane >> 1) & 3)); }

/* Element e (0..1023) of a warp's staged block. */
__device__ __forceinline__ uint16_t stage_elem(const uint16_t *my16, int e)
{
    return my16[out_slot(e >> 5, (e & 31) >> 3) * 8 + (e & 7)];
}

constexpr int kDecodeThreads = 256;

__global__ void __launch_bounds__(kDecodeThreads) decode_kernel(ckg_planes P, uint64_t first, uint64_t count,
                                                                uint16_t *out)
{
    __shared__ uint32_t lut[32];
    __shared__ uint4 stage[kDecodeThreads / 32][CKG_ESC_BLOCK / 8];
    const bool k15 = P.encoding == CKC_ENC_K15;
    if (threadIdx.x == 0)
        ckg_make_lut(k15, &P.codebook, lut);
    ckg_syncthreads();

    const int lane = threadIdx.x & 31;
    uint4 *my = stage[threadIdx.x >> 5];
    const uint64_t end = first + count;
    const uint64_t blk0 = first / CKG_ESC_BLOCK, blk1 = (end + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK;
    const uint64_t nwarps = (uint64_t)gridDim.x * (blockDim.x >> 5);
    /* staged 16-byte stores need 2-byte aligned output; a block's output then
     * starts sh elements past a 16-byte boundary, the same sh for every block */
    const bool vec_ok = ((uintptr_t)out & 1) == 0;
    const int sh = (int)(((uintptr_t)(out - first) & 15) >> 1);

    for (uint64_t blk = blk0 + (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32; blk < blk1;
         blk += nwarps) {
        const uint64_t q = blk * CKG_ESC_BLOCK + (uint64_t)kGroup * lane;
        uint32_t c[4] = {0, 0, 0, 0}, l[8], pr[16];
        if (q < P.n_weights) {
            load_codes(P.codes, q, c);
            load_low(P, k15, q, l);
            if (k15)
                ckg_k15_pairs32(c, l, lut, pr);
            else
                ckg_bs_pairs32(c, l, lut, pr);
        }
        unsigned cnt = ckg_esc_count32(c), incl = cnt;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            unsigned t = ckg_shfl_up_sync(kFull, incl, d);
            if (lane >= d)
                incl += t;
        }
        uint64_t k = P.esc_index[blk] + (incl - cnt);
        const uint64_t b0 = blk * CKG_ESC_BLOCK;
        /* whole block inside [first, end) and the tensor: staged, coalesced stores (warp-uniform) */
        if (vec_ok && b0 >= first && b0 + CKG_ESC_BLOCK <= end && b0 + CKG_ESC_BLOCK <= P.n_weights) {
#pragma unroll
            for (int i = 0; i < 4; i++)
                my[out_slot(lane, i)] = make_uint4(pr[4 * i], pr[4 * i + 1], pr[4 * i + 2], pr[4 * i + 3]);
            uint16_t *my16 = reinterpret_cast<uint16_t *>(my);
            for (int w = 0; w < 4; w++)
                for (uint32_t bits = ckg_esc_bits8(c[w]); bits; bits &= bits - 1, k++) {
                    unsigned j = 8 * w + ckg_ffs0(bits) / 4;
                    my16[out_slot(lane, j / 8) * 8 + j % 8] =
                        ckc_join(k15, esc_sym(P, k), ckc_low_at(k15, P.low, q + j));
                }
            if (!CKG_PLANT(4))   /* planted fault: staged pieces of other lanes not waited for */
                ckg_syncwarp();
            if (sh == 0) {
                uint4 *o = reinterpret_cast<uint4 *>(out + (b0 - first));
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    int u = r * 32 + lane;  /* piece u = lane u/4's piece u%4 */
                    ckg_st16(o + u, my[out_slot(u >> 2, u & 3)]);
                }
            } else {
                /* output not 16-byte aligned (a range starting at first % 8 != 0):
                 * 127 aligned pieces gathered from the stage, the 8 - sh head and
                 * sh tail elements (16-byte words shared with the neighbouring
                 * blocks) one by one */
                const int head = 8 - sh;
                uint16_t *dst = out + (b0 - first);
#pragma unroll 1
                for (int r = 0; r < 4; r++) {
                    int u = r * 32 + lane;
                    if (u < (int)(CKG_ESC_BLOCK / 8) - 1) {
                        uint32_t v[4];
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            v[i] = stage_elem(my16, head + 8 * u + 2 * i) |
                                   (uint32_t)stage_elem(my16, head + 8 * u + 2 * i + 1) << 16;
                        ckg_st16(dst + head + 8 * u, make_uint4(v[0], v[1], v[2], v[3]));
                    }
                }
                if (lane < 8) {
                    int e = lane < head ? lane : CKG_ESC_BLOCK - 8 + lane;
                    dst[e] = stage_elem(my16, e);
                }
            }
            if (!CKG_PLANT(8))   /* planted fault: the stage rewritten while other lanes read it out */
                ckg_syncwarp();
            continue;
        }
        if (q >= end || q + kGroup <= first || q >= P.n_weights)
            continue;
#pragma unroll
        for (int j = 0; j < kGroup; j++) {
            uint64_t i = q + j;
            if (i >= first && i < end)
                out[i - first] = (uint16_t)(pr[j / 2] >> (16 * (j & 1)));
        }
        for (int w = 0; w < 4; w++) {
            for (uint32_t bits = ckg_esc_bits8(c[w]); bits; bits &= bits - 1, k++) {
                uint64_t i = q + 8 * w + ckg_ffs0(bits) / 4;
                if (i >= first && i < end)
                    out[i - first] = ckc_join(k15, esc_sym(P, k), ckc_low_at(k15, P.low, i));
            }
        }
    }
}

/* ---- fused GEMV ------------------------------------------------------------------ */

struct GemvArgs {
    ckg_planes P;
    uint64_t elem_off;
    uint32_t rows, cols;
    const uint16_t *x;
    void *y;
    int batch;
    int out_bf16;
};

#include "ckg_gemv.cuh"   /* namespace fused: the fused GEMV and its patch list */

/* ---- generic GEMV: a warp per row, a weight per lane, FP32 FMA ------------------ */
__global__ void __launch_bounds__(256) gemv_generic_kernel(GemvArgs A)
{
    __shared__ uint16_t cb[16];
    if (threadIdx.x < 16)
        cb[threadIdx.x] = A.P.codebook.sym[threadIdx.x];
    ckg_syncthreads();
    const bool k15 = A.P.encoding == CKC_ENC_K15;
    const int lane = threadIdx.x & 31;
    const uint64_t row = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
    if (row >= A.rows)
        return;
    const uint64_t pos = A.elem_off + row * A.cols;
    uint64_t k = rank_at<32>(A.P, pos, lane, true);
    float acc[CKG_MAX_BATCH];
#pragma unroll
    for (int b = 0; b < CKG_MAX_BATCH; b++)
        acc[b] = 0.f;
    for (uint64_t c0 = 0; c0 < A.cols; c0 += 32) {
        const uint64_t c = c0 + lane;
        const bool valid = c < A.cols;
        const unsigned code = valid ? ckc_code_at(A.P.codes, pos + c) : 0u;
        const unsigned bal = ckg_ballot_sync(kFull, code == CKC_ESCAPE);
        const uint64_t rank = k + ckg_popc(bal & ((1u << lane) - 1u));
        k += ckg_popc(bal);
        if (!valid)
            continue;
        unsigned sym = code == CKC_ESCAPE ? esc_sym(A.P, rank) : cb[code];
        float wf = bf16f(ckc_join(k15, sym, ckc_low_at(k15, A.P.low, pos + c)));
#pragma unroll
        for (int b = 0; b < CKG_MAX_BATCH; b++)
            if (b < A.batch)
                acc[b] = fmaf(wf, bf16f(A.x[(uint64_t)b * A.cols + c]), acc[b]);
    }
#pragma unroll
    for (int b = 0; b < CKG_MAX_BATCH; b++) {
        for (int d = 16; d > 0; d >>= 1)
            acc[b] += ckg_shfl_xor_sync(kFull, acc[b], d);
        if (lane == 0 && b < A.batch) {
            uint64_t o = (uint64_t)b * A.rows + row;
            if (A.out_bf16)
                reinterpret_cast<uint16_t *>(A.y)[o] = ckg_f32_to_bf16_rn(acc[b]);
            else
                reinterpret_cast<float *>(A.y)[o] = acc[b];
        }
    }
}

/* ---- launch wrappers ------------------------------------------------------------ */

ckg_status launched(void)
{
    return cudaGetLastError() == cudaSuccess ? CKG_OK : CKG_ERR_CUDA;
}

ckg_status check_planes(const ckg_planes *p, bool need_index)
{
    if (!p || !p->codes || !p->low || (p->n_escapes && !p->esc) || (need_index && !p->esc_index))
        return CKG_ERR_ARG;
    if (p->encoding != CKC_ENC_K15 && p->encoding != CKC_ENC_BSPLIT)
        return CKG_ERR_UNSUPPORTED;
    if (p->n_escapes >= (1ull << 32) || p->esc_bit0 > 7 || (p->encoding == CKC_ENC_BSPLIT && p->esc_bit0))
        return CKG_ERR_UNSUPPORTED;
    for (int c = 0; c < 15; c++)
        if (p->codebook.sym[c] >= (p->encoding == CKC_ENC_K15 ? 512u : 256u))
            return CKG_ERR_CORRUPT;
    return CKG_OK;
}

ckg_status gemv_args(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                     const uint16_t *x, int batch, void *y, ckg_out_type y_type, GemvArgs *A)
{
    ckg_status st = check_planes(p, true);
    if (st != CKG_OK)
        return st;
    if (!x || !y || batch < 1 || batch > CKG_MAX_BATCH || (y_type != CKG_OUT_F32 && y_type != CKG_OUT_BF16))
        return CKG_ERR_ARG;
    if (rows == 0 || cols == 0 || rows >= (1ull << 31) || cols >= (1ull << 31))
        return CKG_ERR_SHAPE;
    if (elem_off > p->n_weights || rows > (p->n_weights - elem_off) / cols)
        return CKG_ERR_SHAPE;
    *A = GemvArgs{*p, elem_off, (uint32_t)rows, (uint32_t)cols, x, y, batch, y_type == CKG_OUT_BF16};
    return CKG_OK;
}

ckg_status launch_generic(const GemvArgs &A, cudaStream_t s)
{
    const int threads = 256;
    uint64_t blocks = ((uint64_t)A.rows * 32 + threads - 1) / threads;
    CKG_LAUNCH(gemv_generic_kernel, (unsigned)blocks, threads, 0, s, A);
    return launched();
}

/* Test hook (ckgpu.h: ckg_gemv_test_launch): at most this many blocks, this
 * many warps; 0: the defaults. */
unsigned g_test_blocks = 0;
int g_test_warps = 0;

/* ---- per-device facts, asked once per device ------------------------------
 * A launch needs the current device's SM count and, for the fused GEMV, the
 * warps per block whose shared memory the device grants (the attribute set
 * on the kernel stays set in the device's context).  They are asked the
 * first time a device is used and kept here: a serving loop launches
 * thousands of kernels a second, each query a driver call.  Any thread may
 * fill an entry; two threads racing on the first use both ask and store the
 * same value (0: not asked yet; -1 for warps: no fused launch fits).
 * Devices past kDevCache are asked every time. */
constexpr int kDevCache = 64;
std::atomic<int> g_dev_sms[kDevCache];
std::atomic<int> g_dev_warps[3][kDevCache];     /* [byte-split, K15, K15 shifted][device] */
std::atomic<int> g_dev_pdl[kDevCache];          /* 1: programmatic dependent launch (sm_90+), -1: not */

/* The current device and its SM count. */
ckg_status device_sms(int *dev, int *sms)
{
    if (cudaGetDevice(dev) != cudaSuccess)
        return CKG_ERR_CUDA;
    const bool cached = *dev >= 0 && *dev < kDevCache;
    *sms = cached ? g_dev_sms[*dev].load(std::memory_order_acquire) : 0;
    if (*sms > 0)
        return CKG_OK;
    if (cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, *dev) != cudaSuccess || *sms <= 0)
        return CKG_ERR_CUDA;
    if (cached)
        g_dev_sms[*dev].store(*sms, std::memory_order_release);
    return CKG_OK;
}

/* Whether the fused GEMV is launched with programmatic dependent launch on
 * device dev: compute capability 9.0 or later, unless CKG_NO_PDL is set in
 * the environment (to compare on a device: gpu/NOTES.md). */
bool device_pdl(int dev)
{
    const bool cached = dev >= 0 && dev < kDevCache;
    int v = cached ? g_dev_pdl[dev].load(std::memory_order_acquire) : 0;
    if (v == 0) {
        int major = 0;
        const char *off = getenv("CKG_NO_PDL");
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            cudaGetLastError();
            major = 0;
        }
        v = major >= 9 && !(off && *off && strcmp(off, "0") != 0) ? 1 : -1;
        if (cached)
            g_dev_pdl[dev].store(v, std::memory_order_release);
    }
    return v > 0;
}

/* Warps per block of the fused GEMV on device dev: 8 where the shared memory
 * allows (223 KiB, sm_90), 4 on smaller parts (148 KiB, sm_80), -1 if
 * neither fits.  Sets the kernel's shared-memory attribute on the way. */
template <bool K15, bool SHIFT>
int fused_warps(int dev)
{
    const bool cached = dev >= 0 && dev < kDevCache;
    std::atomic<int> *const slot = cached ? &g_dev_warps[K15 + SHIFT][dev] : NULL;
    int warps = slot ? slot->load(std::memory_order_acquire) : 0;
    if (warps != 0)
        return warps;
    for (warps = CKG_GEMV_WARPS; warps >= 4; warps /= 2) {
        if (cudaFuncSetAttribute(fused::gemv_fused_kernel<K15 + SHIFT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 fused::smem_bytes(warps)) == cudaSuccess)
            break;
        cudaGetLastError();
    }
    if (warps < 4)
        warps = -1;
    if (slot)
        slot->store(warps, std::memory_order_release);
    return warps;
}

/* The fused kernel's launch: one block per SM, the warps fused_warps
 * allows, the plan of ckg_tile.h (which gpu/gemv_model.py models).  SHIFT:
 * K15 rows that start at a multiple of 32 weights, not of 128. */
template <bool K15, bool SHIFT>
ckg_status launch_fused(const GemvArgs &A, const uint32_t *prow, cudaStream_t s)
{
    int dev = 0, sms = 0;
    ckg_status st = device_sms(&dev, &sms);
    if (st != CKG_OK)
        return st;
    int warps = fused_warps<K15, SHIFT>(dev);
    if (warps < 0)
        return launch_generic(A, s);
    if (g_test_warps && g_test_warps < warps)
        warps = g_test_warps;
    const size_t smem = (size_t)fused::smem_bytes(warps);
    const ckg_gemv_plan P = ckg_gemv_plan_for(A.rows, A.cols, g_test_blocks ? g_test_blocks : (uint32_t)sms);
    fused::Args F;
    F.A = A;
    F.prow = prow;
    F.patch = A.P.patch;
    F.S = P.S;
    F.T = P.T;
    F.TG = P.TG;
    F.NG = P.NG;
    F.L = P.L;
    F.SPW = (uint32_t)(fused::kSlots / warps);
    const bool pdl = device_pdl(dev);
    if (CKG_LAUNCH_PDL(pdl, fused::gemv_fused_kernel<K15 + SHIFT>, P.grid, warps * 32, smem, s, F) != cudaSuccess) {
        cudaGetLastError();
        return CKG_ERR_CUDA;
    }
    return launched();
}

/* The patch ranks for rows [elem_off / cols ...) of a call, or NULL when the
 * planes' patch list does not cover it. */
const uint32_t *patch_rows_for(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols)
{
    if (!p->patch_row || !p->patch || p->patch_cols != cols || elem_off < p->patch_elem_off ||
        (elem_off - p->patch_elem_off) % cols)
        return NULL;
    uint64_t r0 = (elem_off - p->patch_elem_off) / cols;
    return r0 <= p->patch_rows && rows <= p->patch_rows - r0 ? p->patch_row + r0 : NULL;
}

} // namespace

extern "C" {

int ckg_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

ckg_status ckg_escape_index(const ckg_planes *p, uint64_t chunk_weights, const uint32_t *prefix,
                            uint64_t n_chunks, uint32_t *index_out, uint32_t *err_count,
                            ckg_stream stream)
{
    ckg_status st = check_planes(p, false);
    if (st != CKG_OK)
        return st;
    if (!prefix || !index_out || !err_count || chunk_weights == 0)
        return CKG_ERR_ARG;
    if (chunk_weights % CKG_ESC_BLOCK)
        return CKG_ERR_UNSUPPORTED;
    if (n_chunks != (p->n_weights + chunk_weights - 1) / chunk_weights || n_chunks >= (1ull << 31))
        return CKG_ERR_SHAPE;
    if (n_chunks == 0)
        return CKG_OK;
    size_t smem = (size_t)(chunk_weights / CKG_ESC_BLOCK) * sizeof(uint32_t);
    if (smem > 48 * 1024)
        return CKG_ERR_UNSUPPORTED;
    CKG_LAUNCH(escape_index_kernel, (unsigned)n_chunks, 256, smem, (cudaStream_t)stream, *p, chunk_weights, prefix,
               index_out, err_count);
    return launched();
}

ckg_status ckg_escape_patches(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                              uint32_t *row_out, uint32_t *entries_out, ckg_stream stream)
{
    ckg_status st = check_planes(p, true);
    if (st != CKG_OK)
        return st;
    if (!row_out || (!entries_out && p->n_escapes))
        return CKG_ERR_ARG;
    if (rows == 0 || cols == 0 || rows >= (1ull << 31) || elem_off > p->n_weights || rows > (p->n_weights - elem_off) / cols)
        return CKG_ERR_SHAPE;
    if (cols % 32 || elem_off % 32 || cols > 65536)
        return CKG_ERR_UNSUPPORTED;
    const unsigned blocks = (unsigned)((rows + 1 + 7) / 8);
    CKG_LAUNCH(fused::patch_kernel, blocks, 256, 0, (cudaStream_t)stream, *p, elem_off, (uint32_t)rows, (uint32_t)cols,
               row_out, entries_out);
    return launched();
}

ckg_status ckg_decode(const ckg_planes *p, uint64_t first, uint64_t count, uint16_t *out, ckg_stream stream)
{
    ckg_status st = check_planes(p, true);
    if (st != CKG_OK)
        return st;
    if (!out && count)
        return CKG_ERR_ARG;
    if (first > p->n_weights || count > p->n_weights - first)
        return CKG_ERR_SHAPE;
    if (count == 0)
        return CKG_OK;
    int dev = 0, sms = 0;
    st = device_sms(&dev, &sms);
    if (st != CKG_OK)
        return st;
    uint64_t blocks_needed = ((first + count + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK - first / CKG_ESC_BLOCK + 7) / (kDecodeThreads / 32);
    uint64_t blocks = blocks_needed < (uint64_t)sms * 16 ? blocks_needed : (uint64_t)sms * 16;
    CKG_LAUNCH(decode_kernel, (unsigned)blocks, kDecodeThreads, 0, (cudaStream_t)stream, *p, first, count, out);
    return launched();
}

void ckg_gemv_test_launch(unsigned max_blocks, int warps)
{
    g_test_blocks = max_blocks;
    g_test_warps = warps == 4 || warps == 8 ? warps : 0;
}

ckg_status ckg_gemv_generic(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                            const uint16_t *x, int batch, void *y, ckg_out_type y_type, ckg_stream stream)
{
    GemvArgs A;
    ckg_status st = gemv_args(p, elem_off, rows, cols, x, batch, y, y_type, &A);
    return st != CKG_OK ? st : launch_generic(A, (cudaStream_t)stream);
}

ckg_gemv_path ckg_gemv_path_of(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols, const uint16_t *x)
{
    if (!p)
        return CKG_GEMV_GENERIC_ALIGN;
    if (cols % 32 || cols > 65536)
        return CKG_GEMV_GENERIC_COLS;
    if (elem_off % 32)
        return CKG_GEMV_GENERIC_OFFSET;
    const uint32_t *prow = p->n_escapes ? patch_rows_for(p, elem_off, rows, cols) : NULL;
    if (p->n_escapes && !prow)
        return CKG_GEMV_GENERIC_NO_PATCHES;
    /* the patch list is copied in 16-byte pieces: its buffers 16-byte aligned (cudaMalloc's are) */
    if (((uintptr_t)p->codes & 15) || ((uintptr_t)p->low & 15) || ((uintptr_t)x & 15) ||
        (prow && (((uintptr_t)p->patch_row & 15) || ((uintptr_t)p->patch & 15))))
        return CKG_GEMV_GENERIC_ALIGN;
    return CKG_GEMV_FUSED;
}

ckg_status ckg_gemv(const ckg_planes *p, uint64_t elem_off, uint64_t rows, uint64_t cols,
                    const uint16_t *x, int batch, void *y, ckg_out_type y_type, ckg_stream stream)
{
    GemvArgs A;
    ckg_status st = gemv_args(p, elem_off, rows, cols, x, batch, y, y_type, &A);
    if (st != CKG_OK)
        return st;
    if (ckg_gemv_path_of(p, elem_off, rows, cols, x) != CKG_GEMV_FUSED)
        return launch_generic(A, (cudaStream_t)stream);
    const uint32_t *prow = p->n_escapes ? patch_rows_for(p, elem_off, rows, cols) : NULL;
    if (p->encoding != CKC_ENC_K15)
        return launch_fused<false, false>(A, prow, (cudaStream_t)stream);
    /* K15 mantissas are 16-byte aligned every 128 weights only */
    if (elem_off % 128 || cols % 128)
        return launch_fused<true, true>(A, prow, (cudaStream_t)stream);
    return launch_fused<true, false>(A, prow, (cudaStream_t)stream);
}

} // extern "C"
