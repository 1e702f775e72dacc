/* Unit tests of runtime/hfconfig.c: the committed fixtures' config.json (transformers v5
 * layout, rope_parameters), hand-written configs in the v4 layout of real checkpoints (Llama
 * 3.1, Mistral 7B, Qwen2.5), generation_config.json overriding the end ids, and rejection of
 * missing fields, wrong types, unsupported architectures and features, inconsistent sizes
 * and files that are not JSON, each with a message naming the field. */
#include "hfconfig.h"

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cunit_tap.h"

static char tmpdir[256];
static char fixtures[512];
static char err[512];

static void poison_config(struct ls_model_config *c)
{
    memset(c, 0xa5, sizeof *c);
    c->norm_eps = c->rope_theta = c->rope_factor = NAN;
    c->rope_low_freq_factor = c->rope_high_freq_factor = NAN;
}

static int has(const char *s, const char *needle)
{
    return strstr(s, needle) != NULL;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

static const char *tmp_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

/* a Llama 3.1 8B config.json as transformers 4.x wrote it */
static const char *llama31 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 128000,"
    " \"eos_token_id\": [128001, 128008, 128009], \"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
    " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0,"
    " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.43.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";

/* loads text written as config.json into *c, returns hf_config_load's result */
static int load_text(const char *text, struct ls_model_config *c)
{
    write_text(tmp_path("config.json"), text);
    poison_config(c);
    err[0] = 0;
    return hf_config_load(tmp_path("config.json"), c, err, sizeof err);
}

/* the Llama 3.1 config with one field replaced (value JSON text) or removed (value NULL) */
static int load_mutated(const char *field, const char *value, struct ls_model_config *c)
{
    json_t *root = json_loads(llama31, 0, NULL);
    if (value)
        json_object_set_new(root, field, json_loads(value, JSON_DECODE_ANY, NULL));
    else
        json_object_del(root, field);
    char *text = json_dumps(root, 0);
    int rc = load_text(text, c);
    free(text);
    json_decref(root);
    return rc;
}

static void expect_error(const char *field, const char *value, const char *needle1,
                         const char *needle2)
{
    struct ls_model_config c;
    int rc = load_mutated(field, value, &c);
    CU_ASSERT_EQUAL(rc, -1);
    int ok = has(err, "config.json") && has(err, needle1) && (!needle2 || has(err, needle2));
    if (!ok) printf("# %s=%s: unexpected message: %s\n", field, value ? value : "(removed)", err);
    CU_ASSERT(ok);
}

/* ------------------------------------------------------------- fixtures ---- */

static int load_fixture(const char *model, struct ls_model_config *c)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s/config.json", fixtures, model);
    poison_config(c);
    int rc = hf_config_load(path, c, err, sizeof err);
    if (rc != 0) printf("# %s\n", err);
    return rc;
}

static void test_fixture_llama_v5_layout_with_llama3_rope(void)
{
    struct ls_model_config c;
    CU_ASSERT_EQUAL_FATAL(load_fixture("tiny-llama", &c), 0);
    CU_ASSERT_STRING_EQUAL(c.arch, "llama");
    CU_ASSERT(c.n_layers == 2 && c.dim == 128 && c.n_heads == 8 && c.n_kv_heads == 4);
    CU_ASSERT(c.head_dim == 16 && c.ffn == 256 && c.vocab == 512 && c.max_pos == 256);
    CU_ASSERT_DOUBLE_EQUAL(c.norm_eps, 1e-5, 1e-12);
    CU_ASSERT_EQUAL(c.rope_theta, 500000.0f);
    CU_ASSERT_EQUAL(c.rope_style, LS_ROPE_NEOX);
    CU_ASSERT_EQUAL(c.rope_scaling, LS_ROPE_SCALING_LLAMA3);
    CU_ASSERT(c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f &&
              c.rope_high_freq_factor == 4.0f && c.rope_orig_max_pos == 64);
    CU_ASSERT(c.tied_embeddings == 0 && c.qkv_bias == 0 && c.qk_norm == 0);
    CU_ASSERT(c.bos_id == 1 && c.n_eos == 1 && c.eos_ids[0] == 2);
}

