#!/usr/bin/env bash
# lockstep perplexity on CPU ranks: a window's nll against transformers' fp32 logits
# (tests/fixtures/tiny-llama/reference.json: the whole vocabulary after the one-token prompt),
# a window of 16 scored tokens against generate's log-probabilities of the same tokens, the
# windows cut and run from an empty context each, TP = 1 and 2 alike on SmolLM2 over a text
# file (and the same from stdin), and the errors of flags and input.
. "$(dirname "$0")/lib.sh"
fx=$SRCDIR/tests/fixtures
tiny=$fx/tiny-llama
ref=$tiny/reference.json
model=${LOCKSTEP_MODEL:-$SRCDIR/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}

# ---- flags and input
run "$LOCKSTEP" perplexity -m x --prompt-ids 1,2 --ctx 1
check "--ctx 1: a usage error naming the range" eval '[ "$rc" -eq 2 ] && err_has "expected 2..4194304, found 1"'
run "$LOCKSTEP" perplexity -m x
check "no text: a usage error" eval '[ "$rc" -eq 2 ] && err_has "give exactly one of --file (-f) and --prompt-ids"'
run "$LOCKSTEP" perplexity -m x -f y --prompt-ids 1
check "a file and ids: a usage error" eval '[ "$rc" -eq 2 ] && err_has "give exactly one of"'
run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$tiny" -f "$tmp/none.txt"
check "a file that cannot be read: non-zero on every rank, named" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "none.txt: cannot read it"'
echo "some text" >"$tmp/t.txt"
run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$tiny" -f "$tmp/t.txt"
check "a text for a model without a tokenizer: non-zero, said" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "has no tokenizer: give the text as --prompt-ids"'
run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$tiny" --prompt-ids 5
check "one token: nothing to score, non-zero" eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "the text has 1 token: nothing to score"'
run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$tiny" --prompt-ids 5,512
check "an id outside the vocabulary: non-zero, the token named" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "token 1: id 512 is outside the vocabulary \[0, 512)"'

# ---- against transformers: the window [60, g0] scores g0 after the prompt [60], whose logits
# over the whole vocabulary the reference holds; two such windows give the same
p0=$(jq -r '.prompts[0].ids | map(tostring) | join(",")' "$ref")
g0=$(jq -r '.prompts[0].greedy_ids[0]' "$ref")
want=$(python3 - "$ref" <<'PY'
import json, math, sys
p = json.load(open(sys.argv[1]))["prompts"][0]
l = p["last_logits"]
m = max(l)
print(m + math.log(sum(math.exp(v - m) for v in l)) - l[p["greedy_ids"][0]])
PY
)
for tp in 1 2; do
    run_mpi $tp "$LOCKSTEP" perplexity --cpu -m "$tiny" --prompt-ids "$p0,$g0,$p0,$g0,$p0" --ctx 2 --json
    check "tiny-llama at TP=$tp: two windows of 2 scored (the last of one token not run), each nll within 1e-5 of transformers' ($want)" \
        jq_ok ".windows_run == 2 and .scored == 2 and .tokens == 5 and
               ([.windows[].nll] | all((. - $want) | fabs < 1e-5)) and ((.nll - $want) | fabs < 1e-5) and
               ((.perplexity - ($want | exp)) | fabs < 1e-4)"
done

# ---- a window of 17 tokens scores 16: the prompt's greedy continuation, whose log-probabilities
# generate gives (the same forward, token by token)
gs=$(jq -r '.prompts[0].greedy_ids | map(tostring) | join(",")' "$ref")
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids "$p0" -n 16 --ignore-eos --json --quiet --logprobs 0
lp=$(jq '[.logprobs.content[].logprob] | add / length | -.' "$tmp/out")
run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$tiny" --prompt-ids "$p0,$gs" --ctx 17 --json
check "a window of 17: 16 scored, the mean nll within 1e-6 of generate's log-probabilities of the same tokens ($lp)" \
    jq_ok ".windows_run == 1 and .scored == 16 and ((.nll - $lp) | fabs < 1e-6)"
run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$tiny" --prompt-ids "$p0,$gs" --ctx 9 --json
check "windows of 9 over 17 tokens: 2 windows, 8 + 7 scored, each from an empty context" \
    jq_ok '.windows_run == 2 and .scored == 15 and [.windows[].scored] == [8, 7] and [.windows[].start] == [0, 9]'

# ---- SmolLM2 over a text: TP = 1 and 2 alike (fp32 sums in another order), stdin the same
if [ -f "$model" ]; then
    head -c 3000 "$SRCDIR/docs/running.md" >"$tmp/text.txt"
    run_mpi 1 "$LOCKSTEP" perplexity --cpu -m "$model" -f "$tmp/text.txt" --ctx 128 --json
    cp "$tmp/out" "$tmp/p1.json"
    check "SmolLM2 at TP=1: a perplexity over the text's windows" \
        jq_ok '.perplexity > 1 and .perplexity < 1e4 and .windows_run > 1 and .scored == .tokens - .windows_run'
    run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$model" -f - --ctx 128 --json <"$tmp/text.txt"
    check "SmolLM2 at TP=2, the text from stdin: the same windows, nll within 1e-5 relative of TP=1's" \
        eval "jq -e --slurpfile a \"$tmp/p1.json\" '.scored == \$a[0].scored and ((.nll - \$a[0].nll) / \$a[0].nll | fabs) < 1e-5' \"$tmp/out\" >/dev/null"
    run_mpi 2 "$LOCKSTEP" perplexity --cpu -m "$model" -f "$tmp/text.txt" --ctx 128
    check "SmolLM2: the text form prints the result and the running perplexity per window" \
        eval '[ "$rc" -eq 0 ] && out_has "^perplexity: [0-9.]* +/- [0-9.]* (mean nll" && err_has "\[1\][0-9.]* \[2\]"'
else
    skip "SmolLM2 perplexity: $model missing"
fi

done_testing
