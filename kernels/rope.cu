// See rope.h. One warp per head (q heads, then k heads, then v heads), one block per 8 heads of
// one position: each lane owns hd/64 rotation pairs. The angles use accurate sincosf, not the
// fast intrinsics: at position 100k an angle is ~1e5 radians, where __sinf is far off. The
// norm is a warp reduction in fixed order; the normalised head is written back before the
// rotation reads it, ordered by __syncwarp.
#include "config.h"
#include "rope.h"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define ROPE_WARPS 8
#define ROPE_PAIRS 4 // rotation pairs per lane: head_dim <= 256

#define L2_STRIPE ((size_t)64 << 10)

// asynchronous prefetch of len bytes (16-byte aligned, a multiple of 16) into L2 (sm_90 bulk
// copy engine); a hint: nothing waits for it
static __device__ __forceinline__ void l2_prefetch(const void *p, unsigned len)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(len) : "memory");
#endif
}

// what to prefetch: up to two regions, every[r] = 0 (none) or one stripe in every[r]
struct l2_plan {
    const char *p[2];
    size_t bytes[2], every[2];
};

static __device__ __forceinline__ uint16_t f_to_bf16(float f)
{
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    return *reinterpret_cast<uint16_t *>(&b);
}

static __global__ void __launch_bounds__(ROPE_WARPS * 32)
    rope_kv_kernel(float *q, float *k, const float *__restrict__ v, int q_stride, int kv_stride,
                   uint16_t *__restrict__ kcache, uint16_t *__restrict__ vcache,
                   const int *__restrict__ pos, const float *__restrict__ inv_freq, int hq, int hkv,
                   int hd, int max_ctx, int interleaved, const float *__restrict__ q_norm,
                   const float *__restrict__ k_norm, float eps, const l2_plan pf)
{
    pdl_launch_dependents();
    // the next matrices into L2 (weights: written by no kernel, so before the wait): 64 KB
    // stripes spread over all threads, one stripe in `every` of each (see l2_plan)
    const size_t nthreads = (size_t)gridDim.x * gridDim.y * blockDim.x;
    const size_t g = ((size_t)blockIdx.x * gridDim.y + blockIdx.y) * blockDim.x + threadIdx.x;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (!pf.every[r]) continue;
        for (size_t st = g * pf.every[r]; st * L2_STRIPE < pf.bytes[r];
             st += nthreads * pf.every[r]) {
            size_t off = st * L2_STRIPE, len = pf.bytes[r] - off;
            len = (len < L2_STRIPE ? len : L2_STRIPE) & ~(size_t)15;
            if (len) l2_prefetch(pf.p[r] + off, (unsigned)len);
        }
    }
    // The positions and the angles before the wait: pos is written before the step's kernels
    // (by the host, or by the previous step's graph), inv_freq at load, so no kernel of this
    // step writes them; only q, k and v come from the kernel before.
    const int t = blockIdx.x, lane = threadIdx.x & 31;
    const int head = blockIdx.y * ROPE_WARPS + (threadIdx.x >> 5);
    const int p = pos[t];
    const bool store = p >= 0 && p < max_ctx;
    const int half = hd / 2;
    float sn[ROPE_PAIRS], cs[ROPE_PAIRS]; // pair lane + 32 * j
#pragma unroll
    for (int j = 0; j < ROPE_PAIRS; j++) {
        sn[j] = 0.0f, cs[j] = 1.0f;
        const int i = lane + 32 * j;
        if (i < half && head < hq + hkv) sincosf((float)p * inv_freq[i], &sn[j], &cs[j]);
    }
    pdl_wait();
    if (head >= hq + 2 * hkv) return;

    if (head >= hq + hkv) { // v: store only
        int h = head - hq - hkv;
        const float *src = v + (size_t)t * kv_stride + (size_t)h * hd;
        if (store) {
            uint16_t *dst = vcache + ((size_t)h * max_ctx + p) * hd;
            for (int i = lane; i < hd; i += 32) dst[i] = f_to_bf16(src[i]);
        }
        return;
    }

    const bool is_q = head < hq;
    const int h = is_q ? head : head - hq;
    float *x = is_q ? q + (size_t)t * q_stride + (size_t)h * hd
                    : k + (size_t)t * kv_stride + (size_t)h * hd;
    const float *nw = is_q ? q_norm : k_norm;
    if (nw) {
        float ss = 0.0f;
        for (int i = lane; i < hd; i += 32) ss = fmaf(x[i], x[i], ss);
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float scale = 1.0f / sqrtf(ss / (float)hd + eps);
        for (int i = lane; i < hd; i += 32) x[i] = (x[i] * scale) * nw[i];
        __syncwarp();
    }
    uint16_t *kc = (!is_q && store) ? kcache + ((size_t)h * max_ctx + p) * hd : nullptr;
