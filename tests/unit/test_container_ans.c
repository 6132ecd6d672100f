/*
 * test_container_ans.c — ARCHIVE extents in packed files (format §5.3):
 * written by the writer, read back exactly by every read path (ckp_pread
 * at any offset into any alignment, ckp_read_chunk_from with the bytes
 * ckp_chunk_need names, ckp_read_chunks over runs of chunks), the file's version (1.1 with an archive extent,
 * 1.0 without), and damage: a chunk's bytes (that chunk refused, the rest
 * read), the tables (the file refused, R29), an archive extent in a file
 * that says 1.0 (unsupported, R15).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "container.h"
#include "container_internal.h"
#include "test_util.h"
#include "util.h"

static uint64_t rng = 88172645463325252ull;

static double unit(void) { return ((xorshift64(&rng) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* Columns of different scales, as trained matrices have. */
static uint16_t weight(uint64_t i, uint64_t cols)
{
    double s = 0.01 * (1 + (double)((cols ? i % cols : 0) % 13));
    return bf16_rne((float)(s * sqrt(-2 * log(unit())) * cos(6.283185307179586 * unit())));
}

typedef struct {
    uint32_t enc;
    uint64_t size, cols;
} piece;

/* 1001 raw bytes first: the next extent starts at an odd address. */
static const piece pieces[] = {
    {CKC_ENC_RAW, 1001, 0},
    {CKC_ENC_ARCHIVE, 2 * 384 * 500, 384}, /* 3 chunks, column classes */
    {CKC_ENC_ZSTD, 5, 0},
    {CKC_ENC_ARCHIVE, 2 * 150001, 0},      /* no shape: one class; last chunk short, odd count */
    {CKC_ENC_ARCHIVE, 2 * 40, 8},          /* tiny: stored raw */
    {CKC_ENC_K15, 2 * 1000, 0},
};
#define N_PIECES (sizeof pieces / sizeof pieces[0])

static uint8_t *write_file(const char *path, int n_pieces, uint64_t *total)
{
    uint64_t at = 0;
    uint8_t *orig;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ckp_writer_opts o = {.path = "m.safetensors", .kind = CKP_KIND_SAFETENSORS, .mode = 0644, .jobs = 2};
    uint8_t sha[32] = {0};
    ckp_writer *w;

    *total = 0;
    for (int i = 0; i < n_pieces; i++)
        *total += pieces[i].size;
    orig = malloc(*total + 1);
    for (int i = 0; i < n_pieces; i++) {
        for (uint64_t k = 0; k + 1 < pieces[i].size; k += 2) {
            uint16_t v = weight(k / 2, pieces[i].cols);
            memcpy(orig + at + k, &v, 2);
        }
        if (pieces[i].size % 2)
            orig[at + pieces[i].size - 1] = 0x33;
        at += pieces[i].size;
    }
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ckp_writer_new(fd, &o, &w), CKP_OK);
    at = 0;
    for (int i = 0; i < n_pieces; i++) {
        ck_assert_int_eq(ckp_writer_add_shaped(w, pieces[i].enc, orig + at, pieces[i].size, "t", 7, pieces[i].cols),
                         CKP_OK);
        at += pieces[i].size;
    }
    ck_assert_int_eq(ckp_writer_finish(w, sha), CKP_OK);
    ckp_writer_free(w);
    close(fd);
    return orig;
}

static void setup(void) { tmpdir_make("ans"); }

