/* A model as one rank holds it: the config, the rank's shard plan, and the weights of its shard
 * in the backend's memory and format (matrices `void *`: fp32 on the CPU, bf16 on the GPU;
 * vectors fp32). Loading reads only the rank's byte ranges of
 * each tensor from the GGUF or safetensors file(s): column-parallel weights (q, k, v, gate, up,
 * LM head) as row ranges, row-parallel weights (o, down) as column ranges. The embedding table
 * and the norms are replicated. */
#ifndef LOCKSTEP_MODEL_H
#define LOCKSTEP_MODEL_H

#include "model_config.h"
#include "plan.h"

#include <stddef.h>

struct tokenizer;
struct ls_backend;

struct ls_layer {
    float *attn_norm;       /* [dim] */
    void *wqkv;             /* [(q_heads + 2 * kv_heads) * head_dim, dim]: q rows, then k, then v */
    float *bqkv;            /* [(q_heads + 2 * kv_heads) * head_dim] (qwen2) or NULL */
    float *q_norm, *k_norm; /* [head_dim] (qwen3) or NULL */
    void *wo;               /* [dim, q_heads * head_dim] */
    float *ffn_norm;        /* [dim] */
    void *w_gu;             /* [2 * ffn_cols, dim]: gate rows, then up rows */
    void *w_down;           /* [dim, ffn_cols]; [ffn_cols, dim] where down_transposed */
};

struct ls_model {
    struct ls_model_config cfg;
    struct ls_shard shard; /* this rank's */
    struct ls_shard *plan; /* every rank's [tp] (for gathering the vocab slices) */
    int tp;
    char path[4096];
    char format[16];             /* "gguf" or "safetensors" */
    const struct ls_backend *be; /* owner of the weights */
    void *embed;                 /* [vocab, dim], replicated */
    float *final_norm;           /* [dim] */
    void *lm_head;               /* [vocab_rows, dim]; points into embed when tied */
    float *inv_freq;             /* [head_dim / 2] (backend memory), RoPE frequencies, scaled */
    struct ls_layer *layers;     /* [n_layers] */
    struct tokenizer *tok;       /* NULL for models without one (tiny fixtures) */
    size_t bytes_read;           /* bytes of weights this rank read */
    int down_transposed; /* every w_down stored transposed (set by the engine's fused MLP) */
};

/* Loads the shard of `rank` of `tp`. path: a .gguf file, or a folder / .safetensors file with
 * config.json beside it. Returns NULL with a message naming the file and the field or tensor. */
struct ls_model *ls_model_load(const char *path, int rank, int tp, const struct ls_backend *be,
                               int show_progress, char *err, size_t errlen);
void ls_model_free(struct ls_model *m);

#endif
