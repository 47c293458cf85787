/* Swin Transformer (Liu et al. 2021) in two state_dict layouts (two families sharing one builder), and the papers'
 * variants built on them:
 *   Microsoft layout (vt_family_swin; microsoft/Swin-Transformer = timm's swin_*_patch4_window*): patch_embed.
 *     {proj, norm}, layers.{i}.blocks.{j}.{attn_mask (fixed buffer, shifted blocks), norm1, attn.{relative_position_
 *     bias_table, relative_position_index (fixed int64 (w², w²))}, qkv, proj}, norm2, mlp.fc1/fc2}, layers.{i}.
 *     downsample.{norm, reduction}, norm, head. The input must be the built size; a stage whose resolution is at most
 *     its window takes one window of the whole map without a shift, otherwise the resolution must be a multiple of
 *     the window; maps must be even before every patch merging. FLatten-Swin (spec-flatten §2) is this layout with
 *     FLatten attention in the stages typed "flatten" (windowed like the softmax stages; the shift mask is ignored,
 *     the attn_mask buffer still exists, positional_encoding rows = the resolved window²).
 *   torchvision layout (vt_family_swin_tv, VT_CAP_ANY_SIZE; torchvision.models.swin_t/swin_s): features.0.{0 conv,
 *     2 norm}, features.{2i+1}.{j}.{norm1, attn.{qkv, proj, relative_position_bias_table, relative_position_index
 *     (flattened (w⁴,))}, norm2, mlp.{0, 3}}, features.{2i+2}.{norm, reduction}, norm, head; no attn_mask buffer (the
 *     mask is an op). Any input size: each block pads its normalised map with zeros to window multiples (padded tokens
 *     are not masked), a shift is zeroed per axis when the window covers the padded size, patch merging pads odd
 *     sizes.
 *     Swin-MSF (spec-msf §5) is this layout with MSF attention (qkvp) in every stage.
 * Block: x += drop_path(reverse(attn(partition(roll(norm1(x)))))); x += drop_path(mlp(norm2(x))). Windows are batch
 * entries of one fused attention; the relative position bias is shared by the windows and the shift mask is indexed
 * by window. A stage that is one unshifted window skips partition and reverse. */
#include <stdio.h>
#include <string.h>

#include "family.h"
#include "vitc/dataset.h"

/* 1 for the torchvision layout. */
static int is_tv(const vt_model_cfg *c) { return c->family == &vt_family_swin_tv; }

/* How a block cuts its h×w map: window `win`, shifts (sh, sw), padded size hp × wp. */
typedef struct {
    int win, sh, sw, hp, wp;
} win_plan;

/* The official rules for block j (odd blocks shift by win/2) of a stage with window `window` on an h×w map. */
static win_plan plan_block(int tv, int h, int w, int window, int j) {
    win_plan p = {.win = window, .hp = h, .wp = w};
    const int s = j % 2 ? window / 2 : 0;
    if (tv) { /* torchvision: pad to window multiples, zero a shift on an axis the window covers */
        p.hp = (h + window - 1) / window * window;
        p.wp = (w + window - 1) / window * window;
        p.sh = window >= p.hp ? 0 : s;
        p.sw = window >= p.wp ? 0 : s;
    } else if ((h < w ? h : w) <= window) { /* Microsoft: a window covering the map shrinks to it, no shift */
        p.win = h < w ? h : w;
    } else {
        p.sh = p.sw = s;
    }
    return p;
}

static int is_flatten(const char *attn) { return strcmp(attn, "flatten") == 0; }

