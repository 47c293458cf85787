/* BatchNorm batch statistics shared by the BatchNorm ops (norm.c) and the fused BatchNorm + depthwise conv
 * (bnconv.c), so both give the same floats. */
#ifndef VITC_BNSTATS_H
#define VITC_BNSTATS_H

#include <stddef.h>
#include <stdint.h>

struct vt_graph;

/* A variance from E[x²] − E[x]²: round-off below 0 clamped to 0, a NaN kept (as PyTorch's: a diverged batch shows in
 * running_var). */
static inline double vt_bn_var_nonneg(double v) { return v < 0.0 ? 0.0 : v; }

/* Floats of vt_bn_batch_update's scratch (doubles: give it 8-byte aligned) for x (outer, C, inner). */
size_t vt_bn_batch_scratch(int64_t outer, int C, int inner);

/* Batch statistics of each channel of x (outer, C, inner): mu (mean) and rstd (1/sqrt(biased var + eps)), the same
 * on any thread count, over every replica's batch where sync is a graph with allsum set (else NULL: this batch's);
 * when rm is given, the running mean rm and variance rv (unbiased) blended with momentum as torch, and *nbt (NULL:
 * none) counted. */
void vt_bn_batch_update(const struct vt_graph *sync, const float *x, int outer, int C, int inner, double *scratch,
                        float eps, float momentum, float *mu, float *rstd, float *rm, float *rv, float *nbt);

#endif
