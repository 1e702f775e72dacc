/* A trivial kernel that proves the CUDA build runs on the device: info's all-reduce check
 * fills its buffer with it. */
#ifndef LOCKSTEP_KERNELS_SELFTEST_H
#define LOCKSTEP_KERNELS_SELFTEST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* buf[i] = scale * (i % 7 + 1) for i < n, on `stream` (a cudaStream_t, NULL = default) */
void ls_selftest_fill(float *buf, size_t n, float scale, void *stream);

#ifdef __cplusplus
}
#endif

#endif
