/* The small float32 ops of a step that cost more in torch's per-op overhead than in arithmetic: RMSNorm,
 * SiLU-and-mul, and paged attention (KV store included). One call replaces 3-30 torch ops. Plain C loops that the
 * compiler vectorises (-O3 -march=native), attention's scores in GCC / Clang vectors of 16 floats; rows, tokens
 * and heads run on OpenMP threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

/* out[m] = w * (x[m] * rsqrt(mean(x[m]^2) + eps)), torch's order of operations but for the sum of squares: 16
 * partial sums by element position (vectorised; one running sum was a chain of K dependent additions, 13 us for a
 * verification's 5 rows of 1,536), added in order */
void aio_rmsnorm(const float *x, int64_t ldx, const float *w, float *out, int64_t M, int64_t K, float eps,
                 int nthreads) {
#pragma omp parallel for schedule(static) num_threads(nthreads) if (M * K >= 65536)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx;
        float *o = out + m * K;
        float part[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= K; i += 16)
            for (int j = 0; j < 16; j++) part[j] += xr[i + j] * xr[i + j];
        for (; i < K; i++) part[i % 16] += xr[i] * xr[i];
        float ss = 0.0f;
        for (int j = 0; j < 16; j++) ss += part[j];
        const float r = 1.0f / sqrtf(ss / (float)K + eps);
        for (int64_t i = 0; i < K; i++) o[i] = w[i] * (xr[i] * r);
    }
}

/* e^x in plain float operations (libm's expf is a scalar call per element, the bulk of SiLU's and a short
 * context's softmax time; exp_v8 below does the same operations on 8 lanes): x = n ln2 + r with |r| <= ln2 / 2
 * (Cody-Waite, ln2 in two parts), e^r by its Taylor series to r^7 (truncation < 3e-9 relative), times 2^n through
 * the exponent bits (floorf does not vectorise under -std=c11: n is rounded by adding and taking away
 * 1.5 * 2^23); n kept in [-126, 127]: below -87.3 the result stays 1.2e-38 instead of 0, above 88.7 it stays
 * 3.3e38 instead of inf (a softmax's and SiLU's results alike). Within 1 ulp of e^x (1.03e-7 relative, measured
 * over the range), and the same bits in exp_v8's lanes as here (no contraction under -std=c11), so a token's
 * result does not depend on where its element falls. */
static inline float exp_vec(float x) {
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.7f ? 88.7f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* to nearest: 1.5 * 2^23's ulp is 1 */
    n = n > 127.0f ? 127.0f : n;
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (
        1.0f / 720 + r * (1.0f / 5040)))))));
    const union { int32_t bits; float value; } scale = {.bits = ((int32_t)n + 127) << 23};
    return p * scale.value;
}

/* a * b + c, fused where the CPU fuses it (one rounding), as vf16_madd does in each lane */
#if defined(__FMA__)
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* vf16 values only pass between static inline functions */
#endif
/* GCC / Clang vectors of 16 floats: one zmm under AVX-512, two ymm under AVX2, scalars otherwise; a lane's
 * arithmetic is the same in each */
typedef float vf16 __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
#if defined(__clang__)
#define SHUFFLE16(a, b, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
typedef int32_t vi16 __attribute__((vector_size(64)));
#define SHUFFLE16(a, b, ...) __builtin_shuffle((a), (b), (vi16){__VA_ARGS__})
#endif

static inline vf16 vf16_load(const float *p) {
    vf16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

typedef int32_t vi8s __attribute__((vector_size(32)));
typedef int32_t vi16s __attribute__((vector_size(64)));
static inline vf8 vf8_splat(float x) { return (vf8){x, x, x, x, x, x, x, x}; }
/* where[lane] ? a : b, as bits (VF a float vector type, VI the int32 one of its size) */
#define VEC_SELECT(VF, VI, where, a, b) ((VF)(((VI)(a) & (where)) | ((VI)(b) & ~(where))))

/* exp_vec in each lane of a VF (VI: its int32 vector): the same operations in the same order (no contraction under
 * -std=c11), so the same bits. GCC vectorised exp_vec's loops under AVX-512 only: under AVX2, with its default
 * -ftrapping-math, it does not if-convert the clamps once it has moved arithmetic into their branches; the selects
 * here are bit operations. exp_v8 everywhere (GCC compared a 16-float vector lane by lane under AVX2), exp_v16
 * under AVX-512. In place: GCC notes an ABI change for a vector passed by value. */
#define EXP_LANES(NAME, VF, VI)                                                                                \
    static inline void NAME(VF *e) {                                                                          \
        VF x = *e;                                                                                             \
        const VF zero = {0}, lo = zero - 87.3f, hi = zero + 88.7f, top = zero + 127.0f;                        \
        const VF round = zero + 12582912.0f;                                                                   \
        x = VEC_SELECT(VF, VI, x < lo, lo, x);                                                                 \
        x = VEC_SELECT(VF, VI, x > hi, hi, x);                                                                 \
        VF n = (x * 1.44269504088896341f + round) - round;                                                     \
        n = VEC_SELECT(VF, VI, n > top, top, n);                                                               \
        const VF r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;                                \
        const VF p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (   \
            1.0f / 720 + r * (1.0f / 5040)))))));                                                              \
        const VI bits = (__builtin_convertvector(n, VI) + 127) << 23;                                          \
        *e = p * (VF)bits;                                                                                     \
    }
EXP_LANES(exp_v8, vf8, vi8s)
#if defined(__AVX512F__)
EXP_LANES(exp_v16, vf16, vi16s)
#endif

