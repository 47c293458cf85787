/* Fine-tuning from a checkpoint made for another head or input size (`vitc train --init-from`): timm's
 * checkpoint_filter_fn adaptations (head re-initialised, position tables resized bicubically). */
#ifndef VITC_ADAPT_H
#define VITC_ADAPT_H

#include <stdio.h>

#include "vitc/error.h"
#include "vitc/tensor.h"

/* Resizes a channels-last h×w grid of C channels (src: h·w·C floats) to H×W (dst) as torch's
 * F.interpolate(mode="bicubic", align_corners=False) without antialias (cubic a = -0.75, border pixels repeated). */
void vt_resize_bicubic(const float *src, int h, int w, int C, float *dst, int H, int W);

/* Loads the safetensors file at path into P (a freshly initialised model with num_classes classes), adapting what
 * timm adapts when fine-tuning: a classifier tensor (name holding "head") whose class count differs keeps its fresh
 * initialisation; an absolute position embedding (1, p + h·w, C) whose grid differs is resized bicubically keeping
 * its p prefix (class/distillation) rows, as timm's resample_abs_pos_embed (ViT/DeiT, Refined-ViT, PVT, FLatten's
 * positional_encoding); a Swin relative_position_bias_table ((2w-1)², heads) is resized bicubically as timm's
 * resize_rel_pos_bias_table_simple. Fixed buffers (relative_position_index, masks) stay as the model computes them,
 * and the file's relative_position_index / attn_mask buffers that the model lacks are dropped (as timm's Swin filter).
 * Prints one line per adapted tensor to log (NULL: silent). Missing, unexpected or otherwise mis-shaped tensors and
 * non-finite values are errors naming them; on error P may be partly loaded. With nothing to adapt this is
 * vt_params_load. */
int vt_adapt_load(vt_params *P, int num_classes, const char *path, FILE *log, vt_err *e);

#endif
