/* `lockstep plan`: print the shard plan (shard/plan.h) for a model shape as a table or as JSON.
 * The shape comes from flags, from an HF config.json (--config), or both: every value is
 * resolved flag, then config, then default, so a flag always wins. No MPI: this runs anywhere,
 * and prints on rank 0 only if it is started under a launcher.
 * Exit status: 0 planned; 1 the shape cannot be split at this TP size (the message lists the
 * sizes that can); 2 a usage error (unknown flag, missing or malformed value, unreadable
 * config). Every error is one line naming the flag, field or file, ending in a help hint. */
#include "config.h"
#include "json_util.h"
#include "args.h"
#include "commands.h"
#include "log.h"
#include "plan.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum {
    OPT_HEADS = LS_OPT_FIRST_FREE,
    OPT_KV_HEADS,
    OPT_HEAD_DIM,
    OPT_HIDDEN,
    OPT_FFN,
    OPT_VOCAB,
    OPT_LAYERS,
    OPT_TP,
    OPT_DTYPE,
    OPT_KV_DTYPE,
    OPT_TIED,
    OPT_NO_TIED,
    OPT_QKV_BIAS,
    OPT_NO_QKV_BIAS,
    OPT_QK_NORM,
    OPT_NO_QK_NORM,
    OPT_LM_HEAD,
    OPT_JSON,
    OPT_CONFIG,
};

static const struct option long_options[] = {
    {"heads", required_argument, NULL, OPT_HEADS},
    {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
    {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"ffn", required_argument, NULL, OPT_FFN},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"tp", required_argument, NULL, OPT_TP},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
    {"tied", no_argument, NULL, OPT_TIED},
    {"no-tied", no_argument, NULL, OPT_NO_TIED},
    {"qkv-bias", no_argument, NULL, OPT_QKV_BIAS},
    {"no-qkv-bias", no_argument, NULL, OPT_NO_QKV_BIAS},
    {"qk-norm", no_argument, NULL, OPT_QK_NORM},
    {"no-qk-norm", no_argument, NULL, OPT_NO_QK_NORM},
    {"lm-head", required_argument, NULL, OPT_LM_HEAD},
    {"json", no_argument, NULL, OPT_JSON},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* A model shape as far as it is known: 0 (counts) or -1 (switches, dtypes) means unset. Filled
 * once from the flags and once from the config, then merged. */
struct shape {
    int heads, kv_heads, head_dim, dim, ffn, vocab, layers;
    int tied, qkv_bias, qk_norm;
    int dtype; /* index into dtypes[] */
};

static const struct {
    const char *name;
    int bytes;
} dtypes[] = {
    {"bf16", 2}, {"f16", 2}, {"fp16", 2}, {"f32", 4}, {"fp32", 4}, {"fp8", 1},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

static void usage(FILE *f)
{
    fputs(
        "usage: lockstep plan [--config config.json] --heads H [--kv-heads K] [--head-dim E]\n"
        "                     --hidden D --ffn F --vocab V --tp N [options]\n"
        "\n"
        "The tensor-parallel shard plan: the query heads, KV heads, FFN columns and vocab\n"
        "rows each rank holds, its bytes of weights and its bytes of KV cache per token.\n"
        "\n"
        "shape (a flag overrides the --config value):\n"
        "  --config PATH           read the shape from a Hugging Face config.json\n"
        "  --heads H               query heads (num_attention_heads)\n"
        "  --kv-heads K            key/value heads (num_key_value_heads; default H)\n"
        "  --head-dim E            size of one head (head_dim; default D / H)\n"
        "  --hidden D              hidden size (hidden_size)\n"
        "  --ffn F                 FFN intermediate size (intermediate_size)\n"
        "  --vocab V               vocabulary size (vocab_size)\n"
        "  --layers L              decoder layers (num_hidden_layers; default 1)\n"
        "  --tp N                  tensor-parallel size: the number of ranks\n"
        "  --tied, --no-tied       the LM head is the embedding (tie_word_embeddings; default no)\n"
        "  --qkv-bias, --no-qkv-bias   q/k/v projections have biases (attention_bias, qwen2)\n"
        "  --qk-norm, --no-qk-norm     RMSNorm over each q and k head (qwen3)\n"
        "bytes:\n"
        "  --dtype T               weights: bf16 (default, or torch_dtype), f16, f32, fp8\n"
        "  --kv-dtype T            KV cache (default: the weight dtype)\n"
        "  --lm-head MODE          parallel (default: a vocab range per rank) or replicated\n"
        "output:\n"
        "  --json                  print the plan as JSON instead of a table\n"
        "  -h, --help              print this help\n"
        "\n"
        "Attention splits by KV groups (one KV head and its H/K query heads): with N <= K each\n"
        "rank holds whole groups; N > K needs N a multiple of K, each KV head replicated on\n"
        "N/K ranks that share its query heads, and N <= H. FFN columns and vocab rows split in\n"
        "blocks of 64. The embedding and the norms are replicated on every rank.\n"
        "Exit status: 0 planned, 1 the shape cannot be split at this TP size, 2 usage error.\n",
        f);
}

/* One line on rank 0, "plan: <msg>; see 'lockstep plan --help'"; returns status, so a caller
 * can `return fail(2, ...)` (usage error), `fail(1, ...)` (shape) or `fail(-1, ...)` (helper). */
__attribute__((format(printf, 2, 3))) static int fail(int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_usage_error("plan", msg);
    return status;
}

static int parse_count(const char *flag, const char *arg, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v <= 0 || v > INT_MAX) {
        return fail(-1, "--%s: expected a positive integer, found '%s'", flag, arg);
    }
    *out = (int)v;
    return 0;
}

/* index into dtypes[], or -1 */
static int dtype_index(const char *name)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (!strcmp(name, dtypes[i].name)) return i;
    return -1;
}

