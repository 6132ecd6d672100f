/*
 * bench_codec.c — size and single-thread speed of the K15, byte-split and
 * archive encodings, next to memcpy measured in the same run.
 *
 *   bench_codec [raw.bf16|-] [runs] [cols]
 *
 * Without a file it generates 64 Mi BF16 weights drawn from N(0, 0.02) and
 * rounded to nearest even.  A tensor is encoded the way the container writer
 * does it: histogram, codebook, chunks of 64 Ki weights, escapes packed in
 * order; it is decoded chunk by chunk and checked against the input.  Speeds
 * are the best of `runs` (default 5), in GB/s of BF16 bytes (1 GB = 1e9 B)
 * per second of the thread's CPU time (per core, whatever else runs).
 *
 * Size accounting, in bits per weight:
 *   planes    stored sizes of the code, low and escape planes (format §5.1)
 *   +index    planes + 16 B of chunk index per 64 Ki-weight chunk
 *   +record   +index + one 192 B extent record per tensor
 * Alignment padding and the file header/TOC header are not charged.
 *
 * Archive (format §5.3): encode = plan (histograms, mode choice, tables) +
 * every chunk; decode = every chunk, the tensor's decode tables built once
 * before (as a reader does on first use); size = tables + chunk streams
 * (+index, +record as above).  cols: the tensor's last dimension (0: none),
 * for the column/row contexts.  Its decode is also given as a ratio to K15's
 * decode with the same implementation in the same run, chunk by chunk and
 * (rows "x2", "x4") 2 or 4 chunks a ckc_ans_decode_chunks call, decoded
 * interleaved, as unpack and the mount's decode-ahead do.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckc.h"
#include "ckc_ans.h"
#include "ckc_ans_internal.h"
#include "ckc_internal.h"

#define CHUNK 65536u

/* CPU time of this thread: the speed of one core, which a loaded machine
 * (other processes taking turns on the core) does not lower. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double unit(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}

static uint16_t bf16_rne(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static void *xcalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static uint16_t *load(const char *path, size_t *n)
{
    uint16_t *w;
    if (!path) {
        *n = (size_t)64 << 20;
        w = xcalloc(*n * 2);
        for (size_t i = 0; i < *n; i += 2) {
            double r = sqrt(-2.0 * log(unit())), t = 6.283185307179586 * unit();
            w[i] = bf16_rne((float)(0.02 * r * cos(t)));
            w[i + 1] = bf16_rne((float)(0.02 * r * sin(t)));
        }
        return w;
    }
    FILE *f = fopen(path, "rb");
    long sz;
    if (!f || fseek(f, 0, SEEK_END) || (sz = ftell(f)) < 2 || fseek(f, 0, SEEK_SET)) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    *n = (size_t)sz / 2;
    w = xcalloc(*n * 2);
    if (fread(w, 2, *n, f) != *n) {
        fprintf(stderr, "short read on %s\n", path);
        exit(1);
    }
    fclose(f);
    return w;
}

typedef struct {
    uint32_t enc;
    ckc_codebook cb;
    uint8_t *p[3];
    uint64_t size[3];
    uint64_t *prefix; /* n_chunks + 1 */
    uint16_t *esc;    /* scratch: escaped symbols, n entries */
} tensor;

static size_t n_chunks(size_t n) { return (n + CHUNK - 1) / CHUNK; }

/* Encode as the writer does; plane buffers are allocated once (worst case)
 * and zeroed outside the timed region. */
static void encode(ckc_impl impl, tensor *t, const uint16_t *w, size_t n)
{
    uint64_t hist[512] = {0};
    size_t nc = n_chunks(n);
    ckc_histogram(t->enc, w, n, hist);
    ckc_codebook_from_hist(t->enc, hist, &t->cb);
    for (size_t c = 0; c < nc; c++) {
        size_t len = c + 1 < nc ? CHUNK : n - c * CHUNK;
        uint64_t ne;
        ckc_encode_chunk_impl(impl, t->enc, &t->cb, w + c * CHUNK, len, c * CHUNK, t->p[0], t->p[1],
                              t->esc + t->prefix[c], &ne);
        t->prefix[c + 1] = t->prefix[c] + ne;
    }
    t->size[0] = ckc_code_plane_size(n);
    t->size[1] = ckc_low_plane_size(t->enc, n);
    t->size[2] = ckc_escape_plane_size(t->enc, t->prefix[nc]);
    ckc_pack_escapes(t->enc, t->esc, t->prefix[nc], 0, t->p[2], t->size[2]);
}

