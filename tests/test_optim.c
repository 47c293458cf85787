/* AdamW against a double-precision reference, gradient clipping, optimiser state naming, LR schedule values. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "vitc/graph.h"
#include "vitc/ops.h"
#include "vitc/optim.h"
#include "vitc/rng.h"
#include "vitc/safetensors.h"
#include "vitc/schedule.h"
#include "vitc/tensor.h"
#include "vitc/weights.h"

enum { NW = 37, NB = 5, NSTEP = 6 };

/* A store with a decayed weight "w" (NW), a no_decay bias "b" (NB) and a buffer "buf" (3). */
static vt_params *make_store(vt_err *e) {
    vt_params *P = vt_params_new(e);
    if (!P) return NULL;
    int sw[2] = {NW, 1}, sb[1] = {NB}, sbuf[1] = {3};
    vt_init zero = {VT_INIT_ZERO, 0};
    vt_tensor *w = vt_params_add(P, "w", VT_PARAM, 2, sw, zero, e);
    vt_tensor *b = vt_params_add(P, "b", VT_PARAM, 1, sb, zero, e);
    vt_tensor *buf = vt_params_add(P, "buf", VT_BUFFER, 1, sbuf, zero, e);
    if (!w || !b || !buf) {
        vt_params_free(P);
        return NULL;
    }
    b->no_decay = 1;
    if (vt_params_alloc_grads(P, e)) {
        vt_params_free(P);
        return NULL;
    }
    vt_rng r;
    vt_rng_seed(&r, 5);
    for (int i = 0; i < NW; i++) w->data[i] = vt_rng_normal(&r);
    for (int i = 0; i < NB; i++) b->data[i] = vt_rng_normal(&r);
    for (int i = 0; i < 3; i++) buf->data[i] = (float)i + 0.5f;
    return P;
}

/* Runs NSTEP AdamW steps with random gradients against a double reference of torch.optim.AdamW. */
static void check_adamw(vt_test *T, float wd) {
    vt_err e = {0};
    vt_params *P = make_store(&e);
    T_CHECK(T, P != NULL, "store: %s", e.msg);
    if (!P) return;
    vt_tensor *w = vt_params_find(P, "w"), *b = vt_params_find(P, "b"), *buf = vt_params_find(P, "buf");
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    vt_adamw o;
    T_CHECK(T, vt_adamw_init(&o, P, 0.9f, 0.999f, 1e-8f, wd, &e) == 0, "init: %s", e.msg);
    T_CHECK(T, o.n == 2 && o.step == 0, "tracks %d params (want 2: w, b)", o.n);
    vt_tensor *ts[2] = {w, b};
    double ref[2][NW], m[2][NW] = {{0}}, v[2][NW] = {{0}};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ts[k]->numel; i++) ref[k][i] = ts[k]->data[i];
    vt_rng r;
    vt_rng_seed(&r, 11);
    double maxerr = 0, maxmerr = 0;
    for (int t = 1; t <= NSTEP; t++) {
        const float lr = 1e-2f * (float)(NSTEP + 1 - t) / NSTEP;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < ts[k]->numel; i++) {
                float g = vt_rng_normal(&r) * (i % 3 == 0 ? 1e-3f : 1.0f);
                if (i == 1) g = 1e-9f; /* eps matters here */
                if (i == 2) g = 0.0f;
                ts[k]->grad[i] = g;
            }
        if (t == 1 && wd == 0.0f) { /* first step moves each element by lr * g / (|g| + eps) */
            float w0 = w->data[0], g0 = w->grad[0], w1 = w->data[1];
            vt_adamw_step(&o, lr);
            double want0 = (double)w0 - (double)lr * g0 / (fabs((double)g0) + eps);
            double want1 = (double)w1 - (double)lr * 1e-9 / (1e-9 + eps);
            T_CHECK(T, fabs(w->data[0] - want0) < 1e-7, "first step %.9g vs %.9g", (double)w->data[0], want0);
            T_CHECK(T, fabs(w->data[1] - want1) < 1e-7, "first step (tiny g) %.9g vs %.9g", (double)w->data[1],
                    want1);
        } else {
            vt_adamw_step(&o, lr);
        }
        for (int k = 0; k < 2; k++) {
            int decay = !ts[k]->no_decay;
            for (int i = 0; i < ts[k]->numel; i++) {
                double g = ts[k]->grad[i];
                if (decay) ref[k][i] *= 1.0 - (double)lr * wd;
                m[k][i] = b1 * m[k][i] + (1 - b1) * g;
                v[k][i] = b2 * v[k][i] + (1 - b2) * g * g;
                double mhat = m[k][i] / (1 - pow(b1, t)), vhat = v[k][i] / (1 - pow(b2, t));
                ref[k][i] -= (double)lr * mhat / (sqrt(vhat) + eps);
                double err = fabs(ts[k]->data[i] - ref[k][i]) / (1e-2 + fabs(ref[k][i])) /* lr scale */;
                maxerr = t_worse(maxerr, err);
                /* m in float: absolute rounding of its g-sized terms, relative elsewhere */
                double merr = fabs(o.m[k][i] - m[k][i]) / (1e-7 + 1e-6 * fabs(m[k][i]));
                if (merr > maxmerr) maxmerr = merr;
            }
        }
    }
    T_CHECK(T, maxerr < 2e-6, "wd=%g: max relative error vs double reference %g", (double)wd, maxerr);
    T_CHECK(T, maxmerr < 1, "wd=%g: first moment off the double reference by %g tolerances", (double)wd, maxmerr);
    T_CHECK(T, o.step == NSTEP, "step count %lld", (long long)o.step);
    T_CHECK(T, buf->data[0] == 0.5f && buf->data[2] == 2.5f, "buffer changed by the optimiser");

    /* state arrays for checkpoints */
    char name[160];
    int64_t numel = 0;
    const vt_tensor *pt = NULL;
    T_CHECK(T, vt_adamw_nstate(&o) == 4, "nstate %d", vt_adamw_nstate(&o));
    float *s0 = vt_adamw_state(&o, 0, name, sizeof name, &numel, &pt);
    T_CHECK(T, s0 == o.m[0] && strcmp(name, "optim/m/w") == 0 && numel == NW && pt == w, "state 0: %s", name);
    float *s3 = vt_adamw_state(&o, 3, name, sizeof name, &numel, &pt);
    T_CHECK(T, s3 == o.v[1] && strcmp(name, "optim/v/b") == 0 && numel == NB && pt == b, "state 3: %s", name);
    T_CHECK(T, vt_adamw_state(&o, 4, name, sizeof name, &numel, &pt) == NULL, "state 4 exists");
    vt_adamw_free(&o);
    vt_adamw_free(&o);
    vt_params_free(P);
}

