/* The input pipeline: loader determinism (1 vs 3 workers, prefetch depth, abandoned epochs), per-sample keyed random
 * draws, the crop+flip transform against a direct RandomCrop(padding)+flip, unreadable samples (replaced, dropped,
 * all bad), RGB images of other shapes (crop+flip's resize, the DeiT transform as a loader transform), and
 * ImageFolder scanning (torchvision's order and extension rules, the class map file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "vitc/augment.h"
#include "vitc/imagefolder.h"
#include "vitc/loader.h"

#define NS 100
#define SIDE 12
#define BATCH 8

static void make_ds(vt_dataset *ds, uint8_t *pix, uint8_t *lab) {
    vt_rng r;
    vt_rng_seed(&r, 42);
    for (int i = 0; i < NS * SIDE * SIDE; i++) pix[i] = (uint8_t)vt_rng_below(&r, 256);
    for (int i = 0; i < NS; i++) lab[i] = (uint8_t)(i % 7);
    *ds = (vt_dataset){NS, SIDE, SIDE, 7, pix, lab};
}

/* Runs one epoch over idx and returns every batch's pixels and labels (nb * BATCH rows); warned (if not NULL): the
 * loader's warning lines, kept off stderr. */
static int run_epoch(const vt_source *src, const vt_transform *tf, int workers, int prefetch, const int *idx, int n,
                     int drop_last, int64_t epoch, float *x, int *lab, vt_bad_policy bad, int64_t *skipped,
                     int *warned, vt_err *e) {
    vt_loader *L = vt_loader_new(src, tf, BATCH, workers, prefetch, bad, e);
    if (!L) return -1;
    FILE *wf = warned ? tmpfile() : NULL;
    if (warned) {
        *warned = -1; /* stays so without a temporary file: the count checks fail */
        vt_loader_set_warnings(L, wf);
    }
    const size_t per = (size_t)tf->chans * tf->size * tf->width;
    int nb = vt_loader_start(L, idx, n, drop_last, 7, epoch, e), rows = 0, k = 0, r;
    while (nb > 0 && (r = vt_loader_next(L, x + (size_t)k * BATCH * per, lab + (size_t)k * BATCH, e)) > 0) {
        rows += r;
        k++;
    }
    if (skipped) *skipped = vt_loader_skipped(L);
    vt_loader_free(L);
    if (wf) { /* count the lines */
        rewind(wf);
        *warned = 0;
        for (int ch; (ch = fgetc(wf)) != EOF;) *warned += ch == '\n';
        fclose(wf);
    }
    return nb < 0 || e->msg[0] ? -1 : rows;
}

/* A source failing for the indices marked in bad[]. */
typedef struct {
    vt_source inner;
    const int *bad;
} flaky;

static int flaky_get(void *ctx, int i, int chans, int min_side, vt_image *img, int *label, vt_err *e) {
    const flaky *f = ctx;
    if (f->bad[i]) return vt_seterr(e, "sample %d is corrupt", i);
    return f->inner.get(f->inner.ctx, i, chans, min_side, img, label, e);
}

static int failing_apply(const void *ctx, const vt_image *img, vt_rng *rng, float *out, vt_err *e) {
    (void)ctx, (void)img, (void)rng, (void)out;
    return vt_seterr(e, "transform refuses");
}

/* A source whose images at the indices marked in bad[] come out 1 pixel wide (the pixels left as they are). */
static int narrow_get(void *ctx, int i, int chans, int min_side, vt_image *img, int *label, vt_err *e) {
    const flaky *f = ctx;
    const int rc = f->inner.get(f->inner.ctx, i, chans, min_side, img, label, e);
    if (rc == 0 && f->bad[i]) img->w = 1;
    return rc;
}

/* The transform in ctx, refusing 1-pixel-wide images (as the resize refuses extreme aspect ratios). */
static int picky_apply(const void *ctx, const vt_image *img, vt_rng *rng, float *out, vt_err *e) {
    const vt_transform *t = ctx;
    if (img->w == 1) return vt_seterr(e, "transform refuses a 1-pixel-wide image");
    return t->apply(t->ctx, img, rng, out, e);
}

static void touch(const char *dir, const char *name) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
}

