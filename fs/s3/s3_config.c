/*
 * s3_config.c — endpoint, region and credentials the way AWS tools find
 * them (s3.h), s3:// URLs, and the URI encoding of keys.  Secrets are read
 * into the settings only and wiped by cks3_settings_wipe.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "s3_internal.h"

static cks3_status serr(char *err, size_t cap, cks3_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static cks3_status serr(char *err, size_t cap, cks3_status s, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return s;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* ---- ~/.aws files ------------------------------------------------------- */

typedef struct {
    char *key_id, *secret, *token, *region, *endpoint;
} profile_vals;

static void trim(char *s)
{
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    char *b = s;
    while (isspace((unsigned char)*b))
        b++;
    memmove(s, b, strlen(b) + 1);
}

static void take(char **slot, const char *v)
{
    if (!*slot)
        *slot = strdup(v);
}

/* The values of section `section` of an INI file (the AWS format: "[name]",
 * "key = value", '#' and ';' comments).  @return 1 if the section is there,
 * 0 if not, -1 if the file cannot be read (a missing file is 0). */
static int read_profile(const char *path, const char *section, profile_vals *v)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? 0 : -1;
    char line[4096];
    int in = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        trim(line);
        if (!line[0] || line[0] == '#' || line[0] == ';')
            continue;
        if (line[0] == '[') {
            char *end = strchr(line, ']');
            if (end)
                *end = 0;
            char *name = line + 1;
            trim(name);
            in = strcmp(name, section) == 0;
            found |= in;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!in || !eq)
            continue;
        *eq = 0;
        char *k = line, *val = eq + 1;
        trim(k);
        trim(val);
        if (!strcmp(k, "aws_access_key_id"))
            take(&v->key_id, val);
        else if (!strcmp(k, "aws_secret_access_key"))
            take(&v->secret, val);
        else if (!strcmp(k, "aws_session_token"))
            take(&v->token, val);
        else if (!strcmp(k, "region"))
            take(&v->region, val);
        else if (!strcmp(k, "endpoint_url"))
            take(&v->endpoint, val);
    }
    explicit_bzero(line, sizeof line);
    fclose(f);
    return found;
}

static void profile_wipe(profile_vals *v)
{
    if (v->secret)
        explicit_bzero(v->secret, strlen(v->secret));
    if (v->token)
        explicit_bzero(v->token, strlen(v->token));
    free(v->key_id);
    free(v->secret);
    free(v->token);
    free(v->region);
    free(v->endpoint);
    memset(v, 0, sizeof *v);
}

static char *home_file(const char *envName, const char *rel)
{
    const char *p = env(envName), *home = env("HOME");
    char *s = NULL;
    if (p)
        return strdup(p);
    if (asprintf(&s, "%s/%s", home ? home : "/root", rel) < 0)
        return NULL;
    return s;
}

/* Profile `name` from the credentials file, then the config file.
 * @return 1 found (in either), 0 not, -1 unreadable (*bad names the file). */
static int load_profile(const char *name, profile_vals *v, char **credFile, char **cfgFile, const char **bad)
{
    *credFile = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    *cfgFile = home_file("AWS_CONFIG_FILE", ".aws/config");
    if (!*credFile || !*cfgFile)
        return -1;
    char section[512];
    int a = read_profile(*credFile, name, v);
    if (a < 0) {
        *bad = *credFile;
        return -1;
    }
    if (!strcmp(name, "default"))
        snprintf(section, sizeof section, "default");
    else
        snprintf(section, sizeof section, "profile %s", name);
    int b = read_profile(*cfgFile, section, v);
    if (b < 0) {
        *bad = *cfgFile;
        return -1;
    }
    return a || b;
}

/* ---- resolution ----------------------------------------------------------- */

int cks3_url_has_userinfo(const char *url)
{
    const char *a = strstr(url, "://");
    a = a ? a + 3 : url;
    return memchr(a, '@', strcspn(a, "/?#")) != NULL;
}

/* http:// or https:// (a scheme is case-insensitive: HTTPS:// too) and a
 * host, with no query, fragment, space or control character: they would
 * end up inside every request's URL, and a query in the signature (SigV4
 * refused it as a wrong secret). */
static int endpoint_ok(const char *e)
{
    size_t n = !strncasecmp(e, "http://", 7) ? 7 : !strncasecmp(e, "https://", 8) ? 8 : 0;
    if (!n || !e[n])
        return 0;
    for (const unsigned char *p = (const unsigned char *)e; *p; p++)
        if (*p <= ' ' || *p == 0x7f || *p == '?' || *p == '#')
            return 0;
    return 1;
}

