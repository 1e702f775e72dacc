/* See engine.h. The forward reads top to bottom: one line per operation, the two tensor-
 * parallel all-reduces per layer as their own lines. Activations are [T][width] for the chunk
 * of T positions; the KV cache of each layer is [max_ctx][kv_heads_local][head_dim]. */
#include "config.h"
#include "engine.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ls_engine {
    struct ls_model *m;
    struct ls_comm *comm;
    const struct ls_backend *be;
    void *stream;        /* the backend's stream, for the collectives */
    int max_ctx, max_batch, pos;
    int vpad;            /* vocab rows per rank in the gather (the largest slice) */
    int *kv_of;          /* [q_heads]: local KV head of each local query head */
    int *pos_ids;        /* [max_batch] */
    float *x, *xn;       /* [max_batch][dim] residual stream and its norm */
    float *q;            /* [max_batch][q_heads * head_dim] */
    float *k, *v;        /* [max_batch][kv_heads * head_dim] */
    float *att;          /* [max_batch][q_heads * head_dim] */
    float *proj;         /* [max_batch][dim] partial sums before each all-reduce */
    float *gate, *up;    /* [max_batch][ffn_cols] */
    float *logits_local; /* [vpad] */
    float *logits_all;   /* [tp][vpad] */
    void **kc, **vc;     /* [n_layers] -> [max_ctx][kv_heads][head_dim], backend format */
};

static float *balloc(struct ls_engine *e, size_t n, int *failed)
{
    float *p = e->be->alloc(n * sizeof(float));
    if (!p) *failed = 1;
    return p;
}

struct ls_engine *ls_engine_new(struct ls_model *m, struct ls_comm *comm, const struct ls_backend *be,
                                int max_ctx, int max_batch, char *err, size_t errlen)
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
    e->max_batch = max_batch;
    for (int r = 0; r < m->tp; r++)
        if (m->plan[r].vocab_rows > e->vpad) e->vpad = m->plan[r].vocab_rows;
    int hd = c->head_dim, qd = s->q_heads * hd, kd = s->kv_heads * hd, D = c->dim, F = s->ffn_cols;
    e->kv_of = malloc((size_t)s->q_heads * sizeof *e->kv_of);
    e->pos_ids = malloc((size_t)max_batch * sizeof *e->pos_ids);
    CHECK_ALLOC(e->kv_of);
    CHECK_ALLOC(e->pos_ids);
    int group = c->n_heads / c->n_kv_heads;
    for (int h = 0; h < s->q_heads; h++) e->kv_of[h] = (s->q_first + h) / group - s->kv_first;
    int failed = 0;
    size_t B = (size_t)max_batch;
    e->x = balloc(e, B * D, &failed);
    e->xn = balloc(e, B * D, &failed);
    e->q = balloc(e, B * qd, &failed);
    e->k = balloc(e, B * kd, &failed);
    e->v = balloc(e, B * kd, &failed);
    e->att = balloc(e, B * qd, &failed);
    e->proj = balloc(e, B * D, &failed);
    e->gate = balloc(e, B * F, &failed);
    e->up = balloc(e, B * F, &failed);
    e->logits_local = balloc(e, (size_t)e->vpad, &failed);
    e->logits_all = balloc(e, (size_t)e->vpad * m->tp, &failed);
    e->kc = calloc((size_t)c->n_layers, sizeof *e->kc);
    e->vc = calloc((size_t)c->n_layers, sizeof *e->vc);
    CHECK_ALLOC(e->kc);
    CHECK_ALLOC(e->vc);
    for (int l = 0; l < c->n_layers && !failed; l++) {
        e->kc[l] = be->alloc_cache((size_t)max_ctx * kd);
        e->vc[l] = be->alloc_cache((size_t)max_ctx * kd);
        if (!e->kc[l] || !e->vc[l]) failed = 1;
    }
    if (failed) {
        double need = ((double)max_ctx * kd * 2 * c->n_layers + (double)B * (3.0 * D + 2.0 * qd + 2.0 * kd + 2.0 * F)) * 4;
        snprintf(err, errlen, "out of %s memory for the KV cache and activations: %.2f GB needed for --max-context %d; "
                 "lower --max-context", be->name, need / 1e9, max_ctx);
        ls_engine_free(e);
        return NULL;
    }
    return e;
}

void ls_engine_free(struct ls_engine *e)
{
    if (!e) return;
    const struct ls_backend *be = e->be;
    float *bufs[] = {e->x, e->xn, e->q, e->k, e->v, e->att, e->proj, e->gate, e->up, e->logits_local, e->logits_all};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(bufs[i]);
    for (int l = 0; e->kc && l < e->m->cfg.n_layers; l++) {
        if (e->kc[l]) be->free(e->kc[l]);
        if (e->vc[l]) be->free(e->vc[l]);
    }
    free(e->kc);
    free(e->vc);
    free(e->kv_of);
    free(e->pos_ids);
    free(e);
}

