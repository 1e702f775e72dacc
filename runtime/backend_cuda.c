/* The CUDA backend: bf16 weights and KV cache in device memory, fp32 activations, every
 * operation on one stream (the collectives run on it too), kernels from the kernels folder.
 * Decode (T <= 8 positions) uses the GEMV kernels, prefill cuBLASLt on bf16 copies of the
 * activations. The greedy decode step is captured once into a CUDA graph (thread-local capture
 * mode, which NCCL supports) and replayed per token; nothing in it allocates or synchronises.
 * Buffers that only the eager prefill needs (bf16 activations, the attention workspace) are
 * sized on first use, which is always an eager prefill, never inside a capture. */
#include "config.h"
#include "backend.h"
#include "check.h"
#include "comm_custom.h"
#include "decode_form.h"
#include "kernels/attention.h"
#include "kernels/bandwidth.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "kernels/ref.h"
#include "kernels/rope.h"
#include "kernels/sample.h"
#include "kernels/step.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(LS_PEND_ROWS == LS_GEMV_PEND_ROWS, "the engine sizes the pending sum the GEMV "
                                                  "kernels read");

#define GEMV_MAX_T 8

static struct {
    cudaStream_t stream;
    struct ls_gemm *gemm;
    uint16_t *act16;    /* a prefill GEMM's bf16 input */
    size_t act16_cap;   /* elements */
    float *attn_ws;     /* flash-decoding partials */
    size_t attn_ws_cap; /* bytes */
    int att_form;       /* the decode form (cu_decode_form): 1 the attention without clusters,
                         * 2 streamed */
    /* two slots of mapped, pinned host memory where a step's last kernel posts its token
     * (cu_advance), and their device address */
    volatile unsigned long long *post;
    unsigned long long *post_dev;
    /* two more slots there: the numbers drawn steps hand on (cu_u_post) */
    volatile double *upost;
    double *upost_dev;
    /* and a scored step's scores (cu_scores_post), LS_SCORE_ROW_MAX doubles a parity, with a
     * tag each saying whose they are */
    volatile double *spost;
    double *spost_dev;
    volatile unsigned long long *stag;
    unsigned long long *stag_dev;
    /* the greedy choice matmul_argmax folds the LM head's blocks' largest into and the next
     * advance takes (ls_gemv_argmax; device memory, 0 between steps) */
    unsigned long long *am_key;
    /* the decode attention attention_for_out_mlp left as its split's partials, for the next
     * attn_out_mlp to merge (out NULL: none) */
    struct {
        float *out;
        const float *qkv;
        const void *kc, *vc;
        const int *pos;
        int hq, hkv, hd, max_ctx, nsplit;
    } att_defer;
} cu;

static cudaStream_t stream_get(void)
{
    if (!cu.stream) {
        CHECK_CUDA(cudaStreamCreateWithFlags(&cu.stream, cudaStreamNonBlocking));
        /* programmatic dependent launch: a GEMV's first weight loads overlap the tail of the
         * kernel before it (measured: 128 -> 118 us per Llama-8B layer of GEMVs back to back);
         * LOCKSTEP_PDL=0 turns it off */
        const char *pdl = getenv("LOCKSTEP_PDL");
        ls_kernels_set_pdl(!(pdl && !strcmp(pdl, "0")));
        /* LOCKSTEP_CARVEOUT=PCT: one shared-memory carveout for every kernel (experiment) */
        const char *co = getenv("LOCKSTEP_CARVEOUT");
        if (co && *co) ls_kernels_set_carveout(atoi(co));
        /* 32 bytes, allocated here since advance is first called inside a capture */
        char *post;
        CHECK_CUDA(cudaHostAlloc((void **)&post, 32, cudaHostAllocMapped));
        memset(post, 0xff, 16); /* position -1 */
        memset(post + 16, 0, 16);
        char *dev;
        CHECK_CUDA(cudaHostGetDevicePointer((void **)&dev, post, 0));
        cu.post = (volatile unsigned long long *)post;
        cu.post_dev = (unsigned long long *)dev;
        cu.upost = (volatile double *)(post + 16);
        cu.upost_dev = (double *)(dev + 16);
        /* the scores' tags and slots (also first used inside a capture) */
        CHECK_CUDA(cudaHostAlloc((void **)&post, 64 + 2 * LS_SCORE_ROW_MAX * sizeof(double),
                                 cudaHostAllocMapped));
        memset(post, 0, 64); /* no position's */
        CHECK_CUDA(cudaHostGetDevicePointer((void **)&dev, post, 0));
        cu.stag = (volatile unsigned long long *)post;
        cu.stag_dev = (unsigned long long *)dev;
        cu.spost = (volatile double *)(post + 64);
        cu.spost_dev = (double *)(dev + 64);
        CHECK_CUDA(cudaMalloc((void **)&cu.am_key, sizeof *cu.am_key));
        CHECK_CUDA(cudaMemset(cu.am_key, 0, sizeof *cu.am_key));
    }
    return cu.stream;
}

static void *cu_stream(void)
{
    return stream_get();
}

/* Weight uploads: each matrix is converted to bf16 in pieces into two pinned staging buffers
 * in turn and copied on a stream of their own, so the conversion of one piece overlaps the DMA
 * of the one before, and the last DMA of a matrix overlaps the loader reading the next tensor.
 * cu_sync waits for them (the model loader calls it once at the end). */
