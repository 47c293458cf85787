/* Next-ViT's blocks (Li et al. 2022; bytedance/Next-ViT classification/nextvit.py, shared/specs/spec-nextvit.md
 * §2, §4) on channels-last tokens (B, H·W, C), with the official state_dict names:
 *   PatchEmbed: stride 2: AvgPool2d(2, ceil_mode, count_include_pad=False) -> 1x1 conv (no bias) -> BatchNorm;
 *               stride 1 and a width change: 1x1 conv -> BatchNorm; otherwise nothing (no keys);
 *   MHCA: grouped 3x3 conv (32 channels per group, no bias) -> BatchNorm -> ReLU -> 1x1 `projection` (no bias),
 *         the grouped conv channels-last (vt_conv2d_nhwc, oneDNN's convolution where available);
 *   NCB: x = PE(x); x += MHCA(x); x += MLP(norm(x)) (MLP ratio 3);
 *   NTB: x = PE(x) (to Cs = 3/4 of the width); x += E-MHSA(norm1(x)) (the attention table's type in the NEXTVIT
 *        layout, heads Cs/32); o = projection(x) (1x1 conv + BN to Cc); o += MHCA(o); x = [x, o];
 *        x += MLP(norm2(x)) (MLP ratio 2). Drop-path 0.75p / 0.25p / p on the three NTB branches, p on both NCB's.
 * The MLP is the FFN table's type with Next-ViT's 1x1-conv names and ReLU. In the deployed form the pre-norms
 * (norm, norm1, norm2 and E-MHSA's BatchNorm1d) are folded into the next layer (vt_merge_pre_bn) and kept in the
 * state_dict unapplied, and the BNs after PatchEmbed's and MHCA's convs are folded into those convs in the graph
 * (vt_bn_fold_weight: what TensorRT's conv + BN fusion does for the official deployment). Every norm is BatchNorm
 * with eps 1e-5. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/blocks.h"

#define NV_EPS 1e-5f
#define NV_MOMENTUM 0.1f
#define NV_HEAD_DIM 32

/* The official _make_divisible(v, divisor) with min_value = divisor. */
static int make_divisible(double v, int d) {
    int n = (int)(v + d / 2.0) / d * d;
    if (n < d) n = d;
    if (n < 0.9 * v) n += d;
    return n;
}

/* MHSA width Cs of an NTB with `out` channels: _make_divisible(int(0.75·out), 32); the conv stream has out − Cs. */
static int mhsa_width(int out) { return make_divisible((double)(int)(out * 0.75), NV_HEAD_DIM); }

/* BatchNorm (eps 1e-5) over the channels of tokens x (B, N, C); only its tensors when folded. */
static vt_tensor *bn(vt_graph *g, const char *prefix, const char *name, vt_tensor *x, int folded) {
    char nm[VT_NAMELEN];
    return vt_batchnorm_folded(g, vt_pname(nm, prefix, name), x, -1, NV_EPS, NV_MOMENTUM, folded);
}

/* PatchEmbed(in, out, stride) prefix.{conv, norm} on x (B, H·W, in); *H, *W become the output grid; folded: the BN
 * folded into the conv. */
static vt_tensor *patch_embed(vt_graph *g, const char *prefix, vt_tensor *x, int *H, int *W, int out, int stride,
                              int folded) {
    if (vt_bad(g, 1, x)) return NULL;
    if (stride != 1 && stride != 2)
        return vt_fail(g, "patch_embed", "%s: stride %d (Next-ViT's are 1 and 2)", prefix, stride);
    char nm[VT_NAMELEN], n2[VT_NAMELEN];
    const int B = x->shape[0], C = x->shape[2];
    if (stride == 2) {
        const int map[4] = {B, *H, *W, C};
        const vt_pool_args pa = {.k = 2, .s = 2, .ceil_mode = 1, .nhwc = 1};
        vt_tensor *p = vt_avgpool2d_ex(g, vt_reshape(g, x, 4, map), &pa);
        if (!p) return NULL;
        *H = p->shape[1];
        *W = p->shape[2];
        const int tok[3] = {B, *H * *W, C};
        x = vt_reshape(g, p, 3, tok);
    } else if (C == out) {
        return x;
    }
    return vt_pointwise_bn_p(g, vt_pname(nm, prefix, "conv"), vt_pname(n2, prefix, "norm"), x, out, VT_INIT_W02, NV_EPS,
                             NV_MOMENTUM, folded);
}

