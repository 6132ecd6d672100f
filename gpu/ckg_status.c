/* ckg_status.c — names of ckgpu's pinned status codes. */
#include "ckgpu.h"

const char *ckg_status_name(ckg_status s)
{
    switch (s) {
    case CKG_OK: return "ok";
    case CKG_ERR_ARG: return "bad argument";
    case CKG_ERR_SHAPE: return "shape mismatch";
    case CKG_ERR_UNSUPPORTED: return "unsupported by this path";
    case CKG_ERR_CORRUPT: return "corrupt packed data";
    case CKG_ERR_IO: return "I/O error";
    case CKG_ERR_NOMEM: return "out of host memory";
    case CKG_ERR_CUDA: return "CUDA error";
    case CKG_ERR_NODEVICE: return "no CUDA device";
    case CKG_ERR_NOTFOUND: return "tensor not found";
    case CKG_ERR_FORMAT: return "invalid packed directory or header";
    case CKG_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
