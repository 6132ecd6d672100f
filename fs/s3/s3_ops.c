/*
 * s3_ops.c — the S3 operations of s3.h on top of cks3_perform: object
 * reads (HEAD, ranged and whole GET), ListObjectsV2, PUT, DELETE and the
 * multipart upload calls, with their responses checked and parsed.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "s3_internal.h"
#include "util.h"

static cks3_status nomem(char *err, size_t cap)
{
    snprintf(err, cap, "out of memory");
    return CKS3_ERR_NOMEM;
}

static cks3_status protocol(const cks3_req *r, const char *what, const char *why, char *err, size_t cap)
{
    snprintf(err, cap, "s3://%s/%s: %s: %s", r->bucket, r->key ? r->key : "", what, why);
    return CKS3_ERR_PROTOCOL;
}

cks3_status cks3_head(cks3_client *c, const char *bucket, const char *key, cks3_object *out, char *err, size_t cap)
{
    cks3_req r = {.method = "HEAD", .bucket = bucket, .key = key};
    cks3_status st = cks3_perform(c, &r, "HEAD", err, cap);
    if (st == CKS3_OK && (!r.has_length || !r.etag[0]))
        st = protocol(&r, "HEAD", "no Content-Length or ETag in the response", err, cap);
    if (st == CKS3_OK) {
        out->size = r.content_length;
        snprintf(out->etag, sizeof out->etag, "%s", r.etag);
    }
    cks3_req_free(&r);
    return st;
}

cks3_status cks3_get_range(cks3_client *c, const char *bucket, const char *key, const char *ifMatch, uint64_t off,
                           size_t len, void *dst, char *err, size_t cap)
{
    if (!len)
        return CKS3_OK;
    char what[96];
    snprintf(what, sizeof what, "GET bytes %" PRIu64 "-%" PRIu64, off, off + len - 1);
    cks3_req r = {.method = "GET", .bucket = bucket, .key = key, .if_match = ifMatch, .has_range = 1,
                  .off = off, .len = len, .dst = dst, .max_body = 1u << 20};
    cks3_status st = cks3_perform(c, &r, what, err, cap);
    if (st == CKS3_OK) {
        unsigned long long a = 0, b = 0;
        int whole = r.http == 200 && off == 0 && r.got == len && (!r.has_length || r.content_length == len);
        int ranged = r.http == 206 && sscanf(r.content_range, "bytes %llu-%llu/", &a, &b) == 2 && a == off &&
                     b == off + len - 1 && r.got == len;
        if (!whole && !ranged)
            st = r.got < len && (r.http == 200 || r.http == 206)
                     ? (snprintf(err, cap, "s3://%s/%s: %s: %" PRIu64 " bytes came (the object is shorter)", bucket,
                                 key, what, r.got),
                        CKS3_ERR_RANGE)
                     : protocol(&r, what, "the response is not the range asked for", err, cap);
    }
    if (st == CKS3_OK)
        atomic_fetch_add_explicit(&c->get_bytes, len, memory_order_relaxed);
    cks3_req_free(&r);
    return st;
}

cks3_status cks3_get_first(cks3_client *c, const char *bucket, const char *key, size_t len, void *dst,
                           cks3_object *obj, size_t *got, char *err, size_t cap)
{
    char what[64];
    snprintf(what, sizeof what, "GET bytes 0-%zu", len - 1);
    cks3_req r = {.method = "GET", .bucket = bucket, .key = key, .has_range = 1, .off = 0, .len = len,
                  .dst = dst, .max_body = 1u << 20};
    *got = 0;
    cks3_status st = cks3_perform(c, &r, what, err, cap);
    unsigned long long a = 0, b = 0, total = 0;
    if (st == CKS3_ERR_RANGE && r.http == 416) { /* bytes=0-... of nothing: an empty object */
        obj->size = 0;
        snprintf(obj->etag, sizeof obj->etag, "%s", r.etag);
        st = CKS3_OK;
    } else if (st == CKS3_OK) {
        /* the headers were checked against the range (s3_http.c): a 206
         * of 0-b, a 200 of at most len bytes; here the size must be said */
        if (r.http == 206 && sscanf(r.content_range, "bytes %llu-%llu/%llu", &a, &b, &total) == 3 && a == 0 &&
            r.got == b + 1 && b < total && (r.got == len || r.got == total))
            obj->size = total;
        else if (r.http == 200 && (!r.has_length || r.content_length == r.got))
            obj->size = r.got;
        else
            st = protocol(&r, what, "the response does not say the object's size, or its bytes do not fit it", err,
                          cap);
        if (st == CKS3_OK && !r.etag[0])
            st = protocol(&r, what, "no ETag in the response", err, cap);
        if (st == CKS3_OK) {
            snprintf(obj->etag, sizeof obj->etag, "%s", r.etag);
            *got = r.got;
            atomic_fetch_add_explicit(&c->get_bytes, r.got, memory_order_relaxed);
        }
    }
    cks3_req_free(&r);
    return st;
}

