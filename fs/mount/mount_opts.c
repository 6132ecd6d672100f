/*
 * mount_opts.c — parsing `ckptfs mount` arguments and the FUSE-free helpers
 * of mounting (mount_opts.h).  Unknown options are errors: a typo in an
 * fstab line should fail loudly, not mount with defaults.
 */
#define _GNU_SOURCE
#include "mount_opts.h"
#include "s3.h" /* cks3_is_url */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A bad command line (CKFS_ERR_USAGE, exit 2) with its message. */
#define usage_err(err, cap, ...) ((ckfs_status)cku_errf((err), (cap), CKFS_ERR_USAGE, __VA_ARGS__))

const char *ckfs_mount_usage(void)
{
    return "usage: ckptfs mount [-f] [-d] [-q|-v] [-o OPTIONS] PACKED MOUNTPOINT\n"
           "\n"
           "Serve the packed directory PACKED at MOUNTPOINT as the original files\n"
           "(read-only).  Every packed file is checked before the command returns.\n"
           "PACKED may be s3://BUCKET/PREFIX, a packed directory in S3-compatible\n"
           "storage (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or\n"
           "AWS_PROFILE and ~/.aws; AWS_REGION, AWS_ENDPOINT_URL; never on the command line).\n"
           "  -f                 stay in the foreground (log to stderr, not syslog)\n"
           "  -d                 libfuse debug output (implies -f)\n"
           "  -q, --quiet        no warnings, errors only\n"
           "  -v, --verbose      log to stderr as well once detached (as -o log=stderr)\n"
           "  -V, --version      the program's and the format's versions\n"
           "  -h, --help         this text\n"
           "OPTIONS (comma-separated):\n"
           "  cache_size=BYTES   decoded chunks kept in memory (K, M, G, T: KiB, MiB, GiB,\n"
           "                     TiB; default 256M)\n"
           "  threads=N          most FUSE worker threads (default 16)\n"
           "  prefetch=BYTES     decode ahead of sequential readers (default 1M; 0 = off)\n"
           "  prefetch_threads=N decode-ahead workers (default min(2, CPUs - 1), at least 1)\n"
           "  read_ahead_kb=N    kernel readahead of the mount (default 1024; 0 = kernel's)\n"
           "  allow_other        let other users read (adds default_permissions)\n"
           "  stats              print cache statistics at unmount (with -f)\n"
           "  uid=USER, gid=GROUP  owner and group every file shows (names or numbers;\n"
           "                     default: whoever mounted); another user than yours\n"
           "                     needs allow_other, which lets that user in\n"
           "  umask=M            take permission bits M (octal) away from the stored mode\n"
           "                     of every file and directory (a 0600 file stays 0600 under\n"
           "                     umask=022: a mask never grants what was not stored)\n"
           "  fmask=M, dmask=M   the same for files only / directories only\n"
           "  file_mode=M, dir_mode=M  the mode every file / directory shows instead of\n"
           "                     its stored one (octal; a mask still applies)\n"
           "  log=FILE|stderr    log (start-up line, damaged chunks) to FILE or to stderr\n"
           "                     instead of syslog once detached\n"
           "  nonempty           allow a mount point that is not empty\n"
           "  nommap             read packed files with pread instead of mapping them\n"
           "  drop_packed        keep packed bytes out of the page cache: read ahead\n"
           "                     with O_DIRECT, or dropped once decoded (default when\n"
           "                     the model is over half of RAM; implies nommap)\n"
           "  keep_packed        never drop them\n"
           "  endpoint=URL       s3://: the server (default AWS_ENDPOINT_URL, or AWS's own)\n"
           "  region=R, profile=P  s3://: region, and the profile of ~/.aws to use\n"
           "  s3_windows=N       s3://: network windows (16 MiB) in flight at most (default 16)\n"
           "  s3_timeout=SECONDS s3://: how long a read retries a failing server before\n"
           "                     it fails with EIO (default 20)\n"
           "  cache_dir=DIR      s3://: keep the packed bytes fetched in DIR (made if\n"
           "                     missing) and read them from there after a remount; each\n"
           "                     use checked, a bad entry fetched again; DIR may be shared\n"
           "  cache_dir_size=BYTES  s3://: most space cache_dir takes, least recently used\n"
           "                     dropped first (default 10G)\n"
           "  ro, nosuid, nodev  accepted; always in effect\n"
           "  noexec, noatime    passed to the mount\n"
           "To unmount: fusermount3 -u MOUNTPOINT (or umount as root).\n"
           "For a service user: -o allow_other,uid=USER,gid=GROUP (files saved 0600 stay\n"
           "readable by USER only), or allow_other,file_mode=0644,dir_mode=0755 for all.\n"
           "Exit status: 0 mounted (with -f: unmounted cleanly), 1 failure, 2 usage error.\n"
           "\n"
           "Example:  ckptfs mount -o allow_other /srv/models/llama.packed /models/llama\n";
}

