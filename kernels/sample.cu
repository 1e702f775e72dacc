// See sample.h. One block of 1024 threads does the sampling: a few passes over the candidates;
// what matters first is that it is exact and lives on the device.
//
// Sampling. With m the largest logit, each token's weight is w = round(2^32 * exp((l - m) / temp))
// (an integer; the top token's is 2^32). Tokens of weight 0 can never be drawn, so the first two
// passes find m and compact the tokens of weight > 0 into the workspace, in id order (usually a
// few hundred to a few thousand at temperatures <= 1). Every step after that works on this list.
// All of top-k, top-p, min-p and the draw keep a prefix of the order (logit desc, id asc), so
// the kept set is one "cut" (key, id): a token is kept when its key (the logit's bits, mapped to
// an unsigned integer of the same order) is greater, or equal with an id no greater. Finding
// "the token at which the running weight along the order first reaches a target" is a radix
// select over the 32-bit keys: four passes of an 8-bit histogram of weights (per-warp histograms
// in shared memory, each thread adding runs of equal digits at once, since logits crowd into
// few buckets), then the tokens whose key equals the selected one, in id order.
//   top-k: target k, weight 1.   top-p: target ceil(top_p * kept weight), weight w.
//   min-p: the smallest key with exp((l - m)/temp) >= min_p.   draw: target floor(u * kept) + 1.
// Sums are of integers, hence exact in any order: the result is deterministic.
//
// One block is slow when most of a large vocabulary has weight > 0 (flat logits: every pass is
// over ~128K tokens on one SM, ~0.7 ms for top-k + top-p at 128K). With top_k set, a prefilter
// kernel on every SM first keeps each slice's top k (topk_prefilter_kernel), so the sampling
// block passes over k * SMs tokens, and keeps of those only what lies at or before the k-th of
// the slices' top tokens (usually k and a few: no select left to do; see sample_kernel).
#include "config.h"
#include "sample.h"
#include "ref.h"
#include "argmax.cuh"
#include "device.cuh"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SP_THREADS 1024
#define SP_WARPS   (SP_THREADS / 32)
#define FULL       0xffffffffu

struct cut {
    uint32_t key;
    int id;
};

// where block b's slice of n entries begins when the grid's blocks cut them evenly, in order
// (block b holds [slice_start(b, n), slice_start(b + 1, n)))
static __device__ __forceinline__ int slice_start(int b, int n)
{
    return (int)((long long)b * n / gridDim.x);
}

static __device__ __forceinline__ bool kept(uint32_t key, int id, cut c)
{
    return key > c.key || (key == c.key && id <= c.id);
}

// kept() with the id read only on a key tie (the ids are a second array: most passes need none)
static __device__ __forceinline__ bool kept_at(uint32_t key, const int *cid, int i, cut c)
{
    return key > c.key || (key == c.key && cid[i] <= c.id);
}

// Calls f(l, i) for each candidate i of cl[0, nc) this thread owns (i = tid + j * SP_THREADS),
// in increasing i, with SP_BATCH loads in flight: a pass over 128K candidates on one SM is
// otherwise one L2 round trip per candidate and thread (~40 us a pass).
#define SP_BATCH 8
template <typename F> static __device__ __forceinline__ void each_candidate(const float *cl, int nc, F f)
{
    for (int base = threadIdx.x; base < nc; base += SP_BATCH * SP_THREADS) {
        float lv[SP_BATCH];
#pragma unroll
        for (int j = 0; j < SP_BATCH; j++) {
            const int i = base + j * SP_THREADS;
            lv[j] = i < nc ? cl[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < SP_BATCH; j++) {
            const int i = base + j * SP_THREADS;
            if (i < nc) f(lv[j], i);
        }
    }
}

// argmax over the block; every thread gets the result. red: 2 * 32 words of shared memory
static __device__ void block_argmax(float &bv, int &bi, float *redv, int *redi)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(FULL, bv, o);
        int i = __shfl_xor_sync(FULL, bi, o);
        argmax_merge(bv, bi, v, i);
    }
    if (lane == 0) redv[warp] = bv, redi[warp] = bi;
    __syncthreads();
    bv = redv[lane];
    bi = redi[lane];
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(FULL, bv, o);
        int i = __shfl_xor_sync(FULL, bi, o);
        argmax_merge(bv, bi, v, i);
    }
    __syncthreads();
}

// inclusive scan over the block of 1024 threads; *total gets the sum. sm: 32 words
static __device__ uint64_t block_scan(uint64_t v, uint64_t *total, uint64_t *sm)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        uint64_t t = __shfl_up_sync(FULL, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) sm[warp] = v;
    __syncthreads();
    if (warp == 0) {
        uint64_t w = sm[lane];
        for (int o = 1; o < 32; o <<= 1) {
            uint64_t t = __shfl_up_sync(FULL, w, o);
            if (lane >= o) w += t;
        }
        sm[lane] = w;
    }
    __syncthreads();
    uint64_t r = v + (warp > 0 ? sm[warp - 1] : 0);
    *total = sm[31];
    __syncthreads();
    return r;
}

static __device__ uint64_t block_sum(uint64_t v, uint64_t *sm)
{
    uint64_t total;
    block_scan(v, &total, sm);
    return total;
}

static __device__ uint32_t block_max_u32(uint32_t v, uint64_t *sm)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    v = (uint32_t)sm[lane];
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
    __syncthreads();
    return v;
}

struct samp {
    float m, temp;
    __device__ float e(float l) const
    {
        return expf((l - m) / temp); // as runtime/sampler.c
    }
    __device__ uint64_t w(float l) const
    {
        return __float2ull_rn(e(l) * 4294967296.0f);
    }
};

struct sel_smem {
    uint64_t tot[256];
    uint64_t scan[32];
    uint64_t above;
    int bucket, id, ties;
};

