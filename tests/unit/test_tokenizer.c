/* Tokenizer against Hugging Face: ids for encode and text for decode must equal, for every text
 * of tests/fixtures/tokenizer/texts.json, what the `tokenizers` library gives (fixtures written
 * by tests/fixtures/make_tokenizer_fixtures.py) for SmolLM2 (byte-level BPE, Digits + ByteLevel)
 * and Llama-2 (SentencePiece BPE with byte fallback). Each tokenizer is built twice: from its
 * tokenizer.json, and from the same data laid out as GGUF metadata stores it (tok_build). Also:
 * streaming decode never splits a character, bad input gives errors that say where, and long
 * prompts encode in linear time. Fixtures are found under $SRCDIR (make check sets it). */
#include "cunit_tap.h"
#include "log.h"
#include "tok_internal.h"
#include "tokenizer.h"

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fixture_dir[4096];

static const char *fx(const char *rel)
{
    static char path[8192];
    snprintf(path, sizeof(path), "%s/%s", fixture_dir, rel);
    return path;
}

static json_t *load_json(const char *rel)
{
    json_error_t je;
    json_t *j = json_load_file(fx(rel), JSON_ALLOW_NUL, &je);
    if (!j) printf("# cannot load %s: %s (line %d)\n", fx(rel), je.text, je.line);
    return j;
}

/* ------------------------------------------------------------------ fixture comparisons */

struct model_fx {
    const char *dir;
    struct tokenizer *json_tok, *spec_tok, *first_tok;
    json_t *expected;
};

static struct model_fx smollm2 = {"tokenizer/smollm2", NULL, NULL, NULL, NULL};
static struct model_fx llama2 = {"tokenizer/llama2", NULL, NULL, NULL, NULL};

static int ids_equal(const int32_t *got, int n, const json_t *want)
{
    if (n != (int)json_array_size(want)) return 0;
    for (int i = 0; i < n; i++)
        if (got[i] != json_integer_value(json_array_get(want, (size_t)i))) return 0;
    return 1;
}

static void print_ids(const char *label, const int32_t *ids, int n)
{
    printf("#   %s:", label);
    for (int i = 0; i < n && i < 40; i++) printf(" %d", ids[i]);
    printf("%s\n", n > 40 ? " ..." : "");
}

/* encode every text and compare with field; returns the number of mismatches */
static int check_encode(const struct tokenizer *tok, const json_t *rows, const char *field,
                        int add_special, int parse_special)
{
    int bad = 0;
    int32_t *ids = malloc(100000 * sizeof(*ids));
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *row = json_array_get(rows, i);
        const json_t *text = json_object_get(row, "text");
        char err[512] = "";
        int n = tok_encode(tok, json_string_value(text), json_string_length(text), add_special,
                           parse_special, ids, 100000, err, sizeof(err));
        const json_t *want = json_object_get(row, field);
        if (n < 0 || !ids_equal(ids, n, want)) {
            bad++;
            printf("# %s mismatch on text %zu \"%.50s\" (%s)\n", field, i, json_string_value(text),
                   err);
            if (n >= 0) print_ids("got", ids, n);
            int32_t w[64];
            int wn = 0;
            for (size_t k = 0; k < json_array_size(want) && wn < 64; k++)
                w[wn++] = (int32_t)json_integer_value(json_array_get(want, k));
            print_ids("want", w, wn);
        }
    }
    free(ids);
    return bad;
}

static int json_ids(const json_t *arr, int32_t *out, int max)
{
    int n = (int)json_array_size(arr);
    for (int i = 0; i < n && i < max; i++)
        out[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return n < max ? n : max;
}

static int check_decode(const struct tokenizer *tok, const json_t *rows, const char *ids_field,
                        const char *text_field, int skip_special)
{
    int bad = 0;
    int32_t *ids = malloc(100000 * sizeof(*ids));
    char *out = malloc(1 << 20);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *row = json_array_get(rows, i);
        int n = json_ids(json_object_get(row, ids_field), ids, 100000);
        const json_t *want = json_object_get(row, text_field);
        char err[256] = "";
        int len = tok_decode(tok, ids, n, skip_special, out, 1 << 20, err, sizeof(err));
        if (len != (int)json_string_length(want) ||
            memcmp(out, json_string_value(want), (size_t)len)) {
            bad++;
            printf("# %s mismatch on text %zu: got \"%.60s\" want \"%.60s\" (%s)\n", text_field, i,
                   len >= 0 ? out : "", json_string_value(want), err);
        }
    }
    free(ids);
    free(out);
    return bad;
}

/* streamed pieces are each whole UTF-8 and add up to the decoded text */
static int check_stream(const struct tokenizer *tok, const json_t *rows, const char *ids_field,
                        const char *text_field)
{
    int bad = 0;
    int32_t *ids = malloc(100000 * sizeof(*ids));
    size_t cap = tok_stream_max_out(tok);
    char *piece = malloc(cap);
    char *all = malloc(1 << 20);
    struct tok_stream *s = tok_stream_new(tok, 0);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *row = json_array_get(rows, i);
        int n = json_ids(json_object_get(row, ids_field), ids, 100000);
        tok_stream_reset(s);
        size_t len = 0;
        int broken = 0;
        for (int k = 0; k < n; k++) {
            int w = tok_stream_push(s, ids[k], piece, cap);
            if (w < 0) {
                broken = 1;
                break;
            }
            /* a piece must not end inside a character */
            if (w > 0) {
                int j = w - 1;
                while (j > 0 && ((unsigned char)piece[j] & 0xC0) == 0x80) j--;
                unsigned char lead = (unsigned char)piece[j];
                int need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
                if (w - j != need) broken = 1;
            }
            memcpy(all + len, piece, (size_t)w);
            len += (size_t)w;
        }
        int w = tok_stream_flush(s, piece, cap);
        if (w > 0) {
            memcpy(all + len, piece, (size_t)w);
            len += (size_t)w;
        }
        const json_t *want = json_object_get(row, text_field);
        if (broken || len != json_string_length(want) ||
            memcmp(all, json_string_value(want), len)) {
            bad++;
            printf("# stream mismatch on text %zu: got \"%.*s\" want \"%.60s\"%s\n", i,
                   (int)(len > 60 ? 60 : len), all, json_string_value(want),
                   broken ? " (a piece split a character)" : "");
        }
    }
    tok_stream_free(s);
    free(ids);
    free(piece);
    free(all);
    return bad;
}

/* ------------------------------------------------------------------ GGUF-style specs */