unsigned ckfs_default_prefetch_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 2)
        return 1;
    return n - 1 < CKFS_DEFAULT_PREFETCH_THREADS ? (unsigned)(n - 1) : CKFS_DEFAULT_PREFETCH_THREADS;
}

/* A number of the options starts with a digit: strtoul and strtoull take
 * leading spaces and a sign, and negate a '-' one (" -1" is ULONG_MAX). */
static int starts_digit(const char *s) { return *s >= '0' && *s <= '9'; }

/* Parse a byte count with an optional K/M/G/T suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || !starts_digit(s))
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    }
    if (*end == 'i' && shift)
        end++;
    if ((*end == 'b' || *end == 'B') && shift)
        end++;
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || !starts_digit(s) || v < lo || v > hi)
        return -1;
    *out = (unsigned)v;
    return 0;
}

/* uid=/gid=: a number or a user / group name. */
static int parse_id(const char *s, int group, long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (starts_digit(s) && !*end && !errno && v < 0xffffffffUL) {
        *out = (long)v;
        return 0;
    }
    if (group) {
        struct group *g = getgrnam(s);
        return g ? (*out = (long)g->gr_gid, 0) : -1;
    }
    struct passwd *pw = getpwnam(s);
    return pw ? (*out = (long)pw->pw_uid, 0) : -1;
}

/* umask=/fmask=/dmask=: octal, at most 0777. */
static int parse_mask(const char *s, int *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 8);
    if (errno || end == s || *end || !starts_digit(s) || v > 0777)
        return -1;
    *out = (int)v;
    return 0;
}

unsigned ckfs_apply_mask(const ckfs_mount_opts *o, unsigned mode)
{
    int dir = S_ISDIR(mode);
    if (!dir && !S_ISREG(mode))
        return mode; /* a symbolic link's bits mean nothing */
    int set = dir ? o->dir_mode : o->file_mode, mask = dir ? o->dmask : o->fmask;
    unsigned perm = set >= 0 ? (unsigned)set : mode & 07777u;
    if (mask >= 0)
        perm &= ~(unsigned)mask;
    return (mode & ~07777u) | perm;
}

#define MAX_THREADS 1024            /* threads= */
#define MAX_PREFETCH_THREADS 64     /* prefetch_threads= */
#define MAX_READ_AHEAD_KB (1u << 20) /* read_ahead_kb= */

