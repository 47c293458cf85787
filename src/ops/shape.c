/* Data-movement ops: concat, slice, general permute, attention head split/merge, token prepending.
 * All copy (no views besides vt_reshape); backward accumulates into the input gradients. No MACs. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "transpose8.h"
#include "vitc/ops.h"

#define PAR_MIN 32768 /* elements below which copies stay single-threaded */

static void copy_or_add(float *restrict dst, const float *restrict src, int64_t n, int acc) {
    if (acc)
        for (int64_t i = 0; i < n; i++) dst[i] += src[i];
    else
        memcpy(dst, src, sizeof(float) * (size_t)n);
}

/* ---- concat: x_i viewed as (outer, A_i·inner) -> (outer, ΣA_i·inner) ---- */
typedef struct {
    int nx;   /* inputs */
    int outer, inner;
    int A;    /* ΣA_i: the output's size along the axis */
    int axis; /* non-negative */
    int dup;  /* an input appears twice (a tiled weight): backward serial, its slots add into one gradient */
} concat_p;

static void concat_fwd(vt_node *n) {
    const concat_p *p = VT_OP_P(n, concat_p);
    const int nx = p->nx, O = p->outer, inner = p->inner, ax = p->axis;
    const int64_t row = (int64_t)p->A * inner;
    int64_t off[VT_MAXIN + 1] = {0};
    for (int i = 0; i < nx; i++) off[i + 1] = off[i] + (int64_t)n->in[i]->shape[ax] * inner;
    float *y = n->out->data;
#pragma omp parallel for collapse(2) schedule(static) if (n->out->numel > PAR_MIN)
    for (int o = 0; o < O; o++)
        for (int i = 0; i < nx; i++) {
            const int64_t len = off[i + 1] - off[i];
            copy_or_add(y + o * row + off[i], n->in[i]->data + o * len, len, 0);
        }
}

static void concat_bwd(vt_node *n) {
    const concat_p *p = VT_OP_P(n, concat_p);
    const int nx = p->nx, O = p->outer, inner = p->inner, ax = p->axis;
    const int64_t row = (int64_t)p->A * inner;
    int64_t off[VT_MAXIN + 1] = {0};
    for (int i = 0; i < nx; i++) off[i + 1] = off[i] + (int64_t)n->in[i]->shape[ax] * inner;
    const float *dy = n->out->grad;
#pragma omp parallel for collapse(2) schedule(static) if (n->out->numel > PAR_MIN && !p->dup)
    for (int o = 0; o < O; o++)
        for (int i = 0; i < nx; i++) {
            float *dx = n->in[i]->grad;
            if (!dx) continue;
            const int64_t len = off[i + 1] - off[i];
            copy_or_add(dx + o * len, dy + o * row + off[i], len, !(n->grad_fresh >> i & 1u));
        }
}

static const vt_opdef op_concat = {"concat", concat_fwd, concat_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_concat(vt_graph *g, vt_tensor **xs, int n, int axis) {
    if (g->err.msg[0]) return NULL;
    if (n < 1 || n > VT_MAXIN) return vt_fail(g, "concat", "%d inputs (need 1 to %d)", n, VT_MAXIN);
    for (int i = 0; i < n; i++)
        if (vt_bad(g, 1, xs[i])) return NULL;
    const int nd = xs[0]->ndim, ax = axis < 0 ? axis + nd : axis;
    char s0[64], si[64];
    vt_shape_str(xs[0], s0, 64);
    if (ax < 0 || ax >= nd) return vt_fail(g, "concat", "axis %d out of range for input 0 %s", axis, s0);
    int shape[VT_MAXDIM];
    memcpy(shape, xs[0]->shape, sizeof shape);
    for (int i = 1; i < n; i++) {
        int ok = xs[i]->ndim == nd;
        for (int d = 0; ok && d < nd; d++) ok = d == ax || xs[i]->shape[d] == shape[d];
        if (!ok)
            return vt_fail(g, "concat", "input %d %s does not match input 0 %s outside axis %d", i,
                           vt_shape_str(xs[i], si, 64), s0, ax);
        if (xs[i]->shape[ax] > INT_MAX - shape[ax])
            return vt_fail(g, "concat", "axis %d's sizes sum past %d (input %d %s)", ax, INT_MAX, i,
                           vt_shape_str(xs[i], si, 64));
        shape[ax] += xs[i]->shape[ax];
    }
    vt_node *nd_ = vt_new_node(g, &op_concat, xs, n, vt_new_act(g, nd, shape));
    if (!nd_) return NULL;
    int64_t O = 1, inner = 1;
    for (int d = 0; d < nd; d++) {
        if (d < ax) O *= shape[d];
        if (d > ax) inner *= shape[d];
    }
    int dup = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) dup |= vt_root(xs[i]) == vt_root(xs[j]);
    *VT_OP_P(nd_, concat_p) = (concat_p){n, (int)O, (int)inner, shape[ax], ax, dup};
    nd_->grad_sets = (1u << n) - 1u; /* backward covers every input (the engine leaves a repeated one to +=) */
    return nd_->out;
}

