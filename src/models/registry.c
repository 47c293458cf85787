/* The table of named models and the generic build / init entry points. */
#include <stdio.h>
#include <string.h>

#include "vitc/model.h"

#define IMAGENET_MEAN {0.485f, 0.456f, 0.406f}
#define IMAGENET_STD {0.229f, 0.224f, 0.225f}
#define FMNIST_MEAN {0.2860f, 0.2860f, 0.2860f}
#define FMNIST_STD {0.3530f, 0.3530f, 0.3530f}

/* DeiT (timm deit_*_patch16_224): class token, qkv bias, LN eps 1e-6, ImageNet normalisation. */
#define DEIT(nm, d, h, desc)                                                                                      \
    {.name = nm, .family = "vit", .build = vt_build_vit, .description = desc, .img_size = 224, .in_chans = 3,     \
     .num_classes = 1000, .img_multiple = 16, .fixed_img = 1, .patch = 16, .embed_dim = d, .depth = 12,            \
     .num_heads = h, .mlp_ratio = 4.0f, .qkv_bias = 1, .ln_eps = 1e-6f, .class_token = 1, .attn = "mhsa",         \
     .ffn = "mlp", .mean = IMAGENET_MEAN, .std = IMAGENET_STD}

/* Small ViTs for 28×28 grayscale Fashion-MNIST (patch 4: 7×7 = 49 tokens + class token). */
#define FMNIST_VIT(nm, d, depth_, h, desc)                                                                         \
    {.name = nm, .family = "vit", .build = vt_build_vit, .description = desc, .img_size = 28, .in_chans = 1,      \
     .num_classes = 10, .img_multiple = 4, .fixed_img = 1, .patch = 4, .embed_dim = d, .depth = depth_,            \
     .num_heads = h, .mlp_ratio = 2.0f, .qkv_bias = 1, .ln_eps = 1e-6f, .class_token = 1, .attn = "mhsa",         \
     .ffn = "mlp", .mean = FMNIST_MEAN, .std = FMNIST_STD}

static const vt_model_cfg models[] = {
    DEIT("deit_tiny_patch16_224", 192, 3, "DeiT-Ti (Touvron et al. 2021), timm names"),
    DEIT("deit_small_patch16_224", 384, 6, "DeiT-S"),
    DEIT("deit_base_patch16_224", 768, 12, "DeiT-B"),
    FMNIST_VIT("vit_fmnist_tiny", 64, 4, 4, "ViT for 28x28 Fashion-MNIST: D 64, depth 4, 4 heads, MLP 2x"),
    FMNIST_VIT("vit_fmnist_small", 128, 6, 4, "ViT for 28x28 Fashion-MNIST: D 128, depth 6, 4 heads, MLP 2x"),
};

int vt_model_count(void) { return (int)(sizeof models / sizeof models[0]); }

const vt_model_cfg *vt_model_at(int i) { return i >= 0 && i < vt_model_count() ? &models[i] : NULL; }

const vt_model_cfg *vt_model_find(const char *name) {
    for (int i = 0; i < vt_model_count(); i++)
        if (strcmp(models[i].name, name) == 0 || (models[i].alias && strcmp(models[i].alias, name) == 0))
            return &models[i];
    return NULL;
}

int vt_model_configure(const vt_model_cfg *cfg, int img_size, int in_chans, int num_classes, const char *attn,
                       const char *ffn, vt_model_cfg *out, vt_err *e) {
    *out = *cfg;
    if (img_size > 0) out->img_size = img_size;
    if (in_chans > 0) out->in_chans = in_chans;
    if (num_classes > 0) out->num_classes = num_classes;
    if (attn) out->attn = attn;
    if (ffn) out->ffn = ffn;
    if (out->img_size < out->img_multiple || out->img_size % out->img_multiple || out->img_size > 4096)
        return vt_seterr(e, "%s: image size %d must be a positive multiple of %d (at most 4096)", cfg->name,
                         out->img_size, out->img_multiple);
    if (out->in_chans > 64 || out->num_classes > 100000)
        return vt_seterr(e, "%s: %d input channels / %d classes out of range", cfg->name, out->in_chans,
                         out->num_classes);
    return 0;
}

vt_tensor *vt_model_build(vt_graph *g, const vt_model_cfg *c, int B, vt_tensor **input) {
    int s[4] = {B, c->in_chans, c->img_size, c->img_size};
    vt_tensor *x = vt_input(g, "input", 4, s);
    if (input) *input = x;
    vt_tensor *y = c->build(g, c, x);
    if (y && (y->ndim != 2 || y->shape[0] != B || y->shape[1] != c->num_classes))
        return vt_fail(g, c->name, "network returned a tensor that is not (B, num_classes)");
    return y;
}

int vt_model_init_params(const vt_model_cfg *c, vt_params *P, uint64_t seed, vt_err *e) {
    vt_graph *g = vt_graph_new(P, 0, e);
    if (!g) return -1;
    vt_tensor *y = vt_model_build(g, c, 1, NULL);
    int rc = 0;
    if (!y) rc = vt_seterr(e, "%s", g->err.msg);
    vt_graph_free(g);
    if (rc == 0) vt_params_init(P, seed);
    return rc;
}
