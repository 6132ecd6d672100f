/*
 * s3.h — a small client of S3-compatible object storage (issue 25), on
 * libcurl: SigV4 signing by curl (CURLOPT_AWS_SIGV4), a pool of kept-alive
 * connections (easy handles over one curl share: connections, DNS, TLS
 * sessions), S3's XML read with libexpat, payload hashes with libcrypto.
 * No hand-written HTTP, TLS or signing.  The library never prints or exits.
 *
 * ---- API summary (what pack/verify/stat/unpack s3:// and the mount use) ----
 *   cks3_parse_url("s3://BUCKET/PREFIX", &bucket, &prefix)   split a URL
 *   cks3_config cfg = {0};      endpoint/region/profile NULL: the AWS way
 *   cks3_client_new(&cfg, &c, err, cap)      resolve credentials, endpoint
 *   cks3_head(c, b, key, &obj, ...)          size + ETag of an object
 *   cks3_get_range(c, b, key, etag, off, len, dst, ...)   exactly len bytes,
 *                                            If-Match: etag (NULL: none)
 *   cks3_get_object(c, b, key, max, &obj, &buf, &len, ...) a small object
 *   cks3_list(c, b, prefix, &list, ...)      every key under prefix
 *   cks3_put(c, b, key, data, len, etag_out, ...)          one PUT
 *   cks3_delete(c, b, key, ...)              DELETE (absent: CKS3_OK)
 *   cks3_mpu_create / cks3_mpu_upload_part / cks3_mpu_complete /
 *   cks3_mpu_abort / cks3_mpu_list_uploads / cks3_mpu_list_parts
 *                                            multipart uploads (resume)
 *   cks3_get_stats(c, &st)                   requests, bytes, retries
 *   cks3_client_free(c)
 * Every call is thread-safe on one client (each takes a connection from the
 * pool for its duration), retries what is worth retrying (below), and
 * returns a cks3_status with a message in err (never a secret).
 *
 * ---- configuration, the way every AWS tool takes it -------------------------
 * Credentials: the profile of cfg->profile if given (~/.aws/credentials, then
 * ~/.aws/config); else AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
 * AWS_SESSION_TOKEN) from the environment; else the profile AWS_PROFILE or
 * "default".  Files: AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE, else
 * $HOME/.aws/credentials / $HOME/.aws/config ("[NAME]" in the first,
 * "[profile NAME]" or "[default]" in the second).  Region: cfg->region,
 * AWS_REGION, AWS_DEFAULT_REGION, the profile's region, "us-east-1".
 * Endpoint: cfg->endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
 * profile's endpoint_url, else https://s3.REGION.amazonaws.com.  A custom
 * endpoint is addressed path-style (ENDPOINT/BUCKET/KEY), AWS virtual-hosted
 * (BUCKET.s3.REGION.amazonaws.com/KEY) unless the bucket name has a dot.
 * Secrets live in the client only (wiped at free), go to curl as
 * CURLOPT_USERNAME/PASSWORD and a x-amz-security-token header, never into
 * a message, a log or argv.
 *
 * ---- retries ----------------------------------------------------------------
 * Connection failures, resets, timeouts, a stalled transfer (under 1 KiB/s
 * for cfg->stall_s), HTTP 500/502/503/504 (503 SlowDown included) are
 * retried with exponential backoff and full jitter (100 ms doubling, at
 * most 5 s a wait) until cfg->retry_ms has passed since the call began; each
 * attempt's own timeout is what is left of that budget, so a call returns
 * within about retry_ms whatever the server does.  Then CKS3_ERR_NETWORK or
 * CKS3_ERR_SERVER.  Nothing else is retried.
 */
