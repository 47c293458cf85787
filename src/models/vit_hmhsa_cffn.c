/* Named DeiT models with every block's attention replaced by hMHSA and every MLP by cFFN (Xu et al. 2023, the
 * paper's "†" rows; spec-hmhsa-cffn.md §3-4). The host is vt_build_vit (timm DeiT names). Deployed form by default
 * (cfg.hc.train_form = 0): deit_tiny 4,680,040 params / 1.02 GMACs; deit_small 17,901,808 / 3.71. */
#include "vitc/model.h"

/* DeiT host (timm deit_*_patch16_224) with --attn hmhsa --ffn cffn, t = 2/3, r = 2. */
#define DEIT_HC(nm, d, h, dbl, desc)                                                                               \
    {.name = nm, .family = "vit", .build = vt_build_vit, .description = desc, .img_size = 224, .in_chans = 3,     \
     .num_classes = 1000, .img_multiple = 16, .fixed_img = 1, .patch = 16, .embed_dim = d, .depth = 12,            \
     .num_heads = h, .mlp_ratio = 4.0f, .qkv_bias = 1, .ln_eps = 1e-6f, .class_token = 1, .attn = "hmhsa",        \
     .ffn = "cffn", .mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD,                            \
     .hc = {.double_heads = dbl, .t = 2.0f / 3.0f, .r = 2}}

static const vt_model_cfg models[] = {
    DEIT_HC("deit_tiny_hmhsa_cffn", 192, 3, 1,
            "DeiT-Ti + hMHSA (3->6 heads) + cFFN (t 2/3), Xu et al. 2023; deployed form (--train-form: r=2 BN branches)"),
    DEIT_HC("deit_small_hmhsa_cffn", 384, 6, 0,
            "DeiT-S + hMHSA (6 heads, no doubling) + cFFN (t 2/3), Xu et al. 2023; deployed form"),
};

const vt_model_table vt_models_vit_hmhsa_cffn = {models, (int)(sizeof models / sizeof models[0])};
