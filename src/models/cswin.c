/* CSwin Transformer (Dong et al., CVPR 2022; microsoft/CSWin-Transformer models/cswin.py) and FLatten-CSwin (Han et
 * al., ICCV 2023; LeapLabTHU/FLatten-Transformer models/flatten_cswin.py, spec-flatten.md §5), with the official
 * state_dict names:
 *   stage1_conv_embed.0  Conv2d(in, C1, 7, stride 4, pad 2) -> tokens (row-major) -> stage1_conv_embed.2 LayerNorm
 *   stage{s}.{j}         qkv, norm1, attns.{0[,1]}, proj, mlp.fc1/fc2, norm2:
 *                        x += proj(attn(norm1(x)));  x += mlp(norm2(x))   (drop-path on both, timm's linear rule)
 *   merge{1,2,3}         conv Conv2d(C_i, C_{i+1}, 3, stride 2, pad 1) on the grid -> tokens -> norm LayerNorm
 *   norm -> mean over tokens -> head                                     (LayerNorm eps 1e-5 everywhere)
 * The attention of stage i is the stage's type through the attention table in the CSwin layout (src/blocks/cswin.c):
 * "mhsa" = LePE stripe attention with stripe width stages[i].window (two branches, or one global branch when the
 * width is 0 or equals the stage resolution, and always in stage 4), "flatten" = FLatten's L block (one global
 * branch). Stage resolutions are img//4, img//8, img//16, img//32, as the official code hard-codes them. Tokens stay
 * channels-last: the stem and the merges are vt_conv_tokens (one oneDNN conv or patches + a linear, whose output is
 * the tokens), no permutes outside the --features maps. */
#include <stdio.h>
#include <string.h>

#include "family.h"

/* Stripe width of stage i at resolution R (the official rule): 0 (one global branch) in the last stage and where the
 * split equals the resolution. */
static int stripe_of(const vt_arch_cfg *a, int i, int R) {
    const int s = a->stages[i].window;
    return i == a->nstages - 1 || s == 0 || s == R ? 0 : s;
}

/* vt_family.window_run: the stripe width, or the stage's side where one global branch runs. */
static int window_run(const vt_model_cfg *c, int i) {
    const int R = c->arch.img_size / (4 << i), s = stripe_of(&c->arch, i, R);
    return s ? s : R;
}

/* (n + 2p − k) / s + 1: a convolution's output side. */
static int conv_out(int n, int k, int s, int p) { return n + 2 * p < k ? 0 : (n + 2 * p - k) / s + 1; }

/* Checks that the official network runs on img × img inputs with these stages (cswin_ref.sizes_ok): stage resolutions
 * img//4 … img//32 equal to the stem and merge outputs, stripes dividing their resolution, head counts that split in
 * two branches; 0 or -1 with the reason in e. */
static int check_sizes(const char *name, const vt_arch_cfg *a, int img, vt_err *e) {
    if (img < 32) return vt_seterr(e, "%s: image size %d is below 32 (the last stage runs at img/32)", name, img);
    int r = conv_out(img, 7, 4, 2);
    if (r != img / 4)
        return vt_seterr(e, "%s: image size %d: the stem gives a %dx%d grid, not img/4 = %d (the official code needs "
                         "img = 32k, 32k+1 or 32k+2)", name, img, r, r, img / 4);
    for (int i = 1; i < 4; i++) {
        r = conv_out(r, 3, 2, 1);
        if (r != img / (4 << i))
            return vt_seterr(e, "%s: image size %d: merge%d gives a %dx%d grid, not img/%d = %d (the official code "
                             "needs img = 32k, 32k+1 or 32k+2)", name, img, i, r, r, 4 << i, img / (4 << i));
    }
    for (int i = 0; i < 4; i++) {
        const vt_stage_cfg *st = &a->stages[i];
        const int R = img / (4 << i), s = stripe_of(a, i, R), C = st->dim, h = st->heads;
        const int linear = strcmp(st->attn, "flatten") == 0;
        if (!linear && strcmp(st->attn, "mhsa") != 0)
            return vt_seterr(e, "%s: stage %d attention '%s': CSwin stages take mhsa (LePE stripe "
                                  "attention) or flatten (FLatten L attention)", name, i + 1, st->attn);
        if (C < 1 || st->depth < 0 || h < 1 || C % h || st->mlp_ratio <= 0.0f)
            return vt_seterr(e, "%s: stage %d: width %d must be a positive multiple of the %d heads, depth %d >= 0, "
                             "MLP ratio %g > 0", name, i + 1, C, h, st->depth, (double)st->mlp_ratio);
        if (s < 0) return vt_seterr(e, "%s: stage %d: stripe width %d < 0", name, i + 1, s);
        if (linear && s)
            return vt_seterr(e, "%s: stage %d at %d px: FLatten L attention runs on one global branch (--windows: "
                             "the stage resolution %d), got window %d (the official code fails on L stripes)", name,
                             i + 1, img, R, s);
        if (s && R % s)
            return vt_seterr(e, "%s: stage %d at %d px: stripe width %d does not divide the stage resolution %d (set "
                             "--windows, or an image size whose stage grids it divides)", name, i + 1, img, s, R);
        if (s && (h % 2 || C % 2 || (C / 2) % (h / 2)))
            return vt_seterr(e, "%s: stage %d: two stripe branches need an even head count and C/2 divisible by h/2 "
                             "(C %d, %d heads)", name, i + 1, C, h);
    }
    return 0;
}

