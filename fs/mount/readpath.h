/*
 * readpath.h — the mount daemon's read path without FUSE (DESIGN §2, §7).
 *
 * Everything a read(ino, off, len) needs, as plain C over the inode table,
 * the container reader and the chunk cache: loading the packed directory
 * (manifest + tree), opening its packed files once, decoding chunks into the
 * cache (with SIGBUS from a shrunken mapping turned into EIO), sequential-read
 * detection, decode-ahead and disk-readahead hints, and the pieces of a reply
 * (cache entries held until the reply is out).  fuse_ll.c only translates
 * kernel requests into these calls, so all of this is unit-tested without a
 * mount (tests/unit/test_readpath.c).
 */
#ifndef CKFS_READPATH_H
#define CKFS_READPATH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "chunk_cache.h"
#include "container.h"
#include "inode_table.h"
#include "manifest.h"
#include "mount_opts.h"

#define CKFS_MAX_IOV 1000          /* pieces in one reply: below IOV_MAX, leaving room for the header */

struct ckfs_decoded;
struct ckfs_s3;

/* A packed file, opened and bound to its manifest entry at mount time
 * (ckfs_open_all) and kept open until unmount.  What it was when bound is
 * kept: the mount serves that file, or one that passes re-validation
 * against it (identity.h).  Each open of the virtual file and each chunk
 * decoded from disk checks that its path below the packed directory still
 * names that file (device, inode) and that the file has the same size,
 * mtime and ctime (decodes: at most every 10 ms per file, and after every
 * failed one); once it does not, the file there is re-validated: if it
 * passes it is served from then on, if not, the refusal is logged (once
 * until it is served again), every open and read of the file fails with
 * EIO (changed) while that file is there, and ckfs_ctx.on_change is
 * called. */
struct ckfs_retired;
typedef struct {
    pthread_mutex_t lock;          /* serializes the first open and the identity checks */
    _Atomic(ckp_reader *) r;       /* replaced only by a re-validated file's */
    int open_err;                  /* remembered damage (EIO) after a failed open; by lock */
    char *at;                      /* its absolute path (dst/path.ckpt), for the check */
    struct stat bound;             /* fstat of r's descriptor when bound (set before r); by lock */
    atomic_int changed;            /* EIO while the file at its path is refused */
    struct stat refused;           /* by lock: the version refused last (while changed) */
    int refused_errno;             /* by lock: 0, or why its path could not be looked at then */
    struct ckfs_retired *retired;  /* by lock: readers replaced by re-validated files */
    unsigned n_retired;            /* by lock */
    _Atomic uint64_t checked_ns;   /* CLOCK_MONOTONIC_COARSE of the last check by a decode */
    _Atomic(struct ckfs_decoded *) decoded; /* drop_packed: which chunks were
                                    * decoded (set on the first decode) */
    atomic_int dfd1;               /* drop_packed: r's file opened O_DIRECT, + 1
                                    * (0: not yet, -1: cannot) */
} ckfs_mfile;

struct ckfs_ofile;

/* The mounted directory.  Immutable after ckfs_ctx_load but for the readers
 * of files (opened once, by their lock), the cache, the counters and the
 * list of open files. */
typedef struct ckfs_ctx {
    ckfs_mount_opts o;
    char *dst;                     /* absolute path of the packed directory */
    ckm_manifest *m;
    cki_table *t;
    ckfs_mfile *files;             /* one per manifest file */
    ckcache *cache;                /* from ckfs_cache_start */
    struct ckw_set *windows;       /* drop_packed: O_DIRECT read-ahead (plane_window.h),
                                    * s3://: the network windows; from
                                    * ckfs_cache_start; NULL: none */
    struct ckfs_s3 *s3;            /* PACKED is s3://BUCKET/PREFIX (s3_mount.h), or NULL */
    uid_t uid;
    gid_t gid;
    uint64_t total_size;
    atomic_ulong reads, read_bytes, big_reads; /* big: >= 512 KiB */
    atomic_ulong decoded_bytes, decode_errors; /* by fill_chunk */
    atomic_ulong shared_ahead;     /* s3://: tensors fetched ahead of readers sharing them */
    pthread_mutex_t ofiles_lock;
    struct ckfs_ofile *ofiles;     /* every open file (by ofiles_lock): libfuse
                                    * sends no release for files still open at
                                    * unmount (fusermount3 -uz); ckfs_ctx_free
                                    * frees them */
    /* Called once for each packed file found changed while mounted, on the
     * thread that found it (a FUSE request's or a prefetch worker's; no lock
     * held); NULL: nothing.  daemon.c drops the kernel's cached pages of
     * its inode. */
    void (*on_change)(void *arg, uint32_t file);
    void *on_change_arg;
} ckfs_ctx;

