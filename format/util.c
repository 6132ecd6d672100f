/*
 * util.c — I/O helpers of the format library: full reads and writes, durable
 * renames, hex, a thread fan-out, the error-string idiom.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <pthread.h>
#include <signal.h>
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

static long fault_at;   /* CKPTFS_FAULT=step:N or stop:N: N, or 0 for none; set once */
static int fault_stop;  /* stop:N: SIGSTOP instead of _exit */
static atomic_long fault_count;
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

static void fault_init(void)
{
    const char *v = getenv("CKPTFS_FAULT");
    if (v && (!strncmp(v, "step:", 5) || !strncmp(v, "stop:", 5))) {
        fault_at = strtol(v + 5, NULL, 10);
        fault_stop = v[2] == 'o';
    }
}

void cku_fault_point(void)
{
    pthread_once(&fault_once, fault_init);
    if (fault_at > 0 && atomic_fetch_add(&fault_count, 1) + 1 == fault_at) {
        if (fault_stop)
            raise(SIGSTOP);
        else
            _exit(CKU_FAULT_EXIT);
    }
}

int cku_fsync_dir(const char *dir)
{
    cku_fault_point();
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

int cku_utf8_ok(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s++, n, min, cp;
        if (c < 0x80)
            continue;
        if (c >= 0xC2 && c <= 0xDF)
            n = 1, min = 0x80, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 2, min = 0x800, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 3, min = 0x10000, cp = c & 0x07;
        else
            return 0; /* a continuation byte first, or a lead byte never used */
        for (unsigned k = 0; k < n; k++, s++) {
            if ((*s & 0xC0) != 0x80)
                return 0; /* also stops at the NUL */
            cp = cp << 6 | (*s & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    }
    return 1;
}
