#!/usr/bin/env bash
# Installs what building and testing tessera needs on Debian 12 / Ubuntu 22.04+:
# Debian's -dev packages for the C++ side, and a Python virtual environment
# (.venv) with the PyPI packages the tests and tools use. Safe to run again:
# it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev libgtest-dev
  libsentencepiece-dev libpcre2-dev libxxhash-dev libicu-dev libboost-dev
  python3 python3-venv python3-pip
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python for tests and tools (pinned loosely; the reference libraries are the oracles).
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# Installs again whenever requirements-test.txt changed since the last install.
if ! cmp -s requirements-test.txt .venv/.requirements-installed; then
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-test.txt
  cp requirements-test.txt .venv/.requirements-installed
fi

# FlashInfer's headers, for the Hopper prefill attention, where the CUDA
# backend is built. Without them (no network) the build still succeeds and
# Hopper runs tessera's own prefill kernel; the configure log says so.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/fetch_flashinfer.sh || echo "install_deps: FlashInfer headers not fetched; the build goes on without them"
fi