static void test_fixture_qwen2_has_qkv_bias_and_tied_embeddings(void)
{
    struct ls_model_config c;
    CU_ASSERT_EQUAL_FATAL(load_fixture("tiny-qwen2", &c), 0);
    CU_ASSERT_STRING_EQUAL(c.arch, "qwen2");
    CU_ASSERT(c.n_heads == 8 && c.n_kv_heads == 2 && c.head_dim == 16); /* head_dim defaulted */
    CU_ASSERT(c.qkv_bias == 1 && c.qk_norm == 0 && c.tied_embeddings == 1);
    CU_ASSERT_EQUAL(c.rope_theta, 1000000.0f);
    CU_ASSERT_EQUAL(c.rope_scaling, LS_ROPE_SCALING_NONE);
    CU_ASSERT(c.bos_id == -1 && c.n_eos == 2 && c.eos_ids[0] == 3 && c.eos_ids[1] == 4);
    CU_ASSERT_EQUAL(c.max_pos, 256);
}

static void test_fixture_qwen3_has_qk_norm_and_wide_heads(void)
{
    struct ls_model_config c;
    CU_ASSERT_EQUAL_FATAL(load_fixture("tiny-qwen3", &c), 0);
    CU_ASSERT_STRING_EQUAL(c.arch, "qwen3");
    CU_ASSERT(c.dim == 128 && c.n_heads == 8 && c.head_dim == 32 && c.n_kv_heads == 4);
    CU_ASSERT(c.qk_norm == 1 && c.qkv_bias == 0 && c.tied_embeddings == 0);
    CU_ASSERT(c.n_eos == 1 && c.eos_ids[0] == 5 && c.bos_id == -1);
}

/* ------------------------------------------------------ real v4 configs ---- */

static void test_llama31_v4_layout(void)
{
    struct ls_model_config c;
    CU_ASSERT_EQUAL_FATAL(load_text(llama31, &c), 0);
    CU_ASSERT_STRING_EQUAL(c.arch, "llama");
    CU_ASSERT(c.n_layers == 32 && c.dim == 4096 && c.n_heads == 32 && c.n_kv_heads == 8);
    CU_ASSERT(c.head_dim == 128 && c.ffn == 14336 && c.vocab == 128256 && c.max_pos == 131072);
    CU_ASSERT_EQUAL(c.rope_theta, 500000.0f);
    CU_ASSERT(c.rope_scaling == LS_ROPE_SCALING_LLAMA3 && c.rope_orig_max_pos == 8192);
    CU_ASSERT(c.bos_id == 128000 && c.n_eos == 3 && c.eos_ids[2] == 128009);
}

static void test_mistral_sliding_window_caps_context(void)
{
    const char *mistral =
        "{\"architectures\": [\"MistralForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"intermediate_size\": 14336,"
        " \"max_position_embeddings\": 32768, \"model_type\": \"mistral\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
        " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"sliding_window\": %s,"
        " \"tie_word_embeddings\": false, \"vocab_size\": 32000}";
    char text[1024];
    struct ls_model_config c;
    snprintf(text, sizeof text, mistral, "4096"); /* Mistral 7B v0.1 */
    CU_ASSERT_EQUAL_FATAL(load_text(text, &c), 0);
    CU_ASSERT_STRING_EQUAL(c.arch, "mistral");
    CU_ASSERT_EQUAL(c.max_pos, 4096);
    CU_ASSERT(c.rope_scaling == LS_ROPE_SCALING_NONE && c.rope_theta == 10000.0f);
    snprintf(text, sizeof text, mistral, "null"); /* v0.2 and later */
    CU_ASSERT_EQUAL_FATAL(load_text(text, &c), 0);
    CU_ASSERT_EQUAL(c.max_pos, 32768);
    snprintf(text, sizeof text, mistral, "\"4k\"");
    CU_ASSERT_EQUAL(load_text(text, &c), -1);
    CU_ASSERT(has(err, "field 'sliding_window': expected a positive integer or null"));
}

