# TAP helpers for the integration tests (sourced). make check exports LOCKSTEP, MPIRUN, SRCDIR,
# BUILDDIR. Every mpirun gets a timeout so a hang fails the test instead of stalling CI.
set -u
: "${LOCKSTEP:?LOCKSTEP must name the lockstep binary}"
MPIRUN=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's shared-memory transport needs no network; keep it from probing interfaces
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
tap_n=0
tap_failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# each script's jobs keep Open MPI's session directories under its own tmp: a job that ends
# removes the shared top directory (/tmp/ompi.HOST.UID) when it looks empty, and a job of
# another script starting at that moment (make check -j) then fails in orte_init with "No such
# file or directory"
export OMPI_MCA_orte_tmpdir_base="$tmp"

ok() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $*"; }
not_ok() { tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1)); echo "not ok $tap_n - $*"; }
skip() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $* # SKIP"; }
diag() { sed 's/^/# /'; }
# check DESC CMD...: ok when CMD succeeds; on failure show the last output
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else
        not_ok "$desc"
        { echo "--- stdout"; tail -n 20 "$tmp/out" 2>/dev/null; echo "--- stderr"; tail -n 20 "$tmp/err" 2>/dev/null; } | cut -c1-400 | diag
    fi
}
# run CMD... with stdout, stderr, status in $tmp/out, $tmp/err, $rc (never fails itself)
run() {
    rc=0
    timeout "${TEST_TIMEOUT:-120}" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
}
# mpirun with NP ranks on this machine's CPUs; lockstep binds itself
run_mpi() {
    local np=$1
    shift
    run "$MPIRUN" -np "$np" --oversubscribe --bind-to none "$@"
}
num_le() { jq -en "($1) <= ($2)" >/dev/null 2>&1; }
# jq_file FILE COND: FILE parses as JSON values (e.g. JSON lines) and COND holds for at least one
jq_file() { jq -se "length > 0 and any(.[]; $2)" "$1" >/dev/null 2>&1; }
jq_ok() { jq -e "$1" "$tmp/out" >/dev/null 2>&1; }
out_has() { grep -q -- "$1" "$tmp/out"; }
err_has() { grep -q -- "$1" "$tmp/err"; }
count_in_out() { grep -c -- "$1" "$tmp/out" || true; }
count_in_err() { grep -c -- "$1" "$tmp/err" || true; }
done_testing() {
    echo "1..$tap_n"
    [ "$tap_failed" -eq 0 ]
}
# expand a cpu list "0-2,5" to "0 1 2 5"
expand_list() {
    local part a b out=""
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        if [[ $part == *-* ]]; then
            a=${part%-*} b=${part#*-}
            for ((i = a; i <= b; i++)); do out="$out $i"; done
        else out="$out $part"; fi
    done
    echo $out
}
