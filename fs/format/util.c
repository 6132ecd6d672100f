/*
 * util.c — I/O helpers of the format library: full reads and writes, durable
 * renames, hex, a thread fan-out, the one error formatter (cku_errf).
 */
#define _GNU_SOURCE /* O_PATH */
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
#include <sys/syscall.h>
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
static int fault_stop;  /* stop:N: SIGSTOP instead of the exit */
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
        else /* a kill: the exit_group system call itself, not _exit, whose
              * sanitizer interceptors finish the run (TSan: threads the
              * kill left unjoined reported as leaks, exit status 66) */
            syscall(SYS_exit_group, CKU_FAULT_EXIT), _exit(CKU_FAULT_EXIT);
    }
}

static int fsync_dir(const char *dir)
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

int cku_fsync_dir(const char *dir)
{
    cku_fault_point();
    return fsync_dir(dir);
}

int cku_path_up(char *p, size_t cap)
{
    char *slash = strrchr(p, '/');
    if (!slash) {
        if (!strcmp(p, "."))
            return 0;
        snprintf(p, cap, ".");
    } else if (slash == p) {
        if (!p[1])
            return 0;
        p[1] = 0;
    } else {
        *slash = 0;
    }
    return 1;
}

int cku_path_within(const char *path, const char *dir)
{
    struct stat d, st;
    if (stat(dir, &d) != 0)
        return -1;
    char p[4096];
    snprintf(p, sizeof p, "%s", *path ? path : ".");
    int fd;
    /* the nearest part of path that exists, as a directory */
    while ((fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
        if (!cku_path_up(p, sizeof p))
            return 0;
    int in = 0;
    while (!in && fstat(fd, &st) == 0) {
        in = st.st_dev == d.st_dev && st.st_ino == d.st_ino;
        int up = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        struct stat ust;
        int top = up < 0 || fstat(up, &ust) != 0 || (ust.st_dev == st.st_dev && ust.st_ino == st.st_ino);
        close(fd);
        fd = up;
        if (top)
            break;
    }
    if (fd >= 0)
        close(fd);
    return in;
}

int cku_sync_dirs(const char *dir, int up)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (int first = 1;; first = 0) {
        /* above dir, one that cannot be opened (0711, say) or synced there
         * (EINVAL, EROFS) is skipped: only an I/O error counts */
        if (fsync_dir(*p ? p : "/") && (first || errno == EIO))
            return -1;
        char *slash = strrchr(p, '/');
        if (!up || !*p || !slash)
            return 0;
        *slash = 0; /* "/a" -> "" (the root), "a" has no parent here */
    }
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

void *cku_grow(void *arr, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return arr;
    if (!size || !first) {
        errno = EINVAL;
        return NULL;
    }
    if (*cap > SIZE_MAX / 2 || (*cap ? 2 * *cap : first) > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    size_t c = *cap ? 2 * *cap : first;
    void *grown = realloc(arr, c * size);
    if (grown)
        *cap = c;
    return grown;
}

double cku_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The message of cku_errf / cku_errf_at: "NAME: " (name escaped) if name is
 * given, then fmt. */
static void verrf(char *err, size_t cap, const char *name, const char *fmt, va_list ap)
{
    if (!err || !cap)
        return;
    size_t n = 0;
    if (name) {
        cku_escape(name, err, cap);
        n = strlen(err);
        n += (size_t)snprintf(err + n, cap - n, ": ");
    }
    if (n < cap)
        vsnprintf(err + n, cap - n, fmt, ap);
}

int cku_errf(char *err, size_t cap, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrf(err, cap, NULL, fmt, ap);
    va_end(ap);
    return status;
}

int cku_errf_at(char *err, size_t cap, int status, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrf(err, cap, name, fmt, ap);
    va_end(ap);
    return status;
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

/* Length of the well-formed UTF-8 sequence (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF) at s, of at most avail bytes; 0 if the
 * bytes there are not one.  *cp gets its code point. */
static size_t utf8_seq(const unsigned char *s, size_t avail, unsigned *cp)
{
    unsigned c = s[0], n, min;
    if (c < 0x80)
        return *cp = c, 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 1, min = 0x80, *cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 2, min = 0x800, *cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 3, min = 0x10000, *cp = c & 0x07;
    else
        return 0; /* a continuation byte first, or a lead byte never used */
    if (avail < n + 1)
        return 0;
    for (unsigned k = 1; k <= n; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        *cp = *cp << 6 | (s[k] & 0x3F);
    }
    if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF))
        return 0;
    return n + 1;
}

int cku_utf8_ok(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    unsigned cp;
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = utf8_seq(s + i, n - i, &cp)))
            return 0;
    return 1;
}

/* Code points a terminal acts on instead of showing: C0, DEL, C1, and the
 * bidirectional formatting characters that reorder what follows them. */
