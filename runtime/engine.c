/* See engine.h. The forward reads top to bottom: one line per operation, the two tensor-
 * parallel all-reduces per layer as their own lines. Activations are [T][width] for the chunk
 * of T positions. Token ids and positions live in backend memory (ids, pos), so the same code
 * is the eager prefill and the captured decode step. */
#include "config.h"
#include "engine.h"
#include "watchdog.h"
#include "check.h"
#include "log.h"
#include "kernels/ref.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ls_engine {
    struct ls_model *m;
    struct ls_comm *comm;
    const struct ls_backend *be;
    void *stream; /* the backend's stream, for the collectives */
    int max_ctx, max_batch;
    int pos;             /* positions filled in the KV cache (host's count) */
    int vpad;            /* vocab rows per rank in the gather (the largest slice) */
    int *ids, *posb;     /* [max_batch] token ids and positions of the chunk (backend memory) */
    int *host_pos;       /* [max_batch] staging */
    float *x, *xn;       /* [max_batch][dim] residual stream and its norm */
    float *qkv;          /* [max_batch][(q_heads + 2 kv_heads) * head_dim] */
    float *att;          /* [max_batch][q_heads * head_dim] */
    float *proj;         /* [max_batch][dim] partial sums before each all-reduce */
    float *gu;           /* [max_batch][2 * ffn_cols] gate | up */
    float *logits_local; /* [vpad] this rank's vocab slice */
    float *logits_all;   /* [tp][vpad] every rank's slice */
    float *logits;       /* [vocab]: logits_all itself when the slices tile the vocabulary */
    float *pairs;        /* [tp][2] a greedy step's choice from every rank's slice (local_greedy) */
    void **kc, **vc;     /* [n_layers] KV cache, backend format */
    float *pend;         /* [LS_PEND_ROWS][dim] x's pending sum (the fused MLP's output); NULL:
                          * the fused MLP does not run */
    float *xpend;        /* pend after a chunk whose last layer left x a pending sum, else NULL */
    double *u;           /* the step's uniform draw (backend memory), when sampling */
    void *sample_ws;     /* the backend's sampling workspace */
    void *graph[LS_DECODE_FORMS]; /* captured decode step per backend form, or NULL */
    struct ls_sampling
        graph_sp[LS_DECODE_FORMS];  /* the token choice captured in each (temperature 0: argmax) */
    int graph_top[LS_DECODE_FORMS]; /* the chosen token's scores each takes: -1 none, else top_n */
    struct ls_graph_stats gstats;   /* captures so far: new graphs, updates in place, seconds */
    double *dstats;                 /* [S][SCORE_W] a scored step's (backend memory) */
    /* the penalties' window in the backend (choice_alloc, at start-up): the
     * penalised logits the token is chosen from (the step's scores stay the model's), each
     * token's count in the window, the tokens by position; valid for a step at pen_pos with
     * pen_last_n, else sent again from the caller's history (pen_sync) */
    float *plogits;
    int *pcount, *phist;
    int pen_pos, pen_last_n;
    /* the logit bias and allowed tokens in the backend (vocab floats: ls_sampling_apply_bias
     * over zeros; choice_alloc, at start-up); bias_sent: the choice they came from (NULL:
     * none sent yet) */
    float *pbias;
    struct ls_sampling *bias_sent;
    int graph_synced;            /* posb[0] holds pos and ids[0] holds last_out for the next step */
    /* ahead_live: a decode step at position pos was issued ahead (ls_engine_plan), choosing
     * by ahead_sp and scoring ahead_top (as graph_top); plan: the decode calls the caller
     * announced, each continuing the one before, with plan_smp's numbers (NULL: none drawn
     * ahead); u_posted: the numbers handed to the drawn steps at positions of each parity
     * (u_post) */
    int ahead_live, ahead_top, plan;
    struct ls_sampling ahead_sp;
    struct ls_sampler *plan_smp;
    double u_posted[2];
    int last_out;                /* the token the last greedy step wrote to ids[0] */
    /* ls_engine_score's buffers, allocated at its first use: the LM head over score_rows
     * positions at once into srows, their scores in the backend (sstats, every rank's in
     * sstats_all), then on the host (shost) */
    int score_rows;
    float *srows;                 /* [score_rows][vocab_rows] this rank's slice of the logits */
    double *sstats, *sstats_all;  /* [score_rows][S][SCORE_W], [tp][...]: S slices a row */
    int *stargets, *host_targets; /* [score_rows]: the token after each position, or -1 */
    double *shost;                /* [tp][score_rows][S][SCORE_W] */
    int *shead;                   /* [tp][S] the slices' lists' heads in a merge */
};

/* doubles of a position's scores (ref_row_logprobs' layout at the most tokens listed) */
#define SCORE_W LS_SCORE_W(LS_SCORE_TOP_MAX)
/* positions of one LM head product when scoring: 128 keeps the head's logits to 66 MB at a
 * vocabulary of 128256 while the head's weights are read once for 128 positions */
#define SCORE_ROWS 128

/* n bytes of backend memory counted into *sum, and taken unless *failed (then NULL; a failure
 * sets *failed) */
static void *take(const struct ls_backend *be, size_t n, size_t *sum, int *failed)
{
    *sum += n;
    void *p = *failed ? NULL : be->alloc(n);
    if (!p) *failed = 1;
    return p;
}

/* n floats of backend memory (take) */
static float *balloc(struct ls_engine *e, size_t n, size_t *sum, int *failed)
{
    return take(e->be, n * sizeof(float), sum, failed);
}

/* The fused MLP: the attention output, the MLP's norm, gate+up, SwiGLU and down of one position
 * at one rank in two kernels instead of three (the backend's attn_out_mlp: the down split along
 * its inputs, read transposed, its output left as x's pending sum; ~1% faster on the 8B). The
 * down matrices are then stored transposed (in place, at start-up), and the prefill reads them
 * so (matmul_residual_t). On by default where it applies and the model's width is at least
 * MLP_FUSED_MIN_DIM (MLP_FUSED_AUTO); LOCKSTEP_MLP_FUSED=1 asks for it at any width
 * (MLP_FUSED_ASKED: not fitting is then an error, and a notice says where it does not apply), 0
 * turns it off. -1 with err for a bad value. */
enum { MLP_FUSED_OFF, MLP_FUSED_ASKED, MLP_FUSED_AUTO };
/* measured on an H200 (thirty-fifth session, ms a token fused / not): faster at widths 3072
 * (Llama-3.2-3B's shape, 1.855 / 1.863), 3584 (Qwen2.5-7B, 3.543 / 3.579) and 4096 (the 8B,
 * 3.730 / 3.758); even at 2048 with an 8192-wide MLP (Llama-3.2-1B's, 0.803 / 0.803), slower at
 * 2048 with 7168 (the 8B's TP=2 shard shape at one rank, 1.483 / 1.396) and at SmolLM2-135M's
 * 576 (0.606 / 0.533) */
#define MLP_FUSED_MIN_DIM 3072
static int mlp_fused_switch(const struct ls_engine *e, char *err, size_t errlen)
{
    const char *v = getenv("LOCKSTEP_MLP_FUSED");
    const int asked = v && *v;
    if (asked && !strcmp(v, "0")) return MLP_FUSED_OFF;
    if (asked && strcmp(v, "1"))
        return ls_errf(err, errlen, "LOCKSTEP_MLP_FUSED: expected 0 or 1, found '%s'", v);
    if (e->m->tp == 1 && e->be->attn_out_mlp && e->be->attn_out_mlp_takes &&
        e->be->matmul_rmsnorm_pend && e->be->transpose_in_place && e->be->matmul_residual_t)
        return asked                                ? MLP_FUSED_ASKED
               : e->m->cfg.dim >= MLP_FUSED_MIN_DIM ? MLP_FUSED_AUTO
                                                    : MLP_FUSED_OFF;
    if (asked && e->comm->rank == 0)
        ls_warn("LOCKSTEP_MLP_FUSED=1 has no effect here: it applies at one rank on a GPU "
                "(TP=%d, %s backend)",
                e->m->tp, e->be->name);
    return MLP_FUSED_OFF;
}

static void mlp_fused_free(struct ls_engine *e)
{
    if (e->pend) e->be->free(e->pend);
    e->pend = NULL;
}

