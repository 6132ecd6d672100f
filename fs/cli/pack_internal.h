/*
 * pack_internal.h — what the files of `ckptfs pack` share (pack.c describes
 * the command and its invariants).  Not installed; nothing outside cli/pack*.c
 * includes it.
 */
#ifndef CKPTFS_PACK_INTERNAL_H
#define CKPTFS_PACK_INTERNAL_H

#include "commands.h"
#include "container.h"
#include "manifest.h"
#include "progress.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define STATE_NAME CKP_STATE_NAME
#define TMP_SUFFIX ".ckpt.tmp"
#define ASIDE_PREFIX ".ckptfs-deleting." /* a source while --delete-source deletes it (pack_file.c) */

typedef struct {
    char *rel;        /* relative path */
    int is_dir;
    int is_st;        /* a file that holds a valid safetensors header, whatever its name */
    int as_blob;      /* --skip-bad: a .safetensors name without a valid one, stored as is */
    char *target;     /* links (pack_ctx.links): the target text, as readlink gave it */
    struct stat st;   /* of the file (a SRC named by a link: followed); of a link: lstat */
} src_entry;

typedef struct {
    src_entry *v;
    size_t n, cap;
} src_list;

typedef struct {
    const ckpt_pack_opts *o;
    char src_root[PATH_MAX];  /* directory holding the files */
    int single_file;          /* SRC was one file */
    char dst[PATH_MAX];       /* resolved: absolute, no symbolic links */
    int src_missing;          /* SRC is gone (a rerun after a finished single-file --delete-source) */
    int lock_fd;              /* DST opened and flock'ed for the run, or -1: every
                               * file of DST is made, renamed and removed through
                               * it (the *at calls), so a run whose DST was
                               * removed or replaced writes nothing into the
                               * directory at that name now (dst_lost) */
    atomic_int dst_lost_said; /* dst_lost said so once */
    size_t dst_above;         /* a DST this run made: the length of the part of its path that
                               * was there before (parents made with it go with it) */
    int writing;              /* DST was made ready (prepare_dst): a failure from here on
                               * leaves what was packed for a rerun */
    src_list list;            /* SRC's directories and files, sorted */
    src_list links;           /* SRC's symbolic links, sorted: stored as links (format
                               * §7), never followed, deleted by --delete-source once
                               * the manifest that lists them is durable */
    cJSON *hold_links;        /* the links the pack is to list (write_state): SRC's,
                               * and those an interrupted --delete-source removed */
    size_t links_deleted;     /* --delete-source: source links removed */
    size_t links_outside;     /* links whose target leaves SRC (said once) */
    cku_progress *progress;
    int jobs_each;            /* encoder / read-back threads per file in flight */
    atomic_uint_fast64_t left; /* source bytes of the files not yet packed */
    /* for the summary: files kept from an earlier run, sources deleted */
    atomic_uint_fast64_t kept, deleted, deleted_bytes;
    uint64_t packed_bytes;     /* of the finished pack, manifest included */
    uint64_t orig_bytes;       /* original bytes of the files the finished pack holds */
    size_t n_packed;           /* files the finished pack holds (sources deleted by an
                                * earlier run included) */
} pack_ctx;

/* SHA-256 of p[0..size), computed by sha_thread (in a thread or called). */
typedef struct {
    const uint8_t *p;
    uint64_t size;
    uint8_t sha[32];
} sha_job;

/* A manifest being built by scan_dst from the packed files DST holds. */
typedef struct {
    ckm_manifest m;
    size_t cap_files, cap_dirs;
    uint64_t packed;     /* bytes of the packed files */
} mf_build;

/* 1 if a .ckpt that opened with status s is a packed file (even damaged,
 * or of a newer version): one of ckptfs's, which --force may replace; not
 * a file of someone else's that happens to be named so (pack_state.c). */
int ckpt_packed_status_ours(ckp_status s);

static inline int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static inline int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

static inline void join_path(char *out, size_t cap, const char *a, const char *b, const char *suffix)
{
    snprintf(out, cap, "%s/%s%s", a, b, suffix);
}

/* A pack whose destination is elsewhere (s3://, pack_s3.c): DST is then a
 * staging directory that holds the state, the directories and at most
 * files_at_once packed files, each sent on (and removed) as soon as it is
 * made and read back; what the pack holds is what the remote side holds.
 * Every hook may be called from several threads at once. */
