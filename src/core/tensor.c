#include "vitc/tensor.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "vitc/rng.h"

int vt_dtype_size(vt_dtype d) {
    switch (d) {
    case VT_F32: return 4;
    case VT_U8: return 1;
    }
    return 0;
}

int64_t vt_shape_numel(int ndim, const int *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] > 0 && n > INT64_MAX / shape[i]) return INT64_MAX; /* saturates instead of overflowing */
        n *= shape[i];
    }
    return n;
}

int vt_has_shape(const vt_tensor *t, int nd, int d0, int d1, int d2, int d3) {
    const int d[4] = {d0, d1, d2, d3};
    if (!t || nd > 4 || t->ndim != nd) return 0;
    for (int i = 0; i < nd; i++)
        if (t->shape[i] != d[i]) return 0;
    return 1;
}

const char *vt_shape_str(const vt_tensor *t, char *buf, int len) {
    int o = snprintf(buf, (size_t)len, "(");
    for (int i = 0; i < t->ndim && o < len; i++)
        o += snprintf(buf + o, (size_t)(len - o), i ? ", %d" : "%d", t->shape[i]);
    if (o < len) snprintf(buf + o, (size_t)(len - o), ")");
    return buf;
}

vt_tensor *vt_root(vt_tensor *t) {
    while (t && t->view_of) t = t->view_of;
    return t;
}

int64_t vt_root_offset(const vt_tensor *t) {
    int64_t off = 0;
    for (; t && t->view_of; t = t->view_of) off += t->view_off;
    return off;
}

vt_params *vt_params_new(vt_err *e) { return vt_alloc(sizeof(vt_params), e); }

const vt_tensor *vt_params_first_nonfinite(const vt_params *P, int64_t *at) {
    for (int i = 0; i < P->n; i++) {
        const int64_t k = P->t[i]->data ? vt_first_nonfinite(P->t[i]->data, P->t[i]->numel) : -1;
        if (k >= 0) {
            *at = k;
            return P->t[i];
        }
    }
    return NULL;
}

void vt_params_copy_records(vt_params *dst, const vt_params *src) {
    dst->form = src->form;
    dst->reparam = src->reparam;
    dst->model = src->model;
    memcpy(dst->heads, src->heads, sizeof dst->heads);
    memcpy(dst->windows, src->windows, sizeof dst->windows);
    memcpy(dst->attn, src->attn, sizeof dst->attn);
    memcpy(dst->options, src->options, sizeof dst->options);
    dst->folder = src->folder;
}

void vt_params_free(vt_params *P) {
    if (!P) return;
    for (int i = 0; i < P->n; i++) {
        vt_free(P->t[i]->data);
        vt_free(P->t[i]->grad);
        vt_free(P->t[i]);
    }
    vt_free(P->t);
    vt_name_index_free(&P->index);
    vt_free(P);
}

/* FNV-1a of a name. */
static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The slot holding `name`, or the empty slot where it would go (x->slots > 0). */
static int *name_slot(const vt_name_index *x, const char *name, vt_name_of name_of, const void *ctx) {
    const uint32_t mask = (uint32_t)x->slots - 1;
    for (uint32_t i = name_hash(name) & mask;; i = (i + 1) & mask)
        if (!x->slot[i] || strcmp(name_of(ctx, x->slot[i] - 1), name) == 0) return &x->slot[i];
}

int vt_name_index_find(const vt_name_index *x, const char *name, vt_name_of name_of, const void *ctx) {
    return x->slots ? *name_slot(x, name, name_of, ctx) - 1 : -1;
}

int vt_name_index_add(vt_name_index *x, int k, vt_name_of name_of, const void *ctx, vt_err *e) {
    if (2 * (k + 1) > x->slots) {
        int slots = x->slots ? 2 * x->slots : 256;
        while (2 * (k + 1) > slots) slots *= 2;
        int *slot = vt_alloc(sizeof(int) * (size_t)slots, e); /* zeroed: every slot empty */
        if (!slot) return -1;
        vt_free(x->slot);
        *x = (vt_name_index){slot, slots};
        for (int i = 0; i < k; i++) *name_slot(x, name_of(ctx, i), name_of, ctx) = i + 1;
    }
    *name_slot(x, name_of(ctx, k), name_of, ctx) = k + 1;
    return 0;
}

