/* Linear layers and batched matrix products on vt_gemm (oneDNN, OpenBLAS or vitc's 64-column kernel), plus a plain
 * reference GEMM for tests. */
#include <omp.h>
#include <string.h>

#include "resfuse.h"
#include "mathfn.h"
#include "vitc/ops.h"

void vt_gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
            }
            float *c = &C[(size_t)i * ldc + j];
            *c = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *c));
        }
}

/* Row-major sgemm: C = alpha·op(A)·op(B) + beta·C with op given by ta/tb, dispatched by n's graph. */
static void gemm(const vt_node *n, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
    vt_gemm(&n->g->gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- linear: y = x (R, in) · w (out, in)ᵀ + b, with two optional fused epilogues ----
 * Inputs: x, w, then b and r when present. y = r + x·wᵀ + b, or y = act(x·wᵀ + b) (GELU or ReLU) with the
 * activation's derivative at the pre-activation kept in save[0] for backward (train graphs; for GELU computed with
 * the activation, they share erf and exp). The bias and residual are written into y first and sgemm accumulates onto
 * them (beta = 1); with GELU, threads take whole row panels (one single-threaded sgemm each) and apply GELU while
 * the panel is still in cache. Both avoid a separate pass over the (R, out) output; `vitc bench --profile`
 * measured GELU + residual adds at 8% of a DeiT-T training step before this fusion.
 * The prologue form y = GELU(x)·wᵀ + b (+ r) (vt_gelu_linear, an MLP's fc2 after a plain fc1) keeps only x, the
 * pre-activation, for backward: the epilogue form keeps both GELU's output (for the next layer's dW) and its
 * derivative, two (R, hidden) buffers, 20% of DeiT-S's training arena. Forward applies GELU per row panel into a
 * per-thread scratch before that panel's sgemm; backward recomputes GELU(x) for dW and GELU'(x) for dx.
 * Drop-path on a fused residual branch (vt_residual_drop, train graphs): y = r + s·(x·wᵀ + b) with s per sample 0 or
 * 1/(1 − p): the product runs only for kept samples (sgemm's alpha = s), and backward scales dy per sample in place
 * after the residual's gradient; `vitc bench --profile` measured the separate drop_path + add passes at 14% of a
 * CSwin-T training step. */

typedef struct {
    int R;        /* rows of x (all dims but the last) */
    int Ci, Co;   /* in and out features */
    int act;      /* activation after the bias: ACT_GELU (vt_linear_gelu), ACT_RELU (vt_linear_relu) or 0 */
    int has_bias; /* b is in[2] */
    int has_res;  /* a residual r was fused in (vt_residual): in[2 + has_bias] */
    int gelu_in;  /* GELU applied to x first (vt_gelu_linear): y = GELU(x)·wᵀ + b */
    int nt;       /* gelu_in: the threads its scratch (one row panel each, forward and bwp's backward) was sized for */
    int bwp;      /* gelu_in, train graphs: backward by row panels (bwd_panels), its scratch sized for that */
    float drop;   /* has_res in a train graph: drop-path probability of the branch (vt_residual_drop), 0: none */
    int T;        /* drop: rows per sample (R / samples); save[0] keeps each sample's factor, 0 or 1/(1 − drop) */
    vt_gemm_prim *prim; /* the linear.onednn_matmul kernel's primitive (made by its prepare) */
    vt_gemm_q8 *q8;     /* the linear.onednn_int8 kernel's primitive and quantised weight */
    vt_gemm_conv *conv; /* the linear.onednn_conv1x1 kernel's primitive and packed weight */
    vt_gemm_bfw *bfw;   /* prim in a bf16 inference graph with a constant weight: its bf16 copy */
    uint64_t gen;       /* conv, q8, bfw: the parameters' generation (vt_params.gen) the weight's copy was made at */
    int wt;             /* the reference forward transposes w into its forward scratch first and runs x·(wᵀ) (rule
                         * 15, vt_gemm_wt_first) */
    int64_t wt_at;      /* wt: where wᵀ starts in the forward scratch (after the GELU panels) */
} linear_p;

enum { ACT_GELU = 1, ACT_RELU = 2 };

#define PANEL_ROWS 256 /* rows per GEMM panel: 256×768 floats fit in a core's L2 next to the packed weight */

static const float *lin_bias(const vt_node *n) { return VT_OP_P(n, linear_p)->has_bias ? n->in[2]->data : NULL; }
static vt_tensor *lin_res(const vt_node *n) {
    const linear_p *p = VT_OP_P(n, linear_p);
    return p->has_res ? n->in[2 + p->has_bias] : NULL;
}

/* The drop-path factor of row r's sample (1 without drop-path). */
static float lin_scale(const vt_node *n, int r) {
    const linear_p *p = VT_OP_P(n, linear_p);
    return p->drop > 0.0f ? n->save[0]->data[r / p->T] : 1.0f;
}

/* Rows [r0, r1) of h = r + s·b, s the row's drop-path factor (either may be NULL; then nothing is written). */
static void lin_init(const vt_node *n, int r0, int r1, float *h) {
    const int Co = VT_OP_P(n, linear_p)->Co;
    const float *b = lin_bias(n), *res = lin_res(n) ? lin_res(n)->data : NULL;
    for (int r = r0; r < r1; r++) {
        float *hr = h + (size_t)r * Co;
        const float *rr = res ? res + (size_t)r * Co : NULL, s = lin_scale(n, r);
        if (b && rr)
            for (int o = 0; o < Co; o++) hr[o] = rr[o] + s * b[o];
        else if (b || rr)
            memcpy(hr, b ? b : rr, sizeof(float) * (size_t)Co);
    }
}

/* Rows [r0, r1) of h += s·x·wᵀ with x's row r0 at xr, onto what lin_init wrote (h = x·wᵀ without bias and
 * residual); with drop-path one sgemm per run of rows with the same factor, none for dropped samples (s = 0). */
static void lin_gemm(const vt_node *n, const float *xr, int r0, int r1, float *h) {
    const linear_p *p = VT_OP_P(n, linear_p);
    const int beta1 = lin_bias(n) || lin_res(n);
    const float *wb = p->wt ? n->fws->data + p->wt_at : n->in[1]->data;
    for (int a = r0, z; a < r1; a = z) {
        const float s = lin_scale(n, a);
        z = p->drop > 0.0f ? (a / p->T + 1) * p->T : r1;
        while (z < r1 && lin_scale(n, z) == s) z += p->T;
        if (z > r1) z = r1;
        if (s != 0.0f) /* w (Co, Ci) read transposed, or its copy wᵀ (Ci, Co) as it is (rule 15) */
            gemm(n, 0, !p->wt, z - a, p->Co, p->Ci, s, xr + (size_t)(a - r0) * p->Ci, p->Ci, wb, p->wt ? p->Co : p->Ci,
                 beta1 ? 1.0f : 0.0f, h + (size_t)a * p->Co, p->Co);
    }
}

/* Draws the drop-path factor of every sample into save[0] (keyed by the graph's seed and the node, as
 * vt_drop_path: a forward and its backward see the same draws). */
static void lin_draw(vt_node *n) {
    const linear_p *p = VT_OP_P(n, linear_p);
    vt_drop_path_draw(n, p->R / p->T, p->drop, n->save[0]->data);
}

/* Rows [r0, r1) of h = r + b + x·wᵀ (one thread's panel). */
static void lin_rows(const vt_node *n, const float *xr, int r0, int r1, float *h) {
    lin_init(n, r0, r1, h);
    lin_gemm(n, xr, r0, r1, h);
}

/* All rows of y = r + b + x·wᵀ: the bias and residual written by row blocks in parallel, then one threaded sgemm. */
static void lin_whole(const vt_node *n, const float *x, float *y) {
    const int R = VT_OP_P(n, linear_p)->R;
    if (lin_bias(n) || lin_res(n)) {
#pragma omp parallel for schedule(static) if (R >= 64)
        for (int r0 = 0; r0 < R; r0 += 32) lin_init(n, r0, r0 + 32 < R ? r0 + 32 : R, y);
    }
    lin_gemm(n, x, 0, R, y);
}

/* y[i] = act(y[i]) for i in [i0, i1), with d[i] = act'(y[i]) when d is not NULL. */
static void act_rows(int act, float *y, float *d, int64_t i0, int64_t i1) {
    if (act == ACT_RELU) {
        for (int64_t i = i0; i < i1; i++) {
            if (d) d[i] = y[i] > 0.0f ? 1.0f : 0.0f;
            y[i] = vt_relu_f(y[i]);
        }
    } else if (d)
        vt_gelu_fd_n(y + i0, y + i0, d + i0, i1 - i0);
    else
        vt_gelu_n(y + i0, y + i0, i1 - i0);
}

/* Panels of the row loops: a multiple of the thread count, each at most PANEL_ROWS rows. */
static int panels(int R, int nt) { return nt * ((R + nt * PANEL_ROWS - 1) / (nt * PANEL_ROWS)); }

/* Rows of one thread's panel scratch (vt_gelu_linear): no panel of `panels` is longer. */
static int panel_cap(int R) { return R < PANEL_ROWS ? R : PANEL_ROWS; }

/* GELU of all of x (R·Ci floats) into the forward scratch (sized for it when R < 2 * PANEL_ROWS); returns it. */
static const float *gelu_all(const vt_node *n, const float *x) {
    const linear_p *lp = VT_OP_P(n, linear_p);
    float *gx = n->fws->data;
    vt_gelu_all(x, gx, NULL, (int64_t)lp->R * lp->Ci);
    return gx;
}

/* The activation (and its derivative into d) over all of y, in threaded chunks. */
static void act_all(const vt_node *n, float *y, float *d) {
    const linear_p *lp = VT_OP_P(n, linear_p);
    const int64_t N = (int64_t)lp->R * lp->Co, chunk = 4096;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < (N + chunk - 1) / chunk; c++)
        act_rows(lp->act, y, d, c * chunk, (c + 1) * chunk < N ? (c + 1) * chunk : N);
}

/* The reference (sgemm) forward. */
static void linear_fwd(vt_node *n) {
    const linear_p *lp = VT_OP_P(n, linear_p);
    const int R = lp->R, Ci = lp->Ci, Co = lp->Co, act = lp->act;
    const float *x = n->in[0]->data;
    float *y = n->out->data, *d = act && n->save[0] ? n->save[0]->data : NULL;
    const int nt = n->g->threads;
    if (lp->drop > 0.0f) lin_draw(n);
    if (lp->wt) vt_gemm_transpose(n->in[1]->data, Co, Ci, n->fws->data + lp->wt_at);
    if (lp->gelu_in && R < 2 * PANEL_ROWS) { /* few rows: GELU of all of x, then one threaded sgemm (a batch-1
                                                * Swin-T's last stage: 25-row panels on one thread each ran 1.35x
                                                * slower) */
        lin_whole(n, gelu_all(n, x), y);
        return;
    }
    if (lp->gelu_in) { /* per thread: GELU of a row panel of x into scratch, then that panel's sgemm */
        const int np = panels(R, lp->nt);
#pragma omp parallel for schedule(static) num_threads(lp->nt)
        for (int p = 0; p < np; p++) {
            const int r0 = (int)((int64_t)R * p / np), r1 = (int)((int64_t)R * (p + 1) / np);
            float *gx = n->fws->data + (size_t)omp_get_thread_num() * panel_cap(R) * Ci;
            const float *xr = x + (size_t)r0 * Ci;
            vt_gelu_n(xr, gx, (int64_t)(r1 - r0) * Ci);
            lin_rows(n, gx, r0, r1, y);
        }
        return;
    }
    if (!act || R < 2 * PANEL_ROWS) { /* one multi-threaded sgemm over all rows, after a threaded bias/residual */
        lin_whole(n, x, y);
        if (act) act_all(n, y, d);
        return;
    }
    const int np = panels(R, nt);
#pragma omp parallel for schedule(static)
    for (int p = 0; p < np; p++) {
        const int r0 = (int)((int64_t)R * p / np), r1 = (int)((int64_t)R * (p + 1) / np);
        lin_rows(n, x + (size_t)r0 * Ci, r0, r1, y);
        act_rows(act, y, d, (int64_t)r0 * Co, (int64_t)r1 * Co);
    }
}

/* The whole forward can run as one oneDNN primitive: no drop-path factors per sample, no prologue GELU of many rows
 * (that runs per panel). */
static int linear_whole_fits(const vt_node *n) {
    const linear_p *p = VT_OP_P(n, linear_p);
    return !(p->gelu_in && p->R >= 2 * PANEL_ROWS) && p->drop == 0.0f;
}

/* The whole forward as one oneDNN matmul primitive where it fits (linear_whole_fits) and the GEMM rule wants one
 * (vt_gemm_linear_wanted): bias, residual and an inference ReLU fused; GELU, and in train graphs the activation and
 * its derivative (saved), run after it. vitc's vector GELU over the output after the product beat oneDNN 2.6's erf
 * GELU post-op: the linear alone at batch 16, alternated in one process (Intel Xeon Ice Lake, 2026-11-29), DeiT-Ti's
 * fc1 1.055x (3152 x 192 -> 768; the product without any GELU 3.09 ms, with the post-op 4.0, with the pass after it
 * 3.6), DeiT-S's 1.03x, 197 rows 1.08x; eval graphs DeiT-Ti 1.048 (b16) and 1.033 (b1), Swin-T 1.010 and 1.061,
 * CSwin-T 1.018, DeiT-Ti + hMHSA + cFFN 1.060, DeiT-S 0.991 / 1.029, Refined-ViT-S 0.979 / 0.998 (two runs each:
 * noise). */
static int linear_prim_wanted(const vt_node *n) {
    const linear_p *p = VT_OP_P(n, linear_p);
    return linear_whole_fits(n) &&
           vt_gemm_linear_wanted(&n->g->gemm, n->g->threads, p->R, p->Co, p->Ci, !n->g->training || !p->act);
}

/* The primitive's post-op: the residual, or an inference ReLU (nothing keeps its input). */
static vt_gemm_post linear_prim_post(const vt_node *n) {
    const linear_p *p = VT_OP_P(n, linear_p);
    return p->has_res ? VT_GEMM_POST_ADD : p->act == ACT_RELU && !n->save[0] ? VT_GEMM_POST_RELU : VT_GEMM_POST_NONE;
}

static int linear_prim_prepare(vt_node *n) {
    linear_p *p = VT_OP_P(n, linear_p);
    if (!linear_prim_wanted(n)) return 0;
    p->prim = vt_gemm_linear_prim(&n->g->gemm, p->R, p->Co, p->Ci, p->has_bias, linear_prim_post(n));
    if (!p->prim) return 0;
    /* w in bf16 once (not with --no-prepack: converted at every run then) */
    if (n->g->gemm.bf16 && n->g->gemm.prepack && !n->g->training && vt_graph_is_constant(n->g, n->in[1]))
        return (p->bfw = vt_gemm_bf16_weight(&n->g->gemm, p->Co, p->Ci)) != NULL;
    return 1;
}

static void linear_prim_fwd(vt_node *n) {
    linear_p *lp = VT_OP_P(n, linear_p);
    const int act = lp->act;
    float *y = n->out->data, *d = act && n->save[0] ? n->save[0]->data : NULL;
    const float *x = lp->gelu_in ? gelu_all(n, n->in[0]->data) : n->in[0]->data; /* R < 2 * PANEL_ROWS (prepare) */
    const vt_tensor *res = lin_res(n);
    const uint64_t gen = n->g->P->gen; /* bfw: converted again when the parameters changed */
    if (vt_gemm_prim_run(lp->prim, x, n->in[1]->data, lin_bias(n), res ? res->data : NULL, y, lp->bfw,
                         gen != lp->gen) != 0) {
        if (vt_node_fallback(n, 1) == 0) linear_fwd(n); /* oneDNN failed: the reference from now on */
        return;
    }
    lp->gen = gen;
    if (act && (d || act == ACT_GELU)) act_all(n, y, d); /* and the derivative in train graphs */
}

static const vt_kernel k_linear_prim = {"linear.onednn_matmul", linear_prim_prepare, linear_prim_fwd, 1};

/* Inference graphs where rule 12 holds (vt_gemm_plan.pack_w: oneDNN's AVX2 tier, AMD's AVX-512): a layer whose
 * weight is constant runs as a oneDNN 1x1 convolution with that weight packed at the first forward
 * (vt_gemm_linear_conv, rule 12 in gemm.c), whatever its shape, the epilogue as the matmul kernel's. */
static int linear_conv_prepare(vt_node *n) {
    linear_p *p = VT_OP_P(n, linear_p);
    if (n->g->training || !vt_graph_is_constant(n->g, n->in[1]) || !linear_whole_fits(n)) return 0;
    p->conv = vt_gemm_linear_conv(&n->g->gemm, p->R, p->Co, p->Ci, p->has_bias, linear_prim_post(n));
    return p->conv != NULL;
}

static void linear_conv_fwd(vt_node *n) {
    linear_p *lp = VT_OP_P(n, linear_p);
    const float *x = lp->gelu_in ? gelu_all(n, n->in[0]->data) : n->in[0]->data; /* R < 2 * PANEL_ROWS (prepare) */
    const vt_tensor *res = lin_res(n);
    const uint64_t gen = n->g->P->gen; /* the weight is made of parameters (prepare): repacked when they changed */
    if (vt_gemm_linear_conv_run(lp->conv, x, n->in[1]->data, lin_bias(n), res ? res->data : NULL, n->out->data,
                                gen != lp->gen)) {
        if (vt_node_fallback(n, 1) == 0) linear_fwd(n); /* oneDNN failed: the reference from now on */
        return;
    }
    lp->gen = gen;
    if (lp->act == ACT_GELU) act_all(n, n->out->data, NULL);
}

static const vt_kernel k_linear_conv = {"linear.onednn_conv1x1", linear_conv_prepare, linear_conv_fwd, 1};

/* int8 graphs (vt_graph.int8, inference only): a layer whose weight is constant (a parameter, or made from
 * parameters, e.g. a slice of one) runs as a oneDNN u8 × s8 matmul (vt_gemm_q8: the input quantised per run, the
 * weight per output row at the first run), bias and residual or ReLU fused, GELU after it. */
static int linear_q8_prepare(vt_node *n) {
    linear_p *p = VT_OP_P(n, linear_p);
    if (!n->g->int8 || n->g->training || p->drop > 0.0f || (p->has_res && p->act) ||
        !vt_graph_is_constant(n->g, n->in[1]))
        return 0;
    const vt_gemm_post post = p->has_res            ? VT_GEMM_POST_ADD
                              : p->act == ACT_RELU ? VT_GEMM_POST_RELU
                                                   : VT_GEMM_POST_NONE;
    p->q8 = vt_gemm_q8_linear(&n->g->gemm, p->R, p->Co, p->Ci, p->has_bias, post, p->gelu_in);
    return p->q8 != NULL && vt_kernel_work(n, VT_U8, (int64_t)p->R * p->Ci) != NULL;
}

static void linear_q8_fwd(vt_node *n) {
    linear_p *lp = VT_OP_P(n, linear_p);
    const vt_tensor *res = lin_res(n);
    const uint64_t gen = n->g->P->gen; /* requantised when the parameters changed */
    const int rc = vt_gemm_q8_run(lp->q8, n->in[0]->data, vt_tensor_u8(n->kws), n->in[1]->data, lin_bias(n),
                                  res ? res->data : NULL, n->out->data, gen != lp->gen);
    if (rc == 0 || rc == 1) lp->gen = gen; /* the weight was quantised (1: only the input was refused) */
    if (rc) { /* oneDNN failed: the reference from now on; rc 1 (a non-finite input): this run */
        if (vt_node_fallback(n, rc < 0) == 0) linear_fwd(n);
        return;
    }
    if (lp->act == ACT_GELU) act_all(n, n->out->data, NULL);
}

static const vt_kernel k_linear_q8 = {"linear.onednn_int8", linear_q8_prepare, linear_q8_fwd, 0};
static const vt_kernel *const linear_kernels[] = {&k_linear_q8, &k_linear_conv, &k_linear_prim, NULL};

/* Backward's one pass over dy's rows before the products: the fused residual gets dy as it arrives (written where
 * its gradient is fresh, else added), dy becomes the product's gradient in place (times the sample's drop-path factor
 * or the activation's derivative; only this node reads its output's gradient, and it has done so by then), and the
 * bias gradient gets the column sums of the result: per-thread partial sums over contiguous row ranges (backward
 * scratch, nt × Co floats), added in thread order. Four separate passes before, a residual copy, a scaling loop with
 * an integer division per element, the derivative's product and column sums, were 5% of a CSwin-T training step
 * (perf, batch 16). */
static void lin_dy_pass(vt_node *n, float *dy) {
    const linear_p *p = VT_OP_P(n, linear_p);
    const vt_tensor *r = lin_res(n);
    float *rg = r ? r->grad : NULL, *db = p->has_bias ? n->in[2]->grad : NULL;
    const float *m = p->drop > 0.0f ? n->save[0]->data : NULL, *d = p->act ? n->save[0]->data : NULL;
    if (!rg && !m && !d && !db) return;
    const int R = p->R, Co = p->Co, nt = n->g->threads, rset = rg && (n->grad_fresh >> (2 + p->has_bias) & 1u);
    float *part = db && n->bws ? n->bws->data : NULL;
    if (part) vt_zero(part, (int64_t)nt * Co);
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        const int r0 = (int)((int64_t)R * t / T), r1 = (int)((int64_t)R * (t + 1) / T);
        float *restrict ps = part ? part + (size_t)t * Co : NULL;
        for (int i = r0; i < r1; i++) {
            float *restrict g = dy + (size_t)i * Co;
            vt_res_grad_row(g, rg ? rg + (size_t)i * Co : NULL, rset, !d && m ? m[i / p->T] : 1.0f, Co);
            if (d) {
                const float *restrict dr = d + (size_t)i * Co;
#pragma omp simd
                for (int c = 0; c < Co; c++) g[c] *= dr[c];
            }
            if (ps)
#pragma omp simd
                for (int c = 0; c < Co; c++) ps[c] += g[c];
        }
    }
    if (part)
        for (int t = 0; t < nt; t++)
            for (int c = 0; c < Co; c++) db[c] += part[(size_t)t * Co + c];
    else if (db)
        vt_add_col_sums(dy, R, Co, db);
}

