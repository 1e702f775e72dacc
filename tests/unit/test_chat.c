/* Chat templates against transformers: every case of tests/fixtures/chat/expected.json (real
 * model templates, tests/fixtures/chat/templates/, rendered by transformers' own
 * render_jinja_template for a set of conversations) must render to the same bytes, or fail
 * with the template's message where transformers raised. Then what chat.c adds around the
 * interpreter: the variables taken from a tokenizer, the errors for no template and bad input. */
#include "chat.h"
#include "cunit_tap.h"
#include "tokenizer.h"

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static json_t *fixture, *index_, *formats;
static char srcdir[2048] = ".";

static json_t *load(const char *rel)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/fixtures/chat/%s", srcdir, rel);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) printf("# cannot load %s: %s\n", path, je.text);
    return j;
}

static char *slurp(const char *rel)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/fixtures/chat/templates/%s", srcdir, rel);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* a fixture's clock, its "now" (local time, as Python's datetime.now() is), or 0 */
static time_t fixture_now(const json_t *doc)
{
    const char *iso = json_string_value(json_object_get(doc, "now"));
    struct tm tm = {0};
    if (!iso || sscanf(iso, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                       &tm.tm_min, &tm.tm_sec) != 6)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;
    return mktime(&tm);
}

/* vLLM's content format for the real template called name (content_format.json), or NULL */
static const char *vllm_format(const char *name)
{
    const json_t *cases = json_object_get(formats, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        if (json_object_get(c, "file") &&
            !strcmp(json_string_value(json_object_get(c, "name")), name))
            return json_string_value(json_object_get(c, "format"));
    }
    return NULL;
}

static int has_parts(const json_t *messages)
{
    for (size_t i = 0; i < json_array_size(messages); i++)
        if (json_is_array(json_object_get(json_array_get(messages, i), "content"))) return 1;
    return 0;
}

/* Each case renders in its content format; a case with content parts whose format is the one
 * vLLM detects for its template renders the same in auto too. */
/* render every case of fx (expected.json's format) as transformers did: returns the
 * mismatches, and counts the cases that are errors and those rendered again in auto */
static int render_cases(const json_t *fx, int *errors_out, int *autos_out)
{
    const json_t *cases = json_object_get(fx, "cases");
    time_t now = fixture_now(fx);
    CU_ASSERT(now != 0);
    int bad = 0, errors = 0, autos = 0;
    for (size_t i = 0; i < json_array_size(cases); i++)
        for (int pass = 0; pass < 2; pass++) {
            const json_t *c = json_array_get(cases, i);
            const char *name = json_string_value(json_object_get(c, "template"));
            const json_t *entry = json_object_get(index_, name);
            char *text = slurp(json_string_value(json_object_get(entry, "file")));
            CU_ASSERT_PTR_NOT_NULL_FATAL(text);
            /* the variables transformers had: the special tokens map, then the case's kwargs */
            json_t *kw = json_deep_copy(json_object_get(entry, "special_tokens"));
            json_object_update(kw, json_object_get(c, "kwargs"));
            struct chat_env env = {.template_text = text,
                                   .kwargs = kw,
                                   .now = now,
                                   .content_format = chat_content_format_parse(
                                       json_string_value(json_object_get(c, "content_format")))};
            CU_ASSERT(env.content_format > 0);
            if (pass == 1) { /* auto, where vLLM's detection picks the case's format */
                const char *vf = vllm_format(name);
                CU_ASSERT_PTR_NOT_NULL(vf);
                if (!vf || !has_parts(json_object_get(c, "messages")) ||
                    chat_content_format_parse(vf) != env.content_format) {
                    json_decref(kw);
                    free(text);
                    continue;
                }
                env.content_format = CHAT_CONTENT_AUTO;
                autos++;
            }
            int gen = json_is_true(json_object_get(c, "add_generation_prompt"));
            const json_t *tools = json_object_get(c, "tools");
            struct chat_turn turn = {.add_generation_prompt = gen,
                                     .continue_final_message =
                                         json_is_true(json_object_get(c, "continue_final_message")),
                                     .tools = json_is_array(tools) ? tools : NULL};
            char *out = (char *)1, err[1024] = "";
            int len = chat_render_json(&env, json_object_get(c, "messages"), &turn, &out, err,
                                       sizeof(err));
            const json_t *want = json_object_get(c, "rendered");
            const char *herr = json_string_value(json_object_get(c, "error"));
            int ok;
            if (json_is_null(want)) { /* the template raised: no text, and its message */
                /* less the rendered chat transformers 5.x adds to one message */
                const char *dump = herr ? strstr(herr, "\nRendered chat:\n") : NULL;
                char *h = herr ? strndup(herr, dump ? (size_t)(dump - herr) : strlen(herr)) : NULL;
                ok = len == -1 && out == NULL && h && strstr(err, h) != NULL;
                free(h);
                errors++;
            } else {
                ok = len == (int)json_string_length(want) && out &&
                     memcmp(out, json_string_value(want), (size_t)len) == 0;
            }
            if (!ok) {
                bad++;
                printf("# case %zu (%s, gen %d%s): got %d \"%.300s\" (%s), want \"%.300s\" (%s)\n",
                       i, name, gen, pass ? ", auto" : "", len, len >= 0 && out ? out : "", err,
                       json_is_null(want) ? "(error)" : json_string_value(want), herr);
            }
            if (len >= 0) free(out);
            json_decref(kw);
            free(text);
        }
    printf("# %zu cases, %d of them errors, %d mismatches; %d rendered again in auto\n",
           json_array_size(cases), errors, bad, autos);
    *errors_out = errors;
    *autos_out = autos;
    return bad;
}

