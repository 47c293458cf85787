/* Allocation failures through the embedding API and the trainer: every allocation vitc's own code makes (malloc,
 * calloc, realloc, aligned_alloc, redirected here by the linker's --wrap) is made to fail in turn, the k-th of each
 * call for every k, in vitc_open and in each kind of call on an open model. Each call must then succeed (a failure
 * vitc tolerates) or fail with VITC_E_MEMORY, as the call's error or as the image's result; a model whose call failed
 * must give the same logits as before on its next call. Then one shrunk model of each family (Swin, PVTv2 + hMHSA +
 * cFFN, CSwin, Next-ViT + hMHSA + cFFN, GroupMixFormer, Refiner, SimpleViT + MSF-g2, FLatten-Swin, PVT) the same way
 * at sampled allocations of vitc_open_with, vitc_logits and vitc_stage_features: the builders' error paths. Then
 * vt_adapt_load (--init-from) at every allocation: the model loaded whole or left as it was. Then a short training
 * run (vt_train on an image folder) at sampled allocations. Built and run under ASan + UBSan (the Makefile's
 * build-asan/alloc_faults): no leak, no invalid access on any of those paths. Allocations inside other libraries
 * (libpng, cJSON, oneDNN) are not counted. Prints "N passed, N failed" as the unit tests do. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faults.h"
#include "shrink.h"
#include "test.h"
#include "vitc/adapt.h"
#include "vitc/model.h"
#include "vitc/safetensors.h"
#include "vitc/train.h"
#include "vitc/vitc.h"
#include "vitc/weights.h"

#include <stb_image_write.h>

/* The fault: when armed, the armed-th allocation from now fails (counted from arm_at, over every thread: the
 * trainer's loader threads allocate too). */
static _Atomic long armed, seen, fired;

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

static int fail_now(void) {
    const long a = armed;
    if (!a || ++seen != a) return 0;
    fired = 1;
    return 1;
}
void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { return fail_now() ? NULL : __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return fail_now() ? NULL : __real_aligned_alloc(a, n); }

static void arm_at(long k) {
    seen = 0;
    fired = 0;
    armed = k;
}

enum { N = 2, K = 10, PIX = 28 * 28, MOST = 100000 };

/* The calls under test, on model m with one input image x or image files paths (one image each: the model's cached
 * graph, for the N images of the check between two calls, is rebuilt, so the graph's allocations are counted too);
 * returns the call's status (as the API), the results' first code in *rcode (VITC_OK when none failed). */
typedef enum {
    C_LOGITS, C_CLASSIFY_TENSOR, C_CLASSIFY_PNG, C_CLASSIFY_BMP, C_CLASSIFY_PIXELS, C_LOAD_IMAGE, C_POOLED, C_CALLS
} call_t;
static const char *const call_name[C_CALLS] = {"vitc_logits",          "vitc_classify_tensor",
                                               "vitc_classify_files (PNG)", "vitc_classify_files (BMP)",
                                               "vitc_classify_pixels (RGBA)", "vitc_load_image",
                                               "vitc_pooled_features"};

static int call(call_t c, vitc_model *m, const float *x, const char *const *paths, int *rcode, vitc_error *err) {
    vitc_result res[1];
    float out[PIX];
    vitc_tensor t;
    memset(res, 0, sizeof res);
    int rc = -1;
    switch (c) {
    case C_LOGITS: rc = vitc_logits(m, x, 1, 0, out, err); break;
    case C_CLASSIFY_TENSOR: rc = vitc_classify_tensor(m, x, 1, 0, 3, res, err); break;
    case C_CLASSIFY_PNG: rc = vitc_classify_files(m, paths, 1, 3, res, err); break;
    case C_CLASSIFY_BMP: rc = vitc_classify_files(m, paths + 1, 1, 3, res, err); break;
    case C_CLASSIFY_PIXELS: { /* an RGBA picture of another size: converted to grey and resized by the library */
        unsigned char px[20 * 30 * 4];
        for (size_t i = 0; i < sizeof px; i++) px[i] = (unsigned char)(i * 37 % 251);
        const vitc_pixels img = {px, 30, 20, 4};
        rc = vitc_classify_pixels(m, &img, 1, 3, res, err);
        break;
    }
    case C_LOAD_IMAGE: rc = vitc_load_image(m, paths[0], out, err); break;
    case C_POOLED:
        rc = vitc_pooled_features(m, x, 1, 0, &t, err);
        vitc_tensor_free(&t);
        break;
    case C_CALLS: break;
    }
    *rcode = VITC_OK;
    if (rc > 0) *rcode = res[0].code;
    return rc;
}

