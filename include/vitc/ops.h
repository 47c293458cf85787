/* Op builders. Each adds one node to the graph (shape-checked at build time; on error it records a message
 * naming the op and shapes, and returns NULL). Shapes in comments are row-major; tokens are (B, N, C). */
#ifndef VITC_OPS_H
#define VITC_OPS_H

#include "vitc/graph.h"

/* ---- matmul.c ---- */
/* y = x·wᵀ + b: x (..., in), w (out, in) as PyTorch Linear, b (out) or NULL -> (..., out). */
vt_tensor *vt_linear(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b);
/* GELU(x·wᵀ + b) (exact erf) in one node: the activation runs in the GEMM's epilogue. */
vt_tensor *vt_linear_gelu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b);
/* GELU(x)·wᵀ + b (exact erf) in one node: the activation runs in the GEMM's prologue, so a train graph keeps only x
 * (an MLP's fc2 after a plain fc1 keeps one hidden-sized buffer instead of vt_linear_gelu's two). */
vt_tensor *vt_gelu_linear(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b);
/* max(x·wᵀ + b, 0) in one node (the ReLU in the GEMM's epilogue, as vt_linear_gelu). */
vt_tensor *vt_linear_relu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b);
/* x + h. When h is the output of a plain vt_linear that nothing has used yet, the add is fused into that linear
 * (no separate pass) and h itself may not be used again (a build error says so); otherwise a vt_add node. */
vt_tensor *vt_residual(vt_graph *g, vt_tensor *x, vt_tensor *h);
/* x + drop_path(h, drop) (train graphs; x + h in eval graphs), fused into h's linear as vt_residual fuses (the drop
 * applied per sample in its epilogue, dropped samples skip the product); otherwise vt_add and vt_drop_path nodes. */
vt_tensor *vt_residual_drop(vt_graph *g, vt_tensor *x, vt_tensor *h, float drop);
/* vt_linear's x·wᵀ + b transposed: x (..., K), w (M, K), b (M) or NULL -> (M, ...) (features first). */
vt_tensor *vt_linear_t(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b);
/* Batched alpha·op(a)·op(b): a (..., M, K) (or (..., K, M) if ta), b (..., K, N) (or (..., N, K) if tb);
 * batch dims equal, or b has exactly 2 dims (shared by every batch). */
vt_tensor *vt_matmul(vt_graph *g, vt_tensor *a, vt_tensor *b, int ta, int tb, float alpha);
/* Plain triple-loop C += alpha·op(A)·op(B) (row-major, double accumulation); the reference for tests. */
void vt_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc);

/* ---- binary.c (numpy broadcasting over up to VT_MAXDIM dims, aligned at the last dim) ---- */
/* a + b. */
vt_tensor *vt_add(vt_graph *g, vt_tensor *a, vt_tensor *b);
/* a - b. */
vt_tensor *vt_sub(vt_graph *g, vt_tensor *a, vt_tensor *b);
/* a * b (elementwise). */
vt_tensor *vt_mul(vt_graph *g, vt_tensor *a, vt_tensor *b);
/* s * x + c for constants s, c. */
vt_tensor *vt_affine(vt_graph *g, vt_tensor *x, float s, float c);
/* s * x. */
vt_tensor *vt_scale(vt_graph *g, vt_tensor *x, float s);

/* ---- droppath.c ---- */
/* Drop-path (stochastic depth) over the first dim: in train graphs each sample is zeroed with probability p and
 * scaled by 1/(1-p) otherwise (masks from g->seed); in eval graphs, or with p = 0, returns x itself (no node). */
vt_tensor *vt_drop_path(vt_graph *g, vt_tensor *x, float p);

/* ---- loss.c ---- */
/* Mean cross-entropy of logits (B, K) against labels (B,) holding class indices as floats, with label
 * smoothing eps (target = (1-eps)·onehot + eps/K) -> shape (1,). */
vt_tensor *vt_cross_entropy(vt_graph *g, vt_tensor *logits, vt_tensor *labels, float smoothing);
/* Soft-target cross-entropy (timm SoftTargetCrossEntropy): logits (B, K), targets (B, K) -> (1,) =
 * mean over b of sum_k -t_bk log softmax(logits_b)_k; differentiable in both; 0 MACs. */