static void test_folder_scan(vt_test *T) {
    char root[] = "/tmp/vitc_folder_XXXXXX";
    if (!mkdtemp(root)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    char p[1024];
    const char *dirs[] = {"train",   "train/b",        "train/B",       "train/b/sub",         "train/b/sub-x",
                          "train/b/sub/deeper", "train/c", "train/c/sub", "train/c/sub/deeper", "train/c/sub-x",
                          "val",     "val/b"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
        mkdir(p, 0777);
    }
    snprintf(p, sizeof p, "%s/train/b", root);
    touch(p, "z.png");
    touch(p, "a.JpG");
    touch(p, "notes.txt");
    touch(p, "c.webp"); /* torchvision's, not decoded by vitc: left out */
    snprintf(p, sizeof p, "%s/train/b/sub", root);
    touch(p, "0.bmp");
    snprintf(p, sizeof p, "%s/train/b/sub-x", root);
    touch(p, "0.ppm");
    snprintf(p, sizeof p, "%s/train/b/sub/deeper", root);
    touch(p, "1.png");
    snprintf(p, sizeof p, "%s/train/B", root);
    touch(p, "y.PGM");
    /* a class of two files only, in folders that the walk reaches in the other order (the sort is not skipped) */
    snprintf(p, sizeof p, "%s/train/c/sub/deeper", root);
    touch(p, "1.png");
    snprintf(p, sizeof p, "%s/train/c/sub-x", root);
    touch(p, "0.png");
    snprintf(p, sizeof p, "%s/val/b", root);
    touch(p, "v.jpeg");
    vt_imagefolder tr, va;
    vt_err e = {0};
    T_CHECK(T, vt_imagefolder_open(root, &tr, &va, &e) == 0, "open: %s", e.msg);
    /* torchvision: classes sorted ("B" < "b"); files in sorted(os.walk()) order, i.e. by the root folder's path as a
     * string ("b" < "b/sub" < "b/sub-x" < "b/sub/deeper", as '-' < '/'), then by name within a folder */
    const char *want[] = {"train/B/y.PGM",       "train/b/a.JpG",       "train/b/z.png",
                          "train/b/sub/0.bmp",   "train/b/sub-x/0.ppm", "train/b/sub/deeper/1.png",
                          "train/c/sub-x/0.png", "train/c/sub/deeper/1.png"};
    const int wlab[] = {0, 1, 1, 1, 1, 1, 2, 2};
    T_CHECK(T, tr.nclasses == 3 && strcmp(tr.classes[0], "B") == 0 && strcmp(tr.classes[1], "b") == 0 &&
                   strcmp(tr.classes[2], "c") == 0,
            "classes: %d", tr.nclasses);
    T_CHECK(T, tr.n == 8, "train files: %d", tr.n);
    for (int i = 0; i < tr.n && i < 8; i++) {
        snprintf(p, sizeof p, "%s/%s", root, want[i]);
        T_CHECK(T, strcmp(tr.paths[i], p) == 0 && tr.labels[i] == wlab[i], "file %d: %s (label %d), want %s", i,
                tr.paths[i], tr.labels[i], p);
    }
    T_CHECK(T, va.n == 1 && va.labels[0] == 1 && va.nclasses == 3, "val: %d files, label %d", va.n,
            va.n ? va.labels[0] : -1);
    /* the class map round-trips */
    snprintf(p, sizeof p, "%s/classes.json", root);
    char **names = NULL;
    int K = 0;
    T_CHECK(T, vt_imagefolder_write_classes(&tr, p, &e) == 0 && vt_classes_read(p, &names, &K, &e) == 0 && K == 3 &&
                   strcmp(names[0], "B") == 0 && strcmp(names[1], "b") == 0 && strcmp(names[2], "c") == 0,
            "classes.json: %s", e.msg);
    vt_classes_free(names, K);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("{\"0\": \"a\", \"2\": \"c\"}", f);
        fclose(f);
    }
    vt_clearerr(&e);
    T_CHECK(T, vt_classes_read(p, &names, &K, &e) == -1 && strstr(e.msg, "class 1"), "gap in indices: %s", e.msg);
    unlink(p);
    vt_imagefolder_free(&tr);
    vt_imagefolder_free(&va);
    /* a file in train/B/sub only would still count; an empty class folder is an error naming it */
    snprintf(p, sizeof p, "%s/train/C", root);
    mkdir(p, 0777);
    vt_clearerr(&e);
    T_CHECK(T, vt_imagefolder_open(root, &tr, &va, &e) == -1 && strstr(e.msg, "train/C holds no image files"), "%s",
            e.msg);
    rmdir(p);
    snprintf(p, sizeof p, "cd /tmp && rm -rf '%s'", root);
    T_CHECK(T, system(p) == 0, "cleanup");
}

/* Writes text to dir/name. */
static void write_text(const char *dir, const char *name, const char *text) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* File names ordered as Python sorts them (torchvision's ImageFolder sorts os.walk's str names): UTF-8 in code point
 * order, a byte of no valid sequence as its surrogate U+DC80..U+DCFF (os.fsdecode), so after U+D7FF and before U+E000
 * (strcmp put "\x80.png" before "é.png"). The order below is Python 3.11's sorted() of those names. */
