#!/usr/bin/env bash
# One device call: build on the GPU machine, then run what needs GPUs, logging under $OUT.
#   device run: bash tests/gpu/run.sh   (carry .debs: the -dev packages the machine lacks,
#   fetched here with ../shared/device/fetch-debs.sh .debs, which predates utf8proc, then
#   (cd .debs && apt-get download libutf8proc-dev libutf8proc2): the tokenizer needs both)
# Stages (STAGES="build info ..." to pick): build, info, launcher, kernels, e2e, scoring,
# scorespeed, prefill, ref8b, smollm2 (after carry1), peer, bench, graphs, pflong, longctx, ahead, attbench,
# attforms, attbulk, shapes, layers, ab, mlp, defer, memory, bench70, scaling (#6), allreduce, hang, lab, ncu,
# pfprofile, ktimes. Each stage's log is $OUT/<stage>.log; a short
# table of results is printed last, and $OUT/00-logs.tgz holds them all.
set -uo pipefail
OUT=${OUT:-/tmp/lockstep-out}
mkdir -p "$OUT"
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
stages=${STAGES:-build info launcher kernels e2e mlp allreduce hang bench peer}
declare -A result

# The machine has Open MPI's runtime but no headers, and no hwloc/CUnit/jansson/PCRE2/utf8proc
# headers: unpack the carried Debian packages and point configure at them (MPI without mpicc).
setup_deps() {
    mkdir -p /opt/dep
    for f in .debs/*.deb; do dpkg -x "$f" /opt/dep; done
    export PKG_CONFIG_PATH=/opt/dep/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=/opt/dep
    export LD_LIBRARY_PATH=/opt/dep/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
}

# BUILD_ONLY="lockstep tests/gpu/test_kernels ...": only those targets (a call short of device
# time: the check programs, the labs and the sm_80 attention object take a minute more).
# REF_SRC=dir: also build lockstep from another source tree into dir/build-ref, for `ab` settings
# named @ref (here: mkdir ref-main && git archive main | tar -x -C ref-main; ref-*/ is ignored,
# so the call carries it: carry [".debs", "ref-main"])
# configure in a build folder under a source tree, against the unpacked packages
configure_here() {
    ../configure -q MPI_CFLAGS=-I/opt/dep/usr/lib/x86_64-linux-gnu/openmpi/include MPI_LIBS=-lmpi
}
stage_build() {
    ./autogen.sh && mkdir -p build-gpu && cd build-gpu && configure_here || return 1
    if [ -n "${BUILD_ONLY:-}" ]; then
        make -j"$(nproc)" $BUILD_ONLY || return 1
    else
        make -j"$(nproc)" && make -j"$(nproc)" check TESTS= || return 1
    fi
    [ -z "${REF_SRC:-}" ] && return 0
    build_ref
}
# lockstep from REF_SRC into REF_SRC/build-ref (for `ab` settings named @ref)
build_ref() {
    (cd "$top/$REF_SRC" && ./autogen.sh && mkdir -p build-ref && cd build-ref && configure_here &&
        make -j"$(nproc)" lockstep)
}

ngpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }
# fits TP: whether this machine has TP GPUs, saying so when it has not (a loop's `|| continue`)
fits() { [ "$1" -le "$(ngpus)" ] || { echo "TP=$1 skipped: this machine has $(ngpus) GPU(s)"; return 1; }; }
# a stage that cannot run here returns 77, and the table says skipped rather than rc=0
SKIP=77
# LOCKSTEP_ATT_CLUSTER, when set, reaches every rank (a run may turn the attention's cluster
# merge off for all stages)
mpi() { mpirun --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE ${LOCKSTEP_ATT_CLUSTER:+-x LOCKSTEP_ATT_CLUSTER} "$@"; }

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
lp_of() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["logprobs"])' "$1"; }
gen_json() { # NP OUTFILE [-x VAR]... ARGS...
    local np=$1 out=$2 x=()
    shift 2
    while [ "${1:-}" = -x ]; do
        x+=(-x "$2")
        shift 2
    done
    mpi "${x[@]}" -np "$np" build-gpu/lockstep generate --json --quiet --ignore-eos "$@" >"$out"
}
# one model at one TP size: GPU logits against the CPU path's, and the graph-replayed greedy
# tokens against the eager host path's on the same GPU weights
e2e_one() { # TP VOCAB MODEL-ARGS...
    local tp=$1 v=$2
    shift 2
    gen_json $tp "$OUT/e2e-cpu.json" --cpu "$@" --prompt-ids "$(seq -s, 11 47)" -n 16 --top-logits "$v" --top-logit-steps 1 &&
        gen_json $tp "$OUT/e2e-gpu.json" --gpu "$@" --prompt-ids "$(seq -s, 11 47)" -n 16 --top-logits "$v" --top-logit-steps 1 &&
        echo -n "$* TP=$tp GPU vs CPU: " &&
        python3 tests/gpu/compare_logits.py "$OUT/e2e-gpu.json" "$OUT/e2e-cpu.json" "$TOL_BF16" || return 1
    LOCKSTEP_DECODE_AHEAD=0 gen_json $tp "$OUT/e2e-graph.json" -x LOCKSTEP_DECODE_AHEAD --gpu "$@" \
        --prompt-ids "$(seq -s, 11 47)" -n 16 &&
        echo "$* TP=$tp graph greedy: $(ids_of "$OUT/e2e-graph.json")" &&
        echo "$* TP=$tp eager greedy: $(ids_of "$OUT/e2e-gpu.json")" &&
        [ "$(ids_of "$OUT/e2e-graph.json")" = "$(ids_of "$OUT/e2e-gpu.json")" ] || { echo "graph != eager"; return 1; }
    ahead_same $tp "$OUT/e2e-graph.json" 16 "$@"
}
# each greedy step issuing the next before reading its token (ls_engine_plan; the default on GPUs):
# the same N tokens of the e2e prompt as REF (a graph greedy run's JSON with LOCKSTEP_DECODE_AHEAD=0)
ahead_same() { # TP REF N MODEL-ARGS...
    local tp=$1 ref=$2 n=$3
    shift 3
    LOCKSTEP_DECODE_AHEAD=1 gen_json $tp "$OUT/ahead.json" -x LOCKSTEP_DECODE_AHEAD --gpu "$@" \
        --prompt-ids "$(seq -s, 11 47)" -n "$n" || return 1
    same_ids "$* TP=$tp: $n greedy tokens" "$ref" "$OUT/ahead.json"
}
# WHAT the same in runs A and B (their JSON's ids), said either way
same_ids() { # WHAT A B
    if [ "$(ids_of "$2")" = "$(ids_of "$3")" ]; then
        echo "$1 the same with those steps issued ahead"
        return 0
    fi
    echo "$1 DIFFERENT with those steps issued ahead: $(ids_of "$2") / $(ids_of "$3")"
    return 1
}
stage_e2e() {
    local ok=0 v tp m f
    for m in "--dummy smollm2-135m" "-m tests/fixtures/tiny-llama" "-m tests/fixtures/tiny-qwen2" "-m tests/fixtures/tiny-qwen3"; do
        v=$(case $m in *smollm2*) echo 49152 ;; *) echo 512 ;; esac)
        for tp in 1 2; do
            fits $tp || continue
            # shellcheck disable=SC2086
            e2e_one $tp "$v" $m || ok=1
        done
    done
    # TP=4 and 8 where the machine has the GPUs, on the models whose shard plan allows them
    # (SmolLM2's 3 KV heads do not; tiny-qwen2's 2 KV heads are replicated)
    for tp in 4 8; do
        [ $tp -gt "$(ngpus)" ] && continue
        for m in "-m tests/fixtures/tiny-llama" "-m tests/fixtures/tiny-qwen2" "-m tests/fixtures/tiny-qwen3"; do
            # shellcheck disable=SC2086
            e2e_one $tp 512 $m || ok=1
        done
        e2e_one $tp 2048 --dummy tests/fixtures/llama-tp8.json || ok=1
    done
    # sampling in the graph (ls_sample with the host's uniform draw) against the host sampler on
    # the same GPU logits: the same tokens (the kernel's integer probabilities could split a
    # draw that lands within ~1e-7 of a boundary differently; not expected in 16 steps)
    for m in tests/fixtures/tiny-llama tests/fixtures/tiny-qwen2; do
        for tp in 1 2 4 8; do
            [ $tp -gt "$(ngpus)" ] && continue
            gen_json $tp "$OUT/e2e-dev.json" --gpu -m $m --prompt-ids "$(seq -s, 11 47)" -n 16 --temperature 0.8 \
                --top-p 0.95 --top-k 100 --min-p 0.01 --seed 5 &&
                LOCKSTEP_HOST_SAMPLING=1 gen_json $tp "$OUT/e2e-host.json" -x LOCKSTEP_HOST_SAMPLING --gpu -m $m \
                    --prompt-ids "$(seq -s, 11 47)" -n 16 --temperature 0.8 --top-p 0.95 --top-k 100 --min-p 0.01 --seed 5 &&
                echo "$m TP=$tp sampled in the graph: $(ids_of "$OUT/e2e-dev.json")" &&
                echo "$m TP=$tp sampled on the host:  $(ids_of "$OUT/e2e-host.json")" &&
                [ "$(ids_of "$OUT/e2e-dev.json")" = "$(ids_of "$OUT/e2e-host.json")" ] || { echo "device sampling != host sampling"; ok=1; }
        done
    done
    # draws without top-k over a 49152 vocabulary (the grid selects and reductions: the random
    # model's logits are nearly flat, so the kept set is a large share of it), in the graph
    # against the host: top-p alone at two temperatures, top-p with min-p, min-p alone, and
    # temperature alone
    for tp in 1 2; do
        [ $tp -gt "$(ngpus)" ] && continue
        for f in "0.6 --top-p 0.9" "1.5 --top-p 0.9" "0.8 --top-p 0.95 --min-p 0.05" "1.0 --min-p 0.1" "1.0"; do
            # shellcheck disable=SC2086
            graph_vs_host $tp -n 16 --seed 5 --temperature $f || ok=1
        done
    done
    # penalties in the graph (the window's counts kept on the device from step to step) against
    # the host path: greedy and drawn, over the whole history and a window that tokens leave,
    # and after min_tokens' steps (chosen in the backend from masked logits)
    for tp in 1 2; do
        [ $tp -gt "$(ngpus)" ] && continue
        for f in "0 --repeat-penalty 1.3" "0 --presence-penalty 0.8 --frequency-penalty 0.5 --repeat-last-n 8" \
            "0.8 --top-p 0.9 --repeat-penalty 1.2 --frequency-penalty 0.3 --repeat-last-n 16" \
            "0.9 --top-k 40 --presence-penalty -0.5 --repeat-last-n 4" \
            "0.7 --top-p 0.95 --repeat-penalty 1.1 --min-tokens 6 --stop-token-id 1" \
            "0 --logit-bias 500=8 --logit-bias 600=-2" \
            "0.8 --top-p 0.9 --logit-bias 17766=-100 --logit-bias 500=3 --repeat-penalty 1.2 --repeat-last-n 8" \
            "0 --allowed-token-ids 100,200,300,400 --logit-bias 200=1" \
            "0.9 --top-p 0.95 --allowed-token-ids 100,200,300,400,500 --repeat-penalty 1.2"; do
            # shellcheck disable=SC2086
            graph_vs_host $tp -n 24 --seed 5 --temperature $f || ok=1
        done
    done
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 build-gpu/lockstep generate --gpu --dummy smollm2-135m \
        --prompt-ids 1,2,3,4,5,6,7,8,9,10 -n 8 --quiet --temperature 1.0 --top-p 0.9 || ok=1
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 build-gpu/lockstep generate --gpu --dummy smollm2-135m \
        --prompt-ids 1,2,3,4,5,6,7,8,9,10 -n 8 --quiet --repeat-penalty 1.2 --repeat-last-n 4 || ok=1
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 build-gpu/lockstep generate --gpu --dummy smollm2-135m \
        --prompt-ids 1,2,3,4,5,6,7,8,9,10 -n 8 --quiet || ok=1
    e2e_paths || ok=1
    e2e_graph_update || ok=1
    return $ok
}
# batch lines that change the sampling from line to line: the decode graph is captured again
# at each change, into the graph in place where the launches are the same with other values
# (LOCKSTEP_GRAPH_UPDATE=0: a new graph each time; a new logit bias changes no launch, only the
# backend's bias vector). The tokens equal the host path's either way, and the last line, which
# repeats line 2's request, gives line 2's tokens. The tiny Llama's logits are far from flat (the
# random SmolLM2 shape's are: two tokens 1e-6 apart in log-probability can draw differently on
# the host and in the backend, whose probabilities round differently).
e2e_graph_update() {
    local ok=0 tp v l p
    p='"prompt": [11, 12, 13, 14, 15, 16, 17, 18], "max_tokens": 12, "ignore_eos": true'
    : >"$OUT/gu.jsonl"
    for l in '"temperature": 0' '"temperature": 0.8, "top_p": 0.9, "seed": 1' \
        '"temperature": 0.7, "top_p": 0.95, "seed": 2' '"temperature": 1.0, "top_k": 40, "seed": 3' \
        '"temperature": 0.9, "top_k": 20, "seed": 4' '"temperature": 0.8, "min_p": 0.05, "seed": 5' \
        '"temperature": 0.8, "top_p": 0.9, "repetition_penalty": 1.2, "seed": 6' \
        '"temperature": 0.8, "top_p": 0.9, "repetition_penalty": 1.1, "presence_penalty": 0.5, "seed": 7' \
        '"temperature": 0.9, "top_p": 0.9, "logprobs": 2, "seed": 8' '"temperature": 0' \
        '"temperature": 0.8, "top_p": 0.9, "logit_bias": {"300": 8, "455": -100}, "seed": 9' \
        '"temperature": 0.8, "top_p": 0.9, "logit_bias": {"58": -100, "411": 4}, "seed": 9' \
        '"temperature": 0.8, "top_p": 0.9, "allowed_token_ids": [58, 455, 411, 300], "seed": 9' \
        '"temperature": 0.8, "top_p": 0.9, "seed": 1'; do
        echo "{\"id\": $(wc -l <"$OUT/gu.jsonl"), $p, $l}" >>"$OUT/gu.jsonl"
    done
    for tp in 1 2; do
        fits $tp || continue
        for v in "LOCKSTEP_GRAPH_UPDATE=1" "LOCKSTEP_GRAPH_UPDATE=0" "LOCKSTEP_HOST_SAMPLING=1"; do
            env "$v" mpirun --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x "${v%=*}" -np $tp \
                build-gpu/lockstep batch --gpu -m tests/fixtures/tiny-llama --input "$OUT/gu.jsonl" \
                --output "$OUT/gu-$tp-${v%=*}${v#*=}.out" 2>"$OUT/gu-$tp-${v%=*}${v#*=}.err" || { ok=1; continue; }
            echo "TP=$tp $v: $(tail -1 "$OUT/gu-$tp-${v%=*}${v#*=}.err")"
        done
        grep -Eq "decode graphs: [0-9]+ built, [1-9][0-9]* updated in place" "$OUT/gu-$tp-LOCKSTEP_GRAPH_UPDATE1.err" &&
            grep -q " 0 updated in place" "$OUT/gu-$tp-LOCKSTEP_GRAPH_UPDATE0.err" ||
            { echo "TP=$tp: expected updates in place by default and none with LOCKSTEP_GRAPH_UPDATE=0"; ok=1; }
        python3 - "$OUT" "$tp" <<'PY' || ok=1
import json, sys
o, tp = sys.argv[1], sys.argv[2]
runs = {k: [json.loads(x)["token_ids"] for x in open("%s/gu-%s-%s.out" % (o, tp, k))]
        for k in ("LOCKSTEP_GRAPH_UPDATE1", "LOCKSTEP_GRAPH_UPDATE0", "LOCKSTEP_HOST_SAMPLING1")}
a, b, h = runs.values()
bad = [i for i in range(len(h)) if not (a[i] == b[i] == h[i])]
print("TP=%s: %d lines; updated in place == new graphs == host path: %s; the last == line 1: %s; "
      "the two logit biases' lines (one graph, the bias vector sent again) differ: %s; "
      "the allowed tokens' line: %s" % (tp, len(h), "yes" if not bad else "no, lines %s" % bad,
                                        a[-1] == a[1], a[10] != a[11], a[12]))
sys.exit(1 if bad or a[-1] != a[1] or a[10] == a[11] or len(h) != 14
         or any(t not in (58, 455, 411, 300) for t in a[12]) else 0)
PY
    done
    return $ok
}
# the tokens chosen in the backend (the graph's steps, the first token) against the host path's
# (LOCKSTEP_HOST_SAMPLING=1: the logits on the host every step), on the random SmolLM2 shape
graph_vs_host() { # TP GENERATE-ARGS...
    local tp=$1 a
    shift
    a=(--gpu --dummy smollm2-135m --prompt-ids "$(seq -s, 11 47)" "$@")
    gen_json "$tp" "$OUT/e2e-dev.json" "${a[@]}" &&
        LOCKSTEP_HOST_SAMPLING=1 gen_json "$tp" "$OUT/e2e-host.json" -x LOCKSTEP_HOST_SAMPLING "${a[@]}" &&
        echo "smollm2-135m TP=$tp $* in the graph: $(ids_of "$OUT/e2e-dev.json")" &&
        echo "smollm2-135m TP=$tp $* on the host:  $(ids_of "$OUT/e2e-host.json")" &&
        [ "$(ids_of "$OUT/e2e-dev.json")" = "$(ids_of "$OUT/e2e-host.json")" ] || { echo "the backend's tokens != the host path's"; return 1; }
}
# the engine paths that leave and rejoin the decode graph, on GPUs: min_tokens' first steps on
# the host (the ending tokens masked) then the graph's (where the mask changes nothing, the
# plain run's tokens: the host's and the graph's draws line up), and batch "n" (choices after
# the first rewind to the prompt's end and start from its kept logits: choice 2 equals the line
# drawn with its seed alone, ids and log-probabilities)
e2e_paths() {
    local ok=0 tp m=tests/fixtures/tiny-llama a
    a=(--gpu -m "$m" --prompt-ids 60,7,300 -n 10 --temperature 0.9 --seed 3)
    printf '%s\n' '{"id": "n3", "prompt": [60, 7, 300], "max_tokens": 6, "temperature": 1.5, "seed": 3, "n": 3, "logprobs": 2}' \
        '{"id": "s5", "prompt": [60, 7, 300], "max_tokens": 6, "temperature": 1.5, "seed": 5, "logprobs": 2}' >"$OUT/paths.jsonl"
    for tp in 1 2; do
        fits $tp || continue
        gen_json $tp "$OUT/paths-plain.json" "${a[@]}" &&
            gen_json $tp "$OUT/paths-min.json" "${a[@]}" --stop-token-id 1 --min-tokens 6 &&
            echo "TP=$tp sampled: $(ids_of "$OUT/paths-plain.json"); with min_tokens 6: $(ids_of "$OUT/paths-min.json")" &&
            [ "$(ids_of "$OUT/paths-plain.json")" = "$(ids_of "$OUT/paths-min.json")" ] || { echo "TP=$tp min_tokens' host steps then graph steps != the graph's"; ok=1; }
        mpi -np $tp build-gpu/lockstep batch --gpu -m $m --input "$OUT/paths.jsonl" --output "$OUT/paths.out" &&
            python3 - "$OUT/paths.out" "$tp" <<'PY' || ok=1
import json, sys
r = {x["id"]: x for x in map(json.loads, open(sys.argv[1]))}
c2, s5 = r["n3"]["choices"][2], r["s5"]
print(f"TP={sys.argv[2]} batch n=3 choice 2: {c2['token_ids']}; the line with seed 5: {s5['token_ids']}")
sys.exit(0 if (c2["token_ids"], c2["logprobs"]) == (s5["token_ids"], s5["logprobs"]) else 1)
PY
    done
    return $ok
}

# scoring on GPUs against the CPU path (bf16 weights against fp32, so within the e2e
# tolerance): perplexity's nll over 110 tokens in windows of 64 and the prompt's log-probabilities
# (ls_engine_score: the LM head over a chunk's positions, each row's scores in the backend), and
# the first generated token's log-probabilities (its logits on the host), at TP=1 and 2
stage_scoring() {
    local ok=0 tp m ids
    ids=$(seq -s, 11 120)
    for m in tests/fixtures/tiny-llama tests/fixtures/tiny-qwen2 tests/fixtures/tiny-qwen3; do
        for tp in 1 2; do
            fits $tp || continue
            mpi -np $tp build-gpu/lockstep perplexity --cpu -m $m --prompt-ids "$ids" --ctx 64 --json >"$OUT/ppl-cpu.json" &&
                mpi -np $tp build-gpu/lockstep perplexity --gpu -m $m --prompt-ids "$ids" --ctx 64 --json >"$OUT/ppl-gpu.json" &&
                gen_json $tp "$OUT/lp-cpu.json" --cpu -m $m --prompt-ids "$ids" -n 1 --logprobs 5 --prompt-logprobs 0 &&
                gen_json $tp "$OUT/lp-gpu.json" --gpu -m $m --prompt-ids "$ids" -n 1 --logprobs 5 --prompt-logprobs 0 &&
                python3 - "$OUT"/ppl-cpu.json "$OUT"/ppl-gpu.json "$OUT"/lp-cpu.json "$OUT"/lp-gpu.json "$m TP=$tp" <<'PY' || ok=1
import json, math, sys
pc, pg, lc, lg = (json.load(open(f)) for f in sys.argv[1:5])
# The perplexity's nll is a mean of log-sum-exp minus the target's logit over 109 tokens: an
# offset or a wrong target shows at once (measured <= 1e-4 relative; tol 1e-3). The prompt's
# log-probabilities, relative to the vector (these random models' reach -60; measured <= 5e-3,
# tol 1e-2). The first generated token's top 5 (the host path): the same ids, each within 3e-2
# of the scale of the model's log-probabilities (the bf16 logits' tolerance; relative to each
# value, those near 0 would ask for more than bf16 logits give).
def relnorm(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(x * x for x in a))
rel = abs(pg["nll"] - pc["nll"]) / pc["nll"]
a = [e["logprob"] for e in lc["prompt_logprobs"][1:]]
b = [e["logprob"] for e in lg["prompt_logprobs"][1:]]
worst = relnorm(a, b)
scale = math.sqrt(sum(x * x for x in a) / len(a))
tc = {t["id"]: t["logprob"] for t in lc["logprobs"]["content"][0]["top_logprobs"]}
tg = {t["id"]: t["logprob"] for t in lg["logprobs"]["content"][0]["top_logprobs"]}
common = [k for k in tc if k in tg]
top = max(abs(tc[k] - tg[k]) for k in common) / scale if common else 1.0
ok = rel <= 1e-3 and worst <= 1e-2 and len(common) >= 4 and top <= 3e-2
print("%s: perplexity nll GPU %.6f CPU %.6f (rel %.2e, tol 1e-3); prompt log-probabilities rel %.2e (tol "
      "1e-2); the first token's top 5: %d ids in both, within %.2e of the scale %.1f (tol 3e-2)%s"
      % (sys.argv[5], pg["nll"], pc["nll"], rel, worst, len(common), top, scale, "" if ok else " FAILED"))
sys.exit(0 if ok else 1)
PY
            # the decode step's log-probabilities (reduced in the graph) against the host path's
            # (every step's logits on the host) of the same greedy run
            gen_json $tp "$OUT/lpd-dev.json" --gpu -m $m --prompt-ids "$ids" -n 16 --logprobs 5 &&
                gen_json $tp "$OUT/lpd-host.json" -x LOCKSTEP_HOST_SAMPLING=1 --gpu -m $m --prompt-ids "$ids" -n 16 --logprobs 5 &&
                python3 - "$OUT"/lpd-dev.json "$OUT"/lpd-host.json "$m TP=$tp" <<'PY' || ok=1
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
ca, cb = a["logprobs"]["content"], b["logprobs"]["content"]
same = a["ids"] == b["ids"] and [[t["id"] for t in x["top_logprobs"]] for x in ca] == \
    [[t["id"] for t in x["top_logprobs"]] for x in cb]
worst = max(max([abs(x["logprob"] - y["logprob"])] + [abs(s["logprob"] - t["logprob"])
                for s, t in zip(x["top_logprobs"], y["top_logprobs"])]) for x, y in zip(ca, cb))
ok = same and worst <= 1e-4
print("%s: 16 steps' log-probabilities in the graph vs on the host: tokens and top-5 ids %s, values "
      "within %.2e (tol 1e-4)%s" % (sys.argv[3], "equal" if same else "DIFFER", worst, "" if ok else " FAILED"))
sys.exit(0 if ok else 1)
PY
        done
    done
    return $ok
}

# scoring's speed on the 8B shape: perplexity (windows of 512 and 128) and a prompt's
# log-probabilities with 5 alternatives, at each TP size that fits; tok/s as the commands print
stage_scorespeed() {
    local tp ids c mode ok=0 x a
    ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range(4096)))")
    for tp in 1 2; do
        fits $tp || continue
        for c in 512 128; do
            echo -n "8B TP=$tp perplexity --ctx $c: "
            mpi -np $tp build-gpu/lockstep perplexity --gpu --dummy llama-3.1-8b --prompt-ids "$ids" --ctx $c \
                2>&1 >/dev/null | grep 'tok/s' || ok=1
        done
        echo -n "8B TP=$tp generate --prompt-logprobs 5, 2048-token prompt: "
        mpi -np $tp build-gpu/lockstep generate --gpu --dummy llama-3.1-8b --prompt-ids "$(echo "$ids" | cut -d, -f1-2048)" \
            --prompt-logprobs 5 --json -n 1 --ignore-eos >"$OUT/plp-8b.json" 2>"$OUT/plp-8b.err" &&
            python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(len(d['prompt_logprobs']), 'positions scored in', d['prefill_s'], 's')" "$OUT/plp-8b.json" || ok=1
        cat "$OUT/plp-8b.err"
        # decode with log-probabilities: in the graph (default), on the host path (as before)
        for mode in none graph host; do
            case $mode in
            none) x=() a=() ;;
            graph) x=() a=(--logprobs 5) ;;
            host) x=(-x LOCKSTEP_HOST_SAMPLING=1) a=(--logprobs 5) ;;
            esac
            echo -n "8B TP=$tp decode, log-probabilities $mode: "
            gen_json $tp "$OUT/lp8.json" "${x[@]}" --gpu --dummy llama-3.1-8b \
                --prompt-ids "$(echo "$ids" | cut -d, -f1-128)" -n 256 "${a[@]}" &&
                python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token' % (1e3 * d['decode_s'] / max(1, len(d['ids']) - 1)))" "$OUT/lp8.json" || ok=1
        done
    done
    return $ok
}

