/* Multi-rank GPU test and benchmark of the custom all-reduce (runtime/comm_custom.h):
 *   mpirun -np 2 -x NCCL_NVLS_ENABLE=0 tests/gpu/test_allreduce [options]
 *
 * Checks (TAP lines on rank 0, each agreed over all ranks; exit status 1 if any fails):
 *  - sums: one-shot, two-shot, the routed allreduce_sum and NCCL on f32 and bf16, fixed edge
 *    counts (1, 3, 17, 4097, ... not multiples of 16 bytes) and seeded random counts up to 4M
 *    elements, with buffers at 16-byte aligned and unaligned addresses (alignment differing
 *    between ranks), outputs poisoned with NaN first. Every rank's input is a hash of (seed,
 *    rank, index), so every rank computes the float64 sum of all inputs. Tolerances, with
 *    S = sum over ranks |v_r| and n ranks:
 *      custom f32:  |got - ref| <= n * 2^-24 * S           (fp32 sum in rank order)
 *      custom bf16: |got - ref| <= 2^-8 * |ref| + n * 2^-24 * S   (fp32 sum, one rounding)
 *      NCCL:        |got - ref| <= n * u * S, u = 2^-24 (f32) or 2^-8 (bf16: rounds per step)
 *      custom vs NCCL: within the sum of the two; for 2 ranks bitwise equality is reported
 *    and one-shot, two-shot and the routed call must agree bitwise, and every rank must hold
 *    bitwise rank 0's result.
 *  - fused residual + RMSNorm against float64 (relative L2 error < 1e-5 f32, < 8e-3 bf16),
 *    bitwise equal to one-shot + ls_residual_rmsnorm, in place (out == x) and not.
 *  - graph: one-shot, two-shot, fused (with the norm and, at 8192, residual only) and bf16
 *    all-reduces captured in one CUDA graph and replayed --replays times back to back;
 *    integer-valued data make every sum exact, and
 *    accumulators prove every replay ran every all-reduce once.
 * Then the latency sweep (bf16, or --sweep-dtype f32 as the engine's activations are; 1 KB ...
 * --max-mb MB, powers of 2, 8 KB among them): median microseconds per all-reduce of
 * the routed custom call in a graph and eager, forced one-shot and two-shot in a graph, NCCL
 * eager and in a graph; graphs hold N all-reduces, the time of a replay is divided by N.
 *
 * Fault drill: --kill-rank R [--kill-at K] [--kill-mode exit|hang] makes rank R leave (exit
 * without MPI_Finalize, or stop calling anything) before all-reduce K of a loop; every other
 * rank must end the job within 10 s with "rank R never arrived" (the kernels' bounded spin,
 * LOCKSTEP_AR_TIMEOUT_MS set to 3000 unless given, then MPI_Abort). With exit, mpirun may
 * kill the job first on its own, which also passes: the job must never hang. */
#include "config.h"
#include "kernels/allreduce.h"
#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/comm_custom.h"
#include "runtime/log.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static int g_rank, g_size, g_checks, g_failed;
static cudaStream_t g_stream;
static struct ls_comm *g_custom, *g_nccl;
static const struct ls_ar_state *g_st; /* NULL when the IPC path is off */
static struct ls_ar_state g_st_flag;   /* *g_st without LL: the flag protocol at every size */
static struct ls_ar_state g_st_pull;   /* *g_st with the other LL pull (ll_batch toggled) */

/* ---- helpers ---- */

