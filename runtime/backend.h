/* The operations of the forward pass as one table of function pointers. The engine calls only
 * these, so the same forward runs on the CPU backend (kernels/ref.c, fp32, host memory) and on
 * the CUDA backend (device memory, one stream, bf16 weights and KV cache).
 *
 * Memory: every pointer is the backend's own memory, positions and token ids included, so a
 * decode step needs nothing from the host and can be captured once into a CUDA graph and
 * replayed: the step reads its position from `pos` and its token from `ids`, and ends by
 * writing the next token into `ids` and advancing `pos`.
 * Formats: matrices, the embedding table and the KV cache are `void *` in the backend's format
 * (fp32 on the CPU; bf16 on the GPU, cache layout of its choosing); vectors (norm weights,
 * biases, inverse frequencies) and activations are fp32. */
#ifndef LOCKSTEP_BACKEND_H
#define LOCKSTEP_BACKEND_H

#include <stddef.h>

struct ls_comm;

/* decode forms a backend may ask for (decode_form): the engine keeps a graph for each */
#define LS_DECODE_FORMS 3

/* rows of the fused MLP's pending sum (attn_out_mlp), each dim floats */
#define LS_PEND_ROWS 3

struct ls_backend {
    const char *name;
    int weight_bytes;      /* bytes per weight and KV cache element: 4 (fp32) or 2 (bf16) */
    void *(*stream)(void); /* the stream collectives must run on (NULL on the CPU) */
    /* 1: work runs after the call that issues it returns (a device's stream), so the engine
     * issues decode steps ahead by default (ls_engine_plan); 0: done when issued */
    int queued;
    void (*sync)(void);    /* wait for all work issued so far */
    /* streaming read and copy of `bytes` of the backend's memory, GB/s (a copy counts bytes read
     * and written) */
    double (*read_bandwidth)(size_t bytes);
    double (*copy_bandwidth)(size_t bytes);

    /* bytes free in the backend's memory, for clear errors before a load; NULL: unknown */
    size_t (*mem_free)(void);
    void *(*alloc)(size_t bytes); /* zeroed; NULL when out of memory */
    void (*free)(void *p);
    void (*to_host)(void *dst, const void *src, size_t bytes);   /* synchronous */
    void (*to_device)(void *dst, const void *src, size_t bytes); /* synchronous */
    void (*copy)(void *dst, const void *src, size_t bytes);      /* within the backend, ordered */
    /* Weights from host fp32, which the backend takes over (frees or keeps): a [rows][cols]
     * matrix in the backend's format, or a vector of n floats. NULL when out of memory. */
    void *(*upload_matrix)(float *host, size_t rows, size_t cols);
    float *(*upload_vector)(float *host, size_t n);
    /* pointer to row `row` of a matrix of `cols` columns (for the tied LM head's vocab slice) */
    void *(*matrix_row)(void *m, size_t row, size_t cols);
    /* KV cache of one layer for hkv heads x max_ctx positions x hd, zeroed */
    void *(*alloc_cache)(int hkv, int max_ctx, int hd);
    /* The backend's own working memory at its largest, once at start-up, so that no request
     * runs out of memory half-way (NULL: it has none): a chunk's GEMM input of up to max_t
     * positions of max_k values, the GEMM library's workspace, the decode attention's
     * partials for hq q heads (hkv KV heads) of hd over max_ctx positions; and what it keeps
     * free beyond them. 0, or -1 with *need the bytes asked for (the part kept free included). */
    int (*reserve)(int max_t, int max_k, int hq, int hkv, int hd, int max_ctx, size_t *need);

