/* Weight-only INT4 / INT8 matmul for CPU: activations quantized per row to int8 blocks of 32 (llama.cpp's Q8_0:
 * d = max|x| / 127, q = round-half-even(x / d)), then integer dot products against the weight's blocks.
 *
 * Weights come in blocks of 32 input features, one fp16 scale per block (and an fp16 min for INT4):
 *   INT4: value = code * scale + min, codes 0..15 (GGUF Q4_1's meaning; Q4_0 is min = -8 * scale);
 *   INT8: value = q * scale, q signed (GGUF Q8_0's meaning).
 * Per block b of an activation row: dot = scale_w * d * sum(code * q) + min_w * d * sum(q).
 * Each weight row is one record, so a matmul streams the matrix front to back: INT4 [K/2 bytes of codes][nb fp16
 * scales][nb fp16 mins], INT8 [K int8][nb fp16 scales], nb = K / 32.
 *
 * Layout: blocks go in pairs. Within a pair the 64 elements are interleaved in 4-byte granules, granule i holding
 * elements 4 * (i / 2) .. + 3 of block (i % 2) of the pair, so the int32 lanes of a dot product alternate between
 * the two blocks and both blocks' scales come from one 64-bit broadcast. An INT4 pair is 32 bytes: byte r holds
 * element r (low nibble) and element r + 32 (high nibble) of the interleaved order. An odd last block keeps its
 * natural order (INT4: byte j holds elements j and j + 16). tiers/quantization/cpu_native.py packs the same way.
 *
 * Built at first use for the machine it runs on (-march=native): the AVX-512 VNNI path, the AVX2 path or plain C,
 * whichever the compiler's target allows. Each output element depends only on its own input row and weight row,
 * in a fixed order, so a row's result does not depend on the batch it came in.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kept_block.h"
#include "q8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__)
#define AIO_ISA "avx512vnni"
#define AIO_AVX512 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define AIO_ISA "avx2"
#define AIO_AVX2 1
#include <immintrin.h>
#else
#define AIO_ISA "scalar"
#endif

#define QK 32
#ifndef ROW_TILE
#define ROW_TILE 4
#endif
#ifndef N_TILE
#define N_TILE 4
#endif
#define N_CHUNK 16
#ifndef PREFETCH_TILES
#define PREFETCH_TILES 2
#endif

const char *aio_isa(void) { return AIO_ISA; }

/* bytes of one weight row record */
static inline int64_t row_bytes(int64_t K, int is_w8) { return is_w8 ? K + 2 * (K / QK) : K / 2 + 4 * (K / QK); }

static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in float */
        const float f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    const uint32_t bits = sign | (exp == 0x1F ? 0x7F800000u | (mant << 13) : ((exp + 112) << 23) | (mant << 13));
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* the element (in natural order within the pair) at interleaved position pos, 0 <= pos < 64 */
static inline int pair_source(int pos) { return ((pos >> 2) & 1) * QK + 4 * (pos >> 3) + (pos & 3); }

typedef struct {
    int8_t *q;    /* [M, K], pairs interleaved */
    float *d;     /* [M, nb] block scales */
    float *dsum;  /* [M, nb] d * sum(q) */
    void *block;  /* where the three are (kept_arrays) */
    int owned;    /* the block is this call's to free */
} quantized_rows;

/* one block of QK activations -> int8 codes in natural order, its scale d and d * sum(codes) */
static inline void quantize_block(const float *xb, int8_t *qb, float *d, float *dsum) {
    const float amax = q8_abs_max(xb, QK);
    int sums[QK / 16];
    q8_round(xb, QK, amax > 0.0f ? 127.0f / amax : 0.0f, qb, sums);
    *d = amax / 127.0f;
    *dsum = *d * (float)(sums[0] + sums[1]);
}