/* The floats of a prologue-GELU linear's backward scratch by row panels, per thread two panels (dy·w and GELU(x)) and
 * a partial dW; 0 where the whole-array form runs. That form writes GELU(x) and GELU' over (R, hidden) to memory and
 * reads them back; by panels, each one-thread product packs the weight again and the partial dW goes through the cache
 * per panel, which costs more than the passes once the weight is large (an Ice Lake lost 9% of a SimpleViT-S training
 * step, 3136 x 1536 -> 384, to panels). Hence panels for weights of at most 2^18 floats whose scratch is no larger
 * than x, and not with --dtype bf16 (products inside parallel loops run fp32). Training graphs at batch 16, both forms
 * in one process, 8 alternated steps (Zen 4, 2026-12-01): CSwin-T's step 0.93x (its 21 stage-3 fc2, 3136 x 1024 ->
 * 256, 607 against 718 ms), FLatten-Swin-T and DeiT-Ti level (1.00, 0.99). */
static int64_t bwd_panels(int R, int Ci, int Co, int nt) {
    const int64_t need = (int64_t)nt * (2 * (int64_t)panel_cap(R) * Ci + (int64_t)Co * Ci);
    return R >= 2 * PANEL_ROWS && (int64_t)Co * Ci <= (1 << 18) && need <= (int64_t)R * Ci ? need : 0;
}