static int unprintable(unsigned cp)
{
    return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
           (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

const char *cku_escape(const char *str, char *out, size_t cap)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str), o = 0;
    for (size_t i = 0, k; i < n; i += k) {
        char piece[16];
        unsigned cp;
        k = utf8_seq(s + i, n - i, &cp);
        if (!k)
            k = 1, snprintf(piece, sizeof piece, "\\x%02x", s[i]);
        else if (cp == '\\' || cp == '"')
            snprintf(piece, sizeof piece, "\\%c", cp);
        else if (cp == '\n' || cp == '\t' || cp == '\r')
            snprintf(piece, sizeof piece, "\\%c", cp == '\n' ? 'n' : cp == '\t' ? 't' : 'r');
        else if (unprintable(cp))
            snprintf(piece, sizeof piece, cp < 0x80 ? "\\x%02x" : "\\u%04x", cp);
        else
            snprintf(piece, sizeof piece, "%.*s", (int)k, str + i);
        size_t len = strlen(piece);
        if (o + len + 4 > cap) { /* room for "..." and the NUL */
            snprintf(out + o, cap - o, "%s", cap - o >= 4 ? "..." : "");
            return out;
        }
        memcpy(out + o, piece, len);
        o += len;
    }
    out[o] = 0;
    return out;
}

/* The string starting at json[*i] (a '"'): *i moves past it, or to the
 * offending byte. */
static const char *lex_string(const unsigned char *s, size_t n, size_t *i)
{
    unsigned cp;
    for (++*i; *i < n; ) {
        size_t k = *i;
        if (s[k] == '"') {
            *i = k + 1;
            return NULL;
        }
        if (s[k] == '\\' && k + 5 < n && s[k + 1] == 'u' && !memcmp(s + k + 2, "0000", 4))
            return "a \\u0000 (NUL) escape in a string";
        if (s[k] < 0x20)
            return "a raw control character in a string";
        size_t len = s[k] == '\\' ? 2 : utf8_seq(s + k, n - k, &cp);
        if (!len)
            return "bytes that are not UTF-8";
        *i = k + len;
    }
    return NULL; /* unterminated: the JSON parser says so */
}

/* The number starting at json[*i]: *i moves past it. */
static const char *lex_uint(const unsigned char *s, size_t n, size_t *i)
{
    size_t k = *i, digits = 0;
    uint64_t v = 0;
    for (; k < n && s[k] && strchr("0123456789+-.eE", s[k]); k++)
        if (s[k] >= '0' && s[k] <= '9' && v <= (1ull << 53))
            v = v * 10 + (s[k] - '0'), digits++;
        else
            digits = 0, v = UINT64_MAX; /* a sign, fraction or exponent */
    int bad = digits != k - *i || (digits > 1 && s[*i] == '0') || v > (1ull << 53);
    if (!bad)
        *i = k;
    return bad ? "a number that is not an integer from 0 to 2^53 written in plain digits" : NULL;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* The number starting at json[*i], in RFC 8259's grammar (cJSON's strtod
 * also takes "01", "1." and "-.5"): *i moves past it. */
static const char *lex_number(const unsigned char *s, size_t n, size_t *i)
{
    size_t k = *i, d;
    k += k < n && s[k] == '-';
    if (k < n && s[k] == '0')
        k++;
    else if (k < n && s[k] >= '1' && s[k] <= '9')
        while (k < n && is_digit(s[k]))
            k++;
    else
        goto bad;
    if (k < n && s[k] == '.') {
        for (d = ++k; k < n && is_digit(s[k]);)
            k++;
        if (k == d)
            goto bad;
    }
    if (k < n && (s[k] == 'e' || s[k] == 'E')) {
        k++;
        k += k < n && (s[k] == '+' || s[k] == '-');
        for (d = k; k < n && is_digit(s[k]);)
            k++;
        if (k == d)
            goto bad;
    }
    if (k < n && s[k] && strchr("0123456789+-.eE", s[k])) /* "01", "1.2.3": the token goes on */
        goto bad;
    *i = k;
    return NULL;
bad:
    return "a number that JSON does not allow (RFC 8259: no leading zero, digits on both sides of '.')";
}

const char *cku_json_lex(const char *json, size_t n, int uints_only, size_t *at)
{
    const unsigned char *s = (const unsigned char *)json;
    const char *why = NULL;
    unsigned cp;
    size_t i = 0;
    if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3))
        why = "a byte order mark (U+FEFF) before the JSON";
    while (!why && i < n) {
        if (s[i] == '"')
            why = lex_string(s, n, &i);
        else if (s[i] == '-' || is_digit(s[i]))
            why = uints_only ? lex_uint(s, n, &i) : lex_number(s, n, &i);
        else if (s[i] < 0x20 && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            why = "a control character outside a string";
        else if (s[i] >= 0x80 && !utf8_seq(s + i, n - i, &cp))
            why = "bytes that are not UTF-8";
        else
            i++;
    }
    *at = i;
    return why;
}

char *cku_human(uint64_t bytes, char *out)
{
    static const char *unit[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 999.5 && u < 6) {
        v /= 1000;
        u++;
    }
    snprintf(out, 16, u == 0 ? "%.0f %s" : v < 9.995 ? "%.2f %s" : v < 99.95 ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return out;
}

const char *cku_saved(uint64_t original, uint64_t packed, char *out)
{
    if (packed > original) /* a file that grew: never "0.0% saved" */
    {
        double g = original ? 100.0 * ((double)packed / (double)original - 1.0) : 100.0;
        snprintf(out, 24, g < 9.995 ? "grew %.2f%%" : g < 1e6 ? "grew %.0f%%" : "grew", g);
    }
    else
        snprintf(out, 24, "%.1f%% saved", original ? 100.0 * (1.0 - (double)packed / (double)original) : 0.0);
    return out;
}
