/* Named model configs (timm-style registry) and the network builders. */
#ifndef VITC_MODEL_H
#define VITC_MODEL_H

#include "vitc/graph.h"

typedef struct vt_model_cfg vt_model_cfg;

/* ImageNet per-channel normalisation of x/255 (timm IMAGENET_DEFAULT_MEAN/STD), as initialisers. */
#define VT_IMAGENET_MEAN {0.485f, 0.456f, 0.406f}
#define VT_IMAGENET_STD {0.229f, 0.224f, 0.225f}

/* Builds the network on input x (B, in_chans, img, img) and returns logits (B, num_classes). */
typedef vt_tensor *(*vt_build_fn)(vt_graph *g, const vt_model_cfg *c, vt_tensor *x);

struct vt_model_cfg {
    const char *name;
    const char *alias;      /* optional second accepted name */
    const char *family;     /* host network, e.g. "vit" */
    vt_build_fn build;
    /* hierarchical hosts: builds the backbone and returns its four stage maps (B, C_i, H_i, W_i); NULL if none */
    int (*features)(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[4]);
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
    float drop_path;        /* stochastic depth (train graphs): block i of n drops its residual branches per sample
                             * with probability drop_path·i/(n-1), timm's linear rule; 0: off (every named config) */
    float mean[3], std[3];  /* input normalisation (pretrained cfg) */
    float crop_pct;         /* eval preprocessing (pretrained cfg): the shorter side is resized to floor(S / crop_pct),
                             * then centre-cropped to S (0: timm's default 0.875) */
    const char *dataset;    /* "fashion-mnist": the 28×28 configs (class names); NULL: ImageNet-1k class indices */
    /* ---- block options: one sub-struct per paper block, added below this line ---- */
    /* FLatten (src/blocks/flatten.c; Han et al. 2023; --attn flatten, flatten_deit_tiny) */
    struct {
        float focusing; /* focusing power p (<= 0: 3) */
        int kernel;     /* DWC kernel size, odd (<= 0: 5) */
    } flatten;
    /* hMHSA + cFFN (src/blocks/hmhsa.c, cffn.c; Xu et al. 2023; --attn hmhsa, --ffn cffn) */
    struct {
        int double_heads;                 /* hMHSA: heads doubled, width halved (A1; DeiT-T on, DeiT-S off) */
        int no_ihh, no_chh, chh_first;    /* hMHSA ablations (paper Tables 2-3) */
        float t;                          /* cFFN compaction ratio (<= 0: 2/3) */
        int r;                            /* cFFN training branches per factor (<= 0: 2) */
        int train_form;                   /* cFFN: 1 training form (conv+BN branches), 0 deployed (default) */
    } hc;
    struct { int dim_head; } msf; /* MSF/orig attention width per head (0: C/heads); probe and groups come
                                   * from the attn name: msf|orig[_g<N>[_block]] (SimpleViT, ViT --attn msf*) */
    /* Refiner (src/blocks/refiner.c, src/models/refined_vit.c; Zhou et al. 2021) */
    struct {
        int aux_head;        /* refined_vit: token-labelling aux_head; eval logits = head(cls) + 0.5·max_tokens aux */
        int apply_transform; /* refined_vit: paper mode, every block refines its own map (no shared blocks) */
        float expand;        /* DLA expansion ratio (shared blocks, --attn refiner); <= 0: 3 */
        float head_expand;   /* DLA expansion ratio in apply_transform mode (official head_expand; <= 0: 3) */
    } refiner;
    /* GroupMixFormer (src/blocks/gma.c, src/models/groupmixformer.c; Ge et al. 2023) */
    struct {
        int dims[4], depths[4];  /* stage widths (multiples of 10: 5 segments, 8 heads) and blocks per stage */
        float mlp_ratios[4];     /* MLP hidden = int(C·r) per stage */
    } gmf;
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

/* Drop-path probability of block i of n under c->drop_path (timm: linspace(0, drop_path, n)[i]). */
float vt_model_drop_path(const vt_model_cfg *c, int i, int n);

/* Builds the model's graph for a batch of B images: declares the input "input" and returns the logits. */
vt_tensor *vt_model_build(vt_graph *g, const vt_model_cfg *c, int B, vt_tensor **input);

/* Creates every parameter of the model in P (building a batch-1 graph once) and initialises it with seed. */
int vt_model_init_params(const vt_model_cfg *c, vt_params *P, uint64_t seed, vt_err *e);

/* ViT / DeiT host (timm VisionTransformer names). */
vt_tensor *vt_build_vit(vt_graph *g, const vt_model_cfg *c, vt_tensor *x);
extern const vt_model_table vt_models_vit;
/* ---- other host families: builder + table, added below this line ---- */

/* DeiT host with FLatten attention (src/models/vit_flatten.c; builder vt_build_vit; unofficial, spec-flatten §6). */
extern const vt_model_table vt_models_vit_flatten;
/* GroupMixFormer (official AILab-CVC names: conv_stem, patch_embed_layers, groupmixformer_backbone, norm4, head). */
vt_tensor *vt_build_groupmixformer(vt_graph *g, const vt_model_cfg *c, vt_tensor *x);
extern const vt_model_table vt_models_groupmixformer;
/* GroupMixFormer backbone only (no norm4/head): the four stage maps (B, C_i, H/2^(i+2), W/2^(i+2)); -1 on error. */
int vt_groupmixformer_features(vt_graph *g, const vt_model_cfg *c, vt_tensor *x, vt_tensor *maps[4]);

/* DeiT hosts with hMHSA + cFFN (src/models/vit_hmhsa_cffn.c; builder vt_build_vit). */
extern const vt_model_table vt_models_vit_hmhsa_cffn;
/* SimpleViT with GAP (MSF paper host `SimpleViTflexAtt`; spec-msf §4). */
vt_tensor *vt_build_simplevit(vt_graph *g, const vt_model_cfg *c, vt_tensor *x);
extern const vt_model_table vt_models_simplevit;

/* Refined-ViT host (Refiner_ViT_S/M/L, official Refiner_ViT names). */
vt_tensor *vt_build_refined_vit(vt_graph *g, const vt_model_cfg *c, vt_tensor *x);
extern const vt_model_table vt_models_refined_vit;

#endif
