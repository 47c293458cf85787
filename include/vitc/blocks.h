/* Block builders: compose ops into the common transformer pieces, creating parameters under a name prefix
 * with the official PyTorch state_dict names. */
#ifndef VITC_BLOCKS_H
#define VITC_BLOCKS_H

#include "vitc/ops.h"

/* Initialisation rules shared by the hosts (timm conventions). */
#define VT_INIT_W02 ((vt_init){VT_INIT_TRUNC_NORMAL, 0.02f}) /* trunc_normal(std=.02) */
#define VT_GMA_HEADS 8 /* Group-Mix attention's heads: two per attended segment, whatever the stage's heads */
#define VT_INIT_Z ((vt_init){VT_INIT_ZERO, 0.0f})
#define VT_INIT_1 ((vt_init){VT_INIT_ONE, 0.0f})

/* ---- pluggable attention and FFN types (src/blocks/tables.c): any host calls them by name ---- */

/* Hyper-parameters of the pluggable blocks, set per named model (0: the block's default). */
typedef struct vt_block_opts {
    float focusing;              /* FLatten: focusing power p (3) */
    int kernel;                  /* FLatten: DWC kernel size, odd (5) */
    int flatten_q_kv;            /* FLatten in a timm-layout host: separate q and kv projections (PVT's module, the
                                  * unofficial DeiT transplant of spec-flatten §6) instead of qkv */
    int double_heads;            /* hMHSA: heads doubled and head width halved (spec A1) */
    int no_ihh, no_chh, chh_first; /* hMHSA ablations (paper Tables 2-3) */
    float cffn_t;                /* cFFN: compaction ratio t (2/3) */
    int cffn_r;                  /* cFFN: training-form branches per factor (2) */
    int dim_head;                /* MSF / baseline attention: width per head (C / heads) */
    float refiner_expand;        /* Refiner: DLA expansion ratio of shared blocks and --attn refiner (3) */
    float refiner_head_expand;   /* Refiner: DLA expansion in refine-every-block mode (3) */
    int refiner_apply_transform; /* Refined-ViT: every block refines its own map (the paper's mode) */
} vt_block_opts;

/* Where an attention module keeps its projections (the host's official state_dict layout). */
enum {
    VT_LAYOUT_TIMM = 0, /* prefix.qkv (one packed projection) + prefix.proj: timm ViT/DeiT, Swin */
    VT_LAYOUT_PVT,      /* prefix.q + prefix.kv (+ prefix.sr, prefix.norm when sr_ratio > 1) + prefix.proj: PVT */
    VT_LAYOUT_CSWIN,    /* prefix.qkv and prefix.proj at block level, one module per branch in prefix.attns.{i} */
    VT_LAYOUT_NEXTVIT   /* prefix.q, prefix.k, prefix.v (+ prefix.norm, BatchNorm1d, when sr_ratio > 1) + prefix.proj:
                         * Next-ViT's E-MHSA, keys reduced by AvgPool1d(sr²) over the raster tokens */
};