/* AdamW's step and the gradients' zeroing split every tensor over the threads in one parallel region: 3 steps on 1
 * and on 3 threads give bit-identical weights and moments, over tensors of 1 to 70,001 elements (decayed, not
 * decayed, a buffer), and zeroing leaves no gradient element non-zero. */
static void check_adamw_threads(vt_test *T) {
    static const int sizes[] = {1, 7, 64, 1000, 32769, 70001};
    enum { NT = sizeof sizes / sizeof sizes[0] };
    float *p1 = NULL;
    int64_t total = 0;
    for (int i = 0; i < NT; i++) total += sizes[i];
    int same = 1, zeroed = 1;
    const int saved = omp_get_max_threads();
    for (int run = 0; run < 2; run++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        char nm[16];
        for (int i = 0; P && i < NT; i++) {
            snprintf(nm, sizeof nm, "t%d", i);
            vt_tensor *t = vt_params_add(P, nm, VT_PARAM, 1, &sizes[i], (vt_init){VT_INIT_NORMAL, 1.0f}, &e);
            if (t && i % 2) t->no_decay = 1;
        }
        const int one = 5;
        vt_params_add(P, "buf", VT_BUFFER, 1, &one, (vt_init){VT_INIT_ONE, 0.0f}, &e);
        vt_adamw o = {0};
        int ok = P && P->n == NT + 1 && vt_params_alloc_grads(P, &e) == 0 &&
                 vt_adamw_init(&o, P, 0.9f, 0.999f, 1e-8f, 0.05f, &e) == 0;
        T_CHECK(T, ok, "AdamW threads: store: %s", e.msg);
        if (ok) {
            vt_params_init(P, 5);
            omp_set_num_threads(run ? 3 : 1);
            vt_rng r;
            vt_rng_seed(&r, 9);
            for (int step = 0; step < 3; step++) {
                for (int i = 0; i < NT; i++)
                    for (int64_t j = 0; j < P->t[i]->numel; j++) P->t[i]->grad[j] = vt_rng_normal(&r);
                vt_adamw_step(&o, 1e-2f);
            }
            vt_params_zero_grad(P);
            omp_set_num_threads(saved);
            for (int i = 0; i < NT; i++)
                for (int64_t j = 0; j < P->t[i]->numel; j++) zeroed &= P->t[i]->grad[j] == 0.0f;
            if (!run && (p1 = malloc(sizeof(float) * 3 * (size_t)total)) != NULL) {
                for (int i = 0, k = 0; i < NT; k += sizes[i++]) {
                    memcpy(p1 + k, P->t[i]->data, sizeof(float) * (size_t)sizes[i]);
                    memcpy(p1 + total + k, o.m[i], sizeof(float) * (size_t)sizes[i]);
                    memcpy(p1 + 2 * total + k, o.v[i], sizeof(float) * (size_t)sizes[i]);
                }
            } else if (run && p1) {
                for (int i = 0, k = 0; i < NT; k += sizes[i++])
                    same &= !memcmp(p1 + k, P->t[i]->data, sizeof(float) * (size_t)sizes[i]) &&
                            !memcmp(p1 + total + k, o.m[i], sizeof(float) * (size_t)sizes[i]) &&
                            !memcmp(p1 + 2 * total + k, o.v[i], sizeof(float) * (size_t)sizes[i]);
            }
        }
        omp_set_num_threads(saved);
        vt_adamw_free(&o);
        vt_params_free(P);
    }
    T_CHECK(T, p1 && same, "AdamW's weights and moments bit-identical on 1 and 3 threads");
    T_CHECK(T, zeroed, "vt_params_zero_grad leaves every gradient element 0");
    free(p1);
}

