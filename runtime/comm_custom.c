/* See comm_custom.h; the protocol is in kernels/allreduce.h. This file does the set-up that
 * must never happen inside the decode step: buffers, IPC handles, the reachability probe. Every
 * decision that changes which collectives a rank calls is agreed on by all ranks (MIN over
 * MPI) before acting on it, so a failure on one rank can not leave the others waiting. */
#include "config.h"
#include "comm_custom.h"
#include "check.h"
#include "log.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "kernels/allreduce.h"

#include <cuda_runtime_api.h>
#include <time.h>
#include <unistd.h>

_Static_assert((int)LS_F32 == (int)LS_AR_F32 && (int)LS_BF16 == (int)LS_AR_BF16,
               "enum ls_ar_dtype must match enum ls_dtype");

/* rank 0's environment, broadcast as raw bytes */
struct custom_cfg {
    long long oneshot_max, twoshot_max, timeout_ms, ll_max;
    int threads, max_blocks, disable, fence_all, spread, ll_batch;
};

struct custom {
    MPI_Comm mpi;
    struct ls_comm *fallback;
    struct ls_comm_custom_info info;
    struct ls_ar_state st;       /* what the kernels get */
    void *mybuf;                 /* our registered buffer */
    void *ctl;                   /* struct ls_ar_ctl, device */
    struct ls_ar_err *err;       /* host-mapped */
    int opened[LS_AR_MAX_RANKS]; /* st.buf[q] came from cudaIpcOpenMemHandle */
    char async_why[320];         /* custom_async_error's message (the watchdog's thread) */
};

static void custom_destroy(struct ls_comm *c);
static const char *custom_async_error(struct ls_comm *c);

static int is_custom(struct ls_comm *c)
{
    return c && c->destroy == custom_destroy;
}

/* ---- configuration ---- */

/* bytes with an optional K/M/G (binary) suffix; dies naming the variable on anything else */
static long long env_bytes(const char *name, long long def)
{
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10, end++;
    else if (*end == 'm' || *end == 'M')
        shift = 20, end++;
    else if (*end == 'g' || *end == 'G')
        shift = 30, end++;
    if (end == s || *end || s[0] == '-' || v > (1ull << 40) >> shift) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s=%s: expected a byte count such as 262144, 256K or 8M", name,
                 s);
        ls_die(__FILE__, __LINE__, "getenv", msg);
    }
    return (long long)(v << shift);
}

static long long env_int(const char *name, long long def, long long lo, long long hi)
{
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s=%s: expected an integer in [%lld, %lld]", name, s, lo, hi);
        ls_die(__FILE__, __LINE__, "getenv", msg);
    }
    return v;
}

