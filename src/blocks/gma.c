/* Group-Mix Attention (GroupMixFormer, official AILab-CVC code; see shared/specs/spec-groupmixformer.md §4–§5):
 * the GMA block (CPE → LN → EfficientAtt → LN → MLP) and the attention alone for the plain ViT host.
 *
 * Layout of the attention (B images, N = H·W tokens, width C, s = C/5, d = s/2, 8 heads):
 *   qkv (3C, B, N) (the linear's output transposed) → (3, B, C, N) = 3B channel-first images (index type·B + b)
 *   segments X_j = channels [j·s, (j+1)·s) of the 3B images
 *   Y_0 = hswish(BN(X_0)); Y_k = hswish(BN(pw1×1(dw k×k(X_k)))), k = 3, 5, 7 (weights and BN batch statistics
 *   shared by Q, K and V because they are one stacked batch)
 *   Z = [Y_0 | Y_1 | Y_2 | Y_3] (3B, 4s, N) = (3, B·8, d, N): head h = channels [h·d, (h+1)·d), channel-first
 *   K̂ = softmax over N; ctx = K̂·Vᵀ (d×d); F = scale·ctxᵀ·Q; CRPE Vc = DW{3,5,7}(V as (B, 8d, H, W)) per head
 *   group {0-1, 2-4, 5-7}; O = F + Q ⊙ Vc as tokens (B, N, 4s) next to U, the convs inside that op (vt_gma_merge)
 *   U = hswish(LN_1e-5(pw(dw3×3([Q_4 | K_4 | V_4])))) (B, N, s); proj([O | U]). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vitc/blocks.h"

#define GMA_HEADS VT_GMA_HEADS
/* PyTorch's defaults: the aggregators' nn.BatchNorm2d (eps, momentum) and agg0's nn.LayerNorm (eps). */
#define BN_EPS 1e-5f
#define BN_MOM 0.1f
#define LN_EPS 1e-5f

/* SeparableConv2d: prefix.conv1 (DW k×k on the input channels, no bias, padding k/2, stride) then
 * prefix.pointwise_conv (1×1 → out, no bias); NCHW. */
static vt_tensor *separable(vt_graph *g, const char *prefix, vt_tensor *x, int out, int k, int stride) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    const int cin = x->shape[1];
    vt_tensor *y = vt_conv2d_p(g, vt_pname(nm, prefix, "conv1"), x, cin, k, stride, k / 2, cin, 0);
    return vt_conv2d_p(g, vt_pname(nm, prefix, "pointwise_conv"), y, out, 1, 1, 0, 1, 0);
}

vt_tensor *vt_block_separable(vt_graph *g, const char *prefix, vt_tensor *x, int out, int k, int stride) {
    return separable(g, prefix, x, out, k, stride);
}

/* Segment seg of t, qkv (3C, B, N) viewed as (3, 5, s, B, N), copied out as channel-first images: seg 0-3 the 3B
 * images type·B + b of s channels (3B, s, H, W), seg 4 [Q_4 | K_4 | V_4] per image (B, 3s, H, W); one sliced
 * permute of whole planes. */
static vt_tensor *seg_copy(vt_graph *g, vt_tensor *t, int seg, int H, int W) {
    if (vt_bad(g, 1, t)) return NULL;
    const int s = t->shape[2], B = t->shape[3];
    const int pseg[5] = {0, 3, 1, 2, 4}, sseg[4] = {3 * B, s, H, W}, p4[5] = {3, 0, 1, 2, 4}, s4[4] = {B, 3 * s, H, W};
    return vt_reshape(g, vt_permute_slice(g, t, seg < 4 ? pseg : p4, 1, seg, 1), 4, seg < 4 ? sseg : s4);
}

/* separable() on segment seg (1-4) of qkv read in place (vt_gma_separable), with the same parameters; with
 * ref_kernels on seg_copy's copy, the chain the fused op is checked against. */
static vt_tensor *separable_seg(vt_graph *g, const char *prefix, vt_tensor *qkv, vt_tensor *t, int seg, int H, int W,
                                int k) {
    if (vt_bad(g, 2, qkv, t)) return NULL;
    const int s = t->shape[2], cin = seg < 4 ? s : 3 * s;
    if (g->ref_kernels) return separable(g, prefix, seg_copy(g, t, seg, H, W), s, k, 1);
    char nm[VT_NAMELEN];
    vt_tensor *dw = vt_conv_weight(g, vt_pname(nm, prefix, "conv1"), cin, cin, k, cin);
    vt_tensor *pw = vt_conv_weight(g, vt_pname(nm, prefix, "pointwise_conv"), s, cin, 1, 1);
    return vt_gma_separable(g, qkv, seg, H, W, dw, pw);
}

