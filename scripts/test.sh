#!/usr/bin/env bash
# Runs every test: the C++ tests (release build, then an address+undefined sanitizer build), the
# CUDA compile check for sm_80 and sm_90 (the kernels and the tuning experiments) and the
# library's SASS against its digest when nvcc is present (the kernels cannot run here), and the
# Python tests. Run scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== C++ tests (build/)"
cmake --build build  # the tests and benchmarks (scripts/setup.sh built the library and command)
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)"
# A second full build by design: every test, the fuzz round included, runs again sanitized.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DVARPACK_SANITIZE=ON \
      -DVARPACK_BENCH=OFF -DVARPACK_WERROR=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

if command -v nvcc >/dev/null 2>&1; then
  echo "== CUDA kernels: compile for sm_80 and sm_90a (build-cuda/; they run only on the GPU machine)"
  # With the tuning experiments (tile_shapes, the timelines), so that a change that breaks their
  # build is caught here and not in a call on the GPU machine, whose time is scarcer.
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DVARPACK_CUDA=ON \
        -DVARPACK_TESTS=OFF -DVARPACK_BENCH=OFF -DVARPACK_WERROR=ON -DVARPACK_CUDA_EXPERIMENTS=ON \
        -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  cmake --build build-cuda
  echo "== CUDA kernels: the library's SASS against tests/cuda/sass_digest.txt"
  # A change that means to alter a kernel rewrites the digest (scripts/cuda_sass.py write).
  .venv/bin/python scripts/cuda_sass.py check build-cuda/src/attn/cuda/libvarpack_cuda.a
else
  echo "== nvcc not found: skipping the CUDA compile check"
fi

echo "== Python tests"
.venv/bin/python -m pytest -q tests/python
echo "== all tests passed"
