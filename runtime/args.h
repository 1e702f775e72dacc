/* Flag parsing shared by the subcommands: getopt_long with our own messages (getopt's would
 * not name the rank), and the flags every multi-rank command takes (--cpu, --gpu, --bind). */
#ifndef LOCKSTEP_ARGS_H
#define LOCKSTEP_ARGS_H

#include "bootstrap.h"

#include <getopt.h>
#include <stddef.h>

enum { LS_OPT_CPU = 1000, LS_OPT_GPU, LS_OPT_BIND, LS_OPT_ALLREDUCE, LS_OPT_FIRST_FREE = 1100 };

#define LS_COMMON_LONGOPTS                                                                         \
    {"cpu", no_argument, NULL, LS_OPT_CPU}, {"gpu", no_argument, NULL, LS_OPT_GPU},                \
        {"bind", required_argument, NULL, LS_OPT_BIND},                                            \
    {                                                                                              \
        "allreduce", required_argument, NULL, LS_OPT_ALLREDUCE                                     \
    }

#define LS_COMMON_HELP                                                                             \
    "  --cpu                run every rank on CPUs (all-reduce over MPI) even where GPUs exist\n"  \
    "  --gpu                require a GPU per rank; fail if there is none\n"                       \
    "  --bind=auto|gpu|none bind each rank near its GPU (auto, gpu) or to a share of the node's\n" \
    "                       cores on CPU runs (auto); none leaves the binding to the launcher\n"   \
    "  --allreduce=auto|custom|nccl  GPU runs: custom one/two-shot all-reduce over CUDA IPC for\n" \
    "                       small messages with NCCL for the rest (auto, custom), or NCCL only\n"

void ls_common_defaults(struct ls_common_opts *o);

/* Next option, like getopt_long, with opterr off. On an unknown flag or a missing value it
 * returns '?' and writes the problem into err. Call with *reset = 1 before the first call. */
int ls_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
              int *reset, char *err, size_t errlen);

/* Handle a LS_OPT_* common option; returns 0 if handled, -1 with err on a bad value, 1 when
 * opt is not a common option. */
int ls_common_opt(int opt, const char *arg, struct ls_common_opts *o, char *err, size_t errlen);

/* integer flag value in [lo, hi], whole string */
int ls_parse_long(const char *flag, const char *s, long lo, long hi, long *out, char *err,
                  size_t errlen);

/* one-line usage error on rank 0: "<cmd>: <msg>; see 'lockstep <cmd> --help'", returns 2 */
int ls_usage_error(const char *cmd, const char *msg);
/* msg printed once, by rank 0, before any rank exits (a barrier under a launcher); returns 2 */
int ls_report_once(const char *msg);

#endif