/* two blocks' codes (natural order, 2 * QK bytes) -> the records' interleaved order */
static inline void interleave_pair(const int8_t *nat, int8_t *q) {
#if defined(AIO_AVX512) || defined(AIO_AVX2)
    /* runs of 4 alternate between the blocks: 32-bit unpacks, then the 128-bit lanes put in order */
    const __m256i a = _mm256_loadu_si256((const __m256i *)nat), b = _mm256_loadu_si256((const __m256i *)(nat + QK));
    const __m256i lo = _mm256_unpacklo_epi32(a, b), hi = _mm256_unpackhi_epi32(a, b);
    _mm256_storeu_si256((__m256i *)q, _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256((__m256i *)(q + QK), _mm256_permute2x128_si256(lo, hi, 0x31));
#else
    for (int pos = 0; pos < 2 * QK; pos++) q[pos] = nat[pair_source(pos)];
#endif
}

static void quantize_row(const float *x, int64_t K, int8_t *q, float *d, float *dsum) {
    const int64_t nb = K / QK;
    int8_t nat[2 * QK];
    for (int64_t b = 0; b < nb; b++) {
        quantize_block(x + b * QK, nat + (b & 1) * QK, d + b, dsum + b);
        if (b & 1)
            interleave_pair(nat, q + (b - 1) * QK);
        else if (b == nb - 1)
            memcpy(q + b * QK, nat, QK);
    }
}

static int quantize_rows(const float *x, int64_t M, int64_t K, int64_t ldx, int nthreads, quantized_rows *r) {
    const int64_t nb = K / QK, d_bytes = (int64_t)sizeof(float) * (M * nb + 1);
    void **const arrays[3] = {(void **)&r->q, (void **)&r->d, (void **)&r->dsum};
    const int64_t bytes[3] = {M * K, d_bytes, d_bytes};
    r->block = kept_arrays(3, arrays, bytes, &r->owned);
    if (!r->block) return -1;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (M * K >= 65536)
    for (int64_t m = 0; m < M; m++) quantize_row(x + m * ldx, K, r->q + m * K, r->d + m * nb, r->dsum + m * nb);
    return 0;
}

static void free_rows(quantized_rows *r) {
    if (r->owned) free(r->block);
}

/* The odd last block of a row (natural order), plain C: rare (K / 32 odd), so kept simple. */
static float tail_dot(const int8_t *q, const uint8_t *w, int is_w8) {
    int isum = 0;
    if (is_w8)
        for (int i = 0; i < QK; i++) isum += (int)((const int8_t *)w)[i] * (int)q[i];
    else
        for (int j = 0; j < QK / 2; j++) isum += (w[j] & 0x0F) * q[j] + (w[j] >> 4) * q[j + QK / 2];
    return (float)isum;
}

/* the odd last block's share of one output (scale and, for INT4, min included) */
static inline float tail_share(const quantized_rows *a, int64_t m, int64_t K, const uint8_t *row, int is_w8) {
    const int64_t nb = K / QK, b = nb - 1;
    const uint16_t *scales = (const uint16_t *)(row + (is_w8 ? K : K / 2));
    float s = tail_dot(a->q + m * K + b * QK, row + b * (is_w8 ? QK : QK / 2), is_w8) * half_to_float(scales[b])
              * a->d[m * nb + b];
    if (!is_w8) s += half_to_float(scales[nb + b]) * a->dsum[m * nb + b];
    return s;
}

/* ---------------------------------------------------------------- AVX-512 VNNI */
/* F(args..., r) with r the run-time row count R as a constant (1, 2, 3 or ROW_TILE): each tile function is
 * always_inline, so its accumulators stay in registers only where its row count is known at compile time */
#define BY_ROWS(F, ...)                                                                                        \
    switch (R) {                                                                                               \
    case 1: F(__VA_ARGS__, 1); break;                                                                          \
    case 2: F(__VA_ARGS__, 2); break;                                                                          \
    case 3: F(__VA_ARGS__, 3); break;                                                                          \
    default: F(__VA_ARGS__, ROW_TILE); break;                                                                  \
    }

#if defined(AIO_AVX2)
/* rows n0 .. n0 + NT - 1 of the weight, PREFETCH_TILES full tiles ahead, into L2: the hardware prefetcher alone left
 * decode waiting on memory (AVX-512 and AVX2 alike, measured). always_inline: as a call it made the tiles'
 * accumulators leave registers (a third of decode speed, measured) */
static inline __attribute__((always_inline)) void prefetch_rows(const uint8_t *w, int64_t n0, int NT,
                                                                int64_t stride) {
    const char *ahead = (const char *)(w + (n0 + PREFETCH_TILES * N_TILE) * stride);
    for (int64_t off = 0; off < NT * stride; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T1);
}
#endif

#if defined(AIO_AVX512)
/* The lines of rows n0 .. n0 + NT - 1 PREFETCH_TILES tiles ahead, into L2 (the hardware prefetcher alone left decode
 * waiting on memory), issued a quota per pair of blocks: all at once, they filled the core's outstanding misses and
 * the tile waited until they came (1.12-1.23x streamed, 1.2x with the weights in L2, on an Intel Xeon;
 * docs/benchmarks.md). always_inline: the tile's accumulators stay in registers */
typedef struct {
    const char *ahead;
    int64_t lines, quota, issued;
} paced_rows;

static inline __attribute__((always_inline)) paced_rows paced_start(const uint8_t *w, int64_t n0, int NT,
                                                                    int64_t stride, int64_t pairs) {
    const int64_t lines = (NT * stride + 63) / 64;
    return (paced_rows){(const char *)(w + (n0 + PREFETCH_TILES * N_TILE) * stride), lines,
                        pairs ? (lines + pairs - 1) / pairs : lines, 0};
}

/* the quota of the step before pair p; with p = pairs (after the last), every line left (a row of one block has
 * no pairs) */
static inline __attribute__((always_inline)) void paced_step(paced_rows *pr, int64_t p) {
    const int64_t upto = (p + 1) * pr->quota < pr->lines ? (p + 1) * pr->quota : pr->lines;
    for (; pr->issued < upto; pr->issued++) _mm_prefetch(pr->ahead + 64 * pr->issued, _MM_HINT_T1);
}

static inline __m512 bcast_pair(const float *s) { return _mm512_castpd_ps(_mm512_set1_pd(*(const double *)s)); }

/* two fp16 -> [s0, s1, s0, s1, ...] */
static inline __m512 bcast_half_pair(const uint16_t *s) {
    return _mm512_cvtph_ps(_mm256_set1_epi32(*(const int32_t *)s));
}

/* A tile of NT weight rows x R activation rows; NT, R and W8 are constants at each call site (always_inline), so
 * the accumulators stay in registers. INT8 weights are signed: their sign moves onto the activation, their
 * magnitude is the unsigned operand of vpdpbusd. */
static inline __attribute__((always_inline)) void tile(const quantized_rows *a, int64_t m0, int64_t K,
        const uint8_t *w, int64_t n0, float *out, int64_t ldo, const int W8, const int NT, const int R) {
    const int64_t nb = K / QK, pairs = nb / 2, stride = row_bytes(K, W8);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i high_half = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    __m512 acc[N_TILE][ROW_TILE];
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < R; r++) acc[t][r] = _mm512_setzero_ps();
    paced_rows ahead = paced_start(w, n0, NT, stride, pairs);
    for (int64_t p = 0; p < pairs; p++) {
        paced_step(&ahead, p);
        __m512i qa[ROW_TILE];
        __m512 sa[ROW_TILE];
        for (int r = 0; r < R; r++) {
            qa[r] = _mm512_loadu_si512((const void *)(a->q + (m0 + r) * K + p * 2 * QK));
            sa[r] = bcast_pair(a->d + (m0 + r) * nb + 2 * p);
        }
        for (int t = 0; t < NT; t++) {
            const uint8_t *row = w + (n0 + t) * stride;
            const __m512 sw = bcast_half_pair((const uint16_t *)(row + (W8 ? K : K / 2)) + 2 * p);
            if (W8) {
                const __m512i wv = _mm512_loadu_si512((const void *)(row + p * 2 * QK));
                const __mmask64 neg = _mm512_movepi8_mask(wv);
                const __m512i wabs = _mm512_abs_epi8(wv);
                for (int r = 0; r < R; r++) {
                    __m512i q = _mm512_mask_sub_epi8(qa[r], neg, _mm512_setzero_si512(), qa[r]);
                    __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs, q);
                    acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sw, sa[r]), acc[t][r]);
                }
            } else {
                /* the 32 bytes in both halves (a load-port broadcast), the upper half shifted to its high nibbles */
                const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(row + p * QK)));
                const __m512i wv = _mm512_and_si512(_mm512_srlv_epi64(raw, high_half), m4);
                for (int r = 0; r < R; r++) {
                    __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, qa[r]);
                    acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sw, sa[r]), acc[t][r]);
                }
            }
        }
    }
    paced_step(&ahead, pairs);
    if (!W8) /* the mins: sum over blocks of min_w * d * sum(q), 16 blocks per step, into the same lanes */
        for (int t = 0; t < NT; t++) {
            const uint16_t *mins = (const uint16_t *)(w + (n0 + t) * stride + K / 2) + nb;
            for (int64_t b = 0; b < 2 * pairs; b += 16) {
                const __mmask16 k = 2 * pairs - b >= 16 ? 0xFFFF : (__mmask16)((1u << (2 * pairs - b)) - 1);
                const __m512 mv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, mins + b));
                for (int r = 0; r < R; r++)
                    acc[t][r] = _mm512_fmadd_ps(mv, _mm512_maskz_loadu_ps(k, a->dsum + (m0 + r) * nb + b), acc[t][r]);
            }
        }
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < R; r++) {
            float s = _mm512_reduce_add_ps(acc[t][r]);
            if (nb & 1) s += tail_share(a, m0 + r, K, w + (n0 + t) * stride, W8);
            out[(m0 + r) * ldo + n0 + t] = s;
        }
}