static void die(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void die(const char *what, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_die(__FILE__, __LINE__, what, msg);
}

/* a TAP line on rank 0 for a check that passes only if it passes on every rank */
static void report(int ok_here, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int ok_here, const char *fmt, ...)
{
    int ok = 0;
    CHECK_MPI(MPI_Allreduce(&ok_here, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    g_checks++;
    if (!ok) g_failed++;
    if (g_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        printf("%s %d - ", ok ? "ok" : "not ok", g_checks);
        vprintf(fmt, ap);
        printf("\n");
        fflush(stdout);
        va_end(ap);
    }
}

/* Wait for the stream without trusting it to finish: a kernel that never returns is a hang
 * we report (the bounded spin should make that impossible), and a recorded timeout is fatal. */
static void sync_or_die(const char *what)
{
    struct ls_comm_custom_info info;
    double limit = 30.0;
    if (ls_comm_custom_info(g_custom, &info) == 0) limit += 2 * info.timeout_s;
    double t0 = ls_now_s();
    for (;;) {
        cudaError_t e = cudaStreamQuery(g_stream);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) {
            char msg[512] = "";
            ls_comm_custom_check(g_custom, msg, sizeof msg);
            die(what, "stream failed: %s%s%s", cudaGetErrorString(e), *msg ? "; " : "", msg);
        }
        if (ls_now_s() - t0 > limit)
            die(what, "HANG: the stream did not finish within %.0f s", limit);
        usleep(20);
    }
    char msg[512];
    if (ls_comm_custom_check(g_custom, msg, sizeof msg)) die(what, "%s", msg);
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* uniform in [-1, 1), a pure function of (seed, stream, i): every rank can make every rank's data
 */
static float uniform(uint64_t seed, uint64_t stream, size_t i)
{
    uint64_t h = mix64(seed ^ mix64(stream * 0x100000001B3ull + (uint64_t)i));
    return (float)((double)(h >> 40) / (double)(1ull << 23) - 1.0);
}

static uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static size_t esize(enum ls_dtype t)
{
    return ls_dtype_size(t);
}

static const char *tname(enum ls_dtype t)
{
    return t == LS_BF16 ? "bf16" : "f32";
}

/* element i of a host array of dtype t, as float */
static float get(const void *p, enum ls_dtype t, size_t i)
{
    return t == LS_BF16 ? bf2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void set(void *p, enum ls_dtype t, size_t i, float v)
{
    if (t == LS_BF16)
        ((uint16_t *)p)[i] = f2bf(v);
    else
        ((float *)p)[i] = v;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    CHECK_ALLOC(p);
    return p;
}

static void *dmalloc(size_t n)
{
    void *p = NULL;
    CHECK_CUDA(cudaMalloc(&p, n));
    return p;
}

static void to_dev(void *d, const void *h, size_t n)
{
    CHECK_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
}

static void to_host(void *h, const void *d, size_t n)
{
    CHECK_CUDA(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

static void poison(void *d, size_t n)
{
    CHECK_CUDA(cudaMemset(d, 0xff, n)); /* NaN in f32 and in bf16 */
}

/* every rank holds rank 0's bytes */
static int same_on_all_ranks(const void *h, size_t n)
{
    void *r0 = xmalloc(n);
    if (g_rank == 0) memcpy(r0, h, n);
    for (size_t done = 0; done < n; done += (size_t)1 << 30) {
        size_t k = n - done < ((size_t)1 << 30) ? n - done : (size_t)1 << 30;
        CHECK_MPI(MPI_Bcast((char *)r0 + done, (int)k, MPI_BYTE, 0, MPI_COMM_WORLD));
    }
    int same = memcmp(r0, h, n) == 0;
    free(r0);
    return same;
}

/* first failure of a family of checks, kept for the report line */
struct verdict {
    int ok, cases;
    char first[256];
};

static void verdict_init(struct verdict *v)
{
    v->ok = 1;
    v->cases = 0;
    v->first[0] = 0;
}

static void verdict_fail(struct verdict *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void verdict_fail(struct verdict *v, const char *fmt, ...)
{
    if (v->ok) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v->first, sizeof v->first, fmt, ap);
        va_end(ap);
    }
    v->ok = 0;
}

static void verdict_report(struct verdict *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void verdict_report(struct verdict *v, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    /* the failing rank's first message, so rank 0 can print it */
    int mine = v->ok ? g_size : g_rank, first = g_size;
    CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first < g_size)
        CHECK_MPI(MPI_Bcast(v->first, sizeof v->first, MPI_CHAR, first, MPI_COMM_WORLD));
    if (first < g_size)
        report(v->ok, "%s (%d cases) # rank %d: %s", name, v->cases, first, v->first);
    else
        report(v->ok, "%s (%d cases)", name, v->cases);
}

/* ---- sums ---- */

struct sum_case {
    enum ls_dtype t;
    size_t n;
    void *in;              /* this rank's input, host, dtype t */
    double *ref, *abs_sum; /* float64 sum over ranks, and of |v| */
};

static void make_case(struct sum_case *c, uint64_t seed)
{
    for (size_t i = 0; i < c->n; i++) {
        c->ref[i] = 0.0;
        c->abs_sum[i] = 0.0;
    }
    for (int r = 0; r < g_size; r++)
        for (size_t i = 0; i < c->n; i++) {
            float v = uniform(seed, (uint64_t)r, i);
            if (c->t == LS_BF16) v = bf2f(f2bf(v));
            c->ref[i] += v;
            c->abs_sum[i] += fabs(v);
            if (r == g_rank) set(c->in, c->t, i, v);
        }
}

/* 0 when every element is within tolerance; else the first bad index + 1 */
static size_t check_sum(const struct sum_case *c, const void *got, int nccl, double *worst)
{
    const double u = c->t == LS_BF16 ? 0x1p-8 : 0x1p-24;
    *worst = 0;
    for (size_t i = 0; i < c->n; i++) {
        double g = get(got, c->t, i), err = fabs(g - c->ref[i]);
        double tol =
            nccl ? g_size * u * c->abs_sum[i]
                 : (c->t == LS_BF16 ? u * fabs(c->ref[i]) : 0) + g_size * 0x1p-24 * c->abs_sum[i];
        if (!(err <= tol)) return i + 1; /* NaN fails too */
        if (c->abs_sum[i] > 0 && err / c->abs_sum[i] > *worst) *worst = err / c->abs_sum[i];
    }
    return 0;
}

/* bufs: device, each max bytes + 64 */
struct sum_bufs {
    char *d_in, *d_out, *d_work, *d_nccl;
    void *h_auto, *h_one, *h_two, *h_flag, *h_pull, *h_nccl, *h_in_after;
};

static void run_sums(uint64_t seed)
{
    const size_t max_n = 8 * MIB + 64; /* elements: past the 2-rank two-shot limit (32 MB f32) */
    struct sum_bufs b;
    size_t cap = max_n * 4 + 64;
    b.d_in = dmalloc(cap);
    b.d_out = dmalloc(cap);
    b.d_work = dmalloc(cap);
    b.d_nccl = dmalloc(cap);
    b.h_auto = xmalloc(cap);
    b.h_one = xmalloc(cap);
    b.h_two = xmalloc(cap);
    b.h_flag = xmalloc(cap);
    b.h_pull = xmalloc(cap);
    b.h_nccl = xmalloc(cap);
    b.h_in_after = xmalloc(cap);
    struct sum_case c;
    c.in = xmalloc(cap);
    c.ref = xmalloc(max_n * sizeof(double));
    c.abs_sum = xmalloc(max_n * sizeof(double));
    struct ls_comm_custom_info info;
    ls_comm_custom_info(g_custom, &info);

    static const size_t fixed[] = {1,    2,    3,    4,     5,     7,      8,      9,
                                   15,   16,   17,   31,    33,    63,     64,     65,
                                   127,  255,  257,  1000,  1023,  1024,   4095,   4096,
                                   4097, 8191, 8200, 12289, 65539, 131071, 131072, 1048573};
    enum { NFIXED = sizeof fixed / sizeof fixed[0], NRANDOM = 24 };
    for (int ti = 0; ti < 2; ti++) {
        const enum ls_dtype t = ti ? LS_BF16 : LS_F32;
        const size_t es = esize(t);
        struct verdict v_one, v_two, v_auto, v_nccl, v_agree, v_ranks, v_vs, v_in;
        struct verdict *all[] = {&v_one,   &v_two,   &v_auto, &v_nccl,
                                 &v_agree, &v_ranks, &v_vs,   &v_in};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) verdict_init(all[k]);
        size_t bitwise_nccl = 0, compared = 0;
        double worst_custom = 0, worst_nccl = 0;
        /* the thresholds' neighbourhoods, where the route changes */
        size_t edges[] = {info.oneshot_max / es - 1, info.oneshot_max / es,
                          info.oneshot_max / es + 1, info.twoshot_max / es,
                          info.twoshot_max / es + 3};
        const int nedges = (int)(sizeof edges / sizeof edges[0]);
        for (int k = 0; k < NFIXED + nedges + NRANDOM; k++) {
            size_t n;
            if (k < NFIXED)
                n = fixed[k];
            else if (k < NFIXED + nedges)
                n = edges[k - NFIXED];
            else
                n = (size_t)exp(log(4.0 * MIB) * (uniform(seed, 999, (size_t)k) * 0.5 + 0.5)) + 1;
            if (n < 1 || n > max_n) continue;
            c.t = t;
            c.n = n;
            make_case(&c, seed + (uint64_t)k * 7919u + (uint64_t)ti);
            const size_t bytes = n * es;
            /* odd cases use addresses that are not 16-byte aligned, differently on each rank */
            const size_t off_in = (k & 1) ? es * (size_t)(1 + g_rank % 3) : 0;
            const size_t off_out = (k & 1) ? es * (size_t)(2 + g_rank % 2) : 0;
            const int custom_fits = g_st && bytes <= info.max_bytes;

            /* routed, in place */
            to_dev(b.d_work, c.in, bytes);
            g_custom->allreduce_sum(g_custom, b.d_work, n, t, g_stream);
            sync_or_die("allreduce_sum");
            to_host(b.h_auto, b.d_work, bytes);
            const char *path = ls_comm_custom_path(g_custom, n, t);
            const int auto_custom = !strncmp(path, "one-shot", 8) || !strcmp(path, "two-shot");
            /* NCCL, in place */
            to_dev(b.d_nccl, c.in, bytes);
            g_nccl->allreduce_sum(g_nccl, b.d_nccl, n, t, g_stream);
            sync_or_die("nccl allreduce");
            to_host(b.h_nccl, b.d_nccl, bytes);
            if (custom_fits) {
                to_dev(b.d_in + off_in, c.in, bytes);
                poison(b.d_out + off_out, bytes);
                ls_allreduce_oneshot(g_st, b.d_in + off_in, b.d_out + off_out, n,
                                     (enum ls_ar_dtype)t, g_stream);
                sync_or_die("one-shot");
                to_host(b.h_one, b.d_out + off_out, bytes);
                poison(b.d_out + off_out, bytes);
                ls_allreduce_oneshot(&g_st_flag, b.d_in + off_in, b.d_out + off_out, n,
                                     (enum ls_ar_dtype)t, g_stream);
                sync_or_die("one-shot, flag protocol");
                to_host(b.h_flag, b.d_out + off_out, bytes);
                poison(b.d_out + off_out, bytes);
                ls_allreduce_oneshot(&g_st_pull, b.d_in + off_in, b.d_out + off_out, n,
                                     (enum ls_ar_dtype)t, g_stream);
                sync_or_die("one-shot, the other LL pull");
                to_host(b.h_pull, b.d_out + off_out, bytes);
                poison(b.d_out + off_out, bytes);
                ls_allreduce_twoshot(g_st, b.d_in + off_in, b.d_out + off_out, n,
                                     (enum ls_ar_dtype)t, g_stream);
                sync_or_die("two-shot");
                to_host(b.h_two, b.d_out + off_out, bytes);
                to_host(b.h_in_after, b.d_in + off_in, bytes);
            }

            double worst;
            size_t bad;
            if (custom_fits) {
                v_one.cases++;
                if ((bad = check_sum(&c, b.h_one, 0, &worst)))
                    verdict_fail(&v_one, "n=%zu: element %zu is %g, float64 sum %g", n, bad - 1,
                                 get(b.h_one, t, bad - 1), c.ref[bad - 1]);
                if (worst > worst_custom) worst_custom = worst;
                v_two.cases++;
                if ((bad = check_sum(&c, b.h_two, 0, &worst)))
                    verdict_fail(&v_two, "n=%zu: element %zu is %g, float64 sum %g", n, bad - 1,
                                 get(b.h_two, t, bad - 1), c.ref[bad - 1]);
                v_agree.cases++;
                if (memcmp(b.h_one, b.h_two, bytes) || memcmp(b.h_one, b.h_flag, bytes) ||
                    memcmp(b.h_one, b.h_pull, bytes) ||
                    (auto_custom && memcmp(b.h_one, b.h_auto, bytes)))
                    verdict_fail(&v_agree,
                                 "n=%zu (routed: %s): one-shot (LL up to %zu B, both pulls), "
                                 "one-shot over flags, two-shot and routed results differ",
                                 n, path, g_st->ll_max);
                v_ranks.cases++;
                if (!same_on_all_ranks(b.h_one, bytes))
                    verdict_fail(&v_ranks, "n=%zu: one-shot result differs from rank 0's", n);
                if (!same_on_all_ranks(b.h_two, bytes))
                    verdict_fail(&v_ranks, "n=%zu: two-shot result differs from rank 0's", n);
                v_in.cases++;
                if (memcmp(b.h_in_after, c.in, bytes))
                    verdict_fail(&v_in, "n=%zu: an out-of-place all-reduce changed its input", n);
            }
            v_auto.cases++;
            if ((bad = check_sum(&c, b.h_auto, !auto_custom, &worst)))
                verdict_fail(&v_auto, "n=%zu (%s): element %zu is %g, float64 sum %g", n, path,
                             bad - 1, get(b.h_auto, t, bad - 1), c.ref[bad - 1]);
            if (!same_on_all_ranks(b.h_auto, bytes))
                verdict_fail(&v_ranks, "n=%zu: routed (%s) result differs from rank 0's", n, path);
            v_nccl.cases++;
            if ((bad = check_sum(&c, b.h_nccl, 1, &worst)))
                verdict_fail(&v_nccl, "n=%zu: element %zu is %g, float64 sum %g", n, bad - 1,
                             get(b.h_nccl, t, bad - 1), c.ref[bad - 1]);
            if (worst > worst_nccl) worst_nccl = worst;
            if (custom_fits) {
                v_vs.cases++;
                const double u = t == LS_BF16 ? 0x1p-8 : 0x1p-24;
                for (size_t i = 0; i < n; i++) {
                    double a = get(b.h_one, t, i), z = get(b.h_nccl, t, i);
                    double tol = (t == LS_BF16 ? u * fabs(c.ref[i]) : 0) +
                                 g_size * 0x1p-24 * c.abs_sum[i] + g_size * u * c.abs_sum[i];
                    if (!(fabs(a - z) <= tol)) {
                        verdict_fail(&v_vs, "n=%zu: element %zu custom %g, NCCL %g", n, i, a, z);
                        break;
                    }
                }
                compared += n;
                for (size_t i = 0; i < n; i++)
                    bitwise_nccl += t == LS_BF16
                                        ? ((uint16_t *)b.h_one)[i] == ((uint16_t *)b.h_nccl)[i]
                                        : !memcmp((float *)b.h_one + i, (float *)b.h_nccl + i, 4);
            }
        }
        verdict_report(&v_one,
                       "%s one-shot within tolerance of the float64 sum (worst |err|/S %.2g)",
                       tname(t), worst_custom);
        verdict_report(&v_two, "%s two-shot within tolerance of the float64 sum", tname(t));
        verdict_report(&v_auto, "%s routed allreduce_sum within tolerance of the float64 sum",
                       tname(t));
        verdict_report(&v_nccl,
                       "%s NCCL within its tolerance of the float64 sum (worst |err|/S %.2g)",
                       tname(t), worst_nccl);
        verdict_report(&v_agree,
                       "%s one-shot (LL with both pulls, and flags), two-shot and routed results "
                       "bitwise equal",
                       tname(t));
        verdict_report(&v_ranks, "%s results bitwise equal on every rank", tname(t));
        verdict_report(&v_vs, "%s custom within the summed tolerances of NCCL", tname(t));
        verdict_report(&v_in, "%s out-of-place all-reduces leave their input alone", tname(t));
        if (g_rank == 0)
            printf("# %s: %zu of %zu custom elements bitwise equal to NCCL's%s\n", tname(t),
                   bitwise_nccl, compared, g_size == 2 ? " (2 ranks: expected all)" : "");
    }
    cudaFree(b.d_in);
    cudaFree(b.d_out);
    cudaFree(b.d_work);
    cudaFree(b.d_nccl);
    free(b.h_auto);
    free(b.h_one);
    free(b.h_two);
    free(b.h_flag);
    free(b.h_pull);
    free(b.h_nccl);
    free(b.h_in_after);
    free(c.in);
    free(c.ref);
    free(c.abs_sum);
}

/* ---- fused residual + RMSNorm ---- */

/* one shape of run_fused: where every call writes, and the first call's result the later ones
 * must equal bitwise */
struct fused_case {
    int rows, dim;
    size_t bytes;
    const void *d_out, *d_norm;
    const void *h_out, *h_norm; /* the routed call's out and normed */
    void *h_out2, *h_norm2;     /* a later call's */
};

/* waits for the call `what`, copies its out and normed back, and fails v with "ROWSxDIM:
 * differs" unless both are bitwise the first call's */
static void fused_same(const struct fused_case *c, const char *what, struct verdict *v,
                       const char *differs)
{
    sync_or_die(what);
    to_host(c->h_out2, c->d_out, c->bytes);
    to_host(c->h_norm2, c->d_norm, c->bytes);
    v->cases++;
    if (memcmp(c->h_out, c->h_out2, c->bytes) || memcmp(c->h_norm, c->h_norm2, c->bytes))
        verdict_fail(v, "%dx%d: %s", c->rows, c->dim, differs);
}

static void run_fused(uint64_t seed)
{
    static const int shapes[][2] = {{1, 4096}, {1, 8192}, {1, 4095}, {3, 17},   {2, 1},
                                    {4, 2048}, {7, 1000}, {1, 5120}, {64, 4096}};
    const float eps = 1e-5f;
    for (int ti = 0; ti < 2; ti++) {
        const enum ls_dtype t = ti ? LS_BF16 : LS_F32;
        const size_t es = esize(t);
        struct verdict v_ref, v_same, v_ranks, v_inplace, v_flag, v_resid;
        verdict_init(&v_resid);
        verdict_init(&v_flag);
        verdict_init(&v_ref);
        verdict_init(&v_same);
        verdict_init(&v_ranks);
        verdict_init(&v_inplace);
        double worst = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int rows = shapes[s][0], dim = shapes[s][1];
            const size_t n = (size_t)rows * dim, bytes = n * es;
            void *h_p = xmalloc(bytes), *h_x = xmalloc(bytes), *h_w = xmalloc((size_t)dim * es);
            void *h_out = xmalloc(bytes), *h_norm = xmalloc(bytes), *h_out2 = xmalloc(bytes),
                 *h_norm2 = xmalloc(bytes);
            double *sum = xmalloc(n * sizeof(double));
            const uint64_t sd = seed + 101 * s + (uint64_t)ti;
            for (size_t i = 0; i < n; i++) {
                sum[i] = 0;
                for (int r = 0; r < g_size; r++) {
                    float v = uniform(sd, (uint64_t)r, i);
                    if (t == LS_BF16) v = bf2f(f2bf(v));
                    sum[i] += v;
                    if (r == g_rank) set(h_p, t, i, v);
                }
                set(h_x, t, i,
                    2.0f * uniform(sd, 1000, i)); /* the residual is the same on every rank */
            }
            for (int j = 0; j < dim; j++)
                set(h_w, t, (size_t)j, 1.0f + 0.5f * uniform(sd, 2000, (size_t)j));
            char *d_p = dmalloc(bytes), *d_x = dmalloc(bytes), *d_w = dmalloc((size_t)dim * es),
                 *d_out = dmalloc(bytes), *d_norm = dmalloc(bytes), *d_a = dmalloc(bytes);
            to_dev(d_p, h_p, bytes);
            to_dev(d_x, h_x, bytes);
            to_dev(d_w, h_w, (size_t)dim * es);

            /* whatever the route (fused when one-shot covers it) */
            poison(d_out, bytes);
            poison(d_norm, bytes);
            ls_comm_residual_rmsnorm(g_custom, d_p, d_x, d_out, d_norm, d_w, rows, dim, eps, t,
                                     g_stream);
            sync_or_die("ls_comm_residual_rmsnorm");
            to_host(h_out, d_out, bytes);
            to_host(h_norm, d_norm, bytes);

            /* float64 reference, as ref_rmsnorm */
            double num_o = 0, den_o = 0, num_n = 0, den_n = 0;
            for (int r = 0; r < rows; r++) {
                double ss = 0;
                for (int j = 0; j < dim; j++) {
                    size_t i = (size_t)r * dim + j;
                    double o = get(h_x, t, i) + sum[i];
                    ss += o * o;
                }
                double scale = 1.0 / sqrt(ss / dim + eps);
                for (int j = 0; j < dim; j++) {
                    size_t i = (size_t)r * dim + j;
                    double o = get(h_x, t, i) + sum[i], nr = o * scale * get(h_w, t, (size_t)j);
                    double go = get(h_out, t, i), gn = get(h_norm, t, i);
                    num_o += (go - o) * (go - o);
                    den_o += o * o;
                    num_n += (gn - nr) * (gn - nr);
                    den_n += nr * nr;
                    if (go != go || gn != gn) num_o = NAN;
                }
            }
            double err = sqrt(num_o / den_o) > sqrt(num_n / den_n) ? sqrt(num_o / den_o)
                                                                   : sqrt(num_n / den_n);
            if (num_o != num_o) err = NAN;
            const double tol = t == LS_BF16 ? 8e-3 : 1e-5;
            v_ref.cases++;
            if (!(err <= tol))
                verdict_fail(&v_ref, "%dx%d: relative L2 error %.3g (tolerance %g)", rows, dim, err,
                             tol);
            if (err > worst) worst = err;
            v_ranks.cases++;
            if (!same_on_all_ranks(h_out, bytes) || !same_on_all_ranks(h_norm, bytes))
                verdict_fail(&v_ranks, "%dx%d: out or normed differs from rank 0's", rows, dim);

            if (g_st) {
                const struct fused_case fc = {rows,  dim,    bytes,  d_out,  d_norm,
                                              h_out, h_norm, h_out2, h_norm2};
                /* unfused: custom all-reduce (routed: two-shot for 64x4096 f32) then the norm alone
                 */
                to_dev(d_a, h_p, bytes);
                g_custom->allreduce_sum(g_custom, d_a, n, t, g_stream);
                poison(d_out, bytes);
                poison(d_norm, bytes);
                ls_residual_rmsnorm(d_a, d_x, d_out, d_norm, d_w, rows, dim, eps,
                                    (enum ls_ar_dtype)t, g_stream);
                fused_same(&fc, "ls_residual_rmsnorm", &v_same, "fused and unfused results differ");
                /* in place: out == x (the residual stream updated where it lies) */
                to_dev(d_p, h_p, bytes); /* the routed call may have summed it in place */
                to_dev(d_out, h_x, bytes);
                poison(d_norm, bytes);
                ls_allreduce_residual_rmsnorm(g_st, d_p, d_out, d_out, d_norm, d_w, rows, dim, eps,
                                              (enum ls_ar_dtype)t, g_stream);
                fused_same(&fc, "ls_allreduce_residual_rmsnorm in place", &v_inplace,
                           "in-place result differs");
                /* the flag protocol (no LL) gives the same bits */
                to_dev(d_p, h_p, bytes);
                poison(d_out, bytes);
                poison(d_norm, bytes);
                ls_allreduce_residual_rmsnorm(&g_st_flag, d_p, d_x, d_out, d_norm, d_w, rows, dim,
                                              eps, (enum ls_ar_dtype)t, g_stream);
                fused_same(&fc, "ls_allreduce_residual_rmsnorm, flag protocol", &v_flag,
                           "LL and flag protocols differ");
                /* the residual alone (normed NULL), both protocols and LL's other pull: out as
                 * above, the poisoned normed buffer untouched */
                const struct ls_ar_state *protos[3] = {g_st, &g_st_flag, &g_st_pull};
                const char *proto_names[3] = {"LL", "flags", "LL, other pull"};
                for (int proto = 0; proto < 3; proto++) {
                    to_dev(d_p, h_p, bytes);
                    poison(d_out, bytes);
                    poison(d_norm, bytes);
                    ls_allreduce_residual_rmsnorm(protos[proto], d_p, d_x, d_out, NULL, d_w, rows,
                                                  dim, eps, (enum ls_ar_dtype)t, g_stream);
                    sync_or_die("ls_allreduce_residual_rmsnorm, residual only");
                    to_host(h_out2, d_out, bytes);
                    to_host(h_norm2, d_norm, bytes);
                    int untouched = 1;
                    for (size_t b = 0; b < bytes; b++)
                        if (((unsigned char *)h_norm2)[b] != 0xff) untouched = 0;
                    v_resid.cases++;
                    if (memcmp(h_out, h_out2, bytes) || !untouched)
                        verdict_fail(&v_resid, "%dx%d %s: %s", rows, dim, proto_names[proto],
                                     untouched ? "out differs" : "normed was written");
                }
            }
            cudaFree(d_p);
            cudaFree(d_x);
            cudaFree(d_w);
            cudaFree(d_out);
            cudaFree(d_norm);
            cudaFree(d_a);
            free(h_p);
            free(h_x);
            free(h_w);
            free(h_out);
            free(h_norm);
            free(h_out2);
            free(h_norm2);
            free(sum);
        }
        verdict_report(&v_ref, "%s residual + RMSNorm within tolerance of float64 (worst %.2g)",
                       tname(t), worst);
        verdict_report(&v_ranks, "%s residual + RMSNorm bitwise equal on every rank", tname(t));
        verdict_report(&v_same, "%s fused bitwise equal to all-reduce + ls_residual_rmsnorm",
                       tname(t));
        verdict_report(&v_inplace, "%s fused in place (out == x) bitwise equal to out of place",
                       tname(t));
        verdict_report(&v_flag, "%s fused over LL lines bitwise equal to the flag protocol",
                       tname(t));
        verdict_report(&v_resid,
                       "%s residual only (normed NULL), LL (both pulls) and flags: out bitwise "
                       "the same, normed untouched",
                       tname(t));
    }
}

/* ---- CUDA graph replay ---- */

/* integer values in [-8, 8] without 0: exact in f32 however they are summed */
static float small_int(uint64_t seed, uint64_t stream, size_t i)
{
    int v = (int)(mix64(seed ^ mix64(stream * 31 + i)) % 16) - 8;
    return (float)(v >= 0 ? v + 1 : v);
}

static void run_graph(uint64_t seed, int replays)
{
    if (!g_st) {
        report(0, "graph replay: custom path is off");
        return;
    }
    const int dim = 4096;
    const size_t n1 = 4096;       /* f32 16 KB: one-shot */
    const size_t n2 = 128 * 1024; /* f32 512 KB, through the two-shot launcher */
    const size_t n4 = 4096;       /* bf16 8 KB: the decode all-reduce */
    const size_t nmax = n2;
    float *h_src = xmalloc(nmax * 4), *h_acc0 = xmalloc(nmax * 4), *h_got = xmalloc(nmax * 4);
    double *want = xmalloc(nmax * sizeof(double));
    float *d_src1 = dmalloc(n1 * 4), *d_work1 = dmalloc(n1 * 4), *d_acc1 = dmalloc(n1 * 4);
    float *d_src2 = dmalloc(n2 * 4), *d_work2 = dmalloc(n2 * 4), *d_acc2 = dmalloc(n2 * 4);
    float *d_p3 = dmalloc(n1 * 4), *d_res3 = dmalloc(n1 * 4);
    /* the decode step's form at TP > 1: residual only (normed NULL), the 70B's 8192 in f32 */
    const size_t n5 = 8192;
    float *d_p5 = dmalloc(n5 * 4), *d_res5 = dmalloc(n5 * 4);
    float *d_junk = dmalloc(nmax * 4), *d_w = dmalloc(n5 * 4);
    uint16_t *h_src4 = xmalloc(n4 * 2), *h_eager4 = xmalloc(n4 * 2), *h_got4 = xmalloc(n4 * 2);
    uint16_t *d_src4 = dmalloc(n4 * 2), *d_work4 = dmalloc(n4 * 2);

    for (size_t j = 0; j < n5; j++) h_src[j] = 1.0f;
    to_dev(d_w, h_src, n5 * 4);
    /* sources (per rank) and accumulators' starting values (the same on every rank) */
    float *d_srcs[4] = {d_src1, d_src2, d_p3, d_p5}, *d_accs[4] = {d_acc1, d_acc2, d_res3, d_res5};
    size_t ns[4] = {n1, n2, n1, n5};
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < ns[k]; i++)
            h_src[i] = small_int(seed + (uint64_t)k, (uint64_t)g_rank, i);
        to_dev(d_srcs[k], h_src, ns[k] * 4);
        for (size_t i = 0; i < ns[k]; i++) h_acc0[i] = small_int(seed + 50 + (uint64_t)k, 777, i);
        to_dev(d_accs[k], h_acc0, ns[k] * 4);
    }
    for (size_t i = 0; i < n4; i++) h_src4[i] = f2bf(uniform(seed + 9, (uint64_t)g_rank, i));
    to_dev(d_src4, h_src4, n4 * 2);
    to_dev(d_work4, h_src4, n4 * 2);
    g_custom->allreduce_sum(g_custom, d_work4, n4, LS_BF16, g_stream);
    sync_or_die("eager bf16");
    to_host(h_eager4, d_work4, n4 * 2);

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
    CHECK_CUDA(cudaMemcpyAsync(d_work1, d_src1, n1 * 4, cudaMemcpyDeviceToDevice, g_stream));
    ls_allreduce_oneshot(g_st, d_work1, d_work1, n1, LS_AR_F32, g_stream);
    ls_residual_rmsnorm(d_work1, d_acc1, d_acc1, d_junk, d_w, 1, dim, 1e-5f, LS_AR_F32, g_stream);
    CHECK_CUDA(cudaMemcpyAsync(d_work2, d_src2, n2 * 4, cudaMemcpyDeviceToDevice, g_stream));
    ls_allreduce_twoshot(g_st, d_work2, d_work2, n2, LS_AR_F32, g_stream);
    ls_residual_rmsnorm(d_work2, d_acc2, d_acc2, d_junk, d_w, (int)(n2 / dim), dim, 1e-5f,
                        LS_AR_F32, g_stream);
    ls_allreduce_residual_rmsnorm(g_st, d_p3, d_res3, d_res3, d_junk, d_w, 1, dim, 1e-5f, LS_AR_F32,
                                  g_stream);
    ls_allreduce_residual_rmsnorm(g_st, d_p5, d_res5, d_res5, NULL, d_w, 1, (int)n5, 1e-5f,
                                  LS_AR_F32, g_stream);
    CHECK_CUDA(cudaMemcpyAsync(d_work4, d_src4, n4 * 2, cudaMemcpyDeviceToDevice, g_stream));
    g_custom->allreduce_sum(g_custom, d_work4, n4, LS_BF16, g_stream);
    CHECK_CUDA(cudaStreamEndCapture(g_stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));

    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = ls_now_s();
    for (int r = 0; r < replays; r++) CHECK_CUDA(cudaGraphLaunch(exec, g_stream));
    sync_or_die("graph replays");
    double dt = ls_now_s() - t0;

    int ok = 1;
    char first[256] = "";
    const char *names[4] = {"one-shot", "two-shot", "fused", "residual only"};
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < ns[k]; i++) {
            double s = 0;
            for (int r = 0; r < g_size; r++) s += small_int(seed + (uint64_t)k, (uint64_t)r, i);
            want[i] = small_int(seed + 50 + (uint64_t)k, 777, i) + (double)replays * s;
        }
        to_host(h_got, d_accs[k], ns[k] * 4);
        for (size_t i = 0; i < ns[k]; i++)
            if ((double)h_got[i] != want[i]) {
                if (ok)
                    snprintf(first, sizeof first, "%s accumulator[%zu] = %.1f, want %.1f", names[k],
                             i, (double)h_got[i], want[i]);
                ok = 0;
                break;
            }
    }
    to_host(h_got4, d_work4, n4 * 2);
    if (memcmp(h_got4, h_eager4, n4 * 2)) {
        if (ok)
            snprintf(first, sizeof first,
                     "bf16 result of the last replay differs from the eager one");
        ok = 0;
    }
    report(ok,
           "graph of 5 all-reduces (one-shot, two-shot, fused, residual only, routed bf16 %s) "
           "replayed %d "
           "times: every sum exact%s%s",
           ls_comm_custom_path(g_custom, n4, LS_BF16), replays, ok ? "" : " # ", first);
    if (g_rank == 0)
        printf("# %d replays in %.3f s: %.2f us per replay of 5 all-reduces + 2 norms + 3 copies\n",
               replays, dt, dt * 1e6 / replays);
    /* eager after graph: the epoch in device memory carries on */
    to_dev(d_work4, h_src4, n4 * 2);
    g_custom->allreduce_sum(g_custom, d_work4, n4, LS_BF16, g_stream);
    sync_or_die("eager after graph");
    to_host(h_got4, d_work4, n4 * 2);
    report(!memcmp(h_got4, h_eager4, n4 * 2),
           "eager all-reduce after the graph replays still correct");

    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    void *frees[] = {d_src1, d_work1, d_acc1, d_src2, d_work2, d_acc2, d_p3,
                     d_res3, d_junk,  d_w,    d_src4, d_work4, d_p5,   d_res5};
    for (size_t k = 0; k < sizeof frees / sizeof frees[0]; k++) cudaFree(frees[k]);
    free(h_src);
    free(h_acc0);
    free(h_got);
    free(want);
    free(h_src4);
    free(h_eager4);
    free(h_got4);
}

