/* The engine's one GEMM entry point: row-major C = alpha·op(A)·op(B) + beta·C, dispatched per call to oneDNN
 * (dnnl_sgemm), OpenBLAS (cblas_sgemm) or, for products with 64 columns on AVX-512 (weight gradients Aᵀ·B on Intel
 * only), vitc's own kernel (src/ops/gemm64.c) by a rule that depends only on the machine (CPU features, the kernels
 * the two libraries picked), the shape and whether the call runs inside an OpenMP parallel region. */
#ifndef VITC_GEMM_H
#define VITC_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "vitc/error.h"

/* A GEMM library; VT_GEMM_AUTO lets the rule choose per call. Only the rule chooses VT_GEMM_VITC, vitc's own kernel
 * for products with 64 columns on AVX-512 (rule 10), and VT_GEMM_ONEDNN_T, oneDNN computing a weight gradient's
 * transpose, added into C transposed (rule 11). */
typedef enum vt_gemm_lib {
    VT_GEMM_AUTO = 0,
    VT_GEMM_OPENBLAS = 1,
    VT_GEMM_ONEDNN = 2,
    VT_GEMM_VITC = 3,
    VT_GEMM_ONEDNN_T = 4
} vt_gemm_lib;

/* x86 vector ISA tiers, ordered: a library's kernel below the CPU's tier is "generic" for that CPU. */
typedef enum vt_isa { VT_ISA_GENERIC = 0, VT_ISA_AVX = 1, VT_ISA_AVX2 = 2, VT_ISA_AVX512 = 3 } vt_isa;

/* oneDNN matmul primitives made for a plan's linear layers (vt_gemm_linear_prim), with their engine and stream. */
typedef struct vt_gemm_prims vt_gemm_prims;

/* One oneDNN matmul primitive for a linear layer's shape (owned by the plan's vt_gemm_prims). */
typedef struct vt_gemm_prim vt_gemm_prim;

/* The dispatch inputs, fixed when a graph is created (vt_graph.gemm): the forced library, if any, and the ISA
 * tiers of the CPU and of the kernels OpenBLAS and oneDNN run on it; prims (NULL until the first is made) holds the
 * graph's linear primitives and is freed by vt_gemm_plan_free. */
typedef struct vt_gemm_plan {
    vt_gemm_lib force;
    vt_isa cpu, openblas, onednn;
    int vnni;          /* oneDNN runs VNNI int8 kernels (u8·s8 products summed in 32 bits; vt_gemm_q8_levels) */
    int amx;           /* oneDNN runs AMX kernels (tile products): int8 takes the AMX rule (vt_gemm_q8_linear) */
    int intel;         /* the CPU's vendor is Intel (cpuid "GenuineIntel"): rule 5's inference case, rule 9 */
    int tail_n;        /* rule 14 on (AMD's AVX-512): one-thread A·Bᵀ with N <= 512 not a multiple of 16 -> OpenBLAS */
    int wt_first;      /* rule 15 on (AMD's AVX-512): a linear's x·wᵀ over many rows with K >= N runs as x·(wᵀ), w
                        * transposed once per forward (vt_gemm_wt_first) */
    int pack_w;        /* rule 12 on (oneDNN's AVX2 tier, AMD's AVX-512): inference linears with a constant weight run as
                        * oneDNN's 1x1 convolution on a copy of the weight packed once */
    int bf16;          /* set by vt_gemm_plan_bf16: large products outside parallel regions run in bf16 */
    int prepack;       /* 1 (vt_gemm_plan_init): inference graphs may keep copies of constant weights made for their
                        * kernels (rule 12's packed ones, a bf16 plan's bf16 ones); 0: none, less memory, slower at
                        * small batches (vt_arch_cfg.no_prepack, `--no-prepack`); an int8 graph keeps its quantised
                        * weights, its kernels' only form */
    vt_gemm_prims *prims;
    double *calls_s; /* profiling (vt_graph_enable_profile): seconds each thread spent in vt_gemm, thread t at
                      * [t · VT_GEMM_PROF_STRIDE]; a call outside a parallel region counts its time on every thread */
} vt_gemm_plan;

#define VT_GEMM_PROF_STRIDE 8 /* doubles between two threads' vt_gemm_plan.calls_s (a cache line) */

/* What `vitc bench` reports about the machine and the libraries. */
typedef struct vt_machine {
    char cpu_model[128];          /* /proc/cpuinfo "model name" ("unknown" if absent) */
    int avx2, avx512, avx512_bf16, amx; /* CPU features usable here (the OS saves their registers) */
    const char *openblas_core;    /* openblas_get_corename(), e.g. "Cooperlake", "Prescott" */
    const char *onednn_isa;       /* dnnl_get_effective_cpu_isa() as a name, e.g. "avx512_core_bf16" */
} vt_machine;

