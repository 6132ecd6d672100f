/*
 * bench_gpu.cu — ckgpu against the ceilings measured in the same run:
 *   1. decode GB/s (BF16 bytes produced per second) vs device-to-device
 *      cudaMemcpy (bytes copied per second); target >= 80%;
 *   2. fused GEMV (escapes included, through the patch list the loader
 *      builds) vs cuBLAS BF16 (cublasGemmEx, FP32 compute) on 8192x8192,
 *      2048x6144, 6144x2048 at batch 1, 2, 4, 8 (and a 4096x1376 tensor-parallel
 *      slice at batch 1 and 8), K15 and byte-split; target
 *      <= 0.75x cuBLAS time at batch 1; "bytes" is the fused kernel's bytes
 *      over cuBLAS's (the ratio at equal bandwidth);
 *   3. load of a packed model to VRAM vs the BF16 original with plain
 *      pread + cudaMemcpyAsync through the same pinned double buffer
 *      (warm page cache; cold too when run as root: drop_caches).
 * Timing: CUDA graphs of 20 launches rotating over enough weight copies to
 * exceed 2x L2, median of 15 replays.  Results are checked (GEMV against
 * cuBLAS and the generic kernel) before they are timed.
 *
 * usage: bench_gpu [--quick] [--workdir DIR] [--load-mib N]
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

extern "C" {
#include "ckg_ref.h"
#include "commands.h"
}
#include "gpu_test_util.h"

#define CU(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define CK(call)                                                                                  \
    do {                                                                                          \
        ckg_status s_ = (call);                                                                   \
        if (s_ != CKG_OK) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, ckg_status_name(s_));   \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Median time in ms of one fn() call: graphs of `per_graph` calls, replayed. */
template <class F>
static double time_graph(cudaStream_t s, int per_graph, F fn)
{
    for (int i = 0; i < 3; i++)
        fn(i);  /* warm up outside the graph (module load, cuBLAS handles) */
    CU(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per_graph; i++)
        fn(i);
    CU(cudaStreamEndCapture(s, &g));
    CU(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    CU(cudaGraphLaunch(ge, s));
    std::vector<float> t;
    for (int r = 0; r < 15; r++) {
        CU(cudaEventRecord(a, s));
        CU(cudaGraphLaunch(ge, s));
        CU(cudaEventRecord(b, s));
        CU(cudaEventSynchronize(b));
        float ms;
        CU(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms / per_graph);
    }
    std::sort(t.begin(), t.end());
    CU(cudaGraphExecDestroy(ge));
    CU(cudaGraphDestroy(g));
    CU(cudaEventDestroy(a));
    CU(cudaEventDestroy(b));
    return t[t.size() / 2];
}

/* Device copy of packed planes (with escape index built on the device, and
 * for a GEMV shape the escape patch list). */
struct DevPacked {
    ckg_planes v;
    void *bufs[7];
    size_t bytes;       /* packed bytes decode reads: planes + index */
    size_t gemv_bytes;  /* bytes the fused GEMV reads: code and low planes + patch list */
};

static void *dcopy(const void *h, size_t len, size_t pad)
{
    void *d;
    CU(cudaMalloc(&d, len + pad));
    CU(cudaMemset(d, 0, len + pad));
    if (len)
        CU(cudaMemcpy(d, h, len, cudaMemcpyHostToDevice));
    return d;
}

static DevPacked upload(const tu_packed *p, cudaStream_t s, uint64_t rows = 0, uint64_t cols = 0)
{
    DevPacked d;
    d.bufs[5] = d.bufs[6] = NULL;
    d.v = tu_planes(p);
    d.v.codes = (const uint8_t *)(d.bufs[0] = dcopy(p->codes, p->codes_size, 64));
    d.v.low = (const uint8_t *)(d.bufs[1] = dcopy(p->low, p->low_size, 64));
    d.v.esc = (const uint8_t *)(d.bufs[2] = dcopy(p->esc, p->esc_size, 64));
    uint64_t n_idx = (p->n + CKG_ESC_BLOCK - 1) / CKG_ESC_BLOCK;
    d.bufs[3] = dcopy(p->prefix, (p->n_chunks + 1) * 4, 0);
    d.bufs[4] = dcopy(NULL, 0, n_idx * 4 + 4);
    uint32_t *err = (uint32_t *)d.bufs[4] + n_idx, herr = 0;
    CK(ckg_escape_index(&d.v, p->chunk_w, (const uint32_t *)d.bufs[3], p->n_chunks, (uint32_t *)d.bufs[4], err, s));
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(&herr, err, 4, cudaMemcpyDeviceToHost));
    if (herr) {
        fprintf(stderr, "escape index: %u bad chunks\n", herr);
        exit(1);
    }
    d.v.esc_index = (const uint32_t *)d.bufs[4];
    d.bytes = p->codes_size + p->low_size + p->esc_size + n_idx * 4;
    d.gemv_bytes = p->codes_size + p->low_size;
    if (rows) {   /* the escape patch list, as the loader builds it */
        d.bufs[5] = dcopy(NULL, 0, (rows + 1) * 4);
        d.bufs[6] = dcopy(NULL, 0, p->n_esc * 4 + 4);
        CK(ckg_escape_patches(&d.v, 0, rows, cols, (uint32_t *)d.bufs[5], (uint32_t *)d.bufs[6], s));
        d.v.patch_row = (const uint32_t *)d.bufs[5];
        d.v.patch = (const uint32_t *)d.bufs[6];
        d.v.patch_elem_off = 0;
        d.v.patch_rows = rows;
        d.v.patch_cols = cols;
        d.gemv_bytes += (rows + 1) * 4 + p->n_esc * 4;
    }
    return d;
}