#define ROW_CASES(W8, NT) BY_ROWS(tile, a, m0, K, w, n0, out, ldo, W8, NT)

static void dot_rows(const quantized_rows *a, int64_t m0, int R, int64_t K, const uint8_t *w, int is_w8,
                     float *out, int64_t ldo, int64_t n0, int NT) {
    if (is_w8) {
        if (NT == N_TILE) { ROW_CASES(1, N_TILE) } else { ROW_CASES(1, 1) }
    } else {
        if (NT == N_TILE) { ROW_CASES(0, N_TILE) } else { ROW_CASES(0, 1) }
    }
}

/* ---------------------------------------------------------------- AVX2 */
#elif defined(AIO_AVX2)
static inline float hsum256(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

static inline __m256 bcast_pair(const float *s) { return _mm256_castpd_ps(_mm256_set1_pd(*(const double *)s)); }

static inline __m256 bcast_half_pair(const uint16_t *s) {
    return _mm256_cvtph_ps(_mm_set1_epi32(*(const int32_t *)s));
}

/* u8 x s8 -> 8 int32 sums; the int16 pair sums cannot saturate for u <= 128, |s| <= 127 */
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

static inline __m256i dot_s8s8(__m256i w, __m256i q) {
    return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}

/* NT weight rows for R activation rows; W8 and R are constants at each call site (always_inline, BY_ROWS), so
 * the accumulators stay in registers: as one function with a run-time R and W8 the rows of SmolLM2 (576 wide) read
 * 4-8 GB/s on an AVX2 AMD EPYC. INT4: the two pmaddubsw of a pair add up in int16 (codes <= 15, |q| <= 127: at most
 * 7,620) before one pmaddwd; INT8's pair sums (up to 32,258 after the sign moves) are widened one by one. */
static inline __attribute__((always_inline)) void rows_avx2(const quantized_rows *a, int64_t m0, int64_t K,
        const uint8_t *w, const int W8, float *out, int64_t ldo, int64_t n0, int NT, const int R) {
    const int64_t nb = K / QK, pairs = nb / 2, stride = row_bytes(K, W8);
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (int t = 0; t < NT; t++) {
        const uint8_t *row = w + (n0 + t) * stride;
        const uint16_t *scales = (const uint16_t *)(row + (W8 ? K : K / 2));
        prefetch_rows(w, n0 + t, 1, stride);
        __m256 acc[ROW_TILE];
        for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t p = 0; p < pairs; p++) {
            const __m256 sw = bcast_half_pair(scales + 2 * p);
            __m256i w0, w1;
            if (W8) {
                w0 = _mm256_loadu_si256((const __m256i *)(row + p * 2 * QK));
                w1 = _mm256_loadu_si256((const __m256i *)(row + p * 2 * QK + QK));
            } else {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(row + p * QK));
                w0 = _mm256_and_si256(raw, m4);
                w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            }
            for (int r = 0; r < R; r++) {
                const int8_t *q = a->q + (m0 + r) * K + p * 2 * QK;
                const __m256i q0 = _mm256_loadu_si256((const __m256i *)q);
                const __m256i q1 = _mm256_loadu_si256((const __m256i *)(q + QK));
                const __m256i isum =
                    W8 ? _mm256_add_epi32(dot_s8s8(w0, q0), dot_s8s8(w1, q1))
                       : _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w0, q0), _mm256_maddubs_epi16(w1, q1)),
                                           ones);
                const __m256 sa = bcast_pair(a->d + (m0 + r) * nb + 2 * p);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw, sa), acc[r]);
            }
        }
        if (!W8)
            for (int64_t b = 0; b + 8 <= 2 * pairs; b += 8) {
                const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + nb + b)));
                for (int r = 0; r < R; r++)
                    acc[r] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(a->dsum + (m0 + r) * nb + b), acc[r]);
            }
        for (int r = 0; r < R; r++) {
            const int64_t m = m0 + r;
            float s = hsum256(acc[r]);
            if (!W8)
                for (int64_t b = (2 * pairs / 8) * 8; b < 2 * pairs; b++)
                    s += half_to_float(scales[nb + b]) * a->dsum[m * nb + b];
            if (nb & 1) s += tail_share(a, m, K, row, W8);
            out[m * ldo + n0 + t] = s;
        }
    }
}

