// See attention.h.
//
// Decode. Bytes per context position per KV head are 4*hd (K and V, bf16): 512 B at hd 128, so
// at long contexts this kernel, like the GEMV, lives on memory bandwidth. A block of 4 warps
// takes one chunk of positions for one KV head and up to 8 of its q heads (q in registers,
// pre-scaled by log2(e)/sqrt(hd) so the softmax uses exp2). A position's row of hd bf16 is read
// by LG = hd/8 lanes (rounded up to a power of two) with one 16-byte load each, so a warp covers
// 32/LG positions per step; each lane keeps a running max, sum and its 8 output dimensions per q
// head (online softmax), for its own positions. At the end the lanes of a warp, then the 4
// warps, merge their states in a fixed order. One chunk: the block writes the normalised
// output. Several: it writes (max, sum, output) to the workspace, fences, and counts itself done
// on its q heads' counter (one int per blockIdx.y, after the partials in the workspace); the last
// block of the live chunks to arrive merges all of them in a fixed order, writes the output and
// sets the counter back to 0 (so one kernel per decode step, and graph replays find it zeroed;
// the caller zeroes the workspace once when it allocates it). Every reduction has a fixed order,
// so results are reproducible and do not depend on which block arrives last. The blocks are
// launched in clusters of ATT_CLUSTER chunks: when every live chunk lies in the first cluster
// (short contexts), the partials meet in distributed shared memory instead (no workspace, fence
// or counter). Live chunk b owns a slice of the gb * hd output elements; as a block merges its
// warps it stores each element into the slot of the slice's owner, and its (max, sum) into
// every live chunk, then arrives on a cluster barrier and waits on it; each live chunk then
// merges its slice in chunk order. So one barrier round lies on the critical path, and the
// merge is shared out. No block stores into another before every block of the cluster runs:
// each arrives on the barrier's previous phase before its PDL wait and waits on it just before
// its first store, by when it has long completed. The cluster merge has its own copy of the
// loop that merges the warps: with those stores in the loop the workspace merge shares, that
// path ran 0.5 to 1 us slower (code generation).
//
// ls_attention_decode_partials launches the split without clusters and stops there: each live
// chunk writes its partial to the workspace and leaves (no counter, no merge), and the o GEMV
// merges the chunks as it loads its input (att_split.cuh, ls_gemv_residual_copy_att), so the
// merge leaves the attention's chain (LOCKSTEP_ATT_DEFER in the engine).
//
// The chunk length is computed on the device from the context length, never below
// min_chunk positions (ATT_MIN_CHUNK, or LOCKSTEP_ATT_CHUNK); chunks past the end of the context
// are not counted, and exit at once (see the kernel on the PDL wait).
//
// Prefill. Block = (32 queries, one q head), 128 threads as 8 x 16: a thread holds a 4x4 tile of
// scores and a 4 x hd/16 tile of the output. Per 64-key tile: K (transposed) and V are converted
// to fp32 in shared memory, S = Q K^T from shared memory, causal mask, online softmax with the
// row reductions across the 16 threads of a row (shuffles within a warp), P to shared memory,
// O += P V. Key tiles stop at the last query of the block.
#include "config.h"
#include "att_split.cuh"
#include "attention.h"
#include "bf16.cuh"
#include "bulk_shape.h"
#include "device.cuh"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ATT_WARPS     4
#define ATT_MAX_G     8   // q heads per decode block
#define ATT_MIN_CHUNK 64  // positions
#define ATT_MAX_SPLIT 512 // chunks: the merge keeps (max, sum) per chunk and q head in sm_o
#define LOG2E         1.4426950408889634f
#define ATT_CLUSTER   8 // blocks per cluster (the portable most): the cluster merge's live chunks

namespace cg = cooperative_groups;

// Clusters exist from sm_90 on; the host launches clusters only on devices that have them, so on
// older targets these are never reached. The cluster barrier split in two (PTX barrier.cluster):
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

// The online softmax that both decode kernels run (attn_decode_kernel and the streamed
// attn_decode_bulk_kernel; hd = LG * 8 with LG lanes a row, 8 dimensions a lane), in pieces
// that each kernel places in its own loops.

// q head g's 8 dimensions of lane c for the block's gb q heads from h0 (zeros for the lanes past
// hd, `on` false, and for the heads past gb), scaled; the running state emptied
template <int GM>
static __device__ __forceinline__ void att_start(float (&qv)[GM][8], float (&m)[GM], float (&l)[GM],
                                                 float (&o)[GM][8], const float *q, int h0, int gb,
                                                 int hd, int c, bool on, float qscale)
{
#pragma unroll
    for (int g = 0; g < GM; g++) {
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
        if (g < gb && on) {
            const float4 *q4 = reinterpret_cast<const float4 *>(q + (size_t)(h0 + g) * hd + c * 8);
            a = q4[0];
            b = q4[1];
        }
        qv[g][0] = a.x * qscale, qv[g][1] = a.y * qscale, qv[g][2] = a.z * qscale;
        qv[g][3] = a.w * qscale, qv[g][4] = b.x * qscale, qv[g][5] = b.y * qscale;
        qv[g][6] = b.z * qscale, qv[g][7] = b.w * qscale;
#pragma unroll
        for (int j = 0; j < 8; j++) o[g][j] = 0.0f;
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
}

// one K row's score per q head, summed over the row's LG lanes (-inf where `ok` is false)
template <int GM, int LG>
static __device__ __forceinline__ void att_score(float (&s)[GM], const uint4 &kr,
                                                 const float (&qv)[GM][8], bool ok)
{
    float kf[8];
    unpack8(kr, kf);
#pragma unroll
    for (int g = 0; g < GM; g++) {
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) d = fmaf(qv[g][j], kf[j], d);
#pragma unroll
        for (int off = LG / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
        s[g] = ok ? d : -INFINITY;
    }
}

// the running (max, sum, output) of each q head after U more rows: scores s, V rows vr
template <int U, int GM>
static __device__ __forceinline__ void att_update(float (&m)[GM], float (&l)[GM], float (&o)[GM][8],
                                                  const float (&s)[U][GM], const uint4 (&vr)[U])
{
#pragma unroll
    for (int g = 0; g < GM; g++) {
        float mx = s[0][g];
#pragma unroll
        for (int u = 1; u < U; u++) mx = fmaxf(mx, s[u][g]);
        const float mn = fmaxf(m[g], mx);
        if (mn == -INFINITY) continue; // no position of this lane yet
        const float alpha = exp2f(m[g] - mn);
        l[g] *= alpha;
#pragma unroll
        for (int j = 0; j < 8; j++) o[g][j] *= alpha;
#pragma unroll
        for (int u = 0; u < U; u++) {
            float pw = exp2f(s[u][g] - mn), vf[8];
            unpack8(vr[u], vf);
            l[g] += pw;
#pragma unroll
            for (int j = 0; j < 8; j++) o[g][j] = fmaf(pw, vf[j], o[g][j]);
        }
        m[g] = mn;
    }
}

// the states of a warp's rows merged (lanes c, c + LG, ...: each lane ends with the sum)
template <int GM, int LG>
static __device__ __forceinline__ void att_merge_lanes(float (&m)[GM], float (&l)[GM],
                                                       float (&o)[GM][8])
{
#pragma unroll
    for (int off = LG; off < 32; off <<= 1) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
            float m2 = __shfl_xor_sync(0xffffffffu, m[g], off);
            float l2 = __shfl_xor_sync(0xffffffffu, l[g], off);
            float o2[8];
#pragma unroll
            for (int j = 0; j < 8; j++) o2[j] = __shfl_xor_sync(0xffffffffu, o[g][j], off);
            float mn = fmaxf(m[g], m2);
            if (mn == -INFINITY) continue;
            float a = exp2f(m[g] - mn), b = exp2f(m2 - mn);
            l[g] = l[g] * a + l2 * b;
#pragma unroll
            for (int j = 0; j < 8; j++) o[g][j] = o[g][j] * a + o2[j] * b;
            m[g] = mn;
        }
    }
}

// After a block's partials are in the workspace: whether its count completes the live chunks of
// its counter (that block then zeroes the counter for the next launch and merges; the other
// chunks' partials are read after the count). sm_last: an int in shared memory.
static __device__ __forceinline__ bool att_last_chunk(int *count, int live, int *sm_last)
{
    __threadfence(); // this thread's partials are visible device-wide before the count
    __syncthreads();
    if (threadIdx.x == 0) {
        const bool last = atomicAdd(count, 1) == live - 1;
        if (last) {
            *count = 0;
            __threadfence();
        }
        *sm_last = last;
    }
    __syncthreads();
    return *sm_last;
}