/* Tokens (B, N, C) of an R × R grid -> map (B, C, R, R). */
static vt_tensor *to_map(vt_graph *g, vt_tensor *t, int R) {
    if (vt_bad(g, 1, t)) return NULL;
    const int perm[3] = {0, 2, 1}, s4[4] = {t->shape[0], t->shape[2], R, R};
    return vt_reshape(g, vt_permute(g, t, perm), 4, s4);
}

/* Stem, stages and merges; returns the last stage's tokens (B, N_4, C_4) and, with maps, the four stage maps. */
static vt_tensor *backbone(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor **maps) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    const int img = x->shape[2], B = x->shape[0];
    if (x->shape[3] != img) return vt_fail(g, c->name, "input %dx%d must be square", img, x->shape[3]);
    if (check_sizes(c->name, a, img, &g->err)) return NULL;
    char pre[VT_NAMELEN], nm[VT_NAMELEN];
    const int nblk = vt_model_depth(c);
    int blk = 0;

    vt_scope(g, "stage1_conv_embed");
    const int C1 = a->stages[0].dim, R1 = conv_out(img, 7, 4, 2), t1[3] = {B, R1 * R1, C1};
    vt_tensor *w1 = vt_conv_weight(g, "stage1_conv_embed.0", C1, x->shape[1], 7, 1);
    vt_tensor *b1 = vt_conv_bias(g, "stage1_conv_embed.0", C1, x->shape[1], 7, 1);
    vt_tensor *t = vt_reshape(g, vt_conv_tokens(g, x, 0, w1, b1, 4, 2), 3, t1);
    t = vt_layernorm_p(g, "stage1_conv_embed.2", t, a->ln_eps);
    for (int i = 0; i < 4; i++) {
        const int R = img / (4 << i);
        if (i) {
            snprintf(pre, sizeof pre, "merge%d", i);
            vt_scope(g, pre);
            if (vt_bad(g, 1, t)) return NULL;
            /* stage i−1's tokens are its grid channels-last: the conv reads and writes tokens, no permutes */
            const int Rp = img / (2 << i), Ci = t->shape[2], Co = a->stages[i].dim;
            const int g4[4] = {B, Rp, Rp, Ci}, t3[3] = {B, R * R, Co};
            vt_tensor *w = vt_conv_weight(g, vt_pname(nm, pre, "conv"), Co, Ci, 3, 1);
            vt_tensor *b = vt_conv_bias(g, vt_pname(nm, pre, "conv"), Co, Ci, 3, 1);
            vt_tensor *m = vt_conv_tokens(g, vt_reshape(g, t, 4, g4), 1, w, b, 2, 1);
            t = vt_layernorm_p(g, vt_pname(nm, pre, "norm"), vt_reshape(g, m, 3, t3), a->ln_eps);
        }
        vt_attn_ctx actx = vt_stage_attn_ctx(c, i, R, R, 0);
        actx.layout = VT_LAYOUT_CSWIN;
        actx.stripe = stripe_of(a, i, R);
        const vt_ffn_ctx fctx = vt_stage_ffn_ctx(c, i);
        for (int j = 0; j < a->stages[i].depth; j++) {
            snprintf(pre, sizeof pre, "stage%d.%d", i + 1, j);
            vt_scope(g, pre);
            const float dp = vt_model_drop_path(c, blk++, nblk);
            vt_tensor *h = vt_layernorm_p(g, vt_pname(nm, pre, "norm1"), t, a->ln_eps);
            t = vt_block_residual(g, t, vt_attn_build(g, a->stages[i].attn, pre, h, &actx), dp);
            h = vt_layernorm_p(g, vt_pname(nm, pre, "norm2"), t, a->ln_eps);
            t = vt_block_residual(g, t, vt_ffn_build(g, a->ffn, vt_pname(nm, pre, "mlp"), h, &fctx), dp);
        }
        if (maps) maps[i] = to_map(g, t, R);
    }
    return t;
}

