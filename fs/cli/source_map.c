/*
 * source_map.c — read-only maps of source files that survive truncation
 * (source_map.h).
 *
 * A process-wide SIGBUS handler looks the faulting address up in a table of
 * the maps open now; if it lies in one, the rest of that map (from the
 * faulting page on) is replaced by anonymous zero pages, the map is marked
 * truncated, and the faulting load is retried and reads zeros.  A fault in
 * any other memory restores the default action and re-faults (a real crash
 * stays a crash).  The table is a fixed array: the handler reads it without
 * locks; slots are claimed and released under map_lock, and a slot's base is
 * published (set non-zero) only after its length.
 *
 * Read leases (cks_map_lease) are listed in a second table of descriptors,
 * which the SIGIO handler scans when a lease is broken: it gives up every
 * lease with a break pending, so a process opening a source for writing
 * waits no longer than the signal takes (SIGIO does not queue: one signal
 * may stand for several breaks).
 */
#define _GNU_SOURCE
#include "source_map.h"
#include "util.h"


#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct {
    atomic_uintptr_t base; /* 0: free */
    atomic_size_t len;
    atomic_int truncated;
    atomic_uint_fast64_t fault_at; /* offset of the first read caught */
} maps[CKS_MAX_MAPS];
static atomic_int lease_fds[CKS_MAX_MAPS]; /* descriptor + 1 of a lease held; 0: free */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static uintptr_t page_size;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < CKS_MAX_MAPS; i++) {
        uintptr_t b = atomic_load(&maps[i].base);
        size_t n = atomic_load(&maps[i].len);
        if (!b || a < b || a >= b + n)
            continue;
        uintptr_t from = a & ~(page_size - 1), end = (b + n + page_size - 1) & ~(page_size - 1);
        if (mmap((void *)from, end - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
            MAP_FAILED) {
            if (!atomic_exchange(&maps[i].truncated, 1))
                atomic_store(&maps[i].fault_at, a - b);
            return;
        }
        break;
    }
    signal(sig, SIG_DFL); /* not ours (or no zero pages): the retried load crashes as it would have */
}

/* A lease is being broken: give up each one with a break pending (F_GETLEASE
 * then answers its target, F_UNLCK, instead of F_RDLCK). */
static void on_sigio(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    int e = errno;
    for (int i = 0; i < CKS_MAX_MAPS; i++) {
        int fd = atomic_load(&lease_fds[i]) - 1;
        if (fd >= 0 && fcntl(fd, F_GETLEASE) != F_RDLCK)
            fcntl(fd, F_SETLEASE, F_UNLCK);
    }
    errno = e;
}

static void install_handler(void)
{
    page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
    struct sigaction io = {.sa_sigaction = on_sigio, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigemptyset(&io.sa_mask);
    sigaction(SIGIO, &io, NULL);
}

int cks_map_open(const char *path, cks_map *m, char *err, size_t errCapacity)
{
    *m = (cks_map){.fd = -1, .slot = -1, .lease = -1};
    pthread_once(&handler_once, install_handler);
    m->fd = cku_open_regular(NULL, path, &m->st, err, errCapacity);
    if (m->fd < 0)
        return -1;
    m->size = (uint64_t)m->st.st_size;
    if (!m->size)
        return 0;
    pthread_mutex_lock(&map_lock);
    for (int i = 0; i < CKS_MAX_MAPS && m->slot < 0; i++)
        if (!atomic_load(&maps[i].base))
            m->slot = i;
    void *p = m->slot < 0 ? MAP_FAILED : mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, m->fd, 0);
    if (p != MAP_FAILED) {
        atomic_store(&maps[m->slot].truncated, 0);
        atomic_store(&maps[m->slot].len, m->size);
        atomic_store(&maps[m->slot].base, (uintptr_t)p);
        madvise(p, m->size, MADV_SEQUENTIAL);
        m->p = p;
    }
    int e = m->slot < 0 ? ENOSPC : errno;
    pthread_mutex_unlock(&map_lock);
    if (!m->p) {
        m->slot = -1;
        close(m->fd);
        m->fd = -1;
        cku_errf(err, errCapacity, -1, "%s", strerror(e));
        errno = e;
        return -1;
    }
    return 0;
}

int cks_map_truncated(const cks_map *m) { return m->slot >= 0 && atomic_load(&maps[m->slot].truncated); }

int cks_map_read_error(const cks_map *m, uint64_t *at)
{
    struct stat now;
    uint8_t byte;
    if (!cks_map_truncated(m) || fstat(m->fd, &now) || (uint64_t)now.st_size < m->size)
        return 0;
    *at = atomic_load(&maps[m->slot].fault_at);
    ssize_t n = pread(m->fd, &byte, 1, (off_t)*at);
    return n < 0 ? errno : EIO;
}

int cks_map_lease(cks_map *m)
{
    pthread_mutex_lock(&map_lock);
    for (int i = 0; i < CKS_MAX_MAPS && m->lease < 0; i++)
        if (!atomic_load(&lease_fds[i]))
            m->lease = i;
    int rc = CKS_LEASE_NONE;
    if (m->lease >= 0) {
        atomic_store(&lease_fds[m->lease], m->fd + 1); /* listed before a break can be signalled */
        if (fcntl(m->fd, F_SETSIG, SIGIO) == 0 && fcntl(m->fd, F_SETLEASE, F_RDLCK) == 0)
            rc = CKS_LEASE_HELD;
        else if (errno == EAGAIN)
            rc = CKS_LEASE_WRITERS;
        if (rc != CKS_LEASE_HELD) {
            atomic_store(&lease_fds[m->lease], 0);
            m->lease = -1;
        }
    }
    pthread_mutex_unlock(&map_lock);
    return rc;
}

int cks_map_lease_kept(const cks_map *m) { return m->lease < 0 || fcntl(m->fd, F_GETLEASE) == F_RDLCK; }

void cks_map_close(cks_map *m)
{
    if (m->lease >= 0) {
        pthread_mutex_lock(&map_lock);
        fcntl(m->fd, F_SETLEASE, F_UNLCK);
        atomic_store(&lease_fds[m->lease], 0);
        pthread_mutex_unlock(&map_lock);
    }
    if (m->p) {
        pthread_mutex_lock(&map_lock);
        atomic_store(&maps[m->slot].base, 0);
        munmap((void *)m->p, m->size);
        pthread_mutex_unlock(&map_lock);
    }
    if (m->fd >= 0)
        close(m->fd);
    *m = (cks_map){.fd = -1, .slot = -1, .lease = -1};
}

int cks_same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}