static struct custom_cfg read_cfg(int size)
{
    struct custom_cfg g;
    memset(&g, 0, sizeof g);
    /* Each GPU sends (size-1) copies of the message in one-shot, 2(size-1)/size in two-shot:
     * the same for 2 ranks, where two-shot only saves local reduction traffic and pays a
     * second exchange, so one-shot should reach further there. 4 x H200 (NVSwitch; sweep of
     * the eighteenth session, us in a graph, bf16 / f32): one-shot over flags ahead of
     * two-shot up to 512 KB (14.10 / 13.78 against 14.72 / 14.41), behind at 1 MB. 8 ranks:
     * a guess, not measured. */
    long long one_def = size <= 4 ? 512 << 10 : 64 << 10;
    g.oneshot_max = env_bytes("LOCKSTEP_AR_ONESHOT_MAX", one_def);
    /* two-shot against NCCL in a graph: 2 x H200 ahead up to 32 MB (16 MB 64 vs 75 us, 32 MB
     * 123 vs 135), behind at 64 MB; 4 x H200 ahead up to 16 MB (90.3 / 89.4 against 94.5 /
     * 96.1), behind at 32 MB (docs/BENCHMARKS.md); 8 ranks: not measured */
    long long two_def = size <= 2 ? 32 << 20 : size <= 4 ? 16 << 20 : 8 << 20;
    g.twoshot_max = env_bytes("LOCKSTEP_AR_TWOSHOT_MAX", two_def);
    g.ll_max = env_bytes("LOCKSTEP_AR_LL_MAX", 64 << 10);
    g.timeout_ms = env_int("LOCKSTEP_AR_TIMEOUT_MS", 10000, 1, 3600 * 1000);
    g.threads = (int)env_int("LOCKSTEP_AR_THREADS", 512, 32, LS_AR_MAX_THREADS);
    g.max_blocks = (int)env_int("LOCKSTEP_AR_MAX_BLOCKS", 64, 1, LS_AR_MAX_BLOCKS);
    g.disable = (int)env_int("LOCKSTEP_AR_DISABLE", 0, 0, 1);
    g.fence_all = (int)env_int("LOCKSTEP_AR_FENCE_ALL", 1, 0, 1);
    g.spread = (int)env_int("LOCKSTEP_AR_SPREAD", 1, 0, 1);
    /* the peers' lines loaded in one batch (ll_sum_batched): at 2 ranks measured ahead in the
     * step (8B TP=2 on 2 x H200, two rounds: 2.384 / 2.388 against 2.403 / 2.406 ms a token; the
     * one-shot's 16 KB 3.7-4.5 against 4.0-4.6 us) and in the sweep at every LL size (8 KB 3.96
     * against 4.26 us; docs/BENCHMARKS.md, forty-fifth session). At 3 ranks or more, where it was
     * meant to save one L2 round trip a peer, it has not run on a GPU: off there until it has */
    g.ll_batch = (int)env_int("LOCKSTEP_AR_LL_BATCH", size == 2, 0, 1);
    if (g.threads % 32) {
        char msg[128];
        snprintf(msg, sizeof msg, "LOCKSTEP_AR_THREADS=%d: must be a multiple of 32", g.threads);
        ls_die(__FILE__, __LINE__, "getenv", msg);
    }
    return g;
}

/* data-area bytes for any f32 or bf16 message up to max_bytes, one-shot or two-shot */
static size_t data_bytes_for(int size, size_t max_bytes)
{
    size_t need = 0;
    for (size_t es = 2; es <= 4; es += 2) {
        size_t n = max_bytes / es;
        size_t a = ls_ar_oneshot_need(size, n, es), b = ls_ar_twoshot_need(size, n, es);
        if (a > need) need = a;
        if (b > need) need = b;
    }
    return need < 256 ? 256 : need;
}

/* ---- agreement ---- */

static int agree(MPI_Comm comm, int ok)
{
    int all = 0;
    CHECK_MPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm));
    return all;
}

/* every rank learns the lowest failing rank's reason */
static void share_why(MPI_Comm comm, int rank, int ok, char *why, size_t len)
{
    int mine = ok ? INT_MAX : rank, first = INT_MAX;
    CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first != INT_MAX) CHECK_MPI(MPI_Bcast(why, (int)len, MPI_CHAR, first, comm));
}

/* ---- set-up steps; each returns 1 on success or 0 with `why` filled ---- */

