/* See bootstrap.h.
 *
 * Placement: local ranks come from MPI_COMM_TYPE_SHARED; the node index is the rank of the
 * node's leader (local rank 0) among leaders. Local rank r drives visible GPU r.
 *
 * Binding: on GPU runs each rank takes the cpuset hwloc reports as local to its GPU (sysfs
 * local_cpus through hwloc's cudart helper); ranks whose GPUs share that set (several GPUs on one
 * socket) split it between them so no two ranks spin on the same core. On CPU runs the node's
 * cores are split into local_size disjoint shares with hwloc_distrib. Memory follows the CPUs
 * (HWLOC_MEMBIND_BIND on the same set). Any binding failure is a warning: a run unbound is slower,
 * not wrong. */
#include "config.h"
#include "bootstrap.h"
#include "check.h"
#include "gpu.h"
#include "log.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include <hwloc/cudart.h>
#endif

int ls_parse_bind(const char *s, enum ls_bind *out)
{
    if (!strcmp(s, "auto"))
        *out = LS_BIND_AUTO;
    else if (!strcmp(s, "gpu"))
        *out = LS_BIND_GPU;
    else if (!strcmp(s, "none"))
        *out = LS_BIND_NONE;
    else
        return -1;
    return 0;
}

int ls_select_device(int local_rank, int local_size, int gpus, enum ls_devmode mode, int *device,
                     char *err, size_t errlen)
{
    *device = -1;
    if (mode == LS_DEV_CPU) return 0;
    if (gpus <= 0) {
        if (mode == LS_DEV_GPU) {
            snprintf(err, errlen, "--gpu given but no CUDA device is visible%s",
#ifdef HAVE_CUDA
                     " (check the driver and CUDA_VISIBLE_DEVICES)"
#else
                     " (this build has no CUDA backend: configure found no CUDA toolkit)"
#endif
            );
            return -1;
        }
        return 0;
    }
    if (local_size > gpus) {
        snprintf(err, errlen,
                 "this node runs %d ranks but sees %d GPU%s: start at most %d rank%s per node "
                 "(mpirun --npernode %d, or lockstep-run --gpus-per-node %d), or pass --cpu",
                 local_size, gpus, gpus == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s", gpus, gpus);
        return -1;
    }
    *device = local_rank;
    return 0;
}

void ls_share_of_set(hwloc_topology_t topo, hwloc_const_cpuset_t within, int index, int count,
                     hwloc_cpuset_t out)
{
    hwloc_bitmap_zero(out);
    if (count <= 1) {
        hwloc_bitmap_copy(out, within);
        return;
    }
    /* Split by cores when there is at least one per share, else by PUs, round-robin-free:
     * contiguous blocks keep a share on one socket and one cache where possible. */
    hwloc_obj_type_t type = HWLOC_OBJ_CORE;
    int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, within, type);
    if (n < count) {
        type = HWLOC_OBJ_PU;
        n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, within, type);
    }
    if (n <= 0) {
        hwloc_bitmap_copy(out, within);
        return;
    }
    if (n < count) { /* fewer PUs than shares: shares overlap, one PU each */
        hwloc_obj_t o = hwloc_get_obj_inside_cpuset_by_type(topo, within, type, index % n);
        hwloc_bitmap_and(out, o->cpuset, within);
        return;
    }
    int base = n / count, extra = n % count;
    int first = index * base + (index < extra ? index : extra);
    int len = base + (index < extra ? 1 : 0);
    for (int i = first; i < first + len; i++) {
        hwloc_obj_t o = hwloc_get_obj_inside_cpuset_by_type(topo, within, type, i);
        hwloc_bitmap_or(out, out, o->cpuset);
    }
    hwloc_bitmap_and(out, out, within);
}

