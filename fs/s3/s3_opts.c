/*
 * s3_opts.c — the -o options of the S3 connection (s3.h, cks3_opts): one
 * parser for `ckptfs mount` and for pack, verify, stat and unpack of s3://.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3_internal.h"

#define MAX_TIMEOUT_S 3600

/* val into dst (cap bytes): 0, or -1 if empty or too long. */
static int copy(char *dst, size_t cap, const char *val)
{
    if (!val || !*val || strlen(val) >= cap)
        return -1;
    memcpy(dst, val, strlen(val) + 1);
    return 0;
}

int cks3_opts_take(cks3_opts *o, const char *key, size_t klen, const char *val, char *err, size_t cap)
{
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(key, k, klen) == 0)
    if (KEY("endpoint")) {
        if (val && cks3_url_has_userinfo(val)) {
            snprintf(err, cap, "a user name or password in the endpoint is refused (a command line shows in ps): "
                               "give the credentials as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile");
            return -1;
        }
        if (copy(o->endpoint, sizeof o->endpoint, val) == 0)
            return 1;
        snprintf(err, cap, "a URL expected (endpoint=http://HOST:PORT or https://HOST)");
        return -1;
    }
    if (KEY("region") || KEY("profile")) {
        int r = KEY("region") ? copy(o->region, sizeof o->region, val) : copy(o->profile, sizeof o->profile, val);
        if (r == 0)
            return 1;
        snprintf(err, cap, "a name expected (region=us-east-1, profile=NAME)");
        return -1;
    }
    if (KEY("s3_timeout")) {
        char *end;
        errno = 0;
        unsigned long s = val && *val >= '0' && *val <= '9' ? strtoul(val, &end, 10) : 0;
        if (s >= 1 && s <= MAX_TIMEOUT_S && !errno && !*end) {
            o->timeout_ms = (unsigned)s * 1000u;
            return 1;
        }
        snprintf(err, cap, "a whole number of seconds from 1 to %d expected", MAX_TIMEOUT_S);
        return -1;
    }
#undef KEY
    return 0;
}

void cks3_opts_apply(const cks3_opts *o, cks3_config *cfg)
{
    if (o->endpoint[0])
        cfg->endpoint = o->endpoint;
    if (o->region[0])
        cfg->region = o->region;
    if (o->profile[0])
        cfg->profile = o->profile;
    if (o->timeout_ms)
        cfg->retry_ms = o->timeout_ms;
}
