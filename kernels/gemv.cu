// See gemv.h. Design of the fast path, for an H200 (132 SMs, ~4.5 TB/s of reads):
//
// Batch-1 GEMV does 2 flops per 2-byte weight: at 4.5 TB/s an SM must take ~17 B/clock, one
// 16-byte chunk per clock, and has ~128 thread-instructions per chunk to spend. Arithmetic is
// free; what counts is (1) enough bytes in flight per SM to cover DRAM latency (~40 KB by
// Little's law; we keep 64-128 KB), and (2) every SM finishing at the same time, because a
// 50 MB matrix (Llama-8B QKV) takes only ~11 us and any tail or imbalance shows.
//
// So: one block of 1024 threads per SM (grid = min(n, SMs)); block b owns the rows
// [b*n/G, (b+1)*n/G), at most one row more than any other block. Each row is cut into S
// "units" of 32 chunks (512 bytes, one coalesced 16-byte load per lane); the block's
// rows*S units are cut into 32 contiguous, equal ranges, one per warp (split-K inside the
// block, balanced to one unit). A warp streams its range with U loads per lane in flight,
// double-buffered. A row wholly inside one warp is reduced with shuffles and written
// directly; a row cut between warps leaves partial sums in shared memory, and after one
// __syncthreads the warp holding the row's last unit adds them in warp order. Every sum has a
// fixed order, so results are bitwise reproducible for a given (n, k, T, SM count).
//
// x is staged in shared memory as fp32 (exact; the reference sees the same fp32 x), permuted so
// that the lanes of a warp read consecutive 16-byte words (no bank conflicts): unit s holds the
// first halves of its 32 chunks, then the second halves. SwiGLU is applied while staging, once
// per element per block. Weights are read with ld.global.nc.L1::no_allocate so they do not
// evict anything useful. With T positions each weight chunk is used T times; shared-memory
// bandwidth (x reads: 32 bytes per 16-byte chunk per position, 128 B/clock per SM) bounds the
// kernel near 4/T of the weight rate from T = 4 up, so T = 8 should cost about twice T = 1
// (still 4x better than 8 separate passes).
//
// PDL: the first batch of weight loads is issued before griddepcontrol.wait; x is read and y
// written after it.
#include "config.h"
#include "att_split.cuh"
#include "gemv.h"
#include "argmax.cuh"
#include "bf16.cuh"
#include "device.cuh"
#include "pdl.cuh"
#include "rope.h"
#include "rope.cuh"
#include "runtime/check.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEMV_MAX_T 8
// static shared memory of the fast kernel at most: the norm's block sums, 32 warps x 8 positions
#define GEMV_STATIC_SMEM (32 * GEMV_MAX_T * 4)

// PDL for every kernel family (pdl.cuh): off until the backend or a test turns it on
int ls_pdl_on;

// 16-byte streaming load of weights: read-only, not worth keeping in L1 (bf16.cuh)
static __device__ __forceinline__ uint4 ld_weights(const uint4 *p)
{
    return ld_stream(reinterpret_cast<const uint16_t *>(p));
}

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The sums over the warp of U per-lane values (U = 1, 2, 4, 8) at once: each exchange halves
// the values a lane holds (the lane keeps one half, its partner the other), so U rows take
// U - 1 + 5 - log2(U) shuffles instead of 5U. Lane l ends with the total of row l / (32 / U)
// (every lane of that group of 32 / U holds it). A fixed order: reproducible.
template <int U>
static __device__ __forceinline__ float warp_sum_rows(const float (&a)[U], int lane)
{
    static_assert(U == 1 || U == 2 || U == 4 || U == 8, "U rows: 1, 2, 4 or 8");
    float v[U];
#pragma unroll
    for (int i = 0; i < U; i++) v[i] = a[i];
    int off = 16;
#pragma unroll
    for (int h = U; h > 1; h >>= 1, off >>= 1) {
        const bool up = lane & off;
#pragma unroll
        for (int p = 0; p < h / 2; p++) {
            const float keep = up ? v[p + h / 2] : v[p], send = up ? v[p] : v[p + h / 2];
            v[p] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
    }
#pragma unroll
    for (; off > 0; off >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], off);
    return v[0];
}

// the same expression as ref_swiglu
static __device__ __forceinline__ float silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

template <bool FAST> static __device__ __forceinline__ float silu_mul_t(float g, float u)
{
    return FAST ? __fdividef(g, 1.0f + __expf(-g)) * u : silu_mul(g, u);
}

// acc += dot(8 bf16 weights, 8 fp32 inputs), in element order
static __device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b, float acc)
{
    acc = fmaf(bf16_lo(w.x), a.x, acc);
    acc = fmaf(bf16_hi(w.x), a.y, acc);
    acc = fmaf(bf16_lo(w.y), a.z, acc);
    acc = fmaf(bf16_hi(w.y), a.w, acc);
    acc = fmaf(bf16_lo(w.z), b.x, acc);
    acc = fmaf(bf16_hi(w.z), b.y, acc);
    acc = fmaf(bf16_lo(w.w), b.z, acc);
    acc = fmaf(bf16_hi(w.w), b.w, acc);
    return acc;
}

// sum of v over the block's NW warps for each of T positions, in warp order (the same value in
// every thread); red holds NW * T floats
template <int NW, int T>
static __device__ __forceinline__ void block_sums(float (&v)[T], float *red)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < T; t++) {
        float w = warp_sum(v[t]);
        if (lane == 0) red[warp * T + t] = w;
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < T; t++) {
        float a = 0.0f;
        for (int i = 0; i < NW; i++) a += red[i * T + t];
        v[t] = a;
    }
}

// Fast path. NT threads per block, MINB blocks per SM, U 16-byte loads per lane per batch,
// T positions. y[t*n + row]; x rows of k floats (SWIGLU: gu rows of 2k floats). With nw set,
// the input is rmsnorm(x) * nw (every block computes the norm of the whole row: 4 bytes per
// input element from L2, in a fixed order); with accumulate, y += W . x (the residual add of a
// row-parallel layer at TP = 1; each element of y is read and written by one thread).
// IN: the input's form (GEMV_IN_*), ACC: y += instead of y = (compile-time, so the plain kernel
// carries no extra registers).
enum { GEMV_IN_PLAIN, GEMV_IN_NORM, GEMV_IN_SWIGLU };
// the column-resident kernel's SwiGLU input with __expf and __fdividef (the default; ~1e-6
// relative from the exact expression, LOCKSTEP_GEMV_SILU=exact): every block computes all k of
// its inputs after its wait, and the exact silu's ~20 instructions each (the fast form has the
// same two MUFU operations and a few FMULs) cost 8B TP=1 decode 0.05 ms (4.045 vs 3.996 ms in the
// tenth session's call 5; TP=2, with half the inputs per lane, 2.756 vs 2.759)
enum { GEMV_IN_SWIGLU_FAST = 3 };
// the decode attention's split partials (fd.att; ls_gemv_residual_copy_att): each input merged
// from the live chunks' partials as it is loaded
enum { GEMV_IN_ATT = 4 };
// the same, each column's merge shared by the G warps that read it (each merges its share of the
// column's lanes into shared memory, one barrier, then every warp loads the column from there):
// the partials' L2 reads a block divided by G (LOCKSTEP_ATT_DEFER=2)
enum { GEMV_IN_ATT_SHARED = 5 };