static void test_qwen25_unused_sliding_window_is_ignored(void)
{
    const char *qwen =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0,"
        " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"hidden_act\": \"silu\","
        " \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"
        " \"max_position_embeddings\": 32768, \"max_window_layers\": 21, \"model_type\": \"qwen2\","
        " \"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"
        " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
        " \"use_cache\": true, \"use_sliding_window\": %s, \"vocab_size\": 151936}";
    char text[1024];
    struct ls_model_config c;
    snprintf(text, sizeof text, qwen, "false");
    CU_ASSERT_EQUAL_FATAL(load_text(text, &c), 0);
    CU_ASSERT(c.head_dim == 64 && c.n_kv_heads == 2 && c.qkv_bias == 1 && c.tied_embeddings == 1);
    CU_ASSERT_EQUAL(c.max_pos, 32768);
    snprintf(text, sizeof text, qwen, "true"); /* a window equal to the context changes nothing */
    CU_ASSERT_EQUAL_FATAL(load_text(text, &c), 0);
    CU_ASSERT_EQUAL(c.max_pos, 32768);
}

static void test_v5_sliding_layer_types_cap_context(void)
{
    struct ls_model_config c;
    json_t *root = json_loads(llama31, 0, NULL);
    json_object_set_new(root, "architectures", json_pack("[s]", "Qwen3ForCausalLM"));
    json_object_set_new(root, "model_type", json_string("qwen3"));
    json_object_set_new(root, "layer_types",
                        json_pack("[ss]", "full_attention", "sliding_attention"));
    json_object_set_new(root, "sliding_window", json_integer(1024));
    char *text = json_dumps(root, 0);
    CU_ASSERT_EQUAL(load_text(text, &c), 0);
    CU_ASSERT_EQUAL(c.max_pos, 1024);
    free(text);
    json_object_set_new(root, "layer_types", json_pack("[ss]", "full_attention", "chunked"));
    text = json_dumps(root, 0);
    CU_ASSERT_EQUAL(load_text(text, &c), -1);
    CU_ASSERT(has(err, "'layer_types'[1]: unsupported layer type 'chunked'"));
    free(text);
    json_decref(root);
}

static void test_linear_and_default_rope(void)
{
    struct ls_model_config c;
    CU_ASSERT_EQUAL(load_mutated("rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}", &c), 0);
    CU_ASSERT(c.rope_scaling == LS_ROPE_SCALING_LINEAR && c.rope_factor == 2.0f);
    CU_ASSERT_EQUAL(load_mutated("rope_scaling", "null", &c), 0);
    CU_ASSERT(c.rope_scaling == LS_ROPE_SCALING_NONE && c.rope_factor == 1.0f);
    CU_ASSERT_EQUAL(load_mutated("rope_theta", NULL, &c), 0);
    CU_ASSERT_EQUAL(c.rope_theta, 10000.0f); /* the default */
    CU_ASSERT_EQUAL(
        load_mutated("rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 1e6}", &c),
        0);
    CU_ASSERT(c.rope_scaling == LS_ROPE_SCALING_NONE && c.rope_theta == 1e6f);
}

static void test_defaults_for_optional_fields(void)
{
    struct ls_model_config c;
    json_t *root = json_loads(llama31, 0, NULL);
    const char *optional[] = {
        "num_key_value_heads", "head_dim", "tie_word_embeddings", "bos_token_id", "eos_token_id",
        "attention_bias",      "mlp_bias", "hidden_act",          "rope_scaling", "rope_theta",
        "architectures"};
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
        json_object_del(root, optional[i]);
    char *text = json_dumps(root, 0);
    CU_ASSERT_EQUAL_FATAL(load_text(text, &c), 0); /* model_type "llama" stands in */
    CU_ASSERT_STRING_EQUAL(c.arch, "llama");
    CU_ASSERT(c.n_kv_heads == 32 && c.head_dim == 128 && c.tied_embeddings == 0);
    CU_ASSERT(c.bos_id == -1 && c.n_eos == 0 && c.rope_theta == 10000.0f);
    CU_ASSERT(c.rope_scaling == LS_ROPE_SCALING_NONE && c.rope_style == LS_ROPE_NEOX);
    free(text);
    json_decref(root);
}

