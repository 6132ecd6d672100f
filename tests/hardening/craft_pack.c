/*
 * craft_pack.c — test helper: a packed directory the real writer would never
 * write but a reader must handle, built from docs/format.md with every
 * checksum right (tests/fuzz/craft.h).
 *   craft_pack DST SIZE CHUNK ORIG
 * writes DST/ckptfs.manifest and DST/big.bin.ckpt holding SIZE pseudo-random
 * bytes as one RAW extent of CHUNK-byte chunks (up to 16 MiB, the format's
 * limit), and the same bytes to ORIG for comparison.
 */
#include "craft.h"
#include "hashing.h"
#include "manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

static int write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd < 0 || cku_pwrite_full(fd, p, n, 0) ? -1 : 0;
    if (fd >= 0)
        close(fd);
    if (rc)
        fprintf(stderr, "craft_pack: %s: %s\n", path, strerror(errno));
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: craft_pack DST SIZE CHUNK ORIG\n");
        return 64;
    }
    uint64_t size = strtoull(argv[2], NULL, 0);
    uint32_t chunk = (uint32_t)strtoul(argv[3], NULL, 0);
    uint8_t *data = malloc(size ? size : 1), sha[32];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (uint64_t i = 0; data && i < size; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        data[i] = (uint8_t)(x >> 24);
    }
    cku_sha256 *h = data ? cku_sha256_new() : NULL;
    if (!h)
        return 1;
    cku_sha256_update(h, data, size);
    cku_sha256_final(h, sha);
    size_t n = 0;
    uint8_t *ck = ckz_craft_raw(data, size, chunk, "big.bin", sha, 0644, &n);
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/big.bin.ckpt", argv[1]);
    ckm_file f = {.path = "big.bin", .size = size, .mode = 0644, .mtime_ns = 0, .kind = CKP_KIND_BLOB};
    memcpy(f.sha256, sha, 32);
    ckm_manifest m = {.files = &f, .n_files = 1};
    if (!ck || (mkdir(argv[1], 0755) && errno != EEXIST) || write_file(path, ck, n) ||
        write_file(argv[4], data, size))
        return 1;
    if (ckm_write(argv[1], &m, err, sizeof err)) {
        fprintf(stderr, "craft_pack: %s\n", err);
        return 1;
    }
    free(ck);
    free(data);
    return 0;
}