/* The fused MLP's pending sum, then the model's down matrices transposed in place, the layout
 * its kernel reads (mode from mlp_fused_switch; before the KV cache, so that the
 * transposition's scratch, one matrix, is back by then). Every layer's shapes are asked first:
 * a transposed matrix stays so (the prefill reads it through matmul_residual_t). Out of memory:
 * -1 with err when asked for, else none and a notice; none and a notice where the backend does
 * not take a layer's shapes. */
static int mlp_fused_alloc(struct ls_engine *e, int mode, char *err, size_t errlen)
{
    struct ls_model *m = e->m;
    const int n = m->cfg.n_layers, D = m->cfg.dim, F = m->shard.ffn_cols,
              qd = m->shard.q_heads * m->cfg.head_dim;
    const char *why = NULL;
    double need = (double)LS_PEND_ROWS * D * sizeof(float); /* of what did not fit */
    e->pend = e->be->alloc(LS_PEND_ROWS * (size_t)D * sizeof(float));
    if (!e->pend) why = "its pending sum";
    for (int l = 0; !why && l < n; l++) {
        const struct ls_layer *L = &m->layers[l];
        if (!e->be->attn_out_mlp_takes(e->x, e->proj, e->pend, e->att, L->wo, L->w_gu, L->w_down,
                                       L->ffn_norm, qd, D, F)) {
            mlp_fused_free(e);
            if (m->down_transposed)
                return ls_errf(err, errlen,
                               "rank %d: the %s backend does not take layer %d's shapes for the "
                               "fused MLP (dim %d, ffn %d), and the model's down matrices are "
                               "stored for it",
                               e->comm->rank, e->be->name, l, D, F);
            if (e->comm->rank == 0)
                ls_warn("the fused MLP: the %s backend does not take layer %d's shapes (dim %d, "
                        "ffn %d); the separate kernels run",
                        e->be->name, l, D, F);
            return 0;
        }
    }
    if (!why && !m->down_transposed) {
        void **W = malloc((size_t)n * sizeof *W);
        CHECK_ALLOC(W);
        for (int l = 0; l < n; l++) W[l] = m->layers[l].w_down;
        if (e->be->transpose_in_place(W, n, (size_t)D, (size_t)F)) {
            m->down_transposed = 1;
        } else {
            why = "the down matrices' transposition (one matrix of scratch)";
            need = (double)D * F * e->be->weight_bytes;
        }
        free(W);
    }
    if (why) {
        const size_t free_b = e->be->mem_free ? e->be->mem_free() : 0;
        char have[64] = "";
        if (free_b) snprintf(have, sizeof have, " (%.1f MB free)", free_b / 1e6);
        mlp_fused_free(e);
        if (mode == MLP_FUSED_ASKED || m->down_transposed)
            return ls_errf(err, errlen,
                           "rank %d: out of %s memory for %s (LOCKSTEP_MLP_FUSED): %.1f MB "
                           "needed%s",
                           e->comm->rank, e->be->name, why, need / 1e6, have);
        if (e->comm->rank == 0)
            ls_warn("the fused MLP is off: %s (%.1f MB) does not fit%s; the separate kernels "
                    "run (LOCKSTEP_MLP_FUSED=0 turns it off)",
                    why, need / 1e6, have);
        return 0;
    }
    return 0;
}

/* the buffers of a step's choice, for any request (so none runs out of memory half-way): the
 * draw's number and the sampling workspace, the penalties' logits, counts and window, the logit
 * bias, a scored step's statistics; none where *failed says an allocation before failed. Their
 * bytes are added to *bytes either way; a failure sets *failed (ls_engine_free frees what was
 * had) */
static void choice_alloc(struct ls_engine *e, size_t *bytes, int *failed)
{
    const struct ls_backend *be = e->be;
    const size_t V = (size_t)e->m->cfg.vocab;
    e->u = take(be, sizeof(double), bytes, failed);
    e->sample_ws = take(be, be->sample_ws(e->m->cfg.vocab), bytes, failed);
    e->plogits = take(be, V * sizeof(float), bytes, failed);
    e->pcount = take(be, V * sizeof(int), bytes, failed);
    e->phist = take(be, (size_t)e->max_ctx * sizeof(int), bytes, failed);
    e->pbias = take(be, V * sizeof(float), bytes, failed);
    e->dstats = take(be, (size_t)LS_SCORE_SPLIT_MAX * SCORE_W * sizeof(double), bytes, failed);
    if (e->m->tp > 1 && be->argmax_pairs)
        e->pairs = take(be, (size_t)e->m->tp * 2 * sizeof(float), bytes, failed);
}

struct ls_engine *ls_engine_new(struct ls_model *m, struct ls_comm *comm,
                                const struct ls_backend *be, int max_ctx, int max_batch, char *err,
                                size_t errlen)
{
    struct ls_engine *e = calloc(1, sizeof *e);
    CHECK_ALLOC(e);
    const struct ls_model_config *c = &m->cfg;
    const struct ls_shard *s = &m->shard;
    e->m = m;
    e->comm = comm;
    e->be = be;
    e->stream = be->stream ? be->stream() : NULL;
    e->max_ctx = max_ctx;
    e->pen_pos = -1;
    e->max_batch = max_batch;
    for (int r = 0; r < m->tp; r++)
        if (m->plan[r].vocab_rows > e->vpad) e->vpad = m->plan[r].vocab_rows;
    int hd = c->head_dim, qd = s->q_heads * hd, kd = s->kv_heads * hd, D = c->dim, F = s->ffn_cols;
    e->host_pos = malloc((size_t)max_batch * sizeof *e->host_pos);
    CHECK_ALLOC(e->host_pos);
    int failed = 0;
    size_t B = (size_t)max_batch;
    size_t bufs_b = 0; /* the activations' and the choice's bytes, for the error */
    e->ids = take(be, B * sizeof(int), &bufs_b, &failed);
    e->posb = take(be, B * sizeof(int), &bufs_b, &failed);
    e->x = balloc(e, B * D, &bufs_b, &failed);
    e->xn = balloc(e, B * D, &bufs_b, &failed);
    e->qkv = balloc(e, B * (qd + 2 * kd), &bufs_b, &failed);
    e->att = balloc(e, B * qd, &bufs_b, &failed);
    e->proj = balloc(e, B * D, &bufs_b, &failed);
    e->gu = balloc(e, B * 2 * F, &bufs_b, &failed);
    e->logits_local = balloc(e, (size_t)e->vpad, &bufs_b, &failed);
    e->logits_all = balloc(e, (size_t)e->vpad * m->tp, &bufs_b, &failed);
    /* when every rank's slice has vpad rows, the gathered slices are the logits in order */
    if ((size_t)e->vpad * m->tp == (size_t)c->vocab)
        e->logits = e->logits_all;
    else
        e->logits = balloc(e, (size_t)c->vocab, &bufs_b, &failed);
    /* the fused MLP before the KV cache (mlp_fused_alloc) */
    if (!failed) {
        int mf = mlp_fused_switch(e, err, errlen);
        if (mf == MLP_FUSED_OFF && m->down_transposed)
            mf = ls_errf(err, errlen,
                         "the fused MLP is off here (LOCKSTEP_MLP_FUSED, TP=%d), but the model's "
                         "down matrices are stored transposed for it",
                         m->tp);
        if (mf < 0 || (mf > 0 && mlp_fused_alloc(e, mf, err, errlen))) {
            ls_engine_free(e);
            return NULL;
        }
    }
    e->kc = calloc((size_t)c->n_layers, sizeof *e->kc);
    e->vc = calloc((size_t)c->n_layers, sizeof *e->vc);
    CHECK_ALLOC(e->kc);
    CHECK_ALLOC(e->vc);
    for (int l = 0; l < c->n_layers && !failed; l++) {
        e->kc[l] = be->alloc_cache(s->kv_heads, max_ctx, hd);
        e->vc[l] = be->alloc_cache(s->kv_heads, max_ctx, hd);
        if (!e->kc[l] || !e->vc[l]) failed = 1;
    }
    choice_alloc(e, &bufs_b, &failed);
    if (failed) {
        double need = (double)max_ctx * kd * 2 * c->n_layers * be->weight_bytes + (double)bufs_b;
        ls_engine_free(e); /* first: what the weights leave free */
        size_t free_b = be->mem_free ? be->mem_free() : 0;
        char have[64] = "";
        if (free_b) snprintf(have, sizeof have, " (%.2f GB free after the weights)", free_b / 1e9);
        snprintf(err, errlen,
                 "rank %d: out of %s memory for the KV cache and activations: %.2f GB needed for "
                 "--max-context %d%s; lower --max-context",
                 comm->rank, be->name, need / 1e9, max_ctx, have);
        return NULL;
    }
    /* the backend's working memory at its largest, last (it keeps some memory free besides): a
     * chunk's GEMM input is at most a chunk's positions of the widest input (dim, the q heads'
     * outputs, the MLP's) */
    size_t own_b = 0;
    const int widest = D > qd ? (D > F ? D : F) : (qd > F ? qd : F);
    if (be->reserve &&
        be->reserve(max_batch, widest, s->q_heads, s->kv_heads, hd, max_ctx, &own_b) != 0) {
        const size_t free_b = be->mem_free ? be->mem_free() : 0;
        snprintf(err, errlen,
                 "rank %d: out of %s memory for its working buffers after the KV cache of "
                 "--max-context %d: %.1f MB needed, %.1f MB free; lower --max-context",
                 comm->rank, be->name, max_ctx, own_b / 1e6, free_b / 1e6);
        ls_engine_free(e);
        return NULL;
    }
    return e;
}

