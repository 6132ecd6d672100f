/*
 * ckg_gemv.cuh — the fused K15/byte-split GEMV (y = W x, batch 1..8) and
 * the upload-time escape patch list it reads; included by ckg_kernels.cu
 * (one translation unit, so the emulator build compiles it too).  The
 * instruction budget and the latency model behind every choice here are in
 * gpu/NOTES.md (gpu/gemv_model.py reads the constants of ckg_tile.h).
 *
 * Work: a tile is 8 rows; a warp step ("unit") is 8 rows x 512 columns, lane
 * (g, t) = (lane/4, lane%4) owning row g, columns [128t, 128t+128) of it.
 * The grid is persistent (one block per SM, ckg_gemv_plan_for); block b
 * takes tile groups b, b + grid, ...  A group is TG tiles, its TG * S units
 * split into CKG_GEMV_SLOTS slots of L consecutive units (a slot never
 * straddles two tiles); warp w does slots [w*SPW, (w+1)*SPW), SPW = slots /
 * warps.  Each slot's partial sums go to shared memory once (no atomics);
 * after the group's barrier, one thread per (batch, row) adds the row's
 * slots in slot order, then its escapes' sum: a fixed reduction order that
 * does not depend on the grid, the warps or the scheduling, so the output is
 * bitwise the same run to run and across launch configurations.
 *
 * Streaming: each warp has a 3-stage cp.async ring; lane (g, t) copies
 * 16-byte pieces t, t+4, ... of row g (so each copy instruction reads
 * 64 contiguous bytes per row) into swizzled slots (code_slot, low_slot)
 * from which the owner of each piece reads its own 64 + 112 (K15) or 128
 * (byte-split) contiguous bytes with 16-byte loads, free of bank conflicts.
 * The ring runs across group boundaries, and the first units are issued
 * before the table is built.
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
 * escapes' column and exact BF16 value) streams through the same cp.async
 * path into shared memory ahead of use, so no chain of dependent global
 * loads is left on the critical path: the row ranks of group i+2 and the
 * entries of group i+1 (their range read from ranks already in shared
 * memory) are copied while group i streams, the entries into the free half
 * of the table (bytes 128..255 of each 256-byte row; 4093 escapes per
 * group, more are read from global memory).  After its units, each warp
 * sums its rows' escapes, w*x in FP32: a lane per escape, 4 escapes per lane
 * in flight (only x at the escape columns is loaded, from L2), in escape
 * order per lane, then a fixed butterfly.
 */
