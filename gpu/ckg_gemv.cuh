/*
 * ckg_gemv.cuh — the fused K15/byte-split GEMV (y = W x, batch 1..8) and
 * the upload-time escape patch list it reads; included by ckg_kernels.cu
 * (one translation unit, so the emulator build compiles it too).  The
 * instruction budget behind every choice here is in gpu/NOTES.md.
 *
 * Work: a tile is 8 rows; a warp step ("unit") is 8 rows x 512 columns, lane
 * (g, t) = (lane/4, lane%4) owning row g, columns [128t, 128t+128) of it.
 * The grid is persistent (one block per SM); block b takes tile groups b,
 * b + grid, ...  A group is TG tiles with TG * steps-per-row a multiple of
 * the block's warps, and the warps split the group's units evenly (split-K
 * inside the block), adding their partial sums into shared memory.
 *
 * Streaming: each warp has a 3-stage cp.async ring; lane (g, t) copies
 * 16-byte pieces t, t+4, ... of row g (so each copy instruction reads
 * 64 contiguous bytes per row) into swizzled slots (code_slot, low_slot)
 * from which the owner of each piece reads its own 64 + 112 (K15) or 128
 * (byte-split) contiguous bytes with 16-byte loads, free of bank conflicts.
 *
 * Decode: a BF16 pair (weights 2p, 2p+1) is one code byte; its two symbols
 * come from a 256-entry shared table replicated per lane (entry of code byte
 * b for lane l at b*256 + 4l: the address is one byte permute of the code
 * word and 4l, every lane hits its own bank).  The table gives
 * sym << 7 (or << 8) in each half; for code 15 it gives the low-part mask
 * instead, and the merge  (S & ~M) | (low & M & ~S)  then yields +0.0 for an
 * escaped weight: escapes contribute exactly nothing to the MMA.
 * MMA: mma.m16n8k16 with A = x^T (batch in M, rows 8..15 zero), B = W^T
 * (8 rows in N), FP32 accumulators.
 *
 * Escapes: the patch list (built at upload by patch_kernel: per row, the
 * escapes' column and exact BF16 value) is applied once per group, outside
 * the unit loop: a warp per row, a lane per escape, w*x in FP32, a warp sum.
 */

