/* GGUF block types as stored, run natively: K-quants (Q4_K, Q5_K, Q6_K: super-blocks of 256) and the 32-blocks
 * Q5_0, Q5_1, Q8_0 (and Q4_0, Q4_1). llama.cpp's ggml is the reference for the layouts (ggml-common.h):
 *   Q4_K 144 bytes: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins (8 each), 128 bytes of nibbles;
 *        sub-block j of 32 (j = 2c + h): nibble h of qs[32c .. 32c + 31]; value = d * sc_j * q - dmin * m_j
 *   Q5_K 176 bytes: as Q4_K plus qh[32] before qs: bit j of qh[l] is the fifth bit of element l of sub-block j
 *   Q6_K 210 bytes: ql[128], qh[64], int8 scales[16], fp16 d; value = d * sc_{e / 16} * (q - 32), q 6 bits
 *   Q8_0 34 bytes: fp16 d, int8 q[32]; Q5_0 22: fp16 d, uint32 qh, qs[16] (value d * (q - 16));
 *   Q5_1 24: fp16 d, fp16 m, qh, qs (d * q + m); Q4_0 18: d, qs[16] (d * (q - 8)); Q4_1 20: d, m, qs (d * q + m)
 * A weight row is its blocks back to back, as in the file. Q4_K and Q6_K are repacked at load (aio_kq_repack: Q4_K_R,
 * Q6_K_R, the same bytes per block, codes reordered so that one vpdpbusd per 64 codes and row needs no shuffle and
 * the scales come once per group); the stored layouts still run, for a caller that did not repack.
 *
 * Activations are quantized per row to int8 (d = max|x| / 127, round half to even): per block of 256 for the
 * K-quants (ggml's Q8_K, with the sums of each 16), per block of 32 for the 32-blocks (Q8_0). Repacked K-quants: 16
 * int32 lanes per group, one per 16 elements, scaled in floats once per group (kr_rows). Stored K-quants: per group
 * of 256 the dot product of the unsigned codes with the activations, times the integer sub-block scales, is summed
 * exactly in 8 int32 lanes (pmaddubsw, then pmaddwd / vpdpwssd by the scales), then converted once:
 * acc[k] = fma(float(isum[k]), d_w * d_act, acc[k]) (kk_rows_c has the whole arithmetic). 32-blocks: per block
 * the integer dot goes into 8 int32 lanes, lane k holding elements 4k .. 4k + 3, added to 8 float lanes:
 * acc[k] = fma(float(isum[k]), scale * d_act, acc[k]); a min adds min * d_act * sum(q_act) to one float. The
 * integer sums are exact and the float steps are the same operations in the same order on every path, so AVX-512
 * VNNI, AVX2 and plain C give the same bits, and a row's result does not depend on the batch it came in.
 */
#define _DEFAULT_SOURCE /* sysconf's cache sizes */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "kept_block.h"
#include "q8.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__)
#define KQ_VNNI 1
#define KQ_SIMD 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KQ_SIMD 1
#include <immintrin.h>
#endif

#define QK 32
#define QK_K 256
#define KQ_ROWS 4
#ifndef KR_ROWS
#define KR_ROWS 8 /* activation rows per tile of the repacked types (SIMD paths): a verification's k + 1 rows read the
                   * weight once */
#endif
#define KQ_CHUNK 16
/* Weights are read once per step, so they are prefetched in two stages: into L2 KQ_PREFETCH_L2 bytes ahead of the
 * group being read, into L1 KQ_PREFETCH ahead. A demand stream consumed as slowly as these kernels consume it (some
 * 20 cycles per 144-byte group) does not keep enough misses in flight on its own: with no software prefetch the 1.5B's
 * shapes read 16-19 GB/s where a plain read loop reads 31; 4 KB ahead into L1 alone reached 22-26; the two stages
 * 24-30 (docs/benchmarks.md, issue 37's fifth pass). */
#ifndef KQ_PREFETCH
#define KQ_PREFETCH 2048 /* 1 KB: 1-4% less at one row on the 1.5B's four shapes, two runs; 5 rows mixed */
#endif
#ifndef KQ_PREFETCH_L2
#define KQ_PREFETCH_L2 8192
#endif

/* GGML type ids; 256 + a GGUF id: that type's blocks repacked for this kernel (aio_kq_repack) */
enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14 };
enum { T_REPACKED = 256, T_Q4_K_R = T_REPACKED + T_Q4_K, T_Q6_K_R = T_REPACKED + T_Q6_K,
       T_Q5_0_R = T_REPACKED + T_Q5_0 };
#define QR5 128 /* Q5_0_R's group: 4 blocks of 32 */

static inline int stored_type(int type) { return type >= T_REPACKED ? type - T_REPACKED : type; }
static int64_t group_elems(int type) { return type == T_Q5_0_R ? QR5 : type >= T_Q4_K ? QK_K : QK; }

static int64_t group_bytes(int type) {
    switch (type) {
    case T_Q4_K_R: return 144;
    case T_Q6_K_R: return 210;
    case T_Q5_0_R: return 88;
    case T_Q4_0: return 18;
    case T_Q4_1: return 20;
    case T_Q5_0: return 22;
    case T_Q5_1: return 24;
    case T_Q8_0: return 34;
    case T_Q4_K: return 144;
    case T_Q5_K: return 176;
    case T_Q6_K: return 210;
    default: return 0;
    }
}

/* bytes of one weight row of K elements, 0 for an unknown type or a K the type's blocks do not divide */
static inline int64_t row_bytes(int type, int64_t K) {
    const int64_t g = group_elems(type), b = group_bytes(type);
    return b && K > 0 && K % g == 0 ? K / g * b : 0;
}
int64_t aio_kq_row_bytes(int type, int64_t K) { return row_bytes(type, K); }

static inline float fp16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(KQ_SIMD)
    return _cvtsh_ss(h);