/* One Swin block on t (B, h·w, C) at prefix pre, block j of stage i; returns the new tokens. */
static vt_tensor *block(vt_graph *g, const vt_model_cfg *c, const char *pre, vt_tensor *t, int h, int w, int i, int j,
                        float drop) {
    if (vt_bad(g, 1, t)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    const vt_stage_cfg *st = &a->stages[i];
    const int tv = is_tv(c), B = t->shape[0], C = t->shape[2];
    const win_plan p = plan_block(tv, h, w, st->window, j);
    const int shifted = p.sh > 0 || p.sw > 0, softmax = !is_flatten(st->attn);
    const int whole = !shifted && p.win == h && p.win == w; /* one window, the map itself */
    char nm[VT_NAMELEN];
    vt_tensor *mask = NULL;
    if (shifted && !tv) { /* Microsoft keeps the mask as a buffer of every shifted block (FLatten's too, unused) */
        const int N = p.win * p.win, ms[3] = {(h / p.win) * (w / p.win), N, N};
        const char *mname = vt_pname(nm, pre, "attn_mask");
        float *vals = NULL;
        if (!vt_params_find(g->P, mname) && !g->P->shapes_only) {
            vals = vt_alloc(sizeof(float) * (size_t)ms[0] * (size_t)N * (size_t)N, &g->err);
            if (!vals) return NULL;
            if (vt_window_shift_mask_fill(vals, h, w, p.win, p.win, p.sh, p.sw)) {
                vt_free(vals);
                return vt_fail(g, "swin", "%s: a %dx%d map is not whole %dx%d windows (shift %d)", pre, h, w, p.win,
                               p.win, p.sh);
            }
        }
        mask = vt_buffer_fixed(g, mname, 3, ms, vals);
        vt_free(vals);
    } else if (shifted && softmax) {
        mask = vt_window_shift_mask(g, p.hp, p.wp, p.win, p.win, p.sh, p.sw);
    }
    vt_tensor *x = vt_layernorm_p(g, vt_pname(nm, pre, "norm1"), t, a->ln_eps);
    const int map[4] = {B, h, w, C}, tok[3] = {B, h * w, C};
    if (!whole) x = vt_window_partition(g, vt_reshape(g, x, 4, map), p.win, p.win, p.sh, p.sw);
    vt_attn_ctx ac = vt_stage_attn_ctx(c, i, whole ? h : p.win, whole ? w : p.win, 0);
    ac.layout = VT_LAYOUT_TIMM;
    if (!whole) { /* the windows' place in the map, for exported attention maps */
        ac.win_h = h;
        ac.win_w = w;
        ac.win_sh = p.sh;
        ac.win_sw = p.sw;
    }
    if (softmax) {
        ac.rel_pos = p.win;
        ac.rel_pos_flat = tv;
        ac.mask = mask;
    }
    vt_tensor *o = vt_attn_build(g, st->attn, vt_pname(nm, pre, "attn"), x, &ac);
    /* at inference the residual add runs in the windows' reverse gather (no drop path there): the reverse and add
     * nodes of Swin-T's eval graph took 11.1-11.5 instead of 19.9-23.8 ms per step at batch 16, FLatten-Swin-T's
     * 3.6 instead of 5.9-6.1 (Intel Xeon Ice Lake, 2026-11-29, node times of 10 forwards, two runs each) */
    if (!whole && !g->training) {
        t = vt_reshape(g, vt_window_reverse_add(g, o, t, h, w, p.win, p.win, p.sh, p.sw), 3, tok);
    } else {
        if (!whole) o = vt_reshape(g, vt_window_reverse(g, o, h, w, p.win, p.win, p.sh, p.sw), 3, tok);
        t = vt_block_residual(g, t, o, drop);
    }
    x = vt_layernorm_p(g, vt_pname(nm, pre, "norm2"), t, a->ln_eps);
    vt_ffn_ctx fc = vt_stage_ffn_ctx(c, i);
    fc.tv_names = tv;
    return vt_block_residual(g, t, vt_ffn_build(g, a->ffn, vt_pname(nm, pre, "mlp"), x, &fc), drop);
}

/* Patch merging at prefix pre: t (B, h·w, C) -> LayerNorm(4C) -> Linear(4C -> out, no bias); *h, *w halved (rounded
 * up: odd sizes are zero-padded, which only the torchvision layout allows). */
static vt_tensor *merge(vt_graph *g, const vt_model_cfg *c, const char *pre, vt_tensor *t, int *h, int *w, int out) {
    if (vt_bad(g, 1, t)) return NULL;
    char nm[VT_NAMELEN];
    const int map[4] = {t->shape[0], *h, *w, t->shape[2]};
    vt_tensor *m = vt_patch_merge(g, vt_reshape(g, t, 4, map)); /* (B, ⌈h/2⌉·⌈w/2⌉, 4C) */
    *h = (*h + 1) / 2;
    *w = (*w + 1) / 2;
    m = vt_layernorm_p(g, vt_pname(nm, pre, "norm"), m, c->arch.ln_eps);
    return vt_linear_p(g, vt_pname(nm, pre, "reduction"), m, out, 0, VT_INIT_W02);
}

/* Patch embedding and the stages; returns the last stage's tokens (B, h·w, C) and sets *h, *w; with maps != NULL
 * also each stage's output as a (B, C, h, w) map (after its blocks, before its patch merging). */
static vt_tensor *backbone(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, int *ho, int *wo, vt_tensor **maps) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    const int tv = is_tv(c), B = x->shape[0], P = a->patch;
    char pre[VT_NAMELEN];
    if (x->ndim != 4 || x->shape[2] < P || x->shape[3] < P)
        return vt_fail(g, c->name, "input must be (B, C, H, W) with H, W >= the patch size %d", P);
    int h = x->shape[2] / P, w = x->shape[3] / P;
    const int D0 = a->stages[0].dim, s3[3] = {B, D0, h * w}, ptok[3] = {0, 2, 1};
    vt_scope(g, tv ? "features.0" : "patch_embed");
    vt_tensor *t = vt_conv2d_p(g, tv ? "features.0.0" : "patch_embed.proj", x, D0, P, P, 0, 1, 1);
    t = vt_permute(g, vt_reshape(g, t, 3, s3), ptok); /* (B, h·w, D0), token y·w + x */
    t = vt_layernorm_p(g, tv ? "features.0.2" : "patch_embed.norm", t, a->ln_eps);
    const int nblk = vt_model_depth(c);
    for (int i = 0, blk = 0; i < a->nstages; i++) {
        g->map_px = P << i; /* a stage-i token's pixels a side: the unpadded patch embed (torchvision's) covers the
                             * top-left grid·P pixels, the merges pad to even grids */
        for (int j = 0; j < a->stages[i].depth; j++, blk++) {
            if (tv)
                snprintf(pre, sizeof pre, "features.%d.%d", 2 * i + 1, j);
            else
                snprintf(pre, sizeof pre, "layers.%d.blocks.%d", i, j);
            vt_scope(g, pre);
            t = block(g, c, pre, t, h, w, i, j, vt_model_drop_path(c, blk, nblk));
        }
        if (maps && t) {
            const int s4[4] = {B, a->stages[i].dim, h, w};
            maps[i] = vt_reshape(g, vt_permute(g, t, ptok), 4, s4);
        }
        if (i + 1 < a->nstages) {
            if (tv)
                snprintf(pre, sizeof pre, "features.%d", 2 * i + 2);
            else
                snprintf(pre, sizeof pre, "layers.%d.downsample", i);
            vt_scope(g, pre);
            if (!tv && (h % 2 || w % 2))
                return vt_fail(g, c->name, "stage %d map %dx%d is odd: Microsoft-layout patch merging needs even "
                               "sizes", i + 1, h, w);
            t = merge(g, c, pre, t, &h, &w, a->stages[i + 1].dim);
        }
    }
    *ho = h;
    *wo = w;
    return t;
}

