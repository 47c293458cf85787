/* 2-D convolutions: NCHW conv2d (im2col + sgemm for dense/grouped convs, no im2col for 1x1 stride-1 convs, direct
 * loops for depthwise convs), the channels-last depthwise conv used on token grids (B, H, W, C), and the
 * channels-last dense/grouped conv (vt_conv2d_nhwc: Next-ViT's MHCA).
 * MACs: B·Cout·Ho·Wo·(Cin/groups)·kh·kw (bias adds not counted). */
#include <limits.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#if defined(__FMA__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "dwplane.h"
#include "mathfn.h"
#include "patches.h"
#include "vitc/ops.h"

/* Output positions o in [*lo, *hi) whose input coordinate o·s - p + k lies in [0, n) (k: kernel tap offset). */
static void tap_range(int s, int p, int k, int n, int nout, int *lo, int *hi) {
    int a = p - k, b = n - 1 + p - k;
    *lo = a > 0 ? (a + s - 1) / s : 0;
    *hi = b < 0 ? 0 : b / s + 1;
    if (*hi > nout) *hi = nout;
    if (*hi < *lo) *hi = *lo;
}

/* Geometry of one conv node: its parameter struct (VT_OP_P), derived fields included, set by vt_conv2d. */
typedef struct {
    int B, Cin, H, W, Cout, kh, kw;
    int s, p;          /* stride, padding */
    int G;             /* groups */
    int Ho, Wo;
    int mode;          /* M_IM2COL, M_DEPTHWISE or M_POINTWISE */
    int tf, tb;        /* forward / backward threads over images (1: images in sequence, BLAS and im2col threaded);
                        * for depthwise convs the threads owning a padded-plane scratch (fws, bws) each */
    int Cg, Og, Kg, P; /* channels per group in/out, K per group (Cg·kh·kw), output pixels */
    int64_t col;       /* floats of one image's column buffer (Cin·kh·kw·P) */
    const vt_gemm_plan *gemm; /* the graph's GEMM dispatch */
    vt_gemm_conv *prim;       /* the conv2d.onednn kernel's primitive (made by its prepare), else NULL */
    vt_gemm_conv *bprim;      /* with prim, training, stride 1, k > 1: the forward primitive computing dX (dx_prim) */
    vt_gemm_conv *wprim;      /* training: the weight-gradient primitive (dw_prim; conv_prim_prepare says where) */
    int relu;                 /* vt_conv2d_relu in an inference graph: ReLU on the output, in the same pass */
} geom;

enum { M_IM2COL = 0, M_DEPTHWISE = 1, M_POINTWISE = 2 };

/* y = max(y, 0) over n floats (NaN kept, as vt_relu), one thread; relu_all: on all threads. */
static void relu_n(float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = vt_relu_f(y[i]);
}
static void relu_all(float *y, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < n; c += 4096) relu_n(y + c, n - c < 4096 ? n - c : 4096);
}

/* col[(c·kh + ki)·kw + kj][oh·Wo + ow] = x[c][oh·s - p + ki][ow·s - p + kj] (0 outside) for one image. */
static void im2col(const geom *q, const float *x, float *col, int par) {
    const int R = q->Cin * q->kh * q->kw;
#pragma omp parallel for schedule(static) if (par)
    for (int r = 0; r < R; r++) {
        const int c = r / (q->kh * q->kw), ki = r / q->kw % q->kh, kj = r % q->kw;
        const float *xc = x + (size_t)c * q->H * q->W;
        float *cr = col + (size_t)r * q->P;
        int lo, hi;
        tap_range(q->s, q->p, kj, q->W, q->Wo, &lo, &hi);
        for (int oh = 0; oh < q->Ho; oh++) {
            float *o = cr + (size_t)oh * q->Wo;
            const int ih = oh * q->s - q->p + ki;
            if (ih < 0 || ih >= q->H) {
                memset(o, 0, sizeof(float) * (size_t)q->Wo);
                continue;
            }
            const float *xr = xc + (size_t)ih * q->W;
            const int off = kj - q->p;
            for (int ow = 0; ow < lo; ow++) o[ow] = 0.0f;
            if (q->s == 1)
                memcpy(o + lo, xr + lo + off, sizeof(float) * (size_t)(hi - lo));
            else
                for (int ow = lo; ow < hi; ow++) o[ow] = xr[ow * q->s + off];
            for (int ow = hi; ow < q->Wo; ow++) o[ow] = 0.0f;
        }
    }
}

/* dx[c][ih][iw] += dcol[(c·kh + ki)·kw + kj][oh·Wo + ow] (the adjoint of im2col) for one image. */
static void col2im(const geom *q, const float *dcol, float *dx, int par) {
#pragma omp parallel for schedule(static) if (par)
    for (int c = 0; c < q->Cin; c++) {
        float *dxc = dx + (size_t)c * q->H * q->W;
        for (int ki = 0; ki < q->kh; ki++)
            for (int kj = 0; kj < q->kw; kj++) {
                const float *cr = dcol + ((size_t)(c * q->kh + ki) * q->kw + kj) * q->P;
                int lo, hi;
                tap_range(q->s, q->p, kj, q->W, q->Wo, &lo, &hi);
                for (int oh = 0; oh < q->Ho; oh++) {
                    const int ih = oh * q->s - q->p + ki;
                    if (ih < 0 || ih >= q->H) continue;
                    float *xr = dxc + (size_t)ih * q->W;
                    const float *o = cr + (size_t)oh * q->Wo;
                    const int off = kj - q->p;
                    for (int ow = lo; ow < hi; ow++) xr[ow * q->s + off] += o[ow];
                }
            }
    }
}

static void sgemm(const geom *q, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    vt_gemm(q->gemm, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* Forward of one image: y_b (Cout, P) = W_g · col_g per group, plus bias. */
static void conv_image_fwd(const geom *q, const float *x, const float *w, const float *bias, float *col, float *y,
                           int par) {
    const float *src = x;
    if (q->mode == M_IM2COL) {
        im2col(q, x, col, par);
        src = col;
    }
    for (int g = 0; g < q->G; g++)
        sgemm(q, 0, 0, q->Og, q->P, q->Kg, w + (size_t)g * q->Og * q->Kg, q->Kg, src + (size_t)g * q->Kg * q->P, q->P,
              0.0f, y + (size_t)g * q->Og * q->P, q->P);
    if (bias || q->relu) {
#pragma omp parallel for schedule(static) if (par)
        for (int o = 0; o < q->Cout; o++) {
            float *yo = y + (size_t)o * q->P;
            const float bv = bias ? bias[o] : 0.0f;
            if (q->relu)
                for (int i = 0; i < q->P; i++) {
                    const float v = yo[i] + bv;
                    yo[i] = vt_relu_f(v);
                }
            else
                for (int i = 0; i < q->P; i++) yo[i] += bv;
        }
    }
}

/* Backward of one image: dW += dY_g·col_gᵀ (into dw), dcol_g = W_gᵀ·dY_g then col2im into dx. col is reused
 * for dcol group by group (dW_g has consumed col_g before dcol_g overwrites it). */
static void conv_image_bwd(const geom *q, const float *x, const float *w, const float *dy, float *col, float *dx,
                           float *dw, int par) {
    if (q->mode == M_POINTWISE) {
        for (int g = 0; g < q->G; g++) {
            const float *dyg = dy + (size_t)g * q->Og * q->P, *wg = w + (size_t)g * q->Og * q->Kg;
            if (dw) sgemm(q, 0, 1, q->Og, q->Kg, q->P, dyg, q->P, x + (size_t)g * q->Kg * q->P, q->P, 1.0f,
                          dw + (size_t)g * q->Og * q->Kg, q->Kg);
            if (dx) sgemm(q, 1, 0, q->Kg, q->P, q->Og, wg, q->Kg, dyg, q->P, 1.0f, dx + (size_t)g * q->Kg * q->P, q->P);
        }
        return;
    }
    if (dw) im2col(q, x, col, par);
    for (int g = 0; g < q->G; g++) {
        const float *dyg = dy + (size_t)g * q->Og * q->P, *wg = w + (size_t)g * q->Og * q->Kg;
        float *colg = col + (size_t)g * q->Kg * q->P;
        if (dw) sgemm(q, 0, 1, q->Og, q->Kg, q->P, dyg, q->P, colg, q->P, 1.0f, dw + (size_t)g * q->Og * q->Kg, q->Kg);
        if (dx) sgemm(q, 1, 0, q->Kg, q->P, q->Og, wg, q->Kg, dyg, q->P, 0.0f, colg, q->P);
    }
    if (dx) col2im(q, col, dx, par);
}

/* ---- depthwise NCHW (groups == Cin == Cout): direct loops over one (H, W) plane ---- */

/* Loops run tap by tap over the whole plane (which stays in cache), so the valid output range of each tap is
 * computed once and the innermost loop is a plain axpy / dot over an output row. */
static void dw_plane_fwd(const geom *q, const float *restrict x, const float *w, float bv, float *restrict y) {
    const int Ho = q->Ho, Wo = q->Wo, s = q->s;
    for (int64_t i = 0; i < (int64_t)Ho * Wo; i++) y[i] = bv;
    for (int ki = 0; ki < q->kh; ki++) {
        int oh0, oh1;
        tap_range(s, q->p, ki, q->H, Ho, &oh0, &oh1);
        for (int kj = 0; kj < q->kw; kj++) {
            int lo, hi;
            tap_range(s, q->p, kj, q->W, Wo, &lo, &hi);
            const float wv = w[ki * q->kw + kj];
            const int off = kj - q->p;
            for (int oh = oh0; oh < oh1; oh++) {
                float *restrict yr = y + (size_t)oh * Wo;
                const float *restrict xr = x + (size_t)(oh * s - q->p + ki) * q->W;
                if (s == 1)
                    for (int ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow + off];
                else
                    for (int ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * s + off];
            }
        }
    }
}

/* dx += Wᵀ·dy and dw += dy ⋆ x for one plane (dx or dw may be NULL). */
static void dw_plane_bwd(const geom *q, const float *restrict x, const float *w, const float *restrict dy,
                         float *restrict dx, float *dw) {
    const int Wo = q->Wo, s = q->s;
    for (int ki = 0; ki < q->kh; ki++) {
        int oh0, oh1;
        tap_range(s, q->p, ki, q->H, q->Ho, &oh0, &oh1);
        for (int kj = 0; kj < q->kw; kj++) {
            int lo, hi;
            tap_range(s, q->p, kj, q->W, Wo, &lo, &hi);
            const int off = kj - q->p;
            const float wv = w[ki * q->kw + kj];
            float acc = 0.0f;
            for (int oh = oh0; oh < oh1; oh++) {
                const float *restrict dr = dy + (size_t)oh * Wo;
                const size_t base = (size_t)(oh * s - q->p + ki) * q->W;
                if (dx) {
                    float *restrict xr = dx + base;
                    if (s == 1)
                        for (int ow = lo; ow < hi; ow++) xr[ow + off] += wv * dr[ow];
                    else
                        for (int ow = lo; ow < hi; ow++) xr[ow * s + off] += wv * dr[ow];
                }
                if (dw) {
                    const float *restrict xr = x + base;
                    float t = 0.0f;
#pragma omp simd reduction(+ : t)
                    for (int ow = lo; ow < hi; ow++) t += dr[ow] * xr[ow * s + off];
                    acc += t;
                }
            }
            if (dw) dw[ki * q->kw + kj] += acc;
        }
    }
}

/* Stride-1 depthwise fast path: the plane is copied into a zero-padded scratch so every tap is in bounds, and
 * outputs are computed VB at a time with all taps accumulated in registers (each output written once). */

#define VB 16
/* DW_ROWS output rows of VB outputs at once, 8 independent vector accumulators (one row alone had 2, and the FMA
 * latency bound the loop; GroupMixFormer-T training b16: the conv2d op 2.7-2.9 -> 2.1-2.2 s per two steps): with
 * AVX-512 8 rows of one 16-float register (on 2026-11-28's Cascade Lake 1.3-1.5x the 4 rows of two 8-float ones,
 * e.g. 64 planes of 56x56: k = 7 0.65 -> 0.43 ms, k = 3 0.21 -> 0.16 ms), else 4 rows of two. */
#if defined(__AVX512F__)
#define DW_ROWS 8
#else
#define DW_ROWS 4
#endif

static int round_up(int a, int m) { return (a + m - 1) / m * m; }
static int imax(int a, int b) { return a > b ? a : b; }

typedef struct {
    int Hp, Wp; /* padded input plane (forward and dW), DW_ROWS - 1 zero rows past the padding */
    int Hd, Wd; /* padded output-gradient plane (backward), likewise */
    int64_t fwd, bwd; /* scratch floats per thread */
} dwdims;

static dwdims dw_dims(const geom *q) {
    dwdims d;
    const int Wo16 = round_up(q->Wo, VB), W16 = round_up(q->W, VB);
    d.Hp = q->H + 2 * q->p + DW_ROWS - 1;
    d.Wp = Wo16 + q->kw - 1;
    d.Hd = imax(q->H + q->p + q->kh - 1, q->H + 2 * q->p) + DW_ROWS - 1;
    d.Wd = imax(W16 + q->p + q->kw - 1, Wo16 + 2 * (q->kw - 1));
    d.fwd = (int64_t)d.Hp * d.Wp;
    d.bwd = d.fwd + (int64_t)d.Hd * d.Wd + (int64_t)q->kh * q->kw * VB;
    return d;
}

/* x (H, W) into the padded plane xp (row stride Wp) at row top, column left. The rest of xp stays as it is: each
 * thread zeroes its padded planes once per run (zero_pads), and all planes of a node share one geometry, so the
 * border is still zero (zeroing every plane's border cost a 3x3 conv on 14x14 planes as much as its arithmetic). */
static void fill_pad(const float *x, int H, int W, int top, int left, float *xp, int Wp) {
    for (int r = 0; r < H; r++) memcpy(xp + (size_t)(r + top) * Wp + left, x + (size_t)r * W, sizeof(float) * W);
}

/* Zeroes n floats of a thread's padded-plane scratch before its first plane. */
static void zero_pads(float *p, int64_t n) { memset(p, 0, sizeof(float) * (size_t)n); }

/* Eight floats as one value (GNU C vector extension, gcc and clang; lowered to whatever vectors the target has):
 * dw1_rows's accumulators. Written with `float a[VB]` arrays and `omp simd` loops, gcc kept them in memory and
 * loaded and stored each at every tap (perf: the loop bound by those round trips). */
typedef float v8f __attribute__((vector_size(32))); /* never passed or returned (its ABI depends on the ISA) */

#if defined(__FMA__) /* one fused multiply-add (gcc's -std=c11 keeps a·b + c as two roundings and two instructions) */
#define V8_MADD(acc, a, b) ((acc) = _mm256_fmadd_ps((a), (b), (acc)))
#else
#define V8_MADD(acc, a, b) ((acc) += (a) * (b))
#endif

/* The first min(cnt, 8) floats of *vp into p (added to them when add). */
static inline __attribute__((always_inline)) void v8_store_first(float *p, const v8f *vp, int cnt, int add) {
    v8f v = *vp;
#if defined(__AVX2__)
    if (cnt < 8 && !add) { /* a masked store: a copy loop here became `rep movs` (tens of cycles for 14 floats) */
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(p, m, (__m256)v);
        return;
    }
#endif
    if (cnt < 8) { /* adding (a masked load and store was slower than this loop on Zen 3), or no AVX2 */
        float o[8];
        memcpy(o, &v, sizeof o);
        for (int t = 0; t < cnt; t++) p[t] = add ? p[t] + o[t] : o[t];
        return;
    }
    if (add) {
        v8f t;
        memcpy(&t, p, sizeof t);
        v += t;
    }
    memcpy(p, &v, sizeof v);
}

/* Output rows [0, R) (R <= DW_ROWS), columns [0, n) (n <= VB) of out (row stride ldo) = (add: +=) init +
 * Σ_{ki, kj} w[ki·kw + kj]·src[r·ld + ki·ks + kj·js + t] over a padded plane (forward: the input, steps +row, +1;
 * dX: the output gradient, steps −row, −1). Always computes DW_ROWS rows of VB (the planes have DW_ROWS − 1 zero
 * rows past their end and VB-rounded widths, dw_dims) in 8 vector registers, one fused multiply-add per tap and
 * register (the separate multiply and add of -std=c11 had made a 7x7 plane 1.2x slower). */
static inline void dw1_rows(const float *restrict src, ptrdiff_t ld, ptrdiff_t ks, ptrdiff_t js,
                            const float *restrict w, int kh, int kw, float init, float *restrict out, ptrdiff_t ldo,
                            int R, int n, int add) {
#if defined(__AVX512F__)
    __m512 a[DW_ROWS];
    for (int r = 0; r < DW_ROWS; r++) a[r] = _mm512_set1_ps(init);
    for (int ki = 0; ki < kh; ki++)
        for (int kj = 0; kj < kw; kj++) {
            const __m512 wv = _mm512_set1_ps(w[ki * kw + kj]);
            const float *restrict xr = src + ki * ks + kj * js;
            for (int r = 0; r < DW_ROWS; r++) a[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xr + r * ld), a[r]);
        }
    const __mmask16 m = (__mmask16)(n < 16 ? (1u << n) - 1 : 0xFFFFu);
    for (int r = 0; r < R; r++) {
        float *o = out + r * ldo;
        _mm512_mask_storeu_ps(o, m, add ? _mm512_add_ps(a[r], _mm512_maskz_loadu_ps(m, o)) : a[r]);
    }
#else
    enum { NV = VB / 8 };
    v8f a[DW_ROWS][NV];
    for (int r = 0; r < DW_ROWS; r++)
        for (int v = 0; v < NV; v++) a[r][v] = (v8f){init, init, init, init, init, init, init, init};
    for (int ki = 0; ki < kh; ki++)
        for (int kj = 0; kj < kw; kj++) {
            const float c = w[ki * kw + kj];
            const v8f wv = {c, c, c, c, c, c, c, c};
            const float *restrict xr = src + ki * ks + kj * js;
            for (int r = 0; r < DW_ROWS; r++)
                for (int v = 0; v < NV; v++) {
                    v8f xv;
                    memcpy(&xv, xr + r * ld + 8 * v, sizeof xv);
                    V8_MADD(a[r][v], wv, xv);
                }
        }
    for (int r = 0; r < R; r++) /* whole and masked vector stores (a scalar copy loop here had become `rep movs`:
                                 * a third of a 3x3 conv's time) */
        for (int v = 0; v < NV && 8 * v < n; v++) v8_store_first(out + r * ldo + 8 * v, &a[r][v], n - 8 * v, add);
#endif
}

static void dw1_plane_fwd(const geom *q, const dwdims *d, const float *x, const float *w, float bv, float *y,
                          float *xp) {
    const int kh = q->kh, kw = q->kw, Wo = q->Wo, Wp = d->Wp;
    fill_pad(x, q->H, q->W, q->p, q->p, xp, Wp);
    for (int oh = 0; oh < q->Ho; oh += DW_ROWS) {
        const int R = q->Ho - oh < DW_ROWS ? q->Ho - oh : DW_ROWS;
        for (int ow0 = 0; ow0 < Wo; ow0 += VB)
            dw1_rows(xp + (size_t)oh * Wp + ow0, Wp, Wp, 1, w, kh, kw, bv, y + (size_t)oh * Wo + ow0, Wo, R,
                     Wo - ow0 < VB ? Wo - ow0 : VB, 0);
    }
}

/* A one-plane geometry for vt_dw_plane. */
static geom plane_geom(int H, int W, int k) {
    geom q = {0};
    q.B = q.Cin = q.Cout = q.G = 1;
    q.H = q.Ho = H;
    q.W = q.Wo = W;
    q.kh = q.kw = k;
    q.s = 1;
    q.p = k / 2;
    q.mode = M_DEPTHWISE;
    q.P = H * W;
    return q;
}

size_t vt_dw_plane_scratch(int H, int W, int k) {
    const geom q = plane_geom(H, W, k);
    return (size_t)dw_dims(&q).fwd;
}

void vt_dw_plane(const float *x, int H, int W, int k, const float *w, float bias, float *y, float *scratch) {
    const geom q = plane_geom(H, W, k);
    const dwdims d = dw_dims(&q);
    dw1_plane_fwd(&q, &d, x, w, bias, y, scratch);
}

/* ac[kj·VB + t] += Σ_{oh, blocks} dr[oh·Wd + ow0 + t]·xr[oh·Wp + ow0 + kj + t] for t < 8 and kj < KW (one kernel row's
 * taps, 8 lanes of the VB-wide blocks): the taps' sums stay in registers over the whole plane and each dy vector is
 * loaded once for all KW taps (the loop this replaced loaded and stored an accumulator at every multiply-add).
 * dr: the padded dy plane at output row 0, xr: the padded x plane at the kernel row; KW <= 7, a constant where
 * inlined (named accumulators: gcc keeps an array of vectors in memory). */
static inline __attribute__((always_inline)) void dwk_taps(const float *dr, int Wd, const float *xr, int Wp, int Ho,
                                                           int Wo, const int KW, float *ac) {
    v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0};
    for (int oh = 0; oh < Ho; oh++)
        for (int ow0 = 0; ow0 < Wo; ow0 += VB) { /* dy is zero past Wo in its padded plane */
            const float *d = dr + (size_t)oh * Wd + ow0, *xv = xr + (size_t)oh * Wp + ow0;
            v8f dv;
            memcpy(&dv, d, sizeof dv);
#define DWK_TAP(j, aj)                                                                                                \
    if (j < KW) {                                                                                                      \
        v8f t_;                                                                                                        \
        memcpy(&t_, xv + j, sizeof t_);                                                                                \
        V8_MADD(aj, dv, t_);                                                                                           \
    }
            DWK_TAP(0, a0) DWK_TAP(1, a1) DWK_TAP(2, a2) DWK_TAP(3, a3) DWK_TAP(4, a4) DWK_TAP(5, a5) DWK_TAP(6, a6)
#undef DWK_TAP
        }
    const v8f all[7] = {a0, a1, a2, a3, a4, a5, a6};
    for (int j = 0; j < KW; j++) {
        v8f o;
        memcpy(&o, ac + (size_t)j * VB, sizeof o);
        o += all[j];
        memcpy(ac + (size_t)j * VB, &o, sizeof o);
    }
}

