/* Chat templates, rendered from the model's own Jinja text (runtime/jinja.c) as transformers'
 * apply_chat_template renders them (utils/chat_template_utils.py): the messages normalized as it
 * does, tools (or none), documents (none), add_generation_prompt, the tokenizer's special tokens,
 * then the caller's extra variables, which override the others as transformers' kwargs do;
 * continue_final_message cut as it cuts. Where OpenAI-style requests go past transformers, as
 * vLLM takes them: content given as parts joined into text for templates that do not loop over
 * content, and the "developer" role turned into a system message for templates that do not know
 * it. Checked against transformers and vLLM's own code on twelve real templates
 * (tests/fixtures/chat, tests/unit/test_chat.c). */
#include "config.h"
#include "chat.h"
#include "jinja.h"
#include "json_util.h"
#include "log.h"
#include "strbuf.h"
#include "tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHAT_TEMPLATE_MAX (16u << 20) /* the largest templates on the Hub are ~100 KB */

void chat_env_add_tokenizer(struct chat_env *env, const struct tokenizer *tok)
{
    if (!tok) return;
    if (!env->origin) { /* no --chat-template file */
        env->template_text = tok_chat_template(tok);
        env->template_tool_use = tok_chat_template_tool_use(tok);
    }
    int32_t bos = tok_bos(tok), eos = tok_eos(tok);
    env->bos_token = bos >= 0 ? tok_text(tok, bos) : NULL;
    env->eos_token = eos >= 0 ? tok_text(tok, eos) : NULL;
}

struct chat_env chat_env_of(const struct tokenizer *tok)
{
    struct chat_env env = {0};
    chat_env_add_tokenizer(&env, tok);
    return env;
}

/* The messages as transformers' apply_chat_template hands them to the template: keys whose value
 * is null dropped (_normalize_chat_messages: OpenAI-style content=None or tool_calls=None would
 * otherwise print "None" or crash many templates), and a message's reasoning, under whichever of
 * reasoning_content, thinking and reasoning it came, copied to thinking (first) and
 * reasoning_content (_alias_reasoning_fields). NULL with err set when a message is not an
 * object. */
static json_t *template_messages(const json_t *messages, char *err, size_t errlen)
{
    static const char *const reasoning_keys[] = {"reasoning_content", "thinking", "reasoning"};
    json_t *list = json_array();
    size_t i;
    json_t *msg;
    json_array_foreach((json_t *)messages, i, msg)
    {
        if (!json_is_object(msg)) {
            ls_errf(err, errlen, "chat message %zu: expected an object, found %s", i,
                    ls_json_type_name(msg));
            json_decref(list);
            return NULL;
        }
        const json_t *reasoning = NULL;
        for (size_t r = 0; r < 3 && !reasoning; r++) {
            const json_t *v = json_object_get(msg, reasoning_keys[r]);
            if (v && !json_is_null(v)) reasoning = v;
        }
        json_t *m = json_object();
        if (reasoning) json_object_set(m, "thinking", (json_t *)reasoning);
        const char *key;
        json_t *v;
        json_object_foreach(msg, key, v)
        {
            if (!json_is_null(v)) json_object_set(m, key, v);
        }
        if (reasoning) json_object_set(m, "reasoning_content", (json_t *)reasoning);
        json_array_append_new(list, m);
    }
    return list;
}

