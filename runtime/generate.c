/* See generate.h. Stop strings: generated text is held back while its tail could still be the
 * start of a stop string, so a stop string is never printed, even partly. */
#include "config.h"
#include "generate.h"
#include "kernels/ref.h"
#include "strbuf.h"
#include "check.h"
#include "log.h"
#include "tokenizer.h"

#include <jansson.h>
#include <unistd.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* LOCKSTEP_FAULT_DRILL=R:S makes rank R die (exit without MPI_Finalize) before decode step S,
 * R:S:hang makes it stop there for good (alive, never reaching the next all-reduce): the tests
 * that a rank lost or stuck mid-decode ends the whole job instead of leaving the others waiting
 * in the next all-reduce (the launcher sees the dead rank; the step watchdog the stuck one) */
static void fault_drill(int step)
{
    static int rank = -2, at = -1, hang;
    if (rank == -2) {
        const char *d = getenv("LOCKSTEP_FAULT_DRILL");
        char mode[8] = "";
        rank = -1;
        int k = d ? sscanf(d, "%d:%d:%7s", &rank, &at, mode) : 0;
        if (k < 2 || (k == 3 && strcmp(mode, "hang"))) rank = -1;
        hang = k == 3;
    }
    if (rank >= 0 && rank == ls_self_rank() && step == at) {
        fprintf(stderr, "lockstep: rank %d@%s: fault drill: %s before decode step %d\n", rank,
                ls_self_host(), hang ? "hanging" : "dying", step);
        fflush(stderr);
        if (hang)
            for (;;) pause();
        _exit(9);
    }
}

void ls_gen_defaults(struct ls_gen_params *p)
{
    memset(p, 0, sizeof *p);
    ls_sampling_defaults(&p->sampling);
    p->max_tokens = 256;
}

/* length of the longest suffix of text[0..n) that is a proper prefix of a stop string */
static size_t held_back(const char *text, size_t n, const struct ls_gen_params *p)
{
    size_t hold = 0;
    for (int i = 0; i < p->n_stops; i++) {
        size_t k = strlen(p->stops[i]);
        for (size_t len = k - 1; len > hold; len--)
            if (len <= n && !memcmp(text + n - len, p->stops[i], len)) {
                hold = len;
                break;
            }
    }
    return hold;
}

/* position of the first stop string in text, or -1 */
static long find_stop(const char *text, const struct ls_gen_params *p)
{
    long best = -1;
    for (int i = 0; i < p->n_stops; i++) {
        const char *at = strstr(text, p->stops[i]);
        if (at && (best < 0 || at - text < best)) best = at - text;
    }
    return best;
}

static int is_eos(const struct ls_model *m, int id)
{
    for (int i = 0; i < m->cfg.n_eos; i++)
        if (m->cfg.eos_ids[i] == id) return 1;
    return 0;
}

/* a token that ends the generation: the model's EOS (unless ignored) or one of the stop ids */
static int ends(const struct ls_model *m, const struct ls_gen_params *p, int id)
{
    if (!p->ignore_eos && is_eos(m, id)) return 1;
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == id) return 1;
    return 0;
}

/* before min_tokens: the tokens that would end the generation cannot be drawn (vLLM's
 * min_tokens), their logits -inf for the sampler */
static void mask_ends(const struct ls_model *m, const struct ls_gen_params *p, float *logits)
{
    if (!p->ignore_eos)
        for (int i = 0; i < m->cfg.n_eos; i++) logits[m->cfg.eos_ids[i]] = -INFINITY;
    for (int i = 0; i < p->n_stop_ids; i++) logits[p->stop_ids[i]] = -INFINITY;
}

static int by_logit_desc(const void *a, const void *b, void *ctx)
{
    const float *l = ctx;
    int ia = *(const int *)a, ib = *(const int *)b;
    if (l[ia] > l[ib]) return -1;
    if (l[ia] < l[ib]) return 1;
    return ia - ib;
}

