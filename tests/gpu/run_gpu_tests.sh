#!/usr/bin/env bash
# run_gpu_tests.sh: runs every GPU test (build/tests/gpu/test_* binaries, then tests/gpu/test_*.sh scripts) on a
# machine with a Hopper GPU, through the CPU tests' runner; the last line is "N passed, N failed".
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}" # the CPU oracle's threads
exec bash tests/run_cpu_tests.sh build/tests/gpu/test_* tests/gpu/test_*.sh