/* ---- slice: x viewed as (outer, A, inner) -> (outer, len, inner) from start ---- */
typedef struct {
    int outer, A, start, len, inner;
} slice_p;

/* Pieces each output chunk is copied in: one per chunk when there are at least 4 chunks, else enough pieces of at
 * least PAR_MIN floats to share a few large chunks among the threads (a slice of one chunk is a view, no copy). */
static int slice_pieces(int O, int64_t chunk) {
    if (O >= 4 || chunk < 2 * PAR_MIN) return 1;
    const int64_t k = chunk / PAR_MIN;
    return k < 8 ? (int)k : 8;
}

/* Copies (bwd = 0: y from x) or accumulates (bwd = 1: dx from dy) every chunk of the slice, in pieces. */
static void slice_run(const slice_p *p, float *x, float *y, int bwd) {
    const int O = p->outer, A = p->A, st = p->start, inner = p->inner;
    const int64_t chunk = (int64_t)p->len * inner;
    const int P = slice_pieces(O, chunk);
#pragma omp parallel for schedule(static) if ((int64_t)O * chunk > PAR_MIN)
    for (int t = 0; t < O * P; t++) {
        const int o = t / P, k = t % P;
        const int64_t a = chunk * k / P, b = chunk * (k + 1) / P;
        float *xs = x + ((int64_t)o * A + st) * inner + a, *ys = y + o * chunk + a;
        if (bwd)
            copy_or_add(xs, ys, b - a, 1);
        else
            copy_or_add(ys, xs, b - a, 0);
    }
}

static void slice_fwd(vt_node *n) { slice_run(VT_OP_P(n, slice_p), n->in[0]->data, n->out->data, 0); }

static void slice_bwd(vt_node *n) {
    if (n->in[0]->grad) slice_run(VT_OP_P(n, slice_p), n->in[0]->grad, n->out->grad, 1);
}

static const vt_opdef op_slice = {"slice", slice_fwd, slice_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_slice(vt_graph *g, vt_tensor *x, int axis, int start, int len) {
    if (vt_bad(g, 1, x)) return NULL;
    const int ax = axis < 0 ? axis + x->ndim : axis;
    char sx[64];
    vt_shape_str(x, sx, 64);
    if (ax < 0 || ax >= x->ndim) return vt_fail(g, "slice", "axis %d out of range for input %s", axis, sx);
    if (start < 0 || len < 1 || start > x->shape[ax] - len)
        return vt_fail(g, "slice", "range [%d, %d) outside axis %d of input %s", start, start + len, ax, sx);
    int shape[VT_MAXDIM];
    memcpy(shape, x->shape, sizeof shape);
    shape[ax] = len;
    int64_t O = 1, inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < ax) O *= x->shape[d];
        if (d > ax) inner *= x->shape[d];
    }
    if (O == 1) return vt_view_range(g, x, (int64_t)start * inner, x->ndim, shape); /* one contiguous range */
    vt_node *n = vt_new_node(g, &op_slice, &x, 1, vt_new_act(g, x->ndim, shape));
    if (!n) return NULL;
    *VT_OP_P(n, slice_p) = (slice_p){(int)O, x->shape[ax], start, len, (int)inner};
    return n->out;
}

