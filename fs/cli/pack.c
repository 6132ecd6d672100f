/*
 * pack.c — `ckptfs pack`: store a model directory as a packed directory.
 *
 * Invariants (DESIGN §4):
 *  - the source is never modified, except that with --delete-source a file is
 *    unlinked after its packed copy is written, fsynced, renamed into place,
 *    its directory fsynced, and read back equal to the source byte for byte;
 *  - each packed file is written under a temporary name and renamed only
 *    after that read-back, so a kill at any moment leaves either no packed
 *    file or a complete, verified one;
 *  - DST/ckptfs.state records the source, encoding and the files DST is to
 *    hold, so rerunning the same command (on the source where it is now)
 *    resumes: complete packed files whose source is unchanged (or already
 *    deleted) are kept, leftovers are removed, and the manifest is rebuilt
 *    from the packed files themselves;
 *  - every name and every safetensors header is validated before anything
 *    is written or deleted; DST is locked (flock) for the run;
 *  - a source is deleted only if its name still holds the file that was read
 *    (device, inode, size, mtime); a source truncated while it is read is an
 *    error (source_map.h), not SIGBUS.
 *
 * The steps live by job: pack_source.c (SRC walked, names and headers
 * checked), pack_dst.c (DST created, locked, cleaned; its manifest),
 * pack_state.c (DST/ckptfs.state: resume and --force), pack_file.c (one
 * file, and the files in parallel).  This file runs them in order and prints
 * the summary; pack_internal.h is what they share.
 */
#define _GNU_SOURCE
#include "pack_internal.h"
#include "s3.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include "cmd_common.h"
#include "source_map.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* With --delete-source: remove source directories left empty, deepest
 * first.  @return how many were removed. */
static size_t remove_empty_dirs(pack_ctx *c)
{
    size_t n = 0;
    for (size_t i = c->list.n; i-- > 0;)
        if (c->list.v[i].is_dir) {
            char p[PATH_MAX];
            join_path(p, sizeof p, c->src_root, c->list.v[i].rel, "");
            cku_fault_point();
            n += rmdir(p) == 0;
        }
    return n;
}

/* With --delete-source, once the manifest that lists them is durable: remove
 * the source's links (those still holding the target packed; a link of
 * SRC is no file, so pack_files deleted none), before the directories
 * they leave empty.  @return 0, or -1 after naming one that could not go. */
int delete_links(pack_ctx *c)
{
    for (size_t i = 0; i < c->links.n; i++) {
        const src_entry *l = &c->links.v[i];
        char p[PATH_MAX], t[CKM_TARGET_MAX + 2];
        join_path(p, sizeof p, c->src_root, l->rel, "");
        ssize_t n = readlink(p, t, sizeof t - 1);
        if (n < 0 && errno == ENOENT)
            continue; /* gone already */
        if (n >= 0)
            t[n] = 0;
        cku_fault_point();
        if (n < 0 || strcmp(t, l->target) || unlink(p)) {
            fprintf(stderr, "ckptfs pack: %s: %s; kept (the pack lists the link as it was)\n", CKU_ESC(p),
                    n >= 0 && strcmp(t, l->target) ? "changed since it was packed" : strerror(errno));
            return -1;
        }
        c->links_deleted++;
    }
    return 0;
}

/* DST's directories, and its name and those above it, durable before a
 * packed file is (a source deleted once its packed file's own directory is
 * synced must not lose it to a crash that loses a directory's name above).
 * @return 0, or -1 after saying why. */
static int sync_dst_dirs(pack_ctx *c)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", c->dst);
    int rc = fsync(c->lock_fd) || cku_sync_dirs(p, 1);
    for (size_t i = 0; rc == 0 && i < c->list.n; i++)
        if (c->list.v[i].is_dir) {
            join_path(p, sizeof p, c->dst, c->list.v[i].rel, "");
            rc = fsync_at(c->lock_fd, c->list.v[i].rel);
        }
    if (dst_lost(c)) /* the directories synced above are those of DST's name */
        return -1;
    if (rc)
        fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(p), strerror(errno));
    return rc;
}

/* The final summary (stdout): the files the pack holds, their bytes ->
 * the pack's, saved, time, rate; files kept from an earlier run; what
 * --delete-source removed.  (The pack's files, not SRC's: a rerun after
 * --delete-source finds some sources gone, and said "packed 2 files: 800 kB
 * -> 1.60 MB (-100.3% saved)" of a pack of 4.) */
