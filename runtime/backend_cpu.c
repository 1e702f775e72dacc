/* The CPU backend: host memory, fp32 everywhere, and the reference kernels of kernels/ref.c.
 * It is the reference the CUDA backend must match. KV cache layout: [max_ctx][hkv][hd]. */
#include "config.h"
#include "backend.h"
#include "sampler.h"
#include "comm.h"
#include "kernels/ref.h"
#include "log.h"
#include "check.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(size_t bytes)
{
    return calloc(1, bytes ? bytes : 1);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
}

static void *cpu_upload_matrix(float *host, size_t rows, size_t cols)
{
    (void)rows, (void)cols;
    return host;
}

static float *cpu_upload_vector(float *host, size_t n)
{
    (void)n;
    return host;
}

static void *cpu_matrix_row(void *m, size_t row, size_t cols)
{
    return (float *)m + row * cols;
}

static void *cpu_alloc_cache(int hkv, int max_ctx, int hd)
{
    return calloc((size_t)hkv * max_ctx * hd + 1, sizeof(float));
}

static void cpu_embed(float *out, const void *table, const int *ids, int T, int dim)
{
    ref_embed(out, table, ids, T, dim);
}

static void cpu_matmul(float *out, const float *in, const void *W, const float *bias, int T, int k,
                       int n)
{
    ref_matmul(out, in, W, bias, T, k, n);
}

/* scratch for silu(g) * u; grows on first use at a size, never inside a steady decode */
static float *act;
static size_t act_cap;

static void cpu_matmul_swiglu(float *out, const float *gu, const void *W, int T, int f, int n)
{
    size_t need = (size_t)T * f;
    if (need > act_cap) {
        free(act);
        act = malloc(need * sizeof *act);
        act_cap = act ? need : 0;
        if (!act) abort();
    }
    for (int t = 0; t < T; t++)
        ref_swiglu(act + (size_t)t * f, gu + (size_t)t * 2 * f, gu + (size_t)t * 2 * f + f,
                   (size_t)f);
    ref_matmul(out, act, W, NULL, T, f, n);
}

/* scratch for the composed matmul_rmsnorm / matmul_residual (the CPU path has nothing to fuse) */
static float *tmp;
static size_t tmp_cap;

static float *tmp_get(size_t n)
{
    if (n > tmp_cap) {
        free(tmp);
        tmp = malloc(n * sizeof *tmp);
        tmp_cap = tmp ? n : 0;
        if (!tmp) abort();
    }
    return tmp;
}

static void cpu_matmul_rmsnorm(float *out, const float *x, const float *nw, float eps,
                               const void *W, const float *bias, int T, int k, int n)
{
    float *xn = tmp_get((size_t)T * k);
    ref_rmsnorm(xn, x, nw, T, k, eps);
    ref_matmul(out, xn, W, bias, T, k, n);
}

static void cpu_matmul_residual(float *x, const float *in, const void *W, int T, int k, int n,
                                int swiglu)
{
    float *y = tmp_get((size_t)T * n);
    if (swiglu)
        cpu_matmul_swiglu(y, in, W, T, k, n);
    else
        ref_matmul(y, in, W, NULL, T, k, n);
    ref_add(x, y, (size_t)T * n);
}

/* composed as the engine's unfused sequence computes it: the same results bit for bit */
static int cpu_matmul_gu_swiglu(float *h, const float *x, const float *nw, float eps,
                                const void *W, int k, int f)
{
    float *s = tmp_get((size_t)k + 2 * (size_t)f), *gu = s + k;
    const float *in = x;
    if (nw) {
        ref_rmsnorm(s, x, nw, 1, k, eps);
        in = s;
    }
    ref_matmul(gu, in, W, NULL, 1, k, 2 * f);
    ref_swiglu(h, gu, gu + f, (size_t)f);
    return 1;
}

