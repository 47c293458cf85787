/* GroupMixFormer's pre-attention aggregators at inference as one op (spec-groupmixformer.md §4; the chain it
 * replaces in eval graphs is in src/blocks/gma.c):
 *   X_j (s channels × N tokens) = segment j of Q, K or V: s planes of the qkv linear's transposed output
 *   (3C, B, N) (vt_linear_t), C = 5s;
 *   Z_i = [hswish(s0 ⊙ X_0 + t0) | hswish(s_j ⊙ PW_j·DW_k(X_j) + t_j), j = 1, 2, 3 with k = 2j + 1]
 * for the 3B images i = type·B + b, into Z (3B, 4s, N) channel-first. One unit is an (image, segment) pair: its
 * depthwise planes and the pointwise GEMM (BatchNorm scale folded into its weights) stay in the thread's cache, and
 * the result lands in its slot of Z, where the chain made four sliced copies, three depthwise and three pointwise
 * convs, four BatchNorm + Hardswish passes and a concat, each through memory.
 * No backward: training graphs (BatchNorm batch statistics) keep the chain. */
#include <omp.h>
#include <string.h>

#include "dwplane.h"
#include "mathfn.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

typedef struct {
    int B, N, H, W, s, nt;
    const vt_gemm_plan *gemm;
} gagg_p;

/* Floats of the folded weights (three s×s pointwise matrices scaled by their BatchNorm) and of one thread's scratch
 * (the depthwise output, s·N, and a padded plane per kernel size). */
static size_t fold_floats(const gagg_p *p) { return 3 * (size_t)p->s * p->s; }
static size_t pad_at(const gagg_p *p, int j) {
    size_t o = 0;
    for (int i = 1; i < j; i++) o += vt_dw_plane_scratch(p->H, p->W, 2 * i + 1);
    return o;
}
static size_t thread_floats(const gagg_p *p) { return (size_t)p->s * p->N + pad_at(p, 4); }

static void gagg_unit(const vt_node *n, int u, const float *wf, float *sc) {
    const gagg_p *p = VT_OP_P(n, gagg_p);
    /* few images for the threads: the 7×7 segments of every image first, then the 5×5 ... (one image's four in a row
     * had a batch-1 step's last 7×7 start when the other thread had nothing left; GroupMixFormer-M inference at
     * batch 1, the op 0.066-0.077 -> 0.062-0.067 s per 40 steps, the undisturbed runs of 7 alternated rounds, AMD EPYC
     * Zen 4, 2026-12-06) */
    const int few = 3 * p->B < 4 * p->nt, i = few ? u % (3 * p->B) : u / 4, j = few ? 3 - u / (3 * p->B) : u % 4;
    const int B = p->B, N = p->N, s = p->s, C = 5 * s, t = i / B, b = i % B;
    const float *bn = n->in[5]->data + (size_t)j * 2 * s; /* (4, 2, s): scale row, shift row */
    const size_t ps = (size_t)B * N; /* plane stride: channel o of image b at (o·B + b)·N */
    const float *X = n->in[0]->data + ((size_t)(t * C + j * s) * B + b) * N;
    float *z = n->out->data + ((size_t)i * 4 * s + (size_t)j * s) * N;
    if (j == 0) { /* hswish(BN(X_0)) into its slot */
        for (int c = 0; c < s; c++) {
            const float *xc = X + c * ps;
            if (c + 1 < s) vt_prefetch_floats(xc + ps, N);
            float *zc = z + (size_t)c * N;
            const float a = bn[c], sh = bn[s + c];
#pragma omp simd
            for (int m = 0; m < N; m++) zc[m] = vt_hswish_f(a * xc[m] + sh);
        }
        return;
    }
    float *D = sc, *pad = D + (size_t)s * N + pad_at(p, j);
    const int k = 2 * j + 1;
    const float *w = n->in[j]->data;
    /* each next plane prefetched, as gmasep.c's unit_dw: GroupMixFormer-M inference at batch 16, this op 0.247-0.351
     * → 0.195-0.293 s over 10 steps, faster in 5 of 6 alternated `--profile` rounds (Zen 5, 2026-12-02, noisy) */
    for (int c = 0; c < s; c++) {
        if (c + 1 < s) vt_prefetch_floats(X + (c + 1) * ps, N);
        vt_dw_plane(X + c * ps, p->H, p->W, k, w + (size_t)c * k * k, 0.0f, D + (size_t)c * N, pad);
    }
    vt_gemm(p->gemm, 0, 0, s, N, s, 1.0f, wf + (size_t)(j - 1) * s * s, s, D, N, 0.0f, z, N);
    for (int c = 0; c < s; c++) {
        float *zc = z + (size_t)c * N;
        const float sh = bn[s + c];
#pragma omp simd
        for (int m = 0; m < N; m++) zc[m] = vt_hswish_f(zc[m] + sh);
    }
}

