#!/usr/bin/env bash
# Log-probabilities end to end on CPU ranks (generate --logprobs N and --prompt-logprobs N, batch
# "logprobs", "top_logprobs" and "prompt_logprobs"): the first step's against the log_softmax of
# transformers' fp32 logits (tests/fixtures/tiny-llama/reference.json, from
# tests/fixtures/make_tiny_models.py) at TP = 1 and 2, and a prompt token's likewise; every
# step's against lockstep's own full logits (the model's distribution, before temperature and
# truncation) on a sampled run; the prompt's against the generated ones of the same tokens and
# against perplexity; the tokens unchanged by asking; batch's forms on SmolLM2; and the flags'
# and fields' errors.
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
run "$LOCKSTEP" generate -m x --prompt-ids 1 --prompt-logprobs 2
check "--prompt-logprobs without --json: a usage error" eval '[ "$rc" -eq 2 ] && err_has "prompt-logprobs needs --json"'
run "$LOCKSTEP" generate -m x --prompt-ids 1 --json --prompt-logprobs 21
check "--prompt-logprobs 21: a usage error naming the range" eval '[ "$rc" -eq 2 ] && err_has "expected 0..20, found 21"'

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

# ---- the prompt's: the reference prompt [60] followed by its first greedy token g0, whose
# log-probability given [60] transformers' logits give (and the 3 most likely, in order)
p0=$(jq -r '.prompts[0].ids | map(tostring) | join(",")' "$ref")
gs=$(jq -r '.prompts[0].greedy_ids | map(tostring) | join(",")' "$ref")
for tp in 1 2; do
    run_mpi $tp "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids "$p0,$gs" -n 1 --ignore-eos --json --quiet \
        --prompt-logprobs 3
    e=$(python3 - "$ref" "$tmp/out" <<'PY'
import json, math, sys
p = json.load(open(sys.argv[1]))["prompts"][0]
d = json.load(open(sys.argv[2]))
l = p["last_logits"]
m = max(l)
lse = m + math.log(sum(math.exp(v - m) for v in l))
pl = d["prompt_logprobs"]
e = pl[1]
want = sorted(range(len(l)), key=lambda i: (-l[i], i))[:3]
ok = pl[0] is None and len(pl) == len(d["prompt_ids"]) == 17 and e["id"] == p["greedy_ids"][0] \
    and [t["id"] for t in e["top_logprobs"]] == want
err = max([abs(e["logprob"] - (l[e["id"]] - lse))] + [abs(t["logprob"] - (l[t["id"]] - lse)) for t in e["top_logprobs"]])
print(err if ok else 1e9)
PY
    )
    check "tiny-llama at TP=$tp: a prompt token's log-probability (and the top 3) within 1e-4 of transformers' (worst $e)" \
        eval '[ "$rc" -eq 0 ] && num_le "${e:-1e9}" 1e-4'
done
cp "$tmp/out" "$tmp/plp.json"
# the same 16 tokens as the prompt's and as generated: the same log-probabilities (one forward
# over the prompt against one step at a time), and their mean as perplexity's nll
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids "$p0" -n 16 --ignore-eos --json --quiet --logprobs 0
e=$(jq -n --slurpfile a "$tmp/plp.json" --slurpfile b "$tmp/out" \
    '[range(0; 16) | ($a[0].prompt_logprobs[. + 1].logprob - $b[0].logprobs.content[.].logprob) | fabs] | max')
check "the prompt's log-probabilities of 16 tokens equal those generated of the same tokens within 1e-5 (worst $e)" \
    num_le "${e:-1e9}" 1e-5
nll=$(jq '[.prompt_logprobs[1:][].logprob] | add / length | -.' "$tmp/plp.json")
run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$tiny" --prompt-ids "$p0,$gs" --ctx 17 --json
check "the prompt's mean -log-probability is perplexity's nll of the same window ($nll)" \
    jq_ok "((.nll - $nll) | fabs) < 1e-6"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids "$p0,$gs" -n 1 --ignore-eos --json --quiet
check "asking for the prompt's log-probabilities leaves the next token as it was" \
    eval '[ "$rc" -eq 0 ] && [ "$(jq -c .ids "$tmp/out")" = "$(jq -c .ids "$tmp/plp.json")" ]'

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
# ---- the log-probabilities taken in the decode step (the backend reduces the step's logits to
# the chosen token's scores: no logits to the host) against the host path's
# (LOCKSTEP_HOST_SAMPLING=1: every step's logits on the host) on one sampled run: the same
# tokens, the same top 3 ids, the same values (the same reduction of the same logits here)
dargs=(--cpu -m "$tiny" --prompt-ids 60,7,300 -n 8 --ignore-eos --json --quiet --temperature 0.9 --top-k 20 --seed 3
    --logprobs 3)
