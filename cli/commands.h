/*
 * commands.h — the ckptfs subcommands over the container (no FUSE here).
 * Each returns a process exit status (0 ok, 1 failure/damage, 2 usage) and
 * prints its own diagnostics to stderr, naming the file and the problem.
 */
#ifndef CKPTFS_COMMANDS_H
#define CKPTFS_COMMANDS_H

#include <stdint.h>

typedef struct {
    const char *src, *dst;
    uint32_t encoding;   /* CKC_ENC_K15 or CKC_ENC_BSPLIT */
    int jobs;
    int delete_source;
    int force;
} ckpt_pack_opts;

/* Most files that pack, unpack and verify work on at once: one file's
 * SHA-256 is one sequential stream, so more cores need more files in flight;
 * memory grows with each (a tensor's escapes and index when packing, three
 * 8 MiB hashing buffers otherwise). */
#define CKPT_MAX_FILES_AT_ONCE 4

int ckpt_pack(const ckpt_pack_opts *o);
int ckpt_unpack(const char *dst, const char *out, int jobs);
int ckpt_verify(const char *dst, const char *against, int jobs);
int ckpt_stat(const char *dst, int json);

#endif