/* ---- latency sweep ---- */

enum op_kind { OP_ROUTED, OP_ONESHOT, OP_PULL, OP_TWOSHOT, OP_NCCL };

struct op {
    enum op_kind kind;
    void *buf;
    size_t n;
    enum ls_dtype t;
};

static void enqueue(const struct op *o)
{
    switch (o->kind) {
    case OP_ROUTED:
        g_custom->allreduce_sum(g_custom, o->buf, o->n, o->t, g_stream);
        break;
    case OP_ONESHOT: /* always over flags: the routed column shows LL where it applies */
        ls_allreduce_oneshot(&g_st_flag, o->buf, o->buf, o->n, (enum ls_ar_dtype)o->t, g_stream);
        break;
    case OP_PULL: /* over LL lines with the other pull (LOCKSTEP_AR_LL_BATCH toggled) */
        ls_allreduce_oneshot(&g_st_pull, o->buf, o->buf, o->n, (enum ls_ar_dtype)o->t, g_stream);
        break;
    case OP_TWOSHOT:
        ls_allreduce_twoshot(g_st, o->buf, o->buf, o->n, (enum ls_ar_dtype)o->t, g_stream);
        break;
    case OP_NCCL:
        g_nccl->allreduce_sum(g_nccl, o->buf, o->n, o->t, g_stream);
        break;
    }
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* median microseconds per all-reduce: `per` all-reduces per replay (graph) or per timed loop */
static double time_op(const struct op *o, int per, int reps, int graph)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    if (graph) {
        CHECK_CUDA(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < per; i++) enqueue(o);
        CHECK_CUDA(cudaStreamEndCapture(g_stream, &g));
        CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    }
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    float *ms = xmalloc((size_t)reps * sizeof *ms);
    for (int r = -2; r < reps; r++) { /* two warm-up rounds */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_CUDA(cudaEventRecord(a, g_stream));
        if (graph)
            CHECK_CUDA(cudaGraphLaunch(ge, g_stream));
        else
            for (int i = 0; i < per; i++) enqueue(o);
        CHECK_CUDA(cudaEventRecord(b, g_stream));
        sync_or_die("timing");
        if (r >= 0) CHECK_CUDA(cudaEventElapsedTime(&ms[r], a, b));
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_float);
    double us = 1000.0 * ms[reps / 2] / per;
    free(ms);
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    if (graph) {
        CHECK_CUDA(cudaGraphExecDestroy(ge));
        CHECK_CUDA(cudaGraphDestroy(g));
    }
    return us;
}