static vt_tensor *build(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    int h, w;
    vt_tensor *t = backbone(g, c, x, &h, &w, NULL);
    vt_scope(g, "head");
    t = vt_layernorm_p(g, "norm", t, c->arch.ln_eps);
    return vt_linear_p(g, "head", vt_mean(g, t, 1), c->arch.num_classes, 1, VT_INIT_W02);
}

static int features(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[VT_MAX_STAGES]) {
    int h, w;
    backbone(g, c, x, &h, &w, maps);
    return g->err.msg[0] ? -1 : c->arch.nstages;
}

#define SWIN_MAX_WINDOW 64

/* vt_family.window_run: the Microsoft layout shrinks a window covering the map's shorter side to it; torchvision pads
 * the map. */
static int window_run(const vt_model_cfg *c, int i) {
    const vt_arch_cfg *a = &c->arch;
    int rh = a->patch > 0 ? a->img_size / a->patch : 0, rw = a->patch > 0 ? vt_arch_width(a) / a->patch : 0;
    for (int k = 0; k < i; k++) rh = (rh + 1) / 2, rw = (rw + 1) / 2; /* patch merging (torchvision pads odd maps) */
    const int res = rh < rw ? rh : rw;
    return !is_tv(c) && res > 0 && res < a->stages[i].window ? res : a->stages[i].window;
}

/* The official sizes: stage resolutions from the image size (Microsoft, H x W too: a stage whose shorter side is at
 * most its window runs windows of that side, which must divide the longer one, others windows dividing both sides;
 * maps even before each merge; torchvision: any size of at least one patch), windows run of at most
 * SWIN_MAX_WINDOW where a relative position index has window^4 entries (not FLatten's), widths divisible by the
 * heads (and MSF groups), attention types the layout defines. */
