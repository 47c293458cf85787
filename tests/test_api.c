/* The embedding API (include/vitc/api.h): errors returned with clear messages (unknown model, bad options, missing or
 * mismatched weights, NULL arguments, NaN inputs, bad pixel buffers, fixed-size models at another size), results equal
 * to the library's own predictor (logits, top-k, pooled features = the head's input, stage maps at two sizes),
 * batching that does not change results, the caller's thread setting and floating-point mode restored, one model
 * called from two threads, separate models run at once from separate caller threads. Also runs under ASan + UBSan
 * with leak detection (build-asan/unit). */
#include <fenv.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <stb_image_write.h>

#include "test.h"
#include "vitc/dataset.h"
#include "vitc/predict.h"
#include "vitc/vitc.h"
#include "vitc/weights.h"

/* Writes the initial weights of model `name` (seed 1) to path; 0 on success. */
static int write_weights(const char *name, const char *path) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int rc = !P || vt_model_init_params(vt_model_find(name), P, 1, &e) || vt_params_save(P, path, &e);
    if (rc) fprintf(stderr, "write_weights %s: %s\n", name, e.msg);
    vt_params_free(P);
    return rc;
}

/* n pseudo-random values in [-2, 2). */
static float *random_input(int64_t n, unsigned seed) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; x && i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1 << 24) * 4.0f - 2.0f;
    }
    return x;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double d = 0.0;
    for (int64_t i = 0; i < n; i++) d = t_worse(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* 0.4's code took the last 4 bytes of 0.3's message arrays: sizes and every other offset are 0.3's (LP64). */
_Static_assert(sizeof(vitc_error) == 512 && offsetof(vitc_error, code) == 508, "vitc_error's 0.3 layout");
_Static_assert(offsetof(vitc_result, code) == offsetof(vitc_result, error) + 508 &&
                   sizeof(vitc_result) == offsetof(vitc_result, error) + 512,
               "vitc_result's 0.3 layout");

static void check_open_errors(vt_test *T, const char *w) {
    vitc_error err;
    vitc_options o;
    vitc_options_init(&o);
    const int A = VITC_E_ARGUMENT;
    T_CHECK(T, !vitc_open("no_such_model", w, NULL, &err) && strstr(err.msg, "unknown model 'no_such_model'") &&
                   err.code == VITC_E_MODEL, "%s (%d)", err.msg, err.code);
    T_CHECK(T, !vitc_open("Vit_Fmnist_Tiny", w, NULL, &err) && strstr(err.msg, "did you mean 'vit_fmnist_tiny'?"),
            "%s", err.msg);
    T_CHECK(T, !vitc_open(NULL, w, NULL, &err) && err.msg[0] && err.code == A, "NULL name");
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", NULL, NULL, &err) && strstr(err.msg, "no weights") && err.code == A,
            "%s (%d)", err.msg, err.code);
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", "/nonexistent/w.safetensors", NULL, &err) &&
                   strstr(err.msg, "/nonexistent/w.safetensors") && err.code == VITC_E_FILE, "%s (%d)", err.msg,
            err.code);
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", "/tmp", NULL, &err) && strstr(err.msg, "folder") &&
                   err.code == VITC_E_FILE, "a folder: %s (%d)", err.msg, err.code);
    T_CHECK(T, !vitc_open("vit_fmnist_small", w, NULL, &err) && strstr(err.msg, "shape mismatch") &&
                   err.code == VITC_E_WEIGHTS, "%s (%d)", err.msg, err.code);
    T_CHECK(T, !vitc_open("nope", w, NULL, NULL), "a NULL error pointer is fine");
    o.threads = -1;
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", w, &o, &err) && strstr(err.msg, "threads -1") && err.code == A, "%s",
            err.msg);
    vitc_options_init(&o);
    o.crop_pct = NAN;
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", w, &o, &err) && strstr(err.msg, "crop_pct") && err.code == A, "%s",
            err.msg);
    o.crop_pct = 0.0015f; /* within (0, 10], but 28 / 0.0015 px is past the resize limit: every image would fail */
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", w, &o, &err) && strstr(err.msg, "crop_pct 0.0015 resizes 28 px") &&
                   err.code == A, "%s (%d)", err.msg, err.code);
    o.crop_pct = 0.0018f; /* 15555 px a side is within the side limit, but 15555² pixels are past the image limit */
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", w, &o, &err) && strstr(err.msg, "crop_pct 0.0018 resizes 28x28 px") &&
                   strstr(err.msg, "more than the 178956970 pixels") && err.code == A, "%s (%d)", err.msg, err.code);
    vitc_options_init(&o);
    o.img_size = 20; /* the ViT's position embeddings fix its size: the file holds no model of that size */
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", w, &o, &err) && strstr(err.msg, "weights made at --img-size 28") &&
                   err.code == VITC_E_WEIGHTS, "%s (%d)", err.msg, err.code);
    /* the file cut short, and a file that is not safetensors: the weights' fault, not the system's */
    char cut[4200], junk[4200];
    snprintf(cut, sizeof cut, "%s.cut", w);
    snprintf(junk, sizeof junk, "%s.junk", w);
    FILE *in = fopen(w, "rb"), *oc = fopen(cut, "wb"), *oj = fopen(junk, "wb");
    unsigned char buf[4096];
    const size_t got = in ? fread(buf, 1, sizeof buf, in) : 0;
    if (oc) fwrite(buf, 1, got / 2, oc);
    if (oj) fputs("not weights at all, just some text\n", oj);
    if (in) fclose(in);
    if (oc) fclose(oc);
    if (oj) fclose(oj);
    T_CHECK(T, got > 64 && !vitc_open("vit_fmnist_tiny", cut, NULL, &err) && err.code == VITC_E_WEIGHTS,
            "truncated: %s (%d)", err.msg, err.code);
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", junk, NULL, &err) && err.code == VITC_E_WEIGHTS,
            "not safetensors: %s (%d)", err.msg, err.code);
    unlink(cut);
    unlink(junk);
}

