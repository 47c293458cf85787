/* The PVT family's pieces: vt_resize_bilinear against PyTorch's values and finite differences, vt_im2col + vt_linear
 * against vt_conv2d (outputs and every input, weight and bias gradient;
 * NCHW images and channels-last token maps; PVT v1's k = s patches, PVTv2's overlapping k7 s4 p3 and k3 s2 p1, odd
 * and non-square sizes), finite-difference gradients of vt_im2col, its builder errors, and the family's handling
 * of input sizes (stage grids of odd / non-square inputs through the features hook, refused sizes), and the
 * inference graphs' patch embeds by convolution against the training graphs' im2col + linear. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vitc/blocks.h"
#include "vitc/model.h"
#include "vitc/ops.h"

/* ---- im2col + linear vs conv2d ---- */

/* Runs y = conv(x) as conv2d (use_conv) or im2col + linear, with x given NCHW or channels-last (nhwc), output as
 * tokens (B, Ho·Wo, Co); loss = Σ y·r. Writes y, then the gradients of x (in x's layout), w and b. */
static int run_embed(int use_conv, int nhwc, int B, int H, int W, int C, int Co, int k, int s, int p, float *out,
                     float *grads, size_t cap) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_graph *g = vt_graph_new(P, 1, &e);
    const int xs_nchw[4] = {B, C, H, W}, xs_nhwc[4] = {B, H, W, C}, wsh[4] = {Co, C, k, k}, w2[2] = {Co, C * k * k};
    vt_tensor *x = vt_param(g, "x", 4, nhwc ? xs_nhwc : xs_nchw, (vt_init){VT_INIT_NORMAL, 1.0f});
    vt_tensor *w = vt_param(g, "w", 4, wsh, (vt_init){VT_INIT_NORMAL, 0.5f});
    vt_tensor *b = vt_param(g, "b", 1, &Co, (vt_init){VT_INIT_NORMAL, 0.5f});
    const int Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1, ys[3] = {B, Ho * Wo, Co};
    const int to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
    vt_tensor *y;
    if (use_conv) {
        y = vt_conv2d(g, nhwc ? vt_permute(g, x, to_nchw) : x, w, b, s, p, 1);
        y = vt_reshape(g, vt_permute(g, y, to_nhwc), 3, ys);
    } else {
        y = vt_reshape(g, vt_linear(g, vt_im2col(g, x, k, s, p, nhwc), vt_reshape(g, w, 2, w2), b), 3, ys);
    }
    vt_tensor *r = vt_input(g, "r", 3, ys);
    vt_graph_set_loss(g, vt_sum(g, vt_mul(g, y, r)));
    vt_graph_output(g, y);
    int ok = vt_graph_finalize(g, &e) == 0 && (size_t)(y->numel) <= cap &&
             (size_t)(x->numel + w->numel + b->numel) <= cap;
    if (ok) {
        vt_params_init(P, 3);
        for (int64_t i = 0; i < r->numel; i++) r->data[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
        vt_graph_forward(g);
        memcpy(out, y->data, sizeof(float) * (size_t)y->numel);
        vt_params_zero_grad(P);
        vt_graph_backward(g);
        memcpy(grads, x->grad, sizeof(float) * (size_t)x->numel);
        memcpy(grads + x->numel, w->grad, sizeof(float) * (size_t)w->numel);
        memcpy(grads + x->numel + w->numel, b->grad, sizeof(float) * (size_t)b->numel);
    } else {
        fprintf(stderr, "embed build: %s\n", e.msg);
    }
    vt_graph_free(g);
    vt_params_free(P);
    return ok;
}

