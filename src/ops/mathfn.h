/* Vectorisable float math for kernels. glibc's expf/erff are scalar calls (no SIMD without -ffast-math) and cost
 * 10-100 ns per element here, which made GELU and softmax a large share of a ViT step (measured by
 * `vitc bench --profile`); these inline versions vectorise under -O3 and stay within a few ulp (tested in
 * tests/test_ops_attention.c against double-precision libm). */
#ifndef VITC_MATHFN_H
#define VITC_MATHFN_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

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

/* GELU with the exact erf, x·Φ(x); *d receives its derivative Φ(x) + x·φ(x). */
static inline float vt_gelu_fd(float x, float *d) {
    float e, cdf = 0.5f * (1.0f + vt_erf_e(x * 0.70710678118654752f, &e)); /* e = e^(-x²/2) */
    *d = cdf + x * 0.39894228040143268f * e;
    return x * cdf;
}

/* GELU with the exact erf, x·Φ(x). */
static inline float vt_gelu_f(float x) { return 0.5f * x * (1.0f + vt_erff(x * 0.70710678118654752f)); }

/* dGELU/dx = Φ(x) + x·φ(x). */
static inline float vt_gelu_grad_f(float x) {
    float d;
    vt_gelu_fd(x, &d);
    return d;
}

#if defined(__AVX2__) && defined(__FMA__)
/* vt_expf_le0 on eight floats with fused multiply-adds (gcc's -std=c11 rounds a·b + c twice and vectorised the
 * scalar softmax loop 1.8x slower than this, measured on 197-key rows); the same reduction and polynomial, so the
 * results differ from the scalar function by rounding only. max(clamp, x) keeps NaN (maxps returns its second
 * operand when either is NaN). */
static inline __m256 vt_expf_le0_v8(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-87.33654f), x);
    const __m256 sh = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(12582912.0f));
    const __m256 n = _mm256_sub_ps(sh, _mm256_set1_ps(12582912.0f));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n from the rounding shift's low bits (n >= -126: one normal float) */
    const __m256i nb = _mm256_add_epi32(_mm256_castps_si256(sh), _mm256_set1_epi32(127 - 0x4B400000));
    const __m256i e = _mm256_slli_epi32(nb, 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* The sum (or max when mx) of v's eight lanes. */
static inline float vt_hreduce_v8(__m256 v, int mx) {
    __m128 a = _mm256_castps256_ps128(v), b = _mm256_extractf128_ps(v, 1);
    a = mx ? _mm_max_ps(a, b) : _mm_add_ps(a, b);
    b = _mm_movehl_ps(a, a);
    a = mx ? _mm_max_ps(a, b) : _mm_add_ps(a, b);
    b = _mm_shuffle_ps(a, a, 1);
    a = mx ? _mm_max_ss(a, b) : _mm_add_ss(a, b);
    return _mm_cvtss_f32(a);
}
#endif

/* y = softmax(x) over one contiguous row of n values (y may equal x): a max pass, an exponent-and-sum pass and a
 * scaling pass, eight floats at a time with AVX2 + FMA, otherwise loops the compiler vectorises. */
static inline void vt_softmax_row(const float *x, float *y, int n) {
    float mx = x[0], s = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
    if (n >= 8) {
        int j0;
        __m256 m = _mm256_loadu_ps(x);
        for (j0 = 8; j0 + 8 <= n; j0 += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j0));
        mx = vt_hreduce_v8(m, 1);
        for (int j = j0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
        const __m256 vm = _mm256_set1_ps(mx);
        __m256 vs = _mm256_setzero_ps();
        for (j0 = 0; j0 + 8 <= n; j0 += 8) {
            const __m256 e = vt_expf_le0_v8(_mm256_sub_ps(_mm256_loadu_ps(x + j0), vm));
            _mm256_storeu_ps(y + j0, e);
            vs = _mm256_add_ps(vs, e);
        }
        s = vt_hreduce_v8(vs, 0);
        for (int j = j0; j < n; j++) {
            y[j] = vt_expf_le0(x[j] - mx);
            s += y[j];
        }
        const float inv = 1.0f / s;
        const __m256 vi = _mm256_set1_ps(inv);
        for (j0 = 0; j0 + 8 <= n; j0 += 8) _mm256_storeu_ps(y + j0, _mm256_mul_ps(_mm256_loadu_ps(y + j0), vi));
        for (int j = j0; j < n; j++) y[j] *= inv;
        return;
    }
#endif
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < n; j++) mx = x[j] > mx ? x[j] : mx;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < n; j++) {
        y[j] = vt_expf_le0(x[j] - mx);
        s += y[j];
    }
    const float inv = 1.0f / s;
#pragma omp simd
    for (int j = 0; j < n; j++) y[j] *= inv;
}

/* ReLU, ReLU6, Hardswish and their derivatives (the factor dy is multiplied by), shared by the activation op and the
 * BatchNorm that applies one after itself (norm.c), so both give the same floats. */
static inline float vt_relu_f(float v) { return v > 0.0f ? v : 0.0f; }
static inline float vt_relu_d(float v) { return v > 0.0f ? 1.0f : 0.0f; }
static inline float vt_relu6_f(float v) { return v > 0.0f ? (v < 6.0f ? v : 6.0f) : 0.0f; }
static inline float vt_relu6_d(float v) { return v > 0.0f && v < 6.0f ? 1.0f : 0.0f; }
static inline float vt_hswish_f(float v) { return v <= -3.0f ? 0.0f : v >= 3.0f ? v : v * (v + 3.0f) / 6.0f; }
static inline float vt_hswish_d(float v) { return v < -3.0f ? 0.0f : v <= 3.0f ? v / 3.0f + 0.5f : 1.0f; }

#endif
