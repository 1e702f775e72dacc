/* lockstep selftest: fault drills for the integration tests. Each drill makes one rank fail
 * in a particular way while the others wait in a collective, and the test checks that every
 * rank ends, non-zero, with a message naming the failed rank, instead of hanging:
 *   signal  the rank takes a SIGSEGV (crash handler -> MPI_Abort)
 *   exit    the rank exits without MPI_Finalize (mpirun ends the job)
 *   error   the rank reports an input error (ls_agree -> every rank exits 1)
 *   check   a failed library call (CHECK_MPI -> MPI_Abort) */
#include "config.h"
#include "args.h"
#include "bootstrap.h"
#include "check.h"
#include "commands.h"
#include "log.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char selftest_help[] =
    "usage: lockstep selftest signal|exit|error|check [--rank R]\n"
    "Fault drills used by the tests: rank R (default 1, or 0 on one rank) fails while the\n"
    "others wait in a barrier; every rank must end with a non-zero status.\n";

int cmd_selftest(int argc, char **argv)
{
    static const struct option longopts[] = {{"rank", required_argument, NULL, 'r'},
                                             {"help", no_argument, NULL, 'h'},
                                             LS_COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    struct ls_common_opts common;
    ls_common_defaults(&common);
    common.device = LS_DEV_CPU;
    long victim = -1;
    int reset = 1, opt;
    char err[256];
    while ((opt = ls_getopt(argc, argv, "r:h", longopts, &reset, err, sizeof err)) != -1) {
        if (opt == 'r') {
            if (ls_parse_long("--rank", optarg, 0, 1 << 20, &victim, err, sizeof err) != 0)
                return ls_usage_error("selftest", err);
        } else if (opt == 'h') {
            ls_print0("%s", selftest_help);
            return 0;
        } else if (opt == '?')
            return ls_usage_error("selftest", err);
        else if (ls_common_opt(opt, optarg, &common, err, sizeof err) != 0)
            return ls_usage_error("selftest", err);
    }
    if (optind != argc - 1)
        return ls_usage_error("selftest", "expected one drill: signal, exit, error or check");
    const char *drill = argv[optind];
    if (strcmp(drill, "signal") && strcmp(drill, "exit") && strcmp(drill, "error") &&
        strcmp(drill, "check")) {
        snprintf(err, sizeof err, "unknown drill '%s' (expected signal, exit, error or check)",
                 drill);
        return ls_usage_error("selftest", err);
    }

    struct ls_ctx ctx;
    ls_bootstrap(&argc, &argv, &common, &ctx);
    if (victim < 0) victim = ctx.size > 1 ? 1 : 0;
    if (victim >= ctx.size) {
        ls_error("selftest: --rank %ld but the job has %d ranks", victim, ctx.size);
        ls_abort_quiet(&ctx);
    }
    int me = ctx.rank == victim;
    if (!strcmp(drill, "error")) {
        if (me) ls_error("selftest: drill error on this rank");
        if (!ls_agree(!me)) ls_abort_quiet(&ctx);
    } else if (me) {
        if (!strcmp(drill, "signal")) raise(SIGSEGV);
        if (!strcmp(drill, "exit")) {
            fprintf(stderr, "lockstep: rank %d@%s: selftest: exiting without MPI_Finalize\n",
                    ctx.rank, ctx.host);
            _exit(3);
        }
        if (!strcmp(drill, "check")) CHECK_MPI(MPI_Send(NULL, -1, MPI_INT, 0, 0, MPI_COMM_WORLD));
    }
    /* survivors wait here: without the abort paths this barrier would hang */
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    ls_print0("selftest: drill '%s' did not fail\n", drill);
    ls_shutdown(&ctx);
    return 1;
}
