/* What `generate`, `batch` and `bench` share: the sampling and model flags, and the start of a
 * job (bootstrap, model load on every rank with an agreed error, engine). */
#ifndef LOCKSTEP_RUN_COMMON_H
#define LOCKSTEP_RUN_COMMON_H

#include "bootstrap.h"
#include "comm.h"
#include "engine.h"
#include "generate.h"
#include "model.h"

#include <getopt.h>

enum {
    RC_OPT_TEMP = 1200,
    RC_OPT_TOP_K,
    RC_OPT_TOP_P,
    RC_OPT_MIN_P,
    RC_OPT_REP,
    RC_OPT_PRES,
    RC_OPT_FREQ,
    RC_OPT_LAST_N,
    RC_OPT_SEED,
    RC_OPT_STOP,
    RC_OPT_MAX_CTX,
    RC_OPT_IGNORE_EOS,
    RC_OPT_MIN_TOKENS,
    RC_OPT_STOP_ID,
    RC_OPT_LOGIT_BIAS,
    RC_OPT_ALLOWED,
};

#define RC_SAMPLING_LONGOPTS                                                                       \
    {"temperature", required_argument, NULL, RC_OPT_TEMP},                                         \
        {"temp", required_argument, NULL, RC_OPT_TEMP},                                            \
        {"top-k", required_argument, NULL, RC_OPT_TOP_K},                                          \
        {"top-p", required_argument, NULL, RC_OPT_TOP_P},                                          \
        {"min-p", required_argument, NULL, RC_OPT_MIN_P},                                          \
        {"repeat-penalty", required_argument, NULL, RC_OPT_REP},                                   \
        {"presence-penalty", required_argument, NULL, RC_OPT_PRES},                                \
        {"frequency-penalty", required_argument, NULL, RC_OPT_FREQ},                               \
        {"repeat-last-n", required_argument, NULL, RC_OPT_LAST_N},                                 \
        {"seed", required_argument, NULL, RC_OPT_SEED},                                            \
        {"stop", required_argument, NULL, RC_OPT_STOP},                                            \
        {"max-context", required_argument, NULL, RC_OPT_MAX_CTX},                                  \
        {"min-tokens", required_argument, NULL, RC_OPT_MIN_TOKENS},                                \
        {"stop-token-id", required_argument, NULL, RC_OPT_STOP_ID},                                \
        {"logit-bias", required_argument, NULL, RC_OPT_LOGIT_BIAS},                                \
        {"allowed-token-ids", required_argument, NULL, RC_OPT_ALLOWED},                            \
    {                                                                                              \
        "ignore-eos", no_argument, NULL, RC_OPT_IGNORE_EOS                                         \
    }

#define RC_SAMPLING_HELP                                                                           \
    "  --temperature F      0 = greedy (default); --temp is the same\n"                            \
    "  --top-k N            keep the N most likely tokens (0 = off)\n"                             \
    "  --top-p F            nucleus sampling (1 = off)\n"                                          \
    "  --min-p F            keep tokens with p >= F * p_max (0 = off)\n"                           \
    "  --repeat-penalty F   Hugging Face repetition penalty (1 = off)\n"                           \
    "  --presence-penalty F, --frequency-penalty F   OpenAI-style penalties (0 = off)\n"           \
    "  --repeat-last-n N    tokens the penalties look back over (0 = all)\n"                       \
    "  --logit-bias ID=B    add B (-100..100) to token ID's logit before the penalties\n"          \
    "                       (repeatable, up to 1024 tokens; -100 bans a token in practice)\n"      \
    "  --allowed-token-ids LIST  only these tokens, \"1,2,3\" (vLLM's allowed_token_ids)\n"        \
    "  --seed N             random seed (default 0); same seed, same text, at any TP size\n"       \
    "  --stop S             stop before the string S (repeatable, up to 16)\n"                     \
    "  --ignore-eos         keep going past end-of-sequence tokens\n"                              \
    "  --stop-token-id N    stop at token N as at end-of-sequence (repeatable, up to 64)\n"        \
    "  --min-tokens N       end-of-sequence and stop tokens cannot come before N tokens\n"         \
    "  --max-context N      KV cache length (default: the model's, at most 4096)\n"