vt_tensor *vt_soft_cross_entropy(vt_graph *g, vt_tensor *logits, vt_tensor *targets);
/* Sum of all elements -> shape (1,). */
vt_tensor *vt_sum(vt_graph *g, vt_tensor *x);
/* Mean over positions of the cosine similarity along dim 1 of a and b (B, H, ...), two tensors of one shape: torch's
 * CosineSimilarity(dim=1)(a, b).mean() (norms clamped at 1e-8) -> shape (1,); 0 MACs. */
vt_tensor *vt_cosine_mean(vt_graph *g, vt_tensor *a, vt_tensor *b);

/* ---- norm.c ---- */
/* LayerNorm over the last dim with eps; w, b (C) or NULL (no affine). */
vt_tensor *vt_layernorm(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, float eps);
/* LayerNorm over axis 1 of x (B, C, ...): each position's C channels (tokens of a channel-first map, no transpose),
 * then act (VT_RELU, VT_RELU6, VT_HARDSWISH; -1: none) in the same pass; w, b (C) or NULL. */
vt_tensor *vt_layernorm_cf(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, float eps, int act);
/* BatchNorm with channel axis `axis` (1 for NCHW, ndim-1 for channels-last); statistics over all other dims.
 * Train graphs use batch statistics and update rmean/rvar (unbiased var) with momentum and add 1 to nbt
 * (may be NULL); eval graphs use rmean/rvar. w, b may be NULL. */
vt_tensor *vt_batchnorm(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, vt_tensor *rmean, vt_tensor *rvar,
                        vt_tensor *nbt, int axis, float eps, float momentum);
/* vt_batchnorm followed by the activation act (VT_RELU, VT_RELU6 or VT_HARDSWISH; -1: none) in the same op: one pass
 * and no kept BatchNorm output (backward recomputes it from x). */
vt_tensor *vt_batchnorm_act(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, vt_tensor *rmean, vt_tensor *rvar,
                            vt_tensor *nbt, int axis, float eps, float momentum, int act);
/* vt_batchnorm_act on x whose channels are `sets` runs of C / sets, each with its own tensors (the BatchNorms of a
 * concat, on the concat: its inputs' producers write one tensor): pt[k·sets + j] is kind k (weight, bias,
 * running_mean, running_var, num_batches_tracked; each kind given for every set or none) of set j; sets <= 4. */
vt_tensor *vt_batchnorm_act_sets(vt_graph *g, vt_tensor *x, int sets, vt_tensor *const *pt, int axis, float eps,
                                 float momentum, int act);
/* y = oscale·vt_batchnorm(x) + r (r NULL: none; else x's shape) in one op: no separate scale and add passes. */
vt_tensor *vt_batchnorm_res(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, vt_tensor *rmean, vt_tensor *rvar,
                            vt_tensor *nbt, int axis, float eps, float momentum, float oscale, vt_tensor *r);
/* y (..., C) = Σ_b BN_b(z[..., b·C, (b + 1)·C)) over r channel groups of z (..., r·C) (1 <= r <= 3), each group's
 * vt_batchnorm (channels-last) with t[5b .. 5b + 4] = weight, bias, running_mean, running_var, num_batches_tracked. */
vt_tensor *vt_batchnorm_sum(vt_graph *g, vt_tensor *z, int r, vt_tensor *const *t, float eps, float momentum);

/* ---- dla.c ---- */
/* The Refiner's DLA at inference in one op, tile by tile in cache: out = A ⊙ (s3 ⊙ W_pro·D + t3 + a) + B with
 * D = relu6(s2 ⊙ dw3x3(relu6(s1 ⊙ W_exp·a + t1)) + t2) on maps a (B, H, Nr, Nc); w_exp (He, H, 1, 1), w_dw
 * (He, 1, 3, 3), w_pro (H, He, 1, 1); bn1..bn3 (2, C) BatchNorm scales and shifts (rows s, t; vt_bn_scale_shift);
 * aff (2, H) rows A, B, or NULL (A = 1, B = 0). Eval graphs only (no backward). */
vt_tensor *vt_dla_eval(vt_graph *g, vt_tensor *a, vt_tensor *w_exp, vt_tensor *w_dw, vt_tensor *w_pro,
                       vt_tensor *bn1, vt_tensor *bn2, vt_tensor *bn3, vt_tensor *aff);

