/* Named DeiT model with every block's attention replaced by FLatten focused linear attention (Han et al. 2023,
 * spec-flatten.md). UNOFFICIAL: the FLatten repo has no DeiT model (spec §6); this follows the spec's
 * recommendation: PVT-style module (attn.q + attn.kv), a positional encoding over all 197 tokens in every block,
 * and the class token skipping the DWC. The host is vt_build_vit (timm DeiT names). */
#include "vitc/model.h"

static const vt_model_cfg models[] = {
    {.name = "flatten_deit_tiny", .family = "vit", .build = vt_build_vit,
     .description = "DeiT-Ti + FLatten attention (p 3, DWC 5x5), Han et al. 2023; unofficial DeiT transplant (spec s6)",
     .img_size = 224, .in_chans = 3, .num_classes = 1000, .img_multiple = 16, .fixed_img = 1, .patch = 16,
     .embed_dim = 192, .depth = 12, .num_heads = 3, .mlp_ratio = 4.0f, .qkv_bias = 1, .ln_eps = 1e-6f,
     .class_token = 1, .attn = "flatten", .ffn = "mlp", .mean = VT_IMAGENET_MEAN,
     .std = VT_IMAGENET_STD, .flatten = {.focusing = 3.0f, .kernel = 5}},
};

const vt_model_table vt_models_vit_flatten = {models, (int)(sizeof models / sizeof models[0])};