static void test_render_matches_transformers(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    CU_ASSERT_PTR_NOT_NULL_FATAL(index_);
    CU_ASSERT_PTR_NOT_NULL_FATAL(formats);
    CU_ASSERT(json_array_size(json_object_get(fixture, "cases")) >= 300);
    int errors, autos;
    CU_ASSERT_EQUAL(render_cases(fixture, &errors, &autos), 0);
    CU_ASSERT(errors >= 10); /* Llama 2 and Mistral refuse roles that do not alternate */
    CU_ASSERT(autos >= 40);  /* every template has content-part cases in its detected format */
}

/* random.json (make_chat_random.py): seeded random conversations through every template */
static void test_random_conversations_match_transformers(void)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(index_);
    CU_ASSERT_PTR_NOT_NULL_FATAL(formats);
    json_t *fx = load("random.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fx);
    CU_ASSERT(json_array_size(json_object_get(fx, "cases")) >= 1000);
    int errors, autos;
    CU_ASSERT_EQUAL(render_cases(fx, &errors, &autos), 0);
    CU_ASSERT(errors >= 50); /* roles out of order, which several templates refuse */
    json_decref(fx);
}

/* render messages (JSON text) with template t in content format fmt: the text, or NULL with err */
static char *render_parts(const char *t, int fmt, const char *messages, char *err, size_t errlen)
{
    json_t *msgs = json_loads(messages, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(msgs);
    struct chat_env env = {.template_text = t, .content_format = fmt};
    char *out = NULL;
    int len = chat_render_json(&env, msgs, NULL, &out, err, errlen);
    json_decref(msgs);
    CU_ASSERT((len < 0) == (out == NULL));
    return out;
}

/* content as a list of parts: joined with newlines for templates that concatenate content,
 * passed as given to those that loop over it (auto), or as the format given says */
static void test_content_parts(void)
{
    CU_ASSERT_EQUAL(chat_content_format_parse("auto"), CHAT_CONTENT_AUTO);
    CU_ASSERT_EQUAL(chat_content_format_parse("string"), CHAT_CONTENT_STRING);
    CU_ASSERT_EQUAL(chat_content_format_parse("openai"), CHAT_CONTENT_OPENAI);
    CU_ASSERT_EQUAL(chat_content_format_parse("OpenAI"), -1);
    CU_ASSERT_EQUAL(chat_content_format_parse(NULL), -1);
    const char *concat =
        "{% for m in messages %}[{{ m['role'] + ':' + m['content'] }}]{% endfor %}";
    const char *loop = "{% for m in messages %}{% for p in m.content %}<{{ p['text'] }}>"
                       "{% endfor %}{% endfor %}";
    const char *parts =
        "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
        "\"b\", {\"type\": \"text\", \"text\": null}, {\"type\": "
        "\"output_text\", \"text\": \"c\"}]}, {\"role\": \"assistant\", "
        "\"content\": \"as given\"}]";
    const char *two = "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                      "{\"type\": \"text\", \"text\": \"b\"}]}]";
    char err[512] = "", *out;
    for (int fmt = CHAT_CONTENT_AUTO; fmt <= CHAT_CONTENT_STRING; fmt++) {
        out = render_parts(concat, fmt, parts, err, sizeof err);
        CU_ASSERT_STRING_EQUAL(out ? out : err, "[user:a\nb\nc][assistant:as given]");
        free(out);
    }
    out = render_parts(concat, CHAT_CONTENT_OPENAI, parts, err, sizeof err);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "can only concatenate str (not \"list\") to str"));
    free(out);
    for (int fmt = CHAT_CONTENT_AUTO; fmt <= CHAT_CONTENT_OPENAI; fmt += 2) {
        out = render_parts(loop, fmt, two, err, sizeof err);
        CU_ASSERT_STRING_EQUAL(out ? out : err, "<a><b>");
        free(out);
    }
    /* forced to a string, a looping template walks the characters of "a\nb" */
    out = render_parts(loop, CHAT_CONTENT_STRING, two, err, sizeof err);
    CU_ASSERT_STRING_EQUAL(out ? out : err, "<><><>");
    free(out);
    /* parts that are not text, or not parts, are named */
    static const struct {
        const char *messages, *want;
    } bad[] = {
        {"[{\"role\": \"user\", \"content\": [\"ok\", {\"type\": \"image_url\", \"image_url\": "
         "{\"url\": \"x\"}}]}]",
         "chat message 0, content part 1 is of type \"image_url\": lockstep runs text-only"},
        {"[{\"role\": \"user\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": "
         "[{\"text\": \"no type\"}]}]",
         "chat message 1, content part 0: \"type\" is missing"},
        {"[{\"role\": \"user\", \"content\": [7]}]",
         "content part 0: expected a string or an object, found an integer"},
        {"[{\"role\": \"user\", \"content\": [{\"type\": \"input_text\"}]}]",
         "content part 0 (input_text): \"text\" is missing, expected a string"},
        {"[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": 3}]}]",
         "content part 0 (text): \"text\" is an integer, expected a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        out = render_parts(concat, CHAT_CONTENT_AUTO, bad[i].messages, err, sizeof err);
        CU_ASSERT_PTR_NULL(out);
        if (!strstr(err, bad[i].want)) printf("# bad part %zu: %s\n", i, err);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].want));
        free(out);
    }
}

