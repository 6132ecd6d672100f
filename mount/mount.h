/*
 * mount.h — `ckptfs mount`: serve a packed directory as the original tree
 * through FUSE (fuse_ll.c).
 */
#ifndef CKFS_MOUNT_H
#define CKFS_MOUNT_H

/* argv[0] is "mount", then options and DST MOUNTPOINT (see `ckptfs mount -h`).
 * @return the process exit status: 0 after a clean unmount, 1 on a usage or
 * setup error (message on stderr). */
int ckptfs_mount_main(int argc, char **argv);

#endif
