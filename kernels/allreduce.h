/* Custom all-reduce over CUDA IPC peer memory, for the small messages of batch-1 decode, and
 * the fused residual + RMSNorm step that consumes it. Plain C: runtime/comm_custom.c sets the
 * state up (buffers, IPC handles, reachability probe) and the kernels only see this struct.
 *
 * Every rank owns one registered buffer (cudaMalloc, exported with cudaIpcGetMemHandle) laid out
 *   [flags: u64 [2 phases][LS_AR_MAX_BLOCKS][LS_AR_MAX_RANKS]]  peers store epochs here
 *   [probe: u32 [LS_AR_MAX_RANKS][LS_AR_PROBE_WORDS]]           reachability test at create
 *   [data area 0][data area 1]                                  data_bytes each
 *   [LL area 0][LL area 1]                                      ll_bytes each (may be 0)
 * Data is pushed: a rank stores its contribution into every peer's area with plain stores over
 * NVLink, then raises a flag there; the reduction reads only local memory.
 *
 * Synchronisation (correct under CUDA graph replay, no host arguments baked in): the epoch
 * lives in device memory (ctl), is read by every block at kernel start (e = epoch + 1) and is
 * advanced by the last block to finish. Block b of rank r, once its stores are fenced, writes e
 * into flag[phase][b][r] of every peer, then spins (ld.acquire.sys) until flag[phase][b][q] >= e
 * for every peer q. Blocks pair across ranks by index, so every rank must launch the same grid
 * for the same call: grids depend only on count, dtype and the (rank-0 broadcast) config.
 * Areas alternate by epoch parity: a rank that finished all-reduce k-1 knows every peer has
 * started k-1 and so finished reading area (k-2)&1 == k&1, which it may now overwrite.
 * Epochs are 64-bit and never wrap: a flag slot that a large grid used long ago still holds a
 * smaller epoch (32-bit wrapping comparisons fail once a slot is 2^31 launches stale).
 *
 * LL (flag-in-data, for one-shot and fused messages up to ll_max bytes): no fence and no
 * separate flag. Each 16-byte unit of a contribution travels as two 16-byte lines
 * {w0, f, w1, f} stored by one instruction each (8-byte halves arrive whole), f derived from the
 * epoch and never 0; the receiving thread spins on its own lines until all four flags read f,
 * then zeroes them, so a line holds f only after this epoch's store (no stale match when the
 * 32-bit flag wraps). Areas still alternate by epoch parity, by the same argument.
 *
 * Bounded spin: a wait longer than timeout_ns (%globaltimer) records who never arrived in a
 * host-mapped ls_ar_err, sets ctl's abort flag (later launches return at once) and exits; the
 * host reads it with ls_comm_custom_check after a sync.
 *
 * Sums run in fp32 in rank order 0, 1, ..., size-1 on every rank (one rounding for bf16), so
 * every rank holds bitwise the same result, and one-shot, two-shot and the fused kernel agree
 * bitwise with each other. Elements are split into units of 16 bytes (4 f32 or 8 bf16) plus a
 * scalar tail; which thread handles which element never depends on pointer alignment (that
 * only picks 16-byte or scalar loads), so ranks with differently aligned buffers still agree. */
#ifndef LOCKSTEP_KERNELS_ALLREDUCE_H
#define LOCKSTEP_KERNELS_ALLREDUCE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the size helpers below are shared by host code and the kernels */
#ifdef __CUDACC__
#define LS_AR_HD __host__ __device__
#else
#define LS_AR_HD
#endif

#define LS_AR_MAX_RANKS   8
#define LS_AR_MAX_BLOCKS  128
#define LS_AR_MAX_THREADS 512 /* keeps 128 registers a thread: no spills */
#define LS_AR_PROBE_WORDS 256
#define LS_AR_FLAG_OFF    0
#define LS_AR_PROBE_OFF   (2 * LS_AR_MAX_BLOCKS * LS_AR_MAX_RANKS * 8)
#define LS_AR_DATA_OFF    (LS_AR_PROBE_OFF + LS_AR_MAX_RANKS * LS_AR_PROBE_WORDS * 4)
/* threads per block of the residual + RMSNorm kernels, fused or not: fixed, because the order
 * of the sum of squares (and so the bits of `normed`) depends on it */
#define LS_AR_NORM_THREADS 512

/* values match enum ls_dtype's LS_F32 and LS_BF16 (checked in comm_custom.c) */
enum ls_ar_dtype { LS_AR_F32 = 0, LS_AR_BF16 = 1 };

/* What the kernels need, passed by value at each launch. Shapes are per rank. */
struct ls_ar_state {
    int rank, size;
    int threads;                   /* per block of one-/two-shot: 32..LS_AR_MAX_THREADS, x32 */
    int max_blocks;                /* grid cap, <= LS_AR_MAX_BLOCKS */
    int fence_all;                 /* every storing thread fences, not only the flag's */
    int spread;                    /* the residual-only fused step over LL lines spreads its
                                      units over the grid (the LL one-shot's RES form), not a
                                      row a block */
    size_t ll_max;                 /* one-shot and fused messages up to this many bytes go LL */
    size_t ll_off, ll_bytes;       /* the two LL areas: offset of the first, bytes of each */
    void *buf[LS_AR_MAX_RANKS];    /* every rank's registered buffer, mapped here; [rank] ours */
    void *ctl;                     /* device memory of this rank only: struct ls_ar_ctl */
    void *err;                     /* device address of the host-mapped struct ls_ar_err */
    size_t data_bytes;             /* bytes of each of the two data areas */
    unsigned long long timeout_ns; /* longest wait for a peer's flag */
    int ll_batch;                  /* the one-shot over LL lines loads a batch of peers' lines
                                      before waiting for any (LOCKSTEP_AR_LL_BATCH; off) */
};

