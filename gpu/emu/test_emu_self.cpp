/*
 * test_emu_self.cpp — the emulator against the CUDA/PTX definitions, with
 * small kernels written against ckg_arch.h: shuffles with widths (up, down,
 * xor, indexed), votes and reduce, mma.m16n8k16 BF16 fragments against a
 * plain matrix product, and the faults it must refuse (each in a child
 * process that must abort with "ckg-emu: kernel error"): __syncthreads at
 * two different lines, a shuffle whose mask holds an exited lane, a
 * deadlock between a block barrier and a warp collective.  The race
 * detector: each kind of shared-memory race it must report (with the
 * source lines), the same kernels with their barrier it must accept; and
 * the schedule it relies on: with the detector off, a plain += of several
 * threads loses updates (threads are switched inside a read-modify-write)
 * and some cp.async copies, not all, land before their wait_group.
 */
#include "ckg_arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "test_emu_self: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

__global__ void warp_ops(unsigned *out)
{
    const unsigned lane = threadIdx.x, v = lane * 10 + 1;
    out[lane * 8 + 0] = ckg_shfl_up_sync(0xFFFFFFFFu, v, 3, 8);
    out[lane * 8 + 1] = ckg_shfl_down_sync(0xFFFFFFFFu, v, 2, 4);
    out[lane * 8 + 2] = ckg_shfl_xor_sync(0xFFFFFFFFu, v, 5, 32);
    out[lane * 8 + 3] = ckg_shfl_sync(0xFFFFFFFFu, v, 7, 16);
    out[lane * 8 + 4] = ckg_ballot_sync(0xFFFFFFFFu, lane % 3 == 0);
    out[lane * 8 + 5] = (unsigned)ckg_any_sync(0xFFFFFFFFu, lane == 31) | (unsigned)ckg_all_sync(0xFFFFFFFFu, lane < 31) << 1;
    out[lane * 8 + 6] = ckg_reduce_add_sync(0xFFFFFFFFu, lane);
    out[lane * 8 + 7] = ckg_byte_perm(0x44332211u, 0x88776655u, 0x7351u);
}

static uint16_t bf(int v) { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }

