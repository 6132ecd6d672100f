/*
 * test_gpu_kernels.c — the CPU references (gpu/ckg_ref.c) against the
 * original weights and the codec's ckc_decode_chunk, then, when a CUDA
 * device is present, every kernel against those references: escape index
 * and decode bit for bit, GEMV within ckg_gemv_tolerance, every output
 * written (outputs are poisoned with NaN first), escapes exact, planes at
 * unaligned addresses handled, the same output bits run to run and on any
 * grid and block size.  Without a device the
 * device part prints "SKIP device part: no CUDA device" and the test passes
 * (gpu/check.sh reports it as SKIP, and ctest's gpu-emu entries as a
 * failure).  --small: one case only (compute-sanitizer's run).
 */
#include "ckg_ref.h"
#include "gpu_test_dev.h"

typedef struct {
    uint32_t enc;
    uint64_t n, chunk_w;
    double outliers;  /* tu_weights' outliers; < 0: NO_ESCAPES or MOST_ESCAPES below */
} tcase;

#define NO_ESCAPES -1.0    /* 6 sign/exponent pairs: every symbol has a code */
#define MOST_ESCAPES -2.0  /* ~100 exponents, equally likely: most weights escape */

/* Weights of a kind tu_weights does not make; products stay finite. */
static void kind_weights(uint16_t *w, uint64_t n, double kind)
{
    for (uint64_t i = 0; i < n; i++) {
        uint16_t sign = (uint16_t)((tu_rand() & 1) << 15), mant = (uint16_t)(tu_rand() & 0x7F);
        unsigned e = kind == NO_ESCAPES ? 122 + (unsigned)(tu_rand() % 3) : 77 + (unsigned)(tu_rand() % 100);
        w[i] = (uint16_t)(sign | e << 7 | mant);
    }
}

typedef struct {
    uint64_t rows, cols, elem_off;
} gshape;

