/* SimpleViT with global average pooling, the host of the MSF paper (official `SimpleViTflexAtt`, spec-msf §4):
 * (p1, p2, c) patchify → to_patch_embedding.{1 LN, 2 Linear, 3 LN} → + fixed 2-D sin-cos position embedding
 * (recomputed, not a parameter) → transformer.layers.{i}.{0 attention (own LN), 1 FF net.{0 LN, 1, 3}} → mean over
 * tokens (no final LN) → linear_head.{0 LN, 1 Linear}. LayerNorm eps from the config (1e-5); PyTorch default init. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "family.h"

/* nn.Linear with PyTorch's default init: weight and bias U(±1/sqrt(fan_in)); GELU fused after it (gelu = 1, keeps
 * two buffers for backward) or before it (gelu = 2, vt_gelu_linear, keeps one). */
static vt_tensor *torch_linear(vt_graph *g, const char *prefix, vt_tensor *x, int out, int gelu) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    const int in = x->shape[x->ndim - 1];
    const vt_init u = {VT_INIT_UNIFORM, 1.0f / sqrtf((float)in)};
    int ws[2] = {out, in};
    vt_tensor *w = vt_param(g, vt_pname(nm, prefix, "weight"), 2, ws, u);
    vt_tensor *b = vt_param(g, vt_pname(nm, prefix, "bias"), 1, &out, u);
    if (w) w->paper_count = 1;
    return gelu == 2 ? vt_gelu_linear(g, x, w, b) : gelu ? vt_linear_gelu(g, x, w, b) : vt_linear(g, x, w, b);
}

/* The MSF paper's own attention module (in-module LayerNorm, no biases, PyTorch init), not the block table's. */
static vt_tensor *build(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    const vt_stage_cfg *st = &a->stages[0];
    vt_msf_cfg m = {0};
    if (vt_msf_parse(st->attn, &m))
        return vt_fail(g, "simplevit", "unknown attention type '%s' (msf, orig, msf_g<N>, orig_g<N>[_block])",
                       st->attn);
    const int B = x->shape[0], C = x->shape[1], Hi = x->shape[2], Wi = x->shape[3], P = a->patch, D = st->dim;
    const int gh = Hi / P, gw = Wi / P, N = gh * gw;
    if (Hi % P || Wi % P || D % 4)
        return vt_fail(g, "simplevit", "image %dx%d not divisible by patch %d, or width %d not a multiple of 4", Hi, Wi,
                       P, D);
    m.heads = st->heads;
    m.dim_head = a->opts.dim_head > 0 ? a->opts.dim_head : D / st->heads;
    m.norm = 1;
    m.ln_eps = a->ln_eps;
    m.grid_h = gh;
    m.grid_w = gw;
    char nm[VT_NAMELEN], pre[VT_NAMELEN];
    vt_scope(g, "to_patch_embedding");
    /* (B, C, H, W) → (B, H·W, C) → (B·gh, P, gw, P·C) → (B·gh, gw, P, P·C) → (B, N, (p1·P + p2)·C + c) */
    int s3[3] = {B, C, Hi * Wi}, p3[3] = {0, 2, 1};
    vt_tensor *t = vt_permute(g, vt_reshape(g, x, 3, s3), p3);
    int s4[4] = {B * gh, P, gw, P * C}, p4[4] = {0, 2, 1, 3};
    t = vt_permute(g, vt_reshape(g, t, 4, s4), p4);
    int sp[3] = {B, N, P * P * C};
    t = vt_reshape(g, t, 3, sp);
    t = vt_layernorm_p(g, "to_patch_embedding.1", t, a->ln_eps);
    t = torch_linear(g, "to_patch_embedding.2", t, D, 0);
    t = vt_layernorm_p(g, "to_patch_embedding.3", t, a->ln_eps);
    t = vt_add(g, t, vt_posemb_sincos2d(g, gh, gw, D, 10000.0f));
    const int hidden = (int)(D * st->mlp_ratio);
    for (int i = 0; i < st->depth; i++) {
        snprintf(pre, sizeof pre, "transformer.layers.%d", i);
        vt_scope(g, pre);
        t = vt_residual(g, t, vt_block_msf(g, vt_pname(nm, pre, "0"), t, &m));
        char ff[VT_NAMELEN];
        snprintf(ff, sizeof ff, "transformer.layers.%d.1.net", i);
        vt_tensor *h = vt_layernorm_p(g, vt_pname(nm, ff, "0"), t, a->ln_eps);
        h = torch_linear(g, vt_pname(nm, ff, "1"), h, hidden, 0);
        t = vt_residual(g, t, torch_linear(g, vt_pname(nm, ff, "3"), h, D, 2)); /* GELU fused before the GEMM */
    }
    vt_scope(g, "linear_head");
    t = vt_layernorm_p(g, "linear_head.0", vt_mean(g, t, 1), a->ln_eps);
    return torch_linear(g, "linear_head.1", t, a->num_classes, 0);
}

