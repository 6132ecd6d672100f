/*
 * disk_cache.c — the local disk cache of fetched packed ranges
 * (disk_cache.h): entries written once and renamed into place, checked at
 * every use, evicted least recently used.
 *
 * An entry file (native byte order; one of another order fails its check):
 *   0  "CKDCENT1"   8  off u64   16  len u64   24  block u32 (64 KiB)
 *   28 nblocks u32  32 idLen u32 36  0 u32     40  XXH3-64 of the header
 *   (this field taken as 0)      48  id: bucket NUL key NUL etag NUL
 *   then nblocks XXH3-64 (one per block of the bytes), then len bytes.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "disk_cache.h"
#include "util.h"

#define MAGIC "CKDCENT1"
#define HDR_FIXED 48u
#define BLOCK (64u << 10)
#define LAYOUT "v1"                 /* DIR/v1: entries of this layout */
#define TMP_DIR "tmp"
#define NAME_LEN 33                 /* %016llx-%016llx */
#define TMP_MAX_AGE_S 3600          /* a temporary file this old is a dead writer's */
#define DU(bytes) (((bytes) + 4095u) & ~(uint64_t)4095u)

struct ckdc {
    int fd;                         /* DIR/v1 */
    uint64_t limit;
    int opening;                    /* the scan at open: no temporary file is ours yet */
    pthread_mutex_t lock;
    uint64_t used;                  /* by lock: bytes on disk at the last scan + reserved since */
    uint64_t since;                 /* by lock: reserved since the last scan */
    atomic_uint seq;                /* temporary names */
    _Atomic uint64_t hits, hit_bytes, miss_bytes, stored, stored_bytes, bad, evicted, evicted_bytes, write_errors;
};

typedef struct {
    uint64_t off, len;
} span;

struct ckdc_obj {
    ckdc *dc;
    char *id;                       /* bucket NUL key NUL etag NUL */
    uint32_t id_len;
    char dir[33];                   /* XXH3-128 of id, hex */
    uint64_t size;                  /* of the object: no entry reaches past it */
    pthread_mutex_t lock;
    int loaded;                     /* by lock: the directory was listed */
    span *e;                        /* by lock: entries believed there, by off */
    size_t n, cap;
};

/* ---- the index of one object's entries ---------------------------------- */

static void entry_name(char *out, size_t cap, const char *dir, uint64_t off, uint64_t len)
{
    snprintf(out, cap, "%s/%016llx-%016llx", dir, (unsigned long long)off, (unsigned long long)len);
}

static int add_span(ckdc_obj *o, uint64_t off, uint64_t len)
{
    size_t i = 0;
    while (i < o->n && (o->e[i].off < off || (o->e[i].off == off && o->e[i].len < len)))
        i++;
    if (i < o->n && o->e[i].off == off && o->e[i].len == len)
        return 0;
    span *e = cku_grow(o->e, &o->cap, o->n, sizeof *e, 16);
    if (!e)
        return -1;
    o->e = e;
    memmove(o->e + i + 1, o->e + i, (o->n - i) * sizeof *o->e);
    o->e[i] = (span){off, len};
    o->n++;
    return 0;
}

static void drop_span(ckdc_obj *o, span s)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->e[i].off == s.off && o->e[i].len == s.len) {
            memmove(o->e + i, o->e + i + 1, (o->n - i - 1) * sizeof *o->e);
            o->n--;
            return;
        }
}