int chat_content_format_parse(const char *s)
{
    static const char *const names[] = {"auto", "string", "openai"};
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* The text of one content part as vLLM's "string" format takes it, or NULL (skip the part) with
 * *skip set, or NULL with err set. Text parts are {"type": "text", "text": ...} and their OpenAI
 * Responses and reasoning kin; a plain string is a text part too. */
static const json_t *part_text(const json_t *part, size_t mi, size_t pi, int *skip, char *err,
                               size_t errlen)
{
    /* the part types taken as text, the key that holds it, and whether a part without it is
     * skipped (vLLM skips text and refusal parts whose text is missing or null) */
    static const struct {
        const char *type, *key;
        int skip_missing;
    } kinds[] = {
        {"text", "text", 1},       {"input_text", "text", 0},   {"output_text", "text", 0},
        {"refusal", "refusal", 1}, {"thinking", "thinking", 0}, {"tool_reference", "name", 0},
    };
    *skip = 0;
    if (json_is_string(part)) return part;
    if (!json_is_object(part)) {
        ls_errf(err, errlen,
                "chat message %zu, content part %zu: expected a string or an object, "
                "found %s",
                mi, pi, ls_json_type_name(part));
        return NULL;
    }
    const json_t *type = json_object_get(part, "type");
    if (!json_is_string(type)) {
        ls_errf(err, errlen,
                "chat message %zu, content part %zu: \"type\" is %s, expected a "
                "string such as \"text\"",
                mi, pi, type ? ls_json_type_name(type) : "missing");
        return NULL;
    }
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        if (strcmp(json_string_value(type), kinds[k].type)) continue;
        const json_t *v = json_object_get(part, kinds[k].key);
        if (json_is_string(v)) return v;
        if ((!v || json_is_null(v)) && kinds[k].skip_missing) {
            *skip = 1;
            return NULL;
        }
        ls_errf(err, errlen,
                "chat message %zu, content part %zu (%s): \"%s\" is %s, expected a string", mi, pi,
                kinds[k].type, kinds[k].key, v ? ls_json_type_name(v) : "missing");
        return NULL;
    }
    ls_errf(err, errlen,
            "chat message %zu, content part %zu is of type \"%s\": lockstep runs "
            "text-only models, so only text parts (text, input_text, output_text, refusal, "
            "thinking, tool_reference) can be rendered",
            mi, pi, json_string_value(type));
    return NULL;
}

/* vLLM's "string" content format: each message's content given as a list of parts becomes the
 * text of its parts joined with newlines */
static int join_content_parts(json_t *msgs, char *err, size_t errlen)
{
    size_t mi, pi;
    json_t *m, *part;
    json_array_foreach(msgs, mi, m)
    {
        json_t *content = json_object_get(m, "content");
        if (!json_is_array(content)) continue;
        struct ls_strbuf b = {0};
        size_t taken = 0;
        json_array_foreach(content, pi, part)
        {
            int skip;
            const json_t *t = part_text(part, mi, pi, &skip, err, errlen);
            if (!t && !skip) {
                free(b.p);
                return -1;
            }
            if (skip) continue;
            if (taken++) ls_strbuf_put(&b, "\n", 1);
            ls_strbuf_put(&b, json_string_value(t), json_string_length(t));
        }
        json_t *joined = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.n);
        free(b.p);
        if (!joined || json_object_set_new(m, "content", joined))
            return ls_errf(err, errlen, "chat_render: out of memory");
    }
    return 0;
}

/* The text vLLM takes from a system message's content when it merges system messages, into t
 * (emptied first): a string as it is, a list's text parts (objects with "text", and strings)
 * joined with newlines, anything else nothing. */
static void system_text(struct ls_strbuf *t, const json_t *content)
{
    t->n = 0;
    ls_strbuf_put(t, "", 0);
    if (json_is_string(content))
        ls_strbuf_put(t, json_string_value(content), json_string_length(content));
    size_t i, taken = 0;
    json_t *part;
    json_array_foreach((json_t *)content, i, part)
    {
        const json_t *x = json_is_object(part) ? json_object_get(part, "text") : part;
        if (!json_is_string(x)) continue;
        if (taken++) ls_strbuf_put(t, "\n", 1);
        ls_strbuf_put(t, json_string_value(x), json_string_length(x));
    }
}

/* vLLM's answer to the OpenAI "developer" role for templates that do not know it (the text
 * "developer" quoted nowhere in the template): developer messages become system messages
 * without their "tools", and when a system message is then not the first, or not the only one,
 * all of them merge into one first system message, their non-empty texts joined by blank lines
 * (Qwen's templates refuse a system message past the first). -1 when out of memory. */
