/*
 * pack_state.c — DST/ckptfs.state, which lets a rerun of `ckptfs pack`
 * resume, and the checks that decide whether DST may be resumed, refused, or
 * (with --force) cleared without losing the only copy of a file.
 */
#define _GNU_SOURCE
#include "pack_internal.h"
#include "source_map.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- DST state ----------------------------------------------------------- */

/* DST/ckptfs.state says what DST is being made from, so that rerunning the
 * command resumes, from wherever the source now is:
 *   "source"   SRC's absolute path when the last run started;
 *   "format"   k15, bytesplit or archive;
 *   "deletes"  true once a --delete-source run started: DST may then hold
 *              the only copy of a file, and --force must not drop it;
 *   "files"    the files DST is to hold, sorted by path: {"path", "size",
 *              "mtime_ns" (a string)}: the source's, and those whose source
 *              is gone but whose packed file DST holds;
 *   "links"    the symbolic links its manifest is to list: {"path",
 *              "target"}: the source's, and after a --delete-source run
 *              those recorded that the source no longer has (a run killed
 *              while it removed them: they are in no packed file, so this
 *              is where a rerun finds them);
 *   "repacking" true while `ckptfs repack` converts DST's packed files to
 *              "format" (repack.c): they may be in several encodings until
 *              it finishes and removes this; pack neither resumes nor
 *              clears (without --force) such a DST.  repack sets "format"
 *              to the new encoding, so that a rerun of the pack in it
 *              resumes and one in the old encoding is refused.
 * A rerun resumes if SRC is the recorded path, or (a moved source) if SRC's
 * files are all recorded with the same size and mtime and every recorded
 * file missing from SRC is held by DST. */

static const char *enc_name(uint32_t enc) { return ckc_encoding_name(enc); }

static cJSON *read_state_at(int dfd)
{
    int fd = openat(dfd, STATE_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    char *buf = NULL;
    cJSON *o = NULL;
    if (fd >= 0 && !fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size < (256 << 20) &&
        (buf = malloc((size_t)st.st_size + 1)) && !cku_pread_full(fd, buf, (size_t)st.st_size, 0)) {
        buf[st.st_size] = 0;
        o = cJSON_Parse(buf);
    }
    free(buf);
    if (fd >= 0)
        close(fd);
    return o;
}

static cJSON *read_state(pack_ctx *c) { return read_state_at(c->lock_fd); }

/* Replace the state of the directory open at dfd by txt (NULL: out of
 * memory) as pack writes it: a temporary synced, renamed over the state, the
 * directory synced.  0, or -1 with errno. */
static int put_state(int dfd, const char *txt)
{
    const char *tmp = "." STATE_NAME ".tmp";
    unlinkat(dfd, tmp, 0); /* O_EXCL: never written through a link */
    int fd = txt ? openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600) : -1, rc = -1;
    if (!txt)
        errno = ENOMEM;
    if (fd >= 0 && !cku_pwrite_full(fd, txt, strlen(txt), 0) && (cku_fault_point(), !fsync(fd)) &&
        (cku_fault_point(), !renameat(dfd, tmp, dfd, STATE_NAME)) && (cku_fault_point(), !fsync(dfd)))
        rc = 0;
    if (fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return rc;
}

/* 1 if DST holds the packed file of rel (a pack sent on: the remote side,
 * a readable packed file of rel). */
static int held_by_dst(pack_ctx *c, const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s%s", rel, CKP_SUFFIX);
    ckpt_pack_remote *rm = c->o->remote;
    ckp_reader *r;
    if (!rm)
        return faccessat(c->lock_fd, p, F_OK, 0) == 0;
    if (rm->open(rm, p, 0, &r) != 0)
        return 0;
    ckp_close(r);
    return 1;
}

static cJSON *file_item(const char *rel, uint64_t size, int64_t mtime)
{
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)mtime);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", rel);
    cJSON_AddNumberToObject(f, "size", (double)size);
    cJSON_AddStringToObject(f, "mtime_ns", t);
    return f;
}