#if defined(__AVX512F__)
/* dwk_taps on whole VB-wide blocks, one 16-float register per tap: the same per-lane sums in the same order as two
 * 8-lane passes, in half the instructions (the backward of a depthwise conv and a small loss on GroupMixFormer-M's
 * aggregator maps, 48x8x56x56, best of 12, three alternated runs, 2026-11-28 Cascade Lake: k = 7 7.5-10.9 ->
 * 6.1-7.3 ms, k = 3 4.0-5.5 -> 3.5-4.0 ms). */
static inline __attribute__((always_inline)) void dwk_taps16(const float *dr, int Wd, const float *xr, int Wp, int Ho,
                                                             int Wo, const int KW, float *ac) {
    __m512 a[7];
    for (int j = 0; j < 7; j++) a[j] = _mm512_setzero_ps();
    for (int oh = 0; oh < Ho; oh++)
        for (int ow0 = 0; ow0 < Wo; ow0 += VB) {
            const float *d = dr + (size_t)oh * Wd + ow0, *xv = xr + (size_t)oh * Wp + ow0;
            const __m512 dv = _mm512_loadu_ps(d);
            for (int j = 0; j < KW; j++) a[j] = _mm512_fmadd_ps(dv, _mm512_loadu_ps(xv + j), a[j]);
        }
    for (int j = 0; j < KW; j++) {
        float *o = ac + (size_t)j * VB;
        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), a[j]));
    }
}
#endif

/* dx += full correlation of dy with w; acc (kh·kw·VB) += per-lane partial sums of dW (reduced by the caller). */
static void dw1_plane_bwd(const geom *q, const dwdims *d, const float *x, const float *w, const float *dy, float *dx,
                          float *acc, float *xp, float *dyp) {
    const int kh = q->kh, kw = q->kw, H = q->H, W = q->W, Wo = q->Wo, p = q->p, Wp = d->Wp, Wd = d->Wd;
    fill_pad(dy, q->Ho, Wo, kh - 1, kw - 1, dyp, Wd);
    if (dx)
        for (int ih = 0; ih < H; ih += DW_ROWS) {
            const int R = H - ih < DW_ROWS ? H - ih : DW_ROWS;
            for (int iw0 = 0; iw0 < W; iw0 += VB)
                dw1_rows(dyp + (size_t)(ih + p + kh - 1) * Wd + iw0 + p + kw - 1, Wd, -(ptrdiff_t)Wd, -1, w, kh, kw,
                         0.0f, dx + (size_t)ih * W + iw0, W, R, W - iw0 < VB ? W - iw0 : VB, 1);
        }
    if (!acc) return;
    fill_pad(x, H, W, p, p, xp, Wp);
#if defined(__AVX512F__) /* whole VB-wide blocks per call */
#define DWK_TAPS dwk_taps16
#define DWK_LANES VB
#else /* 8 of the VB lanes per call */
#define DWK_TAPS dwk_taps
#define DWK_LANES 8
#endif
    for (int ki = 0; ki < kh; ki++)
        for (int h = 0; h < VB; h += DWK_LANES) {
            const float *dr = dyp + (size_t)(kh - 1) * Wd + kw - 1 + h, *xr = xp + (size_t)ki * Wp + h;
            float *ac = acc + (size_t)ki * kw * VB + h;
            switch (kw) { /* the kernel widths the models use, as constants; others one tap at a time */
            case 3: DWK_TAPS(dr, Wd, xr, Wp, q->Ho, Wo, 3, ac); break;
            case 5: DWK_TAPS(dr, Wd, xr, Wp, q->Ho, Wo, 5, ac); break;
            case 7: DWK_TAPS(dr, Wd, xr, Wp, q->Ho, Wo, 7, ac); break;
            default:
                for (int kj = 0; kj < kw; kj++) DWK_TAPS(dr, Wd, xr + kj, Wp, q->Ho, Wo, 1, ac + (size_t)kj * VB);
            }
        }
#undef DWK_TAPS
#undef DWK_LANES
}

/* ---- conv2d kernels ---- */

static void conv_fwd(vt_node *n) {
    const geom q = *VT_OP_P(n, geom);
    const float *x = n->in[0]->data, *w = n->in[1]->data, *b = n->nin > 2 ? n->in[2]->data : NULL;
    float *y = n->out->data;
    const size_t xs = (size_t)q.Cin * q.H * q.W, ys = (size_t)q.Cout * q.P;
    if (q.mode == M_DEPTHWISE && q.s == 1) {
        const dwdims d = dw_dims(&q);
#pragma omp parallel num_threads(q.tf)
        {
            float *xp = n->fws->data + (size_t)omp_get_thread_num() * d.fwd;
            zero_pads(xp, d.fwd);
#pragma omp for schedule(static)
            for (int bc = 0; bc < q.B * q.Cin; bc++) {
                const int c = bc % q.Cin;
                dw1_plane_fwd(&q, &d, x + (size_t)bc * q.H * q.W, w + (size_t)c * q.kh * q.kw, b ? b[c] : 0.0f,
                              y + (size_t)bc * q.P, xp);
                if (q.relu) relu_n(y + (size_t)bc * q.P, q.P);
            }
        }
        return;
    }
    if (q.mode == M_DEPTHWISE) {
#pragma omp parallel for schedule(static)
        for (int bc = 0; bc < q.B * q.Cin; bc++) {
            const int c = bc % q.Cin;
            dw_plane_fwd(&q, x + (size_t)bc * q.H * q.W, w + (size_t)c * q.kh * q.kw, b ? b[c] : 0.0f,
                         y + (size_t)bc * q.P);
            if (q.relu) relu_n(y + (size_t)bc * q.P, q.P);
        }
        return;
    }
    float *col = n->fws ? n->fws->data : NULL;
    if (q.tf <= 1) {
        for (int i = 0; i < q.B; i++) conv_image_fwd(&q, x + i * xs, w, b, col, y + i * ys, 1);
        return;
    }
#pragma omp parallel num_threads(q.tf)
    {
        float *mycol = col ? col + (size_t)omp_get_thread_num() * q.col : NULL;
#pragma omp for schedule(static)
        for (int i = 0; i < q.B; i++) conv_image_fwd(&q, x + i * xs, w, b, mycol, y + i * ys, 0);
    }
}

/* wt (C, Cout/G, k, k) = w (Cout, C/G, k, k) with each group's in and out channels swapped and its kernels
 * flipped: the weight of the transposed convolution, which gives a stride-1 conv's dX as a forward conv of dy. */
static void flip_weight(const float *w, float *wt, int C, int Cout, int G, int kk) {
    const int Cg = C / G, Og = Cout / G;
    for (int g = 0; g < G; g++)
        for (int ci = 0; ci < Cg; ci++)
            for (int co = 0; co < Og; co++) {
                float *d = wt + (((size_t)g * Cg + ci) * Og + co) * kk;
                const float *src = w + (((size_t)g * Og + co) * Cg + ci) * kk;
                for (int t = 0; t < kk; t++) d[t] = src[kk - 1 - t];
            }
}

/* Floats of conv_bwd's scratch that dx_prim takes: one image's dX, the flipped weight and the primitive's scratch
 * (its blocked copies), 64-byte aligned. */
static int64_t dx_prim_floats(const geom *q, const vt_gemm_conv *bp) {
    return (int64_t)q->Cin * q->H * q->W + (int64_t)q->Cout * q->Kg + 16 + (int64_t)(vt_gemm_conv_scratch(bp) + 3) / 4;
}

