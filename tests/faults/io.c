/* Write failures in every file vitc writes (weights, checkpoints, metrics, curves, run records: all through vt_out,
 * written to a temporary file, fsync'ed and renamed over the target), made two ways:
 * - each call of the write path that can fail (mkstemp, fflush, fsync, fclose, rename, redirected here by the
 *   linker's --wrap) fails in turn, for every k the k-th, with the errno a full or failing disk gives;
 * - a file-size limit (RLIMIT_FSIZE with SIGXFSZ ignored: write(2) fails with EFBIG, as on a full disk) at sampled
 *   sizes, so that stdio's buffered writes fail at every stage of a file.
 * Checked: a weights save over an older file (vt_params_save) fails with VT_E_IO and a message naming the file (and
 * under the limit its cause, "File too large"), the older file is byte for byte unchanged and no temporary file is
 * left; a training run resumed for a second epoch either succeeds or fails with a message (the same cause under the
 * limit), leaves its run folder's files whole and no temporary file, and a resume
 * without the fault then ends with the weights, checkpoint and metrics rows of a run that never failed; so does a run
 * stopped mid-epoch as asked (its stop checkpoint's writes failing in turn). Built and run
 * under ASan + UBSan (the Makefile's build-asan/io_faults): no leak on those paths. Prints "N passed, N failed". */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "faults.h"
#include "test.h"
#include "vitc/fileio.h"
#include "vitc/metrics.h"
#include "vitc/safetensors.h"
#include "vitc/weights.h"

/* The fault: when armed, the armed-th wrapped call from now fails (counted from arm_at, over every thread). */
static _Atomic long armed, seen, fired;

static int fail_now(void) {
    const long a = armed;
    if (!a || ++seen != a) return 0;
    fired = 1;
    return 1;
}
static void arm_at(long k) {
    seen = 0;
    fired = 0;
    armed = k;
}

int __real_mkstemp(char *tmpl);
int __real_fflush(FILE *f);
int __real_fsync(int fd);
int __real_fclose(FILE *f);
int __real_rename(const char *a, const char *b);

/* A weights file rewritten in place while it loads: from the poisoned-th pread on (0: never), each read's first float
 * comes back NaN, as if another program had written it there between the loader's two passes. */
static _Atomic long preads, poisoned;
ssize_t __real_pread(int fd, void *buf, size_t n, off_t at);
ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t at) {
    const ssize_t r = __real_pread(fd, buf, n, at);
    const long k = ++preads;
    if (poisoned && k >= poisoned && r >= (ssize_t)sizeof(float)) {
        const float nan = NAN;
        memcpy(buf, &nan, sizeof nan);
    }
    return r;
}

int __wrap_mkstemp(char *tmpl) {
    if (!fail_now()) return __real_mkstemp(tmpl);
    errno = ENOSPC;
    return -1;
}
int __wrap_fflush(FILE *f) { /* the data stays in the stream's buffer, as after a refused write */
    if (!fail_now()) return __real_fflush(f);
    errno = ENOSPC;
    return EOF;
}
int __wrap_fsync(int fd) {
    if (!fail_now()) return __real_fsync(fd);
    errno = EIO;
    return -1;
}
int __wrap_fclose(FILE *f) { /* the stream is closed either way (C11 7.21.5.1) */
    const int rc = __real_fclose(f);
    if (!fail_now()) return rc;
    errno = EIO;
    return EOF;
}
int __wrap_rename(const char *a, const char *b) {
    if (!fail_now()) return __real_rename(a, b);
    errno = EIO;
    return -1;
}

/* A fault: the k-th wrapped call (limit 0), or writes past `limit` bytes of any file (k 0). */
typedef struct {
    long k;
    long long limit;
} fault;

static void fault_on(fault f) {
    if (f.limit > 0 || f.k == 0) {
        struct rlimit r;
        getrlimit(RLIMIT_FSIZE, &r);
        r.rlim_cur = (rlim_t)f.limit;
        setrlimit(RLIMIT_FSIZE, &r);
    }
    arm_at(f.k);
}

static void fault_off(void) {
    armed = 0;
    struct rlimit r;
    getrlimit(RLIMIT_FSIZE, &r);
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_FSIZE, &r);
}