cks3_status cks3_get_object(cks3_client *c, const char *bucket, const char *key, size_t maxSize, cks3_object *obj,
                            char **buf, size_t *len, char *err, size_t cap)
{
    *buf = NULL;
    *len = 0;
    cks3_req r = {.method = "GET", .bucket = bucket, .key = key, .max_body = maxSize};
    cks3_status st = cks3_perform(c, &r, "GET", err, cap);
    if (st == CKS3_OK && r.has_length && r.content_length != r.resp.n)
        st = protocol(&r, "GET", "the body is not Content-Length bytes", err, cap);
    if (st == CKS3_OK) {
        if (!r.resp.p && !(r.resp.p = calloc(1, 1))) {
            cks3_req_free(&r);
            return nomem(err, cap);
        }
        if (obj) {
            obj->size = r.resp.n;
            snprintf(obj->etag, sizeof obj->etag, "%s", r.etag);
        }
        *buf = r.resp.p;
        *len = r.resp.n;
        r.resp.p = NULL;
    }
    cks3_req_free(&r);
    return st;
}

/* ---- listings --------------------------------------------------------------- */

typedef struct {
    cks3_list_result *out;
    size_t cap;
    cks3_entry cur;
    int truncated;
    char *token, *seen[2];         /* the next page's token; the last two asked with */
    int nomem;
} list_state;

/* A listing stops here, whatever the server says (IsTruncated forever, a
 * token it gave before): 10,000 pages of S3's 1,000 keys. */
#define LIST_MAX_PAGES 10000u
#define LIST_MAX_KEYS 10000000u

static int list_field(void *arg, const char *parent, const char *name, const char *text)
{
    list_state *s = arg;
    if (!parent && !strcmp(name, "IsTruncated"))
        s->truncated = !strcmp(text, "true");
    else if (!parent && !strcmp(name, "NextContinuationToken")) {
        free(s->token);
        s->token = strdup(text);
        s->nomem |= !s->token;
    } else if (parent && !strcmp(parent, "Contents") && name && text) {
        if (!strcmp(name, "Key") && !s->cur.key)
            s->nomem |= !(s->cur.key = strdup(text));
        else if (!strcmp(name, "Size"))
            s->cur.size = strtoull(text, NULL, 10);
        else if (!strcmp(name, "ETag"))
            snprintf(s->cur.etag, sizeof s->cur.etag, "%s", text);
    } else if (parent && !strcmp(parent, "Contents") && !name) { /* the record ends */
        cks3_entry *v = cku_grow(s->out->v, &s->cap, s->out->n, sizeof *v, 64);
        if (!v)
            return s->nomem = 1;
        s->out->v = v;
        if (s->cur.key)
            s->out->v[s->out->n++] = s->cur;
        memset(&s->cur, 0, sizeof s->cur);
    }
    return s->nomem;
}

