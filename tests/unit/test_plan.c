/* Unit tests of the shard plan (shard/plan.c). Every plan, fixed or random, goes through one
 * invariant checker written from the spec, not from plan.c: each query head on exactly one rank,
 * each KV head on exactly kv_replicas ranks, a rank's query heads inside its KV groups, ranges
 * contiguous and covering the axes, block boundaries, balance within one unit, and byte sizes
 * recomputed term by term. Shard arrays are poisoned before planning so an unwritten field is
 * caught, and a sentinel after the last shard catches a write past tp. Random shapes use a fixed
 * seed; a failing shape is printed as a TAP comment. */
#include "config.h"
#include "cunit_tap.h"
#include "plan.h"

#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK  64
#define MAX_TP 256

static struct ls_plan_input shape(int heads, int kv_heads, int head_dim, int dim, int ffn,
                                  int vocab, int layers, int tp)
{
    struct ls_plan_input in = {
        .heads = heads,
        .kv_heads = kv_heads,
        .head_dim = head_dim,
        .dim = dim,
        .ffn = ffn,
        .vocab = vocab,
        .layers = layers,
        .tp = tp,
        .weight_bytes = 2,
        .kv_bytes = 2,
    };
    return in;
}

/* the spec's rule for TP sizes, independent of plan.c */
static int oracle_tp_ok(const struct ls_plan_input *in, int tp)
{
    int H = in->heads, K = in->kv_heads;
    if (tp < 1 || H % K != 0 || tp > H) return 0;
    if (tp > K && tp % K != 0) return 0;
    if (tp > (in->ffn + BLOCK - 1) / BLOCK) return 0;
    if (!in->lm_head_replicated && tp > (in->vocab + BLOCK - 1) / BLOCK) return 0;
    return 1;
}

/* weights of one rank, term by term as the issue lists them */
static void oracle_bytes(const struct ls_plan_input *in, const struct ls_shard *s, size_t *layer,
                         size_t *total, size_t *kv)
{
    size_t D = (size_t)in->dim, E = (size_t)in->head_dim;
    size_t wq = (size_t)s->q_heads * E * D;
    size_t wk = (size_t)s->kv_heads * E * D, wv = wk;
    size_t wo = D * (size_t)s->q_heads * E;
    size_t gate_up = 2 * (size_t)s->ffn_cols * D, down = D * (size_t)s->ffn_cols;
    size_t norms = 2 * D;
    size_t bias = in->qkv_bias ? (size_t)s->q_heads * E + 2 * (size_t)s->kv_heads * E : 0;
    size_t qkn = in->qk_norm ? 2 * E : 0;
    size_t per_layer = wq + wk + wv + wo + gate_up + down + norms + bias + qkn;
    size_t embed = (size_t)in->vocab * D, final_norm = D;
    size_t lm_head = in->tied ? 0 : (size_t)s->vocab_rows * D;
    *layer = per_layer * (size_t)in->weight_bytes;
    *total =
        (per_layer * (size_t)in->layers + embed + final_norm + lm_head) * (size_t)in->weight_bytes;
    *kv = 2 * (size_t)in->layers * (size_t)s->kv_heads * E * (size_t)in->kv_bytes;
}

static char why[512];

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(why, sizeof why, __VA_ARGS__);                                                    \
        return why;                                                                                \
    } while (0)

/* a blocked axis [0, n) split over tp ranks by (first, count) pairs */
static const char *check_blocked(const char *what, int n, int tp, const int *first,
                                 const int *count)
{
    int min_blocks = INT32_MAX, max_blocks = 0, next = 0;
    for (int r = 0; r < tp; r++) {
        if (first[r] != next)
            FAIL("%s: rank %d starts at %d, expected %d", what, r, first[r], next);
        if (first[r] % BLOCK)
            FAIL("%s: rank %d starts at %d, not a block boundary", what, r, first[r]);
        if (count[r] <= 0) FAIL("%s: rank %d holds %d", what, r, count[r]);
        if (r < tp - 1 && count[r] % BLOCK)
            FAIL("%s: rank %d holds %d, not whole blocks", what, r, count[r]);
        int b = (count[r] + BLOCK - 1) / BLOCK;
        if (b < min_blocks) min_blocks = b;
        if (b > max_blocks) max_blocks = b;
        next = first[r] + count[r];
    }
    if (next != n) FAIL("%s: ranges end at %d, expected %d", what, next, n);
    /* the last rank's partial block counts as one: a rank may have one block less, never more */
    if (max_blocks - min_blocks > 1)
        FAIL("%s: ranks hold %d to %d blocks", what, min_blocks, max_blocks);
    return NULL;
}

