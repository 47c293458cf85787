/* vitc's own GEMM kernel for products with 64 output columns on AVX-512 (rule 10 at vt_gemm_choose, gemm.c). */
#ifndef VITC_GEMM64_H
#define VITC_GEMM64_H

#if defined(__AVX512F__)
#define VT_GEMM64 1 /* the kernel is built (the compiler targets AVX-512) */
#else
#define VT_GEMM64 0
#endif

/* Row-major C (M×64) = alpha·op(A)·op(B) + beta·C as vt_gemm with N = 64, on `threads` threads (1: the caller's
 * thread, as inside a parallel region); ta = 1 with tb = 1 is not handled. Returns 0, or -1 with C untouched (not
 * built, that transpose pair, or out of memory for Bᵀ's packed copy or the per-thread partial sums). */
int vt_gemm64(int threads, int ta, int tb, int M, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc);

#endif
