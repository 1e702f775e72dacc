// See selftest.h.
#include "config.h"
#include "selftest.h"
#include "runtime/check.h"

#include <cuda_runtime.h>

static __global__ void fill_kernel(float *buf, size_t n, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        buf[i] = scale * (float)(i % 7 + 1);
}

extern "C" void ls_selftest_fill(float *buf, size_t n, float scale, void *stream)
{
    unsigned blocks = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
    fill_kernel<<<blocks ? blocks : 1, 256, 0, (cudaStream_t)stream>>>(buf, n, scale);
    CHECK_CUDA(cudaGetLastError());
}