template <int NT, int MINB, int U, int T, int IN, bool ACC>
static __global__ void __launch_bounds__(NT, MINB)
    gemv_kernel(float *__restrict__ y, const uint4 *__restrict__ W, const float *__restrict__ x,
                const float *__restrict__ bias, int n, int k, const float *__restrict__ nw,
                float eps)
{
    constexpr int NW = NT / 32;
    constexpr bool SWIGLU = IN == GEMV_IN_SWIGLU, NORM = IN == GEMV_IN_NORM;
    extern __shared__ float4 smem4[];
    const int K8 = k >> 3;        // 16-byte chunks per row
    const int S = (K8 + 31) >> 5; // units (32 chunks) per row
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = (int)((long long)blockIdx.x * n / gridDim.x);
    const int r1 = (int)((long long)(blockIdx.x + 1) * n / gridDim.x);
    const long long nU = (long long)(r1 - r0) * S;
    const int ub = (int)(nU * warp / NW), ue = (int)(nU * (warp + 1) / NW);
    const uint4 *Wb = W + (size_t)r0 * K8;
    float4 *xs4 = smem4;                                                 // [T][S][64] float4
    float *part = reinterpret_cast<float *>(smem4 + (size_t)T * S * 64); // [NW][2][T]

    pdl_launch_dependents();

    // Units are visited in order from ub, so rows and unit indices advance as cursors (no
    // division in the loop): (lrp, ls) is the next unit to load, (cur, cs) the next to use.
    int lrow = ub / S, ls = ub - lrow * S;
    const uint4 *lrp = Wb + (size_t)lrow * K8 + lane; // row lrow, chunk `lane`
    auto load_batch = [&](uint4 *wv, int u0) {
#pragma unroll
        for (int i = 0; i < U; i++) {
            wv[i] = make_uint4(0, 0, 0, 0);
            if (u0 + i < ue) {
                if (ls * 32 + lane < K8) wv[i] = ld_weights(lrp + ls * 32);
                if (++ls == S) {
                    ls = 0;
                    lrp += K8;
                }
            }
        }
    };

    uint4 next[U];
    load_batch(next, ub); // weights depend on no earlier kernel: in flight during the wait
    pdl_wait();

    // stage x (permuted, see top) and wait for the whole block
    const int K4 = k >> 2;
    float nscale[T];
#pragma unroll
    for (int t = 0; t < T; t++) nscale[t] = 1.0f;
    if (NORM) {
        __shared__ float red[NW * T];
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float4 *x4 = reinterpret_cast<const float4 *>(x + (size_t)t * k);
            float ss = 0.0f;
            for (int q = threadIdx.x; q < K4; q += NT) {
                float4 v = x4[q];
                ss = fmaf(v.x, v.x, ss);
                ss = fmaf(v.y, v.y, ss);
                ss = fmaf(v.z, v.z, ss);
                ss = fmaf(v.w, v.w, ss);
            }
            nscale[t] = ss;
        }
        block_sums<NW, T>(nscale, red);
#pragma unroll
        for (int t = 0; t < T; t++) nscale[t] = 1.0f / sqrtf(nscale[t] / (float)k + eps);
    }
    for (int i = threadIdx.x; i < T * K4; i += NT) {
        int t = i / K4, q = i - t * K4;
        float4 v;
        if (SWIGLU) {
            const float4 *g4 = reinterpret_cast<const float4 *>(x + (size_t)t * 2 * k);
            float4 g = g4[q], u = g4[K4 + q];
            v = make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z),
                            silu_mul(g.w, u.w));
        } else {
            v = reinterpret_cast<const float4 *>(x + (size_t)t * k)[q];
            if (NORM) {
                float sc = 0.0f;
#pragma unroll
                for (int j = 0; j < T; j++)
                    if (j == t) sc = nscale[j];
                const float4 w4 = reinterpret_cast<const float4 *>(nw)[q];
                v = make_float4((v.x * sc) * w4.x, (v.y * sc) * w4.y, (v.z * sc) * w4.z,
                                (v.w * sc) * w4.w);
            }
        }
        int r = q & 63;
        xs4[((size_t)t * S + (q >> 6)) * 64 + (r & 1) * 32 + (r >> 1)] = v;
    }
    __syncthreads();

    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.0f;
    int cur = ub / S; // row (relative to r0) being accumulated

    // reduce the row just finished across the warp; write it, or leave a partial if another
    // warp holds part of the row
    auto flush = [&](int row) {
        float v[T];
#pragma unroll
        for (int t = 0; t < T; t++) {
            v[t] = warp_sum(acc[t]);
            acc[t] = 0.0f;
        }
        if (lane == 0) {
            if (row * S >= ub && (row + 1) * S <= ue) {
                float b = bias ? bias[r0 + row] : 0.0f;
#pragma unroll
                for (int t = 0; t < T; t++) {
                    float *yp = y + (size_t)t * n + r0 + row;
                    *yp = ACC ? *yp + (v[t] + b) : v[t] + b;
                }
            } else {
                int slot = row == ub / S ? 0 : 1;
#pragma unroll
                for (int t = 0; t < T; t++) part[(warp * 2 + slot) * T + t] = v[t];
            }
        }
    };

    int cs = ub - cur * S;
    for (int u0 = ub; u0 < ue; u0 += U) {
        uint4 wv[U];
#pragma unroll
        for (int i = 0; i < U; i++) wv[i] = next[i];
        if (u0 + U < ue) load_batch(next, u0 + U);
#pragma unroll
        for (int i = 0; i < U; i++) {
            if (u0 + i >= ue) break;
            if (cs * 32 + lane < K8) {
#pragma unroll
                for (int t = 0; t < T; t++) {
                    const float4 *xr = xs4 + ((size_t)t * S + cs) * 64;
                    acc[t] = dot8(wv[i], xr[lane], xr[32 + lane], acc[t]);
                }
            }
            if (++cs == S && u0 + i + 1 < ue) { // row done, and the warp goes on to the next
                flush(cur);
                cur++;
                cs = 0;
            }
        }
    }
    if (ub < ue) flush(cur);
    __syncthreads();

    // rows cut between warps: the warp holding the row's last unit adds the partials of the
    // warps that share the row, lowest warp first
    if (lane == 0 && ub < ue && ub % S != 0 && ue >= (ub / S + 1) * S) {
        const int fr = ub / S;
        int lo = warp;
        for (int w = warp - 1; w >= 0; w--) {
            int b = (int)(nU * w / NW), e = (int)(nU * (w + 1) / NW);
            if (b == e) continue;
            if ((e - 1) / S != fr) break;
            lo = w;
            if (b <= fr * S) break;
        }
        float b = bias ? bias[r0 + fr] : 0.0f;
#pragma unroll
        for (int t = 0; t < T; t++) {
            float sum = 0.0f;
            for (int w = lo; w <= warp; w++) {
                int wb = (int)(nU * w / NW), we = (int)(nU * (w + 1) / NW);
                if (wb == we) continue;
                int slot = (w == warp || wb / S == fr) ? 0 : 1;
                sum += part[(w * 2 + slot) * T + t];
            }
            float *yp = y + (size_t)t * n + r0 + fr;
            *yp = ACC ? *yp + (sum + b) : sum + b;
        }
    }
}

// RoPE and the KV-cache store in the QKV GEMV's epilogue (ls_gemv_rope_kv; T = 1). The rows
// are q (q_rows), then k (up to qk_rows), then v. The kernel visits "logical" rows in which each
// rotation pair is two neighbours (2i, 2i + 1), so a block's even-aligned row range holds whole
// pairs; in the NEOX form (pairs i, i + hd/2 of a head) logical row 2i + s of a q or k head is
// the matrix's row i + s * hd/2 (rope_row), read and written there: the layout of W, y and the
// cache is unchanged. Results are bitwise those of the GEMV followed by ls_rope_kv.
#define GEMV_ROPE_PAIRS 64 // pairs per block at most (their angles live in shared memory)
struct gemv_rope {
    uint16_t *kc, *vc;     // this layer's cache, [hkv][max_ctx][hd] bf16
    const int *pos;        // pos[0]: the position
    const float *inv_freq; // [hd/2]
    int q_rows, qk_rows, hd_shift, max_ctx, interleaved;
};

static __device__ __forceinline__ int rope_row(const gemv_rope &rp, int l)
{
    if (rp.interleaved || l >= rp.qk_rows) return l;
    const int d = l & ((1 << rp.hd_shift) - 1);
    return l - d + (d >> 1) + ((d & 1) << (rp.hd_shift - 1));
}

// Column-resident x (T = 1; LOCKSTEP_GEMV_XREG=0 turns it off). The read-only lab kernel of
// the GEMV's shape reads QKV's bytes at 92% of the roofline where the GEMV above reaches 75%: its
// loss is its own work after the PDL wait (x staged through shared memory by the whole block,
// a barrier, the SwiGLU of all 2k inputs in every block). Here a warp keeps the x of a fixed set
// of 32-chunk columns in registers, loaded straight from global memory after the wait (SwiGLU
// and the norm's weights applied on the way), and walks the block's rows through those columns:
// warp (g, slot) takes columns slot, slot + slots, ... (CM at most) of rows g, g + G, ... The
// block still reads whole rows in order (G rows per step), which the lab measured as fast as one
// contiguous range per warp. Each (row, warp) sum goes to shared memory; after one barrier the
// row's slots are added in slot order (fixed, so results are reproducible). U row-batches of CM
// loads each in flight.
// NORM: rmsnorm(x) * nw = scale * (x * nw), so the products take x * nw and the scale multiplies
// each row's sum in the epilogue; the sum of squares comes from the x that the warps of row
// group 0 load anyway (every input once), added in slot order after the barrier the epilogue
// has anyway. (Until the tenth session the block first reduced the sum of squares over x loaded
// for it, and scaled x: an L2 round trip and a barrier more between the wait and the first
// product; 8B TP=1 decode 4.136 -> 4.057 ms without them.)
// SO: the SwiGLU in the epilogue of the fused gate+up matrix (n = 2f rows: gate, then up): a
// block takes gate rows u0 .. u1 - 1 and the up rows f + u0 .. f + u1 - 1 with them, and writes
// y[i] = silu(gate_i) * up_i for its i (f outputs).
// FD (with SO, one rank's whole MLP; ls_gemv_mlp): the down projection split along its inputs.
// The block's h_i (its SwiGLU outputs, kept in shared memory, not written to y) meet the rows of
// the transposed down that those inputs reach (fd.dt, [n/2][k] bf16), each thread 8 outputs of
// one row in RS = NT / (k/8) row sets, whose first rows are issued before the epilogue (they do
// not depend on h); the row sets' sums meet in shared memory and the block adds its partial
// output into the pending sum fd.out with float atomics (pending_split: exact, so in any order
// the same bits). So the gate+up -> down boundary (the release, the down's ramp, its slowest
// block) is gone.
// ACC with fd.y2: each updated y also stored there (the fused MLP's input copy); with fd.pend,
// y's pending sum added to y first (when fd.pend_live) and zeroed.
// fd.xpend (plain or norm input): x's pending sum, added to x as it is loaded.
// AM (y =, one column a warp; ls_gemv_argmax): the LM head with the greedy choice in its
// epilogue. Each block takes its rows' largest y (argmax_merge: the lower index on ties, NaN
// never) as a key (am_key) and folds it into one device word with atomicMax (a reduction the
// block does not wait for); the step's last kernel (ls_advance_pos) takes the token from the
// word and clears it. So the argmax kernel after the head (3.4 us a token on the 8B at TP=1)
// is gone, and the head's tail gains no round trip.
struct gemv_fd {
    float *y2;          // ACC: a copy of each updated y
    const uint4 *dt;    // FD: the down matrix transposed
    float *out;  // FD: the pending sum [LS_GEMV_PEND_ROWS][k] the partial outputs are added to
    float *pend; // ACC: y's pending sum [LS_GEMV_PEND_ROWS][n], or NULL
    const float *xpend; // x's pending sum [LS_GEMV_PEND_ROWS][k], or NULL
    int pend_live;      // ACC: pend holds a sum (else it is only zeroed)
    unsigned long long *am_key; // AM: the word the blocks' largest are folded into
    int lab_red; // FD, timing only (LOCKSTEP_LAB_MLP_RED): 1 leaves out the hi adds, 2 all adds
    int bulk;    // FD with two row sets or more: the block's lo added by one bulk reduction
                 // (LOCKSTEP_MLP_BULK): 1 into its parity's row, 2 every block into the first
    att_split att; // GEMV_IN_ATT: the attention's partials x is merged from
};

