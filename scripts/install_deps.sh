#!/usr/bin/env bash
# install_deps.sh: installs what building and testing need on a fresh Debian/Ubuntu machine: gcc, make, cJSON, zlib,
# clang with libFuzzer, the ASan/UBSan runtime and OpenMP (the fuzz harnesses, make fuzz), Python 3 with tiktoken and
# pyarrow (data preparation: the Llama 3 tokenizer, Parquet inputs), torch, numpy and matplotlib (the PyTorch reference
# and the loss plots of tests/test_reference.sh). Skips what is already there. Run as root or with sudo available.
# torch comes from PyPI, the full CUDA build; for the much smaller CPU-only build install it first (a torch that
# imports is left alone): python3 -m pip install torch --index-url https://download.pytorch.org/whl/cpu
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
updated=0
apt_install() {
    [ "$updated" -eq 1 ] || $SUDO apt-get update -q
    updated=1
    $SUDO apt-get install -y -q --no-install-recommends "$@"
}
if ! dpkg -s gcc make libcjson-dev zlib1g-dev python3 >/dev/null 2>&1; then
    apt_install gcc make libcjson-dev zlib1g-dev python3 python3-pip
fi
# clang_fuzzer_links: clang builds and links a libFuzzer program with ASan, UBSan and OpenMP (the CPU kernels').
clang_fuzzer_links() {
    local dir rc
    dir=$(mktemp -d)
    printf '#include <omp.h>\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) {\n'\
'    return omp_get_max_threads() < 0;\n}\n' >"$dir/f.c"
    clang -fopenmp -fsanitize=fuzzer,address,undefined "$dir/f.c" -o "$dir/f" >/dev/null 2>&1
    rc=$?
    rm -rf "$dir"
    return "$rc"
}
if ! command -v clang >/dev/null 2>&1 || ! clang_fuzzer_links; then
    apt_install clang libomp-dev
    # Debian bookworm's clang-14 only recommends its runtime libraries (libclang_rt.fuzzer and the sanitizers):
    # libclang-rt-N-dev; older releases ship them in libclang-common-N-dev, which clang-N depends on.
    major=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
    if ! clang_fuzzer_links && apt-cache show "libclang-rt-$major-dev" >/dev/null 2>&1; then
        apt_install "libclang-rt-$major-dev"
    fi
    if ! clang_fuzzer_links; then
        echo "install_deps.sh: clang cannot link a libFuzzer program with ASan, UBSan and OpenMP (make fuzz)" >&2
        exit 1
    fi
fi
# pip_install MODULE [PACKAGE]: pip-installs PACKAGE (default MODULE) unless python3 can import MODULE.
pip_install() {
    python3 -c "import $1" 2>/dev/null && return 0
    python3 -m pip install -q "${2:-$1}" 2>/dev/null || python3 -m pip install -q --break-system-packages "${2:-$1}"
}
pip_install tiktoken
pip_install pyarrow
pip_install numpy
pip_install torch
pip_install matplotlib
