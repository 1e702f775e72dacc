/* Decode GEMV: y = W . x for one token (or a few, T <= 8 per pass) over a bf16 weight matrix,
 * fp32 input and output, fp32 accumulation. This is where a decode step spends its time: every
 * weight byte is read once per token, so these kernels are judged by bytes per second against
 * the measured read roofline (kernels/bandwidth.h).
 *
 * Layouts (row-major, element counts):
 *   W    [n][k] bf16 bits (uint16_t), the Hugging Face nn.Linear layout
 *   x    [T][k] fp32            y [T][n] fp32            bias [n] fp32 or NULL
 *   gu   [T][2k] fp32: gate in gu[t][0..k), up in gu[t][k..2k) (the output of the fused
 *        gate+up GEMV whose matrix is the gate rows followed by the up rows)
 * Fused layers are plain calls: QKV is one matrix of (hq + 2 hkv) * hd rows, gate+up one of
 * 2 * ffn rows; the down projection reads silu(gate) * up straight from gu.
 *
 * Fast path: k % 8 == 0, W and x (or gu) 16-byte aligned, T * k small enough that x fits in
 * shared memory (k <= ~56K floats; larger T is split into several passes over W). Anything else
 * takes a generic path (one warp per row, 2-byte loads): correct for every k >= 1, slow.
 * Results are bitwise reproducible on a given GPU model (the split of work depends only on n, k,
 * T and the SM count; every reduction has a fixed order). */
#ifndef LOCKSTEP_KERNELS_GEMV_H
#define LOCKSTEP_KERNELS_GEMV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[t][r] = sum_j W[r][j] * x[t][j] (+ bias[r]), t < T (any T >= 1), r < n, on `stream` */
void ls_gemv(float *y, const uint16_t *W, const float *x, const float *bias, int T, int n, int k,
             void *stream);

/* the same with x[t][j] = silu(gu[t][j]) * gu[t][k + j] (SwiGLU fused into the down projection) */
void ls_gemv_swiglu(float *y, const uint16_t *W, const float *gu, const float *bias, int T, int n,
                    int k, void *stream);

/* The general form: SwiGLU input as ls_gemv_swiglu when swiglu is set; else with norm_w set the
 * input is rmsnorm(x) * norm_w, x[t] scaled by 1 / sqrt(mean(x[t]^2) + eps) (the RMSNorm that
 * precedes a column-parallel layer, fused); with accumulate, y += W . x (+ bias) instead of
 * y = (the residual add after a row-parallel layer when no all-reduce sits between). */
void ls_gemv_ex(float *y, const uint16_t *W, const float *x, const float *bias, int T, int n, int k,
                int swiglu, const float *norm_w, float eps, int accumulate, void *stream);

/* The QKV projection of one position with RoPE and the KV-cache store in its epilogue:
 * qkv[(hq + 2 hkv) * hd] = W . x (+ bias), x normed first when norm_w is set (as ls_gemv_ex),
 * then exactly ls_rope_kv(q = qkv, k = qkv + hq*hd, v = qkv + (hq + hkv)*hd, T = 1, no q/k
 * norms) at position pos[0]: the same bits as those two calls, which it makes itself where the
 * one-kernel form does not apply (head_dim not a power of two, unaligned or too wide inputs,
 * the column-resident kernel off). kcache, vcache: this layer's cache, as in rope.h.
 * xpend: x's pending sum (ls_gemv_mlp), or NULL; with one, where the one-kernel form does not
 * apply, it returns 0 having done nothing (else 1). */
int ls_gemv_rope_kv(float *qkv, const uint16_t *W, const float *x, const float *xpend,
                    const float *bias, int k, const float *norm_w, float eps, int hq, int hkv,
                    int hd, uint16_t *kcache, uint16_t *vcache, const int *pos,
                    const float *inv_freq, int max_ctx, int interleaved, void *stream);