/* Fills p from the machine (no primitives yet); lib is "auto", "openblas", "onednn" (NULL or "" = auto), else -1 with an error. */
int vt_gemm_plan_init(vt_gemm_plan *p, const char *lib, vt_err *e);

/* Makes the plan run every vt_gemm product of at least VT_GEMM_BF16_MNK multiply-adds called outside OpenMP parallel
 * regions as a oneDNN bf16 × bf16 matmul summed in fp32 (A and B rounded to bf16, nearest even), and linear layers'
 * forwards of that size as vt_gemm_linear_prim primitives on bf16 copies of x and w (where rule 12 holds, inference
 * linears with a constant weight as vt_gemm_linear_conv's 1x1 convolution on it packed to bf16); 0, or -1 with an
 * error where oneDNN has no native bf16 kernel on this CPU or VITC_GEMM forces OpenBLAS. */
int vt_gemm_plan_bf16(vt_gemm_plan *p, vt_err *e);

#define VT_GEMM_BF16_MNK (1LL << 20) /* vt_gemm_plan_bf16's smallest product (M·N·K) */

/* How many products of a bf16 plan (vt_gemm_plan_bf16) have run in bf16 so far (vt_gemm calls and linear layers'
 * primitives); 0 for other plans. */
long long vt_gemm_bf16_runs(const vt_gemm_plan *p);

/* The library that vt_gemm uses for C = op(A)·op(B) (ta, tb: A, B transposed) of this shape when `threads` threads
 * run it (1 inside a parallel region). */
vt_gemm_lib vt_gemm_choose(const vt_gemm_plan *p, int threads, int ta, int tb, int M, int N, int K);

/* Row-major C = alpha·op(A)·op(B) + beta·C (op transposes when ta/tb); C is not read when beta is 0, A and B not
 * when alpha or K is 0 (as BLAS). Inside an OpenMP parallel region it runs on the calling thread, outside it on
 * omp_get_max_threads() threads. */
void vt_gemm(const vt_gemm_plan *p, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);

/* What a linear primitive adds after the product and bias (GELU: oneDNN's erf form, within 1e-6·max(1, |y|) of
 * vitc's). */
typedef enum vt_gemm_post {
    VT_GEMM_POST_NONE = 0,
    VT_GEMM_POST_ADD,
    VT_GEMM_POST_RELU,
    VT_GEMM_POST_GELU
} vt_gemm_post;

/* Whether the plan runs a linear layer's forward y = x·wᵀ (x M×K, w N×K) as one oneDNN matmul primitive with its
 * bias and post-op fused (rule 5 at vt_gemm_choose) rather than bias rows + sgemm, on `threads` threads; fused: the
 * node does all the layer's epilogue there (an inference graph: post-ops, GELU right after the primitive; a training
 * graph's linear without an activation, whose derivative no panel has to compute). */
int vt_gemm_linear_wanted(const vt_gemm_plan *p, int threads, int M, int N, int K, int fused);

/* Rule 15: whether a linear y = x·wᵀ (x M×K, w N×K) whose products (`rows` rows on `threads` threads) vt_gemm runs
 * should transpose w once per forward and run x·(wᵀ): wt_first, not forced, fp32, M >= 784, K >= N, oneDNN both. */
int vt_gemm_wt_first(const vt_gemm_plan *p, int threads, int M, int rows, int N, int K);

/* at (cols × rows) = aᵀ for a (rows × cols), both dense row-major, on all threads (outside parallel regions). */
void vt_gemm_transpose(const float *a, int rows, int cols, float *at);

/* Whether the plan runs an inference linear layer whose weight is constant, of any shape, as a 1x1 convolution on a
 * copy of the weight packed once (rule 12, vt_gemm_linear_conv): pack_w and prepack set, not forced, oneDNN at AVX2
 * or better and OpenBLAS not ahead of it (a bf16 plan too: bf16 x and packed weight from 2^20 MACs on). */
int vt_gemm_linear_packs(const vt_gemm_plan *p);

/* Bytes of the weight copies the plan's kernels have made so far: rule 12's packed weights, a bf16 plan's bf16 ones,
 * int8 layers' quantised ones with their scales (0 before a graph's first forward, and with prepack 0 but int8's). */
size_t vt_gemm_weight_copy_bytes(const vt_gemm_plan *p);

/* The plan's primitive for y = post(x·wᵀ + b) with x (M, K), w (N, K), b (N) if has_bias, y (M, N), all dense
 * row-major (post ADD: + r, r (M, N)); made on first request and reused (a bf16 plan's: x and w rounded to bf16,
 * vt_gemm_prim_run). NULL if oneDNN cannot make it. */
