/* The last node of a captured decode step: advance the position the next replay reads. */
#ifndef LOCKSTEP_KERNELS_STEP_H
#define LOCKSTEP_KERNELS_STEP_H

#ifdef __cplusplus
extern "C" {
#endif

/* pos[0] += 1, on stream */
void ls_advance_pos(int *pos, void *stream);

#ifdef __cplusplus
}
#endif

#endif
