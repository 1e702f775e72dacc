// See gemm.h. cuBLASLt is column-major; our row-major matrices are their transposes:
//   W [n][k] row-major = a k x n column-major matrix (ld k), used transposed: op(A) = W, n x k
//   A [T][k] row-major = a k x T column-major matrix (ld k), op(B) = it, k x T
//   C [T][n] row-major = an n x T column-major matrix (ld n) = W . A^T
// so one call computes D (n x T) = op(A) op(B) with the bias broadcast along D's rows (length n),
// cuBLASLt's BIAS epilogue. A matrix stored transposed, WT [k][n] row-major, is an n x k
// column-major matrix (ld n) already: op(A) = it as it is (ls_gemm_bf16_add_wt). Descriptors and
// the chosen algorithm are cached per (T, k, n, bias, alignment, layout); the bias pointer is
// set on each call.
#include "config.h"
#include "gemm.h"
#include "runtime/check.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#define GEMM_WORKSPACE (32u << 20)
#define GEMM_CACHE     32

#define CHECK_CUBLAS(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t ls_s_ = (call);                                                             \
        if (ls_s_ != CUBLAS_STATUS_SUCCESS)                                                        \
            ls_die(__FILE__, __LINE__, #call, cublasLtGetStatusString(ls_s_));                     \
    } while (0)

struct gemm_plan {
    int T, k, n, bias, align, wt; // key; T == 0: empty slot
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

struct ls_gemm {
    cublasLtHandle_t lt;
    void *ws;
    struct gemm_plan plan[GEMM_CACHE];
    int next; // slot to replace when the cache is full
};

extern "C" struct ls_gemm *ls_gemm_create(void)
{
    struct ls_gemm *g = (struct ls_gemm *)calloc(1, sizeof *g);
    CHECK_ALLOC(g);
    if (cudaMalloc(&g->ws, GEMM_WORKSPACE) != cudaSuccess) {
        cudaGetLastError();
        free(g);
        return NULL;
    }
    CHECK_CUBLAS(cublasLtCreate(&g->lt));
    return g;
}

static void plan_free(struct gemm_plan *p)
{
    if (p->T == 0) return;
    CHECK_CUBLAS(cublasLtMatmulDescDestroy(p->op));
    CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->a));
    CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->b));
    CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->c));
    p->T = 0;
}

extern "C" size_t ls_gemm_workspace_bytes(void)
{
    return GEMM_WORKSPACE;
}

extern "C" void ls_gemm_free(struct ls_gemm *g)
{
    if (!g) return;
    for (int i = 0; i < GEMM_CACHE; i++) plan_free(&g->plan[i]);
    CHECK_CUDA(cudaFree(g->ws));
    CHECK_CUBLAS(cublasLtDestroy(g->lt));
    free(g);
}

// largest power of two <= 256 dividing every address (what the heuristic may assume)
static int alignment(const void *p0, const void *p1, const void *p2)
{
    uintptr_t a = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | 256;
    return (int)(a & (~a + 1));
}

// the descriptors of one shape (the key's fields set, no algorithm yet)
static void plan_desc(struct gemm_plan *p, int T, int k, int n, int bias, int align, int wt)
{
    CHECK_CUBLAS(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = wt ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CHECK_CUBLAS(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_CUBLAS(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F;
        CHECK_CUBLAS(
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                    sizeof bt));
    }
    if (wt)
        CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)n, (uint64_t)k, n));
    else
        CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)k, (uint64_t)T, k));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)n, (uint64_t)T, n));
    p->T = T, p->k = k, p->n = n, p->bias = bias, p->align = align, p->wt = wt;
}

// the heuristic's first `max` algorithms for p's shape, best first; how many it gave
static int plan_algos(struct ls_gemm *g, const struct gemm_plan *p,
                      cublasLtMatmulHeuristicResult_t *res, int max)
{
    cublasLtMatmulPreference_t pref;
    CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = GEMM_WORKSPACE;
    uint32_t al = (uint32_t)p->align;
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t al_attr[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al, sizeof al));
    int found = 0;
    CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->a, p->b, p->c, p->c, pref, max,
                                                res, &found));
    CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
    if (found < 1) ls_die(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", "no algorithm");
    return found;
}

static struct gemm_plan *plan_get(struct ls_gemm *g, int T, int k, int n, int bias, int align,
                                  int wt)
{
    for (int i = 0; i < GEMM_CACHE; i++) {
        struct gemm_plan *p = &g->plan[i];
        if (p->T == T && p->k == k && p->n == n && p->bias == bias && p->align == align &&
            p->wt == wt)
            return p;
    }
    struct gemm_plan *p = &g->plan[g->next];
    g->next = (g->next + 1) % GEMM_CACHE;
    plan_free(p);
    plan_desc(p, T, k, n, bias, align, wt);
    cublasLtMatmulHeuristicResult_t res;
    plan_algos(g, p, &res, 1);
    p->algo = res.algo;
    return p;
}