/* One page of a listing (LIST, ListMultipartUploads, ListParts: op): r
 * performed, its XML walked by field(arg), whose state's *nomem, *truncated
 * and *next (the marker of the next page) are given; refused unless its
 * root element is root_want and a truncated page names the next (no_next:
 * what to say).  r is the caller's to free (cks3_req_free) in any case. */
static cks3_status list_page(cks3_client *c, cks3_req *r, const char *op, const char *root_want, cks3_xml_cb field,
                             void *arg, const int *nomem_p, int *truncated, char *const *next, const char *no_next,
                             char *err, size_t cap)
{
    *truncated = 0;
    cks3_status st = cks3_perform(c, r, op, err, cap);
    if (st != CKS3_OK)
        return st;
    char root[64], why[96];
    int w = cks3_xml_walk(r->resp.p ? r->resp.p : "", r->resp.n, root, sizeof root, field, arg);
    snprintf(why, sizeof why, "not a %s", root_want);
    if (*nomem_p)
        return nomem(err, cap);
    if (w || strcmp(root, root_want))
        return protocol(r, op, why, err, cap);
    if (*truncated && !*next)
        return protocol(r, op, no_next, err, cap);
    return CKS3_OK;
}

cks3_status cks3_list(cks3_client *c, const char *bucket, const char *prefix, cks3_list_result *out, char *err,
                      size_t cap)
{
    memset(out, 0, sizeof *out);
    list_state s = {.out = out};
    cks3_status st = CKS3_OK;
    unsigned pages = 0;
    char *eprefix = cks3_uri_encode(prefix ? prefix : "", 0);
    if (!eprefix)
        return nomem(err, cap);
    do {
        char *etok = s.token ? cks3_uri_encode(s.token, 0) : NULL, *query = NULL;
        /* the canonical query: parameters sorted by name */
        int rc = asprintf(&query, "%s%s%slist-type=2&prefix=%s", etok ? "continuation-token=" : "", etok ? etok : "",
                          etok ? "&" : "", eprefix);
        free(etok);
        if (rc < 0) {
            st = nomem(err, cap);
            break;
        }
        cks3_req r = {.method = "GET", .bucket = bucket, .query = query};
        st = list_page(c, &r, "LIST", "ListBucketResult", list_field, &s, &s.nomem, &s.truncated, &s.token,
                       "truncated without a continuation token", err, cap);
        if (st != CKS3_OK || !s.truncated)
            ;
        else if ((s.seen[0] && !strcmp(s.token, s.seen[0])) || (s.seen[1] && !strcmp(s.token, s.seen[1])))
            st = protocol(&r, "LIST", "the listing never ends (a continuation token given again)", err, cap);
        else if (++pages >= LIST_MAX_PAGES || out->n >= LIST_MAX_KEYS)
            st = protocol(&r, "LIST", "the listing never ends (over 10,000 pages or 10,000,000 keys; "
                          "continuation token)", err, cap);
        free(query);
        cks3_req_free(&r);
        if (st == CKS3_OK && s.truncated) { /* the token just used becomes the newest seen */
            free(s.seen[1]);
            s.seen[1] = s.seen[0];
            s.seen[0] = s.token ? strdup(s.token) : NULL;
        }
    } while (st == CKS3_OK && s.truncated);
    free(s.cur.key);
    free(s.token);
    free(s.seen[0]);
    free(s.seen[1]);
    free(eprefix);
    if (st != CKS3_OK)
        cks3_list_free(out);
    return st;
}

void cks3_list_free(cks3_list_result *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].key);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const cks3_entry *)a)->key, ((const cks3_entry *)b)->key);
}

void cks3_list_sort(cks3_list_result *l)
{
    if (l->n)
        qsort(l->v, l->n, sizeof *l->v, cmp_entry);
}

