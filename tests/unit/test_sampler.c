/* The sampler: greedy ties, each filter against its definition, penalties as Hugging Face
 * applies them, and reproducibility (same seed, same draws; other seed, other draws); and a
 * row's scores (ref_row_logprobs), which scoring takes instead of the logits. */
#include "config.h"
#include "cunit_tap.h"
#include "sampler.h"
#include "kernels/ref.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct ls_sampler *make(float temp, int top_k, float top_p, float min_p, uint64_t seed,
                               int V)
{
    struct ls_sampling s;
    ls_sampling_defaults(&s);
    s.temperature = temp;
    s.top_k = top_k;
    s.top_p = top_p;
    s.min_p = min_p;
    s.seed = seed;
    return ls_sampler_new(&s, V);
}

static void test_greedy_takes_the_lowest_id_on_ties(void)
{
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f};
    struct ls_sampler *s = make(0, 0, 1, 0, 1, 6);
    CU_ASSERT_EQUAL(ls_sampler_sample(s, l, NULL, 0), 1);
    ls_sampler_free(s);
    CU_ASSERT_EQUAL(ls_argmax(l, 6), 1);
}

static void test_top_k_one_is_greedy(void)
{
    srand(7);
    float l[100], c[100];
    for (int i = 0; i < 100; i++) l[i] = (float)rand() / RAND_MAX * 10;
    struct ls_sampler *s = make(1.5f, 1, 1, 0, 42, 100);
    for (int k = 0; k < 50; k++) {
        memcpy(c, l, sizeof l);
        CU_ASSERT_EQUAL(ls_sampler_sample(s, c, NULL, 0), ls_argmax(l, 100));
    }
    ls_sampler_free(s);
}

/* empirical frequencies match softmax(l / T) within 4 sigma */
static void test_temperature_matches_softmax(void)
{
    float l[4] = {1.0f, 2.0f, 0.5f, -1.0f}, c[4];
    const float T = 0.7f;
    double p[4], z = 0;
    for (int i = 0; i < 4; i++) z += p[i] = exp(l[i] / T);
    struct ls_sampler *s = make(T, 0, 1, 0, 123, 4);
    int counts[4] = {0}, N = 20000;
    for (int k = 0; k < N; k++) {
        memcpy(c, l, sizeof l);
        counts[ls_sampler_sample(s, c, NULL, 0)]++;
    }
    for (int i = 0; i < 4; i++) {
        double pi = p[i] / z, sd = sqrt(pi * (1 - pi) / N);
        CU_ASSERT(fabs((double)counts[i] / N - pi) < 4 * sd + 1e-9);
    }
    ls_sampler_free(s);
}

static void test_top_p_keeps_the_smallest_nucleus(void)
{
    /* probabilities 0.5, 0.3, 0.15, 0.05 at T = 1: top_p 0.75 keeps ids 0 and 1 only */
    float base[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)}, c[4];
    struct ls_sampler *s = make(1, 0, 0.75f, 0, 9, 4);
    int seen[4] = {0};
    for (int k = 0; k < 5000; k++) {
        memcpy(c, base, sizeof base);
        seen[ls_sampler_sample(s, c, NULL, 0)]++;
    }
    CU_ASSERT(seen[0] > 0 && seen[1] > 0);
    CU_ASSERT_EQUAL(seen[2], 0);
    CU_ASSERT_EQUAL(seen[3], 0);
    ls_sampler_free(s);
}

static void test_min_p_drops_unlikely_tokens(void)
{
    float base[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)}, c[4];
    struct ls_sampler *s = make(1, 0, 1, 0.2f, 11, 4); /* floor 0.1: drops id 3 */
    int seen[4] = {0};
    for (int k = 0; k < 5000; k++) {
        memcpy(c, base, sizeof base);
        seen[ls_sampler_sample(s, c, NULL, 0)]++;
    }
    CU_ASSERT(seen[2] > 0);
    CU_ASSERT_EQUAL(seen[3], 0);
    ls_sampler_free(s);
}

