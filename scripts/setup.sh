#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine: Debian packages for the C++ build, the C++
# build itself (build/), and a virtual environment (.venv/) with the pinned Python packages and
# the varpack Python package. Safe to run again: each step is skipped or incremental when done.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
          libsimdjson-dev pybind11-dev python3-venv python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

echo "== building the C++ library, the varpack command, tests and benchmarks (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DVARPACK_WERROR=ON >/dev/null
cmake --build build

echo "== Python environment (.venv/) and the varpack package"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -r requirements.txt
# --no-build-isolation: build against the torch just installed, not a fresh (CUDA) one.
MAX_JOBS=${MAX_JOBS:-2} .venv/bin/pip install -q --no-build-isolation --no-deps .
echo "== set-up done"
