/* metrics.csv writer and the gnuplot curves (the script embeds the data, so it can be re-run by hand). */
#include "vitc/metrics.h"

#include "vitc/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define NFIELDS 10

static int join(char *out, size_t len, const char *dir, const char *file, vt_err *e) {
    int k = snprintf(out, len, "%s/%s", dir, file);
    if (k < 0 || (size_t)k >= len) return vt_seterr(e, "run directory path too long: %s", dir);
    return 0;
}

static void put_num(FILE *f, double v, int last) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    fputc(last ? '\n' : ',', f);
}

static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
}

/* Copies the rows of the existing metrics.csv at path into o (the header first), keeping rows whose epoch is at most
 * max_epoch; a missing file writes just the header, a foreign header is an error. */
static int copy_rows(const char *path, FILE *o, double max_epoch, vt_err *e) {
    FILE *f = fopen(path, "r");
    if (!f && errno != ENOENT) return vt_seterr(e, "cannot read %s: %s", path, strerror(errno));
    fprintf(o, "%s\n", VT_METRICS_HEADER);
    char line[512];
    int first = 1, rc = 0, legacy = 0;
    while (f && rc == 0 && fgets(line, sizeof line, f)) {
        if (first) {
            chomp(line);
            legacy = strcmp(line, VT_METRICS_HEADER_V1) == 0; /* before test_acc5: rows get an empty last field */
            if (strcmp(line, VT_METRICS_HEADER) != 0 && !legacy)
                rc = vt_seterr(e, "%s: existing header \"%s\" differs from \"%s\" (not a vitc run's metrics)", path,
                               line, VT_METRICS_HEADER);
            first = 0;
            continue;
        }
        char *end;
        const double epoch = strtod(line, &end);
        if (end == line || epoch > max_epoch) continue;
        if (legacy) {
            chomp(line);
            fprintf(o, "%s,\n", line);
        } else {
            fputs(line, o);
        }
    }
    if (f && ferror(f) && rc == 0) rc = vt_seterr(e, "cannot read %s", path);
    if (f) fclose(f);
    return rc;
}

int vt_metrics_append(const char *run_dir, const vt_metrics_row *r, vt_err *e) {
    if (!run_dir || !r) return vt_seterr(e, "vt_metrics_append: NULL argument");
    char path[4096];
    if (join(path, sizeof path, run_dir, "metrics.csv", e)) return -1;
    vt_out o;
    if (vt_out_open(&o, path, e)) return -1;
    if (copy_rows(path, o.f, INFINITY, e)) {
        vt_out_abort(&o);
        return -1;
    }
    FILE *f = o.f;
    put_num(f, r->epoch, 0);
    fprintf(f, "%" PRId64 ",", r->step);
    put_num(f, r->train_loss, 0);
    put_num(f, r->train_acc, 0);
    put_num(f, r->test_loss, 0);
    put_num(f, r->test_acc, 0);
    put_num(f, r->lr, 0);
    put_num(f, r->img_per_s, 0);
    put_num(f, r->seconds, 0);
    put_num(f, r->test_acc5, 1);
    return vt_out_commit(&o, e);
}

/* 0 when metrics.csv at path already is what copy_rows would write (the current header, every row's epoch at most
 * max_epoch), else 1 (also when it cannot be read: copy_rows says why). */
static int needs_rewrite(const char *path, double max_epoch) {
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    char line[512];
    int first = 1, rewrite = 0;
    while (!rewrite && fgets(line, sizeof line, f)) {
        if (first) {
            chomp(line);
            rewrite = strcmp(line, VT_METRICS_HEADER) != 0;
            first = 0;
            continue;
        }
        char *end;
        const double epoch = strtod(line, &end);
        rewrite = end == line || epoch > max_epoch;
    }
    rewrite |= ferror(f) != 0;
    fclose(f);
    return rewrite;
}