/* -v: each file of the pack, its original and packed sizes. */
static void print_files(const pack_ctx *c)
{
    for (size_t i = 0; i < c->list.n; i++) {
        const src_entry *e = &c->list.v[i];
        struct stat st;
        char o[16], p[16], sv[24];
        if (e->is_dir)
            continue;
        char rel[PATH_MAX];
        snprintf(rel, sizeof rel, "%s%s", e->rel, CKP_SUFFIX);
        if (fstatat(c->lock_fd, rel, &st, 0) == 0)
            printf("  %s: %s -> %s (%s)\n", CKU_ESC(e->rel), cku_human((uint64_t)e->st.st_size, o),
                   cku_human((uint64_t)st.st_size, p), cku_saved((uint64_t)e->st.st_size, (uint64_t)st.st_size, sv));
    }
}

/* --json: the summary as one object. */
static void print_summary_json(pack_ctx *c, double secs, uint64_t worked, size_t dirs_removed)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "command", "pack");
    cJSON_AddStringToObject(o, "source", c->o->src);
    cJSON_AddStringToObject(o, "packed", c->dst);
    cJSON_AddNumberToObject(o, "files", (double)c->n_packed);
    cJSON_AddNumberToObject(o, "original_bytes", (double)c->orig_bytes);
    cJSON_AddNumberToObject(o, "packed_bytes", (double)c->packed_bytes);
    cJSON_AddNumberToObject(o, "saved_bytes", (double)c->orig_bytes - (double)c->packed_bytes);
    cJSON_AddNumberToObject(o, "seconds", secs);
    cJSON_AddNumberToObject(o, "bytes_worked", (double)worked);
    cJSON_AddNumberToObject(o, "files_kept_from_earlier_run", (double)atomic_load(&c->kept));
    if (c->o->delete_source) {
        cJSON_AddNumberToObject(o, "deleted_files", (double)atomic_load(&c->deleted));
        cJSON_AddNumberToObject(o, "deleted_bytes", (double)atomic_load(&c->deleted_bytes));
        cJSON_AddNumberToObject(o, "deleted_links", (double)c->links_deleted);
        cJSON_AddNumberToObject(o, "deleted_dirs", (double)dirs_removed);
    }
    ckpt_json_print(o);
}

static void print_summary(pack_ctx *c, double secs, uint64_t worked, size_t dirs_removed)
{
    if (ckpt_json)
        return print_summary_json(c, secs, worked, dirs_removed);
    if (ckpt_verbosity >= 2)
        print_files(c);
    if (ckpt_verbosity < 1)
        return;
    char in[16], out[16], rate[24], del[16], saved[24];
    uint64_t total = c->orig_bytes;
    printf("packed %zu file%s: %s -> %s (%s) in %.1f s", c->n_packed, cku_s(c->n_packed), cku_human(total, in),
           cku_human(c->packed_bytes, out), cku_saved(total, c->packed_bytes, saved), secs);
    if (worked) /* the rate of the work done in this run only */
        printf(", %s", cku_human_rate(worked, secs, rate));
    uint64_t kept = atomic_load(&c->kept);
    if (kept)
        printf(" (%llu file%s already packed by an earlier run, kept)", (unsigned long long)kept, cku_s(kept));
    printf("\n");
    if (c->o->delete_source)
        printf("deleted %llu source files (%s)%s%.0zu%s and %zu empty source directories\n",
               (unsigned long long)atomic_load(&c->deleted), cku_human(atomic_load(&c->deleted_bytes), del),
               c->links_deleted ? ", " : "", c->links_deleted, c->links_deleted ? " symbolic links" : "", dirs_removed);
}

static uint64_t du_bytes;
static int du_add(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)p, (void)f;
    if (type == FTW_F)
        du_bytes += (uint64_t)st->st_blocks * 512;
    return 0;
}

uint64_t pack_estimate(const pack_ctx *c, uint64_t *largest)
{
    uint64_t est = 0;
    *largest = 0;
    for (size_t i = 0; i < c->list.n; i++) {
        const src_entry *e = &c->list.v[i];
        if (e->is_dir)
            continue;
        uint64_t size = (uint64_t)e->st.st_size;
        /* BF16 weights pack to ~70% (K15) or 75% (byte-split); other dtypes
         * and files are stored as they are at worst */
        uint64_t f = has_suffix(e->rel, ".safetensors") ? size / 4 * 3 + 512 : size + 512;
        est += f;
        if (f > *largest)
            *largest = f;
    }
    return est;
}

