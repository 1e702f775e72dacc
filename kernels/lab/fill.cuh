// Random bf16 fill for the labs: sign, the exponent bits `expo` (0x3f00: [0.5, 1); 0x3c00:
// [2^-7, 2^-6)), 7 random mantissa bits from a splitmix-style hash of (index + seed): finite,
// non-zero, reproducible.
#ifndef LOCKSTEP_KERNELS_LAB_FILL_CUH
#define LOCKSTEP_KERNELS_LAB_FILL_CUH

#include <stdint.h>

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

#endif
