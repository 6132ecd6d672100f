/*
 * inode_table.c — inode numbers of the mounted tree (inode_table.h).
 *
 * How inode numbers map to files (fixed for the life of a mount):
 *   1                         the root (the packed directory itself)
 *   2 .. 1+n_dirs             the manifest's directories, in manifest order
 *   2+n_dirs .. 1+n_dirs+n_files
 *                             the manifest's files, in manifest order
 *   2+n_dirs+n_files .. 1+n_dirs+n_files+n_links
 *                             the manifest's symbolic links, in manifest order
 * Inode numbers are never reused during a mount, so FUSE's lookup counts
 * need no bookkeeping (forget is a no-op) and generation numbers stay 0.
 *
 * The manifest is one ckm_load returned: its guarantees M1-M4 (manifest.h)
 * make every name unique in its directory and every parent a listed
 * directory, so building the tree cannot meet a conflict; debug builds
 * assert it where a conflict would show.
 */
#define _GNU_SOURCE
#include "inode_table.h"
#include "util.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct cki_table {
    cki_node *nodes;        /* nodes[ino]; nodes[0] unused */
    uint64_t n;             /* largest inode */
    uint64_t cap;
    uint64_t file_base;     /* inode of manifest file 0 */
    uint64_t *dir_map;      /* open addressing: dir path -> ino (0 = empty) */
    uint64_t map_cap;       /* power of two */
    uint64_t map_used;
};

static uint64_t str_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;       /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Slot of the dir path s[0..n) in the map: either its slot or an empty one. */
static uint64_t *map_slot(cki_table *t, const char *s, size_t n)
{
    uint64_t i = str_hash(s, n) & (t->map_cap - 1);
    for (;; i = (i + 1) & (t->map_cap - 1)) {
        uint64_t ino = t->dir_map[i];
        if (!ino)
            return &t->dir_map[i];
        const char *p = t->nodes[ino].path;
        if (strlen(p) == n && memcmp(p, s, n) == 0)
            return &t->dir_map[i];
    }
}

static int map_grow(cki_table *t)
{
    uint64_t *old = t->dir_map, old_cap = t->map_cap;
    t->map_cap = old_cap ? old_cap * 2 : 64;
    t->dir_map = calloc(t->map_cap, sizeof *t->dir_map);
    if (!t->dir_map)
        return -1;
    for (uint64_t i = 0; i < old_cap; i++)
        if (old[i]) {
            const char *p = t->nodes[old[i]].path;
            *map_slot(t, p, strlen(p)) = old[i];
        }
    free(old);
    return 0;
}

/* Append a node; takes ownership of path.  @return its inode or 0. */
static uint64_t add_node(cki_table *t, char *path, uint32_t mode, uint64_t size, int64_t mtime,
                         int64_t file)
{
    if (!path)
        return 0;
    if (t->n + 1 >= t->cap) {
        uint64_t cap = t->cap ? t->cap * 2 : 64;
        cki_node *nn = realloc(t->nodes, cap * sizeof *nn);
        if (!nn) {
            free(path);
            return 0;
        }
        memset(nn + t->cap, 0, (cap - t->cap) * sizeof *nn);
        t->nodes = nn;
        t->cap = cap;
    }
    uint64_t ino = ++t->n;
    cki_node *x = &t->nodes[ino];
    const char *slash = strrchr(path, '/');
    x->path = path;
    x->name = slash ? slash + 1 : path;
    x->mode = mode;
    x->size = size;
    x->mtime_ns = mtime;
    x->file = file;
    return ino;
}

/* Add listed directory path[0..n) to the nodes and the map.  @return its
 * inode, or 0 when out of memory. */
static uint64_t add_dir(cki_table *t, const char *path, size_t n, uint32_t mode, int64_t mtime)
{
    if ((t->map_used + 1) * 2 > t->map_cap && map_grow(t) != 0)
        return 0;
    assert(!*map_slot(t, path, n)); /* M2: no directory is listed twice */
    uint64_t ino = add_node(t, strndup(path, n), S_IFDIR | (mode & 07777), 0, mtime, -1);
    if (!ino)
        return 0;
    *map_slot(t, path, n) = ino;    /* nodes may have moved: look again */
    t->map_used++;
    return ino;
}

/* Set the parent of every node and count each directory's children. */
static void link_parents(cki_table *t)
{
    for (uint64_t ino = 2; ino <= t->n; ino++) {
        const char *p = t->nodes[ino].path;
        const char *slash = strrchr(p, '/');
        uint64_t parent = slash ? *map_slot(t, p, (size_t)(slash - p)) : CKI_ROOT;
        assert(parent); /* M4: every parent is a listed directory */
        t->nodes[ino].parent = parent;
        t->nodes[parent].n_children++;
        if (S_ISDIR(t->nodes[ino].mode))
            t->nodes[parent].n_subdirs++;
    }
}

