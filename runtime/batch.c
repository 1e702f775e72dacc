/* lockstep batch: one JSON object per input line, one per output line, in order. Rank 0 reads
 * each line and broadcasts it; every rank parses it the same way, so a bad line is an error
 * object for that line (never a dead job) and a good one a generation in lockstep. Rank 0
 * writes and flushes each result before starting the next, so a killed job keeps what it
 * finished. Per-line fields override the command-line defaults. */
#include "config.h"
#include "args.h"
#include "chat.h"
#include "check.h"
#include "commands.h"
#include "json_util.h"
#include "log.h"
#include "run_common.h"
#include "tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the longest input line taken: far past any prompt of RC_MAX_CONTEXT tokens, and within the
 * int count of the line's broadcast */
#define BATCH_LINE_MAX (256 << 20)

enum {
    OPT_INPUT = 1400,
    OPT_OUTPUT,
    OPT_CHAT,
    OPT_CHAT_TEMPLATE,
    OPT_CHAT_KWARGS,
    OPT_CONTENT_FMT
};

static const char batch_help[] =
    "usage: lockstep batch (-m MODEL | --dummy PRESET) --input prompts.jsonl --output out.jsonl\n"
    "       [defaults]\n"
    "Each input line: {\"id\": ..., \"prompt\": \"...\"}, {\"id\": ..., \"prompt\": [token ids]}\n"
    "(taken as given: no template, no BOS added) or {\"id\": ..., \"messages\": [{\"role\":\n"
    "\"user\", \"content\": \"...\"}]}, optionally with max_tokens (or max_completion_tokens),\n"
    "temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,\n"
    "frequency_penalty, logit_bias ({\"token id\": -100..100}), allowed_token_ids (a list),\n"
    "seed, stop (string or list), stop_token_ids, min_tokens, ignore_eos, logprobs (true\n"
    "with top_logprobs N, or N: 0..20), prompt_logprobs (N: 0..20), n (1..64 completions,\n"
    "the i-th drawn with seed + i: all of them in \"choices\", the first's fields also at the\n"
    "top), return_token_ids (true: \"prompt_token_ids\" and \"token_ids\" too).\n"
    "Each output line: {\"id\", \"text\", \"prompt_tokens\", \"completion_tokens\", "
    "\"finish_reason\"}\n"
    "(and \"logprobs\": {\"content\": [{\"id\", \"token\", \"logprob\", \"top_logprobs\"}]},\n"
    "\"prompt_logprobs\": [null, {\"id\", \"token\", ...}, ...] when asked)\n"
    "or {\"id\", \"error\"} for a line that could not be run. A model without a tokenizer\n"
    "takes prompts as token ids and gives \"text\": null and the \"token_ids\".\n"
    "  -m, --model PATH     a .gguf file, or a folder with config.json + *.safetensors\n"
    "  --dummy PRESET|FILE  random weights (seeded) of a preset shape (llama-3.1-8b, "
    "llama-3.1-70b,\n"
    "                       qwen2.5-7b, smollm2-135m) or of a config.json: prompts as token ids\n"
    "  --input FILE         JSONL prompts ('-' for stdin)\n"
    "  --output FILE        JSONL results, written as they finish ('-' for stdout)\n"
    "  -n, --max-tokens N   default budget per prompt (256)\n"
    "  --chat               apply the chat template to \"prompt\" lines too\n"
    "  --chat-template FILE a Jinja chat template to use instead of the model's\n"
    "  --chat-template-kwargs JSON  extra template variables, e.g. '{\"enable_thinking\": false}'\n"
    "  --chat-template-content-format auto|string|openai  content given as a list of parts:\n"
    "                       string joins the text parts with newlines, openai passes the list\n"
    "                       to the template; auto (default) picks openai for templates that\n"
    "                       loop over a message's content, as vLLM does\n"
    "Messages go to the template as given: keys beside role and content (tool_calls,\n"
    "reasoning_content, name...) reach it too. Chat lines may also carry \"tools\" (a list of\n"
    "tool schemas), \"chat_template_kwargs\" (an object), \"add_generation_prompt\" (default\n"
    "true) and \"continue_final_message\" (end inside the last message, for the model to go\n"
    "on). Other fields (model, stream...) are ignored, and said on stderr line by "
    "line.\n" RC_SAMPLING_HELP LS_COMMON_HELP;

/* what a message says was found in place of a list of the right length: "a list of 3", or the
 * value's type */
static const char *list_or_type(json_t *v, char *buf, size_t len)
{
    if (json_is_array(v))
        snprintf(buf, len, "a list of %zu", json_array_size(v));
    else
        snprintf(buf, len, "%s", ls_json_type_name(v));
    return buf;
}

