#!/usr/bin/env bash
# A rank that fails while the others wait in a collective must end the whole job, non-zero,
# with a message naming that rank: a crash (signal), an exit without MPI_Finalize, an input
# error agreed by all ranks, and a failed MPI call. TEST_TIMEOUT turns a hang into a failure.
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
done_testing
