/* libFuzzer target for the launcher's parsers and composer (launcher/hostfile.h): the hostfile
 * reader, the shell-like splitting of --extra-mpi-args, and the mpirun line composed from them.
 * A user's hostfile and flags are untrusted text, and what is composed is run on every node.
 * The input: 6 bytes of options (flags; --tp; --gpus-per-node; the GPUs and cores of the node),
 * then one line for --extra-mpi-args (also passed to lockstep as an argument), then the
 * hostfile's text (up to its first NUL, as parse_string takes it). Never a crash, leak or
 * out-of-bounds read; and these hold (abort: a finding):
 * - a rejected hostfile leaves an empty result and a message naming the file;
 * - an accepted one has at least one host, each a valid name given once (in any case), with
 *   counts in range and max_slots >= slots;
 * - split words, quoted again and split again, are the same words;
 * - a composed command has np in 1..LS_LAUNCH_RANKS_MAX ranks, np <= per_node x nnodes, mpirun
 *   first and the lockstep arguments last in order, and its one-line shell form splits back
 *   into exactly its environment assignments and its argv (what --dry-run prints is what runs).
 * Build with configure --enable-fuzz CC=clang; run as tests/fuzz/fuzz_hostfile CORPUS_DIR. */
#include "hostfile.h"

#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_hostfile(const struct ls_hostfile *hf)
{
    if (hf->nhosts < 1 || !hf->hosts || !hf->path) abort();
    for (int i = 0; i < hf->nhosts; i++) {
        const struct ls_host *h = &hf->hosts[i];
        size_t n = strnlen(h->name, sizeof h->name);
        if (n == 0 || n > LS_HOST_NAME_MAX || !isalnum((unsigned char)h->name[0])) abort();
        for (size_t j = 0; j < n; j++)
            if (!isalnum((unsigned char)h->name[j]) && !strchr("-._", h->name[j])) abort();
        if (h->slots < 0 || h->slots > LS_HOST_SLOTS_MAX) abort();
        if (h->max_slots < 0 || h->max_slots > LS_HOST_SLOTS_MAX) abort();
        if (h->max_slots && h->slots > h->max_slots) abort();
        if (h->colon_form && !h->slots) abort();
        if (h->line < 1) abort();
        for (int k = 0; k < i; k++)
            if (!strcasecmp(hf->hosts[k].name, h->name) || hf->hosts[k].line >= h->line) abort();
    }
}

/* words -> one line quoted as ls_launch_cmd_string quotes -> words again */
static void check_requote(char **words, int n)
{
    struct ls_launch_cmd c = {.argv = words, .argc = n};
    char *line = ls_launch_cmd_string(&c);
    if (!line) abort();
    char **again = NULL, err[256];
    int m = -1;
    if (ls_split_words(line, &again, &m, err, sizeof err) != 0 || m != n) abort();
    for (int i = 0; i < n; i++)
        if (strcmp(words[i], again[i])) abort();
    if (again[n]) abort();
    ls_words_free(again);
    free(line);
}