static void drop_graph(struct ls_engine *e, int form)
{
    if (e->graph[form]) {
        e->be->graph_free(e->graph[form]);
        e->graph[form] = NULL;
    }
}

static void drop_graphs(struct ls_engine *e)
{
    for (int f = 0; f < LS_DECODE_FORMS; f++) drop_graph(e, f);
}

/* ls_engine_score's buffers (score_alloc's), back to none */
static void score_free(struct ls_engine *e)
{
    void *bufs[] = {e->srows, e->sstats, e->sstats_all, e->stargets};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) e->be->free(bufs[i]);
    free(e->host_targets);
    free(e->shost);
    free(e->shead);
    e->srows = NULL, e->sstats = e->sstats_all = NULL, e->stargets = NULL;
    e->host_targets = e->shead = NULL, e->shost = NULL;
}

/* a switch's setting, read once into *cached (-2 first): 1 where the variable is "1", 0 where
 * it is "0", else -1 (not set) */
static int switch_set(const char *var, int *cached)
{
    if (*cached == -2) {
        const char *v = getenv(var);
        *cached = v && !strcmp(v, "1") ? 1 : v && !strcmp(v, "0") ? 0 : -1;
    }
    return *cached;
}

/* an experiment's switch: def where the variable is neither "0" nor "1" */
static int switch_on(const char *var, int def, int *cached)
{
    const int set = switch_set(var, cached);
    return set < 0 ? def : set;
}

/* Decode steps issued ahead. Each decode step waits for its token (a read the device finishes
 * long before the host has it back and launched the next step: 0.02 ms a token measured on an
 * H200, LOCKSTEP_LAB_SKIP=read). A caller that announces its next n decode calls
 * (ls_engine_plan) lets a greedy step issue the step after it before reading its own token: the
 * step reads its input token from the backend, where the step before leaves it. The next call
 * takes that step when it continues (the token just returned, the same choice, the same form);
 * anything else (another token, other settings, a prefill, a rewind) drops it first: waited for,
 * and the position and token sent again (the KV row it wrote is rewritten by whatever comes at
 * that position). Every rank decides the same, so the steps' collectives pair up. Every decode
 * step's last kernel then posts its token where the host polls for it (the backend's advance
 * and token_take), so nothing stands between two steps in the stream. On by default where the
 * backend's work is queued (the GPU), off on the CPU backend, whose work is done when issued
 * (there a step ahead only delays each token by a step); LOCKSTEP_DECODE_AHEAD=0 or 1 decides
 * on any backend with token_take (the CPU tests run it with 1). Measured on an H200: with the
 * token copied to pinned memory and an event between the graphs (thirty-third session) -0.003
 * to -0.023 ms a token, short of the gap; posted by the step (thirty-fourth) 3.827-3.831 ->
 * 3.817-3.819 ms, the whole gap (the steps with no read at all: 3.818). posting: whether the
 * decode steps post their tokens (every one, so that any may be taken) and may be issued ahead */
static int posting(const struct ls_engine *e)
{
    static int set = -2;
    return e->be->token_take && switch_on("LOCKSTEP_DECODE_AHEAD", e->be->queued, &set);
}

/* drop a step issued ahead */
static void ahead_drop(struct ls_engine *e)
{
    if (!e->ahead_live) return;
    ls_watchdog_arm("decode step issued ahead at position", e->pos);
    e->be->sync();
    ls_watchdog_disarm();
    e->ahead_live = 0;
    e->graph_synced = 0;
    e->pen_pos = -1; /* the step moved the penalties' window on */
    e->gstats.ahead_dropped++;
}

/* drop it and the plan: a call other than a decode step */
static void ahead_stop(struct ls_engine *e)
{
    e->plan = 0;
    e->plan_smp = NULL;
    ahead_drop(e);
}

void ls_engine_plan(struct ls_engine *e, int n, struct ls_sampler *smp)
{
    e->plan = posting(e) ? n : 0;
    e->plan_smp = e->plan ? smp : NULL;
}

/* drawn steps issued ahead too (their numbers peeked from the plan's sampler and handed on by
 * the step before), unless LOCKSTEP_DECODE_AHEAD_DRAWN=0. Measured on an H200 (thirty-fourth
 * session, T 0.8, top-k 50, top-p 0.95): 3.852 / 3.860 -> 3.841 / 3.842 ms a token */
static int ahead_drawn(void)
{
    static int on = -2;
    return switch_on("LOCKSTEP_DECODE_AHEAD_DRAWN", 1, &on);
}

/* penalised and biased steps issued ahead too, unless LOCKSTEP_DECODE_AHEAD_ADJUSTED=0: the
 * window the backend keeps moves on in the step, so a step that continues the one before finds
 * it ready; a step taken must see the very bias vector the backend holds, and a step dropped
 * leaves the window moved (ahead_drop sends it again). Measured on an H200 (thirty-fifth
 * session, 8B): T 0.6, top-p 0.9, repetition 1.1 3.817 / 3.801 -> 3.783 / 3.783 ms a token; a
 * 2-token logit bias 3.748 / 3.744 -> 3.734 / 3.734 */
static int ahead_adjusted(void)
{
    static int on = -2;
    return switch_on("LOCKSTEP_DECODE_AHEAD_ADJUSTED", 1, &on);
}

/* scored steps (logprobs) posting their scores beside the token (the backend's scores_post)
 * and so issued ahead too, unless LOCKSTEP_DECODE_AHEAD_SCORED=0. Measured on an H200
 * (thirty-fifth session, 8B, T 0.8, top-p 0.95, --logprobs 5): 4.021 / 4.000 -> 3.964 / 3.963 ms
 * a token, the same tokens and logprobs */
static int ahead_scored(const struct ls_engine *e)
{
    static int on = -2;
    return e->be->scores_post && switch_on("LOCKSTEP_DECODE_AHEAD_SCORED", 1, &on);
}

/* whether a step choosing by sp (and scoring top_n) may be issued ahead: greedy or drawn with
 * the numbers of the plan's sampler, without penalties or bias unless ahead_adjusted, scored
 * where the backend posts the scores too */
static int ahead_choice(const struct ls_engine *e, const struct ls_sampling *sp, int top_n)
{
    return (top_n < 0 || ahead_scored(e)) && (!ls_sampling_adjusted(sp) || ahead_adjusted()) &&
           (sp->temperature == 0.0f || (e->plan_smp && e->be->u_post && ahead_drawn()));
}

/* the number the drawn step at position pos takes, the plan sampler's k-th from here, left
 * for the step before it to hand on */
static void u_post(struct ls_engine *e, int pos, int k)
{
    const double u = ls_sampler_peek(e->plan_smp, k);
    e->u_posted[pos & 1] = u;
    e->be->u_post(pos, u);
}

