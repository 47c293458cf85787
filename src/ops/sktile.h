/* The small-key attention tiles of attention.c (sk_tile), shared with hattn.c: AVX-512 only. */
#ifndef VT_SKTILE_H
#define VT_SKTILE_H

#include <stddef.h>

#include "mathfn.h"

#if defined(__AVX512F__)
#define VT_SK_MAX 112 /* the tiles serve at most this many keys */
#define VT_SK_NV 7    /* key vectors of VT_SK_MAX */
#define VT_SK_ROWS 6  /* query rows of a tile at most */

/* The softmax of a register tile's rows from their maxima mx: x[r][v] = e^(x[r][v] − mx[r]) (lanes past the keys
 * must hold −inf: they come out 0 to float precision), then rows r < rows normalised into out + r·M (lanes lm[v]).
 * R (<= VT_SK_ROWS) and NV (<= VT_SK_NV) are constants where inlined. */
static inline __attribute__((always_inline)) void vt_sk_softmax_store(__m512 x[][VT_SK_NV], const float *mx, int rows,
                                                                      const __mmask16 *lm, float *out, int M,
                                                                      const int R, const int NV) {
    __m512 sum[VT_SK_ROWS];
    float inv[VT_SK_ROWS];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        const __m512 m = _mm512_set1_ps(mx[r]);
        sum[r] = _mm512_setzero_ps();
#pragma GCC unroll 7
        for (int v = 0; v < NV; v++) {
            x[r][v] = vt_vexpf_le0(_mm512_sub_ps(x[r][v], m));
            sum[r] = _mm512_add_ps(sum[r], x[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) inv[r] = 1.0f / _mm512_reduce_add_ps(sum[r]);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        if (r >= rows) break;
        const __m512 iv = _mm512_set1_ps(inv[r]);
#pragma GCC unroll 7
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(out + (size_t)r * M + 16 * v, lm[v], _mm512_mul_ps(x[r][v], iv));
    }
}

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
