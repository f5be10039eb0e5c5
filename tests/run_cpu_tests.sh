#!/usr/bin/env bash
# run_cpu_tests.sh: runs every CPU test (build/tests/test_* binaries, then tests/test_*.sh scripts) from the repository
# root, prints their PASS/FAIL lines, and ends with "N passed, N failed". Exit status 1 if anything failed.
# A binary or script that crashes or exits nonzero without a FAIL line counts as one failure.
# With arguments, runs those binaries and scripts instead (tests/gpu/run_gpu_tests.sh does).
set -u
cd "$(dirname "$0")/.."
export SHARED_DATA="${SHARED_DATA:-$(cd .. && pwd)/shared/data}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
[ $# -gt 0 ] || set -- build/tests/test_* tests/test_*.sh
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
    passed=$((passed + p))
    failed=$((failed + f))
    echo "== $t: $p passed, $f failed ($(( $(date +%s) - start )) s)"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
