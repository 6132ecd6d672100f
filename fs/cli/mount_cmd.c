/*
 * mount_cmd.c — `ckptfs mount PACKED MOUNTPOINT`, the command's front end:
 * the command line, the mount point's checks, loading and opening the packed
 * directory, each refusal with its message and exit status; then the daemon
 * (fs/mount/daemon.c) takes over and serves until unmounted.
 */
#define _GNU_SOURCE
#include "cmd_common.h"
#include "commands.h"
#include "inode_table.h"
#include "mount.h"
#include "mount_opts.h"
#include "readpath.h"
#include "util.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A user other than root mounts through /dev/fuse (and fusermount3): say
 * what to change when it cannot be opened, instead of libfuse's bare
 * "failed to open /dev/fuse: Permission denied".  @return 0 or 1 (said). */
static int check_fuse_access(const ckfs_mount_opts *o)
{
    if (geteuid() == 0)
        return 0;
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
        int e = errno;
        fprintf(stderr,
                "ckptfs mount: cannot use /dev/fuse: %s.\n"
                "%s",
                strerror(e),
                e == ENOENT ? "Load the FUSE module (modprobe fuse) and install fuse3, or mount as root.\n"
                            : "A user other than root needs read and write access to it: it is normally mode "
                              "0666 (chmod 0666 /dev/fuse, or a udev rule to keep it so); where it belongs to "
                              "the group fuse, add the user to it (usermod -aG fuse USER, then log in again). "
                              "Or mount as root.\n");
        return 1;
    }
    if (o->allow_other) {
        FILE *f = fopen("/etc/fuse.conf", "re");
        char line[256];
        int ok = 0;
        while (f && !ok && fgets(line, sizeof line, f))
            ok = !strncmp(line, "user_allow_other", 16);
        if (f)
            fclose(f);
        if (!ok) {
            fprintf(stderr, "ckptfs mount: allow_other: a user other than root may use it only where "
                            "/etc/fuse.conf has a line user_allow_other.\n"
                            "Add that line (as root), or mount as root, or leave allow_other out.\n");
            return 1;
        }
    }
    return 0;
}

/* With allow_other, warn about what other users cannot read through the
 * mount (the kernel checks the modes shown against the owner shown:
 * default_permissions), or a service reading a model saved 0600 gets
 * "Permission denied" with no word at mount time.  Without uid=: files
 * readable by their owner only (the user who mounted); with uid=: files its
 * owner cannot read (that user is the one meant to read them). */
static void warn_unreadable(const ckfs_ctx *c)
{
    if (!c->o.allow_other || c->o.quiet)
        return;
    int given = c->o.uid >= 0;
    uint64_t n = 0, first = 0;
    for (uint64_t ino = 1; ino <= cki_count(c->t); ino++) {
        const cki_node *nd = cki_get(c->t, ino);
        unsigned m = nd ? ckfs_apply_mask(&c->o, nd->mode) : 0;
        unsigned r = given ? S_IRUSR : S_IROTH, x = given ? S_IXUSR : S_IXOTH;
        if (((S_ISREG(m) && !(m & r)) || (S_ISDIR(m) && !(m & x))) && !n++)
            first = ino;
    }
    if (!n)
        return;
    const cki_node *f = cki_get(c->t, first);
    struct passwd *pw = getpwuid(c->uid);
    char who[300];
    snprintf(who, sizeof who, "%s (uid %u)", pw ? pw->pw_name : "the owner", (unsigned)c->uid);
    fprintf(stderr, "ckptfs mount: warning: %llu %s (%s%s, mode %04o) ", (unsigned long long)n,
            n == 1 ? "file or directory" : "files and directories", n == 1 ? "" : "first ",
            *f->path ? f->path : "the mount's root", ckfs_apply_mask(&c->o, f->mode) & 07777u);
    if (given)
        fprintf(stderr, "cannot be read even by %s, the owner given by uid=.\n"
                        "Check the modes of the source (ls -l), or set file_mode=0640,dir_mode=0750.\n",
                who);
    else
        fprintf(stderr, "can be read only by %s, who mounted and owns every file here; other users get "
                        "\"Permission denied\".\n"
                        "For a service that runs as another user, add uid=USER,gid=GROUP of that service (or "
                        "file_mode=0644,dir_mode=0755 to open them to everyone).\n",
                who);
}

/* -o log=FILE under the mount point (hidden by the mount, and there once it
 * is unmounted, so the next mount finds the mount point not empty) or
 * inside the packed directory (not a file of the pack): refused.  Devices
 * and inodes, not path strings.  @return 0, or 1 after saying why. */
static int check_log_place(const ckfs_ctx *c, const char *mnt)
{
    const char *log = c->o.log;
    if (!log[0] || !strcmp(log, "stderr"))
        return 0;
    int under_mnt = cku_path_within(log, mnt) == 1, in_packed = !under_mnt && cku_path_within(log, c->dst) == 1;
    if (!under_mnt && !in_packed)
        return 0;
    fprintf(stderr, "ckptfs mount: log=%s is %s %s: %s.\nPut the log elsewhere (/var/log/ckptfs-NAME.log, say), "
            "or leave log= out (syslog).\n", log, under_mnt ? "under the mount point" : "inside the packed directory",
            under_mnt ? mnt : c->dst,
            under_mnt ? "the mount would hide it, and once unmounted it would make the mount point not empty"
                      : "a packed directory holds only what ckptfs pack wrote");
    return 1;
}

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
    if (st == CKFS_OK && c.o.version)
        return ckpt_print_version();
    if (st == CKFS_OK && c.o.verbose && !c.o.log[0])
        snprintf(c.o.log, sizeof c.o.log, "stderr");
    if (st == CKFS_OK && ckpt_swapped("mount", c.o.dst, c.o.mnt, "ckptfs mount PACKED MOUNTPOINT"))
        return CKPT_EXIT_USAGE;
    if (st == CKFS_OK && check_fuse_access(&c.o))
        return 1;
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
    } else if (check_log_place(&c, mnt)) {
        status = ckfs_exit_status(CKFS_ERR_USAGE);
    } else {
        warn_unreadable(&c);
        status = ckfs_daemon_run(&c, mnt, &served);
    }
    ckfs_ctx_free(&c);
    free(mnt);
    if (status && served)
        ckfs_log("exiting with status %d after serving", status); /* every such exit says why above */
    return status;
}