/* MHCA on x (B, H·W, C): prefix.group_conv3x3 (groups C/32) -> prefix.norm (BN; folded into the conv when folded)
 * -> ReLU -> prefix.projection. */
static vt_tensor *block_mhca(vt_graph *g, const char *prefix, vt_tensor *x, int H, int W, int folded) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN], sx[64];
    const int B = x->shape[0], C = x->shape[x->ndim - 1];
    if (x->ndim != 3 || x->shape[1] != H * W || C % NV_HEAD_DIM)
        return vt_fail(g, "mhca", "%s: input %s must be (B, %d·%d, C) with C a multiple of %d", prefix,
                       vt_shape_str(x, sx, 64), H, W, NV_HEAD_DIM);
    const int map[4] = {B, H, W, C}, ws[4] = {C, NV_HEAD_DIM, 3, 3}, tok[3] = {B, H * W, C};
    vt_tensor *w = vt_param(g, vt_pname(nm, prefix, "group_conv3x3.weight"), 4, ws, VT_INIT_W02);
    if (w) w->paper_count = 1;
    vt_tensor *bias = NULL;
    if (folded) w = vt_bn_fold_weight(g, vt_pname(nm, prefix, "norm"), w, NV_EPS, &bias);
    vt_tensor *h, *xm = vt_reshape(g, x, 4, map);
    if (folded) { /* the BN in the weight and bias, the ReLU in the conv's output pass */
        h = vt_reshape(g, vt_conv2d_nhwc_relu(g, xm, w, bias, 1, 1, C / NV_HEAD_DIM), 3, tok);
    } else {
        h = vt_reshape(g, vt_conv2d_nhwc(g, xm, w, NULL, 1, 1, C / NV_HEAD_DIM), 3, tok);
        h = vt_batchnorm_act_p(g, vt_pname(nm, prefix, "norm"), h, -1, NV_EPS, NV_MOMENTUM, VT_RELU);
    }
    return vt_pointwise_p(g, vt_pname(nm, prefix, "projection"), h, C, 0, VT_INIT_W02);
}

/* The block's MLP: FFN `type` at prefix.mlp with hidden = _make_divisible(C·ratio, 32), 1x1-conv names, ReLU. */
static vt_tensor *mlp(vt_graph *g, const char *prefix, vt_tensor *x, int ratio, const vt_nextvit_ctx *b) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    vt_ffn_ctx f = b->ffn;
    f.hidden = make_divisible((double)x->shape[2] * ratio, NV_HEAD_DIM);
    f.conv1x1 = f.relu = 1;
    return vt_ffn_build(g, b->ffn_type, vt_pname(nm, prefix, "mlp"), x, &f);
}

vt_tensor *vt_block_ncb(vt_graph *g, const char *prefix, vt_tensor *x, int *H, int *W, int out, int stride,
                        const vt_nextvit_ctx *b) {
    char nm[VT_NAMELEN];
    x = patch_embed(g, vt_pname(nm, prefix, "patch_embed"), x, H, W, out, stride, b->folded);
    x = vt_block_residual(g, x, block_mhca(g, vt_pname(nm, prefix, "mhca"), x, *H, *W, b->folded), b->drop);
    vt_tensor *h = bn(g, prefix, "norm", x, b->folded);
    return vt_block_residual(g, x, mlp(g, prefix, h, 3, b), b->drop);
}

