/* FLatten focused linear attention (Han et al., ICCV 2023; official FocusedLinearAttention at HEAD abdb115,
 * ../shared/specs/spec-flatten.md §1.2). Per call, x (B, N, C) with h heads of width d = C/h:
 *   k += positional_encoding (keys only);  s = softplus(scale);
 *   q, k ← φ_p((ReLU(·) + 1e-6) / s), φ_p(u) = u^p·‖u‖/‖u^p‖ with norms over all C channels (inside the fused op);
 *   per head: z = 1 / (q·mean_j(k_j) + 1e-6),  KV = (kᵀ n^-½)(v n^-½),  o = (q·KV)·z   — O(N·d²), no N×N map;
 *   o (merged heads) += DWC(v): one d-channel K×K depthwise conv on the H×W key grid, the same kernel for every
 *   head (tokens before the grid — a class token — get no DWC term, an unofficial DeiT choice, spec §6).
 * No head copies and no focused maps: vt_linear_attention_ex reads q, k and v in place from the packed projections,
 * applies the focus to rows in cache, fuses the per-head linear attention and adds the DWC term (graphs that
 * export attention maps take two vt_focus_ex nodes and the op without focus: the maps need φ(q), φ(k)); the DWC is
 * one C-channel vt_dwconv_nhwc on v (B, H, W, C) with the d-channel kernel tiled over the heads; the contiguous v
 * the conv needs is the one copy left.
 * Parameters (relative to prefix): scale (1,1,C) and positional_encoding (1,n,C), both zero-initialised, then
 * qkv (Swin) or q + kv (PVT), proj, and dwc.weight (d,1,K,K) / dwc.bias (d) with PyTorch's default conv init. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vitc/blocks.h"

/* Creates the module's own parameters scale and positional_encoding first (the official state_dict order). */
static void own_params(vt_graph *g, const char *prefix, int n, int C, vt_tensor **scale, vt_tensor **pe) {
    char nm[VT_NAMELEN];
    int ss[3] = {1, 1, C}, ps[3] = {1, n, C};
    *scale = vt_param(g, vt_pname(nm, prefix, "scale"), 3, ss, VT_INIT_Z);
    *pe = vt_param(g, vt_pname(nm, prefix, "positional_encoding"), 3, ps, VT_INIT_Z);
}

/* Exports (export_maps) the attention this linear attention implies without forming it: from the focus op's outputs
 * fq, fk (B, N, C), w_ij = φ(q_i)·φ(k_j) / (Σ_j φ(q_i)·φ(k_j) + n·1e-6), the weights o_i gives v_j (the DWC term
 * aside), as prefix; and, as prefix.relu_linear, the same formula with φ = ReLU on the raw q (channels q_off of q)
 * and k + positional encoding (channels k_off of k): plain linear attention, a second formula by design (the focus
 * argument of the paper). Keys: lead tokens, then an H × W grid; queries the same tokens. */
static void export_flatten(vt_graph *g, const char *prefix, vt_tensor *fq, vt_tensor *fk, vt_tensor *q, int q_off,
                           vt_tensor *k, int k_off, vt_tensor *pe, int heads, int H, int W) {
    if (!g->export_maps || !fq || !fk) return;
    const int B = fq->shape[0], N = fq->shape[1], C = fq->shape[2], d = C / heads;
    const vt_attn_ctx geom = {.heads = heads, .grid_h = H, .grid_w = W, .lead = N - H * W};
    const vt_attn_src keys = {.kh = H, .kw = W, .klead = N - H * W};
    for (int plain = 0; plain < 2; plain++) {
        vt_attn_map m = vt_block_map_geom(prefix, plain ? "relu_linear" : NULL, &geom, &keys);
        vt_tensor *mq = plain ? q : fq, *mk = plain ? k : fk;
        const int64_t lq = mq->shape[2], lk = mk->shape[2];
        m.form = VT_MAP_LINEAR;
        m.q = mq;
        m.k = mk;
        m.qoff = plain ? q_off : 0;
        m.koff = plain ? k_off : 0;
        const int64_t qs[4] = {(int64_t)N * lq, d, lq, 1}, ks[4] = {(int64_t)N * lk, d, lk, 1}, ps[4] = {0, d, C, 1};
        memcpy(m.qst, qs, sizeof qs);
        memcpy(m.kst, ks, sizeof ks);
        if (plain) {
            m.kbias = pe;
            memcpy(m.kbst, ps, sizeof ps);
            m.relu = 1;
        }
        m.batch = B;
        m.heads = heads;
        m.n = m.m = N;
        m.d = d;
        m.eps = 1e-6f * (float)N;
        m.probs = 1;
        vt_graph_export_map(g, &m);
    }
}

/* x repeated r times along axis 0 (r >= 1): concats of doubled copies, log2(r) small nodes. */
static vt_tensor *tile0(vt_graph *g, vt_tensor *x, int r) {
    if (r <= 1) return x;
    vt_tensor *half = tile0(g, x, r / 2), *parts[3] = {half, half, x};
    return vt_concat(g, parts, 2 + r % 2, 0);
}