#endif
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    if (exp == 0) {
        const float f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    const uint32_t bits = sign | (exp == 0x1F ? 0x7F800000u | (mant << 13) : ((exp + 112) << 23) | (mant << 13));
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (ggml's get_scale_min_k4) */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* codes kept signed (value = scale * code): Q5_0 and Q4_0 as q - 16 / q - 8, which is gguf's own formula */
static inline int is_signed(int type) {
    type = stored_type(type);
    return type == T_Q6_K || type == T_Q8_0 || type == T_Q5_0 || type == T_Q4_0;
}
static inline int subs_per_group(int type) { return (int)(group_elems(type) / QK); }

/* A group's float scales: lo[j] / hi[j] for lanes 0-3 / 4-7 of sub-block j, mn[j] its min (0 when none) */
static inline void group_scales(int type, const uint8_t *g, float *lo, float *hi, float *mn) {
    switch (type) {
    case T_Q4_K:
    case T_Q5_K: {
        const float d = fp16(g), dmin = fp16(g + 2);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            int sc, m;
            scale_min_k4(j, g + 4, &sc, &m);
            lo[j] = hi[j] = d * (float)sc;
            mn[j] = -(dmin * (float)m);
        }
        break;
    }
    case T_Q6_K: {
        const float d = fp16(g + 208);
        const int8_t *sc = (const int8_t *)(g + 192);
        for (int j = 0; j < 8; j++) {
            lo[j] = d * (float)sc[2 * j];
            hi[j] = d * (float)sc[2 * j + 1];
            mn[j] = 0.0f;
        }
        break;
    }
    case T_Q8_0: lo[0] = hi[0] = fp16(g); mn[0] = 0.0f; break;
    case T_Q4_0:
    case T_Q5_0: lo[0] = hi[0] = fp16(g); mn[0] = 0.0f; break;
    default: /* Q4_1, Q5_1 */ lo[0] = hi[0] = fp16(g); mn[0] = fp16(g + 2); break;
    }
}

/* The 32 codes of sub-block j of group g, natural order (unsigned, or signed for Q6_K / Q8_0), plain C. */
static inline void codes_c(int type, const uint8_t *g, int j, uint8_t *out) {
    switch (type) {
    case T_Q4_K: {
        const uint8_t *qs = g + 16 + 32 * (j >> 1);
        for (int l = 0; l < 32; l++) out[l] = (j & 1) ? qs[l] >> 4 : qs[l] & 0x0F;
        break;
    }
    case T_Q5_K: {
        const uint8_t *qh = g + 16, *qs = g + 48 + 32 * (j >> 1);
        for (int l = 0; l < 32; l++)
            out[l] = (uint8_t)(((j & 1) ? qs[l] >> 4 : qs[l] & 0x0F) | (((qh[l] >> j) & 1) << 4));
        break;
    }
    case T_Q6_K: {
        const int h = j >> 2, q = j & 3;
        const uint8_t *ql = g + 64 * h + 32 * (q & 1), *qh = g + 128 + 32 * h;
        for (int l = 0; l < 32; l++)
            out[l] = (uint8_t)(int8_t)((((q >= 2) ? ql[l] >> 4 : ql[l] & 0x0F) | (((qh[l] >> (2 * q)) & 3) << 4)) - 32);
        break;
    }
    case T_Q8_0: memcpy(out, g + 2, 32); break;
    case T_Q4_0:
    case T_Q4_1: {
        const uint8_t *qs = g + (type == T_Q4_0 ? 2 : 4);
        const int off = type == T_Q4_0 ? 8 : 0;
        for (int l = 0; l < 16; l++) {
            out[l] = (uint8_t)((qs[l] & 0x0F) - off);
            out[l + 16] = (uint8_t)((qs[l] >> 4) - off);
        }
        break;
    }
    default: { /* Q5_0, Q5_1 */
        const int off = type == T_Q5_0 ? 2 : 4;
        uint32_t qh;
        memcpy(&qh, g + off, 4);
        const uint8_t *qs = g + off + 4;
        const int sub = type == T_Q5_0 ? 16 : 0;
        for (int l = 0; l < 16; l++) {
            out[l] = (uint8_t)(((qs[l] & 0x0F) | (((qh >> l) & 1) << 4)) - sub);
            out[l + 16] = (uint8_t)(((qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4)) - sub);
        }
        break;
    }
    }
}

/* Q4_K_R / Q6_K_R, the layout aio_kq_repack gives Q4_K / Q6_K at load: the same bytes per group, the 256 codes
 * reordered as 4 vectors of 64 whose byte p of vector v is element 16 (p / 4) + 4 v + p % 4. Every int32 lane k of
 * every vector (bytes 4k .. 4k + 3) then belongs to elements 16k .. 16k + 15: one Q6_K scale's, half a Q4_K
 * sub-block's. One vpdpbusd per vector and activation row sums a group per lane; the scales come once per group.
 *   Q4_K_R 144 bytes: d, dmin and the 12 bytes of scales and mins as Q4_K; then per vector 32 bytes, byte b's
 *          low nibble position b, its high nibble position 32 + b
 *   Q6_K_R 210 bytes: per vector 32 bytes of the codes' low nibbles as Q4_K_R's; per vector 16 bytes of their top
 *          two bits (bits 2t, 2t + 1 of byte i: position 16t + i); Q6_K's 16 int8 scales and fp16 d
 * Q4_K_R rows are stored in pairs of groups (288 bytes; a row's odd last group alone, as above), so that an int32
 * lane sums the 32 elements of one sub-block and a vector's 16 lanes hold the 8 sub-blocks of both groups: the float
 * steps per activation row (conversion, scaling, the two FMAs) come once per pair instead of once per group.
 *   pair  the two groups' 16-byte heads (d, dmin, the 12 bytes of scales and mins); then 8 vectors of 32 bytes:
 *         byte 4k + i of vector u holds, in its low nibble, element 32k + 4u + i of the first group (lane k) and in
 *         its high nibble the same element of the second (lane 8 + k)
 * Q5_0_R rows are stored in groups of 8 blocks (256 elements, 176 bytes: the 8 fp16 d, 4 vectors of 64 codes as 32
 * bytes of nibbles each, then 8 bytes of fifth bits per vector; byte p of vector v is element 16 (p / 4) + 4 v + p % 4:
 * an int32 lane per 16 elements, two per block), a row's last 128 elements when K / 128 is odd in one group of 4: */
/* Q5_0_R's group of 4 blocks (128 elements, 88 bytes): the 4 fp16 d; then 2 vectors of 64 codes whose byte p of
 * vector v is element 8 (p / 4) + 4 v + p % 4 (int32 lane k: elements 8k .. 8k + 7, block k / 4), as 32 bytes of
 * nibbles (as Q4_K_R's) each, then per vector 8 bytes whose bit p is position p's fifth bit. */
/* n codes (256, or Q5_0_R's 128) from natural order to the repacked vectors' (r[64 v + p]) and back: with lanes of
 * w = n / 16 elements, byte p of vector v is element w (p / 4) + 4 v + p % 4, runs of 4 bytes transposed */
static inline void to_vectors(const uint8_t *natural, int n, uint8_t *r) {
    for (int k = 0; k < 16; k++)
        for (int v = 0; v < n / 64; v++) memcpy(r + 64 * v + 4 * k, natural + n / 16 * k + 4 * v, 4);
}
static inline void from_vectors(const uint8_t *r, int n, uint8_t *natural) {
    for (int k = 0; k < 16; k++)
        for (int v = 0; v < n / 64; v++) memcpy(natural + n / 16 * k + 4 * v, r + 64 * v + 4 * k, 4);
}

/* the low 4 bits of n codes in vector order as n / 2 bytes: byte 32 v + b holds position b of vector v in its low
 * nibble and position 32 + b in its high one; nibbles_unpack gives them back (their upper bits 0) */
static inline void nibbles_pack(const uint8_t *r, int n, uint8_t *out) {
    for (int v = 0; v < n / 64; v++)
        for (int b = 0; b < 32; b++)
            out[32 * v + b] = (uint8_t)((r[64 * v + b] & 0x0F) | ((r[64 * v + 32 + b] & 0x0F) << 4));
}
static inline void nibbles_unpack(const uint8_t *in, int n, uint8_t *r) {
    for (int v = 0; v < n / 64; v++)
        for (int b = 0; b < 32; b++) {
            r[64 * v + b] = in[32 * v + b] & 0x0F;
            r[64 * v + 32 + b] = in[32 * v + b] >> 4;
        }
}

/* a stored Q4_K / Q6_K group's 256 codes, unsigned (Q6_K's 0..63), natural order */
static void codes_stored(int type, const uint8_t *g, uint8_t *c) {
    for (int j = 0; j < 8; j++) codes_c(type, g, j, c + 32 * j);
    if (type == T_Q6_K)
        for (int i = 0; i < QK_K; i++) c[i] = (uint8_t)((int8_t)c[i] + 32);
}

/* a single Q4_K_R / Q6_K_R group's 256 codes, unsigned, natural order: decoded in the repacked order (contiguous
 * loops, which vectorize), then moved 4 at a time (Q4_K_R pairs: pair_codes; Q5_0_R: q5_0_group_codes) */
static inline void codes_repacked(int type, const uint8_t *g, uint8_t *c) {
    uint8_t r[QK_K];
    nibbles_unpack(g + (type == T_Q4_K_R ? 16 : 0), QK_K, r);
    if (type == T_Q6_K_R)
        for (int v = 0; v < 4; v++)
            for (int t = 0; t < 4; t++)
                for (int i = 0; i < 16; i++)
                    r[64 * v + 16 * t + i] |= (uint8_t)(((g[128 + 16 * v + i] >> (2 * t)) & 3) << 4);
    from_vectors(r, QK_K, c);
}

/* Where code p (0..63) of a Q5_0_R vector keeps its fifth bit in the vector's 64-bit word: code p is byte b of
 * qword i of half h (p = 32h + 8i + b), its bit at 8b + 4 + i in half 0 and at 8b + i in half 1. The word broadcast
 * to every qword and shifted right by i (half 0) or left by 4 - i (half 1) puts each code's bit at bit 4 of its
 * byte: one variable shift and an and per 32 codes (bit p in p's place took AVX2 a broadcast from a general
 * register, a byte shuffle, a compare and two ands). */
static inline int q5r_bit(int p) {
    const int h = p / 32, i = p % 32 / 8, b = p % 8;
    return 8 * b + (h ? 0 : 4) + i;
}

/* the G blocks of Q5_0 at `blocks` (G = 4 or 8, stored) as one Q5_0_R group of G blocks at g (22 G bytes) */
static void q5_0_group_pack(const uint8_t *blocks, int G, uint8_t *g) {
    uint8_t c[QK_K], r[QK_K];
    const int n = 32 * G;
    for (int b = 0; b < G; b++) {
        codes_c(T_Q5_0, blocks + 22 * b, 0, c + 32 * b);
        memcpy(g + 2 * b, blocks + 22 * b, 2);
    }
    for (int i = 0; i < n; i++) c[i] = (uint8_t)((int8_t)c[i] + 16);
    to_vectors(c, n, r);
    nibbles_pack(r, n, g + 2 * G);
    for (int v = 0; v < n / 64; v++) {
        uint64_t bits = 0;
        for (int p = 0; p < 64; p++) bits |= (uint64_t)(r[64 * v + p] >> 4) << q5r_bit(p);
        memcpy(g + 18 * G + 8 * v, &bits, 8);
    }
}

/* a Q5_0_R group of G blocks' 32 G codes, unsigned (0..31), natural order */
static void q5_0_group_codes(const uint8_t *g, int G, uint8_t *c) {
    uint8_t r[QK_K];
    const int n = 32 * G;
    nibbles_unpack(g + 2 * G, n, r);
    for (int v = 0; v < n / 64; v++) {
        uint64_t bits;
        memcpy(&bits, g + 18 * G + 8 * v, 8);
        for (int p = 0; p < 64; p++) r[64 * v + p] |= (uint8_t)(((bits >> q5r_bit(p)) & 1) << 4);
    }
    from_vectors(r, n, c);
}

/* a row of K elements of Q5_0 (K a multiple of 128) rewritten in place as Q5_0_R: groups of 8, a last group of 4 */
static void repack_q5_0_row(uint8_t *row, int64_t K) {
    uint8_t blocks[176];
    for (int64_t e = 0; e < K; e += 256) {
        const int G = K - e >= 256 ? 8 : 4;
        uint8_t *g = row + e / 32 * 22;
        memcpy(blocks, g, 22 * G);
        q5_0_group_pack(blocks, G, g);
    }
}

/* 128-element group gi of a Q5_0_R row of K as the 4 stored Q5_0 blocks it came from (88 bytes into out) */
static void q5_0_r_blocks(const uint8_t *row, int64_t K, int64_t gi, uint8_t *out) {
    const int64_t e = gi / 2 * 256;
    const int G = K - e >= 256 ? 8 : 4, first = G == 8 ? 4 * (int)(gi & 1) : 0;
    const uint8_t *g = row + e / 32 * 22;
    uint8_t c[QK_K];
    q5_0_group_codes(g, G, c);
    for (int b = 0; b < 4; b++) {
        uint8_t *blk = out + 22 * b;
        const uint8_t *cb = c + 32 * (first + b);
        uint32_t qh = 0;
        memcpy(blk, g + 2 * (first + b), 2);
        for (int l = 0; l < 32; l++) qh |= (uint32_t)(cb[l] >> 4) << l;
        memcpy(blk + 2, &qh, 4);
        for (int l = 0; l < 16; l++) blk[6 + l] = (uint8_t)((cb[l] & 0x0F) | ((cb[l + 16] & 0x0F) << 4));
    }
}

/* one stored Q4_K group g into the single-group Q4_K_R layout (head kept, codes as vectors of nibbles) */
static void repack_q4_k_group(uint8_t *g) {
    uint8_t c[QK_K], r[QK_K];
    codes_stored(T_Q4_K, g, c);
    to_vectors(c, QK_K, r);
    nibbles_pack(r, QK_K, g + 16);
}

/* a Q4_K_R pair's 256 codes of its first (h = 0) or second group, natural order */
static void pair_codes(const uint8_t *pair, int h, uint8_t *c) {
    for (int u = 0; u < 8; u++)
        for (int k = 0; k < 8; k++)
            for (int i = 0; i < 4; i++) {
                const uint8_t b = pair[32 + 32 * u + 4 * k + i];
                c[32 * k + 4 * u + i] = h ? b >> 4 : b & 0x0F;
            }
}

/* a row of ng stored Q4_K groups rewritten as Q4_K_R: pairs, and the odd last group alone */
static void repack_q4_k_row(uint8_t *row, int64_t ng) {
    for (int64_t p = 0; p + 1 < ng; p += 2) {
        uint8_t *pair = row + p * 144, c[2][QK_K];
        codes_stored(T_Q4_K, pair, c[0]);
        codes_stored(T_Q4_K, pair + 144, c[1]);
        memmove(pair + 16, pair + 144, 16);
        for (int u = 0; u < 8; u++)
            for (int k = 0; k < 8; k++)
                for (int i = 0; i < 4; i++)
                    pair[32 + 32 * u + 4 * k + i] =
                        (uint8_t)(c[0][32 * k + 4 * u + i] | (c[1][32 * k + 4 * u + i] << 4));
    }
    if (ng & 1) repack_q4_k_group(row + (ng - 1) * 144);
}

/* group gi of a Q4_K_R row of ng groups as the stored Q4_K group it came from (144 bytes into out) */
static void q4_k_r_group_stored(const uint8_t *row, int64_t ng, int64_t gi, uint8_t *out) {
    uint8_t c[QK_K];
    if (gi + 1 == ng && (ng & 1)) {
        const uint8_t *g = row + gi * 144;
        memcpy(out, g, 16);
        codes_repacked(T_Q4_K_R, g, c);
    } else {
        const uint8_t *pair = row + (gi & ~(int64_t)1) * 144;
        memcpy(out, pair + 16 * (gi & 1), 16);
        pair_codes(pair, (int)(gi & 1), c);
    }
    for (int ch = 0; ch < 4; ch++) /* qs[32 ch + l]: sub-block 2 ch in the low nibble, 2 ch + 1 in the high one */
        for (int l = 0; l < 32; l++) out[16 + 32 * ch + l] = (uint8_t)(c[64 * ch + l] | (c[64 * ch + 32 + l] << 4));
}

/* N rows of K elements of Q4_K, Q6_K or Q5_0 blocks rewritten in place as Q4_K_R / Q6_K_R / Q5_0_R. Returns the new
 * type id, or -1 for a type this layout does not take or a K its groups do not divide. */
int aio_kq_repack(uint8_t *w, int64_t N, int64_t K, int type) {
    if (type == T_Q5_0 && row_bytes(T_Q5_0_R, K)) {
        for (int64_t n = 0; n < N; n++) repack_q5_0_row(w + n * row_bytes(T_Q5_0_R, K), K);
        return T_Q5_0_R;
    }
    if ((type != T_Q4_K && type != T_Q6_K) || !row_bytes(type, K)) return -1;
    const int64_t gb = group_bytes(type), groups = N * (K / QK_K);
    if (type == T_Q4_K) {
        for (int64_t n = 0; n < N; n++) repack_q4_k_row(w + n * row_bytes(type, K), K / QK_K);
        return T_Q4_K_R;
    }
    for (int64_t gi = 0; gi < groups; gi++) {
        uint8_t *g = w + gi * gb, c[QK_K], r[QK_K];
        codes_stored(type, g, c);
        to_vectors(c, QK_K, r);
        nibbles_pack(r, QK_K, g + (type == T_Q4_K ? 16 : 0));
        if (type == T_Q6_K)
            for (int v = 0; v < 4; v++)
                for (int i = 0; i < 16; i++) {
                    int top = 0;
                    for (int t = 0; t < 4; t++) top |= (r[64 * v + 16 * t + i] >> 4) << (2 * t);
                    g[128 + 16 * v + i] = (uint8_t)top;
                }
    }
    return T_REPACKED + type;
}

/* Round-to-nearest-even float32 -> bfloat16 bits (finite inputs; what torch's .to(torch.bfloat16) gives). */
static inline uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* One row of `type` blocks into K floats (bf16 == 0; gguf's dequantizer's values) or their bfloat16 bits.
 * TYPE is a constant per inlined copy, so the decoding and the two loops of 16 vectorize. */
static inline __attribute__((always_inline)) void dequantize_row(const int TYPE, const uint8_t *row, int64_t K,
                                                                 int bf16, void *out) {
    const int64_t ge = group_elems(TYPE), gb = group_bytes(TYPE);
    const int sgn = is_signed(TYPE), repacked = TYPE >= T_REPACKED;
    for (int64_t gi = 0; gi < K / ge; gi++) {
        const uint8_t *g = row + gi * gb;
        float lo[8], hi[8], mn[8];
        uint8_t all[QK_K];
        group_scales(stored_type(TYPE), g, lo, hi, mn);
        if (repacked) codes_repacked(TYPE, g, all);
        for (int j = 0; j < subs_per_group(TYPE); j++) {
            uint8_t c[32];
            float v[32];
            if (repacked)
                for (int l = 0; l < 32; l++)
                    c[l] = (uint8_t)(all[32 * j + l] - 32); /* Q6_K_R's: Q4_K_R / Q5_0_R go by their stored blocks */
            else
                codes_c(TYPE, g, j, c);
            for (int l = 0; l < 16; l++) v[l] = sgn ? lo[j] * (float)(int8_t)c[l] : lo[j] * (float)c[l] + mn[j];
            for (int l = 16; l < 32; l++) v[l] = sgn ? hi[j] * (float)(int8_t)c[l] : hi[j] * (float)c[l] + mn[j];
            const int64_t o = gi * ge + j * QK;
            if (bf16)
                for (int l = 0; l < 32; l++) ((uint16_t *)out)[o + l] = bf16_bits(v[l]);
            else
                memcpy((float *)out + o, v, sizeof v);
        }
    }
}

/* one row of `type` blocks (row_bytes(type, K) at w) -> K floats (bf16 == 0) or bfloat16 at out */
static void dequantize_any_row(int type, const uint8_t *w, int64_t K, int bf16, void *out) {
    const int64_t es = bf16 ? 2 : 4;
    switch (type) {
    case T_Q4_K_R: /* group by group through the stored layout: pairs interleave two groups' codes */
        for (int64_t gi = 0; gi < K / QK_K; gi++) {
            uint8_t g[144];
            q4_k_r_group_stored(w, K / QK_K, gi, g);
            dequantize_row(T_Q4_K, g, QK_K, bf16, (char *)out + gi * QK_K * es);
        }
        break;
    case T_Q5_0_R: /* through the stored blocks: groups of 8 interleave two groups of 4 */
        for (int64_t gi = 0; gi < K / QR5; gi++) {
            uint8_t g[88];
            q5_0_r_blocks(w, K, gi, g);
            dequantize_row(T_Q5_0, g, QR5, bf16, (char *)out + gi * QR5 * es);
        }
        break;
    case T_Q4_K: dequantize_row(T_Q4_K, w, K, bf16, out); break;
    case T_Q5_K: dequantize_row(T_Q5_K, w, K, bf16, out); break;
    case T_Q6_K: dequantize_row(T_Q6_K, w, K, bf16, out); break;
    case T_Q6_K_R: dequantize_row(T_Q6_K_R, w, K, bf16, out); break;
    case T_Q8_0: dequantize_row(T_Q8_0, w, K, bf16, out); break;
    case T_Q5_0: dequantize_row(T_Q5_0, w, K, bf16, out); break;
    case T_Q5_1: dequantize_row(T_Q5_1, w, K, bf16, out); break;
    case T_Q4_0: dequantize_row(T_Q4_0, w, K, bf16, out); break;
    default: dequantize_row(T_Q4_1, w, K, bf16, out); break;
    }
}

/* out[N, K] float32 (bf16 == 0; what gguf's dequantizer gives: scale * code + min) or bfloat16 = the rows
 * dequantized, rows split over nthreads (tiers/quantization/kquant.py dequantize_parts). Returns -1 for a type or
 * K this file does not take. */
int aio_kq_dequantize_dense(const uint8_t *w, int64_t N, int64_t K, int type, void *out, int bf16, int nthreads) {
    const int64_t rb = row_bytes(type, K), es = bf16 ? 2 : 4;
    if (!rb) return -1;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (N * K >= 65536)
    for (int64_t n = 0; n < N; n++) dequantize_any_row(type, w + n * rb, K, bf16, (char *)out + n * K * es);
    return 0;
}

/* out[i] (K float32) = row ids[i] of the N rows at w dequantized, i < count: an embedding's lookup in one call, on
 * the calling thread (a step's few tokens). Returns 0, -1 for a type or K this file does not take, -3 for an id
 * outside 0 .. N - 1 (nothing is read then). */
int aio_kq_gather_rows(const uint8_t *w, int64_t N, int64_t K, int type, const int64_t *ids, int64_t count,
                       float *out) {
    const int64_t rb = row_bytes(type, K);
    if (!rb) return -1;
    for (int64_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= N) return -3;
    for (int64_t i = 0; i < count; i++) dequantize_any_row(type, w + ids[i] * rb, K, 0, out + i * K);
    return 0;
}

/* ---------------------------------------------------------------- activations */
typedef struct {
    int8_t *q;   /* [M, K] natural order */
    float *d;    /* [M, K / 32] */
    float *dsum; /* [M, K / 32] d * sum(q) */
    /* for Q5_0_R (NULL when no part is one) */
    int8_t *qr;   /* [M, K] in Q5_0_R's codes' order */
    float *da;    /* [M, K / 8] d of each lane's block */
    int32_t *b16; /* [M, K / 8] -16 * each lane's sum(q) */
} act_t;

/* q8_round (q8.h), 64 at a time on the AVX-512 path */
static inline void round_q8(const float *x, int n, float inv, int8_t *q, int *sums) {
#if defined(KQ_VNNI)
    if (n % 64 == 0) { /* 16 at a time; the sums of each 16 from the bytes: sad(q ^ 0x80, 0) = 8 x 128 + sum(q) */
        const __m512 vi = _mm512_set1_ps(inv);
        const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
        for (int i = 0; i < n; i += 64) {
            __m512i bytes = _mm512_setzero_si512(); /* built in a register: a 64-byte load of four 16-byte stores
                                                     * would wait for them (no store forwarding) */
            for (int k = 0; k < 4; k++) {
                const __m512 f = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i + 16 * k), vi),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                const __m512i v = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(f), lo), hi);
                bytes = _mm512_mask_blend_epi32((__mmask16)(0xF << (4 * k)), bytes,
                                                _mm512_broadcast_i32x4(_mm512_cvtepi32_epi8(v)));
            }
            _mm512_storeu_si512((void *)(q + i), bytes);
            int64_t sad[8];
            _mm512_storeu_si512((void *)sad, _mm512_sad_epu8(_mm512_xor_si512(bytes, _mm512_set1_epi8((char)0x80)),
                                                             _mm512_setzero_si512()));
            for (int k = 0; k < 4; k++) sums[i / 16 + k] = (int)(sad[2 * k] + sad[2 * k + 1]) - 2048;
        }
        return;
    }
#endif
    q8_round(x, n, inv, q, sums);
}