/* Everything an attention module may need to know about its place in the host; one context for every type. */
typedef struct vt_attn_ctx {
    const char *type;        /* the attention type's full name, e.g. "msf_g2" (set by vt_attn_build) */
    int heads, qkv_bias;
    int grid_h, grid_w;      /* the non-lead tokens form a grid_h × grid_w grid (row-major) */
    int lead;                /* tokens before the grid (a class token), outside any spatial operation */
    int lead_queries;        /* 1: only the lead tokens query, the output is (B, lead, C) (a class-token ViT's last
                              * block, whose other rows nothing reads); every token is still a key and value. The
                              * timm or PVT layout without reduction, bias or mask; the types with
                              * vt_attn_type.lead_queries */
    int sr_ratio;            /* spatial reduction of the keys and values (PVT); 0 or 1: none */
    int rel_pos;             /* Swin: the tokens are one window of side rel_pos with a learned relative position bias
                              * (prefix.relative_position_bias_table, fixed buffer prefix.relative_position_index) */
    int rel_pos_flat;        /* the index buffer is stored flattened (w⁴,) (torchvision) instead of (w², w²) */
    vt_tensor *mask;         /* Swin shifted windows: constant additive (nW, N, N) mask, batch entry b uses mask[b % nW] */
    int stripe;              /* CSwin layout: stripe width of the two-branch form; 0: one branch over the whole grid */
    int win_h, win_w, win_sh, win_sw; /* > 0: the tokens are windows (batch entries, vt_window_partition) of an
                              * win_h × win_w map with shift (win_sh, win_sw), each a grid_h × grid_w window (Swin);
                              * for exported maps only */
    int layout;              /* VT_LAYOUT_* */
    float ln_eps;            /* norms inside the module (PVT's spatial-reduction LayerNorm, Next-ViT's BatchNorm1d) */
    int norm_folded;         /* Next-ViT deployed form: the BatchNorm1d after the reduction is merged into k and v
                              * (merge_bn): its tensors are kept, not applied */
    vt_init winit;           /* initialisation of the Linear weights (the host's rule) */
    int conv_fanout;         /* convolutions inside: a VT_CONV_INIT_* rule (0 PyTorch's default; 1 normal(0,
                              * √(2/fan_out)) with bias 0 (PVTv2); 2 trunc_normal(0.02) with bias 0 (Next-ViT)) */
    const vt_block_opts *opts;
} vt_attn_ctx;

/* Everything an FFN may need to know about its place in the host. */
typedef struct vt_ffn_ctx {
    int hidden;              /* hidden width */
    int train_form;          /* re-parameterised FFNs: 1 training form, 0 deployed form */
    vt_init winit;           /* initialisation of the weights (the host's rule) */
    int grid_h, grid_w;      /* token grid (for dwconv) */
    int dwconv;              /* PVTv2: depthwise 3×3 prefix.dwconv.dwconv over the grid between fc1 and GELU */
    int conv_fanout;         /* as in vt_attn_ctx */
    int tv_names;            /* torchvision's Sequential names prefix.0 / prefix.3 instead of fc1 / fc2 */
    int conv1x1;             /* Next-ViT: 1x1 convs prefix.conv1 / prefix.conv2 (cFFN conv2_u / conv2_v), weights
                              * (out, in, 1, 1), on channels-last tokens */
    int relu;                /* ReLU instead of GELU (Next-ViT) */
    const vt_block_opts *opts;
} vt_ffn_ctx;

/* An attention type: on x (B, N, C) (already normalised by the host) returns (B, N, C); an error (vt_fail) where
 * the context does not fit the type. */
typedef struct vt_attn_type {
    const char *name, *summary;
    vt_tensor *(*build)(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a);
    int (*accepts)(const char *name); /* optional: accepts a family of names (e.g. msf_g4); NULL: `name` only */
    const char *forms;                /* with accepts: those names as messages list them (e.g. "msf_g<N>") */
    int heads;                        /* > 0: the heads the type always runs (GMA: 8; --heads can change nothing) */
    int lead_queries;                 /* 1: builds the lead tokens' rows alone under vt_attn_ctx.lead_queries */
} vt_attn_type;

/* An FFN type: on x (B, N, C) returns (B, N, C). */
typedef struct vt_ffn_type {
    const char *name, *summary;
    vt_tensor *(*build)(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f);
    int reparam; /* 1: re-parameterised, with a training form (vt_ffn_ctx.train_form) unlike the deployed one */
} vt_ffn_type;

/* The attention type called `name` (NULL if none). */
const vt_attn_type *vt_attn_find(const char *name);

/* The FFN type called `name` (NULL if none). */
const vt_ffn_type *vt_ffn_find(const char *name);

/* Writes into buf (n bytes) the name weight files record for attention `name` (VT_ATTN_KEY): the name, except where
 * two names build the same network on the same tensors (orig and orig_g1 are mhsa, msf_g1 is msf). */
void vt_attn_record_name(const char *name, char *buf, size_t n);

/* Writes the comma-separated names of every attention (which = 0) or FFN (which = 1) type into buf (n bytes). */
const char *vt_block_type_names(int which, char *buf, size_t n);

