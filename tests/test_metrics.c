/* metrics.csv rows and the gnuplot curves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "vitc/metrics.h"

static int have_gnuplot(void) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char *copy = strdup(path), *save = NULL;
    int found = 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char f[1024];
        snprintf(f, sizeof f, "%s/gnuplot", d[0] ? d : ".");
        found = access(f, X_OK) == 0;
    }
    free(copy);
    return found;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc((size_t)n + 1, 1);
    size_t r = fread(b, 1, (size_t)n, f);
    b[r] = '\0';
    fclose(f);
    return b;
}

static void rm(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
}

void test_metrics(vt_test *T) {
    char dir[] = "/tmp/vitc_metrics_XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    char csv[1024], png[1024], gp[1024];
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    snprintf(png, sizeof png, "%s/curves.png", dir);
    snprintf(gp, sizeof gp, "%s/curves.gp", dir);
    vt_err e = {0};

    /* plotting without metrics fails clearly */
    T_CHECK(T, vt_plot_curves(dir, &e) == -1 && strstr(e.msg, "metrics.csv"), "no csv: %s", e.msg);

    /* rows: header once, NaN as empty fields */
    for (int ep = 1; ep <= 3; ep++) {
        vt_metrics_row r = {ep, ep * 100, 2.0 / ep, 0.3 * ep, ep == 2 ? NAN : 2.2 / ep, ep == 2 ? NAN : 0.28 * ep,
                            1e-3 / ep, 1234.5, 10.25 * ep, ep == 2 ? NAN : 0.3 + 0.2 * ep};
        vt_clearerr(&e);
        T_CHECK(T, vt_metrics_append(dir, &r, &e) == 0, "append %d: %s", ep, e.msg);
    }
    /* a resumed run's clock continues from the last row's seconds (column 9, not img/s beside it) */
    T_CHECK(T, vt_metrics_last_seconds(dir) == 30.75, "last seconds %g, want 30.75", vt_metrics_last_seconds(dir));
    char *text = slurp(csv);
    const char *want = VT_METRICS_HEADER "\n"
                                         "1,100,2,0.3,2.2,0.28,0.001,1234.5,10.25,0.5\n"
                                         "2,200,1,0.6,,,0.0005,1234.5,20.5,\n"
                                         "3,300,0.666666667,0.9,0.733333333,0.84,0.000333333333,1234.5,30.75,0.9\n";
    T_CHECK(T, text && strcmp(text, want) == 0, "metrics.csv is\n%s\nwant\n%s", text ? text : "(none)", want);
    free(text);

    /* truncation keeps the header and the rows up to an epoch, and leaves no temp file */
    vt_clearerr(&e);
    T_CHECK(T, vt_metrics_truncate(dir, 2, &e) == 0, "truncate: %s", e.msg);
    text = slurp(csv);
    const char *want2 = VT_METRICS_HEADER "\n"
                                          "1,100,2,0.3,2.2,0.28,0.001,1234.5,10.25,0.5\n"
                                          "2,200,1,0.6,,,0.0005,1234.5,20.5,\n";
    T_CHECK(T, text && strcmp(text, want2) == 0, "after truncation to epoch 2 metrics.csv is\n%s", text ? text : "");
    free(text);
    vt_metrics_row r3 = {3, 300, 2.0 / 3, 0.9, 2.2 / 3, 0.84, 1e-3 / 3, 1234.5, 30.75, 0.9};
    vt_clearerr(&e);
    T_CHECK(T, vt_metrics_append(dir, &r3, &e) == 0, "append after truncation: %s", e.msg);
    text = slurp(csv);
    T_CHECK(T, text && strcmp(text, want) == 0, "re-appended metrics.csv is\n%s", text ? text : "(none)");
    free(text);
    char tmpname[1100];
    snprintf(tmpname, sizeof tmpname, "%s.tmp.%ld", csv, (long)getpid());
    T_CHECK(T, access(tmpname, F_OK) != 0, "truncation left %s", tmpname);
    char nodir[1100];
    snprintf(nodir, sizeof nodir, "%s/none", dir);
    vt_clearerr(&e);
    T_CHECK(T, vt_metrics_truncate(nodir, 0, &e) == 0, "truncating a missing metrics.csv: %s", e.msg);

    /* the curves */
    if (have_gnuplot()) {
        vt_clearerr(&e);
        int rc = vt_plot_curves(dir, &e);
        T_CHECK(T, rc == 0, "plot: %s", e.msg);
        unsigned char sig[8] = {0};
        FILE *f = fopen(png, "rb");
        size_t n = f ? fread(sig, 1, 8, f) : 0;
        if (f) fclose(f);
        T_CHECK(T, n == 8 && memcmp(sig, "\x89PNG\r\n\x1a\n", 8) == 0, "curves.png lacks the PNG signature");
        struct stat st;
        T_CHECK(T, stat(png, &st) == 0 && st.st_size > 2000, "curves.png too small");
        char *script = slurp(gp);
        T_CHECK(T, script && strstr(script, "$test_acc << EOD\n# epoch value\n1 28\n3 84\nEOD") && strstr(script, "multiplot"),
                "curves.gp data block");
        /* every series from its own column (accuracies in %, losses as they are; NaN rows left out) */
        T_CHECK(T, script && strstr(script, "$train_loss << EOD\n# epoch value\n1 2\n2 1\n3 0.666666667\nEOD") &&
                       strstr(script, "$train_acc << EOD\n# epoch value\n1 30\n2 60\n3 90\nEOD") &&
                       strstr(script, "$test_loss << EOD\n# epoch value\n1 2.2\n3 0.733333333\nEOD"),
                "curves.gp train_loss, train_acc and test_loss blocks:\n%s", script ? script : "(none)");
        free(script);

        /* gnuplot missing: a clear error, script still written */
        const char *old = getenv("PATH");
        char *saved = old ? strdup(old) : NULL;
        setenv("PATH", "/nonexistent-vitc-path", 1);
        vt_clearerr(&e);
        rc = vt_plot_curves(dir, &e);
        if (saved) setenv("PATH", saved, 1);
        else unsetenv("PATH");
        free(saved);
        T_CHECK(T, rc == -1 && strstr(e.msg, "gnuplot not found") && strstr(e.msg, "gnuplot-nox"),
                "missing gnuplot: %s", e.msg);
        T_CHECK(T, access(gp, R_OK) == 0, "curves.gp not written");

        /* gnuplot exits 0 when its write fails (a full disk): a PNG cut short is refused, the old curves.png kept */
        char bin[600], fake[700], saved_path[600];
        snprintf(saved_path, sizeof saved_path, "%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
        snprintf(bin, sizeof bin, "%s/bin", dir);
        snprintf(fake, sizeof fake, "%s/gnuplot", bin);
        T_CHECK(T, mkdir(bin, 0700) == 0, "mkdir %s", bin);
        FILE *sf = fopen(fake, "w");
        if (sf) {
            fprintf(sf, "#!/bin/sh\nPATH='%s' gnuplot \"$@\" || exit 1\nfor f in .vitc-*-curves; do truncate -s 1000 "
                    "\"$f\"; done\n", saved_path);
            fclose(sf);
        }
        chmod(fake, 0700);
        struct stat before;
        stat(png, &before);
        char path_env[1300];
        snprintf(path_env, sizeof path_env, "%s:%s", bin, saved_path);
        setenv("PATH", path_env, 1);
        vt_clearerr(&e);
        rc = vt_plot_curves(dir, &e);
        setenv("PATH", saved_path, 1);
        T_CHECK(T, rc == -1 && strstr(e.msg, "curves.png is cut short"), "a PNG cut short: rc %d, %s", rc, e.msg);
        T_CHECK(T, stat(png, &st) == 0 && st.st_size == before.st_size && st.st_ino == before.st_ino,
                "the old curves.png was replaced by one cut short");
        remove(fake);
        rmdir(bin);
    } else {
        fprintf(stderr, "note [metrics]: gnuplot not on PATH, PNG check skipped\n");
        vt_clearerr(&e);
        T_CHECK(T, vt_plot_curves(dir, &e) == -1 && strstr(e.msg, "gnuplot"), "missing gnuplot: %s", e.msg);
    }

    /* a foreign header is refused, not appended to */
    FILE *f = fopen(csv, "w");
    fputs("a,b,c\n1,2,3\n", f);
    fclose(f);
    vt_metrics_row r = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    vt_clearerr(&e);
    T_CHECK(T, vt_metrics_append(dir, &r, &e) == -1 && strstr(e.msg, "header"), "foreign header: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_plot_curves(dir, &e) == -1 && strstr(e.msg, "header"), "plot foreign header: %s", e.msg);

    /* a run from before test_acc5: resuming (truncate) rewrites it with the new header and an empty test_acc5 */
    f = fopen(csv, "w");
    fprintf(f, "%s\n1,100,2,0.3,2.2,0.28,0.001,1234.5,10.25\n2,200,1,0.6,,,0.0005,1234.5,20.5\n",
            VT_METRICS_HEADER_V1);
    fclose(f);
    vt_clearerr(&e);
    T_CHECK(T, vt_metrics_truncate(dir, 1, &e) == 0, "truncate a legacy file: %s", e.msg);
    char *text3 = slurp(csv);
    T_CHECK(T, text3 && strcmp(text3, VT_METRICS_HEADER "\n1,100,2,0.3,2.2,0.28,0.001,1234.5,10.25,\n") == 0,
            "legacy metrics.csv became\n%s", text3 ? text3 : "(none)");
    free(text3);

    /* malformed row */
    f = fopen(csv, "w");
    fprintf(f, "%s\n1,2,3\n", VT_METRICS_HEADER);
    fclose(f);
    vt_clearerr(&e);
    T_CHECK(T, vt_plot_curves(dir, &e) == -1 && strstr(e.msg, ":2: malformed"), "malformed row: %s", e.msg);

    rm(dir, "metrics.csv");
    rm(dir, "curves.png");
    rm(dir, "curves.gp");
    T_CHECK(T, rmdir(dir) == 0, "temp dir %s not empty", dir);
}