    /* out[t] = table[ids[t]], [T][dim] */
    void (*embed)(float *out, const void *table, const int *ids, int T, int dim);
    void (*rmsnorm)(float *out, const float *x, const float *w, int rows, int dim, float eps);
    /* x += res (the residual stream), then out = rmsnorm(x) * w; out aliases neither */
    void (*add_rmsnorm)(float *out, float *x, const float *res, const float *w, int rows, int dim,
                        float eps);
    /* out[T][n] = in[T][k] . W[n][k]^T (+ bias) */
    void (*matmul)(float *out, const float *in, const void *W, const float *bias, int T, int k,
                   int n);
    /* out[T][n] = (silu(g) * u)[T][f] . W[n][f]^T, with gu[T][2f] = gate | up */
    void (*matmul_swiglu)(float *out, const float *gu, const void *W, int T, int f, int n);
    /* The same matmuls with what surrounds them at TP = 1 fused in (NULL: not offered):
     * out = (rmsnorm(x) * nw) . W^T (+ bias), x [T][k]; and x[T][n] += in . W^T, where in is
     * [T][k], or with swiglu the gate | up [T][2k] as in matmul_swiglu */
    void (*matmul_rmsnorm)(float *out, const float *x, const float *nw, float eps, const void *W,
                           const float *bias, int T, int k, int n);
    void (*matmul_residual)(float *x, const float *in, const void *W, int T, int k, int n,
                            int swiglu);
    /* One position: h [f] = silu(gate) * up of gu = W . x (W [2f][k]: gate rows, then up rows;
     * x normed by nw first when nw is set, as matmul_rmsnorm): the gate+up matmul and the
     * SwiGLU as one operation, so the down matmul takes h as plain input. Returns 0 where the
     * backend does not take the shape, having done nothing (NULL: not offered) */
    int (*matmul_gu_swiglu)(float *h, const float *x, const float *nw, float eps, const void *W,
                            int k, int f);
    /* Optional (the engine's fused MLP; NULL: not offered): one position at one rank,
     * x += Wo . att with xin = x after it (a copy the MLP reads), then the MLP of xin
     * (rmsnorm(xin) * nw, gate+up, SwiGLU, down) in one operation that reads the down matrix
     * transposed (downT, [f][dim], from transpose_in_place). The MLP's output is left in pend
     * [LS_PEND_ROWS][dim] as x's pending sum: x then stands for (x[i] + pend[i]) +
     * (pend[dim + i] + pend[2 dim + i]) until the next attn_out_mlp takes it in (pend_live: pend
     * holds one; else it is only zeroed first);
     * matmul_rope_kv and matmul_rmsnorm_pend read x with it. The same bits in every run (the
     * CUDA kernel's partial sums are exact in any order; see kernels/gemv.h). Returns 0, having
     * done nothing, where the o GEMV's shapes are not taken; attn_out_mlp_takes says for both
     * beforehand (the MLP refusing shapes it says it takes ends the job). */
    int (*attn_out_mlp)(float *x, float *xin, float *pend, int pend_live, const float *att,
                        const void *Wo, const void *Wgu, const void *downT, const float *nw,
                        float eps, int qd, int dim, int f);
    int (*attn_out_mlp_takes)(const float *x, const float *xin, const float *pend, const float *att,
                              const void *Wo, const void *Wgu, const void *downT, const float *nw,
                              int qd, int dim, int f);
    /* One position: out = (rmsnorm(x') * nw) . W^T (+ bias), x' = x with its pending sum xpend
     * (attn_out_mlp), which the backend may first take into x (x and xpend then written).
     * Offered with attn_out_mlp. */
    void (*matmul_rmsnorm_pend)(float *out, float *x, float *xpend, const float *nw, float eps,
                                const void *W, const float *bias, int k, int n);
    /* Offered with attn_out_mlp: each of the n matrices W[i] [rows][cols] transposed in place
     * (then [cols][rows], the same memory) through one scratch matrix taken for the call; 0,
     * every matrix untouched, when the scratch does not fit. */
    int (*transpose_in_place)(void *const *W, int n, size_t rows, size_t cols);
    /* Offered with attn_out_mlp: matmul_residual of a matrix stored transposed, WT [k][n]
     * (from transpose_in_place), for any T: the prefill's down matmul of the fused MLP */
    void (*matmul_residual_t)(float *x, const float *in, const void *WT, int T, int k, int n,
                              int swiglu);
    /* q/k/v at qkv + t * stride (q, then k, then v): optional q/k RMSNorm per head, RoPE at
     * positions pos[t], k and v stored in the caches at pos[t] */
    void (*rope_kv)(float *qkv, int stride, void *kc, void *vc, const int *pos,
                    const float *inv_freq, int T, int hq, int hkv, int hd, int max_ctx,
                    int interleaved, const float *q_norm, const float *k_norm, float eps);
    /* One position: qkv [(hq + 2 hkv) * hd] = the QKV matmul of x (normed by nw first when nw
     * is set, as matmul_rmsnorm; else as matmul), then rope_kv of it without q/k norms, as one
     * operation (the CUDA backend: RoPE and the cache store in the GEMV's epilogue; NULL: not
     * offered). xpend: x's pending sum (attn_out_mlp) or NULL, as in matmul_rmsnorm_pend. */
    void (*matmul_rope_kv)(float *qkv, float *x, float *xpend, const float *nw, float eps,
                           const void *W, const float *bias, int k, void *kc, void *vc,
                           const int *pos, const float *inv_freq, int hq, int hkv, int hd,
                           int max_ctx, int interleaved);
    /* causal attention of the T positions pos[0] .. pos[0] + T - 1 (pos0 is pos[0] as known to
     * the host; a decode step of a graph reads pos instead); q at qkv + t * stride; out
     * [T][hq * hd]; q head h reads KV head h / (hq / hkv) */
    void (*attention)(float *out, const float *qkv, int stride, const void *kc, const void *vc,
                      const int *pos, int pos0, int T, int hq, int hkv, int hd, int max_ctx);
    /* Optional, with attn_out_mlp: attention for one position (a decode step; q at qkv) whose
     * only reader is the attn_out_mlp that follows, which then takes out in whatever form the
     * backend left it (the CUDA backend: the split's partials, merged by the o GEMV). 0, having
     * done nothing, where the backend has no such form: the caller then runs attention. */
    int (*attention_for_out_mlp)(float *out, const float *qkv, const void *kc, const void *vc,
                                 const int *pos, int hq, int hkv, int hd, int max_ctx);
    void (*add)(float *x, const float *y, size_t n);
    /* the row-parallel matmul's partial sums summed over ranks by comm (in place), added to
     * the residual stream x, and normed = rmsnorm(x) * w (normed NULL: x only): the
     * tensor-parallel all-reduce with what follows it, fused where the communicator can (the
     * custom all-reduce) */
    void (*allreduce_add_rmsnorm)(struct ls_comm *comm, float *partial, float *x, float *normed,
                                  const float *w, int rows, int dim, float eps);
    /* *out = index of the largest of x[n], lowest on ties */
    void (*argmax)(int *out, const float *x, int n);
    /* The tensor-parallel greedy step without the logits' all-gather (NULL: not offered): this
     * rank's slot of the choice over its slice x[n] of the vocabulary (tokens first ..), as
     * ref_argmax_pairs (kernels/ref.h); then, once every rank's pairs are summed, the token, as
     * ref_argmax_pick */
    void (*argmax_pairs)(float *pairs, const float *x, int n, int first, int slot, int tp);
    void (*argmax_pick)(int *out, const float *pairs, int tp);
    /* Optional (NULL: not offered): the LM head of one position with the greedy choice folded
     * in: out[n] = W . x as matmul_rmsnorm_pend (xpend NULL: as matmul_rmsnorm of one position;
     * nw NULL: as matmul; no bias), its argmax kept in the backend until the next advance with
     * pick takes it (the step's last node: the choice then costs no kernel of its own). Returns
     * 0, having done nothing, where the backend does not take the shape. */
    int (*matmul_argmax)(float *out, float *x, float *xpend, const float *nw, float eps,
                         const void *W, int k, int n);
    /* *out = the token drawn from logits[n] at temperature (> 0), top_k, top_p and min_p (0, 1
     * and 0: off) with the uniform draw *u (backend memory, written before each step), as
     * ls_sample_with in sampler.h; ws: backend memory of sample_ws(n) bytes */
    void (*sample)(int *out, const float *logits, int n, float temperature, int top_k, float top_p,
                   float min_p, const double *u, void *ws);
    size_t (*sample_ws)(int n);
    /* the decode step's penalties, as ref_penalize (kernels/ref.h): out[vocab] = logits plus
     * bias[vocab] (a logit bias, or NULL) with the penalties of the window count[vocab] holds,
     * which the step's token ids[0] at pos[0] joins (hist[max_ctx]: the tokens by position, for
     * the ones that leave it) */
    void (*penalize)(float *out, const float *logits, const float *bias, int vocab, int *count,
                     int *hist, const int *ids, const int *pos, int last_n, float rep, float pres,
                     float freq);
    /* each row's scores of rows of logits (a rank's vocabulary slice): ref_row_logprobs in
     * kernels/ref.h, each row cut into split slices (out[row][slice][3 + 2 N]), split as
     * score_split gives it for rows rows of n (NULL: 1); out and targets in backend memory */
    void (*row_logprobs)(double *out, const float *logits, int rows, int n, size_t ld,
                         const int *targets, int first, int N, int split);
    int (*score_split)(int rows, int n);
    /* pos[0] += 1; with tok (not NULL), where the backend has token_take, tok[0] first posted
     * as position pos[0]'s token; with u (not NULL), u[0] set to the number u_post left for
     * position pos[0] + 1 (a drawn step hands the next its uniform number); with pick (not NULL:
     * only after matmul_argmax) the token that matmul_argmax chose first stored into pick[0]
     * (and posted as the token, when tok is set) */
    void (*advance)(int *pos, const int *tok, double *u, int *pick);

