/*
 * fuse_ll.h — what daemon.c needs of fuse_ll.c: the table of FUSE low-level
 * callbacks that serve a mounted packed directory (ckfs_ctx is their
 * userdata).  Internal to the mount layer; with fuse_ll.c and daemon.c, the
 * only place <fuse_lowlevel.h> is included.
 */
#ifndef CKFS_FUSE_LL_H
#define CKFS_FUSE_LL_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

extern const struct fuse_lowlevel_ops ckfs_ll_ops;

#endif
