/*
 * remote.h — s3://BUCKET/PREFIX as the packed directory of verify, stat and
 * unpack (issue 25): the manifest read from its object, each member opened
 * on an S3 source bound to its ETag (fs/s3/s3_pack.h), the same checks as a
 * local pack's.  Credentials, endpoint and region the AWS way (s3.h).  One
 * pack per process (a command reads one).  Internal to the CLI.
 */
#ifndef CKPTFS_REMOTE_H
#define CKPTFS_REMOTE_H

#include <stdint.h>

#include "container.h"
#include "manifest.h"

/* 1 if dst names an S3 prefix (s3://). */
int ckpt_is_remote(const char *dst);
/* The manifest of the packed directory dst, local (ckm_load) or s3://.
 * @return as ckm_load; for s3://, CKP_ERR_IO with a message saying which
 * (no credentials, access denied, no bucket, no manifest: what is there). */
ckp_status ckpt_load_manifest(const char *dst, ckm_manifest **out, char *err, size_t errCapacity);
/* Open member rel (path with the .ckpt suffix) of the s3:// pack loaded by
 * ckpt_load_manifest.  Thread-safe.  @return as ckp_open_source; CKP_ERR_IO
 * when it cannot be fetched. */
ckp_status ckpt_remote_open(const char *rel, ckp_reader **out, char *err, size_t errCapacity);
/* Bytes of the manifest object (0 if unknown) and of every packed file's
 * object listed (for the summaries). */
uint64_t ckpt_remote_manifest_size(void);
uint64_t ckpt_remote_packed_size(const ckm_manifest *m);

#endif