static int check(const vt_model_cfg *c, vt_err *e) {
    const vt_arch_cfg *a = &c->arch;
    const int tv = is_tv(c);
    if (a->nstages < 1 || a->nstages > VT_MAX_STAGES || a->patch < 1 || a->class_token)
        return vt_seterr(e, "%s: a Swin host has 1-%d stages, a patch size and no class token", c->name,
                         VT_MAX_STAGES);
    if (strcmp(a->ffn, "mlp") != 0)
        return vt_seterr(e, "%s: Swin blocks have the MLP FFN (got --ffn %s)", c->name, a->ffn);
    char size[24];
    if (a->img_size < a->patch || vt_arch_width(a) < a->patch)
        return vt_seterr(e, "%s: image size %s is smaller than one %dx%d patch", c->name,
                         vt_arch_size_text(a, size, sizeof size), a->patch, a->patch);
    int rh = a->img_size / a->patch, rw = vt_arch_width(a) / a->patch;
    vt_arch_size_text(a, size, sizeof size);
    for (int i = 0; i < a->nstages; i++) {
        const vt_stage_cfg *s = &a->stages[i];
        vt_msf_cfg m;
        const int msf = vt_msf_parse(s->attn, &m) == 0;
        if (!msf && strcmp(s->attn, "mhsa") != 0 && !(is_flatten(s->attn) && !tv))
            return vt_seterr(e, "%s: stage %d attention '%s' is not defined in Swin's %s layout (%s)",
                                  c->name, i + 1, s->attn, tv ? "torchvision" : "Microsoft",
                                  tv ? "mhsa, msf, msf_g<N>, orig, orig_g<N>"
                                     : "mhsa, flatten, msf, msf_g<N>, orig, ...");
        if (s->dim < 1 || s->heads < 1 || s->dim % s->heads || (msf && s->dim % m.groups))
            return vt_seterr(e, "%s: stage %d width %d must be a positive multiple of its %d heads%s", c->name, i + 1,
                             s->dim, s->heads, msf && m.groups > 1 ? " and of the MSF groups" : "");
        if (s->mlp_ratio <= 0.0f || s->window < 1 || s->depth < 1)
            return vt_seterr(e, "%s: stage %d needs window %d >= 1, depth %d >= 1 and MLP ratio %g > 0", c->name,
                             i + 1, s->window, s->depth, (double)s->mlp_ratio);
        const int runs = window_run(c, i); /* w tokens a side: a w^4-entry relative position index */
        if (runs > SWIN_MAX_WINDOW && !is_flatten(s->attn))
            return vt_seterr(e, "%s: stage %d window %d is more than vitc builds (%d; the official "
                                  "models use 7 and 12): its relative position index would hold %.3g entries",
                                  c->name, i + 1, runs, SWIN_MAX_WINDOW, (double)runs * runs * runs * runs);
        if (!tv && (rh % runs || rw % runs))
            return vt_seterr(e, "%s: image size %s gives stage %d a %dx%d map, neither within nor a multiple of its "
                             "window %d%s (the Microsoft layout partitions maps exactly; torchvision-layout models "
                             "pad)",
                             c->name, size, i + 1, rh, rw, s->window,
                             runs < s->window ? " (shrunk to the shorter side, which must divide the longer)" : "");
        if (i + 1 < a->nstages) {
            if (!tv && (rh % 2 || rw % 2))
                return vt_seterr(e, "%s: image size %s gives stage %d an odd %dx%d map (Microsoft-layout patch "
                                 "merging needs even sizes)", c->name, size, i + 1, rh, rw);
            rh = (rh + 1) / 2;
            rw = (rw + 1) / 2;
        }
    }
    return 0;
}

/* The official rule (Swin's set_weight_decay, torchvision's transformer_embedding_decay): timm's default plus every
 * relative position bias table. FLatten's scale and positional_encoding (3-D) are decayed, as in its recipe. */
static int no_decay(const vt_tensor *t) {
    return vt_no_decay_default(t, NULL) || strstr(t->name, "relative_position_bias_table") != NULL;
}