static void check_vit(vt_test *T, const char *w, const char *dir) {
    vitc_error err;
    vitc_options o;
    vitc_options_init(&o);
    o.threads = 1;
    o.batch = 2; /* 5 images: batches of 2, 2 and 1 */
    vitc_model *m = vitc_open("vit_fmnist_tiny", w, &o, &err);
    T_CHECK(T, m != NULL, "%s", err.msg);
    if (!m) return;
    vitc_info info;
    vitc_get_info(m, &info);
    T_CHECK(T, strcmp(info.name, "vit_fmnist_tiny") == 0 && info.img_size == 28 && info.in_chans == 1 &&
                   info.num_classes == 10 && info.params == 139018 && !info.any_size && info.gmacs > 0,
            "info %s %d %d %d %lld", info.name, info.img_size, info.in_chans, info.num_classes, (long long)info.params);
    const int n = 5, per = 28 * 28, K = 10;
    float *x = random_input((int64_t)n * per, 7), logits[5 * 10], ref[5 * 10];
    /* the library's own predictor on the same weights, batch 16 */
    vt_err e = {0};
    vt_params *P = vt_model_load(vt_model_find("vit_fmnist_tiny"), w, &e);
    vt_predictor p = {0};
    T_CHECK(T, P && vt_predictor_init(&p, vt_model_find("vit_fmnist_tiny"), P, 16, VT_PRED_LOGITS | VT_PRED_POOLED,
                                      &e) == 0, "%s", e.msg);
    if (p.g) {
        vt_predictor_forward(&p, x, n);
        memcpy(ref, p.logits->data, sizeof ref);
    }
    const int threads = omp_get_max_threads();
#if defined(__SSE2__)
    const unsigned csr = _mm_getcsr();
#endif
    T_CHECK(T, vitc_logits(m, x, n, 0, logits, &err) == 0, "%s", err.msg);
    T_CHECK(T, max_diff(logits, ref, n * K) < 1e-5, "logits differ from the predictor's by %g",
            max_diff(logits, ref, n * K));
    /* the caller's rounding mode neither moves the results nor is lost (it had rounded the calling thread's work);
     * the SSE mode is what the kernels use, and fegetround reads the x87 one */
    float up[5 * 10];
    fesetround(FE_UPWARD);
    const int rc_up = vitc_logits(m, x, n, 0, up, &err);
    const int mode = (int)(_mm_getcsr() & 0x6000u);
    fesetround(FE_TONEAREST);
    T_CHECK(T, rc_up == 0 && memcmp(up, logits, sizeof up) == 0 && mode == _MM_ROUND_UP,
            "under FE_UPWARD: logits off by %g, mode %s", max_diff(up, logits, n * K),
            mode == _MM_ROUND_UP ? "kept" : "lost");
    /* finite inputs far outside an image's range: at 1e15 and 1e19 the LayerNorms see the same directions (at 1e19
     * their float sums overflowed: the logits came out wrong) */
    float *big = malloc(sizeof(float) * (size_t)n * per), l15[5 * 10], l19[5 * 10];
    const float scales[2] = {1e15f, 1e19f};
    float *outs[2] = {l15, l19};
    int rcs[2] = {0, 0};
    for (int s = 0; big && s < 2; s++) {
        for (int i = 0; i < n * per; i++) big[i] = x[i] * scales[s];
        rcs[s] = vitc_logits(m, big, n, 0, outs[s], &err);
    }
    T_CHECK(T, big && rcs[0] == 0 && rcs[1] == 0 && max_diff(l15, l19, n * K) < 1e-4,
            "inputs at 1e15 and 1e19 give the same logits: %g", big ? max_diff(l15, l19, n * K) : -1.0);
    free(big);
    /* weights that overflow on an input (a head of ±3e38): the raw-tensor calls fail as the classifying calls do
     * (they returned the NaN / Inf logits as a success) */
    char wbig[4200];
    snprintf(wbig, sizeof wbig, "%s/overflow.safetensors", dir);
    vt_tensor *hbig = P ? vt_params_find(P, "head.weight") : NULL;
    float *keep = hbig ? malloc(sizeof(float) * (size_t)hbig->numel) : NULL;
    int saved = 0;
    if (keep) {
        memcpy(keep, hbig->data, sizeof(float) * (size_t)hbig->numel);
        for (int64_t i = 0; i < hbig->numel; i++) hbig->data[i] = i % 2 ? -3e38f : 3e38f;
        saved = vt_params_save(P, wbig, &e) == 0;
        memcpy(hbig->data, keep, sizeof(float) * (size_t)hbig->numel);
        free(keep);
    }
    vitc_model *mo = saved ? vitc_open("vit_fmnist_tiny", wbig, &o, &err) : NULL;
    float lbig[5 * 10];
    vitc_tensor po;
    /* the classifying call on them: every image fails, and vitc_int8_layers says the graph ran (it had kept 0 / 0) */
    vitc_result rbig[5];
    int lin = 0, q8l = -1;
    T_CHECK(T, mo && vitc_classify_tensor(mo, x, n, 0, 1, rbig, &err) == n && !rbig[0].ok, "overflowing weights: "
            "every image fails (%s)", err.msg);
    vitc_int8_layers(mo, &lin, &q8l);
    T_CHECK(T, lin > 0 && q8l == 0, "... and vitc_int8_layers counts the layers that ran: %d of %d", q8l, lin);
    T_CHECK(T, mo && vitc_logits(mo, x, n, 0, lbig, &err) != 0 && err.code == VITC_E_FAILED &&
                   strstr(err.msg, "not finite"),
            "overflowing weights: non-finite logits refused (%d): %s", err.code, err.msg);
    T_CHECK(T, mo && vitc_pooled_features(mo, x, n, 0, &po, &err) == 0 && po.data, "... the pooled features are finite "
            "(the head is not in them): %s", err.msg);
    vitc_tensor_free(&po);
    vitc_close(mo);
    unlink(wbig);
    T_CHECK(T, omp_get_max_threads() == threads, "thread setting restored: %d vs %d", omp_get_max_threads(), threads);
#if defined(__SSE2__)
    T_CHECK(T, _mm_getcsr() == csr, "floating-point mode restored: %x vs %x", _mm_getcsr(), csr);
#endif
    /* int8 linear layers (VITC_GEMM=onednn: every shape, as this small model's are below the speed rule's): near
     * the fp32 logits, not equal; fp32 again gives them back; unknown dtypes are refused */
    float q8[5 * 10], back[5 * 10];
    setenv("VITC_GEMM", "onednn", 1);
    T_CHECK(T, vitc_set_dtype(m, "int8", &err) == 0 && vitc_logits(m, x, n, 0, q8, &err) == 0, "int8: %s", err.msg);
    T_CHECK(T, vitc_set_dtype(m, "fp32", &err) == 0 && vitc_logits(m, x, n, 0, back, &err) == 0, "fp32: %s", err.msg);
    setenv("VITC_GEMM", "fast", 1); /* a bad library name is the caller's argument, not the CPU's limit */
    T_CHECK(T, vitc_set_dtype(m, "bf16", &err) != 0 && err.code == VITC_E_ARGUMENT && strstr(err.msg, "'fast'"),
            "VITC_GEMM=fast (%d): %s", err.code, err.msg);
    unsetenv("VITC_GEMM");
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n * K; i++) lo = fmin(lo, ref[i]), hi = fmax(hi, ref[i]);
    T_CHECK(T, max_diff(q8, ref, n * K) > 0.0 && max_diff(q8, ref, n * K) < 0.05 * (hi - lo),
            "int8 logits differ from fp32 by %g (range %g)", max_diff(q8, ref, n * K), hi - lo);
    T_CHECK(T, max_diff(back, ref, n * K) < 1e-5, "fp32 after int8: %g", max_diff(back, ref, n * K));
    /* bf16 (where the CPU has native bf16; else refused, saying why): near the fp32 logits, not equal */
    float b16[5 * 10];
    if (vitc_set_dtype(m, "bf16", &err) == 0) {
        T_CHECK(T, vitc_logits(m, x, n, 0, b16, &err) == 0, "bf16: %s", err.msg);
        T_CHECK(T, max_diff(b16, ref, n * K) > 0.0 && max_diff(b16, ref, n * K) < 0.02 * (hi - lo),
                "bf16 logits differ from fp32 by %g (range %g)", max_diff(b16, ref, n * K), hi - lo);
    } else {
        T_CHECK(T, strstr(err.msg, "native bf16") != NULL && err.code == VITC_E_UNSUPPORTED, "bf16 refused: %s (%d)",
                err.msg, err.code);
    }
    T_CHECK(T, vitc_set_dtype(m, "fp32", &err) == 0, "fp32 again: %s", err.msg);
    T_CHECK(T, vitc_set_dtype(m, "fp16", &err) == -1 && strstr(err.msg, "unknown dtype 'fp16'") &&
                   err.code == VITC_E_ARGUMENT, "%s", err.msg);
    T_CHECK(T, vitc_set_dtype(m, NULL, &err) == -1 && vitc_set_dtype(NULL, "int8", &err) == -1, "NULL arguments");
    /* top-k from tensors: the most probable class is the argmax, labels are Fashion-MNIST's, probabilities sorted */
    vitc_result res[5];
    T_CHECK(T, vitc_classify_tensor(m, x, n, 0, 3, res, &err) == 0, "%s", err.msg);
    for (int i = 0; i < n; i++) {
        int am = 0;
        for (int j = 1; j < K; j++) am = logits[i * K + j] > logits[i * K + am] ? j : am;
        T_CHECK(T, res[i].ok && res[i].k == 3 && res[i].index[0] == am && res[i].prob[0] >= res[i].prob[1] &&
                       res[i].prob[1] >= res[i].prob[2] && res[i].prob[0] <= 1.0 && res[i].label[0] &&
                       strcmp(res[i].label[0], vt_fmnist_class_name(am)) == 0,
                "image %d: top-1 %d (argmax %d)", i, res[i].index[0], am);
    }
    /* pooled features: (n, 64), and head(pooled) gives the logits */
    vitc_tensor pooled = {0};
    T_CHECK(T, vitc_pooled_features(m, x, n, 0, &pooled, &err) == 0 && pooled.ndim == 2 && pooled.shape[0] == n &&
                   pooled.shape[1] == 64, "%s", err.msg);
    const vt_tensor *hw = P ? vt_params_find(P, "head.weight") : NULL, *hb = P ? vt_params_find(P, "head.bias") : NULL;
    double herr = pooled.data && hw && hb ? 0.0 : 1.0;
    for (int i = 0; herr < 1.0 && i < n; i++)
        for (int j = 0; j < K; j++) {
            double v = hb->data[j];
            for (int d = 0; d < 64; d++) v += (double)hw->data[j * 64 + d] * pooled.data[i * 64 + d];
            herr = t_worse(herr, fabs(v - logits[i * K + j]));
        }
    T_CHECK(T, herr < 1e-4, "head(pooled) vs logits: %g", herr);
    if (p.g) T_CHECK(T, pooled.data && max_diff(pooled.data, p.pooled->data, n * 64) < 1e-5, "pooled vs predictor");
    vitc_tensor_free(&pooled);
    float *again = malloc(sizeof(float) * (size_t)n * K); /* logits now from the pooled features' graph */
    T_CHECK(T, again && vitc_logits(m, x, n, 0, again, &err) == 0 && max_diff(again, logits, n * K) == 0,
            "logits after pooled features (their graph reused): %s", err.msg);
    free(again);
    T_CHECK(T, pooled.data == NULL && pooled.ndim == 0, "tensor freed and zeroed");
    /* bad inputs: NaN, other sizes, no stage maps, NULL arrays, k out of range */
    x[per + 3] = NAN;
    const int A = VITC_E_ARGUMENT;
    T_CHECK(T, vitc_logits(m, x, n, 0, logits, &err) == -1 && strstr(err.msg, "image 1") && strstr(err.msg, "NaN") &&
                   err.code == A, "%s (%d)", err.msg, err.code);
    T_CHECK(T, vitc_classify_tensor(m, x, n, 0, 3, res, &err) == 1 && res[0].ok && !res[1].ok &&
                   strstr(res[1].error, "NaN") && res[1].code == A && res[2].ok && res[0].code == VITC_OK &&
                   err.code == VITC_OK && !err.msg[0], "NaN image: %d %s (%d)", res[1].ok, res[1].error, res[1].code);
    x[per + 3] = 0.0f;
    T_CHECK(T, vitc_logits(m, x, 1, 20, logits, &err) == -1 && strstr(err.msg, "takes 28×28 inputs, not 20×20") &&
                   err.code == A, "%s (%d)", err.msg, err.code);
    vitc_tensor maps[VITC_MAX_STAGES];
    memset(maps, 0xA5, sizeof maps); /* garbage, as an embedder's uninitialised array */
    T_CHECK(T, vitc_stage_features(m, x, 1, 0, maps, &err) == -1 && strstr(err.msg, "no stage feature maps") &&
                   err.code == A, "%s (%d)", err.msg, err.code);
    T_CHECK(T, vitc_classify_tensor(m, x, 1, 20, 3, res, &err) == -1 && strstr(err.msg, "not 20×20") && err.code == A,
            "a size the model refuses: %s (%d)", err.msg, err.code);
    T_CHECK(T, vitc_set_dtype(NULL, "fp32", &err) == -1 && err.code == A, "no model: %s (%d)", err.msg, err.code);
    int zeroed = 1;
    for (int i = 0; i < VITC_MAX_STAGES; i++) zeroed &= maps[i].data == NULL && maps[i].ndim == 0;
    T_CHECK(T, zeroed, "vitc_stage_features on error: every map zeroed (safe to free)");
    memset(&pooled, 0xA5, sizeof pooled);
    T_CHECK(T, vitc_pooled_features(m, NULL, 1, 0, &pooled, &err) == -1 && pooled.data == NULL && pooled.ndim == 0,
            "vitc_pooled_features on error: out zeroed: %s", err.msg);
    T_CHECK(T, vitc_logits(m, NULL, 1, 0, logits, &err) == -1 && strstr(err.msg, "NULL") && err.code == A, "%s",
            err.msg);
    T_CHECK(T, vitc_classify_tensor(m, x, 1, 0, 0, res, &err) == -1 && strstr(err.msg, "k = 0"), "%s", err.msg);
    T_CHECK(T, vitc_classify_tensor(m, x, 0, 0, 1, res, &err) == -1 && strstr(err.msg, "image count 0"), "%s",
            err.msg);
    T_CHECK(T, vitc_logits(m, x, 1, -3, logits, &err) == -1 && strstr(err.msg, "size -3") && err.code == A, "%s",
            err.msg);
    /* pixels and files: an RGB buffer converts to L as the decoder does; a PNG of it classifies the same */
    unsigned char rgb[40 * 30 * 3];
    for (int i = 0; i < (int)sizeof rgb; i++) rgb[i] = (unsigned char)(i * 97 % 251);
    char png[4200];
    snprintf(png, sizeof png, "%s/img.png", dir);
    T_CHECK(T, stbi_write_png(png, 40, 30, 3, rgb, 40 * 3) != 0, "write %s", png);
    vitc_pixels px[3] = {{rgb, 40, 30, 3}, {NULL, 40, 30, 3}, {rgb, 40, 30, 5}};
    char bad[4200]; /* a PNG signature, then garbage */
    snprintf(bad, sizeof bad, "%s/bad.png", dir);
    FILE *bf = fopen(bad, "wb");
    if (bf) {
        fputs("\x89PNG\r\n\x1a\n garbage after the signature", bf);
        fclose(bf);
    }
    const char *paths[4] = {png, "/nonexistent.png", png, bad};
    vitc_result rp[3], rf[4];
    T_CHECK(T, vitc_classify_pixels(m, px, 3, 5, rp, &err) == 2 && rp[0].ok && !rp[1].ok &&
                   strstr(rp[1].error, "no pixel data") && rp[1].code == A && !rp[2].ok &&
                   strstr(rp[2].error, "5 channels") && rp[2].code == A,
            "pixels: %s | %s (%d %d)", rp[1].error, rp[2].error, rp[1].code, rp[2].code);
    T_CHECK(T, vitc_classify_files(m, paths, 4, 5, rf, &err) == 2 && rf[0].ok && !rf[1].ok &&
                   strstr(rf[1].error, "/nonexistent.png") && rf[1].code == VITC_E_FILE && rf[2].ok && !rf[3].ok &&
                   strstr(rf[3].error, "bad.png") && rf[3].code == VITC_E_IMAGE,
            "files: %s (%d) | %s (%d)", rf[1].error, rf[1].code, rf[3].error, rf[3].code);
    T_CHECK(T, vitc_load_image(m, bad, (float[28 * 28]){0}, &err) == -1 && err.code == VITC_E_IMAGE, "%s (%d)",
            err.msg, err.code);
    unlink(bad);
    T_CHECK(T, rp[0].index[0] == rf[0].index[0] && fabs(rp[0].prob[0] - rf[0].prob[0]) < 1e-6 &&
                   rf[0].index[0] == rf[2].index[0], "pixels vs file: %d %d", rp[0].index[0], rf[0].index[0]);
    float img[28 * 28], img_up[28 * 28];
    T_CHECK(T, vitc_load_image(m, png, img, &err) == 0, "%s", err.msg);
    fesetround(FE_UPWARD); /* the resize and the normalisation round to nearest under any caller's mode */
    const int rc_img = vitc_load_image(m, png, img_up, &err);
    const int mode_img = (int)(_mm_getcsr() & 0x6000u);
    vitc_result ru[4]; /* batches of 2: the first batch's images had been decoded before any graph set the mode */
    const char *four[4] = {png, png, png, png};
    const int rc_files = vitc_classify_files(m, four, 4, 1, ru, &err);
    fesetround(FE_TONEAREST);
    T_CHECK(T, rc_img == 0 && memcmp(img, img_up, sizeof img) == 0 && mode_img == _MM_ROUND_UP,
            "vitc_load_image under FE_UPWARD: same pixels (%s), mode %s", rc_img ? err.msg : "",
            mode_img == _MM_ROUND_UP ? "kept" : "lost");
    T_CHECK(T, rc_files == 0 && ru[0].prob[0] == ru[2].prob[0] && ru[1].prob[0] == ru[3].prob[0],
            "vitc_classify_files under FE_UPWARD, batches of 2: %.9g %.9g %.9g %.9g", ru[0].prob[0], ru[1].prob[0],
            ru[2].prob[0], ru[3].prob[0]);
    T_CHECK(T, vitc_classify_tensor(m, img, 1, 0, 5, res, &err) == 0 && res[0].index[0] == rf[0].index[0] &&
                   fabs(res[0].prob[0] - rf[0].prob[0]) < 1e-6, "load_image + tensor vs file");
    T_CHECK(T, vitc_load_image(m, "/nonexistent.png", img, &err) == -1 && strstr(err.msg, "/nonexistent.png") &&
                   err.code == VITC_E_FILE, "%s (%d)", err.msg, err.code);
    vt_predictor_free(&p);
    vt_params_free(P);
    free(x);
    vitc_close(m);
    vitc_close(NULL);
}

