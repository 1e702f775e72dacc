/* See hfconfig.h. Design and invariants:
 * - A field is read by one typed getter that either fills the value or writes the message
 *   "<file>: field '<name>': expected <what>, found <what>"; a getter with a default treats a
 *   missing field and null alike (transformers does), a required field treats null as wrong.
 * - Every size is capped (LS_HF_MAX_SIZE) so products like n_heads * head_dim * dim fit the
 *   int64 arithmetic of the shard plan; whatever passes hf_config_load is consistent: heads
 *   divisible by kv heads, head_dim even (RoPE rotates pairs), ids inside the vocabulary.
 * - Features the forward does not implement (other RoPE scalings, o_proj or MLP biases, an
 *   activation other than SiLU) are errors, never silently ignored: a model that loads runs
 *   exactly as transformers runs it. */
#include "config.h"
#include "hfconfig.h"
#include "shard/plan.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define LS_HF_MAX_JSON_BYTES (16 << 20)

/* "a string", "null", "-3", "a real number (1.5)": what a field held, for messages */
static const char *found(const json_t *v, char *buf, size_t len)
{
    if (!v) return "nothing (missing)";
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        snprintf(buf, len, "string \"%.40s\"", json_string_value(v));
        return buf;
    case JSON_INTEGER:
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
        return buf;
    case JSON_REAL:
        snprintf(buf, len, "a real number (%g)", json_real_value(v));
        return buf;
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

struct ctx {
    const char *path;
    json_t *root;
    char *err;
    size_t errlen;
    const char *prefix; /* "rope_parameters." while reading inside that object, else "" */
};

static int field_fail(struct ctx *c, const char *name, const char *expected, const json_t *v)
{
    char buf[96];
    return ls_errf(c->err, c->errlen, "%s: field '%s%s': expected %s, found %s", c->path,
                   c->prefix ? c->prefix : "", name, expected, found(v, buf, sizeof buf));
}

/* integer in [lo, hi]; missing or null -> def, or an error when required */
static int get_int(struct ctx *c, json_t *obj, const char *name, int required, int def, int lo,
                   int hi, const char *expected, int *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || (json_is_null(v) && !required)) {
        if (required) return field_fail(c, name, expected, v);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return field_fail(c, name, expected, v);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_size(struct ctx *c, const char *name, int hi, int *out)
{
    char what[64];
    snprintf(what, sizeof what, "a positive integer (at most %d)", hi);
    return get_int(c, c->root, name, 1, 0, 1, hi, what, out);
}

/* finite number > 0 (integers accepted); missing or null -> def, or an error when def < 0 */
static int get_pos_float(struct ctx *c, json_t *obj, const char *name, double def, float *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        if (def < 0) return field_fail(c, name, "a positive number", v);
        *out = (float)def;
        return 0;
    }
    if (!json_is_number(v)) return field_fail(c, name, "a positive number", v);
    double d = json_number_value(v);
    /* in float too: a positive double below float's range would become 0 */
    if (!((float)d > 0) || !isfinite((float)d)) return field_fail(c, name, "a positive number", v);
    *out = (float)d;
    return 0;
}

static int get_bool(struct ctx *c, const char *name, int def, int *out)
{
    json_t *v = json_object_get(c->root, name);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return field_fail(c, name, "true or false", v);
    *out = json_is_true(v);
    return 0;
}

static const struct {
    const char *class_name, *model_type;
} supported[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
};
#define N_SUPPORTED (sizeof supported / sizeof supported[0])
#define SUPPORTED_LIST                                                                             \
    "LlamaForCausalLM/llama, MistralForCausalLM/mistral, Qwen2ForCausalLM/qwen2, "                 \
    "Qwen3ForCausalLM/qwen3"

/* architectures[0] when present, else model_type */
static int read_arch(struct ctx *c, struct ls_model_config *out)
{
    json_t *archs = json_object_get(c->root, "architectures");
    const char *name = NULL;
    int by_class = 0;
    if (archs && !json_is_null(archs)) {
        if (!json_is_array(archs) ||
            (json_array_size(archs) > 0 && !json_is_string(json_array_get(archs, 0))))
            return field_fail(c, "architectures", "an array of class names", archs);
        if (json_array_size(archs) > 0) {
            name = json_string_value(json_array_get(archs, 0));
            by_class = 1;
        }
    }
    if (!name) {
        json_t *mt = json_object_get(c->root, "model_type");
        if (!json_is_string(mt))
            return field_fail(c, "model_type", "a string (no 'architectures' either)", mt);
        name = json_string_value(mt);
    }
    for (size_t i = 0; i < N_SUPPORTED; i++) {
        if (strcmp(name, by_class ? supported[i].class_name : supported[i].model_type) == 0) {
            snprintf(out->arch, sizeof out->arch, "%s", supported[i].model_type);
            return 0;
        }
    }
    return ls_errf(c->err, c->errlen, "%s: unsupported architecture '%.64s' (%s; supported: %s)",
                   c->path, name, by_class ? "architectures[0]" : "model_type", SUPPORTED_LIST);
}

static int read_rope_params(struct ctx *c, json_t *params, const char *params_name, int v5,
                            struct ls_model_config *out);

/* v5 rope_parameters {rope_type, rope_theta, ...} or v4 rope_theta + rope_scaling {type, ...} */
static int read_rope(struct ctx *c, struct ls_model_config *out)
{
    out->rope_style = LS_ROPE_NEOX; /* HF checkpoints keep Q/K unpermuted: rotate_half */
    out->rope_scaling = LS_ROPE_SCALING_NONE;
    out->rope_factor = 1.0f;
    out->rope_low_freq_factor = 0.0f;
    out->rope_high_freq_factor = 0.0f;
    out->rope_orig_max_pos = 0;

    json_t *params = json_object_get(c->root, "rope_parameters");
    const char *params_name = "rope_parameters";
    int v5 = 1;
    if (params && !json_is_null(params) && !json_is_object(params))
        return field_fail(c, "rope_parameters", "an object or null", params);
    if (!json_is_object(params)) {
        params = json_object_get(c->root, "rope_scaling");
        params_name = "rope_scaling";
        v5 = 0;
        if (params && !json_is_null(params) && !json_is_object(params))
            return field_fail(c, "rope_scaling", "an object or null", params);
    }
    if (!json_is_object(params)) params = NULL;

    /* rope_theta: inside rope_parameters (v5) or at the top (v4) */
    json_t *theta_obj = params && json_object_get(params, "rope_theta") ? params : c->root;
    c->prefix = theta_obj == params ? "rope_parameters." : "";
    int bad_theta = get_pos_float(c, theta_obj, "rope_theta", 10000.0, &out->rope_theta);
    c->prefix = "";
    if (bad_theta) return -1;
    /* RoPE over part of each head (partial_rotary_factor < 1) is not implemented */
    json_t *prf_obj = params && json_object_get(params, "partial_rotary_factor") ? params : c->root;
    json_t *prf = json_object_get(prf_obj, "partial_rotary_factor");
    if (prf && !json_is_null(prf) && !(json_is_number(prf) && json_number_value(prf) == 1.0)) {
        c->prefix = prf_obj == params ? "rope_parameters." : "";
        field_fail(c, "partial_rotary_factor",
                   "1 (RoPE over whole heads; partial is not supported)", prf);
        c->prefix = "";
        return -1;
    }
    if (!params) return 0;
    int rc = read_rope_params(c, params, params_name, v5, out);
    c->prefix = "";
    return rc;
}

static int read_rope_params(struct ctx *c, json_t *params, const char *params_name, int v5,
                            struct ls_model_config *out)
{
    c->prefix = v5 ? "rope_parameters." : "rope_scaling.";
    json_t *type = json_object_get(params, "rope_type");
    if (!type) type = json_object_get(params, "type");
    if (!type && v5) return 0; /* rope_parameters holding only rope_theta */
    if (!json_is_string(type)) return field_fail(c, "rope_type", "a string", type);
    const char *t = json_string_value(type);
    if (strcmp(t, "default") == 0) return 0;
    if (strcmp(t, "linear") == 0) {
        out->rope_scaling = LS_ROPE_SCALING_LINEAR;
        return get_pos_float(c, params, "factor", -1, &out->rope_factor);
    }
    if (strcmp(t, "llama3") == 0) {
        out->rope_scaling = LS_ROPE_SCALING_LLAMA3;
        if (get_pos_float(c, params, "factor", -1, &out->rope_factor) != 0 ||
            get_pos_float(c, params, "low_freq_factor", -1, &out->rope_low_freq_factor) != 0 ||
            get_pos_float(c, params, "high_freq_factor", -1, &out->rope_high_freq_factor) != 0 ||
            get_int(c, params, "original_max_position_embeddings", 1, 0, 1, LS_HF_MAX_SIZE,
                    "a positive integer", &out->rope_orig_max_pos) != 0)
            return -1;
        if (!(out->rope_high_freq_factor > out->rope_low_freq_factor))
            return ls_errf(
                c->err, c->errlen,
                "%s: %s: high_freq_factor (%g) must be greater than low_freq_factor (%g)", c->path,
                params_name, out->rope_high_freq_factor, out->rope_low_freq_factor);
        return 0;
    }
    return ls_errf(c->err, c->errlen,
                   "%s: %s: unsupported RoPE type '%.32s' (supported: default, linear, llama3)",
                   c->path, params_name, t);
}

/* eos_token_id: an id or a list of ids; bos_token_id: an id; null or missing: none */
static int read_ids(struct ctx *c, json_t *obj, struct ls_model_config *out, int keep_missing)
{
    json_t *bos = json_object_get(obj, "bos_token_id");
    if (bos || !keep_missing) {
        if (get_int(c, obj, "bos_token_id", 0, -1, 0, out->vocab - 1,
                    "a token id inside the vocabulary, or null", &out->bos_id) != 0)
            return -1;
    }
    json_t *eos = json_object_get(obj, "eos_token_id");
    if (!eos && keep_missing) return 0;
    out->n_eos = 0;
    if (!eos || json_is_null(eos)) return 0;
    size_t n = json_is_array(eos) ? json_array_size(eos) : 1;
    if (n > sizeof out->eos_ids / sizeof out->eos_ids[0])
        return field_fail(c, "eos_token_id", "at most 8 ids", eos);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(eos) ? json_array_get(eos, i) : eos;
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= out->vocab)
            return field_fail(c, "eos_token_id",
                              "a token id inside the vocabulary or a list of them", e);
        int id = (int)json_integer_value(e), dup = 0;
        for (int k = 0; k < out->n_eos; k++) dup |= out->eos_ids[k] == id;
        if (!dup) out->eos_ids[out->n_eos++] = id;
    }
    return 0;
}