// The kept token at which the running weight (1 per token, or w) along the order first reaches
// target. The kept tokens' total weight must be >= target.
static __device__ cut select(const float *cl, const int *cid, int nc, samp sp, bool by_weight,
                             uint64_t target, cut c, unsigned long long *hist, sel_smem *sm)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // a warp's histogram: the weights' high parts (w >> 16) and low parts (w & 0xffff) in two
    // 32-bit words per digit, so that the shared atomics are native adds (the 64-bit add is a
    // compare-and-swap loop, serialised when a warp's lanes share a digit, as flat logits do);
    // each word sums at most n / 32 halves below 2^16 (n <= 2^20: no overflow)
    unsigned *hh = reinterpret_cast<unsigned *>(hist) + warp * 512, *hl = hh + 256;
    uint32_t prefix = 0, pmask = 0;
    uint64_t above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = lane; b < 512; b += 32) hh[b] = 0;
        __syncwarp();
        int cb = -1;
        unsigned ch = 0, cl16 = 0;
        each_candidate(cl, nc, [&](float l, int i) {
            const uint32_t key = order_key(l);
            if ((key & pmask) != prefix || !kept_at(key, cid, i, c)) return;
            const int b = (key >> shift) & 255;
            if (b != cb) {
                if (cb >= 0) atomicAdd(&hh[cb], ch), atomicAdd(&hl[cb], cl16);
                cb = b;
                ch = cl16 = 0;
            }
            const uint64_t w = by_weight ? sp.w(l) : 1;
            ch += (unsigned)(w >> 16);
            cl16 += (unsigned)(w & 0xffffu);
        });
        if (cb >= 0) atomicAdd(&hh[cb], ch), atomicAdd(&hl[cb], cl16);
        __syncthreads();
        if (tid < 256) {
            const unsigned *h32 = reinterpret_cast<const unsigned *>(hist);
            uint64_t s = 0;
            for (int w = 0; w < SP_WARPS; w++)
                s += ((uint64_t)h32[w * 512 + tid] << 16) + h32[w * 512 + 256 + tid];
            sm->tot[tid] = s;
        }
        __syncthreads();
        if (warp == 0) {
            // lane takes buckets 255 - 8*lane .. 248 - 8*lane, from the top
            uint64_t part = 0;
            for (int j = 0; j < 8; j++) part += sm->tot[255 - 8 * lane - j];
            uint64_t incl = part;
            for (int o = 1; o < 32; o <<= 1) {
                uint64_t t = __shfl_up_sync(FULL, incl, o);
                if (lane >= o) incl += t;
            }
            unsigned hit = __ballot_sync(FULL, above + incl >= target);
            if (hit == 0) hit = 1u << 31; // cannot happen when the precondition holds
            if (lane == __ffs(hit) - 1) {
                uint64_t acc = above + incl - part;
                int b = 255 - 8 * lane;
                for (int j = 0; j < 8; j++) {
                    b = 255 - 8 * lane - j;
                    if (acc + sm->tot[b] >= target || j == 7) break;
                    acc += sm->tot[b];
                }
                sm->bucket = b;
                sm->above = acc;
            }
        }
        __syncthreads();
        prefix |= (uint32_t)sm->bucket << shift;
        pmask |= 255u << shift;
        above = sm->above;
    }
    // the kept tokens with key == prefix, in id order: usually one or a few, gathered into
    // shared memory (the histograms' space) in one pass, put in id order by rank and scanned;
    // more than SP_THREADS (many equal logits): a scan of the whole list in tiles
    if (tid == 0) sm->id = -1, sm->ties = 0;
    __syncthreads();
    int *gid = reinterpret_cast<int *>(hist), *oid = gid + SP_THREADS;
    uint64_t *gw = reinterpret_cast<uint64_t *>(hist) + SP_THREADS, *ow = gw + SP_THREADS;
    each_candidate(cl, nc, [&](float l, int i) {
        if (order_key(l) != prefix || !kept_at(prefix, cid, i, c)) return;
        const int slot = atomicAdd(&sm->ties, 1);
        if (slot < SP_THREADS) {
            gid[slot] = cid[i];
            gw[slot] = by_weight ? sp.w(l) : 1;
        }
    });
    __syncthreads();
    const int ties = sm->ties;
    if (ties <= SP_THREADS) {
        if (tid < ties) {
            const int me = gid[tid];
            int r = 0;
            for (int j = 0; j < ties; j++) r += gid[j] < me || (gid[j] == me && j < tid);
            oid[r] = me;
            ow[r] = gw[tid];
        }
        __syncthreads();
        const uint64_t w = tid < ties ? ow[tid] : 0;
        uint64_t tile;
        const uint64_t incl = above + block_scan(w, &tile, sm->scan);
        if (w > 0 && incl >= target && incl - w < target) sm->id = oid[tid];
        __syncthreads();
        cut r = {prefix, sm->id};
        __syncthreads();
        return r;
    }
    uint64_t run = above;
    for (int base = 0; base < nc; base += SP_THREADS) {
        int i = base + tid;
        uint64_t w = 0;
        if (i < nc) {
            float l = cl[i];
            if (order_key(l) == prefix && kept(prefix, cid[i], c)) w = by_weight ? sp.w(l) : 1;
        }
        uint64_t tile;
        uint64_t incl = block_scan(w, &tile, sm->scan);
        if (w > 0 && run + incl >= target && run + incl - w < target) sm->id = cid[i];
        run += tile;
        __syncthreads();
        if (sm->id >= 0) break;
    }
    cut r = {prefix, sm->id};
    __syncthreads();
    return r;
}

// the kept candidates' total weight (every thread gets it)
static __device__ uint64_t kept_weight(const float *cl, const int *cid, int nc, samp sp, cut c,
                                       uint64_t *scan)
{
    uint64_t s = 0;
    each_candidate(cl, nc, [&](float l, int i) {
        if (kept_at(order_key(l), cid, i, c)) s += sp.w(l);
    });
    return block_sum(s, scan);
}

// (key, INT_MAX - id) as one integer: the earlier of two cuts in the order is the larger
static __device__ __forceinline__ uint64_t cut_order(cut c)
{
    return ((uint64_t)c.key << 32) | (uint32_t)(INT_MAX - c.id);
}

// the cut whose cut_order is v
static __device__ __forceinline__ cut cut_of_order(uint64_t v)
{
    return {(uint32_t)(v >> 32), INT_MAX - (int)(uint32_t)v};
}

// v's rank among the n cut_orders a (0: the earliest), counting those before it; distinct ids
// make every rank distinct
static __device__ __forceinline__ int order_rank(const uint64_t *a, int n, uint64_t v)
{
    int r = 0;
    for (int j = 0; j < n; j++) r += a[j] > v;
    return r;
}

// the largest of every thread's v, to every thread. sm: 32 words
static __device__ uint64_t block_max_u64(uint64_t v, uint64_t *sm)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    v = sm[lane];
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
    __syncthreads();
    return v;
}

// the earliest of n cuts in the order (key desc, id asc), over the block; every thread gets it
static __device__ cut block_earliest(const cut *t, int n, uint64_t *sm)
{
    uint64_t v = 0;
    for (int i = threadIdx.x; i < n; i += SP_THREADS) v = max(v, cut_order(t[i]));
    return cut_of_order(block_max_u64(v, sm));
}

// The end of the sampling when the tokens left to order are few (at most SP_THREADS: the top k
// of a top-k call, or every candidate of a short list): instead of a radix select per step
// (top-p, the draw: four histogram passes and a tie pass each, and a pass for each kept
// weight), the kept tokens are put in the order once, in shared memory (each its rank by
// comparing with all: the ids are distinct, so the ranks are too), their weights scanned once,
// and every cut read off the running weight. The same integers and targets as the passes: the
// same token. lim: the first lim of the order are kept (top-k); c: the cut they lie in.
static __device__ int sample_small(const float *cl, const int *cid, int nc, samp sp, cut c, int lim,
                                   float top_p, float min_p, double u, unsigned long long *hist,
                                   sel_smem *sm)
{
    const int tid = threadIdx.x;
    uint32_t *gk = reinterpret_cast<uint32_t *>(hist), *ok = gk + SP_THREADS;
    int *gi = reinterpret_cast<int *>(ok + SP_THREADS), *oi = gi + SP_THREADS;
    float *gl = reinterpret_cast<float *>(oi + SP_THREADS), *ol = gl + SP_THREADS;
    if (tid == 0) sm->ties = 0;
    __syncthreads();
    each_candidate(cl, nc, [&](float l, int i) {
        const uint32_t key = order_key(l);
        if (!kept_at(key, cid, i, c)) return;
        const int slot = atomicAdd(&sm->ties, 1);
        if (slot < SP_THREADS) gk[slot] = key, gi[slot] = cid[i], gl[slot] = l;
    });
    __syncthreads();
    const int m = min(sm->ties, SP_THREADS);
    if (tid < m) {
        const uint32_t key = gk[tid];
        const int id = gi[tid];
        int r = 0;
        for (int j = 0; j < m; j++) r += gk[j] > key || (gk[j] == key && gi[j] < id);
        ok[r] = key, oi[r] = id, ol[r] = gl[tid];
    }
    __syncthreads();
    const int K = min(m, lim); // ranks 0 .. K - 1 kept
    // thread r holds rank r: its weight and the running weight through it
    const uint64_t w = tid < K ? sp.w(ol[tid]) : 0;
    uint64_t total;
    const uint64_t run = block_scan(w, &total, sm->scan);
    int last = K - 1; // the last kept rank
    // the rank of the one thread for which mine holds, to every thread
    auto pick = [&](bool mine) {
        if (mine) sm->id = tid;
        __syncthreads();
        const int r = sm->id;
        __syncthreads();
        return r;
    };
    // the rank at which the running weight first reaches target (weights > 0: exactly one)
    auto reach = [&](uint64_t target) {
        return pick(tid <= last && run >= target && run - w < target);
    };
    if (top_p < 1.0f) {
        uint64_t target = (uint64_t)ceil((double)top_p * (double)total);
        target = target < 1 ? 1 : target > total ? total : target;
        last = reach(target);
    }
    if (min_p > 0.0f) {
        // as the passes: the smallest kept key with probability >= min_p of the top one's;
        // when above the last kept key, the ranks with keys >= it
        const uint32_t k = tid <= last && sp.e(ol[tid]) >= min_p ? ~ok[tid] : 0u;
        const uint32_t kmin = ~block_max_u32(k, sm->scan);
        if (kmin > ok[last])
            last = pick(tid <= last && ok[tid] >= kmin && (tid == last || ok[tid + 1] < kmin));
    }
    // the kept weight: the running weight through the last kept rank
    if (tid == last) sm->above = run;
    __syncthreads();
    const uint64_t kept_w = sm->above;
    uint64_t r = (uint64_t)(u * (double)kept_w);
    if (r >= kept_w) r = kept_w - 1;
    return oi[reach(r + 1)];
}