// The last chunk's merge of the live chunks' partials for the gb q heads from h0, over shared
// memory: the chunks' (max, sum) pairs into sml ([gb][live][2]) in one pass; then per q head (one
// warp each, NW warps) M, each chunk's scale exp2(m_s - M) in place of m_s and L = sum l_s *
// scale into sL[g]; then each output element sum_s o_s * scale_s / L. Every load is an L2 load
// (__ldcg: other blocks wrote them during this kernel), the loads of a step are independent (a
// chain of dependent L2 round trips per element took ~30 us at 64 chunks), and every sum has a
// fixed order. Four output elements a thread (hd % 8 == 0), each loaded as one float4 (merge4,
// where a block's q heads give every thread four elements or more): a thread's eight loads in
// flight move 128 bytes, where one element at a time moved 32, so the merge of 66 chunks takes a
// quarter of the L2 round trips. Else one element a thread (fewer elements than four a thread:
// float4 would idle threads and keep the round trips). Same order, same bits. UNR: the chunks a
// thread's loop holds in flight. The lanes' loops over the chunks' pairs stay rolled (a lane
// holds at most live / 32 of them, and unrolled they took the streamed kernel's SASS from 4480
// to 4832 instructions, all in this merge, which runs on the step's critical path).
template <int NW, int NT, int UNR>
static __device__ __forceinline__ void
att_ws_merge(float *__restrict__ out, const float *__restrict__ ws, int hq, int hd, int nsplit,
             int h0, int gb, int live, float *sml, float *sL, int merge4)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nt = NT ? NT : blockDim.x;
    const float *wml = ws + (size_t)h0 * nsplit * 2;
    for (int i = threadIdx.x; i < gb * live; i += nt) {
        const int g = i / live, s = i - g * live;
        const float2 v = __ldcg(reinterpret_cast<const float2 *>(wml) + (size_t)g * nsplit + s);
        sml[2 * i] = v.x;
        sml[2 * i + 1] = v.y;
    }
    __syncthreads();
    for (int g = warp; g < gb; g += NW) {
        float *a = sml + 2 * g * live;
        float M = -INFINITY, L = 0.0f;
#pragma unroll 1
        for (int s = lane; s < live; s += 32) M = fmaxf(M, a[2 * s]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
#pragma unroll 1
        for (int s = lane; s < live; s += 32) {
            const float sc = exp2f(a[2 * s] - M);
            a[2 * s] = sc;
            L = fmaf(a[2 * s + 1], sc, L);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
        if (lane == 0) sL[g] = L;
    }
    __syncthreads();
    for (int i = threadIdx.x; !merge4 && i < gb * hd; i += nt) {
        const int g = i / hd, d = i - g * hd, h = h0 + g;
        const float *wo = ws + ws_out_offset(hq, nsplit) + (size_t)h * nsplit * hd + d;
        const float *a = sml + 2 * g * live;
        float O = 0.0f;
#pragma unroll UNR
        for (int s = 0; s < live; s++) O = fmaf(__ldcg(wo + (size_t)s * hd), a[2 * s], O);
        out[(size_t)h * hd + d] = O / sL[g];
    }
    for (int i = threadIdx.x; merge4 && i < gb * hd / 4; i += nt) {
        const int g = 4 * i / hd, d = 4 * i - g * hd, h = h0 + g;
        const float *wo = ws + ws_out_offset(hq, nsplit) + (size_t)h * nsplit * hd + d;
        const float *a = sml + 2 * g * live;
        float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll UNR
        for (int s = 0; s < live; s++) {
            const float4 v = __ldcg(reinterpret_cast<const float4 *>(wo + (size_t)s * hd));
            const float sc = a[2 * s];
            O.x = fmaf(v.x, sc, O.x), O.y = fmaf(v.y, sc, O.y);
            O.z = fmaf(v.z, sc, O.z), O.w = fmaf(v.w, sc, O.w);
        }
        const float il = sL[g];
        *reinterpret_cast<float4 *>(out + (size_t)h * hd + d) =
            make_float4(O.x / il, O.y / il, O.z / il, O.w / il);
    }
}

// LG lanes per position; GM q heads held per block (1, 2, 4 or 8); U positions per lane per
// loop iteration (see pick_decode_g)
template <int LG, int GM, int U>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_decode_kernel(float *__restrict__ out, float *__restrict__ ws, const float *__restrict__ q,
                       const uint16_t *__restrict__ kcache, const uint16_t *__restrict__ vcache,
                       const int *__restrict__ pos, int hq, int hd, int group, int max_ctx,
                       int nsplit, int min_chunk, int fresh, float qscale, int cluster, int merge4)
{
    constexpr int PG = 32 / LG;              // positions per warp step
    constexpr int STEP = U * ATT_WARPS * PG; // positions per block per loop iteration
    __shared__ float sm_m[ATT_WARPS][GM], sm_l[ATT_WARPS][GM];
    __shared__ float sm_o[ATT_WARPS][GM][256];
    // the cluster merge's slots, which the live chunks of the cluster fill: each chunk's (max,
    // sum) per q head, and [chunk][slice] each chunk's part of the output slice this block
    // merges (live * slice <= gb * hd + live - 1 floats; hd <= LG * 8)
    __shared__ float sm_cm[ATT_CLUSTER][GM], sm_cl[ATT_CLUSTER][GM];
    __shared__ float sm_co[GM * LG * 8 + ATT_CLUSTER];

    // Before the wait: the position (written before this forward's kernels, by a copy or the
    // previous step's graph, so final here) and the first iteration's K/V rows of positions
    // that earlier forwards wrote (before n - 1 - fresh); the rows of this forward (the current
    // position's, from the RoPE kernel) are read after the wait, as is q.
    pdl_launch_dependents();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int sub = lane / LG, c = lane % LG;
    const int nsub = (group + GM - 1) / GM;
    const int kvh = blockIdx.y / nsub, h0 = kvh * group + (blockIdx.y % nsub) * GM;
    const int gb = min(GM, kvh * group + group - h0); // q heads of this block
    int n = pos[0] + 1;
    n = n < 1 ? 1 : n > max_ctx ? max_ctx : n;
    const int C = chunk_len(n, nsplit, min_chunk);
    const int p_begin = blockIdx.x * C, p_end = min(n, p_begin + C);
    const int live = (n + C - 1) / C; // chunks with p_begin < n (<= nsplit)
    // launched in clusters of `cluster` chunks and every live chunk in the first: the partials
    // meet in shared memory (distributed across the cluster), no workspace round trip
    const bool cm = cluster > 1 && live <= cluster;
    const bool cm_block = cm && (int)blockIdx.x < cluster; // a block of the merging cluster
    const bool lane_on = c * 8 < hd;
    const uint16_t *K = kcache + (size_t)kvh * max_ctx * hd + c * 8;
    const uint16_t *V = vcache + (size_t)kvh * max_ctx * hd + c * 8;

    uint4 kr[U], vr[U];
    int p[U];
    auto fetch = [&](int u, int at) { // slot u gets the K and V rows of position `at`
        kr[u] = ld_stream(K + (size_t)at * hd);
        vr[u] = ld_stream(V + (size_t)at * hd);
    };
    // the rows of one iteration; `early`: only those of positions before the current one
    auto load = [&](int base, bool early) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            p[u] = base + u * ATT_WARPS * PG + sub;
            kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
            if (p[u] < p_end && lane_on && (!early || p[u] < n - 1 - fresh)) fetch(u, p[u]);
        }
    };
    const int base0 = p_begin + warp * PG;
    if (base0 < p_end) load(base0, true);
    // The merging cluster's blocks arrive on the barrier's first phase here; each waits on it
    // just before its first store into another block's shared memory (long complete by then),
    // so no block stores into one that has not started.
    if (cm_block) cluster_arrive_relaxed();
    // Past the context: neither counted nor merged, and nothing read. Without clusters such a
    // chunk leaves before the wait (n is final before it); the kernel still completes only
    // after its predecessor (pdl.cuh), since chunk 0 is always live and waits. In a clustered
    // launch it leaves after the wait: leaving before measured slower there (context 256 of
    // 4096: 8.6 against 8.3 us; cause not established). In the merging cluster it also arrives
    // on both phases, or the live chunks would wait for it.
    if (p_begin >= n && cluster <= 1) return;
    pdl_wait();
    if (p_begin >= n) {
        if (cm_block) {
            cluster_wait();
            cluster_arrive_relaxed();
        }
        return;
    }
#pragma unroll
    for (int u = 0; u < U; u++)
        if (base0 < p_end && p[u] >= n - 1 - fresh && p[u] < p_end && lane_on) fetch(u, p[u]);

    float qv[GM][8], m[GM], l[GM], o[GM][8];
    att_start<GM>(qv, m, l, o, q, h0, gb, hd, c, lane_on, qscale);

    for (int base = base0; base < p_end; base += STEP) {
        if (base != base0) load(base, false);
        float s[U][GM];
#pragma unroll
        for (int u = 0; u < U; u++) att_score<GM, LG>(s[u], kr[u], qv, p[u] < p_end);
        att_update<U, GM>(m, l, o, s, vr);
    }

    // merge the PG position slots of the warp (lanes c, c + LG, ...)
    att_merge_lanes<GM, LG>(m, l, o);
    if (sub == 0) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (lane == 0) {
                sm_m[warp][g] = m[g];
                sm_l[warp][g] = l[g];
            }
            if (lane_on) {
#pragma unroll
                for (int j = 0; j < 8; j++) sm_o[warp][g][c * 8 + j] = o[g][j];
            }
        }
    }
    __syncthreads();

    // the warps' states merged, in warp order, for output element (q head g, dimension d);
    // warps that saw no position have m = -inf
    auto merge_warps = [&](int g, int d, float &M, float &L, float &O) {
        M = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm_m[w][g]);
        L = 0.0f, O = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) {
            if (sm_m[w][g] == -INFINITY) continue;
            float a = exp2f(sm_m[w][g] - M);
            L = fmaf(sm_l[w][g], a, L);
            O = fmaf(sm_o[w][g][d], a, O);
        }
    };

    if (cm) {
        // Live chunk b merges output elements [b * slice, (b + 1) * slice) of the block's
        // gb * hd. Once the first phase is complete (every block of the cluster has started),
        // each live chunk stores its part of every slice into the slice's chunk, and its (max,
        // sum) into every live chunk.
        const int slice = (gb * hd + live - 1) / live;
        cluster_wait();
        for (int i = threadIdx.x; i < gb * hd; i += blockDim.x) {
            const int g = i / hd, d = i - g * hd, b = i / slice;
            float M, L, O;
            merge_warps(g, d, M, L, O);
            cluster_peer(sm_co, b)[blockIdx.x * slice + i - b * slice] = O;
            if (d == 0) {
                for (int r = 0; r < live; r++) {
                    cluster_peer(sm_cm[blockIdx.x], r)[g] = M;
                    cluster_peer(sm_cl[blockIdx.x], r)[g] = L;
                }
            }
        }
        // The second phase: arriving (release) publishes these stores; once it completes
        // (acquire), every live chunk's part of this block's slice lies in its slots, and every
        // thread of the block is past the warp merge (sm_l is free). In chunk order: per q head
        // M, each chunk's scale exp2(m_s - M) (in place of m_s) and L = sum l_s * scale; then
        // each output element of the slice sum_s o_s * scale_s / L.
        cluster_arrive();
        cluster_wait();
        if ((int)threadIdx.x < gb) {
            const int g = threadIdx.x;
            float M = -INFINITY, L = 0.0f;
            for (int s = 0; s < live; s++) M = fmaxf(M, sm_cm[s][g]);
            for (int s = 0; s < live; s++) {
                const float sc = exp2f(sm_cm[s][g] - M);
                sm_cm[s][g] = sc;
                L = fmaf(sm_cl[s][g], sc, L);
            }
            sm_l[0][g] = L;
        }
        __syncthreads();
        const int i0 = blockIdx.x * slice, ni = min(slice, gb * hd - i0);
        for (int j = threadIdx.x; j < ni; j += blockDim.x) {
            const int g = (i0 + j) / hd;
            float O = 0.0f;
            for (int s = 0; s < live; s++) O = fmaf(sm_co[s * slice + j], sm_cm[s][g], O);
            out[(size_t)h0 * hd + i0 + j] = O / sm_l[0][g];
        }
        return;
    }

    // one chunk: the output; several: the chunk's partial into the workspace
    for (int i = threadIdx.x; i < gb * hd; i += blockDim.x) {
        const int g = i / hd, d = i - g * hd, h = h0 + g;
        float M, L, O;
        merge_warps(g, d, M, L, O);
        if (nsplit == 1) {
            out[(size_t)h * hd + d] = O / L;
        } else {
            size_t slot = (size_t)h * nsplit + blockIdx.x;
            float *wml = ws, *wo = ws + ws_out_offset(hq, nsplit);
            wo[slot * hd + d] = O;
            if (d == 0) {
                wml[slot * 2] = M;
                wml[slot * 2 + 1] = L;
            }
        }
    }
    if (nsplit == 1 || merge4 < 0) return; // merge4 < 0: the partials are the result

    // last block done: the chunk that completes the count of live chunks merges them all (sm_o
    // holds their (max, sum) pairs then: live <= ATT_MAX_SPLIT, 1024 * GM floats)
    __shared__ int sm_last;
    int *count = reinterpret_cast<int *>(ws + ws_counter_offset(hq, hd, nsplit)) + blockIdx.y;
    if (!att_last_chunk(count, live, &sm_last)) return;
    att_ws_merge<ATT_WARPS, 0, 8>(out, ws, hq, hd, nsplit, h0, gb, live, &sm_o[0][0][0],
                                  &sm_l[0][0], merge4);
}

