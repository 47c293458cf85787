/* Vectorisable float math for kernels. glibc's expf/erff are scalar calls (no SIMD without -ffast-math) and cost
 * 10-100 ns per element here, which made GELU and softmax a large share of a ViT step (measured by
 * `vitc bench --profile`); these inline versions vectorise under -O3 and stay within a few ulp (tested in
 * tests/test_ops_attention.c against double-precision libm). */
#ifndef VITC_MATHFN_H
#define VITC_MATHFN_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "gelu_table.h"
#include "vitc/ops.h"

/* e^r for an already clamped x = n·ln2 + r: returns e^r and sets *nb to n (n = round(x / ln2), from the bits of the
 * rounding shift: no float-to-int conversion, undefined for NaN, whose guarding branch cost 20% of GELU's time;
 * for NaN the result is NaN already). */
static inline float vt_exp_reduced(float x, uint32_t *nb) {
    /* x = n·ln2 + r with |r| <= ln2/2 */
    const float sh = x * 1.44269504088896341f + 12582912.0f; /* round to nearest via 1.5·2^23: n in its low bits */
    float n = sh - 12582912.0f;
    float r = x - n * 0.693145751953125f; /* ln2 split in a high and a low part for an exact reduction */
    r -= n * 1.428606765330187045e-06f;
    /* exp(r) by its Taylor series to degree 7 (error < 2e-8 on |r| <= 0.347) */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t shb;
    memcpy(&shb, &sh, 4);
    *nb = shb - 0x4B400000u;
    return p;
}

/* 2^k as a float for k in [−126, 127]. */
static inline float vt_pow2i(int32_t k) {
    const uint32_t b = (uint32_t)(k + 127) << 23;
    float s;
    memcpy(&s, &b, 4);
    return s;
}

/* e^x for float x, relative error < 2e-7; results are clamped to [1.2e-38, 3.4e38]; NaN stays NaN. */
static inline float vt_expf(float x) {
    x = x < -87.33654f ? -87.33654f : (x > 88.72283f ? 88.72283f : x);
    uint32_t nb;
    const float p = vt_exp_reduced(x, &nb);
    /* scale by 2^n in two steps so n = 128 (x near 88.7) does not overflow the exponent field */
    const int32_t ni = (int32_t)nb, h = ni / 2;
    return p * vt_pow2i(h) * vt_pow2i(ni - h);
}

/* vt_expf(x) for x <= 0 (or NaN), bit for bit, with less work: no upper clamp, and n >= −126 lets 2^n be one
 * normal float, so p·2^n is one multiplication (exact, or rounded once into the subnormals, as p·2^h·2^(n−h) is).
 * For softmax arguments (x − max) and e^(−x²): about 20% fewer operations than vt_expf. */
static inline float vt_expf_le0(float x) {
    uint32_t nb;
    const float p = vt_exp_reduced(x < -87.33654f ? -87.33654f : x, &nb);
    return p * vt_pow2i((int32_t)nb);
}

/* erf(x) by Abramowitz & Stegun 7.1.26 evaluated in float (absolute error < 6e-7); *e receives e^(-x²), which
 * the formula computes anyway (GELU's gradient reuses it). */
static inline float vt_erf_e(float x, float *e) {
    float a = x < 0 ? -x : x;
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    *e = vt_expf_le0(-a * a);
    float y = 1.0f - p * t * *e;
    return x < 0 ? -y : y;
}

/* erf(x) (see vt_erf_e). */
static inline float vt_erff(float x) {
    float e;
    return vt_erf_e(x, &e);
}

/* GELU with the exact erf, x·Φ(x); *d receives its derivative Φ(x) + x·φ(x) (NaN at ±inf, as the vector form and
 * PyTorch give: inf·0). */
static inline float vt_gelu_fd(float x, float *d) {
    float e, cdf = 0.5f * (1.0f + vt_erf_e(x * 0.70710678118654752f, &e)); /* e = e^(-x²/2) */
    *d = cdf + x * 0.39894228040143268f * (x <= 13.5f && x >= -13.5f ? e : 0.0f); /* e floors at FLT_MIN past 13.2 */
    return x * cdf;
}

