/* Activations to int8 (llama.cpp's Q8_0 / Q8_K rounding), shared by w4a8.c and kquant.c: the largest magnitude of a
 * block, then each value times 127 / that, rounded half to even and clamped to +-127, with the sums of each 16.
 * AVX2 where the compiler's target has it (every path of both files that has SIMD: their AVX-512 builds too), else
 * plain C; the same bits either way. */
#ifndef AIO_Q8_H
#define AIO_Q8_H

#include <math.h>
#include <stdint.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define Q8_AVX2 1
#include <immintrin.h>
#endif

/* max |x[i]| over x[0 .. n), n a multiple of 8: fmaxf's answer (max_ps(a, m) is a > m ? a : m, so a NaN is
 * skipped as fmaxf skips it) */
static inline float q8_abs_max(const float *x, int n) {
#if defined(Q8_AVX2)
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
#else
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    return amax;
#endif
}

/* x[0 .. n) (n a multiple of 32) times inv, rounded half to even, clamped to +-127, into q; the sum of each 16 in
 * sums[0 .. n / 16). The same values as nearbyintf(x[i] * inv). */
static inline void q8_round(const float *x, int n, float inv, int8_t *q, int *sums) {
#if defined(Q8_AVX2)
    const __m256 vi = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (int i = 0; i < n; i += 32) {
        __m256i v[4];
        for (int k = 0; k < 4; k++) {
            const __m256 f = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), vi),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v[k] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(f), lo), hi);
        }
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        _mm256_storeu_si256((__m256i *)(q + i),
                            _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        for (int h = 0; h < 2; h++) {
            const __m256i s = _mm256_add_epi32(v[2 * h], v[2 * h + 1]);
            __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
            sums[i / 16 + h] = _mm_cvtsi128_si32(t);
        }
    }
#else
    for (int s = 0; s < n / 16; s++) {
        int sum = 0;
        for (int i = 16 * s; i < 16 * s + 16; i++) {
            int v = (int)nearbyintf(x[i] * inv);
            v = v > 127 ? 127 : (v < -127 ? -127 : v);
            q[i] = (int8_t)v;
            sum += v;
        }
        sums[s] = sum;
    }
#endif
}

#endif
