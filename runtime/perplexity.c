/* lockstep perplexity: how well a model predicts a text, the check a quantized or converted
 * checkpoint is held to (llama.cpp's llama-perplexity, Hugging Face's perplexity guide).
 *
 * The text's tokens (with the tokenizer's BOS when it adds one) are cut into windows of --ctx
 * tokens, one starting every --stride tokens (default: --ctx, no overlap), the last one
 * shorter; each window runs from an empty context, and each token of a window is scored by the
 * model given the ones before it in the window: nll = logsumexp(logits) - logit(token), in
 * double. A token is scored once: where windows overlap, by the first window past the tokens
 * an earlier one scored (Hugging Face's strided evaluation), and never from fewer than
 * --score-from tokens of its window (llama-perplexity scores each window's second half:
 * --score-from ctx/2). Perplexity = exp(mean nll) over all scored tokens, with its standard
 * error from the nll's spread (exp(mean) * sd / sqrt(n), as llama-perplexity prints it).
 * --llama-cpp runs llama-perplexity's own cut (whole windows only, each starting from BOS where
 * the tokenizer adds one, the second half scored), so the two figures can be compared; the
 * tests compare them on SmolLM2 (tests/fixtures/perplexity). */
#include "config.h"
#include "args.h"
#include "check.h"
#include "commands.h"
#include "engine.h"
#include "generate.h"
#include "log.h"
#include "model.h"
#include "run_common.h"
#include "tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_PROMPT_IDS = LS_OPT_FIRST_FREE,
    OPT_CTX,
    OPT_STRIDE,
    OPT_SCORE_FROM,
    OPT_WHOLE,
    OPT_WINDOW_BOS,
    OPT_LLAMA_CPP,
    OPT_JSON
};

static const char help[] =
    "usage: lockstep perplexity (-m MODEL | --dummy PRESET) (-f FILE | --prompt-ids LIST)\n"
    "       [--ctx N] [--stride S] [--score-from K] [--whole-windows] [--window-bos]\n"
    "       [--llama-cpp] [--json]\n"
    "Perplexity of a text: its tokens cut into windows of --ctx tokens, each run from an empty\n"
    "context, each token scored once given the ones before it in its window. Prints the running\n"
    "perplexity per window on stderr, then the result on stdout.\n"
    "  -m, --model PATH     a .gguf file, or a folder with config.json + *.safetensors\n"
    "  --dummy PRESET|FILE  random weights of a preset shape (see generate)\n"
    "  -f, --file FILE      the text ('-' for stdin), tokenized with the tokenizer's BOS\n"
    "  --prompt-ids LIST    the tokens as ids, \"1,2,3\" (models without a tokenizer)\n"
    "  --ctx N              tokens per window (default 512; at least 2)\n"
    "  --stride S           a window every S tokens (1..ctx; default ctx: no overlap); each\n"
    "                       scores the tokens past the previous window's end (Hugging Face's\n"
    "                       strided perplexity: more context a token, more windows)\n"
    "  --score-from K       score only tokens with at least K of their window before them\n"
    "                       (0..ctx-2, default 0; llama-perplexity scores from ctx/2)\n"
    "  --whole-windows      only windows of --ctx tokens: the tokens past the last whole one\n"
    "                       are not scored (llama-perplexity's chunks)\n"
    "  --window-bos         each window's first token replaced by BOS (the tokenizer's, else\n"
    "                       the config's bos_token_id), as llama-perplexity does when its\n"
    "                       tokenizer adds one\n"
    "  --llama-cpp          as llama-perplexity -c N: --whole-windows, --score-from ctx/2\n"
    "                       (unless given), --window-bos when the tokenizer adds BOS, and a\n"
    "                       file's one final newline dropped; not with --stride\n"
    "  --json               one JSON object: tokens, windows, nll, perplexity and its error, and\n"
    "                       each window's start, scored tokens and nll\n" LS_COMMON_HELP;

/* one window's scoring, fed each position's scores: the predictions from position first on
 * (of the tokens after them) */
struct window {
    const int *ids;
    int n, first;
    double sum, sum2; /* of the scored tokens' nll */
    int scored;
};

static void score(void *ctx, int t, const struct ls_scores *s)
{
    struct window *w = ctx;
    if (t < w->first || t + 1 >= w->n) return; /* scored elsewhere, or predicts nothing here */
    const double nll = s->lse - s->target;
    w->sum += nll;
    w->sum2 += nll * nll;
    w->scored++;
}