static void linear_bwd(vt_node *n) {
    const linear_p *p = VT_OP_P(n, linear_p);
    const vt_tensor *x = n->in[0], *w = n->in[1];
    const int R = p->R, Ci = p->Ci, Co = p->Co;
    float *dy = n->out->grad;
    const int x_fresh = n->grad_fresh & 1u; /* write x's gradient rather than add (see vt_node.grad_fresh) */
    lin_dy_pass(n, dy);
    if (p->bwp) { /* per row panel, in the thread's scratch: s = dy·w, one pass over x for GELU(x) and dx = s·GELU'(x),
                   * then the panel's dyᵀ·GELU(x) added to the thread's partial dW; the partials go into w's gradient */
        const int np = panels(R, p->nt), cap = panel_cap(R);
        const float *xv = x->data;
        float *dx = x->grad;
        float *scr = n->bws->data, *part = w->grad ? scr + (size_t)p->nt * 2 * cap * Ci : NULL;
        if (part) vt_zero(part, (int64_t)p->nt * Co * Ci);
#pragma omp parallel for schedule(static) num_threads(p->nt)
        for (int q = 0; q < np; q++) {
            const int t = omp_get_thread_num(), r0 = (int)((int64_t)R * q / np), r1 = (int)((int64_t)R * (q + 1) / np);
            float *s = scr + (size_t)t * 2 * cap * Ci, *gx = part ? s + (size_t)cap * Ci : NULL;
            const float *dyr = dy + (size_t)r0 * Co;
            if (dx) {
                gemm(n, 0, 0, r1 - r0, Ci, Co, 1.0f, dyr, Co, w->data, Ci, 0.0f, s, Ci);
                vt_gelu_bwd_n(xv + (size_t)r0 * Ci, gx, s, dx + (size_t)r0 * Ci, (int64_t)(r1 - r0) * Ci, !x_fresh);
            } else if (gx)
                vt_gelu_n(xv + (size_t)r0 * Ci, gx, (int64_t)(r1 - r0) * Ci);
            if (part) gemm(n, 1, 0, Co, Ci, r1 - r0, 1.0f, dyr, Co, gx, Ci, 1.0f, part + (size_t)t * Co * Ci, Ci);
        }
        const int64_t NW = (int64_t)Co * Ci;
        for (int t = 0; part && t < p->nt; t++) { /* in thread order, each pass vectorised */
            const float *restrict pt = part + (size_t)t * NW;
            float *restrict dw = w->grad;
#pragma omp parallel for simd schedule(static)
            for (int64_t i = 0; i < NW; i++) dw[i] += pt[i];
        }
    } else if (p->gelu_in) { /* the whole GELU(x) in scratch for dW, then the same scratch for dy·w before GELU' */
        const int64_t NX = (int64_t)R * Ci;
        float *t = n->bws->data;
        const float *xv = x->data;
        float *dx = x->grad;
        const int both = w->grad && x_fresh; /* GELU' goes into x's gradient, written later: one pass for both */
        if (w->grad) {
            vt_gelu_all(xv, t, both ? dx : NULL, NX);
            gemm(n, 1, 0, Co, Ci, R, 1.0f, dy, Co, t, Ci, 1.0f, w->grad, Ci);
        }
        if (dx) {
            gemm(n, 0, 0, R, Ci, Co, 1.0f, dy, Co, w->data, Ci, 0.0f, t, Ci);
            if (both) {
#pragma omp parallel for schedule(static)
                for (int64_t i = 0; i < NX; i++) dx[i] *= t[i];
            } else
                vt_gelu_bwd_all(xv, t, dx, NX, !x_fresh);
        }
    } else {
        if (x->grad) gemm(n, 0, 0, R, Ci, Co, 1.0f, dy, Co, w->data, Ci, x_fresh ? 0.0f : 1.0f, x->grad, Ci);
        if (w->grad) gemm(n, 1, 0, Co, Ci, R, 1.0f, dy, Co, x->data, Ci, 1.0f, w->grad, Ci);
    }
}

