/*
 * s3_pack.h — a packed directory stored under s3://BUCKET/PREFIX (one
 * object per packed file, "PREFIX/REL.ckpt", and "PREFIX/ckptfs.manifest"):
 * what every reader of one does, the mount (fs/mount/s3_mount.c) and the
 * commands verify, stat and unpack (fs/cli/remote.c).  Messages name the
 * URL and say what to do; no secret.
 */
#ifndef CKS3_PACK_H
#define CKS3_PACK_H

#include "container.h"
#include "s3.h"
#include "s3_source.h"

/* A message for a failed call on the pack at url (st, the client's
 * message msg): access denied (which credentials), no such bucket (which
 * endpoint and region), the server unreachable, or msg itself. */
void cks3_pack_explain(cks3_client *c, const char *url, const char *bucket, cks3_status st, const char *msg,
                       char *err, size_t errCapacity);

/* GET PREFIX/ckptfs.manifest (at most maxSize bytes) into a malloc'ed,
 * NUL-terminated *buf of *len bytes.  @return CKS3_OK; CKS3_ERR_NOT_FOUND
 * with a message that says what is under the prefix instead (nothing, an
 * unfinished pack, objects but no manifest, a packed directory further
 * down); CKS3_ERR_RANGE (larger than maxSize); else the client's status
 * and message (the caller explains it: cks3_pack_explain, or its own). */
cks3_status cks3_pack_manifest(cks3_client *c, const char *bucket, const char *prefix, size_t maxSize, char **buf,
                               size_t *len, char *err, size_t errCapacity);

/* Open the packed file PREFIX/rel (rel with its .ckpt suffix) of sc's
 * bucket: its first GET (size, ETag: cks3_source_open, no HEAD), then the
 * reader on a source bound to that ETag.
 * @return CKP_OK; CKP_ERR_IO (not there, unreachable: the message says),
 * CKP_ERR_NOMEM, or the reader's status (damaged header, TOC, index). */
ckp_status cks3_pack_open_file(cks3_source_ctx *sc, const char *prefix, const char *rel, ckp_reader **out,
                               char *err, size_t errCapacity);

/* A source that reads inner (an object read whole, chunk after chunk: a
 * read-back) in blocks of `block` bytes, one ranged GET each, keeping at
 * most `blocks` of them (least recently used goes): every packed byte is
 * fetched about once, in a few large GETs, instead of each chunk's plane
 * ranges one by one.  Reads of a block being fetched wait for it; blocks
 * are fetched in parallel by the threads that need them.  Takes inner
 * (freed with it, or at once when out of memory: NULL).  Memory: at most
 * blocks x block bytes, allocated as used. */
ckp_source *cks3_pack_readahead(ckp_source *inner, size_t block, unsigned blocks);
/* cks3_pack_readahead, and more: once a reader comes to a block, the
 * `ahead` blocks after it are fetched at once, each on a thread of its own
 * (several GETs in flight), into blocks no reader waits for and that are
 * not fetched ahead and unread.  For a reader of the whole object in order
 * of each of its streams (verify, unpack: a chunk reads a run of each of a
 * tensor's planes): ~3 streams x (1 + ahead) blocks should fit in `blocks`.
 * Memory: at most blocks x block bytes; closing waits for the fetches. */
ckp_source *cks3_pack_windows(ckp_source *inner, size_t block, unsigned blocks, unsigned ahead);
/* The source s reads through: inner for a cks3_pack_readahead source, else s. */
const ckp_source *cks3_pack_inner(const ckp_source *s);

#endif
