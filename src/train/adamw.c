/* AdamW (decoupled weight decay) following torch.optim.AdamW's single-tensor path, and gradient-norm clipping. */
#include "vitc/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Parameters the optimiser updates: learnable, with data and a gradient buffer. */
static int tracked(const vt_tensor *t) { return t->kind == VT_PARAM && t->requires_grad && t->data && t->grad; }

int vt_adamw_init(vt_adamw *o, vt_params *P, float beta1, float beta2, float eps, float weight_decay, vt_err *e) {
    if (!o || !P) return vt_seterr(e, "vt_adamw_init: NULL argument");
    memset(o, 0, sizeof *o);
    if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f))
        return vt_seterr(e, "AdamW betas (%g, %g) must lie in [0, 1)", (double)beta1, (double)beta2);
    if (!(eps >= 0.0f) || !(weight_decay >= 0.0f) || !isfinite(eps) || !isfinite(weight_decay))
        return vt_seterr(e, "AdamW eps %g and weight decay %g must be finite and >= 0", (double)eps,
                         (double)weight_decay);
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    o->P = P;
    if (P->shapes_only) return vt_seterr(e, "AdamW needs a store with data (this one records shapes only)");
    if (vt_params_alloc_grads(P, e)) return -1;
    int n = 0;
    size_t total = 0;
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (!tracked(t)) continue;
        n++;
        total += (size_t)t->numel;
    }
    o->n = n;
    if (n == 0) return 0;
    size_t bytes;
    if (vt_mul_overflow(total, 2 * sizeof(float), &bytes)) return vt_seterr(e, "AdamW state size overflows");
    o->p = vt_alloc((size_t)n * sizeof *o->p, e);
    o->m = o->p ? vt_alloc((size_t)n * sizeof *o->m, e) : NULL;
    o->v = o->m ? vt_alloc((size_t)n * sizeof *o->v, e) : NULL;
    o->buf = o->v ? vt_alloc(bytes, e) : NULL;
    if (!o->buf) {
        vt_adamw_free(o);
        return -1;
    }
    size_t off = 0;
    int k = 0;
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (!tracked(t)) continue;
        o->p[k] = t;
        o->m[k] = o->buf + off;
        o->v[k] = o->buf + total + off;
        off += (size_t)t->numel;
        k++;
    }
    return 0;
}

void vt_adamw_free(vt_adamw *o) {
    if (!o) return;
    vt_free(o->p);
    vt_free(o->m);
    vt_free(o->v);
    vt_free(o->buf);
    memset(o, 0, sizeof *o);
}

void vt_adamw_step(vt_adamw *o, float lr) {
    o->step++;
    if (o->P) vt_params_changed(o->P);
    const double t = (double)o->step;
    const double bc1 = 1.0 - pow((double)o->beta1, t);
    const double bc2 = 1.0 - pow((double)o->beta2, t);
    const float step_size = (float)((double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    const float omb1 = (float)(1.0 - (double)b1), omb2 = (float)(1.0 - (double)b2);
    const float decay = (float)(1.0 - (double)lr * (double)o->weight_decay);
    /* One parallel region for every tensor, each split over the threads without a barrier between tensors (the
     * update is elementwise: the same values on any thread count). Against a region per tensor of over 32,768
     * elements and the smaller ones on one thread (best of 200 steps, 2 threads, Zen 4, 2026-12-06):
     * GroupMixFormer-M's 864 tensors 5.5-6.1 -> 2.2-2.8 ms, DeiT-T's 152 2.3-3.0 -> 2.0-2.9 ms. */
#pragma omp parallel
    for (int i = 0; i < o->n; i++) {
        vt_tensor *pt = o->p[i];
        float *restrict p = pt->data;
        const float *restrict g = pt->grad;
        float *restrict m = o->m[i];
        float *restrict v = o->v[i];
        const int64_t numel = pt->numel;
        const int decayed = !pt->no_decay && pt->kind == VT_PARAM && o->weight_decay != 0.0f;
        const float dec = decayed ? decay : 1.0f; /* p·1 = p exactly: no branch in the (vectorised) loop */
#pragma omp for simd schedule(simd : static) nowait
        for (int64_t j = 0; j < numel; j++) {
            const float pj = p[j] * dec;
            const float gj = g[j];
            const float mj = b1 * m[j] + omb1 * gj;
            const float vj = b2 * v[j] + omb2 * gj * gj;
            m[j] = mj;
            v[j] = vj;
            p[j] = pj - step_size * mj / (sqrtf(vj) / bc2_sqrt + eps);
        }
    }
}

int vt_adamw_nstate(const vt_adamw *o) { return o ? 2 * o->n : 0; }

float *vt_adamw_state(const vt_adamw *o, int i, char *name, int len, int64_t *numel, const vt_tensor **param) {
    if (!o || i < 0 || i >= 2 * o->n) return NULL;
    const vt_tensor *t = o->p[i / 2];
    if (name && len > 0) snprintf(name, (size_t)len, "optim/%c/%s", i % 2 ? 'v' : 'm', t->name);
    if (numel) *numel = t->numel;
    if (param) *param = t;
    return i % 2 ? o->v[i / 2] : o->m[i / 2];
}

#define CLIP_CHUNKS 64 /* a gradient's squares summed in this many fixed chunks, added in order */

/* The norm is the same on any thread count: each rank of a data-parallel run clips its copy of the (allreduced)
 * gradients by it, and an OpenMP reduction's order, which follows the threads, had let ranks on other --threads
 * settings clip by other last bits and their weights drift apart. */
double vt_clip_grad_norm(vt_params *P, double max_norm) {
    double ss = 0.0;
    for (int i = 0; i < P->n; i++) {
        const vt_tensor *t = P->t[i];
        if (t->kind != VT_PARAM || !t->grad) continue;
        const float *g = t->grad;
        const int64_t numel = t->numel, step = (numel + CLIP_CHUNKS - 1) / CLIP_CHUNKS;
        double part[CLIP_CHUNKS];
#pragma omp parallel for schedule(static) if (numel > 32768)
        for (int k = 0; k < CLIP_CHUNKS; k++) {
            const int64_t j1 = (k + 1) * step < numel ? (k + 1) * step : numel;
            double s = 0.0;
            for (int64_t j = k * step; j < j1; j++) s += (double)g[j] * (double)g[j];
            part[k] = s;
        }
        for (int k = 0; k < CLIP_CHUNKS; k++) ss += part[k];
    }
    const double norm = sqrt(ss);
    if (max_norm > 0.0) {
        const double coef = max_norm / (norm + 1e-6);
        if (!(coef >= 1.0)) { /* also scales (to NaN) when the norm is NaN, as torch does */
            const float c = (float)coef;
            for (int i = 0; i < P->n; i++) {
                vt_tensor *t = P->t[i];
                if (t->kind != VT_PARAM || !t->grad) continue;
                float *g = t->grad;
                const int64_t numel = t->numel;
#pragma omp parallel for schedule(static) if (numel > 32768)
                for (int64_t j = 0; j < numel; j++) g[j] *= c;
            }
        }
    }
    return norm;
}