void ls_engine_free(struct ls_engine *e)
{
    if (!e) return;
    ahead_stop(e);
    const struct ls_backend *be = e->be;
    drop_graphs(e);
    if (e->u) be->free(e->u);
    if (e->sample_ws) be->free(e->sample_ws);
    score_free(e);
    if (e->dstats) be->free(e->dstats);
    void *pen[] = {e->plogits, e->pcount, e->phist, e->pbias, e->pairs};
    for (size_t i = 0; i < sizeof pen / sizeof pen[0]; i++)
        if (pen[i]) be->free(pen[i]);
    void *bufs[] = {e->ids,
                    e->posb,
                    e->x,
                    e->xn,
                    e->qkv,
                    e->att,
                    e->proj,
                    e->gu,
                    e->logits_local,
                    e->logits_all,
                    e->logits != e->logits_all ? e->logits : NULL};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(bufs[i]);
    for (int l = 0; e->kc && l < e->m->cfg.n_layers; l++) {
        if (e->kc[l]) be->free(e->kc[l]);
        if (e->vc[l]) be->free(e->vc[l]);
    }
    mlp_fused_free(e);
    free(e->kc);
    free(e->vc);
    free(e->host_pos);
    free(e->bias_sent);
    free(e);
}

struct ls_comm *ls_engine_set_comm(struct ls_engine *e, struct ls_comm *comm)
{
    struct ls_comm *old = e->comm;
    ahead_stop(e);
    e->comm = comm;
    drop_graphs(e);
    return old;
}

void ls_engine_reset(struct ls_engine *e)
{
    ahead_stop(e);
    e->pos = 0;
    e->graph_synced = 0;
    e->pen_pos = -1;
}

int ls_engine_rewind(struct ls_engine *e, int pos)
{
    if (pos < 0 || pos > e->pos) return -1;
    ahead_stop(e);
    e->pos = pos;
    e->graph_synced = 0;
    e->pen_pos = -1;
    return 0;
}

int ls_engine_pos(const struct ls_engine *e)
{
    return e->pos;
}

int ls_engine_max_ctx(const struct ls_engine *e)
{
    return e->max_ctx;
}

int ls_engine_mlp_fused(const struct ls_engine *e)
{
    return e->pend != NULL;
}

struct ls_graph_stats ls_engine_graph_stats(const struct ls_engine *e)
{
    return e->gstats;
}

/* With one rank there is no all-reduce between a row-parallel matmul and the residual add, so
 * the add goes into the matmul (x += out) and each RMSNorm into the matmul that reads it */
static int fused_tp1(const struct ls_engine *e)
{
    return e->comm->size == 1 && e->be->matmul_rmsnorm && e->be->matmul_residual;
}

/* RoPE and the KV-cache store inside the QKV matmul (matmul_rope_kv) for one position without
 * q/k norms, unless LOCKSTEP_ROPE_IN_MATMUL=0 */
static int rope_in_matmul(const struct ls_engine *e, const struct ls_layer *L, int T)
{
    static int on = -2;
    return switch_on("LOCKSTEP_ROPE_IN_MATMUL", 1, &on) && T == 1 && e->be->matmul_rope_kv &&
           !L->q_norm && !L->k_norm;
}

/* The SwiGLU inside the gate+up matmul for one position (matmul_gu_swiglu), so the down matmul
 * reads h [f] instead of gate | up [2f] and computes no silu; LOCKSTEP_GU_SWIGLU=0 turns it off
 * (experiments). Off where the backend does not offer it or does not take the shape. */
static int gu_swiglu(struct ls_engine *e, const struct ls_layer *L, int T, const float *x,
                     const float *nw)
{
    static int on = -2;
    const struct ls_model_config *c = &e->m->cfg;
    return switch_on("LOCKSTEP_GU_SWIGLU", 1, &on) && T == 1 && e->be->matmul_gu_swiglu &&
           e->be->matmul_gu_swiglu(e->gu, x, nw, c->norm_eps, L->w_gu, c->dim,
                                   e->m->shard.ffn_cols);
}

/* Each RMSNorm taken inside the matmul that reads it (the norm's sum of squares in every block
 * of the GEMV, as at one rank) rather than by the all-reduce before it: always at one rank, and
 * at TP > 1 unless LOCKSTEP_NORM_IN_MATMUL=0 */
static int norm_in_matmul(const struct ls_engine *e)
{
    if (e->comm->size == 1) return fused_tp1(e);
    static int on = -2;
    return switch_on("LOCKSTEP_NORM_IN_MATMUL", 1, &on) && e->be->matmul_rmsnorm;
}

/* whether a forward of T positions runs the fused MLP (and so leaves x a pending sum) */
static int mlp_fused_at(const struct ls_engine *e, int T)
{
    return fused_tp1(e) && T == 1 && e->pend;
}

/* out = (rmsnorm(x) * nw) . W^T (+ bias) of T positions, x with its pending sum when it has one
 * (xpend: then one position) */
static void matmul_rmsnorm_x(struct ls_engine *e, float *out, float *x, float *xpend,
                             const float *nw, const void *W, const float *bias, int T, int k, int n)
{
    const float eps = e->m->cfg.norm_eps;
    if (xpend && T != 1) ls_die(__FILE__, __LINE__, "matmul_rmsnorm_x", "a pending sum of T > 1");
    if (xpend)
        e->be->matmul_rmsnorm_pend(out, x, xpend, nw, eps, W, bias, k, n);
    else
        e->be->matmul_rmsnorm(out, x, nw, eps, W, bias, T, k, n);
}

/* LOCKSTEP_LAB_SKIP=attn|read|attn,read, for a bench to measure what a part costs the step
 * (timing only: the tokens are wrong; a warning says so at the first step). attn: decode steps
 * (one position) leave out the attention kernel. read: a decode step does not read its token
 * back (the host never waits: the steps' graphs queue back to back, each taking its input
 * token from the last on the device, as a pipelined decode would), so that against the default
 * the bench shows the host's gap between steps. */
enum { LAB_ATTN = 1, LAB_READ = 2 };
static int lab_skip(const struct ls_engine *e)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("LOCKSTEP_LAB_SKIP");
        on = !v || !*v                 ? 0
             : !strcmp(v, "attn")      ? LAB_ATTN
             : !strcmp(v, "read")      ? LAB_READ
             : !strcmp(v, "attn,read") ? LAB_ATTN | LAB_READ
                                       : 0;
        if (v && *v && !on && e->comm->rank == 0)
            ls_warn("LOCKSTEP_LAB_SKIP: expected 'attn', 'read' or 'attn,read', found '%s' "
                    "(ignored)",
                    v);
        if (on && e->comm->rank == 0)
            ls_warn("LOCKSTEP_LAB_SKIP=%s: decode steps leave out %s (timing only: the tokens are "
                    "wrong)",
                    v,
                    on == LAB_ATTN   ? "the attention"
                    : on == LAB_READ ? "the token's read"
                                     : "both");
    }
    return on;
}

/* One decoder layer. Tensor-parallel: the residual stream x is all-reduced and added in one
 * step after each row-parallel matmul; each norm is taken inside the matmul that reads it
 * (norm_in_matmul), or else by that step into xn (on entry xn = rmsnorm(x) * attn_norm of this
 * layer, on exit rmsnorm(x) * next_norm). One rank (fused_tp1): the residual adds too go into
 * the matmuls. Decode (one position): RoPE and the cache store inside the QKV matmul
 * (rope_in_matmul). */
