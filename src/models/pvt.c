/* PVT v1 (Wang et al. 2021, whai362/PVT classification/pvt.py) and PVTv2 (Wang et al. 2022, pvt_v2.py), with the
 * official state_dict names, and the papers' variants on these hosts: FLatten-PVT / FLatten-PVTv2 (LeapLabTHU
 * flatten_pvt.py / flatten_pvt_v2.py; shared/specs/spec-flatten.md §3-4) and PVTv2-b1 with hMHSA + cFFN
 * (shared/specs/spec-hmhsa-cffn.md §3-4). arch.version picks the host:
 *   v1: patch_embed{i} = Conv(k = s = 4, then 2) + LN (eps 1e-5), + pos_embed{i} (1, N_i, C_i) built for the
 *       configured image size and bilinearly resized for another input size (the official _get_pos_embed, quirk
 *       included; the CLI always feeds the configured size, library callers may not); with a class token
 *       (PVT v1) cls_token is prepended in stage 4 (pos_embed4 has N_4 + 1 rows), then `norm` and the head read the
 *       class token; without one (FLatten-PVT) the head reads the token mean and `norm` exists but is never applied
 *       (the official forward comments it out);
 *   v2: patch_embed{i} = overlapping Conv(k 7 s 4 p 3, then k 3 s 2 p 1) + LN (eps 1e-5), MLP fc1 -> DWConv 3x3 ->
 *       GELU -> fc2, norm{i} (eps 1e-6) after every stage, token mean -> head; convolutions initialised
 *       normal(0, √(2/fan_out)) with zero bias.
 * Blocks: x + attn(norm1(x)), x + mlp(norm2(x)) (LN eps 1e-6), block{i}.{j}; the attention of stage i is the type
 * stages[i].attn in the PVT layout (attn.q, attn.kv, with attn.sr + attn.norm (eps 1e-5) where sr_ratio > 1).
 * Layout: tokens stay channels-last from the first patch embed on. A patch embed is vt_conv_tokens over the NCHW
 * input image or the previous stage's (B, H, W, C) tokens, whose output is the next stage's tokens: no NCHW <-> NHWC
 * copies outside the --features maps. */
#include <stdio.h>
#include <string.h>

#include "family.h"

#define PATCH_LN_EPS 1e-5f /* patch_embed{i}.norm and the SR norm attn.norm: plain nn.LayerNorm */

/* Kernel, stride and padding of stage i's patch embed (arch.patch: the first embed's kernel, 4 or 7). */
static void embed_geom(const vt_arch_cfg *a, int i, int *k, int *s, int *p) {
    if (a->version == 2) {
        *k = i ? 3 : a->patch;
        *s = i ? 2 : 4;
        *p = *k / 2;
    } else {
        *k = *s = i ? 2 : a->patch;
        *p = 0;
    }
}

/* Token grids of the four stages for an H x W input (the convs' floor arithmetic); -1 if a conv does not fit. */
static int stage_grids(const vt_arch_cfg *a, int H, int W, int gh[VT_MAX_STAGES], int gw[VT_MAX_STAGES]) {
    for (int i = 0; i < a->nstages; i++) {
        int k, s, p;
        embed_geom(a, i, &k, &s, &p);
        if (H + 2 * p < k || W + 2 * p < k) return -1;
        gh[i] = H = (H + 2 * p - k) / s + 1;
        gw[i] = W = (W + 2 * p - k) / s + 1;
    }
    return 0;
}

/* 1 if any stage runs FLatten attention. */
static int has_flatten(const vt_arch_cfg *a) {
    for (int i = 0; i < a->nstages; i++)
        if (strcmp(a->stages[i].attn, "flatten") == 0) return 1;
    return 0;
}

