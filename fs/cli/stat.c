/*
 * stat.c — `ckptfs stat PACKED|MOUNTPOINT [--json]`: what a pack holds and
 * saves, per file, dtype and encoding, read from the tables of contents (no
 * chunk decoded); on a mount point, the daemon's counters.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "cmd_common.h"
#include "container.h"
#include "manifest.h"
#include "remote.h"
#include "safetensors.h"
#include "hashing.h"
#include "progress.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>

typedef struct {
    uint64_t count, original, packed;
} tally;

/* One packed file's figures (and, summed, the whole pack's). */
typedef struct {
    const char *path;
    uint64_t original, packed;
    uint64_t bf16_weights, escapes, bf16_charged; /* charged: packed bytes but non-BF16 payloads */
    unsigned enc_mask;                            /* 1 << encoding of each extent */
} file_stats;

typedef struct {
    file_stats all;
    uint64_t files, code_bytes, low_bytes, esc_bytes, index_bytes;
    uint64_t links; /* symbolic links the manifest lists: no data (a shared blob counts once) */
    uint64_t ans_table_bytes, ans_stream_bytes; /* ARCHIVE planes 0 and 1 */
    uint64_t blob_original, blob_packed;
    tally dtype[33], enc[5]; /* dtype[32]: codes of 32 and over */
} stats;

/* The name stat gives dtype slot k: its safetensors name, or for a code
 * this ckptfs does not name (dtype is informational: format §4.3) "code K",
 * so two unknown codes never share a row or a JSON key. */
static const char *dtype_label(uint32_t k, char buf[16])
{
    if (k == 32)
        return "code>=32";
    uint32_t bits;
    const char *name = st_dtype_name(k);
    if (st_dtype_code(name, &bits) == k)
        return name;
    snprintf(buf, 16, "code %u", k);
    return buf;
}

static void stat_file(const ckp_reader *r, stats *t, file_stats *f)
{
    const ckp_info *in = ckp_get_info(r);
    f->original = in->original_size;
    f->packed = in->packed_size;
    t->files++;
    uint64_t non_bf16 = 0;
    for (uint32_t e = 0; e < in->n_extents; e++) {
        const ckp_extent *x = ckp_get_extent(r, e);
        uint64_t payload = x->plane_size[0] + x->plane_size[1] + x->plane_size[2] + x->n_chunks * 16;
        f->enc_mask |= 1u << (x->encoding % 5);
        t->enc[x->encoding % 5].count++;
        t->enc[x->encoding % 5].original += x->orig_size;
        t->enc[x->encoding % 5].packed += payload;
        if (x->dtype) { /* 0: no tensor (a safetensors header, a blob) */
            tally *d = &t->dtype[x->dtype < 32 ? x->dtype : 32];
            d->count++;
            d->original += x->orig_size;
            d->packed += payload;
        }
        if (x->encoding >= CKC_ENC_K15) { /* K15, BSPLIT, ARCHIVE (R15: no other) */
            f->bf16_weights += x->orig_size / 2;
            f->escapes += x->n_escapes;
            int ans = x->encoding == CKC_ENC_ARCHIVE;
            t->code_bytes += ans ? 0 : x->plane_size[0];
            t->low_bytes += ans ? 0 : x->plane_size[1];
            t->esc_bytes += x->plane_size[2];
            t->ans_table_bytes += ans ? x->plane_size[0] : 0;
            t->ans_stream_bytes += ans ? x->plane_size[1] : 0;
            t->index_bytes += x->n_chunks * 16;
        } else if (in->kind == CKP_KIND_SAFETENSORS && e > 0) {
            non_bf16 += payload; /* non-BF16 tensor data is not BF16 overhead */
        }
    }
    if (in->kind == CKP_KIND_SAFETENSORS)
        f->bf16_charged = in->packed_size - non_bf16;
    else {
        t->blob_original += in->original_size;
        t->blob_packed += in->packed_size;
    }
    t->all.original += f->original;
    t->all.packed += f->packed;
    t->all.bf16_weights += f->bf16_weights;
    t->all.escapes += f->escapes;
    t->all.bf16_charged += f->bf16_charged;
    t->all.enc_mask |= f->enc_mask;
}

/* a count for a person: "664k", "1.21M", "7.50G". out: 16 chars. */
static char *count_human(uint64_t n, char *out)
{
    double v = (double)n;
    snprintf(out, 16, v >= 1e9 ? "%.3gG" : v >= 1e6 ? "%.3gM" : v >= 1e3 ? "%.3gk" : "%.0f",
             v >= 1e9 ? v / 1e9 : v >= 1e6 ? v / 1e6 : v >= 1e3 ? v / 1e3 : v);
    return out;
}