const cks3_entry *cks3_list_find(const cks3_list_result *l, size_t skip, const char *name)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(l->v[mid].key + skip, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < l->n && !strcmp(l->v[lo].key + skip, name) ? &l->v[lo] : NULL;
}

/* ---- writes ------------------------------------------------------------------ */

static cks3_status put_body(cks3_client *c, const char *bucket, const char *key, const char *query,
                            const void *data, size_t len, const char *what, char etagOut[CKS3_ETAG_MAX], char *err,
                            size_t cap)
{
    static const char empty[1];
    cks3_req r = {.method = "PUT", .bucket = bucket, .key = key, .query = query, .body = data ? data : empty,
                  .body_len = len};
    cks3_status st = cks3_perform(c, &r, what, err, cap);
    if (st == CKS3_OK && !r.etag[0])
        st = protocol(&r, what, "no ETag in the response", err, cap);
    if (st == CKS3_OK && etagOut)
        snprintf(etagOut, CKS3_ETAG_MAX, "%s", r.etag);
    cks3_req_free(&r);
    return st;
}

cks3_status cks3_put(cks3_client *c, const char *bucket, const char *key, const void *data, size_t len,
                     char etagOut[CKS3_ETAG_MAX], char *err, size_t cap)
{
    return put_body(c, bucket, key, NULL, data, len, "PUT", etagOut, err, cap);
}

cks3_status cks3_delete(cks3_client *c, const char *bucket, const char *key, char *err, size_t cap)
{
    cks3_req r = {.method = "DELETE", .bucket = bucket, .key = key};
    cks3_status st = cks3_perform(c, &r, "DELETE", err, cap);
    cks3_req_free(&r);
    return st == CKS3_ERR_NOT_FOUND ? CKS3_OK : st;
}

/* ---- multipart ---------------------------------------------------------------- */

typedef struct {
    char *upload_id;
    char etag[CKS3_ETAG_MAX];
    char code[128], message[512];
    int nomem;
} mpu_state;

static int mpu_field(void *arg, const char *parent, const char *name, const char *text)
{
    mpu_state *s = arg;
    if (parent || !text)
        return 0;
    if (!strcmp(name, "UploadId") && !s->upload_id)
        s->nomem |= !(s->upload_id = strdup(text));
    else if (!strcmp(name, "ETag"))
        snprintf(s->etag, sizeof s->etag, "%s", text);
    else if (!strcmp(name, "Code"))
        snprintf(s->code, sizeof s->code, "%s", text);
    else if (!strcmp(name, "Message"))
        snprintf(s->message, sizeof s->message, "%s", text);
    return s->nomem;
}

cks3_status cks3_mpu_create(cks3_client *c, const char *bucket, const char *key, char **uploadId, char *err,
                            size_t cap)
{
    *uploadId = NULL;
    static const char empty[1];
    cks3_req r = {.method = "POST", .bucket = bucket, .key = key, .query = "uploads=", .body = empty, .body_len = 0};
    cks3_status st = cks3_perform(c, &r, "CreateMultipartUpload", err, cap);
    mpu_state s = {0};
    char root[64];
    if (st == CKS3_OK) {
        int w = cks3_xml_walk(r.resp.p ? r.resp.p : "", r.resp.n, root, sizeof root, mpu_field, &s);
        if (s.nomem)
            st = nomem(err, cap);
        else if (w || strcmp(root, "InitiateMultipartUploadResult") || !s.upload_id || !s.upload_id[0])
            st = protocol(&r, "CreateMultipartUpload", "no UploadId in the response", err, cap);
    }
    if (st == CKS3_OK)
        *uploadId = s.upload_id;
    else
        free(s.upload_id);
    cks3_req_free(&r);
    return st;
}

