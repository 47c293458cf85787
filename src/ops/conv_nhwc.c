/* Dense and grouped 2-D convolution on channels-last maps (B, H, W, C) (vt_conv2d_nhwc, vt_conv2d_nhwc_relu:
 * Next-ViT's MHCA and deployed stem): the reference (patches + per-group sgemm), the conv_nhwc.rows kernel and
 * conv_nhwc.onednn.
 * MACs: B·Ho·Wo·Cout·(C/groups)·k·k (bias adds not counted). */
#include <limits.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "conv.h"
#include "patches.h"
#include "vitc/ops.h"

/* ---- channels-last dense / grouped conv: x (B, H, W, C), w (Cout, C/G, k, k), b (Cout) or NULL ----
 * Forward: at the AVX2 tier the rows kernel (convn_rows_prepare says where); else one oneDNN
 * convolution (brgconv: 1.8-2.3x im2col + per-group sgemm on Next-ViT-S's MHCA shapes at batch 1, 0.75 vs 1.36 ms at
 * 56x56x96 in 3 groups; the weight is packed into its layout on every run, as training changes it) where the plan
 * has one (vt_gemm_conv_prim); otherwise the patches (vt_patches_gather, rows of C·k·k) into scratch and one sgemm
 * per (group, row chunk): the composition vt_im2col + vt_group_linear (block order).
 * Backward: after the rows kernel, dW and a stride-1 conv's dX in its tasks (rows_wgrad, rows_dgrad); else
 * dW through oneDNN's weight-gradient convolution where the plan made one (vt_gemm_conv_wgrad), else the
 * patches again into scratch and dW_g += dY_gᵀ·cols_g; dX of a stride-1 conv through the forward primitive of the
 * transposed conv where the plan made one (convn_bwd_prim), else the same scratch takes dcols_g = dY_g·W_g and the
 * gather's adjoint adds it into dx. The weight-gradient primitive against the patches and one sgemm per group
 * (3 groups of M = 32 rows on 2 threads at 56x56), a backward pass of the op and of a small loss after it (a square
 * and means, the same in both) on Next-ViT-S's MHCA shapes at batch 16 (3x3, 32-channel groups, dX through bprim in
 * both; Intel Xeon Cascade Lake, 2 threads, best of 8, 2026-11-28):
 * 56x56x96 90 -> 52 ms, 28x28x192 39 -> 24, 14x14x384 20 -> 12, 7x7x768 10 -> 8.5. Dense 3x3 stride-1 convs on at
 * least 16 channels, and grouped ones with 16 per group on large maps (group by group), run oneDNN's Winograd kernels
 * at its AVX-512 tier (forward, dX and dW; gemm_onednn.c's conv_wino), their blocked x and y in the kernel's forward
 * scratch and in the backward scratch. */
typedef struct {
    vt_patch_geom q;
    int Cout, G, has_bias;
    vt_gemm_conv *prim; /* the conv_nhwc.onednn kernel's primitive (made by its prepare) */
    vt_gemm_conv *bprim; /* training, stride 1, k > 1: the forward primitive that computes dX (convn_bwd_prim) */
    vt_gemm_conv *wprim; /* training: the weight-gradient primitive (convn_bwd) */
    int relu;            /* vt_conv2d_nhwc_relu in an inference graph: ReLU on the output */
    int rows_bwd;        /* training with the rows kernel: backward's dW (and a stride-1 dX) in its tasks too */
} convn_p;

/* Rows of the output (positions) and depth of one group's patch (C/G·k·k). */
static int64_t convn_rows(const convn_p *p) { return (int64_t)p->q.B * p->q.Ho * p->q.Wo; }
static int convn_kg(const convn_p *p) { return p->q.C / p->G * p->q.k * p->q.k; }

/* Row chunks per group (at least 64 rows each) so that the (group, chunk) tasks, one single-threaded sgemm each,
 * keep every thread busy (as vt_group_linear). */
static int convn_chunks(int R, int G, int nt) {
    const int want = (2 * nt + G - 1) / G, most = R / 64 > 1 ? R / 64 : 1;
    return want < most ? want : most;
}