static void free_packed(DevPacked &d)
{
    for (void *b : d.bufs)
        if (b)
            CU(cudaFree(b));
}

static double bf16_out(uint16_t v) { return ckg_bf16_to_float(v); }

/* ---- 1. decode vs memcpy -------------------------------------------------------- */
static void bench_decode(const uint16_t *w, uint64_t n, cudaStream_t s, double memcpy_gbs, FILE *log)
{
    for (uint32_t enc : {(uint32_t)CKC_ENC_K15, (uint32_t)CKC_ENC_BSPLIT}) {
        tu_packed p;
        tu_pack(enc, w, n, 65536, &p);
        DevPacked d = upload(&p, s);
        uint16_t *out;
        CU(cudaMalloc(&out, n * 2));
        CK(ckg_decode(&d.v, 0, n, out, s));
        std::vector<uint16_t> h(n);
        CU(cudaMemcpy(h.data(), out, n * 2, cudaMemcpyDeviceToHost));
        if (memcmp(h.data(), w, n * 2) != 0) {
            fprintf(stderr, "decode %s: output differs from the original\n", ckc_encoding_name(enc));
            exit(1);
        }
        double ms = time_graph(s, 10, [&](int) { CK(ckg_decode(&d.v, 0, n, out, s)); });
        double gbs = n * 2 / (ms * 1e-3) / 1e9;
        printf("| decode %-9s | %6.1f Mi weights | %8.1f us | %7.0f GB/s BF16 out | %5.1f%% of memcpy (target >= 80%%) | %.3f bits/w, %.3f%% escapes |\n",
               ckc_encoding_name(enc), n / 1048576.0, ms * 1e3, gbs, 100 * gbs / memcpy_gbs, 8.0 * d.bytes / n,
               100.0 * p.n_esc / n);
        fprintf(log, "decode %s n=%llu ms=%.6f GBs=%.1f memcpy=%.1f\n", ckc_encoding_name(enc), (unsigned long long)n, ms,
                gbs, memcpy_gbs);
        CU(cudaFree(out));
        free_packed(d);
        tu_free(&p);
    }
}

