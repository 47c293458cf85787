/* GroupMixFormer (Ge et al., "Advancing Vision Transformers with Group-Mix Attention"), as the official
 * AILab-CVC code builds it (shared/specs/spec-groupmixformer.md §2–§3, §8): conv stem (2 × conv3×3/2 + BN +
 * Hardswish), per stage a separable patch embed (stride 1, then 2) + BN + Hardswish and GMA blocks, then
 * norm4 (BatchNorm2d) → global average pool → head. State_dict names are the official ones. */
#include <stdio.h>
#include <string.h>

#include "family.h"

#define BN_EPS 1e-5f /* every nn.BatchNorm2d of the stem, patch embeds and norm4: PyTorch's defaults */
#define BN_MOM 0.1f

/* The official patch embeds take a stage grid as H//2 where their stride-2 convs give ceil(H/2), and its blocks
 * assert N = H·W: it runs only where stage 1's grid ceil(ceil(S/2)/2) is a multiple of 8 (spec §2), so does vitc. */
#define SIZE_RULE                                                                                                 \
    "GroupMixFormer runs where the stage-1 grid ceil(ceil(S/2)/2) is a positive multiple of 8 for each side S, "  \
    "the official code's rule (e.g. 221-224 and 253-256; not 200 or 220)"
static int size_ok(int s) {
    const int grid = ((s + 1) / 2 + 1) / 2;
    return s > 0 && grid > 0 && grid % 8 == 0;
}

/* Stem, patch embeds and stages; returns the last stage's tokens (B, N_3, C_3); with maps != NULL also the four
 * stage maps (B, C_i, H_i, W_i) (the official return_interm_layers=True outputs). */
