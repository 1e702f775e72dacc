// Custom all-reduce kernels: one-shot, two-shot, fused residual + RMSNorm, and the probe.
// allreduce.h has the design (push over NVLink, per-block epoch flags in device memory,
// alternating data areas, bounded spin); this file keeps to it. Points of care:
// - Which block and thread own an element depends only on count, dtype and the broadcast
//   config, never on alignment or rank: blocks pair across ranks by index, and the same
//   thread reads in[u] (push) and writes out[u] (reduce), so in == out is safe.
// - The flag is a st.release.sys by one lane after a bar.sync: cumulativity makes it cover the
//   remote stores of the whole block (cooperative groups' grid sync relies on the same). With
//   st.fence_all (the default, LOCKSTEP_AR_FENCE_ALL) every storing thread also runs
//   __threadfence_system before the bar.sync, belt and braces until the device says the
//   cheaper form is as right. The waiting lane uses ld.acquire.sys and the block barrier
//   passes that on; data written by peers is read with ld.cg (L2, never a stale L1 line).
// - Sums start from rank 0's value (not 0.0f + v, which would turn -0 into +0) and add ranks
//   in order in fp32; bf16 is rounded once, round-to-nearest-even like NCCL's bf16 add.
#include "config.h"
#include "allreduce.h"
#include "pdl.cuh"
#include "runtime/check.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

typedef unsigned short bf16_bits; /* bf16 is carried as its bits; arithmetic is in fp32 */

template <typename E> struct Elt;
template <> struct Elt<float> {
    static constexpr int V = 4; /* elements per 16-byte unit */
    static __device__ __forceinline__ float tof(float x)
    {
        return x;
    }
    static __device__ __forceinline__ float fromf(float x)
    {
        return x;
    }
};
template <> struct Elt<bf16_bits> {
    static constexpr int V = 8;
    static __device__ __forceinline__ float tof(bf16_bits h)
    {
        return __uint_as_float((unsigned)h << 16);
    }
    static __device__ __forceinline__ bf16_bits fromf(float x)
    {
        return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    }
};

template <typename E> union Unit {
    uint4 v;
    E e[Elt<E>::V];
};

/* ---- memory access ---- */

/* unit u of a user array: one 16-byte access when aligned, V scalar ones otherwise */
template <typename E, bool AL>
static __device__ __forceinline__ Unit<E> load_unit(const E *p, size_t u)
{
    constexpr int V = Elt<E>::V;
    Unit<E> x;
    if (AL) {
        x.v = *reinterpret_cast<const uint4 *>(p + u * V);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) x.e[k] = p[u * V + k];
    }
    return x;
}

template <typename E, bool AL>
static __device__ __forceinline__ void store_unit(E *p, size_t u, const Unit<E> &x)
{
    constexpr int V = Elt<E>::V;
    if (AL) {
        *reinterpret_cast<uint4 *>(p + u * V) = x.v;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) p[u * V + k] = x.e[k];
    }
}

/* data that peers stored into our buffer: read from L2 (.cg), never from a stale L1 line */
template <typename E> static __device__ __forceinline__ Unit<E> load_peer_unit(const char *p)
{
    Unit<E> x;
    x.v = __ldcg(reinterpret_cast<const uint4 *>(p));
    return x;
}
static __device__ __forceinline__ float load_peer(const float *p)
{
    return __ldcg(p);
}
static __device__ __forceinline__ bf16_bits load_peer(const bf16_bits *p)
{
    return __ldcg(p);
}

typedef unsigned long long epoch_t;