/* BatchNorm prefix's eval scale and shift as (1, 2, s). */
static vt_tensor *bn_pair(vt_graph *g, const char *prefix, int s) {
    const int sh[3] = {1, 2, s};
    return vt_reshape(g, vt_bn_scale_shift(g, prefix, s, BN_EPS), 3, sh);
}

/* The aggregators' parameters (declared in the chain's order) and vt_gma_aggregate_eval on qkv (3C, B, N). */
static vt_tensor *aggregate_fused(vt_graph *g, const char *agg, vt_tensor *qkv, int H, int W, int s) {
    char nm[VT_NAMELEN], sub[VT_NAMELEN], cv[VT_NAMELEN];
    const int s3[3] = {1, s, s};
    vt_tensor *bn[4], *dw[3], *pw[3];
    bn[0] = bn_pair(g, vt_pname(nm, agg, "norm0"), s);
    for (int j = 1; j <= 3; j++) {
        snprintf(sub, sizeof sub, "agg%d", j);
        vt_pname(cv, agg, sub);
        dw[j - 1] = vt_conv_weight(g, vt_pname(nm, cv, "conv1"), s, s, 2 * j + 1, s);
        pw[j - 1] = vt_reshape(g, vt_conv_weight(g, vt_pname(nm, cv, "pointwise_conv"), s, s, 1, 1), 3, s3);
        snprintf(sub, sizeof sub, "norm%d", j);
        bn[j] = bn_pair(g, vt_pname(nm, agg, sub), s);
    }
    return vt_gma_aggregate_eval(g, qkv, H, W, dw[0], dw[1], dw[2], vt_concat(g, pw, 3, 0), vt_concat(g, bn, 4, 0));
}

/* Training: the four branches' inputs in one op (segment 0's copy and segments 1-3's separable convs side by side,
 * vt_gma_separable_cat), then their BatchNorms and Hardswish as one op on it, each branch's own parameters
 * (vt_batchnorm_act_sets): the chain's concat (a copy of all four, forward and backward) and segment 0's copy op go.
 * Parameters declared in the chain's order. */
static vt_tensor *aggregate_train(vt_graph *g, const char *agg, vt_tensor *qkv, int H, int W, int s) {
    char nm[VT_NAMELEN], sub[VT_NAMELEN], cv[VT_NAMELEN];
    vt_tensor *t[5], *pt[20], *dw[3], *pw[3];
    for (int j = 0; j <= 3; j++) {
        if (j) {
            snprintf(sub, sizeof sub, "agg%d", j);
            vt_pname(cv, agg, sub);
            dw[j - 1] = vt_conv_weight(g, vt_pname(nm, cv, "conv1"), s, s, 2 * j + 1, s);
            pw[j - 1] = vt_conv_weight(g, vt_pname(nm, cv, "pointwise_conv"), s, s, 1, 1);
        }
        snprintf(sub, sizeof sub, "norm%d", j);
        if (vt_bn_tensors(g, vt_pname(nm, agg, sub), s, t)) return NULL;
        for (int k = 0; k < 5; k++) pt[k * 4 + j] = t[k];
    }
    return vt_batchnorm_act_sets(g, vt_gma_separable_cat(g, qkv, H, W, dw, pw), 4, pt, 1, BN_EPS, BN_MOM,
                                 VT_HARDSWISH);
}

