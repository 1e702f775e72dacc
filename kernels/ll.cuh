// The LL (flag-in-data) line format of the custom all-reduce (see allreduce.h), shared by the
// all-reduce kernels and the GEMV that pushes its output rows into the peers' LL areas itself.
#ifndef LOCKSTEP_KERNELS_LL_CUH
#define LOCKSTEP_KERNELS_LL_CUH

#include <stdint.h>

// never 0 (a consumed line is zeroed), and e, e + 1, e + 2 differ
static __device__ __forceinline__ uint32_t ll_flag(unsigned long long e)
{
    return (uint32_t)(e % 0xffffffffull) + 1u;
}

// unit v as the two lines at dst (a peer's buffer): {x, f, y, f} and {z, f, w, f}
static __device__ __forceinline__ void ll_push(char *dst, uint4 v, uint32_t f)
{
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(f),
                 "r"(v.y), "r"(f)
                 : "memory");
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst + 16), "r"(v.z),
                 "r"(f), "r"(v.w), "r"(f)
                 : "memory");
}

#endif
