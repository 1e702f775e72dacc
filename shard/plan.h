/* The tensor-parallel shard plan: for a model shape and a TP size, which query heads, KV heads,
 * FFN columns and vocab rows each rank holds, and how many bytes of weights and KV cache that
 * costs it. Pure arithmetic, no I/O: the loader, the forward and `lockstep plan` all read the
 * same plan, so what the CLI prints is what the runtime allocates.
 *
 * Attention is split by KV groups (one KV head with its heads/kv_heads query heads), so a rank
 * never needs another rank's K/V:
 *   tp <= kv_heads: whole groups, as evenly as possible (ranks may differ by one group);
 *   tp >  kv_heads: tp must be a multiple of kv_heads and at most heads; each KV head is
 *                   replicated on tp/kv_heads ranks, which split its query heads evenly.
 * FFN columns and (vocab-parallel) LM-head rows are split in blocks of LS_PLAN_BLOCK, ranks
 * differing by at most one block; only the last block of the last rank may be partial.
 * The embedding table, the RMSNorm vectors and the q/k norms are replicated on every rank.
 * All ranges are half-open: [first, first + count). */
#ifndef LOCKSTEP_PLAN_H
#define LOCKSTEP_PLAN_H

#include <stddef.h>

/* granularity of FFN column and vocab row splits (a whole number of GEMM tiles per rank) */
#define LS_PLAN_BLOCK 64
/* largest head_dim the runtime takes */
#define LS_PLAN_MAX_HEAD_DIM 1024

struct ls_plan_input {
    int heads;              /* query heads H */
    int kv_heads;           /* key/value heads K; H % K == 0 */
    int head_dim;           /* E */
    int dim;                /* hidden size D */
    int ffn;                /* intermediate size F */
    int vocab;              /* V */
    int layers;             /* L */
    int tp;                 /* N ranks */
    int weight_bytes;       /* bytes per weight element, norms and biases included (bf16: 2) */
    int kv_bytes;           /* bytes per KV cache element */
    int tied;               /* LM head shares the embedding matrix: no bytes of its own */
    int qkv_bias;           /* q, k, v projections carry biases (qwen2) */
    int qk_norm;            /* RMSNorm of head_dim over each q and k head (qwen3) */
    int lm_head_replicated; /* every rank holds the whole LM head instead of a vocab range */
};

/* What one rank holds. Counts are per this shard; firsts index the unsharded tensor. */
struct ls_shard {
    int rank;
    int q_first, q_heads;    /* query heads [q_first, q_first + q_heads) */
    int kv_first, kv_heads;  /* KV heads [kv_first, kv_first + kv_heads) */
    int kv_replicas;         /* ranks holding each of these KV heads (1 when tp <= kv_heads) */
    int ffn_first, ffn_cols; /* gate/up rows and down columns [ffn_first, ffn_first + ffn_cols) */
    int vocab_first, vocab_rows; /* LM head rows; [0, vocab) on every rank when replicated */
    size_t weight_bytes_layer;   /* one decoder layer's weights on this rank */
    size_t weight_bytes;         /* all weights: layers + embedding + final norm + LM head */
    size_t kv_bytes_token;       /* K and V of one token over all layers */
};

/* Fills out[0 .. in->tp - 1]. Returns 0, or -1 with a one-line message in err naming the field,
 * what was expected and what was found (and, for a TP size that cannot work, the ones that do). */
int ls_plan_make(const struct ls_plan_input *in, struct ls_shard *out, char *err, size_t errlen);

/* The shard of one rank, same checks and errors as ls_plan_make. */
int ls_plan_for_rank(const struct ls_plan_input *in, int rank, struct ls_shard *out, char *err,
                     size_t errlen);

/* The runtime's rule for head_dim, shared by the plan and the model loader: even (RoPE rotates
 * pairs of dimensions) and at most LS_PLAN_MAX_HEAD_DIM. Returns 0, or -1 with a message in err
 * naming head_dim, what was expected and what was found. */
int ls_plan_check_head_dim(int head_dim, char *err, size_t errlen);

/* Whether tp splits the attention of (heads, kv_heads) by KV groups; 0 for invalid shapes. */
int ls_plan_attn_tp_ok(int heads, int kv_heads, int tp);

/* TP sizes for which ls_plan_make succeeds on this input (in->tp ignored), ascending. Writes at
 * most max of them into sizes and returns how many there are in all; -1 if the shape itself is
 * invalid whatever the TP size. */
int ls_plan_valid_tp(const struct ls_plan_input *in, int *sizes, int max);

/* Bytes of all weights of the unsharded model (the tp = 1 plan), for comparing with the sum
 * over ranks; 0 when the input is invalid or the count overflows. */
size_t ls_plan_unsharded_bytes(const struct ls_plan_input *in);

#endif