/* Sequential-read detection of one open file (ckfs_ahead_next). */
typedef struct {
    uint64_t next_off;             /* end of the furthest recent read */
    uint64_t run_start;            /* where the current sequential run began */
    unsigned seq;                  /* near-sequential reads in a row */
    uint64_t ahead_to;             /* decode-ahead requested up to here */
    uint64_t hint_to;              /* disk readahead hinted up to here */
    uint64_t hint_max;             /* hint at most this far past a read; 0: 16 MiB
                                    * (an s3:// mount's network windows go further) */
    unsigned streamer;             /* s3://: its process streamed another file to its
                                    * end: a run from offset 0 is a stream at once */
    unsigned streamed;             /* a stream reached the end of the file */
} ckfs_ahead;

/* What one read asks for ahead of it: decode the chunks holding original
 * bytes [from, to) on the prefetch workers, and hint the disk for the
 * packed bytes that [hfrom, hto) decode from (each empty when from >= to). */
typedef struct {
    uint64_t from, to, hfrom, hto;
} ckfs_ahead_plan;

/* Update a (zeroed at open) for a read of [off, end) in a file of fsize
 * bytes whose byte end-1 lies in the extent [xstart, xend), and say what to
 * do ahead of it, decoding at most depth bytes past it (the prefetch
 * option).  wstart: with a->hint_max set (s3://), a run that began at or
 * before it (and before xstart) is a stream (ckfs_stream_start; UINT64_MAX:
 * none).  Pure: the caller holds the lock of a's open file. */
void ckfs_ahead_next(ckfs_ahead *a, uint64_t depth, uint64_t off, uint64_t end, uint64_t fsize,
                     uint64_t xstart, uint64_t xend, uint64_t wstart, ckfs_ahead_plan *p);

/* A run that began at or before the offset returned streams the file when
 * it reads extent e of r: it read whole tensors (named extents) of at least
 * CKFS_STREAM_MIN bytes in all before e.  Looks back at most
 * CKFS_STREAM_EXTENTS extents.  @return that offset, or UINT64_MAX (none:
 * e is the first tensor, or those before it are too few or too small). */
#define CKFS_STREAM_MIN (8ull << 20)
#define CKFS_STREAM_EXTENTS 64u
uint64_t ckfs_stream_start(const ckp_reader *r, uint32_t e);

/* An open file. */
typedef struct ckfs_ofile {
    ckfs_ctx *c;
    struct ckfs_ofile *prev, *next; /* in c->ofiles, by c->ofiles_lock */
    uint32_t file;                 /* index in the manifest */
    pid_t pid;                     /* the process that opened it (ckfs_file_owner), or 0 */
    pthread_mutex_t lock;
    ckfs_ahead ahead;              /* by lock */
} ckfs_ofile;

/* The bytes of one read: n pieces, piece i is iov[i] inside cache entry e[i]
 * (held until ckfs_pieces_release); total bytes in all.  A read of more
 * than CKFS_MAX_IOV chunks is copied instead, as it goes: one piece, buf,
 * its e[0] NULL, so that a request holds at most CKFS_MAX_IOV entries (a
 * 1 MiB read of one-byte chunks held 2^20 of them, ~170 MiB). */
