/* Gradient checks and value checks for layernorm (rows and channel-first), batchnorm (channels-first/-last, train/eval), the elementwise
 * activations, and softmax over every axis; plus build-time shape errors for these ops. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/blocks.h"
#include "vitc/ops.h"

/* ---------------------------------------------------------------- builders for gc_case */

/* x0 input, x1 weight (if ia[0] & 1), x2 bias (if ia[0] & 2); fa[0] eps; ia[1]: + x0 (a residual, so the backward
 * adds into a dx that already holds a gradient). */
static vt_tensor *b_ln(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *w = (c->ia[0] & 1) ? x[1] : NULL, *b = (c->ia[0] & 2) ? x[2] : NULL;
    vt_tensor *y = vt_layernorm(g, x[0], w, b, c->fa[0] > 0 ? c->fa[0] : 1e-5f);
    return c->ia[1] ? vt_add(g, y, x[0]) : y;
}

/* x0 input, x1 w, x2 b, x3 running mean, x4 running var, x5 num_batches_tracked; ia[0] axis, ia[1] affine,
 * ia[2] 1: eval-mode node inside a train graph (so that its backward is exercised with gradients). */
static vt_tensor *b_bn(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int keep = g->training;
    if (c->ia[2]) g->training = 0;
    vt_tensor *y = vt_batchnorm(g, x[0], c->ia[1] ? x[1] : NULL, c->ia[1] ? x[2] : NULL, x[3], x[4], x[5], c->ia[0],
                                1e-5f, 0.1f);
    g->training = keep;
    return y;
}

/* vt_batchnorm_act (the activation kind in ia[3]) and the chain it replaces, BatchNorm then vt_unary; ia as b_bn. */
static vt_tensor *b_bn_act(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int keep = g->training;
    if (c->ia[2]) g->training = 0;
    vt_tensor *y = vt_batchnorm_act(g, x[0], c->ia[1] ? x[1] : NULL, c->ia[1] ? x[2] : NULL, x[3], x[4], x[5],
                                    c->ia[0], 1e-5f, 0.1f, c->ia[3]);
    g->training = keep;
    return y;
}

/* x0 + b_bn: x0's gradient gets a second term, so a backward that writes it where it must add fails */
static vt_tensor *b_bn_res(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_add(g, x[0], b_bn(g, x, c));
}

static vt_tensor *b_bn_then_act(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_unary(g, b_bn(g, x, c), (vt_unary_kind)c->ia[3], 0.0f);
}

/* BatchNorm without running statistics (track_running_stats=False): batch statistics in every mode. */
static vt_tensor *b_bn_nostats(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int keep = g->training;
    g->training = 0;
    vt_tensor *y = vt_batchnorm(g, x[0], x[1], x[2], NULL, NULL, NULL, c->ia[0], 1e-5f, 0.1f);
    g->training = keep;
    return y;
}

static vt_tensor *b_unary(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_unary(g, x[0], (vt_unary_kind)c->ia[0], c->fa[0]);
}
static vt_tensor *b_gelu(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_gelu(g, x[0]);
}
static vt_tensor *b_relu(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_relu(g, x[0]);
}
static vt_tensor *b_softmax(vt_graph *g, vt_tensor **x, const gc_case *c) { return vt_softmax(g, x[0], c->ia[0]); }

/* Softmax followed by a second op, so the softmax output gradient is not just r (exercises the Σ term). */
static vt_tensor *b_softmax_sq(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *y = vt_softmax(g, x[0], c->ia[0]);
    return vt_mul(g, y, y);
}

/* vt_softmax_res(x0, x1, fa[0]) and the chain it replaces, softmax + fa[0]·x1; ia[0] 1: x1 added once more after
 * the op (so its gradient must be added to, not written). */
static vt_tensor *b_softmax_res(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *y = vt_softmax_res(g, x[0], x[1], c->fa[0]);
    return c->ia[0] ? vt_add(g, y, x[1]) : y;
}
static vt_tensor *b_softmax_res_plain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *y = vt_add(g, vt_softmax(g, x[0], -1), vt_scale(g, x[1], c->fa[0]));
    return c->ia[0] ? vt_add(g, y, x[1]) : y;
}

/* ---------------------------------------------------------------- fills */

/* Uniform in [-8, 8] kept >= 0.05 away from the kinks -3, 0, 3, 6 (relu, relu6, hardswish). */
static void fill_nokink(float *d, int64_t n, int which, vt_rng *r) {
    (void)which;
    static const float kinks[4] = {-3.0f, 0.0f, 3.0f, 6.0f};
    for (int64_t i = 0; i < n; i++) {
        float v;
        int ok;
        do {
            v = 16.0f * vt_rng_uniform(r) - 8.0f;
            ok = 1;
            for (int k = 0; k < 4; k++) ok &= fabsf(v - kinks[k]) >= 0.05f;
        } while (!ok);
        d[i] = v;
    }
}

/* Positive values in [0.3, 2.3] (pow with a non-integer exponent, running variances). */
static void fill_pos(float *d, int64_t n, int which, vt_rng *r) {
    (void)which;
    for (int64_t i = 0; i < n; i++) d[i] = 0.3f + 2.0f * vt_rng_uniform(r);
}

/* Softplus: uniform in [-30, 30] away from the threshold 20 (covers both branches). */
static void fill_softplus(float *d, int64_t n, int which, vt_rng *r) {
    (void)which;
    for (int64_t i = 0; i < n; i++) {
        float v;
        do v = 60.0f * vt_rng_uniform(r) - 30.0f;
        while (fabsf(v - 20.0f) < 0.05f);
        d[i] = v;
    }
}

static void fill_wide(float *d, int64_t n, int which, vt_rng *r) {
    (void)which;
    for (int64_t i = 0; i < n; i++) d[i] = 3.0f * vt_rng_normal(r);
}

/* BatchNorm operands: x ~ 2·N(0,1) + 0.5, w/b/mean ~ N(0,1), var in [0.3, 2.3], nbt 0. */
static void fill_bn(float *d, int64_t n, int which, vt_rng *r) {
    for (int64_t i = 0; i < n; i++) {
        switch (which) {
        case 0: d[i] = 2.0f * vt_rng_normal(r) + 0.5f; break;
        case 4: d[i] = 0.3f + 2.0f * vt_rng_uniform(r); break;
        case 5: d[i] = 0.0f; break;
        default: d[i] = vt_rng_normal(r);
        }
    }
}

/* ---------------------------------------------------------------- forward helper for value checks */

typedef struct {
    vt_params *P;
    vt_graph *g;
    vt_tensor *x, *y;
} fwd1;

/* Builds a one-op graph on an input of the given shape; `op` builds the node. Returns 0 on success. */
static int fwd1_build(vt_test *T, fwd1 *f, int training, int ndim, const int *shape,
                      vt_tensor *(*op)(vt_graph *, vt_tensor *, void *), void *arg) {
    vt_err e = {0};
    f->P = vt_params_new(&e);
    f->g = vt_graph_new(f->P, training, &e);
    f->x = vt_input(f->g, "x", ndim, shape);
    f->y = op(f->g, f->x, arg);
    vt_graph_output(f->g, f->y);
    int rc = vt_graph_finalize(f->g, &e);
    T_CHECK(T, rc == 0, "finalize: %s", e.msg);
    return rc;
}

static void fwd1_free(fwd1 *f) {
    vt_graph_free(f->g);
    vt_params_free(f->P);
}

static vt_tensor *op_unary(vt_graph *g, vt_tensor *x, void *arg) {
    const float *a = arg;
    return vt_unary(g, x, (vt_unary_kind)(int)a[0], a[1]);
}

/* f(v) for one kind at a list of points against double-precision expected values. */
static void check_unary_values(vt_test *T, const char *name, vt_unary_kind kind, float p, int npts, const float *v,
                               const double *want) {
    fwd1 f;
    float arg[2] = {(float)kind, p};
    if (fwd1_build(T, &f, 0, 1, &npts, op_unary, arg) == 0) {
        memcpy(f.x->data, v, sizeof(float) * (size_t)npts);
        vt_graph_forward(f.g);
        for (int i = 0; i < npts; i++)
            T_CHECK(T,
                    isnan(want[i]) ? isnan(f.y->data[i])
                                   : fabs(f.y->data[i] - want[i]) <= 2e-6 * fmax(1.0, fabs(want[i])),
                    "%s(%g) = %.9g, want %.9g",
                    name, (double)v[i], (double)f.y->data[i], want[i]);
    }
    fwd1_free(&f);
}

static void check_activation_values(vt_test *T) {
    const float gx[5] = {1.0f, -1.0f, 0.0f, 2.5f, -6.0f};
    const double gw[5] = {0.8413447460685429, -0.15865525393145707, 0.0, 2.4844758366855597, -5.919525869479969e-09};
    check_unary_values(T, "gelu", VT_GELU, 0, 5, gx, gw);
    const float sx[5] = {25.0f, 0.0f, -1.0f, 20.5f, 5.0f};
    const double sw[5] = {25.0, 0.6931471805599453, 0.31326168751822286, 20.5, 5.006715348489118};
    check_unary_values(T, "softplus", VT_SOFTPLUS, 0, 5, sx, sw);
    const float hx[6] = {1.0f, -4.0f, 4.0f, -3.0f, 3.0f, -1.5f};
    const double hw[6] = {2.0 / 3.0, 0.0, 4.0, 0.0, 3.0, -0.375};
    check_unary_values(T, "hardswish", VT_HARDSWISH, 0, 6, hx, hw);
    const float rx[5] = {7.0f, -1.0f, 2.5f, 6.0f, NAN}; /* NaN stays NaN, as in PyTorch */
    const double r6[5] = {6.0, 0.0, 2.5, 6.0, NAN}, r0[5] = {7.0, 0.0, 2.5, 6.0, NAN};
    check_unary_values(T, "relu6", VT_RELU6, 0, 5, rx, r6);
    check_unary_values(T, "relu", VT_RELU, 0, 5, rx, r0);
    const float gs[4] = {0.0f, 2.0f, -2.0f, -100.0f};
    const double ws[4] = {0.5, 0.8807970779778823, 0.11920292202211755, 3.7200759760208356e-44};
    check_unary_values(T, "sigmoid", VT_SIGMOID, 0, 4, gs, ws);
    const float px[3] = {-2.0f, 1.5f, 0.0f};
    const double p3[3] = {-8.0, 3.375, 0.0}, p2[3] = {4.0, 2.25, 0.0};
    check_unary_values(T, "pow3", VT_POW, 3.0f, 3, px, p3);
    check_unary_values(T, "pow2", VT_POW, 2.0f, 3, px, p2);
    const float qx[2] = {4.0f, 2.0f};
    const double q5[2] = {2.0, 1.4142135623730951}, q7[2] = {5.278031643091577, 2.2973967099940698};
    check_unary_values(T, "pow0.5", VT_POW, 0.5f, 2, qx, q5);
    check_unary_values(T, "pow1.2", VT_POW, 1.2f, 2, qx, q7);
}

/* Analytic gradients at the kinks follow PyTorch (checked directly, since finite differences cannot). */
static void check_kink_grads(vt_test *T) {
    static const struct {
        vt_unary_kind kind;
        float x;
        float want;
    } k[] = {{VT_RELU, 0.0f, 0.0f},        {VT_RELU6, 0.0f, 0.0f},      {VT_RELU6, 6.0f, 0.0f},
             {VT_HARDSWISH, -3.0f, -0.5f}, {VT_HARDSWISH, 3.0f, 1.5f},  {VT_HARDSWISH, -3.5f, 0.0f},
             {VT_HARDSWISH, 3.5f, 1.0f},   {VT_SOFTPLUS, 25.0f, 1.0f},  {VT_POW, -2.0f, 12.0f}};
    const int nk = (int)(sizeof k / sizeof k[0]);
    for (int j = 0; j < nk; j++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        int one = 1;
        vt_tensor *x = vt_param(g, "x", 1, &one, (vt_init){VT_INIT_ZERO, 0});
        vt_tensor *y = vt_unary(g, x, k[j].kind, 3.0f);
        vt_graph_set_loss(g, vt_sum(g, y));
        if (vt_graph_finalize(g, &e) == 0) {
            x->data[0] = k[j].x;
            vt_graph_forward(g);
            vt_params_zero_grad(P);
            vt_graph_backward(g);
            T_CHECK(T, x->grad[0] == k[j].want, "kind %d grad at %g = %g, want %g", (int)k[j].kind, (double)k[j].x,
                    (double)x->grad[0], (double)k[j].want);
        } else {
            T_CHECK(T, 0, "finalize: %s", e.msg);
        }
        vt_graph_free(g);
        vt_params_free(P);
    }
}

static vt_tensor *op_softmax(vt_graph *g, vt_tensor *x, void *arg) { return vt_softmax(g, x, *(int *)arg); }

