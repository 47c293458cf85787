/* Refiner (Zhou et al. 2021, "Refiner: Refining Self-attention for Vision Transformers"), as the official
 * Refiner_ViT code does it (spec-refiner.md §4-§5): the DLA module on attention maps (B, H, N, N) treated as NCHW
 * images with H channels over the raw (query, key) plane, class token included, and the three Refined_Attention
 * variants (plain with the residual attention chain, shared = V only on the refined incoming map, transform). */
#include <math.h>
#include <stdio.h>

#include "vitc/blocks.h"

#define BN_EPS 1e-5f
#define BN_MOM 0.1f

vt_tensor *vt_block_dla(vt_graph *g, const char *prefix, vt_tensor *a, float expand, const char *adapt, float scale) {
    if (vt_bad(g, 1, a)) return NULL;
    if (a->ndim != 4 || expand <= 0.0f)
        return vt_fail(g, "dla", "%s: maps must be (B, H, N, N) and the expansion ratio positive", prefix);
    char nm[VT_NAMELEN];
    const int H = a->shape[1], He = (int)nearbyint((double)expand * H); /* Python round(): half to even */
    if (He < 1) return vt_fail(g, "dla", "%s: expansion %g of %d heads gives no channels", prefix, expand, H);
    if (!adapt && scale != 1.0f) return vt_fail(g, "dla", "%s: a scale without the adapt BatchNorm", prefix);
    if (!g->training && !g->ref_kernels) { /* one op; the BatchNorms as scale/shift pairs, adapt·scale as its affine */
        vt_tensor *we = vt_conv_weight(g, vt_pname(nm, prefix, "conv_exp"), He, H, 1, 1);
        vt_tensor *bn1 = vt_bn_scale_shift(g, vt_pname(nm, prefix, "bn1"), He, BN_EPS);
        vt_tensor *wd = vt_conv_weight(g, vt_pname(nm, prefix, "depth_sep_conv"), He, He, 3, He);
        vt_tensor *bn2 = vt_bn_scale_shift(g, vt_pname(nm, prefix, "bn2"), He, BN_EPS);
        vt_tensor *wp = vt_conv_weight(g, vt_pname(nm, prefix, "conv_pro"), H, He, 1, 1);
        vt_tensor *bn3 = vt_bn_scale_shift(g, vt_pname(nm, prefix, "bn3"), H, BN_EPS);
        vt_tensor *aff = adapt ? vt_bn_scale_shift(g, adapt, H, BN_EPS) : NULL;
        if (aff && scale != 1.0f) aff = vt_scale(g, aff, scale);
        return vt_dla_eval(g, a, we, wd, wp, bn1, bn2, bn3, aff);
    }
    vt_tensor *t = vt_conv2d_p(g, vt_pname(nm, prefix, "conv_exp"), a, He, 1, 1, 0, 1, 0);
    if (g->ref_kernels || g->allsum) { /* the chain vt_bnact_dwconv and vt_bnact_pwconv are checked against (and
                                          * synchronised BatchNorm's, which the fused ops lack) */
        t = vt_batchnorm_act_p(g, vt_pname(nm, prefix, "bn1"), t, 1, BN_EPS, BN_MOM, VT_RELU6);
        t = vt_conv2d_p(g, vt_pname(nm, prefix, "depth_sep_conv"), t, He, 3, 1, 1, He, 0);
        t = vt_batchnorm_act_p(g, vt_pname(nm, prefix, "bn2"), t, 1, BN_EPS, BN_MOM, VT_RELU6);
        t = vt_conv2d_p(g, vt_pname(nm, prefix, "conv_pro"), t, H, 1, 1, 0, 1, 0);
    } else { /* each BatchNorm with its ReLU6 and the conv after it in one op: the normalised maps are never stored */
        vt_tensor *bn[5];
        if (vt_bn_tensors(g, vt_pname(nm, prefix, "bn1"), He, bn)) return NULL;
        vt_tensor *wd = vt_conv_weight(g, vt_pname(nm, prefix, "depth_sep_conv"), He, He, 3, He);
        t = vt_bnact_dwconv(g, t, bn[0], bn[1], bn[2], bn[3], bn[4], BN_EPS, BN_MOM, VT_RELU6, wd);
        if (vt_bn_tensors(g, vt_pname(nm, prefix, "bn2"), He, bn)) return NULL;
        vt_tensor *wp = vt_conv_weight(g, vt_pname(nm, prefix, "conv_pro"), H, He, 1, 1);
        t = vt_bnact_pwconv(g, t, bn[0], bn[1], bn[2], bn[3], bn[4], BN_EPS, BN_MOM, VT_RELU6, wp);
    }
    /* bn3 + a, then scale·adapt_bn: the add and the scale inside the BatchNorms' passes. Refined-ViT-S training at
     * batch 16 (Ice Lake, 2026-11-29): the separate add and scale passes were 3.3% and 2.4% of the step; a graph of
     * each form on one store, steps alternated in one process, 1.06-1.10x best, 1.03-1.04x per-round median.
     * Training with adapt_bn: both in one op, the middle map never stored (vt_bn_res_bn; 4 passes over the maps
     * instead of 9). */
    if (adapt && g->training && !g->ref_kernels && !g->allsum) {
        vt_tensor *b3[5], *ba[5];
        if (vt_bn_tensors(g, vt_pname(nm, prefix, "bn3"), H, b3) || vt_bn_tensors(g, adapt, H, ba)) return NULL;
        return vt_bn_res_bn(g, t, b3, a, ba, BN_EPS, BN_MOM, scale);
    }
    t = vt_batchnorm_res_p(g, vt_pname(nm, prefix, "bn3"), t, 1, BN_EPS, BN_MOM, 1.0f, a);
    if (adapt) return vt_batchnorm_res_p(g, adapt, t, 1, BN_EPS, BN_MOM, scale, NULL);
    return scale != 1.0f ? vt_scale(g, t, scale) : t;
}

