// Kernel boundaries or a grid barrier? One decode layer's four GEMVs (QKV, o, gate+up, down;
// plain inputs, o and down adding into the residual; Llama-3.1-8B at TP=1 and 2, Llama-3.1-70B
// at TP=2, both at TP=4 with LAB_TP4=1) run three ways with the same per-row code, so that only
// the boundary differs:
//   sep      four kernels per layer, launched with PDL as the engine does: each block issues its
//            first row batch, waits (griddepcontrol.wait) for the kernel before, then runs;
//   persist  one cooperative kernel for L layers, one block per SM: after its last rows of one
//            matrix a block issues the first row batches of the next matrix, writes its outputs,
//            arrives on a grid counter and spins until every block has arrived, then runs. No
//            block exits and starts again, no grid completion and flush, and the next matrix's
//            bytes are in flight while the block's own epilogue and the barrier run.
//   fused    QKV and o as in sep, then gate+up and down in one kernel (fgd_kernel): the down
//            split along its inputs over the gate+up blocks, each adding its partial output
//            with atomics (float4, or 64-bit fixed point: reproducible), so that the boundary
//            between the two matrices goes (checked against a reference in double, not bitwise);
// Each also with an attention stand-in between QKV and o (IDLE_NS: blocks that hold 48 SMs for
// that long without touching DRAM, as the lab's idle kernel does). sep and persist are checked
// bitwise against each other over one layer. Weights rotate over 8 layers (3.5 GB, past L2). The
// question it answers: is the ~3.5 us per GEMV boundary (the tenth session's layer chain: 108.6
// us per layer for 94.2 us of bytes) what a persistent decode kernel would win back? And, from
// each block's globaltimer stamps in the PDL chain (timeline), where a boundary's time goes.
// LAB_ATTO=1 runs only the attention comparisons instead (run_atto): the engine's decode
// attention between QKV and o, against attention and o in one kernel (atto_kernel), against no
// attention, at contexts 128-1024, with a timeline of each block's stamps.
#include "../bandwidth.cu"
#include "../gemv.cu"
#include "../rope.cu" // ls_gemv_rope_kv falls back to ls_rope_kv
#include "../attention.cu"
#include "../attention_sm90.cu" // ls_attention_prefill calls its wgmma form
#include "lab.cuh"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <vector>

// LAB_EF (a build flag: LAB_EF=1 bash kernels/lab/run.sh): every weight load of the lab's
// kernels (not the engine's attention) with an L2 evict-first policy, so that the weights' stream
// does not push the KV cache and the activations out of L2
#ifndef LAB_EF
#define LAB_EF 0
#endif
static __device__ __forceinline__ uint64_t l2_evict_first()
{
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
static __device__ __forceinline__ uint4 ldw(const uint4 *p)
{
    if (!LAB_EF) return ld_weights(p);
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "l"(l2_evict_first()));
    return r;
}

extern "C" void ls_die(const char *file, int line, const char *call, const char *msg)
{
    fprintf(stderr, "persist_lab: %s:%d: %s: %s\n", file, line, call, msg);
    exit(1);
}

#define NT 1024
#define NW 32

static double g_roof; // GB/s, the streaming read measured first

// one matrix's split over the grid, for one block and thread (the column-resident GEMV's: warp
// (g, slot) owns columns slot, slot + slots of the rows g, g + G, ... of the block's range),
// kept to what the loop needs: the lane's first-row pointers per column, the row stride, the
// warp's row count and where its sums go in shared memory
struct geo {
    const uint4 *p[2]; // row g, this lane's chunk of column j (nullptr: none)
    int stride;        // G rows, in 16-byte chunks
    int my_rows;       // rows g, g + G, ... of the block's range
    int pbase, pstride; // psum index of row g, and per G rows
    int q[2];           // the chunks: x's inputs 8q .. 8q + 7 (-1: none)
    int g;              // the warp's row group (G groups of slots warps)
};

// the block's rows [r0, r0 + rows) and the slot count
static __device__ __forceinline__ void split(int n, int k, int &r0, int &rows, int &slots)
{
    const unsigned bi = blockIdx.x, gd = gridDim.x;
    r0 = (int)(bi * (unsigned)n / gd);
    rows = (int)((bi + 1) * (unsigned)n / gd) - r0;
    const int S = ((k >> 3) + 31) >> 5;
    slots = S < NW ? S : NW;
}

static __device__ __forceinline__ geo make_geo(const uint16_t *W, int n, int k)
{
    geo o;
    int r0, rows, slots;
    split(n, k, r0, rows, slots);
    const int K8 = k >> 3, S = (K8 + 31) >> 5;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int G = NW / slots, g = warp / slots, slot = warp - g * slots, ps = slots | 1;
    const bool active = g < G;
    o.my_rows = active && g < rows ? (rows - g + G - 1) / G : 0;
    o.stride = G * K8;
    o.pbase = g * ps + slot;
    o.g = g;
    o.pstride = G * ps;
    const uint4 *row = reinterpret_cast<const uint4 *>(W) + (size_t)(r0 + g) * K8;
    for (int j = 0; j < 2; j++) {
        const int c = slot + j * slots;
        const bool on = active && c < S && c * 32 + lane < K8;
        o.q[j] = on ? c * 32 + lane : -1;
        o.p[j] = on ? row + c * 32 + lane : nullptr;
    }
    return o;
}

// rows per batch: 4 of one column, or 1 of two (two such batches in flight: 64 KB per SM, as the
// mainline's form for k > 8192 keeps; two batches of 2 rows spill)
template <int CM> __host__ __device__ constexpr int rows_per_batch()
{
    return CM == 1 ? 4 : 1;
}

// the warp's rows first + i, i < U, CM columns each, into w[i * CM + j]
template <int CM>
static __device__ __forceinline__ void issue(const geo &o, uint4 (&w)[4], int first)
{
    constexpr int U = rows_per_batch<CM>();
#pragma unroll
    for (int i = 0; i < U; i++) {
        const int rl = first + i;
#pragma unroll
        for (int j = 0; j < CM; j++)
            w[i * CM + j] = rl < o.my_rows && o.p[j] ? ldw(o.p[j] + (size_t)rl * o.stride)
                                                     : make_uint4(0, 0, 0, 0);
    }
}

static __device__ __forceinline__ unsigned long long gtime()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// x through L2 only: in the persistent form another SM wrote it since this SM last read it
static __device__ __forceinline__ float4 ld_x(const float *p)
{
    return __ldcg(reinterpret_cast<const float4 *>(p));
}

// One matrix, batch 0 (and with PRE2, batch 1) already in a / b; two batches in flight (the
// mainline's TR form). Before the epilogue the next matrix's first
// batches are issued into a / b (nx: its geometry; none when nx_on is false). The epilogue
// writes y (ACC: y +=) after one barrier, in slot order.
// the next matrix, asked for after the loop (so that nothing of it is held through the loop)
struct next_mat {
    const uint16_t *W;
    int n, k;
    bool on;
};

// W, x, y: functors giving the pointers where they are used (the persistent kernel reads them
// from shared memory then, so no register holds them through the loop)
// NP > 0: x is the sum of NP + 1 vectors of k floats laid out one after another from x() (the
// residual, then the attention+o kernel's partial outputs, added in that order), and block 0's
// first row group writes the sum to xw (where the residual would go)
template <int CM, bool ACC, bool PRE2, int NCM, int NP = 0, typename Wf, typename Xf,
          typename Yf, typename Next>