/* y = cols·W_gᵀ per group (+ bias), over (group, row chunk) tasks. */
static void convn_gemm_fwd(const vt_node *n, const float *cols, float *y) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const int R = (int)convn_rows(p), G = p->G, Og = p->Cout / G, Kg = convn_kg(p), K = Kg * G;
    const int nc = convn_chunks(R, G, n->g->threads);
    const float *w = n->in[1]->data, *b = p->has_bias ? n->in[2]->data : NULL;
#pragma omp parallel for collapse(2) schedule(static)
    for (int gi = 0; gi < G; gi++)
        for (int c = 0; c < nc; c++) {
            const int r0 = (int)((int64_t)R * c / nc), r1 = (int)((int64_t)R * (c + 1) / nc);
            float *yb = y + (size_t)r0 * p->Cout + (size_t)gi * Og;
            if (b)
                for (int r = r0; r < r1; r++) memcpy(yb + (size_t)(r - r0) * p->Cout, b + (size_t)gi * Og,
                                                     sizeof(float) * (size_t)Og);
            vt_gemm(&n->g->gemm, 0, 1, r1 - r0, Og, Kg, 1.0f, cols + (size_t)r0 * K + (size_t)gi * Kg, K,
                    w + (size_t)gi * Og * Kg, Kg, b ? 1.0f : 0.0f, yb, p->Cout);
        }
}

/* y = max(y, 0) over n floats (relu_n) on all threads. */
static void relu_all(float *y, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < n; c += 4096) relu_n(y + c, n - c < 4096 ? n - c : 4096);
}

/* The reference forward: patches + per-group sgemm (then the ReLU of vt_conv2d_nhwc_relu). */
static void convn_fwd(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    vt_patches_gather(&p->q, n->in[0]->data, n->fws->data);
    convn_gemm_fwd(n, n->fws->data, n->out->data);
    if (p->relu) relu_all(n->out->data, n->out->numel);
}

/* Floats of the backward scratch before bprim's own (its blocked dy and dx): dX, the flipped weight, 64-byte
 * alignment (convn_bwd_prim). */
static int64_t bprim_scratch(const vt_node *n) { return (n->in[0]->numel + n->in[1]->numel + 15) / 16 * 16; }

/* One oneDNN convolution where the plan has one for this geometry (vt_gemm_conv_prim). */
static int convn_prim_prepare(vt_node *n) {
    convn_p *p = VT_OP_P(n, convn_p);
    const vt_patch_geom *q = &p->q;
    p->prim = vt_gemm_conv_prim(&n->g->gemm, q->B, q->C, q->H, q->W, p->Cout, q->k, q->s, q->p, p->G,
                                (p->has_bias ? VT_CONV_BIAS : 0) | (p->relu ? VT_CONV_RELU : 0), 0);
    if (p->prim && n->g->training && q->s == 1 && q->k > 1 && n->in[0]->requires_grad)
        p->bprim = vt_gemm_conv_prim(&n->g->gemm, q->B, p->Cout, q->Ho, q->Wo, q->C, q->k, 1, q->k - 1 - q->p, p->G, 0,
                                     0);
    if (p->bprim && bprim_scratch(n) + (int64_t)(vt_gemm_conv_scratch(p->bprim) + 3) / 4 > n->bws->numel)
        p->bprim = NULL; /* its blocked dy and dx (Winograd) do not fit in the backward scratch */
    if (p->prim && n->g->training && n->in[1]->requires_grad)
        p->wprim = vt_gemm_conv_wgrad(&n->g->gemm, q->B, q->C, q->H, q->W, p->Cout, q->k, q->s, q->p, p->G, 0);
    if (p->wprim && (int64_t)(vt_gemm_conv_scratch(p->wprim) + 3) / 4 > n->bws->numel)
        p->wprim = NULL; /* its blocked x and dy (Winograd) do not fit in the backward scratch */
    const size_t bytes = p->prim ? vt_gemm_conv_scratch(p->prim) : 0; /* blocked x and y (Winograd) */
    return p->prim && (bytes == 0 || vt_kernel_work(n, VT_U8, (int64_t)bytes) != NULL);
}

static void convn_prim_fwd(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    if (vt_gemm_conv_run(p->prim, n->in[0]->data, n->in[1]->data, p->has_bias ? n->in[2]->data : NULL,
                         n->out->data, n->kws ? vt_tensor_u8(n->kws) : NULL, 1) != 0 &&
        vt_node_fallback(n, 1) == 0) /* oneDNN failed: the reference from now on */
        convn_fwd(n);
}