/* The reason an H x W input does not fit c (into msg), or 0 if it does. */
static int size_problem(const vt_model_cfg *c, int H, int W, char *msg, size_t n) {
    const vt_arch_cfg *a = &c->arch;
    int gh[VT_MAX_STAGES], gw[VT_MAX_STAGES];
    if (stage_grids(a, H, W, gh, gw)) {
        snprintf(msg, n, "input %dx%d is too small for the patch embeds", H, W);
        return 1;
    }
    for (int i = 0; i < a->nstages; i++) {
        const int sr = a->stages[i].sr_ratio;
        if (gh[i] < 1 || gw[i] < 1 || (sr > 1 && (gh[i] < sr || gw[i] < sr))) {
            snprintf(msg, n, "input %dx%d gives stage %d a %dx%d token grid, smaller than its spatial-reduction ratio "
                     "%d (the SR conv, kernel = stride = %d, needs at least %d tokens a side)", H, W, i + 1, gh[i],
                     gw[i], sr, sr, sr);
            return 1;
        }
    }
    if (a->version == 2 && has_flatten(a) && (H % 32 || W % 32)) {
        snprintf(msg, n, "input %dx%d: FLatten-PVTv2 takes multiples of 32 only (the official positional_encoding "
                 "rows are (S/4)², (S/8)², ... while the padded convs give ceil sizes)", H, W);
        return 1;
    }
    return 0;
}

/* v1's position embedding of stage i for an H x W token grid (+ lead class rows), as the official _get_pos_embed:
 * the table itself when H·W equals stage 1's built patch count (the official test, for every stage: another stage
 * with that many tokens gets its own, smaller table and the official forward fails), else the table bilinearly
 * resized from the built grid (bh[i], bw[i]) (align_corners False; the class row kept). */
static vt_tensor *stage_pos(vt_graph *g, const vt_model_cfg *c, int i, vt_tensor *pos, const int *bh, const int *bw,
                            int H, int W, int lead) {
    if (vt_bad(g, 1, pos)) return NULL;
    const int C = pos->shape[2], rows = bh[i] * bw[i];
    if (H * W == bh[0] * bw[0] || (H == bh[i] && W == bw[i])) {
        if (H * W == rows) return pos;
        return vt_fail(g, c->name, "stage %d: a %dx%d token grid has stage 1's built patch count %d, so the official "
                       "code keeps pos_embed%d unresized (%d rows) and fails; use another input size", i + 1, H, W,
                       bh[0] * bw[0], i + 1, rows);
    }
    const int m[4] = {1, bh[i], bw[i], C}, t3[3] = {1, H * W, C};
    vt_tensor *p = lead ? vt_slice(g, pos, 1, lead, rows) : pos;
    vt_tensor *r = vt_reshape(g, vt_resize_bilinear(g, vt_reshape(g, p, 4, m), H, W), 3, t3);
    if (!lead) return r;
    vt_tensor *parts[2] = {vt_slice(g, pos, 1, 0, lead), r};
    return vt_concat(g, parts, 2, 1);
}

/* Stage i's patch embed on x (the NCHW image for i = 0, else the previous stage's tokens as (B, H, W, C)) -> tokens
 * (B, H_i·W_i, C_i) after patch_embed{i}.norm; *H, *W get the grid. */
static vt_tensor *patch_embed(vt_graph *g, const vt_model_cfg *c, int i, vt_tensor *x, int *H, int *W) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    char pre[VT_NAMELEN], nm[VT_NAMELEN];
    snprintf(pre, sizeof pre, "patch_embed%d", i + 1);
    vt_scope(g, pre);
    int k, s, p;
    embed_geom(a, i, &k, &s, &p);
    const int nhwc = i > 0, B = x->shape[0], Cin = x->shape[nhwc ? 3 : 1], C = a->stages[i].dim, v2 = a->version == 2;
    const int ws[4] = {C, Cin, k, k};
    const vt_init wi = vt_conv_init(Cin * k * k, C * k * k, v2 ? VT_CONV_INIT_FANOUT : VT_CONV_INIT_DEFAULT);
    vt_tensor *w = vt_param(g, vt_pname(nm, pre, "proj.weight"), 4, ws, wi);
    vt_tensor *b = vt_param(g, vt_pname(nm, pre, "proj.bias"), 1, &C, v2 ? VT_INIT_Z : wi);
    if (w) w->paper_count = 1;
    vt_tensor *y = vt_conv_tokens(g, x, nhwc, w, b, s, p); /* (B, Ho, Wo, C) */
    if (!y) return NULL;
    *H = y->shape[1];
    *W = y->shape[2];
    const int ts[3] = {B, *H * *W, C};
    vt_tensor *t = vt_reshape(g, y, 3, ts);
    return vt_layernorm_p(g, vt_pname(nm, pre, "norm"), t, PATCH_LN_EPS);
}

