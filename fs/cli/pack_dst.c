/*
 * pack_dst.c — the packed directory DST of `ckptfs pack`: created and locked
 * for the run, cleaned of an interrupted run's temporaries, its manifest
 * built from the packed files it holds, and what is left of it after a
 * failure.
 */
#define _GNU_SOURCE
#include "pack_internal.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

/* The mode of a new DST: no more open than the source (for a single file,
 * a directory readable by whoever can read the file). */
static mode_t dst_mode(const pack_ctx *c)
{
    struct stat st;
    mode_t m = c->single_file ? c->list.v[0].st.st_mode : stat(c->src_root, &st) ? 0700 : st.st_mode;
    if (c->single_file)
        m = (m & 0044) | (m & 0044) >> 2;
    return (m & 0777) | 0700;
}

/* A DST that was there before this pack (empty, or an earlier pack that
 * --force cleared) made no more open than a new one would be: the bits of
 * group and others that SRC lacks are taken away, with a note.  Files keep
 * their sources' modes, which a source directory closed to others (0700)
 * protects: a 0644 file of it in a 0755 DST was readable by every user
 * (and through an allow_other mount, and in unpack's OUT, which takes
 * DST's mode).  @return 0, or -1 after saying why. */
int narrow_dst_mode(pack_ctx *c)
{
    struct stat st;
    if (fstat(c->lock_fd, &st)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(c->o->dst), strerror(errno));
        return -1;
    }
    mode_t now = st.st_mode & 07777, want = now & (07700 | dst_mode(c));
    if (want == now)
        return 0;
    if (fchmod(c->lock_fd, want)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(c->o->dst), strerror(errno));
        return -1;
    }
    fprintf(stderr, "ckptfs pack: %s: mode %04o narrowed to %04o: a packed directory is no more open than its "
            "source\n", CKU_ESC(c->o->dst), (unsigned)now, (unsigned)want);
    return 0;
}

/* Create DST if needed (*created = 1) and lock it for this run: a second
 * pack into the same DST fails here instead of mixing its files in. */
int open_dst(pack_ctx *c, int *created)
{
    struct stat st;
    *created = 0;
    if (stat(c->dst, &st)) {
        int e = errno;
        char parent[PATH_MAX], up[PATH_MAX];
        struct stat ust;
        snprintf(parent, sizeof parent, "%s", c->dst);
        *strrchr(parent, '/') = 0;
        snprintf(up, sizeof up, "%s", parent);
        for (char *slash; *up && stat(up, &ust) && (slash = strrchr(up, '/'));)
            *slash = 0;
        c->dst_above = strlen(up);
        errno = e;
        if (errno != ENOENT || c->src_missing || (*parent && cku_mkdirs(parent, 0755)) ||
            (mkdir(c->dst, 0700) && errno != EEXIST)) {
            if (c->src_missing) /* name the source: the missing one is SRC, not the new DST */
                fprintf(stderr, "ckptfs pack: %s: no such file or directory: the source to pack (a model "
                        "directory or a .safetensors file) must exist; nothing was written\n", c->o->src);
            else
                fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->dst, strerror(errno));
            return -1;
        }
        *created = 1;
    }
    c->lock_fd = open(c->dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->lock_fd < 0) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->dst, errno == ENOTDIR ? "exists and is not a directory" : strerror(errno));
        return -1;
    }
    if (flock(c->lock_fd, LOCK_EX | LOCK_NB)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->dst,
                errno == EWOULDBLOCK ? "another ckptfs command is using it (a pack writing it, or a verify or unpack "
                                       "reading it); wait for it to finish" : strerror(errno));
        close(c->lock_fd);
        c->lock_fd = -1;
        *created = 0;
        return -1;
    }
    if (*created && fchmod(c->lock_fd, dst_mode(c))) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->dst, strerror(errno));
        return -1;
    }
    return 0;
}

/* 1 if DST's name no longer leads to the directory this run locked (it was
 * removed, or renamed and another put there: `rm -rf DST` and a new pack
 * into DST while this one ran), after saying so once; else 0.  The run
 * then stops: its files went only to the directory it locked, none into
 * the one at DST now, and no further source may be deleted, as its packed
 * copy would not be where the user looks for it. */
