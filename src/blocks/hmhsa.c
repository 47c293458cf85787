/* hMHSA: multi-head self-attention with hallucinated attention maps (Xu, Zhou, He, Li, Wang 2023, "Vision
 * Transformer with Attention Map Hallucination and FFN Compaction"). No official code exists; this follows
 * ../shared/specs/spec-hmhsa-cffn.md §1 and its resolutions A1–A5, A9, A10:
 *   h heads (doubled from the host's when double_heads), d = C/h, h2 = h/2 real heads;
 *   projections in the host's layout (vt_attn_project): DeiT qkv C -> 2C, rows [0, C/2) Q^, [C/2, C) K^, [C, 2C) V;
 *   PVT q C -> C/2 and kv C -> 3C/2 (K^ then V) on the spatially reduced tokens (V keeps h heads);
 *   A_r = Q^·K^ᵀ·d^-1/2 (B, h2, N, n), pre-softmax;
 *   IHH: depthwise 3x3 (groups h2, pad 1, bias) over the key grid of each query row (PVT: the reduced grid, A4); keys
 *        before the grid (the cls key) bypass it unchanged; CHH: 1x1 conv h2 -> h2 over the heads at every (query,
 *        key);
 *   A = [A_r, CHH(IHH(A_r))] (B, h, N, n) -> softmax over keys -> ·V -> merge heads -> proj.
 * Everything between the projections runs in one op, vt_hallucinated_attention (src/ops/hattn.c), which keeps each
 * tile of query rows' maps in cache instead of the (B, h, N, n) intermediates the plain op chain makes. */
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

vt_tensor *vt_block_hmhsa(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    const vt_block_opts none = {0}, *o = a->opts ? a->opts : &none;
    const int C = x->shape[x->ndim - 1], h = o->double_heads ? 2 * a->heads : a->heads;
    if (x->ndim != 3 || h <= 0 || h % 2 || C % h)
        return vt_fail(g, "hmhsa", "%s: input must be (B, N, C) with C = %d divisible by an even head count %d%s",
                       prefix, C, h,
                       o->double_heads ? " (after doubling)" : " (odd heads: double them, `--double-heads`)");
    const int d = C / h, h2 = h / 2;
    vt_attn_src s;
    if (vt_attn_project(g, prefix, x, a, C / 2, C / 2, C, &s)) return NULL;
    const int n = s.kv->shape[1];
    if (s.kh < 1 || s.kw < 1 || s.klead + s.kh * s.kw != n)
        return vt_fail(g, "hmhsa", "%s: key grid %dx%d after %d leading keys does not fit the %d keys", prefix, s.kh,
                       s.kw, s.klead, n);
    vt_tensor *iw = NULL, *ib = NULL, *cw = NULL, *cb = NULL; /* created in the order they run */
    if (o->chh_first && !o->no_chh) conv_params(g, prefix, "chh", h2, h2, 1, 1, a->conv_fanout, &cw, &cb);
    if (!o->no_ihh) conv_params(g, prefix, "ihh", h2, h2, 3, h2, a->conv_fanout, &iw, &ib);
    if (!o->chh_first && !o->no_chh) conv_params(g, prefix, "chh", h2, h2, 1, 1, a->conv_fanout, &cw, &cb);
    vt_tensor *probs = NULL;
    const vt_hattn_args args = {.heads = h, .dim = C, .q_off = s.q_off, .k_off = s.k_off, .v_off = s.v_off,
                                .klead = s.klead, .kh = s.kh, .kw = s.kw, .scale = 1.0f / sqrtf((float)d),
                                .ihh_w = iw, .ihh_b = ib, .chh_w = cw, .chh_b = cb, .chh_first = o->chh_first,
                                .probs = &probs};
    vt_tensor *out = vt_hallucinated_attention(g, s.q, s.kv, &args);
    vt_block_export_map(g, prefix, NULL, probs, a, &s, h2, 1); /* heads [0, h2) computed, [h2, h) hallucinated */
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), out, C, 1, a->winit);
}