/* Patch embeds and stages; returns the last stage's tokens (B, [1 +] N_4, C_4) (v2: after norm4; v1 with a class
 * token: the class token first). With maps != NULL also the four stage maps (B, C_i, H_i, W_i): the stage outputs
 * (v2: after norm{i}), v1's stage 4 without the class token. */
static vt_tensor *backbone(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor **maps) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    const vt_stage_cfg *st = a->stages;
    char msg[400], pre[VT_NAMELEN], nm[VT_NAMELEN];
    if (x->ndim != 4 || x->shape[1] != a->in_chans)
        return vt_fail(g, c->name, "input must be (B, %d, H, W)", a->in_chans);
    const int B = x->shape[0], v2 = a->version == 2, nblk = vt_model_depth(c);
    if (size_problem(c, x->shape[2], x->shape[3], msg, sizeof msg)) return vt_fail(g, c->name, "%s", msg);
    if (has_flatten(a) && (x->shape[2] != a->img_size || x->shape[3] != a->img_size))
        return vt_fail(g, c->name, "input %dx%d, but the FLatten positional encodings are built for %dx%d inputs (set "
                       "the image size)", x->shape[2], x->shape[3], a->img_size, a->img_size);
    int bh[VT_MAX_STAGES], bw[VT_MAX_STAGES];
    if (stage_grids(a, a->img_size, a->img_size, bh, bw)) /* the grids pos_embed{i} are built for */
        return vt_fail(g, c->name, "image size %d is too small for the patch embeds", a->img_size);

    /* v1: the position embeddings (and the class token) are the network's own parameters, first in its state_dict */
    vt_tensor *pos[VT_MAX_STAGES] = {NULL}, *cls = NULL;
    if (!v2) {
        vt_scope(g, "pos_embed");
        for (int i = 0; i < 4; i++) {
            const int ps[3] = {1, bh[i] * bw[i] + (a->class_token && i == 3), st[i].dim};
            snprintf(nm, sizeof nm, "pos_embed%d", i + 1);
            pos[i] = vt_param(g, nm, 3, ps, VT_INIT_W02);
        }
        const int cs[3] = {1, 1, st[3].dim};
        if (a->class_token) cls = vt_param(g, "cls_token", 3, cs, VT_INIT_W02);
    }

    vt_tensor *t = x;
    for (int i = 0, blk = 0; i < 4; i++) {
        int H, W;
        t = patch_embed(g, c, i, t, &H, &W);
        if (!t) return NULL;
        /* a stage-i token is 4·2^i pixels a side: v1's unpadded embeds cover the top-left H·px × W·px of the image
         * (v2's padded ones all of it) */
        g->map_px = 4 << i;
        const int C = st[i].dim, lead = !v2 && a->class_token && i == 3;
        if (lead) t = vt_prepend_tokens(g, t, cls);
        if (!v2) t = vt_add(g, t, stage_pos(g, c, i, pos[i], bh, bw, H, W, lead));
        vt_attn_ctx actx = vt_stage_attn_ctx(c, i, H, W, lead);
        actx.layout = VT_LAYOUT_PVT;
        actx.sr_ratio = st[i].sr_ratio;
        actx.ln_eps = PATCH_LN_EPS;
        actx.conv_fanout = v2 ? VT_CONV_INIT_FANOUT : VT_CONV_INIT_DEFAULT;
        vt_ffn_ctx fctx = vt_stage_ffn_ctx(c, i);
        fctx.grid_h = H;
        fctx.grid_w = W;
        fctx.dwconv = v2;
        fctx.conv_fanout = v2 ? VT_CONV_INIT_FANOUT : VT_CONV_INIT_DEFAULT;
        for (int j = 0; j < st[i].depth; j++, blk++) {
            snprintf(pre, sizeof pre, "block%d.%d", i + 1, j);
            vt_scope(g, pre);
            const float dp = vt_model_drop_path(c, blk, nblk);
            vt_tensor *h = vt_layernorm_p(g, vt_pname(nm, pre, "norm1"), t, a->ln_eps);
            t = vt_block_residual(g, t, vt_attn_build(g, st[i].attn, vt_pname(nm, pre, "attn"), h, &actx), dp);
            h = vt_layernorm_p(g, vt_pname(nm, pre, "norm2"), t, a->ln_eps);
            t = vt_block_residual(g, t, vt_ffn_build(g, a->ffn, vt_pname(nm, pre, "mlp"), h, &fctx), dp);
        }
        if (v2) {
            snprintf(nm, sizeof nm, "norm%d", i + 1);
            vt_scope(g, nm);
            t = vt_layernorm_p(g, nm, t, a->ln_eps);
        }
        const int map[4] = {B, H, W, C}, to_nchw[4] = {0, 3, 1, 2};
        if (maps) maps[i] = vt_permute(g, vt_reshape(g, lead ? vt_slice(g, t, 1, 1, H * W) : t, 4, map), to_nchw);
        if (i < 3) t = vt_reshape(g, t, 4, map); /* the next patch embed reads the tokens as a channels-last map */
    }
    return t;
}

