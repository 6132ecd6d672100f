/*
 * util.h — small helpers of the format library, used by the layers above it
 * too: full reads and writes that retry on EINTR and short counts, durable
 * renames, little-endian field access, hex, a thread fan-out.
 */
#ifndef CKU_UTIL_H
#define CKU_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* pread/pwrite the whole range; @return 0, or -1 with errno (EIO for an
 * unexpected end of file on read). */
int cku_pread_full(int fd, void *buf, size_t len, uint64_t off);
int cku_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);
/* Open root/rel for reading if it is a regular file: how every reader opens
 * a file of a packed directory (docs/security.md).  root is taken
 * as given (a link in it is the user's); below it no component of rel is
 * followed if it is a symbolic link, every one but the last must be a
 * directory, and the last a regular file: a FIFO, device, socket, directory
 * or link is refused without being opened, so nothing there can block the
 * reader.  root NULL: rel is a whole path, the caller's to name: links in it
 * are followed, but still only a regular file is opened.  @return a blocking O_RDONLY|O_CLOEXEC descriptor with *st
 * (if given) filled by fstat, or -1 with errno (ELOOP: a link; EINVAL,
 * EISDIR: not a regular file; ENOTDIR) and in err what is wrong, naming the
 * component of rel at fault if it is not the last (the caller names the
 * path). */
struct stat;
int cku_open_regular(const char *root, const char *rel, struct stat *st, char *err, size_t errCapacity);
/* cku_open_regular below the directory open at rootfd (which stays open): a
 * writer anchored to the directory it made reads its files there, wherever
 * that directory's name now leads. */
int cku_open_regular_at(int rootfd, const char *rel, struct stat *st, char *err, size_t errCapacity);
/* 1 if errno e from cku_open_regular means "there, but not a regular file
 * reached without links" rather than an I/O or permission error. */
int cku_open_refused(int e);
/* Trim path p (capacity cap) in place to its parent: "a/b" -> "a", "/a" ->
 * "/", "a" -> ".".  For walks up to the nearest part of a path that exists.
 * @return 1, or 0 when p is "/" or "." (nothing above it). */
int cku_path_up(char *p, size_t cap);
/* 1 if path (which need not exist: its nearest existing ancestor stands
 * for it) is the directory dir or lies below it, found by walking ".." up
 * from it and comparing devices and inodes: a bind mount of dir, a link or
 * a ".." in path are seen through, where comparing path strings is not.
 * 0 if not, -1 if dir cannot be stat'ed (errno). */
int cku_path_within(const char *path, const char *dir);
/* Sizes and counts for people, one system throughout (commands, stat, the
 * daemon's log): bytes in powers of 1000 with three significant digits
 * ("812 B", "3.40 MB", "1.21 GB"); out: at least 16 chars; @return out. */
char *cku_human(uint64_t bytes, char *out);
/* "37.8% saved", or "grew 0.41%" when packed > original; out: 24 chars. */
const char *cku_saved(uint64_t original, uint64_t packed, char *out);
/* "" or "s": "%llu file%s", n, cku_s(n). */
static inline const char *cku_s(uint64_t n) { return n == 1 ? "" : "s"; }
/* fsync the directory holding path (or path itself if it is a directory). */
int cku_fsync_dir(const char *dir);
/* fsync directory dir and, with up, each directory above it to the root: a
 * directory's own name survives a crash only once its parent is synced (a
 * directory made by this run, or by a killed one that did not sync it).  Not
 * a step of the kill tests (no cku_fault_point): it only makes durable what
 * the steps made; above dir, one that cannot be opened or synced is skipped
 * unless with an I/O error.  @return 0, or -1 with errno. */
int cku_sync_dirs(const char *dir, int up);