#define STAGE_ELEMS ((size_t)32 << 20) /* 64 MB of bf16 per staging buffer */

static struct {
    cudaStream_t s;
    uint16_t *buf[2];
    cudaEvent_t free_ev[2]; /* the DMA out of buf[i] is done */
    int cur;
} up;

static int upload_init(void)
{
    if (up.s) return 0;
    stream_get(); /* the device is chosen and the context made */
    for (int i = 0; i < 2; i++) {
        if (cudaHostAlloc((void **)&up.buf[i], STAGE_ELEMS * sizeof(uint16_t),
                          cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            return -1;
        }
        CHECK_CUDA(cudaEventCreateWithFlags(&up.free_ev[i], cudaEventDisableTiming));
    }
    CHECK_CUDA(cudaStreamCreateWithFlags(&up.s, cudaStreamNonBlocking));
    return 0;
}

static void cu_sync(void)
{
    if (up.s) CHECK_CUDA(cudaStreamSynchronize(up.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_get()));
}

static double cu_read_bandwidth(size_t bytes)
{
    return ls_bandwidth_read(bytes, 7, stream_get());
}

static double cu_copy_bandwidth(size_t bytes)
{
    return ls_bandwidth_copy(bytes, 7, stream_get());
}

static size_t cu_mem_free(void)
{
    size_t f = 0, t = 0;
    stream_get();
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return f;
}

static void *cu_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    CHECK_CUDA(cudaMemset(p, 0, bytes ? bytes : 1));
    return p;
}

static void cu_free(void *p)
{
    if (p) CHECK_CUDA(cudaFree(p));
}

static void cu_to_host(void *dst, const void *src, size_t bytes)
{
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_get()));
    CHECK_CUDA(cudaStreamSynchronize(stream_get()));
}

static void cu_to_device(void *dst, const void *src, size_t bytes)
{
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_get()));
    CHECK_CUDA(cudaStreamSynchronize(stream_get()));
}

static void cu_copy(void *dst, const void *src, size_t bytes)
{
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_get()));
}

/* fp32 -> bf16, round to nearest even (NaN stays NaN) */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* src[0, n) to bf16 at dst, on every core */
static void to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = to_bf16(src[i]);
}

static void *cu_upload_matrix(float *host, size_t rows, size_t cols)
{
    size_t n = rows * cols;
    void *d = NULL;
    if (cudaMalloc(&d, n * sizeof(uint16_t) + 2) != cudaSuccess) {
        cudaGetLastError();
        free(host);
        return NULL;
    }
    if (upload_init()) { /* no pinned memory: one synchronous copy from pageable memory */
        uint16_t *h16 = malloc(n * sizeof *h16 + 2);
        if (!h16) {
            free(host);
            CHECK_CUDA(cudaFree(d));
            return NULL;
        }
        to_bf16_n(h16, host, n);
        CHECK_CUDA(cudaMemcpy(d, h16, n * sizeof *h16, cudaMemcpyHostToDevice));
        free(h16);
        free(host);
        return d;
    }
    for (size_t off = 0; off < n; off += STAGE_ELEMS) {
        size_t m = n - off < STAGE_ELEMS ? n - off : STAGE_ELEMS;
        int b = up.cur;
        up.cur ^= 1;
        CHECK_CUDA(cudaEventSynchronize(up.free_ev[b])); /* its previous DMA is done */
        uint16_t *h16 = up.buf[b];
        to_bf16_n(h16, host + off, m);
        CHECK_CUDA(cudaMemcpyAsync((uint16_t *)d + off, h16, m * sizeof *h16,
                                   cudaMemcpyHostToDevice, up.s));
        CHECK_CUDA(cudaEventRecord(up.free_ev[b], up.s));
    }
    free(host); /* converted: the DMAs read the staging buffers only */
    return d;
}

static float *cu_upload_vector(float *host, size_t n)
{
    void *d = NULL;
    if (cudaMalloc(&d, n * sizeof(float) + 4) != cudaSuccess) {
        cudaGetLastError();
        free(host);
        return NULL;
    }
    CHECK_CUDA(cudaMemcpy(d, host, n * sizeof(float), cudaMemcpyHostToDevice));
    free(host);
    return d;
}

static void *cu_matrix_row(void *m, size_t row, size_t cols)
{
    return (uint16_t *)m + row * cols;
}

static void *cu_alloc_cache(int hkv, int max_ctx, int hd)
{
    return cu_alloc((size_t)hkv * max_ctx * hd * sizeof(uint16_t));
}

/* *p to at least need_bytes (what it held is dropped): 0, or -1 when out of memory (*p NULL) */
static int try_grow(void **p, size_t *cap, size_t need_bytes)
{
    if (need_bytes <= *cap) return 0;
    if (*p) CHECK_CUDA(cudaFree(*p));
    *p = NULL;
    *cap = 0;
    if (cudaMalloc(p, need_bytes) != cudaSuccess) {
        cudaGetLastError();
        *p = NULL; /* whatever the failed call left there */
        return -1;
    }
    *cap = need_bytes;
    return 0;
}

/* ends the job: no device memory for what (need bytes), with the numbers (cu_reserve sized the
 * buffers at start-up: only a caller past what it was told gets here) */