// AM: the block's rows' largest (bv at bi; INT_MAX: none) into the word; red: NW words of
// shared memory
template <int NW>
static __device__ __forceinline__ void gemv_argmax_tail(unsigned long long *word, float bv, int bi,
                                                        unsigned long long *red)
{
    const unsigned long long key = warp_max_key(bi == INT_MAX ? 0ull : am_key(bv, bi));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = key;
    __syncthreads();
    if (threadIdx.x >= 32) return;
    // the warps' keys, across warp 0
    const unsigned long long best = warp_max_key(threadIdx.x < NW ? red[threadIdx.x] : 0ull);
    if (threadIdx.x == 0 && best) atomicMax(word, best);
}

// A pending sum (the fused MLP's output, ls_gemv_mlp): a residual y with its pending sum p
// [LS_GEMV_PEND_ROWS = 3][n] stands for (y[i] + p[i]) + (p[n + i] + p[2n + i]). The blocks of the
// fused MLP add their partial outputs in the order they finish; float atomics would round
// differently in each order. So each partial v is split into hi, a multiple of 2R, and lo = v -
// hi rounded to a multiple of R / 2^16, where R = 2^-ilogb(scale) (scale = 1 / rms of the MLP's
// input: every block has the same), and hi goes to p[i], lo to p[n + i] from the even blocks and
// p[2n + i] from the odd ones. Sums of multiples of q below 2^24 q are exact in floats, so the
// order does not matter: the lo sums (either row's and the two rows' together) stay within
// blocks x R < 256 R = 2^24 x R / 2^16 for fewer than 256 blocks, the hi sums within 2^25 R (an
// output 2^24 times its input's RMS would be rounded, in some order). hi - v is exact (Sterbenz:
// |v - hi| <= R <= |hi| / 2 when hi is not 0). Each partial is off by at most R / 2^17 (~1e-5 of
// the input's RMS in all, across the 132 partials of an H200), far below the bf16 weights'
// rounding. Two lo rows, because an address's atomics are taken in turn at the L2: 66 on each
// row instead of 132 on one took the MLP's tail 0.5 us a layer shorter on one machine and 1.65
// on another (BENCHMARKS.md, forty-seventh session); the readers' one load more costs less.
#define PEND_LO_BITS    16
#define PEND_MAX_BLOCKS 255

static __device__ __forceinline__ float pow2f(int e) // 2^e, -126 <= e <= 127
{
    return __int_as_float((127 + e) << 23);
}

static __device__ __forceinline__ float4 pend_add(float4 a, float4 b)
{
    return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z),
                       __fadd_rn(a.w, b.w));
}

static __device__ __forceinline__ void pending_split(float v, int E, float &hi, float &lo)
{
    hi = __fmul_rn(rintf(__fmul_rn(v, pow2f(E - 1))), pow2f(1 - E));
    lo = __fmul_rn(rintf(__fmul_rn(__fsub_rn(v, hi), pow2f(E + PEND_LO_BITS))),
                   pow2f(-E - PEND_LO_BITS));
}

template <int NT, int U, int CM, int IN, bool ACC, bool TR, bool RP, bool SO = false, int FD = 0,
          bool AM = false>
