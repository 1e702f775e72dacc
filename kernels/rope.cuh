// Device helpers of RoPE shared by the rotation kernel (rope.cu) and the QKV GEMV's epilogue
// (gemv.cu, ls_gemv_rope_kv), so that both give the same bits.
#ifndef LOCKSTEP_KERNELS_ROPE_CUH
#define LOCKSTEP_KERNELS_ROPE_CUH

#include <cuda_bf16.h>
#include <stdint.h>

// one pair rotated by the angle whose cosine and sine are c and s: (x0 c - x1 s, x1 c + x0 s),
// each product x0 c, x1 c rounded, then one fused multiply-add (fixed, not left to contraction)
static __device__ __forceinline__ void rope_rotate(float &x0, float &x1, float c, float s)
{
    const float y0 = fmaf(-x1, s, __fmul_rn(x0, c)), y1 = fmaf(x0, s, __fmul_rn(x1, c));
    x0 = y0;
    x1 = y1;
}

static __device__ __forceinline__ uint16_t rope_bf16(float f)
{
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    return *reinterpret_cast<uint16_t *>(&b);
}

#endif
