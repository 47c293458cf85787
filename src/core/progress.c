/* Progress lines: redrawn in place on a terminal ("\r", text, erase to the end of the line), plain lines otherwise. */
#include "vitc/progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void vt_progress_start(vt_progress *p, FILE *f, const char *label, const char *unit, int64_t total, int64_t every) {
    p->f = total > 0 ? f : NULL;
    p->tty = f && isatty(fileno(f));
    p->label = label ? label : "";
    p->unit = unit ? unit : "";
    p->total = total;
    p->every = every > 0 ? every : (total >= 10 ? total / 10 : 1);
    p->next = p->every;
    p->units = 1;
    p->t0 = now_s();
    p->last = -1e30;
    p->drawn = 0;
}

int vt_progress_due(const vt_progress *p, int64_t done) {
    if (!p->f || done < 1) return 0;
    if (p->tty) return done >= p->total || now_s() - p->last >= 0.2;
    return done >= p->next || (done >= p->total && p->next != INT64_MAX); /* the last step once */
}

/* Writes "m:ss" (or "h:mm:ss") of s seconds into buf. */
static void clock_str(double s, char *buf, size_t n) {
    long t = s < 0 ? 0 : s > 3.6e8 ? 360000000L : (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void vt_progress_show(vt_progress *p, int64_t done, const char *text) {
    if (!p->f) return;
    const double t = now_s(), el = t - p->t0;
    char line[512], eta[32];
    if (!text) {
        const double rate = el > 0 ? (double)(done * p->units) / el : 0.0;
        snprintf(line, sizeof line, "%s %lld/%lld (%3.0f%%)  %.1f %s/s", p->label, (long long)done,
                 (long long)p->total, 100.0 * (double)done / (double)p->total, rate, p->unit);
        text = line;
    }
    if (done >= p->total)
        clock_str(el, eta, sizeof eta);
    else
        clock_str(done > 0 ? el / (double)done * (double)(p->total - done) : 0.0, eta, sizeof eta);
    if (p->tty) {
        fprintf(p->f, "\r%s  %s %s\033[K", text, done >= p->total ? "took" : "ETA", eta);
        p->drawn = 1;
    } else {
        fprintf(p->f, "%s  %s %s\n", text, done >= p->total ? "took" : "ETA", eta);
        while (p->next <= done) p->next += p->every;
        if (done >= p->total) p->next = INT64_MAX; /* the last line is written once */
    }
    fflush(p->f);
    p->last = t;
}

void vt_progress_update(vt_progress *p, int64_t done) {
    if (vt_progress_due(p, done)) vt_progress_show(p, done, NULL);
}

void vt_progress_end(vt_progress *p) {
    if (p->f && p->tty && p->drawn) {
        fprintf(p->f, "\r\033[K");
        fflush(p->f);
    }
    p->drawn = 0;
}