/* NULL if the plan obeys every invariant, else the first violation */
static const char *check_plan(const struct ls_plan_input *in, const struct ls_shard *s)
{
    int H = in->heads, K = in->kv_heads, N = in->tp, G = H / K;
    int R = N <= K ? 1 : N / K;
    static int q_count[4096], kv_count[4096];
    static int f_first[MAX_TP], f_count[MAX_TP];
    if (H > 4096 || N > MAX_TP) FAIL("test limits exceeded");
    memset(q_count, 0, sizeof q_count);
    memset(kv_count, 0, sizeof kv_count);
    int qmin = H, qmax = 0, kvmin = K, kvmax = 0;
    for (int r = 0; r < N; r++) {
        const struct ls_shard *x = &s[r];
        if (x->rank != r) FAIL("shard %d says rank %d", r, x->rank);
        if (x->q_heads <= 0 || x->q_first < 0 || x->q_first + x->q_heads > H)
            FAIL("rank %d: q heads [%d,+%d) outside [0,%d)", r, x->q_first, x->q_heads, H);
        if (x->kv_heads <= 0 || x->kv_first < 0 || x->kv_first + x->kv_heads > K)
            FAIL("rank %d: kv heads [%d,+%d) outside [0,%d)", r, x->kv_first, x->kv_heads, K);
        if (x->kv_replicas != R) FAIL("rank %d: kv_replicas %d, expected %d", r, x->kv_replicas, R);
        for (int q = x->q_first; q < x->q_first + x->q_heads; q++) {
            q_count[q]++;
            int g = q / G;
            if (g < x->kv_first || g >= x->kv_first + x->kv_heads)
                FAIL("rank %d holds q head %d of kv head %d but kv heads [%d,%d)", r, q, g,
                     x->kv_first, x->kv_first + x->kv_heads);
        }
        for (int k = x->kv_first; k < x->kv_first + x->kv_heads; k++) kv_count[k]++;
        /* a rank holds every query head of its KV heads unless the KV head is replicated */
        if (R == 1 && x->q_heads != x->kv_heads * G)
            FAIL("rank %d: %d q heads for %d whole kv groups of %d", r, x->q_heads, x->kv_heads, G);
        if (r > 0 && x->q_first != s[r - 1].q_first + s[r - 1].q_heads)
            FAIL("rank %d: q heads start at %d, not where rank %d's end", r, x->q_first, r - 1);
        if (r > 0 && R == 1 && x->kv_first != s[r - 1].kv_first + s[r - 1].kv_heads)
            FAIL("rank %d: kv heads start at %d, not where rank %d's end", r, x->kv_first, r - 1);
        if (x->q_heads < qmin) qmin = x->q_heads;
        if (x->q_heads > qmax) qmax = x->q_heads;
        if (x->kv_heads < kvmin) kvmin = x->kv_heads;
        if (x->kv_heads > kvmax) kvmax = x->kv_heads;

        size_t layer, total, kv;
        oracle_bytes(in, x, &layer, &total, &kv);
        if (x->weight_bytes_layer != layer)
            FAIL("rank %d: weight_bytes_layer %zu, expected %zu", r, x->weight_bytes_layer, layer);
        if (x->weight_bytes != total)
            FAIL("rank %d: weight_bytes %zu, expected %zu", r, x->weight_bytes, total);
        if (x->kv_bytes_token != kv)
            FAIL("rank %d: kv_bytes_token %zu, expected %zu", r, x->kv_bytes_token, kv);
    }
    for (int q = 0; q < H; q++)
        if (q_count[q] != 1) FAIL("q head %d held by %d ranks", q, q_count[q]);
    for (int k = 0; k < K; k++)
        if (kv_count[k] != R) FAIL("kv head %d held by %d ranks, expected %d", k, kv_count[k], R);
    if (R == 1 && kvmax - kvmin > 1) FAIL("ranks hold %d to %d kv heads", kvmin, kvmax);
    if (R > 1 && qmax - qmin > 1) FAIL("ranks hold %d to %d q heads", qmin, qmax);

    for (int r = 0; r < N; r++) f_first[r] = s[r].ffn_first, f_count[r] = s[r].ffn_cols;
    const char *bad = check_blocked("ffn", in->ffn, N, f_first, f_count);
    if (bad) return bad;
    if (in->lm_head_replicated) {
        for (int r = 0; r < N; r++)
            if (s[r].vocab_first != 0 || s[r].vocab_rows != in->vocab)
                FAIL("rank %d: replicated LM head holds [%d,+%d), expected [0,%d)", r,
                     s[r].vocab_first, s[r].vocab_rows, in->vocab);
    } else {
        for (int r = 0; r < N; r++) f_first[r] = s[r].vocab_first, f_count[r] = s[r].vocab_rows;
        bad = check_blocked("vocab", in->vocab, N, f_first, f_count);
        if (bad) return bad;
    }
    return NULL;
}

