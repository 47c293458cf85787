/* Helpers shared by the convolution files: conv.c (NCHW), dwconv_nhwc.c (channels-last depthwise) and
 * conv_nhwc.c (channels-last dense / grouped). */
#ifndef VITC_CONV_H
#define VITC_CONV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#if defined(__FMA__)
#include <immintrin.h>
#endif

#include "mathfn.h"
#include "vitc/ops.h"

/* y = max(y, 0) over n floats (NaN kept, as vt_relu), one thread. */
static inline void relu_n(float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = vt_relu_f(y[i]);
}

/* wt (C, Cout/G, k, k) = w (Cout, C/G, k, k) with each group's in and out channels swapped and its kernels
 * flipped: the weight of the transposed convolution, which gives a stride-1 conv's dX as a forward conv of dy. */
static inline void flip_weight(const float *w, float *wt, int C, int Cout, int G, int kk) {
    const int Cg = C / G, Og = Cout / G;
    for (int g = 0; g < G; g++)
        for (int ci = 0; ci < Cg; ci++)
            for (int co = 0; co < Og; co++) {
                float *d = wt + (((size_t)g * Cg + ci) * Og + co) * kk;
                const float *src = w + (((size_t)g * Og + co) * Cg + ci) * kk;
                for (int t = 0; t < kk; t++) d[t] = src[kk - 1 - t];
            }
}

/* w (C, K) -> wt (K, C); flip: tap k goes to row K − 1 − k (the dX correlation's kernel). */
static inline void transpose_w(const float *w, float *wt, int C, int K, int flip) {
    for (int c = 0; c < C; c++)
        for (int k = 0; k < K; k++) wt[(size_t)(flip ? K - 1 - k : k) * C + c] = w[(size_t)c * K + k];
}

/* Eight floats as one value (GNU C vector extension, gcc and clang; lowered to whatever vectors the target has):
 * the accumulators of conv.c's dw1_rows and dwconv_nhwc.c's strips. Written with `float a[VB]` arrays and `omp simd`
 * loops, gcc kept them in memory and loaded and stored each at every tap (perf: the loop bound by those round
 * trips). */
typedef float v8f __attribute__((vector_size(32))); /* never passed or returned (its ABI depends on the ISA) */

#if defined(__FMA__) /* one fused multiply-add (gcc's -std=c11 keeps a·b + c as two roundings and two instructions) */
#define V8_MADD(acc, a, b) ((acc) = _mm256_fmadd_ps((a), (b), (acc)))
#else
#define V8_MADD(acc, a, b) ((acc) += (a) * (b))
#endif

/* The shapes of a conv's input x, weight w and bias b (or "none") for its messages, 64 bytes each. */
static inline void conv_shape_strs(const vt_tensor *x, const vt_tensor *w, const vt_tensor *b, char *sx, char *sw,
                                   char *sb) {
    vt_shape_str(x, sx, 64);
    vt_shape_str(w, sw, 64);
    snprintf(sb, 64, "none");
    if (b) vt_shape_str(b, sb, 64);
}

/* The node of conv y (made by a conv builder) to fuse its ReLU into: inference graphs with their kernels; else
 * NULL, and the caller returns vt_relu(y). */
static inline vt_node *conv_relu_node(vt_graph *g, vt_tensor *y) {
    return !y || g->training || g->ref_kernels ? NULL : g->nodes[y->prod];
}

#endif
