/*
 * pack_source.c — what `ckptfs pack` reads before it writes anything: SRC
 * and DST resolved, SRC walked into the sorted list of its entries, and every
 * name and every safetensors header checked (pack.c's invariants: nothing is
 * written or deleted before all of them pass).
 */
#define _GNU_SOURCE
#include "pack_internal.h"
#include "source_map.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

static int list_add(src_list *l, const char *rel, int is_dir, const struct stat *st)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        src_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    memset(&l->v[l->n], 0, sizeof l->v[l->n]);
    l->v[l->n].rel = strdup(rel);
    l->v[l->n].is_dir = is_dir;
    l->v[l->n].st = *st;
    return l->v[l->n++].rel ? 0 : -1;
}

void list_free(src_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].rel);
        free(l->v[i].target);
    }
    free(l->v);
}

/* Add the link at full (relative path rel, lstat st) with its target text. */
static int add_link(pack_ctx *c, const char *full, const char *rel, const struct stat *st)
{
    char t[PATH_MAX + 1], esc[PATH_MAX];
    ssize_t n = readlink(full, t, sizeof t);
    if (n <= 0 || n > CKM_TARGET_MAX) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", cku_escape(full, esc, sizeof esc),
                n < 0 ? strerror(errno) : "a symbolic link whose target is not 1 to 4095 bytes; nothing was packed");
        return -1;
    }
    t[n] = 0;
    if (!cku_utf8_ok(t)) { /* the manifest is JSON */
        fprintf(stderr, "ckptfs pack: %s: the target of this symbolic link is not valid UTF-8; nothing was packed\n",
                cku_escape(full, esc, sizeof esc));
        return -1;
    }
    if (list_add(&c->links, rel, 0, st) || !(c->links.v[c->links.n - 1].target = strdup(t)))
        return -1;
    c->links_outside += link_leaves_tree(rel, t);
    return 0;
}

/* 1 if target, of the link at rel, names something outside the tree the
 * link is in (absolute, or ".." above its top), read as the kernel would
 * read it from the link's directory; 0 if it stays inside. */
int link_leaves_tree(const char *rel, const char *target)
{
    if (*target == '/')
        return 1;
    long depth = 0; /* directories below the top */
    for (const char *p = rel; (p = strchr(p, '/')); p++)
        depth++;
    for (const char *p = target; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0)
                return 1;
        } else if (n && !(n == 1 && p[0] == '.')) {
            depth++;
        }
        p += n + (p[n] == '/');
    }
    return 0;
}

int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const src_entry *)a)->rel, ((const src_entry *)b)->rel);
}

/* What pack says of a single file SRC named by a symbolic link with
 * --delete-source, which deletes each file it packs, after reading it: the
 * file deleted would be the target. */
#define LINK_REFUSED "a symbolic link; --delete-source deletes the files it packs and a link is not one: put " \
                     "the file itself there, or pack without --delete-source; nothing was packed"

/* Walk root/rel recursively.  Symbolic links are stored as links (format
 * §7: their target text, whatever it names), never followed, so the walk
 * cannot loop and a Hugging Face cache's blobs are packed once. */
