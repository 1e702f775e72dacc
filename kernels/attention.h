/* Attention over the bf16 KV cache (layout in rope.h: [hkv][max_ctx][hd] per layer), fp32 q and
 * output, fp32 softmax. GQA: q head h reads KV head h / group, group = hq / hkv (the shard plan
 * gives every rank whole KV groups, or one KV head and a share of its q heads, so the mapping
 * is always this one).
 *
 * Decode (one new position): flash-decoding. The context is cut into nsplit chunks; one block per
 * (KV head, <= 8 of its q heads, chunk) reads the chunk's K and V once for all those q heads and
 * leaves a partial softmax (max, sum, unnormalised output) in a workspace; the last block of a
 * (KV head, q heads) to finish (an atomic counter in the workspace, reset by that block) merges
 * the chunks in order, so a step is one kernel. When all live chunks fit one cluster of 8 blocks
 * (short contexts) they merge through distributed shared memory instead (no workspace round
 * trip). The workspace must be zeroed once after it is
 * allocated; every launch leaves its counters at zero. The context length is read from the device
 * (pos), and the grid depends only on nsplit, so a decode step can be captured once in a CUDA graph
 * and replayed.
 *
 * Prefill (T new positions pos0 .. pos0+T-1, causal, over the cache rows 0 .. pos0+T-1, which
 * must already hold the new positions' K and V): flash attention with online softmax, tiles of
 * 32 queries x 64 keys in shared memory, fp32 on CUDA cores. */
#ifndef LOCKSTEP_KERNELS_ATTENTION_H
#define LOCKSTEP_KERNELS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* chunks to cut a context of up to max_ctx positions into, for this device and shape */
int ls_attention_decode_splits(int hq, int hkv, int max_ctx);
/* experiments and tests: the decode kernel's fewest positions per chunk (8..4096; else the
 * default) and its form (wide: 1 the short-context form, 0 the long-context one, -1 by the cache
 * length); the old settings to *old_chunk and *old_wide when not NULL. Set before the split count
 * is taken. */
void ls_attention_set_decode_shape(int chunk, int wide, int *old_chunk, int *old_wide);
/* experiments and tests: the split decode's blocks launched in clusters of 8 chunks, whose
 * partials meet in distributed shared memory when every live chunk lies in the first cluster
 * (contexts of up to 8 chunks), instead of through the workspace and the done-counter (1, the
 * default; 0 or LOCKSTEP_ATT_CLUSTER=0: never). Returns the previous setting. */
int ls_attention_set_cluster(int on);
/* experiments and tests: the most q heads a decode block holds (1, 2, 4 or 8; 0, the default:
 * up to 4 in a launch without clusters; else one while the cache's K and V fit in half the L2,
 * past it by the launch's size; also LOCKSTEP_ATT_HEADS). Returns the previous setting. */
int ls_attention_set_heads(int heads);
/* experiments and tests: launches with clusters = 0 take the streamed form where it applies
 * (clusters = 2 below) too (1; also LOCKSTEP_ATT_BULK=1), or the register kernel (0, the
 * default). Returns the previous setting. */
int ls_attention_set_bulk(int on);
/* experiments and tests: the streamed form's ring of stages (1 to 6; 2, the default; also
 * LOCKSTEP_ATT_BULK_RING). Returns the previous setting. */
int ls_attention_set_bulk_ring(int stages);
/* experiments and tests: the streamed form's positions a stage (32 or 64, the default; also
 * LOCKSTEP_ATT_BULK_STAGE). Returns the previous setting. */
int ls_attention_set_bulk_stage(int positions);
/* whether the streamed form (clusters = 2) applies to hq q heads on hkv KV heads of hd: hd 128,
 * groups of up to 8 q heads, compute capability 9 or later. */
int ls_attention_bulk_applies(int hq, int hkv, int hd);
/* the longest context (positions) at which that cluster merge applies, for the split
 * ls_attention_decode_splits picks (max_ctx when it never leaves it) */
int ls_attention_cluster_reach(int hq, int hkv, int max_ctx);
/* bytes of workspace ls_attention_decode needs (0 when nsplit == 1) */
size_t ls_attention_decode_workspace(int hq, int hd, int nsplit);

