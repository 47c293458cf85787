/* vitc's kernel for GEMMs with 64 output columns (rule 10 at vt_gemm_choose): the hierarchical hosts' stage-1
 * linears at C = 64 (PVT, PVTv2, CSwin: fc2's forward, every dX into 64 features, dW of layers reading 64) and
 * 64-channel heads' P·V. Why not a library: oneDNN 2.6 and OpenBLAS 0.3.21 pack A per call and block for square-ish
 * products; with 64 columns the packing pass over A (e.g. 50,176 × 512 floats, 100 MB) is not repaid. Here a 6 × 64
 * tile of C lives in 24 zmm registers, A is read in place (one broadcast per row and k) and B's 64-float rows
 * (K × 64, from L1/L2) are the only operand in vectors: 1.1-1.5x oneDNN on those shapes (gemm.c, rule 10). */
#include "gemm64.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if VT_GEMM64
#include <immintrin.h>

#define ROWS 6    /* C rows per register tile (6 × 4 accumulators + 4 B vectors + 1 broadcast of 32 registers) */
#define KCHUNK 128 /* Aᵀ·B: rows of A and B per pass over the tiles, B's 32 KiB staying in L1 */

/* C[r][0:64] = alpha · Σ_k A(r, k) · B[k][0:64] + beta · C[r][0:64] for r < rows (<= ROWS), A(r, k) = A[r·rs + k·ks]
 * (rs = lda, ks = 1 for A; rs = 1, ks = lda for Aᵀ). Rows past `rows` repeat the last one and are not stored. Not
 * inlined: the caller's loop invariants would take registers the tile needs (gcc spilled a B vector). */
__attribute__((noinline)) static void tile(int rows, int K, const float *A, size_t rs, size_t ks, const float *B,
                                           size_t ldb, float *C, size_t ldc, float alpha, float beta) {
    const float *a[ROWS];
    for (int r = 0; r < ROWS; r++) a[r] = A + (size_t)(r < rows ? r : rows - 1) * rs;
#define ZERO(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0;
    ZERO(0) ZERO(1) ZERO(2) ZERO(3) ZERO(4) ZERO(5)
#undef ZERO
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        const size_t o = (size_t)k * ks;
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32),
                     b3 = _mm512_loadu_ps(b + 48);
#define FMA(r)                                                                                                         \
    {                                                                                                                  \
        const __m512 x = _mm512_set1_ps(a[r][o]);                                                                      \
        c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0), c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1);                          \
        c##r##2 = _mm512_fmadd_ps(x, b2, c##r##2), c##r##3 = _mm512_fmadd_ps(x, b3, c##r##3);                          \
    }
        FMA(0) FMA(1) FMA(2) FMA(3) FMA(4) FMA(5)
#undef FMA
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#define PUT(p, c)                                                                                                      \
    _mm512_storeu_ps(p, beta == 0.0f ? _mm512_mul_ps(va, c)                                                            \
                                     : _mm512_fmadd_ps(va, c, _mm512_mul_ps(vb, _mm512_loadu_ps(p))));
#define ROW(r)                                                                                                         \
    if (r < rows) {                                                                                                    \
        float *p = C + (size_t)r * ldc;                                                                                \
        PUT(p, c##r##0) PUT(p + 16, c##r##1) PUT(p + 32, c##r##2) PUT(p + 48, c##r##3)                                 \
    }
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
#undef PUT
}

/* C = alpha·A·B + beta·C, B (K × 64) dense or strided: strips of ROWS rows over the threads. */
static void rows_ab(int threads, int M, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc) {
    const int strips = (M + ROWS - 1) / ROWS;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int s = 0; s < strips; s++) {
        const int r0 = s * ROWS, rows = M - r0 < ROWS ? M - r0 : ROWS;
        tile(rows, K, A + (size_t)r0 * lda, (size_t)lda, 1, B, (size_t)ldb, C + (size_t)r0 * ldc, (size_t)ldc, alpha,
             beta);
    }
}

/* C = alpha·Aᵀ·B + beta·C (A: K × M, B: K × 64): each thread sums its share of the K rows into its own M × 64
 * partial (KCHUNK rows at a time over every tile), then the partials are added into C. */
static int rows_atb(int threads, int M, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc) {
    float *part = aligned_alloc(64, sizeof(float) * (size_t)threads * M * 64);
    if (!part) return -1;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        const int k0 = (int)((long long)K * t / T), k1 = (int)((long long)K * (t + 1) / T);
        float *D = part + (size_t)t * M * 64;
        if (k1 == k0) memset(D, 0, sizeof(float) * (size_t)M * 64);
        for (int kc = k0; kc < k1; kc += KCHUNK) {
            const int kn = k1 - kc < KCHUNK ? k1 - kc : KCHUNK;
            for (int m = 0; m < M; m += ROWS)
                tile(M - m < ROWS ? M - m : ROWS, kn, A + (size_t)kc * lda + m, 1, (size_t)lda, B + (size_t)kc * ldb,
                     (size_t)ldb, D + (size_t)m * 64, 64, 1.0f, kc == k0 ? 0.0f : 1.0f);
        }
#pragma omp barrier
#pragma omp for schedule(static)
        for (int m = 0; m < M; m++) {
            float *c = C + (size_t)m * ldc;
            for (int n = 0; n < 64; n++) {
                float s = 0.0f;
                for (int q = 0; q < T; q++) s += part[((size_t)q * M + m) * 64 + n];
                c[n] = beta == 0.0f ? alpha * s : alpha * s + beta * c[n];
            }
        }
    }
    free(part);
    return 0;
}

int vt_gemm64(int threads, int ta, int tb, int M, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc) {
    if (ta) return tb ? -1 : rows_atb(threads, M, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (!tb) {
        rows_ab(threads, M, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return 0;
    }
    float *bt = aligned_alloc(64, sizeof(float) * (size_t)K * 64); /* Bᵀ (K × 64): B's 64 rows as columns */
    if (!bt) return -1;
    for (int n = 0; n < 64; n++)
        for (int k = 0; k < K; k++) bt[(size_t)k * 64 + n] = B[(size_t)n * ldb + k];
    rows_ab(threads, M, K, alpha, A, lda, bt, 64, beta, C, ldc);
    free(bt);
    return 0;
}

#else

int vt_gemm64(int threads, int ta, int tb, int M, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc) {
    (void)threads, (void)ta, (void)tb, (void)M, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb;
    (void)beta, (void)C, (void)ldc;
    return -1;
}

#endif
