/* The fused inference DLA (vt_dla_eval, src/ops/dla.c) against the op chain it replaces (the same block built with
 * vt_graph.ref_kernels), on random weights and BatchNorm statistics: one tile and several (halo rows between tiles),
 * one-row tiles, planes one or two keys wide, with and without the adapt BatchNorm and scale; then its errors.
 * The PyTorch comparison of whole Refined-ViT models (eval graphs: this op) is tests/reference/test_refiner.py. */
#include <math.h>
#include <stdlib.h>
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

/* Eval forward of vt_block_dla on fixed random maps and parameters; *fused: the graph has a "dla" node. Returns the
 * output (malloc'd) or NULL. */
static float *run_dla(vt_test *T, const dla_case *c, int ref, int *fused, int64_t *numel) {
    vt_err e = {{0}};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    g->ref_kernels = ref;
    const int xs[4] = {c->B, c->H, c->Nr, c->Nc};
    vt_tensor *x = vt_input(g, "x", 4, xs);
    vt_tensor *y = vt_block_dla(g, "dla", x, c->expand, c->adapt ? "adapt" : NULL, c->scale);
    float *out = NULL;
    if (y) vt_graph_output(g, y);
    if (!y || vt_graph_finalize(g, &e)) {
        T_CHECK(T, 0, "%s: build failed: %s", c->name, e.msg);
    } else {
        vt_params_init(P, 5);
        gc_shake_norms(P, 11, 0.3f); /* BatchNorm statistics and affines away from the identity */
        vt_rng r;
        vt_rng_seed(&r, 11);
        for (int64_t j = 0; j < x->numel; j++) x->data[j] = vt_rng_normal(&r);
        vt_graph_forward(g);
        *fused = 0;
        for (int i = 0; i < g->nn; i++) *fused |= !strcmp(g->nodes[i]->op->name, "dla");
        *numel = y->numel;
        out = malloc(sizeof(float) * (size_t)y->numel);
        if (out) memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
    }
    vt_graph_free(g);
    vt_params_free(P);
    return out;
}

static void check_equal(vt_test *T, const dla_case *c) {
    int fk = 0, fr = 1;
    int64_t nk = 0, nr = 0;
    float *k = run_dla(T, c, 0, &fk, &nk), *r = run_dla(T, c, 1, &fr, &nr);
    T_CHECK(T, fk && !fr, "%s: fused op taken %d (expected 1), by the reference graph %d (expected 0)", c->name, fk,
            fr);
    if (k && r && nk == nr) {
        double err = 0, mx = 0;
        for (int64_t i = 0; i < nk; i++) err = fmax(err, fabs(k[i] - r[i])), mx = fmax(mx, fabs(r[i]));
        T_CHECK(T, err <= 1e-5 * fmax(1.0, mx) && mx > 0, "%s: fused vs op chain max |diff| %g (scale %g)", c->name,
                err, mx);
    }
    free(k);
    free(r);
}

static void check_errors(vt_test *T) {
    vt_err e = {{0}};
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