static int features(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[VT_MAX_STAGES]) {
    return vt_four_stage_maps(g, backbone(g, c, x, maps), maps);
}

static vt_tensor *build(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    const vt_arch_cfg *a = &c->arch;
    vt_tensor *t = backbone(g, c, x, NULL);
    if (!t) return NULL;
    vt_scope(g, "head");
    const int B = t->shape[0], C = t->shape[2], s2[2] = {B, C};
    if (a->version == 2) {
        t = vt_mean(g, t, 1);
    } else if (a->class_token) { /* norm is per token: applied to the class token only, as norm(x)[:, 0] */
        t = vt_layernorm_p(g, "norm", vt_reshape(g, vt_slice(g, t, 1, 0, 1), 2, s2), a->ln_eps);
    } else { /* FLatten-PVT: `norm` is in the state_dict but the official forward never applies it */
        vt_param(g, "norm.weight", 1, &C, VT_INIT_1);
        vt_param(g, "norm.bias", 1, &C, VT_INIT_Z);
        t = vt_mean(g, t, 1);
    }
    return vt_linear_p(g, "head", t, a->num_classes, 1, VT_INIT_W02);
}

static int check(const vt_model_cfg *c, vt_err *e) {
    const vt_arch_cfg *a = &c->arch;
    char msg[400];
    if (a->nstages != 4 || (a->version != 1 && a->version != 2))
        return vt_seterr(e, "%s: a PVT config needs 4 stages and version 1 or 2", c->name);
    for (int i = 0; i < 4; i++)
        if (a->stages[i].dim < 1 || a->stages[i].depth < 0 || a->stages[i].heads < 1 || a->stages[i].sr_ratio < 0 ||
            !(a->stages[i].mlp_ratio > 0.0f))
            return vt_seterr(e, "%s: stage %d: width %d, depth %d, heads %d, sr ratio %d, MLP ratio %g out of range",
                             c->name, i + 1, a->stages[i].dim, a->stages[i].depth, a->stages[i].heads,
                             a->stages[i].sr_ratio, (double)a->stages[i].mlp_ratio);
    for (int i = 0; i < 4; i++) /* the types with a PVT layout (q, kv and the spatial reduction) */
        if (strcmp(a->stages[i].attn, "mhsa") && strcmp(a->stages[i].attn, "flatten") &&
            strcmp(a->stages[i].attn, "hmhsa"))
            return vt_seterr(e, "%s: stage %d attention '%s' is not defined in PVT (mhsa: its "
                                  "spatial-reduction attention, flatten, hmhsa)", c->name, i + 1, a->stages[i].attn);
    const int S = a->img_size;
    char size[24];
    if (size_problem(c, S, vt_arch_width(a), msg, sizeof msg)) {
        int min = 0;
        char m2[400];
        for (int s = 1; s <= 4096 && !min; s++)
            if (!size_problem(c, s, s, m2, sizeof m2)) min = s;
        vt_arch_size_text(a, size, sizeof size);
        if (min) return vt_seterr(e, "%s: image size %s: %s; the smallest size it accepts is %d", c->name, size, msg,
                                  min);
        return vt_seterr(e, "%s: image size %s: %s", c->name, size, msg);
    }
    /* an input of another size than the weights' (vt_model_at_size; v1 without FLatten: resizes) */
    if (a->in_h && size_problem(c, a->in_h, a->in_w, msg, sizeof msg)) return vt_seterr(e, "%s: %s", c->name, msg);
    return 0;
}