/* OpenAI's "developer" role, as vLLM renders it (tests/fixtures/chat/developer.json, made by
 * vLLM's own conversion and transformers' render): a system message for templates that do not
 * quote "developer", system messages merged into one first one where needed */
static void test_developer_role(void)
{
    json_t *dev = load("developer.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
    /* its clock (Llama 3.2's "Today Date"): rendering with today's made the test fail the day
     * after the fixture was written */
    const time_t now = fixture_now(dev);
    CU_ASSERT(now != 0);
    const json_t *cases = json_object_get(dev, "cases");
    CU_ASSERT(json_array_size(cases) >= 60);
    int bad = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "template"));
        const json_t *entry = json_object_get(index_, name);
        char *text = slurp(json_string_value(json_object_get(entry, "file")));
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        struct chat_env env = {
            .template_text = text, .kwargs = json_object_get(entry, "special_tokens"), .now = now};
        struct chat_turn turn = {.add_generation_prompt = 1};
        char *out = NULL, err[1024] = "";
        int len =
            chat_render_json(&env, json_object_get(c, "messages"), &turn, &out, err, sizeof err);
        const json_t *want = json_object_get(c, "rendered");
        const char *herr = json_string_value(json_object_get(c, "error"));
        int ok = json_is_null(want) ? len == -1 && herr && strstr(err, herr)
                                    : len == (int)json_string_length(want) &&
                                          !memcmp(out, json_string_value(want), (size_t)len);
        if (!ok) {
            bad++;
            printf("# developer case %zu (%s): got \"%.300s\" (%s), want \"%.300s\"\n", i, name,
                   out ? out : "", err, json_is_null(want) ? herr : json_string_value(want));
        }
        free(out);
        free(text);
    }
    CU_ASSERT_EQUAL(bad, 0);
    json_decref(dev);
    /* a template that quotes the role gets it as it is */
    const char *t = "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
                    "{# knows 'developer' #}";
    char err[256],
        *out = render_parts(t, CHAT_CONTENT_AUTO,
                            "[{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"developer\", "
                            "\"content\": \"d\"}]",
                            err, sizeof err);
    CU_ASSERT_STRING_EQUAL(out ? out : err, "user:u;developer:d;");
    free(out);
}

