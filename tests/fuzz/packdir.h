/*
 * packdir.h — a whole packed directory (manifest + .ckpt files) as one byte
 * string, the input of fuzz_packdir.c, and the structure-aware edits its
 * custom mutator makes to one.  Shared with seedgen, which writes the seeds.
 *
 * Serialized form (all little-endian):
 *   "CKZD"  u8 n (1..CKZ_PD_MAX)  then n times: u16 name_len, name, u32 size, bytes
 * Names are paths relative to the packed directory ("ckptfs.manifest",
 * "a.bin.ckpt", "sub/x.bin.ckpt"); ckz_pd_parse refuses an unsafe one, so a
 * parsed directory can be written anywhere without escaping it.  Bytes after
 * the last entry are ignored.
 */
#ifndef CKZ_PACKDIR_H
#define CKZ_PACKDIR_H

#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include "container.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#define CKZ_PD_MAX 8
#define CKZ_PD_NAME 200

typedef struct {
    char name[CKZ_PD_NAME + 1];
    uint8_t *data; /* malloc'd, size bytes (+1 so that size 0 allocates) */
    size_t size;
} ckz_pd_entry;

typedef struct {
    ckz_pd_entry e[CKZ_PD_MAX];
    int n;
} ckz_pd;

static inline void ckz_pd_free(ckz_pd *d)
{
    for (int i = 0; i < d->n; i++)
        free(d->e[i].data);
    d->n = 0;
}

/* 1 if name stays inside the directory it is written to: relative, no
 * empty, "." or ".." component (any other bytes: names need not be UTF-8). */
static inline int ckz_pd_name_ok(const char *name)
{
    if (*name == '/')
        return 0;
    for (const char *p = name;;) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        if (!p[n])
            return 1;
        p += n + 1;
    }
}

/* @return 0, or -1 (d empty) if in is not a serialized directory. */
static inline int ckz_pd_parse(const uint8_t *in, size_t n, ckz_pd *d)
{
    memset(d, 0, sizeof *d);
    if (n < 5 || memcmp(in, "CKZD", 4) || in[4] == 0 || in[4] > CKZ_PD_MAX)
        return -1;
    size_t at = 5;
    for (int i = 0; i < in[4]; i++) {
        if (n - at < 2)
            goto bad;
        size_t nl = cku_le16(in + at);
        at += 2;
        if (nl == 0 || nl > CKZ_PD_NAME || n - at < nl + 4)
            goto bad;
        ckz_pd_entry *e = &d->e[d->n];
        memcpy(e->name, in + at, nl);
        e->name[nl] = 0;
        at += nl;
        e->size = cku_le32(in + at);
        at += 4;
        if (e->size > n - at || memchr(e->name, 0, nl) || !ckz_pd_name_ok(e->name))
            goto bad;
        if (!(e->data = malloc(e->size + 1)))
            goto bad;
        memcpy(e->data, in + at, e->size);
        at += e->size;
        d->n++;
    }
    return 0;
bad:
    ckz_pd_free(d);
    return -1;
}

/* Serialize into out (capacity cap).  @return the size, or 0 if it does not fit. */
static inline size_t ckz_pd_serialize(const ckz_pd *d, uint8_t *out, size_t cap)
{
    size_t at = 5;
    if (cap < 5)
        return 0;
    memcpy(out, "CKZD", 4);
    out[4] = (uint8_t)d->n;
    for (int i = 0; i < d->n; i++) {
        size_t nl = strlen(d->e[i].name);
        if (cap - at < 6 + nl || cap - at - 6 - nl < d->e[i].size)
            return 0;
        cku_put16(out + at, (uint16_t)nl);
        memcpy(out + at + 2, d->e[i].name, nl);
        cku_put32(out + at + 2 + nl, (uint32_t)d->e[i].size);
        memcpy(out + at + 6 + nl, d->e[i].data, d->e[i].size);
        at += 6 + nl + d->e[i].size;
    }
    return at;
}

/* Write every entry under dir (which exists), making parent directories. */
static inline int ckz_pd_write(const ckz_pd *d, const char *dir)
{
    for (int i = 0; i < d->n; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, d->e[i].name);
        for (char *s = p + strlen(dir) + 1; (s = strchr(s, '/')); s++) {
            *s = 0;
            mkdir(p, 0755); /* EEXIST, or a file of that name: then the open below fails */
            *s = '/';
        }
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            continue; /* a name that is also a directory: the readers see the directory */
        int bad = d->e[i].size && cku_pwrite_full(fd, d->e[i].data, d->e[i].size, 0);
        close(fd);
        if (bad)
            return -1;
    }
    return 0;
}

/* The index of the entry named name, or -1. */
static inline int ckz_pd_find(const ckz_pd *d, const char *name)
{
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->e[i].name, name))
            return i;
    return -1;
}

/* Replace entry i's bytes by a copy of p[0..n). */
static inline int ckz_pd_set(ckz_pd *d, int i, const void *p, size_t n)
{
    uint8_t *q = malloc(n + 1);
    if (!q)
        return -1;
    memcpy(q, p, n);
    free(d->e[i].data);
    d->e[i].data = q;
    d->e[i].size = n;
    return 0;
}

static inline int ckz_pd_add(ckz_pd *d, const char *name, const void *p, size_t n)
{
    if (d->n >= CKZ_PD_MAX || strlen(name) > CKZ_PD_NAME)
        return -1;
    ckz_pd_entry *e = &d->e[d->n];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->data = NULL;
    if (ckz_pd_set(d, d->n, p, n))
        return -1;
    d->n++;
    return 0;
}

/* Rewrite a manifest's first line for its body (format §7).  in/n: the whole
 * manifest; returns a malloc'd manifest in *out, its size in *outSize. */
static inline int ckz_manifest_rehash(const uint8_t *body, size_t n, uint8_t **out, size_t *outSize)
{
    char head[64];
    int hl = snprintf(head, sizeof head, "CKPTFS-MANIFEST 1 %016llx\n", (unsigned long long)ckc_hash64(body, n));
    uint8_t *q = malloc((size_t)hl + n + 1);
    if (!q)
        return -1;
    memcpy(q, head, (size_t)hl);
    memcpy(q + hl, body, n);
    *out = q;
    *outSize = (size_t)hl + n;
    return 0;
}

/* The JSON body of a manifest (after the first newline), or the whole text. */
static inline const uint8_t *ckz_manifest_body(const uint8_t *m, size_t n, size_t *bodySize)
{
    const uint8_t *nl = memchr(m, '\n', n);
    if (!nl) {
        *bodySize = n;
        return m;
    }
    *bodySize = n - (size_t)(nl + 1 - m);
    return nl + 1;
}

#endif