/* Builds attention `type` at prefix with context a (a->type is set to `type`); an unknown type is a build error. */
vt_tensor *vt_attn_build(vt_graph *g, const char *type, const char *prefix, vt_tensor *x, const vt_attn_ctx *a);

/* Builds FFN `type` at prefix with context f; an unknown type is a build error. */
vt_tensor *vt_ffn_build(vt_graph *g, const char *type, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f);

/* ---- common.c: parameter names, parameterised layers, norms, residuals, MLPs ---- */

/* Joins prefix and suffix as "prefix.suffix" (or "suffix" when prefix is empty) into a static-size buffer. */
const char *vt_pname(char *buf, const char *prefix, const char *suffix);

/* Linear layer with params prefix.weight (out, in) [paper-counted] and prefix.bias (out) when bias != 0. */
vt_tensor *vt_linear_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int bias, vt_init winit);
/* vt_linear_p's parameters alone, for a layer reading x: *w (out, in) and *b (NULL without bias); -1 on error. */
int vt_linear_params(vt_graph *g, const char *prefix, const vt_tensor *x, int out, int bias, vt_init winit,
                     vt_tensor **w, vt_tensor **b);
/* The same Linear with its output transposed: x (..., in) -> (out, ...) (vt_linear_t). */
vt_tensor *vt_linear_t_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int bias, vt_init winit);

/* 1x1 Conv2d on channels-last tokens x (..., in): params prefix.weight (out, in, 1, 1) [paper-counted] and prefix.bias
 * (out) when bias != 0, computed as a Linear. */
vt_tensor *vt_pointwise_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int bias, vt_init winit);

/* LayerNorm over the last dim with params prefix.weight / prefix.bias (no weight decay). */
vt_tensor *vt_layernorm_p(vt_graph *g, const char *prefix, vt_tensor *x, float eps);
/* vt_layernorm_p over axis 1 of a channel-first x (B, C, ...), then act (-1: none): vt_layernorm_cf. */
vt_tensor *vt_layernorm_cf_p(vt_graph *g, const char *prefix, vt_tensor *x, float eps, int act);

/* Conv2d (NCHW) with params prefix.weight (out, in/groups, k, k) [paper-counted] and optional prefix.bias;
 * PyTorch default init (U(±1/sqrt(fan_in))). */
vt_tensor *vt_conv2d_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int k, int stride, int pad, int groups,
                       int bias);
/* vt_conv2d_p's weight alone: prefix.weight (out, in/groups, k, k), paper-counted, the same initialisation. */
vt_tensor *vt_conv_weight(vt_graph *g, const char *prefix, int out, int in, int k, int groups);
/* vt_conv2d_p's bias alone: prefix.bias (out), PyTorch's default U(±1/sqrt(in/groups·k·k)). */
vt_tensor *vt_conv_bias(vt_graph *g, const char *prefix, int out, int in, int k, int groups);

/* A one-group convolution whose output is tokens: x the NCHW image (nhwc 0) or a channels-last map (B, H, W, C)
 * (nhwc 1), w (Cout, C, k, k), b (Cout) or NULL -> (B, Ho, Wo, Cout); one oneDNN conv or vt_im2col + a linear. */
vt_tensor *vt_conv_tokens(vt_graph *g, vt_tensor *x, int nhwc, vt_tensor *w, vt_tensor *b, int stride, int pad);

/* vt_conv2d_p (bias, one group) on x (B, C, H, W) as tokens (B, Ho·Wo, out) in raster order (vt_conv_tokens: one
 * oneDNN conv or its patches times the weight viewed as (out, C·k·k)), the grid in *gh, *gw. */
vt_tensor *vt_conv2d_tokens_p(vt_graph *g, const char *prefix, vt_tensor *x, int out, int k, int stride, int pad,
                              int *gh, int *gw);

/* Declares BatchNorm prefix's tensors for c channels into t: weight, bias, running_mean, running_var,
 * num_batches_tracked; 0 on success. */
int vt_bn_tensors(vt_graph *g, const char *prefix, int c, vt_tensor *t[5]);

/* BatchNorm with prefix.{weight, bias, running_mean, running_var, num_batches_tracked}, channel axis `axis`. */
vt_tensor *vt_batchnorm_p(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum);

