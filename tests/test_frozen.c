/* Frozen parameters (requires_grad 0) in every op that takes parameters: each parameter slot frozen in turn, then
 * all but one; a frozen parameter gets no gradient and the others equal the unfrozen run's (each backward skips only
 * the frozen slot's work). The six basic cases, the saved-gradients file and the refusal of a late (un)freeze are
 * tests/test_optim.c's. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vitc/graph.h"
#include "vitc/ops.h"
#include "vitc/rng.h"

/* A run's freezing: the parameter `name` frozen (only: every parameter but it); name NULL: none. */
typedef struct {
    const char *name;
    int only;
    const int *geo; /* the conv cases' geometry: nhwc, cin, hw, cout, k, stride, groups */
} fz_cfg;

/* Parameter nm of nd dims (the sizes follow), frozen as f says. */
static vt_tensor *Pm(vt_graph *g, const fz_cfg *f, const char *nm, int nd, ...) {
    int s[8];
    va_list ap;
    va_start(ap, nd);
    for (int i = 0; i < nd; i++)
        s[i] = va_arg(ap, int);
    va_end(ap);
    vt_tensor *t = vt_param(g, nm, nd, s, (vt_init){VT_INIT_NORMAL, 0.5f});
    if (t && f->name && (f->only ? strcmp(f->name, nm) != 0 : !strcmp(f->name, nm)))
        t->requires_grad = 0;
    return t;
}
/* Buffer nm of n floats, zeros or ones (BatchNorm running statistics). */
static vt_tensor *Bf(vt_graph *g, const char *nm, int n, int one) {
    const int s[1] = {n};
    return vt_params_add(g->P, nm, VT_BUFFER, 1, s, (vt_init){one ? VT_INIT_ONE : VT_INIT_ZERO, 0}, &g->err);
}

typedef vt_tensor *(*builder)(vt_graph *g, const fz_cfg *f);