/* vitc_open with the k-th allocation failing, for every k: a model, or NULL with VITC_E_MEMORY. */
static void check_open(vt_test *T, const char *w) {
    long k = 1, bad = 0;
    for (; k < MOST; k++) {
        vitc_error err;
        arm_at(k);
        vitc_model *m = vitc_open("vit_fmnist_tiny", w, NULL, &err);
        armed = 0;
        if (!m && err.code != VITC_E_MEMORY && bad++ < 5)
            T_CHECK(T, 0, "vitc_open, allocation %ld failing: %s (code %d)", k, err.msg, err.code);
        vitc_close(m);
        if (!fired) break;
    }
    T_CHECK(T, bad == 0 && k > 50, "vitc_open: %ld allocations, %ld failures of another kind", k - 1, bad);
}

/* Call c with the k-th allocation failing, for every k, on one open model running dtype (vitc_set_dtype; a dtype
 * this CPU cannot run is skipped); after each, the model's logits are those it gave before. */
static void check_call(vt_test *T, const char *w, call_t c, const char *dtype, const float *x,
                       const char *const *paths) {
    vitc_error err;
    vitc_model *m = vitc_open("vit_fmnist_tiny", w, NULL, &err);
    T_CHECK(T, m != NULL, "%s", err.msg);
    if (!m) return;
    if (vitc_set_dtype(m, dtype, &err) != 0) {
        T_CHECK(T, err.code == VITC_E_UNSUPPORTED, "%s: %s", dtype, err.msg);
        vitc_close(m);
        return;
    }
    float ref[N * K], again[N * K];
    T_CHECK(T, vitc_logits(m, x, N, 0, ref, &err) == 0, "%s", err.msg);
    long k = 1, bad = 0, stale = 0;
    for (; k < MOST; k++) {
        int rcode;
        arm_at(k);
        const int rc = call(c, m, x, paths, &rcode, &err);
        armed = 0;
        const int code = rc < 0 ? err.code : rcode;
        if (code != VITC_OK && code != VITC_E_MEMORY && bad++ < 5)
            T_CHECK(T, 0, "%s (%s), allocation %ld failing: code %d: %s", call_name[c], dtype, k, code,
                    rc < 0 ? err.msg : "");
        if (!fired) break;
        if (vitc_logits(m, x, N, 0, again, &err) != 0 || memcmp(again, ref, sizeof ref) != 0) stale++;
    }
    T_CHECK(T, bad == 0 && stale == 0 && k > 5, "%s (%s): %ld allocations, %ld failures of another kind, %ld times "
            "the model's next logits differed", call_name[c], dtype, k - 1, bad, stale);
    vitc_close(m);
}

/* The k-th of SAMPLES allocation indices tried in a family's run of n allocations: every one of the first SAMPLES / 2,
 * then the rest spread evenly (a model's graph makes thousands; each try rebuilds it). */
#ifndef VT_FAULT_SAMPLES
#define VT_FAULT_SAMPLES 96 /* -DVT_FAULT_SAMPLES=1000000 tries every allocation (tens of minutes) */
#endif
enum { SAMPLES = VT_FAULT_SAMPLES };
static long sample(int i, long n) {
    const int h = SAMPLES / 2;
    return n <= SAMPLES || i < h ? i + 1 : h + 1 + (n - h - 1) * (i - h) / h;
}

/* Allocation failures in vitc_open_with and in vitc_logits (vitc_stage_features where the model has stage maps) on a
 * shrunk model of each family (weights written to w first), at sampled allocation indices: VITC_E_MEMORY or success,
 * and an open model's logits unchanged after each failed call. */
