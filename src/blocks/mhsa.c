/* Standard multi-head self-attention (timm `Attention`): qkv Linear, scaled dot product, softmax, proj. */
#include <math.h>

#include "vitc/blocks.h"

vt_tensor *vt_block_mhsa(vt_graph *g, const char *prefix, vt_tensor *x, int heads, int qkv_bias) {
    if (vt_bad(g, 1, x)) return NULL;
    char nm[VT_NAMELEN];
    const int C = x->shape[x->ndim - 1];
    if (x->ndim != 3 || heads <= 0 || C % heads)
        return vt_fail(g, "attention", "%s: input must be (B, N, C) with C divisible by %d heads", prefix, heads);
    const int dh = C / heads;
    vt_tensor *qkv = vt_linear_p(g, vt_pname(nm, prefix, "qkv"), x, 3 * C, qkv_bias, VT_INIT_W02);
    vt_tensor *q = vt_split_heads(g, qkv, 0, heads, dh);
    vt_tensor *k = vt_split_heads(g, qkv, C, heads, dh);
    vt_tensor *v = vt_split_heads(g, qkv, 2 * C, heads, dh);
    vt_tensor *attn = vt_softmax(g, vt_matmul(g, q, k, 0, 1, 1.0f / sqrtf((float)dh)), -1);
    vt_tensor *o = vt_merge_heads(g, vt_matmul(g, attn, v, 0, 0, 1.0f));
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), o, C, 1, VT_INIT_W02);
}