// The long-context decode streamed through shared memory (LOCKSTEP_ATT_BULK; the launch without
// clusters, hd 128). Block (chunk, KV head): every q head of the KV head's group (up to 8), so
// each K and V row is read once; a grid of about one block a SM (chunks = SMs / KV heads, each a
// run of whole stages of P positions), so a block streams ~1/132 of the cache. The stages go
// into a ring of nr stages of shared memory (32 KB each at 64 positions; 2 by default, up to
// ATS_NS) by the bulk-copy unit, issued by one thread, each completing on its own mbarrier: up
// to pre_most before the PDL wait where their positions precede this forward's (hist), so the
// cache streams while the QKV kernel ends, the rest of the ring's first round after it, and
// each further stage as its slot is consumed. A short ring is the faster one in the step
// (below, at g_shape), though the long one reads faster alone. The products are the register
// kernel's (16 lanes a row of hd 128, a lane's running max, sum and 8 output dimensions per q head,
// four positions a warp step), from shared memory instead of global; the warps' states merge in
// warp order, the chunks' through the workspace as in the register kernel (fixed orders: the
// same bits run to run).
#define ATS_P       64 // positions a stage
#define ATS_NS      6  // stages in the ring at most
#define ATS_RING    2  // stages in the ring by default (LOCKSTEP_ATT_BULK_RING)
#define ATS_THREADS 256
#define ATS_WARPS   (ATS_THREADS / 32)
#define ATS_SMEM    ((size_t)ATS_NS * 2 * ATS_P * 128 * 2) // the ring: K and V, hd 128, bf16

static __device__ __forceinline__ __attribute__((unused)) unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

template <int GM, int P>
static __global__ void __launch_bounds__(ATS_THREADS, 1)
    attn_decode_bulk_kernel(float *__restrict__ out, float *__restrict__ ws,
                            const float *__restrict__ q, const uint16_t *__restrict__ kcache,
                            const uint16_t *__restrict__ vcache, const int *__restrict__ pos,
                            int hq, int group, int max_ctx, int nsplit, int fresh, float qscale,
                            int pre_most, int nr)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int HD = 128, LG = 16, ROWB = HD * 2, SB = P * ROWB; // SB: K (or V) a stage
    extern __shared__ __align__(128) uint8_t ats_smem[];
    __shared__ __align__(8) uint64_t full[ATS_NS];
    __shared__ int sm_last;
    pdl_launch_dependents();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, sub = lane / LG, c = lane % LG;
    const int kvh = blockIdx.y, h0 = kvh * group, gb = min(GM, group);
    int n = pos[0] + 1;
    n = n < 1 ? 1 : n > max_ctx ? max_ctx : n;
    const int nchunk = gridDim.x;
    int C = (n + nchunk - 1) / nchunk;
    C = (C + P - 1) / P * P;
    const int p_begin = blockIdx.x * C, p_end = min(n, p_begin + C);
    const int live = (n + C - 1) / C;
    // past the context: nothing read or written (the kernel completes after its predecessor
    // anyway: chunk 0 is always live and waits)
    if (p_begin >= n) return;
    const int len = p_end - p_begin, ns = (len + P - 1) / P;
    const int hist = n - 1 - fresh; // rows before it: written by earlier forwards
    const uint16_t *K = kcache + ((size_t)kvh * max_ctx + p_begin) * HD;
    const uint16_t *V = vcache + ((size_t)kvh * max_ctx + p_begin) * HD;
    const unsigned sbase = smem_u32(ats_smem);
    auto issue = [&](int st) { // stage st's K and V rows into ring slot st % nr
        const int slot = st % nr, a = st * P, rows = min(P, len - a);
        const unsigned bytes = (unsigned)rows * ROWB, bar = smem_u32(&full[slot]);
        const unsigned dst = sbase + (unsigned)slot * 2 * SB;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                     "r"(2 * bytes)
                     : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
            "%2, [%3];" ::"r"(dst),
            "l"(K + (size_t)a * HD), "r"(bytes), "r"(bar)
            : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
            "%2, [%3];" ::"r"(dst + SB),
            "l"(V + (size_t)a * HD), "r"(bytes), "r"(bar)
            : "memory");
    };
    const int first = min(ns, nr);
    int pre = 0; // stages issued before the wait: those wholly before hist
    if (tid == 0) {
        for (int i = 0; i < nr; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&full[i]))
                         : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        while (pre < first && pre < pre_most && p_begin + min((pre + 1) * P, len) - 1 < hist)
            issue(pre++);
    }
    pdl_wait();
    if (tid == 0 && pre < first) {
        // rows this forward's kernels wrote (generic stores) read by the async proxy
        asm volatile("fence.proxy.async.global;" ::: "memory");
        for (int st = pre; st < first; st++) issue(st);
    }
    __syncthreads(); // the barriers initialised before any thread waits on them

    float qv[GM][8], m[GM], l[GM], o[GM][8];
    att_start<GM>(qv, m, l, o, q, h0, gb, HD, c, true, qscale);

    constexpr int U = P / ATS_WARPS / 2; // warp steps a stage (two rows a step)
    for (int st = 0; st < ns; st++) {
        const int slot = st % nr;
        {
            const unsigned bar = smem_u32(&full[slot]), par = (unsigned)(st / nr) & 1u;
            asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], "
                         "%1;\n @!p bra W;\n}" ::"r"(bar),
                         "r"(par)
                         : "memory");
        }
        const uint8_t *ks = ats_smem + (size_t)slot * 2 * SB, *vs = ks + SB;
        const int a = st * P; // the stage's first row in the chunk
        float s[U][GM];
        uint4 vr[U];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int r = warp * (2 * U) + 2 * u + sub;
            ok[u] = a + r < len;
            uint4 kr = make_uint4(0, 0, 0, 0);
            vr[u] = kr;
            if (ok[u]) {
                kr = *reinterpret_cast<const uint4 *>(ks + r * ROWB + c * 16);
                vr[u] = *reinterpret_cast<const uint4 *>(vs + r * ROWB + c * 16);
            }
            att_score<GM, LG>(s[u], kr, qv, ok[u]);
        }
        att_update<U, GM>(m, l, o, s, vr);
        __syncthreads(); // every warp is done with the slot
        if (tid == 0 && st + nr < ns) issue(st + nr);
    }

    // the two rows of a warp step (lanes c and c + 16), then the warps, in order, through
    // shared memory (the ring is free: every copy issued has been waited for)
    att_merge_lanes<GM, LG>(m, l, o);
    float *sm_m = reinterpret_cast<float *>(ats_smem); // [warp][GM]
    float *sm_l = sm_m + ATS_WARPS * GM;               // [warp][GM]
    float *sm_o = sm_l + ATS_WARPS * GM;               // [warp][GM][HD]
    if (sub == 0) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (lane == 0) {
                sm_m[warp * GM + g] = m[g];
                sm_l[warp * GM + g] = l[g];
            }
#pragma unroll
            for (int j = 0; j < 8; j++) sm_o[(warp * GM + g) * HD + c * 8 + j] = o[g][j];
        }
    }
    __syncthreads();
    float *wml = ws, *wo = ws + ws_out_offset(hq, nsplit);
    for (int i = tid; i < gb * HD; i += ATS_THREADS) {
        const int g = i / HD, d = i - g * HD, h = h0 + g;
        float M = -INFINITY, L = 0.0f, O = 0.0f;
        for (int w = 0; w < ATS_WARPS; w++) M = fmaxf(M, sm_m[w * GM + g]);
        for (int w = 0; w < ATS_WARPS; w++) {
            if (sm_m[w * GM + g] == -INFINITY) continue;
            const float sc = exp2f(sm_m[w * GM + g] - M);
            L = fmaf(sm_l[w * GM + g], sc, L);
            O = fmaf(sm_o[(w * GM + g) * HD + d], sc, O);
        }
        if (live == 1) {
            out[(size_t)h * HD + d] = O / L;
        } else {
            const size_t sl = (size_t)h * nsplit + blockIdx.x;
            wo[sl * HD + d] = O;
            if (d == 0) {
                wml[sl * 2] = M;
                wml[sl * 2 + 1] = L;
            }
        }
    }
    if (live == 1) return;

    // the chunk that completes the count of live chunks merges them all, in chunk order (sm_o is
    // read no more: their (max, sum) pairs, then L per q head)
    int *count = reinterpret_cast<int *>(ws + ws_counter_offset(hq, HD, nsplit)) + kvh;
    if (!att_last_chunk(count, live, &sm_last)) return;
    att_ws_merge<ATS_WARPS, ATS_THREADS, 16>(out, ws, hq, HD, nsplit, h0, gb, live, sm_o,
                                             sm_o + 2 * GM * live, 1);
