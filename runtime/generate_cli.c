/* lockstep generate: one prompt, text streamed on rank 0's stdout as it is generated, timing on
 * stderr. Every rank reads the same prompt (stdin is read by rank 0 and broadcast), encodes it
 * the same way and runs the same steps. --json prints one object instead, with the ids (and the
 * top logits of the first steps, for comparisons with a reference). */
#include "config.h"
#include "args.h"
#include "chat.h"
#include "check.h"
#include "commands.h"
#include "json_util.h"
#include "log.h"
#include "run_common.h"
#include "tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_CHAT = 1300,
    OPT_SYSTEM,
    OPT_PROMPT_IDS,
    OPT_JSON,
    OPT_TOP_LOGITS,
    OPT_TOP_STEPS,
    OPT_LOGPROBS,
    OPT_PROMPT_LOGPROBS,
    OPT_QUIET,
    OPT_CHAT_TEMPLATE,
    OPT_CHAT_KWARGS,
    OPT_TOOLS
};

static const char generate_help[] =
    "usage: lockstep generate -m MODEL -p PROMPT [-n N] [sampling flags] [--chat [--system S]\n"
    "       [--chat-template FILE] [--chat-template-kwargs JSON] [--tools FILE]]\n"
    "Run under mpirun (one rank per GPU, or CPU ranks): rank 0 streams the text to stdout and\n"
    "the timing to stderr.\n"
    "  -m, --model PATH     a .gguf file, or a folder with config.json + *.safetensors\n"
    "  --dummy PRESET|FILE  random weights (seeded) of a preset shape (llama-3.1-8b, "
    "llama-3.1-70b,\n"
    "                       qwen2.5-7b, smollm2-135m) or of a config.json; no checkpoint needed\n"
    "  -p, --prompt TEXT    the prompt; '-' reads it from stdin\n"
    "  --prompt-ids LIST    the prompt as token ids, \"1,2,3\" (models without a tokenizer)\n"
    "  -n, --max-tokens N   tokens to generate at most (default 256)\n"
    "  --chat               wrap the prompt in the model's chat template (as the user turn)\n"
    "  --system S           system message for --chat\n"
    "  --chat-template FILE a Jinja chat template to use instead of the model's\n"
    "  --chat-template-kwargs JSON  extra template variables, e.g. '{\"enable_thinking\": false}'\n"
    "  --tools FILE         a JSON list of tool schemas (OpenAI-style) for the chat template;\n"
    "                       the model's \"tool_use\" template renders it where it has one\n"
    "  --json               print one JSON object (ids, text, timing) instead of streaming\n"
    "  --top-logits K       with --json: the top K logits of each of the first steps\n"
    "  --top-logit-steps S  ... of the first S steps (default 4)\n"
    "  --logprobs N         with --json: each generated token's log-probability and those of\n"
    "                       the N (0..20) most likely tokens at its step (the model's\n"
    "                       distribution: before temperature, penalties and truncation)\n"
    "  --prompt-logprobs N  with --json: each prompt token's log-probability given the ones\n"
    "                       before it, and the N (0..20) most likely at its position\n"
    "  --quiet              no timing line\n" RC_SAMPLING_HELP LS_COMMON_HELP;

/* The prompt as ids: chat-templated and/or encoded with the model's tokenizer. */
static int prompt_ids(const struct ls_model *m, const char *prompt, int chat, const char *system,
                      const struct chat_env *env, const json_t *tools, int **out, int *n, char *err,
                      size_t errlen)
{
    if (!m->tok) {
        snprintf(err, errlen, "%.900s has no tokenizer: give the prompt as --prompt-ids", m->path);
        return -1;
    }
    char *text = NULL;
    if (chat) {
        struct chat_msg msgs[2];
        int k = 0;
        if (system) msgs[k++] = (struct chat_msg){.role = "system", .content = system};
        msgs[k++] = (struct chat_msg){.role = "user", .content = prompt};
        struct chat_turn turn = {.add_generation_prompt = 1, .tools = tools};
        if (chat_render_turn(env, msgs, k, &turn, &text, err, errlen) < 0) return -1;
    }
    const char *src = text ? text : prompt;
    size_t len = strlen(src);
    /* chat text holds the template's special tokens; a plain prompt is plain text */
    int rc = rc_encode(m->tok, src, len, !chat, chat, out, n, err, errlen);
    free(text);
    return rc;
}

