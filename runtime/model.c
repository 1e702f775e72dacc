/* See model.h.
 *
 * One table maps each weight to its name in both formats and to how it is sharded, so the
 * loader is a loop over that table: no per-format code paths beyond the config reader.
 * GGUF llama checkpoints have their Q/K rows permuted by the converter (rotary pairs
 * interleaved); rather than undo that, the config records LS_ROPE_INTERLEAVED and the forward
 * rotates adjacent pairs. The permutation stays inside each head, so head-wise sharding is
 * unaffected. Llama-3 rope scaling in GGUF comes as a rope_freqs tensor of per-frequency
 * divisors; HF checkpoints carry the rope_scaling parameters instead. */
#include "config.h"
#include "model.h"
#include "gguf.h"
#include "hfconfig.h"
#include "backend.h"
#include "kernels/ref.h"
#include "log.h"
#include "safetensors.h"
#include "tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where weights come from: a GGUF file, safetensors file(s), or random numbers (--dummy). */
struct source {
    struct gguf_file *g;
    struct st_model *st;
    int dummy;
    uint64_t seed;
};

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Random weights that depend only on (seed, tensor name, row, column), so every rank's shard is
 * the slice of one and the same model, whatever the TP size. Norm weights are 1; matrices are
 * uniform in +-sqrt(3 / cols) (unit variance of outputs for unit inputs), biases small. */
static void dummy_fill(const struct source *s, const char *name, int64_t full_cols, int64_t r0,
                       int64_t nr, int64_t c0, int64_t nc, float *dst)
{
    uint64_t h = s->seed * 0x9e3779b97f4a7c15ULL;
    for (const char *p = name; *p; p++) h = mix64(h ^ (uint64_t)(unsigned char)*p);
    int norm = strstr(name, "norm") != NULL, bias = strstr(name, "bias") != NULL;
    float scale = bias ? 0.02f : sqrtf(3.0f / (float)full_cols);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++) {
            float *o = dst + r * nc + c;
            if (norm) {
                *o = 1.0f;
                continue;
            }
            uint64_t x = mix64(h + (uint64_t)((r0 + r) * full_cols + c0 + c));
            *o = scale * (float)((double)(x >> 11) * (2.0 / 9007199254740992.0) - 1.0);
        }
}

static int src_shape(struct source *s, const char *name, int64_t *rows, int64_t *cols)
{
    return s->g ? gguf_tensor_shape(s->g, name, rows, cols)
                : st_tensor_shape(s->st, name, rows, cols);
}

static int src_read(struct source *s, const char *name, int64_t full_cols, int64_t r0, int64_t nr,
                    int64_t c0, int64_t nc, float *dst, char *err, size_t errlen)
{
    if (s->dummy) {
        dummy_fill(s, name, full_cols, r0, nr, c0, nc, dst);
        return 0;
    }
    return s->g ? gguf_read_f32(s->g, name, r0, nr, c0, nc, dst, err, errlen)
                : st_read_f32(s->st, name, r0, nr, c0, nc, dst, err, errlen);
}

/* ---------------------------------------------------------------- --dummy presets ---- */

static const struct {
    const char *name;
    struct ls_model_config c;
} presets[] = {
    {"llama-3.1-8b",
     {.arch = "llama",
      .n_layers = 32,
      .dim = 4096,
      .n_heads = 32,
      .n_kv_heads = 8,
      .head_dim = 128,
      .ffn = 14336,
      .vocab = 128256,
      .max_pos = 131072,
      .norm_eps = 1e-5f,
      .rope_theta = 500000.0f,
      .rope_scaling = LS_ROPE_SCALING_LLAMA3,
      .rope_factor = 8.0f,
      .rope_low_freq_factor = 1.0f,
      .rope_high_freq_factor = 4.0f,
      .rope_orig_max_pos = 8192,
      .bos_id = 128000,
      .eos_ids = {128001, 128008, 128009},
      .n_eos = 3}},
    {"llama-3.1-70b",
     {.arch = "llama",
      .n_layers = 80,
      .dim = 8192,
      .n_heads = 64,
      .n_kv_heads = 8,
      .head_dim = 128,
      .ffn = 28672,
      .vocab = 128256,
      .max_pos = 131072,
      .norm_eps = 1e-5f,
      .rope_theta = 500000.0f,
      .rope_scaling = LS_ROPE_SCALING_LLAMA3,
      .rope_factor = 8.0f,
      .rope_low_freq_factor = 1.0f,
      .rope_high_freq_factor = 4.0f,
      .rope_orig_max_pos = 8192,
      .bos_id = 128000,
      .eos_ids = {128001, 128008, 128009},
      .n_eos = 3}},
    {"qwen2.5-7b",
     {.arch = "qwen2",
      .n_layers = 28,
      .dim = 3584,
      .n_heads = 28,
      .n_kv_heads = 4,
      .head_dim = 128,
      .ffn = 18944,
      .vocab = 152064,
      .max_pos = 32768,
      .norm_eps = 1e-6f,
      .rope_theta = 1000000.0f,
      .qkv_bias = 1,
      .bos_id = -1,
      .eos_ids = {151645, 151643},
      .n_eos = 2}},
    {"smollm2-135m",
     {.arch = "llama",
      .n_layers = 30,
      .dim = 576,
      .n_heads = 9,
      .n_kv_heads = 3,
      .head_dim = 64,
      .ffn = 1536,
      .vocab = 49152,
      .max_pos = 8192,
      .norm_eps = 1e-5f,
      .rope_theta = 100000.0f,
      .tied_embeddings = 1,
      .bos_id = 1,
      .eos_ids = {2},
      .n_eos = 1}},
};

