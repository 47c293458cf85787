/* Next-ViT (Li et al. 2022, "Next-ViT: Next Generation Vision Transformer for Efficient Deployment in Realistic
 * Industrial Scenarios"), as bytedance/Next-ViT classification/nextvit.py builds it (shared/specs/spec-nextvit.md),
 * and Next-ViT-S with hMHSA + cFFN (Xu et al. 2023; spec-hmhsa-cffn.md §3, spec-nextvit.md §8):
 *   stem: 4 ConvBNReLU (3x3, padding 1, no bias): 3->64 s2, 64->32, 32->64, 64->64 s2 (NCHW convs in the training
 *     form, channels-last ones in the deployed form; then tokens);
 *   features.{i}: the official stage_out_channels / stage_block_types for the depths: stage 1 NCB(96)×d0; stage 2
 *     NCB(192)×(d1−1) + NTB(256); stage 3 (NCB(384)×4 + NTB(512))×(d2/5); stage 4 NCB(768)×(d3−1) + NTB(1024);
 *     stride 2 in block 0 of stages 2-4; NTB spatial reduction 4, 2, 1 (src/blocks/nextvit.c);
 *   head: `norm` (BatchNorm) -> mean over tokens -> proj_head.0.
 * Drop-path: block i of n gets p_i = drop_path·i/(n−1) (the official linspace). Everything after the stem runs on
 * channels-last tokens (B, H·W, C). Forms: training (arch.train_form: every BatchNorm applied; cFFN's branches) and
 * deployed (the official merge_bn: norm / norm1 / norm2 / e_mhsa.norm folded into the next q, k, v, mlp.conv1 and
 * kept unapplied; cFFN merged). Both keep one key set (for plain Next-ViT), so weight files record their form. The
 * deployed form is an inference form: its graph also folds the stem's, PatchEmbeds' and MHCAs' BNs into their convs
 * (running statistics, as TensorRT fuses conv + BN) and applies the head's BN after the mean. */
#include <stdio.h>
#include <string.h>

#include "family.h"

#define NV_EPS 1e-5f
#define NV_MOMENTUM 0.1f

static const int stem_chs[3] = {64, 32, 64}, stage_dims[4] = {96, 256, 512, 1024}, stage_heads[4] = {3, 6, 12, 24};

/* Output width of block j of stage i; *ntb set when it is an NTB (the official stage tables). */
static int block_out(const vt_arch_cfg *a, int i, int j, int *ntb) {
    const int last = j == a->stages[i].depth - 1;
    static const int ncb[4] = {96, 192, 384, 768};
    *ntb = i == 2 ? j % 5 == 4 : i > 0 && last;
    return *ntb ? stage_dims[i] : ncb[i];
}

/* ceil(n / 2): a stride-2 3x3 conv with padding 1, and the ceil-mode 2x2 pool. */
static int half(int n) { return (n + 1) / 2; }

/* The reason an H x W input does not fit c (into msg), or 0 if it does: every NTB with spatial reduction sr needs
 * at least sr² tokens (the official AvgPool1d fails on fewer). */
static int size_problem(const vt_model_cfg *c, int H, int W, char *msg, size_t n) {
    const vt_arch_cfg *a = &c->arch;
    int h = half(half(H)), w = half(half(W));
    for (int i = 0; i < 4; i++) {
        if (i) h = half(h), w = half(w);
        const int sr = a->stages[i].sr_ratio;
        if (i > 0 && sr > 1 && h * w < sr * sr) { /* stages 2-4 end in an NTB (stage 1 has none) */
            snprintf(msg, n, "input %dx%d gives stage %d a %dx%d map, fewer tokens (%d) than its E-MHSA's AvgPool1d "
                     "window sr² = %d (the official code fails: output size is too small)", H, W, i + 1, h, w, h * w,
                     sr * sr);
            return 1;
        }
    }
    return 0;
}