static __global__ void __launch_bounds__(NT, 1)
    gemv_xreg_kernel(float *__restrict__ y, const uint4 *__restrict__ W,
                     const float *__restrict__ x, const float *__restrict__ bias, int n, int k,
                     const float *__restrict__ nw, float eps, const gemv_rope rp, const gemv_fd fd)
{
    static_assert(!FD || SO, "the fused down follows the SwiGLU epilogue");
    static_assert(!AM || (!ACC && !RP && !SO), "the argmax follows a plain y =");
    constexpr int NW = NT / 32;
    constexpr bool FAST = IN == GEMV_IN_SWIGLU_FAST, SWIGLU = FAST || IN == GEMV_IN_SWIGLU,
                   NORM = IN == GEMV_IN_NORM, ATTS = IN == GEMV_IN_ATT_SHARED,
                   ATT = ATTS || IN == GEMV_IN_ATT;
    static_assert(!ATTS || CM == 1, "the shared merge: one column a warp");
    // [rows][ps], ps = slots | 1: an odd stride, so the epilogue's lanes (a row each) read
    // distinct banks (an even one put 16 or 32 lanes on one bank)
    extern __shared__ float psum[];
    __shared__ float red[NW];
    __shared__ float2 rcs[RP ? GEMV_ROPE_PAIRS : 1]; // RP: each pair's (cos, sin)
    const int K8 = k >> 3, S = (K8 + 31) >> 5;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // RP: whole pairs per block
    // RP: whole pairs per block; SO: r0 / 2 .. r1 / 2 - 1 are the block's outputs
    const int r0 = RP || SO ? 2 * (int)((long long)blockIdx.x * (n / 2) / gridDim.x)
                            : (int)((long long)blockIdx.x * n / gridDim.x);
    const int r1 = RP || SO ? 2 * (int)((long long)(blockIdx.x + 1) * (n / 2) / gridDim.x)
                            : (int)((long long)(blockIdx.x + 1) * n / gridDim.x);
    const int rows = r1 - r0;
    // SO: local row r < rows / 2 is gate row r0 / 2 + r, the rest the up rows of the same outputs
    auto so_row = [&](int r) {
        const int half = rows / 2;
        return r < half ? r0 / 2 + r : n / 2 + r0 / 2 + (r - half);
    };
    const int slots = S < NW ? S : NW, G = NW / slots, g = warp / slots, slot = warp - g * slots;
    const int ps = slots | 1;
    const bool active = g < G;
    // this lane's chunk of column j, or -1 past the row's end
    int q[CM];
#pragma unroll
    for (int j = 0; j < CM; j++) {
        const int c = slot + j * slots;
        q[j] = active && c < S && c * 32 + lane < K8 ? c * 32 + lane : -1;
    }
    const uint4 *Wb = W + (size_t)r0 * K8;

    pdl_launch_dependents();
    // rows g, g + G, ...: batch b holds rows g + (b*U + i)*G
    auto load = [&](uint4(&wv)[U][CM], int first) {
#pragma unroll
        for (int i = 0; i < U; i++) {
            const int r = g + (first + i) * G;
            const uint4 *wr = RP   ? W + (size_t)rope_row(rp, r0 + r) * K8
                              : SO ? W + (size_t)so_row(r) * K8
                                   : Wb + (size_t)r * K8;
#pragma unroll
            for (int j = 0; j < CM; j++)
                wv[i][j] = active && r < rows && q[j] >= 0 ? ld_weights(wr + q[j])
                                                           : make_uint4(0, 0, 0, 0);
        }
    };
    uint4 next[U][CM];
    load(next, 0); // weights depend on no earlier kernel: in flight during the wait
    if (RP) {
        // the angles: the position and inv_freq are written by no kernel of this step
        for (int t = threadIdx.x; t < rows / 2; t += NT) {
            const int l = r0 + 2 * t;
            float sn = 0.0f, cs = 1.0f;
            if (l < rp.qk_rows)
                sincosf((float)rp.pos[0] * rp.inv_freq[(l & ((1 << rp.hd_shift) - 1)) >> 1], &sn,
                        &cs);
            rcs[t] = make_float2(cs, sn);
        }
    }
    pdl_wait();
    const int my_rows = active && g < rows ? (rows - g + G - 1) / G : 0;
    uint4 cur[U][CM]; // TR: batch b while b + 1 is in flight
    if (TR) {
#pragma unroll
        for (int i = 0; i < U; i++)
#pragma unroll
            for (int j = 0; j < CM; j++) cur[i][j] = next[i][j];
        // ATT: the second batch after the merge, whose loads would not fit beside it
        if (!ATT && U < my_rows) load(next, U);
    }

    float ss = 0.0f; // NORM: this lane's share of the sum of squares
    // ATTS: the merged inputs in shared memory after the row sums' (16-byte aligned); the lanes
    // of a column are shared out among its G warps, lane l to warp l * G / 32
    float4 *xs = reinterpret_cast<float4 *>(psum + ((rows * ps + 3) & ~3));
    if constexpr (ATTS) {
        if (q[0] >= 0 && (lane * G) >> 5 == g) {
            float4 a, b;
            att_split_merge8(fd.att, 8 * q[0], a, b);
            xs[2 * q[0]] = a;
            xs[2 * q[0] + 1] = b;
        }
        __syncthreads();
    }
    // the x of this lane's chunks: 8 consecutive inputs each
    float4 xa[CM], xb[CM];
#pragma unroll
    for (int j = 0; j < CM; j++) {
        xa[j] = xb[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (q[j] < 0) continue;
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        if (ATTS) {
            xa[j] = xs[2 * q[j]];
            xb[j] = xs[2 * q[j] + 1];
        } else if (ATT) {
            att_split_merge8(fd.att, 8 * q[j], xa[j], xb[j]);
        } else if (SWIGLU) {
            const float4 g0 = x4[2 * q[j]], g1 = x4[2 * q[j] + 1];
            const float4 u0 = x4[(k >> 2) + 2 * q[j]], u1 = x4[(k >> 2) + 2 * q[j] + 1];
            xa[j] = make_float4(silu_mul_t<FAST>(g0.x, u0.x), silu_mul_t<FAST>(g0.y, u0.y),
                                silu_mul_t<FAST>(g0.z, u0.z), silu_mul_t<FAST>(g0.w, u0.w));
            xb[j] = make_float4(silu_mul_t<FAST>(g1.x, u1.x), silu_mul_t<FAST>(g1.y, u1.y),
                                silu_mul_t<FAST>(g1.z, u1.z), silu_mul_t<FAST>(g1.w, u1.w));
        } else {
            xa[j] = x4[2 * q[j]];
            xb[j] = x4[2 * q[j] + 1];
            // (x + hi) + lo, as the ACC form takes it in; in the forms that read a residual
            // with one (y = or RoPE; one column a warp): the launch declines others, in which
            // the registers would spill
            if (CM == 1 && !ACC && !SO && fd.xpend) {
                const float4 *h4 = reinterpret_cast<const float4 *>(fd.xpend), *l4 = h4 + (k >> 2),
                             *m4 = l4 + (k >> 2);
                xa[j] =
                    pend_add(pend_add(xa[j], h4[2 * q[j]]), pend_add(l4[2 * q[j]], m4[2 * q[j]]));
                xb[j] = pend_add(pend_add(xb[j], h4[2 * q[j] + 1]),
                                 pend_add(l4[2 * q[j] + 1], m4[2 * q[j] + 1]));
            }
            if (NORM) {
                const float4 *w4 = reinterpret_cast<const float4 *>(nw);
                const float4 a = xa[j], b = xb[j], wa = w4[2 * q[j]], wb = w4[2 * q[j] + 1];
                if (g == 0) {
                    ss = fmaf(a.x, a.x, ss), ss = fmaf(a.y, a.y, ss), ss = fmaf(a.z, a.z, ss);
                    ss = fmaf(a.w, a.w, ss), ss = fmaf(b.x, b.x, ss), ss = fmaf(b.y, b.y, ss);
                    ss = fmaf(b.z, b.z, ss), ss = fmaf(b.w, b.w, ss);
                }
                xa[j] = make_float4(a.x * wa.x, a.y * wa.y, a.z * wa.z, a.w * wa.w);
                xb[j] = make_float4(b.x * wb.x, b.y * wb.y, b.z * wb.z, b.w * wb.w);
            }
        }
    }

    if (TR && ATT && U < my_rows) load(next, U);
    if (TR) {
        // two batches in flight: batch b + 2's loads go out as soon as batch b's products are
        // taken, before its sums cross the warp (U rows reduced together)
        for (int b = 0; b * U < my_rows; b++) {
            float a[U];
#pragma unroll
            for (int i = 0; i < U; i++) {
                a[i] = 0.0f;
#pragma unroll
                for (int j = 0; j < CM; j++) a[i] = dot8(cur[i][j], xa[j], xb[j], a[i]);
            }
#pragma unroll
            for (int i = 0; i < U; i++)
#pragma unroll
                for (int j = 0; j < CM; j++) cur[i][j] = next[i][j];
            if ((b + 2) * U < my_rows) load(next, (b + 2) * U);
            const float t = warp_sum_rows<U>(a, lane);
            const int rl = b * U + lane / (32 / U);
            if ((lane & (32 / U - 1)) == 0 && rl < my_rows) psum[(g + rl * G) * ps + slot] = t;
        }
    } else if (active) {
        for (int b = 0; b * U < my_rows; b++) {
            uint4 wv[U][CM];
#pragma unroll
            for (int i = 0; i < U; i++)
#pragma unroll
                for (int j = 0; j < CM; j++) wv[i][j] = next[i][j];
            if ((b + 1) * U < my_rows) load(next, (b + 1) * U);
#pragma unroll
            for (int i = 0; i < U; i++) {
                const int rl = b * U + i; // the warp's rl-th row
                if (rl >= my_rows) break;
                float a = 0.0f;
#pragma unroll
                for (int j = 0; j < CM; j++) a = dot8(wv[i][j], xa[j], xb[j], a);
                a = warp_sum(a);
                if (lane == 0) psum[(g + rl * G) * ps + slot] = a;
            }
        }
    }
    // FD: this thread's chunk c of the down rows part, part + RS, ... (hrows of them)
    const int C = k >> 3, RS = NT / C, part = threadIdx.x / C, c8 = threadIdx.x - part * C;
    const int hrows = FD > 0 && part < RS ? (rows / 2 - part + RS - 1) / RS : 0;
    uint4 dw[FD > 0 ? FD : 1];
    if constexpr (FD > 0) {
        const uint4 *dt = fd.dt + (size_t)(r0 / 2 + part) * C + c8;
#pragma unroll
        for (int i = 0; i < FD; i++)
            dw[i] = i < hrows ? ld_weights(dt + (size_t)i * RS * C) : make_uint4(0, 0, 0, 0);
    }
    if (NORM) {
        ss = warp_sum(ss);
        if (g == 0 && lane == 0) red[slot] = ss;
    }
    __syncthreads();
    float scale = 1.0f;
    if (NORM) {
        float t = 0.0f;
        for (int c = 0; c < slots; c++) t += red[c];
        scale = 1.0f / sqrtf(t / (float)k + eps);
    }
    if constexpr (RP) {
        const int p = rp.pos[0], hd = 1 << rp.hd_shift;
        const bool store = p >= 0 && p < rp.max_ctx;
        for (int t = threadIdx.x; t < rows / 2; t += NT) {
            const int l = r0 + 2 * t, i0 = rope_row(rp, l), i1 = rope_row(rp, l + 1);
            float v0 = 0.0f, v1 = 0.0f;
            for (int c = 0; c < slots; c++) v0 += psum[2 * t * ps + c];
            for (int c = 0; c < slots; c++) v1 += psum[(2 * t + 1) * ps + c];
            if (NORM) { // never contracted with the bias: equal to the plain form's
                v0 = __fmul_rn(v0, scale);
                v1 = __fmul_rn(v1, scale);
            }
            v0 += bias ? bias[i0] : 0.0f;
            v1 += bias ? bias[i1] : 0.0f;
            const int base = l & ~(hd - 1); // the head's first row
            const bool k_or_q = l < rp.qk_rows;
            if (k_or_q) {
                const float2 a = rcs[t];
                rope_rotate(v0, v1, a.x, a.y);
            }
            if (store && l >= rp.q_rows) { // a k or v head: this position's row of its cache
                const int head = (base - (k_or_q ? rp.q_rows : rp.qk_rows)) >> rp.hd_shift;
                uint16_t *row = (k_or_q ? rp.kc : rp.vc) + ((size_t)head * rp.max_ctx + p) * hd;
                row[i0 - base] = rope_bf16(v0);
                row[i1 - base] = rope_bf16(v1);
            }
            y[i0] = v0;
            y[i1] = v1;
        }
    } else if constexpr (SO) {
        const int half = rows / 2;
        for (int t = threadIdx.x; t < half; t += NT) {
            float gs = 0.0f, us = 0.0f;
            for (int c = 0; c < slots; c++) gs += psum[t * ps + c];
            for (int c = 0; c < slots; c++) us += psum[(half + t) * ps + c];
            if (NORM) {
                gs = __fmul_rn(gs, scale);
                us = __fmul_rn(us, scale);
            }
            if (FD > 0)
                psum[rows * ps + t] = silu_mul(gs, us);
            else
                y[r0 / 2 + t] = silu_mul(gs, us);
        }
        if constexpr (FD > 0) {
            const float *hs = psum + rows * ps;
            __syncthreads(); // hs written; psum's sums read
            float acc[8] = {};
            const uint4 *dt = fd.dt + (size_t)(r0 / 2 + part) * C + c8;
            for (int u = 0; u < hrows; u += FD) {
#pragma unroll
                for (int i = 0; i < FD; i++) {
                    if (u + i >= hrows) break;
                    const float h = hs[part + (u + i) * RS];
                    float wf[8];
                    unpack8(dw[i], wf);
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[e] = fmaf(h, wf[e], acc[e]);
                    const int nx = u + i + FD;
                    if (nx < hrows) dw[i] = ld_weights(dt + (size_t)nx * RS * C);
                }
            }
            // the row sets' sums in part order, then the block's partial output
            // (RS - 1) x k floats from a 16-byte boundary; bulk: the first k then taking the
            // block's lo (the boundary in both forms: an offset chosen by fd.bulk at run time
            // made ptxas spill 16-40 bytes in the MLP kernels)
            const bool bulk = fd.bulk && RS >= 2;
            const int lrow = 1 + (blockIdx.x & 1); // lo's row: the block's parity (pending sum)
            float *comb = psum + ((rows * ps + rows / 2 + 3) & ~3);
            if (part > 0 && part < RS)
                for (int e = 0; e < 8; e++) comb[(size_t)(part - 1) * k + 8 * c8 + e] = acc[e];
            __syncthreads();
            if (part == 0) {
                const bool add_lo = !bulk && fd.lab_red < 2;
                for (int p2 = 1; p2 < RS; p2++)
                    for (int e = 0; e < 8; e++) acc[e] += comb[(size_t)(p2 - 1) * k + 8 * c8 + e];
                // the pending sum's grids (pending_split), from the norm's scale (plain input:
                // R = 1); four outputs at a time
                const int E = NORM ? max(-60, min(60, ilogbf(scale))) : 0;
#pragma unroll
                for (int h4 = 0; h4 < 8; h4 += 4) {
                    float hi[4], lo[4];
                    for (int e = 0; e < 4; e++) pending_split(acc[h4 + e], E, hi[e], lo[e]);
                    float *oh = fd.out + 8 * c8 + h4, *ol = fd.out + lrow * (size_t)k + 8 * c8 + h4;
                    // bulk: this thread's lo where it read its row sets' sums (its own 8)
                    if (bulk)
                        *reinterpret_cast<float4 *>(comb + 8 * c8 + h4) =
                            make_float4(lo[0], lo[1], lo[2], lo[3]);
                    // hi is non-zero where a partial reaches the input's RMS (on random inputs,
                    // nearly everywhere: test_kernels' gemv_mlp cases)
                    const bool any_hi = hi[0] != 0.0f || hi[1] != 0.0f || hi[2] != 0.0f ||
                                        hi[3] != 0.0f;
#if __CUDA_ARCH__ >= 900
                    if (add_lo)
                        atomicAdd(reinterpret_cast<float4 *>(ol),
                                  make_float4(lo[0], lo[1], lo[2], lo[3]));
                    if (any_hi && fd.lab_red == 0)
                        atomicAdd(reinterpret_cast<float4 *>(oh),
                                  make_float4(hi[0], hi[1], hi[2], hi[3]));
#else
                    if (add_lo)
                        for (int e = 0; e < 4; e++) atomicAdd(ol + e, lo[e]);
                    if (any_hi && fd.lab_red == 0)
                        for (int e = 0; e < 4; e++) atomicAdd(oh + e, hi[e]);
#endif
                }
            }
            // bulk: the block's lo into its row by one reduction of the TMA unit, which the L2
            // takes a line at a time instead of 1024 vector atomics (the same exact adds); the
            // block waits for the reduction to complete (not only for its read of shared memory),
            // so that it is done when the grid is, as the atomics are
            if (bulk) {
#if __CUDA_ARCH__ >= 900
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                __syncthreads();
                if (threadIdx.x == 0) {
                    float *dst = fd.out + (fd.bulk == 2 ? 1 : lrow) * (size_t)k;
                    asm volatile(
                        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], "
                        "%2;" ::"l"(dst),
                        "r"((unsigned)__cvta_generic_to_shared(comb)), "r"((unsigned)k * 4u)
                        : "memory");
                    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
                }
#endif
            }
        }
    } else {
        float bv = -INFINITY; // AM: this thread's rows' largest y, at bi
        int bi = INT_MAX;
        for (int r = threadIdx.x; r < rows; r += NT) {
            float sum = 0.0f;
            for (int c = 0; c < slots; c++) sum += psum[r * ps + c];
            if (NORM) sum = __fmul_rn(sum, scale);
            const float b = bias ? bias[r0 + r] : 0.0f;
            float *yp = y + r0 + r;
            float y0 = ACC ? *yp : 0.0f;
            if (ACC && fd.pend) { // y's pending sum resolved (as an xpend input reads it), zeroed
                if (fd.pend_live)
                    y0 = __fadd_rn(__fadd_rn(y0, fd.pend[r0 + r]),
                                   __fadd_rn(fd.pend[n + r0 + r], fd.pend[2 * n + r0 + r]));
                fd.pend[r0 + r] = 0.0f;
                fd.pend[n + r0 + r] = 0.0f;
                fd.pend[2 * n + r0 + r] = 0.0f;
            }
            const float v = ACC ? y0 + (sum + b) : sum + b;
            *yp = v;
            if (ACC && fd.y2) fd.y2[r0 + r] = v;
            if (AM) argmax_merge(bv, bi, v, r0 + r);
        }
        if constexpr (AM) {
            __shared__ unsigned long long am_red[NW];
            gemv_argmax_tail<NW>(fd.am_key, bv, bi, am_red);
        }
    }
}

