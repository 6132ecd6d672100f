/*
 * cmd_common.h — what the read-only commands (unpack.c, verify.c, stat.c)
 * share, defined in commands.c.  Internal to the CLI.
 */
#ifndef CKPTFS_CMD_COMMON_H
#define CKPTFS_CMD_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "container.h"
#include "manifest.h"

/* Open the packed file of manifest entry f in dst and check it against the
 * entry (size, SHA-256, path).  @return the reader, or NULL after printing
 * "ckptfs CMD: ..."; *why (if given) gets the status of a failed open
 * (CKP_ERR_VERSION: a newer format), CKP_ERR_CORRUPT for a mismatch. */
ckp_reader *ckpt_open_member_why(const char *cmd, const char *dst, const ckm_file *f, ckp_status *why);
ckp_reader *ckpt_open_member(const char *cmd, const char *dst, const ckm_file *f);

/* The shared lock on dst that keeps readers off a pack being written.
 * @return the locked descriptor (close it to release), -1 if dst cannot be
 * opened (loading the manifest then says why), -2 after saying it is busy. */
int ckpt_read_lock(const char *cmd, const char *dst);
/* fn(dst, arg, jobs) under ckpt_read_lock.  @return fn's exit status, or
 * CKPT_EXIT_FAIL when a pack is being written. */
int ckpt_locked(const char *cmd, const char *dst, int (*fn)(const char *, const char *, int), const char *arg,
                int jobs);

/* "NAME, chunk C (original bytes A-B)" of extent e, chunk c, into out. */
void ckpt_describe_chunk(const ckp_reader *r, uint32_t e, uint64_t c, char *out, size_t cap);
/* Bytes the pack takes on disk: its manifest and every listed packed file. */
uint64_t ckpt_packed_size(const char *dst, const ckm_manifest *m);
/* Capacity of one batch of decoded bytes for r (1 MiB, or its largest chunk). */
size_t ckpt_batch_capacity(const ckp_reader *r);
/* 1 if dir holds a packed directory's manifest (CKP_MANIFEST_NAME). */
int ckpt_is_packed(const char *dir);
/* Swapped arguments: when packed (where a packed directory is expected) is
 * not one and other (the argument in the other place) is, say so on stderr
 * with the right order, order (e.g. "ckptfs unpack PACKED OUT").
 * @return 1 if said (the caller exits CKPT_EXIT_USAGE), else 0. */
int ckpt_swapped(const char *cmd, const char *packed, const char *other, const char *order);
/* Free space for `need` bytes on the file system that holds path (or its
 * nearest existing parent), with a margin (need/20 + 16 MiB).  @return 0,
 * or -1 after saying how much is needed and free and what to do (what:
 * "unpacking PACKED", say).  A file system that cannot say passes. */
int ckpt_check_space(const char *cmd, const char *path, uint64_t need, const char *what);
/* 0 after --no-space-check: ckpt_check_space passes. */
extern int ckpt_space_check;
/* -q (0: errors only), default 1, -v (2: a line per file). */
extern int ckpt_verbosity;
/* --json: the summary on stdout is one JSON object (ckpt_json_print). */
extern int ckpt_json;
struct cJSON;
/* Print o (a cJSON object) on stdout and free it. */
void ckpt_json_print(struct cJSON *o);
/* Ctrl-C (SIGINT), SIGTERM, SIGHUP (each unless ignored, as nohup does):
 * print how to go on (msg, one line), then die of the signal as before. */
void ckpt_on_interrupt(const char *msg);
/* Files unpacked or verified at once for --jobs jobs. */
int ckpt_files_at_once(int jobs);

#endif