static int developer_to_system(json_t **msgs, const char *tmpl)
{
    size_t i, n_dev = 0;
    json_t *m;
    json_array_foreach(*msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        n_dev += role && !strcmp(role, "developer");
    }
    if (!n_dev || strstr(tmpl, "\"developer\"") || strstr(tmpl, "'developer'")) return 0;
    /* one pass: the roles turned, the other messages kept in order, the system texts joined */
    struct ls_strbuf all = {0}, t = {0};
    ls_strbuf_put(&all, "", 0);
    json_t *rest = json_array();
    int merge = 0, failed = !rest;
    size_t seen = 0; /* the non-empty system texts so far, which vLLM counts */
    json_array_foreach(*msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "developer")) {
            failed |= json_object_set_new(m, "role", json_string("system"));
            json_object_del(m, "tools");
            role = "system";
        }
        if (!role || strcmp(role, "system")) {
            failed |= rest && json_array_append(rest, m);
            continue;
        }
        if (i > 0 || seen) merge = 1;
        system_text(&t, json_object_get(m, "content"));
        if (t.n) {
            if (seen++) ls_strbuf_put(&all, "\n\n", 2);
            ls_strbuf_put(&all, t.p, t.n);
        }
    }
    free(t.p);
    failed |= all.oom || t.oom;
    json_t *merged = failed || !merge
                         ? NULL
                         : json_pack("{s:s, s:s%}", "role", "system", "content", all.p, all.n);
    free(all.p);
    if (!failed && !merge) {
        json_decref(rest);
        return 0;
    }
    if (failed || !merged || json_array_insert_new(rest, 0, merged)) {
        json_decref(rest);
        return -1;
    }
    json_decref(*msgs);
    *msgs = rest;
    return 0;
}

static int has_content_parts(const json_t *msgs)
{
    size_t i;
    json_t *m;
    json_array_foreach((json_t *)msgs, i, m)
    {
        if (json_is_array(json_object_get(m, "content"))) return 1;
    }
    return 0;
}

/* str.strip(): [*a, *b) of s[0..n) without the whitespace at either end */
static void py_strip(const char *s, size_t n, size_t *a, size_t *b)
{
    size_t i = 0, end;
    while (i < n) {
        size_t next = i;
        if (!ls_jinja_isspace(ls_jinja_utf8_next(s, n, &next))) break;
        i = next;
    }
    *a = end = i;
    while (i < n)
        if (!ls_jinja_isspace(ls_jinja_utf8_next(s, n, &i))) end = i;
    *b = end;
}

static const char *find_last(const char *h, size_t hn, const char *needle, size_t nn)
{
    for (size_t i = hn >= nn ? hn - nn + 1 : 0; i-- > 0;)
        if (memcmp(h + i, needle, nn) == 0) return h + i;
    return NULL;
}

/* transformers' continue_final_message: the last message's content gets a tag, the rendered
 * text is cut where the tag is (and right-stripped where the template trimmed the content), so
 * it ends inside that message. */
static const char CONTINUE_TAG[] = "CONTINUE_FINAL_MESSAGE_TAG ";

static int tag_final_message(json_t *msgs, const char *template_text, json_t **final, char *err,
                             size_t errlen)
{
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    json_t *content = json_object_get(last, "content");
    if (!last)
        return ls_errf(err, errlen, "continue_final_message is set but the conversation is empty");
    if (!content)
        return ls_errf(err, errlen,
                       "continue_final_message is set but the final message has no \"content\" "
                       "to continue!");
    if (!strstr(template_text, "content"))
        return ls_errf(err, errlen,
                       "continue_final_message is set to \"content\" but this is not an accepted "
                       "field in the chat_template");
    json_t *holder = last; /* the object whose "text" or "content" gets the tag */
    const char *key = "content";
    if (json_is_array(content)) {
        /* content parts: the last one with a "text" is continued (a copy: the parts are the
         * caller's); Python's `"text" in part` on a string part is a substring test, and then
         * part["text"] fails */
        json_t *parts = json_deep_copy(content);
        if (!parts || json_object_set_new(last, "content", parts))
            return ls_errf(err, errlen, "chat_render: out of memory");
        holder = NULL;
        for (size_t i = json_array_size(parts); i-- > 0 && !holder;) {
            json_t *part = json_array_get(parts, i);
            if (json_is_string(part) && strstr(json_string_value(part), "text"))
                return ls_errf(err, errlen, "string indices must be integers, not 'str'");
            if (json_is_object(part) && json_object_get(part, "text")) holder = part;
        }
        if (!holder)
            return ls_errf(err, errlen,
                           "continue_final_message is set but we could not find any text to "
                           "continue in the final message!");
        key = "text";
        content = json_object_get(holder, key);
    }
    if (!json_is_string(content))
        return ls_errf(err, errlen,
                       "continue_final_message: the final message's \"%s\" is %s, not a string "
                       "to continue",
                       key, ls_json_type_name(content));
    *final = json_incref(content);
    size_t n = json_string_length(content);
    char *tagged = malloc(n + sizeof CONTINUE_TAG);
    if (!tagged) return ls_errf(err, errlen, "chat_render: out of memory");
    memcpy(tagged, json_string_value(content), n);
    memcpy(tagged + n, CONTINUE_TAG, sizeof CONTINUE_TAG);
    int rc = json_object_set_new(holder, key, json_stringn(tagged, n + sizeof CONTINUE_TAG - 1));
    free(tagged);
    return rc ? ls_errf(err, errlen, "chat_render: out of memory") : 0;
}