static int parse_dtype(const char *flag, const char *arg, int *out)
{
    *out = dtype_index(arg);
    if (*out >= 0) return 0;
    return fail(-1, "--%s: expected bf16, f16, f32 or fp8, found '%s'", flag, arg);
}

/* an absent or null field leaves *out as it was */
static int config_count(const json_t *obj, const char *key, const char *path, int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) {
        return fail(-1, "%s: %s: expected a positive integer, found %s", path, key,
                    ls_json_type_name(v));
    }
    json_int_t n = json_integer_value(v);
    if (n <= 0 || n > INT_MAX) {
        return fail(-1, "%s: %s: expected a positive integer, found %" JSON_INTEGER_FORMAT, path,
                    key, n);
    }
    *out = (int)n;
    return 0;
}

static int config_bool(const json_t *obj, const char *key, const char *path, int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        return fail(-1, "%s: %s: expected true or false, found %s", path, key,
                    ls_json_type_name(v));
    }
    *out = json_is_true(v);
    return 0;
}

/* Multimodal configs keep the language model's shape under text_config; the architecture
 * switches are read at the top level, then where the sizes are (which wins). */
static int config_read(const char *path, struct shape *c)
{
    /* a folder opens and reads as empty, which jansson would call a JSON syntax error */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return fail(-1, "%s: expected a config.json file, found a directory", path);
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (jerr.line > 0) return fail(-1, "%s:%d: not valid JSON: %s", path, jerr.line, jerr.text);
        return fail(-1, "%s: cannot read the config: %s", path, jerr.text);
    }
    int rc = -1;
    if (!json_is_object(root)) {
        fail(-1, "%s: expected a JSON object at the top, found %s", path, ls_json_type_name(root));
        goto out;
    }
    const json_t *obj = root, *text = json_object_get(root, "text_config");
    if (!json_object_get(root, "num_attention_heads") && json_is_object(text)) obj = text;
    if (config_count(obj, "num_attention_heads", path, &c->heads) ||
        config_count(obj, "num_key_value_heads", path, &c->kv_heads) ||
        config_count(obj, "head_dim", path, &c->head_dim) ||
        config_count(obj, "hidden_size", path, &c->dim) ||
        config_count(obj, "intermediate_size", path, &c->ffn) ||
        config_count(obj, "vocab_size", path, &c->vocab) ||
        config_count(obj, "num_hidden_layers", path, &c->layers))
        goto out;
    if (obj != root && (config_bool(root, "tie_word_embeddings", path, &c->tied) ||
                        config_bool(root, "attention_bias", path, &c->qkv_bias)))
        goto out;
    if (config_bool(obj, "tie_word_embeddings", path, &c->tied) ||
        config_bool(obj, "attention_bias", path, &c->qkv_bias))
        goto out;
    const char *type = json_string_value(json_object_get(obj, "model_type"));
    if (type && !strcmp(type, "qwen2") && c->qkv_bias < 0) c->qkv_bias = 1;
    if (type && !strcmp(type, "qwen3") && c->qk_norm < 0) c->qk_norm = 1;
    const char *torch = json_string_value(json_object_get(obj, "torch_dtype"));
    if (!torch) torch = json_string_value(json_object_get(obj, "dtype"));
    if (!torch) torch = json_string_value(json_object_get(root, "torch_dtype"));
    if (torch && !strcmp(torch, "bfloat16")) c->dtype = dtype_index("bf16");
    if (torch && !strcmp(torch, "float16")) c->dtype = dtype_index("f16");
    if (torch && !strcmp(torch, "float32")) c->dtype = dtype_index("f32");
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static int pick(int flag, int config)
{
    return flag > 0 ? flag : config;
}