// C = A W^T (+ bias), or C += A W^T (beta 1: C read and written in place, one layout); wt: W
// given transposed, [k][n]
static void gemm_run(struct ls_gemm *g, float *C, const uint16_t *A, const uint16_t *W,
                     const float *bias, int T, int k, int n, float beta, int wt, void *stream)
{
    if (T < 1 || k < 1 || n < 1) ls_die(__FILE__, __LINE__, "ls_gemm_bf16", "T, k, n must be >= 1");
    int align = alignment(A, W, C);
    if (bias) {
        int ab = alignment(bias, bias, bias);
        align = ab < align ? ab : align;
    }
    struct gemm_plan *p = plan_get(g, T, k, n, bias != NULL, align, wt);
    if (bias)
        CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                    sizeof bias));
    const float one = 1.0f;
    CHECK_CUBLAS(cublasLtMatmul(g->lt, p->op, &one, W, p->a, A, p->b, &beta, C, p->c, C, p->c,
                                &p->algo, g->ws, GEMM_WORKSPACE, (cudaStream_t)stream));
}

extern "C" void ls_gemm_bf16(struct ls_gemm *g, float *C, const uint16_t *A, const uint16_t *W,
                             const float *bias, int T, int k, int n, void *stream)
{
    gemm_run(g, C, A, W, bias, T, k, n, 0.0f, 0, stream);
}

extern "C" void ls_gemm_bf16_add(struct ls_gemm *g, float *C, const uint16_t *A, const uint16_t *W,
                                 int T, int k, int n, void *stream)
{
    gemm_run(g, C, A, W, NULL, T, k, n, 1.0f, 0, stream);
}

extern "C" void ls_gemm_bf16_add_wt(struct ls_gemm *g, float *C, const uint16_t *A,
                                    const uint16_t *WT, int T, int k, int n, void *stream)
{
    gemm_run(g, C, A, WT, NULL, T, k, n, 1.0f, 1, stream);
}

extern "C" int ls_gemm_time_algos(struct ls_gemm *g, float *C, const uint16_t *A,
                                  const uint16_t *const *W, int nw, int T, int k, int n, int add,
                                  int wt, int reps, float *ms, int max, void *stream)
{
    if (T < 1 || k < 1 || n < 1 || nw < 1 || reps < 1 || max < 1)
        ls_die(__FILE__, __LINE__, "ls_gemm_time_algos", "T, k, n, nw, reps, max must be >= 1");
    int align = alignment(A, W[0], C);
    for (int i = 1; i < nw; i++) {
        int a = alignment(W[i], W[i], W[i]);
        align = a < align ? a : align;
    }
    struct gemm_plan p = {};
    plan_desc(&p, T, k, n, 0, align, wt);
    cublasLtMatmulHeuristicResult_t *res =
        (cublasLtMatmulHeuristicResult_t *)calloc((size_t)max, sizeof *res);
    CHECK_ALLOC(res);
    int found = plan_algos(g, &p, res, max);
    cudaStream_t s = (cudaStream_t)stream;
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    const float one = 1.0f, beta = add ? 1.0f : 0.0f;
    for (int a = 0; a < found; a++) {
        ms[a] = -1.0f;
        // an algorithm the heuristic lists may still refuse this call: not timed (-1)
        if (cublasLtMatmul(g->lt, p.op, &one, W[0], p.a, A, p.b, &beta, C, p.c, C, p.c,
                           &res[a].algo, g->ws, GEMM_WORKSPACE, s) != CUBLAS_STATUS_SUCCESS)
            continue;
        CHECK_CUDA(cudaEventRecord(e0, s));
        for (int r = 0; r < reps; r++)
            CHECK_CUBLAS(cublasLtMatmul(g->lt, p.op, &one, W[r % nw], p.a, A, p.b, &beta, C, p.c, C,
                                        p.c, &res[a].algo, g->ws, GEMM_WORKSPACE, s));
        CHECK_CUDA(cudaEventRecord(e1, s));
        CHECK_CUDA(cudaEventSynchronize(e1));
        CHECK_CUDA(cudaEventElapsedTime(&ms[a], e0, e1));
        ms[a] /= (float)reps;
    }
    CHECK_CUDA(cudaEventDestroy(e0));
    CHECK_CUDA(cudaEventDestroy(e1));
    free(res);
    plan_free(&p);
    return found;
}