int cmd_perplexity(int argc, char **argv)
{
    static const struct option longopts[] = {
        RC_MODEL_LONGOPTS,
        {"file", required_argument, NULL, 'f'},
        {"prompt-ids", required_argument, NULL, OPT_PROMPT_IDS},
        {"ctx", required_argument, NULL, OPT_CTX},
        {"stride", required_argument, NULL, OPT_STRIDE},
        {"score-from", required_argument, NULL, OPT_SCORE_FROM},
        {"whole-windows", no_argument, NULL, OPT_WHOLE},
        {"window-bos", no_argument, NULL, OPT_WINDOW_BOS},
        {"llama-cpp", no_argument, NULL, OPT_LLAMA_CPP},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        LS_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0}};
    struct ls_common_opts common;
    ls_common_defaults(&common);
    struct rc_model_arg model = {0};
    const char *file = NULL, *ids_arg = NULL;
    int ctx = 512, stride = 0, score_from = -1, json = 0, reset = 1, opt, rc;
    int whole = 0, window_bos = 0, llama_cpp = 0;
    long v;
    char err[1024];
    while ((opt = ls_getopt(argc, argv, "m:f:h", longopts, &reset, err, sizeof err)) != -1) {
        if (rc_model_opt(opt, optarg, &model)) continue;
        switch (opt) {
        case 'f':
            file = optarg;
            break;
        case OPT_PROMPT_IDS:
            ids_arg = optarg;
            break;
        case OPT_CTX:
            if (ls_parse_long("--ctx", optarg, 2, RC_MAX_CONTEXT, &v, err, sizeof err))
                return ls_usage_error("perplexity", err);
            ctx = (int)v;
            break;
        case OPT_STRIDE:
            if (ls_parse_long("--stride", optarg, 1, RC_MAX_CONTEXT, &v, err, sizeof err))
                return ls_usage_error("perplexity", err);
            stride = (int)v;
            break;
        case OPT_SCORE_FROM:
            if (ls_parse_long("--score-from", optarg, 0, RC_MAX_CONTEXT, &v, err, sizeof err))
                return ls_usage_error("perplexity", err);
            score_from = (int)v;
            break;
        case OPT_WHOLE:
            whole = 1;
            break;
        case OPT_WINDOW_BOS:
            window_bos = 1;
            break;
        case OPT_LLAMA_CPP:
            llama_cpp = 1;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case 'h':
            ls_print0("%s", help);
            return 0;
        case '?':
            return ls_usage_error("perplexity", err);
        default:
            rc = ls_common_opt(opt, optarg, &common, err, sizeof err);
            if (rc != 0) return ls_usage_error("perplexity", err);
        }
    }
    if (optind < argc) {
        snprintf(err, sizeof err, "unexpected argument '%s'", argv[optind]);
        return ls_usage_error("perplexity", err);
    }
    if (!model.path) return ls_usage_error("perplexity", "missing --model (-m) or --dummy");
    if (!file == !ids_arg)
        return ls_usage_error("perplexity", "give exactly one of --file (-f) and --prompt-ids");
    if (llama_cpp && stride) {
        snprintf(err, sizeof err,
                 "--llama-cpp runs llama-perplexity's windows, which do not overlap: not with "
                 "--stride %d",
                 stride);
        return ls_usage_error("perplexity", err);
    }
    if (llama_cpp) {
        whole = 1;
        if (score_from < 0) score_from = ctx / 2;
    }
    if (score_from < 0) score_from = 0;
    if (stride == 0) stride = ctx;
    if (stride > ctx) {
        snprintf(err, sizeof err, "--stride %d is past --ctx %d: windows would skip tokens", stride,
                 ctx);
        return ls_usage_error("perplexity", err);
    }
    if (score_from > ctx - 2) {
        snprintf(err, sizeof err,
                 "--score-from %d leaves no token of a %d-token window to score (at most %d)",
                 score_from, ctx, ctx - 2);
        return ls_usage_error("perplexity", err);
    }

    struct rc_job j;
    rc_job_start(&j, &argc, &argv, &common, model.path, ctx, RC_PREFILL_CHUNK);
    int *ids = NULL, n = 0, ok = 1;
    if (ids_arg) {
        ok = rc_parse_ids("--prompt-ids", ids_arg, &ids, &n, err, sizeof err) == 0;
    } else {
        /* rank 0 reads the file (it may exist on its node only) and every rank gets the bytes */
        char *text = NULL;
        size_t len = 0;
        int readable = 1;
        if (j.ctx.rank == 0) {
            FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
            if (!f)
                readable = 0;
            else {
                text = rc_read_all(f, &len);
                if (f != stdin) fclose(f);
            }
        }
        CHECK_MPI(MPI_Bcast(&readable, 1, MPI_INT, 0, MPI_COMM_WORLD));
        if (!readable) {
            snprintf(err, sizeof err, "--file %.900s: cannot read it", file);
            ok = 0;
        } else if (!j.model->tok) {
            snprintf(err, sizeof err, "%.900s has no tokenizer: give the text as --prompt-ids",
                     j.model->path);
            ok = 0;
            if (j.ctx.rank == 0) free(text);
        } else {
            text = rc_bcast_string(text, &len); /* rank 0's bytes and length, for every rank */
            /* llama-perplexity's -f drops one final newline */
            if (llama_cpp && len > 0 && text[len - 1] == '\n') len--;
            ok = rc_encode(j.model->tok, text, len, 1, 0, &ids, &n, err, sizeof err) == 0;
            free(text);
        }
    }
    /* the id each window starts with under --window-bos (llama-cpp: where the tokenizer adds
     * one, as llama-perplexity asks its vocabulary) */
    const struct tokenizer *tok = j.model->tok;
    if (llama_cpp && tok && tok_add_bos(tok)) window_bos = 1;
    const int bos = tok && tok_bos(tok) >= 0 ? tok_bos(tok) : j.model->cfg.bos_id;
    if (ok && window_bos && bos < 0) {
        snprintf(err, sizeof err,
                 "--window-bos: %.900s has no BOS token (neither the tokenizer nor the config's "
                 "bos_token_id names one)",
                 j.model->path);
        ok = 0;
    }
    const int V = j.model->cfg.vocab;
    for (int i = 0; ok && i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) {
            snprintf(err, sizeof err, "token %d: id %d is outside the vocabulary [0, %d)", i, ids[i],
                     V);
            ok = 0;
        }
    if (ok && whole && n < ctx) {
        snprintf(err, sizeof err,
                 "the text has %d token%s: not one whole window of --ctx %d (--whole-windows)", n,
                 n == 1 ? "" : "s", ctx);
        ok = 0;
    }
    if (ok && n < score_from + 2) {
        snprintf(err, sizeof err,
                 "the text has %d token%s: nothing to score (at least %d with --score-from %d)", n,
                 n == 1 ? "" : "s", score_from + 2, score_from);
        ok = 0;
    }
    if (!ok && j.ctx.rank == 0) ls_error("perplexity: %s", err);
    if (!ls_agree(ok)) ls_abort_quiet(&j.ctx);

    float *logits = malloc((size_t)V * sizeof *logits);
    int *wids = window_bos ? malloc((size_t)ctx * sizeof *wids) : NULL;
    CHECK_ALLOC(logits);
    if (window_bos) CHECK_ALLOC(wids);
    json_t *windows = json_array();
    CHECK_ALLOC(windows);
    double sum = 0.0, sum2 = 0.0;
    long scored = 0;
    const double t0 = ls_now_s();
    int nw = 0;
    /* tokens [0, done_to) are scored or cannot be (the first has no context) */
    for (int at = 0, done_to = 1; done_to < n; at += stride) {
        const int end = n - at < ctx ? n : at + ctx;
        if (whole && end - at < ctx) break; /* the tail past the last whole window */
        struct window w = {.ids = ids + at, .n = end - at, .first = done_to - 1 - at};
        if (window_bos) {
            memcpy(wids, ids + at, (size_t)w.n * sizeof *wids);
            wids[0] = bos;
            w.ids = wids;
        }
        if (w.first < score_from) w.first = score_from;
        if (w.first + 1 >= w.n) { /* a last window with nothing left to score in it */
            if (end == n) break;
            continue;
        }
        ls_engine_reset(j.engine);
        ok = ls_engine_score(j.engine, w.ids, w.n, 0, logits, score, &w, err, sizeof err) == 0;
        if (!ok && j.ctx.rank == 0) ls_error("perplexity: %s", err);
        if (!ok) ls_abort_quiet(&j.ctx); /* every rank has the same answer */
        sum += w.sum;
        sum2 += w.sum2;
        scored += w.scored;
        done_to = end;
        nw++;
        json_array_append_new(windows, json_pack("{s:i, s:i, s:f}", "start", at, "scored",
                                                 w.scored, "nll", w.sum / w.scored));
        if (j.ctx.rank == 0 && !json)
            fprintf(stderr, "%s[%d]%.4f", nw > 1 ? " " : "", nw, exp(sum / (double)scored));
    }
    if (j.ctx.rank == 0 && !json && nw > 0) fprintf(stderr, "\n");
    const double dt = ls_now_s() - t0;
    const double mean = sum / (double)scored;
    const double var = scored > 1 ? (sum2 / (double)scored - mean * mean) * scored / (scored - 1) : 0;
    const double ppl = exp(mean), ppl_err = ppl * sqrt(var > 0 ? var : 0) / sqrt((double)scored);
    if (j.ctx.rank == 0) {
        if (json) {
            json_t *o = json_pack(
                "{s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:i, s:f, s:f, s:f, s:f, s:o}", "tokens", n,
                "scored", (int)scored, "ctx", ctx, "stride", stride, "score_from", score_from,
                "whole_windows", whole, "window_bos", window_bos, "windows_run", nw, "nll", mean,
                "perplexity", ppl, "perplexity_error", ppl_err, "seconds", dt, "windows", windows);
            CHECK_ALLOC(o);
            json_dumpf(o, stdout, JSON_COMPACT);
            printf("\n");
            json_decref(o);
            windows = NULL;
        } else {
            printf("perplexity: %.4f +/- %.4f (mean nll %.6f) over %ld tokens in %d windows of "
                   "%s%d (stride %d, scored from %d%s)\n",
                   ppl, ppl_err, mean, scored, nw, whole ? "" : "up to ", ctx, stride, score_from,
                   window_bos ? ", each window from BOS" : "");
        }
        fflush(stdout);
        fprintf(stderr, "lockstep: %d ranks (%s): %d tokens in %.2f s (%.1f tok/s)\n", j.ctx.size,
                j.be->name, n, dt, n / (dt > 0 ? dt : 1e-9));
    }
    json_decref(windows);
    free(logits);
    free(wids);
    free(ids);
    rc_job_end(&j);
    return 0;
}
