/* Softmax multi-head attention in the hosts' layouts, and the pieces every attention type shares: projections in
 * the host's layout (timm/Swin packed qkv, PVT q + kv with spatial reduction, Next-ViT q, k, v with AvgPool1d
 * reduction), PVT's spatial reduction, Swin's
 * relative position bias. The fused op vt_attention_ex computes logits, bias, mask, softmax and ·v per head. */
#include <math.h>
#include <stdio.h>

#include "vitc/blocks.h"

vt_init vt_conv_init(int fan_in, int fan_out, int rule) {
    if (rule == VT_CONV_INIT_W02) return VT_INIT_W02;
    return rule ? (vt_init){VT_INIT_NORMAL, sqrtf(2.0f / (float)fan_out)}
                : (vt_init){VT_INIT_UNIFORM, 1.0f / sqrtf((float)fan_in)};
}

/* PVT's spatial reduction of x (B, H·W, C): Conv(k = s = sr) prefix.sr on the H×W map (rows and columns past a
 * multiple of sr dropped, as a strided conv does) → LayerNorm prefix.norm (eps) → (B, ⌊H/sr⌋·⌊W/sr⌋, C). */
static vt_tensor *block_sr(vt_graph *g, const char *prefix, vt_tensor *x, int H, int W, int sr, float eps,
                       int conv_fanout) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN], sx[64];
    const int B = x->shape[0], C = x->shape[x->ndim - 1];
    if (x->ndim != 3 || x->shape[1] != H * W || sr < 2 || H < sr || W < sr)
        return vt_fail(g, "sr", "%s: input %s must be (B, %d·%d, C) with both sides at least sr = %d", prefix,
                       vt_shape_str(x, sx, 64), H, W, sr);
    const int map[4] = {B, H, W, C}, ws[4] = {C, C, sr, sr}, w2[2] = {C, C * sr * sr};
    vt_tensor *m = vt_reshape(g, x, 4, map);
    if (H % sr) m = vt_slice(g, m, 1, 0, H - H % sr); /* a stride-sr conv never reads the last H % sr rows */
    if (W % sr) m = vt_slice(g, m, 2, 0, W - W % sr);
    const int fan = C * sr * sr;
    vt_tensor *w = vt_param(g, vt_pname(nm, prefix, "sr.weight"), 4, ws, vt_conv_init(fan, fan, conv_fanout));
    vt_tensor *b = vt_param(g, vt_pname(nm, prefix, "sr.bias"), 1, &C,
                            conv_fanout ? VT_INIT_Z : vt_conv_init(fan, fan, 0));
    if (w) w->paper_count = 1;
    vt_tensor *t = vt_linear(g, vt_patchify_nhwc(g, m, sr), vt_reshape(g, w, 2, w2), b);
    return vt_layernorm_p(g, vt_pname(nm, prefix, "norm"), t, eps);
}

/* Next-ViT's spatial reduction of x (B, N, C): AvgPool1d(kernel = stride = r) over the raster token sequence (the
 * last N mod r tokens dropped, as the official floor) -> BatchNorm1d prefix.norm over (B, n) (folded: its tensors
 * kept but not applied, merge_bn) -> (B, n = ⌊N/r⌋, C). */
static vt_tensor *pool_tokens(vt_graph *g, const char *prefix, vt_tensor *x, int r, float eps, int folded) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN], sx[64];
    const int B = x->shape[0], N = x->shape[1], C = x->shape[2], n = N / r, win[4] = {B, n, r, C};
    if (n < 1)
        return vt_fail(g, "sr", "%s: input %s has fewer tokens than the AvgPool1d window %d (the official code fails: "
                       "output size is too small)", prefix, vt_shape_str(x, sx, 64), r);
    vt_tensor *t = N % r ? vt_slice(g, x, 1, 0, n * r) : x;
    t = vt_mean(g, vt_reshape(g, t, 4, win), 2);
    return vt_batchnorm_folded(g, vt_pname(nm, prefix, "norm"), t, 2, eps, 0.1f, folded);
}

/* Rows of the key grid of n reduced Next-ViT keys: the largest divisor of n not above √n (n row-major on a
 * rows × n/rows grid; 7x7 for 49 keys). */
static int key_rows(int n) {
    int r = 1;
    for (int d = 1; d * d <= n; d++)
        if (n % d == 0) r = d;
    return r;
}

