/* Reductions and pooling: mean over one axis (e.g. global average pooling over tokens) and average pooling (NCHW or
 * channels-last, PyTorch's ceil_mode / count_include_pad rules).
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
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)O * A * Ni > VT_PAR_MIN)
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
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)O * A * Ni > VT_PAR_MIN)
    for (int o = 0; o < O; o++)
        for (int a = 0; a < A; a++) {
            float *xr = dx + ((size_t)o * A + a) * Ni;
            const float *dr = dy + (size_t)o * Ni;
            for (int i = 0; i < Ni; i++) xr[i] += dr[i] * inv;
        }
}

static const vt_opdef op_mean = {"mean", mean_fwd, mean_bwd, VT_READS(0), NULL, VT_OP_OTHER};

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

/* ---- average pooling, NCHW or channels-last, PyTorch's AvgPool2d rules ----
 * Output size ⌊(H + 2p − k)/s⌋ + 1, or with ceil_mode ⌈·⌉ + 1 less one when the last window would start past the
 * padded border. Window (oh, ow) covers rows [oh·s − p, min(oh·s − p + k, H + p)) of the padded input (and columns
 * likewise); its divisor is that size (count_include_pad) or the number of real input elements in it. */
typedef struct {
    int B, C, H, W;
    int k, s, pad;   /* kernel, stride, padding */
    int Ho, Wo;
    int incl, nhwc;  /* count_include_pad; layout (B, H, W, C) */
} avgpool_p;

/* Window of output index o along an axis of n inputs: the real inputs [*lo, *hi) and its divisor contribution. */
static int pool_range(int o, int s, int p, int k, int n, int incl, int *lo, int *hi) {
    int a = o * s - p, b = a + k < n + p ? a + k : n + p;
    const int padded = b - a;
    *lo = a < 0 ? 0 : a;
    *hi = b > n ? n : b;
    return incl ? padded : *hi - *lo;
}

/* Output row (b, oh): forward (dir 0: y from x) or backward (dir 1: dx += dy / count). NCHW rows are (b·C + c, oh). */
static void pool_row(const avgpool_p *q, int dir, const float *x, float *y, int64_t r) {
    const int Ho = q->Ho, Wo = q->Wo, H = q->H, W = q->W, C = q->C;
    const int oh = (int)(r % Ho);
    int h0, h1;
    const int ch = pool_range(oh, q->s, q->pad, q->k, H, q->incl, &h0, &h1);
    for (int ow = 0; ow < Wo; ow++) {
        int w0, w1;
        const int cw = pool_range(ow, q->s, q->pad, q->k, W, q->incl, &w0, &w1);
        const float inv = 1.0f / (float)(ch * cw);
        if (q->nhwc) { /* row r = (b, oh); a C-vector per pixel */
            const int64_t b = r / Ho;
            float *yo = y + ((size_t)r * Wo + ow) * C;
            if (!dir)
                for (int c = 0; c < C; c++) yo[c] = 0.0f;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    float *xi = (float *)x + (((size_t)b * H + ih) * W + iw) * C;
                    if (dir)
                        for (int c = 0; c < C; c++) xi[c] += yo[c] * inv;
                    else
                        for (int c = 0; c < C; c++) yo[c] += xi[c];
                }
            if (!dir)
                for (int c = 0; c < C; c++) yo[c] *= inv;
        } else { /* row r = (plane, oh) */
            float *xp = (float *)x + (size_t)(r / Ho) * H * W, *yo = y + (size_t)r * Wo + ow;
            float acc = 0.0f;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    if (dir)
                        xp[(size_t)ih * W + iw] += *yo * inv;
                    else
                        acc += xp[(size_t)ih * W + iw];
                }
            if (!dir) *yo = acc * inv;
        }
    }
}

static void avgpool_fwd(vt_node *n) {
    const avgpool_p *q = VT_OP_P(n, avgpool_p);
    const int64_t rows = (int64_t)q->B * (q->nhwc ? 1 : q->C) * q->Ho;
#pragma omp parallel for schedule(static) if (n->out->numel > VT_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) pool_row(q, 0, n->in[0]->data, n->out->data, r);
}

/* Windows of different output rows may overlap (k > s), so threads own whole images / planes. */
static void avgpool_bwd(vt_node *n) {
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const avgpool_p *q = VT_OP_P(n, avgpool_p);
    const int64_t planes = (int64_t)q->B * (q->nhwc ? 1 : q->C);
#pragma omp parallel for schedule(static) if (n->out->numel > VT_PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t r = pl * q->Ho; r < (pl + 1) * q->Ho; r++) pool_row(q, 1, dx, n->out->grad, r);
}

static const vt_opdef op_avgpool = {"avgpool2d", avgpool_fwd, avgpool_bwd, VT_READS(0), NULL, VT_OP_OTHER};

/* Output size along an axis of n inputs (PyTorch's pooling_output_shape, its division rounding down: < 1 when no
 * window fits; with ceil_mode a window that starts inside the input and overhangs it counts). */
static int pool_out(int n, int k, int s, int p, int ceil_mode) {
    const int num = n + 2 * p - k + (ceil_mode ? s - 1 : 0);
    int o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= n + p) o--;
    return o;
}

vt_tensor *vt_avgpool2d_ex(vt_graph *g, vt_tensor *x, const vt_pool_args *a) {
    if (vt_bad(g, 1, x)) return NULL;
    if (!a) return vt_fail(g, "avgpool2d", "no arguments given");
    char sx[64];
    vt_shape_str(x, sx, 64);
    const int k = a->k, s = a->s, pad = a->pad;
    if (x->ndim != 4) return vt_fail(g, "avgpool2d", "input %s must be %s", sx, a->nhwc ? "(B, H, W, C)" : "(B, C, H, W)");
    if (k < 1 || s < 1 || pad < 0 || 2 * pad > k)
        return vt_fail(g, "avgpool2d", "input %s: bad kernel %d / stride %d / padding %d (need padding <= kernel/2)",
                       sx, k, s, pad);
    const int H = x->shape[a->nhwc ? 1 : 2], W = x->shape[a->nhwc ? 2 : 3], C = x->shape[a->nhwc ? 3 : 1];
    const int Ho = pool_out(H, k, s, pad, a->ceil_mode), Wo = pool_out(W, k, s, pad, a->ceil_mode);
    if (Ho < 1 || Wo < 1)
        return vt_fail(g, "avgpool2d", "input %s with padding %d is smaller than the %dx%d window%s", sx, pad, k, k,
                       a->ceil_mode ? " (ceil_mode: no window starts inside it)" : "");
    const int nchw[4] = {x->shape[0], C, Ho, Wo}, nhwc[4] = {x->shape[0], Ho, Wo, C};
    vt_node *n = vt_new_node(g, &op_avgpool, &x, 1, vt_new_act(g, 4, a->nhwc ? nhwc : nchw));
    if (!n) return NULL;
    *VT_OP_P(n, avgpool_p) = (avgpool_p){x->shape[0], C, H, W, k, s, pad, Ho, Wo, a->count_include_pad, a->nhwc};
    return n->out;
}
