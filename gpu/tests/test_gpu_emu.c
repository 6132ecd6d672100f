/*
 * test_gpu_emu.c — checks only the CPU emulator (gpu/emu) can make, since
 * they look at which instructions a kernel used: decode of a range whose
 * first weight is not a multiple of 8 (a row range of a tensor) writes its
 * output with 16-byte stores (the staged fast path), not weight by weight,
 * and writes it right; and the stream model the benchmark's fix relies on: a
 * kernel on a non-blocking stream is not waited for by a legacy-stream
 * cudaMemcpy (the emulator runs it as late as CUDA allows, so such a read
 * sees stale data, the bench_gpu bug), on a blocking stream it is; and a
 * decode long enough that every warp decodes several 1024-weight blocks,
 * so that each reuses its staging buffer (the emulator has 2 SMs: 32 blocks
 * of 8 warps), where a missing __syncwarp is a race.  Linked against the
 * emulated ckgpu only.
 */
#include "ckg_ref.h"
#include "gpu_test_dev.h"

static void stage_reuse_check(uint32_t enc)
{
    const uint64_t n = 3 * 256 * CKG_ESC_BLOCK + 300;   /* 3+ blocks per warp of 32 x 8 */
    uint16_t *w = malloc(n * 2), *out = malloc(n * 2);
    CHECK(w && out, "alloc");
    tu_weights(w, n, 0.02, 0.01);
    tu_packed p;
    tu_pack(enc, w, n, 65536, &p);
    ckg_planes hv = tu_planes(&p);
    uint32_t *idx = calloc((n + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK + 1, 4), bad = 0;
    CHECK(idx && ckg_ref_escape_index(&hv, p.chunk_w, p.prefix, p.n_chunks, idx, &bad) == CKG_OK && !bad, "index");
    ckg_planes v = tu_dev_planes(&p, idx);
    uint16_t *d_out = NULL;
    CU(cudaMalloc((void **)&d_out, n * 2));
    for (uint64_t f = 0; f < 8; f += 5) {   /* the aligned and the gathered read-out */
        CHECK(ckg_decode(&v, f, n - f, d_out, NULL) == CKG_OK, "decode");
        CU(cudaMemcpy(out, d_out, (n - f) * 2, cudaMemcpyDeviceToHost));
        CHECK(memcmp(out, w + f, (n - f) * 2) == 0, "%s decode [%llu, %llu), staging reused, differs",
              ckc_encoding_name(enc), (unsigned long long)f, (unsigned long long)n);
    }
    printf("gpu_emu: %s decode of %llu weights, each warp's stage reused: exact\n", ckc_encoding_name(enc),
           (unsigned long long)n);
    tu_dev_planes_free(&v);
    CU(cudaFree(d_out));
    free(idx);
    free(w);
    free(out);
    tu_free(&p);
}

int main(void)
{
    stage_reuse_check(CKC_ENC_K15);
    stage_reuse_check(CKC_ENC_BSPLIT);
    const uint64_t n = 64 * 1024 + 300;
    const uint32_t encs[] = {CKC_ENC_K15, CKC_ENC_BSPLIT};
    for (int e = 0; e < 2; e++) {
        uint16_t *w = malloc(n * 2), *out = malloc(n * 2);
        CHECK(w && out, "alloc");
        tu_weights(w, n, 0.02, 0.01);
        tu_packed p;
        tu_pack(encs[e], w, n, 65536, &p);
        ckg_planes hv = tu_planes(&p);
        uint64_t n_idx = (n + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK;
        uint32_t *idx = calloc(n_idx + 1, 4), bad = 0;
        CHECK(idx && ckg_ref_escape_index(&hv, p.chunk_w, p.prefix, p.n_chunks, idx, &bad) == CKG_OK && !bad, "index");
        ckg_planes v = tu_dev_planes(&p, idx);
        uint16_t *d_out = NULL;
        CU(cudaMalloc((void **)&d_out, n * 2));
        for (uint64_t first = 0; first < 8; first += 3) {   /* 0, 3, 6: as a row range of 1000 columns from row 3 */
            uint64_t f = first ? 3000 + first : 0, count = n - f - 77;
            unsigned long long st0 = ckg_emu_st16_bytes_ull();
            CHECK(ckg_decode(&v, f, count, d_out, NULL) == CKG_OK, "decode");
            CU(cudaDeviceSynchronize());
            unsigned long long vec = ckg_emu_st16_bytes_ull() - st0;
            CU(cudaMemcpy(out, d_out, count * 2, cudaMemcpyDeviceToHost));
            CHECK(memcmp(out, w + f, count * 2) == 0, "%s decode [%llu, +%llu) differs", ckc_encoding_name(encs[e]),
                  (unsigned long long)f, (unsigned long long)count);
            CHECK(vec >= count * 2 * 9 / 10, "%s decode from weight %llu: only %llu of %llu bytes by 16-byte stores",
                  ckc_encoding_name(encs[e]), (unsigned long long)f, vec, (unsigned long long)count * 2);
            printf("gpu_emu: %s decode from weight %llu: %.1f%% of the output by 16-byte stores\n",
                   ckc_encoding_name(encs[e]), (unsigned long long)f, 100.0 * vec / (count * 2));
        }
        /* streams: decode [0, 4096) on a non-blocking, then a blocking stream */
        for (int blocking = 0; blocking < 2; blocking++) {
            cudaStream_t st;
            CU(cudaStreamCreateWithFlags(&st, blocking ? cudaStreamDefault : cudaStreamNonBlocking));
            CU(cudaMemset(d_out, 0, 8192));
            CHECK(ckg_decode(&v, 0, 4096, d_out, st) == CKG_OK, "decode");
            CU(cudaMemcpy(out, d_out, 8192, cudaMemcpyDeviceToHost));
            int same = memcmp(out, w, 8192) == 0;
            CHECK(same == blocking, "%s stream: the legacy cudaMemcpy %s the decode", blocking ? "blocking" : "non-blocking",
                  same ? "waited for" : "did not wait for");
            CU(cudaStreamSynchronize(st));
            CU(cudaMemcpy(out, d_out, 8192, cudaMemcpyDeviceToHost));
            CHECK(memcmp(out, w, 8192) == 0, "decode on a stream, after synchronising");
            CU(cudaStreamDestroy(st));
        }
        printf("gpu_emu: legacy-stream copies wait for blocking streams only\n");
        tu_dev_planes_free(&v);
        CU(cudaFree(d_out));
        free(idx);
        free(w);
        free(out);
        tu_free(&p);
    }
    return 0;
}
