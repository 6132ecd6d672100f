/*
 * manifest.h — the packed directory's list of files (docs/format.md §7).
 *
 * The manifest is a cache of what the packed files already say about
 * themselves: pack rebuilds it from the .ckpt files' TOCs, so it can always be
 * regenerated.  Loading it validates its checksum and every path (hostile
 * input: no absolute paths, no empty, "." or ".." components, no NUL).
 * Entries are sorted by path (byte order).
 */
#ifndef CKM_MANIFEST_H
#define CKM_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "container.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char *path;          /* relative, '/'-separated; the packed file is path + ".ckpt" */
    uint64_t size;       /* original size */
    uint8_t sha256[32];
    uint32_t mode;
    int64_t mtime_ns;
    ckp_kind kind;
} ckm_file;

typedef struct {
    char *path;          /* relative directory ("" is never listed: the root is implicit) */
    uint32_t mode;
} ckm_dir;

typedef struct {
    ckm_file *files;
    size_t n_files;
    ckm_dir *dirs;
    size_t n_dirs;
} ckm_manifest;

/* 1 if rel is an acceptable relative path (see above), else 0. */
int ckm_path_ok(const char *rel);

/* Load DST/ckptfs.manifest.  @return 0, or -1 with a message naming the file
 * and the problem in err. */
int ckm_load(const char *dst_dir, ckm_manifest **out, char *err, size_t errCapacity);

/* Sort entries and write DST/ckptfs.manifest atomically (temporary file,
 * fsync, rename, fsync of the directory). */
int ckm_write(const char *dst_dir, ckm_manifest *m, char *err, size_t errCapacity);

void ckm_free(ckm_manifest *m);

#ifdef __cplusplus
}
#endif
#endif