/* out[h][:] for h < hq: attention of q[h][:] over cache positions 0 .. pos[0] (pos: device int,
 * the new token's position, its K/V already stored; clamped to max_ctx - 1).
 * Needs hd % 8 == 0, hd <= 256, hq % hkv == 0, q, out and workspace on 16-byte boundaries
 * (checked). workspace:
 * device memory of ls_attention_decode_workspace bytes (NULL allowed when nsplit == 1).
 * fresh: how many positions before pos[0] the kernels of this forward wrote (a prefill sent
 * through this kernel one position at a time: t for its t-th position; a decode step: 0). With
 * PDL the kernel reads the K/V rows of the positions before those ahead of its wait, and pos
 * too: pos must be written before the forward's kernels (by a copy or an earlier graph).
 * clusters: 0 launches the split without clusters (its chunks merge through the workspace),
 * with up to 4 q heads a block (the engine's long-context form); 1, with clusters where
 * they apply and ls_attention_set_cluster allows, one q head a block while the cache's K and V
 * fit in half the L2. The q heads a block holds: ls_attention_set_heads. 2: without clusters,
 * streamed through shared memory where ls_attention_bulk_applies (else as 0): a KV head's whole
 * group a block, about one block a SM (chunks of whole 64-position stages, at most nsplit), the
 * K and V rows by bulk copies into a ring of 32 KB stages, two by default (the engine's form
 * from where one q head a block would re-read 16 MiB of K and V a layer: 1024 positions at 32 q
 * heads of 128). */
void ls_attention_decode(float *out, const float *q, const uint16_t *kcache, const uint16_t *vcache,
                         const int *pos, int hq, int hkv, int hd, int max_ctx, int nsplit,
                         int fresh, int clusters, float *workspace, void *stream);

/* ls_attention_decode's split (clusters = 1's q heads a block) without its merge, for a decode
 * step (fresh 0) whose o GEMV merges the chunks itself (ls_gemv_residual_copy_att): launched
 * without clusters, each live chunk writes its (max, sum) and unnormalised output to the
 * workspace and leaves; no counter, no merge, nothing written to an output. Returns 0, launching
 * nothing, unless nsplit >= 2 (and the shape checks of ls_attention_decode hold). */
int ls_attention_decode_partials(float *workspace, const float *q, const uint16_t *kcache,
                                 const uint16_t *vcache, const int *pos, int hq, int hkv, int hd,
                                 int max_ctx, int nsplit, void *stream);
/* the split's least positions a chunk (64, or LOCKSTEP_ATT_CHUNK), which a merge of its partials
 * needs to find the live chunks */
int ls_attention_min_chunk(void);

/* experiments and tests: the prefill's attention kernel for hd 64 and 128. 1 to 6: a form of
 * the tensor-core kernel (see attention.cu); 7: the wgmma kernel (attention_sm90.cu; where the
 * build or the device has none, the default form); LS_PREFILL_TC_AUTO, the default: the wgmma
 * kernel where it runs and its grid has a block for every other SM, else the mma.sync form
 * measured fastest at the head size and chunk; 0: the fp32 kernel, which hd 256 always takes.
 * LOCKSTEP_ATT_PREFILL_TC (0 to 7) sets the start value. Returns the previous setting; -1 leaves
 * it. */
#define LS_PREFILL_TC_AUTO 16
int ls_attention_set_prefill_tc(int on);

/* the prefill's attention (as ls_attention_prefill) on Hopper's wgmma instructions, for hd 64
 * and 128 (q 16-byte aligned, q_stride a multiple of 4). Returns 0, launching nothing, where the
 * build (sm_90a device code) or the device (compute capability 9.0) has no such kernel, the
 * shape does not fit or the grid would have fewer than min_blocks blocks; 1 once launched. Keys
 * a tile: ls_attention_set_wgmma_bk. */
int ls_attention_prefill_wgmma(float *out, const float *q, int q_stride, const uint16_t *kcache,
                               const uint16_t *vcache, int pos0, int T, int hq, int hkv, int hd,
                               int max_ctx, int min_blocks, void *stream);

/* experiments and tests: the wgmma kernel's keys a tile, 128 (the start value) or 64
 * (LOCKSTEP_ATT_WG_BK=64 at the start); other values leave it. Returns the previous one. */
int ls_attention_set_wgmma_bk(int bk);

/* test: one warpgroup's wgmma products through the prefill kernel's layouts: c_ss (64 x 64) =
 * a (64 x 128) b^T (b 64 x 128), c_rs (64 x 128) = p (64 x 64) v (64 x 128), all row-major,
 * bf16 inputs, fp32 outputs. Returns 0 (nothing run) where ls_attention_prefill_wgmma would. */
int ls_wgmma_selftest(float *c_ss, float *c_rs, const uint16_t *a, const uint16_t *b,
                      const uint16_t *p, const uint16_t *v, void *stream);

/* out[t][h][:] for t < T, h < hq: causal attention of position pos0 + t over cache positions
 * 0 .. pos0 + t. q: row t at q + t*q_stride (the fused QKV buffer works as is), head h at
 * + h*hd. Needs hd in {64, 128, 256}, hq % hkv == 0, pos0 + T <= max_ctx (checked). */
void ls_attention_prefill(float *out, const float *q, int q_stride, const uint16_t *kcache,
                          const uint16_t *vcache, int pos0, int T, int hq, int hkv, int hd,
                          int max_ctx, void *stream);

#ifdef __cplusplus
}
#endif

#endif
