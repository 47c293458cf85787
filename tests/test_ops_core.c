/* Gradient checks and kernel checks for matmul/linear, broadcasting binary ops, affine, cross-entropy, sum;
 * plus graph-level checks: shape errors at build time, eval/train graphs agree, planner reuse in eval. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/blocks.h"
#include "vitc/ops.h"
#include "vitc/optim.h"

static vt_tensor *b_linear(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_linear(g, x[0], x[1], c->nx > 2 ? x[2] : NULL);
}
static vt_tensor *b_linear_t(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_linear_t(g, x[0], x[1], c->nx > 2 ? x[2] : NULL);
}
/* vt_linear_t's reference: the linear, its output permuted features first. */
static vt_tensor *b_linear_t_chain(vt_graph *g, vt_tensor **x, const gc_case *c) {
    const int perm3[3] = {2, 0, 1}, perm2[2] = {1, 0};
    return vt_permute(g, vt_linear(g, x[0], x[1], c->nx > 2 ? x[2] : NULL), x[0]->ndim == 3 ? perm3 : perm2);
}
/* vt_linear_t by finite differences and against its chain, with and without bias, 3-D and 2-D inputs. */
/* Σ|dW| of a small classifier's cross-entropy ce after one forward and backward, the loss being (form) 0: ce, 1: ce
 * also read by a later node (an output ce + c: its backward writes its input's gradient first), 2: the view of ce's
 * slot in concat(ce, 3·ce), 3: that of 3·ce's (an offset view: its seed at that element). A second backward without a
 * forward is refused (-1, g->err set): *again is its return. */
static double loss_grad(int form, int *again) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[2] = {4, 8}, ws[2] = {3, 8}, ls[1] = {4}, one[1] = {1};
    vt_tensor *x = vt_input(g, "x", 2, xs), *lab = vt_input(g, "lab", 1, ls), *c = vt_input(g, "c", 1, one);
    vt_tensor *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.5f});
    vt_tensor *ce = vt_cross_entropy(g, vt_linear(g, x, w, NULL), lab, 0.0f), *loss = ce;
    if (form == 1) vt_graph_output(g, vt_add(g, ce, c));
    if (form >= 2) {
        vt_tensor *parts[2] = {ce, vt_scale(g, ce, 3.0f)};
        loss = vt_view_range(g, vt_concat(g, parts, 2, 0), form - 2, 1, one);
    }
    vt_graph_set_loss(g, loss);
    double s = -1.0;
    if (vt_graph_finalize(g, &e) == 0) {
        vt_params_init(P, 1);
        for (int i = 0; i < 32; i++) x->data[i] = sinf((float)i);
        for (int i = 0; i < 4; i++) lab->data[i] = (float)(i % 3);
        c->data[0] = 1.0f;
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        s = vt_graph_backward(g) == 0 ? 0.0 : -1.0;
        for (int i = 0; s >= 0 && i < 24; i++) s += fabs(w->grad[i]);
        *again = vt_graph_backward(g);
        *again = *again == -1 && strstr(g->err.msg, "no forward since the last backward") ? -1 : 0;
    }
    vt_graph_free(g);
    vt_params_free(P);
    return s;
}

/* The loss's gradient seed: a loss that a later node reads too, or that is a view at an offset, is seeded (it was
 * lost, or put at element 0); backward runs once per forward. */
static void check_loss_seed(vt_test *T) {
    int again[4] = {0};
    double s[4];
    for (int f = 0; f < 4; f++) s[f] = loss_grad(f, &again[f]);
    T_CHECK(T, s[0] > 0.1, "plain loss: Σ|dW| %g", s[0]);
    T_CHECK(T, fabs(s[1] - s[0]) <= 1e-6 * s[0], "loss read by a later node: Σ|dW| %g, alone %g", s[1], s[0]);
    T_CHECK(T, fabs(s[2] - s[0]) <= 1e-6 * s[0] && fabs(s[3] - 3.0 * s[0]) <= 3e-6 * s[0],
            "loss a view of concat(ce, 3·ce): Σ|dW| %g and %g, want %g and %g", s[2], s[3], s[0], 3.0 * s[0]);
    for (int f = 0; f < 4; f++)
        T_CHECK(T, again[f] == -1, "form %d: a second backward without a forward is refused", f);
    vt_err e = {0};
    T_CHECK(T, vt_alloc(SIZE_MAX - 10, &e) == NULL && e.code == VT_E_NOMEM, "vt_alloc(SIZE_MAX - 10) refused");
}