/* Writes dst atomically with the rows of src (a metrics.csv, maybe dst itself) whose epoch is at most max_epoch. */
static int write_rows(const char *src, const char *dst, double max_epoch, vt_err *e) {
    vt_out o;
    if (vt_out_open(&o, dst, e)) return -1;
    if (copy_rows(src, o.f, max_epoch, e)) {
        vt_out_abort(&o);
        return -1;
    }
    return vt_out_commit(&o, e);
}

int vt_metrics_truncate(const char *run_dir, double max_epoch, vt_err *e) {
    if (!run_dir) return vt_seterr(e, "vt_metrics_truncate: NULL argument");
    char path[4096];
    if (join(path, sizeof path, run_dir, "metrics.csv", e)) return -1;
    if (access(path, F_OK) != 0 || !needs_rewrite(path, max_epoch)) return 0; /* nothing to truncate */
    return write_rows(path, path, max_epoch, e);
}

static int parse_row(char *line, double *v);

int vt_metrics_copy(const char *from_dir, const char *run_dir, double max_epoch, vt_err *e) {
    char src[4096], dst[4096];
    if (join(src, sizeof src, from_dir, "metrics.csv", e) || join(dst, sizeof dst, run_dir, "metrics.csv", e))
        return -1;
    return access(src, F_OK) != 0 ? 0 : write_rows(src, dst, max_epoch, e);
}

double vt_metrics_last_seconds(const char *run_dir) {
    char path[4096], line[512];
    vt_err e = {0};
    if (join(path, sizeof path, run_dir, "metrics.csv", &e)) return 0.0;
    FILE *f = fopen(path, "r");
    double last = 0.0;
    for (int first = 1; f && fgets(line, sizeof line, f); first = 0) {
        double v[NFIELDS];
        chomp(line);
        if (!first && parse_row(line, v) == 0 && isfinite(v[8])) last = v[8]; /* seconds */
    }
    if (f) fclose(f);
    return last;
}

/* Splits a CSV line into exactly NFIELDS numbers (NaN for empty fields); -1 on a malformed line. */
static int parse_row(char *line, double *v) {
    char *p = line;
    for (int i = 0; i < NFIELDS; i++) {
        char *end = strchr(p, ',');
        if ((end == NULL) != (i == NFIELDS - 1)) return -1;
        if (end) *end = '\0';
        if (*p == '\0') {
            v[i] = NAN;
        } else {
            char *q;
            v[i] = strtod(p, &q);
            if (q == p || *q != '\0') return -1;
        }
        p = end ? end + 1 : p;
    }
    return 0;
}

/* One datablock of (epoch, value*scale) for the rows where column col is finite; returns the point count. */
static int write_block(FILE *g, const char *name, double *rows, int nrows, int col, double scale) {
    int k = 0;
    fprintf(g, "$%s << EOD\n# epoch value\n", name);
    for (int i = 0; i < nrows; i++) {
        const double *r = rows + (size_t)i * NFIELDS;
        if (isfinite(r[0]) && isfinite(r[col])) {
            fprintf(g, "%.9g %.9g\n", r[0], r[col] * scale);
            k++;
        }
    }
    fprintf(g, "EOD\n");
    return k;
}

/* Writes one panel's plot command over the non-empty series. */
static void write_panel(FILE *g, const char *title, const char *ylabel, const char *key, const char *a, int na,
                        const char *b, int nb) {
    fprintf(g, "set title \"%s\"\nset ylabel \"%s\"\nset key %s\n", title, ylabel, key);
    if (na == 0 && nb == 0) {
        fprintf(g, "set yrange [0:1]\nset label 1 \"no data\" at graph 0.5, graph 0.5 center\nplot -1 notitle\n"
                   "unset label 1\nset autoscale y\n");
        return;
    }
    fprintf(g, "plot ");
    if (na) fprintf(g, "$%s using 1:2 with linespoints lw 2 pt 7 ps 0.6 title \"train\"%s", a, nb ? ", " : "");
    if (nb) fprintf(g, "$%s using 1:2 with linespoints lw 2 pt 5 ps 0.6 title \"test\"", b);
    fprintf(g, "\n");
}

