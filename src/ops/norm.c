/* LayerNorm (over the last dim, or over the channels of channel-first maps) and BatchNorm (any channel axis), forward
 * and backward.
 *
 * MAC convention: normalisation layers count 0 MACs (only matmul-like products are counted; see
 * DESIGN.md §2). fvcore-style counters would add a few flops per element here; we do not.
 *
 * LayerNorm sums each row, and its backward each row chunk's dw / db partials, in float vector lanes (ln_row,
 * ln_row_bwd); the other reductions accumulate in double. Reductions across rows/positions are split into a fixed
 * number of chunks (independent of the thread count) whose partial sums are added in a fixed order, so results are
 * bit-identical for any OMP_NUM_THREADS. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "bnstats.h"
#include "mathfn.h"
#include "resfuse.h"
#include "vitc/ops.h"

#define NCHUNK 64 /* max chunks of a cross-row reduction */

static int chunks(int64_t rows) { return rows < NCHUNK ? (int)rows : NCHUNK; }

/* Chunks of a BatchNorm's per-channel sums over x (outer, C, inner), fixed by the shape alone (the same sums on any
 * number of threads): one per plane row (inner > 1, at most NCHUNK); over channels-last rows (inner = 1) one per
 * ROW_CHUNK rows up to NCHUNK chunks (so below NCHUNK·ROW_CHUNK rows, chunks of ROW_CHUNK or one fewer rows). One row
 * per chunk there made a BatchNorm over few rows of many channels pay more for its partial sums (2·chunks·C doubles,
 * added on one thread) than for its rows: a (49, 2 × 1024) batchnorm_sum, Next-ViT-S hMHSA + cFFN's last stage at
 * batch 1, 717-721 -> 148 us forward and backward; a (196, 768) batchnorm 556 -> 308-311 us (best of 300 calls, 2
 * threads, AMD EPYC Zen 4, 2026-12-06; docs/benchmarks.md). */
#define ROW_CHUNK 16
static int stat_chunks(int64_t outer, int inner) {
    if (inner > 1) return chunks(outer);
    return outer < (int64_t)NCHUNK * ROW_CHUNK ? (int)((outer + ROW_CHUNK - 1) / ROW_CHUNK) : NCHUNK;
}

/* f(const act, ...) for act one of the activations the norms may apply after themselves (or none, -1), as a
 * constant: each kernel's loop vectorises (a switch on act inside the loop kept it scalar). */
#define ACT_CONST(f, act, ...)                                                                                         \
    do {                                                                                                               \
        switch (act) {                                                                                                 \
        case VT_RELU: f(VT_RELU, __VA_ARGS__); break;                                                                  \
        case VT_RELU6: f(VT_RELU6, __VA_ARGS__); break;                                                                \
        case VT_HARDSWISH: f(VT_HARDSWISH, __VA_ARGS__); break;                                                        \
        default: f(-1, __VA_ARGS__); break;                                                                            \
        }                                                                                                              \
    } while (0)

/* ================================ LayerNorm ================================ */
/* save[0] mean (R), save[1] rstd (R); bws: 2·chunks·C floats (dw, db partials) when affine. */
typedef struct {
    int R, C;
    int nch;    /* chunks of the dw/db reduction */
    int iw, ib; /* indices of w and b in in[] (-1: none) */
    float eps;
} ln_p;

/* One row's LayerNorm in double throughout (the statistics and the outputs; m and rs rounded to float for backward):
 * builds without vector code, and finite rows whose float sums would overflow. */
static void ln_row_double(const float *xr, float *yr, const float *w, const float *b, int C, float eps, float *mo,
                          float *ro) {
    double s = 0.0, v = 0.0;
    for (int i = 0; i < C; i++) s += xr[i];
    const double m = s / C;
    for (int i = 0; i < C; i++) v += ((double)xr[i] - m) * ((double)xr[i] - m);
    const double rs = 1.0 / sqrt(v / C + eps);
    for (int i = 0; i < C; i++) yr[i] = (float)(((double)xr[i] - m) * rs * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f));
    *mo = (float)m;
    *ro = (float)rs;
}

/* One row's LayerNorm: m = x₀ + Σ(x − x₀) / C, then the deviations d = x − m and rs = (Σd² / C + eps)^(−1/2),
 * y = d·rs [·w] [+ b]; sums in float (as PyTorch's CPU kernel), in vector lanes. Summing x − x₀ makes a constant row's
 * mean exact and its output the bias (a mean off by its rounding error δ gave −δ/√eps: 0.015 for 768 values of 77.7,
 * eps 1e-6), and m's error small against the spread of the row rather than its offset.
 * The statistics in double before ran 1.5-2.5x slower (forward alone, 2 threads, Intel Xeon Ice Lake, 2026-11-29:
 * 50176 rows of 40 1.46x, 64 1.71x, 12544 of 80 2.53x, of 128 1.96x, 3152 of 192 2.55x, 3136 of 320 2.02x, of 1024
 * 1.60x; outputs within 8e-6 of theirs). Finite rows whose float sums overflow (|x| near 1e37, deviations beyond
 * 1e18) run ln_row_double instead of giving Inf / NaN or, with rs = 0, the bias. */
static inline void ln_row(const float *xr, float *yr, const float *w, const float *b, int C, float eps, float *mo,
                          float *ro) {
#ifdef VT_VW
    const int C1 = C / VT_VW * VT_VW, t = C - C1;
    const vt_vf kv = VT_VPS(set1)(xr[0]); /* the sum of x − x[0]: a constant row's mean exact, its deviations 0 */
    vt_vf s0 = VT_VPS(setzero)(), s1 = VT_VPS(setzero)();
    int i = 0;
    for (; i + 2 * VT_VW <= C1; i += 2 * VT_VW) {
        s0 = VT_VPS(add)(s0, VT_VPS(sub)(VT_VPS(loadu)(xr + i), kv));
        s1 = VT_VPS(add)(s1, VT_VPS(sub)(VT_VPS(loadu)(xr + i + VT_VW), kv));
    }
    if (i < C1) s0 = VT_VPS(add)(s0, VT_VPS(sub)(VT_VPS(loadu)(xr + i), kv));
    if (t) s1 = VT_VPS(add)(s1, vt_vfirst(VT_VPS(sub)(vt_vload_n(xr + C1, t), kv), t));
    const float m = xr[0] + vt_vhreduce(VT_VPS(add)(s0, s1), 0) / (float)C;
    const vt_vf mv = VT_VPS(set1)(m);
    vt_vf v0 = VT_VPS(setzero)(), v1 = VT_VPS(setzero)();
    for (i = 0; i + 2 * VT_VW <= C1; i += 2 * VT_VW) {
        const vt_vf d0 = VT_VPS(sub)(VT_VPS(loadu)(xr + i), mv), d1 = VT_VPS(sub)(VT_VPS(loadu)(xr + i + VT_VW), mv);
        v0 = VT_VPS(fmadd)(d0, d0, v0);
        v1 = VT_VPS(fmadd)(d1, d1, v1);
    }
    if (i < C1) {
        const vt_vf d = VT_VPS(sub)(VT_VPS(loadu)(xr + i), mv);
        v0 = VT_VPS(fmadd)(d, d, v0);
    }
    if (t) {
        const vt_vf d = vt_vfirst(VT_VPS(sub)(vt_vload_n(xr + C1, t), mv), t);
        v1 = VT_VPS(fmadd)(d, d, v1);
    }
    const float rs = 1.0f / sqrtf(vt_vhreduce(VT_VPS(add)(v0, v1), 0) / (float)C + eps);
    if (!isfinite(m) || !(rs >= FLT_MIN)) { /* Σx or Σd² overflowed float (or NaN / Inf inputs): in double */
        ln_row_double(xr, yr, w, b, C, eps, mo, ro);
        return;
    }
    const vt_vf rv = VT_VPS(set1)(rs), one = VT_VPS(set1)(1.0f), zero = VT_VPS(setzero)();
    for (i = 0; i < C1; i += VT_VW) {
        const vt_vf xh = VT_VPS(mul)(VT_VPS(sub)(VT_VPS(loadu)(xr + i), mv), rv);
        VT_VPS(storeu)(yr + i, VT_VPS(fmadd)(xh, w ? VT_VPS(loadu)(w + i) : one, b ? VT_VPS(loadu)(b + i) : zero));
    }
    if (t) {
        const vt_vf xh = VT_VPS(mul)(VT_VPS(sub)(vt_vload_n(xr + C1, t), mv), rv);
        vt_vstore_n(yr + C1, VT_VPS(fmadd)(xh, w ? vt_vload_n(w + C1, t) : one, b ? vt_vload_n(b + C1, t) : zero), t);
    }
    *mo = m;
    *ro = rs;
#else /* one sequential sum would lose more than the vector lanes' partial sums: in double here */
    ln_row_double(xr, yr, w, b, C, eps, mo, ro);
#endif
}

static void ln_fwd(vt_node *n) {
    const ln_p *p = VT_OP_P(n, ln_p);
    const int R = p->R, C = p->C;
    const float eps = p->eps, *x = n->in[0]->data;
    const float *w = p->iw >= 0 ? n->in[p->iw]->data : NULL, *b = p->ib >= 0 ? n->in[p->ib]->data : NULL;
    float *y = n->out->data, *mean = n->save[0]->data, *rstd = n->save[1]->data;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) ln_row(x + (size_t)r * C, y + (size_t)r * C, w, b, C, eps, mean + r, rstd + r);
}

/* One row's backward (ln_row's saved m, rs): with g = dy [·w] and x̂ = (x − m)·rs, dx = rs·(g − Σg / C − x̂·Σg·x̂ / C)
 * (written, or added when acc), and the row's dy·x̂ and dy added to pw and pb (the chunk's partials of dw, db, when
 * pw). Sums in float vector lanes, as the forward's; the chunks' partials are added in double. The double sums this
 * replaced ran the op's backward 1.2-1.4x slower (node time, 60 alternated runs, 2 threads, Intel Xeon Ice Lake,
 * 2026-11-29: 50176 rows of 40 and 64 channels 1.32x / 1.37x, 12544 of 128 1.19x, 3136 of 320 1.23x, 784 of 512
 * 1.32x). */
