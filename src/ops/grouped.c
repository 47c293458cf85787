/* Grouped linear projection (MSF's `GroupLinear`, interleaved or block output order) and the fixed 2-D sin-cos
 * position embedding of SimpleViT (a constant, recomputed in C, never a parameter). */
#include <math.h>
#include <limits.h>
#include <omp.h>
#include <string.h>

#include "vitc/ops.h"

/* Row-major sgemm: C = alpha·op(A)·op(B) + beta·C, dispatched by n's graph. */
static void gemm(const vt_node *n, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
    vt_gemm(&n->g->gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- group linear: x (R, Din), w (E, Din/G) [+ b (E)] -> y (R, E) ----
 * Group gi reads x[:, gi·Dg : (gi+1)·Dg] and weight rows gi·Eg + e, e < Eg, giving y_{gi,e}; its output channel is
 * e·G + gi (interleave) or gi·Eg + e (block); the bias, in output order, follows. The interleaved mode computes in
 * block order into scratch, then scatters adding the bias (forward) / gathers (backward); the block order starts
 * each GEMM's output block from the bias. */
typedef struct {
    int R, Din, E, G;
    int il;       /* interleaved output order (never with one group) */
    int has_bias; /* in[2] = b */
} glinear_p;

/* dst[r, e·G + gi] = src[r, gi·Eg + e] (+ b[e·G + gi] when b) (to_il), or dst[r, gi·Eg + e] = src[r, e·G + gi]. */
static void interleave_rows(float *dst, const float *src, const float *b, int R, int E, int G, int to_il) {
    const int Eg = E / G;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        float *d = dst + (size_t)r * E;
        const float *s = src + (size_t)r * E;
        for (int gi = 0; gi < G; gi++)
            for (int e = 0; e < Eg; e++) {
                if (to_il)
                    d[e * G + gi] = s[gi * Eg + e] + (b ? b[e * G + gi] : 0.0f);
                else
                    d[gi * Eg + e] = s[e * G + gi];
            }
    }
}

/* Row chunks per group so that the (group, chunk) tasks keep every thread busy (chunks of at least 64 rows). With
 * several groups the tasks run in one parallel region, each a single-threaded sgemm: a multi-threaded sgemm per
 * group (narrow Eg-column outputs, e.g. Next-ViT's 32-channel conv groups) spent more in its barriers than in its
 * flops. */
static int row_chunks(int R, int G, int nt) {
    const int want = (2 * nt + G - 1) / G, most = R / 64 > 1 ? R / 64 : 1;
    return G == 1 ? 1 : want < most ? want : most;
}

static void glinear_fwd(vt_node *n) {
    const glinear_p *p = VT_OP_P(n, glinear_p);
    const int R = p->R, Din = p->Din, E = p->E, G = p->G, il = p->il;
    const int Dg = Din / G, Eg = E / G, nc = row_chunks(R, G, n->g->threads);
    const float *x = n->in[0]->data, *w = n->in[1]->data, *b = p->has_bias ? n->in[2]->data : NULL;
    float *dst = il ? n->fws->data : n->out->data;
    const int from_bias = b && !il; /* block order: each GEMM adds onto its block filled with the bias */
#pragma omp parallel for collapse(2) schedule(static) if (G > 1)
    for (int gi = 0; gi < G; gi++)
        for (int c = 0; c < nc; c++) {
            const int r0 = (int)((int64_t)R * c / nc), r1 = (int)((int64_t)R * (c + 1) / nc);
            float *y = dst + (size_t)r0 * E + (size_t)gi * Eg;
            for (int r = 0; from_bias && r < r1 - r0; r++)
                memcpy(y + (size_t)r * E, b + (size_t)gi * Eg, sizeof *y * (size_t)Eg);
            gemm(n, 0, 1, r1 - r0, Eg, Dg, 1.0f, x + (size_t)r0 * Din + (size_t)gi * Dg, Din,
                 w + (size_t)gi * Eg * Dg, Dg, from_bias ? 1.0f : 0.0f, y, E);
        }
    if (il) interleave_rows(n->out->data, dst, b, R, E, G, 1);
}

static void glinear_bwd(vt_node *n) {
    const glinear_p *p = VT_OP_P(n, glinear_p);
    const int R = p->R, Din = p->Din, E = p->E, G = p->G, il = p->il;
    const int Dg = Din / G, Eg = E / G;
    const vt_tensor *x = n->in[0], *w = n->in[1], *b = p->has_bias ? n->in[2] : NULL;
    const float *dy = n->out->grad;
    if (b && b->grad) vt_add_col_sums(dy, R, E, b->grad); /* in output order, before the gather */
    if (il) {
        interleave_rows(n->bws->data, dy, NULL, R, E, G, 0);
        dy = n->bws->data;
    }
    const int nc = row_chunks(R, G, n->g->threads);
    if (x->grad) { /* (group, chunk) tasks write disjoint blocks of dx */
#pragma omp parallel for collapse(2) schedule(static) if (G > 1)
        for (int gi = 0; gi < G; gi++)
            for (int c = 0; c < nc; c++) {
                const int r0 = (int)((int64_t)R * c / nc), r1 = (int)((int64_t)R * (c + 1) / nc);
                gemm(n, 0, 0, r1 - r0, Dg, Eg, 1.0f, dy + (size_t)r0 * E + (size_t)gi * Eg, E,
                     w->data + (size_t)gi * Eg * Dg, Dg, 1.0f, x->grad + (size_t)r0 * Din + (size_t)gi * Dg, Din);
            }
    }
    if (w->grad) { /* one task per group: its rows all sum into the group's weight block */
#pragma omp parallel for schedule(static) if (G > 1)
        for (int gi = 0; gi < G; gi++)
            gemm(n, 1, 0, Eg, Dg, R, 1.0f, dy + (size_t)gi * Eg, E, x->data + (size_t)gi * Dg, Din, 1.0f,
                 w->grad + (size_t)gi * Eg * Dg, Dg);
    }
}

static const vt_opdef op_glinear = {"group_linear", glinear_fwd, glinear_bwd,
                                     VT_READS(VT_READS_IN(0) | VT_READS_IN(1)), NULL, VT_OP_GEMM};

vt_tensor *vt_group_linear(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int groups, int interleave) {
    if (vt_bad(g, 2, x, w)) return NULL;
    char sx[64], sw[64], sb[64];
    const int Din = x->shape[x->ndim - 1];
    if (groups <= 0 || Din % groups || w->ndim != 2 || w->shape[1] * groups != Din || w->shape[0] % groups)
        return vt_fail(g, "group_linear", "input %s, weight %s (%s), %d groups: weight must be (out, %d) with out "
                       "divisible by the groups", vt_shape_str(x, sx, 64), vt_shape_str(w, sw, 64), w->name, groups,
                       groups > 0 ? Din / groups : 0);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return vt_fail(g, "group_linear", "bias %s (%s) must be (%d)", vt_shape_str(b, sb, 64), b->name, w->shape[0]);
    int shape[VT_MAXDIM];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    vt_tensor *in[3] = {x, w, b};
    vt_node *n = vt_new_node(g, &op_glinear, in, b ? 3 : 2, vt_new_act(g, x->ndim, shape));
    if (!n) return NULL;
    const int R = (int)(x->numel / Din), il = interleave && groups > 1;
    *VT_OP_P(n, glinear_p) = (glinear_p){R, Din, w->shape[0], groups, il, b != NULL};
    if (il && (!vt_node_work(n, 0, (int64_t)R * w->shape[0]) || !vt_node_work(n, 1, (int64_t)R * w->shape[0])))
        return NULL;
    n->macs = (int64_t)R * w->shape[0] * (Din / groups);
    return n->out;
}

/* ---- 2-D sin-cos position embedding (constant, no inputs): (1, h·w, dim) ----
 * Q = dim/4, ω_c = temperature^(−c/(Q−1)); token t = y·w + x; [sin(xω), cos(xω), sin(yω), cos(yω)]. */
typedef struct {
    int h, w, dim;
    float temperature;
} posemb_p;

static void posemb_fwd(vt_node *n) {
    const posemb_p *p = VT_OP_P(n, posemb_p);
    const int h = p->h, w = p->w, dim = p->dim, Q = dim / 4;
    const double temp = p->temperature;
    float *pe = n->out->data, *om = n->fws->data; /* the Q frequencies, once (pow per element was most of the op) */
    for (int c = 0; c < Q; c++) om[c] = (float)(1.0 / pow(temp, Q > 1 ? (double)c / (Q - 1) : 0.0));
#pragma omp parallel for schedule(static)
    for (int t = 0; t < h * w; t++) {
        const double x = t % w, y = t / w;
        float *row = pe + (size_t)t * dim;
        for (int c = 0; c < Q; c++) {
            const float xo = (float)x * om[c], yo = (float)y * om[c]; /* float32 products, as the official code */
            row[c] = sinf(xo);
            row[Q + c] = cosf(xo);
            row[2 * Q + c] = sinf(yo);
            row[3 * Q + c] = cosf(yo);
        }
    }
}

static void posemb_bwd(vt_node *n) { (void)n; }

static const vt_opdef op_posemb = {"posemb_sincos2d", posemb_fwd, posemb_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_posemb_sincos2d(vt_graph *g, int h, int w, int dim, float temperature) {
    if (vt_bad(g, 0)) return NULL;
    if (h <= 0 || w <= 0 || h > INT_MAX / w || dim <= 0 || dim % 4 || !(temperature > 0))
        return vt_fail(g, "posemb_sincos2d",
                       "grid %dx%d, dim %d, temperature %g: a grid of at most %d positions, dim a positive multiple of 4",
                       h, w, dim, (double)temperature, INT_MAX);
    int shape[3] = {1, h * w, dim};
    vt_node *n = vt_new_node(g, &op_posemb, NULL, 0, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    *VT_OP_P(n, posemb_p) = (posemb_p){h, w, dim, temperature};
    vt_node_work(n, 0, dim / 4);
    return n->out;
}