static void test_generation_config_overrides_end_ids(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/gen", tmpdir);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, llama31);
    struct ls_model_config c;
    poison_config(&c);
    CU_ASSERT_EQUAL(hf_config_load_dir(dir, &c, err, sizeof err), 0); /* none there yet */
    CU_ASSERT(c.n_eos == 3);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    write_text(path, "{\"bos_token_id\": 128000, \"eos_token_id\": [128009, 128001],"
                     " \"do_sample\": true, \"temperature\": 0.6}");
    poison_config(&c);
    CU_ASSERT_EQUAL(hf_config_load_dir(dir, &c, err, sizeof err), 0);
    CU_ASSERT(c.n_eos == 2 && c.eos_ids[0] == 128009 && c.eos_ids[1] == 128001);
    CU_ASSERT_EQUAL(c.bos_id, 128000);
    write_text(path, "{\"do_sample\": true}"); /* sets no ids: config.json's stay */
    CU_ASSERT_EQUAL(hf_config_load_dir(dir, &c, err, sizeof err), 0);
    CU_ASSERT(c.n_eos == 3 && c.bos_id == 128000);
    write_text(path, "{\"eos_token_id\": 999999}");
    CU_ASSERT_EQUAL(hf_config_load_dir(dir, &c, err, sizeof err), -1);
    CU_ASSERT(has(err, "generation_config.json: field 'eos_token_id'"));
}

/* --------------------------------------------------------------- errors ---- */

static void test_rejects_missing_required_fields(void)
{
    const char *required[] = {"num_hidden_layers", "hidden_size", "num_attention_heads",
                              "intermediate_size", "vocab_size",  "max_position_embeddings"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        char needle[128];
        snprintf(needle, sizeof needle, "field '%s': expected a positive integer", required[i]);
        expect_error(required[i], NULL, needle, "found nothing (missing)");
    }
    expect_error("rms_norm_eps", NULL, "field 'rms_norm_eps': expected a number in (0, 1)",
                 "found nothing");
}

static void test_rejects_wrong_types(void)
{
    expect_error("hidden_size", "\"4096\"", "field 'hidden_size': expected a positive integer",
                 "found string \"4096\"");
    expect_error("hidden_size", "4096.0", "field 'hidden_size'", "found a real number (4096)");
    expect_error("num_hidden_layers", "-2", "field 'num_hidden_layers'", "found -2");
    expect_error("vocab_size", "0", "field 'vocab_size'", "found 0");
    expect_error("vocab_size", "null", "field 'vocab_size'", "found null");
    expect_error("intermediate_size", "[14336]", "field 'intermediate_size'", "found an array");
    expect_error("max_position_embeddings", "4294967296", "field 'max_position_embeddings'",
                 "found 4294967296");
    expect_error("rms_norm_eps", "\"1e-5\"", "field 'rms_norm_eps'", "found string");
    expect_error("rms_norm_eps", "0", "field 'rms_norm_eps'", "found 0");
    expect_error("rope_theta", "-1", "field 'rope_theta': expected a positive number", "found -1");
    /* positive doubles that float rounds to 0 (fuzz_hfconfig aborts on them without the check) */
    expect_error("rope_theta", "1e-50", "field 'rope_theta': expected a positive number", NULL);
    expect_error("rms_norm_eps", "1e-50", "field 'rms_norm_eps'", NULL);
    expect_error("tie_word_embeddings", "1", "field 'tie_word_embeddings': expected true or false",
                 "found 1");
    expect_error("num_key_value_heads", "64", "field 'num_key_value_heads'", "found 64");
    expect_error("rope_scaling", "\"llama3\"", "field 'rope_scaling': expected an object or null",
                 NULL);
    expect_error("rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}",
                 "field 'rope_scaling.low_freq_factor': expected a positive number", NULL);
    expect_error("rope_scaling", "{\"factor\": 8.0}", "field 'rope_scaling.rope_type'",
                 "found nothing");
    expect_error("rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": \"big\"}",
                 "field 'rope_parameters.rope_theta'", "found string");
    expect_error("architectures", "\"LlamaForCausalLM\"", "field 'architectures'", "found string");
}

