/* See run_common.h. */
#include "config.h"
#include "run_common.h"
#include "args.h"
#include "backend.h"
#include "check.h"
#include "log.h"
#include "comm_custom.h"
#include "watchdog.h"
#include "tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a number too large for a float would be infinite, and ls_sampling_validate could not name
 * it: the message says param's range here, as the validation would */
static int parse_float(const char *flag, const char *s, enum ls_sampling_param param, float *out,
                       char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    double d = strtod(s, &end);
    if (!*s || *end || isnan(d) || (isinf(d) && errno != ERANGE))
        return ls_errf(err, errlen, "%s: expected a number, found '%s'", flag, s);
    if (fabs(d) > FLT_MAX) {
        char range[64];
        return ls_errf(err, errlen, "%s: expected %s, found '%s' (out of range)", flag,
                       ls_sampling_range_text(param, range, sizeof range), s);
    }
    *out = (float)d;
    return 0;
}

int rc_model_opt(int opt, const char *arg, struct rc_model_arg *m)
{
    if (opt == 'm') {
        m->path = arg;
        return 1;
    }
    if (opt != RC_OPT_DUMMY) return 0;
    snprintf(m->dummy, sizeof m->dummy, "dummy:%s", arg);
    m->path = m->dummy;
    return 1;
}

int rc_sampling_opt(int opt, const char *arg, struct ls_gen_params *p, int *max_ctx, char *err,
                    size_t errlen)
{
    struct ls_sampling *s = &p->sampling;
    long v = 0;
    int rc = 0;
    switch (opt) {
    case RC_OPT_TEMP:
        rc = parse_float("--temperature", arg, LS_TEMPERATURE, &s->temperature, err, errlen);
        break;
    case RC_OPT_TOP_P:
        rc = parse_float("--top-p", arg, LS_TOP_P, &s->top_p, err, errlen);
        break;
    case RC_OPT_MIN_P:
        rc = parse_float("--min-p", arg, LS_MIN_P, &s->min_p, err, errlen);
        break;
    case RC_OPT_REP:
        rc = parse_float("--repeat-penalty", arg, LS_REPETITION_PENALTY, &s->repetition_penalty,
                         err, errlen);
        break;
    case RC_OPT_PRES:
        rc = parse_float("--presence-penalty", arg, LS_PRESENCE_PENALTY, &s->presence_penalty, err,
                         errlen);
        break;
    case RC_OPT_FREQ:
        rc = parse_float("--frequency-penalty", arg, LS_FREQUENCY_PENALTY, &s->frequency_penalty,
                         err, errlen);
        break;
    case RC_OPT_TOP_K:
        rc = ls_parse_long("--top-k", arg, 0, 1 << 24, &v, err, errlen);
        s->top_k = (int)v;
        break;
    case RC_OPT_LAST_N:
        rc = ls_parse_long("--repeat-last-n", arg, 0, 1 << 24, &v, err, errlen);
        s->penalty_last_n = (int)v;
        break;
    case RC_OPT_SEED: {
        /* strtoull negates a leading '-' into a huge seed, and clamps past 2^64 - 1 */
        const char *digits = arg;
        while (isspace((unsigned char)*digits)) digits++;
        char *end = NULL;
        errno = 0;
        unsigned long long u = strtoull(arg, &end, 10);
        if (!*arg || *end || *digits == '-')
            return ls_errf(err, errlen, "--seed: expected a non-negative integer, found '%s'", arg);
        if (errno == ERANGE)
            return ls_errf(err, errlen, "--seed: expected 0..%" PRIu64 ", found '%s'", UINT64_MAX,
                           arg);
        s->seed = (uint64_t)u;
        break;
    }
    case RC_OPT_STOP:
        if (p->n_stops >= LS_MAX_STOPS) {
            snprintf(err, errlen, "--stop: at most %d stop strings", LS_MAX_STOPS);
            return -1;
        }
        if (!*arg) {
            snprintf(err, errlen, "--stop: expected a non-empty string");
            return -1;
        }
        p->stops[p->n_stops++] = arg;
        break;
    case RC_OPT_MAX_CTX:
        rc = ls_parse_long("--max-context", arg, 2, RC_MAX_CONTEXT, &v, err, errlen);
        *max_ctx = (int)v;
        break;
    case RC_OPT_IGNORE_EOS:
        p->ignore_eos = 1;
        break;
    case RC_OPT_MIN_TOKENS:
        rc = ls_parse_long("--min-tokens", arg, 0, 1 << 24, &v, err, errlen);
        p->min_tokens = (int)v;
        break;
    case RC_OPT_LOGIT_BIAS: {
        /* ID=BIAS, as one entry of OpenAI's logit_bias */
        const char *eq = strchr(arg, '=');
        char id_text[32];
        float b;
        if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof id_text)
            return ls_errf(err, errlen,
                           "--logit-bias: expected ID=BIAS (e.g. 1234=-100), found '%s'", arg);
        memcpy(id_text, arg, (size_t)(eq - arg));
        id_text[eq - arg] = 0;
        if (ls_parse_long("--logit-bias", id_text, 0, INT_MAX, &v, err, errlen) ||
            parse_float("--logit-bias", eq + 1, LS_LOGIT_BIAS, &b, err, errlen) ||
            ls_sampling_add_bias(s, v, b, err, errlen))
            return -1;
        break;
    }
    case RC_OPT_ALLOWED: {
        int *ids = NULL, n = 0;
        if (rc_parse_ids("--allowed-token-ids", arg, &ids, &n, err, errlen)) return -1;
        s->n_allowed = 0;
        for (int i = 0; i < n && rc == 0; i++) rc = ls_sampling_add_allowed(s, ids[i], err, errlen);
        free(ids);
        break;
    }
    case RC_OPT_STOP_ID:
        if (p->n_stop_ids >= LS_MAX_STOP_IDS)
            return ls_errf(err, errlen, "--stop-token-id: at most %d stop tokens", LS_MAX_STOP_IDS);
        rc = ls_parse_long("--stop-token-id", arg, 0, INT_MAX, &v, err, errlen);
        p->stop_ids[p->n_stop_ids++] = (int)v;
        break;
    default:
        return 1;
    }
    if (rc) return -1;
    return ls_sampling_validate(s, err, errlen) ? -1 : 0;
}