static void dot_rows(const quantized_rows *a, int64_t m0, int R, int64_t K, const uint8_t *w, int is_w8,
                     float *out, int64_t ldo, int64_t n0, int NT) {
    if (is_w8) {
        BY_ROWS(rows_avx2, a, m0, K, w, 1, out, ldo, n0, NT)
    } else {
        BY_ROWS(rows_avx2, a, m0, K, w, 0, out, ldo, n0, NT)
    }
}

/* ---------------------------------------------------------------- plain C */
#else
static void dot_rows(const quantized_rows *a, int64_t m0, int R, int64_t K, const uint8_t *w, int is_w8,
                     float *out, int64_t ldo, int64_t n0, int NT) {
    const int64_t nb = K / QK, stride = row_bytes(K, is_w8);
    for (int t = 0; t < NT; t++) {
        const uint8_t *row = w + (n0 + t) * stride;
        const uint16_t *scales = (const uint16_t *)(row + (is_w8 ? K : K / 2));
        for (int r = 0; r < R; r++) {
            const int64_t m = m0 + r;
            float s = 0.0f;
            for (int64_t b = 0; b + 1 < nb; b += 2) {
                const int8_t *q = a->q + m * K + b * QK;
                int isum[2] = {0, 0};
                for (int pos = 0; pos < 2 * QK; pos++) {
                    int code;
                    if (is_w8) {
                        code = ((const int8_t *)row)[b * QK + pos];
                    } else {
                        const uint8_t byte = row[b * (QK / 2) + (pos & (QK - 1))];
                        code = pos < QK ? (byte & 0x0F) : (byte >> 4);
                    }
                    isum[(pos >> 2) & 1] += code * q[pos];
                }
                for (int i = 0; i < 2; i++) {
                    s += (float)isum[i] * (half_to_float(scales[b + i]) * a->d[m * nb + b + i]);
                    if (!is_w8) s += half_to_float(scales[nb + b + i]) * a->dsum[m * nb + b + i];
                }
            }
            if (nb & 1) s += tail_share(a, m, K, row, is_w8);
            out[m * ldo + n0 + t] = s;
        }
    }
}
#endif