static __device__ __forceinline__ epoch_t ld_acquire_sys(const epoch_t *p)
{
    epoch_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void st_release_sys(epoch_t *p, epoch_t v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

static __device__ __forceinline__ unsigned atomic_add_acq_rel_gpu(unsigned *p, unsigned v)
{
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(p), "r"(v)
                 : "memory");
    return old;
}

static __device__ __forceinline__ unsigned long long global_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* ---- the epoch protocol ---- */

static __device__ __forceinline__ epoch_t *flag_at(void *buf, int phase, int block, int from)
{
    return reinterpret_cast<epoch_t *>(static_cast<char *>(buf) + LS_AR_FLAG_OFF) +
           ((size_t)(phase * LS_AR_MAX_BLOCKS + block) * LS_AR_MAX_RANKS + from);
}

static __device__ __forceinline__ ls_ar_ctl *ctl_of(const ls_ar_state &st)
{
    return static_cast<ls_ar_ctl *>(st.ctl);
}

/* Thread 0 reads the epoch once for the block; every block of a launch reads the same value,
 * because only the last block to finish advances it. Returns this launch's epoch. */
static __device__ __forceinline__ epoch_t begin(const ls_ar_state &st, epoch_t *s_e, int *s_fail)
{
    if (threadIdx.x == 0) {
        volatile ls_ar_ctl *c = ctl_of(st);
        *s_e = c->epoch + 1;
        *s_fail = c->abort != 0;
    }
    __syncthreads();
    return *s_e;
}

/* The acq_rel add orders this block's epoch read before the last block's epoch write; the
 * next launch on the stream sees the new epoch at the kernel boundary. */
static __device__ __forceinline__ void end(const ls_ar_state &st, epoch_t e)
{
    if (threadIdx.x == 0) {
        ls_ar_ctl *c = ctl_of(st);
        if (atomic_add_acq_rel_gpu(&c->done, 1u) == gridDim.x - 1) {
            volatile ls_ar_ctl *vc = c;
            vc->done = 0;
            vc->epoch = e;
        }
    }
}

/* the first block of this rank to give up says why, in host-mapped memory; code goes last */
static __device__ void record_timeout(const ls_ar_state &st, int peer, int phase, epoch_t e,
                                      unsigned long long waited)
{
    if (atomicCAS(&ctl_of(st)->abort, 0u, 1u) != 0u) return;
    volatile ls_ar_err *er = static_cast<volatile ls_ar_err *>(st.err);
    er->rank = st.rank;
    er->peer = peer;
    er->block = (int)blockIdx.x;
    er->phase = phase;
    er->epoch = e;
    er->waited_ns = waited;
    __threadfence_system();
    er->code = 1;
    __threadfence_system();
}

/* The bounded spin's check, made every 1024 polls: false once a sibling block gave up (the
 * abort flag) or the wait since t0 has passed timeout_ns (recorded here). */
static __device__ __forceinline__ bool spin_on(const ls_ar_state &st, volatile unsigned *abort_flag,
                                               unsigned long long t0, int peer, int phase,
                                               epoch_t e)
{
    if (*abort_flag) return false;
    const unsigned long long waited = global_ns() - t0;
    if (waited > st.timeout_ns) {
        record_timeout(st, peer, phase, e, waited);
        return false;
    }
    return true;
}

/* Spin until *f >= e. Checks the clock and the abort flag every 1024 polls, so a
 * dead peer costs timeout_ns, and a block whose sibling already gave up leaves soon after. */
static __device__ bool wait_flag(const ls_ar_state &st, const epoch_t *f, epoch_t e, int peer,
                                 int phase)
{
    if (ld_acquire_sys(f) >= e) return true;
    const unsigned long long t0 = global_ns();
    volatile unsigned *abort_flag = &ctl_of(st)->abort;
    for (unsigned n = 1;; n++) {
        if (ld_acquire_sys(f) >= e) return true;
        if ((n & 1023) == 0 && !spin_on(st, abort_flag, t0, peer, phase, e)) return false;
    }
}

/* Block barrier with the same block index of every peer. The caller has fenced its remote
 * stores; the bar.sync before the release store makes the flag cover all of the block's. */
static __device__ bool exchange(const ls_ar_state &st, int phase, epoch_t e, int *s_fail)
{
    __syncthreads();
    const int q = (int)threadIdx.x;
    if (q < st.size && q != st.rank) {
        st_release_sys(flag_at(st.buf[q], phase, (int)blockIdx.x, st.rank), e);
        if (!wait_flag(st, flag_at(st.buf[st.rank], phase, (int)blockIdx.x, q), e, q, phase))
            *s_fail = 1;
    }
    __syncthreads();
    return !*s_fail;
}

/* this block's share [lo, hi) of n units: contiguous, the same on every rank */
static __device__ __forceinline__ void block_range(size_t n, size_t *lo, size_t *hi)
{
    const size_t per = (n + gridDim.x - 1) / gridDim.x;
    *lo = min(n, per * blockIdx.x);
    *hi = min(n, *lo + per);
}

/* sum of `size` units in rank order, rounded once to E */
template <typename E>
static __device__ __forceinline__ Unit<E> sum_units(const Unit<E> *x, int size)
{
    constexpr int V = Elt<E>::V;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = Elt<E>::tof(x[0].e[k]);
#pragma unroll
    for (int r = 1; r < LS_AR_MAX_RANKS; r++)
        if (r < size) {
#pragma unroll
            for (int k = 0; k < V; k++) acc[k] += Elt<E>::tof(x[r].e[k]);
        }
    Unit<E> out;
#pragma unroll
    for (int k = 0; k < V; k++) out.e[k] = Elt<E>::fromf(acc[k]);
    return out;
}

/* scalar version for tails: element i of every rank's contribution */
template <typename E>
static __device__ __forceinline__ E sum_elems(const ls_ar_state &st, E own, const char *area,
                                              size_t stride, size_t i)
{
    float acc = 0.0f;
    for (int r = 0; r < st.size; r++) {
        const E v =
            r == st.rank ? own : load_peer(reinterpret_cast<const E *>(area + r * stride) + i);
        acc = r == 0 ? Elt<E>::tof(v) : acc + Elt<E>::tof(v);
    }
    return Elt<E>::fromf(acc);
}

/* ---- LL: the flag travels in every 8 bytes of data (see allreduce.h) ---- */

/* never 0 (a consumed line is zeroed), and e, e + 1, e + 2 differ */
static __device__ __forceinline__ uint32_t ll_flag(epoch_t e)
{
    return (uint32_t)(e % 0xffffffffull) + 1u;
}

/* unit v as the two lines at dst (a peer's buffer): {x, f, y, f} and {z, f, w, f} */
static __device__ __forceinline__ void ll_push(char *dst, uint4 v, uint32_t f)
{
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(f),
                 "r"(v.y), "r"(f)
                 : "memory");
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst + 16), "r"(v.z),
                 "r"(f), "r"(v.w), "r"(f)
                 : "memory");
}

static __device__ __forceinline__ uint4 ll_load(const char *p)
{
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/* The unit a peer pushed to src (our buffer), once both lines carry f, from the lines' first
 * loads a and b; false when the peer never came (the timeout is recorded as for the flag wait,
 * phase 2) or a sibling gave up. */
static __device__ __forceinline__ bool ll_wait(const ls_ar_state &st, const char *src, uint32_t f,
                                               int peer, epoch_t e, uint4 a, uint4 b, uint4 *out)
{
    unsigned long long t0 = 0;
    volatile unsigned *abort_flag = &ctl_of(st)->abort;
    for (unsigned n = 1; a.y != f || a.w != f || b.y != f || b.w != f; n++) {
        if ((n & 1023) == 0) {
            if (t0 == 0) t0 = global_ns(); /* the clock starts at the first check */
            if (!spin_on(st, abort_flag, t0, peer, 2, e)) return false;
        }
        if (a.y != f || a.w != f) a = ll_load(src);
        if (b.y != f || b.w != f) b = ll_load(src + 16);
    }
    *out = make_uint4(a.x, a.z, b.x, b.z);
    return true;
}

/* ll_wait from the lines' loads here */
static __device__ bool ll_pull(const ls_ar_state &st, const char *src, uint32_t f, int peer,
                               epoch_t e, uint4 *out)
{
    return ll_wait(st, src, f, peer, e, ll_load(src), ll_load(src + 16), out);
}

/* a consumed unit's lines back to 0 (ours, local) */
static __device__ __forceinline__ void ll_clear(char *p)
{
    reinterpret_cast<uint4 *>(p)[0] = make_uint4(0, 0, 0, 0);
    reinterpret_cast<uint4 *>(p)[1] = make_uint4(0, 0, 0, 0);
}

/* unit u of an array of n elements, the last one zero-padded past n (scalar loads) */
template <typename E, bool AL>
static __device__ __forceinline__ Unit<E> load_unit_padded(const E *p, size_t u, size_t n)
{
    constexpr int V = Elt<E>::V;
    if ((u + 1) * V <= n) return load_unit<E, AL>(p, u);
    Unit<E> x;
    x.v = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < V; k++)
        if (u * V + k < n) x.e[k] = p[u * V + k];
    return x;
}

/* ll_sum_with's batched form (st.ll_batch: by default at 2 ranks, where it measured faster;
 * LOCKSTEP_AR_LL_BATCH decides, runtime/comm_custom.c): the lines of up to LL_BATCH peers are
 * loaded before any is waited for, so that with 3 or more ranks lines that have all arrived
 * cost one round trip to L2, not one a peer in turn. The units are added in rank order as they
 * come, as sum_units adds them: the same bits. */
