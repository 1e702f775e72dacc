"""The peer, measured in the same device call as lockstep bench: Hugging Face transformers
generating with a static KV cache (transformers compiles the decode step for it), batch 1,
on a random-weight model of the Llama-3.1-8B shape in bf16, 128 prompt tokens, 256 new tokens.
Prints one JSON line: decode tokens/s, from the time of a 256-token generate minus that of a
1-token generate (the prefill), after two warm-up runs that also do the compilation.

Also, with --save DIR, saves the model with save_pretrained and writes DIR/reference.json with
transformers' fp32 logits (on the saved bf16 weights) of the last prompt position, for lockstep to
load the same safetensors and compare (tests/gpu/run.sh).
"""
import argparse
import json
import os
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--save", default="")
ap.add_argument("--new", type=int, default=256)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--ref-only", action="store_true", help="save and write references, skip the timing")
ap.add_argument("--ref-lens", default="", help="also write reference-N.json for these prompt lengths")
a = ap.parse_args()

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                  rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                  bos_token_id=128000, eos_token_id=128001)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
# bf16 parameters only: Module.to(bfloat16) would also cast the RoPE inv_freq buffer, which
# transformers keeps in fp32 (as from_pretrained(torch_dtype=bfloat16) leaves it); a bf16
# inv_freq shifts the rotary angles by ~0.4%, growing with the position
for p in model.parameters():
    p.data = p.data.to(torch.bfloat16)
ids = torch.randint(0, cfg.vocab_size, (1, a.prompt), device="cuda", generator=torch.Generator("cuda").manual_seed(1))

if a.save:
    model.save_pretrained(a.save, safe_serialization=True, max_shard_size="5GB")
    # the reference in fp32 on the same (bf16-valued) weights: transformers' bf16 activations
    # would add their own rounding, larger than the differences being checked
    model.float()
    print(open(os.path.join(a.save, "config.json")).read())
    for n in [a.prompt] + [int(x) for x in a.ref_lens.split(",") if x]:
        with torch.no_grad():
            logits = model(ids[:, :n]).logits[0, -1].float().cpu()
        top = torch.topk(logits, 2000)
        name = "reference.json" if n == a.prompt else f"reference-{n}.json"
        json.dump({"ids": ids[0, :n].tolist(), "top_ids": top.indices.tolist(), "top_logits": top.values.tolist(),
                   "torch": torch.__version__}, open(os.path.join(a.save, name), "w"))
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16)
    if a.ref_only:
        raise SystemExit(0)

gen = dict(do_sample=False, cache_implementation="static", pad_token_id=0, eos_token_id=None)


def run(n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **gen)
    torch.cuda.synchronize()
    assert out.shape[1] == a.prompt + n
    return time.perf_counter() - t0


for _ in range(2):
    run(a.new)
t_full = min(run(a.new) for _ in range(2))
t_one = min(run(1) for _ in range(3))
import transformers

print(json.dumps({"peer": "transformers static cache", "transformers": transformers.__version__,
                  "torch": torch.__version__, "decode_tok_s": (a.new - 1) / (t_full - t_one),
                  "ms_per_token": 1e3 * (t_full - t_one) / (a.new - 1), "prefill_s": t_one}))