/* ---- ffn.c ---- */
/* PVTv2's FFN at inference in one op: y (B, H·W, out) = GELU(DW(x·w1ᵀ + b1) + db)·w2ᵀ + b2 for x (B, H·W, C), w1
 * (hid, C), b1 (hid), DW the 3×3 depthwise conv (padding 1) with dw (hid, 1, 3, 3), db (hid), w2 (out, hid), b2 (out)
 * or NULL; band by band, the hidden map never in memory. Eval graphs only (no backward). */
vt_tensor *vt_dwffn_eval(vt_graph *g, vt_tensor *x, int H, int W, vt_tensor *w1, vt_tensor *b1, vt_tensor *dw,
                         vt_tensor *db, vt_tensor *w2, vt_tensor *b2);
/* Whether vt_dwffn_eval runs faster than the op chain for R rows (B·H·W), C input features, hidden width hid and out
 * features (an inference graph whose weights fit beside the bands in a core's L2, not a bf16 plan on an AMX CPU over
 * at most 12544 rows: a measured rule). */
int vt_dwffn_wanted(const vt_graph *g, int64_t R, int C, int hid, int out);
/* The plain MLP at inference in one op: y (.., out) = GELU(x·w1ᵀ + b1)·w2ᵀ + b2 for x (.., C), w1 (hid, C), b1 (hid),
 * w2 (out, hid), b2 (out) or NULL; a band of rows at a time, the hidden rows in cache. Eval graphs only. */
vt_tensor *vt_ffn_eval(vt_graph *g, vt_tensor *x, vt_tensor *w1, vt_tensor *b1, vt_tensor *w2, vt_tensor *b2);
/* Whether vt_ffn_eval runs faster than the op chain over R rows of C features, hidden width hid and out features
 * (an inference graph whose weights fit a core's L2 and whose hidden map would not stay in cache, not a bf16 plan on
 * an AMX CPU: a measured rule). */
int vt_ffn_wanted(const vt_graph *g, int64_t R, int C, int hid, int out);

/* ---- gmagg.c ---- */
/* GroupMixFormer's aggregators at inference in one op: Z (3B, 4s, N) = [hswish(BN0(X_0)) | hswish(BN_j(PW_j·DW_j(
 * X_j))), j = 1..3] for segment j of Q, K and V (the 3B images type·B + b) read from qkv (3C, B, N = H·W), C = 5s;
 * dw3, dw5, dw7 (s, 1, k, k); pw (3, s, s) the pointwise weights (out, in); bn (4, 2, s) the BatchNorms' scales and
 * shifts (vt_bn_scale_shift). Eval graphs only (no backward). */
vt_tensor *vt_gma_aggregate_eval(vt_graph *g, vt_tensor *qkv, int H, int W, vt_tensor *dw3, vt_tensor *dw5,
                                 vt_tensor *dw7, vt_tensor *pw, vt_tensor *bn);

/* ---- bnconv.c ---- */
/* y = the depthwise k×k conv (k odd, stride 1, padding k/2, no bias; w (C, 1, k, k)) of act(BatchNorm(x)) for x
 * (B, C, H, W): batch statistics in training graphs (the running ones updated, nbt (or NULL) counted, as
 * vt_batchnorm_act), running ones otherwise; act VT_RELU, VT_RELU6, VT_HARDSWISH or -1. The normalised map is never
 * stored: forward and backward recompute it per plane. */
vt_tensor *vt_bnact_dwconv(vt_graph *g, vt_tensor *x, vt_tensor *bw, vt_tensor *bb, vt_tensor *rm, vt_tensor *rv,
                           vt_tensor *nbt, float eps, float momentum, int act, vt_tensor *w);

/* y = W·act(BatchNorm(x)), the 1×1 conv (no bias; w (O, C, 1, 1)) of vt_bnact_dwconv's activated map, y (B, O, H, W);
 * statistics and act as there. The normalised map is never stored: forward and backward recompute it per tile. */
vt_tensor *vt_bnact_pwconv(vt_graph *g, vt_tensor *x, vt_tensor *bw, vt_tensor *bb, vt_tensor *rm, vt_tensor *rv,
                           vt_tensor *nbt, float eps, float momentum, int act, vt_tensor *w);

/* z = scale·BN_a(BN_3(t) + a), t and a (B, C, H, W), bn3/bna the BatchNorms' 5 tensors each, batch statistics (training
 * graphs only, running ones updated); the middle map is never stored (src/ops/bnpair.c). */
vt_tensor *vt_bn_res_bn(vt_graph *g, vt_tensor *t, vt_tensor *const *bn3, vt_tensor *a, vt_tensor *const *bna,
                        float eps, float momentum, float scale);