/* GELU with the exact erf, x·Φ(x). */
static inline float vt_gelu_f(float x) { return 0.5f * x * (1.0f + vt_erff(x * 0.70710678118654752f)); }

/* One SIMD vector of VT_VW floats: AVX-512F (16) or AVX2 + FMA (8); VT_VW undefined without either. The kernels
 * below are written once over it with fused multiply-adds (gcc's -std=c11 rounds a·b + c twice in scalar code and
 * vectorised the scalar GELU 8 floats wide with separate multiplies and adds: 2.3 ns per float against 0.72 for
 * vt_gelu_n 16 wide, measured on an Intel Xeon (Cascade Lake, AVX-512), 2026-11-27). */
#if defined(__AVX512F__)
#define VT_VW 16
typedef __m512 vt_vf;
#define VT_VPS(op) _mm512_##op##_ps
/* |v| */
static inline vt_vf vt_vabs(vt_vf v) { return _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(v),
                                                                                    _mm512_set1_epi32(0x7fffffff))); }
/* m with the sign of s flipped where s is negative (m·sign(s) for m >= 0) */
static inline vt_vf vt_vsignof(vt_vf m, vt_vf s) {
    return _mm512_castsi512_ps(_mm512_xor_epi32(_mm512_castps_si512(m), _mm512_and_epi32(_mm512_castps_si512(s),
                                                                                        _mm512_set1_epi32(INT32_MIN))));
}
/* 2^n as floats from the rounding shift sh = x/ln2 + 1.5·2^23 (n in its low bits, n >= -126) */
static inline vt_vf vt_vpow2_sh(vt_vf sh) {
    const __m512i nb = _mm512_add_epi32(_mm512_castps_si512(sh), _mm512_set1_epi32(127 - 0x4B400000));
    return _mm512_castsi512_ps(_mm512_slli_epi32(nb, 23));
}
/* the sum (or max when mx) of v's lanes */
static inline float vt_vhreduce(vt_vf v, int mx) { return mx ? _mm512_reduce_max_ps(v) : _mm512_reduce_add_ps(v); }
/* v with all but its last r lanes zeroed (0 < r < VT_VW) */
static inline vt_vf vt_vlast(vt_vf v, int r) { return _mm512_maskz_mov_ps((__mmask16)(0xFFFFu << (16 - r)), v); }
/* the n floats at p (0 < n < VT_VW) in the first lanes, zeros after them (nothing read past p + n) */
static inline vt_vf vt_vload_n(const float *p, int n) { return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p); }
/* stores v's first n lanes at p (0 < n < VT_VW; nothing written past p + n) */
static inline void vt_vstore_n(float *p, vt_vf v, int n) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v); }
/* v with all but its first n lanes zeroed (0 < n < VT_VW) */
static inline vt_vf vt_vfirst(vt_vf v, int n) { return _mm512_maskz_mov_ps((__mmask16)((1u << n) - 1), v); }
#elif defined(__AVX2__) && defined(__FMA__)
#define VT_VW 8
typedef __m256 vt_vf;
#define VT_VPS(op) _mm256_##op##_ps
static inline vt_vf vt_vabs(vt_vf v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
static inline vt_vf vt_vsignof(vt_vf m, vt_vf s) { return _mm256_xor_ps(m, _mm256_and_ps(s, _mm256_set1_ps(-0.0f))); }
static inline vt_vf vt_vpow2_sh(vt_vf sh) {
    const __m256i nb = _mm256_add_epi32(_mm256_castps_si256(sh), _mm256_set1_epi32(127 - 0x4B400000));
    return _mm256_castsi256_ps(_mm256_slli_epi32(nb, 23));
}
static inline float vt_vhreduce(vt_vf v, int mx) {
    __m128 a = _mm256_castps256_ps128(v), b = _mm256_extractf128_ps(v, 1);
    a = mx ? _mm_max_ps(a, b) : _mm_add_ps(a, b);
    b = _mm_movehl_ps(a, a);
    a = mx ? _mm_max_ps(a, b) : _mm_add_ps(a, b);
    b = _mm_shuffle_ps(a, a, 1);
    a = mx ? _mm_max_ss(a, b) : _mm_add_ss(a, b);
    return _mm_cvtss_f32(a);
}
static inline vt_vf vt_vlast(vt_vf v, int r) {
    static const int32_t hi[16] = {0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1};
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(hi + r))));
}
/* the AVX2 lane masks of vt_vload_n, vt_vstore_n and vt_vfirst: the first n lanes set */
static inline __m256i vt_vmask_n(int n) {
    static const int32_t lo[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(lo + 8 - n));
}
static inline vt_vf vt_vload_n(const float *p, int n) { return _mm256_maskload_ps(p, vt_vmask_n(n)); }
static inline void vt_vstore_n(float *p, vt_vf v, int n) { _mm256_maskstore_ps(p, vt_vmask_n(n), v); }
static inline vt_vf vt_vfirst(vt_vf v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(vt_vmask_n(n))); }
#endif

