/* Token sampling from a full row of logits. Every rank holds the same logits (the LM head's
 * vocab slices are all-gathered) and the same sampler state, so every rank draws the same token
 * without a broadcast: same seed -> same output at any TP size.
 * Order, as Hugging Face applies it: repetition / presence / frequency penalties, then
 * temperature (0 = greedy argmax, lowest id on ties), top-k, top-p, min-p, then one uniform draw.
 */
#ifndef LOCKSTEP_SAMPLER_H
#define LOCKSTEP_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the most tokens a logit_bias names, and an allowed_token_ids list */
#define LS_MAX_LOGIT_BIAS 1024
#define LS_MAX_ALLOWED_TOKENS 4096

struct ls_sampling {
    float temperature;        /* 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off; keep tokens with p >= min_p * p_max */
    float repetition_penalty; /* 1: off; HF: logit / pen if > 0 else logit * pen, once per seen
                                 token */
    float presence_penalty;   /* 0: off; logit -= pen once per seen token */
    float frequency_penalty;  /* 0: off; logit -= pen * count */
    int penalty_last_n;       /* window of history the penalties look at; 0: all of it */
    uint64_t seed;
    /* logit_bias (OpenAI, vLLM): bias[i] added to the logit of token bias_id[i] before the
     * penalties (the order of vLLM and of transformers' sequence_bias); ids distinct */
    int n_bias;
    int bias_id[LS_MAX_LOGIT_BIAS];
    float bias[LS_MAX_LOGIT_BIAS];
    /* allowed_token_ids (vLLM): n_allowed > 0 leaves only these tokens (every other logit
     * -inf, before the bias and the penalties) */
    int n_allowed;
    int allowed_id[LS_MAX_ALLOWED_TOKENS];
};

struct ls_sampler;

/* The float parameters' valid ranges, in one table: ls_sampling_validate checks them, the batch
 * reader takes its bounds from them, and the command line, on a number too large for a float
 * (infinite: the check could not print it), says the range with ls_sampling_range_text, in the
 * same words as the check. */
enum ls_sampling_param {
    LS_TEMPERATURE,
    LS_TOP_P,
    LS_MIN_P,
    LS_REPETITION_PENALTY,
    LS_PRESENCE_PENALTY,
    LS_FREQUENCY_PENALTY,
    LS_LOGIT_BIAS,
};
struct ls_sampling_range {
    const char *field; /* the name messages give it: "top_p" */
    float lo, hi;      /* lo <= v <= hi; lo < v <= hi when lo_open */
    int lo_open;
};
extern const struct ls_sampling_range ls_sampling_ranges[];
/* the range as messages say it, "0..100" or "a value in (0, 1]"; returns buf */
const char *ls_sampling_range_text(enum ls_sampling_param p, char *buf, size_t len);

void ls_sampling_defaults(struct ls_sampling *s);
/* Checks ranges; returns -1 with a message naming the field on a bad value. */
int ls_sampling_validate(const struct ls_sampling *s, char *err, size_t errlen);

struct ls_sampler *ls_sampler_new(const struct ls_sampling *s, int vocab);
void ls_sampler_free(struct ls_sampler *s);
/* logits[vocab] is modified in place (the logit bias, then the penalties). history: the tokens
 * so far (prompt and generated). */
int ls_sampler_sample(struct ls_sampler *s, float *logits, const int *history, int n_history);
/* The draw ls_sampler_sample would use next (it advances the generator the same way: nothing
 * at temperature 0), for a sampler that runs elsewhere: with ls_sample_with, the same tokens as
 * ls_sampler_sample when there are no penalties. */
double ls_sampler_uniform(struct ls_sampler *s);
/* the k-th number (k >= 1) that ls_sampler_uniform would return from here, without drawing
 * anything (0 where s is greedy) */
double ls_sampler_peek(const struct ls_sampler *s, int k);
/* the token ls_sampler_sample picks from logits without penalties, given its uniform draw u */
int ls_sample_with(const struct ls_sampling *p, const float *logits, int vocab, double u);
/* whether s has a penalty on (repetition, presence or frequency) */
int ls_sampling_penalized(const struct ls_sampling *s);
/* whether s changes the logits before the choice: a penalty, a logit bias or allowed tokens */
int ls_sampling_adjusted(const struct ls_sampling *s);
/* whether s has a logit bias or allowed tokens (what ls_sampling_apply_bias adds) */
int ls_sampling_biased(const struct ls_sampling *s);
/* Appends a token to s's allowed tokens: -1 with a message when the list is full or the id
 * negative */
int ls_sampling_add_allowed(struct ls_sampling *s, long id, char *err, size_t errlen);
/* Appends token id's bias to s's logit bias: -1 with a message when the list is full, the id
 * negative or already there, or the bias outside -100..100 */
int ls_sampling_add_bias(struct ls_sampling *s, long id, double bias, char *err, size_t errlen);
/* -1 with a message when s's logit bias or allowed tokens name a token outside [0, vocab) */
int ls_sampling_check_vocab(const struct ls_sampling *s, int vocab, char *err, size_t errlen);
/* Sets every logit but the allowed tokens' to -inf (when s has allowed tokens), then adds s's
 * logit bias, over logits[vocab] (ids past vocab: nothing). */
void ls_sampling_apply_bias(const struct ls_sampling *s, float *logits, int vocab);
/* index of the largest value, the lowest index on ties */
int ls_argmax(const float *x, int n);

#ifdef __cplusplus
}
#endif

#endif
