// The decode attention of one KV-head group by one block, shared by the group kernel
// (attention.cu, ls_attention_decode_group) and the QKV GEMV's tail (gemv.cu, the block that
// completes a group's rows runs its attention; docs/DESIGN.md).
//
// One block of NW warps takes every position 0 .. n-1 of one KV head and its g q heads. The q
// heads are cut into sets of HPW (q of a set in each lane's registers); the warps into as many
// teams as there are sets, a team's warps taking the positions in turn. A position's row of hd
// bf16 is read by LG = hd/8 lanes (rounded up to a power of two), one 16-byte load each, so a
// warp covers 32/LG positions a step and U steps' rows are in flight at once. Each lane keeps
// a running max, sum and its 8 output dimensions per q head (online softmax, exp2 with q
// pre-scaled), the lanes of a warp merge by shuffles, the warps of a team through shared
// memory, in warp order: results are reproducible and do not depend on which block runs them.
// K, V and q go through L2 (ld.cg): in the GEMV's tail other blocks of the running grid wrote
// q and the current position's rows.
#ifndef LOCKSTEP_KERNELS_ATT_GROUP_CUH
#define LOCKSTEP_KERNELS_ATT_GROUP_CUH

#include "bf16.cuh"

#include <math.h>
#include <stdint.h>

// floats of shared memory group_attention needs with NW warps: each warp's (max, sum) per q head
// of its set, and its HPW * hd <= 256 output partials
#define GA_SMEM_FLOATS(NW) ((NW) * (256 + 4))

static __device__ __forceinline__ uint4 ld_cg_u4(const uint16_t *p)
{
    uint4 r;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

static __device__ __forceinline__ float4 ld_cg_f4(const float *p)
{
    float4 r;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
                 : "l"(p));
    return r;
}

// asks L2 for bytes [p, p + n) (16-byte aligned, a multiple of 16) with the bulk copy unit; one
// thread issues it, nobody waits for it
static __device__ __forceinline__ void prefetch_l2_bulk(const void *p, unsigned n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (n) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#else
    (void)p, (void)n;
#endif
}

// the q heads a set holds and the steps in flight a lane, for a form number (the host's
// LOCKSTEP_ATT_GROUP_FORM): 0 (1, 2), 1 (1, 4), 2 (2, 1), 3 (2, 2)
#define GA_FORMS 4

// whether group_attention takes hq q heads over hkv KV heads of hd in form `form` with nw warps
static inline int group_attention_ok(int hq, int hkv, int hd, int form, int nw)
{
    if (hd < 8 || hd % 8 || hd > 256 || hkv < 1 || hq < hkv || hq % hkv || form < 0 ||
        form >= GA_FORMS)
        return 0;
    const int hpw = form >= 2 ? 2 : 1;
    return hpw * hd <= 256 && (hq / hkv + hpw - 1) / hpw <= nw;
}

// out [g][hd] = attention of q [g][hd] (fp32) over K, V [n][hd] (bf16, rows hd apart). Every
// thread of the block calls it; sm: GA_SMEM_FLOATS(NW) floats. Needs hd % 8 == 0, hd <= 256,
// HPW * hd <= 256, ceil(g / HPW) <= NW (the host checks).
template <int NW, int HPW, int U>
static __device__ __noinline__ void group_attention(float *out, const float *q, const uint16_t *K,
                                                    const uint16_t *V, int n, int g, int hd,
                                                    float qscale, float *sm)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int lanes = hd >> 3, LG = lanes <= 8 ? 8 : lanes <= 16 ? 16 : 32, PG = 32 / LG;
    const int sets = (g + HPW - 1) / HPW, team = NW / sets; // warps a set
    const int set = warp / team, wi = warp - set * team;
    const int sub = lane / LG, c = lane % LG;
    const bool on = set < sets, lane_on = c * 8 < hd;
    float *sm_o = sm, *sm_m = sm + NW * 256, *sm_l = sm_m + NW * 2;

    float qv[HPW][8], m[HPW], l[HPW], o[HPW][8];