static __device__ __forceinline__ void run_matrix(Wf W, int n, int k, uint4 (&a)[4],
                                                  uint4 (&b)[4], Xf x, Yf y, float *psum,
                                                  bool pre2_done, Next next,
                                                  unsigned long long *mark = nullptr,
                                                  float *xw = nullptr)
{
    constexpr int U = rows_per_batch<CM>();
    const int lane = threadIdx.x & 31;
    const geo o = make_geo(W(), n, k);
    if (!pre2_done && U < o.my_rows) issue<CM>(o, b, U);
    float4 xa[CM], xb[CM];
#pragma unroll
    for (int j = 0; j < CM; j++) {
        xa[j] = xb[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (o.q[j] >= 0) { // chunk q of the row: inputs 8q .. 8q + 7
            xa[j] = ld_x(x() + 8 * o.q[j]);
            xb[j] = ld_x(x() + 8 * o.q[j] + 4);
            if constexpr (NP > 0) {
#pragma unroll
                for (int p = 0; p < NP; p++) {
                    const float4 pa = ld_x(x() + (size_t)(p + 1) * k + 8 * o.q[j]);
                    const float4 pb = ld_x(x() + (size_t)(p + 1) * k + 8 * o.q[j] + 4);
                    xa[j].x += pa.x, xa[j].y += pa.y, xa[j].z += pa.z, xa[j].w += pa.w;
                    xb[j].x += pb.x, xb[j].y += pb.y, xb[j].z += pb.z, xb[j].w += pb.w;
                }
                if (blockIdx.x == 0 && o.g == 0) {
                    reinterpret_cast<float4 *>(xw + 8 * o.q[j])[0] = xa[j];
                    reinterpret_cast<float4 *>(xw + 8 * o.q[j])[1] = xb[j];
                }
            }
        }
    }
    // batch bi is in a when bi is even, in b when odd; batch bi + 2 goes where bi was (two
    // bodies a loop: registers cannot be picked at run time)
    auto body = [&](uint4(&w)[4], int bi) {
        float s[U];
#pragma unroll
        for (int i = 0; i < U; i++) {
            s[i] = 0.0f;
#pragma unroll
            for (int j = 0; j < CM; j++) s[i] = dot8(w[i * CM + j], xa[j], xb[j], s[i]);
        }
        if ((bi + 2) * U < o.my_rows) issue<CM>(o, w, (bi + 2) * U);
        const float t = warp_sum_rows<U>(s, lane);
        const int rl = bi * U + lane / (32 / U);
        if ((lane & (32 / U - 1)) == 0 && rl < o.my_rows) psum[o.pbase + rl * o.pstride] = t;
    };
    for (int bi = 0; bi * U < o.my_rows; bi += 2) {
        body(a, bi);
        if ((bi + 1) * U < o.my_rows) body(b, bi + 1);
    }
    // the next matrix's first batches: a is free once the last batch (in a or b) is summed
    // (or, for a Next that takes the two register sets, whatever it issues into them)
    if constexpr (std::is_invocable_v<Next, uint4(&)[4], uint4(&)[4]>) {
        next(a, b);
    } else {
        const next_mat nm = next();
        if (nm.on) {
            const geo nx = make_geo(nm.W, nm.n, nm.k);
            issue<NCM>(nx, a, 0);
            if (PRE2) issue<NCM>(nx, b, rows_per_batch<NCM>());
        }
    }
    __syncthreads();
    if (mark && threadIdx.x == 0) *mark = gtime(); // every warp's products done
    int r0, rows, slots;
    split(n, k, r0, rows, slots);
    const int ps = slots | 1;
    for (int r = threadIdx.x; r < rows; r += NT) {
        float sum = 0.0f;
        for (int c = 0; c < slots; c++) sum += psum[r * ps + c];
        float *yp = y() + r0 + r;
        *yp = ACC ? __ldcg(yp) + sum : sum;
    }
}

// the grid counter: a block arrives once per matrix; every block has arrived `phase` times
// when the counter reaches base + phase * gridDim.x
static __device__ __forceinline__ void grid_arrive(unsigned *ctr)
{
    __syncthreads(); // every thread's stores of this matrix issued
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(ctr, 1u);
    }
}

static __device__ __forceinline__ void grid_wait(const unsigned *ctr, unsigned target)
{
    if (threadIdx.x == 0) {
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
        } while ((int)(v - target) < 0);
    }
    __syncthreads();
}

static __device__ __forceinline__ void idle_for(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

struct layer_bufs {
    float *x, *qkv, *gu; // residual [4096], QKV out [nqkv], gate+up out [f2]
};

// a layer's shapes at TP ranks (M = 0: Llama-3.1-8B; 1: Llama-3.1-70B): QKV nqkv x d, o d x ko,
// gate+up f2 x d, down d x f; the down's columns per warp (cmd: 2 where k / 256 > 32 columns)
template <int TP, int M = 0> struct lsh {
    static constexpr int d = M ? 8192 : 4096, nqkv = (M ? 10240 : 6144) / TP, ko = d / TP,
                         f2 = (M ? 57344 : 28672) / TP, f = f2 / 2,
                         cmd = (f / 8 + 31) / 32 > 32 ? 2 : 1, hd = 128,
                         hq = (M ? 64 : 32) / TP, hkv = 8 / TP > 0 ? 8 / TP : 1;
    static constexpr size_t per =
        (size_t)nqkv * d + (size_t)d * ko + (size_t)f2 * d + (size_t)d * f;
    static constexpr const char *name = M ? "70B" : "8B";
};

// layer l's matrix m (QKV, o, gate+up, down), 8 layers' weights rotating; o reads the first ko
// QKV outputs, down the first f gate+up outputs (stand-ins for attention and SwiGLU)
template <int TP, int M>
static __host__ __device__ __forceinline__ const uint16_t *mat_w(const uint16_t *W, int l, int m)
{
    using S = lsh<TP, M>;
    const uint16_t *w = W + (size_t)(l % 8) * S::per;
    if (m >= 1) w += (size_t)S::nqkv * S::d;
    if (m >= 2) w += (size_t)S::d * S::ko;
    if (m >= 3) w += (size_t)S::f2 * S::d;
    return w;
}

// the persistent form: L layers, one block per SM, idle_ns of attention stand-in on the first
// 48 blocks between QKV and o (its own barrier phase)
template <bool PRE2, int TP, int M>
static __global__ void __launch_bounds__(NT, 1)
    persist_kernel(const uint16_t *__restrict__ W, layer_bufs bf, int L, unsigned *ctr,
                   unsigned base, unsigned long long idle_ns)
{
    using S = lsh<TP, M>;
    extern __shared__ float psum[];
    // the launch's parameters from shared memory where needed (volatile: not held in registers
    // across the matrices' loops, which need all 64)
    __shared__ const uint16_t *sW;
    __shared__ layer_bufs sb;
    __shared__ unsigned *sctr;
    __shared__ unsigned sbase;
    __shared__ unsigned long long sidle;
    __shared__ unsigned sphase; // matrices done (barrier phases), and the layer
    __shared__ int sl, sL;
    if (threadIdx.x == 0)
        sW = W, sb = bf, sctr = ctr, sbase = base, sidle = idle_ns, sphase = 0, sl = 0, sL = L;
    uint4 a[4], b[4];
    {
        const geo o = make_geo(mat_w<TP, M>(W, 0, 0), S::nqkv, S::d);
        issue<1>(o, a, 0);
        if (PRE2) issue<1>(o, b, 4);
    }
    __syncthreads();
#define P(v) (*(volatile decltype(v) *)&(v))
    // only thread 0 reads sphase outside the loop head (grid_wait's target), and sl and sphase
    // change only between barriers that every thread passes
    auto wait = [&] { grid_wait(P(sctr), P(sbase) + P(sphase) * gridDim.x); };
    auto arrive = [&] {
        grid_arrive(P(sctr));
        if (threadIdx.x == 0) P(sphase) = P(sphase) + 1;
    };
    // the next matrix of layer sl (m = 1, 2, 3), or the next layer's QKV (m = 4)
    auto nxt = [&](int m, int n, int k) {
        return [=] {
            const int l = P(sl) + (m == 4);
            return next_mat{mat_w<TP, M>(P(sW), l, m & 3), n, k, l < P(sL)};
        };
    };
    auto wl = [&](int m) { return [=] { return mat_w<TP, M>(P(sW), P(sl), m); }; };
    auto bx = [&] { return P(sb.x); };
    auto bqkv = [&] { return P(sb.qkv); };
    auto bgu = [&] { return P(sb.gu); };
    for (; P(sl) < P(sL);) {
        // QKV: x -> qkv
        if (P(sphase)) wait();
        run_matrix<1, false, PRE2, 1>(wl(0), S::nqkv, S::d, a, b, bx, bqkv, psum, PRE2,
                                      nxt(1, S::d, S::ko));
        arrive();
        if (P(sidle)) {
            wait();
            if (blockIdx.x < 48 && threadIdx.x == 0) idle_for(P(sidle));
            arrive();
        }
        // o: qkv[0..ko) -> x +=
        wait();
        run_matrix<1, true, PRE2, 1>(wl(1), S::d, S::ko, a, b, bqkv, bx, psum, PRE2,
                                     nxt(2, S::f2, S::d));
        arrive();
        // gate+up: x -> gu
        wait();
        run_matrix<1, false, PRE2, S::cmd>(wl(2), S::f2, S::d, a, b, bx, bgu, psum, PRE2,
                                           nxt(3, S::d, S::f));
        arrive();
        // down: gu[0..f) -> x +=
        wait();
        run_matrix<S::cmd, true, PRE2, 1>(wl(3), S::d, S::f, a, b, bgu, bx, psum, PRE2,
                                          nxt(4, S::nqkv, S::d));
        arrive();
        __syncthreads(); // every thread has read sl
        if (threadIdx.x == 0) P(sl) = P(sl) + 1;
        __syncthreads();
    }
#undef P
}

// the separate form: one matrix per kernel, PDL as the engine launches them. ts (or nullptr):
// this block's SM (%smid), then its globaltimer after the PDL wait, when its products are done
// and at its end, at ts[4 * blockIdx.x ..]
template <int CM, bool ACC>
static __global__ void __launch_bounds__(NT, 1)
    sep_kernel(const uint16_t *__restrict__ W, const float *x, float *y, int n, int k,
               unsigned long long *ts)
{
    extern __shared__ float psum[];
    uint4 a[4], b[4];
    pdl_launch_dependents();
    issue<CM>(make_geo(W, n, k), a, 0);
    pdl_wait();
    if (ts && threadIdx.x == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        ts[4 * blockIdx.x] = sm;
        ts[4 * blockIdx.x + 1] = gtime();
    }
    run_matrix<CM, ACC, false, CM>([=] { return W; }, n, k, a, b, [=] { return x; },
                                   [=] { return y; }, psum, false,
                                   [] { return next_mat{nullptr, 0, 0, false}; },
                                   ts ? ts + 4 * blockIdx.x + 2 : nullptr);
    if (ts) {
        __syncthreads();
        if (threadIdx.x == 0) ts[4 * blockIdx.x + 3] = gtime();
    }
}

// The gate+up and down GEMVs in one kernel (fgd), the down split along its inputs. A block
// computes its gate+up rows as the separate kernel does, takes the products of their two halves
// as its share of h (the lab's stand-in for the SwiGLU: h_j = gu[r0 + j] * gu[r0 + nh + j], nh =
// rows / 2) and multiplies them by the rows of the transposed down that those inputs meet (DT,
// f x d: row i holds input i's weights for every output; the block's rows are r0 / 2 ..
// r0 / 2 + nh), adding its partial output into x with float4 atomics. The down's first rows are
// issued before the gate+up epilogue (they do not depend on h), so the boundary between the two
// matrices (the release, the down's ramp and the slowest block's lag once) is gone; the price is
// the atomics (d floats a block) and a sum order that changes from run to run. A measurement,
// not a kernel for the engine: x is also the gate+up's input, read by every block right after
// its PDL wait, long before any block's atomics (one block per SM, all resident).
// FX: the partials added as 64-bit integers in units of 2^-32 into xacc instead of as floats
// into x: integer sums do not depend on the order, so the result is reproducible (the form an
// engine would need; what it costs is the question)
template <int D, bool FX>
static __global__ void __launch_bounds__(NT, 1)
    fgd_kernel(const uint16_t *__restrict__ Wgu, const uint16_t *__restrict__ DT, float *x,
               float *gu, int f2, int f, unsigned long long *xacc)
{
    extern __shared__ float psum[];
    __shared__ float hs[256];
    constexpr int C = D / 8;   // 16-byte chunks a DT row
    constexpr int RS = NT / C; // DT rows a pass of the block
    static_assert(NT % C == 0 && (RS == 1 || RS == 2), "one or two DT rows a pass");
    uint4 a[4], b[4];
    pdl_launch_dependents();
    issue<1>(make_geo(Wgu, f2, D), a, 0);
    pdl_wait();
    int r0, rows, slots;
    split(f2, D, r0, rows, slots);
    const int nh = rows / 2, base = r0 / 2;
    const int c = threadIdx.x % C, half = threadIdx.x / C;
    const uint4 *dt = reinterpret_cast<const uint4 *>(DT) + (size_t)base * C + c;
    // the thread's DT rows j = half + RS u; batch bi: u = 2 bi, 2 bi + 1 (in a when bi is even)
    auto issue_dt = [&](uint4(&w)[4], int bi) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int j = half + RS * (2 * bi + i);
            w[i] = j < nh && base + j < f ? ldw(dt + (size_t)j * C) : make_uint4(0, 0, 0, 0);
        }
    };
    run_matrix<1, false, false, 1>([=] { return Wgu; }, f2, D, a, b,
                                   [=] { return (const float *)x; }, [=] { return gu; }, psum,
                                   false,
                                   [&](uint4(&wa)[4], uint4(&wb)[4]) {
                                       issue_dt(wa, 0);
                                       issue_dt(wb, 1);
                                   });
    __syncthreads(); // the block's gu rows written
    for (int j = threadIdx.x; j < nh; j += NT)
        hs[j] = __ldcg(gu + r0 + j) * __ldcg(gu + r0 + nh + j);
    __syncthreads();
    float acc[8] = {};
    auto body = [&](uint4(&w)[4], int bi) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int j = half + RS * (2 * bi + i);
            if (j < nh) {
                const float h = hs[j];
                float wf[8];
                unpack8(w[i], wf);
#pragma unroll
                for (int e = 0; e < 8; e++) acc[e] = fmaf(h, wf[e], acc[e]);
            }
        }
        issue_dt(w, bi + 2);
    };
    const int nb = (nh + 2 * RS - 1) / (2 * RS);
    for (int bi = 0; bi < nb; bi += 2) {
        body(a, bi);
        if (bi + 1 < nb) body(b, bi + 1);
    }
    if (RS == 2) {
        if (half == 1)
            for (int e = 0; e < 8; e++) psum[c * 8 + e] = acc[e];
        __syncthreads();
        if (half == 1) return;
        for (int e = 0; e < 8; e++) acc[e] += psum[c * 8 + e];
    }
    if (FX) {
        for (int e = 0; e < 8; e++)
            atomicAdd(xacc + 8 * c + e, (unsigned long long)__float2ll_rn(acc[e] * 4294967296.0f));
    } else {
        atomicAdd(reinterpret_cast<float4 *>(x + 8 * c),
                  make_float4(acc[0], acc[1], acc[2], acc[3]));
        atomicAdd(reinterpret_cast<float4 *>(x + 8 * c + 4),
                  make_float4(acc[4], acc[5], acc[6], acc[7]));
    }
}

