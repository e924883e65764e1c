/* The machine's read bandwidth as a streaming kernel can have it: the bound a batch-1 decode step, which reads every
 * weight once, is measured against (benchmarks/decode_bound.py, which takes the fastest of this loop with and
 * without its prefetch and torch's sum: which one is fastest depends on the CPU). */
#include <stdint.h>

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
