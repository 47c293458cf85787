/* Drop-path (stochastic depth, timm's drop_path): each sample's residual branch is zeroed with probability p and
 * scaled by 1/(1 - p) otherwise, in train graphs only.
 *
 * MAC convention: 0 MACs (elementwise). The keep/drop draws come from an RNG seeded with the graph's seed and the
 * node index, so one forward and its backward (and every finite-difference re-run in the tests) see the same mask;
 * the trainer sets g->seed from the run seed and the step, so a resumed run draws the same masks. */
#include "resfuse.h"
#include "vitc/ops.h"

/* save[0] = per-sample factor (0 or 1/(1-p)). */
typedef struct {
    int B;   /* samples (first dim) */
    int per; /* elements per sample */
    float p; /* drop probability */
} droppath_p;

static void droppath_fwd(vt_node *n) {
    const droppath_p *dp = VT_OP_P(n, droppath_p);
    const int B = dp->B, per = dp->per;
    const float p = dp->p, *x = n->in[0]->data;
    float *y = n->out->data, *m = n->save[0]->data;
    vt_drop_path_draw(n, B, p, m);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++)
        for (int i = 0; i < per; i++) y[(size_t)b * per + i] = x[(size_t)b * per + i] * m[b];
}

static void droppath_bwd(vt_node *n) {
    const droppath_p *dp = VT_OP_P(n, droppath_p);
    const int B = dp->B, per = dp->per;
    const float *dy = n->out->grad, *m = n->save[0]->data;
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const int set = n->grad_fresh & 1u; /* x's gradient written, not added to (grad_sets) */
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++)
        for (int i = 0; i < per; i++) {
            const size_t k = (size_t)b * per + i;
            dx[k] = (set ? 0.0f : dx[k]) + dy[k] * m[b];
        }
}

void vt_drop_path_draw(const vt_node *n, int samples, float p, float *m) {
    vt_rng r;
    vt_rng_seed(&r, n->g->seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(n->index + 1)));
    for (int b = 0; b < samples; b++) m[b] = vt_rng_uniform(&r) < p ? 0.0f : 1.0f / (1.0f - p);
}

static const vt_opdef op_droppath = {"drop_path", droppath_fwd, droppath_bwd,
                                     VT_READS(0), NULL, VT_OP_OTHER}; /* the mask is saved */

vt_tensor *vt_drop_path(vt_graph *g, vt_tensor *x, float p) {
    if (vt_bad(g, 1, x)) return NULL;
    if (!(p >= 0.0f && p < 1.0f)) return vt_fail(g, "drop_path", "probability %g must be in [0, 1)", (double)p);
    if (x->ndim < 1) return vt_fail(g, "drop_path", "a scalar input has no samples to drop");
    if (!g->training || p == 0.0f) return x;
    vt_node *n = vt_new_node(g, &op_droppath, &x, 1, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    *VT_OP_P(n, droppath_p) = (droppath_p){x->shape[0], (int)(x->numel / x->shape[0]), p};
    vt_node_save(n, 0, x->shape[0]);
    n->grad_sets = 1u;
    return n->out;
}
