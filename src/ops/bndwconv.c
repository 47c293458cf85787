/* BatchNorm + activation + depthwise conv in one op (vt_bnact_dwconv): y = DW_k(act(BN(x))) for x (B, C, H, W), the
 * Refiner DLA's bn1 + ReLU6 + depth_sep_conv in training graphs (src/blocks/refiner.c; spec-refiner.md §4). The
 * normalised map, which the chain wrote and read back forward and backward, is recomputed plane by plane in cache
 * from x instead. Forward: the channel statistics (batch statistics: vt_batchnorm's, vt_bn_batch_update), then per
 * plane the activated plane and its depthwise conv. Backward, per channel (so every sum is one thread's, in a fixed
 * order): over the images the conv's dX of the activated plane, its
 * dW and the BatchNorm's sums Σdz, Σdz·(x − mean) (dz: dX through the activation's derivative), then over them again
 * with dz recomputed, the BatchNorm's dX. MACs: B·C·H·W·k·k (the conv's). */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "bnstats.h"
#include "dwplane.h"
#include "mathfn.h"
#include "vitc/ops.h"

typedef struct {
    int B, C, H, W, k, act, batch, update, nt;
    float eps, momentum;
} bndw_p;

enum { IN_X, IN_BW, IN_BB, IN_RM, IN_RV, IN_W, IN_NBT };

/* Scratch (fws and bws): scale, shift and 1/σ (C each, the three rounded to 16 floats, so the planes after them keep
 * the arena's alignment), then per thread the activated plane, the conv's dX of it and the planes' padded scratch
 * (the forward's batch-statistics sums, vt_bn_batch_update, use that space first). */
static size_t head_floats(const bndw_p *p) { return ((size_t)3 * p->C + 15) / 16 * 16; }
static size_t plane_floats(const bndw_p *p) { return ((size_t)p->H * p->W + 15) / 16 * 16; }
static size_t thread_floats(const bndw_p *p) {
    return 2 * plane_floats(p) + (vt_dw_plane_bwd_scratch(p->H, p->W, p->k) + 15) / 16 * 16;
}

/* mean[c], rs[c] (1/σ) and the normalisation's scale, shift: z = (x − mean)·scale + shift. */
static void bndw_affine(const vt_node *n, const float **mean, const float **rs, float *scale, float *shift, float *rsb) {
    const bndw_p *p = VT_OP_P(n, bndw_p);
    const float *w = n->in[IN_BW]->data, *b = n->in[IN_BB]->data;
    *mean = p->batch ? n->save[0]->data : n->in[IN_RM]->data;
    if (p->batch) {
        *rs = n->save[1]->data;
    } else {
        for (int c = 0; c < p->C; c++) rsb[c] = (float)(1.0 / sqrt((double)n->in[IN_RV]->data[c] + p->eps));
        *rs = rsb;
    }
    for (int c = 0; c < p->C; c++) {
        scale[c] = (*rs)[c] * w[c];
        shift[c] = b[c];
    }
}

/* One plane of n floats, z = (x − m)·s + t: u = act(z) (pass 0); the sums Σdz and Σdz·(x − m) with dz = du·act'(z)
 * into *a1, *a2 (pass 1); dx = k1·(dz − k2 − (x − m)·k3), written or (add) added (pass 2). Inlined with a constant
 * act so each loop vectorises (the activation's switch inside a loop kept it scalar: see norm.c's act_pass). */
static inline __attribute__((always_inline)) void plane_pass(const int pass, const int act, const float *x, float m,
                                                              float s, float t, float *u, const float *du, double *a1,
                                                              double *a2, float k1, float k2, float k3, float *dx,
                                                              int add, int64_t n) {
    if (pass == 0) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) u[i] = vt_norm_act_f(act, (x[i] - m) * s + t);
    } else if (pass == 1) {
        double t1 = 0.0, t2 = 0.0;
#pragma omp simd reduction(+ : t1, t2)
        for (int64_t i = 0; i < n; i++) {
            const float dz = du[i] * vt_norm_act_d(act, (x[i] - m) * s + t);
            t1 += dz;
            t2 += (double)dz * (x[i] - m);
        }
        *a1 += t1;
        *a2 += t2;
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            const float xm = x[i] - m, g = k1 * (du[i] * vt_norm_act_d(act, xm * s + t) - k2 - xm * k3);
            dx[i] = add ? dx[i] + g : g;
        }
    }
}

