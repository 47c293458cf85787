/* FLatten's focused kernel over the last dim, fused (one pass instead of add, ReLU, +1e-6, ·1/softplus, φ_p):
 *
 *   u = (ReLU(x + pe) + 1e-6) / softplus(scale)   (with a scale; pe (N, C) broadcast over the batch, optional)
 *   u = x                                          (without: vt_focus_pow; x > 0)
 *   y = u^p · ‖u‖₂ / ‖u^p‖₂ per row (u^p elementwise).
 * Row sums and the per-element arithmetic run in float (in double, on half the SIMD lanes, this op was 4.5% of a
 * FLatten-Swin-T training step on an AVX2 CPU). φ_p is homogeneous of degree 1 (φ(m·w) = m·φ(w), m > 0), its
 * Jacobian of degree 0: a row whose norms leave [1e-20, 1e30] (‖u^p‖² = Σ u^6 underflows, and flush-to-zero makes
 * it 0, once every u is below ~5e-7: a query with no positive channel under softplus(scale) > 2.08; or u^p
 * overflows) is computed again as m·φ(u/m) with m = max |u|, exact to float precision. A row of zeros (the
 * no-scale form) gives y = 0 and no gradient.
 * Softplus has β = 1 and threshold 20 (PyTorch). Backward (a = u^p, U = ‖u‖, A = ‖a‖, r = U/A, ga = Σ dy·a):
 *   du_j = p·u_j^(p−1)·r·(dy_j − ga·a_j/A²) + ga·u_j/(A·U);  dx = dpe = du·[x + pe > 0]/s (dpe summed over the
 *   batch);  dscale_j = −Σ_rows du_j·u_j·sigmoid(scale_j)/s_j.
 * It reads the inputs (kept in train graphs) and recomputes u and the row norms; it runs parallel over token
 * positions (each owns one pe row) with per-thread partial sums for dscale.
 * MAC convention: 0 MACs (elementwise/reduction op; only matmul-like products are counted, DESIGN.md §2). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "focus.h"
#include "vitc/ops.h"
#include "mathfn.h"

/* Forward scratch fws: is_c = 1/softplus(scale_c) (C). Backward scratch bws: is (C), sigmoid(scale) (C), per-thread
 * partial sums of d scale (vt_focus_dsc_floats). Inputs: x, then pe if any, then scale if any. */
typedef struct {
    int rows, C;
    int ldx, off;          /* x rows have ldx floats; the C channels start at off */
    int T;                 /* positions per batch item (pe rows; rows when no pe) */
    int has_pe, has_scale; /* inputs present besides x */
    int nt;                /* threads (per-thread partial sums of d scale in bws) */
    float p;               /* exponent */
} focus_p;

static double softplusd(double v) { return v > 20.0 ? v : log1p(exp(v)); }
static double sigmoidd(double v) { return v > 20.0 ? 1.0 : 1.0 / (1.0 + exp(-v)); } /* softplus' (threshold 20) */

/* Rows are processed in blocks of FB channels with the branches on p, the scale and pe hoisted out of the simd
 * loops (a per-element pow() call or branch kept these loops scalar, and focus took 10-14% of a FLatten-Swin step). */
#define FB 64

/* u over channels [c0, c0 + len) of row xr: x itself (no scale), or (ReLU(x + pe) + 1e-6)·is_c, times inv (1, or
 * 1/m for a rescaled row); v gets x + pe. */
static inline void u_block(const vt_focus_k *f, const float *restrict xr, const float *restrict per, int c0, int len,
                           float inv, float *restrict u, float *restrict v) {
    const float *restrict is = f->is;
    if (!is) {
#pragma omp simd
        for (int t = 0; t < len; t++) u[t] = v[t] = xr[c0 + t];
    } else if (per) {
#pragma omp simd
        for (int t = 0; t < len; t++) {
            v[t] = xr[c0 + t] + per[c0 + t];
            u[t] = (vt_relu_f(v[t]) + 1e-6f) * is[c0 + t];
        }
    } else {
#pragma omp simd
        for (int t = 0; t < len; t++) {
            v[t] = xr[c0 + t];
            u[t] = (vt_relu_f(v[t]) + 1e-6f) * is[c0 + t];
        }
    }
    if (inv != 1.0f)
#pragma omp simd
        for (int t = 0; t < len; t++) u[t] *= inv;
}

