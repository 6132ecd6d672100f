/*
 * test_source_open.c — what ckp_open_source reads of a source (an S3 object
 * in the mount: a round trip per read) at open, against a source in memory
 * that logs every read: the first 64 KiB in one read, the TOC, then the
 * chunk indexes, those lying close together in one read of the span that
 * holds them (container_index.c).  Truth: the indexes a local ckp_open of
 * the same file loads, the original bytes read back through the source's
 * reader, and the damage and failures it must still refuse.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "container.h"
#include "container_internal.h"
#include "util.h"
#include "test_util.h"

#define MAX_LOG 4096

typedef struct {
    ckp_source base;
    uint8_t *bytes;
    pthread_mutex_t mu;
    unsigned reads;
    int fail_at;                       /* the read numbered so fails (EIO); -1: none */
    struct {
        uint64_t off, len;
    } log[MAX_LOG];
} mem_src;

static int mem_pread(ckp_source *s, void *dst, size_t len, uint64_t off)
{
    mem_src *m = (mem_src *)s;
    pthread_mutex_lock(&m->mu);
    unsigned k = m->reads++;
    if (k < MAX_LOG) {
        m->log[k].off = off;
        m->log[k].len = len;
    }
    pthread_mutex_unlock(&m->mu);
    if ((int)k == m->fail_at || off > s->size || len > s->size - off)
        return EIO;
    memcpy(dst, m->bytes + off, len);
    return 0;
}

static void mem_close(ckp_source *s) { (void)s; /* the test frees it */ }

static mem_src *mem_new(const char *path)
{
    mem_src *m = calloc(1, sizeof *m);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    m->bytes = malloc((size_t)st.st_size);
    int fd = open(path, O_RDONLY);
    ck_assert_int_eq(cku_pread_full(fd, m->bytes, (size_t)st.st_size, 0), 0);
    close(fd);
    m->base.pread = mem_pread;
    m->base.close = mem_close;
    m->base.size = (uint64_t)st.st_size;
    m->fail_at = -1;
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void mem_free(mem_src *m)
{
    pthread_mutex_destroy(&m->mu);
    free(m->bytes);
    free(m);
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static void setup(void) { tmpdir_make("srcopen"); }

/* tmpdir/NAME: one RAW extent of 1000 bytes, n_small extents of encoding
 * enc and 1-6 KiB, and after every 100th of them a K15 one of 1.2 MB (its
 * planes put its index far from the others); the original bytes in *orig. */
static void write_model(char path[300], const char *name, uint32_t enc, int n_small, uint8_t **orig,
                        uint64_t *total)
{
    test_extent *x = calloc((size_t)n_small * 2 + 2, sizeof *x);
    int n = 0;
    x[n++] = (test_extent){CKC_ENC_RAW, 1000, "header", 0};
    for (int i = 0; i < n_small; i++) {
        x[n++] = (test_extent){enc, 2 * (512 + xorshift64(&rng_state) % 2560), "norm", 7};
        if (i % 100 == 50)
            x[n++] = (test_extent){CKC_ENC_K15, 2 * 600000, "proj", 7};
    }
    *total = 0;
    for (int i = 0; i < n; i++)
        *total += x[i].size;
    *orig = malloc(*total);
    for (uint64_t k = 0; k + 1 < *total; k += 2) {
        double u1 = (xorshift64(&rng_state) >> 11) * 0x1.0p-53 + 1e-300;
        double u2 = (xorshift64(&rng_state) >> 11) * 0x1.0p-53;
        uint16_t w = bf16_rne((float)(0.02 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)));
        memcpy(*orig + k, &w, 2);
    }
    snprintf(path, 300, "%s/%s", tmpdir, name);
    ckp_writer_opts o = {.path = name, .kind = CKP_KIND_BLOB, .mode = 0644, .jobs = 2};
    uint8_t sha[32] = {0};
    write_packed(path, &o, *orig, x, n, sha);
    free(x);
}

/* r's extents and chunk indexes equal those of the local reader of path. */
static void same_as_local(const ckp_reader *r, const char *path)
{
    char err[512];
    ckp_reader *l;
    ck_assert_int_eq(ckp_open(path, &l, err, sizeof err), CKP_OK);
    ck_assert_uint_eq(ckp_get_info(r)->n_extents, ckp_get_info(l)->n_extents);
    for (uint32_t e = 0; e < ckp_get_info(l)->n_extents; e++) {
        const ckp_extent *a = ckp_get_extent(r, e), *b = ckp_get_extent(l, e);
        ck_assert_uint_eq(a->n_chunks, b->n_chunks);
        ck_assert_int_eq(memcmp(a->index, b->index, a->n_chunks * sizeof *a->index), 0);
    }
    ckp_close(l);
}

/* Every byte of r read back (through its source) equals orig. */
static void every_byte(const ckp_reader *r, const uint8_t *orig, uint64_t total)
{
    uint8_t *back = malloc(total);
    ckp_scratch *s = ckp_scratch_new();
    size_t got = 0;
    ck_assert_int_eq(ckp_pread(r, back, total, 0, &got, s), CKP_OK);
    ck_assert_uint_eq(got, total);
    ck_assert_int_eq(memcmp(back, orig, total), 0);
    ckp_scratch_free(s);
    free(back);
}

/* A packed file of n extents in enc written to path (file: its name; *orig,
 * *total: its original bytes), in a new mem_src (*m), opened through it.
 * (*m)->reads: the reads of the open. */
static ckp_reader *opened(char *path, const char *file, uint32_t enc, int n, uint8_t **orig, uint64_t *total,
                          mem_src **m)
{
    char err[512];
    ckp_reader *r;
    write_model(path, file, enc, n, orig, total);
    *m = mem_new(path);
    ck_assert_int_eq(ckp_open_source(&(*m)->base, file, &r, err, sizeof err), CKP_OK);
    return r;
}

/* r (opened from m, of the packed file path) against the local reader, and
 * every byte of it against orig; then r, m and orig freed. */
static void check_and_close(ckp_reader *r, mem_src *m, const char *path, uint8_t *orig, uint64_t total)
{
    same_as_local(r, path);
    every_byte(r, orig, total);
    ckp_close(r);
    mem_free(m);
    free(orig);
}

START_TEST(many_small_indexes_few_reads)
{
    char path[300];
    uint8_t *orig;
    uint64_t total;
    mem_src *m;
    ckp_reader *r = opened(path, "many.bin", CKC_ENC_K15, 400, &orig, &total, &m);
    ck_assert_ptr_null(ckp_check(r));
    unsigned n_ext = ckp_get_info(r)->n_extents, reads = m->reads;
    /* the first 64 KiB, the TOC, one span per run of small indexes between
     * the 4 big extents' planes (one read per index before: 3 + 405) */
    ck_assert_uint_eq(n_ext, 405);
    ck_assert_uint_le(reads, 2 + 5);
    ck_assert_uint_eq(m->log[0].off, 0);
    ck_assert_uint_eq(m->log[0].len, CKP_SOURCE_PREFIX);
    for (unsigned k = 2; k < reads; k++) /* spans of several indexes: at most 1 MiB each */
        ck_assert_uint_le(m->log[k].len, 1u << 20);
    check_and_close(r, m, path, orig, total);
}
END_TEST

/* ARCHIVE extents: their tables (plane 0, read and checked at open) come
 * in the same spans as the indexes, not one read each after them. */
START_TEST(archive_tables_in_the_spans)
{
    char path[300];
    uint8_t *orig;
    uint64_t total;
    mem_src *m;
    ckp_reader *r = opened(path, "arch.bin", CKC_ENC_ARCHIVE, 150, &orig, &total, &m);
    ck_assert_uint_eq(ckp_get_extent(r, 1)->encoding, CKC_ENC_ARCHIVE);
    /* the first, the TOC, a span before the big extent and one after (one
     * read per index and per table before: 3 + 152 + 150) */
    ck_assert_uint_le(m->reads, 2 + 2);
    check_and_close(r, m, path, orig, total);
}
END_TEST

START_TEST(small_file_one_read)
{
    char path[300];
    uint8_t *orig;
    uint64_t total;
    mem_src *m;
    ckp_reader *r = opened(path, "small.bin", CKC_ENC_K15, 20, &orig, &total, &m);
    ck_assert_uint_lt(m->base.size, CKP_SOURCE_PREFIX);
    ck_assert_uint_eq(m->reads, 1); /* header, TOC and every index in the first read */
    ck_assert_uint_eq(m->log[0].len, m->base.size);
    check_and_close(r, m, path, orig, total);
}
END_TEST

/* ckp_open_source of m (named name) fails with want, its message holding
 * needle; m freed. */
static void open_fails(mem_src *m, const char *name, ckp_status want, const char *needle)
{
    char err[512];
    ckp_reader *r;
    ck_assert_int_eq(ckp_open_source(&m->base, name, &r, err, sizeof err), want);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(err, needle));
    mem_free(m);
}

