/*
 * fuzz_packdir.c — libFuzzer target: whole packed directories (manifest and
 * .ckpt files, serialized as in packdir.h), mutated field by field with their
 * checksums recomputed, through the real readers.
 *
 * The custom mutator (LLVMFuzzerCustomMutator) parses the directory and
 * changes one structural thing: a field of a file header, TOC header, extent
 * record or chunk index entry set to a nearby or telling value; a coherent
 * change of several (chunk size with its chunk count, escape count with the
 * escape plane's size, two extents' payloads swapped, a plane moved); payload
 * bytes; a manifest field (path, size, sha256, mode, mtime_ns, kind, entries
 * added, dropped or swapped); or the files themselves (renamed, copied over
 * each other, dropped).  Then it recomputes every hash a structural change
 * invalidates (index, TOC and header hashes, file_size, the manifest's first
 * line; 1 time in 16 it leaves them, so the checks in front stay covered), and
 * half the time copies the changed TOC's size and SHA-256 into the manifest
 * entry, so that the mutation reaches the per-chunk and whole-file checks.
 *
 * Each input is written to a private directory (tmpfs when there is one) and
 * read by: the model below (ckm_load, then per listed file ckp_open,
 * ckp_check, the manifest binding, every chunk decoded, the SHA-256 of the
 * decoded bytes), `ckptfs verify` (ckpt_verify) and `ckptfs unpack`
 * (ckpt_unpack).  Oracles, beyond no crash, leak or sanitizer report:
 *  - an open reader keeps R1-R7 (ckp_check); a chunk read CKP_OK hashes to
 *    its index entry;
 *  - verify succeeds exactly when the model found every file intact (the
 *    manifest loads, each TOC matches its entry, every chunk decodes and the
 *    decoded bytes' SHA-256 is the recorded one);
 *  - unpack likewise, and what it wrote has, file by file, the size and
 *    SHA-256 the manifest lists (never wrong bytes); when it fails, nothing
 *    is left at OUT or beside it.
 * The original bytes are the ones the manifest's SHA-256 names: a mutation
 * cannot make other bytes hash to it, so "the SHA-256 matches" is "the
 * original bytes" without knowing them.
 *
 * Built without libFuzzer (CKZ_REPLAY), main() replays files given on the
 * command line and then runs the mutator itself, without coverage, a fixed
 * number of rounds from each of them: the ctest fuzz_packdir_replay.
 */
#include "packdir.h"
#include "ckread.h"
#include "commands.h"
#include "hashing.h"
#include "manifest.h"
#include "progress.h"

#include <cjson/cJSON.h>
#include <ftw.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CKZ_ASAN 1
#endif
#ifdef CKZ_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

/* Decode at most this many original bytes per input (a ZSTD chunk of 16 MiB
 * can come from a few bytes of frame): beyond it, only the opens are checked. */
#define MODEL_MAX_BYTES (40ull << 20)

