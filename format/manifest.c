/*
 * manifest.c — load and write DST/ckptfs.manifest (docs/format.md §7).
 *
 * First line: "CKPTFS-MANIFEST 1 <xxh3 hex>", then the JSON whose hash that
 * is.  Loading checks the hash before parsing, and every path before use.
 */
#include "manifest.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST_MAGIC "CKPTFS-MANIFEST 1 "
#define MANIFEST_MAX (1u << 30)

int ckm_path_ok(const char *rel) { return ckp_path_ok(rel); }

#define merr cku_errf

void ckm_free(ckm_manifest *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_files; i++)
        free(m->files[i].path);
    for (size_t i = 0; i < m->n_dirs; i++)
        free(m->dirs[i].path);
    free(m->files);
    free(m->dirs);
    free(m);
}

static int get_int(const cJSON *o, const char *k, int64_t lo, int64_t hi, int64_t *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(j) || j->valuedouble < (double)lo || j->valuedouble > (double)hi ||
        j->valuedouble != (double)(int64_t)j->valuedouble)
        return -1;
    *v = (int64_t)j->valuedouble;
    return 0;
}

/* mtime_ns is a decimal string: nanosecond times exceed JSON's exact integers. */
static int get_mtime(const cJSON *o, int64_t *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, "mtime_ns");
    if (!cJSON_IsString(j))
        return -1;
    /* format §7: an optional '-' then 1-19 digits (strtoll alone would take
     * leading spaces and '+') */
    const char *d = j->valuestring + (j->valuestring[0] == '-');
    size_t nd = strspn(d, "0123456789");
    if (nd == 0 || nd > 19 || d[nd])
        return -1;
    char *end;
    errno = 0;
    long long t = strtoll(j->valuestring, &end, 10);
    if (*end || errno)
        return -1;
    *v = t;
    return 0;
}

static const char *get_path(const cJSON *o)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, "path");
    return cJSON_IsString(j) && ckm_path_ok(j->valuestring) ? j->valuestring : NULL;
}

static int parse_files(const cJSON *arr, ckm_manifest *m, const char *name, char *err, size_t cap)
{
    int n = cJSON_GetArraySize(arr);
    m->files = calloc(n ? (size_t)n : 1, sizeof *m->files);
    if (!m->files)
        return merr(err, cap, "%s: out of memory", name);
    const int64_t lim = (int64_t)1 << 53;
    for (const cJSON *e = arr->child; e; e = e->next) {
        ckm_file *f = &m->files[m->n_files];
        const char *p = get_path(e);
        const cJSON *sha = cJSON_GetObjectItemCaseSensitive(e, "sha256");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(e, "kind");
        int64_t size, mode, mtime;
        if (!p || !cJSON_IsString(sha) || cku_unhex(sha->valuestring, f->sha256, 32) ||
            get_int(e, "size", 0, lim, &size) || get_int(e, "mode", 0, 07777, &mode) ||
            get_mtime(e, &mtime) || !cJSON_IsString(kind) ||
            (strcmp(kind->valuestring, "safetensors") && strcmp(kind->valuestring, "blob")))
            return merr(err, cap, "%s: file entry %zu is invalid", name, m->n_files);
        if (!(f->path = strdup(p)))
            return merr(err, cap, "%s: out of memory", name);
        m->n_files++;
        f->size = (uint64_t)size;
        f->mode = (uint32_t)mode;
        f->mtime_ns = mtime;
        f->kind = strcmp(kind->valuestring, "safetensors") == 0 ? CKP_KIND_SAFETENSORS : CKP_KIND_BLOB;
    }
    return 0;
}

static int parse_dirs(const cJSON *arr, ckm_manifest *m, const char *name, char *err, size_t cap)
{
    int n = cJSON_GetArraySize(arr);
    m->dirs = calloc(n ? (size_t)n : 1, sizeof *m->dirs);
    if (!m->dirs)
        return merr(err, cap, "%s: out of memory", name);
    for (const cJSON *e = arr->child; e; e = e->next) {
        ckm_dir *d = &m->dirs[m->n_dirs];
        const char *p = get_path(e);
        int64_t mode;
        if (!p || get_int(e, "mode", 0, 07777, &mode))
            return merr(err, cap, "%s: directory entry %zu is invalid", name, m->n_dirs);
        if (!(d->path = strdup(p)))
            return merr(err, cap, "%s: out of memory", name);
        m->n_dirs++;
        d->mode = (uint32_t)mode;
    }
    return 0;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const ckm_file *)a)->path, ((const ckm_file *)b)->path);
}
static int cmp_dir(const void *a, const void *b)
{
    return strcmp(((const ckm_dir *)a)->path, ((const ckm_dir *)b)->path);
}