static const vt_kernel k_convn_prim = {"conv_nhwc.onednn", convn_prim_prepare, convn_prim_fwd, 0};

/* Output pixels per task of the rows kernel: their patches (CONVN_ROWS × C·k·k floats) stay in the thread's caches
 * between their gather and the GEMM that reads them. */
#define CONVN_ROWS 256
#define CONVN_GROUPED_MIN 8192 /* output pixels from which a grouped conv takes the rows kernel at the AVX2 tier */
#define CONVN_GROUPED_MIN_TRAIN 2048 /* the same in training graphs (forward and backward) */

/* Output pixels of the rows kernel's largest task. */
static int64_t convn_task_rows(const vt_patch_geom *q) {
    const int64_t R = (int64_t)q->B * q->Ho * q->Wo;
    return R < CONVN_ROWS ? R : CONVN_ROWS;
}

/* The transposed conv that gives a stride-1 conv's dX as a forward conv of dy (padding k − 1 − p; its output is x's
 * map). */
static vt_patch_geom rows_dx_geom(const convn_p *p) {
    const vt_patch_geom *q = &p->q;
    return (vt_patch_geom){q->B, p->Cout, q->Ho, q->Wo, q->k, 1, q->k - 1 - q->p, q->H, q->W, 1};
}

/* Floats of backward scratch that the rows kernel's dW (per thread: a task's patches and a weight-sized sum) and
 * stride-1 dX (the flipped weight twice, per thread a task's patches of dy) take. */
static int64_t rows_bwd_floats(const convn_p *p, int nt) {
    const int64_t K = (int64_t)p->q.C * p->q.k * p->q.k, wn = (int64_t)p->Cout * (K / p->G);
    const vt_patch_geom t = rows_dx_geom(p);
    const int64_t dw = nt * (convn_task_rows(&p->q) * K + wn);
    const int64_t dx = p->q.s == 1 ? 2 * wn + nt * convn_task_rows(&t) * p->Cout * p->q.k * p->q.k : 0;
    return dw > dx ? dw : dx;
}

/* The rows kernel: a conv with at least 16 input channels per group and k > 1, as tasks of
 * CONVN_ROWS output pixels, each on one thread: the task's patches gathered in (ky, kx, c) order per group (one copy
 * of C/G contiguous floats per tap and group) into the thread's scratch, then one single-threaded sgemm per group
 * against the weight transposed to (Cout, ky, kx, C/G), the bias and ReLU on the rows it wrote. Taken at the AVX2
 * tier, where oneDNN's jit:avx2 channels-last convolution ran Next-ViT-S's deployed stem and its MHCA convs slower
 * (AMD EPYC Zen 3, 2026-11-30; one-conv eval graphs alternated in one process, best of 6-40, GFLOP/s oneDNN vs rows):
 * ungrouped at batch 16, 64→32 at 112² 76 vs 108, 32→64 98 vs 114, 64→64 stride 2 51 vs 132; batch 1 84 vs 112,
 * 121 vs 124, 53 vs 110. In the whole forward at batch 16 (`--profile`) those three nodes took 71, 69 and 33 instead
 * of 99, 76 and 80 ms, and eval graphs with and without the kernel, alternated, took 0.939 of the time at batch 16
 * and 0.951 at batch 1 (per-round medians of 10 and 30). The MHCA's 32-channel groups at batch 16: 56²×96 73-77 vs
 * 92-97, 28²×192 60-61 vs 86-87, but 14²×384 64-70 vs 60-78, 7²×768 62-70 vs 34-40, and at batch 1 oneDNN as fast
 * or faster (56² 73-78 vs 66-107, 14² 102-110 vs 45-65): grouped convs take the kernel from CONVN_GROUPED_MIN output
 * pixels: Next-ViT-S's eval graph at batch 16 then took 0.953 and 0.975 of the time (medians of 10; best steps 0.96,
 * 0.91), its hMHSA + cFFN variant's 0.993 (0.96). In training graphs the backward runs in the same tasks
 * (rows_wgrad, rows_dgrad), in place of oneDNN's weight-gradient and transposed-conv primitives; grouped convs from
 * CONVN_GROUPED_MIN_TRAIN output pixels. One-conv training graphs (the conv and a square-sum loss) alternated in one
 * process, best of 6-10, oneDNN vs rows in ms at batch 16, forward / backward: 56²×96 40 / 118 vs 33 / 69, 28²×192
 * 23 / 58 vs 17 / 32, 14²×384 10-12 / 27-28 vs 10 / 17-20, but 7²×768 5.1-5.7 / 14-15 vs 8.5-9.0 / 16-17; batch 1
 * 56² 1.8 / 4.4 vs 1.8 / 3.3, 28² even. Next-ViT-S's training step with and without them, alternated (per-round
 * medians): 0.906 of the time at batch 16 (8 rounds), 0.993 at batch 1 (40); the hMHSA + cFFN variant 0.953 at batch
 * 16. Not taken: the 3-channel first conv (3→64 stride 2 at 224²: 61 vs
 * 40 GFLOP/s at batch 16, 133 vs 49 at batch 1: 3-float copies) and the AVX-512 tier (not measured). Also on
 * VITC_GEMM=openblas, in place of the reference's whole-batch patch matrix (64→32 at 112²: 105 vs 44 GFLOP/s). The
 * gather is vt_patches_gather's in another order: (ky, kx, c) makes each tap one contiguous copy. */
