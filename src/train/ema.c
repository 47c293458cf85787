/* Model EMA (timm ModelEmaV2 semantics). */
#include "vitc/ema.h"

#include <string.h>

int vt_ema_init(vt_ema *m, const vt_params *src, double decay, vt_err *e) {
    memset(m, 0, sizeof *m);
    if (!(decay >= 0.0 && decay <= 1.0)) return vt_seterr(e, "model EMA decay %g outside [0, 1]", decay);
    if (!(m->P = vt_params_new(e))) return -1;
    vt_params_copy_records(m->P, src);
    m->decay = decay;
    for (int i = 0; i < src->n; i++) {
        const vt_tensor *s = src->t[i];
        vt_tensor *t = vt_params_add(m->P, s->name, s->kind, s->ndim, s->shape, s->init, e);
        if (!t) {
            vt_ema_free(m);
            return -1;
        }
        t->no_decay = s->no_decay;
        t->paper_count = s->paper_count;
        t->is_i64 = s->is_i64;
        memcpy(t->data, s->data, sizeof(float) * (size_t)s->numel);
    }
    return 0;
}

void vt_ema_update(vt_ema *m, const vt_params *src) {
    vt_params_changed(m->P);
    const float d = (float)m->decay, c = (float)(1.0 - m->decay);
    for (int i = 0; i < src->n && i < m->P->n; i++) {
        const vt_tensor *s = src->t[i];
        vt_tensor *t = m->P->t[i];
        if (s->is_i64 || s->init.kind == VT_INIT_FIXED) {
            memcpy(t->data, s->data, sizeof(float) * (size_t)s->numel);
            continue;
        }
        float *a = t->data;
        const float *b = s->data;
#pragma omp parallel for schedule(static) if (s->numel > 65536)
        for (int64_t j = 0; j < s->numel; j++) a[j] = d * a[j] + c * b[j];
    }
}

void vt_ema_free(vt_ema *m) {
    if (m->P) vt_params_free(m->P);
    m->P = NULL;
}
