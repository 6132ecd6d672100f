/*
 * s3_http.c — the client and its requests (s3.h, s3_internal.h): a pool of
 * curl easy handles over one share (connections kept alive, DNS, TLS
 * sessions), one request sent with curl's SigV4 signing, its response
 * classified, and the retries with exponential backoff and full jitter
 * within the call's time budget.
 *
 * What crosses into curl: the key ID and secret as CURLOPT_USERNAME /
 * CURLOPT_PASSWORD, the session token as a header; nothing of them is ever
 * formatted into a message.  curl signs every header we add (Range,
 * If-Match, x-amz-content-sha256, the token).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "s3_internal.h"

#define BACKOFF_MS 100u            /* first retry's wait at most; doubles */
#define BACKOFF_MAX_MS 5000u
#define DEFAULT_MAX_BODY (16u << 20)

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;
static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

const char *cks3_status_name(cks3_status s)
{
    switch (s) {
    case CKS3_OK: return "ok";
    case CKS3_ERR_ARG: return "invalid argument";
    case CKS3_ERR_NOMEM: return "out of memory";
    case CKS3_ERR_CONFIG: return "configuration";
    case CKS3_ERR_AUTH: return "access denied";
    case CKS3_ERR_NO_BUCKET: return "no such bucket";
    case CKS3_ERR_NOT_FOUND: return "not found";
    case CKS3_ERR_CHANGED: return "object changed";
    case CKS3_ERR_RANGE: return "range";
    case CKS3_ERR_NETWORK: return "network";
    case CKS3_ERR_SERVER: return "server error";
    case CKS3_ERR_PROTOCOL: return "bad response";
    case CKS3_ERR_HTTP: return "HTTP error";
    }
    return "unknown status";
}

int cks3_status_transient(cks3_status s) { return s == CKS3_ERR_NETWORK || s == CKS3_ERR_SERVER; }

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the client and its pool ------------------------------------------------ */

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *arg)
{
    (void)h;
    (void)a;
    pthread_mutex_lock(&((cks3_client *)arg)->share_lock[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *arg)
{
    (void)h;
    pthread_mutex_unlock(&((cks3_client *)arg)->share_lock[d]);
}

cks3_status cks3_client_new(const cks3_config *cfg, cks3_client **out, char *err, size_t cap)
{
    *out = NULL;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        snprintf(err, cap, "libcurl cannot start: %s", curl_easy_strerror(global_rc));
        return CKS3_ERR_NOMEM;
    }
    cks3_config none = {0};
    cks3_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, cap, "out of memory");
        return CKS3_ERR_NOMEM;
    }
    c->cfg = cfg ? *cfg : none;
    c->cfg.max_conns = c->cfg.max_conns ? c->cfg.max_conns : 64;
    c->cfg.retry_ms = c->cfg.retry_ms ? c->cfg.retry_ms : 30000;
    c->cfg.connect_ms = c->cfg.connect_ms ? c->cfg.connect_ms : 3000;
    c->cfg.stall_s = c->cfg.stall_s ? c->cfg.stall_s : 10;
    c->cfg.endpoint = c->cfg.region = c->cfg.profile = NULL; /* resolved below; not kept */
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_lock[i], NULL);
    pthread_mutex_init(&c->pool_lock, NULL);
    cks3_status st = cks3_settings_resolve(cfg ? cfg : &none, &c->set, err, cap);
    if (st != CKS3_OK) {
        cks3_client_free(c);
        return st;
    }
    if (asprintf(&c->sigv4, "aws:amz:%s:s3", c->set.region) < 0)
        c->sigv4 = NULL;
    c->share = curl_share_init();
    if (!c->sigv4 || !c->share) {
        cks3_client_free(c);
        snprintf(err, cap, "out of memory");
        return CKS3_ERR_NOMEM;
    }
    curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    *out = c;
    return CKS3_OK;
}

void cks3_client_free(cks3_client *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_idle; i++)
        curl_easy_cleanup(c->idle[i]);
    free(c->idle);
    if (c->share)
        curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->share_lock[i]);
    pthread_mutex_destroy(&c->pool_lock);
    cks3_settings_wipe(&c->set);
    free(c->sigv4);
    free(c);
}