// Generic path: any k, any alignment. One warp per row, 2-byte loads.
static __global__ void gemv_generic_kernel(float *__restrict__ y, const uint16_t *__restrict__ W,
                                           const float *__restrict__ x,
                                           const float *__restrict__ bias, int T, int n, int k,
                                           int swiglu, const float *__restrict__ nw, float eps,
                                           int accumulate)
{
    pdl_launch_dependents();
    pdl_wait();
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n) return;
    const uint16_t *w = W + (size_t)row * k;
    for (int t = 0; t < T; t++) {
        float sc = 1.0f;
        if (!swiglu && nw) { // every warp computes the norm of the row it needs
            float ss = 0.0f;
            for (int j = lane; j < k; j += 32)
                ss = fmaf(x[(size_t)t * k + j], x[(size_t)t * k + j], ss);
            sc = 1.0f / sqrtf(warp_sum(ss) / (float)k + eps);
        }
        float acc = 0.0f;
        for (int j = lane; j < k; j += 32) {
            float xv = swiglu ? silu_mul(x[(size_t)t * 2 * k + j], x[(size_t)t * 2 * k + k + j])
                              : x[(size_t)t * k + j];
            if (!swiglu && nw) xv = (xv * sc) * nw[j];
            acc = fmaf(__uint_as_float((uint32_t)w[j] << 16), xv, acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) {
            float v = acc + (bias ? bias[row] : 0.0f);
            float *yp = y + (size_t)t * n + row;
            *yp = accumulate ? *yp + v : v;
        }
    }
}

// Launch shapes (kernels/lab/gemv_lab.cu times the alternatives). T > 1 keeps T accumulators
// and needs up to 128 registers: 512 threads, 1 block per SM, 4 loads of 16 bytes per lane per
// batch, double-buffered. T = 1 picks one of the shapes below by the matrix's bytes: 1024 or
// fewer threads times blocks per SM (at most 64 registers per thread at 2048 threads per SM;
// 8 loads in flight spill there, so 8-load shapes run 1024 threads per SM). Small matrices gain
// from more, smaller blocks (a shorter tail), the LM head from more loads in flight.
// LOCKSTEP_GEMV=S,M,L picks the shape (index into gemv_shapes) for matrices below 96 MB, up to
// 512 MB, and above, for experiments; the defaults are the lab's winners.
#define GEMV_U 4

typedef void (*gemv_fn)(float *, const uint4 *, const float *, const float *, int, int,
                        const float *, float);

// the kernel variants of one launch shape or position count: [input form][accumulate]
struct gemv_fns {
    gemv_fn f[3][2];
};

template <int NT, int MINB, int U, int T> static constexpr gemv_fns fns()
{
    return {{{gemv_kernel<NT, MINB, U, T, GEMV_IN_PLAIN, false>,
              gemv_kernel<NT, MINB, U, T, GEMV_IN_PLAIN, true>},
             {gemv_kernel<NT, MINB, U, T, GEMV_IN_NORM, false>,
              gemv_kernel<NT, MINB, U, T, GEMV_IN_NORM, true>},
             {gemv_kernel<NT, MINB, U, T, GEMV_IN_SWIGLU, false>,
              gemv_kernel<NT, MINB, U, T, GEMV_IN_SWIGLU, true>}}};
}

struct gemv_shape {
    const char *name;
    int nt, minb;
    gemv_fns k;
};

#define GEMV_SHAPE(NT, MINB, U)                                                                    \
    {                                                                                              \
#NT "/" #MINB "/" #U, NT, MINB, fns < NT, MINB, U, 1>()                                    \
    }
static const gemv_shape gemv_shapes[] = {
    GEMV_SHAPE(1024, 1, 4), GEMV_SHAPE(512, 2, 4), GEMV_SHAPE(256, 4, 4),
    GEMV_SHAPE(256, 2, 8),  GEMV_SHAPE(512, 1, 8),
};
#define GEMV_NSHAPES (int)(sizeof gemv_shapes / sizeof gemv_shapes[0])

static int g_shape_pick[3] = {1, 0, 4}; // small, medium, large
static int g_shapes_set;

// the column-resident kernel for T = 1 where it applies: 3 (the default: 1024 threads, two row
// batches in flight and the rows' sums reduced together where a warp has one column; 8B decode
// 4.252 ms at TP=1, 2.856 at TP=2), 2 (1024 threads, one batch: 4.283 / 2.852), 1 (512
// threads: 4.401 / 2.929), 0 (LOCKSTEP_GEMV_XREG=0): never (4.432 / 3.034)
static int g_xreg = 3;
static int g_silu_fast = 1; // GEMV_IN_SWIGLU_FAST; LOCKSTEP_GEMV_SILU=exact: 0
static int g_mlp_inflight = 4; // the fused MLP's down loads in flight a thread: 2, 4 or 8
static int g_lab_red;          // gemv_fd.lab_red for the fused MLP (timing only)
static int g_mlp_bulk = 1;     // the fused MLP's lo by one bulk reduction; LOCKSTEP_MLP_BULK=0|1|2
static int g_mlp_bulked;       // whether the last fused MLP launched took it so