static void run_sweep(uint64_t seed, size_t max_mb, enum ls_dtype t)
{
    const size_t top = max_mb * MIB, es = esize(t);
    void *h = xmalloc(top);
    for (size_t i = 0; i < top / es; i++) set(h, t, i, uniform(seed, (uint64_t)g_rank, i));
    void *d = dmalloc(top);
    struct ls_comm_custom_info info;
    ls_comm_custom_info(g_custom, &info);
    if (g_rank == 0) {
        printf("# latency sweep, %s, %d ranks, median us per all-reduce (graph: N per replay, "
               "time / N);\n"
               "# custom routes one-shot over LL lines <= %zu B, over flags <= %zu B, two-shot <= "
               "%zu B, else %s;\n# 1shot/gr: one-shot over flags; pull%d/gr: over LL lines with "
               "LOCKSTEP_AR_LL_BATCH=%d; busbw = 2(n-1)/n * bytes / time\n",
               tname(t), g_size, info.ll_max, info.oneshot_max, info.twoshot_max, g_nccl->name,
               g_st ? g_st_pull.ll_batch : 0, g_st ? g_st_pull.ll_batch : 0);
        printf("%10s %-11s %11s %11s %11s %11s %11s %11s %11s %9s %12s\n", "bytes", "route",
               "custom/gr", "custom/eag", "1shot/gr",
               g_st && g_st_pull.ll_batch ? "pull1/gr" : "pull0/gr", "2shot/gr", "nccl/eager",
               "nccl/graph", "speedup", "busbw GB/s");
    }
    for (size_t bytes = 1024; bytes <= top; bytes *= 2) {
        const size_t n = bytes / es;
        const int per = bytes <= (64 << 10) ? 100 : bytes <= MIB ? 50 : bytes <= 8 * MIB ? 20 : 5;
        const int reps = 15;
        struct op o = {OP_ROUTED, d, n, t};
        double us[7];
        const enum op_kind kinds[7] = {OP_ROUTED,  OP_ROUTED, OP_ONESHOT, OP_PULL,
                                       OP_TWOSHOT, OP_NCCL,   OP_NCCL};
        const int graphs[7] = {1, 0, 1, 1, 1, 0, 1};
        for (int k = 0; k < 7; k++) {
            us[k] = NAN;
            if ((kinds[k] == OP_ONESHOT || kinds[k] == OP_PULL || kinds[k] == OP_TWOSHOT) &&
                (!g_st || bytes > info.max_bytes))
                continue;
            if (kinds[k] == OP_PULL && bytes > info.ll_max) continue; /* LL only */
            to_dev(d, h, bytes); /* fresh random data for each column */
            o.kind = kinds[k];
            us[k] = time_op(&o, per, reps, graphs[k]);
        }
        if (g_rank == 0) {
            printf("%10zu %-11s %11.2f %11.2f %11.2f %11.2f %11.2f %11.2f %11.2f %8.1fx %12.1f%s\n",
                   bytes, ls_comm_custom_path(g_custom, n, t), us[0], us[1], us[2], us[3], us[4],
                   us[5], us[6], us[6] / us[0],
                   2.0 * (g_size - 1) / g_size * (double)bytes / (us[0] * 1e3),
                   n == 4096 ? "  <- decode, dim 4096" : "");
            fflush(stdout);
        }
    }
    cudaFree(d);
    free(h);
}

