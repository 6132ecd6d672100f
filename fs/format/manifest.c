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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST_MAGIC "CKPTFS-MANIFEST 1 "
#define MANIFEST_MAX (1u << 30)
#define CKM_FORMAT_MAX 2 /* 1: files and dirs; 2 (format 1.1): links too */

uint32_t ckm_file_mode(const ckm_file *f) { return f->mode & 07777u & ~(uint32_t)(S_ISUID | S_ISGID); }

int ckm_path_ok(const char *rel) { return ckp_path_ok(rel); }

/* A manifest failure with its message (util.h, cku_errf). */
#define merr(err, cap, s, ...) ((ckp_status)cku_errf((err), (cap), (s), __VA_ARGS__))

void ckm_free(ckm_manifest *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_files; i++)
        free(m->files[i].path);
    for (size_t i = 0; i < m->n_dirs; i++)
        free(m->dirs[i].path);
    for (size_t i = 0; i < m->n_links; i++) {
        free(m->links[i].path);
        free(m->links[i].target);
    }
    free(m->files);
    free(m->dirs);
    free(m->links);
    free(m);
}

/* The getters below read one field of a manifest entry: @return NULL, or
 * what is wrong with it, for a message that names the field. */
static const char *get_int(const cJSON *o, const char *k, int64_t hi, const char *range, int64_t *v)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!j)
        return "is missing";
    if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > (double)hi ||
        j->valuedouble != (double)(int64_t)j->valuedouble)
        return range;
    *v = (int64_t)j->valuedouble;
    return NULL;
}

/* mtime_ns is a decimal string: nanosecond times exceed JSON's exact integers. */
static const char *get_mtime(const cJSON *o, int64_t *v)
{
    static const char grammar[] = "is not a string of an optional '-' and 1 to 19 digits within int64";
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, "mtime_ns");
    if (!j)
        return "is missing";
    if (!cJSON_IsString(j))
        return grammar;
    /* format §7: an optional '-' then 1-19 digits (strtoll alone would take
     * leading spaces and '+') */
    const char *d = j->valuestring + (j->valuestring[0] == '-');
    size_t nd = strspn(d, "0123456789");
    if (nd == 0 || nd > 19 || d[nd])
        return grammar;
    char *end;
    errno = 0;
    long long t = strtoll(j->valuestring, &end, 10);
    if (*end || errno)
        return grammar;
    *v = t;
    return NULL;
}

static const char *get_path(const cJSON *o, const char **p)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, "path");
    if (!j)
        return "is missing";
    if (!cJSON_IsString(j))
        return "is not a string";
    *p = j->valuestring;
    return ckp_path_problem(j->valuestring);
}

static const char *get_string(const cJSON *o, const char *k, const char **s)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    *s = cJSON_IsString(j) ? j->valuestring : NULL;
    return !j ? "is missing" : !*s ? "is not a string" : NULL;
}

/* Report field k of entry idx of the array kind ("file", "directory") as
 * invalid for reason why, naming the entry's path if it has a valid one. */
static ckp_status bad_entry(char *err, size_t cap, const char *name, const char *kind, size_t idx,
                            const cJSON *e, const char *k, const char *why)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "path");
    char esc[CKU_ESC_NAME];
    if (cJSON_IsString(p))
        cku_escape(p->valuestring, esc, sizeof esc);
    if (!strcmp(k, "path") && cJSON_IsString(p))
        return merr(err, cap, CKP_ERR_CORRUPT, "%s: %s entry %zu: \"path\" \"%s\" %s", name, kind, idx, esc, why);
    if (cJSON_IsString(p) && ckp_path_ok(p->valuestring))
        return merr(err, cap, CKP_ERR_CORRUPT, "%s: %s entry %zu (\"%s\"): \"%s\" %s", name, kind, idx, esc, k,
                    why);
    if (!*k)
        return merr(err, cap, CKP_ERR_CORRUPT, "%s: %s entry %zu %s", name, kind, idx, why);
    return merr(err, cap, CKP_ERR_CORRUPT, "%s: %s entry %zu: \"%s\" %s", name, kind, idx, k, why);
}

/* The parsers of one entry: slot (a ckm_file, ckm_dir, ckm_link) filled
 * from the entry e.  @return NULL, or the name of the bad field ("" for the
 * entry itself) with what is wrong in *why, or "" with *why NULL when out of
 * memory (nothing of slot left to free). */
