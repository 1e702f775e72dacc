// The current device's attributes that the launchers size their grids and shared memory by,
// asked of the driver once per device (ls_device_get; a process may drive several devices in
// turn, as the tests do). Each translation unit keeps its own small cache.
#ifndef LOCKSTEP_KERNELS_DEVICE_CUH
#define LOCKSTEP_KERNELS_DEVICE_CUH

#include "runtime/check.h"

#include <cuda_runtime.h>

struct ls_device {
    int id;          // the CUDA device (cudaGetDevice)
    int sms;         // multiprocessors
    int smem_optin;  // shared memory a block may opt in to, bytes
    int smem_per_sm; // shared memory per multiprocessor, bytes
    int clusters;    // thread-block cluster launches (sm_90 and later)
    int l2;          // L2 cache, bytes
    int major;       // compute capability, major
};

#define LS_DEVICE_CACHE 64 // devices cached; past it, asked at each call

static inline ls_device ls_device_get(void)
{
    static ls_device cache[LS_DEVICE_CACHE];
    ls_device d = {};
    CHECK_CUDA(cudaGetDevice(&d.id));
    const bool cached = d.id >= 0 && d.id < LS_DEVICE_CACHE;
    if (cached && cache[d.id].sms) return cache[d.id];
    CHECK_CUDA(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, d.id));
    CHECK_CUDA(
        cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d.id));
    CHECK_CUDA(
        cudaDeviceGetAttribute(&d.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, d.id));
    CHECK_CUDA(cudaDeviceGetAttribute(&d.clusters, cudaDevAttrClusterLaunch, d.id));
    CHECK_CUDA(cudaDeviceGetAttribute(&d.l2, cudaDevAttrL2CacheSize, d.id));
    CHECK_CUDA(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, d.id));
    if (cached) cache[d.id] = d;
    return d;
}

#endif