static void check_im2col_conv(vt_test *T) {
    /* B, H, W, C, Co, k, s, p */
    static const int S[][8] = {
        {2, 13, 10, 3, 5, 7, 4, 3}, /* PVTv2 stage 1, odd and non-square */
        {1, 7, 9, 4, 6, 3, 2, 1},   /* PVTv2 stages 2-4 */
        {2, 10, 9, 3, 4, 4, 4, 0},  /* PVT v1 stage 1, sizes not multiples of 4 (floor) */
        {1, 5, 4, 3, 2, 2, 2, 0},   /* PVT v1 stages 2-4, odd */
        {1, 1, 1, 2, 3, 3, 2, 1},   /* 1x1 map, kernel mostly padding */
        {1, 6, 6, 2, 3, 3, 1, 1},   /* stride 1 */
        {2, 17, 16, 5, 3, 8, 8, 0}, /* the Refiner's 8x8/8 patch embed, a height not a multiple of 8 */
        {1, 8, 9, 2, 3, 4, 2, 1},   /* overlapping 4x4/2 with padding */
        {1, 16, 32, 2, 2, 16, 16, 0}, /* ViT's 16x16/16 */
    };
    enum { CAP = 16384 };
    static float o1[CAP], o2[CAP], g1[CAP], g2[CAP];
    for (size_t c = 0; c < sizeof S / sizeof S[0]; c++)
        for (int nhwc = 0; nhwc <= 1; nhwc++) {
            const int B = S[c][0], H = S[c][1], W = S[c][2], C = S[c][3], Co = S[c][4], k = S[c][5], s = S[c][6],
                      p = S[c][7];
            const size_t no = (size_t)B * ((H + 2 * p - k) / s + 1) * ((W + 2 * p - k) / s + 1) * Co;
            const size_t ng = (size_t)B * H * W * C + (size_t)Co * C * k * k + Co;
            const int ok = run_embed(0, nhwc, B, H, W, C, Co, k, s, p, o1, g1, CAP) &&
                           run_embed(1, nhwc, B, H, W, C, Co, k, s, p, o2, g2, CAP);
            double eo = 0, eg = 0, so = 1, sg = 1; /* differences, and the scales (at least 1) they are read on */
            for (size_t i = 0; ok && i < no; i++) eo = t_worse(eo, fabs(o1[i] - o2[i])), so = fmax(so, fabs(o2[i]));
            for (size_t i = 0; ok && i < ng; i++) eg = t_worse(eg, fabs(g1[i] - g2[i])), sg = fmax(sg, fabs(g2[i]));
            T_CHECK(T, ok && eo < 1e-5 * so && eg < 1e-4 * sg, "im2col+linear vs conv2d (%s, B %d, %dx%d, C %d) k%d "
                    "s%d p%d: output err %g of scale %g, grad err %g of scale %g", nhwc ? "NHWC" : "NCHW", B, H, W,
                    C, k, s, p, eo, so, eg, sg);
        }
}

/* ---- finite differences ---- */

static vt_tensor *b_i2c(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_im2col(g, x[0], c->ia[0], c->ia[1], c->ia[2], c->ia[3]);
}

static vt_tensor *b_resize(vt_graph *g, vt_tensor **x, const gc_case *c) {
    return vt_resize_bilinear(g, x[0], c->ia[0], c->ia[1]);
}

static const gc_case fd_cases[] = {
    {.name = "resize_up_nonsquare", .nx = 1, .ndim = {4}, .shape = {{2, 3, 4, 2}}, .build = b_resize, .ia = {5, 7}},
    {.name = "resize_down", .nx = 1, .ndim = {4}, .shape = {{1, 7, 6, 3}}, .build = b_resize, .ia = {3, 4}},
    {.name = "resize_1x1", .nx = 1, .ndim = {4}, .shape = {{1, 1, 1, 2}}, .build = b_resize, .ia = {3, 2}},
    {.name = "resize_same", .nx = 1, .ndim = {4}, .shape = {{1, 3, 3, 2}}, .build = b_resize, .ia = {3, 3}},
    {.name = "im2col_nchw_k7s4p3", .nx = 1, .ndim = {4}, .shape = {{1, 2, 9, 6}}, .build = b_i2c, .ia = {7, 4, 3, 0}},
    {.name = "im2col_nhwc_k3s2p1", .nx = 1, .ndim = {4}, .shape = {{2, 5, 4, 3}}, .build = b_i2c, .ia = {3, 2, 1, 1}},
    {.name = "im2col_nhwc_k2s2_odd", .nx = 1, .ndim = {4}, .shape = {{1, 5, 3, 2}}, .build = b_i2c, .ia = {2, 2, 0, 1}},
    {.name = "im2col_nchw_k3s1p1", .nx = 1, .ndim = {4}, .shape = {{1, 3, 4, 5}}, .build = b_i2c, .ia = {3, 1, 1, 0}},
};

