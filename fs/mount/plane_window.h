/*
 * plane_window.h — packed bytes read ahead with O_DIRECT, for the mount
 * daemon's -o drop_packed (a model larger than memory).
 *
 * A window is up to CKW_BYTES of original bytes, whole chunks of one extent
 * of one packed file (at most ckw_window_chunks of them, from the chunk the
 * prefetch names to the next multiple of that): the bytes their decodes
 * read from each plane (ckp_chunk_need), read
 * with one O_DIRECT pread per plane into the daemon's own memory by a few
 * I/O threads, ahead of the decodes (ckw_prefetch).  A decode that finds its
 * chunk's window decodes from it (ckp_read_chunk_from; it waits while the
 * window loads); one that finds none reads the packed file as before.  The
 * page cache never holds the packed bytes read this way: nothing to drop
 * afterwards, no copy out of the page cache, and the disk is read in large
 * requests, several at once, whatever the kernel's readahead would do with
 * the three plane streams of a file.
 *
 * Bounded: at most maxWindows exist, each the packed bytes of at most
 * CKW_BYTES of original bytes (about 0.7 MiB for BF16) plus a few pages:
 * at most 1.25x that (all weights escaped; zstd's bound), since a window
 * ends before a chunk that claims more (ckp_bounded_run: its decode refuses
 * it unread, R46/R47); a window leaves once each of its chunks was decoded from it,
 * and when all are taken a prefetch replaces the least recently used window
 * nobody holds, or is dropped.  A window whose load failed is not used: the
 * decode reads the file itself and reports what is wrong.
 * FUSE-free; all functions are thread-safe.
 */
#ifndef CKFS_PLANE_WINDOW_H
#define CKFS_PLANE_WINDOW_H

#include <stdint.h>

#include "container.h"

#define CKW_BYTES (1u << 20)       /* original bytes per window: 8 BF16 chunks */
#define CKW_MAX_CHUNKS 128         /* chunks per window at most (one bit each in its mask; a multiple of 64) */

typedef struct ckw_set ckw_set;
typedef struct ckw_window ckw_window;

typedef struct {
    uint64_t loads, load_bytes;    /* windows read, and the bytes of their preads */
    uint64_t failures;             /* loads that failed (the decodes read the file then) */
    uint64_t hits;                 /* decodes from a window */
    uint64_t waits;                /* of which found it still loading */
    uint64_t dropped, replaced;    /* prefetches dropped (all taken) / windows replaced unused */
} ckw_stats;

/* Chunks per window of extent x: CKW_BYTES of them but at most
 * CKW_MAX_CHUNKS, or 0 when its chunks are larger (read as before). */
unsigned ckw_window_chunks(const ckp_extent *x);

/* Chunks per window of extent x in set w (its window size). */
unsigned ckw_set_chunks(const ckw_set *w, const ckp_extent *x);

/* @return NULL when out of memory or the threads cannot start. */
ckw_set *ckw_new(unsigned maxWindows, unsigned ioThreads);
/* ckw_new with windows of windowBytes original bytes (CKW_MAX_CHUNKS chunks
 * at most) instead of CKW_BYTES: the network windows of an s3:// mount
 * (16 MiB: 128 BF16 chunks, ~11 MiB of packed bytes). */
ckw_set *ckw_new_sized(unsigned maxWindows, unsigned ioThreads, uint64_t windowBytes);
/* Stop the I/O threads and free everything; no window may be held. */
void ckw_free(ckw_set *w);

/* Queue the load of a window from chunk c of extent e of file number file
 * (reader r, and dfd, a descriptor of the same file opened O_DIRECT; -1
 * for a reader of a source, ckp_open_source, whose windows are read with
 * ckp_read_packed: one range GET per plane, or one for planes close
 * together), up to chunk cEnd at most (exclusive), unless one holds c.
 * Best effort; r and dfd must stay open until ckw_free.  @return the chunk
 * up to which windows now hold [c, ...): c when none does (all slots
 * taken, or c's decode refused unread). */
uint64_t ckw_prefetch(ckw_set *w, uint32_t file, const ckp_reader *r, int dfd, uint32_t e, uint64_t c, uint64_t cEnd);

/* The loaded window holding chunk c of extent e of file (waiting while it
 * loads), held until ckw_put, with *pl its planes; NULL when there is none
 * or its load failed. */
ckw_window *ckw_get(ckw_set *w, uint32_t file, const ckp_reader *r, uint32_t e, uint64_t c, ckp_planes *pl);
/* Give back a window from ckw_get; decoded: chunk c was decoded from it. */
void ckw_put(ckw_set *w, ckw_window *win, uint64_t c, int decoded);

void ckw_get_stats(ckw_set *w, ckw_stats *st);

/* Slots free now (no window in them): a prefetch takes one of these before
 * it replaces a loaded window nobody holds (which may not be used yet). */
unsigned ckw_free_slots(ckw_set *w);

#endif
