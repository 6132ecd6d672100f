/*
 * pack_s3.h — what pack_s3.c (the command `ckptfs pack SRC s3://...`) and
 * pack_s3_send.c (the hooks that send the pack on, pack_internal.h's
 * ckpt_pack_remote) share.  Not installed.
 */
#ifndef CKPTFS_PACK_S3_H
#define CKPTFS_PACK_S3_H

#include <pthread.h>
#include <stdatomic.h>

#include "pack_internal.h"
#include "s3.h"
#include "s3_source.h"

typedef struct {
    ckpt_pack_remote rm;      /* first: the hooks get &rm and cast it back */
    cks3_client *c;
    cks3_source_ctx sc;       /* the sources of the remote copies opened */
    char *bucket, *prefix;
    char url[2048];           /* s3://BUCKET/PREFIX */
    size_t part;              /* multipart part size */
    char *old_manifest;       /* the manifest there when the run started (NULL: none), */
    size_t old_len;           /* its bytes, */
    ckm_manifest *old;        /* and parsed (NULL if not) */
    pthread_mutex_t lock;     /* protects what follows */
    ckm_file *files;          /* the packed files the pack holds: sent, or found there */
    uint64_t *packed;         /* their objects' sizes */
    size_t n, cap;
    size_t n_held;            /* files the manifest lists */
    size_t sent;              /* files uploaded in this run */
    uint64_t sent_bytes;
    atomic_int manifest_gone; /* the manifest there was deleted (before the first upload) */
    int manifest_up;          /* the manifest was put (or found the same) */
} s3_send;

/* Set the hooks of s->rm and what they need (s->c, bucket, prefix, url,
 * part set before). */
void s3_send_init(s3_send *s);
void s3_send_free(s3_send *s);

#endif
