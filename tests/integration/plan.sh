#!/usr/bin/env bash
# `lockstep plan` end to end: the table and the JSON for the SmolLM2-135M shape (9 heads, 3 KV
# heads: an uneven split at tp 2, replicated KV heads at tp 6) and the Llama-3.1-8B shape at tp 8,
# a config.json giving the same plan as the flags, and the errors: a TP size that cannot work
# (listing those that can), a head_dim the runtime refuses, an unknown flag, a missing value, a
# missing size. Byte totals are the published parameter counts times 2 (bf16).
. "$(dirname "$0")/lib.sh"

smol=(--heads 9 --kv-heads 3 --head-dim 64 --hidden 576 --ffn 1536 --vocab 49152 --layers 30 --tied)
llama=(--heads 32 --kv-heads 8 --head-dim 128 --hidden 4096 --ffn 14336 --vocab 128256 --layers 32)
have_jq=0
command -v jq >/dev/null 2>&1 && have_jq=1
# json_check DESC FILTER: a jq -e filter over the last JSON output (skipped without jq)
json_check() {
    if [ "$have_jq" = 1 ]; then check "$1" jq_ok "$2"; else skip "$1 (jq not found)"; fi
}
out_matches() { grep -qE -- "$1" "$tmp/out"; }

for tp in 1 2 3; do
    run "$LOCKSTEP" plan "${smol[@]}" --tp "$tp"
    check "smollm2 tp $tp: table exits 0" test "$rc" -eq 0
    check "smollm2 tp $tp: one row per rank and a total" \
        test "$(grep -cE '^ *[0-9]+  \[' "$tmp/out")" -eq "$tp" -a "$(count_in_out '^total  9 ')" -eq 1
    run "$LOCKSTEP" plan "${smol[@]}" --tp "$tp" --json
    check "smollm2 tp $tp: --json exits 0" test "$rc" -eq 0
    json_check "smollm2 tp $tp: json has $tp ranks covering heads, ffn and vocab" \
        "(.ranks | length) == $tp and ([.ranks[].q_heads] | add) == 9
         and ([.ranks[].kv_heads] | add) == 3 and ([.ranks[].ffn_cols] | add) == 1536
         and ([.ranks[].vocab_rows] | add) == 49152 and .ranks[-1].vocab_first + .ranks[-1].vocab_rows == 49152"
    json_check "smollm2 tp $tp: per-rank bytes add up to the totals" \
        "([.ranks[].weight_bytes] | add) == .totals.weight_bytes
         and ([.ranks[].kv_bytes_token] | add) == .totals.kv_bytes_token and .totals.kv_bytes_token == 23040"
done
json_check "smollm2: 134,515,008 parameters in bf16" '.totals.weight_bytes_unsharded == 269030016'

run "$LOCKSTEP" plan "${smol[@]}" --tp 1
check "smollm2 tp 1: one rank holds all 269,030,016 bytes" out_has '^ *0  .*(269030016)'
run "$LOCKSTEP" plan "${smol[@]}" --tp 2
check "smollm2 tp 2: rank 0 row reads [0,6) 6 and [0,2) 2" out_matches '^ *0  \[0,6\) 6 +\[0,2\) 2 +\[0,768\) 768 +\[0,24576\) 24576'
check "smollm2 tp 2: rank 1 row reads [6,9) 3 and [2,3) 1" out_matches '^ *1  \[6,9\) 3 +\[2,3\) 1 +\[768,1536\) 768 +\[24576,49152\) 24576'
run "$LOCKSTEP" plan "${smol[@]}" --tp 2 --json
json_check "smollm2 tp 2 json: 2 groups + 1 group" \
    '.ranks[0].q_heads == 6 and .ranks[0].kv_heads == 2 and .ranks[1].q_first == 6 and .ranks[1].kv_first == 2 and .ranks[1].kv_replicas == 1'
run "$LOCKSTEP" plan "${smol[@]}" --tp 6
check "smollm2 tp 6: each kv head shown on 2 ranks" test "$(count_in_out '1 (x2)')" -eq 6
run "$LOCKSTEP" plan "${smol[@]}" --tp 3 --lm-head replicated --json
json_check "smollm2 tp 3 replicated lm head: every rank holds the whole vocab" \
    'all(.ranks[]; .vocab_first == 0 and .vocab_rows == 49152 and .vocab_replicated) and .input.lm_head == "replicated"'

run "$LOCKSTEP" plan "${llama[@]}" --tp 8
check "llama-8b tp 8: table exits 0 with 8 rank rows" \
    test "$rc" -eq 0 -a "$(grep -cE '^ *[0-9]+  \[' "$tmp/out")" -eq 8
