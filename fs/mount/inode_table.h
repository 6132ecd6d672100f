/*
 * inode_table.h — the mounted tree: inode numbers, names, attributes.
 *
 * Built once from the manifest at mount time and immutable afterwards (the
 * mount never changes what it serves), so lookups need no locks.  See
 * inode_table.c for how inode numbers map to manifest entries.
 */
#ifndef CKFS_INODE_TABLE_H
#define CKFS_INODE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include "mount.h" /* ckfs_status */

#define CKI_ROOT 1

typedef struct {
    const char *name;      /* last path component; "" for the root */
    const char *path;      /* relative path; "" for the root */
    uint64_t parent;       /* inode of the parent (the root is its own parent) */
    uint32_t mode;         /* S_IFDIR or S_IFREG | permission bits; S_IFLNK | 0777 */
    uint64_t size;         /* files: original size; dirs: 0; links: their target's length */
    int64_t mtime_ns;
    int64_t file;          /* files: index in the manifest's files; dirs, links: -1 */
    const char *target;    /* links: the target text, as packed (never followed here) */
    uint64_t *children;    /* dirs: child inodes sorted by name (byte order) */
    uint32_t n_children;
    uint32_t n_subdirs;
} cki_node;

typedef struct cki_table cki_table;

/* Build the tree of m, a manifest as ckm_load returns it: its guarantees
 * M1-M4 (manifest.h: safe unique paths, none two of a file, a directory and
 * a link, every parent listed) are preconditions, asserted in debug builds.
 * Links get the time of directories (the manifest records none).
 * rootMode is the root's permission bits: the packed directory's own, so
 * the mount is no more open than it (pack makes it no more open than SRC).
 * dirMtimeNs is the time given to directories (the manifest does not record
 * theirs).  @return CKFS_OK, or CKFS_ERR_NOMEM with a message in err. */
ckfs_status cki_build(const ckm_manifest *m, uint32_t rootMode, int64_t dirMtimeNs, cki_table **out,
                      char *err, size_t errCapacity);
void cki_free(cki_table *t);

/* @return the node of ino, or NULL if there is none. */
const cki_node *cki_get(const cki_table *t, uint64_t ino);
/* @return the inode of name in directory parent, or 0 if there is none. */
uint64_t cki_lookup(const cki_table *t, uint64_t parent, const char *name);
/* Number of inodes (the largest inode number). */
uint64_t cki_count(const cki_table *t);
/* The inode of manifest file i. */
uint64_t cki_file_ino(const cki_table *t, size_t i);

#endif