static void describe(const struct ls_plan_input *in)
{
    printf("# shape H=%d K=%d E=%d D=%d F=%d V=%d L=%d tp=%d wb=%d kvb=%d tied=%d bias=%d "
           "qknorm=%d lmrep=%d\n",
           in->heads, in->kv_heads, in->head_dim, in->dim, in->ffn, in->vocab, in->layers, in->tp,
           in->weight_bytes, in->kv_bytes, in->tied, in->qkv_bias, in->qk_norm,
           in->lm_head_replicated);
}

/* plans in into a poisoned array with a sentinel, checks it; returns 0 if all is well */
static int plan_and_check(const struct ls_plan_input *in, struct ls_shard *out)
{
    static struct ls_shard buf[MAX_TP + 1];
    char err[512] = "";
    memset(buf, 0xA5, sizeof buf);
    struct ls_shard sentinel;
    memset(&sentinel, 0xA5, sizeof sentinel);
    if (ls_plan_make(in, buf, err, sizeof err) != 0) {
        describe(in);
        printf("# unexpected error: %s\n", err);
        return -1;
    }
    if (memcmp(&buf[in->tp], &sentinel, sizeof sentinel) != 0) {
        describe(in);
        printf("# ls_plan_make wrote past shard tp-1\n");
        return -1;
    }
    const char *bad = check_plan(in, buf);
    if (bad) {
        describe(in);
        printf("# %s\n", bad);
        return -1;
    }
    for (int r = 0; r < in->tp; r++) {
        struct ls_shard one;
        memset(&one, 0x5A, sizeof one);
        if (ls_plan_for_rank(in, r, &one, err, sizeof err) != 0 ||
            memcmp(&one, &buf[r], sizeof one) != 0) {
            describe(in);
            printf("# ls_plan_for_rank(%d) differs from ls_plan_make\n", r);
            return -1;
        }
    }
    if (out) memcpy(out, buf, sizeof(struct ls_shard) * (size_t)in->tp);
    return 0;
}

/* expects failure; returns the message (static) or NULL if it succeeded */
static const char *plan_error(const struct ls_plan_input *in)
{
    static struct ls_shard buf[MAX_TP];
    static char err[512];
    err[0] = 0;
    if (ls_plan_make(in, buf, err, sizeof err) == 0) return NULL;
    return err;
}

/* ------------------------------------------------------------------ fixed shapes ---- */