static void check_command(const struct ls_launch_cmd *c, const struct ls_launch_opts *o)
{
    if (c->np < 1 || c->np > LS_LAUNCH_RANKS_MAX || c->per_node < 1 || c->nnodes < 1) abort();
    if ((long long)c->per_node * c->nnodes < c->np) abort();
    if (o->tp && c->np != o->tp) abort();
    if (c->argc < 1 || c->argv[c->argc] || strcmp(c->argv[0], o->mpirun)) abort();
    /* the line ends with lockstep and its arguments in order, --cpu added after the subcommand
     * on CPU runs that do not pass it */
    const char *tail[16];
    int nt = 0, has_cpu = 0;
    for (int i = 0; i < o->nargs; i++) has_cpu |= !strcmp(o->args[i], "--cpu");
    tail[nt++] = o->lockstep;
    for (int i = 0; i < o->nargs; i++) {
        tail[nt++] = o->args[i];
        if (i == 0 && o->cpu && !has_cpu) tail[nt++] = "--cpu";
    }
    if (c->argc < nt + 1) abort();
    for (int i = 0; i < nt; i++)
        if (strcmp(c->argv[c->argc - nt + i], tail[i])) abort();

    /* the printed line splits back into the environment and argv */
    char *line = ls_launch_cmd_string(c);
    if (!line) abort();
    char **words = NULL, err[256];
    int n = -1, nenv = 0;
    while (c->setenv[nenv]) nenv++;
    if (ls_split_words(line, &words, &n, err, sizeof err) != 0) abort();
    if (n != nenv + c->argc) abort();
    for (int i = 0; i < nenv; i++)
        if (strcmp(words[i], c->setenv[i])) abort();
    for (int i = 0; i < c->argc; i++)
        if (strcmp(words[nenv + i], c->argv[i])) abort();
    ls_words_free(words);
    free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 6) return 0;
    const uint8_t flags = data[0];
    const int tp = (data[1] | data[2] << 8) % (LS_LAUNCH_RANKS_MAX + 1);
    const int gpus_per_node = data[3] % 17, gpus_visible = data[4] % 9, cores = data[5] % 65;
    const char *rest = (const char *)data + 6;
    size_t n = size - 6;
    const char *nl = memchr(rest, '\n', n);
    size_t elen = nl ? (size_t)(nl - rest) : n;
    char *extra = strndup(rest, elen); /* a flag's value ends at a NUL too */
    const char *ftext = nl ? nl + 1 : rest + n;
    char *text = strndup(ftext, n - (size_t)(ftext - rest));
    if (!extra || !text) abort();

    char err[1024];
    struct ls_hostfile hf;
    err[0] = 0;
    int have_hf = 0;
    if (flags & 1) {
        if (ls_hostfile_parse_string(text, "hosts.txt", &hf, err, sizeof err) == 0) {
            check_hostfile(&hf);
            have_hf = 1;
        } else if (hf.hosts || hf.path || hf.nhosts || strncmp(err, "hostfile hosts.txt", 18)) {
            abort();
        }
    }

    char **words = NULL;
    int nwords = -1;
    err[0] = 0;
    if (ls_split_words(extra, &words, &nwords, err, sizeof err) == 0) {
        if (nwords < 0 || !words) abort();
        check_requote(words, nwords);
        ls_words_free(words);
    } else if (!err[0] || words) {
        abort();
    }

    char *const args[] = {"generate", "-m", "/models/a model's dir", "-p", extra, NULL};
    char *const envp[] = {"PATH=/usr/bin:/bin",
                          "NCCL_DEBUG=INFO",
                          "HOME=/root",
                          "LOCKSTEP_MODEL=/m/x y.gguf",
                          "NCCL_DEBUG=WARN",
                          "CUDA_=empty name",
                          (flags & 32) ? "NCCL_NVLS_ENABLE=1" : "OMP_NUM_THREADS=2",
                          NULL};
    struct ls_launch_opts o = {.tp = tp,
                               .gpus_per_node = gpus_per_node,
                               .cpu = (flags >> 1) & 1,
                               .mpirun = "/usr/bin/mpirun",
                               .extra_mpi_args = (flags & 4) ? extra : NULL,
                               .lockstep = "/opt/lockstep/bin/lockstep",
                               .nargs = (flags & 16) ? 0 : 5,
                               .args = args};
    struct ls_launch_site site = {
        .gpus_visible = gpus_visible, .cores = cores, .is_root = (flags >> 3) & 1, .envp = envp};
    struct ls_launch_cmd cmd;
    err[0] = 0;
    if (ls_launch_compose(&o, have_hf ? &hf : NULL, &site, &cmd, err, sizeof err) == 0) {
        check_command(&cmd, &o);
        ls_launch_cmd_free(&cmd);
    } else if (!err[0] || cmd.argv || cmd.setenv) {
        abort();
    }
    if (have_hf) ls_hostfile_free(&hf);
    free(extra);
    free(text);
    return 0;
}
