// The decode attention's split, shared by the attention kernels and the o GEMV that merges the
// split's partials itself (ls_gemv_residual_copy_att): the chunk length, the workspace layout, and
// that merge.
#pragma once

#include <math.h>
#include <stddef.h>

// chunk length for a context of n positions cut into nsplit chunks
static __device__ __forceinline__ int chunk_len(int n, int nsplit, int min_chunk)
{
    int c = (n + nsplit - 1) / nsplit;
    return c < min_chunk ? min_chunk : c;
}

// workspace layout for nsplit > 1: (max, sum) [hq][nsplit][2], then from a 16-byte boundary
// the outputs [hq][nsplit][hd] (floats; the merge reads them four at a time), then from a
// 16-byte boundary one done-counter per decode block row (<= hq ints)
static __host__ __device__ __forceinline__ size_t ws_out_offset(int hq, int nsplit)
{
    return ((size_t)hq * nsplit * 2 + 3) & ~(size_t)3; // in floats
}

static __host__ __device__ __forceinline__ size_t ws_counter_offset(int hq, int hd, int nsplit)
{
    return (ws_out_offset(hq, nsplit) + (size_t)hq * nsplit * hd + 3) & ~(size_t)3; // in floats
}

// The split's partials left in the workspace (ls_attention_decode_partials), for the o GEMV.
struct att_split {
    const float *ws; // the workspace the chunks wrote
    const int *pos;  // the position the attention read (its context is pos[0] + 1)
    int hq, hd, nsplit, min_chunk, max_ctx;
};

// Attention output elements i0 .. i0 + 7 (within one q head: hd % 8 == 0) merged from the live
// chunks' partials, with the cluster merge's arithmetic in its order (attn_decode_kernel): M the
// largest of the chunks' maxima, each chunk's scale exp2(m_s - M), L = sum l_s * scale_s and each
// element sum o_s * scale_s / L, summed in chunk order. So the result is bitwise the cluster
// merge's. Read with ld.cg: the attention kernel wrote them in this step.
static __device__ __forceinline__ void att_split_merge8(const att_split &a, int i0, float4 &x0,
                                                        float4 &x1)
{
    int n = a.pos[0] + 1;
    n = n < 1 ? 1 : n > a.max_ctx ? a.max_ctx : n;
    const int C = chunk_len(n, a.nsplit, a.min_chunk), live = (n + C - 1) / C;
    const int h = i0 / a.hd, d = i0 - h * a.hd;
    const float2 *ml = reinterpret_cast<const float2 *>(a.ws) + (size_t)h * a.nsplit;
    const float *o = a.ws + ws_out_offset(a.hq, a.nsplit) + (size_t)h * a.nsplit * a.hd + d;
    float M = -INFINITY;
    for (int s = 0; s < live; s++) M = fmaxf(M, __ldcg(&ml[s].x));
    float L = 0.0f;
    float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f), B = A;
#pragma unroll 2
    for (int s = 0; s < live; s++) {
        const float2 p = __ldcg(&ml[s]);
        const float4 u = __ldcg(reinterpret_cast<const float4 *>(o + (size_t)s * a.hd));
        const float4 v = __ldcg(reinterpret_cast<const float4 *>(o + (size_t)s * a.hd) + 1);
        const float sc = exp2f(p.x - M);
        L = fmaf(p.y, sc, L);
        A.x = fmaf(u.x, sc, A.x), A.y = fmaf(u.y, sc, A.y);
        A.z = fmaf(u.z, sc, A.z), A.w = fmaf(u.w, sc, A.w);
        B.x = fmaf(v.x, sc, B.x), B.y = fmaf(v.y, sc, B.y);
        B.z = fmaf(v.z, sc, B.z), B.w = fmaf(v.w, sc, B.w);
    }
    x0 = make_float4(A.x / L, A.y / L, A.z / L, A.w / L);
    x1 = make_float4(B.x / L, B.y / L, B.z / L, B.w / L);
}