/* dX of the images through bprim (padding k − 1 − p, the flipped weight), one image at a time, added into x's
 * gradient; ws: scratch of dx_prim_floats. Returns the first image it could not do (B when all went through). Where
 * dX went through im2col's adjoint (dcol = Wᵀ·dY, then col2im), Next-ViT-S's 112×112 stem convs (64 -> 32 -> 64
 * channels) took 240 and 178 ms per batch-16 training step, forward and backward (AMD EPYC Zen 3, 2 threads). */
static int dx_prim(const vt_node *n, const geom *q, float *ws) {
    const size_t xs = (size_t)q->Cin * q->H * q->W, ys = (size_t)q->Cout * q->P;
    float *tmp = ws, *wt = tmp + xs, *dx = n->in[0]->grad;
    void *sc = (void *)(((uintptr_t)(wt + (size_t)q->Cout * q->Kg) + 63) & ~(uintptr_t)63);
    flip_weight(n->in[1]->data, wt, q->Cin, q->Cout, q->G, q->kh * q->kw);
    for (int i = 0; i < q->B; i++) {
        if (vt_gemm_conv_run(q->bprim, n->out->grad + i * ys, wt, NULL, tmp, sc, i == 0) != 0) return i;
        float *d = dx + i * xs;
#pragma omp parallel for schedule(static)
        for (size_t e = 0; e < xs; e++) d[e] += tmp[e];
    }
    return q->B;
}

/* The dX that conv_bwd left for bprim (dx: x's gradient, NULL when not wanted), with ws as scratch; images the
 * primitive failed on go through im2col's adjoint (col buffer ws). */
static void conv_bwd_dx(const vt_node *n, const geom *q, float *dx, float *ws) {
    if (!q->bprim || !dx) return;
    const size_t xs = (size_t)q->Cin * q->H * q->W, ys = (size_t)q->Cout * q->P;
    for (int i = dx_prim(n, q, ws); i < q->B; i++)
        conv_image_bwd(q, n->in[0]->data + i * xs, n->in[1]->data, n->out->grad + i * ys, ws, dx + i * xs, NULL, 1);
}

/* dW of the images through wprim, one image at a time (its NCHW x and dy reordered into ws first), added into w's
 * gradient. Returns the first image it could not do (B when all went through). */
static int dw_prim(const vt_node *n, const geom *q, float *ws) {
    const size_t xs = (size_t)q->Cin * q->H * q->W, ys = (size_t)q->Cout * q->P;
    for (int i = 0; i < q->B; i++)
        if (vt_gemm_conv_wgrad_run(q->wprim, n->in[0]->data + i * xs, n->out->grad + i * ys, n->in[1]->grad, ws) != 0)
            return i;
    return q->B;
}

static void conv_bwd(vt_node *n) {
    const geom q = *VT_OP_P(n, geom);
    const vt_tensor *X = n->in[0], *Wt = n->in[1], *Bt = n->nin > 2 ? n->in[2] : NULL;
    const float *x = X->data, *w = Wt->data, *dy = n->out->grad;
    float *dx = X->grad, *dw = Wt->grad;
    const size_t xs = (size_t)q.Cin * q.H * q.W, ys = (size_t)q.Cout * q.P;
    if (Bt && Bt->grad) {
#pragma omp parallel for schedule(static)
        for (int o = 0; o < q.Cout; o++) {
            double s = 0.0;
            for (int i = 0; i < q.B; i++) {
                const float *d = dy + i * ys + (size_t)o * q.P;
                float t = 0.0f;
#pragma omp simd reduction(+ : t)
                for (int k = 0; k < q.P; k++) t += d[k];
                s += t;
            }
            Bt->grad[o] += (float)s;
        }
    }
    if (!dx && !dw) return;
    if (q.mode == M_DEPTHWISE && q.s == 1) {
        const dwdims d = dw_dims(&q);
        const int K = q.kh * q.kw;
#pragma omp parallel num_threads(q.tb)
        {
            float *xp = n->bws->data + (size_t)omp_get_thread_num() * d.bwd, *dyp = xp + d.fwd,
                  *acc = dyp + (size_t)d.Hd * d.Wd;
            zero_pads(xp, d.fwd + (int64_t)d.Hd * d.Wd);
#pragma omp for schedule(static)
            for (int c = 0; c < q.Cin; c++) {
                if (dw) memset(acc, 0, sizeof(float) * (size_t)K * VB);
                for (int i = 0; i < q.B; i++) {
                    const size_t pl = (size_t)i * q.Cin + c;
                    dw1_plane_bwd(&q, &d, x + pl * q.H * q.W, w + (size_t)c * K, dy + pl * q.P,
                                  dx ? dx + pl * q.H * q.W : NULL, dw ? acc : NULL, xp, dyp);
                }
                if (dw)
                    for (int k = 0; k < K; k++) {
                        float t = 0.0f;
                        for (int l = 0; l < VB; l++) t += acc[(size_t)k * VB + l];
                        dw[(size_t)c * K + k] += t;
                    }
            }
        }
        return;
    }
    if (q.mode == M_DEPTHWISE) {
#pragma omp parallel for schedule(static)
        for (int c = 0; c < q.Cin; c++)
            for (int i = 0; i < q.B; i++) {
                const size_t pl = (size_t)i * q.Cin + c;
                dw_plane_bwd(&q, x + pl * q.H * q.W, w + (size_t)c * q.kh * q.kw, dy + pl * q.P,
                             dx ? dx + pl * q.H * q.W : NULL, dw ? dw + (size_t)c * q.kh * q.kw : NULL);
            }
        return;
    }
    float *ws = n->bws ? n->bws->data : NULL;
    float *const dx_all = dx;
    if (q.bprim) dx = NULL; /* dX after dW, through the primitive */
    if (dw && q.wprim) { /* images the primitive failed on take im2col + sgemm */
        for (int i = dw_prim(n, &q, ws); i < q.B; i++)
            conv_image_bwd(&q, x + i * xs, w, dy + i * ys, ws, NULL, dw, 1);
        dw = NULL;
    }
    if (!dx && !dw) {
        conv_bwd_dx(n, &q, dx_all, ws);
        return;
    }
    if (q.tb <= 1) {
        for (int i = 0; i < q.B; i++)
            conv_image_bwd(&q, x + i * xs, w, dy + i * ys, ws, dx ? dx + i * xs : NULL, dw, 1);
        conv_bwd_dx(n, &q, dx_all, ws);
        return;
    }
    /* images in parallel; each thread has a column buffer and a private dW accumulator */
    const int64_t wn = Wt->numel, per = (q.mode == M_POINTWISE ? 0 : q.col) + (dw ? wn : 0);
    if (dw) {
        for (int t = 0; t < q.tb; t++) memset(ws + t * per, 0, sizeof(float) * (size_t)wn);
    }
#pragma omp parallel num_threads(q.tb)
    {
        float *mine = ws + (size_t)omp_get_thread_num() * per;
        float *mydw = dw ? mine : NULL, *mycol = mine + (dw ? wn : 0);
#pragma omp for schedule(static)
        for (int i = 0; i < q.B; i++)
            conv_image_bwd(&q, x + i * xs, w, dy + i * ys, mycol, dx ? dx + i * xs : NULL, mydw, 0);
    }
    if (dw) {
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < wn; k++) {
            float s = 0.0f;
            for (int t = 0; t < q.tb; t++) s += ws[t * per + k];
            dw[k] += s;
        }
    }
    conv_bwd_dx(n, &q, dx_all, ws + (dw ? wn : 0));
}

/* conv2d.onednn, dense and grouped convs (the im2col mode; square kernels) of stride 1, or overlapping (k > s) on at
 * most 4 input channels (first layers) or, at oneDNN's AVX-512 tier (or VITC_GEMM=onednn), on any number: one oneDNN
 * direct convolution per image on the blocked layouts it picks, x and y reordered to and from them through the kernel's
 * planned scratch (one image's: the whole batch's blocked copies had grown Next-ViT-S's batch-16 inference arena from
 * 138 to 181 MiB), the weight packed once per run (training changes it); the backward is the op's (dX of stride 1
 * through bprim, dx_prim). Measured against im2col + sgemm (forward, reorders included, best of 10, 2 threads, AMD EPYC
 * Zen 3, 2026-11-27): stride 1, 3x3 at 112x112: 64 -> 32 channels 1.28-1.73x (batch 1, 16), 32 -> 64 1.28x; 3-channel
 * overlapping stems: 1.10-1.27x (7x7/4, 3x3/2); stride 2 on 20 to 320 channels: 0.84-1.07x at batch 16 (0.87-0.99 on
 * 56x56 to 14x14 maps); non-overlapping patch embeds (4x4/4, 16x16/16, whose im2col is a reshape): 1.01-1.19x, within
 * this host's noise. Those strided convs on more than 4 channels take the primitive at oneDNN's AVX-512 tier only,
 * where it is faster (3x3/2, 2 threads, Intel Xeon Ice Lake, 2026-11-28, alternated, best of 12: 20 -> 64 to 320 -> 512
 * channels on 112x112 to 14x14 maps 1.04-1.57x at batch 1, 1.16-1.53x at batch 16); the non-overlapping patch embeds
 * stay on im2col on every tier (they also keep the plain ViTs' results, and the demo's accuracy, bit for bit).
 * The prepare also makes the op's weight-gradient primitive (the plan's primitives are made here, at finalize), one
 * oneDNN convolution per image (dw_prim) instead of im2col + sgemm, for stride 1, the first layers and overlapping (k >
 * s) strided ones with at least 784 output pixels per image: 3x3, batch 16, a backward pass of the op (dX included) and
 * of a small loss after it (a square and means), best of 4, 2 threads, Intel Xeon Cascade Lake, 2026-11-28: stride 1 at
 * 112x112 64 -> 32 channels 186 -> 105 ms, 32 -> 64 170 -> 142, at 56x56 64 -> 64 74 -> 49, 28x28 128 -> 128 46 -> 41,
 * 14x14 256 -> 256 47 -> 43; stride 2 from 112x112 64 -> 64 94 -> 69, from 56x56 64 -> 128 33 -> 30, from 28x28 128 ->
 * 256 32 -> 31, from 14x14 256 -> 512 41 -> 45 (hence the 784 pixels). */
static int conv_prim_prepare(vt_node *n) {
    geom *q = VT_OP_P(n, geom);
    if (q->mode != M_IM2COL || q->kh != q->kw) return 0;
    const vt_gemm_plan *gp = &n->g->gemm;
    const int first = q->s == 1 || (q->Cin <= 4 && q->kh > q->s); /* the forward primitive's convs on every tier */
    const int avx512 = gp->force == VT_GEMM_ONEDNN || (gp->force == VT_GEMM_AUTO && gp->onednn >= VT_ISA_AVX512);
    const int fwd = first || (avx512 && q->kh > q->s);
    /* the scratch of bprim and wprim: the column buffer after the dW partials (conv_bwd) */
    const int64_t room = q->tb > 1 ? q->tb * (q->col + n->in[1]->numel) - n->in[1]->numel : q->col;
    if (n->g->training && n->in[1]->requires_grad && n->bws && (first || (q->P >= 784 && q->kh > q->s))) {
        q->wprim = vt_gemm_conv_wgrad(&n->g->gemm, 1, q->Cin, q->H, q->W, q->Cout, q->kh, q->s, q->p, q->G, 1);
        if (q->wprim && (int64_t)(vt_gemm_conv_scratch(q->wprim) + 3) / 4 > room) q->wprim = NULL;
    }
    if (!fwd) return 0;
    q->prim = vt_gemm_conv_prim(&n->g->gemm, 1, q->Cin, q->H, q->W, q->Cout, q->kh, q->s, q->p, q->G,
                                (n->nin > 2 ? VT_CONV_BIAS : 0) | (q->relu ? VT_CONV_RELU : 0), 1);
    if (!q->prim) return 0;
    if (n->g->training && q->s == 1 && q->kh > 1 && n->in[0]->requires_grad && n->bws) {
        q->bprim = vt_gemm_conv_prim(&n->g->gemm, 1, q->Cout, q->Ho, q->Wo, q->Cin, q->kh, 1, q->kh - 1 - q->p, q->G,
                                     0, 1);
        if (q->bprim && dx_prim_floats(q, q->bprim) > room) q->bprim = NULL;
    }
    const size_t bytes = vt_gemm_conv_scratch(q->prim);
    return bytes == 0 || vt_kernel_work(n, VT_U8, (int64_t)bytes) != NULL;
}

static void conv_prim_fwd(vt_node *n) {
    const geom *q = VT_OP_P(n, geom);
    const size_t xs = (size_t)q->Cin * q->H * q->W, ys = (size_t)q->Cout * q->P;
    for (int i = 0; i < q->B; i++)
        if (vt_gemm_conv_run(q->prim, n->in[0]->data + i * xs, n->in[1]->data, n->nin > 2 ? n->in[2]->data : NULL,
                             n->out->data + i * ys, n->kws ? vt_tensor_u8(n->kws) : NULL, i == 0) != 0) {
            if (vt_node_fallback(n, 1) == 0) conv_fwd(n); /* oneDNN failed: the reference from now on */
            return;
        }
}

static const vt_kernel k_conv_prim = {"conv2d.onednn", conv_prim_prepare, conv_prim_fwd, 0};
static const vt_kernel *const conv_kernels[] = {&k_conv_prim, NULL};

static const vt_opdef op_conv2d = {"conv2d", conv_fwd, conv_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)),
                                   conv_kernels, VT_OP_GEMM};

/* Threads to spread images over: all of them when the batch covers them, else 1 (BLAS threads instead). On a bf16
 * graph, images whose products (mnk multiply-adds each) are bf16-sized stay in sequence: bf16 runs only outside
 * parallel regions, and the arithmetic must not depend on the thread count. */
static int image_threads(const vt_graph *g, int B, long long mnk) {
    const int nt = g->threads;
    return B >= nt && nt > 1 && !(g->gemm.bf16 && mnk >= VT_GEMM_BF16_MNK) ? nt : 1;
}

