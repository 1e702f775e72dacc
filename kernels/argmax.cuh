// The greedy choice's device pieces, shared by the sampling kernels (sample.cu), the LM head's
// GEMV with the argmax in its epilogue (gemv.cu) and the step's advance that takes the token
// from its word (step.cu): the floats' order as unsigned keys, (value, index) merges, and the
// 64-bit keys of both.
#ifndef LOCKSTEP_KERNELS_ARGMAX_CUH
#define LOCKSTEP_KERNELS_ARGMAX_CUH

#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

// unsigned integer with the order of the floats (for non-NaN values); -0 and +0 are one value
// (one key), as the host sampler's comparisons and equal probabilities make them: otherwise the
// +0 logits ordered before the -0 ones where the host orders the two by id
static __device__ __forceinline__ uint32_t order_key(float f)
{
    uint32_t b = __float_as_uint(f);
    if (b == 0x80000000u) b = 0u;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// (value, index) pairs: the larger value wins, the lower index on ties
static __device__ __forceinline__ void argmax_merge(float &bv, int &bi, float v, int i)
{
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

// the key's unsigned order is argmax_merge's: the larger value first, then the lower index
// (-0 and +0 are one value there, as in order_key); 0 is below every value's key
static __device__ __forceinline__ unsigned long long am_key(float v, int i)
{
    return ((unsigned long long)order_key(v) << 32) | (0xFFFFFFFFu - (unsigned)i);
}

// the largest of the warp's keys, in every lane
static __device__ __forceinline__ unsigned long long warp_max_key(unsigned long long key)
{
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long t = __shfl_xor_sync(0xffffffffu, key, o);
        key = t > key ? t : key;
    }
    return key;
}

// the index a key holds (INT_MAX for the key 0: no value)
static __device__ __forceinline__ int am_key_index(unsigned long long key)
{
    return key ? (int)(0xFFFFFFFFu - (unsigned)(key & 0xFFFFFFFFull)) : INT_MAX;
}

#endif
