/* Parameterised wrappers of single ops (linear, 1x1 conv on tokens, layernorm, conv, batchnorm) and the timm MLP. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "vitc/blocks.h"

const char *vt_pname(char *buf, const char *prefix, const char *suffix) {
    snprintf(buf, VT_NAMELEN, "%s%s%s", prefix, prefix[0] ? "." : "", suffix);
    return buf;
}

/* Creates (or finds) the weight (out, in) and optional bias of a PyTorch Linear named prefix, or of a 1x1 Conv2d
 * (weight (out, in, 1, 1), returned as its (out, in) view) when conv; 0 on success.
 * (noinline: inlined into callers that build prefix with vt_pname, GCC reports a possible name truncation.) */
__attribute__((noinline)) static int linear_params_in(vt_graph *g, const char *prefix, int in, int out, int bias,
                                                      vt_init winit, int conv, vt_tensor **w, vt_tensor **b) {
    char nm[VT_NAMELEN];
    int ws[4] = {out, in, 1, 1};
    *w = vt_param(g, vt_pname(nm, prefix, "weight"), conv ? 4 : 2, ws, winit);
    *b = bias ? vt_param(g, vt_pname(nm, prefix, "bias"), 1, &out, VT_INIT_Z) : NULL;
    if (!*w || (bias && !*b)) return -1;
    (*w)->paper_count = 1;
    if (conv) *w = vt_reshape(g, *w, 2, ws);
    return *w ? 0 : -1;
}

/* 1 when x has a feature axis (its last) for op of block prefix to read; else 0, the error set (a scalar input). */
static int feature_axis(vt_graph *g, const char *op, const char *prefix, const vt_tensor *x) {
    if (x->ndim >= 1) return 1;
    vt_fail(g, op, "%s: a scalar input has no feature axis", prefix);
    return 0;
}

/* linear_params_in for the layer reading x. */
static int linear_params(vt_graph *g, const char *prefix, const vt_tensor *x, int out, int bias, vt_init winit,
                         int conv, vt_tensor **w, vt_tensor **b) {
    if (!feature_axis(g, "linear", prefix, x)) return -1;
    return linear_params_in(g, prefix, x->shape[x->ndim - 1], out, bias, winit, conv, w, b);
}

int vt_linear_params(vt_graph *g, const char *prefix, const vt_tensor *x, int out, int bias, vt_init winit,
                     vt_tensor **w, vt_tensor **b) {
    return vt_bad(g, 1, x) ? -1 : linear_params(g, prefix, x, out, bias, winit, 0, w, b);
}

vt_tensor *vt_linear_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int bias, vt_init winit) {
    vt_tensor *w, *b;
    if (vt_bad(g, 1, x) || linear_params(g, prefix, x, out, bias, winit, 0, &w, &b)) return NULL;
    return vt_linear(g, x, w, b);
}

vt_tensor *vt_linear_t_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int bias, vt_init winit) {
    vt_tensor *w, *b;
    if (vt_bad(g, 1, x) || linear_params(g, prefix, x, out, bias, winit, 0, &w, &b)) return NULL;
    return vt_linear_t(g, x, w, b);
}

vt_tensor *vt_pointwise_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int bias, vt_init winit) {
    vt_tensor *w, *b;
    if (vt_bad(g, 1, x) || linear_params(g, prefix, x, out, bias, winit, 1, &w, &b)) return NULL;
    return vt_linear(g, x, w, b);
}

/* LayerNorm's params prefix.weight (ones) and prefix.bias (zeros) of c channels; 0 when both exist. */
static int ln_params(vt_graph *g, const char *prefix, int c, vt_tensor **w, vt_tensor **b) {
    char nm[VT_NAMELEN];
    *w = vt_param(g, vt_pname(nm, prefix, "weight"), 1, &c, VT_INIT_1);
    *b = vt_param(g, vt_pname(nm, prefix, "bias"), 1, &c, VT_INIT_Z);
    return !*w || !*b;
}