// fgd's down as one thread an output, in double, in the same blocks' rows: x += the partials
static __global__ void fgd_ref_down(const uint16_t *DT, float *x, const float *gu, int d, int f2,
                                    int f, int nblocks)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= d) return;
    double sum = 0;
    for (int bk = 0; bk < nblocks; bk++) {
        const int r0 = (int)((unsigned)bk * (unsigned)f2 / nblocks);
        const int rows = (int)((unsigned)(bk + 1) * (unsigned)f2 / nblocks) - r0;
        const int nh = rows / 2, base = r0 / 2;
        for (int j = 0; j < nh && base + j < f; j++)
            sum += (double)(gu[r0 + j] * gu[r0 + nh + j]) *
                   __uint_as_float((uint32_t)DT[(size_t)(base + j) * d + col] << 16);
    }
    x[col] += (float)sum;
}

// Attention and o in one kernel (atto): the o projection split along its inputs by q head, so
// that a block needs its own heads' attention output only, and the attention computed in the
// block that uses it. Block (part, quad), grid HQ / 4 x Q = 128 blocks: four q heads of one KV
// head, two a half of the block (their scores from the same K row loads, their outputs from the
// same V row loads), over the whole context (no split: short contexts only); then those heads'
// 512 columns of o for the part's R = D / Q rows, one row a warp a pass. The first STG rows are
// copied into shared memory (bulk copies, issued before the PDL wait), so that they move while
// the QKV kernel ends and the attention runs; the K rows of every position but the newest (which the QKV
// kernel writes) are loaded before the wait too. Clusters of 2 blocks (8 heads) add their row
// sums through distributed shared memory, each block half the rows, into the partial P[head / 8]
// (D floats, at x + (1 + head / 8) * D): HQ / 8 partials in all, which the next GEMV adds to the
// residual in a fixed order as it loads its input (run_matrix's NP). Reproducible: no atomics.
// Earlier forms ran as two waves: an H200 holds 15 clusters of 8 and 30 of 4 at once (one head
// a block in clusters of 8, then two heads a block in clusters of 4).
template <int HQ, int HKV, int D, int STG> struct atto_shape {
    static constexpr int HD = 128, Q = 512 / HQ, R = D / Q, ROW = 4 * HD, KO = HQ * HD;
    static constexpr int stg = STG < R ? STG : R, U = 2;
    // dynamic shared memory, in floats after the staged rows (bf16)
    static constexpr int o_sc = 0, o_red = o_sc + 4 * 1024, o_oh = o_red + 32 * 2 * HD,
                         o_op = o_oh + 4 * HD, o_wr = o_op + R, o_l = o_wr + 4 * 16, nf = o_l + 4;
    static constexpr size_t smem = (size_t)stg * ROW * 2 + (size_t)nf * 4;
    static_assert(HQ * Q == 512 && HQ % 8 == 0 && (HQ / HKV) % 4 == 0 && R % 32 == 0 &&
                      stg % 32 == 0 && ((R - stg) / 32) % U == 0 && (stg * ROW) % (8 * NT) == 0,
                  "128 blocks of four heads of one KV head, 8 heads a cluster of 2");
};