/* Walk the recorded files (rec: the state's "files", sorted; may be NULL)
 * and SRC's together.  @return 1 if every source file is recorded with the
 * same size and mtime and every recorded file missing from SRC is held by
 * DST (only where deletes, the state's "deletes", says a --delete-source run
 * may have removed it: else it was removed from SRC by someone, and DST is
 * no longer its pack), else 0 with the first difference in why.  With out,
 * append to it the files DST is to hold now (see above), in order. */
static int walk_recorded(pack_ctx *c, const cJSON *rec, int deletes, cJSON *out, char *why, size_t cap)
{
    const cJSON *r = rec ? rec->child : NULL;
    size_t i = 0;
    int same = rec != NULL;
    if (!rec)
        snprintf(why, cap, "its state lists no files");
    while (r || i < c->list.n) {
        const src_entry *e = i < c->list.n ? &c->list.v[i] : NULL;
        if (e && e->is_dir) {
            i++;
            continue;
        }
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(r, "path");
        const char *rrel = cJSON_IsString(rp) ? rp->valuestring : NULL;
        int d = !r ? 1 : !e ? -1 : !rrel ? -1 : strcmp(rrel, e->rel);
        if (d < 0) { /* recorded, gone from SRC */
            int packed = rrel && held_by_dst(c, rrel), held = deletes && packed;
            if (!held && same)
                snprintf(why, cap, packed ? "%s is no longer in the source" : "%s is neither in the source nor packed",
                         rrel ? CKU_ESC(rrel) : "an entry");
            same &= held;
            if (held && out)
                cJSON_AddItemToArray(out, cJSON_Duplicate(r, 1));
            r = r->next;
            continue;
        }
        if (d > 0 && same)
            snprintf(why, cap, "%s is not one of its files", CKU_ESC(e->rel));
        if (d == 0) {
            const cJSON *sz = cJSON_GetObjectItemCaseSensitive(r, "size");
            const cJSON *mt = cJSON_GetObjectItemCaseSensitive(r, "mtime_ns");
            int eq = cJSON_IsNumber(sz) && sz->valuedouble == (double)e->st.st_size && cJSON_IsString(mt) &&
                     strtoll(mt->valuestring, NULL, 10) == mtime_ns(&e->st);
            if (!eq && same)
                snprintf(why, cap, "%s differs in size or time from the file it holds", CKU_ESC(e->rel));
            same &= eq;
            r = r->next;
        }
        if (d > 0)
            same = 0;
        if (out)
            cJSON_AddItemToArray(out, file_item(e->rel, (uint64_t)e->st.st_size, mtime_ns(&e->st)));
        i++;
    }
    return same;
}

/* 1 if the source has an entry (file, directory or link) named rel. */
static int src_has(const pack_ctx *c, const char *rel)
{
    src_entry key = {.rel = (char *)rel};
    return (c->list.n && bsearch(&key, c->list.v, c->list.n, sizeof key, cmp_entry)) ||
           (c->links.n && bsearch(&key, c->links.v, c->links.n, sizeof key, cmp_entry));
}

/* The links DST is to list (see above), into c->hold_links; old: the state found. */
static cJSON *hold_links(pack_ctx *c, const cJSON *old)
{
    cJSON *out = cJSON_CreateArray();
    for (size_t i = 0; out && i < c->links.n; i++) {
        cJSON *l = cJSON_CreateObject();
        cJSON_AddStringToObject(l, "path", c->links.v[i].rel);
        cJSON_AddStringToObject(l, "target", c->links.v[i].target);
        cJSON_AddItemToArray(out, l);
    }
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(old, "links");
    if (!out || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(old, "deletes")))
        return out;
    for (const cJSON *r = cJSON_IsArray(rec) ? rec->child : NULL; r; r = r->next) {
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "path"));
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "target"));
        if (p && t && ckp_path_ok(p) && *t && strlen(t) <= CKM_TARGET_MAX && !src_has(c, p))
            cJSON_AddItemToArray(out, cJSON_Duplicate(r, 1));
    }
    return out;
}

