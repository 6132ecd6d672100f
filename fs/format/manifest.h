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

/* A symbolic link of the source (format §7 "links", manifest format 2): its
 * target text as readlink gave it, relative or absolute, within the tree or
 * not; readers present it as a link and never follow it themselves. */
typedef struct {
    char *path;          /* relative, like a file's; nothing of it is in DST */
    char *target;        /* 1 .. CKM_TARGET_MAX bytes, no NUL */
} ckm_link;

#define CKM_TARGET_MAX 4095 /* PATH_MAX less its NUL: what symlink(2) takes */

typedef struct {
    ckm_file *files;
    size_t n_files;
    ckm_dir *dirs;
    size_t n_dirs;
    ckm_link *links;     /* sorted by path; none in a format 1 manifest */
    size_t n_links;
} ckm_manifest;

/* The mode a reader gives file f back with (unpack's file, the mount's
 * attributes): the recorded one without the setuid and setgid bits.  A pack
 * keeps no owner, so the file belongs to whoever unpacks or mounts it, and
 * those bits would make it run as them: a user's setuid script packed by
 * root and unpacked, or copied from a mount with cp -a, by root would run as
 * root.  Directories keep theirs (setgid on a directory gives no rights). */
uint32_t ckm_file_mode(const ckm_file *f);

/* 1 if rel is an acceptable relative path (see above), else 0. */
int ckm_path_ok(const char *rel);

/* The file of m whose path is path, or NULL (a binary search: ckm_load
 * sorts the files by path). */
const ckm_file *ckm_find_file(const ckm_manifest *m, const char *path);
/* The link of m whose path is path, or NULL (binary search, as above). */
const ckm_link *ckm_find_link(const ckm_manifest *m, const char *path);

/* Load DST/ckptfs.manifest.  @return CKP_OK with *out set, or one of these
 * with *out NULL and a message naming the file and the problem (the field
 * of an entry, by its index and path) in err (docs/format.md §8, R50-R56):
 *   CKP_ERR_FORMAT   DST is not a packed directory: no manifest (the message
 *                    says whether a pack is unfinished there), DST not a
 *                    directory, or the manifest not a regular file reached
 *                    without links (R51);
 *   CKP_ERR_VERSION  "format" is not 1 or 2: written by a newer ckptfs (R53);
 *   CKP_ERR_CORRUPT  damaged or inconsistent: its first line or checksum
 *                    (R50), its JSON (R56), a field of an entry (R54),
 *                    duplicate names, unlisted parents (R55), over 1 GiB;
 *   CKP_ERR_IO       DST or the manifest cannot be read (errno's text);
 *   CKP_ERR_NOMEM.
 * A loaded manifest's guarantees (what its users may rely on, not check):
 *   M1. every path passes ckp_path_ok (so no component is over 255 bytes,
 *       the name limit the mount reports), and a file's ckp_file_path_problem
 *       too (its last component at most 250 bytes, so R.ckpt is a name);
 *   M2. files are sorted by path (byte order) with no path twice, and so are
 *       directories and links;
 *   M3. no path is two of a file, a directory and a link;
 *   M4. the parent of every entry that has one is a listed directory;
 *   M6. a link's target is 1 to CKM_TARGET_MAX bytes without NUL (any text:
 *       it may point anywhere, and nothing in ckptfs follows it);
 *   M5. sizes are at most 2^53, modes at most 07777. */
ckp_status ckm_load(const char *dst_dir, ckm_manifest **out, char *err, size_t errCapacity);

/* ckm_load of a manifest already read: the size bytes at buf, with a NUL
 * at buf[size] (a stored manifest, named name in messages: an S3 object,
 * say); buf is changed.  The same checks and statuses, but for the file's
 * own (R51, CKP_ERR_IO). */
ckp_status ckm_parse(const char *name, char *buf, size_t size, ckm_manifest **out, char *err,
                     size_t errCapacity);

/* Sort entries and write DST/ckptfs.manifest atomically (temporary file,
 * fsync, rename, fsync of the directory): format 1, or 2 if it lists links
 * (a reader of format 1 alone must refuse it rather than leave them out).  @return CKP_OK, CKP_ERR_IO (the
 * file named in err with errno's text) or CKP_ERR_NOMEM. */
ckp_status ckm_write(const char *dst_dir, ckm_manifest *m, char *err, size_t errCapacity);
/* ckm_write into the directory open at dfd (named dst_dir in messages),
 * wherever its name now leads, the manifest getting mode (whatever the
 * umask) before it takes its name, its temporary made 0600; mode
 * CKM_MODE_UMASK: 0644 under the umask, as ckm_write. */
#define CKM_MODE_UMASK 0xffffffffu
ckp_status ckm_write_at(int dfd, const char *dst_dir, ckm_manifest *m, unsigned mode, char *err,
                        size_t errCapacity);

void ckm_free(ckm_manifest *m);

#ifdef __cplusplus
}
#endif
#endif