/* The chat fields of a request, as OpenAI-style servers (vLLM) take them: "tools" (a list of
 * objects), "chat_template_kwargs" (an object), "add_generation_prompt" and
 * "continue_final_message" (booleans; the first defaults to true unless the second is set).
 * Only for chat lines; -1 with err naming the field. */
static int chat_turn_fields(json_t *req, int chat, struct chat_turn *t, char *err, size_t errlen)
{
    static const char *const names[] = {"tools", "chat_template_kwargs", "add_generation_prompt",
                                        "continue_final_message"};
    json_t *v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = json_object_get(req, names[i]);
        if (v[i] && !chat) {
            snprintf(err, errlen, "field \"%s\": only for chat lines (\"messages\", or --chat)",
                     names[i]);
            return -1;
        }
    }
    if (v[0] && chat_tools_check(v[0], "field \"tools\"", err, errlen)) return -1;
    int bad = -1;
    if (v[1] && !json_is_object(v[1]))
        bad = 1;
    else if (v[2] && !json_is_boolean(v[2]))
        bad = 2;
    else if (v[3] && !json_is_boolean(v[3]))
        bad = 3;
    if (bad >= 0) {
        static const char *const want[] = {NULL, "an object", "a boolean", "a boolean"};
        snprintf(err, errlen, "field \"%s\": expected %s, found %s", names[bad], want[bad],
                 ls_json_type_name(v[bad]));
        return -1;
    }
    t->tools = v[0];
    t->kwargs = v[1];
    t->continue_final_message = json_is_true(v[3]);
    t->add_generation_prompt = v[2] ? json_is_true(v[2]) : !t->continue_final_message;
    return 0;
}

/* the ids of a JSON list (its length checked by the caller) into dst; -1 with err naming the
 * first element that is not a token id */
static int token_ids_from(json_t *list, const char *field, int *dst, char *err, size_t errlen)
{
    size_t i;
    json_t *x;
    json_array_foreach(list, i, x)
    {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT_MAX) {
            snprintf(err, errlen,
                     "field \"%s\"[%zu]: expected a token id (an integer >= 0), found %s", field, i,
                     json_is_integer(x) ? "a negative or too large one" : ls_json_type_name(x));
            return -1;
        }
        dst[i] = (int)json_integer_value(x);
    }
    return 0;
}

/* "prompt": [ids] as OpenAI's completions take it: the tokens as given (no template, no BOS
 * added); each id's range is ls_generate's to check (against the vocabulary) */
static int prompt_id_list(json_t *prompt, int **out, int *n, char *err, size_t errlen)
{
    const size_t count = json_array_size(prompt);
    if (count == 0 || count > RC_MAX_CONTEXT) {
        snprintf(err, errlen, "field \"prompt\": expected 1 to %d token ids, found %zu",
                 RC_MAX_CONTEXT, count);
        return -1;
    }
    int *ids = malloc(count * sizeof *ids);
    CHECK_ALLOC(ids);
    if (token_ids_from(prompt, "prompt", ids, err, errlen)) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n = (int)count;
    return 0;
}

/* ids of the request's prompt; -1 with err naming the field */
static int request_ids(const struct ls_model *m, const struct chat_env *env, json_t *req,
                       int chat_default, int **out, int *n, char *err, size_t errlen)
{
    json_t *prompt = json_object_get(req, "prompt"), *messages = json_object_get(req, "messages");
    if (!prompt == !messages) {
        snprintf(err, errlen,
                 "expected exactly one of \"prompt\" (a string or a list of token ids) and "
                 "\"messages\" (a list), found %s",
                 prompt ? "both" : "neither");
        return -1;
    }
    if (json_is_array(prompt)) {
        struct chat_turn none;
        if (chat_turn_fields(req, 0, &none, err, errlen)) return -1;
        return prompt_id_list(prompt, out, n, err, errlen);
    }
    if (!m->tok) {
        snprintf(err, errlen, "the model has no tokenizer: give \"prompt\" as a list of token ids");
        return -1;
    }
    char *text = NULL;
    int chat = messages != NULL || chat_default;
    struct chat_turn turn;
    if (chat_turn_fields(req, chat, &turn, err, errlen)) return -1;
    if (prompt && !json_is_string(prompt)) {
        snprintf(err, errlen, "field \"prompt\": expected a string, found %s",
                 ls_json_type_name(prompt));
        return -1;
    }
    if (chat) {
        if (messages) {
            if (!json_is_array(messages) || json_array_size(messages) == 0 ||
                json_array_size(messages) > 4096) {
                char found[48];
                snprintf(err, errlen,
                         "field \"messages\": expected a list of 1 to 4096 {\"role\", \"content\"} "
                         "objects, found %s",
                         list_or_type(messages, found, sizeof found));
                return -1;
            }
            size_t i;
            json_t *msg;
            json_array_foreach(messages, i, msg)
            {
                /* content may be null (an assistant turn of tool calls only) or a list of parts
                 * ({"type": "text", "text": ...}): joined into a string for templates that do
                 * not iterate over parts, passed as given to those that do
                 * (--chat-template-content-format) */
                json_t *role = json_object_get(msg, "role"),
                       *content = json_object_get(msg, "content");
                if (!json_is_string(role) ||
                    !(json_is_string(content) || json_is_null(content) || json_is_array(content))) {
                    char found[64];
                    if (!json_is_object(msg))
                        snprintf(found, sizeof found, "%s", ls_json_type_name(msg));
                    else
                        snprintf(found, sizeof found, "\"%s\": %s",
                                 json_is_string(role) ? "content" : "role",
                                 ls_json_type_name(json_is_string(role) ? content : role));
                    snprintf(err, errlen,
                             "field \"messages\"[%zu]: expected {\"role\": string, \"content\": "
                             "string, list or null}, found %s",
                             i, found);
                    return -1;
                }
            }
            if (chat_render_json(env, messages, &turn, &text, err, errlen) < 0) return -1;
        } else {
            json_t *one = json_pack("[{s:s, s:O}]", "role", "user", "content", prompt);
            int rc = one ? chat_render_json(env, one, &turn, &text, err, errlen) : -1;
            json_decref(one);
            if (rc < 0) return -1;
        }
    }
    const char *src = text ? text : json_string_value(prompt);
    size_t len = text ? strlen(text) : json_string_length(prompt);
    int rc = rc_encode(m->tok, src, len, !chat, chat, out, n, err, errlen);
    free(text);
    return rc;
}