// ids: the token id of each logit (a prefilter's survivors), or null for 0..n-1.
// thr (top-p alone, nthr prefilter blocks): the survivors are each block's first entries in the
// order up to thr[b]; full/nfull: the whole row. The top-p target needs the whole row's weight
// (one pass over it), and the survivors hold the top-p set only if its cut is not past any
// block's thr: when the survivors' weight falls short of the target or the cut lies past the
// earliest thr (flat logits), the kernel starts again over the whole row.
// ktop, kcut (top-k, nk prefilter blocks): each block's kr-th token and its k-th survivor. With
// j = ceil(top_k / kr) <= nk, the j-th of the blocks' kr-th tokens in the order has j x kr >=
// top_k tokens at or before it (each of those blocks' first kr), so the row's top k all lie at
// or before it (kr 1: the blocks' top tokens, where top_k <= nk; kr > 1 where top_k exceeds the
// blocks: LOCKSTEP_SAMPLE_RTH, ls_sample_set_rth); else the earliest of the blocks' k-th
// survivors does (that block holds k at or before it). The survivors after
// that cut are dropped as the list is compacted: with the first, usually k and a few stay of
// k x blocks (the top k of 128K logits lie among the top ~0.1%, a slice's k-th near its top 5%),
// and the small-set end orders them without a select.
static __global__ void __launch_bounds__(SP_THREADS)
    sample_kernel(int *out, const float *__restrict__ logits, const int *__restrict__ ids, int n,
                  float temp, int top_k, float top_p, float min_p, const double *__restrict__ u,
                  float *cl, int *cid, const cut *__restrict__ thr, int nthr,
                  const float *__restrict__ full, int nfull, int small,
                  const cut *__restrict__ ktop, const cut *__restrict__ kcut, int nk, int kr)
{
    extern __shared__ unsigned long long hist[]; // [SP_WARPS][256]
    __shared__ sel_smem sm;
    __shared__ cut kth;
    __shared__ float redv[32];
    __shared__ int redi[32];
    pdl_launch_dependents();
    pdl_wait();
    const int tid = threadIdx.x;
    // the survivors kept (everything without a prefilter's cuts)
    cut kc = {0u, INT_MAX};
    const int kj = kr > 0 ? (top_k + kr - 1) / kr : 0;
    if (ktop && kj >= 1 && kj <= nk && nk <= SP_THREADS) {
        // the kj-th of the blocks' kr-th tokens, by rank (their ids are distinct)
        const uint64_t v = tid < nk ? cut_order(ktop[tid]) : 0;
        if (tid < nk) hist[tid] = v;
        __syncthreads();
        if (tid < nk && order_rank(reinterpret_cast<const uint64_t *>(hist), nk, v) == kj - 1)
            kth = ktop[tid];
        __syncthreads();
        kc = kth;
    } else if (kcut) {
        kc = block_earliest(kcut, nk, sm.scan);
    }

    for (bool survivors = thr != nullptr;; survivors = false) {
        const float *src = logits;
        const int *sid = ids;
        int ns = n;
        if (thr && !survivors) src = full, sid = nullptr, ns = nfull;

        float bv = -INFINITY;
        int bi = INT_MAX;
#pragma unroll 8
        for (int i = tid; i < ns; i += SP_THREADS) argmax_merge(bv, bi, src[i], i);
        block_argmax(bv, bi, redv, redi);
        const samp sp = {bv, temp}; // survivors: the row's top logit is the top of its block

        // compact the tokens of weight > 0, in id order (cl/cid are written and read by this
        // block only: plain loads, ordered by __syncthreads)
        int nc = 0;
        for (int base = 0; base < ns; base += SP_BATCH * SP_THREADS) {
            const int i0 = base + tid * SP_BATCH;
            float lv[SP_BATCH];
            int cnt = 0;
            int iv[SP_BATCH];
            bool take[SP_BATCH];
#pragma unroll
            for (int j = 0; j < SP_BATCH; j++) {
                lv[j] = i0 + j < ns ? src[i0 + j] : -INFINITY;
                iv[j] = i0 + j < ns && sid ? sid[i0 + j] : i0 + j;
            }
#pragma unroll
            for (int j = 0; j < SP_BATCH; j++) {
                take[j] = sp.w(lv[j]) > 0 && kept(order_key(lv[j]), iv[j], kc);
                cnt += take[j];
            }
            uint64_t total;
            int o = nc + (int)(block_scan((uint64_t)cnt, &total, sm.scan) - cnt);
#pragma unroll
            for (int j = 0; j < SP_BATCH; j++)
                if (take[j]) {
                    cl[o] = lv[j];
                    cid[o] = iv[j];
                    o++;
                }
            nc += (int)total;
        }
        __syncthreads();

        cut c = {0u, INT_MAX}; // everything
        const int lim = top_k > 0 && top_k < nc ? top_k : nc; // the top-k
        if (small && !survivors && lim <= SP_THREADS) {
            // few to order: the top k by one select where there are more candidates, then
            // every cut at once (sample_small)
            if (nc > SP_THREADS) c = select(cl, cid, nc, sp, false, (uint64_t)lim, c, hist, &sm);
            const int id = sample_small(cl, cid, nc, sp, c, lim, top_p, min_p, *u, hist, &sm);
            if (tid == 0) *out = id;
            return;
        }
        if (top_k > 0 && top_k < nc)
            c = select(cl, cid, nc, sp, false, (uint64_t)top_k, c, hist, &sm);
        if (top_p < 1.0f) {
            uint64_t kept_w = kept_weight(cl, cid, nc, sp, c, sm.scan);
            const uint64_t here = kept_w;
            if (survivors) { // the whole row's weight (no top-k on this path)
                uint64_t s = 0;
                each_candidate(full, nfull, [&](float l, int) { s += sp.w(l); });
                kept_w = block_sum(s, sm.scan);
            }
            uint64_t target = (uint64_t)ceil((double)top_p * (double)kept_w);
            target = target < 1 ? 1 : target > kept_w ? kept_w : target;
            if (survivors && here < target) continue; // the top-p set is not all here
            c = select(cl, cid, nc, sp, true, target, c, hist, &sm);
            if (survivors && !kept(c.key, c.id, block_earliest(thr, nthr, sm.scan))) continue;
        }
        if (min_p > 0.0f) {
            // smallest kept key whose probability is >= min_p of the top one's (the top token
            // always qualifies); as a maximum of the complement, to share block_max_u32
            uint32_t k = 0;
            each_candidate(cl, nc, [&](float l, int i) {
                const uint32_t key = order_key(l);
                if (kept_at(key, cid, i, c) && sp.e(l) >= min_p) k = max(k, ~key);
            });
            uint32_t kmin = ~block_max_u32(k, sm.scan);
            if (kmin > c.key) c = {kmin, INT_MAX};
        }
        const uint64_t kept_w = kept_weight(cl, cid, nc, sp, c, sm.scan);
        uint64_t r = (uint64_t)(*u * (double)kept_w);
        if (r >= kept_w) r = kept_w - 1;
        c = select(cl, cid, nc, sp, true, r + 1, c, hist, &sm);
        if (tid == 0) *out = c.id;
        return;
    }
}

