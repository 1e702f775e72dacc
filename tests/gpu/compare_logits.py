"""Compare the first-step logits (and greedy tokens) of two `lockstep generate --json
--top-logits V` outputs, e.g. the GPU path against the CPU reference path.

usage: python3 compare_logits.py A.json B.json TOL [--same-tokens N]
Prints the relative error ||a - b|| / ||b|| over the whole vocabulary, the top-1 agreement, and
how many leading greedy tokens agree; exits 1 when the error exceeds TOL (or fewer than N
tokens agree, with --same-tokens)."""
import json
import math
import sys


def full(o):
    step = o["top_logits"][0]
    v = {}
    for i, x in zip(step["ids"], step["logits"]):
        v[i] = x
    return v


a, b = (json.load(open(p)) for p in sys.argv[1:3])
tol = float(sys.argv[3])
need = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--same-tokens" else 0
va, vb = full(a), full(b)
keys = sorted(set(va) & set(vb))
num = math.sqrt(sum((va[k] - vb[k]) ** 2 for k in keys))
den = math.sqrt(sum(vb[k] ** 2 for k in keys))
err = num / den if den else float("inf")
same = 0
for x, y in zip(a["ids"], b["ids"]):
    if x != y:
        break
    same += 1
top_a = max(va, key=lambda k: (va[k], -k))
top_b = max(vb, key=lambda k: (vb[k], -k))
# where the top-1 differ, each side's logits of both ids: the margin that rounding crossed
tie = ""
if top_a != top_b:
    tie = (f" (A: {va[top_a]:.4f} vs {va.get(top_b, float('nan')):.4f}, "
           f"B: {vb.get(top_a, float('nan')):.4f} vs {vb[top_b]:.4f})")
print(f"logits over {len(keys)} ids: rel err {err:.3e} (tol {tol:g}); top-1 {top_a} vs {top_b}{tie}; "
      f"{same} of {min(len(a['ids']), len(b['ids']))} greedy tokens agree")
sys.exit(0 if err <= tol and same >= need and len(keys) > 0 else 1)