#define LL_BATCH 4
template <typename E>
static __device__ __forceinline__ Unit<E> ll_sum_batched(const ls_ar_state &st, const Unit<E> &mine,
                                                         size_t u, const char *area, size_t lslot,
                                                         uint32_t f, epoch_t e, bool *ok)
{
    constexpr int V = Elt<E>::V;
    float acc[V];
#pragma unroll
    for (int r0 = 0; r0 < LS_AR_MAX_RANKS; r0 += LL_BATCH) {
        if (r0 >= st.size) break;
        uint4 a[LL_BATCH], b[LL_BATCH];
#pragma unroll
        for (int j = 0; j < LL_BATCH; j++) {
            const int r = r0 + j;
            if (r < st.size && r != st.rank) {
                a[j] = ll_load(area + r * lslot + u * 32);
                b[j] = ll_load(area + r * lslot + u * 32 + 16);
            }
        }
#pragma unroll
        for (int j = 0; j < LL_BATCH; j++) {
            const int r = r0 + j;
            if (r >= st.size) break;
            Unit<E> x = mine;
            if (r != st.rank &&
                !ll_wait(st, area + r * lslot + u * 32, f, r, e, a[j], b[j], &x.v)) {
                x.v = make_uint4(0, 0, 0, 0);
                *ok = false;
            }
#pragma unroll
            for (int k = 0; k < V; k++)
                acc[k] = r == 0 ? Elt<E>::tof(x.e[k]) : acc[k] + Elt<E>::tof(x.e[k]);
        }
    }
    Unit<E> out;
#pragma unroll
    for (int k = 0; k < V; k++) out.e[k] = Elt<E>::fromf(acc[k]);
    return out;
}

/* our unit `mine` summed with every peer's unit pulled from our LL area (rank r's lines at
 * area + r * lslot + u * 32); the lines stay until ll_clear. *ok is cleared on a timeout. Our
 * own unit is loaded before the pulls (a load after one would wait for the peer first). */
template <typename E>
static __device__ __forceinline__ Unit<E> ll_sum_with(const ls_ar_state &st, const Unit<E> &mine,
                                                      size_t u, const char *area, size_t lslot,
                                                      uint32_t f, epoch_t e, bool *ok)
{
    Unit<E> x[LS_AR_MAX_RANKS];
#pragma unroll
    for (int r = 0; r < LS_AR_MAX_RANKS; r++)
        if (r < st.size) {
            if (r == st.rank) {
                x[r] = mine;
            } else if (!ll_pull(st, area + r * lslot + u * 32, f, r, e, &x[r].v)) {
                x[r].v = make_uint4(0, 0, 0, 0);
                *ok = false;
            }
        }
    return sum_units<E>(x, st.size);
}

/* unit u of our contribution (own[u]) summed with every peer's, as ll_sum_with */
template <typename E, bool AL>
static __device__ __forceinline__ Unit<E> ll_sum_unit(const ls_ar_state &st, const E *own, size_t u,
                                                      size_t n, const char *area, size_t lslot,
                                                      uint32_t f, epoch_t e, bool *ok)
{
    return ll_sum_with<E>(st, load_unit_padded<E, AL>(own, u, n), u, area, lslot, f, e, ok);
}

/* ---- one-shot ---- */

enum { UNROLL = 4 }; /* units each thread loads before its first remote store */

/* units base, base + T, ... (UNROLL of them, those below hi) */
template <typename E, bool AL>
static __device__ __forceinline__ void load_batch(const E *in, size_t base, size_t hi,
                                                  Unit<E> (&x)[UNROLL])
{
#pragma unroll
    for (int k = 0; k < UNROLL; k++) {
        const size_t u = base + k * (size_t)blockDim.x;
        if (u < hi) x[k] = load_unit<E, AL>(in, u);
    }
}

template <typename E, bool AL>
static __global__ void __launch_bounds__(LS_AR_MAX_THREADS, 1)
    oneshot_kernel(const __grid_constant__ ls_ar_state st, const E *in, E *out, size_t n)
{
    pdl_launch_dependents();
    pdl_wait();
    constexpr int V = Elt<E>::V;
    __shared__ epoch_t s_e;
    __shared__ int s_fail;
    const size_t nv = n / V;
    size_t u0, u1;
    block_range(nv, &u0, &u1);
    /* the first batch of input loads while thread 0 fetches the epoch: the push needs both */
    size_t base = u0 + threadIdx.x;
    Unit<E> x[UNROLL];
    load_batch<E, AL>(in, base, u1, x);
    const epoch_t e = begin(st, &s_e, &s_fail);
    if (!s_fail) {
        const size_t slot = ls_ar_slot(n * sizeof(E));
        const size_t area = LS_AR_DATA_OFF + (size_t)(e & 1) * st.data_bytes;
        const size_t mine = area + (size_t)st.rank * slot; /* where our data lands on a peer */
        const bool tail = blockIdx.x == gridDim.x - 1;

        for (bool first = true; base < u1; base += UNROLL * (size_t)blockDim.x, first = false) {
            if (!first) load_batch<E, AL>(in, base, u1, x);
#pragma unroll
            for (int k = 0; k < UNROLL; k++) {
                const size_t u = base + k * (size_t)blockDim.x;
                if (u < u1)
                    for (int q = 0; q < st.size; q++)
                        if (q != st.rank)
                            *reinterpret_cast<uint4 *>(static_cast<char *>(st.buf[q]) + mine +
                                                       u * 16) = x[k].v;
            }
        }
        if (tail)
            for (size_t i = nv * V + threadIdx.x; i < n; i += blockDim.x) {
                const E v = in[i];
                for (int q = 0; q < st.size; q++)
                    if (q != st.rank)
                        reinterpret_cast<E *>(static_cast<char *>(st.buf[q]) + mine)[i] = v;
            }
        if (st.fence_all) __threadfence_system();

        if (exchange(st, 0, e, &s_fail)) {
            const char *local = static_cast<const char *>(st.buf[st.rank]) + area;
            for (size_t u = u0 + threadIdx.x; u < u1; u += blockDim.x) {
                Unit<E> x[LS_AR_MAX_RANKS];
#pragma unroll
                for (int r = 0; r < LS_AR_MAX_RANKS; r++)
                    if (r < st.size)
                        x[r] = r == st.rank ? load_unit<E, AL>(in, u)
                                            : load_peer_unit<E>(local + r * slot + u * 16);
                store_unit<E, AL>(out, u, sum_units<E>(x, st.size));
            }
            if (tail)
                for (size_t i = nv * V + threadIdx.x; i < n; i += blockDim.x)
                    out[i] = sum_elems<E>(st, in[i], local, slot, i);
        }
    }
    end(st, e);
}

