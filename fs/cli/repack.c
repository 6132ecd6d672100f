/*
 * repack.c — `ckptfs repack --format k15|bytesplit|archive PACKED`: convert
 * a packed directory's BF16 tensors to another encoding in place, without
 * the original files, one file at a time.
 *
 * For each listed file whose BF16 extents are not all in the target
 * encoding: its packed file is opened against its manifest entry, decoded
 * whole into a private temporary file of PACKED (the bytes' SHA-256 checked
 * against the manifest's), encoded again as `pack --format` would (same
 * path, kind, mode, mtime, SHA-256 in its TOC) into a temporary packed file
 * next to it, fsynced, decoded back and its SHA-256 checked against the
 * manifest's once more, and only then renamed over the old packed file and
 * its directory fsynced.  The manifest lists no encoding or packed size, so
 * it does not change.
 *
 * Invariants (why a crash loses nothing):
 *   1. the old packed file is replaced only by a rename, after the new one
 *      is durable and decodes to the recorded SHA-256: at every instant each
 *      name holds a complete packed file of the same original bytes;
 *   2. the decoded original is an unnamed file where the file system allows
 *      (nothing left by a crash); other temporaries end in TMP_SUFFIX, which
 *      pack and repack remove when they start (pack_dst.c, remove_temps); a
 *      rerun skips the files already converted;
 *   3. its state (ckptfs.state, pack_state.c), where it has one, names the
 *      new encoding and says "repacking" before the first file is replaced,
 *      and no longer "repacking" once the last one is durable: a rerun of
 *      the pack resumes only over files all in the encoding it names;
 *   4. PACKED is locked (flock, exclusive) for the run, as pack locks it:
 *      unpack, verify, stat and pack refuse to run on it meanwhile.  The
 *      mount takes no lock: a mount of PACKED sees each replaced file change
 *      and refuses it (EIO) until it is mounted again.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "cmd_common.h"
#include "hashing.h"
#include "pack_internal.h"
#include "remote.h"
#include "safetensors.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The decoded original of the file at work: an unnamed file (O_TMPFILE) of
 * PACKED, or where its file system has none, ORIG_TMP: "." + "" + TMP_SUFFIX,
 * the temporary of an empty name, which no packed file has (a file `x` is
 * written as `.x.ckpt.tmp`: a name such as `.ckptfs-repack-original.ckpt.tmp`
 * was the temporary of a file `ckptfs-repack-original` too). */
#define ORIG_TMP "." TMP_SUFFIX
#define STEP (8u << 20)

/* 1 if some BF16 extent of r is not in encoding enc. */
static int needs_repack(const ckp_reader *r, uint32_t enc)
{
    for (uint32_t e = 0; e < ckp_get_info(r)->n_extents; e++) {
        uint32_t x = ckp_get_extent(r, e)->encoding;
        if (x >= CKC_ENC_K15 && x != enc)
            return 1;
    }
    return 0;
}

/* Decode all of r (size bytes) into p, or, when same is not NULL, STEP
 * bytes at a time into p (STEP bytes) to compare with same; 0 if the bytes'
 * SHA-256 is want (and they are same's), else -1 after saying why. */
static int decode_checked(const ckp_reader *r, uint8_t *p, const uint8_t *same, uint64_t size,
                          const uint8_t want[32], const char *what)
{
    ckp_scratch *s = ckp_scratch_new();
    cku_sha256 *h = cku_sha256_new();
    uint8_t got[32];
    ckp_status st = s && h ? CKP_OK : CKP_ERR_NOMEM;
    for (uint64_t off = 0; st == CKP_OK && off < size; off += STEP) {
        size_t n = size - off < STEP ? (size_t)(size - off) : STEP, done = 0;
        uint8_t *to = same ? p : p + off;
        st = ckp_pread(r, to, n, off, &done, s);
        if (st == CKP_OK && (done != n || (same && memcmp(to, same + off, n))))
            st = CKP_ERR_CORRUPT;
        if (st == CKP_OK)
            cku_sha256_update(h, to, n);
    }
    ckp_scratch_free(s);
    if (!h)
        return ckpt_fail("repack", st, "out of memory"), -1;
    cku_sha256_final(h, got);
    if (st != CKP_OK) {
        fprintf(stderr, "ckptfs repack: %s: %s; nothing changed for it\n", CKU_ESC(what), ckp_status_name(st));
        return -1;
    }
    if (memcmp(got, want, 32)) {
        fprintf(stderr, "ckptfs repack: %s: the decoded bytes do not have the SHA-256 the manifest records; "
                "nothing changed for it (run ckptfs verify)\n", CKU_ESC(what));
        return -1;
    }
    return 0;
}