/* ---- fault drill ---- */

static void run_drill(int kill_rank, int kill_at, int hang)
{
    const size_t n = 4096; /* bf16 8 KB, one-shot */
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = f2bf(uniform(1, (uint64_t)g_rank, i));
    void *d = dmalloc(n * 2);
    to_dev(d, h, n * 2);
    if (g_rank == 0)
        printf("# fault drill: rank %d leaves (%s) before all-reduce %d; the others must stop "
               "within 10 s\n",
               kill_rank, hang ? "hang" : "exit", kill_at);
    fflush(stdout);
    double last_ok = ls_now_s();
    for (int i = 0; i < kill_at + 100000; i++) {
        if (i == kill_at && g_rank == kill_rank) {
            fprintf(stderr, "lockstep: rank %d: fault drill: leaving before all-reduce %d (%s)\n",
                    g_rank, i, hang ? "hanging" : "exiting");
            fflush(stderr);
            if (!hang) _exit(0);
            for (;;) pause();
        }
        g_custom->allreduce_sum(g_custom, d, n, LS_BF16, g_stream);
        if (i % 10 == 9 || i >= kill_at) {
            double t0 = ls_now_s();
            for (;;) { /* sync_or_die, plus the time since the lost rank left */
                cudaError_t e = cudaStreamQuery(g_stream);
                if (e == cudaSuccess) break;
                if (e != cudaErrorNotReady) {
                    char msg[512] = "";
                    ls_comm_custom_check(g_custom, msg, sizeof msg);
                    die("fault drill", "after %.1f s: %s %s", ls_now_s() - last_ok,
                        cudaGetErrorString(e), msg);
                }
                if (ls_now_s() - t0 > 30)
                    die("fault drill", "HANG: no verdict 30 s after rank %d left", kill_rank);
                usleep(50);
            }
            char msg[512];
            if (ls_comm_custom_check(g_custom, msg, sizeof msg))
                die("fault drill", "detected %.1f s after the last good all-reduce: %s",
                    ls_now_s() - last_ok, msg);
            last_ok = ls_now_s();
        }
    }
    /* not report(): the lost rank would never join its MPI_Allreduce */
    die("fault drill", "FAILED: rank %d left and no all-reduce noticed", kill_rank);
}

