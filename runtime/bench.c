/* lockstep bench: how close a decode step comes to the memory roofline, measured in one run.
 * First the backend's own read and copy bandwidth (a streaming read of >= 4 GiB on a GPU), then
 * prefill tokens/s and decode ms/token over --gen steps after a warm-up, then the same decode
 * with a null communicator, whose difference is the all-reduce share of the step. The bytes a
 * decode step must read are the rank's weights (all but the embedding table, of which one row
 * is read) plus its KV cache up to the position; roofline tokens/s = read bandwidth / bytes.
 * The random prompt and the greedy decode are seeded, so two runs do the same work. */
#include "config.h"
#include "args.h"
#include "backend.h"
#include "check.h"
#include "commands.h"
#include "ktrace.h"
#include "log.h"
#include "run_common.h"
#include "sampler.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_PROMPT_LEN = 1500,
    OPT_GEN,
    OPT_BATCH,
    OPT_JSON,
    OPT_BW_BYTES,
    OPT_WARMUP,
    OPT_SWEEP,
    OPT_SWEEP_MAX,
    OPT_MAX_CTX,
    OPT_KTIMES,
};

static const char bench_help[] =
    "usage: lockstep bench (-m MODEL | --dummy PRESET) [--prompt-len P] [--gen N] [--batch 1] "
    "[--max-context N] [--json FILE]\n"
    "Measures the read roofline, prefill tokens/s and decode ms/token in one run, on every rank;\n"
    "rank 0 prints a table.\n"
    "  -m, --model PATH     a .gguf file, or a folder with config.json + *.safetensors\n"
    "  --dummy PRESET|FILE  random weights of a preset shape (llama-3.1-8b, llama-3.1-70b,\n"
    "                       qwen2.5-7b, smollm2-135m) or of a config.json\n"
    "  --prompt-len P       prompt tokens (default 128)\n"
    "  --gen N              timed decode steps (default 256)\n"
    "  --warmup N           untimed decode steps first (default 16)\n"
    "  --batch B            sequences per step; only 1 is supported\n"
    "  --max-context N      KV cache positions (default: the prompt, warm-up and timed steps, +1;\n"
    "                       generate's default is 4096, which splits the decode attention\n"
    "                       otherwise)\n"
    "  --bw-bytes N         bytes for the bandwidth measurement (default 4 GiB on GPUs, 512 MiB on "
    "CPUs)\n"
    "  --json FILE          also write the results as JSON\n"
    "  --kernel-times       GPUs: then decode the same steps again under CUPTI's kernel records\n"
    "                       and print where a step's time goes, kernel by kernel (each kernel's\n"
    "                       end minus the previous one's: the step's time, exactly, PDL overlaps\n"
    "                       and all); LOCKSTEP_CUPTI=PATH names libcupti\n"
    "  --allreduce-sweep    instead: all-reduce latency per message size (1 KB .. --sweep-max),\n"
    "                       each communicator of the job eager and (on GPUs) in a CUDA graph\n"
    "  --sweep-max BYTES    largest message of the sweep (default 64 MiB)\n"
    "  --temperature F, --top-k N, --top-p F, --min-p F\n"
    "  --repeat-penalty F, --presence-penalty F, --frequency-penalty F, --repeat-last-n N\n"
    "  --logit-bias ID=B, --allowed-token-ids LIST\n"
    "                       time sampled or penalised decode (the draw, the bias, the allowed\n"
    "                       tokens and the penalties inside the step) instead of "
    "greedy\n" LS_COMMON_HELP;

struct decode_run {
    double seconds; /* for the timed steps */
    int steps;
};

static double now_s(void)
{
    return MPI_Wtime();
}

/* decode of `steps` tokens after `warmup`, after the n-token prompt: the step as generate runs
 * it (a graph replay on GPUs, the penalties and the token's choice inside it, the token read
 * back each step): greedy, or drawn with sp's filters and a seeded host draw per step */
