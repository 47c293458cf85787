/* GroupMixFormer (Ge et al., "Advancing Vision Transformers with Group-Mix Attention"), as the official
 * AILab-CVC code builds it (shared/specs/spec-groupmixformer.md §2–§3, §8): conv stem (2 × conv3×3/2 + BN +
 * Hardswish), per stage a separable patch embed (stride 1, then 2) + BN + Hardswish and GMA blocks, then
 * norm4 (BatchNorm2d) → global average pool → head. State_dict names are the official ones. */
#include <stdio.h>
#include <string.h>

#include "vitc/blocks.h"
#include "vitc/dataset.h"
#include "vitc/model.h"

/* BatchNorm2d (eps 1e-5, momentum 0.1) on NCHW x, then Hardswish. */
static vt_tensor *bn_hswish(vt_graph *g, const char *prefix, vt_tensor *x) {
    return vt_unary(g, vt_batchnorm_p(g, prefix, x, 1, 1e-5f, 0.1f), VT_HARDSWISH, 0.0f);
}

/* Stem, patch embeds and stages; returns the last stage's tokens (B, N_3, C_3); with maps != NULL also the four
 * stage maps (B, C_i, H_i, W_i) (the official return_interm_layers=True outputs). */
static vt_tensor *backbone(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor **maps) {
    if (vt_bad(g, 1, x)) return NULL;
    if (strcmp(c->attn, "gma") != 0 || strcmp(c->ffn, "mlp") != 0)
        return vt_fail(g, c->name, "GroupMixFormer has fixed blocks (attention gma, FFN mlp); got --attn %s --ffn %s",
                       c->attn, c->ffn);
    const int B = x->shape[0], Hi = x->shape[2], Wi = x->shape[3];
    if (Hi % 32 || Wi % 32 || Hi < 32 || Wi < 32)
        return vt_fail(g, c->name, "input %d×%d: height and width must be positive multiples of 32 (the stage grids "
                       "H/4, H/8, H/16, H/32 must be whole)", Hi, Wi);
    for (int i = 0; i < 4; i++)
        if (c->gmf.dims[i] < 10 || c->gmf.dims[i] % 10 || c->gmf.depths[i] < 0 || c->gmf.mlp_ratios[i] <= 0.0f)
            return vt_fail(g, c->name, "stage %d: width %d must be a positive multiple of 10, depth %d >= 0, "
                           "MLP ratio %g > 0", i, c->gmf.dims[i], c->gmf.depths[i], (double)c->gmf.mlp_ratios[i]);
    char pre[VT_NAMELEN], nm[VT_NAMELEN];
    const int C0 = c->gmf.dims[0];

    vt_scope(g, "conv_stem");
    vt_tensor *m = vt_conv2d_p(g, "conv_stem.proj1", x, C0 / 2, 3, 2, 1, 1, 1);
    m = bn_hswish(g, "conv_stem.norm1", m);
    m = vt_conv2d_p(g, "conv_stem.proj2", m, C0, 3, 2, 1, 1, 1);
    m = bn_hswish(g, "conv_stem.norm2", m); /* (B, C0, H/4, W/4) */

    vt_tensor *t = NULL;
    int C = C0, H = 0, W = 0, blk = 0;
    const int nblk = c->gmf.depths[0] + c->gmf.depths[1] + c->gmf.depths[2] + c->gmf.depths[3];
    for (int i = 0; i < 4 && m; i++) {
        snprintf(pre, sizeof pre, "patch_embed_layers.%d", i);
        vt_scope(g, pre);
        C = c->gmf.dims[i];
        m = vt_block_separable(g, vt_pname(nm, pre, "proj"), m, C, 3, i ? 2 : 1);
        m = bn_hswish(g, vt_pname(nm, pre, "norm"), m);
        if (!m) break;
        H = m->shape[2];
        W = m->shape[3];
        const int s3[3] = {B, C, H * W}, ptok[3] = {0, 2, 1};
        t = vt_permute(g, vt_reshape(g, m, 3, s3), ptok); /* tokens (B, N, C), index y·W + x */
        const int hidden = (int)((float)C * c->gmf.mlp_ratios[i]);
        for (int j = 0; j < c->gmf.depths[i]; j++) {
            snprintf(pre, sizeof pre, "groupmixformer_backbone.%d.gma_stage.%d", i, j);
            vt_scope(g, pre);
            t = vt_block_gma(g, pre, t, H, W, hidden, vt_model_drop_path(c, blk++, nblk));
        }
        if (i < 3 || maps) {
            const int s4[4] = {B, C, H, W};
            m = vt_reshape(g, vt_permute(g, t, ptok), 4, s4); /* map (B, C, H, W) for the next patch embed */
            if (maps) maps[i] = m;
        }
    }
    return t;
}