/* q8_abs_max (q8.h), 16 at a time on the AVX-512 path (where a NaN wins) */
static inline float abs_max(const float *x, int n) {
#if defined(KQ_VNNI)
    if (n % 16 == 0) {
        __m512 m = _mm512_setzero_ps();
        for (int i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
        return _mm512_reduce_max_ps(m);
    }
#endif
    return q8_abs_max(x, n);
}

/* row m's activations; for Q5_0_R (qr set) also its order, lane scales and sums */
static void quantize_act(const float *x, int64_t K, const act_t *a, int64_t m) {
    int8_t *q = a->q + m * K;
    float *d = a->d + m * (K / QK), *dsum = a->dsum + m * (K / QK);
    for (int64_t b = 0; b < K / QK; b++) {
        const float amax = abs_max(x + b * QK, QK);
        int sums[2];
        round_q8(x + b * QK, QK, amax > 0.0f ? 127.0f / amax : 0.0f, q + b * QK, sums);
        d[b] = amax / 127.0f;
        dsum[b] = d[b] * (float)(sums[0] + sums[1]);
    }
    if (!a->qr) return;
    int8_t *qr = a->qr + m * K;
    for (int64_t e = 0, lanes = m * (K / 8); e < K; e += 256, lanes += 16) { /* Q5_0_R's groups of 8 (of 4) */
        const int n = K - e >= 256 ? 256 : 128, width = n / 16;
        to_vectors((const uint8_t *)(q + e), n, (uint8_t *)(qr + e));
        for (int k = 0; k < 16; k++) {
            const int8_t *src = q + e + width * k;
            int sum = 0;
            for (int i = 0; i < width; i++) sum += src[i];
            a->da[lanes + k] = d[(e + width * k) / QK];
            a->b16[lanes + k] = -16 * sum;
        }
    }
}

/* to_vectors of a group of 256: the transpose of 16 x 4 runs of 4 bytes (vector v, lane k: run 4 k + v) */
static inline void group_to_vectors(const int8_t *natural, int8_t *r) {
#if defined(KQ_VNNI)
    const __m512i z0 = _mm512_loadu_si512((const void *)natural);
    const __m512i z1 = _mm512_loadu_si512((const void *)(natural + 64));
    const __m512i z2 = _mm512_loadu_si512((const void *)(natural + 128));
    const __m512i z3 = _mm512_loadu_si512((const void *)(natural + 192));
    for (int v = 0; v < 4; v++) {
        const __m512i runs = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i idx = _mm512_add_epi32(runs, _mm512_set1_epi32(v));
        const __m512i lo = _mm512_permutex2var_epi32(z0, idx, z1), hi = _mm512_permutex2var_epi32(z2, idx, z3);
        _mm512_storeu_si512((void *)(r + 64 * v), _mm512_mask_blend_epi32(0xFF00, lo, hi));
    }
#else
    to_vectors((const uint8_t *)natural, QK_K, (uint8_t *)r);
#endif
}

/* The K-quants' activations, ggml's Q8_K: int8 per block of 256 (d = max|x| / 127, round half to even), the sums
 * of each 16 (Q6_K's - 32) and d * the sum of each 32 (the mins) */
typedef struct {
    int8_t *q;     /* [M, K] natural order */
    float *d;      /* [M, K / 256] */
    float *dsum;   /* [M, K / 32] d * sum(q) */
    int16_t *bsum; /* [M, K / 16] sum(q) */
    /* for the repacked types (NULL when no part is one) */
    int8_t *qr;    /* [M, K] in the repacked codes' order (to_vectors) */
    float *dbs;    /* [M, K / 16] d * sum(q) (Q4_K_R's mins) */
    int32_t *b32;  /* [M, K / 16] -32 * sum(q) (Q6_K_R's - 32) */
    /* for Q4_K_R (NULL when no part is one) */
    int8_t *qp;    /* [M, K] in Q4_K_R's pairs' order (a row's odd last group reads qr) */
    float *pd;     /* [M, K / 512 pairs, 32]: a pair's lanes' d (the first group's 8 times, the second's 8 times),
                    * then its lanes' d * sum(q) (dsum's): 128 bytes a pair, aligned whatever K */
} actk_t;

/* the 512 activations of a pair of groups in the order of a Q4_K_R pair's vectors (lane k: sub-block k % 8 of group
 * k / 8, 4 elements per vector) */
static inline void pair_vectors(const int8_t *q, int8_t *out) {
    for (int u = 0; u < 8; u++)
        for (int k = 0; k < 16; k++) memcpy(out + 64 * u + 4 * k, q + 256 * (k / 8) + 32 * (k % 8) + 4 * u, 4);
}

/* row m of the activations: the formats' pointers at that row */
static actk_t actk_row(const actk_t *a, int64_t m, int64_t K) {
    actk_t r = {a->q + m * K, a->d + m * (K / QK_K), a->dsum + m * (K / QK), a->bsum + m * (K / 16),
                NULL, NULL, NULL, NULL, NULL};
    if (a->qr) {
        r.qr = a->qr + m * K;
        r.dbs = a->dbs + m * (K / 16);
        r.b32 = a->b32 + m * (K / 16);
    }
    if (a->qp) {
        r.qp = a->qp + m * K;
        r.pd = a->pd + m * (K / 512 * 32);
    }
    return r;
}

static void quantize_act_k(const float *x, int64_t K, const actk_t *a) {
    for (int64_t g = 0; g < K / QK_K; g++) {
        const float amax = abs_max(x + g * QK_K, QK_K);
        int sums[16];
        int8_t *q = a->q + g * QK_K;
        round_q8(x + g * QK_K, QK_K, amax > 0.0f ? 127.0f / amax : 0.0f, q, sums);
        const float d = a->d[g] = amax / 127.0f;
        for (int s = 0; s < 16; s++) a->bsum[g * 16 + s] = (int16_t)sums[s];
        for (int j = 0; j < 8; j++) a->dsum[g * 8 + j] = d * (float)(sums[2 * j] + sums[2 * j + 1]);
        if (!a->qr) continue;
        group_to_vectors(q, a->qr + g * QK_K);
        for (int s = 0; s < 16; s++) {
            a->dbs[g * 16 + s] = d * (float)sums[s];
            a->b32[g * 16 + s] = -32 * sums[s];
        }
    }
    if (!a->qp) return;
    const int64_t ng = K / QK_K;
    for (int64_t g = 0; g + 1 < ng; g += 2) {
        pair_vectors(a->q + g * QK_K, a->qp + g * QK_K);
        for (int l = 0; l < 16; l++) {
            a->pd[g * 16 + l] = a->d[g + l / 8];
            a->pd[g * 16 + 16 + l] = a->dsum[g * 8 + l];
        }
    }
}

/* both formats; a part's type reads the one it needs */
typedef struct {
    act_t b32;
    actk_t k;
    void *block; /* where the arrays are (acts_alloc) */
    int owned;   /* the block is this call's to free */
} acts_t;

/* ---------------------------------------------------------------- lanes */
#if defined(KQ_SIMD)
typedef __m256 facc;
static inline facc facc_zero(void) { return _mm256_setzero_ps(); }

/* u8 codes x s8 activations -> 8 int32 lanes of 4 */
static inline __m256i dot_u(__m256i u, __m256i s) {
#if defined(KQ_VNNI)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

static inline facc lanes_fma(__m256i codes, int sgn, const int8_t *a, float s_lo, float s_hi, facc acc) {
    __m256i av = _mm256_loadu_si256((const __m256i *)a);
    __m256i isum = sgn ? dot_u(_mm256_sign_epi8(codes, codes), _mm256_sign_epi8(av, codes)) : dot_u(codes, av);
    const __m256 sv = _mm256_set_m128(_mm_set1_ps(s_hi), _mm_set1_ps(s_lo));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), sv, acc);
}

static inline facc facc_add(facc a, facc b) { return _mm256_add_ps(a, b); }

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
static inline float facc_sum(facc v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* facc_sum of v[0 .. 7] in lanes 0 .. 7, each added in facc_sum's order (lane k of x[t]: v[t]'s a_k + a_{k+4},
 * v[t + 4]'s in lanes 4-7; y: (a0 + a4) + (a2 + a6) and (a1 + a5) + (a3 + a7) of two rows a half; hadd: their
 * sums). One reduction of 8 rows: 21 instructions for the 56 of 8 facc_sums, and no chain a row long. */
static inline __m256 facc_sum8(const __m256 *v) {
    __m256 x[4];
    for (int t = 0; t < 4; t++)
        x[t] = _mm256_add_ps(_mm256_permute2f128_ps(v[t], v[t + 4], 0x20), _mm256_permute2f128_ps(v[t], v[t + 4], 0x31));
    const __m256 y01 = _mm256_add_ps(_mm256_shuffle_ps(x[0], x[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(x[0], x[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 y23 = _mm256_add_ps(_mm256_shuffle_ps(x[2], x[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(x[2], x[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_hadd_ps(y01, y23);
}

/* Q4_K / Q5_K: the 8 6-bit scales (bytes 0-7) and mins (8-15) of a group, unpacked in registers (ggml's utmp
 * trick on four 32-bit lanes; going through memory, the 64-bit loads of 32-bit stores stall store forwarding).
 * u0, u1, u2 = the 12 bytes: scales = [u0 & m1, (u2 & m2) | ((u0 >> 6) & m3) << 4], mins = [u1 & m1,
 * ((u2 >> 4) & m2) | ((u1 >> 6) & m3) << 4]. */
static inline __m128i k4_scale_bytes(const uint8_t *g) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(g + 4)); /* u0 u1 u2 (and 4 bytes of codes) */
    const __m128i p = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  /* u0 u2 u1 u2 */
    const __m128i q = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  /* u0 u0 u1 u1 */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(p, _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i top = _mm_and_si128(_mm_srli_epi32(q, 6), _mm_setr_epi32(0, 0x03030303, 0, 0x03030303));
    return _mm_or_si128(lo, _mm_slli_epi32(top, 4));
}

/* the cache lines of the gb bytes KQ_PREFETCH_L2 (into L2) and KQ_PREFETCH (into L1) ahead of a group at g: one
 * request per 64 bytes and one for the last byte, so that groups of any size leave no line out */
static inline __attribute__((always_inline)) void group_prefetch(const uint8_t *g, const int gb) {
#pragma GCC unroll 4
    for (int o = 0; o < gb; o += 64) {
        _mm_prefetch((const char *)(g + KQ_PREFETCH_L2 + o), _MM_HINT_T2);
        _mm_prefetch((const char *)(g + KQ_PREFETCH + o), _MM_HINT_T0);
    }
    if (gb % 64) {
        _mm_prefetch((const char *)(g + KQ_PREFETCH_L2 + gb - 1), _MM_HINT_T2);
        _mm_prefetch((const char *)(g + KQ_PREFETCH + gb - 1), _MM_HINT_T0);
    }
}

/* the 32 bits of a uint32 as 32 bytes 0x10 (bit set) or 0 */
static inline __m256i bits_to_16(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL, 0x0202020202020202LL,
                                            0x0303030303030303LL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

static inline __attribute__((always_inline)) __m256i codes_v(const int type, const uint8_t *g, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    switch (type) {
    case T_Q4_K: {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * (j >> 1)));
        return (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4) : _mm256_and_si256(raw, m4);
    }
    case T_Q5_K: {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(g + 48 + 32 * (j >> 1)));
        const __m256i lo = (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4) : _mm256_and_si256(raw, m4);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(g + 16));
        const __m256i bit = _mm256_set1_epi8((char)(1 << j));
        const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit),
                                            _mm256_set1_epi8(0x10));
        return _mm256_or_si256(lo, hi);
    }
    case T_Q6_K: {
        const int h = j >> 2, q = j & 3;
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(g + 64 * h + 32 * (q & 1)));
        const __m256i lo = (q >= 2) ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4) : _mm256_and_si256(raw, m4);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(g + 128 + 32 * h));
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), _mm256_set1_epi8(3));
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)); /* unsigned: the K-quant kernel's - 32 is apart */
    }
    case T_Q8_0: return _mm256_loadu_si256((const __m256i *)(g + 2));
    case T_Q4_0:
    case T_Q4_1: {
        const __m128i raw = _mm_loadu_si128((const __m128i *)(g + (type == T_Q4_0 ? 2 : 4)));
        const __m256i both = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        return type == T_Q4_0 ? _mm256_sub_epi8(both, _mm256_set1_epi8(8)) : both;
    }
    default: { /* Q5_0, Q5_1 */
        const int off = type == T_Q5_0 ? 2 : 4;
        uint32_t qh;
        memcpy(&qh, g + off, 4);
        const __m128i raw = _mm_loadu_si128((const __m128i *)(g + off + 4));
        const __m256i lo = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        const __m256i q = _mm256_or_si256(lo, bits_to_16(qh));
        return type == T_Q5_0 ? _mm256_sub_epi8(q, _mm256_set1_epi8(16)) : q;
    }
    }
}
#define CODES(type, g, j) codes_v(type, g, j)
#define CODES_T __m256i
#else
typedef struct { float v[8]; } facc;
static inline facc facc_zero(void) {
    facc a;
    for (int k = 0; k < 8; k++) a.v[k] = 0.0f;
    return a;
}

typedef struct { uint8_t b[32]; } codes_t;

static inline facc lanes_fma(codes_t codes, int sgn, const int8_t *a, float s_lo, float s_hi, facc acc) {
    for (int k = 0; k < 8; k++) {
        int isum = 0;
        for (int i = 4 * k; i < 4 * k + 4; i++)
            isum += (sgn ? (int)(int8_t)codes.b[i] : (int)codes.b[i]) * (int)a[i];
        acc.v[k] = fmaf((float)isum, k < 4 ? s_lo : s_hi, acc.v[k]);
    }
    return acc;
}

static inline facc facc_add(facc a, facc b) {
    for (int k = 0; k < 8; k++) a.v[k] += b.v[k];
    return a;
}

static inline float facc_sum(facc a) {
    const float *v = a.v;
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

static inline codes_t codes_s(int type, const uint8_t *g, int j) {
    codes_t c;
    codes_c(type, g, j, c.b);
    return c;
}
#define CODES(type, g, j) codes_s(type, g, j)
#define CODES_T codes_t
#endif

#if defined(KQ_VNNI) && defined(__GFNI__)
/* GF(2) affine byte maps (gf2p8affineqb: output bit i = parity(byte 7 - i of the matrix & input byte)), one matrix
 * per 64-bit lane: bit moves within each byte in one instruction */
#define KQ_GF_BIT(out, in) ((uint64_t)(1u << (in)) << (8 * (7 - (out))))
#define KQ_GF_NIBBLE(shift) (KQ_GF_BIT(0, shift) | KQ_GF_BIT(1, shift + 1) | KQ_GF_BIT(2, shift + 2) | \
                             KQ_GF_BIT(3, shift + 3))
#define KQ_GF_TOP(q) (KQ_GF_BIT(4, 2 * (q)) | KQ_GF_BIT(5, 2 * (q) + 1))
static inline __m512i gf_map(__m512i x, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return _mm512_gf2p8affine_epi64_epi8(x, _mm512_setr_epi64((long long)a, (long long)a, (long long)b,
                                                              (long long)b, (long long)c, (long long)c,
                                                              (long long)d, (long long)d), 0);
}
#endif

/* out[m, n0 + t] for R activation rows from m0 and weight rows n0 .. n0 + NT - 1 of a 32-block type; TYPE and R
 * constant per call. Two accumulators per row (even and odd blocks) so that consecutive FMAs do not wait on each
 * other; Q4_1 / Q5_1's mins go into one float. */
static inline __attribute__((always_inline)) void rows_dot(const int TYPE, const act_t *a, int64_t m0, const int R,
        int64_t K, const uint8_t *w, int64_t n0, int64_t NT, float *out, int64_t ldo) {
    const int64_t rb = row_bytes(TYPE, K), gb = group_bytes(TYPE), nb = K / QK;
    const int sgn = is_signed(TYPE);
    for (int64_t t = 0; t < NT; t++) {
        const uint8_t *row = w + (n0 + t) * rb;
        facc acc[2][KQ_ROWS];
        float ms[KQ_ROWS];
        for (int r = 0; r < R; r++) {
            acc[0][r] = acc[1][r] = facc_zero();
            ms[r] = 0.0f;
        }
        for (int64_t b = 0; b < nb; b += 2) {
#if defined(KQ_SIMD)
            group_prefetch(row + b * gb, 2 * (int)gb);
#endif
#pragma GCC unroll 2
            for (int j = 0; j < 2; j++) {
                if (b + j >= nb) break;
                const uint8_t *g = row + (b + j) * gb;
                float lo[1], hi[1], mn[1];
                group_scales(TYPE, g, lo, hi, mn);
                const CODES_T c = CODES(TYPE, g, 0);
                for (int r = 0; r < R; r++) {
                    const float da = a->d[(m0 + r) * nb + b + j];
                    acc[j][r] = lanes_fma(c, sgn, a->q + (m0 + r) * K + (b + j) * QK, lo[0] * da, hi[0] * da,
                                          acc[j][r]);
                    if (!sgn) ms[r] += mn[0] * a->dsum[(m0 + r) * nb + b + j];
                }
            }
        }
        for (int r = 0; r < R; r++)
            out[(m0 + r) * ldo + n0 + t] = (facc_sum(facc_add(acc[0][r], acc[1][r])) + 0.0f) + ms[r];
    }
}