cks3_status cks3_mpu_upload_part(cks3_client *c, const char *bucket, const char *key, const char *uploadId,
                                 int number, const void *data, size_t len, char etagOut[CKS3_ETAG_MAX], char *err,
                                 size_t cap)
{
    char *eid = cks3_uri_encode(uploadId, 0), *query = NULL, what[64];
    if (!eid || asprintf(&query, "partNumber=%d&uploadId=%s", number, eid) < 0) {
        free(eid);
        return nomem(err, cap);
    }
    snprintf(what, sizeof what, "UploadPart %d", number);
    cks3_status st = put_body(c, bucket, key, query, data, len, what, etagOut, err, cap);
    free(eid);
    free(query);
    return st;
}

/* The XML body of CompleteMultipartUpload. */
static char *complete_xml(const cks3_part *parts, size_t n)
{
    size_t cap = 128 + n * (64 + 2 * CKS3_ETAG_MAX), at = 0;
    char *x = malloc(cap);
    if (!x)
        return NULL;
    at += (size_t)snprintf(x + at, cap - at, "<CompleteMultipartUpload>");
    for (size_t i = 0; i < n; i++) {
        at += (size_t)snprintf(x + at, cap - at, "<Part><PartNumber>%d</PartNumber><ETag>", parts[i].number);
        for (const char *e = parts[i].etag; *e; e++) /* an ETag has quotes: escape XML's specials */
            at += (size_t)snprintf(x + at, cap - at, "%s",
                                   *e == '"' ? "&quot;" : *e == '&' ? "&amp;" : *e == '<' ? "&lt;" : (char[2]){*e, 0});
        at += (size_t)snprintf(x + at, cap - at, "</ETag></Part>");
    }
    snprintf(x + at, cap - at, "</CompleteMultipartUpload>");
    return x;
}

cks3_status cks3_mpu_complete(cks3_client *c, const char *bucket, const char *key, const char *uploadId,
                              const cks3_part *parts, size_t n, char etagOut[CKS3_ETAG_MAX], char *err, size_t cap)
{
    char *eid = cks3_uri_encode(uploadId, 0), *query = NULL, *body = complete_xml(parts, n);
    if (!eid || !body || asprintf(&query, "uploadId=%s", eid) < 0) {
        free(eid);
        free(body);
        return nomem(err, cap);
    }
    cks3_req r = {.method = "POST", .bucket = bucket, .key = key, .query = query, .body = body,
                  .body_len = strlen(body)};
    cks3_status st = cks3_perform(c, &r, "CompleteMultipartUpload", err, cap);
    mpu_state s = {0};
    char root[64];
    if (st == CKS3_OK) {
        /* S3 may answer 200 and put the error in the body */
        int w = cks3_xml_walk(r.resp.p ? r.resp.p : "", r.resp.n, root, sizeof root, mpu_field, &s);
        if (s.nomem)
            st = nomem(err, cap);
        else if (!w && !strcmp(root, "Error")) {
            snprintf(err, cap, "s3://%s/%s: CompleteMultipartUpload: %s: %s", bucket, key, s.code, s.message);
            st = !strcmp(s.code, "NoSuchUpload") ? CKS3_ERR_NOT_FOUND
                 : strstr(s.code, "Internal") || !strcmp(s.code, "SlowDown") ? CKS3_ERR_SERVER
                                                                             : CKS3_ERR_HTTP;
        } else if (w || strcmp(root, "CompleteMultipartUploadResult"))
            st = protocol(&r, "CompleteMultipartUpload", "not a CompleteMultipartUploadResult", err, cap);
        else if (etagOut)
            snprintf(etagOut, CKS3_ETAG_MAX, "%s", s.etag);
    }
    free(s.upload_id);
    free(eid);
    free(query);
    free(body);
    cks3_req_free(&r);
    return st;
}