static double ratio(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0; }

/* "k15+zstd": the encodings of a file's extents. */
static void enc_list(unsigned mask, char *out, size_t cap)
{
    *out = 0;
    for (uint32_t k = 0; k < 5; k++)
        if (mask & (1u << k))
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", *out ? "+" : "", ckc_encoding_name(k));
}

static cJSON *tally_json(const tally *x)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)x->count);
    cJSON_AddNumberToObject(o, "original_bytes", (double)x->original);
    cJSON_AddNumberToObject(o, "packed_bytes", (double)x->packed);
    return o;
}

/* The per-file figures as JSON (the same for each file and for the total). */
static void file_json(cJSON *o, const file_stats *f, uint64_t extra_charge)
{
    char enc[64];
    enc_list(f->enc_mask, enc, sizeof enc);
    cJSON_AddNumberToObject(o, "original_bytes", (double)f->original);
    cJSON_AddNumberToObject(o, "packed_bytes", (double)(f->packed + extra_charge));
    cJSON_AddNumberToObject(o, "saved_fraction", f->original ? 1.0 - ratio(f->packed + extra_charge, f->original) : 0);
    cJSON_AddNumberToObject(o, "bf16_weights", (double)f->bf16_weights);
    cJSON_AddNumberToObject(o, "bf16_bits_per_weight", 8.0 * ratio(f->bf16_charged + extra_charge, f->bf16_weights));
    cJSON_AddNumberToObject(o, "escapes", (double)f->escapes);
    cJSON_AddNumberToObject(o, "escape_rate", ratio(f->escapes, f->bf16_weights));
    cJSON_AddStringToObject(o, "encodings", enc);
}

static void print_json(const char *dst, const stats *t, const file_stats *fs, uint64_t manifest_size)
{
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateObject(), *e = cJSON_CreateObject();
    cJSON *files = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "path", dst);
    cJSON_AddNumberToObject(o, "files", (double)t->files);
    cJSON_AddNumberToObject(o, "links", (double)t->links);
    file_json(o, &t->all, manifest_size); /* the whole pack is charged the manifest too */
    cJSON_AddNumberToObject(o, "bf16_charged_bytes", (double)(t->all.bf16_charged + manifest_size));
    cJSON_AddNumberToObject(o, "code_plane_bytes", (double)t->code_bytes);
    cJSON_AddNumberToObject(o, "low_plane_bytes", (double)t->low_bytes);
    cJSON_AddNumberToObject(o, "escape_plane_bytes", (double)t->esc_bytes);
    cJSON_AddNumberToObject(o, "chunk_index_bytes", (double)t->index_bytes);
    cJSON_AddNumberToObject(o, "archive_table_bytes", (double)t->ans_table_bytes);
    cJSON_AddNumberToObject(o, "archive_stream_bytes", (double)t->ans_stream_bytes);
    cJSON_AddNumberToObject(o, "manifest_bytes", (double)manifest_size);
    cJSON_AddNumberToObject(o, "blob_original_bytes", (double)t->blob_original);
    cJSON_AddNumberToObject(o, "blob_packed_bytes", (double)t->blob_packed);
    for (uint64_t i = 0; i < t->files; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "path", fs[i].path);
        file_json(f, &fs[i], 0);
        cJSON_AddItemToArray(files, f);
    }
    cJSON_AddItemToObject(o, "by_file", files);
    char lb[16];
    for (uint32_t k = 1; k <= 32; k++)
        if (t->dtype[k].count)
            cJSON_AddItemToObject(d, dtype_label(k, lb), tally_json(&t->dtype[k]));
    for (uint32_t k = 0; k < 5; k++)
        if (t->enc[k].count)
            cJSON_AddItemToObject(e, ckc_encoding_name(k), tally_json(&t->enc[k]));
    cJSON_AddItemToObject(o, "by_dtype", d);
    cJSON_AddItemToObject(o, "by_encoding", e);
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* One row of the per-file table. */
static void print_row(const char *name, const file_stats *f, uint64_t extra_charge)
{
    char o[16], p[16], bpw[16] = "-", esc[16] = "-", enc[64], saved[16];
    uint64_t packed = f->packed + extra_charge;
    if (f->bf16_weights) {
        snprintf(bpw, sizeof bpw, "%.2f", 8.0 * ratio(f->bf16_charged + extra_charge, f->bf16_weights));
        snprintf(esc, sizeof esc, "%.3f%%", 100.0 * ratio(f->escapes, f->bf16_weights));
    }
    enc_list(f->enc_mask, enc, sizeof enc);
    if (packed > f->original) /* never "0.0%" for a file that grew */
        snprintf(saved, sizeof saved, "grew");
    else
        snprintf(saved, sizeof saved, "%.1f%%", f->original ? 100.0 * (1.0 - ratio(packed, f->original)) : 0.0);
    printf("  %-36s %9s %9s %7s %7s %8s  %s\n", name, cku_human(f->original, o), cku_human(packed, p), saved, bpw,
           esc, enc);
}

