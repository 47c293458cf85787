/* hMHSA and cFFN blocks: finite-difference gradients of every parameter and the input through each block (hMHSA
 * on a non-square 2x3 key grid plus one bypassing token, with head doubling and the CHH-first ablation; cFFN in
 * its training form with BatchNorm batch statistics, 2 and 4 branches, after a plain fc1 and after a DWConv), the
 * deploy merge (training-form eval output == deployed output, 3 and 4 branches; a graph built before a second
 * deploy into the same store renews its weight copies) and the shape errors. The PyTorch
 * comparison is tests/reference/test_hmhsa_cffn.py. */
#include <math.h>
#include <string.h>

#include "gradcheck.h"
#include "test.h"
#include "vitc/blocks.h"
#include "vitc/graph.h"
#include "vitc/model.h"
#include "vitc/ops.h"

/* Analytically zero gradients: CHH bias when CHH is last, IHH bias when no key bypasses IHH (either way a per-head
 * shift of whole rows that softmax cancels), U's BN bias (a per-channel shift that V's bias-free convs carry to V's
 * train-mode BNs, which subtract it). */
static int zero_expected(const char *name, int chh_last, int lead) {
    return (chh_last && strstr(name, "chh.bias")) || (!lead && strstr(name, "ihh.bias")) ||
           (strstr(name, "fc2_u.rep.") && strstr(name, "bn.bias"));
}

/* Builds the block on x (B, N, C) (train mode): the cFFN of fc (its hidden width then set to 2·C), else the hMHSA of
 * hc; loss = Σ y·r, and checks central differences on every param. */
static void check_grad(vt_test *T, const char *tag, const vt_ffn_ctx *fc, const vt_attn_ctx *hc, int B, int N,
                       int C) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    int xs[3] = {B, N, C};
    vt_tensor *x = vt_param(g, "x", 3, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
    const int cffn = fc != NULL;
    vt_ffn_ctx f = fc ? *fc : (vt_ffn_ctx){0};
    f.hidden = 2 * C;
    vt_tensor *y = cffn ? vt_block_cffn(g, "mlp", x, &f) : vt_block_hmhsa(g, "attn", x, hc);
    vt_tensor *r = vt_input(g, "r", 3, xs);
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    if (vt_graph_finalize(g, &e)) {
        T_CHECK(T, 0, "%s: build failed: %s", tag, e.msg);
        vt_graph_free(g);
        vt_params_free(P);
        return;
    }
    vt_params_init(P, 11);
    vt_rng rng;
    vt_rng_seed(&rng, 5);
    for (int i = 0; i < P->n; i++) { /* O(1) weights so the maps are not flat; non-trivial BN affines */
        vt_tensor *t = P->t[i];
        if (t->kind != VT_PARAM) continue;
        const float s = t->ndim >= 2 && strcmp(t->name, "x") ? 1.0f / sqrtf((float)(t->numel / t->shape[0])) : 0.3f;
        for (int64_t j = 0; j < t->numel; j++)
            t->data[j] = (t->ndim == 1 && strstr(t->name, "weight") ? 1.0f : 0.0f) +
                         (strcmp(t->name, "x") ? s : 1.0f) * vt_rng_normal(&rng);
    }
    for (int64_t j = 0; j < r->numel; j++) r->data[j] = vt_rng_normal(&rng);
    vt_graph_forward(g);
    vt_params_zero_grad(P);
    vt_graph_backward(g);
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (t->kind != VT_PARAM) continue;
        const int64_t n = t->numel;
        double anysum = 0;
        const int samples = B * N > 4096 ? 6 : 24; /* the 65,600-row case: 6 differences a parameter */
        const double rel = gc_param_error(g, t, y, r->data, samples, 3e-3f, 0, &anysum);
        if (zero_expected(t->name, cffn || !hc->opts->chh_first, cffn || hc->lead)) { /* the differences are float noise here */
            const double tol = 1e-4 * fmax(1.0, (double)B * N / 1024); /* float sums over the B·N rows */
            T_CHECK(T, anysum / (double)n < tol, "%s: %s gradient should vanish (mean |g| %.3g)", tag, t->name,
                    anysum / (double)n);
            continue;
        }
        T_CHECK(T, rel < 2e-2, "%s: %s rel err %.3g", tag, t->name, rel);
        T_CHECK(T, anysum > 0, "%s: %s gradient is all zero", tag, t->name);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* Where a training cFFN after a plain fc1 runs GELU: fc1's epilogue (a linear to the hidden width keeping GELU's
 * derivative, save[0]) at R rows of 2C hidden below 2^20 floats, the U branches' prologue above (no such node). */
