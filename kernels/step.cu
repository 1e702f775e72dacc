// See step.h.
#include "config.h"
#include "step.h"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_runtime.h>

static __global__ void advance_kernel(int *pos, const int *tok, unsigned long long *post)
{
    pdl_launch_dependents();
    pdl_wait();
    const int p = pos[0];
    if (post) {
        const unsigned long long v =
            ((unsigned long long)(unsigned)p << 32) | (unsigned long long)(unsigned)tok[0];
        // one 8-byte store, so the host never sees a position with another step's token
        asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(post + (p & 1)), "l"(v)
                     : "memory");
    }
    pos[0] = p + 1;
}

extern "C" void ls_advance_pos(int *pos, const int *tok, unsigned long long *post, void *stream)
{
    pdl_launch(advance_kernel, 1, 1, 0, (cudaStream_t)stream, pos, tok, post);
    CHECK_CUDA(cudaGetLastError());
}
