#!/usr/bin/env bash
# Build lockstep for CPUs with clang's AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer in BUILD_DIR, and run tests there: the unit tests and the integration tests named
# (by default every unit test and the fast integration tests). Each sanitizer writes its reports
# under BUILD_DIR/sanitize-reports/ (mpirun's ranks included), so a report fails the run even
# where the test expected a non-zero exit. Open MPI's own leaks are suppressed
# (tests/sanitize/lsan.supp). One line per test: "sanitize ok: NAME ..." or
# "sanitize FAILED: NAME ..." (with the reports); exit status 1 if any failed.
#   tests/sanitize/run.sh BUILD_DIR [TEST...]      e.g. tests/integration/tiny_models.sh
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?build dir}
shift
mkdir -p "$build"
cd "$build" || exit 1
build=$(pwd)
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
if [ ! -f Makefile ] || [ "$top/configure" -nt config.status ]; then
    "$top/configure" -q --without-cuda CC=clang CFLAGS="$flags" \
        LDFLAGS="-fsanitize=address,undefined" || exit 1
fi
{ make -j"$(nproc)" && make -j"$(nproc)" check TESTS=; } >sanitize-build.log 2>&1 ||
    { tail -n 30 sanitize-build.log; exit 1; }

tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
    mapfile -t tests < <(find tests/unit -maxdepth 1 -name 'test_*' -type f -perm -u+x | sort)
    tests+=(tests/integration/cli_errors.sh tests/integration/faults.sh
        tests/integration/tiny_models.sh tests/integration/plan.sh tests/integration/launcher.sh)
fi

reports=$build/sanitize-reports
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:log_path=$reports/asan"
export LSAN_OPTIONS="suppressions=$top/tests/sanitize/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$reports/ubsan"
# a sanitized rank runs 2-5x slower: more time before a test counts it as a hang
export TEST_TIMEOUT=${TEST_TIMEOUT:-600}
failed=0
for t in "${tests[@]}"; do
    before=$(ls "$reports" | wc -l)
    make check TESTS="$t" >"sanitize-check.log" 2>&1
    rc=$?
    pass=$(sed -n 's/^# PASS: *//p' sanitize-check.log | tail -n1)
    total=$(sed -n 's/^# TOTAL: *//p' sanitize-check.log | tail -n1)
    new=$(ls "$reports" | wc -l)
    if [ "$rc" -eq 0 ] && [ "$new" -eq "$before" ]; then
        echo "sanitize ok: $t, ${pass:-0} of ${total:-0} passed, no reports"
    else
        echo "sanitize FAILED: $t, ${pass:-0} of ${total:-0} passed, $((new - before)) reports in $reports"
        grep -a -A30 '^not ok\|^ERROR' "${t%.sh}.log" 2>/dev/null | head -n 60
        for f in $(ls -t "$reports" | head -n $((new - before))); do head -n 40 "$reports/$f"; done
        failed=1
    fi
done
exit $failed