static int dummy_config(const char *what, struct ls_model_config *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(what, presets[i].name)) {
            *c = presets[i].c;
            c->rope_style = LS_ROPE_NEOX;
            return 0;
        }
    if (access(what, R_OK) == 0) return hf_config_load(what, c, err, errlen);
    snprintf(err, errlen,
             "--dummy: '%s' is neither a preset (llama-3.1-8b, llama-3.1-70b, qwen2.5-7b, "
             "smollm2-135m) nor a readable config.json",
             what);
    return -1;
}

/* ---------------------------------------------------------------- config from GGUF ---- */

/* what a metadata key holds, for messages: "nothing (missing)" or "VALUE (TYPE)" */
static void gguf_found(const struct gguf_file *g, const char *key, char *out, size_t len)
{
    const int64_t i = gguf_find_key(g, key);
    char val[64];
    if (i < 0)
        snprintf(out, len, "nothing (missing)");
    else
        snprintf(out, len, "%s (%s)", gguf_kv_format(g, i, val, sizeof val),
                 gguf_type_name(gguf_kv_type(g, i)));
}

static int gguf_int(struct gguf_file *g, const char *arch, const char *key, int required, int dflt,
                    int *out, const char *path, char *err, size_t errlen)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    uint32_t v = 0;
    int rc = gguf_get_u32(g, full, &v);
    if (rc == GGUF_OK && v > 0 && v < (1u << 30)) {
        *out = (int)v;
        return 0;
    }
    if (rc == GGUF_ENOKEY && !required) {
        *out = dflt;
        return 0;
    }
    char found[96];
    gguf_found(g, full, found, sizeof found);
    snprintf(err, errlen, "%s: metadata '%s': expected an integer in 1..%d, found %s", path, full,
             (1 << 30) - 1, found);
    return -1;
}

static int gguf_float(struct gguf_file *g, const char *arch, const char *key, float dflt,
                      float *out, const char *path, char *err, size_t errlen)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int rc = gguf_get_f32(g, full, out);
    if (rc == GGUF_ENOKEY) {
        *out = dflt;
        return 0;
    }
    if (rc != GGUF_OK || !(*out > 0) || !isfinite(*out)) {
        char found[96];
        gguf_found(g, full, found, sizeof found);
        snprintf(err, errlen, "%s: metadata '%s': expected a positive finite number, found %s",
                 path, full, found);
        return -1;
    }
    return 0;
}

