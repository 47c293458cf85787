/* The small-key attention tiles of attention.c (sk_tile), shared with hattn.c: AVX-512 only. */
#ifndef VT_SKTILE_H
#define VT_SKTILE_H

#include <stddef.h>

#if defined(__AVX512F__)
#define VT_SK_MAX 112 /* the tiles serve at most this many keys */

/* Kt (dh × Mv, Mv = M rounded up to 16) = the first dh channels of the M rows of K (row stride ldk), transposed;
 * columns M to Mv zeroed (the tiles' lanes past M read them). */
void vt_keys_t(const float *K, int ldk, int M, int dh, float *Kt);

/* X = A·Ktᵀ for N rows of A (lda apart, dh deep; Kt from vt_keys_t, M <= VT_SK_MAX keys), by register tiles:
 * mode 0: out = softmax(scale·X + kn + bias + mask) (each NULL when absent); mode 1 (softmax backward, X = dP):
 * out = P ⊙ (X − Σⱼ X⊙P), also added to db unless NULL. Rows M floats apart; rows_par: tiles on every thread. */
void vt_sk_rows(const float *A, size_t lda, const float *Kt, int N, int M, int dh, float scale, int mode,
                const float *kn, const float *bias, const float *mask, const float *P, float *out, float *db,
                int rows_par);
#endif

#endif
