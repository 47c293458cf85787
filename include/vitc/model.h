/* Named model configs (timm-style registry) and the network builders. */
#ifndef VITC_MODEL_H
#define VITC_MODEL_H

#include "vitc/graph.h"

typedef struct vt_model_cfg vt_model_cfg;

/* Builds the network on input x (B, in_chans, img, img) and returns logits (B, num_classes). */
typedef vt_tensor *(*vt_build_fn)(vt_graph *g, const vt_model_cfg *c, vt_tensor *x);

struct vt_model_cfg {
    const char *name;
    const char *alias;      /* optional second accepted name */
    const char *family;     /* host network, e.g. "vit" */
    vt_build_fn build;
    const char *description;
    int img_size, in_chans, num_classes;
    int img_multiple;       /* input sizes must be a multiple of this (patch size for ViTs) */
    int fixed_img;          /* 1: the architecture depends on the image size (e.g. positional tables) */
    /* plain ViT hosts */
    int patch, embed_dim, depth, num_heads;
    float mlp_ratio;
    int qkv_bias;
    float ln_eps;
    int class_token;        /* 1: prepend a class token and classify from it; 0: global average pool */
    const char *attn;       /* attention type: "mhsa", ... */
    const char *ffn;        /* FFN type: "mlp", ... */
    float mean[3], std[3];  /* input normalisation (pretrained cfg) */
    /* ---- block options: one sub-struct per paper block, added below this line ---- */
};

/* A host family's table of named configs (defined in its src/models/<family>.c). */
typedef struct vt_model_table {
    const vt_model_cfg *cfgs;
    int n;
} vt_model_table;

/* Number of registered models. */
int vt_model_count(void);

/* The i-th registered config. */
const vt_model_cfg *vt_model_at(int i);

/* Looks a model up by name or alias (NULL if unknown). */
const vt_model_cfg *vt_model_find(const char *name);

/* Copies cfg into out, applying overrides (<= 0 keeps the default); checks they are valid for the model. */
int vt_model_configure(const vt_model_cfg *cfg, int img_size, int in_chans, int num_classes, const char *attn,
                       const char *ffn, vt_model_cfg *out, vt_err *e);

/* Builds the model's graph for a batch of B images: declares the input "input" and returns the logits. */
vt_tensor *vt_model_build(vt_graph *g, const vt_model_cfg *c, int B, vt_tensor **input);

/* Creates every parameter of the model in P (building a batch-1 graph once) and initialises it with seed. */
int vt_model_init_params(const vt_model_cfg *c, vt_params *P, uint64_t seed, vt_err *e);

/* ViT / DeiT host (timm VisionTransformer names). */
vt_tensor *vt_build_vit(vt_graph *g, const vt_model_cfg *c, vt_tensor *x);
extern const vt_model_table vt_models_vit;
/* ---- other host families: builder + table, added below this line ---- */

#endif
