/* ViT / DeiT host with timm's VisionTransformer state_dict names: patch_embed.proj, cls_token, pos_embed,
 * blocks.{i}.{norm1, attn, norm2, mlp}, norm, head. Pre-norm blocks; every block's attention and FFN come from the
 * block tables (--attn / --ffn), so the five papers' blocks run in this one host. Named models: DeiT, small ViTs for
 * Fashion-MNIST, and the papers' DeiT variants (FLatten-DeiT-T, DeiT + hMHSA + cFFN). */
#include <stdio.h>
#include <string.h>

#include "family.h"
#include "vitc/dataset.h"

static vt_tensor *build(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    const int B = x->shape[0], D = a->stages[0].dim, gh = x->shape[2] / a->patch, gw = x->shape[3] / a->patch;
    const int N = gh * gw, T = N + (a->class_token ? 1 : 0), depth = a->stages[0].depth;
    char nm[VT_NAMELEN], pre[VT_NAMELEN];
    vt_scope(g, "patch_embed");
    vt_tensor *t = vt_conv2d_p(g, "patch_embed.proj", x, D, a->patch, a->patch, 0, 1, 1);
    int s3[3] = {B, D, N}, perm[3] = {0, 2, 1};
    t = vt_permute(g, vt_reshape(g, t, 3, s3), perm); /* (B, N, D) */
    if (a->class_token) {
        int ts[3] = {1, 1, D};
        t = vt_prepend_tokens(g, t, vt_param(g, "cls_token", 3, ts, VT_INIT_W02));
    }
    int ps[3] = {1, T, D};
    t = vt_add(g, t, vt_param(g, "pos_embed", 3, ps, VT_INIT_W02));
    const vt_attn_ctx actx = vt_stage_attn_ctx(c, 0, gh, gw, a->class_token);
    g->map_px = a->patch;
    const vt_ffn_ctx fctx = vt_stage_ffn_ctx(c, 0);
    /* The head reads only the class token: the last block computes the other tokens' keys and values, nothing more
     * (attention types with a lead-queries form: plain, MSF, hMHSA, FLatten; FFNs are per token but a re-parameterised
     * one's training form, whose BatchNorms take statistics over the tokens; every token when the graph asks for all
     * of them or exports attention maps) */
    const vt_attn_type *at = vt_attn_find(a->stages[0].attn);
    const vt_ffn_type *ft = vt_ffn_find(a->ffn);
    const int cls_last = a->class_token && !g->all_tokens && !g->export_maps && at && at->lead_queries && ft &&
                         !(ft->reparam && g->training);
    vt_attn_ctx lctx = actx;
    lctx.lead_queries = 1;
    for (int i = 0; i < depth; i++) {
        snprintf(pre, sizeof pre, "blocks.%d", i);
        vt_scope(g, pre);
        const float dp = vt_model_drop_path(c, i, depth);
        vt_tensor *h = vt_layernorm_p(g, vt_pname(nm, pre, "norm1"), t, a->ln_eps);
        const int lead = cls_last && i == depth - 1;
        if (lead) t = vt_slice(g, t, 1, 0, 1); /* the class token's residual stream (made before the branch) */
        t = vt_block_residual(g, t, vt_attn_build(g, a->stages[0].attn, vt_pname(nm, pre, "attn"), h,
                                                  lead ? &lctx : &actx), dp);
        h = vt_layernorm_p(g, vt_pname(nm, pre, "norm2"), t, a->ln_eps);
        t = vt_block_residual(g, t, vt_ffn_build(g, a->ffn, vt_pname(nm, pre, "mlp"), h, &fctx), dp);
    }
    vt_scope(g, "head");
    t = vt_layernorm_p(g, "norm", t, a->ln_eps);
    int s2[2] = {B, D};
    if (a->class_token)
        t = vt_reshape(g, vt_slice(g, t, 1, 0, 1), 2, s2);
    else /* `norm` before the mean over the tokens (timm's avg-pool ViTs put an `fc_norm` after it instead) */
        t = vt_mean(g, t, 1);
    return vt_linear_p(g, "head", t, a->num_classes, 1, VT_INIT_W02);
}

/* timm's patch embedding is a conv of stride patch: other sizes drop their last S mod patch pixels, as there. Its
 * PatchEmbed takes an (H, W) img_size too (pos_embed then holds (H/p)·(W/p) patch rows); FLatten's module, whose DWC
 * reads the tokens as a ⌊√N⌋ × ⌊√N⌋ grid (spec-flatten §1.2 step 14), is kept to square grids. */
static int check(const vt_model_cfg *c, vt_err *e) {
    const vt_arch_cfg *a = &c->arch;
    char size[24];
    vt_arch_size_text(a, size, sizeof size);
    if (a->img_size < a->patch || vt_arch_width(a) < a->patch)
        return vt_seterr(e, "%s: image size %s is below the patch size %d", c->name, size, a->patch);
    if (a->img_size / a->patch != vt_arch_width(a) / a->patch && strcmp(a->stages[0].attn, "flatten") == 0)
        return vt_seterr(e, "%s: image size %s gives a %dx%d patch grid, and FLatten attention in a ViT host reads "
                         "its tokens as a square grid (the official module's DWC: H = W = sqrt(N)); use a square "
                         "--img-size", c->name, size, a->img_size / a->patch, vt_arch_width(a) / a->patch);
    return 0;
}

static int no_decay(const vt_tensor *t) {
    static const char *const skip[] = {"cls_token", "pos_embed", NULL};
    return vt_no_decay_default(t, skip);
}

