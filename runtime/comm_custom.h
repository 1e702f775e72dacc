/* A communicator whose all-reduce, for small and medium messages between GPUs of one node,
 * runs our own kernels over CUDA IPC peer memory (kernels/allreduce.h) instead of NCCL: batch-1
 * decode does two all-reduces of a few KB per layer, where NCCL's fixed cost dominates.
 *
 *   bytes <= ll_max        one-shot over LL lines (the flag in every 8 bytes: no fence, no
 *                          flag exchange; twice the bytes on the link)
 *   bytes <= oneshot_max   one-shot: push everything to every peer, one flag exchange
 *   bytes <= twoshot_max   two-shot: reduce-scatter + all-gather over IPC, two exchanges
 *   larger, LS_I32, or the IPC path unusable: the fallback communicator
 *
 * The IPC path is used only if every rank is on one node (MPI_COMM_TYPE_SHARED), has a GPU of
 * its own, sees every peer's GPU with peer access, opened every peer's buffer, and a real
 * store/load probe through every peer's buffer came back intact; otherwise everything goes to
 * the fallback and rank 0 says why. Results are bitwise equal on all ranks (fixed rank-order
 * fp32 sums).
 *
 * Configuration (read on rank 0, broadcast, so every rank routes a call the same way):
 *   LOCKSTEP_AR_ONESHOT_MAX  bytes, K/M/G suffixes; default 512K for 2 ranks, 128K for 3-4,
 *                            64K above (one-shot sends size-1 copies from each GPU)
 *   LOCKSTEP_AR_TWOSHOT_MAX  default 32M for 2 ranks, 8M above; both capped at max_bytes
 *   LOCKSTEP_AR_LL_MAX       default 64K (0: never LL), capped at the one-shot limit
 *   LOCKSTEP_AR_THREADS      threads per block, 32..512, default 512
 *   LOCKSTEP_AR_MAX_BLOCKS   grid cap, 1..128, default 64
 *   LOCKSTEP_AR_TIMEOUT_MS   longest wait for a peer inside a kernel, default 10000
 *   LOCKSTEP_AR_DISABLE=1    always use the fallback (A/B comparisons)
 *   LOCKSTEP_AR_FENCE_ALL=0  only the flag's lane fences (see kernels/allreduce.cu); default 1
 *   LOCKSTEP_AR_SPREAD=0     the residual-only decode step over LL lines a row a block, as
 *                            before (default 1: its units spread over the grid)
 * These defaults are starting points, to be tuned with tests/gpu/test_allreduce's sweep.
 *
 * Use from one stream at a time (calls must be stream-ordered: the epoch protocol counts
 * launches). Everything is set up at create time, so all-reduces can be captured in CUDA graphs
 * and replayed any number of times. */
#ifndef LOCKSTEP_COMM_CUSTOM_H
#define LOCKSTEP_COMM_CUSTOM_H

#include "comm.h"

#include <mpi.h>
#include <stddef.h>

struct ls_ar_state;

struct ls_comm_custom_info {
    int enabled;      /* the IPC path is in use */
    char why[192];    /* when not: the first failing rank's reason */
    size_t max_bytes; /* largest message the buffers hold */
    size_t oneshot_max, twoshot_max, ll_max;
    int threads, max_blocks;
    int fence_all;
    double timeout_s;
    size_t buffer_bytes; /* device memory registered per rank */
};

/* Collective over `world`. `dev` is this rank's CUDA device; `max_bytes` the largest message
 * the custom path may carry (it sizes the buffers: 2 * size * max_bytes per rank); `fallback`
 * (typically ls_comm_nccl_create's) takes larger messages, LS_I32, bcast and allgather, and
 * everything when the IPC path is unusable; it stays the caller's and must outlive this comm.
 * Returns NULL only when the IPC path is unusable and fallback is NULL, or in CPU builds. */
struct ls_comm *ls_comm_custom_create(MPI_Comm world, int dev, size_t max_bytes,
                                      struct ls_comm *fallback);

/* 0 when no kernel of this comm has timed out; otherwise 1 with a message naming this rank
 * and the peer that never arrived. Reads host-mapped memory: call it after synchronising the
 * stream (a kernel still waiting has not written its verdict yet). Any other comm: 0. */
int ls_comm_custom_check(struct ls_comm *c, char *err, size_t errlen);

/* the device-side state for ls_allreduce_residual_rmsnorm and friends; NULL when c is not a
 * custom comm or its IPC path is off */
const struct ls_ar_state *ls_comm_custom_state(struct ls_comm *c);
/* fills *info; returns -1 when c is not a custom comm */
int ls_comm_custom_info(struct ls_comm *c, struct ls_comm_custom_info *info);
/* which path allreduce_sum takes for this message: "one-shot", "two-shot", "identity" (one
 * rank) or the fallback's name */
const char *ls_comm_custom_path(struct ls_comm *c, size_t count, enum ls_dtype t);

/* The decode step after a row-parallel matmul, on any communicator:
 *   out = x + allreduce(partial); normed = rmsnorm(out) * w      ([rows][dim], w [dim])
 * A custom comm whose one-shot covers the message runs one fused kernel; otherwise partial
 * is all-reduced in place (so it may be overwritten) and ls_residual_rmsnorm follows.
 * out may alias x; normed must not alias out; normed NULL: out only. Dtype LS_F32 or LS_BF16
 * for all arrays. */
void ls_comm_residual_rmsnorm(struct ls_comm *c, void *partial, const void *x, void *out,
                              void *normed, const void *w, int rows, int dim, float eps,
                              enum ls_dtype t, void *stream);

#endif
