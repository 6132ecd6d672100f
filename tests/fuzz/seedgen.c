/*
 * seedgen.c — writes the seed corpora of the fuzz targets and the hand-made
 * must-reject inputs of tests/golden-errors, deterministically.
 *
 *   seedgen seeds  DIR   DIR/{safetensors,container,decode,manifest}/ seeds
 *   seedgen golden DIR   DIR/<target>/<name> + <name>.expect (what the error
 *                        message must contain) into a new or empty DIR: the
 *                        first set of tests/golden-errors.  That directory is
 *                        maintained by hand since (statuses pinned, messages
 *                        naming fields, cases added with the fixes that needed
 *                        them), so this output is a starting point for new
 *                        crafted inputs with valid checksums, not the set:
 *                        it refuses to write over a directory with files.
 *
 * Valid packed files are made with the real writer (ckp_writer), then
 * damaged field by field with their checksums recomputed where the damage is
 * meant to be caught by a check behind them.
 */
#include "fuzz_util.h"
#include "container.h"
#include "manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* BF16 weights roughly N(0, 0.02): sign random, exponent near 2^-6, mantissa random. */
static void gen_bf16(uint16_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rnd();
        unsigned e = 121 - (r % 100 < 60 ? 0 : r % 100 < 85 ? 1 : r % 100 < 97 ? 2 : 3 + r % 9);
        w[i] = (uint16_t)((r >> 16 & 1) << 15 | e << 7 | (r >> 20 & 0x7F));
    }
}

static void put_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
        fprintf(stderr, "seedgen: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void put_text(const char *dir, const char *name, const char *s) { put_file(dir, name, s, strlen(s)); }

/* A target's output directory. */
static const char *sub(const char *root, const char *target)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", root, target);
    mkdir(root, 0755);
    mkdir(p, 0755);
    return p;
}

/* ---- safetensors ---------------------------------------------------------- */

/* A safetensors file: 8-byte length, json, then data_len bytes of data. */
static size_t make_st(uint8_t *out, size_t cap, const char *json, uint64_t claimed_len, size_t data_len)
{
    size_t jl = strlen(json);
    if (8 + jl + data_len > cap)
        abort();
    cku_put64(out, claimed_len == UINT64_MAX ? jl : claimed_len);
    memcpy(out + 8, json, jl);
    for (size_t i = 0; i < data_len; i++)
        out[8 + jl + i] = (uint8_t)rnd();
    return 8 + jl + data_len;
}

static const char *ST_OK =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a.weight\":{\"dtype\":\"BF16\",\"shape\":[4,8],\"data_offsets\":[0,64]},"
    "\"b.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[64,76]},"
    "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[76,84]},"
    "\"d\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[84,87]}}";

static void st_seeds(const char *dir)
{
    uint8_t b[4096];
    put_file(dir, "ok", b, make_st(b, sizeof b, ST_OK, UINT64_MAX, 87));
    put_file(dir, "empty-object", b, make_st(b, sizeof b, "{}      ", UINT64_MAX, 0));
    put_file(dir, "empty-tensor", b,
             make_st(b, sizeof b, "{\"z\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[0,0]}}", UINT64_MAX, 0));
    put_file(dir, "f6-u16", b,
             make_st(b, sizeof b,
                     "{\"x\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,3]},"
                     "\"y\":{\"dtype\":\"U16\",\"shape\":[1,1,1],\"data_offsets\":[3,5]}}",
                     UINT64_MAX, 5));
}