/* Write DST/ckptfs.state for this run; old: the state found (or NULL). */
static int write_state(pack_ctx *c, const char *src_real, const cJSON *old)
{
    char path[PATH_MAX], why[64];
    snprintf(path, sizeof path, "%s/%s", c->dst, STATE_NAME);
    cJSON *o = cJSON_CreateObject(), *files = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "source", src_real);
    cJSON_AddStringToObject(o, "format", enc_name(c->o->encoding));
    cJSON_AddBoolToObject(o, "deletes",
                          c->o->delete_source || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(old, "deletes")));
    walk_recorded(c, cJSON_GetObjectItemCaseSensitive(old, "files"),
                  cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(old, "deletes")), files, why, sizeof why);
    cJSON_AddItemToObject(o, "files", files);
    cJSON_Delete(c->hold_links);
    c->hold_links = hold_links(c, old);
    cJSON_AddItemToObject(o, "links", cJSON_Duplicate(c->hold_links, 1));
    char *txt = c->hold_links ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    int rc = put_state(c->lock_fd, txt);
    if (rc && !dst_lost(c))
        fprintf(stderr, "ckptfs pack: %s: %s\n", path, strerror(errno));
    free(txt);
    if (!rc && c->o->remote) /* durable where the pack goes before anything is sent or deleted */
        rc = c->o->remote->state_written(c->o->remote, c);
    return rc;
}

/* 1 if the state st says DST is a pack of this source in this format (see
 * above), else 0 with why. */
static int state_matches(pack_ctx *c, const cJSON *st, const char *src_real, char *why, size_t cap)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(st, "source");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(st, "format");
    snprintf(why, cap, "it holds a pack of %s (%s)", cJSON_IsString(s) ? CKU_ESC(s->valuestring) : "?",
             cJSON_IsString(f) ? CKU_ESC(f->valuestring) : "?");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "repacking"))) {
        const char *to = cJSON_IsString(f) ? CKU_ESC(f->valuestring) : "?";
        snprintf(why, cap, "a repack of it to %s did not finish (run ckptfs repack --format %s on it again)", to,
                 to);
        return 0;
    }
    if (!cJSON_IsString(f) || strcmp(f->valuestring, enc_name(c->o->encoding)))
        return 0;
    int same_path = cJSON_IsString(s) && !strcmp(s->valuestring, src_real);
    int deletes = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "deletes")), gone = 0;
    /* a file it records that SRC no longer has, and no --delete-source run
     * to have removed it: it is not this source's pack any more (a rerun,
     * --force too, kept the file in the pack, and verify --against SRC
     * found it differed); walk_recorded says which */
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(st, "files");
    for (const cJSON *r = rec && !deletes && !c->src_missing ? rec->child : NULL; r && !gone; r = r->next) {
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "path"));
        gone = p && !src_has(c, p);
    }
    if (same_path && !c->src_missing && !gone)
        return 1;
    size_t n = strlen(why);
    /* a source moved elsewhere is there (an emptied one too: a rerun of an
     * interrupted --delete-source on it resumes); one that is not is no
     * source (a typo in SRC resumed the pack and exited 0, 'packed 4
     * files', and the state named the typo) */
    if (!same_path && c->src_missing) {
        snprintf(why + n, cap - n, " and %s does not exist", CKU_ESC(src_real));
        return 0;
    }
    /* nor is a directory without a file unless a --delete-source run may
     * have emptied it: pack alone deletes nothing, and `pack EMPTY DST`
     * (a typo naming another, empty directory) resumed and exited 0 */
    size_t files = 0;
    for (size_t i = 0; i < c->list.n; i++)
        files += !c->list.v[i].is_dir;
    if (!same_path && !files && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "deletes"))) {
        snprintf(why + n, cap - n, " and %s holds no file", CKU_ESC(src_real));
        return 0;
    }
    snprintf(why + n, cap - n, " and ");
    return walk_recorded(c, rec, deletes, NULL, why + n + 5, cap - n - 5);
}

/* 1 if name in the directory open at dfd (lstat st) is a packed file, even
 * a damaged one or of a newer version: a .ckpt that is not (a PyTorch
 * Lightning checkpoint is named so) was put there by someone else. */
static int is_packed_file(int dfd, const char *name, const struct stat *st)
{
    ckp_reader *r;
    char err[512];
    ckp_status s = S_ISREG(st->st_mode) ? ckp_open_in(dfd, ".", name, &r, err, sizeof err) : CKP_ERR_FORMAT;
    if (s == CKP_OK)
        ckp_close(r);
    return ckpt_packed_status_ours(s);
}