check "llama-8b tp 8: rank 7 ranges" out_matches '^ *7  \[28,32\) 4 +\[7,8\) 1 +\[12544,14336\) 1792 +\[112256,128256\) 16000'
run "$LOCKSTEP" plan "${llama[@]}" --tp 8 --json
json_check "llama-8b tp 8 json: 4 q heads, 1 kv head, 1792 ffn columns, 16 KiB kv per token a rank" \
    'all(.ranks[]; .q_heads == 4 and .kv_heads == 1 and .ffn_cols == 1792 and .kv_bytes_token == 16384)'
json_check "llama-8b: 8,030,261,248 parameters in bf16" '.totals.weight_bytes_unsharded == 16060522496'
json_check "llama-8b tp 8 json: vocab in blocks of 64" \
    'all(.ranks[]; .vocab_first % 64 == 0) and ([.ranks[].vocab_rows] | add) == 128256'

cat >"$tmp/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
 "intermediate_size": 1536, "num_attention_heads": 9, "num_hidden_layers": 30,
 "num_key_value_heads": 3, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
 "vocab_size": 49152}
EOF
run "$LOCKSTEP" plan "${smol[@]}" --tp 3 --json
cp "$tmp/out" "$tmp/flags.json"
run "$LOCKSTEP" plan --config "$tmp/config.json" --tp 3 --json
check "--config gives the same plan as the flags" cmp -s "$tmp/out" "$tmp/flags.json"
run "$LOCKSTEP" plan --config "$tmp/config.json" --tp 3 --layers 2 --no-tied --json
json_check "flags override the config" '.input.layers == 2 and .input.tied == false'

run "$LOCKSTEP" plan --heads 14 --kv-heads 2 --head-dim 64 --hidden 896 --ffn 4864 --vocab 151936 --tp 7
check "tp 7 for 14 heads / 2 kv heads: exit 1" test "$rc" -eq 1
check "tp 7: the error lists the valid sizes" err_has "valid tp sizes: 1, 2, 4, 6, 8, 10, 12, 14"
check "tp 7: one line with a help hint, nothing on stdout" \
    test "$(wc -l <"$tmp/err")" -eq 1 -a ! -s "$tmp/out" -a "$(count_in_err "see 'lockstep plan --help'")" -eq 1
run "$LOCKSTEP" plan --heads 14 --kv-heads 4 --hidden 896 --ffn 4864 --vocab 151936 --tp 2
check "heads not a multiple of kv heads: exit 1, named" test "$rc" -eq 1 -a "$(count_in_err 'not a multiple of kv_heads 4')" -eq 1
run "$LOCKSTEP" plan --heads 9 --kv-heads 3 --head-dim 15 --hidden 576 --ffn 1536 --vocab 49152 --tp 2
check "odd head_dim: exit 1, the loader's rule with expected and found" test "$rc" -eq 1 -a \
    "$(count_in_err 'head_dim: expected an even number (RoPE rotates pairs of dimensions) up to 1024, found 15')" -eq 1
run "$LOCKSTEP" plan "${smol[@]}" --tp 2 --bogus
check "unknown flag: exit 2, named with a help hint" \
    test "$rc" -eq 2 -a "$(count_in_err "plan: unknown flag '--bogus'; see 'lockstep plan --help'")" -eq 1
run "$LOCKSTEP" plan "${smol[@]}" --tp
check "missing value: exit 2, the flag named" test "$rc" -eq 2 -a "$(count_in_err "flag '--tp' needs a value")" -eq 1
run "$LOCKSTEP" plan --kv-heads 3 --hidden 576 --ffn 1536 --vocab 49152 --tp 2
check "missing --heads: exit 2, named" test "$rc" -eq 2 -a "$(count_in_err 'missing --heads')" -eq 1
run "$LOCKSTEP" plan "${smol[@]}" --tp two
check "malformed value: expected and found" err_has "--tp: expected a positive integer, found 'two'"
run "$LOCKSTEP" plan --config "$tmp/nonexistent.json" --tp 2
check "missing config file: exit 2, the path named" test "$rc" -eq 2 -a "$(count_in_err 'nonexistent.json')" -eq 1
run "$LOCKSTEP" plan --config "$tmp" --tp 2
check "config a directory: exit 2, named as one (not as bad JSON)" \
    test "$rc" -eq 2 -a "$(count_in_err "plan: $tmp: expected a config.json file, found a directory")" -eq 1
run "$LOCKSTEP" plan --help
check "--help: exit 0, usage on stdout" test "$rc" -eq 0 -a "$(count_in_out '^usage: lockstep plan')" -eq 1

run_mpi 2 "$LOCKSTEP" plan "${smol[@]}" --tp 3
check "under mpirun with 2 ranks the table is printed once" test "$rc" -eq 0 -a "$(count_in_out '^total')" -eq 1
done_testing