/* ---------------------------------------------------------------- K-quants: integer super-blocks
 * Per group g of 256 and activation row, the dot product is one integer per lane k (0-7):
 *   isum[k] = sum over sub-blocks j of scale(j, k) * sum_{i < 4} code_j[4k + i] * q[32j + 4k + i]
 * codes unsigned (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63), scale(j, k) the 6-bit sc_j (Q4_K, Q5_K) or Q6_K's int8
 * sc[2j + (k >= 4)], exact in int32; then acc[k] = fma(float(isum[k]), d_w * d_act, acc[k]), and 8 more lanes
 * mv[k]: Q4_K / Q5_K mv[k] = fma(-(dmin * m_k), dsum_k, mv[k]) (dsum_k = d_act * the sub-block's sum of q),
 * Q6_K's - 32 mv[k] = fma(float(sc[2k] bsum[2k] + sc[2k + 1] bsum[2k + 1]), -32 d_w d_act, mv[k]) (bsum: sums of
 * 16 q). The row's result is (sum(acc) + sum(mv)) + 0, each sum in facc_sum's order. */

#if !defined(KQ_SIMD)
/* a group's weight side: the integer scales sc (Q4_K / Q5_K: 8 of 6 bits; Q6_K: 16 int8), d_w, and the Q4_K /
 * Q5_K mins' floats mneg[k] = -(dmin * m_k) */
static inline void kk_group_c(int type, const uint8_t *g, int *sc, float *mneg, float *dw) {
    if (type == T_Q6_K) {
        for (int j = 0; j < 16; j++) sc[j] = ((const int8_t *)(g + 192))[j];
        for (int k = 0; k < 8; k++) mneg[k] = 0.0f;
        *dw = fp16(g + 208);
        return;
    }
    const float dmin = fp16(g + 2);
    for (int k = 0; k < 8; k++) {
        int m;
        scale_min_k4(k, g + 4, &sc[k], &m);
        mneg[k] = -(dmin * (float)m);
    }
    *dw = fp16(g);
}

/* the scalar reference of the arithmetic above (the build without AVX2) */
static inline __attribute__((always_inline)) void kk_rows_c(const int TYPE, const actk_t *a, int64_t m0,
        const int R, int64_t K, const uint8_t *w, int64_t n, float *out, int64_t ldo) {
    const int64_t rb = row_bytes(TYPE, K), gb = group_bytes(TYPE), ng = K / QK_K;
    for (int r = 0; r < R; r++) {
        const int64_t m = m0 + r;
        facc acc = facc_zero(), mv = facc_zero();
        for (int64_t gi = 0; gi < ng; gi++) {
            const uint8_t *g = w + n * rb + gi * gb;
            int sc[16];
            float mneg[8], dw;
            kk_group_c(TYPE, g, sc, mneg, &dw);
            int32_t isum[8] = {0};
            for (int j = 0; j < 8; j++) {
                uint8_t c[32];
                codes_c(TYPE, g, j, c);
                const int8_t *q = a->q + m * K + gi * QK_K + j * QK;
                for (int k = 0; k < 8; k++) {
                    int32_t dot = 0;
                    for (int i = 4 * k; i < 4 * k + 4; i++)
                        dot += (TYPE == T_Q6_K ? (int32_t)(int8_t)c[i] + 32 : (int32_t)c[i]) * q[i];
                    isum[k] += (TYPE == T_Q6_K ? sc[2 * j + (k >= 4)] : sc[j]) * dot;
                }
            }
            const float dd = dw * a->d[m * ng + gi];
            for (int k = 0; k < 8; k++) acc.v[k] = fmaf((float)isum[k], dd, acc.v[k]);
            if (TYPE == T_Q6_K) {
                const int16_t *bs = a->bsum + (m * ng + gi) * 16;
                for (int k = 0; k < 8; k++)
                    mv.v[k] = fmaf((float)(sc[2 * k] * bs[2 * k] + sc[2 * k + 1] * bs[2 * k + 1]), dd * -32.0f,
                                   mv.v[k]);
            } else {
                for (int k = 0; k < 8; k++) mv.v[k] = fmaf(mneg[k], a->dsum[(m * ng + gi) * 8 + k], mv.v[k]);
            }
        }
        out[m * ldo + n] = (facc_sum(acc) + facc_sum(mv)) + 0.0f;
    }
}
#else
/* the group's float steps for R rows, given their integer sums (every SIMD path); s16: Q6_K's 16 scales */
static inline __attribute__((always_inline)) void kk_group_floats(const int TYPE, const actk_t *a, int64_t m0,
        const int R, int64_t gi, int64_t ng, const __m256i *isum, __m256i s16, __m256 mneg, float dw, __m256 *acc,
        __m256 *mv) {
    for (int r = 0; r < R; r++) {
        const int64_t ag = (m0 + r) * ng + gi;
        const float dd = dw * a->d[ag];
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(dd), acc[r]);
        if (TYPE == T_Q6_K) {
            const __m256i corr = _mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i *)(a->bsum + ag * 16)));
            mv[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_set1_ps(dd * -32.0f), mv[r]);
        } else {
            mv[r] = _mm256_fmadd_ps(mneg, _mm256_loadu_ps(a->dsum + ag * 8), mv[r]);
        }
    }
}

/* the Q4_K / Q5_K mins' floats, (-dmin) * m_k (= -(dmin * m_k)), from k4_scale_bytes' bytes 8-15 */
static inline __m256 kk_mneg(const uint8_t *g, __m128i bytes) {
    return _mm256_mul_ps(_mm256_set1_ps(-fp16(g + 2)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8))));
}

/* one weight row n for R activation rows, a sub-block (32 codes) a step: pmaddubsw, then pmaddwd by the scale
 * (vpdpwssd with VNNI) */
static inline __attribute__((always_inline)) void kk_rows_v(const int TYPE, const actk_t *a, int64_t m0,
        const int R, int64_t K, const uint8_t *w, int64_t n, float *out, int64_t ldo) {
    const int64_t rb = row_bytes(TYPE, K), gb = group_bytes(TYPE), ng = K / QK_K;
    __m256 acc[KQ_ROWS], mv[KQ_ROWS];
    for (int r = 0; r < R; r++) acc[r] = mv[r] = _mm256_setzero_ps();
    for (int64_t gi = 0; gi < ng; gi++) {
        const uint8_t *g = w + n * rb + gi * gb;
        group_prefetch(g, (int)gb);
        __m256i sc16[8];
        __m256i s16 = _mm256_setzero_si256();
        __m256 mneg = _mm256_setzero_ps();
        float dw;
        if (TYPE == T_Q6_K) {
            const int8_t *sc = (const int8_t *)(g + 192);
            s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
            for (int j = 0; j < 8; j++) sc16[j] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * j + 1]), _mm_set1_epi16(sc[2 * j]));
            dw = fp16(g + 208);
        } else {
            const __m128i bytes = k4_scale_bytes(g);
            uint8_t sb[16];
            _mm_storeu_si128((__m128i *)sb, bytes);
            for (int j = 0; j < 8; j++) sc16[j] = _mm256_set1_epi16(sb[j]);
            mneg = kk_mneg(g, bytes);
            dw = fp16(g);
        }
        __m256i isum[KQ_ROWS];
        for (int r = 0; r < R; r++) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m256i c = codes_v(TYPE, g, j);
            for (int r = 0; r < R; r++) {
                const __m256i p = _mm256_maddubs_epi16(
                    c, _mm256_loadu_si256((const __m256i *)(a->q + (m0 + r) * K + gi * QK_K + j * QK)));
#if defined(KQ_VNNI)
                isum[r] = _mm256_dpwssd_epi32(isum[r], p, sc16[j]);
#else
                isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, sc16[j]));
#endif
            }
        }
        kk_group_floats(TYPE, a, m0, R, gi, ng, isum, s16, mneg, dw, acc, mv);
    }
    for (int r = 0; r < R; r++) out[(m0 + r) * ldo + n] = (facc_sum(acc[r]) + facc_sum(mv[r])) + 0.0f;
}
#endif

/* ---------------------------------------------------------------- K-quants repacked (Q4_K_R, Q6_K_R)
 * Per group and activation row, 16 int32 lanes: isum[k] = the dot product of elements 16k .. 16k + 15's unsigned
 * codes with the activations (in either order: exact), Q6_K_R less 32 * their sum (b32). Then per lane
 *   acc[k] = fma(float(isum[k]) * d_act, d_w * sc[k], acc[k])    (Q4_K_R: sc of sub-block k / 2)
 *   acc[k] = fma(-(dmin * m[k / 2]), d_act * sum(q of the 16), acc[k])    (Q4_K_R's mins)
 * d_w * sc and dmin * m are exact (an fp16 times 6 or 8 bits). Q4_K_R's lanes 8-15 take 16 isum and d_w sc / 16
 * (KR_HI16: the 512-bit path masks the high nibbles in place instead of shifting them; both exact, so the same
 * product). The row's result is the sum of acc[k] + acc[k + 8] in facc_sum's order, plus 0. */

/* A tile of R > 1 rows is blocked from R x K = 3/4 of the L1 data cache's bytes (the activations take about 1.5 R K
 * bytes: blocked once they pass ~1.1 times the L1). Measured on a 48 KB L1 (36,864): 5 rows of 8,960 gain 21%
 * streamed, 2 threads; 4 rows lose or gain 4% (Q4_K / Q6_K), 2 and 3 rows lose 5-10% blocked. A 32 KB L1 (AMD's)
 * gives 24,576, not measured. A build with -DKR_BLOCKED_FROM=N takes N instead (the tests block every tile). A
 * tile whose Q4_K_R / Q6_K_R weight rows go two at a time (2-5 rows, kr_rows2 / kr6_rows2) is blocked from twice
 * the threshold: unblocked, 5 rows of 8,960 read 9-15% faster than blocked (issue 37's twenty-seventh pass). */
#ifdef KR_BLOCKED_FROM
static int64_t kr_blocked_from = KR_BLOCKED_FROM;
#else
static int64_t kr_blocked_from = 36864;

__attribute__((constructor)) static void kr_read_l1(void) {
#if defined(_SC_LEVEL1_DCACHE_SIZE)
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (l1 >= 8192 && l1 <= (4 << 20)) kr_blocked_from = l1 / 4 * 3;
#endif
}
#endif

int64_t aio_kq_blocked_from(void) { return kr_blocked_from; }

#if defined(KQ_VNNI)
/* lanes k + (k + 8), then facc_sum: sum16's order */
static inline __m256 fold512(__m512 acc) {
    return _mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}
static inline float sum512(__m512 acc) { return facc_sum(fold512(acc)); }

/* 32 bytes broadcast to both halves: the low nibbles in bytes 0-31, the high ones in 32-63 */
static inline __m512i nibbles_split(__m512i both) {
#if defined(__GFNI__)
    return gf_map(both, KQ_GF_NIBBLE(0), KQ_GF_NIBBLE(0), KQ_GF_NIBBLE(4), KQ_GF_NIBBLE(4));
#else
    return _mm512_and_si512(_mm512_srlv_epi64(both, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)), _mm512_set1_epi8(0x0F));
#endif
}

#define KR_HI16                                                                                                \
    _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, 0.0625f, 0.0625f, 0.0625f, 0.0625f, 0.0625f, 0.0625f, 0.0625f, 0.0625f)
/* vector v of group g: 64 codes, unsigned */
static inline __attribute__((always_inline)) __m512i kr512_codes(const int TYPE, const uint8_t *g, int v) {
    const __m512i ql =
        _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(g + (TYPE == T_Q4_K_R ? 16 : 0) + 32 * v)));
    if (TYPE == T_Q4_K_R) /* positions 32-63 as 16 x their code (KR_HI16) */
        return _mm512_and_si512(ql, _mm512_inserti64x4(_mm512_set1_epi8(0x0F), _mm256_set1_epi8((char)0xF0), 1));
    const __m512i lo = nibbles_split(ql);
    const __m512i qh = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(g + 128 + 16 * v)));
#if defined(__GFNI__)
    const __m512i top = gf_map(qh, KQ_GF_TOP(0), KQ_GF_TOP(1), KQ_GF_TOP(2), KQ_GF_TOP(3));
#else
    const __m512i top = _mm512_slli_epi16(
        _mm512_and_si512(_mm512_srlv_epi64(qh, _mm512_setr_epi64(0, 0, 2, 2, 4, 4, 6, 6)), _mm512_set1_epi8(3)), 4);
#endif
    return _mm512_or_si512(lo, top);
}

/* a group's float scales per lane: d_w * sc and (Q4_K_R) -(dmin * m) */
static inline __attribute__((always_inline)) void kr512_scales(const int TYPE, const uint8_t *g, __m512 *scd,
                                                                __m512 *mneg) {
    if (TYPE == T_Q6_K_R) {
        const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(g + 192)));
        *scd = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(fp16(g + 208)));
        return;
    }
    const __m128i bytes = k4_scale_bytes(g);
    const __m128i sc = _mm_shuffle_epi8(bytes, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    const __m128i mn =
        _mm_shuffle_epi8(bytes, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
    *scd = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)), _mm512_set1_ps(fp16(g))), KR_HI16);
    *mneg = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)), _mm512_set1_ps(-fp16(g + 2)));
}

/* lanes 0-7 lo, 8-15 hi */
static inline __m512 halves512(float lo, float hi) {
    const __m256d h = _mm256_castps_pd(_mm256_set1_ps(hi));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(lo)), h, 1));
}

/* a Q4_K_R pair's float scales per lane: lanes 0-7 the first group's d * sc and -(dmin * m), lanes 8-15 the
 * second's, its d / 16 (its codes come as 16 x themselves) */
static inline __attribute__((always_inline)) void kr512_pair_scales(const uint8_t *pg, __m512 *scd, __m512 *mneg) {
    const __m128i b0 = k4_scale_bytes(pg), b1 = k4_scale_bytes(pg + 16);
    const __m512 dl = halves512(fp16(pg), fp16(pg + 16) * 0.0625f), nd = halves512(-fp16(pg + 2), -fp16(pg + 18));
    *scd = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi64(b0, b1))), dl);
    *mneg = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi64(b0, b1))), nd);
}

/* a row's 16 lanes (the accumulator of kr_range) */
typedef __m512 kracc;
static inline kracc kracc_zero(void) { return _mm512_setzero_ps(); }
static inline __m256 kracc_fold(kracc acc) { return fold512(acc); }

/* Q4_K_R pairs of groups g0 .. (g1 rounded down to even) - 1 of NW (1 or 2) weight rows, row0 (and row1) into
 * acc0[0 .. R) (and acc1), R activation rows from m0; returns the first group after them. Two weight rows share each
 * activation vector's load, and their sums are independent chains; each output gets the same operations in the
 * same order either way: the same bits. PF: each pair prefetches the bytes ahead of it (a row read start to end),
 * one row at one activation row all at the pair's start, otherwise half at the first of its 8 steps and half at
 * the fifth (KR_PACED). */
