/*
 * util.c — I/O, hashing and progress helpers for the fs/ commands.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cku_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            errno = EIO;
            return -1;
        }
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int cku_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int cku_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int cku_mkdirs(const char *path, mode_t mode)
{
    char *p = strdup(path);
    if (!p)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, mode) && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, mode);
    free(p);
    return rc && errno != EEXIST ? -1 : 0;
}

struct cku_sha256 {
    EVP_MD_CTX *ctx;
};

cku_sha256 *cku_sha256_new(void)
{
    cku_sha256 *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    s->ctx = EVP_MD_CTX_new();
    if (!s->ctx || !EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(s->ctx);
        free(s);
        return NULL;
    }
    return s;
}

void cku_sha256_update(cku_sha256 *s, const void *p, size_t n) { EVP_DigestUpdate(s->ctx, p, n); }

void cku_sha256_final(cku_sha256 *s, uint8_t out[32])
{
    unsigned len = 32;
    EVP_DigestFinal_ex(s->ctx, out, &len);
    EVP_MD_CTX_free(s->ctx);
    free(s);
}

#define PIPE_BUFS 3

struct cku_sha256_pipe {
    pthread_mutex_t lock;
    pthread_cond_t cv;           /* a buffer was queued or hashed, or final */
    uint8_t *buf[PIPE_BUFS];
    size_t len[PIPE_BUFS];
    unsigned head, queued;       /* buffers head .. head+queued-1 wait for the hasher (by lock) */
    int done;                    /* final was called (by lock) */
    int threaded;
    pthread_t th;
    cku_sha256 *sha;
};

static void *pipe_main(void *arg)
{
    cku_sha256_pipe *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->queued && !p->done)
            pthread_cond_wait(&p->cv, &p->lock);
        if (!p->queued)
            break;
        unsigned i = p->head;
        pthread_mutex_unlock(&p->lock);
        cku_sha256_update(p->sha, p->buf[i], p->len[i]);
        pthread_mutex_lock(&p->lock);
        p->head = (i + 1) % PIPE_BUFS;
        p->queued--;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

cku_sha256_pipe *cku_sha256_pipe_new(size_t bufSize)
{
    cku_sha256_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->sha = cku_sha256_new();
    int ok = p->sha != NULL;
    for (int i = 0; i < PIPE_BUFS; i++)
        ok = ok && (p->buf[i] = malloc(bufSize ? bufSize : 1)) != NULL;
    if (!ok) {
        for (int i = 0; i < PIPE_BUFS; i++)
            free(p->buf[i]);
        if (p->sha) {
            uint8_t d[32];
            cku_sha256_final(p->sha, d);
        }
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threaded = pthread_create(&p->th, NULL, pipe_main, p) == 0; /* else: hashed on submit */
    return p;
}

uint8_t *cku_sha256_pipe_buffer(cku_sha256_pipe *p)
{
    pthread_mutex_lock(&p->lock);
    while (p->queued == PIPE_BUFS)
        pthread_cond_wait(&p->cv, &p->lock);
    uint8_t *b = p->buf[(p->head + p->queued) % PIPE_BUFS];
    pthread_mutex_unlock(&p->lock);
    return b;
}

void cku_sha256_pipe_submit(cku_sha256_pipe *p, size_t len)
{
    pthread_mutex_lock(&p->lock);
    unsigned i = (p->head + p->queued) % PIPE_BUFS;
    p->len[i] = len;
    if (p->threaded) {
        p->queued++;
        pthread_cond_broadcast(&p->cv);
    } else {
        cku_sha256_update(p->sha, p->buf[i], len);
        p->head = (i + 1) % PIPE_BUFS;
    }
    pthread_mutex_unlock(&p->lock);
}

void cku_sha256_pipe_final(cku_sha256_pipe *p, uint8_t out[32])
{
    if (p->threaded) {
        pthread_mutex_lock(&p->lock);
        p->done = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->th, NULL);
    }
    cku_sha256_final(p->sha, out);
    for (int i = 0; i < PIPE_BUFS; i++)
        free(p->buf[i]);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void cku_hex(const uint8_t *p, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[p[i] >> 4];
        out[2 * i + 1] = d[p[i] & 15];
    }
    out[2 * n] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int cku_unhex(const char *s, uint8_t *out, size_t n)
{
    if (strlen(s) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int a = hexval(s[2 * i]), b = hexval(s[2 * i + 1]);
        if (a < 0 || b < 0)
            return -1;
        out[i] = (uint8_t)(a << 4 | b);
    }
    return 0;
}

double cku_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct cku_progress {
    pthread_mutex_t lock; /* protects done and last */
    const char *what;
    uint64_t total, done;
    double start, last;
    int tty;
};

cku_progress *cku_progress_new(const char *what, uint64_t total)
{
    cku_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->what = what;
    p->total = total;
    p->start = p->last = cku_now();
    p->tty = isatty(STDERR_FILENO);
    return p;
}

static void progress_print(cku_progress *p, double now, int final)
{
    double el = now - p->start, rate = el > 0 ? p->done / el : 0;
    double eta = rate > 0 && p->total > p->done ? (p->total - p->done) / rate : 0;
    int width = 30, fill = p->total ? (int)(width * (double)p->done / p->total) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r%s [%s] %.2f/%.2f GB  %.0f MB/s  ETA %02d:%02d%s", p->what, bar, p->done / 1e9,
            p->total / 1e9, rate / 1e6, (int)eta / 60, (int)eta % 60, final ? "\n" : " ");
}

void cku_progress_add(cku_progress *p, uint64_t bytes)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->done += bytes;
    double now = cku_now();
    if (p->tty && now - p->last > 0.2) {
        p->last = now;
        progress_print(p, now, 0);
    }
    pthread_mutex_unlock(&p->lock);
}

void cku_progress_done(cku_progress *p)
{
    if (!p)
        return;
    if (p->tty)
        progress_print(p, cku_now(), 1);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

int cku_errf(char *err, size_t cap, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void cku_run_threads(int n, void *(*fn)(void *), void *arg)
{
    pthread_t th[64];
    int started = 0;
    if (n > 64)
        n = 64;
    for (; started < n - 1; started++)
        if (pthread_create(&th[started], NULL, fn, arg))
            break;
    fn(arg);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}