/* One position: y = W . x' (+ bias), x' = (x[i] + xpend[i]) + (xpend[k + i] + xpend[2k + i]) (x
 * with its pending sum, ls_gemv_mlp), normed first when norm_w is set: ls_gemv_ex of x' in one
 * kernel. Returns 0, launching nothing, where the column-resident kernel does not take the shape.
 */
int ls_gemv_pend(float *y, const uint16_t *W, const float *x, const float *xpend, const float *bias,
                 int n, int k, const float *norm_w, float eps, void *stream);

/* One position, the LM head with the greedy choice in its epilogue: y = W . x' as ls_gemv_pend
 * (xpend NULL: x itself; norm_w NULL: not normed; no bias), and y's largest folded into *key
 * (device memory) with atomicMax as one 64-bit key: the value's order, then the lower index;
 * NaN never. *key must start at 0; ls_advance_pos with key takes the index from it (0 where y
 * held only NaN: as ls_sample_argmax) and clears it. Returns 0, launching nothing, where the
 * column-resident kernel does not take the shape (the caller then runs the GEMV and the argmax
 * apart). */
int ls_gemv_argmax(float *y, const uint16_t *W, const float *x, const float *xpend, int n, int k,
                   const float *norm_w, float eps, unsigned long long *key, void *stream);

/* One position: h[i] = silu(g[i]) * u[i] for i < f, where g | u = W . x (W [2f][k] bf16: the
 * gate rows, then the up rows; x normed first as in ls_gemv_ex when norm_w is set): the gate+up
 * GEMV with the SwiGLU in its epilogue, f outputs instead of 2f. Returns 0, launching nothing,
 * where the one-position kernel does not take the shape (misaligned, k % 8, a block's rows
 * past its shared memory, or LOCKSTEP_GEMV_XREG=0): the caller then runs the GEMV and a
 * SwiGLU-input GEMV after it. */
int ls_gemv_gu_swiglu(float *h, const uint16_t *W, const float *x, const float *norm_w, float eps,
                      int f, int k, void *stream);

/* The rows of a pending sum (ls_gemv_mlp): hi, then lo from the even and the odd blocks. */
#define LS_GEMV_PEND_ROWS 3

/* One position, one rank's whole MLP (the engine's fused MLP): Wdown . h, h = silu(g) * u,
 * g | u = Wgu . x (x normed first when norm_w is set, as in ls_gemv_gu_swiglu), in one kernel:
 * the down is split along its inputs, each block multiplying its h_i by the rows of DT (the down
 * matrix transposed, [f][k] bf16: row i holds input i's weight on every output) and adding its
 * partial output into the pending sum pend [LS_GEMV_PEND_ROWS][k] (16-byte aligned). A residual y
 * with a pending sum stands for (y[i] + pend[i]) + (pend[k + i] + pend[2k + i]): the blocks add
 * their partials in the order they finish, on grids that make every such sum exact (gemv.cu,
 * pending_split), so the result is the same bits in any order, within ~1e-5 of the input's RMS of
 * the exact sum. Readers: ls_gemv_residual_copy, ls_gemv_rope_kv, ls_gemv_pend, ls_pending_resolve;
 * pend starts zeroed. Returns 0, launching nothing, where the shape is not taken (ls_gemv_mlp_takes
 * says so beforehand: as ls_gemv_gu_swiglu, k <= 8192, fewer than 256 blocks). */
int ls_gemv_mlp(float *pend, const float *x, const uint16_t *Wgu, const uint16_t *DT,
                const float *norm_w, float eps, int f, int k, void *stream);
int ls_gemv_mlp_takes(const uint16_t *Wgu, const uint16_t *DT, const float *x, const float *pend,
                      const float *norm_w, int f, int k);

/* The fused MLP's transposed-down loads in flight a thread: 2, 4 (default) or 8 (others leave
 * it; LOCKSTEP_MLP_INFLIGHT sets it too). Returns the previous setting. */
int ls_gemv_set_mlp_inflight(int n);