/* A: 16x16 row-major, B: 16x8 (k, n), D: 16x8, small integers (exact). */
__global__ void mma_kernel(const uint16_t *A, const uint16_t *B, float *D)
{
    const int l = threadIdx.x, g = l >> 2, t = l & 3;
    auto pa = [&](int r, int c) { return (uint32_t)A[r * 16 + c] | (uint32_t)A[r * 16 + c + 1] << 16; };
    auto pb = [&](int k, int n) { return (uint32_t)B[k * 8 + n] | (uint32_t)B[(k + 1) * 8 + n] << 16; };
    float d[4] = {1.f, 1.f, 1.f, 1.f};
    ckg_mma_bf16_16816(d, pa(g, 2 * t), pa(g + 8, 2 * t), pa(g, 2 * t + 8), pa(g + 8, 2 * t + 8), pb(2 * t, g),
                       pb(2 * t + 8, g));
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

__global__ void bad_barrier(int)
{
    if (threadIdx.x < 32)
        ckg_syncthreads();
    else
        ckg_syncthreads();
}
__global__ void bad_exited_lane(unsigned *out)
{
    if (threadIdx.x == 0)
        return;
    out[threadIdx.x] = ckg_shfl_xor_sync(0xFFFFFFFFu, (unsigned)threadIdx.x, 1);
}
__global__ void bad_deadlock(int)
{
    if (threadIdx.x < 32)
        ckg_syncthreads();   /* warp 0 waits for warp 1, which waits in a collective for lanes of warp 0... */
    ckg_syncwarp();
    if (threadIdx.x >= 32)
        ckg_syncthreads();
}

/* ---- races: mode 0 has the fault, mode 1 the barrier or atomic that orders it ---- */
__global__ void race_cross_warp(unsigned *out, int mode)   /* warp 1 reads what warp 0 wrote */
{
    __shared__ unsigned v[32];
    if (threadIdx.x < 32)
        v[threadIdx.x] = threadIdx.x;
    if (mode)
        ckg_syncthreads();
    if (threadIdx.x >= 32)
        out[threadIdx.x] = v[threadIdx.x - 32];
}
__global__ void race_lanes(unsigned *out, int mode)   /* lane l reads what lane l^1 wrote */
{
    __shared__ unsigned v[32];
    v[threadIdx.x] = threadIdx.x * 3;
    if (mode)
        ckg_syncwarp();
    out[threadIdx.x] = v[threadIdx.x ^ 1];
}
__global__ void race_rmw(unsigned *out, int mode)   /* 64 threads add into one word */
{
    __shared__ unsigned s;
    if (threadIdx.x == 0)
        s = 0;
    ckg_syncthreads();
    if (mode)
        ckg_atomic_add(&s, 1u);
    else
        s += 1;
    ckg_syncthreads();
    if (threadIdx.x == 0)
        out[0] = s;
}
/* lanes copy 16 bytes each with cp.async; lane l reads lane l^1's piece after its own wait */
__global__ void race_cp_wait(const uint4 *src, uint4 *out, int mode)
{
    __shared__ uint4 buf[32];
    ckg_cp_async16(&buf[threadIdx.x], &src[threadIdx.x], true);
    ckg_cp_async_commit();
    ckg_cp_async_wait<0>();
    if (mode)
        ckg_syncwarp();
    out[threadIdx.x] = buf[threadIdx.x ^ 1];
}
/* a ring of one stage, two rounds: lane l reads lane l^1's piece, then every lane refills the stage */
__global__ void race_cp_refill(const uint4 *src, uint4 *out, int mode)
{
    __shared__ uint4 buf[32];
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (int r = 0; r < 2; r++) {
        ckg_cp_async16(&buf[threadIdx.x], &src[32 * r + threadIdx.x], true);
        ckg_cp_async_commit();
        ckg_cp_async_wait<0>();
        ckg_syncwarp();
        acc.x += buf[threadIdx.x ^ 1].x;
        if (mode)
            ckg_syncwarp();
    }
    out[threadIdx.x] = acc;
}
/* a lane reads its own cp.async destination before its wait_group (out: did the copy land already?) */
__global__ void race_cp_early(const uint4 *src, unsigned *out, int)
{
    __shared__ uint4 buf[32];
    __shared__ unsigned spin[32];
    buf[threadIdx.x] = make_uint4(0, 0, 0, 0);
    spin[threadIdx.x] = 0;
    ckg_cp_async16(&buf[threadIdx.x], &src[threadIdx.x], true);
    ckg_cp_async_commit();
    for (int i = 0; i < 64; i++)   /* shared-memory accesses: time passes */
        spin[threadIdx.x] += 1;
    out[threadIdx.x] = buf[threadIdx.x].x != 0;
    ckg_cp_async_wait<0>();
}
/* lanes read shared data that only a shuffle (no barrier) separates from the next store */
__global__ void race_shfl_no_order(unsigned *out, int mode)
{
    __shared__ unsigned v[32];
    v[threadIdx.x] = threadIdx.x;
    ckg_syncwarp();
    unsigned a = v[threadIdx.x ^ 1];
    a += ckg_shfl_xor_sync(0xFFFFFFFFu, a, 1);
    if (mode)
        ckg_syncwarp();
    v[threadIdx.x] = a;
    out[threadIdx.x] = a;
}

/* fn in a child process must abort with a kernel error whose message holds `want`. */
template <typename F>
static void must_abort(const char *what, F fn, const char *want = "")
{
    fflush(stdout);
    int pfd[2];
    CHECK(pipe(pfd) == 0, "pipe");
    pid_t p = fork();
    if (p == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        fn();
        cudaDeviceSynchronize();
        _exit(0);
    }
    close(pfd[1]);
    char msg[4096];
    size_t got = 0;
    ssize_t r;
    while (got + 1 < sizeof msg && (r = read(pfd[0], msg + got, sizeof msg - 1 - got)) > 0)
        got += (size_t)r;
    msg[got] = 0;
    close(pfd[0]);
    int st = 0;
    waitpid(p, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s was not refused", what);
    CHECK(strstr(msg, "ckg-emu: kernel error") && strstr(msg, want), "%s: the report lacks \"%s\": %s", what, want, msg);
    printf("test_emu_self: refused %s\n", what);
    if (*want)
        printf("  %s%s", msg, got && msg[got - 1] == '\n' ? "" : "\n");
}

static void race_checks(void)
{
    unsigned *o;
    uint4 *src, *o4;
    CHECK(cudaMalloc((void **)&o, 64 * 4) == cudaSuccess && cudaMalloc((void **)&src, 64 * 16) == cudaSuccess &&
          cudaMalloc((void **)&o4, 32 * 16) == cudaSuccess, "alloc");
    for (unsigned i = 0; i < 64; i++)
        src[i] = make_uint4(i + 1, 0, 0, 0);
    const cudaStream_t s0 = 0;
    /* the ordered versions run clean and compute what they should */
    CHECK(CKG_LAUNCH(race_cross_warp, 1, 64, 0, s0, o, 1) == cudaSuccess && o[40] == 8, "cross warp");
    CHECK(CKG_LAUNCH(race_lanes, 1, 32, 0, s0, o, 1) == cudaSuccess && o[5] == 12, "lanes");
    CHECK(CKG_LAUNCH(race_rmw, 1, 64, 0, s0, o, 1) == cudaSuccess && o[0] == 64, "atomics: %u", o[0]);
    CHECK(CKG_LAUNCH(race_cp_wait, 1, 32, 0, s0, src, o4, 1) == cudaSuccess && o4[4].x == 6, "cp wait");
    CHECK(CKG_LAUNCH(race_cp_refill, 1, 32, 0, s0, src, o4, 1) == cudaSuccess && o4[4].x == 6 + 38, "cp refill");
    CHECK(CKG_LAUNCH(race_shfl_no_order, 1, 32, 0, s0, o, 1) == cudaSuccess && o[0] == 1, "shfl");
    printf("test_emu_self: the race detector accepts the ordered kernels\n");
    must_abort("a load of another warp's store without __syncthreads",
               [&] { CKG_LAUNCH(race_cross_warp, 1, 64, 0, s0, o, 0); }, "test_emu_self.cpp:");
    must_abort("a load of another lane's store without __syncwarp", [&] { CKG_LAUNCH(race_lanes, 1, 32, 0, s0, o, 0); },
               "shared-memory race");
    must_abort("a plain += by several threads", [&] { CKG_LAUNCH(race_rmw, 1, 64, 0, s0, o, 0); }, "shared-memory race");
    must_abort("a load of another lane's cp.async without __syncwarp after the wait",
               [&] { CKG_LAUNCH(race_cp_wait, 1, 32, 0, s0, src, o4, 0); }, "cp.async");
    must_abort("a stage refilled by cp.async while another lane reads it",
               [&] { CKG_LAUNCH(race_cp_refill, 1, 32, 0, s0, src, o4, 0); }, "cp.async");
    must_abort("a load of its own cp.async destination before the wait",
               [&] { CKG_LAUNCH(race_cp_early, 1, 32, 0, s0, src, o, 0); }, "before its cp.async.wait_group");
    must_abort("a store separated from other lanes' loads by a shuffle only",
               [&] { CKG_LAUNCH(race_shfl_no_order, 1, 32, 0, s0, o, 0); }, "shared-memory race");
    /* with the detector off: what the schedule does to such kernels */
    setenv("CKG_EMU_RACES", "0", 1);
    unsigned lost = 0, early = 0;
    const unsigned runs = 8;
    for (unsigned k = 0; k < runs; k++) {
        CHECK(CKG_LAUNCH(race_rmw, 1, 64, 0, s0, o, 0) == cudaSuccess, "launch");
        lost += 64 - o[0];
        CHECK(CKG_LAUNCH(race_cp_early, 1, 32, 0, s0, src, o, 0) == cudaSuccess, "launch");
        for (int l = 0; l < 32; l++)
            early += o[l];
    }
    unsetenv("CKG_EMU_RACES");
    CHECK(lost > 0, "no update of a plain += was lost in %u runs: threads never switched inside it", runs);
    CHECK(early > 0 && early < 32 * runs, "%u of %u cp.async copies landed before their wait_group", early, 32 * runs);
    printf("test_emu_self: detector off: plain += lost %u of %u updates, %u of %u copies landed before the wait\n",
           lost, 64 * runs, early, 32 * runs);
}

int main()
{
    unsigned *o;
    CHECK(cudaMalloc((void **)&o, 32 * 8 * 4) == cudaSuccess, "alloc");
    CHECK(CKG_LAUNCH(warp_ops, 1, 32, 0, (cudaStream_t)0, o) == cudaSuccess, "launch");
    unsigned ballot = 0;
    for (int l = 0; l < 32; l += 3)
        ballot |= 1u << l;
    for (unsigned l = 0; l < 32; l++) {
        unsigned v = l * 10 + 1, *r = o + l * 8;
        CHECK(r[0] == (l % 8 >= 3 ? v - 30 : v), "shfl_up lane %u: %u", l, r[0]);
        CHECK(r[1] == (l % 4 + 2 < 4 ? v + 20 : v), "shfl_down lane %u: %u", l, r[1]);
        CHECK(r[2] == (l ^ 5) * 10 + 1, "shfl_xor lane %u: %u", l, r[2]);
        CHECK(r[3] == ((l & ~15u) + 7) * 10 + 1, "shfl lane %u: %u", l, r[3]);
        CHECK(r[4] == ballot && r[5] == 1 && r[6] == 496 && r[7] == 0x88446622u, "votes lane %u", l);
    }
    uint16_t *A, *B;
    float *D;
    CHECK(cudaMalloc((void **)&A, 512) == cudaSuccess && cudaMalloc((void **)&B, 256) == cudaSuccess &&
          cudaMalloc((void **)&D, 512) == cudaSuccess, "alloc");
    int a[16][16], b[16][8];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            a[i][j] = (i * 7 + j * 3) % 11 - 5;
            A[i * 16 + j] = bf(a[i][j]);
            if (j < 8) {
                b[i][j] = (i * 5 + j * 13) % 9 - 4;
                B[i * 8 + j] = bf(b[i][j]);
            }
        }
    CHECK(CKG_LAUNCH(mma_kernel, 1, 32, 0, (cudaStream_t)0, A, B, D) == cudaSuccess, "launch");
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            int want = 1;
            for (int k = 0; k < 16; k++)
                want += a[i][k] * b[k][j];
            CHECK(D[i * 8 + j] == (float)want, "mma D[%d][%d] = %g, want %d", i, j, D[i * 8 + j], want);
        }
    printf("test_emu_self: shuffles, votes, byte_perm and mma.m16n8k16 as the PTX ISA defines them\n");
    must_abort("__syncthreads at two lines", [] { CKG_LAUNCH(bad_barrier, 1, 64, 0, (cudaStream_t)0, 0); });
    must_abort("a shuffle over an exited lane", [&] { CKG_LAUNCH(bad_exited_lane, 1, 32, 0, (cudaStream_t)0, o); });
    must_abort("a deadlock", [] { CKG_LAUNCH(bad_deadlock, 1, 64, 0, (cudaStream_t)0, 0); });
    race_checks();
    return 0;
}