static const vt_opdef op_linear = {"linear", linear_fwd, linear_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)),
                                    linear_kernels, VT_OP_GEMM};

/* act: ACT_GELU or ACT_RELU after the product (0: none); gelu_in: GELU on x before it. */
static vt_tensor *linear(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int act, int gelu_in) {
    if (vt_bad(g, 2, x, w)) return NULL;
    char sx[64], sw[64], sb[64];
    const int Ci = x->shape[x->ndim - 1];
    if (w->ndim != 2 || w->shape[1] != Ci || (b && (b->ndim != 1 || b->shape[0] != w->shape[0])))
        return vt_fail(g, "linear", "input %s, weight %s (%s), bias %s: weight must be (out, %d)",
                       vt_shape_str(x, sx, 64), vt_shape_str(w, sw, 64), w->name, b ? vt_shape_str(b, sb, 64) : "none",
                       Ci);
    int shape[VT_MAXDIM];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    vt_tensor *in[3] = {x, w, b};
    vt_node *n = vt_new_node(g, &op_linear, in, b ? 3 : 2, vt_new_act(g, x->ndim, shape));
    if (!n) return NULL;
    const int R = (int)(x->numel / Ci);
    *VT_OP_P(n, linear_p) = (linear_p){R, Ci, w->shape[0], act, b != NULL, 0, gelu_in, g->threads, 0,
                                       0.0f, R, NULL, NULL, NULL, NULL, 0, 0, 0};
    n->macs = (int64_t)R * Ci * w->shape[0];
    n->grad_sets = 1u; /* x; a fused residual adds its slot (residual) */
    if (act && g->training) vt_node_save(n, 0, n->out->numel);
    /* forward scratch: GELU(x) whole (few rows) or one row panel per thread, then wᵀ (rule 15, where linear_fwd
     * may run the node: train graphs, unless rule 5's primitive takes it (then the scratch goes unused), and eval
     * graphs' GELU prologue over row panels, which only the int8 kernel takes (its scratch is not planned); the
     * products run on one thread per row panel where linear_fwd takes panels) */
    linear_p *lp = VT_OP_P(n, linear_p);
    const int64_t gelu_rows = !gelu_in ? 0 : R < 2 * PANEL_ROWS ? R : (int64_t)lp->nt * panel_cap(R);
    const int by_panels = (gelu_in || act) && R >= 2 * PANEL_ROWS;
    lp->wt = (g->training || (gelu_in && by_panels)) &&
             vt_gemm_wt_first(&g->gemm, by_panels ? 1 : g->threads, R, by_panels ? panel_cap(R) : R, w->shape[0], Ci);
    lp->wt_at = (gelu_rows * Ci + 15) / 16 * 16;
    if (gelu_rows || lp->wt) vt_node_work(n, 0, lp->wt_at + (lp->wt ? (int64_t)w->shape[0] * Ci : 0));
    if (g->training && (gelu_in || b)) { /* backward scratch: the bias's partial sums, then GELU(x) whole or the
                                           * row panels' */
        const int64_t part = b ? (int64_t)g->threads * w->shape[0] : 0,
                      pan = gelu_in && !g->gemm.bf16 ? bwd_panels(R, Ci, w->shape[0], lp->nt) : 0,
                      need = pan ? pan : gelu_in ? x->numel : 0;
        lp->bwp = pan > 0;
        vt_node_work(n, 1, need > part ? need : part);
    }
    return n->out;
}