static void check_linear_t(vt_test *T) {
    const gc_case cs[] = {
        {.name = "linear_t", .nx = 3, .ndim = {3, 2, 1}, .shape = {{3, 7, 5}, {6, 5}, {6}}, .build = b_linear_t},
        {.name = "linear_t_2d", .nx = 3, .ndim = {2, 2, 1}, .shape = {{9, 4}, {5, 4}, {5}}, .build = b_linear_t},
        {.name = "linear_t_nobias", .nx = 2, .ndim = {3, 2}, .shape = {{4, 3, 6}, {2, 6}}, .build = b_linear_t},
    };
    static const struct {
        int xs[3], ws[2], bias;
        const char *msg;
    } bad[] = {{{2, 3, 5}, {4, 6}, 0, "must be (..., K)"}, {{2, 3, 5}, {4, 5}, 3, "bias must be (4)"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) { /* shape errors: K mismatch, a wrong bias */
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        vt_tensor *b = bad[i].bias ? vt_input(g, "b", 1, &bad[i].bias) : NULL;
        const vt_tensor *y = vt_linear_t(g, vt_input(g, "x", 3, bad[i].xs), vt_input(g, "w", 2, bad[i].ws), b);
        T_CHECK(T, !y && strstr(g->err.msg, "linear_t") && strstr(g->err.msg, bad[i].msg), "bad linear_t %zu: %s", i,
                g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        gc_run_vs_plain(T, &cs[i], b_linear_t_chain, "linear then permute", 1e-5);
}
/* A training graph's forward + backward MACs: a first linear on the input (no gradient: its weight gradient alone)
 * counts 2× its forward, the next 3×, and attention on its packed qkv (one input: dQ, dK, dV and dP) 3×. */
static void check_train_macs(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[2] = {5, 6};
    vt_tensor *y = vt_linear_p(g, "b", vt_linear_p(g, "a", vt_input(g, "x", 2, xs), 8, 1, VT_INIT_W02), 3, 1,
                               VT_INIT_W02);
    const int64_t a = 5 * 6 * 8, b = 5 * 8 * 3;
    T_CHECK(T, y && vt_graph_macs(g) == a + b && vt_graph_train_macs(g) == 2 * a + 3 * b,
            "train MACs %lld, want %lld (forward %lld)", (long long)vt_graph_train_macs(g), (long long)(2 * a + 3 * b),
            (long long)vt_graph_macs(g));
    vt_graph_free(g);
    g = vt_graph_new(P, 1, &e);
    const int ts[3] = {2, 7, 3 * 8}; /* (B, N, 3·dim): 2 heads of 4 */
    const vt_attn_args args = {.heads = 2, .dim = 8, .q_off = 0, .k_off = 8, .v_off = 16, .scale = 0.5f};
    vt_tensor *qkv = vt_linear_p(g, "qkv", vt_input(g, "x2", 3, ts), 3 * 8, 1, VT_INIT_W02);
    y = qkv ? vt_attention_ex(g, qkv, NULL, &args) : NULL;
    const int64_t q = 2LL * 7 * 24 * 24, at = 2LL * 2 * 7 * 7 * 8;
    T_CHECK(T, y && vt_graph_macs(g) == q + at && vt_graph_train_macs(g) == 2 * q + 3 * at,
            "attention on packed qkv: train MACs %lld, want %lld (forward %lld)", (long long)vt_graph_train_macs(g),
            (long long)(2 * q + 3 * at), (long long)vt_graph_macs(g));
    vt_graph_free(g);
    /* CSwin's stripe attention on its packed qkv (its LePE frozen: the products alone need two per forward MAC), then
     * a linear on it whose weight is frozen (its input's gradient alone: 2x) */
    g = vt_graph_new(P, 1, &e);
    const int ss[3] = {1, 4 * 4, 3 * 8}, ws[4] = {8, 1, 3, 3}, bs[1] = {8};
    vt_tensor *sx = vt_input(g, "x3", 3, ss), *lw = vt_input(g, "lepe_w", 4, ws), *lb = vt_input(g, "lepe_b", 1, bs);
    vt_tensor *sq = sx ? vt_linear_p(g, "sqkv", sx, 3 * 8, 1, VT_INIT_W02) : NULL;
    y = sq ? vt_stripe_attention(g, sq, 4, 2, 2, 0.5f, lw, lb) : NULL;
    const int64_t sat = y ? g->nodes[g->nn - 1]->macs : 0;
    vt_tensor *fw = y ? vt_linear_p(g, "frozen", y, 5, 1, VT_INIT_W02) : NULL;
    vt_tensor *fwt = fw ? vt_params_find(P, "frozen.weight") : NULL;
    vt_tensor *fbt = fw ? vt_params_find(P, "frozen.bias") : NULL;
    if (fwt && fbt) fwt->requires_grad = fbt->requires_grad = 0;
    const int64_t sl = 1LL * 16 * 24 * 24, fl = 1LL * 16 * 8 * 5;
    T_CHECK(T, fw && sat > 0 && vt_graph_train_macs(g) == 2 * sl + 3 * sat + 2 * fl,
            "stripe attention + a frozen linear: train MACs %lld, want %lld", (long long)vt_graph_train_macs(g),
            (long long)(2 * sl + 3 * sat + 2 * fl));
    vt_graph_free(g);
    /* hMHSA's attention on one packed input (queries and keys of its 1 computed head, values of both): 3x too */
    g = vt_graph_new(P, 1, &e);
    const int hs[3] = {2, 6, 16};
    const vt_hattn_args ha = {.heads = 2, .dim = 8, .q_off = 0, .k_off = 4, .v_off = 8, .kh = 2, .kw = 3,
                              .scale = 0.5f};
    vt_tensor *hq = vt_linear_p(g, "hqkv", vt_input(g, "x4", 3, hs), 16, 1, VT_INIT_W02);
    y = hq ? vt_hallucinated_attention(g, hq, NULL, &ha) : NULL;
    const int64_t hl = 2LL * 6 * 16 * 16, hat = y ? g->nodes[g->nn - 1]->macs : 0;
    T_CHECK(T, y && hat > 0 && vt_graph_train_macs(g) == 2 * hl + 3 * hat,
            "hallucinated attention on packed qkv: train MACs %lld, want %lld", (long long)vt_graph_train_macs(g),
            (long long)(2 * hl + 3 * hat));
    vt_graph_free(g);
    /* linear attention with queries that need no gradient (an input) and keys, values from one linear: the backward
     * still runs the products twice (3x), where counting by inputs would give 2x */
    g = vt_graph_new(P, 1, &e);
    const int lqs[3] = {2, 5, 8}, ls[3] = {2, 5, 6};
    const vt_linattn_args la = {.heads = 2, .q_off = 0, .k_off = 0, .v_off = 8, .C = 8};
    vt_tensor *lq = vt_input(g, "q5", 3, lqs), *lkv = vt_linear_p(g, "lkv", vt_input(g, "x5", 3, ls), 16, 1,
                                                                  VT_INIT_W02);
    y = lq && lkv ? vt_linear_attention_ex(g, lq, lkv, lkv, &la) : NULL;
    const int64_t ll = 2LL * 5 * 6 * 16, lat = 2LL * 2 * (5 * 4 * 4 + 5 * 4 * 4 + 5 * 4);
    T_CHECK(T, y && vt_graph_macs(g) == ll + lat && vt_graph_train_macs(g) == 2 * ll + 3 * lat,
            "linear attention, queries without a gradient: train MACs %lld, want %lld (forward %lld)",
            (long long)vt_graph_train_macs(g), (long long)(2 * ll + 3 * lat), (long long)vt_graph_macs(g));
    vt_graph_free(g);
    vt_params_free(P);
}

/* The profile's split by op kind: a linear (GEMM), GELU (other) and attention (fused) each get a positive share,
 * the three add up to 1, the nodes carry their ops' kinds, and a graph not profiled reports zeros; the time in the
 * fused op's GEMM calls is positive, within its node's time, and counted for no other node. */
static void check_profile_split(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[3] = {2, 16, 24}, ws[2] = {24, 24}, bs[1] = {24};
    vt_tensor *x = vt_input(g, "x", 3, xs);
    vt_tensor *h = vt_gelu(g, vt_linear(g, x, vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.2f}),
                                        vt_param(g, "b", 1, bs, (vt_init){VT_INIT_ZERO, 0.0f})));
    const vt_attn_args a = {.heads = 2, .dim = 8, .k_off = 8, .v_off = 16, .scale = 0.3f}; /* packed qkv */
    vt_graph_set_loss(g, vt_sum(g, vt_attention_ex(g, h, NULL, &a)));
    double sh[VT_OP_KINDS] = {1.0, 1.0, 1.0};
    vt_err pe = {0}; /* its buffers are sized by the node count, known once finalized */
    T_CHECK(T, vt_graph_enable_profile(g, &pe) != 0 && strstr(pe.msg, "not finalized"),
            "profiling before finalize refused: %s", pe.msg);
    int rc = vt_graph_finalize(g, &e);
    if (rc == 0) {
        vt_params_init(P, 3);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = (float)(i % 7) * 0.1f;
        vt_graph_forward(g);
        vt_graph_profile_split(g, sh);
        T_CHECK(T, sh[0] == 0.0 && sh[1] == 0.0 && sh[2] == 0.0 && vt_graph_profile_fused_gemm(g) == 0.0,
                "split without profiling: %g %g %g", sh[0], sh[1], sh[2]);
        rc = vt_graph_enable_profile(g, &e);
    }
    T_CHECK(T, rc == 0, "profile graph: %s", e.msg);
    if (rc == 0) {
        for (int it = 0; it < 3; it++) {
            vt_graph_forward(g);
            vt_graph_backward(g);
        }
        vt_graph_profile_split(g, sh);
        T_CHECK(T, sh[VT_OP_GEMM] > 0 && sh[VT_OP_FUSED] > 0 && sh[VT_OP_OTHER] > 0 &&
                       fabs(sh[0] + sh[1] + sh[2] - 1.0) < 1e-9,
                "split by kind: gemm %g fused %g other %g", sh[VT_OP_GEMM], sh[VT_OP_FUSED], sh[VT_OP_OTHER]);
        int kinds = 0;
        for (int i = 0; i < g->nn; i++) {
            const vt_opdef *op = g->nodes[i]->op;
            kinds += strcmp(op->name, "linear") == 0 ? op->kind == VT_OP_GEMM
                     : strcmp(op->name, "attention") == 0 ? op->kind == VT_OP_FUSED
                     : strcmp(op->name, "gelu") == 0     ? op->kind == VT_OP_OTHER
                                                         : 0;
        }
        T_CHECK(T, kinds == 3, "%d of the linear, GELU and attention nodes have their kinds", kinds);
        const double fg = vt_graph_profile_fused_gemm(g);
        T_CHECK(T, fg > 0.0 && fg <= sh[VT_OP_FUSED], "fused ops' GEMM calls %g of the time, fused ops %g", fg,
                sh[VT_OP_FUSED]);
        int outside = 0;
        for (int i = 0; i < g->nn; i++)
            outside += g->node_gemm_s[i] < 0.0 || g->node_gemm_s[i] > g->node_s[i] ||
                       (g->nodes[i]->op->kind != VT_OP_FUSED && g->node_gemm_s[i] != 0.0);
        T_CHECK(T, outside == 0, "%d nodes with GEMM-call time outside [0, their time] or not fused", outside);
    }
    vt_graph_free(g);
    vt_params_free(P);
    /* a conv2d node's kind follows its work: a depthwise conv's plane loops are other work, a dense one's GEMM */
    P = vt_params_new(&e);
    g = vt_graph_new(P, 0, &e);
    const int cs[4] = {1, 4, 6, 6}, dws[4] = {4, 1, 3, 3}, dns[4] = {4, 4, 3, 3};
    vt_tensor *c = vt_input(g, "c", 4, cs);
    vt_tensor *dw = vt_conv2d(g, c, vt_param(g, "dw", 4, dws, (vt_init){VT_INIT_NORMAL, 0.2f}), NULL, 1, 1, 4);
    vt_graph_output(g, vt_conv2d(g, dw, vt_param(g, "dense", 4, dns, (vt_init){VT_INIT_NORMAL, 0.2f}), NULL, 1, 1, 1));
    int conv_kinds = 0;
    for (int i = 0; vt_graph_finalize(g, &e) == 0 && i < g->nn; i++)
        if (strcmp(g->nodes[i]->op->name, "conv2d") == 0)
            conv_kinds += g->nodes[i]->in[1]->shape[1] == 1 ? g->nodes[i]->kind == VT_OP_OTHER
                                                            : g->nodes[i]->kind == VT_OP_GEMM;
    T_CHECK(T, conv_kinds == 2, "%d of the depthwise (other) and dense (GEMM) conv2d nodes have their kinds: %s",
            conv_kinds, e.msg);
    vt_graph_free(g);
    vt_params_free(P);
}
static vt_tensor *b_linear_gelu(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_linear_gelu(g, x[0], x[1], x[2]);
}
static vt_tensor *b_gelu_linear(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *y = vt_gelu_linear(g, x[0], x[1], x[2]);
    return c->nx > 3 ? vt_residual(g, x[3], y) : y;
}
static vt_tensor *b_linear_relu(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_linear_relu(g, x[0], x[1], x[2]);
}
/* x0 + linear(x0 or x3, x1, x2): ia[0] 1 = the residual is the linear's own input; ia[1] 1 = h is used before the
 * residual (no fusion: vt_add). */
static vt_tensor *b_residual(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *h = vt_linear(g, c->ia[0] ? x[0] : x[3], x[1], x[2]);
    if (c->ia[1]) vt_graph_output(g, vt_mul(g, h, h));
    return vt_residual(g, x[0], h);
}
/* x3 + drop_path(linear(x0, x1, x2) or, with ia[0], gelu_linear(...), fa[0]) (fused; ia[1]: h used before, so
 * vt_add + vt_drop_path nodes). */
static vt_tensor *b_residual_drop(vt_graph *g, vt_tensor **x, const gc_case *c) {
    vt_tensor *h = c->ia[0] ? vt_gelu_linear(g, x[0], x[1], x[2]) : vt_linear(g, x[0], x[1], x[2]);
    if (c->ia[1]) vt_graph_output(g, vt_mul(g, h, h));
    return vt_residual_drop(g, x[3], h, c->fa[0]);
}
static vt_tensor *b_droppath(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_drop_path(g, x[0], c->fa[0]);
}
static vt_tensor *b_matmul(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_matmul(g, x[0], x[1], c->ia[0], c->ia[1], c->fa[0]);
}
static vt_tensor *b_add(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_add(g, x[0], x[1]);
}
static vt_tensor *b_sub(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_sub(g, x[0], x[1]);
}
static vt_tensor *b_mul(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_mul(g, x[0], x[1]);
}
static vt_tensor *b_affine(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_affine(g, x[0], c->fa[0], c->fa[1]);
}
static vt_tensor *b_ce(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_cross_entropy(g, x[0], x[1], c->fa[0]);
}
static void fill_labels(float *d, int64_t n, int which, vt_rng *r) {
    for (int64_t i = 0; i < n; i++) d[i] = which == 1 ? (float)vt_rng_below(r, 5) : vt_rng_normal(r) * 2.0f;
}

static vt_tensor *b_soft_ce(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_soft_cross_entropy(g, x[0], x[1]);
}
static vt_tensor *b_cos(vt_graph *g, vt_tensor **x, const gc_case *c) {
    (void)c;
    return vt_cosine_mean(g, x[0], x[1]);
}
/* Logits N(0, 2²); targets: positive rows (Mixup-like soft targets, not normalised, so the sum_k t_k term counts). */
static void fill_soft(float *d, int64_t n, int which, vt_rng *r) {
    for (int64_t i = 0; i < n; i++) d[i] = which == 1 ? 0.05f + vt_rng_uniform(r) : vt_rng_normal(r) * 2.0f;
}

static void check_gemm_ref(vt_test *T) {
    vt_rng r;
    vt_rng_seed(&r, 7);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const int M = 37, N = 29, K = 53;
            float A[37 * 53], B[53 * 29], C1[37 * 29], C2[37 * 29];
            for (int i = 0; i < M * K; i++) A[i] = vt_rng_normal(&r);
            for (int i = 0; i < K * N; i++) B[i] = vt_rng_normal(&r);
            for (int i = 0; i < M * N; i++) C1[i] = C2[i] = vt_rng_normal(&r);
            vt_gemm_ref(ta, tb, M, N, K, 0.7f, A, ta ? M : K, B, tb ? K : N, 0.5f, C1, N);
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 0.7f, A,
                        ta ? M : K, B, tb ? K : N, 0.5f, C2, N);
            double err = 0;
            for (int i = 0; i < M * N; i++) err = t_worse(err, fabs(C1[i] - C2[i]));
            T_CHECK(T, err < 1e-4, "sgemm vs reference ta=%d tb=%d: %g", ta, tb, err);
        }
}

/* The same small MLP built in a train graph and an eval graph gives the same outputs. */
static void check_eval_matches_train(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    float out[2][6 * 3];
    int64_t arena[2];
    for (int mode = 0; mode < 2; mode++) {
        vt_graph *g = vt_graph_new(P, mode, &e);
        int xs[3] = {2, 3, 8}, ws[2] = {16, 8}, w2[2] = {3, 16}, bs[1] = {16};
        vt_tensor *x = vt_input(g, "x", 3, xs);
        vt_tensor *h = vt_linear(g, x, vt_param(g, "w1", 2, ws, (vt_init){VT_INIT_NORMAL, 0.5f}),
                                 vt_param(g, "b1", 1, bs, (vt_init){VT_INIT_NORMAL, 0.5f}));
        for (int k = 0; k < 4; k++) h = vt_add(g, vt_scale(g, h, 0.5f), h);
        vt_tensor *y = vt_linear(g, h, vt_param(g, "w2", 2, w2, (vt_init){VT_INIT_NORMAL, 0.5f}), NULL);
        vt_graph_output(g, y);
        T_CHECK(T, vt_graph_finalize(g, &e) == 0, "finalize: %s", e.msg);
        if (mode == 0) vt_params_init(P, 3);
        for (int i = 0; i < 48; i++) x->data[i] = (float)i / 48.0f - 0.5f;
        vt_graph_forward(g);
        memcpy(out[mode], y->data, sizeof out[mode]);
        arena[mode] = vt_graph_arena_bytes(g);
        vt_graph_free(g);
    }
    float err = 0.0f; /* within float rounding: an eval graph may run other kernels (a packed weight's 1x1 conv) */
    for (int i = 0; i < 6 * 3; i++) err = fmaxf(err, fabsf(out[0][i] - out[1][i]) / fmaxf(1.0f, fabsf(out[1][i])));
    T_CHECK(T, err <= 1e-5f, "eval and train graphs differ by %g", (double)err);
    T_CHECK(T, arena[0] < arena[1], "eval arena (%lld B) should be smaller than train arena (%lld B)",
            (long long)arena[0], (long long)arena[1]);
    vt_params_free(P);
}