template <int HQ, int HKV, int D, int STG>
static __global__ void __launch_bounds__(NT, 1)
    atto_kernel(const uint16_t *__restrict__ Wo, const float *q, const uint16_t *kc,
                const uint16_t *vc, const int *pos, int max_ctx, float *x, unsigned long long *ts)
{
    using A = atto_shape<HQ, HKV, D, STG>;
    // ts (or nullptr): globaltimer at ts[8 b ..]: the block's start, the PDL wait passed, the
    // attention output in shared memory, the staged rows there, their products done, the
    // remainder's done, the end
    auto stamp = [&](int k) {
        if (ts && threadIdx.x == 0) ts[8 * blockIdx.x + k] = gtime();
    };
    stamp(0);
    constexpr int HD = A::HD, R = A::R, ROW = A::ROW, KO = A::KO, SG = A::stg, U = A::U;
    extern __shared__ __align__(16) uint8_t atto_smem[];
    uint16_t *stage = reinterpret_cast<uint16_t *>(atto_smem);
    float *f = reinterpret_cast<float *>(atto_smem + (size_t)SG * ROW * 2);
    float(*sc)[1024] = reinterpret_cast<float(*)[1024]>(f + A::o_sc);
    float *red = f + A::o_red, *oh = f + A::o_oh, *op = f + A::o_op, *lsum = f + A::o_l;
    float(*wr)[16] = reinterpret_cast<float(*)[16]>(f + A::o_wr);
    const int quad = blockIdx.x % (HQ / 4), part = blockIdx.x / (HQ / 4), h0 = 4 * quad;
    const int grp = threadIdx.x >> 9, tg = threadIdx.x & 511, hw = tg >> 4, l16 = threadIdx.x & 15,
              lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint16_t *orow = Wo + (size_t)part * R * KO + h0 * HD; // local row i at + i * KO
    pdl_launch_dependents();
    const int n = min(*pos, max_ctx - 1) + 1;
    const int kvh = h0 / (HQ / HKV);
    const uint4 *K = reinterpret_cast<const uint4 *>(kc + (size_t)kvh * max_ctx * HD) + l16;
    const uint4 *V = reinterpret_cast<const uint4 *>(vc + (size_t)kvh * max_ctx * HD) + l16;
    // the K and V rows first, ahead of the bulk copies in the memory queues
    uint4 kr[4], vr[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const int p = 32 * u + hw;
        kr[u] = p < n - 1 ? __ldcg(K + (size_t)p * (HD / 8)) : make_uint4(0, 0, 0, 0);
        vr[u] = p < n - 1 ? __ldcg(V + (size_t)p * (HD / 8)) : make_uint4(0, 0, 0, 0);
    }
    // the first SG rows into shared memory by the bulk-copy unit (one copy of 1 KB a row, issued
    // by the last warp, 4 a lane), completing on an mbarrier: no thread waits for them until the
    // products need them
    __shared__ __align__(8) uint64_t mbar;
    const unsigned bar = (unsigned)__cvta_generic_to_shared(&mbar);
    if (SG > 0) {
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
        if (warp == 31) {
            if (lane == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                             "r"(SG * ROW * 2)
                             : "memory");
            __syncwarp();
            for (int row = lane; row < SG; row += 32) {
                const unsigned dst = (unsigned)__cvta_generic_to_shared(stage + row * ROW);
                if (LAB_EF)
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                                 ".L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
                                 "l"(orow + (size_t)row * KO), "r"(ROW * 2), "r"(bar),
                                 "l"(l2_evict_first())
                                 : "memory");
                else
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                                 "[%0], [%1], %2, [%3];" ::"r"(dst),
                                 "l"(orow + (size_t)row * KO), "r"(ROW * 2), "r"(bar)
                                 : "memory");
            }
        }
    }
    pdl_wait();
    stamp(1);
    // this half's two heads: h0 + 2 grp, h0 + 2 grp + 1
    float4 qa[2], qb[2];
    const float qs = 1.4426950408889634f * rsqrtf((float)HD);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float4 *qp =
            reinterpret_cast<const float4 *>(q + (h0 + 2 * grp + h) * HD + 8 * l16);
        qa[h] = __ldcg(qp), qb[h] = __ldcg(qp + 1);
        qa[h].x *= qs, qa[h].y *= qs, qa[h].z *= qs, qa[h].w *= qs;
        qb[h].x *= qs, qb[h].y *= qs, qb[h].z *= qs, qb[h].w *= qs;
    }
    // scores (log2 units): position p by the half's half-warp p % 32, 4 rows in flight (loop
    // bounds the same for the whole warp: the shuffles need every lane)
    // rows p0 + 32 u + hw of K or V into r: the first pass has all but the newest from before
    // the wait
    auto rows = [&](uint4(&r)[4], const uint4 *B, int p0) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int p = p0 + 32 * u + hw;
            if (p0 > 0 || p == n - 1)
                r[u] = p < n ? __ldcg(B + (size_t)p * (HD / 8)) : make_uint4(0, 0, 0, 0);
        }
    };
    for (int p0 = 0; p0 < n; p0 += 4 * 32) {
        rows(kr, K, p0);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float s0 = dot8(kr[u], qa[0], qb[0], 0.0f), s1 = dot8(kr[u], qa[1], qb[1], 0.0f);
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) {
                s0 += __shfl_xor_sync(0xffffffffu, s0, o);
                s1 += __shfl_xor_sync(0xffffffffu, s1, o);
            }
            const int p = p0 + 32 * u + hw;
            if (l16 == 0 && p < n) sc[2 * grp][p] = s0, sc[2 * grp + 1][p] = s1;
        }
    }
    __syncthreads();
    stamp(7);
    // softmax of each head over its half's 16 warps: positions tg and tg + 512
    const int wg = warp & 15;
    float m[2], e[2][2], l[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float *sh = sc[2 * grp + h];
        m[h] = fmaxf(tg < n ? sh[tg] : -INFINITY, tg + 512 < n ? sh[tg + 512] : -INFINITY);
        for (int o = 16; o > 0; o >>= 1) m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], o));
        if (lane == 0) wr[2 * grp + h][wg] = m[h];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float *sh = sc[2 * grp + h];
        m[h] = lane < 16 ? wr[2 * grp + h][lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], o));
        e[h][0] = tg < n ? exp2f(sh[tg] - m[h]) : 0.0f;
        e[h][1] = tg + 512 < n ? exp2f(sh[tg + 512] - m[h]) : 0.0f;
        l[h] = e[h][0] + e[h][1];
        for (int o = 16; o > 0; o >>= 1) l[h] += __shfl_xor_sync(0xffffffffu, l[h], o);
    }
    __syncthreads(); // every thread has read wr and its scores
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (tg < n) sc[2 * grp + h][tg] = e[h][0];
        if (tg + 512 < n) sc[2 * grp + h][tg + 512] = e[h][1];
        if (lane == 0) wr[2 * grp + h][wg] = l[h];
    }
    __syncthreads();
    if (threadIdx.x < 4) {
        float t = 0.0f;
        for (int w = 0; w < 16; w++) t += wr[threadIdx.x][w];
        lsum[threadIdx.x] = t;
    }
    // the weighted V rows: dims 8 l16 .. 8 l16 + 7 of positions p % 32 == hw, both heads
    float acc[2][8] = {};
    for (int p0 = 0; p0 < n; p0 += 4 * 32) {
        rows(vr, V, p0);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int p = p0 + 32 * u + hw;
            const float w0 = p < n ? sc[2 * grp][p] : 0.0f, w1 = p < n ? sc[2 * grp + 1][p] : 0.0f;
            float vf[8];
            unpack8(vr[u], vf);
#pragma unroll
            for (int t = 0; t < 8; t++) {
                acc[0][t] = fmaf(w0, vf[t], acc[0][t]);
                acc[1][t] = fmaf(w1, vf[t], acc[1][t]);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int t = 0; t < 8; t++) acc[h][t] += __shfl_xor_sync(0xffffffffu, acc[h][t], 16);
    if (lane < 16)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int t = 0; t < 8; t++) red[warp * 2 * HD + h * HD + 8 * l16 + t] = acc[h][t];
    __syncthreads();
    if (threadIdx.x < 4 * HD) { // head hh = t / HD: half hh / 2, its head hh % 2
        const int hh = threadIdx.x / HD, g = hh >> 1, d = threadIdx.x % HD;
        float s = 0.0f;
        for (int v = 0; v < 16; v++) s += red[(16 * g + v) * 2 * HD + (hh & 1) * HD + d];
        oh[threadIdx.x] = s / lsum[hh];
    }
    if (ts) __syncthreads();
    stamp(2);
    // the remainder's first U passes (row i = pass * 32 + warp), before the staged rows
    uint4 w[U][2];
    auto grow = [&](int i) { return reinterpret_cast<const uint4 *>(orow + (size_t)i * KO) + lane; };
#pragma unroll
    for (int u = 0; u < U; u++)
        if (SG + u * 32 < R) w[u][0] = ldw(grow(SG + u * 32 + warp)), w[u][1] = ldw(grow(SG + u * 32 + warp) + 32);
    if (SG > 0)
        asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
                     " @!p bra W;\n}" ::"r"(bar)
                     : "memory");
    __syncthreads(); // oh
    stamp(3);
    const float4 oa0 = *reinterpret_cast<const float4 *>(oh + 8 * lane);
    const float4 ob0 = *reinterpret_cast<const float4 *>(oh + 8 * lane + 4);
    const float4 oa1 = *reinterpret_cast<const float4 *>(oh + 2 * HD + 8 * lane);
    const float4 ob1 = *reinterpret_cast<const float4 *>(oh + 2 * HD + 8 * lane + 4);
    for (int i = warp; i < SG; i += 32) {
        const uint4 lo = *reinterpret_cast<const uint4 *>(stage + i * ROW + 8 * lane);
        const uint4 hi = *reinterpret_cast<const uint4 *>(stage + i * ROW + 2 * HD + 8 * lane);
        const float s = warp_sum(dot8(hi, oa1, ob1, dot8(lo, oa0, ob0, 0.0f)));
        if (lane == 0) op[i] = s;
    }
    stamp(4);
    for (int i0 = SG; i0 < R; i0 += U * 32) {
        float s[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            s[u] = dot8(w[u][1], oa1, ob1, dot8(w[u][0], oa0, ob0, 0.0f));
            const int nx = i0 + (u + U) * 32;
            if (nx < R) w[u][0] = ldw(grow(nx + warp)), w[u][1] = ldw(grow(nx + warp) + 32);
        }
        const float t = warp_sum_rows<U>(s, lane);
        if ((lane & (32 / U - 1)) == 0) op[i0 + (lane / (32 / U)) * 32 + warp] = t;
    }
    // the cluster's 8 heads: block rank c adds rows c R/2 .. (c + 1) R/2 - 1 over the 2 blocks
    if (ts) __syncthreads();
    stamp(5);
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    const int c = (int)cl.block_rank();
    constexpr int SL = R / 2;
    const float *o0 = cl.map_shared_rank(op, 0), *o1 = cl.map_shared_rank(op, 1);
    for (int t = threadIdx.x; t < SL; t += NT)
        x[(size_t)(1 + h0 / 8) * D + (size_t)part * R + c * SL + t] = o0[c * SL + t] + o1[c * SL + t];
    cl.sync(); // no block leaves while another reads its op
    stamp(6);
}

