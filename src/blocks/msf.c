/* Mean-Shift Feature attention (Kobayashi, CVPR 2024; official `AttentionMSF`) and the baseline `Attention` of the
 * same code: optional in-module LayerNorm `norm`, projection `to_qkvp` (4I) / `to_qkv` (3I) without bias, dense or
 * grouped (GroupLinear, interleaved or block output order), Gaussian-kernel logits (q·kᵀ − 0.5‖k‖²)·d_h^-1/2,
 * o = softmax·v − p, `to_out` without bias. See specs/spec-msf.md §2-3. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/blocks.h"

/* Exports the fused op's probabilities (prefix) and, for MSF (probe), the plain softmax(scale·q·kᵀ) of the same
 * projections t (B, N, nch·inner; q at 0, k at inner) as the view prefix.softmax_qk (a second formula, for the
 * comparison: the Gaussian kernel's −0.5‖k‖² shift is what differs). */
static void export_msf(vt_graph *g, const char *prefix, vt_tensor *t, vt_tensor *probs, int probe, int H, int inner,
                       float scale, const vt_attn_ctx *a) {
    if (!g->export_maps || !t) return;
    const vt_attn_src s = {.kh = a->grid_h, .kw = a->grid_w, .klead = a->lead};
    vt_block_export_map(g, prefix, NULL, probs, a, &s, 0, 1);
    if (!probe) return;
    vt_attn_map m = vt_block_map_geom(prefix, "softmax_qk", a, &s);
    const int B = t->shape[0], N = t->shape[1], L = t->shape[2], dh = inner / H;
    m.form = VT_MAP_SOFTMAX;
    m.q = m.k = t;
    m.koff = inner;
    m.qst[0] = m.kst[0] = (int64_t)N * L;
    m.qst[1] = m.kst[1] = dh;
    m.qst[2] = m.kst[2] = L;
    m.qst[3] = m.kst[3] = 1;
    m.batch = B;
    m.heads = H;
    m.n = m.m = N;
    m.d = dh;
    m.scale = scale;
    m.probs = 1;
    vt_graph_export_map(g, &m);
}

int vt_msf_parse(const char *attn, vt_msf_cfg *m) {
    if (!attn) return -1;
    int probe;
    if (strncmp(attn, "msf", 3) == 0) {
        probe = 1;
        attn += 3;
    } else if (strncmp(attn, "orig", 4) == 0) {
        probe = 0;
        attn += 4;
    } else {
        return -1;
    }
    int groups = 1, block = 0;
    if (strncmp(attn, "_g", 2) == 0 && attn[2] >= '1' && attn[2] <= '9') {
        char *end;
        long v = strtol(attn + 2, &end, 10);
        if (v < 1 || v > 4096) return -1;
        groups = (int)v;
        attn = end;
    }
    if (strcmp(attn, "_block") == 0 && groups > 1) {
        block = 1;
        attn += 6;
    }
    if (*attn) return -1;
    m->probe = probe;
    m->groups = groups;
    m->block_grouping = block;
    return 0;
}

