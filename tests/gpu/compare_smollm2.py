"""SmolLM2 on the GPU against transformers' reference (tests/fixtures/smollm2/reference.json):
for one prompt, lockstep's prompt ids must equal the reference's, its greedy tokens should
equal the reference's for the first 32 (a bf16 GPU may diverge where the reference's top-2
margin is tiny: the margin at the first divergence is printed), and the logits of the
reference's top-20 ids over the first 4 steps must agree within TOL (relative).

usage: python3 compare_smollm2.py LOCKSTEP.json REFERENCE.json PROMPT_INDEX TOL"""
import json
import math
import sys

out = json.load(open(sys.argv[1]))
ref = json.load(open(sys.argv[2]))["prompts"][int(sys.argv[3])]
tol = float(sys.argv[4])
ok = out["prompt_ids"] == ref["ids"]
same = 0
for a, b in zip(out["ids"], ref["greedy_ids"]):
    if a != b:
        break
    same += 1
num = den = 0.0
for s in range(min(4, len(out["top_logits"]), same + 1)):
    mine = dict(zip(out["top_logits"][s]["ids"], out["top_logits"][s]["logits"]))
    for i, v in zip(ref["top"][s]["top_ids"], ref["top"][s]["top_logits"]):
        num += (mine.get(i, 1e9) - v) ** 2
        den += v * v
err = math.sqrt(num / den)
note = ""
if same < 32:
    note = f"; first divergence at step {same}, reference margin there {ref['margins'][same]:.4f}"
print(f"prompt {sys.argv[3]} ({ref['kind']}): ids {'equal' if ok else 'DIFFER'}, {same} of 32 greedy tokens equal"
      f"{note}, top-20 logits rel err {err:.2e} (tol {tol:g})")
sys.exit(0 if ok and err <= tol else 1)