/* SmolLM2's data as GGUF stores it: tokens by id, "a b" merges, control tokens typed 3 */
static struct tokenizer *smollm2_spec_from_json(char *err, size_t errlen)
{
    json_t *j = load_json("tokenizer/smollm2/tokenizer.json");
    if (!j) return NULL;
    const json_t *vocab = json_object_get(json_object_get(j, "model"), "vocab");
    const json_t *merges = json_object_get(json_object_get(j, "model"), "merges");
    int n = (int)json_object_size(vocab);
    const char **tokens = calloc((size_t)n, sizeof(*tokens));
    uint32_t *lens = calloc((size_t)n, sizeof(*lens));
    int32_t *types = calloc((size_t)n, sizeof(*types));
    for (void *it = json_object_iter((json_t *)vocab); it;
         it = json_object_iter_next((json_t *)vocab, it)) {
        int id = (int)json_integer_value(json_object_iter_value(it));
        tokens[id] = json_object_iter_key(it);
        lens[id] = (uint32_t)strlen(tokens[id]);
        types[id] = 1;
    }
    const json_t *added = json_object_get(j, "added_tokens");
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        if (json_is_true(json_object_get(a, "special")))
            types[json_integer_value(json_object_get(a, "id"))] = 3;
    }
    int nm = (int)json_array_size(merges);
    const char **m = calloc((size_t)nm, sizeof(*m));
    for (int i = 0; i < nm; i++) m[i] = json_string_value(json_array_get(merges, (size_t)i));
    struct tok_spec sp = {
        .kind = TOK_KIND_BPE,
        .pre = "smollm",
        .n_tokens = n,
        .tokens = tokens,
        .token_lens = lens,
        .types = types,
        .n_merges = nm,
        .merges = m,
        .bos_id = 1,
        .eos_id = 2,
        .unk_id = 0,
        .pad_id = 2,
        .add_bos = 0,
        .add_eos = -1,
        .add_space_prefix = -1,
        .chat_template = "{% for message in messages %}<|im_start|>",
        .chat_template_tool_use = "{{ tools | length }} tools",
    };
    struct tokenizer *tok = tok_build(&sp, err, errlen);
    free(tokens);
    free(lens);
    free(types);
    free(m);
    json_decref(j);
    return tok;
}

/* Llama-2's GGUF vocabulary (tokens, scores, types; no merges) */
static struct tokenizer *llama2_spec(int prefix_first_only, char *err, size_t errlen)
{
    json_t *j = load_json("tokenizer/llama2/gguf_spec.json");
    if (!j) return NULL;
    const json_t *jt = json_object_get(j, "tokens"), *js = json_object_get(j, "scores"),
                 *jy = json_object_get(j, "token_type");
    int n = (int)json_array_size(jt);
    const char **tokens = calloc((size_t)n, sizeof(*tokens));
    float *scores = calloc((size_t)n, sizeof(*scores));
    int32_t *types = calloc((size_t)n, sizeof(*types));
    for (int i = 0; i < n; i++) {
        tokens[i] = json_string_value(json_array_get(jt, (size_t)i));
        scores[i] = (float)json_number_value(json_array_get(js, (size_t)i));
        types[i] = (int32_t)json_integer_value(json_array_get(jy, (size_t)i));
    }
    struct tok_spec sp = {
        .kind = TOK_KIND_SPM,
        .pre = json_string_value(json_object_get(j, "pre")),
        .n_tokens = n,
        .tokens = tokens,
        .scores = scores,
        .types = types,
        .bos_id = (int)json_integer_value(json_object_get(j, "bos_token_id")),
        .eos_id = (int)json_integer_value(json_object_get(j, "eos_token_id")),
        .unk_id = (int)json_integer_value(json_object_get(j, "unknown_token_id")),
        .pad_id = -1,
        .add_bos = json_is_true(json_object_get(j, "add_bos_token")),
        .add_eos = -1,
        .add_space_prefix = -1,
        .prefix_first_only = prefix_first_only,
    };
    struct tokenizer *tok = tok_build(&sp, err, errlen);
    free(tokens);
    free(scores);
    free(types);
    json_decref(j);
    return tok;
}

static int setup_smollm2(void)
{
    char err[512];
    char rel[256];
    snprintf(rel, sizeof(rel), "%s/tokenizer.json", smollm2.dir);
    smollm2.json_tok = tok_load_json(fx(rel), err, sizeof(err));
    if (!smollm2.json_tok) printf("# %s\n", err);
    smollm2.spec_tok = smollm2_spec_from_json(err, sizeof(err));
    if (!smollm2.spec_tok) printf("# %s\n", err);
    smollm2.expected = load_json("tokenizer/smollm2/expected.json");
    return !smollm2.json_tok || !smollm2.spec_tok || !smollm2.expected;
}

static int setup_llama2(void)
{
    char err[512];
    llama2.json_tok = tok_load_json(fx("tokenizer/llama2/tokenizer.json"), err, sizeof(err));
    if (!llama2.json_tok) printf("# %s\n", err);
    llama2.spec_tok = llama2_spec(0, err, sizeof(err));
    if (!llama2.spec_tok) printf("# %s\n", err);
    llama2.first_tok = llama2_spec(1, err, sizeof(err));
    if (!llama2.first_tok) printf("# %s\n", err);
    llama2.expected = load_json("tokenizer/llama2/expected.json");
    return !llama2.json_tok || !llama2.spec_tok || !llama2.first_tok || !llama2.expected;
}

static void teardown_model(struct model_fx *m)
{
    tok_free(m->json_tok);
    tok_free(m->spec_tok);
    tok_free(m->first_tok);
    json_decref(m->expected);
}

#define NEED(m)                                                                                    \
    do {                                                                                           \
        CU_ASSERT_PTR_NOT_NULL_FATAL((m).json_tok);                                                \
        CU_ASSERT_PTR_NOT_NULL_FATAL((m).spec_tok);                                                \
        CU_ASSERT_PTR_NOT_NULL_FATAL((m).expected);                                                \
    } while (0)

static void test_fixture_has_50_texts(void)
{
    NEED(smollm2);
    NEED(llama2);
    json_t *texts = load_json("tokenizer/texts.json");
    CU_ASSERT_FATAL(texts != NULL);
    CU_ASSERT(json_array_size(texts) >= 50);
    CU_ASSERT(json_array_size(smollm2.expected) == json_array_size(texts));
    CU_ASSERT(json_array_size(llama2.expected) == json_array_size(texts));
    json_decref(texts);
}

static void test_smollm2_json_encode_matches_hf(void)
{
    NEED(smollm2);
    CU_ASSERT_EQUAL(check_encode(smollm2.json_tok, smollm2.expected, "ids", 0, 1), 0);
}

static void test_smollm2_json_special_text_unparsed_matches_hf(void)
{
    NEED(smollm2);
    CU_ASSERT_EQUAL(check_encode(smollm2.json_tok, smollm2.expected, "ids_unparsed", 0, 0), 0);
}

static void test_smollm2_json_add_special_matches_hf(void)
{
    NEED(smollm2);
    CU_ASSERT_EQUAL(check_encode(smollm2.json_tok, smollm2.expected, "ids_bos", 1, 1), 0);
}

static void test_smollm2_json_decode_matches_hf(void)
{
    NEED(smollm2);
    CU_ASSERT_EQUAL(check_decode(smollm2.json_tok, smollm2.expected, "ids", "decoded", 0), 0);
    CU_ASSERT_EQUAL(check_decode(smollm2.json_tok, smollm2.expected, "ids_bos", "decoded_skip", 1),
                    0);
}

static void test_smollm2_json_decode_round_trips_every_text(void)
{
    NEED(smollm2);
    CU_ASSERT_EQUAL(check_decode(smollm2.json_tok, smollm2.expected, "ids", "text", 0), 0);
}

static void test_smollm2_json_stream_decode_matches_whole(void)
{
    NEED(smollm2);
    CU_ASSERT_EQUAL(check_stream(smollm2.json_tok, smollm2.expected, "ids", "decoded"), 0);
}

