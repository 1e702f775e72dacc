/* The last node of a captured decode step: advance the position the next replay reads; and the
 * store of a step's uniform draw ahead of its replay. */
#ifndef LOCKSTEP_KERNELS_STEP_H
#define LOCKSTEP_KERNELS_STEP_H

#ifdef __cplusplus
extern "C" {
#endif

/* pos[0] += 1, on stream */
void ls_advance_pos(int *pos, void *stream);
/* *dst = v, on stream; returns without waiting (the value travels as a kernel argument) */
void ls_store_f64(double *dst, double v, void *stream);

#ifdef __cplusplus
}
#endif

#endif
