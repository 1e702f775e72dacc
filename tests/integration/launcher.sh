#!/usr/bin/env bash
# launcher/lockstep-run end to end: the mpirun line it composes (--dry-run), the errors it
# gives before starting anything, and real runs of 2 ranks on CPUs through mpirun, whose exit
# status must come back. Env (set by `make check`): LOCKSTEP, MPIRUN, SRCDIR, BUILDDIR.
set -u

SRCDIR=${SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILDDIR=${BUILDDIR:-$SRCDIR}
LOCKSTEP=${LOCKSTEP:-$BUILDDIR/lockstep}
MPIRUN=${MPIRUN:-mpirun}
export LOCKSTEP MPIRUN
RUN=$SRCDIR/launcher/lockstep-run
BIN=$(readlink -f "$LOCKSTEP")
TWO=$SRCDIR/hostfiles/two-nodes-8gpus

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Open MPI's session directories under our own tmp (see lib.sh)
export OMPI_MCA_orte_tmpdir_base="$tmp"
n=0
failed=0
echo "1..19"

# tap STATUS DESC: one TAP line for the checks just made ($? of the last one)
tap() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        failed=1
        echo "# status $rc; stdout: $(head -c 2000 "$tmp/out")" | sed '2,$s/^/# /'
        echo "# stderr: $(head -c 2000 "$tmp/err")" | sed '2,$s/^/# /'
    fi
}

# run_it ARGS...: lockstep-run with stdout, stderr and status kept for the checks
rc=0
run_it() {
    timeout 180 "$RUN" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

has() { grep -qF -- "$1" "$tmp/out"; }
says() { grep -qF -- "$1" "$tmp/err"; }

run_it --cpu --tp 2 --dry-run -- info
[ $rc = 0 ] && has " -np 2 --map-by ppr:2:node --rank-by slot --bind-to none " &&
    has " -x NCCL_NVLS_ENABLE=0 " && [ "$(wc -l <"$tmp/out")" = 1 ]
tap $? "dry run, 2 CPU ranks on this node: -np 2, ppr:2:node, no binding, NVLS off"
has " $BIN info --cpu"
tap $? "dry run runs the resolved lockstep binary with --cpu after the subcommand"

NCCL_LAUNCHER_TEST=1 run_it --cpu --dry-run -- info
[ $rc = 0 ] && has " -x NCCL_LAUNCHER_TEST " && has " -x PATH " && ! has " -x HOME "
tap $? "dry run forwards PATH and the NCCL variables that are set, not the others"

run_it --cpu --dry-run -- info
if [ "$(id -u)" = 0 ]; then
    has " --allow-run-as-root " && has "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
else
    ! has "--allow-run-as-root"
fi
tap $? "dry run as root (only) adds --allow-run-as-root and the OMPI_ALLOW_RUN_AS_ROOT variables"

run_it --cpu --mpirun /opt/ompi5/bin/mpirun --dry-run -- info
[ $rc = 0 ] && grep -q "/opt/ompi5/bin/mpirun -np 1 " "$tmp/out"
tap $? "--mpirun picks the mpirun program"

run_it --hostfile "$TWO" --tp 16 --dry-run -- info
[ $rc = 0 ] && has "mpirun -np 16 --hostfile $TWO --map-by ppr:8:node --rank-by slot --bind-to none "
tap $? "two nodes x 8 GPUs, --tp 16: -np 16, the hostfile, ppr:8:node"

run_it --hostfile "$tmp/no-such-hostfile" --tp 2 --dry-run -- info
[ $rc = 2 ] && says "hostfile $tmp/no-such-hostfile: cannot open: No such file" && [ ! -s "$tmp/out" ]
tap $? "missing hostfile: exit 2, names the file"

printf 'node1 slots=8\nnode2 slots=eight\n' >"$tmp/bad"
run_it --hostfile "$tmp/bad" --dry-run -- info
[ $rc = 2 ] && says "hostfile $tmp/bad line 2: bad slots value" && says "found 'eight'"
tap $? "malformed hostfile: exit 2, names file, line, field and the text found"

run_it --hostfile <(printf 'localhost slots=2\n') --dry-run -- info
[ $rc = 2 ] && says ": expected a regular file, found a FIFO"
tap $? "hostfile from a pipe (mpirun would find it empty): exit 2, says why"

mkfifo "$tmp/fifo"
run_it --hostfile "$tmp/fifo" --dry-run -- info
[ $rc = 2 ] && says "hostfile $tmp/fifo: expected a regular file, found a FIFO"
tap $? "hostfile a FIFO with no writer: exit 2, no hang"

run_it --hostfile "$TWO" --tp 32 --dry-run -- info
[ $rc = 2 ] && says "--tp 32 needs 32 ranks but hostfile $TWO has 16 (2 hosts x 8 ranks per node"
tap $? "--tp larger than the slots: exit 2, names both counts"

run_it --frobnicate --dry-run -- info
[ $rc = 2 ] && says "unknown flag '--frobnicate'"
tap $? "unknown flag: exit 2, names the flag"

run_it --cpu --tp
[ $rc = 2 ] && says "flag '--tp' needs a value"
tap $? "flag without its value: exit 2, names the flag"

run_it --cpu --dry-run --
[ $rc = 2 ] && says "nothing to run"
tap $? "nothing after --: exit 2, says what is missing"

# Real runs through mpirun: 2 ranks on the CPUs of this node.
run_it --cpu --tp 2 -- info
[ $rc = 0 ] && grep -Eq "(^|[^0-9])2 ranks" "$tmp/out"
tap $? "lockstep-run --cpu --tp 2 -- info runs 2 ranks"

run_it --cpu --hostfile "$SRCDIR/hostfiles/one-node-2gpus" -- version
[ $rc = 0 ] && [ "$(grep -c "^lockstep " "$tmp/out")" = 1 ]
tap $? "a hostfile run takes every slot and prints the version on rank 0 only"

printf 'localhost slots=2\r\n' >"$tmp/crlf"
run_it --cpu --hostfile "$tmp/crlf" -- version
[ $rc = 0 ] && [ "$(grep -c "^lockstep " "$tmp/out")" = 1 ]
tap $? "a CRLF hostfile runs (passed as --host: Open MPI's hostfile parser rejects the CR)"

run_it --cpu --tp 2 -- no-such-command
[ $rc = 2 ] && says "unknown command"
tap $? "the ranks' exit status comes back through mpirun"

run_it --cpu --tp 2 --mpirun "$tmp/no-mpirun" -- info
[ $rc = 127 ] && says "cannot run" && says "--mpirun"
tap $? "an mpirun that does not exist: exit 127, says how to choose one"

exit $failed
