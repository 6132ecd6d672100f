/*
 * safetensors.c — parse and validate a safetensors header (see safetensors.h).
 *
 * The header is hostile input: every number is checked before use, and the
 * rules are those of the reference implementation (the Rust `safetensors`
 * crate): UTF-8 JSON as RFC 8259 writes it, no byte order mark, integers
 * written as such, contiguous tensors that exactly cover the data buffer,
 * shapes that match their byte ranges, no repeated field.  Stricter than
 * the reference on purpose: a repeated tensor name (even with identical
 * values), a \u0000 in any string (a C string would be cut there), fields
 * other than the three, "__metadata__": null.
 *
 * st_parse runs in steps: header length, JSON text and parse, each member
 * (metadata, tensors), names unique, layout of the data buffer.
 */
#include "safetensors.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    uint32_t code, bits;
} st_dtypes[] = {
    {"BOOL", 1, 8},     {"U8", 2, 8},       {"I8", 3, 8},           {"I16", 4, 16},
    {"U16", 5, 16},     {"F16", 6, 16},     {"BF16", 7, 16},        {"I32", 8, 32},
    {"U32", 9, 32},     {"F32", 10, 32},    {"F64", 11, 64},        {"I64", 12, 64},
    {"U64", 13, 64},    {"F8_E5M2", 14, 8}, {"F8_E4M3", 15, 8},     {"F8_E8M0", 16, 8},
    {"F4", 17, 4},      {"F6_E2M3", 18, 6}, {"F6_E3M2", 19, 6},     {"C64", 20, 64},
    {"F8_E4M3FNUZ", 21, 8}, {"F8_E5M2FNUZ", 22, 8},
};
#define N_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

uint32_t st_dtype_code(const char *name, uint32_t *elem_bits)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(name, st_dtypes[i].name) == 0) {
            if (elem_bits)
                *elem_bits = st_dtypes[i].bits;
            return st_dtypes[i].code;
        }
    return 0;
}

const char *st_dtype_name(uint32_t code)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (st_dtypes[i].code == code)
            return st_dtypes[i].name;
    return "none";
}

/* A rejected header (CKP_ERR_SOURCE: the source file is invalid) with its
 * message; other statuses are given with merr. */
#define fail(err, cap, ...) ((ckp_status)cku_errf((err), (cap), CKP_ERR_SOURCE, __VA_ARGS__))
#define nomem(err, cap) ((ckp_status)cku_errf((err), (cap), CKP_ERR_NOMEM, "out of memory"))