/* d as its shortest text that reads back the same ("16777217", "0.1", "1e+308"), not %g's six
 * digits, so a value just past a bound does not print as the bound */
static void fmt_num(double d, char *buf, size_t len)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) return;
    }
}

static int num_field(json_t *req, const char *key, double lo, double hi, int integer, double *out,
                     char *err, size_t errlen)
{
    json_t *v = json_object_get(req, key);
    if (!v) return 0;
    if (!json_is_number(v) || (integer && !json_is_integer(v))) {
        snprintf(err, errlen, "field \"%s\": expected %s, found %s", key,
                 integer ? "an integer" : "a number", ls_json_type_name(v));
        return -1;
    }
    double d = json_number_value(v);
    if (d < lo || d > hi) {
        char slo[32], shi[32], found[32];
        fmt_num(lo, slo, sizeof slo);
        fmt_num(hi, shi, sizeof shi);
        if (json_is_integer(v))
            snprintf(found, sizeof found, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else
            fmt_num(d, found, sizeof found);
        snprintf(err, errlen, "field \"%s\": expected %s..%s, found %s", key, slo, shi, found);
        return -1;
    }
    *out = d;
    return 1;
}

/* a list of lo to hi token ids (absent or null: dst and *n untouched) into dst, *n; -1 with err
 * naming the field and what was found */
static int token_list_field(json_t *req, const char *key, int lo, int hi, int *dst, int *n,
                            char *err, size_t errlen)
{
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v) || json_array_size(v) < (size_t)lo || json_array_size(v) > (size_t)hi) {
        char found[48], want[48];
        if (lo > 0)
            snprintf(want, sizeof want, "%d to %d", lo, hi);
        else
            snprintf(want, sizeof want, "at most %d", hi);
        snprintf(err, errlen, "field \"%s\": expected a list of %s token ids, found %s", key, want,
                 list_or_type(v, found, sizeof found));
        return -1;
    }
    if (token_ids_from(v, key, dst, err, errlen)) return -1;
    *n = (int)json_array_size(v);
    return 0;
}

/* a float sampling parameter: its key is the sampler's name for it and its bounds the
 * sampler's (an open low end is left to ls_sampling_validate, which says it) */
static int float_field(json_t *req, enum ls_sampling_param p, double *out, char *err, size_t errlen)
{
    const struct ls_sampling_range *r = &ls_sampling_ranges[p];
    return num_field(req, r->field, r->lo, r->hi, 0, out, err, errlen);
}

/* the most completions a line may ask for ("n") */
#define BATCH_MAX_N 64

/* the request's parameters over the defaults, its number of completions and whether it asks
 * for token ids (vLLM's "return_token_ids"); stop strings point into req */