/* chat_env_of takes the template and the special tokens' text from the tokenizer */
static void test_env_of_tokenizer(void)
{
    char dir[4096], err[512];
    snprintf(dir, sizeof(dir), "%s/tests/fixtures/tokenizer/smollm2/tokenizer.json", srcdir);
    struct tokenizer *tok = tok_load_json(dir, err, sizeof(err));
    if (!tok) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    struct chat_env env = chat_env_of(tok);
    CU_ASSERT_PTR_NOT_NULL(env.template_text);
    CU_ASSERT_STRING_EQUAL(env.bos_token ? env.bos_token : "", "<|im_start|>");
    CU_ASSERT_STRING_EQUAL(env.eos_token ? env.eos_token : "", "<|im_end|>");
    struct chat_msg m[] = {{"user", "Hi"}};
    char *out = NULL;
    int len = chat_render(&env, m, 1, 1, &out, err, sizeof(err));
    const char *want = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained "
                       "by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n";
    CU_ASSERT_EQUAL(len, (int)strlen(want));
    CU_ASSERT_STRING_EQUAL(out ? out : "", want);
    free(out);
    /* after a --chat-template file, the tokenizer adds its tokens but not its templates */
    struct chat_env file = {.template_text = "FILE", .origin = "t.jinja"};
    chat_env_add_tokenizer(&file, tok);
    CU_ASSERT_STRING_EQUAL(file.template_text, "FILE");
    CU_ASSERT_PTR_NULL(file.template_tool_use);
    CU_ASSERT_STRING_EQUAL(file.bos_token ? file.bos_token : "", "<|im_start|>");
    tok_free(tok);
    struct chat_env none = chat_env_of(NULL);
    CU_ASSERT_PTR_NULL(none.template_text);
}

/* kwargs override the special tokens, as transformers' kwargs do; a template that uses an
 * undefined bos_token prints nothing */
static void test_kwargs_and_missing_tokens(void)
{
    struct chat_msg m[] = {{"user", "Hi"}};
    char *out = NULL, err[512];
    struct chat_env env = {.template_text = "[{{ bos_token }}|{{ eos_token }}|{{ x }}]",
                           .eos_token = "E"};
    CU_ASSERT_EQUAL(chat_render(&env, m, 1, 0, &out, err, sizeof(err)), 5);
    CU_ASSERT_STRING_EQUAL(out ? out : "", "[|E|]");
    free(out);
    json_t *kw = json_pack("{s:s, s:i}", "eos_token", "K", "x", 7);
    env.kwargs = kw;
    CU_ASSERT_EQUAL(chat_render(&env, m, 1, 0, &out, err, sizeof(err)), 6);
    CU_ASSERT_STRING_EQUAL(out ? out : "", "[|K|7]");
    free(out);
    json_decref(kw);
    /* messages pass through as given, extra keys included */
    env.template_text = "{% for m in messages %}{{ m.role }}:{{ m.content }}/{{ m.name }};"
                        "{% endfor %}{{ add_generation_prompt }}{{ tools }}";
    env.kwargs = NULL;
    json_t *msgs = json_pack("[{s:s, s:s, s:s}]", "role", "user", "content", "c", "name", "n");
    struct chat_turn gen = {.add_generation_prompt = 1};
    CU_ASSERT(chat_render_json(&env, msgs, &gen, &out, err, sizeof(err)) > 0);
    CU_ASSERT_STRING_EQUAL(out ? out : "", "user:c/n;TrueNone");
    free(out);
    json_decref(msgs);
}

