/*
 * progress.h — the progress line of the commands.
 */
#ifndef CKU_PROGRESS_H
#define CKU_PROGRESS_H

#include <stdint.h>

/* Progress on a terminal (stderr): bytes done of total, rate, ETA.  Silent
 * when stderr is not a terminal.  Thread-safe. */
typedef struct cku_progress cku_progress;
cku_progress *cku_progress_new(const char *what, uint64_t total);
void cku_progress_add(cku_progress *p, uint64_t bytes);
void cku_progress_done(cku_progress *p); /* prints the final line; frees */

/* bytes for a person: "812 B", "3.40 MB", "1.21 GB" (powers of 1000, three
 * significant digits).  out: at least 16 chars; @return out. */
char *cku_human(uint64_t bytes, char *out);

#endif