static void die_no_memory(const char *what, size_t need)
{
    char msg[200];
    snprintf(msg, sizeof msg, "out of GPU memory for %s: %.1f MB needed, %.1f MB free", what,
             need / 1e6, cu_mem_free() / 1e6);
    ls_die(__FILE__, __LINE__, "grow", msg);
}

static void cu_embed(float *out, const void *table, const int *ids, int T, int dim)
{
    ls_embed(out, table, ids, T, dim, 0, INT_MAX / 2, stream_get());
}

static void cu_rmsnorm(float *out, const float *x, const float *w, int rows, int dim, float eps)
{
    ls_rmsnorm(out, x, w, rows, dim, eps, stream_get());
}

static void cu_add_rmsnorm(float *out, float *x, const float *res, const float *w, int rows,
                           int dim, float eps)
{
    ls_add_rmsnorm(out, x, res, w, rows, dim, eps, stream_get());
}

/* cu.act16 to at least bytes (try_grow, its capacity kept in elements) */
static int act16_try_grow(size_t bytes)
{
    size_t cap = cu.act16_cap * sizeof(uint16_t);
    const int rc = try_grow((void **)&cu.act16, &cap, bytes);
    cu.act16_cap = cap / sizeof(uint16_t);
    return rc;
}

/* a prefill chunk's GEMM input: T x k bf16 in cu.act16 (eager, so it may grow) */
static uint16_t *act16(int T, int k)
{
    const size_t bytes = (size_t)T * k * sizeof(uint16_t);
    if (act16_try_grow(bytes)) die_no_memory("a prefill GEMM's input", bytes);
    if (!cu.gemm && !(cu.gemm = ls_gemm_create()))
        die_no_memory("cuBLASLt's workspace", ls_gemm_workspace_bytes());
    return cu.act16;
}

/* add: GEMM_SET out = a W^T (+ bias), GEMM_ADD out += a W^T, GEMM_ADD_WT out += a W^T with W
 * stored transposed ([k][n], the fused MLP's down matrices); a the bf16 input act16 holds */
enum { GEMM_SET, GEMM_ADD, GEMM_ADD_WT };
static void gemm16(float *out, const uint16_t *a, const void *W, const float *bias, int T, int k,
                   int n, int add)
{
    if (add == GEMM_ADD_WT)
        ls_gemm_bf16_add_wt(cu.gemm, out, a, W, T, k, n, stream_get());
    else if (add == GEMM_ADD)
        ls_gemm_bf16_add(cu.gemm, out, a, W, T, k, n, stream_get());
    else
        ls_gemm_bf16(cu.gemm, out, a, W, bias, T, k, n, stream_get());
}

/* the fp32 input rounded to bf16, then the GEMM */
static void gemm(float *out, const float *in, const void *W, const float *bias, int T, int k, int n,
                 int add)
{
    uint16_t *a = act16(T, k);
    ls_fp32_to_bf16(a, in, (size_t)T * k, stream_get());
    gemm16(out, a, W, bias, T, k, n, add);
}

static void cu_matmul(float *out, const float *in, const void *W, const float *bias, int T, int k,
                      int n)
{
    if (T <= GEMV_MAX_T)
        ls_gemv(out, W, in, bias, T, n, k, stream_get());
    else
        gemm(out, in, W, bias, T, k, n, GEMM_SET);
}

/* a prefill chunk: the SwiGLU of gate | up written as the down matmul's bf16 input */
static void swiglu_gemm(float *out, const float *gu, const void *W, int T, int f, int n, int add)
{
    uint16_t *a = act16(T, f);
    ls_swiglu_cat_bf16(a, gu, T, f, stream_get());
    gemm16(out, a, W, NULL, T, f, n, add);
}

static void cu_matmul_swiglu(float *out, const float *gu, const void *W, int T, int f, int n)
{
    if (T <= GEMV_MAX_T)
        ls_gemv_swiglu(out, W, gu, NULL, T, n, f, stream_get());
    else
        swiglu_gemm(out, gu, W, T, f, n, GEMM_SET);
}

/* decode (T <= 8): one GEMV with the norm or the residual add fused; a prefill chunk: the norm
 * written as the GEMM's bf16 input, the residual added in the GEMM's epilogue */
static void cu_matmul_rmsnorm(float *out, const float *x, const float *nw, float eps, const void *W,
                              const float *bias, int T, int k, int n)
{
    if (T <= GEMV_MAX_T) {
        ls_gemv_ex(out, W, x, bias, T, n, k, 0, nw, eps, 0, stream_get());
        return;
    }
    uint16_t *a = act16(T, k);
    ls_rmsnorm_bf16(a, x, nw, T, k, eps, stream_get());
    gemm16(out, a, W, bias, T, k, n, GEMM_SET);
}

static void cu_matmul_residual(float *x, const float *in, const void *W, int T, int k, int n,
                               int swiglu)
{
    if (T <= GEMV_MAX_T) {
        ls_gemv_ex(x, W, in, NULL, T, n, k, swiglu, NULL, 0.0f, 1, stream_get());
        return;
    }
    if (swiglu)
        swiglu_gemm(x, in, W, T, k, n, GEMM_ADD);
    else
        gemm(x, in, W, NULL, T, k, n, GEMM_ADD);
}