static char base[64], dst[96], out[96];
static int quiet_fd = -1, saved_fd[3] = {-1, -1, -1};

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static void rm_tree(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void cleanup(void)
{
    rm_tree(base);
}

/* The commands print what they refuse: send it to /dev/null (sanitizer
 * reports keep the real stderr). */
static void quiet(int on)
{
    fflush(stdout);
    fflush(stderr);
    for (int fd = 1; fd <= 2; fd++)
        dup2(on ? quiet_fd : saved_fd[fd], fd);
}

/* The progress line at sizes only a damaged manifest lists: its ETA and rate
 * conversions went past int and uint64 (the fuzzer's first find; undefined,
 * so only the UBSan builds see it, and the CLI's threads made the input
 * flaky: checked here, once, directly). */
static void progress_limits(void)
{
    char r[24];
    quiet(1);
    cku_progress_set_mode(CKU_PROGRESS_PLAIN);
    cku_progress *p = cku_progress_new("checking", UINT64_MAX);
    cku_progress_add(p, 1);
    for (double t = cku_now(); cku_now() - t < 0.002;)
        ;
    cku_progress_done(p);
    cku_human_rate(UINT64_MAX, 1e-3, r);
    cku_progress_set_mode(CKU_PROGRESS_AUTO);
    quiet(0);
}

static void setup(void)
{
    if (base[0])
        return;
    struct stat st;
    snprintf(base, sizeof base, "%s/ckz-packdir.%d", stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid());
    rm_tree(base);
    if (mkdir(base, 0700))
        abort();
    snprintf(dst, sizeof dst, "%s/dst", base);
    snprintf(out, sizeof out, "%s/out", base);
    quiet_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    saved_fd[1] = fcntl(1, F_DUPFD_CLOEXEC, 3);
    saved_fd[2] = fcntl(2, F_DUPFD_CLOEXEC, 3);
    if (quiet_fd < 0 || saved_fd[1] < 0 || saved_fd[2] < 0)
        abort();
#ifdef CKZ_ASAN
    __sanitizer_set_report_fd((void *)(intptr_t)saved_fd[2]);
#endif
    atexit(cleanup);
    progress_limits();
}

/* ---- the model: what a reader must conclude ------------------------------ */

/* An oracle broke: say which (with stderr back if the commands had it). */
static void fail(const char *what, const char *detail)
{
    quiet(0);
    fprintf(stderr, "fuzz_packdir: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}


static void hex32(const uint8_t *d, char *o) { cku_hex(d, 32, o); }

/* 1 if DST/<f>.ckpt is intact and is f's: every chunk decodes and the bytes
 * hash to the recorded SHA-256.  *bound: it opens and its TOC's path, size
 * and SHA-256 are f's.  *big: too large to decode here. */
static int model_file(const ckm_file *f, uint64_t *budget, int *big, int *bound)
{
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/%s%s", dst, f->path, CKP_SUFFIX);
    ckp_reader *r = NULL;
    if (ckp_open(path, &r, err, sizeof err) != CKP_OK) {
        if (r || !strstr(err, CKU_ESC(path)))
            fail("a refused open returned a reader or did not name the file", err);
        return 0;
    }
    if (ckp_check(r))
        abort(); /* an open reader keeps R1-R7 (container.h) */
    const ckp_info *in = ckp_get_info(r);
    int ok = in->original_size == f->size && !memcmp(in->sha256, f->sha256, 32) && !strcmp(in->path, f->path);
    *bound = ok;
    if (ok && in->original_size > *budget) {
        *big = 1;
        ok = 0;
    }
    ckp_scratch *s = ckp_scratch_new();
    cku_sha256 *h = cku_sha256_new();
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (uint32_t e = 0; ok && e < in->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        for (uint64_t c = 0; ok && c < x->n_chunks; c++) {
            uint64_t len = ckp_chunk_len(x, c);
            if (len > cap) {
                free(buf);
                buf = malloc(cap = (size_t)len);
            }
            if (ckp_read_chunk(r, e, c, buf, s) != CKP_OK) {
                ok = 0;
                break;
            }
            if (ckc_hash64(buf, len) != x->index[c].hash)
                abort(); /* never wrong bytes: a chunk returned is the one its index names */
            cku_sha256_update(h, buf, len);
        }
    }
    uint8_t d[32];
    cku_sha256_final(h, d);
    if (ok)
        ok = !memcmp(d, in->sha256, 32);
    if (!*big)
        *budget -= in->original_size < *budget ? in->original_size : *budget;
    free(buf);
    ckp_scratch_free(s);
    ckp_close(r);
    return ok;
}

/* SHA-256 and size of a file written by unpack.  @return 0, or -1. */
static int file_sha(const char *path, uint8_t d[32], uint64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    cku_sha256 *h = cku_sha256_new();
    uint8_t b[65536];
    ssize_t n;
    *size = 0;
    while ((n = read(fd, b, sizeof b)) > 0) {
        cku_sha256_update(h, b, (size_t)n);
        *size += (uint64_t)n;
    }
    cku_sha256_final(h, d);
    close(fd);
    return n < 0 ? -1 : 0;
}

/* The host read API (ckread.h: the Python serving path, the GPU loader) over
 * the same directory: a file it reads must be the manifest's (a .ckpt whose
 * TOC names another file is refused) with its bytes; an intact file reads. */
static void check_ckread(const ckm_manifest *m, const int *good, const int *bound)
{
    ckr_model *cm = NULL;
    char err[1024];
    if (ckr_open(dst, &cm, err, sizeof err) != CKR_OK)
        return; /* it also parses every safetensors header: other reasons to refuse */
    for (size_t i = 0; i < m->n_files; i++) {
        const ckm_file *f = &m->files[i];
        uint64_t size = 0;
        uint8_t *b = good[i] ? malloc(f->size + 1) : NULL;
        ckr_status st = good[i] ? ckr_file_read(cm, f->path, b, f->size, &size, err, sizeof err) : CKR_ERR_ARG;
        if (st == CKR_OK) {
            uint8_t d[32];
            cku_sha256 *h = cku_sha256_new();
            cku_sha256_update(h, b, size);
            cku_sha256_final(h, d);
            if (size != f->size || memcmp(d, f->sha256, 32))
                fail("ckr_file_read returned other bytes than the manifest's", f->path);
        } else if (good[i]) {
            fprintf(stderr, "fuzz_packdir: %s\n", err);
            fail("ckr_file_read refused an intact file", f->path);
        }
        free(b);
        if (!bound[i] && !good[i]) {
            /* a .ckpt that opens but is another file's: never read as this one */
            uint64_t cap = 1 << 20;
            uint8_t *c = malloc(cap);
            if (ckr_file_read(cm, f->path, c, cap, &size, err, sizeof err) == CKR_OK)
                fail("ckr_file_read read a packed file that is not the manifest's", f->path);
            free(c);
        }
    }
    ckr_close(cm);
}

static void run_dir(const ckz_pd *d)
{
    rm_tree(dst);
    rm_tree(out);
    char partial[128];
    snprintf(partial, sizeof partial, "%s.ckptfs-partial", out);
    rm_tree(partial);
    if (mkdir(dst, 0755) || ckz_pd_write(d, dst))
        abort();
    ckm_manifest *m = NULL;
    char err[1024];
    int intact = ckm_load(dst, &m, err, sizeof err) == 0, big = 0;
    uint64_t budget = MODEL_MAX_BYTES;
    /* a manifest listing more files than there are entries cannot be intact */
    int good[CKZ_PD_MAX] = {0}, bound[CKZ_PD_MAX] = {0}, few = intact && m->n_files <= CKZ_PD_MAX;
    intact = few;
    for (size_t i = 0; few && i < m->n_files; i++)
        intact &= good[i] = model_file(&m->files[i], &budget, &big, &bound[i]);
    if (big)
        goto done; /* not decoded here: no verdict to compare */
    if (few)
        check_ckread(m, good, bound);
    quiet(1);
    int v = ckpt_verify(dst, NULL, 1);
    int u = ckpt_unpack(dst, out, 1);
    quiet(0);
    struct stat st;
    if (getenv("CKZ_VERBOSE"))
        fprintf(stderr, "fuzz_packdir: intact %d, verify %d, unpack %d\n", intact, v, u);
    if ((v == 0) != intact)
        fail(intact ? "verify refused an intact pack" : "verify accepted a damaged pack", NULL);
    if ((u == 0) != intact)
        fail(intact ? "unpack refused an intact pack" : "unpack accepted a damaged pack", NULL);
    if (u && (lstat(out, &st) == 0 || lstat(partial, &st) == 0))
        fail("unpack failed but left output", out);
    for (size_t i = 0; !u && i < m->n_files; i++) {
        char p[512], a[65], b[65];
        uint8_t sha[32];
        uint64_t size;
        snprintf(p, sizeof p, "%s/%s", out, m->files[i].path);
        if (file_sha(p, sha, &size))
            fail("unpack succeeded without writing", p);
        if (size != m->files[i].size || memcmp(sha, m->files[i].sha256, 32)) {
            hex32(sha, a);
            hex32(m->files[i].sha256, b);
            fprintf(stderr, "fuzz_packdir: %s: SHA-256 %s, the manifest says %s\n", p, a, b);
            fail("unpack wrote wrong bytes", p);
        }
    }
done:
    if (m)
        ckm_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    ckz_pd d;
    if (ckz_pd_parse(data, size, &d))
        return 0;
    run_dir(&d);
    ckz_pd_free(&d);
    return 0;
}

/* ---- the mutator ---------------------------------------------------------- */

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

static uint64_t rn(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static uint64_t below(uint64_t *s, uint64_t n) { return n ? rn(s) % n : 0; }

static uint64_t get_w(const uint8_t *p, int w)
{
    return w == 8 ? cku_le64(p) : w == 4 ? cku_le32(p) : cku_le16(p);
}
static void put_w(uint8_t *p, int w, uint64_t v)
{
    if (w == 8)
        cku_put64(p, v);
    else if (w == 4)
        cku_put32(p, (uint32_t)v);
    else
        cku_put16(p, (uint16_t)v);
}

/* Where the parts of a packed file are, as far as its fields say. */
typedef struct {
    uint8_t *b;
    size_t n;
    uint8_t *toc;   /* NULL if the TOC header lies outside */
    uint32_t n_rec; /* records that lie inside */
} layout;

static void locate(uint8_t *b, size_t n, layout *l)
{
    *l = (layout){b, n, NULL, 0};
    if (n < CKP_HEADER_SIZE)
        return;
    uint64_t to = cku_le64(b + H_TOC_OFF);
    if (to < CKP_HEADER_SIZE || to > n || n - to < CKP_TOC_HEADER_SIZE)
        return;
    l->toc = b + to;
    uint64_t fit = (n - to - CKP_TOC_HEADER_SIZE) / CKP_EXTENT_SIZE, want = cku_le32(l->toc + T_NEXT);
    l->n_rec = (uint32_t)(want < fit ? want : fit);
}

static uint8_t *rec(const layout *l, uint32_t i) { return l->toc + CKP_TOC_HEADER_SIZE + (size_t)i * CKP_EXTENT_SIZE; }

/* A value near v, or one that tells: 0, all ones, a power of two, a value
 * of another field of the file, its size. */
static uint64_t interesting(uint64_t *s, uint64_t v, int w, const layout *l)
{
    uint64_t r;
    switch (below(s, 12)) {
    case 0: r = v + 1; break;
    case 1: r = v - 1; break;
    case 2: r = v + below(s, 129) - 64; break;
    case 3: r = 0; break;
    case 4: r = UINT64_MAX; break;
    case 5: r = 1ull << below(s, 64); break;
    case 6: r = v * 2; break;
    case 7: r = v / 2; break;
    case 8: r = l->n >= 8 ? cku_le64(l->b + below(s, l->n / 8) * 8) : v; break; /* another field's */
    case 9: r = l->n - below(s, 256); break;
    case 10: r = (1ull << 24) + below(s, 3) - 1; break; /* 16 Mi: the chunk and extent limits */
    default: r = v ^ (1ull << below(s, (uint64_t)w * 8)); break;
    }
    return w == 8 ? r : r & ((1ull << (8 * w)) - 1);
}

/* One field of the header, the TOC header, an extent record or an index entry. */
static void mutate_field(uint64_t *s, layout *l)
{
    static const uint8_t hdr[][2] = {{H_MAJOR, 2}, {H_MINOR, 2}, {H_FLAGS, 4}, {H_ORIG, 8}, {H_TOC_OFF, 8},
                                     {H_TOC_SIZE, 8}};
    static const uint8_t toc[][2] = {{T_NEXT, 4}, {T_ORIG, 8}, {T_SHA, 8},      {T_KIND, 4}, {T_MODE, 4},
                                     {T_MTIME, 8}, {T_PATH_LEN, 4}, {T_STRTAB, 4}, {T_RESERVED, 8}};
    static const uint8_t rf[][2] = {{X_ORIG_OFF, 8}, {X_ORIG_SIZE, 8}, {X_ENC, 4},      {X_CHUNK, 4},
                                    {X_NCHUNKS, 8},  {X_INDEX_OFF, 8}, {X_P0_OFF, 8},   {X_P0_SIZE, 8},
                                    {X_P1_OFF, 8},   {X_P1_SIZE, 8},   {X_P2_OFF, 8},   {X_P2_SIZE, 8},
                                    {X_NESC, 8},     {X_CODEBOOK, 2},  {X_NAME_OFF, 4}, {X_NAME_LEN, 4},
                                    {X_DTYPE, 4},    {X_RESERVED, 8}};
    uint8_t *p = NULL;
    int w = 8;
    uint64_t k = below(s, 8);
    if (k == 0 && l->n >= CKP_HEADER_SIZE) {
        k = below(s, sizeof hdr / sizeof hdr[0]);
        p = l->b + hdr[k][0], w = hdr[k][1];
    } else if (k == 1 && l->toc) {
        k = below(s, sizeof toc / sizeof toc[0]);
        p = l->toc + toc[k][0], w = toc[k][1];
    } else if (k < 6 && l->n_rec) {
        uint8_t *x = rec(l, (uint32_t)below(s, l->n_rec));
        k = below(s, sizeof rf / sizeof rf[0]);
        p = x + rf[k][0] + (rf[k][0] == X_CODEBOOK ? 2 * below(s, 16) : 0), w = rf[k][1];
    } else if (l->n_rec) { /* a chunk index entry: datum or hash */
        uint8_t *x = rec(l, (uint32_t)below(s, l->n_rec));
        uint64_t io = cku_le64(x + X_INDEX_OFF), nc = cku_le64(x + X_NCHUNKS);
        if (nc && io <= l->n && nc <= (l->n - io) / CKP_INDEX_ENTRY)
            p = l->b + io + CKP_INDEX_ENTRY * below(s, nc) + 8 * below(s, 4) / 3; /* datums 2 in 3 */
    }
    if (p)
        put_w(p, w, interesting(s, get_w(p, w), w, l));
}

/* Several fields that belong together, so that the change passes the checks
 * that compare them and reaches the ones behind. */
static void mutate_coherent(uint64_t *s, layout *l)
{
    if (!l->n_rec)
        return;
    uint8_t *x = rec(l, (uint32_t)below(s, l->n_rec)), *y = rec(l, (uint32_t)below(s, l->n_rec));
    uint32_t enc = cku_le32(x + X_ENC);
    uint64_t osz = cku_le64(x + X_ORIG_SIZE);
    switch (below(s, 5)) {
    case 0: { /* chunk size and the chunk count it implies */
        uint64_t cs = below(s, 2) ? cku_le32(x + X_CHUNK) * 2 : 16 * (1 + below(s, 64));
        if (below(s, 4) == 0)
            cs = 1u << 24;
        cs = cs ? cs : 16;
        cku_put32(x + X_CHUNK, (uint32_t)cs);
        cku_put64(x + X_NCHUNKS, (osz + cs - 1) / cs);
        break;
    }
    case 1: { /* escape count and the escape plane's size (K15/BSPLIT) */
        uint64_t ne = cku_le64(x + X_NESC), n = osz / 2;
        ne = below(s, 3) == 0 ? n + below(s, 2) : ne + below(s, 17) - 8;
        cku_put64(x + X_NESC, ne);
        if (enc == CKC_ENC_K15 || enc == CKC_ENC_BSPLIT)
            cku_put64(x + X_P2_SIZE, ckc_escape_plane_size(enc, ne));
        break;
    }
    case 2: /* two extents' payloads swapped (sizes, planes, index, codebook) */
        if (x != y) {
            uint8_t t[CKP_EXTENT_SIZE];
            memcpy(t, x + X_ENC, X_NAME_OFF - X_ENC);
            memcpy(x + X_ENC, y + X_ENC, X_NAME_OFF - X_ENC);
            memcpy(y + X_ENC, t, X_NAME_OFF - X_ENC);
        }
        break;
    case 3: { /* a plane or the index moved by a few bytes */
        int f = (int)below(s, 4);
        uint8_t *p = x + (f == 3 ? X_INDEX_OFF : X_P0_OFF + 16 * f);
        cku_put64(p, cku_le64(p) + below(s, 33) - 16);
        break;
    }
    default: { /* a datum moved by one, its neighbours kept */
        uint64_t io = cku_le64(x + X_INDEX_OFF), nc = cku_le64(x + X_NCHUNKS);
        if (nc && io <= l->n && nc <= (l->n - io) / CKP_INDEX_ENTRY) {
            uint8_t *e = l->b + io + CKP_INDEX_ENTRY * below(s, nc);
            cku_put64(e, cku_le64(e) + (below(s, 2) ? 1 : UINT64_MAX));
        }
    }
    }
}

/* obj[key] = item, replaced or added; item is freed if obj is no object. */
static void json_set(cJSON *obj, const char *key, cJSON *item)
{
    if (!cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item) && !(cJSON_IsObject(obj) &&
                                                                     cJSON_AddItemToObject(obj, key, item)))
        cJSON_Delete(item);
}

/* The manifest entry of the packed file `name` takes its TOC's size and
 * SHA-256 (and, sometimes, path). */
static void sync_manifest(uint64_t *s, ckz_pd *d, int mi, const char *name, const layout *l)
{
    size_t bn, nl = strlen(name);
    const uint8_t *body = ckz_manifest_body(d->e[mi].data, d->e[mi].size, &bn);
    if (!l->toc || nl <= strlen(CKP_SUFFIX))
        return;
    cJSON *j = cJSON_ParseWithLength((const char *)body, bn);
    cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files"), *f;
    char path[CKZ_PD_NAME + 1];
    snprintf(path, sizeof path, "%.*s", (int)(nl - strlen(CKP_SUFFIX)), name);
    cJSON_ArrayForEach(f, files)
    {
        cJSON *p = cJSON_GetObjectItemCaseSensitive(f, "path");
        if (!cJSON_IsString(p) || strcmp(p->valuestring, path))
            continue;
        char hex[65];
        cku_hex(l->toc + T_SHA, 32, hex);
        json_set(f, "size", cJSON_CreateNumber((double)cku_le64(l->toc + T_ORIG)));
        json_set(f, "sha256", cJSON_CreateString(hex));
        uint32_t pl = cku_le32(l->toc + T_PATH_LEN);
        uint64_t at = CKP_TOC_HEADER_SIZE + (uint64_t)cku_le32(l->toc + T_NEXT) * CKP_EXTENT_SIZE;
        if (below(s, 4) == 0 && pl < 200 && at + pl <= (uint64_t)(l->b + l->n - l->toc)) {
            char np[201];
            memcpy(np, l->toc + at, pl);
            np[pl] = 0;
            json_set(f, "path", cJSON_CreateString(np));
        }
    }
    char *txt = j ? cJSON_PrintUnformatted(j) : NULL;
    uint8_t *nm;
    size_t nn;
    if (txt && ckz_manifest_rehash((const uint8_t *)txt, strlen(txt), &nm, &nn) == 0) {
        free(d->e[mi].data);
        d->e[mi].data = nm;
        d->e[mi].size = nn;
    }
    free(txt);
    cJSON_Delete(j);
}

static void mutate_ckpt(uint64_t *s, ckz_pd *d, int i, size_t maxSize)
{
    ckz_pd_entry *e = &d->e[i];
    layout l;
    locate(e->data, e->size, &l);
    switch (below(s, 10)) {
    case 0: case 1: case 2: case 3: mutate_field(s, &l); break;
    case 4: case 5: mutate_coherent(s, &l); break;
    case 6: /* payload bytes (planes, frames, gaps) */
        if (e->size > CKP_HEADER_SIZE)
            e->data[CKP_HEADER_SIZE + below(s, e->size - CKP_HEADER_SIZE)] ^= (uint8_t)(1 + below(s, 255));
        break;
    case 7: { /* shorter, or longer by zeros */
        size_t n = below(s, 2) && e->size ? e->size - 1 - below(s, e->size < 64 ? e->size : 64)
                                          : e->size + 1 + below(s, 64);
        uint8_t *q = calloc(1, n + 1);
        memcpy(q, e->data, n < e->size ? n : e->size);
        free(e->data);
        e->data = q;
        e->size = n;
        break;
    }
    default: { /* libFuzzer's byte-level mutations */
        size_t cap = e->size + 64;
        if (e->size > maxSize)
            break;
        uint8_t *q = calloc(1, cap + 1);
        memcpy(q, e->data, e->size);
        e->size = LLVMFuzzerMutate(q, e->size, cap < maxSize ? cap : maxSize);
        free(e->data);
        e->data = q;
    }
    }
    locate(e->data, e->size, &l);
    if (below(s, 16))
        ckz_fixup_ckpt(e->data, e->size);
    int mi = ckz_pd_find(d, CKP_MANIFEST_NAME);
    if (mi >= 0 && below(s, 2))
        sync_manifest(s, d, mi, e->name, &l);
}

/* A manifest field, entry or the whole JSON changed; the first line
 * recomputed (15 times in 16). */
static void mutate_manifest(uint64_t *s, ckz_pd *d, int mi, size_t maxSize)
{
    size_t bn;
    const uint8_t *body = ckz_manifest_body(d->e[mi].data, d->e[mi].size, &bn);
    cJSON *j = cJSON_ParseWithLength((const char *)body, bn);
    char *txt = NULL;
    uint8_t *raw = NULL;
    size_t rn_ = 0;
    if (j && below(s, 8)) {
        cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, below(s, 4) ? "files" : "dirs");
        int n = cJSON_GetArraySize(arr);
        cJSON *f = n ? cJSON_GetArrayItem(arr, (int)below(s, (uint64_t)n)) : NULL;
        cJSON *g = n ? cJSON_GetArrayItem(arr, (int)below(s, (uint64_t)n)) : NULL;
        static const char *keys[] = {"path", "size", "sha256", "mode", "mtime_ns", "kind"};
        const char *k = keys[below(s, 6)];
        cJSON *old = f ? cJSON_GetObjectItemCaseSensitive(f, k) : NULL;
        switch (below(s, 8)) {
        case 0: /* a number field: near or telling */
            if (cJSON_IsNumber(old)) {
                double v = old->valuedouble; /* any JSON number: only some convert */
                uint64_t u = v >= 0 && v < 1.8e19 ? (uint64_t)v : 0;
                cJSON_SetNumberValue(old, (double)interesting(s, u, 8, &(layout){d->e[mi].data, d->e[mi].size, NULL, 0}));
            }
            break;
        case 1: /* a string field: one character changed */
            if (cJSON_IsString(old) && *old->valuestring) {
                char *v = strdup(old->valuestring);
                v[below(s, strlen(v))] = "0af/.x\x7f\xc3-"[below(s, 9)];
                json_set(f, k, cJSON_CreateString(v));
                free(v);
            }
            break;
        case 2: /* a field of another entry */
            if (f && g && f != g && cJSON_GetObjectItemCaseSensitive(g, k))
                json_set(
                    f, k, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(g, k), 1));
            break;
        case 3: /* an entry dropped */
            if (n)
                cJSON_DeleteItemFromArray(arr, (int)below(s, (uint64_t)n));
            break;
        case 4: /* an entry twice */
            if (f)
                cJSON_AddItemToArray(arr, cJSON_Duplicate(f, 1));
            break;
        case 5: /* a field dropped or of another type */
            if (f)
                json_set(f, k, below(s, 2) ? cJSON_CreateNull() : cJSON_CreateString("1"));
            break;
        case 6:
            json_set(j, "format", cJSON_CreateNumber((double)below(s, 3)));
            break;
        default: /* mode or size at a limit */
            if (f)
                json_set(
                    f, below(s, 2) ? "mode" : "size",
                    cJSON_CreateNumber(below(s, 2) ? 07777 + below(s, 2) : 9007199254740992.0 + 2 * below(s, 2)));
        }
        txt = cJSON_PrintUnformatted(j);
    } else { /* the JSON as bytes */
        raw = malloc(bn + 256);
        memcpy(raw, body, bn);
        rn_ = LLVMFuzzerMutate(raw, bn, bn + 256 < maxSize ? bn + 256 : maxSize);
    }
    cJSON_Delete(j);
    const uint8_t *nb = txt ? (const uint8_t *)txt : raw;
    size_t nn = txt ? strlen(txt) : rn_;
    uint8_t *m;
    size_t mn;
    if (nb && below(s, 16) && ckz_manifest_rehash(nb, nn, &m, &mn) == 0) {
        free(d->e[mi].data);
        d->e[mi].data = m;
        d->e[mi].size = mn;
    } else if (nb) {
        size_t hl = d->e[mi].size - bn; /* the first line as it was */
        uint8_t *q = malloc(hl + nn + 1);
        memcpy(q, d->e[mi].data, hl);
        memcpy(q + hl, nb, nn);
        free(d->e[mi].data);
        d->e[mi].data = q;
        d->e[mi].size = hl + nn;
    }
    free(txt);
    free(raw);
}

/* The files themselves: one renamed, copied over another, or dropped. */
static void mutate_files(uint64_t *s, ckz_pd *d)
{
    int i = (int)below(s, (uint64_t)d->n), k = (int)below(s, (uint64_t)d->n);
    switch (below(s, 3)) {
    case 0: /* two names swapped */
        if (i != k) {
            char t[sizeof d->e[i].name];
            memcpy(t, d->e[i].name, sizeof t);
            memcpy(d->e[i].name, d->e[k].name, sizeof t);
            memcpy(d->e[k].name, t, sizeof t);
        }
        break;
    case 1: /* one file's bytes over another's */
        if (i != k)
            ckz_pd_set(d, k, d->e[i].data, d->e[i].size);
        break;
    default:
        if (d->n > 1) {
            free(d->e[i].data);
            d->e[i] = d->e[--d->n];
        }
    }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned int seed)
{
    uint64_t s = 0x9E3779B97F4A7C15ull ^ seed;
    rn(&s);
    ckz_pd d;
    if (ckz_pd_parse(data, size, &d) || below(&s, 64) == 0) {
        ckz_pd_free(&d);
        return LLVMFuzzerMutate(data, size, maxSize);
    }
    int mi = ckz_pd_find(&d, CKP_MANIFEST_NAME), i = (int)below(&s, (uint64_t)d.n);
    uint64_t what = below(&s, 16);
    if (what == 0)
        mutate_files(&s, &d);
    else if (i == mi || (what < 4 && mi >= 0))
        mutate_manifest(&s, &d, mi, maxSize);
    else
        mutate_ckpt(&s, &d, i, maxSize);
    uint8_t *tmp = malloc(maxSize + 1);
    size_t n = tmp ? ckz_pd_serialize(&d, tmp, maxSize) : 0;
    if (n)
        memcpy(data, tmp, n);
    free(tmp);
    ckz_pd_free(&d);
    return n ? n : size; /* too large: the input as it was */
}

#ifdef CKZ_REPLAY
/* Without libFuzzer: its byte-level mutator is one flipped byte. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize)
{
    static uint64_t s = 1;
    if (size && size <= maxSize)
        data[below(&s, size)] ^= (uint8_t)(1 + below(&s, 255));
    return size <= maxSize ? size : maxSize;
}

/* fuzz_packdir_replay ROUNDS FILE...: each file once, then ROUNDS mutations
 * of each (a mutated input mutated again, back to the file every 8). */
int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_packdir_replay ROUNDS FILE...\n");
        return 2;
    }
    long rounds = strtol(argv[1], NULL, 10);
