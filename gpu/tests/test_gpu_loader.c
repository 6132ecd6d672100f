/*
 * test_gpu_loader.c — the loader end to end: write a small safetensors
 * model, pack it (K15 and byte-split) with ckpt_pack, open it with
 * ckg_model_open and check the tensor list (names, dtypes, shapes,
 * encodings).  With a CUDA device: upload whole tensors and row ranges
 * (packed, decoded, raw), decode on the device and compare with the original
 * bytes, run the GEMV on uploaded rows, check that a damaged plane is
 * reported, and that every row range of F4/F6 tensors uploads as its bytes
 * or, where a row ends inside a byte, is refused.  Without one: "SKIP
 * device part: no CUDA device".
 *
 * usage: test_gpu_loader WORKDIR   (created; removed contents are ours)
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckg_ref.h"
#include "commands.h"
#include "container.h"
#include "gpu_test_dev.h"

typedef struct {
    const char *name, *dtype;
    uint64_t shape[2];
    int ndim;
    size_t elem;
    uint8_t *data;
    size_t size;
} ttensor;

static void write_safetensors(const char *path, ttensor *t, int n)
{
    char json[4096];
    size_t off = 0, len = 0;
    len += snprintf(json + len, sizeof json - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += snprintf(json + len, sizeof json - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++)
            len += snprintf(json + len, sizeof json - len, "%s%llu", d ? "," : "", (unsigned long long)t[i].shape[d]);
        len += snprintf(json + len, sizeof json - len, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].size);
        off += t[i].size;
    }
    len += snprintf(json + len, sizeof json - len, "}");
    while (len % 8)
        json[len++] = ' ';
    FILE *f = fopen(path, "wb");
    CHECK(f, "create %s", path);
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(json, 1, len, f);
    for (int i = 0; i < n; i++)
        fwrite(t[i].data, 1, t[i].size, f);
    CHECK(fclose(f) == 0, "write %s", path);
}


static void check_decode(ckg_model *m, size_t ti, const ttensor *t, uint64_t r0, uint64_t r1, unsigned flags,
                         int want_packed)
{
    ckg_tensor *g = NULL;
    ckg_status st = ckg_tensor_upload(m, ti, r0, r1, flags, NULL, &g);
    CHECK(st == CKG_OK, "upload %s [%llu,%llu): %s", t->name, (unsigned long long)r0, (unsigned long long)r1,
          ckg_status_name(st));
    CHECK(ckg_tensor_is_packed(g) == want_packed, "%s packed=%d", t->name, ckg_tensor_is_packed(g));
    uint64_t row_bytes = t->size / t->shape[0], nb = (r1 - r0) * row_bytes;
    CHECK(ckg_tensor_nbytes(g) == nb, "nbytes");
    uint64_t cols = t->ndim > 1 ? t->shape[1] : 1;   /* elements, for raw tensors too */
    CHECK(ckg_tensor_rows(g) == r1 - r0 && ckg_tensor_cols(g) == cols, "%s rows %llu cols %llu", t->name,
          (unsigned long long)ckg_tensor_rows(g), (unsigned long long)ckg_tensor_cols(g));
    void *d = NULL;
    uint8_t *h = malloc(nb + 1);
    CU(cudaMalloc(&d, nb + 1));
    CU(cudaMemset(d, 0xAB, nb + 1));
    CHECK(ckg_tensor_decode(g, d, nb, NULL) == CKG_OK, "decode");
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(h, d, nb, cudaMemcpyDeviceToHost));
    CHECK(memcmp(h, t->data + r0 * row_bytes, nb) == 0, "%s rows [%llu,%llu) differ after upload+decode", t->name,
          (unsigned long long)r0, (unsigned long long)r1);
    if (want_packed) {   /* GEMV over the uploaded rows against the original weights */
        uint64_t rows = r1 - r0;
        int batch = 2;
        uint16_t *x = malloc(batch * cols * 2);
        for (uint64_t i = 0; i < batch * cols; i++)
            x[i] = tu_bf16((float)tu_gauss());
        void *dx = NULL, *dy = NULL;
        float *y = malloc(batch * rows * 4);
        CU(cudaMalloc(&dx, batch * cols * 2));
        CU(cudaMalloc(&dy, batch * rows * 4));
        CU(cudaMemcpy(dx, x, batch * cols * 2, cudaMemcpyHostToDevice));
        CHECK(ckg_tensor_gemv(g, dx, batch, dy, CKG_OUT_F32, NULL) == CKG_OK, "gemv");
        CU(cudaMemcpy(y, dy, batch * rows * 4, cudaMemcpyDeviceToHost));
        const uint16_t *w = (const uint16_t *)(t->data) + r0 * cols;
        for (int b = 0; b < batch; b++)
            for (uint64_t r = 0; r < rows; r++) {
                double ref = 0, ra = 0;
                for (uint64_t c = 0; c < cols; c++) {
                    double p = (double)ckg_bf16_to_float(w[r * cols + c]) * ckg_bf16_to_float(x[b * cols + c]);
                    ref += p;
                    ra += fabs(p);
                }
                CHECK(fabs(y[b * rows + r] - ref) <= ckg_gemv_tolerance(ref, ra, 0), "gemv %s row %llu: %g vs %g",
                      t->name, (unsigned long long)(r0 + r), y[b * rows + r], ref);
            }
        CU(cudaFree(dx));
        CU(cudaFree(dy));
        free(x);
        free(y);
    }
    CU(cudaFree(d));
    free(h);
    ckg_tensor_free(g);
}