vt_gemm_prim *vt_gemm_linear_prim(vt_gemm_plan *p, int M, int N, int K, int has_bias, vt_gemm_post post);

/* A bf16 plan's copy of one constant weight in bf16, for vt_gemm_prim_run (owned by the plan's vt_gemm_prims). */
typedef struct vt_gemm_bfw vt_gemm_bfw;

/* A bf16 copy for a constant (N, K) weight of an inference layer, made empty here (plan time) and filled at its
 * first run; NULL if p is not a bf16 plan or out of memory. */
vt_gemm_bfw *vt_gemm_bf16_weight(vt_gemm_plan *p, int N, int K);

/* Runs q on all threads (call it outside OpenMP parallel regions); b and r as q was made (NULL when absent). A bf16
 * primitive rounds x to bf16 at every run, and w too unless wc (NULL: none) holds w's copy: wc converts w again
 * only when it is another tensor or `stale` (its parameters changed). Returns 0, or -1 if oneDNN failed (nothing
 * meaningful written; the caller falls back to vt_gemm). */
int vt_gemm_prim_run(vt_gemm_prim *q, const float *x, const float *w, const float *b, const float *r, float *y,
                     vt_gemm_bfw *wc, int stale);

/* One oneDNN convolution primitive, a conv's forward or weight gradient (owned by the plan's vt_gemm_prims). */
typedef struct vt_gemm_conv vt_gemm_conv;

/* vt_gemm_conv_prim's flags: a bias b is added; a ReLU or GELU post-op follows (inference: nothing keeps its input;
 * GELU: oneDNN's erf form, channels-last only); a term of y's shape is added after the bias (channels-last only, not
 * with an activation; vt_gemm_conv_run_add). */
enum { VT_CONV_BIAS = 1, VT_CONV_RELU = 2, VT_CONV_ADD = 4, VT_CONV_GELU = 8 };

/* The plan's forward primitive for y (B, Ho, Wo, Cout) = conv(x (B, H, W, C), w (Cout, C/G, k, k)) (+ b, then ReLU,
 * as flags say) with stride s, zero padding pad and G groups (nchw: x (B, C, H, W) and y (B, Cout, Ho, Wo) instead;
 * NCHW and Winograd's convs reordered to and from the blocked layouts they pick); made on first request and reused.
 * NULL where the plan keeps convs on im2col + sgemm: VITC_GEMM=openblas, oneDNN below AVX2 or below OpenBLAS's tier,
 * or only a reference kernel. */
vt_gemm_conv *vt_gemm_conv_prim(vt_gemm_plan *p, int B, int C, int H, int W, int Cout, int k, int s, int pad, int G,
                                int flags, int nchw);

/* Bytes of scratch vt_gemm_conv_run (or vt_gemm_conv_wgrad_run) needs: the blocked x and y (dy) of an NCHW conv or
 * of one on oneDNN's Winograd kernels (3x3, stride 1, AVX-512; a grouped one's run group by group: one group's); 0
 * where the conv takes NHWC as it is. */
size_t vt_gemm_conv_scratch(const vt_gemm_conv *q);

/* oneDNN's name of the kernel q runs, e.g. "jit_wino_4x3:avx512_core" or "brgconv:avx512_core". */
const char *vt_gemm_conv_impl(const vt_gemm_conv *q);

/* Runs q on all threads (outside OpenMP parallel regions), packing w into the kernel's layout first when pack (else
 * the weight the last packing run packed), x and y going through `scratch` where vt_gemm_conv_scratch says (its
 * bytes, 64-byte aligned); 0 or -1. */
int vt_gemm_conv_run(vt_gemm_conv *q, const float *x, const float *w, const float *b, float *y, void *scratch,
                     int pack);
/* vt_gemm_conv_run of a VT_CONV_ADD conv: y = conv(x) + b + r in the conv's output pass (r NULL: a conv without
 * that flag); 0 or -1. */
int vt_gemm_conv_run_add(vt_gemm_conv *q, const float *x, const float *w, const float *b, const float *r, float *y,
                         void *scratch, int pack);

/* The plan's weight-gradient primitive of the conv of vt_gemm_conv_prim's geometry (no bias; nchw as there); NULL
 * where that function would give none, and under the AVX-512 tier unless VITC_GEMM=onednn forces it. */
vt_gemm_conv *vt_gemm_conv_wgrad(vt_gemm_plan *p, int B, int C, int H, int W, int Cout, int k, int s, int pad, int G,
                                 int nchw);

