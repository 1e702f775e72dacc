/* lockstep info: where every rank runs and with what. Each rank fills a fixed-size record,
 * rank 0 gathers them (MPI_Gather of bytes) and prints one table, or JSON. The leader of each
 * node also classifies the link between every pair of the node's GPUs. Last, a real all-reduce
 * through the job's communicator (NCCL on GPUs, MPI on CPUs) checks the bootstrap end to end:
 * a job whose info passes can run collectives. */
#include "config.h"
#include "args.h"
#include "bootstrap.h"
#include "check.h"
#include "comm.h"
#include "commands.h"
#include "gpu.h"
#include "log.h"
#include "kernels/selftest.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODE_GPUS 16

struct rank_info {
    int rank, node, local_rank, local_size, device, ncpus;
    char host[64];
    char gpu[96];
    char pci[32];
    double mem_gib;
    int cc_major, cc_minor, sms;
    char cpuset[256];
    char numa[64];
    char mpi_ver[128];
    char nccl_ver[32];
    char cuda_ver[64];
    char hwloc_ver[32];
};

struct node_links {
    int node, ngpus; /* ngpus == 0: this record carries no links */
    char host[64];
    char link[MAX_NODE_GPUS][MAX_NODE_GPUS][24];
};

static void fill_rank_info(const struct ls_ctx *c, struct rank_info *r)
{
    memset(r, 0, sizeof *r);
    r->rank = c->rank;
    r->node = c->node;
    r->local_rank = c->local_rank;
    r->local_size = c->local_size;
    r->device = c->device;
    r->ncpus = c->ncpus;
    snprintf(r->host, sizeof r->host, "%s", c->host);
    snprintf(r->cpuset, sizeof r->cpuset, "%s", c->cpuset);
    snprintf(r->numa, sizeof r->numa, "%s", c->numa);
    if (c->device >= 0) {
        struct ls_gpu_props p;
        if (ls_gpu_props(c->device, &p) == 0) {
            snprintf(r->gpu, sizeof r->gpu, "%s", p.name);
            snprintf(r->pci, sizeof r->pci, "%s", p.pci);
            r->mem_gib = (double)p.mem_total / (1024.0 * 1024.0 * 1024.0);
            r->cc_major = p.cc_major;
            r->cc_minor = p.cc_minor;
            r->sms = p.sms;
        }
    } else {
        snprintf(r->gpu, sizeof r->gpu, "cpu");
    }
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    char *cut = strpbrk(lib, ",\n");
    if (cut) *cut = 0;
    snprintf(r->mpi_ver, sizeof r->mpi_ver, "%.127s", lib);
    ls_nccl_version(r->nccl_ver, sizeof r->nccl_ver);
    ls_cuda_version(r->cuda_ver, sizeof r->cuda_ver);
    unsigned hv = hwloc_get_api_version();
    snprintf(r->hwloc_ver, sizeof r->hwloc_ver, "%u.%u.%u", hv >> 16, (hv >> 8) & 0xff, hv & 0xff);
}

static void fill_node_links(const struct ls_ctx *c, struct node_links *l)
{
    memset(l, 0, sizeof *l);
    l->node = c->node;
    snprintf(l->host, sizeof l->host, "%s", c->host);
    if (c->local_rank != 0 || c->device < 0) return;
    int n = c->gpus_visible < MAX_NODE_GPUS ? c->gpus_visible : MAX_NODE_GPUS;
    l->ngpus = n;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) ls_gpu_link(a, b, l->link[a][b], sizeof l->link[a][b]);
}

struct comm_check {
    int ok;
    double usec;
    char backend[16];
    char detail[128];
};

/* all-reduce of a known pattern: rank r contributes (r + 1) * (i % 7 + 1); the sum is exact in
 * fp32 for any job size we run, so the check is equality, not a tolerance */