static void print_json(const struct rc_job *j, const int *prompt, int n_prompt,
                       const struct ls_gen_result *r, const struct ls_gen_params *p)
{
    json_t *o = json_object();
    json_object_set_new(o, "prompt_ids", ls_json_ids(prompt, n_prompt));
    json_object_set_new(o, "ids", ls_json_ids(r->ids, r->n_gen));
    json_object_set_new(o, "text", json_string(r->text));
    json_object_set_new(o, "finish_reason", json_string(r->finish));
    json_object_set_new(o, "prompt_tokens", json_integer(r->n_prompt));
    json_object_set_new(o, "generated_tokens", json_integer(r->n_gen));
    json_object_set_new(o, "tp", json_integer(j->ctx.size));
    json_object_set_new(o, "backend", json_string(j->be->name));
    json_object_set_new(o, "prefill_s", json_real(r->prefill_s));
    json_object_set_new(o, "decode_s", json_real(r->decode_s));
    json_object_set_new(o, "ttft_s", json_real(r->ttft_s));
    json_object_set_new(o, "warmup_s", json_real(j->warmup_s));
    if (r->top_steps) {
        json_t *steps = json_array();
        for (int s = 0; s < r->top_steps; s++) {
            json_t *ids = json_array(), *vals = json_array();
            for (int k = 0; k < p->top_logits; k++) {
                if (r->top_ids[s * p->top_logits + k] < 0) break;
                json_array_append_new(ids, json_integer(r->top_ids[s * p->top_logits + k]));
                json_array_append_new(vals, json_real(r->top_vals[s * p->top_logits + k]));
            }
            json_array_append_new(steps, json_pack("{s:o, s:o}", "ids", ids, "logits", vals));
        }
        json_object_set_new(o, "top_logits", steps);
    }
    json_t *lp = ls_logprobs_json(j->model->tok, r, p);
    if (lp) json_object_set_new(o, "logprobs", lp);
    json_t *plp = ls_prompt_logprobs_json(j->model->tok, prompt, r, p);
    if (plp) json_object_set_new(o, "prompt_logprobs", plp);
    json_dumpf(o, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(o);
}

int cmd_generate(int argc, char **argv)
{
    static const struct option longopts[] = {
        RC_MODEL_LONGOPTS,
        {"prompt", required_argument, NULL, 'p'},
        {"max-tokens", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {"chat", no_argument, NULL, OPT_CHAT},
        {"system", required_argument, NULL, OPT_SYSTEM},
        {"chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE},
        {"chat-template-kwargs", required_argument, NULL, OPT_CHAT_KWARGS},
        {"tools", required_argument, NULL, OPT_TOOLS},
        {"prompt-ids", required_argument, NULL, OPT_PROMPT_IDS},
        {"json", no_argument, NULL, OPT_JSON},
        {"top-logits", required_argument, NULL, OPT_TOP_LOGITS},
        {"top-logit-steps", required_argument, NULL, OPT_TOP_STEPS},
        {"logprobs", required_argument, NULL, OPT_LOGPROBS},
        {"prompt-logprobs", required_argument, NULL, OPT_PROMPT_LOGPROBS},
        {"quiet", no_argument, NULL, OPT_QUIET},
        RC_SAMPLING_LONGOPTS,
        LS_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0}};
    struct ls_common_opts common;
    ls_common_defaults(&common);
    struct ls_gen_params gp;
    ls_gen_defaults(&gp);
    gp.top_logit_steps = 4;
    struct rc_model_arg model = {0};
    const char *prompt = NULL, *ids_arg = NULL, *system = NULL;
    const char *template_path = NULL, *kwargs_text = NULL, *tools_path = NULL;
    int chat = 0, json = 0, quiet = 0, max_ctx = 0, reset = 1, opt, rc;
    long v;
    char err[1024];
    while ((opt = ls_getopt(argc, argv, "m:p:n:h", longopts, &reset, err, sizeof err)) != -1) {
        if (rc_model_opt(opt, optarg, &model)) continue;
        switch (opt) {
        case 'p':
            prompt = optarg;
            break;
        case 'n':
            if (ls_parse_long("--max-tokens", optarg, 0, 1 << 24, &v, err, sizeof err))
                return ls_usage_error("generate", err);
            gp.max_tokens = (int)v;
            break;
        case 'h':
            ls_print0("%s", generate_help);
            return 0;
        case OPT_CHAT:
            chat = 1;
            break;
        case OPT_SYSTEM:
            system = optarg;
            break;
        case OPT_CHAT_TEMPLATE:
            template_path = optarg;
            break;
        case OPT_CHAT_KWARGS:
            kwargs_text = optarg;
            break;
        case OPT_TOOLS:
            tools_path = optarg;
            break;
        case OPT_PROMPT_IDS:
            ids_arg = optarg;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case OPT_QUIET:
            quiet = 1;
            break;
        case OPT_TOP_LOGITS:
            if (ls_parse_long("--top-logits", optarg, 0, 1 << 22, &v, err, sizeof err))
                return ls_usage_error("generate", err);
            gp.top_logits = (int)v;
            break;
        case OPT_TOP_STEPS:
            if (ls_parse_long("--top-logit-steps", optarg, 0, 1 << 20, &v, err, sizeof err))
                return ls_usage_error("generate", err);
            gp.top_logit_steps = (int)v;
            break;
        case OPT_LOGPROBS:
            if (ls_parse_long("--logprobs", optarg, 0, LS_MAX_TOP_LOGPROBS, &v, err, sizeof err))
                return ls_usage_error("generate", err);
            gp.logprobs = 1;
            gp.top_logprobs = (int)v;
            break;
        case OPT_PROMPT_LOGPROBS:
            if (ls_parse_long("--prompt-logprobs", optarg, 0, LS_MAX_TOP_LOGPROBS, &v, err,
                              sizeof err))
                return ls_usage_error("generate", err);
            gp.prompt_logprobs = 1;
            gp.top_prompt_logprobs = (int)v;
            break;
        case '?':
            return ls_usage_error("generate", err);
        default:
            rc = rc_sampling_opt(opt, optarg, &gp, &max_ctx, err, sizeof err);
            if (rc == 1) rc = ls_common_opt(opt, optarg, &common, err, sizeof err);
            if (rc != 0) return ls_usage_error("generate", err);
        }
    }
    if (optind < argc) {
        snprintf(err, sizeof err, "unexpected argument '%s' (quote the prompt: -p \"...\")",
                 argv[optind]);
        return ls_usage_error("generate", err);
    }
    if (!model.path) return ls_usage_error("generate", "missing --model (-m) or --dummy");
    if (!prompt == !ids_arg)
        return ls_usage_error("generate", "give exactly one of --prompt (-p) and --prompt-ids");
    if (ids_arg && chat)
        return ls_usage_error("generate", "--chat needs a text prompt, not --prompt-ids");
    if (system && !chat) return ls_usage_error("generate", "--system needs --chat");
    if ((template_path || kwargs_text || tools_path) && !chat)
        return ls_usage_error("generate", template_path ? "--chat-template needs --chat"
                                          : kwargs_text ? "--chat-template-kwargs needs --chat"
                                                        : "--tools needs --chat");
    if (gp.top_logits && !json)
        return ls_usage_error("generate",
                              "--top-logits needs --json (the logits are written there)");
    if ((gp.logprobs || gp.prompt_logprobs) && !json)
        return ls_usage_error("generate", gp.logprobs ? "--logprobs needs --json (the "
                                                        "log-probabilities are written there)"
                                                      : "--prompt-logprobs needs --json (the "
                                                        "log-probabilities are written there)");
    /* the template file and kwargs, read once; a bad one is said before the model loads */
    struct chat_env env = {0};
    char *template_buf = NULL;
    json_t *kwargs = NULL;
    json_t *tools = NULL;
    if (chat_env_load(&env, template_path, kwargs_text, &template_buf, &kwargs, err, sizeof err) ||
        (tools_path && chat_tools_load(tools_path, &tools, err, sizeof err))) {
        free(template_buf);
        json_decref(kwargs);
        return ls_usage_error("generate", err);
    }

    struct rc_job j;
    rc_job_start(&j, &argc, &argv, &common, model.path, max_ctx, RC_PREFILL_CHUNK);
    char *text = NULL;
    if (prompt && !strcmp(prompt, "-")) {
        size_t n = 0;
        if (j.ctx.rank == 0) text = rc_read_all(stdin, &n);
        text = rc_bcast_string(text, &n);
        prompt = text;
    }
    chat_env_add_tokenizer(&env, j.model->tok);
    int *ids = NULL, n_ids = 0;
    int ok = (ids_arg ? rc_parse_ids("--prompt-ids", ids_arg, &ids, &n_ids, err, sizeof err)
                      : prompt_ids(j.model, prompt, chat, system, &env, tools, &ids, &n_ids, err,
                                   sizeof err)) == 0;
    if (!ok && j.ctx.rank == 0) ls_error("generate: %s", err);
    if (!ls_agree(ok)) ls_abort_quiet(&j.ctx);
    gp.stream = j.ctx.rank == 0 && !json ? stdout : NULL;
    if (!json) gp.top_logits = 0;
    struct ls_gen_result r;
    ok = ls_generate(j.engine, j.model, ids, n_ids, &gp, &r, err, sizeof err) == 0;
    if (!ok && j.ctx.rank == 0) ls_error("generate: %s", err);
    if (!ls_agree(ok)) ls_abort_quiet(&j.ctx);
    if (j.ctx.rank == 0) {
        if (json)
            print_json(&j, ids, n_ids, &r, &gp);
        else
            printf("\n");
        fflush(stdout);
        if (!quiet)
            fprintf(
                stderr,
                "lockstep: %d ranks (%s): prompt %d tokens in %.3f s (%.1f tok/s); first "
                "token at %.3f s; generated %d tokens in %.3f s (%.2f tok/s); finish: %s\n",
                j.ctx.size, j.be->name, r.n_prompt, r.prefill_s,
                r.n_prompt / (r.prefill_s > 0 ? r.prefill_s : 1e-9), r.ttft_s, r.n_gen, r.decode_s,
                r.n_gen > 1 ? (r.n_gen - 1) / (r.decode_s > 0 ? r.decode_s : 1e-9) : 0.0, r.finish);
    }
    ls_gen_result_free(&r);
    free(ids);
    free(text);
    free(template_buf);
    json_decref(kwargs);
    json_decref(tools);
    rc_job_end(&j);
    return 0;
}