static void cu_rope_kv(float *qkv, int stride, void *kc, void *vc, const int *pos,
                       const float *inv_freq, int T, int hq, int hkv, int hd, int max_ctx,
                       int interleaved, const float *q_norm, const float *k_norm, float eps)
{
    float *q = qkv, *k = qkv + (size_t)hq * hd, *v = qkv + (size_t)(hq + hkv) * hd;
    ls_rope_kv(q, k, v, stride, stride, kc, vc, pos, inv_freq, T, hq, hkv, hd, max_ctx, interleaved,
               q_norm, k_norm, eps, stream_get());
}

static int cu_matmul_gu_swiglu(float *h, const float *x, const float *nw, float eps, const void *W,
                               int k, int f)
{
    return ls_gemv_gu_swiglu(h, W, x, nw, eps, f, k, stream_get());
}

/* x's pending sum read with x by the GEMV, or (a shape it does not take) taken into x first */
static void cu_matmul_rope_kv(float *qkv, float *x, float *xpend, const float *nw, float eps,
                              const void *W, const float *bias, int k, void *kc, void *vc,
                              const int *pos, const float *inv_freq, int hq, int hkv, int hd,
                              int max_ctx, int interleaved)
{
    if (xpend && ls_gemv_rope_kv(qkv, W, x, xpend, bias, k, nw, eps, hq, hkv, hd, kc, vc, pos,
                                 inv_freq, max_ctx, interleaved, stream_get()))
        return;
    if (xpend) ls_pending_resolve(x, xpend, (size_t)k, stream_get());
    ls_gemv_rope_kv(qkv, W, x, NULL, bias, k, nw, eps, hq, hkv, hd, kc, vc, pos, inv_freq, max_ctx,
                    interleaved, stream_get());
}

static void cu_matmul_rmsnorm_pend(float *out, float *x, float *xpend, const float *nw, float eps,
                                   const void *W, const float *bias, int k, int n)
{
    if (ls_gemv_pend(out, W, x, xpend, bias, n, k, nw, eps, stream_get())) return;
    ls_pending_resolve(x, xpend, (size_t)k, stream_get());
    cu_matmul_rmsnorm(out, x, nw, eps, W, bias, 1, k, n);
}

static int cu_attn_out_mlp_takes(const float *x, const float *xin, const float *pend,
                                 const float *att, const void *Wo, const void *Wgu,
                                 const void *downT, const float *nw, int qd, int dim, int f)
{
    (void)x;
    return ls_gemv_residual_copy_takes(Wo, att, dim, qd) &&
           ls_gemv_mlp_takes(Wgu, downT, xin, pend, nw, f, dim);
}

/* LOCKSTEP_ATT_DEFER=0|1|2 (an experiment, off by default): 1, the decode attention before the
 * fused MLP's o GEMV leaves its split's partials for that GEMV to merge as it loads them
 * (kernels/att_split.cuh), where the attention would merge them itself, so the cluster merge's
 * barrier round leaves the attention's chain (a lab that left the merge out, 6c6cc4a, measured
 * it: the attention 4.58 -> 3.11 us a layer, the step 3.710 -> 3.665 ms a token on the 8B,
 * BENCHMARKS.md, fifty-second session); 2, the same with each column's merge shared by the o
 * GEMV's warps that read it. The same bits as the attention's own merge where its clusters
 * apply. */
static int att_defer_on(void)
{
    static int on = -2;
    if (on == -2) {
        const char *v = getenv("LOCKSTEP_ATT_DEFER");
        on = v && (!strcmp(v, "1") || !strcmp(v, "2")) ? v[0] - '0' : 0;
    }
    return on;
}

/* the decode attention (T = 1) whose one reader is the next attn_out_mlp: its split's partials
 * left in the workspace for that call's o GEMV to merge; 0, nothing launched, where it does not
 * apply (the caller then runs attention) */
static int cu_attention_for_out_mlp(float *out, const float *qkv, const void *kc, const void *vc,
                                    const int *pos, int hq, int hkv, int hd, int max_ctx)
{
    cu.att_defer.out = NULL;
    if (!att_defer_on() || cu.att_form != 0) return 0;
    const int nsplit = ls_attention_decode_splits(hq, hkv, max_ctx);
    if (nsplit < 2 || ls_attention_decode_workspace(hq, hd, nsplit) > cu.attn_ws_cap) return 0;
    if (!ls_attention_decode_partials(cu.attn_ws, qkv, kc, vc, pos, hq, hkv, hd, max_ctx, nsplit,
                                      stream_get()))
        return 0;
    cu.att_defer.out = out;
    cu.att_defer.qkv = qkv;
    cu.att_defer.kc = kc;
    cu.att_defer.vc = vc;
    cu.att_defer.pos = pos;
    cu.att_defer.hq = hq;
    cu.att_defer.hkv = hkv;
    cu.att_defer.hd = hd;
    cu.att_defer.max_ctx = max_ctx;
    cu.att_defer.nsplit = nsplit;
    return 1;
}