namespace fused {

constexpr int kStages = 3;
constexpr int kStepCols = 512;                         /* columns per unit */
constexpr int kRowPieces = 50;                         /* 16-byte slots per staged row */
constexpr int kStageBytes = 8 * kRowPieces * 16;       /* 6400 */
constexpr int kLutBytes = 256 * 256;                   /* 256 code bytes x 32 lanes x 4 B, 256 B apart */
constexpr int kMaxTG = 8;                              /* tiles per group (<= warps) */
constexpr int kAccRows = kMaxTG * 8;
constexpr int kAccFloats = 2 * CKG_MAX_BATCH * kAccRows; /* two groups in flight */
constexpr int kAccOff = kLutBytes;
constexpr int kRingOff = kLutBytes + kAccFloats * 4;

__device__ __forceinline__ uint32_t umin(uint32_t a, uint32_t b) { return a < b ? a : b; }

inline int smem_bytes(int warps) { return kRingOff + warps * kStages * kStageBytes; }

struct Args {
    GemvArgs A;
    const uint32_t *prow;   /* patch ranks of rows 0..rows of this call, NULL: no escapes */
    const uint32_t *patch;
    uint32_t S, T, TG, NG;  /* units per row, tiles, tiles per group, groups */
};

/* Slot of code piece q (0..15) of a staged row: lane t reads pieces 4t..4t+3,
 * so that for each i the 4 lanes of a row (and, with rows 50 slots apart,
 * the next row) hit 8 different 16-byte bank groups. */
__device__ __forceinline__ int code_slot(int q) { return (q & ~3) | ((q & 3) ^ ((q >> 3) & 1)); }

/* Slot of low piece q of row g: K15 lane t reads 7t..7t+6 (7t is already
 * spread over bank groups; odd rows shifted by 2), byte-split lane t reads
 * 8t..8t+7, rotated by 2t, odd rows shifted by 1. */
template <bool K15>
__device__ __forceinline__ int low_slot(int g, int q)
{
    return K15 ? 16 + 2 * (g & 1) + q : 16 + (g & 1) + ((q & ~7) | ((q + 2 * (q >> 3)) & 7));
}

/* Per-lane constants: byte offsets of this lane's copy targets and reads
 * within a stage (see code_slot, low_slot). */
template <bool K15>
struct Lane {
    int g, t;
    uint32_t lanebase;          /* 4 * lane: this lane's column of the table */
    int wc[2], wl;              /* copy targets: codes pieces t+4i (i < 2: wc[0] + 64i, else wc[1] + 64i), K15 low */
    int rc[2], rl;              /* reads: own codes pieces (rc[i&1] + 32(i>>1)), own K15 low pieces (rl + 16i) */
    __device__ void init(int lane)
    {
        g = lane >> 2;
        t = lane & 3;
        lanebase = 4u * lane;
        const int row = g * kRowPieces * 16, tb = t >> 1;
        wc[0] = row + 16 * t;
        wc[1] = row + 16 * (t ^ 1);
        wl = row + 16 * low_slot<K15>(g, t);
        rc[0] = row + 16 * (4 * t + tb);
        rc[1] = row + 16 * (4 * t + (1 - tb));
        rl = row + 16 * low_slot<K15>(g, 7 * t);
    }
};

/* Issue the copies of unit (tile, step) into a stage (FULL: all 512
 * columns inside the matrix, so only the row decides). */
template <bool K15, bool FULL>
__device__ __forceinline__ void issue_unit(const GemvArgs &A, const Lane<K15> &L, uint32_t tile, uint32_t step,
                                           uint8_t *stage)
{
    constexpr int kLP = K15 ? 7 : 8;                        /* low pieces per lane */
    const uint32_t r = tile * 8 + L.g;
    const bool row_ok = r < A.rows;
    const uint32_t ncols = umin((uint32_t)kStepCols, A.cols - step * kStepCols);   /* a multiple of 128 */
    const uint64_t w0 = A.elem_off + (uint64_t)(row_ok ? r : 0) * A.cols + (uint64_t)step * kStepCols;
    const uint8_t *cs = A.P.codes + w0 / 2 + 16 * L.t;
    const uint8_t *ls = A.P.low + (K15 ? w0 / 8 * 7 : w0) + 16 * L.t;
    const int ncode = (int)(ncols / 32), nlow = (int)(K15 ? ncols * 7 / 128 : ncols / 16);   /* valid pieces */
#pragma unroll
    for (int i = 0; i < 4; i++)
        ckg_cp_async16(stage + L.wc[i >> 1] + 64 * i, cs + 64 * i, row_ok && (FULL || L.t + 4 * i < ncode));
#pragma unroll
    for (int i = 0; i < kLP; i++) {
        uint8_t *dst = K15 ? stage + L.wl + 64 * i
                           : stage + L.g * kRowPieces * 16 + 16 * low_slot<K15>(L.g, L.t + 4 * i);
        ckg_cp_async16(dst, ls + 64 * i, row_ok && (FULL || L.t + 4 * i < nlow));
    }
}

template <bool K15>
__device__ __forceinline__ void issue(const GemvArgs &A, const Lane<K15> &L, uint32_t tile, uint32_t step, uint8_t *stage)
{
    if ((step + 1) * kStepCols <= A.cols)
        issue_unit<K15, true>(A, L, tile, step, stage);
    else
        issue_unit<K15, false>(A, L, tile, step, stage);
}

/* Table entry of byte k of code word cw: the address is byte k of cw in
 * bits 8..15 over 4*lane (lanebase < 256). */
__device__ __forceinline__ uint32_t lut_at(const uint8_t *lut, uint32_t cw, int k, uint32_t lanebase)
{
    uint32_t a = ckg_byte_perm(cw, lanebase, 0x5504u | ((unsigned)k << 4));
    return *reinterpret_cast<const uint32_t *>(lut + a);
}

/* BF16 pair from table entry S and low bits lo under mask M: S outside M;
 * inside, lo where S is 0 (a symbol) and 0 where S is the mask (an escape).
 * One LOP3. */
template <bool K15>
__device__ __forceinline__ uint32_t merge(uint32_t S, uint32_t lo)
{
    constexpr uint32_t M = K15 ? 0x007F007Fu : 0x00FF00FFu;
    return S ^ ((S | lo) & M);
}

/* D += A*B, A = a 16-byte x load (row g: a0, a2; row g+8: a1, a3), B = W^T. */
__device__ __forceinline__ void mma(float d[4], const uint4 &a, uint32_t b0, uint32_t b1)
{
    if (CKG_PLANT(3))   /* planted fault: B's two k-halves swapped */
        ckg_mma_bf16_16816(d, a.x, a.y, a.z, a.w, b1, b0);
    else
        ckg_mma_bf16_16816(d, a.x, a.y, a.z, a.w, b0, b1);
}

/* Decode this lane's 128 weights of a staged unit and run its 32 MMAs.  An x
 * load of 8 columns is the A fragment as it is: pairs 0 and 2 (columns
 * 0,1,4,5) are row g of A and go with dA, pairs 1 and 3 are row g+8 and go
 * with dB; the other half of each accumulator is discarded.  Rows g >= batch
 * of D are never read, so in a FULL unit (all 512 columns inside the
 * matrix) those lanes load x row batch-1 instead of zeros; only a partial
 * unit zeroes the x of lanes past the last column. */
template <bool K15, bool FULL>
__device__ __forceinline__ void compute(const GemvArgs &A, const Lane<K15> &L, const uint8_t *stage, const uint8_t *lut,
                                        uint32_t step, float dA[4], float dB[4])
{
    constexpr int kLP = K15 ? 7 : 8, NL = 4 * kLP;          /* low pieces, words per lane */
    uint32_t c[16], m[NL];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint4 v = ckg_ld16(stage + L.rc[i & 1] + 32 * (i >> 1));
        c[4 * i] = v.x; c[4 * i + 1] = v.y; c[4 * i + 2] = v.z; c[4 * i + 3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < kLP; i++) {
        const uint8_t *src = K15 ? stage + L.rl + 16 * i
                                 : stage + L.g * kRowPieces * 16 + 16 * low_slot<K15>(L.g, kLP * L.t + i);
        uint4 v = ckg_ld16(src);
        m[4 * i] = v.x; m[4 * i + 1] = v.y; m[4 * i + 2] = v.z; m[4 * i + 3] = v.w;
    }
    const uint32_t col0 = step * kStepCols + 128u * L.t;
    const bool xok = FULL || col0 < A.cols;
    const uint16_t *xp = A.x + (size_t)(L.g < A.batch ? L.g : A.batch - 1) * A.cols + (xok ? col0 : 0);
#pragma unroll
    for (int j = 0; j < 4; j++) {                           /* 32-weight sub-groups */
        uint4 xq[4];
        uint32_t pr[16];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (FULL)
                xq[q] = ckg_ld16(xp + 32 * j + 8 * q);
            else
                xq[q] = xok ? ckg_ld16(xp + 32 * j + 8 * q) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int p = 0; p < 16; p++) {
            const uint32_t S = lut_at(lut, c[4 * j + (p >> 2)], p & 3, L.lanebase);
            uint32_t lo;
            if (K15) {   /* mantissas 2p, 2p+1 at bits 14p.. of the sub-group's 7 words */
                const int bit = 14 * p, w = 7 * j + (bit >> 5), s = bit & 31;
                const uint32_t x = s == 0 ? m[w] : s <= 18 ? m[w] >> s : ckg_funnelshift_r(m[w], m[w + 1], s);
                lo = ckg_byte_perm(x, x << 9, 0x7610u);
            } else {     /* low bytes 2p, 2p+1 to bytes 0 and 2 */
                lo = ckg_byte_perm(m[8 * j + (p >> 1)], 0u, (p & 1) ? 0x4342u : 0x4140u);
            }
            pr[p] = merge<K15>(S, lo);
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            mma(dA, xq[q], pr[4 * q], pr[4 * q + 2]);
            mma(dB, xq[q], pr[4 * q + 1], pr[4 * q + 3]);
        }
    }
}