vt_tensor *vt_flatten_core(vt_graph *g, const char *prefix, vt_tensor *q, int q_off, vt_tensor *k, int k_off,
                           vt_tensor *v, int v_off, int C, int H, int W, const vt_flatten_cfg *c) {
    if (vt_bad(g, 3, q, k, v)) return NULL;
    char nm[VT_NAMELEN], s1[64], s2[64], s3[64];
    const int B = v->shape[0], N = q->ndim == 3 ? q->shape[1] : 0;
    const int n = k->ndim == 3 ? k->shape[1] : 0;
    const int heads = c->heads, K = c->kernel > 0 ? c->kernel : 5, lead = n - H * W;
    const float p = c->focusing > 0.0f ? c->focusing : 3.0f;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || q->shape[0] != B || k->shape[0] != B || q_off < 0 ||
        q_off > q->shape[2] - C || k_off < 0 || k_off > k->shape[2] - C || v->shape[1] != n || v_off < 0 ||
        v_off > v->shape[2] - C || C <= 0 || heads <= 0 || C % heads || H <= 0 || W <= 0 || lead < 0 || K % 2 == 0)
        return vt_fail(g, "flatten", "%s: q %s, k %s, v %s must be (B, N, ·), (B, n, ·), (B, n, ·) with the query, key "
                       "and value channels [%d, %d + C), [%d, %d + C), [%d, %d + C) inside, C = %d divisible by %d "
                       "heads, an odd kernel %d and n = leading tokens + grid %dx%d", prefix, vt_shape_str(q, s1, 64),
                       vt_shape_str(k, s2, 64), vt_shape_str(v, s3, 64), q_off, q_off, k_off, k_off, v_off, v_off, C,
                       heads, K, H, W);
    const int lead_q = N != n && N == lead; /* the leading tokens' queries alone: no DWC term on any of them */
    if (c->lepe && lead)
        return vt_fail(g, "flatten", "%s: LePE needs a grid of every token (%d leading)", prefix, lead);
    if (N != n && !lead_q)
        return vt_fail(g, "flatten", "%s: %d query tokens but %d key tokens: the DWC term needs n = N (spatial "
                       "reduction is not supported) or the %d leading tokens alone", prefix, N, n, lead);
    if (lead_q && g->export_maps)
        return vt_fail(g, "flatten", "%s: exported maps need every token's query", prefix);
    const int d = C / heads;
    vt_tensor *scale, *pe;
    own_params(g, prefix, n, C, &scale, &pe);
    int ws[4] = {d, 1, K, K};
    const vt_init wi = vt_conv_init(K * K, K * K, c->conv_fanout); /* depthwise: fan_in = fan_out = K·K */
    vt_tensor *dw = vt_param(g, vt_pname(nm, prefix, "dwc.weight"), 4, ws, wi);
    vt_tensor *db = vt_param(g, vt_pname(nm, prefix, "dwc.bias"), 1, &d, c->conv_fanout ? VT_INIT_Z : wi);
    if (!scale || !pe || !dw || !db) return NULL;
    dw->paper_count = 1;

    /* exporting the maps needs the focused q, k as tensors: vt_focus_ex nodes then (read in place from the packed
     * projections), the op without its focus below */
    vt_tensor *fq = NULL, *fk = NULL;
    if (g->export_maps) {
        fq = vt_focus_ex(g, q, q_off, C, NULL, scale, p);
        fk = vt_focus_ex(g, k, k_off, C, pe, scale, p);
        export_flatten(g, prefix, fq, fk, q, q_off, k, k_off, pe, heads, H, W);
    }

    /* inference: the DWC inside the op, per block of whole grid rows in cache (no (B, H·W, C) map written and read
     * back). Eval graphs with the DWC fused and with the chain, alternated in one process (AMD EPYC Zen 3,
     * 2026-11-30), the attention and DWC nodes per forward at batch 16, fused / chain: FLatten-Swin-T 68 / 97 ms,
     * FLatten-CSwin-T 123 / 147, FLatten-PVTv2-b1 71 / 77, FLatten-DeiT-T 42 / 55 (its chain also copies the grid's
     * v out of the packed qkv); at batch 4 CSwin-T 1.10-1.14x, PVTv2-b1 0.95-1.01x; at batch 1 and 2 level within
     * the 5-10% by which two identical graphs differ in that harness (each query task re-reads its K − 1 halo rows) */
    if (lead_q) {
        const vt_linattn_args la = {.heads = heads, .q_off = q_off, .k_off = k_off, .v_off = v_off, .C = C,
                                    .scale = scale, .pe = pe, .p = p};
        return vt_linear_attention_ex(g, q, k, v, &la);
    }
    vt_tensor *lw = NULL, *lb = NULL; /* FLatten-CSwin's LePE (prefix.get_v), after the module's own parameters */
    if (c->lepe) {
        const int ls[4] = {C, 1, 3, 3};
        const vt_init li = vt_conv_init(9, 9, 0); /* PyTorch's default, depthwise: fan_in = 1·3·3 */
        lw = vt_param(g, vt_pname(nm, prefix, "get_v.weight"), 4, ls, li);
        lb = vt_param(g, vt_pname(nm, prefix, "get_v.bias"), 1, &C, li);
        if (!lw || !lb) return NULL;
        lw->paper_count = 1;
    }
    if (!fq && !g->training && !g->ref_kernels) { /* the LePE's taps go into the DWC's: one conv of v */
        const vt_linattn_args la = {.heads = heads, .q_off = q_off, .k_off = k_off, .v_off = v_off, .C = C,
                                    .scale = scale, .pe = pe, .p = p, .dwc_w = dw, .dwc_b = db, .grid_h = H,
                                    .grid_w = W, .lepe_w = lw, .lepe_b = lb};
        return vt_linear_attention_ex(g, q, k, v, &la);
    }
    /* DWC on raw v: the d-channel kernel shared by every head is, on v (B, H, W, C) with channel i·d + c, the
     * C-channel depthwise conv whose channel i·d + c has kernel c: the weight and bias tiled heads times (their
     * gradients sum the copies), no head split of v */
    /* (v's channels read in place; with leading tokens, the grid tokens' v channels are cut out first) */
    vt_tensor *vg = lead ? vt_slice(g, vt_slice(g, v, 2, v_off, C), 1, lead, H * W) : v;
    int gs[4] = {B, H, W, lead ? C : v->shape[2]}, ts[3] = {B, H * W, C};
    vt_tensor *dwc = vt_dwconv_nhwc_ex(g, vt_reshape(g, vg, 4, gs), lead ? 0 : v_off, tile0(g, dw, heads),
                                       tile0(g, db, heads), K / 2, NULL);
    /* per head o = (q·KV)·z, z = 1 / (q·k̄ + 1e-6), KV = kᵀv / n, + DWC on the grid tokens, with the focused kernel
     * φ_p((ReLU(·) + 1e-6) / softplus(scale)) of q and k + positional encoding computed inside (one fused op) */
    vt_tensor *o;
    if (fq) {
        o = vt_linear_attention(g, fq, fk, v, heads, v_off, vt_reshape(g, dwc, 3, ts));
    } else {
        const vt_linattn_args la = {.heads = heads, .q_off = q_off, .k_off = k_off, .v_off = v_off, .C = C,
                                    .add = vt_reshape(g, dwc, 3, ts), .scale = scale, .pe = pe, .p = p};
        o = vt_linear_attention_ex(g, q, k, v, &la);
    }
    /* + LePE of v over the grid, added in its conv's output pass (lead = 0) */
    return lw ? vt_reshape(g, vt_dwconv_nhwc_ex(g, vt_reshape(g, v, 4, gs), v_off, lw, lb, 1, o), 3, ts) : o;
}