static int config_from_gguf(struct gguf_file *g, const char *path, struct ls_model_config *c,
                            char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    const char *arch = NULL;
    if (gguf_get_str(g, "general.architecture", &arch) != GGUF_OK) {
        snprintf(err, errlen, "%s: metadata 'general.architecture': missing or not a string", path);
        return -1;
    }
    if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "qwen3") &&
        strcmp(arch, "mistral")) {
        snprintf(err, errlen,
                 "%s: metadata 'general.architecture': '%s' is not supported (supported: llama, "
                 "mistral, qwen2, qwen3)",
                 path, arch);
        return -1;
    }
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    if (gguf_int(g, arch, "block_count", 1, 0, &c->n_layers, path, err, errlen) ||
        gguf_int(g, arch, "embedding_length", 1, 0, &c->dim, path, err, errlen) ||
        gguf_int(g, arch, "attention.head_count", 1, 0, &c->n_heads, path, err, errlen) ||
        gguf_int(g, arch, "attention.head_count_kv", 0, c->n_heads, &c->n_kv_heads, path, err,
                 errlen) ||
        gguf_int(g, arch, "feed_forward_length", 1, 0, &c->ffn, path, err, errlen) ||
        gguf_int(g, arch, "context_length", 0, 4096, &c->max_pos, path, err, errlen) ||
        gguf_int(g, arch, "attention.key_length", 0, c->dim / c->n_heads, &c->head_dim, path, err,
                 errlen) ||
        gguf_float(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f, &c->norm_eps, path, err,
                   errlen) ||
        gguf_float(g, arch, "rope.freq_base", 10000.0f, &c->rope_theta, path, err, errlen))
        return -1;
    /* the rotary embedding turns all of each head (llama.cpp's n_rot == head dim); a file that
     * rotates only part would decode wrongly, so it is refused */
    int rot;
    if (gguf_int(g, arch, "rope.dimension_count", 0, c->head_dim, &rot, path, err, errlen))
        return -1;
    if (rot != c->head_dim) {
        snprintf(err, errlen,
                 "%s: metadata '%s.rope.dimension_count': expected %d (the head dim; rotary "
                 "embedding over part of a head is not supported), found %d",
                 path, arch, c->head_dim, rot);
        return -1;
    }
    int64_t rows = 0, cols = 0;
    if (gguf_tensor_shape(g, "token_embd.weight", &rows, &cols) != 0) {
        snprintf(err, errlen, "%s: tensor 'token_embd.weight' is missing", path);
        return -1;
    }
    c->vocab = (int)rows;
    /* llama.cpp sizes token_embd by the tokenizer's token count, as <arch>.vocab_size does: a
     * file where either differs from the embedding's rows pairs its weights with another
     * vocabulary */
    char full[160];
    snprintf(full, sizeof full, "%s.vocab_size", arch);
    uint64_t n = 0;
    const int vrc = gguf_get_u64(g, full, &n);
    if (vrc != GGUF_ENOKEY && (vrc != GGUF_OK || n != (uint64_t)rows)) {
        char found[96];
        gguf_found(g, full, found, sizeof found);
        snprintf(err, errlen,
                 "%s: metadata '%s': expected %lld (the rows of tensor 'token_embd.weight'), "
                 "found %s",
                 path, full, (long long)rows, found);
        return -1;
    }
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", NULL, &n, NULL) == GGUF_OK &&
        n != (uint64_t)rows) {
        snprintf(err, errlen,
                 "%s: metadata 'tokenizer.ggml.tokens': expected %lld tokens (the rows of tensor "
                 "'token_embd.weight'), found %llu",
                 path, (long long)rows, (unsigned long long)n);
        return -1;
    }
    c->tied_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    c->qkv_bias = gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    c->qk_norm = gguf_find_tensor(g, "blk.0.attn_q_norm.weight") != NULL;
    c->rope_style =
        !strcmp(arch, "llama") || !strcmp(arch, "mistral") ? LS_ROPE_INTERLEAVED : LS_ROPE_NEOX;
    const char *scaling = NULL;
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_get_str(g, key, &scaling) == GGUF_OK && strcmp(scaling, "none")) {
        if (strcmp(scaling, "linear")) {
            snprintf(err, errlen,
                     "%s: metadata '%s': rope scaling '%s' is not supported (supported: none, "
                     "linear, llama3)",
                     path, key, scaling);
            return -1;
        }
        c->rope_scaling = LS_ROPE_SCALING_LINEAR;
        if (gguf_float(g, arch, "rope.scaling.factor", 1.0f, &c->rope_factor, path, err, errlen))
            return -1;
    }
    uint32_t id = 0;
    c->bos_id = gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &id) == GGUF_OK ? (int)id : -1;
    if (gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &id) == GGUF_OK)
        c->eos_ids[c->n_eos++] = (int)id;
    if (gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &id) == GGUF_OK &&
        (c->n_eos == 0 || c->eos_ids[0] != (int)id))
        c->eos_ids[c->n_eos++] = (int)id;
    return 0;
}

static int check_config(const struct ls_model_config *c, const char *path, char *err, size_t errlen)
{
    if (c->n_heads % c->n_kv_heads) {
        snprintf(err, errlen, "%s: %d attention heads are not a multiple of %d KV heads", path,
                 c->n_heads, c->n_kv_heads);
        return -1;
    }
    char msg[160];
    if (ls_plan_check_head_dim(c->head_dim, msg, sizeof msg)) {
        snprintf(err, errlen, "%s: %s", path, msg);
        return -1;
    }
    return 0;
}

/* A tensor of a layer past the config's last (blk.N.* in GGUF, model.layers.N.* in HF) means
 * the config does not describe the checkpoint: refused, where skipping it would run another
 * model than the file holds. */