static void test_llama8b_shape_at_every_tp_up_to_8(void)
{
    for (int n = 1; n <= 8; n++) {
        struct ls_plan_input in = shape(32, 8, 128, 4096, 14336, 128256, 32, n);
        CU_ASSERT_EQUAL(plan_and_check(&in, NULL), 0);
    }
    struct ls_shard s[8];
    struct ls_plan_input in = shape(32, 8, 128, 4096, 14336, 128256, 32, 3);
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    /* 8 groups over 3 ranks: 3 + 3 + 2 */
    CU_ASSERT_EQUAL(s[0].kv_heads, 3);
    CU_ASSERT_EQUAL(s[1].kv_heads, 3);
    CU_ASSERT_EQUAL(s[2].kv_heads, 2);
    CU_ASSERT_EQUAL(s[2].q_first, 24);
    CU_ASSERT_EQUAL(s[2].q_heads, 8);
}

static void test_llama8b_tp8_bytes_match_published_parameter_count(void)
{
    /* Llama-3.1-8B has 8,030,261,248 parameters (untied, no biases) */
    struct ls_plan_input in = shape(32, 8, 128, 4096, 14336, 128256, 32, 1);
    CU_ASSERT_EQUAL(ls_plan_unsharded_bytes(&in), (size_t)2 * 8030261248u);
    in.tp = 8;
    struct ls_shard s[8];
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    for (int r = 0; r < 8; r++) {
        CU_ASSERT_EQUAL(s[r].q_heads, 4);
        CU_ASSERT_EQUAL(s[r].kv_heads, 1);
        CU_ASSERT_EQUAL(s[r].ffn_cols, 1792);
        /* 2004 vocab blocks over 8 ranks: 251 on the first four, 250 on the others */
        CU_ASSERT_EQUAL(s[r].vocab_rows, r < 4 ? 16064 : 16000);
        /* 32 layers of 27,271,168 + embedding 525,336,576 + final norm 4096 + LM head rows */
        CU_ASSERT_EQUAL(s[r].weight_bytes, (size_t)2 * (r < 4 ? 1463816192u : 1463554048u));
        CU_ASSERT_EQUAL(s[r].kv_bytes_token, 16384u);
    }
}

static void test_smollm2_shape_uneven_groups_and_replicas(void)
{
    struct ls_shard s[6];
    struct ls_plan_input in = shape(9, 3, 64, 576, 1536, 49152, 30, 1);
    in.tied = 1;
    /* SmolLM2-135M has 134,515,008 parameters (tied embeddings) */
    CU_ASSERT_EQUAL(ls_plan_unsharded_bytes(&in), (size_t)2 * 134515008u);
    int sizes[] = {1, 2, 3, 6};
    for (int i = 0; i < 4; i++) {
        in.tp = sizes[i];
        CU_ASSERT_EQUAL(plan_and_check(&in, NULL), 0);
    }
    in.tp = 2; /* 2 groups + 1 group */
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    CU_ASSERT(s[0].q_first == 0 && s[0].q_heads == 6 && s[0].kv_first == 0 && s[0].kv_heads == 2);
    CU_ASSERT(s[1].q_first == 6 && s[1].q_heads == 3 && s[1].kv_first == 2 && s[1].kv_heads == 1);
    CU_ASSERT(s[0].ffn_cols == 768 && s[1].ffn_first == 768);
    CU_ASSERT(s[0].vocab_rows == 24576 && s[1].vocab_first == 24576);
    in.tp = 6; /* each KV head on 2 ranks, its 3 query heads split 2 + 1 */
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    int q_first[] = {0, 2, 3, 5, 6, 8}, q_heads[] = {2, 1, 2, 1, 2, 1};
    for (int r = 0; r < 6; r++) {
        CU_ASSERT_EQUAL(s[r].q_first, q_first[r]);
        CU_ASSERT_EQUAL(s[r].q_heads, q_heads[r]);
        CU_ASSERT_EQUAL(s[r].kv_first, r / 2);
        CU_ASSERT_EQUAL(s[r].kv_replicas, 2);
    }
    /* 24 FFN blocks over 6 ranks: 4 each */
    CU_ASSERT_EQUAL(s[5].ffn_first, 1280);
    CU_ASSERT_EQUAL(s[5].ffn_cols, 256);
}