/* ---- 2. GEMV vs cuBLAS -------------------------------------------------------------- */
static void bench_gemv(cublasHandle_t hb, cudaStream_t s, uint64_t rows, uint64_t cols, size_t l2, FILE *log,
                       const std::vector<int> &batches)
{
    uint64_t n = rows * cols;
    std::vector<uint16_t> w(n);
    tu_weights(w.data(), n, 0.02, 0.0);
    /* enough copies that a pass over the packed ones (~11/16 of BF16) is > 2x L2 */
    int copies = (int)std::min<uint64_t>(24, (2 * l2) / (n * 11 / 8) + 1);
    std::vector<void *> wb(copies);
    for (auto &b : wb)
        b = dcopy(w.data(), n * 2, 0);
    tu_packed pk[2];
    std::vector<DevPacked> dp[2];
    for (int e = 0; e < 2; e++) {
        tu_pack(e == 0 ? CKC_ENC_K15 : CKC_ENC_BSPLIT, w.data(), n, 65536, &pk[e]);
        for (int c = 0; c < copies; c++)
            dp[e].push_back(upload(&pk[e], s, rows, cols));
    }
    uint16_t *x, *y_ref, *y;
    CU(cudaMalloc(&x, 8 * cols * 2));
    CU(cudaMalloc(&y_ref, 8 * rows * 2));
    CU(cudaMalloc(&y, 8 * rows * 4));
    std::vector<uint16_t> hx(8 * cols);
    for (auto &v : hx)
        v = tu_bf16((float)tu_gauss());
    CU(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    const float one = 1.f, zero = 0.f;
    auto cublas = [&](int i, int batch) {
        cublasStatus_t cs = cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, batch, (int)cols, &one, wb[i % copies], CUDA_R_16BF,
                     (int)cols, x, CUDA_R_16BF, (int)cols, &zero, y_ref, CUDA_R_16BF, (int)rows, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
        if (cs != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "cublasGemmEx: status %d\n", (int)cs);
            exit(1);
        }
    };
    for (int batch : batches) {
        /* check: ours (fast and generic, BF16 out) against cuBLAS, within bf16 rounding of the sums */
        cublas(0, batch);
        CU(cudaStreamSynchronize(s));
        std::vector<uint16_t> a(batch * rows), b(batch * rows), c(batch * rows);
        CU(cudaMemcpy(a.data(), y_ref, a.size() * 2, cudaMemcpyDeviceToHost));
        double t_cublas = time_graph(s, 20, [&](int i) { cublas(i, batch); });
        double t_ours[2];
        for (int e = 0; e < 2; e++) {
            CK(ckg_gemv(&dp[e][0].v, 0, rows, cols, x, batch, y, CKG_OUT_BF16, s));
            CU(cudaMemcpy(b.data(), y, b.size() * 2, cudaMemcpyDeviceToHost));
            CK(ckg_gemv_generic(&dp[e][0].v, 0, rows, cols, x, batch, y, CKG_OUT_BF16, s));
            CU(cudaMemcpy(c.data(), y, c.size() * 2, cudaMemcpyDeviceToHost));
            double worst = 0;
            for (size_t i = 0; i < a.size(); i++) {
                double ref = bf16_out(a[i]), scale = 0.02 * sqrt((double)cols) * 0.05 + fabs(ref) * 0.02;
                worst = std::max(worst, std::max(fabs(bf16_out(b[i]) - ref), fabs(bf16_out(c[i]) - ref)) / scale);
            }
            if (!(worst <= 1.0)) {
                fprintf(stderr, "gemv %s %llux%llu batch %d: differs from cuBLAS (worst %.3g of the allowance)\n",
                        ckc_encoding_name(pk[e].enc), (unsigned long long)rows, (unsigned long long)cols, batch, worst);
                exit(1);
            }
            t_ours[e] = time_graph(s, 20, [&](int i) {
                CK(ckg_gemv(&dp[e][i % copies].v, 0, rows, cols, x, batch, y, CKG_OUT_BF16, s));
            });
        }
        double bw_cublas = n * 2 / (t_cublas * 1e-3) / 1e9, bw_k15 = dp[0][0].gemv_bytes / (t_ours[0] * 1e-3) / 1e9;
        /* ideal: the fused kernel's bytes over cuBLAS's, both at cuBLAS's bandwidth */
        double ideal_k15 = (double)dp[0][0].gemv_bytes / (n * 2), ideal_bs = (double)dp[1][0].gemv_bytes / (n * 2);
        printf("| gemv %5llux%-5llu | batch %d | cuBLAS %7.2f us (%5.0f GB/s) | k15 %7.2f us = %.3fx (%5.0f GB/s, bytes %.3fx) | bytesplit %7.2f us = %.3fx (bytes %.3fx) |%s\n",
               (unsigned long long)rows, (unsigned long long)cols, batch, t_cublas * 1e3, bw_cublas, t_ours[0] * 1e3,
               t_ours[0] / t_cublas, bw_k15, ideal_k15, t_ours[1] * 1e3, t_ours[1] / t_cublas, ideal_bs,
               batch == 1 ? (t_ours[0] / t_cublas <= 0.75 ? " k15 target met" : " k15 target (<= 0.75x) MISSED") : "");
        fprintf(log, "gemv rows=%llu cols=%llu batch=%d cublas_ms=%.6f k15_ms=%.6f bs_ms=%.6f escapes_k15=%llu\n",
                (unsigned long long)rows, (unsigned long long)cols, batch, t_cublas, t_ours[0], t_ours[1],
                (unsigned long long)pk[0].n_esc);
    }
    for (auto &b : wb)
        CU(cudaFree(b));
    for (int e = 0; e < 2; e++) {
        for (auto &d : dp[e])
            free_packed(d);
        tu_free(&pk[e]);
    }
    CU(cudaFree(x));
    CU(cudaFree(y_ref));
    CU(cudaFree(y));
}