# the prefill path at head dim 128 (cuBLASLt GEMMs, the prefill attention kernel) against the
# CPU on a small random Llama, and the same prefill through the decode kernels
stage_prefill() {
    local ok=0 tp mode ids
    ids=$(seq -s, 100 227)
    for tp in 1 2; do
        fits $tp || continue
        gen_json $tp "$OUT/pf-cpu.json" --cpu --dummy tests/gpu/llama-hd128.json --prompt-ids "$ids" -n 4 --top-logits 4096 --top-logit-steps 1 || ok=1
        # wgmma: the prefill attention's wgmma kernel forced (the default takes it only where its
        # grid fills half the SMs, not at this 128-token prompt; without it, the default form)
        for mode in default gemv-chunks decode-attention wgmma; do
            case $mode in
            default) env=LOCKSTEP_PDL=1 ;;
            gemv-chunks) env="LOCKSTEP_PREFILL_CHUNK=8" ;;
            decode-attention) env="LOCKSTEP_ATTN_PREFILL=0" ;;
            wgmma) env="LOCKSTEP_ATT_PREFILL_TC=7" ;;
            esac
            # shellcheck disable=SC2086
            (export ${env?}; gen_json $tp "$OUT/pf-gpu.json" --gpu --dummy tests/gpu/llama-hd128.json --prompt-ids "$ids" -n 4 --top-logits 4096 --top-logit-steps 1) &&
                echo -n "hd128 prefill TP=$tp $mode GPU vs CPU: " &&
                python3 tests/gpu/compare_logits.py "$OUT/pf-gpu.json" "$OUT/pf-cpu.json" 3e-2 || ok=1
        done
    done
    return $ok
}

