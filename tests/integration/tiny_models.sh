#!/usr/bin/env bash
# Tiny random-weight Llama (llama3 rope scaling, GQA, untied), Qwen2 (q/k/v biases, tied) and
# Qwen3 (q/k RMSNorm) checkpoints made by Hugging Face transformers (tests/fixtures/
# make_tiny_models.py), with transformers' fp32 logits as the reference. At TP = 1, 2 and 4 on
# CPU ranks: the logits of the whole vocabulary after each prompt agree with the reference within
# a relative error of 1e-5 (fp32 on both sides; only the summation order differs; seen: 5e-7 to 1.3e-6), and the 16
# greedy tokens are the reference's exactly. The sharded checkpoint (index.json) loads the same.
# A logit bias with a repetition penalty gives transformers' greedy tokens (bias_reference.json).
. "$(dirname "$0")/lib.sh"
fx=$SRCDIR/tests/fixtures
TOL=1e-5

# rel_err REF_JSON PROMPT_INDEX: ‖out − ref‖ / ‖ref‖ of the first-step logits of $tmp/out
rel_err() {
    jq -n --slurpfile ref "$1" --slurpfile out "$tmp/out" --argjson p "$2" '
        ($ref[0].prompts[$p].last_logits) as $r
        | ($out[0].top_logits[0]) as $o
        | (reduce range(0; $o.ids | length) as $i ([]; .[$o.ids[$i]] = $o.logits[$i])) as $v
        | if ($v | length) != ($r | length) or any($v[]; . == null) then 1e9 else
          ([range(0; $r | length) | ($v[.] - $r[.]) * ($v[.] - $r[.])] | add | sqrt)
          / ([$r[] | . * .] | add | sqrt) end'
}

for model in tiny-llama tiny-qwen2 tiny-qwen3 tiny-llama/sharded; do
    ref=$fx/${model%/sharded}/reference.json
    vocab=$(jq .vocab_size "$fx/$model/config.json")
    nprompts=$(jq '.prompts | length' "$ref")
    for tp in 1 2 4; do
        [ "$model" = tiny-llama/sharded ] && [ $tp -ne 2 ] && continue
        worst=0 same=1 failed=0
        for ((p = 0; p < nprompts; p++)); do
            ids=$(jq -r ".prompts[$p].ids | map(tostring) | join(\",\")" "$ref")
            run_mpi $tp "$LOCKSTEP" generate --cpu -m "$fx/$model" --prompt-ids "$ids" -n 16 --ignore-eos \
                --json --top-logits "$vocab" --top-logit-steps 1 --quiet
            if [ "$rc" -ne 0 ]; then failed=1; break; fi
            e=$(rel_err "$ref" $p)
            worst=$(jq -n "[$worst, $e] | max")
            got=$(jq -c .ids "$tmp/out")
            want=$(jq -c ".prompts[$p].greedy_ids" "$ref")
            [ "$got" = "$want" ] || { same=0; echo "# $model tp=$tp prompt $p: got $got want $want"; }
        done
        check "$model at TP=$tp runs every prompt" test $failed -eq 0
        # (a failed run leaves worst and same untouched: these checks need every run)
        check "$model at TP=$tp: first-step logits within $TOL of transformers (worst $worst)" \
            eval '[ $failed -eq 0 ] && num_le "$worst" "$TOL"'
        check "$model at TP=$tp: 16 greedy tokens equal transformers' for every prompt" \
            test $failed -eq 0 -a $same -eq 1
    done
done