#pragma unroll
    for (int j = 0; j < ROPE_PAIRS; j++) {
        const int i = lane + 32 * j;
        if (i >= half) break;
        const float s = sn[j], c = cs[j];
        int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
        float x0 = x[i0], x1 = x[i1];
        float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;
        x[i0] = y0;
        x[i1] = y1;
        if (kc) {
            kc[i0] = f_to_bf16(y0);
            kc[i1] = f_to_bf16(y1);
        }
    }
}

// Two thirds of the L2 for prefetches: all of the first region if it fits, else an even share
// of it; the second gets an even share of what is left.
static l2_plan plan_prefetch(const void *const next[2], const size_t bytes[2])
{
    static size_t l2_size;
    if (!l2_size) {
        int dev, b = 0;
        CHECK_CUDA(cudaGetDevice(&dev));
        CHECK_CUDA(cudaDeviceGetAttribute(&b, cudaDevAttrL2CacheSize, dev));
        l2_size = b > 0 ? (size_t)b : ((size_t)40 << 20);
    }
    l2_plan pf = {};
    size_t left = l2_size / 3 * 2;
    for (int r = 0; r < 2; r++) {
        if (!next[r] || ((uintptr_t)next[r] & 15) || !bytes[r] || left < L2_STRIPE) continue;
        pf.p[r] = (const char *)next[r];
        pf.bytes[r] = bytes[r];
        pf.every[r] = (bytes[r] + left - 1) / left;
        size_t taken = bytes[r] / pf.every[r];
        left = taken < left ? left - taken : 0;
    }
    return pf;
}

extern "C" void ls_rope_kv_prefetch(float *q, float *k, const float *v, int q_stride, int kv_stride,
                                    uint16_t *kcache, uint16_t *vcache, const int *pos,
                                    const float *inv_freq, int T, int hq, int hkv, int hd,
                                    int max_ctx, int interleaved, const float *q_norm,
                                    const float *k_norm, float eps, const void *const l2_next[2],
                                    const size_t l2_bytes[2], void *stream)
{
    if (hd < 2 || hd % 2 || hd > 256 || hq < 0 || hkv < 0 || T < 0)
        ls_die(__FILE__, __LINE__, "ls_rope_kv", "expected an even head_dim <= 256, T >= 0");
    int heads = hq + 2 * hkv;
    if (T == 0 || heads == 0) return;
    const void *none[2] = {nullptr, nullptr};
    const size_t zero[2] = {0, 0};
    l2_plan pf = plan_prefetch(l2_next ? l2_next : none, l2_bytes ? l2_bytes : zero);
    dim3 grid((unsigned)T, (unsigned)((heads + ROPE_WARPS - 1) / ROPE_WARPS));
    pdl_launch(rope_kv_kernel, grid, ROPE_WARPS * 32, 0, (cudaStream_t)stream, q, k, v, q_stride,
               kv_stride, kcache, vcache, pos, inv_freq, hq, hkv, hd, max_ctx, interleaved, q_norm,
               k_norm, eps, pf);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_rope_kv(float *q, float *k, const float *v, int q_stride, int kv_stride,
                           uint16_t *kcache, uint16_t *vcache, const int *pos,
                           const float *inv_freq, int T, int hq, int hkv, int hd, int max_ctx,
                           int interleaved, const float *q_norm, const float *k_norm, float eps,
                           void *stream)
{
    ls_rope_kv_prefetch(q, k, v, q_stride, kv_stride, kcache, vcache, pos, inv_freq, T, hq, hkv, hd,
                        max_ctx, interleaved, q_norm, k_norm, eps, nullptr, nullptr, stream);
}