static void describe(fault f, char *buf, size_t n) {
    if (f.k)
        snprintf(buf, n, "call %ld failing", f.k);
    else
        snprintf(buf, n, "files limited to %lld bytes", f.limit);
}

/* The whole file at path (NULL when it cannot be read); its size in *n. */
static unsigned char *slurp(const char *path, size_t *n) {
    unsigned char *b;
    vt_err e = {0};
    return vt_read_file(path, (size_t)1 << 30, &b, n, &e) == 0 ? b : NULL;
}

/* Files of dir named as a writer's temporary (".vitc-..."). */
static int temps(const char *dir) {
    DIR *d = opendir(dir);
    int k = 0;
    for (struct dirent *de; d && (de = readdir(d));) k += strncmp(de->d_name, ".vitc-", 6) == 0;
    if (d) closedir(d);
    return k;
}

/* Fault sizes for a file of `size` bytes: the first bytes, the header length's edges, stdio's 4 KiB buffer's, then
 * evenly spread below size. */
enum { SIZES = 40 };
static long long size_at(int i, long long size) {
    static const long long edges[] = {1, 7, 8, 9, 4095, 4096, 4097, 8193};
    const int ne = (int)(sizeof edges / sizeof edges[0]);
    if (i < ne) return edges[i] < size ? edges[i] : size - 1;
    return 1 + (size - 2) * (i - ne) / (SIZES - ne);
}

/* Writes n bytes of b to path (plainly: the test's own files); 1 when done. */
static int put(const char *path, const unsigned char *b, size_t n) {
    FILE *o = fopen(path, "wb");
    int ok = o && fwrite(b, 1, n, o) == n;
    if (o) ok = fclose(o) == 0 && ok;
    return ok;
}

/* vt_params_save of new weights over an older file w, at each wrapped call failing and at each file size: either -1
 * with VT_E_IO, a message naming w, w unchanged; or 0 and w the new file (a failure the writer tolerates: the
 * folder's fsync, and the limit of the file's own size); never a temporary file left. */
static void check_save(vt_test *T, const char *dir, const char *w) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const vt_model_cfg *c = vt_model_find("vit_fmnist_tiny");
    size_t n_old = 0, n_new = 0, n;
    unsigned char *old = NULL, *neu = NULL;
    const int ok = P && vt_model_init_params(c, P, 7, &e) == 0 && vt_params_save(P, w, &e) == 0 &&
                   (neu = slurp(w, &n_new)) != NULL && vt_model_init_params(c, P, 8, &e) == 0 &&
                   vt_params_save(P, w, &e) == 0 && (old = slurp(w, &n_old)) != NULL &&
                   vt_model_init_params(c, P, 7, &e) == 0;
    T_CHECK(T, ok, "the weights: %s", e.msg);
    long calls = 0, tries = 0, bad = 0, changed = 0, left = 0, failed = 0;
    for (int i = 0; ok && i < SIZES + 1 + 1000; i++, tries++) {
        fault f = {0, 0};
        if (i < SIZES)
            f.limit = size_at(i, (long long)n_new);
        else if (i == SIZES)
            f.limit = (long long)n_new; /* the file's own size: it fits */
        else
            f.k = i - SIZES;
        vt_err se = {0};
        fault_on(f);
        const int rc = vt_params_save(P, w, &se);
        const int hit = fired;
        fault_off();
        if (f.k && !hit) { /* past the save's last call: the count */
            calls = f.k - 1;
            T_CHECK(T, rc == 0, "a save without a fault: %s", se.msg);
            T_CHECK(T, put(w, old, n_old), "restoring %s", w);
            break;
        }
        char what[64];
        describe(f, what, sizeof what);
        failed += rc != 0;
        if ((rc == 0 ? f.limit && f.limit < (long long)n_new
                     : se.code != VT_E_IO || !strstr(se.msg, w) || (f.limit && !strstr(se.msg, strerror(EFBIG)))) &&
            bad++ < 3)
            T_CHECK(T, 0, "vt_params_save, %s: rc %d, code %d: %s", what, rc, se.code, se.msg);
        unsigned char *now = slurp(w, &n);
        const unsigned char *want = rc == 0 ? neu : old;
        const size_t nwant = rc == 0 ? n_new : n_old;
        if ((!now || n != nwant || memcmp(now, want, n) != 0) && changed++ < 3)
            T_CHECK(T, 0, "vt_params_save, %s (rc %d): %s is not the %s file", what, rc, w, rc == 0 ? "new" : "old");
        free(now);
        if (temps(dir) && left++ < 3) T_CHECK(T, 0, "vt_params_save, %s: a temporary file is left in %s", what, dir);
        if (rc == 0) T_CHECK(T, put(w, old, n_old), "restoring %s", w);
    }
    printf("weights save (%zu bytes): %d file sizes and %ld calls that can fail, %ld saves failed\n", n_new, SIZES,
           calls, failed);
    T_CHECK(T, calls >= 5 && bad == 0 && changed == 0 && left == 0 && failed >= SIZES + calls - 1,
            "vt_params_save: %ld calls, %ld outcomes not as expected, %ld files not as expected, %ld temporary files "
            "left, %ld of %ld saves failed", calls, bad, changed, left, failed, tries - 1);
    vt_params_free(P);
    free(old);
    free(neu);
}

