/*
 * container_ans.c — the reader's side of ARCHIVE extents (docs/format.md
 * §5.3): each extent's table blob (plane 0) is read and checked at open
 * (R29), kept in memory, and turned into decode tables the first time one
 * of its chunks is decoded.  A reader is shared between threads: tables are
 * published with a compare-and-swap, and a thread that loses the race frees
 * its own copy.  Kept tables are bounded (docs/format.md §9.1): their bytes
 * are counted per reader against ans_budget(); past it, a decode builds
 * its tables into a copy of its own that it frees after the decode, so §3's
 * shared or many small tables cannot make a reader hold many times the file.
 * Kept tables live until ckp_close.
 */
#include "container_internal.h"
#include "util.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct ckp_ans_state {
    uint8_t **blob;                  /* per extent; NULL when not ARCHIVE */
    _Atomic(ckc_ans_tables *) *tab;  /* per extent; built on first use */
    _Atomic(uint64_t) kept;          /* bytes of the tables in tab[] */
};

/* Decode-table bytes a reader keeps: 64 MiB (128 tables of the §9.1
 * maximum, 512 KiB) plus an eighth of the file (one more per 4 MiB).  A
 * file written by ckptfs (one extent's tables per tensor) passes it only
 * with many small tensors with large tables; their decodes then rebuild
 * them, slower but the same bytes. */
#define ANS_KEEP_BASE ((uint64_t)64 << 20)
static uint64_t ans_budget(const ckp_reader *r) { return ANS_KEEP_BASE + r->info.packed_size / 8; }

/* Counts n more kept bytes if they fit in the budget; 0 if they do not. */
static int ans_reserve(ckp_ans_state *a, uint64_t n, uint64_t budget)
{
    uint64_t used = atomic_load_explicit(&a->kept, memory_order_relaxed);
    do {
        if (n > budget || used > budget - n)
            return 0;
    } while (!atomic_compare_exchange_weak_explicit(&a->kept, &used, used + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return 1;
}

#define rerr(err, cap, file, s, ...) ((ckp_status)cku_errf_at((err), (cap), (s), (file), __VA_ARGS__))

uint8_t *ckp_ans_blob(ckp_reader *r, uint32_t e)
{
    ckp_ans_state *a = r->ans;
    if (!a) {
        a = r->ans = calloc(1, sizeof *a);
        if (a) {
            a->blob = calloc(r->info.n_extents, sizeof *a->blob);
            a->tab = calloc(r->info.n_extents, sizeof *a->tab);
        }
        if (!a || !a->blob || !a->tab)
            return NULL;
    }
    if (!a->blob[e])
        a->blob[e] = malloc((size_t)r->x[e].plane_size[0]);
    return a->blob[e];
}

ckp_status ckp_ans_load(ckp_reader *r, uint32_t e, int have, char *err, size_t cap)
{
    const ckp_extent *x = &r->x[e];
    ckc_status cs;
    uint8_t *blob = ckp_ans_blob(r, e);
    if (!blob)
        return rerr(err, cap, r->file, CKP_ERR_NOMEM, "out of memory");
    if (!have && ckp_read_packed(r, blob, (size_t)x->plane_size[0], x->plane_offset[0]) != CKP_OK)
        return rerr(err, cap, r->file, CKP_ERR_IO, "reading the tables of extent %u: %s", e, strerror(errno));
    ckp_ans_state *a = r->ans;
    cs = ckc_ans_blob_check(a->blob[e], (size_t)x->plane_size[0], x->orig_size / 2);
    if (cs == CKC_ERR_NOMEM)
        return rerr(err, cap, r->file, CKP_ERR_NOMEM, "out of memory");
    if (cs != CKC_OK)
        return rerr(err, cap, r->file, CKP_ERR_CORRUPT, "extent %u (%s): invalid archive tables", e,
                    *x->name ? x->name : "no name");
    return CKP_OK;
}

const ckc_ans_tables *ckp_ans_tables(const ckp_reader *r, uint32_t e, ckc_ans_tables **own)
{
    ckp_ans_state *a = r->ans;
    const ckp_extent *x = &r->x[e];
    ckc_ans_tables *t = atomic_load_explicit(&a->tab[e], memory_order_acquire), *none = NULL;
    *own = NULL;
    if (t)
        return t;
    if (ckc_ans_tables_new(a->blob[e], (size_t)x->plane_size[0], x->orig_size / 2, &t) != CKC_OK)
        return NULL; /* checked at open: only memory can fail */
    uint64_t n = ckc_ans_tables_bytes(t);
    if (!ans_reserve(a, n, ans_budget(r)))
        return *own = t; /* over the budget: the caller frees it after its decode */
    if (!atomic_compare_exchange_strong_explicit(&a->tab[e], &none, t, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        atomic_fetch_sub_explicit(&a->kept, n, memory_order_relaxed);
        ckc_ans_tables_free(t);
        t = none;
    }
    return t;
}

void ckp_ans_free(ckp_ans_state *a, uint32_t n_extents)
{
    if (!a)
        return;
    for (uint32_t e = 0; e < n_extents; e++) {
        if (a->blob)
            free(a->blob[e]);
        if (a->tab)
            ckc_ans_tables_free(atomic_load(&a->tab[e]));
    }
    free(a->blob);
    free((void *)a->tab);
    free(a);
}