/* Reads metrics.csv into rows (NFIELDS doubles per row). */
static int read_metrics(const char *path, double **rows_out, int *nrows_out, vt_err *e) {
    FILE *f = fopen(path, "r");
    if (!f) return vt_seterr(e, "cannot open %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    double *rows = NULL;
    int n = 0, rcap = 0, lineno = 0, rc = -1;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        chomp(line);
        if (lineno == 1) {
            if (strcmp(line, VT_METRICS_HEADER) != 0) {
                vt_seterr(e, "%s: header \"%s\" differs from \"%s\"", path, line, VT_METRICS_HEADER);
                goto done;
            }
            continue;
        }
        if (line[0] == '\0') continue;
        if (n == rcap) {
            int nc = rcap ? 2 * rcap : 64;
            double *nr = realloc(rows, (size_t)nc * NFIELDS * sizeof *nr);
            if (!nr) {
                vt_seterr_code(e, VT_E_NOMEM, "out of memory reading %s", path);
                goto done;
            }
            rows = nr;
            rcap = nc;
        }
        if (parse_row(line, rows + (size_t)n * NFIELDS)) {
            vt_seterr(e, "%s:%d: malformed row (expected %d comma-separated numbers)", path, lineno, NFIELDS);
            goto done;
        }
        n++;
    }
    if (lineno == 0) {
        vt_seterr(e, "%s is empty", path);
        goto done;
    }
    *rows_out = rows;
    *nrows_out = n;
    rows = NULL;
    rc = 0;
done:
    free(line);
    free(rows);
    fclose(f);
    return rc;
}

/* Runs `gnuplot -e "out='TMP'" curves.gp` inside run_dir (no shell, so no quoting issues; TMP the picture's
 * temporary name, renamed over curves.png by the caller); collects its output for errors. */
