/*
 * pack_s3_prune.c — once the manifest of `ckptfs pack SRC s3://...` is up,
 * the packed files under the prefix that it does not list are deleted: the
 * files of an earlier pack there that a `--force` from another source no
 * longer holds (or that an earlier killed run left), which nothing would
 * ever read and the bucket would bill forever.  Never before the manifest
 * is up: until then a reader sees the old pack whole or no pack at all.
 *
 * Only what is ckptfs's own goes: a key ending in .ckpt whose object opens
 * as a packed file (or as a damaged one, or one of a newer format), as a
 * local `pack --force` clears a directory (pack_state.c).  Every other
 * object under the prefix (a README put beside the pack; check_prefix in
 * pack_s3.c refuses a prefix of foreign objects only when no pack is there)
 * is kept and counted.  A --delete-source run never loses an object this
 * way: every file it holds is in its manifest.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_common.h"
#include "pack_s3.h"
#include "s3_pack.h"
#include "util.h"

/* 1 if rel (a key below the prefix) is one the manifest m lists: itself,
 * the state, or a packed file of m. */
static int listed(const ckm_manifest *m, const char *rel)
{
    if (!strcmp(rel, CKP_MANIFEST_NAME) || !strcmp(rel, CKP_STATE_NAME))
        return 1;
    if (!has_suffix(rel, CKP_SUFFIX))
        return 0;
    char *path = strndup(rel, strlen(rel) - strlen(CKP_SUFFIX));
    int found = path && ckm_find_file(m, path);
    free(path);
    return found || !path; /* out of memory: kept */
}

/* Delete the object rel if it is a packed file: 1 deleted, 0 not ckptfs's
 * (kept), -1 after saying why (the server failed). */
static int prune_one(s3_send *s, const char *rel)
{
    char err[1536], msg[1024];
    ckp_reader *r = NULL;
    ckp_status ps = cks3_pack_open_file(&s->sc, s->prefix, rel, &r, err, sizeof err);
    if (r)
        ckp_close(r);
    if (ps == CKP_ERR_IO || ps == CKP_ERR_NOMEM) {
        fprintf(stderr, "ckptfs pack: %s\n", err);
        return -1;
    }
    if (!ckpt_packed_status_ours(ps))
        return 0;
    char *key = cks3_key(s->prefix, rel);
    cks3_status st = key ? cks3_delete(s->c, s->bucket, key, msg, sizeof msg) : CKS3_ERR_NOMEM;
    free(key);
    if (st != CKS3_OK) {
        cks3_pack_explain(s->c, s->url, s->bucket, st, st == CKS3_ERR_NOMEM ? "out of memory" : msg, err,
                          sizeof err);
        fprintf(stderr, "ckptfs pack: %s\n", err);
        return -1;
    }
    if (ckpt_verbosity > 1)
        fprintf(stderr, "ckptfs pack: deleted %s/%s (not in the new manifest)\n", s->url, CKU_ESC(rel));
    return 1;
}

int s3_prune(s3_send *s, const char *stage)
{
    char msg[1024], err[1536];
    ckm_manifest *m = NULL;
    cks3_list_result l = {0};
    if (!s->manifest_up) /* never before: a reader would find the pack's files gone */
        return 0;
    if (ckm_load(stage, &m, err, sizeof err) != CKP_OK) {
        fprintf(stderr, "ckptfs pack: %s\n", err);
        return -1;
    }
    char *dir = cks3_key(s->prefix, "");
    cks3_status st = dir ? cks3_list(s->c, s->bucket, dir, &l, msg, sizeof msg) : CKS3_ERR_NOMEM;
    if (st != CKS3_OK) {
        cks3_pack_explain(s->c, s->url, s->bucket, st, st == CKS3_ERR_NOMEM ? "out of memory" : msg, err,
                          sizeof err);
        fprintf(stderr, "ckptfs pack: %s\n", err);
    }
    size_t skip = dir ? strlen(dir) : 0;
    int rc = st == CKS3_OK ? 0 : -1;
    for (size_t i = 0; !rc && i < l.n; i++) {
        const char *rel = l.v[i].key + skip;
        if (strncmp(l.v[i].key, dir, skip) || listed(m, rel))
            continue;
        if (!has_suffix(rel, CKP_SUFFIX)) { /* not a packed file's name: not ours */
            s->foreign++;
            continue;
        }
        int k = prune_one(s, rel);
        if (k < 0)
            rc = -1;
        else if (k)
            s->pruned++;
        else
            s->foreign++;
    }
    if (rc)
        fprintf(stderr, "ckptfs pack: %s: the pack is complete, but packed files of the pack that was there before "
                "are still under the prefix (billed); run the same command again to delete them\n", s->url);
    cks3_list_free(&l);
    free(dir);
    ckm_free(m);
    return rc;
}