static const char *comm_probe(void *arg)
{
    struct ls_comm *c = arg;
    return c->async_error(c);
}

/* LOCKSTEP_PREFILL_CHUNK into *out: 0 when unset, else 1..RC_MAX_CONTEXT (a chunk past the
 * largest --max-context could never fill) */
static int prefill_chunk(int *out, char *err, size_t errlen)
{
    const char *e = getenv("LOCKSTEP_PREFILL_CHUNK");
    *out = 0;
    if (!e || !*e) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(e, &end, 10);
    if (*end || errno || !isdigit((unsigned char)*e) || v < 1 || v > RC_MAX_CONTEXT)
        return ls_errf(err, errlen,
                       "LOCKSTEP_PREFILL_CHUNK: expected positions per prefill forward in 1..%d, "
                       "found '%s'",
                       RC_MAX_CONTEXT, e);
    *out = (int)v;
    return 0;
}

/* LOCKSTEP_WARMUP: 1 warm the engine up at start-up (ls_engine_warmup), 0 not; unset: on
 * backends with graphs (GPUs), where a first request pays for first launches */
static int warmup_switch(int *out, char *err, size_t errlen)
{
    const char *e = getenv("LOCKSTEP_WARMUP");
    *out = -1;
    if (!e || !*e) return 0;
    if (strcmp(e, "0") && strcmp(e, "1"))
        return ls_errf(err, errlen, "LOCKSTEP_WARMUP: expected 0 or 1, found '%s'", e);
    *out = *e == '1';
    return 0;
}