/* A conv of batch 2 as f->geo says: NCHW conv2d or channels-last conv2d_nhwc, padding k/2. */
static vt_tensor *b_conv(vt_graph *g, const fz_cfg *f) {
    const int *q = f->geo, nhwc = q[0], cin = q[1], hw = q[2], cout = q[3], k = q[4];
    vt_tensor *x = nhwc ? Pm(g, f, "x", 4, 2, hw, hw, cin) : Pm(g, f, "x", 4, 2, cin, hw, hw);
    vt_tensor *w = Pm(g, f, "w", 4, cout, cin / q[6], k, k), *b = Pm(g, f, "b", 1, cout);
    return (nhwc ? vt_conv2d_nhwc : vt_conv2d)(g, x, w, b, q[5], k / 2, q[6]);
}
static vt_tensor *b_dwn_ex(vt_graph *g, const fz_cfg *f) {
    return vt_dwconv_nhwc_ex(g, Pm(g, f, "x", 4, 2, 6, 6, 8), 0, Pm(g, f, "w", 4, 8, 1, 3, 3), Pm(g, f, "b", 1, 8), 1,
                             Pm(g, f, "r", 4, 2, 6, 6, 8));
}
static vt_tensor *b_dwn_c0(vt_graph *g, const fz_cfg *f) {
    return vt_dwconv_nhwc_ex(g, Pm(g, f, "x", 4, 2, 6, 6, 12), 4, Pm(g, f, "w", 4, 8, 1, 3, 3), Pm(g, f, "b", 1, 8), 1,
                             NULL);
}
static vt_tensor *b_linear(vt_graph *g, const fz_cfg *f) {
    return vt_linear(g, Pm(g, f, "x", 3, 2, 5, 8), Pm(g, f, "w", 2, 6, 8), Pm(g, f, "b", 1, 6));
}
static vt_tensor *b_linear_gelu(vt_graph *g, const fz_cfg *f) {
    return vt_linear_gelu(g, Pm(g, f, "x", 3, 2, 5, 8), Pm(g, f, "w", 2, 6, 8), Pm(g, f, "b", 1, 6));
}
static vt_tensor *b_gelu_linear(vt_graph *g, const fz_cfg *f) {
    return vt_gelu_linear(g, Pm(g, f, "x", 3, 2, 5, 8), Pm(g, f, "w", 2, 6, 8), Pm(g, f, "b", 1, 6));
}
static vt_tensor *b_gelu_linear_pan(vt_graph *g, const fz_cfg *f) { /* R >= 1024 + 2·Co: row panels */
    return vt_gelu_linear(g, Pm(g, f, "x", 2, 1100, 8), Pm(g, f, "w", 2, 6, 8), Pm(g, f, "b", 1, 6));
}
static vt_tensor *b_gelu_linear_nob(vt_graph *g, const fz_cfg *f) {
    return vt_gelu_linear(g, Pm(g, f, "x", 2, 40, 8), Pm(g, f, "w", 2, 6, 8), NULL);
}
static vt_tensor *b_residual(vt_graph *g, const fz_cfg *f) {
    vt_tensor *r = Pm(g, f, "r", 3, 2, 5, 6);
    return vt_residual_drop(g, r, vt_linear(g, Pm(g, f, "x", 3, 2, 5, 8), Pm(g, f, "w", 2, 6, 8), Pm(g, f, "b", 1, 6)),
                            0.0f);
}
static vt_tensor *b_linear_t(vt_graph *g, const fz_cfg *f) {
    return vt_linear_t(g, Pm(g, f, "x", 2, 10, 8), Pm(g, f, "w", 2, 6, 8), Pm(g, f, "b", 1, 6));
}
static vt_tensor *b_glinear(vt_graph *g, const fz_cfg *f) {
    return vt_group_linear(g, Pm(g, f, "x", 3, 2, 5, 8), Pm(g, f, "w", 2, 6, 4), Pm(g, f, "b", 1, 6), 2, 1);
}
static vt_tensor *b_matmul(vt_graph *g, const fz_cfg *f) {
    return vt_matmul(g, Pm(g, f, "a", 3, 2, 5, 8), Pm(g, f, "b", 2, 8, 6), 0, 0, 1.0f);
}
static vt_tensor *b_matmul_t(vt_graph *g, const fz_cfg *f) {
    return vt_matmul(g, Pm(g, f, "a", 3, 2, 8, 5), Pm(g, f, "b", 2, 6, 8), 1, 1, 0.5f);
}
static vt_tensor *b_lncf(vt_graph *g, const fz_cfg *f) {
    return vt_layernorm_cf(g, Pm(g, f, "x", 4, 2, 6, 5, 5), Pm(g, f, "w", 1, 6), Pm(g, f, "b", 1, 6), 1e-5f, VT_RELU);
}
static vt_tensor *b_ln_nob(vt_graph *g, const fz_cfg *f) {
    return vt_layernorm(g, Pm(g, f, "x", 3, 2, 5, 8), Pm(g, f, "w", 1, 8), NULL, 1e-5f);
}
static vt_tensor *b_bn_sets(vt_graph *g, const fz_cfg *f) {
    vt_tensor *pt[10] = {Pm(g, f, "w0", 1, 3),
                         Pm(g, f, "w1", 1, 3),
                         Pm(g, f, "b0", 1, 3),
                         Pm(g, f, "b1", 1, 3),
                         Bf(g, "m0", 3, 0),
                         Bf(g, "m1", 3, 0),
                         Bf(g, "v0", 3, 1),
                         Bf(g, "v1", 3, 1),
                         NULL,
                         NULL};
    return vt_batchnorm_act_sets(g, Pm(g, f, "x", 4, 2, 6, 4, 4), 2, pt, 1, 1e-5f, 0.1f, VT_HARDSWISH);
}
static vt_tensor *b_bn_res(vt_graph *g, const fz_cfg *f) {
    return vt_batchnorm_res(g, Pm(g, f, "x", 4, 2, 6, 4, 4), Pm(g, f, "w", 1, 6), Pm(g, f, "b", 1, 6), Bf(g, "m", 6, 0),
                            Bf(g, "v", 6, 1), NULL, 1, 1e-5f, 0.1f, 0.5f, Pm(g, f, "r", 4, 2, 6, 4, 4));
}
static vt_tensor *b_bn_sum(vt_graph *g, const fz_cfg *f) {
    vt_tensor *t[10] = {Pm(g, f, "w0", 1, 4), Pm(g, f, "b0", 1, 4), Bf(g, "m0", 4, 0),    Bf(g, "v0", 4, 1),
                        Bf(g, "n0", 1, 0),    Pm(g, f, "w1", 1, 4), Pm(g, f, "b1", 1, 4), Bf(g, "m1", 4, 0),
                        Bf(g, "v1", 4, 1),    Bf(g, "n1", 1, 0)};
    return vt_batchnorm_sum(g, Pm(g, f, "z", 2, 12, 8), 2, t, 1e-5f, 0.1f);
}
static vt_tensor *b_bndw(vt_graph *g, const fz_cfg *f) {
    return vt_bnact_dwconv(g, Pm(g, f, "x", 4, 2, 4, 6, 6), Pm(g, f, "bw", 1, 4), Pm(g, f, "bb", 1, 4),
                           Bf(g, "m", 4, 0), Bf(g, "v", 4, 1), NULL, 1e-5f, 0.1f, VT_RELU6,
                           Pm(g, f, "w", 4, 4, 1, 3, 3));
}
static vt_tensor *b_bnpw(vt_graph *g, const fz_cfg *f) {
    return vt_bnact_pwconv(g, Pm(g, f, "x", 4, 2, 4, 6, 6), Pm(g, f, "bw", 1, 4), Pm(g, f, "bb", 1, 4),
                           Bf(g, "m", 4, 0), Bf(g, "v", 4, 1), NULL, 1e-5f, 0.1f, VT_RELU6,
                           Pm(g, f, "w", 4, 5, 4, 1, 1));
}
static vt_tensor *b_bnpair(vt_graph *g, const fz_cfg *f) {
    vt_tensor *b3[5] = {Pm(g, f, "w3", 1, 3), Pm(g, f, "b3", 1, 3), Bf(g, "m3", 3, 0), Bf(g, "v3", 3, 1),
                        Bf(g, "n3", 1, 0)};
    vt_tensor *ba[5] = {Pm(g, f, "wa", 1, 3), Pm(g, f, "ba", 1, 3), Bf(g, "ma", 3, 0), Bf(g, "va", 3, 1),
                        Bf(g, "na", 1, 0)};
    return vt_bn_res_bn(g, Pm(g, f, "t", 4, 2, 3, 4, 4), b3, Pm(g, f, "a", 4, 2, 3, 4, 4), ba, 1e-5f, 0.1f, 0.7f);
}
static vt_tensor *b_focus(vt_graph *g, const fz_cfg *f) {
    return vt_focus(g, Pm(g, f, "x", 3, 2, 5, 8), Pm(g, f, "pe", 2, 5, 8), Pm(g, f, "sc", 1, 8), 3.0f);
}
static vt_tensor *b_focus_ex(vt_graph *g, const fz_cfg *f) {
    return vt_focus_ex(g, Pm(g, f, "x", 3, 2, 5, 12), 2, 8, NULL, Pm(g, f, "sc", 1, 8), 3.0f);
}
static vt_tensor *b_linattn(vt_graph *g, const fz_cfg *f) {
    const vt_linattn_args a = {.heads = 2,
                               .add = Pm(g, f, "add", 3, 2, 4, 8),
                               .scale = Pm(g, f, "sc", 1, 8),
                               .pe = Pm(g, f, "pe", 2, 6, 8),
                               .p = 3.0f};
    return vt_linear_attention_ex(g, Pm(g, f, "q", 3, 2, 6, 8), Pm(g, f, "k", 3, 2, 6, 8), Pm(g, f, "v", 3, 2, 6, 8),
                                  &a);
}
static vt_tensor *b_linattn_nope(vt_graph *g, const fz_cfg *f) {
    const vt_linattn_args a = {.heads = 2, .scale = Pm(g, f, "sc", 1, 8), .p = 3.0f};
    return vt_linear_attention_ex(g, Pm(g, f, "q", 3, 2, 6, 8), Pm(g, f, "k", 3, 2, 6, 8), Pm(g, f, "v", 3, 2, 6, 8),
                                  &a);
}
static vt_tensor *hattn(vt_graph *g, const fz_cfg *f, int chh_first, int kv) {
    vt_hattn_args a = {.heads = 4,
                       .dim = 8,
                       .q_off = 0,
                       .k_off = kv ? 0 : 4,
                       .v_off = kv ? 4 : 8,
                       .klead = 1,
                       .kh = 3,
                       .kw = 3,
                       .scale = 0.5f,
                       .chh_first = chh_first};
    a.ihh_w = Pm(g, f, "iw", 4, 2, 1, 3, 3);
    a.ihh_b = Pm(g, f, "ib", 1, 2);
    a.chh_w = Pm(g, f, "cw", 4, 2, 2, 1, 1);
    a.chh_b = Pm(g, f, "cb", 1, 2);
    return vt_hallucinated_attention(g, Pm(g, f, "q", 3, 2, 10, kv ? 4 : 16), kv ? Pm(g, f, "kv", 3, 2, 10, 12) : NULL,
                                     &a);
}
static vt_tensor *b_hattn(vt_graph *g, const fz_cfg *f) {
    return hattn(g, f, 0, 0);
}
static vt_tensor *b_hattn_chh(vt_graph *g, const fz_cfg *f) {
    return hattn(g, f, 1, 1);
}
static vt_tensor *
b_hattn_big(vt_graph *g, const fz_cfg *f) { /* 1 + 7x7 keys, 8 heads: the fused / tile paths where the ISA has them */
    vt_hattn_args a = {
        .heads = 8, .dim = 16, .q_off = 0, .k_off = 8, .v_off = 16, .klead = 1, .kh = 7, .kw = 7, .scale = 0.5f};
    a.ihh_w = Pm(g, f, "iw", 4, 4, 1, 3, 3);
    a.ihh_b = Pm(g, f, "ib", 1, 4);
    a.chh_w = Pm(g, f, "cw", 4, 4, 4, 1, 1);
    a.chh_b = Pm(g, f, "cb", 1, 4);
    return vt_hallucinated_attention(g, Pm(g, f, "q", 3, 2, 50, 32), NULL, &a);
}
/* Two heads of 8 channels at q_off 0 and the given key and value offsets, scale 0.5, an additive bias. */
static vt_attn_args attn2(int k_off, int v_off, vt_tensor *bias) {
    return (vt_attn_args){.heads = 2, .dim = 8, .k_off = k_off, .v_off = v_off, .scale = 0.5f, .bias = bias};
}
static vt_tensor *b_attn_bias(vt_graph *g, const fz_cfg *f) {
    const vt_attn_args a = attn2(8, 16, Pm(g, f, "bias", 3, 2, 4, 4));
    return vt_attention_ex(g, Pm(g, f, "q", 3, 2, 4, 24), NULL, &a);
}
static vt_tensor *b_attn_bias_b(vt_graph *g, const fz_cfg *f) { /* batched bias, separate keys and values */
    const vt_attn_args a = attn2(0, 8, Pm(g, f, "bias", 4, 2, 2, 4, 5));
    return vt_attention_ex(g, Pm(g, f, "q", 3, 2, 4, 8), Pm(g, f, "kv", 3, 2, 5, 16), &a);
}
static vt_tensor *b_attn_rpb(vt_graph *g, const fz_cfg *f) {
    const vt_attn_args a = attn2(8, 16, vt_rel_pos_bias(g, Pm(g, f, "table", 2, 9, 2), 2, 2));
    return vt_attention_ex(g, Pm(g, f, "q", 3, 2, 4, 24), NULL, &a);
}
static vt_tensor *b_attn_msf(vt_graph *g, const fz_cfg *f) {
    vt_attn_args a = attn2(8, 16, Pm(g, f, "bias", 3, 2, 4, 4));
    a.p_off = 24;
    a.msf = 1;
    return vt_attention_ex(g, Pm(g, f, "q", 3, 2, 4, 32), NULL, &a);
}
static vt_tensor *b_stripe(vt_graph *g, const fz_cfg *f) {
    return vt_stripe_attention(g, Pm(g, f, "qkv", 3, 2, 16, 24), 4, 2, 2, 0.5f, Pm(g, f, "w", 4, 8, 1, 3, 3),
                               Pm(g, f, "b", 1, 8));
}
static vt_tensor *b_gmerge(vt_graph *g, const fz_cfg *f) {
    vt_tensor *w[2] = {Pm(g, f, "w0", 4, 2, 1, 3, 3), Pm(g, f, "w1", 4, 2, 1, 5, 5)},
              *b[2] = {Pm(g, f, "b0", 1, 2), Pm(g, f, "b1", 1, 2)};
    return vt_gma_merge(g, Pm(g, f, "f", 3, 2, 4, 16), Pm(g, f, "q", 3, 2, 4, 16), Pm(g, f, "v", 3, 2, 4, 16), 4, 4, w,
                        b, 2, Pm(g, f, "u", 3, 2, 3, 16));
}
static vt_tensor *b_gsep_cat(vt_graph *g, const fz_cfg *f) {
    vt_tensor *dw[3] = {Pm(g, f, "d1", 4, 2, 1, 3, 3), Pm(g, f, "d2", 4, 2, 1, 5, 5), Pm(g, f, "d3", 4, 2, 1, 3, 3)};
    vt_tensor *pw[3] = {Pm(g, f, "p1", 4, 2, 2, 1, 1), Pm(g, f, "p2", 4, 2, 2, 1, 1), Pm(g, f, "p3", 4, 2, 2, 1, 1)};
    return vt_gma_separable_cat(g, Pm(g, f, "qkv", 3, 30, 2, 16), 4, 4, dw, pw);
}
static vt_tensor *b_gsep4(vt_graph *g, const fz_cfg *f) {
    return vt_gma_separable(g, Pm(g, f, "qkv", 3, 30, 2, 16), 4, 4, 4, Pm(g, f, "d", 4, 6, 1, 3, 3),
                            Pm(g, f, "p", 4, 2, 6, 1, 1));
}
static vt_tensor *b_gsep4_chunks(vt_graph *g, const fz_cfg *f) { /* 9 channels over 77 pixels: two chunks of each */
    return vt_gma_separable(g, Pm(g, f, "qkv", 3, 45, 1, 77), 4, 11, 7, Pm(g, f, "d", 4, 9, 1, 3, 3),
                            Pm(g, f, "p", 4, 3, 9, 1, 1));
}
static vt_tensor *b_tokens(vt_graph *g,
                           const fz_cfg *f) { /* cls token, position embedding, layer scale, concat, softmax_res */
    vt_tensor *x = vt_prepend_tokens(g, Pm(g, f, "x", 3, 2, 4, 6), Pm(g, f, "cls", 3, 1, 1, 6));
    x = vt_add(g, x, Pm(g, f, "pos", 3, 1, 5, 6));
    x = vt_mul(g, x, Pm(g, f, "gamma", 1, 6));
    x = vt_sub(g, Pm(g, f, "s", 3, 2, 5, 1), x);
    vt_tensor *xs[2] = {x, Pm(g, f, "cat", 3, 2, 5, 2)};
    x = vt_concat(g, xs, 2, 2);
    return vt_softmax_res(g, x, Pm(g, f, "rr", 3, 2, 5, 8), 0.3f);
}
static vt_tensor *b_softce(vt_graph *g, const fz_cfg *f) {
    return vt_soft_cross_entropy(g, Pm(g, f, "x", 2, 4, 5), Pm(g, f, "t", 2, 4, 5));
}