static void check_gelu_place(vt_test *T, int R, int C, int want_epilogue) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[3] = {1, R, C};
    const vt_block_opts o = {.cffn_r = 2};
    vt_ffn_ctx f = {.train_form = 1, .winit = VT_INIT_W02, .opts = &o, .hidden = 2 * C};
    vt_tensor *y = vt_block_cffn(g, "mlp", vt_param(g, "x", 3, xs, (vt_init){VT_INIT_NORMAL, 1.0f}), &f);
    int epi = 0;
    for (int i = 0; y && i < g->nn; i++) {
        const vt_node *n = g->nodes[i];
        epi += !strcmp(n->op->name, "linear") && n->save[0] && n->out->shape[n->out->ndim - 1] == 2 * C;
    }
    T_CHECK(T, y && epi == want_epilogue, "cffn %d rows of %d hidden: %d fc1 nodes with GELU's epilogue, want %d",
            R, 2 * C, epi, want_epilogue);
    vt_graph_free(g);
    vt_params_free(P);
}

/* Eval output of a cFFN on x in the given form over store P (built on first use). */
static int cffn_eval(vt_params *P, int train_form, int r, const float *xd, int B, int N, int C, float *out,
                     vt_err *e) {
    vt_graph *g = vt_graph_new(P, 0, e);
    if (!g) return -1;
    int xs[3] = {B, N, C};
    vt_tensor *x = vt_input(g, "x", 3, xs);
    const vt_block_opts o = {.cffn_t = 0.5f, .cffn_r = r};
    vt_tensor *y = vt_block_cffn(g, "mlp", x,
                                 &(vt_ffn_ctx){.hidden = 3 * C, .train_form = train_form, .winit = VT_INIT_W02, .opts = &o});
    vt_graph_output(g, y);
    int rc = vt_graph_finalize(g, e);
    if (!rc && xd) {
        memcpy(x->data, xd, sizeof(float) * (size_t)x->numel);
        vt_graph_forward(g);
        memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
    }
    vt_graph_free(g);
    return rc;
}

/* Training form (r branches, t = 1/2, random BN running stats) -> vt_cffn_deploy -> deployed form: equal eval
 * outputs. Running variances of 0.01-0.06, so that a merge without eps (off by eps/2var) fails the 1e-5 check. */
static void check_deploy(vt_test *T, int r) {
    enum { B = 2, N = 5, C = 12 };
    vt_err e = {0};
    vt_params *Pt = vt_params_new(&e), *Pd = vt_params_new(&e);
    float x[B * N * C], yt[B * N * C], yd[B * N * C];
    int ok = Pt && Pd && !cffn_eval(Pt, 1, r, NULL, B, N, C, NULL, &e) && !cffn_eval(Pd, 0, r, NULL, B, N, C, NULL, &e);
    T_CHECK(T, ok, "cffn deploy: build failed: %s", e.msg);
    if (ok) {
        vt_params_init(Pt, 3);
        vt_rng rng;
        vt_rng_seed(&rng, 9);
        for (int i = 0; i < Pt->n; i++) {
            vt_tensor *t = Pt->t[i];
            if (t->is_i64) continue;
            const int var = strstr(t->name, "running_var") != NULL, w = t->ndim == 1 && strstr(t->name, "weight");
            for (int64_t j = 0; j < t->numel; j++)
                t->data[j] = var ? 0.01f + 0.05f * vt_rng_uniform(&rng) : (w ? 1.0f : 0.0f) + 0.3f * vt_rng_normal(&rng);
        }
        for (int j = 0; j < B * N * C; j++) x[j] = vt_rng_normal(&rng);
        T_CHECK(T, vt_params_find(Pt, "mlp.fc2_u.rep.2.bn.running_var") && vt_params_find(Pd, "mlp.fc2_v.bias"),
                "cffn deploy: unexpected parameter names");
        ok = !vt_cffn_deploy(Pt, Pd, 1e-5f, &e);
        T_CHECK(T, ok, "cffn deploy: %s", e.msg);
    }
    if (ok) {
        ok = !cffn_eval(Pt, 1, r, x, B, N, C, yt, &e) && !cffn_eval(Pd, 0, r, x, B, N, C, yd, &e);
        double err = 0, mx = 1;
        for (int j = 0; ok && j < B * N * C; j++) err = t_worse(err, fabs(yt[j] - yd[j])), mx = fmax(mx, fabs(yt[j]));
        T_CHECK(T, ok && err / mx < 1e-5, "cffn deploy r=%d: train-form vs deployed eval outputs differ by %.3g", r,
                err / mx);
        /* a deployed store is not a training store: deploying it must fail and name a tensor */
        vt_err e2 = {0};
        T_CHECK(T, vt_cffn_deploy(Pd, Pt, 1e-5f, &e2) && strstr(e2.msg, "mlp."), "deploy of deployed weights: %s",
                e2.msg);
    }
    vt_params_free(Pt);
    vt_params_free(Pd);
}