#ifdef VT_VW
/* vt_expf_le0 on one vector: the same reduction, then e^r by a degree-5 minimax polynomial instead of the degree-7
 * series, two fused multiply-adds fewer: relative error at most 1.7e-7 against 7.9e-8 (every normal result from
 * x = −87 to 0 in steps of 2^-20); softmax rows of 197 floats in L1 1.14x faster by the fastest of 6 runs, 1.28x by
 * the median, rows of 49 1.08x by the median (AMD EPYC Zen 3, 2026-11-30). max(clamp, x) keeps NaN (maxps returns
 * its second operand when either is NaN). */
static inline vt_vf vt_vexpf_le0(vt_vf x) {
    x = VT_VPS(max)(VT_VPS(set1)(-87.33654f), x);
    const vt_vf sh = VT_VPS(fmadd)(x, VT_VPS(set1)(1.44269504088896341f), VT_VPS(set1)(12582912.0f));
    const vt_vf n = VT_VPS(sub)(sh, VT_VPS(set1)(12582912.0f));
    vt_vf r = VT_VPS(fnmadd)(n, VT_VPS(set1)(0.693145751953125f), x);
    r = VT_VPS(fnmadd)(n, VT_VPS(set1)(1.428606765330187045e-06f), r);
    vt_vf p = VT_VPS(set1)(0.008290315046906471f); /* constant term 1: e^0 = 1 exactly */
    p = VT_VPS(fmadd)(p, r, VT_VPS(set1)(0.04189793020486832f));
    p = VT_VPS(fmadd)(p, r, VT_VPS(set1)(0.1666763573884964f));
    p = VT_VPS(fmadd)(p, r, VT_VPS(set1)(0.4999915063381195f));
    p = VT_VPS(fmadd)(p, r, VT_VPS(set1)(0.9999997019767761f));
    p = VT_VPS(fmadd)(p, r, VT_VPS(set1)(1.0f));
    return VT_VPS(mul)(p, vt_vpow2_sh(sh));
}

/* g(u) = Φ(u) − 1/2 for u >= 0 (u = |x|), 1/2 from VT_GELU_U on: gelu_table.h's piecewise polynomials, interval k
 * = floor(u / h), its coefficients picked out of one register each by a lane permute. NaN stays NaN. */
static inline vt_vf vt_vphi_half(vt_vf u) {
#if VT_VW == 16
#define VT_GELU_T vt_gelu_t16
#define VT_GELU_PICK(j, k) _mm512_permutexvar_ps((k), _mm512_loadu_ps(VT_GELU_T[j]))
    const __m512i k = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_mul_ps(u, _mm512_set1_ps(16.0f / VT_GELU_U))),
                                       _mm512_set1_epi32(15));
    const vt_vf kf = _mm512_cvtepi32_ps(k);
