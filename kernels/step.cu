// See step.h.
#include "config.h"
#include "step.h"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_runtime.h>

static __global__ void advance_kernel(int *pos)
{
    pdl_launch_dependents();
    pdl_wait();
    pos[0] += 1;
}

static __global__ void store_f64_kernel(double *dst, double v)
{
    *dst = v;
}

extern "C" void ls_store_f64(double *dst, double v, void *stream)
{
    store_f64_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(dst, v);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_advance_pos(int *pos, void *stream)
{
    pdl_launch(advance_kernel, 1, 1, 0, (cudaStream_t)stream, pos);
    CHECK_CUDA(cudaGetLastError());
}
