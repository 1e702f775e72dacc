/* The last node of a captured decode step: advance the position the next replay reads, and
 * post the step's token to the host where it asks for it. */
#ifndef LOCKSTEP_KERNELS_STEP_H
#define LOCKSTEP_KERNELS_STEP_H

#ifdef __cplusplus
extern "C" {
#endif

/* pos[0] += 1, on stream. With post (device address of mapped, pinned host memory, two
 * 8-byte slots; NULL: none) it first stores ((uint64)pos[0] << 32) | (uint32)tok[0] into
 * post[pos[0] & 1] with one system-scope store, so that the host can poll for a position's
 * token (ls_post_token_of) with nothing between this step and the next in the stream. With u
 * (not NULL) it sets u[0] to u_in[(pos[0] + 1) & 1] (u_in: mapped host memory too, read
 * before the kernel waits for the one before it), the number the next step draws with. With
 * key (not NULL: the word an LM head folded its greedy choice into, ls_gemv_argmax) the token
 * is first taken from it into pick[0] (and posted in place of tok[0]), and the word cleared. */
void ls_advance_pos(int *pos, const int *tok, unsigned long long *post, double *u,
                    const double *u_in, unsigned long long *key, int *pick, void *stream);

/* A scored step's scores: n doubles of src (device memory) into slots + (pos[0] & 1) * slot_n
 * (device address of mapped, pinned host memory; n <= slot_n), then tags[pos[0] & 1] (mapped
 * too) set to pos[0] + 1 with a system-scope release, so that a host that reads the tag first
 * (0: no position's) finds that position's scores in the slot. */
void ls_post_scores(const int *pos, const double *src, int n, double *slots, int slot_n,
                    unsigned long long *tags, void *stream);

/* the token a slot's value holds for position pos, or -1 when the slot holds another
 * position's (not yet written) */
static inline long long ls_post_token_of(unsigned long long v, int pos)
{
    return (unsigned)(v >> 32) == (unsigned)pos ? (long long)(int)(unsigned)v : -1;
}

#ifdef __cplusplus
}
#endif

#endif
