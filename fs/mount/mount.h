/*
 * mount.h — `ckptfs mount`: serve a packed directory as the original tree
 * through FUSE (daemon.c, fuse_ll.c), and the status of the mount layer.
 */
#ifndef CKFS_MOUNT_H
#define CKFS_MOUNT_H

#include "container.h"

/* Status of the mount layer's setup (mount_opts.h, inode_table.h,
 * readpath.h): what stops a mount, kept apart up to the message and the exit
 * status of `ckptfs mount`.  Its own enum, not the format library's: a bad
 * command line and an unusable mount point are not the format's business
 * (ckp_status's CKP_ERR_ARG is a caller's mistake, not the user's), and
 * format classes a mount does not act on apart are merged (ckfs_from_ckp).
 * Reads answer errno values instead, what FUSE replies (readpath.h). */
typedef enum {
    CKFS_OK = 0,
    CKFS_ERR_USAGE,      /* a bad command line or option: exit 2 */
    CKFS_ERR_IO,         /* a system call failed: the mount point or the packed
                          * directory cannot be reached, stat'ed or read */
    CKFS_ERR_NOMEM,
    CKFS_ERR_MOUNTPOINT, /* the mount point cannot take the mount: not a
                          * directory, a stale or live mount, not empty */
    CKFS_ERR_NOT_PACKED, /* not a packed directory (no manifest, or a file that
                          * is not a regular file reached without links) */
    CKFS_ERR_VERSION,    /* written by a newer ckptfs */
    CKFS_ERR_DAMAGED,    /* the manifest or a packed file is damaged or
                          * inconsistent, or packed files cannot be served */
    CKFS_ERR_INTERNAL    /* a bug in ckptfs, never bad input */
} ckfs_status;

/* The one place where the format library's statuses become the mount
 * layer's: damaged metadata, damaged chunks and an invalid header all are
 * damage to a mount; a range or a bad argument is a bug here. */
ckfs_status ckfs_from_ckp(ckp_status s);
/* The one place where a mount status becomes the exit status of `ckptfs
 * mount`: 0 for CKFS_OK, 2 for a usage error, 1 for every other failure (its
 * message tells them apart). */
int ckfs_exit_status(ckfs_status s);

struct ckfs_ctx;
/* The daemon (daemon.c).  ckfs_daemon_prepare: before a packed directory is
 * loaded (malloc's mapping threshold, the descriptor limit its readers
 * need).  ckfs_daemon_run: open c's log (-o log=), mount c at mnt, serve
 * until unmounted or signalled, unmount; *served says whether serving began.
 * @return the exit status: 0 after a clean unmount (or, without -f, once
 * mounted), 1 on a failure, said on stderr or in the log. */
void ckfs_daemon_prepare(void);
int ckfs_daemon_run(struct ckfs_ctx *c, const char *mnt, int *served);

#endif