static int walk(pack_ctx *c, const char *rel)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s%s%s", c->src_root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(dir), strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    char esc[PATH_MAX]; /* a source name as messages print it */
    size_t np = strlen(ASIDE_PREFIX);
    while ((e = readdir(d))) /* sources a killed run was deleting: back first */
        if (!strncmp(e->d_name, ASIDE_PREFIX, np) && e->d_name[np])
            restore_aside(dir, e->d_name + np);
    rewinddir(d); /* then the names, those put back included */
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!cku_utf8_ok(e->d_name)) { /* the manifest is JSON and the spec's names are UTF-8 */
            fprintf(stderr, "ckptfs pack: %s/%s: name is not valid UTF-8; rename it to pack it\n", CKU_ESC(dir),
                    cku_escape(e->d_name, esc, sizeof esc));
            rc = -1;
            break;
        }
        char r[PATH_MAX], full[PATH_MAX];
        if (strlen(c->src_root) + strlen(rel) + strlen(e->d_name) + 64 > PATH_MAX) {
            fprintf(stderr, "ckptfs pack: %s/%s: path too long\n", CKU_ESC(dir), cku_escape(e->d_name, esc, sizeof esc));
            rc = -1;
            break;
        }
        snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", c->src_root, r);
        struct stat st, lst;
        if (lstat(full, &lst)) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", cku_escape(full, esc, sizeof esc), strerror(errno));
            rc = -1;
        } else if (S_ISLNK(lst.st_mode)) {
            rc = add_link(c, full, r, &lst);
        } else if ((st = lst, S_ISDIR(st.st_mode))) {
            if (!*rel && (!strcmp(e->d_name, CKP_MANIFEST_NAME) || !strcmp(e->d_name, STATE_NAME))) {
                fprintf(stderr, "ckptfs pack: %s: this name is reserved for ckptfs\n", cku_escape(full, esc, sizeof esc));
                rc = -1;
            } else {
                rc = list_add(&c->list, r, 1, &st) ? -1 : walk(c, r);
            }
        } else if (S_ISREG(st.st_mode) && !strncmp(e->d_name, ASIDE_PREFIX, np)) {
            /* an error, not a note: the pack cannot hold both, and a run that
             * went on without it exited 0 with this file (maybe the only
             * copy of what the name held) left out of the pack */
            fprintf(stderr, "ckptfs pack: %s: a killed run was deleting a file of the same name without the "
                    "prefix, which exists again; keep the one you want under that name and run the same command "
                    "again; nothing was packed\n", cku_escape(full, esc, sizeof esc));
            rc = -1;
        } else if (S_ISREG(st.st_mode)) {
            rc = list_add(&c->list, r, 0, &st);
        } else {
            fprintf(stderr, "ckptfs pack: %s: not a regular file or directory\n", cku_escape(full, esc, sizeof esc));
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

/* Validate a safetensors file's header; @return parsed header or NULL. */
st_header *check_safetensors(const char *path, const uint8_t *p, uint64_t size)
{
    char err[512], msg[PATH_MAX + 600], esc[PATH_MAX];
    st_header *h = NULL;
    ckp_status st = st_parse(p, p ? size : 0, size, &h, err, sizeof err);
    if (st != CKP_OK) {
        snprintf(msg, sizeof msg, "%s: %s%s", cku_escape(path, esc, sizeof esc),
                 st == CKP_ERR_SOURCE ? "invalid safetensors file: " : "", err);
        ckpt_fail("pack", st, msg);
    }
    return h;
}

int validate_all(pack_ctx *c, uint64_t *total)
{
    size_t bad = 0;
    *total = 0;
    for (size_t i = 0; i < c->list.n; i++) {
        const src_entry *e = &c->list.v[i];
        if (e->is_dir)
            continue;
        *total += (uint64_t)e->st.st_size;
        /* a .safetensors name must hold one; another name may (a Hugging
         * Face blob is named by its hash): the content says (format §2) */
        int named = has_suffix(e->rel, ".safetensors");
        if (!named && e->st.st_size < 16)
            continue;
        char path[PATH_MAX];
        join_path(path, sizeof path, c->src_root, e->rel, "");
        cks_map sm;
        char why[512];
        if (cks_map_open(path, &sm, why, sizeof why)) {
            char esc[PATH_MAX];
            fprintf(stderr, "ckptfs pack: %s: %s\n", cku_escape(path, esc, sizeof esc), why);
            return -1;
        }
        st_header *h = NULL;
        if (named)
            h = check_safetensors(path, sm.p, sm.size);
        else if (st_parse(sm.p, sm.size, sm.size, &h, why, sizeof why) != CKP_OK)
            h = NULL;
        int truncated = cks_map_truncated(&sm);
        cks_map_close(&sm);
        if (named && !h) { /* every bad one named (check_safetensors said why), then the way on */
            char esc[PATH_MAX];
            if (c->o->skip_bad)
                fprintf(stderr, "ckptfs pack: %s: stored as an opaque file, byte for byte (--skip-bad)\n",
                        cku_escape(path, esc, sizeof esc));
            c->list.v[i].as_blob = c->o->skip_bad;
            bad += !c->o->skip_bad;
            continue;
        }
        c->list.v[i].is_st = h && !truncated;
        st_free(h);
    }
    if (bad)
        fprintf(stderr, "ckptfs pack: %zu bad safetensors file%s (see above): nothing was packed.\n"
                "Remove %s, or run the same command with --skip-bad to store %s (byte for byte, "
                "served and unpacked as %s, but not compressed as weights).\n",
                bad, cku_s(bad), bad == 1 ? "it" : "them", bad == 1 ? "it as an opaque file" : "them as opaque files",
                bad == 1 ? "it is" : "they are");
    return bad ? -1 : 0;
}

/* The absolute, symlink-free form of path, which may not exist: components
 * resolved while they exist, the missing rest appended with "." and ".."
 * applied lexically (as mkdir -p would apply them).  @return 0, or -1 with
 * errno. */
int resolve_path(const char *path, char *out)
{
    char abs[PATH_MAX], cwd[PATH_MAX], next[PATH_MAX], *save = NULL;
    if (*path == '/')
        snprintf(abs, sizeof abs, "%s", path);
    else if (getcwd(cwd, sizeof cwd))
        snprintf(abs, sizeof abs, "%s/%s", cwd, path);
    else
        return -1;
    strcpy(out, "/");
    int missing = 0; /* components at the end of out that do not exist */
    for (char *comp = strtok_r(abs, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
        if (!strcmp(comp, "."))
            continue;
        if (!strcmp(comp, "..")) { /* out is resolved: its lexical parent is its real one */
            char *slash = strrchr(out, '/');
            slash[slash == out] = 0;
            missing -= missing > 0;
            continue;
        }
        if (strlen(out) + strlen(comp) + 2 > sizeof next) {
            errno = ENAMETOOLONG;
            return -1;
        }
        snprintf(next, sizeof next, "%s%s%s", out, out[1] ? "/" : "", comp);
        char real[PATH_MAX];
        if (!missing && realpath(next, real)) {
            strcpy(out, real);
            continue;
        }
        if (!missing && errno != ENOENT)
            return -1;
        missing++;
        strcpy(out, next);
    }
    return 0;
}

int setup_source(pack_ctx *c, char *src_real)
{
    const ckpt_pack_opts *o = c->o;
    struct stat st;
    int resolved = resolve_path(o->src, src_real) == 0;
    if (resolved && stat(src_real, &st) && errno == ENOENT) { /* a killed --delete-source may have it aside */
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", src_real);
        char *slash = strrchr(dir, '/');
        if (slash && slash[1]) {
            *slash = 0;
            restore_aside(*dir ? dir : "/", slash + 1);
        }
    }
    if (!resolved || stat(src_real, &st)) {
        if (errno != ENOENT || !*src_real) {
            fprintf(stderr, "ckptfs pack: %s: %s\n", o->src, strerror(errno));
            return -1;
        }
        c->src_missing = 1; /* acceptable only if DST's state says it packed all of it: see prepare_dst */
        snprintf(c->src_root, sizeof c->src_root, "%s", src_real);
        return 0;
    }
    struct stat lst;
    if (S_ISREG(st.st_mode) && o->delete_source && lstat(o->src, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        fprintf(stderr, "ckptfs pack: %s: " LINK_REFUSED "\n", CKU_ESC(o->src));
        return -1;
    }
    if (S_ISREG(st.st_mode)) {
        c->single_file = 1;
        snprintf(c->src_root, sizeof c->src_root, "%s", src_real);
        char *slash = strrchr(c->src_root, '/');
        *slash = 0;
        if (!*c->src_root)
            strcpy(c->src_root, "/");
        return list_add(&c->list, slash + 1, 0, &st);
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ckptfs pack: %s: not a directory or a regular file\n", o->src);
        return -1;
    }
    snprintf(c->src_root, sizeof c->src_root, "%s", src_real);
    return walk(c, "");
}

static int same_inode(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* 1 if a directory below the one open at fd (which this closes), links not
 * followed, is the directory id. */
static int holds_dir(int fd, const struct stat *id, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode))
            continue;
        int sub = depth < 256 && !(found = same_inode(&st, id))
                      ? openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                      : -1;
        if (sub >= 0)
            found = holds_dir(sub, id, depth + 1);
    }
    closedir(d);
    return found;
}

/* 1 if DST is SRC or inside it (unless SRC is one file), or SRC is inside
 * DST: by their resolved paths, and where DST exists by the directories
 * themselves, which a bind mount (or another mount of the same file system)
 * reaches by a path that the other does not start with: the walk would
 * have packed DST's files as sources (with --delete-source deleting them,
 * its manifest first), or --force cleared SRC's .ckpt files. */
int overlap(const pack_ctx *c, const char *src_real)
{
    const char *dst_real = c->dst;
    size_t ls = strlen(src_real), ld = strlen(dst_real);
    int dst_in_src = !strncmp(dst_real, src_real, ls) && (dst_real[ls] == '/' || !dst_real[ls] || ls == 1);
    int src_in_dst = !strncmp(src_real, dst_real, ld) && (src_real[ld] == '/' || !src_real[ld] || ld == 1);
    if ((!c->single_file && dst_in_src) || src_in_dst)
        return 1;
    struct stat dst, src;
    if (stat(dst_real, &dst) || !S_ISDIR(dst.st_mode) || c->src_missing || stat(c->src_root, &src))
        return 0;
    if (same_inode(&dst, &src)) /* SRC's directory is DST */
        return 1;
    for (size_t i = 0; !c->single_file && i < c->list.n; i++)
        if (c->list.v[i].is_dir && same_inode(&c->list.v[i].st, &dst))
            return 1;
    int fd = open(dst_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd >= 0 && holds_dir(fd, &src, 0);
}

#define FUSE_MAGIC 0x65735546 /* statfs f_type of every FUSE file system */

/* The root of the mount holding path p (whose stat is st), into root: the
 * last directory up p's path on st's device. */
static void mount_root(const char *p, const struct stat *st, char *root, size_t cap)
{
    char up[PATH_MAX];
    struct stat ust;
    snprintf(root, cap, "%s", p);
    snprintf(up, sizeof up, "%s", p);
    for (char *slash; (slash = strrchr(up, '/'));) {
        slash[slash == up] = 0; /* "/x": its parent is "/" */
        if (stat(up, &ust) || ust.st_dev != st->st_dev)
            return;
        snprintf(root, cap, "%s", up);
        if (!strcmp(up, "/"))
            return;
    }
}

/* 1 if path p (stat st) is on a ckptfs mount of the packed directory dst
 * (stat dst_st), naming its mount point in mnt; the mount's root says which
 * packed directory it serves (the xattr user.ckptfs.stats, "source"). */
static int on_mount_of(const char *p, const struct stat *st, const struct stat *dst_st, char *mnt, size_t cap)
{
    struct statfs sf;
    char real[PATH_MAX]; /* a link in SRC to a file of the mount: the mount's own path */
    if (statfs(p, &sf) || sf.f_type != FUSE_MAGIC || !realpath(p, real))
        return 0;
    mount_root(real, st, mnt, cap);
    ssize_t n = getxattr(mnt, "user.ckptfs.stats", NULL, 0);
    char *buf = n > 0 ? malloc((size_t)n + 4096) : NULL;
    if (buf && (n = getxattr(mnt, "user.ckptfs.stats", buf, (size_t)n + 4095)) > 0)
        buf[n] = 0;
    cJSON *o = buf && n > 0 ? cJSON_Parse(buf) : NULL;
    const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "source"));
    struct stat ss;
    int same = src && stat(src, &ss) == 0 && same_inode(&ss, dst_st);
    cJSON_Delete(o);
    free(buf);
    return same;
}

