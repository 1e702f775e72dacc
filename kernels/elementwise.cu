// See elementwise.h. Grid-stride loops over scalars: these kernels move kilobytes per decode step
// (the embedding row, one activation vector), so they are launch latency, not bandwidth, and
// scalar code keeps every size and alignment valid. Over a prefill chunk they move tens of MB a
// layer (1024 positions of the 8B: the SwiGLU reads 117 MB), which is why the SwiGLU writes the
// GEMM's bf16 input directly, and why the two conversions a prefill chunk makes (the SwiGLU's,
// the attention output's) take four elements a thread where size and alignment allow.
#include "config.h"
#include "elementwise.h"
#include "bf16.cuh"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_runtime.h>

static __device__ __forceinline__ float bf16_to_f(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

// the same expression as ref_swiglu
static __device__ __forceinline__ float silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

#define EW_THREADS 256

static bool aligned(const void *p, size_t bytes)
{
    return (uintptr_t)p % bytes == 0;
}

static unsigned ew_blocks(size_t n)
{
    size_t b = (n + EW_THREADS - 1) / EW_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

static __global__ void embed_kernel(float *out, const uint16_t *__restrict__ table,
                                    const int *__restrict__ ids, int dim, int first, int rows)
{
    pdl_launch_dependents();
    pdl_wait();
    const int t = blockIdx.y;
    const int id = ids[t] - first;
    float *o = out + (size_t)t * dim;
    const bool mine = id >= 0 && id < rows;
    const uint16_t *row = table + (size_t)(mine ? id : 0) * dim;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x)
        o[i] = mine ? bf16_to_f(row[i]) : 0.0f;
}

static __global__ void swiglu_kernel(float *out, const float *gate, const float *up, size_t n)
{
    pdl_launch_dependents();
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = silu_mul(gate[i], up[i]);
}

// a block row per position (grid-stride over positions past 65535): no division per element
static __global__ void swiglu_cat_bf16_kernel(uint16_t *__restrict__ out,
                                              const float *__restrict__ gu, int T, int f)
{
    pdl_launch_dependents();
    pdl_wait();
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        const float *g = gu + (size_t)t * 2 * f, *u = g + f;
        uint16_t *o = out + (size_t)t * f;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < f; j += gridDim.x * blockDim.x)
            o[j] = f_to_bf16(silu_mul(g[j], u[j]));
    }
}

// four bf16 as one 8-byte store, element 0 in the low half (little-endian, as in memory)
static __device__ __forceinline__ uint2 pack_bf16x4(float a, float b, float c, float d)
{
    return make_uint2((uint32_t)f_to_bf16(a) | (uint32_t)f_to_bf16(b) << 16,
                      (uint32_t)f_to_bf16(c) | (uint32_t)f_to_bf16(d) << 16);
}

// the same with four elements a thread (f % 4 == 0, gu 16-byte and out 8-byte aligned): one
// scalar a thread keeps ~16 KB in flight per SM, ~1.9 TB/s on a prefill chunk (8B, 128 positions:
// 11.6 us for 22 MB); the same expression per element, so the same bits
static __global__ void swiglu_cat_bf16_x4_kernel(uint2 *__restrict__ out,
                                                 const float4 *__restrict__ gu, int T, int f4)
{
    pdl_launch_dependents();
    pdl_wait();
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        const float4 *g = gu + (size_t)t * 2 * f4, *u = g + f4;
        uint2 *o = out + (size_t)t * f4;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < f4; j += gridDim.x * blockDim.x) {
            const float4 a = g[j], b = u[j];
            o[j] = pack_bf16x4(silu_mul(a.x, b.x), silu_mul(a.y, b.y), silu_mul(a.z, b.z),
                               silu_mul(a.w, b.w));
        }
    }
}

static __global__ void add_kernel(float *x, const float *y, size_t n)
{
    pdl_launch_dependents();
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

// the same sums, in the same order, as gemv.cu's pending-sum readers
static __global__ void pending_resolve_kernel(float *x, float *pend, size_t n)
{
    pdl_launch_dependents();
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        x[i] = __fadd_rn(__fadd_rn(x[i], pend[i]), __fadd_rn(pend[n + i], pend[2 * n + i]));
        pend[i] = 0.0f;
        pend[n + i] = 0.0f;
        pend[2 * n + i] = 0.0f;
    }
}

static __global__ void to_fp32_kernel(float *__restrict__ out, const uint16_t *__restrict__ in,
                                      size_t n)
{
    pdl_launch_dependents();
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bf16_to_f(in[i]);
}

