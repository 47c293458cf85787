/* Elementwise binary ops with numpy broadcasting (aligned at the last dim), and affine scaling. */
#include <omp.h>
#include <string.h>

#include "vitc/ops.h"

enum { B_ADD, B_SUB, B_MUL };

/* Shapes and strides right-aligned and padded to VT_MAXDIM; a stride of 0 marks a broadcast dim. */
typedef struct {
    int kind;             /* B_ADD, B_SUB or B_MUL */
    int shape[VT_MAXDIM]; /* output shape */
    int sa[VT_MAXDIM];    /* a's strides */
    int sb[VT_MAXDIM];    /* b's strides */
    int suffix;           /* 1 when a is full-size and b is a suffix of the output shape */
} binary_p;

static void offsets(const binary_p *p, int64_t i, int64_t *oa, int64_t *ob) {
    int64_t a = 0, b = 0;
    for (int d = VT_MAXDIM - 1; d >= 0; d--) {
        int64_t c = i % p->shape[d];
        i /= p->shape[d];
        a += c * p->sa[d];
        b += c * p->sb[d];
    }
    *oa = a;
    *ob = b;
}

static int full(const vt_tensor *t, const vt_tensor *out) { return t->numel == out->numel; }

static void binary_fwd(vt_node *n) {
    const binary_p *p = VT_OP_P(n, binary_p);
    const int kind = p->kind;
    const float *a = n->in[0]->data, *b = n->in[1]->data;
    float *y = n->out->data;
    const int64_t N = n->out->numel, nb = n->in[1]->numel;
    if (p->suffix) {
        /* fast path: b equals a's shape, or b is a broadcast of the last dim (bias-like) */
        if (nb == N) { /* same shapes */
#pragma omp parallel for schedule(static) if (N > VT_PAR_MIN)
            for (int64_t i = 0; i < N; i++) y[i] = kind == B_ADD ? a[i] + b[i] : kind == B_SUB ? a[i] - b[i] : a[i] * b[i];
            return;
        }
#pragma omp parallel for schedule(static) if (N > VT_PAR_MIN)
        for (int64_t r = 0; r < N / nb; r++) { /* rows of b's size: no index arithmetic per element */
            const float *ar = a + r * nb;
            float *yr = y + r * nb;
            for (int64_t j = 0; j < nb; j++)
                yr[j] = kind == B_ADD ? ar[j] + b[j] : kind == B_SUB ? ar[j] - b[j] : ar[j] * b[j];
        }
        return;
    }
    /* general broadcast: rows of the output's last dim, offsets computed once per row */
    const int64_t L = p->shape[VT_MAXDIM - 1], sa = p->sa[VT_MAXDIM - 1], sb = p->sb[VT_MAXDIM - 1];
#pragma omp parallel for schedule(static) if (N > VT_PAR_MIN)
    for (int64_t r = 0; r < N / L; r++) {
        int64_t oa, ob;
        offsets(p, r * L, &oa, &ob);
        float *yr = y + r * L;
        const float *ar = a + oa, *br = b + ob;
        if (sa == 1 && sb == 0) { /* a row against one value of b (e.g. a per-row scale): vectorisable */
            const float bv = br[0];
            for (int64_t j = 0; j < L; j++) yr[j] = kind == B_ADD ? ar[j] + bv : kind == B_SUB ? ar[j] - bv : ar[j] * bv;
            continue;
        }
        for (int64_t j = 0; j < L; j++) {
            const float av = ar[j * sa], bv = br[j * sb];
            yr[j] = kind == B_ADD ? av + bv : kind == B_SUB ? av - bv : av * bv;
        }
    }
}

