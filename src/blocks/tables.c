/* The pluggable block types: one table of attention modules and one of FFNs, each entry a builder with the common
 * context signature (timm's ATTN_LAYERS). A host builds every block's attention and FFN through these tables, so any
 * type runs in any host whose context it accepts; a type that cannot use the context says why (vt_fail). */
#include <stdio.h>
#include <string.h>

#include "vitc/blocks.h"

static int msf_accepts(const char *name) {
    vt_msf_cfg m;
    return vt_msf_parse(name, &m) == 0;
}

/* The Refiner's attention with its map refined in place (adapt_bn(DLA(.))), no map carried between blocks. */
static vt_tensor *attn_refiner(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (a->sr_ratio > 1 || a->layout != VT_LAYOUT_TIMM || a->rel_pos || a->mask)
        return vt_fail(g, "refiner", "%s: needs global attention in the timm layout (no windows, no spatial reduction)",
                       prefix);
    const float expand = a->opts && a->opts->refiner_expand > 0 ? a->opts->refiner_expand : 3.0f;
    return vt_block_refiner_attn(g, prefix, x, a, VT_REFINER_TRANSFORM, expand, NULL);
}

/* Group-Mix attention on the token grid; it has no place for a class token. */
static vt_tensor *attn_gma(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    if (a->lead > 0 || a->grid_h < 1 || a->grid_w < 1)
        return vt_fail(g, "gma", "%s: needs a grid of tokens without a class token (got %d leading tokens); use a "
                       "host config with class_token = 0, e.g. vit_fmnist_tiny_gap --attn gma", prefix, a->lead);
    if (a->sr_ratio > 1 || a->layout != VT_LAYOUT_TIMM || a->rel_pos || a->mask)
        return vt_fail(g, "gma", "%s: Group-Mix attention has its own qkv and aggregators; it needs a global token grid "
                       "(no windows, no spatial reduction)", prefix);
    return vt_block_gma_attn(g, prefix, x, a->grid_h, a->grid_w);
}

static const vt_attn_type attn_types[] = {
    {"mhsa", "multi-head softmax self-attention", vt_block_mhsa, NULL, NULL, 0, 1},
    {"msf", "MSF: Gaussian-kernel logits + PROBE; also msf_g<N>[_block] and the baseline orig, orig_g<N>",
     vt_block_msf_host, msf_accepts, "msf_g<N>[_block], orig, orig_g<N>", 0, 1},
    {"hmhsa", "hMHSA: half the maps computed, half hallucinated (IHH + CHH)", vt_block_hmhsa, NULL, NULL, 0,
     1},
    {"flatten", "FLatten focused linear attention (+ DWC on V)", vt_block_flatten, NULL, NULL, 0, 1},
    {"refiner", "Refiner: softmax attention with its maps refined (expansion + DLA)", attn_refiner, NULL, NULL, 0, 0},
    {"gma", "Group-Mix attention (5 segments, aggregators); grid hosts without a class token", attn_gma, NULL, NULL,
     VT_GMA_HEADS, 0},
};
#define NATTN ((int)(sizeof attn_types / sizeof attn_types[0]))

static const vt_ffn_type ffn_types[] = {
    {"mlp", "fc1 -> GELU -> fc2 (Next-ViT: 1x1 convs with ReLU)", vt_block_ffn_mlp, 0},
    {"cffn", "cFFN: fc2 factorised (U, V), re-parameterised conv+BN branches in training", vt_block_cffn, 1},
};
#define NFFN ((int)(sizeof ffn_types / sizeof ffn_types[0]))

const vt_attn_type *vt_attn_find(const char *name) {
    for (int i = 0; name && i < NATTN; i++)
        if (attn_types[i].accepts ? attn_types[i].accepts(name) : strcmp(attn_types[i].name, name) == 0)
            return &attn_types[i];
    return NULL;
}

void vt_attn_record_name(const char *name, char *buf, size_t n) {
    vt_msf_cfg m;
    if (vt_msf_parse(name, &m) != 0)
        snprintf(buf, n, "%s", name ? name : "");
    else if (!m.probe && m.groups == 1) /* the baseline's dense projection: the host's own attention */
        snprintf(buf, n, "mhsa");
    else if (m.groups == 1)
        snprintf(buf, n, "msf");
    else /* the grouping order shows in no shape: it is what the record is for */
        snprintf(buf, n, "%s_g%d%s", m.probe ? "msf" : "orig", m.groups, m.block_grouping ? "_block" : "");
}

const vt_ffn_type *vt_ffn_find(const char *name) {
    for (int i = 0; name && i < NFFN; i++)
        if (strcmp(ffn_types[i].name, name) == 0) return &ffn_types[i];
    return NULL;
}

const char *vt_block_type_names(int which, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < (which ? NFFN : NATTN) && k < n; i++) {
        const char *forms = which ? NULL : attn_types[i].forms;
        k += (size_t)snprintf(buf + k, n - k, "%s%s%s%s%s", i ? ", " : "",
                              which ? ffn_types[i].name : attn_types[i].name, forms ? " (also " : "",
                              forms ? forms : "", forms ? ")" : "");
    }
    return buf;
}

vt_tensor *vt_attn_build(vt_graph *g, const char *type, const char *prefix, vt_tensor *x, const vt_attn_ctx *a) {
    const vt_attn_type *t = vt_attn_find(type);
    char names[256];
    if (!t)
        return vt_fail(g, "attention", "unknown attention type '%s' (%s)", type ? type : "",
                       vt_block_type_names(0, names, sizeof names));
    if (a->lead_queries && !t->lead_queries)
        return vt_fail(g, "attention", "%s: attention type '%s' computes every token's row (no lead-queries form)",
                       prefix, type);
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