static inline void ln_row_bwd(const float *xr, const float *dyr, const float *w, float m, float rs, float *dxr,
                              int acc, float *pw, float *pb, int C) {
#ifdef VT_VW
    const int C1 = C / VT_VW * VT_VW, t = C - C1;
    const vt_vf mv = VT_VPS(set1)(m), rv = VT_VPS(set1)(rs);
    vt_vf sg = VT_VPS(setzero)(), sgx = VT_VPS(setzero)();
    for (int i = 0; i < C; i += VT_VW) {
        const int k = C - i < VT_VW ? t : 0; /* lanes of a partial last vector; 0: a whole one */
        const vt_vf xv = k ? vt_vload_n(xr + i, k) : VT_VPS(loadu)(xr + i);
        const vt_vf dv = k ? vt_vload_n(dyr + i, k) : VT_VPS(loadu)(dyr + i);
        const vt_vf xh = VT_VPS(mul)(VT_VPS(sub)(xv, mv), rv);
        const vt_vf g = w ? VT_VPS(mul)(dv, k ? vt_vload_n(w + i, k) : VT_VPS(loadu)(w + i)) : dv;
        sg = VT_VPS(add)(sg, g); /* zero lanes past the row: g = 0 there */
        sgx = VT_VPS(fmadd)(g, xh, sgx);
        if (pw) {
            const vt_vf a = VT_VPS(fmadd)(dv, xh, k ? vt_vload_n(pw + i, k) : VT_VPS(loadu)(pw + i));
            const vt_vf b = VT_VPS(add)(dv, k ? vt_vload_n(pb + i, k) : VT_VPS(loadu)(pb + i));
            if (k) vt_vstore_n(pw + i, a, k), vt_vstore_n(pb + i, b, k);
            else VT_VPS(storeu)(pw + i, a), VT_VPS(storeu)(pb + i, b);
        }
    }
    if (!dxr) return;
    const vt_vf av = VT_VPS(set1)(vt_vhreduce(sg, 0) / (float)C), cv = VT_VPS(set1)(vt_vhreduce(sgx, 0) / (float)C);
    for (int i = 0; i < C; i += VT_VW) {
        const int k = C - i < VT_VW ? t : 0;
        const vt_vf xv = k ? vt_vload_n(xr + i, k) : VT_VPS(loadu)(xr + i);
        const vt_vf dv = k ? vt_vload_n(dyr + i, k) : VT_VPS(loadu)(dyr + i);
        const vt_vf xh = VT_VPS(mul)(VT_VPS(sub)(xv, mv), rv);
        const vt_vf g = w ? VT_VPS(mul)(dv, k ? vt_vload_n(w + i, k) : VT_VPS(loadu)(w + i)) : dv;
        vt_vf d = VT_VPS(mul)(rv, VT_VPS(fnmadd)(xh, cv, VT_VPS(sub)(g, av)));
        if (acc) d = VT_VPS(add)(d, k ? vt_vload_n(dxr + i, k) : VT_VPS(loadu)(dxr + i));
        if (k) vt_vstore_n(dxr + i, d, k);
        else VT_VPS(storeu)(dxr + i, d);
    }
#else
    double sg = 0.0, sgx = 0.0;
    for (int i = 0; i < C; i++) {
        const float xh = (xr[i] - m) * rs, g = w ? dyr[i] * w[i] : dyr[i];
        sg += g;
        sgx += (double)g * xh;
        if (pw) {
            pw[i] += dyr[i] * xh;
            pb[i] += dyr[i];
        }
    }
    if (!dxr) return;
    const float a = (float)(sg / C), c = (float)(sgx / C);
    for (int i = 0; i < C; i++) {
        const float xh = (xr[i] - m) * rs, g = w ? dyr[i] * w[i] : dyr[i];
        dxr[i] = (acc ? dxr[i] : 0.0f) + rs * (g - a - xh * c);
    }
#endif
}

static void ln_bwd(vt_node *n) {
    const ln_p *p = VT_OP_P(n, ln_p);
    const int R = p->R, C = p->C, nch = p->nch;
    const float *x = n->in[0]->data, *dy = n->out->grad, *mean = n->save[0]->data, *rstd = n->save[1]->data;
    const vt_tensor *W = p->iw >= 0 ? n->in[p->iw] : NULL, *Bt = p->ib >= 0 ? n->in[p->ib] : NULL;
    const float *w = W ? W->data : NULL;
    float *dx = n->in[0]->grad, *dw = W ? W->grad : NULL, *db = Bt ? Bt->grad : NULL;
    if (!dy || !(dx || dw || db)) return;
    const int acc = !(n->grad_fresh & 1u); /* add to dx rather than write it (see vt_node.grad_fresh) */
    float *part = (dw || db) ? n->bws->data : NULL; /* [chunk][2][C]: dw then db partials */
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nch; k++) {
        const int r0 = (int)((int64_t)R * k / nch), r1 = (int)((int64_t)R * (k + 1) / nch);
        float *pw = part ? part + (size_t)2 * k * C : NULL, *pb = pw ? pw + C : NULL;
        if (pw) memset(pw, 0, sizeof(float) * 2 * (size_t)C);
        for (int r = r0; r < r1; r++)
            ln_row_bwd(x + (size_t)r * C, dy + (size_t)r * C, w, mean[r], rstd[r], dx ? dx + (size_t)r * C : NULL, acc,
                       pw, pb, C);
    }
    if (part) { /* the chunks' partials in a fixed order, in double */
#pragma omp parallel for schedule(static)
        for (int i = 0; i < C; i++) {
            double sw = 0.0, sb = 0.0;
            for (int k = 0; k < nch; k++) {
                sw += part[(size_t)2 * k * C + i];
                sb += part[(size_t)2 * k * C + C + i];
            }
            if (dw) dw[i] += (float)sw;
            if (db) db[i] += (float)sb;
        }
    }
}

static const vt_opdef op_layernorm = {"layernorm", ln_fwd, ln_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)), NULL,
                                     VT_OP_OTHER};

static int is_vec(const vt_tensor *t, int C) { return !t || (t->ndim == 1 && t->shape[0] == C); }

vt_tensor *vt_layernorm(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, float eps) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64], sw[64], sb[64];
    const int C = x->ndim > 0 ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 1 || !is_vec(w, C) || !is_vec(b, C))
        return vt_fail(g, "layernorm", "input %s, weight %s%s%s, bias %s%s%s: affine params must be (%d)",
                       vt_shape_str(x, sx, 64), w ? vt_shape_str(w, sw, 64) : "none", w ? " " : "", w ? w->name : "",
                       b ? vt_shape_str(b, sb, 64) : "none", b ? " " : "", b ? b->name : "", C);
    if (!(eps >= 0.0f)) return vt_fail(g, "layernorm", "eps %g must be >= 0", (double)eps);
    vt_tensor *in[3] = {x, NULL, NULL};
    int nin = 1, iw = -1, ib = -1;
    if (w) iw = nin, in[nin++] = w;
    if (b) ib = nin, in[nin++] = b;
    vt_node *n = vt_new_node(g, &op_layernorm, in, nin, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    const int64_t R = x->numel / C;
    const int nch = chunks(R);
    *VT_OP_P(n, ln_p) = (ln_p){(int)R, C, nch, iw, ib, eps};
    vt_node_save(n, 0, R);
    vt_node_save(n, 1, R);
    n->grad_sets = 1u; /* x */
    if (w || b) vt_node_work(n, 1, (int64_t)2 * nch * C);
    return n->out;
}

/* ============================ LayerNorm over the channels of channel-first maps ============================ */
/* x viewed as (outer, C, inner): each position (o, i) normalised over its C channels (a LayerNorm on the tokens of a
 * (B, C, H, W) map without transposing it), then act. Tiles of LT positions of one o: the C channel rows of a tile
 * stay in L1 and every loop runs along positions (vector lanes), where the row kernel on tokens of 8 to 32 channels
 * ran a vector of one row at a time (GroupMixFormer's non-attention branch: 50176 rows of 8 channels, 0.47 ms per
 * node in inference). save[0] mean, save[1] rstd (outer·inner); bws: each chunk's dw, db partials (2·C doubles). */
typedef struct {
    int outer, C, inner, tiles, nch;
    int iw, ib, act;
    float eps;
} lncf_p;

#define LT 64 /* positions per tile */

/* Tile u's first position and count (*pos, *ni); returns the offset of its data from x. */
static int64_t lncf_tile(const lncf_p *p, int64_t u, int *ni, int64_t *pos) {
    const int64_t o = u / p->tiles, i0 = u % p->tiles * LT;
    *ni = p->inner - i0 < LT ? (int)(p->inner - i0) : LT;
    *pos = o * p->inner + i0;
    return o * p->C * p->inner + i0;
}

/* One position's statistics in double (x: its first channel, C floats inner apart): sums of floats that overflow
 * (|x| near 1e37) or NaN / Inf inputs, as ln_row_double. */
static void lncf_double(const float *x, int64_t inner, int C, float eps, float *mo, float *ro) {
    double s = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) s += x[c * inner];
    const double m = s / C;
    for (int c = 0; c < C; c++) v += ((double)x[c * inner] - m) * ((double)x[c * inner] - m);
    *mo = (float)m;
    *ro = (float)(1.0 / sqrt(v / C + eps));
}

/* Forward of one tile (act a constant where inlined): m, rs over the channels (sums in float per position of x − x₀,
 * as the row kernel's), then y = act((x − m)·rs·w + b). */