void rc_job_start(struct rc_job *j, int *argc, char ***argv, const struct ls_common_opts *o,
                  const char *model_path, int max_ctx, int max_batch)
{
    memset(j, 0, sizeof *j);
    ls_bootstrap(argc, argv, o, &j->ctx);
    omp_set_num_threads(j->ctx.ncpus);
#ifdef HAVE_CUDA
    if (j->ctx.device >= 0) {
        j->be = &ls_backend_cuda;
        j->comm = ls_comm_nccl_create(MPI_COMM_WORLD, j->ctx.device);
        if (o->allreduce != LS_AR_NCCL && j->ctx.size > 1) {
            /* the largest all-reduce is a prefill chunk's rows; the custom comm routes messages
             * past its thresholds to NCCL */
            size_t max_bytes = (size_t)max_batch * 16384 * sizeof(float);
            j->fallback = j->comm;
            j->comm = ls_comm_custom_create(MPI_COMM_WORLD, j->ctx.device, max_bytes, j->fallback);
            struct ls_comm_custom_info info;
            if (ls_comm_custom_info(j->comm, &info) == 0 && !info.enabled &&
                o->allreduce == LS_AR_CUSTOM && j->ctx.rank == 0)
                ls_warn("--allreduce=custom: the IPC all-reduce is off (%s); using NCCL", info.why);
        }
    } else
#endif
    {
        j->be = &ls_backend_cpu;
        j->comm = ls_comm_mpi_create(MPI_COMM_WORLD);
    }
    /* the step watchdog: its timeout checked now, on every rank; the communicator's own error
     * reports polled while a step runs */
    char werr[256];
    int wd_ok = ls_watchdog_timeout(werr, sizeof werr) >= 0;
    if (!wd_ok) ls_error("%s", werr);
    if (!ls_agree(wd_ok)) ls_abort_quiet(&j->ctx);
    if (j->comm->async_error) ls_watchdog_set_probe(comm_probe, j->comm);
    /* LOCKSTEP_PREFILL_CHUNK: positions per prefill forward (activation memory, and a way to
     * run a prefill through the decode kernels when checking them); checked on every rank */
    char cerr[256];
    int chunk_ok = prefill_chunk(&j->prefill_chunk, cerr, sizeof cerr) == 0;
    if (!chunk_ok) ls_error("%s", cerr);
    if (!ls_agree(chunk_ok)) ls_abort_quiet(&j->ctx);
    int warm_ok = warmup_switch(&j->warmup, cerr, sizeof cerr) == 0;
    if (!warm_ok) ls_error("%s", cerr);
    if (!ls_agree(warm_ok)) ls_abort_quiet(&j->ctx);
    if (model_path) rc_job_load(j, model_path, max_ctx, max_batch);
}

void rc_job_load(struct rc_job *j, const char *model_path, int max_ctx, int max_batch)
{
    char err[1024] = "";
    int progress = j->ctx.rank == 0 && isatty(STDERR_FILENO);
    double t0 = MPI_Wtime();
    j->model =
        ls_model_load(model_path, j->ctx.rank, j->ctx.size, j->be, progress, err, sizeof err);
    j->load_s = MPI_Wtime() - t0;
    if (!j->model) ls_error("%s", err);
    if (!ls_agree(j->model != NULL)) ls_abort_quiet(&j->ctx);
    if (max_ctx <= 0) max_ctx = j->model->cfg.max_pos < 4096 ? j->model->cfg.max_pos : 4096;
    if (j->ctx.rank == 0 && max_ctx > j->model->cfg.max_pos)
        ls_warn("--max-context %d is past the %d positions the model was trained for; output "
                "past them may degrade",
                max_ctx, j->model->cfg.max_pos);
    if (j->prefill_chunk > 0) max_batch = j->prefill_chunk;
    /* a chunk never holds more positions than the cache: no activations past that */
    if (max_batch > max_ctx) max_batch = max_ctx;
    j->engine = ls_engine_new(j->model, j->comm, j->be, max_ctx, max_batch, err, sizeof err);
    if (!j->engine) ls_error("%s", err);
    if (!ls_agree(j->engine != NULL)) ls_abort_quiet(&j->ctx);
    /* a prompt of the bench's length, or the chunk's when shorter */
    if (j->warmup == 1 || (j->warmup < 0 && j->be->graph_begin)) {
        t0 = MPI_Wtime();
        ls_engine_warmup(j->engine, max_batch < 128 ? max_batch : 128);
        j->warmup_s = MPI_Wtime() - t0;
    }
}

