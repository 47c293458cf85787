/* 2-D convolution, NCHW (vt_conv2d, vt_conv2d_relu): im2col + sgemm for dense/grouped convs, no im2col for 1x1
 * stride-1 convs, direct loops for depthwise convs (their stride-1 plane kernel also serves other ops: vt_dw_plane,
 * dwplane.h), and the conv2d.onednn kernel. The channels-last convs: dwconv_nhwc.c (depthwise), conv_nhwc.c
 * (dense / grouped).
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

#include "conv.h"
#include "dwplane.h"
#include "mathfn.h"
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
    int Og, Kg, P;     /* channels per group out, K per group (input channels per group · kh·kw), output pixels */
    int64_t col;       /* floats of one image's column buffer (Cin·kh·kw·P) */
    const vt_gemm_plan *gemm; /* the graph's GEMM dispatch */
    vt_gemm_conv *prim;       /* the conv2d.onednn kernel's primitive (made by its prepare), else NULL */
    vt_gemm_conv *bprim;      /* with prim, training, stride 1, k > 1: the forward primitive computing dX (dx_prim) */
    vt_gemm_conv *wprim;      /* training: the weight-gradient primitive (dw_prim; conv_prim_prepare says where) */
    int relu;                 /* vt_conv2d_relu in an inference graph: ReLU on the output, in the same pass */
    int bfold;                /* pointwise, images in parallel, the bias needing its gradient: each image's dy row
                               * sums taken in the image loop (B·Cout floats of bws after the threads' own) */
} geom;

enum { M_IM2COL = 0, M_DEPTHWISE = 1, M_POINTWISE = 2 };

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

/* ---- depthwise NCHW (groups == Cin == Cout): one (H, W) plane at a time ---- */

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
    int64_t pad, fwd, bwd; /* floats: the padded input plane; scratch per thread */
} dwdims;

static dwdims dw_dims(const geom *q) {
    dwdims d;
    const int Wo16 = round_up(q->Wo, VB), W16 = round_up(q->W, VB);
    d.Hp = q->H + 2 * q->p + DW_ROWS - 1;
    d.Wp = Wo16 + q->kw - 1;
    d.Hd = imax(q->H + q->p + q->kh - 1, q->H + 2 * q->p) + DW_ROWS - 1;
    d.Wd = imax(W16 + q->p + q->kw - 1, Wo16 + 2 * (q->kw - 1));
    d.pad = ((int64_t)d.Hp * d.Wp + 15) / 16 * 16;
    d.fwd = d.pad + (int64_t)q->Ho * q->Wo; /* + the output plane, staged */
    /* + dW's sums, the flipped kernel, a dX plane (staged) */
    d.bwd = d.fwd + (int64_t)d.Hd * d.Wd + (int64_t)q->kh * q->kw * (VB + 1) + (int64_t)q->H * q->W;
    return d;
}

/* x (H, W) into the padded plane xp (row stride Wp) at row top, column left. The rest of xp stays as it is: each
 * thread zeroes its padded planes once per run (zero_pads), and all planes of a node share one geometry, so the
 * border is still zero (zeroing every plane's border cost a 3x3 conv on 14x14 planes as much as its arithmetic). */
static void fill_pad(const float *x, int H, int W, int top, int left, float *xp, int Wp) {
#if defined(__AVX512F__) /* vector copies: memcpy's calls on rows of 7 to 56 floats took a fifth of a 3x3 plane's time */
    const __mmask16 m = (__mmask16)((1u << (W % 16)) - 1u);
    for (int r = 0; r < H; r++) {
        const float *s = x + (size_t)r * W;
        float *d = xp + (size_t)(r + top) * Wp + left;
        int c = 0;
        for (; c + 16 <= W; c += 16) _mm512_storeu_ps(d + c, _mm512_loadu_ps(s + c));
        if (m) _mm512_mask_storeu_ps(d + c, m, _mm512_maskz_loadu_ps(m, s + c));
    }
#else
    for (int r = 0; r < H; r++) memcpy(xp + (size_t)(r + top) * Wp + left, x + (size_t)r * W, sizeof(float) * W);
#endif
}

/* Zeroes n floats of a thread's padded-plane scratch before its first plane. */
static void zero_pads(float *p, int64_t n) { memset(p, 0, sizeof(float) * (size_t)n); }

#if !defined(__AVX512F__) /* dw1_rows' 8-lane path */
/* The first min(cnt, 8) floats of *vp into p. */
static inline __attribute__((always_inline)) void v8_store_first(float *p, const v8f *vp, int cnt) {
    v8f v = *vp;
#if defined(__AVX2__)
    if (cnt < 8) { /* a masked store: a copy loop here became `rep movs` (tens of cycles for 14 floats) */
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(p, m, (__m256)v);
        return;
    }
#endif
    if (cnt < 8) { /* no AVX2 */
        float o[8];
        memcpy(o, &v, sizeof o);
        for (int t = 0; t < cnt; t++) p[t] = o[t];
        return;
    }
    memcpy(p, &v, sizeof v);
}
#endif

