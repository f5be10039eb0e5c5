#!/usr/bin/env bash
# bench_gemm.sh: the GEMM-epilogue engine on a Hopper GPU in one go: builds tests/gpu/test_gemm and bench_gemm
# (skipped with PREBUILT=1 when build/tests/gpu/ already holds them), runs the test, the benchmark against cuBLAS,
# and torch.compile of the GEMM-residual-RMSNorm-GEMM pattern. Logs go to $OUT (default build/bench_gemm).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-build/bench_gemm}"
mkdir -p "$OUT"
if [ "${PREBUILT:-0}" != 1 ] || ! ldd build/tests/gpu/bench_gemm >/dev/null 2>&1 || ldd build/tests/gpu/bench_gemm | grep -q "not found"; then
    make build/tests/gpu/test_gemm build/tests/gpu/bench_gemm 2>&1 | grep -vE "^ptxas info|bytes stack frame" | tee "$OUT/build.log"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
date -u +"%Y-%m-%d %H:%M UTC" | tee -a "$OUT/gpu.txt"
build/tests/gpu/test_gemm 2>&1 | tee "$OUT/test_gemm.log"
status=$?
if [ $status -gt 128 ]; then # killed (its alarm: a deadlock): the benchmark would hang the same way
    echo "test_gemm was killed (status $status): benchmark skipped"
    exit $status
fi
build/tests/gpu/bench_gemm 2>&1 | tee "$OUT/bench_gemm.log" || status=1
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/bench_gemm_torch.py 2>&1 | tee "$OUT/bench_gemm_torch.log" || status=1
exit $status
