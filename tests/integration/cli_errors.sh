#!/usr/bin/env bash
# Bad command lines: a one-line error naming the problem with a usage hint and a non-zero exit,
# alone and under mpirun (every rank exits, the message is printed once), never a hang.
. "$(dirname "$0")/lib.sh"

run "$LOCKSTEP"
check "no command: exit 2 with usage" test "$rc" -eq 2
check "no command: usage lists info" err_has "info "
run "$LOCKSTEP" --help
check "--help exits 0 and lists the commands" test "$rc" -eq 0 -a "$(count_in_out '^  info')" -eq 1
run "$LOCKSTEP" version
check "version prints the version" out_has "^lockstep [0-9]"
run "$LOCKSTEP" frobnicate
check "unknown command: exit 2" test "$rc" -eq 2
check "unknown command: named in the error" err_has "unknown command 'frobnicate'"
run "$LOCKSTEP" info --frob
check "unknown flag: exit 2" test "$rc" -eq 2
check "unknown flag: named, with a usage hint" err_has "info: unknown flag '--frob'; see 'lockstep info --help'"
run "$LOCKSTEP" info -z
check "unknown short flag: named" err_has "unknown flag '-z'"
run "$LOCKSTEP" info --bind
check "missing value: named" err_has "flag '--bind' needs a value"
run "$LOCKSTEP" info --bind=sideways
check "bad value: expected and found" err_has "--bind: expected auto, gpu or none, found 'sideways'"
run "$LOCKSTEP" info extra
check "stray argument: named" err_has "unexpected argument 'extra'"
run "$LOCKSTEP" info --help
check "info --help exits 0" test "$rc" -eq 0
check "info --help documents --bind" out_has "--bind=auto|gpu|none"
run "$LOCKSTEP" selftest nosuchdrill
check "selftest: unknown drill named" err_has "unknown drill 'nosuchdrill'"

run_mpi 2 "$LOCKSTEP" info --frob
check "unknown flag on 2 ranks: mpirun exits non-zero" test "$rc" -ne 0 -a "$rc" -ne 124
check "unknown flag on 2 ranks: the message is printed once" test "$(count_in_err "unknown flag '--frob'")" -eq 1
run_mpi 3 "$LOCKSTEP" nosuch
check "unknown command on 3 ranks: non-zero, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
done_testing