static int same_node(struct custom *m, struct ls_comm *c, char *why, size_t len)
{
    MPI_Comm node;
    int node_size = 0;
    CHECK_MPI(MPI_Comm_split_type(m->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    CHECK_MPI(MPI_Comm_size(node, &node_size));
    MPI_Comm_free(&node);
    if (node_size != c->size) {
        snprintf(why, len, "rank %d shares its node with %d of %d ranks: CUDA IPC needs one node",
                 c->rank, node_size, c->size);
        return 0;
    }
    if (c->size > LS_AR_MAX_RANKS) {
        snprintf(why, len, "%d ranks, the custom all-reduce handles at most %d", c->size,
                 LS_AR_MAX_RANKS);
        return 0;
    }
    return 1;
}

/* every peer on its own GPU, visible here with peer access (IPC maps through peer access) */
static int peers_visible(struct custom *m, struct ls_comm *c, int dev, char *why, size_t len)
{
    char mine[32] = "", *all = calloc((size_t)c->size, 32);
    CHECK_ALLOC(all);
    CHECK_CUDA(cudaDeviceGetPCIBusId(mine, sizeof mine, dev));
    CHECK_MPI(MPI_Allgather(mine, 32, MPI_CHAR, all, 32, MPI_CHAR, m->mpi));
    int ok = 1;
    for (int q = 0; q < c->size && ok; q++) {
        if (q == c->rank) continue;
        int pdev = -1, can = 0;
        if (cudaDeviceGetByPCIBusId(&pdev, all + 32 * q) != cudaSuccess) {
            cudaGetLastError();
            snprintf(why, len,
                     "rank %d does not see rank %d's GPU %s (CUDA_VISIBLE_DEVICES?); IPC needs it",
                     c->rank, q, all + 32 * q);
            ok = 0;
        } else if (pdev == dev) {
            /* kernels of two processes on one GPU time-slice: each would spin out its slice
             * waiting for the other */
            snprintf(why, len, "ranks %d and %d share GPU %s", c->rank, q, mine);
            ok = 0;
        } else if (cudaDeviceCanAccessPeer(&can, dev, pdev) != cudaSuccess || !can) {
            cudaGetLastError();
            snprintf(why, len, "no peer access from GPU %d (rank %d) to GPU %d (rank %d)", dev,
                     c->rank, pdev, q);
            ok = 0;
        }
    }
    free(all);
    return ok;
}

static void free_buffers(struct custom *m, int rank, int size)
{
    for (int q = 0; q < size; q++)
        if (q != rank && m->opened[q]) {
            cudaIpcCloseMemHandle(m->st.buf[q]);
            m->opened[q] = 0;
        }
    if (m->mybuf) cudaFree(m->mybuf);
    if (m->ctl) cudaFree(m->ctl);
    if (m->err) cudaFreeHost(m->err);
    m->mybuf = m->ctl = NULL;
    m->err = NULL;
    memset(m->st.buf, 0, sizeof m->st.buf);
}

static void alloc_buffers(struct custom *m)
{
    size_t bytes = m->st.ll_off + 2 * m->st.ll_bytes;
    CHECK_CUDA(cudaMalloc(&m->mybuf, bytes));
    /* flags must start below every epoch: zero, and finished before any peer can write */
    CHECK_CUDA(cudaMemset(m->mybuf, 0, bytes));
    CHECK_CUDA(cudaMalloc(&m->ctl, sizeof(struct ls_ar_ctl)));
    CHECK_CUDA(cudaMemset(m->ctl, 0, sizeof(struct ls_ar_ctl)));
    CHECK_CUDA(cudaHostAlloc((void **)&m->err, sizeof *m->err, cudaHostAllocMapped));
    memset((void *)m->err, 0, sizeof *m->err);
    void *dev_err = NULL;
    CHECK_CUDA(cudaHostGetDevicePointer(&dev_err, m->err, 0));
    CHECK_CUDA(cudaDeviceSynchronize());
    m->info.buffer_bytes = bytes;
    m->st.buf[m->st.rank] = m->mybuf;
    m->st.ctl = m->ctl;
    m->st.err = dev_err;
}

static int open_peers(struct custom *m, struct ls_comm *c, char *why, size_t len)
{
    cudaIpcMemHandle_t mine, *all = calloc((size_t)c->size, sizeof *all);
    CHECK_ALLOC(all);
    memset(&mine, 0, sizeof mine);
    int ok = 1;
    if (cudaIpcGetMemHandle(&mine, m->mybuf) != cudaSuccess) {
        snprintf(why, len, "cudaIpcGetMemHandle on rank %d: %s", c->rank,
                 cudaGetErrorString(cudaGetLastError()));
        ok = 0;
    }
    CHECK_MPI(
        MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, m->mpi));
    if (agree(m->mpi, ok)) {
        for (int q = 0; q < c->size && ok; q++) {
            if (q == c->rank) continue;
            void *p = NULL;
            cudaError_t e = cudaIpcOpenMemHandle(&p, all[q], cudaIpcMemLazyEnablePeerAccess);
            if (e != cudaSuccess) {
                cudaGetLastError();
                snprintf(why, len,
                         "rank %d could not open rank %d's buffer: cudaIpcOpenMemHandle: %s",
                         c->rank, q, cudaGetErrorString(e));
                ok = 0;
            } else {
                m->st.buf[q] = p;
                m->opened[q] = 1;
            }
        }
    } else {
        ok = 0;
    }
    free(all);
    return ok;
}

/* A real transfer through every peer's buffer: our kernel stores a pattern into each peer's
 * probe slot and reads it back; then each rank checks that every peer's pattern landed in its
 * own memory: peer access can be reported where transfers fail (ACS or virtualisation). */
static int probe_peers(struct custom *m, struct ls_comm *c, char *why, size_t len)
{
    unsigned salt = 0;
    if (c->rank == 0) salt = (unsigned)time(NULL) * 2654435761u ^ (unsigned)getpid();
    CHECK_MPI(MPI_Bcast(&salt, 1, MPI_UNSIGNED, 0, m->mpi));
    unsigned *bad_dev = NULL, bad[LS_AR_MAX_RANKS];
    CHECK_CUDA(cudaMalloc((void **)&bad_dev, sizeof bad));
    CHECK_CUDA(cudaMemset(bad_dev, 0, sizeof bad));
    ls_ar_probe(&m->st, salt, bad_dev, NULL);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(bad, bad_dev, sizeof bad, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(bad_dev));
    int ok = 1;
    for (int q = 0; q < c->size && ok; q++)
        if (q != c->rank && bad[q]) {
            snprintf(why, len, "rank %d read back %u of %d probe words wrong from rank %d's buffer",
                     c->rank, bad[q], LS_AR_PROBE_WORDS, q);
            ok = 0;
        }
    CHECK_MPI(MPI_Barrier(m->mpi)); /* every peer's stores are complete */
    size_t words = (size_t)LS_AR_MAX_RANKS * LS_AR_PROBE_WORDS;
    unsigned *got = malloc(words * sizeof *got);
    CHECK_ALLOC(got);
    CHECK_CUDA(cudaMemcpy(got, (char *)m->mybuf + LS_AR_PROBE_OFF, words * sizeof *got,
                          cudaMemcpyDeviceToHost));
    for (int r = 0; r < c->size && ok; r++) {
        if (r == c->rank) continue;
        int wrong = 0;
        for (int i = 0; i < LS_AR_PROBE_WORDS; i++)
            wrong +=
                got[(size_t)r * LS_AR_PROBE_WORDS + i] != ls_ar_probe_word(r, c->rank, i, salt);
        if (wrong) {
            snprintf(why, len,
                     "%d of %d words that rank %d stored into rank %d's buffer never arrived",
                     wrong, LS_AR_PROBE_WORDS, r, c->rank);
            ok = 0;
        }
    }
    free(got);
    return ok;
}

/* ---- the communicator ---- */

static struct ls_comm *need_fallback(struct ls_comm *c, const char *what, size_t bytes)
{
    struct custom *m = c->impl;
    if (!m->fallback) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "%s of %zu bytes needs the fallback communicator, and none was given", what,
                 bytes);
        ls_die(__FILE__, __LINE__, what, msg);
    }
    return m->fallback;
}