static void print_text(const char *dst, const stats *t, const file_stats *fs, uint64_t manifest_size)
{
    char a[16], b[16], c[16], sv[24];
    uint64_t packed = t->all.packed + manifest_size;
    printf("%s: %llu file%s, %s -> %s (%s)\n", dst, (unsigned long long)t->files, cku_s(t->files),
           cku_human(t->all.original, a), cku_human(packed, b), cku_saved(t->all.original, packed, sv));
    if (t->links) /* counted apart: a blob that several links name is one file above */
        printf("%llu symbolic link%s (no data of their own)\n", (unsigned long long)t->links, cku_s(t->links));
    if (t->all.bf16_weights)
        printf("BF16: %s weights at %.3f bits/weight (every byte of overhead charged), escape rate %.4f%%\n",
               count_human(t->all.bf16_weights, a), 8.0 * ratio(t->all.bf16_charged + manifest_size, t->all.bf16_weights),
               100.0 * ratio(t->all.escapes, t->all.bf16_weights));
    printf("\n  %-36s %9s %9s %7s %7s %8s  %s\n", "file", "original", "packed", "saved", "bits/w", "escapes",
           "encoding");
    for (uint64_t i = 0; i < t->files; i++) {
        char name[PATH_MAX];
        size_t n = strlen(cku_escape(fs[i].path, name, sizeof name));
        if (n > 36) { /* a long path: its start and end around a marker (whole in --json) */
            size_t head = 12, tail = n - 21;
            while (head && (name[head] & 0xC0) == 0x80) /* whole UTF-8 characters */
                head--;
            while ((name[tail] & 0xC0) == 0x80)
                tail++;
            memcpy(name + head, "...", 3);
            memmove(name + head + 3, name + tail, n - tail + 1);
        }
        print_row(name, &fs[i], 0);
    }
    print_row("total (with the manifest)", &t->all, manifest_size);
    printf("\n  by dtype       %8s %10s %10s\n", "tensors", "original", "payload");
    char lb[16];
    for (uint32_t k = 1; k <= 32; k++)
        if (t->dtype[k].count)
            printf("    %-12s %8llu %10s %10s\n", dtype_label(k, lb), (unsigned long long)t->dtype[k].count,
                   cku_human(t->dtype[k].original, a), cku_human(t->dtype[k].packed, b));
    printf("  by encoding    %8s %10s %10s\n", "extents", "original", "payload");
    for (uint32_t k = 0; k < 5; k++)
        if (t->enc[k].count)
            printf("    %-12s %8llu %10s %10s\n", ckc_encoding_name(k), (unsigned long long)t->enc[k].count,
                   cku_human(t->enc[k].original, a), cku_human(t->enc[k].packed, b));
    char d[16];
    printf("  BF16 planes: codes %s, low %s, escapes %s, chunk index %s\n", cku_human(t->code_bytes, a),
           cku_human(t->low_bytes, b), cku_human(t->esc_bytes, c), cku_human(t->index_bytes, d));
    if (t->ans_table_bytes)
        printf("  archive: tables %s, chunk streams %s\n", cku_human(t->ans_table_bytes, a),
               cku_human(t->ans_stream_bytes, b));
    printf("  (bits/w charge every byte of a safetensors file's packed form except non-BF16 tensor\n"
           "   payloads; the total charges the manifest too)\n");
}

/* `ckptfs stat MOUNTPOINT`: a running daemon's counters, read from the
 * xattr user.ckptfs.stats of the mount's root (fs/mount/readpath.h).
 * @return 1 if dst is a ckptfs mount (printed), 0 if not. */