static inline __attribute__((always_inline)) int64_t kr_pairs(const int NW, const actk_t *a, int64_t m0, const int R,
        int64_t K, const uint8_t *row0, const uint8_t *row1, int64_t g0, int64_t g1, const int PF, kracc *acc0,
        kracc *acc1) {
    const int64_t gb = group_bytes(T_Q4_K_R);
    const __m512i nibbles = _mm512_inserti64x4(_mm512_set1_epi8(0x0F), _mm256_set1_epi8((char)0xF0), 1);
    int64_t gi = g0;
    for (; gi + 1 < g1; gi += 2) {
        const uint8_t *pg[2];
        __m512 scd[2], mneg[2];
        for (int w = 0; w < NW; w++) {
            pg[w] = (w ? row1 : row0) + gi * gb;
            kr512_pair_scales(pg[w], &scd[w], &mneg[w]);
        }
        __m512i isum[2][KR_ROWS];
        for (int w = 0; w < NW; w++)
            for (int r = 0; r < R; r++) isum[w][r] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++) {
            if (PF && u == 0) group_prefetch(pg[0], (NW == 1 && R > 1 ? 1 : 2) * (int)gb);
            if (PF && u == 4 && (NW == 2 || R > 1))
                group_prefetch(NW == 2 ? pg[1] : pg[0] + gb, (NW == 2 ? 2 : 1) * (int)gb);
            __m512i codes[2];
            for (int w = 0; w < NW; w++)
                codes[w] = _mm512_and_si512(
                    _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(pg[w] + 32 + 32 * u))), nibbles);
            for (int r = 0; r < R; r++) {
                const __m512i av = _mm512_load_si512((const void *)(a->qp + (m0 + r) * K + gi * QK_K + 64 * u));
                for (int w = 0; w < NW; w++) isum[w][r] = _mm512_dpbusd_epi32(isum[w][r], codes[w], av);
            }
        }
        for (int r = 0; r < R; r++) {
            const int64_t s = (m0 + r) * (K / 512 * 32) + gi * 16;
            const __m512 pd = _mm512_load_ps(a->pd + s), ds = _mm512_load_ps(a->pd + s + 16);
            for (int w = 0; w < NW; w++) {
                kracc *acc = w ? acc1 : acc0;
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum[w][r]), pd), scd[w], acc[r]);
                acc[r] = _mm512_fmadd_ps(mneg[w], ds, acc[r]);
            }
        }
    }
    return gi;
}

/* groups g0 .. g1 - 1 of weight row `row` (g0 even: Q4_K_R's pairs start there) into acc[0 .. R), R activation rows
 * from m0; PF: each group prefetches the bytes ahead of it (a row read start to end) */
static inline __attribute__((always_inline)) void kr_range(const int TYPE, const actk_t *a, int64_t m0, const int R,
        int64_t K, const uint8_t *row, int64_t g0, int64_t g1, const int PF, kracc *acc) {
    const int64_t gb = group_bytes(TYPE), ng = K / QK_K, ns = K / 16;
    int64_t gi = g0;
    if (TYPE == T_Q4_K_R) gi = kr_pairs(1, a, m0, R, K, row, NULL, g0, g1, PF, acc, NULL);
    for (; gi < g1; gi++) {
        const uint8_t *g = row + gi * gb;
        if (PF) group_prefetch(g, (int)gb);
        __m512 scd, mneg = _mm512_setzero_ps();
        kr512_scales(TYPE, g, &scd, &mneg);
        __m512i isum[KR_ROWS];
        for (int r = 0; r < R; r++) /* Q6_K_R: from - 32 * sum(q) */
            isum[r] = TYPE == T_Q6_K_R ? _mm512_load_si512((const void *)(a->b32 + (m0 + r) * ns + gi * 16))
                                       : _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const __m512i codes = kr512_codes(TYPE, g, v);
            for (int r = 0; r < R; r++) {
                const int8_t *av = a->qr + (m0 + r) * K + gi * QK_K + 64 * v;
                isum[r] = _mm512_dpbusd_epi32(isum[r], codes, _mm512_load_si512((const void *)av));
            }
        }
        for (int r = 0; r < R; r++) {
            const int64_t s = (m0 + r) * ns + gi * 16;
            const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_set1_ps(a->d[(m0 + r) * ng + gi]));
            acc[r] = _mm512_fmadd_ps(t, scd, acc[r]);
            if (TYPE == T_Q4_K_R) acc[r] = _mm512_fmadd_ps(mneg, _mm512_load_ps(a->dbs + s), acc[r]);
        }
    }
}

#elif defined(KQ_SIMD)
/* AVX2 has no vpdpbusd. pmaddubsw's int16 pair sums are added up in int16 while they cannot overflow, then widened
 * once by pmaddwd into 4-to-a-lane int32 sums (vpdpbusd's). Codes below 2^b times activations within +-127: a pair
 * is at most 3,810 for 4-bit codes (8 pairs add up to 30,480), 7,874 for 5-bit (4 pairs), 16,002 for 6-bit (2).
 * The integer sums stay exact, so the bits do not change; a row pays one pmaddwd per 8, 4 or 2 vectors, not one
 * per vector (two multiply-unit ops per 32 codes and row were the AVX2 path's bound at 5 rows). */
static inline __m256i dot32_i16(__m256i acc16, __m256i codes, const int8_t *a) {
    return _mm256_add_epi16(acc16, _mm256_maddubs_epi16(codes, _mm256_load_si256((const __m256i *)a)));
}
static inline __m256i widen(__m256i acc16) { return _mm256_madd_epi16(acc16, _mm256_set1_epi16(1)); }
static inline __m256i widen_add(__m256i acc32, __m256i acc16) { return _mm256_add_epi32(acc32, widen(acc16)); }

/* lanes 0-7 of the 512-bit path's accumulator in h[0], 8-15 in h[1] */
typedef struct {
    __m256 h[2];
} kracc;
static inline kracc kracc_zero(void) { return (kracc){{_mm256_setzero_ps(), _mm256_setzero_ps()}}; }
static inline __m256 kracc_fold(kracc acc) { return _mm256_add_ps(acc.h[0], acc.h[1]); }

/* The empty asm pins a row's int16 sum in a register after each product: without it GCC computed every row's
 * products first and moved them through the stack (at 5 rows, 4 of the 10 sums of a pair lived there). */
#define KR256_PIN(v) __asm__("" : "+x"(v))

/* the float steps of group half H (lanes 8H .. 8H + 7) for one row: d_act (per lane: pd) times the int32 sums,
 * times d_w sc, and Q4_K_R's mins */
static inline __attribute__((always_inline)) kracc kr256_scale(kracc acc, const int H, __m256i isum, __m256 dact,
                                                               __m256 scd, const int MINS, __m256 mneg,
                                                               const float *dbs) {
    const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), dact);
    acc.h[H] = _mm256_fmadd_ps(t, scd, acc.h[H]);
    if (MINS) acc.h[H] = _mm256_fmadd_ps(mneg, _mm256_load_ps(dbs), acc.h[H]);
    return acc;
}

/* A Q4_K_R pair for R rows, both groups at once: 2R int16 sums and 2R float accumulators. At 5 rows GCC moved 4 of
 * the 10 sums through the stack; from 5 rows kr256_pair_half takes one group at a time. Throwaway ctypes A/Bs on
 * the AMD EPYC (Zen 3), one group at a time against both: 0.93-1.0x at 2-4 rows; at 5 rows 1.05-1.25x on the
 * 1,536-wide shapes, 0.82-0.95x on the 8,960-wide down (its activations overflow the L1); 1.02-1.54x at 8. */
#define KR256_BOTH_HALVES_MAX 4
static inline __attribute__((always_inline)) void kr256_pair(const actk_t *a, int64_t m0, const int R, int64_t K,
        int64_t gi, const uint8_t *pg, const __m256 *scd, const __m256 *mneg, kracc *acc) {
    __m256i i16[KR_ROWS][2];
    for (int r = 0; r < R; r++) i16[r][0] = i16[r][1] = _mm256_setzero_si256();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 2 /* 8 rows unrolled 8 times over: GCC moved the products through the stack */
    for (int u = 0; u < 8; u++) { /* 4-bit codes: 8 vectors in int16 */
        const __m256i ql = _mm256_loadu_si256((const __m256i *)(pg + 32 + 32 * u));
        const __m256i c[2] = {_mm256_and_si256(ql, m4), _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4)};
        for (int r = 0; r < R; r++)
            for (int h = 0; h < 2; h++)
                i16[r][h] = dot32_i16(i16[r][h], c[h], a->qp + (m0 + r) * K + gi * QK_K + 64 * u + 32 * h);
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < 2; h++) {
            const float *pd = a->pd + (m0 + r) * (K / 512 * 32) + gi * 16 + 8 * h;
            const __m256i isum = h ? _mm256_slli_epi32(widen(i16[r][h]), 4) : widen(i16[r][h]); /* KR_HI16 */
            acc[r] = kr256_scale(acc[r], h, isum, _mm256_load_ps(pd), scd[h], 1, mneg[h], pd + 16);
        }
}

/* group H (0 or 1) of a Q4_K_R pair for R rows: the low nibbles are the first group's codes, the high ones the
 * second's. One group at a time: R int16 sums live, not 2R */
static inline __attribute__((always_inline)) void kr256_pair_half(const int H, const actk_t *a, int64_t m0,
        const int R, int64_t K, int64_t gi, const uint8_t *pg, __m256 scd, __m256 mneg, kracc *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i i16[KR_ROWS];
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) { /* 4-bit codes: all 8 vectors in int16 */
        const __m256i ql = _mm256_loadu_si256((const __m256i *)(pg + 32 + 32 * u));
        const __m256i c = _mm256_and_si256(H ? _mm256_srli_epi16(ql, 4) : ql, m4);
        for (int r = 0; r < R; r++) {
            const int8_t *av = a->qp + (m0 + r) * K + gi * QK_K + 64 * u + 32 * H;
            i16[r] = u ? dot32_i16(i16[r], c, av) : _mm256_maddubs_epi16(c, _mm256_load_si256((const __m256i *)av));
            KR256_PIN(i16[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        const float *pd = a->pd + (m0 + r) * (K / 512 * 32) + gi * 16 + 8 * H;
        const __m256i isum = H ? _mm256_slli_epi32(widen(i16[r]), 4) : widen(i16[r]); /* KR_HI16 */
        acc[r] = kr256_scale(acc[r], H, isum, _mm256_load_ps(pd), scd, 1, mneg, pd + 16);
    }
}

/* vector v of group g: positions 0-31 in *c0, 32-63 in *c1 */
static inline __attribute__((always_inline)) void kr256_codes(const int TYPE, const uint8_t *g, int v, __m256i *c0,
                                                               __m256i *c1) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    const __m256i ql = _mm256_loadu_si256((const __m256i *)(g + (TYPE == T_Q4_K_R ? 16 : 0) + 32 * v));
    *c0 = _mm256_and_si256(ql, m4);
    *c1 = _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
    if (TYPE == T_Q6_K_R) {
        const __m128i qh = _mm_loadu_si128((const __m128i *)(g + 128 + 16 * v));
        const __m256i t01 = _mm256_set_m128i(_mm_srli_epi16(qh, 2), qh);
        const __m256i t23 = _mm256_set_m128i(_mm_srli_epi16(qh, 6), _mm_srli_epi16(qh, 4));
        *c0 = _mm256_or_si256(*c0, _mm256_slli_epi16(_mm256_and_si256(t01, m2), 4));
        *c1 = _mm256_or_si256(*c1, _mm256_slli_epi16(_mm256_and_si256(t23, m2), 4));
    }
}

/* one group (Q6_K_R up to 4 rows, or Q4_K_R's odd last group) for R rows, both halves at once */
static inline __attribute__((always_inline)) void kr256_group(const int TYPE, const actk_t *a, int64_t m0,
        const int R, int64_t K, int64_t gi, const uint8_t *g, const __m256 *scd, const __m256 *mneg, kracc *acc) {
    const int64_t ns = K / 16, ng = K / QK_K;
    __m256i isum[KR_ROWS][2], i16[KR_ROWS][2];
    for (int r = 0; r < R; r++) isum[r][0] = isum[r][1] = i16[r][0] = i16[r][1] = _mm256_setzero_si256();
    const int span = TYPE == T_Q6_K_R ? 2 : 4; /* vectors summed in int16: 6-bit codes 2, 4-bit all 4 */
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        __m256i c[2];
        kr256_codes(TYPE, g, v, &c[0], &c[1]);
        for (int r = 0; r < R; r++)
            for (int h = 0; h < 2; h++) {
                i16[r][h] = dot32_i16(i16[r][h], c[h], a->qr + (m0 + r) * K + gi * QK_K + 64 * v + 32 * h);
                if ((v + 1) % span == 0) {
                    isum[r][h] = widen_add(isum[r][h], i16[r][h]);
                    i16[r][h] = _mm256_setzero_si256();
                }
            }
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < 2; h++) {
            const int64_t s = (m0 + r) * ns + gi * 16 + 8 * h;
            if (TYPE == T_Q6_K_R)
                isum[r][h] = _mm256_add_epi32(isum[r][h], _mm256_load_si256((const __m256i *)(a->b32 + s)));
            if (TYPE == T_Q4_K_R && h) isum[r][h] = _mm256_slli_epi32(isum[r][h], 4); /* KR_HI16 */
            acc[r] = kr256_scale(acc[r], h, isum[r][h], _mm256_set1_ps(a->d[(m0 + r) * ng + gi]), scd[h],
                                 TYPE == T_Q4_K_R, mneg[h], a->dbs + s);
        }
}

/* half H of a Q6_K_R group for R rows, from 5 rows (as kr256_pair_half: R int16 and R int32 sums live, not 2R of
 * each; kr256_group's GCC kept most of them on the stack). On the AMD EPYC, throwaway ctypes A/Bs on the 1.5B's
 * Q6_K_R down shape: 1.00-1.10x at 5 rows (5 runs), 1.04-1.10x at 8; the output matrix's shape 1.01x at 5 rows. */
static inline __attribute__((always_inline)) void kr256_q6_half(const int H, const actk_t *a, int64_t m0, const int R,
        int64_t K, int64_t gi, const uint8_t *g, __m256 scd, kracc *acc) {
    const int64_t ns = K / 16, ng = K / QK_K;
    __m256i isum[KR_ROWS], i16[KR_ROWS];
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) { /* 6-bit codes: 2 vectors in int16 */
        __m256i c[2];
        kr256_codes(T_Q6_K_R, g, v, &c[0], &c[1]); /* the other half's codes are dropped unused */
        for (int r = 0; r < R; r++) {
            const int8_t *av = a->qr + (m0 + r) * K + gi * QK_K + 64 * v + 32 * H;
            i16[r] = v % 2 ? dot32_i16(i16[r], c[H], av)
                           : _mm256_maddubs_epi16(c[H], _mm256_load_si256((const __m256i *)av));
            KR256_PIN(i16[r]);
            if (v % 2) isum[r] = v == 1 ? widen(i16[r]) : widen_add(isum[r], i16[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        const int64_t s = (m0 + r) * ns + gi * 16 + 8 * H;
        const __m256i i = _mm256_add_epi32(isum[r], _mm256_load_si256((const __m256i *)(a->b32 + s)));
        acc[r] = kr256_scale(acc[r], H, i, _mm256_set1_ps(a->d[(m0 + r) * ng + gi]), scd, 0, scd, NULL);
    }
}

/* a Q4_K_R pair's float scales per group h: scd[h] = d_h * sc (the second's d / 16: KR_HI16), mneg[h] =
 * -(dmin_h * m); both groups' 6-bit scales unpacked at once (k4_scale_bytes in 256 bits), the four fp16 in one
 * conversion. Every product is exact, so the bits are those of one group and one scalar at a time. */
static inline __attribute__((always_inline)) void kr256_pair_scales(const uint8_t *pg, __m256 *scd, __m256 *mneg) {
    const __m256i v = _mm256_loadu2_m128i((const __m128i *)(pg + 20), (const __m128i *)(pg + 4));
    const __m256i p = _mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); /* per group: u0 u2 u1 u2 */
    const __m256i q = _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); /* u0 u0 u1 u1 */
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(p, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
        _mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(q, 6),
        _mm256_setr_epi32(0, 0x03030303, 0, 0x03030303, 0, 0x03030303, 0, 0x03030303));
    const __m256i bytes = _mm256_or_si256(lo, _mm256_slli_epi32(top, 4)); /* group h's 16 bytes in half h */
    uint32_t w0, w1;
    memcpy(&w0, pg, 4);
    memcpy(&w1, pg + 16, 4);
    const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)w1 << 32 | w0))),
                                 _mm_setr_ps(1.0f, -1.0f, 0.0625f, -1.0f)); /* d0, -dmin0, d1 / 16, -dmin1 */
    const __m256 d = _mm256_castps128_ps256(dd);
    for (int h = 0; h < 2; h++) {
        const __m128i b = h ? _mm256_extracti128_si256(bytes, 1) : _mm256_castsi256_si128(bytes);
        scd[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)),
                               _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(2 * h)));
        mneg[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8))),
                                _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(2 * h + 1)));
    }
}

