/*
 * s3_mount.c — the s3:// side of the mount (s3_mount.h): the client and
 * the manifest at mount, with a message for each way that fails; the
 * objects' listing; each file's first open on a source bound to its ETag;
 * the network windows; the counters.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "disk_cache.h"
#include "plane_window.h"
#include "s3.h"
#include "s3_mount.h"
#include "s3_pack.h"
#include "s3_source.h"
#include "util.h"

#define PACKED_HEADER 64u          /* format §3.1: a packed file is at least its header */
#define MANIFEST_MAX (1ull << 30)   /* format §7: a manifest is at most 1 GiB */
#define FAIL_FAST_MS 1000u          /* after a read gave up, others fail at once this long */
#define LOG_EVERY_MS 1000u          /* failed reads: one log line a second at most */
#define SHARE_SLOTS 256u            /* extents whose readers are remembered (a hash; ckfs_s3_shared) */
#define SHARE_MS 10000u             /* a second reader this soon after another: shared */

/* The last reader of an extent (ckfs_s3_shared). */
struct share {
    uint32_t file, e;
    pid_t pid;
    int filled;                     /* shared: its rest was asked for */
    uint64_t ms;                    /* its last read */
};

struct ckfs_s3 {
    cks3_client *client;
    char *bucket, *prefix;
    cks3_source_ctx sc;
    ckdc *disk;                     /* -o cache_dir=, or NULL */
    pthread_mutex_t log_lock;
    uint64_t last_log_ms;           /* by log_lock */
    unsigned suppressed;            /* by log_lock */
    pid_t streamers[CKFS_S3_STREAMERS]; /* by log_lock: ckfs_s3_streamer, a ring */
    unsigned n_streamers;           /* by log_lock: noted so far */
    struct share share[SHARE_SLOTS]; /* by log_lock: ckfs_s3_shared, by (file, e) */
    uint64_t *shared_ms;            /* by log_lock: per file, its last read found shared
                                     * (ckfs_s3_file_shared; NULL: out of memory) */
    size_t n_shared_ms;
};

int ckfs_is_s3(const char *packed) { return cks3_is_url(packed); }

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A failed read's message (s3_source.h on_error): logged, at most one a
 * second (a server down fails every read), with the count left out. */
static void on_error(void *arg, const char *msg)
{
    struct ckfs_s3 *s = arg;
    uint64_t now = now_ms();
    unsigned skipped = 0;
    pthread_mutex_lock(&s->log_lock);
    int say = now - s->last_log_ms >= LOG_EVERY_MS;
    if (say) {
        skipped = s->suppressed;
        s->suppressed = 0;
        s->last_log_ms = now;
    } else {
        s->suppressed++;
    }
    pthread_mutex_unlock(&s->log_lock);
    if (say && skipped)
        ckfs_log("%s (and %u more failed reads)", msg, skipped);
    else if (say)
        ckfs_log("%s", msg);
}

/* The message of a failed manifest GET or listing: which, and what to do. */
static ckfs_status load_error(ckfs_ctx *c, cks3_status st, const char *msg, char *err, size_t cap)
{
    struct ckfs_s3 *s = c->s3;
    const char *ep = cks3_endpoint(s->client);
    switch (st) {
    case CKS3_ERR_AUTH:
        return cku_errf(err, cap, CKFS_ERR_IO,
                        "%s: access denied by %s with the credentials from %s (%s): check AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY (or the profile: AWS_PROFILE, -o profile=) and that they may read "
                        "bucket %s",
                        c->dst, ep, cks3_cred_source(s->client), msg, s->bucket);
    case CKS3_ERR_NO_BUCKET:
        return cku_errf(err, cap, CKFS_ERR_IO,
                        "%s: bucket %s does not exist at %s (region %s): check the bucket's name, and the endpoint "
                        "(-o endpoint=, AWS_ENDPOINT_URL) and region (-o region=, AWS_REGION)",
                        c->dst, s->bucket, ep, cks3_region(s->client));
    case CKS3_ERR_NETWORK:
    case CKS3_ERR_SERVER:
        return cku_errf(err, cap, CKFS_ERR_IO,
                        "%s: cannot reach the S3 server %s (%s): check the endpoint (-o endpoint=, "
                        "AWS_ENDPOINT_URL) and the network, or raise s3_timeout=",
                        c->dst, ep, msg);
    case CKS3_ERR_NOMEM:
        return cku_errf(err, cap, CKFS_ERR_NOMEM, "%s: out of memory", c->dst);
    default:
        return cku_errf(err, cap, CKFS_ERR_IO, "%s: %s", c->dst, msg);
    }
}