/* Swin-T (microsoft swin_tiny_patch4_window7_224, timm's pretrained cfg): the base of the family. */
#define SWIN_BASE                                                                                                 \
    .family = &vt_family_swin,                                                                                    \
    .arch = {.img_size = 224, .in_chans = 3, .num_classes = 1000, .patch = 4, .nstages = 4, .ffn = "mlp",         \
             .qkv_bias = 1, .ln_eps = 1e-5f, .drop_path = 0.2f,                                                   \
             .stages = {{.dim = 96, .depth = 2, .heads = 3, .mlp_ratio = 4.0f, .window = 7, .attn = "mhsa"},      \
                        {.dim = 192, .depth = 2, .heads = 6, .mlp_ratio = 4.0f, .window = 7, .attn = "mhsa"},     \
                        {.dim = 384, .depth = 6, .heads = 12, .mlp_ratio = 4.0f, .window = 7, .attn = "mhsa"},    \
                        {.dim = 768, .depth = 2, .heads = 24, .mlp_ratio = 4.0f, .window = 7, .attn = "mhsa"}},   \
             .opts = {.focusing = 3.0f, .kernel = 5}},                                                            \
    .pre = {.mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD, .crop_pct = 0.9f, .interpolation = "bicubic",        \
            .dataset = "imagenet-1k"}
/* Swin-S/B depths and widths. */
#define SMALL .arch.stages[2].depth = 18
#define BASE128                                                                                                   \
    SMALL, .arch.stages[0].dim = 128, .arch.stages[1].dim = 256, .arch.stages[2].dim = 512,                       \
           .arch.stages[3].dim = 1024, .arch.stages[0].heads = 4, .arch.stages[1].heads = 8,                      \
           .arch.stages[2].heads = 16, .arch.stages[3].heads = 32
#define WINDOW(w)                                                                                                 \
    .arch.stages[0].window = w, .arch.stages[1].window = w, .arch.stages[2].window = w, .arch.stages[3].window = w
/* FLatten-Swin (cfgs/flatten_swin_*.yaml): ATTN_TYPE LLSS, WINDOW_SIZE lw for the L stages, 7 (lw <= 56) or 12
 * for the S stages; FLatten's eval transform (data/build.py: Resize((256, 256)), the aspect not kept, then a centre
 * crop of 224 with TEST.CROP; Resize((384, 384)) alone at 384). */
#define FLATTEN(lw, sw, crop)                                                                                     \
    WINDOW(sw), .arch.stages[0].window = lw, .arch.stages[1].window = lw, .arch.stages[0].attn = "flatten",        \
                .arch.stages[1].attn = "flatten", .pre.crop_pct = crop, .pre.squash = 1
/* torchvision layout; crop = torchvision's crop 224 / resize (232: swin_t, 246: swin_s) rounded so that
 * floor(224 / crop_pct) is the resize. */
#define TV(crop) .family = &vt_family_swin_tv, .pre.crop_pct = crop
#define ATTN(t) .arch.stages[0].attn = t, .arch.stages[1].attn = t, .arch.stages[2].attn = t, .arch.stages[3].attn = t

static const vt_model_cfg models[] = {
    {SWIN_BASE, .name = "swin_tiny_patch4_window7_224",
     .description = "Swin-T (Liu et al. 2021), microsoft/timm names, window 7"},
    {SWIN_BASE, SMALL, .arch.drop_path = 0.3f, .name = "swin_small_patch4_window7_224",
     .description = "Swin-S, microsoft/timm names, window 7"},
    {SWIN_BASE, BASE128, .arch.drop_path = 0.5f, .name = "swin_base_patch4_window7_224",
     .description = "Swin-B, microsoft/timm names, window 7"},
    {SWIN_BASE, BASE128, WINDOW(12), .arch.img_size = 384, .arch.drop_path = 0.5f, .pre.crop_pct = 1.0f,
     .name = "swin_base_patch4_window12_384", .description = "Swin-B at 384 px, window 12, microsoft/timm names"},
    {SWIN_BASE, FLATTEN(56, 7, 0.875f), .name = "flatten_swin_tiny",
     .description = "FLatten-Swin-T (Han et al. 2023): FLatten stages 1-2 (global), Swin windows 7 in 3-4"},
    {SWIN_BASE, SMALL, FLATTEN(56, 7, 0.875f), .arch.drop_path = 0.3f, .name = "flatten_swin_small",
     .description = "FLatten-Swin-S: FLatten stages 1-2 (global), Swin windows 7 in 3-4"},
    {SWIN_BASE, BASE128, FLATTEN(56, 7, 0.875f), .arch.drop_path = 0.5f, .name = "flatten_swin_base",
     .description = "FLatten-Swin-B: FLatten stages 1-2 (global), Swin windows 7 in 3-4"},
    {SWIN_BASE, BASE128, FLATTEN(96, 12, 1.0f), .arch.img_size = 384, .arch.drop_path = 0.5f,
     .name = "flatten_swin_base_384", .description = "FLatten-Swin-B at 384 px: FLatten stages 1-2, windows 12"},
    /* A 2-stage Swin for 28×28 Fashion-MNIST (patch 2: 14×14 then 7×7 tokens, window 7: shifted windows in stage 1,
     * one window in stage 2), so the papers' blocks are compared in a hierarchical host too (make compare). */
    {SWIN_BASE, .name = "swin_fmnist_tiny", .arch.img_size = 28, .arch.in_chans = 1, .arch.num_classes = 10,
     .arch.patch = 2, .arch.nstages = 2, .arch.drop_path = 0.0f, .arch.stages[0].dim = 48, .arch.stages[1].dim = 96,
     .arch.stages[0].heads = 3, .arch.stages[1].heads = 6,
     .pre = {.mean = VT_FMNIST_MEAN3, .std = VT_FMNIST_STD3, .crop_pct = 1.0f, .interpolation = "bicubic",
             .dataset = "fashion-mnist"},
     .description = "2-stage Swin for 28x28 Fashion-MNIST: patch 2, dims 48/96, depths 2/2, window 7; FLatten global "
                    "over stage 1 (as FLatten-Swin): --attn flatten,mhsa --windows 14,7"},
};