#else
    (void)out, (void)ws, (void)q, (void)kcache, (void)vcache, (void)pos, (void)hq, (void)group;
    (void)max_ctx, (void)nsplit, (void)fresh, (void)qscale, (void)pre_most, (void)nr;
#endif
}

#define PF_BQ      32
#define PF_BK      64
#define PF_THREADS 128

template <int HD> static size_t prefill_smem()
{
    return sizeof(float) * ((size_t)HD * (PF_BQ + 4) + (size_t)HD * (PF_BK + 4) +
                            (size_t)PF_BK * HD + (size_t)PF_BQ * (PF_BK + 4));
}

template <int HD>
static __global__ void __launch_bounds__(PF_THREADS)
    attn_prefill_kernel(float *__restrict__ out, const float *__restrict__ q, int q_stride,
                        const uint16_t *__restrict__ kcache, const uint16_t *__restrict__ vcache,
                        int pos0, int T, int hq, int group, int max_ctx, float qscale)
{
    constexpr int QS = PF_BQ + 4, KS = PF_BK + 4, PS = PF_BK + 4, CG = HD / 64;
    extern __shared__ float4 pf_smem4[];
    float *Qt = reinterpret_cast<float *>(pf_smem4); // [HD][QS], pre-scaled
    float *Kt = Qt + HD * QS;                        // [HD][KS]
    float *Vs = Kt + HD * KS;                        // [BK][HD]
    float *Ps = Vs + PF_BK * HD;                     // [BQ][PS]

    pdl_launch_dependents();
    pdl_wait();
    const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int t0 = blockIdx.x * PF_BQ, h = blockIdx.y, kvh = h / group;
    const int n_keys = pos0 + min(T, t0 + PF_BQ); // keys [0, n_keys) are visible to the block
    const uint16_t *K = kcache + (size_t)kvh * max_ctx * HD;
    const uint16_t *V = vcache + (size_t)kvh * max_ctx * HD;

    for (int i = tid; i < PF_BQ * HD; i += PF_THREADS) {
        int r = i / HD, d = i - r * HD, t = t0 + r;
        Qt[d * QS + r] = t < T ? q[(size_t)t * q_stride + (size_t)h * HD + d] * qscale : 0.0f;
    }

    float m[4], l[4], o[4][CG][4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int cg = 0; cg < CG; cg++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[i][cg][e] = 0.0f;
    }

    for (int k0 = 0; k0 < n_keys; k0 += PF_BK) {
        __syncthreads(); // the previous tile is no longer read (and Qt is written, first time)
        // K transposed: consecutive threads take consecutive keys (conflict-free stores)
        for (int i = tid; i < PF_BK * (HD / 8); i += PF_THREADS) {
            int c = i % PF_BK, d8 = i / PF_BK, p = k0 + c;
            uint4 w = p < n_keys ? *reinterpret_cast<const uint4 *>(K + (size_t)p * HD + d8 * 8)
                                 : make_uint4(0, 0, 0, 0);
            float f[8];
            unpack8(w, f);
#pragma unroll
            for (int j = 0; j < 8; j++) Kt[(d8 * 8 + j) * KS + c] = f[j];
        }
        // V row-major: consecutive threads take consecutive dimensions
        for (int i = tid; i < PF_BK * (HD / 8); i += PF_THREADS) {
            int d8 = i % (HD / 8), c = i / (HD / 8), p = k0 + c;
            uint4 w = p < n_keys ? *reinterpret_cast<const uint4 *>(V + (size_t)p * HD + d8 * 8)
                                 : make_uint4(0, 0, 0, 0);
            float f[8];
            unpack8(w, f);
            float4 *dst = reinterpret_cast<float4 *>(Vs + c * HD + d8 * 8);
            dst[0] = make_float4(f[0], f[1], f[2], f[3]);
            dst[1] = make_float4(f[4], f[5], f[6], f[7]);
        }
        __syncthreads();

        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < HD; d++) {
            float4 a = *reinterpret_cast<const float4 *>(Qt + d * QS + ty * 4);
            float4 b = *reinterpret_cast<const float4 *>(Kt + d * KS + tx * 4);
            float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
        }

#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int qp = pos0 + t0 + ty * 4 + i;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int kp = k0 + tx * 4 + j;
                if (kp > qp || kp >= n_keys) s[i][j] = -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float mn = fmaxf(m[i], mx);
            float alpha = 1.0f, sum = 0.0f;
            if (mn != -INFINITY) {
                alpha = exp2f(m[i] - mn);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    s[i][j] = exp2f(s[i][j] - mn);
                    sum += s[i][j];
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l[i] = l[i] * alpha + sum;
            m[i] = mn;
#pragma unroll
            for (int cg = 0; cg < CG; cg++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[i][cg][e] *= alpha;
            *reinterpret_cast<float4 *>(Ps + (ty * 4 + i) * PS + tx * 4) =
                make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
        }
        __syncthreads();

#pragma unroll 4
        for (int c = 0; c < PF_BK; c++) {
            float pr[4];
#pragma unroll
            for (int i = 0; i < 4; i++) pr[i] = Ps[(ty * 4 + i) * PS + c];
#pragma unroll
            for (int cg = 0; cg < CG; cg++) {
                float4 v = *reinterpret_cast<const float4 *>(Vs + c * HD + cg * 64 + tx * 4);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    o[i][cg][0] = fmaf(pr[i], v.x, o[i][cg][0]);
                    o[i][cg][1] = fmaf(pr[i], v.y, o[i][cg][1]);
                    o[i][cg][2] = fmaf(pr[i], v.z, o[i][cg][2]);
                    o[i][cg][3] = fmaf(pr[i], v.w, o[i][cg][3]);
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int t = t0 + ty * 4 + i;
        if (t >= T) continue;
        const float inv = 1.0f / l[i];
        float *dst = out + ((size_t)t * hq + h) * HD;
#pragma unroll
        for (int cg = 0; cg < CG; cg++)
            *reinterpret_cast<float4 *>(dst + cg * 64 + tx * 4) = make_float4(
                o[i][cg][0] * inv, o[i][cg][1] * inv, o[i][cg][2] * inv, o[i][cg][3] * inv);
    }
}

// Prefill on tensor cores (hd 64 and 128, the default; LOCKSTEP_ATT_PREFILL_TC=0 or
// ls_attention_set_prefill_tc(0): the fp32 kernel above). FlashAttention-2's loop: W warps of 16
// rows each, a row being (q head, query); the block's q rows, scaled and rounded to bf16, stay in
// registers as mma fragments; per 64-key tile of K and V (bf16, as cached, in shared memory with
// rows padded by 16 bytes so ldmatrix hits distinct banks) each warp forms its 16 x 64 scores
// with mma.sync m16n8k16 (fp32 accumulation), masks the keys past each query (only on the tiles
// that reach past the warp's first query), updates its rows' running max and sum, rounds the
// probabilities to bf16 in the registers the scores came in (the accumulator layout of two
// n-tiles is the A-operand layout of one k-step) and adds P V into its 16 x hd fp32 output. A
// warp skips the tiles past its last query. Rounding q and p to bf16 (as FlashAttention does) is
// the only difference from the fp32 kernel: ~2^-9 relative per product. Blocks of later queries
// (more keys) are launched first. The forms (ls_attention_set_prefill_tc): 1, 4 warps of one q
// head, 64 queries (two blocks a SM at hd 128); 2, 8 warps over the G q heads of one KV head (G
// the largest of 8, 4, 2, 1 dividing the group), 128 / G queries each, so that one copy of a K
// and V tile serves 128 rows (half the L2 traffic per product of form 1); 3, 8 warps of one q
// head, 128 queries; 4, 4 warps of two row tiles each (32 rows a warp, over up to 4 q heads of a
// KV head as in form 2, two blocks a SM), so that each K and V fragment a warp reads from shared
// memory feeds two products (255 registers, a few bytes spilled; the softmax over 32 keys at a
// time instead fitted without spills and ran ~6% slower, and was removed); 5, as 4 with one row
// tile a warp (16 queries of 4 q heads a block: twice form 4's blocks, for short chunks, where
// form 4's grid leaves SMs idle: 32 blocks at the 8B's 128 positions); 6, 2 warps of one row tile
// over up to 2 q heads (32 rows a block: four times form 4's blocks). The default
// (LS_PREFILL_TC_AUTO) is the wgmma kernel (form 7, attention_sm90.cu) on Hopper where its grid
// has a block for every other SM (ls_attention_prefill); else, at hd 128, form 4 where its grid
// has a block for every SM (~20% ahead of forms 1-3 at 8192 positions and at 1024 after 15360,
// at the 8B's and the 70B's TP=2 shapes; twenty-first session, BENCHMARKS.md), else form 5 or 6
// (prefill_tc_auto), and form 2 at hd 64 (SmolLM2's 2048 positions: 0.049 ms against
// 0.051-0.056 for form 1 and 0.066 for form 4).
#define TC_BK 64

// q (rows x (HD + 8)), then K and V twice (the next tile's copies run while this one's products
// do)
template <int HD> static constexpr size_t prefill_tc_smem(int rows)
{
    return sizeof(uint16_t) * (size_t)(rows + 4 * TC_BK) * (HD + 8);
}

// 16 bytes from global to shared memory without the registers (zeros when !valid)
static __device__ __forceinline__ void cp_async16(uint16_t *dst, const uint16_t *src, bool valid)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(a), "l"(src),
                 "r"(valid ? 16 : 0));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}