/* The form's block context shared by every block (the per-block fields are set by the caller). */
static vt_nextvit_ctx block_ctx(const vt_model_cfg *c, int i) {
    vt_nextvit_ctx b = {.attn_type = c->arch.stages[i].attn, .ffn_type = c->arch.ffn,
                        .attn = vt_stage_attn_ctx(c, i, 1, 1, 0), .ffn = vt_stage_ffn_ctx(c, i),
                        .folded = !c->arch.train_form};
    b.attn.sr_ratio = c->arch.stages[i].sr_ratio;
    b.attn.conv_fanout = VT_CONV_INIT_W02;
    b.ffn.conv_fanout = VT_CONV_INIT_W02;
    return b;
}

/* Whether the training-form stem runs channels-last (vt_conv2d_nhwc, then BatchNorm over the last axis) rather than
 * NCHW: where oneDNN's AVX-512 tier gives the channels-last conv its weight-gradient primitive (vt_gemm_conv_wgrad).
 * Training steps, both stems' graphs in one process (bench/vendor_rules.c with a temporary switch, AMD EPYC Zen 4,
 * 2026-12-04): Next-ViT-S at batch 16 0.978 of the NCHW stem's time (median of 5, logits identical, gradients
 * within 1.4e-4), its hMHSA + cFFN variant 0.985, batch 1 0.999 (9 rounds); on an Intel Xeon Ice Lake
 * (2026-11-28) 1.05x at batch 16. With AVX2 kernels it was 0.89-0.94x, its weight gradient going through a 462 MB
 * patch matrix instead of image by image: NCHW there, and wherever OpenBLAS is forced. */
static int stem_nhwc(const vt_graph *g) {
    return g->gemm.force != VT_GEMM_OPENBLAS && g->gemm.onednn >= VT_ISA_AVX512;
}

/* ConvBNReLU stem.{i} on x, channels-last (B, H, W, C) when nhwc, else NCHW. Training form (folded 0): the BN
 * applied. Deployed form (folded, nhwc): the BN folded into the conv: oneDNN's convolution then runs without the
 * blocked-layout reorders of each NCHW conv (Next-ViT-S's forward at batch 16 1.05x on an Intel Ice Lake, 4 of 4
 * alternated rounds; batch 1, and both batches with the libraries held to AVX2, 0.99-1.01x; 2026-11-28). */
static vt_tensor *conv_bn_relu(vt_graph *g, int i, vt_tensor *x, int out, int stride, int nhwc, int folded) {
    if (vt_bad(g, 1, x)) return NULL;
    char pre[VT_NAMELEN], nm[VT_NAMELEN];
    snprintf(pre, sizeof pre, "stem.%d", i);
    const int ws[4] = {out, x->shape[nhwc ? 3 : 1], 3, 3};
    vt_tensor *w = vt_param(g, vt_pname(nm, pre, "conv.weight"), 4, ws, VT_INIT_W02);
    if (w) w->paper_count = 1;
    if (folded) {
        vt_tensor *b;
        w = vt_bn_fold_weight(g, vt_pname(nm, pre, "norm"), w, NV_EPS, &b);
        return vt_conv2d_nhwc_relu(g, x, w, b, stride, 1, 1);
    }
    vt_tensor *y = nhwc ? vt_conv2d_nhwc(g, x, w, NULL, stride, 1, 1) : vt_conv2d(g, x, w, NULL, stride, 1, 1);
    return vt_batchnorm_act_p(g, vt_pname(nm, pre, "norm"), y, nhwc ? 3 : 1, NV_EPS, NV_MOMENTUM, VT_RELU);
}

/* Stem and blocks; returns the last tokens (B, H·W, 1024); with maps != NULL also the four stage outputs
 * (B, C_i, H_i, W_i). */