static void layer_forward(struct ls_engine *e, int l, int T, int pos0, const float *next_norm)
{
    const struct ls_backend *be = e->be;
    const struct ls_model_config *c = &e->m->cfg;
    const struct ls_shard *s = &e->m->shard;
    const struct ls_layer *L = &e->m->layers[l];
    const int D = c->dim, hd = c->head_dim, hq = s->q_heads, hkv = s->kv_heads, F = s->ffn_cols;
    const int qd = hq * hd, stride = (hq + 2 * hkv) * hd,
              rope_il = c->rope_style == LS_ROPE_INTERLEAVED;
    const float eps = c->norm_eps;

    const int fused = fused_tp1(e), nin = norm_in_matmul(e);
    /* the fused MLP: the layer before left x a pending sum (every layer but the first) */
    const int mlp1 = mlp_fused_at(e, T);
    float *xpend = mlp1 && l > 0 ? e->pend : NULL;

    if (rope_in_matmul(e, L, T)) {
        be->matmul_rope_kv(e->qkv, nin ? e->x : e->xn, xpend, nin ? L->attn_norm : NULL, eps,
                           L->wqkv, L->bqkv, D, e->kc[l], e->vc[l], e->posb, e->m->inv_freq, hq,
                           hkv, hd, e->max_ctx, rope_il);
    } else {
        if (nin)
            matmul_rmsnorm_x(e, e->qkv, e->x, xpend, L->attn_norm, L->wqkv, L->bqkv, T, D, stride);
        else
            be->matmul(e->qkv, e->xn, L->wqkv, L->bqkv, T, D, stride);
        be->rope_kv(e->qkv, stride, e->kc[l], e->vc[l], e->posb, e->m->inv_freq, T, hq, hkv, hd,
                    e->max_ctx, rope_il, L->q_norm, L->k_norm, eps);
    }
    /* a decode step's attention before the fused MLP may be left for its o GEMV to finish */
    if ((T > 1 || !(lab_skip(e) & LAB_ATTN)) &&
        !(fused && mlp1 && T == 1 && be->attention_for_out_mlp &&
          be->attention_for_out_mlp(e->att, e->qkv, e->kc[l], e->vc[l], e->posb, hq, hkv, hd,
                                    e->max_ctx)))
        be->attention(e->att, e->qkv, stride, e->kc[l], e->vc[l], e->posb, pos0, T, hq, hkv, hd,
                      e->max_ctx);
    if (fused) {
        /* LOCKSTEP_MLP_FUSED=1: proj (unused at one rank) holds the MLP's input copy; the MLP's
         * output is x's pending sum, which the next layer's o takes in (the first layer's
         * only zeroes what the last forward left) */
        if (mlp1) {
            if (!be->attn_out_mlp(e->x, e->proj, e->pend, l > 0, e->att, L->wo, L->w_gu, L->w_down,
                                  L->ffn_norm, eps, qd, D, F))
                ls_die(__FILE__, __LINE__, "attn_out_mlp", "refused shapes it took at start-up");
            return;
        }
        be->matmul_residual(e->x, e->att, L->wo, T, qd, D, 0);
        if (gu_swiglu(e, L, T, e->x, L->ffn_norm)) {
            be->matmul_residual(e->x, e->gu, L->w_down, T, F, D, 0);
            return;
        }
        be->matmul_rmsnorm(e->gu, e->x, L->ffn_norm, eps, L->w_gu, NULL, T, D, 2 * F);
        if (e->m->down_transposed) /* the fused MLP's layout, [ffn][dim] */
            be->matmul_residual_t(e->x, e->gu, L->w_down, T, F, D, 1);
        else
            be->matmul_residual(e->x, e->gu, L->w_down, T, F, D, 1);
        return;
    }
    be->matmul(e->proj, e->att, L->wo, NULL, T, qd, D);
    /* TP all-reduce of the attention output, + residual (+ the MLP's RMSNorm) */
    be->allreduce_add_rmsnorm(e->comm, e->proj, e->x, nin ? NULL : e->xn, L->ffn_norm, T, D, eps);

    if (gu_swiglu(e, L, T, nin ? e->x : e->xn, nin ? L->ffn_norm : NULL)) {
        be->matmul(e->proj, e->gu, L->w_down, NULL, T, F, D);
    } else {
        if (nin)
            be->matmul_rmsnorm(e->gu, e->x, L->ffn_norm, eps, L->w_gu, NULL, T, D, 2 * F);
        else
            be->matmul(e->gu, e->xn, L->w_gu, NULL, T, D, 2 * F);
        be->matmul_swiglu(e->proj, e->gu, L->w_down, T, F, D);
    }
    /* TP all-reduce of the MLP output, + residual (+ the next layer's or the final RMSNorm) */
    be->allreduce_add_rmsnorm(e->comm, e->proj, e->x, nin ? NULL : e->xn, next_norm, T, D, eps);
}

/* the LM head of position t of the last chunk (with the final norm, or xn holds it already):
 * this rank's slice of the logits into out */
static void head_matmul(struct ls_engine *e, int t, float *out)
{
    const struct ls_model *m = e->m;
    const int D = m->cfg.dim, rows = m->shard.vocab_rows;
    if (norm_in_matmul(e))
        matmul_rmsnorm_x(e, out, e->x + (size_t)t * D, e->xpend, m->final_norm, m->lm_head, NULL, 1,
                         D, rows);
    else
        e->be->matmul(out, e->xn + (size_t)t * D, m->lm_head, NULL, 1, D, rows);
}

/* the logits of row t of the chunk (the last, t = T - 1, for a forward's next token): every
 * rank's vocab slice gathered into logits */
static void head_forward(struct ls_engine *e, int t)
{
    const struct ls_backend *be = e->be;
    const struct ls_model *m = e->m;
    /* the whole vocabulary is this rank's at TP = 1 */
    head_matmul(e, t, m->tp == 1 ? e->logits : e->logits_local);
    if (m->tp == 1) return;
    e->comm->allgather(e->comm, e->logits_local, e->logits_all, (size_t)e->vpad, LS_F32, e->stream);
    if (e->logits == e->logits_all) return;
    for (int r = 0; r < m->tp; r++)
        be->copy(e->logits + m->plan[r].vocab_first, e->logits_all + (size_t)r * e->vpad,
                 (size_t)m->plan[r].vocab_rows * sizeof(float));
}

/* the forward of T positions whose ids and positions are in e->ids and e->posb, up to the final
 * norm's input (the layers) */
static void chunk_layers(struct ls_engine *e, int T, int pos0)
{
    const struct ls_model *m = e->m;
    const int n = m->cfg.n_layers;
    e->be->embed(e->x, m->embed, e->ids, T, m->cfg.dim);
    if (!norm_in_matmul(e))
        e->be->rmsnorm(e->xn, e->x, m->layers[0].attn_norm, T, m->cfg.dim, m->cfg.norm_eps);
    for (int l = 0; l < n; l++)
        layer_forward(e, l, T, pos0, l + 1 < n ? m->layers[l + 1].attn_norm : m->final_norm);
    e->xpend = mlp_fused_at(e, T) ? e->pend : NULL;
}

/* ... and the logits of its last position */
static void chunk_forward(struct ls_engine *e, int T, int pos0)
{
    chunk_layers(e, T, pos0);
    head_forward(e, T - 1);
}

/* the backend's decode form for a step at position pos (0 where it has one form) */
static int decode_form_at(struct ls_engine *e, int pos)
{
    const struct ls_shard *sh = &e->m->shard;
    const int f = e->be->decode_form ? e->be->decode_form(pos + 1, sh->q_heads, sh->kv_heads,
                                                          e->m->cfg.head_dim, e->max_ctx)
                                     : 0;
    return f > 0 && f < LS_DECODE_FORMS ? f : 0;
}

/* what ls_engine_score asks of forward_chunks */
struct score_req {
    int top_n;
    void (*each)(void *ctx, int t, const struct ls_scores *s);
    void *ctx;
};

/* the scoring buffers (score_rows positions a head product), on every rank or none: a rank
 * without the memory says so with the numbers, and every rank returns -1 with err */
static int score_alloc(struct ls_engine *e, char *err, size_t errlen)
{
    if (e->srows) return 0;
    const struct ls_backend *be = e->be;
    const int tp = e->m->tp, R = e->max_batch < SCORE_ROWS ? e->max_batch : SCORE_ROWS;
    const size_t rows_b = (size_t)R * e->m->shard.vocab_rows * sizeof(float),
                 stat_b = (size_t)R * LS_SCORE_SPLIT_MAX * SCORE_W * sizeof(double);
    e->score_rows = R;
    e->srows = be->alloc(rows_b);
    e->sstats = be->alloc(stat_b);
    e->sstats_all = be->alloc(stat_b * tp);
    e->stargets = be->alloc((size_t)R * sizeof(int));
    e->host_targets = malloc((size_t)R * sizeof(int));
    e->shost = malloc(stat_b * tp);
    e->shead = malloc((size_t)tp * LS_SCORE_SPLIT_MAX * sizeof(int));
    CHECK_ALLOC(e->host_targets);
    CHECK_ALLOC(e->shost);
    CHECK_ALLOC(e->shead);
    int failed = !(e->srows && e->sstats && e->sstats_all && e->stargets);
    const double need = (rows_b + stat_b * (1 + tp) + R * sizeof(int)) / 1e9;
    if (failed) {
        const size_t free_b = be->mem_free ? be->mem_free() : 0;
        ls_error("rank %d: out of %s memory for scoring: %.3f GB needed for the LM head's "
                 "logits of %d positions at once, %.3f GB free; lower --max-context",
                 e->comm->rank, be->name, need, R, free_b / 1e9);
    }
    if (tp > 1) { /* every rank's answer (ids is free between forwards) */
        be->to_device(e->ids, &failed, sizeof failed);
        e->comm->allreduce_sum(e->comm, e->ids, 1, LS_I32, e->stream);
        be->to_host(&failed, e->ids, sizeof failed);
    }
    if (!failed) return 0;
    score_free(e);
    snprintf(err, errlen,
             "out of %s memory for scoring on %d rank%s (%.3f GB a rank for the LM head's logits "
             "of %d positions at once); lower --max-context",
             be->name, failed, failed == 1 ? "" : "s", need, R);
    return -1;
}