static __device__ __forceinline__ void ldsm_x4(uint32_t *r, const uint16_t *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

static __device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const uint16_t *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// c += a b: a 16 x 16 bf16 (row), b 16 x 8 bf16 (col), c 16 x 8 fp32
static __device__ __forceinline__ void mma_bf16(float *c, const uint32_t *a, uint32_t b0,
                                                uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One key tile of the tensor-core prefill for a warp's M row tiles: the scores by mma.sync (q
// from qf, or through q_frag from shared memory), the mask where the tile reaches past the
// warp's first query or the block's keys, the online softmax, and P V into o.
template <int HD, int M, bool QREG, typename QF>
static __device__ __forceinline__ void
tc_tile(float (&o)[M][HD / 8][4], float *mr, float *lr, const uint32_t (*qf)[4], QF q_frag,
        const uint16_t *Ks, const uint16_t *Vs, int k0, int wq0, int n_keys, int lane)
{
    constexpr int LD = HD + 8, KK = HD / 16, NT = HD / 8, NJ = TC_BK / 8;
    float s[M][NJ][4];
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int j = 0; j < NJ; j++) s[m][j][0] = s[m][j][1] = s[m][j][2] = s[m][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KK; kk++) {
        uint32_t qa[M][4];
#pragma unroll
        for (int m = 0; m < M; m++)
            if constexpr (QREG)
                qa[m][0] = qf[kk][0], qa[m][1] = qf[kk][1], qa[m][2] = qf[kk][2],
                qa[m][3] = qf[kk][3];
            else
                q_frag(qa[m], m, kk);
#pragma unroll
        for (int j = 0; j < NJ; j += 2) {
            uint32_t b[4];
            ldsm_x4(b, Ks + (j * 8 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 +
                           ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int m = 0; m < M; m++) {
                mma_bf16(s[m][j], qa[m], b[0], b[1]);
                mma_bf16(s[m][j + 1], qa[m], b[2], b[3]);
            }
        }
    }

    // keys past a query (or past the block's last) masked, where the tile reaches them
    if (k0 + TC_BK - 1 > wq0 || k0 + TC_BK > n_keys)
#pragma unroll
        for (int m = 0; m < M; m++) {
            const int qp0 = wq0 + m * 16 + (lane >> 2), qp1 = qp0 + 8;
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int kp = k0 + j * 8 + (lane & 3) * 2 + e;
                    if (kp > qp0 || kp >= n_keys) s[m][j][e] = -INFINITY;
                    if (kp > qp1 || kp >= n_keys) s[m][j][2 + e] = -INFINITY;
                }
        }
    uint32_t pf[M][TC_BK / 16][4];
#pragma unroll
    for (int m = 0; m < M; m++) {
        // the running max and sum of rows 2m and 2m + 1
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            mx0 = fmaxf(mx0, fmaxf(s[m][j][0], s[m][j][1]));
            mx1 = fmaxf(mx1, fmaxf(s[m][j][2], s[m][j][3]));
        }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        // key 0 is visible to every row, so after the first tile both maxima are finite
        const float n0 = fmaxf(mr[2 * m], mx0), n1 = fmaxf(mr[2 * m + 1], mx1);
        const float a0 = exp2f(mr[2 * m] - n0), a1 = exp2f(mr[2 * m + 1] - n1);
        mr[2 * m] = n0, mr[2 * m + 1] = n1;
        float l0 = lr[2 * m] * a0, l1 = lr[2 * m + 1] * a1;
#pragma unroll
        for (int n = 0; n < NT; n++)
            o[m][n][0] *= a0, o[m][n][1] *= a0, o[m][n][2] *= a1, o[m][n][3] *= a1;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const float p0 = exp2f(s[m][j][0] - n0), p1 = exp2f(s[m][j][1] - n0);
            const float p2 = exp2f(s[m][j][2] - n1), p3 = exp2f(s[m][j][3] - n1);
            l0 += p0 + p1, l1 += p2 + p3;
            pf[m][j >> 1][(j & 1) * 2] = pack_bf16(p0, p1);
            pf[m][j >> 1][(j & 1) * 2 + 1] = pack_bf16(p2, p3);
        }
        lr[2 * m] = l0, lr[2 * m + 1] = l1;
    }
#pragma unroll
    for (int kk = 0; kk < TC_BK / 16; kk++)
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t b[4];
            ldsm_x4_t(b, Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n * 8 +
                             (lane >> 4) * 8);
#pragma unroll
            for (int m = 0; m < M; m++) {
                mma_bf16(o[m][n], pf[m][kk], b[0], b[1]);
                mma_bf16(o[m][n + 1], pf[m][kk], b[2], b[3]);
            }
        }
}

template <int HD, int W, int G, int M>
static __global__ void __launch_bounds__(W * 32, M == 2 ? 2 : 1)
    attn_prefill_tc_kernel(float *__restrict__ out, const float *__restrict__ q, int q_stride,
                           const uint16_t *__restrict__ kcache, const uint16_t *__restrict__ vcache,
                           int pos0, int T, int hq, int group, int max_ctx, float qscale)
{
    // rows r of the block: q head h0 + r / BQ, query t0 + r % BQ; warp w holds rows
    // [WR w, WR (w + 1)) as M tiles of 16. One tile a warp keeps its q fragments in registers;
    // two read them from shared memory at each key tile (no room for them next to twice the
    // scores and outputs)
    constexpr int LD = HD + 8, KK = HD / 16, NT = HD / 8, WR = 16 * M, ROWS = WR * W, BQ = ROWS / G,
                  NTH = W * 32;
    constexpr bool QREG = M == 1;
    static_assert(BQ % WR == 0, "a warp's rows must share one q head");
    extern __shared__ uint4 tc_smem4[];
    uint16_t *Qs = reinterpret_cast<uint16_t *>(tc_smem4); // [ROWS][LD]
    uint16_t *KV = Qs + ROWS * LD;                         // [2][K, V][BK][LD]

    pdl_launch_dependents();
    pdl_wait();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int t0 = (gridDim.x - 1 - blockIdx.x) * BQ, h0 = blockIdx.y * G, kvh = h0 / group;
    const int n_keys = pos0 + min(T, t0 + BQ); // keys [0, n_keys) are visible to the block
    const uint16_t *K = kcache + (size_t)kvh * max_ctx * HD;
    const uint16_t *V = vcache + (size_t)kvh * max_ctx * HD;

    for (int i = tid; i < ROWS * HD / 4; i += NTH) {
        const int r = i / (HD / 4), c4 = i - r * (HD / 4), g = r / BQ, t = t0 + r - g * BQ;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t < T)
            v = *reinterpret_cast<const float4 *>(q + (size_t)t * q_stride + (size_t)(h0 + g) * HD +
                                                  c4 * 4);
        *reinterpret_cast<uint2 *>(Qs + r * LD + c4 * 4) = make_uint2(
            pack_bf16(v.x * qscale, v.y * qscale), pack_bf16(v.z * qscale, v.w * qscale));
    }
    __syncthreads();
    // the A fragment of the warp's row tile m for inputs [16 kk, 16 kk + 16)
    auto q_frag = [&](uint32_t *r, int m, int kk) {
        ldsm_x4(r, Qs + (warp * WR + m * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
    };
    uint32_t qf[QREG ? KK : 1][4];
    if constexpr (QREG)
#pragma unroll
        for (int kk = 0; kk < KK; kk++) q_frag(qf[kk], 0, kk);

    // this thread's rows: r and r + 8 of each of the warp's tiles (row 2m + i: query position
    // wq0 + 16 m + 8 i + lane / 4); their running max and sum (the sum of this thread's columns
    // only: the quad adds its four at the end). The warp's q head h, its queries from wq0.
    const int h = h0 + warp * WR / BQ, tw = t0 + warp * WR % BQ, wq0 = pos0 + tw;
    float mr[2 * M], lr[2 * M];
    float o[M][NT][4];
#pragma unroll
    for (int i = 0; i < 2 * M; i++) mr[i] = -INFINITY, lr[i] = 0.0f;
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int n = 0; n < NT; n++) o[m][n][0] = o[m][n][1] = o[m][n][2] = o[m][n][3] = 0.0f;

    // the K and V rows of keys [k0, k0 + BK) into buffer `into` (zeros past n_keys), one group
    auto fetch = [&](int k0, int into) {
        uint16_t *Kb = KV + into * 2 * TC_BK * LD, *Vb = Kb + TC_BK * LD;
        for (int i = tid; i < TC_BK * HD / 8; i += NTH) {
            const int r = i / (HD / 8), c8 = i - r * (HD / 8), p = k0 + r;
            const size_t g = (size_t)min(p, n_keys - 1) * HD + c8 * 8;
            cp_async16(Kb + r * LD + c8 * 8, K + g, p < n_keys);
            cp_async16(Vb + r * LD + c8 * 8, V + g, p < n_keys);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    fetch(0, 0);
    for (int k0 = 0, buf = 0; k0 < n_keys; k0 += TC_BK, buf ^= 1) {
        // the next tile's copies go into the other buffer, which every warp finished reading at
        // the end of the last iteration; then wait for this tile's (an empty group past the end)
        if (k0 + TC_BK < n_keys)
            fetch(k0 + TC_BK, buf ^ 1);
        else
            asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads();
        const uint16_t *Ks = KV + buf * 2 * TC_BK * LD, *Vs = Ks + TC_BK * LD;
        if (k0 < wq0 + WR) // some key of the tile is visible to some row of the warp
            tc_tile<HD, M, QREG>(o, mr, lr, qf, q_frag, Ks, Vs, k0, wq0, n_keys, lane);
        __syncthreads(); // this buffer is free for the copies two tiles on
    }

#pragma unroll
    for (int m = 0; m < M; m++) {
        float l0 = lr[2 * m], l1 = lr[2 * m + 1];
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            l0 += __shfl_xor_sync(0xffffffffu, l0, off);
            l1 += __shfl_xor_sync(0xffffffffu, l1, off);
        }
        const int ta = tw + m * 16 + (lane >> 2), tb = ta + 8;
        const float i0 = 1.0f / l0, i1 = 1.0f / l1;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int d = n * 8 + (lane & 3) * 2;
            if (ta < T)
                *reinterpret_cast<float2 *>(out + ((size_t)ta * hq + h) * HD + d) =
                    make_float2(o[m][n][0] * i0, o[m][n][1] * i0);
            if (tb < T)
                *reinterpret_cast<float2 *>(out + ((size_t)tb * hq + h) * HD + d) =
                    make_float2(o[m][n][2] * i1, o[m][n][3] * i1);
        }
    }
}