static void shapes_from_env(void)
{
    if (g_shapes_set) return;
    g_shapes_set = 1;
    const char *xr = getenv("LOCKSTEP_GEMV_XREG");
    if (xr && xr[0] >= '0' && xr[0] <= '3' && !xr[1]) g_xreg = xr[0] - '0';
    const char *mi = getenv("LOCKSTEP_MLP_INFLIGHT");
    if (mi && (!strcmp(mi, "2") || !strcmp(mi, "4") || !strcmp(mi, "8")))
        g_mlp_inflight = mi[0] - '0';
    const char *lr = getenv("LOCKSTEP_LAB_MLP_RED");
    static const char *const lab_red[] = {"hi", "none"};
    static const char *const lab_red_what[] = {"leaves out the hi adds", "leaves out every add"};
    for (int i = 0; lr && i < 2; i++)
        if (!strcmp(lr, lab_red[i])) {
            g_lab_red = i + 1;
            fprintf(stderr,
                    "lockstep: LOCKSTEP_LAB_MLP_RED=%s: the fused MLP %s (timing only: the "
                    "results are wrong)\n",
                    lr, lab_red_what[i]);
        }
    const char *mb = getenv("LOCKSTEP_MLP_BULK");
    if (mb && mb[0] >= '0' && mb[0] <= '2' && !mb[1]) g_mlp_bulk = mb[0] - '0';
    const char *sf = getenv("LOCKSTEP_GEMV_SILU");
    if (sf && !strcmp(sf, "exact")) g_silu_fast = 0;
    const char *e = getenv("LOCKSTEP_GEMV");
    int a, b, c;
    if (e && sscanf(e, "%d,%d,%d", &a, &b, &c) == 3 && a >= 0 && b >= 0 && c >= 0 &&
        a < GEMV_NSHAPES && b < GEMV_NSHAPES && c < GEMV_NSHAPES) {
        g_shape_pick[0] = a;
        g_shape_pick[1] = b;
        g_shape_pick[2] = c;
    }
}

// 2 <= T <= 8 positions: 512 threads, 1 block per SM, 4 loads in flight
static const gemv_fns &multi_fns(int T)
{
    static const gemv_fns m[GEMV_MAX_T - 1] = {fns<512, 1, GEMV_U, 2>(), fns<512, 1, GEMV_U, 3>(),
                                               fns<512, 1, GEMV_U, 4>(), fns<512, 1, GEMV_U, 5>(),
                                               fns<512, 1, GEMV_U, 6>(), fns<512, 1, GEMV_U, 7>(),
                                               fns<512, 1, GEMV_U, 8>()};
    return m[T - 2];
}

// shared memory of the fast path for T positions: x, then the partial sums
static size_t gemv_smem(int T, int k, int nt)
{
    int S = (k / 8 + 31) / 32;
    return (size_t)T * S * 64 * 16 + (size_t)(nt / 32) * 2 * T * sizeof(float);
}

// true the first time attribute attr is to be set to value for kernel fn on device dev, so that
// each is set once (a fixed table: past it, every call says true and the attribute is set again)
static bool attr_first(const void *fn, int dev, cudaFuncAttribute attr, int value)
{
    static struct {
        const void *fn;
        int dev, attr, value;
    } done[384];
    static int ndone;
    for (int i = 0; i < ndone; i++)
        if (done[i].fn == fn && done[i].dev == dev && done[i].attr == (int)attr &&
            done[i].value == value)
            return false;
    if (ndone < 384) done[ndone++] = {fn, dev, (int)attr, value};
    return true;
}

// fn's dynamic shared memory limit on device di: all that a block may opt in to
static void set_smem_attr(const void *fn, const ls_device &di)
{
    const int optin = di.smem_optin;
    if (!attr_first(fn, di.id, cudaFuncAttributeMaxDynamicSharedMemorySize, optin)) return;
    // the kernel's static shared memory (the norm's block sums) counts against the same limit
    cudaFuncAttributes fa;
    CHECK_CUDA(cudaFuncGetAttributes(&fa, fn));
    CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    optin - (int)fa.sharedSizeBytes));
}

// the column-resident kernel's launch shapes: NT threads, one block per SM, L loads per lane in
// flight (U = L / CM row batches of CM columns), CM columns per warp (1, 2 or 4): 512 threads
// with 8 loads (up to 128 registers; LOCKSTEP_GEMV_XREG=1), or 1024 threads with 4 (64
// registers, CM <= 2; 2, and 3, the default, with TR: two batches in flight)
// [input form (GEMV_IN_*, GEMV_IN_SWIGLU_FAST)][output: 0 y =, 1 y +=, 2 y = with RoPE and the
// cache store (plain or norm input), 3 the SwiGLU of gate | up rows (plain or norm input)]
typedef void (*xreg_fn)(float *, const uint4 *, const float *, const float *, int, int,
                        const float *, float, const gemv_rope, const gemv_fd);
template <int NT, int L, int CM, bool TR> struct xreg_fns {
    xreg_fn f[4][4];
};

template <int NT, int L, int CM, bool TR = false> static const xreg_fns<NT, L, CM, TR> &xreg_table()
{
    constexpr int U = L / CM;
    static const xreg_fns<NT, L, CM, TR> t = {
        {{gemv_xreg_kernel<NT, U, CM, GEMV_IN_PLAIN, false, TR, false>,
          gemv_xreg_kernel<NT, U, CM, GEMV_IN_PLAIN, true, TR, false>,
          gemv_xreg_kernel<NT, U, CM, GEMV_IN_PLAIN, false, TR, true>,
          gemv_xreg_kernel<NT, U, CM, GEMV_IN_PLAIN, false, TR, false, true>},
         {gemv_xreg_kernel<NT, U, CM, GEMV_IN_NORM, false, TR, false>,
          gemv_xreg_kernel<NT, U, CM, GEMV_IN_NORM, true, TR, false>,
          gemv_xreg_kernel<NT, U, CM, GEMV_IN_NORM, false, TR, true>,
          gemv_xreg_kernel<NT, U, CM, GEMV_IN_NORM, false, TR, false, true>},
         {gemv_xreg_kernel<NT, U, CM, GEMV_IN_SWIGLU, false, TR, false>,
          gemv_xreg_kernel<NT, U, CM, GEMV_IN_SWIGLU, true, TR, false>, nullptr, nullptr},
         {gemv_xreg_kernel<NT, U, CM, GEMV_IN_SWIGLU_FAST, false, TR, false>,
          gemv_xreg_kernel<NT, U, CM, GEMV_IN_SWIGLU_FAST, true, TR, false>, nullptr, nullptr}}};
    return t;
}

// the fused MLP's kernels (FD: the default 1024-thread form with one column a warp only), with
// FDI transposed-down loads in flight per thread
template <int FDI> static xreg_fn xreg_fd_fn_n(int in)
{
    return in == GEMV_IN_NORM
               ? gemv_xreg_kernel<1024, 4, 1, GEMV_IN_NORM, false, true, false, true, FDI>
           : in == GEMV_IN_PLAIN
               ? gemv_xreg_kernel<1024, 4, 1, GEMV_IN_PLAIN, false, true, false, true, FDI>
               : nullptr;
}

static xreg_fn xreg_fd_fn(int in)
{
    return g_mlp_inflight == 2   ? xreg_fd_fn_n<2>(in)
           : g_mlp_inflight == 8 ? xreg_fd_fn_n<8>(in)
                                 : xreg_fd_fn_n<4>(in);
}

// the LM head's kernels with the argmax in the epilogue (AM: the default two-batch 1024-thread
// form, one column a warp)
static xreg_fn xreg_am_fn(int in)
{
    return in == GEMV_IN_NORM
               ? gemv_xreg_kernel<1024, 4, 1, GEMV_IN_NORM, false, true, false, false, 0, true>
           : in == GEMV_IN_PLAIN
               ? gemv_xreg_kernel<1024, 4, 1, GEMV_IN_PLAIN, false, true, false, false, 0, true>
               : nullptr;
}