/* Output rows [0, R) (R <= DW_ROWS), columns [0, n) (n <= VB) of out (row stride ldo) = init +
 * Σ_{ki, kj} w[ki·kw + kj]·src[r·lr + ki·ld + (kj mod s)·ph + kj / s + t] over a padded plane (forward: the input;
 * dX: the output gradient with the flipped kernel). Stride 1: lr = ld, s = 1; stride s > 1: the plane's columns split
 * by phase (ds_split: runs ph floats apart), lr = s·ld. Always computes DW_ROWS rows of VB (the planes have the rows
 * and VB-rounded widths it reads, dw_dims, ds_dims) in 8 vector registers, one fused multiply-add per tap and register
 * (the separate multiply and add of -std=c11 had made a 7x7 plane 1.2x slower). */
static inline void dw1_rows(const float *restrict src, ptrdiff_t ld, ptrdiff_t lr, int s, ptrdiff_t ph,
                            const float *restrict w, int kh, int kw, float init, float *restrict out, ptrdiff_t ldo,
                            int R, int n) {
#if defined(__AVX512F__)
    __m512 a[DW_ROWS];
    for (int r = 0; r < DW_ROWS; r++) a[r] = _mm512_set1_ps(init);
    for (int ki = 0; ki < kh; ki++)
        for (int kj = 0; kj < kw; kj++) {
            const __m512 wv = _mm512_set1_ps(w[ki * kw + kj]);
            const float *restrict xr = src + ki * ld + kj % s * ph + kj / s;
            for (int r = 0; r < DW_ROWS; r++) a[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xr + r * lr), a[r]);
        }
    const __mmask16 m = (__mmask16)(n < 16 ? (1u << n) - 1 : 0xFFFFu);
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(out + r * ldo, m, a[r]);
#else
    enum { NV = VB / 8 };
    v8f a[DW_ROWS][NV];
    for (int r = 0; r < DW_ROWS; r++)
        for (int v = 0; v < NV; v++) a[r][v] = (v8f){init, init, init, init, init, init, init, init};
    for (int ki = 0; ki < kh; ki++)
        for (int kj = 0; kj < kw; kj++) {
            const float c = w[ki * kw + kj];
            const v8f wv = {c, c, c, c, c, c, c, c};
            const float *restrict xr = src + ki * ld + kj % s * ph + kj / s;
            for (int r = 0; r < DW_ROWS; r++)
                for (int v = 0; v < NV; v++) {
                    v8f xv;
                    memcpy(&xv, xr + r * lr + 8 * v, sizeof xv);
                    V8_MADD(a[r][v], wv, xv);
                }
        }
    for (int r = 0; r < R; r++) /* whole and masked vector stores (a scalar copy loop here had become `rep movs`:
                                 * a third of a 3x3 conv's time) */
        for (int v = 0; v < NV && 8 * v < n; v++) v8_store_first(out + r * ldo + 8 * v, &a[r][v], n - 8 * v);
#endif
}

#if defined(__AVX512F__)
/* Keeps vector v in a register: gcc otherwise folds its load into each multiply-add that reads it, loading it again
 * for every use (G times in dwk_rows16). */
#define IN_REGISTER(v) __asm__("" : "+v"(v))

/* dw1_rows for a square K×K kernel (K a constant where inlined): each input vector is loaded once per kernel column
 * and multiplied into every output row it reaches, with that column's K weights held in registers (8 accumulators, K
 * weights, one input: at most 16 of the 32 registers). Per 8×16 outputs and kernel column: 8 + K − 1 loads and K
 * broadcasts for 8·K multiply-adds, where dw1_rows loads once per multiply-add (loads that mostly straddle two cache
 * lines). */
