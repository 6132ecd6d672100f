/*
 * test_emu_self.cpp — the emulator against the CUDA/PTX definitions, with
 * small kernels written against ckg_arch.h: shuffles with widths (up, down,
 * xor, indexed), votes and reduce, mma.m16n8k16 BF16 fragments against a
 * plain matrix product, and the faults it must refuse (each in a child
 * process that must abort with "ckg-emu: kernel error"): __syncthreads at
 * two different lines, a shuffle whose mask holds an exited lane, a
 * deadlock between a block barrier and a warp collective.
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

template <typename F>
static void must_abort(const char *what, F fn)
{
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        freopen("/dev/null", "w", stderr);
        fn();
        cudaDeviceSynchronize();
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s was not refused", what);
    printf("test_emu_self: refused %s\n", what);
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
    return 0;
}