/* 1 if SRC, or a file or directory of it, is read through a ckptfs mount of
 * DST (an existing packed directory), after saying so: the daemon reads
 * DST's packed files to serve it, and the pack would replace them (with
 * --force, remove every one of them first).  `ckptfs pack --force MNT DST`
 * to re-encode a mounted pack in place lost the whole pack, the only copy
 * after a --delete-source: its files cleared, then every read of the mount
 * EIO.  Each device of the walk is looked at once. */
int served_by_dst(const pack_ctx *c)
{
    struct stat dst_st, st;
    dev_t seen[16];
    size_t n_seen = 0;
    char mnt[PATH_MAX], p[PATH_MAX];
    if (c->src_missing || stat(c->dst, &dst_st) || !S_ISDIR(dst_st.st_mode))
        return 0;
    for (size_t i = 0; i <= c->list.n; i++) {
        if (i == c->list.n) /* SRC itself (a directory's entries come first: an empty one has none) */
            snprintf(p, sizeof p, "%s", c->src_root);
        else
            join_path(p, sizeof p, c->src_root, c->list.v[i].rel, "");
        if (i < c->list.n ? (st = c->list.v[i].st, 0) : stat(p, &st))
            continue;
        size_t k = 0;
        while (k < n_seen && seen[k] != st.st_dev)
            k++;
        if (k < n_seen)
            continue;
        if (n_seen < sizeof seen / sizeof *seen)
            seen[n_seen++] = st.st_dev;
        if (on_mount_of(p, &st, &dst_st, mnt, sizeof mnt)) {
            fprintf(stderr,
                    "ckptfs pack: %s is read through %s, a ckptfs mount of %s: packing into %s would replace the "
                    "packed files that mount reads (--force removes them all first, and they may be the only "
                    "copy); nothing was written.  Pack into a new directory, then replace %s with it\n",
                    CKU_ESC(p), CKU_ESC(mnt), CKU_ESC(c->o->dst), CKU_ESC(c->o->dst), CKU_ESC(c->o->dst));
            return 1;
        }
    }
    return 0;
}