/* out = u^e elementwise (integer exponents 0-3 by multiplication, others by pow()). */
static inline void pow_block(const float *restrict u, float *restrict out, int len, float e) {
    if (e == 3.0f) {
#pragma omp simd
        for (int t = 0; t < len; t++) out[t] = u[t] * u[t] * u[t];
    } else if (e == 2.0f) {
#pragma omp simd
        for (int t = 0; t < len; t++) out[t] = u[t] * u[t];
    } else if (e == 1.0f) {
#pragma omp simd
        for (int t = 0; t < len; t++) out[t] = u[t];
    } else if (e == 0.0f) {
#pragma omp simd
        for (int t = 0; t < len; t++) out[t] = 1.0f;
    } else {
        for (int t = 0; t < len; t++) out[t] = powf(u[t], e);
    }
}

void vt_focus_consts(const float *scale, int C, float *is, float *sig) {
    for (int c = 0; c < C; c++) {
        is[c] = (float)(1.0 / softplusd(scale[c]));
        if (sig) sig[c] = (float)sigmoidd(scale[c]);
    }
}

/* Norms inside this range need no rescaling: no term of them lost to underflow that matters, none overflows. */
static inline int norms_safe(float u2, float a2) { return u2 >= 1e-20f && u2 <= 1e30f && a2 >= 1e-20f && a2 <= 1e30f; }

/* max |u| over the row: the rescaling factor m of a row whose norms are not safe (0 when it is 0 or not finite). */
static float row_max(const vt_focus_k *f, const float *xr, const float *per) {
    float u[FB], v[FB], m = 0.0f;
    for (int c0 = 0; c0 < f->C; c0 += FB) {
        const int len = f->C - c0 < FB ? f->C - c0 : FB;
        u_block(f, xr, per, c0, len, 1.0f, u, v);
        for (int t = 0; t < len; t++) m = fmaxf(m, fabsf(u[t]));
    }
    return m > 0.0f && isfinite(m) ? m : 0.0f;
}

/* The two norms of the row scaled by inv (1, or 1/m), a = (u·inv)^p written to yr (NULL: not kept) and, given gr,
 * ga = Σ gr·a (NULL: not summed). */
static void pow_norms(const vt_focus_k *f, const float *xr, const float *per, float inv, const float *gr, float *yr,
                      float *u2o, float *a2o, float *gao) {
    const int C = f->C;
    float u[FB], v[FB], ab[FB], u2 = 0.0f, a2 = 0.0f, ga = 0.0f;
    for (int c0 = 0; c0 < C; c0 += FB) {
        const int len = C - c0 < FB ? C - c0 : FB;
        float *restrict a = yr ? yr + c0 : ab;
        u_block(f, xr, per, c0, len, inv, u, v);
        pow_block(u, a, len, f->p);
#pragma omp simd reduction(+ : u2, a2)
        for (int t = 0; t < len; t++) {
            u2 += u[t] * u[t];
            a2 += a[t] * a[t];
        }
        if (gr)
#pragma omp simd reduction(+ : ga)
            for (int t = 0; t < len; t++) ga += gr[c0 + t] * a[t];
    }
    *u2o = u2;
    *a2o = a2;
    if (gao) *gao = ga;
}

/* The norms (and ga) of a row, rescaled by its largest |u| where they are not safe: m, the factor (1 when not). */
static float row_norms(const vt_focus_k *f, const float *xr, const float *per, const float *gr, float *yr, float *u2,
                       float *a2, float *ga) {
    pow_norms(f, xr, per, 1.0f, gr, yr, u2, a2, ga);
    const float m = norms_safe(*u2, *a2) ? 0.0f : row_max(f, xr, per);
    if (!(m > 0.0f)) return 1.0f;
    pow_norms(f, xr, per, 1.0f / m, gr, yr, u2, a2, ga);
    return m;
}

/* One pass writes u^p into yr and sums the two norms; the second scales yr in place (in L1), no recomputation. A
 * rescaled row's st[0] is negative (its backward recomputes the row). */
void vt_focus_row_fwd(const vt_focus_k *f, const float *xr, const float *per, float *yr, float *st) {
    const int C = f->C;
    float u2, a2;
    const float m = row_norms(f, xr, per, NULL, yr, &u2, &a2, NULL);
    const float ratio = a2 > 0.0f ? m * sqrtf(u2 / a2) : 0.0f;
#pragma omp simd
    for (int c = 0; c < C; c++) yr[c] *= ratio;
    if (st) {
        st[0] = m == 1.0f ? u2 : -1.0f;
        st[1] = a2;
    }
}