static void st_golden(const char *dir)
{
    uint8_t b[4096];
    struct {
        const char *name, *json, *expect;
        size_t data;
    } cases[] = {
        {"invalid-json", "{\"a\":{\"dtype\":\"BF16\",", "not valid JSON", 0},
        {"not-object", "[1,2,3]", "not a JSON object", 0},
        {"trailing-bytes", "{} x", "after the JSON", 0},
        {"unknown-dtype", "{\"a\":{\"dtype\":\"BF17\",\"shape\":[2],\"data_offsets\":[0,4]}}", "unknown dtype", 4},
        {"shape-mismatch", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", "data_offsets span", 4},
        {"shape-overflow",
         "{\"a\":{\"dtype\":\"BF16\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", "too many", 4},
        {"shape-negative", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[-2],\"data_offsets\":[0,4]}}", "shape entry", 4},
        {"shape-fraction", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "shape entry", 4},
        {"offsets-reversed", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,0]}}", "reversed", 4},
        {"offsets-overlap",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", "overlaps", 6},
        {"offsets-gap",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", "gap", 5},
        {"offsets-past-end", "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", "past the data buffer", 4},
        {"offsets-huge",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740992],\"data_offsets\":[0,9007199254740992]}}",
         "past the data buffer", 4},
        {"offsets-short-buffer", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", "cover", 4},
        {"offsets-three", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2,4]}}", "two non-negative", 2},
        {"missing-field", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2]}}", "lacks", 2},
        {"extra-field", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],\"x\":1}}", "unknown field", 2},
        {"too-many-dims",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
         "dimensions", 1},
        {"duplicate-keys",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", "duplicate tensor name", 4},
        {"duplicate-metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", "duplicate __metadata__", 0},
        {"metadata-not-string", "{\"__metadata__\":{\"format\":1}}", "not a string", 0},
        {"tensor-not-object", "{\"a\":[0,2]}", "not an object", 0},
        {"deep-nesting", NULL, "not valid JSON", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char deep[3000];
        const char *json = cases[i].json;
        if (!json) { /* nesting beyond cJSON's limit */
            size_t k = 0;
            deep[k++] = '{';
            deep[k++] = '"';
            deep[k++] = 'a';
            deep[k++] = '"';
            deep[k++] = ':';
            for (int d = 0; d < 1200; d++)
                deep[k++] = '[';
            for (int d = 0; d < 1200; d++)
                deep[k++] = ']';
            deep[k++] = '}';
            deep[k] = 0;
            json = deep;
        }
        put_file(dir, cases[i].name, b, make_st(b, sizeof b, json, UINT64_MAX, cases[i].data));
        char e[128];
        snprintf(e, sizeof e, "%s.expect", cases[i].name);
        put_text(dir, e, cases[i].expect);
    }
    /* length field problems */
    size_t n = make_st(b, sizeof b, ST_OK, UINT64_MAX, 87);
    put_file(dir, "truncated-length", b, 5);
    put_text(dir, "truncated-length.expect", "truncated");
    put_file(dir, "truncated-header", b, n / 3);
    put_text(dir, "truncated-header.expect", "past the end");
    put_file(dir, "truncated-data", b, n - 1);
    put_text(dir, "truncated-data.expect", "data buffer");
    cku_put64(b, 100000001);
    put_file(dir, "header-over-100MB", b, n);
    put_text(dir, "header-over-100MB.expect", "100 MB");
    cku_put64(b, UINT64_MAX);
    put_file(dir, "header-len-max", b, n);
    put_text(dir, "header-len-max.expect", "100 MB");
    cku_put64(b, 1);
    put_file(dir, "header-len-1", b, n);
    put_text(dir, "header-len-1.expect", "too small");
    make_st(b, sizeof b, ST_OK, UINT64_MAX, 87);
    b[20] = 0;
    put_file(dir, "nul-in-header", b, n);
    put_text(dir, "nul-in-header.expect", "NUL");
}

/* ---- packed files --------------------------------------------------------- */

/* Write a small packed file with the real writer into out; @return its size. */
static size_t make_ckpt(uint8_t *out, size_t cap, int variant)
{
    char path[64];
    int fd = ckz_memfile(NULL, 0, path, sizeof path);
    ckp_writer_opts o = {.path = variant == 1 ? "blob/notes.txt" : "model.safetensors",
                         .kind = variant == 1 ? CKP_KIND_BLOB : CKP_KIND_SAFETENSORS,
                         .mode = 0644, .mtime_ns = 1700000000123456789ll};
    ckp_writer *w;
    if (fd < 0 || ckp_writer_new(fd, &o, &w) != CKP_OK)
        abort();
    static uint16_t wts[1200];
    static uint8_t raw[3000];
    ckp_status s = CKP_OK;
    if (variant == 1) {
        for (size_t i = 0; i < sizeof raw; i++)
            raw[i] = "hello ckptfs\n"[i % 13];
        s = ckp_writer_add(w, CKC_ENC_ZSTD, raw, sizeof raw, NULL, 0);
    } else {
        for (size_t i = 0; i < 200; i++)
            raw[i] = (uint8_t)rnd();
        s = ckp_writer_add(w, CKC_ENC_RAW, raw, 120, NULL, 0);
        gen_bf16(wts, 1200);
        if (s == CKP_OK)
            s = ckp_writer_add(w, variant == 2 ? CKC_ENC_BSPLIT : CKC_ENC_K15, wts, 2 * 1001, "w.k", 7);
        if (s == CKP_OK)
            s = ckp_writer_add(w, CKC_ENC_BSPLIT, wts + 1001, 2 * 150, "w.bs", 7);
        if (s == CKP_OK)
            s = ckp_writer_add(w, CKC_ENC_ZSTD, raw + 120, 40, "f32", 10); /* incompressible: RAW */
        for (size_t i = 0; i < 600; i++)
            raw[1000 + i] = (uint8_t)(i % 7);
        if (s == CKP_OK)
            s = ckp_writer_add(w, CKC_ENC_ZSTD, raw + 1000, 600, "i64", 12);
    }
    uint8_t sha[32] = {1, 2, 3};
    if (s != CKP_OK || ckp_writer_finish(w, sha) != CKP_OK) {
        fprintf(stderr, "seedgen: writer: %s\n", ckp_writer_error(w));
        abort();
    }
    ckp_writer_free(w);
    off_t n = lseek(fd, 0, SEEK_END);
    if (n <= 0 || (size_t)n > cap || pread(fd, out, (size_t)n, 0) != n)
        abort();
    close(fd);
    return (size_t)n;
}

