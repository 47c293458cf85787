/* hMHSA's attention as one op (Xu et al. 2023, ../shared/specs/spec-hmhsa-cffn.md §1), equal to the plain chain
 * split_heads → matmul(q, kᵀ)·scale → [A_r, CHH(IHH(A_r))] → softmax → matmul(·, v) → merge_heads (checked in
 * tests/test_ops_hattn.c), without the (B, h, N, M) intermediates, permutes and concats of that chain:
 *   h2 = h/2 computed heads: A_r = scale·Q_j·K_jᵀ (queries and keys of h2 heads of d channels);
 *   IHH: per computed head j a 3x3 conv (padding 1, bias) over the keys' kh × kw grid of every query row; the klead
 *        keys before the grid bypass it unchanged; CHH: per (query, key) a 1x1 conv h2 -> h2 over the heads;
 *   the h2 hallucinated maps follow the computed ones, softmax over keys, ·V for all h heads (V has h heads).
 * The stages run in IHH, CHH order, or CHH first, or one of them, or none (the hallucinated maps copy A_r); in the
 * models' order (IHH, CHH) on grids of at least 3x3, with AVX2 or AVX-512, forward runs them and the softmax per query
 * row (hal_fused; with AVX-512 on 14-column grids, hal_rows: a grid row per vector; with AVX-512 on grids of at most
 * 64 keys and no lead keys, hal_tile: q·kᵀ too, in register tiles of query rows), and backward the gradients back
 * through them per query row too (hal_fused_bwd); other orders and grids run stage by stage. With AVX-512 and at most
 * 112 keys, backward's dO·vᵀ and the softmax's gradient run in the plain attention's register tiles (sktile.h).
 * Work unit: rows [r0, r0 + rows) of one batch entry, every head: the h × rows × M logits of a tile stay in cache and
 * IHH / CHH read them in place (queries are independent through both). Forward runs the tiles in parallel; where
 * hal_fused runs, it leaves the softmax's division to the tile's output rows (d floats a row, not M). Backward
 * recomputes a tile's logits and probabilities (nothing is saved), then the gradients back through softmax, CHH and
 * IHH; the keys' and values' gradients sum over the tiles of an entry, so either each thread owns whole batch
 * entries (enough of them) or the entries run one after another with their tiles in parallel, each thread summing
 * into its own dK/dV block that is added after the entry. The weights' gradients are summed per thread. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "sktile.h"
#include "mathfn.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

enum { ST_IHH = 1, ST_CHH = 2 };

#define CHH_GEMM 8 /* stage path: CHH over at least this many computed heads runs as one GEMM per tile, fewer as row
                    * loops (at 3 and 6 heads the GEMM was no faster; at 24, Next-ViT-S's last stage, 1.8x forward).
                    * The fused rows (hal_fused) beat that GEMM too: 7x7 keys, b16, eval forward of the op with 8 / 12
                    * / 24 computed heads 2.4-2.6 -> 1.9, 4.1 -> 3.3, 6.9 -> 6.0-6.3 ms (Intel Xeon Cascade Lake) */
#define TILE_FLOATS 131072 /* a tile's h × rows × M probabilities: about this many floats (512 KiB); measured on
                           * DeiT-T's shapes (b16, 6 heads of 32, 197 tokens): 32K floats 1.1-1.2x slower, a whole
                           * entry per tile no faster (the GEMMs' rows matter more than L2 here) */

#define TILES_WARM 4     /* tiles a thread runs at least, where the batch is small: its scratch (the tile's logits,
                          * probabilities and IHH outputs) is cold at the first, the ops between two calls of the op
                          * having evicted it, and warm at the next. DeiT-T hMHSA at batch 1 (197 queries, 2 threads:
                          * tiles of 99 rows, 460 KiB of probabilities a thread, against 25) ran the op at 0.42-0.49 of
                          * the linears' time, against 0.27-0.33 (AMD EPYC Zen 4, 2026-12-04, 3 alternated runs) */
#define TILE_ROWS_MIN 16 /* ... but not below this many query rows, the GEMMs' rows */

/* Input slots: in[0] = q, then kv, IHH weight and bias, CHH weight and bias (each -1 when absent). */
typedef struct {
    int B, N, M, H, h2, d, nt;
    int ldq, ldkv, q_off, k_off, v_off;
    int klead, kh, kw;
    int kv_in, iw_in, ib_in, cw_in, cb_in;
    int st[2], nst; /* the hallucination stages in order */
    int T, ntile;   /* rows per tile, tiles per batch entry */
    int by_entry;   /* backward: 1 threads own batch entries; 0 entries in sequence, tiles in parallel */
    float scale;
    const vt_gemm_plan *gemm;
} hattn_p;

/* Floats of the weights' gradient partials of one thread: IHH h2·9 + h2, CHH h2·h2 + h2. */
static size_t wg_floats(const hattn_p *a) { return (size_t)a->h2 * (11 + (size_t)a->h2); }
/* A zero-padded grid: (kh + 2) × (kw + 2) floats and one more at each end (read for discarded border outputs). */
static size_t pad_floats(const hattn_p *a) { return (size_t)(a->kh + 2) * (size_t)(a->kw + 2) + 2; }
static size_t tile_floats(const hattn_p *a) { return (size_t)a->T * (size_t)a->M; }

/* IHH's 3x3 correlations run over the padded grid as one flat vector: output k = yy·pw + c (c = x + 1 in
 * [0, pw), pw = kw + 2; the border columns c = 0 and pw − 1 are computed and discarded) reads the padded input at
 * k + dy·pw + dx − 1 for tap (dy, dx), one contiguous run per tap instead of kh short rows. */

/* Copies one row's kh × kw grid x into pad's interior; pad's border (and its two end floats) stay zero. pad points
 * at the first padded element (the slack float before it included in the buffer). */
static void fill_pad(const hattn_p *a, const float *x, float *pad) {
    const int pw = a->kw + 2;
    for (int yy = 0; yy < a->kh; yy++)
        memcpy(pad + (size_t)(yy + 1) * pw + 1, x + (size_t)yy * a->kw, sizeof(float) * (size_t)a->kw);
}

/* o (kh·pw flat outputs) = bias + Σ taps w[t]·pad shifted (see above), the nine taps summed in registers. */
static void corr3_flat(const hattn_p *a, const float *pad, const float *w, float bias, float *o) {
    const int pw = a->kw + 2, n = a->kh * pw;
    const float *p0 = pad - 1, *p1 = pad - 1 + pw, *p2 = pad - 1 + 2 * pw;
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
#pragma omp simd
    for (int k = 0; k < n; k++)
        o[k] = bias + (w0 * p0[k] + w1 * p0[k + 1] + w2 * p0[k + 2]) + (w3 * p1[k] + w4 * p1[k + 1] + w5 * p1[k + 2]) +
               (w6 * p2[k] + w7 * p2[k + 1] + w8 * p2[k + 2]);
}

/* y (the kh × kw grid) = (acc ? y : 0) + the interior columns of the flat outputs o. */
static void unpad(const hattn_p *a, const float *o, float *y, int acc) {
    const int pw = a->kw + 2, gw = a->kw;
    for (int yy = 0; yy < a->kh; yy++) {
        const float *src = o + (size_t)yy * pw + 1;
        float *dst = y + (size_t)yy * gw;
        if (acc) {
#pragma omp simd
            for (int x = 0; x < gw; x++) dst[x] += src[x];
        } else {
            memcpy(dst, src, sizeof(float) * (size_t)gw);
        }
    }
}

/* IHH forward without the padded copies (kh, kw >= 3): output k of the grid as one flat vector reads
 * x[k + dy·kw + dx]; the taps with dx = ±1 take weights multiplied by a column mask (ihh_masked: zero where the tap
 * would wrap into the neighbouring row), so border columns need no case of their own; above the first row and
 * below the last reads a zero row. The padded copies in and out of a scratch grid this replaced (short memcpy calls
 * per row) cost as much as the correlation on DeiT-T hMHSA's 14 × 14 key grid. */

/* y[i] = bias + the nine taps at outputs i in [0, len): r0, r1, r2 the rows above, at and below output 0 (each read
 * at i − 1, i, i + 1), m: the six masked weights at output 0 with stride n (taps 0, 2, 3, 5, 6, 8). */
static void corr3_span(const float *r0, const float *r1, const float *r2, const float *m, int n, const float *w,
                       float bias, float *y, int len, int acc) {
    const float *m0 = m, *m2 = m + n, *m3 = m + 2 * n, *m5 = m + 3 * n, *m6 = m + 4 * n, *m8 = m + 5 * n;
    const float w1 = w[1], w4 = w[4], w7 = w[7];
#define CORR3_AT(i)                                                                                               \
    (bias + (m0[i] * r0[i - 1] + w1 * r0[i] + m2[i] * r0[i + 1]) +                                                 \
     (m3[i] * r1[i - 1] + w4 * r1[i] + m5[i] * r1[i + 1]) + (m6[i] * r2[i - 1] + w7 * r2[i] + m8[i] * r2[i + 1]))
    if (acc) {
#pragma omp simd
        for (int i = 0; i < len; i++) y[i] += CORR3_AT(i);
    } else {
#pragma omp simd
        for (int i = 0; i < len; i++) y[i] = CORR3_AT(i);
    }
#undef CORR3_AT
}

/* corr3_span's masked weights of one head: for taps 0, 2, 3, 5, 6, 8 (dx = −1, +1), kh·kw floats each. */
static void ihh_masked(const hattn_p *a, const float *w, float *m) {
    const int kw = a->kw, n = a->kh * kw;
    static const int tap[6] = {0, 2, 3, 5, 6, 8};
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < n; k++) {
            const int c = k % kw + (tap[i] % 3 == 0 ? -1 : 1);
            m[(size_t)i * n + k] = c >= 0 && c < kw ? w[tap[i]] : 0.0f;
        }
}

/* Output (yy, xx) of the zero-padded 3x3 correlation of grid x, summed as corr3_span. */
static float corr3_at(const hattn_p *a, const float *x, const float *w, float bias, int yy, int xx) {
    float t[3] = {0.0f, 0.0f, 0.0f};
    for (int dy = -1; dy <= 1; dy++) {
        if (yy + dy < 0 || yy + dy >= a->kh) continue;
        const float *r = x + (size_t)(yy + dy) * a->kw + xx, *wr = w + 3 * (dy + 1);
        t[dy + 1] = (xx > 0 ? wr[0] * r[-1] : 0.0f) + wr[1] * r[0] + (xx + 1 < a->kw ? wr[2] * r[1] : 0.0f);
    }
    return bias + t[0] + t[1] + t[2];
}

/* y (= or += when acc) IHH(x) on one grid (kh, kw >= 3) with a head's masked weights m; z: kw + 2 zeros. Spans:
 * the first row from column 1, the rows between from (1, 1) to (kh − 2, kw − 2), the last row to column kw − 2; the
 * four outputs left ((0, 0), (1, 0), (kh − 2, kw − 1), (kh − 1, kw − 1)) would read outside x through the flat
 * layout. */
