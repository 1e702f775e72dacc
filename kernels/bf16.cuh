// bf16 helpers shared by the kernel families (attention.cu, gemv.cu, elementwise.cu, norm.cu):
// fp32 rounded to bf16 (to nearest even), the two halves of a 32-bit word as fp32 (exact), eight
// of them from a 16-byte load, and the streaming 16-byte load of data no kernel of the running
// grid writes.
#ifndef LOCKSTEP_KERNELS_BF16_CUH
#define LOCKSTEP_KERNELS_BF16_CUH

#include <cuda_bf16.h>
#include <stdint.h>

static __device__ __forceinline__ uint16_t f_to_bf16(float f)
{
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    return *reinterpret_cast<uint16_t *>(&b);
}

static __device__ __forceinline__ float bf16_lo(uint32_t w)
{
    return __uint_as_float(w << 16);
}

static __device__ __forceinline__ float bf16_hi(uint32_t w)
{
    return __uint_as_float(w & 0xffff0000u);
}

static __device__ __forceinline__ void unpack8(uint4 w, float *f)
{
    f[0] = bf16_lo(w.x), f[1] = bf16_hi(w.x), f[2] = bf16_lo(w.y), f[3] = bf16_hi(w.y);
    f[4] = bf16_lo(w.z), f[5] = bf16_hi(w.z), f[6] = bf16_lo(w.w), f[7] = bf16_hi(w.w);
}

static __device__ __forceinline__ uint4 ld_stream(const uint16_t *p)
{
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

#endif