vt_tensor *vt_linear(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b) { return linear(g, x, w, b, 0, 0); }

vt_tensor *vt_linear_gelu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b) {
    return linear(g, x, w, b, ACT_GELU, 0);
}

vt_tensor *vt_linear_relu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b) {
    return linear(g, x, w, b, ACT_RELU, 0);
}

vt_tensor *vt_gelu_linear(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b) { return linear(g, x, w, b, 0, 1); }

/* x + h with h's drop-path probability drop (0: none; train graphs only), fused into h's linear where vt_residual
 * would fuse; otherwise vt_add of x and vt_drop_path(h). */
static vt_tensor *residual(vt_graph *g, vt_tensor *x, vt_tensor *h, float drop) {
    if (vt_bad(g, 2, x, h)) return NULL;
    if (!(drop >= 0.0f && drop < 1.0f)) return vt_fail(g, "drop_path", "probability %g must be in [0, 1)", (double)drop);
    if (!g->training) drop = 0.0f;
    vt_node *n = !h->view_of && h->prod >= 0 ? g->nodes[h->prod] : NULL;
    linear_p *p = n && n->op == &op_linear ? VT_OP_P(n, linear_p) : NULL;
    const int ffn = n && !g->training && vt_ffn_fusable(n); /* a fused FFN (eval graphs) */
    const int bns = n && vt_bnsum_fusable(n);                /* cFFN's BatchNorm sum (its training form) */
    /* fusable: a plain linear (or the fused FFN, or the BatchNorm sum) whose only reader would be the sum, and x
     * computed before it (a node made later, e.g. by an argument evaluated after h's builder, cannot become its
     * input) */
    if ((!p && !ffn && !bns) || (p && (p->act || p->has_res)) || h->last_use >= 0 || h->is_output || x == h ||
        (vt_root(x)->kind == VT_ACT && vt_root(x)->prod >= h->prod) ||
        x->ndim != h->ndim || memcmp(x->shape, h->shape, sizeof(int) * (size_t)x->ndim))
        return vt_add(g, x, drop > 0.0f ? vt_drop_path(g, h, drop) : h); /* not fusable (or a shape mismatch, which
                                                                             * vt_add reports) */
    if (vt_node_add_input(n, x)) return NULL;
    if (ffn) {
        vt_ffn_take_residual(n);
    } else if (bns) {
        if (vt_bnsum_take_residual(n, h->shape[0], drop)) return NULL;
    } else {
        p->has_res = 1;
        n->grad_sets |= 1u << (n->nin - 1);
        if (drop > 0.0f) {
            if (!vt_node_save(n, 0, h->shape[0])) return NULL;
            p->drop = drop;
            p->T = p->R / h->shape[0];
        }
    }
    vt_tensor *y = vt_reshape(g, h, h->ndim, h->shape); /* the sum, under a new handle */
    h->consumed = 1;
    return y;
}

