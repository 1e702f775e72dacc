#!/usr/bin/env bash
# Log-probabilities end to end on CPU ranks (generate --logprobs N, batch "logprobs" and
# "top_logprobs"): the first step's against the log_softmax of transformers' fp32 logits
# (tests/fixtures/tiny-llama/reference.json, from tests/fixtures/make_tiny_models.py) at TP = 1
# and 2; every step's against lockstep's own full logits (the model's distribution, before
# temperature and truncation) on a sampled run; the tokens unchanged by asking; batch's two
# OpenAI forms on SmolLM2; and the flags' and fields' errors.
. "$(dirname "$0")/lib.sh"
fx=$SRCDIR/tests/fixtures
tiny=$fx/tiny-llama
model=${LOCKSTEP_MODEL:-$SRCDIR/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
ref=$tiny/reference.json

# ---- flags
run "$LOCKSTEP" generate -m x --prompt-ids 1 --logprobs 2
check "--logprobs without --json: a usage error" eval '[ "$rc" -eq 2 ] && err_has "logprobs needs --json"'
run "$LOCKSTEP" generate -m x --prompt-ids 1 --json --logprobs 21
check "--logprobs 21: a usage error naming the range" eval '[ "$rc" -eq 2 ] && err_has "expected 0..20, found 21"'

# ---- against transformers: the first step after each reference prompt, the chosen token's
# log-probability and the 5 most likely, within 1e-4 (the logits agree within 1e-5 relative:
# tiny_models.sh), the 5 ids in transformers' order
nprompts=$(jq '.prompts | length' "$ref")
for tp in 1 2; do
    worst=0 failed=0
    for ((p = 0; p < nprompts; p++)); do
        ids=$(jq -r ".prompts[$p].ids | map(tostring) | join(\",\")" "$ref")
        run_mpi $tp "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids "$ids" -n 1 --ignore-eos --json --quiet \
            --logprobs 5
        [ "$rc" -eq 0 ] || { failed=1; break; }
        e=$(python3 - "$ref" "$tmp/out" $p <<'PY'
import json, math, sys
ref = json.load(open(sys.argv[1]))["prompts"][int(sys.argv[3])]["last_logits"]
out = json.load(open(sys.argv[2]))["logprobs"]["content"][0]
m = max(ref)
lse = m + math.log(sum(math.exp(v - m) for v in ref))
want = sorted(range(len(ref)), key=lambda i: (-ref[i], i))[:5]
got = [t["id"] for t in out["top_logprobs"]]
err = abs(out["logprob"] - (ref[out["id"]] - lse))
err = max([err] + [abs(t["logprob"] - (ref[t["id"]] - lse)) for t in out["top_logprobs"]])
print(err if got == want and out["id"] == want[0] else 1e9)
PY
        )
        worst=$(jq -n "[$worst, $e] | max")
    done
    check "tiny-llama at TP=$tp: first-step log-probabilities (chosen, top 5) within 1e-4 of transformers' (worst $worst)" \
        eval '[ $failed -eq 0 ] && num_le "$worst" 1e-4'
done

# ---- every step of a sampled run against lockstep's own logits of that step (all 512): the
# chosen token's log-probability is its logit's log_softmax, not the tempered or truncated
# distribution's; the alternatives are the most likely, in order
args=(--cpu -m "$tiny" --prompt-ids 60,7,300 -n 8 --ignore-eos --json --quiet --temperature 0.9 --top-k 20 --seed 3)
run_mpi 2 "$LOCKSTEP" generate "${args[@]}" --logprobs 3 --top-logits 512 --top-logit-steps 8
cp "$tmp/out" "$tmp/lp.json"
check "sampled run with --logprobs and --top-logits: runs" test "$rc" -eq 0
e=$(python3 - "$tmp/lp.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
worst = 0.0
assert len(d["logprobs"]["content"]) == len(d["ids"]) == 8
for step, e in zip(d["top_logits"], d["logprobs"]["content"]):
    logit = dict(zip(step["ids"], step["logits"]))
    m = max(logit.values())
    lse = m + math.log(sum(math.exp(v - m) for v in logit.values()))
    want = sorted(logit, key=lambda i: (-logit[i], i))[:3]
    if [t["id"] for t in e["top_logprobs"]] != want:
        print(1e9); sys.exit()
    worst = max([worst, abs(e["logprob"] - (logit[e["id"]] - lse))] +
                [abs(t["logprob"] - (logit[t["id"]] - lse)) for t in e["top_logprobs"]])
print(worst)
PY
)
check "sampled run: every step's log-probabilities are the logits' log_softmax within 1e-5 (worst $e), the top 3 in order" \
    num_le "${e:-1e9}" 1e-5
run_mpi 2 "$LOCKSTEP" generate "${args[@]}"
check "asking for log-probabilities leaves the tokens as they were" \
    eval '[ "$rc" -eq 0 ] && [ "$(jq -c .ids "$tmp/out")" = "$(jq -c .ids "$tmp/lp.json")" ]'
run_mpi 1 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 60 -n 2 --ignore-eos --json --quiet --logprobs 0
check "--logprobs 0: the chosen tokens' only" \
    jq_ok '.logprobs.content | length == 2 and all(.[]; .top_logprobs == [] and .logprob <= 0)'

# ---- batch: field errors (the tiny model has no tokenizer: the lines fail at the prompt after
# their fields are checked)
cat >"$tmp/be.jsonl" <<'JSONL'
{"id": "s", "prompt": "x", "logprobs": "yes"}
{"id": "r", "prompt": "x", "logprobs": 21}
{"id": "t", "prompt": "x", "top_logprobs": 2}
{"id": "u", "prompt": "x", "logprobs": true, "top_logprobs": 21}
{"id": "ok", "prompt": "x", "logprobs": false, "top_logprobs": null}
JSONL
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/be.jsonl" --output "$tmp/be.out"
bsel() { jq -r "select(.id == \"$1\") | .error // empty" "$tmp/be.out" 2>/dev/null; }
check "batch logprobs fields: the job succeeds, one line each" eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/be.out")" -eq 5 ]'
check "batch: \"logprobs\" of another type is named" \
    test "$(bsel s)" = 'line 1: field "logprobs": expected true, false or an integer, found a string'
