// See norm.h. One block per row: a decode step normalises one row of 576..8192 floats, which is
// latency, not bandwidth, so the kernel is one pass to sum squares (fixed-order block reduction:
// results are reproducible) and one pass to scale, the second reading what the same thread
// read or wrote in the first (L1/L2 hits).
#include "config.h"
#include "norm.h"
#include "bf16.cuh"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_runtime.h>

#define NORM_THREADS 512

// sum of v over the block, in a fixed order; every thread gets the result
static __device__ float block_sum(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ void put(float *o, int i, float v)
{
    o[i] = v;
}

static __device__ __forceinline__ void put(uint16_t *o, int i, float v)
{
    o[i] = f_to_bf16(v);
}

// out: fp32, or bf16 (the GEMM input of a prefill chunk)
template <typename O>
static __global__ void __launch_bounds__(NORM_THREADS)
    rmsnorm_kernel(O *out, float *x, const float *__restrict__ res, const float *__restrict__ w,
                   int dim, float eps)
{
    __shared__ float red[32];
    pdl_launch_dependents();
    pdl_wait();
    float *xr = x + (size_t)blockIdx.x * dim;
    O *o = out + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    if (res) {
        const float *rr = res + (size_t)blockIdx.x * dim;
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            float v = xr[i] + rr[i];
            xr[i] = v;
            ss = fmaf(v, v, ss);
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    }
    ss = block_sum(ss, red);
    float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) put(o, i, (xr[i] * scale) * w[i]);
}

template <typename O>
static void norm_launch(O *out, float *x, const float *res, const float *w, int rows, int dim,
                        float eps, void *stream)
{
    if (rows < 0 || dim < 1) ls_die(__FILE__, __LINE__, "ls_rmsnorm", "rows >= 0 and dim >= 1");
    if (rows == 0) return;
    int threads = dim >= NORM_THREADS ? NORM_THREADS : (dim + 31) / 32 * 32;
    pdl_launch(rmsnorm_kernel<O>, rows, threads, 0, (cudaStream_t)stream, out, x, res, w, dim, eps);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_rmsnorm(float *out, const float *x, const float *w, int rows, int dim, float eps,
                           void *stream)
{
    // x is only read when res is NULL; the kernel takes it writable for the fused variant
    norm_launch(out, (float *)x, NULL, w, rows, dim, eps, stream);
}

extern "C" void ls_rmsnorm_bf16(uint16_t *out, const float *x, const float *w, int rows, int dim,
                                float eps, void *stream)
{
    norm_launch(out, (float *)x, NULL, w, rows, dim, eps, stream);
}

extern "C" void ls_add_rmsnorm(float *out, float *x, const float *res, const float *w, int rows,
                               int dim, float eps, void *stream)
{
    norm_launch(out, x, res, w, rows, dim, eps, stream);
}