ckp_status st_header_len(const uint8_t *buf, size_t bufSize, uint64_t file_size, uint64_t *n, char *err,
                         size_t cap)
{
    if (file_size < 8)
        return fail(err, cap, "truncated: %llu bytes, a safetensors file needs at least 8",
                    (unsigned long long)file_size);
    if (bufSize < 8)
        return (ckp_status)cku_errf(err, cap, CKP_ERR_ARG, "%zu bytes given of the header's 8-byte length",
                                    bufSize);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)buf[i] << (8 * i);
    if (v > ST_MAX_HEADER)
        return fail(err, cap, "header length %llu is over the 100 MB limit", (unsigned long long)v);
    if (v > file_size - 8)
        return fail(err, cap, "header length %llu runs past the end of the file (%llu bytes)",
                    (unsigned long long)v, (unsigned long long)file_size);
    if (v < 2)
        return fail(err, cap, "header length %llu is too small for a JSON object",
                    (unsigned long long)v);
    *n = v;
    return CKP_OK;
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int get_u64(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* The three fields of a tensor object, each exactly once and nothing else
 * (the reference rejects a repeated field; cJSON would keep the first). */
static ckp_status check_fields(const cJSON *j, const char *name, char *err, size_t cap)
{
    static const char *const known[] = {"dtype", "shape", "data_offsets"};
    unsigned seen = 0;
    char esc[CKU_ESC_NAME];
    for (const cJSON *k = j->child; k; k = k->next) {
        unsigned i = 0;
        while (i < 3 && strcmp(k->string, known[i]))
            i++;
        if (i == 3 || seen & 1u << i)
            return fail(err, cap, "tensor \"%s\" has %s field \"%s\"", name, i == 3 ? "an unknown" : "a repeated",
                        cku_escape(k->string, esc, sizeof esc));
        seen |= 1u << i;
    }
    for (unsigned i = 0; i < 3; i++)
        if (!(seen & 1u << i))
            return fail(err, cap, "tensor \"%s\" lacks \"%s\"", name, known[i]);
    return CKP_OK;
}

/* Fill t from the tensor object j; @return CKP_OK or CKP_ERR_SOURCE with err
 * set.  name is t->name escaped for messages. */
static ckp_status parse_tensor(const cJSON *j, st_tensor *t, const char *name, char *err, size_t cap)
{
    if (!cJSON_IsObject(j))
        return fail(err, cap, "tensor \"%s\" is not an object", name);
    ckp_status st = check_fields(j, name, err, cap);
    if (st != CKP_OK)
        return st;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
        return fail(err, cap, "tensor \"%s\": \"%s\" is not %s", name,
                    !cJSON_IsString(dt) ? "dtype" : !cJSON_IsArray(sh) ? "shape" : "data_offsets",
                    !cJSON_IsString(dt) ? "a string" : "an array");
    char esc[CKU_ESC_NAME];
    t->dtype = st_dtype_code(dt->valuestring, &t->elem_bits);
    if (!t->dtype)
        return fail(err, cap, "tensor \"%s\" has unknown dtype \"%s\"", name,
                    cku_escape(dt->valuestring, esc, sizeof esc));
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_DIMS)
        return fail(err, cap, "tensor \"%s\" has %d dimensions (at most %d)", name, nd, ST_MAX_DIMS);
    t->ndim = (uint32_t)nd;
    uint64_t numel = 1;
    int i = 0, overflow = 0;
    for (const cJSON *d = sh->child; d; d = d->next, i++) {
        if (get_u64(d, &t->shape[i]))
            return fail(err, cap, "tensor \"%s\" has a shape entry that is not a non-negative integer", name);
        if (t->shape[i] && numel > UINT64_MAX / t->shape[i])
            overflow = 1;
        numel *= t->shape[i];
    }
    if (cJSON_GetArraySize(off) != 2 || get_u64(off->child, &t->begin) || get_u64(off->child->next, &t->end))
        return fail(err, cap, "tensor \"%s\" data_offsets must be two non-negative integers", name);
    if (t->end < t->begin)
        return fail(err, cap, "tensor \"%s\" has reversed data_offsets [%llu, %llu]", name,
                    (unsigned long long)t->begin, (unsigned long long)t->end);
    if (overflow || numel > UINT64_MAX / t->elem_bits || (numel * t->elem_bits) % 8 ||
        numel * t->elem_bits / 8 != t->end - t->begin)
        return fail(err, cap, "tensor \"%s\": shape and dtype %s need %s bytes but data_offsets span %llu",
                    name, st_dtype_name(t->dtype), overflow ? "too many" : "another number of",
                    (unsigned long long)(t->end - t->begin));
    return CKP_OK;
}

static ckp_status check_metadata(const cJSON *m, char *err, size_t cap)
{
    char esc[CKU_ESC_NAME];
    if (!cJSON_IsObject(m))
        return fail(err, cap, "__metadata__ is not an object");
    for (const cJSON *k = m->child; k; k = k->next)
        if (!cJSON_IsString(k))
            return fail(err, cap, "__metadata__ value \"%s\" is not a string",
                        cku_escape(k->string, esc, sizeof esc));
    return CKP_OK;
}

/* The n header bytes at json: checked as text (what the reference's UTF-8
 * and JSON decoders refuse and cJSON takes: see cku_json_lex; every number
 * of a valid header is a shape entry or an offset), parsed, and checked to
 * be one object followed by nothing but whitespace (the padding writers add).
 * @return the object, or NULL with err set (CKP_ERR_SOURCE). */
static cJSON *parse_json(const char *json, uint64_t n, char *err, size_t cap)
{
    const char *nul = memchr(json, 0, n), *why;
    size_t at;
    if (nul) {
        fail(err, cap, "header contains a NUL byte (byte %llu)", (unsigned long long)(nul - json) + 8);
        return NULL;
    }
    if ((why = cku_json_lex(json, n, 1, &at))) {
        size_t tok = 0; /* a bad number is quoted */
        while (at + tok < n && tok < 24 && json[at + tok] && strchr("0123456789+-.eE", json[at + tok]))
            tok++;
        fail(err, cap, "header has %s (byte %llu%s%.*s)", why, (unsigned long long)at + 8, tok ? ": " : "",
             (int)tok, json + at);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, n, &end, 0);
    if (!root) {
        fail(err, cap, "header is not valid JSON (near byte %lld)",
             (long long)((cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : json) - json) + 8);
        return NULL;
    }
    for (const char *p = end; p && p < json + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            fail(err, cap, "header has bytes after the JSON object");
            goto bad;
        }
    if (cJSON_IsObject(root))
        return root;
    fail(err, cap, "header is not a JSON object");
bad:
    cJSON_Delete(root);
    return NULL;
}