/* Names must be unique across files and directories, and every parent of an
 * entry must be a listed directory. */
static int check_tree(const ckm_manifest *m, const char *name, char *err, size_t cap)
{
    for (size_t i = 1; i < m->n_files; i++)
        if (!strcmp(m->files[i - 1].path, m->files[i].path))
            return merr(err, cap, "%s: duplicate file \"%s\"", name, m->files[i].path);
    for (size_t i = 1; i < m->n_dirs; i++)
        if (!strcmp(m->dirs[i - 1].path, m->dirs[i].path))
            return merr(err, cap, "%s: duplicate directory \"%s\"", name, m->dirs[i].path);
    for (size_t i = 0; i < m->n_files + m->n_dirs; i++) {
        const char *p = i < m->n_files ? m->files[i].path : m->dirs[i - m->n_files].path;
        const char *slash = strrchr(p, '/');
        if (i >= m->n_files) {
            ckm_dir key = {.path = (char *)p};
            ckm_file fkey = {.path = (char *)p};
            if (m->n_files && bsearch(&fkey, m->files, m->n_files, sizeof fkey, cmp_file))
                return merr(err, cap, "%s: \"%s\" is both a file and a directory", name, p);
            (void)key;
        }
        if (!slash)
            continue;
        char *parent = strndup(p, (size_t)(slash - p));
        ckm_dir key = {.path = parent};
        int found = parent && m->n_dirs && bsearch(&key, m->dirs, m->n_dirs, sizeof key, cmp_dir) != NULL;
        free(parent);
        if (!found)
            return merr(err, cap, "%s: parent directory of \"%s\" is not listed", name, p);
    }
    return 0;
}

static char *read_file(const char *path, size_t *size, char *err, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    char *buf = NULL;
    if (fd < 0 || fstat(fd, &st)) {
        merr(err, cap, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MANIFEST_MAX) {
        merr(err, cap, "%s: not a regular file of at most 1 GiB", path);
        goto out;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf || cku_pread_full(fd, buf, (size_t)st.st_size, 0)) {
        merr(err, cap, "%s: %s", path, buf ? strerror(errno) : "out of memory");
        free(buf);
        buf = NULL;
        goto out;
    }
    buf[st.st_size] = 0;
    *size = (size_t)st.st_size;
out:
    if (fd >= 0)
        close(fd);
    return buf;
}

/* The manifest of dst is missing: say what dst is and what to do. */
static int explain_missing(const char *dst, char *err, size_t cap)
{
    char state[4096];
    struct stat st;
    snprintf(state, sizeof state, "%s/%s", dst, CKP_STATE_NAME);
    if (stat(dst, &st))
        return merr(err, cap, "%s: %s", dst, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return merr(err, cap, "%s: not a packed directory (a packed directory is what `ckptfs pack` writes)",
                    dst);
    if (access(state, F_OK) == 0)
        return merr(err, cap,
                    "%s: unfinished pack (no %s yet): run the same `ckptfs pack` command again to finish it",
                    dst, CKP_MANIFEST_NAME);
    return merr(err, cap, "%s: not a packed directory (no %s): run `ckptfs pack SRC %s` first", dst,
                CKP_MANIFEST_NAME, dst);
}

int ckm_load(const char *dst, ckm_manifest **out, char *err, size_t cap)
{
    *out = NULL;
    char name[4096];
    snprintf(name, sizeof name, "%s/%s", dst, CKP_MANIFEST_NAME);
    if (access(name, F_OK) && (errno == ENOENT || errno == ENOTDIR))
        return explain_missing(dst, err, cap);
    size_t size = 0;
    char *buf = read_file(name, &size, err, cap);
    if (!buf)
        return -1;
    int rc = -1;
    cJSON *root = NULL;
    ckm_manifest *m = calloc(1, sizeof *m);
    const size_t hdr = strlen(MANIFEST_MAGIC) + 17;
    uint8_t want[8];
    if (size < hdr || memcmp(buf, MANIFEST_MAGIC, strlen(MANIFEST_MAGIC)) || buf[hdr - 1] != '\n') {
        merr(err, cap, "%s: not a ckptfs manifest (bad first line)", name);
        goto out;
    }
    buf[hdr - 1] = 0;
    if (cku_unhex(buf + strlen(MANIFEST_MAGIC), want, 8)) {
        merr(err, cap, "%s: bad checksum field", name);
        goto out;
    }
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h = h << 8 | want[i];
    if (ckc_hash64(buf + hdr, size - hdr) != h) {
        merr(err, cap, "%s: manifest is damaged (checksum mismatch)", name);
        goto out;
    }
    if (memchr(buf + hdr, 0, size - hdr) || !cku_utf8_ok(buf + hdr)) { /* JSON is UTF-8 (RFC 8259) */
        merr(err, cap, "%s: invalid manifest JSON (not UTF-8 text)", name);
        goto out;
    }
    root = cJSON_ParseWithLength(buf + hdr, size - hdr);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    const cJSON *dirs = cJSON_GetObjectItemCaseSensitive(root, "dirs");
    if (m && cJSON_IsNumber(fmt) && fmt->valuedouble > 1) {
        merr(err, cap, "%s: manifest format %g was written by a newer ckptfs; upgrade ckptfs to read it", name,
             fmt->valuedouble);
        goto out;
    }
    if (!m || !cJSON_IsNumber(fmt) || fmt->valuedouble != 1 || !cJSON_IsArray(files) || !cJSON_IsArray(dirs)) {
        merr(err, cap, "%s: %s", name, m ? "invalid manifest JSON or unknown version" : "out of memory");
        goto out;
    }
    if (parse_files(files, m, name, err, cap) || parse_dirs(dirs, m, name, err, cap))
        goto out;
    if (m->n_files)
        qsort(m->files, m->n_files, sizeof *m->files, cmp_file);
    if (m->n_dirs)
        qsort(m->dirs, m->n_dirs, sizeof *m->dirs, cmp_dir);
    if (check_tree(m, name, err, cap))
        goto out;
    *out = m;
    m = NULL;
    rc = 0;
out:
    cJSON_Delete(root);
    ckm_free(m);
    free(buf);
    return rc;
}

static cJSON *file_json(const ckm_file *f)
{
    char hex[65];
    cku_hex(f->sha256, 32, hex);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", f->path);
    cJSON_AddNumberToObject(o, "size", (double)f->size);
    cJSON_AddStringToObject(o, "sha256", hex);
    cJSON_AddNumberToObject(o, "mode", f->mode);
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)f->mtime_ns);
    cJSON_AddStringToObject(o, "mtime_ns", t);
    cJSON_AddStringToObject(o, "kind", f->kind == CKP_KIND_SAFETENSORS ? "safetensors" : "blob");
    return o;
}