/* Free space for the pack, checked before anything is written: the
 * estimate (pack_estimate) less what DST already holds (a rerun keeps the
 * files packed before); with --delete-source on SRC's own file system, the
 * largest file's (sources go as their packed copies are done).
 * @return 0, or -1 after saying why. */
static int check_pack_space(const pack_ctx *c)
{
    uint64_t largest, need = pack_estimate(c, &largest);
    struct stat s, d;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", c->dst);
    for (char *slash; stat(parent, &d) != 0 && (slash = strrchr(parent, '/'));)
        slash[slash == parent] = 0;
    if (c->o->delete_source && stat(c->src_root, &s) == 0 && s.st_dev == d.st_dev)
        need = largest;
    if (c->o->remote) /* staged: a few files at a time (pack_s3.c) */
        need = largest * (uint64_t)c->o->remote->files_at_once;
    du_bytes = 0;
    if (stat(c->dst, &d) == 0)
        nftw(c->dst, du_add, 16, FTW_PHYS);
    need = need > du_bytes ? need - du_bytes : 0;
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "packing into %s", c->dst);
    return ckpt_check_space("pack", c->dst, need, what);
}

/* --dry-run: each file with what pack would do with it and its estimated
 * packed size, the safetensors files it would refuse (all of them, not the
 * first), the total and the free-space check.  Nothing is written.
 * @return the exit status: 0, or 1 with bad files or too little space. */
static int dry_run(pack_ctx *c)
{
    uint64_t total = 0, est = 0, largest;
    size_t bad = 0, files = 0;
    printf("%s -> %s (dry run: nothing is written)\n", c->o->src, c->dst);
    for (size_t i = 0; i < c->list.n; i++) {
        const src_entry *e = &c->list.v[i];
        if (e->is_dir)
            continue;
        char path[PATH_MAX], o[16], p[16];
        uint64_t size = (uint64_t)e->st.st_size, bf16 = 0;
        const char *how = "zstd, or stored as is";
        files++;
        total += size;
        if (has_suffix(e->rel, ".safetensors") && !c->o->skip_bad) {
            join_path(path, sizeof path, c->src_root, e->rel, "");
            cks_map sm;
            char why[512];
            st_header *h = NULL;
            if (cks_map_open(path, &sm, why, sizeof why))
                fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(path), why);
            else {
                h = check_safetensors(path, sm.p, sm.size); /* names what is wrong */
                cks_map_close(&sm);
            }
            if (!h) {
                printf("  %-40s %9s    BAD: not a valid safetensors file (see above)\n", CKU_ESC(e->rel),
                       cku_human(size, o));
                bad++;
                continue;
            }
            for (size_t t = 0; t < h->n_tensors; t++)
                if (h->tensors[t].dtype == 7) /* BF16 */
                    bf16 += h->tensors[t].end - h->tensors[t].begin;
            st_free(h);
            how = c->o->encoding == CKC_ENC_BSPLIT ? "safetensors: BF16 bytesplit, the rest zstd or as is"
                                                    : "safetensors: BF16 k15, the rest zstd or as is";
        }
        /* BF16 at ~70% (k15) or 75% (bytesplit) of its bytes, the rest whole */
        uint64_t f = size - bf16 + (c->o->encoding == CKC_ENC_BSPLIT ? bf16 / 4 * 3 : bf16 / 10 * 7) + 512;
        est += f;
        printf("  %-40s %9s -> ~%-9s %s\n", CKU_ESC(e->rel), cku_human(size, o), cku_human(f, p), how);
    }
    char a[16], b[16], sv[24];
    printf("%zu file%s: %s -> about %s (%s)\n", files, cku_s(files), cku_human(total, a), cku_human(est, b),
           cku_saved(total, est, sv));
    (void)pack_estimate(c, &largest);
    int space = check_pack_space(c) == 0;
    if (space)
        printf("free space: enough on %s's file system\n", c->dst);
    if (bad)
        printf("%zu bad file%s: pack would refuse (nothing packed) until each is removed, or stored as an "
               "opaque file with --skip-bad\n", bad, cku_s(bad));
    return bad || !space ? 1 : 0;
}