static void corr3_grid(const hattn_p *a, const float *x, const float *w, const float *m, float bias, const float *z,
                       float *y, int acc) {
    const int kw = a->kw, n = a->kh * kw, k1 = n - kw, at[4] = {0, kw, k1 - 1, n - 1};
    corr3_span(z + 1, x + 1, x + kw + 1, m + 1, n, w, bias, y + 1, kw - 1, acc);
    corr3_span(x + 1, x + kw + 1, x + 2 * kw + 1, m + kw + 1, n, w, bias, y + kw + 1, n - 2 * kw - 2, acc);
    corr3_span(x + k1 - kw, x + k1, z + 1, m + k1, n, w, bias, y + k1, kw - 1, acc);
    for (int i = 0; i < 4; i++) {
        const float v = corr3_at(a, x, w, bias, at[i] / kw, at[i] % kw);
        y[at[i]] = acc ? y[at[i]] + v : v;
    }
}

/* IHH's weight and bias gradients of one grid, unpadded: gw[t] += Σ_k dout[k]·x[k + dy·kw + dx] over the outputs k
 * whose tap t stays inside the grid (the k range keeps the row inside, the column masks cm, 1 − [k % kw == 0] for
 * dx = −1 then 1 − [k % kw == kw − 1] for dx = +1, the column); *gb += Σ_k dout[k]. */
static void ihh_wgrad(const hattn_p *a, const float *x, const float *dout, const float *cm, float *gw, float *gb) {
    const int kw = a->kw, n = a->kh * kw;
    for (int t = 0; t < 9; t++) {
        const int off = (t / 3 - 1) * kw + t % 3 - 1, k0 = off < 0 ? -off : 0, k1 = off > 0 ? n - off : n;
        const float *xs = x + off;
        float s = 0.0f;
        if (t % 3 == 1) {
#pragma omp simd reduction(+ : s)
            for (int k = k0; k < k1; k++) s += dout[k] * xs[k];
        } else {
            const float *mk = cm + (t % 3 ? n : 0);
#pragma omp simd reduction(+ : s)
            for (int k = k0; k < k1; k++) s += dout[k] * mk[k] * xs[k];
        }
        gw[t] += s;
    }
    float sb = 0.0f;
#pragma omp simd reduction(+ : sb)
    for (int k = 0; k < n; k++) sb += dout[k];
    *gb += sb;
}

/* One stage forward on rows × M maps of h2 heads (head stride hs): in -> out. pad: stage_scratch floats (below). */
static void stage_fwd(const hattn_p *a, int st, const float *w, const float *b, const float *in, float *out, size_t hs,
                      int rows, float *pad) {
    const int h2 = a->h2, M = a->M, L = a->klead;
    if (st == ST_CHH && h2 >= CHH_GEMM) { /* out (h2 × rows·M) = bias + W · in */
        const size_t n = (size_t)rows * M;
        for (int i = 0; i < h2; i++) {
            float *o = out + i * hs;
            const float bi = b ? b[i] : 0.0f;
#pragma omp simd
            for (size_t e = 0; e < n; e++) o[e] = bi;
        }
        vt_gemm(a->gemm, 0, 0, h2, (int)n, h2, 1.0f, w, h2, in, (int)hs, 1.0f, out, (int)hs);
        return;
    }
    if (st == ST_CHH) { /* row by row: a row's h2 inputs and output stay in L1 */
        for (int r = 0; r < rows; r++) {
            const size_t ro = (size_t)r * M;
            for (int i = 0; i < h2; i++) {
                float *o = out + i * hs + ro;
                const float bi = b ? b[i] : 0.0f;
#pragma omp simd
                for (int e = 0; e < M; e++) o[e] = bi;
                for (int j = 0; j < h2; j++) {
                    const float wv = w[i * h2 + j], *x = in + j * hs + ro;
#pragma omp simd
                    for (int e = 0; e < M; e++) o[e] += wv * x[e];
                }
            }
        }
        return;
    }
    if (a->kh >= 3 && a->kw >= 3) {
        const size_t n = (size_t)a->kh * a->kw;
        float *z = pad + 6 * n;
        memset(z, 0, sizeof(float) * (size_t)(a->kw + 2));
        for (int j = 0; j < h2; j++) {
            ihh_masked(a, w + 9 * j, pad);
            for (int r = 0; r < rows; r++) {
                const float *x = in + j * hs + (size_t)r * M;
                float *y = out + j * hs + (size_t)r * M;
                for (int k = 0; k < L; k++) y[k] = x[k];
                corr3_grid(a, x + L, w + 9 * j, pad, b ? b[j] : 0.0f, z, y + L, 0);
            }
        }
        return;
    }
    memset(pad, 0, 2 * sizeof(float) * pad_floats(a));
    float *pin = pad + 1, *o = pad + pad_floats(a);
    for (int j = 0; j < h2; j++)
        for (int r = 0; r < rows; r++) {
            const float *x = in + j * hs + (size_t)r * M;
            float *y = out + j * hs + (size_t)r * M;
            for (int k = 0; k < L; k++) y[k] = x[k];
            fill_pad(a, x + L, pin);
            corr3_flat(a, pin, w + 9 * j, b ? b[j] : 0.0f, o);
            unpad(a, o, y + L, 0);
        }
}

#ifdef VT_VW
/* IHH then CHH fused per query row (the models' order; grids of at least 3x3): each computed head's
 * row is copied into a zero-bordered grid, its 3x3 correlation computed a vector at a time into a row buffer, CHH
 * mixes those buffers into the hallucinated rows, and every head's softmax runs on that query row while it is in L1.
 * The stage-by-stage path passes each tile's h2 maps through L2 three times (IHH, CHH, softmax); this one once.
 * The columns' wrap-around of the flat grid is masked per output (cmL, cmR: 0 in the first or last column). */
static int hal_fused_ok(const hattn_p *a) {
    return a->nst == 2 && a->st[0] == ST_IHH && a->kh >= 3 && a->kw >= 3;
}

static int vw_round(int n) { return (n + VT_VW - 1) / VT_VW * VT_VW; }

/* One vector of the 3x3 correlation on a zero-bordered grid: outputs k .. k + VT_VW − 1 at g (the grid's interior
 * at output k, row width kw), taps w[0..8] (broadcast), column masks mL, mR (0 where a dx = −1 or +1 tap would wrap
 * into the neighbouring row), plus bias. */
static inline vt_vf corr3_vec(const float *g, int kw, const vt_vf *w, vt_vf mL, vt_vf mR, vt_vf bias) {
    const float *u = g - kw, *c = g, *d = g + kw;
    vt_vf m = VT_VPS(mul)(w[1], VT_VPS(loadu)(u));
    m = VT_VPS(fmadd)(w[4], VT_VPS(loadu)(c), m);
    m = VT_VPS(fmadd)(w[7], VT_VPS(loadu)(d), m);
    vt_vf l = VT_VPS(mul)(w[0], VT_VPS(loadu)(u - 1));
    l = VT_VPS(fmadd)(w[3], VT_VPS(loadu)(c - 1), l);
    l = VT_VPS(fmadd)(w[6], VT_VPS(loadu)(d - 1), l);
    vt_vf r = VT_VPS(mul)(w[2], VT_VPS(loadu)(u + 1));
    r = VT_VPS(fmadd)(w[5], VT_VPS(loadu)(c + 1), r);
    r = VT_VPS(fmadd)(w[8], VT_VPS(loadu)(d + 1), r);
    return VT_VPS(fmadd)(mR, r, VT_VPS(fmadd)(mL, l, VT_VPS(add)(bias, m)));
}

/* corr3_vec's column masks over a grid of n outputs, rows of kw: cmL 0 in the first column, cmR 0 in the last, 1
 * elsewhere (the floats after n stay as they are: zero in the callers' scratch). */
static void col_masks(int kw, int n, float *cmL, float *cmR) {
    for (int k = 0; k < n; k++) {
        cmL[k] = k % kw ? 1.0f : 0.0f;
        cmR[k] = k % kw != kw - 1 ? 1.0f : 0.0f;
    }
}

/* Floats of a thread's fused scratch: h2 bordered grids, two column masks, h2 IHH rows, h2 CHH rows and 2·h2 row
 * maxima. */
static size_t hal_fused_floats(const hattn_p *a) {
    const size_t n = (size_t)vw_round(a->kh * a->kw), m = (size_t)vw_round(a->M) + VT_VW;
    return (size_t)a->h2 * (n + 2 * (size_t)a->kw + 2) + 2 * n + 2 * (size_t)a->h2 * (m + 1);
}

/* The largest of m and the n floats at x. */
static inline float max_from(const float *x, int n, float m) {
    for (int k = 0; k < n; k++) m = x[k] > m ? x[k] : m;
    return m;
}

/* Copies the n floats at x to g and returns their maximum (with m: the max so far). */
static inline float copy_max(const float *x, float *g, int n, float m) {
    int k = 0;
    if (n >= VT_VW) {
        vt_vf mv = VT_VPS(set1)(m);
        for (; k + VT_VW <= n; k += VT_VW) {
            const vt_vf v = VT_VPS(loadu)(x + k);
            VT_VPS(storeu)(g + k, v);
            mv = VT_VPS(max)(mv, v);
        }
        m = vt_vhreduce(mv, 1);
    }
    memcpy(g + k, x + k, sizeof(float) * (size_t)(n - k));
    return max_from(x + k, n - k, m);
}

/* CHH on one query row: out_i = cb_i + Σ_j cw[i·h2 + j]·ihh_j for the h2 hallucinated heads (rows ms floats apart,
 * whole vectors: the floats past M are computed too and ignored), and mx[i] the maximum of out_i's first M floats.
 * Each vector of the h2 inputs is loaded once for all outputs; H2 <= 8 (a constant where inlined) keeps them in
 * registers. */
static inline __attribute__((always_inline)) void chh_row(const float *cw, const float *cb, const float *ihh,
                                                          size_t ms, float *out, int M, const int H2, float *mx) {
    const int nv = M / VT_VW * VT_VW;
    vt_vf mv[8], x[8];
    for (int i = 0; i < H2; i++) mv[i] = VT_VPS(set1)(-INFINITY);
    for (int k = 0; k < M; k += VT_VW) {
        for (int j = 0; j < H2; j++) x[j] = VT_VPS(loadu)(ihh + (size_t)j * ms + k);
        for (int i = 0; i < H2; i++) {
            vt_vf o = VT_VPS(set1)(cb ? cb[i] : 0.0f);
            for (int j = 0; j < H2; j++) o = VT_VPS(fmadd)(VT_VPS(set1)(cw[i * H2 + j]), x[j], o);
            VT_VPS(storeu)(out + (size_t)i * ms + k, o);
            if (k < nv) mv[i] = VT_VPS(max)(mv[i], o);
        }
    }
    for (int i = 0; i < H2; i++)
        mx[i] = max_from(out + (size_t)i * ms + nv, M - nv, nv ? vt_vhreduce(mv[i], 1) : -INFINITY);
}

/* y = softmax(x) over a row of M (maximum mx), or with inv its exponentials only and *inv = 1 / their sum. */
static inline void softmax_or_exp(const float *x, float *y, int M, float mx, float *inv) {
    if (inv)
        *inv = 1.0f / vt_exp_row_max(x, y, M, mx);
    else
        vt_softmax_row_max(x, y, M, mx);
}