/* this rank's epoch counter; zeroed at create, touched only by the kernels */
struct ls_ar_ctl {
    unsigned long long epoch; /* epoch of the last completed all-reduce */
    unsigned done;            /* blocks of the running launch that have finished */
    unsigned abort;           /* set by the first timeout: later launches do nothing */
};

/* written by the first block that times out, in host-mapped memory; code last */
struct ls_ar_err {
    volatile int code; /* 0: none; 1: a peer's flag never came */
    int rank, peer, block, phase; /* phase 0, 1: flag exchanges; 2: LL lines */
    unsigned long long epoch; /* which all-reduce (1 = the first after create) */
    unsigned long long waited_ns;
};

/* bytes of a data-area slot holding `bytes`: 256-aligned so every slot starts 16-byte aligned */
static inline LS_AR_HD size_t ls_ar_slot(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}
/* elements per two-shot slice: ceil(count / size), rounded up to 8 so slices start aligned */
static inline LS_AR_HD size_t ls_ar_slice(size_t count, int size)
{
    size_t s = (count + (size_t)size - 1) / (size_t)size;
    return (s + 7) & ~(size_t)7;
}
/* data-area bytes the one-shot (or fused) and the two-shot need for `count` elements */
static inline LS_AR_HD size_t ls_ar_oneshot_need(int size, size_t count, size_t esize)
{
    return (size_t)size * ls_ar_slot(count * esize);
}
/* LL (flag-in-data) one-shot: every 16-byte unit (a row's last one zero-padded) travels as
 * two 16-byte lines {w0, flag, w1, flag}: a slot of `units` units takes 32 bytes each */
static inline LS_AR_HD size_t ls_ar_units(size_t count, size_t esize)
{
    return (count * esize + 15) / 16;
}
static inline LS_AR_HD size_t ls_ar_ll_slot(size_t units)
{
    return ls_ar_slot(units * 32);
}
/* a one-shot of `bytes` in `units` units goes over LL lines: up to st->ll_max, when every
 * rank's lines fit the LL area (the kernels' launcher and ls_comm_custom_path both ask this) */
static inline int ls_ar_use_ll(const struct ls_ar_state *st, size_t bytes, size_t units)
{
    return bytes <= st->ll_max && (size_t)st->size * ls_ar_ll_slot(units) <= st->ll_bytes;
}
static inline LS_AR_HD size_t ls_ar_twoshot_need(int size, size_t count, size_t esize)
{
    return (size_t)size * ls_ar_slot(ls_ar_slice(count, size) * esize) + ls_ar_slot(count * esize);
}

/* out[i] = sum over ranks of in[i] (in == out allowed). One-shot: every rank pushes all of
 * `in` to every peer and reduces everything locally; one flag exchange. Two-shot: rank q
 * reduces slice q (reduce-scatter), then pushes it to every peer (all-gather); two exchanges,
 * 2(size-1)/size of the bytes on each link instead of size-1 times. Both die (check.h) if the
 * message does not fit st->data_bytes. Enqueued on `stream` (a cudaStream_t); capturable. */
void ls_allreduce_oneshot(const struct ls_ar_state *st, const void *in, void *out, size_t count,
                          enum ls_ar_dtype t, void *stream);
void ls_allreduce_twoshot(const struct ls_ar_state *st, const void *in, void *out, size_t count,
                          enum ls_ar_dtype t, void *stream);

/* The decode step's all-reduce fused with what follows it, over [rows][dim], one-shot:
 *   a      = allreduce(partial)               (fp32 sum in rank order, rounded to t)
 *   out    = x + a                            (rounded to t; out == x allowed)
 *   normed = out * (1 / sqrt(mean(out^2) + eps)) * w     (w [dim]; as ref_rmsnorm)
 * normed NULL: out only (w unused; the norm is then the next matmul's). All arrays are of
 * dtype t. normed may alias partial. Bitwise equal to ls_allreduce_oneshot(partial -> a)
 * followed by ls_residual_rmsnorm(a, ...). */
void ls_allreduce_residual_rmsnorm(const struct ls_ar_state *st, const void *partial, const void *x,
                                   void *out, void *normed, const void *w, int rows, int dim,
                                   float eps, enum ls_ar_dtype t, void *stream);
/* The same step without the all-reduce (a already summed), for other communicators */
void ls_residual_rmsnorm(const void *a, const void *x, void *out, void *normed, const void *w,
                         int rows, int dim, float eps, enum ls_ar_dtype t, void *stream);

/* Reachability probe: for every peer q, store a pattern into q's probe slot for this rank,
 * fence, read it back; bad[q] (device, zeroed by the caller) counts mismatched words. */
void ls_ar_probe(const struct ls_ar_state *st, unsigned salt, unsigned *bad, void *stream);
/* the word rank `from` writes at index i of its probe slot on rank `to` */
static inline LS_AR_HD unsigned ls_ar_probe_word(int from, int to, int i, unsigned salt)
{
    return (0x9E3779B9u * (unsigned)(i + 1)) ^ ((unsigned)from << 24) ^ ((unsigned)to << 16) ^ salt;
}

#ifdef __cplusplus
}
#endif

#endif