void ls_numa_of_set(hwloc_topology_t topo, hwloc_const_cpuset_t set, char *out, size_t outlen)
{
    hwloc_nodeset_t ns = hwloc_bitmap_alloc();
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
        if (o->cpuset && hwloc_bitmap_intersects(o->cpuset, set)) hwloc_bitmap_set(ns, o->os_index);
    }
    if (hwloc_bitmap_iszero(ns))
        snprintf(out, outlen, "-");
    else
        hwloc_bitmap_list_snprintf(out, outlen, ns);
    hwloc_bitmap_free(ns);
}

int ls_agree(int ok)
{
    int mine = ok ? INT_MAX : ls_self_rank(), first = INT_MAX;
    CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == INT_MAX) return 1;
    if (ls_self_rank() == 0 && ok)
        ls_error("stopping: rank %d reported an error (see its message)", first);
    return 0;
}

static void find_placement(struct ls_ctx *c)
{
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                  &c->node_comm));
    CHECK_MPI(MPI_Comm_rank(c->node_comm, &c->local_rank));
    CHECK_MPI(MPI_Comm_size(c->node_comm, &c->local_size));
    MPI_Comm leaders;
    CHECK_MPI(
        MPI_Comm_split(MPI_COMM_WORLD, c->local_rank == 0 ? 0 : MPI_UNDEFINED, c->rank, &leaders));
    int ids[2] = {0, 0};
    if (c->local_rank == 0) {
        CHECK_MPI(MPI_Comm_rank(leaders, &ids[0]));
        CHECK_MPI(MPI_Comm_size(leaders, &ids[1]));
        CHECK_MPI(MPI_Comm_free(&leaders));
    }
    CHECK_MPI(MPI_Bcast(ids, 2, MPI_INT, 0, c->node_comm));
    c->node = ids[0];
    c->nnodes = ids[1];
}

/* The cpuset this rank should run on, or NULL to leave it as it is. */
static hwloc_cpuset_t choose_binding(struct ls_ctx *c, enum ls_bind mode)
{
    if (mode == LS_BIND_NONE) return NULL;
    hwloc_const_cpuset_t all = hwloc_topology_get_allowed_cpuset(c->topo);
    hwloc_cpuset_t set = hwloc_bitmap_alloc();
    if (c->device >= 0) {
        hwloc_cpuset_t near = hwloc_bitmap_dup(all);
#ifdef HAVE_CUDA
        if (hwloc_cudart_get_device_cpuset(c->topo, c->device, near) != 0) {
            ls_warn("--bind: hwloc found no CPU locality for GPU %d; using all CPUs", c->device);
            hwloc_bitmap_copy(near, all);
        }
#endif
        hwloc_bitmap_and(near, near, all);
        if (hwloc_bitmap_iszero(near)) hwloc_bitmap_copy(near, all);
        /* ranks whose GPUs are near the same CPUs split those CPUs */
        char mine[256], *sets = malloc((size_t)c->local_size * sizeof mine);
        CHECK_ALLOC(sets);
        memset(mine, 0, sizeof mine);
        hwloc_bitmap_list_snprintf(mine, sizeof mine, near);
        CHECK_MPI(
            MPI_Allgather(mine, sizeof mine, MPI_CHAR, sets, sizeof mine, MPI_CHAR, c->node_comm));
        int index = 0, count = 0;
        for (int r = 0; r < c->local_size; r++) {
            if (strcmp(sets + (size_t)r * sizeof mine, mine) != 0) continue;
            if (r < c->local_rank) index++;
            count++;
        }
        free(sets);
        ls_share_of_set(c->topo, near, index, count, set);
        hwloc_bitmap_free(near);
    } else if (mode == LS_BIND_GPU) {
        hwloc_bitmap_free(set);
        ls_warn("--bind=gpu on a CPU run: no GPU to bind near; leaving the binding as it is");
        return NULL;
    } else {
        ls_share_of_set(c->topo, all, c->local_rank, c->local_size, set);
    }
    return set;
}