/* ---- gmasep.c ---- */
/* GroupMixFormer's separable aggregator conv (depthwise k×k, k odd, padding k/2, then pointwise 1×1; no biases) on
 * segment seg of qkv (3C, B, N = H·W), C = 5s, read in place: seg 1-3, the 3B images type·B + b of cin = s channels,
 * y (3B, s, H, W); seg 4, the B images [Q_4 | K_4 | V_4] of cin = 3s channels, y (B, s, H, W); dw (cin, 1, k, k),
 * pw (s, cin, 1, 1). */
vt_tensor *vt_gma_separable(vt_graph *g, vt_tensor *qkv, int seg, int H, int W, vt_tensor *dw, vt_tensor *pw);
/* Segments 1-3's separable convs (weights dw[j], pw[j] of segment j + 1) and segment 0's planes in one output y (3B,
 * 4s, H, W): channels [0, s) segment 0 copied, [j·s, (j + 1)·s) segment j's conv (the aggregator branches' concat). */
vt_tensor *vt_gma_separable_cat(vt_graph *g, vt_tensor *qkv, int H, int W, vt_tensor *const *dw, vt_tensor *const *pw);

/* ---- gmamerge.c ---- */
/* GroupMixFormer's attention output y (B, N, A + T) = [f + q ⊙ crpe(v) | u]: f, q (B, A, H·W), v (B, A, ...), u (B, T,
 * H·W) channel-first; crpe: nv ≤ 10 runs of c_j channels (Σ = A), each a stride-1 depthwise conv, weight w[j] (c_j, 1,
 * k, k), k odd, zero padding k/2, bias b[j] (c_j, required). */
vt_tensor *vt_gma_merge(vt_graph *g, vt_tensor *f, vt_tensor *q, vt_tensor *v, int H, int W, vt_tensor **w,
                        vt_tensor **b, int nv, vt_tensor *u);

/* ---- activation.c ---- */
typedef enum { VT_GELU, VT_RELU, VT_RELU6, VT_HARDSWISH, VT_SOFTPLUS, VT_POW, VT_SIGMOID } vt_unary_kind;
/* Elementwise f(x); p is the exponent for VT_POW (x^p; x must be > 0 unless p is an integer). */
vt_tensor *vt_unary(vt_graph *g, vt_tensor *x, vt_unary_kind kind, float p);
/* Exact (erf) GELU. */
vt_tensor *vt_gelu(vt_graph *g, vt_tensor *x);
/* max(x, 0). */
vt_tensor *vt_relu(vt_graph *g, vt_tensor *x);

/* ---- softmax.c ---- */
/* Softmax over `axis` (negative counts from the end). */
vt_tensor *vt_softmax(vt_graph *g, vt_tensor *x, int axis);
/* softmax(x over the last axis) + c·r, r of x's shape, in one pass (equal to vt_add(softmax, vt_scale(r, c))). */
vt_tensor *vt_softmax_res(vt_graph *g, vt_tensor *x, vt_tensor *r, float c);

/* ---- conv.c (NCHW), conv_nhwc.c (channels-last), dwconv_nhwc.c (channels-last depthwise) ---- */
/* 2-D convolution, NCHW: x (B, Cin, H, W), w (Cout, Cin/groups, kh, kw) as PyTorch, b (Cout) or NULL. */
vt_tensor *vt_conv2d(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad, int groups);
/* Dense or grouped k×k convolution on channels-last maps: x (B, H, W, C), w (Cout, C/groups, k, k) (PyTorch's
 * layout), b (Cout) or NULL -> (B, Ho, Wo, Cout); oneDNN's convolution where the GEMM plan has one. */
vt_tensor *vt_conv2d_nhwc(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad, int groups);
/* vt_relu(vt_conv2d(...)) and vt_relu(vt_conv2d_nhwc(...)); in inference graphs (without ref_kernels) one node, the
 * ReLU applied in the conv's output pass (a oneDNN post-op, or the bias loop). */
vt_tensor *vt_conv2d_relu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad, int groups);
vt_tensor *vt_conv2d_nhwc_relu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad,
                               int groups);