static const vt_model_cfg tv_models[] = {
    {SWIN_BASE, TV(0.965f), .name = "swin_t", .description = "Swin-T, torchvision names (any input size, padding)"},
    {SWIN_BASE, SMALL, TV(0.91f), .arch.drop_path = 0.3f, .name = "swin_s",
     .description = "Swin-S, torchvision names (any input size, padding)"},
    {SWIN_BASE, TV(0.965f), ATTN("msf"), .name = "swin_t_msf",
     .description = "Swin-T + MSF attention (Kobayashi 2024, spec-msf s5: qkvp with bias), torchvision names"},
    {SWIN_BASE, TV(0.965f), ATTN("msf_g2"), .name = "swin_t_msf_g2",
     .description = "Swin-T + MSF, 2-group interleaved qkvp, torchvision names"},
    {SWIN_BASE, SMALL, TV(0.91f), ATTN("msf"), .arch.drop_path = 0.3f, .name = "swin_s_msf",
     .description = "Swin-S + MSF attention, torchvision names"},
    {SWIN_BASE, SMALL, TV(0.91f), ATTN("msf_g2"), .arch.drop_path = 0.3f, .name = "swin_s_msf_g2",
     .description = "Swin-S + MSF, 2-group interleaved qkvp, torchvision names"},
};

/* FLatten-Swin's BasicLayer: with WINDOW_SIZE lw (the named config's L stages' window), a stage typed L (flatten)
 * takes lw, an S one 7 (lw <= 56) or 12; the block then shrinks a window to its map (global). So a stage --attn turns
 * into another type takes that type's window, as attn_type does in the official config (paper Table 7: L in stages 1,
 * 1-2, 1-3, 1-4). Models without an L stage (plain Swin) keep their windows. */
static void retyped(vt_model_cfg *c, const vt_model_cfg *named) {
    int lw = 0;
    for (int i = 0; i < named->arch.nstages; i++)
        if (is_flatten(named->arch.stages[i].attn) && named->arch.stages[i].window > lw)
            lw = named->arch.stages[i].window;
    for (int i = 0; lw && i < c->arch.nstages; i++)
        if (strcmp(c->arch.stages[i].attn, named->arch.stages[i].attn) != 0)
            c->arch.stages[i].window = is_flatten(c->arch.stages[i].attn) ? lw : lw <= 56 ? 7 : 12;
}

const vt_family vt_family_swin = {
    .name = "swin", .build = build, .features = features, .no_decay = no_decay, .check = check, .retyped = retyped,
    .window_run = window_run, .caps = VT_CAP_DROP_PATH | VT_CAP_WINDOWS | VT_CAP_TUPLE_SIZE, .models = models,
    .nmodels = VT_COUNT(models),
};

const vt_family vt_family_swin_tv = {
    .name = "swin_tv", .build = build, .features = features, .no_decay = no_decay, .check = check,
    .window_run = window_run, .caps = VT_CAP_DROP_PATH | VT_CAP_ANY_SIZE | VT_CAP_WINDOWS, .models = tv_models, .nmodels = VT_COUNT(tv_models),
};