static inline __attribute__((always_inline)) void dwsq_rows(const float *restrict src, ptrdiff_t ld,
                                                             const float *restrict w, const int K, float init,
                                                             float *restrict out, ptrdiff_t ldo, int R, int n) {
    __m512 a[DW_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < DW_ROWS; r++) a[r] = _mm512_set1_ps(init);
#pragma GCC unroll 1 /* unrolled, gcc hoisted all K·K broadcasts and spilled them */
    for (int kj = 0; kj < K; kj++) {
        __m512 wv[7];
#pragma GCC unroll 7
        for (int ki = 0; ki < K; ki++) wv[ki] = _mm512_set1_ps(w[ki * K + kj]);
#pragma GCC unroll 14
        for (int i = 0; i < DW_ROWS + K - 1; i++) {
            __m512 xv = _mm512_loadu_ps(src + i * ld + kj);
            IN_REGISTER(xv);
#pragma GCC unroll 7
            for (int ki = 0; ki < K; ki++)
                if (i - ki >= 0 && i - ki < DW_ROWS) a[i - ki] = _mm512_fmadd_ps(wv[ki], xv, a[i - ki]);
        }
    }
    const __mmask16 m = (__mmask16)(n < 16 ? (1u << n) - 1 : 0xFFFFu);
#pragma GCC unroll 8
    for (int r = 0; r < DW_ROWS; r++)
        if (r < R) _mm512_mask_storeu_ps(out + r * ldo, m, a[r]);
}
#endif

/* Output rows [0, Ho) of the stride-1 correlation of the padded plane src (row stride ld) with the kh×kw kernel w,
 * plus init, into out (row stride ldo), DW_ROWS×VB at a time. */
static void dw1_plane_rows(const geom *q, const float *src, ptrdiff_t ld, const float *w, float init, float *out,
                           ptrdiff_t ldo, int Ho, int Wo) {
    const int kh = q->kh, kw = q->kw;
    for (int oh = 0; oh < Ho; oh += DW_ROWS) {
        const int R = Ho - oh < DW_ROWS ? Ho - oh : DW_ROWS;
        for (int ow0 = 0; ow0 < Wo; ow0 += VB) {
            const float *s = src + (size_t)oh * ld + ow0;
            float *o = out + (size_t)oh * ldo + ow0;
            const int nc = Wo - ow0 < VB ? Wo - ow0 : VB;
#if defined(__AVX512F__)
            if (kh == kw) switch (kh) { /* the kernels the models use, as constants */
                case 3: dwsq_rows(s, ld, w, 3, init, o, ldo, R, nc); continue;
                case 5: dwsq_rows(s, ld, w, 5, init, o, ldo, R, nc); continue;
                case 7: dwsq_rows(s, ld, w, 7, init, o, ldo, R, nc); continue;
                default: break;
                }
#endif
            dw1_rows(s, ld, ld, 1, 0, w, kh, kw, init, o, ldo, R, nc);
        }
    }
}

/* One plane's output into y, or (stage) into the scratch after xp, then copied to y: for a y not in cache (an op's
 * output tensor), whose lines the kernel's stores, DW_ROWS rows at a time, each stalled on (the Refiner's
 * 16 x 36 x 197 x 197 maps, AMD EPYC Zen 5, 2026-12-02: bn_act_dwconv's forward 0.13-0.17 -> 0.08-0.11 s in 8 runs,
 * four alternated rounds). */
static void dw1_plane_fwd(const geom *q, const dwdims *d, const float *x, const float *w, float bv, float *y,
                          float *xp, int stage) {
    float *yt = stage ? xp + d->pad : y;
    fill_pad(x, q->H, q->W, q->p, q->p, xp, d->Wp);
    dw1_plane_rows(q, xp, d->Wp, w, bv, yt, q->Wo, q->Ho, q->Wo);
    if (stage) memcpy(y, yt, sizeof(float) * (size_t)q->Ho * q->Wo);
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
    return (size_t)dw_dims(&q).pad; /* vt_dw_plane does not stage */
}

void vt_dw_plane(const float *x, int H, int W, int k, const float *w, float bias, float *y, float *scratch) {
    const geom q = plane_geom(H, W, k);
    const dwdims d = dw_dims(&q);
    dw1_plane_fwd(&q, &d, x, w, bias, y, scratch, 0);
}

/* ac[kj·VB + t] += Σ_{oh, blocks} dr[oh·Wd + ow0 + t]·xr[oh·Wp + ow0 + kj + t] for t < 8 and kj < KW (one kernel row's
 * taps, 8 lanes of the VB-wide blocks): the taps' sums stay in registers over the whole plane and each dy vector is
 * loaded once for all KW taps (the loop this replaced loaded and stored an accumulator at every multiply-add).
 * dr: the padded dy plane at output row 0, xr: the padded x plane at the kernel row; KW <= 7, a constant where
 * inlined (named accumulators: gcc keeps an array of vectors in memory). Without AVX-512 only (dwk_taps16 there). */
#if !defined(__AVX512F__)
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
#endif

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

/* dW's per-lane sums for G consecutive kernel rows (G <= 3) of a KW-wide kernel (KW <= 7; both constants where
 * inlined): ac[(g·KW + kj)·VB + t] += Σ_{oh, blocks} dy[oh][ow0 + t]·x[oh + g][ow0 + kj + t], with dr the padded dy
 * plane at dy's row 0 (read up to G − 1 zero rows below it; none above: the window of dy rows starts at zero) and xr
 * the padded x plane at the group's first kernel row. Each x vector is loaded once for the G dy rows it meets (the
 * window in registers, G·KW accumulators): KW + 1 loads per G·KW multiply-adds, where dwk_taps16 loads KW + 1 per KW. */