/* vt_write_text of a 64 KiB text (metrics, curves.gp, classes.json: stdio's buffer overflows before the commit)
 * over an older file, under file-size limits: a file error naming the cause ("File too large", not the EIO a
 * stream's error flag alone would give), the older file unchanged, no temporary file left. */
static void check_text(vt_test *T, const char *dir) {
    char path[300], *text = malloc(65536 + 1);
    snprintf(path, sizeof path, "%s/big.txt", dir);
    static const unsigned char old[] = "the older file\n";
    if (!text || !put(path, old, sizeof old - 1)) {
        T_CHECK(T, 0, "the text files in %s", dir);
        free(text);
        return;
    }
    for (int i = 0; i < 65536; i++) text[i] = i % 64 == 63 ? '\n' : (char)('a' + i % 26);
    text[65536] = '\0';
    static const long long limits[] = {1, 4096, 4097, 8192, 32768, 65535};
    int bad = 0;
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        vt_err e = {0};
        fault_on((fault){0, limits[i]});
        const int rc = vt_write_text(path, text, &e);
        fault_off();
        size_t n;
        unsigned char *now = slurp(path, &n);
        if ((rc == 0 || e.code != VT_E_IO || !strstr(e.msg, strerror(EFBIG)) || !now || n != sizeof old - 1 ||
             memcmp(now, old, n) != 0 || temps(dir)) && bad++ < 3)
            T_CHECK(T, 0, "vt_write_text, files limited to %lld bytes: rc %d, code %d: %s", limits[i], rc, e.code,
                    e.msg);
        free(now);
    }
    T_CHECK(T, bad == 0, "vt_write_text under file-size limits: %d outcomes not as expected", bad);
    unlink(path);
    free(text);
}

/* The counter `key` (train/step, train/epoch) of a run folder's checkpoint (-1: none readable); its epoch. */
static long long ck_counter(const char *run, const char *key) {
    char ck[300];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", run);
    vt_st_file f;
    vt_err e = {0};
    int64_t ep = -1;
    if (vt_st_open(ck, &f, &e) != 0) return -1;
    const vt_st_entry *t = vt_st_find(&f, key);
    if (!t || vt_st_read_i64(t, &ep, 1, &e) != 0) ep = -1;
    vt_st_close(&f);
    return ep;
}
static long long ck_epoch(const char *run) { return ck_counter(run, "train/epoch"); }

/* Whether run's files are whole: the safetensors files there open, metrics.csv starts with its header and ends with a
 * full line (why not in why). */
static int whole(const char *run, char *why, size_t n) {
    static const char *const st[] = {"checkpoint.safetensors", "weights.safetensors", "weights_best.safetensors"};
    char p[300];
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", run, st[i]);
        vt_st_file f;
        vt_err e = {0};
        if (vt_st_open(p, &f, &e) != 0) {
            snprintf(why, n, "%s", e.msg);
            return 0;
        }
        vt_st_close(&f);
    }
    snprintf(p, sizeof p, "%s/metrics.csv", run);
    size_t len;
    unsigned char *m = slurp(p, &len);
    const size_t hl = strlen(VT_METRICS_HEADER);
    const int ok = m && len > hl && memcmp(m, VT_METRICS_HEADER, hl) == 0 && m[len - 1] == '\n';
    free(m);
    if (!ok) snprintf(why, n, "%s is not whole", p);
    return ok;
}