// launches the column-resident kernel when the shape suits it (columns per warp within the
// shape's limit, the per-row sums in shared memory); false: the caller takes another path
// acc: 0 y =, 1 y +=, 2 RoPE and the cache store (rp; n even, whole pairs per block), 3 the
// SwiGLU of the gate | up rows (n even, y of n / 2), 4 that with the down after it (fd; the
// two-batch 1024-thread form, k <= 8192), 5 y = with the argmax (fd.am; the two-batch form,
// one column a warp, plain or norm input); check: only say whether it would launch
static bool xreg_launch(float *y, const uint16_t *W, const float *x, const float *bias, int n,
                        int k, int in, int acc, const float *nw, float eps, const ls_device &di,
                        size_t smem_max, cudaStream_t s, const gemv_rope &rp = {},
                        const gemv_fd &fd = {}, bool check = false)
{
    const int nt = g_xreg >= 2 ? 1024 : 512;
    const int NW = nt / 32, S = (k / 8 + 31) / 32, slots = S < NW ? S : NW;
    const int cm = (S + slots - 1) / slots;
    if (cm > (nt == 1024 ? 2 : 4)) return false;
    if (acc == 4 && (g_xreg != 3 || cm != 1 || k / 8 > nt)) return false;
    if (acc == 5 && (g_xreg != 3 || cm != 1)) return false;
    if (fd.xpend && (cm != 1 || in == GEMV_IN_SWIGLU || acc == 1 || acc == 3 || acc == 4 ||
                     ((uintptr_t)fd.xpend & 15)))
        return false; // the kernel's xpend forms, which read it as float4
    if (in == GEMV_IN_SWIGLU && g_silu_fast) in = GEMV_IN_SWIGLU_FAST;
    const bool pairs = acc >= 2 && acc <= 4; // forms that take rows in pairs
    const int units = pairs ? n / 2 : n;
    const int grid = units < di.sms ? units : di.sms;
    if (acc == 4 && grid > PEND_MAX_BLOCKS) return false; // the pending sum's lo bound
    const int rows = (pairs ? 2 : 1) * ((units + grid - 1) / grid);
    if (acc == 2 && rows / 2 > GEMV_ROPE_PAIRS) return false;
    // odd stride: no bank conflicts; FD: then h and the row sets' sums (from a 16-byte boundary)
    const size_t smem = ((size_t)rows * (slots | 1) +
                         (acc == 4 ? (size_t)rows / 2 + 3 + (size_t)(nt / (k / 8) - 1) * k : 0) +
                         (in == GEMV_IN_ATT_SHARED ? 3 + (size_t)k : 0)) *
                        sizeof(float);
    if (smem > smem_max) return false;
    if (check) return true;
    // the two-batch form for one column per warp only (with two it spills)
    // the attention's partials: the o GEMV's form only (one column a warp, y += with its copy)
    if ((in == GEMV_IN_ATT || in == GEMV_IN_ATT_SHARED) &&
        (nt != 1024 || cm != 1 || g_xreg != 3 || acc != 1))
        return false;
    xreg_fn fn = in == GEMV_IN_ATT ? gemv_xreg_kernel<1024, 4, 1, GEMV_IN_ATT, true, true, false>
                 : in == GEMV_IN_ATT_SHARED
                     ? gemv_xreg_kernel<1024, 4, 1, GEMV_IN_ATT_SHARED, true, true, false>
                 : acc == 4   ? xreg_fd_fn(in)
                 : acc == 5   ? xreg_am_fn(in)
                 : nt == 1024 ? (cm == 1 ? (g_xreg == 3 ? xreg_table<1024, 4, 1, true>().f[in][acc]
                                                        : xreg_table<1024, 4, 1>().f[in][acc])
                                         : xreg_table<1024, 4, 2>().f[in][acc])
                 : cm == 1    ? xreg_table<512, 8, 1>().f[in][acc]
                 : cm == 2    ? xreg_table<512, 8, 2>().f[in][acc]
                              : xreg_table<512, 8, 4>().f[in][acc];
    if (!fn) return false;
    set_smem_attr((const void *)fn, di);
    pdl_launch(fn, (unsigned)grid, (unsigned)nt, smem, s, y, (const uint4 *)W, x, bias, n, k, nw,
               eps, rp, fd);
    return true;
}

// the fast kernels' conditions: whole 16-byte chunks per row, 16-byte aligned W, x and norm
// weights, and one position's x within the staged-x kernel's shared memory
static bool fast_path(const uint16_t *W, const float *x, const float *nw, int k, size_t smem_max)
{
    return k % 8 == 0 && ((uintptr_t)W & 15) == 0 && ((uintptr_t)x & 15) == 0 &&
           (!nw || ((uintptr_t)nw & 15) == 0) && gemv_smem(1, k, 1024) <= smem_max;
}

static void gemv_launch(float *y, const uint16_t *W, const float *x, const float *bias, int T,
                        int n, int k, bool swiglu, const float *nw, float eps, int accumulate,
                        void *stream)
{
    if (T < 1 || n < 1 || k < 1) ls_die(__FILE__, __LINE__, "ls_gemv", "T, n and k must be >= 1");
    cudaStream_t s = (cudaStream_t)stream;
    const ls_device di = ls_device_get();
    shapes_from_env();
    if (swiglu) nw = nullptr;
    const int in = swiglu ? GEMV_IN_SWIGLU : nw ? GEMV_IN_NORM : GEMV_IN_PLAIN;
    const int acc = accumulate != 0;
    // dynamic shared memory a block may take: the opt-in limit less the static block sums
    const size_t smem_max = (size_t)di.smem_optin - GEMV_STATIC_SMEM;
    if (!fast_path(W, x, nw, k, smem_max)) {
        pdl_launch(gemv_generic_kernel, (unsigned)((n + 7) / 8), 256u, (size_t)0, s, y, W, x, bias,
                   T, n, k, (int)swiglu, nw, eps, acc);
        return;
    }
    if (T == 1 && g_xreg &&
        xreg_launch(y, W, x, bias, n, k, in, acc, nw, eps, di, smem_max, s))
        return;
    if (T == 1) {
        const double bytes = (double)n * k * 2;
        const gemv_shape &sh = gemv_shapes[g_shape_pick[bytes < 96e6 ? 0 : bytes <= 512e6 ? 1 : 2]];
        gemv_fn fn = sh.k.f[in][acc];
        size_t smem = gemv_smem(1, k, sh.nt);
        // blocks per SM that fit in shared memory (1 KB per block is the system's)
        int fit = (int)((size_t)di.smem_per_sm / (smem + GEMV_STATIC_SMEM + 1024));
        int per_sm = fit < 1 ? 1 : fit < sh.minb ? fit : sh.minb;
        long long g = (long long)di.sms * per_sm;
        set_smem_attr((const void *)fn, di);
        pdl_launch(fn, (unsigned)(n < g ? n : g), (unsigned)sh.nt, smem, s, y, (const uint4 *)W, x,
                   bias, n, k, nw, eps);
        return;
    }
    // positions per pass: as many as fit in shared memory, at most GEMV_MAX_T
    int tmax = 1;
    while (tmax < GEMV_MAX_T && gemv_smem(tmax + 1, k, 512) <= smem_max) tmax++;
    unsigned grid = (unsigned)(n < di.sms ? n : di.sms);
    for (int t0 = 0; t0 < T; t0 += tmax) {
        int tc = T - t0 < tmax ? T - t0 : tmax;
        const float *xt = x + (size_t)t0 * (swiglu ? 2 : 1) * k;
        if (tc == 1) { // the tail of a split: the T = 1 path
            gemv_launch(y + (size_t)t0 * n, W, xt, bias, 1, n, k, swiglu, nw, eps, accumulate,
                        stream);
            continue;
        }
        gemv_fn fn = multi_fns(tc).f[in][acc];
        set_smem_attr((const void *)fn, di);
        pdl_launch(fn, grid, 512u, gemv_smem(tc, k, 512), s, y + (size_t)t0 * n, (const uint4 *)W,
                   xt, bias, n, k, nw, eps);
    }
}

extern "C" void ls_gemv(float *y, const uint16_t *W, const float *x, const float *bias, int T,
                        int n, int k, void *stream)
{
    gemv_launch(y, W, x, bias, T, n, k, false, nullptr, 0.0f, 0, stream);
}

extern "C" void ls_gemv_swiglu(float *y, const uint16_t *W, const float *gu, const float *bias,
                               int T, int n, int k, void *stream)
{
    gemv_launch(y, W, gu, bias, T, n, k, true, nullptr, 0.0f, 0, stream);
}

extern "C" void ls_gemv_ex(float *y, const uint16_t *W, const float *x, const float *bias, int T,
                           int n, int k, int swiglu, const float *norm_w, float eps, int accumulate,
                           void *stream)
{
    if (swiglu && norm_w)
        ls_die(__FILE__, __LINE__, "ls_gemv_ex", "a SwiGLU input takes no RMSNorm");
    gemv_launch(y, W, x, bias, T, n, k, swiglu != 0, norm_w, eps, accumulate, stream);
}

// the column-resident launchers' common start: the environment's settings, the device and the
// dynamic shared memory a block may take (the opt-in limit less the static block sums); true
// where that kernel is on and W, x and the norm weights suit it (fast_path)
struct xreg_at {
    ls_device di;
    size_t smem_max;
};

static bool xreg_ready(xreg_at &at, const uint16_t *W, const float *x, const float *nw, int k)
{
    shapes_from_env();
    at.di = ls_device_get();
    at.smem_max = (size_t)at.di.smem_optin - GEMV_STATIC_SMEM;
    return g_xreg && fast_path(W, x, nw, k, at.smem_max);
}

extern "C" int ls_gemv_rope_kv(float *qkv, const uint16_t *W, const float *x, const float *xpend,
                               const float *bias, int k, const float *norm_w, float eps, int hq,
                               int hkv, int hd, uint16_t *kcache, uint16_t *vcache, const int *pos,
                               const float *inv_freq, int max_ctx, int interleaved, void *stream)
{
    if (k < 1 || hq < 1 || hkv < 1 || hd < 2 || hd % 2 || hd > 256)
        ls_die(__FILE__, __LINE__, "ls_gemv_rope_kv",
               "expected k >= 1, hq >= 1, hkv >= 1 and an even head_dim <= 256");
    const int n = (hq + 2 * hkv) * hd;
    xreg_at at;
    if (xreg_ready(at, W, x, norm_w, k) && (hd & (hd - 1)) == 0) {
        int sh = 0;
        while ((1 << sh) < hd) sh++;
        const gemv_rope rp = {kcache,          vcache, pos,     inv_freq,        hq * hd,
                              (hq + hkv) * hd, sh,     max_ctx, interleaved != 0};
        gemv_fd fd = {};
        fd.xpend = xpend;
        if (xreg_launch(qkv, W, x, bias, n, k, norm_w ? GEMV_IN_NORM : GEMV_IN_PLAIN, 2, norm_w,
                        eps, at.di, at.smem_max, (cudaStream_t)stream, rp, fd))
            return 1;
    }
    if (xpend) return 0;
    gemv_launch(qkv, W, x, bias, 1, n, k, false, norm_w, eps, 0, stream);
    ls_rope_kv(qkv, qkv + (size_t)hq * hd, qkv + (size_t)(hq + hkv) * hd, n, n, kcache, vcache, pos,
               inv_freq, 1, hq, hkv, hd, max_ctx, interleaved, nullptr, nullptr, 0.0f, stream);
    return 1;
}