vt_tensor *vt_layernorm_p(vt_graph *g, const char *prefix, vt_tensor *x, float eps) {
    vt_tensor *w, *b;
    if (vt_bad(g, 1, x) || !feature_axis(g, "layernorm", prefix, x)) return NULL;
    if (ln_params(g, prefix, x->shape[x->ndim - 1], &w, &b)) return NULL;
    return vt_layernorm(g, x, w, b, eps);
}

vt_tensor *vt_layernorm_cf_p(vt_graph *g, const char *prefix, vt_tensor *x, float eps, int act) {
    if (vt_bad(g, 1, x)) return NULL;
    if (x->ndim < 2) return vt_layernorm_cf(g, x, NULL, NULL, eps, act); /* its error */
    vt_tensor *w, *b;
    if (ln_params(g, prefix, x->shape[1], &w, &b)) return NULL;
    return vt_layernorm_cf(g, x, w, b, eps, act);
}

/* A conv's fan-in (in / groups · k²), PyTorch's init bound's; 0 (op's error set) for a group count that does not
 * divide in, or a kernel under 1. */
static int conv_fan_in(vt_graph *g, const char *op, const char *prefix, int in, int k, int groups) {
    if (groups >= 1 && in % groups == 0 && k >= 1) return in / groups * k * k;
    vt_fail(g, op, "%s: %d input channels, groups %d, kernel %d", prefix, in, groups, k);
    return 0;
}

vt_tensor *vt_conv_bias(vt_graph *g, const char *prefix, int out, int in, int k, int groups) {
    char nm[VT_NAMELEN];
    const int fan = conv_fan_in(g, "conv_bias", prefix, in, k, groups);
    if (!fan) return NULL;
    const float bound = 1.0f / sqrtf((float)fan);
    return vt_param(g, vt_pname(nm, prefix, "bias"), 1, &out, (vt_init){VT_INIT_UNIFORM, bound});
}

vt_tensor *vt_conv2d_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int k, int stride, int pad, int groups,
                       int bias) {
    if (vt_bad(g, 1, x)) return NULL;
    if (x->ndim != 4 || groups <= 0 || x->shape[1] % groups)
        return vt_fail(g, "conv2d", "%s: input must be (B, C, H, W) with C divisible by groups %d", prefix, groups);
    vt_tensor *w = vt_conv_weight(g, prefix, out, x->shape[1], k, groups);
    vt_tensor *b = bias ? vt_conv_bias(g, prefix, out, x->shape[1], k, groups) : NULL;
    return vt_conv2d(g, x, w, b, stride, pad, groups);
}

#define EMBED_CONV_MIN 2048 /* embed_by_conv */
#define EMBED_ROWS_W 131072 /* embed_by_conv: 512 KB */