/* DeiT-Ti (timm deit_tiny_patch16_224): the base every model of this family overrides. */
#define VIT_BASE                                                                                                  \
    .family = &vt_family_vit,                                                                                     \
    .arch = {.img_size = 224, .in_chans = 3, .num_classes = 1000, .patch = 16, .nstages = 1,                      \
             .stages = {{.dim = 192, .depth = 12, .heads = 3, .mlp_ratio = 4.0f, .attn = "mhsa"}}, .ffn = "mlp",  \
             .qkv_bias = 1, .ln_eps = 1e-6f, .class_token = 1,                                                    \
             .opts = {.flatten_q_kv = 1, .focusing = 3.0f, .kernel = 5, .cffn_t = 2.0f / 3.0f, .cffn_r = 2}},      \
    .pre = VT_PRE_IMAGENET

/* Small ViTs for 28×28 grayscale Fashion-MNIST (patch 4: 7×7 = 49 tokens, patch 7: 4×4 = 16, + class token). */
#define FMNIST                                                                                                    \
    .arch.img_size = 28, .arch.in_chans = 1, .arch.num_classes = 10, .arch.patch = 4, .arch.stages[0].heads = 4,  \
    .arch.stages[0].mlp_ratio = 2.0f,                                                                             \
    .pre = {.mean = VT_FMNIST_MEAN3, .std = VT_FMNIST_STD3, .crop_pct = 1.0f, .interpolation = "bicubic",          \
            .dataset = "fashion-mnist"}

static const vt_model_cfg models[] = {
    {VIT_BASE, .name = "deit_tiny_patch16_224", .description = "DeiT-Ti (Touvron et al. 2021), timm names"},
    {VIT_BASE, .name = "deit_small_patch16_224", .description = "DeiT-S", .arch.stages[0].dim = 384,
     .arch.stages[0].heads = 6},
    {VIT_BASE, .name = "deit_base_patch16_224", .description = "DeiT-B", .arch.stages[0].dim = 768,
     .arch.stages[0].heads = 12},
    {VIT_BASE, FMNIST, .name = "vit_fmnist_tiny", .arch.stages[0].dim = 64, .arch.stages[0].depth = 4,
     .description = "ViT for 28x28 Fashion-MNIST: patch 4, D 64, depth 4, 4 heads, MLP 2x"},
    {VIT_BASE, FMNIST, .name = "vit_fmnist_small", .arch.stages[0].dim = 128, .arch.stages[0].depth = 6,
     .description = "ViT for 28x28 Fashion-MNIST: patch 4, D 128, depth 6, 4 heads"},
    /* The demo's model and the PyTorch anchor's of bench/demo_vs_torch.py (540k params). */
    {VIT_BASE, FMNIST, .name = "vit_fmnist_p7", .arch.patch = 7, .arch.stages[0].dim = 128,
     .arch.stages[0].depth = 4, .description = "ViT for 28x28 Fashion-MNIST: patch 7 (16 tokens), D 128, depth 4"},
    /* No class token (GAP), width a multiple of 10 with 8 heads, so `--attn gma` fits (GMA needs a token grid). */
    {VIT_BASE, FMNIST, .name = "vit_fmnist_tiny_gap", .arch.stages[0].dim = 80, .arch.stages[0].depth = 4,
     .arch.stages[0].heads = 8, .arch.class_token = 0,
     .description = "ViT for 28x28 Fashion-MNIST, no class token (GAP): patch 4, D 80, depth 4, 8 heads; --attn gma"},
    /* FLatten (Han et al. 2023) in DeiT-Ti. UNOFFICIAL: the FLatten repo has no DeiT model (spec-flatten §6); this
     * follows the spec's recommendation: PVT-style module (attn.q + attn.kv), a positional encoding over all 197
     * tokens in every block, and the class token skipping the DWC. */
    {VIT_BASE, .name = "flatten_deit_tiny", .arch.stages[0].attn = "flatten",
     .description = "DeiT-Ti + FLatten attention (p 3, DWC 5x5), Han et al. 2023; unofficial DeiT transplant (spec s6)"},
    /* hMHSA + cFFN (Xu et al. 2023, the paper's "†" rows; spec-hmhsa-cffn §3-4) in every block, t = 2/3, r = 2.
     * Deployed form by default: deit_tiny 4,680,040 params / 1.02 GMACs; deit_small 17,901,808 / 3.71. */
    {VIT_BASE, .name = "deit_tiny_hmhsa_cffn", .arch.stages[0].attn = "hmhsa", .arch.ffn = "cffn",
     .arch.opts.double_heads = 1,
     .description = "DeiT-Ti + hMHSA (3->6 heads) + cFFN (t 2/3), Xu et al. 2023; deployed form (--train-form: r=2 BN "
                    "branches)"},
    {VIT_BASE, .name = "deit_small_hmhsa_cffn", .arch.stages[0].attn = "hmhsa", .arch.ffn = "cffn",
     .arch.stages[0].dim = 384, .arch.stages[0].heads = 6,
     .description = "DeiT-S + hMHSA (6 heads, no doubling) + cFFN (t 2/3), Xu et al. 2023; deployed form"},
};

const vt_family vt_family_vit = {
    .name = "vit", .build = build, .deploy = vt_family_cffn_deploy, .no_decay = no_decay, .check = check,
    .caps = VT_CAP_DROP_PATH | VT_CAP_TUPLE_SIZE, .models = models, .nmodels = VT_COUNT(models),
};