extern "C" int ls_gemv_pend(float *y, const uint16_t *W, const float *x, const float *xpend,
                            const float *bias, int n, int k, const float *norm_w, float eps,
                            void *stream)
{
    if (n < 1 || k < 1) ls_die(__FILE__, __LINE__, "ls_gemv_pend", "expected n, k >= 1");
    xreg_at at;
    if (!xreg_ready(at, W, x, norm_w, k)) return 0;
    gemv_fd fd = {};
    fd.xpend = xpend;
    return xreg_launch(y, W, x, bias, n, k, norm_w ? GEMV_IN_NORM : GEMV_IN_PLAIN, 0, norm_w, eps,
                       at.di, at.smem_max, (cudaStream_t)stream, {}, fd);
}

extern "C" int ls_gemv_argmax(float *y, const uint16_t *W, const float *x, const float *xpend,
                              int n, int k, const float *norm_w, float eps, unsigned long long *key,
                              void *stream)
{
    if (n < 1 || k < 1 || !key)
        ls_die(__FILE__, __LINE__, "ls_gemv_argmax", "expected n, k >= 1 and a key word");
    xreg_at at;
    if (!xreg_ready(at, W, x, norm_w, k)) return 0;
    gemv_fd fd = {};
    fd.xpend = xpend;
    fd.am_key = key;
    return xreg_launch(y, W, x, nullptr, n, k, norm_w ? GEMV_IN_NORM : GEMV_IN_PLAIN, 5, norm_w,
                       eps, at.di, at.smem_max, (cudaStream_t)stream, {}, fd);
}

extern "C" int ls_gemv_gu_swiglu(float *h, const uint16_t *W, const float *x,
                                  const float *norm_w, float eps, int f, int k, void *stream)
{
    if (f < 1 || k < 1) ls_die(__FILE__, __LINE__, "ls_gemv_gu_swiglu", "expected f, k >= 1");
    xreg_at at;
    if (!xreg_ready(at, W, x, norm_w, k)) return 0;
    return xreg_launch(h, W, x, nullptr, 2 * f, k, norm_w ? GEMV_IN_NORM : GEMV_IN_PLAIN, 3, norm_w,
                       eps, at.di, at.smem_max, (cudaStream_t)stream);
}

// the fused MLP's shapes: the column-resident gate+up kernel's (acc 3) and the down's rows
static bool mlp_takes(xreg_at &at, const uint16_t *Wgu, const uint16_t *DT, const float *x,
                      const float *pend, const float *norm_w, int f, int k)
{
    return xreg_ready(at, Wgu, x, norm_w, k) && f >= 1 && ((uintptr_t)DT & 15) == 0 &&
           ((uintptr_t)pend & 15) == 0 &&
           xreg_launch(nullptr, Wgu, x, nullptr, 2 * f, k, norm_w ? GEMV_IN_NORM : GEMV_IN_PLAIN, 4,
                       norm_w, 0.0f, at.di, at.smem_max, nullptr, {}, {}, true);
}

extern "C" int ls_gemv_mlp(float *pend, const float *x, const uint16_t *Wgu, const uint16_t *DT,
                           const float *norm_w, float eps, int f, int k, void *stream)
{
    if (f < 1 || k < 1) ls_die(__FILE__, __LINE__, "ls_gemv_mlp", "expected f, k >= 1");
    if (pend == x) ls_die(__FILE__, __LINE__, "ls_gemv_mlp", "pend must not be the input x");
    xreg_at at;
    if (!mlp_takes(at, Wgu, DT, x, pend, norm_w, f, k)) return 0;
    gemv_fd fd = {};
    fd.dt = (const uint4 *)DT;
    fd.out = pend;
    fd.lab_red = g_lab_red; // the switches read by mlp_takes (xreg_ready)
    // two row sets or more (k <= 4096 at 1024 threads): the first holds the block's lo
    // (the lab's forms change the atomics: with one, none)
    fd.bulk = at.di.major >= 9 && k / 8 <= 512 && !g_lab_red ? g_mlp_bulk : 0;
    const bool launched =
        xreg_launch(nullptr, Wgu, x, nullptr, 2 * f, k, norm_w ? GEMV_IN_NORM : GEMV_IN_PLAIN, 4,
                    norm_w, eps, at.di, at.smem_max, (cudaStream_t)stream, {}, fd);
    if (launched) g_mlp_bulked = fd.bulk;
    return launched;
}

extern "C" int ls_gemv_mlp_takes(const uint16_t *Wgu, const uint16_t *DT, const float *x,
                                 const float *pend, const float *norm_w, int f, int k)
{
    xreg_at at;
    return mlp_takes(at, Wgu, DT, x, pend, norm_w, f, k);
}

// the o GEMV's form: y += W . x, each y also in y2, y's pending sum taken in (in: plain, or the
// attention's partials att)
static int residual_copy_launch(float *y, float *y2, float *pend, int pend_live, const uint16_t *W,
                                const float *x, int n, int k, int in, const att_split &att,
                                void *stream)
{
    xreg_at at;
    if (!xreg_ready(at, W, x, nullptr, k)) return 0;
    gemv_fd fd = {};
    fd.y2 = y2;
    fd.pend = pend;
    fd.pend_live = pend_live;
    fd.att = att;
    return xreg_launch(y, W, x, nullptr, n, k, in, 1, nullptr, 0.0f, at.di, at.smem_max,
                       (cudaStream_t)stream, {}, fd);
}

extern "C" int ls_gemv_residual_copy_att(float *y, float *y2, float *pend, int pend_live,
                                         const uint16_t *W, const float *ws, const int *pos, int hq,
                                         int hd, int nsplit, int min_chunk, int max_ctx, int n,
                                         int shared, void *stream)
{
    const int k = hq * hd;
    if (n < 1 || hq < 1 || hd < 8 || hd % 8 || nsplit < 2 || min_chunk < 1 || max_ctx < 1 || !pos)
        return 0;
    return residual_copy_launch(y, y2, pend, pend_live, W, ws, n, k,
                                shared ? (int)GEMV_IN_ATT_SHARED : (int)GEMV_IN_ATT,
                                {ws, pos, hq, hd, nsplit, min_chunk, max_ctx}, stream);
}

extern "C" int ls_gemv_residual_copy_takes(const uint16_t *W, const float *x, int n, int k)
{
    xreg_at at;
    return n >= 1 && k >= 1 && xreg_ready(at, W, x, nullptr, k) &&
           xreg_launch(nullptr, W, x, nullptr, n, k, GEMV_IN_PLAIN, 1, nullptr, 0.0f, at.di,
                       at.smem_max, nullptr, {}, {}, true);
}

extern "C" int ls_gemv_residual_copy(float *y, float *y2, float *pend, int pend_live,
                                     const uint16_t *W, const float *x, int n, int k, void *stream)
{
    if (n < 1 || k < 1) ls_die(__FILE__, __LINE__, "ls_gemv_residual_copy", "expected n, k >= 1");
    return residual_copy_launch(y, y2, pend, pend_live, W, x, n, k, GEMV_IN_PLAIN, {}, stream);
}

extern "C" int ls_gemv_set_mlp_inflight(int n)
{
    shapes_from_env();
    const int old = g_mlp_inflight;
    if (n == 2 || n == 4 || n == 8) g_mlp_inflight = n;
    return old;
}

extern "C" int ls_gemv_set_mlp_bulk(int on)
{
    shapes_from_env();
    const int old = g_mlp_bulk;
    if (on >= 0 && on <= 2) g_mlp_bulk = on;
    return old;
}

extern "C" int ls_gemv_mlp_bulked(void)
{
    return g_mlp_bulked;
}

extern "C" int ls_gemv_shapes(void)
{
    return GEMV_NSHAPES;
}

extern "C" const char *ls_gemv_set_shapes(int small, int medium, int large)
{
    if (small < 0 || medium < 0 || large < 0 || small >= GEMV_NSHAPES || medium >= GEMV_NSHAPES ||
        large >= GEMV_NSHAPES)
        return nullptr;
    g_shape_pick[0] = small;
    g_shape_pick[1] = medium;
    g_shape_pick[2] = large;
    g_shapes_set = 1;
    return gemv_shapes[small].name;
}

extern "C" int ls_gemv_set_xreg(int on)
{
    shapes_from_env();
    const int old = g_xreg;
    g_xreg = on < 0 ? 0 : on > 3 ? 3 : on;
    return old;
}

extern "C" int ls_gemv_set_silu_fast(int on)
{
    shapes_from_env();
    const int old = g_silu_fast;
    g_silu_fast = on != 0;
    return old;
}

extern "C" void ls_kernels_set_pdl(int on)
{
    ls_pdl_on = on != 0;
}

int ls_carveout = -1;

void ls_func_attr(const void *fn, cudaFuncAttribute attr, int value)
{
    int dev;
    CHECK_CUDA(cudaGetDevice(&dev));
    if (attr_first(fn, dev, attr, value)) CHECK_CUDA(cudaFuncSetAttribute(fn, attr, value));
}

void ls_prefer_carveout(const void *fn)
{
    ls_func_attr(fn, cudaFuncAttributePreferredSharedMemoryCarveout, ls_carveout);
}

extern "C" void ls_kernels_set_carveout(int pct)
{
    ls_carveout = pct < 0 ? -1 : pct > 100 ? 100 : pct;
}
