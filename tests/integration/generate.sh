#!/usr/bin/env bash
# generate and batch end to end on CPU ranks: sampling reproducible across TP sizes, stop
# strings, streaming, batch JSONL with per-line errors, and bad input of every kind ending every
# rank with a clear error (never a crash or a hang).
. "$(dirname "$0")/lib.sh"
fx=$SRCDIR/tests/fixtures
model=${LOCKSTEP_MODEL:-$SRCDIR/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
tiny=$fx/tiny-llama

# ---- bad input that needs no real model
run_mpi 2 "$LOCKSTEP" generate -m /nonexistent/model.gguf -p hi
check "missing model file: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "missing model file: the error names the file" err_has "/nonexistent/model.gguf"

mkdir -p "$tmp/m"
cp "$tiny/config.json" "$tiny/model.safetensors" "$tmp/m/"
jq '.num_hidden_layers = 3' "$tiny/config.json" >"$tmp/m/config.json"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tmp/m" --prompt-ids 1,2
check "missing tensor (config has a layer more): non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
check "missing tensor: named" err_has "tensor 'model.layers.2.input_layernorm.weight' is missing"

jq '.num_hidden_layers = 1' "$tiny/config.json" >"$tmp/m/config.json"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tmp/m" --prompt-ids 1,2
check "tensor past the config's layers (config has a layer fewer): non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "tensor past the config's layers: the file, the tensor and num_hidden_layers named" \
    err_has "$tmp/m/model.safetensors: tensor 'model.layers.1.input_layernorm.weight': expected a layer index below num_hidden_layers (1), found 1"
cp -r "$tiny/sharded" "$tmp/sh"
jq '.num_hidden_layers = 1' "$tiny/config.json" >"$tmp/sh/config.json"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tmp/sh" --prompt-ids 1,2
check "tensor past the config's layers in a sharded checkpoint: the shard holding it named" \
    err_has "$tmp/sh/model-00004-of-00005.safetensors: tensor 'model.layers.1.input_layernorm.weight': expected a layer index below"

jq '.intermediate_size = 320' "$tiny/config.json" >"$tmp/m/config.json"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tmp/m" --prompt-ids 1,2
check "shape mismatch with the config: expected and found shapes" err_has "expected shape \[320, 128\] from the config, found \[256, 128\]"

jq 'del(.hidden_size)' "$tiny/config.json" >"$tmp/m/config.json"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tmp/m" --prompt-ids 1,2
check "config without hidden_size: the field is named" err_has "hidden_size"
check "config without hidden_size: non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124

cp "$tiny/config.json" "$tmp/m/config.json"
head -c 100000 "$tiny/model.safetensors" >"$tmp/m/model.safetensors"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tmp/m" --prompt-ids 1,2
check "truncated safetensors: non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "truncated safetensors: the file is named" err_has "model.safetensors"

run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,600
check "prompt id outside the vocabulary: named" err_has "id 600 is outside the vocabulary \[0, 512)"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids "$(seq -s, 1 40)" --max-context 16
check "prompt longer than the context: non-zero on every rank" test "$rc" -ne 0 -a "$rc" -ne 124
check "prompt longer than the context: both counts named" err_has "the prompt has 40 tokens but the context holds 16"
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids "$(seq -s, 1 16)" --max-context 16
check "prompt as long as the context: non-zero on every rank" test "$rc" -ne 0 -a "$rc" -ne 124
check "prompt as long as the context: says a generated token needs room too" \
    err_has "the context holds 16 (--max-context): the prompt and at least one generated token together"
# --prompt-ids: the bad token named by position with the range; blanks around ids are fine, an
# empty entry (trailing comma) is not
for ids in "1,2,-3" "1,2,x" "1,2,99999999999" "1,2,3 4" "1,2," "1,2,+3"; do
    run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids "$ids" -n 1
    bad=${ids#1,2,}
    check "--prompt-ids '$ids': non-zero on every rank, token 2 named with the range" eval \
        '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "--prompt-ids: token 2: expected an id in 0..1073741824 (ids separated by commas), found '"'$bad'"'"'
done
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids " 1 , 2 ,3 " -n 1 --json --quiet
check "--prompt-ids with blanks around the ids: read as 1,2,3" \
    eval '[ "$rc" -eq 0 ] && [ "$(jq -c .prompt_ids "$tmp/out")" = "[1,2,3]" ]'
run_mpi 3 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,2 -n 4 --temperature -1
check "bad sampling value: the flag is named" err_has "temperature: expected 0..100"
run "$LOCKSTEP" generate -p hi
check "generate without --model: usage error" err_has "missing --model (-m) or --dummy"
run "$LOCKSTEP" generate -m x -p hi --prompt-ids 1
check "generate with two prompts: usage error" err_has "exactly one of --prompt"
run "$LOCKSTEP" generate -m x --prompt-ids 1 --top-logits 5
check "--top-logits without --json: a usage error, not ignored" \
    eval '[ "$rc" -eq 2 ] && err_has "top-logits needs --json"'
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" -p "hello"
check "text prompt for a model without a tokenizer: says to use --prompt-ids" err_has "has no tokenizer: give the prompt as --prompt-ids"

# ---- numbers and environment read strictly: out of range is named, never clamped or ignored
run "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,2 -n 2 --seed 18446744073709551616
check "--seed past 2^64 - 1: a usage error with the range" \
    eval '[ "$rc" -eq 2 ] && err_has "seed: expected 0..18446744073709551615, found .18446744073709551616."'
run "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,2 -n 2 --seed " -1"
check "--seed ' -1' (strtoull would wrap it): a usage error" \
    eval '[ "$rc" -eq 2 ] && err_has "seed: expected a non-negative integer, found . -1."'
run "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,2 -n 2 --seed 18446744073709551615 --json --quiet
check "--seed 2^64 - 1 is accepted" test "$rc" -eq 0
run "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,2 -n 2 --presence-penalty 1e308
check "--presence-penalty 1e308: out of range with the range, not 'expected a number'" \
    eval '[ "$rc" -eq 2 ] && err_has "presence-penalty: expected -100..100, found .1e308. (out of range)"'
for chunk in abc -3 99999999999 " 4" +4; do
    LOCKSTEP_PREFILL_CHUNK=$chunk run_mpi 2 -x LOCKSTEP_PREFILL_CHUNK "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,2 -n 2
    check "LOCKSTEP_PREFILL_CHUNK=$chunk: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
    check "LOCKSTEP_PREFILL_CHUNK=$chunk: the variable, the range and the value are named" \
        err_has "LOCKSTEP_PREFILL_CHUNK: expected positions per prefill forward in 1..4194304, found '$chunk'"
done
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,2,3,4,5,6,7 -n 4 --ignore-eos --json --quiet
jq -c .ids "$tmp/out" >"$tmp/chunk.none"
LOCKSTEP_PREFILL_CHUNK=3 run_mpi 2 -x LOCKSTEP_PREFILL_CHUNK "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 1,2,3,4,5,6,7 -n 4 --ignore-eos --json --quiet
check "LOCKSTEP_PREFILL_CHUNK=3: runs, same tokens as one chunk" \
    eval '[ "$rc" -eq 0 ] && [ -s "$tmp/chunk.none" ] && [ "$(jq -c .ids "$tmp/out")" = "$(cat "$tmp/chunk.none")" ]'

# ---- batch files and fields (the tiny model has no tokenizer: lines fail at the prompt, after
# their fields are checked)
cat >"$tmp/bf.jsonl" <<'JSONL'
{"id": "s", "prompt": "x", "stop": ""}
{"id": "m", "prompt": "x", "max_tokens": 16777217}
{"id": "t", "prompt": "x", "temperature": 100.0000001}
{"id": "p", "prompt": "x", "model": "any", "n": 2, "max_token": 3}
JSONL
cp "$tmp/bf.jsonl" "$tmp/bf.orig"
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/bf.jsonl" --output "$tmp/bf.out"
bsel() { jq -r "select(.id == \"$1\") | .error // empty" "$tmp/bf.out" 2>/dev/null; }
check "batch fields: the job succeeds, one line each" eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/bf.out")" -eq 4 ]'
check "batch: \"stop\": \"\" is an error for its line, as --stop \"\" is" \
    test "$(bsel s)" = 'line 1: field "stop": expected a non-empty string'
check "batch: an integer out of range is printed exactly" \
    test "$(bsel m)" = 'line 2: field "max_tokens": expected 0..16777216, found 16777217'
check "batch: a number just past its bound is not printed as the bound" \
    test "$(bsel t)" = 'line 3: field "temperature": expected 0..100, found 100.0000001'
check "batch: a good line still reaches the prompt" test "$(bsel p)" = 'line 4: the model has no tokenizer: give "prompt" as a list of token ids'
check "batch: fields lockstep does not read are said on stderr, once, and the line still runs" \
    eval 'err_has "line 4: ignored fields (not read by lockstep): \"model\", \"max_token\"" && [ "$(count_in_err "ignored fields")" -eq 1 ]'
# a wrong type is named as what was found; a line that is JSON but no object too
cat >"$tmp/bt.jsonl" <<'JSONL'
{"id": "f", "prompt": "x", "max_tokens": 2.0}
{"id": "n", "prompt": "x", "seed": -1}
{"id": "l", "prompt": "x", "stop": ["a", 7]}
{"id": "k", "prompt": "x", "stop": ["a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a"]}
   	
42
["a"]
JSONL
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/bt.jsonl" --output "$tmp/bt.out"
check "batch types: the job succeeds, a line of blanks is skipped as an empty one is" \
    eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/bt.out")" -eq 6 ]'