static void record_top(struct ls_gen_result *r, const struct ls_gen_params *p, const float *logits,
                       int V)
{
    if (r->top_steps >= p->top_logit_steps || p->top_logits <= 0) return;
    int K = p->top_logits < V ? p->top_logits : V;
    int *idx = malloc((size_t)V * sizeof *idx);
    CHECK_ALLOC(idx);
    for (int i = 0; i < V; i++) idx[i] = i;
    qsort_r(idx, (size_t)V, sizeof *idx, by_logit_desc, (void *)logits);
    int *ids = r->top_ids + (size_t)r->top_steps * p->top_logits;
    float *vals = r->top_vals + (size_t)r->top_steps * p->top_logits;
    for (int k = 0; k < p->top_logits; k++) {
        ids[k] = k < K ? idx[k] : -1;
        vals[k] = k < K ? logits[idx[k]] : -INFINITY;
    }
    free(idx);
    r->top_steps++;
}

/* One position's log-probabilities (see ls_gen_result) from its scores: the target's into
 * *lp, and the N most likely tokens' into ids[0..N), vals[0..N), most likely first, ties lower
 * id first (-1 past the vocabulary) */
static void scores_logprobs(const struct ls_scores *s, int N, float *lp, int *ids, float *vals)
{
    *lp = (float)(s->target - s->lse);
    for (int k = 0; k < N; k++) {
        ids[k] = s->top_ids[k];
        vals[k] = ids[k] >= 0 ? (float)(s->top_logits[k] - s->lse) : -INFINITY;
    }
}

/* the same from a row of logits on the host (the row's scores as the backend takes them,
 * ref_row_logprobs), N <= LS_SCORE_TOP_MAX */
static void step_logprobs(const float *logits, int V, int id, int N, float *lp, int *ids,
                          float *vals)
{
    double o[LS_SCORE_W(LS_SCORE_TOP_MAX)], tv[LS_SCORE_TOP_MAX];
    int ti[LS_SCORE_TOP_MAX], head;
    struct ls_scores s;
    ref_row_logprobs(o, logits, 1, V, (size_t)V, &id, 0, N);
    ls_scores_combine(o, 1, 1, 1, 0, N, &s, &head, ti, tv);
    scores_logprobs(&s, N, lp, ids, vals);
}

/* the prompt's log-probabilities, position by position of the prefill */
struct prompt_lp {
    struct ls_gen_result *r;
    const struct ls_gen_params *p;
    const int *prompt;
    int n;
};

static void record_prompt_logprobs(void *ctx, int t, const struct ls_scores *s)
{
    struct prompt_lp *c = ctx;
    if (t + 1 >= c->n) return; /* the last position's logits are the first step's */
    const int N = c->p->top_prompt_logprobs;
    scores_logprobs(s, N, &c->r->plp[t], c->r->plp_ids + (size_t)t * N,
                    c->r->plp_vals + (size_t)t * N);
}

