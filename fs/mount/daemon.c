/*
 * daemon.c — the life of the `ckptfs mount` daemon around the FUSE callbacks
 * of fuse_ll.c: checking the command line and the mount point, loading the
 * packed directory, the log (-o log=), the descriptor limit, the session and
 * its multi-threaded loop, and the page-cache notifier thread that drops the
 * kernel's pages of a packed file found changed while mounted.
 *
 * fuse_ll.c translates requests; this file owns the session they arrive on.
 * These two are the only files that include <fuse_lowlevel.h> (fuse_ll.h).
 */
#define _GNU_SOURCE
#include "fuse_ll.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mount.h"
#include "readpath.h"
#include "util.h"

/* ---- the kernel's pages of a packed file changed while mounted ------------ */

/* When the read path finds a packed file changed since it was bound
 * and the file there refused (readpath.h: its opens and reads are EIO
 * while it is there), the pages the kernel cached of its inode are dropped
 * too, so that readers holding it open (or mapped) get EIO as well, not
 * some of its bytes from the cache and EIO for the rest.  Those pages hold the original bytes
 * (each chunk was checked against its hash when decoded): dropping them is
 * for a failure that is the same at every offset, not for correctness.
 * The kernel locks each cached page to drop it, waiting for reads of the
 * file in flight, which only this daemon's workers answer: so it is done on
 * a thread of its own (the finder may be a worker inside such a read), and
 * at exit, while it is still at it, the main thread answers requests
 * itself (stop_inval). */
static struct {
    struct fuse_session *se;
    const cki_table *t;
    int pipe[2];                  /* file numbers from on_change to inval_main */
    pthread_t thread;
    int started;
    pthread_mutex_t lock;         /* busy, stopping */
    int busy, stopping;
} g_inval = {.pipe = {-1, -1}, .lock = PTHREAD_MUTEX_INITIALIZER};

static void on_change(void *arg, uint32_t file)
{
    (void)arg;
    /* once per file; a full pipe (thousands of files changed at once)
     * leaves the pages of the rest to the kernel's reclaim */
    pthread_mutex_lock(&g_inval.lock);
    if (!g_inval.stopping && write(g_inval.pipe[1], &file, sizeof file) != (ssize_t)sizeof file) {
    }
    pthread_mutex_unlock(&g_inval.lock);
}

static void *inval_main(void *arg)
{
    ckfs_ctx *c = arg;
    uint32_t file;
    while (read(g_inval.pipe[0], &file, sizeof file) == (ssize_t)sizeof file) {
        pthread_mutex_lock(&g_inval.lock);
        int go = !g_inval.stopping;
        g_inval.busy = go;
        pthread_mutex_unlock(&g_inval.lock);
        if (!go)
            continue;
        int rc = fuse_lowlevel_notify_inval_inode(g_inval.se, (fuse_ino_t)cki_file_ino(g_inval.t, file), 0, 0);
        if (rc && rc != -ENOENT) /* ENOENT: the kernel holds no inode (nor pages) of it */
            ckfs_log("%s: cannot drop the kernel's cached pages of it: %s", CKU_ESC(c->m->files[file].path),
                     strerror(-rc));
        pthread_mutex_lock(&g_inval.lock);
        g_inval.busy = 0;
        pthread_mutex_unlock(&g_inval.lock);
    }
    return NULL;
}

/* Start the thread (after fuse_daemonize: threads do not survive its fork)
 * and hook it to the read path.  Without it (no pipe or thread) changed
 * files are EIO all the same; only their cached pages stay. */
static void start_inval(ckfs_ctx *c, struct fuse_session *se)
{
    g_inval.se = se;
    g_inval.t = c->t;
    if (pipe2(g_inval.pipe, O_CLOEXEC) != 0) {
        ckfs_log("cannot start the page cache notifier: %s", strerror(errno));
        return;
    }
    fcntl(g_inval.pipe[1], F_SETFL, O_NONBLOCK);
    if ((errno = pthread_create(&g_inval.thread, NULL, inval_main, c)) != 0) {
        ckfs_log("cannot start the page cache notifier: %s", strerror(errno));
        close(g_inval.pipe[0]);
        close(g_inval.pipe[1]);
        g_inval.pipe[0] = g_inval.pipe[1] = -1;
        return;
    }
    g_inval.started = 1;
    c->on_change_arg = NULL;
    c->on_change = on_change;
}