static void check_allreduce(const struct ls_ctx *c, struct comm_check *out)
{
    memset(out, 0, sizeof *out);
    const size_t n = 4096;
    struct ls_comm *comm = c->device >= 0 ? ls_comm_nccl_create(MPI_COMM_WORLD, c->device)
                                          : ls_comm_mpi_create(MPI_COMM_WORLD);
    snprintf(out->backend, sizeof out->backend, "%s", comm->name);
    float *host = malloc(n * sizeof *host);
    CHECK_ALLOC(host);
    void *buf = host;
    if (c->device >= 0) buf = ls_gpu_alloc(n * sizeof(float));
    double best = 1e30;
    for (int iter = 0; iter < 5; iter++) {
        if (c->device >= 0) {
#ifdef HAVE_CUDA
            ls_selftest_fill(buf, n, (float)(c->rank + 1), NULL);
#endif
        } else {
            for (size_t i = 0; i < n; i++) host[i] = (float)(c->rank + 1) * (float)(i % 7 + 1);
        }
        if (c->device >= 0) ls_gpu_sync();
        comm->barrier(comm);
        double t0 = MPI_Wtime();
        comm->allreduce_sum(comm, buf, n, LS_F32, NULL);
        if (c->device >= 0) ls_gpu_sync();
        double dt = MPI_Wtime() - t0;
        if (dt < best) best = dt;
    }
    if (c->device >= 0) ls_gpu_to_host(host, buf, n * sizeof(float));
    double ranks_sum = (double)c->size * (c->size + 1) / 2.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (host[i] != (float)(ranks_sum * (double)(i % 7 + 1))) bad++;
    int ok = bad == 0, all_ok = 0;
    CHECK_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    double worst = 0;
    CHECK_MPI(MPI_Allreduce(&best, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    out->ok = all_ok;
    out->usec = worst * 1e6;
    if (!ok) ls_error("info: all-reduce check: %zu of %zu values wrong on this rank", bad, n);
    snprintf(out->detail, sizeof out->detail, "%zu floats, every element equal on every rank", n);
    if (c->device >= 0) ls_gpu_free(buf);
    free(host);
    comm->destroy(comm);
}

static void print_table(const struct ls_ctx *c, const struct rank_info *ri,
                        const struct node_links *nl, const struct comm_check *cc)
{
    printf("lockstep %s: %d rank%s on %d node%s\n", PACKAGE_VERSION, c->size,
           c->size == 1 ? "" : "s", c->nnodes, c->nnodes == 1 ? "" : "s");
    printf("%-4s %-4s %-5s %-16s %-28s %-13s %-10s %-18s %-4s\n", "rank", "node", "local", "host",
           "device", "pci", "memory", "cpus", "numa");
    for (int r = 0; r < c->size; r++) {
        const struct rank_info *x = &ri[r];
        char dev[64], mem[24] = "-";
        if (x->device >= 0) {
            snprintf(dev, sizeof dev, "GPU%d %s (sm_%d%d)", x->device, x->gpu, x->cc_major,
                     x->cc_minor);
            snprintf(mem, sizeof mem, "%.1f GiB", x->mem_gib);
        } else {
            snprintf(dev, sizeof dev, "cpu (%d threads)", x->ncpus);
        }
        printf("%-4d %-4d %-5d %-16s %-28s %-13s %-10s %-18s %-4s\n", x->rank, x->node,
               x->local_rank, x->host, dev, x->device >= 0 ? x->pci : "-", mem, x->cpuset, x->numa);
    }
    printf("versions: %s; NCCL %s; CUDA %s; hwloc %s\n", ri[0].mpi_ver, ri[0].nccl_ver,
           ri[0].cuda_ver, ri[0].hwloc_ver);
    for (int r = 1; r < c->size; r++)
        if (strcmp(ri[r].mpi_ver, ri[0].mpi_ver) || strcmp(ri[r].nccl_ver, ri[0].nccl_ver) ||
            strcmp(ri[r].cuda_ver, ri[0].cuda_ver))
            printf("  rank %d differs: %s; NCCL %s; CUDA %s\n", r, ri[r].mpi_ver, ri[r].nccl_ver,
                   ri[r].cuda_ver);
    for (int r = 0; r < c->size; r++) {
        const struct node_links *l = &nl[r];
        if (l->ngpus < 2) continue;
        printf("GPU links on node %d (%s):\n%-6s", l->node, l->host, "");
        for (int b = 0; b < l->ngpus; b++) printf(" GPU%-12d", b);
        printf("\n");
        for (int a = 0; a < l->ngpus; a++) {
            printf("GPU%-3d", a);
            for (int b = 0; b < l->ngpus; b++) printf(" %-15s", l->link[a][b]);
            printf("\n");
        }
    }
    printf("all-reduce check (%s, %d rank%s): %s, %s, %.1f us\n", cc->backend, c->size,
           c->size == 1 ? "" : "s", cc->ok ? "ok" : "FAILED", cc->detail, cc->usec);
}

static void print_json(const struct ls_ctx *c, const struct rank_info *ri,
                       const struct node_links *nl, const struct comm_check *cc)
{
    json_t *root = json_object(), *ranks = json_array(), *nodes = json_array();
    for (int r = 0; r < c->size; r++) {
        const struct rank_info *x = &ri[r];
        json_t *o =
            json_pack("{s:i, s:i, s:i, s:i, s:s, s:s, s:s, s:i}", "rank", x->rank, "node", x->node,
                      "local_rank", x->local_rank, "local_size", x->local_size, "host", x->host,
                      "cpuset", x->cpuset, "numa", x->numa, "threads", x->ncpus);
        if (x->device >= 0)
            json_object_set_new(o, "gpu",
                                json_pack("{s:i, s:s, s:s, s:f, s:s, s:i}", "index", x->device,
                                          "name", x->gpu, "pci", x->pci, "memory_gib", x->mem_gib,
                                          "arch", "", "sms", x->sms));
        else
            json_object_set_new(o, "gpu", json_null());
        json_object_set_new(o, "versions",
                            json_pack("{s:s, s:s, s:s, s:s}", "mpi", x->mpi_ver, "nccl",
                                      x->nccl_ver, "cuda", x->cuda_ver, "hwloc", x->hwloc_ver));
        if (x->device >= 0) {
            char arch[16];
            snprintf(arch, sizeof arch, "sm_%d%d", x->cc_major, x->cc_minor);
            json_object_set_new(json_object_get(o, "gpu"), "arch", json_string(arch));
        }
        json_array_append_new(ranks, o);
    }
    for (int r = 0; r < c->size; r++) {
        const struct node_links *l = &nl[r];
        if (l->ngpus < 1) continue;
        json_t *m = json_array();
        for (int a = 0; a < l->ngpus; a++) {
            json_t *row = json_array();
            for (int b = 0; b < l->ngpus; b++)
                json_array_append_new(row, json_string(l->link[a][b]));
            json_array_append_new(m, row);
        }
        json_array_append_new(
            nodes, json_pack("{s:i, s:s, s:o}", "node", l->node, "host", l->host, "gpu_links", m));
    }
    json_object_set_new(root, "version", json_string(PACKAGE_VERSION));
    json_object_set_new(root, "size", json_integer(c->size));
    json_object_set_new(root, "nodes_count", json_integer(c->nnodes));
    json_object_set_new(root, "ranks", ranks);
    json_object_set_new(root, "nodes", nodes);
    json_object_set_new(
        root, "allreduce_check",
        json_pack("{s:b, s:s, s:f}", "ok", cc->ok, "backend", cc->backend, "usec", cc->usec));
    json_dumpf(root, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(root);
}

static const char info_help[] =
    "usage: lockstep info [--json] [--cpu|--gpu] [--bind=auto|gpu|none]\n"
    "Run under mpirun: rank 0 prints every rank's node, host, GPU (or cpu), bound CPUs, NUMA\n"
    "node, library versions, the links between each node's GPUs, and checks an all-reduce.\n"
    "  --json               print JSON instead of a table\n" LS_COMMON_HELP;

int cmd_info(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             LS_COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    struct ls_common_opts common;
    ls_common_defaults(&common);
    int json = 0, reset = 1, opt;
    char err[256];
    while ((opt = ls_getopt(argc, argv, "jh", longopts, &reset, err, sizeof err)) != -1) {
        if (opt == 'j')
            json = 1;
        else if (opt == 'h') {
            ls_print0("%s", info_help);
            return 0;
        } else if (opt == '?')
            return ls_usage_error("info", err);
        else if (ls_common_opt(opt, optarg, &common, err, sizeof err) != 0)
            return ls_usage_error("info", err);
    }
    if (optind < argc) {
        snprintf(err, sizeof err, "unexpected argument '%s'", argv[optind]);
        return ls_usage_error("info", err);
    }

    struct ls_ctx ctx;
    ls_bootstrap(&argc, &argv, &common, &ctx);
    struct rank_info mine, *all = NULL;
    struct node_links links, *all_links = NULL;
    fill_rank_info(&ctx, &mine);
    fill_node_links(&ctx, &links);
    if (ctx.rank == 0) {
        all = calloc((size_t)ctx.size, sizeof *all);
        all_links = calloc((size_t)ctx.size, sizeof *all_links);
        CHECK_ALLOC(all);
        CHECK_ALLOC(all_links);
    }
    CHECK_MPI(
        MPI_Gather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Gather(&links, sizeof links, MPI_BYTE, all_links, sizeof links, MPI_BYTE, 0,
                         MPI_COMM_WORLD));
    struct comm_check cc;
    check_allreduce(&ctx, &cc);
    if (ctx.rank == 0) {
        if (json)
            print_json(&ctx, all, all_links, &cc);
        else
            print_table(&ctx, all, all_links, &cc);
        fflush(stdout);
    }
    free(all);
    free(all_links);
    ls_shutdown(&ctx);
    return cc.ok ? 0 : 1;
}