static int features(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[VT_MAX_STAGES]) {
    return vt_four_stage_maps(g, backbone(g, c, x, maps), maps);
}

static vt_tensor *build(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    vt_tensor *t = backbone(g, c, x, NULL);
    vt_scope(g, "head");
    t = vt_mean(g, vt_layernorm_p(g, "norm", t, c->arch.ln_eps), 1);
    return vt_linear_p(g, "head", t, c->arch.num_classes, 1, VT_INIT_W02);
}

static int check(const vt_model_cfg *c, vt_err *e) {
    const vt_arch_cfg *a = &c->arch;
    if (strcmp(a->ffn, "mlp") != 0)
        return vt_seterr(e, "%s: CSwin blocks have the official Mlp (--ffn mlp), got %s", c->name,
                              a->ffn);
    if (vt_arch_width(a) != a->img_size) /* the official blocks take H = W = sqrt(L) */
        return vt_seterr(e, "%s: input %dx%d: CSwin takes square inputs only (its official blocks read H = W = "
                         "sqrt(L) tokens)", c->name, a->img_size, vt_arch_width(a));
    return check_sizes(c->name, a, a->img_size, e);
}

/* CSwin-T (CSWin_64_12211_tiny_224): the base of the family; LayerNorm eps 1e-5, timm's cswin_224 eval cfg. The
 * stage windows are the official split sizes (the last stage's is unused: it is always one global branch). */
#define CSWIN_BASE                                                                                                \
    .family = &vt_family_cswin,                                                                                   \
    .arch = {.img_size = 224, .in_chans = 3, .num_classes = 1000, .patch = 4, .nstages = 4, .ffn = "mlp",         \
             .qkv_bias = 1, .ln_eps = 1e-5f, .drop_path = 0.2f, .opts = {.focusing = 3.0f, .kernel = 5},           \
             .stages = {{.dim = 64, .depth = 1, .heads = 2, .mlp_ratio = 4.0f, .window = 1, .attn = "mhsa"},       \
                        {.dim = 128, .depth = 2, .heads = 4, .mlp_ratio = 4.0f, .window = 2, .attn = "mhsa"},      \
                        {.dim = 256, .depth = 21, .heads = 8, .mlp_ratio = 4.0f, .window = 7, .attn = "mhsa"},     \
                        {.dim = 512, .depth = 1, .heads = 16, .mlp_ratio = 4.0f, .window = 7, .attn = "mhsa"}}},   \
    .pre = {.mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD, .crop_pct = 0.9f, .interpolation = "bicubic",         \
            .dataset = "imagenet-1k"}
#define CSWIN_DEPTHS(l0, l1, l2, l3)                                                                              \
    .arch.stages[0].depth = l0, .arch.stages[1].depth = l1, .arch.stages[2].depth = l2, .arch.stages[3].depth = l3
/* Width 96 (base): stage widths 96·2^i, heads 4, 8, 16, 32. */
#define CSWIN_B96                                                                                                 \
    .arch.stages[0].dim = 96, .arch.stages[1].dim = 192, .arch.stages[2].dim = 384, .arch.stages[3].dim = 768,    \
    .arch.stages[0].heads = 4, .arch.stages[1].heads = 8, .arch.stages[2].heads = 16, .arch.stages[3].heads = 32
/* 384 px: split sizes 12 in stages 3-4 and timm's cswin_384 eval cfg (crop_pct 1.0). */
#define CSWIN_384 .arch.img_size = 384, .arch.stages[2].window = 12, .arch.stages[3].window = 12, .pre.crop_pct = 1.0f
/* FLatten-CSwin: L (focused linear attention, one global branch) in stages 1-2, S (LePE stripes) in stages 3-4;
 * FLatten's eval transform (data/build.py with TEST.CROP, which no FLatten-CSwin config turns off: both sides to
 * int(256 / 224 · S), centre crop S; 438 and 384 at 384 px, where FLatten-Swin-B's config sets CROP False). */
#define FLATTEN_LLSS                                                                                              \
    .arch.stages[0].attn = "flatten", .arch.stages[1].attn = "flatten", .arch.stages[0].window = 0,               \
    .arch.stages[1].window = 0, .pre.crop_pct = 0.875f, .pre.squash = 1