static void check_family(vt_test *T, const char *name, const char *w) {
    vt_model_cfg c;
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const vt_model_cfg *base = vt_model_find(name);
    const int ok = base && vt_test_shrink(base, &c, &e) == 0 && P && vt_model_init_params(&c, P, 1, &e) == 0 &&
                   vt_params_save(P, w, &e) == 0;
    vt_params_free(P);
    T_CHECK(T, ok, "%s: %s", name, e.msg);
    if (!ok) return;
    vitc_error err;
    const int S = c.arch.img_size, C = c.arch.in_chans, maps = c.family->features != NULL;
    float *x = calloc((size_t)2 * C * S * S, sizeof(float)), *ref = calloc((size_t)2 * c.arch.num_classes, sizeof *ref),
          *again = calloc((size_t)2 * c.arch.num_classes, sizeof *again);
    for (int i = 0; x && i < 2 * C * S * S; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    vitc_model *m = x && ref && again ? vitc_open_with(name, w, NULL, c.options, &err) : NULL;
    T_CHECK(T, m && vitc_logits(m, x, 2, 0, ref, &err) == 0, "%s: %s", name, m ? err.msg : "no model");
    for (int what = 0; m && what < 2 + maps; what++) { /* 0 vitc_open_with, 1 vitc_logits, 2 vitc_stage_features */
        long n = MOST, bad = 0, stale = 0, tried = 0;
        for (int i = 0; i < SAMPLES && sample(i, n) <= n; i++, tried++) {
            vitc_tensor st[VITC_MAX_STAGES];
            int rc;
            arm_at(i == 0 ? MOST : sample(i, n)); /* the first try counts the allocations */
            if (what == 0) {
                vitc_model *mm = vitc_open_with(name, w, NULL, c.options, &err);
                rc = mm ? 0 : -1;
                vitc_close(mm);
            } else if (what == 1) {
                rc = vitc_logits(m, x, 1, 0, again, &err);
            } else {
                rc = vitc_stage_features(m, x, 1, 0, st, &err);
                for (int j = 0; j < VITC_MAX_STAGES; j++) vitc_tensor_free(&st[j]);
            }
            armed = 0;
            if (i == 0) {
                n = seen;
                continue;
            }
            if (rc < 0 && err.code != VITC_E_MEMORY && bad++ < 3)
                T_CHECK(T, 0, "%s: call %d, allocation %ld of %ld failing: %s (code %d)", name, what, sample(i, n), n,
                        err.msg, err.code);
            if (what && (vitc_logits(m, x, 2, 0, again, &err) != 0 ||
                         memcmp(again, ref, sizeof(float) * 2 * (size_t)c.arch.num_classes) != 0))
                stale++;
        }
        T_CHECK(T, bad == 0 && stale == 0 && n > 5, "%s (%s): call %d: %ld allocations, %ld tried, %ld failures of "
                "another kind, %ld times the next logits differed", name, c.options, what, n, tried - 1, bad, stale);
    }
    vitc_close(m);
    free(x);
    free(ref);
    free(again);
}

/* vt_params_save of vit_fmnist_tiny's weights over the whole file at w with the k-th allocation failing, for every k:
 * 0, or -1 with VT_E_NOMEM, and w whole either way (the old file or the new: written atomically). */
static void check_save(vt_test *T, const char *w) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    if (!P || vt_model_init_params(vt_model_find("vit_fmnist_tiny"), P, 2, &e)) {
        T_CHECK(T, 0, "%s", e.msg);
        vt_params_free(P);
        return;
    }
    long k = 1, bad = 0, torn = 0;
    for (; k < MOST; k++) {
        vt_err se = {0}, oe = {0};
        arm_at(k);
        const int rc = vt_params_save(P, w, &se);
        armed = 0;
        if (rc != 0 && se.code != VT_E_NOMEM && bad++ < 3)
            T_CHECK(T, 0, "vt_params_save, allocation %ld failing: %s (code %d)", k, se.msg, se.code);
        vt_st_file f;
        if (vt_st_open(w, &f, &oe) != 0) {
            if (torn++ < 3) T_CHECK(T, 0, "vt_params_save, allocation %ld failing: %s is not whole: %s", k, w, oe.msg);
        } else {
            vt_st_close(&f);
        }
        if (!fired) break;
    }
    T_CHECK(T, bad == 0 && torn == 0 && k > 5, "vt_params_save: %ld allocations, %ld failures of another kind, %ld "
            "files not whole", k - 1, bad, torn);
    vt_params_free(P);
}