static inline __attribute__((always_inline)) void lncf_fwd_tile(const int act, const lncf_p *p, const float *x,
                                                                const float *w, const float *b, float *y, float *m,
                                                                float *rs, int ni) {
    const int C = p->C;
    const int64_t in = p->inner;
    float s[LT] = {0}, v[LT] = {0};
    for (int c = 1; c < C; c++) { /* the sum of x − x₀ (each position's first channel), as ln_row's */
        const float *xr = x + c * in;
#pragma omp simd
        for (int i = 0; i < ni; i++) s[i] += xr[i] - x[i];
    }
#pragma omp simd
    for (int i = 0; i < ni; i++) m[i] = x[i] + s[i] / (float)C;
    for (int c = 0; c < C; c++) {
        const float *xr = x + c * in;
#pragma omp simd
        for (int i = 0; i < ni; i++) v[i] += (xr[i] - m[i]) * (xr[i] - m[i]);
    }
#pragma omp simd
    for (int i = 0; i < ni; i++) rs[i] = 1.0f / sqrtf(v[i] / (float)C + p->eps);
    for (int i = 0; i < ni; i++)
        if (!isfinite(m[i]) || !(rs[i] >= FLT_MIN)) lncf_double(x + i, in, C, p->eps, m + i, rs + i);
    for (int c = 0; c < C; c++) {
        const float *xr = x + c * in, wc = w ? w[c] : 1.0f, bc = b ? b[c] : 0.0f;
        float *yr = y + c * in;
#pragma omp simd
        for (int i = 0; i < ni; i++) yr[i] = vt_norm_act_f(act, (xr[i] - m[i]) * rs[i] * wc + bc);
    }
}

/* Backward of one tile: with z = x̂·w + b, e = dy·act'(z) and g = e·w, dx = rs·(g − Σg / C − x̂·Σg·x̂ / C) (added
 * when acc); pw[c] += Σ_i e·x̂ and pb[c] += Σ_i e (the tile's float sums added in double). */
static inline __attribute__((always_inline)) void lncf_bwd_tile(const int act, const lncf_p *p, const float *x,
                                                                const float *dy, const float *w, const float *b,
                                                                const float *m, const float *rs, float *dx, int acc,
                                                                double *pw, double *pb, int ni) {
    const int C = p->C;
    const int64_t in = p->inner;
    float sg[LT] = {0}, sgx[LT] = {0};
    for (int c = 0; c < C; c++) {
        const float *xr = x + c * in, *dr = dy + c * in, wc = w ? w[c] : 1.0f, bc = b ? b[c] : 0.0f;
        float tw = 0.0f, tb = 0.0f;
#pragma omp simd reduction(+ : tw, tb)
        for (int i = 0; i < ni; i++) {
            const float xh = (xr[i] - m[i]) * rs[i], e = dr[i] * vt_norm_act_d(act, xh * wc + bc), gg = e * wc;
            sg[i] += gg;
            sgx[i] += gg * xh;
            tw += e * xh;
            tb += e;
        }
        if (pw) {
            pw[c] += tw;
            pb[c] += tb;
        }
    }
    if (!dx) return;
    for (int c = 0; c < C; c++) {
        const float *xr = x + c * in, *dr = dy + c * in, wc = w ? w[c] : 1.0f, bc = b ? b[c] : 0.0f;
        float *d = dx + c * in;
#pragma omp simd
        for (int i = 0; i < ni; i++) {
            const float xh = (xr[i] - m[i]) * rs[i], gg = dr[i] * vt_norm_act_d(act, xh * wc + bc) * wc;
            const float v = rs[i] * (gg - sg[i] / (float)C - xh * sgx[i] / (float)C);
            d[i] = acc ? d[i] + v : v;
        }
    }
}

static void lncf_fwd(vt_node *n) {
    const lncf_p *p = VT_OP_P(n, lncf_p);
    const float *x = n->in[0]->data, *w = p->iw >= 0 ? n->in[p->iw]->data : NULL;
    const float *b = p->ib >= 0 ? n->in[p->ib]->data : NULL;
    float *y = n->out->data, *mean = n->save[0]->data, *rstd = n->save[1]->data;
    const int64_t U = (int64_t)p->outer * p->tiles;
#pragma omp parallel for schedule(static)
    for (int64_t u = 0; u < U; u++) {
        int ni;
        int64_t pos;
        const int64_t off = lncf_tile(p, u, &ni, &pos);
        ACT_CONST(lncf_fwd_tile, p->act, p, x + off, w, b, y + off, mean + pos, rstd + pos, ni);
    }
}

static void lncf_bwd(vt_node *n) {
    const lncf_p *p = VT_OP_P(n, lncf_p);
    const float *x = n->in[0]->data, *dy = n->out->grad, *mean = n->save[0]->data, *rstd = n->save[1]->data;
    const vt_tensor *W = p->iw >= 0 ? n->in[p->iw] : NULL, *Bt = p->ib >= 0 ? n->in[p->ib] : NULL;
    const float *w = W ? W->data : NULL, *b = Bt ? Bt->data : NULL;
    float *dx = n->in[0]->grad, *dw = W ? W->grad : NULL, *db = Bt ? Bt->grad : NULL;
    if (!dy || !(dx || dw || db)) return;
    const int acc = !(n->grad_fresh & 1u), C = p->C, nch = p->nch;
    const int64_t U = (int64_t)p->outer * p->tiles;
    double *part = (dw || db) ? (double *)n->bws->data : NULL; /* [chunk][2][C]: dw then db partials */
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nch; k++) { /* fixed chunks of tiles: the same sums on any number of threads */
        double *pw = part ? part + (size_t)2 * k * C : NULL, *pb = pw ? pw + C : NULL;
        if (pw) memset(pw, 0, sizeof(double) * 2 * (size_t)C);
        for (int64_t u = U * k / nch; u < U * (k + 1) / nch; u++) {
            int ni;
            int64_t pos;
            const int64_t off = lncf_tile(p, u, &ni, &pos);
            ACT_CONST(lncf_bwd_tile, p->act, p, x + off, dy + off, w, b, mean + pos, rstd + pos, dx ? dx + off : NULL,
                     acc, pw, pb, ni);
        }
    }
    for (int c = 0; part && c < C; c++) { /* the chunks' partials in a fixed order */
        double sw = 0.0, sb = 0.0;
        for (int k = 0; k < nch; k++) {
            sw += part[(size_t)2 * k * C + c];
            sb += part[(size_t)2 * k * C + C + c];
        }
        if (dw) dw[c] += (float)sw;
        if (db) db[c] += (float)sb;
    }
}

static const vt_opdef op_layernorm_cf = {"layernorm_cf", lncf_fwd, lncf_bwd, VT_READS(VT_READS_ALL_IN), NULL,
                                         VT_OP_OTHER};

vt_tensor *vt_layernorm_cf(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, float eps, int act) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64], sw[64], sb[64];
    const int C = x->ndim > 1 ? x->shape[1] : 0;
    if (x->ndim < 2 || C < 1 || !is_vec(w, C) || !is_vec(b, C))
        return vt_fail(g, "layernorm_cf", "input %s must be (B, C, ...) and weight %s, bias %s (C) or none",
                       vt_shape_str(x, sx, 64), w ? vt_shape_str(w, sw, 64) : "none",
                       b ? vt_shape_str(b, sb, 64) : "none");
    if (!(eps >= 0.0f)) return vt_fail(g, "layernorm_cf", "eps %g must be >= 0", (double)eps);
    if (act != -1 && act != VT_RELU && act != VT_RELU6 && act != VT_HARDSWISH)
        return vt_fail(g, "layernorm_cf", "activation %d after it: only ReLU, ReLU6 and Hardswish (or none, -1)", act);
    const int64_t inner = x->numel / ((int64_t)x->shape[0] * C);
    if (inner > INT_MAX || (int64_t)x->shape[0] * inner > INT_MAX)
        return vt_fail(g, "layernorm_cf", "input %s: more than %d positions", vt_shape_str(x, sx, 64), INT_MAX);
    vt_tensor *in[3] = {x, NULL, NULL};
    int nin = 1, iw = -1, ib = -1;
    if (w) iw = nin, in[nin++] = w;
    if (b) ib = nin, in[nin++] = b;
    vt_node *n = vt_new_node(g, &op_layernorm_cf, in, nin, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    const int tiles = (int)((inner + LT - 1) / LT);
    const int nch = chunks((int64_t)x->shape[0] * tiles);
    *VT_OP_P(n, lncf_p) = (lncf_p){x->shape[0], C, (int)inner, tiles, nch, iw, ib, act, eps};
    vt_node_save(n, 0, (int64_t)x->shape[0] * inner);
    vt_node_save(n, 1, (int64_t)x->shape[0] * inner);
    n->grad_sets = 1u; /* x */
    if (w || b) vt_node_work(n, 1, (int64_t)4 * nch * C); /* 2·nch·C doubles */
    return n->out;
}

/* ================================ BatchNorm ================================ */
/* x viewed as (outer, C, inner): NCHW -> (B, C, H·W); channels-last (B, N, C) -> (B·N, C, 1). M = outer·inner.
 * batch statistics: save[0] mean (C), save[1] rstd (C).
 * fws (batch statistics): partials (2·chunks·C doubles), s1, s2 (C doubles each), then the per-channel scale and
 *     shift (2·C floats); fws (running statistics): scale, shift only.
 * bws: partials, s1, s2 as above, then the per-channel backward coefficients k1, k2, k3 (3·C floats), and with an
 *     activation its scale and shift (2·C floats). With an activation (bn_p.act) forward writes act(BN(x)) in the same
 *     pass, and backward first turns dy into the normalised value's gradient, in place, recomputing that value. */
