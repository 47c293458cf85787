/* CSwin's block-level attention (Dong et al. 2022, microsoft/CSWin-Transformer models/cswin.py) and FLatten's CSwin
 * L block (Han et al. 2023, LeapLabTHU/FLatten-Transformer models/flatten_cswin.py; spec-flatten.md §1.2, §5), in the
 * host layout VT_LAYOUT_CSWIN: prefix.qkv (C -> 3C, packed as contiguous C-blocks q, k, v) and prefix.proj at block
 * level, one module per branch at prefix.attns.{i}.
 *
 * Softmax form (LePEAttention), stripe width s > 0 on an H x W grid: two branches, each over C/2 channels with h/2
 * heads of width d = C/h: branch 0 on vertical stripes (H rows x s columns), branch 1 on horizontal stripes (s rows x
 * W columns); per stripe window and head softmax((q·d^-½)·kᵀ)·v + LePE(v), LePE = attns.{i}.get_v, a depthwise
 * 3x3 with bias over the window's raw v, zero-padded at the stripe borders; the branch outputs are concatenated
 * (branch 0 first) -> proj. s = 0: one branch attns.0 over the whole grid, all C channels and h heads.
 * FLatten L form (linear = 1, s = 0 only): attns.0 = focused linear attention (vt_flatten_core: scale,
 * positional_encoding, dwc over d channels) + LePE over all C channels (get_v, declared by vt_flatten_core; at
 * inference its taps are summed into the DWC's inside the op: one conv of v), summed in that order, -> proj.
 *
 * On square grids both branches with their LePE are one op, vt_stripe_attention (src/ops/attention.c), which reads
 * and writes the grid in place. Elsewhere (and with export_maps or ref_kernels: the chain the op is checked against)
 * the op chain, with no per-branch copies of q, k, v: horizontal stripes are consecutive rows, so branch 1 reads the
 * packed qkv itself (a view (B·H/s, s·W, 3C)) and reaches its halves through vt_attention_ex's channel offsets;
 * branch 0 reads one stripe partition of its halves of q, k and v (vt_window_partition_sel), and its output goes
 * back to the grid with branch 1's channels appended in the same pass (vt_window_reverse_cat; against the reverse
 * and a concat, CSwin-T per-round medians 1.04 at batch 1 and 16, inference and training, 3-5 of 5 rounds won, AMD
 * EPYC Zen 4, 2026-12-04). The LePE convolutions read v in place. */
#include <math.h>
#include <stdio.h>

#include "vitc/blocks.h"

/* LePE's parameters, prefix.get_v: weight (c, 1, 3, 3) and bias (c), PyTorch's default init; 0 or -1. */
static int lepe_params(vt_graph *g, const char *prefix, int c, vt_tensor **w, vt_tensor **b) {
    char nm[VT_NAMELEN];
    const int ws[4] = {c, 1, 3, 3};
    const vt_init wi = vt_conv_init(9, 9, 0); /* depthwise: fan_in = 1·3·3 */
    *w = vt_param(g, vt_pname(nm, prefix, "get_v.weight"), 4, ws, wi);
    *b = vt_param(g, vt_pname(nm, prefix, "get_v.bias"), 1, &c, wi);
    if (!*w || !*b) return -1;
    (*w)->paper_count = 1;
    return 0;
}

/* o + LePE of one branch: depthwise 3x3 (prefix.get_v, c channels) over the windows of v, channels
 * [v_off, v_off + c) of t (nw, wh·ww, ·) read in place, zero padding at the window borders, added to o (nw, wh·ww, c)
 * in the conv -> (nw, wh·ww, c). */
static vt_tensor *add_lepe(vt_graph *g, const char *prefix, vt_tensor *o, vt_tensor *t, int v_off, int c, int wh,
                           int ww) {
    if (vt_bad(g, 2, o, t)) return NULL;
    const int nw = t->shape[0], m4[4] = {nw, wh, ww, t->shape[2]}, m3[3] = {nw, wh * ww, c};
    vt_tensor *w, *b;
    if (lepe_params(g, prefix, c, &w, &b)) return NULL;
    return vt_reshape(g, vt_dwconv_nhwc_ex(g, vt_reshape(g, t, 4, m4), v_off, w, b, 1, o), 3, m3);
}

/* One softmax branch on the windows of a packed qkv t (nw, wh·ww, Lt) cut from an mh × mw map (vt_window_partition
 * order; mh = wh and mw = ww: one window, the map): heads of the `dim` channels at q_off, q_off + C, q_off + 2C,
 * + LePE over its v channels (module prefix) -> (nw, wh·ww, dim). Exports its maps as prefix (export_maps). */