int vt_groupmixformer_features(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[4]) {
    for (int i = 0; i < 4; i++) maps[i] = NULL;
    backbone(g, c, x, maps);
    return g->err.msg[0] || !maps[3] ? -1 : 0;
}

vt_tensor *vt_build_groupmixformer(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    vt_tensor *t = backbone(g, c, x, NULL);
    /* norm4 (BatchNorm2d on the last map) → mean over H, W → head; BN done channels-last on the tokens. */
    vt_scope(g, "head");
    t = vt_batchnorm_p(g, "norm4", t, 2, 1e-5f, 0.1f);
    t = vt_mean(g, t, 1);
    return vt_linear_p(g, "head", t, c->num_classes, 1, VT_INIT_W02);
}


#define GMF(nm, al, d0, d1, d2, d3, l0, l1, l2, l3, r0, r1, r2, r3, desc)                                         \
    {.name = nm, .alias = al, .family = "groupmixformer", .build = vt_build_groupmixformer, .features = vt_groupmixformer_features, .description = desc,  \
     .img_size = 224, .in_chans = 3, .num_classes = 1000, .img_multiple = 32, .fixed_img = 0, .patch = 4,        \
     .embed_dim = d3, .depth = l0 + l1 + l2 + l3, .num_heads = 8, .mlp_ratio = r3, .qkv_bias = 1,                \
     .ln_eps = 1e-6f, .class_token = 0, .attn = "gma", .ffn = "mlp", .mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD, \
     .gmf = {{d0, d1, d2, d3}, {l0, l1, l2, l3}, {r0, r1, r2, r3}}}

static const vt_model_cfg gmf_models[] = {
    GMF("groupmixformer_m", "groupmixformer_miny", 40, 80, 160, 160, 3, 3, 12, 4, 4, 4, 4, 4,
        "GroupMixFormer-M (repo yaml miny), official names"),
    GMF("groupmixformer_t", "groupmixformer_tiny", 80, 160, 200, 240, 4, 4, 12, 4, 4, 4, 4, 4,
        "GroupMixFormer-T (repo yaml tiny)"),
    GMF("groupmixformer_s", "groupmixformer_small", 80, 160, 320, 320, 2, 4, 12, 4, 4, 4, 4, 4,
        "GroupMixFormer-S (repo yaml small)"),
    GMF("groupmixformer_b", "groupmixformer_base", 200, 240, 320, 480, 8, 8, 12, 8, 2, 2, 4, 4,
        "GroupMixFormer-B (repo yaml base)"),
    GMF("groupmixformer_l", "groupmixformer_large", 240, 320, 360, 480, 8, 10, 18, 16, 4, 4, 2, 2,
        "GroupMixFormer-L (paper Table 1; the repo yaml is a placeholder)"),
    {.name = "groupmixformer_test", .family = "groupmixformer", .build = vt_build_groupmixformer, .features = vt_groupmixformer_features,
     .description = "GroupMixFormer for tests: widths 20/30/40/50, depths 1/2/1/1, 64 px, 10 classes",
     .img_size = 64, .in_chans = 3, .num_classes = 10, .img_multiple = 32, .fixed_img = 0, .patch = 4,
     .embed_dim = 50, .depth = 5, .num_heads = 8, .mlp_ratio = 2.0f, .qkv_bias = 1, .ln_eps = 1e-6f,
     .class_token = 0, .attn = "gma", .ffn = "mlp", .mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD,
     .gmf = {{20, 30, 40, 50}, {1, 2, 1, 1}, {2.0f, 3.0f, 2.0f, 1.5f}}},
    /* Plain ViT host for 28×28 Fashion-MNIST with a GAP head and no class token, so `--attn gma` works (GMA needs a
     * square token grid and a width that is a multiple of 10 with 8 heads). Default attention mhsa. */
    {.name = "vit_fmnist_tiny_gap", .family = "vit", .build = vt_build_vit,
     .description = "ViT for 28x28 Fashion-MNIST, no class token (GAP): patch 4, D 80, depth 4, 8 heads; --attn gma",
     .img_size = 28, .in_chans = 1, .num_classes = 10, .img_multiple = 4, .fixed_img = 1, .patch = 4,
     .embed_dim = 80, .depth = 4, .num_heads = 8, .mlp_ratio = 2.0f, .qkv_bias = 1, .ln_eps = 1e-6f,
     .class_token = 0, .attn = "mhsa", .ffn = "mlp", .mean = VT_FMNIST_MEAN3,
     .std = VT_FMNIST_STD3, .crop_pct = 1.0f, .dataset = "fashion-mnist"},
};

const vt_model_table vt_models_groupmixformer = {gmf_models, (int)(sizeof gmf_models / sizeof gmf_models[0])};