int ckm_write(const char *dst, ckm_manifest *m, char *err, size_t cap)
{
    if (m->n_files)
        qsort(m->files, m->n_files, sizeof *m->files, cmp_file);
    if (m->n_dirs)
        qsort(m->dirs, m->n_dirs, sizeof *m->dirs, cmp_dir);
    cJSON *root = cJSON_CreateObject(), *files = cJSON_CreateArray(), *dirs = cJSON_CreateArray();
    cJSON_AddNumberToObject(root, "format", 1);
    cJSON_AddItemToObject(root, "files", files);
    cJSON_AddItemToObject(root, "dirs", dirs);
    for (size_t i = 0; i < m->n_files; i++)
        cJSON_AddItemToArray(files, file_json(&m->files[i]));
    for (size_t i = 0; i < m->n_dirs; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", m->dirs[i].path);
        cJSON_AddNumberToObject(o, "mode", m->dirs[i].mode);
        cJSON_AddItemToArray(dirs, o);
    }
    char *json = cJSON_Print(root);
    cJSON_Delete(root);
    if (!json)
        return merr(err, cap, "%s: out of memory", dst);
    size_t jl = strlen(json);
    char head[64], tmp[4096], final[4096];
    snprintf(head, sizeof head, "%s%016llx\n", MANIFEST_MAGIC, (unsigned long long)ckc_hash64(json, jl));
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dst, CKP_MANIFEST_NAME);
    snprintf(final, sizeof final, "%s/%s", dst, CKP_MANIFEST_NAME);
    int rc = -1, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || cku_pwrite_full(fd, head, strlen(head), 0) ||
        cku_pwrite_full(fd, json, jl, strlen(head)) || (cku_fault_point(), fsync(fd))) {
        merr(err, cap, "%s: %s", tmp, strerror(errno));
    } else if ((cku_fault_point(), rename(tmp, final)) || cku_fsync_dir(dst)) {
        merr(err, cap, "%s: %s", final, strerror(errno));
    } else {
        rc = 0;
    }
    if (fd >= 0)
        close(fd);
    if (rc)
        unlink(tmp);
    free(json);
    return rc;
}
