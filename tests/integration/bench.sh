#!/usr/bin/env bash
# lockstep bench on CPU ranks: it runs end to end, prints the roofline and the figures on rank 0
# only, and writes JSON whose numbers are consistent (positive, a fraction of the roofline, an
# all-reduce share from the run's two decode figures). Timings here are CPU timings on a shared machine: the test checks
# the measurement, not a speed.
. "$(dirname "$0")/lib.sh"
run_mpi 2 "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --warmup 2 --bw-bytes 67108864 --json "$tmp/b.json"
check "bench on 2 CPU ranks exits 0" test "$rc" -eq 0
check "bench prints the table once" test "$(count_in_out 'read bandwidth (roofline)')" -eq 1
check "bench prints decode ms/token and % of roofline" out_has "of the read roofline"
check "bench JSON: positive bandwidth, prefill and decode figures" \
    jq_file "$tmp/b.json" '.read_gbs > 0 and .copy_gbs > 0 and .prefill_tok_s > 0 and .decode_ms_per_token > 0'
check "bench JSON: TP=2, batch 1, 8 timed steps" jq_file "$tmp/b.json" '.tp == 2 and .batch == 1 and .gen == 8'
check "bench JSON: the MLP in one kernel off (LOCKSTEP_MLP_FUSED unset)" jq_file "$tmp/b.json" '.mlp_fused == false'
check "bench JSON: per-rank weights of the SmolLM2 shape split in two (0.2..0.4 GB in fp32)" \
    jq_file "$tmp/b.json" '.weight_bytes_per_rank > 2e8 and .weight_bytes_per_rank < 4e8'
# the share is (decode - decode without collectives) / decode of the same run; both are CPU
# timings under whatever else runs (make check -j: the run without collectives once took twice
# as long), so the check is that the share is the one those two figures give, not its range
check "bench JSON: the all-reduce share is (decode - without collectives) / decode of the run" \
    jq_file "$tmp/b.json" '.decode_ms_without_collectives > 0 and
        ((.allreduce_share - (.decode_ms_per_token - .decode_ms_without_collectives) / .decode_ms_per_token) | fabs) < 1e-9'
run_mpi 2 "$LOCKSTEP" bench --cpu --allreduce-sweep --sweep-max 65536 --json "$tmp/sw.json"
check "bench --allreduce-sweep on 2 CPU ranks exits 0" test "$rc" -eq 0
check "bench --allreduce-sweep: one row per size, 1 KB to 64 KB" test "$(grep -cE '^ +[0-9]+ +[0-9.]+' "$tmp/out")" -eq 7
check "bench --allreduce-sweep JSON: MPI latencies, positive" \
    jq_file "$tmp/sw.json" '(.allreduce_sweep | length) == 7 and all(.allreduce_sweep[]; .mpi_eager_us > 0)'
for np in 4 8; do # the scaling runs' sweep, on CPU ranks (oversubscribed here)
    run_mpi $np "$LOCKSTEP" bench --cpu --allreduce-sweep --sweep-max 16384 --json "$tmp/sw$np.json"
    check "bench --allreduce-sweep on $np CPU ranks: 5 sizes, positive latencies" \
        jq_file "$tmp/sw$np.json" '(.allreduce_sweep | length) == 5 and all(.allreduce_sweep[]; .mpi_eager_us > 0)'
done
check "bench JSON: greedy unless asked" jq_file "$tmp/b.json" '.sampling.temperature == 0 and .load_s > 0'
run_mpi 2 "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --warmup 2 --bw-bytes 67108864 \
    --temperature 0.8 --top-k 40 --top-p 0.9 --json "$tmp/bs.json"
check "bench with sampling: exits 0 and says how it chose" eval '[ "$rc" -eq 0 ] && out_has "temperature 0.8, top-k 40, top-p 0.9"'
check "bench with sampling: the JSON records it" \
    jq_file "$tmp/bs.json" '.sampling.temperature > 0.79 and .sampling.temperature < 0.81 and .sampling.top_k == 40 and .decode_ms_per_token > 0'
run_mpi 2 "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --warmup 2 --bw-bytes 67108864 \
    --repeat-penalty 1.2 --frequency-penalty 0.5 --repeat-last-n 4 --json "$tmp/bp.json"
check "bench with penalties (greedy): exits 0 and says which" \
    eval '[ "$rc" -eq 0 ] && out_has "repeat 1.2, presence 0, frequency 0.5 over the last 4" && out_has "greedy"'
check "bench with penalties: the JSON records them" \
    jq_file "$tmp/bp.json" '.sampling.repetition_penalty > 1.19 and .sampling.frequency_penalty == 0.5 and .sampling.penalty_last_n == 4 and .decode_ms_per_token > 0'
run_mpi 2 "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --warmup 2 --bw-bytes 67108864 \
    --logit-bias 1000=-100 --logit-bias 2000=5 --json "$tmp/bl.json"