/* dw (Cout, C/G, k, k) += the weight gradient of x (B, H, W, C) and dy (B, Ho, Wo, Cout) (or NCHW), x and dy going
 * through `scratch` where vt_gemm_conv_scratch says (its bytes, 64-byte aligned), on all threads (outside OpenMP
 * parallel regions); 0, or -1 if oneDNN failed (in the reorders or the gradient convs, before dw is touched; the adds
 * after them are reorders between buffers the plan allocated). */
int vt_gemm_conv_wgrad_run(vt_gemm_conv *q, const float *x, const float *dy, float *dw, void *scratch);

/* A new primitive for one inference linear layer y = post(x·wᵀ + b) (shapes as vt_gemm_linear_prim, post not GELU)
 * as a 1x1 convolution with its own copy of w packed into the kernel's layout: for a weight that is constant while
 * the graph lives (rule 12 at vt_gemm_choose). A bf16 plan's product of at least VT_GEMM_BF16_MNK MACs packs w to
 * bf16 and rounds x to bf16 at every run. NULL where the rule does not apply (vt_gemm_linear_packs), or no optimised
 * 1x1 kernel. */
vt_gemm_conv *vt_gemm_linear_conv(vt_gemm_plan *p, int M, int N, int K, int has_bias, vt_gemm_post post);

/* Runs q on all threads (outside OpenMP parallel regions), packing w first when repack or when q's packed copy is
 * of another pointer (its values changed in between: repack); b and r as q was made; 0 or -1 (the caller falls back). */
int vt_gemm_linear_conv_run(vt_gemm_conv *q, const float *x, const float *w, const float *b, const float *r,
                            float *y, int repack);

/* An int8 linear layer: a oneDNN u8 × s8 matmul with this layer's quantised weight (owned by the plan). */
typedef struct vt_gemm_q8 vt_gemm_q8;

/* The weight levels of the plan's int8 layers, L: 127, or 63 without VNNI, where the kernels (AVX2 vpmaddubsw)
 * add pairs of u8·s8 products in 16 bits, which would saturate past 32767 (255·63·2 does not). */
int vt_gemm_q8_levels(const vt_gemm_plan *p);

/* A new int8 primitive for one layer y = post(x·wᵀ + b) with shapes as vt_gemm_linear_prim (gelu_in: x is
 * replaced by GELU(x)); NULL where it would not be faster than fp32: VITC_GEMM=openblas, oneDNN below AVX2, no
 * optimised int8 kernel, or a shape the measured rule (gemm_lowp.c) leaves to fp32 (VITC_GEMM=onednn: every shape). Quantisation (dynamic, per run): the input gets one scale sx = (hi − lo) / 255 over its
 * range [lo, hi] ∪ {0} and a zero point z = round(−lo·(1/sx)), x_q = clamp(floor(x·(1/sx) + z + 0.5), 0, 255);
 * the weight's row o gets s_o = max|w_o| / L (L = vt_gemm_q8_levels), w_q = round(w · (L / max|w_o|));
 * y = sx·s_o·Σ (x_q − z)·w_q + b (+ r). */
vt_gemm_q8 *vt_gemm_q8_linear(vt_gemm_plan *p, int M, int N, int K, int has_bias, vt_gemm_post post, int gelu_in);

/* Runs q (outside OpenMP parallel regions) with xq (M·K bytes) for the quantised input, quantising w first when
 * requant or when it is not the weight of the previous run (its values changed in between: requant); 0, 1 when x
 * holds a NaN or an infinity (nothing written: the caller computes that run in fp32, so it propagates as there), or
 * -1 if oneDNN failed. */
int vt_gemm_q8_run(vt_gemm_q8 *q, const float *x, uint8_t *xq, const float *w, const float *b, const float *r,
                   float *y, int requant);

/* Frees the plan's primitives (the plan stays usable). */
void vt_gemm_plan_free(vt_gemm_plan *p);

/* Writes the rule that p applies (one line per shape class) into buf; returns buf. */
const char *vt_gemm_rule(const vt_gemm_plan *p, char *buf, size_t n);

/* When a library runs kernels below the CPU's ISA (e.g. OpenBLAS's SSE3 "Prescott" kernels on an AVX-512 Xeon it
 * does not know), writes a warning naming the kernels and what vitc does about it into buf and returns 1; else 0. */
int vt_gemm_warning(const vt_gemm_plan *p, const vt_machine *m, char *buf, size_t n);

/* "auto", "openblas", "onednn", "vitc" or "onednn_t". */
const char *vt_gemm_lib_name(vt_gemm_lib lib);

/* "generic SSE", "AVX", "AVX2" or "AVX-512". */
const char *vt_isa_name(vt_isa isa);

/* Describes the CPU and the kernels the two libraries run on it. */
void vt_machine_probe(vt_machine *m);

#endif