static void test_same_seed_same_draws_other_seed_other_draws(void)
{
    float l[50], c[50];
    for (int i = 0; i < 50; i++) l[i] = sinf((float)i);
    struct ls_sampler *a = make(1, 0, 1, 0, 5, 50), *b = make(1, 0, 1, 0, 5, 50),
                      *d = make(1, 0, 1, 0, 6, 50);
    int same = 1, differ = 0;
    for (int k = 0; k < 200; k++) {
        memcpy(c, l, sizeof l);
        int x = ls_sampler_sample(a, c, NULL, 0);
        memcpy(c, l, sizeof l);
        int y = ls_sampler_sample(b, c, NULL, 0);
        memcpy(c, l, sizeof l);
        int z = ls_sampler_sample(d, c, NULL, 0);
        same &= x == y;
        differ |= x != z;
    }
    CU_ASSERT_TRUE(same);
    CU_ASSERT_TRUE(differ);
    ls_sampler_free(a);
    ls_sampler_free(b);
    ls_sampler_free(d);
}

/* The split used by sampling inside the decode step: the host advances its generator with
 * ls_sampler_uniform and the backend picks with ls_sample_with; for every filter combination
 * the tokens are ls_sampler_sample's, and temperature 0 draws nothing. */
static void test_uniform_then_pick_equals_sample(void)
{
    enum { V = 300 };
    static const float cfg[][4] = {{0.7f, 0, 1.0f, 0},       {1.3f, 40, 1.0f, 0},
                                   {0.9f, 0, 0.8f, 0},       {1.0f, 0, 1.0f, 0.05f},
                                   {0.8f, 50, 0.95f, 0.02f}, {0, 0, 1.0f, 0}};
    float l[V], c[V];
    for (int i = 0; i < V; i++) l[i] = 3.0f * sinf(0.37f * (float)i) + 0.01f * (float)(i % 7);
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        struct ls_sampler *a = make(cfg[k][0], (int)cfg[k][1], cfg[k][2], cfg[k][3], 11, V);
        struct ls_sampler *b = make(cfg[k][0], (int)cfg[k][1], cfg[k][2], cfg[k][3], 11, V);
        struct ls_sampling p;
        ls_sampling_defaults(&p);
        p.temperature = cfg[k][0];
        p.top_k = (int)cfg[k][1];
        p.top_p = cfg[k][2];
        p.min_p = cfg[k][3];
        int same = 1, distinct = 0, first = -1;
        for (int step = 0; step < 100; step++) {
            memcpy(c, l, sizeof l);
            int x = ls_sampler_sample(a, c, NULL, 0);
            double u = ls_sampler_uniform(b);
            int y = ls_sample_with(&p, l, V, u);
            same &= x == y;
            if (first < 0) first = y;
            distinct |= y != first;
            if (p.temperature == 0.0f) CU_ASSERT_EQUAL(u, 0.0);
        }
        CU_ASSERT_TRUE(same);
        /* sampling configurations do draw different tokens over 100 steps; greedy does not */
        CU_ASSERT_EQUAL(distinct, p.temperature != 0.0f);
        ls_sampler_free(a);
        ls_sampler_free(b);
    }
}

/* ls_sampler_peek(s, k) is the k-th number ls_sampler_uniform returns from there, and draws
 * nothing (the steps issued ahead take their numbers so); 0 where greedy */
static void test_peek_is_the_kth_uniform_to_come(void)
{
    struct ls_sampler *a = make(0.8f, 0, 1.0f, 0, 21, 50), *g = make(0, 0, 1.0f, 0, 21, 50);
    for (int step = 0; step < 20; step++) {
        double ahead[4];
        for (int k = 1; k <= 4; k++) ahead[k - 1] = ls_sampler_peek(a, k);
        for (int k = 0; k < 4; k++) CU_ASSERT_EQUAL(ls_sampler_peek(a, k + 1), ahead[k]);
        const double u = ls_sampler_uniform(a); /* the first of them; the rest move up by one */
        CU_ASSERT_EQUAL(u, ahead[0]);
        for (int k = 1; k < 4; k++) CU_ASSERT_EQUAL(ls_sampler_peek(a, k), ahead[k]);
        CU_ASSERT_TRUE(ahead[0] != ahead[1]);
        CU_ASSERT_EQUAL(ls_sampler_peek(g, 1), 0.0);
    }
    ls_sampler_free(a);
    ls_sampler_free(g);
}