/* The units [u0, u1) of this warp in group grp. */
__device__ __forceinline__ void units_of(const Args &F, uint32_t grp, int warp, int W, uint32_t &u0, uint32_t &u1)
{
    const uint32_t t0 = grp * F.TG, nt = umin(F.TG, F.T - t0), U = nt * F.S;
    u0 = U * warp / W;
    u1 = U * (warp + 1) / W;
}

/* A walk over this warp's units in the order it consumes them; divides
 * once per group, not per unit. */
struct Walk {
    uint32_t grp, u, u1, tile, step;
    __device__ void enter(const Args &F, int warp, int W)   /* first unit of group grp or a later one */
    {
        for (; grp < F.NG; grp += gridDim.x) {
            units_of(F, grp, warp, W, u, u1);
            if (u < u1) {
                tile = grp * F.TG + u / F.S;
                step = u % F.S;
                return;
            }
        }
    }
    __device__ void start(const Args &F, int warp, int W)
    {
        grp = blockIdx.x;
        u = u1 = tile = step = 0;
        enter(F, warp, W);
    }
    __device__ bool valid(const Args &F) const { return grp < F.NG; }
    __device__ void next(const Args &F, int warp, int W)
    {
        if (++u < u1) {
            if (++step == F.S) {
                step = 0;
                tile++;
            }
        } else {
            grp += gridDim.x;
            enter(F, warp, W);
        }
    }
};