/* Test hook for kill tests (tests/hardening/interrupted_pack.py).  Writers
 * call it just before each durable step (fsync, rename, unlink, rmdir).
 * With CKPTFS_FAULT=step:N in the environment, the Nth call of the process
 * (counted over all threads) ends it at once with status CKU_FAULT_EXIT, as a
 * kill at that moment would; with CKPTFS_FAULT=stop:N it stops the process
 * (SIGSTOP) there instead, for a test to change the files and continue it.
 * Without the variable the cost is one pthread_once. */
#define CKU_FAULT_EXIT 86
void cku_fault_point(void);

/* Run fn(arg) on n threads at once (at most 64), the calling thread being
 * one of them; returns when all have returned.  Threads that cannot be
 * started are not retried: fn must share out its work (a counter in arg). */
void cku_run_threads(int n, void *(*fn)(void *), void *arg);
/* mkdir -p; @return 0 or -1 with errno. */
int cku_mkdirs(const char *path, mode_t mode);

void cku_hex(const uint8_t *p, size_t n, char *out);     /* out: 2n+1 chars */
int cku_unhex(const char *s, uint8_t *out, size_t n);    /* 0 on success */
/* 1 if s is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF), as format §2 requires of names. */
int cku_utf8_ok(const char *s);

/* s as a person may safely read it in a message or a table: valid UTF-8
 * kept; backslash and '"' escaped, so are \n \t \r; other control
 * characters (C0, DEL, C1, bidirectional overrides) as \xNN or \uNNNN and
 * bytes that are not UTF-8 as \xNN.  Cut with "..." to fit cap (>= 4).
 * @return out.  Every printer of a name from a file (tensor, path) uses it. */
const char *cku_escape(const char *s, char *out, size_t cap);
#define CKU_ESC_NAME 256 /* a buffer for one escaped name in a message */
/* s escaped into a buffer that lives to the end of the enclosing block (a
 * compound literal): for a path in one printf argument list. */
#define CKU_ESC(s) cku_escape((s), (char[4096]){0}, 4096)

/* The checks of RFC 8259 that cJSON does not make, on JSON text json[0..n):
 * UTF-8 throughout, no byte order mark, whitespace only space, tab, LF and
 * CR, no raw control character in a string, no \u0000 escape (a C
 * string would stop there), and every number in RFC 8259's grammar (cJSON
 * takes "01", "1." and "-.5").  With uints_only, every number an integer
 * from 0 to 2^53 in plain digits instead (no sign, fraction, exponent or
 * leading zero).  cJSON also ignores what follows the first value: callers
 * check that.  @return NULL, or what is wrong ("a ... ") with its byte offset in *at. */
const char *cku_json_lex(const char *json, size_t n, int uints_only, size_t *at);

static inline uint64_t cku_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint32_t cku_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint16_t cku_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline void cku_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void cku_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void cku_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

double cku_now(void); /* monotonic seconds */

/* Room for one more element in a growable array: arr holds n of its *cap
 * elements of size bytes each.  @return arr itself while n < *cap, else arr
 * reallocated to twice *cap elements (first when *cap is 0) with *cap set to
 * that; NULL with errno (ENOMEM: out of memory, or the new size does not fit
 * in a size_t; EINVAL: size or first 0) and arr and *cap untouched (arr
 * still the caller's to free). */
void *cku_grow(void *arr, size_t *cap, size_t n, size_t size, size_t first);

/* ---- errors: the one formatter of every layer ------------------------------
 * A function that fails with a message formats it here: err (if given, of
 * errCapacity bytes) gets the message, cut to fit, and the status passed in
 * comes back, so that a failure is one statement:
 *     return cku_errf(err, cap, CKP_ERR_CORRUPT, "extent %u: ...", i);
 * status is a value of the calling layer's own status enum (ckp_status,
 * ckfs_status, ...; -1 for functions that report through errno): each layer
 * keeps its enum and maps the one below it once, this only carries it.
 * @return status. */
int cku_errf(char *err, size_t errCapacity, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* cku_errf with the message after "NAME: ", name escaped (cku_escape): for
 * messages about a file whose name may come from a packed directory.
 * @return status. */
int cku_errf_at(char *err, size_t errCapacity, int status, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