// The decode split's shape, read from the environment once (so that the split count and the
// kernels agree): positions per chunk at least ATT_MIN_CHUNK, or LOCKSTEP_ATT_CHUNK (8 .. 4096)
// for experiments; LOCKSTEP_ATT_WIDE=0|1 forces the kernel's short-context (wide-iteration) form
// off or on (-1, the default: by the cache length); ls_attention_set_decode_shape overrides
// both. LOCKSTEP_ATT_CLUSTER=0 turns the cluster merge off (ls_attention_set_cluster).
// LOCKSTEP_ATT_HEADS=1|2|4|8: at most that many q heads a block (0, the default: by the
// launch's size, heads_per_block; ls_attention_set_heads). LOCKSTEP_ATT_MERGE4=0|1: the
// workspace merge's loads one element at a time or four (default: four where a block's q heads
// give every thread four elements). LOCKSTEP_ATT_SPLIT_SM=N (1 .. 16): the split aims at ~N
// blocks a SM with the most heads a block (default 4; ls_attention_decode_splits), for
// experiments with more heads a block and shorter chunks at long contexts. LOCKSTEP_ATT_BULK=1:
// launches with clusters = 0 take the streamed form too (ls_attention_set_bulk);
// LOCKSTEP_ATT_BULK_PRE=0..6: the stages a block of the streamed form issues before its PDL wait
// at most (default 1: in the step after a 16384-token prompt 4.568 ms a token against 4.586 with
// none and 4.589 with all six, after 4096 4.113 / 4.129 / 4.132; the register kernel 4.646 and
// 4.108). LOCKSTEP_ATT_BULK_RING=1..6: the ring's stages (default 2; the dynamic shared memory
// the launch takes shrinks with it); LOCKSTEP_ATT_BULK_STAGE=32|64: positions a stage (64). In
// the step (8B TP=1, forty-first session, ms a token) the ring's shared memory is what cost:
// after an 8192-token prompt rings of 6, 4, 3, 2 and 1 stages 4.384, 4.328, 4.307, 4.289 and
// 4.543 (the register kernel 4.284), after 16384 6 4.705, 2 4.633, 1 4.983; stages of 32
// positions lost at every ring (after 4096: 2 x 32 4.286 against 2 x 64 4.144).
static struct {
    int read, min_chunk, wide, cluster, heads, merge4, per_sm, bulk, bulk_pre, bulk_ring,
        bulk_stage;
} g_shape = {0, ATT_MIN_CHUNK, -1, 1, 0, -1, 4, 0, 1, ATS_RING, ATS_P};

static void shape_from_env(void)
{
    if (g_shape.read) return;
    g_shape.read = 1;
    const char *e = getenv("LOCKSTEP_ATT_CHUNK");
    const int v = e ? atoi(e) : 0;
    if (v >= 8 && v <= 4096) g_shape.min_chunk = v;
    const char *w = getenv("LOCKSTEP_ATT_WIDE");
    if (w && (w[0] == '0' || w[0] == '1') && !w[1]) g_shape.wide = w[0] - '0';
    const char *cl = getenv("LOCKSTEP_ATT_CLUSTER");
    if (cl && (cl[0] == '0' || cl[0] == '1') && !cl[1]) g_shape.cluster = cl[0] - '0';
    const char *hp = getenv("LOCKSTEP_ATT_HEADS");
    if (hp && (hp[0] == '1' || hp[0] == '2' || hp[0] == '4' || hp[0] == '8') && !hp[1])
        g_shape.heads = hp[0] - '0';
    const char *m4 = getenv("LOCKSTEP_ATT_MERGE4");
    if (m4 && (m4[0] == '0' || m4[0] == '1') && !m4[1]) g_shape.merge4 = m4[0] - '0';
    const char *ps = getenv("LOCKSTEP_ATT_SPLIT_SM");
    const int pv = ps ? atoi(ps) : 0;
    if (pv >= 1 && pv <= 16) g_shape.per_sm = pv;
    const char *bk = getenv("LOCKSTEP_ATT_BULK");
    if (bk && !strcmp(bk, "1")) g_shape.bulk = 1;
    const char *bp = getenv("LOCKSTEP_ATT_BULK_PRE");
    if (bp && bp[0] >= '0' && bp[0] <= '0' + ATS_NS && !bp[1]) g_shape.bulk_pre = bp[0] - '0';
    const char *br = getenv("LOCKSTEP_ATT_BULK_RING");
    if (br && br[0] >= '1' && br[0] <= '0' + ATS_NS && !br[1]) g_shape.bulk_ring = br[0] - '0';
    const char *bs = getenv("LOCKSTEP_ATT_BULK_STAGE");
    if (bs && (!strcmp(bs, "32") || !strcmp(bs, "64"))) g_shape.bulk_stage = atoi(bs);
}

// The most q heads a block holds for a group (a kernel form: 1, 2, 4 or 8), and half that
// where it is a form measured to gain (8 -> 4, 4 -> 2; 2 -> 1 not), else 0.
static int most_heads(int group)
{
    return group >= 5 ? 8 : group >= 3 ? 4 : group;
}

static int half_heads(int group)
{
    const int half = most_heads(group) / 2;
    return half >= 2 ? half : 0;
}

// block rows of the split: each KV head's group of q heads, gm a block
static int block_rows(int group, int hkv, int gm)
{
    return hkv * ((group + gm - 1) / gm);
}

// q heads held per decode block (a kernel form: 1, 2, 4 or 8) for groups of `group` q heads
// on hkv KV heads, split in nsplit chunks, over a cache whose K and V take kv_bytes for this
// launch's KV heads. One a block while that fits in half the L2: each q head of a group then
// reads its KV head's rows from L2 after the first, and the split runs on `group` times the
// block rows with the shortest chains. Measured (eighteenth session, nvidia-h200-x4, ms a
// token, the former default against one head a block): 8B at the bench's caches (384), against
// 2 a block, TP=1 3.883 / 3.866, TP=2 2.470 / 2.445, TP=4 1.781 / 1.754; with a 4096 cache at
// contexts up to 384 TP=1 3.921 / 3.860, TP=2 2.588 / 2.454, TP=4 1.895 / 1.791; at a
// 4352-position cache and context 4096 TP=1 4.386 / 4.263, TP=4 2.117 (2 a block) / 1.999, TP=2
// 2.755 (2 a block) / 2.771 (the one case behind, by 0.6%); 70B TP=2 at 256 17.312 / 17.076, at
// 4352 20.265 / 18.391 (2 a block 18.393). Past half the L2 (not measured: 8B TP=1 from ~6000-7000
// positions) the most a block can hold (up to 8), or half that where half still gives at most one
// block per SM with every chunk live (seventeenth session, caches of 256-384: 70B TP=2 -0.29 ms a
// token, 8B -0.06). The launch without clusters (the engine's long-context form: contexts past
// ~2400 positions at 32 q heads a rank, ~4900 at 16; cu_decode_form) holds up to 4 a block at any
// cache: there one q head a block reads each K/V row `group` times through the L2 (at the 8B
// TP=1 shape and context 4096, 67 MB a layer for 16.8 MB from HBM), and 8 a block (the group of
// 8 of the 70B at TP=2) leaves too few blocks. Measured (thirty-third session, one H200, alone,
// without clusters, us, one head a block / 4): 8B TP=1 shape at 4096 of 4224 20.06 / 17.36;
// 70B TP=2 shape 19.99 / 16.58, and at 16384 58.75 (8 a block, the rule above) / 41.94; in the
// step at TP=1 after a 4096-token prompt 4.325 / 4.313 ms a token against 4.188 / 4.196. At
// most g_shape.heads when it is set (ls_attention_set_heads).
static int heads_per_block(int group, int hkv, int nsplit, long kv_bytes, bool long_form)
{
    shape_from_env();
    const int gm = most_heads(group), cap = g_shape.heads;
    if (cap) return gm <= cap ? gm : cap;
    if (long_form) return gm < 4 ? gm : 4;
    const ls_device d = ls_device_get();
    if (2 * kv_bytes <= d.l2) return 1;
    const int half = half_heads(group);
    if (!half) return gm;
    return (long)nsplit * block_rows(group, hkv, half) <= d.sms ? half : gm;
}

// a setter's common part: the switches read first (so that a later first read does not undo
// the value), the field set, its old value returned
static int shape_set(int *field, int value)
{
    shape_from_env();
    const int old = *field;
    *field = value;
    return old;
}

extern "C" int ls_attention_set_cluster(int on)
{
    return shape_set(&g_shape.cluster, on != 0);
}

extern "C" int ls_attention_set_heads(int heads)
{
    if (heads != 0 && heads != 1 && heads != 2 && heads != 4 && heads != 8)
        ls_die(__FILE__, __LINE__, "ls_attention_set_heads", "expected heads 0, 1, 2, 4 or 8");
    return shape_set(&g_shape.heads, heads);
}

static int min_chunk(void)
{
    shape_from_env();
    return g_shape.min_chunk;
}

extern "C" void ls_attention_set_decode_shape(int chunk, int wide, int *old_chunk, int *old_wide)
{
    shape_from_env();
    if (old_chunk) *old_chunk = g_shape.min_chunk;
    if (old_wide) *old_wide = g_shape.wide;
    g_shape.min_chunk = chunk >= 8 && chunk <= 4096 ? chunk : ATT_MIN_CHUNK;
    g_shape.wide = wide < 0 ? -1 : wide != 0;
}

