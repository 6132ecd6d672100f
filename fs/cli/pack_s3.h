/*
 * pack_s3.h — what pack_s3.c (the command `ckptfs pack SRC s3://...`) and
 * pack_s3_send.c (the hooks that send the pack on, pack_internal.h's
 * ckpt_pack_remote) share.  Not installed.
 */
#ifndef CKPTFS_PACK_S3_H
#define CKPTFS_PACK_S3_H

#include <pthread.h>
#include <stdatomic.h>

#include <cjson/cJSON.h>

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
    char (*etags)[CKS3_ETAG_MAX]; /* and ETags (as this run sent or found them) */
    size_t n, cap;
    size_t n_held;            /* files the manifest lists */
    size_t sent;              /* files uploaded in this run */
    uint64_t sent_bytes;
    atomic_int manifest_gone; /* the manifest there was deleted (before the first upload) */
    int manifest_up;          /* the manifest was put (or found the same) */
    char my_state[CKS3_ETAG_MAX]; /* the ETag of the state this run put, or found there at its start ("": */
                              /* none): another run's replacing it is how a pack learns it has a rival */
    int state_put;            /* this run put its state */
    atomic_int rival;         /* one was found (said once): this run stops */
    /* resuming interrupted uploads (pack_s3_resume.c) */
    cJSON *old_state;         /* the state there when the run started (NULL: none) */
    cks3_upload_list pending; /* the unfinished uploads under the prefix when the run started */
    unsigned char *claimed;   /* [pending.n]: taken by a file's upload (resumed or aborted); under lock */
    size_t parts_reused;      /* parts of interrupted uploads kept, not sent again; under lock */
    uint64_t bytes_reused;    /* their bytes */
    size_t pruned, foreign;   /* objects not in the new manifest: deleted, kept (pack_s3_prune.c) */
} s3_send;

/* Set the hooks of s->rm and what they need (s->c, bucket, prefix, url,
 * part set before). */
void s3_send_init(s3_send *s);
void s3_send_free(s3_send *s);

/* pack_s3_resume.c.  List the unfinished uploads under the prefix into
 * s->pending (before anything is sent).  @return 0, or -1 after saying why. */
int s3_resume_list(s3_send *s);
/* The upload that is to send the staged packed file fd (size bytes, the
 * packed copy of the source file in describes) as key: the newest
 * unfinished upload of key whose first part (the header, which names the
 * source's size, mtime and SHA-256) is the MD5 of this run's first part,
 * if the state of the run that started it recorded the source file as it
 * is now, its parts listed in *have (the caller reuses a part only if its
 * ETag is the MD5 of this run's bytes for it); else a new upload (*have
 * empty).  Every other unfinished upload of key is aborted.  buf: s->part
 * bytes of scratch.  *id malloc'ed.  @return 0, or -1 with the reason in err. */
int s3_resume_pick(s3_send *s, const char *key, const ckp_info *in, int fd, uint64_t size, uint8_t *buf, char **id,
                   cks3_part_list *have, char *err, size_t errCapacity);
/* Abort the uploads in s->pending no file took (a file gone from the
 * source, or whose object was found complete).  @return 0, or -1 after
 * saying why. */
int s3_resume_abort_rest(s3_send *s);
/* pack_s3_prune.c.  Once the manifest is up: delete the packed files
 * under the prefix that the manifest (the one staged in stage) does not
 * list; keep, and count, every object that is not a packed file.
 * @return 0, or -1 after saying why. */
int s3_prune(s3_send *s, const char *stage);
/* Read up to len bytes at off of fd (fewer only at the end); -1 on error. */
ssize_t s3_read_at(int fd, uint8_t *p, size_t len, uint64_t off);

#endif