/* ---- 3. load to VRAM ------------------------------------------------------------------ */
static void drop_caches(bool cold)
{
    if (!cold)
        return;
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (f) {
        fputs("3\n", f);
        fclose(f);
    }
}

/* The BF16 original: pread of the whole data region into two pinned 8 MiB
 * buffers alternately, cudaMemcpyAsync of each to one device buffer. */
static double load_original(const char *path, void *dev, size_t cap, cudaStream_t s)
{
    const size_t piece = 8u << 20;
    void *pin[2];
    cudaEvent_t ev[2];
    for (int b = 0; b < 2; b++) {
        CU(cudaHostAlloc(&pin[b], piece, cudaHostAllocDefault));
        CU(cudaEventCreateWithFlags(&ev[b], cudaEventDisableTiming));
    }
    double t0 = now_s();
    int fd = open(path, O_RDONLY);
    uint64_t hl = 0;
    if (fd < 0 || pread(fd, &hl, 8, 0) != 8) {
        perror(path);
        exit(1);
    }
    struct stat st;
    fstat(fd, &st);
    uint64_t off = 8 + hl, len = (uint64_t)st.st_size - off;
    if (len > cap)
        len = cap;
    for (uint64_t done = 0, i = 0; done < len; i++) {
        int b = (int)(i & 1);
        size_t n = std::min<uint64_t>(piece, len - done);
        CU(cudaEventSynchronize(ev[b]));
        if (pread(fd, pin[b], n, (off_t)(off + done)) != (ssize_t)n) {
            perror("pread");
            exit(1);
        }
        CU(cudaMemcpyAsync((char *)dev + done, pin[b], n, cudaMemcpyHostToDevice, s));
        CU(cudaEventRecord(ev[b], s));
        done += n;
    }
    CU(cudaStreamSynchronize(s));
    double t = now_s() - t0;
    close(fd);
    for (int b = 0; b < 2; b++) {
        CU(cudaFreeHost(pin[b]));
        CU(cudaEventDestroy(ev[b]));
    }
    return t;
}

static double load_packed(const char *dir, unsigned flags, cudaStream_t s, uint64_t *dev_bytes)
{
    double t0 = now_s();
    char err[512];
    ckg_model *m = NULL;
    ckg_status st = ckg_model_open(dir, &m, err, sizeof err);
    if (st != CKG_OK) {
        fprintf(stderr, "open %s: %s\n", dir, err);
        exit(1);
    }
    std::vector<ckg_tensor *> ts;
    *dev_bytes = 0;
    for (size_t i = 0; i < ckg_model_count(m); i++) {
        ckg_tensor *t = NULL;
        CK(ckg_tensor_upload(m, i, 0, UINT64_MAX, flags, s, &t));
        *dev_bytes += ckg_tensor_device_bytes(t);
        ts.push_back(t);
    }
    double t = now_s() - t0;
    for (auto x : ts)
        ckg_tensor_free(x);
    ckg_model_close(m);
    return t;
}

