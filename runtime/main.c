/* lockstep: one binary, one subcommand per job. main() only dispatches; each subcommand
 * parses its own flags, and multi-rank ones start MPI themselves (ls_bootstrap) after their
 * flags are known to be good, so a typo fails fast on every rank without a collective. */
#include "config.h"
#include "args.h"
#include "commands.h"
#include "log.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *help;
} commands[] = {
    {"generate", cmd_generate, "generate text from a prompt (streamed on rank 0)"},
    {"batch", cmd_batch, "generate for every prompt of a JSONL file, results as JSONL"},
    {"bench", cmd_bench, "measure the read roofline, prefill and decode speed"},
    {"perplexity", cmd_perplexity, "perplexity of a text (windows of --ctx tokens)"},
    {"info", cmd_info, "placement, GPUs, binding and library versions of every rank"},
    {"plan", cmd_plan, "the tensor-parallel shard plan for a model shape"},
    {"launch", cmd_launch,
     "compose and run mpirun for a TP job (what launcher/lockstep-run calls)"},
    {"selftest", cmd_selftest, NULL},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: lockstep <command> [options]   (lockstep <command> --help for its "
               "options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].help) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-10s %s\n", "version", "print the version");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        if (ls_self_rank() == 0) usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        if (ls_self_rank() == 0) usage(stdout);
        return 0;
    }
    if (!strcmp(name, "version") || !strcmp(name, "--version")) {
        ls_print0("lockstep %s\n", PACKAGE_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    char msg[512];
    snprintf(msg, sizeof msg, "unknown command '%.200s'; run 'lockstep --help' for the list", name);
    return ls_report_once(msg);
}