#ifndef CKS3_S3_H
#define CKS3_S3_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pinned status codes of the S3 layer. */
typedef enum {
    CKS3_OK = 0,
    CKS3_ERR_ARG = 1,        /* bad argument, a malformed s3:// URL */
    CKS3_ERR_NOMEM = 2,
    CKS3_ERR_CONFIG = 3,     /* no credentials found, a profile missing or unreadable */
    CKS3_ERR_AUTH = 4,       /* 401/403: wrong key or secret, expired token, access denied */
    CKS3_ERR_NO_BUCKET = 5,  /* 404 NoSuchBucket */
    CKS3_ERR_NOT_FOUND = 6,  /* 404 NoSuchKey, NoSuchUpload, ... */
    CKS3_ERR_CHANGED = 7,    /* 412: If-Match failed, the object was replaced */
    CKS3_ERR_RANGE = 8,      /* 416, or a body shorter or longer than asked */
    CKS3_ERR_NETWORK = 9,    /* connect, reset, timeout: still failing after the retries */
    CKS3_ERR_SERVER = 10,    /* 5xx: still failing after the retries */
    CKS3_ERR_PROTOCOL = 11,  /* a response that does not parse or lacks what S3 sends */
    CKS3_ERR_HTTP = 12       /* any other HTTP error (the message has status and S3 code) */
} cks3_status;

const char *cks3_status_name(cks3_status s);
/* 1 for the statuses a later try may cure (NETWORK, SERVER). */
int cks3_status_transient(cks3_status s);

#define CKS3_ETAG_MAX 128      /* an ETag with its quotes, NUL-terminated */

typedef struct {
    const char *endpoint;      /* "http://127.0.0.1:8333", "https://host"; NULL: see above */
    const char *region;        /* NULL: see above */
    const char *profile;       /* NULL: see above */
    unsigned max_conns;        /* kept-alive connections at most; 0: 64 */
    unsigned retry_ms;         /* time budget of one call, retries included; 0: 30000 */
    unsigned connect_ms;       /* one connect attempt; 0: 3000 */
    unsigned stall_s;          /* a transfer under 1 KiB/s this long is retried; 0: 10 */
} cks3_config;

/* ---- -o endpoint=URL,region=R,profile=P,s3_timeout=SECONDS ------------------
 * How `ckptfs mount` and the commands of an s3:// PACKED (pack, verify,
 * stat, unpack) take the connection's settings on their command line, over
 * the AWS environment and files (above).  One parser for all of them. */
typedef struct {
    char endpoint[1024];       /* endpoint=: "" the AWS way */
    char region[128];          /* region= */
    char profile[256];         /* profile= */
    unsigned timeout_ms;       /* s3_timeout= (1 to 3600 s): cks3_config.retry_ms; 0: not given */
} cks3_opts;

/* Take one option KEY=VAL (key: klen bytes; val NULL for a bare KEY) into
 * o.  @return 1 taken; 0 not one of these (o unchanged); -1 a bad value,
 * err saying what is expected (never the value: an endpoint may carry a
 * password).  An endpoint with a user name or password in it is refused:
 * credentials go the AWS way, never on a command line (ps shows it). */
int cks3_opts_take(cks3_opts *o, const char *key, size_t klen, const char *val, char *err, size_t errCapacity);
/* cfg's endpoint, region, profile and retry_ms from what o has (the rest
 * of cfg, and what o has not, left alone).  cfg points into o. */
void cks3_opts_apply(const cks3_opts *o, cks3_config *cfg);

typedef struct cks3_client cks3_client;

/* Resolve endpoint, region and credentials (above) and set up the pool.
 * @return CKS3_OK, CKS3_ERR_CONFIG (no credentials, a named profile not
 * found, a malformed endpoint: the message says which and where it looked),
 * CKS3_ERR_NOMEM.  Contacts nobody. */
cks3_status cks3_client_new(const cks3_config *cfg, cks3_client **out, char *err, size_t errCapacity);
void cks3_client_free(cks3_client *c);
/* The endpoint and region in use, and where the credentials came from
 * ("environment", "profile NAME (FILE)"): for messages; no secret. */
const char *cks3_endpoint(const cks3_client *c);
const char *cks3_region(const cks3_client *c);
const char *cks3_cred_source(const cks3_client *c);

/* 1 if s starts with "s3://". */
int cks3_is_url(const char *s);
/* Split "s3://BUCKET[/PREFIX]" into malloc'ed *bucket and *prefix (prefix
 * without leading or trailing '/', "" if none).  @return CKS3_OK, or
 * CKS3_ERR_ARG (not s3://, no bucket, a bucket name S3 refuses) /
 * CKS3_ERR_NOMEM, *bucket and *prefix NULL. */