/* Escapes of the group's rows [r0, r0 + nr): a warp per row, a lane per
 * escape; each adds exactly w*x (FP32) into acc[b][row - r0]. */
__device__ __forceinline__ void apply_patches(const Args &F, uint32_t r0, uint32_t nr, float *acc, int warp, int W,
                                              int lane)
{
    const GemvArgs &A = F.A;
    for (uint32_t i = warp; i < nr; i += W) {
        const uint32_t lo = F.prow[r0 + i] + CKG_PLANT(1), hi = F.prow[r0 + i + 1];  /* planted fault: rank off by one */
        float s[CKG_MAX_BATCH];
#pragma unroll
        for (int b = 0; b < CKG_MAX_BATCH; b++)
            s[b] = 0.f;
        for (uint32_t k = lo + lane; k < hi; k += 32) {
            const uint32_t e = F.patch[k], col = e & 0xFFFFu;
            const float wf = ckg_u32_as_f32(e & 0xFFFF0000u);
#pragma unroll
            for (int b = 0; b < CKG_MAX_BATCH; b++)
                if (b < A.batch)
                    s[b] += wf * bf16f(A.x[(size_t)b * A.cols + col]);
        }
#pragma unroll
        for (int b = 0; b < CKG_MAX_BATCH; b++) {
            if (b >= A.batch)
                break;
            for (int o = 16; o > 0; o >>= 1)
                s[b] += ckg_shfl_xor_sync(kFull, s[b], o);
            if (lane == 0)
                ckg_atomic_add_f32(&acc[b * kAccRows + i], s[b]);
        }
    }
}