vt_tensor *vt_block_ntb(vt_graph *g, const char *prefix, vt_tensor *x, int *H, int *W, int out, int stride,
                        const vt_nextvit_ctx *b) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    const int Cs = mhsa_width(out), Cc = out - Cs;
    if (Cc < NV_HEAD_DIM || Cc % NV_HEAD_DIM)
        return vt_fail(g, "ntb", "%s: width %d splits into %d + %d channels; the conv stream needs a positive multiple "
                       "of %d", prefix, out, Cs, Cc, NV_HEAD_DIM);
    x = patch_embed(g, vt_pname(nm, prefix, "patch_embed"), x, H, W, Cs, stride, b->folded);
    vt_attn_ctx a = b->attn;
    a.heads = Cs / NV_HEAD_DIM;
    a.grid_h = *H;
    a.grid_w = *W;
    a.lead = 0;
    a.layout = VT_LAYOUT_NEXTVIT;
    a.ln_eps = NV_EPS;
    a.norm_folded = b->folded;
    vt_tensor *h = bn(g, prefix, "norm1", x, b->folded);
    x = vt_block_residual(g, x, vt_attn_build(g, b->attn_type, vt_pname(nm, prefix, "e_mhsa"), h, &a), 0.75f * b->drop);
    vt_tensor *o = patch_embed(g, vt_pname(nm, prefix, "projection"), x, H, W, Cc, 1, b->folded);
    o = vt_block_residual(g, o, block_mhca(g, vt_pname(nm, prefix, "mhca"), o, *H, *W, b->folded),
                          0.25f * b->drop);
    vt_tensor *parts[2] = {x, o};
    x = vt_concat(g, parts, 2, 2); /* [MHSA stream, conv stream] */
    h = bn(g, prefix, "norm2", x, b->folded);
    return vt_block_residual(g, x, mlp(g, prefix, h, 2, b), b->drop);
}

/* ---- merge_bn ---- */

/* The tensor `prefix.suffix` of P, or NULL. */
static vt_tensor *find(const vt_params *P, const char *prefix, const char *suffix) {
    char nm[VT_NAMELEN];
    return prefix ? vt_params_find(P, vt_pname(nm, prefix, suffix)) : NULL;
}

/* Per-channel scale s = γ/√(σ² + eps) and shift β − γμ/√(σ² + eps) of BatchNorm prefix (C channels) in P. */
static int bn_affine(const vt_params *P, const char *prefix, int C, double *s, double *t, vt_err *e) {
    const vt_tensor *w = find(P, prefix, "weight"), *b = find(P, prefix, "bias"), *m = find(P, prefix, "running_mean"),
                    *v = find(P, prefix, "running_var");
    if (!w || !b || !m || !v || w->numel != C || b->numel != C || m->numel != C || v->numel != C)
        return vt_seterr(e, "merge_bn: BatchNorm %s with %d channels is missing or has another width", prefix, C);
    for (int j = 0; j < C; j++) {
        const double is = 1.0 / sqrt((double)v->data[j] + NV_EPS);
        s[j] = w->data[j] * is;
        t[j] = b->data[j] - w->data[j] * m->data[j] * is;
    }
    return 0;
}

int vt_merge_pre_bn(vt_params *P, const char *target, const char *bn1, const char *bn2, vt_err *e) {
    vt_params_changed(P);
    vt_tensor *W = find(P, target, "weight"), *bias = find(P, target, "bias");
    if (!W || !bias || W->numel == 0 || bias->ndim != 1 || W->shape[0] != bias->shape[0] ||
        (W->ndim != 2 && !(W->ndim == 4 && W->shape[2] == 1 && W->shape[3] == 1)))
        return vt_seterr(e, "merge_bn: %s needs a weight (out, in) or (out, in, 1, 1) and a bias (out)", target);
    const int O = W->shape[0], I = W->shape[1];
    double *a = malloc(sizeof(double) * 4 * (size_t)I), *c = a + I, *s2 = a + 2 * I, *t2 = a + 3 * I;
    if (!a) return vt_seterr_code(e, VT_E_NOMEM, "merge_bn: out of memory");
    int rc = bn_affine(P, bn1, I, a, c, e);
    if (!rc && bn2 && !(rc = bn_affine(P, bn2, I, s2, t2, e)))
        for (int j = 0; j < I; j++) { /* BN2(BN1(x)) = s2·(a·x + c) + t2 */
            a[j] *= s2[j];
            c[j] = c[j] * s2[j] + t2[j];
        }
    for (int o = 0; !rc && o < O; o++) { /* b' = b + W·c (W before scaling), W' = W·diag(a) */
        float *wr = W->data + (size_t)o * I;
        double acc = bias->data[o];
        for (int j = 0; j < I; j++) {
            acc += (double)wr[j] * c[j];
            wr[j] = (float)(wr[j] * a[j]);
        }
        bias->data[o] = (float)acc;
    }
    free(a);
    return rc;
}
