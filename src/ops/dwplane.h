/* Stride-1 depthwise kernels for other ops: planes (conv.c; GroupMixFormer's fused aggregators, gmagg.c and
 * gmasep.c, and its CRPE inside the attention's output op, gmamerge.c), channels-last rows (dwconv_nhwc.c; the fused PVTv2 FFN, ffn.c) and pixel ranges (dwconv_nhwc.c;
 * FLatten's DWC inside the linear attention, linattn.c). */
#ifndef VITC_DWPLANE_H
#define VITC_DWPLANE_H

#include <stddef.h>
#include <stdint.h>

/* Prefetches the n floats at x into the caches (one hint per 64-byte line): the next plane or run of an op whose
 * planes lie far apart (a stream the hardware prefetchers only find once it is read). */
static inline void vt_prefetch_floats(const float *x, int64_t n) {
    for (int64_t j = 0; j < n; j += 16) __builtin_prefetch(x + j, 0, 3);
}

/* Floats of the padded-plane scratch of vt_dw_plane for an H×W plane and a k×k kernel; zero it once per thread:
 * every call with the same (H, W, k) leaves its border zero. */
size_t vt_dw_plane_scratch(int H, int W, int k);

/* y (H×W) = bias + the k×k correlation (k odd, zero padding k/2) of plane x with w (k·k floats), stored straight
 * into y: stage a y not in cache in a cached plane and copy it (the stores stall on each missing line; conv.c). */
void vt_dw_plane(const float *x, int H, int W, int k, const float *w, float bias, float *y, float *scratch);

/* Floats of vt_dw_plane_bwd's scratch (at least vt_dw_plane's, whose calls may share it); zero it once per thread. */
size_t vt_dw_plane_bwd_scratch(int H, int W, int k);

/* vt_dw_plane's backward for one plane given dy (H×W): dx = (dx_add: +=) the input gradient (dx NULL: none), dw
 * (k·k floats, NULL: none) += the weight gradient. */
void vt_dw_plane_bwd(const float *x, const float *dy, int H, int W, int k, const float *w, float *dx, int dx_add,
                     float *dw, float *scratch);

/* Rows [oh0, oh1) of the channels-last k×k depthwise correlation (k odd, stride 1, zero padding k/2) of an H×W map
 * of C channels, plus bias (C floats, or NULL), then GELU when gelu, into y (pixels yl floats apart, row oh0 first).
 * x holds the map's rows from xr0 on (those the taps reach: [oh0 − k/2, oh1 + k/2) within [0, H)), pixels xl floats
 * apart; wt holds the taps as (k·k, C). */
void vt_dw_nhwc_rows(const float *x, ptrdiff_t xl, int xr0, int H, int W, int C, const float *wt, int k,
                     const float *bias, int gelu, float *y, ptrdiff_t yl, int oh0, int oh1);

/* Pixels [p0, p1) (raster order) of the same correlation over a whole H×W map x (k odd, stride 1, padding k/2,
 * bias or NULL, no GELU) into y (pixel p0 first, pixels yl floats apart). */
void vt_dw_nhwc_pixels(const float *x, ptrdiff_t xl, int H, int W, int C, const float *wt, int k,
                       const float *bias, float *y, ptrdiff_t yl, int64_t p0, int64_t p1);

#endif