/* Rows [0, rows) of the tile: src (h2 computed logit maps, head stride hs; S in backward, else P itself) ->
 * P's probabilities of every head, or with inv (H·rows floats) the unnormalised exponentials and inv[i·rows + r] = 1
 * / row r's sum in head i (vt_exp_row_max); U (NULL in forward): the IHH outputs, CHH's input, kept for backward.
 * Each row's maximum comes out of the pass that writes or copies it (the grid copy, CHH), so the softmaxes skip
 * theirs. */
static void hal_fused(const hattn_p *a, const float *iw, const float *ib, const float *cw, const float *cb,
                      const float *src, float *P, float *U, float *inv, size_t hs, int rows, float *buf) {
    const int h2 = a->h2, M = a->M, L = a->klead, kw = a->kw, n = a->kh * kw, np = vw_round(n);
    const int gs = np + 2 * kw + 2, ms = vw_round(M) + VT_VW;
    float *grid = buf, *cmL = grid + (size_t)h2 * gs, *cmR = cmL + np, *ihh = cmR + np, *out = ihh + (size_t)h2 * ms;
    float *smx = out + (size_t)h2 * ms, *hmx = smx + h2; /* the rows' maxima: computed, hallucinated heads */
    memset(buf, 0, sizeof(float) * hal_fused_floats(a));
    col_masks(kw, n, cmL, cmR);
    for (int r = 0; r < rows; r++) {
        for (int j = 0; j < h2; j++) {
            const float *x = src + j * hs + (size_t)r * M, *w = iw + 9 * j;
            float *g = grid + (size_t)j * gs + kw + 1, *y = ihh + (size_t)j * ms;
            memcpy(y, x, sizeof(float) * (size_t)L); /* the lead keys bypass IHH */
            smx[j] = copy_max(x + L, g, n, max_from(x, L, -INFINITY));
            vt_vf wv[9];
            for (int t = 0; t < 9; t++) wv[t] = VT_VPS(set1)(w[t]);
            const vt_vf bj = VT_VPS(set1)(ib ? ib[j] : 0.0f);
            for (int k = 0; k < np; k += VT_VW)
                VT_VPS(storeu)(y + L + k,
                               corr3_vec(g + k, kw, wv, VT_VPS(loadu)(cmL + k), VT_VPS(loadu)(cmR + k), bj));
            if (U) memcpy(U + j * hs + (size_t)r * M, y, sizeof(float) * (size_t)M);
        }
        switch (h2) { /* the models' computed heads: DeiT 3, PVTv2 1 / 2 / 5 / 8, Next-ViT 4 / 8 (its 12 to 24: the loop) */
        case 1: chh_row(cw, cb, ihh, ms, out, M, 1, hmx); break;
        case 2: chh_row(cw, cb, ihh, ms, out, M, 2, hmx); break;
        case 3: chh_row(cw, cb, ihh, ms, out, M, 3, hmx); break;
        case 4: chh_row(cw, cb, ihh, ms, out, M, 4, hmx); break;
        case 5: chh_row(cw, cb, ihh, ms, out, M, 5, hmx); break;
        case 6: chh_row(cw, cb, ihh, ms, out, M, 6, hmx); break;
        case 8: chh_row(cw, cb, ihh, ms, out, M, 8, hmx); break;
        default:
            for (int i = 0; i < h2; i++) {
                const vt_vf bi = VT_VPS(set1)(cb ? cb[i] : 0.0f);
                for (int k = 0; k < M; k += VT_VW) {
                    vt_vf o = bi;
                    for (int j = 0; j < h2; j++)
                        o = VT_VPS(fmadd)(VT_VPS(set1)(cw[i * h2 + j]), VT_VPS(loadu)(ihh + (size_t)j * ms + k), o);
                    VT_VPS(storeu)(out + (size_t)i * ms + k, o);
                }
                hmx[i] = max_from(out + (size_t)i * ms, M, -INFINITY);
            }
        }
        for (int i = 0; i < h2; i++)
            softmax_or_exp(out + (size_t)i * ms, P + (h2 + i) * hs + (size_t)r * M, M, hmx[i],
                           inv ? inv + (size_t)(h2 + i) * rows + r : NULL);
        for (int j = 0; j < h2; j++)
            softmax_or_exp(src + j * hs + (size_t)r * M, P + j * hs + (size_t)r * M, M, smx[j],
                           inv ? inv + (size_t)j * rows + r : NULL);
    }
}

#if VT_VW == 16
/* hal_fused's forward on grids of at most 14 columns with AVX-512: a grid row is one vector, its kw keys in lanes
 * 1 .. kw and zeros in the others, which are the 3x3 correlation's left and right borders; the taps dx = ±1 are the
 * row shifted by one lane (valignd), the rows above and below a rolling window of registers. IHH's and CHH's outputs
 * stay in that layout (aligned scratch), and the hallucinated probabilities go to P's rows through masked stores.
 * hal_fused's flat grid reads eleven unaligned vectors per output vector, most of them split across two cache lines
 * at 512 bits, but packs the grid densely: the rows win only where they are no more vectors than the flat grid plus
 * one. The op's eval forward at batch 16, alternated in one process (Intel Xeon Ice Lake, 2026-11-29): DeiT-Ti's 14 x
 * 14 keys (1.09-1.17x; its training step's op 1.09x), 10 x 10 1.01x, 8 x 8 0.99x, PVTv2-b1's and Next-ViT-S's 7 x 7
 * 0.92-0.97x in one run, 0.97-1.10x in another: those keep hal_fused. Backward stays with hal_fused_bwd (IHH's
 * gradients in this layout: 1.02-1.04x at 14 x 14, 0.98x at 7 x 7). */
static int hal_rows_ok(const hattn_p *a) {
    return hal_fused_ok(a) && a->kw <= VT_VW - 2 && a->kh * VT_VW <= vw_round(a->kh * a->kw) + VT_VW;
}

/* Floats of a thread's hal_rows scratch: IHH's and CHH's h2 × kh row vectors, their h2 × klead lead keys, 2·h2
 * maxima and a vector's worth for the alignment. */
static size_t hal_rows_floats(const hattn_p *a) {
    return 2 * (size_t)a->h2 * ((size_t)a->kh * VT_VW + (size_t)a->klead + 1) + VT_VW;
}

/* v's lanes moved up by one (lane i = v[i − 1], lane 0 = 0), and down by one (lane i = v[i + 1], lane 15 = 0). */
static inline __m512 lane_up(__m512 v) {
    return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), _mm512_setzero_si512(), 15));
}
static inline __m512 lane_down(__m512 v) {
    return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_setzero_si512(), _mm512_castps_si512(v), 1));
}

/* The 3x3 correlation (taps w, plus bias) of a kh × kw grid whose row yy is the masked load (gm: lanes 1 .. kw) at
 * x + yy·rs, into kh row vectors y; returns the largest of the grid's values. */
static float corr_rows(const hattn_p *a, const float *x, size_t rs, const float *w, float bias, __mmask16 gm,
                       float *y) {
    const int kh = a->kh;
    __m512 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(w[t]);
    const __m512 z = _mm512_setzero_ps(), bv = _mm512_set1_ps(bias);
    __m512 mx = _mm512_set1_ps(-INFINITY), pc = z, pl = z, pr = z;
    __m512 cc = _mm512_maskz_loadu_ps(gm, x), cl = lane_up(cc), cr = lane_down(cc);
    for (int yy = 0; yy < kh; yy++) {
        const __m512 nc = yy + 1 < kh ? _mm512_maskz_loadu_ps(gm, x + (size_t)(yy + 1) * rs) : z;
        const __m512 nl = lane_up(nc), nr = lane_down(nc);
        __m512 s0 = _mm512_fmadd_ps(wv[0], pl, bv), s1 = _mm512_mul_ps(wv[1], pc), s2 = _mm512_mul_ps(wv[2], pr);
        s0 = _mm512_fmadd_ps(wv[3], cl, s0);
        s1 = _mm512_fmadd_ps(wv[4], cc, s1);
        s2 = _mm512_fmadd_ps(wv[5], cr, s2);
        s0 = _mm512_fmadd_ps(wv[6], nl, s0);
        s1 = _mm512_fmadd_ps(wv[7], nc, s1);
        s2 = _mm512_fmadd_ps(wv[8], nr, s2);
        _mm512_storeu_ps(y + (size_t)yy * VT_VW, _mm512_add_ps(_mm512_add_ps(s0, s1), s2));
        mx = _mm512_mask_max_ps(mx, gm, mx, cc);
        pl = cl, pc = cc, pr = cr, cl = nl, cc = nc, cr = nr;
    }
    return _mm512_reduce_max_ps(mx);
}

/* CHH on the lead keys (L of them, head stride L) of output head i of h2: outL[i·L + k]; returns the largest of them
 * and m. */
static float chh_lead(const float *cw, const float *cb, const float *inL, int L, int h2, int i, float *outL, float m) {
    for (int k = 0; k < L; k++) {
        float o = cb ? cb[i] : 0.0f;
        for (int j = 0; j < h2; j++) o += cw[i * h2 + j] * inL[j * L + k];
        outL[i * L + k] = o;
        m = o > m ? o : m;
    }
    return m;
}

/* CHH over the row vectors (nv of them, head stride vs) and the L lead keys: out_i = cb_i + Σ_j cw[i·H2 + j]·in_j,
 * mx[i] the largest of out_i's keys (lanes gm). H2 <= 8 (a constant where inlined) keeps each vector of the inputs in
 * registers for all outputs; H2 = 0: any h2 heads, the inputs loaded for each output. */
static inline __attribute__((always_inline)) void chh_rows(const float *cw, const float *cb, const float *in,
                                                           const float *inL, int nv, size_t vs, int L, float *out,
                                                           float *outL, __mmask16 gm, const int H2, int h2,
                                                           float *mx) {
    if (!H2) {
        for (int i = 0; i < h2; i++) {
            const __m512 bi = _mm512_set1_ps(cb ? cb[i] : 0.0f);
            __m512 mv = _mm512_set1_ps(-INFINITY);
            for (int v = 0; v < nv; v++) {
                __m512 o = bi;
                for (int j = 0; j < h2; j++)
                    o = _mm512_fmadd_ps(_mm512_set1_ps(cw[i * h2 + j]), _mm512_loadu_ps(in + j * vs + v * VT_VW), o);
                _mm512_storeu_ps(out + i * vs + (size_t)v * VT_VW, o);
                mv = _mm512_mask_max_ps(mv, gm, mv, o);
            }
            mx[i] = chh_lead(cw, cb, inL, L, h2, i, outL, _mm512_reduce_max_ps(mv));
        }
        return;
    }
    __m512 mv[8], x[8];
    for (int i = 0; i < H2; i++) mv[i] = _mm512_set1_ps(-INFINITY);
    for (int v = 0; v < nv; v++) {
        for (int j = 0; j < H2; j++) x[j] = _mm512_loadu_ps(in + j * vs + (size_t)v * VT_VW);
        for (int i = 0; i < H2; i++) {
            __m512 o = _mm512_set1_ps(cb ? cb[i] : 0.0f);
            for (int j = 0; j < H2; j++) o = _mm512_fmadd_ps(_mm512_set1_ps(cw[i * H2 + j]), x[j], o);
            _mm512_storeu_ps(out + i * vs + (size_t)v * VT_VW, o);
            mv[i] = _mm512_mask_max_ps(mv[i], gm, mv[i], o);
        }
    }
    for (int i = 0; i < H2; i++) mx[i] = chh_lead(cw, cb, inL, L, H2, i, outL, _mm512_reduce_max_ps(mv[i]));
}