/* Every member of root: __metadata__ checked, the others parsed into
 * h->tensors (in header order). */
static ckp_status collect_tensors(const cJSON *root, st_header *h, char *err, size_t cap)
{
    size_t cnt = 0;
    for (const cJSON *k = root->child; k; k = k->next)
        cnt++;
    h->tensors = calloc(cnt ? cnt : 1, sizeof *h->tensors);
    if (!h->tensors)
        return nomem(err, cap);
    int seen_meta = 0;
    char esc[CKU_ESC_NAME];
    for (const cJSON *k = root->child; k; k = k->next) {
        if (strcmp(k->string, "__metadata__") == 0) {
            if (seen_meta++)
                return fail(err, cap, "duplicate __metadata__");
            ckp_status st = check_metadata(k, err, cap);
            if (st != CKP_OK)
                return st;
            continue;
        }
        st_tensor *t = &h->tensors[h->n_tensors++];
        if (!(t->name = strdup(k->string)))
            return nomem(err, cap);
        ckp_status st = parse_tensor(k, t, cku_escape(t->name, esc, sizeof esc), err, cap);
        if (st != CKP_OK)
            return st;
    }
    return CKP_OK;
}

/* No name twice: cJSON keeps both members of a repeated key (the reference
 * keeps the last, whose offsets then leave a hole: it rejects the file unless
 * the two copies are identical, which is refused here too). */
static ckp_status check_unique_names(st_header *h, char *err, size_t cap)
{
    char esc[CKU_ESC_NAME];
    qsort(h->tensors, h->n_tensors, sizeof *h->tensors, cmp_name);
    for (size_t i = 1; i < h->n_tensors; i++)
        if (strcmp(h->tensors[i - 1].name, h->tensors[i].name) == 0)
            return fail(err, cap, "duplicate tensor name \"%s\"", cku_escape(h->tensors[i].name, esc, sizeof esc));
    return CKP_OK;
}

/* Sorted by data offset, the tensors are contiguous and cover the data
 * buffer exactly. */
static ckp_status check_layout(st_header *h, char *err, size_t cap)
{
    char esc[CKU_ESC_NAME];
    qsort(h->tensors, h->n_tensors, sizeof *h->tensors, cmp_begin);
    uint64_t buffer = h->file_size - h->data_start, pos = 0;
    for (size_t i = 0; i < h->n_tensors; i++) {
        const st_tensor *t = &h->tensors[i];
        if (t->begin != pos)
            return fail(err, cap, t->begin < pos ? "tensor \"%s\" overlaps the previous tensor"
                                                 : "tensor \"%s\" leaves a gap before it in the data buffer",
                        cku_escape(t->name, esc, sizeof esc));
        if (t->end > buffer)
            return fail(err, cap, "tensor \"%s\" data_offsets end at %llu, past the data buffer (%llu bytes)",
                        cku_escape(t->name, esc, sizeof esc), (unsigned long long)t->end,
                        (unsigned long long)buffer);
        pos = t->end;
    }
    if (pos != buffer)
        return fail(err, cap, "data buffer has %llu bytes but the tensors cover %llu", (unsigned long long)buffer,
                    (unsigned long long)pos);
    return CKP_OK;
}

ckp_status st_parse(const uint8_t *buf, size_t bufSize, uint64_t file_size, st_header **out, char *err,
                    size_t cap)
{
    *out = NULL;
    uint64_t n;
    ckp_status st = st_header_len(buf, bufSize, file_size, &n, err, cap);
    if (st != CKP_OK)
        return st;
    if (bufSize < 8 + n)
        return (ckp_status)cku_errf(err, cap, CKP_ERR_ARG, "%zu bytes given of a header of %llu", bufSize,
                                    (unsigned long long)(8 + n));
    cJSON *root = parse_json((const char *)buf + 8, n, err, cap);
    if (!root)
        return CKP_ERR_SOURCE;
    st_header *h = calloc(1, sizeof *h);
    if (!h) {
        st = nomem(err, cap);
        goto out;
    }
    h->header_size = n;
    h->data_start = 8 + n;
    h->file_size = file_size;
    if ((st = collect_tensors(root, h, err, cap)) != CKP_OK || (st = check_unique_names(h, err, cap)) != CKP_OK ||
        (st = check_layout(h, err, cap)) != CKP_OK)
        goto out;
    *out = h;
    h = NULL;
out:
    cJSON_Delete(root);
    st_free(h);
    return st;
}

void st_free(st_header *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->n_tensors; i++)
        free(h->tensors[i].name);
    free(h->tensors);
    free(h);
}