/* -m PATH and --dummy PRESET|FILE, the model flags of every command that loads one
 * (RC_MODEL_LONGOPTS among its long options, "m:" among its short ones) */
#define RC_OPT_DUMMY 1199
#define RC_MODEL_LONGOPTS                                                                          \
    {"model", required_argument, NULL, 'm'},                                                       \
    {                                                                                              \
        "dummy", required_argument, NULL, RC_OPT_DUMMY                                             \
    }
struct rc_model_arg {
    const char *path; /* as rc_job_start takes it; NULL until one of the flags is given */
    char dummy[4200]; /* "dummy:PRESET" */
};
/* takes -m or --dummy (opt) into m: 1 when opt is one of them, else 0 */
int rc_model_opt(int opt, const char *arg, struct rc_model_arg *m);

/* handles an RC_OPT_* option: 0 handled, -1 bad value (err), 1 not ours */
int rc_sampling_opt(int opt, const char *arg, struct ls_gen_params *p, int *max_ctx, char *err,
                    size_t errlen);

/* the largest --max-context (KV cache positions) */
#define RC_MAX_CONTEXT (1 << 22)
/* positions per prefill forward (LOCKSTEP_PREFILL_CHUNK overrides): the 8B's prefill of 16384
 * tokens on an H200 took 1.15 s in chunks of 256, 0.80 in 512, 0.76 in 1024 and 2048
 * (BENCHMARKS.md, twentieth session); the activations of a chunk grow with it */
#define RC_PREFILL_CHUNK 1024

struct rc_job {
    struct ls_ctx ctx;
    struct ls_comm *comm;     /* the job's collectives */
    struct ls_comm *fallback; /* NCCL under the custom all-reduce, or NULL */
    const struct ls_backend *be;
    struct ls_model *model;
    struct ls_engine *engine;
    double load_s;     /* this rank's model load, seconds (reading, converting, uploading) */
    int prefill_chunk; /* LOCKSTEP_PREFILL_CHUNK, or 0 when unset */
    int warmup;        /* LOCKSTEP_WARMUP: 1, 0, or -1 when unset (on GPUs) */
    double warmup_s;   /* ls_engine_warmup's seconds at start-up, 0 when none ran */
};

/* bootstrap, load the model on every rank, build the engine; on any rank's error every rank
 * exits 1 (the failing rank says why). model_path NULL: bootstrap, backend and collectives only
 * (rc_job_load then loads, after checks that should not wait for a model) */
void rc_job_start(struct rc_job *j, int *argc, char ***argv, const struct ls_common_opts *o,
                  const char *model_path, int max_ctx, int max_batch);
void rc_job_load(struct rc_job *j, const char *model_path, int max_ctx, int max_batch);
void rc_job_end(struct rc_job *j);

/* all of f (NUL-terminated; its length in *n) */
char *rc_read_all(FILE *f, size_t *n);
/* every rank gets rank 0's *n bytes of s (the others pass NULL: a new allocation) and their
 * count in *n */
char *rc_bcast_string(char *s, size_t *n);
/* text's ids (tok_encode's add_special and parse_special) into *out (malloc'd), their count in
 * *n; -1 with err (and *out NULL) when the text cannot be encoded */
struct tokenizer;
int rc_encode(const struct tokenizer *tok, const char *text, size_t len, int add_special,
              int parse_special, int **out, int *n, char *err, size_t errlen);
/* "1,2,3": ids separated by commas, blanks allowed around each, into *out (malloc'd), *n; -1
 * with err naming the flag and the token by its 0-based position */
int rc_parse_ids(const char *flag, const char *s, int **out, int *n, char *err, size_t errlen);

#endif