static int check_layer_tensors(const struct source *s, const struct ls_model_config *c,
                               const char *path, char *err, size_t errlen)
{
    if (s->dummy) return 0;
    const char *prefix = s->g ? "blk." : "model.layers.";
    const size_t k = strlen(prefix);
    const int64_t n = s->g ? gguf_tensor_count(s->g) : st_tensor_count(s->st);
    for (int64_t i = 0; i < n; i++) {
        const char *name = s->g ? gguf_tensor_at(s->g, i)->name : st_tensor_name(s->st, (int)i);
        if (strncmp(name, prefix, k) != 0 || !isdigit((unsigned char)name[k])) continue;
        char *end;
        const unsigned long layer = strtoul(name + k, &end, 10);
        if (*end != '.' || layer < (unsigned long)c->n_layers) continue;
        char field[64];
        if (s->g)
            snprintf(field, sizeof field, "metadata '%s.block_count'", c->arch);
        else
            snprintf(field, sizeof field, "num_hidden_layers");
        char q[4 * 96 + 8];
        snprintf(err, errlen, "%s: tensor '%s': expected a layer index below %s (%d), found %lu",
                 s->g ? path : st_tensor_file(s->st, name),
                 s->g ? gguf_quote(name, q, sizeof q) : name, field, c->n_layers, layer);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- weights ---- */

enum split { REPLICATED, ROWS_Q, ROWS_KV, ROWS_FFN, COLS_Q, COLS_FFN, ROWS_VOCAB };

/* The tensors of a layer as stored; the loader fuses q/k/v and gate/up into one matrix each
 * (one GEMV instead of three or two in the decode step). */
enum lw {
    LW_ATTN_NORM,
    LW_Q,
    LW_K,
    LW_V,
    LW_BQ,
    LW_BK,
    LW_BV,
    LW_QN,
    LW_KN,
    LW_O,
    LW_FFN_NORM,
    LW_GATE,
    LW_UP,
    LW_DOWN,
    LW_COUNT
};

struct wspec {
    const char *gguf, *hf; /* names; %d is the layer */
    enum split split;
    int optional_flag; /* 0: always; 1: qkv_bias; 2: qk_norm */
    int is_vector;     /* 1-D tensor */
};

static const struct wspec layer_specs[LW_COUNT] = {
    [LW_ATTN_NORM] = {"blk.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight",
                      REPLICATED, 0, 1},
    [LW_Q] = {"blk.%d.attn_q.weight", "model.layers.%d.self_attn.q_proj.weight", ROWS_Q, 0, 0},
    [LW_K] = {"blk.%d.attn_k.weight", "model.layers.%d.self_attn.k_proj.weight", ROWS_KV, 0, 0},
    [LW_V] = {"blk.%d.attn_v.weight", "model.layers.%d.self_attn.v_proj.weight", ROWS_KV, 0, 0},
    [LW_BQ] = {"blk.%d.attn_q.bias", "model.layers.%d.self_attn.q_proj.bias", ROWS_Q, 1, 1},
    [LW_BK] = {"blk.%d.attn_k.bias", "model.layers.%d.self_attn.k_proj.bias", ROWS_KV, 1, 1},
    [LW_BV] = {"blk.%d.attn_v.bias", "model.layers.%d.self_attn.v_proj.bias", ROWS_KV, 1, 1},
    [LW_QN] = {"blk.%d.attn_q_norm.weight", "model.layers.%d.self_attn.q_norm.weight", REPLICATED,
               2, 1},
    [LW_KN] = {"blk.%d.attn_k_norm.weight", "model.layers.%d.self_attn.k_norm.weight", REPLICATED,
               2, 1},
    [LW_O] = {"blk.%d.attn_output.weight", "model.layers.%d.self_attn.o_proj.weight", COLS_Q, 0, 0},
    [LW_FFN_NORM] = {"blk.%d.ffn_norm.weight", "model.layers.%d.post_attention_layernorm.weight",
                     REPLICATED, 0, 1},
    [LW_GATE] = {"blk.%d.ffn_gate.weight", "model.layers.%d.mlp.gate_proj.weight", ROWS_FFN, 0, 0},
    [LW_UP] = {"blk.%d.ffn_up.weight", "model.layers.%d.mlp.up_proj.weight", ROWS_FFN, 0, 0},
    [LW_DOWN] = {"blk.%d.ffn_down.weight", "model.layers.%d.mlp.down_proj.weight", COLS_FFN, 0, 0},
};

struct loader {
    struct source src;
    struct ls_model *m;
    const char *file; /* for messages */
    int progress;
    size_t total, done;
    double t0;
};

/* Reads the rank's part of tensor `name`, checking its full shape against the config first.
 * full_rows/full_cols: the unsharded shape (rows = 1 for vectors). Into `into` when given (the
 * caller's buffer, nr * nc floats), else a new buffer. */
static float *load_part_into(struct loader *ld, const char *name, int64_t full_rows,
                             int64_t full_cols, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                             float *into, char *err, size_t errlen)
{
    int64_t rows = full_rows, cols = full_cols;
    if (!ld->src.dummy && src_shape(&ld->src, name, &rows, &cols) != 0) {
        /* a safetensors tensor of more than two dimensions has no rows x cols view */
        int64_t d[ST_MAX_DIMS];
        const int nd = ld->src.st ? st_tensor_dims(ld->src.st, name, d) : -1;
        if (nd < 0) {
            snprintf(err, errlen, "%s: tensor '%s' is missing", ld->file, name);
            return NULL;
        }
        char shape[128] = "";
        for (int i = 0, o = 0; i < nd && o < (int)sizeof shape; i++)
            o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%lld", i ? ", " : "",
                          (long long)d[i]);
        snprintf(err, errlen,
                 "%s: tensor '%s': expected shape [%lld, %lld] from the config, found %d "
                 "dimensions [%s]",
                 ld->file, name, (long long)full_rows, (long long)full_cols, nd, shape);
        return NULL;
    }
    if (rows != full_rows || cols != full_cols) {
        snprintf(err, errlen,
                 "%s: tensor '%s': expected shape [%lld, %lld] from the config, found [%lld, %lld]",
                 ld->file, name, (long long)full_rows, (long long)full_cols, (long long)rows,
                 (long long)cols);
        return NULL;
    }
    float *dst = into ? into : malloc((size_t)(nr * nc) * sizeof(float) + 1);
    if (!dst) {
        snprintf(err, errlen, "%s: tensor '%s': out of host memory for %lld floats", ld->file, name,
                 (long long)(nr * nc));
        return NULL;
    }
    if (src_read(&ld->src, name, full_cols, r0, nr, c0, nc, dst, err, errlen) != 0) {
        if (!into) free(dst);
        return NULL;
    }
    ld->done += (size_t)(nr * nc) * sizeof(float);
    ld->m->bytes_read += (size_t)(nr * nc) * sizeof(float);
    if (ld->progress) {
        double dt = ls_now_s() - ld->t0;
        fprintf(stderr, "\rloading %s: %.0f%% (%.2f GB dequantized, %.2f GB/s)  ", ld->file,
                100.0 * (double)ld->done / (double)(ld->total ? ld->total : 1), ld->done / 1e9,
                dt > 0 ? ld->done / 1e9 / dt : 0.0);
    }
    return dst;
}

static float *load_part(struct loader *ld, const char *name, int64_t full_rows, int64_t full_cols,
                        int64_t r0, int64_t nr, int64_t c0, int64_t nc, char *err, size_t errlen)
{
    return load_part_into(ld, name, full_rows, full_cols, r0, nr, c0, nc, NULL, err, errlen);
}

static int load_layer(struct loader *ld, int l, char *err, size_t errlen)
{
    struct ls_model *m = ld->m;
    const struct ls_model_config *c = &m->cfg;
    const struct ls_shard *s = &m->shard;
    const struct ls_backend *be = m->be;
    int hd = c->head_dim;
    float *h[LW_COUNT] = {0};
    int rc = -1;
    /* q/k/v (and their biases) and gate/up are read straight into the fused matrices: no copy,
     * and no second pass of page faults over ~1 GB per layer of an 8B model */
    const size_t D = (size_t)c->dim, qd = (size_t)s->q_heads * hd, kd = (size_t)s->kv_heads * hd,
                 F = (size_t)s->ffn_cols;
    float *qkv = malloc((qd + 2 * kd) * D * sizeof(float) + 1);
    float *gu = malloc(2 * F * D * sizeof(float) + 1);
    float *bqkv = c->qkv_bias ? malloc((qd + 2 * kd) * sizeof(float) + 1) : NULL;
    float *into[LW_COUNT] = {0};
    if (!qkv || !gu || (c->qkv_bias && !bqkv)) {
        snprintf(err, errlen, "%s: layer %d: out of host memory for its fused matrices", ld->file,
                 l);
        goto out;
    }
    into[LW_Q] = qkv, into[LW_K] = qkv + qd * D, into[LW_V] = qkv + (qd + kd) * D;
    into[LW_GATE] = gu, into[LW_UP] = gu + F * D;
    if (bqkv) into[LW_BQ] = bqkv, into[LW_BK] = bqkv + qd, into[LW_BV] = bqkv + qd + kd;
    for (int i = 0; i < LW_COUNT; i++) {
        const struct wspec *w = &layer_specs[i];
        if ((w->optional_flag == 1 && !c->qkv_bias) || (w->optional_flag == 2 && !c->qk_norm))
            continue;
        char name[160];
        snprintf(name, sizeof name, ld->src.g ? w->gguf : w->hf, l);
        int64_t fr = 0, fc = 0, r0 = 0, nr = 0, c0 = 0, nc = 0;
        switch (w->split) {
        case REPLICATED:
            fr = 1, fc = w->optional_flag == 2 ? hd : c->dim, nr = 1, nc = fc;
            break;
        case ROWS_Q:
            fr = (int64_t)c->n_heads * hd, r0 = (int64_t)s->q_first * hd,
            nr = (int64_t)s->q_heads * hd;
            break;
        case ROWS_KV:
            fr = (int64_t)c->n_kv_heads * hd, r0 = (int64_t)s->kv_first * hd,
            nr = (int64_t)s->kv_heads * hd;
            break;
        case ROWS_FFN:
            fr = c->ffn, r0 = s->ffn_first, nr = s->ffn_cols;
            break;
        case COLS_Q:
            fr = c->dim, nr = c->dim, fc = (int64_t)c->n_heads * hd, c0 = (int64_t)s->q_first * hd,
            nc = (int64_t)s->q_heads * hd;
            break;
        case COLS_FFN:
            fr = c->dim, nr = c->dim, fc = c->ffn, c0 = s->ffn_first, nc = s->ffn_cols;
            break;
        case ROWS_VOCAB:
            break;
        }
        if (w->split == ROWS_Q || w->split == ROWS_KV || w->split == ROWS_FFN) {
            if (w->is_vector) /* a bias: one row of fr values, sliced by columns */
                c0 = r0, nc = nr, fc = fr, fr = 1, r0 = 0, nr = 1;
            else
                fc = c->dim, nc = c->dim;
        }
        float *got = load_part_into(ld, name, fr, fc, r0, nr, c0, nc, into[i], err, errlen);
        if (!got) goto out;
        if (!into[i]) h[i] = got;
    }
    struct ls_layer *L = &m->layers[l];
    /* the backend takes each host buffer over (keeps or frees it) */
    L->wqkv = be->upload_matrix(qkv, qd + 2 * kd, D);
    L->bqkv = bqkv ? be->upload_vector(bqkv, qd + 2 * kd) : NULL;
    L->w_gu = be->upload_matrix(gu, 2 * F, D);
    qkv = gu = bqkv = NULL;
    L->wo = be->upload_matrix(h[LW_O], D, qd);
    L->w_down = be->upload_matrix(h[LW_DOWN], D, F);
    L->attn_norm = be->upload_vector(h[LW_ATTN_NORM], D);
    L->ffn_norm = be->upload_vector(h[LW_FFN_NORM], D);
    L->q_norm = h[LW_QN] ? be->upload_vector(h[LW_QN], (size_t)hd) : NULL;
    L->k_norm = h[LW_KN] ? be->upload_vector(h[LW_KN], (size_t)hd) : NULL;
    h[LW_O] = h[LW_DOWN] = h[LW_ATTN_NORM] = h[LW_FFN_NORM] = h[LW_QN] = h[LW_KN] = NULL;
    if (!L->wqkv || !L->w_gu || !L->wo || !L->w_down || !L->attn_norm || !L->ffn_norm ||
        (c->qkv_bias && !L->bqkv) || (c->qk_norm && (!L->q_norm || !L->k_norm))) {
        snprintf(err, errlen, "%s: layer %d: out of %s memory for its weights", ld->file, l,
                 be->name);
        goto out;
    }
    rc = 0;
out:
    for (int i = 0; i < LW_COUNT; i++) free(h[i]);
    free(qkv);
    free(gu);
    free(bqkv);
    return rc;
}

static int load_globals(struct loader *ld, char *err, size_t errlen)
{
    struct ls_model *m = ld->m;
    const struct ls_model_config *c = &m->cfg;
    int gg = ld->src.g != NULL;
    const char *embed = gg ? "token_embd.weight" : "model.embed_tokens.weight";
    const struct ls_backend *be = m->be;
    float *host = load_part(ld, embed, c->vocab, c->dim, 0, c->vocab, 0, c->dim, err, errlen);
    if (!host || !(m->embed = be->upload_matrix(host, (size_t)c->vocab, (size_t)c->dim))) goto oom;
    host = load_part(ld, gg ? "output_norm.weight" : "model.norm.weight", 1, c->dim, 0, 1, 0,
                     c->dim, err, errlen);
    if (!host || !(m->final_norm = be->upload_vector(host, (size_t)c->dim))) goto oom;
    const struct ls_shard *s = &m->shard;
    if (c->tied_embeddings) {
        m->lm_head = be->matrix_row(m->embed, (size_t)s->vocab_first, (size_t)c->dim);
    } else {
        host = load_part(ld, gg ? "output.weight" : "lm_head.weight", c->vocab, c->dim,
                         s->vocab_first, s->vocab_rows, 0, c->dim, err, errlen);
        if (!host || !(m->lm_head = be->upload_matrix(host, (size_t)s->vocab_rows, (size_t)c->dim)))
            goto oom;
    }
    int half = c->head_dim / 2;
    float *inv = malloc((size_t)half * sizeof(float));
    if (!inv) goto oom;
    ref_rope_inv_freq(inv, c->head_dim, c->rope_theta, c->rope_scaling, c->rope_factor,
                      c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_orig_max_pos);
    if (gg && gguf_find_tensor(ld->src.g, "rope_freqs.weight")) {
        float *div = load_part(ld, "rope_freqs.weight", 1, half, 0, 1, 0, half, err, errlen);
        if (!div) {
            free(inv);
            return -1;
        }
        for (int i = 0; i < half; i++) inv[i] /= div[i];
        free(div);
    }
    if (!(m->inv_freq = be->upload_vector(inv, (size_t)half))) goto oom;
    return 0;
oom:
    if (host)
        snprintf(err, errlen, "%s: out of %s memory for the global weights", ld->file, be->name);
    return -1;
}

/* ---------------------------------------------------------------- tokenizer ---- */

/* GGUF tokenizer metadata -> tok_spec. A GGUF without tokenizer.ggml.tokens has no tokenizer
 * (m->tok stays NULL; prompts must then be given as ids). */
static int tokenizer_from_gguf(struct gguf_file *g, const char *path, struct ls_model *m, char *err,
                               size_t errlen)
{
    enum gguf_type et;
    uint64_t n = 0, nm = 0;
    const void *tokens = NULL, *merges = NULL, *scores = NULL, *types = NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &tokens) != GGUF_OK) return 0;
    if (et != GGUF_TYPE_STRING || n == 0 || n > (1u << 24)) {
        snprintf(err, errlen, "%s: metadata 'tokenizer.ggml.tokens': expected an array of strings",
                 path);
        return -1;
    }
    const char *model = "gpt2", *pre = NULL, *tmpl = NULL, *tmpl_tools = NULL;
    gguf_get_str(g, "tokenizer.ggml.model", &model);
    gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    gguf_get_str(g, "tokenizer.chat_template", &tmpl);
    gguf_get_str(g, "tokenizer.chat_template.tool_use", &tmpl_tools);
    struct tok_spec spec = {.pre = pre,
                            .n_tokens = (int)n,
                            .tokens = tokens,
                            .bos_id = -1,
                            .eos_id = -1,
                            .unk_id = -1,
                            .pad_id = -1,
                            .add_bos = -1,
                            .add_eos = -1,
                            .add_space_prefix = -1,
                            .chat_template = tmpl,
                            .chat_template_tool_use = tmpl_tools};
    if (!strcmp(model, "gpt2"))
        spec.kind = TOK_KIND_BPE;
    else if (!strcmp(model, "llama"))
        spec.kind = TOK_KIND_SPM;
    else {
        snprintf(
            err, errlen,
            "%s: metadata 'tokenizer.ggml.model': '%s' is not supported (supported: gpt2, llama)",
            path, model);
        return -1;
    }
    uint32_t *lens = malloc(n * sizeof *lens);
    if (!lens) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    for (uint64_t i = 0; i < n; i++)
        lens[i] = (uint32_t)gguf_arr_str_len(g, "tokenizer.ggml.tokens", i);
    spec.token_lens = lens;
    if (gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm, &merges) == GGUF_OK &&
        et == GGUF_TYPE_STRING) {
        spec.n_merges = (int)nm;
        spec.merges = merges;
    }
    uint64_t k = 0;
    if (gguf_get_arr(g, "tokenizer.ggml.scores", &et, &k, &scores) == GGUF_OK &&
        et == GGUF_TYPE_FLOAT32 && k == n)
        spec.scores = scores;
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &k, &types) == GGUF_OK &&
        et == GGUF_TYPE_INT32 && k == n)
        spec.types = types;
    uint32_t id;
    bool b;
    if (gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &id) == GGUF_OK) spec.bos_id = (int)id;
    if (gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &id) == GGUF_OK) spec.eos_id = (int)id;
    if (gguf_get_u32(g, "tokenizer.ggml.unknown_token_id", &id) == GGUF_OK) spec.unk_id = (int)id;
    if (gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &id) == GGUF_OK) spec.pad_id = (int)id;
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == GGUF_OK) spec.add_bos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == GGUF_OK) spec.add_eos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == GGUF_OK)
        spec.add_space_prefix = b;
    char terr[512];
    m->tok = tok_build(&spec, terr, sizeof terr);
    free(lens);
    if (!m->tok) {
        snprintf(err, errlen, "%s: tokenizer: %s", path, terr);
        return -1;
    }
    return 0;
}

