/* One Llama decoder layer of a step in a single call, for models whose projections all run the native kernels
 * (tiers/models/llama.py LlamaDecoderLayer.forward takes this path when it can): the same ops the Python layer
 * would call one by one (ops.c, w4a8.c), in the same order, without a trip through Python between them.
 *   h = rmsnorm(x); qkv = h Wqkv^T; rotary(q, k); a = attention; x += a Wo^T;
 *   h = rmsnorm(x); x += (silu(gate) * up)(h Wgu^T) Wdown^T
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int aio_gemm_w4(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w, int64_t N, float *out,
                int64_t ldo, int nthreads);
int aio_gemm_w8(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w, int64_t N, float *out,
                int64_t ldo, int nthreads);
int aio_gemm_w8f(const float *x, int64_t M, int64_t K, int64_t ldx, const uint8_t *w, int64_t N, float *out,
                 int64_t ldo, int nthreads);
int aio_gemm_kq_parts(const float *x, int64_t M, int64_t K, int64_t ldx, int nparts, const uint8_t *const *ws,
                      const int64_t *ns, const int *types, float *out, int64_t ldo, int nthreads);
void aio_rmsnorm(const float *x, int64_t ldx, const float *w, float *out, int64_t M, int64_t K, float eps,
                 int nthreads);
void aio_silu_mul(const float *gate_up, float *out, int64_t M, int64_t I, int nthreads);
void aio_rotary(float *x, int64_t ldx, int64_t T, int heads, int D, const float *cos, const float *signed_sin);
int aio_paged_attention(const float *q, int64_t q_stride, const float *k, int64_t k_stride, const float *v,
                        int64_t v_stride, float *k_cache, float *v_cache, const int64_t *slot_mapping,
                        int64_t num_tokens, const int64_t *token_seq, const int64_t *visible,
                        const int64_t *block_tables, int64_t max_blocks, int num_heads, int num_kv_heads,
                        int head_dim, int block_size, float scale, float *out, int nthreads);

enum { KIND_W4A8 = 0, KIND_W8A8 = 1, KIND_W8A32 = 2, KIND_KQ = 3 };

/* a KIND_KQ projection's weight: GGUF blocks as stored, one part per block type (kquant.c) */
typedef struct {
    int64_t nparts;
    const uint8_t *const *ws;
    const int64_t *ns;
    const int *types;
} aio_kq_weight;

typedef struct {
    int64_t hidden, num_heads, num_kv_heads, head_dim, intermediate;
    float eps_in, eps_post, scale;
    const float *norm_in, *norm_post;
    const uint8_t *w_qkv, *w_o, *w_gate_up, *w_down;
    int32_t kind_qkv, kind_o, kind_gate_up, kind_down;
    const float *bias_qkv; /* NULL, or the fused q/k/v bias (Qwen2) */
} aio_layer;

static int project(int kind, const float *x, int64_t M, int64_t K, const uint8_t *w, int64_t N, float *out,
                   int nthreads) {
    if (kind == KIND_W4A8) return aio_gemm_w4(x, M, K, K, w, N, out, N, nthreads);
    if (kind == KIND_W8A8) return aio_gemm_w8(x, M, K, K, w, N, out, N, nthreads);
    if (kind == KIND_KQ) {
        const aio_kq_weight *q = (const aio_kq_weight *)w;
        return aio_gemm_kq_parts(x, M, K, K, (int)q->nparts, q->ws, q->ns, q->types, out, N, nthreads);
    }
    return aio_gemm_w8f(x, M, K, K, w, N, out, N, nthreads);
}