static void test_errors_are_reported(void)
{
    char *out = (char *)1, err[512] = "";
    struct chat_msg m[] = {{"user", "Hi"}};
    struct chat_env env = {0};
    CU_ASSERT_EQUAL(chat_render(&env, m, 1, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no chat template to render"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--chat-template"));
    env.template_text = "{{ raise_exception('no system role here') }}";
    CU_ASSERT_EQUAL(chat_render(&env, m, 1, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no system role here"));
    env.template_text = "{% for m in messages %}";
    CU_ASSERT_EQUAL(chat_render(&env, m, 1, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "chat template"));
    env.template_text = "{{ messages | length }}";
    CU_ASSERT_EQUAL(chat_render(&env, NULL, 1, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_EQUAL(chat_render(&env, m, -1, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_EQUAL(chat_render(&env, m, 1, 0, NULL, err, sizeof(err)), -1);
    CU_ASSERT_EQUAL(chat_render_json(&env, NULL, NULL, &out, err, sizeof(err)), -1);
    json_t *notobj = json_integer(3);
    env.kwargs = notobj;
    CU_ASSERT_EQUAL(chat_render(&env, m, 1, 0, &out, err, sizeof(err)), -1);
    env.kwargs = NULL;
    json_decref(notobj);
    /* content that is not UTF-8 cannot be a JSON string: an error, not a crash */
    struct chat_msg bad[] = {{"user", "ok"}, {"user", "\xff\xfe"}};
    CU_ASSERT_EQUAL(chat_render(&env, bad, 2, 0, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "message 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "UTF-8"));
    /* no messages and NULL roles or contents render */
    CU_ASSERT_EQUAL(chat_render(&env, NULL, 0, 1, &out, err, sizeof(err)), 1);
    CU_ASSERT_STRING_EQUAL(out ? out : "", "0");
    free(out);
    /* a NULL role or content is a null, and null keys are dropped as transformers drops them */
    struct chat_msg z[] = {{NULL, NULL}};
    env.template_text = "{{ messages[0].role is defined }}{{ messages[0].content is defined }}";
    CU_ASSERT_EQUAL(chat_render(&env, z, 1, 0, &out, err, sizeof(err)), 10);
    CU_ASSERT_STRING_EQUAL(out ? out : "", "FalseFalse");
    free(out);
    /* a message that is not an object is named */
    json_t *msgs = json_pack("[{s:s}, i]", "role", "user", 4);
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, NULL, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "chat message 1: expected an object, found an integer"));
    json_decref(msgs);
}

/* continue_final_message as transformers does it: the text ends inside the last message; the
 * option's conflicts and the templates that lose the message are errors */
static void test_continue_final_message(void)
{
    char *out = NULL, err[1024] = "";
    struct chat_env env = {.template_text = "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                                            "</{{ m.role }}>{% endfor %}"};
    json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "user", "content", "hi", "role",
                             "assistant", "content", "Hello th");
    struct chat_turn turn = {.continue_final_message = 1};
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, &turn, &out, err, sizeof(err)), 34);
    CU_ASSERT_STRING_EQUAL(out ? out : err, "<user>hi</user><assistant>Hello th");
    free(out);
    /* a template that trims the content: the cut is right-stripped */
    env.template_text = "{% for m in messages %}[{{ m.content | trim }}]{% endfor %}";
    json_object_set_new(json_array_get(msgs, 1), "content", json_string("Hello  "));
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, &turn, &out, err, sizeof(err)), 10);
    CU_ASSERT_STRING_EQUAL(out ? out : err, "[hi][Hello");
    free(out);
    turn.add_generation_prompt = 1;
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, &turn, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not compatible"));
    turn.add_generation_prompt = 0;
    env.template_text = "{% for m in messages %}{{ m.role }}{% endfor %}";
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, &turn, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not an accepted field"));
    env.template_text = "{{ messages[0].content }}";
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, &turn, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "does not appear in the chat"));
    CU_ASSERT_PTR_NULL(out);
    json_object_set_new(json_array_get(msgs, 1), "content", json_null());
    env.template_text = "{{ messages[-1].content }}";
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, &turn, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "final message has no \"content\" to continue!"));
    /* parts: the last one with text is continued, on a copy (the caller's parts stay) */
    json_t *parts =
        json_pack("[{s:s, s:s}, {s:s}]", "type", "text", "text", "Once ", "type", "image");
    json_object_set(json_array_get(msgs, 1), "content", parts);
    env.template_text = "{% for p in messages[-1].content %}{{ p.text }}|{% endfor %}";
    env.content_format = CHAT_CONTENT_OPENAI; /* vLLM's detection sees no loop over a message */
    turn.continue_final_message = 1;
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, &turn, &out, err, sizeof(err)), 5);
    CU_ASSERT_STRING_EQUAL(out ? out : err, "Once ");
    free(out);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(parts, 0), "text")),
                           "Once ");
    json_decref(parts);
    json_object_set_new(json_array_get(msgs, 1), "content",
                        json_pack("[s, {s:s}]", "no text here", "type", "image"));
    CU_ASSERT_EQUAL(chat_render_json(&env, msgs, &turn, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "string indices must be integers"));
    json_decref(msgs);
    json_t *none = json_array();
    CU_ASSERT_EQUAL(chat_render_json(&env, none, &turn, &out, err, sizeof(err)), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "empty"));
    json_decref(none);
    /* tools reach the template; tools that are not a list are refused */
    env.template_text = "{{ tools | length }}";
    json_t *tools = json_pack("[{s:s}, {s:s}]", "name", "a", "name", "b"), *one = json_array();
    struct chat_turn t2 = {.tools = tools};
    CU_ASSERT_EQUAL(chat_render_json(&env, one, &t2, &out, err, sizeof(err)), 1);
    CU_ASSERT_STRING_EQUAL(out ? out : err, "2");
    free(out);
    t2.tools = json_array_get(tools, 0);
    CU_ASSERT_EQUAL(chat_render_json(&env, one, &t2, &out, err, sizeof(err)), -1);
    json_decref(tools);
    json_decref(one);
}

