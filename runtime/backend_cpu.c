/* The CPU backend: host memory and the reference kernels of kernels/ref.c. It is the reference
 * the CUDA backend must match. */
#include "config.h"
#include "backend.h"
#include "kernels/ref.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *cpu_alloc(size_t bytes)
{
    return calloc(1, bytes ? bytes : 1);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
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

static void *cpu_alloc_cache(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

static void cpu_kv_store(void *kc, void *vc, const float *k, const float *v, int pos0, int T, int width)
{
    memcpy((float *)kc + (size_t)pos0 * width, k, (size_t)T * width * sizeof(float));
    memcpy((float *)vc + (size_t)pos0 * width, v, (size_t)T * width * sizeof(float));
}

static void cpu_embed(float *out, const void *table, const int *ids, int T, int dim)
{
    ref_embed(out, table, ids, T, dim);
}

static void cpu_matmul(float *out, const float *in, const void *W, const float *bias, int T, int k, int n)
{
    ref_matmul(out, in, W, bias, T, k, n);
}

static void cpu_attention(float *out, const float *q, const void *kc, const void *vc, int pos0, int T,
                          int hq, int hkv, int hd, const int *kv_of)
{
    ref_attention(out, q, kc, vc, pos0, T, hq, hkv, hd, kv_of);
}

static void cpu_sync(void)
{
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
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
        double t0 = seconds(), s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += a[i];
        double dt = seconds() - t0;
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
        double t0 = seconds();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i];
        double dt = seconds() - t0;
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
    .upload_matrix = cpu_upload_matrix,
    .upload_vector = cpu_upload_vector,
    .matrix_row = cpu_matrix_row,
    .alloc_cache = cpu_alloc_cache,
    .embed = cpu_embed,
    .rmsnorm = ref_rmsnorm,
    .matmul = cpu_matmul,
    .rope = ref_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .swiglu = ref_swiglu,
    .add = ref_add,
};
