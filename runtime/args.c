/* See args.h. */
#include "config.h"
#include "args.h"
#include "log.h"

#include <mpi.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ls_common_defaults(struct ls_common_opts *o)
{
    o->bind = LS_BIND_AUTO;
    o->device = LS_DEV_AUTO;
    o->allreduce = LS_AR_AUTO;
}

int ls_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
              int *reset, char *err, size_t errlen)
{
    if (*reset) {
        optind = 0; /* glibc: 0 re-initialises the scanner */
        *reset = 0;
    }
    opterr = 0;
    char so[128];
    snprintf(so, sizeof so, ":%s", shortopts); /* leading ':' reports a missing value as ':' */
    int opt = getopt_long(argc, argv, so, longopts, NULL);
    if (opt == '?' || opt == ':') {
        const char *what = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        if (opt == ':')
            snprintf(err, errlen, "flag '%s' needs a value", what);
        else if (optopt && optopt < 256 && (what[0] != '-' || what[1] != '-'))
            snprintf(err, errlen, "unknown flag '-%c'", optopt);
        else
            snprintf(err, errlen, "unknown flag '%s'", what);
        return '?';
    }
    return opt;
}

int ls_common_opt(int opt, const char *arg, struct ls_common_opts *o, char *err, size_t errlen)
{
    switch (opt) {
    case LS_OPT_CPU:
        o->device = LS_DEV_CPU;
        return 0;
    case LS_OPT_GPU:
        o->device = LS_DEV_GPU;
        return 0;
    case LS_OPT_BIND:
        if (ls_parse_bind(arg, &o->bind) != 0) {
            snprintf(err, errlen, "--bind: expected auto, gpu or none, found '%s'", arg);
            return -1;
        }
        return 0;
    case LS_OPT_ALLREDUCE:
        if (!strcmp(arg, "auto"))
            o->allreduce = LS_AR_AUTO;
        else if (!strcmp(arg, "custom"))
            o->allreduce = LS_AR_CUSTOM;
        else if (!strcmp(arg, "nccl"))
            o->allreduce = LS_AR_NCCL;
        else {
            snprintf(err, errlen, "--allreduce: expected auto, custom or nccl, found '%s'", arg);
            return -1;
        }
        return 0;
    default:
        return 1;
    }
}

int ls_parse_long(const char *flag, const char *s, long lo, long hi, long *out, char *err,
                  size_t errlen)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    /* strtol skips leading blanks and takes a sign: " 2" and "+2" are not what anyone typed */
    if (!*s || *end || errno || !(isdigit((unsigned char)*s) || *s == '-')) {
        snprintf(err, errlen, "%s: expected an integer, found '%s'", flag, s);
        return -1;
    }
    if (v < lo || v > hi) {
        snprintf(err, errlen, "%s: expected %ld..%ld, found %ld", flag, lo, hi, v);
        return -1;
    }
    *out = v;
    return 0;
}

int ls_report_once(const char *msg)
{
    /* Under a launcher every rank reaches this with the same message. Rank 0 prints it; the
     * others must not exit first, or mpirun may kill rank 0 before its line is out. So, under a
     * launcher, all ranks meet in a barrier after rank 0 has printed. */
    int launched = ls_env_rank() >= 0, init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (launched && !init && !fin && MPI_Init(NULL, NULL) == MPI_SUCCESS) init = 1;
    if (ls_self_rank() == 0) ls_error("%s", msg);
    if (launched && init && !fin) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
    }
    return 2;
}

int ls_usage_error(const char *cmd, const char *msg)
{
    char line[2048];
    snprintf(line, sizeof line, "%s: %s; see 'lockstep %s --help'", cmd, msg, cmd);
    return ls_report_once(line);
}
