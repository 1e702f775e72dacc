// Programmatic dependent launch, shared by the kernel families: a kernel calls
// pdl_launch_dependents() early so the next kernel on the stream may start, and pdl_wait()
// before it reads anything an earlier kernel wrote. Both are no-ops before sm_90 and when the
// launch did not ask for PDL.
#ifndef LOCKSTEP_KERNELS_PDL_CUH
#define LOCKSTEP_KERNELS_PDL_CUH

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

#endif