/* LL one-shot: the same units and sums as oneshot_kernel (the last unit zero-padded past n),
 * with no fence and no flag exchange: each thread pushes its units as LL lines, then pulls
 * every peer's lines for the same units, sums, and zeroes the lines it read. RES: out = x +
 * sum instead, the decode step's all-reduce + residual without the norm (normed NULL), its
 * [rows][dim] partial taken as one flat array spread over the grid rather than a row a block
 * (fused_ll_kernel, where at batch 1 each thread of one block pulls its units one after
 * another: 2 at Llama-8B's 4096, 4 at 70B's 8192), rounded as residual_rmsnorm_row rounds it:
 * bitwise the fused kernel's out. x may alias out (a thread reads x[u] before it writes
 * out[u]). A thread's first unit (and x) loads while thread 0 fetches the epoch: after the PDL
 * wait every kernel before this one has ended, and no L2 round trip is left between a peer's
 * lines arriving and the store of out. B: the peers' lines pulled in batches (ll_sum_batched,
 * st.ll_batch). */
template <typename E, bool AL, bool RES, bool B = false>
static __global__ void __launch_bounds__(LS_AR_MAX_THREADS, 1)
    oneshot_ll_kernel(const __grid_constant__ ls_ar_state st, const E *in, const E *x, E *out,
                      size_t n)
{
    pdl_launch_dependents();
    pdl_wait();
    constexpr int V = Elt<E>::V;
    __shared__ epoch_t s_e;
    __shared__ int s_fail;
    const size_t nu = (n + V - 1) / V;
    size_t u0, u1;
    block_range(nu, &u0, &u1);
    const size_t first = u0 + threadIdx.x;
    Unit<E> pre, xpre;
    if (first < u1) {
        pre = load_unit_padded<E, AL>(in, first, n);
        if (RES) xpre = load_unit_padded<E, AL>(x, first, n);
    }
    const epoch_t e = begin(st, &s_e, &s_fail);
    if (!s_fail) {
        const uint32_t f = ll_flag(e);
        const size_t lslot = ls_ar_ll_slot(nu);
        const size_t area = st.ll_off + (size_t)(e & 1) * st.ll_bytes;
        const size_t mine = area + (size_t)st.rank * lslot;
        for (size_t u = first; u < u1; u += blockDim.x) {
            const Unit<E> v = u == first ? pre : load_unit_padded<E, AL>(in, u, n);
            for (int q = 0; q < st.size; q++)
                if (q != st.rank) ll_push(static_cast<char *>(st.buf[q]) + mine + u * 32, v.v, f);
        }
        char *local = static_cast<char *>(st.buf[st.rank]) + area;
        bool ok = true;
        for (size_t u = first; u < u1 && ok; u += blockDim.x) {
            const bool one = u == first;
            const Unit<E> v = one ? pre : load_unit_padded<E, AL>(in, u, n);
            Unit<E> xv;
            if (RES) xv = one ? xpre : load_unit_padded<E, AL>(x, u, n);
            Unit<E> o = B ? ll_sum_batched<E>(st, v, u, local, lslot, f, e, &ok)
                          : ll_sum_with<E>(st, v, u, local, lslot, f, e, &ok);
            if (RES) {
#pragma unroll
                for (int k = 0; k < V; k++)
                    o.e[k] = Elt<E>::fromf(Elt<E>::tof(xv.e[k]) + Elt<E>::tof(o.e[k]));
            }
            if ((u + 1) * V <= n) {
                store_unit<E, AL>(out, u, o);
            } else {
#pragma unroll
                for (int k = 0; k < V; k++)
                    if (u * V + k < n) out[u * V + k] = o.e[k];
            }
            for (int r = 0; r < st.size; r++)
                if (r != st.rank) ll_clear(local + r * lslot + u * 32);
        }
    }
    end(st, e);
}

/* ---- two-shot ---- */

static __device__ __forceinline__ size_t slice_len(size_t n, size_t S, int q)
{
    const size_t lo = (size_t)q * S;
    return n > lo ? min(S, n - lo) : 0;
}