# lockstep against transformers (fp32) on a saved random 8B model at several prompt lengths
stage_ref8b() {
    local len ids
    PYTHONUNBUFFERED=1 python3 tests/gpu/hf_peer.py --save /tmp/llama8b --ref-only --ref-lens ${REF_LENS:-1,4,16} || return 1
    # the CPU path (fp32 everywhere) on the same files, for the 128-token prompt
    ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('/tmp/llama8b/reference.json'))['ids'])))")
    OMP_NUM_THREADS=32 mpirun --bind-to none -np 1 build-gpu/lockstep generate --cpu -m /tmp/llama8b --prompt-ids "$ids" \
        -n 1 --json --quiet --top-logits 128256 --top-logit-steps 1 --max-context 512 >"$OUT/l8-cpu-128.json" &&
        echo -n "CPU path, prompt 128: " && python3 tests/gpu/compare_ref.py "$OUT/l8-cpu-128.json" /tmp/llama8b/reference.json 5e-2
    for len in 1 4 16 128; do
        f=/tmp/llama8b/reference-$len.json
        [ $len = 128 ] && f=/tmp/llama8b/reference.json
        ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$f'))['ids'])))")
        mpi -np 1 build-gpu/lockstep generate --gpu -m /tmp/llama8b --prompt-ids "$ids" -n 1 --json --quiet \
            --top-logits 128256 --top-logit-steps 1 --max-context 512 >"$OUT/l8-$len.json" &&
            echo -n "prompt $len: " && python3 tests/gpu/compare_ref.py "$OUT/l8-$len.json" "$f" 5e-2
    done
    true
}

