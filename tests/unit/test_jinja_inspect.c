/* ls_jinja_loops_over_content against vLLM: every case of tests/fixtures/chat/content_format.json
 * (written by tests/fixtures/make_content_format_fixtures.py, which runs vLLM's own
 * _detect_content_format on the real templates of tests/fixtures/chat/templates and on
 * synthetic ones for each of its rules) must get vLLM's answer, 1 for "openai" and 0 for
 * "string". Then what only C can check: no crash or leak on every prefix of those templates,
 * trees as tall as the parser allows, and thousands of chained aliases in linear time. */
#include "cunit_tap.h"
#include "jinja.h"

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static json_t *fixture;
static char chat_dir[4096]; /* $SRCDIR/tests/fixtures/chat */

static json_t *load_fixture(void)
{
    const char *src = getenv("SRCDIR");
    snprintf(chat_dir, sizeof(chat_dir), "%s/tests/fixtures/chat", src ? src : ".");
    char path[4200];
    snprintf(path, sizeof(path), "%s/content_format.json", chat_dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) printf("# cannot load %s: %s\n", path, je.text);
    return j;
}

/* a file's text, malloc'd; NULL if unreadable */
static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* parses text and answers; -1 (with the parser's error printed) when it does not parse */
static int loops_over_content(const char *name, const char *text, size_t len)
{
    char err[512];
    struct ls_jinja *t = ls_jinja_parse(text, len, err, sizeof(err));
    if (!t) {
        printf("# %s: does not parse: %s\n", name, err);
        return -1;
    }
    int r = ls_jinja_loops_over_content(t);
    ls_jinja_free(t);
    return r;
}

static int detect_s(const char *text)
{
    return loops_over_content(text, text, strlen(text));
}

static void test_fixture_cases_match_vllm(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    const char *version = json_string_value(json_object_get(fixture, "vllm_version"));
    CU_ASSERT_PTR_NOT_NULL(version);
    const json_t *cases = json_object_get(fixture, "cases");
    size_t n = json_array_size(cases), files = 0, openai = 0, mismatches = 0, refused = 0;
    CU_ASSERT(n >= 90);
    for (size_t i = 0; i < n; i++) {
        const json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *format = json_string_value(json_object_get(c, "format"));
        const char *file = json_string_value(json_object_get(c, "file"));
        const json_t *tmpl = json_object_get(c, "template");
        CU_ASSERT_FATAL(name && format && (file || json_is_string(tmpl)));
        int want = !strcmp(format, "openai");
        CU_ASSERT(want || !strcmp(format, "string"));
        char *text = NULL;
        size_t len = 0;
        if (file) {
            char path[8400];
            snprintf(path, sizeof(path), "%s/%s", chat_dir, file);
            text = read_text(path, &len);
            if (!text) printf("# %s: cannot read %s\n", name, path);
            CU_ASSERT_PTR_NOT_NULL(text);
            if (!text) continue;
            files++;
        } else {
            len = json_string_length(tmpl);
            text = malloc(len + 1);
            CU_ASSERT_PTR_NOT_NULL_FATAL(text);
            memcpy(text, json_string_value(tmpl), len + 1);
        }
        int got = loops_over_content(name, text, len);
        free(text);
        /* where jinja2 did not compile the template (vLLM then says "string"), our parser may
         * refuse it too: the template is refused either way, and its format is moot */
        const char *raised = json_string_value(json_object_get(c, "raised"));
        if (got < 0 && raised && !strcmp(raised, "SyntaxError")) {
            refused++;
            continue;
        }
        CU_ASSERT_EQUAL(got, want);
        if (got != want) {
            mismatches++;
            printf("# mismatch %s: vLLM says %s, ls_jinja_loops_over_content gives %d\n", name,
                   format, got);
        }
        openai += want;
    }
    printf("# vLLM %s: %zu cases (%zu real templates), %zu openai, %zu string, %zu refused by "
           "jinja2 and by our parser, %zu mismatches\n",
           version ? version : "?", n, files, openai, n - openai - refused, refused, mismatches);
    CU_ASSERT(refused < 9); /* most templates jinja2 refuses still parse, and get "string" */
    CU_ASSERT(files >= 12);
    CU_ASSERT(openai > 0 && openai < n); /* both answers are exercised */
}

static void test_direct_answers(void)
{
    CU_ASSERT_EQUAL(ls_jinja_loops_over_content(NULL), 0);
    CU_ASSERT_EQUAL(detect_s(""), 0);
    CU_ASSERT_EQUAL(detect_s("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}"
                             "{% endfor %}{% endfor %}"),
                    1);
    CU_ASSERT_EQUAL(detect_s("{% for m in messages %}{{ m['content'] }}{% endfor %}"), 0);
    /* through a slice alias and a namespace attribute */
    CU_ASSERT_EQUAL(detect_s("{% set ns = namespace(m=[]) %}{% set ns.m = messages[1:] %}"
                             "{% for x in ns.m %}{% for p in x.content | list %}{% endfor %}"
                             "{% endfor %}"),
                    1);
    /* a tuple target over the messages is vLLM's failed assert: "string" */
    CU_ASSERT_EQUAL(detect_s("{% for i, m in messages %}{% endfor %}{% for m in messages %}"
                             "{% for p in m.content %}{% endfor %}{% endfor %}"),
                    0);
    /* content through a macro parameter, and the same loop without the call */
    const char *macro = "{% macro r(c) %}{% for p in c %}{% endfor %}{% endmacro %}";
    char buf[512];
    snprintf(buf, sizeof(buf), "%s{%% for m in messages %%}{{ r(c=m.content) }}{%% endfor %%}",
             macro);
    CU_ASSERT_EQUAL(detect_s(buf), 1);
    snprintf(buf, sizeof(buf), "%s{%% for m in messages %%}{{ r(m.role) }}{%% endfor %%}", macro);
    CU_ASSERT_EQUAL(detect_s(buf), 0);
    /* a parsed template answers the same every time */
    const char *t = "{% for x in content %}{% endfor %}";
    struct ls_jinja *j = ls_jinja_parse(t, strlen(t), NULL, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(ls_jinja_loops_over_content(j), 1);
    CU_ASSERT_EQUAL(ls_jinja_loops_over_content(j), 1);
    ls_jinja_free(j);
}

/* every prefix of every fixture template: those that parse get an answer, none crashes or leaks
 * (the sanitizer build of tests/sanitize/run.sh sees the second part) */
static void test_every_prefix_is_handled(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    const json_t *cases = json_object_get(fixture, "cases");
    size_t tried = 0, parsed = 0, openai = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const char *file = json_string_value(json_object_get(c, "file"));
        char *text = NULL;
        size_t n = 0;
        if (file) {
            char path[8400];
            snprintf(path, sizeof(path), "%s/%s", chat_dir, file);
            text = read_text(path, &n);
        } else {
            const json_t *tmpl = json_object_get(c, "template");
            n = json_string_length(tmpl);
            text = malloc(n + 1);
            if (text) memcpy(text, json_string_value(tmpl), n + 1);
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        for (size_t len = 0; len <= n; len++) {
            struct ls_jinja *t = ls_jinja_parse(text, len, NULL, 0);
            tried++;
            if (!t) continue;
            parsed++;
            int r = ls_jinja_loops_over_content(t);
            CU_ASSERT(r == 0 || r == 1);
            openai += r == 1;
            ls_jinja_free(t);
        }
        free(text);
    }
    printf("# %zu of %zu prefixes parse, %zu of them loop over content\n", parsed, tried, openai);
    CU_ASSERT(parsed > 1000 && openai > 50);
}

/* appends s to the buffer *b (of length *n, room for cap) */
static void put(char *b, size_t *n, size_t cap, const char *s)
{
    size_t l = strlen(s);
    if (*n + l < cap) {
        memcpy(b + *n, s, l + 1);
        *n += l;
    }
}

static void test_tall_and_wide_trees(void)
{
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    /* the content loop at the bottom of ifs nested as deep as the parser allows, and behind
     * as many filters as it allows */
    for (int kind = 0; kind < 2; kind++) {
        int depth = 0;
        for (;; depth++) {
            n = 0;
            b[0] = '\0';
            for (int i = 0; kind == 0 && i < depth; i++) put(b, &n, cap, "{% if x %}");
            put(b, &n, cap, "{% for m in messages %}{% for p in m.content");
            for (int i = 0; kind == 1 && i < depth; i++) put(b, &n, cap, " | list");
            put(b, &n, cap, " %}{% endfor %}{% endfor %}");
            for (int i = 0; kind == 0 && i < depth; i++) put(b, &n, cap, "{% endif %}");
            struct ls_jinja *t = ls_jinja_parse(b, n, NULL, 0);
            if (!t) break;
            CU_ASSERT_EQUAL(ls_jinja_loops_over_content(t), 1);
            ls_jinja_free(t);
        }
        printf("# %d %s deep no longer parses\n", depth, kind ? "filters" : "ifs");
        CU_ASSERT(depth > (kind ? 150 : 90));
    }

    /* 20000 aliases, each defined before the one it copies: a quadratic scan would crawl */
    n = 0;
    b[0] = '\0';
    char s[96];
    int k = 20000;
    put(b, &n, cap, "{% for m in a0 %}{% for p in m.content %}{% endfor %}{% endfor %}");
    for (int i = 0; i < k; i++) {
        snprintf(s, sizeof(s), "{%% set a%d = a%d[1:] %%}", i, i + 1);
        put(b, &n, cap, s);
    }
    snprintf(s, sizeof(s), "{%% set a%d = messages %%}", k);
    put(b, &n, cap, s);
    clock_t c0 = clock();
    CU_ASSERT_EQUAL(loops_over_content("chain", b, n), 1);
    printf("# %d chained aliases: %.3f s of CPU (parse included)\n", k,
           (double)(clock() - c0) / CLOCKS_PER_SEC);
    /* the same chain broken in the middle */
    char *mid = strstr(b, "{% set a10000 = a10001[1:] %}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mid);
    memcpy(mid + strlen("{% set a10000 = "), "b", 1);
    CU_ASSERT_EQUAL(loops_over_content("broken chain", b, n), 0);
    free(b);
}

int main(void)
{
    fixture = load_fixture();
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("jinja_inspect", NULL, NULL);
    CU_add_test(s, "every fixture template gets vLLM's content format",
                test_fixture_cases_match_vllm);
    CU_add_test(s, "direct answers: aliases, namespaces, macros, tuple targets",
                test_direct_answers);
    CU_add_test(s, "every prefix of a fixture template is answered without a crash",
                test_every_prefix_is_handled);
    CU_add_test(s, "tall trees and long alias chains", test_tall_and_wide_trees);
    int rc = ls_cunit_run_tap();
    json_decref(fixture);
    return rc;
}
