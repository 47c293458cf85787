/* Refined-ViT host (Zhou et al. 2021, official Refiner_ViT; spec-refiner.md §2-§4, §6, §8): conv stem
 * (patch_embed.conv1/bn1 7x7/2, conv2/bn2, conv3/bn3, proj 8x8/8), class token, pos_embed, blocks alternating plain
 * and shared Refiner attention (or refine-every-block with refiner.apply_transform), residual branches on 0.5·x
 * added ×2, MLP ratio 3 with mlp.scale_channel, final norm, head on the class token and the optional aux_head. */
#include <stdio.h>

#include "vitc/blocks.h"
#include "vitc/model.h"

#define BN_EPS 1e-5f
#define BN_MOM 0.1f

/* Conv + BN + ReLU of the stem. */
static vt_tensor *stem_layer(vt_graph *g, const char *conv, const char *bn, vt_tensor *x, int out, int k, int s,
                             int p) {
    x = vt_conv2d_p(g, conv, x, out, k, s, p, 1, 0);
    return vt_relu(g, vt_batchnorm_p(g, bn, x, 1, BN_EPS, BN_MOM));
}

/* Official Mlp: fc1 (hidden) → GELU → fc2 → × scale_channel (C,) (init 1e-5). */
static vt_tensor *mlp(vt_graph *g, const char *prefix, vt_tensor *x, int hidden) {
    char nm[VT_NAMELEN];
    int C = x->shape[x->ndim - 1];
    vt_tensor *sc = vt_param(g, vt_pname(nm, prefix, "scale_channel"), 1, &C, (vt_init){VT_INIT_CONST, 1e-5f});
    if (sc) sc->no_decay = 1;
    vt_tensor *h = vt_block_mlp(g, prefix, x, hidden);
    return vt_mul(g, h, sc);
}

vt_tensor *vt_build_refined_vit(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    if (c->depth < 1 || (!c->refiner.apply_transform && c->depth % 2))
        return vt_fail(g, c->name, "depth %d must be even (plain/shared pairs)", c->depth);
    const int B = x->shape[0], D = c->embed_dim;
    const float expand = c->refiner.expand > 0 ? c->refiner.expand : 3.0f;
    const float head_expand = c->refiner.head_expand > 0 ? c->refiner.head_expand : 3.0f;
    char nm[VT_NAMELEN], pre[VT_NAMELEN];

    vt_scope(g, "patch_embed");
    vt_tensor *t = stem_layer(g, "patch_embed.conv1", "patch_embed.bn1", x, 32, 7, 2, 3);
    t = stem_layer(g, "patch_embed.conv2", "patch_embed.bn2", t, 64, 3, 1, 1);
    t = stem_layer(g, "patch_embed.conv3", "patch_embed.bn3", t, 128, 3, 1, 1);
    t = vt_conv2d_p(g, "patch_embed.proj", t, D, 8, 8, 0, 1, 1);
    if (!t) return NULL;
    const int n = t->shape[2] * t->shape[3];
    int s3[3] = {B, D, n}, perm[3] = {0, 2, 1}, ts[3] = {1, 1, D}, ps[3] = {1, n + 1, D};
    t = vt_permute(g, vt_reshape(g, t, 3, s3), perm); /* (B, n, D), token index y·w + x */
    vt_tensor *cls = vt_param(g, "cls_token", 3, ts, VT_INIT_W02);
    vt_tensor *pos = vt_param(g, "pos_embed", 3, ps, VT_INIT_W02);
    if (!cls || !pos) return NULL;
    cls->no_decay = pos->no_decay = 1;
    t = vt_add(g, vt_prepend_tokens(g, t, cls), pos);

    vt_tensor *amap = NULL; /* the attention map carried from block to block */
    for (int i = 0; i < c->depth; i++) {
        snprintf(pre, sizeof pre, "blocks.%d", i);
        vt_scope(g, pre);
        vt_refiner_mode mode = c->refiner.apply_transform ? VT_REFINER_TRANSFORM
                               : (i % 2)                  ? VT_REFINER_SHARED
                                                          : VT_REFINER_PLAIN;
        vt_tensor *h = vt_layernorm_p(g, vt_pname(nm, pre, "norm1"), vt_scale(g, t, 0.5f), c->ln_eps);
        h = vt_block_refiner_attn(g, vt_pname(nm, pre, "attn"), h, c->num_heads, c->qkv_bias, mode,
                                  mode == VT_REFINER_TRANSFORM ? head_expand : expand, &amap);
        const float dp = vt_model_drop_path(c, i, c->depth);
        t = vt_add(g, t, vt_scale(g, vt_drop_path(g, h, dp), 2.0f));
        h = vt_layernorm_p(g, vt_pname(nm, pre, "norm2"), vt_scale(g, t, 0.5f), c->ln_eps);
        h = mlp(g, vt_pname(nm, pre, "mlp"), h, (int)(D * c->mlp_ratio));
        t = vt_add(g, t, vt_scale(g, vt_drop_path(g, h, dp), 2.0f));
    }

    vt_scope(g, "head");
    t = vt_layernorm_p(g, "norm", t, c->ln_eps);
    int s2[2] = {B, D};
    vt_tensor *logits = vt_linear_p(g, "head", vt_reshape(g, vt_slice(g, t, 1, 0, 1), 2, s2), c->num_classes, 1,
                                    VT_INIT_W02);
    /* aux_head: eval output = cls logits + 0.5·max over the patch tokens of the dense logits. In train graphs the
     * official model returns (cls, dense, bbox) for a token-labelling loss; vitc trains/differentiates the class
     * head only, so aux_head is left out of train graphs (its gradient is 0). */
    if (c->refiner.aux_head && !g->training) {
        vt_tensor *dense = vt_linear_p(g, "aux_head", vt_slice(g, t, 1, 1, n), c->num_classes, 1, VT_INIT_W02);
        logits = vt_add(g, logits, vt_scale(g, vt_max(g, dense, 1), 0.5f));
    }
    return logits;
}