static const vt_model_cfg models[] = {
    {CSWIN_BASE, .name = "cswin_tiny_224", .alias = "CSWin_64_12211_tiny_224",
     .description = "CSwin-T (Dong et al. 2022), official names; stripes 1, 2, 7, 7"},
    {CSWIN_BASE, CSWIN_DEPTHS(2, 4, 32, 2), .arch.drop_path = 0.4f, .name = "cswin_small_224",
     .alias = "CSWin_64_24322_small_224", .description = "CSwin-S, official names"},
    {CSWIN_BASE, CSWIN_B96, CSWIN_DEPTHS(2, 4, 32, 2), .arch.drop_path = 0.5f, .name = "cswin_base_224",
     .alias = "CSWin_96_24322_base_224", .description = "CSwin-B, official names"},
    {CSWIN_BASE, CSWIN_B96, CSWIN_DEPTHS(2, 4, 32, 2), CSWIN_384, .arch.drop_path = 0.7f, .name = "cswin_base_384",
     .alias = "CSWin_96_24322_base_384", .description = "CSwin-B at 384 px (stripes 1, 2, 12, 12), official names"},
    {CSWIN_BASE, FLATTEN_LLSS, CSWIN_DEPTHS(2, 4, 18, 1), .name = "flatten_cswin_tiny",
     .alias = "FLatten_CSWin_64_24181_tiny_224",
     .description = "FLatten-CSwin-T (Han et al. 2023): FLatten L stages 1-2, LePE stripes 7 in stage 3"},
    {CSWIN_BASE, FLATTEN_LLSS, CSWIN_DEPTHS(2, 4, 32, 2), .arch.drop_path = 0.4f, .name = "flatten_cswin_small",
     .alias = "FLatten_CSWin_64_24322_small_224", .description = "FLatten-CSwin-S"},
    {CSWIN_BASE, FLATTEN_LLSS, CSWIN_B96, CSWIN_DEPTHS(3, 6, 29, 2), .arch.drop_path = 0.5f,
     .name = "flatten_cswin_base", .alias = "FLatten_CSWin_96_36292_base_224", .description = "FLatten-CSwin-B"},
    {CSWIN_BASE, FLATTEN_LLSS, CSWIN_B96, CSWIN_DEPTHS(3, 6, 29, 2), CSWIN_384, .pre.crop_pct = 0.875f,
     .arch.drop_path = 0.7f, .name = "flatten_cswin_base_384", .alias = "FLatten_CSWin_96_36292_base_384",
     .description = "FLatten-CSwin-B at 384 px (stripes 12 in stage 3)"},
};

/* Parameter shapes independent of the image size (LePE is a convolution) unless a FLatten stage holds its
 * positional encoding of the stage's tokens. */
static int any_size(const vt_model_cfg *c) {
    for (int i = 0; i < c->arch.nstages; i++)
        if (strcmp(c->arch.stages[i].attn, "flatten") == 0) return 0;
    return 1;
}

/* FLatten-CSwin's stages: an L (flatten) stage takes CSWIN_LA_SPLIT_SIZE, the stage's resolution (vitc's window 0: one
 * global branch), an S one the host's split_size (1, 2, then the named config's stage-3 stripe: 7, or 12 at 384 px),
 * as flatten_cswin.py chooses per attn_type. So a stage --attn turns into another type takes that type's stripes.
 * Models without an L stage (plain CSwin) keep their stripes. */
static void retyped(vt_model_cfg *c, const vt_model_cfg *named) {
    int has_l = 0;
    for (int i = 0; i < named->arch.nstages; i++) has_l |= strcmp(named->arch.stages[i].attn, "flatten") == 0;
    const int late = named->arch.nstages > 2 ? named->arch.stages[2].window : 7; /* FLatten-CSwin's stage 3 is S */
    for (int i = 0; has_l && i < c->arch.nstages; i++)
        if (strcmp(c->arch.stages[i].attn, named->arch.stages[i].attn) != 0)
            c->arch.stages[i].window = strcmp(c->arch.stages[i].attn, "flatten") == 0 ? 0 : i == 0 ? 1 : i == 1 ? 2
                                                                                                           : late;
}

/* No .no_decay hook: timm's rule (1-D parameters: biases, norms) alone; the official no_weight_decay() names
 * (pos_embed, cls_token) do not exist in these networks, so nothing else is excluded (FLatten's scale and
 * positional_encoding are decayed, as the official training code does). */
const vt_family vt_family_cswin = {
    .name = "cswin", .build = build, .features = features, .check = check, .any_size = any_size, .retyped = retyped,
    .window_run = window_run, .caps = VT_CAP_DROP_PATH | VT_CAP_WINDOWS | VT_CAP_LAST_GLOBAL, .models = models, .nmodels = VT_COUNT(models),
};