static void check_shape_errors(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    int xs[2] = {4, 8}, ws[2] = {5, 7};
    vt_tensor *x = vt_input(g, "x", 2, xs);
    vt_tensor *y = vt_linear(g, x, vt_param(g, "fc.weight", 2, ws, (vt_init){0, 0}), NULL);
    vt_tensor *z = vt_add(g, y, x); /* must stay a no-op after the first error */
    T_CHECK(T, y == NULL && z == NULL, "bad linear returned a tensor");
    T_CHECK(T, vt_graph_finalize(g, &e) != 0, "finalize succeeded after a shape error");
    T_CHECK(T, strstr(e.msg, "linear") && strstr(e.msg, "fc.weight") && strstr(e.msg, "(4, 8)"),
            "message lacks op/tensor/shape: %s", e.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

/* An error's kind survives the messages that wrap it: vt_seterr_from, and a graph's first error (here out of memory,
 * as vt_alloc sets it) through vt_graph_finalize; a plain vt_seterr is VT_E_FAILED, and only the first error counts. */
static void check_error_codes(vt_test *T) {
    vt_err cause = {0}, e = {0};
    vt_seterr_code(&cause, VT_E_IO, "cannot open x: No such file or directory");
    vt_seterr_from(&e, &cause, "weights: %s", cause.msg);
    T_CHECK(T, e.code == VT_E_IO && strstr(e.msg, "weights: cannot open x"), "from: %d %s", e.code, e.msg);
    vt_seterr(&e, "a second error");
    T_CHECK(T, e.code == VT_E_IO && !strstr(e.msg, "second"), "the first error stays: %d %s", e.code, e.msg);
    vt_clearerr(&e);
    vt_seterr(&e, "plain");
    T_CHECK(T, e.code == VT_E_FAILED, "plain: %d", e.code);
    vt_err none = {0};
    vt_params *P = vt_params_new(&none);
    vt_graph *g = vt_graph_new(P, 0, &none);
    vt_seterr_code(&g->err, VT_E_NOMEM, "out of memory (a node's buffer)");
    vt_clearerr(&e);
    T_CHECK(T, vt_graph_finalize(g, &e) != 0 && e.code == VT_E_NOMEM && strstr(e.msg, "out of memory"),
            "finalize keeps the kind: %d %s", e.code, e.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

/* Graph 0 (k = 0) keeps a copy of its n floats at v in *ref; a later graph's grow *err by their largest difference
 * from it and *mag by the copy's largest magnitude. */
static void keep_or_compare(int k, const float *v, int64_t n, float **ref, float *err, float *mag) {
    if (!k) {
        *ref = malloc(sizeof(float) * (size_t)n);
        if (*ref) memcpy(*ref, v, sizeof(float) * (size_t)n);
        return;
    }
    for (int64_t i = 0; *ref && i < n; i++) {
        *err = fmaxf(*err, fabsf(v[i] - (*ref)[i]));
        *mag = fmaxf(*mag, fabsf((*ref)[i]));
    }
}

/* Checks the kept values of a comparison (output, dx, dw, db; bit j of `which`: value j compared) within 1e-5 of
 * their scale, and non-zero somewhere when `nonzero`, naming them after label; frees the copies. */
static void check_kept(vt_test *T, float *ref[4], const float err[4], const float mag[4], unsigned which,
                       int nonzero, const char *label) {
    const char *what[4] = {"output", "dx", "dw", "db"};
    for (int j = 0; j < 4; j++) {
        if (which >> j & 1u)
            T_CHECK(T, ref[j] && (!nonzero || mag[j] > 0.0f) && err[j] <= 1e-5f * fmaxf(mag[j], 1.0f),
                    "%s: %s differs by %g (max %g)", label, what[j], (double)err[j], (double)mag[j]);
        free(ref[j]);
    }
}

/* Runs graphs g[0] and g[1] of one linear on P's values (seed 3) and the same weights r of the loss Σ y·r, forward,
 * and backward when they are train graphs (nchk 4), keeping graph 0's output and the gradients of p = {x, w, b}
 * (the first nchk - 1 of them) in ref and comparing graph 1's with them (keep_or_compare). */
static void run_linear_pair(vt_params *P, vt_graph *const g[2], vt_tensor *const y[2], vt_tensor *const r[2],
                            vt_tensor *const p[3], int nchk, float *ref[4], float err[4], float mag[4]) {
    vt_params_init(P, 3);
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < r[k]->numel; i++) r[k]->data[i] = (float)((i * 37 % 11) - 5) * 0.1f;
        vt_graph_forward(g[k]);
        vt_params_zero_grad(P);
        if (g[k]->training) vt_graph_backward(g[k]);
        keep_or_compare(k, y[k]->data, y[k]->numel, &ref[0], &err[0], &mag[0]);
        for (int j = 1; j < nchk; j++) keep_or_compare(k, p[j - 1]->grad, p[j - 1]->numel, &ref[j], &err[j], &mag[j]);
    }
}

/* vt_gelu_linear (GELU in the GEMM's prologue, row panels) against the plain chain vt_linear(vt_gelu(x)): outputs
 * and the gradients of x, w and b, over enough rows for several panels per thread, on two threads. Variants: 0 x a
 * parameter, 1 x an activation with a second reader (its gradient added to), 2 the weight an input (no gradient: dW
 * skipped), 3 x an input (no gradient: dx skipped), 4 x an activation read only here (its gradient written, not
 * added to). rows x 24 -> outs: 3000 -> 16 runs backward by row panels,
 * 1100 -> 600 over whole arrays (its panels' scratch would exceed x's size). */
static void check_gelu_linear_plain(vt_test *T, int variant, int rows, int outs) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const vt_threads_env env = vt_threads_enter(2);
    const int xs[2] = {rows, 24}, ws[2] = {outs, 24}, bs[1] = {outs}, ys[2] = {rows, outs};
    vt_tensor *y[2], *r[2], *x = NULL, *w = NULL, *b = NULL, *wi[2] = {0}, *xi[2] = {0};
    vt_graph *g[2];
    float *ref[4] = {0}, err[4] = {0}, mag[4] = {0};
    for (int k = 0; k < 2; k++) {
        g[k] = vt_graph_new(P, 1, &e);
        xi[k] = variant == 3 ? vt_input(g[k], "x", 2, xs) : NULL;
        wi[k] = variant == 2 ? vt_input(g[k], "w", 2, ws) : NULL;
        x = xi[k] ? xi[k] : vt_param(g[k], "x", 2, xs, (vt_init){VT_INIT_NORMAL, 1.5f});
        w = wi[k] ? wi[k] : vt_param(g[k], "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
        b = vt_param(g[k], "b", 1, bs, (vt_init){VT_INIT_NORMAL, 0.3f});
        vt_tensor *xa = variant == 1 || variant == 4 ? vt_scale(g[k], x, 1.5f) : x;
        y[k] = k ? vt_linear(g[k], vt_gelu(g[k], xa), w, b) : vt_gelu_linear(g[k], xa, w, b);
        r[k] = vt_input(g[k], "r", 2, ys);
        vt_tensor *loss = vt_sum(g[k], vt_mul(g[k], y[k], r[k]));
        /* variant 1: xa's other reader runs its backward first, so the linear adds to xa's gradient */
        if (variant == 1) loss = vt_add(g[k], loss, vt_sum(g[k], vt_mul(g[k], xa, xa)));
        vt_graph_set_loss(g[k], loss);
        vt_graph_output(g[k], y[k]);
        T_CHECK(T, vt_graph_finalize(g[k], &e) == 0, "gelu_linear graph %d: %s", k, e.msg);
    }
    vt_params_init(P, 7);
    for (int64_t i = 0; i < r[0]->numel; i++) r[0]->data[i] = r[1]->data[i] = (float)((i * 37 % 11) - 5) * 0.1f;
    for (int k = 0; k < 2 && variant == 2 && wi[k]; k++)
        for (int64_t i = 0; i < wi[k]->numel; i++) wi[k]->data[i] = (float)((i * 13 % 7) - 3) * 0.1f;
    for (int k = 0; k < 2 && variant == 3 && xi[k]; k++)
        for (int64_t i = 0; i < xi[k]->numel; i++) xi[k]->data[i] = (float)((i * 29 % 17) - 8) * 0.2f;
    const vt_tensor *t[4] = {y[0], x, w, b};
    for (int k = 0; k < 2 && !e.msg[0]; k++) {
        vt_graph_forward(g[k]);
        vt_params_zero_grad(P);
        vt_graph_backward(g[k]);
        for (int j = 0; j < 4; j++) {
            if ((j == 1 && variant == 3) || (j == 2 && variant == 2)) continue;
            keep_or_compare(k, j ? t[j]->grad : y[k]->data, t[j]->numel, &ref[j], &err[j], &mag[j]);
        }
    }
    char label[96];
    snprintf(label, sizeof label, "gelu_linear vs linear(gelu), variant %d, %d -> %d", variant, rows, outs);
    check_kept(T, ref, err, mag, variant == 3 ? 0xDu : variant == 2 ? 0xBu : 0xFu, 0, label);
    vt_graph_free(g[0]);
    vt_graph_free(g[1]);
    vt_params_free(P);
    vt_threads_leave(env);
}

/* GEMM rule 15 (vt_gemm_wt_first): a train graph's linear with the weight transposed first equals the same graph
 * without the rule (outputs, dx, dw, db within float rounding), for every forward path of the reference linear: one
 * threaded product (plain, 1000 rows, 48 -> 32: neither M <= 2K nor K >= 2N, so not rule 5's primitive), row panels
 * with the GELU prologue (1280 rows, 128 -> 96, backward by panels) and with the GELU epilogue (1024 rows, 64 -> 64),
 * and a fused residual with drop-path (1000 rows in 8 samples, 48 -> 48, p 0.5: kept and dropped samples in one
 * product's row runs); and an eval graph's GELU-prologue linear by row panels (output only), on two threads. */
static void check_linear_wt_first(vt_test *T) {
    static const struct {
        int form, rows, in, out;
    } cs[5] = {{0, 1000, 48, 32}, {1, 1280, 128, 96}, {2, 1024, 64, 64}, {3, 1000, 48, 48}, {4, 1280, 128, 96}};
    const vt_threads_env env = vt_threads_enter(2);
    for (int c = 0; c < 5; c++) {
        const int train = cs[c].form != 4, nchk = train ? 4 : 1;
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        const int R = cs[c].rows, xs[2] = {R, cs[c].in}, ws[2] = {cs[c].out, cs[c].in}, bs[1] = {cs[c].out},
                  ys[2] = {R, cs[c].out}, rs3[3] = {8, R / 8, cs[c].out}, xs3[3] = {8, R / 8, cs[c].in};
        vt_graph *g[2];
        vt_tensor *y[2] = {0}, *r[2] = {0}, *x = NULL, *w = NULL, *b = NULL, *res = NULL;
        for (int k = 0; k < 2; k++) {
            g[k] = vt_graph_new(P, train, &e);
            if (!g[k]) break;
            g[k]->gemm.wt_first = k; /* graph 1 takes the rule wherever its other conditions hold */
            g[k]->gemm.intel = 0;       /* rule 5's Intel case would give case 0 the primitive */
            g[k]->seed = 5;
            const int three = cs[c].form == 3;
            x = vt_param(g[k], "x", three ? 3 : 2, three ? xs3 : xs, (vt_init){VT_INIT_NORMAL, 1.0f});
            w = vt_param(g[k], "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
            b = vt_param(g[k], "b", 1, bs, (vt_init){VT_INIT_NORMAL, 0.3f});
            if (three) res = vt_param(g[k], "res", 3, rs3, (vt_init){VT_INIT_NORMAL, 1.0f});
            y[k] = cs[c].form == 1 || cs[c].form == 4 ? vt_gelu_linear(g[k], x, w, b)
                   : cs[c].form == 2 ? vt_linear_gelu(g[k], x, w, b)
                   : three           ? vt_residual_drop(g[k], res, vt_linear(g[k], x, w, b), 0.5f)
                                     : vt_linear(g[k], x, w, b);
            r[k] = vt_input(g[k], "r", three ? 3 : 2, three ? rs3 : ys);
            if (train) vt_graph_set_loss(g[k], vt_sum(g[k], vt_mul(g[k], y[k], r[k])));
            vt_graph_output(g[k], y[k]);
            T_CHECK(T, vt_graph_finalize(g[k], &e) == 0, "rule 15 case %d, graph %d: %s", c, k, e.msg);
        }
        /* the linear node of each graph: run by the reference forward (no kernel) on AVX-512, and graph 1's forward
         * scratch holds wᵀ (out·in floats) on top of graph 0's wherever the rule can hold (oneDNN's kernels at
         * AVX2 or better, OpenBLAS not ahead) */
        const vt_node *ln[2] = {0};
        for (int k = 0; k < 2; k++)
            for (int i = 0; g[k] && i < g[k]->nn; i++)
                if (strcmp(g[k]->nodes[i]->op->name, "linear") == 0) ln[k] = g[k]->nodes[i];
        const vt_gemm_plan *gp = g[1] ? &g[1]->gemm : NULL;
        const int can = gp && gp->onednn >= VT_ISA_AVX2 && gp->openblas <= gp->onednn && !gp->bf16;
        T_CHECK(T, ln[0] && ln[1] && (gp->onednn < VT_ISA_AVX512 || (!ln[0]->kern && !ln[1]->kern)),
                "rule 15 case %d: the reference forward runs the linear", c);
        const int64_t f0 = ln[0] && ln[0]->fws ? ln[0]->fws->numel : 0, f1 = ln[1] && ln[1]->fws ? ln[1]->fws->numel : 0;
        T_CHECK(T, !can || !ln[1] || ln[1]->kern || f1 - f0 >= (int64_t)cs[c].out * cs[c].in,
                "rule 15 case %d: graph 1 keeps wT in its forward scratch (%lld against %lld floats)", c,
                (long long)f1, (long long)f0);
        float *ref[4] = {0}, err[4] = {0}, mag[4] = {0};
        if (!e.msg[0]) run_linear_pair(P, g, y, r, (vt_tensor *const[3]){x, w, b}, nchk, ref, err, mag);
        char label[96];
        snprintf(label, sizeof label, "rule 15 case %d (%d rows, %d -> %d)", c, R, cs[c].in, cs[c].out);
        check_kept(T, ref, err, mag, (1u << nchk) - 1u, 1, label);
        vt_graph_free(g[0]);
        vt_graph_free(g[1]);
        vt_params_free(P);
    }
    vt_threads_leave(env);
}

/* GEMM rule 5's Intel case in a train graph (vt_gemm_plan.intel set by hand): a linear without an activation (bias
 * and a fused residual; 1000 rows, 48 -> 32, neither M <= 2K nor K >= 2N) runs oneDNN's matmul primitive wherever
 * oneDNN's kernels are AVX-512 and OpenBLAS's not ahead, one with GELU after it (vt_linear_gelu) stays on the
 * reference forward, and both equal the graph without the case (outputs, dx, dw, db within float rounding). */
static void check_linear_train_prim(vt_test *T) {
    const vt_threads_env env = vt_threads_enter(2);
    for (int act = 0; act < 2; act++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        const int R = 1000, xs[2] = {R, 48}, ws[2] = {32, 48}, bs[1] = {32}, ys[2] = {R, 32};
        vt_graph *g[2] = {0};
        vt_tensor *y[2] = {0}, *r[2] = {0}, *t[4] = {0};
        const vt_node *ln[2] = {0};
        for (int k = 0; k < 2; k++) {
            g[k] = vt_graph_new(P, 1, &e);
            if (!g[k]) break;
            g[k]->gemm.intel = k;
            g[k]->gemm.wt_first = 0;
            t[1] = vt_param(g[k], "x", 2, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
            t[2] = vt_param(g[k], "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.3f});
            t[3] = vt_param(g[k], "b", 1, bs, (vt_init){VT_INIT_NORMAL, 0.3f});
            vt_tensor *res = vt_param(g[k], "res", 2, ys, (vt_init){VT_INIT_NORMAL, 1.0f});
            y[k] = act ? vt_linear_gelu(g[k], t[1], t[2], t[3])
                       : vt_residual(g[k], res, vt_linear(g[k], t[1], t[2], t[3]));
            r[k] = vt_input(g[k], "r", 2, ys);
            vt_graph_set_loss(g[k], vt_sum(g[k], vt_mul(g[k], y[k], r[k])));
            vt_graph_output(g[k], y[k]);
            T_CHECK(T, vt_graph_finalize(g[k], &e) == 0, "rule 5 train case, graph %d: %s", k, e.msg);
            for (int i = 0; i < g[k]->nn; i++)
                if (strcmp(g[k]->nodes[i]->op->name, "linear") == 0) ln[k] = g[k]->nodes[i];
        }
        /* the kernels are checked at the AVX-512 tier of the automatic dispatch (the AVX2 tier gives every shape
         * the primitive); elsewhere only the values */
        const vt_gemm_plan *gp = g[1] ? &g[1]->gemm : NULL;
        const int tier = gp && gp->force == VT_GEMM_AUTO && gp->onednn >= VT_ISA_AVX512 && !gp->bf16;
        const int can = tier && gp->openblas <= gp->onednn;
        const char *k1 = ln[1] && ln[1]->kern ? ln[1]->kern->name : "reference";
        T_CHECK(T, ln[0] && ln[1] &&
                       (!tier || (!ln[0]->kern && (act ? !ln[1]->kern : !can || !strcmp(k1, "linear.onednn_matmul")))),
                "rule 5 train case, %s: the Intel graph's linear runs %s", act ? "GELU after" : "no activation", k1);
        float *ref[4] = {0}, err[4] = {0}, mag[4] = {0};
        if (!e.msg[0]) run_linear_pair(P, g, y, r, t + 1, 4, ref, err, mag);
        check_kept(T, ref, err, mag, 0xFu, 1, act ? "rule 5 train case, GELU after" : "rule 5 train case, residual");
        vt_graph_free(g[0]);
        vt_graph_free(g[1]);
        vt_params_free(P);
    }
    vt_threads_leave(env);
}

/* The fused activations equal the plain chains (linear, then the activation op) within float rounding, on one
 * multi-threaded sgemm (few rows), on row panels (many rows) and on oneDNN's primitive (inference, where GEMM rule 5
 * picks it: ReLU as its post-op, GELU after it). */
static void check_linear_act_fusion(vt_test *T) {
    static const int rows[2] = {7, 1100};
    for (int k = 0; k < 2; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        const int xs[2] = {rows[k], 9}, ws[2] = {6, 9}, bs = 6;
        vt_tensor *x = vt_input(g, "x", 2, xs), *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *b = vt_param(g, "b", 1, &bs, (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *y[4] = {vt_linear_relu(g, x, w, b), vt_relu(g, vt_linear(g, x, w, b)), vt_linear_gelu(g, x, w, b),
                           vt_gelu(g, vt_linear(g, x, w, b))};
        for (int i = 0; i < 4; i++) vt_graph_output(g, y[i]);
        int ok = vt_graph_finalize(g, &e) == 0;
        T_CHECK(T, ok, "linear+act graph: %s", e.msg);
        if (ok) {
            vt_params_init(P, 5);
            vt_rng r;
            vt_rng_seed(&r, 9);
            for (int64_t i = 0; i < x->numel; i++) x->data[i] = vt_rng_normal(&r);
            vt_graph_forward(g);
            for (int a = 0; a < 2; a++) {
                /* within float rounding: the fused form's one-thread GEMMs over row panels may sum in another order
                 * than the chain's one GEMM (2e-7 with generic SSE kernels; equal on AVX2 and AVX-512 ones); a
                 * missing or wrong activation is off by O(1) */
                const vt_node *nd = g->nodes[y[2 * a]->prod];
                const int post = nd->kern && !strcmp(nd->kern->name, "linear.onednn_matmul");
                float err = 0.0f;
                for (int64_t i = 0; i < y[2 * a]->numel; i++) {
                    const float u = y[2 * a]->data[i], v = y[2 * a + 1]->data[i];
                    err = fmaxf(err, fabsf(u - v) / fmaxf(1.0f, fabsf(v)));
                }
                T_CHECK(T, err <= 1e-6f, "fused linear+%s (%s) differs from the plain chain by %g (%d rows)",
                        a ? "GELU" : "ReLU", post ? "oneDNN primitive" : "sgemm", (double)err, rows[k]);
            }
        }
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* An inference graph's linear layers keep the weights' packed copies (rule 12, linear.onednn_conv1x1: oneDNN's AVX2
 * tier, AMD's AVX-512) current: after vt_params_init, after values written directly and vt_params_changed, and after
 * an AdamW step with no training forward before it (gradients set by the caller), the next forward equals
 * x·wᵀ + b (+ r) of the new weights, computed here in double precision. */
static void check_linear_repack(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int R = 50, Ci = 24, Co = 16, xs[2] = {R, Ci}, ws[2] = {Co, Ci}, rs[2] = {R, Co};
    vt_tensor *x = vt_input(g, "x", 2, xs), *r = vt_input(g, "r", 2, rs);
    vt_tensor *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *b = vt_param(g, "b", 1, &Co, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *y[2] = {vt_linear(g, x, w, b), vt_residual(g, r, vt_linear(g, x, w, NULL))};
    for (int i = 0; i < 2; i++) vt_graph_output(g, y[i]);
    const int ok = vt_graph_finalize(g, &e) == 0;
    T_CHECK(T, ok, "linear graph: %s", e.msg);
    vt_rng rng;
    vt_rng_seed(&rng, 3);
    for (int64_t i = 0; ok && i < x->numel; i++) x->data[i] = vt_rng_normal(&rng);
    for (int64_t i = 0; ok && i < r->numel; i++) r->data[i] = vt_rng_normal(&rng);
    for (int round = 0; ok && round < 4; round++) {
        if (round < 2) {
            vt_params_init(P, 11 + (uint64_t)round);
        } else if (round == 2) {
            for (int64_t i = 0; i < w->numel; i++) w->data[i] = -0.5f * w->data[i] + 0.25f;
            vt_params_changed(P);
        } else {
            vt_adamw o = {0};
            T_CHECK(T, vt_adamw_init(&o, P, 0.9f, 0.999f, 1e-8f, 0.0f, &e) == 0, "adamw: %s", e.msg);
            for (int i = 0; i < o.n; i++)
                for (int64_t j = 0; j < o.p[i]->numel; j++) o.p[i]->grad[j] = (j % 3) - 1.0f;
            vt_adamw_step(&o, 0.1f); /* moves each weight with a non-zero gradient by 0.1 */
            vt_adamw_free(&o);
        }
        vt_graph_forward(g);
        double err = 0.0;
        for (int i = 0; i < R; i++)
            for (int o = 0; o < Co; o++) {
                double s = 0.0;
                for (int k = 0; k < Ci; k++) s += (double)x->data[i * Ci + k] * w->data[o * Ci + k];
                err = t_worse(err, fabs(y[0]->data[i * Co + o] - (s + b->data[o])));
                err = t_worse(err, fabs(y[1]->data[i * Co + o] - (s + r->data[i * Co + o])));
            }
        const vt_node *nd = g->nodes[y[0]->prod];
        T_CHECK(T, err <= 1e-4, "linear (%s) after weight change %d off by %g", nd->kern ? nd->kern->name : "reference",
                round, err);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* ---- the plain MLP as one inference op (vt_ffn_eval) against the op chain ---- */

typedef struct {
    const char *type; /* "mlp" or "cffn" (deployed form) */
    int hidden;
} mlp_case;

static vt_tensor *b_mlp(vt_graph *g, vt_tensor *x, const void *ctx) {
    const mlp_case *c = ctx;
    static const vt_block_opts opts = {.cffn_t = 2.0f / 3.0f, .cffn_r = 2};
    const vt_ffn_ctx f = {.hidden = c->hidden, .winit = VT_INIT_W02, .opts = &opts};
    return vt_residual(g, x, vt_ffn_build(g, c->type, "mlp", x, &f));
}

/* The fused FFN ops' rules (vt_ffn_wanted, vt_dwffn_wanted) in an eval graph: fp32 and a bf16 plan without AMX take
 * the ops at PVTv2-b1's and Swin-T's stage-1 sizes; a bf16 plan on an AMX CPU (flags set by hand) takes the chains,
 * but for the banded FFN over more than 12544 rows; a training graph never takes them. */
static void check_ffn_rules(vt_test *T) {
    for (int k = 0; k < 4; k++) { /* 0: fp32; 1: bf16 without AMX; 2: bf16 with AMX; 3: training */
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, k == 3, &e);
        T_CHECK(T, g != NULL, "graph: %s", e.msg);
        if (!g) {
            vt_params_free(P);
            continue;
        }
        g->gemm.bf16 = k == 1 || k == 2;
        g->gemm.amx = k == 2;
        const int band1 = vt_dwffn_wanted(g, 3136, 64, 512, 64), band4 = vt_dwffn_wanted(g, 12544, 64, 512, 64);
        const int band16 = vt_dwffn_wanted(g, 50176, 64, 512, 64), mlp = vt_ffn_wanted(g, 50176, 96, 384, 96);
        T_CHECK(T, band1 == (k < 2) && band4 == (k < 2) && band16 == (k < 3) && mlp == (k < 2),
                "case %d: banded FFN at 3136 / 12544 / 50176 rows %d %d %d, MLP op %d", k, band1, band4, band16, mlp);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* Through the FFN builders at sizes the rule takes (a hidden map of 2^22 floats or more; the last band partial), the
 * residual fused into the op (mlp) or into the deployed cFFN's fc2_v after it; and the builder's errors. */
static void check_ffn_fused(vt_test *T) {
    static const mlp_case cases[] = {{"mlp", 512}, {"cffn", 520}};
    const int xs[3] = {2, 4100, 8};
    for (int i = 0; i < 2; i++) {
        char tag[64];
        snprintf(tag, sizeof tag, "%s eval 2x4100 C8 hidden %d", cases[i].type, cases[i].hidden);
        gc_compare_eval_fused(T, tag, 3, xs, b_mlp, &cases[i], "ffn", 1e-5);
    }
    static const char *want[] = {"no backward", "weights must be"};
    for (int k = 0; k < 2; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, k == 0, &e);
        const int x2[2] = {5, 8}, w1s[2] = {16, 8}, hs[1] = {16}, w2s[2] = {8, k == 1 ? 15 : 16};
        vt_tensor *y = vt_ffn_eval(g, vt_input(g, "x", 2, x2), vt_input(g, "w1", 2, w1s), vt_input(g, "b1", 1, hs),
                                   vt_input(g, "w2", 2, w2s), NULL);
        T_CHECK(T, !y && strstr(g->err.msg, want[k]), "ffn error %d: '%s' (want '%s')", k, g->err.msg, want[k]);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* Eval graphs run a constant node (inputs all parameters) once per parameter generation: its output keeps its own
 * buffer across forwards while later nodes' buffers reuse the arena, a second forward skips it and gives the same
 * output, vt_params_changed and a training graph's forward on the same store make it run again. */
static void check_constant_nodes(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e), *gt = vt_graph_new(P, 1, &e);
    const int R = 8, C = 8, xs[2] = {R, C}, ws[2] = {C, C};
    vt_tensor *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *s = vt_param(g, "s", 1, &C, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *x = vt_input(g, "x", 2, xs);
    const int col[2] = {C, 1};
    vt_tensor *wf = vt_mul(g, w, vt_reshape(g, s, 2, col)); /* constant: w scaled per row, added to layer 1 */
    vt_tensor *h = x;
    for (int k = 0; k < 4; k++) /* wf added in the first layer only: later buffers (its size) could take its place */
        h = vt_unary(g, k ? vt_linear(g, h, w, NULL) : vt_add(g, vt_linear(g, h, w, NULL), wf), VT_SIGMOID, 0.0f);
    vt_graph_output(g, h);
    vt_tensor *xt = vt_input(gt, "x", 2, xs);
    vt_graph_set_loss(gt, vt_sum(gt, vt_linear(gt, xt, vt_param(gt, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 1.0f}),
                                               NULL)));
    const int ok = vt_graph_finalize(g, &e) == 0 && vt_graph_finalize(gt, &e) == 0 &&
                   vt_graph_enable_profile(g, &e) == 0;
    T_CHECK(T, ok, "constant-node graphs: %s", e.msg);
    T_CHECK(T, ok && g->nodes[vt_root(wf)->prod]->constant && !g->nodes[h->prod]->constant,
            "the scaled weight is a constant node, the output is not");
    float first[64];
    vt_params_init(P, 3);
    for (int64_t i = 0; ok && i < x->numel; i++) x->data[i] = 0.1f * (float)(i % 7) - 0.3f;
    for (int round = 0; ok && round < 4; round++) {
        if (round == 2) { /* a new weight, announced */
            for (int64_t i = 0; i < w->numel; i++) w->data[i] *= 0.5f;
            vt_params_changed(P);
        }
        if (round == 3) vt_graph_forward(gt); /* a training forward (running statistics) counts as a change */
        const int wn = vt_root(wf)->prod;
        g->node_s[wn] = 0.0;
        vt_graph_forward(g);
        const int ran = g->node_s[wn] > 0.0;
        T_CHECK(T, ran == (round != 1), "round %d: the constant node ran %d", round, ran);
        double want = 0.0, err = 0.0;
        for (int i = 0; i < R; i++) /* the output against the four layers in double */
            for (int o = 0; o < C; o++) {
                double v[8], t[8];
                for (int k = 0; k < C; k++) v[k] = x->data[i * C + k];
                for (int layer = 0; layer < 4; layer++) {
                    for (int a = 0; a < C; a++) {
                        double acc = 0.0;
                        for (int k = 0; k < C; k++) acc += v[k] * w->data[a * C + k];
                        if (layer == 0) acc += (double)w->data[i * C + a] * s->data[i];
                        t[a] = 1.0 / (1.0 + exp(-acc));
                    }
                    memcpy(v, t, sizeof v);
                }
                want = fmax(want, fabs(v[o]));
                err = t_worse(err, fabs(v[o] - h->data[i * C + o]));
            }
        T_CHECK(T, err <= 1e-5 * fmax(1.0, want), "round %d: output off by %g", round, err);
        if (round == 0) memcpy(first, h->data, sizeof first);
        if (round == 1) T_CHECK(T, !memcmp(first, h->data, sizeof first), "a skipped constant changed the output");
    }
    vt_graph_free(g);
    vt_graph_free(gt);
    vt_params_free(P);
}

/* vt_residual fuses into the producing linear (no add node) and then refuses further uses of the linear's output. */
static void check_residual_fusion(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    int xs[2] = {4, 8}, ws[2] = {8, 8};
    vt_tensor *x = vt_input(g, "x", 2, xs);
    vt_tensor *h = vt_linear(g, x, vt_param(g, "fc.weight", 2, ws, (vt_init){0, 0}), NULL);
    vt_tensor *y = vt_residual(g, x, h);
    T_CHECK(T, y && g->nn == 1, "residual was not fused into the linear (%d nodes)", g->nn);
    T_CHECK(T, vt_add(g, y, h) == NULL && vt_graph_finalize(g, &e) != 0 && strstr(e.msg, "fused into a residual"),
            "reusing a fused linear output must fail: %s", e.msg);
    vt_graph_free(g);
    vt_params_free(P);
}

/* vt_residual_drop fused into the linear (one node in train graphs, none of drop_path or add): each sample's rows are
 * either the residual exactly (dropped, at rate p) or residual + (x·wᵀ + b)/(1 − p) (the reference GEMM); in eval
 * graphs plain x + x·wᵀ + b. */
static void check_residual_drop(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int B = 600, N = 3, Ci = 5, Co = 4, xs[3] = {B, N, Ci}, rs[3] = {B, N, Co}, ws[2] = {Co, Ci};
    const float p = 0.3f;
    for (int train = 1; train >= 0; train--) {
        vt_graph *g = vt_graph_new(P, train, &e);
        vt_tensor *x = vt_input(g, "x", 3, xs), *r = vt_input(g, "r", 3, rs);
        vt_tensor *w = vt_param(g, "fc.weight", 2, ws, (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *b = vt_param(g, "fc.bias", 1, &Co, (vt_init){VT_INIT_NORMAL, 1.0f});
        vt_tensor *y = vt_residual_drop(g, r, vt_linear(g, x, w, b), p);
        vt_graph_output(g, y);
        T_CHECK(T, g->nn == 1, "train %d: the drop-path residual is not fused (%d nodes)", train, g->nn);
        const int ok = vt_graph_finalize(g, &e) == 0;
        T_CHECK(T, ok, "%s", e.msg);
        if (!ok) {
            vt_graph_free(g);
            continue;
        }
        vt_rng rng;
        vt_rng_seed(&rng, 3);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = vt_rng_normal(&rng);
        for (int64_t i = 0; i < r->numel; i++) r->data[i] = vt_rng_normal(&rng);
        for (int i = 0; i < Co * Ci; i++) w->data[i] = vt_rng_normal(&rng);
        for (int i = 0; i < Co; i++) b->data[i] = vt_rng_normal(&rng);
        vt_graph_forward(g);
        float ref[N * Co];
        int dropped = 0, bad = 0;
        for (int s = 0; s < B; s++) {
            for (int i = 0; i < N * Co; i++) ref[i] = b->data[i % Co];
            vt_gemm_ref(0, 1, N, Co, Ci, 1.0f, x->data + s * N * Ci, Ci, w->data, Ci, 1.0f, ref, Co);
            const float *rr = r->data + s * N * Co, *yy = y->data + s * N * Co;
            int drop = train, keep = 1;
            for (int i = 0; i < N * Co; i++) {
                drop &= yy[i] == rr[i];
                const float f = train ? 1.0f / (1.0f - p) : 1.0f;
                keep &= fabsf(yy[i] - rr[i] - f * ref[i]) <= 1e-4f * (1.0f + fabsf(ref[i]));
            }
            dropped += drop;
            bad += !drop && !keep;
        }
        T_CHECK(T, bad == 0, "train %d: %d samples neither dropped nor r + (x·wᵀ + b)/(1 − p)", train, bad);
        T_CHECK(T, train ? fabs(dropped / (double)B - p) < 0.06 : dropped == 0, "train %d: dropped %d of %d samples at "
                "p = %g", train, dropped, B, (double)p);
        vt_graph_free(g);
    }
    vt_params_free(P);
}

/* Drop-path: per-sample keep/drop at rate p with 1/(1-p) scaling in train graphs, identity (no node) in eval graphs
 * and at p = 0, the same mask for the same (seed, node), another one for another seed, and a bad p rejected. */
static void check_drop_path(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    const int B = 4000, s[3] = {B, 2, 3};
    const float p = 0.25f;
    vt_graph *g = vt_graph_new(P, 1, &e), *ge = vt_graph_new(P, 0, &e);
    vt_tensor *x = vt_input(g, "x", 3, s), *y = vt_drop_path(g, x, p), *xe = vt_input(ge, "x", 3, s);
    vt_graph_output(g, y);
    T_CHECK(T, vt_drop_path(ge, xe, p) == xe && vt_drop_path(g, x, 0.0f) == x, "eval / p = 0 must be the identity");
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "%s", e.msg);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] = 1.0f + (float)(i % 6);
    int dropped = 0, bad = 0;
    float *first = malloc(sizeof(float) * (size_t)B);
    vt_graph_forward(g);
    for (int b = 0; b < B; b++) {
        const float f = y->data[b * 6] / x->data[b * 6];
        first[b] = f;
        dropped += f == 0.0f;
        for (int i = 0; i < 6; i++) bad += y->data[b * 6 + i] != x->data[b * 6 + i] * f;
        bad += f != 0.0f && f != 1.0f / (1.0f - p);
    }
    T_CHECK(T, bad == 0, "%d elements are neither dropped nor scaled by 1/(1-p) as one sample", bad);
    T_CHECK(T, fabs(dropped / (double)B - p) < 0.03, "dropped %d of %d samples at p = %g", dropped, B, (double)p);
    int same = 1, diff = 0;
    vt_graph_forward(g);
    for (int b = 0; b < B; b++) same &= y->data[b * 6] / x->data[b * 6] == first[b];
    g->seed ^= 12345;
    vt_graph_forward(g);
    for (int b = 0; b < B; b++) diff += y->data[b * 6] / x->data[b * 6] != first[b];
    T_CHECK(T, same && diff > B / 10, "masks: same seed repeats (%d), another seed differs in %d samples", same, diff);
    T_CHECK(T, vt_drop_path(ge, xe, 1.0f) == NULL && strstr(ge->err.msg, "[0, 1)"), "p = 1: %s", ge->err.msg);
    free(first);
    vt_graph_free(g);
    vt_graph_free(ge);
    vt_params_free(P);
}

/* Subnormal floats are flushed to zero in graph threads (issue: --lr 10 made training 20x slower): a scaled sum of a
 * large tensor of subnormals (so every OpenMP thread takes part) comes out exactly zero. */
static void check_denormals_flushed(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int n = 1 << 16;
    vt_tensor *x = vt_input(g, "x", 1, &n), *y = vt_scale(g, vt_add(g, x, x), 0.5f);
    vt_graph_output(g, y);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "%s", e.msg);
    for (int i = 0; i < n; i++) x->data[i] = 1e-39f; /* subnormal (the smallest normal float is 1.18e-38) */
    vt_graph_forward(g);
    int nonzero = 0;
    for (int i = 0; i < n; i++) nonzero += y->data[i] != 0.0f;
    T_CHECK(T, nonzero == 0, "%d of %d outputs kept a subnormal value", nonzero, n);
    vt_graph_free(g);
    vt_params_free(P);
}

/* A graph runs on the threads it was built for (vt_graph.threads), whatever the caller's OpenMP setting when it
 * runs: its per-thread scratch (the GELU-prologue linear's row panels here) is sized for that count, and the
 * caller's setting is restored after each run. */
static void check_threads_fixed(vt_test *T) {
    const int saved = omp_get_max_threads();
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    omp_set_num_threads(2);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs[2] = {1100, 24}, ws[2] = {16, 24}, bs[1] = {16};
    vt_tensor *x = vt_param(g, "x", 2, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *w = vt_param(g, "w", 2, ws, (vt_init){VT_INIT_NORMAL, 0.2f});
    vt_tensor *y = vt_gelu_linear(g, x, w, vt_param(g, "b", 1, bs, (vt_init){VT_INIT_NORMAL, 0.2f}));
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, y)));
    vt_graph_output(g, y);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0 && g->threads == 2, "finalize on 2 threads: %s", e.msg);
    vt_params_init(P, 5);
    float *ref = vt_alloc(sizeof(float) * (size_t)(y->numel + w->numel), &e);
    for (int run = 0; ref && run < 3; run++) {
        const int caller = run == 0 ? 2 : run == 1 ? 4 : 1;
        omp_set_num_threads(caller);
        vt_params_zero_grad(P);
        vt_graph_forward(g);
        vt_graph_backward(g);
        T_CHECK(T, omp_get_max_threads() == caller, "the caller's %d threads are restored after a run", caller);
        if (run == 0) {
            memcpy(ref, y->data, sizeof(float) * (size_t)y->numel);
            memcpy(ref + y->numel, w->grad, sizeof(float) * (size_t)w->numel);
        } else {
            T_CHECK(T, !memcmp(ref, y->data, sizeof(float) * (size_t)y->numel) &&
                           !memcmp(ref + y->numel, w->grad, sizeof(float) * (size_t)w->numel),
                    "a graph built on 2 threads gives the same output and gradient when the caller has %d", caller);
        }
    }
    vt_free(ref);
    vt_graph_free(g);
    vt_params_free(P);
    omp_set_num_threads(saved);
}

/* Label smoothing against its closed form (timm's LabelSmoothingCrossEntropy, torch's label_smoothing): loss =
 * mean over rows of (1 - eps)·(-log p_y) + eps·mean_k(-log p_k), d logits = (p - ((1 - eps)·onehot + eps/K)) / B. The
 * gradient checks above only test that forward and backward agree. */
static void check_ce_smoothing(vt_test *T) {
    enum { B = 3, K = 5 };
    const float eps = 0.1f, lab[B] = {0, 4, 2};
    const int ls[2] = {B, K}, ys = B;
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    vt_tensor *z = vt_param(g, "z", 2, ls, (vt_init){VT_INIT_ZERO, 0});
    vt_tensor *y = vt_input(g, "y", 1, &ys);
    vt_tensor *loss = vt_cross_entropy(g, z, y, eps);
    vt_graph_set_loss(g, loss);
    T_CHECK(T, vt_graph_finalize(g, &e) == 0, "build: %s", e.msg);
    if (!e.msg[0]) {
        vt_rng rng;
        vt_rng_seed(&rng, 21);
        for (int i = 0; i < B * K; i++) z->data[i] = 2.0f * vt_rng_normal(&rng);
        memcpy(y->data, lab, sizeof lab);
        vt_graph_forward(g);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        double want = 0.0, gerr = 0.0;
        for (int b = 0; b < B; b++) {
            double mx = -1e30, se = 0.0, nll_mean = 0.0;
            for (int k = 0; k < K; k++) mx = fmax(mx, z->data[b * K + k]);
            for (int k = 0; k < K; k++) se += exp(z->data[b * K + k] - mx);
            for (int k = 0; k < K; k++) nll_mean += (log(se) + mx - z->data[b * K + k]) / K;
            const int t = (int)lab[b];
            want += ((1.0 - eps) * (log(se) + mx - z->data[b * K + t]) + eps * nll_mean) / B;
            for (int k = 0; k < K; k++) {
                const double p = exp(z->data[b * K + k] - mx) / se, tk = (k == t) * (1.0 - eps) + eps / K;
                gerr = t_worse(gerr, fabs(z->grad[b * K + k] - (p - tk) / B));
            }
        }
        T_CHECK(T, fabs(loss->data[0] - want) < 1e-6 * fmax(1.0, want), "smoothed loss %.8g, closed form %.8g",
                (double)loss->data[0], want);
        T_CHECK(T, gerr < 1e-6, "smoothed loss: d logits off the closed form by %g", gerr);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* A constant node built after a non-constant node whose output is dead by then (x -> sigmoid -> column mean, then the
 * scaled weight wf = w·s, then wf·mean): wf is computed once and kept from one forward to the next, so its buffer's
 * interval starts at step 0, and the sigmoid's buffer (its size, live only at steps 0-1) must not share its memory.
 * Two forwards on different inputs, each against the chain in double. */
static void check_constant_late(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int C = 16, xs[2] = {C, C}, col[2] = {C, 1}, row[2] = {1, C};
    vt_tensor *x = vt_input(g, "x", 2, xs);
    vt_tensor *m = vt_mean(g, vt_unary(g, x, VT_SIGMOID, 0.0f), 0); /* (C): column means */
    vt_tensor *w = vt_param(g, "w", 2, xs, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *s = vt_param(g, "s", 1, &C, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *wf = vt_mul(g, w, vt_reshape(g, s, 2, col));
    vt_tensor *y = vt_linear(g, wf, vt_reshape(g, m, 2, row), NULL); /* (C, 1): wf · m, wf read at every forward */
    vt_graph_output(g, y);
    const int ok = y && vt_graph_finalize(g, &e) == 0;
    T_CHECK(T, ok, "late constant graph: %s", e.msg);
    T_CHECK(T, ok && g->nodes[vt_root(wf)->prod]->constant && !g->nodes[vt_root(m)->prod]->constant,
            "wf is a constant node, the mean is not");
    vt_params_init(P, 5);
    for (int round = 0; ok && round < 2; round++) {
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = 0.37f * (float)((i * (round + 3)) % 11) - 1.6f;
        vt_graph_forward(g);
        double err = 0.0;
        for (int i = 0; i < C; i++) {
            double acc = 0.0;
            for (int k = 0; k < C; k++) {
                double mk = 0.0;
                for (int r = 0; r < C; r++) mk += 1.0 / (1.0 + exp(-(double)x->data[r * C + k]));
                acc += (double)w->data[i * C + k] * s->data[i] * (mk / C);
            }
            err = t_worse(err, fabs(acc - y->data[i]));
        }
        T_CHECK(T, err < 1e-5, "forward %d: wf · mean off by %g (the constant's buffer was shared)", round, err);
    }
    vt_graph_free(g);
    vt_params_free(P);
}

/* The per-tensor and per-node limits at their boundaries: a tensor of exactly INT_MAX elements is accepted (a graph's
 * builders, a shapes-only parameter store), 2^31 refused; a node of exactly VT_MAXIN inputs (concat of 24) builds and
 * runs. */
static void check_limits(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int most[1] = {INT_MAX}, over[2] = {65536, 32768};
    T_CHECK(T, vt_input(g, "most", 1, most) != NULL, "a tensor of INT_MAX elements: %s", g->err.msg);
    T_CHECK(T, vt_input(g, "over", 2, over) == NULL && strstr(g->err.msg, "2147483648 elements exceed"),
            "2^31 elements refused: %s", g->err.msg);
    vt_graph_free(g);
    vt_params *S = vt_params_new(&e);
    vt_err pe = {0};
    if (S) S->shapes_only = 1;
    T_CHECK(T, S && vt_params_add(S, "most", VT_PARAM, 1, most, (vt_init){VT_INIT_ZERO, 0.0f}, &pe) != NULL,
            "a parameter of INT_MAX elements (shapes only): %s", pe.msg);
    T_CHECK(T, S && vt_params_add(S, "over", VT_PARAM, 2, over, (vt_init){VT_INIT_ZERO, 0.0f}, &pe) == NULL &&
                   strstr(pe.msg, "2147483648 elements exceed"), "a parameter of 2^31 elements refused: %s", pe.msg);
    vt_params_free(S);
    g = vt_graph_new(P, 0, &e);
    vt_tensor *xs[VT_MAXIN];
    const int s2[2] = {2, 3};
    for (int i = 0; i < VT_MAXIN; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        xs[i] = vt_input(g, nm, 2, s2);
    }
    vt_tensor *c = vt_concat(g, xs, VT_MAXIN, 1);
    vt_graph_output(g, c);
    const int ok = c && vt_graph_finalize(g, &e) == 0;
    T_CHECK(T, ok, "concat of VT_MAXIN = %d inputs: %s", VT_MAXIN, ok ? "" : e.msg[0] ? e.msg : g->err.msg);
    int bad = 0;
    for (int i = 0; ok && i < VT_MAXIN; i++)
        for (int j = 0; j < 6; j++) xs[i]->data[j] = (float)(i * 10 + j);
    if (ok) vt_graph_forward(g);
    for (int i = 0; ok && i < VT_MAXIN; i++)
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 3; j++) bad += c->data[(r * VT_MAXIN + i) * 3 + j] != (float)(i * 10 + r * 3 + j);
    T_CHECK(T, ok && bad == 0, "concat of %d inputs: %d values wrong", VT_MAXIN, bad);
    vt_graph_free(g);
    vt_params_free(P);
}

/* The parameter store's checks and initialisers: a name of VT_NAMELEN characters refused (it would be stored cut), a
 * zero dimension refused, a name declared again as another kind (parameter, buffer) refused; buffers need no gradient;
 * a uniform(a) initialiser spans [-a, a), a truncated normal (std 1.5) reaches past ±1 and stays inside timm's ±2; a
 * normal one over several of vt_params_init's streams (65,536 elements each) has mean 0 and std 1, its chunks and its
 * pairs' halves are not copies or correlated, and its values are the same on 1 and 3 threads. */
static void check_params_store(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    char longname[VT_NAMELEN + 1];
    memset(longname, 'a', VT_NAMELEN);
    longname[VT_NAMELEN] = '\0';
    const int n4[1] = {4096}, z[2] = {3, 0};
    const vt_init zero = {VT_INIT_ZERO, 0.0f};
    vt_err le = {0}, ze = {0}, ke = {0};
    T_CHECK(T, P && vt_params_add(P, longname, VT_PARAM, 1, n4, zero, &le) == NULL && strstr(le.msg, "too long"),
            "a name of VT_NAMELEN = %d characters refused: %s", VT_NAMELEN, le.msg);
    longname[VT_NAMELEN - 1] = '\0';
    T_CHECK(T, P && vt_params_add(P, longname, VT_PARAM, 1, n4, zero, &e) != NULL && vt_params_find(P, longname),
            "a name of %d characters taken: %s", VT_NAMELEN - 1, e.msg);
    T_CHECK(T, P && vt_params_add(P, "z", VT_PARAM, 2, z, zero, &ze) == NULL && strstr(ze.msg, "dimension 1 is 0"),
            "a zero dimension refused: %s", ze.msg);
    vt_tensor *u = P ? vt_params_add(P, "u", VT_PARAM, 1, n4, (vt_init){VT_INIT_UNIFORM, 0.5f}, &e) : NULL;
    vt_tensor *t = P ? vt_params_add(P, "t", VT_PARAM, 1, n4, (vt_init){VT_INIT_TRUNC_NORMAL, 1.5f}, &e) : NULL;
    vt_tensor *b = P ? vt_params_add(P, "b", VT_BUFFER, 1, n4, zero, &e) : NULL;
    const int nn[1] = {3 * 65536 + 1001}, n2[1] = {4096};
    vt_tensor *nt = P ? vt_params_add(P, "n", VT_PARAM, 1, nn, (vt_init){VT_INIT_NORMAL, 1.0f}, &e) : NULL;
    vt_tensor *nt2 = P ? vt_params_add(P, "n2", VT_PARAM, 1, n2, (vt_init){VT_INIT_NORMAL, 1.0f}, &e) : NULL;
    T_CHECK(T, u && t && b && nt && nt2 && u->requires_grad && !b->requires_grad,
            "a parameter needs a gradient, a buffer not");
    T_CHECK(T, P && vt_params_add(P, "b", VT_PARAM, 1, n4, zero, &ke) == NULL && strstr(ke.msg, "declared twice"),
            "a buffer's name declared again as a parameter refused: %s", ke.msg);
    if (!u || !t || !nt || !nt2) {
        vt_params_free(P);
        return;
    }
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    vt_params_init(P, 11);
    float *one = malloc(sizeof(float) * (size_t)nt->numel);
    if (one) memcpy(one, nt->data, sizeof(float) * (size_t)nt->numel);
    omp_set_num_threads(3);
    for (int64_t i = 0; i < nt->numel; i++) nt->data[i] = NAN; /* every element written: none left NaN */
    vt_params_init(P, 11);
    omp_set_num_threads(saved);
    T_CHECK(T, one && !memcmp(one, nt->data, sizeof(float) * (size_t)nt->numel),
            "normal init the same on 1 and 3 threads");
    free(one);
    double sum = 0, sq = 0, lag = 0, cross = 0, other = 0;
    int same = 0, nonfinite = 0;
    for (int64_t i = 0; i < nt2->numel; i++) { /* another parameter: its own stream, not the first chunk's */
        other += (double)nt->data[i] * nt2->data[i];
        same += nt->data[i] == nt2->data[i];
    }
    other /= (double)nt2->numel;
    for (int64_t i = 0; i < nt->numel; i++) {
        nonfinite += !isfinite(nt->data[i]);
        sum += nt->data[i];
        sq += (double)nt->data[i] * nt->data[i];
        if (i % 2 == 0 && i + 1 < nt->numel) lag += (double)nt->data[i] * nt->data[i + 1];
        if (i < 65536) {
            cross += (double)nt->data[i] * nt->data[i + 65536];
            same += nt->data[i] == nt->data[i + 65536];
        }
    }
    const double mean = sum / (double)nt->numel, sd = sqrt(sq / (double)nt->numel - mean * mean);
    lag /= (double)(nt->numel / 2);
    cross /= 65536.0;
    T_CHECK(T, !nonfinite && fabs(mean) < 0.01 && fabs(sd - 1.0) < 0.01 && fabs(lag) < 0.02 && fabs(cross) < 0.02 &&
                   fabs(other) < 0.07 && same < 4,
            "normal(1) over 4 streams: %d values not written, mean %.4f, std %.4f, pairs' halves' correlation %.4f, "
            "the first two chunks' %.4f, the next parameter's with the first chunk %.4f, %d equal", nonfinite, mean,
            sd, lag, cross, other, same);
    float ulo = 1.0f, uhi = -1.0f, tlo = 0.0f, thi = 0.0f;
    for (int i = 0; i < 4096; i++) {
        ulo = fminf(ulo, u->data[i]), uhi = fmaxf(uhi, u->data[i]);
        tlo = fminf(tlo, t->data[i]), thi = fmaxf(thi, t->data[i]);
    }
    T_CHECK(T, ulo >= -0.5f && ulo < -0.45f && uhi < 0.5f && uhi > 0.45f, "uniform(0.5) spans [%g, %g]", ulo, uhi);
    T_CHECK(T, tlo >= -2.0f && tlo < -1.5f && thi <= 2.0f && thi > 1.5f, "trunc_normal(1.5) spans [%g, %g]", tlo, thi);
    /* a fixed buffer (a relative position index) keeps its values through a later vt_params_init */
    vt_graph *g = vt_graph_new(P, 0, &e);
    const float vals[3] = {3.0f, 1.0f, 2.0f};
    const int three[1] = {3};
    vt_tensor *fx = g ? vt_buffer_fixed(g, "fixed", 1, three, vals) : NULL;
    vt_params_init(P, 12);
    T_CHECK(T, fx && fx->data && memcmp(fx->data, vals, sizeof vals) == 0,
            "a fixed buffer after vt_params_init: %g %g %g",
            fx && fx->data ? (double)fx->data[0] : -1.0,
            fx && fx->data ? (double)fx->data[1] : -1.0, fx && fx->data ? (double)fx->data[2] : -1.0);
    vt_graph_free(g);
    /* vt_first_nonfinite finds an Inf as a NaN */
    float v[5] = {0.0f, 1.0f, INFINITY, NAN, 2.0f};
    T_CHECK(T, vt_first_nonfinite(v, 5) == 2 && vt_first_nonfinite(v + 3, 2) == 0 && vt_first_nonfinite(v, 2) == -1,
            "first non-finite: %lld", (long long)vt_first_nonfinite(v, 5));
    vt_params_free(P);
}

/* An op y = exp(x) whose backward reads its output (dx += dy·y), declared once correctly (VT_READS_OUT) and once as
 * reading nothing: the poisoned backward (vt_graph_backward_poisoned) fills the output slot of the wrong declaration
 * with NaN, so the mistake shows as NaN gradients; the right one gives finite ones. */
static void exp_fwd(vt_node *n) {
    for (int64_t i = 0; i < n->out->numel; i++) n->out->data[i] = expf(n->in[0]->data[i]);
}
static void exp_bwd(vt_node *n) {
    if (!n->in[0]->grad) return;
    for (int64_t i = 0; i < n->out->numel; i++) n->in[0]->grad[i] += n->out->grad[i] * n->out->data[i];
}
static const vt_opdef op_exp_undeclared = {"exp_undeclared", exp_fwd, exp_bwd, VT_READS(0), NULL, VT_OP_OTHER};
static const vt_opdef op_exp_declared = {"exp_declared", exp_fwd, exp_bwd, VT_READS(VT_READS_OUT), NULL, VT_OP_OTHER};

static void check_poison_out(vt_test *T) {
    for (int declared = 0; declared < 2; declared++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 1, &e);
        const int s[1] = {6};
        vt_tensor *x = vt_param(g, "x", 1, s, (vt_init){VT_INIT_NORMAL, 1.0f}), *y = vt_new_act(g, 1, s);
        vt_tensor *in[1] = {x};
        vt_new_node(g, declared ? &op_exp_declared : &op_exp_undeclared, in, 1, y);
        vt_graph_set_loss(g, vt_sum(g, y));
        g->keep_all = 1;
        int ok = vt_graph_finalize(g, &e) == 0, nan = 0;
        if (ok) {
            vt_params_init(P, 2);
            vt_params_zero_grad(P);
            vt_graph_forward(g);
            ok = vt_graph_backward_poisoned(g, &e) == 0;
        }
        for (int i = 0; ok && i < 6; i++) nan += isnan(x->grad[i]) != 0;
        T_CHECK(T, ok && nan == (declared ? 0 : 6), "backward reading its output, %s: %d of 6 gradients NaN (%s)",
                declared ? "declared" : "undeclared", nan, e.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* A block exporting twice under one name (vt_graph_export_map): the maps are named name, name.2, name.3. */
static void check_map_names(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 0, &e);
    const int s[4] = {1, 1, 2, 2};
    g->export_maps = 1;
    vt_attn_map m = {.form = VT_MAP_FULL, .t = vt_input(g, "a", 4, s)};
    snprintf(m.name, sizeof m.name, "blocks.0.attn");
    for (int i = 0; i < 3; i++) vt_graph_export_map(g, &m);
    T_CHECK(T, g->nmaps == 3 && strcmp(g->maps[0]->name, "blocks.0.attn") == 0 &&
                   strcmp(g->maps[1]->name, "blocks.0.attn.2") == 0 && strcmp(g->maps[2]->name, "blocks.0.attn.3") == 0,
            "maps exported under one name: %s, %s, %s", g->nmaps > 0 ? g->maps[0]->name : "",
            g->nmaps > 1 ? g->maps[1]->name : "", g->nmaps > 2 ? g->maps[2]->name : "");
    vt_graph_free(g);
    vt_params_free(P);
}

void test_ops_core(vt_test *T) {
    check_loss_seed(T);
    check_poison_out(T);
    check_map_names(T);
    check_constant_late(T);
    check_limits(T);
    check_params_store(T);
    check_ce_smoothing(T);
    check_threads_fixed(T);
    check_denormals_flushed(T);
    check_residual_fusion(T);
    for (int v = 0; v < 5; v++) {
        check_gelu_linear_plain(T, v, 3000, 16);
        check_gelu_linear_plain(T, v, 1100, 600);
    }
    check_linear_wt_first(T);
    check_linear_act_fusion(T);
    check_linear_train_prim(T);
    check_linear_repack(T);
    check_constant_nodes(T);
    check_ffn_fused(T);
    check_ffn_rules(T);
    check_drop_path(T);
    check_residual_drop(T);
    check_gemm_ref(T);
    check_linear_t(T);
    check_train_macs(T);
    check_profile_split(T);
    check_eval_matches_train(T);
    check_shape_errors(T);
    check_error_codes(T);
    gc_case cases[] = {
        {.name = "linear", .nx = 3, .ndim = {3, 2, 1}, .shape = {{2, 3, 5}, {4, 5}, {4}}, .build = b_linear},
        {.name = "linear_nobias_1row", .nx = 2, .ndim = {2, 2}, .shape = {{1, 7}, {1, 7}}, .build = b_linear},
        {.name = "drop_path", .nx = 1, .ndim = {3}, .shape = {{8, 3, 2}}, .build = b_droppath, .fa = {0.4f},
         .node_rng = 1},
        {.name = "linear_gelu", .nx = 3, .ndim = {3, 2, 1}, .shape = {{2, 3, 5}, {4, 5}, {4}}, .build = b_linear_gelu},
        {.name = "linear_gelu_panels", .nx = 3, .ndim = {2, 2, 1}, .shape = {{1100, 3}, {5, 3}, {5}},
         .build = b_linear_gelu},
        {.name = "gelu_linear", .nx = 3, .ndim = {3, 2, 1}, .shape = {{2, 3, 5}, {4, 5}, {4}}, .build = b_gelu_linear},
        /* rows enough for the backward by row panels on up to 8 threads */
        {.name = "gelu_linear_panels", .nx = 3, .ndim = {2, 2, 1}, .shape = {{4400, 3}, {5, 3}, {5}},
         .build = b_gelu_linear},
        /* fewer rows than two panels but more than one: GELU of all rows, then one sgemm (scratch for all rows) */
        {.name = "gelu_linear_whole", .nx = 3, .ndim = {2, 2, 1}, .shape = {{300, 3}, {5, 3}, {5}},
         .build = b_gelu_linear},
        {.name = "gelu_linear_residual", .nx = 4, .ndim = {2, 2, 1, 2}, .shape = {{3, 4}, {5, 4}, {5}, {3, 5}},
         .build = b_gelu_linear},
        {.name = "linear_relu", .nx = 3, .ndim = {3, 2, 1}, .shape = {{2, 3, 5}, {4, 5}, {4}}, .build = b_linear_relu},
        {.name = "linear_relu_panels", .nx = 3, .ndim = {2, 2, 1}, .shape = {{1100, 3}, {5, 3}, {5}},
         .build = b_linear_relu, .eps = 1e-4}, /* small steps: 5500 pre-activations, few within eps of the kink */
        {.name = "linear_residual", .nx = 4, .ndim = {3, 2, 1, 3}, .shape = {{2, 3, 4}, {4, 5}, {4}, {2, 3, 5}},
         .build = b_residual},
        {.name = "linear_residual_self", .nx = 3, .ndim = {2, 2, 1}, .shape = {{3, 4}, {4, 4}, {4}},
         .build = b_residual, .ia = {1}},
        {.name = "linear_residual_unfused", .nx = 4, .ndim = {2, 2, 1, 2}, .shape = {{3, 4}, {4, 2}, {4}, {3, 2}},
         .build = b_residual, .ia = {0, 1}},
        {.name = "linear_residual_drop", .nx = 4, .ndim = {3, 2, 1, 3}, .shape = {{8, 3, 4}, {5, 4}, {5}, {8, 3, 5}},
         .build = b_residual_drop, .fa = {0.4f}, .node_rng = 1},
        {.name = "gelu_linear_residual_drop_panels", .nx = 4, .ndim = {3, 2, 1, 3},
         .shape = {{24, 190, 3}, {4, 3}, {4}, {24, 190, 4}}, .build = b_residual_drop, .ia = {1}, .fa = {0.5f},
         .node_rng = 1},
        {.name = "linear_residual_drop_unfused", .nx = 4, .ndim = {3, 2, 1, 3},
         .shape = {{8, 2, 4}, {3, 4}, {3}, {8, 2, 3}}, .build = b_residual_drop, .ia = {0, 1}, .fa = {0.4f},
         .node_rng = 1},
        {.name = "matmul_nn", .nx = 2, .ndim = {3, 3}, .shape = {{2, 3, 4}, {2, 4, 5}}, .build = b_matmul, .fa = {1}},
        {.name = "matmul_nt", .nx = 2, .ndim = {4, 4}, .shape = {{2, 2, 3, 4}, {2, 2, 5, 4}}, .build = b_matmul,
         .ia = {0, 1}, .fa = {0.5f}},
        {.name = "matmul_tn", .nx = 2, .ndim = {3, 3}, .shape = {{2, 4, 3}, {2, 4, 5}}, .build = b_matmul,
         .ia = {1, 0}, .fa = {1}},
        {.name = "matmul_tt", .nx = 2, .ndim = {3, 3}, .shape = {{3, 4, 1}, {3, 5, 4}}, .build = b_matmul,
         .ia = {1, 1}, .fa = {-2}},
        {.name = "matmul_shared", .nx = 2, .ndim = {3, 2}, .shape = {{2, 3, 4}, {4, 5}}, .build = b_matmul, .fa = {1}},
        {.name = "matmul_shared_ta", .nx = 2, .ndim = {3, 2}, .shape = {{2, 4, 3}, {4, 5}}, .build = b_matmul,
         .ia = {1, 0}, .fa = {1}},
        {.name = "add_same", .nx = 2, .ndim = {2, 2}, .shape = {{3, 4}, {3, 4}}, .build = b_add},
        {.name = "add_bias", .nx = 2, .ndim = {3, 1}, .shape = {{2, 3, 4}, {4}}, .build = b_add},
        {.name = "add_pos", .nx = 2, .ndim = {3, 3}, .shape = {{2, 3, 4}, {1, 3, 4}}, .build = b_add},
        {.name = "add_mid", .nx = 2, .ndim = {4, 4}, .shape = {{2, 3, 4, 5}, {1, 3, 1, 5}}, .build = b_add},
        {.name = "add_both", .nx = 2, .ndim = {3, 3}, .shape = {{2, 1, 4}, {1, 3, 1}}, .build = b_add},
        {.name = "sub_bcast", .nx = 2, .ndim = {3, 2}, .shape = {{2, 3, 4}, {3, 1}}, .build = b_sub},
        {.name = "mul_bcast", .nx = 2, .ndim = {4, 4}, .shape = {{2, 3, 4, 5}, {2, 3, 1, 5}}, .build = b_mul},
        {.name = "mul_same", .nx = 2, .ndim = {1, 1}, .shape = {{7}, {7}}, .build = b_mul},
        /* a per-row scale (BatchNorm folded into a weight: the row fast path) and its mirror (general path) */
        {.name = "mul_rowscale", .nx = 2, .ndim = {2, 2}, .shape = {{4, 7}, {4, 1}}, .build = b_mul},
        {.name = "add_rowscale_left", .nx = 2, .ndim = {2, 2}, .shape = {{4, 1}, {4, 7}}, .build = b_add},
        {.name = "affine", .nx = 1, .ndim = {2}, .shape = {{3, 4}}, .build = b_affine, .fa = {-1.5f, 0.25f}},
        {.name = "cross_entropy", .nx = 2, .ndim = {2, 1}, .shape = {{4, 5}, {4}}, .nograd = {0, 1},
         .build = b_ce, .fill = fill_labels},
        {.name = "cross_entropy_smooth", .nx = 2, .ndim = {2, 1}, .shape = {{3, 5}, {3}}, .nograd = {0, 1},
         .build = b_ce, .fill = fill_labels, .fa = {0.1f}},
        {.name = "cross_entropy_1", .nx = 2, .ndim = {2, 1}, .shape = {{1, 2}, {1}}, .nograd = {0, 1},
         .build = b_ce, .fill = fill_labels, .fa = {0.3f}},
        {.name = "soft_cross_entropy", .nx = 2, .ndim = {2, 2}, .shape = {{4, 5}, {4, 5}}, .build = b_soft_ce,
         .fill = fill_soft},
        {.name = "soft_cross_entropy_1", .nx = 2, .ndim = {2, 2}, .shape = {{1, 3}, {1, 3}}, .build = b_soft_ce,
         .fill = fill_soft},
        /* attention-map-like (B, H, N, M), 300 positions a sample: a block of 256 and a partial one */
        {.name = "cosine_mean", .nx = 2, .ndim = {4, 4}, .shape = {{2, 3, 15, 20}, {2, 3, 15, 20}}, .build = b_cos,
         .tol = 1e-3},
        {.name = "cosine_mean_2d", .nx = 2, .ndim = {2, 2}, .shape = {{5, 4}, {5, 4}}, .build = b_cos, .tol = 1e-3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gc_run(T, &cases[i]);
}
