// The prefill's causal attention on Hopper's warpgroup tensor-core instructions (wgmma, in
// sm_90a builds): form 7 of ls_attention_prefill (attention.cu), its default where the grid has
// a block for every other SM. Measured (thirty-ninth session, one H200, BENCHMARKS.md): 400
// TFLOP/s at the 8B's 8192 positions and at 1024 after 15360 against 313-324 for the best
// mma.sync form (form 4); the 8B's 16384-token prefill 632-638 -> 571-579 ms. The loop is
// FlashAttention-2's, as in the mma.sync forms: a block holds 128 rows (q head, query: the G q
// heads of one KV head over 128 / G queries), two warpgroups of 64 rows each; per tile of BK keys
// the K and V rows are copied (cp.async, the next tile's during this one's products) into shared
// memory in the layout wgmma reads with the 128-byte swizzle, each warpgroup forms its 64 x BK
// scores with wgmma from Q and K in shared memory (fp32 accumulators in registers), masks, updates
// its rows' running max and sum, rounds the probabilities to bf16 in the registers the scores came
// in (the accumulator layout of two 8-column blocks is the A fragment of one 16-key step) and adds
// P V into its 64 x hd fp32 output with wgmma, P from registers and V read N-major from shared
// memory. Rounding q and p to bf16 is, as in the other tensor-core forms, the only difference
// from the fp32 kernel.
//
// Shared-memory tiles (Q, K, V): hd / 64 column blocks of rows x 128 bytes (64 bf16), each
// 128-byte row's 16-byte chunks permuted by chunk ^ (row % 8), the blocks on 1024-byte
// boundaries: the canonical 128-byte-swizzled layout of the PTX ISA's wgmma section, K-major
// for Q and K (rows x hd) and N-major for V (keys x hd read as the K x N operand).
#include "config.h"
#include "attention.h"
#include "device.cuh"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_DEVICE 1
#endif

#define WG_ROWS    128 // rows a block: two warpgroups of 64
#define WG_THREADS 256

// the byte offset of 16-byte chunk c (along hd) of row r in a swizzled tile of `rows` rows
static __device__ __forceinline__ uint32_t sw_off(int r, int c, int rows)
{
    return (uint32_t)((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

#ifdef WG_DEVICE
// a shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte
// offsets
static __device__ __forceinline__ uint64_t sw_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)((lbo & 0x3FFFF) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}

// K-major operand (Q or K) for inputs [16 s, 16 s + 16): its first row at addr in a tile of
// `rows` rows; 8-row groups 1024 bytes apart (the leading offset is not used when swizzled)
static __device__ __forceinline__ uint64_t kmajor_desc(uint32_t addr, int s, int rows)
{
    return sw_desc(addr + (uint32_t)((s >> 2) * rows * 128 + (s & 3) * 32), 16, 1024);
}

// N-major V for keys [16 j, 16 j + 16) of a tile of `rows` keys: the hd column blocks rows x 128
// bytes apart, 8-key groups 1024
static __device__ __forceinline__ uint64_t nmajor_desc(uint32_t addr, int j, int rows)
{
    return sw_desc(addr + (uint32_t)(j * 16 * 128), (uint32_t)(rows * 128), 1024);
}

static __device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wg_wait0()
{
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// keeps the compiler from moving accesses of d across the asynchronous products
template <int N> static __device__ __forceinline__ void reg_fence(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// the copies and stores of this thread into shared memory made visible to wgmma's reads
static __device__ __forceinline__ void fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// 16 bytes from global to shared memory (address `dst`), zeros when !valid
static __device__ __forceinline__ void wg_cp16(uint32_t dst, const uint16_t *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}

static __device__ __forceinline__ uint32_t wg_pack(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}

// d (+)= a b, a and b K-major in shared memory (descriptors); d is zeroed first unless acc
static __device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t a, uint64_t b, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, "
                 "p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(acc));
}

// d += a b, a in registers (the m64nNk16 A fragment), b N-major in shared memory
static __device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4],
                                                    uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, "
                 "%33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// d (+)= a b, a and b K-major in shared memory (descriptors); d is zeroed first unless acc
static __device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b,
                                                     int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(a), "l"(b), "r"(acc));
}

// d += a b, a in registers (the m64nNk16 A fragment), b N-major in shared memory
static __device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4],
                                                     uint64_t b)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

