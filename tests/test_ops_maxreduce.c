/* vt_max (maxreduce.c): values and arg-max routing on a small case, gradient checks over every axis with distinct
 * values (spaced wider than the finite-difference step, so the arg-max never flips), and the axis error. */
#include <math.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/ops.h"

static vt_tensor *b_max(vt_graph *g, vt_tensor **x, const gc_case *c) { return vt_max(g, x[0], c->ia[0]); }

/* Distinct values k·0.05 - n·0.025 in a scrambled order (k = (37·i + 11) mod n, n prime to 37). */
static void fill_distinct(float *d, int64_t n, int which, vt_rng *r) {
    (void)which;
    (void)r;
    for (int64_t i = 0; i < n; i++) d[i] = (float)((37 * i + 11) % n) * 0.05f - (float)n * 0.025f;
}

static const gc_case max_cases[] = {
    {.name = "max_tokens", .nx = 1, .ndim = {3}, .shape = {{2, 5, 3}}, .build = b_max, .ia = {1}, .fill = fill_distinct},
    {.name = "max_axis0", .nx = 1, .ndim = {2}, .shape = {{4, 3}}, .build = b_max, .ia = {0}, .fill = fill_distinct},
    {.name = "max_last", .nx = 1, .ndim = {3}, .shape = {{2, 3, 7}}, .build = b_max, .ia = {-1}, .fill = fill_distinct},
    {.name = "max_N1", .nx = 1, .ndim = {3}, .shape = {{3, 1, 2}}, .build = b_max, .ia = {1}, .fill = fill_distinct},
    {.name = "max_1d", .nx = 1, .ndim = {1}, .shape = {{6}}, .build = b_max, .ia = {0}, .fill = fill_distinct},
};

/* x (2, 3, 2) max over axis 1; the gradient of sum(y·r) lands on the first arg-max only (ties included). */
static void check_values(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[3] = {2, 3, 2};
    vt_tensor *x = vt_param(g, "x", 3, xs, (vt_init){VT_INIT_ZERO, 0});
    vt_tensor *y = vt_max(g, x, 1);
    vt_graph_set_loss(g, vt_sum(g, y));
    vt_graph_output(g, y);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "build: %s", e.msg);
    if (!e.msg[0]) {
        const float xv[12] = {1, -5, 3, -2, 2, -7, /* b0: col0 max 3 (a=1), col1 max -2 (a=1) */
                              4, 0, 4, 1, -1, 1}; /* b1: ties: col0 4 at a=0,1; col1 1 at a=1,2 */
        memcpy(x->data, xv, sizeof xv);
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        const float want[4] = {3, -2, 4, 1}, wg[12] = {0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0};
        T_CHECK(T, y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 2, "shape (%d, %d)", y->shape[0], y->shape[1]);
        T_CHECK(T, memcmp(y->data, want, sizeof want) == 0, "values %g %g %g %g", y->data[0], y->data[1], y->data[2],
                y->data[3]);
        T_CHECK(T, memcmp(x->grad, wg, sizeof wg) == 0, "gradient routing to the first arg-max");
    }
    vt_graph_free(g);
    vt_params_free(P);
    /* axis out of range: a build error naming the op */
    P = vt_params_new(&e);
    g = vt_graph_new(P, 0, &e);
    vt_tensor *a = vt_input(g, "a", 3, xs);
    T_CHECK(T, vt_max(g, a, 3) == NULL && strstr(g->err.msg, "max") && strstr(g->err.msg, "(2, 3, 2)"),
            "axis error: '%s'", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

void test_ops_maxreduce(vt_test *T) {
    check_values(T);
    for (size_t i = 0; i < sizeof max_cases / sizeof max_cases[0]; i++) gc_run(T, &max_cases[i]);
}
