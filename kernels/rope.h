/* Rotary position embedding of q and k, and the store of k and v into the bf16 KV cache, in one
 * kernel (optionally preceded by the per-head RMSNorm of q and k that Qwen3 applies).
 *
 * KV cache layout, per layer: kcache, vcache [hkv][max_ctx][hd] bf16, head-major so that the
 * attention kernels stream each KV head's positions contiguously.
 *
 * Rotation as ref_rope: angle = pos * inv_freq[i] in fp32, pairs (i, i + hd/2) (NEOX, HF
 * rotate_half) or (2i, 2i + 1) (interleaved). inv_freq [hd/2] is the device copy of
 * ref_rope_inv_freq's table. */
#ifndef LOCKSTEP_KERNELS_ROPE_H
#define LOCKSTEP_KERNELS_ROPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* For each t < T, at position pos[t] (a device array; positions >= max_ctx or < 0 are rotated
 * but not stored):
 *   q + t*q_stride:  hq heads of hd floats: q_norm (if not NULL) then rotated, in place
 *   k + t*kv_stride: hkv heads: k_norm (if not NULL) then rotated, in place, and stored as bf16
 *                    in kcache[h][pos[t]][:]
 *   v + t*kv_stride: hkv heads stored as bf16 in vcache[h][pos[t]][:]
 * With the fused QKV GEMV output qkv[T][(hq + 2 hkv) * hd]: q = qkv, k = qkv + hq*hd,
 * v = qkv + (hq + hkv)*hd, q_stride = kv_stride = (hq + 2 hkv) * hd.
 * q_norm, k_norm: [hd] fp32, eps their epsilon. Needs hd even and hd <= 256 (checked). */
void ls_rope_kv(float *q, float *k, const float *v, int q_stride, int kv_stride, uint16_t *kcache,
                uint16_t *vcache, const int *pos, const float *inv_freq, int T, int hq, int hkv,
                int hd, int max_ctx, int interleaved, const float *q_norm, const float *k_norm,
                float eps, void *stream);

/* The same, and while it runs the bulk copy engine pulls the matrices the step reads next
 * (l2_next[0], l2_bytes[0]: the attention output projection; [1]: the gate+up projection after
 * it) into L2, so that the DRAM, idle during the small RoPE and attention kernels, fetches part
 * of the next GEMVs' weights. A hint: results are those of ls_rope_kv. Two thirds of the L2 at
 * most: all of the first matrix when it fits, else an even share of it (one 64 KB stripe in
 * every ceil(bytes / budget)); the second an even share of what is left. NULL or unaligned
 * entries are skipped; l2_next NULL: none. Measured on the H200 this made the 8B decode step
 * twice as slow, not faster (docs/BENCHMARKS.md); the backend leaves it off by default. */
void ls_rope_kv_prefetch(float *q, float *k, const float *v, int q_stride, int kv_stride,
                         uint16_t *kcache, uint16_t *vcache, const int *pos, const float *inv_freq,
                         int T, int hq, int hkv, int hd, int max_ctx, int interleaved,
                         const float *q_norm, const float *k_norm, float eps,
                         const void *const l2_next[2], const size_t l2_bytes[2], void *stream);

#ifdef __cplusplus
}
#endif

#endif
