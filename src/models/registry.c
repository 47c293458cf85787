/* The table of named models and the generic build / init entry points. */
#include <stdio.h>
#include <string.h>

#include "vitc/model.h"

/* Every host family's table; add a family with one line here. */
static const vt_model_table *const tables[] = {
    &vt_models_vit,
    &vt_models_groupmixformer,
    &vt_models_vit_flatten,
    &vt_models_vit_hmhsa_cffn,
    &vt_models_refined_vit,
    &vt_models_simplevit,
};
#define NTABLES ((int)(sizeof tables / sizeof tables[0]))

int vt_model_count(void) {
    int n = 0;
    for (int t = 0; t < NTABLES; t++) n += tables[t]->n;
    return n;
}

const vt_model_cfg *vt_model_at(int i) {
    for (int t = 0; t < NTABLES && i >= 0; t++) {
        if (i < tables[t]->n) return &tables[t]->cfgs[i];
        i -= tables[t]->n;
    }
    return NULL;
}

const vt_model_cfg *vt_model_find(const char *name) {
    for (int i = 0; i < vt_model_count(); i++) {
        const vt_model_cfg *c = vt_model_at(i);
        if (strcmp(c->name, name) == 0 || (c->alias && strcmp(c->alias, name) == 0)) return c;
    }
    return NULL;
}
int vt_model_configure(const vt_model_cfg *cfg, int img_size, int in_chans, int num_classes, const char *attn,
                       const char *ffn, vt_model_cfg *out, vt_err *e) {
    *out = *cfg;
    if (img_size > 0) out->img_size = img_size;
    if (in_chans > 0) out->in_chans = in_chans;
    if (num_classes > 0) out->num_classes = num_classes;
    if (attn) out->attn = attn;
    if (ffn) out->ffn = ffn;
    if (!(out->crop_pct > 0.0f)) out->crop_pct = 0.875f; /* timm's DEFAULT_CROP_PCT */
    if (out->img_size < out->img_multiple || out->img_size % out->img_multiple || out->img_size > 4096)
        return vt_seterr(e, "%s: image size %d must be a positive multiple of %d (at most 4096)", cfg->name,
                         out->img_size, out->img_multiple);
    if (out->in_chans > 64 || out->num_classes > 100000)
        return vt_seterr(e, "%s: %d input channels / %d classes out of range", cfg->name, out->in_chans,
                         out->num_classes);
    return 0;
}

float vt_model_drop_path(const vt_model_cfg *c, int i, int n) {
    return n > 1 ? c->drop_path * (float)i / (float)(n - 1) : 0.0f;
}

vt_tensor *vt_model_build(vt_graph *g, const vt_model_cfg *c, int B, vt_tensor **input) {
    int s[4] = {B, c->in_chans, c->img_size, c->img_size};
    vt_tensor *x = vt_input(g, "input", 4, s);
    if (input) *input = x;
    vt_tensor *y = c->build(g, c, x);
    if (y && (y->ndim != 2 || y->shape[0] != B || y->shape[1] != c->num_classes))
        return vt_fail(g, c->name, "network returned a tensor that is not (B, num_classes)");
    return y;
}

int vt_model_init_params(const vt_model_cfg *c, vt_params *P, uint64_t seed, vt_err *e) {
    vt_graph *g = vt_graph_new(P, 0, e);
    if (!g) return -1;
    vt_tensor *y = vt_model_build(g, c, 1, NULL);
    int rc = 0;
    if (!y) rc = vt_seterr(e, "%s", g->err.msg);
    vt_graph_free(g);
    if (rc == 0) vt_params_init(P, seed);
    return rc;
}