typedef const char *(*entry_parser)(const cJSON *e, void *slot, const char **why);

static const char *file_entry(const cJSON *e, void *slot, const char **why)
{
    ckm_file *f = slot;
    const char *path, *sha, *kind;
    int64_t size, mode, mtime;
    if (!cJSON_IsObject(e))
        return *why = "is not an object", "";
    if ((*why = get_path(e, &path)) || (*why = ckp_file_path_problem(path)))
        return "path";
    if ((*why = get_int(e, "size", (int64_t)1 << 53, "is not an integer from 0 to 2^53", &size)))
        return "size";
    if ((*why = get_string(e, "sha256", &sha)) ||
        (*why = cku_unhex(sha, f->sha256, 32) ? "is not 64 lowercase hex digits" : NULL))
        return "sha256";
    if ((*why = get_int(e, "mode", 07777, "is not an integer from 0 to 07777", &mode)))
        return "mode";
    if ((*why = get_mtime(e, &mtime)))
        return "mtime_ns";
    if ((*why = get_string(e, "kind", &kind)) ||
        (*why = strcmp(kind, "safetensors") && strcmp(kind, "blob") ? "is neither \"safetensors\" nor \"blob\"" : NULL))
        return "kind";
    f->size = (uint64_t)size;
    f->mode = (uint32_t)mode;
    f->mtime_ns = mtime;
    f->kind = strcmp(kind, "safetensors") == 0 ? CKP_KIND_SAFETENSORS : CKP_KIND_BLOB;
    return (f->path = strdup(path)) ? NULL : "";
}

static const char *dir_entry(const cJSON *e, void *slot, const char **why)
{
    ckm_dir *d = slot;
    const char *path;
    int64_t mode;
    if (!cJSON_IsObject(e))
        return *why = "is not an object", "";
    if ((*why = get_path(e, &path)))
        return "path";
    if ((*why = get_int(e, "mode", 07777, "is not an integer from 0 to 07777", &mode)))
        return "mode";
    d->mode = (uint32_t)mode;
    return (d->path = strdup(path)) ? NULL : "";
}

/* Links (format 2, §7): {"path": L, "target": T}, T any text of 1 to
 * CKM_TARGET_MAX bytes (no NUL: parse_root refused \u0000). */
static const char *link_entry(const cJSON *e, void *slot, const char **why)
{
    ckm_link *l = slot;
    const char *path, *t;
    if (!cJSON_IsObject(e))
        return *why = "is not an object", "";
    if ((*why = get_path(e, &path)))
        return "path";
    if ((*why = get_string(e, "target", &t)) ||
        (*why = !*t || strlen(t) > CKM_TARGET_MAX ? "is not 1 to 4095 bytes" : NULL))
        return "target";
    if ((l->path = strdup(path)) && (l->target = strdup(t)))
        return NULL;
    free(l->path);
    return "";
}

/* A zeroed array for the entries of arr, of size bytes each; NULL when out of memory. */
static void *new_entries(const cJSON *arr, size_t size)
{
    int n = cJSON_GetArraySize(arr);
    return calloc(n ? (size_t)n : 1, size);
}

/* Parse the entries of arr (kind: "file", "directory", "link") into v, a
 * new_entries array (NULL: out of memory), each by parse, counting in *n the
 * ones parsed (what ckm_free frees). */
static ckp_status parse_entries(const cJSON *arr, void *v, size_t *n, size_t size, entry_parser parse,
                                const char *kind, const char *name, char *err, size_t cap)
{
    if (!v)
        return merr(err, cap, CKP_ERR_NOMEM, "%s: out of memory", name);
    for (const cJSON *e = arr->child; e; e = e->next) {
        const char *why = NULL, *field = parse(e, (char *)v + *n * size, &why);
        if (field && !why)
            return merr(err, cap, CKP_ERR_NOMEM, "%s: out of memory", name);
        if (field)
            return bad_entry(err, cap, name, kind, *n, e, field, why);
        (*n)++;
    }
    return CKP_OK;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const ckm_file *)a)->path, ((const ckm_file *)b)->path);
}
static int cmp_dir(const void *a, const void *b)
{
    return strcmp(((const ckm_dir *)a)->path, ((const ckm_dir *)b)->path);
}
static int cmp_link(const void *a, const void *b)
{
    return strcmp(((const ckm_link *)a)->path, ((const ckm_link *)b)->path);
}