/* By o->lock: list DIR/v1/OBJ once (other daemons' entries too). */
static void load_index(ckdc_obj *o)
{
    if (o->loaded)
        return;
    o->loaded = 1;
    int fd = openat(o->dc->fd, o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    for (struct dirent *de; (de = readdir(d));) {
        unsigned long long off, len;
        int end = 0;
        if (strlen(de->d_name) == NAME_LEN && sscanf(de->d_name, "%16llx-%16llx%n", &off, &len, &end) == 2 &&
            end == NAME_LEN && len > 0 && off <= o->size && len <= o->size - off)
            add_span(o, off, len);
    }
    closedir(d);
}

/* By o->lock: the entry holding byte pos that reaches furthest (1), or
 * none (0) with *next the first entry's start past pos (UINT64_MAX: none). */
static int find_span(const ckdc_obj *o, uint64_t pos, span *out, uint64_t *next)
{
    int found = 0;
    *next = UINT64_MAX;
    for (size_t i = 0; i < o->n && o->e[i].off <= pos; i++)
        if (pos < o->e[i].off + o->e[i].len && (!found || o->e[i].off + o->e[i].len > out->off + out->len)) {
            *out = o->e[i];
            found = 1;
        }
    for (size_t i = 0; !found && i < o->n; i++)
        if (o->e[i].off > pos) {
            *next = o->e[i].off;
            break;
        }
    return found;
}

/* ---- one entry ---------------------------------------------------------- */

static uint32_t n_blocks(uint64_t len) { return (uint32_t)((len + BLOCK - 1) / BLOCK); }

static uint64_t header_hash(unsigned char *h, size_t hsize)
{
    unsigned char saved[8];
    memcpy(saved, h + 40, 8);
    memset(h + 40, 0, 8);
    uint64_t v = XXH3_64bits(h, hsize);
    memcpy(h + 40, saved, 8);
    return v;
}

static int read_full(int fd, void *buf, size_t len, uint64_t off)
{
    for (size_t done = 0; done < len;) {
        ssize_t r = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* Check entry s's header and the blocks holding [pos, pos+n), and copy
 * those bytes to dst.  @return 0, -1 the file is not there (or cannot be
 * read now), 1 it fails a check. */
static int use_entry(ckdc_obj *o, span s, void *dst, size_t n, uint64_t pos)
{
    char name[128];
    entry_name(name, sizeof name, o->dir, s.off, s.len);
    int fd = openat(o->dc->fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) /* gone (evicted), or cannot be opened now; a link planted there is bad */
        return errno == ELOOP ? 1 : -1;
    uint32_t nb = n_blocks(s.len);
    size_t hsize = HDR_FIXED + o->id_len + 8u * nb;
    unsigned char *h = malloc(hsize);
    uint64_t b0 = (pos - s.off) / BLOCK, b1 = (pos + n - 1 - s.off) / BLOCK;
    uint64_t from = b0 * BLOCK, to = (b1 + 1) * BLOCK < s.len ? (b1 + 1) * BLOCK : s.len;
    unsigned char *buf = malloc(to - from);
    struct stat st;
    int rc = 1;
    if (!h || !buf) {
        rc = -1;
        goto out;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != hsize + s.len ||
        read_full(fd, h, hsize, 0) != 0)
        goto out;
    uint64_t off, len, hh;
    uint32_t block, nbl, idl;
    memcpy(&off, h + 8, 8);
    memcpy(&len, h + 16, 8);
    memcpy(&block, h + 24, 4);
    memcpy(&nbl, h + 28, 4);
    memcpy(&idl, h + 32, 4);
    memcpy(&hh, h + 40, 8);
    if (memcmp(h, MAGIC, 8) || off != s.off || len != s.len || block != BLOCK || nbl != nb || idl != o->id_len ||
        memcmp(h + HDR_FIXED, o->id, o->id_len) || hh != header_hash(h, hsize))
        goto out;
    if (read_full(fd, buf, to - from, hsize + from) != 0)
        goto out;
    for (uint64_t b = b0; b <= b1; b++) {
        uint64_t want, at = b * BLOCK, blen = at + BLOCK < s.len ? BLOCK : s.len - at;
        memcpy(&want, h + HDR_FIXED + o->id_len + 8 * b, 8);
        if (XXH3_64bits(buf + (at - from), blen) != want)
            goto out;
    }
    memcpy(dst, buf + (pos - s.off - from), n);
    futimens(fd, NULL); /* used now: the last to be evicted */
    rc = 0;
out:
    free(h);
    free(buf);
    close(fd);
    return rc;
}

/* ---- space -------------------------------------------------------------- */

typedef struct {
    struct timespec mtime;
    uint64_t du;
    char name[sizeof "0123456789abcdef0123456789abcdef/" + NAME_LEN];
} victim;

static int by_mtime(const void *a, const void *b)
{
    const struct timespec *x = &((const victim *)a)->mtime, *y = &((const victim *)b)->mtime;
    return x->tv_sec != y->tv_sec ? (x->tv_sec < y->tv_sec ? -1 : 1)
                                  : (x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec);
}

static uint64_t du_of(const struct stat *st) { return (uint64_t)st->st_blocks * 512u; }

/* A temporary file PID.N of a daemon that is gone (or one this old, or
 * one of this PID found at open: a daemon killed before had it). */
static int dead_tmp(const ckdc *dc, const char *name, const struct stat *st)
{
    long pid = strtol(name, NULL, 10);
    if (pid <= 0 || time(NULL) - st->st_mtime > TMP_MAX_AGE_S || (dc->opening && pid == (long)getpid()))
        return 1;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Sum one directory of DIR/v1 (its entries as eviction candidates, or, for
 * tmp, the live temporary files; dead ones are removed). */
static uint64_t scan_dir(ckdc *dc, const char *dname, victim **v, size_t *n, size_t *cap)
{
    int fd = openat(dc->fd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    struct stat st;
    uint64_t sum = fstat(dirfd(d), &st) == 0 ? du_of(&st) : 0;
    int tmp = !strcmp(dname, TMP_DIR);
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (tmp && dead_tmp(dc, de->d_name, &st)) {
            unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        sum += du_of(&st);
        if (tmp || strlen(de->d_name) != NAME_LEN)
            continue;
        victim *nv = cku_grow(*v, cap, *n, sizeof *nv, 256);
        if (!nv)
            continue;   /* not a candidate; still counted */
        *v = nv;
        victim *x = &(*v)[(*n)++];
        x->mtime = st.st_mtim;
        x->du = du_of(&st);
        snprintf(x->name, sizeof x->name, "%s/%s", dname, de->d_name);
    }
    closedir(d);
    return sum;
}

/* By dc->lock: measure the cache; when it and pending bytes exceed the
 * limit, delete the least recently used entries down to 15/16 of it. */
static void scan_evict(ckdc *dc, uint64_t pending)
{
    victim *v = NULL;
    size_t n = 0, cap = 0;
    struct stat st;
    uint64_t total = fstat(dc->fd, &st) == 0 ? du_of(&st) : 0;
    int fd = openat(dc->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] != '.')
            total += scan_dir(dc, de->d_name, &v, &n, &cap);
    if (d)
        closedir(d);
    else if (fd >= 0)
        close(fd);
    if (total + pending > dc->limit) {
        uint64_t target = dc->limit - dc->limit / 16;
        qsort(v, n, sizeof *v, by_mtime);
        for (size_t i = 0; i < n && total + pending > target; i++) {
            if (unlinkat(dc->fd, v[i].name, 0) != 0)
                continue;
            total -= v[i].du < total ? v[i].du : total;
            atomic_fetch_add(&dc->evicted, 1);
            atomic_fetch_add(&dc->evicted_bytes, v[i].du);
            char *slash = strchr(v[i].name, '/');
            *slash = 0;
            if (unlinkat(dc->fd, v[i].name, AT_REMOVEDIR) == 0) /* its last entry: the directory goes too */
                total -= 4096u < total ? 4096u : total;
        }
    }
    free(v);
    dc->used = total + pending;
    dc->since = 0;
}

static void reserve(ckdc *dc, uint64_t bytes)
{
    pthread_mutex_lock(&dc->lock);
    dc->since += bytes;
    if (dc->used + bytes > dc->limit || dc->since > dc->limit / 16)
        scan_evict(dc, bytes);
    else
        dc->used += bytes;
    pthread_mutex_unlock(&dc->lock);
}

static int write_full(int fd, const void *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t w = write(fd, (const char *)buf + done, len - done);
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

/* Write [off, off+len) = data as an entry (best effort). */
static void store(ckdc_obj *o, const void *data, size_t len, uint64_t off)
{
    ckdc *dc = o->dc;
    uint32_t nb = n_blocks(len);
    size_t hsize = HDR_FIXED + o->id_len + 8u * nb;
    if (DU(hsize + len) > dc->limit / 4) /* one entry never crowds out the rest */
        return;
    unsigned char *h = calloc(1, hsize);
    if (!h) {
        atomic_fetch_add(&dc->write_errors, 1);
        return;
    }
    uint32_t block = BLOCK, idl = o->id_len;
    uint64_t len64 = len;
    memcpy(h, MAGIC, 8);
    memcpy(h + 8, &off, 8);
    memcpy(h + 16, &len64, 8);
    memcpy(h + 24, &block, 4);
    memcpy(h + 28, &nb, 4);
    memcpy(h + 32, &idl, 4);
    memcpy(h + HDR_FIXED, o->id, o->id_len);
    for (uint32_t b = 0; b < nb; b++) {
        uint64_t at = (uint64_t)b * BLOCK, x = XXH3_64bits((const char *)data + at, at + BLOCK < len ? BLOCK : len - at);
        memcpy(h + HDR_FIXED + o->id_len + 8u * b, &x, 8);
    }
    uint64_t hh = header_hash(h, hsize);
    memcpy(h + 40, &hh, 8);
    reserve(dc, DU(hsize + len));
    char tmp[64], name[128];
    snprintf(tmp, sizeof tmp, TMP_DIR "/%ld.%u", (long)getpid(), atomic_fetch_add(&dc->seq, 1));
    entry_name(name, sizeof name, o->dir, off, len);
    int fd = openat(dc->fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write_full(fd, h, hsize) == 0 && write_full(fd, data, len) == 0;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    free(h);
    if (ok && renameat(dc->fd, tmp, dc->fd, name) != 0) {
        /* its directory is new, or was just evicted empty */
        ok = errno == ENOENT && (mkdirat(dc->fd, o->dir, 0700) == 0 || errno == EEXIST) &&
             renameat(dc->fd, tmp, dc->fd, name) == 0;
    }
    if (!ok) {
        if (fd >= 0)
            unlinkat(dc->fd, tmp, 0);
        atomic_fetch_add(&dc->write_errors, 1);
        return;
    }
    atomic_fetch_add(&dc->stored, 1);
    atomic_fetch_add(&dc->stored_bytes, len);
    pthread_mutex_lock(&o->lock);
    add_span(o, off, len);
    pthread_mutex_unlock(&o->lock);
}

/* Delete entry s of o (a file that is gone already is fine). */
static void delete_entry(ckdc_obj *o, span s)
{
    char name[128];
    entry_name(name, sizeof name, o->dir, s.off, s.len);
    if (unlinkat(o->dc->fd, name, 0) == 0) /* never trusted again */
        atomic_fetch_add(&o->dc->bad, 1);
}

/* ---- the interface ------------------------------------------------------ */

int ckdc_read(ckdc_obj *o, void *dst, size_t len, uint64_t off, ckdc_fetch_fn fetch, void *arg)
{
    ckdc *dc = o->dc;
    uint64_t pos = off, end = off + len;
    while (pos < end) {
        span s = {0, 0};
        uint64_t next;
        pthread_mutex_lock(&o->lock);
        load_index(o);
        int found = find_span(o, pos, &s, &next);
        pthread_mutex_unlock(&o->lock);
        if (found) {
            uint64_t n = (s.off + s.len < end ? s.off + s.len : end) - pos;
            int rc = use_entry(o, s, (char *)dst + (pos - off), n, pos);
            if (rc == 0) {
                atomic_fetch_add(&dc->hits, 1);
                atomic_fetch_add(&dc->hit_bytes, n);
                pos += n;
                continue;
            }
            if (rc > 0)
                delete_entry(o, s);
            pthread_mutex_lock(&o->lock);
            drop_span(o, s);
            pthread_mutex_unlock(&o->lock);
            continue;
        }
        uint64_t gap = (next < end ? next : end) - pos;
        int rc = fetch(arg, (char *)dst + (pos - off), gap, pos);
        if (rc)
            return rc;
        atomic_fetch_add(&dc->miss_bytes, gap);
        store(o, (char *)dst + (pos - off), gap, pos);
        pos += gap;
    }
    return 0;
}

void ckdc_drop(ckdc_obj *o, uint64_t off, uint64_t len)
{
    pthread_mutex_lock(&o->lock);
    load_index(o);
    for (size_t i = 0; i < o->n;) {
        span s = o->e[i];
        if (s.off < off + len && off < s.off + s.len) {
            delete_entry(o, s);
            drop_span(o, s); /* o->e[i] is the next one now */
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&o->lock);
}

ckdc_obj *ckdc_obj_new(ckdc *dc, const char *bucket, const char *key, const char *etag, uint64_t size)
{
    ckdc_obj *o = calloc(1, sizeof *o);
    size_t lb = strlen(bucket) + 1, lk = strlen(key) + 1, le = strlen(etag) + 1;
    if (!o || !(o->id = malloc(lb + lk + le))) {
        free(o);
        return NULL;
    }
    memcpy(o->id, bucket, lb);
    memcpy(o->id + lb, key, lk);
    memcpy(o->id + lb + lk, etag, le);
    o->id_len = (uint32_t)(lb + lk + le);
    XXH128_hash_t h = XXH3_128bits(o->id, o->id_len);
    snprintf(o->dir, sizeof o->dir, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
    o->dc = dc;
    o->size = size;
    pthread_mutex_init(&o->lock, NULL);
    return o;
}

void ckdc_obj_free(ckdc_obj *o)
{
    if (!o)
        return;
    pthread_mutex_destroy(&o->lock);
    free(o->e);
    free(o->id);
    free(o);
}

cks3_status ckdc_open(const char *dir, uint64_t limit, ckdc **out, char *err, size_t cap)
{
    *out = NULL;
    if (limit < (1u << 20)) {
        snprintf(err, cap, "cache_dir_size: at least 1 MiB");
        return CKS3_ERR_ARG;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, cap, "cache_dir %s: cannot make it: %s", dir, strerror(errno));
        return CKS3_ERR_ARG;
    }
    int top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (top < 0) {
        snprintf(err, cap, "cache_dir %s: %s", dir, strerror(errno));
        return CKS3_ERR_ARG;
    }
    struct stat st;
    if (fstat(top, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
        /* entries are trusted by their checks, but what another user could
         * put there (links, directories) must not steer our renames and
         * deletes */
        snprintf(err, cap, "cache_dir %s: must be a directory of this user (uid %ld) that no one else may write",
                 dir, (long)geteuid());
        close(top);
        return CKS3_ERR_ARG;
    }
    int fd = -1;
    if ((mkdirat(top, LAYOUT, 0700) != 0 && errno != EEXIST) ||
        (fd = openat(top, LAYOUT, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
        (mkdirat(fd, TMP_DIR, 0700) != 0 && errno != EEXIST) || faccessat(fd, TMP_DIR, W_OK, AT_EACCESS) != 0) {
        snprintf(err, cap, "cache_dir %s: cannot write there: %s", dir, strerror(errno));
        close(top);
        if (fd >= 0)
            close(fd);
        return CKS3_ERR_ARG;
    }
    close(top);
    ckdc *dc = calloc(1, sizeof *dc);
    if (!dc) {
        close(fd);
        snprintf(err, cap, "cache_dir %s: out of memory", dir);
        return CKS3_ERR_NOMEM;
    }
    dc->fd = fd;
    dc->limit = limit;
    pthread_mutex_init(&dc->lock, NULL);
    pthread_mutex_lock(&dc->lock);
    dc->opening = 1;
    scan_evict(dc, 0);
    dc->opening = 0;
    pthread_mutex_unlock(&dc->lock);
    *out = dc;
    return CKS3_OK;
}

void ckdc_close(ckdc *dc)
{
    if (!dc)
        return;
    close(dc->fd);
    pthread_mutex_destroy(&dc->lock);
    free(dc);
}

void ckdc_get_stats(ckdc *dc, ckdc_stats *st)
{
    st->hits = atomic_load(&dc->hits);
    st->hit_bytes = atomic_load(&dc->hit_bytes);
    st->miss_bytes = atomic_load(&dc->miss_bytes);
    st->stored = atomic_load(&dc->stored);
    st->stored_bytes = atomic_load(&dc->stored_bytes);
    st->bad = atomic_load(&dc->bad);
    st->evicted = atomic_load(&dc->evicted);
    st->evicted_bytes = atomic_load(&dc->evicted_bytes);
    st->write_errors = atomic_load(&dc->write_errors);
    pthread_mutex_lock(&dc->lock);
    st->used = dc->used;
    pthread_mutex_unlock(&dc->lock);
}