/* 0: identity, 1: one-shot, 2: two-shot, 3: fallback */
static int route(struct ls_comm *c, size_t count, enum ls_dtype t)
{
    struct custom *m = c->impl;
    if (c->size == 1) return 0;
    size_t bytes = count * ls_dtype_size(t);
    if (!m->info.enabled || t == LS_I32 || bytes > m->info.twoshot_max) return 3;
    return bytes <= m->info.oneshot_max ? 1 : 2;
}

static void custom_allreduce(struct ls_comm *c, void *buf, size_t count, enum ls_dtype t,
                             void *stream)
{
    struct custom *m = c->impl;
    if (count == 0) return;
    switch (route(c, count, t)) {
    case 0:
        return;
    case 1:
        ls_allreduce_oneshot(&m->st, buf, buf, count, (enum ls_ar_dtype)t, stream);
        return;
    case 2:
        ls_allreduce_twoshot(&m->st, buf, buf, count, (enum ls_ar_dtype)t, stream);
        return;
    default: {
        struct ls_comm *f = need_fallback(c, "allreduce_sum", count * ls_dtype_size(t));
        f->allreduce_sum(f, buf, count, t, stream);
    }
    }
}

static void custom_bcast(struct ls_comm *c, void *buf, size_t bytes, int root, void *stream)
{
    struct ls_comm *f = need_fallback(c, "bcast", bytes);
    f->bcast(f, buf, bytes, root, stream);
}

