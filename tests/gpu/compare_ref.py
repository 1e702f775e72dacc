"""Compare lockstep's first-step logits (generate --json --top-logits K) with a transformers
reference.json written by hf_peer.py --save: relative error over the reference's top ids.
usage: python3 compare_ref.py LOCKSTEP.json REFERENCE.json TOL"""
import json
import math
import sys

out, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
tol = float(sys.argv[3])
step = out["top_logits"][0]
mine = dict(zip(step["ids"], step["logits"]))
pairs = [(mine.get(i), r) for i, r in zip(ref["top_ids"], ref["top_logits"])]
missing = sum(1 for m, _ in pairs if m is None)
pairs = [(m, r) for m, r in pairs if m is not None]
err = math.sqrt(sum((m - r) ** 2 for m, r in pairs)) / math.sqrt(sum(r * r for _, r in pairs))
print(f"lockstep vs transformers over the reference's top {len(ref['top_ids'])} ids: rel err {err:.3e} "
      f"(tol {tol:g}), {missing} missing from lockstep's list; top-1 {step['ids'][0]} vs {ref['top_ids'][0]}")
sys.exit(0 if err <= tol and missing == 0 else 1)