void vt_name_index_free(vt_name_index *x) {
    vt_free(x->slot);
    *x = (vt_name_index){NULL, 0};
}

static const char *param_name(const void *P, int k) { return ((const vt_params *)P)->t[k]->name; }

vt_tensor *vt_params_find(const vt_params *P, const char *name) {
    const int k = vt_name_index_find(&P->index, name, param_name, P);
    return k < 0 ? NULL : P->t[k];
}

vt_tensor *vt_params_add(vt_params *P, const char *name, vt_kind kind, int ndim, const int *shape, vt_init init,
                         vt_err *e) {
    if (strlen(name) >= VT_NAMELEN) {
        vt_seterr(e, "parameter name too long: %s", name);
        return NULL;
    }
    if (ndim < 0 || ndim > VT_MAXDIM) {
        vt_seterr(e, "parameter %s: %d dimensions (max %d)", name, ndim, VT_MAXDIM);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) {
            vt_seterr(e, "parameter %s: dimension %d is %d", name, i, shape[i]);
            return NULL;
        }
    const int64_t numel = vt_shape_numel(ndim, shape);
    if (numel > VT_MAX_NUMEL) {
        vt_seterr(e, "parameter %s: %lld elements exceed " VT_NUMEL_LIMIT_MSG "; use smaller widths", name,
                  (long long)numel, VT_MAX_NUMEL);
        return NULL;
    }
    vt_tensor *t = vt_params_find(P, name);
    if (t) {
        int same = t->ndim == ndim && t->kind == kind;
        for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
        if (!same) {
            vt_seterr(e, "parameter %s declared twice with different shapes", name);
            return NULL;
        }
        return t;
    }
    if (P->n == P->cap) {
        int cap = P->cap ? P->cap * 2 : 64;
        vt_tensor **nt = vt_alloc(sizeof(*nt) * (size_t)cap, e);
        if (!nt) return NULL;
        if (P->n) memcpy(nt, P->t, sizeof(*nt) * (size_t)P->n);
        vt_free(P->t);
        P->t = nt;
        P->cap = cap;
    }
    t = vt_alloc(sizeof(*t), e);
    if (!t) return NULL;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->kind = kind;
    t->init = init;
    t->requires_grad = kind == VT_PARAM;
    if (!P->shapes_only && !(t->data = vt_alloc(sizeof(float) * (size_t)t->numel, e))) {
        vt_free(t);
        return NULL;
    }
    P->t[P->n] = t;
    if (vt_name_index_add(&P->index, P->n, param_name, P, e)) {
        vt_free(t->data);
        vt_free(t);
        return NULL;
    }
    P->n++;
    return t;
}

/* Standard normal samples from one stream, both of each Box-Muller pair used. */
typedef struct {
    vt_rng r;
    float z[2];
    int left; /* samples of z not yet given */
} normal_src;

static float next_normal(normal_src *s) {
    if (!s->left) {
        vt_rng_normal_pair(&s->r, s->z);
        s->left = 2;
    }
    return s->z[2 - s->left--];
}

#define INIT_CHUNK 65536 /* elements per random stream of vt_params_init */

/* Elements [c·INIT_CHUNK, ...) of parameter i (t) drawn from their own stream, keyed by (seed, i, c). */
static void init_chunk(vt_tensor *t, int i, int64_t c, uint64_t seed) {
    const int64_t j0 = c * INIT_CHUNK, j1 = j0 + INIT_CHUNK < t->numel ? j0 + INIT_CHUNK : t->numel;
    const float a = t->init.a;
    normal_src s = {.left = 0};
    vt_rng_seed(&s.r, vt_rng_key(seed ^ 0x1a17ULL, (uint64_t)i, (uint64_t)c)); /* not the loader's (epoch, image) keys */
    for (int64_t j = j0; j < j1; j++) {
        float v = 0.0f;
        switch (t->init.kind) {
        case VT_INIT_ZERO: v = 0.0f; break;
        case VT_INIT_ONE: v = 1.0f; break;
        case VT_INIT_CONST: v = a; break;
        case VT_INIT_NORMAL: v = next_normal(&s) * a; break;
        case VT_INIT_TRUNC_NORMAL: /* timm's trunc_normal_(std=a) truncates at absolute +-2 (not +-2 std) */
            do
                v = next_normal(&s) * a;
            while (!(v >= -2.0f && v <= 2.0f));
            break;
        case VT_INIT_UNIFORM: v = (2.0f * vt_rng_uniform(&s.r) - 1.0f) * a; break;
        case VT_INIT_FIXED: break; /* skipped by the caller */
        }
        t->data[j] = v;
    }
}