static void check_softmax_values(vt_test *T) {
    fwd1 f;
    int shape[2] = {2, 3}, ax = -1;
    if (fwd1_build(T, &f, 0, 2, shape, op_softmax, &ax) == 0) {
        const float v[6] = {1, 2, 3, 1000, 1000, -1000};
        const double want[6] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219, 0.5, 0.5, 0.0};
        memcpy(f.x->data, v, sizeof v);
        vt_graph_forward(f.g);
        for (int i = 0; i < 6; i++)
            T_CHECK(T, fabs(f.y->data[i] - want[i]) < 1e-6, "softmax[%d] = %.9g, want %.9g", i,
                    (double)f.y->data[i], want[i]);
    }
    fwd1_free(&f);
    /* relative accuracy of small probabilities: rows (0, -t) for t in [0, 86] give e^-t/(1 + e^-t) */
    int s2[2] = {233, 2}, last = 1;
    if (fwd1_build(T, &f, 0, 2, s2, op_softmax, &last) == 0) {
        for (int i = 0; i < 233; i++) {
            f.x->data[2 * i] = 0.5f * (float)i;
            f.x->data[2 * i + 1] = 0.5f * (float)i - 0.37f * (float)i;
        }
        vt_graph_forward(f.g);
        double err = 0.0;
        int worst = 0;
        for (int i = 0; i < 233; i++) {
            const double t = (double)f.x->data[2 * i] - f.x->data[2 * i + 1], e = exp(-t);
            const double r1 = fabs(f.y->data[2 * i] - 1.0 / (1.0 + e)) * (1.0 + e);
            const double r2 = fabs(f.y->data[2 * i + 1] - e / (1.0 + e)) / (e / (1.0 + e));
            const double r = r1 == r1 && r2 == r2 ? fmax(r1, r2) : INFINITY; /* (fmax drops a NaN) */
            if (r > err) err = r, worst = i;
        }
        T_CHECK(T, err < 1e-6, "softmax relative error %g at t = %g", err, 0.37 * worst);
    }
    fwd1_free(&f);
    /* every axis of a (3, 4, 5, 6) tensor against a double-precision host softmax */
    int s4[4] = {3, 4, 5, 6};
    for (int axis = -4; axis < 4; axis++) {
        int a = axis;
        if (fwd1_build(T, &f, 0, 4, s4, op_softmax, &a) != 0) {
            fwd1_free(&f);
            continue;
        }
        vt_rng r;
        vt_rng_seed(&r, 99);
        for (int64_t i = 0; i < f.x->numel; i++) f.x->data[i] = 4.0f * vt_rng_normal(&r);
        vt_graph_forward(f.g);
        const int ax = axis < 0 ? axis + 4 : axis;
        int outer = 1, inner = 1, A = s4[ax];
        for (int d = 0; d < ax; d++) outer *= s4[d];
        for (int d = ax + 1; d < 4; d++) inner *= s4[d];
        double err = 0.0;
        for (int o = 0; o < outer; o++)
            for (int i = 0; i < inner; i++) {
                const float *xp = f.x->data + (size_t)o * A * inner + i;
                double mx = -INFINITY, s = 0.0;
                for (int k = 0; k < A; k++) mx = fmax(mx, xp[(size_t)k * inner]);
                for (int k = 0; k < A; k++) s += exp(xp[(size_t)k * inner] - mx);
                for (int k = 0; k < A; k++) {
                    const double want = exp(xp[(size_t)k * inner] - mx) / s;
                    err = t_worse(err, fabs(f.y->data[(size_t)o * A * inner + i + (size_t)k * inner] - want));
                }
            }
        T_CHECK(T, err < 1e-6, "softmax axis %d max error %g", axis, err);
        fwd1_free(&f);
    }
}

/* LayerNorm without affine: each row has mean 0 and (biased) variance var/(var + eps); with affine: w·x̂ + b. */
typedef struct {
    vt_tensor *w, *b;
} ln_arg;
static vt_tensor *op_ln(vt_graph *g, vt_tensor *x, void *arg) {
    ln_arg *a = arg;
    int C = x->shape[x->ndim - 1];
    if (a) {
        a->w = vt_param(g, "w", 1, &C, (vt_init){VT_INIT_ONE, 0});
        a->b = vt_param(g, "b", 1, &C, (vt_init){VT_INIT_ZERO, 0});
    }
    return vt_layernorm(g, x, a ? a->w : NULL, a ? a->b : NULL, 1e-5f);
}

/* LayerNorm's values against double precision on 21 rows of C channels: fewer than a vector, one vector, partial
 * vectors after whole ones, many vectors (ln_row's lanes and tails), with and without the affine parameters, on
 * rows offset by 10 and, for two widths, by 1000 standard deviations (the float mean's rounding moves every output
 * by up to half an ulp of the offset; the variance stays within 1e-5). */
static void check_layernorm_values(vt_test *T) {
    static const struct {
        int C;
        float off;
    } cs[] = {{5, 10.0f}, {16, 10.0f}, {37, 10.0f}, {70, 10.0f}, {1024, 10.0f}, {40, 3000.0f}, {384, 3000.0f}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
        for (int affine = 0; affine < 2; affine++) {
            const int C = cs[k].C;
            fwd1 f;
            ln_arg la = {0};
            int shape[3] = {3, 7, C};
            if (fwd1_build(T, &f, affine, 3, shape, op_ln, affine ? &la : NULL) != 0) {
                fwd1_free(&f);
                continue;
            }
            vt_rng r;
            vt_rng_seed(&r, 5);
            for (int64_t i = 0; i < f.x->numel; i++) f.x->data[i] = 3.0f * vt_rng_normal(&r) + cs[k].off;
            if (affine)
                for (int i = 0; i < C; i++) {
                    la.w->data[i] = vt_rng_normal(&r);
                    la.b->data[i] = vt_rng_normal(&r);
                }
            vt_graph_forward(f.g);
            /* the float mean is off by up to half an ulp of the offset, and so is every x − mean */
            const double tol_m = 1e-6 + 6e-8 * cs[k].off;
            double err = 0.0;
            for (int row = 0; row < 21; row++) {
                const float *xr = f.x->data + row * C, *yr = f.y->data + row * C;
                double m = 0, v = 0, ym = 0, yv = 0;
                for (int i = 0; i < C; i++) m += xr[i] / (double)C;
                for (int i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m) / C;
                const double rs = 1.0 / sqrt(v + 1e-5);
                for (int i = 0; i < C; i++) {
                    const double want =
                        (xr[i] - m) * rs * (affine ? la.w->data[i] : 1.0) + (affine ? la.b->data[i] : 0.0);
                    err = t_worse(err, fabs(yr[i] - want));
                    ym += yr[i] / (double)C;
                }
                for (int i = 0; i < C; i++) yv += (yr[i] - ym) * (yr[i] - ym) / C;
                if (!affine) {
                    T_CHECK(T, fabs(ym) < tol_m, "layernorm C %d row %d mean %g", C, row, ym);
                    T_CHECK(T, fabs(yv - v / (v + 1e-5)) < 1e-5, "layernorm C %d row %d var %g, want %g", C, row,
                            yv, v / (v + 1e-5));
                }
            }
            T_CHECK(T, err < 1e-5 + 4.0 * tol_m, "layernorm C %d offset %g (affine %d) max error %g", C,
                    (double)cs[k].off, affine, err);
            fwd1_free(&f);
        }
}

/* LayerNorm of finite rows whose float sums overflow, against double: deviations of 1e19 (Σd² beyond float: the row
 * had come out as its bias, rs = 0) and 1024 values of 3e37 (each vector lane's Σx beyond float: the mean had been
 * Inf, the row NaN); each first row alternates ±3e38 (deviations beyond float). */
static void check_layernorm_huge(vt_test *T) {
    static const struct {
        int C;
        float scale, off;
    } cs[] = {{64, 1e19f, 0.0f}, {37, 1e19f, 0.0f}, {1024, 3e36f, 3e37f}, {1037, 3e36f, 3e37f}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        const int C = cs[k].C;
        fwd1 f;
        int shape[2] = {4, C};
        if (fwd1_build(T, &f, 0, 2, shape, op_ln, NULL) != 0) {
            fwd1_free(&f);
            continue;
        }
        vt_rng r;
        vt_rng_seed(&r, 9);
        for (int64_t i = 0; i < f.x->numel; i++) f.x->data[i] = cs[k].scale * vt_rng_normal(&r) + cs[k].off;
        for (int i = 0; i < C; i++) f.x->data[i] = i % 2 ? -3e38f : 3e38f; /* lanes of +Inf and −Inf: a NaN mean */
        vt_graph_forward(f.g);
        double err = 0.0;
        for (int row = 0; row < 4; row++) {
            const float *xr = f.x->data + row * C, *yr = f.y->data + row * C;
            double m = 0, v = 0;
            for (int i = 0; i < C; i++) m += xr[i] / (double)C;
            for (int i = 0; i < C; i++) v += ((double)xr[i] - m) * ((double)xr[i] - m) / C;
            for (int i = 0; i < C; i++) {
                const double d = fabs(yr[i] - ((double)xr[i] - m) / sqrt(v + 1e-5));
                if (!(d <= err)) err = d; /* NaN too (fmax drops it) */
            }
        }
        T_CHECK(T, err < 1e-5, "layernorm C %d of values %g ± %g: max error %g", C, (double)cs[k].off,
                (double)cs[k].scale, err);
        fwd1_free(&f);
    }
}

/* op_ln's channel-first twin (no affine, no activation): x (1, C, n). */
static vt_tensor *op_ln_cf(vt_graph *g, vt_tensor *x, void *arg) {
    (void)arg;
    return vt_layernorm_cf(g, x, NULL, NULL, 1e-5f, -1);
}

/* Both LayerNorms on constant and near-constant rows against double precision: a constant row normalises to exactly
 * 0 (its float mean had been off by its rounding error δ, every output −δ/√eps: 4.8e-3 for 768 values of 77.7), a
 * row of spread 1e-3 about 3.3 within 5e-5. Rows (vt_layernorm) and positions (vt_layernorm_cf, over C channels). */
static void check_layernorm_constant(vt_test *T) {
    static const int Cs[] = {768, 128, 37};
    static const float base[] = {77.7f, 3.3f, -1e4f, 3.3f}; /* the last row spread by 1e-3 */
    for (int cf = 0; cf < 2; cf++)
        for (size_t k = 0; k < sizeof Cs / sizeof Cs[0]; k++) {
            const int C = Cs[k], R = 4, rs[2] = {R, C}, cs[3] = {1, C, R};
            fwd1 f;
            if (fwd1_build(T, &f, 0, cf ? 3 : 2, cf ? cs : rs, cf ? op_ln_cf : op_ln, NULL) != 0) {
                fwd1_free(&f);
                continue;
            }
            vt_rng r;
            vt_rng_seed(&r, 17);
            for (int row = 0; row < R; row++)
                for (int c = 0; c < C; c++)
                    f.x->data[cf ? (size_t)c * R + row : (size_t)row * C + c] =
                        base[row] + (row == 3 ? 1e-3f * vt_rng_normal(&r) : 0.0f);
            vt_graph_forward(f.g);
            for (int row = 0; row < R; row++) {
                double m = 0, v = 0, err = 0;
                for (int c = 0; c < C; c++) m += f.x->data[cf ? (size_t)c * R + row : (size_t)row * C + c] / (double)C;
                for (int c = 0; c < C; c++) {
                    const double d = f.x->data[cf ? (size_t)c * R + row : (size_t)row * C + c] - m;
                    v += d * d / C;
                }
                for (int c = 0; c < C; c++) { /* a constant row: its outputs themselves (exactly 0) */
                    const size_t i = cf ? (size_t)c * R + row : (size_t)row * C + c;
                    const double d = fabs(f.y->data[i] - (row == 3 ? (f.x->data[i] - m) / sqrt(v + 1e-5) : 0.0));
                    if (!(d <= err)) err = d;
                }
                /* the spread row: the float mean's rounding (half an ulp of 3.3) over √(σ² + eps), 3.6e-5, bounds it */
                T_CHECK(T, row == 3 ? err < 5e-5 : err == 0.0, "%s C %d row of %g%s: max error %g",
                        cf ? "layernorm_cf" : "layernorm", C, (double)base[row], row == 3 ? " ± 1e-3" : "", err);
            }
            fwd1_free(&f);
        }
}

/* ---- LayerNorm over the channels of channel-first maps ---- */

/* vt_layernorm_cf: x0 (B, C, ...), x1 w (ia[0] & 1), x2 b (ia[0] & 2), ia[1] the activation (-1: none); ia[2] 1:
 * plus x0 (its gradient added to). */
static vt_tensor *b_ln_cf(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *y = vt_layernorm_cf(g, x[0], c->ia[0] & 1 ? x[1] : NULL, c->ia[0] & 2 ? x[2] : NULL, 1e-5f, c->ia[1]);
    return c->ia[2] ? vt_add(g, x[0], y) : y;
}

/* The chain it replaces: channels moved last, LayerNorm, the activation, channels moved back. */
static vt_tensor *b_ln_cf_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int nd = x[0]->ndim;
    int to[VT_MAXDIM], back[VT_MAXDIM];
    for (int d = 0, k = 0; d < nd; d++)
        if (d != 1) to[k++] = d;
    to[nd - 1] = 1;
    for (int d = 0; d < nd; d++) back[to[d]] = d;
    vt_tensor *t = vt_layernorm(g, vt_permute(g, x[0], to), c->ia[0] & 1 ? x[1] : NULL, c->ia[0] & 2 ? x[2] : NULL,
                                1e-5f);
    if (c->ia[1] >= 0) t = vt_unary(g, t, (vt_unary_kind)c->ia[1], 0.0f);
    t = vt_permute(g, t, back);
    return c->ia[2] ? vt_add(g, x[0], t) : t;
}

/* vt_layernorm_cf: finite differences, and output and gradients against the chain: partial and whole 64-position
 * tiles, more tiles than the 64 chunks of dW's sums, one channel, each activation, with or without w and b, x's
 * gradient added to; values against double on positions offset by 3000 standard deviations and on positions whose
 * float sums overflow; errors. */
