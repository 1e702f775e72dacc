/* The forward pass of one rank over its shard, in lockstep with the other ranks: every rank
 * runs the same steps on the same tokens, the two all-reduces per layer make the residual
 * stream identical everywhere, and the LM head's vocab slices are all-gathered so every rank
 * holds the same full row of logits (and so picks the same token). All buffers, the KV cache
 * included, are allocated once in ls_engine_new; a greedy decode step allocates nothing and,
 * on a backend with graphs, is captured once and replayed. */
#ifndef LOCKSTEP_ENGINE_H
#define LOCKSTEP_ENGINE_H

#include "backend.h"
#include "comm.h"
#include "model.h"
#include "sampler.h"

struct ls_engine;

/* max_ctx: KV cache length in tokens; max_batch: positions per forward call (prefill chunk) */
struct ls_engine *ls_engine_new(struct ls_model *m, struct ls_comm *comm,
                                const struct ls_backend *be, int max_ctx, int max_batch, char *err,
                                size_t errlen);
void ls_engine_free(struct ls_engine *e);
/* swap the communicator (bench: a null one measures the step without collectives); returns
 * the previous one. Drops a captured graph, which holds the old one's calls. */
struct ls_comm *ls_engine_set_comm(struct ls_engine *e, struct ls_comm *comm);
/* forget the context: the next token goes to position 0 */
void ls_engine_reset(struct ls_engine *e);
/* forget the positions from pos on (the cache keeps [0, pos), as they were computed): the next
 * token goes to position pos. 0, or -1 when pos is past the current position. */
int ls_engine_rewind(struct ls_engine *e, int pos);
int ls_engine_pos(const struct ls_engine *e);
/* the decode step's graphs so far (backends with graphs): captures that made a new graph, those
 * that updated one in place (a sampling change with the same launches), and the host's seconds
 * in them; and the decode steps issued ahead (ls_engine_plan) that the next call took, and
 * those dropped */
struct ls_graph_stats {
    int built, updated;
    double seconds;
    int ahead_taken, ahead_dropped;
};
struct ls_graph_stats ls_engine_graph_stats(const struct ls_engine *e);
int ls_engine_max_ctx(const struct ls_engine *e);
/* whether decode steps run the fused MLP (LOCKSTEP_MLP_FUSED; the model's down matrices then
 * stored transposed) */
int ls_engine_mlp_fused(const struct ls_engine *e);
/* Runs ids[0..n) at the current position (in chunks of max_batch), leaves the logits of the
 * last one in logits[vocab] (host) on every rank. Returns 0, or -1 when the context is full. */
int ls_engine_forward(struct ls_engine *e, const int *ids, int n, float *logits);
/* One position's scores (ls_engine_score); a token's log-probability is its logit - lse */
struct ls_scores {
    double lse;    /* log of the sum over the vocabulary of exp(logit) */
    double target; /* the logit of the token that follows the position in ids (-inf: none) */
    int n_top;
    const int *top_ids;       /* [n_top] most likely first, ties lower id first; -1 past V */
    const double *top_logits; /* [n_top] their logits; -inf past V */
};
/* One position's scores from a backend's row_logprobs output st[tp][R][S][3 + 2 N] (tp
 * ranks' vocabulary slices, R rows, S slices a row; r: the row): the slices' sums of exp
 * combined at the largest logit (one slice: its own log-sum-exp, the same bits), the target's
 * logit from the slice that holds it, the n most likely by a merge of the slices' lists (ties:
 * the lower id first) into ids, vals; head: tp x S ints of scratch */
void ls_scores_combine(const double *st, int tp, int R, int S, int r, int N, struct ls_scores *s,
                       int *head, int *ids, double *vals);
/* The forward of ids[0..n) (the last position's logits left in logits[vocab] as
 * ls_engine_forward leaves them) with every position's scores: each(ctx, t, s) for t = 0 ..
 * n - 1 in order, s the distribution after ids[0..t] with ids[t + 1] as the target and its
 * top_n (0 to LS_SCORE_TOP_MAX, kernels/ref.h) most likely tokens. The LM head runs over up to
 * 128 positions at once and each position's scores are taken in the backend, so only a few
 * numbers a position reach the host. Returns 0; -1 when the context is full, -2 on a bad top_n
 * or when the backend has no memory for the head's logits (err says which, with the numbers). */