/* m's files, directories and links each sorted by path (the finds bsearch them). */
static void sort_entries(ckm_manifest *m)
{
    if (m->n_files)
        qsort(m->files, m->n_files, sizeof *m->files, cmp_file);
    if (m->n_dirs)
        qsort(m->dirs, m->n_dirs, sizeof *m->dirs, cmp_dir);
    if (m->n_links)
        qsort(m->links, m->n_links, sizeof *m->links, cmp_link);
}

const ckm_link *ckm_find_link(const ckm_manifest *m, const char *path)
{
    ckm_link key = {.path = (char *)path};
    return m->n_links ? bsearch(&key, m->links, m->n_links, sizeof key, cmp_link) : NULL;
}

static int has_dir(const ckm_manifest *m, const char *path)
{
    ckm_dir key = {.path = (char *)path};
    return m->n_dirs && bsearch(&key, m->dirs, m->n_dirs, sizeof key, cmp_dir) != NULL;
}

const ckm_file *ckm_find_file(const ckm_manifest *m, const char *path)
{
    ckm_file key = {.path = (char *)path};
    return m->n_files ? bsearch(&key, m->files, m->n_files, sizeof key, cmp_file) : NULL;
}

/* Names must be unique across files, directories and links, and every parent
 * of an entry must be a listed directory. */
static ckp_status check_tree(const ckm_manifest *m, const char *name, char *err, size_t cap)
{
    char esc[CKU_ESC_NAME];
    for (size_t i = 0; i < m->n_links; i++) {
        const char *p = m->links[i].path, *why = i && !strcmp(m->links[i - 1].path, p) ? "is listed twice as a link"
                                                 : ckm_find_file(m, p)                     ? "is both a file and a link"
                                                 : has_dir(m, p) ? "is both a directory and a link" : NULL;
        if (why)
            return merr(err, cap, CKP_ERR_CORRUPT, "%s: \"%s\" %s", name, cku_escape(p, esc, sizeof esc), why);
    }
    for (size_t i = 1; i < m->n_files; i++)
        if (!strcmp(m->files[i - 1].path, m->files[i].path))
            return merr(err, cap, CKP_ERR_CORRUPT, "%s: duplicate file \"%s\"", name,
                        cku_escape(m->files[i].path, esc, sizeof esc));
    for (size_t i = 1; i < m->n_dirs; i++)
        if (!strcmp(m->dirs[i - 1].path, m->dirs[i].path))
            return merr(err, cap, CKP_ERR_CORRUPT, "%s: duplicate directory \"%s\"", name,
                        cku_escape(m->dirs[i].path, esc, sizeof esc));
    for (size_t i = 0; i < m->n_files + m->n_dirs + m->n_links; i++) {
        const char *p = i < m->n_files                ? m->files[i].path
                        : i < m->n_files + m->n_dirs ? m->dirs[i - m->n_files].path
                                                      : m->links[i - m->n_files - m->n_dirs].path;
        const char *slash = strrchr(p, '/');
        if (i >= m->n_files && i < m->n_files + m->n_dirs) {
            if (ckm_find_file(m, p))
                return merr(err, cap, CKP_ERR_CORRUPT, "%s: \"%s\" is both a file and a directory", name,
                            cku_escape(p, esc, sizeof esc));
        }
        if (!slash)
            continue;
        char *parent = strndup(p, (size_t)(slash - p));
        if (!parent)
            return merr(err, cap, CKP_ERR_NOMEM, "%s: out of memory", name);
        int found = has_dir(m, parent);
        free(parent);
        if (!found)
            return merr(err, cap, CKP_ERR_CORRUPT, "%s: parent directory of \"%s\" is not listed", name,
                        cku_escape(p, esc, sizeof esc));
    }
    return CKP_OK;
}

/* Read dst/name whole (cku_open_regular: a link or FIFO there is refused,
 * CKP_ERR_FORMAT as the container reader's refused opens).  @return its bytes
 * (NUL-terminated, *size of them), or NULL with *st and err set. */