static void test_repetition_penalty_as_hugging_face(void)
{
    struct ls_sampling p;
    ls_sampling_defaults(&p);
    p.repetition_penalty = 2.0f;
    struct ls_sampler *s = ls_sampler_new(&p, 4);
    /* token 0 (positive logit) is divided, token 1 (negative) multiplied, once each though seen
     * twice */
    float l[4] = {3.0f, -1.0f, 2.9f, 1.0f};
    int hist[4] = {0, 1, 0, 1};
    CU_ASSERT_EQUAL(ls_sampler_sample(s, l, hist, 4), 2);
    CU_ASSERT_DOUBLE_EQUAL(l[0], 1.5, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(l[1], -2.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(l[3], 1.0, 1e-6);
    ls_sampler_free(s);
}

static void test_presence_and_frequency_penalties(void)
{
    struct ls_sampling p;
    ls_sampling_defaults(&p);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    struct ls_sampler *s = ls_sampler_new(&p, 3);
    float l[3] = {1.0f, 1.0f, 1.0f};
    int hist[3] = {2, 2, 1};
    ls_sampler_sample(s, l, hist, 3);
    CU_ASSERT_DOUBLE_EQUAL(l[0], 1.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(l[1], 1.0 - 0.5 - 0.25, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(l[2], 1.0 - 0.5 - 0.5, 1e-6);
    ls_sampler_free(s);
}

/* the logit bias is added before the penalties (vLLM's order, and transformers' sequence_bias
 * before its repetition penalty): (4 - 1) / 2, not 4 / 2 - 1; -100 on the largest logit makes
 * the next one the greedy choice; the add's checks */
static void test_logit_bias_before_the_penalties(void)
{
    struct ls_sampling p;
    char err[128];
    ls_sampling_defaults(&p);
    p.repetition_penalty = 2.0f;
    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 0, -1.0, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 7, 100.0, err, sizeof err), 0); /* past V: nothing */
    CU_ASSERT(ls_sampling_adjusted(&p) && p.n_bias == 2);
    struct ls_sampler *s = ls_sampler_new(&p, 3);
    float l[3] = {4.0f, 1.25f, 0.0f};
    int hist[1] = {0};
    CU_ASSERT_EQUAL(ls_sampler_sample(s, l, hist, 1), 0);
    CU_ASSERT_EQUAL(l[0], 1.5f);
    CU_ASSERT_EQUAL(l[1], 1.25f);
    ls_sampler_free(s);

    ls_sampling_defaults(&p);
    CU_ASSERT(!ls_sampling_adjusted(&p));
    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 2, -100.0, err, sizeof err), 0);
    s = ls_sampler_new(&p, 3);
    float m[3] = {0.5f, 1.0f, 90.0f};
    CU_ASSERT_EQUAL(ls_sampler_sample(s, m, hist, 1), 1);
    ls_sampler_free(s);

    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 2, 1.0, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "token 2 given twice"));
    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 3, 100.5, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "logit_bias of token 3: expected -100..100, found 100.5"));
    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, -1, 1.0, err, sizeof err), -1);
    CU_ASSERT_EQUAL(p.n_bias, 1);
    for (int i = 0; i < LS_MAX_LOGIT_BIAS - 1; i++)
        CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 10 + i, 0.5, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 5, 1.0, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "at most 1024 tokens"));
    CU_ASSERT_EQUAL(ls_sampling_validate(&p, err, sizeof err), 0);
    p.bias[3] = -101.0f;
    CU_ASSERT_EQUAL(ls_sampling_validate(&p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "logit_bias of token 12"));
}