static vt_tensor *branch(vt_graph *g, const char *prefix, vt_tensor *t, int C, int q_off, int dim, int heads, int wh,
                         int ww, int mh, int mw) {
    vt_tensor *probs = NULL;
    const vt_attn_args args = {.heads = heads, .dim = dim, .q_off = q_off, .k_off = q_off + C, .v_off = q_off + 2 * C,
                               .scale = 1.0f / sqrtf((float)(dim / heads)), .probs = &probs};
    vt_tensor *o = vt_attention_ex(g, t, NULL, &args);
    const int stripes = mh != wh || mw != ww;
    const vt_attn_ctx geom = {.heads = heads, .grid_h = wh, .grid_w = ww, .win_h = stripes ? mh : 0,
                              .win_w = stripes ? mw : 0};
    const vt_attn_src keys = {.kh = wh, .kw = ww};
    vt_block_export_map(g, prefix, NULL, probs, &geom, &keys, 0, 1);
    return add_lepe(g, prefix, o, t, q_off + 2 * C, dim, wh, ww);
}

vt_tensor *vt_block_cswin_attn(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a, int linear) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN], sx[64];
    const char *what = linear ? "flatten" : "mhsa";
    const int H = a->grid_h, W = a->grid_w, s = a->stripe, h = a->heads;
    const int B = x->shape[0], C = x->shape[x->ndim - 1];
    if (a->layout != VT_LAYOUT_CSWIN)
        return vt_fail(g, what, "%s: CSwin attention needs the CSwin layout (block-level qkv and proj)", prefix);
    if (x->ndim != 3 || a->lead != 0 || H < 1 || W < 1 || x->shape[1] != H * W)
        return vt_fail(g, what, "%s: input %s must be (B, %d·%d, C) tokens of the grid, no leading (class) tokens",
                       prefix, vt_shape_str(x, sx, 64), H, W);
    if (a->sr_ratio > 1 || a->rel_pos || a->mask)
        return vt_fail(g, what, "%s: CSwin attention has no spatial reduction, relative position bias or shift mask",
                       prefix);
    if (h <= 0 || C % h)
        return vt_fail(g, what, "%s: width %d is not divisible by %d heads", prefix, C, h);
    if (s < 0 || (s > 0 && (H % s || W % s || h % 2 || C % 2 || (C / 2) % (h / 2))))
        return vt_fail(g, what, "%s: stripes of width %d on a %dx%d grid need a width dividing both sides, an even "
                       "head count and C/2 = %d divisible by h/2 (got %d heads)", prefix, s, H, W, C / 2, h);
    if (linear && s > 0)
        return vt_fail(g, what, "%s: FLatten's L attention in CSwin runs on one global branch (the official code fails "
                       "on L stripes); got stripe width %d on a %dx%d grid", prefix, s, H, W);

    vt_tensor *qkv = vt_linear_p(g, vt_pname(nm, prefix, "qkv"), x, 3 * C, a->qkv_bias, a->winit); /* (B, N, 3C) */
    char mod[VT_NAMELEN];
    vt_tensor *o;
    if (linear) {
        snprintf(mod, sizeof mod, "%s.attns.0", prefix);
        const vt_block_opts none = {0}, *op = a->opts ? a->opts : &none;
        const vt_flatten_cfg fc = {h, op->focusing, op->kernel, a->conv_fanout, 1};
        o = vt_flatten_core(g, mod, qkv, 0, qkv, C, qkv, 2 * C, C, H, W, &fc); /* linear attention + DWC + LePE */
    } else if (s == 0) {
        snprintf(mod, sizeof mod, "%s.attns.0", prefix);
        o = branch(g, mod, qkv, C, 0, C, h, H, W, H, W);
    } else if (H == W && !g->export_maps && !g->ref_kernels) { /* both branches and their LePE as one op */
        vt_tensor *lw[2], *lb[2];
        for (int i = 0; i < 2; i++) {
            snprintf(mod, sizeof mod, "%s.attns.%d", prefix, i);
            if (lepe_params(g, mod, C / 2, &lw[i], &lb[i])) return NULL;
        }
        o = vt_stripe_attention(g, qkv, H, s, h, 1.0f / sqrtf((float)(C / h)), vt_concat(g, lw, 2, 0),
                                vt_concat(g, lb, 2, 0));
    } else {
        const int hc = C / 2, m4[4] = {B, H, W, 3 * C}, hs[3] = {B * (H / s), s * W, 3 * C}, t3[3] = {B, H * W, C};
        /* branch 0: vertical stripes H x s, a partition of its halves of q, k and v: (B·W/s, H·s, 3·C/2) */
        snprintf(mod, sizeof mod, "%s.attns.0", prefix);
        vt_tensor *vw = vt_window_partition_sel(g, vt_reshape(g, qkv, 4, m4), H, s, 0, 0, 3, hc);
        vt_tensor *o0 = branch(g, mod, vw, hc, 0, hc, h / 2, H, s, H, W);
        /* branch 1: horizontal stripes s x W are consecutive rows: the qkv itself, viewed per stripe */
        snprintf(mod, sizeof mod, "%s.attns.1", prefix);
        vt_tensor *o1 = branch(g, mod, vt_reshape(g, qkv, 3, hs), C, hc, hc, h / 2, s, W, H, W);
        /* branch 0's stripes back to the grid with branch 1's channels after them, in one pass */
        o = vt_reshape(g, vt_window_reverse_cat(g, o0, o1, H, W, H, s, 0, 0), 3, t3);
    }
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), o, C, 1, a->winit);
}