/* The softmax of one hallucinated row (kh row vectors y, L lead keys yL, maximum m) into P's row p. */
static void softmax_rows(const hattn_p *a, float *y, const float *yL, float m, __mmask16 gm, float *p) {
    const int kh = a->kh, kw = a->kw, L = a->klead;
    const __m512 vm = _mm512_set1_ps(m);
    __m512 vs = _mm512_setzero_ps();
    for (int v = 0; v < kh; v++) { /* the lanes outside gm: e^0, left out of the sum */
        const __m512 e = vt_vexpf_le0(_mm512_maskz_sub_ps(gm, _mm512_loadu_ps(y + (size_t)v * VT_VW), vm));
        _mm512_storeu_ps(y + (size_t)v * VT_VW, e);
        vs = _mm512_mask_add_ps(vs, gm, vs, e);
    }
    float s = _mm512_reduce_add_ps(vs);
    for (int k = 0; k < L; k++) s += p[k] = vt_expf_le0(yL[k] - m);
    const float inv = 1.0f / s;
    for (int k = 0; k < L; k++) p[k] *= inv;
    const __m512 vi = _mm512_set1_ps(inv);
    for (int v = 0; v < kh; v++)
        _mm512_mask_storeu_ps(p + (size_t)v * kw + L - 1, gm,
                              _mm512_mul_ps(_mm512_loadu_ps(y + (size_t)v * VT_VW), vi));
}

/* hal_fused's work (same arguments) on grids of at most VT_VW − 2 columns, in the row vectors above. */
static void hal_rows(const hattn_p *a, const float *iw, const float *ib, const float *cw, const float *cb,
                     const float *src, float *P, float *U, size_t hs, int rows, float *buf) {
    const int h2 = a->h2, M = a->M, L = a->klead, kh = a->kh;
    const size_t vs = (size_t)kh * VT_VW;
    const __mmask16 gm = (__mmask16)(((1u << a->kw) - 1) << 1);
    float *ihh = (float *)(((uintptr_t)buf + 63) & ~(uintptr_t)63), *out = ihh + h2 * vs, *ihhL = out + h2 * vs;
    float *outL = ihhL + (size_t)h2 * L, *smx = outL + (size_t)h2 * L, *hmx = smx + h2;
    for (int r = 0; r < rows; r++) {
        const size_t ro = (size_t)r * M;
        for (int j = 0; j < h2; j++) {
            const float *x = src + j * hs + ro;
            float *u = U ? U + j * hs + ro : NULL;
            float m = corr_rows(a, x + L - 1, (size_t)a->kw, iw + 9 * j, ib ? ib[j] : 0.0f, gm, ihh + j * vs);
            for (int k = 0; k < L; k++) m = x[k] > m ? x[k] : m;
            memcpy(ihhL + (size_t)j * L, x, sizeof(float) * (size_t)L); /* the lead keys bypass IHH */
            if (u) {
                memcpy(u, x, sizeof(float) * (size_t)L);
                for (int v = 0; v < kh; v++)
                    _mm512_mask_storeu_ps(u + (size_t)v * a->kw + L - 1, gm, _mm512_loadu_ps(ihh + j * vs + v * VT_VW));
            }
            smx[j] = m;
        }
        switch (h2) { /* as hal_fused's */
        case 1: chh_rows(cw, cb, ihh, ihhL, kh, vs, L, out, outL, gm, 1, h2, hmx); break;
        case 2: chh_rows(cw, cb, ihh, ihhL, kh, vs, L, out, outL, gm, 2, h2, hmx); break;
        case 3: chh_rows(cw, cb, ihh, ihhL, kh, vs, L, out, outL, gm, 3, h2, hmx); break;
        case 4: chh_rows(cw, cb, ihh, ihhL, kh, vs, L, out, outL, gm, 4, h2, hmx); break;
        case 5: chh_rows(cw, cb, ihh, ihhL, kh, vs, L, out, outL, gm, 5, h2, hmx); break;
        case 6: chh_rows(cw, cb, ihh, ihhL, kh, vs, L, out, outL, gm, 6, h2, hmx); break;
        case 8: chh_rows(cw, cb, ihh, ihhL, kh, vs, L, out, outL, gm, 8, h2, hmx); break;
        default: chh_rows(cw, cb, ihh, ihhL, kh, vs, L, out, outL, gm, 0, h2, hmx);
        }
        for (int i = 0; i < h2; i++)
            softmax_rows(a, out + i * vs, outL + (size_t)i * L, hmx[i], gm, P + (h2 + i) * hs + ro);
        for (int j = 0; j < h2; j++) vt_softmax_row_max(src + j * hs + ro, P + j * hs + ro, M, smx[j]);
    }
}

/* hal_tile: the whole forward of the maps, q·kᵀ included, for key grids of at most 64 keys with no lead keys
 * (PVTv2's and Next-ViT's 7 x 7 reduced keys), on AVX-512. A tile of HT_R query rows runs each computed head's
 * logits as register products over its transposed keys (vt_keys_t, once per call; a library GEMM per tile and head
 * packed its operand per call, d = 16 or 32 deep), IHH in the registers of the flat row (the tap (dy, dx) is the row
 * moved by dy·kw + dx lanes across its neighbouring vectors, one two-source lane permute, the columns' wrap-around
 * masked), CHH over the tile's IHH rows, and the softmaxes of the tile's rows side by side, so that the reductions
 * of several rows overlap where hal_fused waited on one row's at a time, and no grid is copied and read back
 * unaligned (those loads straddled the copy's stores, which stalled them). */
#define HT_R 4  /* query rows per tile */
#define HT_NV 4 /* key vectors at most: M <= 64 */

/* Up to 15 columns the taps are at most 16 lanes away, so each output vector reads only its neighbours. */
static int hal_tile_ok(const hattn_p *a) {
    return hal_fused_ok(a) && a->klead == 0 && a->M <= 16 * HT_NV && a->kw <= 15;
}

/* Floats of a thread's hal_tile scratch: h2 transposed key blocks (d × Mv), the tile's logits of one head, h2
 * heads' IHH rows and CHH's rows of one head (HT_R × HT_NV vectors each), and a vector's worth for the alignment. */
static size_t hal_tile_floats(const hattn_p *a) {
    const size_t Mv = (size_t)(a->M + 15) / 16 * 16;
    return (size_t)a->h2 * a->d * Mv + ((size_t)a->h2 + 2) * HT_R * HT_NV * 16 + 16;
}

/* Softmax over keys (lanes lm of NV vectors per row) of the rows < rows of x (HT_R rows of HT_NV vectors), into
 * out's rows (M floats apart). */
static inline __attribute__((always_inline)) void ht_softmax(const __m512 *x, int rows, const __mmask16 *lm,
                                                             float *out, int M, const int NV) {
    __m512 e[HT_R][VT_SK_NV], red[HT_R];
    float mx[HT_R];
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 4
    for (int r = 0; r < HT_R; r++) {
        red[r] = ninf;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            e[r][v] = _mm512_mask_mov_ps(ninf, lm[v], x[r * HT_NV + v]);
            red[r] = _mm512_max_ps(red[r], e[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < HT_R; r++) mx[r] = _mm512_reduce_max_ps(red[r]);
    vt_sk_softmax_store(e, mx, rows, lm, out, M, HT_R, NV);
}

/* One tile: rows [0, rows) (rows <= HT_R) of q (row 0 at qr, row stride ldq, head j at j·d) against the transposed
 * keys Kt (head j at j·d·16·NV) -> P's probabilities of every head (head stride hs, row stride M); S, U (NULL in
 * forward): the computed logits and the IHH outputs, for backward. ix: the 3x3 taps' lane permutes (tap 4, the
 * centre, unused), cm: per vector, the lanes a dx = −1 (cm[0][v]) or +1 (cm[1][v]) tap may read. buf: aligned
 * scratch of (h2 + 2)·HT_R·HT_NV vectors. NV (key vectors) is a constant where inlined. */
static inline __attribute__((always_inline)) void ht_tile(const hattn_p *a, const float *qr, const float *Kt,
                                                          const float *iw, const float *ib, const float *cw,
                                                          const float *cb, const __m512i *ix, __mmask16 cm[2][HT_NV],
                                                          float *P, float *S, float *U, size_t hs, int rows,
                                                          __m512 *buf, const int NV) {
    const int M = a->M, d = a->d, h2 = a->h2;
    const size_t ldt = 16 * (size_t)NV, T = HT_R * HT_NV;
    __m512 *lg = buf, *co = buf + T, *ih = buf + 2 * T; /* the logits, CHH's output, IHH's outputs (h2 heads) */
    __mmask16 lm[HT_NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) lm[v] = M - 16 * v >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (M - 16 * v)) - 1u);
    const float *qp[HT_R];
#pragma GCC unroll 4
    for (int r = 0; r < HT_R; r++) qp[r] = qr + (size_t)(r < rows ? r : rows - 1) * a->ldq; /* rows past: the last */
    const __m512 vs = _mm512_set1_ps(a->scale), z = _mm512_setzero_ps();
    for (int j = 0; j < h2; j++) {
        __m512 acc[HT_R][HT_NV];
        const float *kt = Kt + (size_t)j * d * ldt;
#pragma GCC unroll 4
        for (int r = 0; r < HT_R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = z;
        for (int c = 0; c < d; c++) {
            __m512 kv[HT_NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                kv[v] = _mm512_loadu_ps(kt + (size_t)c * ldt + 16 * v);
                __asm__("" : "+v"(kv[v])); /* kept in a register (as sk_tile's in attention.c) */
            }
#pragma GCC unroll 4
            for (int r = 0; r < HT_R; r++) {
                const __m512 x = _mm512_set1_ps(qp[r][j * d + c]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(x, kv[v], acc[r][v]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < HT_R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) { /* zero past M: the grid's padding below its last row */
                lg[r * HT_NV + v] = _mm512_maskz_mul_ps(lm[v], acc[r][v], vs);
                if (S && r < rows) _mm512_mask_storeu_ps(S + j * hs + (size_t)r * M + 16 * v, lm[v], lg[r * HT_NV + v]);
            }
        __m512 w[9];
        for (int t = 0; t < 9; t++) w[t] = _mm512_set1_ps(iw[9 * j + t]);
        const __m512 bj = _mm512_set1_ps(ib ? ib[j] : 0.0f);
#pragma GCC unroll 4
        for (int r = 0; r < HT_R; r++) {
            const __m512 *x = lg + r * HT_NV;
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                const __m512 lo = v ? x[v - 1] : z, hi = v + 1 < NV ? x[v + 1] : z;
                __m512 o = _mm512_fmadd_ps(w[4], x[v], bj);
#pragma GCC unroll 9
                for (int t = 0; t < 9; t++) {
                    if (t == 4) continue;
                    const __m512 y = t > 4 ? _mm512_permutex2var_ps(x[v], ix[t], hi)
                                           : _mm512_permutex2var_ps(lo, ix[t], x[v]);
                    o = t % 3 == 1 ? _mm512_fmadd_ps(w[t], y, o) : _mm512_mask3_fmadd_ps(w[t], y, o, cm[t % 3 / 2][v]);
                }
                ih[(size_t)(j * HT_R + r) * HT_NV + v] = o;
                if (U && r < rows) _mm512_mask_storeu_ps(U + j * hs + (size_t)r * M + 16 * v, lm[v], o);
            }
        }
        ht_softmax(lg, rows, lm, P + j * hs, M, NV);
    }
    for (int i = 0; i < h2; i++) {
        const __m512 bi = _mm512_set1_ps(cb ? cb[i] : 0.0f);
#pragma GCC unroll 4
        for (int r = 0; r < HT_R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                __m512 o = bi;
                for (int j = 0; j < h2; j++)
                    o = _mm512_fmadd_ps(_mm512_set1_ps(cw[i * h2 + j]), ih[(size_t)(j * HT_R + r) * HT_NV + v], o);
                co[r * HT_NV + v] = o;
            }
        ht_softmax(co, rows, lm, P + (h2 + i) * hs, M, NV);
    }
}

/* The 3x3 taps on a flat grid of kw columns in NV vectors: ix[t] the two-source lane permute moving the row by tap
 * t's offset (dy·kw + dx: from the vector before for negative offsets, after for positive ones; ix[4] unused), cm[0][v]
 * and cm[1][v] the lanes of vector v whose dx = −1 and +1 taps stay in their grid row (not the first and not the last
 * column). */
static void ht_taps(int kw, int NV, __m512i *ix, __mmask16 cm[2][HT_NV]) {
    for (int t = 0; t < 9; t++) {
        const int s = (t / 3 - 1) * kw + t % 3 - 1;
        ix[t] = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                 _mm512_set1_epi32(s > 0 ? s : 16 + s));
    }
    for (int v = 0; v < NV; v++) {
        cm[0][v] = cm[1][v] = 0;
        for (int k = 0; k < 16; k++) {
            cm[0][v] |= (__mmask16)(((16 * v + k) % kw != 0) << k);
            cm[1][v] |= (__mmask16)(((16 * v + k) % kw != kw - 1) << k);
        }
    }
}

/* hal_fused_bwd's IHH step on one row of hal_tile's grids: gi (M floats) += the correlation of D (the IHH outputs'
 * gradient) with the flipped kernel w, t[k] (k < 9) += D·X at tap k's offset (X the IHH input; the tap's column mask
 * as in the forward), t[9] += D; the shifts are lane permutes of the row in registers, where hal_fused_bwd copies it
 * into a bordered grid and reads that back unaligned. NV (key vectors) is a constant where inlined. */
static inline __attribute__((always_inline)) void ht_ihh_bwd(const float *D, const float *X, const float *w,
                                                             const __m512i *ix, __mmask16 cm[2][HT_NV], int M,
                                                             float *gi, __m512 *t, const int NV) {
    __m512 d[HT_NV], x[HT_NV], wf[9];
    __mmask16 lm[HT_NV];
    const __m512 z = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        lm[v] = M - 16 * v >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (M - 16 * v)) - 1u);
        d[v] = _mm512_maskz_loadu_ps(lm[v], D + 16 * v);
        x[v] = _mm512_maskz_loadu_ps(lm[v], X + 16 * v);
    }
    for (int k = 0; k < 9; k++) wf[k] = _mm512_set1_ps(w[8 - k]);
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        const __m512 dlo = v ? d[v - 1] : z, dhi = v + 1 < NV ? d[v + 1] : z;
        const __m512 xlo = v ? x[v - 1] : z, xhi = v + 1 < NV ? x[v + 1] : z;
        __m512 o = _mm512_mul_ps(wf[4], d[v]);
        t[4] = _mm512_fmadd_ps(d[v], x[v], t[4]);
