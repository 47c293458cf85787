/* Fine-tuning from a checkpoint made for another head, input size or input channels (`vitc train --init-from`):
 * timm's checkpoint_filter_fn adaptations (head re-initialised, position tables resized bicubically, the input
 * convolution adapted as adapt_input_conv). */
#ifndef VITC_ADAPT_H
#define VITC_ADAPT_H

#include <stdio.h>

#include "vitc/error.h"
#include "vitc/tensor.h"

/* Resizes a channels-last h×w grid of C channels (src: h·w·C floats) to H×W (dst) as torch's
 * F.interpolate(mode="bicubic", align_corners=False) without antialias (cubic a = -0.75, border pixels repeated). */
void vt_resize_bicubic(const float *src, int h, int w, int C, float *dst, int H, int W);

/* Loads the weights at path into P (a fresh model with num_classes classes and in_chans input channels) for
 * fine-tuning: a head ("head" in the name) with another class count keeps its initialisation, position embeddings
 * (square grids, or to the model's pos_h × pos_w patch grid where that is not square; 0 × 0: none) and Swin
 * relative-position tables are resized bicubically, an RGB input convolution is adapted to in_chans (timm; see
 * adapt.c); one line per adapted tensor to log (NULL: none). Missing, unexpected or unexplained mis-shaped tensors are
 * errors naming them, and any error leaves P unchanged (but for a file shortened during the load, as vt_params_load
 * says); with nothing to adapt this is vt_params_load. */
int vt_adapt_load(vt_params *P, int num_classes, int in_chans, int pos_h, int pos_w, const char *path, FILE *log,
                  vt_err *e);

#endif
