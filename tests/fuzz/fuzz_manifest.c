/*
 * fuzz_manifest.c — libFuzzer target: ckm_load on an arbitrary
 * DST/ckptfs.manifest.  Each input is loaded twice: as it is (mostly stopped
 * by the first-line checksum), and as the JSON body of a manifest whose first
 * line carries the right checksum, which reaches the JSON and path checks.
 *
 * Oracles: no crash or sanitizer report; a rejection has a message and the
 * status of damage (CKP_ERR_CORRUPT), a newer format (CKP_ERR_VERSION) or
 * out of memory, never another (the file is there and regular); an
 * accepted manifest holds only safe relative paths, sorted and unique, whose
 * parent directories are listed, and sizes below 2^53; the mount's inode
 * table builds from it (its asserts check M1-M4 of manifest.h) and finds
 * every file by walking its path from the root.
 */
#include "fuzz_util.h"
#include "inode_table.h"
#include "manifest.h"

#include <fcntl.h>
#include <sys/stat.h>

static char dir[64];

static void cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, CKP_MANIFEST_NAME);
    unlink(path);
    rmdir(dir);
}

static void check(const ckm_manifest *m)
{
    for (size_t i = 0; i < m->n_files; i++) {
        if (!ckm_path_ok(m->files[i].path) || m->files[i].size > (1ull << 53) || m->files[i].mode > 07777)
            abort();
        if (i && strcmp(m->files[i - 1].path, m->files[i].path) >= 0)
            abort();
    }
    for (size_t i = 0; i < m->n_dirs; i++)
        if (!ckm_path_ok(m->dirs[i].path) || (i && strcmp(m->dirs[i - 1].path, m->dirs[i].path) >= 0))
            abort();
}

/* The mount's tree of an accepted manifest: every file is found by name,
 * component by component, at its own inode. */
static void check_tree(const ckm_manifest *m)
{
    cki_table *t = NULL;
    char err[256];
    ckfs_status st = cki_build(m, 0755, 0, &t, err, sizeof err);
    if (st == CKFS_ERR_NOMEM)
        return;
    if (st != CKFS_OK || cki_count(t) != 1 + m->n_dirs + m->n_files + m->n_links)
        abort();
    for (size_t i = 0; i < m->n_files; i++) {
        uint64_t ino = CKI_ROOT;
        char *p = strdup(m->files[i].path), *save = NULL;
        for (char *c = strtok_r(p, "/", &save); c && ino; c = strtok_r(NULL, "/", &save))
            ino = cki_lookup(t, ino, c);
        free(p);
        if (ino != cki_file_ino(t, i) || cki_get(t, ino)->file != (int64_t)i)
            abort();
    }
    cki_free(t);
}

static void load(const uint8_t *head, size_t hl, const uint8_t *body, size_t bl)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, CKP_MANIFEST_NAME);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (hl && write(fd, head, hl) != (ssize_t)hl) || (bl && write(fd, body, bl) != (ssize_t)bl))
        abort();
    close(fd);
    ckm_manifest *m = NULL;
    char err[1024] = "";
    ckp_status st = ckm_load(dir, &m, err, sizeof err);
    if (st == CKP_OK) {
        check(m);
        check_tree(m);
        ckm_free(m);
    } else if (m || !err[0] || (st != CKP_ERR_CORRUPT && st != CKP_ERR_VERSION && st != CKP_ERR_NOMEM)) {
        abort(); /* a regular file that is there: only damage, a version or memory can refuse it */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/ckz-manifest.%d", (int)getpid());
        mkdir(dir, 0700);
        atexit(cleanup);
    }
    load(NULL, 0, data, size);
    char head[64];
    int hl = snprintf(head, sizeof head, "CKPTFS-MANIFEST 1 %016llx\n", (unsigned long long)ckc_hash64(data, size));
    load((const uint8_t *)head, (size_t)hl, data, size);
    return 0;
}
