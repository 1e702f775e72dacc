/* Chat prompts: the model's own chat template (chat_template in tokenizer_config.json,
 * tokenizer.chat_template in a GGUF, or a file given with --chat-template), rendered by
 * runtime/jinja.c with the variables transformers' apply_chat_template gives it: messages,
 * add_generation_prompt, tools and documents (none), the tokenizer's special tokens, and any
 * extra variables (--chat-template-kwargs, e.g. {"enable_thinking": false}).
 *
 * The rendered text carries its own BOS where the template writes one ("<|begin_of_text|>",
 * "<s>"): encode it with add_special = 0 and parse_special = 1, as transformers does. */
#ifndef LOCKSTEP_CHAT_H
#define LOCKSTEP_CHAT_H

#include <jansson.h>
#include <stddef.h>
#include <time.h>

struct tokenizer;

struct chat_msg {
    const char *role; /* "system", "user", "assistant", or any other the template knows */
    const char *content;
};

/* How a message's content given as a list of parts reaches the template (vLLM's
 * --chat-template-content-format): CHAT_CONTENT_AUTO decides per template, "openai" for a template
 * that iterates over a message's content (ls_jinja_loops_over_content), "string" otherwise;
 * CHAT_CONTENT_STRING joins the text of the parts with newlines into one string, as vLLM does,
 * so templates that concatenate content (most of them) take it; CHAT_CONTENT_OPENAI passes the
 * list as given, as transformers does. Content given as a string reaches the template as given
 * in every format. */
enum chat_content_format { CHAT_CONTENT_AUTO = 0, CHAT_CONTENT_STRING, CHAT_CONTENT_OPENAI };

/* "auto", "string" or "openai" -> the format; -1 for anything else */
int chat_content_format_parse(const char *s);

struct chat_env {
    const char *template_text;     /* NULL or "": the model has none, rendering is an error */
    const char *template_tool_use; /* the model's "tool_use" template, rendered instead for
                                      requests with tools (as transformers does); or NULL */
    const char *origin;            /* where the text came from, for errors; NULL: the model */
    const char *bos_token;         /* the tokenizer's special tokens as text; NULL: not passed, */
    const char *eos_token;         /* so the template sees them undefined (Qwen has no BOS) */
    const json_t *kwargs;          /* extra template variables (an object), or NULL */
    time_t now;         /* strftime_now's clock (Llama 3.2's date); 0 = the current time */
    int content_format; /* enum chat_content_format; 0 = auto */
};

/* the template and special tokens of a tokenizer (pointers into it); kwargs NULL, now 0 */
struct chat_env chat_env_of(const struct tokenizer *tok);

/* Completes an env that chat_env_load set up before the model loaded: the tokenizer's special
 * tokens, and its templates unless a --chat-template file gave one. */
void chat_env_add_tokenizer(struct chat_env *env, const struct tokenizer *tok);

/* Applies --chat-template FILE (the template text replaces the tokenizer's) and
 * --chat-template-kwargs JSON (an object of extra variables) to env; either may be NULL. What env
 * now points to is owned by *template_buf and *kwargs: free() and json_decref() them after the
 * last render. -1 with err naming the flag and the problem (an unreadable file, not a JSON
 * object). */
int chat_env_load(struct chat_env *env, const char *template_path, const char *kwargs_text,
                  char **template_buf, json_t **kwargs, char *err, size_t errlen);

/* What one request adds to the environment (transformers' apply_chat_template arguments). */
struct chat_turn {
    int add_generation_prompt;  /* end with the header of an assistant turn */
    int continue_final_message; /* end inside the last message's content instead, for the model
                                   to go on with it (excludes add_generation_prompt) */
    const json_t *tools;        /* a list of tool schemas for the template, or NULL (none) */
    const json_t *kwargs; /* this request's extra variables (an object, over env's), or NULL */
};

/* Renders a JSON list of message objects (passed to the template as transformers passes them:
 * role, content, and whatever else the caller gives, e.g. tool_calls or reasoning_content;
 * content given as a list of parts as env->content_format says) into
 * *out (malloc'd, NUL-terminated) and returns its length; -1 with err set, *out NULL, when there
 * is no template, the template is not valid Jinja, or it raises (e.g. roles that do not
 * alternate for Llama 2 and Mistral: the template's own message is quoted), the turn's
 * options conflict, or content parts cannot be joined into a string (a part that is not text:
 * lockstep runs text-only models). */
int chat_render_json(const struct chat_env *env, const json_t *messages,
                     const struct chat_turn *turn, char **out, char *err, size_t errlen);

/* the same for n messages of role and content, with a turn's options (NULL: none) */
int chat_render_turn(const struct chat_env *env, const struct chat_msg *msgs, int n,
                     const struct chat_turn *turn, char **out, char *err, size_t errlen);

/* chat_render_turn with add_generation_prompt only */
int chat_render(const struct chat_env *env, const struct chat_msg *msgs, int n,
                int add_generation_prompt, char **out, char *err, size_t errlen);

/* Whether tools is a list of objects (the tool schemas a template takes, OpenAI-style); -1 with
 * err naming it as what ("field \"tools\"", "--tools FILE"), the expected and the found. */
int chat_tools_check(const json_t *tools, const char *what, char *err, size_t errlen);

/* Reads --tools FILE, a JSON list of tool schemas, into *tools (json_decref it); -1 with err
 * naming the file and what is wrong with it. */
int chat_tools_load(const char *path, json_t **tools, char *err, size_t errlen);

#endif