#else
#define VT_GELU_T vt_gelu_t8
#define VT_GELU_PICK(j, k) _mm256_permutevar8x32_ps(_mm256_loadu_ps(VT_GELU_T[j]), (k))
    const __m256i k = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(u, _mm256_set1_ps(8.0f / VT_GELU_U))),
                                       _mm256_set1_epi32(7));
    const vt_vf kf = _mm256_cvtepi32_ps(k);
#endif
    const float h = VT_GELU_U / VT_VW;
    const vt_vf s = VT_VPS(fnmadd)(kf, VT_VPS(set1)(h), VT_VPS(sub)(u, VT_VPS(set1)(0.5f * h)));
    const int deg = (int)(sizeof VT_GELU_T / sizeof VT_GELU_T[0]) - 1;
    vt_vf p = VT_GELU_PICK(deg, k);
    for (int j = deg - 1; j >= 0; j--) p = VT_VPS(fmadd)(p, s, VT_GELU_PICK(j, k));
#if VT_VW == 16
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(u, _mm512_set1_ps(VT_GELU_U), _CMP_GE_OQ), p, _mm512_set1_ps(0.5f));
#else
    return _mm256_blendv_ps(p, _mm256_set1_ps(0.5f), _mm256_cmp_ps(u, _mm256_set1_ps(VT_GELU_U), _CMP_GE_OQ));
#endif
#undef VT_GELU_PICK
#undef VT_GELU_T
}

/* GELU(x) = x/2 + |x|·g(|x|) on one vector (vt_vphi_half: within 4e-7 of erf's GELU); with d, *d = GELU'(x) =
 * Φ(x) + x·φ(x). Both forms give the same GELU bits. The erf of Abramowitz & Stegun 7.1.26 this replaced took a
 * 512-bit division and an exponential per vector: 0.50 against 0.2x ns per float, Intel Xeon Ice Lake, 2026-11-29. */
static inline vt_vf vt_vgelu(vt_vf x, vt_vf *d) {
    const vt_vf u = vt_vabs(x), p = vt_vphi_half(u);
    if (d) {
        vt_vf e = vt_vexpf_le0(VT_VPS(mul)(VT_VPS(mul)(u, u), VT_VPS(set1)(-0.5f))); /* e^(-x²/2) */
#if VT_VW == 16 /* 0 past |x| = 13.5, where the exponential floors at FLT_MIN (x·φ(x) grew with x past 1e32) */
        e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(u, _mm512_set1_ps(13.5f), _CMP_LE_OQ), e);
#else
        e = _mm256_and_ps(e, _mm256_cmp_ps(u, _mm256_set1_ps(13.5f), _CMP_LE_OQ));
#endif
        const vt_vf cdf = VT_VPS(add)(VT_VPS(set1)(0.5f), vt_vsignof(p, x));
        *d = VT_VPS(fmadd)(VT_VPS(mul)(x, VT_VPS(set1)(0.39894228040143268f)), e, cdf);
    }
    return VT_VPS(fmadd)(u, p, VT_VPS(mul)(x, VT_VPS(set1)(0.5f)));
}
#endif

/* The GELU kernels over n floats, one thread (callers split the work): every float, the last partial vector's too,
 * goes through the same vector code, so a value does not depend on where in an array it sits.
 * vt_gelu_n: y = GELU(x) (y may be x). vt_gelu_fd_n: also d = GELU'(x) (y may be NULL; x, y, d may coincide).
 * vt_gelu_bwd_n: dx = dy·GELU'(x), or dx += that when acc; y = GELU(x) too when y is not NULL. */