typedef struct {
    int outer, C, inner;
    int nch;    /* chunks of the cross-row reductions */
    int batch;  /* normalise with batch statistics (else running) */
    int update; /* update the running statistics */
    int idx[5]; /* indices in in[] of w, b, rmean, rvar, nbt (-1: absent) */
    int act;    /* activation applied after it: VT_RELU, VT_RELU6, VT_HARDSWISH, or -1 (none) */
    int sets;   /* the channels' runs of C / sets with their own parameter tensors (vt_batchnorm_act_sets), else 1;
                 * in[] holds each kind's sets in a row (idx[k] + j: set j's), and the fws / bws scratch ends with the
                 * sets' w, b, rmean, rvar gathered (4·C floats) */
    int res;    /* vt_batchnorm_res: the slot of the added term r (-1: none) */
    float eps, momentum;
    float oscale; /* vt_batchnorm_res: the output's factor (1 otherwise) */
} bn_p;

#define CB 64 /* channels-last: channels per work item */

/* The work item (k, jb) of the per-channel sums: rows [o0, o1) of outer's nch fixed chunks (the same split on any
 * number of threads, so the sums do not depend on it) and channels [c0, c0 + cw) of blocks of cb. */
static void chunk_range(int k, int jb, int nch, int outer, int C, int cb, int *o0, int *o1, int *c0, int *cw) {
    *o0 = (int)((int64_t)outer * k / nch);
    *o1 = (int)((int64_t)outer * (k + 1) / nch);
    *c0 = jb * cb;
    *cw = *c0 + cb < C ? cb : C - *c0;
}

/* Chunk k's sums a1, a2 of channels [c0, c0 + cw) into part (2·nch·C doubles, chunk-major, pairs). */
static void store_part(double *part, int k, int C, int c0, int cw, const double *a1, const double *a2) {
    for (int j = 0; j < cw; j++) {
        part[2 * ((size_t)k * C + c0 + j)] = a1[j];
        part[2 * ((size_t)k * C + c0 + j) + 1] = a2[j];
    }
}

/* s1[c], s2[c]: the nch chunks' partial sums of channel c added in chunk order (the same result on any threads). */
static void add_parts(const double *part, int nch, int C, double *s1, double *s2) {
    for (int c = 0; c < C; c++) {
        double t1 = 0.0, t2 = 0.0;
        for (int k = 0; k < nch; k++) {
            t1 += part[2 * ((size_t)k * C + c)];
            t2 += part[2 * ((size_t)k * C + c) + 1];
        }
        s1[c] = t1;
        s2[c] = t2;
    }
}

#if defined(__AVX512F__)
/* The channels-last rows [o0, o1) of a chan_sums_ld work item on NV 16-float vectors of channels (cw <= 16·NV, the
 * last vector masked; NV a constant where inlined): each channel's sums in double vector registers across the rows,
 * the same operations in the same order as the plain loop (as gcc builds it: -std=c11 does not contract its
 * multiply-adds; clang would), whose accumulator arrays gcc kept on the stack (a load and
 * a store per element and row: chan_sums_ld was 1.9% of deit_tiny_hmhsa_cffn's training step in perf, six times its
 * BatchNorm's output pass over the same rows; bit-identical gradients after it; `--profile` per 6 steps, old and new
 * alternated, AMD EPYC Zen 4, 2026-12-06: its batchnorm_sum 0.117-0.154 -> 0.115-0.123 s, Next-ViT-S's batchnorm
 * 0.29-0.30 -> 0.26-0.28 s per 2 steps). Into a1, a2 (16·NV doubles each, from zero). */
static inline __attribute__((always_inline)) void sums_rows16(const int NV, const float *x, ptrdiff_t ldx,
                                                              const float *u, ptrdiff_t ldu, const float *mm, int o0,
                                                              int o1, int cw, double *a1, double *a2) {
    __m512d s1[4][2], s2[4][2], md[4][2];
    __m512 mv[4];
    __mmask16 mk[4];
    for (int v = 0; v < NV; v++) {
        const int n = cw - 16 * v;
        mk[v] = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
        mv[v] = _mm512_maskz_loadu_ps(mk[v], mm + 16 * v);
        md[v][0] = _mm512_cvtps_pd(_mm512_castps512_ps256(mv[v]));
        md[v][1] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(mv[v], 1));
        s1[v][0] = s1[v][1] = s2[v][0] = s2[v][1] = _mm512_setzero_pd();
    }
    for (int o = o0; o < o1; o++) {
        const float *xr = x + (ptrdiff_t)o * ldx;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const __m512 xv = _mm512_maskz_loadu_ps(mk[v], xr + 16 * v);
            if (u) { /* a1 += u, a2 += u·(double)(x − m), the difference in float */
                const __m512 uv = _mm512_maskz_loadu_ps(mk[v], u + (ptrdiff_t)o * ldu + 16 * v);
                const __m512 dv = _mm512_sub_ps(xv, mv[v]);
                for (int h = 0; h < 2; h++) {
                    const __m512d ud = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(uv, 1) : _mm512_castps512_ps256(uv));
                    const __m512d dd = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(dv, 1) : _mm512_castps512_ps256(dv));
                    s1[v][h] = _mm512_add_pd(s1[v][h], ud);
                    s2[v][h] = _mm512_add_pd(s2[v][h], _mm512_mul_pd(ud, dd));
                }
            } else { /* d = (double)x − m, exact */
                for (int h = 0; h < 2; h++) {
                    const __m512d xd = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(xv, 1) : _mm512_castps512_ps256(xv));
                    const __m512d dd = _mm512_sub_pd(xd, md[v][h]);
                    s1[v][h] = _mm512_add_pd(s1[v][h], dd);
                    s2[v][h] = _mm512_add_pd(s2[v][h], _mm512_mul_pd(dd, dd));
                }
            }
        }
    }
    for (int v = 0; v < NV; v++)
        for (int h = 0; h < 2; h++) {
            _mm512_storeu_pd(a1 + 16 * v + 8 * h, s1[v][h]);
            _mm512_storeu_pd(a2 + 16 * v + 8 * h, s2[v][h]);
        }
}
#endif

/* Per-channel sums over (outer, C, inner): s1[c] = Σ f, s2[c] = Σ f·(x − m[c]) with f = u if u is given else
 * x − m[c] (m NULL: 0). outer is split into nch fixed chunks (partials in part: 2·nch·C doubles). Channels-last
 * (inner = 1): x's and u's rows are ldx and ldu floats apart (C for a plain map; more for channels [c0, c0 + C) of
 * a wider one, x then pointing at channel c0). */
static void chan_sums_ld(const float *x, ptrdiff_t ldx, const float *u, ptrdiff_t ldu, const float *m, int outer,
                         int C, int inner, int nch, double *part, double *s1, double *s2) {
    const int cb = inner == 1 ? CB : 1, nb = (C + cb - 1) / cb;
#pragma omp parallel for schedule(static) collapse(2)
    for (int k = 0; k < nch; k++)
        for (int jb = 0; jb < nb; jb++) {
            int o0, o1, c0, cw;
            chunk_range(k, jb, nch, outer, C, cb, &o0, &o1, &c0, &cw);
            double a1[CB] = {0}, a2[CB] = {0};
            float mm[CB];
            for (int j = 0; j < cw; j++) mm[j] = m ? m[c0 + j] : 0.0f;
            if (inner == 1) { /* rows of C contiguous channels: vectorise across the channel block */
#if defined(__AVX512F__)
                const float *xc = x + c0, *uc = u ? u + c0 : NULL;
                _Static_assert(CB <= 64, "sums_rows16 takes at most four vectors");
                switch ((cw + 15) / 16) {
                case 1: sums_rows16(1, xc, ldx, uc, ldu, mm, o0, o1, cw, a1, a2); break;
                case 2: sums_rows16(2, xc, ldx, uc, ldu, mm, o0, o1, cw, a1, a2); break;
                case 3: sums_rows16(3, xc, ldx, uc, ldu, mm, o0, o1, cw, a1, a2); break;
                default: sums_rows16(4, xc, ldx, uc, ldu, mm, o0, o1, cw, a1, a2);
                }
                store_part(part, k, C, c0, cw, a1, a2);
                continue;
#endif
                for (int o = o0; o < o1; o++) {
                    const float *xr = x + (ptrdiff_t)o * ldx + c0;
                    if (u) {
                        const float *ur = u + (ptrdiff_t)o * ldu + c0;
#pragma omp simd
                        for (int j = 0; j < cw; j++) {
                            a1[j] += ur[j];
                            a2[j] += (double)ur[j] * (xr[j] - mm[j]);
                        }
                    } else {
#pragma omp simd
                        for (int j = 0; j < cw; j++) {
                            const double d = (double)xr[j] - mm[j]; /* exact: no rounding when m is far off */
                            a1[j] += d;
                            a2[j] += d * d;
                        }
                    }
                }
            } else { /* one channel per item: contiguous planes of `inner` values */
                const float mc = m ? m[c0] : 0.0f;
                double t1 = 0.0, t2 = 0.0;
                for (int o = o0; o < o1; o++) {
                    const size_t base = ((size_t)o * C + c0) * inner;
                    if (u) {
#pragma omp simd reduction(+ : t1, t2)
                        for (int i = 0; i < inner; i++) {
                            t1 += u[base + i];
                            t2 += (double)u[base + i] * (x[base + i] - mc);
                        }
                    } else {
#pragma omp simd reduction(+ : t1, t2)
                        for (int i = 0; i < inner; i++) {
                            const double d = (double)x[base + i] - mc;
                            t1 += d;
                            t2 += d * d;
                        }
                    }
                }
                a1[0] = t1;
                a2[0] = t2;
            }
            store_part(part, k, C, c0, cw, a1, a2);
        }
    add_parts(part, nch, C, s1, s2);
}

static void chan_sums(const float *x, const float *u, const float *m, int outer, int C, int inner, int nch,
                      double *part, double *s1, double *s2) {
    chan_sums_ld(x, C, u, C, m, outer, C, inner, nch, part, s1, s2);
}