/* A byte of an index inside a merged span changed: refused by its hash. */
START_TEST(damaged_index_in_a_span)
{
    char path[300];
    uint8_t *orig;
    uint64_t total;
    write_model(path, "bad.bin", CKC_ENC_K15, 400, &orig, &total);
    mem_src *m = mem_new(path);
    uint64_t toc = cku_le64(m->bytes + H_TOC_OFF);
    const uint8_t *rec = m->bytes + toc + CKP_TOC_HEADER_SIZE + 120 * CKP_EXTENT_SIZE;
    m->bytes[cku_le64(rec + X_INDEX_OFF) + 9] ^= 0x10; /* extent 120's hash of chunk 0 */
    open_fails(m, "bad", CKP_ERR_CORRUPT, "chunk index of extent 120");
    free(orig);
}
END_TEST

/* A read of the source that fails (the server down) fails the open: the
 * first, the TOC's, an index span's. */
START_TEST(failed_read_fails_the_open)
{
    char path[300];
    uint8_t *orig;
    uint64_t total;
    write_model(path, "fail.bin", CKC_ENC_K15, 400, &orig, &total);
    mem_src *m = mem_new(path);
    m->fail_at = _i;
    open_fails(m, "fail", CKP_ERR_IO, "fail");
    free(orig);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("source_open");
    TCase *t = tcase_create("core");
    tcase_add_checked_fixture(t, setup, tmpdir_remove);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, many_small_indexes_few_reads);
    tcase_add_test(t, archive_tables_in_the_spans);
    tcase_add_test(t, small_file_one_read);
    tcase_add_test(t, damaged_index_in_a_span);
    tcase_add_loop_test(t, failed_read_fails_the_open, 0, 4);
    suite_add_tcase(s, t);
    return run_suite(s);
}