/* a window W makes token i attend to (i - W, i]: the same as full attention while the context
 * is at most W tokens, so capping the context keeps the forward exact */
static int read_sliding_window(struct ctx *c, struct ls_model_config *out)
{
    int use = 0;
    if (strcmp(out->arch, "mistral") == 0) {
        use = 1; /* transformers' Mistral slides whenever sliding_window is set */
    } else {
        if (get_bool(c, "use_sliding_window", 0, &use) != 0) return -1;
        json_t *lt = json_object_get(c->root, "layer_types");
        if (lt && !json_is_null(lt)) {
            if (!json_is_array(lt)) return field_fail(c, "layer_types", "an array of strings", lt);
            size_t i;
            json_t *e;
            json_array_foreach(lt, i, e)
            {
                if (!json_is_string(e))
                    return field_fail(c, "layer_types", "an array of strings", e);
                const char *s = json_string_value(e);
                if (strcmp(s, "sliding_attention") == 0)
                    use = 1;
                else if (strcmp(s, "full_attention") != 0)
                    return ls_errf(c->err, c->errlen,
                                   "%s: field 'layer_types'[%zu]: unsupported layer type '%.32s' "
                                   "(supported: full_attention, sliding_attention)",
                                   c->path, i, s);
            }
        }
    }
    int window;
    if (get_int(c, c->root, "sliding_window", 0, 0, 1, INT32_MAX, "a positive integer or null",
                &window) != 0)
        return -1;
    if (use && window > 0 && window < out->max_pos) {
        ls_warn("%s: sliding-window attention (window %d) is run as full attention: context "
                "capped at %d tokens (max_position_embeddings %d)",
                c->path, window, window, out->max_pos);
        out->max_pos = window;
    }
    return 0;
}