for tp in 1 2; do
    run_mpi $tp "$LOCKSTEP" generate "${dargs[@]}"
    cp "$tmp/out" "$tmp/dev.json"
    run_mpi $tp -x LOCKSTEP_HOST_SAMPLING=1 "$LOCKSTEP" generate "${dargs[@]}"
    e=$(jq -n --slurpfile a "$tmp/dev.json" --slurpfile b "$tmp/out" '
        if ($a[0].ids != $b[0].ids) or ([$a[0].logprobs.content[].top_logprobs[].id] != [$b[0].logprobs.content[].top_logprobs[].id])
        then 1e9 else
        [range(0; 8) as $i | ($a[0].logprobs.content[$i] as $x | $b[0].logprobs.content[$i] as $y |
            [($x.logprob - $y.logprob | fabs)] + [range(0; 3) as $k | ($x.top_logprobs[$k].logprob - $y.top_logprobs[$k].logprob | fabs)])] | flatten | max end')
    check "TP=$tp: the decode step's log-probabilities equal the host path's on a sampled run (8 steps, top 3; worst $e)" \
        num_le "${e:-1e9}" 1e-6
done
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
{"id": "pr", "prompt": "x", "prompt_logprobs": 21}
{"id": "ps", "prompt": "x", "prompt_logprobs": true}
JSONL
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/be.jsonl" --output "$tmp/be.out"
bsel() { jq -r "select(.id == \"$1\") | .error // empty" "$tmp/be.out" 2>/dev/null; }
check "batch logprobs fields: the job succeeds, one line each" eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/be.out")" -eq 7 ]'
check "batch: \"logprobs\" of another type is named" \
    test "$(bsel s)" = 'line 1: field "logprobs": expected true, false or an integer, found a string'
check "batch: \"logprobs\": 21 is out of range" test "$(bsel r)" = 'line 2: field "logprobs": expected 0..20, found 21'
check "batch: \"top_logprobs\" without \"logprobs\": true" \
    test "$(bsel t)" = 'line 3: field "top_logprobs": needs "logprobs": true'
check "batch: \"top_logprobs\": 21 is out of range" \
    test "$(bsel u)" = 'line 4: field "top_logprobs": expected 0..20, found 21'
check "batch: \"prompt_logprobs\": 21 is out of range" \
    test "$(bsel pr)" = 'line 6: field "prompt_logprobs": expected 0..20, found 21'
check "batch: \"prompt_logprobs\" takes a count, not true" \
    test "$(bsel ps)" = 'line 7: field "prompt_logprobs": expected an integer, found a boolean'
check "batch: \"logprobs\": false reaches the prompt, not ignored" \
    eval 'test "$(bsel ok)" = "line 5: the model has no tokenizer: give \"prompt\" as a list of token ids" && ! err_has "ignored fields"'

# ---- batch on SmolLM2: chat's form and completions' form give the same log-probabilities, with
# the tokens' text; a line without them has none
if [ -f "$model" ]; then
    cat >"$tmp/b.jsonl" <<'JSONL'
{"id": "chat", "prompt": "The capital of France is", "max_tokens": 4, "logprobs": true, "top_logprobs": 2}
{"id": "compl", "prompt": "The capital of France is", "max_tokens": 4, "logprobs": 2}
{"id": "none", "prompt": "The capital of France is", "max_tokens": 4}
{"id": "prompt", "prompt": "The capital of France is", "max_tokens": 1, "prompt_logprobs": 1}
JSONL
    run_mpi 2 "$LOCKSTEP" batch --cpu -m "$model" --input "$tmp/b.jsonl" --output "$tmp/b.out"
    check "batch with logprobs on SmolLM2: runs" eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/b.out")" -eq 4 ]'
    check "batch: one entry a generated token, with its text, a log-probability <= 0 and 2 alternatives" \
        jq_file "$tmp/b.out" '.id == "chat" and (.logprobs.content | length) == .completion_tokens and
            all(.logprobs.content[]; (.token | type) == "string" and .logprob <= 0 and
                (.top_logprobs | length) == 2 and .top_logprobs[0].logprob >= .top_logprobs[1].logprob)
            and ([.logprobs.content[].token] | add) == .text'
    check "batch: \"logprobs\": 2 gives what \"logprobs\": true, \"top_logprobs\": 2 gives" \
        eval '[ "$(jq -sc "map(select(.id == \"chat\"))[0].logprobs" "$tmp/b.out")" = "$(jq -sc "map(select(.id == \"compl\"))[0].logprobs" "$tmp/b.out")" ]'
    check "batch: a line that does not ask has no logprobs" \
        jq_file "$tmp/b.out" '.id == "none" and (has("logprobs") | not) and (has("prompt_logprobs") | not)'
    check "batch: \"prompt_logprobs\": one entry a prompt token, null first, each with its text and 1 alternative" \
        jq_file "$tmp/b.out" '.id == "prompt" and (.prompt_logprobs | length) == .prompt_tokens and .prompt_logprobs[0] == null and
            all(.prompt_logprobs[1:][]; (.token | type) == "string" and .logprob <= 0 and (.top_logprobs | length) == 1)
            and ([.prompt_logprobs[1:][].token] | add) == " capital of France is"'
    check "batch: the prompt's log-probabilities do not change the result (its one token begins the other line's four)" \
        eval 'a=$(jq -r "select(.id == \"prompt\") | .text" "$tmp/b.out"); b=$(jq -r "select(.id == \"none\") | .text" "$tmp/b.out"); [ -n "$a" ] && [ "${b#"$a"}" != "$b" ]'
else
    skip "batch with logprobs on SmolLM2: $model missing"
fi

done_testing
