/* Progress of long runs (training, evaluation, benchmarks, predicting many images): on a terminal one line redrawn
 * in place with the rate and the ETA; into a pipe or a file plain periodic lines, never a carriage return. */
#ifndef VITC_PROGRESS_H
#define VITC_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

/* The state of one progress display (a value owned by the caller; no global state). */
typedef struct vt_progress {
    FILE *f;            /* where lines go; NULL: silent */
    int tty;            /* 1: f is a terminal (one line redrawn in place) */
    const char *label;  /* e.g. "predict" */
    const char *unit;   /* e.g. "img" */
    int64_t total;      /* units of the whole run (> 0) */
    int64_t every;      /* plain lines: one each `every` units */
    int64_t next;       /* plain lines: the next line is due at this many units */
    int64_t units;      /* units per reported step, for the rate (1 unless set) */
    double t0, last;    /* start time and time of the last line (seconds, monotonic clock) */
    int drawn;          /* terminal: a line is shown and not yet ended */
} vt_progress;

/* Starts a display of `total` steps on f (NULL: silent). On a terminal the line is redrawn at most 5 times a
 * second; otherwise a plain line is written each `every` steps (0: each tenth of total) and at the last step. */
void vt_progress_start(vt_progress *p, FILE *f, const char *label, const char *unit, int64_t total, int64_t every);

/* 1 when a line for `done` steps is due (see vt_progress_start); always 0 when silent. */
int vt_progress_due(const vt_progress *p, int64_t done);

/* Writes the line for `done` steps: text (NULL: "label done/total (pct%)  rate unit/s") followed by the ETA;
 * on a terminal it replaces the previous line. */
void vt_progress_show(vt_progress *p, int64_t done, const char *text);

/* Writes the default line for `done` steps when one is due. */
void vt_progress_update(vt_progress *p, int64_t done);

/* Ends the display: a line still shown on a terminal is erased, so that ordinary output follows on a clean line. */
void vt_progress_end(vt_progress *p);

#endif
