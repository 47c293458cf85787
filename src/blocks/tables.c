/* The pluggable block types: one table of attention modules and one of FFNs, each entry a builder with the common
 * context signature (timm's ATTN_LAYERS). A host builds every block's attention and FFN through these tables, so any
 * type runs in any host whose context it accepts; a type that cannot use the context says why (vt_fail). */
#include <stdio.h>
#include <string.h>

#include "vitc/blocks.h"

static vt_tensor *attn_mhsa(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (a->layout != VT_LAYOUT_TIMM || a->sr_ratio > 1)
        return vt_fail(g, "mhsa", "%s: only the timm layout (qkv + proj) without spatial reduction is supported",
                       prefix);
    return vt_block_mhsa(g, prefix, x, a->heads, a->qkv_bias);
}

static int msf_accepts(const char *name) {
    vt_msf_cfg m;
    return vt_msf_parse(name, &m) == 0;
}

/* MSF (msf, msf_g<N>[_block]) and the MSF paper's baseline (orig, orig_g<N>[_block]): no inner norm, timm init. */
static vt_tensor *attn_msf(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (vt_bad(g, 1, x)) return NULL;
    vt_msf_cfg m = {0};
    if (vt_msf_parse(a->type, &m))
        return vt_fail(g, "msf", "%s: unknown attention '%s' (msf, msf_g<N>, msf_g<N>_block, orig, orig_g<N>)",
                       prefix, a->type);
    const int C = x->shape[x->ndim - 1];
    if (a->heads <= 0 || C % a->heads)
        return vt_fail(g, "msf", "%s: width %d not divisible by %d heads", prefix, C, a->heads);
    if (a->sr_ratio > 1) return vt_fail(g, "msf", "%s: spatial reduction of the keys is not supported", prefix);
    m.heads = a->heads;
    m.dim_head = a->opts && a->opts->dim_head > 0 ? a->opts->dim_head : C / a->heads;
    m.timm_init = 1;
    return vt_block_msf(g, prefix, x, &m);
}

static vt_tensor *attn_hmhsa(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    const vt_block_opts *o = a->opts;
    if (a->sr_ratio > 1 || a->layout != VT_LAYOUT_TIMM)
        return vt_fail(g, "hmhsa", "%s: only the timm layout without spatial reduction is supported", prefix);
    const vt_hmhsa_cfg hc = {a->heads, a->qkv_bias, o && o->double_heads, a->grid_h, a->grid_w,
                             o && o->no_ihh, o && o->no_chh, o && o->chh_first};
    return vt_block_hmhsa(g, prefix, x, &hc);
}

static vt_tensor *attn_flatten(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (vt_bad(g, 1, x)) return NULL;
    if (a->sr_ratio > 1)
        return vt_fail(g, "flatten", "%s: spatial reduction (sr_ratio %d) is not supported", prefix, a->sr_ratio);
    const vt_block_opts *o = a->opts;
    const vt_flatten_cfg fc = {a->heads, o ? o->focusing : 0.0f, o ? o->kernel : 0,
                               a->layout == VT_LAYOUT_PVT || (o && o->flatten_q_kv) ? VT_FLATTEN_Q_KV : VT_FLATTEN_QKV,
                               a->qkv_bias};
    return vt_block_flatten(g, prefix, x, x->ndim == 3 ? x->shape[1] : 0, a->grid_h, a->grid_w, &fc);
}

/* The Refiner's attention with its map refined in place (adapt_bn(DLA(.))), no map carried between blocks. */
static vt_tensor *attn_refiner(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (a->sr_ratio > 1 || a->layout != VT_LAYOUT_TIMM)
        return vt_fail(g, "refiner", "%s: needs global attention in the timm layout", prefix);
    const float expand = a->opts && a->opts->refiner_expand > 0 ? a->opts->refiner_expand : 3.0f;
    return vt_block_refiner_attn(g, prefix, x, a->heads, a->qkv_bias, VT_REFINER_TRANSFORM, expand, NULL);
}

/* Group-Mix attention on the token grid; it has no place for a class token. */
static vt_tensor *attn_gma(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (a->lead > 0 || a->grid_h < 1 || a->grid_w < 1)
        return vt_fail(g, "gma", "%s: needs a grid of tokens without a class token (got %d leading tokens); use a "
                       "host config with class_token = 0, e.g. vit_fmnist_tiny_gap --attn gma", prefix, a->lead);
    return vt_block_gma_attn(g, prefix, x, a->grid_h, a->grid_w);
}

static const vt_attn_type attn_types[] = {
    {"mhsa", "multi-head softmax self-attention", attn_mhsa, NULL},
    {"msf", "MSF: Gaussian-kernel logits + PROBE; also msf_g<N>[_block] and the baseline orig, orig_g<N>", attn_msf,
     msf_accepts},
    {"hmhsa", "hMHSA: half the maps computed, half hallucinated (IHH + CHH)", attn_hmhsa, NULL},
    {"flatten", "FLatten focused linear attention (+ DWC on V)", attn_flatten, NULL},
    {"refiner", "Refiner: softmax attention with its maps refined (expansion + DLA)", attn_refiner, NULL},
    {"gma", "Group-Mix attention (5 segments, aggregators); grid hosts without a class token", attn_gma, NULL},
};
#define NATTN ((int)(sizeof attn_types / sizeof attn_types[0]))

static vt_tensor *ffn_mlp(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f) {
    return vt_block_mlp(g, prefix, x, f->hidden);
}

static vt_tensor *ffn_cffn(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f) {
    const vt_cffn_cfg cc = {f->opts ? f->opts->cffn_t : 0.0f, f->opts ? f->opts->cffn_r : 0, f->train_form};
    return vt_block_cffn(g, prefix, x, f->hidden, &cc);
}

static const vt_ffn_type ffn_types[] = {
    {"mlp", "fc1 -> GELU -> fc2", ffn_mlp},
    {"cffn", "cFFN: fc2 factorised (U, V), re-parameterised conv+BN branches in training", ffn_cffn},
};
#define NFFN ((int)(sizeof ffn_types / sizeof ffn_types[0]))

const vt_attn_type *vt_attn_find(const char *name) {
    for (int i = 0; name && i < NATTN; i++)
        if (attn_types[i].accepts ? attn_types[i].accepts(name) : strcmp(attn_types[i].name, name) == 0)
            return &attn_types[i];
    return NULL;
}

const vt_ffn_type *vt_ffn_find(const char *name) {
    for (int i = 0; name && i < NFFN; i++)
        if (strcmp(ffn_types[i].name, name) == 0) return &ffn_types[i];
    return NULL;
}

const char *vt_block_type_names(int which, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < (which ? NFFN : NATTN) && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", which ? ffn_types[i].name : attn_types[i].name);
    return buf;
}

vt_tensor *vt_attn_build(vt_graph *g, const char *type, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    const vt_attn_type *t = vt_attn_find(type);
    char names[256];
    if (!t)
        return vt_fail(g, "attention", "unknown attention type '%s' (%s)", type ? type : "",
                       vt_block_type_names(0, names, sizeof names));
    vt_attn_ctx c = *a;
    c.type = type;
    return t->build(g, prefix, x, &c);
}

vt_tensor *vt_ffn_build(vt_graph *g, const char *type, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f) {
    const vt_ffn_type *t = vt_ffn_find(type);
    char names[256];
    if (!t) return vt_fail(g, "ffn", "unknown FFN type '%s' (%s)", type ? type : "", vt_block_type_names(1, names, sizeof names));
    return t->build(g, prefix, x, f);
}
