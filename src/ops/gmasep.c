/* GroupMixFormer's separable aggregator convs (SeparableConv2d: depthwise k×k, then pointwise 1×1, no biases;
 * spec-groupmixformer.md §4) on segments of the qkv linear's transposed output (3C, B, N) (vt_linear_t), C = 5s, read
 * in place: the chain (a sliced permute copying the segment's planes out, the depthwise conv, the pointwise conv)
 * passed the segment and the depthwise output through memory, forward and backward. One unit is an image: its
 * depthwise planes stay in the thread's cache for the pointwise GEMM; the backward recomputes them rather than keeping
 * them. Inference graphs use it for the non-attention branch (segment 4); the fused eval op (gmagg.c) covers
 * segments 1 to 3 there. */
#include <limits.h>
#include <omp.h>
#include <string.h>

#include "dwplane.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

typedef struct {
    int B, N, H, W, s, cin, seg, k, units, nt;
    const vt_gemm_plan *gemm;
} gsep_p;

/* Offset in qkv of input channel c of unit i: segments 1-3 have the 3B images type·B + b of s channels, segment 4
 * the B images of its Q, K and V parts side by side (3s channels type·s + c). */
static size_t plane_off(const gsep_p *p, int i, int c) {
    const int t = p->seg < 4 ? i / p->B : c / p->s, b = p->seg < 4 ? i % p->B : i, cc = p->seg < 4 ? c : c % p->s;
    return ((size_t)(t * 5 * p->s + p->seg * p->s + cc) * p->B + b) * p->N;
}

static size_t up16(size_t n) { return (n + 15) / 16 * 16; }

/* Floats of one thread's scratch: forward, the depthwise output and a padded plane; backward, besides those the
 * depthwise output's gradient and private weight-gradient sums (pointwise s·cin, depthwise cin·k·k). */
static size_t fwd_floats(const gsep_p *p) {
    return up16((size_t)p->cin * p->N) + up16(vt_dw_plane_scratch(p->H, p->W, p->k));
}
static size_t bwd_floats(const gsep_p *p) {
    return 2 * up16((size_t)p->cin * p->N) + up16(vt_dw_plane_bwd_scratch(p->H, p->W, p->k)) +
           up16((size_t)p->s * p->cin) + up16((size_t)p->cin * p->k * p->k);
}

/* D (cin, N) = the depthwise output of unit i. Each next plane is prefetched (vt_prefetch_floats): a unit's planes
 * lie B·N floats apart in qkv, so the hardware prefetchers only find each one when it is read. GroupMixFormer-M
 * training at batch 16 (8-channel segments, 56x56 planes), the op 0.29-0.44 → 0.26-0.27 s over 3 steps (three
 * alternated `--profile` runs), -T 0.44-0.49 → 0.40-0.42 s over 2 (Zen 5, 2026-12-02). */
static void unit_dw(const gsep_p *p, const float *qkv, const float *dw, int i, float *D, float *pad) {
    const int K = p->k * p->k;
    for (int c = 0; c < p->cin; c++) {
        if (c + 1 < p->cin) vt_prefetch_floats(qkv + plane_off(p, i, c + 1), p->N);
        vt_dw_plane(qkv + plane_off(p, i, c), p->H, p->W, p->k, dw + (size_t)c * K, 0.0f, D + (size_t)c * p->N, pad);
    }
}

static void gsep_fwd(vt_node *n) {
    const gsep_p *p = VT_OP_P(n, gsep_p);
    const float *qkv = n->in[0]->data, *dw = n->in[1]->data, *pw = n->in[2]->data;
    const size_t per = fwd_floats(p), dn = up16((size_t)p->cin * p->N);
#pragma omp parallel num_threads(p->nt)
    {
        float *D = n->fws->data + (size_t)omp_get_thread_num() * per, *pad = D + dn;
        memset(pad, 0, sizeof(float) * (per - dn)); /* the padded plane's border */
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < p->units; i++) {
            unit_dw(p, qkv, dw, i, D, pad);
            vt_gemm(p->gemm, 0, 0, p->s, p->N, p->cin, 1.0f, pw, p->cin, D, p->N, 0.0f,
                    n->out->data + (size_t)i * p->s * p->N, p->N);
        }
    }
}

