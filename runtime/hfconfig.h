/* Hugging Face config.json -> struct ls_model_config, for the decoder-only architectures the
 * forward implements: Llama, Mistral, Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm). Reads both
 * layouts transformers writes: v4 (rope_theta, rope_scaling at the top level) and v5
 * (rope_parameters {rope_type, rope_theta, ...}). A missing required field, a field of the
 * wrong type, an unsupported architecture or feature, and inconsistent sizes are errors whose
 * message names the file, the field, what was expected and what was found. */
#ifndef LOCKSTEP_HFCONFIG_H
#define LOCKSTEP_HFCONFIG_H

#include <stddef.h>

#include "model_config.h"

/* what a loaded config stays within: any dimension, vocabulary or context length; layers */
#define LS_HF_MAX_SIZE   (1 << 24)
#define LS_HF_MAX_LAYERS 4096

/* path: a config.json. Returns 0, or -1 with a message in err (out is then unspecified).
 * Sliding-window attention (Mistral's sliding_window, Qwen's use_sliding_window/layer_types)
 * is exact as full attention while the context fits in the window, so a window smaller than
 * max_position_embeddings lowers out->max_pos to the window, with a warning. */
int hf_config_load(const char *path, struct ls_model_config *out, char *err, size_t errlen);

/* The same from the text of a config.json (len bytes, not NUL-terminated); name stands for the
 * file in messages. For the fuzz target and callers that hold the text already. */
int hf_config_parse(const char *name, const char *text, size_t len, struct ls_model_config *out,
                    char *err, size_t errlen);

/* dir: a model folder. Loads dir/config.json, then, when dir/generation_config.json exists,
 * takes bos_token_id and eos_token_id from it where it sets them (instruct models list their
 * end-of-turn ids there, e.g. Llama 3). */
int hf_config_load_dir(const char *dir, struct ls_model_config *out, char *err, size_t errlen);

#endif
