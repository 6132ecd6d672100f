/*
 * golden_replay.c — replays every file under tests/golden-errors/TARGET/ in a normal build:
 * each input is fed to the same code as the fuzz target of that name (the
 * fuzz_*.c sources are compiled in, their entry points renamed, so the
 * oracles run too) and must then be rejected cleanly:
 *   safetensors/  st_parse fails (file_size = input size)
 *   container/    ckp_open fails or some chunk read fails; for names not
 *                 starting with "raw-", also after the fuzz harness's checksum
 *                 fix-up (and .expect is matched against that second error)
 *   decode/       ckc_decode_chunk does not return CKC_OK
 *   manifest/     ckm_load fails ("body-*": the input is the JSON after a
 *                 first line with the right checksum, as the fuzzer builds it)
 * The message replayed starts with the name of the status (ckp_status_name;
 * the decoder's ckc_status_name) or, for a chunk that fails, ends with it.
 * If NAME.expect exists, its first line "status: NAME" pins the status and
 * the error message must contain the rest (the field at fault).
 * Usage: golden_replay DIR   (DIR = tests/golden-errors)
 */
#include "fuzz_util.h"
#include "container.h"
#include "manifest.h"
#include "safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

int ckz_fuzz_safetensors(const uint8_t *d, size_t n);
int ckz_fuzz_container(const uint8_t *d, size_t n);
int ckz_fuzz_decode(const uint8_t *d, size_t n);
int ckz_fuzz_manifest(const uint8_t *d, size_t n);
int ckz_read_ckpt(const uint8_t *data, size_t size, char *why, size_t cap);

static char tmpdir[64];

static uint8_t *slurp(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st))
        return NULL;
    uint8_t *b = malloc((size_t)st.st_size + 1);
    if (b && cku_pread_full(fd, b, (size_t)st.st_size, 0)) {
        free(b);
        b = NULL;
    }
    close(fd);
    if (b)
        b[st.st_size] = 0;
    *n = (size_t)st.st_size;
    return b;
}

/* 1 if rejected; message in why. */
static int reject_safetensors(const char *name, const uint8_t *d, size_t n, char *why, size_t cap)
{
    st_header *h = NULL;
    char msg[1024];
    ckp_status st = st_parse(d, n, n, &h, msg, sizeof msg);
    st_free(h);
    snprintf(why, cap, "%s: %s", ckp_status_name(st), st == CKP_OK ? "accepted" : msg);
    return st != CKP_OK;
}

static int reject_container(const char *name, const uint8_t *d, size_t n, char *why, size_t cap)
{
    if (!ckz_read_ckpt(d, n, why, cap))
        return 0;
    if (!strncmp(name, "raw-", 4))
        return 1;
    uint8_t *c = malloc(n ? n : 1);
    memcpy(c, d, n);
    ckz_fixup_ckpt(c, n);
    /* the fixed-up form is what the fuzzer crashed on; its message is checked */
    int r = ckz_read_ckpt(c, n, why, cap);
    free(c);
    if (!r)
        snprintf(why, cap, "accepted after the checksum fix-up");
    return r;
}

static int reject_decode(const char *name, const uint8_t *d, size_t n, char *why, size_t cap)
{
    ckz_decode_case c;
    int r = 1;
    if (ckz_decode_parse(d, n, &c) == 0) {
        uint16_t *out = malloc(c.n_weights * 2 + 2);
        ckc_cplanes p = {c.plane[0], c.plane[1], c.plane[2], c.size[0], c.size[1], c.size[2]};
        ckc_status st = ckc_decode_chunk(c.enc, &c.cb, &p, c.first, c.n_weights, c.esc_first, c.esc_count, out);
        snprintf(why, cap, "%s", ckc_status_name(st));
        r = st != CKC_OK;
        free(out);
    } else {
        snprintf(why, cap, "too short for a decode case");
    }
    ckz_decode_free(&c);
    return r;
}