// Top-k prefilter for large vocabularies: block b keeps the top k of its slice of the logits
// (in the order logit desc, id asc, by the same radix select) and writes exactly k entries to
// [b*k, (b+1)*k) of (fl, fid), in id order, padded with -inf (weight 0: never kept). The global
// top k is among the survivors, in id order across blocks, so sample_kernel over them keeps the
// same tokens with the same weights (the top logit is among them) and draws the same token as
// over the whole row, with k * blocks entries instead of n to pass over. sl/sid: n floats and
// ints of scratch (each block copies its slice there for select). thr: each block's cut, its
// k-th entry in the order (everything where the slice holds k or fewer); top (or null): its
// r-th token, 1 <= r <= k (see sample_kernel).
static __global__ void __launch_bounds__(SP_THREADS)
    topk_prefilter_kernel(const float *__restrict__ logits, int n, int k, float *sl, int *sid,
                          float *fl, int *fid, cut *thr, cut *top, int r)
{
    extern __shared__ unsigned long long hist[]; // [SP_WARPS][256]
    __shared__ sel_smem sm;
    pdl_launch_dependents();
    pdl_wait();
    const int tid = threadIdx.x, b = blockIdx.x;
    const int s0 = slice_start(b, n), s1 = slice_start(b + 1, n);
    const int len = s1 - s0;
    float *cl = sl + s0;
    int *cid = sid + s0;
    uint64_t best = 0; // the earliest of this thread's tokens (cut_order)
    for (int i = tid; i < len; i += SP_THREADS) {
        const float l = logits[s0 + i];
        cl[i] = l;
        cid[i] = s0 + i;
        best = max(best, cut_order({order_key(l), s0 + i}));
    }
    if (top && r == 1) { // the slice's top token (sample_kernel's bound)
        best = block_max_u64(best, sm.scan);
        if (tid == 0) top[b] = cut_of_order(best);
    }
    __syncthreads();
    cut c = {0u, INT_MAX};
    const samp none = {0.0f, 1.0f}; // select by count: no weights
    if (k < len) c = select(cl, cid, len, none, false, (uint64_t)k, c, hist, &sm);
    if (thr && tid == 0) { // the block's last survivor (everything: {0, INT_MAX})
        thr[b].key = c.key;
        thr[b].id = c.id;
    }
    float *ol = fl + (size_t)b * k;
    int *oid = fid + (size_t)b * k;
    int done = 0;
    for (int base = 0; base < len; base += SP_THREADS) {
        const int i = base + tid;
        const bool keep = i < len && kept(order_key(cl[i]), cid[i], c);
        uint64_t total;
        const int o = done + (int)(block_scan((uint64_t)keep, &total, sm.scan) - keep);
        if (keep && o < k) {
            ol[o] = cl[i];
            oid[o] = cid[i];
        }
        done += (int)total;
    }
    for (int i = (done < k ? done : k) + tid; i < k; i += SP_THREADS) {
        ol[i] = -INFINITY;
        oid[i] = INT_MAX;
    }
    if (top && r > 1) {
        // the r-th of the survivors by rank (each against all, in shared memory: the launch
        // keeps k <= SP_MAX_RTH_K, and the ids are distinct)
        const int kk = done < k ? done : k;
        uint64_t *ko = reinterpret_cast<uint64_t *>(hist);
        __syncthreads(); // ol, oid written; hist free
        for (int i = tid; i < kk; i += SP_THREADS) ko[i] = cut_order({order_key(ol[i]), oid[i]});
        __syncthreads();
        for (int i = tid; i < kk; i += SP_THREADS)
            if (order_rank(ko, kk, ko[i]) == r - 1) top[b] = {order_key(ol[i]), oid[i]};
    }
}

// Where an argmax goes: the index to out (pairs NULL), or a rank's slot of a greedy choice
// over a vocabulary cut into tp slices (ref_argmax_pairs: pairs[2 tp] all 0 but (the value,
// first + the index) at slot, (0, -1) where the slice held only NaN)
struct am_out {
    int *out;
    float *pairs;
    int first, slot, tp;
};

// the result's store, by one thread: bi the index (INT_MAX: none), x the row it indexes
static __device__ __forceinline__ void am_store(const am_out &o, const float *x, int bi)
{
    if (!o.pairs) {
        *o.out = bi == INT_MAX ? 0 : bi;
        return;
    }
    for (int i = 0; i < 2 * o.tp; i++) o.pairs[i] = 0.0f;
    o.pairs[2 * o.slot] = bi == INT_MAX ? 0.0f : x[bi];
    o.pairs[2 * o.slot + 1] = bi == INT_MAX ? -1.0f : (float)(o.first + bi);
}

static __global__ void __launch_bounds__(SP_THREADS)
    argmax_kernel(const am_out o, const float *__restrict__ x, int n)
{
    __shared__ float redv[32];
    __shared__ int redi[32];
    pdl_launch_dependents();
    pdl_wait();
    float bv = -INFINITY;
    int bi = INT_MAX;
#pragma unroll 8
    for (int i = threadIdx.x; i < n; i += SP_THREADS) argmax_merge(bv, bi, x[i], i);
    block_argmax(bv, bi, redv, redi);
    if (threadIdx.x == 0) am_store(o, x, bi);
}

// ---- argmax over the grid (ls_sample_set_argmax_split): each block reduces a slice of the row
// to one 64-bit key, folds it into one device word with atomicMax, and the last block to count
// itself in writes the index and clears the word and the count for the next call. One block
// over a 128K row was ~125 dependent scalar loads a thread (~8.6 us alone); here each thread
// loads one or two float4s.
// The grid kernels' "last block to arrive goes on" (the grid argmax, the top-p passes, min-p,
// the kept weight): each block arrives once on a counter of the launch. For the one thread
// whose global stores (and atomics) the block's result is: true in the last block to arrive;
// what every block stored before arriving is then visible to that thread (a fence before the
// count, so a block's stores are in before the count says so; one after it in the last, so its
// reads come after every block's count). The caller sets the counter back to 0 for the next
// launch.
static __device__ __forceinline__ bool arrive_last(unsigned *done)
{
    __threadfence();
    const bool last = atomicAdd(done, 1u) == gridDim.x - 1;
    if (last) __threadfence();
    return last;
}

// the same for a block whose threads all stored (every thread calls it; true in every thread of
// the last block, each of which then reads after a fence of its own)
static __device__ bool block_arrive_last(unsigned *done)
{
    __shared__ int last;
    __threadfence(); // this thread's stores in before thread 0 counts the block
    __syncthreads();
    if (threadIdx.x == 0) last = arrive_last(done);
    __syncthreads();
    if (last) __threadfence();
    return last;
}