static void bench_load(const std::string &work, uint64_t mib, cudaStream_t s, FILE *log)
{
    std::string src = work + "/src", dst = work + "/packed";
    std::string cmd = "rm -rf '" + work + "' && mkdir -p '" + src + "'";
    if (system(cmd.c_str()) != 0)
        exit(1);
    /* 8 tensors [rows, 8192] of BF16 */
    const int nt = 8;
    uint64_t cols = 8192, rows = std::max<uint64_t>(1, mib * 1048576 / 2 / cols / nt), per = rows * cols;
    std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
    for (int i = 0; i < nt; i++)
        json += ",\"layers." + std::to_string(i) + ".weight\":{\"dtype\":\"BF16\",\"shape\":[" + std::to_string(rows) +
                "," + std::to_string(cols) + "],\"data_offsets\":[" + std::to_string(i * per * 2) + "," +
                std::to_string((i + 1) * per * 2) + "]}";
    json += "}";
    while (json.size() % 8)
        json += ' ';
    std::string path = src + "/model.safetensors";
    FILE *f = fopen(path.c_str(), "wb");
    uint64_t hl = json.size();
    fwrite(&hl, 8, 1, f);
    fwrite(json.data(), 1, json.size(), f);
    std::vector<uint16_t> w(per);
    for (int i = 0; i < nt; i++) {
        tu_weights(w.data(), per, 0.02, 0.0);
        fwrite(w.data(), 2, per, f);
    }
    fclose(f);
    ckpt_pack_opts o = {};
    o.src = src.c_str();
    o.dst = dst.c_str();
    o.encoding = CKC_ENC_K15;
    o.jobs = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ckpt_pack(&o) != 0)
        exit(1);
    uint64_t total = nt * per * 2, dev_bytes = 0;
    void *dev;
    CU(cudaMalloc(&dev, total));
    bool root = geteuid() == 0;
    for (int cold = root ? 1 : 0; cold >= 0; cold--) {
        drop_caches(cold);
        double t_orig = load_original(path.c_str(), dev, total, s);
        drop_caches(cold);
        double t_pk = load_packed(dst.c_str(), CKG_UPLOAD_NO_VERIFY, s, &dev_bytes);
        drop_caches(cold);
        double t_pkv = load_packed(dst.c_str(), 0, s, &dev_bytes);
        printf("| load %s cache | %.0f MiB BF16 | original pread+copy %.3f s (%.2f GB/s) | packed %.3f s = %.2fx | packed+hash check %.3f s = %.2fx | VRAM %.1f%% of BF16 |\n",
               cold ? "cold" : "warm", total / 1048576.0, t_orig, total / t_orig / 1e9, t_pk, t_pk / t_orig, t_pkv,
               t_pkv / t_orig, 100.0 * dev_bytes / total);
        fprintf(log, "load cold=%d bytes=%llu orig_s=%.4f packed_s=%.4f packed_verify_s=%.4f dev_bytes=%llu\n", cold,
                (unsigned long long)total, t_orig, t_pk, t_pkv, (unsigned long long)dev_bytes);
    }
    CU(cudaFree(dev));
}