static int check(const vt_model_cfg *c, vt_err *e) {
    vt_msf_cfg m = {0};
    if (vt_msf_parse(c->arch.stages[0].attn, &m) || strcmp(c->arch.ffn, "mlp") != 0)
        return vt_seterr(e, "%s: SimpleViT takes the MSF paper's attentions (--attn msf, orig, "
                              "msf_g<N>, orig_g<N>[_block]) and FFN mlp; asked for attention %s with FFN %s (--attn, "
                              "--ffn)", c->name, c->arch.stages[0].attn, c->arch.ffn);
    char size[24];
    if (c->arch.img_size % c->arch.patch || vt_arch_width(&c->arch) % c->arch.patch)
        return vt_seterr(e, "%s: image size %s: each side must be a multiple of the patch size %d", c->name,
                         vt_arch_size_text(&c->arch, size, sizeof size), c->arch.patch);
    return 0;
}

/* The official recipe (spec-msf §4.4) applies weight decay to every parameter, norms and biases included. */
static int no_decay(const vt_tensor *t) {
    (void)t;
    return 0;
}


/* The eval transform of the MSF README's torchvision train.py (ClassificationPresetEval): resize 256, centre crop 224,
 * its --interpolation default bilinear (the MSF recipe's too), ImageNet mean and std. */
#define SVIT_PRE                                                                                                  \
    {.mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD, .crop_pct = 0.875f, .interpolation = "bilinear",             \
     .dataset = "imagenet-1k"}

/* SimpleViT (paper Table 5 sizes; patch 16, 224 px, dim_head 64, MLP 4x, LN eps 1e-5, GAP). */
#define SVIT(nm, al, d, depth_, h, at, desc)                                                                       \
    {.family = &vt_family_simplevit, .name = nm, .alias = al, .description = desc,                               \
     .arch = {.img_size = 224, .in_chans = 3, .num_classes = 1000, .patch = 16, .nstages = 1,                     \
              .stages = {{.dim = d, .depth = depth_, .heads = h, .mlp_ratio = 4.0f, .attn = at}}, .ffn = "mlp",   \
              .ln_eps = 1e-5f, .opts = {.dim_head = 64}},                                                         \
     .pre = SVIT_PRE}

#define SVIT4(sz, SZ, d, depth_, h, al_orig, al_msf, al_msfg2, al_origg2)                                           \
    SVIT("simplevit_" sz "_orig", al_orig, d, depth_, h, "orig", "SimpleViT-" SZ ", baseline attention"),        \
    SVIT("simplevit_" sz "_msf", al_msf, d, depth_, h, "msf", "SimpleViT-" SZ ", MSF attention (Kobayashi 2024)"), \
    SVIT("simplevit_" sz "_msf_g2", al_msfg2, d, depth_, h, "msf_g2",                                              \
         "SimpleViT-" SZ ", MSF attention, 2-group interleaved to_qkvp"),                                          \
    SVIT("simplevit_" sz "_orig_g2", al_origg2, d, depth_, h, "orig_g2",                                           \
         "SimpleViT-" SZ ", baseline attention, 2-group interleaved to_qkv")

static const vt_model_cfg models[] = {
    SVIT4("ti", "Ti", 192, 12, 3, NULL, NULL, NULL, NULL),
    SVIT4("ss", "SS", 384, 6, 6, NULL, NULL, NULL, NULL),
    SVIT4("s", "S", 384, 12, 6, "SimpleViTS_orig", "SimpleViTS_msf", "SimpleViTS_msf-g2", "SimpleViTS_orig-g2"),
    SVIT4("b", "B", 768, 12, 12, NULL, NULL, NULL, NULL),
};

const vt_family vt_family_simplevit = {
    .name = "simplevit", .build = build, .caps = VT_CAP_ANY_SIZE, .no_decay = no_decay, .check = check, .models = models,
    .nmodels = VT_COUNT(models),
};