static void test_smollm2_json_metadata(void)
{
    NEED(smollm2);
    const struct tokenizer *t = smollm2.json_tok;
    CU_ASSERT_EQUAL(tok_n_vocab(t), 49152);
    CU_ASSERT_EQUAL(tok_get_kind(t), TOK_KIND_BPE);
    CU_ASSERT_EQUAL(tok_id(t, "<|im_start|>"), 1);
    CU_ASSERT_EQUAL(tok_id(t, "<|im_end|>"), 2);
    CU_ASSERT_EQUAL(tok_id(t, "no such token"), -1);
    CU_ASSERT_EQUAL(tok_bos(t), 1); /* tokenizer_config.json: bos_token <|im_start|> */
    CU_ASSERT_EQUAL(tok_eos(t), 2);
    CU_ASSERT_FALSE(tok_add_bos(t));
    CU_ASSERT_TRUE(tok_is_special(t, 2));
    CU_ASSERT_FALSE(tok_is_special(t, 100));
    CU_ASSERT_FALSE(tok_is_special(t, -1));
    CU_ASSERT_FALSE(tok_is_special(t, 49152));
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok_chat_template(t));
    CU_ASSERT_PTR_NOT_NULL(strstr(tok_chat_template(t), "named SmolLM"));
    CU_ASSERT_STRING_EQUAL(tok_text(t, 2), "<|im_end|>");
}

static void test_smollm2_gguf_spec_encode_matches_hf(void)
{
    NEED(smollm2);
    CU_ASSERT_EQUAL(check_encode(smollm2.spec_tok, smollm2.expected, "ids", 0, 1), 0);
    CU_ASSERT_EQUAL(check_encode(smollm2.spec_tok, smollm2.expected, "ids_unparsed", 0, 0), 0);
    CU_ASSERT_EQUAL(check_encode(smollm2.spec_tok, smollm2.expected, "ids_bos", 1, 1), 0);
}

static void test_smollm2_gguf_spec_decode_matches_hf(void)
{
    NEED(smollm2);
    CU_ASSERT_EQUAL(check_decode(smollm2.spec_tok, smollm2.expected, "ids", "decoded", 0), 0);
    CU_ASSERT_EQUAL(check_decode(smollm2.spec_tok, smollm2.expected, "ids_bos", "decoded_skip", 1),
                    0);
    CU_ASSERT_EQUAL(tok_bos(smollm2.spec_tok), 1);
    CU_ASSERT_EQUAL(tok_eos(smollm2.spec_tok), 2);
    CU_ASSERT_TRUE(tok_is_special(smollm2.spec_tok, 0));
    /* the GGUF's tokenizer.chat_template and tokenizer.chat_template.tool_use, both kept */
    CU_ASSERT_STRING_EQUAL(tok_chat_template(smollm2.spec_tok),
                           "{% for message in messages %}<|im_start|>");
    CU_ASSERT_STRING_EQUAL(tok_chat_template_tool_use(smollm2.spec_tok),
                           "{{ tools | length }} tools");
    CU_ASSERT_PTR_NULL(tok_chat_template_tool_use(smollm2.json_tok));
}

static void test_llama2_json_encode_matches_hf(void)
{
    NEED(llama2);
    CU_ASSERT_EQUAL(check_encode(llama2.json_tok, llama2.expected, "ids", 0, 1), 0);
}

static void test_llama2_json_special_text_unparsed_matches_hf(void)
{
    NEED(llama2);
    CU_ASSERT_EQUAL(check_encode(llama2.json_tok, llama2.expected, "ids_unparsed", 0, 0), 0);
}

static void test_llama2_json_add_special_puts_bos_first(void)
{
    NEED(llama2);
    CU_ASSERT_EQUAL(check_encode(llama2.json_tok, llama2.expected, "ids_bos", 1, 1), 0);
    CU_ASSERT_TRUE(tok_add_bos(llama2.json_tok));
    CU_ASSERT_EQUAL(tok_bos(llama2.json_tok), 1);
    CU_ASSERT_EQUAL(tok_eos(llama2.json_tok), 2);
    CU_ASSERT_EQUAL(tok_get_kind(llama2.json_tok), TOK_KIND_SPM);
}

static void test_llama2_json_decode_matches_hf(void)
{
    NEED(llama2);
    CU_ASSERT_EQUAL(check_decode(llama2.json_tok, llama2.expected, "ids", "decoded", 0), 0);
    CU_ASSERT_EQUAL(check_decode(llama2.json_tok, llama2.expected, "ids_bos", "decoded_bos", 0), 0);
    CU_ASSERT_EQUAL(check_decode(llama2.json_tok, llama2.expected, "ids_bos", "decoded_skip", 1),
                    0);
}

static void test_llama2_json_stream_decode_matches_whole(void)
{
    NEED(llama2);
    CU_ASSERT_EQUAL(check_stream(llama2.json_tok, llama2.expected, "ids", "decoded"), 0);
    CU_ASSERT_EQUAL(check_stream(llama2.json_tok, llama2.expected, "ids_bos", "decoded_bos"), 0);
}

static void test_llama2_gguf_scores_encode_matches_hf(void)
{
    NEED(llama2);
    /* merges derived from the scores, ▁ on every segment: the hub tokenizer.json's ids */
    CU_ASSERT_EQUAL(check_encode(llama2.spec_tok, llama2.expected, "ids", 0, 1), 0);
    CU_ASSERT_EQUAL(check_encode(llama2.spec_tok, llama2.expected, "ids_unparsed", 0, 0), 0);
    CU_ASSERT_EQUAL(check_encode(llama2.spec_tok, llama2.expected, "ids_bos", 1, 1), 0);
}

static void test_llama2_gguf_prefix_first_matches_transformers(void)
{
    NEED(llama2);
    /* transformers' own GGUF conversion: Metaspace(prepend_scheme="first") */
    CU_ASSERT_EQUAL(check_encode(llama2.first_tok, llama2.expected, "ids_first", 0, 1), 0);
}

static void test_llama2_gguf_decode_matches_hf(void)
{
    NEED(llama2);
    CU_ASSERT_EQUAL(check_decode(llama2.spec_tok, llama2.expected, "ids", "decoded", 0), 0);
    CU_ASSERT_EQUAL(check_decode(llama2.spec_tok, llama2.expected, "ids_bos", "decoded_skip", 1),
                    0);
}

/* ------------------------------------------------------------------ random */

/* tokenizer/random.json (make_tokenizer_random.py): 400 seeded random texts, HF's ids and
 * decodes for both tokenizers; the JSON tokenizers and the GGUF-style ones held to them */
static json_t *random_rows(const char *name)
{
    static json_t *fixture;
    if (!fixture) fixture = load_json("tokenizer/random.json");
    return fixture ? json_object_get(fixture, name) : NULL;
}

static void check_random(const struct tokenizer *tok, const json_t *rows)
{
    CU_ASSERT_FATAL(tok != NULL && rows != NULL);
    CU_ASSERT(json_array_size(rows) >= 400);
    CU_ASSERT_EQUAL(check_encode(tok, rows, "ids", 0, 1), 0);
    CU_ASSERT_EQUAL(check_encode(tok, rows, "ids_unparsed", 0, 0), 0);
    CU_ASSERT_EQUAL(check_encode(tok, rows, "ids_bos", 1, 1), 0);
    CU_ASSERT_EQUAL(check_decode(tok, rows, "ids", "decoded", 0), 0);
    CU_ASSERT_EQUAL(check_decode(tok, rows, "ids_bos", "decoded_skip", 1), 0);
    CU_ASSERT_EQUAL(check_stream(tok, rows, "ids", "decoded"), 0);
}

static void test_random_smollm2_json_matches_hf(void)
{
    NEED(smollm2);
    check_random(smollm2.json_tok, random_rows("smollm2"));
}

static void test_random_smollm2_gguf_spec_matches_hf(void)
{
    NEED(smollm2);
    check_random(smollm2.spec_tok, random_rows("smollm2"));
}

static void test_random_llama2_json_matches_hf(void)
{
    NEED(llama2);
    check_random(llama2.json_tok, random_rows("llama2"));
}