static void check_layernorm_cf(vt_test *T) {
    static const struct {
        int ndim, shape[4], ia[3];
    } cs[] = {{3, {2, 5, 70}, {3, -1, 0}},          {4, {2, 3, 4, 5}, {3, VT_HARDSWISH, 0}},
              {3, {3, 8, 200}, {1, VT_RELU6, 0}}, {3, {1, 1, 9}, {0, -1, 0}},
              {4, {2, 6, 3, 3}, {2, VT_RELU, 1}},  {3, {70, 3, 5}, {3, VT_HARDSWISH, 1}},
              {2, {4, 7}, {3, -1, 0}}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int C = cs[i].shape[1];
        gc_case f = {.name = "layernorm_cf", .nx = 3, .ndim = {cs[i].ndim, 1, 1}, .shape = {{0}, {C}, {C}},
                     .nograd = {0, !(cs[i].ia[0] & 1), !(cs[i].ia[0] & 2)}, .build = b_ln_cf};
        memcpy(f.shape[0], cs[i].shape, sizeof cs[i].shape);
        memcpy(f.ia, cs[i].ia, sizeof cs[i].ia);
        if (i % 2 == 0)
            gc_run_vs_plain(T, &f, b_ln_cf_chain, "permutes, layernorm and the activation", 1e-5);
        else {
            gc_case p = f;
            p.build = b_ln_cf_chain;
            gc_compare(T, &f, &p, 1e-5);
        }
    }
    static const struct {
        int C, n;
        float scale, off;
    } vs[] = {{40, 100, 3.0f, 3000.0f}, {8, 130, 3.0f, 10.0f}, {64, 70, 1e19f, 0.0f}, {1024, 5, 3e36f, 3e37f}};
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        const int C = vs[k].C, n = vs[k].n, xs[3] = {2, C, n};
        vt_tensor *x = vt_input(g, "x", 3, xs), *y = vt_layernorm_cf(g, x, NULL, NULL, 1e-5f, -1);
        vt_graph_output(g, y);
        T_CHECK(T, vt_graph_finalize(g, &e) == 0, "layernorm_cf finalize: %s", e.msg);
        if (e.msg[0]) {
            vt_graph_free(g);
            vt_params_free(P);
            continue;
        }
        vt_rng r;
        vt_rng_seed(&r, 11);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = vs[k].scale * vt_rng_normal(&r) + vs[k].off;
        vt_graph_forward(g);
        double err = 0.0;
        const double tol = 1e-5 + 4.0 * (1e-6 + 6e-8 * vs[k].off / vs[k].scale);
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < n; i++) {
                const float *xp = x->data + (size_t)b * C * n + i, *yp = y->data + (size_t)b * C * n + i;
                double m = 0, v = 0;
                for (int c = 0; c < C; c++) m += xp[(size_t)c * n] / (double)C;
                for (int c = 0; c < C; c++) v += ((double)xp[(size_t)c * n] - m) * ((double)xp[(size_t)c * n] - m) / C;
                for (int c = 0; c < C; c++) {
                    const double d = fabs(yp[(size_t)c * n] - ((double)xp[(size_t)c * n] - m) / sqrt(v + 1e-5));
                    if (!(d <= err)) err = d; /* NaN too */
                }
            }
        T_CHECK(T, err < tol, "layernorm_cf C %d of values %g ± %g: max error %g", C, (double)vs[k].off,
                (double)vs[k].scale, err);
        vt_graph_free(g);
        vt_params_free(P);
    }
    static const struct {
        int ndim, shape[2], wc, act;
        const char *msg;
    } bad[] = {{1, {5, 0}, 5, -1, "must be (B, C, ...)"}, {2, {3, 4}, 5, -1, "must be (B, C, ...)"},
               {2, {3, 4}, 4, 99, "activation 99"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        vt_tensor *x = vt_input(g, "x", bad[k].ndim, bad[k].shape), *w = vt_input(g, "w", 1, &bad[k].wc);
        const vt_tensor *y = vt_layernorm_cf(g, x, w, NULL, 1e-5f, bad[k].act);
        T_CHECK(T, !y && strstr(g->err.msg, "layernorm_cf") && strstr(g->err.msg, bad[k].msg),
                "bad layernorm_cf %zu: %s", k, g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* BatchNorm: train forward normalises with batch statistics and blends the running stats with momentum using
 * the unbiased variance, adds 1 to num_batches_tracked; an eval graph then uses the running stats. */
typedef struct {
    int axis;
    vt_tensor *w, *b, *rm, *rv, *nbt;
} bn_arg;
static vt_tensor *op_bn(vt_graph *g, vt_tensor *x, void *arg) {
    bn_arg *a = arg;
    int C = x->shape[a->axis], one = 1;
    a->w = vt_param(g, "bn.weight", 1, &C, (vt_init){VT_INIT_ONE, 0});
    a->b = vt_param(g, "bn.bias", 1, &C, (vt_init){VT_INIT_ZERO, 0});
    a->rm = vt_buffer(g, "bn.running_mean", 1, &C, (vt_init){VT_INIT_ZERO, 0});
    a->rv = vt_buffer(g, "bn.running_var", 1, &C, (vt_init){VT_INIT_ONE, 0});
    a->nbt = vt_buffer(g, "bn.num_batches_tracked", 1, &one, (vt_init){VT_INIT_ZERO, 0});
    return vt_batchnorm(g, x, a->w, a->b, a->rm, a->rv, a->nbt, a->axis, 1e-5f, 0.1f);
}

static void check_batchnorm_values(vt_test *T) {
    static const struct {
        int ndim, shape[4], axis, outlier; /* 1: each channel's first value an outlier at 1000, the shift of the
                                            * one-pass statistics: 27, 35 and (60,000 values) 220 standard deviations
                                            * off the mean; outputs compared relative to their size */
    } cs[] = {{4, {3, 5, 4, 6}, 1, 0}, {3, {4, 7, 5}, 2, 0}, {4, {2, 3, 4, 5}, 3, 0}, {2, {6, 3}, 1, 0},
              {3, {1, 20, 2}, 1, 0},    {3, {4, 300, 6}, 2, 1}, {4, {3, 5, 40, 6}, 1, 1},
              {3, {2, 30000, 2}, 2, 1}};
    for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++) {
        const int ax = cs[t].axis, C = cs[t].shape[ax];
        fwd1 f;
        bn_arg ba = {.axis = ax};
        if (fwd1_build(T, &f, 1, cs[t].ndim, cs[t].shape, op_bn, &ba) != 0) {
            fwd1_free(&f);
            continue;
        }
        vt_params_init(f.P, 1);
        vt_rng r;
        vt_rng_seed(&r, 11 + t);
        int outer = 1, inner = 1;
        for (int d = 0; d < ax; d++) outer *= cs[t].shape[d];
        for (int d = ax + 1; d < cs[t].ndim; d++) inner *= cs[t].shape[d];
        for (int64_t i = 0; i < f.x->numel; i++) f.x->data[i] = 2.0f * vt_rng_normal(&r) + 0.5f;
        for (int c = 0; cs[t].outlier && c < C; c++) f.x->data[(size_t)c * inner] = 1000.0f;
        for (int c = 0; c < C; c++) {
            ba.w->data[c] = 1.0f + 0.5f * vt_rng_normal(&r);
            ba.b->data[c] = vt_rng_normal(&r);
            ba.rm->data[c] = vt_rng_normal(&r);
            ba.rv->data[c] = 0.5f + vt_rng_uniform(&r);
        }
        float rm0[64], rv0[64];
        memcpy(rm0, ba.rm->data, sizeof(float) * C);
        memcpy(rv0, ba.rv->data, sizeof(float) * C);
        const int M = outer * inner;
        vt_graph_forward(f.g);
        double err_y = 0.0, err_rm = 0.0, err_rv = 0.0;
        for (int c = 0; c < C; c++) {
            double m = 0.0, v = 0.0;
            for (int o = 0; o < outer; o++)
                for (int i = 0; i < inner; i++) m += f.x->data[((size_t)o * C + c) * inner + i];
            m /= M;
            for (int o = 0; o < outer; o++)
                for (int i = 0; i < inner; i++) {
                    const double d = f.x->data[((size_t)o * C + c) * inner + i] - m;
                    v += d * d;
                }
            v /= M;
            for (int o = 0; o < outer; o++)
                for (int i = 0; i < inner; i++) {
                    const size_t k = ((size_t)o * C + c) * inner + i;
                    const double want = (f.x->data[k] - m) / sqrt(v + 1e-5) * ba.w->data[c] + ba.b->data[c];
                    err_y = t_worse(err_y, fabs(f.y->data[k] - want) / fmax(1.0, fabs(want)));
                }
            const double want_rm = 0.9 * rm0[c] + 0.1 * m, want_rv = 0.9 * rv0[c] + 0.1 * v * M / (M - 1);
            err_rm = t_worse(err_rm, fabs(ba.rm->data[c] - want_rm) / fmax(1.0, fabs(want_rm)));
            err_rv = t_worse(err_rv, fabs(ba.rv->data[c] - want_rv) / fmax(1.0, want_rv));
        }
        T_CHECK(T, err_y < 1e-5, "batchnorm train case %zu: output error %g", t, err_y);
        T_CHECK(T, err_rm < 1e-6 && err_rv < 1e-6, "batchnorm case %zu: running mean err %g, var err %g", t, err_rm,
                err_rv);
        T_CHECK(T, ba.nbt->data[0] == 1.0f, "num_batches_tracked %g after one forward", (double)ba.nbt->data[0]);
        vt_graph_forward(f.g);
        T_CHECK(T, ba.nbt->data[0] == 2.0f, "num_batches_tracked %g after two forwards", (double)ba.nbt->data[0]);
        /* eval graph on the same store: uses the running statistics and leaves them unchanged */
        vt_err e = {0};
        vt_graph *ge = vt_graph_new(f.P, 0, &e);
        vt_tensor *xe = vt_input(ge, "x", cs[t].ndim, cs[t].shape);
        vt_tensor *ye = op_bn(ge, xe, &ba);
        vt_graph_output(ge, ye);
        T_CHECK(T, vt_graph_finalize(ge, &e) == 0, "eval finalize: %s", e.msg);
        if (!e.msg[0]) {
            memcpy(xe->data, f.x->data, sizeof(float) * (size_t)f.x->numel);
            memcpy(rm0, ba.rm->data, sizeof(float) * C);
            memcpy(rv0, ba.rv->data, sizeof(float) * C);
            vt_graph_forward(ge);
            double err = 0.0;
            for (int o = 0; o < outer; o++)
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < inner; i++) {
                        const size_t k = ((size_t)o * C + c) * inner + i;
                        const double want =
                            (xe->data[k] - (double)rm0[c]) / sqrt(rv0[c] + 1e-5) * ba.w->data[c] + ba.b->data[c];
                        err = t_worse(err, fabs(ye->data[k] - want) / fmax(1.0, fabs(want)));
                    }
            T_CHECK(T, err < 1e-5, "batchnorm eval case %zu: output error %g", t, err);
            T_CHECK(T, memcmp(rm0, ba.rm->data, sizeof(float) * C) == 0 && ba.nbt->data[0] == 2.0f,
                    "eval forward changed the running statistics");
        }
        vt_graph_free(ge);
        /* an Inf in channel 0 (its variance Inf - Inf): running_var NaN there, as PyTorch's (it had been clamped to 0,
         * hiding the divergence), the other channels finite */
        f.x->data[0] = INFINITY;
        vt_graph_forward(f.g);
        int others = 1;
        for (int c = 1; c < C; c++) others &= isfinite(ba.rv->data[c]) != 0;
        T_CHECK(T, isnan(ba.rv->data[0]) && others, "batchnorm case %zu: an Inf input gives running_var %g, others %s",
                t, (double)ba.rv->data[0], others ? "finite" : "not finite");
        fwd1_free(&f);
    }
}

/* vt_bn_res_bn (the fused BN(BN(t)·s + a) pair of the Refiner's training DLA): an Inf in t's channel 0 makes both
 * BatchNorms' running variance of that channel NaN, as the chain's, and leaves the other channels finite. */
static void check_bnpair_nan(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[4] = {2, 3, 4, 4}, cs[1] = {3}, one[1] = {1};
    vt_tensor *t = vt_input(g, "t", 4, xs), *a = vt_input(g, "a", 4, xs), *bn[2][5];
    for (int k = 0; k < 2; k++) {
        char nm[16];
        const char *part[5] = {"w", "b", "m", "v", "n"};
        for (int j = 0; j < 5; j++) {
            snprintf(nm, sizeof nm, "bn%d.%s", k, part[j]);
            const vt_init init = {j == 0 || j == 3 ? VT_INIT_ONE : VT_INIT_ZERO, 0};
            bn[k][j] = j < 2 ? vt_param(g, nm, 1, cs, init) : vt_buffer(g, nm, 1, j == 4 ? one : cs, init);
        }
    }
    vt_graph_output(g, vt_bn_res_bn(g, t, bn[0], a, bn[1], 1e-5f, 0.1f, 0.7f));
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "bn_res_bn: %s", e.msg);
    if (!e.msg[0]) {
        vt_rng r;
        vt_rng_seed(&r, 4);
        for (int64_t i = 0; i < t->numel; i++) t->data[i] = vt_rng_normal(&r), a->data[i] = vt_rng_normal(&r);
        t->data[0] = INFINITY; /* channel 0 of item 0 */
        vt_graph_forward(g);
        const float *v3 = bn[0][3]->data, *va = bn[1][3]->data;
        T_CHECK(T, isnan(v3[0]) && isnan(va[0]) && isfinite(v3[1]) && isfinite(v3[2]) && isfinite(va[1]) &&
                       isfinite(va[2]),
                "bn_res_bn with an Inf: running var %g %g %g / %g %g %g", (double)v3[0], (double)v3[1], (double)v3[2],
                (double)va[0], (double)va[1], (double)va[2]);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* vt_batchnorm_res: x0 input, x1 w, x2 b, x3 running mean, x4 running var, x5 the added term (ia[3] 0: none; 2:
 * added once more after the op, so its gradient must be added to, not written); fa[0] the output factor; ia[0] axis,
 * ia[2] as b_bn's. */
static vt_tensor *b_bn_res_fused(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int keep = g->training;
    if (c->ia[2]) g->training = 0;
    vt_tensor *y = vt_batchnorm_res(g, x[0], x[1], x[2], x[3], x[4], NULL, c->ia[0], 1e-5f, 0.1f, c->fa[0],
                                    c->ia[3] ? x[5] : NULL);
    g->training = keep;
    return c->ia[3] == 2 ? vt_add(g, y, x[5]) : y;
}

/* The chain it replaces: BatchNorm, the factor, the add. */
static vt_tensor *b_bn_res_plain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int keep = g->training;
    if (c->ia[2]) g->training = 0;
    vt_tensor *y = vt_batchnorm(g, x[0], x[1], x[2], x[3], x[4], NULL, c->ia[0], 1e-5f, 0.1f);
    g->training = keep;
    y = vt_scale(g, y, c->fa[0]);
    y = c->ia[3] ? vt_add(g, y, x[5]) : y;
    return c->ia[3] == 2 ? vt_add(g, y, x[5]) : y;
}

/* vt_batchnorm_res against BatchNorm, scale and add: finite differences, outputs and gradients (train, eval and an
 * eval node in a train graph; NCHW planes as the Refiner's maps, channels-last); its shape error in check_errors. */
static void check_batchnorm_res(vt_test *T) {
    static const struct {
        int ndim, shape[4], axis, eval_node, with_r;
        float scale;
    } cs[] = {{4, {2, 3, 5, 5}, 1, 0, 1, 1.0f}, {4, {2, 3, 5, 5}, 1, 0, 0, 0.125f}, {4, {2, 4, 3, 6}, 1, 1, 1, 0.5f},
              {3, {2, 5, 19}, 2, 0, 1, 2.0f}, {3, {3, 4, 6}, 2, 1, 0, 0.25f}, {4, {2, 3, 4, 4}, 1, 0, 2, 0.5f}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int C = cs[i].shape[cs[i].axis];
        gc_case f = {.name = "batchnorm_res", .nx = 6, .ndim = {cs[i].ndim, 1, 1, 1, 1, cs[i].ndim},
                     .shape = {{0}, {C}, {C}, {C}, {C}, {0}}, .nograd = {0, 0, 0, 1, 1, !cs[i].with_r},
                     .build = b_bn_res_fused, .fill = fill_bn, .ia = {cs[i].axis, 1, cs[i].eval_node, cs[i].with_r},
                     .fa = {cs[i].scale}};
        memcpy(f.shape[0], cs[i].shape, sizeof cs[i].shape);
        memcpy(f.shape[5], cs[i].shape, sizeof cs[i].shape);
        gc_run_vs_plain(T, &f, b_bn_res_plain, "batchnorm, scale and add", 1e-5);
    }
}

/* vt_batchnorm_sum over ia[0] groups of z = x0 (..., r·C): x1..x4 the groups' weights, biases, running means and
 * variances stacked (r·C), x5 their num_batches_tracked (r), each group's cut by vt_slice; ia[2] as b_bn's; ia[1]:
 * x6 + drop_path(the sum, fa[0]) (vt_residual_drop, fused into the op). */
static vt_tensor *b_bn_sum(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int r = c->ia[0], C = x[0]->shape[x[0]->ndim - 1] / r, keep = g->training;
    vt_tensor *t[15];
    for (int b = 0; b < r; b++)
        for (int k = 0; k < 5; k++)
            t[5 * b + k] = k < 4 ? vt_slice(g, x[1 + k], 0, b * C, C) : vt_slice(g, x[5], 0, b, 1);
    if (c->ia[2]) g->training = 0;
    vt_tensor *y = vt_batchnorm_sum(g, x[0], r, t, 1e-5f, 0.1f);
    g->training = keep;
    return c->ia[1] ? vt_residual_drop(g, x[6], y, c->fa[0]) : y;
}

/* The chain vt_batchnorm_sum replaces: each group's vt_batchnorm on its slice of z, then the adds. */
static vt_tensor *b_bn_sum_plain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int r = c->ia[0], nd = x[0]->ndim, C = x[0]->shape[nd - 1] / r, keep = g->training;
    vt_tensor *y = NULL;
    for (int b = 0; b < r; b++) {
        vt_tensor *t[5];
        for (int k = 0; k < 5; k++) t[k] = k < 4 ? vt_slice(g, x[1 + k], 0, b * C, C) : vt_slice(g, x[5], 0, b, 1);
        vt_tensor *zb = vt_slice(g, x[0], nd - 1, b * C, C);
        if (c->ia[2]) g->training = 0;
        vt_tensor *yb = vt_batchnorm(g, zb, t[0], t[1], t[2], t[3], t[4], nd - 1, 1e-5f, 0.1f);
        g->training = keep;
        y = y ? vt_add(g, y, yb) : yb;
    }
    return c->ia[1] ? vt_add(g, x[6], y) : y;
}

