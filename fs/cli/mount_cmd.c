/*
 * mount_cmd.c — `ckptfs mount PACKED MOUNTPOINT`, the command's front end:
 * the command line, the mount point's checks, loading and opening the packed
 * directory, each refusal with its message and exit status; then the daemon
 * (fs/mount/daemon.c) takes over and serves until unmounted.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "mount.h"
#include "mount_opts.h"
#include "readpath.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ckptfs_mount_main(int argc, char **argv)
{
    ckfs_ctx c;
    char err[1024];
    memset(&c, 0, sizeof c);
    ckfs_status st = ckfs_parse_mount_args(argc, argv, &c.o, err, sizeof err);
    if (st == CKFS_OK && c.o.help) {
        fputs(ckfs_mount_usage(), stdout);
        return 0;
    }
    if (st == CKFS_OK)
        st = ckfs_check_mountpoint(c.o.mnt, err, sizeof err);
    if (st != CKFS_OK) {
        fprintf(stderr, "%s\n", err);
        return ckfs_exit_status(st); /* 2 for a usage error, as for every command */
    }
    char *mnt = realpath(c.o.mnt, NULL);
    int status = 1, served = 0;
    ckfs_daemon_prepare();
    /* complaints until the log opens go to stderr */
    if (!mnt) {
        fprintf(stderr, "ckptfs mount: %s: %s\n", c.o.mnt, strerror(errno));
        status = ckfs_exit_status(errno == ENOMEM ? CKFS_ERR_NOMEM : CKFS_ERR_IO);
    } else if ((st = ckfs_check_mountpoint_free(mnt, c.o.nonempty, err, sizeof err)) != CKFS_OK) {
        fprintf(stderr, "%s\n", err);
        status = ckfs_exit_status(st);
    } else if ((st = ckfs_ctx_load(&c, err, sizeof err)) != CKFS_OK) {
        fprintf(stderr, "ckptfs mount: %s\n", err);
        status = ckfs_exit_status(st);
    } else if ((st = ckfs_check_mountpoint_outside(mnt, c.dst, err, sizeof err)) != CKFS_OK) {
        fprintf(stderr, "%s\n", err);
        status = ckfs_exit_status(st);
    } else if ((st = ckfs_open_all(&c, err, sizeof err)) != CKFS_OK) {
        fprintf(stderr, "ckptfs mount: %s\n", err);
        status = ckfs_exit_status(st);
    } else {
        status = ckfs_daemon_run(&c, mnt, &served);
    }
    ckfs_ctx_free(&c);
    free(mnt);
    if (status && served)
        ckfs_log("exiting with status %d after serving", status); /* every such exit says why above */
    return status;
}