btsel() { jq -r "select(.id == \"$1\") | .error // empty" "$tmp/bt.out" 2>/dev/null; }
check "batch: an integer field given a real number says so" \
    test "$(btsel f)" = 'line 1: field "max_tokens": expected an integer, found a real number'
check "batch: a negative seed is printed" \
    test "$(btsel n)" = 'line 2: field "seed": expected a non-negative integer, found -1'
check "batch: a stop list element of the wrong type is named" \
    test "$(btsel l)" = 'line 3: field "stop"[1]: expected a non-empty string, found an integer'
check "batch: a stop list that is too long gives its length" \
    test "$(btsel k)" = 'line 4: field "stop": expected a string or a list of at most 16 strings, found a list of 17'
check "batch: a line that is a JSON number or array is named as such" \
    eval '[ "$(jq -r "select(.id == null) | .error" "$tmp/bt.out" | tr "\n" "|")" = "line 6: expected a JSON object, found an integer|line 7: expected a JSON object, found an array|" ]'
# a line past 256 MiB is an error for that line (its length would not fit the broadcast's count)
{ printf '{"id": "big", "prompt": "'; head -c $((256 << 20)) /dev/zero | tr '\0' x; printf '"}\n'
  printf '{"id": "after", "prompt": "x"}\n'; } >"$tmp/big.jsonl"
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/big.jsonl" --output "$tmp/big.out"
check "batch: a line over 256 MiB is an error for that line, and the next line runs" \
    eval '[ "$rc" -eq 0 ] && [ "$(jq -r ".error" "$tmp/big.out" | tr "\n" "|")" = "line 1: over 256 MiB; a request is one line, of at most 4194304 positions|line 2: the model has no tokenizer: give \"prompt\" as a list of token ids|" ]'
rm -f "$tmp/big.jsonl"
mkdir -p "$tmp/sub"
ln "$tmp/bf.jsonl" "$tmp/bf.hard"
ln -s "$tmp/bf.jsonl" "$tmp/bf.sym"
for o in "$tmp/bf.jsonl" "$tmp/sub/../bf.jsonl" "$tmp/bf.hard" "$tmp/bf.sym"; do
    run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/bf.jsonl" --output "$o"
    check "batch --output ${o#"$tmp"/} is the --input: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
    check "batch --output ${o#"$tmp"/} is the --input: both flags named" \
        err_has "batch: --output $o is the same file as --input $tmp/bf.jsonl"
    check "batch --output ${o#"$tmp"/} is the --input: the input is left intact" cmp -s "$tmp/bf.jsonl" "$tmp/bf.orig"
done
run "$LOCKSTEP" batch --cpu -m "$tiny" --input - --output "$tmp/bf.jsonl" <"$tmp/bf.jsonl"
check "batch --input - from the --output file: refused, the input intact" \
    eval '[ "$rc" -eq 1 ] && err_has "same file as --input - (stdin)" && cmp -s "$tmp/bf.jsonl" "$tmp/bf.orig"'
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/sub" --output "$tmp/x.jsonl"
check "batch --input a directory: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "batch --input a directory: named as such" err_has "batch: --input $tmp/sub: expected a JSONL file, a pipe or '-' (stdin), found a directory"
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input /proc/self/mem --output "$tmp/x.jsonl"
check "batch: a read error on the input (EIO) is non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "batch: the read error names the input and the reason" err_has "batch: --input /proc/self/mem: read error after line 0: Input/output error"
mkfifo "$tmp/fifo"
(timeout 60 cat "$tmp/bf.orig" >"$tmp/fifo" 2>/dev/null &)
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/fifo" --output "$tmp/fifo.out"
check "batch --input a FIFO: read like a file" eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/fifo.out")" -eq 4 ]'
run "$LOCKSTEP" batch --cpu -m "$tiny" --input <(cat "$tmp/bf.orig") --output -
check "batch --input <(process substitution): read like a file" eval '[ "$rc" -eq 0 ] && [ "$(count_in_out "line 4: the model has no tokenizer")" -eq 1 ]'
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/bf.orig" --output /dev/full
check "batch --output /dev/full: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "batch --output /dev/full: the output and the reason named" err_has "batch: --output /dev/full: cannot write the result of line 1: No space left on device"
rc=0 # not run(): it sends stdout to a file
timeout 60 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/bf.orig" --output - >/dev/full 2>"$tmp/err" || rc=$?
check "batch --output - to a full stdout: non-zero" eval '[ "$rc" -eq 1 ] && err_has "No space left on device"'

# ---- --dummy: random weights that depend on the tensor and element only, so every TP size
# computes the same model
for tp in 1 2 3; do
    run_mpi $tp "$LOCKSTEP" generate --cpu --dummy smollm2-135m --prompt-ids 1,2,3,4 -n 8 --ignore-eos --json --quiet
    jq -c .ids "$tmp/out" >"$tmp/dummy.$tp"
done
check "--dummy smollm2-135m: 8 tokens" test "$(jq length "$tmp/dummy.1" 2>/dev/null)" = 8
check "--dummy smollm2-135m: same greedy tokens at TP=1, 2, 3" \
    test "$(cat "$tmp/dummy.1")" = "$(cat "$tmp/dummy.2")" -a "$(cat "$tmp/dummy.1")" = "$(cat "$tmp/dummy.3")"
# the tensor-parallel greedy step takes its token from the ranks' slices of the logits (one small
# all-reduce); LOCKSTEP_ARGMAX_LOCAL=0 gathers the whole row first: the same tokens
for tp in 2 3; do
    LOCKSTEP_ARGMAX_LOCAL=0 run_mpi $tp -x LOCKSTEP_ARGMAX_LOCAL "$LOCKSTEP" generate --cpu --dummy smollm2-135m \
        --prompt-ids 1,2,3,4 -n 8 --ignore-eos --json --quiet
    jq -c .ids "$tmp/out" >"$tmp/dummy.gather.$tp"
done
check "--dummy smollm2-135m: the same greedy tokens with the logits gathered (LOCKSTEP_ARGMAX_LOCAL=0), TP=2, 3" \
    eval '[ -s "$tmp/dummy.gather.2" ] && [ "$(cat "$tmp/dummy.gather.2")" = "$(cat "$tmp/dummy.2")" ] &&
        [ "$(cat "$tmp/dummy.gather.3")" = "$(cat "$tmp/dummy.3")" ]'
echo '{"id": "d", "prompt": [1, 2, 3, 4], "max_tokens": 8, "ignore_eos": true}' >"$tmp/dummy.jsonl"
run_mpi 2 "$LOCKSTEP" batch --cpu --dummy smollm2-135m --input "$tmp/dummy.jsonl" --output "$tmp/dummy.out"
check "batch --dummy smollm2-135m: generate's tokens" \
    eval '[ "$rc" -eq 0 ] && [ "$(jq -c .token_ids "$tmp/dummy.out")" = "$(cat "$tmp/dummy.1")" ]'
