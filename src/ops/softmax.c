/* Numerically stable softmax over any axis, forward and backward.
 *
 * MAC convention: 0 MACs (elementwise/reduction op; only matmul-like products are counted, DESIGN.md §2).
 * x is viewed as (outer, A, inner) with A the softmax axis. The last-axis case (inner = 1) runs vt_softmax_row
 * (mathfn.h, float sums as in the fused attention ops) on one contiguous row per iteration, parallel over rows; other
 * axes process blocks of IB adjacent inner positions at once so every load is contiguous. Backward:
 * dx += y ⊙ (dy − Σ_axis dy ⊙ y), using the output y (kept in train graphs). */
#include <math.h>
#include <stdint.h>

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