vt_tensor *vt_conv2d(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad, int groups) {
    if (vt_bad(g, 2, x, w)) return NULL;
    char sx[64], sw[64], sb[64];
    vt_shape_str(x, sx, 64);
    vt_shape_str(w, sw, 64);
    snprintf(sb, sizeof sb, "none");
    if (b) vt_shape_str(b, sb, 64);
    if (x->ndim != 4 || w->ndim != 4)
        return vt_fail(g, "conv2d", "input %s must be (B, Cin, H, W) and weight %s (%s) (Cout, Cin/groups, kh, kw)",
                       sx, sw, w->name);
    if (groups < 1 || stride < 1 || pad < 0)
        return vt_fail(g, "conv2d", "input %s, weight %s: bad groups %d / stride %d / padding %d", sx, sw, groups,
                       stride, pad);
    const int B = x->shape[0], Cin = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int Cout = w->shape[0], kh = w->shape[2], kw = w->shape[3];
    if (Cin % groups || Cout % groups || w->shape[1] != Cin / groups)
        return vt_fail(g, "conv2d",
                       "input %s, weight %s (%s), groups %d: need Cin %% groups == 0, Cout %% groups == 0 and "
                       "weight (Cout, Cin/groups = %d, kh, kw)",
                       sx, sw, w->name, groups, Cin % groups ? -1 : Cin / groups);
    if (b && (b->ndim != 1 || b->shape[0] != Cout))
        return vt_fail(g, "conv2d", "input %s, weight %s (%s): bias %s (%s) must be (%d)", sx, sw, w->name, sb,
                       b->name, Cout);
    const int Ho = (H + 2 * pad - kh) / stride + 1, Wo = (W + 2 * pad - kw) / stride + 1;
    if (H + 2 * pad < kh || W + 2 * pad < kw)
        return vt_fail(g, "conv2d", "input %s with padding %d is smaller than the %dx%d kernel of weight %s (%s)", sx,
                       pad, kh, kw, sw, w->name);
    const int shape[4] = {B, Cout, Ho, Wo};
    vt_tensor *in[3] = {x, w, b};
    vt_node *n = vt_new_node(g, &op_conv2d, in, b ? 3 : 2, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    int mode = M_IM2COL;
    if (groups == Cin && Cout == Cin && (groups > 1 || kh * kw > 1)) /* one channel: a depthwise conv too (hMHSA's
                                                                         * IHH on B·N one-channel 7×7 maps) */
        mode = M_DEPTHWISE;
    else if (kh == 1 && kw == 1 && stride == 1 && pad == 0)
        mode = M_POINTWISE;
    const int Cg = Cin / groups, P = Ho * Wo;
    const long long mnk = (long long)(Cout / groups) * P * Cg * kh * kw; /* each image's product per group */
    const int tf = mode == M_DEPTHWISE ? g->threads : image_threads(g, B, mnk);
    const int tb = tf;
    const geom q = {B, Cin, H, W, Cout, kh, kw, stride, pad, groups, Ho, Wo, mode, tf, tb,
                    Cg, Cout / groups, Cg * kh * kw, P, (int64_t)Cin * kh * kw * P, &g->gemm, NULL, NULL, NULL, 0};
    *VT_OP_P(n, geom) = q;
    n->macs = (int64_t)B * Cout * Ho * Wo * (Cin / groups) * kh * kw;
    if (mode == M_DEPTHWISE) {
        if (stride > 1) return n->out; /* direct loops, no scratch */
        const dwdims d = dw_dims(&q);
        if ((int64_t)tf * d.bwd > INT_MAX)
            return vt_fail(g, "conv2d", "input %s, weight %s: padded plane scratch is too large", sx, sw);
        vt_node_work(n, 0, (int64_t)tf * d.fwd);
        if (x->requires_grad || w->requires_grad) vt_node_work(n, 1, (int64_t)tb * d.bwd);
        return n->out;
    }
    const int64_t fwork = mode == M_IM2COL ? (int64_t)tf * q.col : 0;
    const int64_t bwork = tb > 1 ? (int64_t)tb * ((mode == M_IM2COL ? q.col : 0) + w->numel)
                                 : (mode == M_IM2COL ? q.col : 0);
    if (fwork > INT_MAX || bwork > INT_MAX)
        return vt_fail(g, "conv2d", "input %s, weight %s: column buffer of %lld floats is too large", sx, sw,
                       (long long)(fwork > bwork ? fwork : bwork));
    if (fwork) vt_node_work(n, 0, fwork);
    if (bwork && (x->requires_grad || w->requires_grad)) vt_node_work(n, 1, bwork);
    return n->out;
}

/* ---- depthwise conv, channels-last ---- */
/* x (B, H, W, L) read at channels [c0, c0 + C) (L = C, c0 = 0 for a plain map; a packed qkv's v channels otherwise,
 * with no slice copy), w (C, 1, kh, kw), stride 1, padding p -> (B, Ho, Wo, C), Ho = H + 2p - kh + 1, plus an optional
 * same-shape term r added to the output (CSwin's attention + LePE: no separate add pass).
 * fws: weights transposed to (kh·kw, C). bws: the same, then per-thread (kh·kw + 1)·C partials of dW, db. */
typedef struct {
    int B, H, W, C, kh, kw;
    int p;  /* padding */
    int Ho, Wo;
    int nt; /* threads of the dW/db reduction */
    int L, c0; /* x's channels per pixel and the first one convolved */
    int bias_in, add_in; /* input slots of b and r, -1 when absent */
    int gelu;            /* inference graphs (vt_dwconv_nhwc_gelu): GELU of the output */
    vt_gemm_conv *prim;  /* the oneDNN kernel's convolution (dwn_prim_prepare) */
    vt_gemm_conv *bprim; /* with prim, training: the same convolution of dY by the flipped taps (padding k − 1 − p),
                          * x's gradient when backward writes it rather than adds to it */
    int tr; /* a one-column map (W = Wo = 1) run as the one-row map it is in memory: H, W and kh, kw hold the swapped
             * sizes, and tap (i, j) here is the weight's (j, i). A column's 8-pixel strips computed 1 pixel each:
             * CSwin-T's stage-1 LePE (896 windows of 56×1×32 at batch 16, with its square-sum loss) took 14.6 / 27
             * ms forward / backward, now 3.5 / 5.6; the depthwise convs of CSwin-T's training step at batch 16 180
             * → 137 ms (`--profile`; AMD EPYC Zen 3, 2026-11-30) */
    int per_item; /* with gelu: prim convolves one batch item, mathfn.h's GELU follows on it (dwn_prim_prepare) */
} dwn_p;

/* w (C, K) -> wt (K, C); flip: tap k goes to row K − 1 − k (the dX correlation's kernel). */
static void transpose_w(const float *w, float *wt, int C, int K, int flip) {
    for (int c = 0; c < C; c++)
        for (int k = 0; k < K; k++) wt[(size_t)(flip ? K - 1 - k : k) * C + c] = w[(size_t)c * K + k];
}

/* The weight's index (within a channel's taps) of the depthwise conv's tap k (dwn_p.tr). */
static int dwn_tap(const dwn_p *dp, int k) { return dp->tr ? k % dp->kw * dp->kh + k / dp->kw : k; }

/* w (C, kh·kw) -> wt (kh·kw, C) in the node's tap order (transpose_w, through dwn_tap). */
static void dwn_taps(const dwn_p *dp, const float *w, float *wt, int flip) {
    const int C = dp->C, K = dp->kh * dp->kw;
    if (!dp->tr) {
        transpose_w(w, wt, C, K, flip);
        return;
    }
    for (int c = 0; c < C; c++)
        for (int k = 0; k < K; k++) wt[(size_t)(flip ? K - 1 - k : k) * C + c] = w[(size_t)c * K + dwn_tap(dp, k)];
}

/* One output row of a channels-last depthwise correlation, the forward's (x -> y) and dX's (dy -> dx: the kernel
 * flipped, padding k - 1 - p): y[ow, c] (+= when acc) = bias[c] + Σ_{ki, kj} w[ki·kw + kj][c] ·
 * x[oh - ph + ki, ow - pw + kj, c], taps outside the input read as zeros. */
typedef struct {
    const float *x;  /* the batch item's input (its first channel) */
    ptrdiff_t xl;    /* floats between input pixels */
    int Hi, Wi;      /* input size */
    const float *w;  /* taps (kh·kw, C) */
    int kh, kw, ph, pw, C;
    float *y;        /* the output row (its first channel) */
    ptrdiff_t yl;    /* floats between output pixels */
    int Wo, acc;     /* output width; add to y instead of writing it */
    const float *bias;
    int gelu, nt;    /* dws_strip16 with acc 0: GELU of the outputs; non-temporal stores (64-byte aligned rows) */
    int r0;          /* the input row x holds first (rows before it are never read: a band of a larger map) */
    int w0;          /* the first output column (y points at it; columns [w0, Wo) are written) */
} dws_row;

/* Output pixels per strip: a strip of DWS_P pixels × 8 channels is DWS_P vector accumulators (named variables:
 * gcc keeps an array of vectors indexed in an unrolled loop in memory, a load and a store around every update),
 * updated tap by tap with one weight vector and one input vector per multiply-add. */
#define DWS_P 8


/* xv = the vector at p (8 or 16 floats), or zeros when `in` is false (a padding column). */
static const float v8_zeros[16] = {0};
#define V8_LOAD_IF(xv, in, p)                                                                                         \
    do {                                                                                                               \
        const float *p_ = (in) ? (p) : v8_zeros; /* a select, not a branch per load: 1.4x on 56x56 maps */            \
        memcpy(&(xv), p_, sizeof(xv));                                                                                 \
    } while (0)

/* The vector at p = v (+= v when acc), when `in`. */
#define V8_STORE_IF(v, in, acc, p)                                                                                     \
    do {                                                                                                               \
        if (in) {                                                                                                      \
            if (acc) {                                                                                                 \
                __typeof__(v) o_;                                                                                      \
                memcpy(&o_, (p), sizeof o_);                                                                           \
                (v) += o_;                                                                                             \
            }                                                                                                          \
            memcpy((p), &(v), sizeof(v));                                                                              \
        }                                                                                                              \
    } while (0)

/* The eight pixels of a strip: F(i, VT, MADD) for i = 0..7 (one named vector variable per pixel, written out). */
#define DWS_EACH(F, VT, MADD) F(0, VT, MADD) F(1, VT, MADD) F(2, VT, MADD) F(3, VT, MADD) F(4, VT, MADD)              \
    F(5, VT, MADD) F(6, VT, MADD) F(7, VT, MADD)
#define DWS_ACC(i, VT, MADD) VT a##i = init;
#define DWS_TAP(i, VT, MADD)                                                                                           \
    VT x##i;                                                                                                           \
    V8_LOAD_IF(x##i, !checked || (unsigned)(c0 + i) < Wi, xp + i * xl);                                                \
    MADD(a##i, w, x##i);
#define DWS_OUT(i, VT, MADD) V8_STORE_IF(a##i, i < np, acc, y0 + i * yl);

/* NAME(r, ki0, ki1, row0, ow0, np, cb, checked): np (<= DWS_P) pixels from column ow0, the channels of one vector of
 * type VT from cb, taps summed with MADD; `checked` (a constant where inlined): some taps read columns outside
 * [0, Wi) (zeros), else every column is in range. dws_strip: 8 channels; dws_strip16 (AVX-512): 16, whose 512-bit
 * vectors ran the forward 1.25-1.75x faster than 8-channel strips (FLatten's 5x5 and CSwin's 3x3 convs on v read out
 * of packed maps, 16x56x56x64 to 16x14x14x320, 30 alternated runs, Intel Xeon Ice Lake, 2026-11-29; forward and
 * backward 1.1-1.35x); in eval graphs the packed depthwise convs took 13-16 instead of 22-24 ms per FLatten-PVTv2-b1
 * step at batch 16, 26-31 instead of 41-49 in CSwin-T's, 16-19 instead of 23-24 in FLatten-Swin-T's. ROW(VT, MADD)
 * adds one row of taps (input row xr, weights wr) into the accumulators: DWS_ROW_TAPS or DWS_ROW_3. */
#define DWS_STRIP_FN(NAME, VT, MADD, OUT, ROW)                                                                         \
    static inline __attribute__((always_inline)) void NAME(const dws_row *r, int ki0, int ki1, int row0, int ow0,      \
                                                           int np, int cb, const int checked) {                        \
        VT init = {0};                                                                                                 \
        if (r->bias) memcpy(&init, r->bias + cb, sizeof init);                                                         \
        DWS_EACH(DWS_ACC, VT, MADD)                                                                                    \
        const ptrdiff_t xl = r->xl;                                                                                    \
        const unsigned Wi = (unsigned)r->Wi;                                                                           \
        for (int ki = ki0; ki < ki1; ki++) {                                                                           \
            const float *xr = r->x + (ptrdiff_t)(row0 + ki - r->r0) * r->Wi * xl + cb;                                 \
            const float *wr = r->w + (size_t)ki * r->kw * r->C + cb;                                                   \
            ROW(VT, MADD)                                                                                              \
        }                                                                                                              \
        float *y0 = r->y + (ptrdiff_t)(ow0 - r->w0) * r->yl + cb;                                                      \
        const ptrdiff_t yl = r->yl;                                                                                    \
        const int acc = r->acc;                                                                                        \
        DWS_EACH(OUT, VT, MADD)                                                                                        \
    }

/* DWS_STRIP_FN's row of taps, one tap at a time: each pixel's input loaded once per tap. */
#define DWS_ROW_TAPS(VT, MADD)                                                                                         \
    for (int kj = 0; kj < r->kw; kj++) {                                                                               \
        const int c0 = ow0 - r->pw + kj; /* input column of pixel 0 */                                                 \
        const float *xp = xr + (ptrdiff_t)c0 * xl;                                                                     \
        VT w;                                                                                                          \
        memcpy(&w, wr + (size_t)kj * r->C, sizeof w);                                                                  \
        DWS_EACH(DWS_TAP, VT, MADD)                                                                                    \
    }

/* DWS_STRIP_FN's row of taps for 3-column kernels (kw = 3: dws_strip3): the ten input columns of the row are loaded
 * once each and added into every pixel they reach (its three taps' weights in registers), rather than once per
 * (pixel, tap): 13 loads per 24 multiply-adds instead of 27, and the strip was load-bound: 1.1-1.6× the per-tap
 * strip on in-cache bands of three 56-pixel rows of 64 or 512 channels (one thread, alternated runs, AMD EPYC Zen 3,
 * 2026-11-30). */
#define DWS3_COL(c, VT, USES)                                                                                          \
    {                                                                                                                  \
        VT x;                                                                                                          \
        V8_LOAD_IF(x, !checked || (unsigned)(c0 + c) < Wi, xr + (ptrdiff_t)(c0 + c) * xl);                             \
        USES                                                                                                           \
    }
#define DWS3_COLS(VT, MADD)                                                                                            \
    DWS3_COL(0, VT, MADD(a0, w0, x);)                                                                                  \
    DWS3_COL(1, VT, MADD(a1, w0, x); MADD(a0, w1, x);)                                                                 \
    DWS3_COL(2, VT, MADD(a2, w0, x); MADD(a1, w1, x); MADD(a0, w2, x);)                                                \
    DWS3_COL(3, VT, MADD(a3, w0, x); MADD(a2, w1, x); MADD(a1, w2, x);)                                                \
    DWS3_COL(4, VT, MADD(a4, w0, x); MADD(a3, w1, x); MADD(a2, w2, x);)                                                \
    DWS3_COL(5, VT, MADD(a5, w0, x); MADD(a4, w1, x); MADD(a3, w2, x);)                                                \
    DWS3_COL(6, VT, MADD(a6, w0, x); MADD(a5, w1, x); MADD(a4, w2, x);)                                                \
    DWS3_COL(7, VT, MADD(a7, w0, x); MADD(a6, w1, x); MADD(a5, w2, x);)                                                \
    DWS3_COL(8, VT, MADD(a7, w1, x); MADD(a6, w2, x);)                                                                 \
    DWS3_COL(9, VT, MADD(a7, w2, x);)
#define DWS_ROW_3(VT, MADD)                                                                                            \
    {                                                                                                                  \
        const int c0 = ow0 - r->pw; /* input column of pixel 0's first tap */                                          \
        VT w0, w1, w2;                                                                                                 \
        memcpy(&w0, wr, sizeof w0);                                                                                    \
        memcpy(&w1, wr + r->C, sizeof w1);                                                                             \
        memcpy(&w2, wr + 2 * (size_t)r->C, sizeof w2);                                                                 \
        DWS3_COLS(VT, MADD)                                                                                            \
    }

/* The same for 5-column kernels (kw = 5: dws_strip5, FLatten's DWC): twelve columns loaded once each for 40
 * multiply-adds instead of 40 loads. FLatten-PVTv2-b1's packed 5×5 convs (16×56²×64 to 16×7²×512) at batch 16 in one
 * eval graph, alternated with the per-tap strip (6 rounds, AMD EPYC Zen 3, 2026-11-30): 21.9 against 26.3 ms per
 * forward (stages 1-3 1.18-1.37×, stage 4's 7-pixel rows level); in a training step (forward and dX) 70.8 against
 * 78.2 ms; FLatten-Swin-T's 22.2 against 27.9 ms. */
#define DWS5_COLS(VT, MADD)                                                                                            \
    DWS3_COL(0, VT, MADD(a0, w0, x);)                                                                                  \
    DWS3_COL(1, VT, MADD(a1, w0, x); MADD(a0, w1, x);)                                                                 \
    DWS3_COL(2, VT, MADD(a2, w0, x); MADD(a1, w1, x); MADD(a0, w2, x);)                                                \
    DWS3_COL(3, VT, MADD(a3, w0, x); MADD(a2, w1, x); MADD(a1, w2, x); MADD(a0, w3, x);)                               \
    DWS3_COL(4, VT, MADD(a4, w0, x); MADD(a3, w1, x); MADD(a2, w2, x); MADD(a1, w3, x); MADD(a0, w4, x);)              \
    DWS3_COL(5, VT, MADD(a5, w0, x); MADD(a4, w1, x); MADD(a3, w2, x); MADD(a2, w3, x); MADD(a1, w4, x);)              \
    DWS3_COL(6, VT, MADD(a6, w0, x); MADD(a5, w1, x); MADD(a4, w2, x); MADD(a3, w3, x); MADD(a2, w4, x);)              \
    DWS3_COL(7, VT, MADD(a7, w0, x); MADD(a6, w1, x); MADD(a5, w2, x); MADD(a4, w3, x); MADD(a3, w4, x);)              \
    DWS3_COL(8, VT, MADD(a7, w1, x); MADD(a6, w2, x); MADD(a5, w3, x); MADD(a4, w4, x);)                               \
    DWS3_COL(9, VT, MADD(a7, w2, x); MADD(a6, w3, x); MADD(a5, w4, x);)                                                \
    DWS3_COL(10, VT, MADD(a7, w3, x); MADD(a6, w4, x);)                                                                \
    DWS3_COL(11, VT, MADD(a7, w4, x);)
#define DWS_ROW_5(VT, MADD)                                                                                            \
    {                                                                                                                  \
        const int c0 = ow0 - r->pw;                                                                                    \
        VT w0, w1, w2, w3, w4;                                                                                         \
        memcpy(&w0, wr, sizeof w0);                                                                                    \
        memcpy(&w1, wr + r->C, sizeof w1);                                                                             \
        memcpy(&w2, wr + 2 * (size_t)r->C, sizeof w2);                                                                 \
        memcpy(&w3, wr + 3 * (size_t)r->C, sizeof w3);                                                                 \
        memcpy(&w4, wr + 4 * (size_t)r->C, sizeof w4);                                                                 \
        DWS5_COLS(VT, MADD)                                                                                            \
    }

DWS_STRIP_FN(dws_strip, v8f, V8_MADD, DWS_OUT, DWS_ROW_TAPS)
DWS_STRIP_FN(dws_strip3, v8f, V8_MADD, DWS_OUT, DWS_ROW_3)
DWS_STRIP_FN(dws_strip5, v8f, V8_MADD, DWS_OUT, DWS_ROW_5)
#ifdef __AVX512F__
typedef float v16f __attribute__((vector_size(64)));
#define V16_MADD(acc, a, b) ((acc) = _mm512_fmadd_ps((a), (b), (acc)))
/* dws_strip16's output: as DWS_OUT, or (acc 0) GELU in registers and a streaming store where the row says so. The
 * same GELU in the 8-channel strips' registers with AVX2 lost to the pass over each row: PVTv2-b1 hMHSA + cFFN's
 * fused FFNs (vt_dw_nhwc_rows) at batch 16, one eval graph alternated with the row pass, 1.035-1.065x slower (5 runs
 * of 12 rounds, AMD EPYC Zen 3, 2026-11-30). */
#define DWS_OUT16(i, VT, MADD)                                                                                         \
    if (i < np) {                                                                                                      \
        if (r->gelu) a##i = (VT)vt_vgelu((vt_vf)a##i, NULL);                                                           \
        if (r->nt) _mm512_stream_ps(y0 + i * yl, (__m512)a##i);                                                        \
        else V8_STORE_IF(a##i, 1, acc, y0 + i * yl);                                                                   \
    }
DWS_STRIP_FN(dws_strip16, v16f, V16_MADD, DWS_OUT16, DWS_ROW_TAPS)
DWS_STRIP_FN(dws_strip3_16, v16f, V16_MADD, DWS_OUT16, DWS_ROW_3)
DWS_STRIP_FN(dws_strip5_16, v16f, V16_MADD, DWS_OUT16, DWS_ROW_5)
#define DWS_WIDE 16 /* channels of dws_strip16's vectors */
#else
#define DWS_WIDE 0 /* no dws_strip16 */
#endif

/* Output pixel ow, channels [c_from, c_to), one channel at a time (the channels past the last 8-channel block). */
static void dws_pixel(const dws_row *r, int ki0, int ki1, int row0, int ow, int c_from, int c_to) {
    float *dst = r->y + (ptrdiff_t)(ow - r->w0) * r->yl;
    for (int c = c_from; c < c_to; c++) {
        float s = r->bias ? r->bias[c] : 0.0f;
        for (int ki = ki0; ki < ki1; ki++)
            for (int kj = 0; kj < r->kw; kj++) {
                const int col = ow - r->pw + kj;
                if (col >= 0 && col < r->Wi)
                    s += r->w[(size_t)(ki * r->kw + kj) * r->C + c] *
                         r->x[((ptrdiff_t)(row0 + ki - r->r0) * r->Wi + col) * r->xl + c];
            }
        dst[c] = r->acc ? dst[c] + s : s;
    }
}

/* Output row oh: strips of 16-channel blocks (AVX-512), then of 8-channel ones, dws_pixel for the channels past the
 * last block. */
static void dws_run_row(const dws_row *r, int oh) {
    const int row0 = oh - r->ph, ki0 = row0 < 0 ? -row0 : 0, ki1 = r->Hi - row0 < r->kh ? r->Hi - row0 : r->kh;
    const int C8 = r->C / 8 * 8, C16 = DWS_WIDE ? r->C / 16 * 16 : 0;
    for (int ow0 = r->w0; ow0 < r->Wo; ow0 += DWS_P) {
        const int np = r->Wo - ow0 < DWS_P ? r->Wo - ow0 : DWS_P;
        const int inside = np == DWS_P && ow0 - r->pw >= 0 && ow0 - r->pw + DWS_P - 1 + r->kw - 1 < r->Wi;
#ifdef __AVX512F__
        for (int cb = 0; cb < C16; cb += 16)
            if (r->kw == 3 && inside) dws_strip3_16(r, ki0, ki1, row0, ow0, np, cb, 0);
            else if (r->kw == 3) dws_strip3_16(r, ki0, ki1, row0, ow0, np, cb, 1);
            else if (r->kw == 5 && inside) dws_strip5_16(r, ki0, ki1, row0, ow0, np, cb, 0);
            else if (r->kw == 5) dws_strip5_16(r, ki0, ki1, row0, ow0, np, cb, 1);
            else if (inside) dws_strip16(r, ki0, ki1, row0, ow0, np, cb, 0);
            else dws_strip16(r, ki0, ki1, row0, ow0, np, cb, 1);
#endif
        for (int cb = C16; cb < C8; cb += 8)
            if (r->kw == 3 && inside) dws_strip3(r, ki0, ki1, row0, ow0, np, cb, 0);
            else if (r->kw == 3) dws_strip3(r, ki0, ki1, row0, ow0, np, cb, 1);
            else if (r->kw == 5 && inside) dws_strip5(r, ki0, ki1, row0, ow0, np, cb, 0);
            else if (r->kw == 5) dws_strip5(r, ki0, ki1, row0, ow0, np, cb, 1);
            else if (inside) dws_strip(r, ki0, ki1, row0, ow0, np, cb, 0);
            else dws_strip(r, ki0, ki1, row0, ow0, np, cb, 1);
        for (int i = 0; i < np && C8 < r->C; i++) dws_pixel(r, ki0, ki1, row0, ow0 + i, C8, r->C);
    }
}

void vt_dw_nhwc_rows(const float *x, ptrdiff_t xl, int xr0, int H, int W, int C, const float *wt, int k,
                     const float *bias, int gelu, float *y, ptrdiff_t yl, int oh0, int oh1) {
    const int g16 = gelu && DWS_WIDE && C % 16 == 0;
    for (int oh = oh0; oh < oh1; oh++) {
        float *yr = y + (size_t)(oh - oh0) * W * yl;
        const dws_row r = {x, xl, H, W, wt, k, k, k / 2, k / 2, C, yr, yl, W, 0, bias, g16, 0, xr0, 0};
        dws_run_row(&r, oh);
        for (int i = 0; gelu && !g16 && i < W; i++) vt_gelu_n(yr + i * yl, yr + i * yl, C);
    }
}

void vt_dw_nhwc_pixels(const float *x, ptrdiff_t xl, int H, int W, int C, const float *wt, int k,
                       const float *bias, float *y, ptrdiff_t yl, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1;) {
        const int oh = (int)(p / W), ow = (int)(p % W);
        const int end = p1 - (int64_t)oh * W < W ? (int)(p1 - (int64_t)oh * W) : W;
        const dws_row r = {x, xl, H, W, wt, k, k, k / 2, k / 2, C, y + (p - p0) * yl, yl, end, 0, bias, 0, 0, 0, ow};
        dws_run_row(&r, oh);
        p += end - ow;
    }
}

static void dwn_fwd(vt_node *n) {
    const dwn_p *dp = VT_OP_P(n, dwn_p);
    const int B = dp->B, H = dp->H, W = dp->W, C = dp->C, kh = dp->kh, kw = dp->kw, p = dp->p, Ho = dp->Ho, Wo = dp->Wo,
              L = dp->L;
    const float *x = n->in[0]->data + dp->c0, *bias = dp->bias_in >= 0 ? n->in[dp->bias_in]->data : NULL;
    const float *add = dp->add_in >= 0 ? n->in[dp->add_in]->data : NULL;
    float *y = n->out->data, *wt = n->fws->data;
    dwn_taps(dp, n->in[1]->data, wt, 0);
    /* GELU in the 16-channel strips' registers (the op alone at 16×56²×512 / 16×28²×1024: 15.5 / 6.3 against 16.4 /
     * 6.9 ms with a GELU pass per row, best of 30) and, for outputs past 64 MiB that no cache keeps for the next
     * layer, streaming stores (14.0-14.2 against 14.2-15.5 ms at 16×56²×512; no gain at 16×28²×1024); eval graphs
     * with both against the row pass, per-round medians of 14 rounds at batch 16: PVTv2-b1 1.031, FLatten-PVTv2-b1
     * 1.043, PVTv2-b1 hMHSA + cFFN 1.051; batch 1 1.039 (Intel Xeon Ice Lake, 2026-11-29) */
    const int g16 = dp->gelu && !add && DWS_WIDE && C % 16 == 0;
    const int nt = g16 && ((uintptr_t)y & 63) == 0 && (int64_t)B * Ho * Wo * C >= (1 << 24);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int oh = 0; oh < Ho; oh++) {
            const size_t o = ((size_t)b * Ho + oh) * Wo * C;
            if (add) memcpy(y + o, add + o, sizeof(float) * (size_t)Wo * C);
            const dws_row r = {x + (size_t)b * H * W * L, L, H, W, wt, kh, kw, p, p, C, y + o, C, Wo, add != NULL,
                               bias, g16, nt, 0, 0};
            dws_run_row(&r, oh);
            if (dp->gelu && !g16) vt_gelu_n(y + o, y + o, (int64_t)Wo * C);
#ifdef __AVX512F__
            if (nt) _mm_sfence();
#endif
        }
}

/* NAME(m, dr, xr, xl, C, W, p, kw, ow0, np, cb, checked): dW of one 8-pixel strip (np <= DWS_P pixels from column
 * ow0, the channels of one vector of type VT from cb; dwk_strip 8, dwk_strip16 16) for kernel row ki:
 * m[kj·C + c] += Σ_i dy[ow0 + i, c]·x[ow0 + i − p + kj, c] for every kj, x the input row. The strip's output
 * gradients stay in registers across the kw taps (the per-tap loop this replaced loaded both operands of every
 * multiply-add); `checked` (a constant where inlined): some pixels are past np or read padding columns (zeros). */
#define DWK_DY(i, VT, MADD)                                                                                            \
    VT d##i;                                                                                                           \
    V8_LOAD_IF(d##i, !checked || i < np, dp + i * C);
#define DWK_TAP(i, VT, MADD)                                                                                           \
    {                                                                                                                  \
        VT x;                                                                                                          \
        V8_LOAD_IF(x, !checked || (i < np && (unsigned)(c0 + i) < Wu), xp + i * xl);                                   \
        if (i % 2) MADD(t, d##i, x);                                                                                   \
        else MADD(s, d##i, x);                                                                                         \
    }
#define DWK_STRIP_FN(NAME, VT, MADD)                                                                                   \
    static inline __attribute__((always_inline)) void NAME(float *restrict m, const float *dr, const float *xr,        \
                                                           ptrdiff_t xl, int C, int W, int p, int kw, int ow0, int np, \
                                                           int cb, const int checked) {                                \
        const float *dp = dr + (size_t)ow0 * C + cb;                                                                   \
        DWS_EACH(DWK_DY, VT, MADD)                                                                                     \
        const unsigned Wu = (unsigned)W;                                                                               \
        for (int kj = 0; kj < kw; kj++) {                                                                              \
            const int c0 = ow0 - p + kj; /* input column of pixel 0 */                                                \
            const float *xp = xr + (ptrdiff_t)c0 * xl + cb;                                                            \
            VT s = {0}, t = {0}, mv; /* even and odd pixels: two dependency chains */                                  \
            DWS_EACH(DWK_TAP, VT, MADD)                                                                                \
            float *mp = m + (size_t)kj * C + cb;                                                                       \
            memcpy(&mv, mp, sizeof mv);                                                                                \
            mv += s + t;                                                                                               \
            memcpy(mp, &mv, sizeof mv);                                                                                \
        }                                                                                                              \
    }
DWK_STRIP_FN(dwk_strip, v8f, V8_MADD)
#ifdef __AVX512F__
DWK_STRIP_FN(dwk_strip16, v16f, V16_MADD)
#endif

/* dW partial sums of output row dr (Wo pixels) for kernel row ki (input row xr, W pixels, stride xl):
 * m[kj·C + c] += Σ_ow dr[ow, c]·xr[ow − p + kj, c]; 16-channel (AVX-512) then 8-channel blocks by strips, the rest
 * one channel at a time. */
static void dwk_row(float *restrict m, const float *dr, const float *xr, ptrdiff_t xl, int C, int W, int Wo, int p,
                    int kw) {
    const int C8 = C / 8 * 8, C16 = DWS_WIDE ? C / 16 * 16 : 0;
    for (int ow0 = 0; ow0 < Wo; ow0 += DWS_P) {
        const int np = Wo - ow0 < DWS_P ? Wo - ow0 : DWS_P;
        const int inside = np == DWS_P && ow0 - p >= 0 && ow0 - p + DWS_P - 1 + kw - 1 < W;
#ifdef __AVX512F__
        for (int cb = 0; cb < C16; cb += 16)
            if (inside) dwk_strip16(m, dr, xr, xl, C, W, p, kw, ow0, np, cb, 0);
            else dwk_strip16(m, dr, xr, xl, C, W, p, kw, ow0, np, cb, 1);
#endif
        for (int cb = C16; cb < C8; cb += 8)
            if (inside) dwk_strip(m, dr, xr, xl, C, W, p, kw, ow0, np, cb, 0);
            else dwk_strip(m, dr, xr, xl, C, W, p, kw, ow0, np, cb, 1);
    }
    for (int c = C8; c < C; c++)
        for (int kj = 0; kj < kw; kj++) {
            float s = 0.0f;
            for (int ow = 0; ow < Wo; ow++) {
                const int col = ow - p + kj;
                if (col >= 0 && col < W) s += dr[(size_t)ow * C + c] * xr[(ptrdiff_t)col * xl + c];
            }
            m[(size_t)kj * C + c] += s;
        }
}

/* Row ih of batch item b of dX (written when acc is 0, else added to): dy correlated with the flipped taps wt. */
static void dwn_dx_row(const dwn_p *dp, const float *dy, const float *wt, float *dx, int acc, int b, int ih) {
    const dws_row r = {dy + (size_t)b * dp->Ho * dp->Wo * dp->C, dp->C, dp->Ho, dp->Wo, wt, dp->kh, dp->kw,
                       dp->kh - 1 - dp->p, dp->kw - 1 - dp->p, dp->C, dx + ((size_t)b * dp->H + ih) * dp->W * dp->L,
                       dp->L, dp->W, acc, NULL, 0, 0, 0, 0};
    dws_run_row(&r, ih);
}

static void dwn_bwd(vt_node *n) {
    const dwn_p *dp = VT_OP_P(n, dwn_p);
    const int B = dp->B, H = dp->H, W = dp->W, C = dp->C, kh = dp->kh, kw = dp->kw, p = dp->p, Ho = dp->Ho, Wo = dp->Wo,
              nt = dp->nt, K = kh * kw, L = dp->L;
    const vt_tensor *X = n->in[0], *Wt = n->in[1], *Bt = dp->bias_in >= 0 ? n->in[dp->bias_in] : NULL;
    const vt_tensor *R = dp->add_in >= 0 ? n->in[dp->add_in] : NULL;
    const float *x = X->data + dp->c0, *dy = n->out->grad;
    float *dx = X->grad ? X->grad + dp->c0 : NULL, *dw = Wt->grad, *db = Bt ? Bt->grad : NULL, *wt = n->bws->data;
    const int dx_acc = !(n->grad_fresh & 1u); /* 0: x's gradient is written, not added to (grad_sets) */
    if (R && R->grad) {
        const int64_t N = n->out->numel;
        float *rg = R->grad;
        if (n->grad_fresh >> dp->add_in & 1u) memcpy(rg, dy, sizeof(float) * (size_t)N);
        else {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < N; i++) rg[i] += dy[i];
        }
    }
    /* dX = dY correlated with the flipped kernel, padding k - 1 - p: oneDNN's convolution where it can write x's
     * gradient (the taps flipped in their (C, k, k) order), else this file's rows (the taps transposed) */
    int prim_dx = dx && !dx_acc && dp->bprim;
    if (prim_dx) {
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++) wt[(size_t)c * K + k] = Wt->data[(size_t)c * K + K - 1 - k];
        prim_dx = vt_gemm_conv_run(dp->bprim, dy, wt, NULL, dx, NULL, 1) == 0;
    }
    if (prim_dx) dx = NULL; /* done */
    if (dx) dwn_taps(dp, Wt->data, wt, 1);
    const int wdb = dw || db, fused = dx && wdb && Ho == H; /* one pass over the rows for dX and dW: dy row ih
                                                              * (read for dX's row ih) is dW's output row ih */
    const size_t per = (size_t)(K + 1) * C;
    float *part = wt + (size_t)K * C;
    if (wdb) memset(part, 0, sizeof(float) * per * (size_t)nt);
#pragma omp parallel num_threads(nt)
    {
        float *mine = part + per * (size_t)omp_get_thread_num(), *mdb = mine + (size_t)K * C;
        if (dx && !fused) {
#pragma omp for collapse(2) schedule(static)
            for (int b = 0; b < B; b++)
                for (int ih = 0; ih < H; ih++) dwn_dx_row(dp, dy, wt, dx, dx_acc, b, ih);
        }
        if (wdb) {
#pragma omp for collapse(2) schedule(static)
            for (int b = 0; b < B; b++)
                for (int oh = 0; oh < Ho; oh++) {
                    if (fused) dwn_dx_row(dp, dy, wt, dx, dx_acc, b, oh);
                    const float *restrict dr = dy + ((size_t)b * Ho + oh) * Wo * C; /* the output row */
                    for (int ow = 0; ow < Wo; ow++)
                        for (int c = 0; c < C; c++) mdb[c] += dr[(size_t)ow * C + c];
                    for (int ki = 0; dw && ki < kh; ki++) {
                        const int ih = oh - p + ki;
                        if (ih < 0 || ih >= H) continue;
                        dwk_row(mine + (size_t)ki * kw * C, dr, x + ((size_t)b * H + ih) * W * L, L, C, W, Wo, p, kw);
                    }
                }
        }
    }
    if (!wdb) return;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        for (int k = 0; k <= K; k++) {
            float s = 0.0f;
            for (int t = 0; t < nt; t++) s += part[per * t + (size_t)k * C + c];
            if (k < K && dw) dw[(size_t)c * K + dwn_tap(dp, k)] += s;
            if (k == K && db) db[c] += s;
        }
    }
}

/* A plain map (every channel convolved) with a square kernel as one oneDNN depthwise convolution (G = C, its jit
 * kernel for channels-last), the added term in its output pass (a binary post-op): 1.5-2.7x dwn_fwd on one thread
 * on PVTv2's MLP maps (16×56²×512, 16×28²×1024, 16×14²×1280: 29 vs 44, 12.5 vs 33, 2.9 vs 7.0 ms) and
 * GroupMixFormer's CPE (16×56²×80: 2.8 vs 5.9 ms), 2026-11-27, AMD EPYC Zen 3. In training it also makes the
 * convolution that gives dX (bprim); dW and the bias's gradient stay on this file's kernels.
 * Not with GELU fused on AVX-512 (unless the plan forces oneDNN): there dwn_fwd's 16-channel strips and mathfn.h's
 * GELU (then a pass per output row, now in the strips' registers) beat oneDNN's convolution with its GELU post-op:
 * PVTv2-b1's four MLP maps at batch 16 17.5 / 7.4 / 2.5 / 0.92 against 23.4 / 10.2 / 3.7 / 1.36 ms per node, at
 * batch 1 1.16-1.27 / 0.55 / 0.20 / 0.10 against 1.39-1.52 / 0.67-0.73 / 0.23 / 0.12; eval graphs 1.07 / 1.08 at
 * batch 16, 1.02 / 1.03 at batch 1 (per-round medians of two runs, old and new graph alternated in one process;
 * Intel Xeon Ice Lake, 2026-11-29). Built for AVX2 with oneDNN held to AVX2 on that CPU, the 8-channel strips took
 * 100.9 against oneDNN's 95.4 ms per batch-16 step (node sums): AVX2 keeps oneDNN.
 * With GELU (and no added term) the convolution runs one batch item at a time, without a post-op, and mathfn.h's
 * GELU follows over that item's output while it is in cache: oneDNN's gelu_erf post-op took 7.8 of the 17.6 ms of
 * PVTv2-b1's stage-2 map (16×28²×1024). The op alone (AMD EPYC Zen 3, 2026-11-30, best of 8, 2 threads), post-op
 * against per item: 16×28²×1024 15.5 vs 12.8 ms, 16×14²×1280 5.1 vs 4.4, 16×7²×2048 1.77 vs 1.39, 16×56²×512 34.7
 * vs 30.0, 1×28²×1024 0.83 vs 0.64 (two or four items at a time: no faster than one); PVTv2-b1 + hMHSA + cFFN's
 * depthwise nodes in eval graphs, the two forms alternated in one process, 42.7 vs 49.5 ms per forward at batch 16,
 * 2.14 vs 2.51 at batch 1. */
static int dwn_prim_prepare(vt_node *n) {
    dwn_p *p = VT_OP_P(n, dwn_p);
    if (p->c0 != 0 || p->L != p->C || p->kh != p->kw || p->tr) return 0;
    if (p->gelu && DWS_WIDE && n->g->gemm.force == VT_GEMM_AUTO) return 0; /* see above */
    p->per_item = p->gelu && p->add_in < 0;
    const int flags = (p->bias_in >= 0 ? VT_CONV_BIAS : 0) | (p->add_in >= 0 ? VT_CONV_ADD : 0) |
                      (p->gelu && !p->per_item ? VT_CONV_GELU : 0);
    p->prim = vt_gemm_conv_prim(&n->g->gemm, p->per_item ? 1 : p->B, p->C, p->H, p->W, p->C, p->kh, 1, p->p, p->C,
                                flags, 0);
    if (p->prim && n->g->training && n->in[0]->requires_grad && n->bws)
        p->bprim = vt_gemm_conv_prim(&n->g->gemm, p->B, p->C, p->Ho, p->Wo, p->C, p->kh, 1, p->kh - 1 - p->p, p->C, 0,
                                     0);
    return p->prim != NULL;
}

static void dwn_prim_fwd(vt_node *n) {
    const dwn_p *p = VT_OP_P(n, dwn_p);
    float *y = n->out->data;
    const float *bias = p->bias_in >= 0 ? n->in[p->bias_in]->data : NULL;
    int bad = 0;
    if (p->per_item) {
        const int64_t xi = (int64_t)p->H * p->W * p->C, yi = (int64_t)p->Ho * p->Wo * p->C, nt = p->nt;
        for (int b = 0; b < p->B && !bad; b++) { /* the weight packed for the first item only */
            float *yb = y + b * yi;
            bad = vt_gemm_conv_run_add(p->prim, n->in[0]->data + b * xi, n->in[1]->data, bias, NULL, yb, NULL,
                                       b == 0) != 0;
#pragma omp parallel for schedule(static) num_threads(p->nt)
            for (int64_t t = 0; t < nt; t++) { /* 8-float aligned pieces */
                const int64_t a = yi * t / nt / 8 * 8, e = t == nt - 1 ? yi : yi * (t + 1) / nt / 8 * 8;
                if (!bad) vt_gelu_n(yb + a, yb + a, e - a);
            }
        }
    } else {
        bad = vt_gemm_conv_run_add(p->prim, n->in[0]->data, n->in[1]->data, bias,
                                   p->add_in >= 0 ? n->in[p->add_in]->data : NULL, y, NULL, 1) != 0;
    }
    if (bad && vt_node_fallback(n, 1) == 0) dwn_fwd(n); /* oneDNN failed: the reference from now on */
}

static const vt_kernel k_dwn_prim = {"dwconv_nhwc.onednn", dwn_prim_prepare, dwn_prim_fwd, 0};
static const vt_kernel *const dwn_kernels[] = {&k_dwn_prim, NULL};

static const vt_opdef op_dwconv_nhwc = {"dwconv_nhwc", dwn_fwd, dwn_bwd,
                                        VT_READS(VT_READS_IN(0) | VT_READS_IN(1)), dwn_kernels, VT_OP_OTHER};

vt_tensor *vt_dwconv_nhwc_ex(vt_graph *g, vt_tensor *x, int c0, vt_tensor *w, vt_tensor *b, int pad, vt_tensor *r) {
    if (vt_bad(g, 2, x, w)) return NULL;
    char sx[64], sw[64], sb[64], sr[64];
    vt_shape_str(x, sx, 64);
    vt_shape_str(w, sw, 64);
    snprintf(sb, sizeof sb, "none");
    if (b) vt_shape_str(b, sb, 64);
    const int C = w->ndim == 4 ? w->shape[0] : 0;
    if (x->ndim != 4 || w->ndim != 4 || w->shape[1] != 1 || c0 < 0 || c0 > x->shape[3] - C ||
        (b && (b->ndim != 1 || b->shape[0] != C)))
        return vt_fail(g, "dwconv_nhwc",
                       "input %s must be (B, H, W, L) holding channels [%d, %d + C), weight %s (%s) (C, 1, kh, kw) and "
                       "bias %s (C) or none", sx, c0, c0, sw, w->name, sb);
    const int B = x->shape[0], H = x->shape[1], W = x->shape[2], L = x->shape[3], kh = w->shape[2],
              kw = w->shape[3];
    if (pad < 0 || H + 2 * pad < kh || W + 2 * pad < kw)
        return vt_fail(g, "dwconv_nhwc", "input %s with padding %d is smaller than the %dx%d kernel of weight %s (%s)",
                       sx, pad, kh, kw, sw, w->name);
    const int Ho = H + 2 * pad - kh + 1, Wo = W + 2 * pad - kw + 1;
    const int shape[4] = {B, Ho, Wo, C};
    if (r && (vt_bad(g, 1, r) || r->numel != (int64_t)B * Ho * Wo * C || r->shape[r->ndim - 1] != C))
        return r ? vt_fail(g, "dwconv_nhwc", "added term %s must hold the output's (%d, %d, %d, %d) values",
                           vt_shape_str(r, sr, 64), B, Ho, Wo, C)
                 : NULL;
    vt_tensor *in[4] = {x, w};
    int nin = 2, bias_in = -1, add_in = -1;
    if (b) in[bias_in = nin++] = b;
    if (r) in[add_in = nin++] = r;
    vt_node *n = vt_new_node(g, &op_dwconv_nhwc, in, nin, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    const int nt = g->threads, tr = W == 1 && Wo == 1 && H > 1; /* 8-pixel strips of one-pixel rows: 1/8 used */
    *VT_OP_P(n, dwn_p) = tr ? (dwn_p){B, W, H, C, kw, kh, pad, Wo, Ho, nt, L, c0, bias_in, add_in, 0, NULL, NULL, 1, 0}
                            : (dwn_p){B, H, W, C, kh, kw, pad, Ho, Wo, nt, L, c0, bias_in, add_in, 0, NULL, NULL, 0, 0};
    n->macs = (int64_t)B * Ho * Wo * C * kh * kw;
    if (c0 == 0 && L == C) n->grad_sets |= 1u; /* dX covers every element of x */
    if (r) n->grad_sets |= 1u << add_in;
    vt_node_work(n, 0, (int64_t)kh * kw * C);
    if (x->requires_grad || w->requires_grad || (b && b->requires_grad) || (r && r->requires_grad))
        vt_node_work(n, 1, (int64_t)kh * kw * C + (int64_t)nt * (kh * kw + 1) * C);
    return n->out;
}

vt_tensor *vt_dwconv_nhwc(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int pad) {
    return vt_dwconv_nhwc_ex(g, x, 0, w, b, pad, NULL);
}

vt_tensor *vt_dwconv_nhwc_gelu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int pad) {
    vt_tensor *y = vt_dwconv_nhwc_ex(g, x, 0, w, b, pad, NULL);
    if (!y) return NULL;
    if (g->training) return vt_gelu(g, y); /* backward goes through the plain chain */
    VT_OP_P(g->nodes[y->prod], dwn_p)->gelu = 1;
    return y;
}

/* ---- channels-last dense / grouped conv: x (B, H, W, C), w (Cout, C/G, k, k), b (Cout) or NULL ----
 * Forward: at the AVX2 tier the rows kernel (convn_rows_prepare says where); else one oneDNN
 * convolution (brgconv: 1.8-2.3x im2col + per-group sgemm on Next-ViT-S's MHCA shapes at batch 1, 0.75 vs 1.36 ms at
 * 56x56x96 in 3 groups; the weight is packed into its layout on every run, as training changes it) where the plan
 * has one (vt_gemm_conv_prim); otherwise the patches (vt_patches_gather, rows of C·k·k) into scratch and one sgemm
 * per (group, row chunk): the composition vt_im2col + vt_group_linear (block order).
 * Backward: after the rows kernel, dW and a stride-1 conv's dX in its tasks (rows_wgrad, rows_dgrad); else
 * dW through oneDNN's weight-gradient convolution where the plan made one (vt_gemm_conv_wgrad), else the
 * patches again into scratch and dW_g += dY_gᵀ·cols_g; dX of a stride-1 conv through the forward primitive of the
 * transposed conv where the plan made one (convn_bwd_prim), else the same scratch takes dcols_g = dY_g·W_g and the
 * gather's adjoint adds it into dx. The weight-gradient primitive against the patches and one sgemm per group
 * (3 groups of M = 32 rows on 2 threads at 56x56), a backward pass of the op and of a small loss after it (a square
 * and means, the same in both) on Next-ViT-S's MHCA shapes at batch 16 (3x3, 32-channel groups, dX through bprim in
 * both; Intel Xeon Cascade Lake, 2 threads, best of 8, 2026-11-28):
 * 56x56x96 90 -> 52 ms, 28x28x192 39 -> 24, 14x14x384 20 -> 12, 7x7x768 10 -> 8.5. */
typedef struct {
    vt_patch_geom q;
    int Cout, G, has_bias;
    vt_gemm_conv *prim; /* the conv_nhwc.onednn kernel's primitive (made by its prepare) */
    vt_gemm_conv *bprim; /* training, stride 1, k > 1: the forward primitive that computes dX (convn_bwd_prim) */
    vt_gemm_conv *wprim; /* training: the weight-gradient primitive (convn_bwd) */
    int relu;            /* vt_conv2d_nhwc_relu in an inference graph: ReLU on the output */
    int rows_bwd;        /* training with the rows kernel: backward's dW (and a stride-1 dX) in its tasks too */
} convn_p;

/* Rows of the output (positions) and depth of one group's patch (C/G·k·k). */
static int64_t convn_rows(const convn_p *p) { return (int64_t)p->q.B * p->q.Ho * p->q.Wo; }
static int convn_kg(const convn_p *p) { return p->q.C / p->G * p->q.k * p->q.k; }

/* Row chunks per group (at least 64 rows each) so that the (group, chunk) tasks, one single-threaded sgemm each,
 * keep every thread busy (as vt_group_linear). */
static int convn_chunks(int R, int G, int nt) {
    const int want = (2 * nt + G - 1) / G, most = R / 64 > 1 ? R / 64 : 1;
    return want < most ? want : most;
}

/* y = cols·W_gᵀ per group (+ bias), over (group, row chunk) tasks. */
static void convn_gemm_fwd(const vt_node *n, const float *cols, float *y) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const int R = (int)convn_rows(p), G = p->G, Og = p->Cout / G, Kg = convn_kg(p), K = Kg * G;
    const int nc = convn_chunks(R, G, n->g->threads);
    const float *w = n->in[1]->data, *b = p->has_bias ? n->in[2]->data : NULL;
#pragma omp parallel for collapse(2) schedule(static)
    for (int gi = 0; gi < G; gi++)
        for (int c = 0; c < nc; c++) {
            const int r0 = (int)((int64_t)R * c / nc), r1 = (int)((int64_t)R * (c + 1) / nc);
            float *yb = y + (size_t)r0 * p->Cout + (size_t)gi * Og;
            if (b)
                for (int r = r0; r < r1; r++) memcpy(yb + (size_t)(r - r0) * p->Cout, b + (size_t)gi * Og,
                                                     sizeof(float) * (size_t)Og);
            vt_gemm(&n->g->gemm, 0, 1, r1 - r0, Og, Kg, 1.0f, cols + (size_t)r0 * K + (size_t)gi * Kg, K,
                    w + (size_t)gi * Og * Kg, Kg, b ? 1.0f : 0.0f, yb, p->Cout);
        }
}

/* The reference forward: patches + per-group sgemm (then the ReLU of vt_conv2d_nhwc_relu). */
static void convn_fwd(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    vt_patches_gather(&p->q, n->in[0]->data, n->fws->data);
    convn_gemm_fwd(n, n->fws->data, n->out->data);
    if (p->relu) relu_all(n->out->data, n->out->numel);
}

/* One oneDNN convolution where the plan has one for this geometry (vt_gemm_conv_prim). */
static int convn_prim_prepare(vt_node *n) {
    convn_p *p = VT_OP_P(n, convn_p);
    const vt_patch_geom *q = &p->q;
    p->prim = vt_gemm_conv_prim(&n->g->gemm, q->B, q->C, q->H, q->W, p->Cout, q->k, q->s, q->p, p->G,
                                (p->has_bias ? VT_CONV_BIAS : 0) | (p->relu ? VT_CONV_RELU : 0), 0);
    if (p->prim && n->g->training && q->s == 1 && q->k > 1 && n->in[0]->requires_grad)
        p->bprim = vt_gemm_conv_prim(&n->g->gemm, q->B, p->Cout, q->Ho, q->Wo, q->C, q->k, 1, q->k - 1 - q->p, p->G, 0,
                                     0);
    if (p->prim && n->g->training && n->in[1]->requires_grad)
        p->wprim = vt_gemm_conv_wgrad(&n->g->gemm, q->B, q->C, q->H, q->W, p->Cout, q->k, q->s, q->p, p->G, 0);
    return p->prim != NULL;
}

static void convn_prim_fwd(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    if (vt_gemm_conv_run(p->prim, n->in[0]->data, n->in[1]->data, p->has_bias ? n->in[2]->data : NULL,
                         n->out->data, NULL, 1) != 0 &&
        vt_node_fallback(n, 1) == 0) /* oneDNN failed: the reference from now on */
        convn_fwd(n);
}

static const vt_kernel k_convn_prim = {"conv_nhwc.onednn", convn_prim_prepare, convn_prim_fwd, 0};

/* Output pixels per task of the rows kernel: their patches (CONVN_ROWS × C·k·k floats) stay in the thread's caches
 * between their gather and the GEMM that reads them. */
#define CONVN_ROWS 256
#define CONVN_GROUPED_MIN 8192 /* output pixels from which a grouped conv takes the rows kernel at the AVX2 tier */
#define CONVN_GROUPED_MIN_TRAIN 2048 /* the same in training graphs (forward and backward) */

/* Output pixels of the rows kernel's largest task. */
static int64_t convn_task_rows(const vt_patch_geom *q) {
    const int64_t R = (int64_t)q->B * q->Ho * q->Wo;
    return R < CONVN_ROWS ? R : CONVN_ROWS;
}

/* The transposed conv that gives a stride-1 conv's dX as a forward conv of dy (padding k − 1 − p; its output is x's
 * map). */
static vt_patch_geom rows_dx_geom(const convn_p *p) {
    const vt_patch_geom *q = &p->q;
    return (vt_patch_geom){q->B, p->Cout, q->Ho, q->Wo, q->k, 1, q->k - 1 - q->p, q->H, q->W, 1};
}

/* Floats of backward scratch that the rows kernel's dW (per thread: a task's patches and a weight-sized sum) and
 * stride-1 dX (the flipped weight twice, per thread a task's patches of dy) take. */
static int64_t rows_bwd_floats(const convn_p *p, int nt) {
    const int64_t K = (int64_t)p->q.C * p->q.k * p->q.k, wn = (int64_t)p->Cout * (K / p->G);
    const vt_patch_geom t = rows_dx_geom(p);
    const int64_t dw = nt * (convn_task_rows(&p->q) * K + wn);
    const int64_t dx = p->q.s == 1 ? 2 * wn + nt * convn_task_rows(&t) * p->Cout * p->q.k * p->q.k : 0;
    return dw > dx ? dw : dx;
}

/* The rows kernel: a conv with at least 16 input channels per group and k > 1, as tasks of
 * CONVN_ROWS output pixels, each on one thread: the task's patches gathered in (ky, kx, c) order per group (one copy
 * of C/G contiguous floats per tap and group) into the thread's scratch, then one single-threaded sgemm per group
 * against the weight transposed to (Cout, ky, kx, C/G), the bias and ReLU on the rows it wrote. Taken at the AVX2
 * tier, where oneDNN's jit:avx2 channels-last convolution ran Next-ViT-S's deployed stem and its MHCA convs slower
 * (AMD EPYC Zen 3, 2026-11-30; one-conv eval graphs alternated in one process, best of 6-40, GFLOP/s oneDNN vs rows):
 * ungrouped at batch 16, 64→32 at 112² 76 vs 108, 32→64 98 vs 114, 64→64 stride 2 51 vs 132; batch 1 84 vs 112,
 * 121 vs 124, 53 vs 110. In the whole forward at batch 16 (`--profile`) those three nodes took 71, 69 and 33 instead
 * of 99, 76 and 80 ms, and eval graphs with and without the kernel, alternated, took 0.939 of the time at batch 16
 * and 0.951 at batch 1 (per-round medians of 10 and 30). The MHCA's 32-channel groups at batch 16: 56²×96 73-77 vs
 * 92-97, 28²×192 60-61 vs 86-87, but 14²×384 64-70 vs 60-78, 7²×768 62-70 vs 34-40, and at batch 1 oneDNN as fast
 * or faster (56² 73-78 vs 66-107, 14² 102-110 vs 45-65): grouped convs take the kernel from CONVN_GROUPED_MIN output
 * pixels: Next-ViT-S's eval graph at batch 16 then took 0.953 and 0.975 of the time (medians of 10; best steps 0.96,
 * 0.91), its hMHSA + cFFN variant's 0.993 (0.96). In training graphs the backward runs in the same tasks
 * (rows_wgrad, rows_dgrad), in place of oneDNN's weight-gradient and transposed-conv primitives; grouped convs from
 * CONVN_GROUPED_MIN_TRAIN output pixels. One-conv training graphs (the conv and a square-sum loss) alternated in one
 * process, best of 6-10, oneDNN vs rows in ms at batch 16, forward / backward: 56²×96 40 / 118 vs 33 / 69, 28²×192
 * 23 / 58 vs 17 / 32, 14²×384 10-12 / 27-28 vs 10 / 17-20, but 7²×768 5.1-5.7 / 14-15 vs 8.5-9.0 / 16-17; batch 1
 * 56² 1.8 / 4.4 vs 1.8 / 3.3, 28² even. Next-ViT-S's training step with and without them, alternated (per-round
 * medians): 0.906 of the time at batch 16 (8 rounds), 0.993 at batch 1 (40); the hMHSA + cFFN variant 0.953 at batch
 * 16. Not taken: the 3-channel first conv (3→64 stride 2 at 224²: 61 vs
 * 40 GFLOP/s at batch 16, 133 vs 49 at batch 1: 3-float copies) and the AVX-512 tier (not measured). Also on
 * VITC_GEMM=openblas, in place of the reference's whole-batch patch matrix (64→32 at 112²: 105 vs 44 GFLOP/s). The
 * gather is vt_patches_gather's in another order: (ky, kx, c) makes each tap one contiguous copy. */
static int convn_rows_prepare(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const vt_patch_geom *q = &p->q;
    const vt_gemm_plan *gp = &n->g->gemm;
    const int plan = gp->force == VT_GEMM_OPENBLAS || (gp->force == VT_GEMM_AUTO && gp->onednn == VT_ISA_AVX2);
    const int64_t px = (int64_t)q->B * q->Ho * q->Wo;
    const int grouped_ok = gp->force == VT_GEMM_OPENBLAS || px >= (n->g->training ? CONVN_GROUPED_MIN_TRAIN
                                                                                   : CONVN_GROUPED_MIN);
    if (!plan || (p->G > 1 && !grouped_ok) || q->k == 1 || q->C / p->G < 16) return 0;
    const int64_t K = (int64_t)q->C * q->k * q->k;
    const int64_t need = (int64_t)p->Cout * (K / p->G) + n->g->threads * convn_task_rows(q) * K;
    if (n->g->training && rows_bwd_floats(p, n->g->threads) > n->bws->numel) return 0;
    if (need > INT_MAX || !vt_kernel_work(n, VT_F32, need)) return 0; /* else the reference or oneDNN */
    VT_OP_P(n, convn_p)->rows_bwd = n->g->training;
    return 1;
}

/* The patches of output pixels [r0, r0 + rows) of q (x channels-last, C = G groups of Cg) into cols: per group a
 * (rows, k, k, Cg) block, one copy of Cg contiguous floats per tap (zeros outside the input). */
static void rows_gather(const vt_patch_geom *q, int G, const float *x, int64_t r0, int rows, float *cols) {
    const int Cg = q->C / G, kk = q->k * q->k, Kg = Cg * kk, HWo = q->Ho * q->Wo;
    for (int64_t r = r0; r < r0 + rows; r++) {
        const int bi = (int)(r / HWo), oh = (int)(r % HWo) / q->Wo, ow = (int)(r % HWo) % q->Wo;
        for (int tap = 0; tap < kk; tap++) {
            const int iy = oh * q->s - q->p + tap / q->k, ix = ow * q->s - q->p + tap % q->k;
            const int in = iy >= 0 && iy < q->H && ix >= 0 && ix < q->W;
            const float *src = in ? x + (((size_t)bi * q->H + iy) * q->W + ix) * q->C : NULL;
            for (int gi = 0; gi < G; gi++) {
                float *dt = cols + ((size_t)gi * rows + (size_t)(r - r0)) * Kg + (size_t)tap * Cg;
                if (in) memcpy(dt, src + (size_t)gi * Cg, sizeof(float) * (size_t)Cg);
                else memset(dt, 0, sizeof(float) * (size_t)Cg);
            }
        }
    }
}

/* y (B·Ho·Wo, Co) = (acc: +=) the conv of q over x (G groups) with wt (Co, k, k, C/G), plus b (NULL when acc), ReLU
 * when relu: tasks of CONVN_ROWS output pixels, each gathered into its thread's part of cols (convn_task_rows × C·k·k
 * floats per thread) and multiplied there. */
static void rows_conv(const vt_graph *g, const vt_patch_geom *q, int G, int Co, const float *x, const float *wt,
                      const float *b, float *y, int acc, int relu, float *cols) {
    const int Kg = q->C / G * q->k * q->k, K = Kg * G, Og = Co / G;
    const int64_t R = (int64_t)q->B * q->Ho * q->Wo, tasks = (R + CONVN_ROWS - 1) / CONVN_ROWS;
#pragma omp parallel num_threads(g->threads)
    {
        float *tc = cols + (size_t)omp_get_thread_num() * (size_t)convn_task_rows(q) * K;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t r0 = t * CONVN_ROWS;
            const int rows = (int)(r0 + CONVN_ROWS < R ? CONVN_ROWS : R - r0);
            rows_gather(q, G, x, r0, rows, tc);
            float *yr = y + (size_t)r0 * Co;
            for (int i = 0; b && !acc && i < rows; i++) memcpy(yr + (size_t)i * Co, b, sizeof(float) * (size_t)Co);
            for (int gi = 0; gi < G; gi++)
                vt_gemm(&g->gemm, 0, 1, rows, Og, Kg, 1.0f, tc + (size_t)gi * rows * Kg, Kg, wt + (size_t)gi * Og * Kg,
                        Kg, b || acc ? 1.0f : 0.0f, yr + (size_t)gi * Og, Co);
            if (relu) relu_n(yr, (int64_t)rows * Co);
        }
    }
}

static void convn_rows_fwd(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const int Kg = convn_kg(p), Cg = p->q.C / p->G, kk = p->q.k * p->q.k;
    float *wt = n->kws->data;
    for (int o = 0; o < p->Cout; o++) /* (Cout, Cg, k, k) -> (Cout, k, k, Cg) */
        transpose_w(n->in[1]->data + (size_t)o * Kg, wt + (size_t)o * Kg, Cg, kk, 0);
    rows_conv(n->g, &p->q, p->G, p->Cout, n->in[0]->data, wt, p->has_bias ? n->in[2]->data : NULL, n->out->data, 0,
              p->relu, wt + (size_t)p->Cout * Kg);
}

static const vt_kernel k_convn_rows = {"conv_nhwc.rows", convn_rows_prepare, convn_rows_fwd, 0};
static const vt_kernel *const convn_kernels[] = {&k_convn_rows, &k_convn_prim, NULL};

/* dW += Σ over output pixels of dY_gᵀ·patches_g in the rows kernel's tasks: each thread sums its tasks into its own
 * (Cout, k, k, C/G) block, then the blocks go into w's gradient in thread order (the same sums at every run). */
static void rows_wgrad(const vt_node *n, float *ws) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const vt_patch_geom *q = &p->q;
    const int G = p->G, Co = p->Cout, Og = Co / G, Cg = q->C / G, kk = q->k * q->k, Kg = Cg * kk, K = Kg * G;
    const int64_t R = convn_rows(p), tasks = (R + CONVN_ROWS - 1) / CONVN_ROWS;
    const int64_t cols = convn_task_rows(q) * K, per = cols + (int64_t)Co * Kg; /* a thread's patches, then its sums */
    const float *x = n->in[0]->data, *dy = n->out->grad;
    float *dw = n->in[1]->grad;
#pragma omp parallel num_threads(n->g->threads)
    {
        const int nth = omp_get_num_threads();
        float *tc = ws + (size_t)omp_get_thread_num() * (size_t)per, *acc = tc + cols;
        memset(acc, 0, sizeof(float) * (size_t)Co * (size_t)Kg);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t r0 = t * CONVN_ROWS;
            const int rows = (int)(r0 + CONVN_ROWS < R ? CONVN_ROWS : R - r0);
            rows_gather(q, G, x, r0, rows, tc);
            for (int gi = 0; gi < G; gi++)
                vt_gemm(&n->g->gemm, 1, 0, Og, Kg, rows, 1.0f, dy + (size_t)r0 * Co + (size_t)gi * Og, Co,
                        tc + (size_t)gi * rows * Kg, Kg, 1.0f, acc + (size_t)gi * Og * Kg, Kg);
        }
#pragma omp for schedule(static)
        for (int o = 0; o < Co; o++)
            for (int t = 0; t < kk; t++)
                for (int c = 0; c < Cg; c++) {
                    float s = 0.0f;
                    for (int i = 0; i < nth; i++) s += ws[(size_t)(i * per + cols) + ((size_t)o * kk + t) * Cg + c];
                    dw[((size_t)o * Cg + c) * kk + t] += s;
                }
    }
}