static void test_folder_name_order(vt_test *T) {
    char root[] = "/tmp/vitc_order_XXXXXX";
    if (!mkdtemp(root)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    /* (a valid sequence's bytes sort by code point, "\xc3a" as U+DCC3 'a', "\x80b" before "\x81a"; os.walk's folders
     * after the files beside them, "\xc3\xa9/" before "\x80/") */
    static const char *const want[] = {"b.png", "z.png", "\xc3\xa9.png", "\x80.png", "\x80" "b.png", "\x81" "a.png",
                                       "\xc3" "a.png", "\xed\xa0\x80.png", "\xef\xbf\xbd.png",
                                       "\xf0\x9f\x98\x80.png", "\xc3\xa9/x.png", "\x80/x.png"};
    enum { NW = sizeof want / sizeof *want, NSUB = 2 };
    char p[1024], sub[1100];
    snprintf(p, sizeof p, "%s/a", root);
    mkdir(p, 0777);
    for (int i = NW - NSUB - 1; i >= 0; i--) touch(p, want[i]);
    for (int i = NW - 1; i >= NW - NSUB; i--) { /* the files in the class's subfolders */
        snprintf(sub, sizeof sub, "%s/%.*s", p, (int)(strchr(want[i], '/') - want[i]), want[i]);
        mkdir(sub, 0777);
        touch(sub, "x.png");
    }
    vt_imagefolder f;
    vt_err e = {0};
    const int rc = vt_imagefolder_scan(root, NULL, &f, &e);
    T_CHECK(T, rc == 0 && f.n == NW, "scan: %s (%d files)", e.msg, rc == 0 ? f.n : -1);
    const size_t L = strlen(p) + 1;
    for (int i = 0; rc == 0 && i < f.n && i < NW; i++)
        T_CHECK(T, strlen(f.paths[i]) > L && strcmp(f.paths[i] + L, want[i]) == 0, "file %d in Python's order", i);
    if (rc == 0) vt_imagefolder_free(&f);
    snprintf(p, sizeof p, "rm -rf '%s'", root);
    T_CHECK(T, system(p) == 0, "cleanup");
}

/* Symlinked folders reached twice (issue: 30 levels of two links each to the next level made 2^30 visits, the depth
 * limit never reached) and class names that cannot be printed on one line. */
static void test_folder_links(vt_test *T) {
    char root[] = "/tmp/vitc_links_XXXXXX";
    if (!mkdtemp(root)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    char p[1024], q[1024];
    vt_imagefolder f;
    vt_err e = {0};
    /* a/l0 .. a/l29: each level holds x and y, both links to the next level */
    snprintf(p, sizeof p, "%s/a", root);
    mkdir(p, 0777);
    touch(p, "1.png");
    for (int k = 0; k < 30; k++) {
        snprintf(p, sizeof p, "%s/l%d", root, k);
        mkdir(p, 0777);
        touch(p, "2.png");
        snprintf(q, sizeof q, "../l%d", k + 1);
        for (int j = 0; j < 2 && k < 29; j++) {
            snprintf(p, sizeof p, "%s/l%d/%c", root, k, "xy"[j]);
            T_CHECK(T, symlink(q, p) == 0, "symlink %s", p);
        }
    }
    snprintf(p, sizeof p, "%s/a/x", root);
    T_CHECK(T, symlink("../l0", p) == 0, "symlink %s", p);
    /* l29 is first reached as a/x/x/.../x (x before y), then again as a/x/.../x/y */
    char deep[512], want[1100];
    int o = snprintf(deep, sizeof deep, "%s/a", root);
    for (int k = 0; k < 29; k++) o += snprintf(deep + o, sizeof deep - (size_t)o, "/x");
    snprintf(want, sizeof want, "%s/y is the folder %s/x reached again", deep, deep);
    vt_clearerr(&e);
    const int rc = vt_imagefolder_scan(root, NULL, &f, &e);
    T_CHECK(T, rc == -1 && strstr(e.msg, want), "branching links: %s", e.msg);
    if (rc == 0) vt_imagefolder_free(&f);
    /* a link to one's own folder, and a class folder that is another class's */
    snprintf(p, sizeof p, "cd /tmp && rm -rf '%s'/a/x '%s'/l*", root, root);
    T_CHECK(T, system(p) == 0, "cleanup links");
    snprintf(p, sizeof p, "%s/a/self", root);
    T_CHECK(T, symlink(".", p) == 0, "symlink %s", p);
    vt_clearerr(&e);
    snprintf(q, sizeof q, "%s/a/self is the folder %s/a reached again", root, root);
    T_CHECK(T, vt_imagefolder_scan(root, NULL, &f, &e) == -1 && strstr(e.msg, q), "self link: %s", e.msg);
    unlink(p);
    snprintf(p, sizeof p, "%s/b", root);
    T_CHECK(T, symlink("a", p) == 0, "symlink %s", p);
    vt_clearerr(&e);
    snprintf(q, sizeof q, "%s/b is the folder %s/a reached again", root, root);
    T_CHECK(T, vt_imagefolder_scan(root, NULL, &f, &e) == -1 && strstr(e.msg, q), "class b = class a: %s", e.msg);
    unlink(p);
    T_CHECK(T, vt_imagefolder_scan(root, NULL, &f, &e) == 0 && f.n == 1, "one class, one file: %s", e.msg);
    vt_imagefolder_free(&f);
    /* a class folder named with a newline */
    snprintf(p, sizeof p, "%s/b\nc", root);
    mkdir(p, 0777);
    touch(p, "3.png");
    vt_clearerr(&e);
    T_CHECK(T, vt_imagefolder_scan(root, NULL, &f, &e) == -1 && strstr(e.msg, "'b\\nc' has a control character"),
            "class folder with a newline: %s", e.msg);
    /* classes.json: text after the object, keys given twice or not indices, names empty, repeated or with control
     * characters; each refused naming the problem */
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"0\": \"a\", \"1\": \"b\"} junk", "text after the JSON object"},
        {"{\"0\": \"a\", \"1\": \"b\"}\n{}", "text after the JSON object"},
        {"{\"0\": \"a\", \"0\": \"b\"}", "duplicate key \"0\""},
        {"{\"0\": \"a\", \"01\": \"b\"}", "key \"01\" is not a class index"},
        {"{\"0\": \"a\", \"x\": \"b\"}", "key \"x\" is not a class index"},
        {"{\"0\": \"a\", \"1\": \"\"}", "class 1: an empty class name"},
        {"{\"0\": \"a\", \"1\": \"b\\nc\"}", "class 1: class name 'b\\nc' has a control character (byte 0x0a)"},
        {"{\"0\": \"a\", \"1\": \"b\\u007f\"}", "byte 0x7f"},
        {"{\"0\": \"a\", \"1\": \"b\", \"2\": \"a\"}", "classes 0 and 2 are both named 'a'"},
        {"{\"0\": \"a\", \"1\": 7}", "class 1 is missing or not a string"},
        {"{\"0\": \"a\", \"1\": \"b\\u0000c\"}", "a NUL character at offset 18"},
        {"{\"0\": \"a\", \"1\": \"b\"", "not valid JSON (parse error near byte"},
        {"[\"a\", \"b\"]", "not a class index map"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char **names = NULL;
        int K = 0;
        write_text(root, "classes.json", bad[k].json);
        snprintf(p, sizeof p, "%s/classes.json", root);
        vt_clearerr(&e);
        const int r = vt_classes_read(p, &names, &K, &e);
        T_CHECK(T, r == -1 && strstr(e.msg, bad[k].msg) && strstr(e.msg, p), "classes.json %s: %s", bad[k].json,
                e.msg);
        if (r == 0) vt_classes_free(names, K);
    }
    write_text(root, "classes.json", "\n {\"1\": \"b\", \"0\": \"a\"}\r\n\t ");
    char **names = NULL;
    int K = 0;
    T_CHECK(T, vt_classes_read(p, &names, &K, &e) == 0 && K == 2 && strcmp(names[0], "a") == 0 &&
                   strcmp(names[1], "b") == 0, "classes.json in any key order, whitespace around: %s", e.msg);
    if (names) vt_classes_free(names, K);
    snprintf(p, sizeof p, "cd /tmp && rm -rf '%s'", root);
    T_CHECK(T, system(p) == 0, "cleanup");
}

/* An RGB source of NR random w×h images (w, h varying per image). */
#define NR 24
typedef struct {
    uint8_t *pix[NR];
    int w[NR], h[NR];
} rgb_set;

static int rgb_get(void *ctx, int i, int chans, int min_side, vt_image *img, int *label, vt_err *e) {
    (void)min_side;
    const rgb_set *s = ctx;
    if (chans != 3) return vt_seterr(e, "rgb_set gives 3 channels");
    const size_t n = (size_t)s->w[i] * s->h[i] * 3;
    unsigned char *p = malloc(n);
    if (!p) return vt_seterr(e, "out of memory");
    memcpy(p, s->pix[i], n);
    *img = (vt_image){s->w[i], s->h[i], 3, p};
    *label = i % 3;
    return 0;
}

/* 1 if rows a[0..NR) are set's images through crop+flip cf, written directly: resize (PIL's bicubic,
 * vt_image_resize) to shorter side S, then the crop and flip drawn from the keyed rng (seed 11, epoch 4). */
static int crop_flip_direct(const rgb_set *set, const vt_crop_flip *cf, const float *a) {
    const int S = cf->size, pad = cf->pad;
    const size_t per = 3 * (size_t)S * S;
    int ok = 1;
    vt_err e = {0};
    for (int i = 0; i < NR; i++) {
        const int w = set->w[i], h = set->h[i];
        const int sw = w <= h ? S : (int)((double)S * w / h), sh = w <= h ? (int)((double)S * h / w) : S;
        unsigned char *res = malloc((size_t)sw * sh * 3);
        const vt_image img = {w, h, 3, set->pix[i]};
        ok &= res && vt_image_resize(&img, 0, 0, w, h, sw, sh, VT_INTERP_BICUBIC, res, &e) == 0;
        vt_rng k;
        vt_rng_seed(&k, vt_rng_key(11, 4, (uint64_t)i));
        const int top = (int)vt_rng_below(&k, (uint32_t)(sh - S + 2 * pad + 1)) - pad;
        const int left = (int)vt_rng_below(&k, (uint32_t)(sw - S + 2 * pad + 1)) - pad;
        const int flip = vt_rng_uniform(&k) < 0.5f;
        for (int c = 0; ok && c < 3; c++)
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++) {
                    const int sy = y + top, sx = (flip ? S - 1 - x : x) + left;
                    const float v = sy >= 0 && sy < sh && sx >= 0 && sx < sw ? res[((size_t)sy * sw + sx) * 3 + c] : 0;
                    ok &= a[i * per + ((size_t)c * S + y) * S + x] == (v / 255.0f - cf->mean[c]) / cf->std[c];
                }
        free(res);
    }
    return ok;
}

