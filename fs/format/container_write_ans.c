/*
 * container_write_ans.c — encoding an ARCHIVE extent's chunks for the
 * writer (docs/format.md §5.3): the tensor is planned once (ckc_ans.h), then
 * its chunks are encoded in rounds of `jobs` threads x ANS_BATCH chunks,
 * each thread into its own buffer, and handed to the writer's sink in chunk
 * order, which gives each chunk's datum (its offset in plane 1).  Memory:
 * one round's buffers, about jobs x ANS_BATCH x 320 KiB, plus, for a tensor
 * at an odd address, an aligned copy of it for the planner.
 */
#include "container_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define ANS_BATCH 8

typedef struct {
    const ckc_ans_plan *plan;
    const uint16_t *w;          /* aligned weights of the tensor */
    uint64_t n, chunk_w;
    uint64_t c0, c1;            /* this task's chunks */
    uint8_t *buf;               /* ANS_BATCH bounds */
    size_t len[ANS_BATCH];
    ckp_chunk_entry *ix;        /* the tensor's index (hashes set here) */
    ckc_status st;
} ans_task;

static void *ans_worker(void *arg)
{
    ans_task *t = arg;
    size_t bound = ckc_ans_chunk_bound(t->chunk_w);
    for (uint64_t c = t->c0; c < t->c1 && t->st == CKC_OK; c++) {
        uint64_t first = c * t->chunk_w, m = t->n - first < t->chunk_w ? t->n - first : t->chunk_w;
        t->st = ckc_ans_encode_chunk(t->plan, t->w + first, (size_t)m, first, t->buf + (c - t->c0) * bound, bound,
                                     &t->len[c - t->c0]);
        t->ix[c].hash = ckc_hash64(t->w + first, (size_t)m * 2);
    }
    return NULL;
}

ckp_status ckp_ans_encode_chunks(const ckc_ans_plan *plan, const uint16_t *w, uint64_t n, uint64_t chunk_w,
                                 int jobs, ckp_chunk_entry *ix, ckp_ans_sink sink, void *ctx)
{
    uint64_t n_chunks = (n + chunk_w - 1) / chunk_w, pos = 0;
    size_t bound = ckc_ans_chunk_bound(chunk_w);
    ans_task *t;
    pthread_t *th;
    ckp_status s = CKP_OK;

    jobs = jobs < 1 ? 1 : jobs > 64 ? 64 : jobs;
    t = calloc((size_t)jobs, sizeof *t);
    th = calloc((size_t)jobs, sizeof *th);
    for (int i = 0; t && i < jobs; i++)
        if (!(t[i].buf = malloc(bound * ANS_BATCH)))
            break;
    if (!t || !th || !t[jobs - 1].buf)
        s = CKP_ERR_NOMEM;
    for (uint64_t r0 = 0; s == CKP_OK && r0 < n_chunks; r0 += (uint64_t)jobs * ANS_BATCH) {
        int started[64] = {0}, nt = 0; /* jobs <= 64 */
        for (int i = 0; i < jobs; i++) {
            uint64_t c0 = r0 + (uint64_t)i * ANS_BATCH, c1 = c0 + ANS_BATCH < n_chunks ? c0 + ANS_BATCH : n_chunks;
            if (c0 >= n_chunks)
                break;
            t[i] = (ans_task){plan, w, n, chunk_w, c0, c1, t[i].buf, {0}, ix, CKC_OK};
            nt = i + 1;
            if (i > 0 && pthread_create(&th[i], NULL, ans_worker, &t[i]) == 0)
                started[i] = 1;
        }
        for (int i = 0; i < nt; i++)
            if (!started[i])
                ans_worker(&t[i]);
        for (int i = 1; i < nt; i++)
            if (started[i])
                pthread_join(th[i], NULL);
        for (int i = 0; s == CKP_OK && i < nt; i++) {
            if (t[i].st != CKC_OK) {
                s = t[i].st == CKC_ERR_NOMEM ? CKP_ERR_NOMEM : CKP_ERR_INTERNAL;
                break;
            }
            for (uint64_t c = t[i].c0; s == CKP_OK && c < t[i].c1; c++) {
                ix[c].datum = pos;
                s = sink(ctx, t[i].buf + (c - t[i].c0) * bound, t[i].len[c - t[i].c0]);
                pos += t[i].len[c - t[i].c0];
            }
        }
    }
    for (int i = 0; t && i < jobs; i++)
        free(t[i].buf);
    free(t);
    free(th);
    return s;
}