/* A temporary file of dfd for the original bytes; *named: whether it is
 * ORIG_TMP (to remove after) rather than unnamed. */
static int open_orig_tmp(int dfd, int *named)
{
    int fd = openat(dfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    *named = fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL);
    if (*named)
        fd = openat(dfd, ORIG_TMP, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    return fd;
}

/* The original bytes of r in a temporary file of dfd, mapped. */
static uint8_t *decode_to_temp(int dfd, const ckp_reader *r, const ckm_file *f, const char *what, int *fd_out,
                               int *named)
{
    int fd = open_orig_tmp(dfd, named);
    uint8_t *p = NULL;
    *fd_out = fd;
    /* Blocks are allocated before the bytes are written through the map: a
     * map of a sparse file raises SIGBUS when the disk fills. */
    int e = fd < 0 ? errno : ftruncate(fd, (off_t)f->size) ? errno
                   : f->size ? posix_fallocate(fd, 0, (off_t)f->size) : 0;
    if (e) {
        fprintf(stderr, "ckptfs repack: %s: a temporary file for its original bytes: %s; nothing changed for "
                "it\n", CKU_ESC(what), strerror(e));
        return NULL;
    }
    if (f->size) {
        p = mmap(NULL, (size_t)f->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "ckptfs repack: %s: a temporary file for its original bytes: %s\n", CKU_ESC(what),
                    strerror(errno));
            return NULL;
        }
    } else {
        p = (uint8_t *)"";
    }
    if (decode_checked(r, p, NULL, f->size, f->sha256, what)) {
        if (f->size)
            munmap(p, (size_t)f->size);
        return NULL;
    }
    return p;
}

/* Encode p (f's original bytes) into the new packed file tmp (relative to
 * dfd), synced.  0, or -1 after saying why. */
static int encode_to(int dfd, const char *tmp, const ckm_file *f, const ckp_info *in, const uint8_t *p,
                     uint32_t enc, int jobs, const char *what)
{
    char err[512] = "";
    st_header *h = NULL;
    ckp_writer *w = NULL;
    ckp_writer_opts o = {.path = f->path, .kind = in->kind, .mode = in->mode, .mtime_ns = in->mtime_ns,
                         .jobs = jobs};
    ckp_status st = CKP_OK;
    int fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644), rc = -1;

    if (fd < 0) {
        fprintf(stderr, "ckptfs repack: %s: %s\n", CKU_ESC(tmp), strerror(errno));
        return -1;
    }
    if (in->kind == CKP_KIND_SAFETENSORS)
        st = st_parse(p, (size_t)f->size, f->size, &h, err, sizeof err);
    if (st == CKP_OK)
        st = ckp_writer_new(fd, &o, &w);
    if (st == CKP_OK && (st = ckpt_add_extents(w, enc, p, f->size, h, NULL)) == CKP_OK)
        st = ckp_writer_finish(w, f->sha256);
    if (st != CKP_OK)
        fprintf(stderr, "ckptfs repack: %s: %s: %s\n", CKU_ESC(what), ckp_status_name(st),
                w ? ckp_writer_error(w) : err);
    else if ((cku_fault_point(), fsync(fd)))
        fprintf(stderr, "ckptfs repack: %s: %s\n", CKU_ESC(tmp), strerror(errno));
    else
        rc = 0;
    ckp_writer_free(w);
    st_free(h);
    close(fd);
    return rc;
}

/* Convert one file; before the first is changed (*noted 0), note in the
 * state that a repack to enc started.  @return 1 converted, 0 nothing to do,
 * -1 failed. */
