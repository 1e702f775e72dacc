/* The streamed decode attention's launch (kernels/attention.cu, decode_bulk): the shared memory
 * a block takes and the carveout that keeps its blocks one a SM, as pure functions so that a CPU
 * test covers them (tests/unit/test_bulk_shape.c). */
#ifndef LOCKSTEP_BULK_SHAPE_H
#define LOCKSTEP_BULK_SHAPE_H

#include <stddef.h>

/* bytes the SM sets aside for each resident block besides its shared memory (sm_80 on) */
#define LS_SMEM_BLOCK_RESERVE 1024

/* A block's shared memory: the ring of `ring` stages of `stage` positions (K and V rows of hd
 * 128 in bf16), or, where larger, the warps' states the merge keeps there afterwards (`warps`
 * warps x gm q heads x (max, sum, 128 outputs) floats). */
static inline size_t ls_bulk_smem(int ring, int stage, int gm, int warps)
{
    const size_t ring_bytes = (size_t)ring * 2 * stage * 128 * 2;
    const size_t merge = (size_t)warps * gm * (2 + 128) * sizeof(float);
    return ring_bytes < merge ? merge : ring_bytes;
}

/* The carveout (percent of smem_per_sm) that holds one block of smem bytes and its reserve.
 * The SM rounds it up to the next shared-memory configuration it has; on Hopper (8, 16, 32, 64,
 * 100, 132, 164, 196, 228 KB) that is short of two blocks for every ring the switches allow,
 * so the blocks spread one a SM. */
static inline int ls_bulk_carveout(size_t smem, int smem_per_sm)
{
    return (int)(((smem + LS_SMEM_BLOCK_RESERVE) * 100 + (size_t)smem_per_sm - 1) /
                 (size_t)smem_per_sm);
}

#endif
