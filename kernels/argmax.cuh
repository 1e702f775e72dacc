// The greedy choice's device pieces, shared by the sampling kernels (sample.cu) and the LM
// head's GEMV with the argmax in its epilogue (gemv.cu): the floats' order as unsigned keys,
// (value, index) merges, the grid's "last block to arrive goes on", and where the result goes.
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

// the index a key holds (INT_MAX for the key 0: no value)
static __device__ __forceinline__ int am_key_index(unsigned long long key)
{
    return key ? (int)(0xFFFFFFFFu - (unsigned)(key & 0xFFFFFFFFull)) : INT_MAX;
}

// The grid kernels' "last block to arrive goes on" (the grid argmax, the top-p passes, min-p,
// the kept weight): each block arrives once on a counter of the launch. For the one thread
// whose global stores (and atomics) the block's result is: true in the last block to arrive;
// what every block stored before arriving is then visible to that thread (a fence before the
// count, so a block's stores are in before the count says so; one after it in the last, so its
// reads come after every block's count). The caller sets the counter back to 0 for the next
// launch.
static __device__ __forceinline__ bool arrive_last(unsigned *done)
{
    __threadfence();
    const bool last = atomicAdd(done, 1u) == gridDim.x - 1;
    if (last) __threadfence();
    return last;
}

// Where an argmax goes: the index to out (pairs NULL), or a rank's slot of a greedy choice
// over a vocabulary cut into tp slices (ref_argmax_pairs: pairs[2 tp] all 0 but (the value,
// first + the index) at slot, (0, -1) where the slice held only NaN)
struct am_out {
    int *out;
    float *pairs;
    int first, slot, tp;
};

// the result's store, by one thread: bi the index (INT_MAX: none), x the row it indexes
static __device__ __forceinline__ void am_store(const am_out &o, const float *x, int bi)
{
    if (!o.pairs) {
        *o.out = bi == INT_MAX ? 0 : bi;
        return;
    }
    for (int i = 0; i < 2 * o.tp; i++) o.pairs[i] = 0.0f;
    o.pairs[2 * o.slot] = bi == INT_MAX ? 0.0f : __ldcg(x + bi); // x may be another block's
    o.pairs[2 * o.slot + 1] = bi == INT_MAX ? -1.0f : (float)(o.first + bi);
}

#endif
