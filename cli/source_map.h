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
} cks_map;

/* Open and map path (symlinks followed).  Only a regular file is opened
 * (cku_open_regular): a FIFO, device or directory put at path since it was
 * looked at is refused, never waited on.  @return 0, or -1 with errno and
 * what went wrong in err ("a FIFO, not a regular file"; ENOSPC when more
 * than CKS_MAX_MAPS maps are open at once); nothing is left open then. */
#define CKS_MAX_MAPS 256
int cks_map_open(const char *path, cks_map *m, char *err, size_t errCapacity);
/* 1 if a read of m past its file's end was caught since it was opened. */
int cks_map_truncated(const cks_map *m);
void cks_map_close(cks_map *m);

/* 1 if a and b describe the same file with the same size and mtime. */
int cks_same_file(const struct stat *a, const struct stat *b);

#endif