static void test_tp_7_for_14_heads_2_kv_fails_listing_valid_sizes(void)
{
    struct ls_plan_input in = shape(14, 2, 64, 896, 4864, 151936, 24, 2);
    CU_ASSERT_EQUAL(plan_and_check(&in, NULL), 0);
    in.tp = 4; /* each KV head on 2 ranks, 7 query heads split 4 + 3 */
    struct ls_shard s[4];
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    CU_ASSERT(s[0].q_heads == 4 && s[1].q_heads == 3 && s[2].q_first == 7);
    in.tp = 7;
    const char *err = plan_error(&in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tp 7"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "valid tp sizes: 1, 2, 4, 6, 8, 10, 12, 14"));
    int sizes[16];
    CU_ASSERT_EQUAL(ls_plan_valid_tp(&in, sizes, 16), 8);
    CU_ASSERT(sizes[0] == 1 && sizes[1] == 2 && sizes[2] == 4 && sizes[7] == 14);
}

static void test_64_heads_8_kv_at_tp16_replicates_each_kv_head_twice(void)
{
    struct ls_plan_input in = shape(64, 8, 128, 8192, 28672, 128256, 80, 16);
    struct ls_shard s[16];
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    for (int r = 0; r < 16; r++) {
        CU_ASSERT_EQUAL(s[r].q_heads, 4);
        CU_ASSERT_EQUAL(s[r].kv_first, r / 2);
        CU_ASSERT_EQUAL(s[r].kv_replicas, 2);
    }
}

static void test_40_kv_heads_over_3_ranks_split_14_13_13(void)
{
    struct ls_plan_input in = shape(40, 40, 128, 5120, 13824, 32000, 40, 3);
    struct ls_shard s[3];
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    CU_ASSERT(s[0].kv_heads == 14 && s[1].kv_heads == 13 && s[2].kv_heads == 13);
    CU_ASSERT(s[1].kv_first == 14 && s[2].kv_first == 27);
    CU_ASSERT(s[0].q_heads == 14 && s[2].q_first == 27);
}

static void test_partial_last_ffn_block_goes_to_the_last_rank(void)
{
    /* F = 1000: 15 whole blocks and one of 40 columns; 16 blocks over 3 ranks: 6 + 5 + 5 */
    struct ls_plan_input in = shape(8, 8, 64, 512, 1000, 1000, 2, 3);
    struct ls_shard s[3];
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    CU_ASSERT(s[0].ffn_first == 0 && s[0].ffn_cols == 384);
    CU_ASSERT(s[1].ffn_first == 384 && s[1].ffn_cols == 320);
    CU_ASSERT(s[2].ffn_first == 704 && s[2].ffn_cols == 296);
    CU_ASSERT(s[2].vocab_first == 704 && s[2].vocab_rows == 296);
}

static void test_fewer_ffn_blocks_than_ranks_is_an_error(void)
{
    struct ls_plan_input in = shape(8, 8, 64, 512, 100, 4096, 2, 4); /* 2 blocks */
    const char *err = plan_error(&in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "ffn 100"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "valid tp sizes: 1, 2"));
    in.tp = 2;
    CU_ASSERT_EQUAL(plan_and_check(&in, NULL), 0);
}

static void test_replicated_lm_head_lifts_the_vocab_block_limit(void)
{
    struct ls_plan_input in = shape(8, 8, 64, 512, 4096, 100, 2, 4); /* vocab: 2 blocks */
    const char *err = plan_error(&in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "vocab 100"));
    in.lm_head_replicated = 1;
    struct ls_shard s[4];
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, s), 0);
    CU_ASSERT(s[3].vocab_first == 0 && s[3].vocab_rows == 100);
}

