/* The fused inference DLA (vt_dla_eval, src/ops/dla.c) against the op chain it replaces (the same block built with
 * vt_graph.ref_kernels), on random weights and BatchNorm statistics: one tile and several (halo rows between tiles),
 * one-row tiles, planes one or two keys wide, with and without the adapt BatchNorm and scale; then its errors.
 * The PyTorch comparison of whole Refined-ViT models (eval graphs: this op) is tests/reference/test_refiner.py. */
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
}
