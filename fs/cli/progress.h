/*
 * progress.h — the progress report of pack, unpack and verify, and byte
 * counts for people.
 */
#ifndef CKU_PROGRESS_H
#define CKU_PROGRESS_H

#include <stdint.h>

#include "util.h"

/* How progress is shown on stderr (--progress=auto|bar|plain|none). */
typedef enum {
    CKU_PROGRESS_AUTO = 0, /* a bar on a terminal, plain lines otherwise */
    CKU_PROGRESS_BAR,      /* one line redrawn: bar, bytes, rate, ETA */
    CKU_PROGRESS_PLAIN,    /* a line at the start, every CKU_PROGRESS_EVERY s, and at the end */
    CKU_PROGRESS_NONE
} cku_progress_mode;

#define CKU_PROGRESS_EVERY 5.0 /* seconds between plain lines */

/* The mode of every progress report of this process (set once, by main). */
void cku_progress_set_mode(cku_progress_mode m);
/* "auto", "bar", "plain" or "none" -> mode; -1 for anything else. */
int cku_progress_parse(const char *s);

/* Bytes done of total, the rate and the ETA.  Thread-safe. */
typedef struct cku_progress cku_progress;
cku_progress *cku_progress_new(const char *what, uint64_t total);
void cku_progress_add(cku_progress *p, uint64_t bytes);
/* Bytes found already done (a resumed pack): they count as done but not
 * towards the rate, so the ETA and the rate stay those of the real work. */
void cku_progress_skip(cku_progress *p, uint64_t bytes);
/* Seconds since cku_progress_new, and bytes done through cku_progress_add. */
double cku_progress_seconds(const cku_progress *p);
uint64_t cku_progress_worked(cku_progress *p);
void cku_progress_done(cku_progress *p); /* prints the final line; frees */

/* cku_human (bytes for a person) is in util.h, shared with the daemon. */
/* bytes per second over secs for a person ("850 MB/s"); out: 24 chars. */
char *cku_human_rate(uint64_t bytes, double secs, char *out);

#endif