static void test_tied_lm_head_costs_no_bytes(void)
{
    struct ls_plan_input in = shape(8, 2, 64, 512, 2048, 32000, 4, 2);
    struct ls_shard untied[2], tied[2];
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, untied), 0);
    in.tied = 1;
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, tied), 0);
    for (int r = 0; r < 2; r++)
        CU_ASSERT_EQUAL(untied[r].weight_bytes - tied[r].weight_bytes,
                        (size_t)untied[r].vocab_rows * 512 * 2);
}

static void test_bias_and_qk_norm_add_their_bytes(void)
{
    struct ls_plan_input in = shape(16, 4, 128, 2048, 11008, 151936, 28, 2);
    struct ls_shard plain[2], extra[2];
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, plain), 0);
    in.qkv_bias = 1;
    in.qk_norm = 1;
    CU_ASSERT_EQUAL_FATAL(plan_and_check(&in, extra), 0);
    /* per layer: q bias 8*128, k and v bias 2*2*128, q and k norm 2*128, all bf16 */
    CU_ASSERT_EQUAL(extra[0].weight_bytes_layer - plain[0].weight_bytes_layer,
                    (size_t)(8 * 128 + 4 * 128 + 2 * 128) * 2);
}

static void test_invalid_shapes_are_errors_naming_the_field(void)
{
    struct ls_plan_input in = shape(14, 4, 64, 896, 4864, 1000, 2, 2);
    const char *err = plan_error(&in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a multiple of kv_heads 4"));
    CU_ASSERT_EQUAL(ls_plan_valid_tp(&in, NULL, 0), -1);
    CU_ASSERT_FALSE(ls_plan_attn_tp_ok(14, 4, 2));

    in = shape(9, 3, 64, 576, 1536, 49152, 30, 12); /* more ranks than query heads */
    err = plan_error(&in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "9 query heads"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "valid tp sizes: 1, 2, 3, 6, 9"));

    const char *fields[] = {"heads", "kv_heads", "head_dim", "dim",          "ffn",
                            "vocab", "layers",   "tp",       "weight_bytes", "kv_bytes"};
    for (int f = 0; f < 10; f++) {
        in = shape(8, 8, 64, 512, 4096, 4096, 2, 2);
        int *field[] = {&in.heads, &in.kv_heads, &in.head_dim, &in.dim,          &in.ffn,
                        &in.vocab, &in.layers,   &in.tp,       &in.weight_bytes, &in.kv_bytes};
        *field[f] = f % 2 ? 0 : -3;
        err = plan_error(&in);
        CU_ASSERT_PTR_NOT_NULL_FATAL(err);
        CU_ASSERT_EQUAL(strncmp(err, fields[f], strlen(fields[f])), 0);
    }
}

/* the loader's rule (ls_plan_check_head_dim): RoPE rotates pairs, and the runtime's maximum */
static void test_odd_or_oversized_head_dim_is_an_error_naming_head_dim(void)
{
    struct ls_plan_input in = shape(8, 8, 15, 512, 4096, 4096, 2, 2);
    const char *err = plan_error(&in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_STRING_EQUAL(err, "head_dim: expected an even number (RoPE rotates pairs of "
                                "dimensions) up to 1024, found 15");
    CU_ASSERT_EQUAL(ls_plan_valid_tp(&in, NULL, 0), -1);
    in.head_dim = LS_PLAN_MAX_HEAD_DIM + 2;
    err = plan_error(&in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "found 1026"));
    in.head_dim = LS_PLAN_MAX_HEAD_DIM;
    CU_ASSERT_PTR_NULL(plan_error(&in));
    in.head_dim = 2;
    CU_ASSERT_PTR_NULL(plan_error(&in));
}

static void test_for_rank_rejects_a_rank_outside_tp(void)
{
    struct ls_plan_input in = shape(8, 8, 64, 512, 4096, 4096, 2, 4);
    struct ls_shard s;
    char err[256];
    CU_ASSERT_EQUAL(ls_plan_for_rank(&in, 4, &s, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "found 4"));
    CU_ASSERT_EQUAL(ls_plan_for_rank(&in, -1, &s, err, sizeof err), -1);
    CU_ASSERT_EQUAL(ls_plan_for_rank(&in, 3, &s, NULL, 0), 0);
}