static void check_clip(vt_test *T) {
    vt_err e = {0};
    vt_params *P = make_store(&e);
    if (!P) return;
    vt_tensor *w = vt_params_find(P, "w"), *b = vt_params_find(P, "b");
    vt_params_zero_grad(P);
    w->grad[0] = 3;
    w->grad[NW - 1] = 4;
    b->grad[2] = 12; /* global norm 13 */
    double n = vt_clip_grad_norm(P, 0);
    T_CHECK(T, fabs(n - 13) < 1e-9 && w->grad[0] == 3, "no clip: norm %g", n);
    n = vt_clip_grad_norm(P, 26);
    T_CHECK(T, fabs(n - 13) < 1e-9 && w->grad[0] == 3 && b->grad[2] == 12, "max above norm: unchanged");
    n = vt_clip_grad_norm(P, 6.5);
    T_CHECK(T, fabs(n - 13) < 1e-9, "clip returns the norm before clipping: %g", n);
    double n2 = vt_clip_grad_norm(P, 0);
    T_CHECK(T, fabs(n2 - 6.5) < 1e-5 && fabs(w->grad[0] - 1.5) < 1e-6, "after clip norm %g, g0 %g", n2,
            (double)w->grad[0]);
    /* the norm of a large gradient is bit-identical on 1, 2 and 3 threads (the ranks of a data-parallel run clip by
     * it, whatever their --threads) */
    vt_params *Q = vt_params_new(&e);
    const int big = 300007;
    vt_tensor *q = Q ? vt_params_add(Q, "q", VT_PARAM, 1, &big, (vt_init){VT_INIT_NORMAL, 1.0f}, &e) : NULL;
    if (q && vt_params_alloc_grads(Q, &e) == 0) {
        for (int j = 0; j < big; j++) q->grad[j] = (float)sin(0.37 * j) * (j % 3 ? 1.0f : 1e-3f);
        const int saved = omp_get_max_threads();
        double norms[3];
        for (int th = 1; th <= 3; th++) {
            omp_set_num_threads(th);
            norms[th - 1] = vt_clip_grad_norm(Q, 0);
        }
        omp_set_num_threads(saved);
        T_CHECK(T, norms[0] == norms[1] && norms[0] == norms[2], "clip norm on 1, 2, 3 threads: %.17g %.17g %.17g",
                norms[0], norms[1], norms[2]);
    }
    T_CHECK(T, q != NULL, "store: %s", e.msg);
    vt_params_free(Q);
    vt_err e2 = {0};
    vt_adamw o;
    T_CHECK(T, vt_adamw_init(&o, P, 1.0f, 0.999f, 1e-8f, 0.0f, &e2) == -1 && strstr(e2.msg, "betas"),
            "beta1 = 1 rejected: %s", e2.msg);
    vt_params_free(P);
}

