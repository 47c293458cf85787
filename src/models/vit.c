/* ViT / DeiT host with timm's VisionTransformer state_dict names: patch_embed.proj, cls_token, pos_embed,
 * blocks.{i}.{norm1, attn, norm2, mlp}, norm, head. Pre-norm blocks, LayerNorm eps from the config. */
#include <stdio.h>
#include <string.h>

#include "vitc/blocks.h"
#include "vitc/dataset.h"
#include "vitc/model.h"

/* The attention of block `prefix` chosen by the config's attention type. */
static vt_tensor *attention(vt_graph *g, const vt_model_cfg *c, const char *prefix, vt_tensor *x) {
    if (strcmp(c->attn, "mhsa") == 0) return vt_block_mhsa(g, prefix, x, c->num_heads, c->qkv_bias);
    /* ---- other attention types: one line each, added below ---- */
    if (strcmp(c->attn, "gma") == 0) return vt_block_gma_host(g, prefix, x); /* square grid, no class token */
    if (strcmp(c->attn, "flatten") == 0)
        return vt_block_flatten_vit(g, prefix, x, c->num_heads, c->qkv_bias, c->class_token, c->flatten.focusing,
                                    c->flatten.kernel);
    if (strcmp(c->attn, "hmhsa") == 0) { /* key grid: the patch tokens; the class token bypasses IHH */
        const int grid = c->img_size / c->patch;
        return vt_block_hmhsa(g, prefix, x,
                              &(vt_hmhsa_cfg){c->num_heads, c->qkv_bias, c->hc.double_heads, grid, grid, c->hc.no_ihh,
                                              c->hc.no_chh, c->hc.chh_first});
    }
    if (strcmp(c->attn, "refiner") == 0) /* MHSA with its map refined by adapt_bn(DLA(.)), no chain */
        return vt_block_refiner_attn(g, prefix, x, c->num_heads, c->qkv_bias, VT_REFINER_TRANSFORM,
                                     c->refiner.expand > 0 ? c->refiner.expand : 3.0f, NULL);
    if (strncmp(c->attn, "msf", 3) == 0 || strncmp(c->attn, "orig", 4) == 0) /* MSF paper: msf*, its baseline orig* */
        return vt_block_msf_vit(g, prefix, x, c->attn, c->num_heads);
    return vt_fail(g, "vit", "unknown attention type '%s'", c->attn);
}

/* The FFN of block `prefix` chosen by the config's FFN type. */
static vt_tensor *ffn(vt_graph *g, const vt_model_cfg *c, const char *prefix, vt_tensor *x) {
    if (strcmp(c->ffn, "mlp") == 0) return vt_block_mlp(g, prefix, x, (int)(c->embed_dim * c->mlp_ratio));
    /* ---- other FFN types: one line each, added below ---- */
    if (strcmp(c->ffn, "cffn") == 0)
        return vt_block_cffn(g, prefix, x, (int)(c->embed_dim * c->mlp_ratio),
                             &(vt_cffn_cfg){c->hc.t, c->hc.r, c->hc.train_form});
    return vt_fail(g, "vit", "unknown FFN type '%s'", c->ffn);
}

