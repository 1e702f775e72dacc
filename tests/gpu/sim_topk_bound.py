# Simulates the top-k draw's bound in kernels/sample.cu: each prefilter block keeps its slice's
# top k (in the order logit desc, id asc) and writes its top token and its k-th; the sampling
# block keeps only the survivors at or before the top_k-th of the blocks' top tokens (or, where
# top_k exceeds the blocks, the earliest of their k-th survivors; or, with LOCKSTEP_SAMPLE_RTH=1,
# the ceil(top_k / r)-th of the blocks' r-th tokens, r = ceil(top_k / blocks), for top_k <=
# 1024). Checks on random peaked, flat, uniform and tied logits that the row's top k always
# survive each bound, and prints how many survivors are left to order (the small-set end takes up
# to 1024 without a select).
# Run: python3 tests/gpu/sim_topk_bound.py (numpy). The algorithm only; the kernel is checked
# by test_kernels on the GPU (every draw against the host sampler).
import numpy as np

rng = np.random.default_rng(1)
SMS = 132


def order(ids, l):  # ids sorted by (l desc, id asc)
    ids = np.asarray(ids)
    return ids[np.lexsort((ids, -l[ids]))]


def before_or_at(i, c, l):  # token i at or before cut token c in the order
    return l[i] > l[c] or (l[i] == l[c] and i <= c)


def survivors_left(l, k, rth):
    n = len(l)
    blocks = min(SMS, n // (4 * k))
    if blocks < 4:
        return None
    r = 1 if k <= blocks else -(-k // blocks) if rth and k <= 1024 else 0
    surv, tops, kth = [], [], []
    for b in range(blocks):
        s0, s1 = b * n // blocks, (b + 1) * n // blocks
        o = order(np.arange(s0, s1), l)
        surv.extend(o[:k])
        if r:
            tops.append(o[r - 1])
        if k < len(o):
            kth.append(o[k - 1])
    if r:
        cut = order(tops, l)[-(-k // r) - 1]
    elif kth:
        cut = order(kth, l)[0]
    else:
        return len(surv), True, blocks
    left = [i for i in surv if before_or_at(i, cut, l)]
    top = set(order(np.arange(n), l)[:k].tolist())
    return len(left), top <= set(left), blocks


def logits(kind, n):
    if kind == "peaked N(0,3)":
        return rng.normal(0, 3, n).astype(np.float32)
    if kind == "flat N(0,0.3)":
        return rng.normal(0, 0.3, n).astype(np.float32)
    if kind == "uniform [-1,1]":
        return rng.uniform(-1, 1, n).astype(np.float32)
    return (np.round(rng.normal(0, 3, n) * 2) / 2).astype(np.float32)  # halves: many ties


bad = 0
for n in (9001, 49152, 128256):
    for kind in ("peaked N(0,3)", "flat N(0,0.3)", "uniform [-1,1]", "tied (halves)"):
        for k in (1, 8, 40, 50, 100, 300, 1000):
            rows = [logits(kind, n) for _ in range(3)]
            runs = [[survivors_left(l, k, rth) for l in rows] for rth in (0, 1)]
            if runs[0][0] is None:
                continue
            left = [[r[0] for r in rr] for rr in runs]
            ok = all(r[1] for rr in runs for r in rr)
            bad += not ok
            print(f"V={n:6d} {kind:15s} top_k={k:4d} blocks={runs[0][0][2]:3d}: "
                  f"{k * runs[0][0][2]:5d} survivors, left after the bound "
                  f"{min(left[0])}-{max(left[0])} (RTH=1: {min(left[1])}-{max(left[1])}); "
                  f"top k kept: {'yes' if ok else 'NO'}")
print("all top-k sets kept" if bad == 0 else f"{bad} cases lost a top-k token")
raise SystemExit(1 if bad else 0)
