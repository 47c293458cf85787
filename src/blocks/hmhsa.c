/* hMHSA: multi-head self-attention with hallucinated attention maps (Xu, Zhou, He, Li, Wang 2023, "Vision
 * Transformer with Attention Map Hallucination and FFN Compaction"). No official code exists; this follows
 * ../shared/specs/spec-hmhsa-cffn.md §1 and its resolutions A1–A5, A9, A10:
 *   h heads (doubled from the host's when double_heads), d = C/h, h2 = h/2 real heads;
 *   projections in the host's layout (vt_attn_project): DeiT qkv C -> 2C, rows [0, C/2) Q^, [C/2, C) K^, [C, 2C) V;
 *   PVT q C -> C/2 and kv C -> 3C/2 (K^ then V) on the spatially reduced tokens (V keeps h heads);
 *   A_r = Q^·K^ᵀ·d^-1/2 (B, h2, N, n), pre-softmax;
 *   IHH: depthwise 3x3 (groups h2, pad 1, bias) over the key grid of each query row (PVT: the reduced grid, A4); keys
 *        before the grid
 *        (the cls key) bypass it unchanged; CHH: 1x1 conv h2 -> h2 over the heads at every (query, key);
 *   A = [A_r, CHH(IHH(A_r))] (B, h, N, n) -> softmax over keys -> ·V -> merge heads -> proj.
 * Layout: IHH needs the heads as channels and the keys as the image, with one image per (b, query), so A_r is
 * permuted to (B, N, h2, n) around it; CHH runs on (B, h2, N·n) as a pointwise conv (a batched h2 x h2 GEMM). */
#include <math.h>

#include "vitc/blocks.h"

/* Conv weight prefix.name (out, in, k, k) with the host's conv rule (DeiT: PyTorch's default; PVTv2: normal with
 * √(2/fan_out)) and a zero bias (spec §1.2). */
static void conv_params(vt_graph *g, const char *prefix, const char *name, int out, int in, int k, int groups,
                        int fanout, vt_tensor **w, vt_tensor **b) {
    char pre[VT_NAMELEN], nm[VT_NAMELEN];
    vt_pname(pre, prefix, name);
    int ws[4] = {out, in / groups, k, k};
    *w = vt_param(g, vt_pname(nm, pre, "weight"), 4, ws, vt_conv_init(in / groups * k * k, out / groups * k * k, fanout));
    *b = vt_param(g, vt_pname(nm, pre, "bias"), 1, &out, VT_INIT_Z);
    if (*w) (*w)->paper_count = 1;
}

/* IHH on t (B, N, h2, n): depthwise 3x3 over the last gh·gw keys as a (gh, gw) grid, earlier keys copied. */
static vt_tensor *ihh(vt_graph *g, const char *prefix, vt_tensor *t, int gh, int gw, int fanout) {
    if (vt_bad(g, 1, t)) return NULL;
    const int B = t->shape[0], N = t->shape[1], h2 = t->shape[2], n = t->shape[3], extra = n - gh * gw;
    vt_tensor *w, *b;
    conv_params(g, prefix, "ihh", h2, h2, 3, h2, fanout, &w, &b);
    vt_tensor *grid = extra ? vt_slice(g, t, 3, extra, gh * gw) : t;
    int s4[4] = {B * N, h2, gh, gw}, s4b[4] = {B, N, h2, gh * gw};
    vt_tensor *y = vt_reshape(g, vt_conv2d(g, vt_reshape(g, grid, 4, s4), w, b, 1, 1, h2), 4, s4b);
    if (!extra) return y;
    vt_tensor *parts[2] = {vt_slice(g, t, 3, 0, extra), y};
    return vt_concat(g, parts, 2, 3);
}

/* CHH on a (B, h2, N, n): 1x1 conv over the heads at every (query, key). */
static vt_tensor *chh(vt_graph *g, const char *prefix, vt_tensor *a, int fanout) {
    if (vt_bad(g, 1, a)) return NULL;
    const int B = a->shape[0], h2 = a->shape[1], N = a->shape[2], n = a->shape[3];
    vt_tensor *w, *b;
    conv_params(g, prefix, "chh", h2, h2, 1, 1, fanout, &w, &b);
    int s4[4] = {B, h2, N * n, 1};
    return vt_reshape(g, vt_conv2d(g, vt_reshape(g, a, 4, s4), w, b, 1, 0, 1), 4, a->shape);
}

vt_tensor *vt_block_hmhsa(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    const vt_block_opts none = {0}, *o = a->opts ? a->opts : &none;
    const int C = x->shape[x->ndim - 1], h = o->double_heads ? 2 * a->heads : a->heads;
    if (x->ndim != 3 || h <= 0 || h % 2 || C % h)
        return vt_fail(g, "hmhsa", "%s: input must be (B, N, C) with C = %d divisible by an even head count %d%s",
                       prefix, C, h, o->double_heads ? " (after doubling)" : " (set double_heads for odd heads)");
    const int d = C / h, h2 = h / 2, perm[4] = {0, 2, 1, 3};
    vt_attn_src s;
    if (vt_attn_project(g, prefix, x, a, C / 2, C / 2, C, &s)) return NULL;
    const int n = s.kv->shape[1];
    if (s.kh < 1 || s.kw < 1 || s.klead + s.kh * s.kw != n)
        return vt_fail(g, "hmhsa", "%s: key grid %dx%d after %d leading keys does not fit the %d keys", prefix, s.kh,
                       s.kw, s.klead, n);
    vt_tensor *q = vt_split_heads(g, s.q, s.q_off, h2, d);
    vt_tensor *k = vt_split_heads(g, s.kv, s.k_off, h2, d);
    vt_tensor *v = vt_split_heads(g, s.kv, s.v_off, h, d);
    vt_tensor *ar = vt_matmul(g, q, k, 0, 1, 1.0f / sqrtf((float)d)); /* (B, h2, N, n) */
    vt_tensor *ah = ar;
    if (o->chh_first && !o->no_chh) ah = chh(g, prefix, ah, a->conv_fanout);
    if (!o->no_ihh) ah = vt_permute(g, ihh(g, prefix, vt_permute(g, ah, perm), s.kh, s.kw, a->conv_fanout), perm);
    if (!o->chh_first && !o->no_chh) ah = chh(g, prefix, ah, a->conv_fanout);
    vt_tensor *maps[2] = {ar, ah};
    vt_tensor *attn = vt_softmax(g, vt_concat(g, maps, 2, 1), -1); /* (B, h, N, n) */
    vt_block_export_map(g, prefix, NULL, attn, a, &s, h2, 1); /* heads [0, h2) computed, [h2, h) hallucinated */
    vt_tensor *out = vt_merge_heads(g, vt_matmul(g, attn, v, 0, 0, 1.0f));
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), out, C, 1, a->winit);
}