/* oscale·vt_batchnorm_p(x) + r (r NULL: none) in one op (vt_batchnorm_res). */
vt_tensor *vt_batchnorm_res_p(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum,
                              float oscale, vt_tensor *r);

/* vt_batchnorm_p followed by the activation act (vt_batchnorm_act: VT_RELU, VT_RELU6, VT_HARDSWISH) in one op. */
vt_tensor *vt_batchnorm_act_p(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum,
                              int act);

/* vt_batchnorm_p, or when folded only its tensors (kept in the state_dict, not applied: x is returned), for a
 * BatchNorm merged into the next layer (Next-ViT's merge_bn). */
vt_tensor *vt_batchnorm_folded(vt_graph *g, const char *prefix, vt_tensor *x, int axis, float eps, float momentum,
                               int folded);

/* BatchNorm prefix (w's first dim channels) folded into the bias-free conv or linear weight w before it, as an
 * inference engine fuses conv + BN: returns w·s per output channel, *bias = β − μ·s, s = γ/√(σ² + eps), computed in
 * the graph from the BN's tensors (declared, so the state_dict keeps them). Eval semantics only (running stats). */
vt_tensor *vt_bn_fold_weight(vt_graph *g, const char *prefix, vt_tensor *w, float eps, vt_tensor **bias);
/* BatchNorm prefix over c channels at eval as (2, c): row 0 s = γ/√(σ² + eps), row 1 β − μ·s (computed in the graph
 * from the BN's tensors, declared as vt_bn_fold_weight does). */
vt_tensor *vt_bn_scale_shift(vt_graph *g, const char *prefix, int c, float eps);

/* Bias-free 1x1 conv `conv` (vt_pointwise_p) → BatchNorm `bn` on channels-last tokens; folded: the BatchNorm folded
 * into the conv (vt_bn_fold_weight; eval semantics), one GEMM with a bias and no BN pass. */
vt_tensor *vt_pointwise_bn_p(vt_graph *g, const char *conv, const char *bn, vt_tensor *x, int out, vt_init winit,
                             float eps, float momentum, int folded);

/* x + drop_path(h, drop): the residual add of a transformer block (fused into h's linear when drop is off, see
 * vt_residual). */
vt_tensor *vt_block_residual(vt_graph *g, vt_tensor *x, vt_tensor *h, float drop);

/* The first half of an FFN: prefix.fc1 (f->hidden; torchvision: prefix.0; Next-ViT: 1x1 conv prefix.conv1) →
 * [PVTv2: depthwise 3×3 prefix.dwconv.dwconv on the f->grid_h × f->grid_w grid] → GELU (or ReLU, f->relu). */
vt_tensor *vt_block_fc1_act(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f);

/* vt_block_fc1_act without its activation, for a following linear with GELU in its GEMM prologue; f without ReLU. */
vt_tensor *vt_block_fc1_pre(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f);

/* 1 where the GELU FFN f on x runs GELU in fc1's epilogue (train graphs: no DWConv and at most 2^20 hidden floats;
 * inference: where fc1 runs as a oneDNN primitive), 0 where in the next linear's GEMM prologue. */
int vt_block_gelu_in_fc1(vt_graph *g, const vt_tensor *x, const vt_ffn_ctx *f);

/* Whether x can enter an FFN of block prefix: built (vt_bad) and with a feature axis (not a scalar); else the error
 * is set. */
int vt_block_ffn_input(vt_graph *g, const char *prefix, const vt_tensor *x);

/* The GELU FFN f's first half on x (vt_block_fc1_act) followed by the linear `name` (out features): GELU right after
 * fc1 (vt_linear_gelu; after PVTv2's DWConv vt_dwconv_nhwc_gelu) in train graphs without the DWConv whose hidden
 * activation is small and in float inference graphs whose linears run as oneDNN primitives (GELU right after fc1's),
 * else in that linear's GEMM prologue. f without ReLU. */
vt_tensor *vt_block_ffn_gelu_linear(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f,
                                    const char *name, int out, vt_init winit);