static inline __attribute__((always_inline)) void kr_range(const int TYPE, const actk_t *a, int64_t m0, const int R,
        int64_t K, const uint8_t *row, int64_t g0, int64_t g1, const int PF, kracc *acc) {
    const int64_t gb = group_bytes(TYPE);
    int64_t gi = g0;
    __asm__ volatile("" : : "r"(acc) : "memory");
    if (TYPE == T_Q4_K_R)
        for (; gi + 1 < g1; gi += 2) {
            const uint8_t *pg = row + gi * gb;
            if (PF) group_prefetch(pg, 2 * (int)gb);
            __m256 scd[2], mneg[2];
            kr256_pair_scales(pg, scd, mneg);
            if (R <= KR256_BOTH_HALVES_MAX) {
                kr256_pair(a, m0, R, K, gi, pg, scd, mneg, acc);
            } else {
                __asm__ volatile("" ::: "memory"); /* with the asm in kr_range: the accumulators wait in memory */
                kr256_pair_half(0, a, m0, R, K, gi, pg, scd[0], mneg[0], acc);
                kr256_pair_half(1, a, m0, R, K, gi, pg, scd[1], mneg[1], acc);
            }
        }
    for (; gi < g1; gi++) {
        const uint8_t *g = row + gi * gb;
        if (PF) group_prefetch(g, (int)gb);
        __m256 scd[2], mneg[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        if (TYPE == T_Q6_K_R) {
            const __m128i sc = _mm_loadu_si128((const __m128i *)(g + 192));
            const __m256 d = _mm256_set1_ps(fp16(g + 208));
            scd[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), d);
            scd[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), d);
        } else {
            const __m128i bytes = k4_scale_bytes(g);
            const __m128i sc = _mm_shuffle_epi8(bytes, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
            const __m128i mn =
                _mm_shuffle_epi8(bytes, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
            const __m256 d = _mm256_set1_ps(fp16(g)), nmin = _mm256_set1_ps(-fp16(g + 2));
            for (int h = 0; h < 2; h++) {
                const __m256 s8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sc, 8 * h)));
                scd[h] = _mm256_mul_ps(_mm256_mul_ps(s8, d), _mm256_set1_ps(h ? 0.0625f : 1.0f));
                mneg[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(mn, 8 * h))), nmin);
            }
        }
        if (TYPE == T_Q6_K_R && R > KR256_BOTH_HALVES_MAX) {
            __asm__ volatile("" ::: "memory"); /* one half after the other, not interleaved by GCC */
            kr256_q6_half(0, a, m0, R, K, gi, g, scd[0], acc);
            __asm__ volatile("" ::: "memory");
            kr256_q6_half(1, a, m0, R, K, gi, g, scd[1], acc);
        } else {
            kr256_group(TYPE, a, m0, R, K, gi, g, scd, mneg, acc);
        }
    }
}
#else
static inline float sum16(const float *acc) {
    float s[8];
    for (int k = 0; k < 8; k++) s[k] = acc[k] + acc[k + 8];
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* the scalar reference of the arithmetic above (the build without AVX2): natural order, the same sums */
static inline __attribute__((always_inline)) void kr_rows(const int TYPE, const actk_t *a, int64_t m0, const int R,
        int64_t K, const uint8_t *w, int64_t n, float *out, int64_t ldo) {
    const int64_t rb = row_bytes(TYPE, K), gb = group_bytes(TYPE), ng = K / QK_K, ns = K / 16;
    float acc[KQ_ROWS][16] = {{0.0f}};
    int64_t gi = 0;
    if (TYPE == T_Q4_K_R) /* pairs: lane l sub-block l % 8 of group gi + l / 8 */
        for (; gi + 1 < ng; gi += 2) {
            const uint8_t *pg = w + n * rb + gi * gb;
            uint8_t c[2][QK_K];
            float scd[16], mneg[16];
            for (int h = 0; h < 2; h++) pair_codes(pg, h, c[h]);
            for (int l = 0; l < 16; l++) {
                const int h = l / 8;
                int sc, m;
                scale_min_k4(l % 8, pg + 16 * h + 4, &sc, &m);
                scd[l] = (float)sc * (h ? fp16(pg + 16) * 0.0625f : fp16(pg));
                mneg[l] = (float)m * -fp16(pg + 16 * h + 2);
            }
            for (int r = 0; r < R; r++) {
                const int64_t m = m0 + r;
                for (int l = 0; l < 16; l++) {
                    const int h = l / 8, j = l % 8;
                    const int8_t *q = a->q + m * K + (gi + h) * QK_K + 32 * j;
                    int32_t isum = 0;
                    for (int i = 0; i < 32; i++) isum += (int32_t)c[h][32 * j + i] * q[i];
                    if (h) isum *= 16;
                    const float t = (float)isum * a->d[m * ng + gi + h];
                    acc[r][l] = fmaf(t, scd[l], acc[r][l]);
                    acc[r][l] = fmaf(mneg[l], a->dsum[m * (K / QK) + gi * 8 + l], acc[r][l]);
                }
            }
        }
    for (; gi < ng; gi++) {
        const uint8_t *g = w + n * rb + gi * gb;
        uint8_t c[QK_K];
        float scd[16], mneg[16];
        codes_repacked(TYPE, g, c);
        for (int k = 0; k < 16; k++) {
            if (TYPE == T_Q6_K_R) {
                scd[k] = (float)((const int8_t *)(g + 192))[k] * fp16(g + 208);
                mneg[k] = 0.0f;
            } else {
                int sc, m;
                scale_min_k4(k / 2, g + 4, &sc, &m);
                scd[k] = ((float)sc * fp16(g)) * (k >= 8 ? 0.0625f : 1.0f);
                mneg[k] = (float)m * -fp16(g + 2);
            }
        }
        for (int r = 0; r < R; r++) {
            const int64_t m = m0 + r, s = m * ns + gi * 16;
            const int8_t *q = a->q + m * K + gi * QK_K;
            for (int k = 0; k < 16; k++) {
                int32_t isum = 0;
                for (int i = 16 * k; i < 16 * k + 16; i++) isum += (int32_t)c[i] * q[i];
                if (TYPE == T_Q6_K_R) isum += a->b32[s + k];
                if (TYPE == T_Q4_K_R && k >= 8) isum *= 16; /* KR_HI16 */
                const float t = (float)isum * a->d[m * ng + gi];
                acc[r][k] = fmaf(t, scd[k], acc[r][k]);
                if (TYPE == T_Q4_K_R) acc[r][k] = fmaf(mneg[k], a->dbs[s + k], acc[r][k]);
            }
        }
    }
    for (int r = 0; r < R; r++) out[(m0 + r) * ldo + n] = sum16(acc[r]) + 0.0f;
}
#endif

#if defined(KQ_SIMD)
/* out[r * ldo + t] = facc_sum(folded[r][t]) + 0 for R activation rows of NT weight rows, folded[r][t] a row's
 * accumulator folded to 8 lanes (kracc_fold): 8 weight rows at once. At K = 1,536 (6 groups a row) one sum a row was
 * 17% of a Q4_K_R call's time with its weights in cache (one thread; a throwaway variant without the sums) */
static inline __attribute__((always_inline)) void folded_store(const int R, int64_t NT,
        const __m256 (*folded)[KQ_CHUNK], float *out, int64_t ldo) {
    for (int r = 0; r < R; r++) {
        int64_t t = 0;
        for (; t + 8 <= NT; t += 8)
            _mm256_storeu_ps(out + r * ldo + t, _mm256_add_ps(facc_sum8(&folded[r][t]), _mm256_setzero_ps()));
        for (; t < NT; t++) out[r * ldo + t] = facc_sum(folded[r][t]) + 0.0f;
    }
}

/* weight row n for R activation rows, its accumulators folded into folded[r][t] */
static inline __attribute__((always_inline)) void kr_rows(const int TYPE, const actk_t *a, int64_t m0, const int R,
        int64_t K, const uint8_t *w, int64_t n, __m256 (*folded)[KQ_CHUNK], int64_t t) {
    kracc acc[KR_ROWS];
    for (int r = 0; r < R; r++) acc[r] = kracc_zero();
    kr_range(TYPE, a, m0, R, K, w + n * row_bytes(TYPE, K), 0, K / QK_K, 1, acc);
    for (int r = 0; r < R; r++) folded[r][t] = kracc_fold(acc[r]);
}

#if defined(KQ_VNNI)
/* Activation rows for which two weight rows go at once (kr_rows2). The 1.5B's four projections back to back, 2
 * threads, from memory, an Intel Xeon (docs/benchmarks.md): 2 / 3 / 4 rows 3 / 9 / 10% faster. 5 rows (a
 * verification of k = 4), though the two rows' accumulators then pass the 32 registers: the 1.5B's gate_up 11% and
 * o 9% faster streamed (benchmarks.decode_bound --rows 5, issue 37's twenty-seventh pass); 8 rows 10-17% slower in
 * cache, so from 6 rows a row stays alone.
 *
 * KR_PACED: a Q4_K_R tile of several rows asks for its next lines a group (or a row's pair) at a time, half a pair
 * of steps apart, not all at the pair's start: a burst of 12-24 prefetches stalled the loop behind them. Two rows
 * at once gained 5-8% at 3 and 4 rows by pacing alone (at 1 row they read 14-16% slower than one at a time with
 * bursts, 5-10% with pacing); one row at a time with pacing: 4-5% faster at 5 rows, 6% slower at 1 (so 1 row
 * bursts). */
#define KR2_MIN 2
#define KR2_MAX 5
/* whether a tile of R rows takes its weight rows two at a time: Q4_K_R (kr_rows2), Q6_K_R (kr6_rows2) and Q5_0_R
 * (kr5_rows; the 0.5B's gate_up shape, 9,728 x 896, streamed on 2 threads: 4 and 5 rows 12-18% faster, 3 rows
 * 2-18%, 1 row within the noise, issue 37's twenty-seventh pass) */
static inline int kr_paired(const int TYPE, const int R) {
    return R >= KR2_MIN && R <= KR2_MAX && (TYPE == T_Q4_K_R || TYPE == T_Q6_K_R || TYPE == T_Q5_0_R);
}
/* kr_rows for weight rows n and n + 1 of a Q4_K_R, R <= KR2_MAX: their pairs together, a row's odd last group alone */
static inline __attribute__((always_inline)) void kr_rows2(const actk_t *a, int64_t m0, const int R, int64_t K,
        const uint8_t *w, int64_t n, __m256 (*folded)[KQ_CHUNK], int64_t t) {
    const int64_t rb = row_bytes(T_Q4_K_R, K), ng = K / QK_K, pairs_end = ng & ~(int64_t)1;
    const uint8_t *rowa = w + n * rb, *rowb = rowa + rb;
    kracc acca[KR2_MAX], accb[KR2_MAX];
    for (int r = 0; r < R; r++) acca[r] = accb[r] = kracc_zero();
    kr_pairs(2, a, m0, R, K, rowa, rowb, 0, pairs_end, 1, acca, accb);
    if (pairs_end < ng) {
        kr_range(T_Q4_K_R, a, m0, R, K, rowa, pairs_end, ng, 1, acca);
        kr_range(T_Q4_K_R, a, m0, R, K, rowb, pairs_end, ng, 1, accb);
    }
    for (int r = 0; r < R; r++) {
        folded[r][t] = kracc_fold(acca[r]);
        folded[r][t + 1] = kracc_fold(accb[r]);
    }
}

/* kr_rows for weight rows n and n + 1 of a Q6_K_R, R <= KR2_MAX, group by group: each activation vector is loaded
 * once for both rows, and each output gets kr_range's operations in its order (the same bits); each group prefetches
 * the bytes ahead of both rows, the second row's half a group later */
static inline __attribute__((always_inline)) void kr6_rows2(const actk_t *a, int64_t m0, const int R, int64_t K,
        const uint8_t *w, int64_t n, __m256 (*folded)[KQ_CHUNK], int64_t t) {
    const int64_t rb = row_bytes(T_Q6_K_R, K), gb = group_bytes(T_Q6_K_R), ng = K / QK_K, ns = K / 16;
    kracc acc[2][KR2_MAX];
    for (int r = 0; r < R; r++) acc[0][r] = acc[1][r] = kracc_zero();
    for (int64_t gi = 0; gi < ng; gi++) {
        const uint8_t *g[2] = {w + n * rb + gi * gb, w + (n + 1) * rb + gi * gb};
        __m512 scd[2], unused;
        for (int i = 0; i < 2; i++) kr512_scales(T_Q6_K_R, g[i], &scd[i], &unused);
        __m512i isum[2][KR2_MAX];
        for (int r = 0; r < R; r++) /* from - 32 * sum(q) */
            isum[0][r] = isum[1][r] = _mm512_load_si512((const void *)(a->b32 + (m0 + r) * ns + gi * 16));
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            if (v == 0 || v == 2) group_prefetch(g[v / 2], (int)gb);
            const __m512i codes[2] = {kr512_codes(T_Q6_K_R, g[0], v), kr512_codes(T_Q6_K_R, g[1], v)};
            for (int r = 0; r < R; r++) {
                const __m512i av = _mm512_load_si512((const void *)(a->qr + (m0 + r) * K + gi * QK_K + 64 * v));
                for (int i = 0; i < 2; i++) isum[i][r] = _mm512_dpbusd_epi32(isum[i][r], codes[i], av);
            }
        }
        for (int r = 0; r < R; r++) {
            const __m512 d = _mm512_set1_ps(a->d[(m0 + r) * ng + gi]);
            for (int i = 0; i < 2; i++)
                acc[i][r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum[i][r]), d), scd[i], acc[i][r]);
        }
    }
    for (int r = 0; r < R; r++) {
        folded[r][t] = kracc_fold(acc[0][r]);
        folded[r][t + 1] = kracc_fold(acc[1][r]);
    }
}
#endif

/* Weight rows n0 .. n0 + NT - 1 for R activation rows, K in blocks of KR_BLOCK groups: each block's activations are
 * read for all NT rows while they are in L1 (5 rows of the 1.5B's down projection, 8,960 wide, are 50-56 KB of
 * activations: read from L2 for every weight row, they made 5 rows cost 1.7x one). The same operations in the same
 * order per output as kr_rows (the accumulators wait in memory between blocks): the same bits. The prefetches follow
 * the blocked order: the next segment into L1, this segment of the next tile's rows into L2. Taken on the AVX-512
 * VNNI path only: on the AVX2 AMD EPYC the same blocking read 0.56-1.04x (throwaway ctypes A/Bs, 5 and 8 rows). */
