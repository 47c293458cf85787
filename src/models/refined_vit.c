/* Refined-ViT host (Zhou et al. 2021, official Refiner_ViT; spec-refiner.md §2-§4, §6, §8): conv stem
 * (patch_embed.conv1/bn1 7x7/2, conv2/bn2, conv3/bn3, proj 8x8/8), class token, pos_embed, blocks alternating plain
 * and shared Refiner attention (or refine-every-block with refiner.apply_transform), residual branches on 0.5·x
 * added ×2, MLP ratio 3 with mlp.scale_channel, final norm, head on the class token and the optional aux_head. */
#include <stdio.h>
#include <string.h>

#include "family.h"

#define BN_EPS 1e-5f
#define BN_MOM 0.1f

/* Conv + BN + ReLU of the stem; in inference graphs (without ref_kernels) the BN folded into the conv, the ReLU in
 * its output pass (Refined-ViT-S inference at batch 16: the separate BN passes were 1.3% of the time). */
static vt_tensor *stem_layer(vt_graph *g, const char *conv, const char *bn, vt_tensor *x, int out, int k, int s,
                             int p) {
    if (vt_bad(g, 1, x)) return NULL;
    if (!g->training && !g->ref_kernels) {
        vt_tensor *b, *w = vt_bn_fold_weight(g, bn, vt_conv_weight(g, conv, out, x->shape[1], k, 1), BN_EPS, &b);
        return vt_conv2d_relu(g, x, w, b, s, p, 1);
    }
    x = vt_conv2d_p(g, conv, x, out, k, s, p, 1, 0);
    return vt_batchnorm_act_p(g, bn, x, 1, BN_EPS, BN_MOM, VT_RELU);
}

/* Official Mlp: fc1 (hidden) → GELU → fc2 → × scale_channel (C,) (init 1e-5). */
static vt_tensor *mlp(vt_graph *g, const char *prefix, vt_tensor *x, int hidden) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    int C = x->shape[x->ndim - 1];
    vt_tensor *sc = vt_param(g, vt_pname(nm, prefix, "scale_channel"), 1, &C, (vt_init){VT_INIT_CONST, 1e-5f});
    vt_tensor *h = vt_block_mlp(g, prefix, x, hidden);
    return vt_mul(g, h, sc);
}