#pragma GCC unroll 9
        for (int k = 0; k < 9; k++) {
            if (k == 4) continue;
            const __m512 dy = k > 4 ? _mm512_permutex2var_ps(d[v], ix[k], dhi)
                                    : _mm512_permutex2var_ps(dlo, ix[k], d[v]);
            const __m512 xs = k > 4 ? _mm512_permutex2var_ps(x[v], ix[k], xhi)
                                    : _mm512_permutex2var_ps(xlo, ix[k], x[v]);
            if (k % 3 == 1) {
                o = _mm512_fmadd_ps(wf[k], dy, o);
                t[k] = _mm512_fmadd_ps(d[v], xs, t[k]);
            } else {
                o = _mm512_mask3_fmadd_ps(wf[k], dy, o, cm[k % 3 / 2][v]);
                t[k] = _mm512_mask3_fmadd_ps(d[v], xs, t[k], cm[k % 3 / 2][v]);
            }
        }
        t[9] = _mm512_add_ps(t[9], d[v]);
        _mm512_mask_storeu_ps(gi + 16 * v, lm[v], _mm512_add_ps(_mm512_maskz_loadu_ps(lm[v], gi + 16 * v), o));
    }
}

/* hal_fused's work (its arguments, and q's rows and the entry's keys: qb row 0 of the tile, kb the keys at k_off)
 * with the maps' logits computed here, by tiles of HT_R rows. */
static void hal_tile(const hattn_p *a, const float *qb, const float *kb, const float *iw, const float *ib,
                     const float *cw, const float *cb, float *P, float *S, float *U, size_t hs, int rows, float *buf) {
    const int M = a->M, NV = (M + 15) / 16, kw = a->kw, Mv = 16 * NV;
    float *Kt = buf;
    __m512 *vb = (__m512 *)(((uintptr_t)(Kt + (size_t)a->h2 * a->d * Mv) + 63) & ~(uintptr_t)63);
    for (int j = 0; j < a->h2; j++) vt_keys_t(kb + j * a->d, a->ldkv, M, a->d, Kt + (size_t)j * a->d * Mv);
    __m512i ix[9];
    __mmask16 cm[2][HT_NV];
    ht_taps(kw, NV, ix, cm);
    for (int r = 0; r < rows; r += HT_R) {
        const int n = rows - r < HT_R ? rows - r : HT_R;
        const float *qr = qb + (size_t)r * a->ldq;
        float *p = P + (size_t)r * M, *s = S ? S + (size_t)r * M : NULL, *u = U ? U + (size_t)r * M : NULL;
        switch (NV) {
        case 1: ht_tile(a, qr, Kt, iw, ib, cw, cb, ix, cm, p, s, u, hs, n, vb, 1); break;
        case 2: ht_tile(a, qr, Kt, iw, ib, cw, cb, ix, cm, p, s, u, hs, n, vb, 2); break;
        case 3: ht_tile(a, qr, Kt, iw, ib, cw, cb, ix, cm, p, s, u, hs, n, vb, 3); break;
        default: ht_tile(a, qr, Kt, iw, ib, cw, cb, ix, cm, p, s, u, hs, n, vb, 4); break;
        }
    }
}

#endif

/* Floats of a thread's scratch for hal_fused_bwd: two bordered grids, two column masks, two row buffers and the
 * weight gradients' vector accumulators (IHH 10 per computed head, CHH h2 + 1 per head). */
static size_t hal_bwd_floats(const hattn_p *a) {
    const size_t n = (size_t)vw_round(a->kh * a->kw), m = (size_t)vw_round(a->M) + VT_VW, h2 = (size_t)a->h2;
    return 2 * (n + 2 * (size_t)a->kw + 2) + 3 * n + m + VT_VW * h2 * (11 + h2);
}

/* Backward of hal_fused's two stages over rows [0, rows) of a tile: Gh (the hallucinated logits' gradients, h2
 * maps, head stride hs) back through CHH into a row buffer D (the IHH outputs' gradient), then through IHH: the lead
 * keys' D is added to G, the grid's D is copied into a zero-bordered grid and correlated with the flipped kernel
 * into G (+=). S: IHH's input (the computed logits), U: its output (CHH's input). The weight and bias gradients are
 * added to gwI, gbI, gwC, gbC (NULL: not wanted) from one vector accumulator per weight, summed over the tile's
 * rows and reduced once at its end (the stage path reduced nine products per row and head). On hal_tile's grids the
 * IHH step keeps the row in registers instead (ht_ihh_bwd). */