void vt_focus_row_bwd(const vt_focus_k *f, const float *xr, const float *per, const float *yr, const float *st,
                      const float *gr, float *dxr, float *dper, float *dsc) {
    const int C = f->C;
    const float p = f->p, *is = f->is, *sig = f->sig;
    float u[FB], a[FB], v[FB], u2 = 0.0f, a2 = 0.0f, ga = 0.0f, m = 1.0f, inv = 1.0f;
    const int saved = yr && st && st[0] >= 0.0f; /* the forward's row and norms, not rescaled */
    if (saved) { /* ga = Σ dy·a = Σ dy·y / ratio */
        u2 = st[0];
        a2 = st[1];
#pragma omp simd reduction(+ : ga)
        for (int c = 0; c < C; c++) ga += gr[c] * yr[c];
        ga = a2 > 0.0f && u2 > 0.0f ? ga * sqrtf(a2 / u2) : 0.0f;
    } else {
        m = row_norms(f, xr, per, gr, NULL, &u2, &a2, &ga);
        inv = 1.0f / m;
    }
    if (!(a2 > 0.0f) || !(u2 > 0.0f)) return;
    /* in the terms of the row scaled by 1/m: du is of degree 0 in u; the scale's gradient reads u itself, m·(u/m) */
    const float U = sqrtf(u2), A = sqrtf(a2), ratio = U / A, tt = ga / a2, s = ga / (A * U);
    for (int c0 = 0; c0 < C; c0 += FB) {
        const int len = C - c0 < FB ? C - c0 : FB;
        float du[FB], a1[FB];
        u_block(f, xr, per, c0, len, inv, u, v);
        pow_block(u, a, len, p);
        pow_block(u, a1, len, p - 1.0f);
#pragma omp simd
        for (int k = 0; k < len; k++) du[k] = p * a1[k] * ratio * (gr[c0 + k] - tt * a[k]) + s * u[k];
        if (!is) {
            if (dxr)
#pragma omp simd
                for (int k = 0; k < len; k++) dxr[c0 + k] += du[k];
            continue;
        }
        /* through ReLU and ·is: dv = du·is where x + pe > 0 */
        if (dxr)
#pragma omp simd
            for (int k = 0; k < len; k++) dxr[c0 + k] += v[k] > 0.0f ? du[k] * is[c0 + k] : 0.0f;
        if (dper)
#pragma omp simd
            for (int k = 0; k < len; k++) dper[c0 + k] += v[k] > 0.0f ? du[k] * is[c0 + k] : 0.0f;
        if (dsc)
#pragma omp simd
            for (int k = 0; k < len; k++) dsc[c0 + k] += -du[k] * (u[k] * m) * is[c0 + k] * sig[c0 + k];
    }
}

double *vt_focus_dsc_sums(float *w, int nt, int C) {
    memset(w, 0, sizeof(float) * (size_t)nt * C); /* the float blocks start empty */
    const uintptr_t a = (uintptr_t)(w + (size_t)nt * C);
    double *sums = (double *)((a + 7) & ~(uintptr_t)7); /* one float of slack in vt_focus_dsc_floats */
    memset(sums, 0, sizeof(double) * (size_t)nt * C);
    return sums;
}

void vt_focus_dsc_flush(float *blk, double *sum, int C) {
    for (int c = 0; c < C; c++) {
        sum[c] += blk[c];
        blk[c] = 0.0f;
    }
}

void vt_focus_dsc_add(const double *sums, int nt, int C, float *dsc) {
    for (int c = 0; c < C; c++) {
        double acc = 0.0;
        for (int k = 0; k < nt; k++) acc += sums[(size_t)k * C + c];
        dsc[c] += (float)acc;
    }
}

static void focus_fwd(vt_node *n) {
    const focus_p *fp = VT_OP_P(n, focus_p);
    const int rows = fp->rows, C = fp->C, T = fp->T;
    const float *x = n->in[0]->data, *pe = fp->has_pe ? n->in[1]->data : NULL;
    float *y = n->out->data, *is = n->fws ? n->fws->data : NULL;
    if (is) vt_focus_consts(n->in[fp->has_pe ? 2 : 1]->data, C, is, NULL);
    const vt_focus_k f = {C, fp->p, is, NULL};
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        vt_focus_row_fwd(&f, x + (size_t)r * fp->ldx + fp->off, pe ? pe + (size_t)(r % T) * C : NULL,
                         y + (size_t)r * C, NULL);
}

