/*
 * test_util.h — what the unit tests share: a seeded xorshift generator, BF16
 * rounding, a temporary directory per test, flipping a byte of a file,
 * writing a packed file of given extents, and running a suite.
 */
#ifndef CKPTFS_TEST_UTIL_H
#define CKPTFS_TEST_UTIL_H

#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "container.h"

/* xorshift64 (13, 7, 17): the next value of the generator *state. */
static inline uint64_t xorshift64(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* float -> BF16 rounding to nearest even (NaN kept quiet). */
static inline uint16_t bf16_rne(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- a temporary directory per test (a checked fixture) ------------------- */

static char tmpdir[256];

/* tmpdir: a new directory /tmp/ckptfs-NAME.XXXXXX. */
static inline void tmpdir_make(const char *name)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ckptfs-%s.XXXXXX", name);
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

/* tmpdir and all in it removed (the fixture's teardown). */
static inline void tmpdir_remove(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Flip bit 4 of the byte at off of a file. */
static inline void flip(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x10;
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

/* ---- packed files ------------------------------------------------------------ */

typedef struct {
    uint32_t enc;     /* the encoding ckp_writer_add is asked for */
    uint64_t size;
    const char *name; /* recorded for diagnostics */
    uint32_t dtype;
} test_extent;

/* path: a packed file of orig, cut into the extents x[0..n) in order, with
 * the TOC fields of o and the whole-source digest sha. */
static inline void write_packed(const char *path, const ckp_writer_opts *o, const uint8_t *orig,
                                const test_extent *x, int n, const uint8_t sha[32])
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ckp_writer *w;
    ck_assert_int_eq(ckp_writer_new(fd, o, &w), CKP_OK);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(ckp_writer_add(w, x[i].enc, orig + at, x[i].size, x[i].name, x[i].dtype), CKP_OK);
        at += x[i].size;
    }
    ck_assert_int_eq(ckp_writer_finish(w, sha), CKP_OK);
    ckp_writer_free(w);
    close(fd);
}

/* Run every test of s; the exit status: 1 if any failed, else 0. */
static inline int run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

#endif /* CKPTFS_TEST_UTIL_H */
