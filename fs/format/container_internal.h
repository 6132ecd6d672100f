/*
 * container_internal.h — on-disk field offsets and sizes shared by the
 * container reader and writer (docs/format.md §3–§4).  Not installed.
 */
#ifndef CKP_CONTAINER_INTERNAL_H
#define CKP_CONTAINER_INTERNAL_H

#define CKP_MAGIC "\x89" "CKPTFS\n"
#define CKP_HEADER_SIZE 64u
#define CKP_TOC_HEADER_SIZE 96u
#define CKP_EXTENT_SIZE 192u
#define CKP_INDEX_ENTRY 16u
#define CKP_MAX_TOC (1ull << 30)
#define CKP_MAX_EXTENTS (1u << 24)
#define CKP_MAX_NAME 65535u
#define CKP_BIG_TENSOR_WEIGHTS (4ull << 20)  /* planes of tensors this large are 4 KiB aligned */

/* file header */
enum { H_MAGIC = 0, H_MAJOR = 8, H_MINOR = 10, H_FLAGS = 12, H_ORIG = 16, H_TOC_OFF = 24,
       H_TOC_SIZE = 32, H_TOC_HASH = 40, H_FILE_SIZE = 48, H_HASH = 56 };
/* TOC header */
enum { T_MAGIC = 0, T_NEXT = 4, T_ORIG = 8, T_SHA = 16, T_KIND = 48, T_MODE = 52, T_MTIME = 56,
       T_PATH_LEN = 64, T_STRTAB = 68, T_RESERVED = 72 };
/* extent record */
enum { X_ORIG_OFF = 0, X_ORIG_SIZE = 8, X_ENC = 16, X_CHUNK = 20, X_NCHUNKS = 24, X_INDEX_OFF = 32,
       X_INDEX_HASH = 40, X_P0_OFF = 48, X_P0_SIZE = 56, X_P1_OFF = 64, X_P1_SIZE = 72,
       X_P2_OFF = 80, X_P2_SIZE = 88, X_NESC = 96, X_CODEBOOK = 104, X_NAME_OFF = 136,
       X_NAME_LEN = 140, X_DTYPE = 144, X_RESERVED = 148 };

#endif