static vt_tensor *b_cos(vt_graph *g, const fz_cfg *f) {
    return vt_cosine_mean(g, Pm(g, f, "a", 3, 2, 3, 7), Pm(g, f, "b", 3, 2, 3, 7));
}

static const struct {
    const char *name;
    builder build;
    const char *params[12];
    int geo[7]; /* b_conv's: nhwc, cin, hw, cout, k, stride, groups */
} cases[] = {
    {"conv2d pointwise", b_conv, {"x", "w", "b"}, {0, 8, 6, 6, 1, 1, 1}},
    {"conv2d 3x3", b_conv, {"x", "w", "b"}, {0, 4, 8, 6, 3, 1, 1}},
    {"conv2d 3x3/2 g2", b_conv, {"x", "w", "b"}, {0, 4, 9, 6, 3, 2, 2}},
    {"conv2d dw s2", b_conv, {"x", "w", "b"}, {0, 4, 9, 4, 3, 2, 4}},
    {"conv2d dw s1 5x5", b_conv, {"x", "w", "b"}, {0, 4, 9, 4, 5, 1, 4}},
    {"conv2d_nhwc g2", b_conv, {"x", "w", "b"}, {1, 8, 6, 6, 3, 1, 2}},
    {"conv2d_nhwc 32ch", b_conv, {"x", "w", "b"}, {1, 32, 8, 16, 3, 1, 1}}, /* the rows kernel where planned */
    {"conv2d_nhwc s2", b_conv, {"x", "w", "b"}, {1, 8, 7, 6, 3, 2, 1}},
    {"dwconv_nhwc_ex r", b_dwn_ex, {"x", "w", "b", "r"}, {0}},
    {"dwconv_nhwc_ex c0", b_dwn_c0, {"x", "w", "b"}, {0}},
    {"linear", b_linear, {"x", "w", "b"}, {0}},
    {"linear_gelu", b_linear_gelu, {"x", "w", "b"}, {0}},
    {"gelu_linear", b_gelu_linear, {"x", "w", "b"}, {0}},
    {"gelu_linear panels", b_gelu_linear_pan, {"x", "w", "b"}, {0}},
    {"gelu_linear no bias", b_gelu_linear_nob, {"x", "w"}, {0}},
    {"residual fused", b_residual, {"x", "w", "b", "r"}, {0}},
    {"linear_t", b_linear_t, {"x", "w", "b"}, {0}},
    {"group_linear il", b_glinear, {"x", "w", "b"}, {0}},
    {"matmul shared", b_matmul, {"a", "b"}, {0}},
    {"matmul t", b_matmul_t, {"a", "b"}, {0}},
    {"layernorm_cf", b_lncf, {"x", "w", "b"}, {0}},
    {"layernorm no bias", b_ln_nob, {"x", "w"}, {0}},
    {"batchnorm sets", b_bn_sets, {"x", "w0", "w1", "b0", "b1"}, {0}},
    {"batchnorm_res", b_bn_res, {"x", "w", "b", "r"}, {0}},
    {"batchnorm_sum", b_bn_sum, {"z", "w0", "b0", "w1", "b1"}, {0}},
    {"bnact_dwconv", b_bndw, {"x", "bw", "bb", "w"}, {0}},
    {"bnact_pwconv", b_bnpw, {"x", "bw", "bb", "w"}, {0}},
    {"bn_res_bn", b_bnpair, {"t", "a", "w3", "b3", "wa", "ba"}, {0}},
    {"focus", b_focus, {"x", "pe", "sc"}, {0}},
    {"focus_ex", b_focus_ex, {"x", "sc"}, {0}},
    {"linear_attention focus", b_linattn, {"q", "k", "v", "add", "sc", "pe"}, {0}},
    {"linear_attention focus no pe", b_linattn_nope, {"q", "k", "v", "sc"}, {0}},
    {"hattn", b_hattn, {"q", "iw", "ib", "cw", "cb"}, {0}},
    {"hattn chh first kv", b_hattn_chh, {"q", "kv", "iw", "ib", "cw", "cb"}, {0}},
    {"hattn 7x7", b_hattn_big, {"q", "iw", "ib", "cw", "cb"}, {0}},
    {"attention bias", b_attn_bias, {"q", "bias"}, {0}},
    {"attention batched bias kv", b_attn_bias_b, {"q", "kv", "bias"}, {0}},
    {"attention rel_pos_bias", b_attn_rpb, {"q", "table"}, {0}},
    {"attention msf", b_attn_msf, {"q", "bias"}, {0}},
    {"stripe_attention", b_stripe, {"qkv", "w", "b"}, {0}},
    {"gma_merge", b_gmerge, {"f", "q", "v", "u", "w0", "b0", "w1", "b1"}, {0}},
    {"gma_separable_cat", b_gsep_cat, {"qkv", "d1", "d2", "d3", "p1", "p2", "p3"}, {0}},
    {"gma_separable seg4", b_gsep4, {"qkv", "d", "p"}, {0}},
    {"gma_separable seg4, chunks", b_gsep4_chunks, {"qkv", "d", "p"}, {0}},
    {"tokens chain", b_tokens, {"x", "cls", "pos", "gamma", "s", "cat", "rr"}, {0}},
    {"soft_cross_entropy", b_softce, {"x", "t"}, {0}},
    {"cosine_mean", b_cos, {"a", "b"}, {0}},
};

