/* See sampler.h. The random stream is xoshiro256** seeded through splitmix64: one draw per
 * sampled token, nothing else consumes it, so runs are reproducible across machines. */
#include "config.h"
#include "sampler.h"
#include "ref.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ls_sampler {
    struct ls_sampling p;
    int vocab;
    uint64_t rng[4];
    int *idx;    /* [vocab] candidate ids */
    float *prob; /* [vocab] */
    int *count;  /* [vocab] occurrences in the penalty window */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t *s)
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* uniform in [0, 1) with 53 bits */
static double next_uniform(uint64_t *s)
{
    return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

void ls_sampling_defaults(struct ls_sampling *s)
{
    memset(s, 0, sizeof *s);
    s->temperature = 0.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
    s->seed = 0;
}

const struct ls_sampling_range ls_sampling_ranges[] = {
    [LS_TEMPERATURE] = {"temperature", 0, 100, 0},
    [LS_TOP_P] = {"top_p", 0, 1, 1},
    [LS_MIN_P] = {"min_p", 0, 1, 0},
    [LS_REPETITION_PENALTY] = {"repetition_penalty", 0, 100, 1},
    [LS_PRESENCE_PENALTY] = {"presence_penalty", -100, 100, 0},
    [LS_FREQUENCY_PENALTY] = {"frequency_penalty", -100, 100, 0},
    [LS_LOGIT_BIAS] = {"logit_bias", -100, 100, 0},
};

const char *ls_sampling_range_text(enum ls_sampling_param p, char *buf, size_t len)
{
    const struct ls_sampling_range *r = &ls_sampling_ranges[p];
    snprintf(buf, len, r->lo_open ? "a value in (%g, %g]" : "%g..%g", r->lo, r->hi);
    return buf;
}

/* 1 with the message when v is outside p's range (NaN is) */
static int out_of_range(enum ls_sampling_param p, float v, char *err, size_t errlen)
{
    const struct ls_sampling_range *r = &ls_sampling_ranges[p];
    if ((r->lo_open ? v > r->lo : v >= r->lo) && v <= r->hi) return 0;
    char range[64];
    snprintf(err, errlen, "%s: expected %s, found %.9g", r->field,
             ls_sampling_range_text(p, range, sizeof range), v);
    return 1;
}

/* 1 with the message when token id's logit bias b is outside its range (NaN is); b as given,
 * before it is narrowed to a float, so that a value past a float's range is named as it came */
static int bias_out_of_range(long id, double b, char *err, size_t errlen)
{
    const struct ls_sampling_range *r = &ls_sampling_ranges[LS_LOGIT_BIAS];
    if (b >= r->lo && b <= r->hi) return 0;
    char range[64];
    snprintf(err, errlen, "logit_bias of token %ld: expected %s, found %g", id,
             ls_sampling_range_text(LS_LOGIT_BIAS, range, sizeof range), b);
    return 1;
}

/* 1 with the message when v < 0 */
static int negative(const char *field, int v, char *err, size_t errlen)
{
    if (v >= 0) return 0;
    snprintf(err, errlen, "%s: expected >= 0, found %d", field, v);
    return 1;
}

int ls_sampling_validate(const struct ls_sampling *s, char *err, size_t errlen)
{
    if (out_of_range(LS_TEMPERATURE, s->temperature, err, errlen)) return -1;
    if (negative("top_k", s->top_k, err, errlen)) return -1;
    if (out_of_range(LS_TOP_P, s->top_p, err, errlen)) return -1;
    if (out_of_range(LS_MIN_P, s->min_p, err, errlen)) return -1;
    if (out_of_range(LS_REPETITION_PENALTY, s->repetition_penalty, err, errlen)) return -1;
    if (out_of_range(LS_PRESENCE_PENALTY, s->presence_penalty, err, errlen)) return -1;
    if (out_of_range(LS_FREQUENCY_PENALTY, s->frequency_penalty, err, errlen)) return -1;
    if (negative("penalty_last_n", s->penalty_last_n, err, errlen)) return -1;
    if (s->n_allowed < 0 || s->n_allowed > LS_MAX_ALLOWED_TOKENS) {
        snprintf(err, errlen, "allowed_token_ids: expected at most %d tokens, found %d",
                 LS_MAX_ALLOWED_TOKENS, s->n_allowed);
        return -1;
    }
    for (int i = 0; i < s->n_allowed; i++)
        if (s->allowed_id[i] < 0) {
            snprintf(err, errlen, "allowed_token_ids: expected token ids >= 0, found %d",
                     s->allowed_id[i]);
            return -1;
        }
    if (s->n_bias < 0 || s->n_bias > LS_MAX_LOGIT_BIAS) {
        snprintf(err, errlen, "logit_bias: expected at most %d tokens, found %d", LS_MAX_LOGIT_BIAS,
                 s->n_bias);
        return -1;
    }
    for (int i = 0; i < s->n_bias; i++) {
        if (s->bias_id[i] < 0) {
            snprintf(err, errlen, "logit_bias: expected token ids >= 0, found %d", s->bias_id[i]);
            return -1;
        }
        if (bias_out_of_range(s->bias_id[i], s->bias[i], err, errlen)) return -1;
    }
    return 0;
}

/* -1 with a message when the list named field, holding n of at most max tokens, cannot take
 * token id (full, or not an id) */
static int list_takes(const char *field, int n, int max, long id, char *err, size_t errlen)
{
    if (n >= max) {
        snprintf(err, errlen, "%s: at most %d tokens", field, max);
        return -1;
    }
    if (id < 0 || id > INT_MAX) {
        snprintf(err, errlen, "%s: expected a token id >= 0, found %ld", field, id);
        return -1;
    }
    return 0;
}

int ls_sampling_add_bias(struct ls_sampling *s, long id, double bias, char *err, size_t errlen)
{
    if (list_takes("logit_bias", s->n_bias, LS_MAX_LOGIT_BIAS, id, err, errlen)) return -1;
    for (int j = 0; j < s->n_bias; j++)
        if (s->bias_id[j] == id) {
            snprintf(err, errlen, "logit_bias: token %ld given twice", id);
            return -1;
        }
    if (bias_out_of_range(id, bias, err, errlen)) return -1;
    s->bias_id[s->n_bias] = (int)id;
    s->bias[s->n_bias++] = (float)bias;
    return 0;
}

struct ls_sampler *ls_sampler_new(const struct ls_sampling *p, int vocab)
{
    struct ls_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->vocab = vocab;
    s->idx = malloc((size_t)vocab * sizeof *s->idx);
    s->prob = malloc((size_t)vocab * sizeof *s->prob);
    s->count = calloc((size_t)vocab, sizeof *s->count);
    if (!s->idx || !s->prob || !s->count) {
        ls_sampler_free(s);
        return NULL;
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
}

void ls_sampler_free(struct ls_sampler *s)
{
    if (!s) return;
    free(s->idx);
    free(s->prob);
    free(s->count);
    free(s);
}

int ls_sampling_penalized(const struct ls_sampling *s)
{
    return s->repetition_penalty != 1.0f || s->presence_penalty != 0.0f ||
           s->frequency_penalty != 0.0f;
}

int ls_sampling_adjusted(const struct ls_sampling *s)
{
    return ls_sampling_penalized(s) || ls_sampling_biased(s);
}

int ls_sampling_biased(const struct ls_sampling *s)
{
    return s->n_bias > 0 || s->n_allowed > 0;
}

int ls_sampling_add_allowed(struct ls_sampling *s, long id, char *err, size_t errlen)
{
    if (list_takes("allowed_token_ids", s->n_allowed, LS_MAX_ALLOWED_TOKENS, id, err, errlen))
        return -1;
    s->allowed_id[s->n_allowed++] = (int)id;
    return 0;
}

int ls_sampling_check_vocab(const struct ls_sampling *s, int vocab, char *err, size_t errlen)
{
    for (int i = 0; i < s->n_bias; i++)
        if (s->bias_id[i] >= vocab) {
            snprintf(err, errlen, "logit_bias: token id %d is outside the vocabulary [0, %d)",
                     s->bias_id[i], vocab);
            return -1;
        }
    for (int i = 0; i < s->n_allowed; i++)
        if (s->allowed_id[i] >= vocab) {
            snprintf(err, errlen,
                     "allowed_token_ids: token id %d is outside the vocabulary [0, %d)",
                     s->allowed_id[i], vocab);
            return -1;
        }
    return 0;
}

void ls_sampling_apply_bias(const struct ls_sampling *s, float *logits, int vocab)
{
    if (s->n_allowed > 0) {
        unsigned char *keep = calloc((size_t)vocab, 1);
        if (!keep) abort();
        for (int i = 0; i < s->n_allowed; i++)
            if (s->allowed_id[i] < vocab) keep[s->allowed_id[i]] = 1;
        for (int v = 0; v < vocab; v++)
            if (!keep[v]) logits[v] = -INFINITY;
        free(keep);
    }
    for (int i = 0; i < s->n_bias; i++)
        if (s->bias_id[i] < vocab) logits[s->bias_id[i]] += s->bias[i];
}

int ls_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void apply_penalties(struct ls_sampler *s, float *logits, const int *hist, int n)
{
    const struct ls_sampling *p = &s->p;
    if (!ls_sampling_penalized(p)) return;
    int from = p->penalty_last_n > 0 && n > p->penalty_last_n ? n - p->penalty_last_n : 0;
    for (int i = from; i < n; i++)
        if (hist[i] >= 0 && hist[i] < s->vocab) s->count[hist[i]]++;
    for (int i = from; i < n; i++) {
        int t = hist[i];
        if (t < 0 || t >= s->vocab || s->count[t] == 0) continue;
        logits[t] = ls_penalised(logits[t], s->count[t], p->repetition_penalty, p->presence_penalty,
                                 p->frequency_penalty);
        s->count[t] = 0; /* once per distinct token; also leaves the counts zeroed */
    }
}

static int by_prob_desc(const void *a, const void *b, void *ctx)
{
    const float *prob = ctx;
    int ia = *(const int *)a, ib = *(const int *)b;
    if (prob[ia] > prob[ib]) return -1;
    if (prob[ia] < prob[ib]) return 1;
    return ia - ib; /* ties: lower id first, so the order is total and reproducible */
}

/* by_prob_desc's order of tokens a and b */
static int before(const float *prob, int a, int b)
{
    return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
}

/* idx[0..n) rearranged so that idx[0..k) holds the first k tokens in by_prob_desc's order (in no
 * order among themselves): Hoare's selection, expected O(n). The scans are bounded, so a NaN
 * (which the order cannot place) cannot run them off the array. */
static void select_first_k(int *idx, int n, int k, const float *prob)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int pv = idx[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (i <= hi && before(prob, idx[i], pv)) i++;
            while (j >= lo && before(prob, pv, idx[j])) j--;
            if (i <= j) {
                const int t = idx[i];
                idx[i++] = idx[j];
                idx[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* idx[0..n) = 0..n-1 in by_prob_desc's order, by a radix sort: probabilities are >= +0, so
 * their bits order as they do, and ~bits ascending is probability descending; each pass is
 * stable, so equal probabilities stay in id order. The order a comparison sort gives, in four
 * passes over the tokens (a comparison sort of 128K tokens takes milliseconds). */
static void sort_by_prob(int *idx, const float *prob, int n)
{
    uint32_t *key = malloc((size_t)n * sizeof *key), *key2 = malloc((size_t)n * sizeof *key2);
    int *idx2 = malloc((size_t)n * sizeof *idx2);
    if (!key || !key2 || !idx2) abort();
    for (int i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &prob[i], sizeof b);
        key[i] = ~b;
        idx[i] = i;
    }
    for (int shift = 0; shift < 32; shift += 8) {
        size_t count[257] = {0};
        for (int i = 0; i < n; i++) count[((key[i] >> shift) & 0xff) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int i = 0; i < n; i++) {
            const size_t o = count[(key[i] >> shift) & 0xff]++;
            key2[o] = key[i];
            idx2[o] = idx[i];
        }
        uint32_t *tk = key;
        key = key2, key2 = tk;
        int *ti = idx2;
        idx2 = idx, idx = ti;
    }
    /* four passes: the sorted ids are back in the caller's array */
    free(key);
    free(key2);
    free(idx2);
}

/* the token drawn with u in [0, 1) from logits (modified: the probabilities are not kept) at
 * p's temperature (> 0), top-k, top-p and min-p; idx and prob: scratch of V each */
static int pick(const struct ls_sampling *p, const float *logits, int V, double u, int *idx,
                float *prob)
{
    /* softmax at temperature over all tokens, in double for the sum */
    float mx = logits[ls_argmax(logits, V)];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        float e = expf((logits[i] - mx) / p->temperature);
        prob[i] = e;
        sum += e;
    }
    for (int i = 0; i < V; i++) prob[i] = (float)(prob[i] / sum);
    int n = V;
    if (p->top_k > 0 && p->top_k < n) {
        /* only the top k are ever read: select them, then sort those (the prefix the whole
         * vocabulary's order gives) */
        for (int i = 0; i < V; i++) idx[i] = i;
        select_first_k(idx, V, p->top_k, prob);
        n = p->top_k;
        qsort_r(idx, (size_t)n, sizeof *idx, by_prob_desc, prob);
    } else {
        sort_by_prob(idx, prob, V);
    }
    /* renormalise over the kept set before top-p, as HF's warpers see the filtered distribution */
    double kept = 0;
    for (int i = 0; i < n; i++) kept += prob[idx[i]];
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = 0;
        while (keep < n) {
            cum += prob[idx[keep]] / kept;
            keep++;
            if (cum >= p->top_p) break;
        }
        n = keep;
    }
    if (p->min_p > 0) {
        float floor = p->min_p * prob[idx[0]];
        int keep = 1;
        while (keep < n && prob[idx[keep]] >= floor) keep++;
        n = keep;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += prob[idx[i]];
    double x = u * total, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += prob[idx[i]];
        if (x < cum) return idx[i];
    }
    return idx[n - 1];
}

int ls_sampler_sample(struct ls_sampler *s, float *logits, const int *hist, int n_hist)
{
    ls_sampling_apply_bias(&s->p, logits, s->vocab);
    apply_penalties(s, logits, hist, n_hist);
    if (s->p.temperature == 0.0f) return ls_argmax(logits, s->vocab);
    return pick(&s->p, logits, s->vocab, next_uniform(s->rng), s->idx, s->prob);
}

double ls_sampler_uniform(struct ls_sampler *s)
{
    return s->p.temperature == 0.0f ? 0.0 : next_uniform(s->rng);
}

double ls_sampler_peek(const struct ls_sampler *s, int k)
{
    if (s->p.temperature == 0.0f) return 0.0;
    uint64_t r[4];
    memcpy(r, s->rng, sizeof r);
    double u = 0.0;
    for (int i = 0; i < k; i++) u = next_uniform(r);
    return u;
}

int ls_sample_with(const struct ls_sampling *p, const float *logits, int vocab, double u)
{
    if (p->temperature == 0.0f) return ls_argmax(logits, vocab);
    int *idx = malloc((size_t)vocab * sizeof *idx);
    float *prob = malloc((size_t)vocab * sizeof *prob);
    if (!idx || !prob) abort();
    int id = pick(p, logits, vocab, u, idx, prob);
    free(idx);
    free(prob);
    return id;
}