/* ---------------------------------------------------------------- INT8 weights, float32 activations */
/* For the output projection (lm_head), whose input precision decides the argmax: the same INT8 row records, the
 * activations kept in float32 (permuted once into the records' interleaved order). */
static void interleave_row(const float *x, int64_t K, float *out) {
    const int64_t pairs = K / QK / 2;
    for (int64_t p = 0; p < pairs; p++)
        for (int pos = 0; pos < 2 * QK; pos++) out[p * 2 * QK + pos] = x[p * 2 * QK + pair_source(pos)];
    for (int64_t i = pairs * 2 * QK; i < K; i++) out[i] = x[i];
}

/* the odd last block's share of one output: `row` a record, `x` its activations (the last block is not interleaved) */
static inline float tail_share_w8f(const uint8_t *row, const float *x, int64_t K) {
    const int64_t b = K / QK - 1;
    const int8_t *wb = (const int8_t *)row + b * QK;
    float part = 0.0f;
    for (int i = 0; i < QK; i++) part += (float)wb[i] * x[b * QK + i];
    return part * half_to_float(((const uint16_t *)(row + K))[b]);
}

#if defined(AIO_AVX512)
static inline __attribute__((always_inline)) void tile_w8f(const float *xs, int64_t m0, int64_t K,
        const uint8_t *w, int64_t n0, float *out, int64_t ldo, const int NT, const int R) {
    const int64_t nb = K / QK, pairs = nb / 2, stride = row_bytes(K, 1);
    /* lanes of a 16-float vector of the interleaved order: granules of 4 alternate between the pair's blocks */
    const __m512i pattern = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc[N_TILE][ROW_TILE];
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < R; r++) acc[t][r] = _mm512_setzero_ps();
    paced_rows ahead = paced_start(w, n0, NT, stride, pairs);
    for (int64_t p = 0; p < pairs; p++) {
        paced_step(&ahead, p);
        for (int t = 0; t < NT; t++) {
            const uint8_t *row = w + (n0 + t) * stride;
            const __m512 sw = _mm512_permutexvar_ps(pattern, bcast_half_pair((const uint16_t *)(row + K) + 2 * p));
            __m512 wf[4];
            for (int j = 0; j < 4; j++)
                wf[j] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                    _mm_loadu_si128((const __m128i *)(row + p * 2 * QK + 16 * j))));
            for (int r = 0; r < R; r++) {
                const float *x = xs + (m0 + r) * K + p * 2 * QK;
                __m512 sum = _mm512_mul_ps(wf[0], _mm512_loadu_ps(x));
                for (int j = 1; j < 4; j++) sum = _mm512_fmadd_ps(wf[j], _mm512_loadu_ps(x + 16 * j), sum);
                acc[t][r] = _mm512_fmadd_ps(sum, sw, acc[t][r]);
            }
        }
    }
    paced_step(&ahead, pairs);
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < R; r++) {
            float s = _mm512_reduce_add_ps(acc[t][r]);
            if (nb & 1) s += tail_share_w8f(w + (n0 + t) * stride, xs + (m0 + r) * K, K);
            out[(m0 + r) * ldo + n0 + t] = s;
        }
}

