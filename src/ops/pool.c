/* Reductions and pooling: mean over one axis (e.g. global average pooling over tokens) and NCHW average pooling.
 * Neither counts MACs (papers count only conv/linear/matmul multiply-adds). */
#include "vitc/ops.h"

/* ---- mean over one axis: x viewed as (outer, A, inner) -> (outer, inner) ---- */
typedef struct {
    int outer, A, inner;
} mean_p;

#define MEAN_BLK 256

static void mean_fwd(vt_node *n) {
    const mean_p *p = VT_OP_P(n, mean_p);
    const int O = p->outer, A = p->A, Ni = p->inner, nbk = (Ni + MEAN_BLK - 1) / MEAN_BLK;
    const float *x = n->in[0]->data, inv = 1.0f / (float)A;
    float *y = n->out->data;
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)O * A * Ni > 16384)
    for (int o = 0; o < O; o++)
        for (int bk = 0; bk < nbk; bk++) {
            const int i0 = bk * MEAN_BLK, i1 = i0 + MEAN_BLK < Ni ? i0 + MEAN_BLK : Ni;
            float acc[MEAN_BLK];
            for (int i = i0; i < i1; i++) acc[i - i0] = 0.0f;
            for (int a = 0; a < A; a++) {
                const float *xr = x + ((size_t)o * A + a) * Ni;
                for (int i = i0; i < i1; i++) acc[i - i0] += xr[i];
            }
            for (int i = i0; i < i1; i++) y[(size_t)o * Ni + i] = acc[i - i0] * inv;
        }
}

static void mean_bwd(vt_node *n) {
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const mean_p *p = VT_OP_P(n, mean_p);
    const int O = p->outer, A = p->A, Ni = p->inner;
    const float *dy = n->out->grad, inv = 1.0f / (float)A;
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)O * A * Ni > 16384)
    for (int o = 0; o < O; o++)
        for (int a = 0; a < A; a++) {
            float *xr = dx + ((size_t)o * A + a) * Ni;
            const float *dr = dy + (size_t)o * Ni;
            for (int i = 0; i < Ni; i++) xr[i] += dr[i] * inv;
        }
}

static const vt_opdef op_mean = {"mean", mean_fwd, mean_bwd, VT_READS(0)};

vt_tensor *vt_mean(vt_graph *g, vt_tensor *x, int axis) {
    if (vt_bad(g, 1, x)) return NULL;
    int shape[VT_MAXDIM];
    int64_t O, Ni;
    const int k = vt_reduce_shape(x, axis, shape, &O, &Ni);
    if (k < 0) {
        char sx[64];
        return vt_fail(g, "mean", "axis %d out of range for input %s", axis, vt_shape_str(x, sx, 64));
    }
    vt_node *n = vt_new_node(g, &op_mean, &x, 1, vt_new_act(g, k, shape));
    if (!n) return NULL;
    /* the reduced axis has x->numel / (O·Ni) elements (dims are always >= 1) */
    *VT_OP_P(n, mean_p) = (mean_p){(int)O, (int)(x->numel / (O * Ni)), (int)Ni};
    return n->out;
}

/* ---- average pooling, NCHW ---- */
/* Windows never reach past the padded border (floor mode), so the divisor is always k·k (count_include_pad=True). */
typedef struct {
    int planes;    /* B·C */
    int H, W;
    int k, s, pad; /* kernel, stride, padding */
    int Ho, Wo;
} avgpool_p;

static void pool_range(int o, int s, int p, int k, int n, int *lo, int *hi) {
    int a = o * s - p, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > n ? n : b;
}

static void avgpool_fwd(vt_node *n) {
    const avgpool_p *ap = VT_OP_P(n, avgpool_p);
    const int NP = ap->planes, H = ap->H, W = ap->W, k = ap->k, s = ap->s, p = ap->pad, Ho = ap->Ho, Wo = ap->Wo;
    const float *x = n->in[0]->data, inv = 1.0f / (float)(k * k);
    float *y = n->out->data;
#pragma omp parallel for collapse(2) schedule(static)
    for (int pl = 0; pl < NP; pl++)
        for (int oh = 0; oh < Ho; oh++) {
            const float *xp = x + (size_t)pl * H * W;
            float *yr = y + ((size_t)pl * Ho + oh) * Wo;
            int h0, h1;
            pool_range(oh, s, p, k, H, &h0, &h1);
            for (int ow = 0; ow < Wo; ow++) {
                int w0, w1;
                pool_range(ow, s, p, k, W, &w0, &w1);
                float acc = 0.0f;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) acc += xp[(size_t)ih * W + iw];
                yr[ow] = acc * inv;
            }
        }
}

static void avgpool_bwd(vt_node *n) {
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const avgpool_p *ap = VT_OP_P(n, avgpool_p);
    const int NP = ap->planes, H = ap->H, W = ap->W, k = ap->k, s = ap->s, p = ap->pad, Ho = ap->Ho, Wo = ap->Wo;
    const float *dy = n->out->grad, inv = 1.0f / (float)(k * k);
#pragma omp parallel for schedule(static)
    for (int pl = 0; pl < NP; pl++) {
        float *xp = dx + (size_t)pl * H * W;
        for (int oh = 0; oh < Ho; oh++) {
            const float *dr = dy + ((size_t)pl * Ho + oh) * Wo;
            int h0, h1;
            pool_range(oh, s, p, k, H, &h0, &h1);
            for (int ow = 0; ow < Wo; ow++) {
                int w0, w1;
                pool_range(ow, s, p, k, W, &w0, &w1);
                const float d = dr[ow] * inv;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) xp[(size_t)ih * W + iw] += d;
            }
        }
    }
}

static const vt_opdef op_avgpool = {"avgpool2d", avgpool_fwd, avgpool_bwd, VT_READS(0)};

vt_tensor *vt_avgpool2d(vt_graph *g, vt_tensor *x, int k, int s, int pad) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64];
    vt_shape_str(x, sx, 64);
    if (x->ndim != 4) return vt_fail(g, "avgpool2d", "input %s must be (B, C, H, W)", sx);
    if (k < 1 || s < 1 || pad < 0 || 2 * pad > k)
        return vt_fail(g, "avgpool2d", "input %s: bad kernel %d / stride %d / padding %d (need padding <= kernel/2)",
                       sx, k, s, pad);
    const int H = x->shape[2], W = x->shape[3];
    if (H + 2 * pad < k || W + 2 * pad < k)
        return vt_fail(g, "avgpool2d", "input %s with padding %d is smaller than the %dx%d window", sx, pad, k, k);
    const int Ho = (H + 2 * pad - k) / s + 1, Wo = (W + 2 * pad - k) / s + 1;
    const int shape[4] = {x->shape[0], x->shape[1], Ho, Wo};
    vt_node *n = vt_new_node(g, &op_avgpool, &x, 1, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    *VT_OP_P(n, avgpool_p) = (avgpool_p){x->shape[0] * x->shape[1], H, W, k, s, pad, Ho, Wo};
    return n->out;
}