#define AM_THREADS 256
static __device__ unsigned long long g_am_key;
static __device__ unsigned g_am_done;

static __global__ void __launch_bounds__(AM_THREADS)
    argmax_split_kernel(const am_out o, const float *__restrict__ x, int n)
{
    __shared__ unsigned long long red[AM_THREADS / 32];
    pdl_launch_dependents();
    pdl_wait();
    float bv = -INFINITY;
    int bi = INT_MAX;
    const int n4 = n >> 2, stride = (int)gridDim.x * AM_THREADS;
    const int first = (int)blockIdx.x * AM_THREADS + (int)threadIdx.x;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
#pragma unroll 2
    for (int j = first; j < n4; j += stride) {
        const float4 v = x4[j];
        argmax_merge(bv, bi, v.x, 4 * j);
        argmax_merge(bv, bi, v.y, 4 * j + 1);
        argmax_merge(bv, bi, v.z, 4 * j + 2);
        argmax_merge(bv, bi, v.w, 4 * j + 3);
    }
    for (int i = 4 * n4 + first; i < n; i += stride) argmax_merge(bv, bi, x[i], i);
    // NaN never enters argmax_merge's pick, so a thread with no value keeps INT_MAX: key 0
    unsigned long long k = warp_max_key(bi == INT_MAX ? 0ull : am_key(bv, bi));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = k;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < AM_THREADS / 32; w++) k = red[w] > k ? red[w] : k;
    if (k) atomicMax(&g_am_key, k);
    if (!arrive_last(&g_am_done)) return;
    const unsigned long long best = atomicExch(&g_am_key, 0ull);
    g_am_done = 0;
    am_store(o, x, am_key_index(best));
}

// the token of a greedy choice from every rank's pairs, summed (ref_argmax_pick)
static __global__ void argmax_pick_kernel(int *out, const float *__restrict__ pairs, int tp)
{
    pdl_launch_dependents();
    pdl_wait();
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int r = 0; r < tp; r++) {
        const int i = (int)pairs[2 * r + 1];
        if (i >= 0) argmax_merge(bv, bi, pairs[2 * r], i);
    }
    *out = bi == INT_MAX ? 0 : bi;
}

// a switch that is on unless its environment variable is "0", read at the first use; on >= 0
// sets it; returns the previous setting
static int env_switch(int *g, const char *var, int on)
{
    if (*g < 0) {
        const char *e = getenv(var);
        *g = !(e && !strcmp(e, "0"));
    }
    int old = *g;
    if (on >= 0) *g = on != 0;
    return old;
}

static int g_argmax_split = -1; // -1: not read yet

extern "C" int ls_sample_set_argmax_split(int on)
{
    return env_switch(&g_argmax_split, "LOCKSTEP_ARGMAX_SPLIT", on);
}