/* Whether vt_conv_tokens runs one oneDNN convolution over channels-last input rather than vt_im2col + a linear, in
 * float inference graphs (int8 ones keep their quantised linear; training graphs keep the linear, whose backward is
 * one GEMM per gradient over the batch, where a strided conv's dX goes through the patches' adjoint).
 * - Non-overlapping patches (k = s) over the NCHW image: the linear. Its backward is one GEMM per gradient over
 *   the whole batch (dW: K = B·Ho·Wo), where the NCHW conv's im2col path runs one per image (K = Ho·Wo) into
 *   per-thread dW partials: on the Refiner's 8x8/8 patch projection (128 -> 384 channels, 112x112 at batch 16) its
 *   backward took 298-319 ms against 530-551 for the conv and the permute to tokens, the forward 168-178 against
 *   174-177 ms (three alternated runs, 2 threads, AMD EPYC Zen 3, 2026-11-28). On 3-channel image patch embeds
 *   (16x16/16 to 192 or 384, 4x4/4 to 96) it was 1.0-1.6x slower, and the ViTs keep the NCHW conv.
 * - The first embed when its patches overlap (PVTv2's 7x7 / 4 over the 3-channel image, permuted to channels-last
 *   first): the patches of 3-channel pixels are 147 short copies per output pixel, the conv reads the image in place.
 *   Eval graphs of pvt_v2_b1, the two forms alternated in one process (AMD EPYC Zen 3, oneDNN's AVX2 kernels,
 *   2026-11-30): the scope 21.3 -> 12.1 ms per batch-16 forward (im2col 8.1 + linear 11.4 against permute 2.8 + conv
 *   7.8), 1.2 -> 0.8 ms at batch 1. PVT v1's non-overlapping 4x4 / 4 embed gained nothing (9.9 -> 9.0 ms at batch
 *   16, 0.6 -> 0.7 at batch 1): it keeps the patches.
 * - Embeds over a token map (stages 2-4) with at least EMBED_CONV_MIN output positions (B·Ho·Wo), on Intel's
 *   AVX-512: the patches pass goes and the conv's blocked kernel runs as fast as the linear's GEMM there; on fewer
 *   positions the conv split its work worse (nodes of eval graphs, two runs each, 2 threads, Intel Xeon Ice Lake,
 *   2026-11-29: PVTv2-b1 at batch 16, embed2 13.9-16.3 -> 9.3-9.5 ms, embed3 12.9-16.0 -> 10.9-11.3, embed4 (784
 *   positions) 12.7-15.0 -> 12.6-14.6; at batch 1 embed2 (784) 0.59-0.86 -> 0.60-0.63, embed3 (196) 0.78-0.89 ->
 *   0.90-0.93, embed4 (49) 0.86-1.03 -> 1.8-2.0; PVT-Tiny's k = s = 2 embeds at batch 16 6.7 -> 4.6 and 6.0-6.2 ->
 *   5.4-5.6 ms). On an AMD EPYC Zen 3 (2026-11-28) they made PVTv2-b1's batch-16 inference 1.04-1.06x slower
 *   (docs/benchmarks.md); on AMD's AVX-512 (EPYC Zen 4, 2026-11-30, bench/vendor_rules.c with only this case
 *   flipped) PVTv2-b1's eval graph read level (0.994 at batch 16, 0.997 at batch 1): Intel only.
 * - On oneDNN's AVX2 tier, embeds over a token map with at least EMBED_CONV_MIN output positions whose weight
 *   holds at most EMBED_ROWS_W floats (PVTv2's and PVT's stage-2 embeds): vt_conv2d_nhwc takes its rows kernel
 *   there (patches of 256 output pixels gathered into cache, one GEMM each, the weight in L2), not oneDNN's strided
 *   convolution (2x slower than im2col + linear at every stage). The three PVTv2-b1 embeds of stages 2-4 per
 *   forward, eval graphs alternated in one process (AMD EPYC Zen 3, 2026-11-30), im2col + linear against the rows
 *   kernel at stage 2: 59.3 vs 53.8 ms at batch 16, 15.4 vs 14.8 at batch 4 (PVT-Tiny 29.1 vs 26.7, 7.7 vs 7.3),
 *   where identical graphs read 0.97-1.0 in that harness; the rows kernel lost at stages 3-4 (1.5 and 5.9 MB
 *   weights: 20.0 vs 17.1 and 24.2 vs 16.7 ms at batch 16) and on stage 2's 784 positions at batch 1 (1.11 vs
 *   0.97).
 * - CSwin's stem (7x7 / 4 over the image) and merges (3x3 / 2 over the token map) take the same rules. Against the
 *   NCHW convolutions between permutes they ran before (bench/vitc_before_after.py, three alternated rounds, AMD
 *   EPYC Zen 4, 2026-12-04), the merges made CSwin-T 1.02-1.04x faster (training and inference, batch 1 and 16;
 *   im2col + linear there); the stem's nodes took 14.3 against 19.6 ms per 30 batch-1 forwards (conv_nhwc and its
 *   permute) and read level in training. */