static vt_tensor *backbone(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor **maps) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_stage_cfg *st = c->arch.stages;
    const int B = x->shape[0], Hi = x->shape[2], Wi = x->shape[3];
    if (!size_ok(Hi) || !size_ok(Wi))
        return vt_fail(g, c->name, "input %d×%d: %s", Hi, Wi, SIZE_RULE);
    for (int i = 0; i < 4; i++) {
        if (st[i].dim < 10 || st[i].dim % 10)
            return vt_fail(g, c->name, "stage %d: width %d must be a positive multiple of 10", i + 1, st[i].dim);
        if (st[i].depth < 0 || st[i].mlp_ratio <= 0.0f)
            return vt_fail(g, c->name, "stage %d: depth %d must be >= 0 and MLP ratio %g > 0", i + 1, st[i].depth,
                           (double)st[i].mlp_ratio);
    }
    char pre[VT_NAMELEN], nm[VT_NAMELEN];
    const int C0 = st[0].dim;

    vt_scope(g, "conv_stem");
    vt_tensor *m = vt_conv2d_p(g, "conv_stem.proj1", x, C0 / 2, 3, 2, 1, 1, 1);
    m = vt_batchnorm_act_p(g, "conv_stem.norm1", m, 1, BN_EPS, BN_MOM, VT_HARDSWISH);
    m = vt_conv2d_p(g, "conv_stem.proj2", m, C0, 3, 2, 1, 1, 1);
    m = vt_batchnorm_act_p(g, "conv_stem.norm2", m, 1, BN_EPS, BN_MOM, VT_HARDSWISH); /* (B, C0, H/4, W/4) */

    vt_tensor *t = NULL;
    int C = C0, H = 0, W = 0, blk = 0;
    const int nblk = vt_model_depth(c);
    for (int i = 0; i < 4 && m; i++) {
        snprintf(pre, sizeof pre, "patch_embed_layers.%d", i);
        vt_scope(g, pre);
        C = st[i].dim;
        m = vt_block_separable(g, vt_pname(nm, pre, "proj"), m, C, 3, i ? 2 : 1);
        m = vt_batchnorm_act_p(g, vt_pname(nm, pre, "norm"), m, 1, BN_EPS, BN_MOM, VT_HARDSWISH);
        if (!m) break;
        H = m->shape[2];
        W = m->shape[3];
        const int s3[3] = {B, C, H * W}, ptok[3] = {0, 2, 1};
        t = vt_permute(g, vt_reshape(g, m, 3, s3), ptok); /* tokens (B, N, C), index y·W + x */
        const int hidden = (int)((float)C * st[i].mlp_ratio);
        for (int j = 0; j < st[i].depth; j++) {
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

static int features(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[VT_MAX_STAGES]) {
    return vt_four_stage_maps(g, backbone(g, c, x, maps), maps);
}

static vt_tensor *build(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    vt_tensor *t = backbone(g, c, x, NULL);
    /* norm4 (BatchNorm2d on the last map) → mean over H, W → head; BN done channels-last on the tokens. */
    vt_scope(g, "head");
    t = vt_batchnorm_p(g, "norm4", t, 2, BN_EPS, BN_MOM);
    t = vt_mean(g, t, 1);
    return vt_linear_p(g, "head", t, c->arch.num_classes, 1, VT_INIT_W02);
}

static int check(const vt_model_cfg *c, vt_err *e) {
    const vt_arch_cfg *a = &c->arch;
    for (int i = 0; i < a->nstages; i++)
        if (strcmp(a->stages[i].attn, "gma") != 0 || strcmp(a->ffn, "mlp") != 0)
            return vt_seterr(e, "%s: GroupMixFormer has fixed blocks (attention gma, FFN mlp); asked "
                                  "for attention %s with FFN %s (--attn, --ffn)", c->name, a->stages[i].attn, a->ffn);
    char size[24];
    if (!size_ok(a->img_size) || !size_ok(vt_arch_width(a)))
        return vt_seterr(e, "%s: image size %s: %s", c->name, vt_arch_size_text(a, size, sizeof size), SIZE_RULE);
    return 0;
}


/* GroupMixFormer-M (repo yaml "miny"): the base of the family; 8 heads everywhere, LN eps 1e-6, 224 px. */
#define GMF_BASE                                                                                                  \
    .family = &vt_family_groupmixformer,                                                                          \
    .arch = {.img_size = 224, .in_chans = 3, .num_classes = 1000, .patch = 4, .nstages = 4, .ffn = "mlp",         \
             .qkv_bias = 1, .ln_eps = 1e-6f,                                                                      \
             .stages = {{.dim = 40, .depth = 3, .heads = 8, .mlp_ratio = 4.0f, .attn = "gma"},                    \
                        {.dim = 80, .depth = 3, .heads = 8, .mlp_ratio = 4.0f, .attn = "gma"},                    \
                        {.dim = 160, .depth = 12, .heads = 8, .mlp_ratio = 4.0f, .attn = "gma"},                  \
                        {.dim = 160, .depth = 4, .heads = 8, .mlp_ratio = 4.0f, .attn = "gma"}}},                 \
    .pre = VT_PRE_IMAGENET
/* Stage widths, depths and MLP ratios of the other sizes. */
#define GMF_STAGES(d0, d1, d2, d3, l0, l1, l2, l3, r0, r1, r2, r3)                                                 \
    .arch.stages[0].dim = d0, .arch.stages[1].dim = d1, .arch.stages[2].dim = d2, .arch.stages[3].dim = d3,       \
    .arch.stages[0].depth = l0, .arch.stages[1].depth = l1, .arch.stages[2].depth = l2,                          \
    .arch.stages[3].depth = l3, .arch.stages[0].mlp_ratio = r0, .arch.stages[1].mlp_ratio = r1,                   \
    .arch.stages[2].mlp_ratio = r2, .arch.stages[3].mlp_ratio = r3

static const vt_model_cfg models[] = {
    {GMF_BASE, .arch.drop_path = 0.1f, .name = "groupmixformer_m", .alias = "groupmixformer_miny",
     .description = "GroupMixFormer-M (repo yaml miny), official names"},
    {GMF_BASE, GMF_STAGES(80, 160, 200, 240, 4, 4, 12, 4, 4, 4, 4, 4), .arch.drop_path = 0.1f,
     .name = "groupmixformer_t", .alias = "groupmixformer_tiny", .description = "GroupMixFormer-T (repo yaml tiny)"},
    {GMF_BASE, GMF_STAGES(80, 160, 320, 320, 2, 4, 12, 4, 4, 4, 4, 4), .arch.drop_path = 0.2f,
     .name = "groupmixformer_s", .alias = "groupmixformer_small", .description = "GroupMixFormer-S (repo yaml small)"},
    {GMF_BASE, GMF_STAGES(200, 240, 320, 480, 8, 8, 12, 8, 2, 2, 4, 4), .arch.drop_path = 0.5f,
     .name = "groupmixformer_b", .alias = "groupmixformer_base", .description = "GroupMixFormer-B (repo yaml base)"},
    {GMF_BASE, GMF_STAGES(240, 320, 360, 480, 8, 10, 18, 16, 4, 4, 2, 2), .arch.drop_path = 0.1f,
     .name = "groupmixformer_l", .alias = "groupmixformer_large",
     .description = "GroupMixFormer-L (paper Table 1; the repo yaml is a placeholder)"},
    {GMF_BASE, GMF_STAGES(20, 30, 40, 50, 1, 2, 1, 1, 2.0f, 3.0f, 2.0f, 1.5f), .name = "groupmixformer_test",
     .arch.img_size = 64, .arch.num_classes = 10,
     .description = "GroupMixFormer for tests: widths 20/30/40/50, depths 1/2/1/1, 64 px, 10 classes"},
};

const vt_family vt_family_groupmixformer = {
    .name = "groupmixformer", .build = build, .features = features, .check = check, .caps = VT_CAP_DROP_PATH | VT_CAP_ANY_SIZE,
    .models = models, .nmodels = VT_COUNT(models),
};