/* Depthwise 2-D convolution on channels-last maps: x (B, H, W, C), w (C, 1, kh, kw), b (C) or NULL; stride 1. */
vt_tensor *vt_dwconv_nhwc(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int pad);
/* vt_dwconv_nhwc over channels [c0, c0 + C) of x (B, H, W, L) (C from w, read in place: no slice), plus r (NULL or
 * the output's B·Ho·Wo·C values, any shape ending in C) added to the result. */
vt_tensor *vt_dwconv_nhwc_ex(vt_graph *g, vt_tensor *x, int c0, vt_tensor *w, vt_tensor *b, int pad, vt_tensor *r);
/* GELU(vt_dwconv_nhwc(x, w, b, pad)): in inference graphs one op (on oneDNN, GELU its erf-form post-op: within
 * 1e-6·max(1, |y|) of vt_gelu's), in train graphs the two. */
vt_tensor *vt_dwconv_nhwc_gelu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int pad);

/* ---- pool.c ---- */
/* Mean over `axis` (removed from the shape). */
vt_tensor *vt_mean(vt_graph *g, vt_tensor *x, int axis);
/* Arguments of vt_avgpool2d_ex: PyTorch's AvgPool2d(k, s, pad, ceil_mode, count_include_pad) on NCHW or (nhwc)
 * channels-last (B, H, W, C) maps. */
typedef struct vt_pool_args {
    int k, s, pad;
    int ceil_mode;         /* output size rounded up (the last window clipped at the border) */
    int count_include_pad; /* divisor counts the padding (0: only the real elements of each window) */
    int nhwc;
} vt_pool_args;
/* Average pooling with PyTorch's ceil_mode / count_include_pad rules, in either layout (output in x's layout). */
vt_tensor *vt_avgpool2d_ex(vt_graph *g, vt_tensor *x, const vt_pool_args *a);

/* ---- shape.c ---- */
/* Concatenation of n tensors along `axis` (other dims equal); an input may appear more than once (tiling), its
 * gradient then sums every copy's. */
vt_tensor *vt_concat(vt_graph *g, vt_tensor **xs, int n, int axis);
/* x[..., start:start+len, ...] along `axis`: a view (vt_view_range) when the range is contiguous (every dim before
 * `axis` is 1), else a copy. */
vt_tensor *vt_slice(vt_graph *g, vt_tensor *x, int axis, int start, int len);
/* Axis permutation: out.shape[i] = x.shape[perm[i]]. */
vt_tensor *vt_permute(vt_graph *g, vt_tensor *x, const int *perm);
/* vt_permute of the range [start, start + len) of x's axis `axis` only (the slice and the permute in one pass); axis
 * -1: all of x, as vt_permute. */
vt_tensor *vt_permute_slice(vt_graph *g, vt_tensor *x, const int *perm, int axis, int start, int len);
/* (B, N, Ctot) channels [off, off + H·dh) -> (B, H, N, dh), head h taking channels off + h·dh + [0, dh). */
vt_tensor *vt_split_heads(vt_graph *g, vt_tensor *x, int off, int H, int dh);
/* (B, H, N, dh) -> (B, N, H·dh) with channel h·dh + c. */
vt_tensor *vt_merge_heads(vt_graph *g, vt_tensor *x);
/* Prepends k tokens tok (1, k, C) to x (B, N, C) -> (B, k + N, C) (class/distillation tokens). */
vt_tensor *vt_prepend_tokens(vt_graph *g, vt_tensor *x, vt_tensor *tok);

/* ---- attention.c ---- */
/* Arguments of vt_attention_ex. Channel offsets: queries (and the MSF probe) in q, keys and values in kv. */
typedef struct vt_attn_args {
    int heads, dim;                    /* dim = heads·dh channels per range; output (B, N, dim) */
    int q_off, k_off, v_off, p_off;    /* head h of a range at offset o takes channels o + h·dh + [0, dh) */
    float scale;                       /* logits = scale·q·kᵀ (msf: scale·(q·kᵀ − 0.5‖k‖²)) */
    int msf;                           /* 1: MSF Gaussian-kernel logits and o = P·v − p (probe p in q at p_off) */
    vt_tensor *bias;                   /* NULL, or added to the logits: (H, N, M) shared, or (B, H, N, M) */
    vt_tensor *mask;                   /* NULL, or (nW, N, M) added to batch entry b as mask[b % nW]; no grad */
    vt_tensor **probs;                 /* non-NULL in a graph with export_maps set: receives a (B, H, N, M) graph
                                        * output into which forward writes its probabilities (else set to NULL) */
} vt_attn_args;
/* General fused attention: q (B, N, Lq), kv (B, M, Lkv) or NULL (kv = q, self-attention on a packed projection);
 * softmax(logits + bias + mask)·v per head, heads merged -> (B, N, dim). A shared bias's gradient sums the batch. */