template <int N> struct wg_n;
template <> struct wg_n<64> {
    static __device__ __forceinline__ void ss(float (&d)[32], uint64_t a, uint64_t b, int acc)
    {
        wgmma_ss_n64(d, a, b, acc);
    }
    static __device__ __forceinline__ void rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b)
    {
        wgmma_rs_n64(d, a, b);
    }
};
template <> struct wg_n<128> {
    static __device__ __forceinline__ void ss(float (&d)[64], uint64_t a, uint64_t b, int acc)
    {
        wgmma_ss_n128(d, a, b, acc);
    }
    static __device__ __forceinline__ void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b)
    {
        wgmma_rs_n128(d, a, b);
    }
};
#endif

// shared memory of a block: 1024 bytes of alignment slack, Q, and two stages of K and V
template <int HD, int BK> static constexpr size_t wg_smem()
{
    return 1024 + (size_t)WG_ROWS * HD * 2 + (size_t)2 * 2 * BK * HD * 2;
}

#ifdef WG_DEVICE
// One tile's online softmax for this thread's rows R0 and R1 (query positions qp0, qp1): s[4 i +
// e] is row R0's score of key k0 + 8 i + 2 (lane % 4) + e, s[4 i + 2 + e] row R1's. Masks the
// keys past a row's query or past n_keys (where `mask`), moves the running max (m) and sum (l)
// on, returns in a the factors by which the output so far must be scaled, and writes the
// probabilities, rounded to bf16, as the A fragments of the tile's BK / 16 key steps.
template <int BK>
static __device__ __forceinline__ void
wg_softmax(float (&s)[BK / 2], uint32_t (&pa)[BK / 16][4], float (&m)[2], float (&l)[2],
           float (&a)[2], int k0, int qp0, int qp1, int n_keys, bool mask, int lane)
{
    if (mask)
#pragma unroll
        for (int i = 0; i < BK / 8; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int kp = k0 + 8 * i + 2 * (lane & 3) + e;
                if (kp > qp0 || kp >= n_keys) s[4 * i + e] = -INFINITY;
                if (kp > qp1 || kp >= n_keys) s[4 * i + 2 + e] = -INFINITY;
            }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int i = 0; i < BK / 8; i++) {
        mx0 = fmaxf(mx0, fmaxf(s[4 * i], s[4 * i + 1]));
        mx1 = fmaxf(mx1, fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    // key 0 is visible to every row, so after the first tile both maxima are finite
    const float n0 = fmaxf(m[0], mx0), n1 = fmaxf(m[1], mx1);
    a[0] = exp2f(m[0] - n0), a[1] = exp2f(m[1] - n1);
    m[0] = n0, m[1] = n1;
    float l0 = l[0] * a[0], l1 = l[1] * a[1];
#pragma unroll
    for (int j = 0; j < BK / 16; j++) {
        const float p0 = exp2f(s[8 * j] - n0), p1 = exp2f(s[8 * j + 1] - n0);
        const float p2 = exp2f(s[8 * j + 2] - n1), p3 = exp2f(s[8 * j + 3] - n1);
        const float p4 = exp2f(s[8 * j + 4] - n0), p5 = exp2f(s[8 * j + 5] - n0);
        const float p6 = exp2f(s[8 * j + 6] - n1), p7 = exp2f(s[8 * j + 7] - n1);
        l0 += (p0 + p1) + (p4 + p5);
        l1 += (p2 + p3) + (p6 + p7);
        pa[j][0] = wg_pack(p0, p1);
        pa[j][1] = wg_pack(p2, p3);
        pa[j][2] = wg_pack(p4, p5);
        pa[j][3] = wg_pack(p6, p7);
    }
    l[0] = l0, l[1] = l1;
}

template <int HD>
static __device__ __forceinline__ void wg_rescale(float (&o)[HD / 2], const float (&a)[2])
{
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
        o[4 * i] *= a[0], o[4 * i + 1] *= a[0], o[4 * i + 2] *= a[1], o[4 * i + 3] *= a[1];
}
#endif

template <int HD, int BK, int G>
static __global__ void __launch_bounds__(WG_THREADS, 1)
    attn_prefill_wg_kernel(float *__restrict__ out, const float *__restrict__ q, int q_stride,
                           const uint16_t *__restrict__ kcache, const uint16_t *__restrict__ vcache,
                           int pos0, int T, int hq, int group, int max_ctx, float qscale)
{
#ifdef WG_DEVICE
    constexpr int BQ = WG_ROWS / G, NC = HD / 8, QB = WG_ROWS * HD * 2, TB = BK * HD * 2;
    static_assert(BQ % 16 == 0, "a warp's 16 rows share one q head");
    extern __shared__ uint8_t wg_smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(wg_smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u; // Q; then stage s: K at QB + 2 s TB, V after
    uint8_t *sm = wg_smem_raw + (base - raw);

    pdl_launch_dependents();
    pdl_wait();
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int t0 = (gridDim.x - 1 - blockIdx.x) * BQ, h0 = blockIdx.y * G, kvh = h0 / group;
    const int n_keys = pos0 + min(T, t0 + BQ); // keys [0, n_keys) are visible to the block
    const uint16_t *K = kcache + (size_t)kvh * max_ctx * HD;
    const uint16_t *V = vcache + (size_t)kvh * max_ctx * HD;

    // q scaled, rounded to bf16, into the swizzled Q tile: row r is q head h0 + r / BQ, query
    // t0 + r % BQ
    for (int i = tid; i < WG_ROWS * NC; i += WG_THREADS) {
        const int r = i / NC, c = i - r * NC, g = r / BQ, t = t0 + r - g * BQ;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
        if (t < T) {
            const float4 *src = reinterpret_cast<const float4 *>(q + (size_t)t * q_stride +
                                                                 (size_t)(h0 + g) * HD + c * 8);
            a = src[0];
            b = src[1];
        }
        *reinterpret_cast<uint4 *>(sm + sw_off(r, c, WG_ROWS)) =
            make_uint4(wg_pack(a.x * qscale, a.y * qscale), wg_pack(a.z * qscale, a.w * qscale),
                       wg_pack(b.x * qscale, b.y * qscale), wg_pack(b.z * qscale, b.w * qscale));
    }
    // the K and V tiles of stage st
    auto ktile = [&](int st) { return base + QB + (uint32_t)st * 2 * TB; };
    // the K and V rows of keys [k0, k0 + BK) into stage st (zeros past n_keys), one group (an
    // empty one from k0 = n_keys on)
    auto fetch = [&](int k0, int st) {
        if (k0 < n_keys) {
            const uint32_t kt = ktile(st), vt = kt + TB;
            for (int i = tid; i < BK * NC; i += WG_THREADS) {
                const int r = i / NC, c = i - r * NC, p = k0 + r;
                const size_t g = (size_t)min(p, n_keys - 1) * HD + c * 8;
                const uint32_t o = sw_off(r, c, BK);
                wg_cp16(kt + o, K + g, p < n_keys);
                wg_cp16(vt + o, V + g, p < n_keys);
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    // this thread's rows of the accumulators: R0 and R0 + 8 of the block (query positions qp0,
    // qp1, q head h); the warpgroup's queries lie in [wq_lo, wq_hi]
    const int R0 = wg * 64 + warp * 16 + (lane >> 2), R1 = R0 + 8;
    const int qp0 = pos0 + t0 + R0 % BQ, qp1 = pos0 + t0 + R1 % BQ;
    const int off_lo = BQ >= 64 ? (wg * 64) % BQ : 0, span = BQ >= 64 ? 64 : BQ;
    const int wq_lo = pos0 + t0 + off_lo, wq_hi = pos0 + min(t0 + off_lo + span, T) - 1;
    const uint32_t qa = base + wg * 64 * 128; // the warpgroup's first row of Q
    // where a tile reaches past the warpgroup's first query or past the keys
    auto needs_mask = [&](int k0) { return k0 + BK - 1 > wq_lo || k0 + BK > n_keys; };
    // issue the scores of the tile in stage st into s
    auto scores = [&](float(&s)[BK / 2], int st) {
#pragma unroll
        for (int i = 0; i < BK / 2; i++) s[i] = 0.0f;
        reg_fence(s);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            wg_n<BK>::ss(s, kmajor_desc(qa, ks, WG_ROWS), kmajor_desc(ktile(st), ks, BK), ks > 0);
        wg_commit();
    };
    float o[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
    // issue o += p v for the V tile of stage st
    auto pv = [&](const uint32_t(&p)[BK / 16][4], int st) {
        reg_fence(o);
        wg_fence();
#pragma unroll
        for (int j = 0; j < BK / 16; j++) wg_n<HD>::rs(o, p[j], nmajor_desc(ktile(st) + TB, j, BK));
        wg_commit();
    };
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, a[2];

    fetch(0, 0);
    for (int k0 = 0, st = 0; k0 < n_keys; k0 += BK, st ^= 1) {
        // the next tile's copies go into the other stage, which both warpgroups finished
        // reading at the end of the last iteration; then wait for this tile's
        fetch(k0 + BK, st ^ 1);
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        fence_async_smem(); // this thread's copies (and, first, its Q stores) for wgmma
        __syncthreads();
        if (k0 <= wq_hi) { // some key of the tile is visible to some row of the warpgroup
            float s[BK / 2];
            uint32_t p[BK / 16][4];
            scores(s, st);
            wg_wait0();
            reg_fence(s);
            wg_softmax<BK>(s, p, m, l, a, k0, qp0, qp1, n_keys, needs_mask(k0), lane);
            wg_rescale<HD>(o, a);
            pv(p, st);
            wg_wait0();
            reg_fence(o);
        }
        __syncthreads(); // this stage is free for the copies two tiles on
    }

#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        l[0] += __shfl_xor_sync(0xffffffffu, l[0], off);
        l[1] += __shfl_xor_sync(0xffffffffu, l[1], off);
    }
    const int ta = t0 + R0 % BQ, tb = t0 + R1 % BQ, h = h0 + R0 / BQ;
    const float i0 = 1.0f / l[0], i1 = 1.0f / l[1];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
        const int d = 8 * i + 2 * (lane & 3);
        if (ta < T)
            *reinterpret_cast<float2 *>(out + ((size_t)ta * hq + h) * HD + d) =
                make_float2(o[4 * i] * i0, o[4 * i + 1] * i0);
        if (tb < T)
            *reinterpret_cast<float2 *>(out + ((size_t)tb * hq + h) * HD + d) =
                make_float2(o[4 * i + 2] * i1, o[4 * i + 3] * i1);
    }
#endif
}

// One warpgroup's products alone, for the test: c_ss (64 x 64) = a (64 x 128, row-major) times
// b (64 x 128, row-major) transposed, both through K-major swizzled tiles; c_rs (64 x 128) = p
// (64 x 64, row-major, in registers as the A fragment) times v (64 x 128, row-major) read
// N-major. The same layouts, descriptors and fragments as the kernel above.
static __global__ void __launch_bounds__(128, 1)
    wg_selftest_kernel(float *__restrict__ c_ss, float *__restrict__ c_rs,
                       const uint16_t *__restrict__ a, const uint16_t *__restrict__ b,
                       const uint16_t *__restrict__ p, const uint16_t *__restrict__ v)
{
#ifdef WG_DEVICE
    __shared__ __align__(1024) uint8_t sm[3 * 64 * 128 * 2];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const uint32_t at = (uint32_t)__cvta_generic_to_shared(sm), bt = at + 16384, vt = bt + 16384;
    for (int i = tid; i < 64 * 16; i += 128) {
        const int r = i / 16, c = i % 16;
        *reinterpret_cast<uint4 *>(sm + sw_off(r, c, 64)) =
            *reinterpret_cast<const uint4 *>(a + r * 128 + c * 8);
        *reinterpret_cast<uint4 *>(sm + 16384 + sw_off(r, c, 64)) =
            *reinterpret_cast<const uint4 *>(b + r * 128 + c * 8);
        *reinterpret_cast<uint4 *>(sm + 32768 + sw_off(r, c, 64)) =
            *reinterpret_cast<const uint4 *>(v + r * 128 + c * 8);
    }
    fence_async_smem();
    __syncthreads();
    const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8, cq = 2 * (lane & 3);
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; i++) s[i] = 0.0f;
    reg_fence(s);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ks++)
        wgmma_ss_n64(s, kmajor_desc(at, ks, 64), kmajor_desc(bt, ks, 64), ks > 0);
    wg_commit();
    wg_wait0();
    reg_fence(s);
    for (int i = 0; i < 8; i++) {
        c_ss[r0 * 64 + 8 * i + cq] = s[4 * i];
        c_ss[r0 * 64 + 8 * i + cq + 1] = s[4 * i + 1];
        c_ss[r1 * 64 + 8 * i + cq] = s[4 * i + 2];
        c_ss[r1 * 64 + 8 * i + cq + 1] = s[4 * i + 3];
    }
    uint32_t pa[4][4];
    const uint32_t *p32 = reinterpret_cast<const uint32_t *>(p);
    for (int j = 0; j < 4; j++) {
        pa[j][0] = p32[(r0 * 64 + 16 * j + cq) / 2];
        pa[j][1] = p32[(r1 * 64 + 16 * j + cq) / 2];
        pa[j][2] = p32[(r0 * 64 + 16 * j + 8 + cq) / 2];
        pa[j][3] = p32[(r1 * 64 + 16 * j + 8 + cq) / 2];
    }
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    reg_fence(o);
    wg_fence();
#pragma unroll
    for (int j = 0; j < 4; j++) wgmma_rs_n128(o, pa[j], nmajor_desc(vt, j, 64));
    wg_commit();
    wg_wait0();
    reg_fence(o);
    for (int i = 0; i < 16; i++) {
        c_rs[r0 * 128 + 8 * i + cq] = o[4 * i];
        c_rs[r0 * 128 + 8 * i + cq + 1] = o[4 * i + 1];
        c_rs[r1 * 128 + 8 * i + cq] = o[4 * i + 2];
        c_rs[r1 * 128 + 8 * i + cq + 1] = o[4 * i + 3];
    }
#endif
}

// whether this build and device run the wgmma kernels: an sm_90a build on a device of compute
// capability 9.0
static bool wg_available(void)
{
#ifdef LS_CUDA_SM90A
    return ls_device_get().major == 9;
#else
    return false;
#endif
}

extern "C" int ls_wgmma_selftest(float *c_ss, float *c_rs, const uint16_t *a, const uint16_t *b,
                                 const uint16_t *p, const uint16_t *v, void *stream)
{
    if (!wg_available()) return 0;
    wg_selftest_kernel<<<1, 128, 0, (cudaStream_t)stream>>>(c_ss, c_rs, a, b, p, v);
    CHECK_CUDA(cudaGetLastError());
    return 1;
}

template <int HD, int BK, int G>
static void wg_launch(float *out, const float *q, int q_stride, const uint16_t *kcache,
                      const uint16_t *vcache, int pos0, int T, int hq, int group, int max_ctx,
                      cudaStream_t s)
{
    constexpr int BQ = WG_ROWS / G;
    constexpr size_t smem = wg_smem<HD, BK>();
    auto fn = attn_prefill_wg_kernel<HD, BK, G>;
    ls_func_attr(reinterpret_cast<const void *>(fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                 (int)smem);
    dim3 grid((unsigned)((T + BQ - 1) / BQ), (unsigned)(hq / G));
    const float qscale = 1.0f / sqrtf((float)HD) * 1.4426950408889634f; // log2(e)
    fn<<<grid, WG_THREADS, smem, s>>>(out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx,
                                      qscale);
    CHECK_CUDA(cudaGetLastError());
}

static int g_wg_bk; // keys a tile; 0: LOCKSTEP_ATT_WG_BK not read yet

extern "C" int ls_attention_set_wgmma_bk(int bk)
{
    if (!g_wg_bk) {
        const char *e = getenv("LOCKSTEP_ATT_WG_BK");
        g_wg_bk = e && !strcmp(e, "64") ? 64 : 128;
    }
    const int old = g_wg_bk;
    if (bk == 64 || bk == 128) g_wg_bk = bk;
    return old;
}

template <int HD, int BK>
static void wg_launch_g(int g, float *out, const float *q, int q_stride, const uint16_t *kcache,
                        const uint16_t *vcache, int pos0, int T, int hq, int group, int max_ctx,
                        cudaStream_t s)
{
    if (g == 4)
        wg_launch<HD, BK, 4>(out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx, s);
    else if (g == 2)
        wg_launch<HD, BK, 2>(out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx, s);
    else
        wg_launch<HD, BK, 1>(out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx, s);
}

extern "C" int ls_attention_prefill_wgmma(float *out, const float *q, int q_stride,
                                          const uint16_t *kcache, const uint16_t *vcache, int pos0,
                                          int T, int hq, int hkv, int hd, int max_ctx,
                                          int min_blocks, void *stream)
{
    if (!wg_available() || (hd != 64 && hd != 128) || hkv < 1 || hq % hkv || q_stride % 4 ||
        (uintptr_t)q % 16 || T < 1)
        return 0;
    const int group = hq / hkv;
    int g = 1; // the q heads of one KV head a block: the most of 4 dividing the group
    while (g < 4 && group % (2 * g) == 0) g *= 2;
    const int bq = WG_ROWS / g;
    if ((long long)(T + bq - 1) / bq * (hq / g) < min_blocks) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    const bool bk64 = ls_attention_set_wgmma_bk(-1) == 64;
#define LS_WG(HD, BK)                                                                              \
    wg_launch_g<HD, BK>(g, out, q, q_stride, kcache, vcache, pos0, T, hq, group, max_ctx, s)
    if (hd == 128) {
        if (bk64)
            LS_WG(128, 64);
        else
            LS_WG(128, 128);
    } else {
        if (bk64)
            LS_WG(64, 64);
        else
            LS_WG(64, 128);
    }
#undef LS_WG
    return 1;
}