// the GEMV after atto: gate+up with x = residual + the HQ / 8 partials (summed as loaded), block
// 0 writing that sum to xw
template <int NP>
static __global__ void __launch_bounds__(NT, 1)
    sep_np_kernel(const uint16_t *__restrict__ W, const float *x, float *y, int n, int k, float *xw)
{
    extern __shared__ float psum[];
    uint4 a[4], b[4];
    pdl_launch_dependents();
    issue<1>(make_geo(W, n, k), a, 0);
    pdl_wait();
    run_matrix<1, false, false, 1, NP>([=] { return W; }, n, k, a, b, [=] { return x; },
                                       [=] { return y; }, psum, false,
                                       [] { return next_mat{nullptr, 0, 0, false}; }, nullptr, xw);
}

static __global__ void idle_kernel(unsigned long long ns)
{
    pdl_launch_dependents();
    pdl_wait();
    idle_for(ns);
}

static __global__ void fill_x(float *p, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
}

// Where a kernel boundary's time goes, from each block's globaltimer stamps in a chain of 8
// layers (32 GEMVs, PDL; the last of 5 runs): per GEMV, relative to the previous GEMV's last
// block end (its grid's completion, near enough): when the first and the last block passed the
// PDL wait; the spread of the blocks' products-done times (min, median, max, from the first
// release); and the last block's end. The layers after the first are averaged per matrix. The
// timer's step is printed first (the smallest nonzero difference between stamps).
template <int TP, typename Run> static void timeline(int sms, Run run)
{
    const int layers = 8, K = 4 * layers;
    unsigned long long *ts;
    CHECK_CUDA(cudaMalloc(&ts, sizeof(unsigned long long) * 4 * sms * K));
    for (int r = 0; r < 5; r++) run(layers, ts);
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<unsigned long long> h((size_t)4 * sms * K);
    CHECK_CUDA(cudaMemcpy(h.data(), ts, sizeof(unsigned long long) * h.size(),
                          cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(ts));
    std::vector<unsigned long long> all;
    for (size_t i = 0; i < h.size(); i++)
        if (i % 4) all.push_back(h[i]); // the stamps, not the SM ids
    std::sort(all.begin(), all.end());
    unsigned long long step = ~0ull;
    for (size_t i = 1; i < all.size(); i++)
        if (all[i] > all[i - 1]) step = std::min(step, all[i] - all[i - 1]);
    static const char *names[4] = {"qkv", "o", "gate+up", "down"};
    // per matrix: sums over layers 1..7 of [first wait, last wait, done min, done median, done
    // max, end max] (ns, from the previous kernel's last end)
    double acc[4][6] = {};
    auto at = [&](int kk, int b, int f) { return (double)h[((size_t)kk * sms + b) * 4 + f]; };
    for (int kk = 4; kk < K; kk++) {
        double prev_end = 0;
        for (int b = 0; b < sms; b++) prev_end = std::max(prev_end, at(kk - 1, b, 3));
        std::vector<double> wait(sms), done(sms), end(sms);
        for (int b = 0; b < sms; b++) {
            wait[b] = at(kk, b, 1) - prev_end;
            done[b] = at(kk, b, 2) - prev_end;
            end[b] = at(kk, b, 3) - prev_end;
        }
        std::sort(wait.begin(), wait.end());
        std::sort(done.begin(), done.end());
        std::sort(end.begin(), end.end());
        const double v[6] = {wait[0], wait[sms - 1], done[0], done[sms / 2], done[sms - 1],
                             end[sms - 1]};
        for (int f = 0; f < 6; f++) acc[kk % 4][f] += v[f] / (layers - 1);
    }
    printf("TP=%d timeline (globaltimer step %llu ns), us from the previous GEMV's last block end: "
           "wait released first/last | products done min/median/max | last end\n",
           TP, step);
    for (int m = 0; m < 4; m++)
        printf("  %-8s %6.2f %6.2f | %6.2f %6.2f %6.2f | %6.2f\n", names[m], acc[m][0] / 1e3,
               acc[m][1] / 1e3, acc[m][2] / 1e3, acc[m][3] / 1e3, acc[m][4] / 1e3,
               acc[m][5] / 1e3);
    // Is a block's lag a property of its SM? Per matrix, each SM's lag (products done less the
    // launch's median) averaged over the odd and over the even layers, and the correlation of
    // the two across SMs (near 1: the same SMs are slow every time, and rows balanced by SM
    // speed could pay; near 0: the lag moves). Also how many launches put two blocks on one SM.
    int nsm = 0;
    for (size_t i = 0; i < h.size(); i += 4) nsm = std::max(nsm, (int)h[i] + 1);
    int shared = 0;
    for (int m = 0; m < 4; m++) {
        std::vector<double> half[2] = {std::vector<double>(nsm, 0.0), std::vector<double>(nsm, 0.0)};
        std::vector<int> cnt[2] = {std::vector<int>(nsm, 0), std::vector<int>(nsm, 0)};
        for (int l = 1; l < layers; l++) {
            const int kk = 4 * l + m;
            std::vector<double> done(sms);
            std::vector<int> seen(nsm, 0);
            for (int b = 0; b < sms; b++) done[b] = at(kk, b, 2);
            std::vector<double> sorted(done);
            std::sort(sorted.begin(), sorted.end());
            const double med = sorted[sms / 2];
            for (int b = 0; b < sms; b++) {
                const int sm = (int)at(kk, b, 0);
                shared += seen[sm]++ == 1;
                half[l & 1][sm] += (done[b] - med) / 1e3;
                cnt[l & 1][sm]++;
            }
        }
        std::vector<std::pair<double, int>> mean;
        double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
        int np = 0;
        for (int sm = 0; sm < nsm; sm++) {
            if (!cnt[0][sm] || !cnt[1][sm]) continue;
            const double a = half[0][sm] / cnt[0][sm], b = half[1][sm] / cnt[1][sm];
            sa += a, sb += b, saa += a * a, sbb += b * b, sab += a * b, np++;
            mean.push_back({(half[0][sm] + half[1][sm]) / (cnt[0][sm] + cnt[1][sm]), sm});
        }
        const double cov = sab / np - sa / np * sb / np, va = saa / np - sa / np * sa / np,
                     vb = sbb / np - sb / np * sb / np;
        std::sort(mean.begin(), mean.end());
        printf("  %-8s per-SM lag behind the median, odd vs even layers: r = %.2f over %d SMs; "
               "slowest",
               names[m], va > 0 && vb > 0 ? cov / sqrt(va * vb) : 0.0, np);
        for (int i = 0; i < 5 && i < (int)mean.size(); i++)
            printf(" %d:%+.2f", mean[mean.size() - 1 - i].second,
                   mean[mean.size() - 1 - i].first);
        printf("; fastest");
        for (int i = 0; i < 3 && i < (int)mean.size(); i++)
            printf(" %d:%+.2f", mean[i].second, mean[i].first);
        printf(" (us)\n");
    }
    printf("  launches with two blocks on one SM: %d\n", shared);
    fflush(stdout);
}

// dynamic shared memory of the sep kernels over a layer's four matrices: the most a matrix
// needs, its rows a block x the odd slot stride
template <int TP, int M> static size_t layer_smem(int sms)
{
    using S = lsh<TP, M>;
    auto need = [&](int n, int k) {
        return (size_t)((n + sms - 1) / sms) * (std::min(NW, (k / 8 + 31) / 32) | 1) *
               sizeof(float);
    };
    return std::max(std::max(need(S::nqkv, S::d), need(S::d, S::ko)),
                    std::max(need(S::f2, S::d), need(S::d, S::f)));
}

// the bitwise check and the timings at one TP degree's shapes; false when a check failed
template <int TP, int M>
static bool run_tp(int sms, uint16_t *W, float *x, float *qkv, float *gu, unsigned *ctr,
                   unsigned &base, unsigned long long *xacc)
{
    using S = lsh<TP, M>;
    const int L = 8;
    const layer_bufs bf = {x, qkv, gu};
    const size_t smem = layer_smem<TP, M>(sms);
    for (const void *fn :
         {(const void *)persist_kernel<false, TP, M>, (const void *)persist_kernel<true, TP, M>,
          (const void *)sep_kernel<1, false>, (const void *)sep_kernel<1, true>,
          (const void *)sep_kernel<S::cmd, true>})
        CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    const size_t fsmem = std::max(smem, (size_t)S::d * sizeof(float));
    for (const void *fn :
         {(const void *)fgd_kernel<S::d, false>, (const void *)fgd_kernel<S::d, true>})
        CHECK_CUDA(
            cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fsmem));
    auto persist = [&](bool pre2, int layers, unsigned long long idle) {
        // 4 or 5 arrivals per layer per block; base: the counter's value at this launch
        const unsigned per = (idle ? 5u : 4u) * (unsigned)layers * (unsigned)sms;
        void *args[] = {(void *)&W, (void *)&bf, (void *)&layers, (void *)&ctr, (void *)&base,
                        (void *)&idle};
        const void *fn = pre2 ? (const void *)persist_kernel<true, TP, M>
                              : (const void *)persist_kernel<false, TP, M>;
        CHECK_CUDA(cudaLaunchCooperativeKernel(fn, dim3(sms), dim3(NT), args, smem, 0));
        base += per;
    };
    // ts (or nullptr): 4 timestamps per block per kernel, kernel after kernel (the idle kernel
    // is not stamped)
    auto sep = [&](int layers, unsigned long long idle, unsigned long long *ts = nullptr) {
        ls_pdl_on = 1;
        auto stamp = [&](int l, int m) { return ts ? ts + (size_t)(4 * l + m) * 4 * sms : ts; };
        for (int l = 0; l < layers; l++) {
            pdl_launch(sep_kernel<1, false>, sms, NT, smem, (cudaStream_t)0, mat_w<TP, M>(W, l, 0),
                       (const float *)x, qkv, S::nqkv, S::d, stamp(l, 0));
            if (idle) pdl_launch(idle_kernel, 48, 128, (size_t)16 << 10, (cudaStream_t)0, idle);
            pdl_launch(sep_kernel<1, true>, sms, NT, smem, (cudaStream_t)0, mat_w<TP, M>(W, l, 1),
                       (const float *)qkv, x, S::d, S::ko, stamp(l, 1));
            pdl_launch(sep_kernel<1, false>, sms, NT, smem, (cudaStream_t)0, mat_w<TP, M>(W, l, 2),
                       (const float *)x, gu, S::f2, S::d, stamp(l, 2));
            pdl_launch(sep_kernel<S::cmd, true>, sms, NT, smem, (cudaStream_t)0,
                       mat_w<TP, M>(W, l, 3), (const float *)gu, x, S::d, S::f, stamp(l, 3));
        }
        ls_pdl_on = 0;
    };
    // QKV, o and gate+up with down in one kernel (fgd_kernel), PDL
    auto fused = [&](int layers, unsigned long long idle, bool fx) {
        ls_pdl_on = 1;
        for (int l = 0; l < layers; l++) {
            pdl_launch(sep_kernel<1, false>, sms, NT, smem, (cudaStream_t)0, mat_w<TP, M>(W, l, 0),
                       (const float *)x, qkv, S::nqkv, S::d, (unsigned long long *)nullptr);
            if (idle) pdl_launch(idle_kernel, 48, 128, (size_t)16 << 10, (cudaStream_t)0, idle);
            pdl_launch(sep_kernel<1, true>, sms, NT, smem, (cudaStream_t)0, mat_w<TP, M>(W, l, 1),
                       (const float *)qkv, x, S::d, S::ko, (unsigned long long *)nullptr);
            pdl_launch(fx ? fgd_kernel<S::d, true> : fgd_kernel<S::d, false>, sms, NT, fsmem,
                       (cudaStream_t)0, mat_w<TP, M>(W, l, 2), mat_w<TP, M>(W, l, 3), x, gu, S::f2,
                       S::f, xacc);
        }
        ls_pdl_on = 0;
    };

    // bitwise: one and two layers each way from the same x, every output poisoned first
    const int D = S::d, NQKV = S::nqkv, F2 = S::f2;
    std::vector<float> hs(D + NQKV + F2), hp(D + NQKV + F2);
    auto grab = [&](std::vector<float> &h) {
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(h.data(), x, sizeof(float) * D, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(h.data() + D, qkv, sizeof(float) * NQKV, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(h.data() + D + NQKV, gu, sizeof(float) * F2, cudaMemcpyDeviceToHost));
    };
    auto reset = [&] {
        fill_x<<<16, 256>>>(x, D);
        CHECK_CUDA(cudaMemset(qkv, 0xff, sizeof(float) * NQKV));
        CHECK_CUDA(cudaMemset(gu, 0xff, sizeof(float) * F2));
    };
    bool ok = true;
    for (int pre2 = 0; pre2 < 2; pre2++)
        for (int layers = 1; layers <= 2; layers++) {
            reset();
            sep(layers, 0);
            grab(hs);
            reset();
            persist(pre2, layers, 0);
            grab(hp);
            size_t diff = 0, finite = 0;
            for (size_t i = 0; i < hs.size(); i++) {
                diff += memcmp(&hs[i], &hp[i], 4) != 0;
                finite += isfinite(hs[i]);
            }
            printf("TP=%d bitwise check, %d layer(s), persist%s: %zu of %zu outputs differ (%zu "
                   "finite)\n",
                   TP, layers, pre2 ? " pre2" : "", diff, hs.size(), finite);
            ok = ok && diff == 0 && finite == hs.size();
        }

    // fgd against its reference: gu bitwise (the same gate+up code), x within 1e-5 (atomics
    // in any order against a sum in double)
    {
        std::vector<float> hf(D + F2), hr(D + F2);
        auto grab2 = [&](std::vector<float> &h) {
            CHECK_CUDA(cudaDeviceSynchronize());
            CHECK_CUDA(cudaMemcpy(h.data(), x, sizeof(float) * D, cudaMemcpyDeviceToHost));
            CHECK_CUDA(cudaMemcpy(h.data() + D, gu, sizeof(float) * F2, cudaMemcpyDeviceToHost));
        };
        reset();
        fgd_kernel<S::d, false><<<sms, NT, fsmem>>>(mat_w<TP, M>(W, 0, 2), mat_w<TP, M>(W, 0, 3), x,
                                                    gu, S::f2, S::f, xacc);
        CHECK_CUDA(cudaGetLastError());
        grab2(hf);
        // the fixed-point form, twice: the same bits each time
        std::vector<unsigned long long> acc1(D), acc2(D);
        for (auto *acc : {&acc1, &acc2}) {
            reset();
            CHECK_CUDA(cudaMemset(xacc, 0, sizeof(unsigned long long) * D));
            fgd_kernel<S::d, true><<<sms, NT, fsmem>>>(mat_w<TP, M>(W, 0, 2), mat_w<TP, M>(W, 0, 3),
                                                       x, gu, S::f2, S::f, xacc);
            CHECK_CUDA(cudaGetLastError());
            CHECK_CUDA(cudaDeviceSynchronize());
            CHECK_CUDA(cudaMemcpy(acc->data(), xacc, sizeof(unsigned long long) * D,
                                  cudaMemcpyDeviceToHost));
        }
        reset();
        sep_kernel<1, false><<<sms, NT, smem>>>(mat_w<TP, M>(W, 0, 2), x, gu, S::f2, S::d, nullptr);
        fgd_ref_down<<<(D + 127) / 128, 128>>>(mat_w<TP, M>(W, 0, 3), x, gu, D, S::f2, S::f, sms);
        CHECK_CUDA(cudaGetLastError());
        grab2(hr);
        size_t gdiff = 0;
        double e2 = 0, r2 = 0, d2 = 0;
        std::vector<float> x0(D);
        fill_x<<<16, 256>>>(x, D);
        CHECK_CUDA(cudaMemcpy(x0.data(), x, sizeof(float) * D, cudaMemcpyDeviceToHost));
        for (int i = 0; i < F2; i++) gdiff += memcmp(&hf[D + i], &hr[D + i], 4) != 0;
        for (int i = 0; i < D; i++) {
            e2 += ((double)hf[i] - hr[i]) * ((double)hf[i] - hr[i]);
            r2 += (double)hr[i] * hr[i];
            d2 += ((double)hr[i] - x0[i]) * ((double)hr[i] - x0[i]);
        }
        const double rel = sqrt(e2 / (r2 > 0 ? r2 : 1)), drel = sqrt(e2 / (d2 > 0 ? d2 : 1));
        double f2e = 0;
        for (int i = 0; i < D; i++) {
            const double v = (double)x0[i] + (double)(long long)acc1[i] / 4294967296.0 - hr[i];
            f2e += v * v;
        }
        const double frel = sqrt(f2e / (d2 > 0 ? d2 : 1));
        const bool same = acc1 == acc2;
        printf("%s TP=%d fused gate+up+down: gu %zu of %d differ; x ||out-ref||/||ref|| = %.2e "
               "(%.2e of the down's part, whose norm is %.3g); fixed point %.2e of the down's "
               "part, two runs %s\n",
               S::name, TP, gdiff, F2, rel, drel, sqrt(d2), frel,
               same ? "bitwise equal" : "DIFFERENT");
        ok = ok && gdiff == 0 && rel < 1e-5 && d2 > 0 && drel < 1e-4 && frel < 1e-4 && same;
    }

    const double bytes = (double)S::per * 2;
    printf("one %s TP=%d layer's four GEMVs, %d layers' weights rotating, us per layer (%.1f MB, "
           "%.2f us at the roofline):\n",
           S::name, TP, L, bytes / 1e6, bytes / g_roof / 1e3);
    for (unsigned long long idle : {0ull, 8000ull}) {
        // 8 layers per launch for the persistent kernel (a step has 32); sep the same 8
        reset();
        const float s = time_ms(30, 1, [&](int) { sep(L, idle); }) / L;
        const float p1 = time_ms(30, 1, [&](int) { persist(false, L, idle); }) / L;
        const float p2 = time_ms(30, 1, [&](int) { persist(true, L, idle); }) / L;
        const float p32 = time_ms(10, 1, [&](int) { persist(false, 4 * L, idle); }) / (4 * L);
        const float fu = time_ms(30, 1, [&](int) { fused(L, idle, false); }) / L;
        CHECK_CUDA(cudaMemset(xacc, 0, sizeof(unsigned long long) * S::d));
        const float fx = time_ms(30, 1, [&](int) { fused(L, idle, true); }) / L;
        printf("  TP=%d idle %4.1f us between QKV and o: sep (PDL) %7.2f | persist %7.2f | "
               "persist pre2 %7.2f | persist, 32 layers a launch %7.2f | gate+up+down fused "
               "%7.2f, fixed point %7.2f\n",
               TP, idle / 1e3, s * 1e3, p1 * 1e3, p2 * 1e3, p32 * 1e3, fu * 1e3, fx * 1e3);
        fflush(stdout);
    }
    timeline<TP>(sms, [&](int layers, unsigned long long *ts) { sep(layers, 0, ts); });
    return ok;
}

// Attention and o: QKV -> attention (the engine's decode kernel) -> o -> gate+up -> down, with
// PDL, against QKV -> atto -> gate+up adding atto's partials -> down, at contexts n (8 layers'
// weights and KV caches rotating); the sum x = residual + o(attention) checked against each
// other first. Also the four GEMVs with no attention (o reading q), as in run_tp.
template <int TP, int M>
static bool run_atto(int sms, uint16_t *W, float *qkv, float *gu)
{
    using S = lsh<TP, M>;
    constexpr int D = S::d, HQ = S::hq, HKV = S::hkv, HD = S::hd, KO = S::ko, NP = HQ / 8;
    constexpr int MAXC = 1024, L = 8, LKV = 32; // KV caches of 32 layers, as the 8B's
    static_assert(HQ * HD == KO, "o's inputs are the q heads");
    float *xb, *xw, *att, *ws;
    uint16_t *kv;
    int *pos;
    const size_t cache = (size_t)HKV * MAXC * HD; // one layer's K (or V), elements
    CHECK_CUDA(cudaMalloc(&xb, sizeof(float) * D * (1 + NP)));
    CHECK_CUDA(cudaMalloc(&xw, sizeof(float) * D));
    CHECK_CUDA(cudaMalloc(&att, sizeof(float) * KO));
    CHECK_CUDA(cudaMalloc(&kv, sizeof(uint16_t) * cache * 2 * LKV));
    CHECK_CUDA(cudaMalloc(&pos, sizeof(int)));
    fill_bf16<<<1024, 256>>>(kv, cache * 2 * LKV, 77);
    const int nsplit = ls_attention_decode_splits(HQ, HKV, MAXC);
    const size_t wsb = ls_attention_decode_workspace(HQ, HD, nsplit);
    CHECK_CUDA(cudaMalloc(&ws, wsb ? wsb : 4));
    CHECK_CUDA(cudaMemset(ws, 0, wsb ? wsb : 4));
    int kvl = 0; // the chain's layers take the caches in turn, across calls
    auto kc = [&](int l) { return kv + (size_t)((kvl + l) % LKV) * 2 * cache; };
    auto vc = [&](int l) { return kv + (size_t)((kvl + l) % LKV) * 2 * cache + cache; };
    const size_t smem = layer_smem<TP, M>(sms);
    for (const void *fn : {(const void *)sep_kernel<1, false>, (const void *)sep_kernel<1, true>,
                           (const void *)sep_kernel<S::cmd, true>, (const void *)sep_np_kernel<NP>})
        CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    using A1 = atto_shape<HQ, HKV, D, 128>;
    using A0 = atto_shape<HQ, HKV, D, 64>;
    CHECK_CUDA(cudaFuncSetAttribute(atto_kernel<HQ, HKV, D, 128>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)A1::smem));
    CHECK_CUDA(cudaFuncSetAttribute(atto_kernel<HQ, HKV, D, 64>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)A0::smem));
    {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(128);
        cfg.blockDim = dim3(NT);
        cfg.dynamicSmemBytes = A1::smem;
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = 2, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        int clusters = 0;
        CHECK_CUDA(cudaOccupancyMaxActiveClusters(&clusters, atto_kernel<HQ, HKV, D, 128>, &cfg));
        printf("%s TP=%d atto: 128 blocks of 4 heads in clusters of 2, %d clusters resident at "
               "once (64 needed for one wave); %d rows a block, %d staged (%zu bytes of shared "
               "memory); %d partials; engine attention nsplit %d\n",
               S::name, TP, clusters, A1::R, A1::stg, A1::smem, NP, nsplit);
    }
    const cudaStream_t st = 0;
    auto qkv_k = [&](int l, unsigned long long *ts = nullptr) {
        pdl_launch(sep_kernel<1, false>, sms, NT, smem, st, mat_w<TP, M>(W, l, 0), (const float *)xb,
                   qkv, S::nqkv, S::d, ts);
    };
    auto tail = [&](int l, bool np) {
        if (np)
            pdl_launch(sep_np_kernel<NP>, sms, NT, smem, st, mat_w<TP, M>(W, l, 2), (const float *)xb,
                       gu, S::f2, S::d, xw);
        else
            pdl_launch(sep_kernel<1, false>, sms, NT, smem, st, mat_w<TP, M>(W, l, 2),
                       (const float *)xb, gu, S::f2, S::d, (unsigned long long *)nullptr);
        pdl_launch(sep_kernel<S::cmd, true>, sms, NT, smem, st, mat_w<TP, M>(W, l, 3),
                   (const float *)gu, xb, S::d, S::f, (unsigned long long *)nullptr);
    };
    // form 0: the engine's attention then o; 1: atto (128 rows staged); 2: atto (64); 3: no
    // attention (o reads q); upto: 1 QKV, 2 attention (+ o for atto), 3 o, 4 the whole layer
    auto chain = [&](int form, int layers, int upto, unsigned long long *tsq = nullptr,
                     unsigned long long *tsa = nullptr, unsigned long long *tso = nullptr) {
        ls_pdl_on = 1;
        for (int l = 0; l < layers; l++) {
            qkv_k(l, tsq ? tsq + (size_t)l * 4 * sms : tsq);
            if (upto < 2) continue;
            const uint16_t *wo = mat_w<TP, M>(W, l, 1);
            if (form == 0) {
                ls_attention_decode(att, qkv, kc(l), vc(l), pos, HQ, HKV, HD, MAXC, nsplit, 0, 1,
                                    ws, st);
                if (upto >= 3)
                    pdl_launch(sep_kernel<1, true>, sms, NT, smem, st, wo, (const float *)att, xb,
                               S::d, S::ko, tso ? tso + (size_t)l * 4 * sms : tso);
            } else if (form == 3) {
                pdl_launch(sep_kernel<1, true>, sms, NT, smem, st, wo, (const float *)qkv, xb, S::d,
                           S::ko, (unsigned long long *)nullptr);
            } else {
                pdl_launch_cluster(form == 1 ? atto_kernel<HQ, HKV, D, 128>
                                             : atto_kernel<HQ, HKV, D, 64>,
                                   dim3(128), dim3(NT), form == 1 ? A1::smem : A0::smem, st, 2u,
                                   wo, (const float *)qkv,
                                   (const uint16_t *)kc(l), (const uint16_t *)vc(l),
                                   (const int *)pos, MAXC, xb, tsa ? tsa + (size_t)l * 8 * 128 : tsa);
            }
            if (upto >= 4) tail(l, form == 1 || form == 2);
        }
        kvl = (kvl + layers) % LKV;
        ls_pdl_on = 0;
    };
    auto set_pos = [&](int n) {
        const int p = n - 1;
        CHECK_CUDA(cudaMemcpy(pos, &p, sizeof p, cudaMemcpyHostToDevice));
    };
    bool ok = true;
    // the check: x after one layer's QKV, attention and o each way (atto's through the next
    // GEMV's load, written to xw)
    for (int n : {1, 37, 256, 1000}) {
        set_pos(n);
        std::vector<float> x0(D), ha(D), hb(D);
        fill_x<<<16, 256>>>(xb, D);
        CHECK_CUDA(cudaMemcpy(x0.data(), xb, sizeof(float) * D, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemset(att, 0xff, sizeof(float) * KO));
        const int kv0 = kvl;
        chain(0, 1, 3);
        kvl = kv0; // atto below reads the same layer's cache
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(ha.data(), xb, sizeof(float) * D, cudaMemcpyDeviceToHost));
        fill_x<<<16, 256>>>(xb, D);
        CHECK_CUDA(cudaMemset(xb + D, 0xff, sizeof(float) * D * NP));
        CHECK_CUDA(cudaMemset(xw, 0xff, sizeof(float) * D));
        ls_pdl_on = 1;
        qkv_k(0);
        pdl_launch_cluster(atto_kernel<HQ, HKV, D, 128>, dim3(128), dim3(NT), A1::smem, st, 2u,
                           mat_w<TP, M>(W, 0, 1), (const float *)qkv, (const uint16_t *)kc(0),
                           (const uint16_t *)vc(0), (const int *)pos, MAXC, xb,
                           (unsigned long long *)nullptr);
        pdl_launch(sep_np_kernel<NP>, sms, NT, smem, st, mat_w<TP, M>(W, 0, 2), (const float *)xb,
                   gu, S::f2, S::d, xw);
        ls_pdl_on = 0;
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(hb.data(), xw, sizeof(float) * D, cudaMemcpyDeviceToHost));
        double e2 = 0, d2 = 0;
        size_t finite = 0;
        for (int i = 0; i < D; i++) {
            e2 += ((double)hb[i] - ha[i]) * ((double)hb[i] - ha[i]);
            d2 += ((double)ha[i] - x0[i]) * ((double)ha[i] - x0[i]);
            finite += std::isfinite(hb[i]) && std::isfinite(ha[i]);
        }
        const double rel = sqrt(e2 / (d2 > 0 ? d2 : 1));
        printf("%s TP=%d atto check, context %d: ||atto - (attention, o)|| / ||o part|| = %.2e "
               "(o part norm %.3g, %zu of %d finite)\n",
               S::name, TP, n, rel, sqrt(d2), finite, D);
        ok = ok && rel < 1e-4 && d2 > 0 && finite == (size_t)D;
    }
    const double bytes = (double)S::per * 2;
    printf("%s TP=%d layer with attention, us per layer (%.1f MB of weights, %.2f us at the "
           "roofline); QKV alone / + attention / + o / whole layer:\n",
           S::name, TP, bytes / 1e6, bytes / g_roof / 1e3);
    for (int n : {128, 256, 512, 1024}) {
        set_pos(n);
        fill_x<<<16, 256>>>(xb, D);
        CHECK_CUDA(cudaMemset(xb + D, 0, sizeof(float) * D * NP));
        float t[4][4];
        for (int form = 0; form < 4; form++)
            for (int upto = 1; upto <= 4; upto++)
                t[form][upto - 1] =
                    time_ms(30, 1, [&](int) { chain(form, L, upto); }) / L * 1e3f;
        printf("  context %4d: attention, o %7.2f %7.2f %7.2f %7.2f | atto %7.2f %7.2f - %7.2f | "
               "atto, 64 staged %7.2f %7.2f - %7.2f | no attention %7.2f - %7.2f %7.2f\n",
               n, t[0][0], t[0][1], t[0][2], t[0][3], t[1][0], t[1][1], t[1][3], t[2][0], t[2][1],
               t[2][3], t[3][0], t[3][2], t[3][3]);
        fflush(stdout);
    }
    // where atto's time goes: each block's stamps over 8 whole layers (the last of 3 runs),
    // layers 1..7 averaged, us from the QKV kernel's last block end: atto's first / last wait
    // release, attention output ready (median / max), staged rows done, remainder done, last end;
    // and the engine's o after its attention: first / last wait release, products done
    // (median / max), last end
    {
        unsigned long long *tq, *ta, *to;
        CHECK_CUDA(cudaMalloc(&tq, sizeof(unsigned long long) * 4 * sms * L));
        CHECK_CUDA(cudaMalloc(&ta, sizeof(unsigned long long) * 8 * 128 * L));
        CHECK_CUDA(cudaMalloc(&to, sizeof(unsigned long long) * 4 * sms * L));
        std::vector<unsigned long long> hq((size_t)4 * sms * L), ha((size_t)8 * 128 * L),
            ho((size_t)4 * sms * L);
        auto med = [](std::vector<double> v, bool mx) {
            std::sort(v.begin(), v.end());
            return mx ? v.back() : v[v.size() / 2];
        };
        for (int n : {128, 256}) {
            set_pos(n);
            double A[12] = {}, B[5] = {};
            for (int form : {1, 0}) {
                for (int r = 0; r < 3; r++) chain(form, L, 4, tq, form ? ta : nullptr, form ? nullptr : to);
                CHECK_CUDA(cudaDeviceSynchronize());
                CHECK_CUDA(cudaMemcpy(hq.data(), tq, 8 * hq.size(), cudaMemcpyDeviceToHost));
                if (form)
                    CHECK_CUDA(cudaMemcpy(ha.data(), ta, 8 * ha.size(), cudaMemcpyDeviceToHost));
                else
                    CHECK_CUDA(cudaMemcpy(ho.data(), to, 8 * ho.size(), cudaMemcpyDeviceToHost));
                for (int l = 1; l < L; l++) {
                    double t0 = 0;
                    for (int b = 0; b < sms; b++) t0 = std::max(t0, (double)hq[(size_t)l * 4 * sms + 4 * b + 3]);
                    if (form) {
                        std::vector<double> v[8];
                        for (int b = 0; b < 128; b++)
                            for (int k = 0; k < 8; k++)
                                v[k].push_back(((double)ha[(size_t)l * 8 * 128 + 8 * b + k] - t0) / 1e3);
                        const double r[12] = {*std::min_element(v[0].begin(), v[0].end()),
                                              med(v[0], true),
                                              *std::min_element(v[1].begin(), v[1].end()),
                                              med(v[1], true), med(v[2], false), med(v[2], true),
                                              med(v[3], true), med(v[4], true), med(v[5], false),
                                              med(v[5], true), med(v[6], true),
                                              med(v[7], false)};
                        for (int k = 0; k < 12; k++) A[k] += r[k] / (L - 1);
                    } else {
                        std::vector<double> v[4];
                        for (int b = 0; b < sms; b++)
                            for (int k = 1; k < 4; k++)
                                v[k].push_back(((double)ho[(size_t)l * 4 * sms + 4 * b + k] - t0) / 1e3);
                        const double r[5] = {*std::min_element(v[1].begin(), v[1].end()),
                                             med(v[1], true), med(v[2], false), med(v[2], true),
                                             med(v[3], true)};
                        for (int k = 0; k < 5; k++) B[k] += r[k] / (L - 1);
                    }
                }
            }
            printf("  timeline at context %d, us from QKV's last block end: atto start %.2f-%.2f, "
                   "wait %.2f-%.2f, scores %.2f, attention done %.2f (max %.2f), staged rows in max %.2f, "
                   "their products max %.2f, rest done %.2f (max %.2f), end %.2f | attention then "
                   "o: o wait %.2f-%.2f, products %.2f (max %.2f), end %.2f\n",
                   n, A[0], A[1], A[2], A[3], A[11], A[4], A[5], A[6], A[7], A[8], A[9], A[10], B[0],
                   B[1], B[2], B[3], B[4]);
        }
        CHECK_CUDA(cudaFree(tq));
        CHECK_CUDA(cudaFree(ta));
        CHECK_CUDA(cudaFree(to));
    }
    CHECK_CUDA(cudaFree(xb));
    CHECK_CUDA(cudaFree(xw));
    CHECK_CUDA(cudaFree(att));
    CHECK_CUDA(cudaFree(kv));
    CHECK_CUDA(cudaFree(pos));
    CHECK_CUDA(cudaFree(ws));
    return ok;
}