static inline __attribute__((always_inline)) void dwk_rows16(const float *dr, int Wd, const float *xr, int Wp, int Ho,
                                                             int Wo, const int KW, const int G, float *ac) {
    for (int ow0 = 0; ow0 < Wo; ow0 += VB) {
        __m512 a[3][7], dv[3];
#pragma GCC unroll 3
        for (int g = 0; g < G; g++) {
            dv[g] = _mm512_setzero_ps();
#pragma GCC unroll 7
            for (int j = 0; j < KW; j++) a[g][j] = _mm512_setzero_ps();
        }
        for (int t = 0; t < Ho + G - 1; t++) { /* x row t of the group: dy rows t − g */
#pragma GCC unroll 3
            for (int g = G - 1; g > 0; g--) dv[g] = dv[g - 1];
            dv[0] = _mm512_loadu_ps(dr + (ptrdiff_t)t * Wd + ow0);
            const float *xv = xr + (ptrdiff_t)t * Wp + ow0;
#pragma GCC unroll 7
            for (int j = 0; j < KW; j++) {
                __m512 v = _mm512_loadu_ps(xv + j);
                IN_REGISTER(v);
#pragma GCC unroll 3
                for (int g = 0; g < G; g++) a[g][j] = _mm512_fmadd_ps(dv[g], v, a[g][j]);
            }
        }
#pragma GCC unroll 3
        for (int g = 0; g < G; g++)
#pragma GCC unroll 7
            for (int j = 0; j < KW; j++) {
                float *o = ac + (size_t)(g * KW + j) * VB;
                _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), a[g][j]));
            }
    }
}

/* dwk_rows16 over every kernel row, in groups of 3, for KW = 3, 5, 7: 1 when done, 0 for other widths. */
static int dwk_rows_all(const float *dr, int Wd, const float *xp, int Wp, int Ho, int Wo, int kh, int kw, float *acc) {
    if (kw != 3 && kw != 5 && kw != 7) return 0;
    for (int k0 = 0; k0 < kh; k0 += 3) {
        const int G = kh - k0 < 3 ? kh - k0 : 3;
        const float *xr = xp + (size_t)k0 * Wp;
        float *ac = acc + (size_t)k0 * kw * VB;
#define DWK_G(KW)                                                                                                      \
    switch (G) {                                                                                                       \
    case 1: dwk_rows16(dr, Wd, xr, Wp, Ho, Wo, KW, 1, ac); break;                                                      \
    case 2: dwk_rows16(dr, Wd, xr, Wp, Ho, Wo, KW, 2, ac); break;                                                      \
    default: dwk_rows16(dr, Wd, xr, Wp, Ho, Wo, KW, 3, ac);                                                            \
    }
        if (kw == 3) DWK_G(3) else if (kw == 5) DWK_G(5) else DWK_G(7)
#undef DWK_G
    }
    return 1;
}
#endif

/* dx += (dx_add; else =) full correlation of dy with w, given flipped (wf[t] = w[kh·kw − 1 − t]): the padded dy's
 * correlation with wf; acc (kh·kw·VB) += per-lane partial sums of dW (reduced by the caller). dX is written to
 * the plane dxt first, then copied or added in one pass: adding in the tiles' masked stores had each tile's loads of
 * dx wait on the stores before them (perf: a third of the backward on those loads; GroupMixFormer-T training at batch
 * 16, AMD EPYC Zen 5, 2026-12-02, three alternated runs: its separable aggregators 0.86-1.00 -> 0.77-0.81 s), and
 * writing it there directly stalls as dw1_plane_fwd's output does. */
