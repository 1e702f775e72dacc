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
stages=${STAGES:-build info launcher kernels e2e bench}
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

stage_kernels() {
    build-gpu/tests/gpu/test_kernels --no-bench &&
        compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/gpu/test_kernels --quick &&
        OUT=$OUT build-gpu/tests/gpu/test_kernels --bench-only
}

# the GPU path against the CPU reference path on the same weights: bf16 weights and KV cache on
# the GPU, fp32 on the CPU, so the logits agree within a bf16 tolerance, not bitwise
TOL_BF16=${TOL_BF16:-3e-2}
ids_of() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ids"])' "$1"; }
gen_json() { # NP OUTFILE ARGS...
    local np=$1 out=$2
    shift 2
    mpi -np "$np" build-gpu/lockstep generate --json --quiet --ignore-eos "$@" >"$out"
}
stage_e2e() {
    local ok=0 v tp m ids
    for m in "--dummy smollm2-135m" "-m tests/fixtures/tiny-llama" "-m tests/fixtures/tiny-qwen2" "-m tests/fixtures/tiny-qwen3"; do
        v=$(case $m in *smollm2*) echo 49152 ;; *) echo 512 ;; esac)
        ids=$(seq -s, 11 47)
        for tp in 1 2; do
            # shellcheck disable=SC2086
            gen_json $tp "$OUT/e2e-cpu.json" --cpu $m --prompt-ids "$ids" -n 16 --top-logits "$v" --top-logit-steps 1 &&
                gen_json $tp "$OUT/e2e-gpu.json" --gpu $m --prompt-ids "$ids" -n 16 --top-logits "$v" --top-logit-steps 1 &&
                echo -n "$m TP=$tp GPU vs CPU: " &&
                python3 tests/gpu/compare_logits.py "$OUT/e2e-gpu.json" "$OUT/e2e-cpu.json" "$TOL_BF16" || ok=1
            # the graph-replayed greedy step against the eager host path, same GPU weights
            gen_json $tp "$OUT/e2e-graph.json" --gpu $m --prompt-ids "$ids" -n 16 &&
                echo "$m TP=$tp graph greedy: $(ids_of "$OUT/e2e-graph.json")" &&
                echo "$m TP=$tp eager greedy: $(ids_of "$OUT/e2e-gpu.json")" &&
                [ "$(ids_of "$OUT/e2e-graph.json")" = "$(ids_of "$OUT/e2e-gpu.json")" ] || { echo "graph != eager"; ok=1; }
        done
    done
    compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/lockstep generate --gpu --dummy smollm2-135m \
        --prompt-ids 1,2,3,4,5,6,7,8,9,10 -n 8 --quiet || ok=1
    return $ok
}

stage_bench() {
    local n
    n=$(ngpus)
    mpi -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 128 --gen 256 --json "$OUT/bench-8b-tp1.json"
    [ "$n" -ge 2 ] && mpi -np 2 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 128 --gen 256 --json "$OUT/bench-8b-tp2.json"
    true
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