static int cu_attn_out_mlp(float *x, float *xin, float *pend, int pend_live, const float *att,
                           const void *Wo, const void *Wgu, const void *downT, const float *nw,
                           float eps, int qd, int dim, int f)
{
    if (cu.att_defer.out && cu.att_defer.out == att) {
        /* the attention left its partials: merged by the o GEMV, or (a shape it does not take)
         * by the attention run again in full */
        const int hq = cu.att_defer.hq, hd = cu.att_defer.hd;
        cu.att_defer.out = NULL;
        if (qd == hq * hd && ls_gemv_residual_copy_att(
                                 x, xin, pend, pend_live, Wo, cu.attn_ws, cu.att_defer.pos, hq, hd,
                                 cu.att_defer.nsplit, ls_attention_min_chunk(),
                                 cu.att_defer.max_ctx, dim, att_defer_on() == 2, stream_get())) {
            if (!ls_gemv_mlp(pend, xin, Wgu, downT, nw, eps, f, dim, stream_get()))
                ls_die(__FILE__, __LINE__, "ls_gemv_mlp", "a shape it had taken was refused");
            return 1;
        }
        ls_attention_decode((float *)att, cu.att_defer.qkv, cu.att_defer.kc, cu.att_defer.vc,
                            cu.att_defer.pos, hq, cu.att_defer.hkv, hd, cu.att_defer.max_ctx,
                            cu.att_defer.nsplit, 0, 1, cu.attn_ws, stream_get());
    }
    /* the shapes were asked of attn_out_mlp_takes at start-up: no second check a step */
    if (!ls_gemv_residual_copy(x, xin, pend, pend_live, Wo, att, dim, qd, stream_get())) return 0;
    if (!ls_gemv_mlp(pend, xin, Wgu, downT, nw, eps, f, dim, stream_get()))
        ls_die(__FILE__, __LINE__, "ls_gemv_mlp", "a shape it had taken was refused");
    return 1;
}

static int cu_transpose_in_place(void *const *W, int n, size_t rows, size_t cols)
{
    if (rows > INT_MAX || cols > INT_MAX) return 0;
    const size_t bytes = rows * cols * sizeof(uint16_t);
    void *t = NULL;
    if (cudaMalloc(&t, bytes) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    CHECK_CUDA(cudaDeviceSynchronize()); /* the uploads (their own stream) done */
    for (int i = 0; i < n; i++) {
        ls_transpose16(t, W[i], (int)rows, (int)cols, stream_get());
        CHECK_CUDA(cudaMemcpyAsync(W[i], t, bytes, cudaMemcpyDeviceToDevice, stream_get()));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream_get()));
    CHECK_CUDA(cudaFree(t));
    return 1;
}

/* every T through the GEMM: the fused MLP's decode step reads WT in attn_out_mlp, and only a
 * prefill chunk (short ones too) comes here */
static void cu_matmul_residual_t(float *x, const float *in, const void *WT, int T, int k, int n,
                                 int swiglu)
{
    if (swiglu)
        swiglu_gemm(x, in, WT, T, k, n, GEMM_ADD_WT);
    else
        gemm(x, in, WT, NULL, T, k, n, GEMM_ADD_WT);
}

/* Decode forms: 0 the attention as configured (its cluster launch by default), 1 without
 * clusters and with up to 4 q heads a block (ls_attention_decode's long-context launch). The
 * cluster merge shortens the attention at contexts within one cluster of chunks, but the
 * clustered launch costs at long contexts, where every chunk is live and merges through the
 * workspace anyway (measured in the eleventh session: context 4096 of 4096 25.4 against 19.9
 * us, 32768 98 against 63; context 1000 of 4096 11.9 against 12.7). So past
 * LOCKSTEP_ATT_CLUSTER_CTX positions (0: never) and past the cluster merge's reach the engine
 * switches to a graph captured in form 1; with the same q heads a block in both
 * (LOCKSTEP_ATT_HEADS) results are the same bits either way there (the workspace merge in
 * both), by default they differ in rounding.
 *
 * The default start, with one q head a block in form 1, was measured in the 8B's decode (ms per
 * token, clusters against without; twelfth and thirteenth sessions): with 8 KV heads a rank
 * (TP=1) the clusters are even at prompts of 1024 and 2048 (4.080 / 4.081, 4.305 / 4.301) and
 * behind from 4096 (4.642 / 4.430; 8192: 4.968 / 4.639), so 3072; with 4 (TP=2) they are
 * ahead or even up to 6144 (2048: 3.061 / 3.103, 4096: 3.146 / 3.164, 6144: 3.301 / 3.320)
 * and behind at 8192 (3.786 / 3.609), so 6144 for 4 KV heads a rank or fewer. Form 1 holds four
 * q heads a block since the thirty-third session, and form 0 one while the cache fits half the
 * L2, so each q head re-reads its K and V rows through the L2, hq x ctx x hd x 4 bytes a layer:
 * alone, form 1 leads from ~2200 positions at 32 q heads a rank (32 / 8 and 32 / 4 KV) and
 * ~3800 at 16 / 4, where the re-reads pass 31-36 MB (thirty-fourth session, test_kernels
 * --bench-attention-heads, interpolated between 2048, 3100 and 4096). So the start is the
 * earlier of the measured one above and where the re-reads reach 40 MB: 2441 at 32 q heads of
 * 128 (the 8B at TP=1, the 70B at TP=2), 4882 at 16 (the 8B at TP=2). In the step, 8B TP=1
 * after a 2700-token prompt: 4.197 / 4.192 ms a token from 3072, 4.140 / 4.132 from 2400.
 *
 * Form 2: the attention streamed through shared memory (ls_attention_decode's clusters = 2) where
 * it applies, past the cluster merge's reach, from where a rank's q heads would re-read 16 MiB of
 * K and V a layer in form 0 (hq x ctx x hd x 4 bytes: 1024 positions at 32 q heads of 128, 2048
 * at 16, 4096 at 8), or past LOCKSTEP_ATT_BULK_CTX positions (0: never); it replaces form 1
 * there. Alone it is faster than form 1's kernel at every context measured (fortieth session,
 * test_kernels --bench-attention-bulk, 8B TP=1 shape: 4096 17.3 -> 14.2 us, 8192 24.0 -> 19.2,
 * 16384 35.4 -> 29.1). In the step it gains only with a short ring (forty-first session, ms a
 * token, the former default against form 2 with its ring of two stages). The 8B at TP=1 (32 /
 * 8): after a 600-token prompt 3.846 / 3.881 (from 520: slower), 1000 3.938 / 3.904 (from 750),
 * 2000 4.044 / 3.959 (from 1500), 3000 4.062 / 3.999, 4096 4.108 / 4.081 and 4.177 / 4.144 (two
 * machines), 8192 4.284 / 4.289 and 4.366 / 4.356, 16384 4.730 / 4.633. The 70B's TP=2
 * attention shape (32 / 4, tests/gpu/attn-32q4kv.json): 1200 3.934 / 3.893, 4096 4.107 / 4.032,
 * 8192 4.443 / 4.151. The 8B's TP=2 shape (16 / 4, attn-16q4kv.json): 1200 1.508 / 1.510
 * (from 1024: even), 3000 1.602 / 1.586, 5000 1.751 / 1.648, 8192 1.863 / 1.654. The ring of
 * six it first had lost at 4096 and 8192. */
