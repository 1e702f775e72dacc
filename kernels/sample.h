/* Token selection on the GPU from a full row of logits, so that only the token id (4 bytes)
 * crosses to the host, or none at all when the next step's embedding reads it on the device.
 *
 * Semantics are those of runtime/sampler.c (ls_sampler_sample) without the penalties: order the
 * tokens by logit (highest first, lower id first on ties); softmax at the temperature; keep the
 * top_k first; of those, the shortest prefix whose probability reaches top_p of theirs; of
 * those, the ones with probability >= min_p times the top one; draw with u in [0, 1) along
 * that order. Probabilities are held as integers (2^32 for the top token), so every sum is exact
 * and the result does not depend on the order of additions: the same logits and u give the
 * same token on every rank and every run. Tokens under 2^-33 of the top token's probability
 * are never drawn (the CPU sampler would draw them with probability < 1e-10 each). */
#ifndef LOCKSTEP_KERNELS_SAMPLE_H
#define LOCKSTEP_KERNELS_SAMPLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* *out = index of the largest of x[0..n), the lowest index on ties (as ls_argmax); out is
 * device memory */
void ls_sample_argmax(int *out, const float *x, int n, void *stream);

/* A rank's slot of a greedy choice over a vocabulary cut into tp slices, x[0..n) its slice
 * (tokens first ..): pairs[2 tp] as ref_argmax_pairs (kernels/ref.h) leaves them, by the same
 * kernels as ls_sample_argmax. ls_sample_argmax_pick: *out = ref_argmax_pick(pairs, tp), the
 * token, once every rank's pairs are summed into pairs. Device memory; on stream. */
void ls_sample_argmax_pairs(float *pairs, const float *x, int n, int first, int slot, int tp,
                            void *stream);
void ls_sample_argmax_pick(int *out, const float *pairs, int tp, void *stream);

/* Rows of 4096 or more on a 16-byte boundary: ls_sample_argmax runs over a grid of blocks, each
 * a slice, the last block to finish writing the index (through two words of device memory that
 * it clears again: one call at a time on a device); else one block. The same index. On by
 * default (LOCKSTEP_ARGMAX_SPLIT=0: off); for tests and benchmarks. Negative: read only.
 * Returns the previous setting. */
int ls_sample_set_argmax_split(int on);

/* bytes of device workspace ls_sample needs for a vocabulary of n */
size_t ls_sample_workspace(int n);

/* *out = the token drawn from logits[0..n) (device memory, left unchanged). u: device pointer
 * to one double in [0, 1) (the host's uniform draw, copied in each step; a pointer so that the
 * call can live in a CUDA graph). temperature 0 is greedy (argmax, u unused); top_k 0 and
 * top_p 1 and min_p 0 are off. */
void ls_sample(int *out, const float *logits, int n, float temperature, int top_k, float top_p,
               float min_p, const double *u, void *workspace, void *stream);

/* With top_k set and a large vocabulary, ls_sample first keeps each block's top k of a slice of
 * the logits on every SM (a second kernel) and samples from those: the same token, fewer passes
 * for the one block that samples. With top_p alone it keeps each block's first 64 and samples
 * from those when they hold the whole top-p set (else from the whole row): the same token.
 * On by default; for tests and benchmarks. Negative: read only. Returns the previous setting. */
int ls_sample_set_prefilter(int on);

/* Without top-k, over 8192 logits or more: ls_sample runs its selects (the top-p cut, the draw
 * below the kept set) as radix selects whose histograms every block of a grid builds, and
 * min-p and the kept weight as grid reductions, in place of one block's passes over the whole
 * row (the prefilter cannot shrink it where the logits are flat, and serves top-p alone only):
 * the same token. On by default (LOCKSTEP_SAMPLE_GRID=0: off); for tests and benchmarks.
 * Negative: read only. Returns the previous setting. */
int ls_sample_set_grid(int on);

/* Where at most 1024 tokens are left to order (the top k of a top-k call, or a short list of
 * candidates), ls_sample orders them once in shared memory and reads the top-p, min-p and draw
 * cuts off one running sum, in place of a radix select for each: the same token. On by default;
 * for tests and benchmarks. Negative: read only. Returns the previous setting. */
int ls_sample_set_small(int on);

/* With top_k set above the prefilter's block count (e.g. 300 on an H200 at 128K logits), the
 * sampling block's list of survivors is bounded by each block's r-th token, r = ceil(top_k /
 * blocks), instead of the blocks' k-th survivors (kernels/sample.cu, sample_kernel): the same
 * token from far fewer survivors (tests/gpu/sim_topk_bound.py). On unless LOCKSTEP_SAMPLE_RTH=0;
 * for tests and benchmarks. Negative: read only. Returns the previous setting. */
int ls_sample_set_rth(int on);

/* A decode step's penalties on the device, as ref_penalize (kernels/ref.h): the step's token
 * ids[0] at position pos[0] joins the window held in count[vocab] (and the token at pos[0] -
 * last_n leaves it, last_n > 0), hist[pos[0]] records it, and out[v] is logits[v] + bias[v]
 * (bias: NULL for none) penalised where count[v] > 0. Device memory throughout (pos and ids as
 * the decode graph holds them), so the call can live in a CUDA graph; out and logits do not
 * overlap. The same bits as ref_penalize. */
void ls_penalize(float *out, const float *logits, const float *bias, int vocab, int *count,
                 int *hist, const int *ids, const int *pos, int last_n, float rep, float pres,
                 float freq, void *stream);

/* Scores of rows of logits without taking them to the host (a prompt's log-probabilities,
 * perplexity): logits[rows][ld] holds, in columns [0, n), the logits of tokens first ..
 * first + n - 1 (a rank's vocabulary slice). Each row is cut into `split` slices of
 * ceil(n / split) columns, one block each (ls_row_logprobs_split: enough blocks for the GPU),
 * and slice s of row r's out[(r * split + s) * (3 + 2 N) ...] (doubles, device memory) gets,
 * over its columns: the largest logit m; the sum of exp(l - m) over the row, in double (so the
 * slices' sums combine to the log-sum-exp of the whole vocabulary); the logit of token
 * targets[r] (a global id) where the slice holds it, else -inf; the N largest logits, most
 * likely first and the lower id first on ties (-inf past n), then their global ids (-1 past
 * n). N <= LS_SCORE_TOP_MAX (kernels/ref.h). As ref_row_logprobs, with the sum added in
 * another order. */
void ls_row_logprobs(double *out, const float *logits, int rows, int n, size_t ld,
                     const int *targets, int first, int N, int split, void *stream);
/* the slices a row of n is cut into for rows rows: about two blocks a multiprocessor, slices of
 * at least 2048 columns, at most LS_SCORE_SPLIT_MAX (kernels/ref.h) */
int ls_row_logprobs_split(int rows, int n);

#ifdef __cplusplus
}
#endif

#endif