static vt_tensor *build(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    const vt_stage_cfg *st = &a->stages[0];
    const int apply_transform = a->opts.refiner_apply_transform, depth = st->depth;
    if (depth < 1 || (!apply_transform && depth % 2))
        return vt_fail(g, c->name, "depth %d must be even (plain/shared pairs)", depth);
    const int B = x->shape[0], D = st->dim;
    const float expand = a->opts.refiner_expand > 0 ? a->opts.refiner_expand : 3.0f;
    const float head_expand = a->opts.refiner_head_expand > 0 ? a->opts.refiner_head_expand : 3.0f;
    char nm[VT_NAMELEN], pre[VT_NAMELEN];

    vt_scope(g, "patch_embed");
    vt_tensor *t = stem_layer(g, "patch_embed.conv1", "patch_embed.bn1", x, 32, 7, 2, 3);
    t = stem_layer(g, "patch_embed.conv2", "patch_embed.bn2", t, 64, 3, 1, 1);
    t = stem_layer(g, "patch_embed.conv3", "patch_embed.bn3", t, 128, 3, 1, 1);
    int gh, gw;
    t = vt_conv2d_tokens_p(g, "patch_embed.proj", t, D, 8, 8, 0, &gh, &gw); /* (B, n, D), token index y·w + x */
    if (!t) return NULL;
    const int n = gh * gw;
    const vt_attn_ctx actx = vt_stage_attn_ctx(c, 0, gh, gw, 1);
    g->map_px = 16; /* the stem's stride: the proj's 8x8/8 leaves the last S mod 16 pixels out */
    int ts[3] = {1, 1, D}, ps[3] = {1, n + 1, D};
    vt_tensor *cls = vt_param(g, "cls_token", 3, ts, VT_INIT_W02);
    vt_tensor *pos = vt_param(g, "pos_embed", 3, ps, VT_INIT_W02);
    if (!cls || !pos) return NULL;
    /* The official blocks keep t and add 2·branch(norm(0.5·t)); vitc carries u = 0.5·t instead (u += branch(norm(u)),
     * the attention's add inside proj's GEMM) and doubles it once before the final norm. Halving and doubling are
     * exact in floating point, so every value and gradient is the official one bit for bit, without the two scale
     * passes per residual branch. */
    t = vt_scale(g, vt_add(g, vt_prepend_tokens(g, t, cls), pos), 0.5f);

    vt_tensor *amap = NULL; /* the attention map carried from block to block */
    vt_tensor *maps[VT_COS_REG_MAX + 1]; /* the first after each block: the official forward's atten_list */
    for (int i = 0; i < depth; i++) {
        snprintf(pre, sizeof pre, "blocks.%d", i);
        vt_scope(g, pre);
        vt_refiner_mode mode = apply_transform ? VT_REFINER_TRANSFORM
                               : (i % 2)                  ? VT_REFINER_SHARED
                                                          : VT_REFINER_PLAIN;
        vt_tensor *h = vt_layernorm_p(g, vt_pname(nm, pre, "norm1"), t, a->ln_eps);
        h = vt_block_refiner_attn(g, vt_pname(nm, pre, "attn"), h, &actx, mode,
                                  mode == VT_REFINER_TRANSFORM ? head_expand : expand, &amap);
        if (i <= VT_COS_REG_MAX) maps[i] = amap;
        const float dp = vt_model_drop_path(c, i, depth);
        t = vt_residual_drop(g, t, h, dp);
        h = vt_layernorm_p(g, vt_pname(nm, pre, "norm2"), t, a->ln_eps);
        t = vt_residual_drop(g, t, mlp(g, vt_pname(nm, pre, "mlp"), h, (int)(D * st->mlp_ratio)), dp);
    }

    /* cos_reg (spec-refiner §7, the official SoftTargetCrossEntropyCosReg): 0.1/n · Σ_{i<n} mean over (b, query,
     * key) of the cosine over heads of maps i and i + 1. A shared block passes its incoming map on, so a pair of one
     * map adds its constant cos 1 (no gradient): with no other pair, as 0 · sum(map) + the constant. */
    if (g->training && a->cos_reg > 0) {
        vt_scope(g, "loss");
        if (a->cos_reg >= depth)
            return vt_fail(g, "cos_reg", "the term over %d pairs of block maps needs %d blocks, the model has %d: "
                           "give --cos-reg %d or fewer (0: none)", a->cos_reg, a->cos_reg + 1, depth, depth - 1);
        vt_tensor *sum = NULL;
        int ones = 0;
        for (int i = 0; i < a->cos_reg; i++) {
            if (maps[i] == maps[i + 1]) {
                ones++;
                continue;
            }
            vt_tensor *cm = vt_cosine_mean(g, maps[i], maps[i + 1]);
            sum = sum ? vt_add(g, sum, cm) : cm;
        }
        const float w = 0.1f / (float)a->cos_reg;
        g->aux_loss = vt_affine(g, sum ? sum : vt_sum(g, maps[0]), sum ? w : 0.0f, w * (float)ones);
    }

    vt_scope(g, "head");
    t = vt_layernorm_p(g, "norm", vt_scale(g, t, 2.0f), a->ln_eps);
    int s2[2] = {B, D};
    vt_tensor *logits = vt_linear_p(g, "head", vt_reshape(g, vt_slice(g, t, 1, 0, 1), 2, s2), a->num_classes, 1,
                                    VT_INIT_W02);
    /* aux_head: eval output = cls logits + 0.5·max over the patch tokens of the dense logits. In train graphs the
     * official model returns (cls, dense, bbox) for a token-labelling loss, which vitc does not implement: `vitc
     * train` refuses these models, and train graphs (grad, bench) leave aux_head out (its gradient is 0). */
    if (a->aux_head && !g->training) {
        vt_tensor *dense = vt_linear_p(g, "aux_head", vt_slice(g, t, 1, 1, n), a->num_classes, 1, VT_INIT_W02);
        logits = vt_add(g, logits, vt_scale(g, vt_max(g, dense, 1), 0.5f));
    }
    return logits;
}

static int check(const vt_model_cfg *c, vt_err *e) {
    if (c->arch.cos_reg < 0 || c->arch.cos_reg > VT_COS_REG_MAX)
        return vt_seterr_code(e, VT_E_USAGE, "%s: cos_reg over %d pairs of block maps (0 .. %d)", c->name,
                              c->arch.cos_reg, VT_COS_REG_MAX);
    if (strcmp(c->arch.stages[0].attn, "refiner") != 0 || strcmp(c->arch.ffn, "mlp") != 0)
        return vt_seterr(e, "%s: Refined-ViT has fixed blocks (attention refiner, FFN mlp); asked for "
                              "attention %s with FFN %s (--attn, --ffn)", c->name, c->arch.stages[0].attn, c->arch.ffn);
    /* The official pos_embed holds (S//16)² tokens, the stem (7x7/2 pad 3, then 8x8/8) gives ⌊⌈S/2⌉/8⌋² of them:
     * equal, the last pixels cut, for every S >= 16 but 16k + 15 (spec-refiner §3), where the official code fails. */
    if (c->arch.img_size < 16 || c->arch.img_size % 16 == 15)
        return vt_seterr(e, "%s: image size %d: Refined-ViT runs at sizes of at least 16 but 16k + 15 (the official "
                         "code's rule: there its stem makes one token row more than pos_embed holds)", c->name,
                         c->arch.img_size);
    return 0;
}

