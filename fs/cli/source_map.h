/*
 * source_map.h — source files mapped read-only for packing, surviving their
 * truncation: a read past the new end of a mapped source (which the kernel
 * answers with SIGBUS) reads zeros instead and marks the map truncated, so
 * the packer reports "changed while it was being packed" naming the file
 * instead of dying with SIGBUS.
 */
#ifndef CKS_SOURCE_MAP_H
#define CKS_SOURCE_MAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

typedef struct {
    int fd;
    const uint8_t *p;   /* NULL for an empty file */
    uint64_t size;      /* st.st_size when opened */
    struct stat st;     /* fstat of fd when opened: the identity of what is read */
    int slot;           /* in the SIGBUS table, -1 if none */
    int lease;          /* in the lease table (cks_map_lease), -1 if none */
} cks_map;

/* Open and map path (symlinks followed).  Only a regular file is opened
 * (cku_open_regular): a FIFO, device or directory put at path since it was
 * looked at is refused, never waited on.  @return 0, or -1 with errno and
 * what went wrong in err ("a FIFO, not a regular file"; ENOSPC when more
 * than CKS_MAX_MAPS maps are open at once); nothing is left open then. */
#define CKS_MAX_MAPS 256
int cks_map_open(const char *path, cks_map *m, char *err, size_t errCapacity);
/* 1 if a read of m past its file's end was caught since it was opened (or
 * one that failed: the kernel answers both with SIGBUS). */
int cks_map_truncated(const cks_map *m);
/* If the read caught was not past the end (the file is as long as when it
 * was mapped), the errno of reading there (EIO from a failing disk or
 * file system), with its offset in *at; else 0. */
int cks_map_read_error(const cks_map *m, uint64_t *at);
void cks_map_close(cks_map *m);

/* A read lease on m's file, for deleting it after it is packed: the kernel
 * grants one only while no process has the file open for writing (with
 * write(2) or a shared writable mapping, whose writes change neither size
 * nor, on pages already dirty, mtime), and breaks it when one opens it for
 * writing (or truncates it) later; the break is given up at once, so the
 * opener does not wait.  @return CKS_LEASE_HELD; CKS_LEASE_WRITERS if the
 * file is open for writing now; CKS_LEASE_NONE where no lease can be had
 * (not the file's owner without CAP_LEASE, a file system without leases,
 * leases disabled, more than CKS_MAX_MAPS at once). */
enum { CKS_LEASE_HELD, CKS_LEASE_WRITERS, CKS_LEASE_NONE };
int cks_map_lease(cks_map *m);
/* 1 if m holds no lease or still holds the one cks_map_lease took (nobody
 * opened the file for writing since); 0 if it was broken. */
int cks_map_lease_kept(const cks_map *m);

/* 1 if a and b describe the same file with the same size and mtime. */
int cks_same_file(const struct stat *a, const struct stat *b);

#endif