START_TEST(archive_reads_exactly)
{
    char path[300], err[512];
    uint64_t total;
    uint8_t *orig, *buf;
    ckp_reader *r;
    ckp_scratch *s = ckp_scratch_new();
    size_t got;

    snprintf(path, sizeof path, "%s/a.ckpt", tmpdir);
    orig = write_file(path, N_PIECES, &total);
    ck_assert_int_eq(ckp_open(path, &r, err, sizeof err), CKP_OK);
    ck_assert_ptr_null(ckp_check(r));
    ck_assert_uint_eq(ckp_get_info(r)->version_minor, 1);
    ck_assert_uint_eq(ckp_get_extent(r, 1)->encoding, CKC_ENC_ARCHIVE);
    ck_assert_uint_eq(ckp_get_extent(r, 1)->n_chunks, 3);
    /* smaller than 16 bits per weight, by the model */
    ck_assert_uint_lt(ckp_get_extent(r, 1)->plane_size[1], 2 * 384 * 500 * 3 / 4);
    buf = malloc(total + 1);
    ck_assert_int_eq(ckp_pread(r, buf, total, 0, &got, s), CKP_OK);
    ck_assert_uint_eq(got, total);
    ck_assert(memcmp(buf, orig, total) == 0);
    for (int i = 0; i < 500; i++) {
        uint64_t off = xorshift64(&rng) % total, len = xorshift64(&rng) % 300000;
        ck_assert_int_eq(ckp_pread(r, buf + (i & 1), len, off, &got, s), CKP_OK);
        ck_assert(memcmp(buf + (i & 1), orig + off, got) == 0);
    }
    /* from caller-held plane bytes: exactly those ckp_chunk_need names */
    for (uint32_t e = 0; e < ckp_get_info(r)->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        for (uint64_t c = 0; c < x->n_chunks; c++) {
            uint64_t lo[3], hi[3];
            ckp_planes pl;
            memset(&pl, 0, sizeof pl);
            uint8_t *mem[3] = {0};
            int fd = open(path, O_RDONLY);
            ckp_chunk_need(r, e, c, c + 1, lo, hi);
            for (int p = 0; p < 3; p++) {
                mem[p] = malloc(hi[p] - lo[p] + 1);
                ck_assert_int_eq(cku_pread_full(fd, mem[p], hi[p] - lo[p], x->plane_offset[p] + lo[p]), 0);
                pl.base[p] = mem[p];
                pl.off[p] = lo[p];
                pl.len[p] = hi[p] - lo[p];
            }
            close(fd);
            ck_assert_int_eq(ckp_read_chunk_from(r, e, c, &pl, buf, s), CKP_OK);
            ck_assert(memcmp(buf, orig + x->orig_offset + c * x->chunk_size, ckp_chunk_len(x, c)) == 0);
            if (x->encoding == CKC_ENC_ARCHIVE) {
                pl.len[1]--;
                ck_assert_int_eq(ckp_read_chunk_from(r, e, c, &pl, buf, s), CKP_ERR_ARG);
            }
            for (int p = 0; p < 3; p++)
                free(mem[p]);
        }
    }
    ckp_close(r);
    /* ckp_read_chunks: runs of every length from every chunk, into even and
     * odd addresses (archive batches need an even one), read with pread and
     * through a mapping */
    for (int mapped = 0; mapped < 2; mapped++) {
        ck_assert_int_eq(ckp_open_ex(path, mapped ? CKP_OPEN_MMAP : 0, &r, err, sizeof err), CKP_OK);
        ck_assert_int_eq(ckp_is_mapped(r), mapped);
        for (uint32_t e = 0; e < ckp_get_info(r)->n_extents; e++) {
            const ckp_extent *x = ckp_get_extent(r, e);
            for (uint64_t c = 0; c <= x->n_chunks; c++)
                for (uint64_t n = 0; c + n <= x->n_chunks; n++) {
                    uint64_t bad = 99, from = x->orig_offset + c * x->chunk_size;
                    uint64_t len = !n ? 0 : (c + n == x->n_chunks ? x->orig_size : (c + n) * x->chunk_size) - c * x->chunk_size;
                    memset(buf, 0xA5, len + 1);
                    ck_assert_int_eq(ckp_read_chunks(r, e, c, n, buf + ((c + n) & 1), s, &bad), CKP_OK);
                    ck_assert(memcmp(buf + ((c + n) & 1), orig + from, len) == 0);
                }
            ck_assert_int_eq(ckp_read_chunks(r, e, 0, x->n_chunks + 1, buf, s, NULL), CKP_ERR_ARG);
            /* ckp_read_chunks_to: each chunk of a run into a buffer of its
             * own (even, odd: an odd one is decoded alone) */
            for (uint64_t c = 0; c < x->n_chunks; c++)
                for (uint64_t n = 1; n <= CKP_RUN_MAX && c + n <= x->n_chunks; n++) {
                    void *to[CKP_RUN_MAX];
                    ckp_status st[CKP_RUN_MAX];
                    for (uint64_t k = 0; k < n; k++)
                        to[k] = (uint8_t *)malloc(CKP_MAX_CHUNK + 1) + ((c + k * n) & 1);
                    ck_assert_int_eq(ckp_read_chunks_to(r, e, c, n, to, st, s), CKP_OK);
                    for (uint64_t k = 0; k < n; k++) {
                        ck_assert_int_eq(st[k], CKP_OK);
                        ck_assert(memcmp(to[k], orig + x->orig_offset + (c + k) * x->chunk_size,
                                         ckp_chunk_len(x, c + k)) == 0);
                        free((uint8_t *)to[k] - ((c + k * n) & 1));
                    }
                }
            void *none[CKP_RUN_MAX + 1] = {0};
            ckp_status nst[CKP_RUN_MAX + 1];
            ck_assert_int_eq(ckp_read_chunks_to(r, e, 0, CKP_RUN_MAX + 1, none, nst, s), CKP_ERR_ARG);
            ck_assert_int_eq(ckp_read_chunks_to(r, e, x->n_chunks, 1, none, nst, s), CKP_ERR_ARG);
        }
        ckp_close(r);
    }
    ckp_scratch_free(s);
    free(buf);
    free(orig);
}
END_TEST

/* A file without an archive extent stays 1.0, readable by older readers. */
START_TEST(version_is_the_lowest)
{
    char path[300], err[512];
    uint64_t total;
    ckp_reader *r;
    snprintf(path, sizeof path, "%s/b.ckpt", tmpdir);
    free(write_file(path, 1, &total));
    ck_assert_int_eq(ckp_open(path, &r, err, sizeof err), CKP_OK);
    ck_assert_uint_eq(ckp_get_info(r)->version_minor, 0);
    ckp_close(r);
}
END_TEST

