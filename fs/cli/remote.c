/*
 * remote.c — an s3:// packed directory for the reading commands
 * (remote.h): the client and the manifest, once per process; members on S3
 * sources; the objects' sizes for the summaries.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "cmd_common.h"
#include "remote.h"
#include "s3.h"
#include "s3_pack.h"
#include "s3_source.h"

#define MANIFEST_MAX (1ull << 30)   /* format §7: a manifest is at most 1 GiB */
#define FAIL_FAST_MS 30000          /* after a read gave up on the server: the others fail at once this long */
#define S3_TIMEOUT_MS 30000         /* s3_timeout= of pack, verify, stat and unpack unless -o gives it */
#define WINDOW_MIB 8u               /* read whole: windows of this size (CKPTFS_S3_WINDOW_MIB, 0: none), */
#define WINDOWS 12u                 /* this many kept per member open, */
#define AHEAD 2u                    /* this many fetched ahead of a reader's */

static cks3_opts g_opts; /* -o, before the pack is loaded */
static int g_opts_given;
static int g_whole;      /* ckpt_remote_read_whole */
static struct {
    pthread_mutex_t mu;  /* protects what */
    char what[1024];
} G = {PTHREAD_MUTEX_INITIALIZER, ""};

static struct {
    cks3_client *c;
    char *bucket, *prefix;
    cks3_source_ctx sc;
    uint64_t manifest_size;
    _Atomic uint64_t opened_size; /* the objects' sizes by their first GETs, of every member opened */
} R;

/* This thread's last failure to read an s3:// member that was not the
 * pack's fault (ckpt_remote_unreadable). */
static __thread struct {
    int set;
    char what[1024];
} T;

static void note(const char *fmt, const char *a, const char *b)
{
    T.set = 1;
    snprintf(T.what, sizeof T.what, fmt, a, b);
}

/* cks3_source_ctx.on_error: a ranged GET failed (the server down, timing
 * out or refusing after the retries, or the object replaced meanwhile);
 * msg names the object. */
static void on_read_error(void *arg, const char *msg)
{
    (void)arg;
    note("%s%s", msg, "");
    pthread_mutex_lock(&G.mu);
    snprintf(G.what, sizeof G.what, "%s", msg);
    pthread_mutex_unlock(&G.mu);
}

const char *ckpt_remote_read_failure(char *buf, size_t cap)
{
    if (T.set) {
        snprintf(buf, cap, "%s", T.what);
        return buf;
    }
    pthread_mutex_lock(&G.mu);
    snprintf(buf, cap, "%s%s%s", *G.what ? "" : "not tried: ", "the server failed just before",
             *G.what ? ": " : " (see above)");
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s", G.what);
    pthread_mutex_unlock(&G.mu);
    return buf;
}

void ckpt_remote_read_whole(void) { g_whole = 1; }

static size_t window_size(void)
{
    const char *e = getenv("CKPTFS_S3_WINDOW_MIB");
    unsigned long v = e && *e ? strtoul(e, NULL, 10) : WINDOW_MIB; /* 0: none, chunk by chunk */
    return (size_t)(v > 64 ? WINDOW_MIB : v) << 20;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void remote_free(void)
{
    cks3_client_free(R.c);
    free(R.bucket);
    free(R.prefix);
    memset(&R, 0, sizeof R);
}

int ckpt_remote_options(const char *cmd, const char *list)
{
    char *copy = strdup(list), *save = NULL, why[256];
    if (!copy) {
        fprintf(stderr, "ckptfs %s: out of memory\n", cmd);
        return -1;
    }
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        const char *eq = strchr(tok, '=');
        size_t klen = eq ? (size_t)(eq - tok) : strlen(tok);
        int t = cks3_opts_take(&g_opts, tok, klen, eq ? eq + 1 : NULL, why, sizeof why);
        if (t < 0) /* the value never echoed: an endpoint may carry a password */
            fprintf(stderr, "ckptfs %s: bad value in option '-o %.*s': %s\n", cmd, (int)klen, tok, why);
        else if (t == 0)
            fprintf(stderr, "ckptfs %s: unknown option '-o %.*s': %s takes endpoint=, region=, profile= and "
                    "s3_timeout=, for an s3:// PACKED (the other options of ckptfs mount apply to a mount "
                    "only)\n", cmd, (int)klen, tok, cmd);
        rc = t > 0 ? 0 : -1;
        g_opts_given = 1;
    }
    free(copy);
    return rc;
}

int ckpt_remote_options_check(const char *cmd, const char *packed)
{
    if (!g_opts_given || ckpt_is_remote(packed))
        return 0;
    fprintf(stderr, "ckptfs %s: -o endpoint=, region=, profile=, s3_timeout= apply to an s3:// PACKED only, not %s\n",
            cmd, packed);
    return -1;
}

cks3_status ckpt_remote_client(const char *url, unsigned maxConns, cks3_client **out, char *err, size_t cap)
{
    cks3_config cfg = {.max_conns = maxConns, .retry_ms = S3_TIMEOUT_MS};
    cks3_opts_apply(&g_opts, &cfg);
    char msg[1024];
    cks3_status st = cks3_client_new(&cfg, out, msg, sizeof msg);
    if (st != CKS3_OK)
        snprintf(err, cap, "%s: %s", url, msg);
    else if (ckpt_verbosity > 1 && !ckpt_json) /* what -o, the environment and the files came to */
        printf("%s: endpoint %s, region %s, credentials from %s, s3_timeout %g s\n", url, cks3_endpoint(*out),
               cks3_region(*out), cks3_cred_source(*out), cfg.retry_ms / 1000.0);
    return st;
}

