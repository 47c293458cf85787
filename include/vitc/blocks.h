/* Block builders: compose ops into the common transformer pieces, creating parameters under a name prefix
 * with the official PyTorch state_dict names. */
#ifndef VITC_BLOCKS_H
#define VITC_BLOCKS_H

#include "vitc/ops.h"

/* Initialisation rules shared by the hosts (timm conventions). */
#define VT_INIT_W02 ((vt_init){VT_INIT_TRUNC_NORMAL, 0.02f}) /* trunc_normal(std=.02) */
#define VT_INIT_Z ((vt_init){VT_INIT_ZERO, 0.0f})
#define VT_INIT_1 ((vt_init){VT_INIT_ONE, 0.0f})

/* Joins prefix and suffix as "prefix.suffix" (or "suffix" when prefix is empty) into a static-size buffer. */
const char *vt_pname(char *buf, const char *prefix, const char *suffix);

/* Linear layer with params prefix.weight (out, in) [paper-counted] and prefix.bias (out) when bias != 0. */
vt_tensor *vt_linear_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int bias, vt_init winit);

/* LayerNorm over the last dim with params prefix.weight / prefix.bias (no weight decay). */
vt_tensor *vt_layernorm_p(vt_graph *g, const char *prefix, vt_tensor *x, float eps);

/* Conv2d (NCHW) with params prefix.weight (out, in/groups, k, k) [paper-counted] and optional prefix.bias;
 * PyTorch default init (U(±1/sqrt(fan_in))). */
vt_tensor *vt_conv2d_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int k, int stride, int pad, int groups,
                       int bias);

/* BatchNorm with prefix.{weight, bias, running_mean, running_var, num_batches_tracked}, channel axis `axis`. */
vt_tensor *vt_batchnorm_p(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum);

/* timm Mlp: prefix.fc1 (hidden) → GELU → prefix.fc2 (out). */
vt_tensor *vt_block_mlp(vt_graph *g, const char *prefix, vt_tensor *x, int hidden);

/* timm Attention on x (B, N, C): prefix.qkv (3C, bias optional) → softmax(q·kᵀ/√dh)·v → prefix.proj. */
vt_tensor *vt_block_mhsa(vt_graph *g, const char *prefix, vt_tensor *x, int heads, int qkv_bias);

/* ---- the papers' blocks: one section per file, added below ---- */

#endif