/* The host's MLP FFN: vt_block_fc1_act's fc1 [and DWConv], then GELU and prefix.fc2 (torchvision: prefix.3) back to
 * x's width, GELU in fc2's prologue (vt_gelu_linear: a train graph keeps one hidden-sized buffer, not two), or in
 * fc1's epilogue where vt_block_ffn_gelu_linear places it there (see common.c). */
vt_tensor *vt_block_ffn_mlp(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f);

/* timm Mlp: prefix.fc1 (hidden) → GELU → prefix.fc2 (x's width), placed as vt_block_ffn_mlp places it. */
vt_tensor *vt_block_mlp(vt_graph *g, const char *prefix, vt_tensor *x, int hidden);

/* ---- mhsa.c: convolution initialisation, q/k/v projections, exported maps, relative position bias, MHSA ---- */

/* Initialisation rules of convolutions (a host's rule; its biases start at 0 except with the default rule). */
enum { VT_CONV_INIT_DEFAULT = 0, VT_CONV_INIT_FANOUT = 1, VT_CONV_INIT_W02 = 2 };
/* Initialisation of a convolution weight (fan_in = in/groups·k², fan_out = out/groups·k²) under rule: PyTorch's
 * default U(±1/√fan_in), normal(0, √(2/fan_out)) (PVTv2), or trunc_normal(0.02) (Next-ViT). */
vt_init vt_conv_init(int fan_in, int fan_out, int rule);

/* The query and key/value sources of an attention module in its host's layout, before the heads are split. */
typedef struct vt_attn_src {
    vt_tensor *q, *kv;        /* q (B, N, ·) and kv (B, n, ·); the same tensor for one packed projection */
    int q_off, k_off, v_off;  /* channel offsets of the query, key and value ranges */
    int kh, kw, klead;        /* the keys: klead off-grid tokens, then a kh × kw grid */
    int kpool;                /* > 0: key j pools the query grid's tokens [j·kpool, (j+1)·kpool) in raster order
                               * (Next-ViT's AvgPool1d), which is where a picture puts it; 0: the kh × kw grid */
} vt_attn_src;

/* Projects x (B, N, C) to queries of width wq and keys and values of widths wk, wv in a->layout (with
 * a->lead_queries the queries of the lead tokens alone): TIMM one packed prefix.qkv (with lead_queries its query
 * rows and its key and value rows as two products); PVT prefix.q and prefix.kv, the latter on PVT's spatial reduction of x when a->sr_ratio > 1; NEXTVIT
 * prefix.q, prefix.k and prefix.v, k and v on the n = ⌊N/sr²⌋ AvgPool1d-reduced tokens when sr_ratio > 1, whose key
 * grid (for hMHSA's IHH) is n row-major on the most square rows × cols = n (rows the largest divisor of n up to √n;
 * 7x7 for 49 keys); k and v are returned as one concatenated (B, n, wk + wv) source. */
int vt_attn_project(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a, int wq, int wk, int wv,
                    vt_attn_src *s);

/* Exports t (B, H, N, n), one of the block's own intermediates, as the attention map prefix[.view] (view NULL: the
 * prefix alone) of queries on a's token layout and keys on s's (vt_graph_export_map; nothing unless the graph was
 * built with export_maps). split: heads [0, split) and [split, H) are two kinds (0: one); probs: rows sum to 1. */
void vt_block_export_map(vt_graph *g, const char *prefix, const char *view, vt_tensor *t, const vt_attn_ctx *a,
                         const vt_attn_src *s, int split, int probs);

/* The name (prefix[.view]) and token layout of a map exported by the block at prefix (queries on a's layout, keys
 * on s's), for blocks that fill in the rest themselves (factorised maps) and call vt_graph_export_map. */
vt_attn_map vt_block_map_geom(const char *prefix, const char *view, const vt_attn_ctx *a, const vt_attn_src *s);

/* Swin's relative position bias of a w×w window: prefix.relative_position_bias_table ((2w−1)², heads), the fixed
 * int64 buffer prefix.relative_position_index ((w², w²), or (w⁴,) when flat) -> bias (heads, w², w²). */