vt_tensor *vt_residual(vt_graph *g, vt_tensor *x, vt_tensor *h) { return residual(g, x, h, 0.0f); }

vt_tensor *vt_residual_drop(vt_graph *g, vt_tensor *x, vt_tensor *h, float drop) { return residual(g, x, h, drop); }

/* ---- linear with a transposed output: y (M, R) = w (M, K) · x (R, K)ᵀ + b (one column per row of x) ----
 * For ops that read channel planes (GroupMixFormer's aggregators and branches): vt_linear's product written
 * transposed by the GEMM itself (one threaded GEMM over all rows, as vt_linear's), so no transposing pass over an
 * (R, M) output follows. The bias is written into y first and the GEMM accumulates onto it. */
typedef struct {
    int R, K, M;
    int has_bias;
} linear_t_p;

static void linear_t_fwd(vt_node *n) {
    const linear_t_p *p = VT_OP_P(n, linear_t_p);
    const int R = p->R, K = p->K, M = p->M;
    float *y = n->out->data;
    if (p->has_bias) {
        const float *b = n->in[2]->data;
#pragma omp parallel for schedule(static)
        for (int o = 0; o < M; o++)
            for (int r = 0; r < R; r++) y[(size_t)o * R + r] = b[o];
    }
    gemm(n, 0, 1, M, R, K, 1.0f, n->in[1]->data, K, n->in[0]->data, K, p->has_bias ? 1.0f : 0.0f, y, R);
}