static int cmp_child(const void *a, const void *b, void *arg)
{
    const cki_table *t = arg;
    return strcmp(t->nodes[*(const uint64_t *)a].name, t->nodes[*(const uint64_t *)b].name);
}

/* Each directory's children, sorted by name.  @return 0, or -1 when out of
 * memory. */
static int fill_children(cki_table *t)
{
    for (uint64_t ino = 1; ino <= t->n; ino++) {
        cki_node *d = &t->nodes[ino];
        if (!S_ISDIR(d->mode) || !d->n_children)
            continue;
        if (!(d->children = malloc(d->n_children * sizeof *d->children)))
            return -1;
        d->n_children = 0;
    }
    for (uint64_t ino = 2; ino <= t->n; ino++) {
        cki_node *d = &t->nodes[t->nodes[ino].parent];
        d->children[d->n_children++] = ino;
    }
    for (uint64_t ino = 1; ino <= t->n; ino++) {
        cki_node *d = &t->nodes[ino];
        if (d->n_children < 2)
            continue;
        qsort_r(d->children, d->n_children, sizeof *d->children, cmp_child, t);
        /* M2, M3: paths are unique across files and directories, so names are in a directory */
        for (uint32_t i = 1; i < d->n_children; i++)
            assert(strcmp(t->nodes[d->children[i]].name, t->nodes[d->children[i - 1]].name));
    }
    return 0;
}

ckfs_status cki_build(const ckm_manifest *m, uint32_t rootMode, int64_t dirMtimeNs, cki_table **out,
                      char *err, size_t errCapacity)
{
    *out = NULL;
    cki_table *t = calloc(1, sizeof *t);
    if (!t || add_node(t, strdup(""), S_IFDIR | (rootMode & 07777), 0, dirMtimeNs, -1) != CKI_ROOT)
        goto nomem;
    t->nodes[CKI_ROOT].parent = CKI_ROOT;
    if (map_grow(t) != 0) /* also with no directory listed: link_parents looks up files' parents */
        goto nomem;
    for (size_t i = 0; i < m->n_dirs; i++) {
        const char *p = m->dirs[i].path;
        assert(ckp_path_ok(p)); /* M1 */
        if (!add_dir(t, p, strlen(p), m->dirs[i].mode, dirMtimeNs))
            goto nomem;
    }
    t->file_base = t->n + 1;
    for (size_t i = 0; i < m->n_files; i++) {
        const ckm_file *f = &m->files[i];
        assert(ckp_path_ok(f->path)); /* M1 */
        if (!add_node(t, strdup(f->path), S_IFREG | ckm_file_mode(f), f->size, f->mtime_ns, (int64_t)i))
            goto nomem;
    }
    for (size_t i = 0; i < m->n_links; i++) {
        const ckm_link *l = &m->links[i];
        assert(ckp_path_ok(l->path)); /* M1 */
        uint64_t ino = add_node(t, strdup(l->path), S_IFLNK | 0777, strlen(l->target), dirMtimeNs, -1);
        if (!ino || !(t->nodes[ino].target = strdup(l->target)))
            goto nomem;
    }
    link_parents(t);
    if (fill_children(t) != 0)
        goto nomem;
    free(t->dir_map);
    t->dir_map = NULL;
    *out = t;
    return CKFS_OK;

nomem:
    cki_free(t);
    return cku_errf(err, errCapacity, CKFS_ERR_NOMEM, "out of memory building the inode table");
}

void cki_free(cki_table *t)
{
    if (!t)
        return;
    for (uint64_t ino = 1; ino <= t->n; ino++) {
        free((char *)t->nodes[ino].path);
        free((char *)t->nodes[ino].target);
        free(t->nodes[ino].children);
    }
    free(t->nodes);
    free(t->dir_map);
    free(t);
}

const cki_node *cki_get(const cki_table *t, uint64_t ino)
{
    return ino >= 1 && ino <= t->n ? &t->nodes[ino] : NULL;
}

uint64_t cki_lookup(const cki_table *t, uint64_t parent, const char *name)
{
    const cki_node *d = cki_get(t, parent);
    if (!d || !S_ISDIR(d->mode))
        return 0;
    uint32_t lo = 0, hi = d->n_children;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, t->nodes[d->children[mid]].name);
        if (c == 0)
            return d->children[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return 0;
}

uint64_t cki_count(const cki_table *t) { return t->n; }

uint64_t cki_file_ino(const cki_table *t, size_t i) { return t->file_base + i; }