/* ---- permute ---- */
/* The permutation is reduced to its canonical form: size-1 dims dropped and output dims that are adjacent in
 * the input merged, so e.g. NCHW -> NHWC becomes a batched 2-D transpose. Then either the last output dim is
 * contiguous in the input (row copies) or a 2-D blocked transpose runs between the input's contiguous dim and
 * the output's last dim, over every combination of the remaining dims. A permute may read a range of one input
 * axis only (vt_permute_slice): sizes are the range's, strides the whole input's, and the range's first element is
 * the base. */

typedef struct {
    int k;
    int64_t n[VT_MAXDIM], is[VT_MAXDIM]; /* output dim sizes and their input strides */
} pdesc;

/* size[a]: input dim a's extent as read (the whole dim, or a slice's length); ishape gives the strides. */
static void pdesc_make(int nd, const int *ishape, const int *size, const int *perm, pdesc *d) {
    int64_t st[VT_MAXDIM];
    st[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) st[i] = st[i + 1] * ishape[i + 1];
    d->k = 0;
    for (int i = 0; i < nd; i++) {
        const int a = perm[i];
        if (size[a] == 1) continue;
        if (d->k > 0 && d->is[d->k - 1] == st[a] * size[a]) {
            d->n[d->k - 1] *= size[a];
            d->is[d->k - 1] = st[a];
        } else {
            d->n[d->k] = size[a];
            d->is[d->k] = st[a];
            d->k++;
        }
    }
    if (d->k == 0) {
        d->k = 1;
        d->n[0] = 1;
        d->is[0] = 1;
    }
}

#define PT 64 /* transpose tile (32: GroupMixFormer-S's permutes 10% slower) */


/* Moves between the strided side s (input order, d's strides) and the dense side t (output order): t = s (mode
 * 0), t += s (mode 1) or s += t (mode 2, a sliced permute's backward: every element of s is reached once). */
static void permute_run(const pdesc *d, float *restrict s_, float *restrict t_, int mode) {
    const int k = d->k;
    int64_t os[VT_MAXDIM];
    os[k - 1] = 1;
    for (int i = k - 2; i >= 0; i--) os[i] = os[i + 1] * d->n[i + 1];
    const int64_t total = os[0] * d->n[0];
    int q = k - 1;
    for (int i = 0; i < k; i++)
        if (d->is[i] == 1) q = i;
    /* outer dims: all but the last (and but q when transposing), innermost first for decoding */
    int64_t on[VT_MAXDIM], ois[VT_MAXDIM], oos[VT_MAXDIM];
    int no = 0;
    for (int i = k - 2; i >= 0; i--) {
        if (i == q) continue;
        on[no] = d->n[i];
        ois[no] = d->is[i];
        oos[no] = os[i];
        no++;
    }
    if (q == k - 1) {
        const int64_t L = d->n[k - 1], R = total / L;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
        for (int64_t r = 0; r < R; r++) {
            int64_t t = r, si = 0, so = 0;
            for (int j = 0; j < no; j++) {
                const int64_t c = t % on[j];
                t /= on[j];
                si += c * ois[j];
                so += c * oos[j];
            }
            if (mode == 2)
                copy_or_add(s_ + si, t_ + so, L, 1);
            else
                copy_or_add(t_ + so, s_ + si, L, mode);
        }
        return;
    }
    const int64_t nq = d->n[q], nl = d->n[k - 1], isl = d->is[k - 1], osq = os[q];
    const int64_t tq = (nq + PT - 1) / PT, tl = (nl + PT - 1) / PT, O = total / (nq * nl);
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t r = 0; r < O * tq * tl; r++) {
        int64_t t = r / (tq * tl), si = 0, so = 0;
        for (int j = 0; j < no; j++) {
            const int64_t c = t % on[j];
            t /= on[j];
            si += c * ois[j];
            so += c * oos[j];
        }
        const int64_t q0 = r / tl % tq * PT, l0 = r % tl * PT;
        const int64_t q1 = q0 + PT < nq ? q0 + PT : nq, l1 = l0 + PT < nl ? l0 + PT : nl;
        int64_t a = q0;
#if defined(__AVX__)
        for (; a + 8 <= q1; a += 8) { /* 8×8 blocks in registers, the tile's last l < 8 columns below */
            int64_t l = l0;
            for (; l + 8 <= l1; l += 8) {
                if (mode == 2)
                    transpose8(t_ + so + a * osq + l, osq, s_ + si + a + l * isl, isl, 1);
                else
                    transpose8(s_ + si + a + l * isl, isl, t_ + so + a * osq + l, osq, mode);
            }
            for (int64_t b = a; b < a + 8 && l < l1; b++) {
                float *o = t_ + so + b * osq, *s = s_ + si + b;
                for (int64_t m = l; m < l1; m++) {
                    if (mode == 2)
                        s[m * isl] += o[m];
                    else
                        o[m] = mode ? o[m] + s[m * isl] : s[m * isl];
                }
            }
        }
#endif
        for (; a < q1; a++) {
            float *o = t_ + so + a * osq, *s = s_ + si + a;
            if (mode == 2)
                for (int64_t l = l0; l < l1; l++) s[l * isl] += o[l];
            else if (mode == 1)
                for (int64_t l = l0; l < l1; l++) o[l] += s[l * isl];
            else
                for (int64_t l = l0; l < l1; l++) o[l] = s[l * isl];
        }
    }
}