static inline vf8 vf8_load(const float *p) {
    vf8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* out[m, i] = silu(gate_up[m, i]) * gate_up[m, I + i]; split in runs of SILU_RUN across the threads, a decode
 * step's single row too; 8 lanes at a time, the rest one by one (the same bits) */
#define SILU_RUN 1024
void aio_silu_mul(const float *gate_up, float *out, int64_t M, int64_t I, int nthreads) {
    const int64_t runs = (I + SILU_RUN - 1) / SILU_RUN;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (M * I >= 4096)
    for (int64_t t = 0; t < M * runs; t++) {
        const int64_t m = t / runs, i0 = (t % runs) * SILU_RUN, i1 = i0 + SILU_RUN < I ? i0 + SILU_RUN : I;
        const float *g = gate_up + m * 2 * I, *u = g + I;
        float *o = out + m * I;
        int64_t i = i0;
        for (; i + 8 <= i1; i += 8) {
            const vf8 gv = vf8_load(g + i);
            vf8 e = -gv;
            exp_v8(&e);
            e = gv / (1.0f + e) * vf8_load(u + i);
            memcpy(o + i, &e, sizeof e);
        }
        for (; i < i1; i++) o[i] = g[i] / (1.0f + exp_vec(-g[i])) * u[i];
    }
}

#define LANES 16

#define MAX_LANES 64

/* The argmax of a row as torch.argmax (the first of equal maxima, a NaN counting as the largest) in 64 lanes, each
 * with its running maximum, the first index of it, and how many times it came (one running maximum is a chain of V
 * dependent steps: torch.argmax took 230 us over 151,936 logits, this 17). ids (or NULL): the token id of each
 * column (a reduced draft head's kept rows), the answer then the least id of the equal maxima. *top: the maximum. */
static int64_t row_argmax(const float *x, int64_t V, const int64_t *ids, float *top) {
    float part[MAX_LANES];
    int32_t first[MAX_LANES], count[MAX_LANES], odd[MAX_LANES];
    int32_t i = 0;
    if (V >= MAX_LANES && V < INT32_MAX) {
        for (int j = 0; j < MAX_LANES; j++) part[j] = x[j], first[j] = j, count[j] = 1, odd[j] = x[j] != x[j];
        for (i = MAX_LANES; i + MAX_LANES <= V; i += MAX_LANES)
            for (int j = 0; j < MAX_LANES; j++) {
                const float v = x[i + j];
                const int32_t gt = v > part[j], eq = v == part[j];
                first[j] = gt ? i + j : first[j];
                count[j] = gt ? 1 : count[j] + eq;
                part[j] = gt ? v : part[j];
                odd[j] |= v != v;
            }
    }
    float best = -INFINITY;
    int64_t at = -1, ties = 0;
    int nan = 0;
    for (int j = 0; i && j < MAX_LANES; j++) {
        nan |= odd[j];
        if (part[j] > best || at < 0) best = part[j], at = first[j], ties = count[j];
        else if (part[j] == best) at = first[j] < at ? first[j] : at, ties += count[j];
    }
    for (int64_t k = i; k < V; k++) {
        nan |= x[k] != x[k];
        if (x[k] > best || at < 0) best = x[k], at = k, ties = 1;
        else if (x[k] == best) ties++;
    }
    *top = best;
    if (!nan && !ids) return at; /* each lane's first, then the least of the lanes' */
    if (!nan && ties == 1) return ids[at];
    int64_t least = INT64_MAX; /* NaNs, or equal maxima by id: rare, a plain scan */
    for (int64_t k = 0; k < V; k++)
        if (nan ? x[k] != x[k] : x[k] == best) {
            const int64_t id = ids ? ids[k] : k;
            if (id < least) least = id;
            if (!ids) break;
        }
    return least;
}

/* per row of x [M, V] (row stride ldx): torch.argmax's index, the first of equal maxima (a NaN counts as the
 * largest) */
void aio_argmax(const float *x, int64_t M, int64_t V, int64_t ldx, int64_t *token) {
    for (int64_t m = 0; m < M; m++) {
        const float *r = x + m * ldx;
        float top;
        token[m] = row_argmax(r, V, NULL, &top);
    }
}

/* per row of logits [M, V] (rows contiguous): the argmax as aio_argmax and its softmax probability
 * 1 / sum(exp(x - max)); -inf entries add (nearly) nothing. ids (or NULL): the token id of each column, the logits
 * being a vocabulary's kept rows (a reduced draft head): the token is then the least id of the equal maxima, as
 * torch.argmax over the whole vocabulary with -inf elsewhere. One call without temporaries: a draft token and its
 * confidence, where torch's ops took ~0.9 ms over 151,936 logits right after the layers. */
void aio_argmax_prob(const float *logits, int64_t M, int64_t V, const int64_t *ids, int64_t *token, float *prob) {
    for (int64_t m = 0; m < M; m++) {
        const float *x = logits + m * V;
        float top;
        token[m] = row_argmax(x, V, ids, &top);
        vf8 part[2] = {vf8_splat(0.0f), vf8_splat(0.0f)};
        int64_t i = 0;
        for (; i + LANES <= V; i += LANES)
            for (int h = 0; h < 2; h++) {
                vf8 e = vf8_load(x + i + 8 * h) - top;
                exp_v8(&e);
                part[h] += e;
            }
        float sum = 0.0f;
        for (int j = 0; j < LANES; j++) sum += part[j / 8][j % 8];
        for (; i < V; i++) sum += exp_vec(x[i] - top);
        prob[m] = 1.0f / sum;
    }
}

/* c + a * b in each lane, fused where the CPU fuses it (one rounding) */
static inline vf16 vf16_madd(vf16 a, vf16 b, vf16 c) {
#if defined(__AVX512F__)
    return (vf16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
    vf8 a2[2], b2[2], c2[2];
    memcpy(a2, &a, sizeof a), memcpy(b2, &b, sizeof b), memcpy(c2, &c, sizeof c);
    for (int h = 0; h < 2; h++) c2[h] = (vf8)_mm256_fmadd_ps((__m256)a2[h], (__m256)b2[h], (__m256)c2[h]);
    memcpy(&c, c2, sizeof c);
    return c;
#else
    return a * b + c;
#endif
}

/* the 16 lane sums of 16 vectors, sum i in lane i, every sum added as ((x0 + x8) + (x4 + x12)) + ... the same
 * tree whatever its slot: halves, then quarters, then pairs, then the last two */
static inline vf16 vf16_sums16(const vf16 *a) {
    vf16 x[8], z[4], r[2];
    for (int i = 0; i < 8; i++)
        x[i] = SHUFFLE16(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               SHUFFLE16(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    for (int i = 0; i < 4; i++)
        z[i] = SHUFFLE16(x[2 * i], x[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               SHUFFLE16(x[2 * i], x[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    for (int i = 0; i < 2; i++)
        r[i] = SHUFFLE16(z[2 * i], z[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
               SHUFFLE16(z[2 * i], z[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    return SHUFFLE16(r[0], r[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           SHUFFLE16(r[0], r[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

#define QUERIES_MAX 64 /* query vectors (a run's tokens x a task's heads) sharing one read of the K / V rows */
#define KV_AHEAD 8     /* V rows prefetched ahead of the group in use */
#define KV_GROUP 8     /* V rows weighed per pass over a query's sum */
#define KV_TILE 256    /* keys scored before their V rows are weighed: tiles at fixed positions 0, 256, ... */

/* The next rows' cache lines, prefetched into L2 a few at a time between a loop's steps: rows [first, first + count)
 * at cache + off[row], row_floats each, `quota` lines a step. Issued all at once, one chunk's 256 lines (16 rows of the
 * 1.5B's KV) filled the core's outstanding misses and stalled the scoring of the chunk in hand until they came: from
 * memory attention read half what a walk over the same rows reads (an Intel Xeon, docs/benchmarks.md). */
typedef struct {
    const float *cache;
    const int64_t *off;
    int64_t lines_per_row, next, end, quota;
    int64_t row, line; /* the next line's row (an index into off) and its line within the row */
} kv_prefetch;

static inline void kv_prefetch_start(kv_prefetch *p, const float *cache, const int64_t *off, int64_t first,
                                     int64_t count, int64_t row_floats, int64_t steps) {
    p->cache = cache, p->off = off, p->next = 0, p->row = first, p->line = 0;
    p->lines_per_row = (row_floats * (int64_t)sizeof(float) + 63) / 64;
    p->end = count > 0 ? count * p->lines_per_row : 0;
    p->quota = (p->end + steps - 1) / steps;
}

/* the step's quota of lines; with all set, every line left */
static inline void kv_prefetch_step(kv_prefetch *p, int all) {
    const int64_t stop = all || p->next + p->quota > p->end ? p->end : p->next + p->quota;
    for (; p->next < stop; p->next++) {
        __builtin_prefetch((const char *)(p->cache + p->off[p->row]) + 64 * p->line, 0, 2);
        if (++p->line == p->lines_per_row) p->line = 0, p->row++;
    }
}

/* where the K / V rows of positions t0 .. t0 + cnt - 1 start in either cache (they share one layout: [slot, Hkv,
 * D], slot = table[p / block_size] * block_size + p % block_size): one division a block, not one a row */
static void row_offsets(const int64_t *table, int64_t t0, int64_t cnt, int block_size, int64_t kv_row, int kvh, int D,
                        int64_t *off) {
    for (int64_t i = 0, p = t0; i < cnt;) {
        const int64_t b = p / block_size, base = table[b] * block_size;
        for (int64_t o = p - b * block_size; o < block_size && i < cnt; o++, i++, p++)
            off[i] = (base + o) * kv_row + (int64_t)kvh * D;
    }
}

#if defined(__FMA__) && !defined(__AVX512F__)
/* vf16_sums16's last three levels for 8 keys at once, x[j] key j's first-level sums (lanes l + l + 8): sum j in lane
 * j as ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7)), the same additions as there, by 128-bit halves and
 * in-lane shuffles (GCC lowers vf16's shuffles on AVX2 to scalar inserts: most of a decode's attention time) */
static inline __m256 sums8(const __m256 *x) {
    __m256 z[4], r[2];
    for (int i = 0; i < 4; i++) /* keys 2i (low half) and 2i + 1 (high half): x[m] + x[m + 4] */
        z[i] = _mm256_add_ps(_mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x31));
    for (int i = 0; i < 2; i++) /* keys 4i, 4i + 2 (low half), 4i + 1, 4i + 3 (high): z[p] + z[p + 2] */
        r[i] = _mm256_add_ps(_mm256_shuffle_ps(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* keys 0 2 4 6 (low half), 1 3 5 7 (high): r[0] + r[1]; then in key order (AVX's shuffles only: FMA without
     * AVX2 takes this path too) */
    const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m128 even = _mm256_castps256_ps128(t), odd = _mm256_extractf128_ps(t, 1);
    return _mm256_set_m128(_mm_unpackhi_ps(even, odd), _mm_unpacklo_ps(even, odd));
}
#endif

/* the scores of query qv (D floats, zero-padded to a multiple of 16) against the 16 key rows k[0 .. 15], times
 * scale, into out[0 .. 15]: per key 16 lane sums over d in order, then vf16_sums16, so a key's score does not
 * depend on the keys beside it or on the query's company */
static inline void block_scores(const float *qv, int D, const float *const *k, float scale, float *out) {
    const int d16 = D / 16 * 16;
#if defined(__FMA__) && !defined(__AVX512F__)
    __m256 halves[16];
    /* AVX2: a key's 16 lanes in two ymm, four keys at a time. Sixteen keys' 32 ymm do not fit its 16 registers, and
     * GCC moved every vf16 result through general registers (a dozen instructions per FMA). Each lane gets the same
     * FMAs in the same order as one vf16 would. */
    for (int j0 = 0; j0 < 16; j0 += 4) {
        __m256 lo[4], hi[4];
        for (int j = 0; j < 4; j++) lo[j] = hi[j] = _mm256_setzero_ps();
        for (int d = 0; d < d16; d += 16) {
            const __m256 xl = _mm256_loadu_ps(qv + d), xh = _mm256_loadu_ps(qv + d + 8);
            for (int j = 0; j < 4; j++) {
                lo[j] = _mm256_fmadd_ps(xl, _mm256_loadu_ps(k[j0 + j] + d), lo[j]);
                hi[j] = _mm256_fmadd_ps(xh, _mm256_loadu_ps(k[j0 + j] + d + 8), hi[j]);
            }
        }
        if (d16 < D) { /* the rows' last D - d16 floats, zeros past them (masked loads: the sums stay in registers) */
            const __m256 xl = _mm256_loadu_ps(qv + d16), xh = _mm256_loadu_ps(qv + d16 + 8);
            static const int32_t ones_then_zeros[32] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
            const int n = D - d16, nh = n > 8 ? n - 8 : 0; /* AVX's loads only: FMA without AVX2 comes here too */
            const __m256i ml = _mm256_loadu_si256((const __m256i *)(ones_then_zeros + 16 - (n < 8 ? n : 8)));
            const __m256i mh = _mm256_loadu_si256((const __m256i *)(ones_then_zeros + 16 - nh));
            for (int j = 0; j < 4; j++) {
                lo[j] = _mm256_fmadd_ps(xl, _mm256_maskload_ps(k[j0 + j] + d16, ml), lo[j]);
                hi[j] = _mm256_fmadd_ps(xh, _mm256_maskload_ps(k[j0 + j] + d16 + 8, mh), hi[j]);
            }
        }
        for (int j = 0; j < 4; j++) halves[j0 + j] = _mm256_add_ps(lo[j], hi[j]); /* the tree's first level */
    }
    for (int g = 0; g < 2; g++)
        _mm256_storeu_ps(out + 8 * g, _mm256_mul_ps(sums8(halves + 8 * g), _mm256_set1_ps(scale)));
#elif defined(__AVX512F__)
    /* four keys at a time over the whole head: four row pointers live, not sixteen (GCC kept those on the stack and
     * loaded one before every FMA); the tail by a masked load, zeros past the row, as the query's padding */
    vf16 acc[16];
    for (int j0 = 0; j0 < 16; j0 += 4) {
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int d = 0; d < d16; d += 16) {
            const __m512 x = _mm512_loadu_ps(qv + d);
            for (int j = 0; j < 4; j++) a[j] = _mm512_fmadd_ps(x, _mm512_loadu_ps(k[j0 + j] + d), a[j]);
        }
        if (d16 < D) {
            const __m512 x = _mm512_loadu_ps(qv + d16);
            const __mmask16 rest = (__mmask16)((1u << (D - d16)) - 1);
            for (int j = 0; j < 4; j++) a[j] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(rest, k[j0 + j] + d16), a[j]);
        }
        for (int j = 0; j < 4; j++) acc[j0 + j] = (vf16)a[j];
    }
    const vf16 sums = vf16_sums16(acc) * scale;
    memcpy(out, &sums, sizeof sums);
#else
    vf16 acc[16];
    for (int j = 0; j < 16; j++) acc[j] = (vf16){0};
    for (int d = 0; d < d16; d += 16) {
        const vf16 x = vf16_load(qv + d);
        for (int j = 0; j < 16; j++) acc[j] = vf16_madd(x, vf16_load(k[j] + d), acc[j]);
    }
    if (d16 < D) {
        const vf16 x = vf16_load(qv + d16);
        for (int j = 0; j < 16; j++) {
            float tail[16] = {0};
            memcpy(tail, k[j] + d16, sizeof(float) * (D - d16));
            acc[j] = vf16_madd(x, vf16_load(tail), acc[j]);
        }
    }
    const vf16 sums = vf16_sums16(acc) * scale;
    memcpy(out, &sums, sizeof sums);
#endif
}

/* acc += e[0] v[0] + e[1] v[1] + ... over n rows, one row after the other (the order of a row at a time) */
static inline void add_rows(float *acc, const float *const *v, const float *e, int n, int D) {
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *v0 = v[j], *v1 = v[j + 1], *v2 = v[j + 2], *v3 = v[j + 3];
        const float e0 = e[j], e1 = e[j + 1], e2 = e[j + 2], e3 = e[j + 3];
        for (int d = 0; d < D; d++)
            acc[d] = MADD(e3, v3[d], MADD(e2, v2[d], MADD(e1, v1[d], MADD(e0, v0[d], acc[d]))));
    }
    for (; j < n; j++)
        for (int d = 0; d < D; d++) acc[d] = MADD(e[j], v[j][d], acc[d]);
}

#if defined(__FMA__)
/* add_rows for D a multiple of 8 with 8 ymm of acc held over all n rows (up to 64 of its floats at a time): the same
 * FMAs in the same order per float (row by row), so the same bits */
static inline void add_rows8(float *acc, const float *const *v, const float *e, int n, int D) {
    int d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) {
        __m256 a[8];
        for (int c = 0; c < 8; c++) a[c] = _mm256_loadu_ps(acc + d0 + 8 * c);
        for (int j = 0; j < n; j++) {
            const __m256 ej = _mm256_set1_ps(e[j]);
            for (int c = 0; c < 8; c++) a[c] = _mm256_fmadd_ps(ej, _mm256_loadu_ps(v[j] + d0 + 8 * c), a[c]);
        }
        for (int c = 0; c < 8; c++) _mm256_storeu_ps(acc + d0 + 8 * c, a[c]);
    }
    if (d0 < D) {
        const float *rest[KV_GROUP];
        for (int j = 0; j < n; j++) rest[j] = v[j] + d0;
        add_rows(acc + d0, rest, e, n, D - d0);
    }
}
#endif

#if defined(__AVX512F__)
/* add_rows8 for two queries at once over the same n rows (D a multiple of 8, at least 64): each row's 64-float chunk
 * read once for both, 4 zmm of each query's sum held over the rows (8 FMA chains where one query's 64 floats have
 * 4); the same FMAs in the same order per float, so the same bits */
static inline void add_rows_pair(float *acc0, float *acc1, const float *const *v, const float *e0, const float *e1,
                                 int n, int D) {
    int d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) {
        __m512 a[2][4];
        for (int c = 0; c < 4; c++) {
            a[0][c] = _mm512_loadu_ps(acc0 + d0 + 16 * c);
            a[1][c] = _mm512_loadu_ps(acc1 + d0 + 16 * c);
        }
        for (int j = 0; j < n; j++) {
            const __m512 f0 = _mm512_set1_ps(e0[j]), f1 = _mm512_set1_ps(e1[j]);
            for (int c = 0; c < 4; c++) {
                const __m512 row = _mm512_loadu_ps(v[j] + d0 + 16 * c);
                a[0][c] = _mm512_fmadd_ps(f0, row, a[0][c]);
                a[1][c] = _mm512_fmadd_ps(f1, row, a[1][c]);
            }
        }
        for (int c = 0; c < 4; c++) {
            _mm512_storeu_ps(acc0 + d0 + 16 * c, a[0][c]);
            _mm512_storeu_ps(acc1 + d0 + 16 * c, a[1][c]);
        }
    }
    if (d0 < D) {
        const float *rest[KV_GROUP];
        for (int j = 0; j < n; j++) rest[j] = v[j] + d0;
        add_rows8(acc0 + d0, rest, e0, n, D - d0);
        add_rows8(acc1 + d0, rest, e1, n, D - d0);
    }
}
#endif

/* one query's tile of scores s[0 .. n-1] (the keys it sees of the tile), replaced by e^(score - max) with max the
 * tile's own; returns the max and sets *sum to the exponentials' sum, added in 16 partial sums by key position, then
 * in a fixed order */
static float tile_softmax(float *s, int64_t n, float *sum) {
    float m16[16];
    int64_t j16 = 0;
#if defined(__AVX__)
    /* lanes j % 16 as below: maxps(a, b) is a > b ? a : b, the scalar select's own rule (NaN and zeros alike) */
    __m256 mv[2] = {_mm256_set1_ps(-INFINITY), _mm256_set1_ps(-INFINITY)};
    for (; j16 + 16 <= n; j16 += 16)
        for (int h = 0; h < 2; h++) mv[h] = _mm256_max_ps(_mm256_loadu_ps(s + j16 + 8 * h), mv[h]);
    _mm256_storeu_ps(m16, mv[0]);
    _mm256_storeu_ps(m16 + 8, mv[1]);
#else
    for (int i = 0; i < 16; i++) m16[i] = -INFINITY;
#endif
    for (int64_t j = j16; j < n; j++) m16[j % 16] = s[j] > m16[j % 16] ? s[j] : m16[j % 16];
    float m = m16[0];
    for (int i = 1; i < 16; i++) m = m16[i] > m ? m16[i] : m;
    int64_t j = 0;
#if defined(__AVX512F__)
    vf16 lanes = {0}; /* lane i: keys j % 16 == i, as the two halves below */
    for (; j + 16 <= n; j += 16) {
        vf16 e = vf16_load(s + j) - m;
        exp_v16(&e);
        memcpy(s + j, &e, sizeof e);
        lanes += e;
    }
#else
    vf8 lanes[2] = {vf8_splat(0.0f), vf8_splat(0.0f)};
    for (; j + 16 <= n; j += 16)
        for (int h = 0; h < 2; h++) {
            vf8 e = vf8_load(s + j + 8 * h) - m;
            exp_v8(&e);
            memcpy(s + j + 8 * h, &e, sizeof e);
            lanes[h] += e;
        }
#endif
    float part[16];
    memcpy(part, &lanes, sizeof part);
    for (; j < n; j++) {
        s[j] = exp_vec(s[j] - m);
        part[j % 16] += s[j];
    }
    float total = 0.0f;
    for (int i = 0; i < 16; i++) total += part[i];
    *sum = total;
    return m;
}

/* A query's softmax-weighted sum so far, [max, sum, D weighted V floats] (a tile's alone in the same form). A tile
 * is folded in as flash attention's running max and sum do: each side scaled by e^(its max - the larger). The tiles
 * of a query are folded in key order, by the task that computed them or after all tasks, with the same operations:
 * the same bits. A state's sum is NOTHING while it holds no tile (a tile's sum is >= 1, its max's own e^0, or NaN). */
#define ATT_MAX 0
#define ATT_SUM 1
#define ATT_ACC 2
#define NOTHING -1.0f
#define PARTS_MAX (1 << 20) /* floats of KEYS' tiles' results (4 MB) */
static inline void fold_tile(float *state, const float *tile, int D) {
    if (state[ATT_SUM] == NOTHING) {
        memcpy(state, tile, sizeof(float) * (size_t)(D + ATT_ACC));
        return;
    }
    const float top = tile[ATT_MAX] > state[ATT_MAX] ? tile[ATT_MAX] : state[ATT_MAX];
    const float a = exp_vec(state[ATT_MAX] - top), b = exp_vec(tile[ATT_MAX] - top);
    state[ATT_MAX] = top;
    state[ATT_SUM] = MADD(tile[ATT_SUM], b, state[ATT_SUM] * a);
    for (int d = 0; d < D; d++) state[ATT_ACC + d] = MADD(tile[ATT_ACC + d], b, state[ATT_ACC + d] * a);
}

/* a query's result from its state: the weighted sum over the sum (NaN without keys, as 0 / 0 would be) */
static inline void attention_result(const float *state, int D, float *o) {
    for (int d = 0; d < D; d++) o[d] = state[ATT_SUM] == NOTHING ? NAN : state[ATT_ACC + d] / state[ATT_SUM];
}

/* what every task reads: the call's arguments, and how its tokens fall in runs */
typedef struct {
    const float *q, *k_cache, *v_cache;
    int64_t q_stride, kv_row, max_blocks;
    const int64_t *token_seq, *visible, *block_tables, *run_start;
    int num_heads, group, D, block_size;
    float scale;
    float *out;
} attention_call;

/* a thread's scratch, for up to nq queries */
typedef struct {
    float *qs, *scores, *tiles, *states;
    int64_t *vis;
} attention_scratch;

static int scratch_alloc(attention_scratch *s, int64_t nq, int D) {
    const int64_t dp = (D + 15) / 16 * 16, w = D + ATT_ACC;
    s->qs = (float *)malloc(sizeof(float) * nq * dp);
    s->scores = (float *)malloc(sizeof(float) * nq * (KV_TILE + 16));
    s->tiles = (float *)malloc(sizeof(float) * nq * w);
    s->states = (float *)malloc(sizeof(float) * nq * w);
    s->vis = (int64_t *)malloc(sizeof(int64_t) * nq);
    return s->qs && s->scores && s->tiles && s->states && s->vis ? 0 : -1;
}

static void scratch_free(attention_scratch *s) {
    free(s->qs);
    free(s->scores);
    free(s->tiles);
    free(s->states);
    free(s->vis);
}

/* A task's queries go in the order (KV head, token of the run, head of the KV head's part): query l of a task over
 * nh heads a KV head and tg tokens is token l % (tg nh) / nh, head l % nh of its KV head l / (tg nh), and back */
static inline int64_t query_token(int64_t l, int64_t tg, int nh) { return l % (tg * nh) / nh; }
static inline int64_t query_index(int64_t kv, int64_t u, int64_t hi, int64_t tg, int nh) {
    return (kv * tg + u) * nh + hi;
}

/* how many of a V group's mg rows, from key position first, a query that sees `visible` keys weighs (<= 0: none) */
static inline int group_rows_seen(int64_t visible, int64_t first, int mg) {
    return visible - first < mg ? (int)(visible - first) : mg;
}

/* Tiles [ta, tb) of run `run` for query heads [hp0, hp0 + nh) of each of KV heads [kv0, kv0 + nkv): queries in
 * the order (KV head, token, head). Each tile's K rows are read once for all of them (a row's KV heads side by
 * side: one thread reading a whole row streams faster than two threads reading a head each), then its V rows.
 * With `parts` NULL the tiles are folded into each query's state and the result written to out; otherwise tile t of
 * query l goes to parts + (t * nq + l) * (D + 2), its sum NOTHING where the query sees none of it. */
static void attend_tiles(const attention_call *c, int64_t run, int kv0, int nkv, int hp0, int nh, int64_t ta,
                         int64_t tb, attention_scratch *s, float *parts) {
    const int D = c->D;
    const int64_t dp = (D + 15) / 16 * 16, w = D + ATT_ACC;
    const int64_t i0 = c->run_start[run], tg = c->run_start[run + 1] - i0, per_kv = tg * nh, nq = nkv * per_kv;
    const int64_t *table = c->block_tables + c->token_seq[i0] * c->max_blocks;
    int64_t len = 0;
    for (int64_t l = 0; l < nq; l++) {
        const int64_t u = query_token(l, tg, nh), head = (int64_t)(kv0 + l / per_kv) * c->group + hp0 + l % nh;
        s->vis[l] = c->visible[i0 + u];
        len = s->vis[l] > len ? s->vis[l] : len;
        memset(s->qs + l * dp, 0, sizeof(float) * dp);
        memcpy(s->qs + l * dp, c->q + (i0 + u) * c->q_stride + head * D, sizeof(float) * D);
        s->states[l * w + ATT_SUM] = NOTHING;
    }
    int64_t off[KV_TILE + 32]; /* where a tile's rows start, and the 32 after it, for the prefetches */
    for (int64_t t = ta; t < tb && t * KV_TILE < len; t++) {
        const int64_t t0 = t * KV_TILE, n = len - t0 < KV_TILE ? len - t0 : KV_TILE;
        const int64_t known = len - t0 < n + 32 ? len - t0 : n + 32; /* rows with an offset in off */
        row_offsets(table, t0, known, c->block_size, c->kv_row, kv0, D, off);
        for (int64_t j0 = 0; j0 < n; j0 += 16) {
            kv_prefetch ahead; /* the next 16 keys' K rows, over this chunk's queries */
            kv_prefetch_start(&ahead, c->k_cache, off, j0 + 16, known - j0 - 16 < 16 ? known - j0 - 16 : 16,
                              (int64_t)nkv * D, nq);
            for (int kv = 0; kv < nkv; kv++) {
                const float *krow[16];
                for (int j = 0; j < 16; j++) /* past the tile: its last row again, scored and not used */
                    krow[j] = c->k_cache + off[j0 + j < n ? j0 + j : n - 1] + kv * D;
                for (int64_t l = kv * per_kv; l < (kv + 1) * per_kv; l++) {
                    kv_prefetch_step(&ahead, 0);
                    if (s->vis[l] > t0 + j0)
                        block_scores(s->qs + l * dp, D, krow, c->scale, s->scores + l * KV_TILE + j0);
                }
            }
            kv_prefetch_step(&ahead, 1);
        }
        for (int64_t l = 0; l < nq; l++) {
            const int64_t seen = s->vis[l] - t0 < n ? s->vis[l] - t0 : n;
            float *tile = s->tiles + l * w;
            if (seen <= 0) {
                tile[ATT_SUM] = NOTHING;
                continue;
            }
            tile[ATT_MAX] = tile_softmax(s->scores + l * KV_TILE, seen, tile + ATT_SUM);
            memset(tile + ATT_ACC, 0, sizeof(float) * D);
        }
        for (int64_t j0 = 0; j0 < n; j0 += KV_GROUP) {
            const int mg = n - j0 < KV_GROUP ? (int)(n - j0) : KV_GROUP;
            kv_prefetch ahead; /* V rows KV_AHEAD on, over this group's queries (two at a time under AVX-512) */
            const int64_t first = j0 + KV_AHEAD;
            kv_prefetch_start(&ahead, c->v_cache, off, first, known - first < mg ? known - first : mg,
                              (int64_t)nkv * D, nq / 2 + 1);
            for (int kv = 0; kv < nkv; kv++) {
                const float *rows[KV_GROUP];
                for (int j = 0; j < mg; j++) rows[j] = c->v_cache + off[j0 + j] + kv * D;
                for (int64_t l = kv * per_kv; l < (kv + 1) * per_kv; l++) {
                    const int m = group_rows_seen(s->vis[l], t0 + j0, mg);
                    kv_prefetch_step(&ahead, 0);
                    if (m <= 0) continue;
#if defined(__AVX512F__)
                    if (D % 8 == 0 && D >= 64 && l + 1 < (kv + 1) * per_kv &&
                        group_rows_seen(s->vis[l + 1], t0 + j0, mg) == m) {
                        add_rows_pair(s->tiles + l * w + ATT_ACC, s->tiles + (l + 1) * w + ATT_ACC, rows,
                                      s->scores + l * KV_TILE + j0, s->scores + (l + 1) * KV_TILE + j0, m, D);
                        l++;
                        continue;
                    }
#endif
#if defined(__FMA__)
                    if (D % 8 == 0) {
                        add_rows8(s->tiles + l * w + ATT_ACC, rows, s->scores + l * KV_TILE + j0, m, D);
                        continue;
                    }
#endif
                    add_rows(s->tiles + l * w + ATT_ACC, rows, s->scores + l * KV_TILE + j0, m, D);
                }
            }
            kv_prefetch_step(&ahead, 1);
        }
        for (int64_t l = 0; l < nq; l++) {
            if (parts)
                memcpy(parts + (t * nq + l) * w, s->tiles + l * w, sizeof(float) * w);
            else if (s->tiles[l * w + ATT_SUM] != NOTHING)
                fold_tile(s->states + l * w, s->tiles + l * w, D);
        }
    }
    if (parts) return;
    for (int64_t l = 0; l < nq; l++) {
        const int64_t u = query_token(l, tg, nh), head = (int64_t)(kv0 + l / per_kv) * c->group + hp0 + l % nh;
        const float *st = s->states + l * w;
        float *o = c->out + ((i0 + u) * c->num_heads + head) * (int64_t)D;
        attention_result(st, D, o);
    }
}

/* Paged attention for any step (a token's result does not depend on how its sequence was chunked or batched, or on
 * the thread count): stores each token's new k / v at slot_mapping[i] of the caches ([num_blocks * block_size, Hkv,
 * D]), then
 *   out[i, h] = softmax(scale * q[i, h] . K^T) V over the first visible[i] tokens of sequence token_seq[i],
 * KV head h / (H / Hkv), the tokens found through block_tables[token_seq[i]] ([num_seqs, max_blocks]).
 * q, k, v: row i at q + i * q_stride (H heads of D), k + i * k_stride, v + i * v_stride (Hkv heads of D).
 * Keys go in tiles of KV_TILE at fixed positions 0, KV_TILE, ...; a query's tiles are computed alike by any task and
 * folded in key order (fold_tile). A run is consecutive tokens of one sequence (a decode token, a verification's
 * k + 1, a prefill chunk cut in runs). The threads share the work one of three ways:
 *   RUNS:  many runs: a task is a run, all heads, all tiles;
 *   KEYS:  few runs, long contexts: each thread a contiguous share of the runs' tiles, all heads, each tile's
 *          result kept apart and folded once all are done (a decode at 4,096 tokens: each thread streams whole K /
 *          V rows, where a KV head per thread read each row's halves and half as fast);
 *   HEADS: few runs, short contexts: a task is a run's query heads of one KV head, or a part of them.
 * Returns 0, or -1 when memory ran out. */
int aio_paged_attention(const float *q, int64_t q_stride, const float *k, int64_t k_stride, const float *v,
                        int64_t v_stride, float *k_cache, float *v_cache, const int64_t *slot_mapping,
                        int64_t num_tokens, const int64_t *token_seq, const int64_t *visible,
                        const int64_t *block_tables, int64_t max_blocks, int num_heads, int num_kv_heads,
                        int head_dim, int block_size, float scale, float *out, int nthreads) {
    const int64_t kv_row = (int64_t)num_kv_heads * head_dim, w = head_dim + ATT_ACC;
    for (int64_t i = 0; i < num_tokens; i++) {
        memcpy(k_cache + slot_mapping[i] * kv_row, k + i * k_stride, sizeof(float) * kv_row);
        memcpy(v_cache + slot_mapping[i] * kv_row, v + i * v_stride, sizeof(float) * kv_row);
    }
    if (num_tokens <= 0) return 0; /* an empty step: no runs to share out */
    const int group = num_heads / num_kv_heads;
    int64_t work = 0;
    for (int64_t i = 0; i < num_tokens; i++) work += visible[i];
    /* per run: its first token, its first tile among all runs' (and the total after the last), its longest query's
     * keys, and where KEYS keeps its tiles' results */
    int64_t *run_start = (int64_t *)malloc(sizeof(int64_t) * 4 * (num_tokens + 1));
    if (!run_start) return -1;
    int64_t *run_tiles = run_start + (num_tokens + 1), *run_keys = run_tiles + (num_tokens + 1);
    int64_t *part_base = run_keys + (num_tokens + 1);
    /* runs of at most run_max tokens (QUERIES_MAX query vectors per KV head) */
    const int64_t run_max = QUERIES_MAX / group > 1 ? QUERIES_MAX / group : 1;
    int64_t runs = 0, tiles = 0, part_floats = 0;
    for (int64_t i = 0; i < num_tokens; i++)
        if (i == 0 || token_seq[i] != token_seq[i - 1] || i - run_start[runs - 1] >= run_max) run_start[runs++] = i;
    run_start[runs] = num_tokens;
    for (int64_t r = 0; r < runs; r++) {
        int64_t len = 0;
        for (int64_t i = run_start[r]; i < run_start[r + 1]; i++) len = visible[i] > len ? visible[i] : len;
        const int64_t n = (len + KV_TILE - 1) / KV_TILE;
        run_tiles[r] = tiles, run_keys[r] = len, part_base[r] = part_floats;
        tiles += n;
        part_floats += n * (run_start[r + 1] - run_start[r]) * num_heads * w;
    }
    run_tiles[runs] = tiles;
    const int keys = tiles >= 2 * (int64_t)nthreads && part_floats <= PARTS_MAX;
    /* HEADS: the query heads of a KV head cut in parts of `per` while the runs and KV heads are too few tasks */
    int64_t split = ((int64_t)nthreads + runs * num_kv_heads - 1) / (runs * num_kv_heads);
    split = split < 1 ? 1 : split > group ? group : split;
    const int per = (int)((group + split - 1) / split), nparts = (group + per - 1) / per;
    const int heads = !keys && runs < 2 * (int64_t)nthreads;
    const int64_t tasks = heads ? runs * num_kv_heads * nparts : runs;
    float *parts = keys ? (float *)malloc(sizeof(float) * (size_t)part_floats) : NULL;
    if (keys && !parts) {
        free(run_start);
        return -1;
    }
    const attention_call c = {q, k_cache, v_cache, q_stride, kv_row, max_blocks, token_seq, visible, block_tables,
                              run_start, num_heads, group, head_dim, block_size, scale, out};
    int failed = 0;
#pragma omp parallel num_threads(nthreads) if (work * num_heads * head_dim >= 32768)
    {
        attention_scratch s;
        const int ok = scratch_alloc(&s, heads ? run_max * per : run_max * num_heads, head_dim) == 0;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
        if (keys) {
#if defined(_OPENMP)
            const int team = omp_get_num_threads(), me = omp_get_thread_num();
#else
            const int team = 1, me = 0;
#endif
            /* a tile is this thread's when its middle key falls in the thread's share of all runs' keys */
            int64_t keys_total = 0;
            for (int64_t r = 0; r < runs; r++) keys_total += run_keys[r];
            for (int64_t r = 0, before = 0; ok && r < runs; r++) {
                int64_t ta = -1, tb = -1;
                for (int64_t t = 0; t < run_tiles[r + 1] - run_tiles[r]; t++) {
                    const int64_t n = run_keys[r] - t * KV_TILE < KV_TILE ? run_keys[r] - t * KV_TILE : KV_TILE;
                    if ((2 * before + n) * team / (2 * keys_total) == me) {
                        ta = ta < 0 ? t : ta;
                        tb = t + 1;
                    }
                    before += n;
                }
                if (ta >= 0) attend_tiles(&c, r, 0, num_kv_heads, 0, group, ta, tb, &s, parts + part_base[r]);
            }
#pragma omp barrier
#pragma omp for schedule(static)
            for (int64_t i = 0; i < num_tokens * num_heads; i++) {
                if (!ok) continue;
                const int64_t tok = i / num_heads, head = i % num_heads;
                int64_t r = 0;
                while (run_start[r + 1] <= tok) r++;
                const int64_t tg = run_start[r + 1] - run_start[r], u = tok - run_start[r];
                const int64_t nq = tg * num_heads, l = query_index(head / group, u, head % group, tg, group);
                float *state = s.states;
                state[ATT_SUM] = NOTHING;
                const float *p = parts + part_base[r];
                for (int64_t t = 0; t < run_tiles[r + 1] - run_tiles[r]; t++)
                    if (p[(t * nq + l) * w + ATT_SUM] != NOTHING) fold_tile(state, p + (t * nq + l) * w, head_dim);
                float *o = out + i * (int64_t)head_dim;
                attention_result(state, head_dim, o);
            }
        } else {
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < tasks; task++) {
                if (!ok) continue; /* every thread still takes part in the loop */
                if (heads) {
                    const int64_t run = task / (num_kv_heads * nparts);
                    const int kvh = (int)(task / nparts % num_kv_heads), p0 = (int)(task % nparts) * per;
                    attend_tiles(&c, run, kvh, 1, p0, p0 + per <= group ? per : group - p0, 0, INT64_MAX, &s, NULL);
                } else {
                    attend_tiles(&c, task, 0, num_kv_heads, 0, group, 0, INT64_MAX, &s, NULL);
                }
            }
        }
        scratch_free(&s);
    }
    free(parts);
    free(run_start);
    return failed ? -1 : 0;
}

/* Rotary embedding in place on `heads` heads of D floats per row (row i at x + i * ldx), transformers' rotation
 * as tiers/models/rotary.py computes it, bit for bit: x * cos + roll(x, D/2) * signed_sin, cos and signed_sin
 * [T, D] (the rows' positions), each product rounded before the sum (no contraction under -std=c11). */
void aio_rotary(float *x, int64_t ldx, int64_t T, int heads, int D, const float *cos, const float *signed_sin) {
    const int half = D / 2;
    float tmp[1024];
    for (int64_t i = 0; i < T; i++) {
        const float *c = cos + i * D, *s = signed_sin + i * D;
        for (int h = 0; h < heads; h++) {
            float *xh = x + i * ldx + (int64_t)h * D;
            memcpy(tmp, xh, sizeof(float) * D);
            for (int d = 0; d < D; d++) {
                const float a = tmp[d] * c[d], b = tmp[d < half ? d + half : d - half] * s[d];
                xh[d] = a + b;
            }
        }
    }
}