vt_tensor *vt_build_vit(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    const int B = x->shape[0], D = c->embed_dim, gh = x->shape[2] / c->patch, gw = x->shape[3] / c->patch;
    const int N = gh * gw, T = N + (c->class_token ? 1 : 0);
    char nm[VT_NAMELEN], pre[VT_NAMELEN];
    vt_scope(g, "patch_embed");
    vt_tensor *t = vt_conv2d_p(g, "patch_embed.proj", x, D, c->patch, c->patch, 0, 1, 1);
    int s3[3] = {B, D, N}, perm[3] = {0, 2, 1};
    t = vt_permute(g, vt_reshape(g, t, 3, s3), perm); /* (B, N, D) */
    if (c->class_token) {
        int ts[3] = {1, 1, D};
        vt_tensor *cls = vt_param(g, "cls_token", 3, ts, VT_INIT_W02);
        if (cls) cls->no_decay = 1;
        t = vt_prepend_tokens(g, t, cls);
    }
    int ps[3] = {1, T, D};
    vt_tensor *pos = vt_param(g, "pos_embed", 3, ps, VT_INIT_W02);
    if (pos) pos->no_decay = 1;
    t = vt_add(g, t, pos);
    for (int i = 0; i < c->depth; i++) {
        snprintf(pre, sizeof pre, "blocks.%d", i);
        vt_scope(g, pre);
        vt_tensor *h = attention(g, c, vt_pname(nm, pre, "attn"), vt_layernorm_p(g, vt_pname(nm, pre, "norm1"), t, c->ln_eps));
        const float dp = vt_model_drop_path(c, i, c->depth);
        t = vt_block_residual(g, t, h, dp);
        h = ffn(g, c, vt_pname(nm, pre, "mlp"), vt_layernorm_p(g, vt_pname(nm, pre, "norm2"), t, c->ln_eps));
        t = vt_block_residual(g, t, h, dp);
    }
    vt_scope(g, "head");
    t = vt_layernorm_p(g, "norm", t, c->ln_eps);
    int s2[2] = {B, D};
    if (c->class_token)
        t = vt_reshape(g, vt_slice(g, t, 1, 0, 1), 2, s2);
    else
        t = vt_mean(g, t, 1);
    return vt_linear_p(g, "head", t, c->num_classes, 1, VT_INIT_W02);
}


/* DeiT (timm deit_*_patch16_224): class token, qkv bias, LN eps 1e-6, ImageNet normalisation. */
#define DEIT(nm, d, h, desc)                                                                                      \
    {.name = nm, .family = "vit", .build = vt_build_vit, .description = desc, .img_size = 224, .in_chans = 3,     \
     .num_classes = 1000, .img_multiple = 16, .fixed_img = 1, .patch = 16, .embed_dim = d, .depth = 12,            \
     .num_heads = h, .mlp_ratio = 4.0f, .qkv_bias = 1, .ln_eps = 1e-6f, .class_token = 1, .attn = "mhsa",         \
     .ffn = "mlp", .mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD}

/* Small ViTs for 28×28 grayscale Fashion-MNIST (patch 4: 7×7 = 49 tokens, patch 7: 4×4 = 16, + class token). */
#define FMNIST_VIT(nm, p, d, depth_, h, desc)                                                                         \
    {.name = nm, .family = "vit", .build = vt_build_vit, .description = desc, .img_size = 28, .in_chans = 1,      \
     .num_classes = 10, .img_multiple = p, .fixed_img = 1, .patch = p, .embed_dim = d, .depth = depth_,            \
     .num_heads = h, .mlp_ratio = 2.0f, .qkv_bias = 1, .ln_eps = 1e-6f, .class_token = 1, .attn = "mhsa",         \
     .ffn = "mlp", .mean = VT_FMNIST_MEAN3, .std = VT_FMNIST_STD3, .crop_pct = 1.0f,     \
     .dataset = "fashion-mnist"}

static const vt_model_cfg vit_models[] = {
    DEIT("deit_tiny_patch16_224", 192, 3, "DeiT-Ti (Touvron et al. 2021), timm names"),
    DEIT("deit_small_patch16_224", 384, 6, "DeiT-S"),
    DEIT("deit_base_patch16_224", 768, 12, "DeiT-B"),
    FMNIST_VIT("vit_fmnist_tiny", 4, 64, 4, 4, "ViT for 28x28 Fashion-MNIST: patch 4, D 64, depth 4, 4 heads, MLP 2x"),
    FMNIST_VIT("vit_fmnist_small", 4, 128, 6, 4, "ViT for 28x28 Fashion-MNIST: patch 4, D 128, depth 6, 4 heads"),
    FMNIST_VIT("vit_fmnist_p7", 7, 128, 6, 4, "ViT for 28x28 Fashion-MNIST: patch 7 (16 tokens), D 128, depth 6"),
};

const vt_model_table vt_models_vit = {vit_models, (int)(sizeof vit_models / sizeof vit_models[0])};