static void test_random_llama2_gguf_scores_match_hf(void)
{
    NEED(llama2);
    check_random(llama2.spec_tok, random_rows("llama2"));
}

/* ------------------------------------------------------------------ variants */

/* the same patch semantics as the fixture script's apply_patch */
static json_t *apply_patch(const json_t *base, const json_t *patch)
{
    json_t *j = json_deep_copy(base);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)patch, key, v)
    {
        if (strcmp(key, "model") == 0)
            json_object_update(json_object_get(j, "model"), v);
        else if (strcmp(key, "added_tokens_extra") == 0)
            json_array_extend(json_object_get(j, "added_tokens"), v);
        else
            json_object_set(j, key, v);
    }
    return j;
}

/* rows of a variant carry no text: take it from the base's expected rows */
static json_t *with_texts(const json_t *rows, const json_t *texts_from)
{
    json_t *r = json_deep_copy(rows);
    for (size_t i = 0; i < json_array_size(r); i++)
        json_object_set(json_array_get(r, i), "text",
                        json_object_get(json_array_get(texts_from, i), "text"));
    return r;
}

static void test_variants_match_hf(void)
{
    NEED(smollm2);
    NEED(llama2);
    json_t *variants = load_json("tokenizer/variants.json");
    json_t *bases[2] = {load_json("tokenizer/smollm2/tokenizer.json"),
                        load_json("tokenizer/llama2/tokenizer.json")};
    CU_ASSERT_PTR_NOT_NULL_FATAL(variants);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bases[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bases[1]);
    CU_ASSERT(json_array_size(variants) >= 15); /* 8, then the NFC..NFKD ones */
    for (size_t i = 0; i < json_array_size(variants); i++) {
        const json_t *v = json_array_get(variants, i);
        const char *name = json_string_value(json_object_get(v, "name"));
        int is_llama = strcmp(json_string_value(json_object_get(v, "base")), "llama2") == 0;
        json_t *j = apply_patch(bases[is_llama], json_object_get(v, "patch"));
        char *text = json_dumps(j, JSON_COMPACT);
        char err[512] = "";
        struct tokenizer *t =
            tok_load_json_buf(text, strlen(text), name, NULL, 0, err, sizeof(err));
        if (!t) printf("# variant %s: %s\n", name, err);
        CU_ASSERT_PTR_NOT_NULL(t);
        if (t) {
            json_t *rows =
                with_texts(json_object_get(v, "expected"), (is_llama ? llama2 : smollm2).expected);
            int bad =
                check_encode(t, rows, "ids", 0, 1) + check_encode(t, rows, "ids_unparsed", 0, 0) +
                check_encode(t, rows, "ids_bos", 1, 1) + check_decode(t, rows, "ids", "decoded", 0);
            if (bad) printf("# variant %s: %d mismatches\n", name, bad);
            CU_ASSERT_EQUAL(bad, 0);
            json_decref(rows);
        }
        tok_free(t);
        free(text);
        json_decref(j);
    }
    json_decref(bases[0]);
    json_decref(bases[1]);
    json_decref(variants);
}

/* runs: {name: {"base": "smollm2" | "llama2", "rows": [{"ids": [...], "decoded"?}]}}, each
 * name a variants.json patch; texts[0] and texts[1] the rows holding the text for each base.
 * Each variant's tokenizer encodes the texts to the ids (special tokens matched), and decodes
 * the ids to "decoded" where the rows have one. Returns the number of mismatches. */
static int check_variant_runs(const json_t *runs, const json_t *texts[2])
{
    json_t *variants = load_json("tokenizer/variants.json");
    json_t *bases[2] = {load_json("tokenizer/smollm2/tokenizer.json"),
                        load_json("tokenizer/llama2/tokenizer.json")};
    if (!variants || !bases[0] || !bases[1] || json_object_size(runs) == 0) return -1;
    int bad = 0;
    const char *name;
    json_t *run;
    json_object_foreach((json_t *)runs, name, run)
    {
        const json_t *patch = NULL;
        for (size_t i = 0; i < json_array_size(variants); i++) {
            const json_t *v = json_array_get(variants, i);
            if (!strcmp(json_string_value(json_object_get(v, "name")), name))
                patch = json_object_get(v, "patch");
        }
        const char *base = json_string_value(json_object_get(run, "base"));
        int is_llama = base && !strcmp(base, "llama2");
        const json_t *rows_in = json_object_get(run, "rows");
        if (!patch || json_array_size(rows_in) != json_array_size(texts[is_llama])) {
            printf("# variant run %s: no such patch, or %zu rows for %zu texts\n", name,
                   json_array_size(rows_in), json_array_size(texts[is_llama]));
            bad++;
            continue;
        }
        json_t *j = apply_patch(bases[is_llama], patch);
        char *text = json_dumps(j, JSON_COMPACT);
        char err[512] = "";
        struct tokenizer *t =
            tok_load_json_buf(text, strlen(text), name, NULL, 0, err, sizeof(err));
        if (t) {
            json_t *rows = with_texts(rows_in, texts[is_llama]);
            int n = check_encode(t, rows, "ids", 0, 1);
            if (json_object_get(json_array_get(rows, 0), "decoded"))
                n += check_decode(t, rows, "ids", "decoded", 0);
            if (n) printf("# variant run %s: %d mismatches\n", name, n);
            bad += n;
            json_decref(rows);
            tok_free(t);
        } else {
            printf("# variant run %s: %s\n", name, err);
            bad++;
        }
        free(text);
        json_decref(j);
    }
    json_decref(bases[0]);
    json_decref(bases[1]);
    json_decref(variants);
    return bad;
}

/* random.json's "variants": variants.json's patches on the random texts */
static void test_random_variants_match_hf(void)
{
    NEED(smollm2);
    NEED(llama2);
    json_t *fixture = load_json("tokenizer/random.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    const json_t *texts[2] = {json_object_get(fixture, "smollm2"),
                              json_object_get(fixture, "llama2")};
    CU_ASSERT(json_object_size(json_object_get(fixture, "variants")) >= 4);
    CU_ASSERT_EQUAL(check_variant_runs(json_object_get(fixture, "variants"), texts), 0);
    json_decref(fixture);
}