# SmolLM2 (the real Q4_1 GGUF, carried in two parts: tests/gpu/carry-model.sh) against the
# transformers reference of tests/fixtures/smollm2, at TP=1 and 2 on GPUs
stage_smollm2() {
    local m=/tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ok=0 tp p n args
    [ -d .carry2 ] && cp .carry2/* /tmp/smollm2/ 2>/dev/null
    [ -f "$m" ] || cat /tmp/smollm2/smollm2.part00 /tmp/smollm2/smollm2.part01 >"$m" || return 1
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $m" | sha256sum -c || return 1
    n=$(python3 -c 'import json; print(len(json.load(open("tests/fixtures/smollm2/reference.json"))["prompts"]))')
    for tp in 1 2; do
        fits $tp || continue
        for ((p = 0; p < n; p++)); do
            python3 - "$p" >"$OUT/sm-args" <<'PY'
import json, sys
r = json.load(open("tests/fixtures/smollm2/reference.json"))["prompts"][int(sys.argv[1])]
if r["kind"] == "chat":
    sys_msg = [x["content"] for x in r["messages"] if x["role"] == "system"]
    user = [x["content"] for x in r["messages"] if x["role"] == "user"][-1]
    print(json.dumps(["--chat", "-p", user] + (["--system", sys_msg[0]] if sys_msg else [])))
else:
    open("/tmp/smollm2/prompt.txt", "w").write(r["text"])
    print(json.dumps(["-p", "-"]))
PY
            mapfile -t args < <(python3 -c 'import json,sys; [print(a) for a in json.load(open(sys.argv[1]))]' "$OUT/sm-args")
            mpi -np $tp build-gpu/lockstep generate --gpu -m "$m" "${args[@]}" -n 32 --ignore-eos --json --quiet \
                --top-logits 1000 --top-logit-steps 4 </tmp/smollm2/prompt.txt >"$OUT/sm.json" &&
                echo -n "TP=$tp " && python3 tests/gpu/compare_smollm2.py "$OUT/sm.json" tests/fixtures/smollm2/reference.json "$p" 3e-2 || ok=1
        done
    done
    return $ok
}

# Nsight Compute on decode steps, one rank (8B shape, TP=1): NCU_COUNT launches of the decode
# kernels (NCU_KERNELS, a name regex) after NCU_SKIP (the 3-token prefill's 129 GEMVs), each replayed alone
# for its counters (so no PDL overlap: durations are isolated ones), with the speed-of-light,
# warp-state and launch sections, as CSV; the step watchdog off (each kernel is replayed many
# times). NCU_COUNT=15 (three layers' five kernels) took 22 s in the ninth session; the default
# 161 (all 32 layers) a few minutes.
# The cache holds NCU_CTX positions (401, as `bench --prompt-len 128 --gen 256` sizes it, so the
# attention takes the form the bench runs; the ninth session's run had 4096, the long-context
# form).
stage_ncu() {
    local ncu
    ncu=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
    [ -n "$ncu" ] || { echo "ncu not found"; return 1; }
    LOCKSTEP_STEP_TIMEOUT=0 mpi -x LOCKSTEP_STEP_TIMEOUT -np 1 "$ncu" --clock-control none --graph-profiling node \
        --kernel-name regex:"${NCU_KERNELS:-gemv|attn_decode}" --launch-skip "${NCU_SKIP:-129}" \
        --launch-count "${NCU_COUNT:-161}" --section SpeedOfLight --section WarpStateStats \
        --section LaunchStats --csv --page details \
        build-gpu/lockstep generate --gpu --dummy llama-3.1-8b --prompt-ids 1,2,3 -n 3 --quiet \
        --max-context "${NCU_CTX:-401}" >"$OUT/ncu.csv" || return 1
    wc -l "$OUT/ncu.csv"
}

# where a 128-token prefill's time goes on the 8B: every kernel of one prefill (no warm-up
# before it) under ncu, durations summed per kernel name. ncu runs kernels one at a time, so
# what PDL overlaps is counted in full; the sum is an upper bound of the prefill's time.
stage_pfprofile() {
    local ncu
    ncu=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
    [ -n "$ncu" ] || { echo "ncu not found"; return 1; }
    LOCKSTEP_WARMUP=0 LOCKSTEP_STEP_TIMEOUT=0 mpi -x LOCKSTEP_WARMUP -x LOCKSTEP_STEP_TIMEOUT -np 1 \
        "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
        --launch-count "${NCU_COUNT:-800}" build-gpu/lockstep generate --gpu --dummy llama-3.1-8b \
        --prompt-ids "$(seq -s, 100 227)" -n 1 --quiet --max-context 256 >"$OUT/pf-ncu.csv" || return 1
    python3 - "$OUT/pf-ncu.csv" <<'PY'
import collections, csv, sys
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
head = rows[0]
ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
tot = collections.OrderedDict()
for r in rows[2:]:
    name = r[ki].split("(")[0][:64]
    c, t = tot.get(name, (0, 0.0))
    tot[name] = (c + 1, t + float(r[ti].replace(",", "")))
unit = rows[1][ti]
for name, (c, t) in sorted(tot.items(), key=lambda x: -x[1][1]):
    print("%-64s %5d %12.1f %s" % (name, c, t, unit))
print("all %d kernels: %.1f %s" % (sum(c for c, _ in tot.values()), sum(t for _, t in tot.values()), unit))
PY
}

# the GEMV launch-shape lab (kernels/lab): every shape of the 8B model and its TP=2 halves
stage_lab() {
    OUT=$OUT NVCC=/usr/local/cuda/bin/nvcc bash kernels/lab/run.sh
}

stage_carry1() {
    mkdir -p /tmp/smollm2 && cp .carry1/* /tmp/smollm2/ && touch /tmp/smollm2/prompt.txt && ls -l /tmp/smollm2
}

# where a step's time goes, kernel by kernel (bench --kernel-times: CUPTI's records of the step
# as it runs), at the bench's shape and after a 4096-token prompt; at TP=2 where two GPUs are
stage_ktimes() {
    local n
    n=$(ngpus)
    mpi -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 128 --gen 256 --kernel-times \
        --json "$OUT/ktimes-8b-tp1-p128.json" &&
        mpi -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 4096 --gen 64 --kernel-times \
            --json "$OUT/ktimes-8b-tp1-p4096.json" || return 1
    if [ "$n" -ge 2 ]; then
        mpi -np 2 build-gpu/lockstep bench --gpu --allreduce custom --dummy llama-3.1-8b --prompt-len 128 \
            --gen 256 --kernel-times --json "$OUT/ktimes-8b-tp2-p128.json"
    fi
}

stage_bench() {
    local n
    n=$(ngpus)
    # with the step's kernel times (a third decode of the same steps under CUPTI's records)
    mpi -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 128 --gen 256 --kernel-times \
        --json "$OUT/bench-8b-tp1.json"
    # the same with the token drawn in the step (the sampling kernel over 128256 logits)
    mpi -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 128 --gen 256 --temperature 0.8 \
        --top-k 50 --top-p 0.95 --json "$OUT/bench-8b-tp1-sampled.json"
    # Llama-3.1's draw with a repetition penalty in the step, and the same on the host path
    # (generate, the logits taken to the host each step: what penalties cost before they ran in
    # the graph; its decode time includes the host's sampling), with each run's time to the
    # first token (chosen in the backend from the prefill's logits, or on the host)
    mpi -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 128 --gen 256 --temperature 0.6 \
        --top-p 0.9 --repeat-penalty 1.1 --repeat-last-n 64 --json "$OUT/bench-8b-tp1-penalty.json"
    # a logit bias alone (greedy): the penalty kernel over the vocabulary with the bias vector,
    # no penalty
    mpi -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 128 --gen 256 \
        --logit-bias 1000=-100 --logit-bias 2000=5 --json "$OUT/bench-8b-tp1-bias.json"
    for h in 0 1; do
        LOCKSTEP_HOST_SAMPLING=$h mpi -x LOCKSTEP_HOST_SAMPLING -np 1 build-gpu/lockstep generate --gpu --dummy llama-3.1-8b \
            --prompt-ids "$(seq -s, 1000 1127)" -n 256 --ignore-eos --temperature 0.6 --top-p 0.9 --repeat-penalty 1.1 \
            --repeat-last-n 64 --json --quiet >"$OUT/gen-8b-penalty-host$h.json" &&
            python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("generate --repeat-penalty 1.1, LOCKSTEP_HOST_SAMPLING=%s: %.3f ms a token over %d tokens; prefill %.2f ms, first token at %.2f ms" % (sys.argv[2], 1e3 * r["decode_s"] / (len(r["ids"]) - 1), len(r["ids"]), 1e3 * r["prefill_s"], 1e3 * r["ttft_s"]))' \
                "$OUT/gen-8b-penalty-host$h.json" $h
    done
    if [ "$n" -ge 2 ]; then
        mpi -np 2 build-gpu/lockstep bench --gpu --allreduce nccl --dummy llama-3.1-8b --prompt-len 128 --gen 256 \
            --json "$OUT/bench-8b-tp2-nccl.json"
        mpi -np 2 build-gpu/lockstep bench --gpu --allreduce custom --dummy llama-3.1-8b --prompt-len 128 --gen 256 \
            --json "$OUT/bench-8b-tp2-custom.json"
    fi
    true
}

# what the engine's graphs and first launches cost a request (random 8B, one GPU): batch lines
# whose sampling changes, the decode graph updated in place or always new; the first request
# of a process with and without the warm-up at start-up (greedy, drawn, and a scoring one that
# asks for the prompt's log-probabilities)
stage_graphs() {
    local i v w s
    # what a sampling change costs the decode graph: 16 batch lines of 32 tokens, the
    # temperature changing at every line (the same launches: an update in place) and a greedy
    # line every fourth (other launches: a new graph), updated in place or always new
    for i in $(seq 0 15); do
        echo "{\"id\": $i, \"prompt\": [$(seq -s, $((1000 + i)) $((1127 + i)))], \"max_tokens\": 32, \"ignore_eos\": true, \"temperature\": $([ $((i % 4)) = 3 ] && echo 0 || echo "0.$((5 + i % 4)), \"top_p\": 0.9")}"
    done >"$OUT/gu8b.jsonl"
    for v in 1 0 1 0; do
        LOCKSTEP_GRAPH_UPDATE=$v mpi -x LOCKSTEP_GRAPH_UPDATE -np 1 build-gpu/lockstep batch --gpu --dummy llama-3.1-8b \
            --input "$OUT/gu8b.jsonl" --output "$OUT/gu8b-$v.out" 2>"$OUT/gu8b-$v.err" &&
            echo "batch, 16 lines, LOCKSTEP_GRAPH_UPDATE=$v: $(tail -1 "$OUT/gu8b-$v.err")"
    done
    cmp -s "$OUT/gu8b-1.out" "$OUT/gu8b-0.out" && echo "batch: the same results either way" ||
        { echo "batch: the results differ with LOCKSTEP_GRAPH_UPDATE=0"; return 1; }
    for w in 0 1; do
        for s in "" "--temperature 0.6 --top-p 0.9" "--prompt-logprobs 1"; do
            # shellcheck disable=SC2086
            LOCKSTEP_WARMUP=$w mpi -x LOCKSTEP_WARMUP -np 1 build-gpu/lockstep generate --gpu --dummy llama-3.1-8b \
                --prompt-ids "$(seq -s, 1000 1127)" -n 32 --ignore-eos $s --json --quiet >"$OUT/warm$w.json" &&
                python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("generate, prompt 128, %s, LOCKSTEP_WARMUP=%s: warm-up %.1f ms; prefill %.2f ms, first token at %.2f ms, %.3f ms a token after it" % (sys.argv[3] or "greedy", sys.argv[2], 1e3 * r["warmup_s"], 1e3 * r["prefill_s"], 1e3 * r["ttft_s"], 1e3 * r["decode_s"] / (len(r["ids"]) - 1)))' \
                    "$OUT/warm$w.json" $w "$s"
        done
    done
}

# decode at TP=1 under each GEMV launch-shape choice (LOCKSTEP_GEMV=small,medium,large)
stage_shapes() {
    local v
    for v in ${GEMV_CHOICES:-1,0,4 0,0,0 2,0,4 3,3,4 1,1,4}; do
        echo -n "LOCKSTEP_GEMV=$v: "
        LOCKSTEP_GEMV=$v mpi -x LOCKSTEP_GEMV -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 128 \
            --gen 256 --json "$OUT/shapes-$v.json" 2>&1 | grep -E "^ *decode  "
    done
}

# the 8B's prefill of a 16384-token prompt (chunks of 1024: cuBLASLt GEMMs and the tensor-core
# attention over up to 16384 cached positions), at TP=1 and, where it fits, 2
stage_pflong() {
    local tp
    for tp in 1 2; do
        fits $tp || continue
        echo -n "TP=$tp: "
        mpi -np $tp build-gpu/lockstep bench --gpu --allreduce custom --dummy llama-3.1-8b --prompt-len 16384 --gen 8 \
            --json "$OUT/pflong-8b-tp$tp.json" | grep -E '^ *prefill' | tr -s ' '
    done
}

# decode steps issued ahead (LOCKSTEP_DECODE_AHEAD, ls_engine_plan): the graph's greedy tokens
# with (=1) and without (=0); its drawn ones (T 0.8, top-p 0.95, seed 5) with the drawn steps
# issued ahead (LOCKSTEP_DECODE_AHEAD_DRAWN=1) and without; and drawn with a repetition penalty
# and a logit bias with those steps issued ahead too (LOCKSTEP_DECODE_AHEAD_ADJUSTED=1) and
# without; drawn with logprobs (their tokens and logprobs) with and without
# LOCKSTEP_DECODE_AHEAD_SCORED=1; tiny-llama and the SmolLM2 shape, at TP=1 and 2 where there are the GPUs
stage_ahead() {
    local tp m ok=0 kind args
    for m in "-m tests/fixtures/tiny-llama" "--dummy smollm2-135m"; do
        for tp in 1 2; do
            fits $tp || continue
            # shellcheck disable=SC2086
            LOCKSTEP_DECODE_AHEAD=0 gen_json $tp "$OUT/ahead-0.json" -x LOCKSTEP_DECODE_AHEAD --gpu $m \
                --prompt-ids "$(seq -s, 11 47)" -n 24 &&
                ahead_same $tp "$OUT/ahead-0.json" 24 $m || ok=1
            for kind in drawn adjusted scored; do
                args=(--temperature 0.8 --top-p 0.95 --seed 5)
                [ $kind = adjusted ] && args+=(--repeat-penalty 1.2 --logit-bias "20=-100" --logit-bias "30=2")
                [ $kind = scored ] && args+=(--logprobs 3)
                # shellcheck disable=SC2086
                LOCKSTEP_DECODE_AHEAD=0 gen_json $tp "$OUT/ahead-d0.json" -x LOCKSTEP_DECODE_AHEAD --gpu $m \
                    --prompt-ids "$(seq -s, 11 47)" -n 24 "${args[@]}" &&
                    LOCKSTEP_DECODE_AHEAD=1 LOCKSTEP_DECODE_AHEAD_DRAWN=1 LOCKSTEP_DECODE_AHEAD_ADJUSTED=1 \
                        LOCKSTEP_DECODE_AHEAD_SCORED=1 gen_json $tp "$OUT/ahead-d1.json" -x LOCKSTEP_DECODE_AHEAD \
                        -x LOCKSTEP_DECODE_AHEAD_DRAWN -x LOCKSTEP_DECODE_AHEAD_ADJUSTED -x LOCKSTEP_DECODE_AHEAD_SCORED \
                        --gpu $m --prompt-ids "$(seq -s, 11 47)" -n 24 "${args[@]}" &&
                    same_ids "$m TP=$tp: 24 $kind tokens" "$OUT/ahead-d0.json" "$OUT/ahead-d1.json" || ok=1
                if [ $kind = scored ]; then
                    if [ "$(lp_of "$OUT/ahead-d0.json")" = "$(lp_of "$OUT/ahead-d1.json")" ]; then
                        echo "$m TP=$tp: their logprobs the same with those steps issued ahead"
                    else
                        echo "$m TP=$tp: their logprobs DIFFERENT with those steps issued ahead"
                        ok=1
                    fi
                fi
            done
        done
    done
    # a prompt as long as the start-up warm-up's (128), whose decode step posted position 128:
    # the request's first step at 128 must not take that post for its own (posts_clear)
    LOCKSTEP_DECODE_AHEAD=0 gen_json 1 "$OUT/ahead-w0.json" -x LOCKSTEP_DECODE_AHEAD --gpu --dummy smollm2-135m \
        --prompt-ids "$(seq -s, 1000 1127)" -n 8 &&
        gen_json 1 "$OUT/ahead-w1.json" --gpu --dummy smollm2-135m --prompt-ids "$(seq -s, 1000 1127)" -n 8 &&
        same_ids "--dummy smollm2-135m TP=1, a 128-token prompt: 8 greedy tokens" "$OUT/ahead-w0.json" \
            "$OUT/ahead-w1.json" || ok=1
    return $ok
}

# the decode attention alone, with and without clusters (short to long contexts, the 8B's TP=1
# and 2 shapes and the 70B's TP=2)
stage_attbench() {
    build-gpu/tests/gpu/test_kernels --bench-attention
}

# decode at a long context (a 4096-token prompt): attention reads 0.5 MB of KV cache per layer
# per token, and the chunks' merge runs at every step
stage_longctx() {
    local n
    n=$(ngpus)
    mpi -np 1 build-gpu/lockstep bench --gpu --dummy llama-3.1-8b --prompt-len 4096 --gen 128 --json "$OUT/bench-8b-tp1-4k.json"
    [ "$n" -ge 2 ] || return 0
    mpi -np 2 build-gpu/lockstep bench --gpu --allreduce custom --dummy llama-3.1-8b --prompt-len 4096 --gen 128 \
        --json "$OUT/bench-8b-tp2-4k.json"
}

# decode under each setting of AB (space-separated VAR=value, '-' for none), at each TP degree of
# AB_TP ("1 2"; those above the GPU count skipped) with the custom all-reduce: an A/B of a switch
# in one call. AB_MODEL: the --dummy preset or config.json (llama-3.1-8b; e.g. llama-3.1-70b
# with AB_TP=2, or tests/gpu/attn-32q4kv.json);
# AB_PROMPT, AB_GEN: the prompt and generated lengths (128, 256). AB_ROUNDS (1): every setting
# that many times, interleaved (A B A B ...), so drift in the machine shows as spread, not as a
# difference; lines and JSON names then carry the round. AB_ARGS: more bench arguments for every
# setting (e.g. "--temperature 0.8 --top-k 50 --top-p 0.95": the sampled step)
# The weights' footprint: the 8B shape with 8, 16, 32 and 64 layers (3.5 to 28 GB of weights, the
# same LM head), so that the per-layer slope says whether a larger footprint makes each layer
# slower (the GPU's TLB reach: the probe and the lab stream 3.5-4 GiB, the step 15 GB); then the
# read probe itself at 4, 16 and 64 GiB. LAYERS_BW="4 16 64" (GiB) and LAYERS_N="8 16 32 64".
stage_layers() {
    local l g
    for l in ${LAYERS_N:-8 16 32 64}; do
        python3 - "$l" >"$OUT/layers-$l.json" <<'PY'
import json, sys
print(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": int(sys.argv[1]), "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}, "bos_token_id": 128000, "eos_token_id": 128001}))
PY
        echo -n "layers $l: "
        mpi -np 1 build-gpu/lockstep bench --gpu --dummy "$OUT/layers-$l.json" --prompt-len 128 --gen 256 \
            --json "$OUT/layers-$l-bench.json" >"$OUT/layers-$l.log" 2>&1 || { echo failed; tail -5 "$OUT/layers-$l.log"; return 1; }
        grep -E "^ *(read bandwidth|bytes read|decode  )" "$OUT/layers-$l.log" | tr -s ' ' | tr '\n' ' '
        echo
    done
    for g in ${LAYERS_BW:-4 16 64}; do
        echo -n "probe $g GiB: "
        mpi -np 1 build-gpu/lockstep bench --gpu --dummy smollm2-135m --gen 16 --bw-bytes $((g << 30)) \
            >"$OUT/probe-$g.log" 2>&1 || { echo failed; tail -5 "$OUT/probe-$g.log"; return 1; }
        grep -E "^ *(read bandwidth|copy)" "$OUT/probe-$g.log" | tr -s ' ' | tr '\n' ' '
        echo
    done
}
stage_ab() {
    local v tp n x kv a r rounds=${AB_ROUNDS:-1} tag bin name
    n=$(ngpus)
    # an @ref setting needs REF_SRC's build; a call that carries REF_SRC replaces the machine's
    # copy, and its build-ref with it, so build it here when it is missing
    case " ${AB:-} " in
    *" @ref"*)
        [ -n "${REF_SRC:-}" ] || { echo "AB names @ref but REF_SRC is not set"; return 1; }
        [ -x "$REF_SRC/build-ref/lockstep" ] || build_ref >"$OUT/build-ref.log" 2>&1 ||
            { echo "the @ref build failed ($OUT/build-ref.log)"; return 1; } ;;
    esac
    for r in $(seq "$rounds"); do
    tag=$([ "$rounds" -gt 1 ] && echo "r$r-")
    for v in ${AB:--}; do
        for tp in ${AB_TP:-1 2}; do
            [ "$tp" -gt "$n" ] && continue
            echo -n "${tag:+r$r }TP=$tp $v: "
            # v: - (defaults) or VAR=val[,VAR=val...]; a leading @ref (@ref or @ref,VAR=val...):
            # the binary built from REF_SRC (stage build) instead of this tree's
            x=()
            kv=()
            bin=build-gpu/lockstep
            case $v in @ref*) bin=$REF_SRC/build-ref/lockstep ;; esac
            if [ "$v" != - ] && [ "$v" != @ref ]; then
                IFS=, read -ra kv <<<"${v#@ref,}"
                for a in "${kv[@]}"; do x+=(-x "${a%%=*}"); done
            fi
            name="ab-$tag$(basename "${AB_MODEL:-llama-3.1-8b}" .json)-p${AB_PROMPT:-128}-tp$tp-${v//[^A-Za-z0-9]/_}"
            (
                for a in "${kv[@]}"; do export "${a?}"; done
                mpi "${x[@]}" -np $tp $bin bench --gpu --allreduce custom --dummy "${AB_MODEL:-llama-3.1-8b}" \
                    --prompt-len "${AB_PROMPT:-128}" --gen "${AB_GEN:-256}" ${AB_ARGS:-} \
                    --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
            ) || { echo "failed:"; tail -5 "$OUT/$name.log"; continue; }
            grep -E "^ *(prefill|decode  |achieved|decode without)" "$OUT/$name.log" | tr -s ' ' | tr '\n' ' '
            echo
        done
    done
    done
}

# the decode's two forms (runtime/backend_cuda.c, cu_decode_form): past LOCKSTEP_ATT_CLUSTER_CTX
# positions the engine launches the attention without clusters (a graph of its own; the steps
# that take the logits to the host, as --top-logits does here, run eagerly in the same form);
# past the cluster merge's reach (512 positions here) both merge through the workspace. With the
# same q heads a block in both (LOCKSTEP_ATT_HEADS=4) the tokens and logits must be the same
# bits with the switch mid-run (at 520 of 500 + 64) and without, at TP=1 and 2. By default the
# long-context form holds 4 q heads a block where the other holds one (another instantiation of
# the kernel, whose rounding differs): the same tokens, and every step's top logits within 1e-3
# of the largest. Then the 8B at a 4096-token prompt both ways (the time it is for).
stage_attforms() {
    local n tp args heads hx
    n=$(ngpus)
    args=(--gpu --dummy smollm2-135m --prompt-ids "$(seq -s, 11 510)" -n 64 --top-logits 64 --top-logit-steps 64)
    for tp in 1 2; do
        [ $tp -gt "$n" ] && continue
        for heads in 4 ""; do
            (
                hx=()
                [ -n "$heads" ] && export LOCKSTEP_ATT_HEADS=$heads && hx=(-x LOCKSTEP_ATT_HEADS)
                gen_json $tp "$OUT/af-tp$tp-0$heads.json" "${hx[@]}" "${args[@]}" &&
                    LOCKSTEP_ATT_CLUSTER_CTX=520 gen_json $tp "$OUT/af-tp$tp-1$heads.json" -x LOCKSTEP_ATT_CLUSTER_CTX \
                        "${hx[@]}" "${args[@]}"
            ) && python3 -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
exact = sys.argv[4] != ""
ta, tb = a["top_logits"], b["top_logits"]
if exact:
    same = a["ids"] == b["ids"] and ta == tb
    verdict = "bitwise equal" if same else "DIFFERENT"
else:
    worst = 0.0
    for x, y in zip(ta, tb):
        lx, ly = dict(zip(x["ids"], x["logits"])), dict(zip(y["ids"], y["logits"]))
        scale = max(abs(v) for v in x["logits"])
        worst = max([worst] + [abs(lx[i] - ly[i]) / scale for i in lx if i in ly])
    same = a["ids"] == b["ids"] and len(ta) == len(tb) and worst <= 1e-3
    verdict = "tokens %s, top logits within %.2e of the largest (tol 1e-3)" % (
        "equal" if a["ids"] == b["ids"] else "DIFFERENT", worst)
print("TP=%s forms (%s): %d tokens, %d steps of top logits, %s" % (sys.argv[3],
      "4 q heads a block in both" if exact else "default heads", len(a["ids"]), len(ta), verdict))
sys.exit(0 if same else 1)' "$OUT/af-tp$tp-0$heads.json" "$OUT/af-tp$tp-1$heads.json" $tp "$heads" || return 1
        done
    done
    for v in 0 600; do
        echo -n "8B TP=1 prompt 4096, LOCKSTEP_ATT_CLUSTER_CTX=$v: "
        LOCKSTEP_ATT_CLUSTER_CTX=$v mpi -x LOCKSTEP_ATT_CLUSTER_CTX -np 1 build-gpu/lockstep bench --gpu \
            --dummy llama-3.1-8b --prompt-len 4096 --gen 128 --json "$OUT/af-8b-4k-$v.json" 2>&1 |
            grep -E "^ *decode  " | tr -s ' '
    done
}

# decode form 2 (the attention streamed through shared memory past LOCKSTEP_ATT_BULK_CTX; by
# default where the q heads' re-reads pass 16 MiB a layer, 4096 positions for this model; here
# 8192) against form 1 (LOCKSTEP_ATT_BULK_CTX=0: never) on a small random model of hd 128 and
# groups of 4 (2 layers, 8 q and 2 KV heads a rank at TP=1): an 8170-token prompt and 48 steps
# that cross 8192, each step's top logits taken to the host (eager steps); then the
# default's graph-replayed steps (no top logits) against its eager ones. Another kernel rounds
# otherwise: the same tokens, the top logits within 1e-3 of the largest; the graph's tokens
# equal the eager ones.
stage_attbulk() {
    local n tp args
    n=$(ngpus)
    python3 - >"$OUT/attbulk.json" <<'PY'
import json
print(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
    "intermediate_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 32000, "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2}))
PY
    args=(--gpu --dummy "$OUT/attbulk.json" --max-context 8448 --prompt-ids "$(seq -s, 11 8180)" -n 48)
    for tp in 1 2; do
        [ $tp -gt "$n" ] && continue
        LOCKSTEP_ATT_BULK_CTX=8192 gen_json $tp "$OUT/ab2-tp$tp.json" -x LOCKSTEP_ATT_BULK_CTX "${args[@]}" \
            --top-logits 64 --top-logit-steps 48 &&
            LOCKSTEP_ATT_BULK_CTX=0 gen_json $tp "$OUT/ab1-tp$tp.json" -x LOCKSTEP_ATT_BULK_CTX "${args[@]}" \
                --top-logits 64 --top-logit-steps 48 &&
            LOCKSTEP_ATT_BULK_CTX=8192 gen_json $tp "$OUT/ab2g-tp$tp.json" -x LOCKSTEP_ATT_BULK_CTX \
                "${args[@]}" || return 1
        python3 -c 'import json, sys
a, b, g = (json.load(open(f)) for f in sys.argv[1:4])
worst = 0.0
for x, y in zip(a["top_logits"], b["top_logits"]):
    lx, ly = dict(zip(x["ids"], x["logits"])), dict(zip(y["ids"], y["logits"]))
    scale = max(abs(v) for v in x["logits"])
    worst = max([worst] + [abs(lx[i] - ly[i]) / scale for i in lx if i in ly])
ok = a["ids"] == b["ids"] and len(a["top_logits"]) == len(b["top_logits"]) == 48 and worst <= 1e-3
graph = g["ids"] == a["ids"]
print("TP=%s form 2 against form 1: %d tokens %s, top logits within %.2e of the largest (tol 1e-3); "
      "graph-replayed tokens %s the eager ones" % (sys.argv[4], len(a["ids"]),
      "equal" if a["ids"] == b["ids"] else "DIFFERENT", worst, "equal to" if graph else "DIFFERENT from"))
sys.exit(0 if ok and graph else 1)' "$OUT/ab2-tp$tp.json" "$OUT/ab1-tp$tp.json" "$OUT/ab2g-tp$tp.json" $tp || return 1
    done
}

# Llama-3.1-70B shape at TP=2 (141 GB of weights: no room on one H200), both all-reduce paths
# (BENCH70_AR=custom: one; each run ~1.5 min)
stage_bench70() {
    local ar
    fits 2 || return $SKIP
    for ar in ${BENCH70_AR:-custom nccl}; do
        mpi -np 2 build-gpu/lockstep bench --gpu --allreduce $ar --dummy llama-3.1-70b --prompt-len 128 --gen 128 \
            --json "$OUT/bench-70b-tp2-$ar.json" || return 1
    done
}

# Issue #6 in one call on the largest kind: 8B at TP=1, 2, 4, 8 and 70B at TP=2, 4, 8 (every
# size up to the GPUs present; 70B needs 2 or more), custom and NCCL all-reduce, the sweep at
# every size above 2, and info for the links; a table is printed last (scaling.tsv). The 70B
# runs take ~1-2 min each (random weights made on the host): SCALE_MODELS=llama-3.1-8b and then
# SCALE_MODELS=llama-3.1-70b in two calls keep each under the 10-minute limit.
stage_scaling() {
    local n tp ar m f
    n=$(ngpus)
    mpi -np "$n" build-gpu/lockstep info
    printf 'model\ttp\tallreduce\ttok_s\tms\troofline_pct\tar_share_pct\n' >"$OUT/scaling.tsv"
    for m in ${SCALE_MODELS:-llama-3.1-8b llama-3.1-70b}; do
        for tp in 1 2 4 8; do
            [ "$tp" -gt "$n" ] && continue
            [ $m = llama-3.1-70b ] && [ "$tp" -lt 2 ] && continue
            # custom-ll1 (4 ranks or more): the custom all-reduce with the peers' LL lines loaded
            # in one batch (LOCKSTEP_AR_LL_BATCH=1, the default at 2 ranks, not yet measured
            # above 2)
            for ar in custom nccl $([ "$tp" -ge 4 ] && echo custom-ll1); do
                [ "$tp" = 1 ] && [ $ar = nccl ] && continue
                f="$OUT/scale-$m-tp$tp-$ar.json"
                LOCKSTEP_AR_LL_BATCH=$([ $ar = custom-ll1 ] && echo 1) mpi -x LOCKSTEP_AR_LL_BATCH -np "$tp" \
                    build-gpu/lockstep bench --gpu --allreduce ${ar%-ll1} --dummy $m --prompt-len 128 \
                    --gen "$([ "$m" = llama-3.1-70b ] && echo 64 || echo 256)" --json "$f" >/dev/null 2>&1 || echo "$m TP=$tp $ar failed"
                [ -f "$f" ] && python3 - "$f" "$m" "$tp" "$ar" >>"$OUT/scaling.tsv" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("\t".join([sys.argv[2], sys.argv[3], sys.argv[4] if sys.argv[3] != "1" else "-",
                 "%.1f" % d["decode_tok_s"], "%.3f" % d["decode_ms_per_token"],
                 "%.1f" % (100 * d["roofline_fraction"]), "%.1f" % (100 * d["allreduce_share"])]))
PY
            done
        done
    done
    for tp in 4 8; do
        [ "$tp" -gt "$n" ] && continue
        mpi -np "$tp" build-gpu/lockstep bench --gpu --allreduce-sweep --json "$OUT/sweep-$tp.json"
    done
    column -t "$OUT/scaling.tsv" 2>/dev/null || cat "$OUT/scaling.tsv"
}

# Start-up memory (#4: running out of GPU memory is a clear error with the numbers, never a crash
# half-way). The Llama-3.2-3B shape (114688 bytes of K and V a position): a cache past the device
# is refused at start-up with the bytes needed and free; then, at the largest --max-context that
# starts (bisected to 16 positions, below what one prefill chunk's GEMM input takes), a prompt of
# more than one 1024-position chunk with drawn, penalised, biased and scored steps must run, as
# every buffer a request can need was taken at start-up.
stage_memory() {
    local m=(--gpu --dummy tests/gpu/llama-3.2-3b.json) per=114688 msg free lo hi mid ok=0
    probe() { mpi -np 1 build-gpu/lockstep generate "${m[@]}" --max-context "$1" --prompt-ids 1,2,3 \
        -n 1 --quiet >/dev/null 2>"$OUT/mem-probe.err"; }
    probe 4194304 && { echo "--max-context 4194304 started"; return 1; }
    msg=$(grep -o "rank 0: out of.*" "$OUT/mem-probe.err" | head -1)
    echo "--max-context 4194304: $msg"
    free=$(sed -n 's/.*(\([0-9.]*\) GB free after the weights).*/\1/p' <<<"$msg")
    [ -n "$free" ] || { echo "no free memory in the message"; return 1; }
    hi=$(python3 -c "print(int($free * 1e9 / $per) + 64)")
    lo=$((hi - 16384))
    probe $hi && { echo "--max-context $hi past the free memory started"; return 1; }
    probe $lo || { echo "--max-context $lo did not start: $(tail -2 "$OUT/mem-probe.err")"; return 1; }
    while [ $((hi - lo)) -gt 16 ]; do
        mid=$(((lo + hi) / 2))
        if probe $mid; then lo=$mid; else hi=$mid; fi
    done
    echo "the largest --max-context that starts: $lo ($hi does not: $(grep -o "rank 0: out of.*" "$OUT/mem-probe.err" | head -1))"
    gen_json 1 "$OUT/mem-edge.json" "${m[@]}" --max-context $lo --prompt-ids "$(seq -s, 1000 2199)" -n 24 \
        --temperature 0.8 --top-p 0.95 --seed 7 --repeat-penalty 1.1 --logit-bias 20=-100 --logprobs 3 \
        2>"$OUT/mem-edge.err" && [ "$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["ids"]))' "$OUT/mem-edge.json")" = 24 ] ||
        { echo "at --max-context $lo, a 1200-token prompt with 24 drawn, penalised, biased, scored tokens failed: $(tail -3 "$OUT/mem-edge.err")"; ok=1; }
    gen_json 1 "$OUT/mem-edge.json" "${m[@]}" --max-context $lo --prompt-ids "$(seq -s, 1000 2199)" -n 24 2>"$OUT/mem-edge.err" ||
        { echo "at --max-context $lo, greedy after a 1200-token prompt failed: $(tail -3 "$OUT/mem-edge.err")"; ok=1; }
    [ $ok = 0 ] && echo "at --max-context $lo: a 1200-token prompt, then 24 greedy and 24 drawn, penalised, biased, scored tokens ran"
    return $ok
}