/* Every tensor of P, one after another, into a new buffer (NULL: out of memory; not counted, the fault disarmed). */
static float *params_copy(const vt_params *P, size_t *n) {
    *n = 0;
    for (int i = 0; i < P->n; i++) *n += (size_t)P->t[i]->numel;
    float *c = __real_malloc(sizeof(float) * (*n + 1)), *w = c;
    for (int i = 0; c && i < P->n; w += P->t[i]->numel, i++)
        memcpy(w, P->t[i]->data, sizeof(float) * (size_t)P->t[i]->numel);
    return c;
}

/* vt_adapt_load (--init-from) of 10-class, 3-channel 28 px weights into a 2-class, 1-channel 36 px model (the head
 * kept, pos_embed resized, the patch embedding summed over RGB) with the k-th allocation failing, for every k: 0 with
 * the tensors of a load that never failed, or -1 with VT_E_NOMEM and the model as it was. */
static void check_adapt(vt_test *T, const char *dir) {
    char rgb[128];
    snprintf(rgb, sizeof rgb, "%s/rgb.safetensors", dir);
    vt_err e = {0};
    vt_model_overrides ov = vt_model_no_overrides();
    vt_model_cfg c3, c1;
    ov.in_chans = 3;
    vt_params *S = vt_params_new(&e), *P = vt_params_new(&e);
    int ok = S && P && vt_model_configure(vt_model_find("vit_fmnist_tiny"), &ov, &c3, &e) == 0 &&
             vt_model_init_params(&c3, S, 1, &e) == 0 && vt_params_save(S, rgb, &e) == 0;
    ov.in_chans = 1, ov.num_classes = 2, ov.img_size = 36;
    ok = ok && vt_model_configure(vt_model_find("vit_fmnist_tiny"), &ov, &c1, &e) == 0 &&
         vt_model_init_params(&c1, P, 2, &e) == 0;
    size_t n = 0, m = 0;
    float *fresh = ok ? params_copy(P, &n) : NULL, *want = NULL;
    ok = ok && fresh && vt_adapt_load(P, 2, 1, 0, 0, rgb, NULL, &e) == 0 && (want = params_copy(P, &m)) != NULL;
    T_CHECK(T, ok, "adapt-load set-up: %s", e.msg);
    long k = 1, bad = 0, wrong = 0;
    for (; ok && k < MOST; k++) {
        for (int i = 0, o = 0; i < P->n; o += (int)P->t[i]->numel, i++) /* back to the fresh model */
            memcpy(P->t[i]->data, fresh + o, sizeof(float) * (size_t)P->t[i]->numel);
        vt_err ae = {0};
        arm_at(k);
        const int rc = vt_adapt_load(P, 2, 1, 0, 0, rgb, NULL, &ae);
        armed = 0;
        size_t got_n = 0;
        float *got = params_copy(P, &got_n);
        if (rc != 0 && ae.code != VT_E_NOMEM && bad++ < 3)
            T_CHECK(T, 0, "vt_adapt_load, allocation %ld failing: %s (code %d)", k, ae.msg, ae.code);
        if (got && memcmp(got, rc == 0 ? want : fresh, sizeof(float) * n) != 0 && wrong++ < 3)
            T_CHECK(T, 0, "vt_adapt_load, allocation %ld failing: rc %d but the model %s", k, rc,
                    rc == 0 ? "differs from a load that never failed" : "changed");
        free(got);
        if (!fired) break;
    }
    T_CHECK(T, ok && bad == 0 && wrong == 0 && k > 3, "vt_adapt_load: %ld allocations, %ld failures of another kind, "
            "%ld models half-loaded or wrong", k - 1, bad, wrong);
    free(fresh);
    free(want);
    vt_params_free(S);
    vt_params_free(P);
    unlink(rgb);
}

/* A training run (one epoch of vit_fmnist_tiny with 2 classes on an image folder of 8 + 4 PNGs, with a checkpoint,
 * metrics and curves) with sampled allocations failing: each run succeeds or fails with a message, leaks nothing,
 * and leaves run_dir's checkpoint, when there is one, whole (written atomically, the previous run's or its own). */