typedef struct {
    ckcache_entry *e_small[32], **e;
    struct iovec iov_small[32], *iov;
    size_t n, cap, total;
    char *buf;                     /* the copied bytes, or NULL */
} ckfs_pieces;

/* Messages of the daemon: stderr, or syslog once daemonized, or the file
 * descriptor of -o log= (ckfs_log_to_fd).  ckfs_info: at LOG_INFO. */
void ckfs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ckfs_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ckfs_log_to_syslog(void);
void ckfs_log_to_fd(int fd);

/* Load c->o.dst's manifest and build the tree (c->o set by the caller, the
 * rest zero).  @return CKFS_OK, or with a message naming the directory in
 * err: CKFS_ERR_IO (it cannot be resolved or read), CKFS_ERR_NOT_PACKED,
 * CKFS_ERR_VERSION, CKFS_ERR_DAMAGED (the manifest is damaged or
 * inconsistent), CKFS_ERR_NOMEM (ckfs_from_ckp of ckm_load's). */
ckfs_status ckfs_ctx_load(ckfs_ctx *c, char *err, size_t errCapacity);
/* Open every packed file now (header, table of contents, format version),
 * so that a pack that cannot be served fails the mount command instead of
 * every later read.  @return CKFS_OK, or CKFS_ERR_DAMAGED (CKFS_ERR_NOMEM if
 * memory was all that failed), each failure logged, a summary naming the
 * directory in err. */
ckfs_status ckfs_open_all(ckfs_ctx *c, char *err, size_t errCapacity);
/* Free what ckfs_ctx_load and the reads set up (not the cache). */
void ckfs_ctx_free(ckfs_ctx *c);

/* Start the chunk cache and its prefetch threads (after any fork), with the
 * SIGBUS handler that mapped reads need.  @return CKFS_OK, or (logged)
 * CKFS_ERR_NOMEM or CKFS_ERR_INTERNAL (sigaction refused the handler). */
ckfs_status ckfs_cache_start(ckfs_ctx *c);
void ckfs_cache_stop(ckfs_ctx *c);

/* Open manifest file `file` for reading.  @return 0 or an errno value
 * (EIO for a damaged packed file, remembered for later opens, and for one
 * changed since it was bound that failed re-validation: ckfs_mfile). */
int ckfs_file_open(ckfs_ctx *c, uint32_t file, ckfs_ofile **out);
void ckfs_file_close(ckfs_ofile *of);
/* The process that opened of (FUSE's request context), before its first
 * read.  s3://: a process that streamed a file to its end gets the network
 * windows of its next file at the full distance from its first reads
 * (a whole-file reader going from shard to shard). */
void ckfs_file_owner(ckfs_ofile *of, pid_t pid);

/* Gather the bytes [off, off+size) of an open file of size fsize (clipped to
 * it) into p, decoding the chunks not in the cache, and queue decode-ahead
 * for sequential readers.  @return 0 (p holds at most CKFS_MAX_IOV pieces;
 * release them with ckfs_pieces_release) or an errno value (EIO for damage
 * or a packed file changed while mounted and refused; p holds nothing). */
int ckfs_read(ckfs_ctx *c, ckfs_ofile *of, uint64_t fsize, uint64_t off, size_t size, ckfs_pieces *p);
/* Copy the pieces into one malloc'ed buffer of p->total bytes.  @return
 * NULL when out of memory. */
char *ckfs_pieces_copy(const ckfs_pieces *p);
/* Give the pieces back to the cache; served: they were sent, so their bytes
 * count as served (chunk_cache.h). */
void ckfs_pieces_release(ckfs_ctx *c, ckfs_pieces *p, int served);

/* The counters as one JSON object (what `ckptfs stat MOUNTPOINT` shows,
 * served as the xattr CKFS_STATS_XATTR of the mount's root).
 * @return its length (as snprintf; may exceed cap). */
#define CKFS_STATS_XATTR "user.ckptfs.stats"
int ckfs_stats_json(ckfs_ctx *c, char *buf, size_t cap);

/* Print the read and cache counters (-o stats). */
void ckfs_print_stats(ckfs_ctx *c);

#endif
