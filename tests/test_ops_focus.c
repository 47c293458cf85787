/* vt_focus_pow (focus.c, FLatten's focusing function): values against a double-precision formula, gradient checks
 * (p = 3, 2, 1.5; odd row lengths; C = 1; the ReLU/+1e-6/scale chain), the fused vt_focus (with and without pe)
 * against finite differences and against the chain of single ops, vt_focus_ex on a channel range of a wider
 * input, the whole FLatten module on 3×3 and 2×2 grids with a class token (input gradient), rows whose norms
 * underflow or overflow float, and the shape error. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/ops/focus.h"
#include "gradcheck.h"
#include "vitc/blocks.h"
#include "vitc/ops.h"

static vt_tensor *b_focus(vt_graph *g, vt_tensor **x, const gc_case *c) { return vt_focus_pow(g, x[0], c->fa[0]); }

/* The unfused FLatten chain: focus_pow((ReLU(x0 + x2) + 1e-6) / softplus(x1)) from single ops (reference). */
static vt_tensor *chain(vt_graph *g, vt_tensor *x, vt_tensor *pe, vt_tensor *scale, float p) {
    vt_tensor *inv_s = vt_unary(g, vt_unary(g, scale, VT_SOFTPLUS, 0.0f), VT_POW, -1.0f);
    vt_tensor *v = pe ? vt_add(g, x, pe) : x;
    return vt_focus_pow(g, vt_mul(g, vt_affine(g, vt_relu(g, v), 1.0f, 1e-6f), inv_s), p);
}
static vt_tensor *b_focus_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return chain(g, x[0], c->ia[2] ? x[2] : NULL, x[1], c->fa[0]);
}
/* The fused op: x0 input, x1 scale, x2 positional encoding when ia[2]. */
static vt_tensor *b_focus_fused(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_focus(g, x[0], c->ia[2] ? x[2] : NULL, x[1], c->fa[0]);
}

/* vt_focus_ex on channels [ia[3], ia[3] + ia[4]) of the wider x0 (the rest gets no gradient), with x1 scale and
 * x2 pe when ia[2]. */
static vt_tensor *b_focus_ex(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_focus_ex(g, x[0], c->ia[3], c->ia[4], c->ia[2] ? x[2] : NULL, x[1], c->fa[0]);
}

/* Positive values in [0.2, 2.2]. */
static void fill_pos(float *d, int64_t n, int which, vt_rng *r) {
    (void)which;
    for (int64_t i = 0; i < n; i++) d[i] = 0.2f + 2.0f * vt_rng_uniform(r);
}

/* Operand 0: N(0, 1) kept 0.05 away from the ReLU kink (x + pe too, as pe is filled with ±0.01 steps of 0);
 * operand 1 (scale): N(0, 1); operand 2 (pe): 0. */
static void fill_chain(float *d, int64_t n, int which, vt_rng *r) {
    for (int64_t i = 0; i < n; i++) {
        if (which >= 1) {
            d[i] = which == 1 ? vt_rng_normal(r) : 0.0f;
            continue;
        }
        float v;
        do v = vt_rng_normal(r);
        while (fabsf(v) < 0.05f);
        d[i] = v;
    }
}

/* The whole FLatten module (PVT-style q/kv: 1 class token + ia[0]×ia[0] grid, 3 heads, kernel ia[1]) on x0;
 * its own parameters get N(0, 0.3) values (so ReLU, DWC and the positional encoding are all active). */
static vt_tensor *b_flatten_block(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const vt_block_opts o = {.focusing = 3.0f, .kernel = c->ia[1]};
    const vt_attn_ctx a = {.heads = 3, .qkv_bias = 1, .grid_h = c->ia[0], .grid_w = c->ia[0], .lead = 1,
                           .layout = VT_LAYOUT_PVT, .winit = VT_INIT_W02, .opts = &o};
    vt_tensor *y = vt_block_flatten(g, "a", x[0], &a);
    vt_rng r;
    vt_rng_seed(&r, 77);
    for (int i = 0; i < g->P->n; i++) {
        vt_tensor *t = g->P->t[i];
        if (strcmp(t->name, "x0") && t->data) /* not the operand (x[0] may be an identity activation of it) */
            for (int64_t j = 0; j < t->numel; j++) t->data[j] = 0.3f * vt_rng_normal(&r);
    }
    return y;
}