vt_tensor *vt_attention_ex(vt_graph *g, vt_tensor *q, vt_tensor *kv, const vt_attn_args *a);
/* CSwin's two stripe branches on qkv (B, S·S, 3C): heads [0, h/2) in S × s, [h/2, h) in s × S stripes, per stripe
 * softmax(scale·q·kᵀ)·v + LePE(v) (3x3 depthwise w (C, 1, 3, 3), b (C), zero outside the stripe) -> (B, S·S, C). */
vt_tensor *vt_stripe_attention(vt_graph *g, vt_tensor *qkv, int S, int s, int heads, float scale, vt_tensor *w,
                               vt_tensor *b);

/* ---- ops added for the papers' blocks: one section per file, added below ---- */

/* ---- hattn.c (hMHSA) ---- */
/* Arguments of vt_hallucinated_attention. */
typedef struct vt_hattn_args {
    int heads, dim;           /* h (even) heads of d = dim/h channels; output (B, N, dim) */
    int q_off, k_off, v_off;  /* queries in q and keys in kv: h/2 heads (dim/2 channels) at q_off and k_off; values
                               * in kv: h heads (dim channels) at v_off */
    int klead, kh, kw;        /* the keys: klead tokens that bypass IHH, then a kh × kw grid (row-major) */
    float scale;              /* computed logits scale·q·kᵀ */
    vt_tensor *ihh_w, *ihh_b; /* IHH, a 3x3 conv per computed head over the key grid: (h/2, 1, 3, 3), (h/2) */
    vt_tensor *chh_w, *chh_b; /* CHH, a 1x1 conv over the computed heads: (h/2, h/2, 1, 1), (h/2) */
    int chh_first;            /* 1: CHH before IHH (a weight NULL: that stage is left out; a bias NULL: none) */
    vt_tensor **probs;        /* as vt_attn_args.probs: (B, h, N, M), computed heads first */
} vt_hattn_args;
/* hMHSA's attention (Xu et al. 2023): h/2 computed maps scale·q·kᵀ, h/2 hallucinated ones from them (IHH then CHH,
 * or as chosen), softmax of all h, ·v per head, heads merged -> (B, N, dim). q (B, N, Lq); kv (B, M, Lkv) or NULL
 * (keys and values in q). */
vt_tensor *vt_hallucinated_attention(vt_graph *g, vt_tensor *q, vt_tensor *kv, const vt_hattn_args *a);

/* ---- focus.c (FLatten) ---- */
/* Focusing power over the last dim: y = x^p · ‖x‖₂ / ‖x^p‖₂ per row (x > 0 elementwise, p > 0). */
vt_tensor *vt_focus_pow(vt_graph *g, vt_tensor *x, float p);
/* FLatten's fused kernel: vt_focus_pow of u = (ReLU(x + pe) + 1e-6) / softplus(scale); x (..., N, C), pe (N·C
 * values, broadcast over the batch) or NULL, scale (C values); scale NULL (and pe NULL): u = x. */
vt_tensor *vt_focus(vt_graph *g, vt_tensor *x, vt_tensor *pe, vt_tensor *scale, float p);
/* vt_focus on channels [off, off + C) of x (..., N, L) (e.g. the q or k range of a packed qkv, read in place)
 * -> (..., N, C); the gradient goes to those channels only. */
vt_tensor *vt_focus_ex(vt_graph *g, vt_tensor *x, int off, int C, vt_tensor *pe, vt_tensor *scale, float p);

/* ---- linattn.c (FLatten) ---- */
/* Multi-head linear attention, heads merged -> (B, N, C): per head h (d = C/heads channels h·d + [0, d)),
 * o_i = (q_i·KV) / (q_i·k̄ + 1e-6) with KV = kᵀv/n and k̄ the mean key. q (B, N, C), k (B, n, C) (positive, e.g.
 * vt_focus outputs), v (B, n, Lv) with the values at channels [v_off, v_off + C); add (B, Na, C), Na <= N, or NULL:
 * added to the last Na output rows. v may share q's or k's tensor only with a disjoint channel range; add shares
 * memory with none of them. */