int ls_engine_score(struct ls_engine *e, const int *ids, int n, int top_n, float *logits,
                    void (*each)(void *ctx, int t, const struct ls_scores *s), void *ctx, char *err,
                    size_t errlen);
/* One greedy decode step of token `in` at the current position, entirely in the backend (a
 * graph replay where the backend has graphs): only the next token comes back, in *out.
 * Returns 0, or -1 when the context is full. */
int ls_engine_decode_greedy(struct ls_engine *e, int in, int *out);
/* The work of a first request, done once and forgotten: a forward of up to n positions (token
 * ids 0, 1, ...), a drawn choice of the next token and one greedy decode step, then a reset.
 * On a GPU the kernels' first launches (module loads, the GEMMs' algorithm choice) and the
 * greedy step's graph capture then happen here instead of in the first request. Returns 0, or
 * -1 when the cache holds fewer than 2 positions (nothing done). */
int ls_engine_warmup(struct ls_engine *e, int n);
/* The same with the token chosen in the backend by sp (NULL or temperature 0: greedy; else
 * drawn at sp's temperature, top-k, top-p and min-p with the uniform draw u, ls_sampler_uniform)
 * after sp's penalties, if any, so every rank, given the same u, picks the same token from the
 * same logits, and the token ls_sampler_sample would pick. A graph is captured per choice of
 * sampling parameters; u is copied in before each replay. Penalties need hist, the tokens at
 * positions 0 .. the current one (`in` last; NULL without penalties): the backend keeps the
 * window's counts from step to step and takes them from hist again only after anything but a
 * penalised decode step (a forward, a reset or rewind, other penalties). */
int ls_engine_decode(struct ls_engine *e, int in, const struct ls_sampling *sp, double u,
                     const int *hist, int *out);
/* The caller's next n decode calls continue one another (each passes the token the one before
 * returned, with the same choice, and the next of smp's numbers, ls_sampler_uniform, where it
 * draws), so that a greedy one may issue the step after it before reading its own token (the
 * device then never waits for the host between steps), and a drawn one too (unless
 * LOCKSTEP_DECODE_AHEAD_DRAWN=0), its next number peeked from smp (NULL: no drawn step ahead);
 * penalised, biased and scored steps alike, unless LOCKSTEP_DECODE_AHEAD_ADJUSTED=0 or
 * LOCKSTEP_DECODE_AHEAD_SCORED=0. A hint, not a promise: a call that does otherwise, or any
 * other engine call, drops the step issued ahead (waiting for it) and the rest of the plan. The
 * last planned call issues nothing ahead; a caller that stops early (an end-of-sequence token)
 * leaves one step's work behind, which the next engine call waits for. Ignored on a backend that
 * cannot, on the CPU backend unless LOCKSTEP_DECODE_AHEAD=1, and with LOCKSTEP_DECODE_AHEAD=0.
 * smp must outlive the plan. */
void ls_engine_plan(struct ls_engine *e, int n, struct ls_sampler *smp);
/* The token after the last forward (the prompt's prefill), chosen in the backend as a decode
 * step chooses it (sp's penalties over hist[0 .. the current position), then argmax or the draw
 * u) from the logits that forward left there, or from logits (host memory, vocab floats: a kept
 * copy of them) where not NULL; only the token comes back, the logits stay. The host sampler's
 * token from the same logits, without sorting the vocabulary on the host. Returns 0, or -1
 * when nothing was forwarded or hist is NULL. */
int ls_engine_choose(struct ls_engine *e, const struct ls_sampling *sp, double u, const int *hist,
                     const float *logits, int *out);
/* ls_engine_decode, and the chosen token's scores in *s: its logit as the target, the
 * log-sum-exp and the top_n (0 to LS_SCORE_TOP_MAX) most likely of the step's distribution
 * (top_ids, top_logits: the caller's arrays of top_n), taken in the backend (in the graph), so
 * the step still sends only the token and a few numbers to the host. */
int ls_engine_decode_scored(struct ls_engine *e, int in, const struct ls_sampling *sp, double u,
                            const int *hist, int top_n, int *out, struct ls_scores *s, int *top_ids,
                            double *top_logits);

#endif