static struct decode_run timed_decode(struct rc_job *j, const struct ls_sampling *sp,
                                      const int *prompt, int n, int first, int warmup, int steps)
{
    struct decode_run r = {0, steps};
    struct ls_sampler *smp = ls_sampler_new(sp, j->model->cfg.vocab);
    int *hist = malloc((size_t)(n + warmup + steps) * sizeof *hist); /* the penalties' history */
    CHECK_ALLOC(smp);
    CHECK_ALLOC(hist);
    memcpy(hist, prompt, (size_t)n * sizeof *hist);
    int tok = first;
    /* the calls announced (ls_engine_plan) up to the timing's start, then the timed ones: no
     * step issued ahead crosses the start or runs past the end */
    ls_engine_plan(j->engine, warmup, smp);
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            j->be->sync();
            j->comm->barrier(j->comm);
            r.seconds = now_s();
            ls_engine_plan(j->engine, steps, smp);
        }
        hist[n + s] = tok;
        if (ls_engine_decode(j->engine, tok, sp, ls_sampler_uniform(smp), hist, &tok) != 0)
            ls_die(__FILE__, __LINE__, "ls_engine_decode", "context full during bench");
    }
    j->be->sync();
    r.seconds = now_s() - r.seconds;
    ls_sampler_free(smp);
    free(hist);
    return r;
}

/* warm timing, microseconds per all-reduce on the slowest rank: the mean of back-to-back
 * eager calls, or of a graph holding up to 20 of them replayed several times */