template <typename E, bool AL>
static __global__ void __launch_bounds__(LS_AR_MAX_THREADS, 1)
    twoshot_kernel(const __grid_constant__ ls_ar_state st, const E *in, E *out, size_t n)
{
    pdl_launch_dependents();
    pdl_wait();
    constexpr int V = Elt<E>::V;
    __shared__ epoch_t s_e;
    __shared__ int s_fail;
    const epoch_t e = begin(st, &s_e, &s_fail);
    if (!s_fail) {
        const size_t S = ls_ar_slice(n, st.size);    /* elements per slice, multiple of 8 */
        const size_t rs = ls_ar_slot(S * sizeof(E)); /* reduce-scatter slot per rank */
        const size_t area = LS_AR_DATA_OFF + (size_t)(e & 1) * st.data_bytes;
        const size_t ag = area + (size_t)st.size * rs; /* all-gather: the whole vector */
        const size_t mine = area + (size_t)st.rank * rs;
        size_t u0, u1;
        block_range(S / V, &u0, &u1);
        const bool tail = blockIdx.x == gridDim.x - 1;
        const char *local = static_cast<const char *>(st.buf[st.rank]);

        /* A: slice q of our input goes to rank q; start at the next rank so that rank 0 is
         * not everyone's first target */
        for (int j = 1; j < st.size; j++) {
            const int q = (st.rank + j) % st.size;
            const E *src = in + (size_t)q * S;
            const size_t len = slice_len(n, S, q), nv = len / V, hi = min(u1, nv);
            char *dst = static_cast<char *>(st.buf[q]) + mine;
            for (size_t base = u0 + threadIdx.x; base < hi; base += UNROLL * (size_t)blockDim.x) {
                Unit<E> x[UNROLL];
#pragma unroll
                for (int k = 0; k < UNROLL; k++) {
                    const size_t u = base + k * (size_t)blockDim.x;
                    if (u < hi) x[k] = load_unit<E, AL>(src, u);
                }
#pragma unroll
                for (int k = 0; k < UNROLL; k++) {
                    const size_t u = base + k * (size_t)blockDim.x;
                    if (u < hi) *reinterpret_cast<uint4 *>(dst + u * 16) = x[k].v;
                }
            }
            if (tail)
                for (size_t i = nv * V + threadIdx.x; i < len; i += blockDim.x)
                    reinterpret_cast<E *>(dst)[i] = src[i];
        }
        if (st.fence_all) __threadfence_system();

        if (exchange(st, 0, e, &s_fail)) {
            /* B: reduce our slice, keep it, push it into every peer's all-gather area */
            const size_t lo = (size_t)st.rank * S;
            const size_t len = slice_len(n, S, st.rank), nv = len / V, hi = min(u1, nv);
            const size_t ag_lo = ag + lo * sizeof(E);
            for (size_t u = u0 + threadIdx.x; u < hi; u += blockDim.x) {
                Unit<E> x[LS_AR_MAX_RANKS];
#pragma unroll
                for (int r = 0; r < LS_AR_MAX_RANKS; r++)
                    if (r < st.size)
                        x[r] = r == st.rank ? load_unit<E, AL>(in + lo, u)
                                            : load_peer_unit<E>(local + area + r * rs + u * 16);
                const Unit<E> s = sum_units<E>(x, st.size);
                store_unit<E, AL>(out + lo, u, s);
                for (int q = 0; q < st.size; q++)
                    if (q != st.rank)
                        *reinterpret_cast<uint4 *>(static_cast<char *>(st.buf[q]) + ag_lo +
                                                   u * 16) = s.v;
            }
            if (tail)
                for (size_t i = nv * V + threadIdx.x; i < len; i += blockDim.x) {
                    const E s = sum_elems<E>(st, in[lo + i], local + area, rs, i);
                    out[lo + i] = s;
                    for (int q = 0; q < st.size; q++)
                        if (q != st.rank)
                            reinterpret_cast<E *>(static_cast<char *>(st.buf[q]) + ag_lo)[i] = s;
                }
            if (st.fence_all) __threadfence_system();

            if (exchange(st, 1, e, &s_fail)) {
                /* C: every other rank's reduced slice, from our all-gather area */
                for (int j = 1; j < st.size; j++) {
                    const int q = (st.rank + j) % st.size;
                    const size_t qlo = (size_t)q * S;
                    const size_t qlen = slice_len(n, S, q), qnv = qlen / V, qhi = min(u1, qnv);
                    const char *src = local + ag + qlo * sizeof(E);
                    for (size_t u = u0 + threadIdx.x; u < qhi; u += blockDim.x)
                        store_unit<E, AL>(out + qlo, u, load_peer_unit<E>(src + u * 16));
                    if (tail)
                        for (size_t i = qnv * V + threadIdx.x; i < qlen; i += blockDim.x)
                            out[qlo + i] = load_peer(reinterpret_cast<const E *>(src) + i);
                }
            }
        }
    }
    end(st, e);
}

/* ---- residual + RMSNorm, fused or not ---- */

/* Deterministic block sum: a fixed shuffle tree per warp, then warp 0 over the warps' lane-0
 * values; the result is lane 0's, identical on every rank and in both kernels. */
static __device__ float block_sum(float v, float *sh)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? sh[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    v = sh[32];
    __syncthreads();
    return v;
}

/* a from memory (the unfused kernel): already summed and rounded */
template <typename E, bool VEC> struct ReadA {
    const E *a;
    __device__ __forceinline__ Unit<E> unit(size_t u) const
    {
        return load_unit<E, VEC>(a, u);
    }
    __device__ __forceinline__ E elem(size_t i) const
    {
        return a[i];
    }
};

/* a summed on the fly from our partial and the peers' copies in our data area */
template <typename E, bool VEC> struct SumA {
    const ls_ar_state *st;
    int rank, size;
    const E *own;     /* this row of our partial */
    const char *area; /* our data area; rank r's row at area + r * slot + row_off */
    size_t slot, row_off;
    __device__ __forceinline__ Unit<E> unit(size_t u) const
    {
        constexpr int V = Elt<E>::V;
        Unit<E> x[LS_AR_MAX_RANKS];
#pragma unroll
        for (int r = 0; r < LS_AR_MAX_RANKS; r++)
            if (r < size) {
                if (r == rank) {
                    x[r] = load_unit<E, VEC>(own, u);
                } else if (VEC) {
                    x[r] = load_peer_unit<E>(area + r * slot + row_off + u * 16);
                } else {
                    const E *p = reinterpret_cast<const E *>(area + r * slot + row_off) + u * V;
#pragma unroll
                    for (int k = 0; k < V; k++) x[r].e[k] = load_peer(p + k);
                }
            }
        return sum_units<E>(x, size);
    }
    __device__ __forceinline__ E elem(size_t i) const
    {
        return sum_elems<E>(*st, own[i], area + row_off, slot, i);
    }
};

/* a summed on the fly from our partial and the peers' LL lines in our data area */
template <typename E, bool VEC> struct SumLL {
    const ls_ar_state *st;
    const E *own;      /* this row of our partial */
    const char *lines; /* our LL area at this row; rank r's lines at lines + r * lslot */
    size_t lslot;
    int dim;
    uint32_t f;
    epoch_t e;
    __device__ __forceinline__ Unit<E> unit(size_t u) const
    {
        bool ok = true;
        return ll_sum_unit<E, VEC>(*st, own, u, (size_t)dim, lines, lslot, f, e, &ok);
    }
    __device__ __forceinline__ E elem(size_t i) const
    {
        constexpr int V = Elt<E>::V;
        const size_t u = i / V;
        return unit(u).e[i - u * V];
    }
};

/* One row: out = x + a (rounded), then normed = (out * scale) * w with scale from the sum of
 * squares of the rounded out (normed NULL: out only). Thread t owns units t, t + T, ... and
 * then tail element t. */
