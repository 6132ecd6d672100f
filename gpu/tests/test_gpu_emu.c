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
 * of 8 warps), where a missing __syncwarp is a race; and that launches ask
 * the device's attributes once per device, not per call (a serving loop
 * makes thousands of calls a second).  Linked against the emulated ckgpu
 * only.
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

/* Fused GEMV and decode calls after the first: no cudaDeviceGetAttribute
 * or cudaFuncSetAttribute (the emulator counts them). */
static void attr_cache_check(void)
{
    const uint64_t rows = 16, cols = 1024, n = rows * cols;
    uint16_t *w = malloc(n * 2), x[1024];
    CHECK(w, "alloc");
    tu_weights(w, n, 0.02, 0.01);
    for (uint64_t i = 0; i < cols; i++)
        x[i] = tu_bf16((float)tu_gauss());
    tu_packed p;
    tu_pack(CKC_ENC_K15, w, n, 1024, &p);
    ckg_planes hv = tu_planes(&p);
    uint32_t *idx = calloc(n / CKG_ESC_BLOCK + 1, 4), bad = 0;
    CHECK(idx && ckg_ref_escape_index(&hv, p.chunk_w, p.prefix, p.n_chunks, idx, &bad) == CKG_OK && !bad, "index");
    ckg_planes v = tu_dev_planes(&p, idx);
    uint32_t *d_prow = dev_copy(NULL, 0, (rows + 1) * 4), *d_patch = dev_copy(NULL, 0, p.n_esc * 4 + 4);
    CHECK(ckg_escape_patches(&v, 0, rows, cols, d_prow, d_patch, NULL) == CKG_OK, "patches");
    v.patch_row = d_prow;
    v.patch = d_patch;
    v.patch_rows = rows;
    v.patch_cols = cols;
    uint16_t *d_x = dev_copy(x, sizeof x, 0), *d_out = dev_copy(NULL, 0, n * 2);
    float *d_y = dev_copy(NULL, 0, rows * 4);
    CHECK(ckg_gemv_path_of(&v, 0, rows, cols, d_x) == CKG_GEMV_FUSED, "not the fused path");
    unsigned long long a0 = ckg_emu_attr_calls_ull(), first = 0;
    for (int i = 0; i < 4; i++) {
        CHECK(ckg_gemv(&v, 0, rows, cols, d_x, 1, d_y, CKG_OUT_F32, NULL) == CKG_OK, "gemv");
        CHECK(ckg_decode(&v, 0, n, d_out, NULL) == CKG_OK, "decode");
        if (i == 0)
            first = ckg_emu_attr_calls_ull() - a0;
    }
    CU(cudaDeviceSynchronize());
    unsigned long long later = ckg_emu_attr_calls_ull() - a0 - first;
    CHECK(later == 0, "3 more GEMV and decode calls asked the device's attributes %llu times (the first %llu)", later,
          first);
    printf("gpu_emu: device attributes asked %llu times by the first GEMV and decode, 0 by the next 3\n", first);
    tu_dev_planes_free(&v);
    CU(cudaFree(d_prow));
    CU(cudaFree(d_patch));
    CU(cudaFree(d_x));
    CU(cudaFree(d_out));
    CU(cudaFree(d_y));
    free(idx);
    free(w);
    tu_free(&p);
}

int main(void)
{
    attr_cache_check();
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
