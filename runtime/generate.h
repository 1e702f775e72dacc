/* One generation on an engine: prefill the prompt, then decode token by token until EOS, a stop
 * string or the token budget. Shared by `lockstep generate` and `lockstep batch`. Every rank
 * runs it with the same inputs and, holding the same logits, draws the same tokens. */
#ifndef LOCKSTEP_GENERATE_H
#define LOCKSTEP_GENERATE_H

#include "engine.h"
#include "sampler.h"

#include <stdio.h>
struct tokenizer;
struct json_t;

#define LS_MAX_STOPS 16
#define LS_MAX_STOP_IDS 64 /* token ids that end a generation besides the model's EOS */

struct ls_gen_params {
    struct ls_sampling sampling;
    int max_tokens;
    int ignore_eos;
    int n_stops;
    const char *stops[LS_MAX_STOPS];
    int n_stop_ids; /* tokens that end the generation as EOS does (not ignore_eos's) ... */
    int stop_ids[LS_MAX_STOP_IDS];
    int min_tokens;      /* ... and that, with EOS, cannot be drawn before this many tokens */
    FILE *stream;        /* text is written here as it is generated (rank 0), or NULL */
    int top_logits;      /* record the top-K logits ... */
    int top_logit_steps; /* ... of the first S steps */
    int logprobs;        /* record each generated token's log-probability ... */
    int top_logprobs;    /* ... and those of the N most likely tokens at its step (0..20) */
    int prompt_logprobs; /* record each prompt token's (but the first) given the ones before ... */
    int top_prompt_logprobs; /* ... with the N most likely at its position (0..20) */
    /* NULL, or a prefill shared by calls on the same prompt (batch "n"): the call that finds it
     * not valid runs the prefill and keeps the last position's logits in it; a later one, with
     * nothing else run on the engine in between, goes back to the prompt's end (the KV cache
     * of the prompt stays) and starts from those logits */
    struct ls_prefill_reuse *reuse;
};

struct ls_prefill_reuse {
    float *logits; /* [vocab] */
    int n_prompt, valid;
};

/* the most alternatives a step's log-probabilities carry (OpenAI's top_logprobs bound) */
#define LS_MAX_TOP_LOGPROBS 20

struct ls_gen_result {
    int *ids; /* [n_gen] generated ids */
    int n_prompt, n_gen;
    char *text;         /* generated text, stop string excluded */
    const char *finish; /* "stop" (EOS or stop string), "length" (budget or context) */
    double prefill_s, decode_s;
    double ttft_s; /* from the prompt's prefill to the first token chosen (0: none generated) */
    int *top_ids; /* [top_logit_steps][top_logits] */
    float *top_vals;
    int top_steps; /* steps recorded */
    /* with logprobs: log-probabilities of the model's distribution at each step (log_softmax
     * of the logits, before temperature, penalties and truncation, as vLLM gives them by
     * default): lp[i] of ids[i]; lp_ids[i][k], lp_vals[i][k] the top_logprobs most likely
     * tokens of that step, most likely first (ties: lower id first) */
    float *lp;
    int *lp_ids;
    float *lp_vals;
    /* with prompt_logprobs, the same for prompt tokens 1 .. n_prompt - 1 (index t - 1) */
    float *plp;
    int *plp_ids;
    float *plp_vals;
};

void ls_gen_defaults(struct ls_gen_params *p);
/* Returns 0, or -1 with err (prompt too long for the context, sampler allocation). */
int ls_generate(struct ls_engine *e, struct ls_model *m, const int *prompt, int n_prompt,
                const struct ls_gen_params *p, struct ls_gen_result *r, char *err, size_t errlen);
void ls_gen_result_free(struct ls_gen_result *r);
/* A result's log-probabilities as OpenAI's chat API gives them, with the token ids beside:
 * {"content": [{"id", "token", "logprob", "top_logprobs": [{"id", "token", "logprob"}, ...]},
 * ...]}, one entry per generated token ("token": its text decoded alone, special tokens as
 * written, a partial UTF-8 character as U+FFFD; left out without a tokenizer). A new reference;
 * NULL when the result has none. */
struct json_t *ls_logprobs_json(const struct tokenizer *tok, const struct ls_gen_result *r,
                                const struct ls_gen_params *p);
/* The prompt's, as vLLM lists prompt_logprobs: null for the first token, then one entry (as
 * above) per prompt token given the ones before it. NULL when the result has none. */
struct json_t *ls_prompt_logprobs_json(const struct tokenizer *tok, const int *prompt,
                                       const struct ls_gen_result *r,
                                       const struct ls_gen_params *p);

#endif