static int request_params(json_t *req, const struct ls_gen_params *dflt, struct ls_gen_params *p,
                          int *n_choices, int *return_ids, char *err, size_t errlen)
{
    *p = *dflt;
    *n_choices = 1;
    json_t *rti = json_object_get(req, "return_token_ids");
    if (rti && !json_is_boolean(rti) && !json_is_null(rti)) {
        snprintf(err, errlen, "field \"return_token_ids\": expected true or false, found %s",
                 ls_json_type_name(rti));
        return -1;
    }
    *return_ids = json_is_true(rti);
    struct ls_sampling *s = &p->sampling;
    double d;
    int r;
    if ((r = num_field(req, "max_tokens", 0, 1 << 24, 1, &d, err, errlen)) < 0) return -1;
    if (r) p->max_tokens = (int)d;
    /* OpenAI's newer name for it; both given must agree */
    const int had_max = r;
    if ((r = num_field(req, "max_completion_tokens", 0, 1 << 24, 1, &d, err, errlen)) < 0)
        return -1;
    if (r && had_max && (int)d != p->max_tokens) {
        snprintf(err, errlen,
                 "fields \"max_tokens\" (%d) and \"max_completion_tokens\" (%d) disagree: give one",
                 p->max_tokens, (int)d);
        return -1;
    }
    if (r) p->max_tokens = (int)d;
    /* vLLM's: EOS does not end the generation; a floor under its length; more ending ids */
    json_t *ie = json_object_get(req, "ignore_eos");
    if (ie && !json_is_boolean(ie)) {
        snprintf(err, errlen, "field \"ignore_eos\": expected true or false, found %s",
                 ls_json_type_name(ie));
        return -1;
    }
    if (ie) p->ignore_eos = json_is_true(ie);
    if ((r = num_field(req, "min_tokens", 0, 1 << 24, 1, &d, err, errlen)) < 0) return -1;
    if (r) p->min_tokens = (int)d;
    if (p->min_tokens > p->max_tokens) {
        snprintf(err, errlen, "field \"min_tokens\": %d is past max_tokens (%d)", p->min_tokens,
                 p->max_tokens);
        return -1;
    }
    if (token_list_field(req, "stop_token_ids", 0, LS_MAX_STOP_IDS, p->stop_ids, &p->n_stop_ids,
                         err, errlen))
        return -1;
    /* OpenAI's: {"token id": bias, ...}, in place of the command line's --logit-bias */
    json_t *lb = json_object_get(req, "logit_bias");
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb)) {
            snprintf(err, errlen,
                     "field \"logit_bias\": expected an object of token ids to biases, found %s",
                     ls_json_type_name(lb));
            return -1;
        }
        const char *key;
        json_t *val;
        s->n_bias = 0;
        json_object_foreach(lb, key, val)
        {
            char *end = NULL;
            errno = 0;
            const long id = strtol(key, &end, 10);
            if (!isdigit((unsigned char)key[0]) || *end || errno) {
                snprintf(err, errlen,
                         "field \"logit_bias\": key \"%.40s\": expected a token id (digits)", key);
                return -1;
            }
            if (!json_is_number(val)) {
                snprintf(err, errlen,
                         "field \"logit_bias\": token %ld: expected a number, found %s", id,
                         ls_json_type_name(val));
                return -1;
            }
            if (ls_sampling_add_bias(s, id, json_number_value(val), err, errlen)) return -1;
        }
    }
    /* vLLM's: only these tokens, in place of the command line's --allowed-token-ids */
    if (token_list_field(req, "allowed_token_ids", 1, LS_MAX_ALLOWED_TOKENS, s->allowed_id,
                         &s->n_allowed, err, errlen))
        return -1;
    if ((r = num_field(req, "n", 1, BATCH_MAX_N, 1, &d, err, errlen)) < 0) return -1;
    if (r) *n_choices = (int)d;
    if ((r = float_field(req, LS_TEMPERATURE, &d, err, errlen)) < 0) return -1;
    if (r) s->temperature = (float)d;
    if ((r = num_field(req, "top_k", 0, 1 << 24, 1, &d, err, errlen)) < 0) return -1;
    if (r) s->top_k = (int)d;
    if ((r = float_field(req, LS_TOP_P, &d, err, errlen)) < 0) return -1;
    if (r) s->top_p = (float)d;
    if ((r = float_field(req, LS_MIN_P, &d, err, errlen)) < 0) return -1;
    if (r) s->min_p = (float)d;
    if ((r = float_field(req, LS_REPETITION_PENALTY, &d, err, errlen)) < 0) return -1;
    if (r) s->repetition_penalty = (float)d;
    if ((r = float_field(req, LS_PRESENCE_PENALTY, &d, err, errlen)) < 0) return -1;
    if (r) s->presence_penalty = (float)d;
    if ((r = float_field(req, LS_FREQUENCY_PENALTY, &d, err, errlen)) < 0) return -1;
    if (r) s->frequency_penalty = (float)d;
    json_t *seed = json_object_get(req, "seed");
    if (seed) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0) {
            char found[32];
            if (json_is_integer(seed))
                snprintf(found, sizeof found, "%" JSON_INTEGER_FORMAT, json_integer_value(seed));
            else
                snprintf(found, sizeof found, "%s", ls_json_type_name(seed));
            snprintf(err, errlen, "field \"seed\": expected a non-negative integer, found %s",
                     found);
            return -1;
        }
        s->seed = (uint64_t)json_integer_value(seed);
    }
    /* OpenAI's two forms: chat's "logprobs": true with "top_logprobs": N, and completions'
     * "logprobs": N (the alternatives' count) */
    json_t *lp = json_object_get(req, "logprobs");
    if (lp && !json_is_boolean(lp) && !json_is_null(lp) && !json_is_integer(lp)) {
        snprintf(err, errlen, "field \"logprobs\": expected true, false or an integer, found %s",
                 ls_json_type_name(lp));
        return -1;
    }
    if (lp && json_is_integer(lp)) {
        if ((r = num_field(req, "logprobs", 0, LS_MAX_TOP_LOGPROBS, 1, &d, err, errlen)) < 0)
            return -1;
        p->logprobs = 1;
        p->top_logprobs = (int)d;
    } else {
        p->logprobs = json_is_true(lp);
    }
    /* null: not asked, as OpenAI takes it */
    r = 0;
    if (!json_is_null(json_object_get(req, "top_logprobs")) &&
        (r = num_field(req, "top_logprobs", 0, LS_MAX_TOP_LOGPROBS, 1, &d, err, errlen)) < 0)
        return -1;
    if (r) {
        if (!json_is_true(lp)) {
            snprintf(err, errlen, "field \"top_logprobs\": needs \"logprobs\": true");
            return -1;
        }
        p->top_logprobs = (int)d;
    }
    /* vLLM's: the prompt tokens' log-probabilities with N alternatives (null: not asked) */
    r = 0;
    if (!json_is_null(json_object_get(req, "prompt_logprobs")) &&
        (r = num_field(req, "prompt_logprobs", 0, LS_MAX_TOP_LOGPROBS, 1, &d, err, errlen)) < 0)
        return -1;
    if (r) {
        p->prompt_logprobs = 1;
        p->top_prompt_logprobs = (int)d;
    }
    json_t *stop = json_object_get(req, "stop");
    if (stop) {
        p->n_stops = 0;
        if (json_is_string(stop)) {
            if (!json_string_length(stop)) {
                snprintf(err, errlen, "field \"stop\": expected a non-empty string");
                return -1;
            }
            p->stops[p->n_stops++] = json_string_value(stop);
        } else if (json_is_array(stop) && json_array_size(stop) <= LS_MAX_STOPS) {
            size_t i;
            json_t *x;
            json_array_foreach(stop, i, x)
            {
                if (!json_is_string(x) || !json_string_length(x)) {
                    snprintf(err, errlen,
                             "field \"stop\"[%zu]: expected a non-empty string, found %s", i,
                             json_is_string(x) ? "\"\"" : ls_json_type_name(x));
                    return -1;
                }
                p->stops[p->n_stops++] = json_string_value(x);
            }
        } else {
            char found[48];
            snprintf(err, errlen,
                     "field \"stop\": expected a string or a list of at most %d strings, found %s",
                     LS_MAX_STOPS, list_or_type(stop, found, sizeof found));
            return -1;
        }
    }
    return ls_sampling_validate(s, err, errlen);
}