template <typename E, bool VEC, typename A>
static __device__ __forceinline__ void residual_rmsnorm_row(const A &a, const E *x, E *out,
                                                            E *normed, const E *w, int dim,
                                                            float eps, float *sh)
{
    constexpr int V = Elt<E>::V;
    const size_t nv = (size_t)dim / V;
    float ss = 0.0f;
    for (size_t u = threadIdx.x; u < nv; u += blockDim.x) {
        const Unit<E> av = a.unit(u), xv = load_unit<E, VEC>(x, u);
        Unit<E> o;
#pragma unroll
        for (int k = 0; k < V; k++) {
            o.e[k] = Elt<E>::fromf(Elt<E>::tof(xv.e[k]) + Elt<E>::tof(av.e[k]));
            const float f = Elt<E>::tof(o.e[k]);
            ss += f * f;
        }
        store_unit<E, VEC>(out, u, o);
    }
    for (size_t i = nv * V + threadIdx.x; i < (size_t)dim; i += blockDim.x) {
        const E o = Elt<E>::fromf(Elt<E>::tof(x[i]) + Elt<E>::tof(a.elem(i)));
        const float f = Elt<E>::tof(o);
        ss += f * f;
        out[i] = o;
    }
    if (!normed) { /* the residual only; every read of a's lines before the caller clears them */
        __syncthreads();
        return;
    }
    ss = block_sum(ss, sh);
    const float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    /* out is re-read by the thread that wrote it */
    for (size_t u = threadIdx.x; u < nv; u += blockDim.x) {
        const Unit<E> o = load_unit<E, VEC>(out, u), wv = load_unit<E, VEC>(w, u);
        Unit<E> r;
#pragma unroll
        for (int k = 0; k < V; k++)
            r.e[k] = Elt<E>::fromf((Elt<E>::tof(o.e[k]) * scale) * Elt<E>::tof(wv.e[k]));
        store_unit<E, VEC>(normed, u, r);
    }
    for (size_t i = nv * V + threadIdx.x; i < (size_t)dim; i += blockDim.x)
        normed[i] = Elt<E>::fromf((Elt<E>::tof(out[i]) * scale) * Elt<E>::tof(w[i]));
}

template <typename E, bool VEC>
static __global__ void __launch_bounds__(LS_AR_NORM_THREADS, 1)
    residual_rmsnorm_kernel(const E *a, const E *x, E *out, E *normed, const E *w, int rows,
                            int dim, float eps)
{
    __shared__ float sh[33];
    pdl_launch_dependents();
    pdl_wait();
    for (int row = (int)blockIdx.x; row < rows; row += (int)gridDim.x) {
        const size_t off = (size_t)row * dim;
        residual_rmsnorm_row<E, VEC>(ReadA<E, VEC>{a + off}, x + off, out + off,
                                     normed ? normed + off : nullptr, w, dim, eps, sh);
    }
}

/* The fused kernels' start: a thread's first unit of its block's first row (all of them at
 * batch 1) loads while thread 0 fetches the epoch into *e. PAD (the LL kernel): the units cover
 * the row, the last one zero-padded; else whole units only (the tail goes by element). The unit
 * is returned and the epoch written: the other way round, nvcc 13.0 compiles fused_kernel's
 * vector push loop with an extra branch and register moves. */
template <typename E, bool VEC, bool PAD>
static __device__ __forceinline__ Unit<E>
fused_begin(const ls_ar_state &st, const E *partial, int dim, epoch_t *s_e, int *s_fail, epoch_t *e)
{
    pdl_launch_dependents();
    pdl_wait();
    constexpr int V = Elt<E>::V;
    Unit<E> pre;
    if (PAD) {
        if (threadIdx.x < ((size_t)dim + V - 1) / V)
            pre = load_unit_padded<E, VEC>(partial + (size_t)blockIdx.x * dim, threadIdx.x, dim);
    } else if (threadIdx.x < (size_t)dim / V) {
        pre = load_unit<E, VEC>(partial + (size_t)blockIdx.x * dim, threadIdx.x);
    }
    *e = begin(st, s_e, s_fail);
    return pre;
}

/* Block b owns rows b, b + G, ...: it pushes those rows of partial to every peer, exchanges
 * flags with block b of every peer, then reduces and normalises the same rows. */
template <typename E, bool VEC>
static __global__ void __launch_bounds__(LS_AR_NORM_THREADS, 1)
    fused_kernel(const __grid_constant__ ls_ar_state st, const E *partial, const E *x, E *out,
                 E *normed, const E *w, int rows, int dim, float eps)
{
    __shared__ epoch_t s_e;
    __shared__ int s_fail;
    __shared__ float sh[33];
    epoch_t e;
    const Unit<E> pre = fused_begin<E, VEC, false>(st, partial, dim, &s_e, &s_fail, &e);
    constexpr int V = Elt<E>::V;
    const size_t nv = (size_t)dim / V;
    if (!s_fail) {
        const size_t slot = ls_ar_slot((size_t)rows * dim * sizeof(E));
        const size_t area = LS_AR_DATA_OFF + (size_t)(e & 1) * st.data_bytes;
        const size_t mine = area + (size_t)st.rank * slot;
        for (int row = (int)blockIdx.x; row < rows; row += (int)gridDim.x) {
            const size_t off = (size_t)row * dim;
            const E *p = partial + off;
            for (size_t u = threadIdx.x; u < nv; u += blockDim.x) {
                const Unit<E> v =
                    row == (int)blockIdx.x && u == threadIdx.x ? pre : load_unit<E, VEC>(p, u);
                for (int q = 0; q < st.size; q++) {
                    if (q == st.rank) continue;
                    E *dst = reinterpret_cast<E *>(static_cast<char *>(st.buf[q]) + mine) + off;
                    if (VEC) {
                        *reinterpret_cast<uint4 *>(dst + u * V) = v.v;
                    } else {
#pragma unroll
                        for (int k = 0; k < V; k++) dst[u * V + k] = v.e[k];
                    }
                }
            }
            for (size_t i = nv * V + threadIdx.x; i < (size_t)dim; i += blockDim.x)
                for (int q = 0; q < st.size; q++)
                    if (q != st.rank)
                        (reinterpret_cast<E *>(static_cast<char *>(st.buf[q]) + mine) + off)[i] =
                            p[i];
        }
        if (st.fence_all) __threadfence_system();

        if (exchange(st, 0, e, &s_fail)) {
            const char *local = static_cast<const char *>(st.buf[st.rank]) + area;
            for (int row = (int)blockIdx.x; row < rows; row += (int)gridDim.x) {
                const size_t off = (size_t)row * dim;
                const SumA<E, VEC> a{&st,   st.rank, st.size,        partial + off,
                                     local, slot,    off * sizeof(E)};
                residual_rmsnorm_row<E, VEC>(a, x + off, out + off, normed ? normed + off : nullptr,
                                             w, dim, eps, sh);
            }
        }
    }
    end(st, e);
}

/* fused_kernel over LL lines: block b pushes rows b, b + G, ... (units of a row, its last one
 * zero-padded), then reduces and normalises them, pulling each peer's lines as it needs them;
 * a row's lines are zeroed after its block sum (every read of them is before it). */