vt_tensor *vt_block_rel_pos(vt_graph *g, const char *prefix, int w, int heads, int flat);

/* Softmax multi-head attention on x (B, N, C) in the context's layout: projections (vt_attn_project), scaled dot
 * products (+ relative position bias, + shift mask), softmax, ·v, prefix.proj. */
vt_tensor *vt_block_mhsa(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a);


/* ---- the papers' blocks: one section per file, added below ---- */

/* ---- flatten.c (FLatten focused linear attention, Han et al. 2023; spec-flatten.md §1.2) ---- */
typedef struct vt_flatten_cfg {
    int heads;
    float focusing;   /* focusing power p (0: 3) */
    int kernel;       /* DWC kernel K, odd (0: 5); padding K/2 */
    int conv_fanout;  /* DWC init: 1 normal(0, √(2/fan_out)), bias 0 (PVTv2); 0 PyTorch's default */
    int lepe;         /* 1: + CSwin's LePE, prefix.get_v (C, 1, 3, 3) with bias, over v's grid (no leading tokens) */
} vt_flatten_cfg;
/* Focused linear attention (no proj) on projected queries at channels [q_off, q_off + C) of q (B, N, ·), keys at
 * [k_off, k_off + C) of k (B, n, ·) and values at [v_off, v_off + C) of v (B, n, ·) (all may be one packed qkv,
 * read in place): creates prefix.scale,
 * prefix.positional_encoding (1, n, C) and prefix.dwc (d = C/heads channels shared by all heads); the last H·W
 * of the n key tokens form the row-major DWC grid, earlier (class) tokens get no DWC term. N = n, or N = the n − H·W
 * earlier tokens alone (their queries only: a class-token ViT's last block). -> (B, N, C). */
vt_tensor *vt_flatten_core(vt_graph *g, const char *prefix, vt_tensor *q, int q_off, vt_tensor *k, int k_off,
                           vt_tensor *v, int v_off, int C, int H, int W, const vt_flatten_cfg *c);
/* FLatten attention module on x (B, N, C) in the context's layout (TIMM qkv as Swin, PVT q + kv as PVT and, with
 * opts->flatten_q_kv, the DeiT transplant): projections, vt_flatten_core on the token grid, prefix.proj. */
vt_tensor *vt_block_flatten(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a);

/* ---- hmhsa.c / cffn.c (Xu et al. 2023, attention-map hallucination + FFN compaction; spec-hmhsa-cffn.md) ---- */
/* hMHSA on x (B, N, C) (heads a->heads, doubled with opts->double_heads; ablations opts->no_ihh/no_chh/chh_first):
 * projections in the context's layout (TIMM qkv 2C: Q^ C/2, K^ C/2, V C; PVT q C/2 + kv 3C/2 on the reduced keys),
 * real maps A_r = Q^K^T/sqrt(d) (h/2 heads), hallucinated maps CHH(IHH(A_r)) (prefix.ihh dw 3x3 over the key grid,
 * off-grid keys (cls) bypassing it, prefix.chh 1x1 over heads), softmax over [A_r, A_h] (h heads) times V,
 * prefix.proj. */
vt_tensor *vt_block_hmhsa(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a);

/* Bottleneck width k of a cFFN with the given hidden and output widths (t <= 0: 2/3). */
int vt_cffn_width(int hidden, int C, float t);
/* cFFN on x (B, N, C): the host's first half (vt_block_fc1_act: fc1, PVTv2's DWConv, GELU) -> U (hidden -> k) ->
 * V (k -> C), no activation between U and V; k from opts->cffn_t, opts->cffn_r training branches. Deployed form:
 * Linear prefix.fc2_u, prefix.fc2_v (f->conv1x1: 1x1 convs prefix.conv2_u, prefix.conv2_v); training form
 * (f->train_form): prefix.fc2_{u,v}.rep.{b}.{conv, bn} (conv2_{u,v}.rep...), summed. */
vt_tensor *vt_block_cffn(vt_graph *g, const char *prefix, vt_tensor *x, const vt_ffn_ctx *f);
/* Fills the deployed store dep from the training-form store train: equal names copied, every X.{weight,bias} of
 * dep with X.rep.0.conv.weight in train merged (BN eval mode, eps bn_eps, < 0 for the cFFN blocks' own; X.weight
 * (out, in) or a 1x1 conv's (out, in, 1, 1)); errors name unused or missing tensors. */