/* dX += the stride-1 conv's transposed conv of dy (rows_dx_geom) in the rows kernel, its weight each group's in and
 * out channels swapped and taps flipped (flip_weight), then laid out (C, k, k, Cout/G). */
static void rows_dgrad(const vt_node *n, float *ws) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const int C = p->q.C, G = p->G, Og = p->Cout / G, kk = p->q.k * p->q.k;
    const vt_patch_geom t = rows_dx_geom(p);
    float *wf = ws, *wt = ws + (size_t)C * Og * kk;
    flip_weight(n->in[1]->data, wf, C, p->Cout, G, kk);
    for (int c = 0; c < C; c++) transpose_w(wf + (size_t)c * Og * kk, wt + (size_t)c * Og * kk, Og, kk, 0);
    rows_conv(n->g, &t, G, C, n->out->grad, wt, NULL, n->in[0]->grad, 1, 0, wt + (size_t)C * Og * kk);
}

/* dX of a stride-1 conv through the forward primitive bprim: the transposed convolution is the correlation of dy,
 * padded by k − 1 − p, with each group's weight transposed (in ↔ out) and flipped, (C, Cout/G, k, k). Into the
 * backward scratch, then added to x's gradient. Where dX went through im2col's adjoint (a K = Cout/G sgemm into
 * C·k·k columns per output pixel, then their scatter-add), it ran at ~54 GFLOP/s on Next-ViT-S's 32-channel MHCA
 * groups at batch 16 (AMD EPYC Zen 3, 2 threads). Returns 1 when done, 0 to take the im2col path. */
