// What the labs share: a random bf16 fill and the timing loop.
#ifndef LOCKSTEP_KERNELS_LAB_LAB_CUH
#define LOCKSTEP_KERNELS_LAB_LAB_CUH

#include "runtime/check.h"

#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <vector>

// sign, the exponent bits `expo` (0x3f00: [0.5, 1); 0x3c00: [2^-7, 2^-6)), 7 random mantissa
// bits from a splitmix-style hash of (index + seed): finite, non-zero, reproducible
static __global__ void fill_bf16(uint16_t *p, size_t n, uint64_t seed, uint16_t expo = 0x3f00u)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + seed) * 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
        z ^= z >> 29;
        p[i] = (uint16_t)((z & 0x8000u) | expo | ((z >> 16) & 0x7fu));
    }
}

// the median over reps of the time per call of batch calls of f(i) back to back (i counts every
// call, 5 warm-up ones first), ms
template <typename F> static float time_ms(int reps, int batch, F f)
{
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    int i = 0;
    for (int w = 0; w < 5; w++) f(i++);
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; r++) {
        CHECK_CUDA(cudaEventRecord(a, 0));
        for (int j = 0; j < batch; j++) f(i++);
        CHECK_CUDA(cudaEventRecord(b, 0));
        CHECK_CUDA(cudaEventSynchronize(b));
        CHECK_CUDA(cudaEventElapsedTime(&ms[r], a, b));
    }
    std::sort(ms.begin(), ms.end());
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    return ms[reps / 2] / batch;
}

#endif