# The logit bias (OpenAI's logit_bias) against transformers' sequence_bias of one-token
# sequences, allowed tokens (vLLM's allowed_token_ids) against its prefix_allowed_tokens_fn, with
# its repetition penalty (tests/fixtures/make_bias_reference.py): each case's 16
# greedy tokens are transformers' at TP=1 and 2; the bans (of tokens the plain run chose) change
# the tokens, as the fixture says.
bref=$fx/tiny-llama/bias_reference.json
ncases=$(jq '.cases | length' "$bref")
for tp in 1 2; do
    same=1 moved=1
    for ((c = 0; c < ncases; c++)); do
        p=$(jq ".cases[$c].prompt" "$bref")
        ids=$(jq -r ".prompts[$p].ids | map(tostring) | join(\",\")" "$fx/tiny-llama/reference.json")
        mapfile -t bias < <(jq -r ".cases[$c].logit_bias | to_entries[] | \"--logit-bias\n\(.key)=\(.value)\"" "$bref")
        allowed=$(jq -r ".cases[$c].allowed_token_ids // [] | map(tostring) | join(\",\")" "$bref")
        [ -n "$allowed" ] && bias+=(--allowed-token-ids "$allowed")
        run_mpi $tp "$LOCKSTEP" generate --cpu -m "$fx/tiny-llama" --prompt-ids "$ids" -n 16 --ignore-eos \
            --json --quiet "${bias[@]}" --repeat-penalty "$(jq ".cases[$c].repetition_penalty" "$bref")"
        got=$(jq -c .ids "$tmp/out" 2>/dev/null)
        want=$(jq -c ".cases[$c].ids" "$bref")
        [ "$got" = "$want" ] || { same=0; echo "# logit bias case $c at TP=$tp: got $got want $want"; }
        case $(jq -r ".cases[$c].name" "$bref") in
        ban*) [ "$want" != "$(jq -c ".cases[$c].plain_ids" "$bref")" ] || moved=0 ;;
        esac
    done
    check "tiny-llama at TP=$tp: $ncases logit bias, allowed tokens and repetition penalty cases give transformers' 16 greedy tokens" \
        test "$ncases" -ge 20 -a $same -eq 1
    check "tiny-llama at TP=$tp: every ban changes the greedy tokens" test $moved -eq 1
done

# Scaling on CPU ranks (oversubscribed here): a random Llama whose shard plan allows 8 ranks
# (16 q heads, 4 KV heads: at TP=8 each rank holds 2 q heads and a replica of its KV head).
# --dummy weights depend on the tensor and element only, so TP=4 and TP=8 run the same model
# as TP=1: the logits agree within fp32 summation order and the greedy tokens are equal.
cfg=$fx/llama-tp8.json
for tp in 1 4 8; do
    run_mpi $tp "$LOCKSTEP" generate --cpu --dummy "$cfg" --prompt-ids 5,17,300,9,1000,42 -n 12 --ignore-eos \
        --json --top-logits 2048 --top-logit-steps 1 --quiet
    check "dummy llama-tp8 at TP=$tp runs" test "$rc" -eq 0
    cp "$tmp/out" "$tmp/scale.$tp"
done
scale_err() { # rel. error of the first-step logits of TP=$1 against TP=1
    jq -n --slurpfile a "$tmp/scale.$1" --slurpfile b "$tmp/scale.1" '
        def v(o): (reduce range(0; o.top_logits[0].ids | length) as $i ([]; .[o.top_logits[0].ids[$i]] = o.top_logits[0].logits[$i]));
        (v($a[0])) as $x | (v($b[0])) as $y
        | if ($x | length) != 2048 or ($y | length) != 2048 then 1e9 else
          ([range(0; 2048) | ($x[.] - $y[.]) * ($x[.] - $y[.])] | add | sqrt) / ([$y[] | . * .] | add | sqrt) end'
}
for tp in 4 8; do
    e=$(scale_err $tp 2>/dev/null || echo 1e9)
    check "dummy llama-tp8: TP=$tp logits within $TOL of TP=1 (rel. error $e)" num_le "$e" "$TOL"
    check "dummy llama-tp8: TP=$tp greedy tokens equal TP=1's" \
        test "$(jq -c .ids "$tmp/scale.$tp")" = "$(jq -c .ids "$tmp/scale.1")" -a "$(jq ".ids | length" "$tmp/scale.1")" = 12
done
done_testing