int vt_cffn_deploy(const vt_params *train, vt_params *dep, float bn_eps, vt_err *e);

/* ---- nextvit.c (Next-ViT, Li et al. 2022; official names; spec-nextvit.md) ---- */
/* What a Next-ViT block needs from its host; tokens are channels-last (B, H·W, C). */
typedef struct vt_nextvit_ctx {
    const char *attn_type, *ffn_type; /* the NTB's attention type (mhsa = E-MHSA, hmhsa) and the MLP's FFN type */
    vt_attn_ctx attn;  /* base attention context (qkv bias, sr ratio, init, options); the NTB sets heads (Cs/32), grid,
                        * layout and the folded norm */
    vt_ffn_ctx ffn;    /* base FFN context (form, init, options); the block sets hidden, 1x1-conv names and ReLU */
    float drop;        /* drop-path rate p of the block */
    int folded;        /* deployed form (eval semantics): the pre-norms are merged (merge_bn); their tensors stay,
                        * unapplied; the post-conv BNs are folded into their convs in the graph (vt_bn_fold_weight) */
} vt_nextvit_ctx;
/* NCB on x (B, H·W, in) -> (B, H'·W', out): prefix.patch_embed (stride 1 or 2; *H, *W updated), + MHCA, + MLP
 * (ratio 3) on prefix.norm. */
vt_tensor *vt_block_ncb(vt_graph *g, const char *prefix, vt_tensor *x, int *H, int *W, int out, int stride,
                        const vt_nextvit_ctx *b);
/* NTB on x (B, H·W, in) -> (B, H'·W', out): prefix.patch_embed to Cs, + e_mhsa(norm1), projection to Cc + MHCA,
 * concat [Cs, Cc], + MLP (ratio 2) on prefix.norm2. */
vt_tensor *vt_block_ntb(vt_graph *g, const char *prefix, vt_tensor *x, int *H, int *W, int out, int stride,
                        const vt_nextvit_ctx *b);
/* The official merge_pre_bn on store P: folds BatchNorm bn1 (and bn2 after it, if not NULL; eps 1e-5, running
 * statistics) into the following map target (target.weight (out, in) or (out, in, 1, 1), target.bias):
 * b += W·c, W ← W·diag(a) for the BNs' per-channel affine a·x + c. */
int vt_merge_pre_bn(vt_params *P, const char *target, const char *bn1, const char *bn2, vt_err *e);

/* ---- msf.c: Mean-Shift Feature attention and the baseline attention of its official code ---- */
typedef struct vt_msf_cfg {
    int heads, dim_head;  /* inner width = heads·dim_head */
    int probe;            /* 1: MSF (to_qkvp, Gaussian logits, o = attn·v − p); 0: baseline (to_qkv, dot product) */
    int groups;           /* groups of the qkv(p) projection (1: dense); weight (E, C/groups) */
    int block_grouping;   /* 1: block output order; 0: interleaved (o = e·G + g), the official default */
    int norm;             /* 1: LayerNorm `norm` (eps ln_eps) inside the module (SimpleViT); 0: none (ViT host) */
    float ln_eps;
    int grid_h, grid_w;   /* the tokens' grid (no class token), for exported maps (SimpleViT) */
} vt_msf_cfg;

/* Parses "msf" | "orig", optionally "_g<N>" and then "_block", into probe / groups / block_grouping (-1: not one). */
int vt_msf_parse(const char *attn, vt_msf_cfg *m);

/* MSF / baseline attention on x (B, N, C): params prefix.{norm.*, to_qkvp.weight | to_qkv.weight, to_out.weight}. */
vt_tensor *vt_block_msf(vt_graph *g, const char *prefix, vt_tensor *x, const vt_msf_cfg *m);