static int tokenizer_from_dir(const char *dir, struct ls_model *m, char *err, size_t errlen)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (access(p, F_OK) != 0) return 0;
    m->tok = tok_load_json(p, err, errlen);
    return m->tok ? 0 : -1;
}

/* ids that end generation: the config's, plus the end-of-turn tokens the vocabulary has */
static void add_stop_ids(struct ls_model *m)
{
    static const char *eot[] = {"<|im_end|>",    "<|eot_id|>", "<|end_of_text|>",
                                "<|endoftext|>", "</s>",       "<|end|>"};
    struct ls_model_config *c = &m->cfg;
    if (!m->tok) return;
    if (tok_eos(m->tok) >= 0 && c->n_eos == 0) c->eos_ids[c->n_eos++] = tok_eos(m->tok);
    for (size_t i = 0; i < sizeof eot / sizeof eot[0] && c->n_eos < 8; i++) {
        int id = tok_id(m->tok, eot[i]), seen = 0;
        if (id < 0 || !tok_is_special(m->tok, id)) continue;
        for (int j = 0; j < c->n_eos; j++) seen |= c->eos_ids[j] == id;
        if (!seen) c->eos_ids[c->n_eos++] = id;
    }
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

struct ls_model *ls_model_load(const char *path, int rank, int tp, const struct ls_backend *be,
                               int show_progress, char *err, size_t errlen)
{
    struct ls_model *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    m->tp = tp;
    m->be = be;
    struct loader ld = {.m = m, .file = path, .progress = show_progress, .t0 = ls_now_s()};
    if (!strncmp(path, "dummy:", 6)) {
        snprintf(m->format, sizeof m->format, "dummy");
        ld.src.dummy = 1;
        ld.src.seed = 1;
        if (dummy_config(path + 6, &m->cfg, err, errlen)) goto fail;
    } else if (ends_with(path, ".gguf")) {
        snprintf(m->format, sizeof m->format, "gguf");
        ld.src.g = gguf_open(path, err, errlen);
        if (!ld.src.g || config_from_gguf(ld.src.g, path, &m->cfg, err, errlen) ||
            tokenizer_from_gguf(ld.src.g, path, m, err, errlen))
            goto fail;
    } else {
        snprintf(m->format, sizeof m->format, "safetensors");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        if (!is_dir(dir)) {
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = 0;
            else
                snprintf(dir, sizeof dir, ".");
        }
        if (!is_dir(path) && access(path, R_OK) != 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            goto fail;
        }
        if (hf_config_load_dir(dir, &m->cfg, err, errlen) ||
            tokenizer_from_dir(dir, m, err, errlen))
            goto fail;
        ld.src.st = st_open(path, err, errlen);
        if (!ld.src.st) goto fail;
    }
    if (check_config(&m->cfg, path, err, errlen) ||
        check_layer_tensors(&ld.src, &m->cfg, path, err, errlen))
        goto fail;
    add_stop_ids(m);
    if (m->tok && tok_n_vocab(m->tok) > m->cfg.vocab) {
        snprintf(err, errlen, "%s: the tokenizer has %d tokens but the embedding only %d rows",
                 path, tok_n_vocab(m->tok), m->cfg.vocab);
        goto fail;
    }
    const struct ls_model_config *c = &m->cfg;
    struct ls_plan_input in = {.heads = c->n_heads,
                               .kv_heads = c->n_kv_heads,
                               .head_dim = c->head_dim,
                               .dim = c->dim,
                               .ffn = c->ffn,
                               .vocab = c->vocab,
                               .layers = c->n_layers,
                               .tp = tp,
                               .weight_bytes = be->weight_bytes,
                               .kv_bytes = be->weight_bytes,
                               .tied = c->tied_embeddings,
                               .qkv_bias = c->qkv_bias,
                               .qk_norm = c->qk_norm};
    m->plan = calloc((size_t)tp, sizeof *m->plan);
    if (!m->plan) goto fail;
    char perr[512];
    if (ls_plan_make(&in, m->plan, perr, sizeof perr) != 0) {
        snprintf(err, errlen, "%s: cannot split this model over %d ranks: %s", path, tp, perr);
        goto fail;
    }
    m->shard = m->plan[rank];
    ld.total = m->shard.weight_bytes;
    if (be->mem_free) {
        size_t free_b = be->mem_free();
        if (free_b && m->shard.weight_bytes > free_b) {
            snprintf(
                err, errlen,
                "%s: this rank's shard needs %.2f GB for its weights (%s, TP=%d) but the %s "
                "device has %.2f GB free; run on more GPUs (a larger TP size) or a smaller model",
                path, m->shard.weight_bytes / 1e9, be->weight_bytes == 2 ? "bf16" : "fp32", tp,
                be->name, free_b / 1e9);
            goto fail;
        }
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) goto fail;
    if (load_globals(&ld, err, errlen)) goto fail;
    for (int l = 0; l < c->n_layers; l++)
        if (load_layer(&ld, l, err, errlen)) goto fail;
    be->sync(); /* the last uploads (asynchronous on GPUs) have landed */
    if (show_progress) fprintf(stderr, "\n");
    if (ld.src.g) gguf_close(ld.src.g);
    if (ld.src.st) st_close(ld.src.st);
    return m;
fail:
    if (show_progress && ld.done) fprintf(stderr, "\n");
    if (ld.src.g) gguf_close(ld.src.g);
    if (ld.src.st) st_close(ld.src.st);
    ls_model_free(m);
    return NULL;
}

void ls_model_free(struct ls_model *m)
{
    if (!m) return;
    const struct ls_backend *be = m->be;
    if (m->layers) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            struct ls_layer *y = &m->layers[l];
            void *ps[] = {y->attn_norm, y->wqkv,     y->bqkv, y->q_norm, y->k_norm,
                          y->wo,        y->ffn_norm, y->w_gu, y->w_down};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                if (ps[i]) be->free(ps[i]);
        }
        free(m->layers);
    }
    void *globals[] = {m->cfg.tied_embeddings ? NULL : m->lm_head, m->embed, m->final_norm,
                       m->inv_freq};
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (globals[i]) be->free(globals[i]);
    free(m->plan);
    if (m->tok) tok_free(m->tok);
    free(m);
}