static char *read_file(const char *dst, const char *name, const char *path, size_t *size, ckp_status *st,
                       char *err, size_t cap)
{
    struct stat sb;
    char *buf = NULL, why[512];
    int fd = cku_open_regular(dst, name, &sb, why, sizeof why);
    if (fd < 0) {
        *st = merr(err, cap, errno == ENOMEM ? CKP_ERR_NOMEM : cku_open_refused(errno) ? CKP_ERR_FORMAT : CKP_ERR_IO,
                   "%s: %s", path, why);
        goto out;
    }
    if (sb.st_size > MANIFEST_MAX) {
        *st = merr(err, cap, CKP_ERR_CORRUPT, "%s: larger than 1 GiB", path);
        goto out;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (!buf || cku_pread_full(fd, buf, (size_t)sb.st_size, 0)) {
        *st = merr(err, cap, buf ? CKP_ERR_IO : CKP_ERR_NOMEM, "%s: %s", path, buf ? strerror(errno) : "out of memory");
        free(buf);
        buf = NULL;
        goto out;
    }
    buf[sb.st_size] = 0;
    *size = (size_t)sb.st_size;
out:
    if (fd >= 0)
        close(fd);
    return buf;
}

/* The manifest of dst is missing: say what dst is and what to do. */
static ckp_status explain_missing(const char *dst, char *err, size_t cap)
{
    char state[4096];
    struct stat st;
    snprintf(state, sizeof state, "%s/%s", dst, CKP_STATE_NAME);
    if (stat(dst, &st))
        return merr(err, cap, CKP_ERR_IO, "%s: %s", dst, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return merr(err, cap, CKP_ERR_FORMAT,
                    "%s: not a packed directory (a packed directory is what `ckptfs pack` writes)", dst);
    if (access(state, F_OK) == 0)
        return merr(err, cap, CKP_ERR_FORMAT,
                    "%s: unfinished pack (no %s yet): run the same `ckptfs pack` command again to finish it",
                    dst, CKP_MANIFEST_NAME);
    return merr(err, cap, CKP_ERR_FORMAT, "%s: not a packed directory (no %s): run `ckptfs pack SRC %s` first", dst,
                CKP_MANIFEST_NAME, dst);
}

/* The first line of the manifest text buf[0..size) (format §7, R50): magic
 * and the XXH3 of the rest.  @return the JSON's offset in buf (buf's first
 * line is cut there), or 0 with err set (CKP_ERR_CORRUPT). */
static size_t check_first_line(char *buf, size_t size, const char *name, char *err, size_t cap)
{
    const size_t hdr = strlen(MANIFEST_MAGIC) + 17;
    uint8_t want[8];
    if (size < hdr || memcmp(buf, MANIFEST_MAGIC, strlen(MANIFEST_MAGIC)) || buf[hdr - 1] != '\n')
        return merr(err, cap, CKP_ERR_CORRUPT, "%s: not a ckptfs manifest (bad first line)", name), 0;
    buf[hdr - 1] = 0;
    if (cku_unhex(buf + strlen(MANIFEST_MAGIC), want, 8))
        return merr(err, cap, CKP_ERR_CORRUPT, "%s: bad checksum field", name), 0;
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h = h << 8 | want[i];
    if (ckc_hash64(buf + hdr, size - hdr) != h)
        return merr(err, cap, CKP_ERR_CORRUPT, "%s: manifest is damaged (checksum mismatch)", name), 0;
    return hdr;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A member name that some object in j (at any depth) holds twice, or NULL.
 * cJSON keeps both members and its lookups find the first, while other
 * parsers keep the last: one manifest, two meanings (format §7, R56).
 * *nomem is set if the check could not be made. */
static const char *repeated_member(const cJSON *j, int *nomem)
{
    size_t n = 0, k = 0;
    for (const cJSON *c = j->child; c; c = c->next)
        n++;
    if (cJSON_IsObject(j) && n > 1) {
        const char **names = malloc(n * sizeof *names), *dup = NULL;
        if (!names)
            return *nomem = 1, NULL;
        for (const cJSON *c = j->child; c; c = c->next)
            names[k++] = c->string;
        qsort(names, n, sizeof *names, cmp_name);
        for (k = 1; k < n && !dup; k++)
            if (!strcmp(names[k - 1], names[k]))
                dup = names[k];
        free(names);
        if (dup)
            return dup;
    }
    for (const cJSON *c = j->child; c; c = c->next) { /* depth: cJSON's nesting limit */
        const char *dup = repeated_member(c, nomem);
        if (dup || *nomem)
            return dup;
    }
    return NULL;
}

/* The JSON text json[0..n) parsed (R56: UTF-8, RFC 8259; a \u0000 would cut
 * a path short) into an object whose "format" this reader knows (R53).
 * at0: the text's offset in the file, for messages.  @return the root, or
 * NULL with *st and err set. */
static cJSON *parse_root(const char *json, size_t n, size_t at0, const char *name, ckp_status *st, char *err,
                         size_t cap)
{
    const char *nul = memchr(json, 0, n), *why;
    size_t at = nul ? (size_t)(nul - json) : 0;
    if (nul || (why = cku_json_lex(json, n, 0, &at))) {
        *st = merr(err, cap, CKP_ERR_CORRUPT, "%s: invalid manifest JSON: %s at byte %zu", name,
                   nul ? "a NUL byte" : why, at0 + at);
        return NULL;
    }
    const char *end = NULL, *dup = NULL;
    int nomem = 0;
    cJSON *root = cJSON_ParseWithLengthOpts(json, n, &end, 0);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    /* one JSON text: cJSON stops after the first value and ignores the rest */
    size_t rest = root && end ? (size_t)(end - json) + strspn(end, " \t\r\n") : n;
    if (root && rest < n)
        *st = merr(err, cap, CKP_ERR_CORRUPT, "%s: invalid manifest JSON: bytes after the JSON object at byte %zu",
                   name, at0 + rest);
    else if (!cJSON_IsObject(root))
        *st = merr(err, cap, CKP_ERR_CORRUPT, "%s: invalid manifest JSON: %s", name,
                   root ? "not an object" : "a syntax error");
    else if ((dup = repeated_member(root, &nomem)) || nomem)
        *st = nomem ? merr(err, cap, CKP_ERR_NOMEM, "%s: out of memory", name)
                    : merr(err, cap, CKP_ERR_CORRUPT, "%s: invalid manifest JSON: an object has the member \"%s\" twice",
                           name, cku_escape(dup, (char[CKU_ESC_NAME]){0}, CKU_ESC_NAME));
    else if (!cJSON_IsNumber(fmt))
        *st = merr(err, cap, CKP_ERR_CORRUPT, "%s: invalid manifest JSON: \"format\" is %s", name,
                   fmt ? "not a number" : "missing");
    else if (fmt->valuedouble > CKM_FORMAT_MAX)
        *st = merr(err, cap, CKP_ERR_VERSION,
                   "%s: manifest format %g was written by a newer ckptfs; upgrade ckptfs to read it", name,
                   fmt->valuedouble);
    else if (fmt->valuedouble != 1 && fmt->valuedouble != 2)
        *st = merr(err, cap, CKP_ERR_VERSION, "%s: unknown manifest format %g (this ckptfs reads formats 1 and 2)",
                   name, fmt->valuedouble);
    else
        return root;
    cJSON_Delete(root);
    return NULL;
}

ckp_status ckm_load(const char *dst, ckm_manifest **out, char *err, size_t cap)
{
    *out = NULL;
    char name[4096];
    snprintf(name, sizeof name, "%s/%s", dst, CKP_MANIFEST_NAME);
    struct stat lst;
    if (lstat(name, &lst) && (errno == ENOENT || errno == ENOTDIR))
        return explain_missing(dst, err, cap);
    size_t size = 0;
    ckp_status st = CKP_ERR_CORRUPT;
    char *buf = read_file(dst, CKP_MANIFEST_NAME, name, &size, &st, err, cap);
    if (!buf)
        return st;
    st = ckm_parse(name, buf, size, out, err, cap);
    free(buf);
    return st;
}

ckp_status ckm_parse(const char *name, char *buf, size_t size, ckm_manifest **out, char *err, size_t cap)
{
    *out = NULL;
    size_t hdr;
    ckp_status st = CKP_ERR_CORRUPT;
    if (size > MANIFEST_MAX)
        return merr(err, cap, CKP_ERR_CORRUPT, "%s: larger than 1 GiB", name);
    cJSON *root = NULL;
    ckm_manifest *m = calloc(1, sizeof *m);
    if (!m) {
        st = merr(err, cap, CKP_ERR_NOMEM, "%s: out of memory", name);
        goto out;
    }
    if (!(hdr = check_first_line(buf, size, name, err, cap)) ||
        !(root = parse_root(buf + hdr, size - hdr, hdr, name, &st, err, cap)))
        goto out;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    const cJSON *dirs = cJSON_GetObjectItemCaseSensitive(root, "dirs");
    /* "links" means something from format 2 on; in format 1 it is an unknown key (ignored) */
    int v2 = cJSON_GetObjectItemCaseSensitive(root, "format")->valuedouble == 2;
    const cJSON *links = v2 ? cJSON_GetObjectItemCaseSensitive(root, "links") : NULL;
    const char *bad = !cJSON_IsArray(files) ? "files" : !cJSON_IsArray(dirs) ? "dirs"
                      : v2 && !cJSON_IsArray(links) ? "links" : NULL;
    if (bad) {
        const cJSON *b = !strcmp(bad, "files") ? files : !strcmp(bad, "dirs") ? dirs : links;
        st = merr(err, cap, CKP_ERR_CORRUPT, "%s: invalid manifest JSON: \"%s\" is %s", name, bad,
                  !b ? "missing" : "not an array");
        goto out;
    }
    m->files = new_entries(files, sizeof *m->files);
    m->dirs = new_entries(dirs, sizeof *m->dirs);
    m->links = links ? new_entries(links, sizeof *m->links) : NULL;
    if ((st = parse_entries(files, m->files, &m->n_files, sizeof *m->files, file_entry, "file", name, err, cap)) ||
        (st = parse_entries(dirs, m->dirs, &m->n_dirs, sizeof *m->dirs, dir_entry, "directory", name, err, cap)) ||
        (links &&
         (st = parse_entries(links, m->links, &m->n_links, sizeof *m->links, link_entry, "link", name, err, cap))))
        goto out;
    sort_entries(m);
    if ((st = check_tree(m, name, err, cap)) != CKP_OK)
        goto out;
    *out = m;
    m = NULL;
out:
    cJSON_Delete(root);
    ckm_free(m);
    return st;
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

ckp_status ckm_write(const char *dst, ckm_manifest *m, char *err, size_t cap)
{
    int dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return merr(err, cap, CKP_ERR_IO, "%s: %s", dst, strerror(errno));
    ckp_status st = ckm_write_at(dfd, dst, m, CKM_MODE_UMASK, err, cap);
    close(dfd);
    return st;
}

ckp_status ckm_write_at(int dfd, const char *dst, ckm_manifest *m, unsigned mode, char *err, size_t cap)
{
    sort_entries(m);
    cJSON *root = cJSON_CreateObject(), *files = cJSON_CreateArray(), *dirs = cJSON_CreateArray();
    /* the lowest format that holds it (format §10): 1 unless it has links */
    cJSON_AddNumberToObject(root, "format", m->n_links ? 2 : 1);
    cJSON_AddItemToObject(root, "files", files);
    cJSON_AddItemToObject(root, "dirs", dirs);
    if (m->n_links) {
        cJSON *links = cJSON_CreateArray();
        cJSON_AddItemToObject(root, "links", links);
        for (size_t i = 0; i < m->n_links; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "path", m->links[i].path);
            cJSON_AddStringToObject(o, "target", m->links[i].target);
            cJSON_AddItemToArray(links, o);
        }
    }
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
        return merr(err, cap, CKP_ERR_NOMEM, "%s: out of memory", dst);
    size_t jl = strlen(json);
    char head[64], tmp[4096], final[4096];
    const char *tmp_name = "." CKP_MANIFEST_NAME ".tmp", *final_name = CKP_MANIFEST_NAME;
    snprintf(head, sizeof head, "%s%016llx\n", MANIFEST_MAGIC, (unsigned long long)ckc_hash64(json, jl));
    snprintf(tmp, sizeof tmp, "%s/%s", dst, tmp_name);
    snprintf(final, sizeof final, "%s/%s", dst, final_name);
    ckp_status st = CKP_OK;
    unlinkat(dfd, tmp_name, 0); /* O_EXCL below: never written through a link or into another file's inode */
    int fd = openat(dfd, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    mode == CKM_MODE_UMASK ? 0644 : 0600);
    if (fd < 0 || (mode != CKM_MODE_UMASK && fchmod(fd, (mode_t)mode)) || cku_pwrite_full(fd, head, strlen(head), 0) ||
        cku_pwrite_full(fd, json, jl, strlen(head)) || (cku_fault_point(), fsync(fd)))
        st = merr(err, cap, CKP_ERR_IO, "%s: %s", tmp, strerror(errno));
    else if ((cku_fault_point(), renameat(dfd, tmp_name, dfd, final_name)) || (cku_fault_point(), fsync(dfd)))
        st = merr(err, cap, CKP_ERR_IO, "%s: %s", final, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (st != CKP_OK && fd >= 0)
        unlinkat(dfd, tmp_name, 0);
    free(json);
    return st;
}