/* (vt_gelu_n as vt_gelu_fd_n with d = NULL, one function with branches on d, ran 10% slower.) */
static inline void vt_gelu_n(const float *x, float *y, int64_t n) {
#ifdef VT_VW
    int64_t i = 0;
    for (; i + 2 * VT_VW <= n; i += 2 * VT_VW) { /* two vectors per step: 1.3x faster on AVX-512, 1.15x on AVX2 */
        const vt_vf a = vt_vgelu(VT_VPS(loadu)(x + i), NULL), b = vt_vgelu(VT_VPS(loadu)(x + i + VT_VW), NULL);
        VT_VPS(storeu)(y + i, a);
        VT_VPS(storeu)(y + i + VT_VW, b);
    }
    for (; i + VT_VW <= n; i += VT_VW) VT_VPS(storeu)(y + i, vt_vgelu(VT_VPS(loadu)(x + i), NULL));
    if (i < n) {
        float b[VT_VW] = {0};
        memcpy(b, x + i, (size_t)(n - i) * sizeof *b);
        VT_VPS(storeu)(b, vt_vgelu(VT_VPS(loadu)(b), NULL));
        memcpy(y + i, b, (size_t)(n - i) * sizeof *b);
    }
#else
    for (int64_t i = 0; i < n; i++) y[i] = vt_gelu_f(x[i]);
#endif
}

static inline void vt_gelu_fd_n(const float *x, float *y, float *d, int64_t n) {
#ifdef VT_VW
    int64_t i = 0;
    vt_vf dv, dw;
    for (; i + 2 * VT_VW <= n; i += 2 * VT_VW) {
        const vt_vf a = vt_vgelu(VT_VPS(loadu)(x + i), &dv), b = vt_vgelu(VT_VPS(loadu)(x + i + VT_VW), &dw);
        if (y) {
            VT_VPS(storeu)(y + i, a);
            VT_VPS(storeu)(y + i + VT_VW, b);
        }
        VT_VPS(storeu)(d + i, dv);
        VT_VPS(storeu)(d + i + VT_VW, dw);
    }
    for (; i + VT_VW <= n; i += VT_VW) {
        const vt_vf yv = vt_vgelu(VT_VPS(loadu)(x + i), &dv);
        if (y) VT_VPS(storeu)(y + i, yv);
        VT_VPS(storeu)(d + i, dv);
    }
    if (i < n) {
        float b[VT_VW] = {0}, bd[VT_VW];
        memcpy(b, x + i, (size_t)(n - i) * sizeof *b);
        VT_VPS(storeu)(b, vt_vgelu(VT_VPS(loadu)(b), &dv));
        VT_VPS(storeu)(bd, dv);
        if (y) memcpy(y + i, b, (size_t)(n - i) * sizeof *b);
        memcpy(d + i, bd, (size_t)(n - i) * sizeof *b);
    }
#else
    for (int64_t i = 0; i < n; i++) {
        const float v = vt_gelu_fd(x[i], &d[i]);
        if (y) y[i] = v;
    }
#endif
}

static inline void vt_gelu_bwd_n(const float *x, float *y, const float *dy, float *dx, int64_t n, int acc) {
    for (int64_t i0 = 0; i0 < n; i0 += 256) { /* GELU' of a block into the stack, then the products */
        float d[256];
        const int m = n - i0 < 256 ? (int)(n - i0) : 256;
        vt_gelu_fd_n(x + i0, y ? y + i0 : NULL, d, m);
        if (acc)
            for (int i = 0; i < m; i++) dx[i0 + i] += dy[i0 + i] * d[i];
        else
            for (int i = 0; i < m; i++) dx[i0 + i] = dy[i0 + i] * d[i];
    }
}

/* vt_gelu_fd_n (vt_gelu_n when d is NULL) over n floats on all threads, in chunks of 4096 floats. */
static inline void vt_gelu_all(const float *x, float *y, float *d, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 4096)
    for (int64_t i = 0; i < n; i += 4096) {
        const int64_t m = n - i < 4096 ? n - i : 4096;
        if (d)
            vt_gelu_fd_n(x + i, y ? y + i : NULL, d + i, m);
        else
            vt_gelu_n(x + i, y + i, m);
    }
}