/* ---- main ---- */

static void usage(void)
{
    fprintf(stderr,
            "usage: test_allreduce [--seed S] [--replays N] [--max-mb M] [--sweep-dtype bf16|f32]\n"
            "                      [--no-sweep] [--sweep-only]\n"
            "                      [--kill-rank R [--kill-at K] [--kill-mode exit|hang]]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    uint64_t seed = 20261129;
    int replays = 5000, sweep = 1, checks = 1, kill_rank = -1, kill_at = 300, hang = 0;
    size_t max_mb = 64;
    enum ls_dtype sweep_t = LS_BF16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seed") && v)
            seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--replays") && v)
            replays = atoi(v), i++;
        else if (!strcmp(a, "--max-mb") && v)
            max_mb = (size_t)atoi(v), i++;
        else if (!strcmp(a, "--no-sweep"))
            sweep = 0;
        else if (!strcmp(a, "--sweep-dtype") && v) {
            if (strcmp(v, "f32") && strcmp(v, "bf16")) usage();
            sweep_t = strcmp(v, "f32") ? LS_BF16 : LS_F32;
            i++;
        } else if (!strcmp(a, "--sweep-only"))
            checks = 0;
        else if (!strcmp(a, "--kill-rank") && v)
            kill_rank = atoi(v), i++;
        else if (!strcmp(a, "--kill-at") && v)
            kill_at = atoi(v), i++;
        else if (!strcmp(a, "--kill-mode") && v) {
            if (strcmp(v, "exit") && strcmp(v, "hang")) usage();
            hang = !strcmp(v, "hang");
            i++;
        } else
            usage();
    }
    if (max_mb < 1 || replays < 1 || kill_at < 0) usage();
    /* NVLink multicast can take a shared host's GPUs out of service: never */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    if (kill_rank >= 0) setenv("LOCKSTEP_AR_TIMEOUT_MS", "3000", 0);

    CHECK_MPI(MPI_Init(&argc, &argv));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &g_size));
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    ls_set_identity(g_rank, host);
    ls_install_crash_handlers();
    if (kill_rank >= g_size) usage();

    MPI_Comm node;
    int local = 0, ngpu = 0;
    CHECK_MPI(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node));
    CHECK_MPI(MPI_Comm_rank(node, &local));
    MPI_Comm_free(&node);
    CHECK_CUDA(cudaGetDeviceCount(&ngpu));
    const int dev = local % ngpu;
    CHECK_CUDA(cudaSetDevice(dev));
    /* a blocking stream: the synchronous cudaMemcpy/cudaMemset of the checks order with it */
    CHECK_CUDA(cudaStreamCreate(&g_stream));

    g_nccl = ls_comm_nccl_create(MPI_COMM_WORLD, dev);
    g_custom = ls_comm_custom_create(MPI_COMM_WORLD, dev, 64 * MIB, g_nccl);
    g_st = ls_comm_custom_state(g_custom);
    if (g_st) {
        g_st_flag = *g_st;
        g_st_flag.ll_max = 0;
        g_st_pull = *g_st;
        g_st_pull.ll_batch = !g_st->ll_batch;
    }
    struct ls_comm_custom_info info;
    ls_comm_custom_info(g_custom, &info);
    if (g_rank == 0) {
        printf("# %d ranks; custom all-reduce %s%s%s; LL <= %zu B, one-shot <= %zu B, two-shot <= "
               "%zu B, max %zu B; %d threads x <= %d blocks; fence_all %d; timeout %.1f s; "
               "%.1f MiB registered per rank\n",
               g_size, info.enabled ? "on" : "OFF (", info.enabled ? "" : info.why,
               info.enabled ? "" : ")", info.ll_max, info.oneshot_max, info.twoshot_max,
               info.max_bytes, info.threads, info.max_blocks, info.fence_all, info.timeout_s,
               (double)info.buffer_bytes / (double)MIB);
        fflush(stdout);
    }

    if (kill_rank >= 0) {
        run_drill(kill_rank, kill_at, hang);
    } else {
        if (checks) {
            report(info.enabled || g_size == 1, "custom path enabled%s%s",
                   info.enabled ? "" : " # ", info.why);
            run_sums(seed);
            run_fused(seed);
            run_graph(seed, replays);
        }
        if (sweep) run_sweep(seed, max_mb, sweep_t);
    }
    if (g_rank == 0) {
        printf("1..%d\n# %d of %d checks failed\n", g_checks, g_failed, g_checks);
        fflush(stdout);
    }
    g_custom->destroy(g_custom);
    g_nccl->destroy(g_nccl);
    CHECK_CUDA(cudaStreamDestroy(g_stream));
    CHECK_MPI(MPI_Finalize());
    return g_failed ? 1 : 0;
}