static int embed_by_conv(const vt_graph *g, int first, int k, int s, int64_t positions, int64_t wfloats) {
    const vt_gemm_plan *q = &g->gemm;
    if (g->training || g->int8 || q->force == VT_GEMM_OPENBLAS) return 0;
    if (first) return k > s && q->onednn >= VT_ISA_AVX2;
    if (q->onednn == VT_ISA_AVX2 && q->force == VT_GEMM_AUTO)
        return positions >= EMBED_CONV_MIN && wfloats <= EMBED_ROWS_W;
    return positions >= EMBED_CONV_MIN && q->intel && q->onednn >= VT_ISA_AVX512;
}

vt_tensor *vt_conv_tokens(vt_graph *g, vt_tensor *x, int nhwc, vt_tensor *w, vt_tensor *b, int stride, int pad) {
    if (vt_bad(g, 2, x, w)) return NULL;
    char sx[64], sw[64];
    if (x->ndim != 4 || w->ndim != 4 || w->shape[2] != w->shape[3] || w->shape[1] != x->shape[nhwc ? 3 : 1])
        return vt_fail(g, "conv_tokens", "input %s (%s), weight %s (Cout, C, k, k): shapes do not fit",
                       vt_shape_str(x, sx, 64), nhwc ? "B, H, W, C" : "B, C, H, W", vt_shape_str(w, sw, 64));
    if (stride < 1 || pad < 0) return vt_fail(g, "conv_tokens", "stride %d (>= 1), padding %d (>= 0)", stride, pad);
    const int B = x->shape[0], k = w->shape[2], Co = w->shape[0], w2[2] = {Co, w->shape[1] * k * k};
    const int H = x->shape[nhwc ? 1 : 2], W = x->shape[nhwc ? 2 : 3];
    const int64_t pos = (int64_t)B * ((H + 2 * pad - k) / stride + 1) * ((W + 2 * pad - k) / stride + 1);
    static const int to_nhwc[4] = {0, 2, 3, 1};
    if (H + 2 * pad >= k && W + 2 * pad >= k && embed_by_conv(g, !nhwc, k, stride, pos, w->numel))
        return vt_conv2d_nhwc(g, nhwc ? x : vt_permute(g, x, to_nhwc), w, b, stride, pad, 1);
    return vt_linear(g, vt_im2col(g, x, k, stride, pad, nhwc), vt_reshape(g, w, 2, w2), b);
}

vt_tensor *vt_conv2d_tokens_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int k, int stride, int pad,
                              int *gh, int *gw) {
    if (vt_bad(g, 1, x)) return NULL;
    if (x->ndim != 4) return vt_fail(g, "conv2d", "%s: input must be (B, C, H, W)", prefix);
    char nm[VT_NAMELEN];
    const int B = x->shape[0], C = x->shape[1];
    vt_tensor *w = vt_conv_weight(g, prefix, out, C, k, 1);
    const float bound = 1.0f / sqrtf((float)(C * k * k));
    vt_tensor *b = vt_param(g, vt_pname(nm, prefix, "bias"), 1, &out, (vt_init){VT_INIT_UNIFORM, bound});
    vt_tensor *y = vt_conv_tokens(g, x, 0, w, b, stride, pad); /* (B, Ho, Wo, out) */
    if (!y || !b) return NULL;
    *gh = y->shape[1];
    *gw = y->shape[2];
    const int ts[3] = {B, *gh * *gw, out};
    return vt_reshape(g, y, 3, ts);
}

vt_tensor *vt_conv_weight(vt_graph *g, const char *prefix, int out, int in, int k, int groups) {
    char nm[VT_NAMELEN];
    const int fan = conv_fan_in(g, "conv_weight", prefix, in, k, groups);
    if (!fan) return NULL;
    const int ws[4] = {out, in / groups, k, k};
    const float bound = 1.0f / sqrtf((float)fan);
    vt_tensor *w = vt_param(g, vt_pname(nm, prefix, "weight"), 4, ws, (vt_init){VT_INIT_UNIFORM, bound});
    if (w) w->paper_count = 1;
    return w;
}