/* vt_batchnorm_act_sets over ia[0] sets of x0 (B, sets·cs, ...): x1..x4 the sets' weights, biases, running means and
 * variances side by side (sets·cs each), x5 their num_batches_tracked (sets), each set's a slice; ia[1] the
 * activation, ia[2] 1: an eval-mode node. */
static void bn_set_tensors(vt_graph *g, vt_tensor **x, int sets, vt_tensor **pt) {
    const int cs = x[0]->shape[1] / sets;
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < sets; j++) pt[k * sets + j] = vt_slice(g, x[1 + k], 0, k < 4 ? j * cs : j, k < 4 ? cs : 1);
}
static vt_tensor *b_bn_sets(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *pt[20];
    bn_set_tensors(g, x, c->ia[0], pt);
    const int keep = g->training;
    if (c->ia[2]) g->training = 0;
    vt_tensor *y = vt_batchnorm_act_sets(g, x[0], c->ia[0], pt, 1, 1e-5f, 0.1f, c->ia[1]);
    g->training = keep;
    return y;
}

/* The chain it replaces: each set's vt_batchnorm_act on its slice of x0, then the concat. */
static vt_tensor *b_bn_sets_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int sets = c->ia[0], cs = x[0]->shape[1] / sets;
    vt_tensor *pt[20], *y[4];
    bn_set_tensors(g, x, sets, pt);
    const int keep = g->training;
    if (c->ia[2]) g->training = 0;
    for (int j = 0; j < sets; j++)
        y[j] = vt_batchnorm_act(g, vt_slice(g, x[0], 1, j * cs, cs), pt[j], pt[sets + j], pt[2 * sets + j],
                                pt[3 * sets + j], pt[4 * sets + j], 1, 1e-5f, 0.1f, c->ia[1]);
    g->training = keep;
    return vt_concat(g, y, sets, 1);
}

/* vt_batchnorm_act_sets: finite differences, output and gradients against the chain (training and eval-mode nodes,
 * planes and channels-last-free 2-D input), the running statistics and counters updated as the chain's, errors. */
static void check_batchnorm_sets(vt_test *T) {
    static const struct {
        int ndim, shape[4], sets, act, eval_node;
    } cs[] = {{4, {3, 8, 5, 4}, 4, VT_HARDSWISH, 0}, {3, {2, 6, 19}, 3, VT_RELU, 0}, {2, {7, 4}, 2, -1, 0},
              {4, {2, 8, 3, 3}, 4, VT_HARDSWISH, 1}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int C = cs[i].shape[1], r = cs[i].sets;
        gc_case f = {.name = "batchnorm_sets", .nx = 6, .ndim = {cs[i].ndim, 1, 1, 1, 1, 1},
                     .shape = {{0}, {C}, {C}, {C}, {C}, {r}}, .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn_sets,
                     .fill = fill_bn, .ia = {r, cs[i].act, cs[i].eval_node}};
        memcpy(f.shape[0], cs[i].shape, sizeof cs[i].shape);
        if (i < 2)
            gc_run_vs_plain(T, &f, b_bn_sets_chain, "batchnorms and a concat", 1e-5);
        else {
            gc_case p = f;
            p.build = b_bn_sets_chain;
            gc_compare(T, &f, &p, 1e-5);
        }
    }
    /* running statistics: both forms in one training graph, on one input, each with its own buffers */
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int r = 4, C = 12, xs[4] = {3, C, 4, 5}, cv = C, rv1 = r;
    vt_tensor *x = vt_input(g, "x", 4, xs), *ops[2][6], *y[2];
    for (int f = 0; f < 2; f++) {
        const char *names[6] = {"x", "w", "b", "rm", "rv", "nbt"};
        ops[f][0] = x;
        for (int k = 1; k < 6; k++) {
            char nm[16];
            snprintf(nm, sizeof nm, "%s%d", names[k], f);
            ops[f][k] = vt_param(g, nm, 1, k < 5 ? &cv : &rv1, (vt_init){k == 4 ? VT_INIT_ONE : VT_INIT_ZERO, 0});
        }
        const gc_case c = {.ia = {r, VT_HARDSWISH, 0}};
        y[f] = (f ? b_bn_sets_chain : b_bn_sets)(g, ops[f], &c);
        vt_graph_output(g, y[f]);
    }
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "batchnorm_sets stats graph: %s", e.msg);
    if (!e.msg[0]) {
        vt_rng rr;
        vt_rng_seed(&rr, 4);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = 2.0f * vt_rng_normal(&rr) + (float)(i % 5);
        for (int f = 0; f < 2; f++)
            for (int k = 1; k < 3; k++)
                for (int c = 0; c < C; c++) ops[f][k]->data[c] = 1.0f + 0.1f * (float)(c % 4) * (k == 1 ? 1.0f : -1.0f);
        vt_graph_forward(g);
        vt_graph_forward(g);
        const double ey = gc_rel_diff(y[0]->data, y[1]->data, y[0]->numel, 1.0);
        double es = 0.0;
        for (int k = 3; k < 6; k++)
            es = fmax(es, gc_rel_diff(ops[0][k]->data, ops[1][k]->data, ops[0][k]->numel, 1.0));
        T_CHECK(T, ey < 1e-6 && es < 1e-6 && ops[0][5]->data[r - 1] == 2.0f,
                "batchnorm_sets vs the chain: output %g, running statistics %g, last set's count %g", ey, es,
                (double)ops[0][5]->data[r - 1]);
    }
    vt_graph_free(g);
    vt_params_free(P);
    /* set 0's weight and bias frozen (inputs, no gradient), set 1's trained: set 1 still gets its gradients, as each
     * set's own BatchNorm gives them (both forms in one graph on one input, each with its own tensors) */
    {
        vt_err e3 = {0};
        vt_params *P3 = vt_params_new(&e3);
        vt_graph *g3 = vt_graph_new(P3, 1, &e3);
        const int xs3[4] = {3, 8, 4, 5}, c4 = 4;
        vt_tensor *x3 = vt_param(g3, "x", 4, xs3, (vt_init){VT_INIT_NORMAL, 1.0f}), *t3[2][20], *y3[2];
        for (int f = 0; f < 2; f++) {
            for (int j = 0; j < 2; j++) {
                char nm[16];
                vt_tensor *t5[5];
                snprintf(nm, sizeof nm, "f%ds%d", f, j);
                vt_bn_tensors(g3, nm, c4, t5);
                for (int k = 0; k < 5; k++) t3[f][k * 2 + j] = t5[k];
                if (j == 0) {
                    snprintf(nm, sizeof nm, "f%dw0", f);
                    t3[f][0] = vt_input(g3, nm, 1, &c4);
                    snprintf(nm, sizeof nm, "f%db0", f);
                    t3[f][2] = vt_input(g3, nm, 1, &c4);
                }
            }
        }
        y3[0] = vt_batchnorm_act_sets(g3, x3, 2, t3[0], 1, 1e-5f, 0.1f, VT_HARDSWISH);
        vt_tensor *half[2];
        for (int j = 0; j < 2; j++)
            half[j] = vt_batchnorm_act(g3, vt_slice(g3, x3, 1, 4 * j, 4), t3[1][j], t3[1][2 + j], t3[1][4 + j],
                                       t3[1][6 + j], t3[1][8 + j], 1, 1e-5f, 0.1f, VT_HARDSWISH);
        y3[1] = vt_concat(g3, half, 2, 1);
        vt_tensor *r3 = vt_input(g3, "r", 4, xs3);
        vt_graph_set_loss(g3, vt_add(g3, vt_sum(g3, vt_mul(g3, y3[0], r3)), vt_sum(g3, vt_mul(g3, y3[1], r3))));
        T_CHECK(T, vt_graph_finalize(g3, &e3) == 0 && vt_params_alloc_grads(P3, &e3) == 0,
                "batchnorm_sets frozen set: %s", e3.msg);
        if (!e3.msg[0]) {
            vt_params_init(P3, 5);
            vt_rng rr;
            vt_rng_seed(&rr, 6);
            for (int f = 0; f < 2; f++)
                for (int q = 0; q < 4; q++) {
                    t3[f][0]->data[q] = 1.0f + 0.2f * (float)q;
                    t3[f][2]->data[q] = 0.1f * (float)q;
                    t3[f][1]->data[q] = 0.8f + 0.1f * (float)q;
                    t3[f][3]->data[q] = -0.2f * (float)q;
                }
            for (int64_t i = 0; i < r3->numel; i++) r3->data[i] = vt_rng_normal(&rr);
            vt_graph_forward(g3);
            vt_params_zero_grad(P3);
            vt_graph_backward(g3);
            const double ew = gc_rel_diff(t3[0][1]->grad, t3[1][1]->grad, 4, 1.0),
                         eb = gc_rel_diff(t3[0][3]->grad, t3[1][3]->grad, 4, 1.0);
            double any = 0.0;
            for (int q = 0; q < 4; q++) any += fabs(t3[1][1]->grad[q]);
            T_CHECK(T, ew < 1e-5 && eb < 1e-5 && any > 0.0,
                    "batchnorm_sets, set 0 frozen: set 1's weight gradient off by %g, bias by %g (chain's |dw| %g)", ew,
                    eb, any);
        }
        vt_graph_free(g3);
        vt_params_free(P3);
    }
    /* errors: sets not dividing the channels, too many sets, a set's tensor of another size, a set missing a kind */
    static const struct {
        int sets, C, bad;
        const char *want;
    } es[] = {{3, 8, 0, "3 parameter sets must split its 8 channels"}, {5, 10, 0, "(at most 4 sets)"},
              {2, 8, 1, "set 1 of 2"}, {2, 8, 2, "set 1 lacks or has a tensor"}};
    for (size_t k = 0; k < sizeof es / sizeof es[0]; k++) {
        vt_err e2 = {0};
        vt_params *P2 = vt_params_new(&e2);
        vt_graph *g2 = vt_graph_new(P2, 1, &e2);
        const int s2[2] = {4, es[k].C}, four = 3;
        vt_tensor *tt[25] = {0}, *t5[5];
        const int cs5 = es[k].C / es[k].sets > 0 ? es[k].C / es[k].sets : 1;
        for (int j = 0; j < es[k].sets && j < 5; j++) {
            char nm[16];
            snprintf(nm, sizeof nm, "e%d", j);
            vt_bn_tensors(g2, nm, cs5, t5);
            for (int q = 0; q < 5; q++) tt[q * es[k].sets + j] = t5[q];
        }
        if (es[k].bad == 1) tt[es[k].sets + 1] = vt_param(g2, "bad", 1, &four, (vt_init){VT_INIT_ONE, 0});
        if (es[k].bad == 2) tt[4 * es[k].sets + 1] = NULL;
        vt_tensor *yy = vt_batchnorm_act_sets(g2, vt_input(g2, "x", 2, s2), es[k].sets, tt, 1, 1e-5f, 0.1f, -1);
        T_CHECK(T, !yy && strstr(g2->err.msg, es[k].want), "batchnorm_sets error %zu: %s", k, g2->err.msg);
        vt_graph_free(g2);
        vt_params_free(P2);
    }
}

/* vt_batchnorm_sum with a fused residual and drop-path: no add or drop_path node is left, and per sample the output
 * minus the residual is 0 or 1/(1 − p) times the same sum without them (both seen in 8 samples at p 0.5); both
 * running statistics move alike. */