#define W8F_ROWS(NT) BY_ROWS(tile_w8f, xs, m0, K, w, n0, out, ldo, NT)

static void dot_rows_w8f(const float *xs, int64_t m0, int R, int64_t K, const uint8_t *w, float *out, int64_t ldo,
                         int64_t n0, int NT) {
    if (NT == N_TILE) { W8F_ROWS(N_TILE) } else { W8F_ROWS(1) }
}
#elif defined(AIO_AVX2)
/* R a constant at each call site (BY_ROWS), as rows_avx2's */
static inline __attribute__((always_inline)) void rows_w8f_avx2(const float *xs, int64_t m0, int64_t K,
        const uint8_t *w, float *out, int64_t ldo, int64_t n0, int NT, const int R) {
    const int64_t nb = K / QK, pairs = nb / 2, stride = row_bytes(K, 1);
    const __m256i pair_lanes = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    for (int t = 0; t < NT; t++) {
        const uint8_t *row = w + (n0 + t) * stride;
        const uint16_t *scales = (const uint16_t *)(row + K);
        prefetch_rows(w, n0 + t, 1, stride);
        __m256 acc[ROW_TILE];
        for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t p = 0; p < pairs; p++) {
            /* 8 floats of the interleaved order: lanes 0-3 the pair's first block, 4-7 its second (F16C, as the
             * AVX-512 tile: two scalar half_to_float a pair made this path compute-bound, 12 GB/s on 2 threads) */
            const __m256 sw = _mm256_permutevar8x32_ps(bcast_half_pair(scales + 2 * p), pair_lanes);
            __m256 wf[8];
            for (int j = 0; j < 8; j++)
                wf[j] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                    _mm_loadl_epi64((const __m128i *)(row + p * 2 * QK + 8 * j))));
            for (int r = 0; r < R; r++) {
                const float *x = xs + (m0 + r) * K + p * 2 * QK;
                __m256 sum = _mm256_mul_ps(wf[0], _mm256_loadu_ps(x));
                for (int j = 1; j < 8; j++) sum = _mm256_fmadd_ps(wf[j], _mm256_loadu_ps(x + 8 * j), sum);
                acc[r] = _mm256_fmadd_ps(sum, sw, acc[r]);
            }
        }
        for (int r = 0; r < R; r++) {
            float s = hsum256(acc[r]);
            if (nb & 1) s += tail_share_w8f(row, xs + (m0 + r) * K, K);
            out[(m0 + r) * ldo + n0 + t] = s;
        }
    }
}
static void dot_rows_w8f(const float *xs, int64_t m0, int R, int64_t K, const uint8_t *w, float *out, int64_t ldo,
                         int64_t n0, int NT) {
    BY_ROWS(rows_w8f_avx2, xs, m0, K, w, out, ldo, n0, NT)
}
#else
static void dot_rows_w8f(const float *xs, int64_t m0, int R, int64_t K, const uint8_t *w, float *out, int64_t ldo,
                         int64_t n0, int NT) {
    const int64_t nb = K / QK, stride = row_bytes(K, 1);
    for (int t = 0; t < NT; t++) {
        const uint8_t *row = w + (n0 + t) * stride;
        const uint16_t *scales = (const uint16_t *)(row + K);
        for (int r = 0; r < R; r++) {
            const float *x = xs + (m0 + r) * K;
            float s = 0.0f;
            for (int64_t b = 0; b + 1 < nb; b += 2) {
                /* 8 lanes (vectorised by the compiler): lanes 0-3 hold the pair's first block, 4-7 its second */
                float lane[8] = {0};
                const int8_t *wp = (const int8_t *)row + b * QK;
                for (int c = 0; c < 2 * QK; c += 8)
                    for (int j = 0; j < 8; j++) lane[j] += (float)wp[c + j] * x[b * QK + c + j];
                s += (lane[0] + lane[1] + lane[2] + lane[3]) * half_to_float(scales[b])
                     + (lane[4] + lane[5] + lane[6] + lane[7]) * half_to_float(scales[b + 1]);
            }
            if (nb & 1) s += tail_share_w8f(row, x, K);
            out[(m0 + r) * ldo + n0 + t] = s;
        }
    }
}
#endif

