// See bandwidth.h. The read kernel is the one whose number README's measurements call the
// decode roofline (16-byte loads over 4 GiB, 8 blocks of 1024 threads per SM): a grid-stride
// loop with 4 independent loads per thread per iteration, XOR-folded so the compiler keeps them.
#include "config.h"
#include "bandwidth.h"
#include "device.cuh"
#include "runtime/check.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#define BW_THREADS       1024
#define BW_BLOCKS_PER_SM 8
#define BW_UNROLL        4

static __global__ void __launch_bounds__(BW_THREADS)
    stream_read_kernel(const uint4 *__restrict__ buf, size_t n, unsigned *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (; i + (BW_UNROLL - 1) * stride < n; i += BW_UNROLL * stride) {
        uint4 v[BW_UNROLL];
#pragma unroll
        for (int u = 0; u < BW_UNROLL; u++) v[u] = __ldcs(buf + i + u * stride);
#pragma unroll
        for (int u = 0; u < BW_UNROLL; u++) {
            acc.x ^= v[u].x;
            acc.y ^= v[u].y;
            acc.z ^= v[u].z;
            acc.w ^= v[u].w;
        }
    }
    for (; i < n; i += stride) {
        uint4 v = __ldcs(buf + i);
        acc.x ^= v.x;
        acc.y ^= v.y;
        acc.z ^= v.z;
        acc.w ^= v.w;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u && acc.x == 0x7f4a7c15u) *sink = acc.y;
}

static __global__ void fill_kernel(uint32_t *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)(i * 2654435761u) | 1u;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

extern "C" void ls_stream_read(const void *buf, size_t bytes, unsigned *sink, void *stream)
{
    const int sms = ls_device_get().sms;
    stream_read_kernel<<<sms * BW_BLOCKS_PER_SM, BW_THREADS, 0, (cudaStream_t)stream>>>(
        (const uint4 *)buf, bytes / 16, sink);
    CHECK_CUDA(cudaGetLastError());
}

// median milliseconds of reps runs of what(), each between two events
template <typename F> static float time_median_ms(int reps, cudaStream_t s, F what)
{
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) what(); // warm-up
    float *ms = (float *)malloc(sizeof(float) * (size_t)reps);
    CHECK_ALLOC(ms);
    for (int r = 0; r < reps; r++) {
        CHECK_CUDA(cudaEventRecord(a, s));
        what();
        CHECK_CUDA(cudaEventRecord(b, s));
        CHECK_CUDA(cudaEventSynchronize(b));
        CHECK_CUDA(cudaEventElapsedTime(&ms[r], a, b));
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    float med = ms[reps / 2];
    free(ms);
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    return med;
}

extern "C" double ls_bandwidth_read(size_t bytes, int reps, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    bytes &= ~(size_t)15;
    if (reps < 1) reps = 1;
    void *buf;
    unsigned *sink;
    if (cudaMalloc(&buf, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    CHECK_CUDA(cudaMalloc((void **)&sink, sizeof(unsigned)));
    fill_kernel<<<1024, 256, 0, s>>>((uint32_t *)buf, bytes / 4);
    CHECK_CUDA(cudaGetLastError());
    float ms = time_median_ms(reps, s, [&] { ls_stream_read(buf, bytes, sink, s); });
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaFree(buf));
    CHECK_CUDA(cudaFree(sink));
    return (double)bytes / (ms * 1e-3) / 1e9;
}

extern "C" double ls_bandwidth_copy(size_t bytes, int reps, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (reps < 1) reps = 1;
    void *src, *dst;
    if (cudaMalloc(&src, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    if (cudaMalloc(&dst, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        CHECK_CUDA(cudaFree(src));
        return -1;
    }
    fill_kernel<<<1024, 256, 0, s>>>((uint32_t *)src, bytes / 4);
    CHECK_CUDA(cudaGetLastError());
    float ms = time_median_ms(reps, s, [&] {
        CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    });
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaFree(src));
    CHECK_CUDA(cudaFree(dst));
    return 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
}
