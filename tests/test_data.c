/* Dataset loading (Fashion-MNIST IDX, bad files), index shuffling, and vt_train's output streams on tiny splits (IDX and
 * an image folder). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "test.h"
#include "vitc/augment.h"
#include "vitc/dataset.h"
#include "vitc/model.h"
#include "vitc/rng.h"
#include "vitc/train.h"

#define NSMALL 5

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes bytes to dir/name, gzip-compressed when gz, else plain. */
static int write_file(const char *dir, const char *name, const void *data, size_t n, int gz) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) return -1;
        int w = n ? gzwrite(f, data, (unsigned)n) : 0;
        return gzclose(f) == Z_OK && (size_t)w == n ? 0 : -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static unsigned char *read_raw(const char *dir, const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* Pixel i of the synthetic files: a hash, so that gzip cannot shrink them much. */
static unsigned char pix(size_t i) { return (unsigned char)((i * 2654435761u) >> 13); }

/* Builds the bytes of an IDX3 image file (pixels pix(i)) / an IDX1 label file (labels i % 10). */
static unsigned char *make_images(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t *len) {
    *len = 16 + (size_t)n * rows * cols;
    unsigned char *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    for (size_t i = 16; i < *len; i++) b[i] = pix(i - 16);
    return b;
}

static unsigned char *make_labels(uint32_t magic, uint32_t n, size_t *len) {
    *len = 8 + n;
    unsigned char *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    for (uint32_t i = 0; i < n; i++) b[8 + i] = (unsigned char)(i % 10);
    return b;
}

static const char *IMG = "train-images-idx3-ubyte.gz";
static const char *LAB = "train-labels-idx1-ubyte.gz";

/* Writes a valid tiny train split into dir. */
static void write_valid(const char *dir) {
    size_t li, ll;
    unsigned char *im = make_images(0x803, NSMALL, 28, 28, &li);
    unsigned char *lb = make_labels(0x801, NSMALL, &ll);
    write_file(dir, IMG, im, li, 1);
    write_file(dir, LAB, lb, ll, 1);
    free(im);
    free(lb);
}

/* Expects loading the train split of dir to fail with a message containing want. */
static void expect_fail(vt_test *T, const char *dir, const char *want, const char *what) {
    vt_dataset ds = {0};
    vt_err e = {0};
    int rc = vt_dataset_load_fmnist(dir, 1, &ds, &e);
    T_CHECK(T, rc == -1, "%s: load should fail", what);
    T_CHECK(T, strstr(e.msg, want) != NULL, "%s: message \"%s\" lacks \"%s\"", what, e.msg, want);
    T_CHECK(T, ds.images == NULL && ds.labels == NULL && ds.n == 0, "%s: ds touched on error", what);
    vt_dataset_free(&ds);
}

static void test_bad_files(vt_test *T) {
    char dir[] = "/tmp/vitc_data_XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    size_t li, ll;
    unsigned char *im, *lb;

    /* valid tiny files load with exact content, also through VITC_FMNIST_DIR */
    write_valid(dir);
    vt_dataset ds = {0};
    vt_err e = {0};
    T_CHECK(T, vt_dataset_load_fmnist(dir, 1, &ds, &e) == 0, "valid tiny split: %s", e.msg);
    T_CHECK(T, ds.n == NSMALL && ds.h == 28 && ds.w == 28 && ds.nclasses == 10, "shape %d %d %d", ds.n, ds.h, ds.w);
    int ok = ds.images != NULL;
    for (size_t i = 0; ok && i < (size_t)NSMALL * 784; i++) ok = ds.images[i] == pix(i);
    for (int i = 0; ok && i < NSMALL; i++) ok = ds.labels[i] == i % 10;
    T_CHECK(T, ok, "tiny split content differs");
    vt_dataset_free(&ds);
    const char *old = getenv("VITC_FMNIST_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("VITC_FMNIST_DIR", dir, 1);
    T_CHECK(T, strcmp(vt_fmnist_dir(), dir) == 0, "env dir %s", vt_fmnist_dir());
    T_CHECK(T, vt_dataset_load_fmnist(NULL, 1, &ds, &e) == 0 && ds.n == NSMALL, "env dir load: %s", e.msg);
    vt_dataset_free(&ds);
    if (saved) setenv("VITC_FMNIST_DIR", saved, 1);
    else unsetenv("VITC_FMNIST_DIR");
    free(saved);

    /* subset keeps the first k */
    T_CHECK(T, vt_dataset_load_fmnist(dir, 1, &ds, &e) == 0, "reload: %s", e.msg);
    T_CHECK(T, vt_dataset_subset(&ds, 3, &e) == 0 && ds.n == 3, "subset 3: n=%d", ds.n);
    T_CHECK(T, ds.labels[2] == 2 && ds.images[784 * 2 + 5] == pix(784 * 2 + 5),
            "subset content");
    T_CHECK(T, vt_dataset_subset(&ds, 100, &e) == 0 && ds.n == 3, "subset larger than n keeps n");
    vt_clearerr(&e);
    T_CHECK(T, vt_dataset_subset(&ds, 0, &e) == -1 && strstr(e.msg, ">= 1"), "subset 0: %s", e.msg);
    vt_dataset_free(&ds);

    /* missing directory / file */
    expect_fail(T, "/nonexistent/vitc", "dataset-fashion-mnist", "missing dir");

    /* bad magic numbers (swapped files: clear hint) */
    im = make_images(0x801, NSMALL, 28, 28, &li);
    write_file(dir, IMG, im, li, 1);
    free(im);
    expect_fail(T, dir, "bad magic number 0x00000801", "image magic");
    write_valid(dir);
    lb = make_labels(0x803, NSMALL, &ll);
    write_file(dir, LAB, lb, ll, 1);
    free(lb);
    expect_fail(T, dir, "bad magic number 0x00000803", "label magic");

    /* bad dimensions */
    write_valid(dir);
    im = make_images(0x803, NSMALL, 0, 28, &li);
    write_file(dir, IMG, im, li, 1);
    free(im);
    expect_fail(T, dir, "file has 0x28", "zero rows");
    im = make_images(0x803, NSMALL, 32, 32, &li);
    write_file(dir, IMG, im, li, 1);
    free(im);
    expect_fail(T, dir, "must be 28x28, file has 32x32", "32x32 images");
    im = make_images(0x803, NSMALL, 0, 0, &li); /* a header of 4096x4096 images alone: refused before any pixel */
    put_be32(im + 8, 4096);
    put_be32(im + 12, 4096);
    write_file(dir, IMG, im, li, 1);
    free(im);
    expect_fail(T, dir, "must be 28x28, file has 4096x4096", "a header of 4096x4096 images with no pixels");

    /* count mismatch */
    write_valid(dir);
    lb = make_labels(0x801, NSMALL + 1, &ll);
    write_file(dir, LAB, lb, ll, 1);
    free(lb);
    expect_fail(T, dir, "count mismatch", "count mismatch");

    /* label out of range */
    lb = make_labels(0x801, NSMALL, &ll);
    lb[8 + 3] = 10;
    write_file(dir, LAB, lb, ll, 1);
    free(lb);
    expect_fail(T, dir, "label 10 of item 3", "label 10");

    /* payload shorter than the header says */
    write_valid(dir);
    im = make_images(0x803, NSMALL, 28, 28, &li);
    write_file(dir, IMG, im, li - 100, 1);
    free(im);
    expect_fail(T, dir, "truncated file", "short payload");
    write_valid(dir);
    lb = make_labels(0x801, NSMALL, &ll);
    write_file(dir, LAB, lb, 6, 1);
    free(lb);
    expect_fail(T, dir, "truncated file", "short label header");

    /* trailing bytes */
    write_valid(dir);
    im = make_images(0x803, NSMALL + 1, 28, 28, &li);
    put_be32(im + 4, NSMALL);
    write_file(dir, IMG, im, li, 1);
    free(im);
    expect_fail(T, dir, "trailing data", "trailing bytes");

    /* truncated gzip stream (compressed file cut in half) and corrupted compressed bytes */
    write_valid(dir);
    size_t gzlen;
    unsigned char *gz = read_raw(dir, IMG, &gzlen);
    T_CHECK(T, gz && gzlen > 100, "read back gz");
    if (gz && gzlen > 100) {
        write_file(dir, IMG, gz, gzlen / 2, 0);
        expect_fail(T, dir, "truncated", "gzip cut in half");
        write_file(dir, IMG, gz, gzlen - 4, 0); /* all data present, gzip trailer (length) missing */
        expect_fail(T, dir, "truncated gzip stream", "gzip trailer cut");
        unsigned char *bad = malloc(gzlen);
        memcpy(bad, gz, gzlen);
        for (size_t i = 20; i < 40; i++) bad[i] ^= 0x5a;
        write_file(dir, IMG, bad, gzlen, 0);
        expect_fail(T, dir, "corrupt gzip data", "corrupted gzip");
        memcpy(bad, gz, gzlen);
        bad[gzlen - 8] ^= 0xff; /* CRC */
        write_file(dir, IMG, bad, gzlen, 0);
        expect_fail(T, dir, "corrupt gzip data", "bad gzip crc");
        free(bad);
    }
    free(gz);

    /* plain (uncompressed) IDX files are accepted too */
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, IMG);
    unlink(path);
    im = make_images(0x803, NSMALL, 28, 28, &li);
    write_file(dir, "train-images-idx3-ubyte", im, li, 0);
    free(im);
    T_CHECK(T, vt_dataset_load_fmnist(dir, 1, &ds, &e) == 0 && ds.n == NSMALL, "plain idx: %s", e.msg);
    vt_dataset_free(&ds);

    const char *names[] = {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    T_CHECK(T, rmdir(dir) == 0, "temp dir %s not empty", dir);
}

static void test_real_fmnist(vt_test *T) {
    const char *dir = vt_fmnist_dir();
    char path[1024];
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    T_CHECK(T, access(path, R_OK) == 0, "%s: %s (the tests need Debian's dataset-fashion-mnist, or VITC_FMNIST_DIR)",
            path, strerror(errno));
    if (access(path, R_OK) != 0) return;
    vt_err e = {0};
    for (int train = 1; train >= 0; train--) {
        vt_dataset ds = {0};
        int rc = vt_dataset_load_fmnist(NULL, train, &ds, &e);
        T_CHECK(T, rc == 0, "load %s: %s", train ? "train" : "test", e.msg);
        if (rc) continue;
        int want = train ? 60000 : 10000;
        T_CHECK(T, ds.n == want && ds.h == 28 && ds.w == 28, "n=%d h=%d w=%d", ds.n, ds.h, ds.w);
        int hist[10] = {0};
        for (int i = 0; i < ds.n; i++) hist[ds.labels[i]]++;
        int ok = 1;
        for (int c = 0; c < 10; c++) ok &= hist[c] == want / 10;
        T_CHECK(T, ok, "label histogram %d %d %d ... (want %d each)", hist[0], hist[1], hist[2], want / 10);
        double mean = 0;
        for (size_t i = 0; i < (size_t)ds.n * 784; i++) mean += ds.images[i];
        mean /= 255.0 * ds.n * 784;
        T_CHECK(T, fabs(mean - VT_FMNIST_MEAN) < 0.005, "pixel mean %.4f vs %.4f", mean, (double)VT_FMNIST_MEAN);
        vt_dataset_free(&ds);
    }
    T_CHECK(T, strcmp(vt_fmnist_class_name(9), "Ankle boot") == 0 && strcmp(vt_fmnist_class_name(10), "?") == 0,
            "class names");
}

/* vt_shuffle: a permutation, deterministic per seed; 0 and 1 elements are fine. */
static void test_shuffle(vt_test *T) {
    vt_rng r1, r2;
    enum { M = 1000 };
    int p1[M], p2[M], cnt[M] = {0};
    vt_iota(p1, M);
    vt_iota(p2, M);
    vt_rng_seed(&r1, 9);
    vt_rng_seed(&r2, 9);
    vt_shuffle(p1, M, &r1);
    vt_shuffle(p2, M, &r2);
    int perm = 1, fixed = 0;
    for (int i = 0; i < M; i++) {
        if (p1[i] < 0 || p1[i] >= M || cnt[p1[i]]++) perm = 0;
        fixed += p1[i] == i;
    }
    T_CHECK(T, perm, "shuffle is not a permutation");
    T_CHECK(T, fixed < 20, "shuffle left %d of %d in place", fixed, M);
    T_CHECK(T, memcmp(p1, p2, sizeof p1) == 0, "shuffle not deterministic");
    vt_shuffle(p1, 1, &r1);
    vt_shuffle(p1, 0, &r1);
    /* uniform (Fisher-Yates down to its last swap): over 6000 seeds each of the 6 orders of 3 elements comes ~1000
     * times (binomial s.d. 29; 850..1150 is over 5 s.d.) */
    int orders[6] = {0};
    for (uint64_t seed = 0; seed < 6000; seed++) {
        int q[3] = {0, 1, 2};
        vt_rng_seed(&r1, seed);
        vt_shuffle(q, 3, &r1);
        orders[q[0] * 2 + (q[1] > q[2])]++; /* q[0] and the order of the other two name the permutation */
    }
    int lo = 6000, hi = 0;
    for (int k = 0; k < 6; k++) lo = orders[k] < lo ? orders[k] : lo, hi = orders[k] > hi ? orders[k] : hi;
    T_CHECK(T, lo > 850 && hi < 1150, "orders of 3 elements: %d %d %d %d %d %d", orders[0], orders[1], orders[2],
            orders[3], orders[4], orders[5]);
}

/* The whole of file f (rewound), NUL-terminated, into buf (n bytes at most). */
static const char *file_text(FILE *f, char *buf, size_t n) {
    rewind(f);
    const size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    return buf;
}

/* An image folder under dir/imgs: train/ and val/, classes a and b, gray 28×28 PGM images (train: 3 each, val: 2
 * each) and train/a/bad.pgm, not an image. */
static void write_folder(const char *dir) {
    static const char *const parts[] = {"imgs", "imgs/train", "imgs/val", "imgs/train/a", "imgs/train/b",
                                        "imgs/val/a", "imgs/val/b"};
    char path[1200];
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, parts[i]);
        mkdir(path, 0777);
    }
    unsigned char pgm[13 + 28 * 28];
    memcpy(pgm, "P5\n28 28\n255\n", 13);
    for (int i = 3; i < 7; i++)
        for (int k = 0; k < (i < 5 ? 3 : 2); k++) {
            char name[64];
            for (int j = 0; j < 28 * 28; j++) pgm[13 + j] = (unsigned char)(j * (k + 1) + 40 * i);
            snprintf(name, sizeof name, "%s/%d.pgm", parts[i], k);
            write_file(dir, name, pgm, sizeof pgm, 0);
        }
    write_file(dir, "imgs/train/a/bad.pgm", "not an image", 12, 0);
}

