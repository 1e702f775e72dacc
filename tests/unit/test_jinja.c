/* The Jinja interpreter against jinja2 as transformers configures it: every case of
 * tests/fixtures/jinja/cases.json (written by tests/fixtures/make_jinja_fixtures.py with
 * transformers' own _compile_jinja_template) must render to the same bytes, or fail where
 * jinja2 raised, with raise_exception's message in the error text. Then what only C can check:
 * the output, recursion and work limits hold with clear errors, every prefix of a real template
 * parses or fails cleanly, and outputs are reset on error. */
#include "cunit_tap.h"
#include "jinja.h"

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static json_t *fixture;

static json_t *load_fixture(const char *file)
{
    const char *src = getenv("SRCDIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/fixtures/jinja/%s", src ? src : ".", file);
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j) printf("# cannot load %s: %s\n", path, je.text);
    return j;
}

static struct ls_jinja_opts fixture_opts(void)
{
    struct ls_jinja_opts o = {0};
    o.now = (time_t)json_integer_value(json_object_get(fixture, "now"));
    return o;
}

/* a case's variables: its own, or the file's default_vars */
static const json_t *case_vars_of(const json_t *fx, const json_t *c)
{
    const json_t *v = json_object_get(c, "vars");
    return v ? v : json_object_get(fx, "default_vars");
}

static const json_t *case_vars(const json_t *c)
{
    return case_vars_of(fixture, c);
}

static const json_t *find_case(const char *name)
{
    const json_t *cases = json_object_get(fixture, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        if (!strcmp(json_string_value(json_object_get(c, "name")), name)) return c;
    }
    return NULL;
}

/* every case of fx (cases.json's format) against jinja2: the text, or an error where it
 * raised (raise_exception's message included); returns the cases that differ */
static int check_cases(const json_t *fx, int *raises_out, int *unsupported_out)
{
    const json_t *cases = json_object_get(fx, "cases");
    struct ls_jinja_opts opts = {0};
    opts.now = (time_t)json_integer_value(json_object_get(fx, "now"));
    size_t n = json_array_size(cases);
    int bad = 0, raises = 0, unsupported = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *tj = json_object_get(c, "template");
        const json_t *want = json_object_get(c, "expected");
        char *out = (char *)1, err[1024] = "";
        size_t outlen = 12345;
        int rc = ls_jinja_render(json_string_value(tj), json_string_length(tj), case_vars_of(fx, c),
                                 &opts, &out, &outlen, err, sizeof(err));
        int ok;
        if (json_is_true(json_object_get(c, "unsupported"))) {
            ok = rc == -1 && out == NULL && strstr(err, "unsupported") != NULL;
            unsupported++;
        } else if (want) {
            ok = rc == 0 && out && outlen == json_string_length(want) &&
                 memcmp(out, json_string_value(want), outlen) == 0 && out[outlen] == '\0';
        } else {
            ok = rc == -1 && out == NULL && outlen == 0 && err[0] != '\0';
            if (ok && json_is_true(json_object_get(c, "raise_exception"))) {
                raises++;
                ok = strstr(err, json_string_value(json_object_get(c, "message"))) != NULL;
            }
        }
        if (!ok) {
            bad++;
            if (bad <= 60)
                printf("# %s: template %.300s\n#   got rc %d \"%.300s\" err \"%s\"\n#   want %s "
                       "\"%.300s\"\n",
                       name, json_string_value(tj), rc, rc == 0 && out ? out : "", err,
                       want ? "text" : json_string_value(json_object_get(c, "exception")),
                       want ? json_string_value(want)
                            : json_string_value(json_object_get(c, "message")));
        }
        if (rc == 0) free(out);
    }
    printf("# %zu cases, %d differ, %d raise_exception messages checked, %d unsupported\n", n, bad,
           raises, unsupported);
    *raises_out = raises;
    *unsupported_out = unsupported;
    return bad;
}