#if defined(CKZ_ASAN) || defined(__SANITIZE_THREAD__)
    rounds = rounds / 8 + 1; /* the sanitizer builds (sanitize.sh) run 5-20 times slower */
#endif
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap);
    for (int a = 2; a < argc; a++) {
        int fd = open(argv[a], O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) || (size_t)st.st_size > cap) {
            fprintf(stderr, "fuzz_packdir_replay: %s: cannot read\n", argv[a]);
            return 1;
        }
        uint8_t *orig = malloc((size_t)st.st_size + 1);
        size_t n = (size_t)st.st_size;
        if (cku_pread_full(fd, orig, n, 0))
            return 1;
        close(fd);
        LLVMFuzzerTestOneInput(orig, n);
        size_t cur = 0;
        for (long r = 0; r < rounds; r++) {
            if (r % 8 == 0) {
                memcpy(buf, orig, n);
                cur = n;
            }
            cur = LLVMFuzzerCustomMutator(buf, cur, cap, (unsigned)(r * 7919 + (unsigned)a));
            LLVMFuzzerTestOneInput(buf, cur);
        }
        free(orig);
    }
    printf("fuzz_packdir_replay: %d inputs, %ld mutations each: every oracle held\n", argc - 2, rounds);
    free(buf);
    return 0;
}
#endif