/* Rows [r0, r1) of a tensor of a sub-byte dtype (F4, F6): rows need not end
 * on a byte (an F4 [2, 3] tensor has 3 bytes, rows of 12 bits).  want: the
 * bytes from r0 * size / rows to r1 * size / rows of the original, or NULL
 * when the range does not start and end on a byte (then CKG_ERR_ARG). */
static void check_sub_byte_rows(ckg_model *m, const ttensor *t, uint64_t r0, uint64_t r1, uint64_t cols)
{
    size_t k = 0;
    CHECK(ckg_model_find(m, t->name, &k) == CKG_OK, "find %s", t->name);
    uint64_t rows = t->shape[0], b0 = r0 * t->size, b1 = r1 * t->size;
    int aligned = b0 % rows == 0 && b1 % rows == 0;
    ckg_tensor *g = NULL;
    ckg_status st = ckg_tensor_upload(m, k, r0, r1, 0, NULL, &g);
    if (!aligned) {
        CHECK(st == CKG_ERR_ARG && !g, "%s rows [%llu,%llu) (not on a byte) accepted: %s", t->name,
              (unsigned long long)r0, (unsigned long long)r1, ckg_status_name(st));
        return;
    }
    CHECK(st == CKG_OK, "upload %s [%llu,%llu): %s", t->name, (unsigned long long)r0, (unsigned long long)r1,
          ckg_status_name(st));
    uint64_t first = b0 / rows, nb = b1 / rows - first;
    CHECK(!ckg_tensor_is_packed(g), "%s packed", t->name);
    CHECK(ckg_tensor_nbytes(g) == nb, "%s rows [%llu,%llu): nbytes %llu, want %llu", t->name, (unsigned long long)r0,
          (unsigned long long)r1, (unsigned long long)ckg_tensor_nbytes(g), (unsigned long long)nb);
    if (nb) {
        void *d = NULL;
        uint8_t h[64];
        CU(cudaMalloc(&d, sizeof h));
        CU(cudaMemset(d, 0xAB, sizeof h));
        CHECK(ckg_tensor_decode(g, d, nb, NULL) == CKG_OK, "decode");
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(memcmp(h, t->data + first, nb) == 0 && h[nb] == 0xAB, "%s rows [%llu,%llu) differ after upload+decode",
              t->name, (unsigned long long)r0, (unsigned long long)r1);
        CU(cudaFree(d));
    }
    CHECK(ckg_tensor_rows(g) == r1 - r0 && ckg_tensor_cols(g) == cols, "%s rows %llu cols %llu", t->name,
          (unsigned long long)ckg_tensor_rows(g), (unsigned long long)ckg_tensor_cols(g));
    ckg_tensor_free(g);
}