/* One channel-last row (ks = 1: per-element m, k1, k0, sums into a1[j], a2[j]) or one plane (ks = 0: one channel,
 * sums into a1[0], a2[0]) of chan_sums_act, act a constant where inlined. */
static inline __attribute__((always_inline)) void act_sums(const int act, const int ks, const float *x, const float *u,
                                                           const float *m, const float *k1, const float *k0, int n,
                                                           double *a1, double *a2) {
    if (ks) {
#pragma omp simd
        for (int i = 0; i < n; i++) {
            const float d = x[i] - m[i], g = u[i] * vt_norm_act_d(act, d * k1[i] + k0[i]);
            a1[i] += g;
            a2[i] += (double)g * d;
        }
    } else {
        double t1 = 0.0, t2 = 0.0;
#pragma omp simd reduction(+ : t1, t2)
        for (int i = 0; i < n; i++) {
            const float d = x[i] - m[0], g = u[i] * vt_norm_act_d(act, d * k1[0] + k0[0]);
            t1 += g;
            t2 += (double)g * d;
        }
        a1[0] += t1;
        a2[0] += t2;
    }
}

/* The activation's backward and BatchNorm's sums in one pass over (outer, C, inner): with g = u·act'((x − m)·k1 + k0),
 * s1[c] = Σ g, s2[c] = Σ g·(x − m[c]) as chan_sums (act: VT_RELU, VT_RELU6 or VT_HARDSWISH); chan_apply's backward
 * computes g again rather than this pass writing it over u. Two passes before (the activation's, then the sums), x
 * and u read twice: the BatchNorm nodes of a training step at batch 16, both ways alternated in one process (8 rounds,
 * Intel Xeon Ice Lake, 2026-11-29), per-round medians: Refined-ViT-S 1.19x (its ReLU6 BatchNorms over the expanded
 * attention maps; 881 -> 733 ms, best steps), GroupMixFormer-T 1.11x. */
static void chan_sums_act(int act, const float *x, const float *u, const float *m, const float *k1, const float *k0,
                          int outer, int C, int inner, int nch, double *part, double *s1, double *s2) {
    const int cb = inner == 1 ? CB : 1, nb = (C + cb - 1) / cb;
#pragma omp parallel for schedule(static) collapse(2)
    for (int k = 0; k < nch; k++)
        for (int jb = 0; jb < nb; jb++) {
            int o0, o1, c0, cw;
            chunk_range(k, jb, nch, outer, C, cb, &o0, &o1, &c0, &cw);
            double a1[CB] = {0}, a2[CB] = {0};
            for (int o = o0; o < o1; o++) {
                if (inner == 1) {
                    const size_t base = (size_t)o * C + c0;
                    ACT_CONST(act_sums, act, 1, x + base, u + base, m + c0, k1 + c0, k0 + c0, cw, a1, a2);
                } else {
                    const size_t base = ((size_t)o * C + c0) * inner;
                    ACT_CONST(act_sums, act, 0, x + base, u + base, m + c0, k1 + c0, k0 + c0, inner, a1, a2);
                }
            }
            store_part(part, k, C, c0, cw, a1, a2);
        }
    add_parts(part, nch, C, s1, s2);
}

/* Synchronised BatchNorm (g->allsum, else nothing: returns 1): this replica's per-channel mean s1 and biased
 * variance s2 (s2 = s1 + C, as every caller lays them out) become those of all replicas' batches, mu the mean in
 * float; returns the replica count. The replicas' means and E[x²] are averaged (equal counts) in one collective of 2·C
 * doubles, as torch's SyncBatchNorm gathers theirs; E[x²] − E[x]² in double then loses about 1e-16·(mean/σ)² of the
 * variance. */
static int sync_stats(const vt_graph *g, int C, double *s1, double *s2, float *mu) {
    if (!g || !g->allsum) return 1;
    for (int c = 0; c < C; c++) s2[c] += s1[c] * s1[c];
    g->allsum(g->allsum_ctx, s1, 2 * C);
    const double inv = 1.0 / g->replicas;
    for (int c = 0; c < C; c++) {
        s1[c] *= inv;
        s2[c] = vt_bn_var_nonneg(s2[c] * inv - s1[c] * s1[c]);
        mu[c] = (float)s1[c];
    }
    return g->replicas;
}

/* Synchronised BatchNorm's backward (as sync_stats): the per-channel sums s1, s2 (s2 = s1 + C) over the batch of one
 * replica become those of all replicas, for their dx; returns the replica count (1: not synchronised). */
static int sync_sums(const vt_graph *g, int C, double *s1) {
    if (!g->allsum) return 1;
    g->allsum(g->allsum_ctx, s1, 2 * C);
    return g->replicas;
}

/* Batch statistics of each channel of x (outer, C, inner) (part: the chunks' partial sums). One pass over x: sums of
 * the deviations d from the channel's first value, d exact in double, so var = E[d²] − E[d]² loses about
 * 1e-16·(Δ/σ)² relative to cancellation, Δ that value's distance from the mean (tests: Δ ≈ 220σ). On return s1[c] is
 * the mean, s2[c] the biased variance (at least 0, or NaN) and mu[c] the mean rounded to float. Two passes before
 * (the mean, then the deviations from it); a training step at batch 16 with one pass, old and new alternated in one
 * process (8 rounds, Ice Lake, 2026-11-29), per-round medians: Refined-ViT-S 1.02-1.05x in four runs (BatchNorms
 * over its expanded attention maps; best steps 0.93-1.06x), Next-ViT-S 1.01-1.03x, GroupMixFormer-T 1.02x. */
static int64_t batch_stats(const vt_graph *g, const float *x, int outer, int C, int inner, int nch, double *part,
                           double *s1, double *s2, float *mu) {
    const int64_t M = (int64_t)outer * inner;
    for (int c = 0; c < C; c++) mu[c] = x[(size_t)c * inner]; /* the shift */
    chan_sums(x, NULL, mu, outer, C, inner, nch, part, s1, s2);
    for (int c = 0; c < C; c++) {
        const double d = s1[c] / M, var = s2[c] / M - d * d;
        s1[c] = mu[c] + d;
        s2[c] = vt_bn_var_nonneg(var);
        mu[c] = (float)s1[c];
    }
    return sync_stats(g, C, s1, s2, mu) * M;
}

/* n elements of one row (rows: ks = 1, the coefficients per element) or plane (ks = 0, one coefficient): y =
 * act((x − m)·k1 + k0). Inlined with constant act and ks, so each loop vectorises (a switch on act inside the loop
 * kept it scalar: 5.6x slower than BatchNorm then the activation). */
static inline __attribute__((always_inline)) void act_pass(const int act, const int ks, const float *x, float *y,
                                                          const float *m, const float *k1, const float *k0, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] = vt_norm_act_f(act, (x[i] - m[ks * i]) * k1[ks * i] + k0[ks * i]);
}

/* BatchNorm's backward over n elements (ks as act_pass): out = (add: +=) k1·(g − k2 − (x − m)·k3) with g =
 * dy·act'((x − m)·k1 + k0) (act < 0: g = dy; with act, k1 is also the normalisation's scale and k0 its shift). */
static inline __attribute__((always_inline)) void bwd_pass(const int act, const int ks, int add, const float *x,
                                                          const float *dy, const float *m, const float *k0,
                                                          const float *k1, const float *k2, const float *k3,
                                                          float *out, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) {
        const float d = x[i] - m[ks * i], a = k1[ks * i];
        const float g = act >= 0 ? dy[i] * vt_norm_act_d(act, d * a + k0[ks * i]) : dy[i];
        const float v = a * (g - k2[ks * i] - d * k3[ks * i]);
        out[i] = add ? out[i] + v : v;
    }
}

/* Per-channel elementwise pass over (outer, C, inner), parallel over rows (channels-last) or planes:
 * forward (fwd = 1): out = act((x − m)·k1 + k0) (vt_norm_act_f), plus r (NULL: none; without act) while in cache;
 * backward (fwd = 0, -1): out += bwd_pass's k1·(g − k2 − (x − m)·k3), g = dy·act'(...) (act −1: dy), written instead
 * of added to when fwd is -1. */
static void chan_apply(int fwd, int act, const float *x, const float *dy, const float *m, const float *k0,
                       const float *k1, const float *k2, const float *k3, const float *r, float *out, int outer, int C,
                       int inner) {
    if (inner == 1) {
#pragma omp parallel for schedule(static)
        for (int o = 0; o < outer; o++) {
            const float *xr = x + (size_t)o * C;
            float *yr = out + (size_t)o * C;
            if (fwd == 1) {
                ACT_CONST(act_pass, act, 1, xr, yr, m, k1, k0, C);
                if (r) {
                    const float *rr = r + (size_t)o * C;
#pragma omp simd
                    for (int c = 0; c < C; c++) yr[c] += rr[c];
                }
            } else {
                ACT_CONST(bwd_pass, act, 1, fwd == 0, xr, dy + (size_t)o * C, m, k0, k1, k2, k3, yr, C);
            }
        }
        return;
    }
#pragma omp parallel for schedule(static) collapse(2)
    for (int o = 0; o < outer; o++)
        for (int c = 0; c < C; c++) {
            const size_t base = ((size_t)o * C + c) * inner;
            if (fwd == 1) {
                ACT_CONST(act_pass, act, 0, x + base, out + base, m + c, k1 + c, k0 + c, inner);
                if (r)
#pragma omp simd
                    for (int i = 0; i < inner; i++) out[base + i] += r[base + i];
            } else {
                ACT_CONST(bwd_pass, act, 0, fwd == 0, x + base, dy + base, m + c, k0 ? k0 + c : NULL, k1 + c, k2 + c,
                          k3 + c, out + base, inner);
            }
        }
}