ckfs_status ckfs_s3_load(ckfs_ctx *c, char *err, size_t cap)
{
    char msg[1024];
    struct ckfs_s3 *s = c->s3 = calloc(1, sizeof *c->s3);
    if (!s)
        return cku_errf(err, cap, CKFS_ERR_NOMEM, "%s: out of memory", c->o.dst);
    pthread_mutex_init(&s->log_lock, NULL);
    cks3_status st = cks3_parse_url(c->o.dst, &s->bucket, &s->prefix, msg, sizeof msg);
    if (st != CKS3_OK)
        return cku_errf(err, cap, st == CKS3_ERR_NOMEM ? CKFS_ERR_NOMEM : CKFS_ERR_USAGE, "%s", msg);
    if (asprintf(&c->dst, "s3://%s%s%s", s->bucket, *s->prefix ? "/" : "", s->prefix) < 0) {
        c->dst = NULL;
        return cku_errf(err, cap, CKFS_ERR_NOMEM, "%s: out of memory", c->o.dst);
    }
    cks3_config cfg = {.max_conns = c->o.s3_windows * 3 + c->o.threads};
    cks3_opts_apply(&c->o.s3, &cfg);
    if ((st = cks3_client_new(&cfg, &s->client, msg, sizeof msg)) != CKS3_OK)
        return cku_errf(err, cap, st == CKS3_ERR_NOMEM ? CKFS_ERR_NOMEM : CKFS_ERR_IO, "%s: %s", c->dst, msg);
    s->sc = (cks3_source_ctx){.c = s->client, .bucket = s->bucket, .fail_fast_ms = FAIL_FAST_MS,
                              .on_error = on_error, .on_error_arg = s};
    if (c->o.cache_dir[0]) {
        st = ckdc_open(c->o.cache_dir, c->o.cache_dir_size, &s->disk, msg, sizeof msg);
        if (st != CKS3_OK)
            return cku_errf(err, cap, st == CKS3_ERR_NOMEM ? CKFS_ERR_NOMEM : CKFS_ERR_USAGE, "%s: %s", c->dst, msg);
        s->sc.disk = s->disk;
    }
    char *key = cks3_key(s->prefix, CKP_MANIFEST_NAME), *buf = NULL, name[4096];
    size_t len = 0;
    if (!key)
        return cku_errf(err, cap, CKFS_ERR_NOMEM, "%s: out of memory", c->dst);
    snprintf(name, sizeof name, "s3://%s/%s", s->bucket, key);
    free(key);
    /* the manifest, or what is under the prefix instead (s3_pack.c) */
    st = cks3_pack_manifest(s->client, s->bucket, s->prefix, MANIFEST_MAX, &buf, &len, msg, sizeof msg);
    if (st == CKS3_ERR_NOT_FOUND)
        return cku_errf(err, cap, CKFS_ERR_NOT_PACKED, "%s", msg);
    if (st == CKS3_ERR_RANGE)
        return cku_errf(err, cap, CKFS_ERR_DAMAGED, "%s: larger than 1 GiB", name);
    if (st != CKS3_OK)
        return load_error(c, st, msg, err, cap);
    ckfs_status ls = ckfs_from_ckp(ckm_parse(name, buf, len, &c->m, err, cap));
    free(buf);
    return ls;
}