int vt_bn_tensors(vt_graph *g, const char *prefix, int c, vt_tensor *t[5]) {
    char nm[VT_NAMELEN];
    int one = 1;
    t[0] = vt_param(g, vt_pname(nm, prefix, "weight"), 1, &c, VT_INIT_1);
    t[1] = vt_param(g, vt_pname(nm, prefix, "bias"), 1, &c, VT_INIT_Z);
    t[2] = vt_buffer(g, vt_pname(nm, prefix, "running_mean"), 1, &c, VT_INIT_Z);
    t[3] = vt_buffer(g, vt_pname(nm, prefix, "running_var"), 1, &c, VT_INIT_1);
    t[4] = vt_buffer(g, vt_pname(nm, prefix, "num_batches_tracked"), 0, &one, VT_INIT_Z);
    if (!t[0] || !t[1] || !t[2] || !t[3] || !t[4]) return -1;
    t[4]->is_i64 = 1;
    return 0;
}

/* The BatchNorm tensors of prefix for x's channel axis (negative: from the end), checked first; 0 or -1 (error set). */
static int bn_params(vt_graph *g, const char *prefix, vt_tensor *x, int axis, vt_tensor *t[5]) {
    if (vt_bad(g, 1, x)) return -1;
    if (axis < -x->ndim || axis >= x->ndim) {
        vt_fail(g, "batchnorm", "%s: channel axis %d of a %d-D input", prefix, axis, x->ndim);
        return -1;
    }
    return vt_bn_tensors(g, prefix, x->shape[axis < 0 ? axis + x->ndim : axis], t);
}

/* The BatchNorm prefix on x (folded: its tensors only, x returned) with activation act after it (-1: none). */
static vt_tensor *batchnorm(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum,
                            int folded, int act) {
    vt_tensor *t[5];
    if (bn_params(g, prefix, x, axis, t)) return NULL;
    if (axis < 0) axis += x->ndim;
    return folded ? x : vt_batchnorm_act(g, x, t[0], t[1], t[2], t[3], t[4], axis, eps, momentum, act);
}

vt_tensor *vt_batchnorm_folded(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum,
                               int folded) {
    return batchnorm(g, prefix, x, axis, eps, momentum, folded, -1);
}

vt_tensor *vt_batchnorm_p(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum) {
    return batchnorm(g, prefix, x, axis, eps, momentum, 0, -1);
}

vt_tensor *vt_batchnorm_res_p(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum,
                              float oscale, vt_tensor *r) {
    vt_tensor *t[5];
    if (bn_params(g, prefix, x, axis, t)) return NULL;
    return vt_batchnorm_res(g, x, t[0], t[1], t[2], t[3], t[4], axis, eps, momentum, oscale, r);
}

vt_tensor *vt_batchnorm_act_p(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum,
                              int act) {
    return batchnorm(g, prefix, x, axis, eps, momentum, 0, act);
}

vt_tensor *vt_bn_fold_weight(vt_graph *g, const char *prefix, vt_tensor *w, float eps, vt_tensor **bias) {
    *bias = NULL;
    if (vt_bad(g, 1, w)) return NULL;
    vt_tensor *t[5];
    if (vt_bn_tensors(g, prefix, w->shape[0], t)) return NULL;
    const int O = w->shape[0], rows[2] = {O, (int)(w->numel / O)}, col[2] = {O, 1};
    /* s = γ·(σ² + eps)^(−1/2), t = β − μ·s; w·s on w's (O, rest) view, one scale per row */
    vt_tensor *s = vt_mul(g, t[0], vt_unary(g, vt_affine(g, t[3], 1.0f, eps), VT_POW, -0.5f));
    *bias = vt_sub(g, t[1], vt_mul(g, t[2], s));
    vt_tensor *ws = vt_mul(g, vt_reshape(g, w, 2, rows), vt_reshape(g, s, 2, col));
    return *bias && ws ? vt_reshape(g, ws, w->ndim, w->shape) : NULL;
}