/* The keys of a request that lockstep does not read (an OpenAI-style "model" or "stream", or
 * a misspelt "max_token"), quoted and comma-separated into buf; 0 when there are
 * none. Ignored, as vLLM ignores them, and said, as vLLM logs them. */
static size_t ignored_fields(json_t *req, char *buf, size_t len)
{
    static const char *const known[] = {"id",
                                        "prompt",
                                        "messages",
                                        "max_tokens",
                                        "max_completion_tokens",
                                        "ignore_eos",
                                        "min_tokens",
                                        "stop_token_ids",
                                        "logit_bias",
                                        "allowed_token_ids",
                                        "n",
                                        "return_token_ids",
                                        "temperature",
                                        "top_k",
                                        "top_p",
                                        "min_p",
                                        "repetition_penalty",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "seed",
                                        "stop",
                                        "logprobs",
                                        "top_logprobs",
                                        "prompt_logprobs",
                                        "tools",
                                        "chat_template_kwargs",
                                        "add_generation_prompt",
                                        "continue_final_message"};
    size_t n = 0, used = 0;
    const char *key;
    json_t *v;
    buf[0] = 0;
    json_object_foreach(req, key, v)
    {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(key, known[k])) k++;
        if (k < sizeof known / sizeof *known) continue;
        if (used + 1 < len) { /* past the buffer, the list is cut */
            int w = snprintf(buf + used, len - used, "%s\"%s\"", n ? ", " : "", key);
            used = w < 0 || (size_t)w >= len - used ? len : used + (size_t)w;
        }
        n++;
    }
    return n;
}