static void add_into(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

enum { ROWS_H, ROWS_WIDE, ROWS_ATTN, ROWS_DELTA, ROWS_N };

/* the widths of a layer's working rows, one row per token, back to back in its scratch: h (max(hidden,
 * intermediate)), wide (max(qkv, 2 intermediate)), attn (heads x head_dim), delta (hidden); returns their sum */
static int64_t row_widths(const aio_layer *L, int64_t w[ROWS_N]) {
    const int64_t q_size = L->num_heads * L->head_dim, qkv_width = q_size + 2 * L->num_kv_heads * L->head_dim;
    const int64_t inter = L->intermediate, hid = L->hidden;
    w[ROWS_H] = hid > inter ? hid : inter;
    w[ROWS_WIDE] = qkv_width > 2 * inter ? qkv_width : 2 * inter;
    w[ROWS_ATTN] = q_size;
    w[ROWS_DELTA] = hid;
    return w[ROWS_H] + w[ROWS_WIDE] + w[ROWS_ATTN] + w[ROWS_DELTA];
}

static int64_t scratch_floats(const aio_layer *L, int64_t T) {
    int64_t w[ROWS_N];
    return T * row_widths(L, w);
}

/* one layer on scratch_floats(L, T) floats at `scratch` */
static int layer_step(const aio_layer *L, float *x, int64_t T, const float *cos, const float *signed_sin,
                      float *k_cache, float *v_cache, int block_size, const int64_t *slot_mapping,
                      const int64_t *token_seq, const int64_t *visible, const int64_t *block_tables,
                      int64_t max_blocks, int nthreads, float *scratch) {
    const int64_t hid = L->hidden, D = L->head_dim, H = L->num_heads, Hkv = L->num_kv_heads;
    const int64_t q_size = H * D, kv_size = Hkv * D, qkv_width = q_size + 2 * kv_size, inter = L->intermediate;
    int64_t w[ROWS_N];
    row_widths(L, w);
    float *h = scratch, *wide = h + T * w[ROWS_H], *attn = wide + T * w[ROWS_WIDE], *delta = attn + T * w[ROWS_ATTN];
    int rc;
    aio_rmsnorm(x, hid, L->norm_in, h, T, hid, L->eps_in, nthreads);
    if ((rc = project(L->kind_qkv, h, T, hid, L->w_qkv, qkv_width, wide, nthreads))) return rc;
    if (L->bias_qkv)
        for (int64_t t = 0; t < T; t++) add_into(wide + t * qkv_width, L->bias_qkv, qkv_width);
    aio_rotary(wide, qkv_width, T, (int)(H + Hkv), (int)D, cos, signed_sin);
    if (aio_paged_attention(wide, qkv_width, wide + q_size, qkv_width, wide + q_size + kv_size, qkv_width, k_cache,
                            v_cache, slot_mapping, T, token_seq, visible, block_tables, max_blocks, (int)H,
                            (int)Hkv, (int)D, block_size, L->scale, attn, nthreads))
        return -1;
    if ((rc = project(L->kind_o, attn, T, q_size, L->w_o, hid, delta, nthreads))) return rc;
    add_into(x, delta, T * hid);
    aio_rmsnorm(x, hid, L->norm_post, h, T, hid, L->eps_post, nthreads);
    if ((rc = project(L->kind_gate_up, h, T, hid, L->w_gate_up, 2 * inter, wide, nthreads))) return rc;
    aio_silu_mul(wide, h, T, inter, nthreads);
    if ((rc = project(L->kind_down, h, T, inter, L->w_down, hid, delta, nthreads))) return rc;
    add_into(x, delta, T * hid);
    return 0;
}

/* x: the residual stream [T, hidden], updated in place. Returns 0, -1 when memory ran out, or a projection
 * kernel's -2 (a block type or shape it does not take). */
int aio_llama_layer(const aio_layer *L, float *x, int64_t T, const float *cos, const float *signed_sin,
                    float *k_cache, float *v_cache, int block_size, const int64_t *slot_mapping,
                    const int64_t *token_seq, const int64_t *visible, const int64_t *block_tables,
                    int64_t max_blocks, int nthreads) {
    float *scratch = (float *)malloc(sizeof(float) * scratch_floats(L, T));
    if (!scratch) return -1;
    const int rc = layer_step(L, x, T, cos, signed_sin, k_cache, v_cache, block_size, slot_mapping, token_seq, visible,
                              block_tables, max_blocks, nthreads, scratch);
    free(scratch);
    return rc;
}

/* cos / signed sin rows [T, D] of the tokens' positions, from tables [rows, D]; -3 for a position outside them */
static int rope_rows(const float *cos_table, const float *sin_table, int64_t rows, const int64_t *positions, int64_t T,
                     int64_t D, float *cos, float *signed_sin) {
    for (int64_t t = 0; t < T; t++) {
        const int64_t p = positions[t];
        if (p < 0 || p >= rows) return -3;
        memcpy(cos + t * D, cos_table + p * D, sizeof(float) * D);
        memcpy(signed_sin + t * D, sin_table + p * D, sizeof(float) * D);
    }
    return 0;
}

/* A model's decoder stack in one call: the rotary rows of the tokens' positions (cos_table / sin_table [rows,
 * head_dim]); layers[0 .. n-1] in turn, layer l with its KV caches k_caches[l], v_caches[l], all on one allocation
 * of working rows (a verification's rows of the widest layer pass glibc's mmap threshold: allocated per layer, each
 * layer paid the map and its page faults); then, with final_norm, out = rmsnorm(x). Returns 0, -3 for a position
 * outside the tables, or the first failing layer's code. */
int aio_llama_layers(const aio_layer *const *layers, int n, float *x, int64_t T, const float *cos_table,
                     const float *sin_table, int64_t table_rows, const int64_t *positions, float *const *k_caches,
                     float *const *v_caches, int block_size, const int64_t *slot_mapping, const int64_t *token_seq,
                     const int64_t *visible, const int64_t *block_tables, int64_t max_blocks, const float *final_norm,
                     float final_eps, float *out, int nthreads) {
    const int64_t D = layers[0]->head_dim, hid = layers[0]->hidden;
    int64_t floats = 0;
    for (int l = 0; l < n; l++) floats = scratch_floats(layers[l], T) > floats ? scratch_floats(layers[l], T) : floats;
    float *scratch = (float *)malloc(sizeof(float) * (floats + 2 * T * D));
    if (!scratch) return -1;
    float *cos = scratch + floats, *signed_sin = cos + T * D;
    int rc = rope_rows(cos_table, sin_table, table_rows, positions, T, D, cos, signed_sin);
    for (int l = 0; l < n && !rc; l++)
        rc = layer_step(layers[l], x, T, cos, signed_sin, k_caches[l], v_caches[l], block_size, slot_mapping,
                        token_seq, visible, block_tables, max_blocks, nthreads, scratch);
    if (!rc && final_norm) aio_rmsnorm(x, hid, final_norm, out, T, hid, final_eps, nthreads);
    free(scratch);
    return rc;
}