static vt_tensor *backbone(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor **maps) {
    if (vt_bad(g, 1, x)) return NULL;
    const vt_arch_cfg *a = &c->arch;
    char msg[400], pre[VT_NAMELEN];
    if (x->ndim != 4 || x->shape[1] != a->in_chans)
        return vt_fail(g, c->name, "input must be (B, %d, H, W)", a->in_chans);
    if (size_problem(c, x->shape[2], x->shape[3], msg, sizeof msg)) return vt_fail(g, c->name, "%s", msg);
    const int B = x->shape[0], nblk = vt_model_depth(c), to_tok[4] = {0, 2, 3, 1};
    vt_scope(g, "stem");
    const int fo = !a->train_form, cl = fo || stem_nhwc(g); /* folded; channels-last */
    vt_tensor *t = conv_bn_relu(g, 0, cl ? vt_permute(g, x, to_tok) : x, stem_chs[0], 2, cl, fo);
    t = conv_bn_relu(g, 1, t, stem_chs[1], 1, cl, fo);
    t = conv_bn_relu(g, 2, t, stem_chs[2], 1, cl, fo);
    t = conv_bn_relu(g, 3, t, stem_chs[2], 2, cl, fo);
    if (!t) return NULL;
    int H = t->shape[cl ? 1 : 2], W = t->shape[cl ? 2 : 3];
    const int tok[3] = {B, H * W, stem_chs[2]};
    t = vt_reshape(g, cl ? t : vt_permute(g, t, to_tok), 3, tok);
    for (int i = 0, blk = 0; i < 4; i++) {
        vt_nextvit_ctx b = block_ctx(c, i);
        for (int j = 0; j < a->stages[i].depth; j++, blk++) {
            snprintf(pre, sizeof pre, "features.%d", blk);
            vt_scope(g, pre);
            int ntb;
            const int out = block_out(a, i, j, &ntb), stride = i > 0 && j == 0 ? 2 : 1;
            b.drop = vt_model_drop_path(c, blk, nblk);
            t = ntb ? vt_block_ntb(g, pre, t, &H, &W, out, stride, &b) : vt_block_ncb(g, pre, t, &H, &W, out, stride, &b);
        }
        if (maps && t) {
            const int map[4] = {B, H, W, t->shape[2]}, to_nchw[4] = {0, 3, 1, 2};
            maps[i] = vt_permute(g, vt_reshape(g, t, 4, map), to_nchw);
        }
    }
    return t;
}

static int features(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[VT_MAX_STAGES]) {
    return vt_four_stage_maps(g, backbone(g, c, x, maps), maps);
}

static vt_tensor *build(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    vt_tensor *t = backbone(g, c, x, NULL);
    vt_scope(g, "head");
    if (c->arch.train_form) /* BN -> global average pool */
        t = vt_mean(g, vt_batchnorm_p(g, "norm", t, 2, NV_EPS, NV_MOMENTUM), 1);
    else /* the eval BN is a per-channel affine map: it commutes with the mean, on B·C values instead of B·N·C */
        t = vt_batchnorm_p(g, "norm", vt_mean(g, t, 1), 1, NV_EPS, NV_MOMENTUM);
    return vt_linear_p(g, "proj_head.0", t, c->arch.num_classes, 1, VT_INIT_W02);
}

/* Stage i's blocks as the official tables make them: NCBs (MLP ratio 3) and NTBs (attention, MLP ratio 2). */
static int stage_blocks(const vt_model_cfg *c, int i, char *buf, size_t n) {
    const vt_stage_cfg *s = &c->arch.stages[i];
    int nt = 0, ntb, ncb_dim = 0;
    for (int j = 0; j < s->depth; j++) {
        const int out = block_out(&c->arch, i, j, &ntb);
        nt += ntb;
        if (!ntb) ncb_dim = out;
    }
    const int nc = s->depth - nt;
    char ncb[64] = "", ntbs[128] = "";
    if (nc && nt) snprintf(ncb, sizeof ncb, "%d NCB (dim %d, MLP 3x) + ", nc, ncb_dim);
    if (nc && !nt) snprintf(ncb, sizeof ncb, "%d NCB (MLP 3x), no attention", nc);
    const int dbl = c->arch.opts.double_heads && strcmp(s->attn, "hmhsa") == 0;
    if (nt)
        snprintf(ntbs, sizeof ntbs, "%d NTB (heads %d%s, MLP 2x, attention %s)", nt, s->heads,
                 dbl ? " doubled to run: --double-heads" : "", s->attn);
    snprintf(buf, n, "%s%s", ncb, ntbs);
    return nt;
}

