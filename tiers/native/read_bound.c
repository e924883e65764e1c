/* The machine's read bandwidth as a streaming kernel can have it: the bound a batch-1 decode step, which reads every
 * weight once, is measured against (benchmarks/decode_bound.py). torch's sum reads less than this on some CPUs (25-28
 * against 30-32 GB/s on the Xeon of docs/benchmarks.md), so a share of torch's sum overstated the kernels' share. */
#include <stdint.h>

typedef uint64_t line_t __attribute__((vector_size(64), aligned(64)));

/* The xor of the n bytes at p (n a multiple of 128, p 64-byte aligned) as 64-bit words folded together, read in two
 * lines a step, contiguous runs split over nthreads, each line asked for into L2 8 KB ahead. */
uint64_t aio_read_bytes(const void *p, int64_t n, int nthreads) {
    const line_t *lines = (const line_t *)p;
    line_t acc = {0};
#pragma omp parallel num_threads(nthreads)
    {
        line_t a = {0}, b = {0};
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n / 64; i += 2) {
            __builtin_prefetch(lines + i + 128, 0, 1);
            __builtin_prefetch(lines + i + 129, 0, 1);
            a ^= lines[i];
            b ^= lines[i + 1];
        }
#pragma omp critical
        acc ^= a ^ b;
    }
    uint64_t x = 0;
    for (int j = 0; j < 8; j++) x ^= acc[j];
    return x;
}