static int convn_rows_prepare(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const vt_patch_geom *q = &p->q;
    const vt_gemm_plan *gp = &n->g->gemm;
    const int plan = gp->force == VT_GEMM_OPENBLAS || (gp->force == VT_GEMM_AUTO && gp->onednn == VT_ISA_AVX2);
    const int64_t px = (int64_t)q->B * q->Ho * q->Wo;
    const int grouped_ok = gp->force == VT_GEMM_OPENBLAS || px >= (n->g->training ? CONVN_GROUPED_MIN_TRAIN
                                                                                   : CONVN_GROUPED_MIN);
    if (!plan || (p->G > 1 && !grouped_ok) || q->k == 1 || q->C / p->G < 16) return 0;
    const int64_t K = (int64_t)q->C * q->k * q->k;
    const int64_t need = (int64_t)p->Cout * (K / p->G) + n->g->threads * convn_task_rows(q) * K;
    if (n->g->training && rows_bwd_floats(p, n->g->threads) > n->bws->numel) return 0;
    if (need > INT_MAX || !vt_kernel_work(n, VT_F32, need)) return 0; /* else the reference or oneDNN */
    VT_OP_P(n, convn_p)->rows_bwd = n->g->training;
    return 1;
}

/* The patches of output pixels [r0, r0 + rows) of q (x channels-last, C = G groups of Cg) into cols: per group a
 * (rows, k, k, Cg) block, one copy of Cg contiguous floats per tap (zeros outside the input). */
static void rows_gather(const vt_patch_geom *q, int G, const float *x, int64_t r0, int rows, float *cols) {
    const int Cg = q->C / G, kk = q->k * q->k, Kg = Cg * kk, HWo = q->Ho * q->Wo;
    for (int64_t r = r0; r < r0 + rows; r++) {
        const int bi = (int)(r / HWo), oh = (int)(r % HWo) / q->Wo, ow = (int)(r % HWo) % q->Wo;
        for (int tap = 0; tap < kk; tap++) {
            const int iy = oh * q->s - q->p + tap / q->k, ix = ow * q->s - q->p + tap % q->k;
            const int in = iy >= 0 && iy < q->H && ix >= 0 && ix < q->W;
            const float *src = in ? x + (((size_t)bi * q->H + iy) * q->W + ix) * q->C : NULL;
            for (int gi = 0; gi < G; gi++) {
                float *dt = cols + ((size_t)gi * rows + (size_t)(r - r0)) * Kg + (size_t)tap * Cg;
                if (in) memcpy(dt, src + (size_t)gi * Cg, sizeof(float) * (size_t)Cg);
                else memset(dt, 0, sizeof(float) * (size_t)Cg);
            }
        }
    }
}

/* y (B·Ho·Wo, Co) = (acc: +=) the conv of q over x (G groups) with wt (Co, k, k, C/G), plus b (NULL when acc), ReLU
 * when relu: tasks of CONVN_ROWS output pixels, each gathered into its thread's part of cols (convn_task_rows × C·k·k
 * floats per thread) and multiplied there. */