static int inval_busy(void)
{
    pthread_mutex_lock(&g_inval.lock);
    int b = g_inval.busy;
    pthread_mutex_unlock(&g_inval.lock);
    return b;
}

/* After the loop: no new invalidation starts; one in progress may wait for
 * reads that no worker will answer any more, so answer them here until it
 * returns; then end the thread. */
static void stop_inval(struct fuse_session *se)
{
    pthread_mutex_lock(&g_inval.lock);
    g_inval.stopping = 1;         /* on_change writes nothing more (prefetch workers still run) */
    if (g_inval.pipe[1] >= 0)
        close(g_inval.pipe[1]);   /* inval_main reads what is left, skips it, and returns */
    g_inval.pipe[1] = -1;
    pthread_mutex_unlock(&g_inval.lock);
    if (inval_busy()) {
        fuse_session_reset(se); /* a request read while exited is dropped unanswered */
        while (inval_busy()) {
            struct pollfd p = {.fd = fuse_session_fd(se), .events = POLLIN};
            if (poll(&p, 1, 20) <= 0)
                continue;
            if (!(p.revents & POLLIN))
                break;           /* the connection is gone: the kernel let go of the pages */
            struct fuse_buf fb = {.mem = NULL};
            int res = fuse_session_receive_buf(se, &fb);
            if (res > 0)
                fuse_session_process_buf(se, &fb);
            free(fb.mem);
            if (res <= 0 && res != -EINTR && res != -EAGAIN)
                break;
        }
        fuse_session_exit(se);
    }
    if (g_inval.started)
        pthread_join(g_inval.thread, NULL);
    if (g_inval.pipe[0] >= 0)
        close(g_inval.pipe[0]);
    g_inval.pipe[0] = -1;
    g_inval.started = 0;
}

/* ---- setup and the loop -------------------------------------------------- */

/* Readers stay open for the whole mount: allow as many descriptors as the
 * hard limit lets us (a model has at most a few thousand shards). */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* The -o list handed to libfuse: our fixed options plus the user's.  The
 * mount's source (fsname) is the packed directory's path, as an fstab line
 * names it: mount(8) then sees an fstab line as mounted (`mount -a` twice
 * does nothing the second time) and `umount PACKED` finds the mount. */
static char *fuse_opt_string(const ckfs_ctx *c)
{
    char *esc = malloc(2 * strlen(c->dst) + 1), *w = esc, *s = NULL;
    if (!esc)
        return NULL;
    for (const char *r = c->dst; *r; r++) {
        if (*r == ',' || *r == '\\')
            *w++ = '\\';
        *w++ = *r;
    }
    *w = 0;
    if (asprintf(&s, "ro,nosuid,nodev,fsname=%s,subtype=ckptfs,max_read=%u%s%s%s", esc,
                 CKFS_MAX_REQUEST, c->o.allow_other ? ",allow_other,default_permissions" : "",
                 c->o.noexec ? ",noexec" : "", c->o.noatime ? ",noatime" : "") < 0)
        s = NULL;
    free(esc);
    return s;
}

/* -o log=: "stderr" (a copy survives daemonizing) or a regular file,
 * appended to.  The file is opened without following a symbolic link in
 * its place and must be a regular file: a daemon run as root with its log
 * in a directory others can write (/tmp) would otherwise append its lines
 * to whatever file a link planted there names, or block on a FIFO.
 * @return 0, or -1 with a message. */
