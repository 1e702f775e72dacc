/* The decode roofline: how fast this GPU reads memory, measured, not taken from a datasheet.
 * `lockstep bench` and the kernel benchmarks print their GB/s as a fraction of
 * ls_bandwidth_read over a buffer much larger than L2 (4 GiB: the read rate a weight stream
 * can hope for). Timings use CUDA events around each launch after warm-up; the median is
 * returned. */
#ifndef LOCKSTEP_KERNELS_BANDWIDTH_H
#define LOCKSTEP_KERNELS_BANDWIDTH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One streaming read of buf[0 .. bytes) (16-byte aligned, bytes % 16 == 0) with 16-byte loads,
 * 4 in flight per thread, 8 blocks of 1024 threads per SM; writes *sink (device) only if the
 * data XOR to a value it will never have in practice, so the loads cannot be optimised away. */
void ls_stream_read(const void *buf, size_t bytes, unsigned *sink, void *stream);

/* Median GB/s (1e9 bytes/s) of ls_stream_read over a fresh buffer of `bytes` (filled with
 * non-zero data first), over `reps` timed runs; -1 if the buffer cannot be allocated. */
double ls_bandwidth_read(size_t bytes, int reps, void *stream);

/* Median GB/s of a device-to-device cudaMemcpyAsync of `bytes`, counting bytes read plus
 * bytes written (2 * bytes); -1 if the buffers cannot be allocated. */
double ls_bandwidth_copy(size_t bytes, int reps, void *stream);

#ifdef __cplusplus
}
#endif

#endif