int vt_attn_project(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a, int wq, int wk, int wv,
                    vt_attn_src *s) {
    if (vt_bad(g, 1, x)) return -1;
    char nm[VT_NAMELEN], sx[64];
    const int N = x->ndim == 3 ? x->shape[1] : 0;
    if (x->ndim != 3 || a->grid_h < 1 || a->grid_w < 1 || a->lead < 0 || a->lead + a->grid_h * a->grid_w != N) {
        vt_fail(g, "attention", "%s: input %s must be (B, N, C) with N = %d leading tokens + a %dx%d grid", prefix,
                vt_shape_str(x, sx, 64), a->lead, a->grid_h, a->grid_w);
        return -1;
    }
    if (a->sr_ratio > 46340) { /* Next-ViT pools sr_ratio² tokens: past this the square overflows an int */
        vt_fail(g, "attention", "%s: spatial reduction ratio %d (at most 46340)", prefix, a->sr_ratio);
        return -1;
    }
    if (a->sr_ratio > 1 && a->lead) { /* the reduced keys are a grid: no token outside it (PVT, Next-ViT) */
        vt_fail(g, "attention", "%s: spatial reduction with %d leading (class) tokens is not supported", prefix,
                a->lead);
        return -1;
    }
    *s = (vt_attn_src){.kh = a->grid_h, .kw = a->grid_w, .klead = a->lead};
    if (a->lead_queries && ((a->layout != VT_LAYOUT_TIMM && a->layout != VT_LAYOUT_PVT) || a->lead < 1 ||
                            a->rel_pos || a->mask || a->sr_ratio > 1)) {
        vt_fail(g, "attention", "%s: queries of the leading tokens alone need the timm or PVT layout, leading tokens "
                "and no bias, mask or reduction", prefix);
        return -1;
    }
    if (a->layout == VT_LAYOUT_TIMM) {
        if (a->sr_ratio > 1) {
            vt_fail(g, "attention", "%s: spatial reduction needs the PVT layout (q + kv)", prefix);
            return -1;
        }
        if (a->lead_queries) { /* prefix.qkv's query rows on the leading tokens, its key and value rows on all */
            vt_tensor *w, *b;
            if (vt_linear_params(g, vt_pname(nm, prefix, "qkv"), x, wq + wk + wv, a->qkv_bias, a->winit, &w, &b))
                return -1;
            s->q = vt_linear(g, vt_slice(g, x, 1, 0, a->lead), vt_slice(g, w, 0, 0, wq),
                             b ? vt_slice(g, b, 0, 0, wq) : NULL);
            s->kv = vt_linear(g, x, vt_slice(g, w, 0, wq, wk + wv), b ? vt_slice(g, b, 0, wq, wk + wv) : NULL);
            s->v_off = wk;
            return s->q && s->kv ? 0 : -1;
        }
        s->q = s->kv = vt_linear_p(g, vt_pname(nm, prefix, "qkv"), x, wq + wk + wv, a->qkv_bias, a->winit);
        s->k_off = wq;
        s->v_off = wq + wk;
    } else if (a->layout == VT_LAYOUT_PVT) {
        s->q = vt_linear_p(g, vt_pname(nm, prefix, "q"), a->lead_queries ? vt_slice(g, x, 1, 0, a->lead) : x, wq,
                           a->qkv_bias, a->winit);
        vt_tensor *src = x;
        if (a->sr_ratio > 1) {
            src = block_sr(g, prefix, x, a->grid_h, a->grid_w, a->sr_ratio, a->ln_eps, a->conv_fanout);
            s->kh = a->grid_h / a->sr_ratio;
            s->kw = a->grid_w / a->sr_ratio;
        }
        s->kv = vt_linear_p(g, vt_pname(nm, prefix, "kv"), src, wk + wv, a->qkv_bias, a->winit);
        s->v_off = wk;
    } else if (a->layout == VT_LAYOUT_NEXTVIT) {
        s->q = vt_linear_p(g, vt_pname(nm, prefix, "q"), x, wq, a->qkv_bias, a->winit);
        vt_tensor *src = x;
        if (a->sr_ratio > 1) {
            src = pool_tokens(g, prefix, x, a->sr_ratio * a->sr_ratio, a->ln_eps, a->norm_folded);
            if (!src) return -1;
            s->kh = key_rows(src->shape[1]);
            s->kw = src->shape[1] / s->kh;
            s->kpool = a->sr_ratio * a->sr_ratio;
        }
        vt_tensor *kv[2] = {vt_linear_p(g, vt_pname(nm, prefix, "k"), src, wk, a->qkv_bias, a->winit),
                            vt_linear_p(g, vt_pname(nm, prefix, "v"), src, wv, a->qkv_bias, a->winit)};
        s->kv = vt_concat(g, kv, 2, 2); /* one (B, n, wk + wv) source for the fused attention's offsets */
        s->v_off = wk;
    } else {
        vt_fail(g, "attention", "%s: layout %d has no projection of its own here", prefix, a->layout);
        return -1;
    }
    return s->q && s->kv ? 0 : -1;
}

