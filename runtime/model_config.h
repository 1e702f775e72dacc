/* The shape and hyper-parameters of a decoder-only transformer, filled from an HF config.json
 * (runtime/hfconfig.c) or from GGUF metadata (runtime/model.c). Everything the forward needs
 * to know about an architecture is a field here; the forward never tests the arch name. */
#ifndef LOCKSTEP_MODEL_CONFIG_H
#define LOCKSTEP_MODEL_CONFIG_H

enum ls_rope_style {
    LS_ROPE_NEOX,        /* HF rotate_half: pairs (i, i + head_dim/2) */
    LS_ROPE_INTERLEAVED, /* GGUF llama (Q/K rows permuted by the converter): pairs (2i, 2i+1) */
};

enum ls_rope_scaling { LS_ROPE_SCALING_NONE, LS_ROPE_SCALING_LLAMA3, LS_ROPE_SCALING_LINEAR };

struct ls_model_config {
    char arch[32]; /* "llama", "mistral", "qwen2", "qwen3" */
    int n_layers;
    int dim;     /* hidden size */
    int n_heads; /* query heads */
    int n_kv_heads;
    int head_dim;
    int ffn; /* intermediate size */
    int vocab;
    int max_pos; /* max_position_embeddings / context_length */
    float norm_eps;
    float rope_theta;
    enum ls_rope_style rope_style;
    enum ls_rope_scaling rope_scaling;
    float rope_factor;           /* llama3 and linear */
    float rope_low_freq_factor;  /* llama3 */
    float rope_high_freq_factor; /* llama3 */
    int rope_orig_max_pos;       /* llama3: original_max_position_embeddings */
    int tied_embeddings;         /* lm_head shares the embedding matrix */
    int qkv_bias;                /* qwen2: q/k/v projections have biases */
    int qk_norm;                 /* qwen3: RMSNorm over each q and k head before RoPE */
    int bos_id;                  /* -1 when none */
    int eos_ids[8];              /* every id that ends generation */
    int n_eos;
};

#endif