static int stat_mount(const char *dst, int json)
{
    ssize_t n = getxattr(dst, "user.ckptfs.stats", NULL, 0); /* its size: the source path's length varies */
    size_t cap = n > 0 ? (size_t)n + 256 : 0; /* room for counters that grew meanwhile */
    char *buf = cap ? malloc(cap) : NULL;
    if (buf)
        n = getxattr(dst, "user.ckptfs.stats", buf, cap - 1);
    if (!buf || n <= 0) {
        free(buf);
        return 0;
    }
    buf[n] = 0;
    if (json) {
        fputs(buf, stdout);
        free(buf);
        return 1;
    }
    cJSON *o = cJSON_Parse(buf);
    free(buf);
    if (!o)
        return 0;
#define N(k) ((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, k)))
    char a[16], b[16], c[16];
    const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "source"));
    uint64_t hits = N("cache_hits"), misses = N("cache_misses");
    printf("%s: ckptfs mount of %s (%llu file%s)\n", dst, src ? src : "?", (unsigned long long)N("files"),
           cku_s(N("files")));
    printf("  reads            %llu (%llu of >= 512 KiB), %s served\n", (unsigned long long)N("reads"),
           (unsigned long long)N("big_reads"), cku_human(N("read_bytes"), a));
    printf("  decoded          %s; decode errors %llu\n", cku_human(N("decoded_bytes"), b),
           (unsigned long long)N("decode_errors"));
    printf("  cache            %llu hits, %llu misses (%.1f%% hits), %llu waits, %llu evictions, %llu served out;"
           " holds %s\n",
           (unsigned long long)hits, (unsigned long long)misses, hits + misses ? 100.0 * hits / (hits + misses) : 0.0,
           (unsigned long long)N("cache_waits"), (unsigned long long)N("cache_evictions"),
           (unsigned long long)N("cache_served_out"), cku_human(N("cache_bytes"), c));
    printf("  prefetch         %llu queued, %llu done, %llu dropped, %llu cancelled\n",
           (unsigned long long)N("prefetch_queued"), (unsigned long long)N("prefetch_done"),
           (unsigned long long)N("prefetch_dropped"), (unsigned long long)N("prefetch_cancelled"));
    if (cJSON_GetObjectItemCaseSensitive(o, "direct_loads")) /* drop_packed */
        printf("  O_DIRECT windows %llu loads (%s), %llu chunks decoded from them, %llu waits, %llu failures,"
               " %llu prefetches dropped (no window free), %llu windows replaced unused\n",
               (unsigned long long)N("direct_loads"), cku_human(N("direct_load_bytes"), a),
               (unsigned long long)N("direct_hits"), (unsigned long long)N("direct_waits"),
               (unsigned long long)N("direct_failures"), (unsigned long long)N("direct_dropped"),
               (unsigned long long)N("direct_replaced"));
#undef N
    cJSON_Delete(o);
    return 1;
}

int ckpt_stat(const char *dst, int json)
{
    char err[768];
    ckm_manifest *m;
    if (stat_mount(dst, json))
        return 0;
    /* as verify and unpack: a pack being written is not a damaged one (its
     * first run has no manifest yet; a rerun replaces files the old one
     * lists, which read as 'does not match its manifest entry') */
    int lock = ckpt_read_lock("stat", dst);
    if (lock == -2)
        return CKPT_EXIT_FAIL;
    ckp_status ls = ckpt_load_manifest(dst, &m, err, sizeof err);
    if (ls != CKP_OK) {
        if (lock >= 0)
            close(lock);
        return ckpt_fail("stat", ls, err);
    }
    stats t;
    memset(&t, 0, sizeof t);
    t.links = m->n_links;
    file_stats *fs = calloc(m->n_files ? m->n_files : 1, sizeof *fs);
    int rc = fs ? 0 : ckpt_fail("stat", CKP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; fs && i < m->n_files; i++) {
        ckp_reader *r = ckpt_open_member("stat", dst, &m->files[i]);
        if (!r) {
            rc = 1;
            continue;
        }
        fs[t.files].path = m->files[i].path;
        stat_file(r, &t, &fs[t.files]);
        ckp_close(r);
    }
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dst, CKP_MANIFEST_NAME);
    uint64_t msize = ckpt_is_remote(dst) ? ckpt_remote_manifest_size()
                                         : lstat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (rc == 0 && json)
        print_json(dst, &t, fs, msize);
    else if (rc == 0)
        print_text(dst, &t, fs, msize);
    free(fs);
    ckm_free(m);
    if (lock >= 0)
        close(lock);
    return rc;
}
