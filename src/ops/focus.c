/* FLatten's focused kernel over the last dim, fused (one pass instead of add, ReLU, +1e-6, ·1/softplus, φ_p):
 *
 *   u = (ReLU(x + pe) + 1e-6) / softplus(scale)   (with a scale; pe (N, C) broadcast over the batch, optional)
 *   u = x                                          (without: vt_focus_pow; x > 0)
 *   y = u^p · ‖u‖₂ / ‖u^p‖₂ per row (u^p elementwise).
 * Row sums and the per-element arithmetic run in double. A row whose ‖x^p‖ is 0 gives y = 0 (and no gradient).
 * Softplus has β = 1 and threshold 20 (PyTorch). Backward (a = u^p, U = ‖u‖, A = ‖a‖, r = U/A, ga = Σ dy·a):
 *   du_j = p·u_j^(p−1)·r·(dy_j − ga·a_j/A²) + ga·u_j/(A·U);  dx = dpe = du·[x + pe > 0]/s (dpe summed over the
 *   batch);  dscale_j = −Σ_rows du_j·u_j·sigmoid(scale_j)/s_j.
 * It reads the inputs (kept in train graphs) and recomputes u and the row norms; it runs parallel over token
 * positions (each owns one pe row) with per-thread partial sums for dscale.
 * MAC convention: 0 MACs (elementwise/reduction op; only matmul-like products are counted, DESIGN.md §2). */
#include <math.h>
#include <omp.h>

#include "vitc/ops.h"

/* Forward scratch fws: is_c = 1/softplus(scale_c) (C). Backward scratch bws: is (C), sigmoid(scale) (C), per-thread
 * partial sums of d scale (threads·C). Inputs: x, then pe if any, then scale if any. */
typedef struct {
    int rows, C;
    int T;                 /* positions per batch item (pe rows; rows when no pe) */
    int has_pe, has_scale; /* inputs present besides x */
    int nt;                /* threads (per-thread partial sums of d scale in bws) */
    float p;               /* exponent */
} focus_p;

static double powd(double v, double p) {
    if (p == 1.0) return v;
    if (p == 2.0) return v * v;
    if (p == 3.0) return v * v * v;
    return pow(v, p);
}

static double softplusd(double v) { return v > 20.0 ? v : log1p(exp(v)); }
static double sigmoidd(double v) { return v > 20.0 ? 1.0 : 1.0 / (1.0 + exp(-v)); } /* softplus' (threshold 20) */

/* u_c of row r: x itself (no scale), or (ReLU(x + pe) + 1e-6)·is_c. */
static inline double u_of(const focus_p *fp, const float *xr, const float *per, const float *is, int c) {
    if (!fp->has_scale) return xr[c];
    const double v = (double)xr[c] + (per ? per[c] : 0.0);
    return ((v > 0.0 ? v : 0.0) + 1e-6) * is[c];
}

static void inv_softplus(const vt_node *n, float *is) {
    const focus_p *fp = VT_OP_P(n, focus_p);
    const int C = fp->C;
    if (fp->has_scale)
        for (int c = 0; c < C; c++) is[c] = (float)(1.0 / softplusd(n->in[fp->has_pe ? 2 : 1]->data[c]));
}

static void focus_fwd(vt_node *n) {
    const focus_p *fp = VT_OP_P(n, focus_p);
    const int rows = fp->rows, C = fp->C, T = fp->T;
    const double p = fp->p;
    const float *x = n->in[0]->data, *pe = fp->has_pe ? n->in[1]->data : NULL;
    float *y = n->out->data, *is = n->fws ? n->fws->data : NULL;
    inv_softplus(n, is);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C, *per = pe ? pe + (size_t)(r % T) * C : NULL;
        float *yr = y + (size_t)r * C;
        double u2 = 0.0, a2 = 0.0;
        for (int c = 0; c < C; c++) {
            const double u = u_of(fp, xr, per, is, c), a = powd(u, p);
            u2 += u * u;
            a2 += a * a;
        }
        const double ratio = a2 > 0.0 ? sqrt(u2 / a2) : 0.0;
        for (int c = 0; c < C; c++) yr[c] = (float)(powd(u_of(fp, xr, per, is, c), p) * ratio);
    }
}

