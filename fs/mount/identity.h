/*
 * identity.h — is a packed file still the one the mount bound, and if it
 * is not, may the file now at its path be served instead (a packed
 * directory on a shared POSIX file system, rewritten under the mount:
 * rsync's temporary file and rename, cp over it, the same pack copied
 * again).  Internal to the daemon's read path (readpath.c); an s3://
 * object is checked by its ETag instead (s3_mount.c).
 *
 * A file found changed is re-validated: opened again (header and table of
 * contents checked against their hashes, as at mount), bound to its
 * manifest entry (path, size, SHA-256), and its table of contents compared
 * with the bound file's: the same extents, planes and chunk index, chunk
 * hashes included.  If all match it is served again (a new file replaces
 * the bound reader, which is kept open until unmount: threads may still be
 * decoding from it); if not, its opens and reads fail with EIO until a file
 * that passes is put there.  Why that is enough for "the original bytes or
 * EIO": docs/security.md, "A packed file rewritten under the mount".
 */
#ifndef CKFS_IDENTITY_H
#define CKFS_IDENTITY_H

#include "readpath.h"

/* Open manifest file i's packed file (or object) and bind it to its
 * manifest entry (path, size, SHA-256 in its TOC).  @return 0, or an errno
 * value with what is wrong (naming the file) in msg: EIO for damage or
 * another file, EAGAIN for an s3:// server that failed. */
int ckfs_open_reader(ckfs_ctx *c, uint32_t i, ckp_reader **out, char *msg, size_t msgCapacity);

/* Is packed file i (reader r, used for s3:// only) still what the mount
 * bound, or a file that passes re-validation?  Its path must name the
 * same file (device, inode) and that file must have the same size, mtime
 * and ctime; if not, it is re-validated (above), once per version seen
 * (device, inode, size, mtime, ctime).  Two system calls on metadata the
 * kernel holds when nothing changed.  @return 0 (*fresh set when the file
 * was re-validated just now: a decode that failed may be tried again), or
 * EIO (the first refusal after the file was served is logged and calls
 * c->on_change). */
int ckfs_check_bound(ckfs_ctx *c, uint32_t i, const ckp_reader *r, int *fresh);

/* Close the readers (and O_DIRECT descriptors) that re-validated files
 * replaced (at unmount, after the cache and windows are stopped). */
void ckfs_identity_free(ckfs_mfile *f);

#endif