/* A model of F4 and F6 tensors, packed: every row range of each uploaded
 * (whole tensors and ranges on bytes: their bytes; the others refused). */
static void sub_byte_dtypes(const char *work)
{
    char cmd[1024], src[512], dst[512], path[600], err[512] = "";
    snprintf(src, sizeof src, "%s/src_sub", work);
    snprintf(dst, sizeof dst, "%s/packed_sub", work);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", src);
    CHECK(system(cmd) == 0, "%s", cmd);
    ttensor t[] = {
        {"q.f4_2x3", "F4", {2, 3}, 2, 0, NULL, 3},       /* rows of 12 bits */
        {"q.f4_4x3", "F4", {4, 3}, 2, 0, NULL, 6},
        {"q.f6_8x1", "F6_E2M3", {8, 1}, 2, 0, NULL, 6},  /* rows of 6 bits */
        {"q.f6_4", "F6_E3M2", {4, 0}, 1, 0, NULL, 3},
        {"q.f4_3x8", "F4", {3, 8}, 2, 0, NULL, 12},      /* whole bytes a row */
    };
    const uint64_t cols[] = {3, 3, 1, 1, 8};
    const int nt = sizeof t / sizeof t[0];
    for (int i = 0; i < nt; i++) {
        t[i].data = malloc(t[i].size);
        for (size_t b = 0; b < t[i].size; b++)
            t[i].data[b] = (uint8_t)tu_rand();
    }
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    write_safetensors(path, t, nt);
    ckpt_pack_opts o = {.src = src, .dst = dst, .encoding = CKC_ENC_K15, .jobs = 1};
    CHECK(ckpt_pack(&o) == 0, "pack %s", dst);
    ckg_model *m = NULL;
    ckg_status st = ckg_model_open(dst, &m, err, sizeof err);
    CHECK(st == CKG_OK, "open %s: %s: %s", dst, ckg_status_name(st), err);
    for (int i = 0; i < nt; i++) {   /* every range of rows, the empty ones last */
        for (uint64_t r0 = 0; r0 < t[i].shape[0]; r0++)
            for (uint64_t r1 = r0 + 1; r1 <= t[i].shape[0]; r1++)
                check_sub_byte_rows(m, &t[i], r0, r1, cols[i]);
        for (uint64_t r0 = 0; r0 <= t[i].shape[0]; r0++)
            check_sub_byte_rows(m, &t[i], r0, r0, cols[i]);
    }
    size_t k = 0;
    ckg_tensor *g = NULL;
    CHECK(ckg_model_find(m, "q.f4_2x3", &k) == CKG_OK, "find");
    st = ckg_tensor_upload(m, k, 0, UINT64_MAX, 0, NULL, &g);  /* to the end: the whole tensor */
    CHECK(st == CKG_OK && ckg_tensor_nbytes(g) == 3, "q.f4_2x3 to the end: %s", ckg_status_name(st));
    ckg_tensor_free(g);
    ckg_model_close(m);
    for (int i = 0; i < nt; i++)
        free(t[i].data);
    printf("gpu_loader: F4/F6 row ranges: the rows' bytes, or refused where a row ends inside a byte\n");
}

