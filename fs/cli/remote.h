/*
 * remote.h — s3://BUCKET/PREFIX as the packed directory of verify, stat and
 * unpack (issue 25): the manifest read from its object, each member opened
 * on an S3 source bound to its ETag (fs/s3/s3_pack.h), the same checks as a
 * local pack's.  Credentials, endpoint and region the AWS way (s3.h), or by
 * -o, which pack s3:// takes too (its client from ckpt_remote_client).  One
 * pack per process (a command reads one).  Internal to the CLI.
 */
#ifndef CKPTFS_REMOTE_H
#define CKPTFS_REMOTE_H

#include <stdint.h>

#include "container.h"
#include "manifest.h"
#include "s3.h"

/* -o LIST of pack, verify, stat and unpack: the S3 connection's settings
 * (endpoint=, region=, profile=, s3_timeout=: the mount's, one parser,
 * s3.h cks3_opts), kept for ckpt_remote_client.  @return 0, or -1 after
 * printing "ckptfs CMD: ..." naming the option (an unknown one, one of the
 * mount only, a bad value: the value never echoed). */
int ckpt_remote_options(const char *cmd, const char *list);
/* -o given with a PACKED that is not s3:// (they apply to an s3:// PACKED
 * only): -1 after saying so; else 0. */
int ckpt_remote_options_check(const char *cmd, const char *packed);
/* The client of the commands for url (s3://...): -o's settings over the
 * AWS environment and files (s3.h), each request retried for s3_timeout
 * (default 30 s) before it fails, at most maxConns connections (0: the
 * client's default).  With -v (and not --json), a line on stdout says the
 * endpoint, region, where the credentials came from (no secret) and the
 * s3_timeout.  @return as cks3_client_new, err "URL: why". */
cks3_status ckpt_remote_client(const char *url, unsigned maxConns, cks3_client **out, char *err,
                               size_t errCapacity);

/* 1 if dst names an S3 prefix (s3://). */
int ckpt_is_remote(const char *dst);
/* The manifest of the packed directory dst, local (ckm_load) or s3://.
 * @return as ckm_load; for s3://, CKP_ERR_IO with a message saying which
 * (no credentials, access denied, no bucket, no manifest: what is there). */
ckp_status ckpt_load_manifest(const char *dst, ckm_manifest **out, char *err, size_t errCapacity);
/* Open member rel (path with the .ckpt suffix) of the s3:// pack loaded by
 * ckpt_load_manifest.  Thread-safe.  @return as ckp_open_source; CKP_ERR_IO
 * when it cannot be fetched: the object is not there (the pack's fault), or
 * the server could not be reached, failed or refused (ckpt_remote_unreadable
 * tells which). */
ckp_status ckpt_remote_open(const char *rel, ckp_reader **out, char *err, size_t errCapacity);
/* 1 if the last failure on this thread of ckpt_remote_open, or of a read
 * of a reader it opened (CKP_ERR_IO), was not the pack's fault: the server
 * unreachable, failing or timing out after the retries, an error status,
 * access refused, the object replaced while read; *what (if given) then
 * says which object and what failed (no secret).  0: the object is missing,
 * or nothing failed that way since ckpt_remote_open last began. */
int ckpt_remote_unreadable(const char **what);
/* What to say of a member's read that failed with CKP_ERR_IO: this
 * thread's failure (ckpt_remote_unreadable), else the last one on any
 * thread (a fetch ahead runs on its own), else that the server failed just
 * before; in buf, returned. */
const char *ckpt_remote_read_failure(char *buf, size_t cap);
/* The members opened from now on are read whole, each of a tensor's planes
 * in order (verify, unpack): fetched in windows of 8 MiB
 * (CKPTFS_S3_WINDOW_MIB), 2 ahead of each
 * reader's, several GETs in flight; at most 96 MiB per member open (see
 * cks3_pack_windows).  Not for stat, which reads headers only. */
void ckpt_remote_read_whole(void);
/* Bytes of the manifest object (0 if unknown); and those plus the sizes of
 * the objects of every member opened since (each by the HEAD it was opened
 * with: no listing, nothing more to fail), for the summaries of a command
 * that opens every member once (unpack). */
uint64_t ckpt_remote_manifest_size(void);
uint64_t ckpt_remote_packed_size(void);

#endif