static int open_log(const char *where)
{
    if (!strcmp(where, "stderr")) {
        int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (fd < 0) {
            fprintf(stderr, "ckptfs mount: log=stderr: %s\n", strerror(errno));
            return -1;
        }
        ckfs_log_to_fd(fd);
        return 0;
    }
    struct stat st;
    int fd = open(where, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0640);
    if (fd < 0 && errno != ENXIO) { /* ENXIO: a FIFO nobody reads */
        fprintf(stderr, "ckptfs mount: log=%s: %s\n", where,
                errno == ELOOP ? "a symbolic link: name the log file itself" : strerror(errno));
        return -1;
    }
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ckptfs mount: log=%s: not a regular file (log=stderr logs to a pipe or terminal)\n",
                where);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    ckfs_log_to_fd(fd);
    return 0;
}

/* ---- the mount point at exit --------------------------------------------- */

/* Is the mount point field of /proc/self/mountinfo (space, tab, newline and
 * backslash written as octal \ooo) the path mnt? */
static int mountinfo_field_is(const char *field, const char *mnt)
{
    for (;; mnt++) {
        int ch = (unsigned char)*field++;
        if (ch == '\\' && field[0] >= '0' && field[0] <= '3' && field[1] >= '0' && field[1] <= '7' &&
            field[2] >= '0' && field[2] <= '7') {
            ch = (field[0] - '0') * 64 + (field[1] - '0') * 8 + (field[2] - '0');
            field += 3;
        }
        if (ch != (unsigned char)*mnt)
            return 0;
        if (!ch)
            return 1;
    }
}

/* The device ("major:minor") of the mounts at mnt: with want NULL, the last
 * one's (just mounted: ours) into dev; else whether one of device want is
 * still there.  @return 1 found, 0 not, -1 mountinfo unreadable. */
static int mount_at(const char *mnt, const char *want, char dev[32])
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char *line = NULL, *save;
    size_t cap = 0;
    int found = 0;
    while (!(found && want) && getline(&line, &cap, f) > 0) {
        char *d = NULL, *point = strtok_r(line, " ", &save);
        for (int i = 1; i <= 4 && point; i++) { /* id, parent, major:minor, root, mount point */
            if (i == 3)
                d = point;
            point = strtok_r(NULL, " ", &save);
        }
        if (point && d && mountinfo_field_is(point, mnt) && (!want || !strcmp(d, want))) {
            found = 1;
            if (dev)
                snprintf(dev, 32, "%s", d);
        }
    }
    free(line);
    fclose(f);
    return found;
}

/* Before fuse_session_unmount, which unmounts the mount point's path
 * unless the device polls POLLERR (the connection has ended).  Two races
 * with that path (libfuse 3.14):
 * - A mount detached while files stay open (umount -l, fusermount3 -uz)
 *   keeps its connection, so a daemon stopped by a signal then unmounted
 *   whatever was mounted at that path since (another daemon's mount; with
 *   nothing there, 'fuse: failed to unmount ...: Invalid argument').
 * - A SIGTERM and an unmount by someone else at once (a service manager's
 *   stop and fusermount3 -u): the other unmount may land between libfuse's
 *   poll and its own umount2, which then fails and prints the same line.
 * So when our mount (device dev) is no longer at mnt, nothing is unmounted;
 * when it is and we are root, it is detached here, an EINVAL from a
 * concurrent unmount being the outcome wanted.  In both cases the device's
 * descriptor is then swapped for a pipe's write end without a reader, which
 * polls POLLERR: libfuse closes it and unmounts nothing.  Closing the
 * device ends the connection, as the exit would (readers still holding
 * files get ENOTCONN).  Not root: libfuse runs fusermount3 -q, quiet. */
static void leave_mount_point(struct fuse_session *se, const char *mnt, const char *dev)
{
    int p[2];
    if (!dev[0])
        return; /* unknown: libfuse unmounts it */
    int ours = mount_at(mnt, dev, NULL);
    if (ours < 0 || (ours && geteuid() != 0))
        return;
    if (ours && umount2(mnt, MNT_DETACH) != 0 && errno != EINVAL) {
        ckfs_log("cannot unmount %s: %s", mnt, strerror(errno));
        return; /* libfuse tries again, its own way */
    }
    if (pipe2(p, O_CLOEXEC) != 0)
        return;
    close(p[0]);
    if (dup3(p[1], fuse_session_fd(se), O_CLOEXEC) < 0)
        ckfs_log("cannot release the mount's device: %s", strerror(errno));
    close(p[1]);
}