template <typename E, bool VEC>
static __global__ void __launch_bounds__(LS_AR_NORM_THREADS, 1)
    fused_ll_kernel(const __grid_constant__ ls_ar_state st, const E *partial, const E *x, E *out,
                    E *normed, const E *w, int rows, int dim, float eps)
{
    __shared__ epoch_t s_e;
    __shared__ int s_fail;
    __shared__ float sh[33];
    epoch_t e;
    const Unit<E> pre = fused_begin<E, VEC, true>(st, partial, dim, &s_e, &s_fail, &e);
    constexpr int V = Elt<E>::V;
    const size_t nu = ((size_t)dim + V - 1) / V;
    if (!s_fail) {
        const uint32_t f = ll_flag(e);
        const size_t lslot = ls_ar_ll_slot((size_t)rows * nu);
        const size_t area = st.ll_off + (size_t)(e & 1) * st.ll_bytes;
        const size_t mine = area + (size_t)st.rank * lslot;
        for (int row = (int)blockIdx.x; row < rows; row += (int)gridDim.x) {
            const E *p = partial + (size_t)row * dim;
            for (size_t u = threadIdx.x; u < nu; u += blockDim.x) {
                const Unit<E> v = row == (int)blockIdx.x && u == threadIdx.x
                                      ? pre
                                      : load_unit_padded<E, VEC>(p, u, dim);
                for (int q = 0; q < st.size; q++)
                    if (q != st.rank)
                        ll_push(static_cast<char *>(st.buf[q]) + mine + ((size_t)row * nu + u) * 32,
                                v.v, f);
            }
        }
        char *local = static_cast<char *>(st.buf[st.rank]) + area;
        for (int row = (int)blockIdx.x; row < rows; row += (int)gridDim.x) {
            const size_t off = (size_t)row * dim;
            char *lines = local + (size_t)row * nu * 32;
            const SumLL<E, VEC> a{&st, partial + off, lines, lslot, dim, f, e};
            residual_rmsnorm_row<E, VEC>(a, x + off, out + off, normed ? normed + off : nullptr, w,
                                         dim, eps, sh);
            for (size_t u = threadIdx.x; u < nu; u += blockDim.x)
                for (int r = 0; r < st.size; r++)
                    if (r != st.rank) ll_clear(lines + r * lslot + u * 32);
        }
    }
    end(st, e);
}

/* ---- probe ---- */

static __global__ void probe_kernel(const __grid_constant__ ls_ar_state st, unsigned salt,
                                    unsigned *bad)
{
    for (int q = 0; q < st.size; q++) {
        if (q == st.rank) continue;
        volatile unsigned *slot = reinterpret_cast<volatile unsigned *>(
                                      static_cast<char *>(st.buf[q]) + LS_AR_PROBE_OFF) +
                                  st.rank * LS_AR_PROBE_WORDS;
        for (int i = (int)threadIdx.x; i < LS_AR_PROBE_WORDS; i += (int)blockDim.x)
            slot[i] = ls_ar_probe_word(st.rank, q, i, salt);
    }
    __threadfence_system();
    __syncthreads();
    for (int q = 0; q < st.size; q++) {
        if (q == st.rank) continue;
        volatile unsigned *slot = reinterpret_cast<volatile unsigned *>(
                                      static_cast<char *>(st.buf[q]) + LS_AR_PROBE_OFF) +
                                  st.rank * LS_AR_PROBE_WORDS;
        for (int i = (int)threadIdx.x; i < LS_AR_PROBE_WORDS; i += (int)blockDim.x)
            if (slot[i] != ls_ar_probe_word(st.rank, q, i, salt)) atomicAdd(&bad[q], 1u);
    }
}

/* ---- launchers ---- */

static size_t esize_of(ls_ar_dtype t)
{
    return t == LS_AR_BF16 ? 2 : 4;
}

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

static int grid_for(size_t units, int threads, int max_blocks)
{
    const size_t g = (units + (size_t)threads - 1) / (size_t)threads;
    return g < 1 ? 1 : g > (size_t)max_blocks ? max_blocks : (int)g;
}

static void check_args(const ls_ar_state *st, ls_ar_dtype t, size_t need, size_t count,
                       const char *what)
{
    char msg[256];
    if (t != LS_AR_F32 && t != LS_AR_BF16) {
        snprintf(msg, sizeof msg, "dtype %d is not f32 or bf16", (int)t);
        ls_die(__FILE__, __LINE__, what, msg);
    }
    if (st->threads < 32 || st->threads > LS_AR_MAX_THREADS || st->threads % 32 ||
        st->max_blocks < 1 || st->max_blocks > LS_AR_MAX_BLOCKS || st->size < 1 ||
        st->size > LS_AR_MAX_RANKS) {
        snprintf(msg, sizeof msg, "bad state: %d threads, %d blocks, %d ranks", st->threads,
                 st->max_blocks, st->size);
        ls_die(__FILE__, __LINE__, what, msg);
    }
    if (need > st->data_bytes) {
        snprintf(msg, sizeof msg,
                 "%zu elements need %zu bytes of data area, the communicator has %zu", count, need,
                 st->data_bytes);
        ls_die(__FILE__, __LINE__, what, msg);
    }
}

/* the LL one-shot over n elements taken as one flat array of units, when they fit its lines
 * (RES: out = x + the sum); false: the caller launches another kernel */
template <typename E, bool RES>
static bool ll_flat_launch(const ls_ar_state *st, const void *in, const void *x, void *out,
                           size_t n, cudaStream_t s)
{
    const size_t units = ls_ar_units(n, sizeof(E));
    if (!ls_ar_use_ll(st, n * sizeof(E), units)) return false;
    const bool al = aligned16(in) && (!RES || aligned16(x)) && aligned16(out);
    auto fn = al ? oneshot_ll_kernel<E, true, RES> : oneshot_ll_kernel<E, false, RES>;
    if (st->ll_batch)
        fn = al ? oneshot_ll_kernel<E, true, RES, true> : oneshot_ll_kernel<E, false, RES, true>;
    pdl_launch(fn, grid_for(units, st->threads, st->max_blocks), st->threads, 0, s, *st,
               (const E *)in, (const E *)x, (E *)out, n);
    return true;
}

template <typename E>
static void oneshot_launch(const ls_ar_state *st, const void *in, void *out, size_t count,
                           cudaStream_t s)
{
    if (ll_flat_launch<E, false>(st, in, nullptr, out, count, s)) return;
    const bool al = aligned16(in) && aligned16(out);
    /* the flag kernel's blocks split the whole units, its tail goes to the last block */
    pdl_launch(al ? oneshot_kernel<E, true> : oneshot_kernel<E, false>,
               grid_for(count * sizeof(E) / 16, st->threads, st->max_blocks), st->threads, 0, s,
               *st, (const E *)in, (E *)out, count);
}

