/* MSF ops and block: group_linear (interleave/block, with and without its bias) gradients, values against the
 * dense expansion of spec-msf §3 and the fused bias against group_linear then add, the sin-cos position embedding's spot values (spec §4.2), attention-name parsing, and finite-difference
 * gradients of the whole MSF / baseline attention module (all parameters and the input). */
#include <math.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/blocks.h"
#include "vitc/ops.h"

static vt_tensor *b_glinear(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_group_linear(g, x[0], x[1], c->nx > 2 ? x[2] : NULL, c->ia[0], c->ia[1]);
}

/* The bias added after the grouped product as a separate op (what the fused bias replaces). */
static vt_tensor *b_glinear_add(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_add(g, vt_group_linear(g, x[0], x[1], NULL, c->ia[0], c->ia[1]), x[2]);
}

/* group_linear equals vt_linear with the dense matrix Wd built from the index mapping of spec §3. */
static void check_dense(vt_test *T, int R, int Din, int E, int G, int il) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    int xs[2] = {R, Din}, ws[2] = {E, Din / G}, ds[2] = {E, Din};
    vt_tensor *x = vt_input(g, "x", 2, xs), *w = vt_input(g, "w", 2, ws), *wd = vt_input(g, "wd", 2, ds);
    vt_tensor *y1 = vt_group_linear(g, x, w, NULL, G, il), *y2 = vt_linear(g, x, wd, NULL);
    vt_graph_output(g, y1);
    vt_graph_output(g, y2);
    if (vt_graph_finalize(g, &e)) {
        T_CHECK(T, 0, "group_linear dense check: %s", e.msg);
    } else {
        vt_rng r;
        vt_rng_seed(&r, 11);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = vt_rng_normal(&r);
        for (int64_t i = 0; i < w->numel; i++) w->data[i] = vt_rng_normal(&r);
        memset(wd->data, 0, sizeof(float) * (size_t)wd->numel);
        const int Dg = Din / G, Eg = E / G;
        for (int gi = 0; gi < G; gi++)
            for (int o = 0; o < Eg; o++)
                for (int c = 0; c < Dg; c++) {
                    const int row = il ? o * G + gi : gi * Eg + o;
                    wd->data[(size_t)row * Din + gi * Dg + c] = w->data[(size_t)(gi * Eg + o) * Dg + c];
                }
        vt_graph_forward(g);
        double err = 0;
        for (int64_t i = 0; i < y1->numel; i++) err = t_worse(err, fabs(y1->data[i] - y2->data[i]));
        T_CHECK(T, err < 1e-4, "group_linear R%d Din%d E%d G%d il%d vs dense: %g", R, Din, E, G, il, err);
        int64_t want = (int64_t)R * E * Dg;
        T_CHECK(T, vt_graph_macs(g) == want + (int64_t)R * E * Din, "group_linear MACs %lld, want %lld",
                (long long)(vt_graph_macs(g) - (int64_t)R * E * Din), (long long)want);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

static void check_posemb(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    vt_tensor *pe = vt_posemb_sincos2d(g, 14, 14, 384, 10000.0f);
    vt_graph_output(g, pe);
    if (vt_graph_finalize(g, &e)) {
        T_CHECK(T, 0, "posemb: %s", e.msg);
    } else {
        vt_graph_forward(g);
        const float *d = pe->data;
        T_CHECK(T, fabsf(d[384 + 0] - 0.84147f) < 1e-5f, "PE[1,0] = %g, want sin(1)", d[384]);
        T_CHECK(T, fabsf(d[384 + 1] - 0.78803f) < 1e-5f, "PE[1,1] = %g, want 0.78803", d[385]);
        T_CHECK(T, d[14 * 384 + 96] == 1.0f, "PE[14,96] = %g, want 1", d[14 * 384 + 96]);
        T_CHECK(T, d[14 * 384 + 0] == 0.0f && d[14 * 384 + 192] != 0.0f, "token 14 is (row 1, col 0)");
    }
    vt_graph_free(g);
    vt_params_free(P);
    /* bad dim */
    P = vt_params_new(&e);
    g = vt_graph_new(P, 0, &e);
    T_CHECK(T, !vt_posemb_sincos2d(g, 2, 2, 6, 10000.0f) && strstr(g->err.msg, "posemb"), "dim 6 must fail");
    vt_graph_free(g);
    vt_params_free(P);
}

static void check_parse(vt_test *T) {
    vt_msf_cfg m;
    T_CHECK(T, vt_msf_parse("msf", &m) == 0 && m.probe == 1 && m.groups == 1, "msf");
    T_CHECK(T, vt_msf_parse("orig_g2", &m) == 0 && m.probe == 0 && m.groups == 2 && !m.block_grouping, "orig_g2");
    T_CHECK(T, vt_msf_parse("msf_g4_block", &m) == 0 && m.groups == 4 && m.block_grouping, "msf_g4_block");
    T_CHECK(T, vt_msf_parse("msf_g", &m) && vt_msf_parse("mhsa", &m) && vt_msf_parse("msf_g2x", &m) &&
                   vt_msf_parse("msf_block", &m) && vt_msf_parse("msf_g0", &m),
            "bad names must be rejected");
}

/* Finite differences over every parameter of the attention module (input x is a parameter too). */
static void check_block_grad(vt_test *T, const char *tag, vt_msf_cfg m, int B, int N, int C) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    int xs[3] = {B, N, C};
    vt_tensor *x = vt_param(g, "x", 3, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *y = vt_block_msf(g, "attn", x, &m);
    int ys[3] = {B, N, C};
    vt_tensor *r = vt_input(g, "r", 3, ys);
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    if (vt_graph_finalize(g, &e) || vt_params_alloc_grads(P, &e)) {
        T_CHECK(T, 0, "%s: build failed: %s", tag, e.msg);
        vt_graph_free(g);
        vt_params_free(P);
        return;
    }
    vt_params_init(P, 5);
    vt_rng rng;
    vt_rng_seed(&rng, 99);
    for (int i = 0; i < P->n; i++) /* non-trivial LayerNorm affine, larger weights so the softmax is not flat */
        for (int64_t j = 0; j < P->t[i]->numel; j++)
            P->t[i]->data[j] = P->t[i]->data[j] * 3.0f + (P->t[i]->ndim == 1 ? 0.3f * vt_rng_normal(&rng) : 0.0f);
    for (int64_t j = 0; j < r->numel; j++) r->data[j] = vt_rng_normal(&rng);
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        double anysum = 0;
        const double rel = gc_param_error(g, t, y, r->data, 48, 1e-2f, 0, &anysum);
        T_CHECK(T, rel < 2e-2, "%s: %s rel err %.3g", tag, t->name, rel);
        T_CHECK(T, anysum > 0, "%s: %s gradient is all zero", tag, t->name);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

void test_ops_msf(vt_test *T) {
    gc_case cases[] = {
        {.name = "group_linear_il2", .nx = 2, .ndim = {3, 2}, .shape = {{2, 3, 6}, {8, 3}}, .build = b_glinear,
         .ia = {2, 1}},
        {.name = "group_linear_block2", .nx = 2, .ndim = {3, 2}, .shape = {{2, 3, 6}, {8, 3}}, .build = b_glinear,
         .ia = {2, 0}},
        {.name = "group_linear_il3_1row", .nx = 2, .ndim = {2, 2}, .shape = {{1, 9}, {12, 3}}, .build = b_glinear,
         .ia = {3, 1}},
        {.name = "group_linear_g1", .nx = 2, .ndim = {2, 2}, .shape = {{3, 5}, {4, 5}}, .build = b_glinear,
         .ia = {1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gc_run(T, &cases[i]);
    const gc_case biased[] = { /* interleaved, block order (several row chunks per group), one group */
        {.name = "group_linear_il2_bias", .nx = 3, .ndim = {3, 2, 1}, .shape = {{2, 3, 6}, {8, 3}, {8}},
         .build = b_glinear, .ia = {2, 1}},
        {.name = "group_linear_block2_bias", .nx = 3, .ndim = {2, 2, 1}, .shape = {{300, 6}, {8, 3}, {8}},
         .build = b_glinear, .ia = {2, 0}},
        {.name = "group_linear_g1_bias", .nx = 3, .ndim = {2, 2, 1}, .shape = {{3, 5}, {4, 5}, {4}},
         .build = b_glinear, .ia = {1, 1}},
    };
    for (size_t i = 0; i < sizeof biased / sizeof biased[0]; i++)
        gc_run_vs_plain(T, &biased[i], b_glinear_add, "group_linear then add", 1e-5);
    check_dense(T, 5, 8, 12, 2, 1);
    check_dense(T, 5, 8, 12, 2, 0);
    check_dense(T, 3, 12, 36, 3, 1);
    check_dense(T, 4, 6, 10, 1, 1);
    /* the interleaved forward's row panels: 64-row panels with a partial last one, two half panels, one row */
    check_dense(T, 300, 48, 96, 2, 1);
    check_dense(T, 127, 36, 72, 3, 1);
    check_dense(T, 1, 36, 72, 3, 1);
    check_posemb(T);
    check_parse(T);
    /* shape errors */
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    int xs[2] = {2, 6}, ws[2] = {8, 4};
    T_CHECK(T, !vt_group_linear(g, vt_input(g, "x", 2, xs), vt_input(g, "w", 2, ws), NULL, 2, 1) &&
                   strstr(g->err.msg, "group_linear") && strstr(g->err.msg, "(8, 4)"),
            "bad group_linear weight must fail with the shapes: %s", g->err.msg);
    vt_graph_free(g);
    g = vt_graph_new(P, 0, &e);
    const int ws3[2] = {8, 3}, bs[1] = {6};
    T_CHECK(T, !vt_group_linear(g, vt_input(g, "x", 2, xs), vt_input(g, "w", 2, ws3), vt_input(g, "b", 1, bs), 2, 1) &&
                   strstr(g->err.msg, "group_linear") && strstr(g->err.msg, "bias (6)") && strstr(g->err.msg, "(8)"),
            "a group_linear bias of the wrong size must fail with the shapes: %s", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
    vt_msf_cfg m = {.heads = 2, .dim_head = 3, .probe = 1, .groups = 1, .norm = 1, .ln_eps = 1e-5f};
    check_block_grad(T, "msf", m, 2, 5, 4);
    m.groups = 2;
    check_block_grad(T, "msf_g2", m, 1, 4, 4);
    m.block_grouping = 1;
    check_block_grad(T, "msf_g2_block", m, 1, 3, 4);
    m.probe = 0;
    m.block_grouping = 0;
    m.norm = 0;
    check_block_grad(T, "orig_g2_nonorm", m, 2, 3, 4);
}