/* One training step of case c frozen as f says; every VT_PARAM's gradient copied to *out (NULL entries for those
 * without), the output after them; returns the parameter count, -1 on failure. */
static int run(vt_test *T, int c, const fz_cfg *f, float ***out, int **nel) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = P ? vt_graph_new(P, 1, &e) : NULL;
    int np = -1;
    if (g) {
        vt_tensor *y = cases[c].build(g, f);
        vt_tensor *r = y ? vt_input(g, "r_", y->ndim, y->shape) : NULL;
        if (r)
            vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
        if (r && !vt_graph_finalize(g, &e)) {
            vt_params_init(P, 11);
            vt_rng rng;
            vt_rng_seed(&rng, 12);
            for (int64_t j = 0; j < r->numel; j++)
                r->data[j] = vt_rng_normal(&rng);
            vt_graph_forward(g);
            np = P->n;
            *out = calloc((size_t)np + 1, sizeof **out); /* and the output y last (before backward reuses it) */
            *nel = calloc((size_t)np + 1, sizeof **nel);
            (*nel)[np] = (int)y->numel;
            (*out)[np] = malloc(sizeof(float) * (size_t)y->numel);
            memcpy((*out)[np], y->data, sizeof(float) * (size_t)y->numel);
            vt_params_zero_grad(P);
            vt_graph_backward(g);
            for (int i = 0; i < np; i++) {
                vt_tensor *t = P->t[i];
                (*nel)[i] = (int)t->numel;
                if (t->kind != VT_PARAM)
                    continue;
                if (f->name && (f->only ? strcmp(t->name, f->name) != 0 : !strcmp(t->name, f->name)))
                    T_CHECK(T, t->grad == NULL, "%s: frozen %s has a gradient", cases[c].name, t->name);
                if (!t->grad)
                    continue;
                (*out)[i] = malloc(sizeof(float) * (size_t)t->numel);
                memcpy((*out)[i], t->grad, sizeof(float) * (size_t)t->numel);
            }
        }
    }
    T_CHECK(T, np >= 0, "%s (frozen %s): build or run failed: %s", cases[c].name, f->name ? f->name : "none",
            g && g->err.msg[0] ? g->err.msg : e.msg);
    vt_graph_free(g);
    vt_params_free(P);
    return np;
}