vt_tensor *vt_block_gma_attn(vt_graph *g, const char *prefix, vt_tensor *x, int H, int W) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN], sx[64];
    if (x->ndim != 3 || H < 1 || W < 1 || (int64_t)H * W != x->shape[1])
        return vt_fail(g, "gma", "%s: input %s must be (B, N, C) with N = H·W = %d·%d", prefix,
                       vt_shape_str(x, sx, 64), H, W);
    const int B = x->shape[0], N = x->shape[1], C = x->shape[2];
    if (C % (5 * 2) != 0 || C < 10)
        return vt_fail(g, "gma", "%s: width C = %d must be a multiple of 10 (5 segments of s = C/5 channels, "
                       "8 heads of s/2 channels)", prefix, C);
    const int s = C / 5, d = s / 2;
    const float scale = 1.0f / sqrtf((float)(C / GMA_HEADS)); /* the official head_dim = dim // num_heads (the spec's
                                                                 * (C/8)^-1/2 differs where 8 does not divide C) */

    /* Q, K, V: the qkv linear's output transposed (3C, B, N) (the GEMM writes it so: no transposing pass) viewed as
     * (3, 5, s, B, N); segment j of the three as 3B channel-first images (3B, s, H, W) (index type·B + b) is one
     * sliced permute of whole planes. */
    vt_tensor *qkv = vt_linear_t_p(g, vt_pname(nm, prefix, "qkv"), x, 3 * C, 1, VT_INIT_W02);
    const int s5[5] = {3, 5, s, B, N};
    vt_tensor *t = vt_reshape(g, qkv, 5, s5);

    /* Pre-attention branches: Z = [Y_0 | Y_1 | Y_2 | Y_3] (3B, 4s, N); at inference one fused op. */
    char agg[VT_NAMELEN], sub[VT_NAMELEN];
    vt_pname(agg, prefix, "aggregator");
    vt_tensor *Zc;
    if (!g->training && !g->ref_kernels) {
        Zc = aggregate_fused(g, agg, qkv, H, W, s);
    } else if (!g->ref_kernels) {
        Zc = aggregate_train(g, agg, qkv, H, W, s);
    } else {
        vt_tensor *Y[4];
        Y[0] = vt_batchnorm_act_p(g, vt_pname(nm, agg, "norm0"), seg_copy(g, t, 0, H, W), 1, BN_EPS, BN_MOM,
                                  VT_HARDSWISH);
        for (int j = 1; j <= 3; j++) {
            snprintf(sub, sizeof sub, "agg%d", j);
            vt_tensor *a = separable_seg(g, vt_pname(nm, agg, sub), qkv, t, j, H, W, 2 * j + 1);
            snprintf(sub, sizeof sub, "norm%d", j);
            Y[j] = vt_batchnorm_act_p(g, vt_pname(nm, agg, sub), a, 1, BN_EPS, BN_MOM, VT_HARDSWISH);
        }
        Zc = vt_concat(g, Y, 4, 1);
    }
    const int sz[4] = {3, B * GMA_HEADS, d, N};
    vt_tensor *Z = vt_reshape(g, Zc, 4, sz); /* (3, B·8, d, N) */
    const int sh[3] = {B * GMA_HEADS, d, N};
    vt_tensor *Q = vt_reshape(g, vt_slice(g, Z, 0, 0, 1), 3, sh);
    vt_tensor *K = vt_reshape(g, vt_slice(g, Z, 0, 1, 1), 3, sh);
    vt_tensor *V = vt_reshape(g, vt_slice(g, Z, 0, 2, 1), 3, sh);

    /* Factorised attention: ctx[i][j] = Σ_n softmax_n(K)[i][n]·V[j][n]; F[j][n] = scale·Σ_i ctx[i][j]·Q[i][n]. */
    vt_tensor *Ks = vt_softmax(g, K, -1);
    vt_tensor *ctx = vt_matmul(g, Ks, V, 0, 1, 1.0f);
    if (g->export_maps) { /* the implied token weights of the factorised attention: F[:, n] = Σ_m w_nm·V[:, m] */
        const vt_attn_ctx geom = {.heads = GMA_HEADS, .grid_h = H, .grid_w = W};
        const vt_attn_src keys = {.kh = H, .kw = W};
        vt_attn_map m = vt_block_map_geom(prefix, NULL, &geom, &keys);
        const int64_t st[4] = {(int64_t)GMA_HEADS * d * N, (int64_t)d * N, 1, N};
        m.form = VT_MAP_DOT; /* w_nm = scale·Σ_i Q[i][n]·softmax_m(K)[i][m] (not normalised: linear attention) */
        m.q = Q;
        m.k = Ks;
        memcpy(m.qst, st, sizeof st);
        memcpy(m.kst, st, sizeof st);
        m.batch = B;
        m.heads = GMA_HEADS;
        m.n = m.m = N;
        m.d = d;
        m.scale = scale;
        vt_graph_export_map(g, &m);
    }
    vt_tensor *F = vt_matmul(g, ctx, Q, 1, 0, scale);

    /* CRPE on V laid out as (B, 8d, H, W), head groups {0-1: 3×3, 2-4: 5×5, 5-7: 7×7}: depthwise convs with bias,
     * padding k/2, run inside vt_gma_merge below (ref_kernels: each group's channels sliced out and convolved). */
    const int svi[4] = {B, GMA_HEADS * d, H, W};
    vt_tensor *Vi = vt_reshape(g, V, 4, svi), *Vc[3], *cw[3], *cb[3];
    const int grp_start[3] = {0, 2, 5}, grp_len[3] = {2, 3, 3};
    for (int k = 0; k < 3; k++) {
        const int c = grp_len[k] * d, ks = 2 * k + 3;
        snprintf(sub, sizeof sub, "crpe.conv_list.%d", k);
        vt_pname(nm, prefix, sub);
        if (g->ref_kernels) {
            Vc[k] = vt_conv2d_p(g, nm, vt_slice(g, Vi, 1, grp_start[k] * d, c), c, ks, 1, ks / 2, c, 1);
        } else {
            cw[k] = vt_conv_weight(g, nm, c, c, ks, c);
            cb[k] = vt_conv_bias(g, nm, c, c, ks, c);
        }
    }

    /* Non-attention branch on [Q_4 | K_4 | V_4] per image (B, 3s, H, W): separable conv, LayerNorm over each token's
     * channels, Hardswish; channel-first (B, s, N) (the official chain transposes to tokens and back around the
     * LayerNorm: ref_kernels). */
    vt_pname(sub, agg, "agg0");
    vt_tensor *u = separable_seg(g, vt_pname(nm, sub, "conv"), qkv, t, 4, H, W, 3); /* (B, s, H, W) */
    const int su[3] = {B, s, N}, ptok[3] = {0, 2, 1};
    u = vt_reshape(g, u, 3, su);
    if (g->ref_kernels) {
        u = vt_permute(g, u, ptok);
        u = vt_unary(g, vt_layernorm_p(g, vt_pname(nm, sub, "norm"), u, LN_EPS), VT_HARDSWISH, 0.0f);
        u = vt_permute(g, u, ptok);
    } else {
        u = vt_layernorm_cf_p(g, vt_pname(nm, sub, "norm"), u, LN_EPS, VT_HARDSWISH);
    }

    /* proj([O | u]) with O = F + Q ⊙ CRPE(V) as tokens (B, N, 4s), channel h·d + c: one op (ref_kernels: the chain
     * of mul, add, permutes and concats it replaces). */
    const int so[3] = {B, 4 * s, N};
    vt_tensor *O;
    if (g->ref_kernels) {
        vt_tensor *o[2] = {vt_add(g, vt_reshape(g, F, 3, so),
                                  vt_mul(g, vt_reshape(g, Q, 3, so), vt_reshape(g, vt_concat(g, Vc, 3, 1), 3, so))),
                           u};
        o[0] = vt_permute(g, o[0], ptok);
        o[1] = vt_permute(g, o[1], ptok);
        O = vt_concat(g, o, 2, 2);
    } else {
        O = vt_gma_merge(g, vt_reshape(g, F, 3, so), vt_reshape(g, Q, 3, so), vt_reshape(g, V, 3, so), H, W, cw, cb, 3,
                         u);
    }
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), O, C, 1, VT_INIT_W02);
}