/* vt_adamw_init allocates missing gradients and leaves frozen parameters alone. */
static void check_init(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    int s[1] = {3};
    vt_init zero = {VT_INIT_ZERO, 0};
    vt_tensor *w = vt_params_add(P, "w", VT_PARAM, 1, s, zero, &e);
    vt_tensor *f = vt_params_add(P, "frozen", VT_PARAM, 1, s, zero, &e);
    T_CHECK(T, w && f, "store: %s", e.msg);
    if (!w || !f) {
        vt_params_free(P);
        return;
    }
    f->requires_grad = 0;
    vt_adamw o;
    T_CHECK(T, vt_adamw_init(&o, P, 0.9f, 0.999f, 1e-8f, 0.05f, &e) == 0, "init: %s", e.msg);
    T_CHECK(T, o.n == 1 && o.p[0] == w && w->grad != NULL && f->grad == NULL, "tracks %d params, w grad %p, frozen %p",
            o.n, (void *)w->grad, (void *)f->grad);
    if (w->grad) {
        w->grad[0] = 1;
        f->data[0] = 2;
        vt_adamw_step(&o, 0.1f);
        T_CHECK(T, w->data[0] < 0 && f->data[0] == 2, "step moved w to %g, frozen to %g", (double)w->data[0],
                (double)f->data[0]);
    }
    vt_adamw_free(&o);
    vt_params_free(P);
}