cks3_status cks3_mpu_abort(cks3_client *c, const char *bucket, const char *key, const char *uploadId, char *err,
                           size_t cap)
{
    char *eid = cks3_uri_encode(uploadId, 0), *query = NULL;
    if (!eid || asprintf(&query, "uploadId=%s", eid) < 0) {
        free(eid);
        return nomem(err, cap);
    }
    cks3_req r = {.method = "DELETE", .bucket = bucket, .key = key, .query = query};
    cks3_status st = cks3_perform(c, &r, "AbortMultipartUpload", err, cap);
    cks3_req_free(&r);
    free(eid);
    free(query);
    return st == CKS3_ERR_NOT_FOUND ? CKS3_OK : st;
}

typedef struct {
    cks3_upload_list *ul;
    cks3_part_list *pl;
    size_t cap;
    cks3_upload u;
    cks3_part p;
    int truncated, nomem;
    char *next_key, *next_id; /* uploads: key-marker, upload-id-marker; parts: part-number-marker */
} page_state;

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
    void *nv = cku_grow(*v, cap, n, size, 32);
    if (!nv)
        return -1;
    *v = nv;
    return 0;
}

static void set_str(char **slot, const char *text, int *nomem)
{
    free(*slot);
    *nomem |= !(*slot = strdup(text));
}

static int uploads_field(void *arg, const char *parent, const char *name, const char *text)
{
    page_state *s = arg;
    if (!parent && !strcmp(name, "IsTruncated"))
        s->truncated = !strcmp(text, "true");
    else if (!parent && !strcmp(name, "NextKeyMarker"))
        set_str(&s->next_key, text, &s->nomem);
    else if (!parent && !strcmp(name, "NextUploadIdMarker"))
        set_str(&s->next_id, text, &s->nomem);
    else if (parent && !strcmp(parent, "Upload") && name) {
        if (!strcmp(name, "Key"))
            set_str(&s->u.key, text, &s->nomem);
        else if (!strcmp(name, "UploadId"))
            set_str(&s->u.upload_id, text, &s->nomem);
        else if (!strcmp(name, "Initiated"))
            snprintf(s->u.initiated, sizeof s->u.initiated, "%s", text);
    } else if (parent && !strcmp(parent, "Upload") && !name) {
        if (s->u.key && s->u.upload_id) {
            if (grow((void **)&s->ul->v, &s->cap, s->ul->n, sizeof *s->ul->v))
                return s->nomem = 1;
            s->ul->v[s->ul->n++] = s->u;
        } else {
            free(s->u.key);
            free(s->u.upload_id);
        }
        memset(&s->u, 0, sizeof s->u);
    }
    return s->nomem;
}

cks3_status cks3_mpu_list_uploads(cks3_client *c, const char *bucket, const char *prefix, cks3_upload_list *out,
                                  char *err, size_t cap)
{
    memset(out, 0, sizeof *out);
    page_state s = {.ul = out};
    cks3_status st = CKS3_OK;
    char *ep = cks3_uri_encode(prefix ? prefix : "", 0);
    if (!ep)
        return nomem(err, cap);
    do {
        char *ek = s.next_key ? cks3_uri_encode(s.next_key, 0) : NULL;
        char *ei = s.next_id ? cks3_uri_encode(s.next_id, 0) : NULL, *query = NULL;
        int rc = asprintf(&query, "%s%s%sprefix=%s%s%s%suploads=", ek ? "key-marker=" : "", ek ? ek : "",
                          ek ? "&" : "", ep, ei ? "&upload-id-marker=" : "", ei ? ei : "", "&");
        free(ek);
        free(ei);
        if (rc < 0) {
            st = nomem(err, cap);
            break;
        }
        cks3_req r = {.method = "GET", .bucket = bucket, .query = query};
        st = list_page(c, &r, "ListMultipartUploads", "ListMultipartUploadsResult", uploads_field, &s, &s.nomem,
                       &s.truncated, &s.next_key, "truncated without a next marker", err, cap);
        free(query);
        cks3_req_free(&r);
    } while (st == CKS3_OK && s.truncated);
    free(s.u.key);
    free(s.u.upload_id);
    free(s.next_key);
    free(s.next_id);
    free(ep);
    if (st != CKS3_OK)
        cks3_upload_list_free(out);
    return st;
}