vt_tensor *vt_bn_scale_shift(vt_graph *g, const char *prefix, int c, float eps) {
    vt_tensor *t[5];
    if (vt_bn_tensors(g, prefix, c, t)) return NULL;
    vt_tensor *s = vt_mul(g, t[0], vt_unary(g, vt_affine(g, t[3], 1.0f, eps), VT_POW, -0.5f));
    const int row[2] = {1, c};
    vt_tensor *st[2] = {vt_reshape(g, s, 2, row), vt_reshape(g, vt_sub(g, t[1], vt_mul(g, t[2], s)), 2, row)};
    return vt_concat(g, st, 2, 0);
}

vt_tensor *vt_pointwise_bn_p(vt_graph *g, const char *conv, const char *bn, vt_tensor *x, int out, vt_init winit,
                             float eps, float momentum, int folded) {
    vt_tensor *w, *b;
    if (vt_bad(g, 1, x) || linear_params(g, conv, x, out, 0, winit, 1, &w, &b)) return NULL;
    if (!folded) return vt_batchnorm_folded(g, bn, vt_linear(g, x, w, NULL), -1, eps, momentum, 0);
    w = vt_bn_fold_weight(g, bn, w, eps, &b);
    return vt_linear(g, x, w, b);
}

vt_tensor *vt_block_residual(vt_graph *g, vt_tensor *x, vt_tensor *h, float drop) {
    return vt_residual_drop(g, x, h, drop);
}

/* The FFN's first layer's name: prefix.fc1, torchvision's prefix.0, Next-ViT's 1×1 conv prefix.conv1. */
static const char *fc1_name(const vt_ffn_ctx *f) { return f->conv1x1 ? "conv1" : f->tv_names ? "0" : "fc1"; }

/* PVTv2's depthwise 3×3 (prefix.dwconv.dwconv) over the hidden map of x's tokens, -1 (failed) where x is not
 * (B, H·W, C) on the FFN's grid. */
static int dw_params(vt_graph *g, const char *prefix, const vt_tensor *x, const vt_ffn_ctx *f, vt_tensor **dw,
                     vt_tensor **db) {
    char nm[VT_NAMELEN];
    if (x->ndim != 3 || f->grid_h * f->grid_w != x->shape[1]) {
        vt_fail(g, "mlp", "%s: the depthwise conv needs (B, H·W, C) tokens on the %dx%d grid", prefix, f->grid_h,
                f->grid_w);
        return -1;
    }
    const int hid = f->hidden, ws[4] = {hid, 1, 3, 3};
    const vt_init wi = vt_conv_init(9, 9, f->conv_fanout); /* depthwise: fan_in = fan_out = 3·3 */
    *dw = vt_param(g, vt_pname(nm, prefix, "dwconv.dwconv.weight"), 4, ws, wi);
    *db = vt_param(g, vt_pname(nm, prefix, "dwconv.dwconv.bias"), 1, &hid, f->conv_fanout ? VT_INIT_Z : wi);
    if (!*dw || !*db) return -1;
    (*dw)->paper_count = 1;
    return 0;
}

/* The FFN's pre-activation: prefix.fc1 (torchvision: prefix.0, Next-ViT: the 1×1 conv prefix.conv1)
 * [→ PVTv2's depthwise 3×3 on the token grid]; with gelu and no DWConv, GELU fused into fc1's epilogue, and with
 * Next-ViT's ReLU always fused there (then the result is the activation). */
static vt_tensor *fc1_pre(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f, int gelu) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    vt_tensor *w, *b;
    if (linear_params(g, vt_pname(nm, prefix, fc1_name(f)), x, f->hidden, 1, f->winit, f->conv1x1, &w, &b)) return NULL;
    if (f->relu && f->dwconv) return vt_fail(g, "mlp", "%s: no ReLU variant of the DWConv MLP", prefix);
    if (f->relu) return vt_linear_relu(g, x, w, b); /* the activation in the GEMM's epilogue */
    if (!f->dwconv) return gelu ? vt_linear_gelu(g, x, w, b) : vt_linear(g, x, w, b);
    vt_tensor *dw, *db;
    if (dw_params(g, prefix, x, f, &dw, &db)) return NULL;
    const int B = x->shape[0], N = x->shape[1], hid = f->hidden;
    const int map[4] = {B, f->grid_h, f->grid_w, hid}, tok[3] = {B, N, hid};
    vt_tensor *h = vt_reshape(g, vt_linear(g, x, w, b), 4, map);
    return vt_reshape(g, gelu ? vt_dwconv_nhwc_gelu(g, h, dw, db, 1) : vt_dwconv_nhwc(g, h, dw, db, 1), 3, tok);
}