int main(void)
{
    CHECK_CUDA(cudaSetDevice(0));
    const ls_device di = ls_device_get();
    int coop = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, di.id));
    if (!coop) ls_die(__FILE__, __LINE__, "main", "the device has no cooperative launch");
    uint16_t *W;
    float *x, *qkv, *gu;
    unsigned *ctr;
    unsigned long long *xacc;
    // room for the larger of the 8B TP=1 and 70B TP=2 layers
    using S = lsh<1, 0>;
    using S7 = lsh<2, 1>;
    const size_t per = std::max(S::per, S7::per);
    CHECK_CUDA(cudaMalloc(&W, per * 2 * 8));
    CHECK_CUDA(cudaMalloc(&x, sizeof(float) * S7::d));
    CHECK_CUDA(cudaMalloc(&xacc, sizeof(unsigned long long) * S7::d));
    CHECK_CUDA(cudaMalloc(&qkv, sizeof(float) * std::max(S::nqkv, S7::nqkv)));
    CHECK_CUDA(cudaMalloc(&gu, sizeof(float) * std::max(S::f2, S7::f2)));
    CHECK_CUDA(cudaMalloc(&ctr, sizeof(unsigned)));
    CHECK_CUDA(cudaMemset(ctr, 0, sizeof(unsigned)));
    // small weights (|w| < 2^-6): a layer keeps x bounded for the bitwise check
    fill_bf16<<<4096, 256>>>(W, per * 8, 5, 0x3c00u);
    CHECK_CUDA(cudaDeviceSynchronize());
    g_roof = ls_bandwidth_read((size_t)4 << 30, 20, nullptr);
    printf("streaming read 4 GiB: %.0f GB/s\n", g_roof);
    const char *atto = getenv("LAB_ATTO");
    if (atto && !strcmp(atto, "1")) { // only attention and o
        bool ok = run_atto<1, 0>(di.sms, W, qkv, gu);
        ok = run_atto<2, 0>(di.sms, W, qkv, gu) && ok;
        ok = run_atto<2, 1>(di.sms, W, qkv, gu) && ok;
        return ok ? 0 : 1;
    }
    unsigned base = 0;
    bool ok = run_tp<1, 0>(di.sms, W, x, qkv, gu, ctr, base, xacc);
    ok = run_tp<2, 0>(di.sms, W, x, qkv, gu, ctr, base, xacc) && ok;
    ok = run_tp<2, 1>(di.sms, W, x, qkv, gu, ctr, base, xacc) && ok;
    // LAB_TP4=1: also the quarter layers of TP=4 (what a layer's boundaries cost where the
    // bytes are a quarter: the 8B at TP=4 ran 1.42 ms a token without collectives for ~0.81 ms
    // of bytes a rank, eighteenth session)
    const char *tp4 = getenv("LAB_TP4");
    if (tp4 && !strcmp(tp4, "1")) {
        ok = run_tp<4, 0>(di.sms, W, x, qkv, gu, ctr, base, xacc) && ok;
        ok = run_tp<4, 1>(di.sms, W, x, qkv, gu, ctr, base, xacc) && ok;
    }
    return ok ? 0 : 1;
}