static int check(const vt_model_cfg *c, vt_err *e) {
    const vt_arch_cfg *a = &c->arch;
    char msg[400];
    if (a->nstages != 4) return vt_seterr(e, "%s: a Next-ViT config needs 4 stages", c->name);
    for (int i = 0; i < 4; i++) /* the types first: one with its own head count (GMA) has set the stage's heads */
        if (strcmp(a->stages[i].attn, "mhsa") != 0 && strcmp(a->stages[i].attn, "hmhsa") != 0)
            return vt_seterr(e, "%s: the NTB attention is mhsa (E-MHSA) or hmhsa, not %s", c->name,
                                  a->stages[i].attn);
    for (int i = 0; i < 4; i++) {
        const vt_stage_cfg *s = &a->stages[i];
        if (s->dim != stage_dims[i] || s->heads != stage_heads[i])
            return vt_seterr(e, "%s: stage %d has width %d and %d heads: Next-ViT's widths (96, 256, "
                                  "512, 1024) and heads (3, 6, 12, 24: its NTBs' attention width / 32) are fixed by the "
                                  "official code; only --depths changes", c->name, i + 1, s->dim, s->heads);
        if (s->depth < 1 || (i == 2 && s->depth % 5))
            return vt_seterr(e, "%s: depth %d of stage %d: the official stage tables need depths >= 1 and a multiple "
                             "of 5 in stage 3 (NCB×4 + NTB groups)", c->name, s->depth, i + 1);
    }
    /* stage 1 has NCBs only (stage_blocks): a type of its own, given per stage, would change nothing */
    if (strcmp(a->stages[0].attn, a->stages[1].attn) != 0)
        return vt_seterr(e, "%s: stage 1 has no attention (NCB blocks only), so its --attn entry '%s' "
                              "can have no effect: give one type for every stage, or stage 1 the same as stage 2 (%s)",
                              c->name, a->stages[0].attn, a->stages[1].attn);
    if (strcmp(a->ffn, "mlp") != 0 && strcmp(a->ffn, "cffn") != 0)
        return vt_seterr(e, "%s: the Next-ViT MLP is mlp or cffn, not %s", c->name, a->ffn);
    const int S = a->img_size;
    char size[24];
    if (size_problem(c, S, vt_arch_width(a), msg, sizeof msg)) {
        int min = 0;
        char m2[400];
        for (int s = 1; s <= 4096 && !min; s++)
            if (!size_problem(c, s, s, m2, sizeof m2)) min = s;
        return vt_seterr(e, "%s: image size %s: %s; the smallest size it accepts is %d", c->name,
                         vt_arch_size_text(a, size, sizeof size), msg, min);
    }
    return 0;
}

/* Training form -> deployed form: cFFN's branches merged (and every other tensor copied), then the official
 * merge_bn folds each block's pre-norms into the following layer. */