vt_tensor *vt_block_fc1_act(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f) {
    return fc1_pre(g, prefix, x, f, 1);
}

vt_tensor *vt_block_fc1_pre(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f) {
    return f->relu ? vt_fail(g, "mlp", "%s: a ReLU FFN has its activation in fc1", prefix) : fc1_pre(g, prefix, x, f, 0);
}

/* An MLP's GELU goes into fc1's epilogue (vt_linear_gelu, keeping GELU's output and derivative for backward)
 * rather than fc2's prologue (vt_gelu_linear, keeping only fc1's output; backward computes GELU again): in train
 * graphs whose hidden activation is at most 2^20 floats. Measured with `vitc bench --train` (2026-11-23, AMD EPYC
 * Zen 4, 2 threads): the demo's ViT (2,176 × 256 hidden) 2.5-5% faster in the epilogue form; DeiT-T at batch 16
 * (3,152 × 768) no faster and a 28% larger arena.
 * In float inference graphs, where fc1 runs as one oneDNN matmul primitive (GEMM rule 5) with GELU after it in the
 * same node (then oneDNN's post-op; since 98c224b vitc's vector GELU over the output, faster than that post-op), and
 * fc2 a primitive too rather than one-thread row panels: CSwin-T's eval graph at batch 16 ran 1.04-1.05x faster
 * (per-round medians of 14-20 alternated rounds, three runs, Intel Xeon Ice Lake, 2026-11-29); MLPs alone (R rows,
 * C channels, hidden 4C, 30 alternated rounds) 0.99-1.05x. PVTv2's FFN (fc1, DWConv, GELU, fc2) the same way at
 * inference where vt_dwffn_eval does not take it, GELU as the depthwise conv's post-op (vt_dwconv_nhwc_gelu) and fc2
 * a primitive: eval graphs of PVTv2-b1 at batch 16 / 1 1.04-1.06x / 1.04-1.05x,
 * FLatten-PVTv2-b1 1.02-1.06x / 1.01x, pvt_v2_b1_hmhsa_cffn 1.02-1.04x at batch 16 (per-round medians of 16-20
 * alternated rounds, same CPU and day); train graphs keep GELU in fc2's prologue. Where rule 12 packs the weights
 * (vt_gemm_linear_packs) fc1 is a 1x1 convolution of any shape, GELU after it: on AMD's AVX-512 (EPYC Zen 4,
 * 2026-12-04, eval graphs in one process, per-round medians of 7-15) CSwin-T at batch 16 1.03-1.04x, Swin-T 1.03,
 * DeiT-S 1.02, the rest 0.99-1.01x. */
int vt_block_gelu_in_fc1(vt_graph *g, const vt_tensor *x, const vt_ffn_ctx *f) {
    const int64_t R = x->numel / x->shape[x->ndim - 1];
    if (g->training) return !f->dwconv && R * f->hidden <= (1 << 20);
    return !g->int8 && R <= INT32_MAX &&
           (vt_gemm_linear_wanted(&g->gemm, g->threads, (int)R, f->hidden, x->shape[x->ndim - 1], 1) ||
            vt_gemm_linear_packs(&g->gemm));
}