// the longest context at which the short-context cluster merge applies (every live chunk in
// the first cluster), for the split ls_attention_decode_splits picks: with at most ATT_CLUSTER
// chunks every context; else up to ATT_CLUSTER chunks of the fewest positions (past nsplit
// chunks of min_chunk the chunks grow and nsplit of them are live)
extern "C" int ls_attention_cluster_reach(int hq, int hkv, int max_ctx)
{
    const int nsplit = ls_attention_decode_splits(hq, hkv, max_ctx);
    return nsplit <= ATT_CLUSTER ? max_ctx : ATT_CLUSTER * min_chunk();
}

extern "C" int ls_attention_decode_splits(int hq, int hkv, int max_ctx)
{
    if (hkv < 1 || hq < hkv || max_ctx < 1) return 1;
    // blocks a chunk, with the most heads a block (the split does not depend on
    // heads_per_block, which depends on it)
    const int blocks = block_rows(hq / hkv, hkv, ATT_MAX_G);
    shape_from_env();
    int want = (g_shape.per_sm * ls_device_get().sms + blocks - 1) / blocks; // ~per_sm a SM
    const int mc = min_chunk();
    int most = (max_ctx + mc - 1) / mc;
    if (most > ATT_MAX_SPLIT) most = ATT_MAX_SPLIT;
    return want < 1 ? 1 : want > most ? most : want;
}

// the counters must be zero when first used (the caller zeroes the allocation); every launch
// leaves them zero
extern "C" size_t ls_attention_decode_workspace(int hq, int hd, int nsplit)
{
    if (nsplit <= 1) return 0;
    return ws_counter_offset(hq, hd, nsplit) * sizeof(float) +
           (((size_t)hq * sizeof(int) + 15) & ~(size_t)15);
}

typedef void (*decode_fn)(float *, float *, const float *, const uint16_t *, const uint16_t *,
                          const int *, int, int, int, int, int, int, int, float, int, int);

// U = 8 positions per lane per iteration (one iteration per 64-position chunk at hd 128, but
// ~240 registers: 2 blocks per SM) for caches of up to ATT_WIDE_CTX positions, U = 2 (~130
// registers at 4 q heads: 4 blocks per SM) for longer ones, where occupancy hides the latency
// of the longer chunks better (measured: at context 1024, 11.0 vs 13.7 us; at 4096, 23.6 vs
// 21.7 us; at 32768, 81 vs 63 us)
#define ATT_WIDE_CTX 2048
template <int LG> static decode_fn pick_decode_g(int gm, bool wide)
{
    switch (gm) {
    case 1:
        return wide ? attn_decode_kernel<LG, 1, 8> : attn_decode_kernel<LG, 1, 2>;
    case 2:
        return wide ? attn_decode_kernel<LG, 2, 8> : attn_decode_kernel<LG, 2, 2>;
    case 4:
        return wide ? attn_decode_kernel<LG, 4, 8> : attn_decode_kernel<LG, 4, 2>;
    default:
        return wide ? attn_decode_kernel<LG, 8, 4> : attn_decode_kernel<LG, 8, 2>;
    }
}

// the short-context form for a cache of max_ctx positions
static bool wide_form(int max_ctx)
{
    shape_from_env();
    return g_shape.wide >= 0 ? g_shape.wide != 0 : max_ctx <= ATT_WIDE_CTX;
}

// the streamed long-context form (attn_decode_bulk_kernel): launches with clusters = 2, and
// with clusters = 0 too while g_shape.bulk
extern "C" int ls_attention_set_bulk(int on)
{
    return shape_set(&g_shape.bulk, on != 0);
}

extern "C" int ls_attention_set_bulk_ring(int stages)
{
    return shape_set(&g_shape.bulk_ring, stages < 1 ? 1 : stages > ATS_NS ? ATS_NS : stages);
}

extern "C" int ls_attention_set_bulk_stage(int positions)
{
    return shape_set(&g_shape.bulk_stage, positions == 32 ? 32 : ATS_P);
}

// where the streamed form can run: hd 128, a KV head's group in one block (up to 8 q heads), the
// bulk copies (sm_90 on) and the ring's shared memory
extern "C" int ls_attention_bulk_applies(int hq, int hkv, int hd)
{
    const ls_device d = ls_device_get();
    return hd == 128 && hkv >= 1 && hq % hkv == 0 && hq / hkv <= 8 && d.major >= 9 &&
           ATS_SMEM <= (size_t)d.smem_optin;
}

