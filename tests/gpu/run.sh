#!/usr/bin/env bash
# One device call: build on the GPU machine, then run what needs GPUs, logging under $OUT.
#   device run: bash tests/gpu/run.sh   (carry .debs: the -dev packages the machine lacks,
#   fetched here with ../shared/device/fetch-debs.sh .debs)
# Stages (STAGES="build info ..." to pick): build, info, launcher. Each stage's log is
# $OUT/<stage>.log; a short table of results is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/lockstep-out}
mkdir -p "$OUT"
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
stages=${STAGES:-build info launcher}
declare -A result

# The machine has Open MPI's runtime but no headers, and no hwloc/CUnit/jansson/PCRE2 headers:
# unpack the carried Debian packages and point configure at them (MPI without mpicc).
setup_deps() {
    mkdir -p /opt/dep
    for f in .debs/*.deb; do dpkg -x "$f" /opt/dep; done
    export PKG_CONFIG_PATH=/opt/dep/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/opt/dep
    export LD_LIBRARY_PATH=/opt/dep/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
}

stage_build() {
    ./autogen.sh &&
        mkdir -p build-gpu && cd build-gpu &&
        ../configure -q MPI_CFLAGS=-I/opt/dep/usr/lib/x86_64-linux-gnu/openmpi/include MPI_LIBS=-lmpi &&
        make -j"$(nproc)" && make -j"$(nproc)" check TESTS=
}

ngpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }
mpi() { mpirun --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "$@"; }

stage_info() {
    local n
    n=$(ngpus)
    nvidia-smi topo -m
    mpi -np "$n" build-gpu/lockstep info &&
        mpi -np "$n" build-gpu/lockstep info --json >"$OUT/info.json" && cat "$OUT/info.json" &&
        mpi -np 1 build-gpu/lockstep info --gpu
}

stage_launcher() {
    local n
    n=$(ngpus)
    LOCKSTEP=build-gpu/lockstep launcher/lockstep-run --dry-run --tp "$n" -- info &&
        LOCKSTEP=build-gpu/lockstep launcher/lockstep-run --tp "$n" -- info
}

setup_deps
for s in $stages; do
    start=$(date +%s)
    (set -o pipefail; "stage_$s" 2>&1 | tee "$OUT/$s.log")
    rc=$?
    result[$s]="rc=$rc $(($(date +%s) - start))s"
    [ "$s" = build ] && [ $rc -ne 0 ] && break
done
echo "==== results"
for s in $stages; do printf '%-10s %s\n' "$s" "${result[$s]:-not run}"; done