static int deploy(const vt_model_cfg *c, const vt_params *train, vt_params *dep, vt_err *e) {
    if (vt_cffn_deploy(train, dep, NV_EPS, e)) return -1;
    char f[VT_NAMELEN], t[2 * VT_NAMELEN], n1[2 * VT_NAMELEN], n2[2 * VT_NAMELEN];
    const vt_arch_cfg *a = &c->arch;
    for (int i = 0, blk = 0; i < 4; i++)
        for (int j = 0; j < a->stages[i].depth; j++, blk++) {
            int ntb;
            block_out(a, i, j, &ntb);
            snprintf(f, sizeof f, "features.%d", blk);
            snprintf(t, sizeof t, "%s.mlp.conv1", f);
            snprintf(n1, sizeof n1, "%s.%s", f, ntb ? "norm2" : "norm");
            if (vt_merge_pre_bn(dep, t, n1, NULL, e)) return -1;
            if (!ntb) continue;
            const int sr = a->stages[i].sr_ratio;
            snprintf(n1, sizeof n1, "%s.norm1", f);
            snprintf(n2, sizeof n2, "%s.e_mhsa.norm", f);
            static const char *const qkv[3] = {"q", "k", "v"};
            for (int k = 0; k < 3; k++) {
                snprintf(t, sizeof t, "%s.e_mhsa.%s", f, qkv[k]);
                if (vt_merge_pre_bn(dep, t, n1, k && sr > 1 ? n2 : NULL, e)) return -1;
            }
        }
    return 0;
}

/* nextvit_small (official nextvit_small): depths 3/4/10/3, stochastic depth 0.1; eval transform as the official
 * datasets.py (resize to 256/224 of the size, bicubic, centre crop: crop 0.875; timm's later cfg says 0.95). */
#define NV_BASE                                                                                                   \
    .family = &vt_family_nextvit,                                                                                 \
    .arch = {.img_size = 224, .in_chans = 3, .num_classes = 1000, .patch = 4, .nstages = 4, .ffn = "mlp",         \
             .qkv_bias = 1, .ln_eps = 1e-5f, .drop_path = 0.1f,                                                   \
             .stages = {{.dim = 96, .depth = 3, .heads = 3, .mlp_ratio = 3.0f, .sr_ratio = 8, .attn = "mhsa"},    \
                        {.dim = 256, .depth = 4, .heads = 6, .mlp_ratio = 3.0f, .sr_ratio = 4, .attn = "mhsa"},   \
                        {.dim = 512, .depth = 10, .heads = 12, .mlp_ratio = 3.0f, .sr_ratio = 2, .attn = "mhsa"}, \
                        {.dim = 1024, .depth = 3, .heads = 24, .mlp_ratio = 3.0f, .sr_ratio = 1, .attn = "mhsa"}},\
             .opts = {.cffn_t = 2.0f / 3.0f, .cffn_r = 2}},                                                       \
    .pre = VT_PRE_IMAGENET

static const vt_model_cfg models[] = {
    {NV_BASE, .name = "nextvit_small", .description = "Next-ViT-S (Li et al. 2022), official names; merge_bn deployed "
                                                      "form (--train-form: every BatchNorm applied)"},
    {NV_BASE, .name = "nextvit_base", .arch.stages[2].depth = 20, .arch.drop_path = 0.2f, .description = "Next-ViT-B"},
    {NV_BASE, .name = "nextvit_large", .arch.stages[2].depth = 30, .arch.drop_path = 0.2f,
     .description = "Next-ViT-L"},
    /* hMHSA in the 4 NTBs (heads doubled, d 16; the reduced keys row-major on the most square grid, 7x7 at 224),
     * cFFN (t 2/3) in all 20 MLPs. Deployed form 27,252,844 params. */
    {NV_BASE, .name = "nextvit_small_hmhsa_cffn", .arch.stages[0].attn = "hmhsa", .arch.stages[1].attn = "hmhsa",
     .arch.stages[2].attn = "hmhsa", .arch.stages[3].attn = "hmhsa", .arch.ffn = "cffn", .arch.opts.double_heads = 1,
     .description = "Next-ViT-S + hMHSA (heads doubled) + cFFN (t 2/3), Xu et al. 2023; deployed form (--train-form: "
                    "BatchNorms applied, r=2 BN branches)"},
};

const vt_family vt_family_nextvit = {
    .name = "nextvit", .build = build, .features = features, .deploy = deploy, .check = check,
    .stage_blocks = stage_blocks,
    .caps = VT_CAP_DROP_PATH | VT_CAP_ANY_SIZE | VT_CAP_FORM_RECORD, .models = models, .nmodels = VT_COUNT(models),
};