static void bind_rank(struct ls_ctx *c, enum ls_bind mode)
{
    hwloc_cpuset_t set = choose_binding(c, mode);
    if (set) {
        char want[256];
        hwloc_bitmap_list_snprintf(want, sizeof want, set);
        if (hwloc_set_cpubind(c->topo, set, HWLOC_CPUBIND_PROCESS) != 0)
            ls_warn("--bind: could not bind to CPUs %s: %s", want, strerror(errno));
        if (hwloc_set_membind(c->topo, set, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_PROCESS) != 0 &&
            hwloc_get_nbobjs_by_type(c->topo, HWLOC_OBJ_NUMANODE) > 1)
            ls_warn("--bind: could not bind memory near CPUs: %s", strerror(errno));
        hwloc_bitmap_free(set);
    }
    /* report what is in force, whoever set it */
    hwloc_cpuset_t now = hwloc_bitmap_alloc();
    if (hwloc_get_cpubind(c->topo, now, HWLOC_CPUBIND_PROCESS) != 0)
        hwloc_bitmap_copy(now, hwloc_topology_get_allowed_cpuset(c->topo));
    hwloc_bitmap_list_snprintf(c->cpuset, sizeof c->cpuset, now);
    ls_numa_of_set(c->topo, now, c->numa, sizeof c->numa);
    c->ncpus = hwloc_get_nbobjs_inside_cpuset_by_type(c->topo, now, HWLOC_OBJ_PU);
    if (c->ncpus < 1) c->ncpus = 1;
    hwloc_bitmap_free(now);
}

void ls_bootstrap(int *argc, char ***argv, const struct ls_common_opts *o, struct ls_ctx *c)
{
    memset(c, 0, sizeof *c);
    int provided = 0;
    CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    /* errors come back to CHECK_MPI, which names the rank and call before aborting */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    if (gethostname(c->host, sizeof c->host) != 0) strcpy(c->host, "?");
    c->host[sizeof c->host - 1] = 0;
    ls_set_identity(c->rank, c->host);
    ls_install_crash_handlers();
    find_placement(c);

    char err[512] = "";
    c->gpus_visible = o->device == LS_DEV_CPU ? 0 : ls_gpu_count();
    int ok = ls_select_device(c->local_rank, c->local_size, c->gpus_visible, o->device, &c->device,
                              err, sizeof err) == 0;
    if (!ok) ls_error("%s", err);
    if (!ls_agree(ok)) ls_abort_quiet(c);

    /* all ranks on GPUs or all on CPUs: a mixed job cannot share one collective backend */
    int on_gpu = c->device >= 0, lo = 0, hi = 0;
    CHECK_MPI(MPI_Allreduce(&on_gpu, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(&on_gpu, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    ok = lo == hi;
    if (!ok && !on_gpu)
        ls_error("this rank sees no GPU while others run on GPUs: check CUDA_VISIBLE_DEVICES "
                 "on every node, or pass --cpu to run all ranks on CPUs");
    if (!ls_agree(ok)) ls_abort_quiet(c);

    if (hwloc_topology_init(&c->topo) != 0 || hwloc_topology_load(c->topo) != 0) {
        ls_warn("hwloc could not read the topology: %s; running unbound", strerror(errno));
        snprintf(c->cpuset, sizeof c->cpuset, "?");
        snprintf(c->numa, sizeof c->numa, "?");
        c->ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    } else {
        bind_rank(c, o->bind);
    }
    if (c->device >= 0) ls_gpu_use(c->device);
}

_Noreturn void ls_abort_quiet(struct ls_ctx *c)
{
    (void)c;
    fflush(stdout);
    fflush(stderr);
    MPI_Finalize();
    exit(1);
}

void ls_shutdown(struct ls_ctx *c)
{
    if (c->topo) hwloc_topology_destroy(c->topo);
    c->topo = NULL;
    if (c->node_comm != MPI_COMM_NULL && c->node_comm) MPI_Comm_free(&c->node_comm);
    fflush(stdout);
    MPI_Finalize();
}
