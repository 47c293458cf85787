/* Allocation failures through the embedding API: every allocation vitc's own code makes (malloc, calloc, realloc,
 * aligned_alloc, redirected here by the linker's --wrap) is made to fail in turn, the k-th of each call for every k,
 * in vitc_open and in each kind of call on an open model. Each call must then succeed (a failure vitc tolerates) or
 * fail with VITC_E_MEMORY, as the call's error or as the image's result; a model whose call failed must give the
 * same logits as before on its next call. Built and run under ASan + UBSan (the Makefile's build-asan/api_alloc):
 * no leak, no invalid access on any of those paths. Allocations inside other libraries (libpng, cJSON, oneDNN) are
 * not counted. Prints "N passed, N failed" as the unit tests do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "vitc/model.h"
#include "vitc/vitc.h"
#include "vitc/weights.h"

#include <stb_image_write.h>

/* The fault: when armed, the armed-th allocation from now fails (counted from arm_at). */
static long armed, seen, fired;

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

static int fail_now(void) {
    if (!armed || ++seen != armed) return 0;
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
typedef enum { C_LOGITS, C_CLASSIFY_TENSOR, C_CLASSIFY_PNG, C_CLASSIFY_BMP, C_LOAD_IMAGE, C_POOLED, C_CALLS } call_t;
static const char *const call_name[C_CALLS] = {"vitc_logits",         "vitc_classify_tensor", "vitc_classify_files (PNG)",
                                               "vitc_classify_files (BMP)", "vitc_load_image", "vitc_pooled_features"};

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

/* Call c with the k-th allocation failing, for every k, on one open model; after each, the model's logits are
 * those it gave before. */
static void check_call(vt_test *T, const char *w, call_t c, const float *x, const char *const *paths) {
    vitc_error err;
    vitc_model *m = vitc_open("vit_fmnist_tiny", w, NULL, &err);
    T_CHECK(T, m != NULL, "%s", err.msg);
    if (!m) return;
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
            T_CHECK(T, 0, "%s, allocation %ld failing: code %d: %s", call_name[c], k, code, rc < 0 ? err.msg : "");
        if (!fired) break;
        if (vitc_logits(m, x, N, 0, again, &err) != 0 || memcmp(again, ref, sizeof ref) != 0) stale++;
    }
    T_CHECK(T, bad == 0 && stale == 0 && k > 5, "%s: %ld allocations, %ld failures of another kind, %ld times the "
            "model's next logits differed", call_name[c], k - 1, bad, stale);
    vitc_close(m);
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
        for (int c = 0; c < C_CALLS; c++) check_call(&T, w, (call_t)c, x, paths);
    }
    unlink(w);
    unlink(png);
    unlink(bmp);
    rmdir(dir);
    printf("%d passed, %d failed\n", T.pass, T.fail);
    return T.fail ? 1 : 0;
}
