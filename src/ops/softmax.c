/* Numerically stable softmax over any axis, forward and backward.
 *
 * MAC convention: 0 MACs (elementwise/reduction op; only matmul-like products are counted, DESIGN.md §2).
 * x is viewed as (outer, A, inner) with A the softmax axis. The last-axis case (inner = 1) runs vt_softmax_row
 * (mathfn.h, float sums as in the fused attention ops) on one contiguous row per iteration, parallel over rows; other
 * axes process blocks of IB adjacent inner positions at once so every load is contiguous. Backward:
 * dx += y ⊙ (dy − Σ_axis dy ⊙ y), using the output y (kept in train graphs).
 * vt_softmax_res adds c·r to each last-axis row while it is in L1 (the Refiner's residual attention chain,
 * softmax(s·q·kᵀ) + s·A_in); its backward recomputes the probabilities as y − c·r (one map kept, not two). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mathfn.h"
#include "vitc/ops.h"

#define IB 16

/* x viewed as (outer, A, inner), A the softmax axis. */
typedef struct {
    int outer, A, inner;
} softmax_p;

static void softmax_fwd(vt_node *n) {
    const softmax_p *p = VT_OP_P(n, softmax_p);
    const int outer = p->outer, A = p->A, inner = p->inner;
    const float *x = n->in[0]->data;
    float *y = n->out->data;
    if (inner == 1) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < outer; r++) vt_softmax_row(x + (size_t)r * A, y + (size_t)r * A, A);
        return;
    }
    const int nb = (inner + IB - 1) / IB;
#pragma omp parallel for schedule(static) collapse(2)
    for (int o = 0; o < outer; o++)
        for (int jb = 0; jb < nb; jb++) {
            const int i0 = jb * IB, w = inner - i0 < IB ? inner - i0 : IB;
            const float *xo = x + (size_t)o * A * inner + i0;
            float *yo = y + (size_t)o * A * inner + i0;
            float mx[IB];
            double s[IB];
            for (int i = 0; i < w; i++) {
                mx[i] = xo[i];
                s[i] = 0.0;
            }
            for (int a = 1; a < A; a++)
                for (int i = 0; i < w; i++) {
                    const float v = xo[(size_t)a * inner + i];
                    mx[i] = v > mx[i] ? v : mx[i];
                }
            for (int a = 0; a < A; a++)
                for (int i = 0; i < w; i++) {
                    const size_t k = (size_t)a * inner + i;
                    yo[k] = vt_expf_le0(xo[k] - mx[i]);
                    s[i] += yo[k];
                }
            float inv[IB];
            for (int i = 0; i < w; i++) inv[i] = (float)(1.0 / s[i]);
            for (int a = 0; a < A; a++)
                for (int i = 0; i < w; i++) yo[(size_t)a * inner + i] *= inv[i];
        }
}

static void softmax_bwd(vt_node *n) {
    const softmax_p *p = VT_OP_P(n, softmax_p);
    const int outer = p->outer, A = p->A, inner = p->inner;
    const float *y = n->out->data, *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    if (!dx || !dy) return;
    if (inner == 1) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < outer; r++) {
            const float *yr = y + (size_t)r * A, *dyr = dy + (size_t)r * A;
            float *dxr = dx + (size_t)r * A;
            float d = 0.0f;
#pragma omp simd reduction(+ : d)
            for (int a = 0; a < A; a++) d += dyr[a] * yr[a];
#pragma omp simd
            for (int a = 0; a < A; a++) dxr[a] += yr[a] * (dyr[a] - d);
        }
        return;
    }
    const int nb = (inner + IB - 1) / IB;
#pragma omp parallel for schedule(static) collapse(2)
    for (int o = 0; o < outer; o++)
        for (int jb = 0; jb < nb; jb++) {
            const int i0 = jb * IB, w = inner - i0 < IB ? inner - i0 : IB;
            const size_t base = (size_t)o * A * inner + i0;
            double dot[IB] = {0};
            for (int a = 0; a < A; a++)
                for (int i = 0; i < w; i++) {
                    const size_t k = base + (size_t)a * inner + i;
                    dot[i] += (double)dy[k] * y[k];
                }
            float d[IB];
            for (int i = 0; i < w; i++) d[i] = (float)dot[i];
            for (int a = 0; a < A; a++)
                for (int i = 0; i < w; i++) {
                    const size_t k = base + (size_t)a * inner + i;
                    dx[k] += y[k] * (dy[k] - d[i]);
                }
        }
}

