# shell_helpers.sh: sourced by the shell tests: they run from the repository root with a temporary directory $TMP
# that is removed on exit, run the trainer $TRAIN, print PASS and FAIL lines, and check bad input with expect_fail.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TRAIN="${TRAIN:-$(pwd)/train}" # tests/run_cpu_tests.sh passes it (under SANITIZE=1, the sanitized trainer)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }

# expect_fail NAME PATTERN CMD...: CMD exits nonzero and its stderr matches PATTERN (grep -E).
expect_fail() {
    local name=$1 pattern=$2
    shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ $rc -ne 0 ] && grep -qE -- "$pattern" "$TMP/err"; then
        pass "$name: exit $rc, $(head -c 200 "$TMP/err" | tr '\n' ' ')"
    else
        fail "$name: exit $rc, stderr: $(head -c 300 "$TMP/err" | tr '\n' ' ') (wanted /$pattern/)"
    fi
}