static double time_allreduce(struct rc_job *j, struct ls_comm *c, float *buf, size_t count,
                             int graph)
{
    const struct ls_backend *be = j->be;
    void *stream = be->stream ? be->stream() : NULL;
    size_t bytes = count * sizeof(float);
    int iters = bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 40 : 10;
    for (int i = 0; i < 3; i++) c->allreduce_sum(c, buf, count, LS_F32, stream);
    be->sync();
    double t;
    if (!graph) {
        c->barrier(c);
        t = now_s();
        for (int i = 0; i < iters; i++) c->allreduce_sum(c, buf, count, LS_F32, stream);
        be->sync();
        t = now_s() - t;
    } else {
        int per = iters < 20 ? iters : 20, reps = iters / per > 0 ? iters / per : 1;
        be->graph_begin();
        for (int i = 0; i < per; i++) c->allreduce_sum(c, buf, count, LS_F32, stream);
        void *g = be->graph_end(NULL, NULL);
        be->graph_launch(g);
        be->sync();
        c->barrier(c);
        t = now_s();
        for (int r = 0; r < reps; r++) be->graph_launch(g);
        be->sync();
        t = now_s() - t;
        be->graph_free(g);
        iters = per * reps;
    }
    double worst = 0;
    CHECK_MPI(MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return worst / iters * 1e6;
}

/* a row's label: the kernel's short name, and which of its launches a layer or a step */
static void kt_label(const struct ls_kt_trace *t, const struct ls_kt_row *r, char *out, size_t len)
{
    char name[72];
    ls_kt_short_name(t->names[r->name], name, sizeof name);
    if (r->of > 1)
        snprintf(out, len, "%s [%d of %d a %s]", name, r->k + 1, r->of,
                 r->per_layer ? "layer" : "step");
    else
        snprintf(out, len, "%s", name);
}

/* rank 0's kernel times: a row per kernel (and its place in a layer), each row's share of the
 * step; us are means a launch */
static void print_kernel_times(const struct ls_kt_trace *t, const struct ls_kt_summary *s,
                               double ms_traced, double ms_plain)
{
    const double steps = s->steps;
    printf("kernel times (CUPTI, rank 0): %d steps of %d kernels; %.3f ms/token traced, %.3f "
           "without (the records' cost)\n",
           s->steps, s->kernels, ms_traced, ms_plain);
    if (s->steps_other || s->outside || t->dropped)
        printf("  left out: %d graph launches of another kernel sequence, %d kernels outside "
               "graphs, %zu records dropped by CUPTI\n",
               s->steps_other, s->outside, t->dropped);
    printf("  %-84s %7s %9s %8s %9s %9s %6s\n", "kernel (end - previous end)", "a step", "us each",
           "gap us", "own us", "ms/token", "share");
    for (int i = 0; i < s->n_rows; i++) {
        const struct ls_kt_row *r = &s->rows[i];
        const double n = steps * r->launches;
        char label[128];
        kt_label(t, r, label, sizeof label);
        printf("  %-84.84s %7d %9.2f %8.2f %9.2f %9.4f %5.1f%%\n", label, r->launches,
               r->cost_ns / n * 1e-3, r->gap_ns / n * 1e-3, r->own_ns / n * 1e-3,
               r->cost_ns / steps * 1e-6, 100.0 * r->cost_ns / s->span_ns);
    }
    printf("  %-84s %7d %9s %8s %9s %9.4f %5.1f%%\n", "the step (sum)", s->kernels, "", "", "",
           s->span_ns / steps * 1e-6, 100.0);
}

static json_t *kernel_times_json(const struct ls_kt_trace *t, const struct ls_kt_summary *s,
                                 double ms_traced)
{
    json_t *rows = json_array();
    for (int i = 0; i < s->n_rows; i++) {
        const struct ls_kt_row *r = &s->rows[i];
        const double n = (double)s->steps * r->launches;
        char name[256];
        ls_kt_short_name(t->names[r->name], name, sizeof name);
        json_array_append_new(
            rows, json_pack("{s:s, s:i, s:i, s:b, s:i, s:f, s:f, s:f, s:f}", "kernel", name, "k",
                            r->k + 1, "of", r->of, "per_layer", r->per_layer, "launches_per_step",
                            r->launches, "us_each", r->cost_ns / n * 1e-3, "gap_us_each",
                            r->gap_ns / n * 1e-3, "own_us_each", r->own_ns / n * 1e-3,
                            "ms_per_token", r->cost_ns / s->steps * 1e-6));
    }
    return json_pack("{s:i, s:i, s:i, s:i, s:I, s:f, s:f, s:o}", "steps", s->steps,
                     "kernels_per_step", s->kernels, "steps_other", s->steps_other,
                     "outside_graphs", s->outside, "dropped", (json_int_t)t->dropped,
                     "ms_per_token_traced", ms_traced, "ms_per_step_sum",
                     s->span_ns / s->steps * 1e-6, "rows", rows);
}

/* rank 0 opens --json before the run, so that a path it cannot write fails at once rather than
 * after a long benchmark; every rank exits 1 when it cannot */
static FILE *json_open(struct rc_job *j, const char *path)
{
    FILE *f = NULL;
    int ok = 1;
    if (j->ctx.rank == 0 && path) {
        f = fopen(path, "w");
        if (!f) {
            ls_error("bench: --json %s: %s", path, strerror(errno));
            ok = 0;
        }
    }
    if (!ls_agree(ok)) ls_abort_quiet(&j->ctx);
    return f;
}

/* rank 0: writes o (taken) to f and closes it; -1 (said) when any write or the close fails */
static int json_write(json_t *o, FILE *f, const char *path)
{
    int rc = json_dumpf(o, f, JSON_INDENT(2)) != 0 || fputc('\n', f) == EOF || fflush(f) != 0;
    int saved = errno;
    if (fclose(f) != 0 && !rc) {
        saved = errno;
        rc = 1;
    }
    json_decref(o);
    if (rc) ls_error("bench: --json %s: cannot write the results: %s", path, strerror(saved));
    return rc ? -1 : 0;
}

/* 0, or -1 (said, on rank 0) when the JSON could not be written */
static int allreduce_sweep(struct rc_job *j, size_t max_bytes, FILE *json, const char *json_path)
{
    struct ls_comm *comms[2] = {j->comm, j->fallback};
    int ncomm = j->fallback ? 2 : 1, graphs = j->be->graph_begin != NULL;
    float *buf = j->be->alloc(max_bytes);
    if (!buf) ls_die(__FILE__, __LINE__, "allreduce_sweep", "out of memory for the sweep buffer");
    json_t *rows = json_array();
    if (j->ctx.rank == 0) {
        printf("all-reduce latency, fp32, %d ranks, us per all-reduce (slowest rank)\n%10s",
               j->ctx.size, "bytes");
        for (int c = 0; c < ncomm; c++) {
            printf(" %14s/eager", comms[c]->name);
            if (graphs) printf(" %14s/graph", comms[c]->name);
        }
        printf("\n");
    }
    size_t sizes[32];
    int ns = 0;
    for (size_t b = 1024; b <= max_bytes && ns < 30; b *= 2) sizes[ns++] = b;
    for (int i = 0; i < ns; i++) {
        size_t count = sizes[i] / sizeof(float);
        json_t *row = json_pack("{s:I}", "bytes", (json_int_t)sizes[i]);
        if (j->ctx.rank == 0) printf("%10zu", sizes[i]);
        for (int c = 0; c < ncomm; c++)
            for (int g = 0; g <= graphs; g++) {
                double us = time_allreduce(j, comms[c], buf, count, g);
                char key[64];
                snprintf(key, sizeof key, "%s_%s_us", comms[c]->name, g ? "graph" : "eager");
                json_object_set_new(row, key, json_real(us));
                if (j->ctx.rank == 0) printf(" %20.2f", us);
            }
        if (j->ctx.rank == 0)
            printf("%s\n", sizes[i] == 8192    ? "   <- 8 KB"
                           : sizes[i] == 16384 ? "   <- 16 KB"
                                               : "");
        json_array_append_new(rows, row);
    }
    int rc = 0;
    if (json) {
        json_t *o = json_pack("{s:i, s:s, s:o}", "tp", j->ctx.size, "backend", j->be->name,
                              "allreduce_sweep", rows);
        rc = json_write(o, json, json_path);
    } else {
        json_decref(rows);
    }
    fflush(stdout);
    j->be->free(buf);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    static const struct option longopts[] = {
        RC_MODEL_LONGOPTS,
        {"prompt-len", required_argument, NULL, OPT_PROMPT_LEN},
        {"gen", required_argument, NULL, OPT_GEN},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"bw-bytes", required_argument, NULL, OPT_BW_BYTES},
        {"json", required_argument, NULL, OPT_JSON},
        {"allreduce-sweep", no_argument, NULL, OPT_SWEEP},
        {"sweep-max", required_argument, NULL, OPT_SWEEP_MAX},
        {"max-context", required_argument, NULL, OPT_MAX_CTX},
        {"kernel-times", no_argument, NULL, OPT_KTIMES},
        {"temperature", required_argument, NULL, RC_OPT_TEMP},
        {"top-k", required_argument, NULL, RC_OPT_TOP_K},
        {"top-p", required_argument, NULL, RC_OPT_TOP_P},
        {"min-p", required_argument, NULL, RC_OPT_MIN_P},
        {"repeat-penalty", required_argument, NULL, RC_OPT_REP},
        {"presence-penalty", required_argument, NULL, RC_OPT_PRES},
        {"frequency-penalty", required_argument, NULL, RC_OPT_FREQ},
        {"repeat-last-n", required_argument, NULL, RC_OPT_LAST_N},
        {"logit-bias", required_argument, NULL, RC_OPT_LOGIT_BIAS},
        {"allowed-token-ids", required_argument, NULL, RC_OPT_ALLOWED},
        {"help", no_argument, NULL, 'h'},
        LS_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0}};
    struct ls_common_opts common;
    ls_common_defaults(&common);
    struct rc_model_arg model = {0};
    const char *json_path = NULL;
    char err[512];
    long prompt_len = 128, gen = 256, warmup = 16, batch = 1, bw_bytes = 0, sweep_max = 64L << 20,
         max_ctx = 0, v;
    int reset = 1, opt, sweep = 0, ktimes = 0;
    struct ls_gen_params gp; /* only its sampling filters: what the decode step draws with */
    ls_gen_defaults(&gp);
    gp.sampling.seed = 1;
    int unused_ctx = 0;
    while ((opt = ls_getopt(argc, argv, "m:h", longopts, &reset, err, sizeof err)) != -1) {
        if (rc_model_opt(opt, optarg, &model)) continue;
        switch (opt) {
        case OPT_PROMPT_LEN:
            if (ls_parse_long("--prompt-len", optarg, 1, 1 << 20, &prompt_len, err, sizeof err))
                return ls_usage_error("bench", err);
            break;
        case OPT_GEN:
            if (ls_parse_long("--gen", optarg, 1, 1 << 20, &gen, err, sizeof err))
                return ls_usage_error("bench", err);
            break;
        case OPT_WARMUP:
            if (ls_parse_long("--warmup", optarg, 0, 1 << 20, &warmup, err, sizeof err))
                return ls_usage_error("bench", err);
            break;
        case OPT_BATCH:
            if (ls_parse_long("--batch", optarg, 1, 1, &batch, err, sizeof err))
                return ls_usage_error("bench", err);
            break;
        case OPT_BW_BYTES:
            if (ls_parse_long("--bw-bytes", optarg, 1 << 20, 1L << 40, &bw_bytes, err, sizeof err))
                return ls_usage_error("bench", err);
            break;
        case OPT_JSON:
            json_path = optarg;
            break;
        case OPT_SWEEP:
            sweep = 1;
            break;
        case OPT_KTIMES:
            ktimes = 1;
            break;
        case OPT_MAX_CTX:
            if (ls_parse_long("--max-context", optarg, 2, 1 << 22, &max_ctx, err, sizeof err))
                return ls_usage_error("bench", err);
            break;
        case OPT_SWEEP_MAX:
            if (ls_parse_long("--sweep-max", optarg, 1024, 1L << 32, &sweep_max, err, sizeof err))
                return ls_usage_error("bench", err);
            break;
        case RC_OPT_TEMP:
        case RC_OPT_TOP_K:
        case RC_OPT_TOP_P:
        case RC_OPT_MIN_P:
        case RC_OPT_REP:
        case RC_OPT_PRES:
        case RC_OPT_FREQ:
        case RC_OPT_LAST_N:
        case RC_OPT_LOGIT_BIAS:
        case RC_OPT_ALLOWED:
            if (rc_sampling_opt(opt, optarg, &gp, &unused_ctx, err, sizeof err))
                return ls_usage_error("bench", err);
            break;
        case 'h':
            ls_print0("%s", bench_help);
            return 0;
        case '?':
            return ls_usage_error("bench", err);
        default:
            if (ls_common_opt(opt, optarg, &common, err, sizeof err) != 0)
                return ls_usage_error("bench", err);
        }
    }
    if (optind < argc) {
        snprintf(err, sizeof err, "unexpected argument '%s'", argv[optind]);
        return ls_usage_error("bench", err);
    }
    (void)v;
    const struct ls_sampling sp = gp.sampling;
    if (sweep && ktimes)
        return ls_usage_error("bench", "--kernel-times times decode steps, not "
                                       "--allreduce-sweep");
    if (sweep) {
        struct rc_job j;
        /* the custom comm's buffers must hold the largest message (it routes big ones to NCCL) */
        rc_job_start(&j, &argc, &argv, &common, NULL, 0,
                     (int)(sweep_max / (16384 * (long)sizeof(float)) + 1));
        FILE *json = json_open(&j, json_path);
        int ok = ls_agree(allreduce_sweep(&j, (size_t)sweep_max, json, json_path) == 0);
        j.comm->destroy(j.comm);
        if (j.fallback) j.fallback->destroy(j.fallback);
        ls_shutdown(&j.ctx);
        return ok ? 0 : 1;
    }
    if (!model.path) return ls_usage_error("bench", "missing --model (-m) or --dummy");

    struct rc_job j;
    int ctx_len = (int)(prompt_len + warmup + gen + 1);
    if (max_ctx && max_ctx < ctx_len) {
        snprintf(err, sizeof err,
                 "--max-context %ld holds fewer positions than the run needs: %d (prompt %ld + "
                 "warm-up %ld + timed %ld + 1)",
                 max_ctx, ctx_len, prompt_len, warmup, gen);
        return ls_usage_error("bench", err);
    }
    if (max_ctx) ctx_len = (int)max_ctx;
    const int chunk = (int)(prompt_len < RC_PREFILL_CHUNK ? prompt_len : RC_PREFILL_CHUNK);
    rc_job_start(&j, &argc, &argv, &common, NULL, ctx_len, chunk);
    if (ktimes && strcmp(j.be->name, "cuda")) {
        ls_error("bench --kernel-times: kernel records need the CUDA backend, this run's is %s",
                 j.be->name);
        ls_abort_quiet(&j.ctx);
    }
    FILE *json = json_open(&j, json_path);
    rc_job_load(&j, model.path, ctx_len, chunk);
    char verr[128];
    const int vocab_ok = ls_sampling_check_vocab(&sp, j.model->cfg.vocab, verr, sizeof verr) == 0;
    if (!vocab_ok && j.ctx.rank == 0) ls_error("bench: %s", verr);
    if (!ls_agree(vocab_ok)) ls_abort_quiet(&j.ctx);
    const struct ls_model *m = j.model;
    const struct ls_model_config *c = &m->cfg;
    const struct ls_shard *s = &m->shard;

    /* 1. the roofline */
    size_t bw = bw_bytes ? (size_t)bw_bytes
                         : (strcmp(j.be->name, "cpu") ? (size_t)4 << 30 : (size_t)512 << 20);
    double read_gbs = j.be->read_bandwidth(bw), copy_gbs = j.be->copy_bandwidth(bw / 2);

    /* 2. prefill: a seeded random prompt, best of 3 */
    int *prompt = malloc((size_t)prompt_len * sizeof *prompt);
    float *logits = malloc((size_t)c->vocab * sizeof *logits);
    CHECK_ALLOC(prompt);
    CHECK_ALLOC(logits);
    uint64_t x = 12345;
    for (long i = 0; i < prompt_len; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        prompt[i] = (int)((x >> 33) % (uint64_t)c->vocab);
    }
    double prefill = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        ls_engine_reset(j.engine);
        j.be->sync();
        j.comm->barrier(j.comm);
        double t0 = now_s();
        ls_engine_forward(j.engine, prompt, (int)prompt_len, logits);
        j.be->sync();
        double dt = now_s() - t0;
        if (dt < prefill) prefill = dt;
    }

    /* 3. decode with the real collectives, then without any */
    int first = ls_argmax(logits, c->vocab);
    struct decode_run full =
        timed_decode(&j, &sp, prompt, (int)prompt_len, first, (int)warmup, (int)gen);
    struct ls_comm *none = ls_comm_null_create(j.ctx.rank, j.ctx.size, j.be);
    struct ls_comm *real = ls_engine_set_comm(j.engine, none);
    ls_engine_reset(j.engine);
    ls_engine_forward(j.engine, prompt, (int)prompt_len, logits);
    struct decode_run alone =
        timed_decode(&j, &sp, prompt, (int)prompt_len, first, (int)warmup, (int)gen);
    ls_engine_set_comm(j.engine, real);
    none->destroy(none);

    /* 4. with --kernel-times, the real decode again under CUPTI's records (the graphs dropped
     * with the communicator above are captured again while they are on) */
    struct ls_kt_summary kts = {0};
    struct ls_kt_trace kt = {0};
    double ms_traced = 0; /* the traced decode's ms a token */
    if (ktimes) {
        char kerr[512] = "";
        ls_engine_reset(j.engine);
        ls_engine_forward(j.engine, prompt, (int)prompt_len, logits);
        int ok = ls_ktrace_start(kerr, sizeof kerr) == 0;
        if (ok) {
            const struct decode_run traced =
                timed_decode(&j, &sp, prompt, (int)prompt_len, first, (int)warmup, (int)gen);
            ms_traced = traced.seconds / traced.steps * 1e3;
            ok = ls_ktrace_stop(&kt, kerr, sizeof kerr) == 0 &&
                 ls_kt_summarize(&kt, c->n_layers, &kts, kerr, sizeof kerr) == 0;
        }
        if (!ok) ls_error("bench --kernel-times: %s", kerr);
        if (!ls_agree(ok)) ls_abort_quiet(&j.ctx);
    }

    /* bytes one decode step reads on this rank: weights without the embedding table (one row of
     * it is read), plus the KV cache up to the mean position of the timed steps */
    size_t wb = (size_t)j.be->weight_bytes;
    size_t embed = (size_t)c->vocab * c->dim * wb;
    size_t weights =
        s->weight_bytes - embed + (c->tied_embeddings ? (size_t)s->vocab_rows * c->dim * wb : 0);
    double mean_pos = (double)prompt_len + (double)warmup + (double)gen / 2.0;
    double step_bytes = (double)weights + mean_pos * (double)s->kv_bytes_token;
    double ms_tok = full.seconds / full.steps * 1e3, ms_alone = alone.seconds / alone.steps * 1e3;
    double achieved = step_bytes / (ms_tok * 1e-3) / 1e9;

    /* the slowest rank sets the pace: report rank 0's view plus the job's worst */
    double worst_ms = 0;
    CHECK_MPI(MPI_Allreduce(&ms_tok, &worst_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    double min_read = 0;
    CHECK_MPI(MPI_Allreduce(&read_gbs, &min_read, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));

    int json_ok = 1;
    if (j.ctx.rank == 0) {
        double share = ms_tok > 0 ? (ms_tok - ms_alone) / ms_tok : 0;
        printf("lockstep bench: %s, %s, TP=%d (%s backend, %s collectives), batch 1\n", m->path,
               c->arch, j.ctx.size, j.be->name, j.comm->name);
        printf("  %-38s %10.1f GB/s   (%.2f GiB, streaming)\n", "read bandwidth (roofline)",
               read_gbs, (double)bw / (1 << 30));
        printf("  %-38s %10.1f GB/s   (read + written)\n", "copy bandwidth", copy_gbs);
        printf("  %-38s %10.3f GB\n", "weights per rank", (double)s->weight_bytes / 1e9);
        printf("  %-38s %10.2f s (rank 0; %.2f GB/s)\n", "model load", j.load_s,
               (double)s->weight_bytes / 1e9 / j.load_s);
        if (j.warmup_s > 0)
            printf("  %-38s %10.3f s (first launches, graph capture)\n", "start-up warm-up",
                   j.warmup_s);
        if (ls_engine_mlp_fused(j.engine))
            printf("  %-38s %10s (the down matrices stored transposed)\n",
                   "MLP in one kernel (LOCKSTEP_MLP_FUSED)", "on");
        printf("  %-38s %10.3f GB\n", "bytes read per decode step per rank", step_bytes / 1e9);
        printf("  %-38s %10d positions\n", "KV cache (--max-context)", ctx_len);
        printf("  %-38s %10.1f tok/s  (%d tokens in %.3f ms)\n", "prefill", prompt_len / prefill,
               (int)prompt_len, prefill * 1e3);
        printf("  %-38s %10.3f ms/token = %.1f tok/s (slowest rank %.3f ms)\n", "decode", ms_tok,
               1e3 / ms_tok, worst_ms);
        if (sp.temperature > 0.0f)
            printf("  %-38s temperature %g, top-k %d, top-p %g, min-p %g (drawn in the step)\n",
                   "sampling", sp.temperature, sp.top_k, sp.top_p, sp.min_p);
        else
            printf("  %-38s greedy (argmax in the step)\n", "sampling");
        if (ls_sampling_penalized(&sp))
            printf("  %-38s repeat %g, presence %g, frequency %g over the last %d (0: all; in "
                   "the step)\n",
                   "penalties", sp.repetition_penalty, sp.presence_penalty, sp.frequency_penalty,
                   sp.penalty_last_n);
        if (sp.n_bias > 0)
            printf("  %-38s %d token%s (in the step)\n", "logit bias", sp.n_bias,
                   sp.n_bias == 1 ? "" : "s");
        if (sp.n_allowed > 0)
            printf("  %-38s %d token%s (the rest -inf in the step)\n", "allowed tokens",
                   sp.n_allowed, sp.n_allowed == 1 ? "" : "s");
        printf("  %-38s %10.1f GB/s = %.1f%% of the read roofline (ceiling %.1f tok/s)\n",
               "achieved", achieved, 100.0 * achieved / read_gbs, read_gbs * 1e9 / step_bytes);
        printf("  %-38s %10.3f ms/token; all-reduce share %.1f%%\n", "decode without collectives",
               ms_alone, 100.0 * share);
        if (ktimes) print_kernel_times(&kt, &kts, ms_traced, ms_tok);
        if (json) {
            json_t *o = json_pack(
                "{s:s, s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
                "s:f, s:f, s:f}",
                "model", m->path, "arch", c->arch, "tp", j.ctx.size, "backend", j.be->name,
                "collectives", j.comm->name, "prompt_len", (int)prompt_len, "gen", (int)gen,
                "batch", 1, "read_gbs", read_gbs, "read_gbs_min_rank", min_read, "copy_gbs",
                copy_gbs, "weight_bytes_per_rank", (double)s->weight_bytes, "step_bytes_per_rank",
                step_bytes, "prefill_tok_s", prompt_len / prefill, "decode_ms_per_token", ms_tok,
                "decode_ms_per_token_slowest_rank", worst_ms, "decode_tok_s", 1e3 / ms_tok,
                "roofline_fraction", achieved / read_gbs, "decode_ms_without_collectives",
                ms_alone);
            json_object_set_new(o, "allreduce_share", json_real(share));
            json_object_set_new(o, "load_s", json_real(j.load_s));
            json_object_set_new(o, "warmup_s", json_real(j.warmup_s));
            json_object_set_new(o, "max_context", json_integer(ctx_len));
            json_object_set_new(o, "mlp_fused", json_boolean(ls_engine_mlp_fused(j.engine)));
            json_object_set_new(o, "sampling",
                                json_pack("{s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:i}", "temperature",
                                          (double)sp.temperature, "top_k", sp.top_k, "top_p",
                                          (double)sp.top_p, "min_p", (double)sp.min_p,
                                          "repetition_penalty", (double)sp.repetition_penalty,
                                          "presence_penalty", (double)sp.presence_penalty,
                                          "frequency_penalty", (double)sp.frequency_penalty,
                                          "penalty_last_n", sp.penalty_last_n));
            json_object_set_new(json_object_get(o, "sampling"), "logit_bias_tokens",
                                json_integer(sp.n_bias));
            json_object_set_new(json_object_get(o, "sampling"), "allowed_tokens",
                                json_integer(sp.n_allowed));
            if (ktimes)
                json_object_set_new(o, "kernel_times", kernel_times_json(&kt, &kts, ms_traced));
            if (json_write(o, json, json_path) != 0) json_ok = 0;
        }
        fflush(stdout);
    }
    json_ok = ls_agree(json_ok);
    ls_kt_summary_free(&kts);
    ls_kt_free(&kt);
    free(prompt);
    free(logits);
    rc_job_end(&j);
    return json_ok ? 0 : 1;
}