/* The fused MLP's lo adds (0: 1024 vector atomics a block; 1, the default: one bulk reduction
 * of the TMA unit a block, from shared memory, into the row of the block's parity, where the
 * device has one and k <= 4096; 2: the same, every block into the first lo row, the second left
 * zero; LOCKSTEP_MLP_BULK sets it too; others leave it; a LOCKSTEP_LAB_MLP_RED form takes 0). The
 * same x' either way, and with 0 and 1 the same bits in each row. Returns the previous setting.
 * ls_gemv_mlp_bulked: the form the last ls_gemv_mlp launch took (0 where the bulk form does not
 * apply). */
int ls_gemv_set_mlp_bulk(int on);
int ls_gemv_mlp_bulked(void);

/* One position: y += W . x as ls_gemv_ex with accumulate, each updated y[r] also stored in
 * y2[r] (the fused MLP's input copy). pend (or NULL): y's pending sum [LS_GEMV_PEND_ROWS][n]
 * (ls_gemv_mlp), taken into y first where pend_live, as (y[r] + pend[r]) + (pend[n + r] +
 * pend[2n + r]), and zeroed either way.
 * Returns 0, launching nothing, where the column-resident kernel does not take the shape. */
int ls_gemv_residual_copy(float *y, float *y2, float *pend, int pend_live, const uint16_t *W,
                          const float *x, int n, int k, void *stream);
int ls_gemv_residual_copy_takes(const uint16_t *W, const float *x, int n, int k);
/* The same, with x the decode attention's output left as its split's partials in the workspace
 * ws (ls_attention_decode_partials with hq q heads of hd, nsplit chunks of at least min_chunk
 * positions, a cache of max_ctx, the position pos read on the device): each input merged from
 * the live chunks as the kernel loads it, bitwise the attention's own cluster merge (shared: the
 * warps that read a column share its merge through shared memory, the same bits). Returns 0,
 * launching nothing, where the kernel does not take the shape (k = hq * hd). */
int ls_gemv_residual_copy_att(float *y, float *y2, float *pend, int pend_live, const uint16_t *W,
                              const float *ws, const int *pos, int hq, int hd, int nsplit,
                              int min_chunk, int max_ctx, int n, int shared, void *stream);

/* The launch shapes of the one-position kernel (threads / blocks per SM / loads in flight):
 * how many there are, and which one serves matrices below 96 MB, up to 512 MB, and above
 * (overrides LOCKSTEP_GEMV=S,M,L); returns the small one's name, NULL for an index out of range.
 * For tests and experiments: every shape gives the same result up to summation order. */
int ls_gemv_shapes(void);
const char *ls_gemv_set_shapes(int small, int medium, int large);

/* The column-resident-x kernel for one position: 3 (default) its 1024-thread shape with two
 * row batches in flight, 2 the same with one, 1 its 512-thread shape, where the shape suits it;
 * 0 (or LOCKSTEP_GEMV_XREG=0): never, the launch shapes above then apply. Returns the previous
 * setting. */
int ls_gemv_set_xreg(int on);

/* The column-resident kernel's SwiGLU input: 1 (default) with fast intrinsics (__expf,
 * __fdividef; ~1e-6 relative from the exact expression), 0 (or LOCKSTEP_GEMV_SILU=exact) the
 * exact one, as every other path computes it. Returns the previous setting. */
int ls_gemv_set_silu_fast(int on);

/* Programmatic dependent launch for every kernel family of this project (default off; see
 * pdl.cuh): when on, a kernel may start while the previous one in the stream is finishing. A
 * GEMV issues its first weight loads (which depend on nothing) before it waits
 * (griddepcontrol.wait) for that kernel to complete; every kernel reads its inputs only after
 * the wait, so this is safe whatever kernel precedes it. Process-wide; read at each launch. */
void ls_kernels_set_pdl(int on);

/* Shared-memory carveout (percent of the SM's unified L1/shared storage) asked of every kernel of
 * this project from now on; < 0 (the default): the driver picks per kernel. An SM runs blocks of
 * two kernels at once only when their carveouts agree, so one common carveout lets PDL overlap
 * any kernel with the next. Process-wide. */
void ls_kernels_set_carveout(int pct);

#ifdef __cplusplus
}
#endif

#endif