void rc_job_end(struct rc_job *j)
{
    ls_engine_free(j->engine);
    ls_model_free(j->model);
    ls_watchdog_set_probe(NULL, NULL); /* the communicator goes next */
    j->comm->destroy(j->comm);
    if (j->fallback) j->fallback->destroy(j->fallback);
    ls_shutdown(&j->ctx);
}

char *rc_read_all(FILE *f, size_t *n)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    CHECK_ALLOC(buf);
    size_t k;
    while ((k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            CHECK_ALLOC(buf);
        }
    }
    buf[len] = 0;
    *n = len;
    return buf;
}

char *rc_bcast_string(char *s, size_t *n)
{
    long long len = (long long)*n;
    CHECK_MPI(MPI_Bcast(&len, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
    *n = (size_t)len;
    if (!s) {
        s = malloc((size_t)len + 1);
        CHECK_ALLOC(s);
    }
    for (long long done = 0; done < len;) {
        int k = (int)(len - done < (1 << 30) ? len - done : (1 << 30));
        CHECK_MPI(MPI_Bcast(s + done, k, MPI_CHAR, 0, MPI_COMM_WORLD));
        done += k;
    }
    s[len] = 0;
    return s;
}

int rc_encode(const struct tokenizer *tok, const char *text, size_t len, int add_special,
              int parse_special, int **out, int *n, char *err, size_t errlen)
{
    *out = NULL;
    int count = tok_encode(tok, text, len, add_special, parse_special, NULL, 0, err, errlen);
    if (count < 0) return -1;
    int32_t *ids32 = malloc((size_t)(count + 1) * sizeof *ids32);
    CHECK_ALLOC(ids32);
    count = tok_encode(tok, text, len, add_special, parse_special, ids32, count + 1, err, errlen);
    if (count >= 0) {
        *out = malloc((size_t)(count + 1) * sizeof **out);
        CHECK_ALLOC(*out);
        for (int i = 0; i < count; i++) (*out)[i] = ids32[i];
        *n = count;
    }
    free(ids32);
    return count < 0 ? -1 : 0;
}

/* "1,2,3": ids separated by commas, blanks allowed around each; a message names the token
 * by its 0-based position, as ls_generate's range check does */
int rc_parse_ids(const char *flag, const char *s, int **out, int *n, char *err, size_t errlen)
{
    int cap = 16, k = 0;
    int *ids = malloc((size_t)cap * sizeof *ids);
    CHECK_ALLOC(ids);
    const char *p = s;
    for (;;) {
        const char *start = p;
        while (*p == ' ' || *p == '\t') p++;
        char *end = (char *)p;
        long v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
        const char *q = end;
        while (*q == ' ' || *q == '\t') q++;
        if (end == p || v < 0 || v > (1 << 30) || (*q != ',' && *q)) {
            size_t len = strcspn(start, ",");
            snprintf(err, errlen,
                     "%s: token %d: expected an id in 0..%d (ids separated by commas), found "
                     "'%.*s'",
                     flag, k, 1 << 30, (int)(len > 60 ? 60 : len), start);
            free(ids);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            ids = realloc(ids, (size_t)cap * sizeof *ids);
            CHECK_ALLOC(ids);
        }
        ids[k++] = (int)v;
        if (!*q) break;
        p = q + 1;
    }
    *out = ids;
    *n = k;
    return 0;
}