# logit_bias in batch lines (in place of the command line's --logit-bias, which the line
# without one keeps) and its errors, line by line; --logit-bias's errors
cat >"$tmp/lb.jsonl" <<'JSONL'
{"id": "a", "prompt": [5, 6, 7, 8, 9], "max_tokens": 4, "ignore_eos": true, "logit_bias": {"7": 100}}
{"id": "c", "prompt": [5, 6, 7, 8, 9], "max_tokens": 4, "ignore_eos": true}
{"id": "d", "prompt": [5, 6, 7, 8, 9], "logit_bias": {"x": 1}}
{"id": "e", "prompt": [5, 6, 7, 8, 9], "logit_bias": {"7": "1"}}
{"id": "f", "prompt": [5, 6, 7, 8, 9], "logit_bias": {"7": 1, "07": 2}}
{"id": "g", "prompt": [5, 6, 7, 8, 9], "logit_bias": [7]}
{"id": "h", "prompt": [5, 6, 7, 8, 9], "logit_bias": {"49152": 1}}
{"id": "i", "prompt": [5, 6, 7, 8, 9], "logit_bias": {"9": -100.5}}
{"id": "j", "prompt": [5, 6, 7, 8, 9], "max_tokens": 6, "ignore_eos": true, "allowed_token_ids": [11, 12]}
{"id": "k", "prompt": [5, 6, 7, 8, 9], "allowed_token_ids": []}
{"id": "l", "prompt": [5, 6, 7, 8, 9], "allowed_token_ids": [49152]}
{"id": "m", "prompt": [5, 6, 7, 8, 9], "allowed_token_ids": [1, "a"]}
JSONL
run_mpi 2 "$LOCKSTEP" batch --cpu --dummy smollm2-135m --input "$tmp/lb.jsonl" --output "$tmp/lb.out" --logit-bias 8=100
lbsel() { jq -c "select(.id == \"$1\") | .error // .token_ids" "$tmp/lb.out" 2>/dev/null; }
check "batch logit_bias: +100 on token 7 in the line, +100 on 8 from the command line in the other" \
    eval '[ "$rc" -eq 0 ] && [ "$(lbsel a)" = "[7,7,7,7]" ] && [ "$(lbsel c)" = "[8,8,8,8]" ]'
check "batch allowed_token_ids: only those tokens (the command line's +100 on 8 is no help to it)" \
    test "$(jq -c 'select(.id == "j") | [.token_ids[] | select(. != 11 and . != 12)] | length' "$tmp/lb.out")" = 0
jq -r 'select(.error) | .error' "$tmp/lb.out" >"$tmp/lb.err"
cat >"$tmp/lb.want" <<'TXT'
line 3: field "logit_bias": key "x": expected a token id (digits)
line 4: field "logit_bias": token 7: expected a number, found a string
line 5: logit_bias: token 7 given twice
line 6: field "logit_bias": expected an object of token ids to biases, found an array
line 7: logit_bias: token id 49152 is outside the vocabulary [0, 49152)
line 8: logit_bias of token 9: expected -100..100, found -100.5
line 10: field "allowed_token_ids": expected a list of 1 to 4096 token ids, found a list of 0
line 11: allowed_token_ids: token id 49152 is outside the vocabulary [0, 49152)
line 12: field "allowed_token_ids"[1]: expected a token id (an integer >= 0), found a string
TXT
check "batch logit_bias: each bad one is its line's error" cmp -s "$tmp/lb.err" "$tmp/lb.want"
# batch "n" with a logit bias: the choices after the first start from the prompt's kept logits,
# sent back to the backend, where the bias is added as on a fresh prefill's
printf '%s\n' '{"id": "n3", "prompt": [60, 7, 300], "max_tokens": 8, "temperature": 1.2, "seed": 3, "n": 3, "logit_bias": {"57": -100, "48": 3}}' \
    '{"id": "s5", "prompt": [60, 7, 300], "max_tokens": 8, "temperature": 1.2, "seed": 5, "logit_bias": {"57": -100, "48": 3}}' >"$tmp/nb.jsonl"
run_mpi 2 "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/nb.jsonl" --output "$tmp/nb.out"
check "batch n=3 with a logit bias: choice 2 is the line drawn with its seed alone" \
    eval '[ "$rc" -eq 0 ] && [ "$(jq -c "select(.id == \"n3\") | .choices[2].token_ids" "$tmp/nb.out")" = "$(jq -c "select(.id == \"s5\") | .token_ids" "$tmp/nb.out")" ] && [ "$(jq -c "select(.id == \"s5\") | .token_ids | length" "$tmp/nb.out")" -eq 8 ]'
for a in "7|expected ID=BIAS (e.g. 1234=-100), found '7'" "7=x|--logit-bias: expected a number, found 'x'" \
    "7=101|logit_bias of token 7: expected -100..100, found 101" "49152=1|logit_bias: token id 49152 is outside the vocabulary"; do
    run_mpi 2 "$LOCKSTEP" generate --cpu --dummy smollm2-135m --prompt-ids 5 -n 1 --logit-bias "${a%%|*}"
    check "--logit-bias ${a%%|*}: non-zero, said" eval '[ "$rc" -ne 0 ] && err_has "${a#*|}"'
done
for a in "1,x|--allowed-token-ids: token 1: expected an id in 0..1073741824 (ids separated by commas), found 'x'" \
    "3,49152|allowed_token_ids: token id 49152 is outside the vocabulary"; do
    run_mpi 2 "$LOCKSTEP" generate --cpu --dummy smollm2-135m --prompt-ids 5 -n 1 --allowed-token-ids "${a%%|*}"
    check "--allowed-token-ids ${a%%|*}: non-zero, said" eval '[ "$rc" -ne 0 ] && err_has "${a#*|}"'
done
run_mpi 1 "$LOCKSTEP" generate --cpu --dummy smollm2-135m --prompt-ids 5 -n 1 --logit-bias 7=1 --logit-bias 7=2
check "--logit-bias twice for one token: said" eval '[ "$rc" -ne 0 ] && err_has "logit_bias: token 7 given twice"'

# LOCKSTEP_WARMUP=1: a first request's work at start-up (on by default on GPUs only), then
# forgotten: the same tokens, greedy and drawn with a penalty
for w in 0 1; do
    for s in "" "--temperature 0.8 --top-p 0.9 --repeat-penalty 1.2 --seed 4"; do
        # shellcheck disable=SC2086
        LOCKSTEP_WARMUP=$w run_mpi 2 -x LOCKSTEP_WARMUP "$LOCKSTEP" generate --cpu --dummy smollm2-135m \
            --prompt-ids 5,6,7,8,9 -n 12 --ignore-eos --json --quiet $s
        jq -c .ids "$tmp/out" >"$tmp/warm$w${s:+.drawn}"
        jq -e '.warmup_s' "$tmp/out" >"$tmp/warm_s$w${s:+.drawn}"
    done
done
check "LOCKSTEP_WARMUP=1: greedy tokens as without the warm-up" \
    eval '[ -s "$tmp/warm0" ] && [ "$(cat "$tmp/warm0")" = "$(cat "$tmp/warm1")" ]'
check "LOCKSTEP_WARMUP=1: drawn tokens with a penalty as without the warm-up" \
    eval '[ -s "$tmp/warm0.drawn" ] && [ "$(cat "$tmp/warm0.drawn")" = "$(cat "$tmp/warm1.drawn")" ]'
check "LOCKSTEP_WARMUP: warmup_s in the JSON, 0 when off" \
    eval '[ "$(cat "$tmp/warm_s0")" = 0 ] && jq -e ". > 0" "$tmp/warm_s1" >/dev/null'
LOCKSTEP_WARMUP=yes run_mpi 2 -x LOCKSTEP_WARMUP "$LOCKSTEP" generate --cpu --dummy smollm2-135m --prompt-ids 1
n_warm=$(count_in_err "LOCKSTEP_WARMUP: expected 0 or 1, found 'yes'")
check "LOCKSTEP_WARMUP=yes: non-zero, said on every rank" test "$rc" -ne 0 -a "$n_warm" -eq 2
# LOCKSTEP_MLP_FUSED (one rank on a GPU only): a bad value is an error on every rank; 1 on CPU
# ranks says it has no effect there, and the tokens are those without it
LOCKSTEP_MLP_FUSED=on run_mpi 2 -x LOCKSTEP_MLP_FUSED "$LOCKSTEP" generate --cpu --dummy smollm2-135m --prompt-ids 1
n_mlp=$(count_in_err "LOCKSTEP_MLP_FUSED: expected 0 or 1, found 'on'")
check "LOCKSTEP_MLP_FUSED=on: non-zero, said on every rank" test "$rc" -ne 0 -a "$n_mlp" -eq 2
LOCKSTEP_MLP_FUSED=1 run_mpi 2 -x LOCKSTEP_MLP_FUSED "$LOCKSTEP" generate --cpu --dummy smollm2-135m \
    --prompt-ids 5,6,7,8,9 -n 12 --ignore-eos --json --quiet
