/*
 * container_ans.c — the reader's side of ARCHIVE extents (docs/format.md
 * §5.3): each extent's table blob (plane 0) is read and checked at open
 * (R29), kept in memory, and turned into decode tables the first time one
 * of its chunks is decoded.  A reader is shared between threads: tables are
 * published with a compare-and-swap, and a thread that loses the race frees
 * its own copy.  Tables live until ckp_close.
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
};

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

const ckc_ans_tables *ckp_ans_tables(ckp_ans_state *a, uint32_t e, const ckp_extent *x)
{
    ckc_ans_tables *t = atomic_load_explicit(&a->tab[e], memory_order_acquire), *none = NULL;
    if (t)
        return t;
    if (ckc_ans_tables_new(a->blob[e], (size_t)x->plane_size[0], x->orig_size / 2, &t) != CKC_OK)
        return NULL; /* checked at open: only memory can fail */
    if (!atomic_compare_exchange_strong_explicit(&a->tab[e], &none, t, memory_order_acq_rel,
                                                 memory_order_acquire)) {
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