static int decode(ckc_impl impl, const tensor *t, uint16_t *out, size_t n)
{
    ckc_cplanes p = {t->p[0], t->p[1], t->p[2], t->size[0], t->size[1], t->size[2]};
    for (size_t c = 0; c < n_chunks(n); c++) {
        size_t len = (c + 1) * CHUNK <= n ? CHUNK : n - c * CHUNK;
        if (ckc_decode_chunk_impl(impl, t->enc, &t->cb, &p, c * CHUNK, len, t->prefix[c],
                                  t->prefix[c + 1] - t->prefix[c], out + c * CHUNK) != CKC_OK)
            return -1;
    }
    return 0;
}

static double entropy(const uint64_t *h, size_t ns, double total)
{
    double e = 0;
    for (size_t s = 0; s < ns; s++)
        if (h[s])
            e -= h[s] / total * log2(h[s] / total);
    return e;
}

static double best_memcpy(void *dst, const void *src, size_t bytes, int runs)
{
    double best = 1e30;
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        memcpy(dst, src, bytes);
        t0 = now() - t0;
        best = t0 < best ? t0 : best;
    }
    return bytes / best / 1e9;
}

/* The archive rows: one per decode implementation. */
/* Plan + every chunk of the archive encoding with encoder impl, `runs`
 * times; returns the best time, the chunks in buf (bound bytes apart) and
 * their sizes in off, the last plan in *pp. */
static double archive_encode(ckc_impl impl, const uint16_t *w, size_t n, uint64_t cols, int runs, uint8_t *buf,
                             size_t *off, ckc_ans_plan **pp)
{
    size_t nc = n_chunks(n), bound = ckc_ans_chunk_bound(CHUNK);
    double best = 1e30;
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        ckc_ans_plan_free(*pp);
        if (ckc_ans_plan_new(w, n, cols, pp) != CKC_OK) {
            printf("archive: plan failed\n");
            exit(1);
        }
        for (size_t c = 0; c < nc; c++) {
            size_t len = c + 1 < nc ? CHUNK : n - c * CHUNK;
            if (ckc_ans_encode_chunk_impl(impl, *pp, w + c * CHUNK, len, c * CHUNK, buf + c * bound, bound,
                                          &off[c]) != CKC_OK) {
                printf("archive: encode failed (%s)\n", ckc_impl_name(impl));
                exit(1);
            }
        }
        t0 = now() - t0;
        best = t0 < best ? t0 : best;
    }
    return best;
}

/* The archive rows: one per decode implementation and batch; encode (plan
 * + chunks) with the implementation's chunk encoder, checked to write the
 * same bytes as the others. */