/* 2x2 -> 4x4 and 3x3 -> 2x2 against F.interpolate(mode="bilinear", align_corners=False) values. */
static void check_resize_values(vt_test *T) {
    static const float up[16] = {1.0f, 1.25f, 1.75f, 2.0f, 1.5f, 1.75f, 2.25f, 2.5f,
                                 2.5f, 2.75f, 3.25f, 3.5f, 3.0f, 3.25f, 3.75f, 4.0f};
    /* 3x3 (0..8) -> 2x2: source coordinates 0.25 and 1.75 on each axis */
    static const float down[4] = {1.0f, 2.5f, 5.5f, 7.0f};
    static const struct {
        int h, w, ho, wo;
        const float *want;
    } C[] = {{2, 2, 4, 4, up}, {3, 3, 2, 2, down}};
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        const int xs[4] = {1, C[k].h, C[k].w, 1};
        vt_tensor *x = vt_input(g, "x", 4, xs), *y = vt_resize_bilinear(g, x, C[k].ho, C[k].wo);
        vt_graph_output(g, y);
        double err = 1.0;
        if (vt_graph_finalize(g, &e) == 0) {
            for (int i = 0; i < C[k].h * C[k].w; i++) x->data[i] = (float)(i + (C[k].h == 2));
            vt_graph_forward(g);
            err = 0.0;
            for (int i = 0; i < C[k].ho * C[k].wo; i++) err = t_worse(err, fabs(y->data[i] - C[k].want[i]));
        }
        T_CHECK(T, err < 1e-6, "resize %dx%d -> %dx%d against PyTorch: max err %g (%s)", C[k].h, C[k].w, C[k].ho,
                C[k].wo, err, e.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

static void check_im2col_errors(vt_test *T) {
    static const struct {
        int shape[4], k, s, p, nhwc;
        const char *want;
    } E[] = {
        {{1, 3, 4, 4}, 7, 4, 1, 0, "smaller than the 7x7 kernel"},
        {{1, 4, 4, 3}, 3, 0, 1, 1, "stride 0"},
        {{1, 4, 4, 3}, 3, 1, 3, 1, "padding 3"},
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, 0, &e);
        vt_tensor *y = vt_im2col(g, vt_input(g, "x", 4, E[i].shape), E[i].k, E[i].s, E[i].p, E[i].nhwc);
        T_CHECK(T, !y && strstr(g->err.msg, "im2col") && strstr(g->err.msg, E[i].want), "im2col error %zu: '%s'", i,
                g->err.msg);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

/* ---- the family on odd and non-square inputs ---- */

/* Builds the stage maps of `name` configured at image size S (0: the model's; small widths, one block per stage) for
 * a 2 x 3 x H x W input, runs them on random input, and checks their shapes against the grids (gh, gw) and that they
 * are finite; with want != NULL, the build must fail with an error containing want. */
static void check_maps(vt_test *T, const char *name, int S, int H, int W, const int gh[4], const int gw[4],
                       const char *want) {
    const vt_model_cfg *base = vt_model_find(name);
    vt_model_overrides ov = vt_model_no_overrides();
    ov.img_size = S;
    static const int dims[4] = {16, 24, 40, 48}, heads_v1[4] = {1, 2, 2, 3}, heads_h[4] = {1, 1, 2, 2};
    for (int i = 0; i < 4; i++) {
        ov.dims[i] = dims[i];
        ov.depths[i] = 1;
        ov.heads[i] = strstr(name, "hmhsa") ? heads_h[i] : heads_v1[i];
    }
    vt_err e = {0};
    vt_model_cfg c;
    vt_params *P = vt_params_new(&e);
    int ok = P && base && vt_model_configure(base, &ov, &c, &e) == 0 && vt_model_init_params(&c, P, 1, &e) == 0;
    vt_graph *g = ok ? vt_graph_new(P, 1, &e) : NULL;
    vt_tensor *maps[VT_MAX_STAGES] = {NULL};
    const int xs[4] = {2, 3, H, W};
    vt_tensor *x = g ? vt_input(g, "input", 4, xs) : NULL;
    ok = g && c.family->features(g, &c, x, maps) == 4;
    if (want) {
        T_CHECK(T, g && !ok && strstr(g->err.msg, want), "%s on %dx%d refused: '%s'", name, H, W, g ? g->err.msg : "");
        vt_graph_free(g);
        vt_params_free(P);
        return;
    }
    for (int i = 0; ok && i < 4; i++) vt_graph_output(g, maps[i]);
    ok = ok && vt_graph_finalize(g, &e) == 0;
    int shapes = ok, finite = ok;
    if (ok) {
        vt_rng r;
        vt_rng_seed(&r, 5);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] = vt_rng_normal(&r);
        vt_graph_forward(g);
        for (int i = 0; i < 4; i++) {
            shapes &= maps[i]->ndim == 4 && maps[i]->shape[0] == 2 && maps[i]->shape[1] == dims[i] &&
                      maps[i]->shape[2] == gh[i] && maps[i]->shape[3] == gw[i];
            for (int64_t j = 0; j < maps[i]->numel; j++) finite &= isfinite(maps[i]->data[j]);
        }
    }
    T_CHECK(T, ok && shapes && finite, "%s on %dx%d: maps build (%s), grids %dx%d %dx%d %dx%d %dx%d, finite", name, H,
            W, g ? g->err.msg : e.msg, gh[0], gw[0], gh[1], gw[1], gh[2], gw[2], gh[3], gw[3]);
    vt_graph_free(g);
    vt_params_free(P);
}

static void check_sizes(vt_test *T) {
    /* PVTv2: ceil(S/4), then ceil halves (k7 s4 p3, k3 s2 p1); v1: floors */
    check_maps(T, "pvt_v2_b1", 0, 61, 37, (const int[]){16, 8, 4, 2}, (const int[]){10, 5, 3, 2}, NULL);
    check_maps(T, "pvt_v2_b1_hmhsa_cffn", 0, 29, 64, (const int[]){8, 4, 2, 1}, (const int[]){16, 8, 4, 2}, NULL);
    check_maps(T, "pvt_tiny", 47, 47, 47, (const int[]){11, 5, 2, 1}, (const int[]){11, 5, 2, 1}, NULL);
    check_maps(T, "flatten_pvt_tiny", 33, 33, 33, (const int[]){8, 4, 2, 1}, (const int[]){8, 4, 2, 1}, NULL);
    check_maps(T, "flatten_pvt_v2_b1", 96, 96, 96, (const int[]){24, 12, 6, 3}, (const int[]){24, 12, 6, 3}, NULL);
    /* size-dependent parameters (v1's pos_embed{i}, FLatten's positional_encoding): the configured size only */
    /* v1's pos_embed{i} are resized for other inputs, except where the official stage-1 count test skips it */
    check_maps(T, "pvt_tiny", 64, 64, 72, (const int[]){16, 8, 4, 2}, (const int[]){18, 9, 4, 2}, NULL);
    check_maps(T, "pvt_tiny", 64, 128, 128, NULL, NULL, "stage 1's built patch count 256");
    check_maps(T, "flatten_pvt_v2_b1", 64, 96, 64, NULL, NULL, "built for 64x64");
    /* sizes the official code refuses: a clear error naming the size */
    static const struct {
        const char *model;
        int S;
        const char *want;
    } R[] = {
        {"pvt_v2_b1", 28, "smaller than its spatial-reduction ratio 8"},
        {"pvt_tiny", 31, "the smallest size it accepts is 32"},
        {"flatten_pvt_tiny", 31, "too small"},
        {"flatten_pvt_v2_b1", 48, "multiples of 32"},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        vt_model_overrides ov = vt_model_no_overrides();
        ov.img_size = R[i].S;
        vt_model_cfg c;
        vt_err e = {0};
        const int rc = vt_model_configure(vt_model_find(R[i].model), &ov, &c, &e);
        T_CHECK(T, rc != 0 && strstr(e.msg, R[i].want) && strstr(e.msg, R[i].model), "%s at %d refused: '%s'",
                R[i].model, R[i].S, e.msg);
    }
}

/* ---- patch embeds by convolution (inference graphs, embed_by_conv in src/blocks/common.c) ---- */

/* Builds `name` (small widths, one block per stage, no drop path) at 256 px for a batch of 2 (stage 2's embed: 2048
 * output positions, the rule's threshold) as an inference graph and as a training graph on the same parameters and
 * input: the inference graph's first embed must be a convolution where it overlaps (`overlap`: PVTv2's 7x7 / 4)
 * and oneDNN runs AVX2 or better, its stage-2 embed on Intel's AVX-512 or at oneDNN's AVX2 tier (the rows kernel;
 * a conv_nhwc node each; stage 3's 512 positions stay below the threshold; the training graph has none), its logits
 * those of the training graph's forward (im2col + linear). */
static void check_embed_conv(vt_test *T, const char *name, int overlap) {
    vt_model_overrides ov = vt_model_no_overrides();
    ov.img_size = 256;
    ov.drop_path = 0.0f;
    static const int dims[4] = {16, 24, 40, 48}, heads[4] = {1, 2, 2, 3};
    for (int i = 0; i < 4; i++) {
        ov.dims[i] = dims[i];
        ov.depths[i] = 1;
        ov.heads[i] = heads[i];
    }
    vt_err e = {0};
    vt_model_cfg c;
    vt_params *P = vt_params_new(&e);
    int ok = P && vt_model_configure(vt_model_find(name), &ov, &c, &e) == 0 && vt_model_init_params(&c, P, 1, &e) == 0;
    vt_graph *g[2] = {NULL, NULL};
    vt_tensor *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL};
    int convs[2] = {0, 0};
    for (int t = 0; ok && t < 2; t++) {
        g[t] = vt_graph_new(P, t, &e);
        y[t] = g[t] ? vt_model_build(g[t], &c, 2, &x[t]) : NULL;
        if (y[t]) vt_graph_output(g[t], y[t]);
        ok = y[t] && vt_graph_finalize(g[t], &e) == 0;
        for (int i = 0; ok && i < g[t]->nn; i++) convs[t] += !strcmp(g[t]->nodes[i]->op->name, "conv_nhwc");
    }
    double err = 0, scale = 0;
    if (ok) {
        vt_rng r;
        vt_rng_seed(&r, 11);
        for (int64_t i = 0; i < x[0]->numel; i++) x[0]->data[i] = x[1]->data[i] = vt_rng_normal(&r);
        vt_graph_forward(g[0]);
        vt_graph_forward(g[1]);
        for (int64_t i = 0; i < y[0]->numel; i++) {
            err = t_worse(err, fabs(y[0]->data[i] - y[1]->data[i]));
            scale = fmax(scale, fabs(y[1]->data[i]));
        }
    }
    const vt_gemm_plan *q = ok ? &g[0]->gemm : NULL;
    const int conv = q && !g[0]->int8 && q->force != VT_GEMM_OPENBLAS;
    const int embed2 = (q && q->intel && q->onednn >= VT_ISA_AVX512) || (q && q->onednn == VT_ISA_AVX2 &&
                                                                        q->force == VT_GEMM_AUTO);
    const int want = conv ? (overlap && q->onednn >= VT_ISA_AVX2) + embed2 : 0;
    T_CHECK(T, ok && convs[0] == want && convs[1] == 0 && scale > 0 && err <= 1e-4 * scale,
            "%s at 256 px, batch 2: inference graph's overlapping first embed as a convolution with oneDNN's AVX2 "
            "and its embed 2 on Intel's AVX-512 or oneDNN's AVX2 tier (%d: %d conv_nhwc nodes, training graph %d), "
            "logits within %g of the training graph's (scale %g) (%s)", name, want, convs[0], convs[1], err, scale,
            e.msg);
    for (int t = 0; t < 2; t++) vt_graph_free(g[t]);
    vt_params_free(P);
}

/* ---- PVTv2's FFN as one inference op (vt_dwffn_eval) against the op chain ---- */

typedef struct {
    const char *type; /* "mlp" or "cffn" (deployed form) */
    int H, W, hidden;
} ffn_case;

static vt_tensor *b_ffn(vt_graph *g, vt_tensor *x, const void *ctx) {
    const ffn_case *c = ctx;
    static const vt_block_opts opts = {.cffn_t = 2.0f / 3.0f, .cffn_r = 2};
    const vt_ffn_ctx f = {.hidden = c->hidden, .grid_h = c->H, .grid_w = c->W, .dwconv = 1, .conv_fanout = 1,
                          .winit = VT_INIT_W02, .opts = &opts};
    return vt_residual(g, x, vt_ffn_build(g, c->type, "mlp", x, &f));
}

/* Bands of one to many rows, images split into row blocks between threads (batch 1 and 3), a one-row map, and the
 * deployed cFFN's fc2_u as the op's second product; hidden widths in whole 16- and 8-channel strips and one (20)
 * that leaves 4 channels to the per-channel tail. */
static void check_ffn_fused(vt_test *T) {
    /* the last two: several bands of at least 512 pixels down an image (the rows a band keeps for the next) */
    static const ffn_case cases[] = {{"mlp", 7, 64, 16}, {"mlp", 5, 7, 24}, {"mlp", 1, 6, 16}, {"mlp", 9, 3, 8},
                                     {"cffn", 6, 40, 32}, {"cffn", 4, 5, 48}, {"mlp", 3, 5, 20},
                                     {"mlp", 45, 24, 16}, {"cffn", 50, 20, 24}};
    static const int batches[] = {1, 3, 2, 1, 2, 3, 2, 1, 2};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const ffn_case *c = &cases[i];
        char tag[96];
        snprintf(tag, sizeof tag, "pvtv2 %s eval %dx(%dx%d) hidden %d", c->type, batches[i], c->H, c->W, c->hidden);
        const int xs[3] = {batches[i], c->H * c->W, 8};
        gc_compare_eval_fused(T, tag, 3, xs, b_ffn, c, "dwffn", 1e-5);
    }
    /* the builder's errors: a training graph, tokens off the grid, a weight of the wrong shape */
    static const char *want[] = {"no backward", "H·W", "weights must be"};
    for (int k = 0; k < 3; k++) {
        vt_err e = {0};
        vt_params *P = vt_params_new(&e);
        vt_graph *g = vt_graph_new(P, k == 0, &e);
        const int xs[3] = {2, 12, 8}, w1s[2] = {16, 8}, hs[1] = {16}, dws[4] = {16, 1, 3, 3};
        const int w2s[2] = {8, k == 2 ? 15 : 16};
        vt_tensor *y = vt_dwffn_eval(g, vt_input(g, "x", 3, xs), 3, k == 1 ? 5 : 4, vt_input(g, "w1", 2, w1s),
                                     vt_input(g, "b1", 1, hs), vt_input(g, "dw", 4, dws), vt_input(g, "db", 1, hs),
                                     vt_input(g, "w2", 2, w2s), NULL);
        T_CHECK(T, !y && strstr(g->err.msg, want[k]), "dwffn error %d: '%s' (want '%s')", k, g->err.msg, want[k]);
        vt_graph_free(g);
        vt_params_free(P);
    }
}

void test_pvt(vt_test *T) {
    check_im2col_conv(T);
    for (size_t i = 0; i < sizeof fd_cases / sizeof fd_cases[0]; i++) gc_run(T, &fd_cases[i]);
    check_im2col_errors(T);
    check_resize_values(T);
    check_sizes(T);
    check_embed_conv(T, "pvt_v2_b1", 1);
    check_embed_conv(T, "pvt_tiny", 0);
    check_ffn_fused(T);
}