static const vt_opdef op_softmax = {"softmax", softmax_fwd, softmax_bwd, VT_READS(VT_READS_OUT), NULL, VT_OP_OTHER};

vt_tensor *vt_softmax(vt_graph *g, vt_tensor *x, int axis) {
    if (vt_bad(g, 1, x)) return NULL;
    const int ax = axis < 0 ? axis + x->ndim : axis;
    if (ax < 0 || ax >= x->ndim) {
        char sx[64];
        return vt_fail(g, "softmax", "axis %d out of range for input %s", axis, vt_shape_str(x, sx, 64));
    }
    vt_node *n = vt_new_node(g, &op_softmax, &x, 1, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++) outer *= x->shape[d];
    for (int d = ax + 1; d < x->ndim; d++) inner *= x->shape[d];
    *VT_OP_P(n, softmax_p) = (softmax_p){(int)outer, x->shape[ax], (int)inner};
    return n->out;
}

/* (rows, A) rows of the last axis; y = softmax(x) + c·r. */
typedef struct {
    int rows, A;
    float c;
} softmax_res_p;

static void softmax_res_fwd(vt_node *n) {
    const softmax_res_p *p = VT_OP_P(n, softmax_res_p);
    const int A = p->A;
    const float c = p->c, *x = n->in[0]->data, *rr = n->in[1]->data;
    float *y = n->out->data;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < p->rows; i++) {
        const size_t o = (size_t)i * A;
        float *yr = y + o;
        const float *rr_i = rr + o;
        vt_softmax_row(x + o, yr, A);
#pragma omp simd
        for (int a = 0; a < A; a++) yr[a] += c * rr_i[a];
    }
}

/* p = y − c·r: dx += p ⊙ (dy − Σ dy ⊙ p), dr += c·dy. */
static void softmax_res_bwd(vt_node *n) {
    const softmax_res_p *p = VT_OP_P(n, softmax_res_p);
    const int A = p->A;
    const float c = p->c, *y = n->out->data, *rr = n->in[1]->data, *dy = n->out->grad;
    float *dx = n->in[0]->grad, *dr = n->in[1]->grad;
    if (!dy) return;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < p->rows; i++) {
        const size_t o = (size_t)i * A;
        const float *yr = y + o, *ri = rr + o, *dyr = dy + o;
        if (dx) {
            float *dxr = dx + o, d = 0.0f;
#pragma omp simd reduction(+ : d)
            for (int a = 0; a < A; a++) d += dyr[a] * (yr[a] - c * ri[a]);
#pragma omp simd
            for (int a = 0; a < A; a++) dxr[a] += (yr[a] - c * ri[a]) * (dyr[a] - d);
        }
        if (dr) {
            float *drr = dr + o;
#pragma omp simd
            for (int a = 0; a < A; a++) drr[a] += c * dyr[a];
        }
    }
}

static const vt_opdef op_softmax_res = {"softmax_res", softmax_res_fwd, softmax_res_bwd,
                                        VT_READS(VT_READS_OUT | VT_READS_IN(1)), NULL, VT_OP_OTHER};

vt_tensor *vt_softmax_res(vt_graph *g, vt_tensor *x, vt_tensor *r, float c) {
    if (vt_bad(g, 2, x, r)) return NULL;
    char sx[64], sr[64];
    if (x->ndim < 1 || r->ndim != x->ndim || memcmp(r->shape, x->shape, sizeof(int) * (size_t)x->ndim))
        return vt_fail(g, "softmax_res", "added term %s must have the input's shape %s", vt_shape_str(r, sr, 64),
                       vt_shape_str(x, sx, 64));
    vt_tensor *in[2] = {x, r};
    vt_node *n = vt_new_node(g, &op_softmax_res, in, 2, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    const int A = x->shape[x->ndim - 1];
    *VT_OP_P(n, softmax_res_p) = (softmax_res_p){(int)(x->numel / A), A, c};
    return n->out;
}