static void test_cases_match_jinja2(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    CU_ASSERT(json_array_size(json_object_get(fixture, "cases")) >= 500);
    int raises, unsupported;
    CU_ASSERT_EQUAL(check_cases(fixture, &raises, &unsupported), 0);
    CU_ASSERT(raises >= 5);
}

/* random.json (make_jinja_random.py): seeded random templates */
static void test_random_templates_match_jinja2(void)
{
    json_t *fx = load_fixture("random.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx);
    CU_ASSERT(json_array_size(json_object_get(fx, "cases")) >= 1000);
    int raises, unsupported;
    CU_ASSERT_EQUAL(check_cases(fx, &raises, &unsupported), 0);
    json_decref(fx);
}

static int render_s(const char *t, const char *vars_json, size_t max_output, char **out, char *err,
                    size_t errlen)
{
    json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : NULL;
    struct ls_jinja_opts o = {0};
    o.max_output = max_output;
    size_t len;
    int rc = ls_jinja_render(t, strlen(t), vars, &o, out, &len, err, errlen);
    json_decref(vars);
    return rc;
}

static void test_output_limit_is_an_error(void)
{
    char *out = (char *)1, err[512] = "";
    int rc = render_s("{% for i in range(100000) %}0123456789{% endfor %}", NULL, 1000, &out, err,
                      sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "output"));
    /* a string built in a loop and never printed hits the same limit */
    rc = render_s("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ "
                  "ns.s %}{% endfor %}",
                  NULL, 1 << 20, &out, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "limit"));
    rc = render_s("{{ 'x' * 100000000 }}", NULL, 0, &out, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    /* exactly at the limit is fine */
    rc = render_s("{{ 'x' * 100 }}", NULL, 100, &out, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) CU_ASSERT_EQUAL(strlen(out), 100);
    free(rc == 0 ? out : NULL);
}

static void test_recursion_is_bounded(void)
{
    char *out = NULL, err[512] = "";
    int rc = render_s("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, 0, &out, err,
                      sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "recurses too deeply"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "template 1:"));
    /* nesting in the text itself: brackets, operators, statements */
    size_t n = 100000;
    char *t = malloc(3 * n + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const char *unit[] = {"(", "[", "-", "not ", "{% if 1 %}"};
    for (size_t k = 0; k < sizeof(unit) / sizeof(unit[0]); k++) {
        strcpy(t, "{{ ");
        size_t len = 3, ul = strlen(unit[k]);
        if (k == 4) len = 0;
        for (size_t i = 0; len + ul + 8 < 3 * n; i++) {
            memcpy(t + len, unit[k], ul);
            len += ul;
        }
        strcpy(t + len, k == 4 ? "" : "1 }}");
        rc = ls_jinja_render(t, strlen(t), NULL, NULL, &out, NULL, err, sizeof(err));
        CU_ASSERT_EQUAL(rc, -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "too deeply"));
    }
    /* a long flat chain: left-deep in the tree, refused by its height */
    strcpy(t, "{{ 1");
    size_t len = 4;
    for (size_t i = 0; i < 5000; i++) {
        memcpy(t + len, " + 1", 4);
        len += 4;
    }
    strcpy(t + len, " }}");
    rc = ls_jinja_render(t, strlen(t), NULL, NULL, &out, NULL, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "too deeply"));
    free(t);
    /* deep but legal: 60 nested ifs (real templates nest under 10) */
    char deep[4096] = "";
    for (int i = 0; i < 60; i++) strcat(deep, "{% if 1 %}");
    strcat(deep, "x");
    for (int i = 0; i < 60; i++) strcat(deep, "{% endif %}");
    rc = render_s(deep, NULL, 0, &out, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) {
        CU_ASSERT_STRING_EQUAL(out, "x");
        free(out);
    }
}