int ckpt_pack(const ckpt_pack_opts *o)
{
    if (cks3_is_url(o->dst)) /* staged here, then uploaded (pack_s3.c) */
        return ckpt_pack_s3(o);
    pack_ctx c = {.o = o, .lock_fd = -1};
    char src_real[PATH_MAX];
    int rc = 1, created = 0;
    if (setup_source(&c, src_real))
        goto out;
    if (resolve_path(o->dst, c.dst)) {
        fprintf(stderr, "ckptfs pack: %s: %s\n", o->dst, strerror(errno));
        goto out;
    }
    if (overlap(&c, src_real)) { /* the walk would pack DST, or --force clear SRC */
        fprintf(stderr, "ckptfs pack: %s and %s overlap\n", o->src, o->dst);
        goto out;
    }
    if (served_by_dst(&c)) /* SRC read through a mount of DST: packing would pull DST from under it */
        goto out;
    if (c.list.n) /* an emptied SRC (rerun after --delete-source) has no list: qsort(NULL) is UB */
        qsort(c.list.v, c.list.n, sizeof *c.list.v, cmp_entry);
    if (c.links.n)
        qsort(c.links.v, c.links.n, sizeof *c.links.v, cmp_entry);
    if (c.links_outside) /* stored as written: through a mount the kernel resolves them (format §7) */
        fprintf(stderr,
                "ckptfs pack: note: %zu symbolic links of %s point outside it; the pack keeps them as links (not "
                "what they point to), and a mount or unpack shows them pointing there\n",
                c.links_outside, CKU_ESC(o->src));
    uint64_t total;
    if (o->dry_run) {
        rc = check_names(&c) ? 1 : dry_run(&c);
        goto out;
    }
    if (check_names(&c) || validate_all(&c, &total) || check_pack_space(&c))
        goto out;
    atomic_init(&c.left, total);
    atomic_init(&c.kept, 0);
    atomic_init(&c.deleted, 0);
    atomic_init(&c.deleted_bytes, 0);
    if (open_dst(&c, &created) || prepare_dst(&c, src_real))
        goto out;
    c.writing = 1;
    remove_temps(c.lock_fd);
    c.progress = cku_progress_new("packing", total);
    size_t n_files = 0;
    for (size_t i = 0; i < c.list.n; i++) { /* directories first (a parent sorts before its children) */
        const src_entry *e = &c.list.v[i];
        char path[PATH_MAX];
        struct stat ds;
        join_path(path, sizeof path, c.dst, e->rel, "");
        n_files += !e->is_dir;
        if (!e->is_dir)
            continue;
        /* one there must be a directory itself: nothing is written through a
         * link in DST (its files would land elsewhere, and the manifest, which
         * readers follow no link to, would leave them out) */
        if (mkdirat(c.lock_fd, e->rel, 0700) &&
            (errno != EEXIST || fstatat(c.lock_fd, e->rel, &ds, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(ds.st_mode))) {
            if (!dst_lost(&c))
                fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(path),
                        errno != EEXIST ? strerror(errno)
                                        : S_ISLNK(ds.st_mode) ? "a symbolic link where the pack has a directory "
                                                                "(links inside a packed directory are not followed); "
                                                                "remove it"
                                                              : "not a directory; remove it");
            goto out;
        }
        /* the source directory's mode whatever the umask (the manifest
         * records it from here, and unpack and the mount give it back),
         * writable by the owner for a rerun */
        mode_t want = (e->st.st_mode & 07777) | 0700;
        int dfd = openat(c.lock_fd, e->rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0 || fstat(dfd, &ds) || ((ds.st_mode & 07777) != want && fchmod(dfd, want))) {
            if (!dst_lost(&c))
                fprintf(stderr, "ckptfs pack: %s: %s\n", CKU_ESC(path), strerror(errno));
            if (dfd >= 0)
                close(dfd);
            goto out;
        }
        close(dfd);
    }
    if (sync_dst_dirs(&c) || pack_files(&c, n_files))
        goto out;
    if (write_manifest(&c) || (o->delete_source && delete_links(&c)))
        goto out;
    size_t dirs_removed = o->delete_source && !c.single_file ? remove_empty_dirs(&c) : 0;
    double secs = cku_progress_seconds(c.progress);
    uint64_t worked = cku_progress_worked(c.progress);
    cku_progress_done(c.progress);
    c.progress = NULL;
    print_summary(&c, secs, worked, dirs_removed);
    rc = 0;
out:
    cku_progress_done(c.progress);
    if (rc && c.lock_fd >= 0)
        leave_dst(&c, created);
    if (c.lock_fd >= 0)
        close(c.lock_fd);
    list_free(&c.list);
    list_free(&c.links);
    cJSON_Delete(c.hold_links);
    return rc;
}