/* whether pat (compiled as the tokenizer compiles a Split pattern) matches all of text */
static int whole_match(const char *pat, const char *text)
{
    char err[512] = "";
    pcre2_code *re = tok_compile_regex(pat, strlen(pat), err, sizeof err);
    if (!re) {
        printf("# /%s/: %s\n", pat, err);
        return -1;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)text, strlen(text), 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                         md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

/* U+1406D (Unicode 16, a letter to HF's engines, unassigned to PCRE2 10.42) in each place a
 * class can be written: the widened classes take it, the complements leave it out, and what
 * is not a class (\Q..\E, an escaped backslash, a POSIX item) stays as written */
static void test_regex_classes_are_widened_where_written(void)
{
    const char *hiero = "\xF0\x94\x81\xAD"; /* U+1406D */
    char two[16];
    snprintf(two, sizeof two, "x%s", hiero);
    CU_ASSERT_EQUAL(whole_match("\\p{L}", hiero), 1);
    CU_ASSERT_EQUAL(whole_match("\\pL", hiero), 1);
    CU_ASSERT_EQUAL(whole_match("\\p{Lo}", hiero), 1);
    CU_ASSERT_EQUAL(whole_match("\\p{L}+", two), 1);
    CU_ASSERT_EQUAL(whole_match("[a-z\\p{L}]{2}", two), 1);
    CU_ASSERT_EQUAL(whole_match("\\P{L}", hiero), 0);
    CU_ASSERT_EQUAL(whole_match("\\p{^L}", hiero), 0);
    CU_ASSERT_EQUAL(whole_match("[^\\s\\p{L}\\p{N}]", hiero), 0);
    CU_ASSERT_EQUAL(whole_match("[^\\s\\p{N}]", hiero), 1);
    CU_ASSERT_EQUAL(whole_match("\\p{N}", hiero), 0);
    CU_ASSERT_EQUAL(whole_match("[[:alpha:]\\p{L}]", hiero), 1);
    CU_ASSERT_EQUAL(whole_match("[]\\p{L}]", hiero), 1);
    CU_ASSERT_EQUAL(whole_match("[]\\p{L}]", "]"), 1);
    /* not classes: a quoted \p{L}, an escaped backslash before p{L} */
    CU_ASSERT_EQUAL(whole_match("\\Q\\p{L}\\E", "\\p{L}"), 1);
    CU_ASSERT_EQUAL(whole_match("\\Q\\p{L}\\E", hiero), 0);
    CU_ASSERT_EQUAL(whole_match("\\\\p\\{L\\}", "\\p{L}"), 1);
    /* U+1C89 (Unicode 16, Lu): a letter to \p{L} and \p{Lu}, not to \p{Ll} */
    CU_ASSERT_EQUAL(whole_match("\\p{Lu}", "\xE1\xB2\x89"), 1);
    CU_ASSERT_EQUAL(whole_match("\\p{Ll}", "\xE1\xB2\x89"), 0);
    /* widened past PCRE2's size limit, a pattern keeps PCRE2's own classes and still loads */
    char many[8 * 600 + 1] = "";
    for (int i = 0; i < 600; i++) strcat(many, "\\p{L}?");
    CU_ASSERT_EQUAL(whole_match(many, "ab"), 1);
    /* a class PCRE2 rejects is named as written */
    char err[512] = "";
    pcre2_code *re = tok_compile_regex("\\p{Nope}", 8, err, sizeof err);
    CU_ASSERT_PTR_NULL(re);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/\\p{Nope}/"));
}

/* a fixture of runtime/make_unicode_hf.py: its texts through its variants, one text list for
 * every variant (all on SmolLM2's tokenizer) */
static void check_unicode_fixture(const char *file, size_t min_texts, size_t variants)
{
    json_t *fixture = load_json(file);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    const json_t *texts[2] = {json_object_get(fixture, "texts"), json_object_get(fixture, "texts")};
    CU_ASSERT(json_array_size(texts[0]) >= min_texts);
    CU_ASSERT_EQUAL(json_object_size(json_object_get(fixture, "variants")), variants);
    CU_ASSERT_EQUAL(check_variant_runs(json_object_get(fixture, "variants"), texts), 0);
    json_decref(fixture);
}

/* regex_classes.json: the code points HF's regexes count in a general category class and
 * PCRE2's older tables do not, through the GPT-2, Llama 3 and Qwen2 splits; lockstep widens
 * the classes (widen_classes) */
static void test_regex_classes_of_newer_unicode_match_hf(void)
{
    NEED(smollm2);
    check_unicode_fixture("tokenizer/regex_classes.json", 5, 3);
}

/* normal_forms.json: every character the Unicode standard normalizes, through the NFC, NFD,
 * NFKC and NFKD variants; HF's tables are older than utf8proc's, and where they differ lockstep
 * gives HF's ids (unicode_form) */
static void test_normal_forms_of_every_mapped_character_match_hf(void)
{
    NEED(smollm2);
    check_unicode_fixture("tokenizer/normal_forms.json", 400, 4);
}

/* ------------------------------------------------------------------ streaming */

static void test_stream_holds_partial_utf8_from_byte_tokens(void)
{
    NEED(llama2);
    const struct tokenizer *t = llama2.json_tok;
    /* 😀 is F0 9F 98 80, not in the vocabulary: four <0xNN> tokens */
    int32_t ids[8];
    char err[256];
    int n = tok_encode(t, "\xF0\x9F\x98\x80", 4, 0, 1, ids, 8, err, sizeof(err));
    CU_ASSERT_EQUAL_FATAL(n, 5); /* ▁ then the four bytes */
    CU_ASSERT_EQUAL(ids[1], tok_id(t, "<0xF0>"));
    struct tok_stream *s = tok_stream_new(t, 0);
    size_t cap = tok_stream_max_out(t);
    char *out = malloc(cap);
    CU_ASSERT_EQUAL(tok_stream_push(s, ids[0], out, cap), 0); /* the leading space is stripped */
    CU_ASSERT_EQUAL(tok_stream_push(s, ids[1], out, cap), 0);
    CU_ASSERT_EQUAL(tok_stream_push(s, ids[2], out, cap), 0);
    CU_ASSERT_EQUAL(tok_stream_push(s, ids[3], out, cap), 0);
    CU_ASSERT_EQUAL_FATAL(tok_stream_push(s, ids[4], out, cap), 4);
    CU_ASSERT_EQUAL(memcmp(out, "\xF0\x9F\x98\x80", 4), 0);
    /* an unfinished character at the end comes out as U+FFFD on flush, never as raw bytes */
    CU_ASSERT_EQUAL(tok_stream_push(s, ids[1], out, cap), 0);
    CU_ASSERT_EQUAL(tok_stream_push(s, ids[2], out, cap), 0);
    CU_ASSERT_EQUAL_FATAL(tok_stream_flush(s, out, cap), 3);
    CU_ASSERT_EQUAL(memcmp(out, "\xEF\xBF\xBD", 3), 0);
    /* a byte that can not continue the held ones: U+FFFD for them, then the byte itself */
    CU_ASSERT_EQUAL(tok_stream_push(s, ids[1], out, cap), 0);
    int w = tok_stream_push(s, tok_id(t, "<0x41>"), out, cap);
    CU_ASSERT_EQUAL_FATAL(w, 4);
    CU_ASSERT_EQUAL(memcmp(out,
                           "\xEF\xBF\xBD"
                           "A",
                           4),
                    0);
    /* errors: an id out of range, a buffer below tok_stream_max_out */
    CU_ASSERT_EQUAL(tok_stream_push(s, -1, out, cap), -1);
    CU_ASSERT_EQUAL(tok_stream_push(s, tok_n_vocab(t), out, cap), -1);
    CU_ASSERT_EQUAL(tok_stream_push(s, ids[0], out, 2), -1);
    tok_stream_free(s);
    free(out);
}

static void test_stream_byte_level_splits_multibyte_tokens(void)
{
    NEED(smollm2);
    /* SmolLM2 spells 🤖 as byte-level tokens that cut the character; pieces stay whole */
    const struct tokenizer *t = smollm2.json_tok;
    const char *text = "robot \xF0\x9F\xA4\x96 and \xE4\xBD\xA0\xE5\xA5\xBD";
    int32_t ids[64];
    char err[256];
    int n = tok_encode(t, text, strlen(text), 0, 1, ids, 64, err, sizeof(err));
    CU_ASSERT_FATAL(n > 0);
    struct tok_stream *s = tok_stream_new(t, 0);
    size_t cap = tok_stream_max_out(t);
    char *out = malloc(cap), all[256];
    size_t len = 0;
    int zero_pushes = 0;
    for (int i = 0; i < n; i++) {
        int w = tok_stream_push(s, ids[i], out, cap);
        CU_ASSERT_FATAL(w >= 0);
        zero_pushes += w == 0;
        memcpy(all + len, out, (size_t)w);
        len += (size_t)w;
    }
    CU_ASSERT_EQUAL(tok_stream_flush(s, out, cap), 0);
    CU_ASSERT_EQUAL(len, strlen(text));
    CU_ASSERT_EQUAL(memcmp(all, text, len), 0);
    CU_ASSERT(zero_pushes > 0); /* some token ended inside a character and was held */
    tok_stream_free(s);
    free(out);
}

static void test_stream_skip_special_leaves_them_out(void)
{
    NEED(smollm2);
    const struct tokenizer *t = smollm2.json_tok;
    struct tok_stream *s = tok_stream_new(t, 1);
    size_t cap = tok_stream_max_out(t);
    char *out = malloc(cap);
    CU_ASSERT_EQUAL(tok_stream_push(s, tok_id(t, "<|im_end|>"), out, cap), 0);
    tok_stream_free(s);
    s = tok_stream_new(t, 0);
    CU_ASSERT_EQUAL(tok_stream_push(s, tok_id(t, "<|im_end|>"), out, cap), 10);
    CU_ASSERT_EQUAL(memcmp(out, "<|im_end|>", 10), 0);
    tok_stream_free(s);
    free(out);
}

/* ------------------------------------------------------------------ errors */

static void test_encode_invalid_utf8_names_byte_offset(void)
{
    NEED(smollm2);
    NEED(llama2);
    char err[256] = "";
    int32_t ids[16];
    int n = tok_encode(smollm2.json_tok, "abc\xC3(", 5, 0, 1, ids, 16, err, sizeof(err));
    CU_ASSERT_EQUAL(n, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "invalid UTF-8"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "offset 3"));
    /* overlong, surrogate, beyond U+10FFFF */
    const char *bad[] = {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF", "ok\xE2\x82"};
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(
            tok_encode(llama2.json_tok, bad[i], strlen(bad[i]), 0, 1, ids, 16, err, sizeof(err)),
            -1);
}

static void test_encode_reports_short_output(void)
{
    NEED(smollm2);
    char err[256] = "";
    int32_t ids[2];
    const char *text = "Hello, world! How are you today?";
    CU_ASSERT_EQUAL(
        tok_encode(smollm2.json_tok, text, strlen(text), 0, 1, ids, 2, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "max_out = 2"));
    /* out == NULL counts */
    CU_ASSERT_EQUAL(
        tok_encode(smollm2.json_tok, text, strlen(text), 0, 1, NULL, 0, err, sizeof(err)), 9);
    CU_ASSERT_EQUAL(tok_encode(smollm2.json_tok, "", 0, 0, 1, ids, 2, err, sizeof(err)), 0);
}

static void test_decode_rejects_out_of_range_and_truncates_at_char(void)
{
    NEED(smollm2);
    char err[256] = "", out[8];
    int32_t bad[] = {5, 49152};
    CU_ASSERT_EQUAL(tok_decode(smollm2.json_tok, bad, 2, 0, out, sizeof(out), err, sizeof(err)),
                    -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "position 1"));
    /* 你好 is six bytes; a 5-byte buffer holds one character and the NUL */
    int32_t ids[16];
    int n = tok_encode(smollm2.json_tok, "\xE4\xBD\xA0\xE5\xA5\xBD", 6, 0, 1, ids, 16, err,
                       sizeof(err));
    CU_ASSERT_FATAL(n > 0);
    CU_ASSERT_EQUAL(tok_decode(smollm2.json_tok, ids, n, 0, out, 5, err, sizeof(err)), 6);
    CU_ASSERT_STRING_EQUAL(out, "\xE4\xBD\xA0");
}