/* allowed tokens: every other logit -inf, then the bias (a disallowed token stays out whatever
 * its bias), then the penalties; drawn tokens stay in the list; the list's checks */
static void test_allowed_tokens(void)
{
    struct ls_sampling p;
    char err[128];
    ls_sampling_defaults(&p);
    CU_ASSERT_EQUAL(ls_sampling_add_allowed(&p, 1, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ls_sampling_add_allowed(&p, 3, err, sizeof err), 0);
    CU_ASSERT(ls_sampling_adjusted(&p) && ls_sampling_biased(&p) && !ls_sampling_penalized(&p));
    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 0, 100.0, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, 3, -1.0, err, sizeof err), 0);
    p.repetition_penalty = 2.0f;
    float l[5] = {9.0f, 2.0f, 8.0f, 4.0f, -1.0f};
    int hist[1] = {3};
    struct ls_sampler *s = ls_sampler_new(&p, 5);
    CU_ASSERT_EQUAL(ls_sampler_sample(s, l, hist, 1), 1);
    CU_ASSERT(isinf(l[0]) && l[0] < 0 && isinf(l[2]) && isinf(l[4]));
    CU_ASSERT_EQUAL(l[1], 2.0f);
    CU_ASSERT_EQUAL(l[3], 1.5f); /* (4 - 1) / 2 */
    ls_sampler_free(s);

    p.temperature = 1.0f;
    p.repetition_penalty = 1.0f;
    s = ls_sampler_new(&p, 5);
    int outside = 0;
    for (int i = 0; i < 200; i++) {
        float m[5] = {3.0f, 0.5f, 3.0f, 0.0f, 3.0f};
        const int t = ls_sampler_sample(s, m, hist, 1);
        outside += t != 1 && t != 3;
    }
    CU_ASSERT_EQUAL(outside, 0);
    ls_sampler_free(s);

    CU_ASSERT_EQUAL(ls_sampling_check_vocab(&p, 4, err, sizeof err), 0);
    struct ls_sampling q;
    ls_sampling_defaults(&q);
    CU_ASSERT_EQUAL(ls_sampling_add_allowed(&q, 7, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ls_sampling_check_vocab(&q, 5, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "allowed_token_ids: token id 7 is outside the vocabulary"));
    CU_ASSERT_EQUAL(ls_sampling_add_allowed(&p, -2, err, sizeof err), -1);
    while (p.n_allowed < LS_MAX_ALLOWED_TOKENS)
        CU_ASSERT_EQUAL(ls_sampling_add_allowed(&p, p.n_allowed, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ls_sampling_add_allowed(&p, 5, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "at most 4096 tokens"));
}

static void test_penalty_window(void)
{
    struct ls_sampling p;
    ls_sampling_defaults(&p);
    p.presence_penalty = 1.0f;
    p.penalty_last_n = 2;
    struct ls_sampler *s = ls_sampler_new(&p, 3);
    float l[3] = {0, 0, 0};
    int hist[3] = {0, 1, 2}; /* only the last two count */
    ls_sampler_sample(s, l, hist, 3);
    CU_ASSERT_DOUBLE_EQUAL(l[0], 0.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(l[1], -1.0, 1e-6);
    ls_sampler_free(s);
}

/* the backend's penalties (ref_penalize: a window of counts carried from step to step, the
 * step's token in and the one last_n back out) against the sampler's (the window counted
 * from the history every step): the same penalised logits, bit for bit, over 60 steps of a
 * seeded random history of 5 ids, whole history and windows of 1, 3 and 10, each step's logits
 * fresh; without and with a logit bias (the backend's as a vector over the vocabulary, the
 * sampler's as its list) */
/* the next value of a seeded linear congruential stream (the tests' inputs) */
static uint64_t lcg(uint64_t *x)
{
    return *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
}

static void test_penalty_window_carried_as_the_sampler_counts_it(void)
{
    enum { V = 50, P = 9, STEPS = 60, CTX = P + STEPS };
    uint64_t x = 7;
    const int windows[] = {0, 1, 3, 10};
    for (size_t w = 0; w < 2 * sizeof windows / sizeof windows[0]; w++) {
        const int last_n = windows[w % 4], with_bias = w >= 4;
        struct ls_sampling p;
        char err[128];
        float bias[V] = {0};
        ls_sampling_defaults(&p);
        p.repetition_penalty = 1.25f;
        p.presence_penalty = 0.3f;
        p.frequency_penalty = 0.7f;
        p.penalty_last_n = last_n;
        for (int v = 0; with_bias && v < V; v += 4) {
            bias[v] = (float)((int)(lcg(&x) >> 40) % 401 - 200) / 8.0f;
            CU_ASSERT_EQUAL(ls_sampling_add_bias(&p, v, bias[v], err, sizeof err), 0);
        }
        struct ls_sampler *s = ls_sampler_new(&p, V);
        int seq[CTX], hist[CTX], count[V] = {0}, differ = 0, moved = 0;
        for (int i = 0; i < CTX; i++) seq[i] = (int)((lcg(&x) >> 33) % 5) * 11;
        const int from = last_n > 0 && P > last_n ? P - last_n : 0;
        for (int i = 0; i < P; i++) hist[i] = seq[i];
        for (int i = from; i < P; i++) count[seq[i]]++;
        for (int t = P; t < CTX; t++) {
            float l[V], mine[V];
            for (int v = 0; v < V; v++) l[v] = (float)((int)(lcg(&x) >> 40) % 2001 - 1000) / 137.0f;
            ref_penalize(mine, l, with_bias ? bias : NULL, V, count, hist, &seq[t], &t, last_n,
                         p.repetition_penalty, p.presence_penalty, p.frequency_penalty);
            for (int v = 0; v < V; v++) moved += mine[v] != l[v];
            ls_sampler_sample(s, l, seq, t + 1); /* greedy: penalises l in place */
            differ += memcmp(mine, l, sizeof l) != 0;
        }
        CU_ASSERT_EQUAL(differ, 0);
        CU_ASSERT(moved >= STEPS); /* the penalties acted at every step */
        ls_sampler_free(s);
    }
}

/* a draw as the sampler made it before selecting the top k and radix-sorting the rest: the
 * whole vocabulary sorted by comparisons (probability desc, id asc), then the same cuts and
 * walk; the reference for both */
static const float *g_prob;
static int prob_desc(const void *a, const void *b)
{
    const int ia = *(const int *)a, ib = *(const int *)b;
    if (g_prob[ia] != g_prob[ib]) return g_prob[ia] > g_prob[ib] ? -1 : 1;
    return ia - ib;
}
static int full_sort_pick(const float *l, int V, float temp, int k, float top_p, float min_p,
                          double u)
{
    float *prob = malloc((size_t)V * sizeof *prob), mx = l[ls_argmax(l, V)];
    int *idx = malloc((size_t)V * sizeof *idx), n = k > 0 ? k : V, keep = 0;
    double sum = 0, kept = 0, cum = 0, total = 0;
    for (int i = 0; i < V; i++) sum += prob[i] = expf((l[i] - mx) / temp);
    for (int i = 0; i < V; i++) prob[i] = (float)(prob[i] / sum), idx[i] = i;
    g_prob = prob;
    qsort(idx, (size_t)V, sizeof *idx, prob_desc);
    for (int i = 0; i < n; i++) kept += prob[idx[i]];
    if (top_p < 1.0f) {
        while (keep < n) {
            cum += prob[idx[keep]] / kept;
            keep++;
            if (cum >= top_p) break;
        }
        n = keep;
    }
    if (min_p > 0) {
        const float floor = min_p * prob[idx[0]];
        for (keep = 1; keep < n && prob[idx[keep]] >= floor;) keep++;
        n = keep;
    }
    for (int i = 0; i < n; i++) total += prob[idx[i]];
    int id = idx[n - 1];
    cum = 0;
    for (int i = 0; i < n; i++)
        if (u * total < (cum += prob[idx[i]])) {
            id = idx[i];
            break;
        }
    free(prob);
    free(idx);
    return id;
}

/* V logits of the stream x, uniform in [-2000, 2000] / div, rounded to halves where ties (many
 * equal probabilities) */
static void seeded_logits(float *l, int V, uint64_t *x, float div, int ties)
{
    for (int i = 0; i < V; i++) {
        l[i] = (float)((int)(lcg(x) >> 40) % 4001 - 2000) / div;
        if (ties) l[i] = roundf(l[i] * 2.0f) / 2.0f;
    }
}

/* draw j of 24 draws: spread across [0, 1), every fourth at its top (the last token kept) */
static double draw_u(int j)
{
    return j % 4 == 3 ? 1.0 - 1e-12 : (j + 0.5) / 24;
}

/* top-k draws from a selection of the top k and a sort of those alone: the full sort's tokens,
 * over logits with many ties (quantised) and without, k from 1 to V - 1, draws across [0, 1)
 * and at its top (which take the k-th token: the selection's last) */
static void test_top_k_selection_draws_as_the_full_sort(void)
{
    enum { V = 3001 };
    static float l[V];
    uint64_t x = 11;
    int differ = 0, draws = 0;
    for (int ties = 0; ties < 2; ties++) {
        seeded_logits(l, V, &x, 2000.0f, ties);
        const int ks[] = {1, 2, 7, 40, 500, V - 1};
        for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++)
            for (int j = 0; j < 24; j++) {
                struct ls_sampling p;
                ls_sampling_defaults(&p);
                p.temperature = 0.9f;
                p.top_k = ks[c];
                p.top_p = j % 8 == 1 ? 0.8f : 1.0f;
                const double u = draw_u(j);
                differ += ls_sample_with(&p, l, V, u) !=
                          full_sort_pick(l, V, p.temperature, p.top_k, p.top_p, 0.0f, u);
                draws++;
            }
    }
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT_EQUAL(draws, 288);
}

/* draws without top-k, whose order of the whole vocabulary is a radix sort: the comparison
 * sort's tokens, with ties and without, plain, with top-p and with min-p, across [0, 1) and at
 * its top (the last token of the order or of the kept set) */
static void test_radix_order_draws_as_the_full_sort(void)
{
    enum { V = 3001 };
    static float l[V];
    uint64_t x = 13;
    int differ = 0, draws = 0;
    for (int ties = 0; ties < 2; ties++) {
        seeded_logits(l, V, &x, 500.0f, ties);
        l[17] = -INFINITY; /* probability 0 */
        const float cuts[][2] = {
            {1.0f, 0.0f}, {0.9f, 0.0f}, {0.5f, 0.0f}, {1.0f, 0.05f}, {0.95f, 0.01f}};
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++)
            for (int j = 0; j < 24; j++) {
                struct ls_sampling p;
                ls_sampling_defaults(&p);
                p.temperature = j % 2 ? 0.7f : 1.3f;
                p.top_p = cuts[c][0];
                p.min_p = cuts[c][1];
                const double u = draw_u(j);
                differ += ls_sample_with(&p, l, V, u) !=
                          full_sort_pick(l, V, p.temperature, 0, p.top_p, p.min_p, u);
                draws++;
            }
    }
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT_EQUAL(draws, 240);
}