check "LOCKSTEP_MLP_FUSED=1 on CPU ranks: said once to have no effect, the same greedy tokens" \
    eval '[ "$rc" -eq 0 ] && [ "$(count_in_err "LOCKSTEP_MLP_FUSED=1 has no effect here")" -eq 1 ] &&
        [ "$(jq -c .ids "$tmp/out")" = "$(cat "$tmp/warm0")" ]'
run_mpi 2 "$LOCKSTEP" generate --cpu --dummy "$fx/tiny-qwen2/config.json" --prompt-ids 1,2 -n 4 --json --quiet
check "--dummy with a config.json runs" jq_ok '.generated_tokens >= 0'
run_mpi 2 "$LOCKSTEP" generate --cpu --dummy llama-9000 --prompt-ids 1
check "--dummy with an unknown preset: the presets are listed" err_has "neither a preset (llama-3.1-8b"

if [ ! -f "$model" ]; then
    skip "generate and batch on SmolLM2: model absent (launcher/fetch-model.sh fetches it)"
    done_testing
    exit 0
fi

# ---- corrupt real model files
head -c 3000000 "$model" >"$tmp/trunc.gguf"
run_mpi 2 "$LOCKSTEP" generate -m "$tmp/trunc.gguf" -p hi
check "truncated GGUF: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "truncated GGUF: the error names the file" err_has "trunc.gguf"
printf 'GGUF\x63\x00\x00\x00' | cat - <(tail -c +9 "$model" | head -c 1000000) >"$tmp/badver.gguf"
run_mpi 2 "$LOCKSTEP" generate -m "$tmp/badver.gguf" -p hi
check "GGUF with version 99: the version is named" err_has "version"
# patch_at FILE NAME SKIP BYTES: in FILE, the bytes SKIP bytes past the first NAME replaced by
# BYTES (printf escapes)
patch_at() {
    local off
    off=$(grep -obUaF "$2" "$1" | head -n 1 | cut -d: -f1)
    printf "$4" | dd of="$1" bs=1 seek=$((off + ${#2} + $3)) conv=notrunc status=none
}
# patch_value KEY BYTES OUT: a copy of the model with the 4-byte value of metadata KEY (after the
# key, its type) replaced by BYTES
patch_value() {
    cp "$model" "$3"
    patch_at "$3" "$1" 4 "$2"
}
# refused FILE WHAT CHECK MESSAGE: generate on FILE fails on every rank without a hang ("GGUF with
# WHAT: non-zero, no hang"), and stderr has MESSAGE (a grep pattern; "GGUF with WHAT: CHECK")
refused() {
    run_mpi 2 "$LOCKSTEP" generate -m "$1" -p hi
    check "GGUF with $2: non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
    check "GGUF with $2: $3" err_has "$4"
}
# a metadata float made infinite in place: the field named
key=llama.rope.freq_base
patch_value "$key" '\x00\x00\x80\x7f' "$tmp/inf.gguf"
refused "$tmp/inf.gguf" "an infinite $key" "the field is named" \
    "metadata '$key': expected a positive finite number"
# rope.dimension_count (a u32) patched to 32, half of SmolLM2's head dim of 64: a file whose
# rotary embedding turns part of each head, which the engine does not do, is refused
key=llama.rope.dimension_count
patch_value "$key" '\x20\x00\x00\x00' "$tmp/rot.gguf"
refused "$tmp/rot.gguf" "$key 32" "expected and found named" \
    "metadata '$key': expected 64 (the head dim; rotary embedding over part of a head is not supported), found 32"
# the vocabulary the metadata states must be token_embd's 49152 rows
key=llama.vocab_size
patch_value "$key" '\x01\xc0\x00\x00' "$tmp/vocab.gguf"
refused "$tmp/vocab.gguf" "$key 49153" "expected and found named" \
    "metadata '$key': expected 49152 (the rows of tensor 'token_embd.weight'), found 49153 (u32)"
# token_embd.weight given 49153 rows (its ne[1], after n_dims and ne[0]) as Q4_0 (type 2, about
# half the bytes of its Q8_0, so it stays clear of the next tensor), and $key to match: the
# tokenizer's 49152 tokens leave a row without a token
cp "$model" "$tmp/tokens.gguf"
patch_at "$tmp/tokens.gguf" token_embd.weight 12 '\x01\xc0\x00\x00'
patch_at "$tmp/tokens.gguf" token_embd.weight 20 '\x02\x00\x00\x00'
patch_at "$tmp/tokens.gguf" "$key" 4 '\x01\xc0\x00\x00'
refused "$tmp/tokens.gguf" "a token fewer than token_embd's rows" "expected and found named" \
    "metadata 'tokenizer.ggml.tokens': expected 49153 tokens (the rows of tensor 'token_embd.weight'), found 49152"
# a block fewer in the metadata than blk.N tensors in the file: the same rule as num_hidden_layers
key=llama.block_count
patch_value "$key" '\x1d\x00\x00\x00' "$tmp/blocks.gguf"
refused "$tmp/blocks.gguf" "$key 29 of 30" "the tensor and the field named" \
    "blocks.gguf: tensor 'blk.29.[a-z_]*.weight': expected a layer index below metadata '$key' (29), found 29"

# ---- prompts: invalid UTF-8, stdin
printf 'caf\xc3 au lait' >"$tmp/bad.txt"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p - -n 4 <"$tmp/bad.txt"
check "invalid UTF-8 prompt: non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "invalid UTF-8 prompt: the byte offset is named" err_has "UTF-8.*3\|offset 3"
printf 'The capital of France is' >"$tmp/p.txt"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p - -n 8 <"$tmp/p.txt"
check "prompt from stdin: generates the reference continuation" out_has "Paris"
check "timing line on stderr, printed once" test "$(count_in_err 'prompt 5 tokens')" -eq 1
check "the text is printed once (rank 0 only)" test "$(count_in_out 'Paris')" -eq 1

# ---- the greedy step that stays in the backend (only the token comes back) picks the same
# tokens as the host path that samples from the full logits
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 24 --ignore-eos --json --quiet
jq -c .ids "$tmp/out" >"$tmp/dev.ids"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 24 --ignore-eos --json --quiet --top-logits 1
check "greedy in the backend equals greedy on the host (24 tokens, TP=2)" test "$(cat "$tmp/dev.ids")" = "$(jq -c .ids "$tmp/out")"

# ---- stop strings
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "The capital of France is" -n 32 --stop "." --json --quiet
check "stop string: finish_reason stop" jq_ok '.finish_reason == "stop"'
check "stop string: the text ends before it" jq_ok '.text == " Paris"'

# ---- sampling: same seed, same text at every TP size; another seed, other text
for tp in 1 2 3; do
    run_mpi $tp "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 24 --temperature 0.9 \
        --top-p 0.95 --top-k 50 --seed 1234 --repeat-penalty 1.1 --ignore-eos --json --quiet
    jq -c .ids "$tmp/out" >"$tmp/ids.$tp"
done
check "seeded sampling: same tokens at TP=1 and TP=2" cmp -s "$tmp/ids.1" "$tmp/ids.2"
check "seeded sampling: same tokens at TP=1 and TP=3" cmp -s "$tmp/ids.1" "$tmp/ids.3"
check "seeded sampling: 24 tokens" test "$(jq length "$tmp/ids.1")" -eq 24
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 24 --temperature 0.9 \
    --top-p 0.95 --top-k 50 --seed 99 --repeat-penalty 1.1 --ignore-eos --json --quiet
check "seeded sampling: another seed gives other tokens" test "$(jq -c .ids "$tmp/out")" != "$(cat "$tmp/ids.1")"

# ---- sampling in the backend (no penalties): the token drawn there with the host's uniform
# draw equals the host sampler's, at every TP size
for tp in 1 3; do
    run_mpi $tp "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 24 --temperature 0.9 \
        --top-p 0.9 --top-k 40 --min-p 0.02 --seed 77 --ignore-eos --json --quiet
    jq -c .ids "$tmp/out" >"$tmp/bs.$tp"
done
LOCKSTEP_HOST_SAMPLING=1 run_mpi 2 -x LOCKSTEP_HOST_SAMPLING "$LOCKSTEP" generate -m "$model" -p "Once upon a time" \
    -n 24 --temperature 0.9 --top-p 0.9 --top-k 40 --min-p 0.02 --seed 77 --ignore-eos --json --quiet
jq -c .ids "$tmp/out" >"$tmp/hs.2"
check "sampling in the backend: 24 tokens" test "$(jq length "$tmp/bs.1")" -eq 24
check "sampling in the backend equals the host sampler (seed 77, TP=1 vs host TP=2)" cmp -s "$tmp/bs.1" "$tmp/hs.2"
check "sampling in the backend: same tokens at TP=1 and TP=3" cmp -s "$tmp/bs.1" "$tmp/bs.3"
check "sampling in the backend: not the greedy tokens" test "$(cat "$tmp/bs.1")" != "$(cat "$tmp/dev.ids")"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 4 --temperature 0.9 --seed 77 --json --quiet
check "generate --json: the time to the first token, after the prefill and within the run" \
    jq_ok '.ttft_s >= .prefill_s and .ttft_s <= .prefill_s + .decode_s + 1e-3 and .ttft_s > 0'
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 2
check "generate: the timing line gives the time to the first token" \
    err_has "tok/s); first token at [0-9.]* s; generated 2 tokens"

# ---- penalties in the backend: the window's counts kept there from step to step, the token
# chosen from the penalised logits (greedy or drawn) equals the host sampler's, at TP=1 and 3
# against the host path at TP=2; with a window that tokens leave, after min_tokens' host steps,
# and with log-probabilities (the model's distribution, before the penalties: equal to the host
# path's within the rounding of other TP sizes' partial sums, 1e-4)
pen_case() { # NAME ARGS...: the backend's tokens at TP=1 and 3 against the host path's at TP=2
    local name=$1
    shift
    for tp in 1 3; do
        run_mpi $tp "$LOCKSTEP" generate -m "$model" -p "Once upon a time" --ignore-eos --json --quiet "$@"
        cp "$tmp/out" "$tmp/pen.$tp"
    done
    LOCKSTEP_HOST_SAMPLING=1 run_mpi 2 -x LOCKSTEP_HOST_SAMPLING "$LOCKSTEP" generate -m "$model" \
        -p "Once upon a time" --ignore-eos --json --quiet "$@"
    cp "$tmp/out" "$tmp/pen.host"
    check "penalties in the backend, $name: tokens equal the host path's" \
        test "$(jq -c .ids "$tmp/pen.1")" = "$(jq -c .ids "$tmp/pen.host")"
    check "penalties in the backend, $name: same tokens at TP=1 and TP=3" \
        test "$(jq -c .ids "$tmp/pen.1")" = "$(jq -c .ids "$tmp/pen.3")"
}
# the largest difference between two outputs' log-probabilities (chosen and listed tokens)
lp_diff() {
    jq -s '[.[] | [.logprobs.content[] | .logprob, (.top_logprobs[] | .logprob)]] | transpose
           | map(.[0] - .[1] | fabs) | max' "$1" "$2"
}
pen_case "greedy, repeat 1.3 over all" -n 40 --repeat-penalty 1.3
jq -c .ids "$tmp/pen.1" >"$tmp/pen.rep"
run_mpi 1 "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 40 --ignore-eos --json --quiet
check "penalties in the backend: the repeat penalty changes the greedy tokens" \
    test "$(jq -c .ids "$tmp/out")" != "$(cat "$tmp/pen.rep")"
pen_case "greedy, presence 0.8 + frequency 0.5 over the last 8" -n 40 --presence-penalty 0.8 \
    --frequency-penalty 0.5 --repeat-last-n 8
pen_case "drawn (top-k 40, top-p 0.9), repeat 1.2 + frequency 0.3 over the last 16" -n 40 \
    --temperature 0.9 --top-k 40 --top-p 0.9 --seed 5 --repeat-penalty 1.2 --frequency-penalty 0.3 \
    --repeat-last-n 16
pen_case "drawn (top-p 0.95 alone), presence -0.5 (a bonus)" -n 24 --temperature 1.1 --top-p 0.95 \
    --seed 8 --presence-penalty -0.5 --repeat-last-n 4
pen_case "after 6 min_tokens host steps, with --logprobs 3" -n 24 --min-tokens 6 \
    --stop-token-id 11 --temperature 0.8 --seed 3 --repeat-penalty 1.15 --repeat-last-n 10 --logprobs 3
check "penalties in the backend: 24 log-probabilities of 4 tokens each" \
    test "$(jq '[.logprobs.content[] | .top_logprobs | length + 1] | add' "$tmp/pen.1")" -eq 96
check "penalties in the backend: the log-probabilities are the host path's (the model's, within 1e-4)" \
    test "$(jq -n "$(lp_diff "$tmp/pen.1" "$tmp/pen.host") < 1e-4")" = true

# ---- logit bias (OpenAI's logit_bias, --logit-bias ID=BIAS): added before the penalties, in
# the backend as on the host; -100 bans the greedy run's two most frequent tokens, +100 forces one
run_mpi 1 "$LOCKSTEP" generate -m "$model" -p "Once upon a time" -n 40 --ignore-eos --json --quiet
jq -c .ids "$tmp/out" >"$tmp/lb.plain"
read -r lb_a lb_b <<<"$(jq -r '.ids | group_by(.) | sort_by(-length) | map(.[0]) | "\(.[0]) \(.[1])"' "$tmp/out")"
pen_case "greedy, logit bias alone (two tokens banned)" -n 40 --logit-bias "$lb_a=-100" --logit-bias "$lb_b=-100"
check "logit bias: the banned tokens never come" \
    test "$(jq "[.ids[] | select(. == $lb_a or . == $lb_b)] | length" "$tmp/pen.1")" -eq 0
check "logit bias: the greedy tokens change" test "$(jq -c .ids "$tmp/pen.1")" != "$(cat "$tmp/lb.plain")"
pen_case "greedy, +100 on one token, with --logprobs 1" -n 8 --logit-bias 1000=100 --logprobs 1
check "logit bias: +100 makes token 1000 every token" \
    test "$(jq -c .ids "$tmp/pen.1")" = "[1000,1000,1000,1000,1000,1000,1000,1000]"
check "logit bias: the log-probabilities are the model's, before the bias (the first token 1000's < -5)" \
    test "$(jq '.logprobs.content[0].logprob < -5' "$tmp/pen.1")" = true
pen_case "drawn, logit bias with repeat 1.2 over the last 16" -n 32 --temperature 0.9 --top-p 0.9 \
    --seed 5 --logit-bias "$lb_a=-100" --logit-bias 1000=4.5 --repeat-penalty 1.2 --repeat-last-n 16
pen_case "logit bias after 6 min_tokens host steps, with --logprobs 3" -n 24 --min-tokens 6 \
    --stop-token-id 11 --temperature 0.8 --seed 3 --logit-bias "$lb_b=-30" --logprobs 3
check "logit bias: the backend's log-probabilities are the host path's (within 1e-4)" \
    test "$(jq -n "$(lp_diff "$tmp/pen.1" "$tmp/pen.host") < 1e-4")" = true
# allowed tokens (vLLM's allowed_token_ids, --allowed-token-ids): the others -inf before the
# bias and the penalties, in the backend as on the host
pen_case "greedy, four allowed tokens" -n 16 --allowed-token-ids 1000,2000,3000,28
check "allowed tokens: every token is one of them" \
    test "$(jq '[.ids[] | select(. != 1000 and . != 2000 and . != 3000 and . != 28)] | length' "$tmp/pen.1")" -eq 0
pen_case "drawn, allowed tokens with a bias and repeat 1.3" -n 24 --temperature 1.0 --seed 3 \
    --allowed-token-ids 1000,2000,3000,28,"$lb_a" --logit-bias 28=-100 --logit-bias 2000=1.5 --repeat-penalty 1.3
check "allowed tokens: drawn ones are among them and the banned one never comes" \
    test "$(jq "[.ids[] | select(. != 1000 and . != 2000 and . != 3000 and . != $lb_a)] | length" "$tmp/pen.1")" -eq 0
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "Once" -n 4 --allowed-token-ids 2 --min-tokens 2
check "allowed tokens that all end the generation, with min_tokens: non-zero, said" \
    eval '[ "$rc" -ne 0 ] && [ "$(count_in_err "allowed_token_ids: every allowed token ends the generation, which min_tokens 2 forbids at the first step")" -eq 1 ]'

# ---- batch
cat >"$tmp/in.jsonl" <<'JSONL'
{"id": "a", "prompt": "The capital of France is", "max_tokens": 8}
{"id": "b", "messages": [{"role": "user", "content": "What is the boiling point of water at sea level?"}], "max_tokens": 12}
this is not json
{"id": "d", "prompt": 42}
{"id": "e", "prompt": "x", "temperature": -2}

{"id": "g", "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0.8, "seed": 5, "stop": ["\n"]}
{"id": "h", "prompt": "caf\u00e9", "max_tokens": 2, "top_p": 0}
{"id": "i", "prompt": "hi", "stop": [1]}
JSONL
printf '{"id": "j", "prompt": "caf\xc3 x"}\n' >>"$tmp/in.jsonl"
printf '{"id": "k", "messages": [{"role": "user", "content": 5}]}\n' >>"$tmp/in.jsonl"
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/in.jsonl" --output "$tmp/res.jsonl"
check "batch with bad lines: the job succeeds" test "$rc" -eq 0
check "batch: one output line per non-empty input line" test "$(wc -l <"$tmp/res.jsonl")" -eq 10
check "batch: every output line is JSON" jq_file "$tmp/res.jsonl" true
sel() { jq -c "select(.id == \"$1\")" "$tmp/res.jsonl"; }
check "batch: prompt line generates the reference text" test "$(sel a | jq -r .text)" = " Paris.

The answer is:"
check "batch: messages line uses the chat template" test "$(sel b | jq -r .text | head -c 20)" = "The boiling point of"
check "batch: token counts and finish reason" test "$(sel a | jq -c '[.prompt_tokens, .completion_tokens, .finish_reason]')" = '[5,8,"length"]'
check "batch: a line that is not JSON gets an error object naming the line" jq_file "$tmp/res.jsonl" '.error != null and (.error | test("line 3: not JSON"))' 
check "batch: a prompt that is not a string is named" test "$(sel d | jq -r '.error // empty')" = 'line 4: field "prompt": expected a string, found an integer'
check "batch: a message content that is not a string is named" test "$(sel k | jq -r '.error // empty')" = 'line 11: field "messages"[0]: expected {"role": string, "content": string, list or null}, found "content": an integer'
check "batch: a bad temperature is named" test -n "$(sel e | jq -r '.error // empty' | grep temperature)"
check "batch: a bad top_p is named" test -n "$(sel h | jq -r '.error // empty' | grep top_p)"
check "batch: a bad stop list is named" test -n "$(sel i | jq -r '.error // empty' | grep stop)"
check "batch: invalid UTF-8 in a line is an error for that line" jq_file "$tmp/res.jsonl" '.error != null and (.error | test("line 10: not JSON: unable to decode byte 0xc3"))' 
check "batch: lines keep their order" test "$(jq -r '.id // "null"' "$tmp/res.jsonl" | tr '\n' ' ')" = "a b null d e g h i null k "
check "batch: the stop string of a line is honoured" test "$(sel g | jq -r .text | grep -c .)" -le 1
check "batch: summary on stderr" err_has "batch: 10 lines, 3 done, 7 errors"
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/nope.jsonl" --output "$tmp/x.jsonl"
check "batch: a missing input file is a clear error on every rank" test "$rc" -ne 0 -a "$rc" -ne 124
check "batch: the missing input file is named" err_has "nope.jsonl"

# ---- batch "n": n completions, the i-th drawn with seed + i; the first's fields at the top
cat >"$tmp/n.jsonl" <<'JSONL'
{"id": "n3", "prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.0, "seed": 5, "n": 3, "logprobs": true}
{"id": "s5", "prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.0, "seed": 5}
{"id": "s7", "prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.0, "seed": 7, "logprobs": true}
{"id": "n1", "prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.0, "seed": 5, "n": 1}
{"id": "n0", "prompt": "x", "n": 0}
{"id": "n65", "prompt": "x", "n": 65}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/n.jsonl" --output "$tmp/n.out"
nsel() { jq -c "select(.id == \"$1\")" "$tmp/n.out"; }
check "batch n: the job succeeds, one line each" eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$tmp/n.out")" -eq 6 ]'
check "batch n=3: three choices, indexed, each with its text, count, finish reason and logprobs" \
    eval '[ "$(nsel n3 | jq -c "[.choices[] | [.index, (.text | type), .completion_tokens, (.logprobs.content | length)]]")" = "[[0,\"string\",6,6],[1,\"string\",6,6],[2,\"string\",6,6]]" ]'
check "batch n=3: choice 0 is the line with seed 5, choice 2 the line with seed 7, and the top is choice 0" \
    eval '[ "$(nsel n3 | jq -r ".choices[0].text")" = "$(nsel s5 | jq -r .text)" ] &&
          [ "$(nsel n3 | jq -r ".choices[2].text")" = "$(nsel s7 | jq -r .text)" ] &&
          [ "$(nsel n3 | jq -r .text)" = "$(nsel s5 | jq -r .text)" ]'
# choices 1 and 2 start from choice 0's prefill (the prompt's cache kept, the engine back at
# its end): the same log-probabilities as the line that ran its own prefill
check "batch n=3: choice 2, from the shared prefill, has the log-probabilities of the line with seed 7" \
    eval '[ "$(nsel n3 | jq -c ".choices[2].logprobs")" = "$(nsel s7 | jq -c .logprobs)" ]'
check "batch n=1: no choices, the same text" \
    eval '[ "$(nsel n1 | jq "has(\"choices\")")" = false ] && [ "$(nsel n1 | jq -r .text)" = "$(nsel s5 | jq -r .text)" ]'
check "batch: n out of range is an error for its line" \
    eval '[ "$(nsel n0 | jq -r .error)" = "line 5: field \"n\": expected 1..64, found 0" ] &&
          [ "$(nsel n65 | jq -r .error)" = "line 6: field \"n\": expected 1..64, found 65" ]'
check "batch: n is read, not said to be ignored" eval '! err_has "ignored fields"'

# ---- vLLM's ignore_eos, min_tokens and stop_token_ids, OpenAI's max_completion_tokens: a greedy
# line's ids (from its log-probabilities) give the ids to stop on
cat >"$tmp/g.jsonl" <<'JSONL'
{"id": "g", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "logprobs": true}
{"id": "hi", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 48, "temperature": 0}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/g.jsonl" --output "$tmp/g.out"
g=$(jq -c 'select(.id == "g") | [.logprobs.content[].id]' "$tmp/g.out")
g3=$(jq -r '.[3]' <<<"$g")
hi=$(jq -r 'select(.id == "hi") | .completion_tokens' "$tmp/g.out")
check "the greedy line gives 8 ids, the chat line ends by EOS before 48 tokens ($hi)" \
    eval '[ "$(jq length <<<"$g")" -eq 8 ] && [ "$hi" -lt 48 ]'
cat >"$tmp/s.jsonl" <<JSONL
{"id": "st", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "logprobs": true, "stop_token_ids": [$g3]}
{"id": "mt", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "logprobs": true, "stop_token_ids": [$g3], "min_tokens": 5}
{"id": "ie", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 48, "temperature": 0, "ignore_eos": true}
{"id": "me", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 48, "temperature": 0, "min_tokens": $((hi + 3))}
{"id": "mc", "prompt": "Once upon a time", "max_completion_tokens": 3, "temperature": 0}
{"id": "both", "prompt": "x", "max_tokens": 4, "max_completion_tokens": 3}
{"id": "e1", "prompt": "x", "stop_token_ids": "2"}
{"id": "e2", "prompt": "x", "stop_token_ids": [2, -1]}
{"id": "e3", "prompt": "x", "stop_token_ids": [99999999]}
{"id": "e4", "prompt": "x", "max_tokens": 8, "min_tokens": 9}
{"id": "e5", "prompt": "x", "ignore_eos": 1}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/s.jsonl" --output "$tmp/s.out"
ssel() { jq -c "select(.id == \"$1\")" "$tmp/s.out"; }
check "stop_token_ids: the greedy line stops before its 4th token ($g3), finish stop, the 3 tokens before it" \
    eval '[ "$(ssel st | jq -c "[.completion_tokens, .finish_reason, [.logprobs.content[].id]]")" = "[3,\"stop\",$(jq -c ".[0:3]" <<<"$g")]" ]'
check "min_tokens 5: the stop id cannot be drawn before 5 tokens (another 4th token, at least 5)" \
    eval '[ "$(ssel mt | jq -c "[.logprobs.content[].id][0:3]")" = "$(jq -c ".[0:3]" <<<"$g")" ] &&
          [ "$(ssel mt | jq "[.logprobs.content[].id][0:5] | index($g3)")" = null ] &&
          [ "$(ssel mt | jq .completion_tokens)" -ge 5 ]'
check "ignore_eos: the chat line runs to max_tokens (48, length)" \
    eval '[ "$(ssel ie | jq -c "[.completion_tokens, .finish_reason]")" = "[48,\"length\"]" ]'
check "min_tokens past where EOS came ($((hi + 3))): at least that many tokens" \
    eval '[ "$(ssel me | jq .completion_tokens)" -ge $((hi + 3)) ]'
check "max_completion_tokens 3: three tokens" eval '[ "$(ssel mc | jq .completion_tokens)" -eq 3 ]'
check "max_tokens and max_completion_tokens that disagree: the line's error names both" \
    eval '[ "$(ssel both | jq -r .error)" = "line 6: fields \"max_tokens\" (4) and \"max_completion_tokens\" (3) disagree: give one" ]'
check "stop_token_ids not a list, a negative id, an id past the vocabulary: each line's error" \
    eval 'ssel e1 | jq -e ".error | contains(\"field \\\"stop_token_ids\\\": expected a list of at most 64 token ids\")" >/dev/null &&
          ssel e2 | jq -e ".error | contains(\"stop_token_ids\\\"[1]: expected a token id\")" >/dev/null &&
          ssel e3 | jq -e ".error | contains(\"stop token 0: id 99999999 is outside the vocabulary\")" >/dev/null'
check "min_tokens past max_tokens, ignore_eos not a boolean: each line's error" \
    eval '[ "$(ssel e4 | jq -r .error)" = "line 10: field \"min_tokens\": 9 is past max_tokens (8)" ] &&
          [ "$(ssel e5 | jq -r .error)" = "line 11: field \"ignore_eos\": expected true or false, found an integer" ]'
check "batch: the new fields are read, not said to be ignored" eval '! err_has "ignored fields"'

# ---- generate --stop-token-id and --min-tokens (the same parameters), on tiny-llama at TP=1
# and 2: a sampled run's ids give the id to stop on; min_tokens takes the steps before it on the
# host (the ending tokens masked), then the graph's steps: where the mask changes nothing the
# tokens are the plain run's (the host's and the step's draws are the same draws)
for tp in 1 2; do
    sargs=(--cpu -m "$tiny" --prompt-ids 60,7,300 -n 10 --json --quiet --temperature 0.9 --seed 3)
    run_mpi $tp "$LOCKSTEP" generate "${sargs[@]}"
    s=$(jq -c .ids "$tmp/out")
    s3=$(jq -r '.[3]' <<<"$s")
    run_mpi $tp "$LOCKSTEP" generate "${sargs[@]}" --stop-token-id "$s3" --stop-token-id 1
    check "TP=$tp --stop-token-id $s3: the 3 tokens before it, finish stop" \
        eval '[ "$(jq -c "[.ids, .finish_reason]" "$tmp/out")" = "[$(jq -c ".[0:3]" <<<"$s"),\"stop\"]" ]'
    run_mpi $tp "$LOCKSTEP" generate "${sargs[@]}" --stop-token-id 1 --min-tokens 6
    check "TP=$tp --min-tokens 6 with a stop id the run never draws: the plain run's 10 tokens" \
        eval '[ "$(jq -c .ids "$tmp/out")" = "$s" ]'
    run_mpi $tp "$LOCKSTEP" generate "${sargs[@]}" --stop-token-id "$s3" --min-tokens 5
    check "TP=$tp --min-tokens 5 with the stop id $s3: not drawn before 5 tokens, the first 3 as before" \
        eval '[ "$(jq -c ".ids[0:3]" "$tmp/out")" = "$(jq -c ".[0:3]" <<<"$s")" ] &&
              [ "$(jq ".ids[0:5] | index($s3)" "$tmp/out")" = null ] && [ "$(jq ".ids | length" "$tmp/out")" -ge 5 ]'
done
run "$LOCKSTEP" generate -m x --prompt-ids 1 --min-tokens -1
check "--min-tokens -1: a usage error naming the range" eval '[ "$rc" -eq 2 ] && err_has "min-tokens" && err_has "found -1"'
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 60 -n 4 --stop-token-id 512
check "--stop-token-id past the vocabulary: non-zero on every rank, the id named" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "stop token 0: id 512 is outside the vocabulary \[0, 512)"'
run_mpi 2 "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 60 -n 4 --min-tokens 5
check "--min-tokens past -n: non-zero, both named" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "min_tokens 5 is past max_tokens 4"'

# ---- batch "prompt" as a list of token ids (OpenAI's completions take it), on a model without
# a tokenizer (tiny-llama: "text" null, the ids given) and with one (the ids of a text prompt,
# fed back as a list, give the same completion); vLLM's return_token_ids
cat >"$tmp/ids.jsonl" <<'JSONL'
{"id": "n3", "prompt": [60, 7, 300], "max_tokens": 6, "temperature": 1.5, "seed": 3, "n": 3, "logprobs": 2}
{"id": "s5", "prompt": [60, 7, 300], "max_tokens": 6, "temperature": 1.5, "seed": 5, "logprobs": 2}
{"id": "text", "prompt": "hello"}
{"id": "empty", "prompt": []}
{"id": "str", "prompt": [1, "x"]}
{"id": "neg", "prompt": [1, -2]}
{"id": "big", "prompt": [1, 512]}
{"id": "tools", "prompt": [1, 2], "tools": []}
{"id": "rti", "prompt": [1, 2], "return_token_ids": 1}
JSONL
for tp in 1 2; do
    run_mpi $tp "$LOCKSTEP" batch --cpu -m "$tiny" --input "$tmp/ids.jsonl" --output "$tmp/ids.out"
    isel() { jq -c "select(.id == \"$1\")" "$tmp/ids.out"; }
    run_mpi $tp "$LOCKSTEP" generate --cpu -m "$tiny" --prompt-ids 60,7,300 -n 6 --temperature 1.5 --seed 3 --json --quiet
    check "TP=$tp batch prompt ids without a tokenizer: text null, the ids of generate --prompt-ids with the seed" \
        eval '[ "$(isel n3 | jq -c "[.text, .token_ids, .choices[0].token_ids]")" = "[null,$(jq -c .ids "$tmp/out"),$(jq -c .ids "$tmp/out")]" ]'
    check "TP=$tp batch prompt ids, n=3: choice 2 (from the shared prefill) is the line with seed 5, ids and log-probabilities" \
        eval '[ "$(isel n3 | jq -c ".choices[2] | [.token_ids, .logprobs]")" = "$(isel s5 | jq -c "[.token_ids, .logprobs]")" ] &&
              [ "$(isel s5 | jq ".token_ids | length")" -eq 6 ]'
    check "TP=$tp batch prompt ids: each bad line's error" \
        eval '[ "$(isel text | jq -r .error)" = "line 3: the model has no tokenizer: give \"prompt\" as a list of token ids" ] &&
              [ "$(isel empty | jq -r .error)" = "line 4: field \"prompt\": expected 1 to 4194304 token ids, found 0" ] &&
              [ "$(isel str | jq -r .error)" = "line 5: field \"prompt\"[1]: expected a token id (an integer >= 0), found a string" ] &&
              [ "$(isel neg | jq -r .error)" = "line 6: field \"prompt\"[1]: expected a token id (an integer >= 0), found a negative or too large one" ] &&
              [ "$(isel big | jq -r .error)" = "line 7: prompt token 1: id 512 is outside the vocabulary [0, 512)" ] &&
              [ "$(isel tools | jq -r .error)" = "line 8: field \"tools\": only for chat lines (\"messages\", or --chat)" ] &&
              [ "$(isel rti | jq -r .error)" = "line 9: field \"return_token_ids\": expected true or false, found an integer" ]'
done
cat >"$tmp/rt.jsonl" <<'JSONL'
{"id": "t", "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "return_token_ids": true}
{"id": "c", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6, "temperature": 0, "return_token_ids": true}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/rt.jsonl" --output "$tmp/rt.out"
rsel() { jq -c "select(.id == \"$1\")" "$tmp/rt.out"; }
pt=$(rsel t | jq -c .prompt_token_ids)
pc=$(rsel c | jq -c .prompt_token_ids)
check "return_token_ids: the prompt's ids (as many as prompt_tokens) and the completion's" \
    eval '[ "$(rsel t | jq ".prompt_token_ids | length")" = "$(rsel t | jq .prompt_tokens)" ] &&
          [ "$(rsel c | jq ".prompt_token_ids | length")" = "$(rsel c | jq .prompt_tokens)" ] &&
          [ "$(rsel t | jq ".token_ids | length")" -eq 6 ]'
cat >"$tmp/rt2.jsonl" <<JSONL
{"id": "t", "prompt": $pt, "max_tokens": 6, "temperature": 0, "return_token_ids": true}
{"id": "c", "prompt": $pc, "max_tokens": 6, "temperature": 0}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/rt2.jsonl" --output "$tmp/rt2.out"
check "a text prompt's and a chat line's ids fed back as lists: the same completions" \
    eval '[ "$(jq -c "select(.id == \"t\") | [.text, .token_ids]" "$tmp/rt2.out")" = "$(rsel t | jq -c "[.text, .token_ids]")" ] &&
          [ "$(jq -r "select(.id == \"c\") | .text" "$tmp/rt2.out")" = "$(rsel c | jq -r .text)" ]'
# ---- decode steps issued ahead (ls_engine_plan, LOCKSTEP_DECODE_AHEAD=1 and _DRAWN=1): the
# same lines with and without (=0), at 2 ranks: greedy to the length, stop strings and the
# model's end of turn ending lines early (a step issued ahead dropped, the next line's prefill
# after it), a line of one token, logprobs greedy and drawn (their scores posted with the
# token), drawn lines (their numbers peeked and handed on by the step before), a chat, and with
# _ADJUSTED=1 a logit
# bias, penalties greedy and drawn, a penalised line ended early by a stop string (its step
# ahead dropped with the window moved on) and the same penalised line again after it
cat >"$tmp/ah.jsonl" <<'JSONL'
{"id": "g", "prompt": "The capital of France is", "max_tokens": 24, "temperature": 0, "return_token_ids": true}
{"id": "s", "prompt": "Count: one, two, three,", "max_tokens": 40, "temperature": 0, "stop": [" five"], "return_token_ids": true}
{"id": "e", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 64, "temperature": 0, "return_token_ids": true}
{"id": "1", "prompt": "Hello", "max_tokens": 1, "temperature": 0, "return_token_ids": true}
{"id": "l", "prompt": "The sky is", "max_tokens": 8, "temperature": 0, "logprobs": true, "top_logprobs": 2, "return_token_ids": true}
{"id": "d", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.8, "seed": 7, "return_token_ids": true}
{"id": "dl", "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0.8, "seed": 4, "logprobs": true, "top_logprobs": 3, "return_token_ids": true}
{"id": "ds", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.8, "seed": 7, "stop": [" leg"], "return_token_ids": true}
{"id": "dp", "prompt": "The sky", "max_tokens": 10, "temperature": 0.7, "top_p": 0.9, "seed": 3, "return_token_ids": true}
{"id": "b", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0, "logit_bias": {"12": -100, "28": 2}, "return_token_ids": true}
{"id": "rp", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0, "repetition_penalty": 1.3, "return_token_ids": true}
{"id": "rs", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0, "repetition_penalty": 1.3, "stop": [" population"], "return_token_ids": true}
{"id": "dr", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.8, "seed": 9, "presence_penalty": 0.5, "frequency_penalty": 0.2, "return_token_ids": true}
{"id": "rp2", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0, "repetition_penalty": 1.3, "return_token_ids": true}
{"id": "g2", "prompt": "The capital of France is", "max_tokens": 24, "temperature": 0, "return_token_ids": true}
JSONL
for a in 0 1; do
    LOCKSTEP_DECODE_AHEAD=$a LOCKSTEP_DECODE_AHEAD_DRAWN=$a LOCKSTEP_DECODE_AHEAD_ADJUSTED=$a LOCKSTEP_DECODE_AHEAD_SCORED=$a \
        run_mpi 2 -x LOCKSTEP_DECODE_AHEAD -x LOCKSTEP_DECODE_AHEAD_DRAWN -x LOCKSTEP_DECODE_AHEAD_ADJUSTED -x LOCKSTEP_DECODE_AHEAD_SCORED \
        "$LOCKSTEP" batch -m "$model" \
        --input "$tmp/ah.jsonl" --output "$tmp/ah$a.out"
    cp "$tmp/err" "$tmp/ah$a.err"
    eval "rc_ah$a=\$rc"
done
ahsel() { jq -c '[.id, .text, .token_ids, .finish_reason, .logprobs]' "$tmp/ah$1.out"; }
check "steps issued ahead: both runs succeed, every line done" \
    eval '[ "$rc_ah0" -eq 0 ] && [ "$rc_ah1" -eq 0 ] && [ "$(wc -l <"$tmp/ah1.out")" -eq 15 ]'
check "steps issued ahead: the same text, token ids, finish reasons and logprobs on every line" \
    eval '[ "$(ahsel 0)" = "$(ahsel 1)" ]'
check "steps issued ahead: the stop strings and the end of turn ended lines early" \
    eval '[ "$(jq -r "select(.id == \"s\") | .finish_reason" "$tmp/ah1.out")" = stop ] &&
          [ "$(jq -r "select(.id == \"ds\") | .finish_reason" "$tmp/ah1.out")" = stop ] &&
          [ "$(jq -r "select(.id == \"rs\") | .finish_reason" "$tmp/ah1.out")" = stop ] &&
          [ "$(jq -r "select(.id == \"e\") | .finish_reason" "$tmp/ah1.out")" = stop ]'
check "steps issued ahead: taken at every greedy step but each line's last, the early ends' dropped" \
    grep -q "steps issued ahead: [1-9][0-9]* taken, [1-9][0-9]* dropped" "$tmp/ah1.err"
check "steps issued ahead: none with LOCKSTEP_DECODE_AHEAD=0" eval '! grep -q "steps issued ahead" "$tmp/ah0.err"'
# the drawn, biased, penalised and scored lines' steps taken too: d, l, dl, dp, b, rp, dr and rp2
# run to max_tokens, so 10, 6, 8, 8, 14, 14, 10 and 14 more than with only plain greedy steps ahead
LOCKSTEP_DECODE_AHEAD=1 LOCKSTEP_DECODE_AHEAD_DRAWN=0 LOCKSTEP_DECODE_AHEAD_ADJUSTED=0 LOCKSTEP_DECODE_AHEAD_SCORED=0 \
    run_mpi 2 -x LOCKSTEP_DECODE_AHEAD -x LOCKSTEP_DECODE_AHEAD_DRAWN -x LOCKSTEP_DECODE_AHEAD_ADJUSTED -x LOCKSTEP_DECODE_AHEAD_SCORED \
    "$LOCKSTEP" batch -m "$model" --input "$tmp/ah.jsonl" --output "$tmp/ahg.out"
taken_in() { sed -n 's/.*steps issued ahead: \([0-9]*\) taken.*/\1/p' "$1"; }
check "steps issued ahead: drawn, biased, penalised and scored steps taken (at least 84 more than plain greedy alone), the same lines" \
    eval '[ "$rc" -eq 0 ] && [ "$(taken_in "$tmp/ah1.err")" -ge $(($(taken_in "$tmp/err") + 84)) ] &&
          [ "$(ahsel g)" = "$(ahsel 0)" ]'
# the scored lines alone: every step but each line's last taken (l 8 tokens, dl 10: 6 + 8), the
# same tokens and logprobs as without
jq -c 'select(.id == "l" or .id == "dl")' "$tmp/ah.jsonl" >"$tmp/ahl.jsonl"
LOCKSTEP_DECODE_AHEAD=1 run_mpi 2 -x LOCKSTEP_DECODE_AHEAD "$LOCKSTEP" batch -m "$model" --input "$tmp/ahl.jsonl" --output "$tmp/ahl.out"
check "steps issued ahead: the logprobs lines' steps taken, 14 of them, the same tokens and logprobs" \
    eval '[ "$rc" -eq 0 ] && [ "$(taken_in "$tmp/err")" -eq 14 ] &&
          [ "$(jq -c "[.id, .text, .token_ids, .logprobs]" "$tmp/ahl.out")" = "$(ahsel 0 | jq -c "select(.[0] == \"l\" or .[0] == \"dl\") | [.[0], .[1], .[2], .[4]]")" ]'
# on CPU ranks none by default (a CPU step is done when issued: a step ahead only delays the token)
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/ah.jsonl" --output "$tmp/ahd.out"
check "steps issued ahead: none by default on CPU ranks, the same lines" \
    eval '[ "$rc" -eq 0 ] && ! grep -q "steps issued ahead" "$tmp/err" && [ "$(ahsel d)" = "$(ahsel 0)" ]'
done_testing