/* the rendered text cut at the tag; -1 when the template lost the final message or the tag */
static long cut_at_tag(const char *text, size_t len, const json_t *final, char *err, size_t errlen)
{
    size_t a, b, tn = sizeof CONTINUE_TAG - 2; /* the tag without its space */
    py_strip(json_string_value(final), json_string_length(final), &a, &b);
    const char *at = find_last(text, len, CONTINUE_TAG, tn);
    if (!at || (b > a && !memmem(text, len, json_string_value(final) + a, b - a)))
        /* transformers' words, and since 5.x the message it looked for (it then prints the
         * whole rendered chat too, which is left out here) */
        return ls_errf(err, errlen,
                       "continue_final_message is set but the final message does not appear in "
                       "the chat after applying the chat template! This can happen if the chat "
                       "template deletes portions of the final message. Please verify the chat "
                       "template and final message in your chat to ensure they are compatible."
                       "Final message to continue: %.*s",
                       (int)(b - a), json_string_value(final) + a);
    size_t cut = (size_t)(at - text);
    if (!(len - cut >= tn + 1 && text[cut + tn] == ' ')) { /* the template trimmed: rstrip */
        size_t s0, s1;
        py_strip(text, cut, &s0, &s1);
        cut = s0 == cut ? 0 : s1; /* all blanks strip to nothing */
    }
    return (long)cut;
}