/* Copies folder a to b (replacing b). */
static int copy_dir(const char *a, const char *b) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", b, a, b);
    return system(cmd) == 0;
}

/* A run of one epoch resumed for a second, at each wrapped call failing and at sampled sizes of its largest file:
 * each attempt succeeds or fails with a message, and leaves its folder's files whole and no temporary file; a resume
 * without the fault (where the checkpoint is short of the second epoch) then succeeds, and the folder ends with the
 * weights (byte for byte) and the metrics rows of a run that never failed. */
/* A weights file rewritten in place during its load: NaN read in the first pass is refused with the model unchanged,
 * NaN read only in the second pass (after every value was checked) is refused too, as a file that changed. */
static void check_reread(vt_test *T, const char *w) {
    vt_err e = {0};
    const vt_model_cfg *c = vt_model_find("vit_fmnist_tiny"); /* (no fixed buffers: both passes read every tensor) */
    vt_params *P = vt_params_new(&e);
    vt_st_file f;
    if (!P || vt_model_init_params(c, P, 7, &e) || vt_params_save(P, w, &e) || vt_st_open(w, &f, &e)) {
        T_CHECK(T, 0, "reread: %s", e.msg);
        vt_params_free(P);
        return;
    }
    preads = 0;
    T_CHECK(T, vt_params_load_file(P, &f, w, &e) == 0, "reread: a clean load: %s", e.msg);
    const long both = preads, first_pass = both / 2;
    T_CHECK(T, both > 0 && both % 2 == 0, "reread: the two passes read %ld times in all", both);
    const float keep = P->t[0]->data[0];
    preads = 0;
    poisoned = 1; /* the first pass: refused before anything is copied */
    vt_clearerr(&e);
    T_CHECK(T, vt_params_load_file(P, &f, w, &e) == -1 && strstr(e.msg, "NaN") && !strstr(e.msg, "changed") &&
                   P->t[0]->data[0] == keep,
            "reread: NaN in the first pass: %s", e.msg);
    preads = 0;
    poisoned = first_pass + 1; /* only the second pass: the values copied are checked again */
    vt_clearerr(&e);
    T_CHECK(T, vt_params_load_file(P, &f, w, &e) == -1 && strstr(e.msg, "NaN") &&
                   strstr(e.msg, "the file changed while it was loaded"),
            "reread: NaN in the second pass only: %s", e.msg);
    poisoned = 0;
    vt_st_close(&f);
    vt_params_free(P);
}

