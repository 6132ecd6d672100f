/*
 * progress.c — the progress report of pack, unpack and verify.
 *
 * On a terminal one line is redrawn (at most 5 times a second): a bar, bytes
 * done of total, the rate and the ETA, never wider than the terminal (its
 * width read at each redraw: a resized one is followed; the bar shrinks,
 * then goes, then the line is cut), so a redraw never wraps and leaves a
 * stale line behind.  A terminal that cannot redraw (TERM=dumb or unset) or
 * whose width is unknown gets the plain lines of a log.  Off a terminal (a service's journal,
 * a CI log) a plain line is printed at the start, every CKU_PROGRESS_EVERY
 * seconds and at the end, so a long pack shows it is alive without filling
 * the log.  Bytes found already done (a resumed pack) are not work: they are
 * kept out of the rate, so a resume does not report absurd speeds.
 */
#include "progress.h"
#include "util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static cku_progress_mode g_mode = CKU_PROGRESS_AUTO;

struct cku_progress {
    pthread_mutex_t lock; /* protects done, skipped and last */
    const char *what;
    uint64_t total, done, skipped; /* done includes skipped */
    double start, last;
    cku_progress_mode mode; /* BAR, PLAIN or NONE */
};

void cku_progress_set_mode(cku_progress_mode m) { g_mode = m; }

/* Columns of the terminal on stderr, else $COLUMNS, else 0 (unknown). */
static int term_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *c = getenv("COLUMNS");
    int n = c ? atoi(c) : 0;
    return n > 0 && n < 10000 ? n : 0;
}

/* A terminal that can redraw a line: not TERM=dumb (nor unset). */
static int term_smart(void)
{
    const char *t = getenv("TERM");
    return t && *t && strcmp(t, "dumb") != 0;
}

int cku_progress_parse(const char *s)
{
    static const char *names[] = {"auto", "bar", "plain", "none"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

cku_progress *cku_progress_new(const char *what, uint64_t total)
{
    cku_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->what = what;
    p->total = total;
    p->start = p->last = cku_now();
    p->mode = g_mode != CKU_PROGRESS_AUTO                           ? g_mode
              : isatty(STDERR_FILENO) && term_smart() && term_width() ? CKU_PROGRESS_BAR
                                                                       : CKU_PROGRESS_PLAIN;
    if (p->mode == CKU_PROGRESS_PLAIN) {
        char t[16];
        fprintf(stderr, "%s: %s to do\n", what, cku_human(total, t));
    }
    return p;
}

char *cku_human_rate(uint64_t bytes, double secs, char *out)
{
    char h[16];
    if (bytes == 0) /* nothing done (a resumed pack with nothing left): however short the time */
        snprintf(out, 24, "0 B/s");
    else if (secs < 1e-3)
        snprintf(out, 24, "-");
    else /* a rate past 2^64 (sizes from a damaged manifest) would not convert */
        snprintf(out, 24, "%s/s", cku_human((double)bytes / secs < 1e19 ? (uint64_t)((double)bytes / secs)
                                                                          : (uint64_t)1e19, h));
    return out;
}

/* The rate and ETA of the work done so far (skipped bytes left out). */
static void progress_print(cku_progress *p, double now, int final)
{
    double el = now - p->start;
    uint64_t worked = p->done - p->skipped;
    double rate = el > 0 ? worked / el : 0;
    double eta = rate > 0 && p->total > p->done ? (p->total - p->done) / rate : 0;
    char d[16], t[16], r[24], e[16];
    cku_human(p->done, d);
    cku_human(p->total, t);
    cku_human_rate(worked, el, r);
    if (eta < 1e8) /* minutes:seconds; past 3 years (a damaged manifest's sizes) it would not fit an int */
        snprintf(e, sizeof e, "%d:%02d", (int)eta / 60, (int)eta % 60);
    else
        snprintf(e, sizeof e, "-");
    int pct = p->total ? (int)(100.0 * (double)p->done / (double)p->total) : 100;
    if (p->mode == CKU_PROGRESS_PLAIN) {
        fprintf(stderr, "%s: %s of %s (%d%%), %s%s%s\n", p->what, d, t, pct, r, final ? "" : ", ETA ",
                final ? "" : e);
        return;
    }
    /* the line fits in the terminal less one column (a full last column
     * wraps on some terminals): info first, the bar from what is left */
    int cols = term_width() ? term_width() - 1 : 79;
    char info[160], line[256], bar[48];
    int room = 0;
    for (int keep = 3; keep >= 0; keep--) { /* ETA, then the rate, then the total go before the bar */
        snprintf(info, sizeof info, " %3d%% %s%s%s%s%s%s%s", pct, d, keep >= 1 ? " / " : "", keep >= 1 ? t : "",
                 keep >= 2 ? "  " : "", keep >= 2 ? r : "", keep >= 3 ? "  ETA " : "", keep >= 3 ? e : "");
        room = cols - (int)strlen(p->what) - (int)strlen(info) - 3; /* " [" "]" */
        if (room >= 10)
            break;
    }
    int width = room > 40 ? 40 : room;
    if (width >= 10) {
        int fill = p->total ? (int)(width * (double)p->done / (double)p->total) : width;
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        snprintf(line, sizeof line, "%s [%s]%s", p->what, bar, info);
    } else {
        snprintf(line, sizeof line, "%s%s", p->what, info);
    }
    if (cols > 0 && (int)strlen(line) > cols)
        line[cols] = 0;
    /* \033[K clears what a longer earlier line left; a dumb terminal (an
     * explicit --progress=bar) gets spaces instead */
    if (term_smart())
        fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
    else
        fprintf(stderr, "\r%-*s%s", cols, line, final ? "\n" : "");
}

static void progress_count(cku_progress *p, uint64_t bytes, int skipped)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->done += bytes;
    if (skipped)
        p->skipped += bytes;
    double now = cku_now();
    double every = p->mode == CKU_PROGRESS_BAR ? 0.2 : CKU_PROGRESS_EVERY;
    if (p->mode != CKU_PROGRESS_NONE && now - p->last > every) {
        p->last = now;
        progress_print(p, now, 0);
    }
    pthread_mutex_unlock(&p->lock);
}

void cku_progress_add(cku_progress *p, uint64_t bytes) { progress_count(p, bytes, 0); }
void cku_progress_skip(cku_progress *p, uint64_t bytes) { progress_count(p, bytes, 1); }

double cku_progress_seconds(const cku_progress *p) { return p ? cku_now() - p->start : 0; }

uint64_t cku_progress_worked(cku_progress *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    uint64_t w = p->done - p->skipped;
    pthread_mutex_unlock(&p->lock);
    return w;
}

void cku_progress_done(cku_progress *p)
{
    if (!p)
        return;
    if (p->mode != CKU_PROGRESS_NONE)
        progress_print(p, cku_now(), 1);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
