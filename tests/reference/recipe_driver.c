/* Driver of tests/reference/test_recipe.py: vitc's training-recipe pieces on data the test writes, results back as
 * raw float64 (little-endian) for comparison with PyTorch/numpy computations written in the test.
 * usage:
 *   recipe_driver mixup B C H W K lam cutmix cy cx smoothing correct_lam IN OUT
 *       IN: float32 x (B, C, H, W), labels (B) as float32; OUT: x after vt_mixup_apply, targets (B, K), lam used.
 *   recipe_driver mixup_roll ...: the same with torchvision's partners (vt_mixup.roll).
 *   recipe_driver draws N H W mixup_alpha cutmix_alpha prob switch_prob seed OUT
 *       OUT: N rows (lam, cutmix, cy, cx) of vt_mixup_sample from one vt_rng seeded with seed.
 *   recipe_driver softce B K IN OUT
 *       IN: float32 logits (B, K), targets (B, K); OUT: loss, dloss/dlogits, dloss/dtargets.
 *   recipe_driver clip max_norm n0 n1 ... -- IN OUT
 *       parameters of n_i floats with gradients from IN (float32); OUT: the norm returned, the clipped gradients.
 *   recipe_driver resize h w C H W IN OUT
 *       IN: float32 (h, w, C) grid; OUT: vt_resize_bicubic to (H, W, C).
 *   recipe_driver adapt MODEL IMG NCLS WINDOW CHANS W_IN W_OUT LOSSES
 *       MODEL at image size IMG (N or HxW) with NCLS classes (WINDOW > 0: every stage's window; CHANS > 0: input
 *       channels) loads W_IN with vt_adapt_load (its lines on stdout), saves the store to W_OUT, then takes 16 AdamW
 *       steps (lr 3e-4) on one random batch of 8 with labels < NCLS and writes the 16 losses to LOSSES.
 *   recipe_driver ra n repeats replicas rank seed OUT
 *       OUT: the permutation vt_ra_sample starts from (n values), then its output for that rank.
 * Compiled by the test against build/libvitc.a. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/adapt.h"
#include "vitc/augment.h"
#include "vitc/mixup.h"
#include "vitc/sampler.h"
#include "vitc/model.h"
#include "vitc/train.h"
#include "vitc/weights.h"
#include "vitc/ops.h"
#include "vitc/optim.h"

static int read_f32(const char *path, float *dst, size_t n) {
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(dst, sizeof(float), n, f) : 0;
    if (f) fclose(f);
    return got == n ? 0 : -1;
}

static FILE *out_open(const char *path) { return fopen(path, "wb"); }

static void put(FILE *f, double v) { fwrite(&v, sizeof v, 1, f); }

static void put_f(FILE *f, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++) put(f, v[i]);
}

static int do_mixup(char **a, int roll) {
    const int B = atoi(a[0]), C = atoi(a[1]), H = atoi(a[2]), W = atoi(a[3]), K = atoi(a[4]);
    vt_mixup m = vt_mixup_timm(K);
    m.roll = roll;
    vt_mixup_draw d = {atof(a[5]), atoi(a[6]), atoi(a[7]), atoi(a[8])};
    m.smoothing = atof(a[9]);
    m.correct_lam = atoi(a[10]);
    const size_t nx = (size_t)B * C * H * W;
    float *x = malloc(sizeof(float) * (nx + (size_t)B)), *t = malloc(sizeof(float) * (size_t)B * K);
    int *lab = malloc(sizeof(int) * (size_t)B);
    if (!x || !t || !lab || read_f32(a[11], x, nx + (size_t)B)) return 1;
    for (int b = 0; b < B; b++) lab[b] = (int)x[nx + b];
    vt_err e = {0};
    double lam;
    if (vt_mixup_apply(&m, &d, x, B, C, H, W, lab, t, &lam, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    FILE *f = out_open(a[12]);
    if (!f) return 1;
    put_f(f, x, nx);
    put_f(f, t, (size_t)B * K);
    put(f, lam);
    fclose(f);
    free(x);
    free(t);
    free(lab);
    return 0;
}

static int do_draws(char **a) {
    const int N = atoi(a[0]), H = atoi(a[1]), W = atoi(a[2]);
    vt_mixup m = vt_mixup_timm(10);
    m.mixup_alpha = atof(a[3]);
    m.cutmix_alpha = atof(a[4]);
    m.prob = atof(a[5]);
    m.switch_prob = atof(a[6]);
    vt_rng r;
    vt_rng_seed(&r, strtoull(a[7], NULL, 10));
    FILE *f = out_open(a[8]);
    if (!f) return 1;
    for (int i = 0; i < N; i++) {
        vt_mixup_draw d;
        vt_mixup_sample(&m, H, W, &r, &d);
        put(f, d.lam);
        put(f, d.cutmix);
        put(f, d.cy);
        put(f, d.cx);
    }
    fclose(f);
    return 0;
}

static int do_softce(char **a) {
    const int B = atoi(a[0]), K = atoi(a[1]), s[2] = {B, K};
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const vt_init z = {VT_INIT_ZERO, 0};
    vt_tensor *x = vt_param(g, "logits", 2, s, z), *t = vt_param(g, "targets", 2, s, z);
    vt_tensor *loss = vt_soft_cross_entropy(g, x, t);
    vt_graph_set_loss(g, loss);
    if (vt_graph_finalize(g, &e)) {
        fprintf(stderr, "build: %s\n", e.msg);
        return 1;
    }
    float *in = malloc(sizeof(float) * 2 * (size_t)B * K);
    if (!in || read_f32(a[2], in, 2 * (size_t)B * K)) return 1;
    memcpy(x->data, in, sizeof(float) * (size_t)B * K);
    memcpy(t->data, in + (size_t)B * K, sizeof(float) * (size_t)B * K);
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
    FILE *f = out_open(a[3]);
    if (!f) return 1;
    put(f, loss->data[0]);
    put_f(f, x->grad, (size_t)B * K);
    put_f(f, t->grad, (size_t)B * K);
    fclose(f);
    free(in);
    vt_graph_free(g);
    vt_params_free(P);
    return 0;
}

static int do_clip(int argc, char **a) {
    const double max_norm = atof(a[0]);
    int n = 0;
    while (n + 1 < argc && strcmp(a[1 + n], "--") != 0) n++;
    if (n + 4 != argc) return 2;
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        char name[32];
        int sz = atoi(a[1 + i]);
        snprintf(name, sizeof name, "p%d", i);
        vt_params_add(P, name, VT_PARAM, 1, &sz, (vt_init){VT_INIT_ZERO, 0}, &e);
        total += (size_t)sz;
    }
    if (vt_params_alloc_grads(P, &e)) return 1;
    float *in = malloc(sizeof(float) * total);
    if (!in || read_f32(a[n + 2], in, total)) return 1;
    size_t o = 0;
    for (int i = 0; i < n; o += (size_t)P->t[i]->numel, i++)
        memcpy(P->t[i]->grad, in + o, sizeof(float) * (size_t)P->t[i]->numel);
    double norm = vt_clip_grad_norm(P, max_norm);
    FILE *f = out_open(a[n + 3]);
    if (!f) return 1;
    put(f, norm);
    for (int i = 0; i < n; i++) put_f(f, P->t[i]->grad, (size_t)P->t[i]->numel);
    fclose(f);
    free(in);
    vt_params_free(P);
    return 0;
}

static int do_resize(char **a) {
    const int h = atoi(a[0]), w = atoi(a[1]), C = atoi(a[2]), H = atoi(a[3]), W = atoi(a[4]);
    float *src = malloc(sizeof(float) * (size_t)h * w * C), *dst = malloc(sizeof(float) * (size_t)H * W * C);
    if (!src || !dst || read_f32(a[5], src, (size_t)h * w * C)) return 1;
    vt_resize_bicubic(src, h, w, C, dst, H, W);
    FILE *f = out_open(a[6]);
    if (!f) return 1;
    put_f(f, dst, (size_t)H * W * C);
    fclose(f);
    free(src);
    free(dst);
    return 0;
}

static int do_adapt(char **a) {
    vt_err e = {0};
    const vt_model_cfg *base = vt_model_find(a[0]);
    vt_model_overrides ov = vt_model_no_overrides();
    if (vt_parse_size(a[1], &ov.img_size, &ov.img_w)) return fprintf(stderr, "bad size %s\n", a[1]), 1;
    ov.num_classes = atoi(a[2]);
    for (int i = 0; base && i < base->arch.nstages && atoi(a[3]) > 0; i++) ov.windows[i] = atoi(a[3]);
    if (atoi(a[4]) > 0) ov.in_chans = atoi(a[4]);
    ov.drop_path = 0.0f;
    vt_model_cfg c;
    vt_params *P = vt_params_new(&e);
    if (!base || vt_model_configure(base, &ov, &c, &e) || vt_model_init_params(&c, P, 7, &e) ||
        vt_adapt_load(P, c.arch.num_classes, c.arch.in_chans, c.arch.patch ? c.arch.img_size / c.arch.patch : 0,
                      c.arch.patch ? vt_arch_width(&c.arch) / c.arch.patch : 0, a[5], stdout, &e) ||
        vt_params_save(P, a[6], &e)) {
        fprintf(stderr, "%s\n", base ? e.msg : "unknown model");
        return 1;
    }
    const int B = 8, n = c.arch.in_chans * c.arch.img_size * vt_arch_width(&c.arch);
    float *x = malloc(sizeof(float) * (size_t)B * n), lab[8], losses[16];
    vt_rng r;
    vt_rng_seed(&r, 3);
    for (int i = 0; i < B * n; i++) x[i] = vt_rng_normal(&r);
    for (int i = 0; i < B; i++) lab[i] = (float)vt_rng_below(&r, (uint32_t)c.arch.num_classes);
    if (vt_grad_steps(&c, P, x, lab, B, 16, 3e-4, 0.05, losses, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    FILE *f = out_open(a[7]);
    if (!f) return 1;
    put_f(f, losses, 16);
    fclose(f);
    free(x);
    vt_params_free(P);
    return 0;
}

static int do_ra(char **a) {
    const int n = atoi(a[0]), reps = atoi(a[1]), R = atoi(a[2]), rank = atoi(a[3]);
    const uint64_t seed = strtoull(a[4], NULL, 10);
    int *perm = malloc(sizeof(int) * (size_t)n), *out = malloc(sizeof(int) * (size_t)n + 1);
    if (!perm || !out) return 1;
    vt_rng r;
    vt_rng_seed(&r, seed);
    vt_iota(perm, n);
    vt_shuffle(perm, n, &r); /* the draws vt_ra_sample makes from the same state */
    vt_rng_seed(&r, seed);
    vt_err e = {0};
    const int k = vt_ra_sample(out, n, reps, R, rank, &r, &e);
    if (k < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    FILE *f = out_open(a[5]);
    if (!f) return 1;
    for (int i = 0; i < n; i++) put(f, perm[i]);
    for (int i = 0; i < k; i++) put(f, out[i]);
    fclose(f);
    free(perm);
    free(out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 15 && strcmp(argv[1], "mixup") == 0) return do_mixup(argv + 2, 0);
    if (argc >= 15 && strcmp(argv[1], "mixup_roll") == 0) return do_mixup(argv + 2, 1);
    if (argc >= 11 && strcmp(argv[1], "draws") == 0) return do_draws(argv + 2);
    if (argc >= 6 && strcmp(argv[1], "softce") == 0) return do_softce(argv + 2);
    if (argc >= 6 && strcmp(argv[1], "clip") == 0) return do_clip(argc - 2, argv + 2);
    if (argc >= 9 && strcmp(argv[1], "resize") == 0) return do_resize(argv + 2);
    if (argc >= 10 && strcmp(argv[1], "adapt") == 0) return do_adapt(argv + 2);
    if (argc >= 8 && strcmp(argv[1], "ra") == 0) return do_ra(argv + 2);
    fprintf(stderr, "usage: see the comment at the top of recipe_driver.c\n");
    return 2;
}