template <bool K15>
__global__ void __launch_bounds__(256, 1) gemv_fused_kernel(Args F)
{
    CKG_DYN_SMEM(uint8_t, smem);
    const GemvArgs &A = F.A;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, W = blockDim.x >> 5;
    const uint8_t *lut = smem;
    float *acc_all = reinterpret_cast<float *>(smem + kAccOff);
    uint8_t *const ring = smem + kRingOff + warp * kStages * kStageBytes, *const ring_end = ring + kStages * kStageBytes;
    Lane<K15> L;
    L.init(lane);

    /* table: entry of code byte b for lane l (see the top of the file) */
    for (int i = tid; i < 256 * 32; i += blockDim.x) {
        const int b = i >> 5, l = i & 31;
        uint32_t half[2];
        for (int h = 0; h < 2; h++) {
            const int c = (b >> (4 * h)) & 15;
            half[h] = c == (int)CKC_ESCAPE ? (K15 ? 0x7Fu : 0xFFu) : (uint32_t)A.P.codebook.sym[c] << (K15 ? 7 : 8);
        }
        *reinterpret_cast<uint32_t *>(smem + b * 256 + 4 * l) = half[0] | half[1] << 16;
    }
    for (int i = tid; i < kAccFloats; i += blockDim.x)
        acc_all[i] = 0.f;
    ckg_syncthreads();

    Walk pf;                                               /* the next unit to copy */
    pf.start(F, warp, W);
    uint8_t *st_in = ring, *st_out = ring;                 /* stage to copy into / to decode */
    for (int s = 0; s < kStages - 1; s++) {
        if (pf.valid(F)) {
            issue<K15>(A, L, pf.tile, pf.step, st_in);
            pf.next(F, warp, W);
        }
        st_in = st_in + kStageBytes == ring_end ? ring : st_in + kStageBytes;
        ckg_cp_async_commit();
    }

    uint32_t parity = 0;
    for (uint32_t grp = blockIdx.x; grp < F.NG; grp += gridDim.x, parity ^= 1) {
        /* planted fault 5: one accumulator buffer, so the flush below races the next group's adds */
        float *acc = acc_all + (CKG_PLANT(5) ? 0u : parity) * CKG_MAX_BATCH * kAccRows;
        const uint32_t r0 = grp * F.TG * 8, nr = umin(F.TG * 8, A.rows - r0);
        if (F.prow)
            apply_patches(F, r0, nr, acc, warp, W, lane);

        uint32_t u0, u1;
        units_of(F, grp, warp, W, u0, u1);
        uint32_t tl = u0 / F.S, step = u0 % F.S;           /* tile within the group, step within the row */
        float dA[4] = {0.f, 0.f, 0.f, 0.f}, dB[4] = {0.f, 0.f, 0.f, 0.f};
        for (uint32_t u = u0; u < u1; u++) {
            if (pf.valid(F)) {
                issue<K15>(A, L, pf.tile, pf.step, st_in);
                pf.next(F, warp, W);
            }
            st_in = st_in + kStageBytes == ring_end ? ring : st_in + kStageBytes;
            ckg_cp_async_commit();
            ckg_cp_async_wait<kStages - 1>();
            if (!CKG_PLANT(2))   /* planted fault: other lanes' copies not waited for */
                ckg_syncwarp();
            if ((step + 1) * kStepCols <= A.cols)
                compute<K15, true>(A, L, st_out, lut, step, dA, dB);
            else
                compute<K15, false>(A, L, st_out, lut, step, dA, dB);
            st_out = st_out + kStageBytes == ring_end ? ring : st_out + kStageBytes;
            if (++step == F.S || u + 1 == u1) {            /* tile done: its partial sums out */
                if (L.g < A.batch && CKG_PLANT(6)) {   /* planted fault: a plain += where warps add into one sum */
                    acc[L.g * kAccRows + tl * 8 + 2 * L.t] += dA[0] + dB[2];
                    acc[L.g * kAccRows + tl * 8 + 2 * L.t + 1] += dA[1] + dB[3];
                } else if (L.g < A.batch) {
                    ckg_atomic_add_f32(&acc[L.g * kAccRows + tl * 8 + 2 * L.t], dA[0] + dB[2]);
                    ckg_atomic_add_f32(&acc[L.g * kAccRows + tl * 8 + 2 * L.t + 1], dA[1] + dB[3]);
                }
                dA[0] = dA[1] = dA[2] = dA[3] = dB[0] = dB[1] = dB[2] = dB[3] = 0.f;
                if (step == F.S) {
                    step = 0;
                    tl++;
                }
            }
            if (!CKG_PLANT(7))                             /* planted fault: the stage refilled while lanes read it */
                ckg_syncwarp();                            /* the stage is free for the next copy */
        }
        ckg_syncthreads();
        for (uint32_t i = tid; i < (uint32_t)A.batch * nr; i += blockDim.x) {
            const uint32_t b = i / nr, r = i % nr;
            const float v = acc[b * kAccRows + r];
            const uint64_t o = (uint64_t)b * A.rows + r0 + r;
            if (A.out_bf16)
                reinterpret_cast<uint16_t *>(A.y)[o] = ckg_f32_to_bf16_rn(v);
            else
                reinterpret_cast<float *>(A.y)[o] = v;
            acc[b * kAccRows + r] = 0.f;
        }
    }
    ckg_cp_async_wait<0>();
}

