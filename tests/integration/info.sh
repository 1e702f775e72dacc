#!/usr/bin/env bash
# lockstep info on 1, 2 and 3 CPU ranks: one table from rank 0, every rank present with its own
# placement, disjoint CPU shares where the cores allow, valid JSON, a passing all-reduce check.
. "$(dirname "$0")/lib.sh"
ncores=$(nproc)

run_mpi 1 "$LOCKSTEP" info --cpu
check "info on 1 rank exits 0" test "$rc" -eq 0
check "info on 1 rank prints one rank row" test "$(grep -cE '^0 +0 +0 ' "$tmp/out")" -eq 1
check "info on 1 rank: all-reduce check ok" out_has "all-reduce check (mpi, 1 rank): ok"

for np in 2 3; do
    run_mpi $np "$LOCKSTEP" info
    check "info on $np ranks exits 0" test "$rc" -eq 0
    check "info on $np ranks: the table is printed once (rank 0 only)" test "$(count_in_out '^rank node')" -eq 1
    rows=0
    for ((r = 0; r < np; r++)); do grep -qE "^$r +0 +$r +" "$tmp/out" && rows=$((rows + 1)); done
    check "info on $np ranks: a row per rank with node 0 and local rank = rank" test "$rows" -eq $np
    check "info on $np ranks: CPU ranks say cpu" test "$(grep -c 'cpu (' "$tmp/out")" -eq $np
    check "info on $np ranks: all-reduce check ok" out_has "all-reduce check (mpi, $np ranks): ok"

    run_mpi $np "$LOCKSTEP" info --json
    check "info --json on $np ranks exits 0 and parses" jq_ok .
    check "info --json on $np ranks: size and ranks" \
        jq_ok ".size == $np and (.ranks | length) == $np and ([.ranks[].rank] == [range($np)]) and .allreduce_check.ok"
    check "info --json on $np ranks: local ranks 0..$((np - 1)), one node" \
        jq_ok "([.ranks[].local_rank] == [range($np)]) and .nodes_count == 1 and ([.ranks[].local_size] | unique == [$np])"
    # with at least one core per rank the shares must be disjoint and non-empty
    if [ "$ncores" -ge "$np" ]; then
        seen="" overlap=0 empty=0
        for set in $(jq -r '.ranks[].cpuset' "$tmp/out"); do
            cpus=$(expand_list "$set")
            [ -z "$cpus" ] && empty=1
            for c in $cpus; do case " $seen " in *" $c "*) overlap=1 ;; esac; done
            seen="$seen $cpus"
        done
        check "info --bind=auto on $np ranks: disjoint, non-empty CPU shares" test "$overlap$empty" = 00
    else
        skip "info --bind=auto on $np ranks: disjoint shares (only $ncores cores)"
    fi
done

run_mpi 2 "$LOCKSTEP" info --json --bind=none
all=$(jq -r '.ranks[0].cpuset' "$tmp/out" 2>/dev/null)
check "info --bind=none leaves each rank on all CPUs" test "$(expand_list "$all" | wc -w)" -eq "$ncores"

# no GPU here: --gpu must fail on every rank, clearly, without a hang
run_mpi 2 "$LOCKSTEP" info --gpu
check "info --gpu without GPUs exits non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
check "info --gpu without GPUs names the problem" err_has "no CUDA device is visible"
check "info --gpu without GPUs: the error names the rank" err_has "rank 0@"
done_testing
