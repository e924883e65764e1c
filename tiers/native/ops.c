/* The small float32 ops of a step that cost more in torch's per-op overhead than in arithmetic: RMSNorm,
 * SiLU-and-mul, and paged attention (KV store included). One call replaces 3-30 torch ops. Plain C loops that the
 * compiler vectorises (-O3 -march=native); rows, tokens and heads run on OpenMP threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* out[m] = w * (x[m] * rsqrt(mean(x[m]^2) + eps)), torch's order of operations */
void aio_rmsnorm(const float *x, int64_t ldx, const float *w, float *out, int64_t M, int64_t K, float eps,
                 int nthreads) {
#pragma omp parallel for schedule(static) num_threads(nthreads) if (M * K >= 65536)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * ldx;
        float *o = out + m * K;
        float ss = 0.0f;
        for (int64_t i = 0; i < K; i++) ss += xr[i] * xr[i];
        const float r = 1.0f / sqrtf(ss / (float)K + eps);
        for (int64_t i = 0; i < K; i++) o[i] = w[i] * (xr[i] * r);
    }
}

/* e^x in plain operations the compiler vectorises (libm's expf is a scalar call per element, the bulk of SiLU's
 * and a short context's softmax time): x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts), e^r by
 * its Taylor series to r^7 (truncation < 3e-9 relative), times 2^n through the exponent bits (floorf does not
 * vectorise under -std=c11: n is rounded by adding and taking away 1.5 * 2^23); n kept in
 * [-126, 127]: below -87.3 the result stays 1.2e-38 instead of 0, above 88.7 it stays 3.3e38 instead of inf (a
 * softmax's and SiLU's results alike). Within 1 ulp of e^x (1.03e-7 relative, measured over the range), and the
 * same bits in a vector lane as in the scalar remainder (no contraction under -std=c11), so a token's result does
 * not depend on where its element falls. */
static inline float exp_vec(float x) {
    x = x < -87.3f ? -87.3f : x > 88.7f ? 88.7f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* to nearest: 1.5 * 2^23's ulp is 1 */
    n = n > 127.0f ? 127.0f : n;
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (
        1.0f / 720 + r * (1.0f / 5040)))))));
    const union { int32_t bits; float value; } scale = {.bits = ((int32_t)n + 127) << 23};
    return p * scale.value;
}

/* out[m, i] = silu(gate_up[m, i]) * gate_up[m, I + i]; split in runs of SILU_RUN across the threads, a decode
 * step's single row too */
#define SILU_RUN 1024
void aio_silu_mul(const float *gate_up, float *out, int64_t M, int64_t I, int nthreads) {
    const int64_t runs = (I + SILU_RUN - 1) / SILU_RUN;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (M * I >= 4096)
    for (int64_t t = 0; t < M * runs; t++) {
        const int64_t m = t / runs, i0 = (t % runs) * SILU_RUN, i1 = i0 + SILU_RUN < I ? i0 + SILU_RUN : I;
        const float *g = gate_up + m * 2 * I, *u = g + I;
        float *o = out + m * I;
        for (int64_t i = i0; i < i1; i++) o[i] = g[i] / (1.0f + exp_vec(-g[i])) * u[i];
    }
}

#define LANES 16

/* per row of logits [M, V] (rows contiguous): the first index of the largest value (torch.argmax's choice) and its
 * softmax probability 1 / sum(exp(x - max)); -inf entries add (nearly) nothing. One call without temporaries: a
 * draft token and its confidence, where torch's ops took ~0.9 ms over 151,936 logits right after the layers. */
void aio_argmax_prob(const float *logits, int64_t M, int64_t V, int64_t *token, float *prob) {
    for (int64_t m = 0; m < M; m++) {
        const float *x = logits + m * V;
        float top = x[0];
        for (int64_t i = 1; i < V; i++) top = x[i] > top ? x[i] : top;
        int64_t best = 0;
        while (best < V - 1 && !(x[best] == top)) best++;
        float part[LANES] = {0};
        int64_t i = 0;
        for (; i + LANES <= V; i += LANES)
            for (int j = 0; j < LANES; j++) part[j] += exp_vec(x[i + j] - top);
        float sum = 0.0f;
        for (int j = 0; j < LANES; j++) sum += part[j];
        for (; i < V; i++) sum += exp_vec(x[i] - top);
        token[m] = best;
        prob[m] = 1.0f / sum;
    }
}

/* q . k over D floats, in LANES partial sums (a fixed order the compiler turns into vector FMAs) */
static inline float dot_lanes(const float *a, const float *b, int D) {
    float part[LANES] = {0};
    int d = 0;
    for (; d + LANES <= D; d += LANES)
        for (int j = 0; j < LANES; j++) part[j] += a[d + j] * b[d + j];
    float s = 0.0f;
    for (int j = 0; j < LANES; j++) s += part[j];
    for (; d < D; d++) s += a[d] * b[d];
    return s;
}

