#!/usr/bin/env bash
# remeasure_timing.sh: re-runs every kernel comparison with PyTorch and cuBLAS, all timed by the one method of
# scripts/timing.py and tests/gpu/bench_timing.h: attention against SDPA, the fused programs against their bare GEMMs
# and the unfused ops, the GEMM engine against cuBLAS and torch.compile. Logs and JSON go to the directory $1. Needs a
# built tree on a Hopper GPU (make -j16 && make gpu-tests). The 1B step (scripts/bench_vs_pytorch.py) is not run here.
#   scripts/remeasure_timing.sh OUT_DIR
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
OUT="${1:?usage: scripts/remeasure_timing.sh OUT_DIR}"
mkdir -p "$OUT"
for bin in bench_attention bench_fused bench_gemm; do
    [ -x "build/tests/gpu/$bin" ] || { echo "build/tests/gpu/$bin is missing: run make gpu-tests first" >&2; exit 2; }
done
stamp() { date -u +"%Y-%m-%d %H:%M:%S UTC"; }
status=0
# run NAME SECONDS COMMAND...: runs COMMAND with a time limit, its output to the screen and $OUT/NAME.log.
run() {
    local name=$1 limit=$2
    shift 2
    echo "== $(stamp): $name: $*"
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "== $name failed (exit status $rc)"; status=1; }
}
{
    stamp
    git log -1 --format="commit %H %s" 2>/dev/null || echo "commit: unknown (not a git checkout)"
    nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv
} 2>&1 | tee "$OUT/gpu.txt"
export PYTHONUNBUFFERED=1
run bench_attention 120 python3 scripts/bench_attention.py --json "$OUT/bench_attention.json"
run bench_fused 120 build/tests/gpu/bench_fused --json "$OUT/bench_fused_programs.json"
run bench_gemm 150 env GE_BENCH_SECTIONS=1eEk23 build/tests/gpu/bench_gemm
run bench_gemm_torch 150 python3 scripts/bench_gemm_torch.py
{
    echo "== $(stamp): done (status $status); logs and JSON in $OUT"
    nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv
} 2>&1 | tee -a "$OUT/gpu.txt"
exit $status
