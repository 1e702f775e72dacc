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

#ifdef __cplusplus
}
#endif

#endif
