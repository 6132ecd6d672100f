/*
 * packed_io.h — the mount daemon's handling of the packed files' bytes under
 * -o drop_packed (a model larger than memory: the page cache should hold the
 * decoded bytes alone).  Internal to the daemon (readpath.c).
 *   - The pages of decoded chunks are dropped from the page cache, never
 *     those a chunk not decoded yet reads (ckfs_drop_decoded).
 *   - The kernel's readahead of the packed files is off (ckfs_no_readahead).
 *   - Sequential readers' packed bytes are read ahead with O_DIRECT into
 *     windows of the daemon's own memory (ckfs_window_range), which the
 *     decodes take them from (plane_window.h).
 */
#ifndef CKFS_PACKED_IO_H
#define CKFS_PACKED_IO_H

#include "readpath.h"

/* Right after a reader's open, before any decode: turn the kernel's
 * readahead of its packed file off and drop what the open read (header,
 * table of contents, and the readahead marks among them). */
void ckfs_no_readahead(const ckp_reader *r);

/* Chunk k of reader r was decoded: drop the packed pages of the run of
 * decoded chunks around it; cached: it was read through the page cache
 * (decoded from an O_DIRECT window: it is only marked decoded). */
void ckfs_drop_decoded(ckfs_ctx *c, const ckcache_key *k, const ckp_reader *r, int cached);

/* Read the packed bytes that original bytes [from, to) of manifest file
 * `file` decode from into O_DIRECT windows (c->windows) ahead of their
 * decodes (extents of chunks too large for a window, or a file system
 * without O_DIRECT: the kernel hint), for chunks not decoded yet.  Ahead
 * (demand 0): from the first chunk wholly past from, in windows up to their
 * ends; demand: the chunks of a request about to be decoded, exactly (a
 * few large reads instead of three small ones per chunk). */
void ckfs_window_range(ckfs_ctx *c, uint32_t file, const ckp_reader *r, uint64_t from, uint64_t to, int demand);

/* s3://: every chunk of extent e of manifest file `file` that is not
 * decoded yet and no window holds, in windows (as few as the windows
 * already there allow: several readers slicing the same tensor, whose union
 * is all of it, readpath.c).  @return 0, or -1 when every slot was taken
 * before all of them were asked for. */
int ckfs_window_fill(ckfs_ctx *c, uint32_t file, const ckp_reader *r, uint32_t e);

/* f's reader is being replaced by a re-validated file's (identity.h): the
 * O_DIRECT descriptor of the old one, which the caller keeps open until
 * unmount (windows may be loading from it), or -1; the next window opens
 * one of the new reader's file.  The decoded chunks stay marked: the new
 * file has the same table of contents. */
int ckfs_packed_io_detach(ckfs_mfile *f);

/* Free what the functions above set up for f (at unmount). */
void ckfs_packed_io_free(ckfs_mfile *f);

#endif
