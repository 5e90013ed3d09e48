#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine: Debian packages for the C++ build, the C++
# build itself (build/), and a virtual environment (.venv/) with the pinned Python packages and
# the varpack Python package. Safe to run again: each step is skipped or incremental when done
# (a re-run with nothing changed takes seconds). Timings: docs/RELIABILITY.md.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ ccache libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
          libsimdjson-dev nlohmann-json3-dev pybind11-dev python3-venv python3-dev)
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

# This machine's pip configuration may list index folders that do not exist; pip warns once per
# package about each. Those lines (only those) are dropped so real messages stay visible.
pip_quiet() {
  "$@" 2> >(grep -v "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" >&2)
}

# The pinned Python packages install (mostly unpacking wheels: one core, disk-bound) while the C++
# build below uses the cores.
[ -x .venv/bin/python ] || python3 -m venv .venv
requirements_pid=
if [ ! .venv/.requirements-installed -nt requirements.txt ]; then
  echo "== Python environment (.venv/): pinned packages, beside the C++ build"
  (pip_quiet .venv/bin/pip install -q -r requirements.txt && touch .venv/.requirements-installed) &
  requirements_pid=$!
fi

# ccache makes rebuilds after a branch switch or a fresh build folder quick; every build here
# (CMake's C++ and CUDA, the extension's ninja) goes through it. Only what the main job and the
# Python package need is built here; scripts/test.sh builds the tests and benchmarks.
echo "== building the C++ library and the varpack command (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DVARPACK_WERROR=ON \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build --target varpack varpack_cli  # ninja runs nproc + 2 jobs by default
[ -z "$requirements_pid" ] || wait "$requirements_pid"

echo "== the varpack Python package (.venv/)"
# Reinstalled only when a file it is built from changed since the last install.
stamp=.venv/.varpack-installed
if [ ! -e "$stamp" ] || [ -n "$(find python src include setup.py pyproject.toml build/libvarpack.a \
                                    -newer "$stamp" -print -quit)" ]; then
  # --no-build-isolation: build against the torch just installed, not a fresh (CUDA) one.
  # VARPACK_CORE_LIB: link the core library built above instead of compiling it again.
  # /usr/lib/ccache: Debian's compiler names that go through ccache (torch takes CXX as one word).
  PATH=/usr/lib/ccache:$PATH MAX_JOBS=$(nproc) VARPACK_CORE_LIB=build/libvarpack.a \
    pip_quiet .venv/bin/pip install -q --no-build-isolation --no-deps .
  touch "$stamp"
fi
echo "== set-up done"