vt_attn_map vt_block_map_geom(const char *prefix, const char *view, const vt_attn_ctx *a, const vt_attn_src *s) {
    vt_attn_map m = {.lead = a->lead, .gh = a->grid_h, .gw = a->grid_w, .klead = s->klead, .kh = s->kh, .kw = s->kw,
                     .kpool = s->kpool,
                     .win_h = a->win_h, .win_w = a->win_w, .win_sh = a->win_sh, .win_sw = a->win_sw};
    if (view) {
        snprintf(m.name, sizeof m.name, "%.100s.%.20s", prefix, view);
        snprintf(m.view, sizeof m.view, "%.20s", view);
    } else {
        snprintf(m.name, sizeof m.name, "%.120s", prefix);
    }
    return m;
}

void vt_block_export_map(vt_graph *g, const char *prefix, const char *view, vt_tensor *t, const vt_attn_ctx *a,
                         const vt_attn_src *s, int split, int probs) {
    if (!g->export_maps || !t) return;
    vt_attn_map m = vt_block_map_geom(prefix, view, a, s);
    m.t = t;
    m.split = split;
    m.probs = probs;
    vt_graph_export_map(g, &m);
}

vt_tensor *vt_block_rel_pos(vt_graph *g, const char *prefix, int w, int heads, int flat) {
    if (g->err.msg[0]) return NULL;
    char nm[VT_NAMELEN];
    const int N = w * w, ts[2] = {(2 * w - 1) * (2 * w - 1), heads}, is[2] = {N, N}, isf[1] = {N * N};
    vt_tensor *table = vt_param(g, vt_pname(nm, prefix, "relative_position_bias_table"), 2, ts, VT_INIT_W02);
    float *idx = vt_alloc(sizeof(float) * (size_t)N * (size_t)N, &g->err);
    if (!idx) return NULL;
    vt_rel_pos_index_fill(idx, w, w);
    vt_tensor *ib = vt_buffer_fixed(g, vt_pname(nm, prefix, "relative_position_index"), flat ? 1 : 2, flat ? isf : is,
                                    idx);
    vt_free(idx);
    if (!ib) return NULL;
    ib->is_i64 = 1;
    return vt_rel_pos_bias(g, table, w, w);
}

vt_tensor *vt_block_mhsa(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (vt_bad(g, 1, x)) return NULL;
    if (a->layout == VT_LAYOUT_CSWIN) return vt_block_cswin_attn(g, prefix, x, a, 0); /* LePE stripes (cswin.c) */
    char nm[VT_NAMELEN];
    const int C = x->shape[x->ndim - 1];
    if (a->heads <= 0 || C % a->heads)
        return vt_fail(g, "attention", "%s: width %d is not divisible by %d heads", prefix, C, a->heads);
    vt_attn_src s;
    if (vt_attn_project(g, prefix, x, a, C, C, C, &s)) return NULL;
    vt_tensor *probs = NULL;
    const vt_attn_args args = {.heads = a->heads, .dim = C, .q_off = s.q_off, .k_off = s.k_off, .v_off = s.v_off,
                               .scale = 1.0f / sqrtf((float)(C / a->heads)),
                               .bias = a->rel_pos ? vt_block_rel_pos(g, prefix, a->rel_pos, a->heads, a->rel_pos_flat)
                                                  : NULL,
                               .mask = a->mask, .probs = &probs};
    vt_tensor *o = vt_attention_ex(g, s.q, s.kv == s.q ? NULL : s.kv, &args);
    vt_block_export_map(g, prefix, NULL, probs, a, &s, 0, 1);
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), o, C, 1, a->winit);
}