static int check_no_bias(struct ctx *c, const char *name, const char *what, const char *arch)
{
    int bias;
    if (get_bool(c, name, 0, &bias) != 0) return -1;
    if (bias)
        return ls_errf(c->err, c->errlen, "%s: field '%s': true (%s) is not supported for %s",
                       c->path, name, what, arch);
    return 0;
}

static int load_root(struct ctx *c, struct ls_model_config *out)
{
    memset(out, 0, sizeof *out);
    if (read_arch(c, out) != 0) return -1;
    int is_llama = strcmp(out->arch, "llama") == 0, is_qwen2 = strcmp(out->arch, "qwen2") == 0,
        is_qwen3 = strcmp(out->arch, "qwen3") == 0;

    if (get_size(c, "num_hidden_layers", LS_HF_MAX_LAYERS, &out->n_layers) != 0 ||
        get_size(c, "hidden_size", LS_HF_MAX_SIZE, &out->dim) != 0 ||
        get_size(c, "num_attention_heads", LS_HF_MAX_SIZE, &out->n_heads) != 0 ||
        get_size(c, "intermediate_size", LS_HF_MAX_SIZE, &out->ffn) != 0 ||
        get_size(c, "vocab_size", LS_HF_MAX_SIZE, &out->vocab) != 0 ||
        get_size(c, "max_position_embeddings", LS_HF_MAX_SIZE, &out->max_pos) != 0)
        return -1;
    if (get_int(c, c->root, "num_key_value_heads", 0, out->n_heads, 1, out->n_heads,
                "a positive integer at most num_attention_heads, or null", &out->n_kv_heads) != 0)
        return -1;
    if (out->n_heads % out->n_kv_heads != 0)
        return ls_errf(c->err, c->errlen,
                       "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                       c->path, out->n_heads, out->n_kv_heads);
    json_t *hd = json_object_get(c->root, "head_dim");
    if (!hd || json_is_null(hd)) {
        if (out->dim % out->n_heads != 0)
            return ls_errf(c->err, c->errlen,
                           "%s: no head_dim, and hidden_size (%d) is not a multiple of "
                           "num_attention_heads (%d)",
                           c->path, out->dim, out->n_heads);
        out->head_dim = out->dim / out->n_heads;
    } else if (get_int(c, c->root, "head_dim", 1, 0, 1, LS_HF_MAX_SIZE, "a positive integer",
                       &out->head_dim) != 0) {
        return -1;
    }
    char rule[160];
    if (ls_plan_check_head_dim(out->head_dim, rule, sizeof rule) != 0)
        return ls_errf(c->err, c->errlen, "%s: %s", c->path, rule);
    if ((long long)out->n_heads * out->head_dim > LS_HF_MAX_SIZE)
        return ls_errf(c->err, c->errlen,
                       "%s: num_attention_heads x head_dim = %lld exceeds the limit of %d", c->path,
                       (long long)out->n_heads * out->head_dim, LS_HF_MAX_SIZE);

    json_t *eps = json_object_get(c->root, "rms_norm_eps");
    out->norm_eps = json_is_number(eps) ? (float)json_number_value(eps) : 0.0f;
    if (!(out->norm_eps > 0 && out->norm_eps < 1)) /* in float: 1e-50 would become 0 */
        return field_fail(c, "rms_norm_eps", "a number in (0, 1)", eps);

    json_t *act = json_object_get(c->root, "hidden_act");
    if (act && !(json_is_string(act) && (strcmp(json_string_value(act), "silu") == 0 ||
                                         strcmp(json_string_value(act), "swish") == 0)))
        return field_fail(c, "hidden_act", "\"silu\" (the only activation supported)", act);

    if (read_rope(c, out) != 0) return -1;
    if (get_bool(c, "tie_word_embeddings", 0, &out->tied_embeddings) != 0) return -1;
    if (read_ids(c, c->root, out, 0) != 0) return -1;

    if ((is_llama || is_qwen3) &&
        check_no_bias(c, "attention_bias", "biases on q/k/v/o projections", out->arch) != 0)
        return -1;
    if (is_llama && check_no_bias(c, "mlp_bias", "biases on the MLP projections", out->arch) != 0)
        return -1;
    out->qkv_bias = is_qwen2; /* Qwen2 always has q/k/v biases and none on o_proj */
    out->qk_norm = is_qwen3;
    return read_sliding_window(c, out);
}

/* a parsed config file's root: NULL (with the message) unless it parsed to an object */
static json_t *object_root(json_t *root, const json_error_t *jerr, const char *path, char *err,
                           size_t errlen)
{
    if (!root) {
        ls_errf(err, errlen, "%s: not valid JSON: %s (line %d, column %d)", path, jerr->text,
                jerr->line, jerr->column);
        return NULL;
    }
    if (!json_is_object(root)) {
        ls_errf(err, errlen, "%s: expected a JSON object at the top level", path);
        json_decref(root);
        return NULL;
    }
    return root;
}

static int too_big(const char *path, long long bytes, char *err, size_t errlen)
{
    if (bytes <= LS_HF_MAX_JSON_BYTES) return 0;
    ls_errf(err, errlen, "%s: %lld bytes, more than the %d-byte limit for a config file", path,
            bytes, LS_HF_MAX_JSON_BYTES);
    return 1;
}

static json_t *load_json(const char *path, char *err, size_t errlen)
{
    uint64_t bytes;
    const int fd = ls_open_input(path, &bytes, err, errlen);
    if (fd < 0) return NULL;
    json_t *root = NULL;
    json_error_t jerr;
    if (!too_big(path, (long long)bytes, err, errlen))
        root =
            object_root(json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr), &jerr, path, err, errlen);
    close(fd);
    return root;
}