static void dw1_plane_bwd(const geom *q, const dwdims *d, const float *x, const float *wf, const float *dy, float *dx,
                          int dx_add, float *acc, float *xp, float *dyp, float *dxt) {
    const int kh = q->kh, kw = q->kw, H = q->H, W = q->W, Wo = q->Wo, p = q->p, Wp = d->Wp, Wd = d->Wd;
    fill_pad(dy, q->Ho, Wo, kh - 1, kw - 1, dyp, Wd);
    if (dx) { /* staged in dxt, as dw1_plane_fwd's output */
        dw1_plane_rows(q, dyp + (size_t)p * Wd + p, Wd, wf, 0.0f, dxt, W, H, W);
        const int64_t n = (int64_t)H * W;
        if (dx_add) {
#pragma omp simd
            for (int64_t i = 0; i < n; i++) dx[i] += dxt[i];
        } else {
            memcpy(dx, dxt, sizeof(float) * (size_t)n);
        }
    }
    if (!acc) return;
    fill_pad(x, H, W, p, p, xp, Wp);
#if defined(__AVX512F__)
    if (dwk_rows_all(dyp + (size_t)(kh - 1) * Wd + kw - 1, Wd, xp, Wp, q->Ho, Wo, kh, kw, acc)) return;
#endif
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

size_t vt_dw_plane_bwd_scratch(int H, int W, int k) {
    const geom q = plane_geom(H, W, k);
    return (size_t)dw_dims(&q).bwd;
}

void vt_dw_plane_bwd(const float *x, const float *dy, int H, int W, int k, const float *w, float *dx, int dx_add,
                     float *dw, float *scratch) {
    const geom q = plane_geom(H, W, k);
    const dwdims d = dw_dims(&q);
    const int K = k * k;
    float *xp = scratch, *dyp = xp + d.fwd, *acc = dyp + (size_t)d.Hd * d.Wd, *wf = acc + (size_t)K * VB;
    for (int t = 0; t < K; t++) wf[t] = w[K - 1 - t];
    if (dw) memset(acc, 0, sizeof(float) * (size_t)K * VB);
    dw1_plane_bwd(&q, &d, x, wf, dy, dx, dx_add, dw ? acc : NULL, xp, dyp, wf + K);
    for (int t = 0; dw && t < K; t++) {
        float sum = 0.0f;
        for (int l = 0; l < VB; l++) sum += acc[(size_t)t * VB + l];
        dw[t] += sum;
    }
}

/* ---- strided depthwise (s > 1): the padded plane's columns split by phase ----
 * Column jp of the zero-padded plane goes to run jp mod s at jp / s (row i of the split plane: s runs of Wq floats),
 * so the inputs of VB consecutive outputs at any tap are VB consecutive floats and the stride-1 row kernel serves
 * (dw1_rows with lr = s·ld). dX is computed row by row in that layout (a correlation of dy with each phase's taps)
 * and merged back. The loops this replaced read and wrote with stride s, one float at a time: on GroupMixFormer-M's
 * patch embeds (3x3, stride 2, 16 x 40 x 56 x 56) 1.2 ms forward and 5.6 ms backward per batch-16 step. */

typedef struct {
    int Wq;           /* floats per phase run of the split plane */
    int Wr;           /* floats per phase run of a dX row (VB-rounded, covers the input's columns) */
    int L, Wd;        /* dy's padded rows: L zero floats, dy's row, zeros to Wd floats */
    int64_t plane;    /* floats of the split plane: the rows the kernels read, s·Wq floats each */
    int64_t fwd, bwd; /* scratch per thread */
} dsdims;

static dsdims ds_dims(const geom *q) {
    dsdims d;
    const int s = q->s, Wo16 = round_up(q->Wo, VB);
    d.Wq = imax(Wo16 + (q->kw - 1) / s, (q->W + 2 * q->p + s - 1) / s);
    d.Wr = round_up((q->W + q->p + s - 1) / s, VB);
    d.L = (q->kw - 1) / s;
    d.Wd = d.L + imax(Wo16, d.Wr);
    const int rows = imax((round_up(q->Ho, DW_ROWS) - 1) * s + q->kh, q->H + q->p);
    d.plane = ((int64_t)rows * s * d.Wq + 15) / 16 * 16;
    d.fwd = d.plane + (int64_t)q->Ho * q->Wo;                              /* + the output plane, staged */
    d.bwd = d.plane + ((int64_t)q->Ho * d.Wd + 15) / 16 * 16 + (int64_t)s * d.Wr; /* + dy's rows, a dX row */
    return d;
}

/* Row xr (W floats) into split row o (s runs of ws floats; padding p), or back (merge: o's runs into xr, added when
 * add): column j at run (j + p) mod s, float (j + p) / s. s is a constant where inlined (2: gcc's vector
 * interleaves; the loop with a variable stride ran one float at a time, two thirds of the op's time). */
static inline __attribute__((always_inline)) void ds_row(float *xr, int W, int p, const int s, float *o, int ws,
                                                          int merge, int add) {
    for (int b = 0; b < s; b++) {
        const int j0 = ((b - p) % s + s) % s, n = (W - j0 + s - 1) / s; /* the run's first column, its count */
        float *r = o + (size_t)b * ws + (j0 + p) / s, *xj = xr + j0;
        if (!merge)
            for (int t = 0; t < n; t++) r[t] = xj[s * t];
        else if (add)
            for (int t = 0; t < n; t++) xj[s * t] += r[t];
        else
            for (int t = 0; t < n; t++) xj[s * t] = r[t];
    }
}

/* x (H, W) into the split plane xq at row p. The padding stays as zero_pads left it (the same positions are written
 * for every plane of a node). */
static void ds_split(const geom *q, const dsdims *d, const float *x, float *xq) {
    for (int i = 0; i < q->H; i++) {
        float *xr = (float *)(x + (size_t)i * q->W), *row = xq + (size_t)(i + q->p) * q->s * d->Wq;
        if (q->s == 2)
            ds_row(xr, q->W, q->p, 2, row, d->Wq, 0, 0);
        else
            ds_row(xr, q->W, q->p, q->s, row, d->Wq, 0, 0);
    }
}

static void ds_plane_fwd(const geom *q, const dsdims *d, const float *x, const float *w, float bv, float *y,
                         float *xq) {
    const int s = q->s, Ho = q->Ho, Wo = q->Wo;
    const ptrdiff_t ld = (ptrdiff_t)s * d->Wq;
    float *yt = xq + d->plane; /* staged, as dw1_plane_fwd's output */
    ds_split(q, d, x, xq);
    for (int oh = 0; oh < Ho; oh += DW_ROWS) {
        const int R = Ho - oh < DW_ROWS ? Ho - oh : DW_ROWS;
        for (int ow0 = 0; ow0 < Wo; ow0 += VB)
            dw1_rows(xq + (size_t)oh * s * ld + ow0, ld, s * ld, s, d->Wq, w, q->kh, q->kw, bv,
                     yt + (size_t)oh * Wo + ow0, Wo, R, Wo - ow0 < VB ? Wo - ow0 : VB);
    }
    memcpy(y, yt, sizeof(float) * (size_t)Ho * Wo);
}

/* dX's rows (dx_add: added), each computed split by phase into rb (s runs of Wr floats): padded row i, run b, float t
 * = Σ w[ki·kw + kj]·dy[oh][t − kj / s] over the taps with ki ≡ i, kj ≡ b (mod s) and oh = (i − ki) / s in [0, Ho),
 * then merged into dx. dyq: dy's padded rows; s a constant where inlined (a variable s divided at every tap: most of
 * the backward's time). */
static inline __attribute__((always_inline)) void ds_dx(const geom *q, const dsdims *d, const float *dyq,
                                                         const float *w, float *dx, int dx_add, float *rb,
                                                         const int s) {
    const int kw = q->kw;
    for (int r = 0; r < q->H; r++) {
        const int i = r + q->p;
        for (int b = 0; b < s; b++)
            for (int t0 = 0; t0 < d->Wr; t0 += VB) {
                float a[VB] = {0};
                for (int ki = i % s; ki < q->kh && ki <= i; ki += s) {
                    const int oh = (i - ki) / s;
                    if (oh >= q->Ho) continue;
                    const float *dr = dyq + (size_t)oh * d->Wd + d->L + t0;
                    for (int kj = b; kj < kw; kj += s) {
                        const float wv = w[ki * kw + kj], *dv = dr - kj / s;
                        for (int t = 0; t < VB; t++) a[t] += wv * dv[t];
                    }
                }
                memcpy(rb + (size_t)b * d->Wr + t0, a, sizeof a);
            }
        ds_row(dx + (size_t)r * q->W, q->W, q->p, s, rb, d->Wr, 1, dx_add);
    }
}

/* One plane's backward: dx = (dx_add: +=) Wᵀ·dy (dx NULL: none); acc (kh·kw·VB) += dW's per-lane partial sums (acc
 * NULL: none). xq: the split plane, dyq: dy's padded rows, rb: one dX row (ds_dims's bwd scratch, in that order). */
static void ds_plane_bwd(const geom *q, const dsdims *d, const float *x, const float *w, const float *dy, float *dx,
                         int dx_add, float *acc, float *xq) {
    const int s = q->s, kw = q->kw;
    float *dyq = xq + d->plane, *rb = dyq + ((int64_t)q->Ho * d->Wd + 15) / 16 * 16;
    fill_pad(dy, q->Ho, q->Wo, 0, d->L, dyq, d->Wd);
    if (dx && s == 2)
        ds_dx(q, d, dyq, w, dx, dx_add, rb, 2);
    else if (dx)
        ds_dx(q, d, dyq, w, dx, dx_add, rb, s);
    if (!acc) return;
    ds_split(q, d, x, xq);
    const ptrdiff_t ld = (ptrdiff_t)s * d->Wq;
#if defined(__AVX512F__)
#define DWK_TAPS dwk_taps16
#define DWK_LANES VB
#else
#define DWK_TAPS dwk_taps
#define DWK_LANES 8
#endif
    for (int ki = 0; ki < q->kh; ki++)
        for (int kj = 0; kj < kw; kj++)
            for (int h = 0; h < VB; h += DWK_LANES)
                DWK_TAPS(dyq + d->L + h, d->Wd, xq + ki * ld + kj % s * d->Wq + kj / s + h, (int)(s * ld), q->Ho,
                         q->Wo, 1, acc + (size_t)(ki * kw + kj) * VB + h);
#undef DWK_TAPS
#undef DWK_LANES
}

/* Floats of a depthwise conv's backward scratch per thread: dW's per-lane sums (kh·kw·VB), the flipped kernel (kh·kw),
 * then the planes of dw1_plane_bwd (stride 1) or ds_plane_bwd. */
static int64_t dw_bwd_floats(const geom *q) {
    const int64_t K = (int64_t)q->kh * q->kw;
    return q->s == 1 ? dw_dims(q).bwd : K * (VB + 1) + ds_dims(q).bwd;
}

/* ---- conv2d kernels ---- */

static void conv_fwd(vt_node *n) {
    const geom q = *VT_OP_P(n, geom);
    const float *x = n->in[0]->data, *w = n->in[1]->data, *b = n->nin > 2 ? n->in[2]->data : NULL;
    float *y = n->out->data;
    const size_t xs = (size_t)q.Cin * q.H * q.W, ys = (size_t)q.Cout * q.P;
    if (q.mode == M_DEPTHWISE) { /* planes in parallel, each thread with its padded-plane scratch */
        const dwdims d = dw_dims(&q);
        const dsdims e = ds_dims(&q);
        const int64_t per = q.s == 1 ? d.fwd : e.fwd;
#pragma omp parallel num_threads(q.tf)
        {
            float *xp = n->fws->data + (size_t)omp_get_thread_num() * per;
            zero_pads(xp, per);
#pragma omp for schedule(static)
            for (int bc = 0; bc < q.B * q.Cin; bc++) {
                const int c = bc % q.Cin;
                const float *xc = x + (size_t)bc * q.H * q.W,
                            *wc = w + (size_t)c * q.kh * q.kw;
                const float bv = b ? b[c] : 0.0f;
                if (q.s == 1)
                    dw1_plane_fwd(&q, &d, xc, wc, bv, y + (size_t)bc * q.P, xp, 1);
                else
                    ds_plane_fwd(&q, &e, xc, wc, bv, y + (size_t)bc * q.P, xp);
                if (q.relu) relu_n(y + (size_t)bc * q.P, q.P);
            }
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

/* Σ d[0, n) in float (one image's bias-gradient term; both bias paths of conv_bwd add the same floats). */
static float plane_sum(const float *d, int n) {
    float t = 0.0f;
#pragma omp simd reduction(+ : t)
    for (int k = 0; k < n; k++) t += d[k];
    return t;
}

static void conv_bwd(vt_node *n) {
    const geom q = *VT_OP_P(n, geom);
    const vt_tensor *X = n->in[0], *Wt = n->in[1], *Bt = n->nin > 2 ? n->in[2] : NULL;
    const float *x = X->data, *w = Wt->data, *dy = n->out->grad;
    float *dx = X->grad, *dw = Wt->grad;
    const size_t xs = (size_t)q.Cin * q.H * q.W, ys = (size_t)q.Cout * q.P;
    if (Bt && Bt->grad && !(q.bfold && (dx || dw))) {
#pragma omp parallel for schedule(static)
        for (int o = 0; o < q.Cout; o++) {
            double s = 0.0;
            for (int i = 0; i < q.B; i++) s += plane_sum(dy + i * ys + (size_t)o * q.P, q.P);
            Bt->grad[o] += (float)s;
        }
    }
    if (!dx && !dw) return;
    if (q.mode == M_DEPTHWISE) { /* channels in parallel, each thread with dW's per-lane sums and plane scratch */
        const dwdims d = dw_dims(&q);
        const dsdims e = ds_dims(&q);
        const int K = q.kh * q.kw;
        const int64_t per = dw_bwd_floats(&q);
#pragma omp parallel num_threads(q.tb)
        {
            float *acc = n->bws->data + (size_t)omp_get_thread_num() * per, *wf = acc + (size_t)K * VB,
                  *xp = wf + (size_t)K, *dyp = xp + d.fwd;
            zero_pads(xp, per - (int64_t)K * (VB + 1));
#pragma omp for schedule(static)
            for (int c = 0; c < q.Cin; c++) {
                if (dw) memset(acc, 0, sizeof(float) * (size_t)K * VB);
                for (int t = 0; dx && q.s == 1 && t < K; t++) wf[t] = w[(size_t)c * K + K - 1 - t];
                for (int i = 0; i < q.B; i++) {
                    const size_t pl = (size_t)i * q.Cin + c;
                    const float *xc = x + pl * q.H * q.W, *dyc = dy + pl * q.P;
                    float *dxc = dx ? dx + pl * q.H * q.W : NULL;
                    if (q.s == 1)
                        dw1_plane_bwd(&q, &d, xc, wf, dyc, dxc, !(n->grad_fresh & 1u), dw ? acc : NULL, xp, dyp,
                                      dyp + (size_t)d.Hd * d.Wd);
                    else
                        ds_plane_bwd(&q, &e, xc, w + (size_t)c * K, dyc, dxc, !(n->grad_fresh & 1u), dw ? acc : NULL,
                                     xp);
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
    /* the bias's per-image sums while each image's dy is in cache (a separate pass read all of dy from memory) */
    float *bsum = q.bfold && Bt->grad ? ws + (size_t)q.tb * (size_t)wn : NULL;
#pragma omp parallel num_threads(q.tb)
    {
        float *mine = ws + (size_t)omp_get_thread_num() * per;
        float *mydw = dw ? mine : NULL, *mycol = mine + (dw ? wn : 0);
#pragma omp for schedule(static)
        for (int i = 0; i < q.B; i++) {
            conv_image_bwd(&q, x + i * xs, w, dy + i * ys, mycol, dx ? dx + i * xs : NULL, mydw, 0);
            for (int o = 0; bsum && o < q.Cout; o++)
                bsum[(size_t)i * q.Cout + o] = plane_sum(dy + i * ys + (size_t)o * q.P, q.P);
        }
    }
    for (int o = 0; bsum && o < q.Cout; o++) { /* the images' sums in image order, as the separate pass added them */
        double s = 0.0;
        for (int i = 0; i < q.B; i++) s += bsum[(size_t)i * q.Cout + o];
        Bt->grad[o] += (float)s;
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
    conv_shape_strs(x, w, b, sx, sw, sb);
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
    geom q = {B, Cin, H, W, Cout, kh, kw, stride, pad, groups, Ho, Wo, mode, tf, tb,
              Cout / groups, Cg * kh * kw, P, (int64_t)Cin * kh * kw * P, &g->gemm, NULL, NULL, NULL, 0, 0};
    *VT_OP_P(n, geom) = q;
    n->macs = (int64_t)B * Cout * Ho * Wo * (Cin / groups) * kh * kw;
    if (mode == M_DEPTHWISE) n->kind = VT_OP_OTHER; /* memory-bound plane loops, no GEMM call (the profile's split) */
    if (mode == M_DEPTHWISE) {
        n->grad_sets = 1u; /* the plane kernels write every element of dX */
        const int64_t fwd = stride == 1 ? dw_dims(&q).fwd : ds_dims(&q).fwd, bwd = dw_bwd_floats(&q);
        if ((int64_t)tf * (fwd > bwd ? fwd : bwd) > INT_MAX)
            return vt_fail(g, "conv2d", "input %s, weight %s: padded plane scratch is too large", sx, sw);
        vt_node_work(n, 0, (int64_t)tf * fwd);
        if (x->requires_grad || w->requires_grad) vt_node_work(n, 1, (int64_t)tb * bwd);
        return n->out;
    }
    const int64_t fwork = mode == M_IM2COL ? (int64_t)tf * q.col : 0;
    const int bfold = mode == M_POINTWISE && tb > 1 && b && b->requires_grad;
    VT_OP_P(n, geom)->bfold = bfold;
    const int64_t bwork = tb > 1 ? (int64_t)tb * ((mode == M_IM2COL ? q.col : 0) + w->numel) +
                                       (bfold ? (int64_t)B * Cout : 0)
                                 : (mode == M_IM2COL ? q.col : 0);
    if (fwork > INT_MAX || bwork > INT_MAX)
        return vt_fail(g, "conv2d", "input %s, weight %s: column buffer of %lld floats is too large", sx, sw,
                       (long long)(fwork > bwork ? fwork : bwork));
    if (fwork) vt_node_work(n, 0, fwork);
    if (bwork && (x->requires_grad || w->requires_grad)) vt_node_work(n, 1, bwork);
    return n->out;
}

/* vt_relu(vt_conv2d(...)): the ReLU in the conv's output pass where conv_relu_node says so. */
vt_tensor *vt_conv2d_relu(vt_graph *g, vt_tensor *x, vt_tensor *w, vt_tensor *b, int stride, int pad, int groups) {
    vt_tensor *y = vt_conv2d(g, x, w, b, stride, pad, groups);
    vt_node *n = conv_relu_node(g, y);
    if (!n) return vt_relu(g, y);
    VT_OP_P(n, geom)->relu = 1;
    return y;
}