namespace fused {

constexpr int kStages = CKG_GEMV_STAGES;
constexpr int kStepCols = CKG_GEMV_STEP_COLS;          /* columns per unit */
constexpr int kSlots = CKG_GEMV_SLOTS;                 /* slots per group; warps divide it */
constexpr int kRowPieces = CKG_GEMV_ROW_PIECES;        /* 16-byte slots per staged row */
constexpr int kStageBytes = 8 * kRowPieces * 16;       /* 6400 */
constexpr int kLutBytes = CKG_GEMV_LUT_BYTES;          /* 256 code bytes x 32 lanes x 4 B, 256 B apart */
constexpr int kUnroll = CKG_GEMV_PATCH_UNROLL;
constexpr int kMaxRows = kSlots * 8;                   /* rows of a group (TG <= slots) */
constexpr int kEnPieces = kLutBytes / 2 / 2 / 16;      /* 16-byte pieces of one entry buffer: 1024 */
constexpr int kPrWords = 80;                           /* a group's row ranks, aligned: <= 68 used */
constexpr int kPartOff = kLutBytes;                    /* [2][slots][batch][8] slot partials */
constexpr int kPaccOff = kPartOff + 2 * kSlots * CKG_MAX_BATCH * 8 * 4;   /* [2][batch][rows] escape sums */
constexpr int kPrOff = kPaccOff + 2 * CKG_MAX_BATCH * kMaxRows * 4;      /* [3][kPrWords] row ranks */
constexpr int kRingOff = kPrOff + 3 * kPrWords * 4;

__device__ __forceinline__ uint32_t umin(uint32_t a, uint32_t b) { return a < b ? a : b; }

inline int smem_bytes(int warps) { return kRingOff + warps * kStages * kStageBytes; }
static_assert(kRingOff == CKG_GEMV_SMEM_FIXED && kPrWords == 80 && CKG_MAX_BATCH == 8,
              "ckg_tile.h's CKG_GEMV_SMEM_BYTES (which gpu/gemv_model.py checks) must be this layout");

struct Args {
    GemvArgs A;
    const uint32_t *prow;   /* patch ranks of rows 0..rows of this call (16-byte pieces readable), NULL: no escapes */
    const uint32_t *patch;  /* 16-byte aligned */
    uint32_t S, T, TG, NG;  /* units per row, tiles, tiles per group, groups */
    uint32_t L, SPW;        /* units per slot, slots per warp */
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

/* Byte offset of a K15 row's mantissas in their 16-byte piece: a row
 * starting at weight w0 (a multiple of 32) has them at byte w0 / 8 * 7, a
 * multiple of 4; 0 for every row when elem_off and cols are multiples of
 * 128 (SHIFT false). */
__device__ __forceinline__ uint32_t low_skew(const GemvArgs &A, uint32_t r)
{
    return (uint32_t)(((A.elem_off + (uint64_t)r * A.cols) & 127) / 8 * 7) & 15u;
}

/* Issue the copies of unit (tile, step) into a stage (FULL: all 512
 * columns inside the matrix, so only the row decides).  SHIFT (K15 rows
 * that start at a multiple of 32, not of 128, weights: tensor-parallel
 * slices): the mantissas are copied from the 16-byte piece holding their
 * first byte, 29 pieces for 512 columns instead of 28 (piece 28 by lane 0). */
template <bool K15, bool FULL, bool SHIFT>
__device__ __forceinline__ void issue_unit(const GemvArgs &A, const Lane<K15> &L, uint32_t tile, uint32_t step,
                                           uint8_t *stage)
{
    static_assert(K15 || !SHIFT, "byte-split rows are 16-byte aligned at any multiple of 32 weights");
    constexpr int kLP = K15 ? (SHIFT ? 8 : 7) : 8;          /* low pieces per lane (at most) */
    const uint32_t r = tile * 8 + L.g;
    const bool row_ok = r < A.rows;
    const uint32_t ncols = umin((uint32_t)kStepCols, A.cols - step * kStepCols);   /* a multiple of 32 */
    const uint64_t w0 = A.elem_off + (uint64_t)(row_ok ? r : 0) * A.cols + (uint64_t)step * kStepCols;
    const uint8_t *cs = A.P.codes + w0 / 2 + 16 * L.t;
    const uint32_t skew = SHIFT ? (uint32_t)(w0 / 8 * 7) & 15u : 0u;
    const uint8_t *ls = A.P.low + (K15 ? w0 / 8 * 7 - skew : w0) + 16 * L.t;
    const int ncode = (int)(ncols / 32);                    /* valid pieces */
    const int nlow = (int)(K15 ? (skew + ncols * 7 / 8 + 15) / 16 : ncols / 16);
#pragma unroll
    for (int i = 0; i < 4; i++)
        ckg_cp_async16(stage + L.wc[i >> 1] + 64 * i, cs + 64 * i, row_ok && (FULL || L.t + 4 * i < ncode));
#pragma unroll
    for (int i = 0; i < kLP; i++) {
        uint8_t *dst = K15 ? stage + L.wl + 64 * i
                           : stage + L.g * kRowPieces * 16 + 16 * low_slot<K15>(L.g, L.t + 4 * i);
        ckg_cp_async16(dst, ls + 64 * i, row_ok && ((FULL && !SHIFT) || L.t + 4 * i < nlow));
    }
}

template <bool K15, bool SHIFT>
__device__ __forceinline__ void issue(const GemvArgs &A, const Lane<K15> &L, uint32_t tile, uint32_t step, uint8_t *stage)
{
    if ((step + 1) * kStepCols <= A.cols)
        issue_unit<K15, true, SHIFT>(A, L, tile, step, stage);
    else
        issue_unit<K15, false, SHIFT>(A, L, tile, step, stage);
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
 * unit zeroes the x and the weights of 32-column sub-groups past the last
 * column (so that an Inf or NaN there, from the next row, adds nothing).
 * SHIFT: this lane's mantissas start skew (0, 4, 8, 12) bytes into its
 * first staged piece: read as 28 words instead of 7 16-byte loads. */
template <bool K15, bool FULL, bool SHIFT>
__device__ __forceinline__ void compute(const GemvArgs &A, const Lane<K15> &L, const uint8_t *stage, const uint8_t *lut,
                                        uint32_t step, uint32_t skew, float dA[4], float dB[4])
{
    constexpr int kLP = K15 ? 7 : 8, NL = 4 * kLP;          /* low pieces, words per lane */
    uint32_t c[16], m[NL];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint4 v = ckg_ld16(stage + L.rc[i & 1] + 32 * (i >> 1));
        c[4 * i] = v.x; c[4 * i + 1] = v.y; c[4 * i + 2] = v.z; c[4 * i + 3] = v.w;
    }
    if (SHIFT) {
#pragma unroll
        for (int i = 0; i < NL; i++)
            m[i] = *reinterpret_cast<const uint32_t *>(stage + L.rl + skew + 4 * i);
    } else {
#pragma unroll
        for (int i = 0; i < kLP; i++) {
            const uint8_t *src = K15 ? stage + L.rl + 16 * i
                                     : stage + L.g * kRowPieces * 16 + 16 * low_slot<K15>(L.g, kLP * L.t + i);
            uint4 v = ckg_ld16(src);
            m[4 * i] = v.x; m[4 * i + 1] = v.y; m[4 * i + 2] = v.z; m[4 * i + 3] = v.w;
        }
    }
    const uint32_t col0 = step * kStepCols + 128u * L.t;
    const bool xok = FULL || col0 < A.cols;
    const uint16_t *xp = A.x + (size_t)(L.g < A.batch ? L.g : A.batch - 1) * A.cols + (xok ? col0 : 0);
#pragma unroll
    for (int j = 0; j < 4; j++) {                           /* 32-weight sub-groups */
        const bool jok = FULL || col0 + 32u * j < A.cols;   /* A.cols is a multiple of 32 */
        uint4 xq[4];
        uint32_t pr[16];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (FULL)
                xq[q] = ckg_ld16(xp + 32 * j + 8 * q);
            else
                xq[q] = jok ? ckg_ld16(xp + 32 * j + 8 * q) : make_uint4(0, 0, 0, 0);
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
            pr[p] = FULL || jok ? merge<K15>(S, lo) : 0u;
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            mma(dA, xq[q], pr[4 * q], pr[4 * q + 2]);
            mma(dB, xq[q], pr[4 * q + 1], pr[4 * q + 3]);
        }
    }
}

static_assert(kStages == 3, "wait_older_than and the ring assume 3 stages");

/* Rows [r0, r0 + nr) of group grp. */
__device__ __forceinline__ void group_rows(const Args &F, uint32_t grp, uint32_t &r0, uint32_t &nr)
{
    r0 = grp * F.TG * 8;
    nr = umin(F.TG * 8, F.A.rows - r0);
}

/* The units [u0, u1) of this warp in group grp: its slots' units, clipped to
 * the group's tiles (a last group may have fewer than TG). */
__device__ __forceinline__ void units_of(const Args &F, uint32_t grp, int warp, uint32_t &u0, uint32_t &u1)
{
    const uint32_t nt = umin(F.TG, F.T - grp * F.TG), U = nt * F.S, per = F.SPW * F.L;
    u0 = umin((uint32_t)warp * per, U);
    u1 = umin((uint32_t)(warp + 1) * per, U);
}

/* A walk over this warp's units in the order it consumes them; divides
 * once per group, not per unit. */
struct Walk {
    uint32_t grp, u, u1, tile, step;
    __device__ void enter(const Args &F, int warp)   /* first unit of group grp or a later one */
    {
        for (; grp < F.NG; grp += gridDim.x) {
            units_of(F, grp, warp, u, u1);
            if (u < u1) {
                tile = grp * F.TG + u / F.S;
                step = u % F.S;
                return;
            }
        }
    }
    __device__ void start(const Args &F, int warp)
    {
        grp = blockIdx.x;
        u = u1 = tile = step = 0;
        enter(F, warp);
    }
    __device__ bool valid(const Args &F) const { return grp < F.NG; }
    __device__ void next(const Args &F, int warp)
    {
        if (++u < u1) {
            if (++step == F.S) {
                step = 0;
                tile++;
            }
        } else {
            grp += gridDim.x;
            enter(F, warp);
        }
    }
};

/* Wait for this thread's copies committed before its last n commits. */
__device__ __forceinline__ void wait_older_than(uint32_t n)
{
    if (n >= 2)
        ckg_cp_async_wait<2>();
    else if (n == 1)
        ckg_cp_async_wait<1>();
    else
        ckg_cp_async_wait<0>();
}

/* ---- escape patches through shared memory ---------------------------------------
 * A group's row ranks are copied as the 16-byte pieces that hold them (F.prow
 * lies in a 16-byte aligned allocation): rank of row r0 + i at pr[skew + i]. */
__device__ __forceinline__ uint32_t rank_skew(const Args &F, uint32_t r0)
{
    return (uint32_t)(((uintptr_t)(F.prow + r0) & 15) >> 2);
}

__device__ __forceinline__ void issue_ranks(const Args &F, uint32_t grp, uint32_t *pr, int tid)
{
    uint32_t r0, nr;
    group_rows(F, grp, r0, nr);
    const uint32_t skew = rank_skew(F, r0), pieces = (skew + nr + 1 + 3) / 4;
    if ((uint32_t)tid < pieces)
        ckg_cp_async16(pr + 4 * tid, F.prow + r0 - skew + 4 * tid, true);
}

/* Byte offset of entry piece q (4 entries) of entry buffer buf: the free
 * bytes 128..255 of table rows 128*buf + q/8. */
__device__ __forceinline__ uint32_t en_off(int buf, uint32_t q)
{
    return (uint32_t)(128 * buf + (q >> 3)) * 256u + 128u + 16u * (q & 7u);
}

/* The entries of group grp (its ranks in pr) into entry buffer buf, from
 * rank kb = first & ~3, at most kEnPieces pieces (the rest stays global). */
__device__ __forceinline__ void issue_entries(const Args &F, uint32_t grp, const uint32_t *pr, uint8_t *smem, int buf,
                                              int tid, int nthreads)
{
    uint32_t r0, nr;
    group_rows(F, grp, r0, nr);
    const uint32_t skew = rank_skew(F, r0), k0 = pr[skew], k1 = pr[skew + nr], kb = k0 & ~3u;
    const uint32_t pieces = k1 > k0 ? umin((k1 - kb + 3) / 4, (uint32_t)kEnPieces) : 0;
    for (uint32_t q = (uint32_t)tid; q < pieces; q += (uint32_t)nthreads)
        ckg_cp_async16(smem + en_off(buf, q), F.patch + kb + 4 * q, true);
}

/* Escapes of group grp: a warp per row, a lane per escape, kUnroll escapes
 * per lane in flight (entries from shared memory, x at their columns from
 * L2); each lane adds its escapes in rank order (FMA), then a fixed
 * butterfly; lane 0 writes pacc[b][row] once. */
__device__ __forceinline__ void apply_patches(const Args &F, uint32_t grp, const uint32_t *pr, const uint8_t *smem,
                                              int buf, float *pacc, int warp, int W, int lane)
{
    const GemvArgs &A = F.A;
    uint32_t r0, nr;
    group_rows(F, grp, r0, nr);
    const uint32_t skew = rank_skew(F, r0), kb = pr[skew] & ~3u, kcap = kb + 4u * kEnPieces;
    for (uint32_t i = (uint32_t)warp; i < nr; i += (uint32_t)W) {
        const uint32_t lo = pr[skew + i] + CKG_PLANT(1), hi = pr[skew + i + 1];   /* planted fault: rank off by one */
        float s[CKG_MAX_BATCH];
#pragma unroll
        for (int b = 0; b < CKG_MAX_BATCH; b++)
            s[b] = 0.f;
        for (uint32_t k0 = lo; k0 < hi; k0 += 32 * kUnroll) {
            uint32_t e[kUnroll];
            float xv[kUnroll][CKG_MAX_BATCH];
#pragma unroll
            for (int u = 0; u < kUnroll; u++) {
                const uint32_t k = k0 + (uint32_t)lane + 32u * u, q = k - kb;
                e[u] = k >= hi ? 0u
                       : k < kcap ? *reinterpret_cast<const uint32_t *>(smem + en_off(buf, q >> 2) + 4 * (q & 3))
                                  : F.patch[k];
            }
#pragma unroll
            for (int u = 0; u < kUnroll; u++)
#pragma unroll
                for (int b = 0; b < CKG_MAX_BATCH; b++)
                    xv[u][b] = b < A.batch && k0 + (uint32_t)lane + 32u * u < hi
                                   ? bf16f(A.x[(size_t)b * A.cols + (e[u] & 0xFFFFu)]) : 0.f;
#pragma unroll
            for (int u = 0; u < kUnroll; u++) {
                if (k0 + (uint32_t)lane + 32u * u >= hi)
                    break;
                const float wf = ckg_u32_as_f32(e[u] & 0xFFFF0000u);
#pragma unroll
                for (int b = 0; b < CKG_MAX_BATCH; b++)
                    if (b < A.batch)
                        s[b] = fmaf(wf, xv[u][b], s[b]);
            }
        }
#pragma unroll
        for (int b = 0; b < CKG_MAX_BATCH; b++) {
            if (b >= A.batch)
                break;
            for (int o = 16; o > 0; o >>= 1)
                s[b] += ckg_shfl_xor_sync(kFull, s[b], o);
            if (lane == 0)
                pacc[b * kMaxRows + i] = s[b];
        }
    }
}

/* y of group grp: per (batch, row), its tile's slots in slot order, then
 * its escapes. */
__device__ __forceinline__ void write_out(const Args &F, uint32_t grp, const float *part, const float *pacc, int tid,
                                          int nthreads)
{
    const GemvArgs &A = F.A;
    uint32_t r0, nr;
    group_rows(F, grp, r0, nr);
    const uint32_t per_tile = kSlots / F.TG;
    for (uint32_t i = (uint32_t)tid; i < (uint32_t)A.batch * nr; i += (uint32_t)nthreads) {
        const uint32_t b = i / nr, r = i % nr, j0 = (r >> 3) * per_tile;
        float v = part[(j0 * CKG_MAX_BATCH + b) * 8 + (r & 7)];
        for (uint32_t j = j0 + 1; j < j0 + per_tile; j++)
            v += part[(j * CKG_MAX_BATCH + b) * 8 + (r & 7)];
        if (F.prow)
            v += pacc[b * kMaxRows + r];
        const uint64_t o = (uint64_t)b * A.rows + r0 + r;
        if (A.out_bf16)
            reinterpret_cast<uint16_t *>(A.y)[o] = ckg_f32_to_bf16_rn(v);
        else
            reinterpret_cast<float *>(A.y)[o] = v;
    }
}

/* Partials buffer of the i-th group of a block (planted fault 5: one buffer,
 * so a group's slot sums race the reduction of the group before). */
__device__ __forceinline__ uint32_t pbuf(uint32_t i) { return CKG_PLANT(5) ? 0u : (i & 1u); }

/* V: 0 byte-split, 1 K15, 2 K15 with SHIFT (see issue_unit) */
template <int V>
__global__ void __launch_bounds__(256, 1) gemv_fused_kernel(Args F)
{
    constexpr bool K15 = V != 0, SHIFT = V == 2;
    CKG_DYN_SMEM(uint8_t, smem);
    const GemvArgs &A = F.A;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, NT = blockDim.x, W = NT >> 5;
    const uint32_t G = gridDim.x;
    const uint8_t *lut = smem;
    float *const part_all = reinterpret_cast<float *>(smem + kPartOff);
    float *const pacc_all = reinterpret_cast<float *>(smem + kPaccOff);
    uint32_t *const pr_all = reinterpret_cast<uint32_t *>(smem + kPrOff);
    uint8_t *const ring = smem + kRingOff + warp * kStages * kStageBytes, *const ring_end = ring + kStages * kStageBytes;
    Lane<K15> L;
    L.init(lane);

    /* copies first: the ring's first units.  They read the weight planes
     * only, which uploads write by copies, never by a kernel: with
     * programmatic dependent launch (sm_90) they and the table build run
     * while the kernel before this one in the stream still finishes; x,
     * the patch list and y wait for it (ckg_grid_dependency_wait) */
    Walk pf;                                               /* the next unit to copy */
    pf.start(F, warp);
    uint8_t *st_in = ring, *st_out = ring;                 /* stage to copy into / to decode */
    for (int s = 0; s < kStages - 1; s++) {
        if (pf.valid(F)) {
            issue<K15, SHIFT>(A, L, pf.tile, pf.step, st_in);
            pf.next(F, warp);
        }
        st_in = st_in + kStageBytes == ring_end ? ring : st_in + kStageBytes;
        ckg_cp_async_commit();
    }

    /* the table under those loads: the entry of code byte b (see the top of
     * the file) stored for all 32 lanes with 8 16-byte stores, rotated by lane
     * so that a warp's stores spread over the 8 bank groups */
    for (int b = tid; b < 256; b += NT) {
        uint32_t half[2];
        for (int h = 0; h < 2; h++) {
            const int c = (b >> (4 * h)) & 15;
            half[h] = c == (int)CKC_ESCAPE ? (K15 ? 0x7Fu : 0xFFu) : (uint32_t)A.P.codebook.sym[c] << (K15 ? 7 : 8);
        }
        const uint32_t v = half[0] | half[1] << 16;
        const uint4 v4 = make_uint4(v, v, v, v);
        for (int q = 0; q < 8; q++)
            *reinterpret_cast<uint4 *>(smem + b * 256 + 16 * ((q + lane) & 7)) = v4;
    }
    ckg_grid_dependency_wait();                            /* the stream's earlier kernels are done */
    if (F.prow) {                                          /* the ranks of this block's first two groups */
        issue_ranks(F, blockIdx.x, pr_all, tid);
        if (blockIdx.x + G < F.NG)
            issue_ranks(F, blockIdx.x + G, pr_all + kPrWords, tid);
    }
    ckg_cp_async_commit();
    ckg_cp_async_wait<0>();                                /* this thread's ranks (and the first units) */
    ckg_syncthreads();                                     /* the table, every thread's ranks */
    if (F.prow)                                            /* the first group's entries */
        issue_entries(F, blockIdx.x, pr_all, smem, 0, tid, NT);
    ckg_cp_async_commit();

    uint32_t i = 0, since = 0;                             /* group count; commits since the newest patch copies */
    for (uint32_t grp = blockIdx.x; grp < F.NG; grp += G, i++) {
        float *const part = part_all + pbuf(i) * kSlots * CKG_MAX_BATCH * 8;
        float *const pacc = pacc_all + pbuf(i) * CKG_MAX_BATCH * kMaxRows;
        if (F.prow) {   /* entries of the next group (its ranks arrived before the last barrier), ranks of the one after */
            if (grp + G < F.NG)
                issue_entries(F, grp + G, pr_all + ((i + 1) % 3) * kPrWords, smem, (int)((i + 1) & 1), tid, NT);
            if (grp + 2 * G < F.NG)
                issue_ranks(F, grp + 2 * G, pr_all + ((i + 2) % 3) * kPrWords, tid);
            ckg_cp_async_commit();
            since = 0;
        }
        if (i > 0)                                         /* the group before: its slots and escapes, past the barrier */
            write_out(F, grp - G, part_all + pbuf(i - 1) * kSlots * CKG_MAX_BATCH * 8,
                      pacc_all + pbuf(i - 1) * CKG_MAX_BATCH * kMaxRows, tid, NT);

        uint32_t u0, u1;
        units_of(F, grp, warp, u0, u1);
        const uint32_t umid = u0 + (u1 - u0) / 2;          /* the escapes after the first half of the units */
        uint32_t step = u0 % F.S, slot = u0 / F.L, in_slot = 0;   /* column step in the row, slot, unit in the slot */
        uint32_t skew = SHIFT && u0 < u1 ? low_skew(A, (grp * F.TG + u0 / F.S) * 8 + L.g) : 0u;
        float dA[4] = {0.f, 0.f, 0.f, 0.f}, dB[4] = {0.f, 0.f, 0.f, 0.f};
        /* the group's escapes, from shared memory, while the ring's next
         * units are in flight (after the last unit nothing would be: the
         * chain of L2 loads would show at the end of every block) */
        auto patch_step = [&]() {
            if (!F.prow)
                return;
            if (i == 0) {                                  /* the first group's entries, copied after the first barrier */
                wait_older_than(since + 1);
                ckg_syncthreads();
            }
            apply_patches(F, grp, pr_all + (i % 3) * kPrWords, smem, (int)(i & 1), pacc, warp, W, lane);
        };
        for (uint32_t u = u0; u < u1; u++) {
            if (u == umid)
                patch_step();
            if (pf.valid(F)) {
                issue<K15, SHIFT>(A, L, pf.tile, pf.step, st_in);
                pf.next(F, warp);
            }
            st_in = st_in + kStageBytes == ring_end ? ring : st_in + kStageBytes;
            ckg_cp_async_commit();
            since++;
            ckg_cp_async_wait<kStages - 1>();
            if (!CKG_PLANT(2))   /* planted fault: other lanes' copies not waited for */
                ckg_syncwarp();
            if ((step + 1) * kStepCols <= A.cols)
                compute<K15, true, SHIFT>(A, L, st_out, lut, step, skew, dA, dB);
            else
                compute<K15, false, SHIFT>(A, L, st_out, lut, step, skew, dA, dB);
            st_out = st_out + kStageBytes == ring_end ? ring : st_out + kStageBytes;
            if (++in_slot == F.L) {                        /* slot done: its partial sums out, written once */
                if (L.g < A.batch && CKG_PLANT(6)) {       /* planted fault: the tile's slots += into its first, unsynchronised */
                    float *d = part + ((slot - slot % (kSlots / F.TG)) * CKG_MAX_BATCH + L.g) * 8 + 2 * L.t;
                    d[0] += dA[0] + dB[2];
                    d[1] += dA[1] + dB[3];
                } else if (L.g < A.batch) {
                    float *d = part + (slot * CKG_MAX_BATCH + L.g) * 8 + 2 * L.t;
                    d[0] = dA[0] + dB[2];
                    d[1] = dA[1] + dB[3];
                }
                dA[0] = dA[1] = dA[2] = dA[3] = dB[0] = dB[1] = dB[2] = dB[3] = 0.f;
                in_slot = 0;
                slot++;
            }
            if (++step == F.S) {
                step = 0;
                if (SHIFT)                                 /* the next tile's row */
                    skew = low_skew(A, (grp * F.TG + (u + 1) / F.S) * 8 + L.g);
            }
            if (!CKG_PLANT(7))                             /* planted fault: the stage refilled while lanes read it */
                ckg_syncwarp();                            /* the stage is free for the next copy */
        }
        if (u0 == u1)                                      /* no unit in this group (a last, partial one) */
            patch_step();
        if (F.prow)
            wait_older_than(since);                        /* this thread's copies for the groups ahead */
        ckg_syncthreads();
    }
    if (i > 0)
        write_out(F, blockIdx.x + (i - 1) * G, part_all + pbuf(i - 1) * kSlots * CKG_MAX_BATCH * 8,
                  pacc_all + pbuf(i - 1) * CKG_MAX_BATCH * kMaxRows, tid, NT);
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