/* The official no_weight_decay(): PVT v1's and FLatten-PVT's {'cls_token'} (their pos_embed1-4 are decayed: the
 * five-name list is PVTv2's, which has no pos_embed), plus timm's 1-D rule. */
static int no_decay(const vt_tensor *t) {
    static const char *const skip[] = {"cls_token", NULL};
    return vt_no_decay_default(t, skip);
}

/* PVT-Tiny (official pvt_tiny): the base every model of this family overrides; widths 64/128/320/512, heads
 * 1/2/5/8, MLP ratios 8/8/4/4, SR ratios 8/4/2/1, qkv bias, drop-path 0.1; the official datasets.py's eval transform
 * (DeiT's: shorter side to int(256/224 · S), bicubic, crop 0.875). */
#define PVT_BASE                                                                                                  \
    .family = &vt_family_pvt,                                                                                     \
    .arch = {.img_size = 224, .in_chans = 3, .num_classes = 1000, .patch = 4, .nstages = 4, .ffn = "mlp",         \
             .qkv_bias = 1, .ln_eps = 1e-6f, .class_token = 1, .drop_path = 0.1f, .version = 1,                   \
             .stages = {{.dim = 64, .depth = 2, .heads = 1, .mlp_ratio = 8.0f, .sr_ratio = 8, .attn = "mhsa"},    \
                        {.dim = 128, .depth = 2, .heads = 2, .mlp_ratio = 8.0f, .sr_ratio = 4, .attn = "mhsa"},   \
                        {.dim = 320, .depth = 2, .heads = 5, .mlp_ratio = 4.0f, .sr_ratio = 2, .attn = "mhsa"},   \
                        {.dim = 512, .depth = 2, .heads = 8, .mlp_ratio = 4.0f, .sr_ratio = 1, .attn = "mhsa"}},  \
             .opts = {.focusing = 3.0f, .kernel = 5, .cffn_t = 2.0f / 3.0f, .cffn_r = 2}},                        \
    .pre = {.mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD, .crop_pct = 0.875f, .interpolation = "bicubic",       \
            .dataset = "imagenet-1k"}

/* Depths [3, 4, 6, 3] (the "small" / "b2" sizes). */
#define PVT_DEPTHS_3463                                                                                           \
    .arch.stages[0].depth = 3, .arch.stages[1].depth = 4, .arch.stages[2].depth = 6, .arch.stages[3].depth = 3
/* PVTv2 host: overlapping patch embeds (k 7 s 4, then k 3 s 2), DWConv in the MLP, norm{i}, mean pool; the eval
 * transform of the official repo's datasets.py, which PVTv2 was trained and evaluated with (DeiT's: crop 0.875; timm's
 * pvt_v2 cfg says 0.9). */
#define PVT_V2 .arch.version = 2, .arch.patch = 7, .arch.class_token = 0
/* FLatten (spec-flatten §3-4): every stage global focused linear attention (sr 1), no class token (mean pool). */
#define PVT_FLATTEN                                                                                               \
    .arch.class_token = 0, .arch.stages[0].sr_ratio = 1, .arch.stages[1].sr_ratio = 1,                            \
    .arch.stages[2].sr_ratio = 1, .arch.stages[0].attn = "flatten", .arch.stages[1].attn = "flatten",             \
    .arch.stages[2].attn = "flatten", .arch.stages[3].attn = "flatten", .pre.crop_pct = 0.875f, .pre.squash = 1