/* Transforms on RGB images of other shapes through the loader, 1 and 3 workers alike: crop+flip against the direct
 * computation; the DeiT transform (include/vitc/transforms.h) against direct calls with each sample's keyed rng. */
static void test_rgb(vt_test *T) {
    rgb_set set;
    vt_rng r;
    vt_rng_seed(&r, 5);
    for (int i = 0; i < NR; i++) {
        set.w[i] = 20 + (int)vt_rng_below(&r, 30);
        set.h[i] = 20 + (int)vt_rng_below(&r, 30);
        set.pix[i] = malloc((size_t)set.w[i] * set.h[i] * 3);
        for (int q = 0; set.pix[i] && q < set.w[i] * set.h[i] * 3; q++) set.pix[i][q] = (uint8_t)vt_rng_below(&r, 256);
    }
    const vt_source src = {NR, 3, rgb_get, NULL, &set};
    vt_crop_flip cf = {16, 3, 2, 1, {0.4f, 0.5f, 0.6f}, {0.2f, 0.25f, 0.3f}, 0};
    vt_tf_params dp = vt_tf_deit(16);
    const vt_transform tfs[2] = {vt_transform_crop_flip(&cf), vt_transform_deit(&dp, 3)};
    int idx[NR], la[NR], lb[NR];
    vt_iota(idx, NR);
    const size_t per = 3 * 16 * 16;
    float *a = calloc(NR * per, sizeof(float)), *b = calloc(NR * per, sizeof(float)), *want = calloc(per, sizeof(float));
    vt_err e = {0};
    for (int t = 0; t < 2; t++) {
        vt_loader *L1 = vt_loader_new(&src, &tfs[t], BATCH, 1, 1, VT_BAD_REPLACE, &e);
        vt_loader *L3 = vt_loader_new(&src, &tfs[t], BATCH, 3, 3, VT_BAD_REPLACE, &e);
        int ok = L1 && L3 && vt_loader_start(L1, idx, NR, 0, 11, 4, &e) == 3 &&
                 vt_loader_start(L3, idx, NR, 0, 11, 4, &e) == 3;
        for (int k = 0; ok && k < 3; k++)
            ok = vt_loader_next(L1, a + k * BATCH * per, la + k * BATCH, &e) == BATCH &&
                 vt_loader_next(L3, b + k * BATCH * per, lb + k * BATCH, &e) == BATCH;
        T_CHECK(T, ok && memcmp(a, b, NR * per * sizeof(float)) == 0 && memcmp(la, lb, sizeof la) == 0,
                "transform %d: 1 and 3 workers differ: %s", t, e.msg);
        vt_loader_free(L1);
        vt_loader_free(L3);
        if (t == 0) T_CHECK(T, crop_flip_direct(&set, &cf, a), "crop+flip of RGB images differs from the direct one");
        int same = 1;
        for (int i = 0; i < NR && t == 1; i++) {
            vt_rng k;
            vt_rng_seed(&k, vt_rng_key(11, 4, (uint64_t)i));
            const vt_image img = {set.w[i], set.h[i], 3, set.pix[i]};
            same &= vt_tf_deit_train(&img, &dp, &k, want, &e) == 0 && memcmp(want, a + i * per, per * 4) == 0;
        }
        if (t == 1) T_CHECK(T, same, "the DeiT transform through the loader differs from direct calls: %s", e.msg);
    }
    /* explicit keys (repeated augmentation): image 0 at every position, row j drawn from key 1000 + j */
    uint64_t keys[NR];
    int zero[NR] = {0};
    for (int j = 0; j < NR; j++) keys[j] = 1000 + (uint64_t)j;
    vt_loader *LK = vt_loader_new(&src, &tfs[1], BATCH, 2, 2, VT_BAD_REPLACE, &e);
    int ok = LK && vt_loader_start_keyed(LK, zero, keys, NR, 0, 11, 4, &e) == 3;
    for (int k = 0; ok && k < 3; k++) ok = vt_loader_next(LK, a + k * BATCH * per, la + k * BATCH, &e) == BATCH;
    const vt_image img0 = {set.w[0], set.h[0], 3, set.pix[0]};
    for (int j = 0; ok && j < NR; j++) {
        vt_rng k;
        vt_rng_seed(&k, vt_rng_key(11, 4, 1000 + (uint64_t)j));
        ok = vt_tf_deit_train(&img0, &dp, &k, want, &e) == 0 && memcmp(want, a + j * per, per * 4) == 0;
    }
    T_CHECK(T, ok && memcmp(a, a + per, per * 4) != 0, "keyed loader rows differ from direct calls with their keys: %s",
            e.msg);
    vt_loader_free(LK);
    free(a);
    free(b);
    free(want);
    for (int i = 0; i < NR; i++) free(set.pix[i]);
}