static void gsep_bwd(vt_node *n) {
    const gsep_p *p = VT_OP_P(n, gsep_p);
    const float *qkv = n->in[0]->data, *dw = n->in[1]->data, *pw = n->in[2]->data, *dy = n->out->grad;
    float *dq = n->in[0]->grad, *gdw = n->in[1]->grad, *gpw = n->in[2]->grad;
    if (!dq && !gdw && !gpw) return;
    const int K = p->k * p->k, cin = p->cin, N = p->N;
    const size_t per = bwd_floats(p), dn = up16((size_t)cin * N), padn = up16(vt_dw_plane_bwd_scratch(p->H, p->W, p->k)),
                 npw = up16((size_t)p->s * cin);
    for (int t = 0; t < p->nt; t++) /* the padded planes' borders and the weight-gradient sums of every thread */
        memset(n->bws->data + (size_t)t * per + 2 * dn, 0, sizeof(float) * (per - 2 * dn));
#pragma omp parallel num_threads(p->nt)
    {
        float *D = n->bws->data + (size_t)omp_get_thread_num() * per, *dD = D + dn, *pad = dD + dn, *tpw = pad + padn,
              *tdw = tpw + npw;
#pragma omp for schedule(static)
        for (int i = 0; i < p->units; i++) {
            const float *dyi = dy + (size_t)i * p->s * N;
            if (gpw) { /* dPW += dY·Dᵀ, D recomputed */
                unit_dw(p, qkv, dw, i, D, pad);
                vt_gemm(p->gemm, 0, 1, p->s, cin, N, 1.0f, dyi, N, D, N, 1.0f, tpw, cin);
            }
            if (!dq && !gdw) continue;
            vt_gemm(p->gemm, 1, 0, cin, N, p->s, 1.0f, pw, cin, dyi, N, 0.0f, dD, N); /* dD = PWᵀ·dY */
            for (int c = 0; c < cin; c++) { /* every unit's planes are its own: qkv's gradient is added to */
                const size_t o = plane_off(p, i, c);
                if (c + 1 < cin) { /* the next plane of qkv and of its gradient, as unit_dw */
                    vt_prefetch_floats(qkv + plane_off(p, i, c + 1), N);
                    if (dq) vt_prefetch_floats(dq + plane_off(p, i, c + 1), N);
                }
                vt_dw_plane_bwd(qkv + o, dD + (size_t)c * N, p->H, p->W, p->k, dw + (size_t)c * K, dq ? dq + o : NULL,
                                1, gdw ? tdw + (size_t)c * K : NULL, pad);
            }
        }
    }
    for (int t = 0; t < p->nt; t++) { /* the threads' sums in a fixed order: the same gradients at every run */
        const float *tpw = n->bws->data + (size_t)t * per + 2 * dn + padn, *tdw = tpw + npw;
        for (int j = 0; gpw && j < p->s * cin; j++) gpw[j] += tpw[j];
        for (int j = 0; gdw && j < cin * K; j++) gdw[j] += tdw[j];
    }
}

/* A GEMM fused with other work (each unit's pointwise GEMM between its depthwise planes), as the attention ops: the
 * profile times its vt_gemm calls apart. */
static const vt_opdef op_gsep = {"gma_separable", gsep_fwd, gsep_bwd,
                                 VT_READS(VT_READS_IN(0) | VT_READS_IN(1) | VT_READS_IN(2)), NULL, VT_OP_FUSED};

vt_tensor *vt_gma_separable(vt_graph *g, vt_tensor *qkv, int seg, int H, int W, vt_tensor *dw, vt_tensor *pw) {
    if (vt_bad(g, 3, qkv, dw, pw)) return NULL;
    static const char *op = "gma_separable";
    char sq[64], sd[64], sp[64];
    vt_shape_str(qkv, sq, sizeof sq);
    vt_shape_str(dw, sd, sizeof sd);
    vt_shape_str(pw, sp, sizeof sp);
    if (qkv->ndim != 3 || H < 1 || W < 1 || (int64_t)H * W != qkv->shape[2] || qkv->shape[0] % 15)
        return vt_fail(g, op, "qkv %s must be (3C, B, H·W = %d·%d) with C a multiple of 5", sq, H, W);
    if (seg < 1 || seg > 4) return vt_fail(g, op, "segment %d: the separable convs read segments 1 to 4", seg);
    const int B = qkv->shape[1], N = qkv->shape[2], s = qkv->shape[0] / 15, cin = seg < 4 ? s : 3 * s;
    const int k = dw->ndim == 4 ? dw->shape[2] : 0;
    if (k < 1 || k % 2 == 0 || !vt_has_shape(dw, 4, cin, 1, k, k))
        return vt_fail(g, op, "depthwise weight %s must be (%d, 1, k, k) with k odd for qkv %s, segment %d", sd, cin,
                       sq, seg);
    if (!vt_has_shape(pw, 4, s, cin, 1, 1))
        return vt_fail(g, op, "pointwise weight %s must be (%d, %d, 1, 1) for qkv %s, segment %d", sp, s, cin, sq, seg);
    const int units = seg < 4 ? 3 * B : B, ys[4] = {units, s, H, W};
    vt_tensor *in[3] = {qkv, dw, pw};
    vt_node *n = vt_new_node(g, &op_gsep, in, 3, vt_new_act(g, 4, ys));
    if (!n) return NULL;
    const gsep_p p = {B, N, H, W, s, cin, seg, k, units, g->threads, &g->gemm};
    *VT_OP_P(n, gsep_p) = p;
    n->macs = (int64_t)units * N * cin * (k * k + s);
    const int64_t fw = (int64_t)p.nt * (int64_t)fwd_floats(&p), bw = (int64_t)p.nt * (int64_t)bwd_floats(&p);
    const int grads = qkv->requires_grad || dw->requires_grad || pw->requires_grad;
    if (fw > INT_MAX || (grads && bw > INT_MAX))
        return vt_fail(g, op, "qkv %s: the per-thread scratch is too large", sq);
    if (!vt_node_work(n, 0, fw)) return NULL;
    if (grads && !vt_node_work(n, 1, bw)) return NULL;
    return n->out;
}