static __global__ void to_bf16_kernel(uint16_t *__restrict__ out, const float *__restrict__ in,
                                      size_t n)
{
    pdl_launch_dependents();
    pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = f_to_bf16(in[i]);
}

// the same four elements a thread (in 16-byte, out 8-byte aligned); the n % 4 last ones by the
// first threads of the grid
static __global__ void to_bf16_x4_kernel(uint2 *__restrict__ out, const float4 *__restrict__ in,
                                         size_t n4, int tail)
{
    pdl_launch_dependents();
    pdl_wait();
    const size_t first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = first; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = in[i];
        out[i] = pack_bf16x4(v.x, v.y, v.z, v.w);
    }
    if (first < (size_t)tail)
        ((uint16_t *)(out + n4))[first] = f_to_bf16(((const float *)(in + n4))[first]);
}

extern "C" void ls_embed(float *out, const uint16_t *table, const int *ids, int T, int dim,
                         int first, int rows, void *stream)
{
    if (T < 0 || dim < 1 || T > 65535)
        ls_die(__FILE__, __LINE__, "ls_embed", "expected 0 <= T <= 65535 and dim >= 1");
    if (T == 0) return;
    dim3 grid((unsigned)((dim + EW_THREADS - 1) / EW_THREADS), (unsigned)T);
    pdl_launch(embed_kernel, grid, EW_THREADS, 0, (cudaStream_t)stream, out, table, ids, dim, first,
               rows);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_swiglu(float *out, const float *gate, const float *up, size_t n, void *stream)
{
    if (n == 0) return;
    pdl_launch(swiglu_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, out, gate, up, n);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_swiglu_cat_bf16(uint16_t *out, const float *gu, int T, int f, void *stream)
{
    if (T <= 0 || f <= 0) return;
    const bool x4 = f % 4 == 0 && aligned(gu, 16) && aligned(out, 8);
    const int cols = x4 ? f / 4 : f, bx = (cols + EW_THREADS - 1) / EW_THREADS;
    dim3 grid((unsigned)(bx < 64 ? bx : 64), (unsigned)(T < 65535 ? T : 65535));
    if (x4)
        pdl_launch(swiglu_cat_bf16_x4_kernel, grid, EW_THREADS, 0, (cudaStream_t)stream,
                   (uint2 *)out, (const float4 *)gu, T, cols);
    else
        pdl_launch(swiglu_cat_bf16_kernel, grid, EW_THREADS, 0, (cudaStream_t)stream, out, gu, T,
                   f);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_add(float *x, const float *y, size_t n, void *stream)
{
    if (n == 0) return;
    pdl_launch(add_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, x, y, n);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_pending_resolve(float *x, float *pend, size_t n, void *stream)
{
    if (n == 0) return;
    pdl_launch(pending_resolve_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, x, pend,
               n);
    CHECK_CUDA(cudaGetLastError());
}

// 32 x 32 tiles through shared memory (a column of 33: no bank conflicts), 32 x 8 threads
static __global__ void transpose16_kernel(uint16_t *__restrict__ out,
                                          const uint16_t *__restrict__ in, int rows, int cols)
{
    __shared__ uint16_t t[32][33];
    pdl_launch_dependents();
    pdl_wait();
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) t[i][threadIdx.x] = in[(size_t)r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int c = c0 + i, r = r0 + threadIdx.x;
        if (c < cols && r < rows) out[(size_t)c * rows + r] = t[threadIdx.x][i];
    }
}

extern "C" void ls_transpose16(uint16_t *out, const uint16_t *in, int rows, int cols, void *stream)
{
    if (rows <= 0 || cols <= 0) return;
    if ((rows + 31) / 32 > 65535)
        ls_die(__FILE__, __LINE__, "ls_transpose16", "expected at most 65535 * 32 rows");
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32));
    pdl_launch(transpose16_kernel, grid, dim3(32, 8), 0, (cudaStream_t)stream, out, in, rows, cols);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_bf16_to_fp32(float *out, const uint16_t *in, size_t n, void *stream)
{
    if (n == 0) return;
    pdl_launch(to_fp32_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, out, in, n);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_fp32_to_bf16(uint16_t *out, const float *in, size_t n, void *stream)
{
    if (n == 0) return;
    if (aligned(in, 16) && aligned(out, 8))
        pdl_launch(to_bf16_x4_kernel, ew_blocks(n / 4 > 0 ? n / 4 : 1), EW_THREADS, 0,
                   (cudaStream_t)stream, (uint2 *)out, (const float4 *)in, n / 4, (int)(n % 4));
    else
        pdl_launch(to_bf16_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, out, in, n);
    CHECK_CUDA(cudaGetLastError());
}