static void check_schedule(vt_test *T) {
    const double pi = 3.14159265358979323846;
    vt_sched s = {1e-3, 1e-6, 1e-5, 10, 100, 0, 0, VT_SCHED_STEP};
    double tol = 1e-15;
    T_CHECK(T, fabs(vt_sched_lr(&s, 0) - 1e-6) < tol, "step 0: %g", vt_sched_lr(&s, 0));
    T_CHECK(T, fabs(vt_sched_lr(&s, 5) - (1e-6 + 5 * (1e-3 - 1e-6) / 10)) < tol, "mid warm-up: %g",
            vt_sched_lr(&s, 5));
    double end_warm = 1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + cos(pi * 10 / 100));
    T_CHECK(T, fabs(vt_sched_lr(&s, 10) - end_warm) < tol, "end of warm-up (timm: cosine from step 0): %g vs %g",
            vt_sched_lr(&s, 10), end_warm);
    T_CHECK(T, vt_sched_lr(&s, 9) < vt_sched_lr(&s, 10), "warm-up rises");
    T_CHECK(T, fabs(vt_sched_lr(&s, 50) - (1e-3 + 1e-5) / 2) < tol, "midpoint: %g", vt_sched_lr(&s, 50));
    T_CHECK(T, vt_sched_lr(&s, 99) > 1e-5 && vt_sched_lr(&s, 99) < 1.1e-5, "last step: %g", vt_sched_lr(&s, 99));
    T_CHECK(T, vt_sched_lr(&s, 100) == 1e-5 && vt_sched_lr(&s, 1000) == 1e-5, "end: %g", vt_sched_lr(&s, 100));
    s.warmup_prefix = 1;
    T_CHECK(T, fabs(vt_sched_lr(&s, 10) - 1e-3) < tol, "prefix: end of warm-up is base lr: %g", vt_sched_lr(&s, 10));
    T_CHECK(T, fabs(vt_sched_lr(&s, 60) - (1e-3 + 1e-5) / 2) < tol, "prefix: midpoint %g", vt_sched_lr(&s, 60));
    T_CHECK(T, vt_sched_lr(&s, 110) == 1e-5, "prefix: end");
    vt_sched nw = {5e-4, 0, 0, 0, 20, 0, 0, VT_SCHED_STEP};
    T_CHECK(T, vt_sched_lr(&nw, 0) == 5e-4 && fabs(vt_sched_lr(&nw, 10) - 2.5e-4) < tol, "no warm-up");
    /* per epoch (8 steps each; 5 warm-up epochs, cosine over 30 epochs): constant within an epoch; timm's train.py
     * trains epoch e at the value of e, DeiT's main.py at the value of e - 1 (epochs 0 and 1 at the first) */
    const int spe = 8;
    vt_sched ep = {1e-3, 1e-6, 1e-5, 5 * spe, 30 * spe, 0, spe, VT_SCHED_EPOCH};
    vt_sched deit = ep;
    deit.update = VT_SCHED_DEIT;
    int flat = 1, timm = 1, lag = 1;
    for (int e = 0; e < 32; e++) {
        const double want = e < 5 ? 1e-6 + e * (1e-3 - 1e-6) / 5
                          : e >= 30 ? 1e-5 : 1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + cos(pi * e / 30));
        const double want_lag = e == 0 ? 1e-6 : e - 1 < 5 ? 1e-6 + (e - 1) * (1e-3 - 1e-6) / 5
                              : 1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + cos(pi * (e - 1) / 30));
        timm &= fabs(vt_sched_lr(&ep, (int64_t)e * spe) - want) < tol;
        lag &= fabs(vt_sched_lr(&deit, (int64_t)e * spe) - (e - 1 >= 30 ? 1e-5 : want_lag)) < tol;
        for (int i = 1; i < spe; i++) flat &= vt_sched_lr(&ep, (int64_t)e * spe + i) == vt_sched_lr(&ep, (int64_t)e * spe);
    }
    T_CHECK(T, timm && lag && flat, "per-epoch updates: timm's %d, DeiT's %d, constant within epochs %d", timm, lag, flat);
    T_CHECK(T, vt_sched_lr(&deit, spe) == 1e-6 && vt_sched_lr(&deit, 2 * spe) > 1e-4, "DeiT: epoch 1 at the warm-up lr");
    /* torchvision's SequentialLR (MSF): LinearLR from 0.033·lr over 10 epochs, then CosineAnnealingLR over the other
     * 90 to 0, per epoch */
    vt_sched tv = {1e-3, 0.033e-3, 0, 10 * spe, 90 * spe, 1, spe, VT_SCHED_EPOCH};
    T_CHECK(T, fabs(vt_sched_lr(&tv, 5 * spe + 3) - 1e-3 * (0.033 + 0.967 * 0.5)) < tol &&
                   fabs(vt_sched_lr(&tv, 10 * spe) - 1e-3) < tol &&
                   fabs(vt_sched_lr(&tv, 55 * spe + 7) - 0.5e-3) < tol && vt_sched_lr(&tv, 100 * spe) == 0,
            "torchvision's warm-up then cosine: %g %g %g", vt_sched_lr(&tv, 5 * spe), vt_sched_lr(&tv, 10 * spe),
            vt_sched_lr(&tv, 55 * spe));
    /* a warm-up as long as the run or longer leaves the cosine no steps (0 or fewer): past the warm-up (cooldown
     * epochs) the floor, as the start-up note says (it had been the peak lr) */
    for (int64_t cos_steps = 0; cos_steps >= -2 * spe; cos_steps -= 2 * spe) {
        vt_sched none = {1e-3, 0.033e-3, 1e-5, 10 * spe, cos_steps, 1, spe, VT_SCHED_EPOCH};
        T_CHECK(T, vt_sched_lr(&none, 9 * spe) < 1e-3 && vt_sched_lr(&none, 10 * spe) == 1e-5 &&
                       vt_sched_lr(&none, 12 * spe) == 1e-5,
                "cosine of %lld steps: after the warm-up %g, not the peak", (long long)cos_steps,
                vt_sched_lr(&none, 10 * spe));
    }
}

/* ---- frozen parameters in a graph (requires_grad = 0 before the ops are built) ---- */

enum { FZ_DW_VIEW, FZ_DW_NHWC, FZ_CONV_NHWC, FZ_LINEAR, FZ_LAYERNORM, FZ_BATCHNORM, FZ_CASES };
static const char *const fz_name[FZ_CASES] = {"depthwise conv2d, weight a view", "dwconv_nhwc", "conv2d_nhwc 3x3",
                                              "linear", "layernorm", "batchnorm (train)"};

/* A parameter named nm that requires a gradient unless frozen. */
static vt_tensor *fz_param(vt_graph *g, const char *nm, int ndim, const int *shape, int frozen) {
    vt_tensor *t = vt_param(g, nm, ndim, shape, (vt_init){VT_INIT_NORMAL, 0.5f});
    if (t && frozen) t->requires_grad = 0;
    return t;
}