/* The device facts check.sh's table starts with: one row per device. */
static int print_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device visible (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return 3;
    }
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    for (int d = 0; d < n; d++) {
        cudaDeviceProp p;
        CU(cudaGetDeviceProperties(&p, d));
        int clk = 0, mclk = 0, bus = 0, smem = 0;
        cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, d);
        cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, d);
        cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, d);
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, d);
        printf("| device %d | %s, cc %d.%d | %d SMs at %.0f MHz, %.1f GiB, memory %.0f MHz x %d bit = %.0f GB/s peak, "
               "L2 %d MiB, %d KiB shared per block, driver %d, runtime %d |\n",
               d, p.name, p.major, p.minor, p.multiProcessorCount, clk / 1e3, p.totalGlobalMem / 1073741824.0, mclk / 1e3,
               bus, 2.0 * mclk * 1e3 * bus / 8 / 1e9, p.l2CacheSize >> 20, smem >> 10, drv, rt);
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* every figure reaches the terminal (and the log) the moment it is printed,
     * so a benchmark cut short keeps what it measured */
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool quick = false;
    std::string work = "/tmp/ckgpu_bench";
    uint64_t load_mib = 1024;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--quick")
            quick = true;
        else if (a == "--workdir" && i + 1 < argc)
            work = argv[++i];
        else if (a == "--load-mib" && i + 1 < argc)
            load_mib = strtoull(argv[++i], NULL, 10);
        else if (a == "--devices")
            return print_devices();
        else {
            fprintf(stderr, "usage: bench_gpu [--quick] [--workdir DIR] [--load-mib N] | --devices\n");
            return 2;
        }
    }
    if (ckg_device_count() == 0) {
        printf("SKIP bench_gpu: no CUDA device (nothing measured)\n");
        return 3;
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("## ckgpu benchmark: %s, %d SMs, L2 %d MiB, driver %d, runtime %d\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, drv, rt);
    FILE *log = fopen((work + ".log").c_str(), "w");
    if (!log)
        log = stderr;
    setvbuf(log, NULL, _IOLBF, 0);
    /* a blocking stream: the legacy-stream cudaMemcpy/cudaMemset of the checks
     * and uploads wait for the kernels on s (a non-blocking one let the
     * cuBLAS comparison read y while the GEMV still ran) */
    cudaStream_t s;
    CU(cudaStreamCreate(&s));

    /* memcpy ceiling: 1 GiB device to device */
    size_t cb = (size_t)1 << 30;
    void *a, *b;
    CU(cudaMalloc(&a, cb));
    CU(cudaMalloc(&b, cb));
    CU(cudaMemset(a, 1, cb));
    double t_copy = time_graph(s, 5, [&](int) { CU(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, s)); });
    double memcpy_gbs = cb / (t_copy * 1e-3) / 1e9;
    printf("| memcpy D2D | 1 GiB | %.1f us | %.0f GB/s copied (%.0f GB/s read+write) |\n", t_copy * 1e3, memcpy_gbs,
           2 * memcpy_gbs);
    CU(cudaFree(a));
    CU(cudaFree(b));

    uint64_t n = quick ? (16ull << 20) : (64ull << 20);
    std::vector<uint16_t> w(n);
    tu_weights(w.data(), n, 0.02, 0.0);
    bench_decode(w.data(), n, s, memcpy_gbs, log);
    w.clear();
    w.shrink_to_fit();

    cublasHandle_t hb;
    if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS || cublasSetStream(hb, s) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublas init failed\n");
        return 1;
    }
    std::vector<int> batches = quick ? std::vector<int>{1, 8} : std::vector<int>{1, 2, 4, 8};
    const uint64_t shapes[3][2] = {{8192, 8192}, {2048, 6144}, {6144, 2048}};
    for (auto &sh : shapes)
        bench_gemv(hb, s, sh[0], sh[1], prop.l2CacheSize, log, batches);
    /* a tensor-parallel slice: Llama-2-7B's down_proj at TP 8 (11008 / 8 = 1376 columns, not a multiple
     * of 128: K15 runs the fused kernel's SHIFT variant) */
    bench_gemv(hb, s, 4096, 1376, prop.l2CacheSize, log, std::vector<int>{1, 8});
    cublasDestroy(hb);

    bench_load(work, quick ? 256 : load_mib, s, log);
    std::string rm = "rm -rf '" + work + "'";
    if (system(rm.c_str()) != 0)
        fprintf(stderr, "could not remove %s\n", work.c_str());
    CU(cudaStreamDestroy(s));
    if (log != stderr)
        fclose(log);
    return 0;
}