typedef struct {
    int ndim;
    int perm[VT_MAXDIM]; /* output dim i is input dim perm[i] */
    int axis, start;     /* input axis read over a range only (-1: none) and the range's first index */
} permute_p;

/* The node's forward description and the offset of its first input element. */
static int64_t permute_desc(const vt_node *n, pdesc *d) {
    const permute_p *p = VT_OP_P(n, permute_p);
    const vt_tensor *x = n->in[0];
    int size[VT_MAXDIM];
    int64_t base = p->axis >= 0 ? p->start : 0;
    for (int a = 0; a < p->ndim; a++) size[a] = x->shape[a];
    for (int i = 0; i < p->ndim; i++) size[p->perm[i]] = n->out->shape[i];
    for (int a = p->axis + 1; p->axis >= 0 && a < p->ndim; a++) base *= x->shape[a];
    pdesc_make(p->ndim, x->shape, size, p->perm, d);
    return base;
}

static void permute_fwd(vt_node *n) {
    pdesc d;
    const int64_t base = permute_desc(n, &d);
    permute_run(&d, n->in[0]->data + base, n->out->data, 0);
}

static void permute_bwd(vt_node *n) {
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const permute_p *p = VT_OP_P(n, permute_p);
    pdesc d;
    if (p->axis >= 0) { /* dy scattered into the range of dx */
        const int64_t base = permute_desc(n, &d);
        permute_run(&d, dx + base, n->out->grad, 2);
        return;
    }
    const int nd = p->ndim;
    int inv[VT_MAXDIM];
    for (int i = 0; i < nd; i++) inv[p->perm[i]] = i;
    pdesc_make(nd, n->out->shape, n->out->shape, inv, &d);
    permute_run(&d, n->out->grad, dx, n->grad_fresh & 1u ? 0 : 1);
}