cks3_status cks3_settings_resolve(const cks3_config *cfg, cks3_settings *s, char *err, size_t cap)
{
    memset(s, 0, sizeof *s);
    profile_vals pv = {0};
    char *credFile = NULL, *cfgFile = NULL;
    const char *bad = NULL;
    const char *pname = cfg->profile ? cfg->profile : env("AWS_PROFILE") ? env("AWS_PROFILE") : "default";
    int explicit_profile = cfg->profile != NULL;
    int use_env = !explicit_profile && env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY");
    int found = load_profile(pname, &pv, &credFile, &cfgFile, &bad);
    cks3_status st = CKS3_OK;
    if (found < 0) {
        st = serr(err, cap, CKS3_ERR_CONFIG, "cannot read %s: %s", bad ? bad : "the AWS files",
                  bad ? strerror(errno) : "out of memory");
        goto out;
    }
    if (use_env) {
        s->key_id = strdup(env("AWS_ACCESS_KEY_ID"));
        s->secret = strdup(env("AWS_SECRET_ACCESS_KEY"));
        s->token = env("AWS_SESSION_TOKEN") ? strdup(env("AWS_SESSION_TOKEN")) : NULL;
        snprintf(s->source, sizeof s->source, "the environment (AWS_ACCESS_KEY_ID)");
    } else if (pv.key_id && pv.secret) {
        s->key_id = strdup(pv.key_id);
        s->secret = strdup(pv.secret);
        s->token = pv.token ? strdup(pv.token) : NULL;
        snprintf(s->source, sizeof s->source, "profile %s (%s)", pname, credFile);
    } else if (explicit_profile && !found) {
        st = serr(err, cap, CKS3_ERR_CONFIG, "profile %s is in neither %s nor %s", pname, credFile, cfgFile);
        goto out;
    } else {
        st = serr(err, cap, CKS3_ERR_CONFIG,
                  "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give profile %s "
                  "aws_access_key_id and aws_secret_access_key in %s (or name another with AWS_PROFILE or -o profile=)",
                  pname, credFile);
        goto out;
    }
    const char *region = cfg->region ? cfg->region
                         : env("AWS_REGION") ? env("AWS_REGION")
                         : env("AWS_DEFAULT_REGION") ? env("AWS_DEFAULT_REGION")
                         : pv.region ? pv.region : "us-east-1";
    const char *ep = cfg->endpoint ? cfg->endpoint
                     : env("AWS_ENDPOINT_URL_S3") ? env("AWS_ENDPOINT_URL_S3")
                     : env("AWS_ENDPOINT_URL") ? env("AWS_ENDPOINT_URL") : pv.endpoint;
    s->region = strdup(region);
    if (ep) {
        if (cks3_url_has_userinfo(ep)) {
            st = serr(err, cap, CKS3_ERR_CONFIG, "the endpoint has a user name or password in it: refused (it "
                      "would show in messages); give the credentials as AWS_ACCESS_KEY_ID and "
                      "AWS_SECRET_ACCESS_KEY, or a profile");
            goto out;
        }
        if (!endpoint_ok(ep)) {
            st = serr(err, cap, CKS3_ERR_CONFIG, "endpoint '%s': not an http:// or https:// URL of a server "
                      "(http[s]://HOST[:PORT][/PATH], no query, fragment or space)", ep);
            goto out;
        }
        s->endpoint = strdup(ep);
        for (char *e = s->endpoint ? s->endpoint + strlen(s->endpoint) : NULL; e && e > s->endpoint && e[-1] == '/';)
            *--e = 0;
    } else {
        s->aws = 1;
        if (asprintf(&s->endpoint, "https://s3.%s.amazonaws.com", region) < 0)
            s->endpoint = NULL;
    }
    if (!s->key_id || !s->secret || !s->region || !s->endpoint || (s->token == NULL && use_env && env("AWS_SESSION_TOKEN")))
        st = serr(err, cap, CKS3_ERR_NOMEM, "out of memory");
out:
    profile_wipe(&pv);
    free(credFile);
    free(cfgFile);
    if (st != CKS3_OK)
        cks3_settings_wipe(s);
    return st;
}

void cks3_settings_wipe(cks3_settings *s)
{
    if (s->secret)
        explicit_bzero(s->secret, strlen(s->secret));
    if (s->token)
        explicit_bzero(s->token, strlen(s->token));
    free(s->endpoint);
    free(s->region);
    free(s->key_id);
    free(s->secret);
    free(s->token);
    memset(s, 0, sizeof *s);
}

/* ---- URLs and keys ---------------------------------------------------------- */

int cks3_is_url(const char *s) { return s && !strncmp(s, "s3://", 5); }

/* S3's bucket naming rules, the part a typo breaks: 3-63 of [a-z0-9.-],
 * starting and ending with a letter or digit. */
static const char *bucket_problem(const char *b, size_t n)
{
    if (n < 3 || n > 63)
        return "a bucket name has 3 to 63 characters";
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)b[i]) || isdigit((unsigned char)b[i]) || b[i] == '.' || b[i] == '-'))
            return "a bucket name has only lowercase letters, digits, '.' and '-'";
    if (!isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[n - 1]))
        return "a bucket name starts and ends with a letter or digit";
    return NULL;
}

cks3_status cks3_parse_url(const char *url, char **bucket, char **prefix, char *err, size_t cap)
{
    *bucket = *prefix = NULL;
    if (!cks3_is_url(url))
        return serr(err, cap, CKS3_ERR_ARG, "%s: not an s3:// URL", url);
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t n = slash ? (size_t)(slash - b) : strlen(b);
    const char *why = bucket_problem(b, n);
    if (why)
        return serr(err, cap, CKS3_ERR_ARG, "%s: %s (s3://BUCKET/PREFIX)", url, why);
    const char *p = slash ? slash : "";
    while (*p == '/')
        p++;
    size_t pn = strlen(p);
    while (pn && p[pn - 1] == '/')
        pn--;
    *bucket = strndup(b, n);
    *prefix = strndup(p, pn);
    if (!*bucket || !*prefix) {
        free(*bucket);
        free(*prefix);
        *bucket = *prefix = NULL;
        return serr(err, cap, CKS3_ERR_NOMEM, "out of memory");
    }
    return CKS3_OK;
}

char *cks3_key(const char *prefix, const char *name)
{
    char *k = NULL;
    if (asprintf(&k, "%s%s%s", prefix, *prefix ? "/" : "", name) < 0)
        return NULL;
    return k;
}

char *cks3_uri_encode(const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *o = malloc(3 * n + 1), *w = o;
    if (!o)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/')) {
            *w++ = (char)*p;
        } else {
            *w++ = '%';
            *w++ = hex[*p >> 4];
            *w++ = hex[*p & 15];
        }
    }
    *w = 0;
    return o;
}