static void hal_fused_bwd(const hattn_p *a, const float *iw, const float *cw, const float *S, const float *U,
                          const float *Gh, float *G, float *gwI, float *gbI, float *gwC, float *gbC, size_t hs, int rows,
                          float *buf) {
    const int h2 = a->h2, M = a->M, L = a->klead, kw = a->kw, n = a->kh * kw, np = vw_round(n), Mv = M / VT_VW * VT_VW;
    const int gs = np + 2 * kw + 2;
    float *gD = buf, *gX = gD + gs, *cmL = gX + gs, *cmR = cmL + np, *ob = cmR + np, *D = ob + np;
    float *accI = D + vw_round(M) + VT_VW, *accC = accI + (size_t)VT_VW * 10 * h2;
    memset(buf, 0, sizeof(float) * hal_bwd_floats(a));
    col_masks(kw, n, cmL, cmR);
    float *dg = gD + kw + 1, *xg = gX + kw + 1; /* the grids' first interior float */
#if VT_VW == 16
    const int tile = hal_tile_ok(a), NV = (M + 15) / 16;
    __m512i ix[9];
    __mmask16 cm[2][HT_NV];
    if (tile) ht_taps(kw, NV, ix, cm);
#endif
    for (int r = 0; r < rows; r++) {
        const size_t ro = (size_t)r * M;
        for (int j = 0; j < h2; j++) {
            /* CHH: D = Σ_i W[i][j]·Gh_i; dW[i][j] += Gh_i·U_j, db[i] += Σ Gh_i (in the pass j = 0) */
            const float *u = U + j * hs + ro;
            int e = 0;
            for (; e < Mv; e += VT_VW) {
                const vt_vf uv = VT_VPS(loadu)(u + e);
                vt_vf d = VT_VPS(setzero)();
                for (int i = 0; i < h2; i++) {
                    const vt_vf gv = VT_VPS(loadu)(Gh + i * hs + ro + e);
                    float *ac = accC + (size_t)VT_VW * ((size_t)i * (h2 + 1) + j);
                    d = VT_VPS(fmadd)(VT_VPS(set1)(cw[i * h2 + j]), gv, d);
                    VT_VPS(storeu)(ac, VT_VPS(fmadd)(gv, uv, VT_VPS(loadu)(ac)));
                    if (j == 0) {
                        float *ab = accC + (size_t)VT_VW * ((size_t)i * (h2 + 1) + h2);
                        VT_VPS(storeu)(ab, VT_VPS(add)(gv, VT_VPS(loadu)(ab)));
                    }
                }
                VT_VPS(storeu)(D + e, d);
            }
            for (; e < M; e++) { /* the row's last M % VT_VW keys */
                float d = 0.0f;
                for (int i = 0; i < h2; i++) {
                    const float gv = Gh[i * hs + ro + (size_t)e];
                    d += cw[i * h2 + j] * gv;
                    if (gwC) gwC[i * h2 + j] += gv * u[e];
                    if (gbC && j == 0) gbC[i] += gv;
                }
                D[e] = d;
            }
            /* IHH: the lead keys bypass it; the grid's gradient through the flipped kernel, the weights' products */
            float *gi = G + j * hs + ro, *ai = accI + (size_t)VT_VW * 10 * j;
#if VT_VW == 16
            if (tile) { /* hal_tile's grids: the row in registers */
                __m512 t[10];
                for (int k = 0; k < 10; k++) t[k] = _mm512_setzero_ps();
                const float *x = S + j * hs + ro, *w = iw + 9 * j;
                switch (NV) {
                case 1: ht_ihh_bwd(D, x, w, ix, cm, M, gi, t, 1); break;
                case 2: ht_ihh_bwd(D, x, w, ix, cm, M, gi, t, 2); break;
                case 3: ht_ihh_bwd(D, x, w, ix, cm, M, gi, t, 3); break;
                default: ht_ihh_bwd(D, x, w, ix, cm, M, gi, t, 4); break;
                }
                for (int k = 0; k < 10; k++)
                    _mm512_storeu_ps(ai + VT_VW * k, _mm512_add_ps(t[k], _mm512_loadu_ps(ai + VT_VW * k)));
                continue;
            }
#endif
            for (int k = 0; k < L; k++) gi[k] += D[k];
            memcpy(dg, D + L, sizeof(float) * (size_t)n);
            memcpy(xg, S + j * hs + ro + L, sizeof(float) * (size_t)n);
            const float *w = iw + 9 * j;
            vt_vf wf[9]; /* dX: the same correlation with the kernel flipped */
            for (int t = 0; t < 9; t++) wf[t] = VT_VPS(set1)(w[8 - t]);
            vt_vf t0 = VT_VPS(setzero)(), t1 = t0, t2 = t0, t3 = t0, t4 = t0, t5 = t0, t6 = t0, t7 = t0, t8 = t0, tb = t0;
            for (int k = 0; k < np; k += VT_VW) {
                const vt_vf mL = VT_VPS(loadu)(cmL + k), mR = VT_VPS(loadu)(cmR + k);
                VT_VPS(storeu)(ob + k, corr3_vec(dg + k, kw, wf, mL, mR, VT_VPS(setzero)()));
                /* dW[t] += dy(k)·x(k + offset of t), dy masked where tap t would wrap across a row */
                const vt_vf dz = VT_VPS(loadu)(dg + k), dl = VT_VPS(mul)(dz, mL), dr = VT_VPS(mul)(dz, mR);
                const float *xu = xg + k - kw, *xc = xg + k, *xd = xg + k + kw;
                t0 = VT_VPS(fmadd)(dl, VT_VPS(loadu)(xu - 1), t0);
                t1 = VT_VPS(fmadd)(dz, VT_VPS(loadu)(xu), t1);
                t2 = VT_VPS(fmadd)(dr, VT_VPS(loadu)(xu + 1), t2);
                t3 = VT_VPS(fmadd)(dl, VT_VPS(loadu)(xc - 1), t3);
                t4 = VT_VPS(fmadd)(dz, VT_VPS(loadu)(xc), t4);
                t5 = VT_VPS(fmadd)(dr, VT_VPS(loadu)(xc + 1), t5);
                t6 = VT_VPS(fmadd)(dl, VT_VPS(loadu)(xd - 1), t6);
                t7 = VT_VPS(fmadd)(dz, VT_VPS(loadu)(xd), t7);
                t8 = VT_VPS(fmadd)(dr, VT_VPS(loadu)(xd + 1), t8);
                tb = VT_VPS(add)(tb, dz);
            }
            for (int k = 0; k < n; k++) gi[L + k] += ob[k];
            const vt_vf tv[10] = {t0, t1, t2, t3, t4, t5, t6, t7, t8, tb};
            for (int t = 0; t < 10; t++)
                VT_VPS(storeu)(ai + VT_VW * t, VT_VPS(add)(tv[t], VT_VPS(loadu)(ai + VT_VW * t)));
        }
    }
    for (int j = 0; j < h2; j++) {
        for (int t = 0; t < 9 && gwI; t++) gwI[9 * j + t] += vt_vhreduce(VT_VPS(loadu)(accI + VT_VW * (10 * j + t)), 0);
        if (gbI) gbI[j] += vt_vhreduce(VT_VPS(loadu)(accI + VT_VW * (10 * j + 9)), 0);
    }
    for (int i = 0; i < h2; i++) {
        for (int j = 0; j < h2 && gwC; j++)
            gwC[i * h2 + j] += vt_vhreduce(VT_VPS(loadu)(accC + (size_t)VT_VW * ((size_t)i * (h2 + 1) + j)), 0);
        if (gbC) gbC[i] += vt_vhreduce(VT_VPS(loadu)(accC + (size_t)VT_VW * ((size_t)i * (h2 + 1) + h2)), 0);
    }
}
#endif

/* A thread's stage scratch: three padded grids (small grids' path), or six masked IHH weight grids, a zero row and
 * two column masks (corr3_grid, ihh_wgrad; three padded grids hold the last two), or the fused paths' buffers
 * (hal_fused_floats, ...), or backward's transposed values of a head (the register tiles of at most VT_SK_MAX keys). */
static size_t stage_scratch(const hattn_p *a) {
    const size_t st = 3 * pad_floats(a) + 6 * (size_t)a->kh * (size_t)a->kw;
#ifdef VT_VW
    size_t f = hal_fused_floats(a), fb = hal_bwd_floats(a), m = f > fb ? f : fb;
#if VT_VW == 16
    f = hal_rows_floats(a), m = f > m ? f : m;
    f = hal_tile_ok(a) ? hal_tile_floats(a) : 0, m = f > m ? f : m;
    f = a->M <= VT_SK_MAX ? (size_t)a->d * (size_t)vw_round(a->M) : 0, m = f > m ? f : m;
#endif
    return m > st ? m : st;
#else
    return st;
#endif
}

/* Floats of a thread's forward scratch: the tile's H probability maps, h2 IHH outputs (two stages), H·T reciprocals of
 * row sums, then the stages' scratch. */
static size_t fwd_floats(const hattn_p *a) {
    return (a->H + (a->nst == 2 ? (size_t)a->h2 : 0)) * tile_floats(a) + (size_t)a->H * a->T + stage_scratch(a);
}

/* One stage backward: din (= or += when acc) from dout, and the weight's and bias's gradients added to dw, db (NULL:
 * not wanted); in: the stage's forward input. pad: three pad_floats scratch blocks. */
static void stage_bwd(const hattn_p *a, int st, const float *w, const float *in, const float *dout, float *din,
                      int acc, float *dw, float *db, size_t hs, int rows, float *pad) {
    const int h2 = a->h2, M = a->M, L = a->klead, pw = a->kw + 2, nf = a->kh * pw;
    if (st == ST_CHH && h2 >= CHH_GEMM) { /* dW += dout · inᵀ, din (+)= Wᵀ · dout */
        const size_t n = (size_t)rows * M;
        for (int i = 0; db && i < h2; i++) {
            const float *go = dout + i * hs;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (size_t e = 0; e < n; e++) s += go[e];
            db[i] += s;
        }
        if (dw) vt_gemm(a->gemm, 0, 1, h2, h2, (int)n, 1.0f, dout, (int)hs, in, (int)hs, 1.0f, dw, h2);
        vt_gemm(a->gemm, 1, 0, h2, (int)n, h2, 1.0f, w, h2, dout, (int)hs, acc ? 1.0f : 0.0f, din, (int)hs);
        return;
    }
    if (st == ST_CHH) { /* row by row, as forward */
        for (int r = 0; r < rows; r++) {
            const size_t ro = (size_t)r * M;
            for (int i = 0; i < h2; i++) {
                const float *go = dout + i * hs + ro;
                if (db) {
                    float s = 0.0f;
#pragma omp simd reduction(+ : s)
                    for (int e = 0; e < M; e++) s += go[e];
                    db[i] += s;
                }
                if (dw)
                    for (int j = 0; j < h2; j++) {
                        const float *x = in + j * hs + ro;
                        float s = 0.0f;
#pragma omp simd reduction(+ : s)
                        for (int e = 0; e < M; e++) s += go[e] * x[e];
                        dw[i * h2 + j] += s;
                    }
            }
            for (int j = 0; j < h2; j++) {
                float *gi = din + j * hs + ro;
                for (int i = 0; i < h2; i++) {
                    const float wv = w[i * h2 + j], *go = dout + i * hs + ro;
                    if (i == 0 && !acc) {
#pragma omp simd
                        for (int e = 0; e < M; e++) gi[e] = wv * go[e];
                    } else {
#pragma omp simd
                        for (int e = 0; e < M; e++) gi[e] += wv * go[e];
                    }
                }
            }
        }
        return;
    }
    if (a->kh >= 3 && a->kw >= 3) { /* unpadded, as the forward (corr3_grid, ihh_wgrad) */
        const int kw = a->kw, n = a->kh * kw;
        float *m = pad, *z = m + 6 * (size_t)n, *cm = z + kw + 2;
        memset(z, 0, sizeof(float) * (size_t)(kw + 2));
        for (int k = 0; k < n; k++) cm[k] = k % kw ? 1.0f : 0.0f, cm[n + k] = k % kw == kw - 1 ? 0.0f : 1.0f;
        for (int j = 0; j < h2; j++) {
            float wf[9], gw9[9] = {0}, gb = 0.0f;
            for (int t = 0; t < 9; t++) wf[t] = w[9 * j + 8 - t]; /* dX: the correlation with the kernel flipped */
            ihh_masked(a, wf, m);
            for (int r = 0; r < rows; r++) {
                const float *x = in + j * hs + (size_t)r * M, *go = dout + j * hs + (size_t)r * M;
                float *gi = din + j * hs + (size_t)r * M;
                for (int k = 0; k < L; k++) gi[k] = (acc ? gi[k] : 0.0f) + go[k];
                corr3_grid(a, go + L, wf, m, 0.0f, z, gi + L, acc);
                if (dw || db) ihh_wgrad(a, x + L, go + L, cm, gw9, &gb);
            }
            if (dw)
                for (int t = 0; t < 9; t++) dw[9 * j + t] += gw9[t];
            if (db) db[j] += gb;
        }
        return;
    }
    const size_t pf = pad_floats(a);
    memset(pad, 0, 3 * sizeof(float) * pf);
    float *pin = pad + 1, *pdo = pad + pf + 1, *o = pad + 2 * pf;
    for (int j = 0; j < h2; j++) {
        float wf[9], gw9[9] = {0}, gb = 0.0f;
        for (int t = 0; t < 9; t++) wf[t] = w[9 * j + 8 - t]; /* dX: the same correlation with the kernel flipped */
        for (int r = 0; r < rows; r++) {
            const float *x = in + j * hs + (size_t)r * M, *go = dout + j * hs + (size_t)r * M;
            float *gi = din + j * hs + (size_t)r * M;
            for (int k = 0; k < L; k++) gi[k] = (acc ? gi[k] : 0.0f) + go[k];
            fill_pad(a, go + L, pdo);
            corr3_flat(a, pdo, wf, 0.0f, o);
            unpad(a, o, gi + L, acc);
            if (!dw && !db) continue;
            /* dW[t] = Σ dout(yy, x)·in_pad(yy + dy, x + dx): the padded dout's border columns are zero, so the flat
             * products over the kh·pw outputs (dout at k + pw) count the interior only */
            fill_pad(a, x + L, pin);
            const float *dp = pdo + pw;
            for (int t = 0; t < 9; t++) {
                const float *pr = pin + (t / 3) * pw + t % 3 - 1;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int k = 0; k < nf; k++) s += dp[k] * pr[k];
                gw9[t] += s;
            }
            float sb = 0.0f;
#pragma omp simd reduction(+ : sb)
            for (int k = 0; k < nf; k++) sb += dp[k];
            gb += sb;
        }
        if (dw)
            for (int t = 0; t < 9; t++) dw[9 * j + t] += gw9[t];
        if (db) db[j] += gb;
    }
}