static const gc_case focus_cases[] = {
    {.name = "focus_p3", .nx = 1, .ndim = {3}, .shape = {{2, 5, 7}}, .build = b_focus, .fa = {3.0f}, .fill = fill_pos},
    {.name = "focus_p2", .nx = 1, .ndim = {2}, .shape = {{4, 6}}, .build = b_focus, .fa = {2.0f}, .fill = fill_pos},
    {.name = "focus_p1.5", .nx = 1, .ndim = {2}, .shape = {{3, 5}}, .build = b_focus, .fa = {1.5f}, .fill = fill_pos},
    {.name = "focus_C1", .nx = 1, .ndim = {2}, .shape = {{5, 1}}, .build = b_focus, .fa = {3.0f}, .fill = fill_pos},
    {.name = "focus_chain_p3", .nx = 2, .ndim = {3, 3}, .shape = {{2, 4, 8}, {1, 1, 8}}, .build = b_focus_chain,
     .fa = {3.0f}, .fill = fill_chain, .eps = 1e-3},
    {.name = "focus_fused_q", .nx = 2, .ndim = {3, 3}, .shape = {{2, 4, 8}, {1, 1, 8}}, .build = b_focus_fused,
     .fa = {3.0f}, .fill = fill_chain, .eps = 1e-3},
    {.name = "focus_fused_k_pe", .nx = 3, .ndim = {3, 3, 3}, .shape = {{3, 5, 7}, {1, 1, 7}, {1, 5, 7}},
     .build = b_focus_fused, .ia = {0, 0, 1}, .fa = {3.0f}, .fill = fill_chain, .eps = 1e-3},
    {.name = "focus_fused_p2_pe", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 3, 6}, {1, 1, 6}, {1, 3, 6}},
     .build = b_focus_fused, .ia = {0, 0, 1}, .fa = {2.0f}, .fill = fill_chain, .eps = 1e-3},
    {.name = "focus_ex_k_pe", .nx = 3, .ndim = {3, 3, 3}, .shape = {{2, 5, 11}, {1, 1, 7}, {1, 5, 7}},
     .build = b_focus_ex, .ia = {0, 0, 1, 2, 7}, .fa = {3.0f}, .fill = fill_chain, .eps = 1e-3},
    {.name = "focus_ex_q", .nx = 2, .ndim = {3, 3}, .shape = {{2, 3, 12}, {1, 1, 4}}, .build = b_focus_ex,
     .ia = {0, 0, 0, 8, 4}, .fa = {3.0f}, .fill = fill_chain, .eps = 1e-3},
    {.name = "flatten_block_3x3_k3", .nx = 1, .ndim = {3}, .shape = {{2, 10, 12}}, .build = b_flatten_block,
     .ia = {3, 3}, .eps = 1e-3},
    {.name = "flatten_block_2x2_k5", .nx = 1, .ndim = {3}, .shape = {{1, 5, 12}}, .build = b_flatten_block,
     .ia = {2, 5}, .eps = 1e-3},
};