/* vt_train writes its lines on o->log and its warnings on o->warn, and nothing on stdout or stderr: a one-epoch run
 * of the tiny ViT on a synthetic split (train and test of NSMALL images) whose run folder holds a killed writer's
 * temporary file; then a run with both streams NULL, resuming the first for a second epoch over another such file,
 * writes nothing anywhere; then a run on an image folder holding an unreadable image, which its loaders warn about on
 * o->warn (stdout and stderr redirected to files during each run and checked empty). */
static void test_train_streams(vt_test *T) {
    char dir[] = "/tmp/vitc_trainlog_XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    char run[1100], tmp[1200], outp[1100], errp[1100];
    write_valid(dir);
    write_folder(dir);
    size_t li, ll;
    unsigned char *im = make_images(0x803, NSMALL, 28, 28, &li), *lb = make_labels(0x801, NSMALL, &ll);
    write_file(dir, "t10k-images-idx3-ubyte.gz", im, li, 1);
    write_file(dir, "t10k-labels-idx1-ubyte.gz", lb, ll, 1);
    free(im);
    free(lb);
    snprintf(run, sizeof run, "%s/run\x1b[31m", dir); /* a control sequence in its name: escaped in the warning */
    mkdir(run, 0777);
    snprintf(tmp, sizeof tmp, "%s/.vitc-999999999-zzzzzz", run);
    snprintf(outp, sizeof outp, "%s/stdout", dir);
    snprintf(errp, sizeof errp, "%s/stderr", dir);
    const char *old = getenv("VITC_FMNIST_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("VITC_FMNIST_DIR", dir, 1);
    const vt_model_cfg *c = vt_model_find("vit_fmnist_tiny");
    T_CHECK(T, c != NULL, "vit_fmnist_tiny is registered");
    char imgs[1100], run2[1100];
    snprintf(imgs, sizeof imgs, "%s/imgs", dir);
    snprintf(run2, sizeof run2, "%s/run2", dir);
    for (int k = 0; c && k <= 2; k++) {
        const int quiet = k == 1;
        vt_train_opts o;
        vt_train_defaults(&o);
        T_CHECK(T, o.log == stdout && o.warn == stderr, "defaults: lines on stdout, warnings on stderr");
        FILE *log = quiet ? NULL : tmpfile(), *warn = quiet ? NULL : tmpfile();
        FILE *t = k < 2 ? fopen(tmp, "w") : NULL; /* a killed run's temporary file, removed by each run */
        if (t) fclose(t);
        o.run_dir = k < 2 ? run : run2;
        o.epochs = 1 + quiet;
        o.batch = NSMALL;
        o.workers = 1;
        o.resume = quiet ? run : NULL; /* the second run resumes the first for an epoch more */
        if (k == 2) o.data = imgs;
        o.log = log;
        o.warn = warn;
        vt_model_cfg c2 = *c; /* the folder's two classes */
        c2.arch.num_classes = k < 2 ? c->arch.num_classes : 2;
        vt_err e = {0};
        fflush(stdout);
        fflush(stderr);
        const int so = dup(1), se = dup(2);
        const int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600),
                  fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fo, 1);
        dup2(fe, 2);
        const int rc = vt_train(&c2, &o, &e);
        fflush(stdout);
        fflush(stderr);
        dup2(so, 1);
        dup2(se, 2);
        close(so), close(se), close(fo), close(fe);
        struct stat a = {0}, b = {0};
        T_CHECK(T, rc == 0, "run %d: %s", k, e.msg);
        T_CHECK(T, access(tmp, F_OK) != 0, "run %d: the temporary file is gone", k);
        T_CHECK(T, stat(outp, &a) == 0 && stat(errp, &b) == 0 && a.st_size == 0 && b.st_size == 0,
                "run %d: %lld bytes on stdout, %lld on stderr", k, (long long)a.st_size, (long long)b.st_size);
        if (!quiet) {
            char buf[8192];
            const char *l = log ? file_text(log, buf, sizeof buf) : "";
            T_CHECK(T, strstr(l, "Test: epoch 0") && strstr(l, "Done: 1 epoch"), "run %d: log: %s", k, l);
            T_CHECK(T, k < 2 || strstr(l, "Skipped 1 unreadable training image"), "run %d: log: %s", k, l);
            const char *w = warn ? file_text(warn, buf, sizeof buf) : "";
            T_CHECK(T, strncmp(w, "vitc: warning: ", 15) == 0 &&
                           strstr(w, k < 2 ? "run\\x1b[31m: removed 1 temporary file" : "bad.pgm") != NULL &&
                           !strchr(w, '\x1b'),
                    "run %d: warnings: %s", k, w);
        }
        if (log) fclose(log);
        if (warn) fclose(warn);
    }
    /* the library refuses what the CLI's ranges refuse (a NaN warm-up length reached an integer cast), before
     * anything is written */
    for (int k = 0; c && k < 7; k++) {
        vt_train_opts o;
        vt_train_defaults(&o);
        char bad[1100];
        snprintf(bad, sizeof bad, "%s/badopt", dir);
        o.run_dir = bad;
        o.log = o.warn = NULL;
        const char *want[7] = {"warmup_epochs is nan", "min_lr is -1", "warmup_lr is -1e-06", "weight_decay is inf",
                               "clip_grad is -1", "smoothing is 1", "lr must be > 0 (and finite)"};
        if (k == 0) o.warmup_epochs = NAN;
        if (k == 1) o.min_lr = -1;
        if (k == 2) o.warmup_lr = -1e-6;
        if (k == 3) o.weight_decay = INFINITY;
        if (k == 4) o.clip_grad = -1;
        if (k == 5) o.smoothing = 1;
        if (k == 6) o.lr = INFINITY;
        vt_err e = {0};
        T_CHECK(T, vt_train(c, &o, &e) != 0 && strstr(e.msg, want[k]) && access(bad, F_OK) != 0,
                "bad option %d refused (want \"%s\"): %s", k, want[k], e.msg);
    }
    if (saved) setenv("VITC_FMNIST_DIR", saved, 1);
    else unsetenv("VITC_FMNIST_DIR");
    free(saved);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    T_CHECK(T, system(cmd) == 0, "removing %s", dir);
}