/* MSF / baseline attention in a host with a packed qkv (timm, Swin; the integration of spec-msf §5): prefix.qkvp
 * (4C; baseline prefix.qkv, 3C; grouped per the type name; bias with the host's qkv_bias), Gaussian-kernel logits
 * (+ relative position bias, + shift mask from the context), o = P·v − p, prefix.proj (with bias). */
vt_tensor *vt_block_msf_host(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a);


/* ---- refiner.c (Refiner, Zhou et al. 2021; official Refiner_ViT names) ---- */
/* Refined_Attention variants: plain (qkv 3C; softmax map + scale·A_in), shared (qkv = V only (C); uses
 * scale·adapt_bn(DLA(A_in)), passes A_in on), transform (plain, then the map refined by adapt_bn(DLA(.))). */
typedef enum { VT_REFINER_PLAIN, VT_REFINER_SHARED, VT_REFINER_TRANSFORM } vt_refiner_mode;
/* DLA on attention maps a (B, H, N, N): 1x1 expand H->round(expand·H), BN, ReLU6, dw 3x3, BN, ReLU6, 1x1 reduce, BN,
 * + a; params prefix.{conv_exp, bn1, depth_sep_conv, bn2, conv_pro, bn3}; then BatchNorm `adapt` (NULL: none, and
 * then scale must be 1) and ·scale. Eval graphs without ref_kernels run it as one op (vt_dla_eval), others as the op chain. */
vt_tensor *vt_block_dla(vt_graph *g, const char *prefix, vt_tensor *a, float expand, const char *adapt, float scale);
/* Refiner attention on x (B, N, C) with a's heads, qkv bias and token layout; *amap: incoming map A_in (B, H, N, N) or
 * NULL, replaced by the outgoing map. Exports (export_maps) its softmax map (prefix; plain and transform modes), the
 * incoming map (prefix.before; shared mode) and the refined one (prefix.refined: adapt_bn(DLA(·)) (·scale in shared
 * mode), the map the block multiplies V with). */
vt_tensor *vt_block_refiner_attn(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a,
                                 vt_refiner_mode mode, float expand, vt_tensor **amap);

/* ---- gma.c (GroupMixFormer) ---- */
/* SeparableConv2d on NCHW x: prefix.conv1 (DW k×k, stride, padding k/2, no bias) → prefix.pointwise_conv (1×1). */
vt_tensor *vt_block_separable(vt_graph *g, const char *prefix, vt_tensor *x, int out, int k, int stride);
/* Group-Mix attention (official EfficientAtt: qkv, aggregator, crpe, proj) on x (B, H·W, C); C multiple of 10. */
vt_tensor *vt_block_gma_attn(vt_graph *g, const char *prefix, vt_tensor *x, int H, int W);
/* GMA_Block: x + DW3×3 CPE, then x += att(norm1(x)), x += mlp(norm2(x)) (LN eps 1e-6) on x (B, H·W, C); both
 * branches go through drop-path with probability drop (train graphs). */
vt_tensor *vt_block_gma(vt_graph *g, const char *prefix, vt_tensor *x, int H, int W, int mlp_hidden, float drop);

/* ---- cswin.c (CSwin cross-shaped window attention with LePE, Dong et al. 2022; FLatten-CSwin L blocks) ---- */
/* CSwin block attention on x (B, H·W, C) (normalised tokens of the a->grid_h × a->grid_w grid) in the CSwin layout:
 * prefix.qkv (packed q, k, v C-blocks), per branch prefix.attns.{i}, prefix.proj. Softmax (linear = 0): a->stripe
 * s > 0 gives two branches of C/2 channels and h/2 heads on vertical (H × s) and horizontal (s × W) stripes, s = 0
 * one branch over the whole grid; each branch is softmax(q·kᵀ/√d)·v + LePE (attns.{i}.get_v, depthwise 3×3 over raw
 * v, zero-padded at the stripe borders). FLatten L (linear = 1, s = 0 only): attns.0 = vt_flatten_core (scale,
 * positional_encoding, dwc) + LePE over all C. Branch outputs concatenated (branch 0 first) -> proj. */
vt_tensor *vt_block_cswin_attn(vt_graph *g, const char *prefix, vt_tensor *x, const vt_attn_ctx *a, int linear);

#endif
