/* The decode form the CUDA backend asks for at a context (runtime/backend_cuda.c, cu_decode_form,
 * which explains the measurements behind each threshold): a pure function of the shape, the
 * attention's facts and the switches, so that a CPU test covers the rule. */
#ifndef LOCKSTEP_DECODE_FORM_H
#define LOCKSTEP_DECODE_FORM_H

#include <limits.h>

/* form 0 (clustered) where K and V re-read once per q head (hq x ctx x hd x 4 bytes a layer)
 * stay below these; form 1 (no clusters) from the first, form 2 (streamed) from the second */
#define LS_ATT_REREAD_BYTES 40000000L
#define LS_ATT_BULK_REREAD  16777216L

/* The form (0, 1 or 2) at ctx positions for hq q and hkv KV heads of hd on this rank.
 * reach: the context up to which the cluster merge applies (form 0 there); bulk_ok: whether the
 * streamed form applies to the shape on this device. cluster_from: LOCKSTEP_ATT_CLUSTER_CTX
 * (INT_MAX unset: the start by the rule; 0: form 0 always; N: form 1 past N); bulk_from:
 * LOCKSTEP_ATT_BULK_CTX (negative unset: the start by the rule; 0: never; N: past N). */
static inline int ls_decode_form_pick(int ctx, int hq, int hkv, int hd, int reach, int bulk_ok,
                                      int cluster_from, int bulk_from)
{
    if (!cluster_from || ctx <= reach || hq < 1 || hd < 1) return 0;
    const long per_pos = (long)hq * hd * 4;
    if (bulk_from && bulk_ok) {
        const long start = bulk_from > 0 ? bulk_from : LS_ATT_BULK_REREAD / per_pos;
        if (ctx > start) return 2;
    }
    const long reread = LS_ATT_REREAD_BYTES / per_pos;
    const int measured = hkv > 4 ? 3072 : 6144;
    const long at = cluster_from != INT_MAX ? cluster_from : reread < measured ? reread : measured;
    return ctx > at ? 1 : 0;
}

#endif