vt_tensor *vt_block_flatten(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (vt_bad(g, 1, x)) return NULL;
    if (a->layout == VT_LAYOUT_CSWIN) return vt_block_cswin_attn(g, prefix, x, a, 1); /* CSwin L block (cswin.c) */
    char nm[VT_NAMELEN];
    const vt_block_opts none = {0}, *o = a->opts ? a->opts : &none;
    if (a->sr_ratio > 1)
        return vt_fail(g, "flatten", "%s: spatial reduction (sr_ratio %d) is not supported (no paper configuration "
                       "uses it)", prefix, a->sr_ratio);
    if (a->rel_pos || a->mask)
        return vt_fail(g, "flatten", "%s: windowed softmax stages (relative position bias, shift mask) take mhsa; "
                       "FLatten runs on whole stages", prefix);
    const int C = x->shape[x->ndim - 1];
    if (a->heads < 1 || C % a->heads)
        return vt_fail(g, "flatten", "%s: width %d is not divisible by %d heads", prefix, C, a->heads);
    vt_attn_ctx pa = *a;
    if (o->flatten_q_kv && pa.layout == VT_LAYOUT_TIMM) pa.layout = VT_LAYOUT_PVT; /* the DeiT transplant (spec §6) */
    /* the module's own parameters come first in the official state_dict; created by vt_flatten_core */
    vt_attn_src s;
    if (vt_attn_project(g, prefix, x, &pa, C, C, C, &s)) return NULL;
    const vt_flatten_cfg fc = {a->heads, o->focusing, o->kernel, a->conv_fanout, 0};
    vt_tensor *out = vt_flatten_core(g, prefix, s.q, s.q_off, s.kv, s.k_off, s.kv, s.v_off, C, s.kh,
                                     s.kw, &fc);
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), out, C, 1, a->winit);
}