static void freeg(float **g, int n) {
    for (int i = 0; g && i <= n; i++)
        free(g[i]);
    free(g);
}

void test_frozen(vt_test *T) {
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        float **ref = NULL;
        int *rn = NULL;
        const int n0 = run(T, c, &(fz_cfg){NULL, 0, cases[c].geo}, &ref, &rn);
        if (n0 < 0)
            continue;
        for (int pass = 0; pass < 2; pass++) {
            for (int k = 0; k < 12 && cases[c].params[k]; k++) {
                const fz_cfg f = {cases[c].params[k], pass, cases[c].geo};
                float **got = NULL;
                int *gn = NULL;
                const int n1 = run(T, c, &f, &got, &gn);
                if (n1 == n0) {
                    double d = 0, m = 0;
                    int missing = 0, have = 0;
                    for (int i = 0; i < n0; i++) {
                        if (!ref[i])
                            continue;
                        if (!got[i]) {
                            missing++; /* the frozen ones */
                            continue;
                        }
                        have++;
                        for (int j = 0; j < rn[i]; j++) {
                            const double a = ref[i][j], b = got[i][j];
                            m = fmax(m, fabs(a));
                            d = t_worse(d, fabs(a - b));
                        }
                    }
                    T_CHECK(T, (pass ? have == 1 : missing == 1) && d <= 1e-5 * fmax(m, 1e-3),
                            "%s, %s %s: %d gradients missing, %d kept, the others moved by %g (scale %g)",
                            cases[c].name, f.name, pass ? "alone trained" : "frozen", missing, have, d, m);
                    double dy = 0, my = 0; /* the forward too: a frozen slot changes some ops' forward paths */
                    for (int j = 0; j < rn[n0]; j++) {
                        my = fmax(my, fabs(ref[n0][j]));
                        dy = t_worse(dy, fabs(ref[n0][j] - got[n0][j]));
                    }
                    T_CHECK(T, dy <= 1e-5 * fmax(my, 1e-3), "%s, %s %s: the output moved by %g (scale %g)",
                            cases[c].name, f.name, pass ? "alone trained" : "frozen", dy, my);
                }
                freeg(got, n1);
                free(gn);
            }
        }
        freeg(ref, n0);
        free(rn);
    }
}