/* Values on (2, 4) against y = x^p·‖x‖/‖x^p‖ in double; row 1 mixes 1e-6-sized entries with O(1) ones. */
static void check_values(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int xs[2] = {2, 4};
    vt_tensor *x = vt_input(g, "x", 2, xs);
    vt_tensor *y = vt_focus_pow(g, x, 3.0f);
    vt_graph_output(g, y);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "build: %s", e.msg);
    if (!e.msg[0]) {
        const float xv[8] = {0.5f, 1.0f, 2.0f, 0.25f, 1.44e-6f, 3.0f, 1.44e-6f, 0.7f};
        memcpy(x->data, xv, sizeof xv);
        vt_graph_forward(g);
        double err = 0.0;
        for (int r = 0; r < 2; r++) {
            double u2 = 0, a2 = 0;
            for (int c = 0; c < 4; c++) {
                const double v = xv[r * 4 + c];
                u2 += v * v;
                a2 += v * v * v * v * v * v;
            }
            for (int c = 0; c < 4; c++) {
                const double v = xv[r * 4 + c], want = v * v * v * sqrt(u2 / a2);
                err = t_worse(err, fabs(y->data[r * 4 + c] - want) / fmax(1e-30, fabs(want)));
            }
        }
        T_CHECK(T, err < 1e-6, "focus_pow relative value error %g", err);
        double n0 = 0, n1 = 0;
        for (int c = 0; c < 4; c++) n0 += (double)xv[c] * xv[c], n1 += (double)y->data[c] * y->data[c];
        T_CHECK(T, fabs(sqrt(n1) - sqrt(n0)) < 1e-6 * sqrt(n0), "row norm kept: %g vs %g", sqrt(n1), sqrt(n0));
    }
    vt_graph_free(g);
    vt_params_free(P);
    P = vt_params_new(&e);
    g = vt_graph_new(P, 0, &e);
    vt_tensor *a = vt_input(g, "a", 2, xs);
    T_CHECK(T, vt_focus_pow(g, a, 0.0f) == NULL && strstr(g->err.msg, "focus") && strstr(g->err.msg, "(2, 4)"),
            "p error: '%s'", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

/* Rows whose norms underflow or overflow float (Σ u^6 of a row of 1e-8-sized values flushes to 0; of 1e13-sized ones
 * passes FLT_MAX): rows b, b·3e-8 and b·1e13 must give s·φ(b) (against the formula in double) and, φ's Jacobian
 * being of degree 0, the same input gradient for the same output gradient. */
static void check_rescaled_rows(vt_test *T) {
    const double b[5] = {0.5, 1.0, 2.0, 0.25, 0.7}, sc[3] = {1.0, 3e-8, 1e13}, r[5] = {0.3, -1.1, 0.8, 2.0, -0.4};
    const int xs[2] = {3, 5};
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    vt_tensor *x = vt_param(g, "x", 2, xs, (vt_init){VT_INIT_ZERO, 0});
    vt_tensor *y = vt_focus_pow(g, x, 3.0f);
    vt_tensor *rt = vt_input(g, "r", 2, xs);
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, rt)));
    vt_graph_output(g, y);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "build: %s", e.msg);
    if (!e.msg[0]) {
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < 5; c++) x->data[i * 5 + c] = (float)(b[c] * sc[i]), rt->data[i * 5 + c] = (float)r[c];
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        double u2 = 0, a2 = 0, err = 0, gerr = 0, gmax = 0;
        for (int c = 0; c < 5; c++) u2 += b[c] * b[c], a2 += pow(b[c], 6);
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < 5; c++) {
                const double want = sc[i] * pow(b[c], 3) * sqrt(u2 / a2);
                err = t_worse(err, fabs(y->data[i * 5 + c] - want) / want);
                gerr = t_worse(gerr, fabs((double)x->grad[i * 5 + c] - x->grad[c]));
                gmax = fmax(gmax, fabs(x->grad[c]));
            }
        T_CHECK(T, err < 1e-6, "rows scaled by 3e-8 and 1e13: relative value error %g", err);
        T_CHECK(T, gmax > 0 && gerr <= 1e-5 * gmax, "rows scaled by 3e-8 and 1e13: input gradient differs by %g (of %g)",
                gerr, gmax);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* A training graph of loss sum(y·r), y the focus (fused: the op, else the chain of single ops, p 3) of parameter x
 * (xs) with parameters scale (ss) and pe (ps; NULL: none) and input r; finalized, its x and r filled with standard
 * normal values from seed. 0 on success. */
typedef struct {
    vt_graph *g;
    vt_tensor *x, *sc, *pe, *y, *r;
} focus_graph;
static int focus_graph_build(vt_test *T, focus_graph *f, vt_params *P, const int *xs, const int *ss, const int *ps,
                             int fused, uint64_t seed) {
    vt_err e = {0};
    f->g = vt_graph_new(P, 1, &e);
    f->x = vt_param(f->g, "x", 3, xs, (vt_init){VT_INIT_ZERO, 0});
    f->sc = vt_param(f->g, "scale", 3, ss, (vt_init){VT_INIT_ZERO, 0});
    f->pe = ps ? vt_param(f->g, "pe", 3, ps, (vt_init){VT_INIT_ZERO, 0}) : NULL;
    f->y = fused ? vt_focus(f->g, f->x, f->pe, f->sc, 3.0f) : chain(f->g, f->x, f->pe, f->sc, 3.0f);
    f->r = vt_input(f->g, "r", 3, xs);
    vt_graph_set_loss(f->g, vt_sum(f->g, vt_mul(f->g, f->y, f->r)));
    vt_graph_output(f->g, f->y);
    T_CHECK(T, vt_graph_finalize(f->g, &e) == 0, "build: %s", e.msg);
    if (e.msg[0]) return -1;
    vt_rng rng;
    vt_rng_seed(&rng, seed);
    for (int64_t i = 0; i < f->x->numel; i++) f->x->data[i] = vt_rng_normal(&rng), f->r->data[i] = vt_rng_normal(&rng);
    return 0;
}