#pragma unroll
    for (int i = 0; i < HPW; i++) {
        const int h = set * HPW + i;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
        if (on && h < g && lane_on) {
            a = ld_cg_f4(q + (size_t)h * hd + c * 8);
            b = ld_cg_f4(q + (size_t)h * hd + c * 8 + 4);
        }
        qv[i][0] = a.x * qscale, qv[i][1] = a.y * qscale, qv[i][2] = a.z * qscale;
        qv[i][3] = a.w * qscale, qv[i][4] = b.x * qscale, qv[i][5] = b.y * qscale;
        qv[i][6] = b.z * qscale, qv[i][7] = b.w * qscale;
#pragma unroll
        for (int j = 0; j < 8; j++) o[i][j] = 0.0f;
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }

    // warp-uniform loop: the warp's first position of the step (its lanes add sub)
    const int step = team * PG;
    for (int wb = on ? wi * PG : n; wb < n; wb += U * step) {
        uint4 kr[U], vr[U];
        int p[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            p[u] = wb + u * step + sub;
            kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
            if (p[u] < n && lane_on) {
                kr[u] = ld_cg_u4(K + (size_t)p[u] * hd + c * 8);
                vr[u] = ld_cg_u4(V + (size_t)p[u] * hd + c * 8);
            }
        }
        float s[U][HPW];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[8];
            unpack8(kr[u], kf);
#pragma unroll
            for (int i = 0; i < HPW; i++) {
                float d = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; j++) d = fmaf(qv[i][j], kf[j], d);
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    if (off < LG) d += __shfl_xor_sync(0xffffffffu, d, off);
                s[u][i] = p[u] < n ? d : -INFINITY;
            }
        }
#pragma unroll
        for (int i = 0; i < HPW; i++) {
            float mx = s[0][i];
#pragma unroll
            for (int u = 1; u < U; u++) mx = fmaxf(mx, s[u][i]);
            const float mn = fmaxf(m[i], mx);
            if (mn == -INFINITY) continue; // no position of this lane yet
            const float alpha = exp2f(m[i] - mn);
            l[i] *= alpha;
#pragma unroll
            for (int j = 0; j < 8; j++) o[i][j] *= alpha;
#pragma unroll
            for (int u = 0; u < U; u++) {
                float pw = exp2f(s[u][i] - mn), vf[8];
                unpack8(vr[u], vf);
                l[i] += pw;
#pragma unroll
                for (int j = 0; j < 8; j++) o[i][j] = fmaf(pw, vf[j], o[i][j]);
            }
            m[i] = mn;
        }
    }

    // the warp's position slots (lanes c, c + LG, ...) merged
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        if (off < LG) continue;
#pragma unroll
        for (int i = 0; i < HPW; i++) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m[i], off);
            const float l2 = __shfl_xor_sync(0xffffffffu, l[i], off);
            float o2[8];
#pragma unroll
            for (int j = 0; j < 8; j++) o2[j] = __shfl_xor_sync(0xffffffffu, o[i][j], off);
            const float mn = fmaxf(m[i], m2);
            if (mn == -INFINITY) continue;
            const float a = exp2f(m[i] - mn), b = exp2f(m2 - mn);
            l[i] = l[i] * a + l2 * b;
#pragma unroll
            for (int j = 0; j < 8; j++) o[i][j] = o[i][j] * a + o2[j] * b;
            m[i] = mn;
        }
    }
    if (sub == 0 && on) {
#pragma unroll
        for (int i = 0; i < HPW; i++) {
            if (lane == 0) {
                sm_m[warp * 2 + i] = m[i];
                sm_l[warp * 2 + i] = l[i];
            }
            if (lane_on) {
#pragma unroll
                for (int j = 0; j < 8; j++) sm_o[warp * 256 + i * hd + c * 8 + j] = o[i][j];
            }
        }
    }
    __syncthreads();
    // output (q head h, dimension d): the team's warps merged in warp order
    for (int t = threadIdx.x; t < g * hd; t += NW * 32) {
        const int h = t / hd, d = t - h * hd, st = h / HPW, i = h - st * HPW;
        const int w0 = st * team;
        float M = -INFINITY;
        for (int w = w0; w < w0 + team; w++) M = fmaxf(M, sm_m[w * 2 + i]);
        float L = 0.0f, O = 0.0f;
        for (int w = w0; w < w0 + team; w++) {
            const float mw = sm_m[w * 2 + i];
            if (mw == -INFINITY) continue;
            const float a = exp2f(mw - M);
            L = fmaf(sm_l[w * 2 + i], a, L);
            O = fmaf(sm_o[w * 256 + i * hd + d], a, O);
        }
        out[t] = O / L;
    }
    __syncthreads(); // sm free again (the GEMV's tail may run another group)
}

// group_attention in the form `form` (GA_FORMS), NW warps
template <int NW>
static __device__ __forceinline__ void group_attention_form(int form, float *out, const float *q,
                                                            const uint16_t *K, const uint16_t *V,
                                                            int n, int g, int hd, float qscale,
                                                            float *sm)
{
    switch (form) {
    case 1:
        group_attention<NW, 1, 4>(out, q, K, V, n, g, hd, qscale, sm);
        break;
    case 2:
        group_attention<NW, 2, 1>(out, q, K, V, n, g, hd, qscale, sm);
        break;
    case 3:
        group_attention<NW, 2, 2>(out, q, K, V, n, g, hd, qscale, sm);
        break;
    default:
        group_attention<NW, 1, 2>(out, q, K, V, n, g, hd, qscale, sm);
    }
}

#endif