int dst_lost(pack_ctx *c)
{
    struct stat mine, now;
    int e = errno; /* kept for the caller's message */
    int same = fstat(c->lock_fd, &mine) == 0 && mine.st_nlink > 0 && stat(c->dst, &now) == 0 &&
               now.st_dev == mine.st_dev && now.st_ino == mine.st_ino;
    errno = e;
    if (same)
        return 0;
    if (!atomic_exchange(&c->dst_lost_said, 1))
        fprintf(stderr,
                "ckptfs pack: %s: removed or replaced while this pack was writing it (the name no longer leads to\n"
                "  the directory it started in); stopped: nothing was written into the directory there now, and no\n"
                "  source was deleted since.  Run the command again to pack into %s as it is now.\n",
                CKU_ESC(c->o->dst), CKU_ESC(c->o->dst));
    return 1;
}

/* rel (NULL or "": the directory itself) below the directory open at dfd,
 * opened for reading as a directory without following a link. */
DIR *opendir_at(int dfd, const char *rel)
{
    int fd = openat(dfd, rel && *rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (fd >= 0 && !d)
        close(fd);
    return d;
}

/* fsync the directory rel below dfd ("" or NULL: dfd itself).  @return 0,
 * or -1 with errno. */
int fsync_at(int dfd, const char *rel)
{
    if (!rel || !*rel)
        return fsync(dfd);
    int fd = openat(dfd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd), e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* After a failure: remove DST if this run created it and nothing is in it
 * but the state, else say that what was packed is kept for a rerun.  A DST
 * that is no longer this run's is left alone (another run's, maybe). */
void leave_dst(pack_ctx *c, int created)
{
    if (dst_lost(c))
        return;
    DIR *d = opendir_at(c->lock_fd, NULL);
    struct dirent *e;
    int only_state = 1;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, STATE_NAME) &&
            strcmp(e->d_name, "." STATE_NAME ".tmp"))
            only_state = 0;
    if (d)
        closedir(d);
    if (created && only_state) { /* DST goes, and the directories made for it */
        unlinkat(c->lock_fd, STATE_NAME, 0);
        unlinkat(c->lock_fd, "." STATE_NAME ".tmp", 0);
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s", c->dst);
        if (!dst_lost(c) && rmdir(p) == 0)
            for (char *slash; (slash = strrchr(p, '/')) && (size_t)(slash - p) > c->dst_above;) {
                *slash = 0;
                if (rmdir(p))
                    break;
            }
    } else if (!only_state && c->writing) { /* a refused DST is not a pack to resume */
        fprintf(stderr, "ckptfs pack: %s: kept what was packed so far; run the same command again to resume\n",
                c->o->dst);
    }
}

/* Remove temporaries left by an interrupted run, in the directory open at
 * dfd and below. */
void remove_temps(int dfd)
{
    DIR *d = opendir_at(dfd, NULL);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_type == DT_DIR && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                remove_temps(sub);
                close(sub);
            }
        } else if (has_suffix(e->d_name, TMP_SUFFIX) || !strcmp(e->d_name, "." CKP_MANIFEST_NAME ".tmp")) {
            unlinkat(dirfd(d), e->d_name, 0);
        }
    }
    closedir(d);
}

/* Add the packed files and directories below DST's rel to b (read through
 * the directory this run locked). */
int scan_dst(pack_ctx *c, const char *rel, mf_build *b)
{
    DIR *d = opendir_at(c->lock_fd, rel);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char r[PATH_MAX], full[PATH_MAX], err[512];
        snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", c->dst, r);
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW))
            continue;
        if (S_ISDIR(st.st_mode)) {
            rc = mf_add_dir(b, r, strlen(r), st.st_mode & 07777);
            if (rc == 0)
                rc = scan_dst(c, r, b);
        } else if (S_ISREG(st.st_mode) && has_suffix(e->d_name, CKP_SUFFIX)) {
            ckp_reader *rd;
            if (ckp_open_in(c->lock_fd, c->dst, r, &rd, err, sizeof err) != CKP_OK) {
                fprintf(stderr, "ckptfs pack: %s\n", err);
                rc = -1;
                break;
            }
            r[strlen(r) - strlen(CKP_SUFFIX)] = 0;
            const ckp_info *in = ckp_get_info(rd);
            if (strcmp(in->path, r)) {
                fprintf(stderr, "ckptfs pack: %s: records path \"%s\", expected \"%s\"\n", CKU_ESC(full),
                        CKU_ESC(in->path), CKU_ESC(r));
                rc = -1;
            }
            ckm_file f = {.path = r, .size = in->original_size, .mode = in->mode,
                          .mtime_ns = in->mtime_ns, .kind = in->kind};
            memcpy(f.sha256, in->sha256, 32);
            if (mf_add_file(b, &f) == 0)
                b->packed += in->packed_size;
            else
                rc = -1;
            ckp_close(rd);
        }
    }
    closedir(d);
    return rc;
}