/* The fused op equals the chain of single ops: output and the gradients of x, scale and pe (sum(y·r) loss). */
static void check_fused_vs_chain(vt_test *T) {
    const int xs[3] = {2, 6, 9}, ss[3] = {1, 1, 9}, ps[3] = {1, 6, 9};
    float *res[2][4] = {{0}};
    for (int fused = 0; fused < 2; fused++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        focus_graph f = {0};
        if (focus_graph_build(T, &f, P, xs, ss, ps, fused, 5) == 0) {
            vt_graph *g = f.g;
            vt_tensor *y = f.y, *x = f.x, *sc = f.sc, *pe = f.pe;
            vt_rng rng;
            vt_rng_seed(&rng, 6);
            for (int i = 0; i < 9; i++) sc->data[i] = 2.0f * vt_rng_normal(&rng);
            sc->data[0] = 25.0f; /* softplus above its threshold */
            for (int64_t i = 0; i < pe->numel; i++) pe->data[i] = 0.5f * vt_rng_normal(&rng);
            vt_graph_forward(g);
            vt_params_zero_grad(P);
            vt_graph_backward(g);
            const vt_tensor *ts[4] = {y, x, sc, pe};
            for (int k = 0; k < 4; k++) {
                const float *src = k ? ts[k]->grad : ts[k]->data;
                res[fused][k] = malloc(sizeof(float) * (size_t)ts[k]->numel);
                if (res[fused][k]) memcpy(res[fused][k], src, sizeof(float) * (size_t)ts[k]->numel);
            }
        }
        vt_graph_free(f.g);
        vt_params_free(P);
    }
    const char *what[4] = {"output", "dx", "dscale", "dpe"};
    const int64_t nn[4] = {2 * 6 * 9, 2 * 6 * 9, 9, 6 * 9};
    for (int k = 0; k < 4; k++) {
        if (!res[0][k] || !res[1][k]) continue;
        double err = 0.0, mx = 0.0;
        for (int64_t i = 0; i < nn[k]; i++) {
            err = t_worse(err, fabs((double)res[0][k][i] - res[1][k][i]));
            mx = fmax(mx, fabs(res[0][k][i]));
        }
        T_CHECK(T, err <= 1e-5 * fmax(mx, 1e-3), "fused vs chain %s: max diff %g (scale %g)", what[k], err, mx);
        free(res[0][k]);
        free(res[1][k]);
    }
}

/* The scale gradient over many rows (16 × 3136 tokens, as a FLatten-PVT stage-1 batch) equals the sum in double of
 * each row's own contribution (vt_focus_row_bwd on one row at a time): channels whose terms nearly cancel (dy of
 * random sign: the sums keep 5e-4 of their terms' size) within 1e-6 of their value (summed over a thread's rows in
 * floats they were 2e-5 off here, 1e-3 in a 64-channel case). */
static void check_dscale_sum(vt_test *T) {
    enum { B = 16, TK = 3136, C = 8 };
    const int xs[3] = {B, TK, C}, ss[3] = {1, 1, C};
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    focus_graph fg = {0};
    if (focus_graph_build(T, &fg, P, xs, ss, NULL, 1, 17) == 0) {
        vt_graph *g = fg.g;
        vt_tensor *x = fg.x, *sc = fg.sc, *r = fg.r;
        vt_rng rng;
        vt_rng_seed(&rng, 18);
        for (int c = 0; c < C; c++) sc->data[c] = 0.5f * vt_rng_normal(&rng);
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        float is[C], sig[C], one[C];
        vt_focus_consts(sc->data, C, is, sig);
        const vt_focus_k f = {C, 3.0f, is, sig};
        double want[C] = {0}, mag[C] = {0};
        for (int64_t row = 0; row < (int64_t)B * TK; row++) {
            memset(one, 0, sizeof one);
            vt_focus_row_bwd(&f, x->data + row * C, NULL, NULL, NULL, r->data + row * C, NULL, NULL, one);
            for (int c = 0; c < C; c++) want[c] += one[c], mag[c] += fabs(one[c]);
        }
        double err = 0.0, cancel = 1.0;
        for (int c = 0; c < C; c++) {
            err = t_worse(err, fabs(sc->grad[c] - want[c]) / fabs(want[c]));
            cancel = fmin(cancel, fabs(want[c]) / mag[c]);
        }
        T_CHECK(T, err < 1e-6, "dscale over %d rows: relative error %g (the sums keep %g of their terms' size)",
                B * TK, err, cancel);
    }
    vt_graph_free(fg.g);
    vt_params_free(P);
}

void test_ops_focus(vt_test *T) {
    check_values(T);
    check_dscale_sum(T);
    check_rescaled_rows(T);
    check_fused_vs_chain(T);
    for (size_t i = 0; i < sizeof focus_cases / sizeof focus_cases[0]; i++) gc_run(T, &focus_cases[i]);
}