/* scale·adapt_bn(DLA(a)) with the block's parameter names. */
static vt_tensor *refine(vt_graph *g, const char *prefix, vt_tensor *a, float expand, float scale) {
    char nm[VT_NAMELEN], ad[VT_NAMELEN];
    return vt_block_dla(g, vt_pname(nm, prefix, "DLA"), a, expand, vt_pname(ad, prefix, "adapt_bn"), scale);
}

vt_tensor *vt_block_refiner_attn(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *actx,
                                 vt_refiner_mode mode, float expand, vt_tensor **amap) {
    if (vt_bad(g, 1, x)) return NULL;
    const int heads = actx->heads, qkv_bias = actx->qkv_bias;
    /* the maps' token layout for export: queries and keys are the same tokens */
    const vt_attn_src keys = {.kh = actx->grid_h, .kw = actx->grid_w, .klead = actx->lead};
    const int C = x->shape[x->ndim - 1];
    if (x->ndim != 3 || heads <= 0 || C % heads)
        return vt_fail(g, "refiner", "%s: input must be (B, N, C) with C divisible by %d heads", prefix, heads);
    const int B = x->shape[0], N = x->shape[1], dh = C / heads;
    const float scale = 1.0f / sqrtf((float)dh);
    vt_tensor *ain = amap ? *amap : NULL;
    if (ain && (ain->ndim != 4 || ain->shape[0] != B || ain->shape[1] != heads || ain->shape[2] != N ||
                ain->shape[3] != N))
        return vt_fail(g, "refiner", "%s: incoming attention map must be (%d, %d, %d, %d)", prefix, B, heads, N, N);
    char nm[VT_NAMELEN];
    vt_tensor *attn, *v;
    if (mode == VT_REFINER_SHARED) {
        if (!ain) return vt_fail(g, "refiner", "%s: a shared-attention block needs the previous block's map", prefix);
        /* Â = scale·adapt_bn(DLA(A_in)) (no softmax); qkv is a (C, C) Linear giving V only; A_in passes through */
        attn = refine(g, prefix, ain, expand, scale);
        vt_block_export_map(g, prefix, "before", ain, actx, &keys, 0, 0); /* the incoming map, before refinement */
        vt_block_export_map(g, prefix, "refined", attn, actx, &keys, 0, 0);
        v = vt_split_heads(g, vt_linear_p(g, vt_pname(nm, prefix, "qkv"), x, C, qkv_bias, VT_INIT_W02), 0, heads, dh);
    } else {
        vt_tensor *qkv = vt_linear_p(g, vt_pname(nm, prefix, "qkv"), x, 3 * C, qkv_bias, VT_INIT_W02);
        vt_tensor *q = vt_split_heads(g, qkv, 0, heads, dh), *k = vt_split_heads(g, qkv, C, heads, dh);
        v = vt_split_heads(g, qkv, 2 * C, heads, dh);
        /* (√s·q)(√s·k)ᵀ = s·q·kᵀ; softmax over keys; + scale·A_in (residual attention chain), in the softmax's pass
         * unless the probabilities alone are exported. Refined-ViT-S inference at batch 16 (Ice Lake, 2026-11-29):
         * the separate scale and add were 5.7% of the time. */
        attn = vt_matmul(g, q, k, 0, 1, scale);
        if (ain && !g->export_maps) {
            attn = vt_softmax_res(g, attn, ain, scale);
        } else {
            attn = vt_softmax(g, attn, -1);
            vt_block_export_map(g, prefix, NULL, attn, actx, &keys, 0, 1);
            if (ain) attn = vt_add(g, attn, vt_scale(g, ain, scale));
        }
        if (mode == VT_REFINER_TRANSFORM) {
            attn = refine(g, prefix, attn, expand, 1.0f);
            vt_block_export_map(g, prefix, "refined", attn, actx, &keys, 0, 0);
        }
        if (amap) *amap = attn;
    }
    vt_tensor *o = vt_merge_heads(g, vt_matmul(g, attn, v, 0, 0, 1.0f));
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), o, C, 1, VT_INIT_W02);
}