/* The K15 pack dst rewritten with another tiling format.md §4 allows
 * (ckptfs's writer never makes it): the header in two extents, model.w1
 * split over two K15 extents, model.w2 and model.bias in one RAW extent, the
 * rest one extent each, none named for its tensor.  The loader must upload
 * every tensor as its bytes (libckread places them by offset; a tensor not
 * in one extent of its own is uploaded decoded).  src: the original file. */
static void retiled(const char *work, const char *dst, const char *src, const ttensor *t)
{
    char cmd[2048], dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/packed_retiled", work);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", dir, dst, dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    FILE *f = fopen(src, "rb");
    CHECK(f && fseek(f, 0, SEEK_END) == 0, "open %s", src);
    long n = ftell(f);
    uint8_t *b = malloc((size_t)n);
    CHECK(fseek(f, 0, SEEK_SET) == 0 && fread(b, 1, (size_t)n, f) == (size_t)n && fclose(f) == 0, "read %s", src);
    uint64_t hl, at;
    memcpy(&hl, b, 8);
    at = 8 + hl;   /* model.w1 starts here, then w2, bias, empty, ids */
    uint64_t w1 = t[0].size, w2 = t[1].size, bias = t[2].size;
    const struct { uint32_t enc; uint64_t len; } cut[] = {
        {CKC_ENC_RAW, 10}, {CKC_ENC_ZSTD, at - 10},                       /* the header, in two */
        {CKC_ENC_K15, w1 / 2 + 2 * 1000}, {CKC_ENC_K15, w1 - w1 / 2 - 2 * 1000},   /* w1 split */
        {CKC_ENC_RAW, w2 + bias}, {CKC_ENC_RAW, (uint64_t)n - at - w1 - w2 - bias}, /* w2 + bias; ids */
    };
    snprintf(path, sizeof path, "%s/model.safetensors.ckpt", dir);
    ckp_reader *r = NULL;
    CHECK(ckp_open(path, &r, NULL, 0) == CKP_OK, "open %s", path);
    uint8_t sha[32];
    memcpy(sha, ckp_get_info(r)->sha256, 32);
    ckp_close(r);
    int fd = open(path, O_WRONLY | O_TRUNC);
    ckp_writer *w = NULL;
    ckp_writer_opts o = {.path = "model.safetensors", .kind = CKP_KIND_SAFETENSORS, .mode = 0644};
    CHECK(fd >= 0 && ckp_writer_new(fd, &o, &w) == CKP_OK, "writer");
    uint64_t off = 0;
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%zu", i);
        CHECK(ckp_writer_add(w, cut[i].enc, b + off, cut[i].len, name, 0) == CKP_OK, "add %zu: %s", i,
              ckp_writer_error(w));
        off += cut[i].len;
    }
    CHECK(off == (uint64_t)n && ckp_writer_finish(w, sha) == CKP_OK && close(fd) == 0, "finish");
    ckp_writer_free(w);
    free(b);
    char err[512] = "";
    ckg_model *m = NULL;
    ckg_status st = ckg_model_open(dir, &m, err, sizeof err);
    CHECK(st == CKG_OK, "open %s: %s: %s", dir, ckg_status_name(st), err);
    size_t k[5];
    for (int i = 0; i < 5; i++)
        CHECK(ckg_model_find(m, t[i].name, &k[i]) == CKG_OK, "find %s", t[i].name);
    check_decode(m, k[0], &t[0], 0, 96, 0, 0);   /* split: uploaded decoded */
    check_decode(m, k[0], &t[0], 40, 57, 0, 0);  /* rows across the cut */
    check_decode(m, k[1], &t[1], 3, 17, 0, 0);   /* in a RAW extent with bias */
    check_decode(m, k[2], &t[2], 0, 96, 0, 0);
    check_decode(m, k[4], &t[4], 1, 4, 0, 0);
    ckg_model_close(m);
    printf("gpu_loader: a pack tiled otherwise (split tensors, shared extents, other names): every tensor's bytes\n");
}