static int repack_file(int dfd, const char *dst, const ckm_file *f, uint32_t enc, int jobs, uint64_t sizes[2],
                       int *noted)
{
    char rel[CKP_MAX_PATH + 8], tmp[CKP_MAX_PATH + 64] = "", what[CKP_MAX_PATH + 8];
    ckp_reader *r = ckpt_open_member("repack", dst, f), *nr = NULL;
    struct stat old_st, new_st;
    uint8_t *p = NULL, *back = NULL;
    int ofd = -1, named = 0, rc = -1;

    if (!r)
        return -1;
    snprintf(rel, sizeof rel, "%s" CKP_SUFFIX, f->path);
    snprintf(what, sizeof what, "%s/%s", dst, rel);
    if (!needs_repack(r, enc)) {
        ckp_close(r);
        return 0;
    }
    if (!*noted && repack_note_state(dfd, dst, enc, 0))
        goto out;
    *noted = 1;
    tmp_rel(tmp, sizeof tmp, f->path);
    if (fstatat(dfd, rel, &old_st, AT_SYMLINK_NOFOLLOW) || !(p = decode_to_temp(dfd, r, f, what, &ofd, &named)))
        goto out;
    if (encode_to(dfd, tmp, f, ckp_get_info(r), p, enc, jobs, what))
        goto out;
    /* read back: the new file decodes to the recorded SHA-256 */
    char err[512];
    if (ckp_open_in(dfd, dst, tmp, &nr, err, sizeof err) != CKP_OK) {
        fprintf(stderr, "ckptfs repack: %s\n", err);
        goto out;
    }
    if (!(back = malloc(STEP))) { /* the new file is compared with the original a step at a time */
        ckpt_fail("repack", CKP_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (decode_checked(nr, back, p, f->size, f->sha256, tmp)) {
        fprintf(stderr, "ckptfs repack: %s: the new packed file does not read back; the old one is kept\n",
                CKU_ESC(what));
        goto out;
    }
    char dir[CKP_MAX_PATH + 8];
    const char *slash = strrchr(f->path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - f->path) : 0, f->path);
    if (fchmodat(dfd, tmp, old_st.st_mode & 07777, 0) || (cku_fault_point(), renameat(dfd, tmp, dfd, rel)) ||
        (cku_fault_point(), fsync_at(dfd, dir))) {
        fprintf(stderr, "ckptfs repack: %s: %s\n", CKU_ESC(what), strerror(errno));
        goto out;
    }
    if (fstatat(dfd, rel, &new_st, AT_SYMLINK_NOFOLLOW) == 0) {
        sizes[0] += (uint64_t)old_st.st_size;
        sizes[1] += (uint64_t)new_st.st_size;
    }
    rc = 1;
out:
    if (rc < 0 && *tmp)
        unlinkat(dfd, tmp, 0);
    if (p && f->size)
        munmap(p, (size_t)f->size);
    if (ofd >= 0) {
        close(ofd);
        cku_fault_point();
        if (named)
            unlinkat(dfd, ORIG_TMP, 0);
    }
    free(back);
    ckp_close(nr);
    ckp_close(r);
    return rc;
}

int ckpt_repack(const char *dst, uint32_t enc, int jobs)
{
    char err[1024];
    ckm_manifest *m = NULL;
    uint64_t sizes[2] = {0, 0};
    size_t done = 0, failed = 0;
    if (ckpt_is_remote(dst)) {
        fprintf(stderr, "ckptfs repack: %s: repack converts a local packed directory in place; unpack or mount "
                "this one and pack it again with --format instead\n", CKU_ESC(dst));
        return CKPT_EXIT_FAIL;
    }
    int dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        fprintf(stderr, "ckptfs repack: %s: %s\n", CKU_ESC(dst), strerror(errno));
        return CKPT_EXIT_FAIL;
    }
    if (flock(dfd, LOCK_EX | LOCK_NB)) {
        fprintf(stderr, "ckptfs repack: %s: another ckptfs command is using it; run this again once it has "
                "finished\n", CKU_ESC(dst));
        close(dfd);
        return CKPT_EXIT_FAIL;
    }
    ckp_status st = ckm_load(dst, &m, err, sizeof err);
    if (st != CKP_OK) {
        close(dfd);
        return ckpt_fail("repack", st, err);
    }
    remove_temps(dfd); /* of a run that was interrupted (invariant 2) */
    /* Every packed file opens and matches its entry before any is changed;
     * damage inside a chunk shows only when the file is decoded: the files
     * converted before it stay converted (each whole). */
    for (size_t i = 0; i < m->n_files && !failed; i++) {
        ckp_reader *r = ckpt_open_member("repack", dst, &m->files[i]);
        if (!r) {
            fprintf(stderr, "ckptfs repack: %s: no file converted (run ckptfs verify)\n", CKU_ESC(dst));
            failed++;
        }
        ckp_close(r);
    }
    int noted = 0;
    for (size_t i = 0; i < m->n_files && !failed; i++) {
        int rc = repack_file(dfd, dst, &m->files[i], enc, jobs, sizes, &noted);
        if (rc < 0) {
            failed++;
            break; /* stop at the first failure: nothing after it is touched */
        }
        done += (size_t)rc;
    }
    /* all in enc, each durable: the state says so (invariant 3) */
    if (!failed && repack_note_state(dfd, dst, enc, 1))
        failed++;
    if (!failed)
        printf("repacked %zu of %zu files to %s: %.1f MB -> %.1f MB\n", done, m->n_files, ckc_encoding_name(enc),
               sizes[0] / 1e6, sizes[1] / 1e6);
    ckm_free(m);
    close(dfd);
    return failed ? CKPT_EXIT_FAIL : CKPT_EXIT_OK;
}