void vt_params_changed(vt_params *P) { P->gen++; }

/* Each parameter's chunks of INIT_CHUNK elements have their own streams, so the values do not depend on the thread
 * count, and a large tensor's chunks run in parallel (Box-Muller's log and cos were a third of the registry sweep's
 * time, one sample per pair, on one thread). */
void vt_params_init(vt_params *P, uint64_t seed) {
    if (P->shapes_only) return;
    vt_params_changed(P);
    for (int i = 0; i < P->n; i++) {
        vt_tensor *t = P->t[i];
        if (t->init.kind == VT_INIT_FIXED) continue;
        const int64_t nc = (t->numel + INIT_CHUNK - 1) / INIT_CHUNK;
#pragma omp parallel for schedule(static) if (nc > 1)
        for (int64_t c = 0; c < nc; c++) init_chunk(t, i, c, seed);
    }
}

int64_t vt_params_count(const vt_params *P, vt_kind kind) {
    int64_t n = 0;
    for (int i = 0; i < P->n; i++)
        if (P->t[i]->kind == kind) n += P->t[i]->numel;
    return n;
}

int64_t vt_params_count_paper(const vt_params *P) {
    int64_t n = 0;
    for (int i = 0; i < P->n; i++)
        if (P->t[i]->kind == VT_PARAM && P->t[i]->paper_count) n += P->t[i]->numel;
    return n;
}

int vt_params_alloc_grads(vt_params *P, vt_err *e) {
    for (int i = 0; i < P->n; i++)
        if (P->t[i]->kind == VT_PARAM && !P->t[i]->requires_grad && P->t[i]->grad)
            return vt_seterr(e, "parameter '%s' was frozen after its gradient was made (freeze parameters before "
                             "building graphs or an optimiser on them)", P->t[i]->name);
    for (int i = 0; i < P->n; i++)
        if (P->t[i]->kind == VT_PARAM && P->t[i]->requires_grad && !P->t[i]->grad && !P->shapes_only &&
            !(P->t[i]->grad = vt_alloc(sizeof(float) * (size_t)P->t[i]->numel, e)))
            return -1;
    return 0;
}

int64_t vt_first_nonfinite(const float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return i;
    return -1;
}

void vt_zero(float *p, int64_t n) {
    const int64_t chunk = 1 << 16; /* 256 KiB per task: below that a parallel region costs more than it saves */
#pragma omp parallel for schedule(static) if (n > 2 * chunk)
    for (int64_t c = 0; c < (n + chunk - 1) / chunk; c++)
        memset(p + c * chunk, 0, sizeof(float) * (size_t)(n - c * chunk < chunk ? n - c * chunk : chunk));
}

void vt_add_col_sums(const float *y, int64_t R, int C, float *s) {
#pragma omp parallel
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int c0 = (int)((int64_t)C * t / nt), c1 = (int)((int64_t)C * (t + 1) / nt);
        for (int64_t r = 0; r < R; r++) { /* rows walked contiguously, each thread's columns summed in place */
            const float *row = y + (size_t)r * C;
            for (int c = c0; c < c1; c++) s[c] += row[c];
        }
    }
}

/* One parallel region for every gradient, each split over the threads without a barrier between them, as AdamW's
 * step: GroupMixFormer-M's 864 gradients 1.0-1.3 -> 0.33-0.35 ms, DeiT-T's 152 0.46-0.66 -> 0.21 ms (best of 200,
 * 2 threads, Zen 4, 2026-12-06). */
void vt_params_zero_grad(vt_params *P) {
#pragma omp parallel
    for (int i = 0; i < P->n; i++) {
        float *g = P->t[i]->grad;
        if (!g) continue;
        const int64_t n = P->t[i]->numel;
#pragma omp for simd schedule(simd : static) nowait
        for (int64_t j = 0; j < n; j++) g[j] = 0.0f;
    }
}
