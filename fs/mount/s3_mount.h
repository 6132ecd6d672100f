/*
 * s3_mount.h — what an s3://BUCKET/PREFIX mount does differently from a
 * local one (readpath.c calls these where c->s3 is set; internal to the
 * daemon).  The packed directory is the objects under PREFIX: the manifest
 * is read at mount, each packed file's header, TOC and chunk indexes at its
 * first open (HEAD for its size and ETag, then ranged GETs with If-Match:
 * fs/s3/s3_source.h), chunks through the network windows (plane_window.h,
 * ckw_new_sized) or, when none holds them, a ranged GET per plane.  The
 * cache, the decode and the promise (the original bytes or EIO) are the
 * local mount's.
 */
#ifndef CKFS_S3_MOUNT_H
#define CKFS_S3_MOUNT_H

#include "readpath.h"

#define CKFS_S3_WINDOW_BYTES (16ull << 20)  /* original bytes per network window */

/* 1 if PACKED (c->o.dst) names an S3 prefix. */
int ckfs_is_s3(const char *packed);

/* ckfs_ctx_load's part for s3://: the client (credentials, endpoint,
 * region: the AWS way and -o endpoint=,region=,profile=), the manifest
 * (c->m), c->dst (the URL as given, without a trailing '/').  @return CKFS_OK
 * or, with a message that says which and what to do: CKFS_ERR_USAGE (a
 * malformed URL), CKFS_ERR_IO (no credentials, access denied, no such
 * bucket, the server unreachable), CKFS_ERR_NOT_PACKED (no manifest under
 * the prefix), CKFS_ERR_VERSION / CKFS_ERR_DAMAGED (the manifest's). */
ckfs_status ckfs_s3_load(ckfs_ctx *c, char *err, size_t errCapacity);

/* ckfs_open_all for s3://: one listing of the prefix; every packed file of
 * the manifest must be there (an object of at least a header's size).
 * Files are opened at their first open, not here.  @return CKFS_OK or
 * CKFS_ERR_DAMAGED / CKFS_ERR_IO with a message. */
ckfs_status ckfs_s3_check_objects(ckfs_ctx *c, char *err, size_t errCapacity);

/* Open packed file i (HEAD, then the reader on a source bound to that
 * ETag).  @return 0 or an errno value (logged). */
int ckfs_s3_open_reader(ckfs_ctx *c, uint32_t i, ckp_reader **out);

/* Was packed file i (reader r) replaced since it was opened?  @return 0,
 * or EIO (the first finder logs it and calls c->on_change). */
int ckfs_s3_check(ckfs_ctx *c, uint32_t i, const ckp_reader *r);

/* The network windows (plane_window.h) of the mount: s3_windows of them in
 * flight.  NULL when they cannot be made. */
struct ckw_set *ckfs_s3_windows(ckfs_ctx *c);

/* Processes that streamed a file to its end (readpath.c ckfs_file_owner):
 * note pid as one (note = 1), or @return 1 if it is one (note = 0).  The
 * last CKFS_S3_STREAMERS noted are kept. */
#define CKFS_S3_STREAMERS 64
int ckfs_s3_streamer(ckfs_ctx *c, pid_t pid, int note);

/* Note a read of extent e of file `file` by process pid.  @return 1 the
 * first time another process read it within SHARE_MS before (readers
 * slicing the same tensors: its rest is fetched in whole windows, not each
 * slice in its own), else 0. */
int ckfs_s3_shared(ckfs_ctx *c, uint32_t file, uint32_t e, pid_t pid);

/* 1 if processes read file `file` together (ckfs_s3_shared found a read
 * of it shared) within SHARE_MS before. */
int ckfs_s3_file_shared(ckfs_ctx *c, uint32_t file);

/* How far ahead of a sequential reader its windows are fetched. */
uint64_t ckfs_s3_ahead(const ckfs_ctx *c);

/* The S3 counters, appended to the mount's (readpath.c counters()):
 * put(name, value) for each. */
void ckfs_s3_counters(ckfs_ctx *c, void (*put)(void *arg, const char *name, uint64_t v), void *arg);

void ckfs_s3_free(ckfs_ctx *c);

#endif
