// Programmatic dependent launch (PDL), shared by the kernel families. Device side: a kernel
// calls pdl_launch_dependents() early so the next kernel on the stream may start, and pdl_wait()
// before it reads anything an earlier kernel wrote, in every block and before any early return
// (a kernel completes only after its predecessor, so the chain stays ordered). Both are no-ops
// before sm_90 and when the launch did not ask for PDL. Host side: pdl_launch() launches with
// the attribute while ls_pdl_on is set (ls_kernels_set_pdl; LOCKSTEP_PDL=0 in the backend turns
// it off). Kernels that never call pdl_wait (fills, bandwidth probes) keep plain launches.
#ifndef LOCKSTEP_KERNELS_PDL_CUH
#define LOCKSTEP_KERNELS_PDL_CUH

#include "runtime/check.h"

#include <cuda_runtime.h>

extern int ls_pdl_on;
// shared-memory carveout asked of every kernel pdl_launch starts (percent of the unified
// L1/shared storage, cudaFuncAttributePreferredSharedMemoryCarveout; < 0: the driver's choice).
// Kernels whose carveouts differ cannot share an SM, so a common one lets PDL overlap any two
// (ls_kernels_set_carveout).
extern int ls_carveout;

// sets the carveout attribute of fn once per kernel and device (a fixed table; past it, each call)
void ls_prefer_carveout(const void *fn);
// cudaFuncSetAttribute(fn, attr, value) on the current device, once per kernel, device,
// attribute and value (the same table)
void ls_func_attr(const void *fn, cudaFuncAttribute attr, int value);

static __device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// pdl_launch with blocks grouped in clusters of cluster_x along x (grid.x a multiple of it; 0 or
// 1: no clusters)
template <typename... Params, typename... Args>
static void pdl_launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, unsigned cluster_x, Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (ls_pdl_on) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_x > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster_x;
        attr[n].val.clusterDim.y = 1;
        attr[n++].val.clusterDim.z = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    if (ls_carveout >= 0) ls_prefer_carveout(reinterpret_cast<const void *>(kernel));
    CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...));
}

template <typename... Params, typename... Args>
static void pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, Args &&...args)
{
    pdl_launch_cluster(kernel, grid, block, smem, stream, 1u, static_cast<Args &&>(args)...);
}

#endif