static const float *data_or_null(const vt_node *n, int slot) { return slot >= 0 ? n->in[slot]->data : NULL; }

/* The logits of rows [r0, r0 + rows) of entry b, every head, into P (head stride hs), then their softmax.
 * S: NULL, or h2 maps receiving the computed logits (the stages' input; backward keeps them); U: h2 maps for the
 * first stage's output when there are two. inv: NULL, or H·rows floats: where the path allows (hal_fused), P is
 * left unnormalised and inv receives each row's 1 / sum (returns 1; else 0, P normalised). */
static int tile_probs(const vt_node *n, int b, int r0, int rows, float *P, float *S, float *U, float *inv,
                      float *pad, size_t hs) {
    const hattn_p *a = VT_OP_P(n, hattn_p);
    const int M = a->M, d = a->d, h2 = a->h2;
    const float *qd = n->in[0]->data, *kvd = a->kv_in >= 0 ? n->in[a->kv_in]->data : qd;
    const float *qb = qd + ((size_t)b * a->N + r0) * a->ldq + a->q_off, *kb = kvd + (size_t)b * M * a->ldkv + a->k_off;
    float *src = S ? S : P;
#ifdef VT_VW
    float *Ub = S ? U : NULL; /* the fused paths write U for backward only */
#endif
    const float *w[2] = {NULL, NULL}, *bb[2] = {NULL, NULL};
    for (int s = 0; s < a->nst; s++) {
        const int ih = a->st[s] == ST_IHH;
        w[s] = data_or_null(n, ih ? a->iw_in : a->cw_in);
        bb[s] = data_or_null(n, ih ? a->ib_in : a->cb_in);
    }
#if VT_VW == 16
    if (hal_tile_ok(a)) {
        hal_tile(a, qb, kb, w[0], bb[0], w[1], bb[1], P, S, Ub, hs, rows, pad);
        return 0;
    }
#endif
    for (int j = 0; j < h2; j++)
        vt_gemm(a->gemm, 0, 1, rows, M, d, a->scale, qb + j * d, a->ldq, kb + j * d, a->ldkv, 0.0f, src + j * hs, M);
    const size_t n1 = (size_t)rows * M;
    float *hal = P + h2 * hs;
#ifdef VT_VW
#if VT_VW == 16
    if (hal_rows_ok(a)) {
        hal_rows(a, w[0], bb[0], w[1], bb[1], src, P, Ub, hs, rows, pad);
        return 0;
    }
#endif
    if (hal_fused_ok(a)) { /* the softmax of the computed rows reads S, no copy into P first */
        hal_fused(a, w[0], bb[0], w[1], bb[1], src, P, Ub, inv, hs, rows, pad);
        return inv != NULL;
    }
#else
    (void)inv; /* the unnormalised form is hal_fused's, in vector builds */
#endif
    if (S)
        for (int j = 0; j < h2; j++) memcpy(P + j * hs, S + j * hs, sizeof(float) * n1);
    if (a->nst == 0)
        for (int j = 0; j < h2; j++) memcpy(hal + j * hs, src + j * hs, sizeof(float) * n1);
    else if (a->nst == 1)
        stage_fwd(a, a->st[0], w[0], bb[0], src, hal, hs, rows, pad);
    else {
        stage_fwd(a, a->st[0], w[0], bb[0], src, U, hs, rows, pad);
        stage_fwd(a, a->st[1], w[1], bb[1], U, hal, hs, rows, pad);
    }
    for (int i = 0; i < a->H; i++)
        for (int r = 0; r < rows; r++) vt_softmax_row(P + i * hs + (size_t)r * M, P + i * hs + (size_t)r * M, M);
    return 0;
}

/* Forward of tile u (entry u / ntile) with thread t's scratch. */
static void fwd_tile(const vt_node *n, int u, int t) {
    const hattn_p *a = VT_OP_P(n, hattn_p);
    const int b = u / a->ntile, r0 = (u % a->ntile) * a->T, rows = a->N - r0 < a->T ? a->N - r0 : a->T;
    if (rows <= 0) return;
    const int M = a->M, d = a->d, C = a->H * d;
    const size_t hs = tile_floats(a), per = fwd_floats(a);
    float *P = n->fws->data + (size_t)t * per, *U = P + a->H * hs, *inv = U + (a->nst == 2 ? a->h2 : 0) * hs;
    const int defer = tile_probs(n, b, r0, rows, P, NULL, U, inv, inv + (size_t)a->H * a->T, hs);
    const float *kvd = a->kv_in >= 0 ? n->in[a->kv_in]->data : n->in[0]->data;
    const float *vb = kvd + (size_t)b * M * a->ldkv + a->v_off;
    float *ob = n->out->data + ((size_t)b * a->N + r0) * C;
    for (int i = 0; i < a->H; i++) {
        vt_gemm(a->gemm, 0, 0, rows, d, M, 1.0f, P + i * hs, M, vb + i * d, a->ldkv, 0.0f, ob + i * d, C);
        for (int r = 0; r < rows && defer; r++) { /* the softmax's division, on the output rows */
            float *o = ob + (size_t)r * C + i * d;
            const float f = inv[(size_t)i * rows + r];
#pragma omp simd
            for (int c = 0; c < d; c++) o[c] *= f;
        }
        if (n->xout) /* exported probabilities (B, H, N, M) */
            for (int r = 0; r < rows; r++) {
                const float *pr = P + i * hs + (size_t)r * M, f = defer ? inv[(size_t)i * rows + r] : 1.0f;
                float *x = n->xout->data + (((size_t)b * a->H + i) * a->N + r0 + r) * M;
#pragma omp simd
                for (int k = 0; k < M; k++) x[k] = pr[k] * f;
            }
    }
}

static void hattn_fwd(vt_node *n) {
    const hattn_p *a = VT_OP_P(n, hattn_p);
    const int units = a->B * a->ntile;
#pragma omp parallel for schedule(static) num_threads(a->nt)
    for (int u = 0; u < units; u++) fwd_tile(n, u, omp_get_thread_num());
}

/* Backward of tile `tile` of entry b with thread t's scratch. dk, dv: where the keys' and values' gradients of this
 * entry go (row stride ldk; NULL: not wanted), added to when bkv is 1, written when 0; dwg: the thread's weight
 * gradient partials. */
static void bwd_tile(const vt_node *n, int b, int tile, int t, float *dk, float *dv, int ldk, float bkv) {
    const hattn_p *a = VT_OP_P(n, hattn_p);
    const int r0 = tile * a->T, rows = a->N - r0 < a->T ? a->N - r0 : a->T;
    if (rows <= 0) return;
    const int M = a->M, d = a->d, H = a->H, h2 = a->h2, C = H * d;
    const size_t hs = tile_floats(a), per = (3 * (size_t)h2 + 2 * (size_t)H) * hs + stage_scratch(a);
    float *S = n->bws->data + (size_t)t * per, *U = S + h2 * hs, *D = U + h2 * hs, *P = D + h2 * hs;
    float *G = P + H * hs, *pad = G + H * hs;
    tile_probs(n, b, r0, rows, P, S, U, NULL, pad, hs);
    const float *qd = n->in[0]->data, *kvd = a->kv_in >= 0 ? n->in[a->kv_in]->data : qd;
    const float *qb = qd + ((size_t)b * a->N + r0) * a->ldq + a->q_off, *kb = kvd + (size_t)b * M * a->ldkv;
    const float *dO = n->out->grad + ((size_t)b * a->N + r0) * C;
    if (dv)
        for (int i = 0; i < H; i++)
            vt_gemm(a->gemm, 1, 0, M, d, rows, 1.0f, P + i * hs, M, dO + i * d, C, bkv, dv + i * d, ldk);
    for (int i = 0; i < H; i++) { /* dZ = P ⊙ (dP − Σⱼ dP⊙P), dP = dO·Vᵀ */
#if defined(__AVX512F__)
        if (M <= VT_SK_MAX) { /* as the plain attention's backward: register tiles over the transposed values */
            vt_keys_t(kb + a->v_off + i * d, a->ldkv, M, d, pad);
            vt_sk_rows(dO + i * d, (size_t)C, pad, rows, M, d, 1.0f, 1, NULL, NULL, NULL, P + i * hs, G + i * hs,
                       NULL, 0);
            continue;
        }
#endif
        vt_gemm(a->gemm, 0, 1, rows, M, d, 1.0f, dO + i * d, C, kb + a->v_off + i * d, a->ldkv, 0.0f, G + i * hs, M);
        for (int r = 0; r < rows; r++) vt_softmax_bwd_row(P + i * hs + (size_t)r * M, G + i * hs + (size_t)r * M, M);
    }
    /* the hallucinated maps' gradient back through the stages into the computed logits' */
    float *wg = n->bws->data + (size_t)a->nt * per + (size_t)t * wg_floats(a);
    float *gw[2], *gb[2];
    const float *w[2];
    for (int s = 0; s < a->nst; s++) {
        const int ih = a->st[s] == ST_IHH, wi = ih ? a->iw_in : a->cw_in, bi = ih ? a->ib_in : a->cb_in;
        float *base = ih ? wg : wg + 10 * (size_t)h2;
        w[s] = n->in[wi]->data;
        gw[s] = n->in[wi]->grad ? base : NULL;
        gb[s] = bi >= 0 && n->in[bi]->grad ? base + (ih ? 9 : h2) * (size_t)h2 : NULL;
    }
    float *Gh = G + h2 * hs;
    if (a->nst == 0) {
        for (int j = 0; j < h2; j++)
            for (size_t e = 0; e < (size_t)rows * M; e++) G[j * hs + e] += Gh[j * hs + e];
    } else if (a->nst == 1) {
        stage_bwd(a, a->st[0], w[0], S, Gh, G, 1, gw[0], gb[0], hs, rows, pad);
#ifdef VT_VW
    } else if (hal_fused_ok(a)) {
        hal_fused_bwd(a, w[0], w[1], S, U, Gh, G, gw[0], gb[0], gw[1], gb[1], hs, rows, pad);
#endif
    } else {
        stage_bwd(a, a->st[1], w[1], U, Gh, D, 0, gw[1], gb[1], hs, rows, pad);
        stage_bwd(a, a->st[0], w[0], S, D, G, 1, gw[0], gb[0], hs, rows, pad);
    }
    float *dqd = n->in[0]->grad;
    if (dqd) {
        const float bq = n->grad_fresh & 1u ? 0.0f : 1.0f;
        float *dq = dqd + ((size_t)b * a->N + r0) * a->ldq + a->q_off;
        for (int j = 0; j < h2; j++)
            vt_gemm(a->gemm, 0, 0, rows, d, M, a->scale, G + j * hs, M, kb + a->k_off + j * d, a->ldkv, bq, dq + j * d,
                    a->ldq);
    }
    if (dk)
        for (int j = 0; j < h2; j++)
            vt_gemm(a->gemm, 1, 0, M, d, rows, a->scale, G + j * hs, M, qb + j * d, a->ldq, bkv, dk + j * d, ldk);
}

