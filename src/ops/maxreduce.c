/* Maximum over one axis (e.g. the per-class max over tokens of a dense head). The index of the first maximum is
 * saved, so the gradient goes to that element only (as torch.max(dim) does). No MACs counted. */
#include "vitc/ops.h"

/* x viewed as (outer, A, inner) -> y (outer, inner); save[0] holds the arg-max along A as floats. */
typedef struct {
    int outer, A, inner;
} max_p;

static void max_fwd(vt_node *n) {
    const max_p *p = VT_OP_P(n, max_p);
    const int O = p->outer, A = p->A, Ni = p->inner;
    const float *x = n->in[0]->data;
    float *y = n->out->data, *arg = n->save[0] ? n->save[0]->data : NULL;
#pragma omp parallel for schedule(static) if ((int64_t)O * A * Ni > VT_PAR_MIN)
    for (int o = 0; o < O; o++)
        for (int i = 0; i < Ni; i++) {
            const float *xp = x + (size_t)o * A * Ni + i;
            float best = xp[0];
            int bi = 0;
            for (int a = 1; a < A; a++) {
                float v = xp[(size_t)a * Ni];
                if (v > best || (v != v && best == best)) { /* NaN propagates like torch.max */
                    best = v;
                    bi = a;
                }
            }
            y[(size_t)o * Ni + i] = best;
            if (arg) arg[(size_t)o * Ni + i] = (float)bi;
        }
}

static void max_bwd(vt_node *n) {
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const max_p *p = VT_OP_P(n, max_p);
    const int O = p->outer, A = p->A, Ni = p->inner;
    const float *dy = n->out->grad, *arg = n->save[0]->data;
#pragma omp parallel for schedule(static) if ((int64_t)O * Ni > VT_PAR_MIN)
    for (int o = 0; o < O; o++)
        for (int i = 0; i < Ni; i++) {
            const size_t k = (size_t)o * Ni + i;
            dx[((size_t)o * A + (size_t)arg[k]) * Ni + i] += dy[k];
        }
}

static const vt_opdef op_max = {"max", max_fwd, max_bwd, VT_READS(0), NULL, VT_OP_OTHER}; /* the arg-max is saved */

vt_tensor *vt_max(vt_graph *g, vt_tensor *x, int axis) {
    if (vt_bad(g, 1, x)) return NULL;
    int shape[VT_MAXDIM];
    int64_t O, Ni;
    const int k0 = vt_reduce_shape(x, axis, shape, &O, &Ni);
    int k = k0;
    if (k0 < 0) {
        char sx[64];
        return vt_fail(g, "max", "axis %d out of range for input %s", axis, vt_shape_str(x, sx, 64));
    }
    if (k == 0) shape[k++] = 1; /* a full reduction of a 1-D tensor gives shape (1,) */
    vt_node *n = vt_new_node(g, &op_max, &x, 1, vt_new_act(g, k, shape));
    if (!n) return NULL;
    /* the reduced axis has x->numel / (O·Ni) elements (dims are always >= 1) */
    *VT_OP_P(n, max_p) = (max_p){(int)O, (int)(x->numel / (O * Ni)), (int)Ni};
    if (!vt_node_save(n, 0, O * Ni)) return NULL;
    return n->out;
}