static char *write_temp(const char *dir_template, const char *name, const char *content)
{
    static char path[512];
    char dir[256];
    snprintf(dir, sizeof(dir), "%s", dir_template);
    if (!mkdtemp(dir)) return NULL;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs(content, f);
    fclose(f);
    return path;
}

static void test_not_json_names_file_and_line(void)
{
    char *path = write_temp("/tmp/tok_test_XXXXXX", "tokenizer.json",
                            "{\n  \"model\": {\n    \"type\": \"BPE\",\n    oops\n  }\n}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    char err[512] = "";
    CU_ASSERT_PTR_NULL(tok_load_json(path, err, sizeof(err)));
    char want[600];
    snprintf(want, sizeof(want), "%s:4:", path);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not valid JSON"));
    printf("# %s\n", err);
    remove(path);
}

static void test_missing_file_is_an_error(void)
{
    char err[512] = "";
    CU_ASSERT_PTR_NULL(tok_load_json("/nonexistent/tokenizer.json", err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/tokenizer.json"));
}

/* a FIFO as tokenizer.json or as the tokenizer_config.json beside it: an error at once (a
 * blocking open would hang: the alarm ends the test), naming the file and what it is */
static void test_fifo_is_an_error(void)
{
    char err[512] = "", dir[] = "/tmp/tok_test_XXXXXX", path[600];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    CU_ASSERT_FATAL(mkfifo(path, 0600) == 0);
    alarm(10);
    CU_ASSERT_PTR_NULL(tok_load_json(path, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tokenizer.json: expected a regular file, found a FIFO"));
    alarm(0);
    unlink(path);
    /* a real tokenizer.json beside a FIFO tokenizer_config.json */
    char cmd[8192 + 700];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", fx("tokenizer/smollm2/tokenizer.json"), path);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(cmd, sizeof(cmd), "%s/tokenizer_config.json", dir);
    CU_ASSERT_FATAL(mkfifo(cmd, 0600) == 0);
    alarm(10);
    CU_ASSERT_PTR_NULL(tok_load_json(path, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(err, "tokenizer_config.json: expected a regular file, found a FIFO"));
    alarm(0);
    printf("# %s\n", err);
    unlink(cmd);
    unlink(path);
    rmdir(dir);
}

static void test_bad_fields_are_named(void)
{
    struct {
        const char *json, *want;
    } cases[] = {
        {"[]", "(top level): expected an object"},
        {"{}", "model: expected an object, found nothing"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": {}}}",
         "model.type: expected \"BPE\", found \"Unigram\""},
        {"{\"model\": {\"vocab\": []}}", "model.vocab: expected an object"},
        {"{\"model\": {\"vocab\": {}}}", "model.vocab: expected at least one token, found none"},
        {"{\"model\": {\"vocab\": {\"a\": -1}}}", "model.vocab[\"a\"]: expected an id"},
        {"{\"model\": {\"vocab\": {\"a\": 99999999999}}}", "expected an id in 0.."},
        {"{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}",
         "model.merges[0]: expected both tokens"},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"abc\"]}}",
         "model.merges[0]: expected \"a b\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [7]}}", "model.merges[0]: expected"},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"dropout\": 0.1}}", "model.dropout"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": 3}]}",
         "added_tokens[0].content: expected a string"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
         "pre_tokenizer.type: expected Sequence, ByteLevel, Split, Digits or Metaspace, found "
         "\"Whitespace\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", "
         "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
         "pre_tokenizer.pattern.Regex: regex"},
        /* \C could end a match inside a character: refused, as HF's engines have no \C */
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", "
         "\"pattern\": {\"Regex\": \"a\\\\C\"}, \"behavior\": \"Isolated\"}}",
         "pre_tokenizer.pattern.Regex: regex /a\\C/: using \\C is disabled"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Sequence\", "
         "\"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": \"Digits\"}]}}",
         "pre_tokenizer.pretokenizers[1]: expected ByteLevel to be the last"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Lowercase\"}}",
         "normalizer.type: expected Sequence, Prepend, Replace, NFC, NFD, NFKC or NFKD, found "
         "\"Lowercase\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Sequence\", "
         "\"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"NFKC_Casefold\"}]}}",
         "normalizer.normalizers[1].type: expected Sequence, Prepend, Replace, NFC, NFD, NFKC or "
         "NFKD, found \"NFKC_Casefold\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Sequence\", "
         "\"normalizers\": [{\"type\": \"NFD\"}, {\"type\": 7}]}}",
         "normalizer.normalizers[1]: expected an object with a \"type\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"decoder\": {\"type\": \"WordPiece\"}}",
         "decoder.type"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"post_processor\": {\"type\": "
         "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], "
         "\"special_tokens\": {}}}",
         "post_processor.special_tokens[\"<s>\"].ids: expected an array of ids"},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"unk_token\": \"<unk>\"}}",
         "model.unk_token: expected a token of model.vocab"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512] = "";
        struct tokenizer *t = tok_load_json_buf(cases[i].json, strlen(cases[i].json), "t.json",
                                                NULL, 0, err, sizeof(err));
        CU_ASSERT_PTR_NULL(t);
        tok_free(t);
        if (!strstr(err, cases[i].want) || strncmp(err, "t.json:", 7) != 0) {
            printf("# case %zu: got \"%s\", want \"%s\"\n", i, err, cases[i].want);
            CU_FAIL("error message does not name the field");
        }
    }
}

/* tokenizer_config.json beside a small tokenizer.json: bos/eos of a type transformers refuses,
 * or naming no token (transformers would add one past the model's vocabulary), and
 * add_bos_token / add_eos_token that are not booleans are errors naming the field, not
 * ignored; a chat_template list entry that is not {name, template} too */
static const char small_json[] =
    "{\"model\": {\"vocab\": {\"a\": 0, \"<s>\": 1, \"</s>\": 2}}, \"added_tokens\": ["
    "{\"id\": 1, \"content\": \"<s>\", \"special\": true},"
    "{\"id\": 2, \"content\": \"</s>\", \"special\": true}]}";

static void test_bad_config_fields_are_named(void)
{
    struct {
        const char *cfg, *want;
    } cases[] = {
        {"{\"bos_token\": 1}", "bos_token: expected a string, {\"content\": ...} or "
                               "null, found 1"},
        {"{\"eos_token\": [\"</s>\"]}", "eos_token: expected a string, {\"content\": "
                                        "...} or null, found an array"},
        {"{\"eos_token\": {\"lstrip\": false}}",
         "eos_token.content: expected a string, found nothing"},
        {"{\"eos_token\": \"<|eot|>\"}",
         "eos_token: expected a token of tokenizer.json, found \"<|eot|>\""},
        {"{\"add_bos_token\": \"yes\"}",
         "add_bos_token: expected true, false or null, found \"yes\""},
        {"{\"add_eos_token\": 1}", "add_eos_token: expected true, false or null, found 1"},
        {"{\"chat_template\": [\"x\"]}",
         "chat_template[0]: expected an object {name, template}, found \"x\""},
        {"{\"chat_template\": [{\"name\": \"default\"}]}",
         "chat_template[0].template: expected a string, found nothing"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512] = "";
        struct tokenizer *t =
            tok_load_json_buf(small_json, strlen(small_json), "t.json", cases[i].cfg,
                              strlen(cases[i].cfg), err, sizeof(err));
        CU_ASSERT_PTR_NULL(t);
        tok_free(t);
        if (!strstr(err, cases[i].want) || strncmp(err, "tokenizer_config.json: ", 23) != 0) {
            printf("# case %zu: got \"%s\", want \"%s\"\n", i, err, cases[i].want);
            CU_FAIL("error message does not name the field");
        }
    }
}

/* bos/eos as a string, an AddedToken object or null load; a chat_template list is read as
 * transformers reads it without tools: the template named "default", and none when no entry
 * has that name (transformers raises rather than take another) */
static void test_config_tokens_and_named_templates(void)
{
    struct {
        const char *cfg;
        int bos, eos;
        const char *tmpl;
    } cases[] = {
        {"{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\", \"lstrip\": false}}", 1,
         2, NULL},
        {"{\"bos_token\": null, \"eos_token\": null}", -1, -1, NULL},
        {"{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": "
         "\"default\", \"template\": \"D\"}]}",
         -1, -1, "D"},
        {"{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": "
         "\"rag\", \"template\": \"R\"}]}",
         -1, -1, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512] = "";
        struct tokenizer *t =
            tok_load_json_buf(small_json, strlen(small_json), "t.json", cases[i].cfg,
                              strlen(cases[i].cfg), err, sizeof(err));
        CU_ASSERT_PTR_NOT_NULL(t);
        if (!t) {
            printf("# case %zu: %s\n", i, err);
            continue;
        }
        CU_ASSERT_EQUAL(tok_bos(t), cases[i].bos);
        CU_ASSERT_EQUAL(tok_eos(t), cases[i].eos);
        if (cases[i].tmpl) {
            CU_ASSERT_PTR_NOT_NULL(tok_chat_template(t));
            if (tok_chat_template(t)) CU_ASSERT_STRING_EQUAL(tok_chat_template(t), cases[i].tmpl);
        } else {
            CU_ASSERT_PTR_NULL(tok_chat_template(t));
        }
        tok_free(t);
    }
}

static void test_bad_spec_is_an_error(void)
{
    char err[512] = "";
    const char *tokens[] = {"a", "b", "ab"};
    const char *merges[] = {"a b", "a x"};
    struct tok_spec sp = {.kind = TOK_KIND_BPE,
                          .pre = "gpt2",
                          .n_tokens = 3,
                          .tokens = tokens,
                          .n_merges = 2,
                          .merges = merges,
                          .bos_id = -1,
                          .eos_id = -1,
                          .unk_id = -1,
                          .pad_id = -1,
                          .add_bos = -1,
                          .add_eos = -1};
    CU_ASSERT_PTR_NULL(tok_build(&sp, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tokenizer.ggml.merges[1]"));
    sp.n_merges = 1;
    sp.pre = "no-such-pre";
    CU_ASSERT_PTR_NULL(tok_build(&sp, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no-such-pre"));
    sp.pre = NULL;
    sp.bos_id = 3;
    CU_ASSERT_PTR_NULL(tok_build(&sp, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "bos_token_id"));
    sp.bos_id = -1;
    sp.kind = TOK_KIND_SPM;
    sp.n_merges = 0;
    CU_ASSERT_PTR_NULL(tok_build(&sp, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tokenizer.ggml.scores"));
    sp.kind = (enum tok_kind)7;
    CU_ASSERT_PTR_NULL(tok_build(&sp, err, sizeof(err)));
    sp.kind = TOK_KIND_BPE;
    sp.n_tokens = 0;
    CU_ASSERT_PTR_NULL(tok_build(&sp, err, sizeof(err)));
}

/* ------------------------------------------------------------------ speed */

static double time_encode(const struct tokenizer *t, const char *text, size_t len, int *n)
{
    char err[256];
    double t0 = ls_now_s();
    *n = tok_encode(t, text, len, 0, 1, NULL, 0, err, sizeof(err));
    return ls_now_s() - t0;
}

/* a text of `len` bytes cycling through the fixture texts */
static char *long_text(size_t len)
{
    char *s = malloc(len + 1);
    size_t w = 0;
    for (size_t i = 0; w < len; i = (i + 1) % json_array_size(smollm2.expected)) {
        const json_t *t = json_object_get(json_array_get(smollm2.expected, i), "text");
        size_t l = json_string_length(t);
        if (w + l > len) break;
        memcpy(s + w, json_string_value(t), l);
        w += l;
    }
    while (w < len) s[w++] = ' ';
    s[len] = '\0';
    return s;
}

static void test_long_prompts_encode_in_linear_time(void)
{
    NEED(smollm2);
    NEED(llama2);
    size_t small = 200000, big = 800000;
    char *a = long_text(small), *b = long_text(big);
    struct tokenizer *toks[] = {smollm2.json_tok, llama2.json_tok};
    for (int k = 0; k < 2; k++) {
        int na, nb;
        double ta = time_encode(toks[k], a, small, &na);
        double tb = time_encode(toks[k], b, big, &nb);
        printf("# %s: %zu bytes -> %d ids in %.3f s; %zu bytes -> %d ids in %.3f s\n",
               k ? "llama2" : "smollm2", small, na, ta, big, nb, tb);
        CU_ASSERT(na > 0 && nb > 3 * na);
        CU_ASSERT(tb < 8 * ta + 0.05); /* 4x the text: linear is 4x, quadratic 16x */
        CU_ASSERT(tb < 10.0);
    }
    free(a);
    free(b);
    /* one 200 KB word and one 200 KB run of spaces: BPE is n log n per word */
    char *w = malloc(small + 1);
    for (size_t i = 0; i < small; i++) w[i] = "abcdefghij"[i % 10];
    int n;
    double t = time_encode(llama2.json_tok, w, small, &n);
    printf("# one %zu-byte word -> %d ids in %.3f s\n", small, n, t);
    CU_ASSERT(n > 0 && t < 5.0);
    memset(w, ' ', small);
    t = time_encode(smollm2.json_tok, w, small, &n);
    printf("# %zu spaces -> %d ids in %.3f s\n", small, n, t);
    CU_ASSERT(n > 0 && t < 5.0);
    free(w);
}

int main(void)
{
    const char *src = getenv("SRCDIR");
    snprintf(fixture_dir, sizeof(fixture_dir), "%s/tests/fixtures", src ? src : ".");
    /* loaded once for every suite; a failure shows as the tests' fatal asserts */
    setup_smollm2();
    setup_llama2();
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;

    CU_pSuite s = CU_add_suite("smollm2", NULL, NULL);
    CU_add_test(s, "fixture has 50+ texts for both tokenizers", test_fixture_has_50_texts);
    CU_add_test(s, "json encode matches HF", test_smollm2_json_encode_matches_hf);
    CU_add_test(s, "json special text unparsed matches HF",
                test_smollm2_json_special_text_unparsed_matches_hf);
    CU_add_test(s, "json add_special matches HF", test_smollm2_json_add_special_matches_hf);
    CU_add_test(s, "json decode matches HF", test_smollm2_json_decode_matches_hf);
    CU_add_test(s, "json decode round-trips every text",
                test_smollm2_json_decode_round_trips_every_text);
    CU_add_test(s, "json stream decode matches whole decode",
                test_smollm2_json_stream_decode_matches_whole);
    CU_add_test(s, "json metadata (ids, bos/eos, special, template)", test_smollm2_json_metadata);
    CU_add_test(s, "GGUF-style spec encode matches HF", test_smollm2_gguf_spec_encode_matches_hf);
    CU_add_test(s, "GGUF-style spec decode matches HF", test_smollm2_gguf_spec_decode_matches_hf);

    CU_pSuite l = CU_add_suite("llama2", NULL, NULL);
    CU_add_test(l, "json encode matches HF", test_llama2_json_encode_matches_hf);
    CU_add_test(l, "json special text unparsed matches HF",
                test_llama2_json_special_text_unparsed_matches_hf);
    CU_add_test(l, "json add_special puts BOS first", test_llama2_json_add_special_puts_bos_first);
    CU_add_test(l, "json decode matches HF", test_llama2_json_decode_matches_hf);
    CU_add_test(l, "json stream decode matches whole decode",
                test_llama2_json_stream_decode_matches_whole);
    CU_add_test(l, "GGUF scores (no merges) encode matches HF",
                test_llama2_gguf_scores_encode_matches_hf);
    CU_add_test(l, "GGUF prefix_first_only matches transformers' conversion",
                test_llama2_gguf_prefix_first_matches_transformers);
    CU_add_test(l, "GGUF decode matches HF", test_llama2_gguf_decode_matches_hf);

    CU_pSuite r = CU_add_suite("random texts", NULL, NULL);
    CU_add_test(r, "SmolLM2 json: ids, unmatched specials, BOS, decodes, stream match HF",
                test_random_smollm2_json_matches_hf);
    CU_add_test(r, "SmolLM2 GGUF-style spec: the same", test_random_smollm2_gguf_spec_matches_hf);
    CU_add_test(r, "Llama 2 json: the same", test_random_llama2_json_matches_hf);
    CU_add_test(r, "Llama 2 GGUF scores (no merges): the same",
                test_random_llama2_gguf_scores_match_hf);

    CU_pSuite v = CU_add_suite("variants", NULL, NULL);
    CU_add_test(v,
                "swapped pre-tokenizers, normalizers (NFC, NFD, NFKC, NFKD), added-token flags, "
                "unk, post-processors match HF",
                test_variants_match_hf);

    CU_add_test(v, "random texts through the Llama 3 and Qwen2 splits, NFKC, Metaspace match HF",
                test_random_variants_match_hf);
    CU_add_test(v, "NFC, NFD, NFKC, NFKD of every character Unicode maps match HF",
                test_normal_forms_of_every_mapped_character_match_hf);
    CU_add_test(v, "letters, numbers, marks newer than PCRE2's Unicode split as in HF",
                test_regex_classes_of_newer_unicode_match_hf);
    CU_add_test(v, "general category classes widened wherever they are written",
                test_regex_classes_are_widened_where_written);

    CU_pSuite st = CU_add_suite("stream", NULL, NULL);
    CU_add_test(st, "byte-fallback bytes are held until the character is whole",
                test_stream_holds_partial_utf8_from_byte_tokens);
    CU_add_test(st, "byte-level pieces never split a character",
                test_stream_byte_level_splits_multibyte_tokens);
    CU_add_test(st, "skip_special leaves special tokens out",
                test_stream_skip_special_leaves_them_out);

    CU_pSuite e = CU_add_suite("errors", NULL, NULL);
    CU_add_test(e, "tokenizer.json that is not JSON names file and line",
                test_not_json_names_file_and_line);
    CU_add_test(e, "missing file is an error naming it", test_missing_file_is_an_error);
    CU_add_test(e, "a FIFO is an error, not a wait", test_fifo_is_an_error);
    CU_add_test(e, "bad fields are named with expected and found", test_bad_fields_are_named);
    CU_add_test(e, "bad tokenizer_config.json fields are named with expected and found",
                test_bad_config_fields_are_named);
    CU_add_test(e, "config bos/eos forms and named chat templates read as transformers does",
                test_config_tokens_and_named_templates);
    CU_add_test(e, "bad GGUF-style spec is an error", test_bad_spec_is_an_error);
    CU_add_test(e, "invalid UTF-8 input names the byte offset",
                test_encode_invalid_utf8_names_byte_offset);
    CU_add_test(e, "too many ids for max_out is reported", test_encode_reports_short_output);
    CU_add_test(e, "decode rejects bad ids and truncates at a character",
                test_decode_rejects_out_of_range_and_truncates_at_char);

    CU_pSuite sp = CU_add_suite("speed", NULL, NULL);
    CU_add_test(sp, "long prompts encode in linear time", test_long_prompts_encode_in_linear_time);

    int rc = ls_cunit_run_tap();
    teardown_model(&smollm2);
    teardown_model(&llama2);
    return rc;
}
