/* The k×k patch gather behind vt_im2col and the channels-last conv (vt_conv2d_nhwc): one row per output position
 * (b, oh, ow), its C·k·k values in the (c, ky, kx) order of a PyTorch Conv2d weight, zero outside the input. */
#ifndef VITC_PATCHES_H
#define VITC_PATCHES_H

/* A patch gather's geometry: input (B, C, H, W) or, nhwc, (B, H, W, C); kernel k, stride s, padding p; output
 * positions Ho×Wo. */
typedef struct {
    int B, C, H, W, k, s, p, Ho, Wo;
    int nhwc; /* 1: x is (B, H, W, C); 0: (B, C, H, W) */
} vt_patch_geom;

/* cols (B·Ho·Wo, C·k·k) = the patches of x (threaded). */
void vt_patches_gather(const vt_patch_geom *q, const float *x, float *cols);

/* dx += the adjoint of the gather applied to dcols (threads own disjoint input rows). */
void vt_patches_scatter_add(const vt_patch_geom *q, const float *dcols, float *dx);

#endif
