/* Progress lines when the stream is not a terminal: one plain line each `every` steps (default: a tenth of the
 * run) and one at the last step, written once, each with the ETA (or the time taken at the end), never a carriage
 * return; silent without a stream. */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "vitc/error.h"
#include "vitc/progress.h"

/* Runs steps 1..total through vt_progress_update (each twice) on a temporary file; returns its text in buf. */
static void run(int64_t total, int64_t every, const char *text, char *buf, size_t n) {
    FILE *f = tmpfile();
    vt_progress p;
    vt_progress_start(&p, f, "work", "img", total, every);
    for (int64_t i = 1; i <= total; i++)
        for (int twice = 0; twice < 2; twice++) {
            if (!text)
                vt_progress_update(&p, i);
            else if (vt_progress_due(&p, i))
                vt_progress_show(&p, i, text);
        }
    vt_progress_end(&p);
    buf[0] = '\0';
    if (!f) return;
    rewind(f);
    const size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
}

static int count(const char *s, const char *what) {
    int c = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p++) c++;
    return c;
}

void test_progress(vt_test *T) {
    char buf[4096];
    run(25, 0, NULL, buf, sizeof buf); /* every 2 steps: 2, 4, ..., 24, then 25 */
    T_CHECK(T, count(buf, "\n") == 13 && !strchr(buf, '\r'), "%d lines: %s", count(buf, "\n"), buf);
    T_CHECK(T, strstr(buf, "work 2/25 (  8%)  ") && strstr(buf, " img/s  ETA ") &&
                   count(buf, "work 25/25 (100%)") == 1 && strstr(buf, "took "), "%s", buf);
    run(12, 5, "step", buf, sizeof buf); /* 5, 10, 12 with the caller's text */
    T_CHECK(T, count(buf, "\n") == 3 && count(buf, "step  ETA ") == 2 && count(buf, "step  took ") == 1, "%s", buf);
    run(1, 0, NULL, buf, sizeof buf);
    T_CHECK(T, count(buf, "\n") == 1 && strstr(buf, "work 1/1 (100%)"), "%s", buf);
    vt_progress p;
    vt_progress_start(&p, NULL, "x", "y", 10, 1);
    T_CHECK(T, !vt_progress_due(&p, 10), "silent without a stream");
    vt_progress_show(&p, 10, NULL);
    vt_progress_end(&p);
    vt_progress_start(&p, stdout, "x", "y", 0, 1);
    T_CHECK(T, !vt_progress_due(&p, 1), "silent for an empty run");
    /* vt_fputs_clean: control characters in a message (a file name's) shown escaped, UTF-8 text kept */
    FILE *f = tmpfile();
    T_CHECK(T, f != NULL, "tmpfile");
    if (!f) return;
    vt_fputs_clean(f, "a\nb\tc\033[31md\x7f\xc2\x9b\xc3\xa9\xe2\x82\xac.png");
    rewind(f);
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    T_CHECK(T, strcmp(buf, "a\\nb\\tc\\x1b[31md\\x7f\\u009b\xc3\xa9\xe2\x82\xac.png") == 0, "escaped: %s", buf);
}