static void test_rejects_unsupported_architectures(void)
{
    expect_error("architectures", "[\"GPT2LMHeadModel\"]",
                 "unsupported architecture 'GPT2LMHeadModel' (architectures[0]",
                 "supported: LlamaForCausalLM/llama, MistralForCausalLM/mistral, "
                 "Qwen2ForCausalLM/qwen2, Qwen3ForCausalLM/qwen3");
    expect_error("architectures", "[\"LlamaForSequenceClassification\"]",
                 "unsupported architecture 'LlamaForSequenceClassification'", NULL);
    struct ls_model_config c;
    json_t *root = json_loads(llama31, 0, NULL);
    json_object_del(root, "architectures");
    json_object_set_new(root, "model_type", json_string("gemma"));
    char *text = json_dumps(root, 0);
    CU_ASSERT_EQUAL(load_text(text, &c), -1);
    CU_ASSERT(has(err, "unsupported architecture 'gemma' (model_type"));
    free(text);
    json_object_del(root, "model_type");
    text = json_dumps(root, 0);
    CU_ASSERT_EQUAL(load_text(text, &c), -1);
    CU_ASSERT(has(err, "field 'model_type': expected a string (no 'architectures' either)"));
    free(text);
    json_decref(root);
}

static void test_rejects_unsupported_features(void)
{
    expect_error("attention_bias", "true", "field 'attention_bias': true",
                 "not supported for llama");
    expect_error("mlp_bias", "true", "field 'mlp_bias': true", "not supported for llama");
    expect_error("hidden_act", "\"gelu\"", "field 'hidden_act': expected \"silu\"",
                 "found string \"gelu\"");
    expect_error("rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}",
                 "rope_scaling: unsupported RoPE type 'yarn'",
                 "supported: default, linear, llama3");
    expect_error("rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2.0}",
                 "unsupported RoPE type 'dynamic'", NULL);
    expect_error("partial_rotary_factor", "0.5", "field 'partial_rotary_factor': expected 1",
                 "found a real number (0.5)");
    expect_error("rope_parameters", "{\"rope_type\": \"default\", \"partial_rotary_factor\": 0.25}",
                 "field 'rope_parameters.partial_rotary_factor'", NULL);
    expect_error("rope_scaling",
                 "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0,"
                 " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}",
                 "high_freq_factor (4) must be greater than low_freq_factor (4)", NULL);
}

static void test_rejects_inconsistent_sizes(void)
{
    expect_error("num_key_value_heads", "6",
                 "num_attention_heads (32) is not a multiple of num_key_value_heads (6)", NULL);
    expect_error("head_dim", "127",
                 "head_dim: expected an even number (RoPE rotates pairs of dimensions) up to 1024, "
                 "found 127",
                 NULL);
    expect_error("head_dim", "2048", "head_dim: expected an even number", "found 2048");
    expect_error("head_dim", "0", "field 'head_dim': expected a positive integer", "found 0");
    struct ls_model_config c;
    json_t *root = json_loads(llama31, 0, NULL);
    json_object_del(root, "head_dim");
    json_object_set_new(root, "num_attention_heads", json_integer(30));
    json_object_set_new(root, "num_key_value_heads", json_integer(10));
    char *text = json_dumps(root, 0);
    CU_ASSERT_EQUAL(load_text(text, &c), -1);
    CU_ASSERT(has(err, "hidden_size (4096) is not a multiple of num_attention_heads (30)"));
    free(text);
    json_decref(root);
    expect_error("eos_token_id", "128256",
                 "field 'eos_token_id': expected a token id inside the vocabulary", "found 128256");
    expect_error("eos_token_id", "[1,2,3,4,5,6,7,8,9]",
                 "field 'eos_token_id': expected at most 8 ids", NULL);
    expect_error("eos_token_id", "[1,\"2\"]", "field 'eos_token_id'", "found string \"2\"");
    expect_error("bos_token_id", "-1", "field 'bos_token_id'", "found -1");
}