void test_loader(vt_test *T) {
    static uint8_t pix[NS * SIDE * SIDE], lab8[NS];
    vt_dataset ds;
    make_ds(&ds, pix, lab8);
    const vt_source src = vt_source_dataset(&ds);
    vt_crop_flip cf = {SIDE, 1, 3, 1, {0.25f, 0, 0}, {0.5f, 1, 1}, 0};
    const vt_transform tf = vt_transform_crop_flip(&cf);
    int idx[NS], idx2[NS];
    vt_rng r;
    vt_rng_seed(&r, 9);
    vt_iota(idx, NS);
    vt_shuffle(idx, NS, &r);
    vt_iota(idx2, NS);
    vt_shuffle(idx2, NS, &r);
    const size_t per = SIDE * SIDE, nrow = 13 * BATCH;
    float *a = calloc(nrow * per, sizeof(float)), *b = calloc(nrow * per, sizeof(float));
    int la[13 * BATCH], lb[13 * BATCH];
    vt_err e = {0};

    /* 1 worker vs 3 workers (and prefetch 1 vs 4): identical batches; the last partial batch without drop_last, its
     * rows past the end zeroed with label -1 (they had held an earlier batch's images) */
    for (size_t q = 0; q < nrow * per; q++) a[q] = 7.0f;
    for (size_t q = 0; q < nrow; q++) la[q] = 5;
    int n1 = run_epoch(&src, &tf, 1, 1, idx, NS, 0, 2, a, la, VT_BAD_REPLACE, NULL, NULL, &e);
    int tail_ok = 1;
    for (size_t q = NS * per; q < nrow * per; q++) tail_ok &= a[q] == 0.0f;
    for (size_t q = NS; q < nrow; q++) tail_ok &= la[q] == -1;
    T_CHECK(T, tail_ok, "rows past the short last batch's end are not zeroed with label -1");
    int n3 = run_epoch(&src, &tf, 3, 4, idx, NS, 0, 2, b, lb, VT_BAD_REPLACE, NULL, NULL, &e);
    T_CHECK(T, n1 == NS && n3 == NS, "rows %d %d: %s", n1, n3, e.msg);
    T_CHECK(T, memcmp(a, b, NS * per * sizeof(float)) == 0 && memcmp(la, lb, NS * sizeof(int)) == 0,
            "1 and 3 workers differ");
    int lab_ok = 1;
    for (int j = 0; j < NS; j++) lab_ok &= la[j] == lab8[idx[j]];
    T_CHECK(T, lab_ok, "labels follow the index list");
    T_CHECK(T, run_epoch(&src, &tf, 2, 2, idx, NS, 1, 2, b, lb, VT_BAD_REPLACE, NULL, NULL, &e) == 96,
            "drop_last rows");

    /* keyed draws: a sample's row is the same wherever the permutation puts it; another epoch draws anew */
    run_epoch(&src, &tf, 3, 2, idx2, NS, 0, 2, b, lb, VT_BAD_REPLACE, NULL, NULL, &e);
    int same = 1, pos2[NS];
    for (int j = 0; j < NS; j++) pos2[idx2[j]] = j;
    for (int j = 0; j < NS; j++) same &= memcmp(a + j * per, b + (size_t)pos2[idx[j]] * per, per * sizeof(float)) == 0;
    T_CHECK(T, same, "a sample's augmentation depends on its position");
    run_epoch(&src, &tf, 3, 2, idx, NS, 0, 3, b, lb, VT_BAD_REPLACE, NULL, NULL, &e);
    int differ = 0;
    for (int j = 0; j < NS; j++) differ += memcmp(a + j * per, b + j * per, per * sizeof(float)) != 0;
    T_CHECK(T, differ > NS / 2, "epoch 3 repeats epoch 2's draws (%d of %d rows differ)", differ, NS);

    /* crop+flip against torchvision's RandomCrop(padding) then flip, written directly from the draws */
    int ok = 1;
    for (int j = 0; j < NS; j++) {
        const int i = idx[j];
        vt_rng k;
        vt_rng_seed(&k, vt_rng_key(7, 2, (uint64_t)i));
        const int top = (int)vt_rng_below(&k, 2 * 3 + 1), left = (int)vt_rng_below(&k, 2 * 3 + 1);
        const int flip = vt_rng_uniform(&k) < 0.5f;
        static float padded[(SIDE + 6) * (SIDE + 6)];
        for (int y = 0; y < SIDE + 6; y++)
            for (int x = 0; x < SIDE + 6; x++) {
                const int sy = y - 3, sx = x - 3;
                padded[y * (SIDE + 6) + x] =
                    sy >= 0 && sy < SIDE && sx >= 0 && sx < SIDE ? pix[(size_t)i * per + sy * SIDE + sx] : 0;
            }
        for (int y = 0; y < SIDE; y++)
            for (int x = 0; x < SIDE; x++) {
                const int cx = flip ? SIDE - 1 - x : x;
                const float v = padded[(y + top) * (SIDE + 6) + cx + left];
                const float want = (v / 255.0f - 0.25f) / 0.5f;
                ok &= a[j * per + y * SIDE + x] == want;
            }
    }
    T_CHECK(T, ok, "crop+flip differs from the direct RandomCrop(padding=3) + flip");

    /* an abandoned epoch does not disturb the next one */
    vt_loader *L = vt_loader_new(&src, &tf, BATCH, 3, 2, VT_BAD_REPLACE, &e);
    T_CHECK(T, L && vt_loader_start(L, idx2, NS, 0, 7, 5, &e) == 13 && vt_loader_next(L, b, lb, &e) == BATCH,
            "start: %s", e.msg);
    T_CHECK(T, vt_loader_start(L, idx, NS, 0, 7, 2, &e) == 13, "restart: %s", e.msg);
    int k = 0, rr;
    while ((rr = vt_loader_next(L, b + (size_t)k * BATCH * per, lb + k * BATCH, &e)) > 0) k++;
    T_CHECK(T, rr == 0 && k == 13 && memcmp(a, b, NS * per * sizeof(float)) == 0, "after an abandoned epoch");
    vt_loader_free(L);

    /* unreadable samples: replaced by the next readable index (keyed by it), or dropped; all bad: an error */
    int badm[NS] = {0};
    badm[3] = badm[4] = badm[9] = badm[NS - 1] = 1;
    flaky fl = {src, badm};
    const vt_source fsrc = {NS, 7, flaky_get, NULL, &fl};
    int64_t skipped = 0;
    vt_iota(idx2, NS);
    int warned = 0;
    int nr = run_epoch(&fsrc, &tf, 3, 2, idx2, NS, 0, 2, b, lb, VT_BAD_REPLACE, &skipped, &warned, &e);
    T_CHECK(T, nr == NS && skipped == 4 && warned == 4, "rows %d, skipped %lld, warned %d: %s", nr,
            (long long)skipped, warned, e.msg);
    run_epoch(&src, &tf, 1, 1, idx2, NS, 0, 2, a, la, VT_BAD_REPLACE, NULL, NULL, &e);
    T_CHECK(T, memcmp(b + 3 * per, a + 5 * per, per * sizeof(float)) == 0 && lb[3] == lab8[5] && lb[4] == lab8[5] &&
                   lb[9] == lab8[10] && lb[NS - 1] == lab8[0] && memcmp(b + 10 * per, a + 10 * per, per * 4) == 0,
            "replacement is not the next readable sample");
    nr = run_epoch(&fsrc, &tf, 2, 2, idx2, NS, 0, 2, b, lb, VT_BAD_DROP, &skipped, &warned, &e);
    int zero = 1;
    for (size_t q = 0; q < per; q++) zero &= b[9 * per + q] == 0.0f;
    T_CHECK(T, nr == NS && skipped == 4 && warned == 4 && lb[9] == -1 && zero && lb[10] == lab8[10],
            "drop: %lld, warned %d", (long long)skipped, warned);
    /* labels must lie in [0, nclasses): the same samples over 6 classes make the 14 of label 6 (i % 7 == 6) bad */
    const vt_source six = {NS, 6, src.get, NULL, src.ctx};
    nr = run_epoch(&six, &tf, 2, 2, idx2, NS, 0, 2, b, lb, VT_BAD_DROP, &skipped, &warned, &e);
    T_CHECK(T, nr == NS && skipped == 14 && warned == 14 && lb[6] == -1 && lb[5] == 5 && lb[97] == -1,
            "label 6 of 6 classes: skipped %lld, warned %d, label %d", (long long)skipped, warned, lb[6]);
    for (int i = 0; i < NS; i++) badm[i] = 1;
    vt_clearerr(&e);
    T_CHECK(T, run_epoch(&fsrc, &tf, 2, 2, idx2, NS, 0, 2, b, lb, VT_BAD_REPLACE, NULL, &warned, &e) == -1 &&
                   strstr(e.msg, "none of the 100 images") && warned == NS,
            "all unreadable: warned %d: %s", warned, e.msg);

    /* images the transform refuses are skipped as unreadable ones are (replaced by the next usable index, or
     * dropped); a transform refusing every image is an error, not a hang */
    for (int i = 0; i < NS; i++) badm[i] = i == 3 || i == 4 || i == 9 || i == NS - 1;
    const vt_source nsrc = {NS, 7, narrow_get, NULL, &fl};
    vt_transform picky = tf;
    picky.apply = picky_apply;
    picky.ctx = &tf;
    vt_clearerr(&e);
    nr = run_epoch(&nsrc, &picky, 3, 2, idx2, NS, 0, 2, b, lb, VT_BAD_REPLACE, &skipped, &warned, &e);
    T_CHECK(T, nr == NS && skipped == 4 && warned == 4 &&
                   memcmp(b + 3 * per, a + 5 * per, per * sizeof(float)) == 0 &&
                   lb[3] == lab8[5] && lb[NS - 1] == lab8[0] && memcmp(b + 10 * per, a + 10 * per, per * 4) == 0,
            "refused by the transform, replaced: rows %d, skipped %lld, warned %d: %s", nr, (long long)skipped, warned,
            e.msg);
    nr = run_epoch(&nsrc, &picky, 2, 2, idx2, NS, 0, 2, b, lb, VT_BAD_DROP, &skipped, &warned, &e);
    T_CHECK(T, nr == NS && skipped == 4 && warned == 4 && lb[9] == -1 && lb[10] == lab8[10],
            "refused by the transform, dropped: %lld, warned %d", (long long)skipped, warned);
    vt_transform bad_tf = tf;
    bad_tf.apply = failing_apply;
    vt_clearerr(&e);
    T_CHECK(T, run_epoch(&src, &bad_tf, 3, 2, idx, NS, 0, 2, b, lb, VT_BAD_REPLACE, NULL, &warned, &e) == -1 &&
                   strstr(e.msg, "none of the 100 images") && warned == NS,
            "a transform refusing every image: warned %d: %s", warned, e.msg);
    vt_clearerr(&e);
    T_CHECK(T, !vt_loader_new(&src, &tf, 0, 1, 1, VT_BAD_REPLACE, &e) && strstr(e.msg, "batch 0"), "batch 0: %s",
            e.msg);
    idx2[5] = NS;
    L = vt_loader_new(&src, &tf, BATCH, 1, 1, VT_BAD_REPLACE, &e);
    vt_clearerr(&e);
    T_CHECK(T, L && vt_loader_start(L, idx2, NS, 0, 0, 0, &e) == -1 && strstr(e.msg, "out of range"), "%s", e.msg);
    vt_loader_free(L);
    free(a);
    free(b);
    test_folder_scan(T);
    test_folder_links(T);
    test_folder_name_order(T);
    test_rgb(T);
}
