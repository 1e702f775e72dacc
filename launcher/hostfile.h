/* Where the ranks of a job go, decided before MPI exists: the hostfile (Open MPI syntax) and
 * the mpirun command line composed from it. Everything here is pure (no environment reads, no
 * GPU or topology queries, no exec) so the unit tests can check every decision; cmd_launch in
 * launch.c gathers the facts of this node into struct ls_launch_site and runs the result.
 *
 * Placement rule: one rank per GPU, ranks packed by node (ranks 0..R-1 on the first host,
 * R..2R-1 on the second, ...), where R, the ranks per node, is min(slots, --gpus-per-node)
 * and must be the same on every host because Open MPI's ppr mapping takes one count.
 * Binding is left to lockstep (--bind-to none): it binds each rank near its GPU itself. */
#ifndef LOCKSTEP_HOSTFILE_H
#define LOCKSTEP_HOSTFILE_H

#include <stddef.h>

enum {
    LS_HOST_NAME_MAX = 255, /* DNS limit on a full name */
    LS_HOST_SLOTS_MAX = 1 << 20,
    LS_HOSTFILE_MAX_BYTES = 1 << 24,
    LS_LAUNCH_RANKS_MAX = 65536, /* the most ranks a job may have (--tp's range) */
};

struct ls_host {
    char name[LS_HOST_NAME_MAX + 1];
    int slots;      /* ranks this host takes; 0 when the line gives no count */
    int max_slots;  /* 0 when not given; never below slots */
    int line;       /* line it was read from, for messages */
    int colon_form; /* written "host:N", which Open MPI's own hostfile parser rejects */
};

struct ls_hostfile {
    char *path;            /* as given: named in messages and passed to mpirun */
    struct ls_host *hosts; /* [nhosts], in file order, each name once */
    int nhosts;
    int cr_line_ends; /* a CR outside a comment, which Open MPI's own parser rejects */
};

/* Parse an Open MPI style hostfile: "hostname [slots=N] [max_slots=M]" or "hostname:N" per
 * line, '#' comments, blank lines, LF or CRLF line ends. A host listed twice is an error (Open
 * MPI rejects it too, and merging would silently put two ranks' worth of work on one GPU). The
 * file must be a regular one: mpirun reads it again, and a pipe would be empty by then. Returns
 * 0, or -1 with "hostfile F line L: problem (expected ..., found '...')" in err; out is empty
 * on error. */
int ls_hostfile_parse(const char *path, struct ls_hostfile *out, char *err, size_t errlen);
/* the same on text already in memory; name stands for the file in messages */
int ls_hostfile_parse_string(const char *text, const char *name, struct ls_hostfile *out, char *err,
                             size_t errlen);
void ls_hostfile_free(struct ls_hostfile *hf);

/* What the user asked for (flags of `lockstep launch`). */
struct ls_launch_opts {
    int tp;                     /* ranks; 0: every GPU of this node, or every hostfile slot */
    int gpus_per_node;          /* 0: the visible GPUs (one node) or each host's slots */
    int cpu;                    /* ranks on CPUs: lockstep gets --cpu, no GPU is counted */
    const char *mpirun;         /* the program to run, Open MPI 4 or 5 */
    const char *extra_mpi_args; /* NULL, or words (shell quoting) placed before the program */
    const char *lockstep;       /* absolute path of the binary every rank runs */
    int nargs;                  /* lockstep's arguments, subcommand first */
    char *const *args;          /* [nargs] */
};

/* The facts of the launching node; cmd_launch fills them, tests make them up. */
struct ls_launch_site {
    int gpus_visible;  /* ls_gpu_count() on this node */
    int cores;         /* physical cores: what Open MPI counts as this node's slots */
    int is_root;       /* Open MPI refuses root unless told twice (flag and environment) */
    char *const *envp; /* NAME=value, NULL-terminated: the variables to forward */
};

struct ls_launch_cmd {
    char **argv; /* [argc + 1], argv[0] is mpirun, NULL-terminated */
    int argc;
    char **setenv; /* NAME=value to set before exec, NULL-terminated */
    int np;        /* ranks */
    int per_node;  /* ranks per node */
    int nnodes;    /* nodes the ranks land on */
};

/* Compose the mpirun line. hf is NULL for a single-node run. Returns 0, or -1 with a message
 * naming the counts that do not fit (GPUs, slots, --tp). */
int ls_launch_compose(const struct ls_launch_opts *o, const struct ls_hostfile *hf,
                      const struct ls_launch_site *site, struct ls_launch_cmd *out, char *err,
                      size_t errlen);
/* "NAME=v ... mpirun ..." on one line, each word shell-quoted; malloc'd, NULL on no memory */
char *ls_launch_cmd_string(const struct ls_launch_cmd *c);
void ls_launch_cmd_free(struct ls_launch_cmd *c);

/* Split s into words the way a POSIX shell would without expansions: blanks separate, '...'
 * is literal, "..." honours \" and \\, a backslash outside quotes escapes the next character.
 * *words is NULL-terminated and malloc'd (free with ls_words_free). */
int ls_split_words(const char *s, char ***words, int *n, char *err, size_t errlen);
void ls_words_free(char **words);

#endif