static int run_gnuplot(const char *run_dir, const char *tmp_png, vt_err *e) {
    char set_out[128];
    snprintf(set_out, sizeof set_out, "out='%s'", tmp_png);
    int fds[2];
    if (pipe(fds) != 0) return vt_seterr(e, "cannot run gnuplot: pipe: %s", strerror(errno));
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return vt_seterr(e, "cannot run gnuplot: fork: %s", strerror(errno));
    }
    if (pid == 0) { /* child: only async-signal-safe calls until exec */
        static const char chdir_fail[] = "\001chdir";
        static const char exec_fail[] = "\001exec";
        /* a terminal's Ctrl-C reaches the whole process group: vitc's training stops after the epoch's files, the
         * curves among them, so gnuplot ignores it (vitc's handler, inherited, would run here until the exec) */
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigemptyset(&ign.sa_mask);
        sigaction(SIGINT, &ign, NULL);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        if (chdir(run_dir) != 0) {
            ssize_t w = write(2, chdir_fail, sizeof chdir_fail - 1);
            (void)w;
            _exit(126);
        }
        char *const argv[] = {"gnuplot", "-e", set_out, "curves.gp", NULL};
        execvp("gnuplot", argv);
        ssize_t w = write(2, exec_fail, sizeof exec_fail - 1);
        (void)w;
        _exit(127);
    }
    close(fds[1]);
    char out[600];
    size_t got = 0;
    for (;;) {
        char buf[4096];
        ssize_t r = read(fds[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t take = (size_t)r < sizeof out - 1 - got ? (size_t)r : sizeof out - 1 - got;
        memcpy(out + got, buf, take);
        got += take;
    }
    out[got] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return vt_seterr(e, "cannot run gnuplot: waitpid: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && strstr(out, "\001exec"))
        return vt_seterr(e,
                         "gnuplot not found on PATH (install the Debian package gnuplot-nox); %s/curves.gp was "
                         "written, run `gnuplot curves.gp` there to make curves.png",
                         run_dir);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 126 && strstr(out, "\001chdir"))
        return vt_seterr(e, "cannot run gnuplot: cannot enter %s", run_dir);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        for (char *p = out; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        if (WIFEXITED(status))
            return vt_seterr(e, "gnuplot failed on %s/curves.gp (exit %d): %s", run_dir, WEXITSTATUS(status), out);
        return vt_seterr(e, "gnuplot was killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    return 0;
}

/* 1 when the PNG file at path ends with its IEND chunk (length 0, type, CRC): written to its end. */
static int png_complete(const char *path) {
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
    unsigned char tail[12];
    FILE *f = fopen(path, "rb");
    const int ok = f && fseek(f, -12, SEEK_END) == 0 && fread(tail, 1, 12, f) == 12 && memcmp(tail, iend, 12) == 0;
    if (f) fclose(f);
    return ok;
}

int vt_plot_curves(const char *run_dir, vt_err *e) {
    if (!run_dir) return vt_seterr(e, "vt_plot_curves: NULL run directory");
    char csv[4096], gp[4096], png[4096];
    if (join(csv, sizeof csv, run_dir, "metrics.csv", e) || join(gp, sizeof gp, run_dir, "curves.gp", e) ||
        join(png, sizeof png, run_dir, "curves.png", e))
        return -1;
    double *rows = NULL;
    int n = 0;
    if (read_metrics(csv, &rows, &n, e)) return -1;

    vt_out go; /* a temporary file renamed over curves.gp: a special file there is refused, a crash keeps the old */
    if (vt_out_open(&go, gp, e)) {
        free(rows);
        return -1;
    }
    FILE *g = go.f;
    fprintf(g, "# Training curves written by vitc from metrics.csv; run `gnuplot curves.gp` in this folder.\n");
    int ntl = write_block(g, "train_loss", rows, n, 2, 1.0);
    int nta = write_block(g, "train_acc", rows, n, 3, 100.0);
    int nvl = write_block(g, "test_loss", rows, n, 4, 1.0);
    int nva = write_block(g, "test_acc", rows, n, 5, 100.0);
    free(rows);
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
               "    set terminal pngcairo size 1200,480 font \",10\"\n"
               "} else {\n"
               "    set terminal png size 1200,480\n"
               "}\n"
               "if (!exists(\"out\")) out = \"curves.png\"\n"
               "set output out\n"
               "set multiplot layout 1,2\n"
               "set grid\n"
               "set xlabel \"epoch\"\n");
    write_panel(g, "loss", "cross-entropy loss", "top right", "train_loss", ntl, "test_loss", nvl);
    write_panel(g, "accuracy", "accuracy (%)", "bottom right", "train_acc", nta, "test_acc", nva);
    fprintf(g, "unset multiplot\nunset output\n");
    if (vt_out_commit(&go, e)) return -1;
    if (ntl + nta + nvl + nva == 0) return vt_seterr(e, "%s has no rows to plot", csv);

    /* gnuplot draws into a temporary file of the run folder, renamed over curves.png once it is complete; its name
     * has the form of vt_out's (.vitc-HOST-PID-XXXXXX), so that a later run removes it when this one was killed before
     * the rename (vt_remove_stale_temps) */
    if (vt_output_check(png, NULL, 0, e)) return -1;
    char prefix[64], tmp_name[80], tmp[4096];
    vt_temp_prefix(prefix, sizeof prefix);
    snprintf(tmp_name, sizeof tmp_name, "%s-curves", prefix);
    if (join(tmp, sizeof tmp, run_dir, tmp_name, e)) return -1;
    int rc = run_gnuplot(run_dir, tmp_name, e);
    struct stat st;
    if (rc == 0 && (stat(tmp, &st) != 0 || st.st_size == 0))
        rc = vt_seterr(e, "gnuplot ran but did not produce %s", png);
    if (rc == 0 && !png_complete(tmp)) /* gnuplot exits 0 when its write fails (a full disk) */
        rc = vt_seterr(e, "gnuplot ran but its %s is cut short (a full disk?): the old one, if any, is kept", png);
    if (rc == 0 && rename(tmp, png) != 0)
        rc = vt_seterr(e, "cannot move the new %s into place: %s", png, strerror(errno));
    if (rc) remove(tmp);
    return rc;
}