/* Names DST keeps for itself at its top. */
static int reserved_name(const char *rel)
{
    static const char *const names[] = {CKP_MANIFEST_NAME, "." CKP_MANIFEST_NAME ".tmp", STATE_NAME,
                                        "." STATE_NAME ".tmp"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(rel, names[i]))
            return 1;
    return 0;
}

/* 1 if the list holds a directory named rel. */
static int list_has_dir(const pack_ctx *c, const char *rel)
{
    src_entry key = {.rel = (char *)rel};
    const src_entry *e = c->list.n ? bsearch(&key, c->list.v, c->list.n, sizeof key, cmp_entry) : NULL;
    return e && e->is_dir;
}

/* Every name checked before anything is written or deleted: each must be
 * storable (a valid relative path within the format's limits, a packed name
 * within NAME_MAX), not reserved, and not collide in DST with another
 * entry's packed or temporary name.  @return 0, or -1 after naming it. */
int check_names(const pack_ctx *c)
{
    for (size_t i = 0; i < c->links.n; i++) { /* links: in the manifest only, no packed name */
        const char *rel = c->links.v[i].rel;
        const char *why = !ckp_path_ok(rel) ? "this path cannot be stored in a pack"
                          : !strchr(rel, '/') && reserved_name(rel) ? "this name is reserved for ckptfs" : NULL;
        if (why) {
            char esc[PATH_MAX];
            fprintf(stderr, "ckptfs pack: %s/%s: %s; nothing was packed\n", c->src_root,
                    cku_escape(rel, esc, sizeof esc), why);
            return -1;
        }
    }
    for (size_t i = 0; i < c->list.n; i++) {
        const src_entry *e = &c->list.v[i];
        const char *base = strrchr(e->rel, '/') ? strrchr(e->rel, '/') + 1 : e->rel;
        char packed[PATH_MAX], tmp[PATH_MAX];
        snprintf(packed, sizeof packed, "%s%s", e->rel, CKP_SUFFIX);
        tmp_rel(tmp, sizeof tmp, e->rel);
        const char *why = NULL;
        if (!ckp_path_ok(e->rel))
            why = "this path cannot be stored in a pack";
        else if (!e->is_dir && strlen(base) + strlen(CKP_SUFFIX) > NAME_MAX)
            why = "name too long: the packed file's name (with " CKP_SUFFIX ") would be over 255 bytes";
        else if (base == e->rel && reserved_name(e->rel))
            why = "this name is reserved for ckptfs";
        else if (!e->is_dir && (list_has_dir(c, packed) || list_has_dir(c, tmp)))
            why = "its packed name is also the name of a directory in the source";
        if (why) {
            char esc[PATH_MAX];
            fprintf(stderr, "ckptfs pack: %s/%s: %s; nothing was packed\n", c->src_root,
                    cku_escape(e->rel, esc, sizeof esc), why);
            return -1;
        }
    }
    return 0;
}