/* slice j (of tp x S: rank j / S, its slice j % S) of row r's scores in st[tp][R][S][W] */
static const double *score_entry(const double *st, int R, int S, int W, int r, int j)
{
    return st + (((size_t)(j / S) * R + r) * S + j % S) * W;
}

/* see engine.h */
void ls_scores_combine(const double *st, int tp, int R, int S, int r, int N, struct ls_scores *s,
                       int *head, int *ids, double *vals)
{
    const int W = LS_SCORE_W(N), J = tp * S;
    double mx = -INFINITY, sum = 0.0, target = -INFINITY;
    for (int j = 0; j < J; j++) {
        const double *o = score_entry(st, R, S, W, r, j);
        if (o[0] > mx) mx = o[0];
        if (o[2] > target) target = o[2];
    }
    for (int j = 0; j < J; j++) {
        const double *o = score_entry(st, R, S, W, r, j);
        if (o[1] > 0.0) sum += J == 1 ? o[1] : o[1] * exp(o[0] - mx);
    }
    memset(head, 0, (size_t)J * sizeof *head);
    for (int k = 0; k < N; k++) {
        int best = -1;
        double bv = -INFINITY, bid = -1.0;
        for (int j = 0; j < J; j++) {
            const double *o = score_entry(st, R, S, W, r, j);
            if (head[j] >= N || o[3 + N + head[j]] < 0.0) continue;
            const double v = o[3 + head[j]], id = o[3 + N + head[j]];
            if (best < 0 || v > bv || (v == bv && id < bid)) best = j, bv = v, bid = id;
        }
        if (best >= 0) head[best]++;
        ids[k] = best >= 0 ? (int)bid : -1;
        vals[k] = best >= 0 ? bv : -INFINITY;
    }
    s->lse = mx + log(sum);
    s->target = target;
    s->n_top = N;
    s->top_ids = ids;
    s->top_logits = vals;
}

/* the slices the backend cuts each of rows rows of n logits into for their scores */
static int score_split(const struct ls_engine *e, int rows, int n)
{
    const int s = e->be->score_split ? e->be->score_split(rows, n) : 1;
    return s < 1 ? 1 : s > LS_SCORE_SPLIT_MAX ? LS_SCORE_SPLIT_MAX : s;
}

/* the scores of the chunk's T positions (its first at done of ids[0..n)), from the layers'
 * output: the LM head over up to score_rows positions at once, each row's scores in the backend,
 * every rank's gathered, combined and handed to each in order */
static void score_chunk(struct ls_engine *e, const int *ids, int n, int done, int T,
                        const struct score_req *q)
{
    const struct ls_backend *be = e->be;
    const struct ls_model *m = e->m;
    const int D = m->cfg.dim, rows = m->shard.vocab_rows, tp = m->tp, N = q->top_n, W = LS_SCORE_W(N),
              first = m->plan[e->comm->rank].vocab_first;
    int top_ids[LS_SCORE_TOP_MAX];
    double top_vals[LS_SCORE_TOP_MAX];
    for (int r0 = 0; r0 < T; r0 += e->score_rows) {
        const int R = T - r0 < e->score_rows ? T - r0 : e->score_rows;
        if (norm_in_matmul(e))
            matmul_rmsnorm_x(e, e->srows, e->x + (size_t)r0 * D, e->xpend, m->final_norm,
                             m->lm_head, NULL, R, D, rows);
        else
            be->matmul(e->srows, e->xn + (size_t)r0 * D, m->lm_head, NULL, R, D, rows);
        for (int i = 0; i < R; i++) {
            const int t = done + r0 + i;
            e->host_targets[i] = t + 1 < n ? ids[t + 1] : -1;
        }
        be->to_device(e->stargets, e->host_targets, (size_t)R * sizeof(int));
        /* the same slices on every rank: from the largest vocabulary slice */
        const int S = score_split(e, R, e->vpad);
        be->row_logprobs(e->sstats, e->srows, R, rows, (size_t)rows, e->stargets, first, N, S);
        const double *st = e->sstats;
        if (tp > 1) {
            /* doubles moved as pairs of 32-bit words: a copy, no arithmetic */
            e->comm->allgather(e->comm, e->sstats, e->sstats_all, (size_t)R * S * W * 2, LS_I32,
                               e->stream);
            st = e->sstats_all;
        }
        be->to_host(e->shost, st, (size_t)tp * R * S * W * sizeof(double));
        for (int i = 0; i < R; i++) {
            struct ls_scores sc;
            ls_scores_combine(e->shost, tp, R, S, i, N, &sc, e->shead, top_ids, top_vals);
            q->each(q->ctx, done + r0 + i, &sc);
        }
    }
}

/* ids[0..n) at the current position in chunks of max_batch, the last position's logits left in
 * logits (host); q != NULL: every position's scores too */
static int forward_chunks(struct ls_engine *e, const int *ids, int n, float *logits,
                          const struct score_req *q)
{
    if (n <= 0 || e->pos + n > e->max_ctx) return -1;
    ahead_stop(e);
    e->graph_synced = 0;
    e->pen_pos = -1;
    for (int done = 0; done < n;) {
        int T = n - done < e->max_batch ? n - done : e->max_batch;
        /* one position (a step that takes its logits to the host): the form the decode graph
         * would replay at this context; a chunk of positions: the first form */
        if (e->be->set_decode_form) e->be->set_decode_form(T == 1 ? decode_form_at(e, e->pos) : 0);
        for (int t = 0; t < T; t++) e->host_pos[t] = e->pos + t;
        e->be->to_device(e->posb, e->host_pos, (size_t)T * sizeof(int));
        e->be->to_device(e->ids, ids + done, (size_t)T * sizeof(int));
        chunk_layers(e, T, e->pos);
        if (q) score_chunk(e, ids, n, done, T, q);
        /* the next token's logits as the plain forward takes them (the same bits) */
        if (done + T == n) head_forward(e, T - 1);
        e->pos += T;
        done += T;
    }
    e->be->to_host(logits, e->logits, (size_t)e->m->cfg.vocab * sizeof(float));
    return 0;
}

int ls_engine_forward(struct ls_engine *e, const int *ids, int n, float *logits)
{
    return forward_chunks(e, ids, n, logits, NULL);
}

int ls_engine_score(struct ls_engine *e, const int *ids, int n, int top_n, float *logits,
                    void (*each)(void *ctx, int t, const struct ls_scores *s), void *ctx, char *err,
                    size_t errlen)
{
    if (top_n < 0 || top_n > LS_SCORE_TOP_MAX) {
        snprintf(err, errlen, "the most likely tokens to list: %d, expected 0 to %d", top_n,
                 LS_SCORE_TOP_MAX);
        return -2;
    }
    if (score_alloc(e, err, errlen) != 0) return -2;
    const struct score_req q = {.top_n = top_n, .each = each, .ctx = ctx};
    if (forward_chunks(e, ids, n, logits, &q) != 0) {
        snprintf(err, errlen, "%d positions from position %d do not fit the context of %d", n,
                 e->pos, e->max_ctx);
        return -1;
    }
    return 0;
}

/* the token that follows the logits in e->logits, into ids[0]: sp's logit bias and penalties
 * first (the token in ids[0] at posb[0] joining their window), then argmax at temperature 0,
 * else the draw with u */