static void cpu_rope_kv(float *qkv, int stride, void *kc, void *vc, const int *pos,
                        const float *inv_freq, int T, int hq, int hkv, int hd, int max_ctx,
                        int interleaved, const float *q_norm, const float *k_norm, float eps)
{
    (void)max_ctx;
    for (int t = 0; t < T; t++) {
        float *q = qkv + (size_t)t * stride, *k = q + (size_t)hq * hd, *v = k + (size_t)hkv * hd;
        if (q_norm) ref_rmsnorm(q, q, q_norm, hq, hd, eps);
        if (k_norm) ref_rmsnorm(k, k, k_norm, hkv, hd, eps);
        ref_rope(q, &pos[t], 1, hq, hd, inv_freq, interleaved);
        ref_rope(k, &pos[t], 1, hkv, hd, inv_freq, interleaved);
        size_t row = (size_t)pos[t] * hkv * hd;
        memcpy((float *)kc + row, k, (size_t)hkv * hd * sizeof(float));
        memcpy((float *)vc + row, v, (size_t)hkv * hd * sizeof(float));
    }
}

/* composed: the engine's fused sequence is the same calls on the CPU */
static void cpu_matmul_rope_kv(float *qkv, float *x, float *xpend, const float *nw, float eps,
                               const void *W, const float *bias, int k, void *kc, void *vc,
                               const int *pos, const float *inv_freq, int hq, int hkv, int hd,
                               int max_ctx, int interleaved)
{
    if (xpend) /* made only by attn_out_mlp, which this backend does not offer */
        ls_die(__FILE__, __LINE__, "cpu_matmul_rope_kv", "a pending sum on the CPU backend");
    const int n = (hq + 2 * hkv) * hd;
    if (nw)
        cpu_matmul_rmsnorm(qkv, x, nw, eps, W, bias, 1, k, n);
    else
        ref_matmul(qkv, x, W, bias, 1, k, n);
    cpu_rope_kv(qkv, n, kc, vc, pos, inv_freq, 1, hq, hkv, hd, max_ctx, interleaved, NULL, NULL,
                0.0f);
}

static void cpu_attention(float *out, const float *qkv, int stride, const void *kc, const void *vc,
                          const int *pos, int pos0, int T, int hq, int hkv, int hd, int max_ctx)
{
    (void)pos, (void)max_ctx;
    int kv_of[1024];
    for (int h = 0; h < hq; h++) kv_of[h] = h / (hq / hkv);
    ref_attention(out, qkv, stride, kc, vc, pos0, T, hq, hkv, hd, kv_of);
}

static void cpu_add_rmsnorm(float *out, float *x, const float *res, const float *w, int rows,
                            int dim, float eps)
{
    ref_add(x, res, (size_t)rows * dim);
    ref_rmsnorm(out, x, w, rows, dim, eps);
}

static void cpu_allreduce_add_rmsnorm(struct ls_comm *comm, float *partial, float *x, float *normed,
                                      const float *w, int rows, int dim, float eps)
{
    comm->allreduce_sum(comm, partial, (size_t)rows * dim, LS_F32, NULL);
    if (!normed) {
        ref_add(x, partial, (size_t)rows * dim);
        return;
    }
    cpu_add_rmsnorm(normed, x, partial, w, rows, dim, eps);
}

/* one slice a row (no score_split) */
static void cpu_row_logprobs(double *out, const float *logits, int rows, int n, size_t ld,
                             const int *targets, int first, int N, int split)
{
    (void)split;
    ref_row_logprobs(out, logits, rows, n, ld, targets, first, N);
}

static void cpu_argmax(int *out, const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    *out = best;
}

static void cpu_argmax_pick(int *out, const float *pairs, int tp)
{
    *out = ref_argmax_pick(pairs, tp);
}

static void cpu_sample(int *out, const float *logits, int n, float temperature, int top_k,
                       float top_p, float min_p, const double *u, void *ws)
{
    (void)ws;
    struct ls_sampling p;
    ls_sampling_defaults(&p);
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    *out = ls_sample_with(&p, logits, n, *u);
}

static size_t cpu_sample_ws(int n)
{
    (void)n;
    return 16;
}

/* the CPU's work is done when issued: the token is posted at once */
static int cpu_posted[2][2] = {{-1, 0}, {-1, 0}}; /* a slot's position and token */
static double cpu_uposted[2];                     /* the numbers drawn steps hand on */

static void cpu_advance(int *pos, const int *tok, double *u, int *pick)
{
    if (pick) /* only after matmul_argmax, which this backend does not offer */
        ls_die(__FILE__, __LINE__, "cpu_advance", "a pick without matmul_argmax");
    if (tok) {
        cpu_posted[pos[0] & 1][0] = pos[0];
        cpu_posted[pos[0] & 1][1] = tok[0];
    }
    if (u) u[0] = cpu_uposted[(pos[0] + 1) & 1];
    pos[0] += 1;
}

