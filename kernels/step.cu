// See step.h.
#include "config.h"
#include "step.h"
#include "argmax.cuh"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_runtime.h>

static __global__ void advance_kernel(int *pos, const int *tok, unsigned long long *post, double *u,
                                      const double *u_in, unsigned long long *key, int *pick)
{
    pdl_launch_dependents();
    // the next step's number, read while the step's last kernels run: pos[0] is written only
    // by the step before's advance (or by a copy before the launch), both finished by now
    double un = 0.0;
    if (u) {
        const double *slot = u_in + ((pos[0] + 1) & 1);
        asm volatile("ld.relaxed.sys.global.f64 %0, [%1];" : "=d"(un) : "l"(slot) : "memory");
    }
    pdl_wait();
    const int p = pos[0];
    int t = 0;
    if (key) { // the greedy choice an LM head folded into *key (ls_gemv_argmax)
        const int i = am_key_index(*key);
        t = i == INT_MAX ? 0 : i;
        *key = 0ull;
        pick[0] = t;
    } else if (post) {
        t = tok[0];
    }
    if (post) {
        const unsigned long long v =
            ((unsigned long long)(unsigned)p << 32) | (unsigned long long)(unsigned)t;
        // one 8-byte store, so the host never sees a position with another step's token
        asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(post + (p & 1)), "l"(v)
                     : "memory");
    }
    if (u) u[0] = un;
    pos[0] = p + 1;
}

extern "C" void ls_advance_pos(int *pos, const int *tok, unsigned long long *post, double *u,
                               const double *u_in, unsigned long long *key, int *pick, void *stream)
{
    if (key && !pick) ls_die(__FILE__, __LINE__, "ls_advance_pos", "a key without pick");
    pdl_launch(advance_kernel, 1, 1, 0, (cudaStream_t)stream, pos, tok, post, u, u_in, key, pick);
    CHECK_CUDA(cudaGetLastError());
}

static __global__ void post_scores_kernel(const int *pos, const double *src, int n, double *slots,
                                          int slot_n, unsigned long long *tags)
{
    pdl_launch_dependents();
    pdl_wait();
    const int p = pos[0];
    double *dst = slots + (size_t)(p & 1) * slot_n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    // every thread's stores before the tag (the barrier), and all of them seen by the host
    // before it (a system-scope fence, cumulative, and a release store by the same thread)
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        const unsigned long long t = (unsigned long long)(unsigned)p + 1ull;
        asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(tags + (p & 1)), "l"(t)
                     : "memory");
    }
}

extern "C" void ls_post_scores(const int *pos, const double *src, int n, double *slots, int slot_n,
                               unsigned long long *tags, void *stream)
{
    if (n > slot_n) ls_die(__FILE__, __LINE__, "ls_post_scores", "more scores than a slot holds");
    pdl_launch(post_scores_kernel, 1, 256, 0, (cudaStream_t)stream, pos, src, n, slots, slot_n,
               tags);
    CHECK_CUDA(cudaGetLastError());
}