/* tests/fixtures/chat/folders: which template a model folder gives, from tokenizer_config.json
 * or chat_template.jinja files, for a request without tools and one with, as transformers'
 * loader and get_chat_template pick (folders.json; the templates are plain words, so the
 * rendered text is the template's name) */
static void test_folder_templates(void)
{
    json_t *want = load("folders.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    CU_ASSERT(json_object_size(want) >= 6);
    json_t *tools = json_pack("[{s:s}]", "type", "function"),
           *one = json_pack("[{s:s, s:s}]", "role", "user", "content", "x");
    const char *name;
    json_t *w;
    json_object_foreach(want, name, w)
    {
        char path[4096], err[1024] = "";
        snprintf(path, sizeof(path), "%s/tests/fixtures/chat/folders/%s/tokenizer.json", srcdir,
                 name);
        struct tokenizer *tok = tok_load_json(path, err, sizeof(err));
        if (!tok) printf("# %s: %s\n", name, err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
        struct chat_env env = chat_env_of(tok);
        for (int t = 0; t < 2; t++) {
            struct chat_turn turn = {.tools = t ? tools : NULL};
            const json_t *exp = json_object_get(w, t ? "tools" : "plain");
            char *out = NULL;
            int len = chat_render_json(&env, one, &turn, &out, err, sizeof(err));
            int ok = json_is_null(exp) ? len == -1 && strstr(err, "no chat template")
                                       : len >= 0 && strcmp(out, json_string_value(exp)) == 0;
            if (!ok)
                printf("# %s, %s: got \"%s\" (%s), want %s\n", name, t ? "tools" : "no tools",
                       out ? out : "", err, json_is_null(exp) ? "none" : json_string_value(exp));
            CU_ASSERT(ok);
            free(out);
        }
        tok_free(tok);
    }
    /* a template file with a NUL byte is refused, naming the file */
    char dir[] = "/tmp/ls-chat-XXXXXX", path[4200], err[1024] = "";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/tests/fixtures/chat/folders/config_string/tokenizer.json",
             srcdir);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
    f = fopen(path, "wb");
    fwrite("a\0b", 1, 3, f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    struct tokenizer *tok = tok_load_json(path, err, sizeof(err));
    CU_ASSERT_PTR_NULL(tok);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "chat_template.jinja: holds a NUL byte"));
    tok_free(tok);
    snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    json_decref(tools);
    json_decref(one);
    json_decref(want);
}

int main(void)
{
    const char *src = getenv("SRCDIR");
    if (src) snprintf(srcdir, sizeof(srcdir), "%s", src);
    fixture = load("expected.json");
    index_ = load("templates/index.json");
    formats = load("content_format.json");
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("chat", NULL, NULL);
    CU_add_test(s, "render matches transformers on real model templates",
                test_render_matches_transformers);
    CU_add_test(s, "random conversations render as transformers renders them",
                test_random_conversations_match_transformers);
    CU_add_test(s, "the template and special tokens come from the tokenizer",
                test_env_of_tokenizer);
    CU_add_test(s, "kwargs override, missing tokens are undefined, messages pass through",
                test_kwargs_and_missing_tokens);
    CU_add_test(s, "no template, bad templates and bad input are errors", test_errors_are_reported);
    CU_add_test(s, "continue_final_message ends inside the last message; tools reach the template",
                test_continue_final_message);
    CU_add_test(s, "a folder's template comes from its files or its config, as transformers picks",
                test_folder_templates);
    CU_add_test(s, "content parts are joined for templates that concatenate content",
                test_content_parts);
    CU_add_test(s, "the developer role becomes system as vLLM makes it", test_developer_role);
    int rc = ls_cunit_run_tap();
    json_decref(fixture);
    json_decref(index_);
    json_decref(formats);
    return rc;
}