static void check_train(vt_test *T, const char *dir) {
    char data[128], run[128], ck[160], p[300];
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", run);
    vt_model_cfg c;
    vt_train_opts o;
    vt_err e = {0};
    T_CHECK(T, vt_faults_folder(dir, data, sizeof data) == 0, "the image folder in %s", dir);
    T_CHECK(T, vt_faults_run(data, run, &c, &o, &e) == 0, "%s", e.msg);
    long n = MOST, failed = 0, silent = 0, torn = 0, tried = 0;
    for (int i = 0; i < SAMPLES && sample(i, n) <= n; i++, tried++) {
        int saved[2];
        vt_err te = {0};
        vt_faults_quiet(1, saved);
        arm_at(i == 0 ? MOST : sample(i, n)); /* the first run counts the allocations */
        const int rc = vt_train(&c, &o, &te);
        armed = 0;
        vt_faults_quiet(0, saved);
        if (i == 0) {
            n = seen;
            T_CHECK(T, rc == 0, "the training run without a fault: %s", te.msg);
            continue;
        }
        failed += rc != 0;
        if (rc != 0 && !te.msg[0] && silent++ < 3) T_CHECK(T, 0, "allocation %ld of %ld: no message", sample(i, n), n);
        vt_st_file f;
        vt_err se = {0};
        if (access(ck, F_OK) == 0) {
            if (vt_st_open(ck, &f, &se) != 0) {
                if (torn++ < 3) T_CHECK(T, 0, "allocation %ld: the checkpoint is not whole: %s", sample(i, n), se.msg);
            } else {
                vt_st_close(&f);
            }
        }
    }
    printf("training: %ld allocations, %ld tried, %ld runs failed\n", n, tried - 1, failed);
    T_CHECK(T, silent == 0 && torn == 0 && n > 100 && failed > 0, "training: %ld allocations, %ld tried, %ld runs "
            "failed, %ld without a message, %ld torn checkpoints", n, tried - 1, failed, silent, torn);
    snprintf(p, sizeof p, "rm -rf '%s' '%s'", data, run);
    T_CHECK(T, system(p) == 0, "%s", p);
}

int main(void) {
    vt_test T = {0, 0, "api_alloc"};
    char dir[] = "/tmp/vitc_alloc_XXXXXX", w[64], png[64], bmp[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(w, sizeof w, "%s/w.safetensors", dir);
    snprintf(png, sizeof png, "%s/a.png", dir);
    snprintf(bmp, sizeof bmp, "%s/a.bmp", dir);
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int made = P && vt_model_init_params(vt_model_find("vit_fmnist_tiny"), P, 1, &e) == 0 &&
                     vt_params_save(P, w, &e) == 0;
    vt_params_free(P);
    T_CHECK(&T, made, "weights: %s", e.msg);
    static unsigned char rgb[60 * 40 * 3];
    for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = (unsigned char)(i * 31 % 251);
    T_CHECK(&T, stbi_write_png(png, 60, 40, 3, rgb, 60 * 3) && stbi_write_bmp(bmp, 60, 40, 3, rgb), "images");
    float x[N * PIX];
    for (int i = 0; i < N * PIX; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    const char *paths[2] = {png, bmp};
    if (made) {
        check_open(&T, w);
        check_save(&T, w);
        check_adapt(&T, dir);
        for (int c = 0; c < C_CALLS; c++) check_call(&T, w, (call_t)c, "fp32", x, paths);
        check_call(&T, w, C_LOGITS, "int8", x, paths); /* the quantised kernels' buffers */
        check_call(&T, w, C_LOGITS, "bf16", x, paths);
        static const char *const families[] = {"swin_fmnist_tiny", "pvt_v2_b1_hmhsa_cffn", "cswin_tiny_224",
                                               "nextvit_small_hmhsa_cffn", "groupmixformer_test", "refiner_vit_s",
                                               "simplevit_ti_msf_g2", "flatten_swin_tiny", "pvt_tiny",
                                               "swin_t_msf_g2" /* torchvision's Swin layout */};
        for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) check_family(&T, families[i], w);
    }
    check_train(&T, dir);
    unlink(w);
    unlink(png);
    unlink(bmp);
    rmdir(dir);
    printf("%d passed, %d failed\n", T.pass, T.fail);
    return T.fail ? 1 : 0;
}