void cks3_upload_list_free(cks3_upload_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].key);
        free(l->v[i].upload_id);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int parts_field(void *arg, const char *parent, const char *name, const char *text)
{
    page_state *s = arg;
    if (!parent && !strcmp(name, "IsTruncated"))
        s->truncated = !strcmp(text, "true");
    else if (!parent && !strcmp(name, "NextPartNumberMarker"))
        set_str(&s->next_key, text, &s->nomem);
    else if (parent && !strcmp(parent, "Part") && name) {
        if (!strcmp(name, "PartNumber"))
            s->p.number = atoi(text);
        else if (!strcmp(name, "Size"))
            s->p.size = strtoull(text, NULL, 10);
        else if (!strcmp(name, "ETag"))
            snprintf(s->p.etag, sizeof s->p.etag, "%s", text);
    } else if (parent && !strcmp(parent, "Part") && !name) {
        if (grow((void **)&s->pl->v, &s->cap, s->pl->n, sizeof *s->pl->v))
            return s->nomem = 1;
        s->pl->v[s->pl->n++] = s->p;
        memset(&s->p, 0, sizeof s->p);
    }
    return s->nomem;
}

cks3_status cks3_mpu_list_parts(cks3_client *c, const char *bucket, const char *key, const char *uploadId,
                                cks3_part_list *out, char *err, size_t cap)
{
    memset(out, 0, sizeof *out);
    page_state s = {.pl = out};
    cks3_status st = CKS3_OK;
    char *eid = cks3_uri_encode(uploadId, 0);
    /* parts a page (S3's max-parts, default and most 1,000): only the
     * tests set it, to page through a few parts */
    const char *e = getenv("CKPTFS_S3_LIST_PARTS_MAX");
    unsigned long per_page = e ? strtoul(e, NULL, 10) : 0;
    char max[48] = "";
    if (per_page >= 1 && per_page <= 1000)
        snprintf(max, sizeof max, "max-parts=%lu&", per_page);
    if (!eid)
        return nomem(err, cap);
    do {
        char *query = NULL; /* (parameters in order: what SigV4 signs) */
        int rc = asprintf(&query, "%s%s%s%suploadId=%s", max, s.next_key ? "part-number-marker=" : "",
                          s.next_key ? s.next_key : "", s.next_key ? "&" : "", eid);
        if (rc < 0) {
            st = nomem(err, cap);
            break;
        }
        cks3_req r = {.method = "GET", .bucket = bucket, .key = key, .query = query};
        st = list_page(c, &r, "ListParts", "ListPartsResult", parts_field, &s, &s.nomem, &s.truncated, &s.next_key,
                       "truncated without a next marker", err, cap);
        free(query);
        cks3_req_free(&r);
    } while (st == CKS3_OK && s.truncated);
    free(s.next_key);
    free(eid);
    if (st != CKS3_OK)
        cks3_part_list_free(out);
    return st;
}

void cks3_part_list_free(cks3_part_list *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

int cks3_etag_is_md5(const char *etag, const void *data, size_t len)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    size_t el = strlen(etag);
    if (el >= 2 && etag[0] == '"' && etag[el - 1] == '"')
        etag++, el -= 2;
    if (el != 32 || !EVP_Digest(data, len, md, &n, EVP_md5(), NULL) || n != 16)
        return 0; /* not a plain MD5 (or MD5 not available here: FIPS) */
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 16; i++) {
        char hi = (char)(etag[2 * i] | 0x20), lo = (char)(etag[2 * i + 1] | 0x20); /* either case */
        if (hi != hex[md[i] >> 4] || lo != hex[md[i] & 15])
            return 0;
    }
    return 1;
}