# a rank that hangs mid-decode under each all-reduce path: rank 0's step watchdog (3 s) ends it,
# naming the step (NCCL), or the custom all-reduce's 2 s bounded wait names the rank that never
# arrived; the job must end non-zero within 30 s
stage_hang() {
    local ar rc start took ok=0 np m n
    fits 2 || return $SKIP
    n=$(ngpus)
    # 2 ranks (SmolLM2's shape), and all the machine's GPUs up to 8 (the dummy llama-tp8, whose
    # shard plan allows 4 and 8)
    for np in 2 $([ "$n" -gt 2 ] && echo $((n >= 8 ? 8 : n >= 4 ? 4 : 2))); do
        m=$([ "$np" = 2 ] && echo smollm2-135m || echo tests/fixtures/llama-tp8.json)
        [ "$np" -gt "$n" ] && continue
        for ar in nccl custom; do
            start=$(date +%s)
            LOCKSTEP_STEP_TIMEOUT=3 LOCKSTEP_FAULT_DRILL=1:3:hang LOCKSTEP_AR_TIMEOUT_MS=2000 timeout 60 \
                mpirun --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x LOCKSTEP_STEP_TIMEOUT \
                -x LOCKSTEP_FAULT_DRILL -x LOCKSTEP_AR_TIMEOUT_MS -np "$np" \
                build-gpu/lockstep generate --gpu --allreduce $ar --dummy "$m" --prompt-ids 1,2,3 \
                -n 32 --ignore-eos --quiet >"$OUT/hang_${ar}_$np.log" 2>&1
            rc=$?
            took=$(($(date +%s) - start))
            grep -E "fault drill|no progress|never arrived|reports" "$OUT/hang_${ar}_$np.log"
            echo "hang drill $ar, $np ranks: rc=$rc, ${took}s"
            # the stuck step is at position 7 (prompt 3 + step 3 + 1): the hanging rank had issued
            # the step at position 6 ahead before its host stopped, so its device ran that one
            # (6 with LOCKSTEP_DECODE_AHEAD=0, as on CPUs: tests/integration/faults.sh)
            [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 30 ] &&
                grep -qE "rank 0@.*(decode step at position [67]: no progress|rank 1 never arrived)" \
                    "$OUT/hang_${ar}_$np.log" || ok=1
        done
    done
    return $ok
}