static void test_work_is_bounded(void)
{
    char *out = NULL, err[512] = "";
    struct ls_jinja_opts o = {0};
    o.max_steps = 2000000; /* the default, 50 million, takes about a second */
    const char *t = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                    "{% endfor %}";
    clock_t t0 = clock();
    int rc = ls_jinja_render(t, strlen(t), NULL, &o, &out, NULL, err, sizeof(err));
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "too much work"));
    printf("# 2 million steps took %.2f s of CPU\n", secs);
    /* string building charges for the bytes it copies */
    t = "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ "
        "'xxxxxxxxxx' "
        "%}{% endfor %}{{ ns.s|length }}";
    rc = ls_jinja_render(t, strlen(t), NULL, &o, &out, NULL, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "too much work"));
    rc = render_s("{{ range(1000000000) }}", NULL, 0, &out, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "limit"));
    t = "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}"
        "{% endfor %}";
    rc = ls_jinja_render(t, strlen(t), NULL, &o, &out, NULL, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    /* a real conversation is far inside the default */
    rc = render_s("{% for i in range(2000) %}<|im_start|>user\n{{ 'message ' ~ i }}<|im_end|>\n"
                  "{% endfor %}",
                  NULL, 0, &out, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, 0);
    free(rc == 0 ? out : NULL);
}