/* name.weight / name.bias Linear (out features, as vt_linear_p) applied to GELU(h), GELU in its GEMM prologue. */
static vt_tensor *gelu_linear_p(vt_graph *g, const char *name, vt_tensor *h, int out, vt_init winit) {
    vt_tensor *w, *b;
    if (vt_bad(g, 1, h) || linear_params(g, name, h, out, 1, winit, 0, &w, &b)) return NULL;
    return vt_gelu_linear(g, h, w, b);
}

int vt_block_ffn_input(vt_graph *g, const char *prefix, const vt_tensor *x) {
    return !vt_bad(g, 1, x) && feature_axis(g, "mlp", prefix, x);
}

vt_tensor *vt_block_ffn_gelu_linear(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f,
                                    const char *name, int out, vt_init winit) {
    if (!vt_block_ffn_input(g, prefix, x)) return NULL;
    if (f->relu) return vt_fail(g, "mlp", "%s: a ReLU FFN has its activation in fc1", prefix);
    /* PVTv2's FFN in inference graphs: one op, band by band (vt_dwffn_eval), where its rule says it is faster */
    if (f->dwconv && !f->conv1x1 && !g->int8 && !g->ref_kernels &&
        vt_dwffn_wanted(g, x->numel / x->shape[x->ndim - 1], x->shape[x->ndim - 1], f->hidden, out)) {
        char nm[VT_NAMELEN];
        vt_tensor *w1, *b1, *dw, *db, *w2, *b2;
        if (linear_params(g, vt_pname(nm, prefix, fc1_name(f)), x, f->hidden, 1, f->winit, 0, &w1, &b1) ||
            dw_params(g, prefix, x, f, &dw, &db) || linear_params_in(g, name, f->hidden, out, 1, winit, 0, &w2, &b2))
            return NULL;
        return vt_dwffn_eval(g, x, f->grid_h, f->grid_w, w1, b1, dw, db, w2, b2);
    }
    /* the plain MLP in inference graphs: one op, band by band (vt_ffn_eval), where its rule says it is faster */
    if (!f->dwconv && !f->conv1x1 && !g->int8 && !g->ref_kernels &&
        vt_ffn_wanted(g, x->numel / x->shape[x->ndim - 1], x->shape[x->ndim - 1], f->hidden, out)) {
        char nm[VT_NAMELEN];
        vt_tensor *w1, *b1, *w2, *b2;
        if (linear_params(g, vt_pname(nm, prefix, fc1_name(f)), x, f->hidden, 1, f->winit, 0, &w1, &b1) ||
            linear_params_in(g, name, f->hidden, out, 1, winit, 0, &w2, &b2))
            return NULL;
        return vt_ffn_eval(g, x, w1, b1, w2, b2);
    }
    if (vt_block_gelu_in_fc1(g, x, f)) return vt_linear_p(g, name, fc1_pre(g, prefix, x, f, 1), out, 1, winit);
    return gelu_linear_p(g, name, fc1_pre(g, prefix, x, f, 0), out, winit);
}

vt_tensor *vt_block_ffn_mlp(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f) {
    if (!vt_block_ffn_input(g, prefix, x)) return NULL;
    char nm[VT_NAMELEN];
    const int C = x->shape[x->ndim - 1];
    if (f->relu || f->conv1x1) { /* Next-ViT: conv1 -> ReLU -> conv2, 1×1 convs */
        vt_tensor *h = vt_block_fc1_act(g, prefix, x, f);
        return f->conv1x1 ? vt_pointwise_p(g, vt_pname(nm, prefix, "conv2"), h, C, 1, f->winit)
                          : vt_linear_p(g, vt_pname(nm, prefix, f->tv_names ? "3" : "fc2"), h, C, 1, f->winit);
    }
    return vt_block_ffn_gelu_linear(g, prefix, x, f, vt_pname(nm, prefix, f->tv_names ? "3" : "fc2"), C, f->winit);
}

vt_tensor *vt_block_mlp(vt_graph *g, const char *prefix, vt_tensor *x, int hidden) {
    const vt_ffn_ctx f = {.hidden = hidden, .winit = VT_INIT_W02};
    return vt_block_ffn_mlp(g, prefix, x, &f);
}