# the custom all-reduce: correctness against NCCL (eager and in graphs replayed thousands of
# times), the latency sweep, and the fault drills (a rank that hangs or exits mid-sequence)
stage_allreduce() {
    local t=build-gpu/tests/gpu/test_allreduce rc m np nps n
    fits 2 || return $SKIP
    # 2 ranks, and all the machine's GPUs up to 8 where it has more
    n=$(ngpus)
    nps="2 $([ "$n" -gt 2 ] && echo $((n > 8 ? 8 : n)))"
    for np in $nps; do
        echo "== $np ranks"
        mpi -np $np $t --max-mb 64 && mpi -np $np $t --sweep-only --sweep-dtype f32 --max-mb 64 || return 1
    done
    mpi -np 2 build-gpu/lockstep bench --gpu --allreduce-sweep --json "$OUT/sweep.json" || return 1
    for np in $nps; do
        for m in hang exit; do
            timeout 60 mpirun --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -np $np $t --kill-rank 1 \
                --kill-mode $m >"$OUT/drill_${m}_$np.log" 2>&1
            rc=$?
            grep -m1 -E "never arrived|HANG|FAILED|illegal" "$OUT/drill_${m}_$np.log"
            echo "drill $m, $np ranks: rc=$rc"
            [ $rc -ne 0 ] && [ $rc -ne 124 ] || return 1
        done
    done
}