/* A hierarchical model whose weights fit any size: stage maps and pooled features at 64 and 32 px. */
static void check_gmf(vt_test *T, const char *w, const char *png) {
    vitc_error err;
    vitc_model *m = vitc_open("groupmixformer_test", w, NULL, &err);
    T_CHECK(T, m != NULL, "%s", err.msg);
    if (!m) return;
    vitc_info info;
    vitc_get_info(m, &info);
    T_CHECK(T, info.any_size && info.img_size == 64 && info.in_chans == 3, "info");
    float *x = random_input(2 * 3 * 64 * 64, 3);
    static const int dims[4] = {20, 30, 40, 50};
    for (int size = 64; size >= 32; size -= 32) {
        vitc_tensor maps[VITC_MAX_STAGES];
        const int nm = vitc_stage_features(m, x, 2, size, maps, &err);
        T_CHECK(T, nm == 4, "%d maps at %d: %s", nm, size, err.msg);
        for (int i = 0; i < nm; i++) {
            T_CHECK(T, maps[i].ndim == 4 && maps[i].shape[0] == 2 && maps[i].shape[1] == dims[i] &&
                           maps[i].shape[2] == size / (4 << i) && maps[i].shape[3] == size / (4 << i),
                    "map %d at %d: (%d, %d, %d, %d)", i, size, maps[i].shape[0], maps[i].shape[1], maps[i].shape[2],
                    maps[i].shape[3]);
            vitc_tensor_free(&maps[i]);
        }
        vitc_tensor pooled;
        T_CHECK(T, vitc_pooled_features(m, x, 2, size, &pooled, &err) == 0 && pooled.shape[1] == 50, "%s", err.msg);
        vitc_tensor_free(&pooled);
        vitc_result r[2];
        T_CHECK(T, vitc_classify_tensor(m, x, 2, size, 2, r, &err) == 0 && r[0].ok && r[0].label[0] == NULL, "%s",
                err.msg);
    }
    T_CHECK(T, vitc_logits(m, x, 1, 48, (float[10]){0}, &err) == -1 && strstr(err.msg, "48"), "%s", err.msg);
    /* non-square (the _hw calls): the maps of a 64x96 input, its logits between two square calls (the graph rebuilt
     * each time: the square logits come back the same), a side the family's rule refuses, a size half given */
    float *xw = random_input(2 * 3 * 64 * 96, 4), sq[2][10], lw[2 * 10];
    vitc_options o;
    vitc_tensor maps[VITC_MAX_STAGES];
    const int nm = xw ? vitc_stage_features_hw(m, xw, 2, 64, 96, maps, &err) : -1;
    T_CHECK(T, nm == 4, "%d maps at 64x96: %s", nm, err.msg);
    for (int i = 0; i < nm; i++) {
        T_CHECK(T, maps[i].shape[0] == 2 && maps[i].shape[1] == dims[i] && maps[i].shape[2] == 64 / (4 << i) &&
                       maps[i].shape[3] == 96 / (4 << i), "map %d at 64x96: (%d, %d, %d, %d)", i, maps[i].shape[0],
                maps[i].shape[1], maps[i].shape[2], maps[i].shape[3]);
        vitc_tensor_free(&maps[i]);
    }
    vitc_tensor pw;
    T_CHECK(T, xw && vitc_logits(m, x, 1, 64, sq[0], &err) == 0 && vitc_logits_hw(m, xw, 2, 64, 96, lw, &err) == 0 &&
                   vitc_pooled_features_hw(m, xw, 2, 64, 96, &pw, &err) == 0 && pw.shape[0] == 2 &&
                   pw.shape[1] == 50 && vitc_logits_hw(m, x, 1, 0, 0, sq[1], &err) == 0 &&
                   !memcmp(sq[0], sq[1], sizeof sq[0]) && memcmp(sq[0], lw, sizeof sq[0]),
            "64x96 between two 64x64 calls: %s", err.msg);
    vitc_tensor_free(&pw);
    T_CHECK(T, vitc_logits_hw(m, xw, 1, 64, 80, lw, &err) == -1 && err.code == VITC_E_ARGUMENT &&
                   strstr(err.msg, "64x80"), "64x80: %s", err.msg);
    T_CHECK(T, vitc_logits_hw(m, xw, 1, 64, 4097, lw, &err) == -1 && err.code == VITC_E_ARGUMENT &&
                   strstr(err.msg, "64x4097 is outside [1, 4096] a side"), "64x4097: %s", err.msg);
    T_CHECK(T, vitc_logits_hw(m, xw, 1, 0, 64, lw, &err) == -1 && err.code == VITC_E_ARGUMENT &&
                   strstr(err.msg, "0x64"), "0x64: %s", err.msg);
    /* a model opened at a non-square size (model options --img-size 64x96): size 0 is that size, the same logits */
    vitc_model *mw = vitc_open_with("groupmixformer_test", w, NULL, "--img-size 64x96", &err);
    float lw0[2 * 10];
    vitc_result rw[2];
    T_CHECK(T, mw && vitc_logits_hw(m, xw, 2, 64, 64, lw0, &err) == 0, "64x64, batch 2: %s", err.msg);
    T_CHECK(T, mw && vitc_logits_hw(m, xw, 2, 64, 96, lw, &err) == 0 && vitc_logits(mw, xw, 2, 0, lw0, &err) == 0 &&
                   !memcmp(lw, lw0, sizeof lw) && vitc_classify_tensor(mw, xw, 2, 0, 1, rw, &err) == 0 && rw[1].ok,
            "opened at 64x96, size 0: %s", err.msg);
    /* ... and its images are read at 64x96 (vitc_input_size says so): vitc_load_image's tensor classifies as the file
     * does */
    int ih = -1, iw = -1, sh = -1, sw = -1;
    vitc_input_size(mw, &ih, &iw);
    vitc_input_size(m, &sh, &sw);
    T_CHECK(T, ih == 64 && iw == 96 && sh == 64 && sw == 64, "vitc_input_size: %dx%d opened at 64x96, %dx%d at 64",
            ih, iw, sh, sw);
    vitc_input_size(NULL, &ih, &iw);
    T_CHECK(T, ih == 0 && iw == 0, "vitc_input_size(NULL): %dx%d", ih, iw);
    float *li = malloc(sizeof(float) * 3 * 64 * 96);
    vitc_result rf, rt;
    T_CHECK(T, mw && li && vitc_load_image(mw, png, li, &err) == 0 &&
                   vitc_classify_files(mw, &png, 1, 3, &rf, &err) == 0 &&
                   vitc_classify_tensor(mw, li, 1, 0, 3, &rt, &err) == 0 && rf.ok && rt.ok &&
                   !memcmp(rf.index, rt.index, sizeof rf.index) && !memcmp(rf.prob, rt.prob, sizeof rf.prob),
            "opened at 64x96: an image file as its loaded tensor (%s)", err.msg);
    free(li);
    vitc_options_init(&o);
    o.img_size = 64;
    T_CHECK(T, !vitc_open_with("groupmixformer_test", w, &o, "--img-size 64x96", &err) && strstr(err.msg, "64x96") &&
                   strstr(err.msg, "differ"), "img_size 64 with --img-size 64x96: %s", err.msg);
    vitc_close(mw);
    free(xw);
    vitc_close(m);
    /* crop_pct concerns images only: 96 px images would resize past the limit (96 / 0.006 = 16000 px a side, 256 M
     * pixels; the model's own 64 px ones to 10667² pixels, within it), and a 96 px tensor is still fine */
    vitc_options_init(&o);
    o.crop_pct = 0.006f;
    m = vitc_open("groupmixformer_test", w, &o, &err);
    float *x96 = random_input(3 * 96 * 96, 5), lg[10];
    T_CHECK(T, m && x96 && vitc_logits(m, x96, 1, 96, lg, &err) == 0, "96 px tensor with crop_pct 0.006: %s",
            err.msg);
    free(x96);
    free(x);
    vitc_close(m);
}
/* vit_fmnist_tiny opened on the weights of w with the named tensors (NULL-terminated) changed by `change` (values,
 * numel), saved as path first; NULL when any step fails. */