static const vt_model_cfg models[] = {
    {PVT_BASE, .name = "pvt_tiny", .description = "PVT-Tiny (Wang et al. 2021), official names"},
    {PVT_BASE, PVT_DEPTHS_3463, .name = "pvt_small", .description = "PVT-Small"},
    {PVT_BASE, PVT_FLATTEN, .name = "flatten_pvt_tiny",
     .description = "FLatten-PVT-T (Han et al. 2023): focused linear attention (p 3, DWC 5x5), sr 1, mean pool"},
    {PVT_BASE, PVT_FLATTEN, PVT_DEPTHS_3463, .name = "flatten_pvt_small", .description = "FLatten-PVT-S"},
    {PVT_BASE, PVT_V2, .name = "pvt_v2_b1", .description = "PVTv2-b1 (Wang et al. 2022), official names"},
    {PVT_BASE, PVT_V2, PVT_DEPTHS_3463, .name = "pvt_v2_b2", .description = "PVTv2-b2"},
    {PVT_BASE, PVT_V2, PVT_FLATTEN, .name = "flatten_pvt_v2_b1",
     .description = "FLatten-PVTv2-b1 (Han et al. 2023); input sizes multiples of 32"},
    {PVT_BASE, PVT_V2, PVT_FLATTEN, PVT_DEPTHS_3463, .name = "flatten_pvt_v2_b2",
     .description = "FLatten-PVTv2-b2; input sizes multiples of 32"},
    /* hMHSA + cFFN (Xu et al. 2023, spec-hmhsa-cffn §3-4) in every block: heads doubled to 2/4/10/16 (d 32), IHH on
     * the reduced 7x7 key grids, cFFN t = 2/3 after PVTv2's DWConv. Deployed form 12,151,706 params / 1.788 GMACs. */
    {PVT_BASE, PVT_V2, .name = "pvt_v2_b1_hmhsa_cffn", .arch.stages[0].attn = "hmhsa",
     .arch.stages[1].attn = "hmhsa", .arch.stages[2].attn = "hmhsa", .arch.stages[3].attn = "hmhsa",
     .arch.ffn = "cffn", .arch.opts.double_heads = 1,
     .description = "PVTv2-b1 + hMHSA (heads doubled) + cFFN (t 2/3), Xu et al. 2023; deployed form (--train-form: "
                    "r=2 BN branches)"},
};

/* PVTv2's parameters fit any size; v1's position embeddings are built for the image size (another input size
 * resizes them, but loading them needs that size), FLatten's positional encodings fix it. */
static int any_size(const vt_model_cfg *c) { return c->arch.version == 2 && !has_flatten(&c->arch); }

/* v1 (not FLatten's, whose positional encodings fix the size) runs other input sizes, pos_embed{i} resized. */
static int resizes(const vt_model_cfg *c) { return c->arch.version == 1 && !has_flatten(&c->arch); }

/* FLatten-PVT's stages: sr_ratio = sr_ratios[i] (8, 4, 2, 1) for an S stage, la_sr_ratios[i] (1, PVT_LA_SR_RATIOS) for
 * an L (flatten) one, as flatten_pvt.py chooses per attn_type. So a stage --attn turns into another type takes that
 * type's ratio (and the reduction's sr/norm tensors with it). Models without an L stage keep their ratios (FLatten is
 * refused on a reduced stage). */
static void retyped(vt_model_cfg *c, const vt_model_cfg *named) {
    static const int host_sr[4] = {8, 4, 2, 1};
    if (!has_flatten(&named->arch)) return;
    for (int i = 0; i < c->arch.nstages && i < 4; i++)
        if (strcmp(c->arch.stages[i].attn, named->arch.stages[i].attn) != 0)
            c->arch.stages[i].sr_ratio = strcmp(c->arch.stages[i].attn, "flatten") == 0 ? 1 : host_sr[i];
}

const vt_family vt_family_pvt = {
    .name = "pvt", .build = build, .features = features, .deploy = vt_family_cffn_deploy, .no_decay = no_decay, .check = check,
    .retyped = retyped,
    .any_size = any_size, .resizes = resizes, .caps = VT_CAP_DROP_PATH, .models = models, .nmodels = VT_COUNT(models),
};