static void custom_allgather(struct ls_comm *c, const void *send, void *recv, size_t count,
                             enum ls_dtype t, void *stream)
{
    struct ls_comm *f = need_fallback(c, "allgather", count * ls_dtype_size(t));
    f->allgather(f, send, recv, count, t, stream);
}

static void custom_barrier(struct ls_comm *c)
{
    struct custom *m = c->impl;
    char msg[512];
    CHECK_CUDA(cudaDeviceSynchronize());
    if (ls_comm_custom_check(c, msg, sizeof msg))
        ls_die(__FILE__, __LINE__, "ls_comm_custom_check", msg);
    CHECK_MPI(MPI_Barrier(m->mpi));
}

static void custom_destroy(struct ls_comm *c)
{
    struct custom *m = c->impl;
    /* peers store into our buffer: free it only when every rank's kernels are done; after a
     * timeout a peer may be gone, so then just leave */
    cudaDeviceSynchronize();
    if (!(m->err && m->err->code)) {
        MPI_Barrier(m->mpi);
        free_buffers(m, c->rank, c->size);
    }
    MPI_Comm_free(&m->mpi);
    free(m);
    free(c);
}

struct ls_comm *ls_comm_custom_create(MPI_Comm world, int dev, size_t max_bytes,
                                      struct ls_comm *fallback)
{
    struct ls_comm *c = calloc(1, sizeof *c);
    struct custom *m = calloc(1, sizeof *m);
    CHECK_ALLOC(c);
    CHECK_ALLOC(m);
    CHECK_MPI(MPI_Comm_dup(world, &m->mpi));
    CHECK_MPI(MPI_Comm_rank(m->mpi, &c->rank));
    CHECK_MPI(MPI_Comm_size(m->mpi, &c->size));
    CHECK_CUDA(cudaSetDevice(dev));
    c->name = "custom";
    c->allreduce_sum = custom_allreduce;
    c->bcast = custom_bcast;
    c->allgather = custom_allgather;
    c->barrier = custom_barrier;
    c->destroy = custom_destroy;
    c->async_error = custom_async_error;
    c->impl = m;
    m->fallback = fallback;