static void rewrite_header(const char *path, unsigned minor)
{
    uint8_t h[64];
    int fd = open(path, O_RDWR);
    ck_assert_int_eq(cku_pread_full(fd, h, 64, 0), 0);
    h[H_MINOR] = (uint8_t)minor;
    cku_put64(h + H_HASH, ckc_hash64(h, H_HASH));
    ck_assert_int_eq(cku_pwrite_full(fd, h, 64, 0), 0);
    close(fd);
}

START_TEST(archive_damage)
{
    char path[300], err[512];
    uint64_t total;
    uint8_t *orig = NULL, *buf = malloc(CKP_MAX_CHUNK);
    ckp_reader *r;
    ckp_scratch *s = ckp_scratch_new();
    const ckp_extent *x;
    ckp_span sp;
    uint64_t at;

    snprintf(path, sizeof path, "%s/c.ckpt", tmpdir);
    orig = write_file(path, N_PIECES, &total);
    ck_assert_int_eq(ckp_open(path, &r, err, sizeof err), CKP_OK);
    x = ckp_get_extent(r, 1);
    ckp_chunk_span(x, 1, 2, &sp);
    at = _i == 0 ? x->plane_offset[1] + sp.off[1] + 200   /* a word of chunk 1 */
       : _i == 1 ? x->plane_offset[1] + sp.off[1] + 70    /* its raw low bits */
                 : x->plane_offset[0];                    /* the tables' mode byte */
    ckp_close(r);
    flip(path, at);
    if (_i == 2) {
        ck_assert_int_eq(ckp_open(path, &r, err, sizeof err), CKP_ERR_CORRUPT);
        ck_assert_ptr_nonnull(strstr(err, "invalid archive tables"));
    } else {
        ck_assert_int_eq(ckp_open(path, &r, err, sizeof err), CKP_OK);
        for (uint32_t e = 0; e < ckp_get_info(r)->n_extents; e++) {
            const ckp_extent *y = ckp_get_extent(r, e);
            for (uint64_t c = 0; c < y->n_chunks; c++) {
                ckp_status st = ckp_read_chunk(r, e, c, buf, s);
                if (e == 1 && c == 1)
                    ck_assert_int_eq(st, CKP_ERR_CHUNK);
                else
                    ck_assert(st == CKP_OK &&
                              memcmp(buf, orig + y->orig_offset + c * y->chunk_size, ckp_chunk_len(y, c)) == 0);
            }
        }
        /* a run over the damaged chunk stops there and names it; the
         * chunks before it are good, and a run after it reads */
        const ckp_extent *z = ckp_get_extent(r, 1);
        uint64_t bad = 0;
        uint8_t *run = malloc(z->orig_size);
        ck_assert_int_eq(ckp_read_chunks(r, 1, 0, z->n_chunks, run, s, &bad), CKP_ERR_CHUNK);
        ck_assert_uint_eq(bad, 1);
        ck_assert(memcmp(run, orig + z->orig_offset, z->chunk_size) == 0);
        ck_assert_int_eq(ckp_read_chunks(r, 1, 2, z->n_chunks - 2, run, s, &bad), CKP_OK);
        ck_assert(memcmp(run, orig + z->orig_offset + 2 * z->chunk_size, z->orig_size - 2 * z->chunk_size) == 0);
        /* decoded in one run with the others, the damaged chunk fails alone:
         * the chunks before and after it are good */
        ckp_status st[3];
        void *to[3];
        for (int k = 0; k < 3; k++)
            to[k] = run + k * z->chunk_size;
        ck_assert_uint_eq(z->n_chunks, 3);
        ck_assert_int_eq(ckp_read_chunks_to(r, 1, 0, 3, to, st, s), CKP_ERR_CHUNK);
        ck_assert_int_eq(st[0], CKP_OK);
        ck_assert_int_eq(st[1], CKP_ERR_CHUNK);
        ck_assert_int_eq(st[2], CKP_OK);
        ck_assert(memcmp(run, orig + z->orig_offset, z->chunk_size) == 0);
        ck_assert(memcmp(run + 2 * z->chunk_size, orig + z->orig_offset + 2 * z->chunk_size,
                         z->orig_size - 2 * z->chunk_size) == 0);
        free(run);
        ckp_close(r);
    }
    /* the same bytes in a file that says 1.0: archive is not 1.0's */
    flip(path, at);
    rewrite_header(path, 0);
    ck_assert_int_eq(ckp_open(path, &r, err, sizeof err), CKP_ERR_VERSION);
    ck_assert_ptr_nonnull(strstr(err, "archive is format 1.1"));
    rewrite_header(path, 2);
    ck_assert_int_eq(ckp_open(path, &r, err, sizeof err), CKP_ERR_VERSION);
    ckp_scratch_free(s);
    free(buf);
    free(orig);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("container_ans");
    TCase *t = tcase_create("archive");
    tcase_add_checked_fixture(t, setup, tmpdir_remove);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, archive_reads_exactly);
    tcase_add_test(t, version_is_the_lowest);
    tcase_add_loop_test(t, archive_damage, 0, 3);
    suite_add_tcase(su, t);
    return run_suite(su);
}