ckfs_status ckfs_s3_check_objects(ckfs_ctx *c, char *err, size_t cap)
{
    struct ckfs_s3 *s = c->s3;
    char msg[1024];
    cks3_list_result l;
    char *dir = *s->prefix ? cks3_key(s->prefix, "") : strdup("");
    if (!dir)
        return cku_errf(err, cap, CKFS_ERR_NOMEM, "%s: out of memory", c->dst);
    cks3_status st = cks3_list(s->client, s->bucket, dir, &l, msg, sizeof msg);
    size_t skip = strlen(dir);
    free(dir);
    if (st != CKS3_OK)
        return load_error(c, st, msg, err, cap);
    size_t missing = 0, first = 0;
    /* in byte order (S3 lists so, but a server walking directories may not) */
    cks3_list_sort(&l);
    for (size_t i = 0; i < c->m->n_files; i++) {
        char want[CKP_MAX_PATH + 8];
        snprintf(want, sizeof want, "%s%s", c->m->files[i].path, CKP_SUFFIX);
        const cks3_entry *e = cks3_list_find(&l, skip, want);
        int found = e && e->size >= PACKED_HEADER;
        if (!found && !missing++)
            first = i;
    }
    cks3_list_free(&l);
    if (missing)
        return cku_errf(err, cap, CKFS_ERR_DAMAGED,
                        "%s: %zu of %zu packed files are missing or too short (first: %s%s); not mounted. Upload the "
                        "whole packed directory (or run the pack again)",
                        c->dst, missing, c->m->n_files, CKU_ESC(c->m->files[first].path), CKP_SUFFIX);
    return CKFS_OK;
}

int ckfs_s3_open_reader(ckfs_ctx *c, uint32_t i, ckp_reader **out)
{
    struct ckfs_s3 *s = c->s3;
    const ckm_file *f = &c->m->files[i];
    char msg[1024], name[CKP_MAX_PATH + 8];
    snprintf(name, sizeof name, "%s%s", f->path, CKP_SUFFIX);
    char *key = cks3_key(s->prefix, name);
    if (!key)
        return ENOMEM;
    ckp_source *src;
    cks3_status st = cks3_source_open(&s->sc, key, &src, msg, sizeof msg); /* one GET: ETag, size, header */
    if (st != CKS3_OK) {
        ckfs_log("%s: cannot open packed file: %s", CKU_ESC(f->path), msg);
        free(key);
        /* a server down (or failed just before) is not damage: a later open may succeed */
        return st == CKS3_ERR_NOMEM ? ENOMEM : cks3_status_transient(st) ? EAGAIN : EIO;
    }
    char where[4200];
    snprintf(where, sizeof where, "s3://%s/%s", s->bucket, key);
    free(key);
    ckp_status ps = ckp_open_source(src, where, out, msg, sizeof msg);
    if (ps != CKP_OK) {
        ckfs_log("%s: cannot open packed file: %s", CKU_ESC(f->path), msg);
        /* a server down is not damage: a later open may succeed */
        return ps == CKP_ERR_IO ? EAGAIN : ckp_status_errno(ps);
    }
    return 0;
}

int ckfs_s3_check(ckfs_ctx *c, uint32_t i, const ckp_reader *r)
{
    ckfs_mfile *f = &c->files[i];
    if (atomic_load_explicit(&f->changed, memory_order_relaxed))
        return EIO;
    const ckp_source *src = ckp_get_source(r);
    if (!src || !cks3_source_changed(src))
        return 0;
    if (atomic_exchange(&f->changed, EIO) == 0) {
        ckfs_log("%s: packed object replaced, removed or truncated while mounted (it is no longer ETag %s); "
                 "its opens and reads fail with EIO until it is mounted again",
                 CKU_ESC(c->m->files[i].path), cks3_source_etag(src));
        if (c->on_change)
            c->on_change(c->on_change_arg, i);
    }
    return EIO;
}

struct ckw_set *ckfs_s3_windows(ckfs_ctx *c)
{
    unsigned n = c->o.s3_windows;
    return ckw_new_sized(n + n / 2 + 2, n, CKFS_S3_WINDOW_BYTES);
}

