/*
 * open_regular.c — the one way a file of a packed directory is opened for
 * reading (util.h, cku_open_regular).
 *
 * Everything in a packed directory is hostile input (docs/security.md "Hostile
 * input"): a symbolic link there must not make a reader read a file outside
 * it, and a FIFO, device or socket must not block or otherwise affect a
 * reader (opening a FIFO for reading waits for a writer, so `verify` hung and
 * a reader of the mount could not be killed).  So the path below the
 * directory is walked one component at a time with openat(O_NOFOLLOW): no
 * link is followed anywhere below it, and the walk cannot be redirected
 * between a check and the open.  Each component is looked at with
 * fstatat(AT_SYMLINK_NOFOLLOW) first, so that a FIFO or device is refused
 * without ever being opened; the file is then opened with O_NONBLOCK (a FIFO
 * put there meanwhile cannot block either), checked again with fstat, and
 * only then made blocking again.
 */
#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a file of mode m is, for a message ("a FIFO"). */
static const char *kind_name(mode_t m)
{
    return S_ISLNK(m) ? "a symbolic link" : S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory"
           : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket"
           : S_ISREG(m) ? "a regular file" : "a special file";
}

/* errno for a file of mode m refused where want (S_IFDIR or S_IFREG) was
 * needed: ELOOP for a link (as O_NOFOLLOW says it), else ENOTDIR / EISDIR /
 * EINVAL. */
static int refusal_errno(mode_t m, mode_t want)
{
    return S_ISLNK(m) ? ELOOP : want == S_IFDIR ? ENOTDIR : S_ISDIR(m) ? EISDIR : EINVAL;
}

/* Refuse component name (of rel, ending at end) of mode m where want was
 * needed: say which and what it is.  @return -1 with errno set. */
static int refuse(const char *rel, const char *end, int last, mode_t m, mode_t want, char *err, size_t cap)
{
    const char *why = S_ISLNK(m) ? "; links inside a packed directory are not followed"
                      : want == S_IFDIR ? ", not a directory" : ", not a regular file";
    if (last)
        cku_errf(err, cap, -1, "%s%s", kind_name(m), why);
    else
        cku_errf(err, cap, -1, "\"%.*s\" is %s%s", (int)(end - rel), rel, kind_name(m), why);
    errno = refusal_errno(m, want);
    return -1;
}

/* Open component name of rel (ending at end) in directory dfd as a want
 * (S_IFDIR or S_IFREG), without following it unless follow.  @return fd, or
 * -1 with errno and err. */
static int open_component(int dfd, const char *name, const char *rel, const char *end, int last, mode_t want,
                          int follow, struct stat *st, char *err, size_t cap)
{
    if (fstatat(dfd, name, st, follow ? 0 : AT_SYMLINK_NOFOLLOW)) {
        int e = errno;
        if (last)
            cku_errf(err, cap, -1, "%s", strerror(e));
        else
            cku_errf(err, cap, -1, "\"%.*s\": %s", (int)(end - rel), rel, strerror(e));
        errno = e;
        return -1;
    }
    if ((st->st_mode & S_IFMT) != want)
        return refuse(rel, end, last, st->st_mode, want, err, cap);
    int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW) |
                                   (want == S_IFDIR ? O_DIRECTORY : 0));
    if (fd < 0 || fstat(fd, st)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        cku_errf(err, cap, -1, "%s", strerror(e));
        errno = e;
        return -1;
    }
    if ((st->st_mode & S_IFMT) != want) { /* replaced between the look and the open */
        close(fd);
        return refuse(rel, end, last, st->st_mode, want, err, cap);
    }
    return fd;
}

/* Walk rel below the directory open at rootfd one component at a time,
 * following no link.  @return the regular file's descriptor (still
 * O_NONBLOCK), or -1 with errno and err. */
static int walk_from(int rootfd, const char *rel, struct stat *st, char *err, size_t cap)
{
    int dfd = rootfd, fd = -1, e = 0;
    char *buf = strdup(rel);
    if (!buf) {
        e = ENOMEM;
        cku_errf(err, cap, -1, "out of memory");
        goto out;
    }
    for (char *name = buf, *slash; fd < 0; name = slash ? slash + 1 : name) { /* NULL + 1 is undefined */
        slash = strchr(name, '/');
        if (slash)
            *slash = 0;
        const char *end = rel + (name - buf) + strlen(name);
        int next = open_component(dfd, name, rel, end, !slash, slash ? S_IFDIR : S_IFREG, 0, st, err, cap);
        if (next < 0) {
            e = errno;
            goto out;
        }
        if (dfd != rootfd)
            close(dfd);
        dfd = slash ? next : rootfd;
        fd = slash ? -1 : next;
    }
out:
    if (dfd != rootfd)
        close(dfd);
    free(buf);
    errno = e;
    return fd;
}

/* walk_from the directory the user named: links on the way to it are theirs. */
static int walk(const char *root, const char *rel, struct stat *st, char *err, size_t cap)
{
    int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        int e = errno;
        cku_errf(err, cap, -1, "%s: %s", root, strerror(e));
        errno = e;
        return -1;
    }
    int fd = walk_from(rootfd, rel, st, err, cap), e = errno;
    close(rootfd);
    errno = e;
    return fd;
}

/* The descriptor fd made blocking again (closed on failure). */
static int unblock(int fd, char *err, size_t cap)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK)) {
        int e = errno;
        cku_errf(err, cap, -1, "%s", strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int cku_open_regular_at(int rootfd, const char *rel, struct stat *st, char *err, size_t cap)
{
    struct stat tmp;
    int fd = walk_from(rootfd, rel, st ? st : &tmp, err, cap);
    return fd < 0 ? -1 : unblock(fd, err, cap);
}

int cku_open_regular(const char *root, const char *rel, struct stat *st, char *err, size_t cap)
{
    struct stat tmp;
    if (!st)
        st = &tmp;
    /* root NULL: a whole path, the caller's: followed, but only a regular
     * file is opened */
    int fd = root ? walk(root, rel, st, err, cap)
                  : open_component(AT_FDCWD, rel, rel, rel + strlen(rel), 1, S_IFREG, 1, st, err, cap);
    return fd < 0 ? -1 : unblock(fd, err, cap);
}

int cku_open_refused(int e) { return e == ELOOP || e == EINVAL || e == EISDIR || e == ENOTDIR; }
