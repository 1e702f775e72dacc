#!/usr/bin/env bash
# The README's quick start, on a fresh Debian 12 machine (as root, or with sudo):
#   bash launcher/quickstart.sh run    packages, build, default model, then the main job:
#                                      a 2-rank generation (GPUs when present, else CPUs)
#   bash launcher/quickstart.sh test   packages, build, default model, then the whole test suite
# Environment: BUILD_DIR (default <repo>/build), CONFIGURE_FLAGS (extra configure flags),
# PROMPT (the run mode's prompt),
# FUZZ_SECONDS (per fuzz target in test mode, default 20; 0 skips fuzzing),
# SANITIZE (test mode: 0 skips the sanitizer build's run of the unit and fast integration tests).
set -euo pipefail
mode=${1:-run}
case $mode in run | test) ;; *) echo "usage: $0 run|test" >&2; exit 2 ;; esac
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
jobs=$(nproc)

packages=(build-essential autoconf automake pkg-config openmpi-bin libopenmpi-dev hwloc
    libhwloc-dev libcunit1-dev libjansson-dev libpcre2-dev libutf8proc-dev jq python3 python3-pip)
[ "$mode" = test ] && packages+=(clang libclang-rt-14-dev)

install_packages() {
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    echo "quickstart: installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_lockstep() {
    (cd "$top" && [ -x configure ] && [ configure -nt configure.ac ] || ./autogen.sh >/dev/null)
    mkdir -p "$build"
    cd "$build"
    if [ ! -f Makefile ] || [ "$top/configure" -nt config.status ]; then
        # shellcheck disable=SC2086
        "$top/configure" -q ${CONFIGURE_FLAGS:-}
    fi
    make -j"$jobs" >/dev/null
    make -j"$jobs" check TESTS= >/dev/null # builds the test programs too, runs nothing
}

install_packages
build_lockstep
model=$("$top/launcher/fetch-model.sh")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LOCKSTEP="$build/lockstep"

if [ "$mode" = run ]; then
    echo "quickstart: default model $model" >&2
    devices=--cpu
    if command -v nvidia-smi >/dev/null 2>&1 && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
        devices=""
    fi
    # shellcheck disable=SC2086
    exec "$top/launcher/lockstep-run" --tp 2 $devices -- generate -m "$model" --chat -n 128 \
        -p "${PROMPT:-Explain in a few sentences why the sky is blue.}"
fi

# ---- test mode ----
cd "$build"
export LOCKSTEP_MODEL="$model"
status=0
make -j"$jobs" check 2>&1 | tee "$build/check.out" || status=$?
total=$(sed -n 's/^# TOTAL: *//p' "$build/check.out" | tail -n1)
pass=$(sed -n 's/^# PASS: *//p' "$build/check.out" | tail -n1)
skipped=$(sed -n 's/^# SKIP: *//p' "$build/check.out" | tail -n1)
nfail=$(sed -n 's/^# FAIL: *//p' "$build/check.out" | tail -n1)
nerror=$(sed -n 's/^# ERROR: *//p' "$build/check.out" | tail -n1)
failed=$((${nfail:-0} + ${nerror:-0}))
[ "$status" -ne 0 ] && [ -f test-suite.log ] && grep -B2 -A30 '^FAIL\|^ERROR' test-suite.log | head -n 200

# a stage's "WORD ok" and "WORD FAILED" lines counted into the totals, one per program; a
# non-zero exit with no FAILED line (its build failed) counts as one failure
add_stage() {
    local word=$1 out=$2 rc=$3 ok bad
    echo "$out"
    ok=$(grep -c "^$word ok" <<<"$out" || true)
    bad=$(grep -c "^$word FAILED" <<<"$out" || true)
    [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
    pass=$((${pass:-0} + ok))
    failed=$((failed + bad))
    total=$((${total:-0} + ok + bad))
    [ "$rc" -ne 0 ] && status=1
    return 0
}

# the parsers' fuzz targets, a bounded time each (libFuzzer needs clang)
if [ "${FUZZ_SECONDS:-20}" -gt 0 ]; then
    rc=0
    out=$("$top/tests/fuzz/run.sh" "$build-fuzz" "${FUZZ_SECONDS:-20}") || rc=$?
    add_stage fuzz "$out" $rc
fi
# the unit tests and the fast integration tests again, built with ASan, UBSan and LSan (clang)
if [ "${SANITIZE:-1}" != 0 ]; then
    rc=0
    out=$("$top/tests/sanitize/run.sh" "$build-sanitize") || rc=$?
    add_stage sanitize "$out" $rc
fi
echo "tests: ${pass:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped (of ${total:-0})"
exit "$status"