int ls_generate(struct ls_engine *e, struct ls_model *m, const int *prompt, int n_prompt,
                const struct ls_gen_params *p, struct ls_gen_result *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    const int V = m->cfg.vocab, max_ctx = ls_engine_max_ctx(e);
    if (n_prompt < 1) {
        snprintf(err, errlen, "the prompt is empty (no tokens)");
        return -1;
    }
    if (n_prompt >= max_ctx) {
        snprintf(err, errlen,
                 "the prompt has %d tokens but the context holds %d (--max-context): the prompt "
                 "and at least one generated token together; shorten the prompt or raise "
                 "--max-context",
                 n_prompt, max_ctx);
        return -1;
    }
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            snprintf(err, errlen, "prompt token %d: id %d is outside the vocabulary [0, %d)", i,
                     prompt[i], V);
            return -1;
        }
    if (p->min_tokens > p->max_tokens) {
        snprintf(err, errlen, "min_tokens %d is past max_tokens %d", p->min_tokens, p->max_tokens);
        return -1;
    }
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= V) {
            snprintf(err, errlen, "stop token %d: id %d is outside the vocabulary [0, %d)", i,
                     p->stop_ids[i], V);
            return -1;
        }
    if (ls_sampling_check_vocab(&p->sampling, V, err, errlen)) return -1;
    /* min_tokens masks the ending tokens: some allowed token must be left to choose */
    if (p->min_tokens > 0 && p->sampling.n_allowed > 0) {
        int open = 0;
        for (int i = 0; i < p->sampling.n_allowed && !open; i++)
            open = !ends(m, p, p->sampling.allowed_id[i]);
        if (!open) {
            snprintf(err, errlen,
                     "allowed_token_ids: every allowed token ends the generation, which "
                     "min_tokens %d forbids at the first step",
                     p->min_tokens);
            return -1;
        }
    }
    struct ls_sampler *smp = ls_sampler_new(&p->sampling, V);
    float *logits = malloc((size_t)V * sizeof *logits);
    int budget = p->max_tokens;
    if (budget > max_ctx - n_prompt) budget = max_ctx - n_prompt;
    int *hist = malloc((size_t)(n_prompt + budget + 1) * sizeof *hist);
    r->ids = malloc((size_t)(budget + 1) * sizeof *r->ids);
    CHECK_ALLOC(smp);
    CHECK_ALLOC(logits);
    CHECK_ALLOC(hist);
    CHECK_ALLOC(r->ids);
    float *raw = NULL; /* the step's logits before the sampler transforms them */
    if (p->logprobs) {
        r->lp = malloc((size_t)(budget + 1) * sizeof *r->lp);
        r->lp_ids = malloc((size_t)(budget + 1) * (p->top_logprobs + 1) * sizeof *r->lp_ids);
        r->lp_vals = malloc((size_t)(budget + 1) * (p->top_logprobs + 1) * sizeof *r->lp_vals);
        raw = malloc((size_t)V * sizeof *raw);
        CHECK_ALLOC(r->lp);
        CHECK_ALLOC(r->lp_ids);
        CHECK_ALLOC(r->lp_vals);
        CHECK_ALLOC(raw);
    }
    if (p->top_logits > 0 && p->top_logit_steps > 0) {
        r->top_ids = malloc((size_t)p->top_logits * p->top_logit_steps * sizeof *r->top_ids);
        r->top_vals = malloc((size_t)p->top_logits * p->top_logit_steps * sizeof *r->top_vals);
        CHECK_ALLOC(r->top_ids);
        CHECK_ALLOC(r->top_vals);
    }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    r->n_prompt = n_prompt;
    struct tok_stream *ts = m->tok ? tok_stream_new(m->tok, 1) : NULL;
    size_t piece_cap = m->tok ? tok_stream_max_out(m->tok) : 0;
    char *piece = malloc(piece_cap + 1);
    CHECK_ALLOC(piece);
    struct ls_strbuf text = {0};
    size_t emitted = 0; /* bytes of text already written to p->stream */
    int rc = 0;
    r->finish = "length";

    /* No logits are needed on the host: each step runs in the backend (a graph replay on
     * GPUs), the penalties are applied there (the backend keeps the window's counts; hist is
     * the history they start from), the token is chosen there (argmax, or drawn with the host's
     * next uniform, the one the host sampler would have used) and only it comes back, with its
     * log-probabilities where asked (taken in the step). The first token is chosen there too,
     * from the prefill's logits (ls_engine_choose), so that no step sorts the vocabulary on the
     * host. --top-logits takes the logits to the host and samples there.
     * LOCKSTEP_HOST_SAMPLING=1 forces the host path (for comparisons). */
    const struct ls_sampling *sp = &p->sampling;
    const char *hs = getenv("LOCKSTEP_HOST_SAMPLING");
    int device_step = (p->top_logits <= 0 || p->top_logit_steps <= 0) && !(hs && !strcmp(hs, "1"));
    const double start = ls_now_s();
    double t0 = start;
    struct ls_prefill_reuse *ru = p->reuse;
    int kept = 0; /* the logits are a kept copy: the backend's are another forward's */
    if (ru && ru->valid && ru->n_prompt == n_prompt && !p->prompt_logprobs &&
        ls_engine_rewind(e, n_prompt) == 0) {
        /* the prompt's cache as the first call left it, and its last logits */
        memcpy(logits, ru->logits, (size_t)V * sizeof *logits);
        kept = 1;
    } else if (p->prompt_logprobs) {
        ls_engine_reset(e);
        /* every position's scores, the last position's logits left in logits */
        const int N = p->top_prompt_logprobs;
        r->plp = malloc((size_t)n_prompt * sizeof *r->plp);
        r->plp_ids = malloc((size_t)n_prompt * (N + 1) * sizeof *r->plp_ids);
        r->plp_vals = malloc((size_t)n_prompt * (N + 1) * sizeof *r->plp_vals);
        CHECK_ALLOC(r->plp);
        CHECK_ALLOC(r->plp_ids);
        CHECK_ALLOC(r->plp_vals);
        struct prompt_lp c = {.r = r, .p = p, .prompt = prompt, .n = n_prompt};
        if (ls_engine_score(e, prompt, n_prompt, N, logits, record_prompt_logprobs, &c, err,
                            errlen) != 0) {
            rc = -1; /* err says why; nothing was generated */
            goto out;
        }
    } else {
        ls_engine_reset(e);
        ls_engine_forward(e, prompt, n_prompt, logits);
    }
    if (ru && !ru->valid) {
        memcpy(ru->logits, logits, (size_t)V * sizeof *logits);
        ru->n_prompt = n_prompt;
        ru->valid = 1;
    }
    r->prefill_s = ls_now_s() - t0;
    t0 = ls_now_s();
    int next = -1;
    /* a device step's token comes with its scores (logprobs: taken in the graph) */
    struct ls_scores next_sc = {0};
    int next_ids[LS_SCORE_TOP_MAX];
    double next_vals[LS_SCORE_TOP_MAX];
    int planned = 0; /* the decode calls to come announced (ls_engine_plan) */
    for (int step = 0; step < budget; step++) {
        fault_drill(step);
        /* the step's token: drawn in the backend by the previous step (a decode step); or
         * chosen by the backend from the logits of the forward before (the first step, from the
         * prefill's, and the steps before min_tokens, from a forward's with the ending tokens
         * masked out here first and the masked logits sent back); or here (the host path) */
        const int from_device = device_step && step > 0 && step >= p->min_tokens;
        int id;
        if (from_device) {
            id = next;
        } else {
            record_top(r, p, logits, V);
            if (raw) memcpy(raw, logits, (size_t)V * sizeof *raw);
            const int masked = step < p->min_tokens;
            if (masked) mask_ends(m, p, logits);
            if (!device_step) {
                id = ls_sampler_sample(smp, logits, hist, n_prompt + r->n_gen);
            } else if (ls_engine_choose(e, sp, ls_sampler_uniform(smp), hist,
                                        masked || (kept && step == 0) ? logits : NULL, &id) != 0) {
                ls_die(__FILE__, __LINE__, "ls_engine_choose", "no forward to choose after");
            }
        }
        if (step == 0) r->ttft_s = ls_now_s() - start;
        if (ends(m, p, id)) {
            r->finish = "stop";
            break;
        }
        if (p->logprobs) {
            const int N = p->top_logprobs;
            float *lp = &r->lp[r->n_gen], *vals = r->lp_vals + (size_t)r->n_gen * N;
            int *ids = r->lp_ids + (size_t)r->n_gen * N;
            if (from_device)
                scores_logprobs(&next_sc, N, lp, ids, vals);
            else
                step_logprobs(raw, V, id, N, lp, ids, vals);
        }
        r->ids[r->n_gen++] = id;
        hist[n_prompt + r->n_gen - 1] = id;
        if (ts) {
            int k = tok_stream_push(ts, id, piece, piece_cap);
            if (k > 0) ls_strbuf_put(&text, piece, (size_t)k);
            long stop = p->n_stops && text.p ? find_stop(text.p, p) : -1;
            if (stop >= 0) {
                text.n = (size_t)stop;
                text.p[stop] = 0;
                r->finish = "stop";
            }
            size_t ready = stop >= 0 ? text.n : text.n - held_back(text.p ? text.p : "", text.n, p);
            if (p->stream && ready > emitted) {
                fwrite(text.p + emitted, 1, ready - emitted, p->stream);
                fflush(p->stream);
                emitted = ready;
            }
            if (stop >= 0) break;
        }
        if (step + 1 == budget) break;
        if (device_step && step + 1 >= p->min_tokens) {
            /* from here every step is a decode call continuing the one before, up to the
             * budget */
            if (!planned) ls_engine_plan(e, budget - 1 - step, smp);
            planned = 1;
            if (ls_engine_decode_scored(e, id, sp, ls_sampler_uniform(smp), hist,
                                        p->logprobs ? p->top_logprobs : -1, &next, &next_sc,
                                        next_ids, next_vals) != 0)
                break; /* context full */
        } else if (ls_engine_forward(e, &id, 1, logits) != 0) {
            break; /* context full */
        }
    }
    r->decode_s = ls_now_s() - t0;
    if (ts) {
        if (strcmp(r->finish, "stop") || !p->n_stops) {
            int k = tok_stream_flush(ts, piece, piece_cap);
            if (k > 0) ls_strbuf_put(&text, piece, (size_t)k);
        }
        if (p->stream && text.n > emitted) fwrite(text.p + emitted, 1, text.n - emitted, p->stream);
        if (p->stream) fflush(p->stream);
    }
    r->text = text.p ? text.p : strdup("");
