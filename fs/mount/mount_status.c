/*
 * mount_status.c — the mount layer's status at its two boundaries (mount.h):
 * from the format library's below, to the exit status of `ckptfs mount`.
 */
#include "mount.h"

ckfs_status ckfs_from_ckp(ckp_status s)
{
    switch (s) {
    case CKP_OK: return CKFS_OK;
    case CKP_ERR_IO: return CKFS_ERR_IO;
    case CKP_ERR_NOMEM: return CKFS_ERR_NOMEM;
    case CKP_ERR_FORMAT: return CKFS_ERR_NOT_PACKED;
    case CKP_ERR_VERSION: return CKFS_ERR_VERSION;
    case CKP_ERR_CORRUPT: case CKP_ERR_CHUNK: case CKP_ERR_SOURCE: return CKFS_ERR_DAMAGED;
    case CKP_ERR_ARG: case CKP_ERR_RANGE: case CKP_ERR_INTERNAL: return CKFS_ERR_INTERNAL;
    }
    return CKFS_ERR_INTERNAL; /* not a ckp_status */
}

int ckfs_exit_status(ckfs_status s)
{
    return s == CKFS_OK ? 0 : s == CKFS_ERR_USAGE ? 2 : 1;
}