static int cu_decode_form(int ctx, int hq, int hkv, int hd, int max_ctx)
{
    static int from = -1, bulk_from = -1;
    if (from < 0) {
        const char *v = getenv("LOCKSTEP_ATT_CLUSTER_CTX");
        from = !v || !*v ? INT_MAX : atoi(v) > 0 ? atoi(v) : 0;
        v = getenv("LOCKSTEP_ATT_BULK_CTX");
        bulk_from = !v || !*v ? -1 : atoi(v) > 0 ? atoi(v) : 0;
    }
    /* the attention's facts only where they can matter (both ask the device) */
    if (!from) return 0;
    const int reach = ls_attention_cluster_reach(hq, hkv, max_ctx);
    if (ctx <= reach) return 0;
    return ls_decode_form_pick(ctx, hq, hkv, hd, reach, ls_attention_bulk_applies(hq, hkv, hd),
                               from, bulk_from);
}

static void cu_set_decode_form(int form)
{
    cu.att_form = form;
}

/* the decode attention's workspace to at least ws bytes, zeroed: the decode kernel's
 * done-counters (after the partials) start at zero, and every launch leaves them so */
static int attn_ws_grow(size_t ws)
{
    if (try_grow((void **)&cu.attn_ws, &cu.attn_ws_cap, ws)) return -1;
    CHECK_CUDA(cudaMemsetAsync(cu.attn_ws, 0, ws, stream_get()));
    return 0;
}

/* what start-up leaves free on the device: the decode graphs' instantiations, the driver's and
 * the libraries' own allocations after start-up */
#define RESERVE_HEADROOM ((size_t)256 << 20)

static int cu_reserve(int max_t, int max_k, int hq, int hkv, int hd, int max_ctx, size_t *need)
{
    /* also for chunks of GEMV_MAX_T or fewer: matmul_residual_t's GEMM takes every T */
    const size_t act = (size_t)max_t * max_k * sizeof(uint16_t), gws = ls_gemm_workspace_bytes(),
                 ws = ls_attention_decode_workspace(hq, hd,
                                                    ls_attention_decode_splits(hq, hkv, max_ctx));
    *need = act + (cu.gemm ? 0 : gws) + ws + RESERVE_HEADROOM;
    int failed = act16_try_grow(act);
    if (!failed && !cu.gemm) failed = !(cu.gemm = ls_gemm_create());
    if (!failed && ws > cu.attn_ws_cap) failed = attn_ws_grow(ws);
    if (!failed && cu_mem_free() < RESERVE_HEADROOM) failed = 1;
    if (!failed) return 0;
    /* none of it, so that the caller's count of free memory is what the rest left */
    if (cu.act16) CHECK_CUDA(cudaFree(cu.act16));
    if (cu.attn_ws) CHECK_CUDA(cudaFree(cu.attn_ws));
    ls_gemm_free(cu.gemm);
    cu.act16 = NULL;
    cu.attn_ws = NULL;
    cu.gemm = NULL;
    cu.act16_cap = cu.attn_ws_cap = 0;
    return -1;
}