static void bench_archive(const uint16_t *w, size_t n, uint64_t cols, int runs, double mc, const double *k15_enc,
                          const double *k15_dec)
{
    static const ckc_impl impls[] = {CKC_IMPL_PORTABLE, CKC_IMPL_AVX512, CKC_IMPL_AVX2};
    size_t nc = n_chunks(n), bound = ckc_ans_chunk_bound(CHUNK);
    uint8_t *buf = xcalloc(nc * bound), *buf2 = xcalloc(nc * bound);
    size_t *off = xcalloc((nc + 1) * sizeof *off), *off2 = xcalloc((nc + 1) * sizeof *off);
    uint16_t *out = xcalloc(n * 2);
    double be, bytes = 2.0 * n;
    ckc_ans_plan *p = NULL;
    ckc_ans_tables *t = NULL;
    ckc_ans_choice ch;

    archive_encode(CKC_IMPL_AUTO, w, n, cols, 1, buf, off, &p);
    ckc_ans_plan_choice(p, &ch);
    if (ckc_ans_tables_new(ckc_ans_blob(p), ckc_ans_blob_size(p), n, &t) != CKC_OK) {
        printf("archive: tables refused\n");
        exit(1);
    }
    double total = (double)ckc_ans_blob_size(p);
    for (size_t c = 0; c < nc; c++)
        total += (double)off[c];
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!(impls[k] == CKC_IMPL_AVX512 ? ckc_ans_avx512_supported() : ckc_impl_available(impls[k])))
            continue;
        be = archive_encode(impls[k], w, n, cols, runs, buf2, off2, &p);
        for (size_t c = 0; c < nc; c++)
            if (off2[c] != off[c] || memcmp(buf2 + c * bound, buf + c * bound, off[c])) {
                printf("ARCHIVE ENCODERS DIFFER (%s, chunk %zu)\n", ckc_impl_name(impls[k]), c);
                exit(1);
            }
        for (size_t batch = 1; batch <= 4; batch *= 2) {
            double bd = 1e30;
            char name[32];
            for (int r = 0; r < runs; r++) {
                memset(out, 0, n * 2);
                double t0 = now();
                for (size_t c = 0; c < nc; c += batch) {
                    ckc_ans_chunk b[4];
                    size_t m = 0;
                    for (; m < batch && c + m < nc; m++) {
                        size_t cc = c + m, len = cc + 1 < nc ? CHUNK : n - cc * CHUNK;
                        b[m] = (ckc_ans_chunk){t, buf + cc * bound, off[cc], cc * CHUNK, len, out + cc * CHUNK, CKC_OK};
                    }
                    if (ckc_ans_decode_chunks_impl(impls[k], b, m) != CKC_OK) {
                        printf("ARCHIVE DECODE FAILED (%s)\n", ckc_impl_name(impls[k]));
                        exit(1);
                    }
                }
                t0 = now() - t0;
                if (memcmp(out, w, n * 2)) {
                    printf("ARCHIVE DECODE MISMATCH (%s)\n", ckc_impl_name(impls[k]));
                    exit(1);
                }
                bd = t0 < bd ? t0 : bd;
            }
            double planes = total * 8 / n, index = planes + 16.0 * 8 * nc / n, record = index + 192.0 * 8 / n;
            snprintf(name, sizeof name, "%s%s", ckc_impl_name(impls[k]), batch == 1 ? "" : batch == 2 ? " x2" : " x4");
            printf("%-9s %-10s %8.4f %8.4f %8.4f %8s %9s %8.2f %6.2f %8.2f %6.2f   x K15 dec %.2f", "archive", name,
                   planes, index, record, "-", "-", bytes / be / 1e9, bytes / be / 1e9 / mc, bytes / bd / 1e9,
                   bytes / bd / 1e9 / mc, k15_dec[k] > 0 ? bytes / bd / 1e9 / k15_dec[k] : 0);
            printf(batch == 1 && k15_enc[k] > 0 ? ", enc %.2f\n" : "\n", bytes / be / 1e9 / k15_enc[k]);
        }
    }
    printf("archive mode: %s, M = %u, K = %u (%s), %u symbols\n", ch.mode ? "coded" : "raw", ch.mbits,
           ch.n_classes, ch.n_classes > 1 ? (ch.axis ? "rows" : "columns") : "no context", ch.n_syms);
    ckc_ans_plan_free(p);
    ckc_ans_tables_free(t);
    free(buf);
    free(buf2);
    free(off);
    free(off2);
    free(out);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 && strcmp(argv[1], "-") ? argv[1] : NULL;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    uint64_t cols = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
    double k15_enc[3] = {0}, k15_dec[3] = {0};
    size_t n;
    uint16_t *w = load(path, &n), *out = xcalloc(n * 2);
    size_t nc = n_chunks(n);
    double bytes = 2.0 * n;
    uint64_t *h16 = xcalloc(65536 * 8), h9[512] = {0};
    static const ckc_impl impls[] = {CKC_IMPL_PORTABLE, CKC_IMPL_AVX512, CKC_IMPL_AVX2};

    if (runs < 1)
        runs = 1;
    for (size_t i = 0; i < n; i++)
        h16[w[i]]++, h9[w[i] >> 7]++;
    printf("input: %s, %zu weights (%.1f MiB), %zu chunks of %u weights, best of %d runs\n",
           path ? path : "synthetic N(0,0.02) BF16 (RNE)", n, bytes / 1048576.0, nc, CHUNK, runs);
    printf("order-0 bounds: H(sign,exponent)+7 = %.4f b/w, 16-bit joint entropy = %.4f b/w\n\n",
           entropy(h9, 512, (double)n) + 7, entropy(h16, 65536, (double)n));
    memset(out, 1, n * 2);
    double mc = best_memcpy(out, w, n * 2, runs);
    printf("memcpy: %.2f GB/s\n\n", mc);

    printf("%-9s %-10s %8s %8s %8s %8s %9s %8s %6s %8s %6s\n", "encoding", "impl", "planes", "+index",
           "+record", "esc%", "esc", "enc GB/s", "x mc", "dec GB/s", "x mc");
    for (uint32_t enc = CKC_ENC_K15; enc <= CKC_ENC_BSPLIT; enc++) {
        for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
            tensor t = {.enc = enc};
            double be = 1e30, bd = 1e30;
            if (!ckc_impl_available(impls[k]))
                continue;
            t.p[0] = xcalloc(ckc_code_plane_size(n));
            t.p[1] = xcalloc(ckc_low_plane_size(enc, n));
            t.p[2] = xcalloc(ckc_escape_plane_size(enc, n));
            t.prefix = xcalloc((nc + 1) * 8);
            t.esc = xcalloc(n * 2 + 2);
            for (int r = 0; r < runs; r++) {
                memset(t.p[2], 0, ckc_escape_plane_size(enc, n));
                double t0 = now();
                encode(impls[k], &t, w, n);
                t0 = now() - t0;
                be = t0 < be ? t0 : be;
            }
            for (int r = 0; r < runs; r++) {
                memset(out, 0, n * 2);
                double t0 = now();
                int rc = decode(impls[k], &t, out, n);
                t0 = now() - t0;
                if (rc != 0 || memcmp(out, w, n * 2) != 0) {
                    printf("DECODE MISMATCH (%s/%s)\n", ckc_encoding_name(enc), ckc_impl_name(impls[k]));
                    return 1;
                }
                bd = t0 < bd ? t0 : bd;
            }
            double planes = (double)(t.size[0] + t.size[1] + t.size[2]) * 8 / n;
            double index = planes + 16.0 * 8 * nc / n, record = index + 192.0 * 8 / n;
            if (enc == CKC_ENC_K15) {
                k15_enc[k] = bytes / be / 1e9;
                k15_dec[k] = bytes / bd / 1e9;
            }
            printf("%-9s %-10s %8.4f %8.4f %8.4f %7.3f%% %9llu %8.2f %6.2f %8.2f %6.2f\n",
                   ckc_encoding_name(enc), ckc_impl_name(impls[k]), planes, index, record,
                   100.0 * t.prefix[nc] / n, (unsigned long long)t.prefix[nc], bytes / be / 1e9,
                   bytes / be / 1e9 / mc, bytes / bd / 1e9, bytes / bd / 1e9 / mc);
            for (int j = 0; j < 3; j++)
                free(t.p[j]);
            free(t.prefix);
            free(t.esc);
        }
    }
    bench_archive(w, n, cols, runs, mc, k15_enc, k15_dec);
    printf("\nmemcpy again: %.2f GB/s\n", best_memcpy(out, w, n * 2, runs));
    printf("enc = histogram + codebook + chunk encode + escape packing (archive: plan + chunk encode);\n"
           "dec = chunk decode; GB/s of BF16 bytes (1e9); 'x mc' = ratio to memcpy of the same bytes;\n"
           "'x K15 dec' ('enc') = archive decode (encode) over K15's with the same implementation, this run;\n"
           "archive encode: plan + chunks (every implementation writes the same bytes, checked);\n"
           "archive x2 / x4: 2 / 4 chunks a ckc_ans_decode_chunks call (decoded interleaved).\n");
    free(w);
    free(out);
    free(h16);
    return 0;
}