static void ckpt_seeds(const char *dir)
{
    static uint8_t b[1 << 16];
    const char *names[3] = {"k15", "blob", "bsplit"};
    for (int v = 0; v < 3; v++)
        put_file(dir, names[v], b, make_ckpt(b, sizeof b, v));
}

/* Offset of extent record i of the packed file in b. */
static uint8_t *rec_of(uint8_t *b, uint32_t i)
{
    return b + cku_le64(b + H_TOC_OFF) + CKP_TOC_HEADER_SIZE + (size_t)i * CKP_EXTENT_SIZE;
}

typedef void (*damage_fn)(uint8_t *b, size_t *n);
static void d_magic(uint8_t *b, size_t *n) { b[1] ^= 0x20; }
static void d_future_major(uint8_t *b, size_t *n) { cku_put16(b + H_MAJOR, 2); }
static void d_future_minor(uint8_t *b, size_t *n) { cku_put16(b + H_MINOR, CKP_VERSION_MINOR + 1); }
static void d_flags(uint8_t *b, size_t *n) { cku_put32(b + H_FLAGS, 4); }
static void d_toc_byte(uint8_t *b, size_t *n) { b[cku_le64(b + H_TOC_OFF) + 100] ^= 0x01; }
static void d_header_byte(uint8_t *b, size_t *n) { b[20] ^= 0x80; }
static void d_truncated(uint8_t *b, size_t *n) { *n -= 1000; }
static void d_truncated_toc(uint8_t *b, size_t *n) { *n -= 10; }
static void d_short(uint8_t *b, size_t *n) { *n = 40; }
static void d_empty(uint8_t *b, size_t *n) { *n = 0; }
static void d_toc_out(uint8_t *b, size_t *n) { cku_put64(b + H_TOC_OFF, *n + 64); }
static void d_toc_huge(uint8_t *b, size_t *n) { cku_put64(b + H_TOC_SIZE, UINT64_MAX - 8); }
static void d_index_byte(uint8_t *b, size_t *n) { b[cku_le64(rec_of(b, 1) + X_INDEX_OFF) + 3] ^= 0x10; }
static void d_plane_byte(uint8_t *b, size_t *n) { b[cku_le64(rec_of(b, 1) + X_P1_OFF) + 17] ^= 0x04; }
static void d_code_byte(uint8_t *b, size_t *n) { b[cku_le64(rec_of(b, 1) + X_P0_OFF) + 9] ^= 0x40; }
static void d_esc_byte(uint8_t *b, size_t *n) { b[cku_le64(rec_of(b, 1) + X_P2_OFF)] ^= 0x03; }
static void d_zero_planes(uint8_t *b, size_t *n)
{
    memset(b + cku_le64(rec_of(b, 1) + X_P0_OFF), 0, cku_le64(rec_of(b, 1) + X_P0_SIZE));
}
static void d_zstd_frame(uint8_t *b, size_t *n) { b[cku_le64(rec_of(b, 4) + X_P0_OFF) + 6] ^= 0xFF; }
static void d_gap(uint8_t *b, size_t *n) { cku_put64(rec_of(b, 2) + X_ORIG_OFF, cku_le64(rec_of(b, 2)) + 2); }
static void d_overlap(uint8_t *b, size_t *n) { cku_put64(rec_of(b, 2) + X_ORIG_OFF, cku_le64(rec_of(b, 2)) - 2); }
static void d_orig_size(uint8_t *b, size_t *n) { cku_put64(b + H_ORIG, cku_le64(b + H_ORIG) + 1); }
static void d_encoding(uint8_t *b, size_t *n) { cku_put32(rec_of(b, 1) + X_ENC, 4); }
static void d_chunk0(uint8_t *b, size_t *n) { cku_put32(rec_of(b, 1) + X_CHUNK, 0); }
static void d_chunk_odd(uint8_t *b, size_t *n) { cku_put32(rec_of(b, 1) + X_CHUNK, 1000); }
static void d_chunk_big(uint8_t *b, size_t *n) { cku_put32(rec_of(b, 4) + X_CHUNK, (16u << 20) + 1); }
static void d_nchunks(uint8_t *b, size_t *n) { cku_put64(rec_of(b, 1) + X_NCHUNKS, 2); }
static void d_plane_out(uint8_t *b, size_t *n) { cku_put64(rec_of(b, 1) + X_P1_OFF, cku_le64(b + H_TOC_OFF) - 8); }
static void d_plane_wrap(uint8_t *b, size_t *n) { cku_put64(rec_of(b, 1) + X_P1_OFF, UINT64_MAX - 100); }
static void d_plane_size(uint8_t *b, size_t *n) { cku_put64(rec_of(b, 1) + X_P1_SIZE, cku_le64(rec_of(b, 1) + X_P1_SIZE) - 8); }
static void d_index_out(uint8_t *b, size_t *n) { cku_put64(rec_of(b, 1) + X_INDEX_OFF, 8); }
static void d_codebook(uint8_t *b, size_t *n) { cku_put16(rec_of(b, 1) + X_CODEBOOK + 2, 512); }
static void d_codebook15(uint8_t *b, size_t *n) { cku_put16(rec_of(b, 1) + X_CODEBOOK + 30, 1); }
static void d_nesc(uint8_t *b, size_t *n) { cku_put64(rec_of(b, 1) + X_NESC, cku_le64(rec_of(b, 1) + X_NESC) + 1); }
static void d_name_out(uint8_t *b, size_t *n) { cku_put32(rec_of(b, 1) + X_NAME_LEN, 60000); }
static void d_reserved_x(uint8_t *b, size_t *n) { rec_of(b, 1)[190] = 1; }
static void d_reserved_t(uint8_t *b, size_t *n) { b[cku_le64(b + H_TOC_OFF) + 80] = 1; }
static void d_dtype(uint8_t *b, size_t *n) { cku_put32(rec_of(b, 1) + X_DTYPE, 99); }
static void d_n_extents(uint8_t *b, size_t *n) { cku_put32(b + cku_le64(b + H_TOC_OFF) + T_NEXT, 1u << 25); }
static void d_path_abs(uint8_t *b, size_t *n)
{
    uint8_t *t = b + cku_le64(b + H_TOC_OFF);
    t[CKP_TOC_HEADER_SIZE + cku_le32(t + T_NEXT) * CKP_EXTENT_SIZE] = '/';
}
static void d_path_dotdot(uint8_t *b, size_t *n)
{
    uint8_t *t = b + cku_le64(b + H_TOC_OFF);
    memcpy(t + CKP_TOC_HEADER_SIZE + cku_le32(t + T_NEXT) * CKP_EXTENT_SIZE, "../", 3);
}
static void d_path_len0(uint8_t *b, size_t *n) { cku_put32(b + cku_le64(b + H_TOC_OFF) + T_PATH_LEN, 0); }
static void d_kind(uint8_t *b, size_t *n) { cku_put32(b + cku_le64(b + H_TOC_OFF) + T_KIND, 7); }
static void d_datum_order(uint8_t *b, size_t *n)
{
    /* escape prefix of chunk 0 must be 0 */
    cku_put64(b + cku_le64(rec_of(b, 1) + X_INDEX_OFF), 1);
}
static void d_chunk_hash(uint8_t *b, size_t *n) { b[cku_le64(rec_of(b, 1) + X_INDEX_OFF) + 8] ^= 1; }
/* Overlapping chunk indexes: 200 RAW extents with 1-byte chunks, each
 * claiming the same 2000-entry index.  The reader keeps n_extents x n_chunks
 * entries, so a file of F bytes built like this made it allocate about
 * F^2/768 bytes (2 GiB for 1.3 MB); this one is small, the rule is the same. */