# LOCKSTEP_MLP_FUSED=1 (an experiment: at one rank the attention output and the MLP in two
# kernels, the down split along its inputs and read transposed, float atomics): every decode
# step's logits (8 of them: the fused path is the one-position step's) against the CPU path's on
# the tiny models and the SmolLM2 shape (TOL_BF16), and against the unfused GPU path's on the
# random 8B (the same bf16 weights: within 1e-2); the greedy tokens are reported
# two runs' tokens and every step's top logits the same bits
same_steps() { # A.json B.json LABEL
    python3 - "$@" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
same = a["ids"] == b["ids"] and a["top_logits"] == b["top_logits"]
n = sum(len(s["logits"]) for s in a["top_logits"])
print(f"{sys.argv[3]}: {n} logits over {len(a['top_logits'])} steps "
      f"{'bitwise equal' if same else 'DIFFER'}")
sys.exit(0 if same else 1)
PY
}
mlp_steps() { # A.json B.json TOL
    python3 - "$@" <<'PY'
import json, math, sys
a, b, tol = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
worst = 0.0
for sa, sb in zip(a["top_logits"], b["top_logits"]):
    va, vb = dict(zip(sa["ids"], sa["logits"])), dict(zip(sb["ids"], sb["logits"]))
    ks = set(va) & set(vb)
    num = math.sqrt(sum((va[k] - vb[k]) ** 2 for k in ks))
    den = math.sqrt(sum(vb[k] ** 2 for k in ks))
    worst = max(worst, num / den if den else float("inf"))
same = 0
for x, y in zip(a["ids"], b["ids"]):
    if x != y:
        break
    same += 1
print(f"{len(a['top_logits'])} steps: worst relative error {worst:.3e} (tol {tol}), "
      f"the same first {same} of {len(a['ids'])} tokens")
sys.exit(0 if worst <= tol else 1)
PY
}
stage_mlp() {
    local ok=0 m v
    export LOCKSTEP_MLP_FUSED=1
    for m in "--dummy smollm2-135m" "-m tests/fixtures/tiny-llama" "-m tests/fixtures/tiny-qwen2" "-m tests/fixtures/tiny-qwen3"; do
        v=$(case $m in *smollm2*) echo 49152 ;; *) echo 512 ;; esac)
        # shellcheck disable=SC2086
        gen_json 1 "$OUT/mlp-cpu.json" --cpu $m --prompt-ids "$(seq -s, 11 47)" -n 8 --top-logits "$v" --top-logit-steps 8 &&
            gen_json 1 "$OUT/mlp-gpu.json" -x LOCKSTEP_MLP_FUSED --gpu $m --prompt-ids "$(seq -s, 11 47)" -n 8 --top-logits "$v" --top-logit-steps 8 &&
            echo -n "$m fused GPU vs CPU: " && mlp_steps "$OUT/mlp-gpu.json" "$OUT/mlp-cpu.json" "$TOL_BF16" || ok=1
    done
    # a prompt of 5: a chunk of GEMV_MAX_T or fewer, whose down matmul reads the transposed
    # matrix through the GEMM too (matmul_residual_t)
    m=(-m tests/fixtures/tiny-llama --prompt-ids "11,12,13,14,15" -n 8 --top-logits 512 --top-logit-steps 8)
    gen_json 1 "$OUT/mlp-cpu.json" --cpu "${m[@]}" &&
        gen_json 1 "$OUT/mlp-gpu.json" -x LOCKSTEP_MLP_FUSED --gpu "${m[@]}" &&
        echo -n "tiny-llama, a 5-token prompt, fused GPU vs CPU: " && mlp_steps "$OUT/mlp-gpu.json" "$OUT/mlp-cpu.json" "$TOL_BF16" || ok=1
    m=(--dummy llama-3.1-8b --prompt-ids "$(seq -s, 11 138)" -n 8 --top-logits 128256 --top-logit-steps 8 --max-context 512)
    gen_json 1 "$OUT/mlp-8b-fused.json" -x LOCKSTEP_MLP_FUSED --gpu "${m[@]}" &&
        (export LOCKSTEP_MLP_FUSED=0; gen_json 1 "$OUT/mlp-8b-plain.json" -x LOCKSTEP_MLP_FUSED --gpu "${m[@]}") &&
        echo -n "random 8B fused vs unfused GPU: " && mlp_steps "$OUT/mlp-8b-fused.json" "$OUT/mlp-8b-plain.json" 1e-2 || ok=1
    # the same bits in every run: the pending sum's partials are exact in any order
    gen_json 1 "$OUT/mlp-8b-fused2.json" -x LOCKSTEP_MLP_FUSED --gpu "${m[@]}" &&
        same_steps "$OUT/mlp-8b-fused.json" "$OUT/mlp-8b-fused2.json" "random 8B fused, two runs" || ok=1
    # the greedy graph's tokens, fused and not (random weights: near ties may split them)
    gen_json 1 "$OUT/mlp-g1.json" -x LOCKSTEP_MLP_FUSED --gpu --dummy smollm2-135m --prompt-ids "$(seq -s, 11 47)" -n 32 &&
        (export LOCKSTEP_MLP_FUSED=0; gen_json 1 "$OUT/mlp-g0.json" -x LOCKSTEP_MLP_FUSED --gpu --dummy smollm2-135m --prompt-ids "$(seq -s, 11 47)" -n 32) &&
        echo "SmolLM2 shape greedy graph, fused:   $(ids_of "$OUT/mlp-g1.json")" &&
        echo "SmolLM2 shape greedy graph, unfused: $(ids_of "$OUT/mlp-g0.json")"
    return $ok
}