/* plane_pass with act as a constant (the pass is one branch per plane). */
static void plane(int pass, int act, const float *x, float m, float s, float t, float *u, const float *du, double *a1,
                  double *a2, float k1, float k2, float k3, float *dx, int add, int64_t n) {
#define PLANE_ACT(A) plane_pass(pass, A, x, m, s, t, u, du, a1, a2, k1, k2, k3, dx, add, n)
    switch (act) {
    case VT_RELU6: PLANE_ACT(VT_RELU6); break;
    case VT_RELU: PLANE_ACT(VT_RELU); break;
    case VT_HARDSWISH: PLANE_ACT(VT_HARDSWISH); break;
    default: PLANE_ACT(-1);
    }
#undef PLANE_ACT
}

static void bndw_fwd(vt_node *n) {
    const bndw_p *p = VT_OP_P(n, bndw_p);
    const int B = p->B, C = p->C, K = p->k * p->k;
    const int64_t P = (int64_t)p->H * p->W;
    const float *x = n->in[IN_X]->data, *w = n->in[IN_W]->data;
    float *scale = n->fws->data, *shift = scale + C, *rsb = shift + C, *sc = scale + head_floats(p);
    if (p->batch) /* the scratch's per-thread planes are free until the conv below */
        vt_bn_batch_update(x, B, C, (int)P, (double *)sc, p->eps, p->momentum, n->save[0]->data, n->save[1]->data,
                           p->update ? n->in[IN_RM]->data : NULL, p->update ? n->in[IN_RV]->data : NULL,
                           p->update && n->nin > IN_NBT ? n->in[IN_NBT]->data : NULL);
    const float *mean, *rs;
    bndw_affine(n, &mean, &rs, scale, shift, rsb);
    const size_t per = thread_floats(p), pl = plane_floats(p);
#pragma omp parallel num_threads(p->nt)
    {
        float *U = sc + (size_t)omp_get_thread_num() * per, *pad = U + 2 * pl;
        memset(pad, 0, sizeof(float) * (per - 2 * pl)); /* the padded plane's border */
#pragma omp for schedule(static)
        for (int bc = 0; bc < B * C; bc++) {
            const int c = bc % C;
            plane(0, p->act, x + (size_t)bc * P, mean[c], scale[c], shift[c], U, NULL, NULL, NULL, 0, 0, 0, NULL, 0, P);
            vt_dw_plane(U, p->H, p->W, p->k, w + (size_t)c * K, 0.0f, n->out->data + (size_t)bc * P, pad);
        }
    }
}

static void bndw_bwd(vt_node *n) {
    const bndw_p *p = VT_OP_P(n, bndw_p);
    const int B = p->B, C = p->C, K = p->k * p->k, act = p->act;
    const int64_t P = (int64_t)p->H * p->W, M = (int64_t)B * P;
    const float *x = n->in[IN_X]->data, *w = n->in[IN_W]->data, *dy = n->out->grad;
    float *dx = n->in[IN_X]->grad, *gbw = n->in[IN_BW]->grad, *gbb = n->in[IN_BB]->grad, *gw = n->in[IN_W]->grad;
    if (!dy || !(dx || gbw || gbb || gw)) return;
    const int dx_set = n->grad_fresh & 1u; /* x's gradient written, not added to (grad_sets) */
    float *scale = n->bws->data, *shift = scale + C, *rsb = shift + C, *sc = scale + head_floats(p);
    const float *mean, *rs;
    bndw_affine(n, &mean, &rs, scale, shift, rsb);
    const size_t per = thread_floats(p), pl = plane_floats(p);
#pragma omp parallel num_threads(p->nt)
    {
        float *U = sc + (size_t)omp_get_thread_num() * per, *DU = U + pl, *pad = DU + pl;
        memset(pad, 0, sizeof(float) * (per - 2 * pl));
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++) {
            const float m = mean[c], s = scale[c], t = shift[c];
            double s1 = 0.0, s2 = 0.0;
            for (int i = 0; i < B; i++) { /* dz = dX·act'(z): the BatchNorm's sums, the conv's dW */
                const float *xc = x + ((size_t)i * C + c) * P, *dyc = dy + ((size_t)i * C + c) * P;
                plane(0, act, xc, m, s, t, U, NULL, NULL, NULL, 0, 0, 0, NULL, 0, P);
                vt_dw_plane_bwd(U, dyc, p->H, p->W, p->k, w + (size_t)c * K, DU, 0, gw ? gw + (size_t)c * K : NULL,
                                pad);
                plane(1, act, xc, m, s, t, NULL, DU, &s1, &s2, 0, 0, 0, NULL, 0, P);
            }
            if (gbw) gbw[c] += (float)(s2 * rs[c]);
            if (gbb) gbb[c] += (float)s1;
            if (!dx) continue;
            /* batch statistics: dx = w·rstd·(dz − mean(dz) − x̂·mean(dz·x̂)); running statistics: dx = w·rstd·dz */
            const float k1 = s, k2 = p->batch ? (float)(s1 / M) : 0.0f,
                        k3 = p->batch ? (float)(s2 * rs[c] * rs[c] / M) : 0.0f;
            for (int i = 0; i < B; i++) { /* dz again (recomputed: never stored), then the BatchNorm's dX */
                const float *xc = x + ((size_t)i * C + c) * P, *dyc = dy + ((size_t)i * C + c) * P;
                float *dxc = dx + ((size_t)i * C + c) * P;
                plane(0, act, xc, m, s, t, U, NULL, NULL, NULL, 0, 0, 0, NULL, 0, P);
                vt_dw_plane_bwd(U, dyc, p->H, p->W, p->k, w + (size_t)c * K, DU, 0, NULL, pad);
                plane(2, act, xc, m, s, t, NULL, DU, NULL, NULL, k1, k2, k3, dxc, !dx_set, P);
            }
        }
    }
}

