/* Prefill linears through cuBLASLt: C[T][n] = A[T][k] . W[n][k]^T (+ bias), A and W bf16, C fp32,
 * fp32 accumulation (tensor cores). The activations are fp32 elsewhere: convert them with
 * ls_fp32_to_bf16 (elementwise.h) first. One handle and one 32 MiB workspace per ls_gemm,
 * made once (build_/free_ time); algorithms are chosen by cuBLASLt's heuristic once per
 * shape and remembered. Not thread-safe: one ls_gemm per thread (one rank = one thread). */
#ifndef LOCKSTEP_KERNELS_GEMM_H
#define LOCKSTEP_KERNELS_GEMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ls_gemm;

/* on the current device, with its workspace (ls_gemm_workspace_bytes); NULL when that does not
 * fit the device's memory, other failures are fatal (check.h) */
struct ls_gemm *ls_gemm_create(void);
size_t ls_gemm_workspace_bytes(void);
void ls_gemm_free(struct ls_gemm *g);

/* C[t][j] = sum_i A[t][i] * W[j][i] (+ bias[j]), t < T, j < n. A, W: bf16 bits; bias fp32 or
 * NULL; any T, k, n >= 1 (cuBLASLt needs k % 8 == 0 for its fast kernels) */
void ls_gemm_bf16(struct ls_gemm *g, float *C, const uint16_t *A, const uint16_t *W,
                  const float *bias, int T, int k, int n, void *stream);

/* C[t][j] += sum_i A[t][i] * W[j][i]: the product added to C in the GEMM's epilogue (the
 * residual stream's update without a scratch buffer and a separate add) */
void ls_gemm_bf16_add(struct ls_gemm *g, float *C, const uint16_t *A, const uint16_t *W, int T,
                      int k, int n, void *stream);

/* C[t][j] += sum_i A[t][i] * WT[i][j]: ls_gemm_bf16_add of a matrix stored transposed, WT
 * [k][n] (the fused MLP's down matrices, kernels/gemv.h ls_gemv_mlp) */
void ls_gemm_bf16_add_wt(struct ls_gemm *g, float *C, const uint16_t *A, const uint16_t *WT, int T,
                         int k, int n, void *stream);

/* the lab's view of the choice above: times the heuristic's first `max` algorithms for one call
 * of this shape (no bias; add: C += ..., else C = ...; wt: W given as WT), each over `reps` calls
 * after one untimed, cycling through the nw copies W[0..nw-1] (so that they come from DRAM, not
 * L2), and writes ms per call to ms[] in the heuristic's order (-1: the algorithm refused the
 * call). C is overwritten (add: accumulated into). Returns how many were listed. */
int ls_gemm_time_algos(struct ls_gemm *g, float *C, const uint16_t *A, const uint16_t *const *W,
                       int nw, int T, int k, int n, int add, int wt, int reps, float *ms, int max,
                       void *stream);

#ifdef __cplusplus
}
#endif

#endif