/* the config of a loaded root (NULL: the loader's error stands), which it releases */
static int config_of_root(json_t *root, const char *path, struct ls_model_config *out, char *err,
                          size_t errlen)
{
    if (!root) return -1;
    struct ctx c = {.path = path, .root = root, .err = err, .errlen = errlen};
    int rc = load_root(&c, out);
    json_decref(root);
    return rc;
}

int hf_config_parse(const char *name, const char *text, size_t len, struct ls_model_config *out,
                    char *err, size_t errlen)
{
    if (too_big(name, (long long)len, err, errlen)) return -1;
    json_error_t jerr;
    json_t *root =
        object_root(json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), &jerr, name, err, errlen);
    return config_of_root(root, name, out, err, errlen);
}

int hf_config_load(const char *path, struct ls_model_config *out, char *err, size_t errlen)
{
    return config_of_root(load_json(path, err, errlen), path, out, err, errlen);
}

int hf_config_load_dir(const char *dir, struct ls_model_config *out, char *err, size_t errlen)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return ls_errf(err, errlen, "%s: path too long", dir);
    if (hf_config_load(path, out, err, errlen) != 0) return -1;
    if ((size_t)snprintf(path, sizeof path, "%s/generation_config.json", dir) >= sizeof path)
        return ls_errf(err, errlen, "%s: path too long", dir);
    struct stat sb;
    if (lstat(path, &sb) != 0) return 0; /* optional; anything by that name must be readable */
    json_t *root = load_json(path, err, errlen);
    if (!root) return -1;
    struct ctx c = {.path = path, .root = root, .err = err, .errlen = errlen};
    int rc = read_ids(&c, root, out, 1);
    json_decref(root);
    return rc;
}