static vitc_model *open_variant(const char *w, const char *path, const char *const *tensors,
                                void (*change)(float *, int64_t), vitc_error *err) {
    vt_err e = {0};
    vt_params *P = vt_model_load(vt_model_find("vit_fmnist_tiny"), w, &e);
    int ok = P != NULL;
    for (; ok && *tensors; tensors++) {
        vt_tensor *t = vt_params_find(P, *tensors);
        if ((ok = t != NULL)) change(t->data, t->numel);
    }
    ok = ok && vt_params_save(P, path, &e) == 0;
    vt_params_free(P);
    return ok ? vitc_open("vit_fmnist_tiny", path, NULL, err) : NULL;
}
static void zero_all(float *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = 0.0f;
}
static void huge_all(float *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = i % 2 ? -3e38f : 3e38f;
}
static void huge_last_row(float *d, int64_t n) { huge_all(d + n - 64, 64); } /* head.weight (10, 64): class 9's row */

/* Arguments at the edges of their ranges, and outcomes the other checks leave open: the open options' limits, an
 * --dtype int8 model option, sizes given twice; k = VITC_MAX_TOPK (every class), an image count past 2^24 and a
 * size past 4096 refused as such; Inf in a tensor refused like NaN; RGBA pixels taken, a side past the limit refused;
 * tied logits ranked by index; a last class alone non-finite refused; non-finite pooled features refused with the
 * output freed and zeroed; one model at two sizes of the same call gives what a model used at one size gives. */