/* dx (R, K) = dyᵀ · w (written where fresh); dw += dy · x; db += dy's row sums. */
static void linear_t_bwd(vt_node *n) {
    const linear_t_p *p = VT_OP_P(n, linear_t_p);
    const int R = p->R, K = p->K, M = p->M;
    const float *dy = n->out->grad;
    float *dx = n->in[0]->grad, *dw = n->in[1]->grad, *db = p->has_bias ? n->in[2]->grad : NULL;
    if (dx) gemm(n, 1, 0, R, K, M, 1.0f, dy, R, n->in[1]->data, K, n->grad_fresh & 1u ? 0.0f : 1.0f, dx, K);
    if (dw) gemm(n, 0, 0, M, K, R, 1.0f, dy, R, n->in[0]->data, K, 1.0f, dw, K);
    if (db) {
#pragma omp parallel for schedule(static)
        for (int o = 0; o < M; o++) {
            double s = 0.0;
            for (int r = 0; r < R; r++) s += dy[(size_t)o * R + r];
            db[o] += (float)s;
        }
    }
}

static const vt_opdef op_linear_t = {"linear_t", linear_t_fwd, linear_t_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)),
                                     NULL, VT_OP_GEMM};

vt_tensor *vt_linear_t(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b) {
    if (vt_bad(g, 2, x, w)) return NULL;
    char sx[64], sw[64];
    vt_shape_str(x, sx, 64);
    vt_shape_str(w, sw, 64);
    if (x->ndim < 1 || x->ndim >= VT_MAXDIM || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1])
        return vt_fail(g, "linear_t", "input %s must be (..., K) and weight %s (M, K)", sx, sw);
    const int M = w->shape[0], K = w->shape[1];
    if (b && (b->ndim != 1 || b->shape[0] != M))
        return vt_fail(g, "linear_t", "bias must be (%d) for weight %s", M, sw);
    int ys[VT_MAXDIM];
    ys[0] = M;
    for (int i = 0; i + 1 < x->ndim; i++) ys[i + 1] = x->shape[i];
    vt_tensor *in[3] = {x, w, b};
    vt_node *n = vt_new_node(g, &op_linear_t, in, b ? 3 : 2, vt_new_act(g, x->ndim, ys));
    if (!n) return NULL;
    const int R = (int)(x->numel / K);
    *VT_OP_P(n, linear_t_p) = (linear_t_p){R, K, M, b != NULL};
    n->macs = (int64_t)R * K * M;
    n->grad_sets = 1u; /* x */
    return n->out;
}

/* ---- batched matmul ---- */
/* C (batch, M, N) = alpha·op(A)·op(B), op(A) (M, K) and op(B) (K, N) transposed when ta / tb. */
typedef struct {
    int nb;     /* batch entries */
    int M, N, K;
    int ta, tb;
    int shared; /* b is 2-D, one matrix shared by every batch entry */
    float alpha;
} matmul_p;