static void decode_bulk(float *out, const float *q, const uint16_t *kcache, const uint16_t *vcache,
                        const int *pos, int hq, int hkv, int max_ctx, int nsplit, int fresh,
                        float *workspace, cudaStream_t s)
{
    const int group = hq / hkv, gm = most_heads(group);
    shape_from_env();
    typedef void (*bulk_fn)(float *, float *, const float *, const uint16_t *, const uint16_t *,
                            const int *, int, int, int, int, int, float, int, int);
    const int p32 = g_shape.bulk_stage == 32, gi = gm == 1 ? 0 : gm == 2 ? 1 : gm == 4 ? 2 : 3;
    static const bulk_fn fns[2][4] = {
        {attn_decode_bulk_kernel<1, 64>, attn_decode_bulk_kernel<2, 64>,
         attn_decode_bulk_kernel<4, 64>, attn_decode_bulk_kernel<8, 64>},
        {attn_decode_bulk_kernel<1, 32>, attn_decode_bulk_kernel<2, 32>,
         attn_decode_bulk_kernel<4, 32>, attn_decode_bulk_kernel<8, 32>}};
    const bulk_fn fn = fns[p32][gi];
    ls_func_attr(reinterpret_cast<const void *>(fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                 (int)ATS_SMEM);
    // about one block a SM: chunks of whole stages, at most the workspace's nsplit
    const ls_device dev = ls_device_get();
    int nchunk = dev.sms / hkv;
    nchunk = nchunk < 1 ? 1 : nchunk > nsplit ? nsplit : nchunk;
    const float qscale = 1.0f / sqrtf(128.0f) * LOG2E;
    // the ring, or the warps' states the merge keeps there (kernels/bulk_shape.h)
    const int nr = g_shape.bulk_ring;
    const size_t smem = ls_bulk_smem(nr, g_shape.bulk_stage, gm, ATS_WARPS);
    // One block a SM, the rest of the SM's memory left to L1: the carveout that holds one block's
    // shared memory and its 1 KB reserve, rounded up to the next configuration the SM has, which
    // for every ring here is short of two blocks. Left to the driver, a kernel of 128 registers a
    // thread (two blocks fit by registers) got room for two blocks a SM, the blocks that start in
    // the QKV kernel's tail pairing up on the SMs that free first: 8B after a 2000-token prompt
    // 3.947 -> 4.038 ms a token, alone no slower (BENCHMARKS.md, forty-second session)
    ls_func_attr(reinterpret_cast<const void *>(fn), cudaFuncAttributePreferredSharedMemoryCarveout,
                 ls_bulk_carveout(smem, dev.smem_per_sm));
    pdl_launch(fn, dim3((unsigned)nchunk, (unsigned)hkv), ATS_THREADS, smem, s, out, workspace, q,
               kcache, vcache, pos, hq, group, max_ctx, nsplit, fresh, qscale, g_shape.bulk_pre,
               nr);
    CHECK_CUDA(cudaGetLastError());
}

// the register kernel's launch (defer: the chunks leave their partials in the workspace for the
// o GEMV, ls_attention_decode_partials)
static void decode_register(float *out, const float *q, const uint16_t *kcache,
                            const uint16_t *vcache, const int *pos, int hq, int hkv, int hd,
                            int max_ctx, int nsplit, int fresh, int clusters, float *workspace,
                            bool defer, cudaStream_t s);

extern "C" void ls_attention_decode(float *out, const float *q, const uint16_t *kcache,
                                    const uint16_t *vcache, const int *pos, int hq, int hkv, int hd,
                                    int max_ctx, int nsplit, int fresh, int clusters,
                                    float *workspace, void *stream)
{
    if (hd < 8 || hd % 8 || hd > 256 || hkv < 1 || hq < hkv || hq % hkv || max_ctx < 1 ||
        nsplit < 1 || nsplit > ATT_MAX_SPLIT || (nsplit > 1 && !workspace) || ((uintptr_t)q & 15) ||
        ((uintptr_t)out & 15) || ((uintptr_t)workspace & 15) || fresh < 0)
        ls_die(__FILE__, __LINE__, "ls_attention_decode",
               "expected hd % 8 == 0, hd <= 256, hq % hkv == 0, 1 <= nsplit <= 512, a "
               "workspace when nsplit > 1, q, out and the workspace on 16-byte boundaries and "
               "fresh >= 0");
    shape_from_env();
    if ((clusters == 2 || (!clusters && g_shape.bulk)) && nsplit > 1 &&
        ls_attention_bulk_applies(hq, hkv, hd)) {
        decode_bulk(out, q, kcache, vcache, pos, hq, hkv, max_ctx, nsplit, fresh, workspace,
                    (cudaStream_t)stream);
        return;
    }
    if (clusters == 2) clusters = 0; // where the streamed form does not apply
    decode_register(out, q, kcache, vcache, pos, hq, hkv, hd, max_ctx, nsplit, fresh, clusters,
                    workspace, false, (cudaStream_t)stream);
}

extern "C" int ls_attention_decode_partials(float *workspace, const float *q,
                                            const uint16_t *kcache, const uint16_t *vcache,
                                            const int *pos, int hq, int hkv, int hd, int max_ctx,
                                            int nsplit, void *stream)
{
    if (hd < 8 || hd % 8 || hd > 256 || hkv < 1 || hq < hkv || hq % hkv || max_ctx < 1 ||
        nsplit < 2 || nsplit > ATT_MAX_SPLIT || !workspace || ((uintptr_t)q & 15) ||
        ((uintptr_t)workspace & 15))
        return 0;
    decode_register(nullptr, q, kcache, vcache, pos, hq, hkv, hd, max_ctx, nsplit, 0, 1, workspace,
                    true, (cudaStream_t)stream);
    return 1;
}

extern "C" int ls_attention_min_chunk(void)
{
    return min_chunk();
}

static void decode_register(float *out, const float *q, const uint16_t *kcache,
                            const uint16_t *vcache, const int *pos, int hq, int hkv, int hd,
                            int max_ctx, int nsplit, int fresh, int clusters, float *workspace,
                            bool defer, cudaStream_t s)
{
    const int group = hq / hkv;
    const long kv_bytes = (long)hkv * max_ctx * hd * 2 * sizeof(uint16_t);
    const int gm = heads_per_block(group, hkv, nsplit, kv_bytes, !clusters); // q heads a block
    const int lanes = hd / 8, lg = lanes <= 8 ? 8 : lanes <= 16 ? 16 : 32;
    const int mc = min_chunk();
    const bool wide = wide_form(max_ctx);
    decode_fn fn = lg == 8    ? pick_decode_g<8>(gm, wide)
                   : lg == 16 ? pick_decode_g<16>(gm, wide)
                              : pick_decode_g<32>(gm, wide);
    // split: clusters of ATT_CLUSTER chunks (the grid rounded up to whole clusters; chunks past
    // nsplit lie past the context) unless turned off (g_shape is read: min_chunk above). defer:
    // no clusters, and merge4 -1 tells the chunks to leave once their partials are written
    const int merge4 = defer                 ? -1
                       : g_shape.merge4 >= 0 ? g_shape.merge4
                                             : gm * hd >= 4 * ATT_WARPS * 32;
    const int cluster =
        clusters && nsplit > 1 && g_shape.cluster && !defer && ls_device_get().clusters
            ? ATT_CLUSTER
            : 0;
    const int gx = cluster ? (nsplit + cluster - 1) / cluster * cluster : nsplit;
    dim3 grid((unsigned)gx, (unsigned)block_rows(group, hkv, gm));
    float qscale = 1.0f / sqrtf((float)hd) * LOG2E;
    pdl_launch_cluster(fn, grid, ATT_WARPS * 32, 0, s, (unsigned)cluster, out, workspace, q, kcache,
                       vcache, pos, hq, hd, group, max_ctx, nsplit, mc, fresh, qscale, cluster,
                       merge4);
    CHECK_CUDA(cudaGetLastError());
}

// a prefill kernel over blocks of bq (queries) x g (q heads), with the dynamic shared memory its
// form needs (each kernel's limit raised once)
template <int HD>
static void prefill_launch(void (*fn)(float *, const float *, int, const uint16_t *,
                                      const uint16_t *, int, int, int, int, int, float),
                           int threads, size_t smem, int bq, int g, float *out, const float *q,
                           int q_stride, const uint16_t *kcache, const uint16_t *vcache, int pos0,
                           int T, int hq, int group, int max_ctx, cudaStream_t s)
{
    const void *f = reinterpret_cast<const void *>(fn);
    ls_func_attr(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    ls_func_attr(f, cudaFuncAttributePreferredSharedMemoryCarveout,
                 (int)cudaSharedmemCarveoutMaxShared);
    dim3 grid((unsigned)((T + bq - 1) / bq), (unsigned)(hq / g));
    float qscale = 1.0f / sqrtf((float)HD) * LOG2E;
    // a plain launch with the max-shared carveout: with PDL the blocks could take SMs while the
    // previous kernel's still run, in that kernel's carveout, which may hold one block of a
    // two-block form where two fit. A precaution, not a measured gain: against PDL, form 2 (one
    // block a SM) measured the same (twenty-first session, call 3); a two-block form was not
    // compared.
    fn<<<grid, threads, smem, s>>>(out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx,
                                   qscale);
    CHECK_CUDA(cudaGetLastError());
}

// the tensor-core kernel with W warps of M row tiles, over G q heads of a KV head
template <int HD, int W, int G, int M>
static void prefill_tc_form(float *out, const float *q, int q_stride, const uint16_t *kcache,
                            const uint16_t *vcache, int pos0, int T, int hq, int group, int max_ctx,
                            cudaStream_t s)
{
    constexpr int rows = 16 * M * W;
    prefill_launch<HD>(attn_prefill_tc_kernel<HD, W, G, M>, W * 32, prefill_tc_smem<HD>(rows),
                       rows / G, G, out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx,
                       s);
}

// the tensor-core kernel's form (see it), 1 to 6
template <int HD>
static void prefill_tc_launch(int form, float *out, const float *q, int q_stride,
                              const uint16_t *kcache, const uint16_t *vcache, int pos0, int T,
                              int hq, int group, int max_ctx, cudaStream_t s)
{
    // the q heads of one KV head a block holds (forms 2 and 4): the most of 8 (4) dividing
    // the group
    const int most = form == 2 ? 8 : form == 4 || form == 5 ? 4 : form == 6 ? 2 : 1;
    int g = 1;
    while (g < most && group % (2 * g) == 0) g *= 2;
#define LS_TC_FORM(W, G, M)                                                                        \
    prefill_tc_form<HD, W, G, M>(out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx, s)
    if (form == 1)
        LS_TC_FORM(4, 1, 1);
    else if (form == 4)
        g == 4 ? LS_TC_FORM(4, 4, 2) : g == 2 ? LS_TC_FORM(4, 2, 2) : LS_TC_FORM(4, 1, 2);
    else if (form == 5)
        g == 4 ? LS_TC_FORM(4, 4, 1) : g == 2 ? LS_TC_FORM(4, 2, 1) : LS_TC_FORM(4, 1, 1);
    else if (form == 6)
        g == 2 ? LS_TC_FORM(2, 2, 1) : LS_TC_FORM(2, 1, 1);
    else if (g == 8)
        LS_TC_FORM(8, 8, 1);
    else if (g == 4)
        LS_TC_FORM(8, 4, 1);
    else if (g == 2)
        LS_TC_FORM(8, 2, 1);
    else
        LS_TC_FORM(8, 1, 1);
#undef LS_TC_FORM
}

// hd 128's default form for a chunk of T queries: the first of forms 4, 5 and 6 (128, 64 and 32
// rows a block) whose grid has a block for every SM; form 6 when none has. Form 4's two row
// tiles a warp are the fastest where its grid fills the device (1024-query chunks of the 8B); a
// short chunk has too few of its blocks (32 at the 8B's 128 queries) and wants smaller ones
static int prefill_tc_auto(int T, int hq, int group)
{
    const int sms = ls_device_get().sms;
    const int forms[3][3] = {{4, 128, 4}, {5, 64, 4}, {6, 32, 2}}; // form, rows, most q heads
    for (const auto &f : forms) {
        int g = 1;
        while (g < f[2] && group % (2 * g) == 0) g *= 2;
        const int bq = f[1] / g;
        if ((long long)(T + bq - 1) / bq * (hq / g) >= sms) return f[0];
    }
    return 6;
}

static int g_prefill_tc = -1; // -1: LOCKSTEP_ATT_PREFILL_TC not read yet

extern "C" int ls_attention_set_prefill_tc(int on)
{
    if (g_prefill_tc < 0) {
        const char *e = getenv("LOCKSTEP_ATT_PREFILL_TC");
        // as the decode's switches: a value other than 0 to 7 leaves the default
        g_prefill_tc = e && e[0] >= '0' && e[0] <= '7' && !e[1] ? e[0] - '0' : LS_PREFILL_TC_AUTO;
    }
    const int old = g_prefill_tc;
    if (on >= 0) g_prefill_tc = on > 7 ? LS_PREFILL_TC_AUTO : on;
    return old;
}

extern "C" void ls_attention_prefill(float *out, const float *q, int q_stride,
                                     const uint16_t *kcache, const uint16_t *vcache, int pos0,
                                     int T, int hq, int hkv, int hd, int max_ctx, void *stream)
{
    if ((hd != 64 && hd != 128 && hd != 256) || hkv < 1 || hq < hkv || hq % hkv || pos0 < 0 ||
        T < 0 || (long long)pos0 + T > max_ctx)
        ls_die(__FILE__, __LINE__, "ls_attention_prefill",
               "expected hd in {64, 128, 256}, hq % hkv == 0 and pos0 + T <= max_ctx");
    if (T == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    const int group = hq / hkv;
    // the tensor-core kernel reads q with 16-byte loads
    // the wgmma kernel (form 7) by default where its grid has a block for every other SM: ahead
    // of every mma.sync form from 512 queries of the 8B (0.021 against 0.028 ms; at 8192, 1.37
    // against 1.70), even at 256 and behind at 128 (0.013 against 0.011), where the mma.sync
    // forms' smaller blocks fill more SMs (thirty-ninth session, BENCHMARKS.md)
    int tc = ls_attention_set_prefill_tc(-1);
    if (tc == 7 || tc == LS_PREFILL_TC_AUTO) {
        const int min_blocks = tc == 7 ? 0 : (ls_device_get().sms + 1) / 2;
        if (ls_attention_prefill_wgmma(out, q, q_stride, kcache, vcache, pos0, T, hq, hkv, hd,
                                       max_ctx, min_blocks, stream))
            return;
        tc = LS_PREFILL_TC_AUTO;
    }
    if (tc == LS_PREFILL_TC_AUTO) tc = hd == 128 ? prefill_tc_auto(T, hq, group) : 2;
    if (tc && (hd == 64 || hd == 128) && q_stride % 4 == 0 && (uintptr_t)q % 16 == 0) {
        if (hd == 64)
            prefill_tc_launch<64>(tc, out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx,
                                  s);
        else
            prefill_tc_launch<128>(tc, out, q, q_stride, kcache, vcache, pos0, T, hq, group,
                                   max_ctx, s);
        return;
    }
    if (hd == 64)
        prefill_launch<64>(attn_prefill_kernel<64>, PF_THREADS, prefill_smem<64>(), PF_BQ, 1, out,
                           q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx, s);
    else if (hd == 128)
        prefill_launch<128>(attn_prefill_kernel<128>, PF_THREADS, prefill_smem<128>(), PF_BQ, 1,
                            out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx, s);
    else
        prefill_launch<256>(attn_prefill_kernel<256>, PF_THREADS, prefill_smem<256>(), PF_BQ, 1,
                            out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx, s);
}