static void binary_bwd(vt_node *n) {
    const binary_p *p = VT_OP_P(n, binary_p);
    const int kind = p->kind;
    const vt_tensor *A = n->in[0], *B = n->in[1];
    const float *dy = n->out->grad;
    const int64_t N = n->out->numel;
    for (int side = 0; side < 2; side++) {
        const vt_tensor *X = side ? B : A, *Other = side ? A : B;
        if (!X->grad) continue;
        const float sign = (side && kind == B_SUB) ? -1.0f : 1.0f;
        const int64_t L = p->shape[VT_MAXDIM - 1];
        const int64_t so = side ? p->sa[VT_MAXDIM - 1] : p->sb[VT_MAXDIM - 1]; /* the other operand's last stride */
        if (full(X, n->out)) { /* X full size: rows of the last dim, the other operand's offset once per row; its
                                * gradient written where it is fresh (grad_sets) */
            const int set = (int)(n->grad_fresh >> side & 1u);
#pragma omp parallel for schedule(static) if (N > VT_PAR_MIN)
            for (int64_t r = 0; r < N / L; r++) {
                int64_t oa, ob;
                offsets(p, r * L, &oa, &ob);
                const float *o = Other->data + (side ? oa : ob), *dr = dy + r * L;
                float *gr = X->grad + r * L;
                if (set && kind == B_MUL)
                    for (int64_t j = 0; j < L; j++) gr[j] = dr[j] * o[j * so];
                else if (set)
                    for (int64_t j = 0; j < L; j++) gr[j] = dr[j] * sign;
                else if (kind == B_MUL)
                    for (int64_t j = 0; j < L; j++) gr[j] += dr[j] * o[j * so];
                else
                    for (int64_t j = 0; j < L; j++) gr[j] += dr[j] * sign;
            }
        } else if (X->numel == N / L && (side ? p->sb : p->sa)[VT_MAXDIM - 1] == 0) {
            /* X is the output with its last dim 1 (e.g. a per-row scale): one element of X per row of dy */
#pragma omp parallel for schedule(static) if (N > VT_PAR_MIN)
            for (int64_t r = 0; r < N / L; r++) {
                int64_t oa, ob;
                offsets(p, r * L, &oa, &ob);
                const float *o = Other->data + (side ? oa : ob), *dr = dy + r * L;
                double acc = 0.0;
                if (kind == B_MUL)
                    for (int64_t j = 0; j < L; j++) acc += (double)dr[j] * o[j * so];
                else
                    for (int64_t j = 0; j < L; j++) acc += dr[j];
                X->grad[side ? ob : oa] += (float)(kind == B_MUL ? acc : sign * acc);
            }
        } else if (side == 1 && p->suffix) {
            /* b broadcast over leading dims (bias, position embedding): column sums, each thread owning a block
             * of b's elements and walking the rows of dy contiguously */
            const int64_t nb = B->numel, rows = N / nb;
#pragma omp parallel if (N > VT_PAR_MIN)
            {
                const int nt = omp_get_num_threads(), t = omp_get_thread_num();
                const int64_t j0 = nb * t / nt, j1 = nb * (t + 1) / nt;
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t j = j0; j < j1; j++) {
                        const int64_t i = r * nb + j;
                        X->grad[j] += dy[i] * (kind == B_MUL ? A->data[i] : sign);
                    }
            }
        } else {
            for (int64_t i = 0; i < N; i++) {
                int64_t oa, ob;
                offsets(p, i, &oa, &ob);
                float f = kind == B_MUL ? Other->data[side ? oa : ob] : sign;
                X->grad[side ? ob : oa] += dy[i] * f;
            }
        }
    }
}

static const vt_opdef op_binary[3] = {
    {"add", binary_fwd, binary_bwd, VT_READS(0), NULL, VT_OP_OTHER},
    {"sub", binary_fwd, binary_bwd, VT_READS(0), NULL, VT_OP_OTHER},
    {"mul", binary_fwd, binary_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)), NULL, VT_OP_OTHER}};

