#!/usr/bin/env bash
# The default model, SmolLM2-135M-Instruct (Q4_1 GGUF), against Hugging Face transformers
# loading the same GGUF (tests/fixtures/make_smollm2_reference.py): for 3 plain and 3 chat
# prompts, at TP = 1, 2 (uneven: 2 KV groups + 1) and 3 on CPU ranks,
#  - the prompt ids (tokenizer, and chat template for the chat prompts) equal transformers',
#  - the first 32 greedy tokens equal the reference's,
#  - the logits of the reference's top 20 ids at each of the first 4 steps agree within a
#    relative error of 1e-4 (both sides dequantize Q4_1 to fp32 and compute in fp32).
. "$(dirname "$0")/lib.sh"
ref=$SRCDIR/tests/fixtures/smollm2/reference.json
model=${LOCKSTEP_MODEL:-$SRCDIR/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
TOL=1e-4
if [ ! -f "$model" ]; then
    skip "SmolLM2 reference checks: model absent (launcher/fetch-model.sh fetches it)"
    done_testing
    exit 0
fi

# rel_err P: over the reference's top-20 ids of the first 4 steps, ‖ours − ref‖ / ‖ref‖
rel_err() {
    jq -n --slurpfile ref "$ref" --slurpfile out "$tmp/out" --argjson p "$1" '
        [range(0; 4) as $s
         | ($ref[0].prompts[$p].top[$s]) as $r
         | ($out[0].top_logits[$s]) as $o
         | (reduce range(0; $o.ids | length) as $i ({}; .[$o.ids[$i] | tostring] = $o.logits[$i])) as $m
         | range(0; $r.top_ids | length) as $i
         | [($m[$r.top_ids[$i] | tostring] // 1e9), $r.top_logits[$i]]]
        | ([.[] | (.[0] - .[1]) * (.[0] - .[1])] | add | sqrt) / ([.[] | .[1] * .[1]] | add | sqrt)'
}

n=$(jq '.prompts | length' "$ref")
for tp in 1 2 3; do
    for ((p = 0; p < n; p++)); do
        kind=$(jq -r ".prompts[$p].kind" "$ref")
        args=()
        : >"$tmp/prompt"
        if [ "$kind" = chat ]; then
            sys=$(jq -r "[.prompts[$p].messages[] | select(.role == \"system\") | .content] | first // empty" "$ref")
            user=$(jq -r "[.prompts[$p].messages[] | select(.role == \"user\") | .content] | last" "$ref")
            args=(--chat -p "$user")
            [ -n "$sys" ] && args+=(--system "$sys")
        else
            # from stdin: a command substitution would drop the prompt's trailing newline
            jq -j ".prompts[$p].text" "$ref" >"$tmp/prompt"
            args=(-p -)
        fi
        # the top 1000 logits hold the reference's top 20 unless the two disagree wildly
        run_mpi $tp "$LOCKSTEP" generate --cpu -m "$model" "${args[@]}" -n 32 --ignore-eos --json \
            --top-logits 1000 --top-logit-steps 4 --quiet <"${tmp}/prompt"
        desc="SmolLM2 $kind prompt $p at TP=$tp"
        if [ "$rc" -ne 0 ]; then
            not_ok "$desc runs"
            tail -n 5 "$tmp/err" | diag
            continue
        fi
        check "$desc: prompt ids equal transformers'" \
            test "$(jq -c .prompt_ids "$tmp/out")" = "$(jq -c ".prompts[$p].ids" "$ref")"
        check "$desc: 32 greedy tokens equal transformers'" \
            test "$(jq -c '.ids[:32]' "$tmp/out")" = "$(jq -c ".prompts[$p].greedy_ids[:32]" "$ref")"
        e=$(rel_err $p)
        check "$desc: top-20 logits of 4 steps within $TOL (found $e)" num_le "$e" "$TOL"
    done
done
done_testing
