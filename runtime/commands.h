/* Subcommands of the one `lockstep` binary. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns the process exit status. */
#ifndef LOCKSTEP_COMMANDS_H
#define LOCKSTEP_COMMANDS_H

int cmd_info(int argc, char **argv);     /* runtime/info.c: placement and versions of every rank */
int cmd_plan(int argc, char **argv);     /* shard/plan_cli.c: the shard plan for a shape and TP */
int cmd_launch(int argc, char **argv);   /* launcher/launch.c: compose and run mpirun */
int cmd_selftest(int argc, char **argv); /* runtime/selftest.c: fault drills for the tests */
int cmd_generate(int argc, char **argv); /* runtime/generate_cli.c: one prompt, streamed text */
int cmd_batch(int argc, char **argv);    /* runtime/batch.c: JSONL prompts in, JSONL results out */
int cmd_bench(int argc, char **argv);    /* runtime/bench.c: roofline, prefill and decode speed */
int cmd_perplexity(int argc,
                   char **argv); /* runtime/perplexity.c: how well a model predicts a text */

#endif