static uint32_t *cpu_index(const tu_packed *p)
{
    ckg_planes v = tu_planes(p);
    uint32_t *idx = calloc((p->n + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK + 1, 4), bad = 99;
    CHECK(idx, "alloc");
    CHECK(ckg_ref_escape_index(&v, p->chunk_w, p->prefix, p->n_chunks, idx, &bad) == CKG_OK, "ref index");
    CHECK(bad == 0, "ref index reports %u bad chunks on good data", bad);
    return idx;
}

static void cpu_checks(const tu_packed *p, const uint16_t *w, const uint32_t *idx)
{
    ckg_planes v = tu_planes(p);
    uint16_t *out = malloc(p->n * 2);
    CHECK(out, "alloc");
    CHECK(ckg_ref_decode(&v, 0, p->n, out) == CKG_OK, "ref decode");
    CHECK(memcmp(out, w, p->n * 2) == 0, "ref decode differs from the original");
    /* the codec's own chunk decoder agrees */
    ckc_cplanes cp = {p->codes, p->low, p->esc, p->codes_size, p->low_size, p->esc_size};
    for (uint64_t c = 0; c < p->n_chunks; c++) {
        uint64_t a = c * p->chunk_w, len = p->n - a < p->chunk_w ? p->n - a : p->chunk_w;
        CHECK(ckc_decode_chunk(p->enc, &p->cb, &cp, a, len, p->prefix[c], p->prefix[c + 1] - p->prefix[c],
                               out + a) == CKC_OK, "ckc_decode_chunk %llu", (unsigned long long)c);
    }
    CHECK(memcmp(out, w, p->n * 2) == 0, "ckc_decode_chunk differs from the original");
    /* index = escapes before each 1024th weight */
    uint64_t k = 0;
    for (uint64_t i = 0; i < p->n; i++) {
        if (i % CKG_ESC_BLOCK == 0)
            CHECK(idx[i / CKG_ESC_BLOCK] == k, "index entry %llu", (unsigned long long)(i / CKG_ESC_BLOCK));
        k += ckc_code_at(p->codes, i) == CKC_ESCAPE;
    }
    CHECK(k == p->n_esc, "escape total");
    /* a damaged chunk index is reported */
    if (p->n_chunks > 1 && p->n_esc > 0) {
        uint32_t *bad_prefix = malloc((p->n_chunks + 1) * 4), bad = 0;
        uint32_t *idx2 = malloc(((p->n + 1023) / 1024 + 1) * 4);
        memcpy(bad_prefix, p->prefix, (p->n_chunks + 1) * 4);
        bad_prefix[1] += 1;
        CHECK(ckg_ref_escape_index(&v, p->chunk_w, bad_prefix, p->n_chunks, idx2, &bad) == CKG_OK && bad > 0,
              "tampered prefix not reported");
        free(bad_prefix);
        free(idx2);
    }
    free(out);
}

static void cpu_gemv_check(const tu_packed *p, const uint16_t *w, gshape s)
{
    ckg_planes v = tu_planes(p);
    int batch = 3;
    uint16_t *x = malloc(batch * s.cols * 2);
    double *y = malloc(batch * s.rows * 8), *ya = malloc(batch * s.rows * 8);
    for (uint64_t i = 0; i < batch * s.cols; i++)
        x[i] = tu_bf16((float)tu_gauss());
    CHECK(ckg_ref_gemv(&v, s.elem_off, s.rows, s.cols, x, batch, y, ya) == CKG_OK, "ref gemv");
    for (int b = 0; b < batch; b++)
        for (uint64_t r = 0; r < s.rows; r++) {
            double want = 0;
            for (uint64_t c = 0; c < s.cols; c++)
                want += (double)ckg_bf16_to_float(w[s.elem_off + r * s.cols + c]) * ckg_bf16_to_float(x[b * s.cols + c]);
            CHECK(want == y[b * s.rows + r], "ref gemv row %llu", (unsigned long long)r);
        }
    free(x);
    free(y);
    free(ya);
}

/* ---- device part --------------------------------------------------------------- */

/* The escape patch list of shape s (ckg_escape_patches) against the
 * original weights: row ranks, and each escape's column and exact value.
 * On success v's patch fields point at it (device buffers in *bufs). */
static void patch_checks(const tu_packed *p, const uint16_t *w, ckg_planes *v, gshape s, void *bufs[2])
{
    bufs[0] = bufs[1] = NULL;
    v->patch_row = v->patch = NULL;
    ckg_status want = s.cols % 32 || s.elem_off % 32 || s.cols > 65536 ? CKG_ERR_UNSUPPORTED : CKG_OK;
    uint32_t *d_prow = dev_copy(NULL, 0, (s.rows + 1) * 4), *d_patch = dev_copy(NULL, 0, p->n_esc * 4 + 4);
    CU(cudaMemset(d_patch, 0xFF, p->n_esc * 4 + 4));
    ckg_status st = ckg_escape_patches(v, s.elem_off, s.rows, s.cols, d_prow, d_patch, NULL);
    CHECK(st == want, "escape patches cols %llu off %llu: %s", (unsigned long long)s.cols,
          (unsigned long long)s.elem_off, ckg_status_name(st));
    if (st != CKG_OK) {
        CU(cudaFree(d_prow));
        CU(cudaFree(d_patch));
        return;
    }
    CU(cudaDeviceSynchronize());
    uint32_t *prow = malloc((s.rows + 1) * 4), *patch = malloc(p->n_esc * 4 + 4);
    CU(cudaMemcpy(prow, d_prow, (s.rows + 1) * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(patch, d_patch, p->n_esc * 4 + 4, cudaMemcpyDeviceToHost));
    uint64_t k = 0;
    for (uint64_t i = 0; i < s.elem_off; i++)
        k += ckc_code_at(p->codes, i) == CKC_ESCAPE;
    for (uint64_t r = 0; r <= s.rows; r++) {
        CHECK(prow[r] == k, "patch rank of row %llu: %u != %llu", (unsigned long long)r, prow[r], (unsigned long long)k);
        for (uint64_t c = 0; r < s.rows && c < s.cols; c++) {
            uint64_t i = s.elem_off + r * s.cols + c;
            if (ckc_code_at(p->codes, i) != CKC_ESCAPE)
                continue;
            CHECK(patch[k] == (uint32_t)(c | (uint32_t)w[i] << 16), "patch %llu (row %llu col %llu): %08x, weight %04x",
                  (unsigned long long)k, (unsigned long long)r, (unsigned long long)c, patch[k], w[i]);
            k++;
        }
    }
    free(prow);
    free(patch);
    v->patch_row = d_prow;
    v->patch = d_patch;
    v->patch_elem_off = s.elem_off;
    v->patch_rows = s.rows;
    v->patch_cols = s.cols;
    bufs[0] = d_prow;
    bufs[1] = d_patch;
}

/* Determinism: ckg_gemv's output bits are the same run to run (on the
 * emulator each run schedules the threads with another seed) and whatever
 * the grid and block size (ckg_gemv_test_launch), at batch 8. */
static void determinism_checks(const ckg_planes *v, gshape s, const uint16_t *d_x, void *d_y)
{
    static const struct {
        unsigned blocks;
        int warps;
        const char *seed;
    } cfg[] = {{0, 0, "11"}, {0, 0, "12"}, {1, 8, "13"}, {3, 4, "14"}};
    const char *env = getenv("CKG_EMU_SEED");
    char *seed0 = env ? strdup(env) : NULL;
    float *y0 = malloc(8 * s.rows * 4), *y1 = malloc(8 * s.rows * 4);
    CHECK(y0 && y1, "alloc");
    for (int batch = 8; batch <= 8; batch++)
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            ckg_gemv_test_launch(cfg[c].blocks, cfg[c].warps);
            setenv("CKG_EMU_SEED", cfg[c].seed, 1);
            CU(cudaMemset(d_y, 0xFF, 8 * s.rows * 4));
            CHECK(ckg_gemv(v, s.elem_off, s.rows, s.cols, d_x, batch, d_y, CKG_OUT_F32, NULL) == CKG_OK, "gemv");
            CU(cudaDeviceSynchronize());
            CU(cudaMemcpy(c ? y1 : y0, d_y, (size_t)batch * s.rows * 4, cudaMemcpyDeviceToHost));
            for (uint64_t i = 0; c && i < batch * s.rows; i++)
                CHECK(memcmp(&y0[i], &y1[i], 4) == 0,
                      "gemv rows %llu cols %llu off %llu batch %d: y[%llu] = %a on %u blocks of %d warps (seed %s), %a "
                      "with the defaults: the sums' order changed",
                      (unsigned long long)s.rows, (unsigned long long)s.cols, (unsigned long long)s.elem_off, batch,
                      (unsigned long long)i, y1[i], cfg[c].blocks, cfg[c].warps, cfg[c].seed, y0[i]);
        }
    ckg_gemv_test_launch(0, 0);
    if (seed0)
        setenv("CKG_EMU_SEED", seed0, 1);
    else
        unsetenv("CKG_EMU_SEED");
    free(seed0);
    free(y0);
    free(y1);
}

static void device_checks(const tu_packed *p, const uint16_t *w, const uint32_t *idx, const gshape *shapes, int n_shapes,
                          int small)
{
    ckg_planes v = tu_dev_planes(p, NULL);
    uint64_t n_idx = (p->n + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK;
    uint32_t *d_prefix = dev_copy(p->prefix, (p->n_chunks + 1) * 4, 0), *d_idx = dev_copy(NULL, 0, n_idx * 4);
    uint32_t *d_err = dev_copy(NULL, 0, 4), err = 0;

    CHECK(ckg_escape_index(&v, p->chunk_w, d_prefix, p->n_chunks, d_idx, d_err, NULL) == CKG_OK, "escape index launch");
    CU(cudaDeviceSynchronize());
    uint32_t *gi = malloc(n_idx * 4);
    CU(cudaMemcpy(gi, d_idx, n_idx * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(&err, d_err, 4, cudaMemcpyDeviceToHost));
    CHECK(err == 0 && memcmp(gi, idx, n_idx * 4) == 0, "device escape index (err %u)", err);
    if (p->n_chunks > 1 && p->n_esc > 0) {   /* a damaged prefix is counted */
        uint32_t bump = p->prefix[1] + 1, *d_tmp = dev_copy(NULL, 0, n_idx * 4);
        CU(cudaMemcpy(d_prefix + 1, &bump, 4, cudaMemcpyHostToDevice));
        CHECK(ckg_escape_index(&v, p->chunk_w, d_prefix, p->n_chunks, d_tmp, d_err, NULL) == CKG_OK, "launch");
        CU(cudaMemcpy(&err, d_err, 4, cudaMemcpyDeviceToHost));
        CHECK(err > 0, "device escape index missed a damaged prefix");
        CU(cudaFree(d_tmp));
    }
    v.esc_index = d_idx;

    /* decode: whole, unaligned, and inner ranges, poisoned output */
    uint64_t ranges[][2] = {{0, p->n}, {13, p->n - 100}, {3 * 1024 + 8, p->n / 3}, {p->n - 7, 7}};
    uint16_t *d_out = NULL, *out = malloc(p->n * 2);
    CU(cudaMalloc((void **)&d_out, p->n * 2));
    for (int r = 0; r < 4; r++) {
        uint64_t first = ranges[r][0], count = ranges[r][1];
        CU(cudaMemset(d_out, 0xFF, p->n * 2));
        CHECK(ckg_decode(&v, first, count, d_out, NULL) == CKG_OK, "decode launch");
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(out, d_out, count * 2, cudaMemcpyDeviceToHost));
        for (uint64_t i = 0; i < count; i++)
            CHECK(out[i] == w[first + i], "decode [%llu,+%llu) weight %llu: %04x != %04x", (unsigned long long)first,
                  (unsigned long long)count, (unsigned long long)(first + i), out[i], w[first + i]);
    }
    CHECK(ckg_decode(&v, 1, p->n, d_out, NULL) == CKG_ERR_SHAPE, "decode past the end accepted");

    /* GEMV: fast and generic, batch 1..8, FP32 and BF16 out */
    for (int si = 0; si < n_shapes; si++) {
        gshape s = shapes[si];
        uint16_t *x = malloc(8 * s.cols * 2);
        for (uint64_t i = 0; i < 8 * s.cols; i++)
            x[i] = tu_bf16((float)tu_gauss());
        double *ry = malloc(8 * s.rows * 8), *ra = malloc(8 * s.rows * 8);
        ckg_planes hv = tu_planes(p);
        CHECK(ckg_ref_gemv(&hv, s.elem_off, s.rows, s.cols, x, 8, ry, ra) == CKG_OK, "ref");
        uint16_t *d_x = dev_copy(x, 8 * s.cols * 2, 0);
        void *pbufs[2];
        patch_checks(p, w, &v, s, pbufs);
        ckg_gemv_path want = s.cols % 32 || s.cols > 65536 ? CKG_GEMV_GENERIC_COLS
                             : s.elem_off % 32             ? CKG_GEMV_GENERIC_OFFSET
                             : p->n_esc && !v.patch         ? CKG_GEMV_GENERIC_NO_PATCHES
                                                            : CKG_GEMV_FUSED;
        CHECK(ckg_gemv_path_of(&v, s.elem_off, s.rows, s.cols, d_x) == want, "gemv path of cols %llu off %llu: %d, not %d",
              (unsigned long long)s.cols, (unsigned long long)s.elem_off,
              (int)ckg_gemv_path_of(&v, s.elem_off, s.rows, s.cols, d_x), (int)want);
        float *y = malloc(8 * s.rows * 4);
        void *d_y = NULL;
        CU(cudaMalloc(&d_y, 8 * s.rows * 4));
        const int batches[] = {1, 8, 2, 3, 4};
        for (int bi = 0; bi < (small ? 2 : 5); bi++)
            for (int generic = 0; generic < 2; generic++)
                for (int bf16 = 0; bf16 < 2; bf16++) {
                    int batch = batches[bi];
                    /* x rows are [batch][cols]: the reference used batch 8 with the same rows */
                    CU(cudaMemset(d_y, 0xFF, 8 * s.rows * 4));
                    ckg_status st = (generic ? ckg_gemv_generic : ckg_gemv)(&v, s.elem_off, s.rows, s.cols, d_x, batch,
                                                                            d_y, bf16 ? CKG_OUT_BF16 : CKG_OUT_F32, NULL);
                    CHECK(st == CKG_OK, "gemv: %s", ckg_status_name(st));
                    CU(cudaDeviceSynchronize());
                    CU(cudaMemcpy(y, d_y, 8 * s.rows * 4, cudaMemcpyDeviceToHost));
                    for (int b = 0; b < batch; b++)
                        for (uint64_t r = 0; r < s.rows; r++) {
                            uint64_t o = b * s.rows + r;
                            double got = bf16 ? ckg_bf16_to_float(((uint16_t *)y)[o]) : y[o];
                            double tol = ckg_gemv_tolerance(ry[o], ra[o], bf16);
                            CHECK(fabs(got - ry[o]) <= tol,
                                  "gemv %s rows %llu cols %llu off %llu batch %d %s: y[%d][%llu] = %.9g, ref %.9g, tol %.3g",
                                  generic ? "generic" : "fast", (unsigned long long)s.rows, (unsigned long long)s.cols,
                                  (unsigned long long)s.elem_off, batch, bf16 ? "bf16" : "f32", b, (unsigned long long)r,
                                  got, ry[o], tol);
                        }
                }
        if (!small)   /* not under the sanitizers: --small is sized for them */
            determinism_checks(&v, s, d_x, d_y);
        CHECK(ckg_gemv(&v, s.elem_off, s.rows, s.cols, d_x, 9, d_y, CKG_OUT_F32, NULL) == CKG_ERR_ARG, "batch 9 accepted");
        CHECK(ckg_gemv(&v, s.elem_off, p->n, s.cols, d_x, 1, d_y, CKG_OUT_F32, NULL) == CKG_ERR_SHAPE, "too many rows accepted");
        if (pbufs[0] && p->n_esc) {   /* rows of the patched matrix: its list serves them too */
            CU(cudaMemset(d_y, 0xFF, 8 * s.rows * 4));
            uint64_t r0 = s.rows / 3, nr = s.rows - r0 > 5 ? 5 : s.rows - r0;
            CHECK(ckg_gemv(&v, s.elem_off + r0 * s.cols, nr, s.cols, d_x, 2, d_y, CKG_OUT_F32, NULL) == CKG_OK, "gemv rows");
            CU(cudaDeviceSynchronize());
            CU(cudaMemcpy(y, d_y, 2 * nr * 4, cudaMemcpyDeviceToHost));
            for (int b = 0; b < 2; b++)
                for (uint64_t r = 0; r < nr; r++) {
                    uint64_t o = b * s.rows + r0 + r;
                    CHECK(fabs(y[b * nr + r] - ry[o]) <= ckg_gemv_tolerance(ry[o], ra[o], 0),
                          "gemv rows [%llu,+%llu) y[%d][%llu] = %.9g, ref %.9g", (unsigned long long)r0,
                          (unsigned long long)nr, b, (unsigned long long)r, y[b * nr + r], ry[o]);
                }
        }
        v.patch_row = v.patch = NULL;
        for (int i = 0; i < 2; i++)
            if (pbufs[i])
                CU(cudaFree(pbufs[i]));
        CU(cudaFree(d_x));
        CU(cudaFree(d_y));
        free(x);
        free(y);
        free(ry);
        free(ra);
    }
    tu_dev_planes_free(&v); /* and d_idx, its escape index */
    CU(cudaFree(d_prefix));
    CU(cudaFree(d_err));
    CU(cudaFree(d_out));
    free(gi);
    free(out);
}

/* Escapes are exact: a column of escaped weights in [2^-126, 2^-125) (a
 * sign/exponent no other weight has) and x = 1 there, 0 elsewhere; every
 * y[r] must be exactly that row's escaped weight, by both kernels.  An
 * escape's low part alone entering the product (a subnormal of the same
 * mantissa) shows as y != w.  Then the same planes at odd addresses: the
 * generic path (taken because of the alignment) and decode must not assume
 * 16-byte aligned planes. */
static void exact_and_unaligned_checks(uint32_t enc)
{
    const uint64_t rows = 40, cols = 1024, n = rows * cols, cstar = 517;
    uint16_t *w = malloc(n * 2), x[1024] = {0};
    CHECK(w, "alloc");
    for (uint64_t i = 0; i < n; i++)   /* exponents 2^-40..2^10: ~50 symbols, each far more frequent than column cstar's */
        w[i] = (uint16_t)((tu_rand() & 1) << 15 | (87 + tu_rand() % 51) << 7 | (tu_rand() & 0x7F));
    for (uint64_t r = 0; r < rows; r++)
        w[r * cols + cstar] = (uint16_t)(0x0080u | (r & 1) << 15 | (tu_rand() & 0x7Fu));
    x[cstar] = 0x3F80;   /* 1.0 */
    tu_packed p;
    tu_pack(enc, w, n, 1024, &p);
    CHECK(p.n_esc >= rows, "the test column is not escaped (%llu escapes)", (unsigned long long)p.n_esc);
    uint32_t *idx = cpu_index(&p);
    ckg_planes v = tu_dev_planes(&p, idx);
    void *pbufs[2];   /* the patch list, so that ckg_gemv takes the fused kernel */
    patch_checks(&p, w, &v, (gshape){rows, cols, 0}, pbufs);
    CHECK(v.patch, "no patch list");
    uint16_t *d_x = dev_copy(x, sizeof x, 0), *d_out = NULL, *out = malloc(n * 2);
    float *d_y = NULL, y[40];
    CU(cudaMalloc((void **)&d_y, sizeof y));
    CU(cudaMalloc((void **)&d_out, n * 2));
    for (int generic = 0; generic < 2; generic++) {
        CU(cudaMemset(d_y, 0xFF, sizeof y));
        CHECK((generic ? ckg_gemv_generic : ckg_gemv)(&v, 0, rows, cols, d_x, 1, d_y, CKG_OUT_F32, NULL) == CKG_OK, "gemv");
        CU(cudaMemcpy(y, d_y, sizeof y, cudaMemcpyDeviceToHost));
        for (uint64_t r = 0; r < rows; r++)
            CHECK(y[r] == ckg_bf16_to_float(w[r * cols + cstar]), "%s %s: escape not exact: y[%llu] = %a, w = %a",
                  ckc_encoding_name(enc), generic ? "generic" : "fast", (unsigned long long)r, y[r],
                  ckg_bf16_to_float(w[r * cols + cstar]));
    }
    /* the same planes one byte past an aligned address */
    ckg_planes u = v;
    uint8_t *ucodes = dev_copy(NULL, 0, p.codes_size + 80), *ulow = dev_copy(NULL, 0, p.low_size + 80);
    CU(cudaMemcpy(ucodes + 1, p.codes, p.codes_size, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(ulow + 1, p.low, p.low_size, cudaMemcpyHostToDevice));
    u.codes = ucodes + 1;
    u.low = ulow + 1;
    CHECK(ckg_gemv_path_of(&u, 0, rows, cols, d_x) == CKG_GEMV_GENERIC_ALIGN &&
              ckg_gemv_path_of(&u, 24, rows - 1, cols, d_x) == CKG_GEMV_GENERIC_OFFSET &&
              ckg_gemv_path_of(&v, 0, rows, cols, d_x) == CKG_GEMV_FUSED, "gemv path of unaligned planes");
    CU(cudaMemset(d_y, 0xFF, sizeof y));   /* from weight 24: escape ranks counted from code words */
    CHECK(ckg_gemv(&u, 24, rows - 1, cols, d_x, 1, d_y, CKG_OUT_F32, NULL) == CKG_OK, "gemv, unaligned planes");
    CU(cudaMemcpy(y, d_y, sizeof y, cudaMemcpyDeviceToHost));
    for (uint64_t r = 0; r + 1 < rows; r++)
        CHECK(y[r] == ckg_bf16_to_float(w[24 + r * cols + cstar]), "unaligned planes: y[%llu] = %a",
              (unsigned long long)r, y[r]);
    CHECK(ckg_decode(&u, 5, n - 5, d_out, NULL) == CKG_OK, "decode, unaligned planes");
    CU(cudaMemcpy(out, d_out, (n - 5) * 2, cudaMemcpyDeviceToHost));
    CHECK(memcmp(out, w + 5, (n - 5) * 2) == 0, "decode of unaligned planes differs");
    printf("gpu_kernels: %s escapes exact (fast and generic GEMV), unaligned planes decode and multiply\n",
           ckc_encoding_name(enc));
    CU(cudaFree(ucodes));
    CU(cudaFree(ulow));
    CU(cudaFree(pbufs[0]));
    CU(cudaFree(pbufs[1]));
    tu_dev_planes_free(&v);
    CU(cudaFree(d_x));
    CU(cudaFree(d_y));
    CU(cudaFree(d_out));
    free(out);
    free(idx);
    free(w);
    tu_free(&p);
}

int main(int argc, char **argv)
{
    /* --small: one case, two GEMV shapes, batches 1 and 8 — the dedicated
     * run for compute-sanitizer racecheck (gpu/check.sh), sized to finish in
     * well under a minute under the sanitizer */
    const int small = argc > 1 && strcmp(argv[1], "--small") == 0;
    const tcase cases[] = {
        {CKC_ENC_K15, 3 * 65536 + 4096, 65536, 0.0},
        {CKC_ENC_BSPLIT, 3 * 65536 + 4096, 65536, 0.01},
        {CKC_ENC_K15, 40 * 2048 + 1000, 2048, 0.02},
        {CKC_ENC_BSPLIT, 50 * 1024 + 24, 1024, 0.05},
        {CKC_ENC_K15, 20 * 8192 + 64, 65536, NO_ESCAPES},
        {CKC_ENC_K15, 12 * 8192, 8192, MOST_ESCAPES},
        {CKC_ENC_BSPLIT, 12 * 8192, 65536, MOST_ESCAPES},
    };
    int have_dev = ckg_device_count() > 0;
    for (size_t ci = small ? 2 : 0; ci < (small ? 3 : sizeof cases / sizeof cases[0]); ci++) {
        const tcase *tc = &cases[ci];
        uint16_t *w = malloc(tc->n * 2);
        CHECK(w, "alloc");
        if (tc->outliers >= 0)
            tu_weights(w, tc->n, 0.02, tc->outliers);
        else
            kind_weights(w, tc->n, tc->outliers);
        tu_packed p;
        tu_pack(tc->enc, w, tc->n, tc->chunk_w, &p);
        uint32_t *idx = cpu_index(&p);
        cpu_checks(&p, w, idx);
        gshape shapes[] = {
            {(tc->n - 5 * 1024) / 2048, 2048, 5 * 1024},  /* fast, row tail */
            {(tc->n - 96) / 1376, 1376, 96},              /* fast: a tensor-parallel slice (11008 / 8 columns) from weight
                                                             96: K15 rows at all 4 mantissa skews, a partial unit with a
                                                             partial lane (352 = 2 x 128 + 96 columns) and an empty one */
            {(tc->n - 24) / 1000, 1000, 24},              /* generic */
            {tc->n / 8192 > 0 ? tc->n / 8192 : 1, tc->n >= 8192 ? 8192 : 1024, 0},
        };
        for (int s = 0; s < 4; s++)
            cpu_gemv_check(&p, w, shapes[s]);
        printf("gpu_kernels: %s n=%llu chunk=%llu escapes=%llu (%.3f%%): CPU references ok\n",
               ckc_encoding_name(tc->enc), (unsigned long long)tc->n, (unsigned long long)tc->chunk_w,
               (unsigned long long)p.n_esc, 100.0 * p.n_esc / tc->n);
        if (have_dev) {
            device_checks(&p, w, idx, shapes, small ? 2 : 4, small);
            printf("gpu_kernels: device escape index, decode, GEMV ok\n");
        }
        tu_free(&p);
        free(idx);
        free(w);
    }
    if (have_dev) {
        exact_and_unaligned_checks(CKC_ENC_K15);
        if (!small)
            exact_and_unaligned_checks(CKC_ENC_BSPLIT);
    }
    if (!have_dev)
        printf("SKIP device part: no CUDA device\n");
    return 0;
}
