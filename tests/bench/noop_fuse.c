/*
 * noop_fuse.c — the FUSE ceiling for the mount benchmarks: a do-nothing
 * read-only file system (low-level API, multi-threaded loop, like ckptfs)
 * serving either one file, /zero.bin, of SIZE zero bytes straight from one
 * static buffer, or (--dir) the regular files of a flat directory, read into
 * memory at start-up, so that real loaders (safetensors) can read through it.
 * Each read is answered with fuse_reply_buf from memory (no per-request copy
 * in user space), so its throughput is what the kernel and libfuse allow on
 * this machine.  Its connection settings match `ckptfs mount`'s (1 MiB
 * requests, keep_cache, infinite timeouts) so the two compare fairly.
 *
 *   noop_fuse SIZE_BYTES THREADS MOUNTPOINT     (stays in the foreground;
 *   noop_fuse --dir SRC THREADS MOUNTPOINT       fusermount3 -u to stop)
 * Build: cc -O2 noop_fuse.c $(pkg-config --cflags --libs fuse3) -o noop_fuse
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_REQ (1u << 20)
#define FIRST_INO 2
#define MAX_FILES 4096

/* The files served: inode FIRST_INO + i is g_files[i]; data NULL = zeros. */
struct nfile {
    char *name;
    unsigned long long size;
    char *data;
};
static struct nfile g_files[MAX_FILES];
static unsigned g_nfiles;
static char zeros[MAX_REQ];

static struct nfile *file_of(fuse_ino_t ino)
{
    return ino >= FIRST_INO && ino - FIRST_INO < g_nfiles ? &g_files[ino - FIRST_INO] : NULL;
}

static void fill(fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == FUSE_ROOT_ID) {
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
    } else {
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)file_of(ino)->size;
        st->st_blksize = 128 << 10;
    }
}

static void n_init(void *ud, struct fuse_conn_info *conn)
{
    (void)ud;
    conn->max_write = MAX_REQ;      /* also raises max_pages: 1 MiB reads */
    conn->max_read = MAX_REQ;
    conn->max_readahead = MAX_REQ;
}

static void n_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    unsigned i = 0;
    while (parent == FUSE_ROOT_ID && i < g_nfiles && strcmp(name, g_files[i].name))
        i++;
    if (parent != FUSE_ROOT_ID || i == g_nfiles) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct fuse_entry_param e = {.ino = FIRST_INO + i, .attr_timeout = 1e9, .entry_timeout = 1e9};
    fill(e.ino, &e.attr);
    fuse_reply_entry(req, &e);
}

static void n_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    if (ino != FUSE_ROOT_ID && !file_of(ino)) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    fill(ino, &st);
    fuse_reply_attr(req, &st, 1e9);
}

static void n_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (!file_of(ino)) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EROFS);
        return;
    }
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void n_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info *fi)
{
    (void)fi;
    const struct nfile *f = file_of(ino);
    if (off < 0 || (unsigned long long)off >= f->size) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    unsigned long long left = f->size - (unsigned long long)off;
    if (size > left)
        size = (size_t)left;
    if (size > MAX_REQ)
        size = MAX_REQ;
    fuse_reply_buf(req, f->data ? f->data + off : zeros, size);
}

static void n_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info *fi)
{
    (void)fi;
    if (ino != FUSE_ROOT_ID) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    char buf[64 << 10];
    size_t used = 0;
    struct stat st;
    if (size > sizeof buf)
        size = sizeof buf;
    for (off_t i = off; i < 2 + (off_t)g_nfiles; i++) {
        fuse_ino_t ino = i < 2 ? FUSE_ROOT_ID : FIRST_INO + (fuse_ino_t)(i - 2);
        fill(ino, &st);
        const char *name = i == 0 ? "." : i == 1 ? ".." : g_files[i - 2].name;
        size_t n = fuse_add_direntry(req, buf + used, sizeof buf - used, name, &st, i + 1);
        if (used + n > size || used + n > sizeof buf)
            break;
        used += n;
    }
    fuse_reply_buf(req, buf, used);
}

static const struct fuse_lowlevel_ops ops = {
    .init = n_init,
    .lookup = n_lookup,
    .getattr = n_getattr,
    .open = n_open,
    .read = n_read,
    .readdir = n_readdir,
};

/* Every regular file of the flat directory dir, read into memory. */
static int load_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return perror(dir), -1;
    struct dirent *de;
    while ((de = readdir(d)) && g_nfiles < MAX_FILES) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (de->d_name[0] == '.' || stat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        struct nfile *f = &g_files[g_nfiles];
        int fd = open(path, O_RDONLY);
        f->name = strdup(de->d_name);
        f->size = (unsigned long long)st.st_size;
        f->data = malloc(f->size ? f->size : 1);
        if (fd < 0 || !f->name || !f->data)
            return perror(path), closedir(d), -1;
        for (unsigned long long got = 0; got < f->size;) {
            ssize_t n = pread(fd, f->data + got, f->size - got, (off_t)got);
            if (n <= 0)
                return perror(path), close(fd), closedir(d), -1;
            got += (unsigned long long)n;
        }
        close(fd);
        g_nfiles++;
    }
    closedir(d);
    return 0;
}

int main(int argc, char **argv)
{
    char *prog = argv[0];
    int dir_mode = argc == 5 && !strcmp(argv[1], "--dir");
    if (argc != 4 && !dir_mode) {
        fprintf(stderr, "usage: noop_fuse SIZE_BYTES THREADS MOUNTPOINT\n"
                        "       noop_fuse --dir SRC THREADS MOUNTPOINT\n");
        return 2;
    }
    if (dir_mode) {
        argv++;
        if (load_dir(argv[1]))
            return 1;
    } else {
        g_files[0] = (struct nfile){.name = "zero.bin", .size = strtoull(argv[1], NULL, 10)};
        g_nfiles = 1;
    }
    unsigned threads = (unsigned)atoi(argv[2]);
    char *fargv[] = {prog, "-o", "ro,fsname=noop,subtype=noop,max_read=1048576", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se)
        return 1;
    int rc = 1;
    if (fuse_set_signal_handlers(se) == 0) {
        if (fuse_session_mount(se, argv[3]) == 0) {
            struct fuse_loop_config *cfg = fuse_loop_cfg_create();
            fuse_loop_cfg_set_max_threads(cfg, threads ? threads : 16);
            rc = fuse_session_loop_mt(se, cfg) != 0;
            fuse_loop_cfg_destroy(cfg);
            fuse_session_unmount(se);
        }
        fuse_remove_signal_handlers(se);
    }
    fuse_session_destroy(se);
    return rc;
}