#define KR_BLOCK 8
static inline __attribute__((always_inline)) void kr_tile_blocked(const int TYPE, const actk_t *a, int64_t m0,
        const int R, int64_t K, const uint8_t *w, int64_t n0, int64_t NT, float *out, int64_t ldo) {
    const int64_t rb = row_bytes(TYPE, K), gb = group_bytes(TYPE), ng = K / QK_K;
    kracc acc[KQ_CHUNK][KR_ROWS];
    for (int64_t t = 0; t < NT; t++)
        for (int r = 0; r < R; r++) acc[t][r] = kracc_zero();
    for (int64_t g0 = 0; g0 < ng; g0 += KR_BLOCK) {
        const int64_t g1 = g0 + KR_BLOCK < ng ? g0 + KR_BLOCK : ng, bytes = (g1 - g0) * gb;
        for (int64_t t = 0; t < NT; t++) {
            const uint8_t *seg = w + (n0 + t) * rb + g0 * gb;
            const uint8_t *next = t + 1 < NT ? seg + rb : w + n0 * rb + g1 * gb;
            /* the segment's lines a quota per two groups (Q4_K_R's pairs), not all before them: 1.03-1.09x at 5
             * and 8 rows of the 1.5B's down projection, streamed (an Intel Xeon, docs/benchmarks.md) */
            const int64_t steps = (g1 - g0 + 1) / 2, lines = (bytes + 63) / 64, quota = (lines + steps - 1) / steps;
            for (int64_t g = g0, done = 0; g < g1; g += 2) {
                for (const int64_t upto = done + quota < lines ? done + quota : lines; done < upto; done++) {
                    _mm_prefetch((const char *)(next + 64 * done), _MM_HINT_T0);
                    _mm_prefetch((const char *)(seg + NT * rb + 64 * done), _MM_HINT_T2);
                }
                kr_range(TYPE, a, m0, R, K, w + (n0 + t) * rb, g, g + 2 < g1 ? g + 2 : g1, 0, acc[t]);
            }
        }
    }
    __m256 folded[KR_ROWS][KQ_CHUNK];
    for (int64_t t = 0; t < NT; t++)
        for (int r = 0; r < R; r++) folded[r][t] = kracc_fold(acc[t][r]);
    folded_store(R, NT, folded, out + m0 * ldo + n0, ldo);
}
#endif


/* ---------------------------------------------------------------- Q5_0 repacked (Q5_0_R)
 * Per group of G blocks (8, or a row's last 4) and activation row, 16 int32 lanes: isum[k] = the dot product of lane
 * k's 2 G elements' unsigned codes (0..31) with the activations, less 16 * their sum (b16); then
 * acc[k] = fma(float(isum[k]) * d_act, d_w, acc[k]) with the d of the lane's block for both. The row's result is
 * reduced as kr_rows'. A group starts at element e: bytes e / 32 * 22, lanes e / 16 (act_t's da / b16 per row). */
#define KR5_GROUPS(...)                                                                                        \
    for (int64_t e = 0; e < K; e += 256) {                                                                     \
        const uint8_t *g = w + n * rb + e / 32 * 22;                                                           \
        const int64_t lane0 = e / 16;                                                                          \
        if (K - e >= 256) {                                                                                    \
            const int G = 8;                                                                                   \
            __VA_ARGS__                                                                                        \
        } else {                                                                                               \
            const int G = 4;                                                                                   \
            __VA_ARGS__                                                                                        \
        }                                                                                                      \
    }
#if defined(KQ_VNNI)
/* weight rows n .. n + NW - 1 (NW 1 or 2: two share each activation vector's load; each output gets the same
 * operations in the same order either way, the same bits) */
static inline __attribute__((always_inline)) void kr5_rows(const int NW, const act_t *a, int64_t m0, const int R,
                                                           int64_t K, const uint8_t *w, int64_t n, float *out,
                                                           int64_t ldo) {
    const int64_t rb = row_bytes(T_Q5_0_R, K), nl = K / 8;
    __m512 acc[2][KR_ROWS];
    for (int i = 0; i < NW; i++)
        for (int r = 0; r < R; r++) acc[i][r] = _mm512_setzero_ps();
    KR5_GROUPS({
        const __m512i lane_block = G == 8 ? _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)
                                          : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        __m512 scd[2];
        for (int i = 0; i < NW; i++) {
            const uint8_t *gi = g + i * rb;
            group_prefetch(gi, 22 * G);
            const __m512 d = _mm512_castps256_ps512(G == 8 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gi))
                                                           : _mm256_castps128_ps256(_mm_cvtph_ps(
                                                                 _mm_loadl_epi64((const __m128i *)gi))));
            scd[i] = _mm512_permutexvar_ps(lane_block, d);
        }
        __m512i isum[2][KR_ROWS];
        for (int r = 0; r < R; r++)
            isum[0][r] = isum[1][r] = _mm512_loadu_si512((const void *)(a->b16 + (m0 + r) * nl + lane0));
#pragma GCC unroll 4
        for (int v = 0; v < G / 2; v++) {
            __m512i codes[2];
            for (int i = 0; i < NW; i++) {
                const uint8_t *gi = g + i * rb;
                const __m512i ql = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(gi + 2 * G + 32 * v)));
                const __m512i lo = nibbles_split(ql);
                int64_t bits;
                memcpy(&bits, gi + 18 * G + 8 * v, 8);
                const __m512i word = _mm512_set1_epi64(bits); /* q5r_bit's order: qwords 0-3 half 0, 4-7 half 1 */
                const __m512i right = _mm512_srlv_epi64(word, _mm512_setr_epi64(0, 1, 2, 3, 0, 0, 0, 0));
                const __m512i high =
                    _mm512_mask_sllv_epi64(right, 0xF0, word, _mm512_setr_epi64(0, 0, 0, 0, 4, 3, 2, 1));
                codes[i] = _mm512_or_si512(lo, _mm512_and_si512(high, _mm512_set1_epi8(0x10)));
            }
            for (int r = 0; r < R; r++) {
                const __m512i av = _mm512_load_si512((const void *)(a->qr + (m0 + r) * K + e + 64 * v));
                for (int i = 0; i < NW; i++) isum[i][r] = _mm512_dpbusd_epi32(isum[i][r], codes[i], av);
            }
        }
        for (int r = 0; r < R; r++)
            for (int i = 0; i < NW; i++) {
                const __m512 t =
                    _mm512_mul_ps(_mm512_cvtepi32_ps(isum[i][r]), _mm512_loadu_ps(a->da + (m0 + r) * nl + lane0));
                acc[i][r] = _mm512_fmadd_ps(t, scd[i], acc[i][r]);
            }
    })
    for (int i = 0; i < NW; i++)
        for (int r = 0; r < R; r++) out[(m0 + r) * ldo + n + i] = sum512(acc[i][r]) + 0.0f;
}
#elif defined(KQ_SIMD)
/* half H's fifth bits from a vector's 64-bit word (q5r_bit's order) as 32 bytes, 0x10 where set */
static inline __attribute__((always_inline)) __m256i q5r_high(const uint8_t *word, const int H) {
    const __m256i w = _mm256_broadcastq_epi64(_mm_loadl_epi64((const __m128i *)word));
    return _mm256_and_si256(H ? _mm256_sllv_epi64(w, _mm256_setr_epi64x(4, 3, 2, 1))
                              : _mm256_srlv_epi64(w, _mm256_setr_epi64x(0, 1, 2, 3)),
                            _mm256_set1_epi8(0x10));
}

/* a tile's activation rows, found once per tile: computed again for every group of a weight row (4 groups at the
 * 0.5B's K of 896), R rows' addresses moved through the stack, and 8 rows cost 8x one (4 rows 3x) on the AMD EPYC
 * (throwaway driver, the 0.5B's qkv shape in cache, one thread) */
typedef struct {
    const int8_t *qr[KR_ROWS];
    const int32_t *b16[KR_ROWS];
    const float *da[KR_ROWS];
} kr5_ptrs;

static inline __attribute__((always_inline)) void kr5_rows_of(const act_t *a, int64_t m0, const int R, int64_t K,
                                                              kr5_ptrs *p) {
    for (int r = 0; r < R; r++) {
        p->qr[r] = a->qr + (m0 + r) * K;
        p->b16[r] = a->b16 + (m0 + r) * (K / 8);
        p->da[r] = a->da + (m0 + r) * (K / 8);
    }
}

/* half H of a Q5_0_R group for R rows (lanes 8H .. 8H + 7: the low nibbles' codes, or the high ones'), from 2 rows:
 * R int16 sums live, not 2R (as kr256_pair_half); the accumulators wait in memory */
static inline __attribute__((always_inline)) void kr5_half(const int H, const kr5_ptrs *p, const int R,
        const uint8_t *g, const int G, int64_t e, __m256 scd, __m256 (*acc)[2]) {
    const int64_t lane0 = e / 16;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i i16[KR_ROWS];
#pragma GCC unroll 4
    for (int v = 0; v < G / 2; v++) { /* 5-bit codes: up to 4 vectors in int16 */
        const __m256i ql = _mm256_loadu_si256((const __m256i *)(g + 2 * G + 32 * v));
        const __m256i c = _mm256_or_si256(_mm256_and_si256(H ? _mm256_srli_epi16(ql, 4) : ql, m4),
                                          q5r_high(g + 18 * G + 8 * v, H));
        for (int r = 0; r < R; r++) {
            const int8_t *av = p->qr[r] + e + 64 * v + 32 * H;
            i16[r] = v ? dot32_i16(i16[r], c, av) : _mm256_maddubs_epi16(c, _mm256_load_si256((const __m256i *)av));
            KR256_PIN(i16[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        const int64_t l = lane0 + 8 * H;
        const __m256i isum = widen_add(_mm256_loadu_si256((const __m256i *)(p->b16[r] + l)), i16[r]);
        const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_loadu_ps(p->da[r] + l));
        acc[r][H] = _mm256_fmadd_ps(t, scd, acc[r][H]);
    }
}

/* weight row n for R activation rows, its accumulators folded into folded[r][t] (folded_store sums 8 rows at once).
 * One row takes both halves together; from 2 rows one half at a time (kr5_half): both together, GCC kept most of the
 * 4R sums on the stack, and 2 rows cost 1.9x one on the AMD EPYC (throwaway driver, 0.5B's gate_up in cache). */
static inline __attribute__((always_inline)) void kr5_rows(const kr5_ptrs *p, const int R, int64_t K,
        const uint8_t *w, int64_t n, __m256 (*folded)[KQ_CHUNK], int64_t t) {
    const int64_t rb = row_bytes(T_Q5_0_R, K);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[KR_ROWS][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    if (R > 1) __asm__ volatile("" : : "r"(acc) : "memory");
    KR5_GROUPS({
        group_prefetch(g, 22 * G);
        const __m256 d8 = G == 8 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g))
                                 : _mm256_castps128_ps256(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)g)));
        const __m256 scd[2] = {
            _mm256_permutevar8x32_ps(d8, G == 8 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)
                                                : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)),
            _mm256_permutevar8x32_ps(d8, G == 8 ? _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)
                                                : _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3))};
        if (R > 1) {
            __asm__ volatile("" ::: "memory");
            kr5_half(0, p, R, g, G, e, scd[0], acc);
            __asm__ volatile("" ::: "memory");
            kr5_half(1, p, R, g, G, e, scd[1], acc);
        } else {
            __m256i isum[2], i16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            for (int h = 0; h < 2; h++)
                isum[h] = _mm256_loadu_si256((const __m256i *)(p->b16[0] + lane0 + 8 * h));
            for (int v = 0; v < G / 2; v++) { /* 5-bit codes: up to 4 vectors in int16 */
                const __m256i ql = _mm256_loadu_si256((const __m256i *)(g + 2 * G + 32 * v));
                const __m256i c[2] = {
                    _mm256_or_si256(_mm256_and_si256(ql, m4), q5r_high(g + 18 * G + 8 * v, 0)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), m4), q5r_high(g + 18 * G + 8 * v, 1))};
                for (int h = 0; h < 2; h++) i16[h] = dot32_i16(i16[h], c[h], p->qr[0] + e + 64 * v + 32 * h);
            }
            for (int h = 0; h < 2; h++) {
                isum[h] = widen_add(isum[h], i16[h]);
                const __m256 tt = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[h]),
                                                _mm256_loadu_ps(p->da[0] + lane0 + 8 * h));
                acc[0][h] = _mm256_fmadd_ps(tt, scd[h], acc[0][h]);
            }
        }
    })
    for (int r = 0; r < R; r++) folded[r][t] = _mm256_add_ps(acc[r][0], acc[r][1]);
}
#else
static inline __attribute__((always_inline)) void kr5_rows(const act_t *a, int64_t m0, const int R, int64_t K,
                                                           const uint8_t *w, int64_t n, float *out, int64_t ldo) {
    const int64_t rb = row_bytes(T_Q5_0_R, K), nl = K / 8;
    float acc[KQ_ROWS][16] = {{0.0f}};
    KR5_GROUPS({
        uint8_t c[QK_K];
        const int width = 2 * G; /* elements per lane */
        q5_0_group_codes(g, G, c);
        for (int r = 0; r < R; r++) {
            const int64_t m = m0 + r;
            const int8_t *q = a->q + m * K + e;
            for (int k = 0; k < 16; k++) {
                int32_t isum = a->b16[m * nl + lane0 + k];
                for (int i = width * k; i < width * k + width; i++) isum += (int32_t)c[i] * q[i];
                const float t = (float)isum * a->da[m * nl + lane0 + k];
                acc[r][k] = fmaf(t, fp16(g + 2 * (width * k / QK)), acc[r][k]);
            }
        }
    })
    for (int r = 0; r < R; r++) out[(m0 + r) * ldo + n] = sum16(acc[r]) + 0.0f;
}
#endif
#undef KR5_GROUPS

/* weight rows n0 .. n0 + NT - 1 of a K-quant for R activation rows */
static inline __attribute__((always_inline)) void kk_tile(const int TYPE, const actk_t *a, int64_t m0, const int R,
        int64_t K, const uint8_t *w, int64_t n0, int64_t NT, float *out, int64_t ldo) {
#if defined(KQ_VNNI)
    /* a tile whose weight rows go two at a time reads its activations once per two rows: blocked from twice */
    if (TYPE >= T_REPACKED && R > 1 && R * K > (kr_paired(TYPE, R) ? 2 : 1) * kr_blocked_from) {
        kr_tile_blocked(TYPE, a, m0, R, K, w, n0, NT, out, ldo);
        return;
    }
#endif
#if defined(KQ_SIMD)
    if (TYPE >= T_REPACKED) {
        __m256 folded[KR_ROWS][KQ_CHUNK];
        int64_t t = 0;
#if defined(KQ_VNNI)
        if (kr_paired(TYPE, R)) {
            for (; t + 1 < NT; t += 2) {
                if (TYPE == T_Q4_K_R)
                    kr_rows2(a, m0, R < KR2_MAX ? R : KR2_MAX, K, w, n0 + t, folded, t);
                else
                    kr6_rows2(a, m0, R < KR2_MAX ? R : KR2_MAX, K, w, n0 + t, folded, t);
            }
        }
#endif
        for (; t < NT; t++) kr_rows(TYPE, a, m0, R, K, w, n0 + t, folded, t);
        folded_store(R, NT, folded, out + m0 * ldo + n0, ldo);
        return;
    }
    for (int64_t t = 0; t < NT; t++) kk_rows_v(TYPE, a, m0, R, K, w, n0 + t, out, ldo);
#else
    for (int64_t t = 0; t < NT; t++) {
        if (TYPE >= T_REPACKED)
            kr_rows(TYPE, a, m0, R, K, w, n0 + t, out, ldo);
        else
            kk_rows_c(TYPE, a, m0, R, K, w, n0 + t, out, ldo);
    }
#endif
}

/* weight rows n0 .. n0 + NT - 1 of a Q5_0_R for R activation rows */
static inline __attribute__((always_inline)) void kr5_tile(const act_t *a, int64_t m0, const int R, int64_t K,
        const uint8_t *w, int64_t n0, int64_t NT, float *out, int64_t ldo) {
#if defined(KQ_SIMD) && !defined(KQ_VNNI)
    __m256 folded[KR_ROWS][KQ_CHUNK];
    kr5_ptrs p;
    kr5_rows_of(a, m0, R, K, &p);
    for (int64_t t = 0; t < NT; t++) kr5_rows(&p, R, K, w, n0 + t, folded, t);
    folded_store(R, NT, folded, out + m0 * ldo + n0, ldo);
#else
    int64_t t = 0;
#if defined(KQ_VNNI)
    if (kr_paired(T_Q5_0_R, R))
        for (; t + 1 < NT; t += 2) kr5_rows(2, a, m0, R, K, w, n0 + t, out, ldo);
    for (; t < NT; t++) kr5_rows(1, a, m0, R, K, w, n0 + t, out, ldo);
#else
    for (; t < NT; t++) kr5_rows(a, m0, R, K, w, n0 + t, out, ldo);
#endif
#endif
}