static const vt_tensor *bn_in(const vt_node *n, int which) {
    const int i = VT_OP_P(n, bn_p)->idx[which];
    return i >= 0 ? n->in[i] : NULL;
}

/* Parameter kind k's C floats (NULL: absent): the tensor's data, or with sets gathered into g (4·C floats, kind k at
 * k·C) from each set's tensor. */
static float *bn_arr(const vt_node *n, int k, float *g) {
    const bn_p *p = VT_OP_P(n, bn_p);
    if (p->idx[k] < 0) return NULL;
    if (p->sets == 1) return n->in[p->idx[k]]->data;
    const int cs = p->C / p->sets;
    for (int j = 0; j < p->sets; j++)
        memcpy(g + (size_t)k * p->C + (size_t)j * cs, n->in[p->idx[k] + j]->data, sizeof(float) * (size_t)cs);
    return g + (size_t)k * p->C;
}

/* The normalisation's per-channel scale and shift, out = (x − mean)·scale + shift: from the batch's rstd (saved)
 * or the running variance rv; forward and backward compute the same floats. */
static void bn_affine(const vt_node *n, const float *w, const float *b, const float *rv, float *scale, float *shift) {
    const bn_p *p = VT_OP_P(n, bn_p);
    const float *rstd = p->batch ? n->save[1]->data : NULL;
    for (int c = 0; c < p->C; c++) {
        const float rs = rstd ? rstd[c] : (float)(1.0 / sqrt((double)rv[c] + p->eps));
        scale[c] = (w ? rs * w[c] : rs) * p->oscale;
        shift[c] = (b ? b[c] : 0.0f) * p->oscale;
    }
}

size_t vt_bn_batch_scratch(int64_t outer, int C, int inner) {
    return (size_t)4 * stat_chunks(outer, inner) * C + 4 * (size_t)C;
}

void vt_bn_batch_update(const vt_graph *sync, const float *x, int outer, int C, int inner, double *scratch, float eps,
                        float momentum, float *mu, float *rstd, float *rm, float *rv, float *nbt) {
    const int nch = stat_chunks(outer, inner);
    double *part = scratch, *s1 = part + (size_t)2 * nch * C, *s2 = s1 + C;
    const int64_t M = batch_stats(sync, x, outer, C, inner, nch, part, s1, s2, mu);
    for (int c = 0; c < C; c++) {
        rstd[c] = (float)(1.0 / sqrt(s2[c] + eps));
        if (rm) { /* torch: running = (1 − momentum)·running + momentum·batch (unbiased var) */
            rm[c] = (float)((1.0 - momentum) * rm[c] + momentum * s1[c]);
            rv[c] = (float)((1.0 - momentum) * rv[c] + momentum * s2[c] * M / (M - 1));
        }
    }
    if (nbt) nbt[0] += 1.0f;
}

static void bn_fwd(vt_node *n) {
    const bn_p *p = VT_OP_P(n, bn_p);
    const int outer = p->outer, C = p->C, inner = p->inner, nch = p->nch, batch = p->batch;
    const float eps = p->eps, mom = p->momentum, *x = n->in[0]->data;
    float *scale = n->fws->data + (batch ? (int64_t)4 * nch * C + 4 * C : 0), *shift = scale + C, *ga = shift + C;
    const float *w = bn_arr(n, 0, ga), *b = bn_arr(n, 1, ga);
    float *rm = bn_arr(n, 2, ga), *rv = bn_arr(n, 3, ga);
    const float *mean;
    if (batch) {
        vt_bn_batch_update(n->g, x, outer, C, inner, (double *)n->fws->data, eps, mom, n->save[0]->data,
                           n->save[1]->data, p->update ? rm : NULL, p->update ? rv : NULL, NULL);
        for (int j = 0; p->update && j < p->sets; j++) { /* the running statistics back into the sets' tensors */
            const int cs = C / p->sets;
            if (p->sets > 1) {
                memcpy(n->in[p->idx[2] + j]->data, rm + (size_t)j * cs, sizeof(float) * (size_t)cs);
                memcpy(n->in[p->idx[3] + j]->data, rv + (size_t)j * cs, sizeof(float) * (size_t)cs);
            }
            if (p->idx[4] >= 0) n->in[p->idx[4] + j]->data[0] += 1.0f;
        }
        mean = n->save[0]->data;
    } else {
        mean = rm;
    }
    bn_affine(n, w, b, rv, scale, shift);
    chan_apply(1, p->act, x, NULL, mean, shift, scale, NULL, NULL, p->res >= 0 ? n->in[p->res]->data : NULL,
               n->out->data, outer, C, inner);
}

/* Parameter kind k's gradient (k: 0 w, 1 b) of channel c += v (its set's tensor). */
static void bn_grad_add(const vt_node *n, int k, int c, float v) {
    const bn_p *p = VT_OP_P(n, bn_p);
    const int cs = p->C / p->sets;
    float *gr = n->in[p->idx[k] + c / cs]->grad;
    if (gr) gr[c % cs] += v;
}

static void bn_bwd(vt_node *n) {
    const bn_p *p = VT_OP_P(n, bn_p);
    const int outer = p->outer, C = p->C, inner = p->inner, nch = p->nch, batch = p->batch;
    const float eps = p->eps, *x = n->in[0]->data;
    const vt_tensor *W = bn_in(n, 0), *Bt = bn_in(n, 1);
    float *dy = n->out->grad, *dx = n->in[0]->grad;
    int dw = 0, db = 0; /* any set's weight or bias wanting its gradient (bn_grad_add skips the others) */
    for (int j = 0; j < p->sets; j++) {
        dw |= W && n->in[p->idx[0] + j]->grad;
        db |= Bt && n->in[p->idx[1] + j]->grad;
    }
    float *dr = p->res >= 0 ? n->in[p->res]->grad : NULL;
    if (dy && dr) { /* y = s·BN(x) + r: r's gradient is dy (written where fresh) */
        const int set = n->grad_fresh >> p->res & 1u;
        const int64_t N = n->out->numel;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++) dr[i] = (set ? 0.0f : dr[i]) + dy[i];
    }
    if (!dy || !(dx || dw || db)) return;
    const int64_t M = (int64_t)outer * inner;
    double *part = (double *)n->bws->data, *s1 = part + (size_t)2 * nch * C, *s2 = s1 + C;
    float *k1 = n->bws->data + (int64_t)4 * nch * C + 4 * C, *k2 = k1 + C, *k3 = k2 + C, *scale = k3 + C,
          *shift = scale + C, *ga = shift + C;
    const float *w = bn_arr(n, 0, ga), *b = bn_arr(n, 1, ga), *rm = bn_arr(n, 2, ga), *rv = bn_arr(n, 3, ga);
    const float *mean = batch ? n->save[0]->data : rm;
    const int sums = dw || db || batch;
    if (p->act >= 0) { /* the activation's backward first, in place (only this node reads its output's gradient) */
        bn_affine(n, w, b, rv, scale, shift);
        if (sums) /* with the sums below, in one pass */
            chan_sums_act(p->act, x, dy, mean, scale, shift, outer, C, inner, nch, part, s1, s2);
    } else if (sums) {
        chan_sums(x, dy, mean, outer, C, inner, nch, part, s1, s2); /* Σdy, Σdy·(x − mean) */
    }
    for (int c = 0; c < C; c++) { /* this replica's sums */
        const float rs = batch ? n->save[1]->data[c] : (float)(1.0 / sqrt((double)rv[c] + eps));
        if (dw) bn_grad_add(n, 0, c, (float)(s2[c] * rs * p->oscale));
        if (db) bn_grad_add(n, 1, c, (float)(s1[c] * p->oscale));
    }
    if (!dx) return;
    const int64_t Mall = batch ? M * sync_sums(n->g, C, s1) : M; /* synchronised: every replica's */
    for (int c = 0; c < C; c++) {
        const float rs = batch ? n->save[1]->data[c] : (float)(1.0 / sqrt((double)rv[c] + eps));
        k1[c] = (w ? w[c] * rs : rs) * p->oscale;
        /* batch statistics: dx = w·rstd·(dy − mean(dy) − x̂·mean(dy·x̂)); running statistics: dx = w·rstd·dy */
        k2[c] = batch ? (float)(s1[c] / Mall) : 0.0f;
        k3[c] = batch ? (float)(s2[c] * rs * rs / Mall) : 0.0f;
    }
    /* with act, its backward again (k1 is the scale) */
    chan_apply(n->grad_fresh & 1u ? -1 : 0, p->act, x, dy, mean, shift, k1, k2, k3, NULL, dx, outer, C, inner);
}

static const vt_opdef op_batchnorm = {"batchnorm", bn_fwd, bn_bwd, VT_READS(VT_READS_ALL_IN), NULL, VT_OP_OTHER};

/* vt_batchnorm_act with, when r is given (no activation then), y = oscale·BN(x) + r; the parameters pt[k·sets + j]:
 * kind k (w, b, rmean, rvar, nbt) of set j, sets runs of C / sets channels (vt_batchnorm_act_sets), else 1. */