static int pick_switch(int flag, int config)
{
    return flag >= 0 ? flag : config > 0;
}

/* "1.23 GiB" */
static void human_bytes(size_t n, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0)
        snprintf(buf, len, "%zu B", n);
    else
        snprintf(buf, len, "%.2f %s", v, units[u]);
}

static void bytes_cell(size_t n, char *buf, size_t len)
{
    char h[32];
    human_bytes(n, h, sizeof h);
    if (n < 1024)
        snprintf(buf, len, "%s", h);
    else
        snprintf(buf, len, "%s (%zu)", h, n);
}

#define N_COLS 8
#define CELL   64

static void print_table(const struct ls_plan_input *in, const struct ls_shard *s, const char *dtype,
                        const char *kv_dtype)
{
    int n = in->tp;
    ls_print0("plan: tp %d; %d query heads, %d kv heads (%d per kv head), head_dim %d, hidden %d, "
              "ffn %d, vocab %d, layers %d\n",
              n, in->heads, in->kv_heads, in->heads / in->kv_heads, in->head_dim, in->dim, in->ffn,
              in->vocab, in->layers);
    ls_print0("      weights %s, kv cache %s, embeddings %s, lm head %s%s%s; "
              "ranges are [first,end) count\n",
              dtype, kv_dtype, in->tied ? "tied" : "untied",
              in->lm_head_replicated ? "replicated" : "vocab-parallel",
              in->qkv_bias ? ", qkv bias" : "", in->qk_norm ? ", qk norm" : "");

    static const char *head[N_COLS] = {"rank",       "q heads",       "kv heads", "ffn cols",
                                       "vocab rows", "weights/layer", "weights",  "kv/token"};
    char(*cells)[N_COLS][CELL] = calloc((size_t)n + 2, sizeof *cells);
    if (!cells) {
        ls_error("plan: out of memory for a table of %d ranks", n);
        return;
    }
    for (int c = 0; c < N_COLS; c++) snprintf(cells[0][c], CELL, "%s", head[c]);
    long long q = 0, kv = 0, ffn = 0, vocab = 0;
    size_t layer = 0, total = 0, kvtok = 0;
    for (int r = 0; r < n; r++) {
        const struct ls_shard *x = &s[r];
        char(*row)[CELL] = cells[r + 1];
        snprintf(row[0], CELL, "%d", x->rank);
        snprintf(row[1], CELL, "[%d,%d) %d", x->q_first, x->q_first + x->q_heads, x->q_heads);
        snprintf(row[2], CELL, "[%d,%d) %d", x->kv_first, x->kv_first + x->kv_heads, x->kv_heads);
        if (x->kv_replicas > 1)
            snprintf(row[2] + strlen(row[2]), CELL - strlen(row[2]), " (x%d)", x->kv_replicas);
        snprintf(row[3], CELL, "[%d,%d) %d", x->ffn_first, x->ffn_first + x->ffn_cols, x->ffn_cols);
        if (in->lm_head_replicated)
            snprintf(row[4], CELL, "replicated %d", x->vocab_rows);
        else
            snprintf(row[4], CELL, "[%d,%d) %d", x->vocab_first, x->vocab_first + x->vocab_rows,
                     x->vocab_rows);
        bytes_cell(x->weight_bytes_layer, row[5], CELL);
        bytes_cell(x->weight_bytes, row[6], CELL);
        bytes_cell(x->kv_bytes_token, row[7], CELL);
        q += x->q_heads, kv += x->kv_heads, ffn += x->ffn_cols, vocab += x->vocab_rows;
        layer += x->weight_bytes_layer, total += x->weight_bytes, kvtok += x->kv_bytes_token;
    }
    char(*tot)[CELL] = cells[n + 1];
    snprintf(tot[0], CELL, "total");
    snprintf(tot[1], CELL, "%lld", q);
    snprintf(tot[2], CELL, "%lld", kv);
    snprintf(tot[3], CELL, "%lld", ffn);
    snprintf(tot[4], CELL, "%lld", vocab);
    bytes_cell(layer, tot[5], CELL);
    bytes_cell(total, tot[6], CELL);
    bytes_cell(kvtok, tot[7], CELL);

    int width[N_COLS] = {0};
    for (int r = 0; r < n + 2; r++)
        for (int c = 0; c < N_COLS; c++) {
            int w = (int)strlen(cells[r][c]);
            if (w > width[c]) width[c] = w;
        }
    for (int r = 0; r < n + 2; r++) {
        char line[N_COLS * (CELL + 2) + 2];
        size_t used = 0;
        for (int c = 0; c < N_COLS; c++)
            used += (size_t)snprintf(line + used, sizeof line - used, c ? "  %-*s" : "%*s",
                                     width[c], cells[r][c]);
        while (used > 0 && line[used - 1] == ' ') line[--used] = 0;
        ls_print0("%s\n", line);
    }
    size_t whole = ls_plan_unsharded_bytes(in);
    char a[32], b[32], d[32];
    human_bytes(whole, a, sizeof a);
    human_bytes(total, b, sizeof b);
    human_bytes(total - whole, d, sizeof d);
    if (n == 1)
        ls_print0("weights: %s on one rank\n", a);
    else
        ls_print0("weights: %s unsharded, %s over %d ranks (%s held more than once: embedding, "
                  "norms%s%s)\n",
                  a, b, n, d, in->lm_head_replicated && !in->tied ? ", LM head" : "",
                  s[0].kv_replicas > 1 ? ", replicated KV heads" : "");
    free(cells);
}