static void rows_conv(const vt_graph *g, const vt_patch_geom *q, int G, int Co, const float *x, const float *wt,
                      const float *b, float *y, int acc, int relu, float *cols) {
    const int Kg = q->C / G * q->k * q->k, K = Kg * G, Og = Co / G;
    const int64_t R = (int64_t)q->B * q->Ho * q->Wo, tasks = (R + CONVN_ROWS - 1) / CONVN_ROWS;
#pragma omp parallel num_threads(g->threads)
    {
        float *tc = cols + (size_t)omp_get_thread_num() * (size_t)convn_task_rows(q) * K;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t r0 = t * CONVN_ROWS;
            const int rows = (int)(r0 + CONVN_ROWS < R ? CONVN_ROWS : R - r0);
            rows_gather(q, G, x, r0, rows, tc);
            float *yr = y + (size_t)r0 * Co;
            for (int i = 0; b && !acc && i < rows; i++) memcpy(yr + (size_t)i * Co, b, sizeof(float) * (size_t)Co);
            for (int gi = 0; gi < G; gi++)
                vt_gemm(&g->gemm, 0, 1, rows, Og, Kg, 1.0f, tc + (size_t)gi * rows * Kg, Kg, wt + (size_t)gi * Og * Kg,
                        Kg, b || acc ? 1.0f : 0.0f, yr + (size_t)gi * Og, Co);
            if (relu) relu_n(yr, (int64_t)rows * Co);
        }
    }
}

static void convn_rows_fwd(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const int Kg = convn_kg(p), Cg = p->q.C / p->G, kk = p->q.k * p->q.k;
    float *wt = n->kws->data;
    for (int o = 0; o < p->Cout; o++) /* (Cout, Cg, k, k) -> (Cout, k, k, Cg) */
        transpose_w(n->in[1]->data + (size_t)o * Kg, wt + (size_t)o * Kg, Cg, kk, 0);
    rows_conv(n->g, &p->q, p->G, p->Cout, n->in[0]->data, wt, p->has_bias ? n->in[2]->data : NULL, n->out->data, 0,
              p->relu, wt + (size_t)p->Cout * Kg);
}

static const vt_kernel k_convn_rows = {"conv_nhwc.rows", convn_rows_prepare, convn_rows_fwd, 0};
static const vt_kernel *const convn_kernels[] = {&k_convn_rows, &k_convn_prim, NULL};

/* dW += Σ over output pixels of dY_gᵀ·patches_g in the rows kernel's tasks: each thread sums its tasks into its own
 * (Cout, k, k, C/G) block, then the blocks go into w's gradient in thread order (the same sums at every run). */
static void rows_wgrad(const vt_node *n, float *ws) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const vt_patch_geom *q = &p->q;
    const int G = p->G, Co = p->Cout, Og = Co / G, Cg = q->C / G, kk = q->k * q->k, Kg = Cg * kk, K = Kg * G;
    const int64_t R = convn_rows(p), tasks = (R + CONVN_ROWS - 1) / CONVN_ROWS;
    const int64_t cols = convn_task_rows(q) * K, per = cols + (int64_t)Co * Kg; /* a thread's patches, then its sums */
    const float *x = n->in[0]->data, *dy = n->out->grad;
    float *dw = n->in[1]->grad;
#pragma omp parallel num_threads(n->g->threads)
    {
        const int nth = omp_get_num_threads();
        float *tc = ws + (size_t)omp_get_thread_num() * (size_t)per, *acc = tc + cols;
        memset(acc, 0, sizeof(float) * (size_t)Co * (size_t)Kg);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t r0 = t * CONVN_ROWS;
            const int rows = (int)(r0 + CONVN_ROWS < R ? CONVN_ROWS : R - r0);
            rows_gather(q, G, x, r0, rows, tc);
            for (int gi = 0; gi < G; gi++)
                vt_gemm(&n->g->gemm, 1, 0, Og, Kg, rows, 1.0f, dy + (size_t)r0 * Co + (size_t)gi * Og, Co,
                        tc + (size_t)gi * rows * Kg, Kg, 1.0f, acc + (size_t)gi * Og * Kg, Kg);
        }
#pragma omp for schedule(static)
        for (int o = 0; o < Co; o++)
            for (int t = 0; t < kk; t++)
                for (int c = 0; c < Cg; c++) {
                    float s = 0.0f;
                    for (int i = 0; i < nth; i++) s += ws[(size_t)(i * per + cols) + ((size_t)o * kk + t) * Cg + c];
                    dw[((size_t)o * Cg + c) * kk + t] += s;
                }
    }
}

