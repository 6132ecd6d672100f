/*
 * commands.h — the ckptfs subcommands over the container (no FUSE here).
 * Each returns a process exit status (CKPT_EXIT_*) and prints its own
 * diagnostics to stderr, naming the file, the problem and what to do.
 */
#ifndef CKPTFS_COMMANDS_H
#define CKPTFS_COMMANDS_H

#include <stdint.h>

#include "container.h"

/* Exit statuses of the ckptfs command (documented in ckptfs(1) and each
 * command's --help; scripts rely on them). */
#define CKPT_EXIT_OK 0
#define CKPT_EXIT_FAIL 1     /* I/O error, bad input, refused */
#define CKPT_EXIT_USAGE 2    /* unknown command or option, wrong arguments */
#define CKPT_EXIT_DAMAGED 3  /* verify: a packed file is damaged or unreadable */
#define CKPT_EXIT_DIFFERS 4  /* verify --against: intact, but differs from SRC */

typedef struct {
    const char *src, *dst;
    uint32_t encoding;   /* CKC_ENC_K15, CKC_ENC_BSPLIT or CKC_ENC_ARCHIVE */
    int jobs;
    int delete_source;
    int force;
    int dry_run;         /* what would be packed, estimated; nothing written */
    int skip_bad;        /* a bad .safetensors file is stored as an opaque file */
    struct ckpt_pack_remote *remote; /* NULL; pack_s3.c: dst is the staging directory of
                                      * a pack whose files go on to object storage */
} ckpt_pack_opts;

/* Most files that pack, unpack and verify work on at once: one file's
 * SHA-256 is one sequential stream, so more cores need more files in flight;
 * memory grows with each (a tensor's escapes and index when packing, three
 * 8 MiB hashing buffers otherwise). */
#define CKPT_MAX_FILES_AT_ONCE 4

/* The CLI's one mapping of the format library's statuses to what a person
 * sees: prints "ckptfs CMD: MSG" on stderr, MSG being the library's message
 * (it names the file and the problem; out of memory, I/O, a newer format and
 * damage each say so), and @return the exit status of a command that stops
 * on st: CKPT_EXIT_OK for CKP_OK (nothing printed), else CKPT_EXIT_FAIL.
 * (verify counts the packed files it finds damaged apart: CKPT_EXIT_DAMAGED.) */
int ckpt_fail(const char *cmd, ckp_status st, const char *msg);

/* ckptfs --version: the program's and the format's versions.  @return 0. */
int ckpt_print_version(void);
int ckpt_pack(const ckpt_pack_opts *o);
/* ckpt_pack to s3://BUCKET/PREFIX (pack_s3.c): staged locally, uploaded by
 * multipart upload, the manifest last; a rerun goes on. */
int ckpt_pack_s3(const ckpt_pack_opts *o);
int ckpt_unpack(const char *dst, const char *out, int jobs);
int ckpt_verify(const char *dst, const char *against, int jobs);
int ckpt_stat(const char *dst, int json);
/* Convert PACKED's BF16 tensors to encoding enc in place (repack.c). */
int ckpt_repack(const char *dst, uint32_t enc, int jobs);
/* argv[0] is "mount", then options and PACKED MOUNTPOINT (see `ckptfs mount
 * -h`; mount_cmd.c).  @return the process exit status: 0 after a clean
 * unmount (or, without -f, once mounted), 1 on a setup error, 2 on a usage
 * error (message on stderr; ckfs_exit_status). */
int ckptfs_mount_main(int argc, char **argv);

#endif