static void test_rejects_files_that_are_not_config_json(void)
{
    struct ls_model_config c;
    CU_ASSERT_EQUAL(load_text("{\"hidden_size\": 4096,", &c), -1);
    CU_ASSERT(has(err, "config.json: not valid JSON") && has(err, "line"));
    CU_ASSERT_EQUAL(load_text("[1, 2]", &c), -1);
    CU_ASSERT(has(err, "expected a JSON object at the top level"));
    CU_ASSERT_EQUAL(load_text("", &c), -1);
    CU_ASSERT(has(err, "not valid JSON"));
    CU_ASSERT_EQUAL(load_text("{\"hidden_size\": 1, \"hidden_size\": 2}", &c), -1);
    CU_ASSERT(has(err, "duplicate"));
    CU_ASSERT_EQUAL(hf_config_load(tmp_path("missing.json"), &c, err, sizeof err), -1);
    CU_ASSERT(has(err, "missing.json: cannot open"));
    /* a FIFO is refused at once (a blocking open would hang: the alarm ends the test), and a
     * directory by what it is, not as bad JSON; the same for generation_config.json */
    CU_ASSERT_FATAL(mkfifo(tmp_path("fifo.json"), 0600) == 0);
    alarm(10);
    CU_ASSERT_EQUAL(hf_config_load(tmp_path("fifo.json"), &c, err, sizeof err), -1);
    CU_ASSERT(has(err, "fifo.json: expected a regular file, found a FIFO"));
    alarm(0);
    CU_ASSERT_EQUAL(hf_config_load(tmpdir, &c, err, sizeof err), -1);
    CU_ASSERT(has(err, "expected a regular file, found a directory"));
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/genfifo", tmpdir);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, llama31);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    CU_ASSERT_FATAL(mkfifo(path, 0600) == 0);
    alarm(10);
    CU_ASSERT_EQUAL(hf_config_load_dir(dir, &c, err, sizeof err), -1);
    CU_ASSERT(has(err, "generation_config.json: expected a regular file, found a FIFO"));
    alarm(0);
}

/* ----------------------------------------------------------------- main ---- */

static int suite_init(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/lockstep-hfc-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int suite_clean(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const char *src = getenv("SRCDIR");
    snprintf(fixtures, sizeof fixtures, "%s/tests/fixtures", src ? src : ".");
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("hfconfig", suite_init, suite_clean);
    CU_add_test(s, "tiny-llama: v5 layout with llama3 RoPE",
                test_fixture_llama_v5_layout_with_llama3_rope);
    CU_add_test(s, "tiny-qwen2: q/k/v biases and tied embeddings",
                test_fixture_qwen2_has_qkv_bias_and_tied_embeddings);
    CU_add_test(s, "tiny-qwen3: q/k norm and head_dim != hidden/heads",
                test_fixture_qwen3_has_qk_norm_and_wide_heads);
    CU_add_test(s, "Llama 3.1 config in the v4 layout", test_llama31_v4_layout);
    CU_add_test(s, "Mistral sliding window caps the context",
                test_mistral_sliding_window_caps_context);
    CU_add_test(s, "Qwen2.5 unused sliding window is ignored",
                test_qwen25_unused_sliding_window_is_ignored);
    CU_add_test(s, "v5 sliding layer_types cap the context",
                test_v5_sliding_layer_types_cap_context);
    CU_add_test(s, "linear and default RoPE", test_linear_and_default_rope);
    CU_add_test(s, "defaults for optional fields", test_defaults_for_optional_fields);
    CU_add_test(s, "generation_config.json overrides the end ids",
                test_generation_config_overrides_end_ids);

    CU_pSuite b = CU_add_suite("hfconfig bad input", suite_init, suite_clean);
    CU_add_test(b, "rejects missing required fields", test_rejects_missing_required_fields);
    CU_add_test(b, "rejects wrong types naming field, expected and found",
                test_rejects_wrong_types);
    CU_add_test(b, "rejects unsupported architectures listing the supported ones",
                test_rejects_unsupported_architectures);
    CU_add_test(b, "rejects unsupported features", test_rejects_unsupported_features);
    CU_add_test(b, "rejects inconsistent sizes and ids", test_rejects_inconsistent_sizes);
    CU_add_test(b, "rejects files that are not a config.json",
                test_rejects_files_that_are_not_config_json);
    return ls_cunit_run_tap();
}