static void cu_attention(float *out, const float *qkv, int stride, const void *kc, const void *vc,
                         const int *pos, int pos0, int T, int hq, int hkv, int hd, int max_ctx)
{
    int nsplit = ls_attention_decode_splits(hq, hkv, max_ctx);
    size_t ws = ls_attention_decode_workspace(hq, hd, nsplit);
    if (ws > cu.attn_ws_cap) {
        /* never inside a capture: a prefill (eager) always comes first and sizes it */
        enum cudaStreamCaptureStatus st;
        CHECK_CUDA(cudaStreamIsCapturing(stream_get(), &st));
        if (st != cudaStreamCaptureStatusNone)
            ls_die(__FILE__, __LINE__, "cu_attention",
                   "attention workspace first needed inside a graph capture");
        if (attn_ws_grow(ws)) die_no_memory("the decode attention's workspace", ws);
    }
    /* LOCKSTEP_ATTN_PREFILL=0 sends prefills through the decode kernel, one position at a time */
    const char *ap = getenv("LOCKSTEP_ATTN_PREFILL");
    int prefill_ok = (hd == 64 || hd == 128 || hd == 256) && !(ap && !strcmp(ap, "0"));
    if (T > 1 && prefill_ok) {
        ls_attention_prefill(out, qkv, stride, kc, vc, pos0, T, hq, hkv, hd, max_ctx, stream_get());
        return;
    }
    /* decode, or a prefill of a head size the prefill kernel lacks: one position at a time,
     * each reading its own position from pos[t] */
    for (int t = 0; t < T; t++)
        ls_attention_decode(out + (size_t)t * hq * hd, qkv + (size_t)t * stride, kc, vc, pos + t,
                            hq, hkv, hd, max_ctx, nsplit, t,
                            cu.att_form == 0   ? 1
                            : cu.att_form == 2 ? 2
                                               : 0,
                            cu.attn_ws, stream_get());
}

static void cu_add(float *x, const float *y, size_t n)
{
    ls_add(x, y, n, stream_get());
}

static void cu_allreduce_add_rmsnorm(struct ls_comm *comm, float *partial, float *x, float *normed,
                                     const float *w, int rows, int dim, float eps)
{
    ls_comm_residual_rmsnorm(comm, partial, x, x, normed, w, rows, dim, eps, LS_F32, stream_get());
}

static void cu_argmax(int *out, const float *x, int n)
{
    ls_sample_argmax(out, x, n, stream_get());
}

static void cu_argmax_pairs(float *pairs, const float *x, int n, int first, int slot, int tp)
{
    ls_sample_argmax_pairs(pairs, x, n, first, slot, tp, stream_get());
}

static void cu_argmax_pick(int *out, const float *pairs, int tp)
{
    ls_sample_argmax_pick(out, pairs, tp, stream_get());
}

static int cu_matmul_argmax(float *out, float *x, float *xpend, const float *nw, float eps,
                            const void *W, int k, int n)
{
    return ls_gemv_argmax(out, W, x, xpend, n, k, nw, eps, cu.am_key, stream_get());
}

static void cu_row_logprobs(double *out, const float *logits, int rows, int n, size_t ld,
                            const int *targets, int first, int N, int split)
{
    ls_row_logprobs(out, logits, rows, n, ld, targets, first, N, split, stream_get());
}

static void cu_sample(int *out, const float *logits, int n, float temperature, int top_k,
                      float top_p, float min_p, const double *u, void *ws)
{
    ls_sample(out, logits, n, temperature, top_k, top_p, min_p, u, ws, stream_get());
}

static void cu_penalize(float *out, const float *logits, const float *bias, int vocab, int *count,
                        int *hist, const int *ids, const int *pos, int last_n, float rep,
                        float pres, float freq)
{
    ls_penalize(out, logits, bias, vocab, count, hist, ids, pos, last_n, rep, pres, freq,
                stream_get());
}

static void cu_advance(int *pos, const int *tok, double *u, int *pick)
{
    ls_advance_pos(pos, tok, tok ? cu.post_dev : NULL, u, cu.upost_dev, pick ? cu.am_key : NULL,
                   pick, stream_get());
}

static void cu_u_post(int pos, double u)
{
    cu.upost[pos & 1] = u;
}

static void cu_scores_post(const int *pos, const double *src, int n)
{
    ls_post_scores(pos, src, n, cu.spost_dev, LS_SCORE_ROW_MAX, cu.stag_dev, stream_get());
}

/* the positions the slots of pos's parity hold: the token's, the scores' (-1: none) */
static long long token_slot_pos(int pos)
{
    return (int)(cu.post[pos & 1] >> 32);
}

static long long scores_slot_pos(int pos)
{
    return (long long)cu.stag[pos & 1] - 1;
}

/* polls a slot the step's kernels store into until held says it holds position pos's: no copy
 * or event stands between that step and the next in the stream. Every 4096 polls the stream is
 * asked for an error, and an idle stream with the slot still another's is one (who: the caller,
 * what: "token was", "scores were") */
static void cu_poll(long long (*held)(int pos), int pos, const char *who, const char *what)
{
    for (unsigned n = 1; held(pos) != pos; n++) {
        if (n % 4096) continue;
        const cudaError_t err = cudaStreamQuery(stream_get());
        if (err == cudaErrorNotReady) continue;
        CHECK_CUDA(err);
        const long long last = held(pos);
        if (last == pos) return;
        char msg[128];
        snprintf(msg, sizeof msg, "position %d's %s never posted (its slot holds %lld's)", pos,
                 what, last);
        ls_die(__FILE__, __LINE__, who, msg);
    }
}