/* Case c's op on x with its weight "w" frozen or not (its other parameters train); *wout: that weight. */
static vt_tensor *fz_build(vt_graph *g, int c, vt_tensor *x, int frozen, vt_tensor **wout) {
    const int C = x->shape[c == FZ_DW_VIEW ? 1 : 3], s1[1] = {C}, flat[2] = {C, 9}, dw[4] = {C, 1, 3, 3}, full[4] = {6, C, 3, 3},
              lin[2] = {7, C};
    vt_tensor *b = fz_param(g, "b", 1, s1, 0), *w;
    switch (c) {
    case FZ_DW_VIEW: /* NCHW: x read as (B, C, H, W); 28 x 28 positions, where conv2d keeps scratch for dW */
        w = *wout = fz_param(g, "w", 2, flat, frozen);
        return vt_conv2d(g, x, vt_reshape(g, w, 4, dw), b, 1, 1, x->shape[1]);
    case FZ_DW_NHWC: w = *wout = fz_param(g, "w", 4, dw, frozen); return vt_dwconv_nhwc(g, x, w, b, 1);
    case FZ_CONV_NHWC: w = *wout = fz_param(g, "w", 4, full, frozen); return vt_conv2d_nhwc(g, x, w, NULL, 1, 1, 1);
    case FZ_LINEAR: w = *wout = fz_param(g, "w", 2, lin, frozen); return vt_linear(g, x, w, NULL);
    case FZ_LAYERNORM: w = *wout = fz_param(g, "w", 1, s1, frozen); return vt_layernorm(g, x, w, b, 1e-5f);
    default: {
        vt_tensor *rm = vt_params_add(g->P, "rm", VT_BUFFER, 1, s1, (vt_init){VT_INIT_ZERO, 0}, &g->err),
                  *rv = vt_params_add(g->P, "rv", VT_BUFFER, 1, s1, (vt_init){VT_INIT_ONE, 0}, &g->err);
        w = *wout = fz_param(g, "w", 1, s1, frozen);
        return rm && rv ? vt_batchnorm(g, x, w, b, rm, rv, NULL, x->ndim - 1, 1e-5f, 0.1f) : NULL;
    }
    }
}

/* One training step of case c's graph (x (1, 8, 28, 28) a parameter, loss Σ y·r); the gradients of x and b copied to
 * gx / gb (NULL when absent); 0 when it ran. Frozen: the weight gets no gradient and the other gradients equal the
 * unfrozen graph's. */
static int fz_step(vt_test *T, int c, int frozen, float *gx, int64_t nx, float *gb, int nb) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = P ? vt_graph_new(P, 1, &e) : NULL;
    int ok = 0;
    if (g) {
        const int xs[4] = {1, 8, 28, 28};
        vt_tensor *x = vt_param(g, "x", 4, xs, (vt_init){VT_INIT_NORMAL, 1.0f}), *w = NULL;
        vt_tensor *y = x ? fz_build(g, c, x, frozen, &w) : NULL;
        vt_tensor *r = y ? vt_input(g, "r", y->ndim, y->shape) : NULL;
        if (r) vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
        if (r && !vt_graph_finalize(g, &e) && !vt_params_alloc_grads(P, &e)) {
            vt_params_init(P, 11);
            vt_rng rng;
            vt_rng_seed(&rng, 12);
            for (int64_t j = 0; j < r->numel; j++) r->data[j] = vt_rng_normal(&rng);
            vt_graph_forward(g);
            vt_params_zero_grad(P);
            vt_graph_backward(g);
            vt_tensor *b = vt_params_find(P, "b");
            T_CHECK(T, frozen ? w->grad == NULL : w->grad != NULL, "%s (%s): weight gradient %p", fz_name[c],
                    frozen ? "frozen" : "trained", (void *)w->grad);
            ok = x->grad && b && b->grad && x->numel == nx && b->numel == nb;
            if (ok) {
                memcpy(gx, x->grad, sizeof(float) * (size_t)nx);
                memcpy(gb, b->grad, sizeof(float) * (size_t)nb);
            }
            if (ok && frozen && c == FZ_LINEAR) { /* `vitc grad`'s file: the trained parameters' gradients only */
                char path[] = "/tmp/vitc_frozen_XXXXXX";
                const int fd = mkstemp(path);
                const float loss = 1.0f;
                vt_st_file f;
                T_CHECK(T, fd >= 0 && vt_params_save_grads(P, path, &loss, 1, &e) == 0 && vt_st_open(path, &f, &e) == 0,
                        "save the gradients with w frozen: %s", e.msg);
                if (fd >= 0 && !e.msg[0]) {
                    T_CHECK(T, vt_st_find(&f, "grad/b") && vt_st_find(&f, "grad/x") && !vt_st_find(&f, "grad/w"),
                            "grad/b and grad/x saved, no grad/w");
                    vt_st_close(&f);
                }
                if (fd >= 0) close(fd), unlink(path);
            }
        }
    }
    T_CHECK(T, ok, "%s (%s): build or run failed: %s", fz_name[c], frozen ? "frozen" : "trained",
            g && g->err.msg[0] ? g->err.msg : e.msg);
    vt_graph_free(g);
    vt_params_free(P);
    return ok ? 0 : -1;
}