static vt_tensor *batchnorm(vt_graph *g, vt_tensor *x, int sets, vt_tensor *const *pt, int axis, float eps,
                            float momentum, int act, vt_tensor *r, float oscale) {
    if (vt_bad(g, 1, x)) return NULL;
    if (act != -1 && act != VT_RELU && act != VT_RELU6 && act != VT_HARDSWISH)
        return vt_fail(g, "batchnorm", "activation %d after it: only ReLU, ReLU6 and Hardswish (or none, -1)", act);
    char sx[64], s[5][64];
    const int ax = axis < 0 ? axis + x->ndim : axis;
    if (x->ndim < 2 || ax < 0 || ax >= x->ndim)
        return vt_fail(g, "batchnorm", "input %s: channel axis %d invalid (need >= 2 dims)", vt_shape_str(x, sx, 64),
                       axis);
    const int C = x->shape[ax];
    if (sets < 1 || C % sets || 1 + 5 * sets > VT_MAXIN)
        return vt_fail(g, "batchnorm", "input %s: %d parameter sets must split its %d channels (at most %d sets)",
                       vt_shape_str(x, sx, 64), sets, C, (VT_MAXIN - 1) / 5);
    const int cs = C / sets;
    for (int j = 0; j < sets; j++) {
        vt_tensor *w = pt[j], *b = pt[sets + j], *rmean = pt[2 * sets + j], *rvar = pt[3 * sets + j],
                  *nbt = pt[4 * sets + j];
        if (!is_vec(w, cs) || !is_vec(b, cs) || !is_vec(rmean, cs) || !is_vec(rvar, cs) || (nbt && nbt->numel != 1) ||
            (!rmean != !rvar))
            return vt_fail(g, "batchnorm", "input %s (C = %d on axis %d, set %d of %d): weight %s, bias %s, "
                           "running_mean %s, running_var %s must be (%d) (running stats both given or both NULL), "
                           "num_batches %s (1)",
                           vt_shape_str(x, sx, 64), C, ax, j, sets, w ? vt_shape_str(w, s[0], 64) : "none",
                           b ? vt_shape_str(b, s[1], 64) : "none", rmean ? vt_shape_str(rmean, s[2], 64) : "none",
                           rvar ? vt_shape_str(rvar, s[3], 64) : "none", cs, nbt ? vt_shape_str(nbt, s[4], 64) : "none");
        for (int k = 0; k < 5; k++)
            if (!pt[k * sets + j] != !pt[k * sets])
                return vt_fail(g, "batchnorm", "input %s: parameter set %d lacks or has a tensor set 0 has not",
                               vt_shape_str(x, sx, 64), j);
    }
    if (!(eps >= 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return vt_fail(g, "batchnorm", "eps %g must be >= 0 and momentum %g in [0, 1]", (double)eps, (double)momentum);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++) outer *= x->shape[d];
    for (int d = ax + 1; d < x->ndim; d++) inner *= x->shape[d];
    /* Like torch: batch statistics in training, or always when there are no running statistics. */
    const int batch = g->training || !pt[2 * sets], update = g->training && pt[2 * sets];
    if (batch && outer * inner < 2)
        return vt_fail(g, "batchnorm", "input %s: expected more than 1 value per channel when training",
                       vt_shape_str(x, sx, 64));
    if ((r || oscale != 1.0f) && act != -1)
        return vt_fail(g, "batchnorm", "an added term or an output factor goes with no activation");
    if (r && (r->ndim != x->ndim || memcmp(r->shape, x->shape, sizeof(int) * (size_t)x->ndim)))
        return vt_fail(g, "batchnorm", "added term %s must have the input's shape %s", vt_shape_str(r, s[0], 64),
                       vt_shape_str(x, sx, 64));
    vt_tensor *in[VT_MAXIN] = {x};
    int nin = 1, idx[5];
    for (int k = 0; k < 5; k++) {
        idx[k] = pt[k * sets] ? nin : -1;
        for (int j = 0; pt[k * sets] && j < sets; j++) in[nin++] = pt[k * sets + j];
    }
    const int res = r ? nin : -1;
    if (r) in[nin++] = r;
    vt_node *n = vt_new_node(g, &op_batchnorm, in, nin, vt_new_act(g, x->ndim, x->shape));
    if (!n) return NULL;
    n->grad_sets = 1u | (r ? 1u << res : 0u); /* dx covers every element of x, dr of r */
    const int nch = stat_chunks(outer, (int)inner);
    bn_p *p = VT_OP_P(n, bn_p);
    *p = (bn_p){.outer = (int)outer, .C = C, .inner = (int)inner, .nch = nch, .batch = batch, .update = update,
                .act = act, .sets = sets, .res = res, .eps = eps, .momentum = momentum, .oscale = oscale};
    for (int k = 0; k < 5; k++) p->idx[k] = idx[k];
    const int64_t red = (int64_t)4 * nch * C + 4 * C; /* partials + s1, s2 in doubles, counted in floats */
    const int64_t gath = sets > 1 ? 4 * C : 0;        /* the sets' parameters gathered */
    if (batch) {
        vt_node_save(n, 0, C);
        vt_node_save(n, 1, C);
        vt_node_work(n, 0, red + 2 * C + gath);
    } else {
        vt_node_work(n, 0, 2 * C + gath);
    }
    vt_node_work(n, 1, red + 5 * C + gath); /* k1-k3, the activation's scale and shift */
    return n->out;
}

vt_tensor *vt_batchnorm_act(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, vt_tensor *rmean, vt_tensor *rvar,
                            vt_tensor *nbt, int axis, float eps, float momentum, int act) {
    vt_tensor *const pt[5] = {w, b, rmean, rvar, nbt};
    return batchnorm(g, x, 1, pt, axis, eps, momentum, act, NULL, 1.0f);
}

vt_tensor *vt_batchnorm_act_sets(vt_graph *g, vt_tensor *x, int sets, vt_tensor *const *pt, int axis, float eps,
                                 float momentum, int act) {
    return batchnorm(g, x, sets, pt, axis, eps, momentum, act, NULL, 1.0f);
}

vt_tensor *vt_batchnorm(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, vt_tensor *rmean, vt_tensor *rvar,
                        vt_tensor *nbt, int axis, float eps, float momentum) {
    vt_tensor *const pt[5] = {w, b, rmean, rvar, nbt};
    return batchnorm(g, x, 1, pt, axis, eps, momentum, -1, NULL, 1.0f);
}

vt_tensor *vt_batchnorm_res(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, vt_tensor *rmean, vt_tensor *rvar,
                            vt_tensor *nbt, int axis, float eps, float momentum, float oscale, vt_tensor *r) {
    vt_tensor *const pt[5] = {w, b, rmean, rvar, nbt};
    return batchnorm(g, x, 1, pt, axis, eps, momentum, -1, r, oscale);
}

/* ================================ BatchNorms of channel groups, summed ================================ */
/* y (..., C) = Σ_b BN_b(z[..., b·C, (b + 1)·C)) for b < r: the r BatchNorms of cFFN's training branches (each over
 * its own channels, statistics over all rows) and their sum in one op over one product z of the r branches'
 * convolutions (a single GEMM over their stacked weights, cffn.c). Inputs: z, then per group weight, bias,
 * running_mean, running_var, num_batches_tracked (in[1 + 5b ...]). Statistics as vt_batchnorm's (batch_stats: one
 * pass, double sums in fixed chunks; save[0] mean, save[1] rstd per channel of z, batch statistics only).
 * fws: partials, s1, s2 (batch statistics), then scale, shift and mean (3·rC floats); bws: partials, s1, s2, then
 * k1, k2, k3 and the mean (4·rC floats). Measured against the chain of r BatchNorms, r − 1 adds and r GEMMs: see
 * cffn.c.
 * Residual (vt_residual_drop onto its output, the block's x + drop_path(cFFN(x))): y = res + s·Σ_b BN_b, s the
 * sample's drop-path factor (save[2]; 1 without drop-path), res the last input; backward writes or adds dy into its
 * gradient, then scales dy by s in place (only this node reads its output's gradient). The separate add and
 * drop_path passes were 0.6-0.8% of Next-ViT-S hMHSA + cFFN's training step at batch 16 (`vitc bench --profile`,
 * alternated; docs/benchmarks.md). */
#define BNS_MAXR 4 /* groups: z, 5 tensors per group and a residual within VT_MAXIN inputs */
_Static_assert(2 + 5 * BNS_MAXR <= VT_MAXIN, "batchnorm_sum's inputs");
typedef struct {
    int R, C, r;
    int nch, batch, update;
    float eps, momentum;
    int res;    /* the residual's input index (1 + 5r), 0: none */
    float drop; /* res: drop-path probability (train graphs), 0: none */
    int T;      /* drop: rows per sample */
} bns_p;

static const vt_tensor *bns_in(const vt_node *n, int b, int k) { return n->in[1 + 5 * b + k]; }

/* Channel j of z: group j / C, channel j % C of that group's tensor k (0 weight ... 4 num_batches_tracked). */
static float bns_val(const vt_node *n, int k, int j) {
    const int C = VT_OP_P(n, bns_p)->C;
    return bns_in(n, j / C, k)->data[j % C];
}

/* 1/√(σ² + eps) of z's channel j: the batch's (saved) or the running variance's. */
static float bns_rstd(const vt_node *n, int j) {
    const bns_p *p = VT_OP_P(n, bns_p);
    return p->batch ? n->save[1]->data[j] : (float)(1.0 / sqrt((double)bns_val(n, 3, j) + p->eps));
}

/* The scale and shift of z's channels and the mean they subtract (rC floats each): batch statistics (saved) or
 * running ones; forward and backward compute the same floats. */
static void bns_affine(const vt_node *n, float *scale, float *shift, float *mean) {
    const bns_p *p = VT_OP_P(n, bns_p);
    const int rC = p->r * p->C;
    for (int j = 0; j < rC; j++) {
        const float rs = bns_rstd(n, j);
        scale[j] = rs * bns_val(n, 0, j);
        shift[j] = bns_val(n, 1, j);
        mean[j] = p->batch ? n->save[0]->data[j] : bns_val(n, 2, j);
    }
}

static void bns_fwd(vt_node *n) {
    const bns_p *p = VT_OP_P(n, bns_p);
    const int R = p->R, C = p->C, r = p->r, rC = r * C, nch = p->nch;
    const float *z = n->in[0]->data;
    const int64_t red = p->batch ? (int64_t)4 * nch * rC + 4 * rC : 0;
    float *scale = n->fws->data + red, *shift = scale + rC, *mean = shift + rC, *y = n->out->data;
    if (p->batch) {
        double *part = (double *)n->fws->data, *s1 = part + (size_t)2 * nch * rC, *s2 = s1 + rC;
        float *mu = n->save[0]->data, *rstd = n->save[1]->data;
        const int64_t Rall = batch_stats(n->g, z, R, rC, 1, nch, part, s1, s2, mu);
        for (int j = 0; j < rC; j++) {
            rstd[j] = (float)(1.0 / sqrt(s2[j] + p->eps));
            if (p->update) { /* as vt_batchnorm: torch's momentum update, unbiased variance */
                const double mom = p->momentum;
                float *rm = bns_in(n, j / C, 2)->data + j % C, *rv = bns_in(n, j / C, 3)->data + j % C;
                *rm = (float)((1.0 - mom) * *rm + mom * s1[j]);
                *rv = (float)((1.0 - mom) * *rv + mom * s2[j] * Rall / (Rall - 1));
            }
        }
        for (int b = 0; p->update && b < r; b++) bns_in(n, b, 4)->data[0] += 1.0f;
    }
    bns_affine(n, scale, shift, mean);
    const float *res = p->res ? n->in[p->res]->data : NULL;
    float *m = p->drop > 0.0f ? n->save[2]->data : NULL;
    if (m) vt_drop_path_draw(n, R / p->T, p->drop, m);
#pragma omp parallel for schedule(static)
    for (int o = 0; o < R; o++) {
        const float *zr = z + (size_t)o * rC;
        float *yr = y + (size_t)o * C;
#pragma omp simd
        for (int c = 0; c < C; c++) yr[c] = (zr[c] - mean[c]) * scale[c] + shift[c];
        for (int b = 1; b < r; b++) {
            const float *zb = zr + (size_t)b * C, *mb = mean + (size_t)b * C, *sb = scale + (size_t)b * C,
                        *hb = shift + (size_t)b * C;
#pragma omp simd
            for (int c = 0; c < C; c++) yr[c] += (zb[c] - mb[c]) * sb[c] + hb[c];
        }
        if (res) {
            const float *rr = res + (size_t)o * C, s = m ? m[o / p->T] : 1.0f;
#pragma omp simd
            for (int c = 0; c < C; c++) yr[c] = rr[c] + s * yr[c];
        }
    }
}

/* Backward's first pass with a residual: its gradient gets dy (written where fresh, else added), then dy becomes the
 * BatchNorms' gradient s·dy in place. */
static void bns_res_grad(vt_node *n, float *dy) {
    const bns_p *p = VT_OP_P(n, bns_p);
    float *rg = n->in[p->res]->grad;
    const float *m = p->drop > 0.0f ? n->save[2]->data : NULL;
    const int R = p->R, C = p->C, set = (n->grad_fresh >> p->res) & 1u;
#pragma omp parallel for schedule(static)
    for (int o = 0; o < R; o++)
        vt_res_grad_row(dy + (size_t)o * C, rg ? rg + (size_t)o * C : NULL, set, m ? m[o / p->T] : 1.0f, C);
}

static void bns_bwd(vt_node *n) {
    const bns_p *p = VT_OP_P(n, bns_p);
    const int R = p->R, C = p->C, r = p->r, rC = r * C, nch = p->nch;
    const float *z = n->in[0]->data, *dy = n->out->grad;
    float *dz = n->in[0]->grad;
    if (!dy) return;
    if (p->res) bns_res_grad(n, n->out->grad);
    double *part = (double *)n->bws->data, *s1 = part + (size_t)2 * nch * rC, *s2 = s1 + rC;
    float *k1 = n->bws->data + (int64_t)4 * nch * rC + 4 * rC, *k2 = k1 + rC, *k3 = k2 + rC, *m = k3 + rC;
    bns_affine(n, k1, k2, m); /* the mean (k1, k2: scratch until set below) */
    for (int b = 0; b < r; b++) /* Σdy, Σdy·(z − mean) per channel of group b */
        chan_sums_ld(z + (size_t)b * C, rC, dy, C, m + (size_t)b * C, R, C, 1, nch, part, s1 + (size_t)b * C,
                     s2 + (size_t)b * C);
    for (int j = 0; j < rC; j++) { /* this replica's sums */
        const float rs = bns_rstd(n, j);
        float *dw = bns_in(n, j / C, 0)->grad, *db = bns_in(n, j / C, 1)->grad;
        if (dw) dw[j % C] += (float)(s2[j] * rs);
        if (db) db[j % C] += (float)s1[j];
    }
    if (!dz) return;
    const int64_t Rall = p->batch ? (int64_t)R * sync_sums(n->g, rC, s1) : R; /* synchronised: every replica's */
    for (int j = 0; j < rC; j++) {
        const float rs = bns_rstd(n, j);
        /* batch statistics: dz = w·rstd·(dy − mean(dy) − ẑ·mean(dy·ẑ)); running statistics: dz = w·rstd·dy */
        k1[j] = bns_val(n, 0, j) * rs;
        k2[j] = p->batch ? (float)(s1[j] / Rall) : 0.0f;
        k3[j] = p->batch ? (float)(s2[j] * rs * rs / Rall) : 0.0f;
    }
    const int add = !(n->grad_fresh & 1u);
#pragma omp parallel for schedule(static)
    for (int o = 0; o < R; o++) {
        const float *zr = z + (size_t)o * rC, *dr = dy + (size_t)o * C;
        float *gr = dz + (size_t)o * rC;
        for (int b = 0; b < r; b++) {
            const size_t q = (size_t)b * C;
            if (add) {
#pragma omp simd
                for (int c = 0; c < C; c++)
                    gr[q + c] += k1[q + c] * (dr[c] - k2[q + c] - (zr[q + c] - m[q + c]) * k3[q + c]);
            } else {
#pragma omp simd
                for (int c = 0; c < C; c++)
                    gr[q + c] = k1[q + c] * (dr[c] - k2[q + c] - (zr[q + c] - m[q + c]) * k3[q + c]);
            }
        }
    }
}

static const vt_opdef op_batchnorm_sum = {"batchnorm_sum", bns_fwd, bns_bwd, VT_READS(VT_READS_ALL_IN), NULL,
                                          VT_OP_OTHER};
/* With a residual (in[1 + 5r], r groups): the same op, its backward not reading the residual's values. */
#define BNS_RES(r) {"batchnorm_sum", bns_fwd, bns_bwd, VT_READS(VT_READS_ALL_IN & ~VT_READS_IN(1 + 5 * (r))), NULL, \
                    VT_OP_OTHER}
