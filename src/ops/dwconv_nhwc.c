/* Depthwise 2-D convolution on channels-last maps (B, H, W, C) (vt_dwconv_nhwc, vt_dwconv_nhwc_ex,
 * vt_dwconv_nhwc_gelu: PVTv2's MLP, CSwin's LePE, FLatten's DWC, GroupMixFormer's CPE): the strip kernels, the
 * dwconv_nhwc.onednn kernel, and the row and pixel kernels other ops call (vt_dw_nhwc_rows, vt_dw_nhwc_pixels,
 * dwplane.h).
 * MACs: B·Ho·Wo·C·kh·kw (bias, added term and GELU not counted). */
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
    const int g16 = gelu && DWS_WIDE != 0 && C % 16 == 0;
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
    const int g16 = dp->gelu && !add && DWS_WIDE != 0 && C % 16 == 0;
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
    if (p->gelu && DWS_WIDE != 0 && n->g->gemm.force == VT_GEMM_AUTO) return 0; /* see above */
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