/* requires_grad changed after an op was built on the parameter (the op sized its backward scratch by it: a late
 * unfreeze had a pointwise conv's backward write through NULL scratch), directly or through a view of it (a reshaped
 * weight), or after its gradient was made: refused in train graphs. An eval graph runs no backward: accepted. */
static void check_frozen_late(vt_test *T) {
    for (int k = 0; k < 6; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = P ? vt_graph_new(P, k != 5, &e) : NULL;
        if (!g) {
            T_CHECK(T, 0, "store: %s", e.msg);
            vt_params_free(P);
            return;
        }
        const int xs[4] = {2, 8, 6, 6}, ws[4] = {6, 8, 1, 1}, w2[2] = {6, 8}, bs[1] = {6};
        const int view = k == 3 || k == 4, unfreeze = k == 0 || k == 3;
        vt_tensor *x = vt_input(g, "x", 4, xs), *b = fz_param(g, "b", 1, bs, 0);
        vt_tensor *w = fz_param(g, "w", view ? 2 : 4, view ? w2 : ws, unfreeze);
        vt_tensor *y = k == 2 ? NULL : vt_conv2d(g, x, view ? vt_reshape(g, w, 4, ws) : w, b, 1, 0, 1);
        const char *want = unfreeze ? "unfrozen" : "frozen";
        if (k != 2) w->requires_grad = unfreeze; /* after the conv was built */
        if (k == 2) { /* frozen after its gradient was made */
            T_CHECK(T, vt_params_alloc_grads(P, &e) == 0 && w->grad, "gradients: %s", e.msg);
            w->requires_grad = 0;
            y = vt_conv2d(g, x, fz_param(g, "w2", 4, ws, 0), b, 1, 0, 1); /* no op on w */
            want = "frozen after its gradient";
        }
        if (y && k != 5) vt_graph_set_loss(g, vt_sum(g, y));
        if (y && k == 5) vt_graph_output(g, y);
        const int rc = y ? vt_graph_finalize(g, &e) : -1;
        if (k == 5)
            T_CHECK(T, rc == 0, "an eval graph frozen after it was built runs: %s", e.msg);
        else
            T_CHECK(T, rc != 0 && strstr(e.msg, want) && strstr(e.msg, k == 2 ? "'w'" : "(w)"),
                    "case %d: finalize must refuse (%s): %s", k, want, e.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

static void check_frozen_graph(vt_test *T) {
    enum { NX = 8 * 28 * 28 };
    for (int c = 0; c < FZ_CASES; c++) {
        const int NBIAS = c == FZ_DW_VIEW ? 8 : 28;
        float gx[2][NX], gb[2][28];
        if (fz_step(T, c, 0, gx[0], NX, gb[0], NBIAS) || fz_step(T, c, 1, gx[1], NX, gb[1], NBIAS)) continue;
        double d = 0, m = 0;
        for (int j = 0; j < NX; j++) d = t_worse(d, fabs(gx[0][j] - gx[1][j])), m = fmax(m, fabs(gx[0][j]));
        for (int j = 0; j < NBIAS; j++) d = t_worse(d, fabs(gb[0][j] - gb[1][j])), m = fmax(m, fabs(gb[0][j]));
        T_CHECK(T, m > 0 && d <= 1e-6 * m, "%s: the other gradients moved by %g (scale %g) with the weight frozen",
                fz_name[c], d, m);
    }
}

void test_optim(vt_test *T) {
    check_adamw(T, 0.0f);
    check_adamw(T, 0.05f);
    check_adamw_threads(T);
    check_clip(T);
    check_init(T);
    check_frozen_graph(T);
    check_frozen_late(T);
    check_schedule(T);
}