static const vt_opdef op_bns_res[BNS_MAXR] = {BNS_RES(1), BNS_RES(2), BNS_RES(3), BNS_RES(4)};

int vt_bnsum_fusable(const vt_node *n) { return n->op == &op_batchnorm_sum; }

int vt_bnsum_take_residual(vt_node *n, int samples, float drop) {
    bns_p *p = VT_OP_P(n, bns_p);
    n->op = &op_bns_res[p->r - 1];
    p->res = n->nin - 1;
    n->grad_sets |= 1u << p->res;
    if (drop > 0.0f) {
        if (!vt_node_save(n, 2, samples)) return -1;
        p->drop = drop;
        p->T = p->R / samples;
    }
    return 0;
}

vt_tensor *vt_batchnorm_sum(vt_graph *g, vt_tensor *z, int r, vt_tensor *const *t, float eps, float momentum) {
    if (vt_bad(g, 1, z)) return NULL;
    char sz[64];
    if (r < 1 || r > BNS_MAXR)
        return vt_fail(g, "batchnorm_sum", "%d groups (need 1 to %d)", r, BNS_MAXR);
    const int L = z->shape[z->ndim - 1], C = L / r;
    if (z->ndim < 2 || L % r)
        return vt_fail(g, "batchnorm_sum", "input %s: the last dim must hold %d groups of channels",
                       vt_shape_str(z, sz, 64), r);
    for (int k = 0; k < 5 * r; k++)
        if (vt_bad(g, 1, t[k])) return NULL;
    for (int k = 0; k < 5 * r; k++)
        if (k % 5 == 4 ? t[k]->numel != 1 : !is_vec(t[k], C))
            return vt_fail(g, "batchnorm_sum", "group %d's %s %s: must be (%d) (num_batches_tracked: one value)",
                           k / 5, (const char *[]){"weight", "bias", "running_mean", "running_var",
                                                   "num_batches_tracked"}[k % 5], t[k]->name, C);
    if (!(eps >= 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return vt_fail(g, "batchnorm_sum", "eps %g must be >= 0 and momentum %g in [0, 1]", (double)eps,
                       (double)momentum);
    const int64_t R = z->numel / L;
    if (g->training && R < 2)
        return vt_fail(g, "batchnorm_sum", "input %s: expected more than 1 value per channel when training",
                       vt_shape_str(z, sz, 64));
    int ys[VT_MAXDIM];
    memcpy(ys, z->shape, sizeof(int) * (size_t)z->ndim);
    ys[z->ndim - 1] = C;
    vt_tensor *in[VT_MAXIN] = {z};
    for (int k = 0; k < 5 * r; k++) in[1 + k] = t[k];
    vt_node *n = vt_new_node(g, &op_batchnorm_sum, in, 1 + 5 * r, vt_new_act(g, z->ndim, ys));
    if (!n) return NULL;
    n->grad_sets = 1u; /* dz covers every element of z */
    const int nch = stat_chunks(R, 1), rC = L;
    *VT_OP_P(n, bns_p) = (bns_p){.R = (int)R, .C = C, .r = r, .nch = nch, .batch = g->training,
                                 .update = g->training, .eps = eps, .momentum = momentum};
    const int64_t red = (int64_t)4 * nch * rC + 4 * rC;
    if (g->training) {
        vt_node_save(n, 0, rC);
        vt_node_save(n, 1, rC);
    }
    vt_node_work(n, 0, (g->training ? red : 0) + 3 * rC);
    vt_node_work(n, 1, red + 4 * rC);
    return n->out;
}