/* One option of -o.  @return CKFS_OK or CKFS_ERR_USAGE with err set. */
static ckfs_status parse_one(ckfs_mount_opts *o, const char *opt, char *err, size_t cap)
{
    const char *eq = strchr(opt, '=');
    size_t klen = eq ? (size_t)(eq - opt) : strlen(opt);
    const char *val = eq ? eq + 1 : NULL;
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(opt, k, klen) == 0)
    char why[256];
    int s3 = cks3_opts_take(&o->s3, opt, klen, val, why, sizeof why);
    if (s3) /* endpoint=, region=, profile=, s3_timeout=: not echoed (a password in an endpoint) */
        return s3 > 0 ? 0 : usage_err(err, cap, "ckptfs mount: bad value in option '%.*s': %s", (int)klen, opt, why);
    if (!val) {
        if (KEY("ro") || KEY("nosuid") || KEY("nodev") || KEY("default_permissions"))
            return 0;
        if (KEY("allow_other"))
            return o->allow_other = 1, 0;
        if (KEY("noexec"))
            return o->noexec = 1, 0;
        if (KEY("noatime"))
            return o->noatime = 1, 0;
        if (KEY("stats"))
            return o->stats = 1, 0;
        if (KEY("nonempty"))
            return o->nonempty = 1, 0;
        if (KEY("mmap"))
            return o->mmap = 1, 0;
        if (KEY("nommap"))
            return o->mmap = 0, 0;
        if (KEY("drop_packed"))
            return o->drop_packed = 1, 0;
        if (KEY("keep_packed"))
            return o->drop_packed = 0, 0;
        if (KEY("rw"))
            return usage_err(err, cap, "ckptfs mount: option 'rw': ckptfs mounts are read-only");
    } else {
        if (KEY("cache_size") && parse_size(val, &o->cache_size) == 0)
            return 0;
        if (KEY("prefetch") && parse_size(val, &o->prefetch) == 0)
            return 0;
        if (KEY("threads") && parse_uint(val, 1, MAX_THREADS, &o->threads) == 0)
            return 0;
        if (KEY("prefetch_threads") && parse_uint(val, 0, MAX_PREFETCH_THREADS, &o->prefetch_threads) == 0)
            return 0;
        if (KEY("read_ahead_kb") && parse_uint(val, 0, MAX_READ_AHEAD_KB, &o->read_ahead_kb) == 0)
            return 0;
        if (KEY("uid") && parse_id(val, 0, &o->uid) == 0)
            return 0;
        if (KEY("gid") && parse_id(val, 1, &o->gid) == 0)
            return 0;
        if ((KEY("umask") || KEY("fmask")) && parse_mask(val, &o->fmask) == 0 &&
            (!KEY("umask") || parse_mask(val, &o->dmask) == 0))
            return 0;
        if (KEY("dmask") && parse_mask(val, &o->dmask) == 0)
            return 0;
        if (KEY("file_mode") && parse_mask(val, &o->file_mode) == 0)
            return 0;
        if (KEY("dir_mode") && parse_mask(val, &o->dir_mode) == 0)
            return 0;
        if (KEY("s3_windows") && parse_uint(val, 1, 256, &o->s3_windows) == 0)
            return 0;
        if (KEY("cache_dir") && *val && strlen(val) < sizeof o->cache_dir)
            return snprintf(o->cache_dir, sizeof o->cache_dir, "%s", val), 0;
        if (KEY("cache_dir_size") && parse_size(val, &o->cache_dir_size) == 0 && o->cache_dir_size >= (1u << 20))
            return 0;
        if (KEY("log") && *val && strlen(val) < sizeof o->log)
            return snprintf(o->log, sizeof o->log, "%s", val), 0; /* val is freed after parsing */
        if (KEY("uid") || KEY("gid"))
            return usage_err(err, cap, "ckptfs mount: option '%s': no such %s", opt, KEY("uid") ? "user" : "group");
        /* what each takes, with the bounds of the parses above */
#define BAD "ckptfs mount: bad value in option '%s': "
        if (KEY("cache_size") || KEY("prefetch"))
            return usage_err(err, cap, BAD "a number of bytes, optionally with a K, M, G or T suffix (64M, 1G) expected",
                             opt);
        if (KEY("threads"))
            return usage_err(err, cap, BAD "a whole number from 1 to %u expected", opt, MAX_THREADS);
        if (KEY("prefetch_threads"))
            return usage_err(err, cap, BAD "a whole number from 0 to %u expected", opt, MAX_PREFETCH_THREADS);
        if (KEY("read_ahead_kb"))
            return usage_err(err, cap, BAD "a whole number of KiB from 0 to %u expected", opt,
                             MAX_READ_AHEAD_KB);
        if (KEY("umask") || KEY("fmask") || KEY("dmask"))
            return usage_err(err, cap, BAD "an octal mask from 0 to 0777 expected", opt);
        if (KEY("file_mode") || KEY("dir_mode"))
            return usage_err(err, cap, BAD "an octal mode from 0 to 0777 expected", opt);
        if (KEY("log"))
            return usage_err(err, cap, BAD "a file name, or stderr expected", opt);
        if (KEY("s3_windows"))
            return usage_err(err, cap, BAD "a whole number from 1 to 256 expected", opt);
        if (KEY("cache_dir"))
            return usage_err(err, cap, BAD "a directory expected", opt);
        if (KEY("cache_dir_size"))
            return usage_err(err, cap, BAD "a number of bytes of at least 1M (10G, 500M) expected", opt);
#undef BAD
    }
