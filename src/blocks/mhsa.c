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
    vt_tensor *o = vt_attention(g, qkv, heads, 1.0f / sqrtf((float)dh));
    return vt_linear_p(g, vt_pname(nm, prefix, "proj"), o, C, 1, VT_INIT_W02);
}