/* Mount, serve until unmounted or signalled, unmount; *served is set once
 * requests are answered.  @return exit status. */
static int serve(ckfs_ctx *c, const char *mnt, int *served)
{
    int status = 1;
    char dev[32] = "";
    char *opts = fuse_opt_string(c);
    char *fargv[] = {"ckptfs", "-o", opts, c->o.debug ? "-d" : NULL, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(c->o.debug ? 4 : 3, fargv);
    struct fuse_session *se = opts ? fuse_session_new(&args, &ckfs_ll_ops, sizeof ckfs_ll_ops, c) : NULL;
    if (!se)
        goto out_opts;
    /* libfuse leaves a signal alone when it is ignored, and shells start
     * background jobs with SIGINT ignored: unmount cleanly on all three. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    if (fuse_session_mount(se, mnt) != 0)
        goto out_signals;
    mount_at(mnt, NULL, dev); /* ours, to tell it from a later mount there (leave_mount_point) */
    if (c->o.read_ahead_kb && ckfs_set_read_ahead_kb(mnt, c->o.read_ahead_kb) != 0 &&
        geteuid() == 0)
        fprintf(stderr, "ckptfs mount: warning: cannot set read_ahead_kb: %s\n", strerror(errno));
    if (fuse_daemonize(c->o.foreground) != 0)
        goto out_unmount;
    if (!c->o.foreground)
        ckfs_log_to_syslog();
    /* Threads start only now: fuse_daemonize forks. */
    if (ckfs_cache_start(c) != 0)
        goto out_unmount;
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    if (!cfg) {
        ckfs_log("out of memory");
        goto out_cache;
    }
    start_inval(c, se);
    fuse_loop_cfg_set_max_threads(cfg, c->o.threads);
    fuse_loop_cfg_set_clone_fd(cfg, 0);
    char size_s[16], cache_s[16], pf_s[16]; /* the units of every report (cku_human), not the options' */
    ckfs_info("serving %s at %s: %zu file%s, %s; cache %s, %u threads, prefetch %s on %u workers, %s%s",
              c->dst, mnt, c->m->n_files, cku_s(c->m->n_files), cku_human(c->total_size, size_s),
              cku_human(c->o.cache_size, cache_s), c->o.threads, cku_human(c->o.prefetch, pf_s), c->o.prefetch_threads,
              c->o.mmap ? "mapped" : "pread", c->o.drop_packed ? ", drop_packed" : "");
    *served = 1;
    int rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
    stop_inval(se);
    /* 0: unmounted (fusermount3 -u); > 0: the signal that stopped us
     * (libfuse's handlers record it); < 0: -errno of a failure. */
    if (rc < 0)
        ckfs_log("session loop failed: %s (%d)", strerror(-rc), rc);
    status = rc < 0 ? 1 : 0;
    if (c->o.stats)
        ckfs_print_stats(c);
out_cache:
    ckfs_cache_stop(c);
out_unmount:
    leave_mount_point(se, mnt, dev);
    fuse_session_unmount(se);
out_signals:
    /* The loop has ended: a SIGTERM from now on (a teardown racing the
     * unmount, as every service manager's stop does) must not kill the
     * exit with status 143 once libfuse restores the default action. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out_opts:
    free(opts);
    fuse_opt_free_args(&args);
    return status;
}

void ckfs_daemon_prepare(void)
{
    /* Buffers of 1 MiB and more (chunks over the writer's sizes, their
     * scratch) are mapped and unmapped by malloc itself: with glibc's
     * moving threshold, freed ones stayed in each thread's arena and the
     * daemon grew far past cache_size reading a pack of 16 MiB chunks. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    raise_fd_limit(); /* before ckfs_open_all opens every packed file */
}

int ckfs_daemon_run(ckfs_ctx *c, const char *mnt, int *served)
{
    *served = 0;
    if (c->o.log[0] && open_log(c->o.log) != 0)
        return 1;
    return serve(c, mnt, served);
}