static void gagg_fwd(vt_node *n) {
    const gagg_p *p = VT_OP_P(n, gagg_p);
    const int s = p->s;
    float *wf = n->fws->data, *scratch = wf + fold_floats(p);
    const float *pw = n->in[4]->data, *bn = n->in[5]->data;
    for (int j = 1; j <= 3; j++) /* W'_j = diag(BN_j scale)·PW_j */
        for (int o = 0; o < s; o++)
            for (int c = 0; c < s; c++)
                wf[((size_t)(j - 1) * s + o) * s + c] =
                    bn[(size_t)j * 2 * s + o] * pw[((size_t)(j - 1) * s + o) * s + c];
    const int units = 3 * p->B * 4;
#pragma omp parallel num_threads(p->nt)
    {
        float *sc = scratch + (size_t)omp_get_thread_num() * thread_floats(p);
        memset(sc + (size_t)s * p->N, 0, sizeof(float) * pad_at(p, 4)); /* the padded planes' borders */
#pragma omp for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) gagg_unit(n, u, wf, sc);
    }
}

/* A GEMM fused with other work on its tiles (the pointwise GEMM of each unit between its depthwise planes and its
 * Hardswish), as the attention ops: the profile times its vt_gemm calls apart. */
static const vt_opdef op_gagg = {"gma_aggregate", gagg_fwd, NULL, VT_READS(0), NULL, VT_OP_FUSED};

vt_tensor *vt_gma_aggregate_eval(vt_graph *g, vt_tensor *qkv, int H, int W, vt_tensor *dw3, vt_tensor *dw5,
                                 vt_tensor *dw7, vt_tensor *pw, vt_tensor *bn) {
    if (vt_bad(g, 6, qkv, dw3, dw5, dw7, pw, bn)) return NULL;
    static const char *op = "gma_aggregate";
    char sq[64];
    vt_shape_str(qkv, sq, sizeof sq);
    if (g->training) return vt_fail(g, op, "the fused aggregators have no backward: training graphs use the op chain");
    if (qkv->ndim != 3 || H < 1 || W < 1 || (int64_t)H * W != qkv->shape[2] || qkv->shape[0] % 15)
        return vt_fail(g, op, "qkv %s must be (3C, B, H·W = %d·%d) with C a multiple of 5", sq, H, W);
    const int B = qkv->shape[1], N = qkv->shape[2], s = qkv->shape[0] / 15;
    const vt_tensor *dw[3] = {dw3, dw5, dw7};
    for (int j = 0; j < 3; j++) {
        const int k = 2 * j + 3;
        if (!vt_has_shape(dw[j], 4, s, 1, k, k))
            return vt_fail(g, op, "depthwise weight %d must be (%d, 1, %d, %d) for qkv %s", j + 1, s, k, k, sq);
    }
    if (!vt_has_shape(pw, 3, 3, s, s, 0) || !vt_has_shape(bn, 3, 4, 2, s, 0))
        return vt_fail(g, op, "pointwise weights must be (3, %d, %d) and BatchNorm pairs (4, 2, %d)", s, s, s);
    vt_tensor *in[6] = {qkv, dw3, dw5, dw7, pw, bn};
    const int zs[3] = {3 * B, 4 * s, N};
    vt_node *n = vt_new_node(g, &op_gagg, in, 6, vt_new_act(g, 3, zs));
    if (!n) return NULL;
    const gagg_p p = {B, N, H, W, s, g->threads, &g->gemm};
    *VT_OP_P(n, gagg_p) = p;
    n->macs = 3LL * B * N * s * (9 + 25 + 49 + 3LL * s);
    if (!vt_node_work(n, 0, (int64_t)(fold_floats(&p) + (size_t)p.nt * thread_floats(&p)))) return NULL;
    return n->out;
}
