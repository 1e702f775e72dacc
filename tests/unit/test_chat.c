/* Chat templates against transformers: every case of tests/fixtures/tokenizer/chat_expected.json
 * (conversations rendered by apply_chat_template with the real template texts) must render to
 * the same text, or fail where the template raises. chat_detect must recognise each template. */
#include "chat.h"
#include "cunit_tap.h"

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *fixture;

static json_t *load_fixture(void)
{
    const char *src = getenv("SRCDIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/fixtures/tokenizer/chat_expected.json", src ? src : ".");
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) printf("# cannot load %s: %s\n", path, je.text);
    return j;
}

static void test_detect_recognises_each_template(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    const json_t *t = json_object_get(fixture, "templates");
    const char *key;
    json_t *v;
    int n = 0;
    json_object_foreach((json_t *)t, key, v)
    {
        enum chat_format want = chat_format_from_name(key);
        enum chat_format got = chat_detect(json_string_value(v));
        if (got != want) printf("# %s detected as %s\n", key, chat_format_name(got));
        CU_ASSERT_EQUAL(got, want);
        n++;
    }
    CU_ASSERT_EQUAL(n, 5);
    CU_ASSERT_EQUAL(chat_detect(NULL), CHAT_UNKNOWN);
    CU_ASSERT_EQUAL(chat_detect(""), CHAT_UNKNOWN);
    CU_ASSERT_EQUAL(chat_detect("{{ messages }}"), CHAT_UNKNOWN);
}

static void test_render_matches_transformers(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    const json_t *cases = json_object_get(fixture, "cases");
    CU_ASSERT(json_array_size(cases) >= 50);
    int bad = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        enum chat_format f = chat_format_from_name(json_string_value(json_object_get(c, "format")));
        const json_t *msgs = json_object_get(c, "messages");
        int n = (int)json_array_size(msgs);
        struct chat_msg m[16];
        for (int k = 0; k < n && k < 16; k++) {
            const json_t *jm = json_array_get(msgs, (size_t)k);
            m[k].role = json_string_value(json_object_get(jm, "role"));
            m[k].content = json_string_value(json_object_get(jm, "content"));
        }
        int gen = json_is_true(json_object_get(c, "add_generation_prompt"));
        char *out = NULL, err[256] = "";
        int len = chat_render(f, m, n, gen, &out, err, sizeof(err));
        const json_t *want = json_object_get(c, "rendered");
        int ok;
        const char *herr = json_string_value(json_object_get(c, "error"));
        if (json_is_null(want)) /* the template raised: same message, no text */
            ok = len == -1 && out == NULL && herr && strstr(err, herr) != NULL;
        else
            ok = len == (int)json_string_length(want) && out &&
                 memcmp(out, json_string_value(want), (size_t)len) == 0;
        if (!ok) {
            bad++;
            printf("# case %zu (%s, gen %d): got %d \"%.200s\" (%s), want \"%.200s\" (%s)\n", i,
                   json_string_value(json_object_get(c, "format")), gen, len, out ? out : "", err,
                   json_is_null(want) ? "(error)" : json_string_value(want), herr);
        }
        free(out);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_smollm2_default_system_prompt(void)
{
    struct chat_msg m[] = {{"user", "Hi"}};
    char *out = NULL, err[256];
    int len = chat_render(CHAT_CHATML_SMOLLM2, m, 1, 1, &out, err, sizeof(err));
    const char *want = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained "
                       "by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n";
    CU_ASSERT_EQUAL(len, (int)strlen(want));
    CU_ASSERT_STRING_EQUAL(out, want);
    free(out);
}

static void test_bad_arguments_are_errors(void)
{
    char *out = (char *)1, err[256] = "";
    struct chat_msg m[] = {{"user", "Hi"}};
    CU_ASSERT_EQUAL(chat_render(CHAT_UNKNOWN, m, 1, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no chat template to render"));
    CU_ASSERT_EQUAL(chat_render(CHAT_CHATML, NULL, 1, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_EQUAL(chat_render(CHAT_CHATML, m, -1, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_EQUAL(chat_render(CHAT_CHATML, m, 1, 0, NULL, err, sizeof(err)), -1);
    /* no messages: an empty prompt, or just the generation prompt */
    CU_ASSERT_EQUAL(chat_render(CHAT_CHATML, NULL, 0, 1, &out, err, sizeof(err)), 22);
    CU_ASSERT_STRING_EQUAL(out, "<|im_start|>assistant\n");
    free(out);
    /* NULL role or content renders as empty, never crashes */
    struct chat_msg z[] = {{NULL, NULL}};
    for (int f = CHAT_CHATML; f <= CHAT_MISTRAL; f++) {
        out = NULL;
        chat_render((enum chat_format)f, z, 1, 1, &out, err, sizeof(err));
        free(out);
    }
}

int main(void)
{
    fixture = load_fixture();
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("chat", NULL, NULL);
    CU_add_test(s, "detect recognises each template family", test_detect_recognises_each_template);
    CU_add_test(s, "render matches transformers' apply_chat_template",
                test_render_matches_transformers);
    CU_add_test(s, "SmolLM2 inserts its default system prompt", test_smollm2_default_system_prompt);
    CU_add_test(s, "bad arguments are errors, not crashes", test_bad_arguments_are_errors);
    int rc = ls_cunit_run_tap();
    json_decref(fixture);
    return rc;
}