static void choose_into_ids(struct ls_engine *e, const struct ls_sampling *sp)
{
    const int V = e->m->cfg.vocab;
    const float *lg = e->logits;
    if (ls_sampling_adjusted(sp)) {
        e->be->penalize(e->plogits, e->logits, ls_sampling_biased(sp) ? e->pbias : NULL, V,
                        e->pcount, e->phist, e->ids, e->posb, sp->penalty_last_n,
                        sp->repetition_penalty, sp->presence_penalty, sp->frequency_penalty);
        lg = e->plogits;
    }
    if (sp->temperature == 0.0f)
        e->be->argmax(e->ids, lg, V);
    else
        e->be->sample(e->ids, lg, V, sp->temperature, sp->top_k, sp->top_p, sp->min_p, e->u,
                      e->sample_ws);
}

/* Whether a decode step's token is the plain greedy choice: the argmax of the model's logits
 * (no logit bias, penalties or scores). Such a step takes it in one of two ways, where the
 * backend and the switches allow:
 * - local_greedy (TP > 1): each rank's largest logit and its id into its slot of pairs, one
 *   all-reduce of 2 x tp floats (the other slots 0: the sum is exact) and the pick on every
 *   rank, in place of the all-gather of the whole row (at TP=2 on the 8B 512 KB, 9.1 us of
 *   NCCL a step) and the argmax over it. The same token as the row's argmax (the largest
 *   logit, the lowest id on ties); the row's logits are then left ungathered, which only a
 *   scored step reads. LOCKSTEP_ARGMAX_LOCAL=0: off.
 * - head_argmax (TP = 1): the argmax in the LM head's epilogue, taken by the step's advance, no
 *   kernel of its own (the backend's matmul_argmax; LOCKSTEP_ARGMAX_FOLD=0: off). */
static int plain_greedy(const struct ls_sampling *sp, int top_n)
{
    return sp->temperature == 0.0f && !ls_sampling_adjusted(sp) && top_n < 0;
}

static int local_greedy(const struct ls_engine *e)
{
    static int on = -2;
    return e->pairs && e->m->cfg.vocab <= LS_ARGMAX_PAIRS_MAX_ID &&
           switch_on("LOCKSTEP_ARGMAX_LOCAL", 1, &on);
}

/* the LM head of the last chunk's last position (one position) into out with the greedy
 * choice in it, for the step's advance to take; 0 where the backend does not take it (nothing
 * done) */
static int head_argmax(struct ls_engine *e, float *out)
{
    static int on = -2;
    const struct ls_model *m = e->m;
    if (!e->be->matmul_argmax || !switch_on("LOCKSTEP_ARGMAX_FOLD", 1, &on)) return 0;
    const int nin = norm_in_matmul(e);
    return e->be->matmul_argmax(out, nin ? e->x : e->xn, nin ? e->xpend : NULL,
                                nin ? m->final_norm : NULL, m->cfg.norm_eps, m->lm_head, m->cfg.dim,
                                m->shard.vocab_rows);
}

/* the decode step: reads ids[0] at posb[0], writes the next token to ids[0] (argmax at
 * temperature 0, else drawn with the draw in u), its scores to dstats where top_n >= 0 (the
 * whole vocabulary's logits are on every rank), advances */
static void decode_step(struct ls_engine *e, const struct ls_sampling *sp, int top_n)
{
    const int V = e->m->cfg.vocab, post = posting(e), S = score_split(e, 1, V);
    const struct ls_model *m = e->m;
    int folded = 0; /* the token chosen in the LM head, for the advance to take */
    if (plain_greedy(sp, top_n) && m->tp == 1) {
        chunk_layers(e, 1, e->pos);
        folded = head_argmax(e, e->logits);
        if (!folded) {
            head_forward(e, 0);
            choose_into_ids(e, sp);
        }
    } else if (plain_greedy(sp, top_n) && local_greedy(e)) {
        const int r = e->comm->rank;
        chunk_layers(e, 1, e->pos);
        head_matmul(e, 0, e->logits_local);
        e->be->argmax_pairs(e->pairs, e->logits_local, m->plan[r].vocab_rows,
                            m->plan[r].vocab_first, r, m->tp);
        e->comm->allreduce_sum(e->comm, e->pairs, (size_t)m->tp * 2, LS_F32, e->stream);
        e->be->argmax_pick(e->ids, e->pairs, m->tp);
    } else {
        chunk_forward(e, 1, e->pos);
        choose_into_ids(e, sp);
    }
    if (top_n >= 0) {
        e->be->row_logprobs(e->dstats, e->logits, 1, V, (size_t)V, e->ids, 0, top_n, S);
        /* posted with the token where it is polled for (as it is where posting) */
        if (post && ahead_scored(e)) e->be->scores_post(e->posb, e->dstats, S * LS_SCORE_W(top_n));
    }
    e->be->advance(e->posb, post ? e->ids : NULL,
                   post && sp->temperature != 0.0f && ahead_drawn() ? e->u : NULL,
                   folded ? e->ids : NULL);
}

/* whether a graph captured for a chooses as b would (a logit bias's values and the allowed
 * tokens are in the backend's memory, not in the graph: only whether there are any matters) */
static int same_choice(const struct ls_sampling *a, const struct ls_sampling *b)
{
    if (ls_sampling_biased(a) != ls_sampling_biased(b) ||
        a->repetition_penalty != b->repetition_penalty ||
        a->presence_penalty != b->presence_penalty ||
        a->frequency_penalty != b->frequency_penalty ||
        (ls_sampling_penalized(a) && a->penalty_last_n != b->penalty_last_n))
        return 0;
    if (a->temperature == 0.0f || b->temperature == 0.0f) return a->temperature == b->temperature;
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p &&
           a->min_p == b->min_p;
}

/* the penalties' window for a step at position p from the caller's history (hist[0..p]): the
 * counts of positions [max(0, p - last_n), p) and their tokens, which the step's penalize then
 * moves on by one */
static void pen_sync(struct ls_engine *e, const int *hist, int p, int last_n)
{
    const int V = e->m->cfg.vocab, from = last_n > 0 && p > last_n ? p - last_n : 0;
    int *count = calloc((size_t)V, sizeof *count);
    CHECK_ALLOC(count);
    for (int i = from; i < p; i++)
        if (hist[i] >= 0 && hist[i] < V) count[hist[i]]++;
    e->be->to_device(e->pcount, count, (size_t)V * sizeof *count);
    if (p > from) e->be->to_device(e->phist + from, hist + from, (size_t)(p - from) * sizeof *hist);
    free(count);
}

/* whether a and b give the same bias vector (the same lists in the same order) */
static int same_vector(const struct ls_sampling *a, const struct ls_sampling *b)
{
    const size_t nb = (size_t)a->n_bias, na = (size_t)a->n_allowed;
    return a->n_bias == b->n_bias && a->n_allowed == b->n_allowed &&
           !memcmp(a->bias_id, b->bias_id, nb * sizeof *a->bias_id) &&
           !memcmp(a->bias, b->bias, nb * sizeof *a->bias) &&
           !memcmp(a->allowed_id, b->allowed_id, na * sizeof *a->allowed_id);
}

/* sp's logit bias and allowed tokens into the backend (a vocab-wide vector: zero where neither
 * says anything, -inf outside the allowed tokens), when it is not the vector the backend holds
 * already; the buffer at its first use (before any capture) */
static void bias_sync(struct ls_engine *e, const struct ls_sampling *sp)
{
    const struct ls_backend *be = e->be;
    const int V = e->m->cfg.vocab;
    if (e->bias_sent && same_vector(e->bias_sent, sp)) return;
    float *dense = calloc((size_t)V, sizeof *dense);
    CHECK_ALLOC(dense);
    ls_sampling_apply_bias(sp, dense, V);
    be->to_device(e->pbias, dense, (size_t)V * sizeof *dense);
    free(dense);
    if (!e->bias_sent) e->bias_sent = malloc(sizeof *e->bias_sent);
    CHECK_ALLOC(e->bias_sent);
    *e->bias_sent = *sp;
}

/* sp's state in the backend before a token is chosen for position p + 1 (the step at p): the
 * draw's buffers and uniform number, the bias vector, and the penalties' window for a step at p
 * (sent again from hist unless the backend's is that one). Returns whether sp penalises (the
 * window is kept for a bias alone too); then choice_done records the window's move. */
