/* Ops other than the linear that add a residual in their own output pass (matmul.c's vt_residual fusion): the fused
 * eval FFNs (ffn.c) and cFFN's BatchNorm sum (norm.c); and the drop-path draws they share with droppath.c. */
#ifndef VITC_RESFUSE_H
#define VITC_RESFUSE_H

#include "vitc/graph.h"

/* Whether n is a vt_dwffn_eval or vt_ffn_eval node with no residual yet. */
int vt_ffn_fusable(const vt_node *n);

/* Records n's last input (just added by the caller) as the residual its output adds. */
void vt_ffn_take_residual(vt_node *n);

/* Whether n is a vt_batchnorm_sum node with no residual yet. */
int vt_bnsum_fusable(const vt_node *n);

/* Records n's last input (just added by the caller) as the residual its output adds, the sum of its BatchNorms
 * scaled per sample (samples: the output's first dim) by drop-path factors of probability drop (0: none). Returns -1
 * (error set) when the factors' buffer cannot be planned. */
int vt_bnsum_take_residual(vt_node *n, int samples, float drop);

/* Node n's drop-path factors of `samples` samples into m: 0 with probability p, else 1/(1 − p), drawn from the
 * graph's seed and the node's index (a forward and its backward, and every re-run, see the same draws). */
void vt_drop_path_draw(const vt_node *n, int samples, float p, float *m);

/* One row of a fused residual's backward: the residual's gradient row q (NULL: none) gets the row g of dy (set:
 * written, else added), then g is scaled in place by s, the sample's drop-path factor (1: left as it is). */
static inline void vt_res_grad_row(float *restrict g, float *restrict q, int set, float s, int C) {
    if (q) {
        if (set)
            for (int c = 0; c < C; c++) q[c] = g[c];
        else
#pragma omp simd
            for (int c = 0; c < C; c++) q[c] += g[c];
    }
    if (s != 1.0f)
#pragma omp simd
        for (int c = 0; c < C; c++) g[c] *= s;
}

#endif