static void test_validation_names_the_field(void)
{
    struct ls_sampling p;
    char err[128];
    ls_sampling_defaults(&p);
    CU_ASSERT_EQUAL(ls_sampling_validate(&p, err, sizeof err), 0);
    p.top_p = 0;
    CU_ASSERT_EQUAL(ls_sampling_validate(&p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "top_p"));
    ls_sampling_defaults(&p);
    p.temperature = -1;
    CU_ASSERT_EQUAL(ls_sampling_validate(&p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "temperature"));
    ls_sampling_defaults(&p);
    p.repetition_penalty = 0;
    CU_ASSERT_EQUAL(ls_sampling_validate(&p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "repetition_penalty"));
}

/* a row's scores (ref_row_logprobs, what the CPU backend runs for ls_engine_score): a slice
 * of the vocabulary (tokens 10..15 in columns 0..5 of rows of 8), ties listed lower id first,
 * targets inside and outside the slice, a list longer than the slice padded */
static void test_row_scores_of_a_slice(void)
{
    const float l[16] = {1,  3,  3, -2, 0.5f, 3, 99, 99, /* columns 6, 7: past the slice */
                         -1, -1, 4, 2,  -1,   4, 99, 99};
    const int tg[2] = {14, 16}, W = 3 + 2 * 8;
    double o[2 * (3 + 2 * 8)];
    ref_row_logprobs(o, l, 2, 6, 8, tg, 10, 8);
    double sum = 0.0;
    for (int i = 0; i < 6; i++) sum += exp((double)l[i] - 3.0);
    CU_ASSERT_EQUAL(o[0], 3.0);
    CU_ASSERT_EQUAL(o[1], sum);
    CU_ASSERT_EQUAL(o[2], 0.5);
    const double vals[8] = {3, 3, 3, 1, 0.5, -2, -INFINITY, -INFINITY},
                 ids[8] = {11, 12, 15, 10, 14, 13, -1, -1};
    for (int k = 0; k < 8; k++) {
        CU_ASSERT_EQUAL(o[3 + k], vals[k]);
        CU_ASSERT_EQUAL(o[3 + 8 + k], ids[k]);
    }
    const double *o1 = o + W; /* row 1: target 16 is past the slice; 4 at 12 and 15 */
    CU_ASSERT_EQUAL(o1[0], 4.0);
    CU_ASSERT(isinf(o1[2]) && o1[2] < 0);
    CU_ASSERT_EQUAL(o1[3 + 8], 12.0);
    CU_ASSERT_EQUAL(o1[3 + 8 + 1], 15.0);
    CU_ASSERT_EQUAL(o1[3 + 2], 2.0);
    double two[3 + 2 * 2];
    const int none = -1;
    ref_row_logprobs(two, l, 1, 6, 8, &none, 10, 2); /* N = 2: the first two of the ties */
    CU_ASSERT(isinf(two[2]) && two[2] < 0);
    CU_ASSERT_EQUAL(two[3 + 2], 11.0);
    CU_ASSERT_EQUAL(two[3 + 3], 12.0);
}