#define KR5_R(MAX)                                                                                             \
    switch (R) {                                                                                               \
    case 1: kr5_tile(&a->b32, m0, 1, K, w, n0, NT, out, ldo); break;                                           \
    case 2: kr5_tile(&a->b32, m0, 2, K, w, n0, NT, out, ldo); break;                                           \
    case 3: kr5_tile(&a->b32, m0, 3, K, w, n0, NT, out, ldo); break;                                           \
    case 4: kr5_tile(&a->b32, m0, MAX < 4 ? MAX : 4, K, w, n0, NT, out, ldo); break;                           \
    case 5: kr5_tile(&a->b32, m0, MAX < 5 ? MAX : 5, K, w, n0, NT, out, ldo); break;                           \
    case 6: kr5_tile(&a->b32, m0, MAX < 6 ? MAX : 6, K, w, n0, NT, out, ldo); break;                           \
    case 7: kr5_tile(&a->b32, m0, MAX < 7 ? MAX : 7, K, w, n0, NT, out, ldo); break;                           \
    default: kr5_tile(&a->b32, m0, MAX, K, w, n0, NT, out, ldo); break;                                        \
    }

#define KQ_R(TYPE)                                                                                             \
    switch (R) {                                                                                               \
    case 1: rows_dot(TYPE, &a->b32, m0, 1, K, w, n0, NT, out, ldo); break;                                     \
    case 2: rows_dot(TYPE, &a->b32, m0, 2, K, w, n0, NT, out, ldo); break;                                     \
    case 3: rows_dot(TYPE, &a->b32, m0, 3, K, w, n0, NT, out, ldo); break;                                     \
    default: rows_dot(TYPE, &a->b32, m0, KQ_ROWS, K, w, n0, NT, out, ldo); break;                              \
    }

/* R never exceeds MAX (tile_rows); the clamps keep the cases above it, never taken, within the arrays */
#define KK_R(TYPE, MAX)                                                                                        \
    switch (R) {                                                                                               \
    case 1: kk_tile(TYPE, &a->k, m0, 1, K, w, n0, NT, out, ldo); break;                                        \
    case 2: kk_tile(TYPE, &a->k, m0, 2, K, w, n0, NT, out, ldo); break;                                        \
    case 3: kk_tile(TYPE, &a->k, m0, 3, K, w, n0, NT, out, ldo); break;                                        \
    case 4: kk_tile(TYPE, &a->k, m0, MAX < 4 ? MAX : 4, K, w, n0, NT, out, ldo); break;                        \
    case 5: kk_tile(TYPE, &a->k, m0, MAX < 5 ? MAX : 5, K, w, n0, NT, out, ldo); break;                        \
    case 6: kk_tile(TYPE, &a->k, m0, MAX < 6 ? MAX : 6, K, w, n0, NT, out, ldo); break;                        \
    case 7: kk_tile(TYPE, &a->k, m0, MAX < 7 ? MAX : 7, K, w, n0, NT, out, ldo); break;                        \
    default: kk_tile(TYPE, &a->k, m0, MAX, K, w, n0, NT, out, ldo); break;                                     \
    }

/* activation rows per tile for a block type: each tile reads the weight rows once */
static int tile_rows(int type) {
#if defined(KQ_SIMD)
    if (type >= T_REPACKED) return KR_ROWS;
#endif
    (void)type;
    return KQ_ROWS;
}

static void tile(int type, const acts_t *a, int64_t m0, int R, int64_t K, const uint8_t *w, int64_t n0, int64_t NT,
                 float *out, int64_t ldo) {
    switch (type) {
#if defined(KQ_VNNI)
    case T_Q4_K_R: KK_R(T_Q4_K_R, KR_ROWS) break;
    case T_Q6_K_R: KK_R(T_Q6_K_R, KR_ROWS) break;
    case T_Q5_0_R: KR5_R(KR_ROWS) break;
#elif defined(KQ_SIMD)
    case T_Q4_K_R: KK_R(T_Q4_K_R, KR_ROWS) break;
    case T_Q6_K_R: KK_R(T_Q6_K_R, KR_ROWS) break;
    case T_Q5_0_R: KR5_R(KR_ROWS) break;
#else
    case T_Q5_0_R: KR5_R(KQ_ROWS) break;
    case T_Q4_K_R: KK_R(T_Q4_K_R, KQ_ROWS) break;
    case T_Q6_K_R: KK_R(T_Q6_K_R, KQ_ROWS) break;
#endif
    case T_Q4_K: KK_R(T_Q4_K, KQ_ROWS) break;
    case T_Q6_K: KK_R(T_Q6_K, KQ_ROWS) break;
    case T_Q5_K: KK_R(T_Q5_K, KQ_ROWS) break;
    case T_Q8_0: KQ_R(T_Q8_0) break;
    case T_Q5_0: KQ_R(T_Q5_0) break;
    case T_Q5_1: KQ_R(T_Q5_1) break;
    case T_Q4_0: KQ_R(T_Q4_0) break;
    default: KQ_R(T_Q4_1) break;
    }
}

/* A call's activation arrays live in one block, each array 64-byte aligned (kept_arrays, kept_block.h). The
 * 1.5B's decode makes 113 calls a token; allocating and freeing up to 15 arrays each, right after the last call's
 * weights had streamed through the caches, took 2.4 us a call (0.69 -> 0.42 ms a token before the parallel regions,
 * the activations' rounding included). */
static void acts_free(acts_t *a) {
    if (a->owned) free(a->block);
}

/* the formats the parts need (need_r: the repacked K-quants', which need_k's too; need_r5: Q5_0_R's, which need_32's
 * too), for M rows of K; 0, or -1 when memory ran out */
static int acts_alloc(acts_t *a, int64_t M, int64_t K, int need_32, int need_k, int need_r, int need_r5,
                      int need_p) {
    const int64_t nb = K / QK;
    void **fields[16];
    int64_t sizes[16];
    int n = 0;
#define ACTS_ARRAY(field, count) (fields[n] = (void **)&(field), sizes[n++] = (int64_t)sizeof(*(field)) * (count))
    if (need_32) {
        ACTS_ARRAY(a->b32.q, M * K);
        ACTS_ARRAY(a->b32.d, M * nb);
        ACTS_ARRAY(a->b32.dsum, M * nb);
    }
    if (need_r5) {
        ACTS_ARRAY(a->b32.qr, M * K);
        ACTS_ARRAY(a->b32.da, M * (K / 8));
        ACTS_ARRAY(a->b32.b16, M * (K / 8));
    }
    if (need_k) {
        ACTS_ARRAY(a->k.q, M * K);
        ACTS_ARRAY(a->k.d, M * (K / QK_K));
        ACTS_ARRAY(a->k.dsum, M * nb);
        ACTS_ARRAY(a->k.bsum, M * (K / 16));
    }
    if (need_r) {
        ACTS_ARRAY(a->k.qr, M * K);
        ACTS_ARRAY(a->k.dbs, M * (K / 16));
        ACTS_ARRAY(a->k.b32, M * (K / 16));
    }
    if (need_p) {
        ACTS_ARRAY(a->k.qp, M * K);
        ACTS_ARRAY(a->k.pd, M * (K / 512 * 32) + 16);
    }
#undef ACTS_ARRAY
    a->block = kept_arrays(n, fields, sizes, &a->owned);
    return a->block ? 0 : -1;
}

/* a thread's run of chunks [front, back) as one word (front << 32 | back), on its own cache line: the owner takes
 * from the front, a thread out of work takes the back half */
typedef struct {
    _Atomic uint64_t range;
    char pad[64 - sizeof(uint64_t)];
} run_slot;

/* the next chunks of a run from its front, [*first, return value): an eighth of what is left (at least one), so
 * that a run of hundreds of chunks costs tens of atomic operations; -1 when it is empty */
static int64_t run_take_front(run_slot *run, int64_t *first) {
    uint64_t r = atomic_load(&run->range);
    for (;;) {
        const uint64_t front = r >> 32, back = r & 0xffffffffu;
        if (front >= back) return -1;
        const uint64_t take = (back - front + 7) / 8;
        if (atomic_compare_exchange_weak(&run->range, &r, ((front + take) << 32) | back)) {
            *first = (int64_t)front;
            return (int64_t)(front + take);
        }
    }
}

/* moves the back half of the largest run of the others (2 chunks or more) to runs[me]: 0 when there is none */
static int run_steal(run_slot *runs, int team, int me) {
    for (;;) {
        int victim = -1;
        uint64_t best = 1, seen = 0;
        for (int t = 0; t < team; t++) {
            const uint64_t r = atomic_load(&runs[t].range), left = (r & 0xffffffffu) - (r >> 32);
            if (t != me && (r >> 32) < (r & 0xffffffffu) && left > best) victim = t, best = left, seen = r;
        }
        if (victim < 0) return 0;
        const uint64_t front = seen >> 32, back = seen & 0xffffffffu, taken = (back - front) / 2;
        if (atomic_compare_exchange_strong(&runs[victim].range, &seen, (front << 32) | (back - taken))) {
            atomic_store(&runs[me].range, ((back - taken) << 32) | back);
            return 1;
        }
    }
}

/* where thread t's run starts: the first chunk whose first weight byte is at t * total / nthreads or after it, found
 * part by part (walking every chunk cost 4 us a call on the 1.5B's gate_up, 1,120 chunks, and 29 us on its output
 * matrix, 9,496) */
static int64_t run_start(int64_t t, int nthreads, int64_t total, int nparts, const int64_t *first_chunk,
                         const int64_t *first_byte, const int *types, int64_t K) {
    for (int p = 0; p < nparts; p++) {
        /* chunk i of part p starts at byte first_byte[p] + i * step: the least i with nthreads * that >= t * total */
        const int64_t step = nthreads * (KQ_CHUNK * row_bytes(types[p], K));
        const int64_t need = t * total - nthreads * first_byte[p];
        const int64_t i = need <= 0 ? 0 : (need + step - 1) / step;
        if (i < first_chunk[p + 1] - first_chunk[p]) return first_chunk[p] + i;
    }
    return first_chunk[nparts];
}

/* the output rows of chunk c (KQ_CHUNK weight rows of the part it falls in) for all M activation rows */
static void kq_chunk(int64_t c, const int64_t *first_chunk, const int *types, const int64_t *ns,
                     const uint8_t *const *ws, const int64_t *first_col, const acts_t *a, int64_t M, int64_t K,
                     float *out, int64_t ldo) {
    int p = 0;
    while (c >= first_chunk[p + 1]) p++;
    const int64_t n0 = (c - first_chunk[p]) * KQ_CHUNK;
    const int64_t NT = n0 + KQ_CHUNK < ns[p] ? KQ_CHUNK : ns[p] - n0;
    const int step = tile_rows(types[p]);
    for (int64_t m0 = 0; m0 < M; m0 += step) {
        const int R = (int)(M - m0 < step ? M - m0 : step);
        tile(types[p], a, m0, R, K, ws[p], n0, NT, out + first_col[p], ldo);
    }
}


#define KQ_MAX_PARTS 16

/* out[M, sum ns] (row stride ldo) = x[M, K] (row stride ldx) @ W^T, W the parts stacked along the output: part p
 * ns[p] rows of types[p] blocks at ws[p]. The activations are quantized once and all parts' output chunks share
 * one parallel region (a fused projection whose shards differ in type is one call).
 * Returns 0, -1 when memory ran out, -2 for a type or K this kernel does not take (or too many parts). */
int aio_gemm_kq_parts(const float *x, int64_t M, int64_t K, int64_t ldx, int nparts, const uint8_t *const *ws,
                      const int64_t *ns, const int *types, float *out, int64_t ldo, int nthreads) {
    if (nparts < 1 || nparts > KQ_MAX_PARTS || K % QK) return -2;
    int64_t first_chunk[KQ_MAX_PARTS + 1], first_col[KQ_MAX_PARTS];
    first_chunk[0] = 0;
    for (int p = 0; p < nparts; p++) {
        if (!row_bytes(types[p], K)) return -2;
        first_col[p] = p ? first_col[p - 1] + ns[p - 1] : 0;
        first_chunk[p + 1] = first_chunk[p] + (ns[p] + KQ_CHUNK - 1) / KQ_CHUNK;
    }
    const int64_t chunks = first_chunk[nparts], N = first_col[nparts - 1] + ns[nparts - 1];
    int need_k = 0, need_32 = 0, need_r = 0, need_r5 = 0, need_p = 0;
    for (int p = 0; p < nparts; p++) {
        if (stored_type(types[p]) >= T_Q4_K) need_k = 1;
        else need_32 = 1;
        if (types[p] == T_Q5_0_R) need_r5 = 1;
        else if (types[p] >= T_REPACKED) need_r = 1;
        if (types[p] == T_Q4_K_R) need_p = 1;
    }
    acts_t a;
    memset(&a, 0, sizeof a);
    if (acts_alloc(&a, M, K, need_32, need_k, need_r, need_r5, need_p)) return -1;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (M * K >= 16384)
    for (int64_t m = 0; m < M; m++) {
        if (need_32) quantize_act(x + m * ldx, K, &a.b32, m);
        if (need_k) {
            const actk_t row = actk_row(&a.k, m, K);
            quantize_act_k(x + m * ldx, K, &row);
        }
    }
    /* each thread a contiguous run of chunks holding its share of the weight bytes (parts of different types
     * have different bytes per row: Q4_K_M's qkv, Q4_K next to a Q6_K v): chunk c goes to the thread whose
     * share its first byte falls in. A thread that finishes its run takes the back half of the largest run left
     * (the cores of one machine do not stream at one speed: a verification's two threads finished 8-19 us apart
     * a call on average, a decode step's 6-7), so each thread's weights stay a contiguous stream for its
     * prefetches; a chunk's rows are computed alike by any thread. */
    int64_t first_byte[KQ_MAX_PARTS + 1];
    first_byte[0] = 0;
    for (int p = 0; p < nparts; p++) first_byte[p + 1] = first_byte[p] + ns[p] * row_bytes(types[p], K);
    const int64_t total = first_byte[nparts];
    const int parallel = N * M * K >= 262144 && nthreads > 1;
    run_slot *runs = parallel ? (run_slot *)aligned_alloc(64, sizeof(run_slot) * nthreads) : NULL;
    if (parallel && !runs) {
        acts_free(&a);
        return -1;
    }
    for (int64_t t = 0, front = 0; parallel && t < nthreads; t++) { /* thread 0's run starts at chunk 0 */
        const int64_t back = run_start(t + 1, nthreads, total, nparts, first_chunk, first_byte, types, K);
        atomic_init(&runs[t].range, ((uint64_t)front << 32) | (uint64_t)back);
        front = back;
    }
#pragma omp parallel num_threads(nthreads) if (parallel)
    {
#if defined(_OPENMP)
        const int team = omp_get_num_threads(), me = omp_get_thread_num();
#else
        const int team = 1, me = 0;
#endif
        if (team != nthreads || !parallel) { /* one thread (or a team short of threads): every chunk in order */
            for (int64_t c = me; c < chunks; c += team)
                kq_chunk(c, first_chunk, types, ns, ws, first_col, &a, M, K, out, ldo);
        } else {
            for (;;) {
                int64_t first, end;
                while ((end = run_take_front(&runs[me], &first)) >= 0)
                    for (int64_t c = first; c < end; c++)
                        kq_chunk(c, first_chunk, types, ns, ws, first_col, &a, M, K, out, ldo);
                if (!run_steal(runs, nthreads, me)) break;
            }
        }
    }
    free(runs);
    acts_free(&a);
    return 0;
}

/* one part: out[M, N] = x @ W^T, W as N rows of `type` blocks */
int aio_gemm_kq(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w, int64_t N, int type,
                float *out, int64_t ldo, int nthreads) {
    return aio_gemm_kq_parts(x, M, K, ldx, 1, &w, &N, &type, out, ldo, nthreads);
}