const char *cks3_endpoint(const cks3_client *c) { return c->set.endpoint; }
const char *cks3_region(const cks3_client *c) { return c->set.region; }
const char *cks3_cred_source(const cks3_client *c) { return c->set.source; }

void cks3_get_stats(cks3_client *c, cks3_stats *st)
{
    st->requests = atomic_load(&c->requests);
    st->retries = atomic_load(&c->retries);
    st->failures = atomic_load(&c->failures);
    st->bytes_in = atomic_load(&c->bytes_in);
    st->bytes_out = atomic_load(&c->bytes_out);
    st->get_bytes = atomic_load(&c->get_bytes);
}

static CURL *handle_get(cks3_client *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->n_idle)
        h = c->idle[--c->n_idle];
    pthread_mutex_unlock(&c->pool_lock);
    return h ? h : curl_easy_init();
}

static void handle_put(cks3_client *c, CURL *h)
{
    pthread_mutex_lock(&c->pool_lock);
    if (c->n_idle == c->cap_idle && c->n_idle < c->cfg.max_conns) {
        size_t ncap = c->cap_idle ? c->cap_idle * 2 : 16;
        CURL **n = realloc(c->idle, ncap * sizeof *n);
        if (n) {
            c->idle = n;
            c->cap_idle = ncap;
        }
    }
    if (c->n_idle < c->cap_idle && c->n_idle < c->cfg.max_conns) {
        c->idle[c->n_idle++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (h)
        curl_easy_cleanup(h);
}

/* ---- one request ------------------------------------------------------------------ */

typedef struct {
    cks3_req *r;
    CURL *h;
    cks3_client *c;
} xfer;

static int buf_add(cks3_buf *b, const char *p, size_t n)
{
    size_t max = b->max ? b->max : DEFAULT_MAX_BODY;
    if (b->n + n > max) {
        b->over = 1;
        return -1;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* text into out, printable ASCII alone (the server's words go into our
 * messages: no newline to fake a line, no escape or bidi control). */
static void printable(char *out, size_t cap, const char *text)
{
    size_t i = 0;
    for (; *text && i + 1 < cap; text++)
        out[i++] = *text >= ' ' && *text < 127 ? *text : '?';
    out[i] = 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
    xfer *x = arg;
    cks3_req *r = x->r;
    size_t n = size * nmemb;
    atomic_fetch_add_explicit(&x->c->bytes_in, n, memory_order_relaxed);
    if (r->dst && r->status / 100 == 2) {
        if (r->got + n > r->len) {
            r->bad = "the response is longer than asked for";
            return 0; /* CURLE_WRITE_ERROR */
        }
        memcpy((char *)r->dst + r->got, p, n);
        r->got += n;
        return n;
    }
    return buf_add(&r->resp, p, n) ? 0 : n;
}

/* A header's value: past "name:" and blanks. */
static const char *hvalue(const char *line, size_t name_len)
{
    const char *v = line + name_len;
    while (*v == ' ' || *v == '\t')
        v++;
    return v;
}

/* The headers of a response are all in (its blank line): refuse, before
 * any byte of its body, a 2xx that does not answer what was asked (a
 * server that lies, or a proxy in the way).  @return why, or NULL. */
static const char *headers_refused(const cks3_req *r)
{
    if (r->status / 100 != 2)
        return NULL;
    if (r->dst) { /* a ranged GET: exactly [off, off+len), or less where the object ends */
        unsigned long long x = 0, y = 0, total = 0;
        uint64_t last = r->off + r->len - 1;
        if (r->status == 200) /* the whole object: only the range from 0, and no more */
            return r->off != 0                                      ? "the response is not the range asked for"
                   : r->has_length && r->content_length > r->len ? "the response is longer than the range asked for"
                                                                    : NULL;
        if (r->status != 206)
            return "the response is not the range asked for";
        int n = sscanf(r->content_range, "bytes %llu-%llu/%llu", &x, &y, &total);
        if (n < 2 || x != r->off || y < x || (y != last && !(n == 3 && y < last && y + 1 == total)))
            return "the response's Content-Range is not the range asked for";
        if (r->has_length && r->content_length != y - x + 1)
            return "the response's Content-Length is not its Content-Range's length";
    }
    return NULL;
}

/* A body declared larger than r takes: refused before it comes (as
 * buf_add would once it came). */
static int body_too_large(cks3_req *r)
{
    size_t max = r->max_body ? r->max_body : DEFAULT_MAX_BODY;
    if (r->dst || !r->has_length || r->content_length <= max || !strcmp(r->method, "HEAD"))
        return 0;
    r->resp.over = 1;
    return 1;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *arg)
{
    cks3_req *r = ((xfer *)arg)->r;
    size_t n = size * nmemb, k;
    char line[512];
    if (n > CKS3_MAX_HEADERS - r->header_bytes || r->header_bytes > CKS3_MAX_HEADERS) {
        r->bad = "the response's headers are too large";
        return 0;
    }
    r->header_bytes += n;
    k = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, p, k);
    line[k] = 0;
    while (k && (line[k - 1] == '\r' || line[k - 1] == '\n'))
        line[--k] = 0;
    if (!strncasecmp(line, "HTTP/", 5)) { /* a new response (after a 100 Continue, say) */
        const char *sp = strchr(line, ' ');
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->etag[0] = r->content_range[0] = r->location[0] = 0;
        r->has_length = 0;
        r->header_bytes = n;
    } else if (!k) {
        r->bad = headers_refused(r);
        return r->bad || body_too_large(r) ? 0 : n;
    } else if (!strncasecmp(line, "etag:", 5)) {
        snprintf(r->etag, sizeof r->etag, "%s", hvalue(line, 5));
    } else if (!strncasecmp(line, "content-range:", 14)) {
        snprintf(r->content_range, sizeof r->content_range, "%s", hvalue(line, 14));
    } else if (!strncasecmp(line, "content-length:", 15)) {
        const char *v = hvalue(line, 15);
        char *end;
        r->content_length = strtoull(v, &end, 10);
        r->has_length = 1;
        if (*v < '0' || *v > '9' || *end) {
            r->bad = "the response's Content-Length is not a number";
            return 0;
        }
    } else if (!strncasecmp(line, "location:", 9)) {
        /* for the message only: never followed; printable ASCII alone */
        printable(r->location, sizeof r->location, hvalue(line, 9));
    }
    return n;
}

static void hex_sha256(const void *p, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* The URL of r: path-style on a custom endpoint, virtual-hosted on AWS. */
static char *request_url(cks3_client *c, const cks3_req *r)
{
    char *ekey = cks3_uri_encode(r->key ? r->key : "", 1), *url = NULL;
    if (!ekey)
        return NULL;
    const char *q = r->query ? r->query : "";
    int rc;
    if (c->set.aws && !strchr(r->bucket, '.'))
        rc = asprintf(&url, "https://%s.s3.%s.amazonaws.com/%s%s%s", r->bucket, c->set.region, ekey, *q ? "?" : "", q);
    else
        rc = asprintf(&url, "%s/%s%s%s%s%s", c->set.endpoint, r->bucket, r->key ? "/" : "", ekey, *q ? "?" : "", q);
    free(ekey);
    return rc < 0 ? NULL : url;
}

static struct curl_slist *add_header(struct curl_slist *l, int *bad, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static struct curl_slist *add_header(struct curl_slist *l, int *bad, const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int rc = vasprintf(&s, fmt, ap);
    va_end(ap);
    struct curl_slist *n = rc < 0 ? NULL : curl_slist_append(l, s);
    if (s) {
        explicit_bzero(s, strlen(s)); /* it may be the token */
        free(s);
    }
    if (!n) {
        *bad = 1;
        return l;
    }
    return n;
}

/* One attempt.  @return curl's code; r->http the status. */
static CURLcode attempt(cks3_client *c, cks3_req *r, CURL *h, const char *url, uint64_t left_ms)
{
    xfer x = {r, h, c};
    int bad = 0;
    char sha[65];
    struct curl_slist *hd = NULL;
    hex_sha256(r->body ? r->body : "", r->body ? r->body_len : 0, sha);
    hd = add_header(hd, &bad, "x-amz-content-sha256: %s", sha);
    if (c->set.token)
        hd = add_header(hd, &bad, "x-amz-security-token: %s", c->set.token);
    if (r->has_range)
        hd = add_header(hd, &bad, "Range: bytes=%llu-%llu", (unsigned long long)r->off,
                        (unsigned long long)(r->off + r->len - 1));
    if (r->if_match)
        hd = add_header(hd, &bad, "If-Match: %s", r->if_match);
    if (r->body) /* (no "Expect:" to turn 100-continue off: curl would sign it, S3 not see it) */
        hd = add_header(hd, &bad, "Content-Type: application/octet-stream");
    if (bad) {
        curl_slist_free_all(hd);
        return CURLE_OUT_OF_MEMORY;
    }
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_SHARE, c->share);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(left_ms < c->cfg.connect_ms ? left_ms : c->cfg.connect_ms));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)left_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->cfg.stall_s);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, c->sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, c->set.key_id);
    curl_easy_setopt(h, CURLOPT_PASSWORD, c->set.secret);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    /* a server's redirect is an error, never followed (it would take the
     * signed request, and curl the credentials, to another host); no
     * scheme but http and https, whatever a URL or a Location says */
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 0L);
    if (!strcmp(r->method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (r->body) {
        /* from memory: curl hashes the same bytes we declared */
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
        atomic_fetch_add_explicit(&c->bytes_out, r->body_len, memory_order_relaxed);
    } else if (strcmp(r->method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    }
    atomic_fetch_add_explicit(&c->requests, 1, memory_order_relaxed);
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    r->http = code;
    curl_slist_free_all(hd);
    return rc;
}

static int curl_transient(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static int http_transient(long code) { return code == 500 || code == 502 || code == 503 || code == 504 || code == 429; }

/* S3's <Error><Code>..</Code><Message>..</Message></Error>. */
typedef struct {
    char code[128], message[512];
} s3_error;

static int error_field(void *arg, const char *parent, const char *name, const char *text)
{
    s3_error *e = arg;
    if (parent || !text)
        return 0;
    if (!strcmp(name, "Code"))
        printable(e->code, sizeof e->code, text);
    else if (!strcmp(name, "Message"))
        printable(e->message, sizeof e->message, text);
    return 0;
}

/* The status of an HTTP error response, its message in err. */
static cks3_status http_error(cks3_client *c, cks3_req *r, const char *what, char *err, size_t cap)
{
    s3_error e = {{0}, {0}};
    if (r->resp.n)
        cks3_xml_walk(r->resp.p, r->resp.n, NULL, 0, error_field, &e);
    cks3_status st;
    const char *hint = "";
    if (r->http == 412)
        st = CKS3_ERR_CHANGED, hint = " (the object was replaced since it was first read)";
    else if (r->http == 416)
        st = CKS3_ERR_RANGE, hint = " (the object is shorter than it was)";
    else if ((r->http == 401 || r->http == 403) && !strcmp(e.code, "RequestTimeTooSkewed"))
        st = CKS3_ERR_HTTP, hint = " (this machine's clock is off from the server's by more than S3 allows, 15 "
                                   "minutes: set it right, e.g. with chrony or systemd-timesyncd; the credentials "
                                   "are not at fault)";
    else if (r->http == 401 || r->http == 403)
        st = CKS3_ERR_AUTH;
    else if (r->http == 404 && (!strcmp(e.code, "NoSuchBucket")))
        st = CKS3_ERR_NO_BUCKET;
    else if (r->http == 404)
        st = CKS3_ERR_NOT_FOUND;
    else if (r->http / 100 == 5 || r->http == 429)
        st = CKS3_ERR_SERVER;
    else if (r->http / 100 == 3 && r->location[0])
        st = CKS3_ERR_HTTP, hint = " (a redirect, not followed: the endpoint must answer itself; is it the right "
                                   "endpoint and region?)";
    else
        st = CKS3_ERR_HTTP;
    snprintf(err, cap, "s3://%s%s%s: %s: HTTP %ld%s%s%s%s%s%s%s%s%s", r->bucket, r->key ? "/" : "",
             r->key ? r->key : "", what, r->http, e.code[0] ? " " : "", e.code, e.message[0] ? ": " : "", e.message,
             r->location[0] && r->http / 100 == 3 ? " to " : "", r->http / 100 == 3 ? r->location : "", hint,
             st == CKS3_ERR_AUTH ? "; credentials from " : "", st == CKS3_ERR_AUTH ? c->set.source : "");
    return st;
}

void cks3_req_free(cks3_req *r)
{
    free(r->resp.p);
    r->resp.p = NULL;
    r->resp.n = r->resp.cap = 0;
}

static void backoff(unsigned attempt_no, uint64_t deadline, unsigned *seed)
{
    uint64_t cap = BACKOFF_MS << (attempt_no < 10 ? attempt_no : 10);
    if (cap > BACKOFF_MAX_MS)
        cap = BACKOFF_MAX_MS;
    uint64_t wait = cap / 4 + (uint64_t)rand_r(seed) % (cap - cap / 4 + 1); /* jitter over [cap/4, cap] */
    uint64_t now = now_ms();
    if (now + wait > deadline)
        wait = deadline > now ? deadline - now : 0;
    if (wait)
        usleep((useconds_t)(wait * 1000));
}

cks3_status cks3_perform(cks3_client *c, cks3_req *r, const char *what, char *err, size_t cap)
{
    char *url = request_url(c, r);
    CURL *h = url ? handle_get(c) : NULL;
    if (!h) {
        free(url);
        snprintf(err, cap, "out of memory");
        return CKS3_ERR_NOMEM;
    }
    uint64_t start = now_ms(), deadline = start + c->cfg.retry_ms;
    unsigned seed = (unsigned)(start ^ (uintptr_t)r ^ (unsigned)getpid());
    cks3_status st = CKS3_OK;
    unsigned n = 0; /* the attempt: n + 1 made */
    for (;; n++) {
        r->got = 0;
        r->resp.n = 0;
        r->resp.over = 0;
        r->resp.max = r->max_body;
        r->etag[0] = r->content_range[0] = r->location[0] = 0;
        r->has_length = 0;
        r->status = 0;
        r->header_bytes = 0;
        r->bad = NULL;
        uint64_t now = now_ms();
        CURLcode rc = attempt(c, r, h, url, deadline > now + 1 ? deadline - now : 1);
        int again;
        if (rc == CURLE_OK && r->http / 100 == 2) {
            st = CKS3_OK;
            break;
        } else if (rc == CURLE_OK) {
            st = http_error(c, r, what, err, cap);
            again = http_transient(r->http);
        } else if (r->bad) { /* a response refused by on_header / on_body: the server lies */
            st = CKS3_ERR_PROTOCOL;
            snprintf(err, cap, "s3://%s/%s: %s: HTTP %ld: %s (endpoint %s)", r->bucket, r->key ? r->key : "", what,
                     r->status, r->bad, c->set.endpoint);
            again = 0;
        } else if (rc == CURLE_WRITE_ERROR || rc == CURLE_OUT_OF_MEMORY) {
            st = rc == CURLE_OUT_OF_MEMORY || !r->resp.over ? CKS3_ERR_NOMEM : CKS3_ERR_RANGE;
            snprintf(err, cap, "s3://%s/%s: %s: %s", r->bucket, r->key ? r->key : "", what,
                     st == CKS3_ERR_NOMEM ? "out of memory" : "the response is longer than such a response may be");
            again = 0;
        } else {
            again = curl_transient(rc);
            st = again ? CKS3_ERR_NETWORK : CKS3_ERR_PROTOCOL;
            snprintf(err, cap, "s3://%s/%s: %s: %s (endpoint %s)", r->bucket, r->key ? r->key : "", what,
                     curl_easy_strerror(rc), c->set.endpoint);
        }
        if (!again || now_ms() + 10 >= deadline)
            break;
        backoff(n, deadline, &seed);
        if (now_ms() + 10 >= deadline)
            break;
        atomic_fetch_add_explicit(&c->retries, 1, memory_order_relaxed);
    }
    if (st != CKS3_OK && cks3_status_transient(st)) {
        size_t k = strlen(err);
        snprintf(err + k, cap > k ? cap - k : 0, " (%u tr%s in %.1f s, retried for up to s3_timeout=%g s; gave up)",
                 n + 1, n ? "ies" : "y", (double)(now_ms() - start) / 1000.0, c->cfg.retry_ms / 1000.0);
    }
    if (st != CKS3_OK)
        atomic_fetch_add_explicit(&c->failures, 1, memory_order_relaxed);
    handle_put(c, h);
    free(url);
    return st;
}
