/* conv.c's stride-1 depthwise plane kernel for other ops (the fused GMA aggregators, gmagg.c). */
#ifndef VITC_DWPLANE_H
#define VITC_DWPLANE_H

#include <stddef.h>

/* Floats of the padded-plane scratch of vt_dw_plane for an H×W plane and a k×k kernel; zero it once per thread:
 * every call with the same (H, W, k) leaves its border zero. */
size_t vt_dw_plane_scratch(int H, int W, int k);

/* y (H×W) = bias + the k×k correlation (k odd, zero padding k/2) of plane x with w (k·k floats). */
void vt_dw_plane(const float *x, int H, int W, int k, const float *w, float bias, float *y, float *scratch);

#endif
