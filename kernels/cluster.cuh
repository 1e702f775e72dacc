// Thread-block clusters (sm_90 on), shared by the kernel families that launch them: the
// attention's merge and the fused MLP's pairs. The host launches clusters only on devices that
// have them, so on older targets these are never reached.
#ifndef LOCKSTEP_KERNELS_CLUSTER_CUH
#define LOCKSTEP_KERNELS_CLUSTER_CUH

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// The cluster barrier split in two (PTX barrier.cluster):
// a thread arrives once per phase and must see the phase complete (wait) before it arrives on
// the next; wait returns once every non-exited thread of the cluster has arrived. arrive has
// release semantics (cooperative groups' barrier_arrive), wait acquire semantics: after the
// wait, every thread's memory accesses from before its arrive are visible. The relaxed arrive
// orders nothing (cooperative groups has none; the builtin).
static __device__ __forceinline__ void cluster_arrive_relaxed()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __cluster_barrier_arrive_relaxed();
#endif
}

static __device__ __forceinline__ void cluster_arrive()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    (void)cg::this_cluster().barrier_arrive();
#endif
}

static __device__ __forceinline__ void cluster_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::this_cluster().barrier_wait();
#endif
}

// the same variable in the shared memory of the cluster's block `rank`
static __device__ __forceinline__ float *cluster_peer(float *p, int rank)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cg::this_cluster().map_shared_rank(p, rank);
#else
    (void)rank;
    return p;
#endif
}

#endif
