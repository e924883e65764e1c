/* The machine's read bandwidth as a streaming kernel can have it: the bound a batch-1 decode step, which reads every
 * weight once, is measured against (benchmarks/decode_bound.py, which takes the fastest of this loop with and
 * without its prefetch and torch's sum: which one is fastest depends on the CPU); and the GGUF-block kernel's own
 * time over a list of calls, each kernel's figure measured against that bound. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <stdint.h>
#include <time.h>

/* 32 bytes: one ymm wherever AVX is. A 64-byte GCC vector is one zmm under AVX-512, but without it GCC lowered the
 * loop's xors through the stack (an AVX2 AMD EPYC read 16 GB/s with it where a sum over the same bytes read 20). */
typedef uint64_t half_t __attribute__((vector_size(32), aligned(32)));

/* The xor of the n bytes at p (n a multiple of 128, p 64-byte aligned) as 64-bit words folded together, read in two
 * lines a step, contiguous runs split over nthreads; with PF each line asked for into L2 8 KB ahead (on an AVX2 AMD
 * EPYC the loop read 13-15% less with it; not measured without it elsewhere). PF a constant at each call. */
static inline __attribute__((always_inline)) uint64_t read_all(const void *p, int64_t n, int nthreads, const int PF) {
    const half_t *halves = (const half_t *)p;
    half_t acc = {0};
#pragma omp parallel num_threads(nthreads)
    {
        half_t a = {0}, b = {0}, c = {0}, d = {0};
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n / 32; i += 4) {
            if (PF) {
                __builtin_prefetch(halves + i + 256, 0, 1);
                __builtin_prefetch(halves + i + 258, 0, 1);
            }
            a ^= halves[i];
            b ^= halves[i + 1];
            c ^= halves[i + 2];
            d ^= halves[i + 3];
        }
#pragma omp critical
        acc ^= a ^ b ^ c ^ d;
    }
    uint64_t x = 0;
    for (int j = 0; j < 4; j++) x ^= acc[j];
    return x;
}

uint64_t aio_read_bytes(const void *p, int64_t n, int nthreads, int prefetch) {
    return prefetch ? read_all(p, n, nthreads, 1) : read_all(p, n, nthreads, 0);
}

/* The GGUF-block kernel's own time over a list of calls (benchmarks/kernel_calls.py): called from Python one by
 * one, each call also paid the interpreter's code and data, cold after the weights' stream (~60 us a call on an
 * Intel Xeon), which a decode step's one-call stack does not pay. */
int aio_gemm_kq_parts(const float *x, int64_t M, int64_t K, int64_t ldx, int nparts, const uint8_t *const *ws,
                      const int64_t *ns, const int *types, float *out, int64_t ldo, int nthreads);

/* Seconds of ncalls calls back to back, call c on the nparts weights ws[c * nparts ..] (every call the same ns and
 * types), out[M, sum ns] = x[M, K] @ W^T each time; *status: 0, or the first failing call's code. */
double aio_kq_time_calls(const float *x, int64_t M, int64_t K, int nparts, const uint8_t *const *ws,
                         const int64_t *ns, const int *types, int64_t ncalls, float *out, int nthreads, int *status) {
    int64_t n = 0;
    for (int p = 0; p < nparts; p++) n += ns[p];
    struct timespec t0, t1;
    *status = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t c = 0; c < ncalls && !*status; c++)
        *status = aio_gemm_kq_parts(x, M, K, K, nparts, ws + c * nparts, ns, types, out, n, nthreads);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
}