static void check_bounds(vt_test *T, const char *w, const char *wg, const char *dir) {
    vitc_error err;
    vitc_options o;
    const int A = VITC_E_ARGUMENT;
    static const struct {
        int threads, img_size, batch; /* one past its limit, the others 0 (the defaults) */
        const char *msg;
    } past[] = {{1025, 0, 0, "threads 1025"}, {0, 4097, 0, "img_size 4097 is outside"}, {0, 0, 1025, "batch 1025"}};
    for (size_t i = 0; i < sizeof past / sizeof *past; i++) {
        vitc_options_init(&o);
        o.threads = past[i].threads, o.img_size = past[i].img_size, o.batch = past[i].batch;
        T_CHECK(T, !vitc_open("vit_fmnist_tiny", w, &o, &err) && strstr(err.msg, past[i].msg) && err.code == A, "%s",
                err.msg);
    }
    vitc_options_init(&o);
    o.img_size = 28;
    T_CHECK(T, !vitc_open_with("vit_fmnist_tiny", w, &o, "--img-size 32", &err) && strstr(err.msg, "differ") &&
                   err.code == A, "img_size given twice: %s", err.msg);
    vitc_model *m = vitc_open_with("vit_fmnist_tiny", w, NULL, "--dtype int8", &err);
    T_CHECK(T, m != NULL, "--dtype int8 as a model option: %s", err.msg);
    vitc_close(m);
    m = vitc_open("vit_fmnist_tiny", w, NULL, &err);
    T_CHECK(T, m != NULL, "%s", err.msg);
    if (!m) return;
    const int n = 2, per = 28 * 28;
    float *x = random_input((int64_t)n * per, 11), lg[2 * 10];
    vitc_result r[2];
    int distinct = 1;
    double sum = 0.0;
    T_CHECK(T, vitc_classify_tensor(m, x, n, 0, VITC_MAX_TOPK, r, &err) == 0 && r[0].ok && r[0].k == 10,
            "k = %d: %d classes (%s)", VITC_MAX_TOPK, r[0].k, err.msg);
    for (int j = 0; j < 10 && r[0].k == 10; j++) {
        sum += r[0].prob[j];
        for (int i = 0; i < j; i++) distinct &= r[0].index[i] != r[0].index[j];
    }
    T_CHECK(T, distinct && fabs(sum - 1.0) < 1e-6, "k = %d: every class once, probabilities sum to %g",
            VITC_MAX_TOPK, sum);
    T_CHECK(T, vitc_classify_tensor(m, x, (1 << 24) + 1, 0, 0, r, &err) == -1 &&
                   strstr(err.msg, "image count 16777217"), "%s", err.msg);
    T_CHECK(T, vitc_logits(m, x, 1, 4097, lg, &err) == -1 && err.code == A &&
                   strstr(err.msg, "vit_fmnist_tiny: size 4097 is outside [0, 4096]"), "%s", err.msg);
    T_CHECK(T, vitc_logits_hw(m, x, 1, 28, 20, lg, &err) == -1 && err.code == A &&
                   strstr(err.msg, "build it with --img-size 28x20"), "28x20 on weights that fix the size: %s", err.msg);
    x[5] = INFINITY;
    T_CHECK(T, vitc_classify_tensor(m, x, n, 0, 1, r, &err) == 1 && !r[0].ok && r[0].code == A &&
                   strstr(r[0].error, "NaN or Inf") && r[1].ok, "Inf image: %s (%d)", r[0].error, r[0].code);
    x[5] = 0.0f;
    unsigned char rgba[6 * 5 * 4], *wide = calloc(VT_IMAGE_MAX_SIDE + 1, 1);
    for (int i = 0; i < (int)sizeof rgba; i++) rgba[i] = (unsigned char)(i * 37 % 256);
    vitc_pixels px[2] = {{rgba, 6, 5, 4}, {wide, VT_IMAGE_MAX_SIDE + 1, 1, 1}};
    T_CHECK(T, wide && vitc_classify_pixels(m, px, 2, 1, r, &err) == 1 && r[0].ok && !r[1].ok &&
                   strstr(r[1].error, "each side") && r[1].code == A, "RGBA, too wide: %s | %s", r[0].error,
            r[1].error);
    free(wide);
    vitc_close(m);
    char path[4200];
    snprintf(path, sizeof path, "%s/variant.safetensors", dir);
    m = open_variant(w, path, (const char *const[]){"head.weight", "head.bias", NULL}, zero_all, &err);
    T_CHECK(T, m && vitc_classify_tensor(m, x, 1, 0, 3, r, &err) == 0 && r[0].index[0] == 0 && r[0].index[1] == 1 &&
                   r[0].index[2] == 2 && fabs(r[0].prob[0] - 0.1) < 1e-6, "tied logits: %d %d %d (%s)",
            r[0].index[0], r[0].index[1], r[0].index[2], err.msg);
    vitc_close(m);
    m = open_variant(w, path, (const char *const[]){"head.weight", NULL}, huge_last_row, &err);
    T_CHECK(T, m && vitc_classify_tensor(m, x, 1, 0, 1, r, &err) == 1 && !r[0].ok && strstr(r[0].error, "class 9"),
            "class 9 alone not finite: %s", r[0].error);
    vitc_close(m);
    m = open_variant(w, path, (const char *const[]){"norm.weight", NULL}, huge_all, &err);
    vitc_tensor po;
    T_CHECK(T, m && vitc_pooled_features(m, x, n, 0, &po, &err) == -1 && err.code == VITC_E_FAILED &&
                   strstr(err.msg, "not finite") && po.data == NULL && po.ndim == 0,
            "non-finite pooled features: refused, output freed (%s)", err.msg);
    vitc_close(m);
    unlink(path);
    free(x);
    /* one model at 64 then 32 px (the same call): its 32 px logits are a model's that ran at 32 px only */
    vitc_model *a = vitc_open("groupmixformer_test", wg, NULL, &err), *b = vitc_open("groupmixformer_test", wg, NULL,
                                                                                       &err);
    float *xg = random_input(3 * 64 * 64, 13), la[10], lb[10];
    T_CHECK(T, a && b && vitc_logits(a, xg, 1, 64, la, &err) == 0 && vitc_logits(a, xg, 1, 32, la, &err) == 0 &&
                   vitc_logits(b, xg, 1, 32, lb, &err) == 0 && max_diff(la, lb, 10) < 1e-6,
            "32 px after 64 px: logits off by %g (%s)", a && b ? max_diff(la, lb, 10) : -1.0, err.msg);
    free(xg);
    vitc_close(a);
    vitc_close(b);
}

/* A form mismatch under a long path: vitc_error's 512 bytes keep the way out (the hint comes before the file and
 * the tensor names, which a cut message loses first). */
static void check_form_hint(vt_test *T, const char *dir) {
    char w[400];
    snprintf(w, sizeof w, "%s/%0150d/deployed.safetensors", dir, 0);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/%0150d", dir, 0);
    vt_model_overrides ov = vt_model_no_overrides();
    ov.ffn = "cffn"; /* the deployed form (fc2_u, fc2_v) */
    vt_model_cfg c;
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int made = mkdir(sub, 0755) == 0 && P &&
                     vt_model_configure(vt_model_find("vit_fmnist_tiny"), &ov, &c, &e) == 0 &&
                     vt_model_init_params(&c, P, 3, &e) == 0 && vt_params_save(P, w, &e) == 0;
    vt_params_free(P);
    T_CHECK(T, made, "deployed cFFN weights under a long path: %s", e.msg);
    vitc_error err;
    T_CHECK(T, made && !vitc_open_with("vit_fmnist_tiny", w, NULL, "--ffn cffn --train-form", &err) &&
                   strstr(err.msg, "use a training-form file"),
            "the hint survives the cut: %s", err.msg);
    unlink(w);
    rmdir(sub);
}

/* A file holding the training form (cFFN's `.rep.` branches) opens in it: as with --train-form, its parameters. */
static void check_form_taken(vt_test *T, const char *dir) {
    char w[96];
    snprintf(w, sizeof w, "%s/cffn_train.safetensors", dir);
    vt_model_overrides ov = vt_model_no_overrides();
    ov.ffn = "cffn";
    ov.train_form = 1;
    vt_model_cfg c;
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    T_CHECK(T, P && vt_model_configure(vt_model_find("vit_fmnist_tiny"), &ov, &c, &e) == 0 &&
                   vt_model_init_params(&c, P, 4, &e) == 0 && vt_params_save(P, w, &e) == 0, "%s", e.msg);
    vt_params_free(P);
    vitc_error err;
    vitc_info a = {0}, b = {0};
    vitc_model *m = vitc_open("vit_fmnist_tiny", w, NULL, &err);
    if (m) vitc_get_info(m, &a);
    vitc_close(m);
    m = vitc_open_with("vit_fmnist_tiny", w, NULL, "--train-form", &err);
    if (m) vitc_get_info(m, &b);
    vitc_close(m);
    T_CHECK(T, a.params > 0 && a.params == b.params, "training-form file: %lld params opened, %lld with --train-form",
            (long long)a.params, (long long)b.params);
    unlink(w);
}

/* vitc_open_with: weights made with model options (5 classes, 3 channels, FLatten attention) open with those options
 * and give the library predictor's logits; vitc_open refuses them; unknown options and bad values are refused. The
 * pool's floating-point mode comes back after a 2-thread call; vitc_int8_layers and vitc_get_info(NULL). */
