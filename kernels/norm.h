/* RMSNorm and the fused residual add + RMSNorm, fp32 activations, fp32 weights (the model's bf16
 * norm vectors converted once at load: they are a few KB, and fp32 keeps them exact).
 * Same arithmetic as ref_rmsnorm: out = (x * (1 / sqrt(mean(x^2) + eps))) * w. */
#ifndef LOCKSTEP_KERNELS_NORM_H
#define LOCKSTEP_KERNELS_NORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[r][:] = rmsnorm(x[r][:]) * w, rows of dim (any dim >= 1); out may alias x */
void ls_rmsnorm(float *out, const float *x, const float *w, int rows, int dim, float eps,
                void *stream);

/* ls_rmsnorm's values rounded to bf16 (as ls_fp32_to_bf16 rounds): a prefill chunk's GEMM input
 * in one pass */
void ls_rmsnorm_bf16(uint16_t *out, const float *x, const float *w, int rows, int dim, float eps,
                     void *stream);

/* x[r][:] += res[r][:] (the residual stream, updated in place), then out = rmsnorm(x) * w.
 * out must not alias x or res. */
void ls_add_rmsnorm(float *out, float *x, const float *res, const float *w, int rows, int dim,
                    float eps, void *stream);

#ifdef __cplusplus
}
#endif

#endif