# the decode attention left as its split's partials for the fused MLP's o GEMV to merge
# (LOCKSTEP_ATT_DEFER=1) against the attention's own merge, on the random 8B (the fused MLP's
# shape): within the cluster merge's reach the same bits (every step's top logits, the eager
# steps that take them to the host), the greedy graph's tokens the same; past it (a 4096 cache at
# 600-700 positions, where the attention merges through the workspace and rounds otherwise) the
# same tokens, the logits within 1e-3
stage_defer() {
    local ok=0 m
    local f
    for f in 1 2; do
    m=(--gpu --dummy llama-3.1-8b --prompt-ids "$(seq -s, 11 138)" -n 8 --top-logits 128256 --top-logit-steps 8 --max-context 512)
    [ $f = 1 ] && gen_json 1 "$OUT/defer-0.json" "${m[@]}"
    [ -s "$OUT/defer-0.json" ] &&
        (export LOCKSTEP_ATT_DEFER=$f; gen_json 1 "$OUT/defer-$f.json" -x LOCKSTEP_ATT_DEFER "${m[@]}") &&
        same_steps "$OUT/defer-0.json" "$OUT/defer-$f.json" "random 8B, LOCKSTEP_ATT_DEFER=$f against the attention's merge" || ok=1
    m=(--gpu --dummy llama-3.1-8b --prompt-ids "$(seq -s, 11 210)" -n 64 --max-context 512)
    [ $f = 1 ] && gen_json 1 "$OUT/defer-g0.json" "${m[@]}"
    [ -s "$OUT/defer-g0.json" ] &&
        (export LOCKSTEP_ATT_DEFER=$f; gen_json 1 "$OUT/defer-g$f.json" -x LOCKSTEP_ATT_DEFER "${m[@]}") &&
        echo "greedy graph, 64 tokens after 200: $(ids_of "$OUT/defer-g0.json")" &&
        echo "  LOCKSTEP_ATT_DEFER=$f:              $(ids_of "$OUT/defer-g$f.json")" &&
        [ "$(ids_of "$OUT/defer-g0.json")" = "$(ids_of "$OUT/defer-g$f.json")" ] || ok=1
    m=(--gpu --dummy llama-3.1-8b --prompt-ids "$(seq -s, 11 610)" -n 8 --top-logits 128256 --top-logit-steps 8 --max-context 4096)
    [ $f = 1 ] && gen_json 1 "$OUT/defer-l0.json" "${m[@]}"
    [ -s "$OUT/defer-l0.json" ] &&
        (export LOCKSTEP_ATT_DEFER=$f; gen_json 1 "$OUT/defer-l$f.json" -x LOCKSTEP_ATT_DEFER "${m[@]}") &&
        echo -n "random 8B after 600 of a 4096 cache, LOCKSTEP_ATT_DEFER=$f against the workspace merge: " &&
        mlp_steps "$OUT/defer-l$f.json" "$OUT/defer-l0.json" 1e-3 || ok=1
    done
    return $ok
}

# the peer in the same call, and lockstep's logits on the same random 8B model saved by
# transformers (reference in fp32 on the bf16 weights; lockstep: bf16 weights and KV cache)
stage_peer() {
    local n ids
    n=$(ngpus)
    PYTHONUNBUFFERED=1 python3 tests/gpu/hf_peer.py --save /tmp/llama8b | tee "$OUT/peer.json" || return 1
    ids=$(python3 -c 'import json; print(",".join(map(str, json.load(open("/tmp/llama8b/reference.json"))["ids"])))')
    for tp in 1 2; do
        [ $tp -gt "$n" ] && continue
        mpi -np $tp build-gpu/lockstep generate --gpu -m /tmp/llama8b --prompt-ids "$ids" -n 1 --json --quiet \
            --top-logits 128256 --top-logit-steps 1 --max-context 512 >"$OUT/llama8b-tp$tp.json" &&
            echo -n "TP=$tp: " && python3 tests/gpu/compare_ref.py "$OUT/llama8b-tp$tp.json" /tmp/llama8b/reference.json 5e-2 || return 1
    done
}

setup_deps
for s in $stages; do
    start=$(date +%s)
    (set -o pipefail; "stage_$s" 2>&1 | tee "$OUT/$s.log")
    rc=$?
    result[$s]="rc=$rc $(($(date +%s) - start))s"
    [ $rc -eq $SKIP ] && result[$s]="skipped ($(ngpus) GPU(s) here)"
    [ "$s" = build ] && [ $rc -ne 0 ] && break
done
echo "==== results"
for s in $stages; do printf '%-10s %s\n' "$s" "${result[$s]:-not run}"; done
# every log and JSON in one archive whose name sorts first: a device call brings back only a
# few files of $OUT, so this one carries the rest
logs=$(mktemp /tmp/lockstep-logs.XXXXXX)
tar czf "$logs" -C "$OUT" --exclude=00-logs.tgz . && mv "$logs" "$OUT/00-logs.tgz"
