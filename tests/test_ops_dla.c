/* The fused inference DLA (vt_dla_eval, src/ops/dla.c) against the op chain it replaces (the same block built with
 * vt_graph.ref_kernels), on random weights and BatchNorm statistics: one tile and several (halo rows between tiles),
 * one-row tiles, planes one or two keys wide, with and without the adapt BatchNorm and scale; then its errors; then
 * the training DLA (vt_bnact_dwconv, vt_bnact_pwconv, vt_bn_res_bn) against the chain.
 * The PyTorch comparison of whole Refined-ViT models (eval graphs: this op) is tests/reference/test_refiner.py. */
#include <math.h>
#include <string.h>

#include "gradcheck.h"
#include "test.h"
#include "vitc/blocks.h"
#include "vitc/ops.h"

typedef struct {
    const char *name;
    int B, H, Nr, Nc;
    float expand;
    int adapt;
    float scale;
} dla_case;

static vt_tensor *b_dla(vt_graph *g, vt_tensor *x, const void *ctx) {
    const dla_case *c = ctx;
    return vt_block_dla(g, "dla", x, c->expand, c->adapt ? "adapt" : NULL, c->scale);
}

static void check_equal(vt_test *T, const dla_case *c) {
    const int xs[4] = {c->B, c->H, c->Nr, c->Nc};
    gc_compare_eval_fused(T, c->name, 4, xs, b_dla, c, "dla", 1e-5);
}