static void check_bnsum_residual_drop(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    g->seed = 11;
    const int r = 2, C = 6, B = 8, zs[3] = {B, 5, r * C}, ys[3] = {B, 5, C};
    vt_tensor *z = vt_input(g, "z", 3, zs), *res = vt_input(g, "res", 3, ys), *t[2][10];
    for (int f = 0; f < 2; f++)
        for (int b = 0; b < r; b++) {
            char nm[32];
            snprintf(nm, sizeof nm, "%c%d", f ? 'd' : 'p', b);
            T_CHECK(T, vt_bn_tensors(g, nm, C, t[f] + 5 * b) == 0, "bn tensors %s", nm);
        }
    vt_tensor *y0 = vt_batchnorm_sum(g, z, r, t[0], 1e-5f, 0.1f);
    vt_tensor *y1 = vt_residual_drop(g, res, vt_batchnorm_sum(g, z, r, t[1], 1e-5f, 0.1f), 0.5f);
    vt_graph_output(g, y0);
    vt_graph_output(g, y1);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
    int others = 0;
    for (int i = 0; i < g->nn; i++) others += strcmp(g->nodes[i]->op->name, "batchnorm_sum") != 0;
    T_CHECK(T, g->nn == 2 && !others, "the residual and drop-path were not fused (%d nodes, %d others)", g->nn, others);
    if (!e.msg[0]) {
        vt_rng rng;
        vt_rng_seed(&rng, 7);
        for (int64_t i = 0; i < z->numel; i++) z->data[i] = 2.0f * vt_rng_normal(&rng) + 0.5f;
        for (int64_t i = 0; i < res->numel; i++) res->data[i] = vt_rng_normal(&rng);
        for (int k = 0; k < 5 * r; k++)
            for (int c = 0; c < t[0][k]->numel; c++)
                t[0][k]->data[c] = t[1][k]->data[c] = k % 5 == 4 ? 0.0f : k % 5 == 3 ? 0.5f + vt_rng_uniform(&rng)
                                                                                   : vt_rng_normal(&rng);
        vt_graph_forward(g);
        int kept = 0, dropped = 0, bad = 0;
        const int per = 5 * C;
        for (int b = 0; b < B; b++) {
            double d0 = 0.0, d2 = 0.0;
            for (int i = b * per; i < (b + 1) * per; i++) {
                const double v = y1->data[i] - res->data[i];
                d0 = fmax(d0, fabs(v));
                d2 = t_worse(d2, fabs(v - 2.0 * y0->data[i]));
            }
            kept += d2 < 1e-5, dropped += d0 < 1e-6, bad += !(d2 < 1e-5) && !(d0 < 1e-6);
        }
        T_CHECK(T, !bad && kept && dropped, "fused drop-path: %d samples kept, %d dropped, %d neither", kept, dropped,
                bad);
        double es = 0.0;
        for (int k = 0; k < 5 * r; k++)
            for (int c = 0; c < t[0][k]->numel; c++) es = t_worse(es, fabs(t[0][k]->data[c] - t[1][k]->data[c]));
        T_CHECK(T, es < 1e-6, "running statistics with and without the residual: %g apart", es);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* vt_batchnorm_sum: finite differences, and output and gradients equal to the chain of BatchNorms and adds (train and
 * eval graphs, batch and running statistics); running statistics updated as the chain's; errors. */
static void check_batchnorm_sum(vt_test *T) {
    static const struct {
        int ndim, shape[3], r, eval_node;
    } cs[] = {{3, {2, 5, 8}, 2, 0},   {3, {3, 4, 15}, 3, 0}, {2, {7, 5}, 1, 0},
              {3, {2, 9, 42}, 2, 1}, {3, {2, 6, 6}, 3, 1},
              {3, {2, 5, 80}, 2, 0},  /* groups of 40 channels: three 16-float vectors of sums, the last partial */
              {3, {3, 4, 140}, 2, 0}}; /* groups of 70: a second 64-channel block, whole vectors of four */
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int L = cs[i].shape[cs[i].ndim - 1], r = cs[i].r;
        gc_case f = {.name = "batchnorm_sum", .nx = 6, .ndim = {cs[i].ndim, 1, 1, 1, 1, 1},
                     .shape = {{0}, {L}, {L}, {L}, {L}, {r}}, .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn_sum,
                     .fill = fill_bn, .ia = {r, 0, cs[i].eval_node}};
        memcpy(f.shape[0], cs[i].shape, sizeof cs[i].shape);
        gc_run_vs_plain(T, &f, b_bn_sum_plain, "batchnorms then adds", 1e-5);
    }
    /* a residual added in the op's output pass: against the chain and an add; with drop-path (8 samples, p 0.5),
     * finite differences through the same draws */
    for (int dp = 0; dp < 2; dp++) {
        gc_case f = {.name = dp ? "batchnorm_sum_residual_drop" : "batchnorm_sum_residual", .nx = 7,
                     .ndim = {3, 1, 1, 1, 1, 1, 3}, .shape = {{8, 3, 12}, {12}, {12}, {12}, {12}, {2}, {8, 3, 6}},
                     .nograd = {0, 0, 0, 1, 1, 1, 0}, .build = b_bn_sum, .fill = fill_bn, .ia = {2, 1, 0},
                     .fa = {dp ? 0.5f : 0.0f}, .node_rng = dp};
        if (dp)
            gc_run(T, &f);
        else
            gc_run_vs_plain(T, &f, b_bn_sum_plain, "batchnorms, adds, the residual's add", 1e-5);
    }
    check_bnsum_residual_drop(T);
    /* running statistics: both forms in one training graph, on one input, each with its own buffers */
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int r = 3, C = 5, L = r * C, zs[3] = {2, 7, L};
    vt_tensor *z = vt_input(g, "z", 3, zs), *t[2][15], *y[2] = {NULL, NULL};
    for (int f = 0; f < 2; f++)
        for (int b = 0; b < r; b++) {
            char nm[32];
            snprintf(nm, sizeof nm, "%c%d", f ? 'p' : 'f', b);
            T_CHECK(T, vt_bn_tensors(g, nm, C, t[f] + 5 * b) == 0, "bn tensors %s", nm);
        }
    y[0] = vt_batchnorm_sum(g, z, r, t[0], 1e-5f, 0.1f);
    for (int b = 0; b < r; b++) {
        vt_tensor **u = t[1] + 5 * b;
        vt_tensor *yb = vt_batchnorm(g, vt_slice(g, z, 2, b * C, C), u[0], u[1], u[2], u[3], u[4], 2, 1e-5f, 0.1f);
        y[1] = y[1] ? vt_add(g, y[1], yb) : yb;
    }
    vt_graph_output(g, y[0]);
    vt_graph_output(g, y[1]);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
    if (!e.msg[0]) {
        vt_rng rng;
        vt_rng_seed(&rng, 5);
        for (int64_t i = 0; i < z->numel; i++) z->data[i] = 3.0f * vt_rng_normal(&rng) - 1.0f;
        for (int k = 0; k < 5 * r; k++) /* the same random start in both forms' tensors */
            for (int c = 0; c < t[0][k]->numel; c++)
                t[0][k]->data[c] = t[1][k]->data[c] = k % 5 == 4 ? 3.0f : k % 5 == 3 ? 0.5f + vt_rng_uniform(&rng)
                                                                                   : vt_rng_normal(&rng);
        vt_graph_forward(g);
        vt_graph_forward(g);
        double ey = 0.0, es = 0.0;
        for (int64_t i = 0; i < y[0]->numel; i++) ey = t_worse(ey, fabs(y[0]->data[i] - y[1]->data[i]));
        for (int k = 0; k < 5 * r; k++)
            for (int c = 0; c < t[0][k]->numel; c++) es = t_worse(es, fabs(t[0][k]->data[c] - t[1][k]->data[c]));
        T_CHECK(T, ey < 1e-5 && es < 1e-6, "batchnorm_sum vs the chain: output %g, running statistics %g", ey, es);
        T_CHECK(T, t[0][4]->data[0] == 5.0f && t[0][14]->data[0] == 5.0f, "num_batches_tracked %g, %g after two",
                (double)t[0][4]->data[0], (double)t[0][14]->data[0]);
    }
    /* errors: too many groups, channels not divisible into the groups, a group's tensor of the wrong size, one row
     * to take training statistics from */
    static const struct {
        int r, L, rows;
        const char *want;
    } es[] = {{5, 15, 4, "5 groups (need 1 to 4)"}, {2, 7, 4, "must hold 2 groups"}, {2, 6, 4, "group 1's bias"},
              {2, 6, 1, "more than 1 value per channel"}};
    for (size_t k = 0; k < sizeof es / sizeof es[0]; k++) {
        vt_err e2 = {0};
        vt_params *P2 = vt_params_new(&e2);
        vt_graph *g2 = vt_graph_new(P2, 1, &e2);
        const int s2[2] = {es[k].rows, es[k].L}, four = 4;
        vt_tensor *tt[15];
        for (int b = 0; b < 3; b++) {
            char nm[16];
            snprintf(nm, sizeof nm, "e%d", b);
            vt_bn_tensors(g2, nm, 3, tt + 5 * b);
        }
        if (k == 2) tt[5 + 1] = vt_param(g2, "bad", 1, &four, (vt_init){VT_INIT_ONE, 0});
        vt_tensor *yy = vt_batchnorm_sum(g2, vt_input(g2, "z", 2, s2), es[k].r, tt, 1e-5f, 0.1f);
        T_CHECK(T, !yy && strstr(g2->err.msg, es[k].want), "batchnorm_sum error %zu: %s", k, g2->err.msg);
        vt_graph_free(g2);
        vt_params_free(P2);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* Shape errors name the op and the shapes; nothing is built after the first error. */
static void check_errors(vt_test *T) {
    struct {
        int which;
        const char *want;
    } cs[] = {{0, "layernorm"}, {1, "batchnorm"}, {2, "more than 1 value"}, {3, "softmax"}, {4, "running_var"},
              {5, "unknown activation"}, {6, "only ReLU, ReLU6 and Hardswish"},
              {7, "added term (2, 3, 5) must have the input's shape (2, 3, 4)"},
              {8, "added term (2, 3, 5) must have the input's shape (2, 3, 4)"}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        int xs[3] = {2, 3, 4}, five = 5, four = 4, one[3] = {1, 4, 1}, rs[3] = {2, 3, 5};
        vt_tensor *x = vt_input(g, "x", 3, xs), *y = NULL;
        vt_tensor *w5 = vt_param(g, "w5", 1, &five, (vt_init){0, 0}), *w4 = vt_param(g, "w4", 1, &four, (vt_init){0, 0});
        switch (cs[k].which) {
        case 0: y = vt_layernorm(g, x, w5, NULL, 1e-5f); break;
        case 1: y = vt_batchnorm(g, x, NULL, NULL, NULL, NULL, NULL, 3, 1e-5f, 0.1f); break;
        case 2: y = vt_batchnorm(g, vt_input(g, "x1", 3, one), NULL, NULL, NULL, NULL, NULL, 1, 1e-5f, 0.1f); break;
        case 3: y = vt_softmax(g, x, -4); break;
        case 4: y = vt_batchnorm(g, x, w4, w4, w4, NULL, NULL, 2, 1e-5f, 0.1f); break;
        case 5: y = vt_unary(g, x, (vt_unary_kind)42, 0.0f); break;
        case 6: y = vt_batchnorm_act(g, x, NULL, NULL, NULL, NULL, NULL, 2, 1e-5f, 0.1f, VT_GELU); break;
        case 7:
            y = vt_batchnorm_res(g, x, NULL, NULL, NULL, NULL, NULL, 2, 1e-5f, 0.1f, 1.0f, vt_input(g, "r", 3, rs));
            break;
        case 8: y = vt_softmax_res(g, x, vt_input(g, "r", 3, rs), 0.5f); break;
        }
        vt_tensor *z = vt_gelu(g, x);
        T_CHECK(T, y == NULL && z == NULL, "error case %zu built a tensor", k);
        T_CHECK(T, vt_graph_finalize(g, &e) != 0 && strstr(e.msg, cs[k].want), "error case %zu: message '%s'", k,
                e.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* BatchNorm + activation in one op equals BatchNorm then the activation (outputs and every gradient, eval and
 * training graphs), for each activation, channels-first and channels-last, batch and running statistics, with and
 * without affine parameters; finite differences on two of them. */
static void check_bn_act(vt_test *T) {
    static const struct {
        int ndim, shape[4], ia[4]; /* ia: axis, affine, eval-mode node, activation */
    } cs[] = {{4, {2, 3, 4, 5}, {1, 1, 0, VT_RELU}},     {4, {2, 3, 4, 5}, {1, 1, 0, VT_RELU6}},
              {4, {2, 3, 4, 5}, {1, 1, 0, VT_HARDSWISH}}, {3, {2, 5, 19}, {2, 1, 0, VT_HARDSWISH}},
              {3, {2, 5, 19}, {2, 0, 0, VT_RELU6}},      {4, {2, 3, 4, 5}, {1, 1, 1, VT_HARDSWISH}},
              {3, {3, 50, 17}, {2, 1, 1, VT_RELU}}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int C = cs[i].shape[cs[i].ia[0]];
        gc_case f = {.name = "batchnorm_act", .nx = 6, .ndim = {cs[i].ndim, 1, 1, 1, 1, 1},
                     .shape = {{0}, {C}, {C}, {C}, {C}, {1}}, .nograd = {0, !cs[i].ia[1], !cs[i].ia[1], 1, 1, 1},
                     .build = b_bn_act, .fill = fill_bn};
        memcpy(f.shape[0], cs[i].shape, sizeof cs[i].shape);
        memcpy(f.ia, cs[i].ia, sizeof cs[i].ia);
        gc_case p = f;
        p.name = "batchnorm then the activation";
        p.build = b_bn_then_act;
        gc_compare(T, &p, &f, 1e-6);
        if (i == 1 || i == 3) gc_run(T, &f);
    }
}

/* vt_bnact_dwconv (ia[3] 0) or vt_bnact_pwconv (1): x0 input (B, C, H, W), x1 w, x2 b, x3 running mean, x4
 * running var, x5 the conv's weight; ia[0] 1: eval-mode node inside a train graph, ia[1] the activation, ia[2] 1:
 * plus x0 (its gradient added to; the pointwise op: plus x0's first channels). */
static vt_tensor *b_bndw(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int keep = g->training;
    if (c->ia[0]) g->training = 0;
    vt_tensor *y = (c->ia[3] ? vt_bnact_pwconv : vt_bnact_dwconv)(g, x[0], x[1], x[2], x[3], x[4], NULL, 1e-5f, 0.1f,
                                                                  c->ia[1], x[5]);
    g->training = keep;
    if (!c->ia[2]) return y;
    return vt_add(g, c->ia[3] ? vt_slice(g, x[0], 1, 0, y->shape[1]) : x[0], y);
}

/* The chain either op replaces: vt_batchnorm_act, then the conv. */
static vt_tensor *b_bndw_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int keep = g->training;
    if (c->ia[0]) g->training = 0;
    vt_tensor *y = vt_batchnorm_act(g, x[0], x[1], x[2], x[3], x[4], NULL, 1, 1e-5f, 0.1f, c->ia[1]);
    g->training = keep;
    const int k = x[5]->shape[2];
    y = vt_conv2d(g, y, x[5], NULL, 1, k / 2, c->ia[3] ? 1 : x[0]->shape[1]);
    if (!c->ia[2]) return y;
    return vt_add(g, c->ia[3] ? vt_slice(g, x[0], 1, 0, y->shape[1]) : x[0], y);
}

/* fill_bn's values, the depthwise weight (x5) N(0, 0.5²) */
static void fill_bndw(float *d, int64_t n, int which, vt_rng *r) {
    fill_bn(d, n, which, r);
    for (int64_t i = 0; which == 5 && i < n; i++) d[i] = 0.5f * vt_rng_normal(r);
}

/* One training graph with both forms on one input, each with its own BatchNorm tensors: the pointwise op (pw) or the
 * depthwise op, and the chain (vt_batchnorm_act then the conv). Two forward runs; the output and the running
 * statistics agree with the chain's, num_batches_tracked counts; again on inputs near 1e7. */
static void check_bn_conv_running(vt_test *T, int pw) {
    const char *name = pw ? "bn_act_pwconv" : "bn_act_dwconv";
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int C = 3, xs[4] = {2, C, 6, 7}, ws[4] = {pw ? 4 : C, pw ? C : 1, pw ? 1 : 3, pw ? 1 : 3};
    vt_tensor *x = vt_input(g, "x", 4, xs), *t[2][5], *y[2];
    T_CHECK(T, vt_bn_tensors(g, "f", C, t[0]) == 0 && vt_bn_tensors(g, "p", C, t[1]) == 0, "bn tensors");
    vt_tensor *w = vt_param(g, "w", 4, ws, (vt_init){VT_INIT_NORMAL, 0.5f});
    y[0] = (pw ? vt_bnact_pwconv : vt_bnact_dwconv)(g, x, t[0][0], t[0][1], t[0][2], t[0][3], t[0][4], 1e-5f, 0.1f,
                                                   VT_RELU6, w);
    y[1] = vt_conv2d(g, vt_batchnorm_act(g, x, t[1][0], t[1][1], t[1][2], t[1][3], t[1][4], 1, 1e-5f, 0.1f, VT_RELU6),
                     w, NULL, 1, pw ? 0 : 1, pw ? 1 : C);
    vt_graph_output(g, y[0]);
    vt_graph_output(g, y[1]);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "%s: finalize: %s", name, e.msg);
    if (!e.msg[0]) {
        vt_params_init(P, 3);
        vt_rng rng;
        vt_rng_seed(&rng, 9);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = 3.0f * vt_rng_normal(&rng) + 1.0f;
        for (int k = 0; k < 5; k++) /* the same random start in both forms' tensors */
            for (int c = 0; c < t[0][k]->numel; c++)
                t[0][k]->data[c] = t[1][k]->data[c] =
                    k == 4 ? 3.0f : k == 3 ? 0.5f + vt_rng_uniform(&rng) : vt_rng_normal(&rng);
        vt_graph_forward(g);
        vt_graph_forward(g);
        double ey = 0.0, es = 0.0;
        for (int64_t i = 0; i < y[0]->numel; i++) ey = t_worse(ey, fabs(y[0]->data[i] - y[1]->data[i]));
        for (int k = 0; k < 5; k++)
            for (int c = 0; c < t[0][k]->numel; c++) es = t_worse(es, fabs(t[0][k]->data[c] - t[1][k]->data[c]));
        T_CHECK(T, ey < 1e-5 && es < 1e-6, "%s vs the chain: output %g, running statistics %g", name, ey, es);
        T_CHECK(T, t[0][4]->data[0] == 5.0f, "%s: num_batches_tracked %g after two", name, (double)t[0][4]->data[0]);
        /* values far from 0 against their spread: the statistics' sums of deviations from a shift keep the
         * variance, where Σx² − (Σx)²/M would lose it (about 1% here) */
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = 1e7f + 4.0f * vt_rng_normal(&rng);
        vt_graph_forward(g);
        ey = 0.0;
        for (int64_t i = 0; i < y[0]->numel; i++) ey = t_worse(ey, fabs(y[0]->data[i] - y[1]->data[i]));
        T_CHECK(T, ey < 1e-4, "%s vs the chain on inputs near 1e7: output %g", name, ey);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* The gradients of either op (fused 1) or its chain (0) in a training graph where only the operands in `want` (bit 0
 * x, bit 1 the BatchNorm's weight, bit 2 the conv's weight, bit 3 the BatchNorm's bias) are parameters and the rest
 * inputs without gradients; gr[0..3] get x's, the BatchNorm weight's, the conv weight's and the BatchNorm bias's
 * (left as they were where not wanted); the pointwise op has 5 outputs. 0, or -1. */
static int bn_conv_partial(int pw, int fused, int want, const int *xs, float *gr[4]) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int C = xs[1], ws[4] = {pw ? 5 : C, pw ? C : 1, pw ? 1 : 3, pw ? 1 : 3}, cs[1] = {C};
    vt_tensor *x = want & 1 ? vt_param(g, "x", 4, xs, (vt_init){VT_INIT_ZERO, 0}) : vt_input(g, "x", 4, xs);
    vt_tensor *bw = want & 2 ? vt_param(g, "bw", 1, cs, (vt_init){VT_INIT_ZERO, 0}) : vt_input(g, "bw", 1, cs);
    vt_tensor *bb = want & 8 ? vt_param(g, "bb", 1, cs, (vt_init){VT_INIT_ZERO, 0}) : vt_input(g, "bb", 1, cs);
    vt_tensor *rm = vt_input(g, "rm", 1, cs), *rv = vt_input(g, "rv", 1, cs);
    vt_tensor *w = want & 4 ? vt_param(g, "w", 4, ws, (vt_init){VT_INIT_ZERO, 0}) : vt_input(g, "w", 4, ws);
    vt_tensor *y = fused ? (pw ? vt_bnact_pwconv : vt_bnact_dwconv)(g, x, bw, bb, rm, rv, NULL, 1e-5f, 0.1f, VT_RELU6, w)
                         : vt_conv2d(g, vt_batchnorm_act(g, x, bw, bb, rm, rv, NULL, 1, 1e-5f, 0.1f, VT_RELU6), w, NULL,
                                     1, pw ? 0 : 1, pw ? 1 : C);
    vt_tensor *r = y ? vt_input(g, "r", 4, y->shape) : NULL;
    if (r) vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    int rc = -1;
    if (r && vt_graph_finalize(g, &e) == 0) {
        vt_rng rng;
        vt_rng_seed(&rng, 21);
        vt_tensor *all[7] = {x, bw, bb, rm, rv, w, r};
        for (int k = 0; k < 7; k++)
            for (int64_t i = 0; i < all[k]->numel; i++)
                all[k]->data[i] = k == 0   ? 2.0f * vt_rng_normal(&rng) + 0.5f
                                  : k == 4 ? 0.3f + vt_rng_uniform(&rng)
                                           : vt_rng_normal(&rng);
        vt_graph_forward(g);
        vt_graph_backward(g);
        const vt_tensor *src[4] = {x, bw, w, bb};
        for (int k = 0; k < 4; k++)
            if (want >> k & 1) memcpy(gr[k], src[k]->grad, sizeof(float) * (size_t)src[k]->numel);
        rc = 0;
    }
    vt_graph_free(g);
    vt_params_free(P);
    return rc;
}

/* Either op with only some operands needing gradients (the others inputs: the op's backward sees NULL for theirs)
 * gives the chain's gradients for the rest. */
static void check_bn_conv_partial(vt_test *T) {
    const int xs[4] = {2, 4, 7, 6}, n = 2 * 4 * 7 * 6;
    for (int pw = 0; pw < 2; pw++)
        for (int want = 1; want < 16; want++) { /* every subset of x, BN weight, conv weight, BN bias */
            float a[4][2 * 4 * 7 * 6] = {{0}}, b[4][2 * 4 * 7 * 6] = {{0}}; /* past each gradient's size: zeros */
            float *ga[4] = {a[0], a[1], a[2], a[3]}, *gb[4] = {b[0], b[1], b[2], b[3]};
            const int ok = bn_conv_partial(pw, 1, want, xs, ga) == 0 && bn_conv_partial(pw, 0, want, xs, gb) == 0;
            double d = 0.0, scale = 1.0;
            for (int k = 0; k < 4 && ok; k++)
                for (int i = 0; i < n; i++) {
                    d = t_worse(d, fabs((double)a[k][i] - b[k][i]));
                    scale = fmax(scale, fabs((double)b[k][i]));
                }
            T_CHECK(T, ok && d / scale < 1e-5, "%s with gradients for operands %d only: %g from the chain",
                    pw ? "bn_act_pwconv" : "bn_act_dwconv", want, d / scale);
        }
}

/* The pointwise op's backward on 4 threads over 6 tiles (every thread busy, the sums of 4 threads added): four runs
 * give bit-identical gradients (the threads' partial sums are added in thread order, not as they finish; on 2
 * threads either order gives the same floats; an arrival-order add of the conv weight's sums failed this in 2 of 3
 * suite runs with two runs here). */
static void check_bn_pwconv_repeat(vt_test *T) {
    enum { RUNS = 4 };
    const int xs[4] = {3, 60, 29, 31}, n = 3 * 60 * 29 * 31, threads0 = omp_get_max_threads();
    float *r[RUNS][4];
    int ok = 1;
    for (int k = 0; k < RUNS; k++)
        for (int j = 0; j < 4; j++) ok &= (r[k][j] = calloc((size_t)n, sizeof(float))) != NULL;
    omp_set_num_threads(4);
    for (int k = 0; k < RUNS && ok; k++) ok = bn_conv_partial(1, 1, 15, xs, r[k]) == 0;
    omp_set_num_threads(threads0);
    for (int k = 1; k < RUNS && ok; k++)
        for (int j = 0; j < 4 && ok; j++) ok = memcmp(r[0][j], r[k][j], sizeof(float) * (size_t)n) == 0;
    T_CHECK(T, ok, "bn_act_pwconv on 4 threads: %d runs give bit-identical gradients", RUNS);
    for (int k = 0; k < RUNS; k++)
        for (int j = 0; j < 4; j++) free(r[k][j]);
}

/* vt_bnact_dwconv and vt_bnact_pwconv: outputs and gradients against the chain (train and eval graphs; batch
 * statistics with every activation, running ones with ReLU6, Hardswish and none; depthwise kernels 3/5/7, planes
 * taller and wider than 16; pointwise tiles of 896 pixels and a tail, more and fewer outputs than inputs; x's
 * gradient written and added), finite differences without an activation; the running statistics updated as the
 * chain's; their errors. */
static void check_bn_dwconv(vt_test *T) {
    static const struct {
        int shape[4], k, ia[4]; /* k: the depthwise kernel, or the pointwise op's outputs; ia as b_bndw's */
    } cs[] = {{{2, 3, 9, 7}, 3, {0, VT_RELU6, 1, 0}}, {{2, 2, 11, 18}, 5, {0, VT_RELU6, 0, 0}},
              {{1, 3, 6, 5}, 3, {1, VT_HARDSWISH, 0, 0}}, {{3, 2, 4, 4}, 7, {0, VT_RELU, 0, 0}},
              {{2, 2, 5, 5}, 3, {0, -1, 1, 0}}, {{2, 3, 7, 9}, 5, {0, -1, 0, 0}},
              {{2, 2, 17, 6}, 3, {0, VT_HARDSWISH, 1, 0}}, {{1, 5, 4, 19}, 7, {1, VT_RELU6, 1, 0}},
              {{2, 3, 5, 4}, 3, {1, -1, 0, 0}},
              /* pointwise: 36 channels take tiles of 896 pixels, so 31x31 planes are a whole tile and a tail */
              {{2, 36, 31, 31}, 6, {0, VT_RELU6, 1, 1}}, {{3, 36, 31, 31}, 6, {0, VT_RELU6, 0, 1}},
              {{2, 36, 31, 31}, 6, {1, VT_RELU6, 0, 1}}, {{2, 5, 3, 4}, 7, {0, VT_RELU, 0, 1}},
              {{2, 4, 5, 3}, 2, {0, -1, 0, 1}}, {{1, 3, 4, 5}, 3, {0, -1, 1, 1}},
              {{2, 6, 4, 4}, 4, {0, VT_HARDSWISH, 0, 1}}, {{2, 4, 3, 3}, 5, {1, -1, 0, 1}}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int C = cs[i].shape[1], k = cs[i].k, pw = cs[i].ia[3];
        gc_case f = {.name = pw ? "bn_act_pwconv" : "bn_act_dwconv", .nx = 6, .ndim = {4, 1, 1, 1, 1, 4},
                     .shape = {{0}, {C}, {C}, {C}, {C}, {pw ? k : C, pw ? C : 1, pw ? 1 : k, pw ? 1 : k}},
                     .nograd = {0, 0, 0, 1, 1, 0}, .build = b_bndw, .fill = fill_bndw};
        memcpy(f.shape[0], cs[i].shape, sizeof cs[i].shape);
        memcpy(f.ia, cs[i].ia, sizeof cs[i].ia);
        gc_case p = f;
        p.name = "batchnorm_act then the conv";
        p.build = b_bndw_chain;
        gc_compare(T, &p, &f, 1e-5);
        /* finite differences where no activation kink lies within a step of the sampled points' effect: the
         * weights of a BatchNorm move a whole channel, and the step crossed ReLU6's kinks somewhere in it */
        if (cs[i].ia[1] == -1) gc_run(T, &f);
    }
    check_bn_conv_running(T, 0);
    check_bn_conv_running(T, 1);
    check_bn_conv_partial(T);
    check_bn_pwconv_repeat(T);
    /* errors: an even kernel, a pointwise weight of other input channels, an activation it does not apply, one value
     * per channel to take statistics from */
    static const struct {
        int pw, xs[4], ws[4], act;
        const char *want;
    } er[] = {{0, {2, 3, 5, 5}, {3, 1, 2, 2}, VT_RELU6, "k odd"},
              {0, {2, 3, 5, 5}, {3, 1, 3, 3}, VT_GELU, "only ReLU, ReLU6 and Hardswish"},
              {0, {1, 3, 1, 1}, {3, 1, 3, 3}, VT_RELU6, "more than 1 value per channel"},
              {1, {2, 3, 5, 5}, {4, 2, 1, 1}, VT_RELU6, "must be (O, 3, 1, 1)"},
              {1, {2, 3, 5, 5}, {4, 3, 3, 3}, VT_RELU6, "must be (O, 3, 1, 1)"},
              {1, {2, 3, 5, 5}, {4, 3, 1, 1}, VT_GELU, "only ReLU, ReLU6 and Hardswish"},
              {1, {1, 3, 1, 1}, {4, 3, 1, 1}, VT_RELU6, "more than 1 value per channel"}};
    for (size_t i = 0; i < sizeof er / sizeof er[0]; i++) {
        vt_err e2 = {0};
        vt_params *P2 = vt_params_new(&e2);
        vt_graph *g2 = vt_graph_new(P2, 1, &e2);
        vt_tensor *bn[5];
        const char *name = er[i].pw ? "bn_act_pwconv" : "bn_act_dwconv";
        const vt_tensor *r = vt_bn_tensors(g2, "bn", 3, bn)
                                 ? NULL
                                 : (er[i].pw ? vt_bnact_pwconv : vt_bnact_dwconv)(
                                       g2, vt_input(g2, "x", 4, er[i].xs), bn[0], bn[1], bn[2], bn[3], bn[4], 1e-5f,
                                       0.1f, er[i].act, vt_input(g2, "w", 4, er[i].ws));
        T_CHECK(T, !r && strstr(g2->err.msg, name) && strstr(g2->err.msg, er[i].want), "%s error %zu: %s", name, i,
                g2->err.msg);
        vt_graph_free(g2);
        vt_params_free(P2);
    }
}

/* vt_softmax_res against softmax, scale and add: finite differences, outputs and gradients (rows shorter than a
 * vector, with a vector tail, whole vectors; the residual without a gradient and used again); its shape error in
 * check_errors. */
static void check_softmax_res(vt_test *T) {
    static const struct {
        int ndim, shape[4], nograd_r, again;
        float c;
    } cs[] = {{4, {2, 3, 5, 5}, 0, 0, 0.25f}, {4, {2, 2, 3, 19}, 0, 1, 0.1767767f}, {2, {3, 32}, 1, 0, 2.0f},
              {3, {2, 3, 37}, 0, 0, -0.5f}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        gc_case f = {.name = "softmax_res", .nx = 2, .ndim = {cs[i].ndim, cs[i].ndim}, .nograd = {0, cs[i].nograd_r},
                     .build = b_softmax_res, .ia = {cs[i].again}, .fa = {cs[i].c}};
        memcpy(f.shape[0], cs[i].shape, sizeof cs[i].shape);
        memcpy(f.shape[1], cs[i].shape, sizeof cs[i].shape);
        gc_run_vs_plain(T, &f, b_softmax_res_plain, "softmax, scale and add", 1e-5);
    }
}

/* vt_bn_res_bn's operands: t, a, then BN_3's and BN_a's weight and bias; each form's running statistics are its own
 * buffers. ia[0]: 0 the fused op (the chain in eval graphs, as the Refiner), 1 the chain; fa[0] the scale. */
static vt_tensor *b_pair(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int C = x[0]->shape[1], one = 1;
    vt_tensor *b3[5] = {x[2], x[3], vt_buffer(g, "rm3", 1, &C, VT_INIT_Z), vt_buffer(g, "rv3", 1, &C, VT_INIT_1),
                        vt_buffer(g, "nb3", 1, &one, VT_INIT_Z)};
    vt_tensor *ba[5] = {x[4], x[5], vt_buffer(g, "rma", 1, &C, VT_INIT_Z), vt_buffer(g, "rva", 1, &C, VT_INIT_1),
                        vt_buffer(g, "nba", 1, &one, VT_INIT_Z)};
    if (!c->ia[0] && g->training) return vt_bn_res_bn(g, x[0], b3, x[1], ba, 1e-5f, 0.1f, c->fa[0]);
    vt_tensor *y = vt_batchnorm_res(g, x[0], b3[0], b3[1], b3[2], b3[3], b3[4], 1, 1e-5f, 0.1f, 1.0f, x[1]);
    return vt_batchnorm_res(g, y, ba[0], ba[1], ba[2], ba[3], ba[4], 1, 1e-5f, 0.1f, c->fa[0], NULL);
}

/* t off-centre and spread, a correlated with nothing, weights N(0, 1) */
static void fill_pair(float *d, int64_t n, int which, vt_rng *r) {
    for (int64_t i = 0; i < n; i++)
        d[i] = which == 0 ? 2.0f * vt_rng_normal(r) + 0.5f : which == 1 ? vt_rng_normal(r) - 0.3f : vt_rng_normal(r);
}

/* vt_bn_res_bn against the chain of two vt_batchnorm_res (outputs and every gradient; a's and t's written and added;
 * images in 1 to 8 chunks and more images than chunks; scales 1 and 0.7), finite differences, the running statistics
 * (two steps, then values near 1e7) and its errors. */
static void check_bn_res_bn(vt_test *T) {
    static const struct {
        int shape[4];
        float scale;
    } cs[] = {{{2, 3, 5, 7}, 1.0f}, {{3, 2, 9, 8}, 0.7f}, {{9, 2, 4, 5}, 1.0f}, {{1, 4, 6, 3}, 0.7f}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const int C = cs[i].shape[1];
        gc_case f = {.name = "bn_res_bn", .nx = 6, .ndim = {4, 4, 1, 1, 1, 1},
                     .shape = {{0}, {0}, {C}, {C}, {C}, {C}}, .build = b_pair, .fill = fill_pair,
                     .fa = {cs[i].scale}};
        memcpy(f.shape[0], cs[i].shape, sizeof cs[i].shape);
        memcpy(f.shape[1], cs[i].shape, sizeof cs[i].shape);
        gc_case p = f;
        p.name = "the two batchnorm_res";
        p.ia[0] = 1;
        gc_compare(T, &p, &f, 1e-5);
        if (i < 2) gc_run(T, &f);
    }
    /* running statistics: both forms on one input, their BatchNorm tensors starting equal */
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[4] = {3, 2, 5, 6};
    vt_tensor *t = vt_input(g, "t", 4, xs), *a = vt_input(g, "a", 4, xs), *bn[4][5];
    int ok = 1;
    for (int k = 0; k < 4; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "bn%d", k);
        ok &= vt_bn_tensors(g, nm, 2, bn[k]) == 0;
    }
    T_CHECK(T, ok, "bn tensors");
    vt_tensor *yf = vt_bn_res_bn(g, t, bn[0], a, bn[1], 1e-5f, 0.1f, 0.5f);
    vt_tensor *yc = vt_batchnorm_res(g, vt_batchnorm_res(g, t, bn[2][0], bn[2][1], bn[2][2], bn[2][3], bn[2][4], 1,
                                                         1e-5f, 0.1f, 1.0f, a),
                                     bn[3][0], bn[3][1], bn[3][2], bn[3][3], bn[3][4], 1, 1e-5f, 0.1f, 0.5f, NULL);
    vt_graph_output(g, yf);
    vt_graph_output(g, yc);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "bn_res_bn: finalize: %s", e.msg);
    if (!e.msg[0]) {
        vt_rng rng;
        vt_rng_seed(&rng, 5);
        for (int64_t i = 0; i < t->numel; i++) {
            t->data[i] = 3.0f * vt_rng_normal(&rng) + 1.0f;
            a->data[i] = 0.5f * t->data[i] + vt_rng_normal(&rng); /* correlated: cov(t, a) counts */
        }
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 5; k++)
                for (int c = 0; c < bn[j][k]->numel; c++)
                    bn[j][k]->data[c] = bn[j + 2][k]->data[c] =
                        k == 4 ? 3.0f : k == 3 ? 0.5f + vt_rng_uniform(&rng) : vt_rng_normal(&rng);
        vt_graph_forward(g);
        vt_graph_forward(g);
        double ey = 0.0, es = 0.0;
        for (int64_t i = 0; i < yf->numel; i++) ey = t_worse(ey, fabs(yf->data[i] - yc->data[i]));
        for (int j = 0; j < 2; j++)
            for (int k = 2; k < 5; k++)
                for (int c = 0; c < bn[j][k]->numel; c++)
                    es = t_worse(es, fabs(bn[j][k]->data[c] - bn[j + 2][k]->data[c]) /
                                         fmax(1.0, fabs(bn[j][k]->data[c])));
        T_CHECK(T, ey < 1e-5 && es < 1e-5, "bn_res_bn vs the chain: output %g, running statistics %g", ey, es);
        T_CHECK(T, bn[0][4]->data[0] == 5.0f && bn[1][4]->data[0] == 5.0f, "bn_res_bn: num_batches_tracked %g, %g",
                (double)bn[0][4]->data[0], (double)bn[1][4]->data[0]);
        for (int64_t i = 0; i < t->numel; i++) { /* far from 0 against their spread */
            t->data[i] = 1e7f + 4.0f * vt_rng_normal(&rng);
            a->data[i] = -3e6f + 2.0f * vt_rng_normal(&rng);
        }
        vt_graph_forward(g);
        /* against the two BatchNorms in double (the chain's float middle map near -3e6 keeps steps of 0.25) */
        const int C = xs[1], Q = xs[2] * xs[3];
        const double M = (double)xs[0] * Q;
        ey = 0.0;
        for (int c = 0; c < C; c++) {
            double st = 0, sa = 0, vt = 0, my = 0, vy = 0;
            for (int b = 0; b < xs[0]; b++)
                for (int q = 0; q < Q; q++) {
                    st += t->data[(b * C + c) * Q + q];
                    sa += a->data[(b * C + c) * Q + q];
                }
            st /= M, sa /= M;
            for (int b = 0; b < xs[0]; b++)
                for (int q = 0; q < Q; q++) vt += pow(t->data[(b * C + c) * Q + q] - st, 2) / M;
            const double w3 = bn[0][0]->data[c], b3 = bn[0][1]->data[c], r3 = 1.0 / sqrt(vt + 1e-5);
            double y1[2 * 5 * 6 * 3];
            for (int b = 0; b < xs[0]; b++)
                for (int q = 0; q < Q; q++) {
                    const int j = (b * C + c) * Q + q;
                    y1[b * Q + q] = w3 * (t->data[j] - st) * r3 + b3 + (a->data[j] - sa);
                    my += y1[b * Q + q] / M;
                }
            for (int j = 0; j < xs[0] * Q; j++) vy += pow(y1[j] - my, 2) / M;
            for (int b = 0; b < xs[0]; b++)
                for (int q = 0; q < Q; q++) {
                    const double z = 0.5 * (bn[1][0]->data[c] * (y1[b * Q + q] - my) / sqrt(vy + 1e-5) +
                                            bn[1][1]->data[c]);
                    ey = t_worse(ey, fabs(yf->data[(b * C + c) * Q + q] - z));
                }
        }
        T_CHECK(T, ey < 1e-4, "bn_res_bn on inputs near 1e7 (a near -3e6) against double precision: output %g", ey);
    }
    vt_graph_free(g);
    vt_params_free(P);
    /* errors: a of another shape, a BatchNorm tensor of other channels, an eval graph, a momentum over 1, one value
     * per channel, a num_batches_tracked of two values */
    for (int k = 0; k < 6; k++) {
        vt_err e2 = {0};
        vt_params *P2 = vt_params_new(&e2);
        vt_graph *g2 = vt_graph_new(P2, k != 2, &e2);
        const int as[4] = {3, 2, 5, k == 0 ? 5 : 6}, one[4] = {1, 2, 1, 1}, two = 2;
        const int *ts = k == 4 ? one : xs;
        vt_tensor *b3[5], *b4[5];
        const int bad = vt_bn_tensors(g2, "b3", k == 1 ? 3 : 2, b3) || vt_bn_tensors(g2, "b4", 2, b4);
        if (k == 5) b4[4] = vt_buffer(g2, "nbt2", 1, &two, VT_INIT_Z);
        const vt_tensor *r = bad ? NULL
                                 : vt_bn_res_bn(g2, vt_input(g2, "t", 4, ts), b3, vt_input(g2, "a", 4, k == 4 ? one : as),
                                                b4, 1e-5f, k == 3 ? 2.0f : 0.1f, 1.0f);
        static const char *want[6] = {"the added term", "must be (2)", "training graphs only", "momentum 2",
                                      "more than 1 value", "num_batches_tracked"};
        T_CHECK(T, !r && strstr(g2->err.msg, "bn_res_bn") && strstr(g2->err.msg, want[k]), "bn_res_bn error %d: %s",
                k, g2->err.msg);
        vt_graph_free(g2);
        vt_params_free(P2);
    }
}

/* One training graph of vt_bn_res_bn (fused 1) or the chain (0) on (t, a, w3, b3, wa, ba), operand k a parameter
 * where bit k of want is set (else an input), loss Σ z·r; t and a integers (+ off, − 0.3·off: exact shifts). Returns
 * z then every operand's gradient (0 where none), n floats in all, malloc'd; NULL on failure. */
static float *pair_run(const int *xs, int fused, unsigned want, float off, int64_t *n) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int C = xs[1], one = 1, cs[1] = {C};
    vt_tensor *x[6];
    for (int k = 0; k < 6; k++) {
        char nm[8];
        snprintf(nm, sizeof nm, "x%d", k);
        x[k] = want >> k & 1u ? vt_param(g, nm, k < 2 ? 4 : 1, k < 2 ? xs : cs, VT_INIT_Z)
                              : vt_input(g, nm, k < 2 ? 4 : 1, k < 2 ? xs : cs);
    }
    vt_tensor *b3[5] = {x[2], x[3], vt_buffer(g, "rm3", 1, &C, VT_INIT_Z), vt_buffer(g, "rv3", 1, &C, VT_INIT_1),
                        vt_buffer(g, "nb3", 1, &one, VT_INIT_Z)};
    vt_tensor *ba[5] = {x[4], x[5], vt_buffer(g, "rma", 1, &C, VT_INIT_Z), vt_buffer(g, "rva", 1, &C, VT_INIT_1),
                        vt_buffer(g, "nba", 1, &one, VT_INIT_Z)};
    vt_tensor *y = fused ? vt_bn_res_bn(g, x[0], b3, x[1], ba, 1e-5f, 0.1f, 0.7f)
                         : vt_batchnorm_res(g,
                                            vt_batchnorm_res(g, x[0], b3[0], b3[1], b3[2], b3[3], b3[4], 1, 1e-5f, 0.1f,
                                                             1.0f, x[1]),
                                            ba[0], ba[1], ba[2], ba[3], ba[4], 1, 1e-5f, 0.1f, 0.7f, NULL);
    vt_tensor *r = y ? vt_input(g, "r", 4, xs) : NULL;
    float *o = NULL;
    if (r) {
        vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
        vt_graph_output(g, y); /* kept through backward */
    }
    if (r && vt_graph_finalize(g, &e) == 0) {
        vt_rng rng;
        vt_rng_seed(&rng, 77);
        for (int k = 0; k < 6; k++)
            for (int64_t i = 0; i < x[k]->numel; i++)
                x[k]->data[i] = k < 2 ? rintf(4.0f * vt_rng_normal(&rng)) : vt_rng_normal(&rng);
        for (int64_t i = 0; i < x[0]->numel; i++) {
            x[1]->data[i] += rintf(0.5f * x[0]->data[i]) - 0.3f * off; /* correlated with t */
            x[0]->data[i] += off;
        }
        for (int64_t i = 0; i < r->numel; i++) r->data[i] = vt_rng_normal(&rng);
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        *n = y->numel;
        for (int k = 0; k < 6; k++) *n += x[k]->numel;
        if ((o = calloc((size_t)*n, sizeof(float)))) {
            memcpy(o, y->data, sizeof(float) * (size_t)y->numel);
            float *q = o + y->numel;
            for (int k = 0; k < 6; k++, q += x[k - 1]->numel)
                if (x[k]->grad) memcpy(q, x[k]->grad, sizeof(float) * (size_t)x[k]->numel);
        }
    }
    vt_graph_free(g);
    vt_params_free(P);
    return o;
}

/* vt_bn_res_bn with only some operands needing gradients (one, two, all six) against the chain (planes of a run of
 * 1024 and a tail, more images than chunks); its output and gradients the same for t and a shifted by 1e7 and −3e6
 * (exact shifts of integers: the true values do not move), where the chain's float arithmetic does not keep them. */
static void check_bn_res_bn_grads(vt_test *T) {
    static const int shapes[2][4] = {{1, 3, 1, 2049}, {17, 2, 3, 3}};
    static const unsigned masks[] = {1, 2, 4, 8, 16, 32, 3, 12, 48, 63};
    for (int s = 0; s < 2; s++)
        for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
            int64_t n0 = 0, n1 = 0;
            float *f = pair_run(shapes[s], 1, masks[m], 0.0f, &n0), *c = pair_run(shapes[s], 0, masks[m], 0.0f, &n1);
            const double d = f && c && n0 == n1 ? gc_rel_diff(f, c, n0, 1.0) : -1.0;
            T_CHECK(T, d >= 0.0 && d < 2e-5, "bn_res_bn (%d, %d, %d, %d), gradients of %#x: %g", shapes[s][0],
                    shapes[s][1], shapes[s][2], shapes[s][3], masks[m], d);
            free(f);
            free(c);
        }
    const int xs[4] = {11, 3, 35, 37};
    int64_t n0 = 0, n1 = 0;
    float *f0 = pair_run(xs, 1, 63, 0.0f, &n0), *f1 = pair_run(xs, 1, 63, 1e7f, &n1);
    const double d = f0 && f1 && n0 == n1 ? gc_rel_diff(f1, f0, n0, 1.0) : -1.0;
    T_CHECK(T, d >= 0.0 && d < 1e-4, "bn_res_bn on t + 1e7, a − 3e6: output and gradients as at 0 (%g)", d);
    free(f0);
    free(f1);
}

void test_ops_norm_act(vt_test *T) {
    check_bnpair_nan(T);
    check_activation_values(T);
    check_kink_grads(T);
    check_softmax_values(T);
    check_layernorm_values(T);
    check_layernorm_huge(T);
    check_layernorm_constant(T);
    check_layernorm_cf(T);
    check_batchnorm_values(T);
    check_batchnorm_sum(T);
    check_batchnorm_sets(T);
    check_batchnorm_res(T);
    check_bn_dwconv(T);
    check_bn_res_bn(T);
    check_bn_res_bn_grads(T);
    check_softmax_res(T);
    check_errors(T);
    gc_case cases[] = {
        /* layernorm */
        {.name = "ln_affine", .nx = 3, .ndim = {3, 1, 1}, .shape = {{2, 3, 5}, {5}, {5}}, .build = b_ln, .ia = {3}},
        {.name = "ln_noaffine_odd", .nx = 1, .ndim = {2}, .shape = {{7, 9}}, .build = b_ln},
        {.name = "ln_1row_c2", .nx = 3, .ndim = {2, 1, 1}, .shape = {{1, 2}, {2}, {2}}, .build = b_ln, .ia = {3},
         .fa = {1e-2f}},
        {.name = "ln_w_only", .nx = 2, .ndim = {2, 1}, .shape = {{3, 6}, {6}}, .build = b_ln, .ia = {1}},
        {.name = "ln_b_only", .nx = 3, .ndim = {2, 1, 1}, .shape = {{3, 6}, {6}, {6}}, .nograd = {0, 1, 0},
         .build = b_ln, .ia = {2}},
        {.name = "ln_many_rows", .nx = 3, .ndim = {3, 1, 1}, .shape = {{5, 31, 8}, {8}, {8}}, .build = b_ln,
         .ia = {3}},
        /* whole vectors and a partial one (8 or 16 lanes: 37 = 2·16 + 5 = 4·8 + 5), and whole vectors only */
        {.name = "ln_C37", .nx = 3, .ndim = {3, 1, 1}, .shape = {{2, 3, 37}, {37}, {37}}, .build = b_ln, .ia = {3}},
        {.name = "ln_C32_noaffine", .nx = 1, .ndim = {3}, .shape = {{2, 3, 32}}, .build = b_ln},
        {.name = "ln_C37_residual", .nx = 3, .ndim = {3, 1, 1}, .shape = {{2, 2, 37}, {37}, {37}}, .build = b_ln,
         .ia = {3, 1}},
        {.name = "ln_C20_residual_noaffine", .nx = 1, .ndim = {3}, .shape = {{2, 3, 20}}, .build = b_ln, .ia = {0, 1}},
        /* batchnorm: x, w, b, running mean, running var, num_batches_tracked */
        {.name = "bn_nchw_train", .nx = 6, .ndim = {4, 1, 1, 1, 1, 1}, .shape = {{2, 3, 4, 5}, {3}, {3}, {3}, {3}, {1}},
         .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn, .fill = fill_bn, .ia = {1, 1, 0}},
        {.name = "bn_ncl_train", .nx = 6, .ndim = {3, 1, 1, 1, 1, 1}, .shape = {{3, 4, 5}, {4}, {4}, {4}, {4}, {1}},
         .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn, .fill = fill_bn, .ia = {1, 1, 0}},
        {.name = "bn_nlc_train", .nx = 6, .ndim = {3, 1, 1, 1, 1, 1}, .shape = {{2, 5, 4}, {4}, {4}, {4}, {4}, {1}},
         .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn, .fill = fill_bn, .ia = {2, 1, 0}},
        {.name = "bn_nhwc_train", .nx = 6, .ndim = {4, 1, 1, 1, 1, 1},
         .shape = {{2, 3, 3, 19}, {19}, {19}, {19}, {19}, {1}}, .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn,
         .fill = fill_bn, .ia = {3, 1, 0}},
        {.name = "bn_n1_tokens_train", .nx = 6, .ndim = {3, 1, 1, 1, 1, 1}, .shape = {{2, 1, 3}, {3}, {3}, {3}, {3}, {1}},
         .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn, .fill = fill_bn, .ia = {-1, 1, 0}},
        {.name = "bn_noaffine_2d_train", .nx = 6, .ndim = {2, 1, 1, 1, 1, 1}, .shape = {{5, 3}, {3}, {3}, {3}, {3}, {1}},
         .nograd = {0, 1, 1, 1, 1, 1}, .build = b_bn, .fill = fill_bn, .ia = {1, 0, 0}},
        {.name = "bn_nchw_train_residual", .nx = 6, .ndim = {4, 1, 1, 1, 1, 1},
         .shape = {{2, 3, 4, 5}, {3}, {3}, {3}, {3}, {1}}, .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn_res,
         .fill = fill_bn, .ia = {1, 1, 0}},
        {.name = "bn_many_rows_train", .nx = 6, .ndim = {3, 1, 1, 1, 1, 1},
         .shape = {{3, 50, 17}, {17}, {17}, {17}, {17}, {1}}, .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn,
         .fill = fill_bn, .ia = {2, 1, 0}},
        {.name = "bn_nchw_eval", .nx = 6, .ndim = {4, 1, 1, 1, 1, 1}, .shape = {{2, 3, 4, 5}, {3}, {3}, {3}, {3}, {1}},
         .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn, .fill = fill_bn, .ia = {1, 1, 1}},
        {.name = "bn_nlc_eval", .nx = 6, .ndim = {3, 1, 1, 1, 1, 1}, .shape = {{2, 5, 4}, {4}, {4}, {4}, {4}, {1}},
         .nograd = {0, 0, 0, 1, 1, 1}, .build = b_bn, .fill = fill_bn, .ia = {2, 1, 1}},
        {.name = "bn_noaffine_eval_b1", .nx = 6, .ndim = {3, 1, 1, 1, 1, 1}, .shape = {{1, 3, 1}, {3}, {3}, {3}, {3}, {1}},
         .nograd = {0, 1, 1, 1, 1, 1}, .build = b_bn, .fill = fill_bn, .ia = {1, 0, 1}},
        {.name = "bn_nostats_eval", .nx = 3, .ndim = {4, 1, 1}, .shape = {{2, 4, 3, 2}, {4}, {4}}, .build = b_bn_nostats,
         .fill = fill_bn, .ia = {1}},
        /* activations */
        {.name = "gelu", .nx = 1, .ndim = {3}, .shape = {{2, 3, 7}}, .build = b_gelu, .fill = fill_wide},
        {.name = "relu", .nx = 1, .ndim = {2}, .shape = {{5, 9}}, .build = b_relu, .fill = fill_nokink},
        {.name = "relu6", .nx = 1, .ndim = {2}, .shape = {{5, 9}}, .build = b_unary, .fill = fill_nokink,
         .ia = {VT_RELU6}},
        {.name = "hardswish", .nx = 1, .ndim = {2}, .shape = {{7, 11}}, .build = b_unary, .fill = fill_nokink,
         .ia = {VT_HARDSWISH}},
        {.name = "softplus", .nx = 1, .ndim = {1}, .shape = {{60}}, .build = b_unary, .fill = fill_softplus,
         .ia = {VT_SOFTPLUS}},
        {.name = "sigmoid", .nx = 1, .ndim = {2}, .shape = {{4, 9}}, .build = b_unary, .fill = fill_wide,
         .ia = {VT_SIGMOID}},
        {.name = "pow3_pos", .nx = 1, .ndim = {2}, .shape = {{3, 5}}, .build = b_unary, .fill = fill_pos,
         .ia = {VT_POW}, .fa = {3.0f}},
        {.name = "pow3_any", .nx = 1, .ndim = {2}, .shape = {{3, 5}}, .build = b_unary, .ia = {VT_POW}, .fa = {3.0f}},
        {.name = "pow2_any", .nx = 1, .ndim = {1}, .shape = {{13}}, .build = b_unary, .ia = {VT_POW}, .fa = {2.0f}},
        {.name = "pow_half_pos", .nx = 1, .ndim = {1}, .shape = {{13}}, .build = b_unary, .fill = fill_pos,
         .ia = {VT_POW}, .fa = {0.5f}},
        {.name = "pow_m1.5_pos", .nx = 1, .ndim = {1}, .shape = {{13}}, .build = b_unary, .fill = fill_pos,
         .ia = {VT_POW}, .fa = {-1.5f}},
        /* softmax */
        {.name = "softmax_last", .nx = 1, .ndim = {2}, .shape = {{4, 7}}, .build = b_softmax, .ia = {-1}},
        {.name = "softmax_1row", .nx = 1, .ndim = {2}, .shape = {{1, 5}}, .build = b_softmax, .ia = {1}},
        {.name = "softmax_single", .nx = 1, .ndim = {2}, .shape = {{3, 1}}, .build = b_softmax, .ia = {-1}},
        {.name = "softmax3_ax0", .nx = 1, .ndim = {3}, .shape = {{3, 4, 5}}, .build = b_softmax_sq, .ia = {0}},
        {.name = "softmax3_ax1", .nx = 1, .ndim = {3}, .shape = {{3, 4, 5}}, .build = b_softmax_sq, .ia = {1}},
        {.name = "softmax3_ax2", .nx = 1, .ndim = {3}, .shape = {{3, 4, 5}}, .build = b_softmax_sq, .ia = {2}},
        {.name = "softmax4_ax1", .nx = 1, .ndim = {4}, .shape = {{2, 3, 4, 19}}, .build = b_softmax, .ia = {1}},
        {.name = "softmax4_axm2", .nx = 1, .ndim = {4}, .shape = {{2, 3, 4, 5}}, .build = b_softmax_sq, .ia = {-2}},
        {.name = "softmax4_last_sq", .nx = 1, .ndim = {4}, .shape = {{2, 2, 3, 9}}, .build = b_softmax_sq,
         .ia = {3}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gc_run(T, &cases[i]);
    check_bn_act(T);
}