static void argmax_launch(const am_out &o, const float *x, int n, void *stream)
{
    // the grid form's float4 loads need x on a 16-byte boundary (every buffer the engine
    // allocates is); one block is enough below a few thousand
    if (ls_sample_set_argmax_split(-1) && n >= 4096 && ((uintptr_t)x & 15) == 0) {
        const int n4 = n / 4, sms = ls_device_get().sms;
        int blocks = (n4 + AM_THREADS - 1) / AM_THREADS;
        if (blocks > 2 * sms) blocks = 2 * sms;
        pdl_launch(argmax_split_kernel, (unsigned)blocks, AM_THREADS, 0, (cudaStream_t)stream, o, x,
                   n);
    } else {
        pdl_launch(argmax_kernel, 1, SP_THREADS, 0, (cudaStream_t)stream, o, x, n);
    }
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_sample_argmax(int *out, const float *x, int n, void *stream)
{
    if (n < 1) ls_die(__FILE__, __LINE__, "ls_sample_argmax", "n must be >= 1");
    argmax_launch({out, nullptr, 0, 0, 1}, x, n, stream);
}

extern "C" void ls_sample_argmax_pairs(float *pairs, const float *x, int n, int first, int slot,
                                       int tp, void *stream)
{
    if (n < 1 || tp < 1 || slot < 0 || slot >= tp || first < 0 ||
        (long long)first + n > LS_ARGMAX_PAIRS_MAX_ID)
        ls_die(__FILE__, __LINE__, "ls_sample_argmax_pairs",
               "expected n >= 1, 0 <= slot < tp and ids below 2^24");
    argmax_launch({nullptr, pairs, first, slot, tp}, x, n, stream);
}

extern "C" void ls_sample_argmax_pick(int *out, const float *pairs, int tp, void *stream)
{
    if (tp < 1) ls_die(__FILE__, __LINE__, "ls_sample_argmax_pick", "tp must be >= 1");
    pdl_launch(argmax_pick_kernel, 1, 1, 0, (cudaStream_t)stream, out, pairs, tp);
    CHECK_CUDA(cudaGetLastError());
}

// ---- penalties (ls_penalize): one token a thread. The thread that holds token v is the only
// one to read or write count[v], so the window's update (the step's token in, the one last_n
// back out) needs no atomics and no second kernel.
#define PEN_THREADS 256
static __global__ void __launch_bounds__(PEN_THREADS)
    penalize_kernel(float *__restrict__ out, const float *__restrict__ logits,
                    const float *__restrict__ bias, int vocab, int *__restrict__ count,
                    int *__restrict__ hist, const int *__restrict__ ids,
                    const int *__restrict__ pos, int last_n, float rep, float pres, float freq)
{
    pdl_launch_dependents();
    pdl_wait();
    const int v = (int)blockIdx.x * PEN_THREADS + (int)threadIdx.x;
    const int p = *pos, in = ids[0];
    // hist[p - last_n] was written by an earlier step (or the host), never by this one
    const int old = last_n > 0 && p >= last_n ? hist[p - last_n] : -1;
    if (v == 0) hist[p] = in;
    if (v >= vocab) return;
    const int c0 = count[v], c = c0 + (v == in) - (v == old);
    if (c != c0) count[v] = c;
    const float l = bias ? __fadd_rn(logits[v], bias[v]) : logits[v];
    out[v] = c > 0 ? ls_penalised(l, c, rep, pres, freq) : l;
}

extern "C" void ls_penalize(float *out, const float *logits, const float *bias, int vocab,
                            int *count, int *hist, const int *ids, const int *pos, int last_n,
                            float rep, float pres, float freq, void *stream)
{
    if (vocab < 1 || last_n < 0)
        ls_die(__FILE__, __LINE__, "ls_penalize", "expected vocab >= 1 and last_n >= 0");
    pdl_launch(penalize_kernel, (unsigned)((vocab + PEN_THREADS - 1) / PEN_THREADS), PEN_THREADS, 0,
               (cudaStream_t)stream, out, logits, bias, vocab, count, hist, ids, pos, last_n, rep,
               pres, freq);
    CHECK_CUDA(cudaGetLastError());
}

// ---- a row's scores (ls_row_logprobs): one block a row

// block_argmax reads one entry per warp of 32: LP_THREADS must be SP_THREADS
#define LP_THREADS SP_THREADS

// sum over the block (LP_THREADS threads); every thread gets it. sm: LP_THREADS / 32 doubles
static __device__ double block_sum_f64(double v, double *sm)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    v = lane < LP_THREADS / 32 ? sm[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    __syncthreads();
    return v;
}

// One pass over the row (each_candidate: SP_BATCH loads in flight a thread, in increasing i):
// each thread's largest logit, its sum of exp(l - that) rescaled when the largest moves (an
// online log-sum-exp, in double), and its N largest; then the block's largest, the threads'
// sums rescaled to it and added, and N rounds of the block's largest list head, whose owner
// (i % LP_THREADS) moves past it.
static __global__ void __launch_bounds__(LP_THREADS)
    row_logprobs_kernel(double *__restrict__ out, const float *__restrict__ logits, int nrow,
                        size_t ld, const int *__restrict__ targets, int first_row, int N, int split)
{
    __shared__ float redv[32];
    __shared__ int redi[32];
    __shared__ double reds[LP_THREADS / 32];
    // block = row r's slice: columns [c0, c0 + n) of the row, tokens first ..
    const int r = blockIdx.x / split, chunk = (nrow + split - 1) / split,
              c0 = (blockIdx.x % split) * chunk, n = max(0, min(chunk, nrow - c0)),
              first = first_row + c0, W = LS_SCORE_W(N);
    const float *l = logits + (size_t)r * ld + c0;
    double *o = out + (size_t)blockIdx.x * W;
    float m = -INFINITY, tv[LS_SCORE_TOP_MAX];
    double s = 0.0;
    int ti[LS_SCORE_TOP_MAX], kept = 0;
    for (int k = 0; k < N; k++) tv[k] = -INFINITY, ti[k] = INT_MAX;
    each_candidate(l, n, [&](float v, int i) {
        if (v > m) {
            s = m == -INFINITY ? 0.0 : s * exp((double)m - (double)v);
            m = v;
        }
        s += exp((double)v - (double)m);
        // the N largest in increasing i: the strict > keeps the lower id first on ties
        if (N == 0 || (kept == N && !(v > tv[N - 1]))) return;
        int k = kept < N ? kept++ : N - 1;
        while (k > 0 && v > tv[k - 1]) {
            tv[k] = tv[k - 1];
            ti[k] = ti[k - 1];
            k--;
        }
        tv[k] = v;
        ti[k] = i;
    });
    float bm = m;
    int bmi = m == -INFINITY ? INT_MAX : 0;
    block_argmax(bm, bmi, redv, redi);
    s = block_sum_f64(m == -INFINITY ? 0.0 : s * exp((double)m - (double)bm), reds);
    if (threadIdx.x == 0) {
        const int t = targets ? targets[r] - first : -1;
        o[0] = bm;
        o[1] = s;
        o[2] = t >= 0 && t < n ? (double)l[t] : -INFINITY;
    }
    int head = 0;
    for (int k = 0; k < N; k++) {
        float bv = head < kept ? tv[head] : -INFINITY;
        int bi = head < kept ? ti[head] : INT_MAX;
        block_argmax(bv, bi, redv, redi);
        if (bi != INT_MAX && bi % LP_THREADS == (int)threadIdx.x) head++;
        if (threadIdx.x == 0) {
            o[3 + k] = bi != INT_MAX ? (double)bv : -INFINITY;
            o[3 + N + k] = bi != INT_MAX ? (double)(first + bi) : -1.0;
        }
    }
}

extern "C" int ls_row_logprobs_split(int rows, int n)
{
    if (rows <= 0) return 1;
    const int want = (2 * ls_device_get().sms + rows - 1) / rows, most = (n + 2047) / 2048;
    int s = want < most ? want : most;
    if (s > LS_SCORE_SPLIT_MAX) s = LS_SCORE_SPLIT_MAX;
    return s < 1 ? 1 : s;
}

extern "C" void ls_row_logprobs(double *out, const float *logits, int rows, int n, size_t ld,
                                const int *targets, int first, int N, int split, void *stream)
{
    if (rows <= 0) return;
    if (N < 0 || N > LS_SCORE_TOP_MAX || n < 0 || (size_t)n > ld || split < 1)
        ls_die(__FILE__, __LINE__, "ls_row_logprobs", "N must be in [0, 20], n <= ld, split >= 1");
    row_logprobs_kernel<<<rows * split, LP_THREADS, 0, (cudaStream_t)stream>>>(
        out, logits, n, ld, targets, first, N, split);
    CHECK_CUDA(cudaGetLastError());
}

// ---- draws without top-k over a grid (ls_sample_set_grid): the selects of sample_kernel (the
// top-p cut, then the draw below the kept set) as radix selects whose histograms are built by
// every block of a grid, each block a slice of at most SP_THREADS tokens in id order, one token
// a thread; min-p and the kept weight between them as grid reductions (tp_minp_kernel,
// tp_weight_kernel).
// A pass: each block histograms its tokens' weights by a digit of the order key (11, 11, then
// 10 bits, from the top) into shared memory and adds its bins to a global histogram; the last
// block to count itself in finds the digit at which the running weight (from the top key down)
// reaches the target, and the next pass keeps only that prefix. After three passes the key is
// exact; the ties pass finds, in id order across the slices, the token at which the running
// weight reaches the target: the same integers, order and targets as select, so the same token.
// Used where every token may be a candidate (flat logits take the whole row there, where one
// block's passes took ~0.5 ms).
#define TP_PASSES     3
#define TP_BINS       2048
#define TP_MAX_BLOCKS 1024 // n <= 2^20

struct tp_state {
    unsigned long long hist[2][TP_PASSES][TP_BINS]; // [phase][pass], zeroed before each call
    unsigned done[2][TP_PASSES + 1];                // blocks counted in, each kernel its own
    unsigned done_mp, done_kw;                      // the same, for the min-p and weight passes
    unsigned kinv;                                  // the min-p pass: the largest ~key
    unsigned long long kw;                          // the weight pass: the kept weight
    unsigned long long tsum[TP_MAX_BLOCKS];         // the ties pass: each block's weight
    unsigned long long above, target;               // weight before the prefix; the target
    uint32_t prefix, mask;
    cut c; // phase 0's result: the last token of the top-p set
    int max_idx;
};

static __device__ __forceinline__ int tp_shift(int pass)
{
    return pass == 0 ? 21 : pass == 1 ? 10 : 0;
}
static __device__ __forceinline__ int tp_nbins(int pass)
{
    return pass == 2 ? 1024 : 2048;
}

// the token a thread holds in its block's slice, its weight (0: not a candidate) and key
struct tp_tok {
    int i;
    uint32_t key;
    uint64_t w;
};

// the block's tokens, a token a candidate where all is set (no cut yet) or kept by the cut st->c
static __device__ tp_tok tp_kept(const float *logits, int n, samp sp, const tp_state *st, int all)
{
    tp_tok t = {slice_start(blockIdx.x, n) + (int)threadIdx.x, 0u, 0};
    if (t.i >= slice_start(blockIdx.x + 1, n)) return t;
    const float l = logits[t.i];
    t.key = order_key(l);
    t.w = all || kept(t.key, t.i, st->c) ? sp.w(l) : 0;
    return t;
}

// a select's candidates: phase 0 every token, phase 1 those kept by the top-p and min-p cut;
// either only with the digits found so far
static __device__ tp_tok tp_load(const float *logits, int n, samp sp, const tp_state *st, int phase)
{
    tp_tok t = tp_kept(logits, n, sp, st, phase == 0);
    if ((t.key & st->mask) != st->prefix) t.w = 0;
    return t;
}

// the target of a phase's first pass: phase 0 the top-p share of the row's weight (total, from
// the first histogram), phase 1 the draw below the cut (set by phase 0's ties pass)
static __global__ void __launch_bounds__(SP_THREADS)
    tp_hist_kernel(const float *__restrict__ logits, int n, float temp, float top_p, tp_state *st,
                   int phase, int pass)
{
    __shared__ unsigned hh[TP_BINS], hl[TP_BINS];
    __shared__ uint64_t scan[32];
    __shared__ int pick;
    __shared__ unsigned long long pick_above;
    pdl_launch_dependents();
    const int tid = threadIdx.x, nb = tp_nbins(pass), shift = tp_shift(pass);
    for (int b = tid; b < nb; b += SP_THREADS) hh[b] = hl[b] = 0;
    pdl_wait();
    const samp sp = {logits[st->max_idx], temp};
    __syncthreads();
    const tp_tok t = tp_load(logits, n, sp, st, phase);
    if (t.w > 0) {
        const int b = (int)((t.key >> shift) & (uint32_t)(nb - 1));
        atomicAdd(&hh[b], (unsigned)(t.w >> 16));
        atomicAdd(&hl[b], (unsigned)(t.w & 0xffffu));
    }
    __syncthreads();
    unsigned long long *gh = st->hist[phase][pass];
    for (int b = tid; b < nb; b += SP_THREADS) {
        const unsigned long long v = ((unsigned long long)hh[b] << 16) + hl[b];
        if (v) atomicAdd(&gh[b], v);
    }
    if (!block_arrive_last(&st->done[phase][pass])) return;
    // thread tid holds bins nb - 1 - k * tid ... (k = nb / SP_THREADS of them, from the top)
    const int k = nb / SP_THREADS; // 1 or 2
    const uint64_t b0 = __ldcg(&gh[nb - 1 - k * tid]),
                   b1 = k > 1 ? __ldcg(&gh[nb - 2 - k * tid]) : 0;
    const uint64_t part = b0 + b1;
    uint64_t total;
    const uint64_t incl = block_scan(part, &total, scan);
    uint64_t above = st->above, target = st->target;
    if (phase == 0 && pass == 0) {
        target = (uint64_t)ceil((double)top_p * (double)total);
        target = target < 1 ? 1 : target > total ? total : target;
    }
    if (tid == 0) pick = -1;
    __syncthreads();
    if (above + incl >= target && above + incl - part < target) {
        const uint64_t acc = above + incl - part;
        const int j = k > 1 && acc + b0 < target; // the second bin where the first falls short
        pick = nb - 1 - (k * tid + j);
        pick_above = j ? acc + b0 : acc;
    }
    __syncthreads();
    if (tid == 0) {
        const int b = pick >= 0 ? pick : 0; // cannot be missing: the weights reach the target
        st->prefix |= (uint32_t)b << shift;
        st->mask |= (uint32_t)(nb - 1) << shift;
        st->above = pick >= 0 ? pick_above : above;
        st->target = target;
    }
}

// the ties pass: the token with the exact key at which the running weight, in id order, reaches
// the target. Phase 0 records it as the cut (and, with draw, sets phase 1's target from the draw
// u, as tp_weight_kernel does otherwise); phase 1 writes it to out.
static __global__ void __launch_bounds__(SP_THREADS)
    tp_ties_kernel(int *out, const float *__restrict__ logits, int n, float temp,
                   const double *__restrict__ u, tp_state *st, int phase, int draw)
{
    __shared__ uint64_t scan[32];
    __shared__ int blk;
    __shared__ unsigned long long blk_above;
    pdl_launch_dependents();
    pdl_wait();
    const int tid = threadIdx.x;
    const samp sp = {logits[st->max_idx], temp};
    tp_tok t = tp_load(logits, n, sp, st, phase); // the key is exact now: the mask is all bits
    uint64_t total;
    block_scan(t.w, &total, scan);
    if (tid == 0) st->tsum[blockIdx.x] = total;
    if (!block_arrive_last(&st->done[phase][TP_PASSES])) return;
    const uint64_t above = st->above, target = st->target;
    // the block whose ties reach the target (blocks in id order; at most TP_MAX_BLOCKS)
    uint64_t running = 0;
    if (tid == 0) blk = -1;
    __syncthreads();
    for (int base = 0; base < (int)gridDim.x; base += SP_THREADS) {
        const int b = base + tid;
        const uint64_t v = b < (int)gridDim.x ? __ldcg(&st->tsum[b]) : 0;
        uint64_t tile;
        const uint64_t incl = above + running + block_scan(v, &tile, scan);
        if (v > 0 && incl >= target && incl - v < target) blk = b, blk_above = incl - v;
        running += tile;
        __syncthreads();
        if (blk >= 0) break;
    }
    const int b = blk;
    if (b < 0) return; // cannot happen: the prefix's weight reaches the target
    // that block's slice, again, in id order
    const int s0 = slice_start(b, n), s1 = slice_start(b + 1, n);
    uint64_t w = 0;
    const int i = s0 + tid;
    uint32_t key = 0;
    if (i < s1) {
        const float l = logits[i];
        key = order_key(l);
        w = key == st->prefix && (phase == 0 || kept(key, i, st->c)) ? sp.w(l) : 0;
    }
    const uint64_t incl = blk_above + block_scan(w, &total, scan);
    if (w > 0 && incl >= target && incl - w < target) {
        if (phase == 1) {
            *out = i;
        } else {
            // the cut, and the draw's target below it: r + 1, r = floor(u * kept weight)
            st->c = {key, i};
            if (draw) {
                uint64_t r = (uint64_t)(*u * (double)incl);
                if (r >= incl) r = incl - 1;
                st->target = r + 1;
                st->above = 0;
                st->prefix = 0;
                st->mask = 0;
            }
        }
    }
}

// min-p over the grid, after the top-p cut (all: none): the smallest key of a kept token whose
// probability is at least min_p of the top one's (the top token always is); where it lies
// above the cut, the cut becomes every token with a key at least as large (as sample_kernel)
static __global__ void __launch_bounds__(SP_THREADS)
    tp_minp_kernel(const float *__restrict__ logits, int n, float temp, float min_p, tp_state *st,
                   int all)
{
    __shared__ uint64_t scan[32];
    pdl_launch_dependents();
    pdl_wait();
    const samp sp = {logits[st->max_idx], temp};
    const tp_tok t = tp_kept(logits, n, sp, st, all);
    const float l = t.w > 0 ? logits[t.i] : 0.0f;
    const uint32_t k = block_max_u32(t.w > 0 && sp.e(l) >= min_p ? ~t.key : 0u, scan);
    if (threadIdx.x != 0) return;
    if (k) atomicMax(&st->kinv, k);
    if (!arrive_last(&st->done_mp)) return;
    const uint32_t kmin = ~atomicAdd(&st->kinv, 0u);
    if (all || kmin > st->c.key) st->c = {kmin, INT_MAX};
}

// the kept weight over the grid (all: every token), and the draw's target below it: r + 1,
// r = floor(u * kept weight)
static __global__ void __launch_bounds__(SP_THREADS)
    tp_weight_kernel(const float *__restrict__ logits, int n, float temp,
                     const double *__restrict__ u, tp_state *st, int all)
{
    __shared__ uint64_t scan[32];
    pdl_launch_dependents();
    pdl_wait();
    const samp sp = {logits[st->max_idx], temp};
    const uint64_t s = block_sum(tp_kept(logits, n, sp, st, all).w, scan);
    if (threadIdx.x != 0) return;
    if (s) atomicAdd(&st->kw, s);
    if (!arrive_last(&st->done_kw)) return;
    const uint64_t kw = atomicAdd(&st->kw, 0ull);
    uint64_t r = (uint64_t)(*u * (double)kw);
    if (r >= kw) r = kw - 1;
    if (all) st->c = {0u, INT_MAX};
    st->target = r + 1;
    st->above = 0;
    st->prefix = 0;
    st->mask = 0;
}

// entries each block of the prefilter keeps for top-p alone (its cut must hold the top-p set:
// usually tens of tokens per block with a model's logits; flat logits take the whole row)
#define SP_TOPP_KEEP 64

// the sampler's lists (cl, cid: n each), then the prefilter's scratch (n each), survivors (at
// most n / 4 each) and two cuts per block (at most n / 4 blocks, k >= 1)
static size_t lists_bytes(int n)
{
    const size_t m = (size_t)(n > 0 ? n : 0);
    return (m + m + m / 4 + 4) * (sizeof(float) + sizeof(int)) + 2 * (m / 4 + 1) * sizeof(cut) +
           8 * 16;
}

// then the grid select's state (tp_state), from a 16-byte boundary
extern "C" size_t ls_sample_workspace(int n)
{
    return (lists_bytes(n) + 15) / 16 * 16 + sizeof(tp_state);
}

static int g_prefilter = 1;
static int g_grid = -1; // -1: not read yet

extern "C" int ls_sample_set_grid(int on)
{
    return env_switch(&g_grid, "LOCKSTEP_SAMPLE_GRID", on);
}

// sample_small where it applies; LOCKSTEP_SAMPLE_SMALL=0: the selects throughout (for an A/B of
// the whole step)
static int g_small = -1;

extern "C" int ls_sample_set_small(int on)
{
    return env_switch(&g_small, "LOCKSTEP_SAMPLE_SMALL", on);
}

// the top-k bound from the blocks' r-th tokens where top_k exceeds the blocks (sample_kernel):
// on unless LOCKSTEP_SAMPLE_RTH=0, for k <= SP_MAX_RTH_K
#define SP_MAX_RTH_K 1024
static int g_rth = -1;

extern "C" int ls_sample_set_rth(int on)
{
    return env_switch(&g_rth, "LOCKSTEP_SAMPLE_RTH", on);
}

extern "C" int ls_sample_set_prefilter(int on)
{
    int old = g_prefilter;
    if (on >= 0) g_prefilter = on != 0;
    return old;
}

// blocks of the top-k prefilter for n logits: one per SM, at most n / (4k) (so the survivors,
// k per block, are at most a quarter of n); 0: not worth it
static int prefilter_blocks(int n, int top_k)
{
    if (!g_prefilter || top_k <= 0 || n < 8192) return 0;
    const int sms = ls_device_get().sms;
    long long most = (long long)n / (4LL * top_k);
    int b = most < sms ? (int)most : sms;
    return b >= 4 ? b : 0;
}

extern "C" void ls_sample(int *out, const float *logits, int n, float temperature, int top_k,
                          float top_p, float min_p, const double *u, void *workspace, void *stream)
{
    if (n < 1 || n > (1 << 20) || !(temperature >= 0.0f) || top_k < 0 ||
        !(top_p > 0.0f && top_p <= 1.0f) || !(min_p >= 0.0f && min_p <= 1.0f))
        ls_die(__FILE__, __LINE__, "ls_sample",
               "expected 1 <= n <= 2^20, temperature >= 0, top_k >= 0, 0 < top_p <= 1, "
               "0 <= min_p <= 1");
    if (temperature == 0.0f) {
        ls_sample_argmax(out, logits, n, stream);
        return;
    }
    if (top_k == 0 && n >= 8192 && ls_sample_set_grid(-1)) {
        // no top-k over a large vocabulary: the top-p cut (where asked), min-p (where asked), the
        // kept weight and the draw, each over the grid (tp_hist_kernel)
        tp_state *st = (tp_state *)((char *)workspace + (lists_bytes(n) + 15) / 16 * 16);
        const cudaStream_t cs = (cudaStream_t)stream;
        const unsigned blocks = (unsigned)((n + SP_THREADS - 1) / SP_THREADS);
        const int topp = top_p<1.0f, minp = min_p> 0.0f;
        CHECK_CUDA(cudaMemsetAsync(st, 0, offsetof(tp_state, tsum), cs));
        CHECK_CUDA(cudaMemsetAsync(&st->above, 0, sizeof *st - offsetof(tp_state, above), cs));
        ls_sample_argmax(&st->max_idx, logits, n, stream);
        auto select = [&](int phase) {
            for (int pass = 0; pass < TP_PASSES; pass++)
                pdl_launch(tp_hist_kernel, blocks, SP_THREADS, 0, cs, logits, n, temperature, top_p,
                           st, phase, pass);
            pdl_launch(tp_ties_kernel, blocks, SP_THREADS, 0, cs, out, logits, n, temperature, u,
                       st, phase, (int)(phase == 0 && !minp));
        };
        if (topp) select(0); // the top-p cut (and the draw's target, without min-p)
        if (minp)
            pdl_launch(tp_minp_kernel, blocks, SP_THREADS, 0, cs, logits, n, temperature, min_p, st,
                       !topp);
        if (minp || !topp) // the kept weight and the draw's target
            pdl_launch(tp_weight_kernel, blocks, SP_THREADS, 0, cs, logits, n, temperature, u, st,
                       (int)(!topp && !minp));
        select(1); // the draw
        CHECK_CUDA(cudaGetLastError());
        return;
    }
    const int small = ls_sample_set_small(-1);
    const size_t hist_bytes = (size_t)SP_WARPS * 256 * sizeof(unsigned long long);
    ls_func_attr(reinterpret_cast<const void *>(sample_kernel),
                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)hist_bytes);
    ls_func_attr(reinterpret_cast<const void *>(topk_prefilter_kernel),
                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)hist_bytes);
    // workspace: cl, cid, sl, sid (n each), fl, fid (n / 4 each), each from a 16-byte boundary
    char *p = (char *)workspace;
    auto take = [&p](size_t bytes) {
        char *r = p;
        p += (bytes + 15) / 16 * 16;
        return r;
    };
    float *cl = (float *)take((size_t)n * sizeof(float));
    int *cid = (int *)take((size_t)n * sizeof(int));
    // top-k: the prefilter keeps each block's top k; top-p alone: its first SP_TOPP_KEEP and
    // their cut, which the sampling block checks (and passes over the whole row if needed)
    const bool topp = top_k == 0 && top_p < 1.0f;
    const int keep = topp ? SP_TOPP_KEEP : top_k;
    const int blocks = prefilter_blocks(n, keep);
    const float *in = logits;
    const int *ids = nullptr;
    cut *thr = nullptr, *top = nullptr;
    int m = n, r = 0;
    if (blocks) {
        float *sl = (float *)take((size_t)n * sizeof(float));
        int *sid = (int *)take((size_t)n * sizeof(int));
        float *fl = (float *)take((size_t)(n / 4 + 4) * sizeof(float));
        int *fid = (int *)take((size_t)(n / 4 + 4) * sizeof(int));
        thr = (cut *)take((size_t)blocks * sizeof(cut)); // each block's k-th survivor
        // and its r-th token for the bound: its top where top_k <= blocks
        if (!topp)
            r = top_k <= blocks                                  ? 1
                : ls_sample_set_rth(-1) && top_k <= SP_MAX_RTH_K ? (top_k + blocks - 1) / blocks
                                                                 : 0;
        if (r) top = (cut *)take((size_t)blocks * sizeof(cut));
        pdl_launch(topk_prefilter_kernel, (unsigned)blocks, SP_THREADS, hist_bytes,
                   (cudaStream_t)stream, logits, n, keep, sl, sid, fl, fid, thr, top, r);
        CHECK_CUDA(cudaGetLastError());
        in = fl;
        ids = fid;
        m = blocks * keep;
    }
    const cut *tpc = topp ? thr : nullptr, *tkc = topp ? nullptr : thr; // top-p's, top-k's
    pdl_launch(sample_kernel, 1, SP_THREADS, hist_bytes, (cudaStream_t)stream, out, in, ids, m,
               temperature, top_k, top_p, min_p, u, cl, cid, tpc, tpc ? blocks : 0, logits, n,
               small, (const cut *)top, tkc, tkc ? blocks : 0, r);
    CHECK_CUDA(cudaGetLastError());
}