#define HALF {0.5f, 0.5f, 0.5f}

/* Refiner_ViT_{S,M,L}: conv stem, patch 16, MLP 3x, qkv bias, LN eps 1e-6, mean = std = 0.5, crop_pct 0.9 / 1.0 /
 * 1.13 (spec-refiner §8: L pads the 198-pixel resize to 224). */
#define REFINER(nm, al, dep, d, h, hexp, aux, crop, desc)                                                                \
    {.name = nm, .alias = al, .family = "refined_vit", .build = vt_build_refined_vit, .description = desc,        \
     .img_size = 224, .in_chans = 3, .num_classes = 1000, .img_multiple = 16, .fixed_img = 1, .patch = 16,        \
     .embed_dim = d, .depth = dep, .num_heads = h, .mlp_ratio = 3.0f, .qkv_bias = 1, .ln_eps = 1e-6f,             \
     .class_token = 1, .attn = "refiner", .ffn = "mlp", .mean = HALF, .std = HALF, .crop_pct = crop,               \
     .refiner = {.aux_head = aux, .apply_transform = 0, .expand = 3.0f, .head_expand = hexp}}

static const vt_model_cfg refined_vit_models[] = {
    REFINER("refiner_vit_s", "refined_vit_s", 16, 384, 12, 6.0f, 0, 0.9f,
            "Refined-ViT-S (Zhou et al. 2021): 16 blocks [plain, shared]x8, D 384, 12 heads, DLA x3, no aux_head"),
    REFINER("refiner_vit_m", "refined_vit_m", 32, 420, 12, 3.0f, 0, 1.0f,
            "Refined-ViT-M: 32 blocks [plain, shared]x16, D 420, 12 heads, no aux_head"),
    REFINER("refiner_vit_l", "refined_vit_l", 32, 512, 16, 3.0f, 0, 1.13f,
            "Refined-ViT-L: 32 blocks [plain, shared]x16, D 512, 16 heads, no aux_head"),
    REFINER("refiner_vit_s_dense", "Refiner_ViT_S", 16, 384, 12, 6.0f, 1, 0.9f,
            "Refined-ViT-S with aux_head (eval: cls + 0.5 max-token dense logits)"),
    REFINER("refiner_vit_m_dense", "Refiner_ViT_M", 32, 420, 12, 3.0f, 1, 1.0f, "Refined-ViT-M with aux_head"),
    REFINER("refiner_vit_l_dense", "Refiner_ViT_L", 32, 512, 16, 3.0f, 1, 1.13f, "Refined-ViT-L with aux_head"),
};

const vt_model_table vt_models_refined_vit = {refined_vit_models,
                                              (int)(sizeof refined_vit_models / sizeof refined_vit_models[0])};