int ckpt_packed_status_ours(ckp_status s)
{
    return s == CKP_OK || s == CKP_ERR_VERSION || s == CKP_ERR_CORRUPT || s == CKP_ERR_CHUNK;
}

/* Remove what a packed directory holds (for --force), in the directory
 * open at dfd: packed files, the manifest, the state, temporaries, and
 * directories left empty. */
static int clear_dst(int dfd, int top)
{
    DIR *d = opendir_at(dfd, NULL);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW))
            continue;
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0 && clear_dst(sub, 0) == 0)
                unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
            else
                rc = -1; /* what it kept is not ours: say so */
            if (sub >= 0)
                close(sub);
        } else if ((has_suffix(e->d_name, CKP_SUFFIX) && is_packed_file(dirfd(d), e->d_name, &st)) ||
                   has_suffix(e->d_name, TMP_SUFFIX) ||
                   (top && (!strcmp(e->d_name, CKP_MANIFEST_NAME) || !strcmp(e->d_name, STATE_NAME)))) {
            if (unlinkat(dirfd(d), e->d_name, 0))
                rc = -1;
        } else {
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

/* Empty, or holding only the temporary of a first write_state that was
 * interrupted (a kill right after DST was created must not block the rerun). */
static int dir_is_empty(int dfd)
{
    DIR *d = opendir_at(dfd, NULL);
    if (!d)
        return 0;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "." STATE_NAME ".tmp"))
            empty = 0;
    closedir(d);
    return empty;
}

/* For --force over the pack described by state st: 0 if clearing DST loses
 * no file, -1 after saying which one it would lose.  DST can hold the only
 * copy of a file once a --delete-source run started on it (or when it has no
 * state to say otherwise); each packed file must then have its original in
 * SRC: the same path, size and SHA-256. */
static int force_loses_nothing(pack_ctx *c, const cJSON *st)
{
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(st, "deletes");
    if (cJSON_IsFalse(del))
        return 0;
    if (c->o->remote) { /* its packed files are remote: not compared here */
        fprintf(stderr, "ckptfs pack: %s: --force refused: a --delete-source run deleted sources, so it may hold "
                "the only copy of some; unpack it first, or remove it yourself\n", c->o->remote->url);
        return -1;
    }
    mf_build b = {0};
    int rc = scan_dst(c, "", &b);
    for (size_t i = 0; rc == 0 && i < b.m.n_files; i++) {
        const ckm_file *f = &b.m.files[i];
        src_entry key = {.rel = f->path};
        const src_entry *e = c->list.n ? bsearch(&key, c->list.v, c->list.n, sizeof key, cmp_entry) : NULL;
        char src_path[PATH_MAX];
        join_path(src_path, sizeof src_path, c->src_root, f->path, "");
        cks_map sm;
        sha_job sj = {0};
        if (e && !e->is_dir && (uint64_t)e->st.st_size == f->size && cks_map_open(src_path, &sm, NULL, 0) == 0) {
            sj.p = sm.p;
            sj.size = sm.size;
            sha_thread(&sj);
            if (cks_map_truncated(&sm))
                sj.sha[0] ^= 1;
            cks_map_close(&sm);
        }
        if (!e || memcmp(sj.sha, f->sha256, 32) || sj.size != f->size) {
            fprintf(stderr,
                    "ckptfs pack: %s: --force refused: %s/%s%s may hold the only copy of %s (a --delete-source "
                    "run deleted sources); unpack it first or remove it yourself\n",
                    c->dst, c->dst, CKU_ESC(f->path), CKP_SUFFIX, CKU_ESC(f->path));
            rc = -1;
        }
    }
    if (rc && !b.m.n_files)
        fprintf(stderr, "ckptfs pack: %s: --force refused: cannot read what it holds\n", c->dst);
    /* links: only its manifest and state hold one whose source link is gone */
    const cJSON *links = cJSON_GetObjectItemCaseSensitive(st, "links");
    for (const cJSON *l = cJSON_IsArray(links) ? links->child : NULL; rc == 0 && l; l = l->next) {
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "path"));
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "target"));
        src_entry key = {.rel = (char *)p};
        const src_entry *e = p && c->links.n ? bsearch(&key, c->links.v, c->links.n, sizeof key, cmp_entry) : NULL;
        if (p && (!e || !t || strcmp(e->target, t))) {
            fprintf(stderr,
                    "ckptfs pack: %s: --force refused: it may hold the only record of the symbolic link %s (a "
                    "--delete-source run deleted sources); unpack it first or remove it yourself\n",
                    c->dst, CKU_ESC(p));
            rc = -1;
        }
    }
    mf_free(&b);
    return rc;
}