static int print_json(const struct ls_plan_input *in, const struct ls_shard *s, const char *dtype,
                      const char *kv_dtype)
{
    json_t *root = json_object(), *input = json_object(), *ranks = json_array();
    json_object_set_new(input, "heads", json_integer(in->heads));
    json_object_set_new(input, "kv_heads", json_integer(in->kv_heads));
    json_object_set_new(input, "head_dim", json_integer(in->head_dim));
    json_object_set_new(input, "hidden", json_integer(in->dim));
    json_object_set_new(input, "ffn", json_integer(in->ffn));
    json_object_set_new(input, "vocab", json_integer(in->vocab));
    json_object_set_new(input, "layers", json_integer(in->layers));
    json_object_set_new(input, "tp", json_integer(in->tp));
    json_object_set_new(input, "dtype", json_string(dtype));
    json_object_set_new(input, "weight_bytes_per_element", json_integer(in->weight_bytes));
    json_object_set_new(input, "kv_dtype", json_string(kv_dtype));
    json_object_set_new(input, "kv_bytes_per_element", json_integer(in->kv_bytes));
    json_object_set_new(input, "tied", json_boolean(in->tied));
    json_object_set_new(input, "qkv_bias", json_boolean(in->qkv_bias));
    json_object_set_new(input, "qk_norm", json_boolean(in->qk_norm));
    json_object_set_new(input, "lm_head",
                        json_string(in->lm_head_replicated ? "replicated" : "parallel"));
    json_object_set_new(input, "block", json_integer(LS_PLAN_BLOCK));
    json_object_set_new(root, "input", input);

    size_t total = 0, kvtok = 0;
    for (int r = 0; r < in->tp; r++) {
        const struct ls_shard *x = &s[r];
        json_t *o = json_object();
        json_object_set_new(o, "rank", json_integer(x->rank));
        json_object_set_new(o, "q_first", json_integer(x->q_first));
        json_object_set_new(o, "q_heads", json_integer(x->q_heads));
        json_object_set_new(o, "kv_first", json_integer(x->kv_first));
        json_object_set_new(o, "kv_heads", json_integer(x->kv_heads));
        json_object_set_new(o, "kv_replicas", json_integer(x->kv_replicas));
        json_object_set_new(o, "ffn_first", json_integer(x->ffn_first));
        json_object_set_new(o, "ffn_cols", json_integer(x->ffn_cols));
        json_object_set_new(o, "vocab_first", json_integer(x->vocab_first));
        json_object_set_new(o, "vocab_rows", json_integer(x->vocab_rows));
        json_object_set_new(o, "vocab_replicated", json_boolean(in->lm_head_replicated));
        json_object_set_new(o, "weight_bytes_layer",
                            json_integer((json_int_t)x->weight_bytes_layer));
        json_object_set_new(o, "weight_bytes", json_integer((json_int_t)x->weight_bytes));
        json_object_set_new(o, "kv_bytes_token", json_integer((json_int_t)x->kv_bytes_token));
        json_array_append_new(ranks, o);
        total += x->weight_bytes, kvtok += x->kv_bytes_token;
    }
    json_object_set_new(root, "ranks", ranks);
    json_t *totals = json_object();
    json_object_set_new(totals, "weight_bytes", json_integer((json_int_t)total));
    json_object_set_new(totals, "weight_bytes_unsharded",
                        json_integer((json_int_t)ls_plan_unsharded_bytes(in)));
    json_object_set_new(totals, "kv_bytes_token", json_integer((json_int_t)kvtok));
    json_object_set_new(root, "totals", totals);

    /* dumped to a string so that it goes through the rank-0 printer like every other output */
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) {
        ls_error("plan: cannot format the plan as JSON (out of memory)");
        return 1;
    }
    ls_print0("%s\n", text);
    free(text);
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    struct shape flags = {.tied = -1, .qkv_bias = -1, .qk_norm = -1, .dtype = -1};
    struct shape conf = {.tied = -1, .qkv_bias = -1, .qk_norm = -1, .dtype = -1};
    int tp = 0, kv_dtype = -1, lm_head_replicated = 0, json = 0;
    const char *config = NULL;
    char err[512];

    int opt, reset = 1;
    while ((opt = ls_getopt(argc, argv, "h", long_options, &reset, err, sizeof err)) != -1) {
        int rc = 0;
        switch (opt) {
        case OPT_HEADS:
            rc = parse_count("heads", optarg, &flags.heads);
            break;
        case OPT_KV_HEADS:
            rc = parse_count("kv-heads", optarg, &flags.kv_heads);
            break;
        case OPT_HEAD_DIM:
            rc = parse_count("head-dim", optarg, &flags.head_dim);
            break;
        case OPT_HIDDEN:
            rc = parse_count("hidden", optarg, &flags.dim);
            break;
        case OPT_FFN:
            rc = parse_count("ffn", optarg, &flags.ffn);
            break;
        case OPT_VOCAB:
            rc = parse_count("vocab", optarg, &flags.vocab);
            break;
        case OPT_LAYERS:
            rc = parse_count("layers", optarg, &flags.layers);
            break;
        case OPT_TP:
            rc = parse_count("tp", optarg, &tp);
            break;
        case OPT_DTYPE:
            rc = parse_dtype("dtype", optarg, &flags.dtype);
            break;
        case OPT_KV_DTYPE:
            rc = parse_dtype("kv-dtype", optarg, &kv_dtype);
            break;
        case OPT_TIED:
            flags.tied = 1;
            break;
        case OPT_NO_TIED:
            flags.tied = 0;
            break;
        case OPT_QKV_BIAS:
            flags.qkv_bias = 1;
            break;
        case OPT_NO_QKV_BIAS:
            flags.qkv_bias = 0;
            break;
        case OPT_QK_NORM:
            flags.qk_norm = 1;
            break;
        case OPT_NO_QK_NORM:
            flags.qk_norm = 0;
            break;
        case OPT_LM_HEAD:
            if (!strcmp(optarg, "replicated"))
                lm_head_replicated = 1;
            else if (!strcmp(optarg, "parallel"))
                lm_head_replicated = 0;
            else
                rc = fail(-1, "--lm-head: expected replicated or parallel, found '%s'", optarg);
            break;
        case OPT_JSON:
            json = 1;
            break;
        case OPT_CONFIG:
            config = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return ls_usage_error("plan", err); /* unknown flag or missing value */
        }
        if (rc) return 2;
    }
    if (optind < argc)
        return fail(2, "unexpected argument '%s' (plan takes only flags)", argv[optind]);
    if (config && config_read(config, &conf) != 0) return 2;

    struct ls_plan_input in = {0};
    in.heads = pick(flags.heads, conf.heads);
    in.kv_heads = pick(flags.kv_heads, conf.kv_heads);
    in.head_dim = pick(flags.head_dim, conf.head_dim);
    in.dim = pick(flags.dim, conf.dim);
    in.ffn = pick(flags.ffn, conf.ffn);
    in.vocab = pick(flags.vocab, conf.vocab);
    in.layers = pick(flags.layers, conf.layers);
    in.tp = tp;
    in.tied = pick_switch(flags.tied, conf.tied);
    in.qkv_bias = pick_switch(flags.qkv_bias, conf.qkv_bias);
    in.qk_norm = pick_switch(flags.qk_norm, conf.qk_norm);
    in.lm_head_replicated = lm_head_replicated;

    const struct {
        int value;
        const char *flag, *key;
    } required[] = {
        {in.heads, "heads", "num_attention_heads"},
        {in.dim, "hidden", "hidden_size"},
        {in.ffn, "ffn", "intermediate_size"},
        {in.vocab, "vocab", "vocab_size"},
        {in.tp, "tp", NULL},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        if (required[i].value > 0) continue;
        if (required[i].key)
            return fail(2, "missing --%s (or %s in a --config file)", required[i].flag,
                        required[i].key);
        return fail(2, "missing --%s", required[i].flag);
    }
    if (!in.kv_heads) in.kv_heads = in.heads;
    if (!in.layers) in.layers = 1;
    if (!in.head_dim) {
        if (in.dim % in.heads != 0)
            return fail(2,
                        "hidden %d is not a multiple of heads %d, so the head size is not "
                        "implied: pass --head-dim",
                        in.dim, in.heads);
        in.head_dim = in.dim / in.heads;
    }
    int wd = flags.dtype >= 0 ? flags.dtype : conf.dtype >= 0 ? conf.dtype : 0;
    int kd = kv_dtype >= 0 ? kv_dtype : wd;
    in.weight_bytes = dtypes[wd].bytes;
    in.kv_bytes = dtypes[kd].bytes;

    /* validate through one rank before allocating tp shards: tp may be any int here */
    struct ls_shard first;
    if (ls_plan_for_rank(&in, 0, &first, err, sizeof err) != 0) return fail(1, "%s", err);
    struct ls_shard *shards = calloc((size_t)in.tp, sizeof *shards);
    if (!shards) return fail(1, "out of memory for %d shards", in.tp);
    int rc = 0;
    if (ls_plan_make(&in, shards, err, sizeof err) != 0)
        rc = fail(1, "%s", err);
    else if (json)
        rc = print_json(&in, shards, dtypes[wd].name, dtypes[kd].name);
    else
        print_table(&in, shards, dtypes[wd].name, dtypes[kd].name);
    free(shards);
    return rc;
}