/* ---- patch list: a warp per row (and one for the end rank) ---------------------- */
__global__ void __launch_bounds__(256) patch_kernel(ckg_planes P, uint64_t elem_off, uint32_t rows, uint32_t cols,
                                                    uint32_t *prow, uint32_t *patch)
{
    const int lane = threadIdx.x & 31;
    const uint64_t r = (uint64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r > rows)
        return;
    const bool k15 = P.encoding == CKC_ENC_K15;
    const uint64_t p = elem_off + r * cols;                /* a multiple of 32 */
    const uint64_t nidx = (P.n_weights + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK;
    /* rank of p: the index entry of its 1024-block plus the escapes before p in it */
    const uint64_t q0 = (p & ~(uint64_t)(CKG_ESC_BLOCK - 1)) + (uint64_t)kGroup * lane;
    uint32_t n = 0;
    if (q0 < p) {
        uint32_t cw[4];
        load_codes(P.codes, q0, cw);
        n = ckg_esc_count32(cw);
    }
    n = ckg_reduce_add_sync(kFull, n);
    uint32_t k = p / CKG_ESC_BLOCK < nidx ? P.esc_index[p / CKG_ESC_BLOCK] + n : (uint32_t)P.n_escapes;
    if (lane == 0)
        prow[r] = k;
    if (r == rows)
        return;
    for (uint32_t c0 = 0; c0 < cols; c0 += 32 * kGroup) {
        const uint32_t col = c0 + (uint32_t)kGroup * lane;
        uint32_t cw[4] = {0, 0, 0, 0};
        if (col < cols)
            load_codes(P.codes, p + col, cw);
        const unsigned cnt = ckg_esc_count32(cw);
        unsigned incl = cnt;
#pragma unroll
        for (int dd = 1; dd < 32; dd <<= 1) {
            unsigned v = ckg_shfl_up_sync(kFull, incl, dd);
            if (lane >= dd)
                incl += v;
        }
        uint64_t kk = (uint64_t)k + incl - cnt;
        for (int w = 0; w < 4; w++)
            for (uint32_t bits = ckg_esc_bits8(cw[w]); bits; bits &= bits - 1, kk++) {
                const uint32_t j = 8 * w + ckg_ffs0(bits) / 4;
                if (kk < P.n_escapes)                      /* else corrupt: the index check reports it */
                    patch[kk] = (col + j) | (uint32_t)ckc_join(k15, esc_sym(P, kk), ckc_low_at(k15, P.low, p + col + j)) << 16;
            }
        k += ckg_shfl_sync(kFull, incl, 31);
    }
}

} // namespace fused