cks3_status cks3_parse_url(const char *url, char **bucket, char **prefix, char *err, size_t errCapacity);
/* "PREFIX/NAME" or "NAME" when prefix is "": a malloc'ed key, NULL if out of memory. */
char *cks3_key(const char *prefix, const char *name);

typedef struct {
    uint64_t size;
    char etag[CKS3_ETAG_MAX];  /* as the server sent it, quotes included */
} cks3_object;

/* HEAD bucket/key.  @return CKS3_OK with *out set, CKS3_ERR_NOT_FOUND,
 * CKS3_ERR_NO_BUCKET, CKS3_ERR_AUTH, ... */
cks3_status cks3_head(cks3_client *c, const char *bucket, const char *key, cks3_object *out, char *err,
                      size_t errCapacity);

/* GET bytes [off, off+len) of bucket/key into dst (len > 0), with If-Match:
 * ifMatch unless it is NULL.  @return CKS3_OK when exactly len bytes came
 * (a 206 whose Content-Range is that range, or a 200 of exactly len bytes
 * when off is 0), CKS3_ERR_CHANGED (412: another object is there now: the
 * caller must not mix its bytes with earlier ones), CKS3_ERR_RANGE (the
 * object is shorter: 416, or fewer bytes), ...  dst is garbage on error. */
cks3_status cks3_get_range(cks3_client *c, const char *bucket, const char *key, const char *ifMatch, uint64_t off,
                           size_t len, void *dst, char *err, size_t errCapacity);

/* GET the first len bytes of bucket/key (len > 0; fewer where the object
 * is shorter) into dst, without If-Match: the response binds the caller
 * to a version, instead of a HEAD before: *obj gets the object's size (its
 * Content-Range's total, or a 200's length) and ETag, *got the bytes that
 * came (the smaller of len and the size).  An empty object (416) is size
 * 0, *got 0.  @return as cks3_get_range; CKS3_ERR_PROTOCOL when the
 * response gives no size or no ETag, or bytes that do not fit its size. */
cks3_status cks3_get_first(cks3_client *c, const char *bucket, const char *key, size_t len, void *dst,
                           cks3_object *obj, size_t *got, char *err, size_t errCapacity);

/* GET the whole of a small object (at most maxSize bytes: a larger one is
 * CKS3_ERR_RANGE), into a malloc'ed *buf (NUL-terminated, *len bytes before
 * the NUL), with its size and ETag in *obj (may be NULL). */
cks3_status cks3_get_object(cks3_client *c, const char *bucket, const char *key, size_t maxSize, cks3_object *obj,
                            char **buf, size_t *len, char *err, size_t errCapacity);

typedef struct {
    char *key;
    uint64_t size;
    char etag[CKS3_ETAG_MAX];
} cks3_entry;

typedef struct {
    cks3_entry *v;
    size_t n;
} cks3_list_result;

/* ListObjectsV2 of every key under prefix (as given: "dir/" lists below
 * dir), all pages, in the server's (byte) order.  Free with cks3_list_free.
 * A bucket that does not exist is CKS3_ERR_NO_BUCKET; an empty prefix
 * CKS3_OK with n 0. */
cks3_status cks3_list(cks3_client *c, const char *bucket, const char *prefix, cks3_list_result *out, char *err,
                      size_t errCapacity);
void cks3_list_free(cks3_list_result *l);
/* Sort l by key in byte order (S3 lists so; a server walking directories
 * may not), for cks3_list_find. */
void cks3_list_sort(cks3_list_result *l);
/* The entry of the sorted l whose key, past its first skip bytes (the
 * listed prefix, which every key carries), is name; NULL if none. */
const cks3_entry *cks3_list_find(const cks3_list_result *l, size_t skip, const char *name);

/* PUT bucket/key with body data[0..len) (its SHA-256 sent and signed: the
 * server checks it), the new ETag in etagOut (may be NULL).  Replaces what
 * is there. */