static vt_tensor *binary(vt_graph *g, vt_tensor *a, vt_tensor *b, int kind) {
    if (vt_bad(g, 2, a, b)) return NULL;
    const int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int shape[VT_MAXDIM], pa[VT_MAXDIM], pb[VT_MAXDIM];
    for (int d = 0; d < VT_MAXDIM; d++) { /* right-aligned padding to VT_MAXDIM */
        int ia = d - (VT_MAXDIM - a->ndim), ib = d - (VT_MAXDIM - b->ndim);
        pa[d] = ia >= 0 ? a->shape[ia] : 1;
        pb[d] = ib >= 0 ? b->shape[ib] : 1;
        if (pa[d] != pb[d] && pa[d] != 1 && pb[d] != 1) {
            char sa[64], sb[64];
            return vt_fail(g, op_binary[kind].name, "shapes %s and %s do not broadcast", vt_shape_str(a, sa, 64),
                           vt_shape_str(b, sb, 64));
        }
        shape[d] = pa[d] > pb[d] ? pa[d] : pb[d];
    }
    vt_tensor *in[2] = {a, b};
    vt_node *n = vt_new_node(g, &op_binary[kind], in, 2, vt_new_act(g, nd, shape + VT_MAXDIM - nd));
    if (!n) return NULL;
    binary_p *p = VT_OP_P(n, binary_p);
    p->kind = kind;
    int64_t sa = 1, sb = 1;
    for (int d = VT_MAXDIM - 1; d >= 0; d--) {
        p->shape[d] = shape[d];
        p->sa[d] = pa[d] == 1 ? 0 : (int)sa;
        p->sb[d] = pb[d] == 1 ? 0 : (int)sb;
        sa *= pa[d];
        sb *= pb[d];
    }
    int suffix = a->numel == n->out->numel, k = 0;
    while (k < VT_MAXDIM && pb[k] == 1) k++;
    for (int d = k; d < VT_MAXDIM; d++) suffix &= pb[d] == shape[d];
    p->suffix = suffix;
    n->grad_sets = (full(a, n->out) ? 1u : 0u) | (full(b, n->out) ? 2u : 0u); /* full-size operands: dy covers them */
    return n->out;
}

vt_tensor *vt_add(vt_graph *g, vt_tensor *a, vt_tensor *b) { return binary(g, a, b, B_ADD); }
vt_tensor *vt_sub(vt_graph *g, vt_tensor *a, vt_tensor *b) { return binary(g, a, b, B_SUB); }
vt_tensor *vt_mul(vt_graph *g, vt_tensor *a, vt_tensor *b) { return binary(g, a, b, B_MUL); }

/* ---- affine: s·x + c ---- */

typedef struct {
    float s, c;
} affine_p;

static void affine_fwd(vt_node *n) {
    const affine_p *p = VT_OP_P(n, affine_p);
    const float s = p->s, c = p->c, *x = n->in[0]->data;
    float *y = n->out->data;
#pragma omp parallel for schedule(static) if (n->out->numel > VT_PAR_MIN)
    for (int64_t i = 0; i < n->out->numel; i++) y[i] = s * x[i] + c;
}

static void affine_bwd(vt_node *n) {
    const float s = VT_OP_P(n, affine_p)->s, *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    if (!dx) return;
#pragma omp parallel for schedule(static) if (n->out->numel > VT_PAR_MIN)
    for (int64_t i = 0; i < n->out->numel; i++) dx[i] += s * dy[i];
}

static const vt_opdef op_affine = {"affine", affine_fwd, affine_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_affine(vt_graph *g, vt_tensor *x, float s, float c) {
    if (vt_bad(g, 1, x)) return NULL;
    vt_node *n = vt_new_node(g, &op_affine, &x, 1, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    *VT_OP_P(n, affine_p) = (affine_p){s, c};
    return n->out;
}

vt_tensor *vt_scale(vt_graph *g, vt_tensor *x, float s) { return vt_affine(g, x, s, 0.0f); }