vt_tensor *vt_linear_attention(vt_graph *g, vt_tensor *q, vt_tensor *k, vt_tensor *v, int heads, int v_off,
                               vt_tensor *add);
/* Arguments of vt_linear_attention_ex. */
typedef struct {
    int heads;
    int q_off, k_off, v_off; /* first channel of q, k and the values inside their tensors' last dim */
    int C;                   /* channels of q, k and the values; 0: q's last dim */
    vt_tensor *add;          /* (B, Na, C), Na <= N, added to the last Na output rows, or NULL */
    vt_tensor *scale;        /* FLatten's focus: q, k <- vt_focus(q), vt_focus(k + pe) with this (C) scale; or NULL */
    vt_tensor *pe;           /* with a scale: the keys' positional encoding (n·C values), or NULL */
    float p;                 /* with a scale: the focusing exponent (> 0) */
    /* inference graphs, instead of add: FLatten's DWC, the depthwise conv (stride 1, padding K/2) of the values' last
     * grid_h·grid_w rows as a grid_h × grid_w map, added to the last grid_h·grid_w output rows; weight (d, 1, K, K)
     * and bias (d) shared by the heads (channel c takes kernel c mod d), computed per block of rows in cache */
    vt_tensor *dwc_w, *dwc_b;
    int grid_h, grid_w;
    vt_tensor *lepe_w, *lepe_b; /* with the DWC, or NULL: a per-channel 3x3 (C, 1, 3, 3) and bias (C) on the same map
                                 * added too (FLatten-CSwin's LePE), its taps summed into the DWC's (K >= 3) */
} vt_linattn_args;
/* vt_linear_attention on channel ranges of q (B, N, Lq), k (B, n, Lk), v (B, n, Lv) (e.g. one packed qkv: v may
 * share q's or k's tensor with a disjoint range), optionally with FLatten's focus fused in (never stored). */
vt_tensor *vt_linear_attention_ex(vt_graph *g, vt_tensor *q, vt_tensor *k, vt_tensor *v, const vt_linattn_args *a);

/* ---- grouped.c (MSF) ---- */
/* Grouped projection (MSF GroupLinear): x (..., Din), w (E, Din/G), b (E) or NULL -> (..., E). Group gi reads input
 * channels [gi·Din/G, (gi+1)·Din/G) and weight rows gi·E/G + e; output channel e·G + gi (interleave) or
 * gi·E/G + e (block); b is added in output order (Swin-MSF's qkvp bias). MACs: E·Din/G per row. */
vt_tensor *vt_group_linear(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int groups, int interleave);
/* Constant 2-D sin-cos position embedding (1, h·w, dim) of SimpleViT: token y·w + x gets [sin(xω), cos(xω),
 * sin(yω), cos(yω)] with ω_c = temperature^(−c/(dim/4 − 1)); no inputs, no gradient. */
vt_tensor *vt_posemb_sincos2d(vt_graph *g, int h, int w, int dim, float temperature);

/* ---- maxreduce.c ---- */
/* Maximum over `axis` (removed from the shape); the gradient goes to the first arg-max (torch.max(dim)). */
vt_tensor *vt_max(vt_graph *g, vt_tensor *x, int axis);

/* ---- window.c (Swin, CSwin, PVT gathers; 0 MACs) ---- */
/* x (B, H, W, C) zero-padded at the bottom/right to multiples of (wh, ww), rolled by (−sh, −sw) (torch.roll), cut
 * into windows -> (B·nWh·nWw, wh·ww, C), windows ordered (image, row, col), tokens row-major; 0 <= sh < Hp etc. */
vt_tensor *vt_window_partition(vt_graph *g, vt_tensor *x, int wh, int ww, int sh, int sw);
/* vt_window_partition of the first `width` channels (0: all) of each of the `blocks` equal channel blocks of x
 * (CSwin's vertical branch: the q, k and v halves of a packed qkv) -> (B·nW, wh·ww, blocks·width). */
vt_tensor *vt_window_partition_sel(vt_graph *g, vt_tensor *x, int wh, int ww, int sh, int sw, int blocks, int width);
/* Inverse of vt_window_partition for an H×W map: windows (B·nW, wh·ww, C) -> (B, H, W, C) (rolled back by
 * (+sh, +sw), padding cropped). Rectangular windows are CSwin's stripes, e.g. (H, 1) or (2, W). */