static int convn_bwd_prim(const vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    if (!p->bprim) return 0;
    const int C = p->q.C, G = p->G, kk = p->q.k * p->q.k;
    const int64_t nx = n->in[0]->numel;
    float *dx = n->bws->data, *wt = dx + nx, *xg = n->in[0]->grad;
    const float *w = n->in[1]->data;
    flip_weight(w, wt, C, p->Cout, G, kk);
    if (vt_gemm_conv_run(p->bprim, n->out->grad, wt, NULL, dx, NULL, 1) != 0) return 0;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nx; i++) xg[i] += dx[i];
    return 1;
}

static void convn_bwd(vt_node *n) {
    const convn_p *p = VT_OP_P(n, convn_p);
    const vt_tensor *x = n->in[0], *w = n->in[1], *b = p->has_bias ? n->in[2] : NULL;
    const float *dy = n->out->grad;
    float *cols = n->bws->data;
    const int R = (int)convn_rows(p), G = p->G, Og = p->Cout / G, Kg = convn_kg(p), K = Kg * G, Co = p->Cout;
    if (w->grad && p->rows_bwd)
        rows_wgrad(n, cols);
    else if (w->grad && !(p->wprim && vt_gemm_conv_wgrad_run(p->wprim, x->data, dy, w->grad, NULL) == 0)) {
        /* one task per group: all rows sum into the group's weight block */
        vt_patches_gather(&p->q, x->data, cols);
#pragma omp parallel for schedule(static) if (G > 1)
        for (int gi = 0; gi < G; gi++)
            vt_gemm(&n->g->gemm, 1, 0, Og, Kg, R, 1.0f, dy + (size_t)gi * Og, Co, cols + (size_t)gi * Kg, K, 1.0f,
                    w->grad + (size_t)gi * Og * Kg, Kg);
    }
    if (b && b->grad) { /* column sums of dy: each thread owns a block of channels */
#pragma omp parallel
        {
            const int nt = omp_get_num_threads(), t = omp_get_thread_num();
            const int o0 = (int)((int64_t)Co * t / nt), o1 = (int)((int64_t)Co * (t + 1) / nt);
            for (int r = 0; r < R; r++)
                for (int o = o0; o < o1; o++) b->grad[o] += dy[(size_t)r * Co + o];
        }
    }
    if (x->grad && p->rows_bwd && p->q.s == 1)
        rows_dgrad(n, cols);
    else if (x->grad && !convn_bwd_prim(n)) { /* (group, chunk) tasks write disjoint blocks of dcols */
        const int nc = convn_chunks(R, G, n->g->threads);
#pragma omp parallel for collapse(2) schedule(static)
        for (int gi = 0; gi < G; gi++)
            for (int c = 0; c < nc; c++) {
                const int r0 = (int)((int64_t)R * c / nc), r1 = (int)((int64_t)R * (c + 1) / nc);
                vt_gemm(&n->g->gemm, 0, 0, r1 - r0, Kg, Og, 1.0f, dy + (size_t)r0 * Co + (size_t)gi * Og, Co,
                        w->data + (size_t)gi * Og * Kg, Kg, 0.0f, cols + (size_t)r0 * K + (size_t)gi * Kg, K);
            }
        vt_patches_scatter_add(&p->q, cols, x->grad);
    }
}