    struct custom_cfg g;
    memset(&g, 0, sizeof g);
    if (c->rank == 0) g = read_cfg(c->size);
    CHECK_MPI(MPI_Bcast(&g, (int)sizeof g, MPI_BYTE, 0, m->mpi));
    /* routes follow from max_bytes too: every rank must use the same */
    unsigned long long mb = max_bytes, mb_min = 0;
    CHECK_MPI(MPI_Allreduce(&mb, &mb_min, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, m->mpi));
    max_bytes = (size_t)mb_min & ~(size_t)15;
    struct ls_comm_custom_info *in = &m->info;
    in->max_bytes = max_bytes;
    in->oneshot_max = (size_t)g.oneshot_max < max_bytes ? (size_t)g.oneshot_max : max_bytes;
    in->twoshot_max = (size_t)g.twoshot_max < max_bytes ? (size_t)g.twoshot_max : max_bytes;
    in->ll_max = (size_t)g.ll_max < in->oneshot_max ? (size_t)g.ll_max : in->oneshot_max;
    m->st.ll_max = in->ll_max;
    in->threads = g.threads;
    in->max_blocks = g.max_blocks;
    in->timeout_s = (double)g.timeout_ms / 1000.0;
    m->st.rank = c->rank;
    m->st.size = c->size;
    m->st.threads = g.threads;
    m->st.max_blocks = g.max_blocks;
    m->st.fence_all = g.fence_all;
    m->st.spread = g.spread;
    m->st.ll_batch = g.ll_batch;
    in->fence_all = g.fence_all;
    m->st.timeout_ns = (unsigned long long)g.timeout_ms * 1000000ull;
    m->st.data_bytes = data_bytes_for(c->size, max_bytes);
    /* the LL areas after the data areas: LL lines never share memory with raw data */
    m->st.ll_off = LS_AR_DATA_OFF + 2 * m->st.data_bytes;
    m->st.ll_bytes = m->st.ll_max ? (size_t)c->size * ls_ar_ll_slot(ls_ar_units(m->st.ll_max, 1))
                                  : 0;

    char *why = in->why;
    const size_t wl = sizeof in->why;
    int ok = same_node(m, c, why, wl); /* collective: every rank calls it */
    if (g.disable) {
        snprintf(why, wl, "LOCKSTEP_AR_DISABLE=1");
        ok = 0;
    } else if (max_bytes == 0) {
        snprintf(why, wl, "max_bytes is 0");
        ok = 0;
    }
    ok = agree(m->mpi, ok); /* from here on every rank takes the same steps */
    if (ok) {
        alloc_buffers(m);
        if (c->size > 1) {
            ok = agree(m->mpi, peers_visible(m, c, dev, why, wl));
            if (ok) ok = agree(m->mpi, open_peers(m, c, why, wl));
            if (ok) ok = agree(m->mpi, probe_peers(m, c, why, wl));
        }
        if (!ok) free_buffers(m, c->rank, c->size);
    }
    share_why(m->mpi, c->rank, ok, why, wl);
    in->enabled = ok;
    CHECK_MPI(MPI_Barrier(m->mpi)); /* no peer's first kernel before every buffer is ready */
    if (!ok) {
        ls_eprint0("lockstep: custom all-reduce off (%s): all-reduces go through %s\n", why,
                   fallback ? fallback->name : "nothing");
        if (!fallback) {
            MPI_Comm_free(&m->mpi);
            free(m);
            free(c);
            return NULL;
        }
    }
    return c;
}

int ls_comm_custom_check(struct ls_comm *c, char *err, size_t errlen)
{
    if (!is_custom(c)) return 0;
    struct custom *m = c->impl;
    if (!m->err || !m->err->code) return 0;
    const struct ls_ar_err *e = m->err;
    snprintf(err, errlen,
             "rank %d gave up on all-reduce #%llu (block %d, %s) after %.1f s: rank %d "
             "never arrived "
             "(it exited, hangs, or called a different sequence of collectives)",
             e->rank, e->epoch, e->block,
             e->phase == 2 ? "LL lines" : e->phase ? "second exchange" : "first exchange",
             (double)e->waited_ns * 1e-9, e->peer);
    return 1;
}

/* for the step watchdog's thread: a bounded wait that gave up (it names the peer that never
 * arrived), else NCCL's asynchronous error */
