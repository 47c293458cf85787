/* An 8×8 float transpose through AVX registers, shared by the permute op (shape.c) and GroupMixFormer's output
 * merge (gmamerge.c). */
#ifndef VITC_TRANSPOSE8_H
#define VITC_TRANSPOSE8_H

#include <stddef.h>
#if defined(__AVX__)
#include <immintrin.h>

/* dst[j·ds + i] = (add: +=) src[i·ss + j] for i, j < 8: eight row loads, the classic unpack / shuffle / lane-swap
 * transpose in registers, eight row stores. The scalar tile loop read one strided float per element (gcc made a
 * two-wide insert-and-store of it): GroupMixFormer-S's (16, 196, 3, 5, 64) -> (3, 16, 1, 64, 196) segment permute
 * took 8 ms per forward for 0.6 M floats. */
static inline void transpose8(const float *src, ptrdiff_t ss, float *dst, ptrdiff_t ds, int add) {
    const __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ss), r2 = _mm256_loadu_ps(src + 2 * ss),
                 r3 = _mm256_loadu_ps(src + 3 * ss), r4 = _mm256_loadu_ps(src + 4 * ss),
                 r5 = _mm256_loadu_ps(src + 5 * ss), r6 = _mm256_loadu_ps(src + 6 * ss),
                 r7 = _mm256_loadu_ps(src + 7 * ss);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    __m256 c[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                   _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                   _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                   _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
    for (int j = 0; j < 8; j++) {
        float *d = dst + j * ds;
        _mm256_storeu_ps(d, add ? _mm256_add_ps(_mm256_loadu_ps(d), c[j]) : c[j]);
    }
}
#endif

#endif
