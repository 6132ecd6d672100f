/*
 * mount.h — `ckptfs mount`: serve a packed directory as the original tree
 * through FUSE (fuse_ll.c).
 */
#ifndef CKFS_MOUNT_H
#define CKFS_MOUNT_H

/* argv[0] is "mount", then options and PACKED MOUNTPOINT (see `ckptfs mount -h`).
 * @return the process exit status: 0 after a clean unmount (or, without -f,
 * once mounted), 1 on a setup error, 2 on a usage error (message on stderr). */
int ckptfs_mount_main(int argc, char **argv);

#endif