/* after the token, the scores' tag (the scores are the position's whatever the token's slot
 * said: read after the token alone, the slot did not hold them on an H200, NaN
 * log-probabilities, most likely from a stale token slot, which posts_clear now prevents), then
 * the copy */
static void cu_scores_take(int pos, double *dst, int n)
{
    cu_poll(scores_slot_pos, pos, "cu_scores_take", "scores were");
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    memcpy(dst, (const double *)cu.spost + (size_t)(pos & 1) * LS_SCORE_ROW_MAX,
           (size_t)n * sizeof *dst);
}

/* the host's stores into the slots: no step is in flight to store into them too */
static void cu_posts_clear(void)
{
    cu.post[0] = cu.post[1] = ~0ull; /* position -1 */
    cu.stag[0] = cu.stag[1] = 0;
}

struct cu_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

static void cu_graph_begin(void)
{
    CHECK_CUDA(cudaStreamBeginCapture(stream_get(), cudaStreamCaptureModeThreadLocal));
}

static void cu_graph_free(void *graph);

/* LOCKSTEP_GRAPH_UPDATE=0: never update a graph in place (a new instantiation each time) */
static int graph_update_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("LOCKSTEP_GRAPH_UPDATE");
        on = !(v && strcmp(v, "0") == 0);
    }
    return on;
}

static void *cu_graph_end(void *prev, int *updated)
{
    cudaGraph_t graph;
    CHECK_CUDA(cudaStreamEndCapture(stream_get(), &graph));
    struct cu_graph *g = prev;
    if (updated) *updated = 0;
    if (g && graph_update_on()) {
        /* the same nodes with other arguments (a sampling change): new values into the
         * instantiated graph, far cheaper than a new instantiation */
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(g->exec, graph, &info) == cudaSuccess) {
            cudaGraphDestroy(g->graph);
            g->graph = graph;
            if (updated) *updated = 1;
            return g;
        }
        (void)cudaGetLastError(); /* a refused update (another shape) is not an error */
    }
    cu_graph_free(prev);
    g = calloc(1, sizeof *g);
    CHECK_ALLOC(g);
    g->graph = graph;
    CHECK_CUDA(cudaGraphInstantiate(&g->exec, g->graph, 0));
    return g;
}

static void cu_graph_launch(void *graph)
{
    struct cu_graph *g = graph;
    CHECK_CUDA(cudaGraphLaunch(g->exec, stream_get()));
}

/* the token the step's last kernel posted (cu_poll) */
static int cu_token_take(int pos)
{
    cu_poll(token_slot_pos, pos, "cu_token_take", "token was");
    return (int)ls_post_token_of(cu.post[pos & 1], pos);
}

static void cu_graph_free(void *graph)
{
    struct cu_graph *g = graph;
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}

const struct ls_backend ls_backend_cuda = {
    .name = "cuda",
    .weight_bytes = 2,
    .queued = 1,
    .stream = cu_stream,
    .sync = cu_sync,
    .read_bandwidth = cu_read_bandwidth,
    .copy_bandwidth = cu_copy_bandwidth,
    .mem_free = cu_mem_free,
    .alloc = cu_alloc,
    .free = cu_free,
    .to_host = cu_to_host,
    .to_device = cu_to_device,
    .copy = cu_copy,
    .upload_matrix = cu_upload_matrix,
    .upload_vector = cu_upload_vector,
    .matrix_row = cu_matrix_row,
    .alloc_cache = cu_alloc_cache,
    .reserve = cu_reserve,
    .embed = cu_embed,
    .rmsnorm = cu_rmsnorm,
    .add_rmsnorm = cu_add_rmsnorm,
    .matmul = cu_matmul,
    .matmul_swiglu = cu_matmul_swiglu,
    .matmul_rmsnorm = cu_matmul_rmsnorm,
    .matmul_residual = cu_matmul_residual,
    .rope_kv = cu_rope_kv,
    .matmul_rope_kv = cu_matmul_rope_kv,
    .matmul_gu_swiglu = cu_matmul_gu_swiglu,
    .attn_out_mlp = cu_attn_out_mlp,
    .attn_out_mlp_takes = cu_attn_out_mlp_takes,
    .matmul_rmsnorm_pend = cu_matmul_rmsnorm_pend,
    .transpose_in_place = cu_transpose_in_place,
    .matmul_residual_t = cu_matmul_residual_t,
    .attention = cu_attention,
    .attention_for_out_mlp = cu_attention_for_out_mlp,
    .add = cu_add,
    .allreduce_add_rmsnorm = cu_allreduce_add_rmsnorm,
    .argmax = cu_argmax,
    .argmax_pairs = cu_argmax_pairs,
    .argmax_pick = cu_argmax_pick,
    .matmul_argmax = cu_matmul_argmax,
    .row_logprobs = cu_row_logprobs,
    .score_split = ls_row_logprobs_split,
    .sample = cu_sample,
    .sample_ws = ls_sample_workspace,
    .penalize = cu_penalize,
    .advance = cu_advance,
    .decode_form = cu_decode_form,
    .set_decode_form = cu_set_decode_form,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
    .token_take = cu_token_take,
    .u_post = cu_u_post,
    .scores_post = cu_scores_post,
    .scores_take = cu_scores_take,
    .posts_clear = cu_posts_clear,
};