static const vt_opdef op_bndw = {"bn_act_dwconv", bndw_fwd, bndw_bwd, VT_READS(VT_READS_ALL_IN), NULL, VT_OP_OTHER};

vt_tensor *vt_bnact_dwconv(vt_graph *g, vt_tensor *x, vt_tensor *bw, vt_tensor *bb, vt_tensor *rm, vt_tensor *rv,
                           vt_tensor *nbt, float eps, float momentum, int act, vt_tensor *w) {
    if (vt_bad(g, 6, x, bw, bb, rm, rv, w)) return NULL;
    static const char *op = "bn_act_dwconv";
    char sx[64], sw[64];
    vt_shape_str(x, sx, sizeof sx);
    vt_shape_str(w, sw, sizeof sw);
    if (x->ndim != 4) return vt_fail(g, op, "input %s must be (B, C, H, W)", sx);
    const int C = x->shape[1], k = w->ndim == 4 ? w->shape[2] : 0;
    if (k < 1 || k % 2 == 0 || !vt_has_shape(w, 4, C, 1, k, k))
        return vt_fail(g, op, "depthwise weight %s must be (%d, 1, k, k) with k odd for input %s", sw, C, sx);
    if (!vt_has_shape(bw, 1, C, 0, 0, 0) || !vt_has_shape(bb, 1, C, 0, 0, 0) || !vt_has_shape(rm, 1, C, 0, 0, 0) ||
        !vt_has_shape(rv, 1, C, 0, 0, 0))
        return vt_fail(g, op, "input %s: the BatchNorm's weight, bias and running statistics must be (%d)", sx, C);
    if (nbt && nbt->numel != 1) return vt_fail(g, op, "num_batches_tracked must hold one value");
    if (act != -1 && act != VT_RELU && act != VT_RELU6 && act != VT_HARDSWISH)
        return vt_fail(g, op, "activation %d: only ReLU, ReLU6 and Hardswish (or none, -1)", act);
    if (!(eps >= 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return vt_fail(g, op, "eps %g must be >= 0 and momentum %g in [0, 1]", (double)eps, (double)momentum);
    const int64_t M = (int64_t)x->shape[0] * x->shape[2] * x->shape[3];
    if (g->training && M < 2) return vt_fail(g, op, "input %s: expected more than 1 value per channel when training", sx);
    vt_tensor *in[7] = {x, bw, bb, rm, rv, w, nbt};
    vt_node *n = vt_new_node(g, &op_bndw, in, nbt ? 7 : 6, vt_new_act(g, 4, x->shape));
    if (!n) return NULL;
    bndw_p *p = VT_OP_P(n, bndw_p);
    *p = (bndw_p){x->shape[0], C, x->shape[2], x->shape[3], k, act, g->training, g->training, g->threads, eps,
                  momentum};
    n->grad_sets = 1u; /* dX covers every element of x */
    n->macs = M * C * k * k;
    int64_t work = (int64_t)p->nt * (int64_t)thread_floats(p); /* the batch statistics' sums use it first */
    if (work < (int64_t)vt_bn_batch_scratch(p->B, C)) work = (int64_t)vt_bn_batch_scratch(p->B, C);
    work += (int64_t)head_floats(p);
    if (work > INT_MAX) /* the arena's scratch sizes are ints (as conv2d's) */
        return vt_fail(g, op, "input %s: the per-thread scratch is too large", sx);
    if (p->batch && (!vt_node_save(n, 0, C) || !vt_node_save(n, 1, C))) return NULL;
    if (!vt_node_work(n, 0, work)) return NULL;
    if ((x->requires_grad || bw->requires_grad || bb->requires_grad || w->requires_grad) && !vt_node_work(n, 1, work))
        return NULL;
    return n->out;
}