out:
    if (ts) tok_stream_free(ts);
    free(piece);
    free(hist);
    free(raw);
    free(logits);
    /* the plan ends with the request (a step issued ahead stays, for the next call to drop):
     * the engine must not peek smp once it is gone */
    ls_engine_plan(e, 0, NULL);
    ls_sampler_free(smp);
    if (rc != 0) {
        ls_gen_result_free(r);
        memset(r, 0, sizeof *r);
    }
    return rc;
}

/* {"id", "token", "logprob"} of one token */
static json_t *logprob_entry(const struct tokenizer *tok, int id, float lp)
{
    json_t *o = json_pack("{s:i, s:f}", "id", id, "logprob", (double)lp);
    CHECK_ALLOC(o);
    if (tok) {
        char buf[256], err[128];
        int32_t id32 = id;
        int n = tok_decode(tok, &id32, 1, 0, buf, sizeof buf, err, sizeof err);
        if (n >= 0) json_object_set_new(o, "token", json_string(buf));
    }
    return o;
}

/* {"id", "token", "logprob", "top_logprobs": [...]} of a position: id's log-probability lp,
 * the N most likely tokens' in ids[0..N), vals */
static json_t *position_entry(const struct tokenizer *tok, int id, float lp, const int *ids,
                              const float *vals, int N)
{
    json_t *e = logprob_entry(tok, id, lp), *top = json_array();
    CHECK_ALLOC(top);
    for (int k = 0; k < N && ids[k] >= 0; k++)
        json_array_append_new(top, logprob_entry(tok, ids[k], vals[k]));
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

json_t *ls_logprobs_json(const struct tokenizer *tok, const struct ls_gen_result *r,
                         const struct ls_gen_params *p)
{
    if (!p->logprobs || !r->lp) return NULL;
    json_t *content = json_array();
    CHECK_ALLOC(content);
    const int N = p->top_logprobs;
    for (int i = 0; i < r->n_gen; i++)
        json_array_append_new(content,
                              position_entry(tok, r->ids[i], r->lp[i], r->lp_ids + (size_t)i * N,
                                             r->lp_vals + (size_t)i * N, N));
    return json_pack("{s:o}", "content", content);
}

json_t *ls_prompt_logprobs_json(const struct tokenizer *tok, const int *prompt,
                                const struct ls_gen_result *r, const struct ls_gen_params *p)
{
    if (!p->prompt_logprobs || !r->plp) return NULL;
    json_t *list = json_array();
    CHECK_ALLOC(list);
    json_array_append_new(list, json_null());
    const int N = p->top_prompt_logprobs;
    for (int t = 1; t < r->n_prompt; t++)
        json_array_append_new(list, position_entry(tok, prompt[t], r->plp[t - 1],
                                                   r->plp_ids + (size_t)(t - 1) * N,
                                                   r->plp_vals + (size_t)(t - 1) * N, N));
    return list;
}

void ls_gen_result_free(struct ls_gen_result *r)
{
    free(r->ids);
    free(r->text);
    free(r->top_ids);
    free(r->top_vals);
    free(r->lp);
    free(r->lp_ids);
    free(r->lp_vals);
    free(r->plp);
    free(r->plp_ids);
    free(r->plp_vals);
    memset(r, 0, sizeof *r);
}