/* dX += the stride-1 conv's transposed conv of dy (rows_dx_geom) in the rows kernel, its weight each group's in and
 * out channels swapped and taps flipped (flip_weight), then laid out (C, k, k, Cout/G). */
static void rows_dgrad(const vt_node *n, float *ws) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const int C = p->q.C, G = p->G, Og = p->Cout / G, kk = p->q.k * p->q.k;
    const vt_patch_geom t = rows_dx_geom(p);
    float *wf = ws, *wt = ws + (size_t)C * Og * kk;
    flip_weight(n->in[1]->data, wf, C, p->Cout, G, kk);
    for (int c = 0; c < C; c++) transpose_w(wf + (size_t)c * Og * kk, wt + (size_t)c * Og * kk, Og, kk, 0);
    rows_conv(n->g, &t, G, C, n->out->grad, wt, NULL, n->in[0]->grad, 1, 0, wt + (size_t)C * Og * kk);
}

/* dX of a stride-1 conv through the forward primitive bprim: the transposed convolution is the correlation of dy,
 * padded by k − 1 − p, with each group's weight transposed (in ↔ out) and flipped, (C, Cout/G, k, k). Into the
 * backward scratch, then added to x's gradient. Where dX went through im2col's adjoint (a K = Cout/G sgemm into
 * C·k·k columns per output pixel, then their scatter-add), it ran at ~54 GFLOP/s on Next-ViT-S's 32-channel MHCA
 * groups at batch 16 (AMD EPYC Zen 3, 2 threads). Returns 1 when done, 0 to take the im2col path. */
static int convn_bwd_prim(const vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    if (!p->bprim) return 0;
    const int C = p->q.C, G = p->G, kk = p->q.k * p->q.k;
    const int64_t nx = n->in[0]->numel;
    float *dx = n->bws->data, *wt = dx + nx, *xg = n->in[0]->grad;
    const float *w = n->in[1]->data;
    flip_weight(w, wt, C, p->Cout, G, kk);
    if (vt_gemm_conv_run(p->bprim, n->out->grad, wt, NULL, dx, n->bws->data + bprim_scratch(n), 1) != 0) return 0;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nx; i++) xg[i] += dx[i];
    return 1;
}

static void convn_bwd(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const vt_tensor *x = n->in[0], *w = n->in[1], *b = p->has_bias ? n->in[2] : NULL;
    const float *dy = n->out->grad;
    float *cols = n->bws->data;
    const int R = (int)convn_rows(p), G = p->G, Og = p->Cout / G, Kg = convn_kg(p), K = Kg * G, Co = p->Cout;
    if (w->grad && p->rows_bwd)
        rows_wgrad(n, cols);
    else if (w->grad && !(p->wprim && vt_gemm_conv_wgrad_run(p->wprim, x->data, dy, w->grad, cols) == 0)) {
        /* one task per group: all rows sum into the group's weight block */
        vt_patches_gather(&p->q, x->data, cols);
#pragma omp parallel for schedule(static) if (G > 1)
        for (int gi = 0; gi < G; gi++)
            vt_gemm(&n->g->gemm, 1, 0, Og, Kg, R, 1.0f, dy + (size_t)gi * Og, Co, cols + (size_t)gi * Kg, K, 1.0f,
                    w->grad + (size_t)gi * Og * Kg, Kg);
    }
    if (b && b->grad) { /* column sums of dy: each thread owns a block of channels */
#pragma omp parallel
        {
            const int nt = omp_get_num_threads(), t = omp_get_thread_num();
            const int o0 = (int)((int64_t)Co * t / nt), o1 = (int)((int64_t)Co * (t + 1) / nt);
            for (int r = 0; r < R; r++)
                for (int o = o0; o < o1; o++) b->grad[o] += dy[(size_t)r * Co + o];
        }
    }
    if (x->grad && p->rows_bwd && p->q.s == 1)
        rows_dgrad(n, cols);
    else if (x->grad && !convn_bwd_prim(n)) { /* (group, chunk) tasks write disjoint blocks of dcols */
        const int nc = convn_chunks(R, G, n->g->threads);
#pragma omp parallel for collapse(2) schedule(static)
        for (int gi = 0; gi < G; gi++)
            for (int c = 0; c < nc; c++) {
                const int r0 = (int)((int64_t)R * c / nc), r1 = (int)((int64_t)R * (c + 1) / nc);
                vt_gemm(&n->g->gemm, 0, 0, r1 - r0, Kg, Og, 1.0f, dy + (size_t)r0 * Co + (size_t)gi * Og, Co,
                        w->data + (size_t)gi * Og * Kg, Kg, 0.0f, cols + (size_t)r0 * K + (size_t)gi * Kg, K);
            }
        vt_patches_scatter_add(&p->q, cols, x->grad);
    }
}