/* Make DST (created and locked by open_dst) ready: new, resumable, or
 * (with --force) cleared. */
int prepare_dst(pack_ctx *c, const char *src_real)
{
    if (dir_is_empty(c->lock_fd) && !c->src_missing)
        return narrow_dst_mode(c) || write_state(c, src_real, NULL);
    cJSON *st = read_state(c);
    char why[PATH_MAX + 256];
    int m = st ? state_matches(c, st, src_real, why, sizeof why) : -1, rc = -1;
    if (m == 1) { /* resume, recording where the source is now */
        rc = write_state(c, src_real, st);
        goto out;
    }
    if (c->src_missing) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", c->o->src, strerror(ENOENT));
        goto out;
    }
    int is_pack = m == 0 || faccessat(c->lock_fd, CKP_MANIFEST_NAME, F_OK, 0) == 0;
    if (!is_pack) { /* --force or not: never clear what ckptfs did not write */
        fprintf(stderr,
                "ckptfs pack: %s: exists, is not empty and is not a packed directory; pack into a new or empty\n"
                "  directory (--force only replaces an earlier pack)\n",
                c->dst);
        goto out;
    }
    if (!c->o->force) {
        fprintf(stderr, "ckptfs pack: %s: already exists and %s; use --force to replace it\n",
                c->o->remote ? c->o->remote->url : c->dst, m == 0 ? why : "holds a finished pack"); /* not the stage */
        goto out;
    }
    if (force_loses_nothing(c, st))
        goto out;
    if (clear_dst(c->lock_fd, 1)) {
        fprintf(stderr,
                "ckptfs pack: %s: refusing to overwrite: it holds files that ckptfs did not write (kept; the\n"
                "  packed files of the earlier pack were removed); move them away, or pack into a new directory\n",
                c->dst);
        goto out;
    }
    rc = narrow_dst_mode(c) || write_state(c, src_real, NULL) ? -1 : 0;
out:
    cJSON_Delete(st);
    return rc;
}

/* ---- repack ----------------------------------------------------------------
 * `ckptfs repack` converts a finished pack's files in place: its state (if
 * it has one) must then name the new encoding, or a rerun of the pack in it
 * is refused ("it holds a pack of SRC (k15)") and one in the old encoding
 * resumes over files in the new (and packs new sources in the old). */

int repack_note_state(int dfd, const char *dst, uint32_t enc, int finished)
{
    cJSON *st = read_state_at(dfd);
    if (!cJSON_IsObject(st)) { /* none (a pack copied without it): none to keep true */
        cJSON_Delete(st);
        return 0;
    }
    const char *was = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "format"));
    int marked = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "repacking"));
    int rc = 0;
    if (!was || strcmp(was, enc_name(enc)) || marked == finished) {
        cJSON *f = cJSON_CreateString(enc_name(enc));
        if (!cJSON_ReplaceItemInObjectCaseSensitive(st, "format", f) && !cJSON_AddItemToObject(st, "format", f))
            cJSON_Delete(f);
        cJSON_DeleteItemFromObjectCaseSensitive(st, "repacking");
        if (!finished)
            cJSON_AddTrueToObject(st, "repacking");
        char *txt = cJSON_Print(st);
        if ((rc = put_state(dfd, txt)))
            fprintf(stderr, "ckptfs repack: %s/%s: %s\n", CKU_ESC(dst), STATE_NAME, strerror(errno));
        free(txt);
    }
    cJSON_Delete(st);
    return rc;
}
