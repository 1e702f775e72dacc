// See rope.h. One warp per head (q heads, then k heads, then v heads), one block per 8 heads of
// one position: each lane owns hd/64 rotation pairs. The angles use accurate sincosf, not the
// fast intrinsics: at position 100k an angle is ~1e5 radians, where __sinf is far off. The
// norm is a warp reduction in fixed order; the normalised head is written back before the
// rotation reads it, ordered by __syncwarp.
#include "config.h"
#include "rope.h"
#include "rope.cuh"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define ROPE_WARPS 8
#define ROPE_PAIRS 4 // rotation pairs per lane: head_dim <= 256

static __global__ void __launch_bounds__(ROPE_WARPS * 32)
    rope_kv_kernel(float *q, float *k, const float *__restrict__ v, int q_stride, int kv_stride,
                   uint16_t *__restrict__ kcache, uint16_t *__restrict__ vcache,
                   const int *__restrict__ pos, const float *__restrict__ inv_freq, int hq, int hkv,
                   int hd, int max_ctx, int interleaved, const float *__restrict__ q_norm,
                   const float *__restrict__ k_norm, float eps)
{
    pdl_launch_dependents();
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
            for (int i = lane; i < hd; i += 32) dst[i] = rope_bf16(src[i]);
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
        float y0 = x[i0], y1 = x[i1];
        rope_rotate(y0, y1, c, s);
        x[i0] = y0;
        x[i1] = y1;
        if (kc) {
            kc[i0] = rope_bf16(y0);
            kc[i1] = rope_bf16(y1);
        }
    }
}

extern "C" void ls_rope_kv(float *q, float *k, const float *v, int q_stride, int kv_stride,
                           uint16_t *kcache, uint16_t *vcache, const int *pos,
                           const float *inv_freq, int T, int hq, int hkv, int hd, int max_ctx,
                           int interleaved, const float *q_norm, const float *k_norm, float eps,
                           void *stream)
{
    if (hd < 2 || hd % 2 || hd > 256 || hq < 0 || hkv < 0 || T < 0)
        ls_die(__FILE__, __LINE__, "ls_rope_kv", "expected an even head_dim <= 256, T >= 0");
    int heads = hq + 2 * hkv;
    if (T == 0 || heads == 0) return;
    dim3 grid((unsigned)T, (unsigned)((heads + ROPE_WARPS - 1) / ROPE_WARPS));
    pdl_launch(rope_kv_kernel, grid, ROPE_WARPS * 32, 0, (cudaStream_t)stream, q, k, v, q_stride,
               kv_stride, kcache, vcache, pos, inv_freq, hq, hkv, hd, max_ctx, interleaved, q_norm,
               k_norm, eps);
    CHECK_CUDA(cudaGetLastError());
}
