/*
 * mount_opts.h — command line of `ckptfs mount` and the FUSE-free pieces of
 * mounting: option parsing, the mount point check, the bdi readahead knob.
 */
#ifndef CKFS_MOUNT_OPTS_H
#define CKFS_MOUNT_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "mount.h" /* ckfs_status */
#include "s3.h"    /* cks3_opts */

#define CKFS_DEFAULT_CACHE (256ull << 20)
#define CKFS_DEFAULT_THREADS 16
#define CKFS_DEFAULT_PREFETCH (1ull << 20)
#define CKFS_DEFAULT_PREFETCH_THREADS 2   /* at most; and at most one less than the CPUs */
#define CKFS_DEFAULT_READ_AHEAD_KB 1024
#define CKFS_MAX_REQUEST (1u << 20)      /* largest read request we ask for */
#define CKFS_DEFAULT_S3_WINDOWS 16       /* s3_windows= (windows of 16 MiB: CKFS_S3_WINDOW_BYTES) */
#define CKFS_DEFAULT_S3_TIMEOUT_MS 20000 /* s3_timeout= */
#define CKFS_DEFAULT_CACHE_DIR_SIZE (10ull << 30) /* cache_dir_size= */

typedef struct {
    const char *dst;           /* as given */
    const char *mnt;
    int foreground;
    int debug;                 /* -d: libfuse debug output, implies -f */
    int help;
    int version;               /* -V, --version */
    int quiet;                 /* -q: no warnings, errors only */
    int verbose;               /* -v: the log on stderr too, once detached (as log=stderr) */
    int allow_other;
    int noexec, noatime;
    uint64_t cache_size;       /* bytes of decoded chunks kept */
    unsigned threads;          /* max FUSE worker threads */
    uint64_t prefetch;         /* bytes decoded ahead of a sequential reader; 0 = off */
    unsigned prefetch_threads;
    unsigned read_ahead_kb;    /* kernel readahead of the mount; 0 = leave as is */
    int stats;                 /* print cache statistics at unmount */
    int nonempty;              /* allow a non-empty mount point */
    char log[4096];            /* log=: "" syslog (or stderr with -f), "stderr", or a file */
    long uid, gid;             /* owner shown for every file; -1: whoever mounted */
    int fmask, dmask;          /* permission bits taken away from the stored modes of files /
                                * dirs (mode & ~mask); -1: none */
    int file_mode, dir_mode;   /* file_mode=/dir_mode=: the permission bits every file / dir
                                * shows, whatever was stored (then masked); -1: stored */
    int mmap;                  /* decode from mappings of the packed files (default 1) */
    /* PACKED is s3://BUCKET/PREFIX (readpath.c, s3_mount.c): where and how */
    cks3_opts s3;              /* endpoint=, region=, profile=, s3_timeout= (the time one
                                * read may spend retrying, then EIO; default
                                * CKFS_DEFAULT_S3_TIMEOUT_MS): fs/s3/s3.h's parser,
                                * shared with pack, verify, stat and unpack */
    unsigned s3_windows;       /* s3_windows=: network windows in flight at most */
    char cache_dir[4096];      /* cache_dir=: local disk cache of fetched ranges ("" none) */
    uint64_t cache_dir_size;   /* cache_dir_size=: its bound in bytes */
    int drop_packed;           /* drop packed pages once decoded: 1 on, 0 off,
                                * -1 auto (on when the files served exceed half
                                * of the memory: see ckfs_drop_packed_auto) */
} ckfs_mount_opts;

/* Parse argv (argv[0] = "mount").  @return CKFS_OK, or CKFS_ERR_USAGE (an
 * unknown flag or option, a bad value, missing or extra arguments, uid= of
 * another user than the caller without allow_other: the kernel would let
 * only the caller in) or
 * CKFS_ERR_NOMEM with a message naming it in err. */
ckfs_status ckfs_parse_mount_args(int argc, char **argv, ckfs_mount_opts *o, char *err, size_t errCapacity);

/* Default prefetch_threads: min(CKFS_DEFAULT_PREFETCH_THREADS, CPUs - 1),
 * at least 1 (on few cores, workers compete with the FUSE threads). */
unsigned ckfs_default_prefetch_threads(void);

/* The auto setting of drop_packed for a mount serving servedBytes: 1 when
 * that is more than half of the machine's memory (a model that does not fit
 * beside its packed copy in the page cache), else 0. */
int ckfs_drop_packed_auto(uint64_t servedBytes);

/* Usage text of `ckptfs mount`. */
const char *ckfs_mount_usage(void);

/* Check that mnt is a usable mount point: a directory, not a stale FUSE
 * mount.  @return CKFS_OK, CKFS_ERR_IO if it cannot be stat'ed (errno's
 * text in err), or CKFS_ERR_MOUNTPOINT with a message in err (for a stale
 * mount it tells the user to run `fusermount3 -u`). */
ckfs_status ckfs_check_mountpoint(const char *mnt, char *err, size_t errCapacity);

/* Check that the mount point mnt (absolute, resolved) is free: not already
 * the root of a FUSE mount (a second daemon would silently stack on the
 * first), and empty unless nonempty is set.  @return CKFS_OK, or
 * CKFS_ERR_MOUNTPOINT with a message in err that says what to do. */
ckfs_status ckfs_check_mountpoint_free(const char *mnt, int nonempty, char *err, size_t errCapacity);

/* Check that mounting at mnt leaves the packed directory packed (both
 * absolute and resolved) in sight: mnt is neither packed nor a directory
 * above it.  The daemon opens packed files by path while it serves, so a
 * mount over them (-o nonempty) would make every read fail.  @return
 * CKFS_OK, or CKFS_ERR_MOUNTPOINT with a message in err. */
ckfs_status ckfs_check_mountpoint_outside(const char *mnt, const char *packed, char *err, size_t errCapacity);

/* The mode a node with stored mode `mode` shows: for a file or directory,
 * its permission bits (or file_mode= / dir_mode= where given) narrowed by
 * fmask / dmask (bits & ~mask: a mask never grants what was not stored);
 * any other type (a symbolic link) as stored. */
unsigned ckfs_apply_mask(const ckfs_mount_opts *o, unsigned mode);

/* Set read_ahead_kb of the bdi behind the file system mounted at mnt (found
 * in /proc/self/mountinfo, without touching the mount itself).
 * @return 0, or -1 with errno. */
int ckfs_set_read_ahead_kb(const char *mnt, unsigned kb);

#endif