/* An eval graph of a deployed model (img px; int8: its quantised layers) run on random values x. */
static vt_graph *deployed_graph(const vt_model_cfg *c, vt_params *D, vt_tensor **y, vt_err *e) {
    vt_graph *g = vt_graph_new(D, 0, e);
    if (!g) return NULL;
    g->int8 = c->arch.int8;
    vt_tensor *x = NULL;
    *y = vt_model_build(g, c, 2, &x);
    if (*y) vt_graph_output(g, *y);
    if (!*y || vt_graph_finalize(g, e)) {
        vt_graph_free(g);
        return NULL;
    }
    for (int64_t i = 0; i < x->numel; i++) x->data[i] = sinf(0.01f * (float)i);
    return g;
}

/* A second deploy into a store with a graph built on it: the graph renews its weight copies (packed, int8) and
 * constant nodes, giving what a new graph gives (they were kept from the first deploy's weights). */
static void check_redeploy(vt_test *T, int int8) {
    vt_model_cfg c = *vt_model_find("deit_tiny_hmhsa_cffn");
    c.arch.img_size = 48;
    c.arch.int8 = int8;
    const vt_model_cfg tc = vt_model_training_form(&c);
    vt_err e = {0};
    vt_params *T1 = vt_params_new(&e), *T2 = vt_params_new(&e), *D = vt_params_new(&e);
    vt_graph *g = NULL, *g2 = NULL;
    vt_tensor *y = NULL, *y2 = NULL;
    int ok = T1 && T2 && D && !vt_model_init_params(&tc, T1, 1, &e) && !vt_model_init_params(&tc, T2, 2, &e) &&
             !vt_model_deploy(&c, T1, D, &e) && (g = deployed_graph(&c, D, &y, &e)) != NULL;
    const uint64_t gen = D ? D->gen : 0;
    if (ok) vt_graph_forward(g);
    ok = ok && !vt_model_deploy(&c, T2, D, &e) && (g2 = deployed_graph(&c, D, &y2, &e)) != NULL;
    double d = INFINITY, m = 0;
    if (ok) {
        vt_graph_forward(g);
        vt_graph_forward(g2);
        d = 0;
        for (int64_t i = 0; i < y->numel; i++) {
            d = t_worse(d, fabs(y->data[i] - y2->data[i]));
            m = fmax(m, fabs(y2->data[i]));
        }
    }
    T_CHECK(T, ok && D->gen != gen && d <= 1e-6 * m, "redeploy (int8 %d): a graph built before it %g off a new one's "
            "(scale %g), generation %llu -> %llu: %s", int8, d, m, (unsigned long long)gen,
            (unsigned long long)(D ? D->gen : 0), e.msg);
    vt_graph_free(g);
    vt_graph_free(g2);
    vt_params_free(T1);
    vt_params_free(T2);
    vt_params_free(D);
}

/* The training-form cFFN branch convs of `model`'s tensor `name` follow the host's conv rule: standard deviation
 * within 3% of want (PVTv2: normal(0, √(2/fan_out)), as its IHH; DeiT: PyTorch's default uniform(±1/√fan_in);
 * Next-ViT: trunc_normal(0.02)); PVTv2's had taken PyTorch's default, 9x narrower than its IHH's rule. */
static void check_cffn_init(vt_test *T, const char *model, const char *name, double want) {
    const vt_model_cfg tc = vt_model_training_form(vt_model_find(model));
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int ok = P && !vt_model_init_params(&tc, P, 3, &e);
    const vt_tensor *w = ok ? vt_params_find(P, name) : NULL;
    double s = 0, s2 = 0;
    for (int64_t i = 0; w && i < w->numel; i++) s += w->data[i], s2 += (double)w->data[i] * w->data[i];
    const double sd = w && w->numel > 1 ? sqrt((s2 - s * s / w->numel) / (w->numel - 1)) : 0;
    T_CHECK(T, w && fabs(sd - want) <= 0.03 * want, "%s %s: init std %.4f, the host's rule %.4f: %s", model, name, sd,
            want, w ? "" : ok ? "no such tensor" : e.msg);
    vt_params_free(P);
}

