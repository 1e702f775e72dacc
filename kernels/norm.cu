// See norm.h. One block per row: a decode step normalises one row of 576..8192 floats, which is
// latency, not bandwidth, so the kernel is one pass to sum squares (fixed-order block reduction:
// results are reproducible) and one pass to scale, the second using what the same thread read
// in the first (registers; past 8192 elements, L1/L2 hits).
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

// elements of its row a thread keeps in registers between the two passes: rows up to
// NORM_KEEP x NORM_THREADS (8192) are read once, their loads all issued before the first sum (a
// strided loop issues one load per round trip: ~8 us for a 128-row chunk of the 8B's 4096 instead
// of ~2); the rest of a longer row is read again in the second pass
#define NORM_KEEP 16

// out: fp32, or bf16 (the GEMM input of a prefill chunk). Sums in the same order as a strided
// loop over i = threadIdx.x, threadIdx.x + blockDim.x, ...
template <typename O>
static __global__ void __launch_bounds__(NORM_THREADS)
    rmsnorm_kernel(O *out, float *x, const float *__restrict__ res, const float *__restrict__ w,
                   int dim, float eps)
{
    __shared__ float red[32];
    pdl_launch_dependents();
    pdl_wait();
    float *xr = x + (size_t)blockIdx.x * dim;
    const float *rr = res ? res + (size_t)blockIdx.x * dim : nullptr;
    O *o = out + (size_t)blockIdx.x * dim;
    const int step = blockDim.x, far = NORM_KEEP * step;
    float v[NORM_KEEP];
#pragma unroll
    for (int k = 0; k < NORM_KEEP; k++) {
        const int i = threadIdx.x + k * step;
        v[k] = i < dim ? xr[i] : 0.0f;
    }
    if (rr) {
#pragma unroll
        for (int k = 0; k < NORM_KEEP; k++) {
            const int i = threadIdx.x + k * step;
            if (i < dim) {
                v[k] += rr[i];
                xr[i] = v[k];
            }
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_KEEP; k++)
        if (threadIdx.x + k * step < dim) ss = fmaf(v[k], v[k], ss);
    for (int i = threadIdx.x + far; i < dim; i += step) {
        float a = xr[i];
        if (rr) {
            a += rr[i];
            xr[i] = a;
        }
        ss = fmaf(a, a, ss);
    }
    ss = block_sum(ss, red);
    float scale = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
    for (int k = 0; k < NORM_KEEP; k++) {
        const int i = threadIdx.x + k * step;
        if (i < dim) put(o, i, (v[k] * scale) * w[i]);
    }
    for (int i = threadIdx.x + far; i < dim; i += step) put(o, i, (xr[i] * scale) * w[i]);
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
