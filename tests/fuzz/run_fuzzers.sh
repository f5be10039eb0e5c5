#!/usr/bin/env bash
# run_fuzzers.sh SECONDS HARNESS...: replays the committed reproducers in tests/fuzz/regressions/<harness>/, then
# runs each harness (build/fuzz/fuzz_<harness>) for SECONDS, one at a time and with one job, on its corpus
# (build/fuzz/corpus/<harness>, which keeps what it finds between runs, and the seeds in build/fuzz/seeds/<harness>).
# With FUZZ_RUNS=N in the environment a harness also stops after N executions. Prints a line per harness and a table
# (harness, executions, seconds, coverage: the code edges reached, result). Exit status 1 on any finding: a crash, a leak, undefined behaviour, a broken
# property or a timeout; its input is left in build/fuzz/findings/<harness>/.
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 SECONDS HARNESS..." >&2; exit 2; }
seconds=$1
shift
export FUZZ_TOKENIZER="${FUZZ_TOKENIZER:-${SHARED:-../shared/data}/llama3_tokenizer.model}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
export OMP_NUM_THREADS=1 # the CPU kernels' parallel regions, where a harness reaches them
# the harnesses' files go to a directory on tmpfs where there is one, removed at the end (also after a crash)
FUZZ_SCRATCH=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/trainer_fuzz.XXXXXX") || exit 2
export FUZZ_SCRATCH
trap 'rm -rf "$FUZZ_SCRATCH"' EXIT
# A harness's own libFuzzer options: the config and flag harnesses get a dictionary of JSON syntax and edge values of
# numbers; the encoder's input is a prompt, at most 255 bytes in a config (its cost is quadratic in the length), so
# inputs stop at 1024 bytes.
options() {
    case "$1" in
    config|flags) echo "-dict=tests/fuzz/json.dict" ;;
    encode) echo "-max_len=1024" ;;
    esac
}
failed=0
table=""
for h in "$@"; do
    bin=build/fuzz/fuzz_$h
    corpus=build/fuzz/corpus/$h
    findings=build/fuzz/findings/$h
    log=build/fuzz/logs/$h.log
    mkdir -p "$corpus" "$findings" build/fuzz/logs
    regressions=(tests/fuzz/regressions/"$h"/*)
    if [ -e "${regressions[0]}" ]; then
        if ! "$bin" "${regressions[@]}" >"$log" 2>&1; then
            tail -n 40 "$log"
            echo "FAIL fuzz $h: a committed reproducer in tests/fuzz/regressions/$h fails again (log: $log)"
            failed=1
            table+="$h|-|-|-|reproducer fails\n"
            continue
        fi
        echo "fuzz $h: ${#regressions[@]} committed reproducer(s) pass"
    fi
    start=$(date +%s)
    # shellcheck disable=SC2046
    "$bin" -max_total_time="$seconds" ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"} -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$findings/" $(options "$h") "$corpus" "build/fuzz/seeds/$h" >"$log" 2>&1
    rc=$?
    took=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(sed -n 's/^#[0-9]*.*[[:space:]]cov: \([0-9]*\).*/\1/p' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        echo "fuzz $h: ${execs:-?} executions in $took s, no finding"
        table+="$h|${execs:-?}|$took|${cov:-?}|clean\n"
    else
        grep -E "^(==[0-9]+==ERROR|SUMMARY|fuzz property broken|.*runtime error)" "$log" | head -n 5
        echo "FAIL fuzz $h: a finding after ${execs:-?} executions (exit status $rc); input in $findings/, log $log"
        table+="$h|${execs:-?}|$took|${cov:-?}|FINDING\n"
        failed=1
    fi
done
printf "\n%-12s %12s %8s %9s  %s\n" harness executions seconds coverage result
printf "$table" | while IFS='|' read -r h e s c r; do printf "%-12s %12s %8s %9s  %s\n" "$h" "$e" "$s" "$c" "$r"; done
exit "$failed"