vt_tensor *vt_block_gma(vt_graph *g, const char *prefix, vt_tensor *x, int H, int W, int mlp_hidden, float drop) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN], sx[64];
    if (x->ndim != 3 || H < 1 || W < 1 || (int64_t)H * W != x->shape[1])
        return vt_fail(g, "gma_block", "%s: input %s must be (B, N, C) with N = H·W = %d·%d", prefix,
                       vt_shape_str(x, sx, 64), H, W);
    const int B = x->shape[0], N = x->shape[1], C = x->shape[2];
    /* CPE: x + DW3×3(x) with bias, computed channels-last on the token grid, x added in the conv's output pass. */
    const int ws[4] = {C, 1, 3, 3}, smap[4] = {B, H, W, C}, stok[3] = {B, N, C};
    const vt_init u3 = {VT_INIT_UNIFORM, 1.0f / 3.0f}; /* PyTorch default: 1/sqrt(fan_in = 9) */
    vt_tensor *cw = vt_param(g, vt_pname(nm, prefix, "cpe.proj.weight"), 4, ws, u3);
    vt_tensor *cb = vt_param(g, vt_pname(nm, prefix, "cpe.proj.bias"), 1, &C, u3);
    if (!cw || !cb) return NULL;
    cw->paper_count = 1;
    vt_tensor *xm = vt_reshape(g, x, 4, smap);
    x = vt_reshape(g, vt_dwconv_nhwc_ex(g, xm, 0, cw, cb, 1, xm), 3, stok);
    vt_tensor *h = vt_layernorm_p(g, vt_pname(nm, prefix, "norm1"), x, 1e-6f);
    x = vt_block_residual(g, x, vt_block_gma_attn(g, vt_pname(nm, prefix, "att"), h, H, W), drop);
    h = vt_layernorm_p(g, vt_pname(nm, prefix, "norm2"), x, 1e-6f);
    return vt_block_residual(g, x, vt_block_mlp(g, vt_pname(nm, prefix, "mlp"), h, mlp_hidden), drop);
}