static void matmul_fwd(vt_node *n) {
    const matmul_p *p = VT_OP_P(n, matmul_p);
    const int nb = p->nb, M = p->M, N = p->N, K = p->K, ta = p->ta, tb = p->tb, shared = p->shared;
    const float alpha = p->alpha;
    const float *A = n->in[0]->data, *B = n->in[1]->data;
    float *C = n->out->data;
    const int lda = ta ? M : K, ldb = tb ? K : N;
    if (shared && !ta) {
        gemm(n, 0, tb, nb * M, N, K, alpha, A, lda, B, ldb, 0.0f, C, N);
        return;
    }
    if (nb == 1) {
        gemm(n, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, N);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int i = 0; i < nb; i++)
        gemm(n, ta, tb, M, N, K, alpha, A + (size_t)i * M * K, lda, B + (shared ? 0 : (size_t)i * K * N), ldb,
             0.0f, C + (size_t)i * M * N, N);
}

/* dA += alpha·dC·op(B)ᵀ (or its transpose when ta) for one batch entry. */
static void grad_a(const vt_node *n, int ta, int tb, int M, int N, int K, float alpha, const float *dC,
                   const float *B, float *dA) {
    if (!ta)
        gemm(n, 0, !tb, M, K, N, alpha, dC, N, B, tb ? K : N, 1.0f, dA, K);
    else
        gemm(n, tb, 1, K, M, N, alpha, B, tb ? K : N, dC, N, 1.0f, dA, M);
}

/* dB += alpha·op(A)ᵀ·dC (or its transpose when tb) for one batch entry. */
static void grad_b(const vt_node *n, int ta, int tb, int M, int N, int K, float alpha, const float *dC,
                   const float *A, float *dB) {
    if (!tb)
        gemm(n, !ta, 0, K, N, M, alpha, A, ta ? M : K, dC, N, 1.0f, dB, N);
    else
        gemm(n, 1, ta, N, K, M, alpha, dC, N, A, ta ? M : K, 1.0f, dB, K);
}

static void matmul_bwd(vt_node *n) {
    const matmul_p *p = VT_OP_P(n, matmul_p);
    const int nb = p->nb, M = p->M, N = p->N, K = p->K, ta = p->ta, tb = p->tb, shared = p->shared;
    const float alpha = p->alpha;
    const vt_tensor *a = n->in[0], *b = n->in[1];
    const float *dC = n->out->grad;
    if (shared && !ta) {
        if (a->grad) grad_a(n, 0, tb, nb * M, N, K, alpha, dC, b->data, a->grad);
        if (b->grad) grad_b(n, 0, tb, nb * M, N, K, alpha, dC, a->data, b->grad);
        return;
    }
    if (a->grad) {
#pragma omp parallel for schedule(static) if (nb > 1)
        for (int i = 0; i < nb; i++)
            grad_a(n, ta, tb, M, N, K, alpha, dC + (size_t)i * M * N, b->data + (shared ? 0 : (size_t)i * K * N),
                   a->grad + (size_t)i * M * K);
    }
    if (b->grad) {
        if (shared) {
            for (int i = 0; i < nb; i++)
                grad_b(n, ta, tb, M, N, K, alpha, dC + (size_t)i * M * N, a->data + (size_t)i * M * K, b->grad);
        } else {
#pragma omp parallel for schedule(static) if (nb > 1)
            for (int i = 0; i < nb; i++)
                grad_b(n, ta, tb, M, N, K, alpha, dC + (size_t)i * M * N, a->data + (size_t)i * M * K,
                       b->grad + (size_t)i * K * N);
        }
    }
}

static const vt_opdef op_matmul = {"matmul", matmul_fwd, matmul_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)), NULL,
                                   VT_OP_GEMM};

vt_tensor *vt_matmul(vt_graph *g, vt_tensor *a, vt_tensor *b, int ta, int tb, float alpha) {
    if (vt_bad(g, 2, a, b)) return NULL;
    char sa[64], sb[64];
    if (a->ndim < 2 || b->ndim < 2)
        return vt_fail(g, "matmul", "operands %s and %s need at least 2 dims", vt_shape_str(a, sa, 64),
                       vt_shape_str(b, sb, 64));
    const int M = a->shape[a->ndim - (ta ? 1 : 2)], Ka = a->shape[a->ndim - (ta ? 2 : 1)];
    const int Kb = b->shape[b->ndim - (tb ? 1 : 2)], N = b->shape[b->ndim - (tb ? 2 : 1)];
    int shared = b->ndim == 2 && a->ndim > 2;
    int ok = Ka == Kb && (shared || a->ndim == b->ndim);
    for (int i = 0; ok && !shared && i < a->ndim - 2; i++) ok = a->shape[i] == b->shape[i];
    if (!ok)
        return vt_fail(g, "matmul", "cannot multiply %s%s by %s%s", vt_shape_str(a, sa, 64), ta ? "ᵀ" : "",
                       vt_shape_str(b, sb, 64), tb ? "ᵀ" : "");
    int shape[VT_MAXDIM];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 2] = M;
    shape[a->ndim - 1] = N;
    vt_tensor *in[2] = {a, b};
    vt_node *n = vt_new_node(g, &op_matmul, in, 2, vt_new_act(g, a->ndim, shape));
    if (!n) return NULL;
    const int nb = (int)(a->numel / ((int64_t)M * Ka));
    *VT_OP_P(n, matmul_p) = (matmul_p){nb, M, N, Ka, ta, tb, shared, alpha};
    n->macs = (int64_t)nb * M * N * Ka;
    return n->out;
}