static void focus_bwd(vt_node *n) {
    const focus_p *fp = VT_OP_P(n, focus_p);
    const int rows = fp->rows, C = fp->C, T = fp->T, nt = fp->nt;
    vt_tensor *sc = fp->has_scale ? n->in[fp->has_pe ? 2 : 1] : NULL, *pet = fp->has_pe ? n->in[1] : NULL;
    const float *x = n->in[0]->data, *dy = n->out->grad, *pe = pet ? pet->data : NULL;
    float *dx = n->in[0]->grad, *dpe = pet ? pet->grad : NULL, *dsc = sc ? sc->grad : NULL;
    if (!dy || (!dx && !dpe && !dsc)) return;
    float *is = n->bws ? n->bws->data : NULL, *sig = is ? is + C : NULL, *part = is ? is + 2 * C : NULL;
    double *sums = NULL;
    if (sc) {
        vt_focus_consts(sc->data, C, is, sig);
        sums = vt_focus_dsc_sums(part, nt, C);
    }
    const vt_focus_k f = {C, fp->p, is, sig};
    const int B = rows / T;
    /* parallel over token positions t (each owns pe row t); batch items inside */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < T; t++) {
        const int th = omp_get_thread_num();
        float *pt = dsc ? part + (size_t)th * C : NULL;
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T + t;
            vt_focus_row_bwd(&f, x + r * fp->ldx + fp->off, pe ? pe + (size_t)t * C : NULL, NULL, NULL, dy + r * C,
                             dx ? dx + r * fp->ldx + fp->off : NULL, dpe ? dpe + (size_t)t * C : NULL, pt);
        }
        if (pt) vt_focus_dsc_flush(pt, sums + (size_t)th * C, C); /* a position's B rows in floats */
    }
    if (dsc) vt_focus_dsc_add(sums, nt, C, dsc);
}

static const vt_opdef op_focus = {"focus", focus_fwd, focus_bwd, VT_READS(VT_READS_ALL_IN), NULL, VT_OP_OTHER};

vt_tensor *vt_focus_ex(vt_graph *g, vt_tensor *x, int off, int C, vt_tensor *pe, vt_tensor *scale, float p) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64], sp[64] = "none", ss[64] = "none";
    if (pe) vt_shape_str(pe, sp, 64);
    if (scale) vt_shape_str(scale, ss, 64);
    const int L = x->ndim >= 1 ? x->shape[x->ndim - 1] : 0, T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    if (x->ndim < 1 || !(p > 0.0f) || C <= 0 || off < 0 || off > L - C || (pe && !scale) ||
        (pe && (x->ndim < 2 || pe->numel != (int64_t)T * C || pe->shape[pe->ndim - 1] != C)) ||
        (scale && scale->numel != C))
        return vt_fail(g, "focus", "input %s (..., N, L) with channels [%d, %d + %d) inside L, positional encoding %s "
                       "(N·C values) and scale %s (C values; required with a positional encoding); p %g must be > 0",
                       vt_shape_str(x, sx, 64), off, off, C, sp, ss, (double)p);
    vt_tensor *in[3] = {x, NULL, NULL};
    int nin = 1;
    if (pe) in[nin++] = pe;
    if (scale) in[nin++] = scale;
    int shape[VT_MAXDIM];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = C;
    vt_node *n = vt_new_node(g, &op_focus, in, nin, vt_new_act(g, x->ndim, shape));
    if (!n) return NULL;
    const int nt = g->threads;
    const int rows = (int)(x->numel / L);
    /* without pe every row is its own position (parallel backward) */
    *VT_OP_P(n, focus_p) = (focus_p){rows, C, L, off, pe ? T : rows, pe != NULL, scale != NULL, nt, p};
    if (scale) {
        vt_node_work(n, 0, C);
        if (n->out->requires_grad) vt_node_work(n, 1, 2LL * C + vt_focus_dsc_floats(nt, C));
    }
    return n->out;
}

vt_tensor *vt_focus(vt_graph *g, vt_tensor *x, vt_tensor *pe, vt_tensor *scale, float p) {
    if (vt_bad(g, 1, x)) return NULL;
    const int C = x->ndim >= 1 ? x->shape[x->ndim - 1] : 0;
    return vt_focus_ex(g, x, 0, C, pe, scale, p);
}

vt_tensor *vt_focus_pow(vt_graph *g, vt_tensor *x, float p) { return vt_focus(g, x, NULL, NULL, p); }