/* vt_gelu_bwd_n over n floats on all threads, in chunks of 4096 floats. */
static inline void vt_gelu_bwd_all(const float *x, const float *dy, float *dx, int64_t n, int acc) {
#pragma omp parallel for schedule(static) if (n > 4096)
    for (int64_t i = 0; i < n; i += 4096) vt_gelu_bwd_n(x + i, NULL, dy + i, dx + i, n - i < 4096 ? n - i : 4096, acc);
}

/* Rows of n >= VT_VW floats run whole vectors over [0, nv), nv = n rounded down to VT_VW, and, when r = n − nv > 0,
 * one more vector over the row's last VT_VW floats, loaded before anything is stored (so y may be x): its first
 * VT_VW − r lanes repeat columns the main loop has, are left out of sums (vt_vlast) and stored with the very values
 * the main loop stored there (lanes are computed alike). On rows of 197 and 49 this ran 1.35x faster than a scalar
 * tail (AMD EPYC Zen 3, 2026-11-28): five scalar exponentials cost as much as a fifth of the row; AVX2's masked
 * loads and stores were no faster than the scalar tail on that CPU. */

/* y = e^(x − mx) over one contiguous row of n values (y may equal x), mx the row's maximum; returns the sum of y, so
 * softmax(x) = y / sum. hMHSA's forward leaves that division to the rows of P·V (d floats a row where P's are M):
 * its nodes in DeiT-T hMHSA's batch-16 eval graph 1.01, 1.10 and 1.08x in three runs of 8-40 rounds alternated in
 * one graph, PVTv2-b1 hMHSA's 1.00 (AMD EPYC Zen 3, 2026-11-30); plain attention's 1.00-1.02x did not pay for it. */
static inline float vt_exp_row_max(const float *x, float *y, int n, float mx) {
    float s = 0.0f;
#ifdef VT_VW
    if (n >= VT_VW) {
        const int nv = n / VT_VW * VT_VW, r = n - nv;
        const vt_vf vm = VT_VPS(set1)(mx);
        vt_vf vs = VT_VPS(setzero)(), et = vs;
        if (r) et = vt_vexpf_le0(VT_VPS(sub)(VT_VPS(loadu)(x + n - VT_VW), vm)); /* before y overwrites it */
        for (int j = 0; j < nv; j += VT_VW) {
            const vt_vf e = vt_vexpf_le0(VT_VPS(sub)(VT_VPS(loadu)(x + j), vm));
            VT_VPS(storeu)(y + j, e);
            vs = VT_VPS(add)(vs, e);
        }
        if (r) {
            vs = VT_VPS(add)(vs, vt_vlast(et, r));
            VT_VPS(storeu)(y + n - VT_VW, et);
        }
        return vt_vhreduce(vs, 0);
    }
#endif
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < n; j++) {
        y[j] = vt_expf_le0(x[j] - mx);
        s += y[j];
    }
    return s;
}

/* y = softmax(x) over one contiguous row of n values (y may equal x) whose maximum mx the caller knows:
 * vt_exp_row_max, then a scaling pass. */
static inline void vt_softmax_row_max(const float *x, float *y, int n, float mx) {
    const float inv = 1.0f / vt_exp_row_max(x, y, n, mx);
#pragma omp simd
    for (int j = 0; j < n; j++) y[j] *= inv;
}

/* y = softmax(x) over one contiguous row of n values (y may equal x): a max pass, then vt_softmax_row_max. */
static inline void vt_softmax_row(const float *x, float *y, int n) {
    float mx = x[0];
#ifdef VT_VW
    if (n >= VT_VW) {
        const int nv = n / VT_VW * VT_VW;
        vt_vf m = VT_VPS(loadu)(x + n - VT_VW);
        for (int j = 0; j < nv; j += VT_VW) m = VT_VPS(max)(m, VT_VPS(loadu)(x + j));
        vt_softmax_row_max(x, y, n, vt_vhreduce(m, 1));
        return;
    }
#endif
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    vt_softmax_row_max(x, y, n, mx);
}