/* The training transforms vt_data_open sets up on an image folder: the default crop + flip is RandomCrop(S,
 * padding=S//7) (Fashion-MNIST's padding 4 at 28) with a flip and the model's normalisation; a recipe's DeiT
 * transform takes the model's size and normalisation, and fills with timm's img_mean, round(255 · mean) per channel
 * (0.286 -> 72.93 -> 73). */
static void test_data_open(vt_test *T) {
    char dir[] = "/tmp/vitc_dataopen_XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    write_folder(dir);
    char imgs[1100];
    snprintf(imgs, sizeof imgs, "%s/imgs", dir);
    const vt_model_cfg *c = vt_model_find("vit_fmnist_tiny");
    T_CHECK(T, c != NULL, "vit_fmnist_tiny is registered");
    /* square, and 42x21 (height x width: the pad from the shorter side, every transform at 42x21) */
    const int sizes[3] = {28, 36, 42}, widths[3] = {28, 36, 21}, pads[3] = {4, 5, 3};
    for (int k = 0; c && k < 3; k++) {
        vt_model_cfg c2 = *c; /* the folder's two classes */
        c2.arch.num_classes = 2;
        c2.arch.img_size = sizes[k];
        c2.arch.img_w = widths[k] == sizes[k] ? 0 : widths[k];
        vt_data d;
        vt_err e = {0};
        T_CHECK(T, vt_data_open(&c2, imgs, 1, 1, NULL, 0, 0, &d, &e) == 0, "open: %s", e.msg);
        T_CHECK(T, d.crop.size == sizes[k] && d.crop.chans == 1 && d.crop.pad == pads[k] && d.crop.hflip &&
                       d.crop.mean[0] == d.pre.mean[0] && d.crop.std[0] == d.pre.std[0] && !d.deit_on,
                "size %d: crop + flip size %d, pad %d (want %d), flip %d", sizes[k], d.crop.size, d.crop.pad, pads[k],
                d.crop.hflip);
        T_CHECK(T, d.train_tf.size == sizes[k] && d.train_tf.width == widths[k] && d.eval_tf.size == sizes[k] &&
                       d.eval_tf.width == widths[k] && vt_preprocess_width(&d.pre) == widths[k],
                "%dx%d: train transform %dx%d, eval %dx%d", sizes[k], widths[k], d.train_tf.size, d.train_tf.width,
                d.eval_tf.size, d.eval_tf.width);
        vt_data_close(&d);
        const vt_tf_params deit = vt_tf_deit(224);
        T_CHECK(T, vt_data_open(&c2, imgs, 1, 1, &deit, 0, 0, &d, &e) == 0, "open with DeiT: %s", e.msg);
        const int fill = (int)floor(255.0 * d.pre.mean[0] + 0.5);
        T_CHECK(T, d.deit_on && d.deit.size == sizes[k] && d.train_tf.width == widths[k] &&
                       d.deit.mean[0] == d.pre.mean[0] && d.deit.std[0] == d.pre.std[0] && d.deit.fill[0] == fill,
                "DeiT transform: size %d, fill %d (want %d from mean %g)", d.deit.size, d.deit.fill[0], fill,
                (double)d.pre.mean[0]);
        vt_data_close(&d);
        c2.arch.img_size = 28; /* Fashion-MNIST is 28x28: a 28-row model of another width is refused */
        T_CHECK(T, k < 2 || (vt_data_open(&c2, "fashion-mnist", 1, 1, NULL, 0, 0, &d, &e) == -1 &&
                             strstr(e.msg, "1×28×21 inputs; Fashion-MNIST needs --img-size 28")),
                "Fashion-MNIST at 28x21: %s", e.msg);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    T_CHECK(T, system(cmd) == 0, "removing %s", dir);
}

void test_data(vt_test *T) {
    test_data_open(T);
    test_bad_files(T);
    test_shuffle(T);
    test_real_fmnist(T);
    test_train_streams(T);
}