static int reject_manifest(const char *name, const uint8_t *d, size_t n, char *why, size_t cap)
{
    char path[128], head[64];
    snprintf(path, sizeof path, "%s/%s", tmpdir, CKP_MANIFEST_NAME);
    int hl = 0;
    if (!strncmp(name, "body-", 5))
        hl = snprintf(head, sizeof head, "CKPTFS-MANIFEST 1 %016llx\n", (unsigned long long)ckc_hash64(d, n));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, head, (size_t)hl) != hl || write(fd, d, n) != (ssize_t)n)
        abort();
    close(fd);
    ckm_manifest *m = NULL;
    char msg[1024];
    ckp_status st = ckm_load(tmpdir, &m, msg, sizeof msg);
    ckm_free(m);
    snprintf(why, cap, "%s: %s", ckp_status_name(st), st == CKP_OK ? "accepted" : msg);
    return st != CKP_OK;
}

static const struct {
    const char *dir;
    int (*fuzz)(const uint8_t *, size_t);
    int (*reject)(const char *, const uint8_t *, size_t, char *, size_t);
} targets[] = {
    {"safetensors", ckz_fuzz_safetensors, reject_safetensors},
    {"container", ckz_fuzz_container, reject_container},
    {"decode", ckz_fuzz_decode, reject_decode},
    {"manifest", ckz_fuzz_manifest, reject_manifest},
};

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* 1 if why matches expect: an optional "status: NAME" line, then text that
 * why must contain. */
static int expect_ok(const char *why, const char *expect)
{
    const char *text = expect;
    if (!strncmp(expect, "status: ", 8)) {
        const char *nl = strchr(expect, '\n');
        size_t n = (nl ? (size_t)(nl - expect) : strlen(expect)) - 8, wn = strlen(why);
        text = nl ? nl + 1 : "";
        int head = !strncmp(why, expect + 8, n) && (why[n] == ':' || why[n] == 0);
        int tail = wn > n + 2 && !strncmp(why + wn - n, expect + 8, n) && !strncmp(why + wn - n - 2, ": ", 2);
        if (!head && !tail)
            return 0;
    }
    return strstr(why, text) != NULL;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: golden_replay tests/golden-errors\n");
        return 2;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ckptfs-golden.%d", (int)getpid());
    mkdir(tmpdir, 0700);
    int failures = 0, total = 0;
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], targets[t].dir);
        DIR *d = opendir(dir);
        if (!d) {
            fprintf(stderr, "golden_replay: %s: missing\n", dir);
            failures++;
            continue;
        }
        char *names[4096];
        size_t nn = 0;
        struct dirent *e;
        while ((e = readdir(d)) && nn < 4096)
            if (e->d_name[0] != '.' && !has_suffix(e->d_name, ".expect") && strcmp(e->d_name, "README"))
                names[nn++] = strdup(e->d_name);
        closedir(d);
        qsort(names, nn, sizeof *names, cmp_str);
        for (size_t i = 0; i < nn; i++) {
            char path[8192], why[1200] = "";
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            size_t n;
            uint8_t *data = slurp(path, &n);
            if (!data) {
                fprintf(stderr, "FAIL %s: cannot read\n", path);
                failures++;
                continue;
            }
            total++;
            targets[t].fuzz(data, n); /* the fuzz target's own oracles abort on failure */
            int rejected = targets[t].reject(names[i], data, n, why, sizeof why);
            snprintf(path + strlen(path), sizeof path - strlen(path), ".expect");
            size_t en;
            char *expect = (char *)slurp(path, &en);
            while (expect && en && (expect[en - 1] == '\n' || expect[en - 1] == ' '))
                expect[--en] = 0;
            if (!rejected) {
                fprintf(stderr, "FAIL %s/%s: accepted (%s)\n", targets[t].dir, names[i], why);
                failures++;
            } else if (expect && !expect_ok(why, expect)) {
                fprintf(stderr, "FAIL %s/%s: rejected with \"%s\", expected \"%s\"\n", targets[t].dir, names[i],
                        why, expect);
                failures++;
            } else {
                printf("ok   %s/%s: %s\n", targets[t].dir, names[i], why);
            }
            free(expect);
            free(data);
            free(names[i]);
        }
    }
    char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, CKP_MANIFEST_NAME);
    unlink(path);
    rmdir(tmpdir);
    printf("golden_replay: %d inputs, %d failures\n", total, failures);
    return failures ? 1 : 0;
}