static void check_train(vt_test *T, const char *dir) {
    char data[128], tmpl[128], run[128], ref[128], p[300];
    snprintf(tmpl, sizeof tmpl, "%s/tmpl", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    vt_model_cfg c;
    vt_train_opts o;
    vt_err e = {0};
    int saved[2];
    if (vt_faults_folder(dir, data, sizeof data) || vt_faults_run(data, tmpl, &c, &o, &e)) {
        T_CHECK(T, 0, "the image folder in %s, the model: %s", dir, e.msg);
        return;
    }
    vt_faults_quiet(1, saved);
    int rc = vt_train(&c, &o, &e);
    o.resume = o.run_dir = ref;
    o.epochs = 2;
    o.overwrite = 0;
    rc = rc ? rc : !copy_dir(tmpl, ref) ? -1 : vt_train(&c, &o, &e);
    vt_faults_quiet(0, saved);
    T_CHECK(T, rc == 0, "the runs without a fault: %s", e.msg);
    size_t nw_ref, nm_ref, n;
    snprintf(p, sizeof p, "%s/weights.safetensors", ref);
    unsigned char *w_ref = rc == 0 ? slurp(p, &nw_ref) : NULL, *m_ref;
    snprintf(p, sizeof p, "%s/metrics.csv", ref);
    m_ref = rc == 0 ? slurp(p, &nm_ref) : NULL;
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", ref);
    unsigned char *ck = slurp(p, &n);
    free(ck);
    const long long ck_size = (long long)n;
    if (!w_ref || !m_ref) {
        T_CHECK(T, 0, "the reference run's files in %s", ref);
        free(w_ref);
        free(m_ref);
        return;
    }
    int rows_ref = 0;
    for (size_t i = 0; i < nm_ref; i++) rows_ref += m_ref[i] == '\n';
    long calls = 1000000, tries = 0, failed = 0, silent = 0, torn = 0, left = 0, stuck = 0, differ = 0;
    o.resume = o.run_dir = run;
    for (int i = 0; i < 1 + SIZES + 1000 && i <= SIZES + calls; i++, tries++) {
        fault f = {0, 0}; /* the first run counts the calls (none fails) */
        if (i == 0)
            f.k = calls;
        else if (i <= SIZES)
            f.limit = size_at(i - 1, ck_size);
        else
            f.k = i - SIZES;
        char what[64], why[1100];
        describe(f, what, sizeof what);
        vt_err te = {0}, re = {0};
        if (!copy_dir(tmpl, run)) {
            T_CHECK(T, 0, "copying %s", tmpl);
            break;
        }
        vt_faults_quiet(1, saved);
        fault_on(f);
        rc = vt_train(&c, &o, &te);
        if (i == 0) calls = seen;
        fault_off();
        const long long ep = ck_epoch(run);
        /* a failed run picks up again where its checkpoint is */
        const int again = ep == 1 ? vt_train(&c, &o, &re) : 0;
        vt_faults_quiet(0, saved);
        failed += rc != 0;
        if (rc != 0 && (!te.msg[0] || (f.limit && !strstr(te.msg, strerror(EFBIG)))) && silent++ < 3)
            T_CHECK(T, 0, "%s: the run failed without a message, or one without the cause: %s", what, te.msg);
        if (i == 0) T_CHECK(T, rc == 0, "the run without a fault: %s", te.msg);
        if (!whole(run, why, sizeof why) && torn++ < 3) T_CHECK(T, 0, "%s (%s): %s", what, te.msg, why);
        if (temps(run) && left++ < 3) T_CHECK(T, 0, "%s (%s): a temporary file is left in %s", what, te.msg, run);
        if ((ep < 1 || again != 0 || ck_epoch(run) != 2) && stuck++ < 3)
            T_CHECK(T, 0, "%s (%s): the checkpoint at epoch %lld, the resume after it: %s", what, te.msg, ep, re.msg);
        size_t nw = 0, nm = 0, rows = 0;
        snprintf(p, sizeof p, "%s/weights.safetensors", run);
        unsigned char *w = slurp(p, &nw);
        snprintf(p, sizeof p, "%s/metrics.csv", run);
        unsigned char *m = slurp(p, &nm);
        for (size_t j = 0; m && j < nm; j++) rows += m[j] == '\n';
        if ((!w || nw != nw_ref || memcmp(w, w_ref, nw) != 0 || (int)rows != rows_ref) && differ++ < 3)
            T_CHECK(T, 0, "%s (%s): the run ends with other weights or %zu metrics lines (not %d)", what, te.msg, rows,
                    rows_ref);
        free(w);
        free(m);
    }
    printf("training: %ld calls that can fail, %d sizes of the checkpoint (%lld bytes), %ld runs failed\n", calls,
           SIZES, ck_size, failed);
    T_CHECK(T, calls > 10 && failed >= SIZES && silent == 0 && torn == 0 && left == 0 && stuck == 0 && differ == 0,
            "training: %ld calls, %ld tries, %ld runs failed, %ld without a message or its cause, %ld with files not whole, %ld "
            "with temporary files left, %ld not resumed to the end, %ld ending otherwise", calls, tries, failed,
            silent, torn, left, stuck, differ);
    free(w_ref);
    free(m_ref);
}

/* A stop asked at the first step of the second epoch (vt_train_opts.fault_stop_step) of the run check_train made in
 * dir, with each call of the write path that can fail failing in turn: the run stops as asked (1) or fails with a
 * message, its files stay whole with no temporary file left, its checkpoint is the epoch's before or the stop's, and a
 * resume without the fault ends with the weights of the run never stopped. */
static void check_stop(vt_test *T, const char *dir) {
    char data[128], tmpl[128], run[128], p[300];
    snprintf(tmpl, sizeof tmpl, "%s/tmpl", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    vt_model_cfg c;
    vt_train_opts o;
    vt_err e = {0};
    int saved[2];
    size_t nw_ref = 0;
    snprintf(p, sizeof p, "%s/ref/weights.safetensors", dir);
    unsigned char *w_ref = slurp(p, &nw_ref);
    const long long spe = ck_counter(tmpl, "train/step"); /* the optimiser steps of the first epoch */
    snprintf(data, sizeof data, "%s/data", dir); /* check_train's image folder (vt_faults_folder) */
    if (!w_ref || spe < 2 || vt_faults_run(data, run, &c, &o, &e)) {
        T_CHECK(T, 0, "check_train's runs in %s (%lld steps an epoch): %s", dir, spe, e.msg);
        free(w_ref);
        return;
    }
    o.resume = run;
    o.epochs = 2;
    o.overwrite = 0;
    long calls = 1000000, failed = 0, stopped = 0, silent = 0, torn = 0, left = 0, elsewhere = 0, differ = 0;
    for (long k = 0; k <= calls; k++) {
        vt_err te = {0}, re = {0};
        char why[1100];
        if (!copy_dir(tmpl, run)) {
            T_CHECK(T, 0, "copying %s", tmpl);
            break;
        }
        o.fault_stop_step = spe;
        vt_faults_quiet(1, saved);
        fault_on((fault){k ? k : calls, 0});
        const int rc = vt_train(&c, &o, &te);
        if (k == 0) calls = seen;
        fault_off();
        const long long step = ck_counter(run, "train/step");
        o.fault_stop_step = -1;
        const int again = vt_train(&c, &o, &re);
        vt_faults_quiet(0, saved);
        failed += rc == -1;
        stopped += rc == 1;
        if (k == 0) T_CHECK(T, rc == 1 && step == spe + 1, "the stop without a fault: rc %d at step %lld: %s", rc,
                            step, te.msg);
        if ((rc == 0 || (rc == -1 && !te.msg[0])) && silent++ < 3)
            T_CHECK(T, 0, "write %ld: the run neither stopped nor failed with a message (rc %d): %s", k, rc, te.msg);
        if (!whole(run, why, sizeof why) && torn++ < 3) T_CHECK(T, 0, "write %ld (%s): %s", k, te.msg, why);
        if (temps(run) && left++ < 3) T_CHECK(T, 0, "write %ld (%s): a temporary file is left in %s", k, te.msg, run);
        if (step != spe && step != spe + 1 && elsewhere++ < 3)
            T_CHECK(T, 0, "write %ld (%s): the checkpoint is at step %lld, not %lld nor %lld", k, te.msg, step, spe,
                    spe + 1);
        size_t nw = 0;
        snprintf(p, sizeof p, "%s/weights.safetensors", run);
        unsigned char *w = slurp(p, &nw);
        if ((again != 0 || !w || nw != nw_ref || memcmp(w, w_ref, nw) != 0) && differ++ < 3)
            T_CHECK(T, 0, "write %ld (%s): its resume (%s) ends with other weights", k, te.msg, re.msg);
        free(w);
    }
    printf("a stop mid-epoch: %ld calls that can fail, %ld runs stopped, %ld failed\n", calls, stopped, failed);
    T_CHECK(T, calls > 3 && failed > 0 && silent == 0 && torn == 0 && left == 0 && elsewhere == 0 && differ == 0,
            "a stop mid-epoch: %ld calls, %ld runs failed, %ld without a message, %ld with files not whole, %ld with "
            "temporary files left, %ld checkpoints elsewhere, %ld resumes ending otherwise", calls, failed, silent,
            torn, left, elsewhere, differ);
    free(w_ref);
}

int main(void) {
    vt_test T = {0, 0, "io_faults"};
    char dir[] = "/tmp/vitc_io_XXXXXX", w[64];
    if (!mkdtemp(dir)) return 1;
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead of killing the process */
    snprintf(w, sizeof w, "%s/w.safetensors", dir);
    check_save(&T, dir, w);
    check_reread(&T, w);
    check_text(&T, dir);
    check_train(&T, dir);
    check_stop(&T, dir);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    T_CHECK(&T, system(cmd) == 0, "%s", cmd);
    printf("%d passed, %d failed\n", T.pass, T.fail);
    return T.fail ? 1 : 0;
}