static void d_index_amplify(uint8_t *b, size_t *n)
{
    const uint32_t next = 200, nch = 2000;
    const uint64_t toc_off = 64 + nch * 16;
    size_t need = toc_off + CKP_TOC_HEADER_SIZE + (size_t)next * CKP_EXTENT_SIZE + 1;
    if (need > (1u << 20))
        abort();
    memset(b, 0, need);
    memcpy(b, CKP_MAGIC, 8);
    cku_put16(b + H_MAJOR, 1);
    cku_put64(b + H_ORIG, (uint64_t)next * nch);
    cku_put64(b + H_TOC_OFF, toc_off);
    cku_put64(b + H_TOC_SIZE, need - toc_off);
    uint8_t *t = b + toc_off;
    memcpy(t, "TOC1", 4);
    cku_put32(t + T_NEXT, next);
    cku_put64(t + T_ORIG, (uint64_t)next * nch);
    cku_put32(t + T_KIND, 0);
    cku_put32(t + T_PATH_LEN, 1);
    cku_put32(t + T_STRTAB, 1);
    for (uint32_t i = 0; i < next; i++) {
        uint8_t *r = t + CKP_TOC_HEADER_SIZE + (size_t)i * CKP_EXTENT_SIZE;
        cku_put64(r + X_ORIG_OFF, (uint64_t)i * nch);
        cku_put64(r + X_ORIG_SIZE, nch);
        cku_put32(r + X_ENC, CKC_ENC_RAW);
        cku_put32(r + X_CHUNK, 1);
        cku_put64(r + X_NCHUNKS, nch);
        cku_put64(r + X_INDEX_OFF, 64);
        cku_put64(r + X_P0_OFF, 64);
        cku_put64(r + X_P0_SIZE, nch);
    }
    t[CKP_TOC_HEADER_SIZE + (size_t)next * CKP_EXTENT_SIZE] = 'x';
    *n = need;
}

