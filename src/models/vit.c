/* ViT / DeiT host with timm's VisionTransformer state_dict names: patch_embed.proj, cls_token, pos_embed,
 * blocks.{i}.{norm1, attn, norm2, mlp}, norm, head. Pre-norm blocks, LayerNorm eps from the config. */
#include <stdio.h>
#include <string.h>

#include "vitc/blocks.h"
#include "vitc/model.h"

/* The attention of block `prefix` chosen by the config's attention type. */
static vt_tensor *attention(vt_graph *g, const vt_model_cfg *c, const char *prefix, vt_tensor *x) {
    if (strcmp(c->attn, "mhsa") == 0) return vt_block_mhsa(g, prefix, x, c->num_heads, c->qkv_bias);
    return vt_fail(g, "vit", "unknown attention type '%s'", c->attn);
}

/* The FFN of block `prefix` chosen by the config's FFN type. */
static vt_tensor *ffn(vt_graph *g, const vt_model_cfg *c, const char *prefix, vt_tensor *x) {
    if (strcmp(c->ffn, "mlp") == 0) return vt_block_mlp(g, prefix, x, (int)(c->embed_dim * c->mlp_ratio));
    return vt_fail(g, "vit", "unknown FFN type '%s'", c->ffn);
}

vt_tensor *vt_build_vit(vt_graph *g, const vt_model_cfg *c, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    const int B = x->shape[0], D = c->embed_dim, gh = x->shape[2] / c->patch, gw = x->shape[3] / c->patch;
    const int N = gh * gw, T = N + (c->class_token ? 1 : 0);
    char nm[VT_NAMELEN], pre[VT_NAMELEN];
    vt_scope(g, "patch_embed");
    vt_tensor *t = vt_conv2d_p(g, "patch_embed.proj", x, D, c->patch, c->patch, 0, 1, 1);
    int s3[3] = {B, D, N}, perm[3] = {0, 2, 1};
    t = vt_permute(g, vt_reshape(g, t, 3, s3), perm); /* (B, N, D) */
    if (c->class_token) {
        int ts[3] = {1, 1, D};
        vt_tensor *cls = vt_param(g, "cls_token", 3, ts, VT_INIT_W02);
        if (cls) cls->no_decay = 1;
        t = vt_prepend_tokens(g, t, cls);
    }
    int ps[3] = {1, T, D};
    vt_tensor *pos = vt_param(g, "pos_embed", 3, ps, VT_INIT_W02);
    if (pos) pos->no_decay = 1;
    t = vt_add(g, t, pos);
    for (int i = 0; i < c->depth; i++) {
        snprintf(pre, sizeof pre, "blocks.%d", i);
        vt_scope(g, pre);
        vt_tensor *h = attention(g, c, vt_pname(nm, pre, "attn"), vt_layernorm_p(g, vt_pname(nm, pre, "norm1"), t, c->ln_eps));
        t = vt_add(g, t, h);
        h = ffn(g, c, vt_pname(nm, pre, "mlp"), vt_layernorm_p(g, vt_pname(nm, pre, "norm2"), t, c->ln_eps));
        t = vt_add(g, t, h);
    }
    vt_scope(g, "head");
    t = vt_layernorm_p(g, "norm", t, c->ln_eps);
    int s2[2] = {B, D};
    if (c->class_token)
        t = vt_reshape(g, vt_slice(g, t, 1, 0, 1), 2, s2);
    else
        t = vt_mean(g, t, 1);
    return vt_linear_p(g, "head", t, c->num_classes, 1, VT_INIT_W02);
}