int chat_render_json(const struct chat_env *env, const json_t *messages,
                     const struct chat_turn *turn, char **out, char *err, size_t errlen)
{
    static const struct chat_turn plain = {0};
    if (!turn) turn = &plain;
    if (out) *out = NULL;
    if (!env || !out || !json_is_array(messages) || (env->kwargs && !json_is_object(env->kwargs)) ||
        (turn->kwargs && !json_is_object(turn->kwargs)) ||
        (turn->tools && !json_is_array(turn->tools))) {
        ls_errf(err, errlen, "chat_render: invalid arguments");
        return -1;
    }
    /* transformers: the "tool_use" template when the request has tools and the model has one */
    const char *tmpl = turn->tools && env->template_tool_use && *env->template_tool_use
                           ? env->template_tool_use
                           : env->template_text;
    if (!tmpl || !*tmpl) {
        ls_errf(err, errlen,
                "no chat template to render: the model has none (chat_template in "
                "tokenizer_config.json, tokenizer.chat_template in a GGUF); give one with "
                "--chat-template FILE, or the prompt templated, as plain text");
        return -1;
    }
    if (turn->continue_final_message && turn->add_generation_prompt) {
        ls_errf(err, errlen,
                "continue_final_message and add_generation_prompt are not compatible: the first "
                "ends the text inside the last message, the second after it");
        return -1;
    }
    char jerr[768];
    struct ls_jinja *parsed = ls_jinja_parse(tmpl, strlen(tmpl), jerr, sizeof jerr);
    if (!parsed) {
        ls_errf(err, errlen, "chat template (%s): %s", env->origin ? env->origin : "the model's",
                jerr);
        return -1;
    }
    json_t *msgs = template_messages(messages, err, errlen), *final = NULL;
    if (!msgs) {
        ls_jinja_free(parsed);
        return -1;
    }
    int format = env->content_format;
    if (format == CHAT_CONTENT_AUTO && has_content_parts(msgs))
        format = ls_jinja_loops_over_content(parsed) ? CHAT_CONTENT_OPENAI : CHAT_CONTENT_STRING;
    if ((format == CHAT_CONTENT_STRING && join_content_parts(msgs, err, errlen)) ||
        (developer_to_system(&msgs, tmpl) && ls_errf(err, errlen, "chat_render: out of memory")) ||
        (turn->continue_final_message && tag_final_message(msgs, tmpl, &final, err, errlen))) {
        json_decref(msgs);
        ls_jinja_free(parsed);
        return -1;
    }
    json_t *vars = json_object();
    if (!vars) {
        json_decref(msgs);
        goto oom;
    }
    /* transformers: render(messages=, tools=, documents=, add_generation_prompt=, **kwargs)
     * with kwargs = the special tokens map, updated by the caller's own */
    if (json_object_set_new(vars, "messages", msgs) ||
        json_object_set_new(vars, "tools",
                            turn->tools ? json_incref((json_t *)turn->tools) : json_null()) ||
        json_object_set_new(vars, "documents", json_null()) ||
        json_object_set_new(vars, "add_generation_prompt",
                            json_boolean(turn->add_generation_prompt)))
        goto oom;
    if (env->bos_token && json_object_set_new(vars, "bos_token", json_string(env->bos_token)))
        goto oom;
    if (env->eos_token && json_object_set_new(vars, "eos_token", json_string(env->eos_token)))
        goto oom;
    if (env->kwargs && json_object_update(vars, (json_t *)env->kwargs)) goto oom;
    if (turn->kwargs && json_object_update(vars, (json_t *)turn->kwargs)) goto oom;
    struct ls_jinja_opts opts = {.now = env->now};
    char *text = NULL;
    size_t len = 0;
    int rc = ls_jinja_render_parsed(parsed, vars, &opts, &text, &len, jerr, sizeof jerr);
    ls_jinja_free(parsed);
    json_decref(vars);
    if (rc != 0) {
        json_decref(final);
        ls_errf(err, errlen, "chat template (%s): %s", env->origin ? env->origin : "the model's",
                jerr);
        return -1;
    }
    if (final) {
        long cut = cut_at_tag(text, len, final, err, errlen);
        json_decref(final);
        if (cut < 0) {
            free(text);
            return -1;
        }
        len = (size_t)cut;
        text[len] = 0;
    }
    if (len > (size_t)INT32_MAX) {
        free(text);
        ls_errf(err, errlen, "chat template: the rendered prompt is over 2 GiB");
        return -1;
    }
    *out = text;
    return (int)len;
oom:
    json_decref(vars);
    json_decref(final);
    ls_jinja_free(parsed);
    ls_errf(err, errlen, "chat_render: out of memory");
    return -1;
}

int chat_render(const struct chat_env *env, const struct chat_msg *msgs, int n,
                int add_generation_prompt, char **out, char *err, size_t errlen)
{
    struct chat_turn turn = {.add_generation_prompt = add_generation_prompt};
    return chat_render_turn(env, msgs, n, &turn, out, err, errlen);
}

int chat_render_turn(const struct chat_env *env, const struct chat_msg *msgs, int n,
                     const struct chat_turn *turn, char **out, char *err, size_t errlen)
{
    if (out) *out = NULL;
    if (n < 0 || (n > 0 && !msgs)) {
        ls_errf(err, errlen, "chat_render: invalid arguments");
        return -1;
    }
    json_t *list = json_array();
    if (!list) goto oom;
    for (int i = 0; i < n; i++) {
        /* a NULL role or content is passed as none; text that is not UTF-8 cannot be a string */
        json_t *role = msgs[i].role ? json_string(msgs[i].role) : json_null();
        json_t *content = msgs[i].content ? json_string(msgs[i].content) : json_null();
        json_t *m = json_object();
        if (!role || !content || !m) {
            json_decref(role);
            json_decref(content);
            json_decref(m);
            json_decref(list);
            if (!role || !content) {
                ls_errf(err, errlen, "chat message %d: its %s is not valid UTF-8", i,
                        role ? "content" : "role");
                return -1;
            }
            goto oom;
        }
        if (json_object_set_new(m, "role", role) || json_object_set_new(m, "content", content)) {
            json_decref(m);
            json_decref(list);
            goto oom;
        }
        if (json_array_append_new(list, m)) { /* m is released by the call */
            json_decref(list);
            goto oom;
        }
    }
    int rc = chat_render_json(env, list, turn, out, err, errlen);
    json_decref(list);
    return rc;
oom:
    ls_errf(err, errlen, "chat_render: out of memory");
    return -1;
}