check "bench with a logit bias: exits 0, says it, the JSON counts its tokens" \
    eval '[ "$rc" -eq 0 ] && out_has "logit bias  *2 tokens (in the step)" && jq_file "$tmp/bl.json" ".sampling.logit_bias_tokens == 2"'
run_mpi 2 "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --warmup 2 --bw-bytes 67108864 \
    --allowed-token-ids 5,6,7 --json "$tmp/ba.json"
check "bench with allowed tokens: exits 0, says it, the JSON counts them" \
    eval '[ "$rc" -eq 0 ] && out_has "allowed tokens  *3 tokens (the rest -inf in the step)" && jq_file "$tmp/ba.json" ".sampling.allowed_tokens == 3"'
run_mpi 2 "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --logit-bias 49152=1
check "bench --logit-bias past the vocabulary: non-zero, said" \
    eval '[ "$rc" -ne 0 ] && err_has "bench: logit_bias: token id 49152 is outside the vocabulary \[0, 49152)"'
run_mpi 2 "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --kernel-times
check "bench --kernel-times on CPU ranks: non-zero, said by each rank" \
    eval '[ "$rc" -ne 0 ] && [ "$(count_in_err "kernel records need the CUDA backend, this run.s is cpu")" -eq 2 ]'
run "$LOCKSTEP" bench --cpu --allreduce-sweep --kernel-times
check "bench --kernel-times with --allreduce-sweep: a usage error" \
    eval '[ "$rc" -ne 0 ] && err_has "kernel-times times decode steps, not --allreduce-sweep"'
run "$LOCKSTEP" bench --cpu --dummy smollm2-135m --repeat-penalty 0
check "bench --repeat-penalty 0: a clear usage error naming the field" err_has "repetition_penalty: expected a value in (0, 100], found 0"
check "bench JSON: the KV cache of the run's positions by default (16 + 2 + 8 + 1)" jq_file "$tmp/b.json" '.max_context == 27'
run_mpi 2 "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --warmup 2 --bw-bytes 67108864 \
    --max-context 600 --json "$tmp/bm.json"
check "bench --max-context 600: exits 0, prints and records the cache" \
    eval '[ "$rc" -eq 0 ] && out_has "600 positions" && jq_file "$tmp/bm.json" ".max_context == 600 and .decode_ms_per_token > 0"'
run "$LOCKSTEP" bench --cpu --dummy smollm2-135m --prompt-len 16 --gen 8 --warmup 2 --max-context 20
check "bench --max-context below the run's positions: a clear usage error with both numbers" \
    eval '[ "$rc" -eq 2 ] && err_has "--max-context 20 holds fewer positions than the run needs: 27"'
run "$LOCKSTEP" bench --cpu --dummy smollm2-135m --top-p 0
check "bench --top-p 0: a clear usage error naming the field" err_has "top_p"
run "$LOCKSTEP" bench --batch 4 --dummy smollm2-135m
check "bench --batch 4: a clear usage error" err_has "--batch: expected 1..1, found 4"
# --json that cannot be written: the reason, a non-zero exit, and (when it cannot be opened) before
# the run rather than after it
tiny=$SRCDIR/tests/fixtures/tiny-llama
run_mpi 2 "$LOCKSTEP" bench --cpu -m "$tiny" --prompt-len 4 --gen 4 --json /nonexistent/x.json
check "bench --json in a missing folder: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "bench --json in a missing folder: the path and the reason named" err_has "bench: --json /nonexistent/x.json: No such file or directory"
check "bench --json in a missing folder: refused before the run (no table)" test "$(count_in_out 'read bandwidth')" -eq 0
mkdir -p "$tmp/jdir"
run_mpi 2 "$LOCKSTEP" bench --cpu -m "$tiny" --prompt-len 4 --gen 4 --json "$tmp/jdir"
check "bench --json a directory: non-zero, the reason named" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "bench: --json $tmp/jdir: Is a directory"'
run_mpi 2 "$LOCKSTEP" bench --cpu -m "$tiny" --prompt-len 4 --gen 4 --bw-bytes 1048576 --json /dev/full
check "bench --json /dev/full: the failed write is non-zero, with the reason" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "bench: --json /dev/full: cannot write the results: No space left on device"'
run_mpi 2 "$LOCKSTEP" bench --cpu --allreduce-sweep --sweep-max 4096 --json /nonexistent/sw.json
check "bench --allreduce-sweep --json in a missing folder: non-zero, before the sweep" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "bench: --json /nonexistent/sw.json: No such file or directory" && [ "$(count_in_out "all-reduce latency")" -eq 0 ]'
run_mpi 2 "$LOCKSTEP" bench --cpu --allreduce-sweep --sweep-max 4096 --json /dev/full
check "bench --allreduce-sweep --json /dev/full: non-zero, with the reason" \
    eval '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && err_has "bench: --json /dev/full: cannot write the results: No space left on device"'
run "$LOCKSTEP" bench
check "bench without a model: a clear usage error" err_has "missing --model (-m) or --dummy"
done_testing