int mf_add_dir(mf_build *b, const char *path, size_t n, uint32_t mode)
{
    ckm_dir *d = cku_grow(b->m.dirs, &b->cap_dirs, b->m.n_dirs, sizeof *d, 16);
    if (!d)
        return -1;
    b->m.dirs = d;
    char *p = strndup(path, n);
    if (!p)
        return -1;
    b->m.dirs[b->m.n_dirs].path = p;
    b->m.dirs[b->m.n_dirs++].mode = mode;
    return 0;
}

int mf_add_file(mf_build *b, const ckm_file *f)
{
    ckm_file *nf = cku_grow(b->m.files, &b->cap_files, b->m.n_files, sizeof *nf, 64);
    if (!nf)
        return -1;
    b->m.files = nf;
    char *p = strdup(f->path);
    if (!p)
        return -1;
    b->m.files[b->m.n_files] = *f;
    b->m.files[b->m.n_files++].path = p;
    return 0;
}

void mf_free(mf_build *b)
{
    for (size_t i = 0; i < b->m.n_files; i++)
        free(b->m.files[i].path);
    for (size_t i = 0; i < b->m.n_dirs; i++)
        free(b->m.dirs[i].path);
    free(b->m.files);
    free(b->m.dirs);
}

/* The manifest's mode, whatever the umask: readable by a class of users
 * (group, others) only if that class can read DST (mode dst_mode) and every
 * packed file through the directories above it.  The manifest lists each
 * file's name, size and SHA-256: a 0600 shard's (or one in a 0700
 * directory's) were readable by every user of a 0755 DST, and a private
 * file's hash gives away what a guess of its content is worth; whoever it
 * now keeps out could not read that file to unpack, verify or mount the
 * pack anyway. */
static mode_t manifest_mode(const ckm_manifest *m, mode_t dst_mode)
{
    mode_t rd = dst_mode & 0444 & (dst_mode & 0111) << 2;
    for (size_t i = 0; i < m->n_files; i++) {
        mode_t can = m->files[i].mode & 0444;
        const char *p = m->files[i].path;
        for (size_t k = 0; k < m->n_dirs; k++) { /* the directories above it: x lets a class through */
            size_t n = strlen(m->dirs[k].path);
            if (!strncmp(p, m->dirs[k].path, n) && p[n] == '/')
                can &= (m->dirs[k].mode & 0111) << 2;
        }
        rd &= can;
    }
    return rd | 0600;
}

int write_manifest(pack_ctx *c)
{
    mf_build b = {0};
    char err[512];
    struct stat st, ds;
    int rc = dst_lost(c) || fstat(c->lock_fd, &ds) ? -1 : scan_dst(c, "", &b);
    if (rc == 0 && c->o->remote) /* the packed files are where the pack was sent */
        rc = c->o->remote->add_files(c->o->remote, c, &b);
    /* the links (format §7): in the manifest only, as write_state recorded them */
    size_t n_links = (size_t)cJSON_GetArraySize(c->hold_links);
    ckm_link *links = calloc(n_links ? n_links : 1, sizeof *links);
    if (!links)
        rc = -1;
    for (const cJSON *l = c->hold_links ? c->hold_links->child : NULL; links && l; l = l->next, b.m.n_links++) {
        links[b.m.n_links].path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "path"));
        links[b.m.n_links].target = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "target"));
    }
    b.m.links = links;
    ckp_status s = rc == 0 ? ckm_write_at(c->lock_fd, c->dst, &b.m, manifest_mode(&b.m, ds.st_mode), err, sizeof err)
                           : CKP_OK;
    b.m.links = NULL; /* not mf_free's: their strings are hold_links' */
    b.m.n_links = 0;
    free(links);
    if (s != CKP_OK) {
        if (!dst_lost(c))
            ckpt_fail("pack", s, err);
        rc = -1;
    }
    if (rc == 0 && c->o->remote && c->o->remote->manifest_written(c->o->remote, c))
        rc = -1;
    int mfd = rc == 0 ? openat(c->lock_fd, CKP_MANIFEST_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    c->packed_bytes = b.packed + (mfd >= 0 && fstat(mfd, &st) == 0 ? (uint64_t)st.st_size : 0);
    if (mfd >= 0)
        close(mfd);
    c->n_packed = b.m.n_files;
    for (size_t i = 0; i < b.m.n_files; i++)
        c->orig_bytes += b.m.files[i].size;
    mf_free(&b);
    /* finished, but where DST's name leads only if it still leads here */
    return rc || dst_lost(c) ? -1 : 0;
}