vt_tensor *vt_window_reverse(vt_graph *g, vt_tensor *xw, int H, int W, int wh, int ww, int sh, int sw);
/* vt_window_reverse(xw) + r in one pass (r: the map's B·H·W·C values, channels last; Swin's residual). */
vt_tensor *vt_window_reverse_add(vt_graph *g, vt_tensor *xw, vt_tensor *r, int H, int W, int wh, int ww, int sh,
                                 int sw);
/* The channel concatenation of vt_window_reverse(xw) (first) and t (the map's B·H·W·C' values, channels last) in
 * one pass -> (B, H, W, C + C') (CSwin's two stripe branches). */
vt_tensor *vt_window_reverse_cat(vt_graph *g, vt_tensor *xw, vt_tensor *t, int H, int W, int wh, int ww, int sh,
                                 int sw);
/* Constant Swin shift mask (nW, wh·ww, wh·ww) for the padded Hp×Wp map: 0 for token pairs of the same region,
 * −100 otherwise (regions as Microsoft's/torchvision's attn_mask; see vt_window_shift_mask_fill). No inputs. */
vt_tensor *vt_window_shift_mask(vt_graph *g, int Hp, int Wp, int wh, int ww, int sh, int sw);
/* Fills the Swin shift mask (nW·N·N floats, N = wh·ww) into mask; returns -1 (nothing written) when Hp, Wp are not
 * positive multiples of wh, ww or a shift is outside [0, Hp) x [0, Wp). */
int vt_window_shift_mask_fill(float *mask, int Hp, int Wp, int wh, int ww, int sh, int sw);
/* Swin relative position bias: table ((2wh−1)(2ww−1), H) -> (H, N, N), N = wh·ww, bias[h, i, j] = table[idx(i, j), h]
 * with the canonical idx (see vt_rel_pos_index_fill); backward scatter-adds into the table's gradient. */
vt_tensor *vt_rel_pos_bias(vt_graph *g, vt_tensor *table, int wh, int ww);
/* Fills Swin's relative_position_index (N×N floats, N = wh·ww): (y_i − y_j + wh − 1)·(2ww − 1) + x_i − x_j + ww − 1
 * for tokens i = y_i·ww + x_i. */
void vt_rel_pos_index_fill(float *idx, int wh, int ww);
/* Swin patch merging gather: x (B, H, W, C) -> (B, ⌈H/2⌉·⌈W/2⌉, 4C), blocks x[0::2, 0::2], x[1::2, 0::2],
 * x[0::2, 1::2], x[1::2, 1::2] per output token (zeros past an odd edge, as torchvision pads). */
vt_tensor *vt_patch_merge(vt_graph *g, vt_tensor *x);
/* Patches p×p of x (B, H, W, C) (H, W multiples of p) -> (B, (H/p)·(W/p), C·p·p) in (c, ky, kx) order (p = 1: a
 * view): vt_linear with a Conv2d weight (Cout, C, p, p) viewed as (Cout, C·p·p) is then the k = s = p conv. */
vt_tensor *vt_patchify_nhwc(vt_graph *g, vt_tensor *x, int p);

/* ---- im2col.c (PVT patch embeds; 0 MACs) ---- */
/* k×k patches (stride s, zero padding pad) of x (B, C, H, W), or of x (B, H, W, C) when nhwc, -> (B, Ho, Wo, C·k·k)
 * in (c, ky, kx) order, Ho = ⌊(H + 2·pad − k)/s⌋ + 1: vt_linear with a Conv2d weight (Cout, C, k, k) viewed as
 * (Cout, C·k·k) is then the convolution, with its output already channels-last (tokens). */
vt_tensor *vt_im2col(vt_graph *g, vt_tensor *x, int k, int stride, int pad, int nhwc);

/* ---- resize.c (PVT v1's position embeddings at other input sizes; 0 MACs) ---- */
/* Bilinear resize of x (B, H, W, C) to (B, Ho, Wo, C) as PyTorch's F.interpolate(mode="bilinear",
 * align_corners=False) given the output size: source coordinate (o + 0.5)·in/out − 0.5, clamped at 0. */
vt_tensor *vt_resize_bilinear(vt_graph *g, vt_tensor *x, int Ho, int Wo);
/* The same resize on plain arrays: x (B, H, W, C) into y (B, Ho, Wo, C) (the op's forward; attention pictures). */
void vt_bilinear_resize(const float *x, int B, int H, int W, int C, float *y, int Ho, int Wo);

#endif
