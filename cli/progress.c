/*
 * progress.c — the progress line of pack, unpack and verify.
 */
#include "progress.h"
#include "util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct cku_progress {
    pthread_mutex_t lock; /* protects done and last */
    const char *what;
    uint64_t total, done;
    double start, last;
    int tty;
};

cku_progress *cku_progress_new(const char *what, uint64_t total)
{
    cku_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->what = what;
    p->total = total;
    p->start = p->last = cku_now();
    p->tty = isatty(STDERR_FILENO);
    return p;
}

static void progress_print(cku_progress *p, double now, int final)
{
    double el = now - p->start, rate = el > 0 ? p->done / el : 0;
    double eta = rate > 0 && p->total > p->done ? (p->total - p->done) / rate : 0;
    int width = 30, fill = p->total ? (int)(width * (double)p->done / p->total) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r%s [%s] %.2f/%.2f GB  %.0f MB/s  ETA %02d:%02d%s", p->what, bar, p->done / 1e9,
            p->total / 1e9, rate / 1e6, (int)eta / 60, (int)eta % 60, final ? "\n" : " ");
}

void cku_progress_add(cku_progress *p, uint64_t bytes)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->done += bytes;
    double now = cku_now();
    if (p->tty && now - p->last > 0.2) {
        p->last = now;
        progress_print(p, now, 0);
    }
    pthread_mutex_unlock(&p->lock);
}

void cku_progress_done(cku_progress *p)
{
    if (!p)
        return;
    if (p->tty)
        progress_print(p, cku_now(), 1);
    pthread_mutex_destroy(&p->lock);
    free(p);
}


char *cku_human(uint64_t bytes, char *out)
{
    static const char *unit[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 999.5 && u < 6) {
        v /= 1000;
        u++;
    }
    snprintf(out, 16, u == 0 ? "%.0f %s" : v < 9.995 ? "%.2f %s" : v < 99.95 ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return out;
}