/* one result line, flushed; -1 with errno on a failed write */
static int write_line(FILE *out, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    CHECK_ALLOC(s);
    int rc = fprintf(out, "%s\n", s) < 0 || fflush(out) != 0 ? -1 : 0;
    int saved = errno;
    free(s);
    errno = saved;
    return rc;
}

/* rank 0's files: the input (a file, a pipe or stdin; not a folder), then the output, opened only
 * once it is known not to be the input: fopen(out, "w") would empty the input before its first
 * line is read. Character devices (a terminal for both, /dev/null) may be both. */
static int open_files(const char *in_path, const char *out_path, FILE **in, FILE **out)
{
    const int in_std = !strcmp(in_path, "-"), out_std = !strcmp(out_path, "-");
    const char *in_name = in_std ? "- (stdin)" : in_path,
               *out_name = out_std ? "- (stdout)" : out_path;
    struct stat si, so;
    *out = NULL;
    *in = in_std ? stdin : fopen(in_path, "r");
    if (!*in || fstat(fileno(*in), &si) != 0) {
        ls_error("batch: --input %s: %s", in_name, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(si.st_mode)) {
        ls_error("batch: --input %s: expected a JSONL file, a pipe or '-' (stdin), found a "
                 "directory",
                 in_name);
        goto fail;
    }
    int out_exists = out_std ? fstat(STDOUT_FILENO, &so) == 0 : stat(out_path, &so) == 0;
    if (out_exists && so.st_dev == si.st_dev && so.st_ino == si.st_ino && !S_ISCHR(si.st_mode)) {
        ls_error("batch: --output %s is the same file as --input %s: writing the results would "
                 "destroy the prompts before they are read; choose another --output",
                 out_name, in_name);
        goto fail;
    }
    *out = out_std ? stdout : fopen(out_path, "w");
    if (!*out) {
        ls_error("batch: --output %s: %s", out_name, strerror(errno));
        goto fail;
    }
    return 0;
fail:
    if (*in && *in != stdin) fclose(*in);
    *in = NULL;
    return -1;
}

/* rank 0: flushes and closes the files; -1 when the output could not be written out (said
 * unless an earlier failure was) */
static int close_files(FILE *in, FILE *out, const char *out_path, int failed)
{
    if (in && in != stdin) fclose(in);
    if (!out) return 0;
    int rc = out == stdout ? fflush(out) : fclose(out);
    if (rc != 0 || (out == stdout && ferror(out))) {
        if (!failed) ls_error("batch: --output %s: %s", out_path, strerror(errno));
        return -1;
    }
    return 0;
}

int cmd_batch(int argc, char **argv)
{
    static const struct option longopts[] = {
        RC_MODEL_LONGOPTS,
        {"input", required_argument, NULL, OPT_INPUT},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"max-tokens", required_argument, NULL, 'n'},
        {"chat", no_argument, NULL, OPT_CHAT},
        {"chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE},
        {"chat-template-kwargs", required_argument, NULL, OPT_CHAT_KWARGS},
        {"chat-template-content-format", required_argument, NULL, OPT_CONTENT_FMT},
        {"help", no_argument, NULL, 'h'},
        RC_SAMPLING_LONGOPTS,
        LS_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0}};
    struct ls_common_opts common;
    ls_common_defaults(&common);
    struct ls_gen_params dflt;
    ls_gen_defaults(&dflt);
    struct rc_model_arg model = {0};
    const char *in_path = NULL, *out_path = NULL;
    const char *template_path = NULL, *kwargs_text = NULL;
    int chat = 0, max_ctx = 0, reset = 1, opt, rc, content_format = CHAT_CONTENT_AUTO;
    long v;
    char err[1024];
    while ((opt = ls_getopt(argc, argv, "m:n:h", longopts, &reset, err, sizeof err)) != -1) {
        if (rc_model_opt(opt, optarg, &model)) continue;
        switch (opt) {
        case OPT_INPUT:
            in_path = optarg;
            break;
        case OPT_OUTPUT:
            out_path = optarg;
            break;
        case OPT_CHAT:
            chat = 1;
            break;
        case OPT_CHAT_TEMPLATE:
            template_path = optarg;
            break;
        case OPT_CHAT_KWARGS:
            kwargs_text = optarg;
            break;
        case OPT_CONTENT_FMT:
            if ((content_format = chat_content_format_parse(optarg)) < 0) {
                snprintf(err, sizeof err,
                         "--chat-template-content-format: expected auto, string or openai, "
                         "found '%s'",
                         optarg);
                return ls_usage_error("batch", err);
            }
            break;
        case 'n':
            if (ls_parse_long("--max-tokens", optarg, 0, 1 << 24, &v, err, sizeof err))
                return ls_usage_error("batch", err);
            dflt.max_tokens = (int)v;
            break;
        case 'h':
            ls_print0("%s", batch_help);
            return 0;
        case '?':
            return ls_usage_error("batch", err);
        default:
            rc = rc_sampling_opt(opt, optarg, &dflt, &max_ctx, err, sizeof err);
            if (rc == 1) rc = ls_common_opt(opt, optarg, &common, err, sizeof err);
            if (rc != 0) return ls_usage_error("batch", err);
        }
    }
    if (optind < argc) {
        snprintf(err, sizeof err, "unexpected argument '%s'", argv[optind]);
        return ls_usage_error("batch", err);
    }
    if (!model.path) return ls_usage_error("batch", "missing --model (-m) or --dummy");
    if (!in_path) return ls_usage_error("batch", "missing --input");
    if (!out_path) return ls_usage_error("batch", "missing --output");
    /* the chat template: the model's, unless a file replaces it; read before the model loads */
    struct chat_env env = {.content_format = content_format};
    char *template_buf = NULL;
    json_t *kwargs = NULL;
    if (chat_env_load(&env, template_path, kwargs_text, &template_buf, &kwargs, err, sizeof err))
        return ls_usage_error("batch", err);

    /* the files first, so that a wrong path does not wait for the model to load */
    struct rc_job j;
    rc_job_start(&j, &argc, &argv, &common, NULL, max_ctx, RC_PREFILL_CHUNK);
    FILE *in = NULL, *out = NULL;
    if (!ls_agree(j.ctx.rank != 0 || open_files(in_path, out_path, &in, &out) == 0))
        ls_abort_quiet(&j.ctx);
    rc_job_load(&j, model.path, max_ctx, RC_PREFILL_CHUNK);
    chat_env_add_tokenizer(&env, j.model->tok);

    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, n_ok = 0, n_err = 0, toks = 0;
    int failed = 0; /* rank 0: a read or a write failed (said); the next line stops every rank */
    const double t0 = ls_now_s();
    for (;;) {
        long long len = -2; /* -1: end of input; -2: stop, rank 0 failed */
        if (j.ctx.rank == 0 && !failed) {
            errno = 0;
            len = getline(&line, &cap, in);
            if (len < 0 && ferror(in)) {
                ls_error("batch: --input %s: read error after line %ld: %s", in_path, lineno,
                         strerror(errno));
                failed = 1;
                len = -2;
            }
        }
        if (len > BATCH_LINE_MAX) len = -3; /* an error for that line, not a broadcast */
        CHECK_MPI(MPI_Bcast(&len, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
        if (len == -2) failed = 1;
        const int too_long = len == -3; /* an error result for the line, nothing to send */
        if (len < 0 && !too_long) break;
        if (!too_long) {
            if (j.ctx.rank != 0 && (size_t)len + 1 > cap) {
                cap = (size_t)len + 1;
                line = realloc(line, cap);
                CHECK_ALLOC(line);
            }
            CHECK_MPI(MPI_Bcast(line, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD));
            line[len] = 0;
        }
        lineno++;
        /* blank lines (CRLF ends, spaces, tabs) are skipped, as empty ones are */
        while (len > 0 && line[len - 1] && strchr("\n\r \t", line[len - 1])) line[--len] = 0;
        if (len == 0) continue;

        json_error_t jerr;
        /* any JSON value, so that a number or a string is named as what it is */
        json_t *req = too_long ? NULL
                               : json_loadb(line, (size_t)len,
                                            JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        json_t *id = req ? json_object_get(req, "id") : NULL;
        json_t *res = json_object();
        json_object_set(res, "id", id ? id : json_null());
        struct ls_gen_params p;
        int n_choices = 1, return_ids = 0;
        int *ids = NULL, n_ids = 0;
        int good = 1;
        if (too_long) {
            snprintf(err, sizeof err,
                     "line %ld: over %d MiB; a request is one line, of at most %d positions",
                     lineno, BATCH_LINE_MAX >> 20, RC_MAX_CONTEXT);
            good = 0;
        } else if (!req) {
            snprintf(err, sizeof err, "line %ld: not JSON: %s (column %d)", lineno, jerr.text,
                     jerr.column);
            good = 0;
        } else if (!json_is_object(req)) {
            snprintf(err, sizeof err, "line %ld: expected a JSON object, found %s", lineno,
                     ls_json_type_name(req));
            good = 0;
        } else {
            char e2[900];
            if (j.ctx.rank == 0 && ignored_fields(req, e2, sizeof e2))
                ls_warn("batch: line %ld: ignored fields (not read by lockstep): %s", lineno, e2);
            if (request_params(req, &dflt, &p, &n_choices, &return_ids, e2, sizeof e2) != 0 ||
                request_ids(j.model, &env, req, chat, &ids, &n_ids, e2, sizeof e2) != 0) {
                snprintf(err, sizeof err, "line %ld: %s", lineno, e2);
                good = 0;
            }
        }
        /* n completions: the i-th drawn with seed + i (the prompt's log-probabilities once), all
         * from one prefill of the prompt; the first's fields at the top of the result, all of
         * them in "choices" when n > 1 */
        json_t *choices = n_choices > 1 ? json_array() : NULL;
        struct ls_prefill_reuse reuse = {0};
        if (n_choices > 1) {
            reuse.logits = malloc((size_t)j.model->cfg.vocab * sizeof *reuse.logits);
            CHECK_ALLOC(reuse.logits);
        }
        for (int c = 0; good && c < n_choices; c++) {
            struct ls_gen_params pc = p;
            pc.sampling.seed = p.sampling.seed + (uint64_t)c;
            if (c > 0) pc.prompt_logprobs = 0;
            if (n_choices > 1) pc.reuse = &reuse;
            struct ls_gen_result r;
            char e2[900];
            if (ls_generate(j.engine, j.model, ids, n_ids, &pc, &r, e2, sizeof e2) != 0) {
                snprintf(err, sizeof err, "line %ld: %s", lineno, e2);
                good = 0;
                break;
            }
            json_t *lp = ls_logprobs_json(j.model->tok, &r, &pc);
            /* without a tokenizer there is no text: the ids are the result */
            json_t *text = j.model->tok ? json_string(r.text) : json_null();
            json_t *gen_ids = NULL;
            if (return_ids || !j.model->tok) {
                gen_ids = ls_json_ids(r.ids, r.n_gen);
                CHECK_ALLOC(gen_ids);
            }
            if (c == 0) {
                if (return_ids) {
                    json_t *pids = ls_json_ids(ids, n_ids);
                    CHECK_ALLOC(pids);
                    json_object_set_new(res, "prompt_token_ids", pids);
                }
                json_object_set(res, "text", text);
                if (gen_ids) json_object_set(res, "token_ids", gen_ids);
                json_object_set_new(res, "prompt_tokens", json_integer(r.n_prompt));
                json_object_set_new(res, "completion_tokens", json_integer(r.n_gen));
                json_object_set_new(res, "finish_reason", json_string(r.finish));
                if (lp) json_object_set(res, "logprobs", lp);
                json_t *plp = ls_prompt_logprobs_json(j.model->tok, ids, &r, &pc);
                if (plp) json_object_set_new(res, "prompt_logprobs", plp);
            }
            if (choices) {
                json_t *ch = json_pack("{s:i, s:O, s:i, s:s}", "index", c, "text", text,
                                       "completion_tokens", r.n_gen, "finish_reason", r.finish);
                CHECK_ALLOC(ch);
                if (gen_ids) json_object_set(ch, "token_ids", gen_ids);
                if (lp) json_object_set(ch, "logprobs", lp);
                json_array_append_new(choices, ch);
            }
            json_decref(gen_ids);
            json_decref(text);
            json_decref(lp);
            toks += r.n_gen;
            ls_gen_result_free(&r);
        }
        if (good) {
            if (choices) json_object_set(res, "choices", choices);
            n_ok++;
        } else {
            json_object_set_new(res, "error", json_string(err));
            n_err++;
        }
        if (j.ctx.rank == 0 && write_line(out, res) != 0) {
            ls_error("batch: --output %s: cannot write the result of line %ld: %s", out_path,
                     lineno, strerror(errno));
            failed = 1;
        }
        json_decref(choices);
        json_decref(res);
        json_decref(req);
        free(ids);
        free(reuse.logits);
    }
    const double dt = ls_now_s() - t0;
    if (j.ctx.rank == 0) {
        if (close_files(in, out, out_path, failed) != 0) failed = 1;
        /* the decode graphs: one per sampling setting, updated in place where it can be */
        const struct ls_graph_stats g = ls_engine_graph_stats(j.engine);
        char graphs[160] = "", ahead[80] = "";
        if (g.built + g.updated > 0)
            snprintf(graphs, sizeof graphs,
                     "; decode graphs: %d built, %d updated in place, %.1f ms", g.built, g.updated,
                     g.seconds * 1e3);
        if (g.ahead_taken + g.ahead_dropped > 0)
            snprintf(ahead, sizeof ahead, "; steps issued ahead: %d taken, %d dropped",
                     g.ahead_taken, g.ahead_dropped);
        if (!failed)
            fprintf(stderr,
                    "lockstep: batch: %ld lines, %ld done, %ld errors, %ld tokens generated in "
                    "%.2f s%s%s\n",
                    n_ok + n_err, n_ok, n_err, toks, dt, graphs, ahead);
    }
    /* a failed final flush is known to rank 0 only */
    int ok = ls_agree(!failed);
    free(line);
    free(template_buf);
    json_decref(kwargs);
    rc_job_end(&j);
    return ok ? 0 : 1;
}