static void check_errors(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    for (int train = 0; train < 2; train++) {
        vt_graph *g = vt_graph_new(P, train, &e);
        const int xs[4] = {1, 2, 4, 4}, we[4] = {6, 2, 1, 1}, wd[4] = {6, 1, 3, 3}, wp[4] = {2, 6, 1, 1};
        const int s6[2] = {2, 6}, s2[2] = {2, 2}, bad[4] = {6, 1, 5, 5};
        vt_tensor *x = vt_input(g, "x", 4, xs), *a = vt_input(g, "we", 4, we), *d = vt_input(g, "wd", 4, wd);
        vt_tensor *p = vt_input(g, "wp", 4, wp), *b1 = vt_input(g, "b1", 2, s6), *b3 = vt_input(g, "b3", 2, s2);
        vt_tensor *y = vt_dla_eval(g, x, a, train ? d : vt_input(g, "bad", 4, bad), p, b1, b1, b3, NULL);
        T_CHECK(T, !y && strstr(g->err.msg, train ? "no backward" : "(He, 1, 3, 3)"), "train=%d: %s", train,
                g->err.msg);
        vt_graph_free(g);
    }
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int xs[4] = {1, 2, 4, 4};
    vt_tensor *y = vt_block_dla(g, "d", vt_input(g, "x", 4, xs), 3.0f, NULL, 0.5f);
    T_CHECK(T, !y && strstr(g->err.msg, "scale without"), "scale without adapt: %s", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

/* The DLA in a training graph, fused ops (ref 0) or the chain (1), on input x (a parameter, through an identity node
 * so its gradient is added to), one forward and backward of Σ y·r; P initialised, then gc_shake_norms. */
static vt_graph *dla_train(const int *xs, int ref, vt_params **P, vt_tensor **x, vt_tensor **y) {
    vt_err e = {0};
    *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(*P, 1, &e);
    g->ref_kernels = ref;
    *x = vt_param(g, "xin", 4, xs, VT_INIT_Z);
    *y = vt_block_dla(g, "dla", vt_affine(g, *x, 1.0f, 0.0f), 3.0f, "adapt", 0.3f);
    vt_tensor *r = *y ? vt_input(g, "r", 4, xs) : NULL;
    if (r) {
        vt_graph_set_loss(g, vt_sum(g, vt_mul(g, *y, r)));
        vt_graph_output(g, *y);
    }
    if (!r || vt_graph_finalize(g, &e)) {
        vt_graph_free(g);
        return NULL;
    }
    vt_params_init(*P, 7);
    gc_shake_norms(*P, 5, 0.4f);
    vt_rng rng;
    vt_rng_seed(&rng, 3);
    for (int64_t i = 0; i < (*x)->numel; i++) (*x)->data[i] = vt_rng_normal(&rng);
    for (int64_t i = 0; i < r->numel; i++) r->data[i] = vt_rng_normal(&rng);
    vt_graph_forward(g);
    vt_params_zero_grad(*P);
    vt_graph_backward(g);
    return g;
}

/* The training DLA's fused ops against the chain: output, every tensor's gradient, every running statistic. */
static void check_train(vt_test *T) {
    static const int shapes[3][4] = {{2, 3, 9, 9}, {1, 2, 40, 40}, {3, 4, 13, 11}};
    for (int s = 0; s < 3; s++) {
        vt_params *P[2];
        vt_tensor *x[2], *y[2];
        vt_graph *g[2] = {dla_train(shapes[s], 0, &P[0], &x[0], &y[0]), dla_train(shapes[s], 1, &P[1], &x[1], &y[1])};
        T_CHECK(T, g[0] && g[1], "training DLA %d: built", s);
        if (!g[0] || !g[1]) continue;
        int fused = 0;
        for (int i = 0; i < g[0]->nn; i++) fused += !strcmp(g[0]->nodes[i]->op->name, "bn_res_bn");
        T_CHECK(T, fused == 1, "training DLA %d: one bn_res_bn node (%d)", s, fused);
        double ey = gc_rel_diff(y[0]->data, y[1]->data, y[0]->numel, 1.0), eg = 0.0, es = 0.0;
        int same = 1;
        for (int k = 0; k < P[1]->n; k++) {
            const vt_tensor *b = P[1]->t[k], *a = vt_params_find(P[0], b->name);
            if (!a || !a->grad != !b->grad) {
                same = 0;
                continue;
            }
            if (b->grad) eg = fmax(eg, gc_rel_diff(a->grad, b->grad, b->numel, 1.0));
            else if (!b->is_i64) es = fmax(es, gc_rel_diff(a->data, b->data, b->numel, 1.0));
        }
        T_CHECK(T, same && ey < 1e-5 && eg < 2e-5 && es < 1e-5,
                "training DLA %d vs the chain: output %g, gradients %g, running statistics %g", s, ey, eg, es);
        for (int k = 0; k < 2; k++) {
            vt_graph_free(g[k]);
            vt_params_free(P[k]);
        }
    }
}

/* The DLA's expanded channels: Python's round(expand · H), half to even (the official code's): 1.9 · 3 = 5.7 gives 6
 * (not 5, truncated), 1.5 · 3 = 4.5 gives 4, 2.5 · 3 = 7.5 gives 8. */
static void check_expand_rounding(vt_test *T) {
    static const float expand[3] = {1.9f, 1.5f, 2.5f};
    static const int want[3] = {6, 4, 8};
    for (int i = 0; i < 3; i++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        const int xs[4] = {1, 3, 4, 4};
        vt_tensor *y = vt_block_dla(g, "dla", vt_input(g, "a", 4, xs), expand[i], NULL, 1.0f);
        const vt_tensor *w = vt_params_find(P, "dla.conv_exp.weight");
        T_CHECK(T, y && w && w->shape[0] == want[i], "expand %g of 3 heads: %d channels, want %d (%s)",
                (double)expand[i], w ? w->shape[0] : -1, want[i], g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

void test_ops_dla(vt_test *T) {
    static const dla_case cases[] = {
        {"one_tile", 2, 3, 5, 5, 3.0f, 1, 0.5f},
        {"four_tiles", 1, 4, 200, 200, 3.0f, 1, 0.125f}, /* 12 × 200 floats per row: 53-row tiles (TILE_FLOATS) */
        {"one_row_tiles", 1, 16, 5, 1100, 4.0f, 0, 1.0f}, /* 64 × 1100 floats per row: one row per tile */
        {"one_key", 2, 2, 4, 1, 3.0f, 1, 1.0f},
        {"two_keys_one_query", 3, 2, 1, 2, 2.0f, 1, 0.7f},
        {"refiner_s_shape", 1, 12, 197, 197, 3.0f, 1, 0.17677669f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_equal(T, &cases[i]);
    check_errors(T);
    check_train(T);
    check_expand_rounding(T);
}
