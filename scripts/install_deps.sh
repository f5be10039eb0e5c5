#!/usr/bin/env bash
# install_deps.sh: installs what building and testing need on a fresh Debian/Ubuntu machine: gcc, make, cJSON, zlib,
# Python 3 with tiktoken and pyarrow (data preparation: the Llama 3 tokenizer, Parquet inputs), torch, numpy and
# matplotlib (the PyTorch reference and the loss plots of tests/test_reference.sh). Skips what is already there. Run as
# root or with sudo available. torch comes from PyPI; PIP_INDEX_URL=https://download.pytorch.org/whl/cpu gives the much
# smaller CPU-only build.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! dpkg -s gcc make libcjson-dev zlib1g-dev python3 >/dev/null 2>&1; then
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends gcc make libcjson-dev zlib1g-dev python3 python3-pip
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