static void test_byte_overflow_is_an_error_not_a_wrapped_count(void)
{
    struct ls_plan_input in = shape(64, 64, 1024, 1 << 30, 1 << 30, 1 << 30, 1 << 20, 1);
    in.weight_bytes = 4;
    const char *err = plan_error(&in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "overflow"));
    CU_ASSERT_EQUAL(ls_plan_unsharded_bytes(&in), 0);
}

static void test_long_valid_list_is_cut_not_overrun(void)
{
    /* 4096 kv heads: the list 1..4096 does not fit one line; the message must stay bounded */
    struct ls_plan_input in = shape(8192, 4096, 64, 512, 1 << 22, 1 << 22, 1, 4097);
    char err[512], small[40];
    memset(err, 'x', sizeof err);
    memset(small, 'x', sizeof small);
    struct ls_shard *s = malloc(sizeof *s * 4097);
    CU_ASSERT_EQUAL(ls_plan_make(&in, s, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(memchr(err, 0, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "valid tp sizes: 1, 2, 3, "));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, ", ..."));
    CU_ASSERT_EQUAL(ls_plan_make(&in, s, small, sizeof small), -1);
    CU_ASSERT_EQUAL(strlen(small), sizeof small - 1);
    free(s);
    err[0] = 0;
    CU_ASSERT_EQUAL(ls_plan_make(&in, NULL, err, 0), -1); /* no buffer: no write */
    CU_ASSERT_EQUAL(err[0], 0);
}

/* ------------------------------------------------------------ random and brute force ---- */

static uint64_t rng_state;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static int rnd_in(int lo, int hi)
{
    return lo + (int)(rnd() % (uint32_t)(hi - lo + 1));
}

static struct ls_plan_input random_shape(void)
{
    int K = rnd_in(1, 16), G = rnd_in(1, 8);
    static const int bytes[] = {1, 2, 4};
    struct ls_plan_input in = shape(K * G, K, 2 * rnd_in(1, 128), rnd_in(1, 4096), rnd_in(1, 20000),
                                    rnd_in(1, 70000), rnd_in(1, 80), 1);
    in.weight_bytes = bytes[rnd() % 3];
    in.kv_bytes = bytes[rnd() % 3];
    in.tied = rnd() & 1;
    in.qkv_bias = rnd() & 1;
    in.qk_norm = rnd() & 1;
    in.lm_head_replicated = (rnd() % 4) == 0;
    return in;
}

static void test_random_shapes_obey_every_invariant(void)
{
    rng_state = 0x9E3779B97F4A7C15ull;
    int planned = 0, refused = 0, wrong = 0;
    for (int i = 0; i < 400; i++) {
        struct ls_plan_input in = random_shape();
        in.tp = rnd_in(1, in.heads + 2);
        if (oracle_tp_ok(&in, in.tp)) {
            if (plan_and_check(&in, NULL) != 0) wrong++;
            planned++;
        } else {
            const char *err = plan_error(&in);
            if (!err || !strstr(err, "valid tp sizes: 1")) {
                describe(&in);
                printf("# expected an error listing valid tp sizes, got: %s\n",
                       err ? err : "success");
                wrong++;
            }
            refused++;
        }
    }
    CU_ASSERT_EQUAL(wrong, 0);
    /* the generator must exercise both outcomes for the test to mean anything */
    CU_ASSERT(planned > 100);
    CU_ASSERT(refused > 20);
}

