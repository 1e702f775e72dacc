/* Start of every multi-rank command: MPI, placement (node, local rank, GPU), binding of each
 * rank's threads and memory near its GPU (or to a disjoint share of the node's cores on CPU
 * runs), and the communicator used for the tensor-parallel collectives.
 *
 * Invariants: binding happens before any large allocation; every rank agrees on CPU vs GPU;
 * an error in placement is reported by the rank that found it and ends every rank with a
 * non-zero exit (ls_agree), never a hang. */
#ifndef LOCKSTEP_BOOTSTRAP_H
#define LOCKSTEP_BOOTSTRAP_H

#include <hwloc.h>
#include <mpi.h>
#include <stddef.h>

enum ls_bind { LS_BIND_AUTO, LS_BIND_GPU, LS_BIND_NONE };
enum ls_devmode { LS_DEV_AUTO, LS_DEV_CPU, LS_DEV_GPU };
enum ls_armode { LS_AR_AUTO, LS_AR_CUSTOM, LS_AR_NCCL };

struct ls_common_opts {
    enum ls_bind bind;
    enum ls_devmode device;
    enum ls_armode allreduce; /* GPU runs: custom IPC all-reduce for small messages, or NCCL only */
};

struct ls_ctx {
    int rank, size;             /* MPI_COMM_WORLD */
    int local_rank, local_size; /* ranks sharing this node */
    int node, nnodes;           /* node index, ordered by the lowest world rank on each */
    char host[64];
    int gpus_visible; /* CUDA devices this rank sees (CUDA_VISIBLE_DEVICES applies) */
    int device;       /* CUDA ordinal this rank drives; -1 on CPU runs */
    char cpuset[256]; /* CPUs this rank is bound to, as a list: "0-15,32-47" */
    char numa[64];    /* NUMA nodes of that binding: "0" or "0,1" */
    int ncpus;        /* processing units in the binding: threads for the CPU path */
    hwloc_topology_t topo;
    MPI_Comm node_comm;
};

/* MPI_Init_thread and everything above; returns only when all ranks succeeded. */
void ls_bootstrap(int *argc, char ***argv, const struct ls_common_opts *o, struct ls_ctx *ctx);
void ls_shutdown(struct ls_ctx *ctx);

/* Collective: ok != 0 on this rank. Returns 1 when every rank is ok. When not, rank 0 names
 * the first failing rank (which has printed its own error) and the caller exits non-zero. */
int ls_agree(int ok);
/* after a failed ls_agree: finalize MPI and exit 1 on this rank */
_Noreturn void ls_abort_quiet(struct ls_ctx *ctx);

/* ---- pure helpers, unit-tested without MPI or GPUs ---- */

/* GPU for a local rank: local rank r drives visible device r. Fails (message in err) when the
 * node has more ranks than GPUs, or --gpu was asked for and there is none. *device = -1: CPU. */
int ls_select_device(int local_rank, int local_size, int gpus, enum ls_devmode mode, int *device,
                     char *err, size_t errlen);

/* The index-th of count disjoint shares of the cores inside `within` (whole cores where there
 * are enough, else PUs; shares overlap only when count exceeds the PUs). */
void ls_share_of_set(hwloc_topology_t topo, hwloc_const_cpuset_t within, int index, int count,
                     hwloc_cpuset_t out);

/* NUMA nodes whose CPUs intersect set, as a list ("0,1"), "-" when none are known */
void ls_numa_of_set(hwloc_topology_t topo, hwloc_const_cpuset_t set, char *out, size_t outlen);

int ls_parse_bind(const char *s, enum ls_bind *out);

#endif