int chat_tools_check(const json_t *tools, const char *what, char *err, size_t errlen)
{
    if (!json_is_array(tools))
        return ls_errf(err, errlen, "%s: expected a list of tool objects, found %s", what,
                       ls_json_type_name(tools));
    for (size_t i = 0; i < json_array_size(tools); i++)
        if (!json_is_object(json_array_get(tools, i)))
            return ls_errf(err, errlen, "%s[%zu]: expected an object, found %s", what, i,
                           ls_json_type_name(json_array_get(tools, i)));
    return 0;
}

int chat_tools_load(const char *path, json_t **tools, char *err, size_t errlen)
{
    *tools = NULL;
    uint64_t size = 0;
    int fd = ls_open_input(path, &size, err, errlen);
    if (fd < 0) return -1;
    json_error_t je;
    json_t *t = size <= CHAT_TEMPLATE_MAX ? json_loadfd(fd, JSON_REJECT_DUPLICATES, &je) : NULL;
    close(fd);
    if (!t)
        return size > CHAT_TEMPLATE_MAX
                   ? ls_errf(err, errlen, "--tools %s: over 16 MiB, not a list of tools", path)
                   : ls_errf(err, errlen, "--tools %s: not JSON (%s, at %d:%d)", path, je.text,
                             je.line, je.column);
    char what[4200];
    snprintf(what, sizeof what, "--tools %s", path);
    if (chat_tools_check(t, what, err, errlen)) {
        json_decref(t);
        return -1;
    }
    *tools = t;
    return 0;
}

int chat_env_load(struct chat_env *env, const char *template_path, const char *kwargs_text,
                  char **template_buf, json_t **kwargs, char *err, size_t errlen)
{
    *template_buf = NULL;
    *kwargs = NULL;
    if (kwargs_text) {
        json_error_t je;
        json_t *kw = json_loads(kwargs_text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
        if (!kw)
            return ls_errf(err, errlen, "--chat-template-kwargs: not JSON (%s, at %d:%d)", je.text,
                           je.line, je.column);
        if (!json_is_object(kw)) {
            ls_errf(err, errlen, "--chat-template-kwargs: expected a JSON object, found %s",
                    ls_json_type_name(kw));
            json_decref(kw);
            return -1;
        }
        *kwargs = kw;
        env->kwargs = kw;
    }
    if (template_path) {
        uint64_t size = 0;
        int fd = ls_open_input(template_path, &size, err, errlen);
        if (fd < 0) goto fail;
        char *buf = size <= CHAT_TEMPLATE_MAX ? malloc(size + 1) : NULL;
        size_t got = 0;
        while (buf && got < size) {
            ssize_t r = read(fd, buf + got, size - got);
            if (r <= 0) break;
            got += (size_t)r;
        }
        close(fd);
        if (!buf || got != size || memchr(buf, 0, size)) {
            ls_errf(err, errlen, "--chat-template %s: %s", template_path,
                    size > CHAT_TEMPLATE_MAX ? "over 16 MiB, not a chat template"
                    : !buf                   ? "out of memory"
                    : got != size            ? "short read"
                                             : "holds a NUL byte, not a template text");
            free(buf);
            goto fail;
        }
        buf[size] = 0;
        *template_buf = buf;
        env->template_text = buf;
        env->template_tool_use = NULL; /* a template given is the one rendered */
        env->origin = template_path;
    }
    return 0;
fail:
    json_decref(*kwargs);
    *kwargs = NULL;
    env->kwargs = NULL;
    return -1;
}