    /* Optional (NULL: one form): the form of the decode step the backend wants at a context of
     * ctx positions, for attention over hq and hkv heads (this rank's) of hd and a cache of
     * max_ctx (0 to LS_DECODE_FORMS - 1; the CUDA attention launched in clusters, without, or
     * streamed), and the form the next steps' work is issued in. A graph holds one form's
     * launches, so the engine keeps one graph per form. */
    int (*decode_form)(int ctx, int hq, int hkv, int hd, int max_ctx);
    void (*set_decode_form)(int form);

    /* Optional (NULL on the CPU): capture the work issued between begin and end into a graph
     * that launch replays; free releases it. end's prev (NULL or a graph of this backend) is
     * updated in place when the new capture has its shape (the same launches with other
     * arguments), and returned with *updated set (when updated is not NULL); else it is freed
     * and a new graph returned. */
    void (*graph_begin)(void);
    void *(*graph_end)(void *prev, int *updated);
    void (*graph_launch)(void *graph);
    void (*graph_free)(void *graph);

    /* Optional (NULL: the engine never issues a step ahead): waits until the token of position
     * pos, posted by advance (of that position's step, or of the one two before it: a slot a
     * position's parity), is in host memory and returns it. With it the engine issues decode
     * step i + 1 before it reads step i's token (ls_engine_plan). */
    int (*token_take)(int pos);
    /* with token_take: u as the number the step at position pos draws with, for the advance of
     * the step before it to hand on (a slot a position's parity, as the tokens') */
    void (*u_post)(int pos, double u);
    /* Optional, with token_take (NULL: a scored step is never issued ahead): a scored step
     * posts its n (<= LS_SCORE_ROW_MAX, kernels/ref.h) doubles of scores src before its
     * advance, in a slot of position pos[0]'s parity, and scores_take copies position pos's to
     * dst once token_take(pos) returned */
    void (*scores_post)(const int *pos, const double *src, int n);
    void (*scores_take)(int pos, double *dst, int n);
    /* with token_take: forget every posted token and scores (no position's), so that a slot
     * still holding another sequence's post for a position (an earlier request's, the warm-up's)
     * is never taken for this one's; called with no step in flight */
    void (*posts_clear)(void);
};

extern const struct ls_backend ls_backend_cpu;
#ifdef HAVE_CUDA
extern const struct ls_backend ls_backend_cuda;
#endif

#endif