static void test_every_prefix_parses_or_fails_cleanly(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    const char *names[] = {"chat_qwen_tools_style_toolcall_gen", "chat_llama3_style_sys_gen",
                           "chat_hermes_style_toolcall_gen"};
    struct ls_jinja_opts opts = fixture_opts();
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        const json_t *c = find_case(names[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        const char *t = json_string_value(json_object_get(c, "template"));
        size_t n = strlen(t), ok = 0, failed = 0;
        for (size_t len = 0; len <= n; len++) {
            char *out = (char *)1, err[512] = "";
            size_t outlen = 999;
            int rc = ls_jinja_render(t, len, case_vars(c), &opts, &out, &outlen, err, sizeof(err));
            if (rc == 0) {
                ok++;
                CU_ASSERT(out != NULL && strlen(out) <= outlen);
                free(out);
            } else {
                failed++;
                CU_ASSERT(rc == -1 && out == NULL && outlen == 0 && err[0]);
            }
        }
        printf("# %s: %zu prefixes render, %zu fail\n", names[k], ok, failed);
        CU_ASSERT(failed > 0 && ok > 0);
    }
}

static void test_outputs_are_reset_on_error(void)
{
    char *out = (char *)1, err[256];
    size_t outlen = 77;
    memset(err, 'Z', sizeof(err));
    int rc = ls_jinja_render("{{ 1 + }}", 9, NULL, NULL, &out, &outlen, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_EQUAL(outlen, 0);
    CU_ASSERT_PTR_NOT_NULL(memchr(err, '\0', sizeof(err)));
    out = (char *)1;
    outlen = 77;
    const char *t = "ok{{ raise_exception('stop here') }}";
    rc = ls_jinja_render(t, strlen(t), NULL, NULL, &out, &outlen, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_EQUAL(outlen, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "stop here"));
    /* a tiny error buffer is still NUL-terminated */
    char small[8];
    t = "{{ raise_exception('long message') }}";
    rc = ls_jinja_render(t, strlen(t), NULL, NULL, &out, NULL, small, sizeof(small));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_EQUAL(strlen(small), sizeof(small) - 1);
}

static void test_errors_name_line_and_column(void)
{
    char *out = NULL, err[512] = "";
    int rc = render_s("line one\n{% if true %}\n  {{ 1 + 'a' }}\n{% endif %}", NULL, 0, &out, err,
                      sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "template 3:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "'int' and 'str'"));
    rc = render_s("a\nb\n{{ x|nosuch }}", NULL, 0, &out, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "template 3:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "nosuch"));
    rc = render_s("{% for x in l %}", "{\"l\": [1]}", 0, &out, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "endfor"));
}

static void test_parse_once_render_many(void)
{
    char err[256];
    const char *t = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
    struct ls_jinja *p = ls_jinja_parse(t, strlen(t), err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const char *vars[] = {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
                          "{\"messages\": []}", "{}"};
    const char *want[] = {"<user>a", "", ""};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_loads(vars[i], 0, NULL);
        char *out = NULL;
        size_t len = 0;
        CU_ASSERT_EQUAL(ls_jinja_render_parsed(p, v, NULL, &out, &len, err, sizeof(err)), 0);
        if (out) CU_ASSERT_STRING_EQUAL(out, want[i]);
        CU_ASSERT_EQUAL(len, strlen(want[i]));
        free(out);
        json_decref(v);
    }
    ls_jinja_free(p);
    ls_jinja_free(NULL);
}

static void test_bad_arguments_are_errors(void)
{
    char *out = (char *)1, err[256] = "";
    json_t *arr = json_array();
    CU_ASSERT_EQUAL(ls_jinja_render("x", 1, arr, NULL, &out, NULL, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "object"));
    json_decref(arr);
    CU_ASSERT_EQUAL(ls_jinja_render("x", 1, NULL, NULL, NULL, NULL, err, sizeof(err)), -1);
    CU_ASSERT_EQUAL(ls_jinja_render("\xff\xfe", 2, NULL, NULL, &out, NULL, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "UTF-8"));
    CU_ASSERT_EQUAL(ls_jinja_render("\xed\xa0\x80", 3, NULL, NULL, &out, NULL, err, sizeof(err)),
                    -1);
    /* an empty template renders to an empty string, not NULL */
    size_t len = 9;
    CU_ASSERT_EQUAL(ls_jinja_render(NULL, 0, NULL, NULL, &out, &len, err, sizeof(err)), 0);
    CU_ASSERT_PTR_NOT_NULL(out);
    CU_ASSERT_EQUAL(len, 0);
    free(out);
    /* NUL bytes in the text are kept: outlen counts them */
    CU_ASSERT_EQUAL(ls_jinja_render("a\0b", 3, NULL, NULL, &out, &len, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(len, 3);
    if (out) CU_ASSERT_EQUAL(memcmp(out, "a\0b", 4), 0);
    free(out);
}

static void test_strftime_now_uses_the_given_clock(void)
{
    char *out = NULL, err[256];
    struct ls_jinja_opts o = {0};
    o.now = 86400 * 366; /* 1971-01-02 00:00:00 UTC */
    const char *t = "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}";
    CU_ASSERT_EQUAL(ls_jinja_render(t, strlen(t), NULL, &o, &out, NULL, err, sizeof(err)), 0);
    if (out) CU_ASSERT_STRING_EQUAL(out, "1971-01-02 00:00:00");
    free(out);
}

int main(void)
{
    setenv("TZ", "UTC", 1); /* the fixtures were written with TZ=UTC */
    tzset();
    fixture = load_fixture("cases.json");
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("jinja", NULL, NULL);
    CU_add_test(s, "every fixture case renders as jinja2 does, or fails where it raises",
                test_cases_match_jinja2);
    CU_add_test(s, "seeded random templates render as jinja2 does, or fail where it raises",
                test_random_templates_match_jinja2);
    CU_add_test(s, "the output limit is an error", test_output_limit_is_an_error);
    CU_add_test(s, "recursion and nesting are bounded", test_recursion_is_bounded);
    CU_add_test(s, "total work is bounded", test_work_is_bounded);
    CU_add_test(s, "every prefix of a real template renders or fails cleanly",
                test_every_prefix_parses_or_fails_cleanly);
    CU_add_test(s, "outputs are reset on error", test_outputs_are_reset_on_error);
    CU_add_test(s, "errors name the template's line and column", test_errors_name_line_and_column);
    CU_add_test(s, "a parsed template renders many times", test_parse_once_render_many);
    CU_add_test(s, "bad arguments are errors", test_bad_arguments_are_errors);
    CU_add_test(s, "strftime_now uses the given clock", test_strftime_now_uses_the_given_clock);
    int rc = ls_cunit_run_tap();
    json_decref(fixture);
    return rc;
}