void test_hmhsa_cffn(vt_test *T) {
    /* pvt_v2_b1's stage 1: k = 37 of 512 hidden (fan_out 37); deit_tiny: k = 102 of 768 hidden (fan_in 768) */
    check_cffn_init(T, "pvt_v2_b1_hmhsa_cffn", "block1.0.mlp.fc2_u.rep.0.conv.weight", sqrt(2.0 / 37));
    check_cffn_init(T, "deit_tiny_hmhsa_cffn", "blocks.0.mlp.fc2_u.rep.0.conv.weight", 1.0 / sqrt(768) / sqrt(3.0));
    check_cffn_init(T, "nextvit_small_hmhsa_cffn", "features.0.mlp.conv2_u.rep.0.conv.weight", 0.02);
    check_redeploy(T, 0);
    check_redeploy(T, 1);
    const vt_block_opts dbl = {.double_heads = 1}, chh_first = {.chh_first = 1}, plain = {0};
    check_grad(T, "hmhsa 2x(1+2x3) C24 h2->4", NULL,
               &(vt_attn_ctx){.heads = 2, .qkv_bias = 1, .grid_h = 2, .grid_w = 3, .lead = 1, .winit = VT_INIT_W02,
                              .opts = &dbl},
               2, 7, 24);
    check_grad(T, "hmhsa chh-first 1x(3x2) C16 h4", NULL,
               &(vt_attn_ctx){.heads = 4, .grid_h = 3, .grid_w = 2, .winit = VT_INIT_W02, .opts = &chh_first}, 1, 6,
               16);
    /* PVT layout (q C/2, kv 3C/2) on keys reduced 2x (sr conv + LN): a 4x5 grid gives 2x2 keys (a column dropped) */
    check_grad(T, "hmhsa pvt sr2 2x(4x5) C16 h2->4", NULL,
               &(vt_attn_ctx){.heads = 2, .qkv_bias = 1, .grid_h = 4, .grid_w = 5, .sr_ratio = 2, .ln_eps = 1e-5f,
                              .layout = VT_LAYOUT_PVT, .conv_fanout = 1, .winit = VT_INIT_W02, .opts = &dbl},
               2, 20, 16);
    /* cFFN training form: r = 2 (the stacked GEMM and vt_batchnorm_sum) and r = 4 (the branch chain), each after a
     * plain fc1 and after PVTv2's DWConv (GELU in the U branches' GEMM prologue, or a vt_gelu before the chain) */
    const vt_block_opts two = {.cffn_r = 2}, four = {.cffn_r = 4};
    check_grad(T, "cffn train form r2 2x5 C12", &(vt_ffn_ctx){.train_form = 1, .winit = VT_INIT_W02, .opts = &two},
               NULL, 2, 5, 12);
    /* over 2^20 hidden floats a train graph's plain fc1 leaves GELU to the U branches' GEMM prologue too, as the
     * host MLP leaves it to fc2's (65,600 rows of 16) */
    check_grad(T, "cffn train form r2 1x65600 C8", &(vt_ffn_ctx){.train_form = 1, .winit = VT_INIT_W02, .opts = &two},
               NULL, 1, 65600, 8);
    check_gelu_place(T, 65600, 8, 0);
    check_gelu_place(T, 65500, 8, 1);
    check_grad(T, "cffn train form r4 2x5 C12", &(vt_ffn_ctx){.train_form = 1, .winit = VT_INIT_W02, .opts = &four},
               NULL, 2, 5, 12);
    check_grad(T, "cffn train form dwconv r2 2x(2x3) C8",
               &(vt_ffn_ctx){.train_form = 1, .dwconv = 1, .grid_h = 2, .grid_w = 3, .winit = VT_INIT_W02,
                             .opts = &two},
               NULL, 2, 6, 8);
    check_grad(T, "cffn train form dwconv r4 2x(2x3) C8",
               &(vt_ffn_ctx){.train_form = 1, .dwconv = 1, .grid_h = 2, .grid_w = 3, .winit = VT_INIT_W02,
                             .opts = &four},
               NULL, 2, 6, 8);
    check_deploy(T, 3);
    check_deploy(T, 4);
    T_CHECK(T, vt_cffn_width(768, 192, 2.0f / 3.0f) == 102 && vt_cffn_width(1536, 384, 0) == 204 &&
                   vt_cffn_width(512, 64, 2.0f / 3.0f) == 37 && vt_cffn_width(2048, 512, 2.0f / 3.0f) == 273,
            "cffn width: floor(t·hidden/(m+1)) (spec trap 6)");
    /* shape errors: odd heads without doubling, a key grid larger than the tokens */
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    int s1[3] = {1, 5, 12};
    T_CHECK(T, !vt_block_hmhsa(g, "a", vt_input(g, "x1", 3, s1),
                               &(vt_attn_ctx){.heads = 3, .grid_h = 2, .grid_w = 2, .lead = 1, .opts = &plain}) &&
                   strstr(g->err.msg, "even head count"),
            "3 heads without doubling must fail: %s", g->err.msg);
    vt_graph_free(g);
    g = vt_graph_new(P, 0, &e);
    T_CHECK(T, !vt_block_hmhsa(g, "a", vt_input(g, "x1", 3, s1),
                               &(vt_attn_ctx){.heads = 2, .grid_h = 2, .grid_w = 3, .opts = &plain}) &&
                   strstr(g->err.msg, "grid"),
            "2x3 grid on 5 tokens must fail: %s", g->err.msg);
    vt_graph_free(g);
    vt_params_free(P);
}