struct ls_comm *ls_engine_set_comm(struct ls_engine *e, struct ls_comm *comm)
{
    struct ls_comm *old = e->comm;
    e->comm = comm;
    return old;
}

void ls_engine_reset(struct ls_engine *e)
{
    e->pos = 0;
}

int ls_engine_pos(const struct ls_engine *e)
{
    return e->pos;
}

int ls_engine_max_ctx(const struct ls_engine *e)
{
    return e->max_ctx;
}

static void layer_forward(struct ls_engine *e, int l, int T)
{
    const struct ls_backend *be = e->be;
    const struct ls_model_config *c = &e->m->cfg;
    const struct ls_shard *s = &e->m->shard;
    const struct ls_layer *L = &e->m->layers[l];
    const int D = c->dim, hd = c->head_dim, hq = s->q_heads, hkv = s->kv_heads, F = s->ffn_cols;
    const int qd = hq * hd, kd = hkv * hd, rope_il = c->rope_style == LS_ROPE_INTERLEAVED;
    const float eps = c->norm_eps;

    be->rmsnorm(e->xn, e->x, L->attn_norm, T, D, eps);
    be->matmul(e->q, e->xn, L->wq, L->bq, T, D, qd);
    be->matmul(e->k, e->xn, L->wk, L->bk, T, D, kd);
    be->matmul(e->v, e->xn, L->wv, L->bv, T, D, kd);
    if (L->q_norm) be->rmsnorm(e->q, e->q, L->q_norm, T * hq, hd, eps);
    if (L->k_norm) be->rmsnorm(e->k, e->k, L->k_norm, T * hkv, hd, eps);
    be->rope(e->q, e->pos_ids, T, hq, hd, e->m->inv_freq, rope_il);
    be->rope(e->k, e->pos_ids, T, hkv, hd, e->m->inv_freq, rope_il);
    be->kv_store(e->kc[l], e->vc[l], e->k, e->v, e->pos, T, kd);
    be->attention(e->att, e->q, e->kc[l], e->vc[l], e->pos, T, hq, hkv, hd, e->kv_of);
    be->matmul(e->proj, e->att, L->wo, NULL, T, qd, D);
    e->comm->allreduce_sum(e->comm, e->proj, (size_t)T * D, LS_F32, e->stream); /* TP all-reduce: attention */
    be->add(e->x, e->proj, (size_t)T * D);

    be->rmsnorm(e->xn, e->x, L->ffn_norm, T, D, eps);
    be->matmul(e->gate, e->xn, L->w_gate, NULL, T, D, F);
    be->matmul(e->up, e->xn, L->w_up, NULL, T, D, F);
    be->swiglu(e->gate, e->gate, e->up, (size_t)T * F);
    be->matmul(e->proj, e->gate, L->w_down, NULL, T, F, D);
    e->comm->allreduce_sum(e->comm, e->proj, (size_t)T * D, LS_F32, e->stream); /* TP all-reduce: MLP */
    be->add(e->x, e->proj, (size_t)T * D);
}

/* final norm and LM head of the last position; every rank's vocab slice gathered into logits */
static void head_forward(struct ls_engine *e, int T, float *logits)
{
    const struct ls_backend *be = e->be;
    const struct ls_model *m = e->m;
    const int D = m->cfg.dim;
    float *last = e->x + (size_t)(T - 1) * D;
    be->rmsnorm(e->xn, last, m->final_norm, 1, D, m->cfg.norm_eps);
    be->matmul(e->logits_local, e->xn, m->lm_head, NULL, 1, D, m->shard.vocab_rows);
    e->comm->allgather(e->comm, e->logits_local, e->logits_all, (size_t)e->vpad, LS_F32, e->stream);
    for (int r = 0; r < m->tp; r++)
        be->to_host(logits + m->plan[r].vocab_first, e->logits_all + (size_t)r * e->vpad,
                    (size_t)m->plan[r].vocab_rows * sizeof(float));
}

int ls_engine_forward(struct ls_engine *e, const int *ids, int n, float *logits)
{
    if (n <= 0 || e->pos + n > e->max_ctx) return -1;
    for (int done = 0; done < n;) {
        int T = n - done < e->max_batch ? n - done : e->max_batch;
        for (int t = 0; t < T; t++) e->pos_ids[t] = e->pos + t;
        e->be->embed(e->x, e->m->embed, ids + done, T, e->m->cfg.dim);
        for (int l = 0; l < e->m->cfg.n_layers; l++) layer_forward(e, l, T);
        e->pos += T;
        done += T;
        if (done == n) head_forward(e, T, logits);
    }
    return 0;
}