int ckpt_is_remote(const char *dst) { return cks3_is_url(dst); }

ckp_status ckpt_load_manifest(const char *dst, ckm_manifest **out, char *err, size_t cap)
{
    char msg[1024];
    *out = NULL;
    if (!ckpt_is_remote(dst))
        return ckm_load(dst, out, err, cap);
    remote_free();
    cks3_status st = cks3_parse_url(dst, &R.bucket, &R.prefix, msg, sizeof msg);
    if (st != CKS3_OK) {
        snprintf(err, cap, "%s", msg);
        return st == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO;
    }
    atexit(remote_free);
    if ((st = ckpt_remote_client(dst, 0, &R.c, err, cap)) != CKS3_OK)
        return st == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO;
    R.sc = (cks3_source_ctx){.c = R.c, .bucket = R.bucket, .fail_fast_ms = FAIL_FAST_MS, .on_error = on_read_error};
    char *buf = NULL, name[4096];
    size_t len = 0;
    st = cks3_pack_manifest(R.c, R.bucket, R.prefix, MANIFEST_MAX, &buf, &len, msg, sizeof msg);
    if (st == CKS3_ERR_NOT_FOUND || st == CKS3_ERR_RANGE)
        snprintf(err, cap, "%s", msg);
    else if (st != CKS3_OK)
        cks3_pack_explain(R.c, dst, R.bucket, st, msg, err, cap);
    if (st != CKS3_OK)
        return st == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : st == CKS3_ERR_RANGE ? CKP_ERR_CORRUPT : CKP_ERR_IO;
    R.manifest_size = len;
    snprintf(name, sizeof name, "s3://%s/%s%s%s", R.bucket, R.prefix, *R.prefix ? "/" : "", CKP_MANIFEST_NAME);
    ckp_status ps = ckm_parse(name, buf, len, out, err, cap);
    free(buf);
    return ps;
}

/* The first GET of member rel (cks3_source_open: its first 64 KiB, size and
 * ETag, no HEAD) tells a missing object (the pack's fault) from a server
 * that cannot be reached or refuses (not the pack's).  A server that gave
 * up on a read just before is not asked at all (the retries were spent). */
ckp_status ckpt_remote_open(const char *rel, ckp_reader **out, char *err, size_t cap)
{
    char msg[1024];
    *out = NULL;
    T.set = 0;
    if (!R.c) {
        snprintf(err, cap, "%s: no s3:// pack loaded", rel);
        return CKP_ERR_IO;
    }
    char *key = cks3_key(R.prefix, rel);
    if (!key) {
        snprintf(err, cap, "%s: out of memory", rel);
        return CKP_ERR_NOMEM;
    }
    char where[4200];
    snprintf(where, sizeof where, "s3://%s/%s", R.bucket, key);
    ckp_source *src = NULL;
    cks3_status hs = CKS3_ERR_NETWORK;
    if (now_ms() < atomic_load(&R.sc.down_until_ms))
        snprintf(msg, sizeof msg, "not tried: the server failed just before (see above)");
    else /* one GET of its first bytes: ETag, size, header (no HEAD) */
        hs = cks3_source_open(&R.sc, key, &src, msg, sizeof msg);
    if (hs == CKS3_ERR_NOT_FOUND) {
        snprintf(err, cap, "%s: not there (the packed directory lacks this packed file)", where);
        free(key);
        return CKP_ERR_IO;
    }
    if (hs != CKS3_OK) {
        free(key);
        if (cks3_status_transient(hs))
            atomic_store(&R.sc.down_until_ms, now_ms() + FAIL_FAST_MS);
        int named = !strncmp(msg, "s3://", 5); /* the client's messages name the object */
        snprintf(err, cap, "%s%s%s", named ? "" : where, named ? "" : ": ", msg);
        note("%s%s", err, "");
        return hs == CKS3_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_IO;
    }
    /* the source (bound to that GET's ETag), in windows for a reader of
     * the whole */
    free(key);
    if (g_whole && window_size())
        src = cks3_pack_windows(src, window_size(), WINDOWS, AHEAD);
    if (!src)
        snprintf(err, cap, "%s: out of memory", where);
    uint64_t size = src ? src->size : 0; /* the object's, as its first GET said */
    ckp_status st = src ? ckp_open_source(src, where, out, err, cap) : CKP_ERR_NOMEM;
    if (st == CKP_OK)
        atomic_fetch_add(&R.opened_size, size);
    if (st == CKP_ERR_IO && T.set) { /* a GET of its TOC or indexes: say what failed */
        size_t n = strlen(err);
        snprintf(err + n, cap - n, " (%s)", T.what);
    } else if (st == CKP_ERR_IO) { /* a read failed without a message of its own */
        note("%s%s", err, "");
    }
    return st;
}

int ckpt_remote_unreadable(const char **what)
{
    if (what)
        *what = T.set ? T.what : "";
    return T.set;
}

uint64_t ckpt_remote_manifest_size(void) { return R.manifest_size; }

/* No listing: the sizes are those the members' first GETs gave as they opened
 * (a listing that failed once summed to 0 bytes, silently). */
uint64_t ckpt_remote_packed_size(void) { return R.manifest_size + atomic_load(&R.opened_size); }