int ckfs_s3_streamer(ckfs_ctx *c, pid_t pid, int note)
{
    struct ckfs_s3 *s = c->s3;
    int found = 0;
    pthread_mutex_lock(&s->log_lock);
    unsigned n = s->n_streamers < CKFS_S3_STREAMERS ? s->n_streamers : CKFS_S3_STREAMERS;
    for (unsigned i = 0; i < n && !found; i++)
        found = s->streamers[i] == pid;
    if (note && !found)
        s->streamers[s->n_streamers++ % CKFS_S3_STREAMERS] = pid;
    pthread_mutex_unlock(&s->log_lock);
    return found;
}

int ckfs_s3_shared(ckfs_ctx *c, uint32_t file, uint32_t e, pid_t pid)
{
    struct ckfs_s3 *s = c->s3;
    uint64_t now = now_ms();
    struct share *h = &s->share[(file * 2654435761u + e) % SHARE_SLOTS];
    int shared = 0;
    pthread_mutex_lock(&s->log_lock);
    if (h->ms && h->file == file && h->e == e && now - h->ms <= SHARE_MS) {
        shared = h->pid != pid && !h->filled;
        h->filled |= shared;
        if (h->pid != pid && !s->shared_ms && c->m->n_files &&
            (s->shared_ms = calloc(c->m->n_files, sizeof *s->shared_ms)) != NULL)
            s->n_shared_ms = c->m->n_files;
        if (h->pid != pid && file < s->n_shared_ms)
            s->shared_ms[file] = now;
    } else {
        h->file = file, h->e = e, h->filled = 0;
    }
    h->pid = pid;
    h->ms = now;
    pthread_mutex_unlock(&s->log_lock);
    return shared;
}

int ckfs_s3_file_shared(ckfs_ctx *c, uint32_t file)
{
    struct ckfs_s3 *s = c->s3;
    uint64_t now = now_ms();
    pthread_mutex_lock(&s->log_lock);
    int shared = file < s->n_shared_ms && s->shared_ms[file] && now - s->shared_ms[file] <= SHARE_MS;
    pthread_mutex_unlock(&s->log_lock);
    return shared;
}

uint64_t ckfs_s3_ahead(const ckfs_ctx *c) { return (uint64_t)(c->o.s3_windows / 2 + 1) * CKFS_S3_WINDOW_BYTES; }

void ckfs_s3_counters(ckfs_ctx *c, void (*put)(void *arg, const char *name, uint64_t v), void *arg)
{
    struct ckfs_s3 *s = c->s3;
    cks3_stats st;
    cks3_get_stats(s->client, &st);
    put(arg, "s3_packed_bytes_fetched", atomic_load(&s->sc.bytes));
    put(arg, "s3_range_gets", atomic_load(&s->sc.reads));
    put(arg, "s3_read_errors", atomic_load(&s->sc.errors));
    put(arg, "s3_requests", st.requests);
    put(arg, "s3_retries", st.retries);
    put(arg, "s3_bytes_in", st.bytes_in);
    if (s->disk) {
        ckdc_stats d;
        ckdc_get_stats(s->disk, &d);
        put(arg, "disk_cache_hit_bytes", d.hit_bytes);
        put(arg, "disk_cache_miss_bytes", d.miss_bytes);
        put(arg, "disk_cache_stored", d.stored);
        put(arg, "disk_cache_bad", d.bad);
        put(arg, "disk_cache_evicted", d.evicted);
        put(arg, "disk_cache_write_errors", d.write_errors);
        put(arg, "disk_cache_used", d.used);
    }
}

void ckfs_s3_free(ckfs_ctx *c)
{
    struct ckfs_s3 *s = c->s3;
    if (!s)
        return;
    cks3_client_free(s->client);
    ckdc_close(s->disk);
    free(s->bucket);
    free(s->prefix);
    free(s->shared_ms);
    pthread_mutex_destroy(&s->log_lock);
    free(s);
    c->s3 = NULL;
}