static const vt_opdef op_permute = {"permute", permute_fwd, permute_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_permute_slice(vt_graph *g, vt_tensor *x, const int *perm, int axis, int start, int len) {
    if (vt_bad(g, 1, x)) return NULL;
    int seen[VT_MAXDIM] = {0}, shape[VT_MAXDIM], ok = x->ndim >= 1;
    for (int i = 0; ok && i < x->ndim; i++) {
        ok = perm[i] >= 0 && perm[i] < x->ndim && !seen[perm[i]];
        if (ok) {
            seen[perm[i]] = 1;
            shape[i] = x->shape[perm[i]];
        }
    }
    char sx[64], sp[64];
    if (!ok) {
        int len_ = 0;
        for (int i = 0; i < x->ndim && len_ < 60; i++)
            len_ += snprintf(sp + len_, sizeof sp - (size_t)len_, "%s%d", i ? ", " : "", perm[i]);
        return vt_fail(g, "permute", "(%s) is not a permutation of the %d dims of input %s", x->ndim ? sp : "",
                       x->ndim, vt_shape_str(x, sx, 64));
    }
    if (axis >= x->ndim || (axis >= 0 && (start < 0 || len < 1 || start > x->shape[axis] - len)))
        return vt_fail(g, "permute", "range [%d, %d) of axis %d outside input %s", start, start + len, axis,
                       vt_shape_str(x, sx, 64));
    for (int i = 0; axis >= 0 && i < x->ndim; i++)
        if (perm[i] == axis) shape[i] = len;
    vt_node *n = vt_new_node(g, &op_permute, &x, 1, vt_new_act(g, x->ndim, shape));
    if (!n) return NULL;
    permute_p *p = VT_OP_P(n, permute_p);
    p->ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) p->perm[i] = perm[i];
    p->axis = axis < 0 ? -1 : axis;
    p->start = axis < 0 ? 0 : start;
    if (axis < 0) n->grad_sets = 1u; /* backward reaches every element of x: it may write rather than add */
    return n->out;
}

vt_tensor *vt_permute(vt_graph *g, vt_tensor *x, const int *perm) { return vt_permute_slice(g, x, perm, -1, 0, 0); }

/* ---- attention heads ---- */
/* split: (B, N, Ctot)[..., off + h·dh + d] -> (B, H, N, dh); merge: (B, H, N, dh) -> (B, N, H·dh).
 * Both move rows of dh floats; row r of the (B, H, N, dh) side is (b, h, n). */
typedef struct {
    int B, H, N, dh;
    int Ct;  /* row stride of the token side */
    int off; /* channel offset on the token side */
} heads_p;

/* to_tokens: dst is the token side and src the heads side; otherwise the reverse. */
static void heads_move(const vt_node *n, const float *src, float *dst, int to_tokens, int acc) {
    const heads_p *p = VT_OP_P(n, heads_p);
    const int B = p->B, H = p->H, N = p->N, dh = p->dh, Ct = p->Ct, off = p->off;
    const int64_t R = (int64_t)B * H * N;
#pragma omp parallel for schedule(static) if (R * dh > PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const int64_t b = r / ((int64_t)H * N), h = r / N % H, t = r % N;
        const int64_t to = (b * N + t) * Ct + off + h * dh, ho = r * dh;
        if (to_tokens)
            copy_or_add(dst + to, src + ho, dh, acc);
        else
            copy_or_add(dst + ho, src + to, dh, acc);
    }
}

static void split_fwd(vt_node *n) { heads_move(n, n->in[0]->data, n->out->data, 0, 0); }
static void split_bwd(vt_node *n) {
    if (n->in[0]->grad) heads_move(n, n->out->grad, n->in[0]->grad, 1, 1);
}
static void merge_fwd(vt_node *n) { heads_move(n, n->in[0]->data, n->out->data, 1, 0); }
static void merge_bwd(vt_node *n) {
    if (n->in[0]->grad) heads_move(n, n->out->grad, n->in[0]->grad, 0, 1);
}