static void ckpt_golden(const char *dir)
{
    static uint8_t base[1 << 16], b[1 << 20];
    size_t bn = make_ckpt(base, sizeof base, 0);
    /* fix = 1: checksums recomputed after the damage, so that the check
     * behind them is what must catch it.  "raw-" files are replayed as they
     * are only (the fuzz harness's fix-up would repair their damage). */
    struct {
        const char *name;
        damage_fn f;
        int fix;
        const char *expect;
    } cases[] = {
        {"bad-magic", d_magic, 1, "status: not a ckptfs packed file\nbad magic"},
        {"future-major", d_future_major, 1, "status: unsupported format version\nversion 2.0"},
        {"future-minor", d_future_minor, 1, "status: unsupported format version\nversion 1.2"},
        {"unknown-flags", d_flags, 1, "status: unsupported format version\nflags"},
        {"raw-flipped-toc-byte", d_toc_byte, 0, "status: damaged metadata\ntable of contents is damaged"},
        {"raw-flipped-header-byte", d_header_byte, 0, "status: damaged metadata\nfile header is damaged"},
        {"raw-flipped-index-byte", d_index_byte, 0, "status: damaged metadata\nchunk index of extent 1"},
        {"raw-truncated", d_truncated, 0, "status: damaged metadata\ntruncated"},
        {"raw-truncated-toc", d_truncated_toc, 0, "status: damaged metadata\ntruncated"},
        {"raw-too-short", d_short, 0, "status: not a ckptfs packed file\ntoo short"},
        {"raw-empty", d_empty, 0, "status: not a ckptfs packed file\ntoo short"},
        {"toc-outside", d_toc_out, 1, "status: damaged metadata\ntable of contents lies outside"},
        {"toc-size-huge", d_toc_huge, 1, "status: damaged metadata\ntable of contents lies outside"},
        {"flipped-plane-byte", d_plane_byte, 1, "status: damaged chunk\nextent 1 chunk 0"},
        {"flipped-code-byte", d_code_byte, 1, "status: damaged chunk\nextent 1 chunk 0"},
        {"flipped-escape-byte", d_esc_byte, 1, "status: damaged chunk\nextent 1 chunk 0"},
        {"zeroed-code-plane", d_zero_planes, 1, "status: damaged chunk\nextent 1 chunk 0"},
        {"damaged-zstd-frame", d_zstd_frame, 1, "status: damaged chunk\nextent 4 chunk 0"},
        {"raw-chunk-hash", d_chunk_hash, 0, "status: damaged metadata\nchunk index of extent 1"},
        {"chunk-hash", d_chunk_hash, 1, "status: damaged chunk\nextent 1 chunk 0"},
        {"extent-gap", d_gap, 1, "status: damaged metadata\ndoes not tile"},
        {"extent-overlap", d_overlap, 1, "status: damaged metadata\ndoes not tile"},
        {"original-size", d_orig_size, 1, "status: damaged metadata\ntable of contents: original_size"},
        {"unknown-encoding", d_encoding, 1, "status: unsupported format version\nunknown encoding"},
        {"chunk-size-0", d_chunk0, 1, "status: damaged metadata\ninvalid chunk size"},
        {"chunk-size-not-16", d_chunk_odd, 1, "status: damaged metadata\ninvalid chunk size"},
        {"chunk-size-over-16M", d_chunk_big, 1, "status: damaged metadata\ninvalid chunk size"},
        {"chunk-count", d_nchunks, 1, "status: damaged metadata\nwrong chunk count"},
        {"plane-outside", d_plane_out, 1, "status: damaged metadata\nplane 1 lies outside"},
        {"plane-offset-wraps", d_plane_wrap, 1, "status: damaged metadata\nplane 1 lies outside"},
        {"plane-size", d_plane_size, 1, "status: damaged metadata\nplane sizes do not match"},
        {"index-in-header", d_index_out, 1, "status: damaged metadata\nchunk index lies outside"},
        {"codebook-symbol", d_codebook, 1, "status: damaged metadata\ninvalid codebook"},
        {"codebook-escape-entry", d_codebook15, 1, "status: damaged metadata\ninvalid codebook"},
        {"escape-count", d_nesc, 1, "status: damaged chunk\nextent 1"},
        {"name-outside-strtab", d_name_out, 1, "status: damaged metadata\nname (name_off"},
        {"reserved-extent", d_reserved_x, 1, "status: damaged metadata\nextent 1: reserved bytes are not zero"},
        {"reserved-toc", d_reserved_t, 1, "status: damaged metadata\nreserved field"},
        {"dtype", d_dtype, 1, "invalid fields"},
        {"too-many-extents", d_n_extents, 1, "status: damaged metadata\ninconsistent sizes"},
        {"path-absolute", d_path_abs, 1, "status: damaged metadata\nsafe relative path"},
        {"path-dotdot", d_path_dotdot, 1, "status: damaged metadata\nsafe relative path"},
        {"path-empty", d_path_len0, 1, "status: damaged metadata\ntable of contents: path_len is 0"},
        {"kind", d_kind, 1, "status: damaged metadata\ntable of contents: unknown kind"},
        {"datum-order", d_datum_order, 1, "status: damaged metadata\ninconsistent"},
        {"index-amplification", d_index_amplify, 1, "status: damaged metadata\nchunk index"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = bn;
        memcpy(b, base, bn);
        cases[i].f(b, &n);
        if (cases[i].fix)
            ckz_fixup_ckpt(b, n);
        put_file(dir, cases[i].name, b, n);
        char e[128];
        snprintf(e, sizeof e, "%s.expect", cases[i].name);
        put_text(dir, e, cases[i].expect);
    }
}

/* ---- chunk decoder -------------------------------------------------------- */

/* Encode n weights (first a multiple of 8 within a tensor of total weights)
 * and write a fuzz_decode input for the chunk [first, first + n). */
static size_t make_decode(uint8_t *out, int k15, size_t total, uint64_t first, size_t n, int avx)
{
    uint32_t enc = k15 ? CKC_ENC_K15 : CKC_ENC_BSPLIT;
    static uint16_t w[4096], esc[4096];
    static uint8_t codes[4096], low[8192], escp[8192];
    uint64_t hist[512] = {0};
    gen_bf16(w, total);
    ckc_histogram(enc, w, total, hist);
    ckc_codebook cb;
    ckc_codebook_from_hist(enc, hist, &cb);
    uint64_t cs = ckc_code_plane_size(total), ls = ckc_low_plane_size(enc, total);
    memset(codes, 0, sizeof codes);
    memset(low, 0, sizeof low);
    memset(escp, 0, sizeof escp);
    uint64_t ne = 0, before = 0;
    if (ckc_encode_chunk(enc, &cb, w, total, 0, codes, low, esc, &ne) != CKC_OK)
        abort();
    uint64_t es = ckc_escape_plane_size(enc, ne);
    ckc_pack_escapes(enc, esc, ne, 0, escp, es);
    before = ckc_count_escapes(enc, &cb, w, first);
    uint64_t cnt = ckc_count_escapes(enc, &cb, w + first, n);
    memset(out, 0, CKZ_DECODE_HDR);
    out[0] = (uint8_t)(k15 | avx << 1);
    cku_put16(out + 2, (uint16_t)n);
    cku_put32(out + 4, (uint32_t)first);
    cku_put32(out + 8, (uint32_t)before);
    cku_put32(out + 12, (uint32_t)cnt);
    cku_put16(out + 16, (uint16_t)cs);
    cku_put16(out + 18, (uint16_t)ls);
    cku_put16(out + 20, (uint16_t)es);
    for (int k = 0; k < 16; k++)
        cku_put16(out + 24 + 2 * k, cb.sym[k]);
    uint8_t *p = out + CKZ_DECODE_HDR;
    memcpy(p, codes, cs);
    memcpy(p + cs, low, ls);
    memcpy(p + cs + ls, escp, es);
    return CKZ_DECODE_HDR + cs + ls + es;
}

static void decode_seeds(const char *dir)
{
    static uint8_t b[1 << 16];
    put_file(dir, "k15-whole", b, make_decode(b, 1, 1000, 0, 1000, 1));
    put_file(dir, "k15-middle", b, make_decode(b, 1, 2000, 512, 1024, 1));
    put_file(dir, "k15-tail", b, make_decode(b, 1, 997, 960, 37, 0));
    put_file(dir, "bs-whole", b, make_decode(b, 0, 1000, 0, 1000, 1));
    put_file(dir, "bs-tail", b, make_decode(b, 0, 333, 328, 5, 0));
}

static void decode_golden(const char *dir)
{
    static uint8_t b[1 << 16];
    struct {
        const char *name;
        int k15;
        int what;
    } cases[] = {
        {"k15-escape-count-high", 1, 0}, {"k15-escape-count-low", 1, 1}, {"k15-escapes-past-plane", 1, 2},
        {"k15-codes-short", 1, 3},       {"k15-low-short", 1, 4},         {"k15-codebook-512", 1, 5},
        {"bs-codebook-256", 0, 5},       {"bs-escape-count-high", 0, 0},  {"bs-low-short", 0, 4},
        {"k15-esc-first-huge", 1, 6},    {"k15-codebook-15-set", 1, 7},   {"k15-more-escapes-than-weights", 1, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = make_decode(b, cases[i].k15, 1000, 0, 1000, 1);
        switch (cases[i].what) {
        case 0: cku_put32(b + 12, cku_le32(b + 12) + 1); break;
        case 1: cku_put32(b + 12, cku_le32(b + 12) - 1); break;
        case 2: cku_put32(b + 8, cku_le16(b + 20)); break;
        case 3: cku_put16(b + 16, (uint16_t)(cku_le16(b + 16) - 260)); break;
        case 4: cku_put16(b + 18, 100); break;
        case 5: cku_put16(b + 24, cases[i].k15 ? 512 : 256); break;
        case 6: cku_put32(b + 8, UINT32_MAX); break;
        case 7: cku_put16(b + 24 + 30, 3); break;
        case 8: cku_put32(b + 12, 1001); break;
        }
        put_file(dir, cases[i].name, b, n);
    }
}

/* ---- manifest ------------------------------------------------------------- */

static const char *MF_OK =
    "{\"format\":1,\"files\":["
    "{\"path\":\"a/b.safetensors\",\"size\":10,\"sha256\":\"" /* 64 hex */
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\","
    "\"mode\":420,\"mtime_ns\":\"1700000000123456789\",\"kind\":\"safetensors\"},"
    "{\"path\":\"c.txt\",\"size\":0,\"sha256\":\""
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\","
    "\"mode\":384,\"mtime_ns\":\"-5\",\"kind\":\"blob\"}],"
    "\"dirs\":[{\"path\":\"a\",\"mode\":493}]}";

static void manifest_file(const char *dir, const char *name, const char *json, int good_sum)
{
    char buf[8192];
    snprintf(buf, sizeof buf, "CKPTFS-MANIFEST 1 %016llx\n%s",
             (unsigned long long)(ckc_hash64(json, strlen(json)) ^ (good_sum ? 0 : 1)), json);
    put_text(dir, name, buf);
}

static void manifest_seeds(const char *dir)
{
    manifest_file(dir, "ok-full", MF_OK, 1);
    put_text(dir, "ok-body", MF_OK); /* the harness adds the first line */
    put_text(dir, "empty-body", "{\"format\":1,\"files\":[],\"dirs\":[]}");
}

/* The replay loads a manifest golden file as it is (no fix-up). */
static void manifest_golden(const char *dir)
{
    static const char *SHA = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    struct {
        const char *name, *files, *dirs, *expect;
    } cases[] = {
        {"path-absolute", "\"/etc/passwd\"", "", "file entry 0 is invalid"},
        {"path-dotdot", "\"a/../../x\"", "{\"path\":\"a\",\"mode\":493}", "file entry 0 is invalid"},
        {"path-dot", "\"./x\"", "", "file entry 0 is invalid"},
        {"path-empty-component", "\"a//x\"", "{\"path\":\"a\",\"mode\":493}", "file entry 0 is invalid"},
        {"path-trailing-slash", "\"x/\"", "", "file entry 0 is invalid"},
        {"path-empty", "\"\"", "", "file entry 0 is invalid"},
        {"parent-not-listed", "\"a/x\"", "", "parent directory"},
        {"file-and-dir", "\"a\"", "{\"path\":\"a\",\"mode\":493}", "both a file and a directory"},
        {"dir-dotdot", "\"x\"", "{\"path\":\"..\",\"mode\":493}", "directory entry 0 is invalid"},
    };
    char json[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(json, sizeof json,
                 "{\"format\":1,\"files\":[{\"path\":%s,\"size\":1,\"sha256\":\"%s\",\"mode\":420,"
                 "\"mtime_ns\":\"0\",\"kind\":\"blob\"}],\"dirs\":[%s]}",
                 cases[i].files, SHA, cases[i].dirs);
        manifest_file(dir, cases[i].name, json, 1);
        char e[128];
        snprintf(e, sizeof e, "%s.expect", cases[i].name);
        put_text(dir, e, cases[i].expect);
    }
    struct {
        const char *name, *json, *expect;
        int good_sum;
    } more[] = {
        {"bad-checksum", MF_OK, "checksum mismatch", 0},
        {"future-format", "{\"format\":2,\"files\":[],\"dirs\":[]}", "unknown version", 1},
        {"invalid-json", "{\"format\":1,\"files\":[", "invalid manifest JSON", 1},
        {"size-over-2p53", "{\"format\":1,\"files\":[{\"path\":\"x\",\"size\":9007199254740994,\"sha256\":\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\"mode\":420,\"mtime_ns\":\"0\",\"kind\":\"blob\"}],\"dirs\":[]}", "file entry 0", 1},
        {"size-negative", "{\"format\":1,\"files\":[{\"path\":\"x\",\"size\":-1,\"sha256\":\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\"mode\":420,\"mtime_ns\":\"0\",\"kind\":\"blob\"}],\"dirs\":[]}", "file entry 0", 1},
        {"sha-short", "{\"format\":1,\"files\":[{\"path\":\"x\",\"size\":1,\"sha256\":\"0011\",\"mode\":420,\"mtime_ns\":\"0\",\"kind\":\"blob\"}],\"dirs\":[]}", "file entry 0", 1},
        {"mtime-number", "{\"format\":1,\"files\":[{\"path\":\"x\",\"size\":1,\"sha256\":\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\"mode\":420,\"mtime_ns\":5,\"kind\":\"blob\"}],\"dirs\":[]}", "file entry 0", 1},
        {"duplicate-file", "{\"format\":1,\"files\":[{\"path\":\"x\",\"size\":1,\"sha256\":\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\"mode\":420,\"mtime_ns\":\"0\",\"kind\":\"blob\"},{\"path\":\"x\",\"size\":1,\"sha256\":\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\",\"mode\":420,\"mtime_ns\":\"0\",\"kind\":\"blob\"}],\"dirs\":[]}", "duplicate file", 1},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        manifest_file(dir, more[i].name, more[i].json, more[i].good_sum);
        char e[128];
        snprintf(e, sizeof e, "%s.expect", more[i].name);
        put_text(dir, e, more[i].expect);
    }
    put_text(dir, "first-line-only", "CKPTFS-MANIFEST 1 ");
    put_text(dir, "first-line-only.expect", "bad first line");
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "seeds") && strcmp(argv[1], "golden"))) {
        fprintf(stderr, "usage: seedgen seeds|golden DIR\n");
        return 2;
    }
    const char *root = argv[2];
    DIR *d = strcmp(argv[1], "golden") ? NULL : opendir(root);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            fprintf(stderr, "seedgen golden: %s is not empty: tests/golden-errors is maintained by hand; "
                            "write into a new directory and copy the cases you want\n", root);
            closedir(d);
            return 1;
        }
    if (d)
        closedir(d);
    if (!strcmp(argv[1], "seeds")) {
        st_seeds(sub(root, "safetensors"));
        ckpt_seeds(sub(root, "container"));
        decode_seeds(sub(root, "decode"));
        manifest_seeds(sub(root, "manifest"));
    } else {
        st_golden(sub(root, "safetensors"));
        ckpt_golden(sub(root, "container"));
        decode_golden(sub(root, "decode"));
        manifest_golden(sub(root, "manifest"));
    }
    return 0;
}