/* the row cut into tp slices as the shard plan cuts the vocabulary (uneven at the end), each
 * slice's pairs summed into one array as the all-reduce sums them: the token */
static int pick_over_slices(const float *x, int n, int tp)
{
    float sum[2 * 8] = {0}, pairs[2 * 8];
    const int per = (n + tp - 1) / tp;
    for (int r = 0; r < tp; r++) {
        const int first = r * per < n ? r * per : n, rows = first + per <= n ? per : n - first;
        ref_argmax_pairs(pairs, x + first, rows, first, r, tp);
        for (int i = 0; i < 2 * tp; i++) {
            if (i / 2 != r) CU_ASSERT_EQUAL(pairs[i], 0.0f); /* every other slot 0 */
            sum[i] += pairs[i];
        }
    }
    return ref_argmax_pick(sum, tp);
}

/* the greedy choice from the ranks' slices (the tensor-parallel decode step without the
 * logits' all-gather) is the whole row's argmax: random rows, ties within and across slices,
 * -inf, NaN, a slice of NaN only */
static void test_argmax_over_slices_is_the_row_argmax(void)
{
    srand(11);
    float x[1000];
    for (int it = 0; it < 200; it++) {
        const int n = 1 + rand() % 1000, tp = 1 + rand() % 8;
        for (int i = 0; i < n; i++) x[i] = (float)(rand() % 50) - 25.0f; /* many ties */
        if (it % 3 == 0) x[rand() % n] = -INFINITY;
        if (it % 5 == 0) x[rand() % n] = NAN;
        int best = -1; /* the lowest id of the largest value, NaN never */
        for (int i = 0; i < n; i++)
            if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
        CU_ASSERT_EQUAL(pick_over_slices(x, n, tp), best < 0 ? 0 : best);
    }
    /* ties across slices: the lowest id wins, whichever slice holds it */
    const float t[6] = {1, 7, 2, 7, 3, 7};
    for (int tp = 1; tp <= 6; tp++) CU_ASSERT_EQUAL(pick_over_slices(t, 6, tp), 1);
    /* -inf only: id 0; a first slice of NaN only: the next slice's largest */
    const float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CU_ASSERT_EQUAL(pick_over_slices(m, 4, 2), 0);
    const float q[4] = {NAN, NAN, -3, -INFINITY};
    CU_ASSERT_EQUAL(pick_over_slices(q, 4, 2), 2);
    float pairs[4];
    ref_argmax_pairs(pairs, q, 2, 0, 0, 2);
    CU_ASSERT(pairs[0] == 0.0f && pairs[1] == -1.0f); /* nothing: (0, -1) */
    const float nan4[4] = {NAN, NAN, NAN, NAN};
    CU_ASSERT_EQUAL(pick_over_slices(nan4, 4, 2), 0);
    /* ids as floats are exact up to 2^24 */
    const float big[2] = {1, 2};
    ref_argmax_pairs(pairs, big, 2, LS_ARGMAX_PAIRS_MAX_ID - 2, 1, 2);
    CU_ASSERT_EQUAL(ref_argmax_pick(pairs, 2), LS_ARGMAX_PAIRS_MAX_ID - 1);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("sampler", NULL, NULL);
    CU_add_test(s, "greedy takes the lowest id on ties", test_greedy_takes_the_lowest_id_on_ties);
    CU_add_test(s, "top-k 1 is greedy at any temperature", test_top_k_one_is_greedy);
    CU_add_test(s, "temperature sampling matches softmax(l/T)", test_temperature_matches_softmax);
    CU_add_test(s, "top-p keeps the smallest nucleus", test_top_p_keeps_the_smallest_nucleus);
    CU_add_test(s, "min-p drops tokens below min_p * p_max", test_min_p_drops_unlikely_tokens);
    CU_add_test(s, "same seed same draws, other seed other draws",
                test_same_seed_same_draws_other_seed_other_draws);
    CU_add_test(s, "host draw + backend pick equals the sampler",
                test_uniform_then_pick_equals_sample);
    CU_add_test(s, "peek gives the k-th number to come and draws nothing",
                test_peek_is_the_kth_uniform_to_come);
    CU_add_test(s, "repetition penalty as Hugging Face", test_repetition_penalty_as_hugging_face);
    CU_add_test(s, "presence and frequency penalties", test_presence_and_frequency_penalties);
    CU_add_test(s, "penalties look back over repeat-last-n", test_penalty_window);
    CU_add_test(s, "the logit bias comes before the penalties",
                test_logit_bias_before_the_penalties);
    CU_add_test(s, "allowed tokens only, bias and penalties after", test_allowed_tokens);
    CU_add_test(s, "the backend's carried window penalises as the sampler",
                test_penalty_window_carried_as_the_sampler_counts_it);
    CU_add_test(s, "top-k draws from a selection as from the full sort",
                test_top_k_selection_draws_as_the_full_sort);
    CU_add_test(s, "draws over the radix order as over the full sort",
                test_radix_order_draws_as_the_full_sort);
    CU_add_test(s, "validation names the field", test_validation_names_the_field);
    CU_add_test(s, "a row's scores over a vocabulary slice", test_row_scores_of_a_slice);
    CU_add_test(s, "the greedy choice from the ranks' slices is the row's argmax",
                test_argmax_over_slices_is_the_row_argmax);
    return ls_cunit_run_tap();
}
