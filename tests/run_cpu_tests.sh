#!/usr/bin/env bash
# run_cpu_tests.sh: runs every CPU test ($BUILD_DIR/tests/test_* binaries, then tests/test_*.sh scripts) from the
# repository root, prints their PASS/FAIL lines, and ends with "N passed, N failed". Exit status 1 if anything failed.
# A binary or script that crashes or exits nonzero without a FAIL line counts as one failure.
# With arguments, runs those binaries and scripts instead (tests/gpu/run_gpu_tests.sh does).
# The scripts run the trainer $TRAIN (default ./train) and the helper programs in $BUILD_DIR/tests (default build).
# SANITIZE=1 (make test SANITIZE=1: binaries built with ASan + UBSan): the sanitizers write their reports to files,
# each test's reports are printed and count as one failure, whatever the test's own checks said (an expected error
# exit that hides a memory error still fails); the scripts read SANITIZE too, to shorten their long runs.
set -u
cd "$(dirname "$0")/.."
export SHARED_DATA="${SHARED_DATA:-$(cd .. && pwd)/shared/data}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export BUILD_DIR="${BUILD_DIR:-build}"
export TRAIN="$(realpath -m "${TRAIN:-train}")"
export SANITIZE="${SANITIZE:-0}"
passed=0
failed=0
log=$(mktemp)
reports=$(mktemp -d)
trap 'rm -rf "$log" "$reports"' EXIT
if [ "$SANITIZE" = 1 ]; then
    export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:halt_on_error=1"
    export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
fi
[ $# -gt 0 ] || set -- "$BUILD_DIR"/tests/test_* tests/test_*.sh
for t in "$@"; do
    [ -e "$t" ] || continue
    case "$t" in *.sh) cmd=(bash "$t") ;; *) cmd=("$t") ;; esac
    echo "== $t"
    start=$(date +%s)
    "${cmd[@]}" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(grep -c '^PASS' "$log")
    f=$(grep -c '^FAIL' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $t exited with status $rc"
        f=1
    fi
    if [ -n "$(ls -A "$reports")" ]; then
        cat "$reports"/*
        echo "FAIL $t: $(ls "$reports" | wc -l) sanitizer report(s) (above)"
        f=$((f + 1))
        rm -f "$reports"/*
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    echo "== $t: $p passed, $f failed ($(( $(date +%s) - start )) s)"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