/* Softmax backward over one row in place: g = p ⊙ (g − Σ g⊙p), p the row's probabilities, g its gradient. The
 * dot product runs on two vector accumulators (gcc's `omp simd` reduction made it one 8-wide chain bound by the
 * addition's latency: 14% of the hallucinated attention's backward time on DeiT-T hMHSA's shapes). */
static inline void vt_softmax_bwd_row(const float *p, float *g, int n) {
    float dot = 0.0f;
#ifdef VT_VW
    if (n >= VT_VW) {
        const int nv = n / VT_VW * VT_VW, r = n - nv;
        const vt_vf gt = VT_VPS(loadu)(g + n - VT_VW), pt = VT_VPS(loadu)(p + n - VT_VW);
        vt_vf s0 = r ? vt_vlast(VT_VPS(mul)(gt, pt), r) : VT_VPS(setzero)(), s1 = VT_VPS(setzero)();
        int j = 0;
        for (; j + 2 * VT_VW <= nv; j += 2 * VT_VW) {
            s0 = VT_VPS(fmadd)(VT_VPS(loadu)(g + j), VT_VPS(loadu)(p + j), s0);
            s1 = VT_VPS(fmadd)(VT_VPS(loadu)(g + j + VT_VW), VT_VPS(loadu)(p + j + VT_VW), s1);
        }
        if (j < nv) s0 = VT_VPS(fmadd)(VT_VPS(loadu)(g + j), VT_VPS(loadu)(p + j), s0);
        const vt_vf dv = VT_VPS(set1)(vt_vhreduce(VT_VPS(add)(s0, s1), 0));
        for (j = 0; j < nv; j += VT_VW)
            VT_VPS(storeu)(g + j, VT_VPS(mul)(VT_VPS(loadu)(p + j), VT_VPS(sub)(VT_VPS(loadu)(g + j), dv)));
        if (r) VT_VPS(storeu)(g + n - VT_VW, VT_VPS(mul)(pt, VT_VPS(sub)(gt, dv)));
        return;
    }
#endif
#pragma omp simd reduction(+ : dot)
    for (int k = 0; k < n; k++) dot += g[k] * p[k];
    for (int j = 0; j < n; j++) g[j] = p[j] * (g[j] - dot);
}

/* ReLU, ReLU6, Hardswish and their derivatives (the factor dy is multiplied by), shared by the activation op and the
 * BatchNorm that applies one after itself (norm.c), so both give the same floats. A NaN stays NaN, as in PyTorch
 * (a ReLU that made it 0 would hide a diverged activation from the loss). */
static inline float vt_relu_f(float v) { return v < 0.0f ? 0.0f : v; }
static inline float vt_relu_d(float v) { return v > 0.0f ? 1.0f : 0.0f; }
static inline float vt_relu6_f(float v) { return v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v; }
static inline float vt_relu6_d(float v) { return v > 0.0f && v < 6.0f ? 1.0f : 0.0f; }
static inline float vt_hswish_f(float v) { return v <= -3.0f ? 0.0f : v >= 3.0f ? v : v * (v + 3.0f) / 6.0f; }
static inline float vt_hswish_d(float v) { return v < -3.0f ? 0.0f : v <= 3.0f ? v / 3.0f + 0.5f : 1.0f; }

/* The activation a BatchNorm applies after itself (act: VT_RELU, VT_RELU6, VT_HARDSWISH of vt_unary_kind, else
 * none) and its derivative, at the normalised value z (norm.c, bnconv.c). */
static inline float vt_norm_act_f(int act, float z) {
    switch (act) {
    case VT_RELU: return vt_relu_f(z);
    case VT_RELU6: return vt_relu6_f(z);
    case VT_HARDSWISH: return vt_hswish_f(z);
    default: return z;
    }
}

static inline float vt_norm_act_d(int act, float z) {
    switch (act) {
    case VT_RELU: return vt_relu_d(z);
    case VT_RELU6: return vt_relu6_d(z);
    case VT_HARDSWISH: return vt_hswish_d(z);
    default: return 1.0f;
    }
}

#endif
