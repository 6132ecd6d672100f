/*
 * s3_internal.h — what the files of the S3 client share (s3.h): the client,
 * one request and its response, the XML walker.  Not installed.
 */
#ifndef CKS3_INTERNAL_H
#define CKS3_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "s3.h"

/* Where the credentials and settings came from (s3_config.c). */
typedef struct {
    char *endpoint;                /* scheme://host[:port], no trailing '/' */
    char *region;
    char *key_id, *secret, *token; /* token NULL if none */
    char source[512];              /* "environment", "profile NAME (FILE)" */
    int aws;                       /* the endpoint is AWS's own: virtual-hosted */
} cks3_settings;

cks3_status cks3_settings_resolve(const cks3_config *cfg, cks3_settings *s, char *err, size_t cap);
void cks3_settings_wipe(cks3_settings *s);
/* 1 if url has a user name or password in it (scheme://USER[:PASS]@host):
 * refused as an endpoint, never printed. */
int cks3_url_has_userinfo(const char *url);

struct cks3_client {
    cks3_settings set;
    cks3_config cfg;               /* defaults filled in */
    CURLSH *share;
    pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_lock;
    CURL **idle;                   /* easy handles not in use (by pool_lock) */
    size_t n_idle, cap_idle;
    char *sigv4;                   /* "aws:amz:REGION:s3" */
    _Atomic uint64_t requests, retries, failures, bytes_in, bytes_out, get_bytes;
};

/* A growing buffer for bodies. */
typedef struct {
    char *p;
    size_t n, cap, max;            /* max: more is an error (CKS3_ERR_RANGE) */
    int over;
} cks3_buf;

/* One request. */
typedef struct {
    const char *method;            /* GET HEAD PUT POST DELETE */
    const char *bucket, *key;      /* key NULL: the bucket itself */
    const char *query;             /* canonical (sorted, encoded) or NULL */
    const char *if_match;
    int has_range;
    uint64_t off, len;             /* Range: bytes=off-(off+len-1) */
    const void *body;              /* PUT/POST body, body_len bytes */
    size_t body_len;
    void *dst;                     /* ranged GET: exactly len bytes here */
    size_t max_body;               /* other bodies: at most this (0: 16 MiB) */
    /* response */
    long http;
    cks3_buf resp;                 /* body unless dst */
    uint64_t got;                  /* bytes into dst */
    char etag[CKS3_ETAG_MAX];
    char content_range[128];
    uint64_t content_length;
    int has_length;
    /* what on_header saw of the response under way (s3_http.c) */
    long status;                   /* its status line's code */
    size_t header_bytes;           /* its headers' bytes so far (at most CKS3_MAX_HEADERS) */
    char location[256];            /* a redirect's Location, printable ASCII only, cut */
    const char *bad;               /* why the response was refused before its body (a lie) */
} cks3_req;

#define CKS3_MAX_HEADERS (64u << 10) /* response headers larger than this are refused */

/* Send r (retrying per s3.h), fill its response.  @return CKS3_OK for a
 * 2xx, else the status of the failure with a message in err naming the
 * operation (what) and bucket/key.  Frees nothing of r's but on a retry its
 * response. */
cks3_status cks3_perform(cks3_client *c, cks3_req *r, const char *what, char *err, size_t cap);
void cks3_req_free(cks3_req *r);

/* AWS's URI encoding of s (unreserved kept; '/' kept if keep_slash),
 * malloc'ed. */
char *cks3_uri_encode(const char *s, int keep_slash);

/* The XML walker: for each element of depth 2 (a child of the root) and 3
 * (a child of one of those), on_field(arg, parent, name, text) with parent
 * the depth-2 element's name for depth 3 and NULL for depth 2 (text of an
 * element with children: ""); after a depth-2 element with children,
 * on_field(arg, name, NULL, NULL) (a record ends).  root gets the root's
 * name (may be NULL).  A non-zero return of on_field stops.
 * @return 0, -1 if it does not parse, or what on_field returned. */
typedef int (*cks3_xml_cb)(void *arg, const char *parent, const char *name, const char *text);
int cks3_xml_walk(const char *xml, size_t len, char *root, size_t rootCap, cks3_xml_cb cb, void *arg);

#endif