/* Output columns in chunks of N_CHUNK over the threads, tiles of N_TILE weight rows x ROW_TILE activation rows:
 * through dot_rows_w8f (float activations xs) or dot_rows (int8 activations a). */
static inline __attribute__((always_inline)) void run_tiles(const quantized_rows *a, const float *xs,
        const uint8_t *w, int64_t M, int64_t K, int64_t N, float *out, int64_t ldo, int is_w8, const int float_acts,
        int nthreads) {
    const int64_t chunks = (N + N_CHUNK - 1) / N_CHUNK;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (N * M * K >= 262144)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t n_end = (c + 1) * N_CHUNK < N ? (c + 1) * N_CHUNK : N;
        for (int64_t n0 = c * N_CHUNK; n0 < n_end;) {
            const int NT = n_end - n0 >= N_TILE ? N_TILE : 1;
            for (int64_t m0 = 0; m0 < M; m0 += ROW_TILE) {
                const int R = (int)(M - m0 < ROW_TILE ? M - m0 : ROW_TILE);
                if (float_acts)
                    dot_rows_w8f(xs, m0, R, K, w, out, ldo, n0, NT);
                else
                    dot_rows(a, m0, R, K, w, is_w8, out, ldo, n0, NT);
            }
            n0 += NT;
        }
    }
}

int aio_gemm_w8f(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w, int64_t N, float *out,
                 int64_t ldo, int nthreads) {
    float *xs = (float *)aligned_alloc(64, ((sizeof(float) * M * K + 63) / 64) * 64);
    if (!xs) return -1;
    for (int64_t m = 0; m < M; m++) interleave_row(x + m * ldx, K, xs + m * K);
    run_tiles(NULL, xs, w, M, K, N, out, ldo, 0, 1, nthreads);
    free(xs);
    return 0;
}

/* out[M, N] (row stride ldo) = x[M, K] (row stride ldx) @ W[N, K]^T, W as N row records (see the top).
 * Returns 0, or -1 when memory ran out. */
static int gemm(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w, int64_t N, float *out,
                int64_t ldo, int nthreads, int is_w8) {
    quantized_rows a;
    if (quantize_rows(x, M, K, ldx, nthreads, &a)) {
        free_rows(&a);
        return -1;
    }
    run_tiles(&a, NULL, w, M, K, N, out, ldo, is_w8, 0, nthreads);
    free_rows(&a);
    return 0;
}

int64_t aio_row_bytes(int64_t K, int is_w8) { return row_bytes(K, is_w8); }

int aio_gemm_w4(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w, int64_t N, float *out,
                int64_t ldo, int nthreads) {
    return gemm(x, M, K, ldx, w, N, out, ldo, nthreads, 0);
}

int aio_gemm_w8(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w, int64_t N, float *out,
                int64_t ldo, int nthreads) {
    return gemm(x, M, K, ldx, w, N, out, ldo, nthreads, 1);
}
