# gpu_test_lib.sh: sourced by the GPU shell tests: run from the repository root, a temporary directory removed on
# exit, pass/fail lines, and the byte-level TinyShakespeare shards (made by `make data`) required.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
if [ ! -f data/tinyshakespeare_byte/train_000000.bin ]; then
    fail "no data/tinyshakespeare_byte (run make data first)"
    exit 1
fi