static void focus_bwd(vt_node *n) {
    const focus_p *fp = VT_OP_P(n, focus_p);
    const int rows = fp->rows, C = fp->C, T = fp->T, nt = fp->nt;
    const double p = fp->p;
    vt_tensor *sc = fp->has_scale ? n->in[fp->has_pe ? 2 : 1] : NULL, *pet = fp->has_pe ? n->in[1] : NULL;
    const float *x = n->in[0]->data, *dy = n->out->grad, *pe = pet ? pet->data : NULL;
    float *dx = n->in[0]->grad, *dpe = pet ? pet->grad : NULL, *dsc = sc ? sc->grad : NULL;
    if (!dy || (!dx && !dpe && !dsc)) return;
    float *is = n->bws ? n->bws->data : NULL, *sig = is ? is + C : NULL, *part = is ? is + 2 * C : NULL;
    inv_softplus(n, is);
    if (sc) {
        for (int c = 0; c < C; c++) sig[c] = (float)sigmoidd(sc->data[c]);
        for (int64_t i = 0; i < (int64_t)nt * C; i++) part[i] = 0.0f;
    }
    const int B = rows / T;
    /* parallel over token positions t (each owns pe row t); batch items inside */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < T; t++) {
        float *pt = part ? part + (size_t)omp_get_thread_num() * C : NULL;
        for (int b = 0; b < B; b++) {
            const int r = b * T + t;
            const float *xr = x + (size_t)r * C, *gr = dy + (size_t)r * C, *per = pe ? pe + (size_t)t * C : NULL;
            double u2 = 0.0, a2 = 0.0, ga = 0.0;
            for (int c = 0; c < C; c++) {
                const double u = u_of(fp, xr, per, is, c), a = powd(u, p);
                u2 += u * u;
                a2 += a * a;
                ga += gr[c] * a;
            }
            if (!(a2 > 0.0) || !(u2 > 0.0)) continue;
            const double U = sqrt(u2), A = sqrt(a2), ratio = U / A, tt = ga / a2, s = ga / (A * U);
            for (int c = 0; c < C; c++) {
                const double u = u_of(fp, xr, per, is, c);
                const double du = p * powd(u, p - 1.0) * ratio * (gr[c] - tt * powd(u, p)) + s * u;
                if (!sc) {
                    if (dx) dx[(size_t)r * C + c] += (float)du;
                    continue;
                }
                const double v = (double)xr[c] + (per ? per[c] : 0.0);
                if (v > 0.0) {
                    const float dv = (float)(du * is[c]);
                    if (dx) dx[(size_t)r * C + c] += dv;
                    if (dpe) dpe[(size_t)t * C + c] += dv;
                }
                if (dsc) pt[c] += (float)(-du * u * is[c] * sig[c]);
            }
        }
    }
    if (dsc)
        for (int c = 0; c < C; c++) {
            double acc = 0.0;
            for (int k = 0; k < nt; k++) acc += part[(size_t)k * C + c];
            dsc[c] += (float)acc;
        }
}

static const vt_opdef op_focus = {"focus", focus_fwd, focus_bwd, VT_READS(VT_READS_ALL_IN)};

vt_tensor *vt_focus(vt_graph *g, vt_tensor *x, vt_tensor *pe, vt_tensor *scale, float p) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64], sp[64] = "none", ss[64] = "none";
    if (pe) vt_shape_str(pe, sp, 64);
    if (scale) vt_shape_str(scale, ss, 64);
    const int C = x->ndim >= 1 ? x->shape[x->ndim - 1] : 0, T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    if (x->ndim < 1 || !(p > 0.0f) || C <= 0 || (pe && !scale) || (pe && (x->ndim < 2 || pe->numel != (int64_t)T * C ||
        pe->shape[pe->ndim - 1] != C)) || (scale && scale->numel != C))
        return vt_fail(g, "focus", "input %s (..., N, C) with positional encoding %s (N·C values) and scale %s (C "
                       "values; required with a positional encoding); p %g must be > 0", vt_shape_str(x, sx, 64), sp,
                       ss, (double)p);
    vt_tensor *in[3] = {x, NULL, NULL};
    int nin = 1;
    if (pe) in[nin++] = pe;
    if (scale) in[nin++] = scale;
    vt_node *n = vt_new_node(g, &op_focus, in, nin, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    const int nt = omp_get_max_threads();
    const int rows = (int)(x->numel / C);
    /* without pe every row is its own position (parallel backward) */
    *VT_OP_P(n, focus_p) = (focus_p){rows, C, pe ? T : rows, pe != NULL, scale != NULL, nt, p};
    if (scale) {
        vt_node_work(n, 0, C);
        if (n->out->requires_grad) vt_node_work(n, 1, (int64_t)(2 + nt) * C);
    }
    return n->out;
}

vt_tensor *vt_focus_pow(vt_graph *g, vt_tensor *x, float p) { return vt_focus(g, x, NULL, NULL, p); }