#undef KEY
    /* the key only: a mistyped endpoint= (endpiont=http://user:pw@host) is
     * no secret the message may repeat */
    return usage_err(err, cap, "ckptfs mount: unknown option '%.*s'%s (see ckptfs mount -h)", (int)klen, opt,
                     val ? " (its value not shown)" : "");
}

static ckfs_status parse_opt_list(ckfs_mount_opts *o, const char *list, char *err, size_t cap)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return cku_errf(err, cap, CKFS_ERR_NOMEM, "ckptfs mount: out of memory");
    ckfs_status st = CKFS_OK;
    for (char *tok = strtok_r(copy, ",", &save); tok && st == CKFS_OK; tok = strtok_r(NULL, ",", &save))
        st = parse_one(o, tok, err, cap);
    free(copy);
    return st;
}

ckfs_status ckfs_parse_mount_args(int argc, char **argv, ckfs_mount_opts *o, char *err, size_t cap)
{
    memset(o, 0, sizeof *o);
    o->cache_size = CKFS_DEFAULT_CACHE;
    o->threads = CKFS_DEFAULT_THREADS;
    o->prefetch = CKFS_DEFAULT_PREFETCH;
    o->prefetch_threads = ckfs_default_prefetch_threads();
    o->read_ahead_kb = CKFS_DEFAULT_READ_AHEAD_KB;
    o->mmap = 1;
    o->drop_packed = -1;
    o->s3_windows = CKFS_DEFAULT_S3_WINDOWS;
    o->s3.timeout_ms = CKFS_DEFAULT_S3_TIMEOUT_MS;
    o->cache_dir_size = CKFS_DEFAULT_CACHE_DIR_SIZE;
    o->uid = o->gid = -1;
    o->fmask = o->dmask = -1;
    o->file_mode = o->dir_mode = -1;
    const char *pos[2];
    int npos = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == 0) {
            if (npos == 2)
                return usage_err(err, cap, "ckptfs mount: unexpected argument '%s'", a);
            pos[npos++] = a;
        } else if (!strcmp(a, "--")) {
            only_pos = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            o->help = 1;
            return CKFS_OK;
        } else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            o->version = 1;
            return CKFS_OK;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = 1;
        } else if (!strcmp(a, "-f")) {
            o->foreground = 1;
        } else if (!strcmp(a, "-d")) {
            o->debug = o->foreground = 1;
        } else if (!strncmp(a, "-o", 2)) {
            const char *list = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            if (!list)
                return usage_err(err, cap, "ckptfs mount: -o needs an option list");
            ckfs_status st = parse_opt_list(o, list, err, cap);
            if (st != CKFS_OK)
                return st;
        } else {
            return usage_err(err, cap, "ckptfs mount: unknown flag '%s' (see ckptfs mount -h)", a);
        }
    }
    if (npos != 2)
        return usage_err(err, cap, "ckptfs mount: need PACKED and MOUNTPOINT (see ckptfs mount --help)");
    o->dst = pos[0];
    o->mnt = pos[1];
    if (o->cache_dir[0] && !cks3_is_url(o->dst))
        return usage_err(err, cap, "ckptfs mount: cache_dir= is for s3:// only: a local packed directory is read "
                                   "from its own disk");
    if (o->uid >= 0 && !o->allow_other && (uid_t)o->uid != getuid())
        return usage_err(err, cap,
                         "ckptfs mount: uid=%ld without allow_other: the kernel lets only the user who mounts "
                         "(uid %ld) into a FUSE mount, so uid %ld would see its files and be refused them.\n"
                         "Add allow_other (a user other than root needs user_allow_other in /etc/fuse.conf), "
                         "or mount as that user.",
                         o->uid, (long)getuid(), o->uid);
    return CKFS_OK;
}