check "batch: \"logprobs\": 21 is out of range" test "$(bsel r)" = 'line 2: field "logprobs": expected 0..20, found 21'
check "batch: \"top_logprobs\" without \"logprobs\": true" \
    test "$(bsel t)" = 'line 3: field "top_logprobs": needs "logprobs": true'
check "batch: \"top_logprobs\": 21 is out of range" \
    test "$(bsel u)" = 'line 4: field "top_logprobs": expected 0..20, found 21'
check "batch: \"logprobs\": false reaches the prompt, not ignored" \
    eval 'test "$(bsel ok)" = "line 5: the model has no tokenizer" && ! err_has "ignored fields"'

# ---- batch on SmolLM2: chat's form and completions' form give the same log-probabilities, with
# the tokens' text; a line without them has none
if [ -f "$model" ]; then
    cat >"$tmp/b.jsonl" <<'JSONL'
{"id": "chat", "prompt": "The capital of France is", "max_tokens": 4, "logprobs": true, "top_logprobs": 2}
{"id": "compl", "prompt": "The capital of France is", "max_tokens": 4, "logprobs": 2}
{"id": "none", "prompt": "The capital of France is", "max_tokens": 4}
JSONL
    run_mpi 2 "$LOCKSTEP" batch --cpu -m "$model" --input "$tmp/b.jsonl" --output "$tmp/b.out"
    check "batch with logprobs on SmolLM2: runs" eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/b.out")" -eq 3 ]'
    check "batch: one entry a generated token, with its text, a log-probability <= 0 and 2 alternatives" \
        jq_file "$tmp/b.out" '.id == "chat" and (.logprobs.content | length) == .completion_tokens and
            all(.logprobs.content[]; (.token | type) == "string" and .logprob <= 0 and
                (.top_logprobs | length) == 2 and .top_logprobs[0].logprob >= .top_logprobs[1].logprob)
            and ([.logprobs.content[].token] | add) == .text'
    check "batch: \"logprobs\": 2 gives what \"logprobs\": true, \"top_logprobs\": 2 gives" \
        eval '[ "$(jq -sc "map(select(.id == \"chat\"))[0].logprobs" "$tmp/b.out")" = "$(jq -sc "map(select(.id == \"compl\"))[0].logprobs" "$tmp/b.out")" ]'
    check "batch: a line that does not ask has no logprobs" jq_file "$tmp/b.out" '.id == "none" and (has("logprobs") | not)'
else
    skip "batch with logprobs on SmolLM2: $model missing"
fi

done_testing
