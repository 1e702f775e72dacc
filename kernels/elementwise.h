/* Elementwise kernels: embedding lookup, SwiGLU, add, bf16 <-> fp32. bf16 values are passed as
 * their bits (uint16_t); conversions to bf16 round to nearest even, as torch does. */
#ifndef LOCKSTEP_KERNELS_ELEMENTWISE_H
#define LOCKSTEP_KERNELS_ELEMENTWISE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[t][:] = table[ids[t] - first][:] as fp32 for ids in [first, first + rows), zeros for ids
 * outside (a vocab-parallel table: the ranks' rows are then summed by an all-reduce; a
 * replicated table passes first = 0, rows = vocab). ids is a device array of T token ids, so
 * a sampled token never has to visit the host. table: [rows][dim] bf16. */
void ls_embed(float *out, const uint16_t *table, const int *ids, int T, int dim, int first,
              int rows, void *stream);

/* out[i] = silu(gate[i]) * up[i], i < n; out may alias gate or up */
void ls_swiglu(float *out, const float *gate, const float *up, size_t n, void *stream);

/* out[t][i] = bf16(silu(gu[t][i]) * gu[t][f + i]), i < f: the [T][2f] fp32 output of a fused
 * gate+up matmul (gate rows first) to the [T][f] bf16 input of the down matmul (rounded as
 * ls_fp32_to_bf16 rounds) */
void ls_swiglu_cat_bf16(uint16_t *out, const float *gu, int T, int f, void *stream);

/* x[i] += y[i], i < n */
void ls_add(float *x, const float *y, size_t n, void *stream);

/* x[i] = (x[i] + pend[i]) + (pend[n + i] + pend[2n + i]), then the three zeroed, i < n: a
 * residual's pending sum (gemv.h, ls_gemv_mlp: LS_GEMV_PEND_ROWS rows) taken into it, for a
 * reader that cannot take it itself */
void ls_pending_resolve(float *x, float *pend, size_t n, void *stream);

/* out[c][r] = in[r][c] (bf16 bits), a [rows][cols] matrix to [cols][rows] */
void ls_transpose16(uint16_t *out, const uint16_t *in, int rows, int cols, void *stream);

void ls_bf16_to_fp32(float *out, const uint16_t *in, size_t n, void *stream);
void ls_fp32_to_bf16(uint16_t *out, const float *in, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