extern "C" void ls_allreduce_oneshot(const struct ls_ar_state *st, const void *in, void *out,
                                     size_t count, enum ls_ar_dtype t, void *stream)
{
    if (count == 0) return;
    const size_t es = esize_of(t);
    check_args(st, t, ls_ar_oneshot_need(st->size, count, es), count, "ls_allreduce_oneshot");
    if (t == LS_AR_F32)
        oneshot_launch<float>(st, in, out, count, (cudaStream_t)stream);
    else
        oneshot_launch<bf16_bits>(st, in, out, count, (cudaStream_t)stream);
    CHECK_CUDA(cudaGetLastError());
}

template <typename E>
static void twoshot_launch(const ls_ar_state *st, const void *in, void *out, size_t count,
                           cudaStream_t s)
{
    const bool al = aligned16(in) && aligned16(out);
    const int grid =
        grid_for(ls_ar_slice(count, st->size) * sizeof(E) / 16, st->threads, st->max_blocks);
    pdl_launch(al ? twoshot_kernel<E, true> : twoshot_kernel<E, false>, grid, st->threads, 0, s,
               *st, (const E *)in, (E *)out, count);
}

extern "C" void ls_allreduce_twoshot(const struct ls_ar_state *st, const void *in, void *out,
                                     size_t count, enum ls_ar_dtype t, void *stream)
{
    if (count == 0) return;
    const size_t es = esize_of(t);
    check_args(st, t, ls_ar_twoshot_need(st->size, count, es), count, "ls_allreduce_twoshot");
    if (t == LS_AR_F32)
        twoshot_launch<float>(st, in, out, count, (cudaStream_t)stream);
    else
        twoshot_launch<bf16_bits>(st, in, out, count, (cudaStream_t)stream);
    CHECK_CUDA(cudaGetLastError());
}

/* 16-byte accesses need every row start aligned: dim a multiple of the unit, pointers aligned */
static bool norm_vec(const void *a, const void *x, const void *out, const void *normed,
                     const void *w, int dim, size_t es)
{
    return dim % (int)(16 / es) == 0 && aligned16(a) && aligned16(x) && aligned16(out) &&
           aligned16(normed) && aligned16(w);
}

static void check_norm_args(int rows, int dim, const void *out, const void *normed,
                            const char *what)
{
    if (rows < 0 || dim < 1) ls_die(__FILE__, __LINE__, what, "rows must be >= 0 and dim >= 1");
    if (out == normed) ls_die(__FILE__, __LINE__, what, "out and normed must not alias");
}

template <typename E>
static void fused_launch(const ls_ar_state *st, const void *partial, const void *x, void *out,
                         void *normed, const void *w, int rows, int dim, float eps, cudaStream_t s)
{
    const size_t n = (size_t)rows * dim;
    /* the residual alone: its units spread over the grid by the LL one-shot's RES form */
    if (!normed && st->spread && ll_flat_launch<E, true>(st, partial, x, out, n, s)) return;
    const size_t units = (size_t)rows * ls_ar_units((size_t)dim, sizeof(E));
    const bool vec = norm_vec(partial, x, out, normed, w, dim, sizeof(E));
    const bool ll = ls_ar_use_ll(st, n * sizeof(E), units);
    void (*k)(ls_ar_state, const E *, const E *, E *, E *, const E *, int, int, float) =
        ll ? (vec ? fused_ll_kernel<E, true> : fused_ll_kernel<E, false>)
           : (vec ? fused_kernel<E, true> : fused_kernel<E, false>);
    const int grid = rows < st->max_blocks ? rows : st->max_blocks;
    pdl_launch(k, grid, LS_AR_NORM_THREADS, 0, s, *st, (const E *)partial, (const E *)x, (E *)out,
               (E *)normed, (const E *)w, rows, dim, eps);
}

extern "C" void ls_allreduce_residual_rmsnorm(const struct ls_ar_state *st, const void *partial,
                                              const void *x, void *out, void *normed, const void *w,
                                              int rows, int dim, float eps, enum ls_ar_dtype t,
                                              void *stream)
{
    const char *what = "ls_allreduce_residual_rmsnorm";
    check_norm_args(rows, dim, out, normed, what);
    if (rows == 0) return;
    const size_t es = esize_of(t), count = (size_t)rows * dim;
    check_args(st, t, ls_ar_oneshot_need(st->size, count, es), count, what);
    if (t == LS_AR_F32)
        fused_launch<float>(st, partial, x, out, normed, w, rows, dim, eps, (cudaStream_t)stream);
    else
        fused_launch<bf16_bits>(st, partial, x, out, normed, w, rows, dim, eps,
                                (cudaStream_t)stream);
    CHECK_CUDA(cudaGetLastError());
}

template <typename E>
static void residual_rmsnorm_launch(const void *a, const void *x, void *out, void *normed,
                                    const void *w, int rows, int dim, float eps, cudaStream_t s)
{
    const int grid = rows < 65535 ? rows : 65535;
    const bool vec = norm_vec(a, x, out, normed, w, dim, sizeof(E));
    pdl_launch(vec ? residual_rmsnorm_kernel<E, true> : residual_rmsnorm_kernel<E, false>, grid,
               LS_AR_NORM_THREADS, 0, s, (const E *)a, (const E *)x, (E *)out, (E *)normed,
               (const E *)w, rows, dim, eps);
}

extern "C" void ls_residual_rmsnorm(const void *a, const void *x, void *out, void *normed,
                                    const void *w, int rows, int dim, float eps, enum ls_ar_dtype t,
                                    void *stream)
{
    const char *what = "ls_residual_rmsnorm";
    check_norm_args(rows, dim, out, normed, what);
    if (rows == 0) return;
    if (t != LS_AR_F32 && t != LS_AR_BF16)
        ls_die(__FILE__, __LINE__, what, "dtype is not f32 or bf16");
    if (t == LS_AR_F32)
        residual_rmsnorm_launch<float>(a, x, out, normed, w, rows, dim, eps, (cudaStream_t)stream);
    else
        residual_rmsnorm_launch<bf16_bits>(a, x, out, normed, w, rows, dim, eps,
                                           (cudaStream_t)stream);
    CHECK_CUDA(cudaGetLastError());
}

extern "C" void ls_ar_probe(const struct ls_ar_state *st, unsigned salt, unsigned *bad,
                            void *stream)
{
    probe_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(*st, salt, bad);
    CHECK_CUDA(cudaGetLastError());
}
