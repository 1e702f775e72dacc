/* `lockstep launch`: what launcher/lockstep-run runs. It reads its flags, gathers the facts
 * of this node (visible GPUs, cores, root or not, the environment to forward), composes the
 * mpirun line with ls_launch_compose and replaces itself with mpirun, so mpirun's exit status
 * is the job's. It never starts MPI itself: it runs before any rank exists.
 *
 * Flags are read in order and stop at '--' or at the first word that is not a flag, so
 * everything from lockstep's subcommand on is passed through untouched, its own flags too. */
#include "config.h"
#include "args.h"
#include "commands.h"
#include "gpu.h"
#include "hostfile.h"
#include "log.h"

#include <errno.h>
#include <getopt.h>
#include <hwloc.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static const char usage_text[] =
    "usage: lockstep-run [options] -- <lockstep command and its options>\n"
    "       (lockstep launch [options] -- ...: the same, without the script)\n"
    "\n"
    "Starts one rank per GPU through mpirun (Open MPI 4 or 5), ranks packed by node, binding\n"
    "left to lockstep, NCCL_*, CUDA_*, LOCKSTEP_*, OMP_*, LD_LIBRARY_PATH and PATH forwarded,\n"
    "NCCL_NVLS_ENABLE=0 unless set.\n"
    "\n"
    "options:\n"
    "  --tp N               ranks (tensor-parallel degree); default: every GPU of this node,\n"
    "                       or every slot of the hostfile; 1 with --cpu on one node\n"
    "  --hostfile F         Open MPI hostfile ('host slots=N' per line); default: this node\n"
    "  --gpus-per-node G    ranks per node: default the visible GPUs (one node) or each\n"
    "                       host's slots (hostfile); with a hostfile, min(slots, G) per host\n"
    "  --cpu                run the ranks on CPUs (lockstep gets --cpu; no GPU needed)\n"
    "  --mpirun PATH        mpirun to use (default: $MPIRUN, else mpirun from PATH)\n"
    "  --extra-mpi-args S   more mpirun options, split like a shell would\n"
    "  --dry-run            print the mpirun command instead of running it\n"
    "  -h, --help           this help\n"
    "\n"
    "examples:\n"
    "  lockstep-run --tp 8 -- info\n"
    "  lockstep-run --hostfile hostfiles/two-nodes-8gpus --tp 16 -- info\n"
    "  lockstep-run --cpu --tp 2 --dry-run -- info\n";

enum {
    OPT_TP = LS_OPT_FIRST_FREE,
    OPT_HOSTFILE,
    OPT_GPUS_PER_NODE,
    OPT_DRY_RUN,
    OPT_MPIRUN,
    OPT_CPU,
    OPT_EXTRA,
};

/* physical cores, as Open MPI counts a node's slots */
static int count_cores(void)
{
    int n = 0;
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        hwloc_topology_destroy(topo);
    }
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n;
}

int cmd_launch(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"tp", required_argument, NULL, OPT_TP},
        {"hostfile", required_argument, NULL, OPT_HOSTFILE},
        {"gpus-per-node", required_argument, NULL, OPT_GPUS_PER_NODE},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"mpirun", required_argument, NULL, OPT_MPIRUN},
        {"cpu", no_argument, NULL, OPT_CPU},
        {"extra-mpi-args", required_argument, NULL, OPT_EXTRA},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct ls_launch_opts o = {0};
    const char *hostfile = NULL;
    int dry_run = 0;
    char err[1024];

    /* not ls_getopt: its leading ':' would hide the '+' that stops at lockstep's subcommand */
    optind = 0;
    opterr = 0;
    for (int opt; (opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1;) {
        long v = 0;
        switch (opt) {
        case OPT_TP:
            if (ls_parse_long("--tp", optarg, 1, LS_LAUNCH_RANKS_MAX, &v, err, sizeof err) != 0)
                return ls_usage_error("launch", err);
            o.tp = (int)v;
            break;
        case OPT_GPUS_PER_NODE:
            if (ls_parse_long("--gpus-per-node", optarg, 1, 4096, &v, err, sizeof err) != 0)
                return ls_usage_error("launch", err);
            o.gpus_per_node = (int)v;
            break;
        case OPT_HOSTFILE:
            hostfile = optarg;
            break;
        case OPT_DRY_RUN:
            dry_run = 1;
            break;
        case OPT_MPIRUN:
            o.mpirun = optarg;
            break;
        case OPT_CPU:
            o.cpu = 1;
            break;
        case OPT_EXTRA:
            o.extra_mpi_args = optarg;
            break;
        case 'h':
            ls_print0("%s", usage_text);
            return 0;
        case ':':
            snprintf(err, sizeof err, "flag '%s' needs a value", argv[optind - 1]);
            return ls_usage_error("launch", err);
        default: {
            const char *what = argv[optind - 1];
            if (optopt && optopt < 256 && strncmp(what, "--", 2))
                snprintf(err, sizeof err, "unknown flag '-%c'", optopt);
            else
                snprintf(err, sizeof err, "unknown flag '%s' (lockstep's own flags go after '--')",
                         what);
            return ls_usage_error("launch", err);
        }
        }
    }
    o.nargs = argc - optind;
    o.args = argv + optind;
    if (!o.mpirun) {
        const char *env = getenv("MPIRUN");
        o.mpirun = env && *env ? env : "mpirun";
    }

    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        ls_error("launch: cannot find this lockstep binary through /proc/self/exe: %s",
                 strerror(errno));
        return 1;
    }
    self[n] = 0;
    o.lockstep = self;

    struct ls_hostfile hf;
    if (hostfile && ls_hostfile_parse(hostfile, &hf, err, sizeof err) != 0) {
        ls_error("launch: %s", err);
        return 2;
    }
    struct ls_launch_site site = {
        .is_root = geteuid() == 0,
        .envp = environ,
    };
    if (!hostfile) {
        site.cores = count_cores();
        /* starting CUDA costs time; only a single-node GPU run needs the count */
        if (!o.cpu) site.gpus_visible = ls_gpu_count();
    }

    struct ls_launch_cmd cmd;
    int rc = ls_launch_compose(&o, hostfile ? &hf : NULL, &site, &cmd, err, sizeof err);
    if (hostfile) ls_hostfile_free(&hf);
    if (rc != 0) {
#ifndef HAVE_CUDA
        if (!o.cpu && !hostfile)
            strncat(err, " (this lockstep was built without CUDA)", sizeof err - strlen(err) - 1);
#endif
        ls_error("launch: %s", err);
        return 2;
    }
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (nvls && strcmp(nvls, "0"))
        ls_warn("launch: NCCL_NVLS_ENABLE=%s: NVLink multicast is meant to stay off (0)", nvls);

    if (dry_run) {
        char *line = ls_launch_cmd_string(&cmd);
        if (!line) {
            ls_error("launch: out of memory");
            ls_launch_cmd_free(&cmd);
            return 1;
        }
        ls_print0("%s\n", line);
        free(line);
        ls_launch_cmd_free(&cmd);
        return 0;
    }
    for (char **e = cmd.setenv; *e; e++) {
        char *eq = strchr(*e, '=');
        *eq = 0;
        setenv(*e, eq + 1, 1);
        *eq = '=';
    }
    fflush(NULL);
    execvp(cmd.argv[0], cmd.argv);
    ls_error("launch: cannot run '%s': %s (install Open MPI, or pass --mpirun PATH or set MPIRUN)",
             cmd.argv[0], strerror(errno));
    ls_launch_cmd_free(&cmd);
    return 127;
}
