/* CPU reference implementations of every operation of the forward pass, in fp32. They are the
 * CPU backend's kernels and the reference the CUDA kernels are tested against. Shapes are
 * row-major; T is the number of token positions processed at once (prompt length in prefill,
 * 1 in decode). Multi-threaded with OpenMP over independent rows; results do not depend on the
 * thread count (each output element is computed by one thread in a fixed order). */
#ifndef LOCKSTEP_KERNELS_REF_H
#define LOCKSTEP_KERNELS_REF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[t] = table[ids[t]]: [T][dim] */
void ref_embed(float *out, const float *table, const int *ids, int T, int dim);
/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, rows of dim; out may alias x */
void ref_rmsnorm(float *out, const float *x, const float *w, int rows, int dim, float eps);
/* out[T][n] = in[T][k] . W[n][k]^T (+ bias[n]) */
void ref_matmul(float *out, const float *in, const float *W, const float *bias, int T, int k,
                int n);
/* x[T][heads][hd] rotated in place; positions pos[T]; inv_freq[hd/2]; interleaved: pairs
 * (2i, 2i+1), else (i, i + hd/2) */
void ref_rope(float *x, const int *pos, int T, int heads, int hd, const float *inv_freq,
              int interleaved);
/* Causal attention of T new positions [pos0, pos0 + T) over a cache holding positions
 * [0, pos0 + T): q of position t at q + t * q_stride ([hq][hd]), kc/vc[ctx][hkv][hd] (rows of
 * the cache for positions), out [T][hq][hd]. q head h uses kv head kv_of[h]. */
void ref_attention(float *out, const float *q, int q_stride, const float *kc, const float *vc,
                   int pos0, int T, int hq, int hkv, int hd, const int *kv_of);
/* out[i] = silu(gate[i]) * up[i] */
void ref_swiglu(float *out, const float *gate, const float *up, size_t n);
/* x[i] += y[i] */
void ref_add(float *x, const float *y, size_t n);
/* Scores of rows of logits (a rank's vocabulary slice, tokens first .. first + n - 1 in
 * columns [0, n) of rows of ld): see ls_row_logprobs (kernels/sample.h) for out's layout
 * (3 + 2 N doubles a row). The sum of exp(l - m) runs in column order in double. */
#define LS_SCORE_TOP_MAX   20 /* the most likely tokens a row's scores can list */
#define LS_SCORE_SPLIT_MAX 64 /* the most slices a backend cuts a row into (ls_row_logprobs) */
/* the doubles of one slice's scores listing N tokens */
#define LS_SCORE_W(N) (3 + 2 * (N))
/* the most doubles one row's scores take (LS_SCORE_SPLIT_MAX slices of LS_SCORE_W(N)) */
#define LS_SCORE_ROW_MAX (LS_SCORE_SPLIT_MAX * LS_SCORE_W(LS_SCORE_TOP_MAX))
void ref_row_logprobs(double *out, const float *logits, int rows, int n, size_t ld,
                      const int *targets, int first, int N);
/* The penalised logit of a token seen count > 0 times in the penalty window (ls_sampler's
 * order, as Hugging Face's processors apply them): the repetition penalty divides a positive
 * logit and multiplies a negative one, then presence + frequency * count is subtracted. The
 * same operations on the host and on the device, each rounded on its own (no fused multiply-add:
 * the device form names each rounding), so both give the same bits. */
#ifdef __CUDACC__
#define LS_HOST_DEVICE __host__ __device__
#else
#define LS_HOST_DEVICE
#endif
static inline LS_HOST_DEVICE float ls_penalised(float l, int count, float rep, float pres,
                                                float freq)
{
#ifdef __CUDA_ARCH__
    if (rep != 1.0f) l = l > 0 ? __fdiv_rn(l, rep) : __fmul_rn(l, rep);
    return __fsub_rn(l, __fadd_rn(pres, __fmul_rn(freq, (float)count)));
#else
    if (rep != 1.0f) l = l > 0 ? l / rep : l * rep;
    return l - (pres + freq * (float)count);
#endif
}
/* One decode step's penalties where the step runs (the backend's penalize): the step's token
 * ids[0] at position pos[0] = p joins the window, and with last_n > 0 the token at p - last_n
 * (hist[p - last_n], when p >= last_n) leaves it; count[vocab] holds each token's occurrences in
 * the window and hist[p] = ids[0] is recorded (hist: the tokens by position). Then with l =
 * logits[v] + bias[v] (bias: a logit bias for every token, or NULL for none), out[v] =
 * ls_penalised(l) where count[v] > 0, else l. Before the first such step, count holds the
 * window of positions [max(0, p - last_n), p) and hist its tokens. Token ids outside [0,
 * vocab) count for nothing, as in ls_sampler. */
void ref_penalize(float *out, const float *logits, const float *bias, int vocab, int *count,
                  int *hist, const int *ids, const int *pos, int last_n, float rep, float pres,
                  float freq);
/* A greedy choice over a vocabulary cut into tp slices, one a rank (the tensor-parallel decode
 * step without the logits' all-gather): ref_argmax_pairs leaves pairs[2 tp] all 0 but for this
 * rank's slot, pairs[2 slot] = the largest of x[0..n) (its slice) and pairs[2 slot + 1] = first +
 * its index, the lowest on ties, as a float (exact below LS_ARGMAX_PAIRS_MAX_ID); NaN is never
 * taken, and a slice of nothing else gives (0, -1). Summed over the ranks, every other slot 0
 * (so the sum is exact in any order), the pairs give every rank the same token by
 * ref_argmax_pick: the largest value, the lowest id on ties, 0 where no slice had a value. That
 * is the argmax of the whole row (the GPU's ls_sample_argmax, which never takes NaN either). */
#define LS_ARGMAX_PAIRS_MAX_ID (1 << 24)
void ref_argmax_pairs(float *pairs, const float *x, int n, int first, int slot, int tp);
int ref_argmax_pick(const float *pairs, int tp);
/* RoPE inverse frequencies, with llama3 or linear scaling applied as Hugging Face does */
void ref_rope_inv_freq(float *inv_freq, int hd, float theta, int scaling, float factor,
                       float low_freq_factor, float high_freq_factor, int orig_max_pos);

#ifdef __cplusplus
}
#endif

#endif
