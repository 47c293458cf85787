/* Shared by the family files (src/models/<family>.c), not part of the public API. A family writes its named models
 * as one base initializer plus the fields each model changes (timm's `model_args = dict(...)`), so a later field
 * overrides the base's on purpose. */
#ifndef VITC_MODELS_FAMILY_H
#define VITC_MODELS_FAMILY_H

#include "vitc/model.h"

#pragma GCC diagnostic ignored "-Woverride-init" /* named configs override their family base on purpose */

/* The ImageNet-1k eval transform of DeiT's main.py (crop 0.875: 256 for 224; timm 0.4.12's DeiT cfgs say 0.9) and of
 * the PVT, Next-ViT and GroupMixFormer repositories: bicubic, ImageNet mean and std. */
#define VT_PRE_IMAGENET                                                                                           \
    {.mean = VT_IMAGENET_MEAN, .std = VT_IMAGENET_STD, .crop_pct = 0.875f, .interpolation = "bicubic",              \
     .dataset = "imagenet-1k"}

/* Number of entries of a static table. */
#define VT_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* timm's rule for weight decay: no decay on 1-D parameters (biases, norms) and on the names in skip (NULL-ended). */
int vt_no_decay_default(const vt_tensor *t, const char *const *skip);

/* Stage i's context for its attention modules (heads, qkv bias, LayerNorm eps, options), on a grid_h × grid_w token
 * grid after `lead` leading tokens; the host fills in what is specific to it (layout, windows, ...). */
vt_attn_ctx vt_stage_attn_ctx(const vt_model_cfg *c, int i, int grid_h, int grid_w, int lead);

/* Stage i's context for its FFNs (hidden width from the stage's MLP ratio, form, options). */
vt_ffn_ctx vt_stage_ffn_ctx(const vt_model_cfg *c, int i);

/* vt_family.deploy of a family whose only re-parameterised block is cFFN (ViT, PVT): its merge (BatchNorm eps
 * 1e-5), refused for a model without cFFN, whose training and deployed forms are the same. */
int vt_family_cffn_deploy(const vt_model_cfg *c, const vt_params *train, vt_params *dep, vt_err *e);

/* A four-stage family's `features` result once its backbone has filled maps (last: the backbone's output, unused):
 * 4, or -1 after a build error or a missing stage map. */
int vt_four_stage_maps(vt_graph *g, vt_tensor *last, vt_tensor *maps[VT_MAX_STAGES]);

#endif
