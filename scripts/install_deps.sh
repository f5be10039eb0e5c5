#!/usr/bin/env bash
# install_deps.sh: installs what building and testing need on a fresh Debian/Ubuntu machine: gcc, make, cJSON, zlib,
# Python 3 with tiktoken (data preparation). Skips what is already there. Run as root or with sudo available.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! dpkg -s gcc make libcjson-dev zlib1g-dev python3 >/dev/null 2>&1; then
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends gcc make libcjson-dev zlib1g-dev python3 python3-pip
fi
if ! python3 -c "import tiktoken" 2>/dev/null; then
    python3 -m pip install -q tiktoken 2>/dev/null || python3 -m pip install -q --break-system-packages tiktoken
fi