ckfs_status ckfs_check_mountpoint(const char *mnt, char *err, size_t cap)
{
    struct stat st;
    if (stat(mnt, &st) != 0) {
        if (errno != ENOTCONN)
            return cku_errf(err, cap, CKFS_ERR_IO, "ckptfs mount: %s: %s", mnt, strerror(errno));
        return cku_errf(err, cap, CKFS_ERR_MOUNTPOINT,
                        "ckptfs mount: %s is a stale FUSE mount (its daemon is gone: "
                        "Transport endpoint is not connected).\n"
                        "Run `fusermount3 -u %s` (or `umount -l %s` as root), then mount again; if it "
                        "says the mount is busy (a process still holds a file open there), "
                        "`fusermount3 -uz %s` detaches it now.",
                        mnt, mnt, mnt, mnt);
    }
    if (!S_ISDIR(st.st_mode))
        return cku_errf(err, cap, CKFS_ERR_MOUNTPOINT, "ckptfs mount: %s: not a directory", mnt);
    return CKFS_OK;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_mountinfo(char *s);

/* The file system type of the topmost mount whose mount point is mnt, in
 * type (empty if mnt is not a mount point). */
static void mount_type_at(const char *mnt, char *type, size_t cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    *type = 0;
    if (!f)
        return;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        char point[4096], fstype[256];
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 || sscanf(sep + 3, "%255s", fstype) != 1)
            continue;
        unescape_mountinfo(point);
        if (!strcmp(point, mnt))
            snprintf(type, cap, "%s", fstype); /* the last one wins: it is on top */
    }
    fclose(f);
}

ckfs_status ckfs_check_mountpoint_free(const char *mnt, int nonempty, char *err, size_t cap)
{
    char type[256];
    mount_type_at(mnt, type, sizeof type);
    if (!strncmp(type, "fuse", 4))
        return cku_errf(err, cap, CKFS_ERR_MOUNTPOINT,
                        "ckptfs mount: %s is already mounted (%s): another daemon serves it.\n"
                        "Unmount it first (fusermount3 -u %s), or choose another mount point.",
                        mnt, type, mnt);
    DIR *d = opendir(mnt);
    struct dirent *e;
    int empty = 1;
    while (d && empty && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            empty = 0;
    if (d)
        closedir(d);
    if (!empty && !nonempty)
        return cku_errf(err, cap, CKFS_ERR_MOUNTPOINT,
                        "ckptfs mount: %s is not empty: mounting would hide what it holds.\n"
                        "Choose an empty directory, or add -o nonempty to mount over it anyway.",
                        mnt);
    return CKFS_OK;
}

ckfs_status ckfs_check_mountpoint_outside(const char *mnt, const char *packed, char *err, size_t cap)
{
    size_t n = strlen(mnt);
    while (n > 1 && mnt[n - 1] == '/') /* "/" stays "/" */
        n--;
    int above = !strncmp(packed, mnt, n) && (packed[n] == 0 || packed[n] == '/' || (n == 1 && mnt[0] == '/'));
    if (!above)
        return CKFS_OK;
    return cku_errf(err, cap, CKFS_ERR_MOUNTPOINT,
                    "ckptfs mount: %s %s the packed directory %s: mounting there would hide the packed files "
                    "the daemon reads while it serves (every read would fail).\n"
                    "Choose a mount point outside %s.",
                    mnt, packed[n] ? "holds" : "is", packed, packed);
}

static void unescape_mountinfo(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') << 6 | (r[2] - '0') << 3 | (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
}

int ckfs_set_read_ahead_kb(const char *mnt, unsigned kb)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[8192], dev[64] = "";
    while (fgets(line, sizeof line, f)) {
        char majmin[64], point[4096];
        /* id parent major:minor root mount-point ... */
        if (sscanf(line, "%*s %*s %63s %*s %4095s", majmin, point) != 2)
            continue;
        unescape_mountinfo(point);
        if (!strcmp(point, mnt) && strstr(line, " - fuse.ckptfs "))
            snprintf(dev, sizeof dev, "%s", majmin);  /* the last one wins: it is on top */
    }
    fclose(f);
    if (!dev[0]) {
        errno = ENOENT;
        return -1;
    }
    char path[128];
    snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", dev);
    FILE *w = fopen(path, "we");
    if (!w)
        return -1;
    int rc = fprintf(w, "%u\n", kb) < 0 ? -1 : 0;
    if (fclose(w) != 0)
        rc = -1;
    return rc;
}

int ckfs_drop_packed_auto(uint64_t servedBytes)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 && servedBytes > (uint64_t)pages * (uint64_t)page / 2;
}