static void check_open_with(vt_test *T, const char *dir) {
    char w[96];
    snprintf(w, sizeof w, "%s/custom.safetensors", dir);
    vt_model_overrides ov = vt_model_no_overrides();
    ov.num_classes = 5;
    ov.in_chans = 3;
    ov.attn = "flatten";
    vt_model_cfg c;
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    T_CHECK(T, P && vt_model_configure(vt_model_find("vit_fmnist_tiny"), &ov, &c, &e) == 0 &&
                   vt_model_init_params(&c, P, 3, &e) == 0 && vt_params_save(P, w, &e) == 0, "%s", e.msg);
    vitc_error err;
    /* the file records the options it was saved with: vitc_open builds the model with them */
    vitc_model *rm = vitc_open("vit_fmnist_tiny", w, NULL, &err);
    vitc_info ri = {0};
    if (rm) vitc_get_info(rm, &ri);
    T_CHECK(T, rm && ri.num_classes == 5 && ri.in_chans == 3, "recorded options: %s (%d classes, %d channels)",
            rm ? "opened" : err.msg, ri.num_classes, ri.in_chans);
    vitc_close(rm);
    T_CHECK(T, !vitc_open_with("vit_fmnist_tiny", w, NULL, "--num-classes 7", &err) && strstr(err.msg, "do not match"),
            "an option given wins over the record: %s", err.msg);
    char wo[112]; /* the same weights recorded as another model's: its options are not taken */
    snprintf(wo, sizeof wo, "%s/other.safetensors", dir);
    if (P) P->model = "deit_tiny_patch16_224";
    T_CHECK(T, P && vt_params_save(P, wo, &e) == 0, "%s", e.msg);
    T_CHECK(T, !vitc_open("vit_fmnist_tiny", wo, NULL, &err) && strstr(err.msg, "do not match"), "%s", err.msg);
    /* a record holding an option vitc never records there (hand-edited): refused, as the CLI refuses it */
    const char *runtime[] = {"--no-prepack", "--train-form", "--dtype bf16"};
    for (int i = 0; i < 3 && P; i++) {
        P->model = "vit_fmnist_tiny";
        snprintf(P->options, sizeof P->options, "--num-classes 5 --in-chans 3 --attn flatten %s", runtime[i]);
        T_CHECK(T, vt_params_save(P, wo, &e) == 0, "%s", e.msg);
        char want[64];
        snprintf(want, sizeof want, "model option '%.*s'", (int)strcspn(runtime[i], " "), runtime[i]);
        T_CHECK(T, !vitc_open("vit_fmnist_tiny", wo, NULL, &err) && err.code == VITC_E_WEIGHTS &&
                       strstr(err.msg, want) && strstr(err.msg, "not a file vitc wrote"),
                "record '%s': %s", runtime[i], err.msg);
    }
    /* a record that parses but cannot make the model: the file is blamed (VITC_E_WEIGHTS), not the caller */
    if (P) {
        snprintf(P->options, sizeof P->options, "--num-classes 5 --in-chans 3 --img-size 3");
        T_CHECK(T, vt_params_save(P, wo, &e) == 0, "%s", e.msg);
        T_CHECK(T, !vitc_open("vit_fmnist_tiny", wo, NULL, &err) && err.code == VITC_E_WEIGHTS &&
                       strstr(err.msg, "vitc_model_options record (\"--num-classes 5 --in-chans 3 --img-size 3\")") &&
                       strstr(err.msg, "below the patch size 4"),
                "record --img-size 3: code %d, %s", err.code, err.msg);
        /* ... and one that configures but whose graph cannot be built (64 wide, 3 heads) */
        snprintf(P->options, sizeof P->options, "--num-classes 5 --in-chans 3 --attn flatten --heads 3");
        T_CHECK(T, vt_params_save(P, wo, &e) == 0, "%s", e.msg);
        T_CHECK(T, !vitc_open("vit_fmnist_tiny", wo, NULL, &err) && err.code == VITC_E_WEIGHTS &&
                       strstr(err.msg, "record (\"--num-classes 5 --in-chans 3 --attn flatten --heads 3\")") &&
                       strstr(err.msg, "3 heads"),
                "record --heads 3: code %d, %s", err.code, err.msg);
        /* ... but a record that builds (width 60) with a caller's option that does not fit it (8 heads): the
         * caller's error (VITC_E_ARGUMENT), not the file's */
        snprintf(P->options, sizeof P->options, "--num-classes 5 --in-chans 3 --dims 60");
        T_CHECK(T, vt_params_save(P, wo, &e) == 0, "%s", e.msg);
        T_CHECK(T, !vitc_open_with("vit_fmnist_tiny", wo, NULL, "--heads 8", &err) && err.code == VITC_E_ARGUMENT &&
                       strstr(err.msg, "8 heads") && !strstr(err.msg, "record"),
                "record --dims 60, caller's --heads 8: code %d, %s", err.code, err.msg);
        /* an option recorded twice (vitc records each once; the CLI had taken the first, the library the last) */
        snprintf(P->options, sizeof P->options, "--num-classes 5 --in-chans 3 --attn flatten --in-chans 1");
        T_CHECK(T, vt_params_save(P, wo, &e) == 0, "%s", e.msg);
        T_CHECK(T, !vitc_open("vit_fmnist_tiny", wo, NULL, &err) && err.code == VITC_E_WEIGHTS &&
                       strstr(err.msg, "model option --in-chans given twice"), "record with --in-chans twice: %s",
                err.msg);
    }
    unlink(wo);
    const char *bad[][2] = {{"--num-classes 5 --bogus 1", "unknown model option '--bogus'"},
                            {"--dims 1x", "--dims '1x': expected comma-separated integers"},
                            {"--num-classes", "--num-classes needs a value"},
                            {"--num-classes 0", "'0': expected an integer in [1, 16777216]"},
                            {"--num-classes 99999999999", "'99999999999': expected an integer in [1, 16777216]"},
                            {"--num-classes 10 extra", "'10 extra': one integer, then the next option"},
                            {"--train-form=1", "--train-form takes no value"},
                            {"--num-classes=", "--num-classes needs a value"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        T_CHECK(T, !vitc_open_with("vit_fmnist_tiny", w, NULL, bad[i][0], &err) && strstr(err.msg, bad[i][1]),
                "'%s': %s", bad[i][0], err.msg);
    vitc_options o;
    vitc_options_init(&o);
    o.threads = 2;
    /* a model far too wide for the file is refused by its names and shapes, before its 2 GB are allocated and zeroed
     * (the peak resident size stays; run alone, the suite's peak is far below them) */
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    T_CHECK(T, !vitc_open_with("vit_fmnist_tiny", w, NULL, "--dims 4096 --in-chans 3", &err) &&
                   strstr(err.msg, "do not match"), "%s", err.msg);
    getrusage(RUSAGE_SELF, &after);
    T_CHECK(T, after.ru_maxrss - before.ru_maxrss < 256 * 1024, "a refused open grew the peak memory by %ld KB",
            after.ru_maxrss - before.ru_maxrss);
    T_CHECK(T, !vitc_open_with("vit_fmnist_tiny", w, NULL, "--dtype fp16", &err) && strstr(err.msg, "unknown --dtype"),
            "%s", err.msg);
    /* labels: a run's classes.json beside the weights names the classes (a 10-class run on a folder is no
     * Fashion-MNIST model); one of another count is not used: Fashion-MNIST's names then, unless the weights record
     * that a folder trained them (no names) */
    char rdir[112], rw[160], rwf[160], rc[160];
    snprintf(rdir, sizeof rdir, "%s/run10", dir);
    snprintf(rw, sizeof rw, "%s/weights.safetensors", rdir);
    snprintf(rwf, sizeof rwf, "%s/folder.safetensors", rdir);
    snprintf(rc, sizeof rc, "%s/classes.json", rdir);
    vt_params *P10 = vt_params_new(&e);
    int made = mkdir(rdir, 0755) == 0 && P10 && vt_model_init_params(vt_model_find("vit_fmnist_tiny"), P10, 5, &e) == 0;
    made = made && vt_params_save(P10, rw, &e) == 0;
    if (made) P10->folder = 1;
    made = made && vt_params_save(P10, rwf, &e) == 0;
    vt_params_free(P10);
    for (int round = 0; made && round < 3; round++) {
        FILE *cf = fopen(rc, "w");
        if (cf) {
            fputs(round == 0 ? "{\"0\": \"c0\", \"1\": \"c1\", \"2\": \"c2\", \"3\": \"c3\", \"4\": \"c4\", "
                               "\"5\": \"c5\", \"6\": \"c6\", \"7\": \"c7\", \"8\": \"c8\", \"9\": \"c9\"}"
                             : "{\"0\": \"a\", \"1\": \"b\"}", cf);
            fclose(cf);
        }
        vitc_model *m10 = vitc_open("vit_fmnist_tiny", round < 2 ? rw : rwf, NULL, &err);
        float x10[28 * 28] = {0};
        vitc_result r10;
        const int ran = m10 && vitc_classify_tensor(m10, x10, 1, 0, 1, &r10, &err) == 0 && r10.ok;
        const int ok = ran && (round == 2 ? !r10.label[0] : r10.label[0] != NULL);
        char want[8];
        snprintf(want, sizeof want, "c%d", ran ? r10.index[0] : 0);
        T_CHECK(T, ok && (round != 0 || strcmp(r10.label[0], want) == 0) &&
                       (round != 1 || strcmp(r10.label[0], vt_fmnist_class_name(r10.index[0])) == 0),
                "labels with %s classes.json beside the weights%s: %s (%s)", round == 0 ? "a 10-class" : "a 2-class",
                round == 2 ? " recording a folder" : "", ok && r10.label[0] ? r10.label[0] : "-", err.msg);
        vitc_close(m10);
    }
    T_CHECK(T, made, "run folder made: %s", e.msg);
    /* images feed models of 1 or 3 channels: a 2-channel one is told to take tensors, naming the model */
    vt_model_overrides o2 = vt_model_no_overrides();
    o2.in_chans = 2;
    vt_model_cfg c2;
    vt_params *P2 = vt_params_new(&e);
    char w2[112];
    snprintf(w2, sizeof w2, "%s/chans2.safetensors", dir);
    T_CHECK(T, P2 && vt_model_configure(vt_model_find("vit_fmnist_tiny"), &o2, &c2, &e) == 0 &&
                   vt_model_init_params(&c2, P2, 3, &e) == 0 && vt_params_save(P2, w2, &e) == 0, "%s", e.msg);
    vt_params_free(P2);
    vitc_model *m2 = vitc_open_with("vit_fmnist_tiny", w2, NULL, "--in-chans 2", &err);
    unsigned char px[8 * 8] = {0};
    const vitc_pixels img = {px, 8, 8, 1};
    vitc_result r2;
    T_CHECK(T, m2 && vitc_classify_pixels(m2, &img, 1, 1, &r2, &err) == -1 &&
                   strstr(err.msg, "vit_fmnist_tiny takes 2 input channels"), "%s", err.msg);
    float x2[2 * 28 * 28]; /* and vitc_load_image: an argument error, before any file is read (it had said IMAGE) */
    T_CHECK(T, m2 && vitc_load_image(m2, "/nonexistent.png", x2, &err) == -1 && err.code == VITC_E_ARGUMENT &&
                   strstr(err.msg, "vit_fmnist_tiny takes 2 input channels"), "code %d: %s", err.code, err.msg);
    vitc_close(m2);
    /* --name=value, as on the command line */
    vitc_model *me = vitc_open_with("vit_fmnist_tiny", w, NULL, "--attn=flatten --in-chans=3 --num-classes=5", &err);
    T_CHECK(T, me != NULL, "--name=value: %s", err.msg);
    vitc_close(me);
    /* as a checkpoint records them (any blanks; --dtype left to vitc_set_dtype) */
    vitc_model *m =
        vitc_open_with("vit_fmnist_tiny", w, &o, " --attn flatten\t--in-chans 3\n--num-classes 5 --dtype bf16 ", &err);
    T_CHECK(T, m != NULL, "%s", err.msg);
    vitc_info info;
    vitc_get_info(m, &info);
    T_CHECK(T, m && info.num_classes == 5 && info.in_chans == 3, "info: %d classes, %d channels", info.num_classes,
            info.in_chans);
    int lin = -1, q8 = -1;
    vitc_int8_layers(m, &lin, &q8);
    T_CHECK(T, lin == 0 && q8 == 0, "int8 layers before a call: %d of %d", q8, lin);
    const int n = 2, per = 3 * 28 * 28;
    float *x = random_input((int64_t)n * per, 11), logits[2 * 5], ref[2 * 5];
    vt_predictor p = {0};
    T_CHECK(T, vt_predictor_init(&p, &c, P, 2, VT_PRED_LOGITS, &e) == 0, "%s", e.msg);
    if (p.g) {
        vt_predictor_forward(&p, x, n);
        memcpy(ref, p.logits->data, sizeof ref);
    }
#if defined(__SSE2__)
    const unsigned csr = _mm_getcsr() & ~0x8040u; /* the caller's mode: no flush-to-zero (the predictor set it) */
#pragma omp parallel num_threads(2)
    _mm_setcsr(csr);
    _mm_setcsr(csr); /* LLVM's libomp (clang builds) gives the primary thread its mode from before the region back */
#endif
    T_CHECK(T, m && vitc_logits(m, x, n, 0, logits, &err) == 0 && max_diff(logits, ref, n * 5) < 1e-5,
            "logits with the options: %s (diff %g)", err.msg, max_diff(logits, ref, n * 5));
#if defined(__SSE2__)
    unsigned pool[2] = {csr, csr};
#pragma omp parallel num_threads(2)
    pool[omp_get_thread_num() & 1] = _mm_getcsr();
    T_CHECK(T, pool[0] == csr && pool[1] == csr, "the pool's floating-point mode after a call: %x %x (caller's %x)",
            pool[0], pool[1], csr);
#endif
    /* --no-prepack (its graph's plan: test_registry's check_no_prepack): the same logits */
    vitc_model *mn = vitc_open_with("vit_fmnist_tiny", w, &o, "--attn flatten --in-chans 3 --num-classes 5 --no-prepack",
                                    &err);
    float ln[2 * 5];
    T_CHECK(T, mn && vitc_logits(mn, x, n, 0, ln, &err) == 0 && max_diff(ln, ref, n * 5) < 1e-5,
            "--no-prepack: %s (diff %g)", err.msg, max_diff(ln, ref, n * 5));
    vitc_close(mn);
    T_CHECK(T, !vitc_open_with("vit_fmnist_tiny", w, NULL, "--no-prepack=1", &err) && strstr(err.msg, "takes no value"),
            "--no-prepack=1: %s", err.msg);
    T_CHECK(T, m && vitc_set_dtype(m, "int8", &err) == 0 && vitc_logits(m, x, n, 0, logits, &err) == 0, "%s",
            err.msg);
    vitc_int8_layers(m, &lin, &q8);
    const int linears = p.g ? vt_graph_dtype_use(p.g).linears : -2; /* the fp32 graph's: the same layers */
    T_CHECK(T, lin == linears && lin > 0 && q8 >= 0 && q8 <= lin, "int8 layers of the last call: %d of %d (want %d)",
            q8, lin, linears);
    memset(&info, 0xff, sizeof info);
    vitc_get_info(NULL, &info);
    T_CHECK(T, info.name == NULL && info.num_classes == 0, "vitc_get_info(NULL) zeroes info");
    vt_predictor_free(&p);
    vitc_close(m);
    vt_params_free(P);
    free(x);
    unlink(w);
    unlink(w2); /* and the run folder's files, so that the caller's rmdir of dir succeeds */
    unlink(rw);
    unlink(rc);
    rmdir(rdir);
}

/* One model called from two threads at once: every call either gives the single-threaded logits or is refused as in
 * use by the other thread, never runs on the buffers the other call is using. */
static void check_two_threads(vt_test *T, const char *w) {
    vitc_error err;
    vitc_options o;
    vitc_options_init(&o);
    o.threads = 1;
    vitc_model *m = vitc_open("vit_fmnist_tiny", w, &o, &err);
    T_CHECK(T, m != NULL, "%s", err.msg);
    if (!m) return;
    enum { N = 16, K = 10, CALLS = 40 };
    float *x = random_input((int64_t)N * 28 * 28, 13), ref[N * K];
    T_CHECK(T, vitc_logits(m, x, N, 0, ref, &err) == 0, "%s", err.msg);
    int ok = 0, refused = 0, wrong = 0;
    char why[sizeof err.msg] = "";
#pragma omp parallel num_threads(2) reduction(+ : ok, refused, wrong)
    {
        float out[N * K];
        vitc_error e;
        for (int c = 0; c < CALLS; c++) {
            if (vitc_logits(m, x, N, 0, out, &e) == 0)
                max_diff(out, ref, N * K) == 0.0 ? ok++ : wrong++;
            else if (strstr(e.msg, "in use by another thread") && e.code == VITC_E_BUSY)
                refused++;
            else {
                wrong++;
#pragma omp critical
                memcpy(why, e.msg, sizeof why);
            }
        }
    }
    T_CHECK(T, wrong == 0 && ok > 0 && ok + refused == 2 * CALLS,
            "two threads: %d calls right, %d refused, %d wrong %s", ok, refused, wrong, why);
    T_CHECK(T, vitc_logits(m, x, N, 0, ref, &err) == 0, "a call after them: %s", err.msg);
    vitc_close(m);
    free(x);
}

/* One caller thread's work on its own model: `calls` calls of vitc_logits (and of vitc_pooled_features where pooled
 * is given) on x, every result compared bit for bit with the reference made on the main thread. The thread first
 * takes its own floating-point mode (MXCSR's FTZ, DAZ and rounding bits, also in its OpenMP pool) and thread setting,
 * other than the other callers': each must come back after its calls (a library keeping a caller's settings in one
 * place shared by the models gave a thread another's). */
typedef struct {
    vitc_model *m;
    const float *x, *ref, *pooled;
    int n, size, nout, npooled, calls;
    unsigned mode; /* FTZ (0x8000), DAZ (0x0040) and rounding (0x6000) bits of this caller's MXCSR */
    int setting;   /* this caller's omp_set_num_threads */
    int right, wrong, mode_lost;
    char why[640], lost[160];
} caller_job;

static int64_t tensor_numel(const vitc_tensor *t) {
    int64_t n = t->ndim > 0;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static void *caller_run(void *arg) {
    caller_job *j = arg;
    float *out = malloc(sizeof(float) * (size_t)j->nout);
    omp_set_num_threads(j->setting);
#if defined(__SSE2__)
    const unsigned csr = (_mm_getcsr() & ~0xe040u) | j->mode;
#pragma omp parallel num_threads(2)
    _mm_setcsr(csr);
    _mm_setcsr(csr);
#endif
    for (int c = 0; out && c < j->calls; c++) {
        vitc_error e;
        const int rc = vitc_logits(j->m, j->x, j->n, j->size, out, &e);
        if (rc == 0 && memcmp(out, j->ref, sizeof(float) * (size_t)j->nout) == 0)
            j->right++;
        else {
            j->wrong++;
            snprintf(j->why, sizeof j->why, "logits call %d: %s", c, rc ? e.msg : "other logits");
        }
        if (!j->pooled) continue;
        vitc_tensor t;
        if (vitc_pooled_features(j->m, j->x, j->n, j->size, &t, &e) == 0) {
            if (tensor_numel(&t) == j->npooled && memcmp(t.data, j->pooled, sizeof(float) * (size_t)j->npooled) == 0)
                j->right++;
            else {
                j->wrong++;
                snprintf(j->why, sizeof j->why, "pooled call %d: other features", c);
            }
            vitc_tensor_free(&t);
        } else {
            j->wrong++;
            snprintf(j->why, sizeof j->why, "pooled call %d: %s", c, e.msg);
        }
    }
    const int setting = omp_get_max_threads();
    j->mode_lost += setting != j->setting;
#if defined(__SSE2__)
    unsigned pool[2] = {csr, csr};
    const unsigned own = _mm_getcsr();
#pragma omp parallel num_threads(2)
    pool[omp_get_thread_num() & 1] = _mm_getcsr();
    j->mode_lost += (own != csr) + (pool[0] != csr) + (pool[1] != csr);
    snprintf(j->lost, sizeof j->lost, "mode %x, pool %x %x (its own %x), thread setting %d (its own %d)", own, pool[0],
             pool[1], csr, setting, j->setting);
#else
    snprintf(j->lost, sizeof j->lost, "thread setting %d (its own %d)", setting, j->setting);
#endif
    free(out);
    return NULL;
}

/* Separate models used at once from separate caller threads (pthreads, as a server would): ViT on 2 threads (its
 * OpenMP team nested in a pthread), a second ViT on 1 and GroupMixFormer on 2; every call gives what the same call
 * gave on the main thread before, and each caller's floating-point mode and thread setting come back. */
static void check_separate_models(vt_test *T, const char *w, const char *wg) {
    enum { J = 3, CALLS = 60 };
    const char *names[J] = {"vit_fmnist_tiny", "vit_fmnist_tiny", "groupmixformer_test"};
    const char *files[J] = {w, w, wg};
    const int threads[J] = {2, 1, 2}, n[J] = {32, 24, 2}, size[J] = {0, 0, 64}, chans[J] = {1, 1, 3};
    /* each caller's own mode (FTZ + DAZ, none, rounding up) and thread setting */
    const unsigned mode[J] = {0x8040u, 0u, 0x4000u};
    const int setting[J] = {1, 2, 3};
    caller_job jobs[J];
    vitc_model *m[J] = {NULL};
    float *x[J] = {NULL}, *ref[J] = {NULL};
    vitc_tensor pooled[J];
    int ok = 1;
    memset(jobs, 0, sizeof jobs);
    memset(pooled, 0, sizeof pooled);
    for (int i = 0; i < J && ok; i++) {
        vitc_error err;
        vitc_options o;
        vitc_options_init(&o);
        o.threads = threads[i];
        m[i] = vitc_open(names[i], files[i], &o, &err);
        vitc_info info;
        if (m[i]) vitc_get_info(m[i], &info);
        const int px = size[i] ? size[i] : (m[i] ? info.img_size : 0);
        const int nout = n[i] * (m[i] ? info.num_classes : 0);
        x[i] = random_input((int64_t)n[i] * chans[i] * px * px, 17u + (unsigned)i);
        ref[i] = malloc(sizeof(float) * (size_t)(nout > 0 ? nout : 1));
        ok = m[i] && x[i] && ref[i] && vitc_logits(m[i], x[i], n[i], size[i], ref[i], &err) == 0 &&
             (i < 2 || vitc_pooled_features(m[i], x[i], n[i], size[i], &pooled[i], &err) == 0);
        T_CHECK(T, ok, "%s on %d threads: %s", names[i], threads[i], err.msg);
        jobs[i] = (caller_job){.m = m[i], .x = x[i], .ref = ref[i], .pooled = i < 2 ? NULL : pooled[i].data, .n = n[i],
                               .size = size[i], .nout = nout, .npooled = (int)tensor_numel(&pooled[i]), .calls = CALLS,
                               .mode = mode[i], .setting = setting[i]};
    }
    pthread_t tid[J];
    int started = 0;
    for (; ok && started < J; started++)
        if (pthread_create(&tid[started], NULL, caller_run, &jobs[started])) break;
    T_CHECK(T, !ok || started == J, "pthread_create: %d of %d started", started, J);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    for (int i = 0; ok && i < started; i++)
        T_CHECK(T, jobs[i].wrong == 0 && jobs[i].right == CALLS * (jobs[i].pooled ? 2 : 1) && !jobs[i].mode_lost,
                "%s on %d threads beside the others: %d calls right, %d wrong (%s); after them: %s", names[i],
                threads[i], jobs[i].right, jobs[i].wrong, jobs[i].why, jobs[i].lost);
    for (int i = 0; i < J; i++) {
        vitc_close(m[i]);
        vitc_tensor_free(&pooled[i]);
        free(x[i]);
        free(ref[i]);
    }
}

/* vt_image_source of pseudo-random inputs (ctx unused). */
static int random_source(void *ctx, int i, const vt_preprocess *pp, float *out, vt_err *e) {
    (void)ctx, (void)e;
    float *x = random_input((int64_t)pp->chans * pp->size * pp->size, 11u + (unsigned)i);
    if (!x) return -1;
    memcpy(out, x, sizeof(float) * (size_t)pp->chans * pp->size * pp->size);
    free(x);
    return 0;
}

/* The library's predict helpers at their edges: a config without crop_pct gets timm's default 0.875; a config made at
 * another size keeps the named model's crop_pct (made with 1.0 to pass the range check); batch 65537 refused; a top-k
 * past VT_MAX_TOPK on a model of more classes gives the VT_MAX_TOPK largest, in order. */
static void check_predict_cfg(vt_test *T) {
    const vt_model_cfg *c = vt_model_find("groupmixformer_tiny");
    T_CHECK(T, c && c->pre.crop_pct > 0.0f && c->pre.crop_pct != 1.0f, "groupmixformer_tiny has a crop_pct below 1");
    if (!c) return;
    vt_model_cfg z = *c;
    z.pre.crop_pct = 0.0f;
    const vt_preprocess pz = vt_model_preprocess(&z), pc = vt_model_preprocess(c);
    T_CHECK(T, pz.crop_pct == 0.875f && pc.crop_pct == c->pre.crop_pct && pc.size == c->arch.img_size,
            "preprocess crop_pct %g (unset: want 0.875), %g (want %g)", (double)pz.crop_pct, (double)pc.crop_pct,
            (double)c->pre.crop_pct);
    vt_model_cfg at;
    vt_err e = {0};
    T_CHECK(T, vt_model_at_size(c, 64, 64, &at, &e) == 0 && at.arch.img_size == 64 &&
                   at.pre.crop_pct == c->pre.crop_pct,
            "at 64 px: img_size %d crop_pct %g (want %g): %s", at.arch.img_size, (double)at.pre.crop_pct,
            (double)c->pre.crop_pct, e.msg);
    vt_predictor p;
    vt_clearerr(&e);
    T_CHECK(T, vt_predictor_init(&p, c, NULL, 65537, VT_PRED_LOGITS, &e) == -1 && !p.g &&
                   strstr(e.msg, "batch size 65537 is outside [1, 65536]"), "batch 65537: %s", e.msg);
    vt_model_overrides ov = vt_model_no_overrides();
    ov.num_classes = 100;
    vt_model_cfg c100;
    vt_params *P = vt_params_new(&e);
    T_CHECK(T, P && vt_model_configure(vt_model_find("vit_fmnist_tiny"), &ov, &c100, &e) == 0 &&
                   vt_model_init_params(&c100, P, 3, &e) == 0 &&
                   vt_predictor_init(&p, &c100, P, 2, VT_PRED_LOGITS, &e) == 0,
            "vit_fmnist_tiny with 100 classes: %s", e.msg);
    if (p.g) {
        vt_prediction out[3];
        float logits[3 * 100];
        const int bad = vt_predictor_classify(&p, random_source, NULL, NULL, 3, 100, out, NULL, logits, NULL, NULL);
        int ok = bad == 0;
        for (int i = 0; ok && i < 3; i++) {
            ok = out[i].ok && out[i].top.k == VT_MAX_TOPK;
            for (int t = 0; ok && t < VT_MAX_TOPK; t++) {
                const float *l = logits + i * 100;
                int above = 0; /* classes with a larger logit than the t-th pick: exactly t */
                for (int j = 0; j < 100; j++) above += l[j] > l[out[i].top.cls[t]];
                ok = above == t && (t == 0 || out[i].top.prob[t] <= out[i].top.prob[t - 1]);
            }
        }
        T_CHECK(T, ok, "top-100 of 100 classes: %d failed, k %d (want %d)", bad, out[0].top.k, VT_MAX_TOPK);
        vt_predictor_free(&p);
    }
    vt_params_free(P);
}

void test_api(vt_test *T) {
    char ver[32];
    snprintf(ver, sizeof ver, "%d.%d.%d", VITC_VERSION_MAJOR, VITC_VERSION_MINOR, VITC_VERSION_PATCH);
    T_CHECK(T, strcmp(vitc_version(), ver) == 0, "%s, not %s", vitc_version(), ver);
    T_CHECK(T, vitc_model_count() > 10 && vitc_model_name(0) && !vitc_model_name(-1) &&
                   !vitc_model_name(vitc_model_count()), "model names");
    char dir[] = "/tmp/vitc_api_XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    char w[64], wg[64], png[80];
    snprintf(w, sizeof w, "%s/vit.safetensors", dir);
    snprintf(wg, sizeof wg, "%s/gmf.safetensors", dir);
    snprintf(png, sizeof png, "%s/img.png", dir);
    T_CHECK(T, write_weights("vit_fmnist_tiny", w) == 0 && write_weights("groupmixformer_test", wg) == 0, "weights");
    check_open_errors(T, w);
    check_vit(T, w, dir);
    check_two_threads(T, w);
    check_separate_models(T, w, wg);
    check_gmf(T, wg, png);
    check_bounds(T, w, wg, dir);
    check_open_with(T, dir);
    check_form_taken(T, dir);
    check_form_hint(T, dir);
    check_predict_cfg(T);
    unlink(w);
    unlink(wg);
    unlink(png);
    rmdir(dir);
}