static void cpu_u_post(int pos, double u)
{
    cpu_uposted[pos & 1] = u;
}

static double cpu_scores[2][LS_SCORE_ROW_MAX]; /* a scored step's, a slot a parity */

static void cpu_scores_post(const int *pos, const double *src, int n)
{
    memcpy(cpu_scores[pos[0] & 1], src, (size_t)n * sizeof *src);
}

static void cpu_scores_take(int pos, double *dst, int n)
{
    memcpy(dst, cpu_scores[pos & 1], (size_t)n * sizeof *dst);
}

static void cpu_posts_clear(void)
{
    cpu_posted[0][0] = cpu_posted[1][0] = -1;
}

static void cpu_sync(void) {}

static int cpu_token_take(int pos)
{
    if (cpu_posted[pos & 1][0] != pos) {
        char msg[128];
        snprintf(msg, sizeof msg, "position %d's token was never posted (its slot holds %d's)", pos,
                 cpu_posted[pos & 1][0]);
        ls_die(__FILE__, __LINE__, "cpu_token_take", msg);
    }
    return cpu_posted[pos & 1][1];
}

/* best of 3 parallel passes over a buffer the rank's threads first-touched (so its pages sit on
 * the rank's NUMA node); the sum is kept so the reads cannot be optimised away */
static volatile double cpu_sink;

static double cpu_read_bandwidth(size_t bytes)
{
    size_t n = bytes / sizeof(double);
    double *a = malloc(n * sizeof *a);
    if (!a) return 0;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = (double)(i & 7);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = ls_now_s(), s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += a[i];
        double dt = ls_now_s() - t0;
        cpu_sink = s;
        if (dt < best) best = dt;
    }
    free(a);
    return (double)(n * sizeof(double)) / best / 1e9;
}

static double cpu_copy_bandwidth(size_t bytes)
{
    size_t n = bytes / sizeof(double);
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (double)(i & 7);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = ls_now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i];
        double dt = ls_now_s() - t0;
        if (dt < best) best = dt;
    }
    cpu_sink = b[n / 2];
    free(a);
    free(b);
    return 2.0 * (double)(n * sizeof(double)) / best / 1e9;
}

const struct ls_backend ls_backend_cpu = {
    .name = "cpu",
    .weight_bytes = 4,
    .stream = NULL,
    .sync = cpu_sync,
    .read_bandwidth = cpu_read_bandwidth,
    .copy_bandwidth = cpu_copy_bandwidth,
    .alloc = cpu_alloc,
    .free = free,
    .to_host = cpu_copy,
    .to_device = cpu_copy,
    .copy = cpu_copy,
    .upload_matrix = cpu_upload_matrix,
    .upload_vector = cpu_upload_vector,
    .matrix_row = cpu_matrix_row,
    .alloc_cache = cpu_alloc_cache,
    .embed = cpu_embed,
    .rmsnorm = ref_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .matmul = cpu_matmul,
    .matmul_swiglu = cpu_matmul_swiglu,
    .matmul_rmsnorm = cpu_matmul_rmsnorm,
    .matmul_residual = cpu_matmul_residual,
    .rope_kv = cpu_rope_kv,
    .matmul_rope_kv = cpu_matmul_rope_kv,
    .matmul_gu_swiglu = cpu_matmul_gu_swiglu,
    .attention = cpu_attention,
    .add = ref_add,
    .allreduce_add_rmsnorm = cpu_allreduce_add_rmsnorm,
    .argmax = cpu_argmax,
    .argmax_pairs = ref_argmax_pairs,
    .argmax_pick = cpu_argmax_pick,
    .row_logprobs = cpu_row_logprobs,
    .sample = cpu_sample,
    .sample_ws = cpu_sample_ws,
    .penalize = ref_penalize,
    .advance = cpu_advance,
    .token_take = cpu_token_take,
    .u_post = cpu_u_post,
    .scores_post = cpu_scores_post,
    .scores_take = cpu_scores_take,
    .posts_clear = cpu_posts_clear,
};