/* Paged attention for any step, one query token at a time (so a token's result does not depend on how its
 * sequence was chunked or batched): stores each token's new k / v at slot_mapping[i] of the caches
 * ([num_blocks * block_size, Hkv, D]), then
 *   out[i, h] = softmax(scale * q[i, h] . K^T) V over the first visible[i] tokens of sequence token_seq[i],
 * KV head h / (H / Hkv), the tokens found through block_tables[token_seq[i]] ([num_seqs, max_blocks]).
 * q, k, v: row i at q + i * q_stride (H heads of D), k + i * k_stride, v + i * v_stride (Hkv heads of D).
 * Returns 0, or -1 when memory ran out. */
int aio_paged_attention(const float *q, int64_t q_stride, const float *k, int64_t k_stride, const float *v,
                        int64_t v_stride, float *k_cache, float *v_cache, const int64_t *slot_mapping,
                        int64_t num_tokens, const int64_t *token_seq, const int64_t *visible,
                        const int64_t *block_tables, int64_t max_blocks, int num_heads, int num_kv_heads,
                        int head_dim, int block_size, float scale, float *out, int nthreads) {
    const int64_t kv_row = (int64_t)num_kv_heads * head_dim;
    for (int64_t i = 0; i < num_tokens; i++) {
        memcpy(k_cache + slot_mapping[i] * kv_row, k + i * k_stride, sizeof(float) * kv_row);
        memcpy(v_cache + slot_mapping[i] * kv_row, v + i * v_stride, sizeof(float) * kv_row);
    }
    int64_t longest = 1, work = 0;
    for (int64_t i = 0; i < num_tokens; i++) {
        longest = visible[i] > longest ? visible[i] : longest;
        work += visible[i];
    }
    /* a task: one token's query heads of one KV head (or a part of them, while the tokens and KV heads alone give
     * the threads too few tasks), each K / V row read once for all of them; every head's arithmetic is the same
     * as alone, in the same order */
    const int group = num_heads / num_kv_heads;
    int64_t split = (2 * (int64_t)nthreads + num_tokens * num_kv_heads - 1) / (num_tokens * num_kv_heads);
    split = split < 1 ? 1 : split > group ? group : split;
    const int per = (int)((group + split - 1) / split);
    const int64_t parts = (group + per - 1) / per, tasks = num_tokens * num_kv_heads * parts;
    int failed = 0;
#pragma omp parallel num_threads(nthreads) if (work * num_heads * head_dim >= 32768)
    {
        float *scores = (float *)malloc(sizeof(float) * longest * per);
        float *acc = (float *)malloc(sizeof(float) * head_dim * per);
        float *top = (float *)malloc(sizeof(float) * per), *total = (float *)malloc(sizeof(float) * per);
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            if (!scores || !acc || !top || !total) { /* every thread still takes part in the loop */
#pragma omp atomic write
                failed = 1;
                continue;
            }
            const int64_t i = task / (num_kv_heads * parts), len = visible[i];
            const int kvh = (int)(task / parts % num_kv_heads), h0 = kvh * group + (int)(task % parts) * per;
            const int nh = h0 + per <= (kvh + 1) * group ? per : (kvh + 1) * group - h0;
            const int64_t *table = block_tables + token_seq[i] * max_blocks;
            const float *q0 = q + i * q_stride + (int64_t)h0 * head_dim;
            for (int g = 0; g < nh; g++) top[g] = -INFINITY;
            for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, blk++) {
                const float *kb = k_cache + (table[blk] * block_size * kv_row) + (int64_t)kvh * head_dim;
                const int64_t n = len - t0 < block_size ? len - t0 : block_size;
                for (int64_t j = 0; j < n; j++)
                    for (int g = 0; g < nh; g++) {
                        const float sc = dot_lanes(q0 + (int64_t)g * head_dim, kb + j * kv_row, head_dim) * scale;
                        scores[g * longest + t0 + j] = sc;
                        top[g] = sc > top[g] ? sc : top[g];
                    }
            }
            for (int g = 0; g < nh; g++) {
                float *sg = scores + g * longest;
                for (int64_t j = 0; j < len; j++) sg[j] = exp_vec(sg[j] - top[g]);
                total[g] = 0.0f;
            }
            for (int64_t d = 0; d < (int64_t)nh * head_dim; d++) acc[d] = 0.0f;
            for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, blk++) {
                const float *vb = v_cache + (table[blk] * block_size * kv_row) + (int64_t)kvh * head_dim;
                const int64_t n = len - t0 < block_size ? len - t0 : block_size;
                for (int64_t j = 0; j < n; j++) {
                    const float *vt = vb + j * kv_row;
                    for (int g = 0; g < nh; g++) {
                        const float p = scores[g * longest + t0 + j];
                        float *ag = acc + (int64_t)g * head_dim;
                        total[g] += p;
                        for (int d = 0; d < head_dim; d++) ag[d] += p * vt[d];
                    }
                }
            }
            for (int g = 0; g < nh; g++) {
                float *o = out + (i * num_heads + h0 + g) * (int64_t)head_dim;
                for (int d = 0; d < head_dim; d++) o[d] = acc[(int64_t)g * head_dim + d] / total[g];
            }
        }
        free(scores);
        free(acc);
        free(top);
        free(total);
    }
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