static const vt_opdef op_conv_nhwc = {"conv_nhwc", convn_fwd, convn_bwd, VT_READS(VT_READS_IN(0) | VT_READS_IN(1)),
                                      convn_kernels, VT_OP_GEMM};

vt_tensor *vt_conv2d_nhwc(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad, int groups) {
    if (vt_bad(g, 2, x, w)) return NULL;
    char sx[64], sw[64], sb[64];
    vt_shape_str(x, sx, 64);
    vt_shape_str(w, sw, 64);
    snprintf(sb, sizeof sb, "none");
    if (b) vt_shape_str(b, sb, 64);
    if (x->ndim != 4 || w->ndim != 4 || w->shape[2] != w->shape[3] || groups < 1 || x->shape[3] % groups ||
        w->shape[0] % groups || w->shape[1] * groups != x->shape[3] || stride < 1 || pad < 0 ||
        pad >= w->shape[2] || w->shape[2] > 64 || (b && (b->ndim != 1 || b->shape[0] != w->shape[0])))
        return vt_fail(g, "conv_nhwc", "input %s (B, H, W, C), weight %s (%s) (Cout, C/groups, k, k), bias %s, "
                       "%d groups, stride %d, padding %d: shapes or arguments do not fit", sx, sw, w->name, sb,
                       groups, stride, pad);
    const int B = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3], k = w->shape[2];
    if (H + 2 * pad < k || W + 2 * pad < k)
        return vt_fail(g, "conv_nhwc", "input %s with padding %d is smaller than the %dx%d kernel", sx, pad, k, k);
    const int Ho = (H + 2 * pad - k) / stride + 1, Wo = (W + 2 * pad - k) / stride + 1;
    if ((int64_t)B * Ho * Wo * C * k * k > INT_MAX)
        return vt_fail(g, "conv_nhwc", "input %s: the %dx%d patches of the map do not fit in 2^31 floats", sx, k, k);
    const int shape[4] = {B, Ho, Wo, w->shape[0]};
    vt_tensor *in[3] = {x, w, b};
    vt_node *n = vt_new_node(g, &op_conv_nhwc, in, b ? 3 : 2, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    convn_p *p = VT_OP_P(n, convn_p);
    *p = (convn_p){{B, C, H, W, k, stride, pad, Ho, Wo, 1}, w->shape[0], groups, b != NULL, NULL, NULL, NULL, 0, 0};
    const int64_t cols = convn_rows(p) * C * k * k, xw = x->numel + (int64_t)w->numel; /* convn_bwd_prim's */
    int64_t bw = cols > xw ? cols : xw, rw = rows_bwd_floats(p, g->threads); /* and the rows kernel's */
    if (rw > bw && rw <= INT_MAX) bw = rw;
    if (!vt_node_work(n, 0, cols) || (g->training && !vt_node_work(n, 1, bw))) return NULL;
    n->macs = convn_rows(p) * w->shape[0] * convn_kg(p);
    return n->out;
}

/* The conv node y made by a conv builder, with its ReLU fused (inference graphs with their kernels), else
 * vt_relu(y). */
static vt_tensor *conv_relu(vt_graph *g, vt_tensor *y, int is_nhwc) {
    if (!y || g->training || g->ref_kernels) return vt_relu(g, y);
    vt_node *n = g->nodes[y->prod];
    if (is_nhwc)
        VT_OP_P(n, convn_p)->relu = 1;
    else
        VT_OP_P(n, geom)->relu = 1;
    return y;
}

vt_tensor *vt_conv2d_relu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad, int groups) {
    return conv_relu(g, vt_conv2d(g, x, w, b, stride, pad, groups), 0);
}

vt_tensor *vt_conv2d_nhwc_relu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad,
                               int groups) {
    return conv_relu(g, vt_conv2d_nhwc(g, x, w, b, stride, pad, groups), 1);
}
