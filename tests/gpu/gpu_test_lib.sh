# gpu_test_lib.sh: sourced by the GPU shell tests: what tests/shell_helpers.sh gives (the repository root, $TMP,
# pass/fail lines), the byte-level TinyShakespeare shards (made by `make data`) required, and $GPU_TINY: the
# tiny config (a CPU config: its head dim 32 is not one the CUDA attention takes) widened to D = 256, so 4 query
# heads / 2 KV heads of 64.
source "$(dirname "${BASH_SOURCE[0]}")/../shell_helpers.sh"
if [ ! -f data/tinyshakespeare_byte/train_000000.bin ]; then
    fail "no data/tinyshakespeare_byte (run make data first)"
    exit 1
fi
GPU_TINY="$TMP/gpu_tiny.json"
python3 -c 'import json, sys; c = json.load(open("configs/llama3_tiny.json")); c["hidden_size"] = 256; json.dump(c, open(sys.argv[1], "w"))' "$GPU_TINY"