vt_tensor *vt_block_msf(vt_graph *g, const char *prefix, vt_tensor *x, const vt_msf_cfg *m) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    const int D = x->shape[x->ndim - 1], H = m->heads, dh = m->dim_head, G = m->groups, inner = H * dh;
    const int nch = m->probe ? 4 : 3;
    if (x->ndim != 3 || H <= 0 || dh <= 0 || G <= 0 || D % G || (nch * inner) % G)
        return vt_fail(g, "msf", "%s: input must be (B, N, C) with C divisible by %d groups (heads %d, dim_head %d)",
                       prefix, G, H, dh);
    if (m->norm) x = vt_layernorm_p(g, vt_pname(nm, prefix, "norm"), x, m->ln_eps);
    const char *pname = m->probe ? "to_qkvp.weight" : "to_qkv.weight";
    int ws[2] = {nch * inner, D / G};
    const vt_init winit = {VT_INIT_UNIFORM, 1.0f / sqrtf((float)(D / G))}; /* PyTorch's default */
    vt_tensor *w = vt_param(g, vt_pname(nm, prefix, pname), 2, ws, winit);
    if (w) w->paper_count = 1;
    vt_tensor *t = G == 1 ? vt_linear(g, x, w, NULL) : vt_group_linear(g, x, w, NULL, G, !m->block_grouping);
    /* chunks q, k, v, p: contiguous blocks of `inner` output channels; head h takes [h·dh, (h+1)·dh) of each.
     * Fused attention (src/ops/attention.c) computes the Gaussian logits, softmax, ·v and − p per head. */
    const float s = 1.0f / sqrtf((float)dh);
    vt_tensor *probs = NULL;
    const vt_attn_args args = {.heads = H, .dim = inner, .k_off = inner, .v_off = 2 * inner, .p_off = 3 * inner,
                               .scale = s, .msf = m->probe, .probs = &probs};
    vt_tensor *o = vt_attention_ex(g, t, NULL, &args);
    if (m->grid_h > 0 && m->grid_w > 0) {
        const vt_attn_ctx geom = {.heads = H, .grid_h = m->grid_h, .grid_w = m->grid_w};
        export_msf(g, prefix, t, probs, m->probe, H, inner, s, &geom);
    }
    int os[2] = {D, inner};
    const vt_init oinit = {VT_INIT_UNIFORM, 1.0f / sqrtf((float)inner)};
    vt_tensor *wo = vt_param(g, vt_pname(nm, prefix, "to_out.weight"), 2, os, oinit);
    if (wo) wo->paper_count = 1;
    return vt_linear(g, o, wo, NULL);
}

vt_tensor *vt_block_msf_host(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    vt_msf_cfg m = {0};
    if (vt_msf_parse(a->type, &m))
        return vt_fail(g, "msf", "%s: unknown attention '%s' (msf, msf_g<N>, msf_g<N>_block, orig, orig_g<N>)",
                       prefix, a->type);
    const int C = x->shape[x->ndim - 1], H = a->heads, nch = m.probe ? 4 : 3, G = m.groups;
    if (x->ndim != 3 || H <= 0 || C % H || C % G)
        return vt_fail(g, "msf", "%s: width %d must be divisible by %d heads and %d groups", prefix, C, H, G);
    if (a->layout != VT_LAYOUT_TIMM || a->sr_ratio > 1)
        return vt_fail(g, "msf", "%s: MSF replaces a packed qkv projection (timm/Swin layout, no spatial reduction)",
                       prefix);
    if (a->lead_queries && (a->lead < 1 || a->rel_pos || a->mask))
        return vt_fail(g, "msf", "%s: queries of the leading tokens alone need leading tokens and no bias or mask",
                       prefix);
    const int ws[2] = {nch * C, C / G}, E = nch * C;
    vt_tensor *w = vt_param(g, vt_pname(nm, prefix, m.probe ? "qkvp.weight" : "qkv.weight"), 2, ws, a->winit);
    vt_tensor *b = a->qkv_bias ? vt_param(g, vt_pname(nm, prefix, m.probe ? "qkvp.bias" : "qkv.bias"), 1, &E, VT_INIT_Z)
                               : NULL;
    if (w) w->paper_count = 1;
    vt_tensor *t = G == 1 ? vt_linear(g, x, w, b) : vt_group_linear(g, x, w, b, G, !m.block_grouping);
    /* lead queries (a class-token ViT's last block): each row of MSF's attention is its own query's (the Gaussian
     * kernel's key-norm shift and the PROBE are per key and per query), so the lead tokens' q and p come from their
     * own projection rows and every token stays a key and value */
    vt_tensor *q = t;
    if (a->lead_queries) {
        vt_tensor *xl = vt_slice(g, x, 1, 0, a->lead);
        q = G == 1 ? vt_linear(g, xl, w, b) : vt_group_linear(g, xl, w, b, G, !m.block_grouping);
    }
    vt_tensor *probs = NULL;
    const vt_attn_args args = {.heads = H, .dim = C, .k_off = C, .v_off = 2 * C, .p_off = 3 * C,
                               .scale = 1.0f / sqrtf((float)(C / H)), .msf = m.probe,
                               .bias = a->rel_pos ? vt_block_rel_pos(g, prefix, a->rel_pos, H, a->rel_pos_flat) : NULL,
                               .mask = a->mask, .probs = &probs};
    vt_tensor *o = vt_attention_ex(g, q, a->lead_queries ? t : NULL, &args);
    if (!a->lead_queries) export_msf(g, prefix, t, probs, m.probe, H, C, args.scale, a);
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), o, C, 1, a->winit);
}