static const vt_opdef op_conv_nhwc = {"conv_nhwc", convn_fwd, convn_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)),
                                      convn_kernels, VT_OP_GEMM};

vt_tensor *vt_conv2d_nhwc(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad, int groups) {
    if (vt_bad(g, 2, x, w)) return NULL;
    char sx[64], sw[64], sb[64];
    conv_shape_strs(x, w, b, sx, sw, sb);
    if (x->ndim != 4 || w->ndim != 4 || w->shape[2] != w->shape[3] || groups < 1 || x->shape[3] % groups ||
        w->shape[0] % groups || w->shape[1] * groups != x->shape[3] || stride < 1 || pad < 0 ||
        pad >= w->shape[2] || w->shape[2] > 64 || (b && (b->ndim != 1 || b->shape[0] != w->shape[0])))
        return vt_fail(g, "conv_nhwc", "input %s (B, H, W, C), weight %s (%s) (Cout, C/groups, k, k), bias %s, "
                       "%d groups, stride %d, padding %d: shapes or arguments do not fit", sx, sw, w->name, sb,
                       groups, stride, pad);
    const int B = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3], k = w->shape[2];
    if (H + 2 * pad < k || W + 2 * pad < k)
        return vt_fail(g, "conv_nhwc", "input %s with padding %d is smaller than the %dx%d kernel", sx, pad, k, k);
    const int Ho = (H + 2 * pad - k) / stride + 1, Wo = (W + 2 * pad - k) / stride + 1;
    if ((int64_t)B * Ho * Wo * C * k * k > INT_MAX)
        return vt_fail(g, "conv_nhwc", "input %s: the %dx%d patches of the map do not fit in 2^31 floats", sx, k, k);
    const int shape[4] = {B, Ho, Wo, w->shape[0]};
    vt_tensor *in[3] = {x, w, b};
    vt_node *n = vt_new_node(g, &op_conv_nhwc, in, b ? 3 : 2, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    convn_p *p = VT_OP_P(n, convn_p);
    *p = (convn_p){{B, C, H, W, k, stride, pad, Ho, Wo, 1}, w->shape[0], groups, b != NULL, NULL, NULL, NULL, 0, 0};
    const int64_t cols = convn_rows(p) * C * k * k, xw = x->numel + (int64_t)w->numel; /* convn_bwd_prim's */
    int64_t bw = cols > xw ? cols : xw, rw = rows_bwd_floats(p, g->threads); /* and the rows kernel's */
    if (rw > bw && rw <= INT_MAX) bw = rw;
    if (k == 3 && stride == 1) { /* oneDNN's Winograd (conv_wino): dX's and dW's blocked maps after dX and w */
        const int64_t c16 = (C + 15) / 16 * 16, o16 = (w->shape[0] + 15) / 16 * 16;
        const int64_t wino = xw + 16 + (int64_t)B * H * W * c16 + (int64_t)B * Ho * Wo * o16;
        if (wino > bw && wino <= INT_MAX) bw = wino;
    }
    if (!vt_node_work(n, 0, cols) || (g->training && !vt_node_work(n, 1, bw))) return NULL;
    n->macs = convn_rows(p) * w->shape[0] * convn_kg(p);
    return n->out;
}

/* vt_relu(vt_conv2d_nhwc(...)): the ReLU in the conv's output pass where conv_relu_node says so. */
vt_tensor *vt_conv2d_nhwc_relu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad,
                               int groups) {
    vt_tensor *y = vt_conv2d_nhwc(g, x, w, b, stride, pad, groups);
    vt_node *n = conv_relu_node(g, y);
    if (!n) return vt_relu(g, y);
    VT_OP_P(n, convn_p)->relu = 1;
    return y;
}