static void hattn_bwd(vt_node *n) {
    const hattn_p *a = VT_OP_P(n, hattn_p);
    if (!n->bws) return; /* eval graph */
    const int H = a->H, h2 = a->h2, M = a->M, C = H * a->d, nt = a->nt;
    const size_t per = (3 * (size_t)h2 + 2 * (size_t)H) * tile_floats(a) + stage_scratch(a), nwg = wg_floats(a);
    float *wg = n->bws->data + (size_t)nt * per, *acc = wg + (size_t)nt * nwg;
    vt_zero(wg, (int64_t)(nt * nwg));
    const int kv_slot = a->kv_in >= 0 ? a->kv_in : 0;
    float *dkvd = n->in[kv_slot]->grad;
    const float bkv = n->grad_fresh >> kv_slot & 1u ? 0.0f : 1.0f;
    const size_t kvrow = (size_t)M * a->ldkv;
    if (a->by_entry) {
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int b = 0; b < a->B; b++)
            for (int tile = 0; tile < a->ntile; tile++) {
                float *dkb = dkvd ? dkvd + b * kvrow : NULL;
                bwd_tile(n, b, tile, omp_get_thread_num(), dkb ? dkb + a->k_off : NULL, dkb ? dkb + a->v_off : NULL,
                         a->ldkv, tile ? 1.0f : bkv);
            }
    } else {
        const int lda = 3 * C / 2; /* per thread: M rows of [dK (C/2) | dV (C)] */
        const size_t blk = (size_t)M * lda;
        for (int b = 0; b < a->B; b++) {
            if (dkvd) vt_zero(acc, (int64_t)(nt * blk));
#pragma omp parallel for schedule(static) num_threads(nt)
            for (int tile = 0; tile < a->ntile; tile++) {
                float *mine = dkvd ? acc + (size_t)omp_get_thread_num() * blk : NULL;
                bwd_tile(n, b, tile, omp_get_thread_num(), mine, mine ? mine + C / 2 : NULL, lda, 1.0f);
            }
            if (!dkvd) continue;
            float *dkb = dkvd + b * kvrow;
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)M * lda * nt > VT_PAR_MIN)
            for (int m = 0; m < M; m++)
                for (int c = 0; c < lda; c++) {
                    float s = 0.0f;
                    for (int th = 0; th < nt; th++) s += acc[(size_t)th * blk + (size_t)m * lda + c];
                    float *dst = dkb + (size_t)m * a->ldkv + (c < C / 2 ? a->k_off + c : a->v_off + c - C / 2);
                    *dst = (bkv != 0.0f ? *dst : 0.0f) + s;
                }
        }
    }
    const int wslot[4] = {a->iw_in, a->ib_in, a->cw_in, a->cb_in};
    const size_t woff[4] = {0, 9 * (size_t)h2, 10 * (size_t)h2, 10 * (size_t)h2 + (size_t)h2 * h2};
    for (int k = 0; k < 4; k++) {
        if (wslot[k] < 0 || !n->in[wslot[k]]->grad) continue;
        float *gd = n->in[wslot[k]]->grad;
        for (int64_t e = 0; e < n->in[wslot[k]]->numel; e++) {
            float s = 0.0f;
            for (int th = 0; th < nt; th++) s += wg[(size_t)th * nwg + woff[k] + (size_t)e];
            gd[e] += s;
        }
    }
}

/* Backward reads every input (the logits are recomputed). */
static const vt_opdef op_hattn = {"hallucinated_attention", hattn_fwd, hattn_bwd, VT_READS(VT_READS_ALL_IN), NULL,
                                  VT_OP_FUSED};

/* 1 when the n channel ranges [off[i], off[i] + len[i]) are disjoint and inside [0, total); *cover: they fill it. */
static int disjoint(const int *off, const int *len, int n, int total, int *cover) {
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        if (off[i] < 0 || off[i] > total - len[i]) return 0;
        for (int j = i + 1; j < n; j++)
            if (off[i] < off[j] + len[j] && off[j] < off[i] + len[i]) return 0;
        sum += len[i];
    }
    *cover = sum == total;
    return 1;
}

vt_tensor *vt_hallucinated_attention(vt_graph *g, vt_tensor *q, vt_tensor *kv, const vt_hattn_args *a) {
    if (vt_bad(g, 1, q)) return NULL;
    static const char *op = "hallucinated_attention";
    if (!a) return vt_fail(g, op, "no arguments given");
    char sq[64], sk[64], sw[64];
    vt_shape_str(q, sq, 64);
    if (kv == q) kv = NULL;
    const int H = a->heads, dim = a->dim;
    if (q->ndim != 3 || H < 2 || H % 2 || dim <= 0 || dim % H)
        return vt_fail(g, op, "q %s must be (B, N, Lq), the heads %d even and the width %d divisible by them", sq, H,
                       dim);
    const int B = q->shape[0], N = q->shape[1], Lq = q->shape[2], h2 = H / 2, d = dim / H;
    vt_tensor *kt = kv ? kv : q;
    vt_shape_str(kt, sk, 64);
    if (kv && (kv->ndim != 3 || kv->shape[0] != B))
        return vt_fail(g, op, "kv %s must be (B, M, Lkv) with the batch %d of q %s", sk, B, sq);
    const int M = kt->shape[1], Lkv = kt->shape[2];
    int offs[3] = {a->q_off, a->k_off, a->v_off}, lens[3] = {dim / 2, dim / 2, dim}, qcover = 0, kvcover = 0;
    const int ok = kv ? disjoint(offs, lens, 1, Lq, &qcover) && disjoint(offs + 1, lens + 1, 2, Lkv, &kvcover)
                      : disjoint(offs, lens, 3, Lq, &qcover);
    if (!ok)
        return vt_fail(g, op, "q %s%s%s: the query [%d, +%d), key [%d, +%d) and value [%d, +%d) channels must be "
                       "disjoint and inside their tensors", sq, kv ? ", kv " : "", kv ? sk : "", a->q_off, dim / 2,
                       a->k_off, dim / 2, a->v_off, dim);
    if (a->ihh_w && (a->klead < 0 || a->kh < 1 || a->kw < 1 || a->klead + a->kh * a->kw != M))
        return vt_fail(g, op, "key grid %dx%d after %d leading keys does not fit the %d keys of %s", a->kh, a->kw,
                       a->klead, M, sk);
    const vt_tensor *wt[4] = {a->ihh_w, a->ihh_b, a->chh_w, a->chh_b};
    const int want[4][5] = {{4, h2, 1, 3, 3}, {1, h2, 0, 0, 0}, {4, h2, h2, 1, 1}, {1, h2, 0, 0, 0}};
    for (int k = 0; k < 4; k++) {
        if (!wt[k]) continue;
        if (!wt[k - k % 2])
            return vt_fail(g, op, "the %s bias without its weight", k < 2 ? "IHH" : "CHH");
        if (!vt_has_shape(wt[k], want[k][0], want[k][1], want[k][2], want[k][3], want[k][4]))
            return vt_fail(g, op, "%s %s %s (%s) must be %s for %d computed heads", k < 2 ? "IHH" : "CHH",
                           k % 2 ? "bias" : "weight", vt_shape_str(wt[k], sw, 64), wt[k]->name,
                           k == 0 ? "(h2, 1, 3, 3)" : k == 2 ? "(h2, h2, 1, 1)" : "(h2)", h2);
    }
    vt_tensor *in[6] = {q};
    int nin = 1, slot[5] = {-1, -1, -1, -1, -1};
    if (kv) in[slot[0] = nin++] = kv;
    for (int k = 0; k < 4; k++)
        if (wt[k]) in[slot[k + 1] = nin++] = (vt_tensor *)wt[k];
    const int shape[3] = {B, N, dim};
    vt_node *n = vt_new_node(g, &op_hattn, in, nin, vt_new_act(g, 3, shape));
    if (!n) return NULL;
    hattn_p p = {B, N, M, H, h2, d, g->threads, Lq, kv ? Lkv : Lq, a->q_off, a->k_off, a->v_off, a->klead, a->kh,
                 a->kw, slot[0], slot[1], slot[2], slot[3], slot[4], {0, 0}, 0, 0, 0, 0, a->scale, &g->gemm};
    if (!a->ihh_w) p.klead = 0, p.kh = p.kw = 1;
    const int first = a->chh_first ? ST_CHH : ST_IHH;
    if (first == ST_CHH ? a->chh_w != NULL : a->ihh_w != NULL) p.st[p.nst++] = first;
    if (first == ST_CHH ? a->ihh_w != NULL : a->chh_w != NULL) p.st[p.nst++] = first == ST_CHH ? ST_IHH : ST_CHH;
    /* tiles: about TILE_FLOATS probabilities each; with few of them, at least TILES_WARM a thread (of at least
     * TILE_ROWS_MIN rows), then as many per entry as keeps the threads even */
    const int nt = p.nt;
    int ntile = (int)(((int64_t)H * N * M + TILE_FLOATS - 1) / TILE_FLOATS);
    if (ntile > N) ntile = N;
    while ((int64_t)B * ntile < (int64_t)TILES_WARM * nt && N / (ntile + 1) >= TILE_ROWS_MIN) ntile++;
    while ((int64_t)B * ntile < 8LL * nt && ((int64_t)B * ntile) % nt && ntile < N) ntile++;
    p.T = (N + ntile - 1) / ntile;
    p.ntile = (N + p.T - 1) / p.T;
    p.by_entry = B >= nt && (B % nt == 0 || B >= 4 * nt);
    *VT_OP_P(n, hattn_p) = p;
    n->macs = (int64_t)B * N * M * (dim / 2 + dim);
    if (a->ihh_w) n->macs += (int64_t)B * N * h2 * a->kh * a->kw * 9;
    if (a->chh_w) n->macs += (int64_t)B * N * M * h2 * h2;
    n->bwd_twice = 1;
    if (qcover) n->grad_sets |= 1u;
    if (kv && kvcover) n->grad_sets |= 1u << slot[0];
    if (a->probs) {
        const int ps[4] = {B, H, N, M};
        *a->probs = g->export_maps ? vt_node_extra_output(n, 4, ps) : NULL;
        if (g->export_maps && !*a->probs) return NULL;
    }
    const int64_t hs = (int64_t)p.T * M, pad = (int64_t)stage_scratch(&p);
    if (!vt_node_work(n, 0, nt * (int64_t)fwd_floats(&p))) return NULL;
    if (g->training && !vt_node_work(n, 1, nt * ((3LL * h2 + 2LL * H) * hs + pad + (int64_t)wg_floats(&p)) +
                                               (p.by_entry ? 0 : (int64_t)nt * M * (3 * dim / 2))))
        return NULL;
    return n->out;
}