static int no_decay(const vt_tensor *t) {
    static const char *const skip[] = {"cls_token", "pos_embed", NULL};
    return vt_no_decay_default(t, skip);
}

/* Refiner_ViT_S: conv stem, patch 16, 16 blocks [plain, shared]×8, D 384, 12 heads, MLP 3×, qkv bias, LN eps 1e-6,
 * DLA expansion 3 (6 in refine-every-block mode), mean = std = 0.5, crop_pct 0.9 (spec-refiner §8). */
#define REFINER_BASE                                                                                              \
    .family = &vt_family_refined_vit,                                                                             \
    .arch = {.img_size = 224, .in_chans = 3, .num_classes = 1000, .patch = 16, .nstages = 1,                      \
             .stages = {{.dim = 384, .depth = 16, .heads = 12, .mlp_ratio = 3.0f, .attn = "refiner"}},            \
             .ffn = "mlp", .qkv_bias = 1, .ln_eps = 1e-6f, .class_token = 1,                                      \
             .opts = {.refiner_expand = 3.0f, .refiner_head_expand = 6.0f}},                                      \
    .pre = {.mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}, .crop_pct = 0.9f, .interpolation = "bicubic",   \
            .dataset = "imagenet-1k"}
/* M and L: 32 blocks, expansion 3 in both modes; L pads its 198-pixel resize to 224 (crop_pct 1.13). The training
 * settings of the yaml files: drop-path; cos_reg over 2 pairs of maps where cos_reg_component > 0 (refiner_s.yaml,
 * refiner_m.yaml: the plain-label loss SoftTargetCrossEntropyCosReg() takes n_comn's default 2; refiner_l.yaml 0). */
#define REFINER_M .arch.stages[0].dim = 420, .arch.stages[0].depth = 32, .arch.opts.refiner_head_expand = 3.0f,     \
                  .pre.crop_pct = 1.0f
#define REFINER_L .arch.stages[0].dim = 512, .arch.stages[0].depth = 32, .arch.stages[0].heads = 16,              \
                  .arch.opts.refiner_head_expand = 3.0f, .pre.crop_pct = 1.13f

static const vt_model_cfg models[] = {
    {REFINER_BASE, .arch.drop_path = 0.1f, .arch.cos_reg = 2, .name = "refiner_vit_s", .alias = "refined_vit_s",
     .description = "Refined-ViT-S (Zhou et al. 2021): 16 blocks [plain, shared]x8, D 384, 12 heads, DLA x3, no "
                    "aux_head"},
    {REFINER_BASE, REFINER_M, .arch.drop_path = 0.2f, .arch.cos_reg = 2, .name = "refiner_vit_m",
     .alias = "refined_vit_m",
     .description = "Refined-ViT-M: 32 blocks [plain, shared]x16, D 420, 12 heads, no aux_head"},
    {REFINER_BASE, REFINER_L, .arch.drop_path = 0.25f, .name = "refiner_vit_l", .alias = "refined_vit_l",
     .description = "Refined-ViT-L: 32 blocks [plain, shared]x16, D 512, 16 heads, no aux_head"},
    {REFINER_BASE, .arch.drop_path = 0.2f, .name = "refiner_vit_s_dense", .alias = "Refiner_ViT_S", .arch.aux_head = 1,
     .description = "Refined-ViT-S with aux_head (eval: cls + 0.5 max-token dense logits)"},
    {REFINER_BASE, REFINER_M, .arch.drop_path = 0.25f,
     .name = "refiner_vit_m_dense", .alias = "Refiner_ViT_M", .arch.aux_head = 1,
     .description = "Refined-ViT-M with aux_head"},
    {REFINER_BASE, REFINER_L, .arch.drop_path = 0.25f,
     .name = "refiner_vit_l_dense", .alias = "Refiner_ViT_L", .arch.aux_head = 1,
     .description = "Refined-ViT-L with aux_head"},
};

const vt_family vt_family_refined_vit = {
    .name = "refined_vit", .build = build, .no_decay = no_decay, .check = check,
    .caps = VT_CAP_DROP_PATH | VT_CAP_APPLY_TRANSFORM | VT_CAP_COS_REG, .models = models, .nmodels = VT_COUNT(models),
};