int main(int argc, char **argv)
{
    const char *work = argc > 1 ? argv[1] : "/tmp/ckgpu_loader_test";
    char cmd[1024], src[512], dst[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/src'", work, work);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(src, sizeof src, "%s/src", work);

    ttensor t[] = {
        {"model.w1", "BF16", {96, 2048}, 2, 2, NULL, 0},   /* 3 chunks of 64 Ki weights */
        {"model.w2", "BF16", {40, 1000}, 2, 2, NULL, 0},   /* cols not a multiple of 32 */
        {"model.bias", "F32", {96, 0}, 1, 4, NULL, 0},
        {"model.empty", "BF16", {0, 4}, 2, 2, NULL, 0},
        {"model.ids", "I64", {5, 0}, 1, 8, NULL, 0},
    };
    const int nt = sizeof t / sizeof t[0];
    for (int i = 0; i < nt; i++) {
        uint64_t n = t[i].shape[0] * (t[i].ndim > 1 ? t[i].shape[1] : 1);
        t[i].size = n * t[i].elem;
        t[i].data = malloc(t[i].size + 1);
        if (t[i].elem == 2)
            tu_weights((uint16_t *)t[i].data, n, 0.02, 0.001);
        else
            for (size_t b = 0; b < t[i].size; b++)
                t[i].data[b] = (uint8_t)tu_rand();
    }
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    write_safetensors(path, t, nt);
    int have_dev = ckg_device_count() > 0;
    if (have_dev)
        sub_byte_dtypes(work);

    {   /* an archive pack (CPU only) is refused, naming the command that converts it */
        snprintf(dst, sizeof dst, "%s/packed_archive", work);
        ckpt_pack_opts o = {.src = src, .dst = dst, .encoding = CKC_ENC_ARCHIVE, .jobs = 1};
        CHECK(ckpt_pack(&o) == 0, "pack %s", dst);
        char err[1024] = "";
        ckg_model *m = NULL;
        ckg_status st = ckg_model_open(dst, &m, err, sizeof err);
        CHECK(st == CKG_ERR_UNSUPPORTED && !m && strstr(err, "archive") && strstr(err, "ckptfs repack --format k15"),
              "archive pack: %s: %s", ckg_status_name(st), err);
        printf("gpu_loader: archive pack refused: %s\n", err);
    }
    const uint32_t encs[] = {CKC_ENC_K15, CKC_ENC_BSPLIT};
    for (int ei = 0; ei < 2; ei++) {
        snprintf(dst, sizeof dst, "%s/packed_%s", work, ckc_encoding_name(encs[ei]));
        ckpt_pack_opts o = {.src = src, .dst = dst, .encoding = encs[ei], .jobs = 1};
        CHECK(ckpt_pack(&o) == 0, "pack %s", dst);
        char err[512] = "";
        ckg_model *m = NULL;
        ckg_status st = ckg_model_open(dst, &m, err, sizeof err);
        CHECK(st == CKG_OK, "open %s: %s: %s", dst, ckg_status_name(st), err);
        CHECK(ckg_model_count(m) == (size_t)nt, "%zu tensors", ckg_model_count(m));
        for (int i = 0; i < nt; i++) {
            size_t k = 99;
            CHECK(ckg_model_find(m, t[i].name, &k) == CKG_OK, "find %s", t[i].name);
            const ckg_tensor_info *ti = ckg_model_info(m, k);
            CHECK(ti->ndim == (uint32_t)t[i].ndim && ti->shape[0] == t[i].shape[0] &&
                  (t[i].ndim < 2 || ti->shape[1] == t[i].shape[1]), "shape of %s", t[i].name);
            CHECK(ti->nbytes == t[i].size, "nbytes of %s", t[i].name);
            CHECK(ti->dtype == (t[i].elem == 2 ? 7u : t[i].elem == 4 ? 10u : 12u), "dtype of %s: %u", t[i].name, ti->dtype);
            if (t[i].elem == 2 && t[i].size)
                CHECK(ti->encoding == encs[ei], "encoding of %s: %u", t[i].name, ti->encoding);
            else
                CHECK(ti->encoding == CKC_ENC_RAW || ti->encoding == CKC_ENC_ZSTD, "encoding of %s", t[i].name);
        }
        size_t dummy;
        CHECK(ckg_model_find(m, "nope", &dummy) == CKG_ERR_NOTFOUND, "find nope");
        printf("gpu_loader: %s: %zu tensors listed with dtype, shape, encoding\n", dst, ckg_model_count(m));
        if (have_dev) {
            size_t w1, w2, bias, empty, ids;
            ckg_model_find(m, "model.w1", &w1);
            ckg_model_find(m, "model.w2", &w2);
            ckg_model_find(m, "model.bias", &bias);
            ckg_model_find(m, "model.empty", &empty);
            ckg_model_find(m, "model.ids", &ids);
            check_decode(m, w1, &t[0], 0, 96, 0, 1);
            check_decode(m, w1, &t[0], 37, 70, 0, 1);          /* a row range inside chunks 1..2 */
            check_decode(m, w1, &t[0], 64, 96, CKG_UPLOAD_NO_VERIFY, 1);
            check_decode(m, w1, &t[0], 5, 9, CKG_UPLOAD_DECODED, 0);
            check_decode(m, w2, &t[1], 0, 40, 0, 1);
            check_decode(m, w2, &t[1], 3, 17, 0, 1);
            check_decode(m, bias, &t[2], 0, 96, 0, 0);
            check_decode(m, ids, &t[4], 1, 4, 0, 0);
            ckg_tensor *g = NULL;
            CHECK(ckg_tensor_upload(m, empty, 0, UINT64_MAX, 0, NULL, &g) == CKG_OK && ckg_tensor_nbytes(g) == 0, "empty");
            ckg_tensor_free(g);
            CHECK(ckg_tensor_upload(m, w1, 5, 200, 0, NULL, &g) == CKG_ERR_ARG && !g, "rows past the end accepted");
            printf("gpu_loader: device uploads, row ranges, decode and GEMV ok\n");
            if (ei == 0)
                retiled(work, dst, path, t);
        }
        ckg_model_close(m);

        if (have_dev && ei == 0) {   /* flip a byte in w1's mantissa plane: the hash check must catch it */
            snprintf(path, sizeof path, "%s/model.safetensors.ckpt", dst);
            ckp_reader *r = NULL;
            CHECK(ckp_open(path, &r, NULL, 0) == CKP_OK, "open ckpt");
            uint64_t off = 0;
            for (uint32_t e = 0; e < ckp_get_info(r)->n_extents; e++)
                if (strcmp(ckp_get_extent(r, e)->name, "model.w1") == 0)
                    off = ckp_get_extent(r, e)->plane_offset[1] + 1000;
            ckp_close(r);
            int fd = open(path, O_RDWR);
            uint8_t b;
            CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1, "read byte");
            b ^= 0x10;
            CHECK(pwrite(fd, &b, 1, (off_t)off) == 1 && close(fd) == 0, "write byte");
            CHECK(ckg_model_open(dst, &m, NULL, 0) == CKG_OK, "reopen");
            size_t w1;
            ckg_tensor *g = NULL;
            ckg_model_find(m, "model.w1", &w1);
            st = ckg_tensor_upload(m, w1, 0, UINT64_MAX, 0, NULL, &g);
            CHECK(st == CKG_ERR_CORRUPT && !g, "damaged plane: %s", ckg_status_name(st));
            ckg_model_close(m);
            printf("gpu_loader: damaged plane reported as corrupt\n");
        }
    }
    for (int i = 0; i < nt; i++)
        free(t[i].data);
    if (!have_dev)
        printf("SKIP device part: no CUDA device\n");
    return 0;
}