typedef struct ckpt_pack_remote ckpt_pack_remote;
struct ckpt_pack_remote {
    const char *url;     /* where the pack goes, for messages */
    int files_at_once;   /* files packed (and so staged) at once */
    /* Open the remote copy of the packed file final_rel (REL.ckpt), checked
     * as a local one is at open (header, TOC, chunk indexes), bound to the
     * version it found; whole: every chunk is to be read (a read-back), in
     * large blocks.  @return 0 with *r, 1 if it is not there (or not a
     * readable packed file of rel), -1 after saying why (unreachable). */
    int (*open)(ckpt_pack_remote *rm, const char *final_rel, int whole, ckp_reader **r);
    /* 1 if r's remote copy is still the version it was opened on. */
    int (*unchanged)(ckpt_pack_remote *rm, const char *final_rel, const ckp_reader *r);
    /* Send DST's packed file final_rel (complete, read back) on.  @return 0,
     * or -1 after saying why. */
    int (*send)(ckpt_pack_remote *rm, pack_ctx *c, const char *final_rel);
    /* DST's state was written: make it durable remotely, before any file is
     * sent or any source deleted.  @return 0, or -1 after saying why. */
    int (*state_written)(ckpt_pack_remote *rm, pack_ctx *c);
    /* Add the pack's files (those sent or found there in this run) to b. */
    int (*add_files)(ckpt_pack_remote *rm, pack_ctx *c, mf_build *b);
    /* DST's manifest was written: send it on, last.  @return 0, or -1. */
    int (*manifest_written)(ckpt_pack_remote *rm, pack_ctx *c);
};

/* pack_source.c */
void list_free(src_list *l);
int link_leaves_tree(const char *rel, const char *target);
int delete_links(pack_ctx *c);
int cmp_entry(const void *a, const void *b);
st_header *check_safetensors(const char *path, const uint8_t *p, uint64_t size);
/* The packed size of what c->list holds, estimated from the sources
 * (safetensors files at 3/4 of their size, as BF16 weights at most take;
 * anything else at its full size), and in *largest that of its largest file. */
uint64_t pack_estimate(const pack_ctx *c, uint64_t *largest);
int validate_all(pack_ctx *c, uint64_t *total);
int resolve_path(const char *path, char *out);
int setup_source(pack_ctx *c, char *src_real);
int overlap(const pack_ctx *c, const char *src_real);
int served_by_dst(const pack_ctx *c);
int check_names(const pack_ctx *c);

/* pack_file.c */
/* The extents pack writes for a file of size bytes at p: with h (a
 * safetensors file) its header as ZSTD-or-RAW, each BF16 tensor in enc with
 * its last dimension (archive's contexts), every other tensor ZSTD-or-RAW;
 * without, one ZSTD-or-RAW extent.  progress may be NULL. */
ckp_status ckpt_add_extents(ckp_writer *w, uint32_t enc, const uint8_t *p, uint64_t size, const st_header *h,
                            cku_progress *progress);
void *sha_thread(void *arg);
void tmp_rel(char *out, size_t cap, const char *rel);
int restore_aside(const char *dir, const char *base);
int pack_files(pack_ctx *c, size_t n_files);

/* pack_state.c */
int prepare_dst(pack_ctx *c, const char *src_real);
/* repack: make the state of the pack open at dfd (dst, for messages), if it
 * has one, say that its files are being converted to enc (finished 0: before
 * the first is changed) or are all in enc (1: after the last, each durable).
 * 0, or -1 after saying why. */
int repack_note_state(int dfd, const char *dst, uint32_t enc, int finished);

/* pack_dst.c */
int open_dst(pack_ctx *c, int *created);
int dst_lost(pack_ctx *c);
int narrow_dst_mode(pack_ctx *c);
DIR *opendir_at(int dfd, const char *rel);
int fsync_at(int dfd, const char *rel);
void leave_dst(pack_ctx *c, int created);
void remove_temps(int dfd);
int scan_dst(pack_ctx *c, const char *rel, mf_build *b);
/* Append to b: a directory (the first n bytes of path, mode), or a file
 * (*f, its path copied).  @return 0, or -1 out of memory (b unchanged). */
int mf_add_dir(mf_build *b, const char *path, size_t n, uint32_t mode);
int mf_add_file(mf_build *b, const ckm_file *f);
void mf_free(mf_build *b);
int write_manifest(pack_ctx *c);

#endif
