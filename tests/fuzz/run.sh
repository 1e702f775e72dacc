#!/usr/bin/env bash
# Build the libFuzzer targets with clang (ASan + UBSan) in BUILD_DIR and run each for SECONDS on
# a scratch copy of its committed seed corpus, with tests/fuzz/NAME.dict where there is one. One
# line per target: "fuzz ok: NAME ..." or "fuzz FAILED: NAME ..." (with the crash log); exit
# status 1 if any target failed.
#   tests/fuzz/run.sh BUILD_DIR SECONDS
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?build dir}
seconds=${2:-20}
mkdir -p "$build"
cd "$build" || exit 1
if [ ! -f Makefile ] || [ "$top/configure" -nt config.status ]; then
    "$top/configure" -q --without-cuda --enable-fuzz CC=clang \
        CFLAGS="-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" || exit 1
fi
targets=(gguf safetensors tokenizer_json tokenize hfconfig jinja chat hostfile)
make -j"$(nproc)" "${targets[@]/#/tests/fuzz/fuzz_}" >fuzz-build.log 2>&1 || { tail -n 30 fuzz-build.log; exit 1; }
failed=0
for t in "${targets[@]}"; do
    corpus=$(mktemp -d)
    [ -d "$top/tests/fuzz/corpus/$t" ] && cp -r "$top/tests/fuzz/corpus/$t/." "$corpus/"
    dict=()
    [ -f "$top/tests/fuzz/$t.dict" ] && dict=(-dict="$top/tests/fuzz/$t.dict")
    if ./tests/fuzz/fuzz_$t -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 "${dict[@]}" \
        -artifact_prefix="$build/fuzz-$t-" "$corpus" >"fuzz-$t.log" 2>&1; then
        echo "fuzz ok: $t, $(grep -o 'Done [0-9]* runs' "fuzz-$t.log" | head -n1) in ${seconds}s"
    else
        echo "fuzz FAILED: $t (log: $build/fuzz-$t.log)"
        tail -n 40 "fuzz-$t.log"
        failed=1
    fi
    rm -rf "$corpus"
done
exit $failed
