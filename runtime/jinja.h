/* A Jinja2 interpreter sized for Hugging Face chat templates: renders a model's own
 * tokenizer.chat_template exactly as transformers' apply_chat_template does (jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop controls, the
 * {% generation %} tag, and transformers' tojson / raise_exception / strftime_now / namespace /
 * dict globals), with Python's semantics for values, operators, printing and json.dumps.
 *
 * Templates come from model files, so they are untrusted: parsing and rendering never crash or
 * abort; nesting depth, total work and output size are bounded, each with its own error. Errors
 * name the template's line:column; for raise_exception the error text contains the template's
 * message verbatim. What jinja2 has but this interpreter does not is an error that says
 * "unsupported", never silently different output: extends/include/import/call/autoescape tags,
 * recursive loops, star-args and double-star kwargs in calls, integers past 64 bits, printf-style
 * "%" on strings, str.format specs, the filters groupby, format, slice, pprint, random, striptags,
 * urlize, urlencode, wordwrap, xmlattr, filesizeformat, a few rare str methods, and + on |safe
 * text. Known approximations: case mapping uses the C library's Unicode tables (simple mappings,
 * plus Python's special cases for sharp s and dotted I), and generators are built eagerly, so an
 * error inside a generator nobody consumes is still raised. */
#ifndef LOCKSTEP_JINJA_H
#define LOCKSTEP_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct ls_jinja_opts {
    time_t now;        /* strftime_now's clock (local time, as datetime.now()); 0 = time(NULL) */
    size_t max_output; /* longest rendered text (and longest string value); 0 = 16 MiB */
    long max_steps;    /* work bound (nodes evaluated, items built); 0 = 50 million, ~1 s */
};

struct ls_jinja; /* a parsed template; immutable, so it can be rendered many times */

/* Parses template text tmpl (tlen bytes of UTF-8). NULL with err set ("template 3:14: ...") on
 * a syntax error, an unknown filter or test, or an unsupported tag. */
struct ls_jinja *ls_jinja_parse(const char *tmpl, size_t tlen, char *err, size_t errlen);

/* Renders with the variables of the JSON object vars (messages, add_generation_prompt,
 * bos_token, tools, ...; NULL = none). On success *out is malloc'd NUL-terminated text (the
 * caller frees), *outlen its length (it may contain NULs), and 0 is returned; on error -1, *out
 * NULL and err says where and what (raise_exception's message, a type error, a limit...). opts
 * may be NULL. */
int ls_jinja_render_parsed(const struct ls_jinja *t, const json_t *vars,
                           const struct ls_jinja_opts *opts, char **out, size_t *outlen, char *err,
                           size_t errlen);

void ls_jinja_free(struct ls_jinja *t);

/* What a caller needs to treat text as the template's Python does: str.isspace() for one code
 * point, and the code point of UTF-8 text s[0..len) at *i, advancing *i past it. */
int ls_jinja_isspace(uint32_t cp);
uint32_t ls_jinja_utf8_next(const char *s, size_t len, size_t *i);

/* Whether the template iterates over a message's content, decided from its syntax tree as vLLM
 * decides its chat-template content format (vllm/renderers/hf.py, _detect_content_format): 1
 * ("openai": content may be a list of parts, e.g. {% for part in message['content'] %}), 0
 * ("string": content must be text; also where vLLM's detection fails and it takes "string").
 * Follows messages through aliases ({% set loop_messages = messages[1:] %}, namespace
 * attributes), filters, tests and slices, and content through macro parameters, as vLLM does. */
int ls_jinja_loops_over_content(const struct ls_jinja *t);

/* parse + render + free in one call */
int ls_jinja_render(const char *tmpl, size_t tlen, const json_t *vars,
                    const struct ls_jinja_opts *opts, char **out, size_t *outlen, char *err,
                    size_t errlen);

#endif