static const vt_opdef op_split = {"split_heads", split_fwd, split_bwd, VT_READS(0), NULL, VT_OP_OTHER};
static const vt_opdef op_merge = {"merge_heads", merge_fwd, merge_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_split_heads(vt_graph *g, vt_tensor *x, int off, int H, int dh) {
    if (vt_bad(g, 1, x)) return NULL;
    if (x->ndim != 3 || H < 1 || dh < 1 || off < 0 || off > x->shape[2] - H * dh) {
        char sx[64];
        return vt_fail(g, "split_heads", "input %s must be (B, N, C) with channels [%d, %d + %d·%d) inside C",
                       vt_shape_str(x, sx, 64), off, off, H, dh);
    }
    const int shape[4] = {x->shape[0], H, x->shape[1], dh};
    vt_node *n = vt_new_node(g, &op_split, &x, 1, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    *VT_OP_P(n, heads_p) = (heads_p){x->shape[0], H, x->shape[1], dh, x->shape[2], off};
    return n->out;
}

vt_tensor *vt_merge_heads(vt_graph *g, vt_tensor *x) {
    if (vt_bad(g, 1, x)) return NULL;
    if (x->ndim != 4) {
        char sx[64];
        return vt_fail(g, "merge_heads", "input %s must be (B, H, N, dh)", vt_shape_str(x, sx, 64));
    }
    const int B = x->shape[0], H = x->shape[1], N = x->shape[2], dh = x->shape[3];
    const int shape[3] = {B, N, H * dh};
    vt_node *n = vt_new_node(g, &op_merge, &x, 1, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    *VT_OP_P(n, heads_p) = (heads_p){B, H, N, dh, H * dh, 0};
    return n->out;
}

/* ---- prepend tokens: x (B, N, C), tok (1, k, C) -> (B, k + N, C) ---- */
typedef struct {
    int B, N, C, k;
} prepend_p;

static void prepend_fwd(vt_node *n) {
    const prepend_p *p = VT_OP_P(n, prepend_p);
    const int B = p->B, N = p->N, C = p->C, k = p->k;
    const int64_t kc = (int64_t)k * C, nc = (int64_t)N * C;
    const float *x = n->in[0]->data, *tok = n->in[1]->data;
    float *y = n->out->data;
#pragma omp parallel for schedule(static) if (n->out->numel > PAR_MIN)
    for (int b = 0; b < B; b++) {
        memcpy(y + b * (kc + nc), tok, sizeof(float) * (size_t)kc);
        memcpy(y + b * (kc + nc) + kc, x + b * nc, sizeof(float) * (size_t)nc);
    }
}

static void prepend_bwd(vt_node *n) {
    const prepend_p *p = VT_OP_P(n, prepend_p);
    const int B = p->B, N = p->N, C = p->C, k = p->k;
    const int64_t kc = (int64_t)k * C, nc = (int64_t)N * C;
    const float *dy = n->out->grad;
    float *dx = n->in[0]->grad, *dt = n->in[1]->grad;
    if (dx) {
#pragma omp parallel for schedule(static) if (n->out->numel > PAR_MIN)
        for (int b = 0; b < B; b++) copy_or_add(dx + b * nc, dy + b * (kc + nc) + kc, nc, 1);
    }
    if (dt) {
#pragma omp parallel for schedule(static) if (kc * B > PAR_MIN)
        for (int64_t i = 0; i < kc; i++) {
            float s = 0.0f;
            for (int b = 0; b < B; b++) s += dy[b * (kc + nc) + i];
            dt[i] += s;
        }
    }
}

static const vt_opdef op_prepend = {"prepend_tokens", prepend_fwd, prepend_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_prepend_tokens(vt_graph *g, vt_tensor *x, vt_tensor *tok) {
    if (vt_bad(g, 2, x, tok)) return NULL;
    if (x->ndim != 3 || tok->ndim != 3 || tok->shape[0] != 1 || tok->shape[2] != x->shape[2]) {
        char sx[64], st[64];
        return vt_fail(g, "prepend_tokens", "tokens %s (%s) must be (1, k, C) for input %s (B, N, C)",
                       vt_shape_str(tok, st, 64), tok->name, vt_shape_str(x, sx, 64));
    }
    const int k = tok->shape[1];
    const int shape[3] = {x->shape[0], k + x->shape[1], x->shape[2]};
    vt_tensor *in[2] = {x, tok};
    vt_node *n = vt_new_node(g, &op_prepend, in, 2, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    *VT_OP_P(n, prepend_p) = (prepend_p){x->shape[0], x->shape[1], x->shape[2], k};
    return n->out;
}