/* every tp from 1 to 2H + 1: listed valid <=> the spec's rule <=> ls_plan_make succeeds */
static void test_listed_tp_sizes_succeed_and_no_others_do(void)
{
    rng_state = 0xD1B54A32D192ED03ull;
    int wrong = 0;
    for (int i = 0; i < 300; i++) {
        struct ls_plan_input in = random_shape();
        if (i % 3 == 0) in.ffn = rnd_in(1, 600); /* let the block limits bind too */
        if (i % 5 == 0) in.vocab = rnd_in(1, 600);
        int listed[MAX_TP], n = ls_plan_valid_tp(&in, listed, MAX_TP), at = 0;
        for (int tp = 1; tp <= 2 * in.heads + 1; tp++) {
            in.tp = tp;
            int expect = oracle_tp_ok(&in, tp);
            int is_listed = at < n && listed[at] == tp;
            if (is_listed) at++;
            int made = plan_error(&in) == NULL;
            if (expect != is_listed || expect != made || (made && plan_and_check(&in, NULL) != 0)) {
                describe(&in);
                printf("# tp %d: rule says %d, listed %d, planned %d\n", tp, expect, is_listed,
                       made);
                wrong++;
            }
        }
        if (at != n) {
            describe(&in);
            printf("# %d of %d listed sizes are not in 1..2H+1\n", n - at, n);
            wrong++;
        }
    }
    CU_ASSERT_EQUAL(wrong, 0);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite fixed = CU_add_suite("plan fixed shapes", NULL, NULL);
    CU_pSuite random = CU_add_suite("plan random shapes", NULL, NULL);
    if (!fixed || !random) return 1;
    CU_add_test(fixed, "llama8b shape at every tp up to 8", test_llama8b_shape_at_every_tp_up_to_8);
    CU_add_test(fixed, "llama8b tp8 bytes match the published parameter count",
                test_llama8b_tp8_bytes_match_published_parameter_count);
    CU_add_test(fixed, "smollm2 shape: uneven groups and replicas",
                test_smollm2_shape_uneven_groups_and_replicas);
    CU_add_test(fixed, "tp 7 for 14 heads / 2 kv fails listing valid sizes",
                test_tp_7_for_14_heads_2_kv_fails_listing_valid_sizes);
    CU_add_test(fixed, "64 heads / 8 kv at tp 16 replicates each kv head twice",
                test_64_heads_8_kv_at_tp16_replicates_each_kv_head_twice);
    CU_add_test(fixed, "40 kv heads over 3 ranks split 14 13 13",
                test_40_kv_heads_over_3_ranks_split_14_13_13);
    CU_add_test(fixed, "partial last ffn block goes to the last rank",
                test_partial_last_ffn_block_goes_to_the_last_rank);
    CU_add_test(fixed, "fewer ffn blocks than ranks is an error",
                test_fewer_ffn_blocks_than_ranks_is_an_error);
    CU_add_test(fixed, "replicated lm head lifts the vocab block limit",
                test_replicated_lm_head_lifts_the_vocab_block_limit);
    CU_add_test(fixed, "tied lm head costs no bytes", test_tied_lm_head_costs_no_bytes);
    CU_add_test(fixed, "qkv bias and qk norm add their bytes",
                test_bias_and_qk_norm_add_their_bytes);
    CU_add_test(fixed, "invalid shapes are errors naming the field",
                test_invalid_shapes_are_errors_naming_the_field);
    CU_add_test(fixed, "odd or oversized head_dim is an error naming head_dim",
                test_odd_or_oversized_head_dim_is_an_error_naming_head_dim);
    CU_add_test(fixed, "for_rank rejects a rank outside tp",
                test_for_rank_rejects_a_rank_outside_tp);
    CU_add_test(fixed, "byte overflow is an error, not a wrapped count",
                test_byte_overflow_is_an_error_not_a_wrapped_count);
    CU_add_test(fixed, "a long valid-size list is cut, not overrun",
                test_long_valid_list_is_cut_not_overrun);
    CU_add_test(random, "400 seeded random shapes obey every invariant",
                test_random_shapes_obey_every_invariant);
    CU_add_test(random, "listed tp sizes succeed and no others do",
                test_listed_tp_sizes_succeed_and_no_others_do);
    return ls_cunit_run_tap();
}