cks3_status cks3_put(cks3_client *c, const char *bucket, const char *key, const void *data, size_t len,
                     char etagOut[CKS3_ETAG_MAX], char *err, size_t errCapacity);
/* DELETE bucket/key; a key that is not there is CKS3_OK (S3's own rule). */
cks3_status cks3_delete(cks3_client *c, const char *bucket, const char *key, char *err, size_t errCapacity);

/* ---- multipart uploads -------------------------------------------------------
 * S3's rules: parts 1..10000, each but the last at least 5 MiB, at most
 * 5 GiB; the object appears only at complete, and an upload neither
 * completed nor aborted is kept (and billed) until aborted. */
typedef struct {
    int number;                /* 1..10000 */
    uint64_t size;             /* from list_parts; ignored by complete */
    char etag[CKS3_ETAG_MAX];
} cks3_part;

typedef struct {
    char *key, *upload_id;
    char initiated[32];        /* ISO 8601 as sent, "" if not */
} cks3_upload;

typedef struct {
    cks3_upload *v;
    size_t n;
} cks3_upload_list;

typedef struct {
    cks3_part *v;
    size_t n;
} cks3_part_list;

/* Start one: *uploadId malloc'ed. */
cks3_status cks3_mpu_create(cks3_client *c, const char *bucket, const char *key, char **uploadId, char *err,
                            size_t errCapacity);
/* Upload part `number` (body hashed and signed as cks3_put), its ETag in
 * etagOut (what complete needs). */
cks3_status cks3_mpu_upload_part(cks3_client *c, const char *bucket, const char *key, const char *uploadId,
                                 int number, const void *data, size_t len, char etagOut[CKS3_ETAG_MAX], char *err,
                                 size_t errCapacity);
/* Complete with parts (ascending numbers), the object's ETag in etagOut
 * (may be NULL).  An error S3 reports in a 200's body is an error here. */
cks3_status cks3_mpu_complete(cks3_client *c, const char *bucket, const char *key, const char *uploadId,
                              const cks3_part *parts, size_t n, char etagOut[CKS3_ETAG_MAX], char *err,
                              size_t errCapacity);
/* Abort (an upload already gone: CKS3_OK). */
cks3_status cks3_mpu_abort(cks3_client *c, const char *bucket, const char *key, const char *uploadId, char *err,
                           size_t errCapacity);
/* Uploads in progress under prefix, all pages.  Free with cks3_upload_list_free. */
cks3_status cks3_mpu_list_uploads(cks3_client *c, const char *bucket, const char *prefix, cks3_upload_list *out,
                                  char *err, size_t errCapacity);
void cks3_upload_list_free(cks3_upload_list *l);
/* Parts uploaded so far, all pages, ascending (CKPTFS_S3_LIST_PARTS_MAX=N,
 * 1-1000, for tests: N parts a page).  Free with cks3_part_list_free. */
cks3_status cks3_mpu_list_parts(cks3_client *c, const char *bucket, const char *key, const char *uploadId,
                                cks3_part_list *out, char *err, size_t errCapacity);
void cks3_part_list_free(cks3_part_list *l);
/* 1 if etag (as a server sent it, quotes or not) is the plain MD5 of
 * data[0..len), as S3 and SeaweedFS give an unencrypted part: proof that
 * the part holds exactly these bytes.  0 otherwise, also for an ETag that
 * is not a plain MD5 (encrypted, a multipart object's "-N"): then nothing
 * can be told from it. */
int cks3_etag_is_md5(const char *etag, const void *data, size_t len);

/* ---- counters ------------------------------------------------------------------ */
typedef struct {
    uint64_t requests;         /* HTTP requests sent, retries included */
    uint64_t retries;          /* of which were retries */
    uint64_t failures;         /* calls that returned an error */
    uint64_t bytes_in;         /* response body bytes received (GET data, XML) */
    uint64_t bytes_out;        /* request body bytes sent */
    uint64_t get_bytes;        /* body bytes of successful ranged GETs */
} cks3_stats;

void cks3_get_stats(cks3_client *c, cks3_stats *st);

#ifdef __cplusplus
}
#endif
#endif
