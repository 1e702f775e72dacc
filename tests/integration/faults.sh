#!/usr/bin/env bash
# A rank that fails while the others wait in a collective must end the whole job, non-zero,
# with a message naming that rank: a crash (signal), an exit without MPI_Finalize, an input
# error agreed by all ranks, a failed MPI call, a rank that hangs mid-decode (the step
# watchdog). TEST_TIMEOUT turns a hang into a failure.
. "$(dirname "$0")/lib.sh"
TEST_TIMEOUT=60

for np in 2 3; do
    victim=$((np - 1))
    run_mpi $np "$LOCKSTEP" selftest signal --rank $victim
    check "signal on rank $victim of $np: job ends non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
    check "signal on rank $victim of $np: message names the rank and signal" err_has "rank $victim@.*fatal signal 11"

    run_mpi $np "$LOCKSTEP" selftest exit --rank $victim
    check "exit without finalize on rank $victim of $np: job ends non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124

    run_mpi $np "$LOCKSTEP" selftest error --rank $victim
    check "input error on rank $victim of $np: every rank exits non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
    check "input error on rank $victim of $np: the rank names itself" err_has "rank $victim@.*drill error"
    check "input error on rank $victim of $np: rank 0 names the failed rank" err_has "rank 0@.*stopping: rank $victim reported an error"

    run_mpi $np "$LOCKSTEP" selftest check --rank $victim
    check "failed MPI call on rank $victim of $np: job ends non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
    check "failed MPI call on rank $victim of $np: rank, file:line, call and error" \
        err_has "rank $victim@.*selftest.c:[0-9]*: MPI_Send(.*): MPI_ERR_COUNT"
done
# a rank lost in the middle of a decode: the others are in (or about to enter) an all-reduce
for np in 2 3; do
    start=$(date +%s)
    LOCKSTEP_FAULT_DRILL=1:3 run_mpi $np "$LOCKSTEP" generate --cpu -m "$SRCDIR/tests/fixtures/tiny-llama" \
        --prompt-ids 1,2,3 -n 32 --ignore-eos --quiet
    took=$(($(date +%s) - start))
    check "rank 1 of $np dies mid-decode: the job ends non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
    check "rank 1 of $np dies mid-decode: every rank is gone within 10 s (took ${took}s)" test "$took" -le 10
    check "rank 1 of $np dies mid-decode: the lost rank is named" err_has "rank 1@.*fault drill"
    check "rank 1 of $np dies mid-decode: mpirun names the process that exited (rank 1)" err_has 'Process name: \[\[[0-9]*,[0-9]*\],1\]'
done
# a rank stuck mid-decode (alive, never reaching the next all-reduce): the step watchdog of the
# ranks waiting for it ends them, and with them the job
for np in 2 3; do
    start=$(date +%s)
    LOCKSTEP_STEP_TIMEOUT=3 LOCKSTEP_FAULT_DRILL=1:3:hang run_mpi $np "$LOCKSTEP" generate --cpu \
        -m "$SRCDIR/tests/fixtures/tiny-llama" --prompt-ids 1,2,3 -n 32 --ignore-eos --quiet
    took=$(($(date +%s) - start))
    check "rank 1 of $np hangs mid-decode: the job ends non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
    check "rank 1 of $np hangs mid-decode: every rank is gone within 10 s (took ${took}s)" test "$took" -le 10
    check "rank 1 of $np hangs mid-decode: the stuck rank says where" err_has "rank 1@.*fault drill: hanging before decode step 3"
    check "rank 1 of $np hangs mid-decode: a waiting rank names the step and the timeout" \
        err_has "rank [02]@.*decode step at position 6: no progress in 3\.[0-9] s (LOCKSTEP_STEP_TIMEOUT=3)"
done
# the watchdog ends stuck steps only: a whole run under a 1 s timeout finishes
LOCKSTEP_STEP_TIMEOUT=1 run_mpi 2 "$LOCKSTEP" generate --cpu -m "$SRCDIR/tests/fixtures/tiny-llama" \
    --prompt-ids 1,2,3 -n 48 --ignore-eos --quiet
check "a run under LOCKSTEP_STEP_TIMEOUT=1 finishes" test "$rc" -eq 0
# a timeout that is not a number of seconds: every rank says so before loading anything
LOCKSTEP_STEP_TIMEOUT=soon run_mpi 2 "$LOCKSTEP" generate --cpu -m "$SRCDIR/tests/fixtures/tiny-llama" \
    --prompt-ids 1,2,3 -n 4 --quiet
check "LOCKSTEP_STEP_TIMEOUT=soon: the job ends non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
check "LOCKSTEP_STEP_TIMEOUT=soon: rank 1 names the variable, expected and found" \
    err_has "rank 1@.*LOCKSTEP_STEP_TIMEOUT: expected seconds in \[0, 86400\], found 'soon'"
done_testing