static int choice_prepare(struct ls_engine *e, const struct ls_sampling *sp, double u,
                          const int *hist, int p, const char *who)
{
    if (sp->temperature != 0.0f) e->be->to_device(e->u, &u, sizeof u);
    if (ls_sampling_biased(sp)) bias_sync(e, sp);
    const int penalized = ls_sampling_adjusted(sp);
    if (penalized) {
        if (!hist) ls_die(__FILE__, __LINE__, who, "penalties need the history");
        if (e->pen_pos != p || e->pen_last_n != sp->penalty_last_n)
            pen_sync(e, hist, p, sp->penalty_last_n);
    }
    return penalized;
}

/* the window now holds the chosen token's position: valid for a step at e->pos */
static void choice_done(struct ls_engine *e, const struct ls_sampling *sp, int penalized)
{
    if (!penalized) return;
    e->pen_pos = e->pos;
    e->pen_last_n = sp->penalty_last_n;
}

int ls_engine_decode_scored(struct ls_engine *e, int in, const struct ls_sampling *sp, double u,
                            const int *hist, int top_n, int *out, struct ls_scores *s, int *top_ids,
                            double *top_logits)
{
    const struct ls_backend *be = e->be;
    struct ls_sampling greedy = {.repetition_penalty = 1.0f}; /* no penalty */
    if (!sp) sp = &greedy;
    if (e->pos + 1 > e->max_ctx) return -1;
    if (top_n > LS_SCORE_TOP_MAX) top_n = LS_SCORE_TOP_MAX;
    /* the backend's form for this context (one graph each, captured when first needed) */
    const int form = decode_form_at(e, e->pos);
    /* a step issued ahead by the last call (at this position, in this form: it checked): this
     * one, if it continues that call */
    const int planned = e->plan > 0;
    if (e->plan > 0) e->plan--;
    const int drawn = sp->temperature != 0.0f, may = ahead_choice(e, sp, top_n);
    const int taken = e->ahead_live && planned && in == e->last_out && may &&
                      same_choice(&e->ahead_sp, sp) && e->ahead_top == top_n &&
                      (!drawn || u == e->u_posted[e->pos & 1]) &&
                      (!ls_sampling_biased(sp) || (e->bias_sent && same_vector(e->bias_sent, sp)));
    if (!taken) {
        ahead_drop(e);
        /* a slot may hold this position's post from another sequence (the last request's, the
         * warm-up's: a request whose prompt is as long as the warm-up's would poll it at once,
         * before its own step ran); nothing is in flight now */
        if (be->posts_clear && posting(e)) be->posts_clear();
    }
    /* the next step issued ahead where the caller planned one more call and it would run in
     * this form (each step posts its token, in the step) */
    const int ahead =
        e->plan > 0 && may && e->pos + 2 <= e->max_ctx && decode_form_at(e, e->pos + 1) == form;
    if (!e->plan) e->plan_smp = NULL; /* the plan's last call: its sampler no longer needed */
    /* a drawn step hands the next one its number (a step taken was handed its own and given
     * the next's by the call that issued it) */
    if (ahead && drawn && !taken) u_post(e, e->pos + 1, 1);
    if (!e->graph_synced) {
        e->host_pos[0] = e->pos;
        be->to_device(e->posb, e->host_pos, sizeof(int));
        be->to_device(e->ids, &in, sizeof(int));
        e->graph_synced = 1;
    } else if (in != e->last_out) {
        /* the previous step left its token in ids[0]; the caller chose another one */
        be->to_device(e->ids, &in, sizeof(int));
    }
    const int penalized = taken ? ls_sampling_adjusted(sp)
                                : choice_prepare(e, sp, u, hist, e->pos, "ls_engine_decode");
    /* a step that never ends (a peer hangs in a collective, a device hangs) ends the rank */
    ls_watchdog_arm("decode step at position", e->pos);
    if (be->set_decode_form) be->set_decode_form(form);
    if (taken) {
        e->ahead_live = 0; /* issued by the last call */
        e->gstats.ahead_taken++;
    } else if (be->graph_begin) {
        /* captured again when the choice changes: into the same graph where the launches are
         * the same with other values (a new temperature, top-p, penalty) */
        if (!e->graph[form] || !same_choice(&e->graph_sp[form], sp) ||
            e->graph_top[form] != top_n) {
            const double t0 = ls_now_s();
            int updated = 0;
            be->graph_begin();
            decode_step(e, sp, top_n);
            e->graph[form] = be->graph_end(e->graph[form], &updated);
            e->graph_sp[form] = *sp;
            e->graph_top[form] = top_n;
            e->gstats.updated += updated;
            e->gstats.built += !updated;
            e->gstats.seconds += ls_now_s() - t0;
        }
        be->graph_launch(e->graph[form]);
    } else {
        decode_step(e, sp, top_n);
    }
    if (ahead) {
        if (drawn) u_post(e, e->pos + 2, 2);
        e->ahead_sp = *sp;
        e->ahead_top = top_n;
        if (be->graph_begin) {
            be->graph_launch(e->graph[form]);
        } else { /* eager: the forward takes the host's position */
            e->pos += 1;
            decode_step(e, sp, top_n);
            e->pos -= 1;
        }
        e->ahead_live = 1;
    }
    /* every step posts its token (and scores) where steps may be issued ahead: polled for, no
     * copy */
    const int polled = taken || ahead || (posting(e) && !(lab_skip(e) & LAB_READ));
    if (polled)
        *out = be->token_take(e->pos);
    else if (!(lab_skip(e) & LAB_READ) || top_n >= 0)
        be->to_host(out, e->ids, sizeof(int));
    if (top_n >= 0) {
        const int S = score_split(e, 1, e->m->cfg.vocab), n = S * LS_SCORE_W(top_n);
        double o[LS_SCORE_SPLIT_MAX * SCORE_W];
        int head[LS_SCORE_SPLIT_MAX];
        if (polled && ahead_scored(e))
            be->scores_take(e->pos, o, n);
        else
            be->to_host(o, e->dstats, (size_t)n * sizeof(double));
        ls_scores_combine(o, 1, 1, S, 0, top_n, s, head, top_ids, top_logits);
    }
    ls_watchdog_disarm();
    e->last_out = *out;
    e->pos += 1;
    choice_done(e, sp, penalized);
    return 0;
}

int ls_engine_choose(struct ls_engine *e, const struct ls_sampling *sp, double u, const int *hist,
                     const float *logits, int *out)
{
    const struct ls_backend *be = e->be;
    const int V = e->m->cfg.vocab, p = e->pos - 1;
    if (p < 0 || !hist) return -1;
    ahead_stop(e);
    if (logits) be->to_device(e->logits, logits, (size_t)V * sizeof *logits);
    /* the window before position p, which penalize moves on by the token at p */
    const int penalized = choice_prepare(e, sp, u, hist, p, "ls_engine_choose");
    if (penalized) {
        be->to_device(e->ids, &hist[p], sizeof(int));
        be->to_device(e->posb, &p, sizeof(int));
    }
    choose_into_ids(e, sp);
    be->to_host(out, e->ids, sizeof(int));
    e->graph_synced = 0; /* ids and posb hold this choice's, not the next step's */
    choice_done(e, sp, penalized);
    return 0;
}

int ls_engine_decode(struct ls_engine *e, int in, const struct ls_sampling *sp, double u,
                     const int *hist, int *out)
{
    return ls_engine_decode_scored(e, in, sp, u, hist, -1, out, NULL, NULL, NULL);
}

int ls_engine_decode_greedy(struct ls_engine *e, int in, int *out)
{
    return ls_engine_decode(e, in, NULL, 0.0, NULL, out);
}

int ls_engine_warmup(struct ls_engine *e, int n)
{
    const int V = e->m->cfg.vocab;
    if (n > e->max_ctx - 1) n = e->max_ctx - 1;
    if (n > V) n = V;
    if (n < 1) return -1;
    int *ids = malloc((size_t)n * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    CHECK_ALLOC(ids);
    CHECK_ALLOC(logits);
    for (int i = 0; i < n; i++) ids[i] = i;
    const struct ls_sampling drawn = {
        .temperature = 1.0f, .top_p = 0.9f, .repetition_penalty = 1.0f};
    int next = 0, out = 0;
    ls_engine_reset(e);
    ls_engine_forward(e, ids, n, logits);
    ls_engine_choose(e, &drawn, 0.5, ids, NULL, &next);
    ls_engine_decode_greedy(e, next, &out);
    ls_engine_reset(e);
    e->gstats = (struct ls_graph_stats){0}; /* the requests' captures, from here */
    free(ids);
    free(logits);
    return 0;
}
