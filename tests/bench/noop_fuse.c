/*
 * noop_fuse.c — the FUSE ceiling for bench_mount.sh: a do-nothing read-only
 * file system (low-level API, multi-threaded loop, like ckptfs) serving one
 * file, /zero.bin, of SIZE zero bytes straight from one static buffer.  Each
 * read is answered with fuse_reply_buf from that buffer (no per-request copy
 * in user space), so its throughput is what the kernel and libfuse allow on
 * this machine.  Its connection settings match `ckptfs mount`'s (1 MiB
 * requests, keep_cache, infinite timeouts) so the two compare fairly.
 *
 *   noop_fuse SIZE_BYTES THREADS MOUNTPOINT     (stays in the foreground;
 *                                                fusermount3 -u to stop)
 * Build: cc -O2 noop_fuse.c $(pkg-config --cflags --libs fuse3) -o noop_fuse
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_REQ (1u << 20)
#define FILE_INO 2

static char zeros[MAX_REQ];
static unsigned long long g_size;

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
        st->st_size = (off_t)g_size;
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
    if (parent != FUSE_ROOT_ID || strcmp(name, "zero.bin")) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct fuse_entry_param e = {.ino = FILE_INO, .attr_timeout = 1e9, .entry_timeout = 1e9};
    fill(FILE_INO, &e.attr);
    fuse_reply_entry(req, &e);
}

static void n_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    if (ino != FUSE_ROOT_ID && ino != FILE_INO) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    fill(ino, &st);
    fuse_reply_attr(req, &st, 1e9);
}

static void n_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (ino != FILE_INO) {
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
    (void)ino, (void)fi;
    if (off < 0 || (unsigned long long)off >= g_size) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    unsigned long long left = g_size - (unsigned long long)off;
    if (size > left)
        size = (size_t)left;
    if (size > MAX_REQ)
        size = MAX_REQ;
    fuse_reply_buf(req, zeros, size);
}

static void n_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info *fi)
{
    (void)fi;
    if (ino != FUSE_ROOT_ID) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    char buf[512];
    size_t used = 0;
    struct stat st;
    const char *names[] = {".", "..", "zero.bin"};
    fuse_ino_t inos[] = {FUSE_ROOT_ID, FUSE_ROOT_ID, FILE_INO};
    for (off_t i = off; i < 3; i++) {
        fill(inos[i], &st);
        size_t n = fuse_add_direntry(req, buf + used, sizeof buf - used, names[i], &st, i + 1);
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

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: noop_fuse SIZE_BYTES THREADS MOUNTPOINT\n");
        return 2;
    }
    g_size = strtoull(argv[1], NULL, 10);
    unsigned threads = (unsigned)atoi(argv[2]);
    char *fargv[] = {argv[0], "-o", "ro,fsname=noop,subtype=noop,max_read=1048576", NULL};
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