static const char *custom_async_error(struct ls_comm *c)
{
    struct custom *m = c->impl;
    if (ls_comm_custom_check(c, m->async_why, sizeof m->async_why)) return m->async_why;
    struct ls_comm *f = m->fallback;
    return f && f->async_error ? f->async_error(f) : NULL;
}

const struct ls_ar_state *ls_comm_custom_state(struct ls_comm *c)
{
    if (!is_custom(c)) return NULL;
    struct custom *m = c->impl;
    return m->info.enabled ? &m->st : NULL;
}

int ls_comm_custom_info(struct ls_comm *c, struct ls_comm_custom_info *info)
{
    if (!is_custom(c)) return -1;
    *info = ((struct custom *)c->impl)->info;
    return 0;
}

const char *ls_comm_custom_path(struct ls_comm *c, size_t count, enum ls_dtype t)
{
    if (!is_custom(c)) return c ? c->name : "none";
    static const char *names[] = {"identity", "one-shot", "two-shot"};
    int r = route(c, count, t);
    struct custom *m = c->impl;
    const size_t es = ls_dtype_size(t);
    if (r == 1 && ls_ar_use_ll(&m->st, count * es, ls_ar_units(count, es))) return "one-shot LL";
    if (r < 3) return names[r];
    return m->fallback ? m->fallback->name : "none";
}

void ls_comm_residual_rmsnorm(struct ls_comm *c, void *partial, const void *x, void *out,
                              void *normed, const void *w, int rows, int dim, float eps,
                              enum ls_dtype t, void *stream)
{
    if (t != LS_F32 && t != LS_BF16)
        ls_die(__FILE__, __LINE__, "ls_comm_residual_rmsnorm", "dtype must be LS_F32 or LS_BF16");
    if (rows <= 0 || dim <= 0) return;
    size_t count = (size_t)rows * (size_t)dim;
    if (is_custom(c)) {
        struct custom *m = c->impl;
        if (m->info.enabled && count * ls_dtype_size(t) <= m->info.oneshot_max) {
            ls_allreduce_residual_rmsnorm(&m->st, partial, x, out, normed, w, rows, dim, eps,
                                          (enum ls_ar_dtype)t, stream);
            return;
        }
    }
    c->allreduce_sum(c, partial, count, t, stream);
    ls_residual_rmsnorm(partial, x, out, normed, w, rows, dim, eps, (enum ls_ar_dtype)t, stream);
}

#else /* CPU-only build: no custom path; callers need no #ifdef */

struct ls_comm *ls_comm_custom_create(MPI_Comm world, int dev, size_t max_bytes,
                                      struct ls_comm *fallback)
{
    (void)world, (void)dev, (void)max_bytes, (void)fallback;
    return NULL;
}

int ls_comm_custom_check(struct ls_comm *c, char *err, size_t errlen)
{
    (void)c, (void)err, (void)errlen;
    return 0;
}

const struct ls_ar_state *ls_comm_custom_state(struct ls_comm *c)
{
    (void)c;
    return NULL;
}

int ls_comm_custom_info(struct ls_comm *c, struct ls_comm_custom_info *info)
{
    (void)c, (void)info;
    return -1;
}

const char *ls_comm_custom_path(struct ls_comm *c, size_t count, enum ls_dtype t)
{
    (void)count, (void)t;
    return c ? c->name : "none";
}

void ls_comm_residual_rmsnorm(struct ls_comm *c, void *partial, const void *x, void *out,
                              void *normed, const void *w, int rows, int dim, float eps,
                              enum ls_dtype t, void *stream)
{
    (void)c, (void)partial, (void)x, (void)out, (void)normed, (void)w, (void)rows, (void)dim,
        (void)eps, (void)t, (void)stream;
    ls_die(__FILE__, __LINE__, "ls_comm_residual_rmsnorm", "this build has no CUDA backend");
}
#endif
