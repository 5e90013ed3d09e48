# Sourced by the GPU scripts (examples/gpu_benchmark.sh, vla_benchmark.sh, bench/distributed/*.sh)
# from the repository root: defines build_extension, which builds varpack's extension in place with
# its CUDA kernels (it needs only torch, a C++ compiler and nvcc), or, if that build fails, a
# CPU-only one, so the torch-only modes still run and the varpack modes say "not available".
# BUILD=0 skips the build (the extension is already built in place).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python MAX_JOBS=${MAX_JOBS:-$(nproc)}

# Prints what it did; returns non-zero only if not even the CPU-only build succeeded. The
# compiler's output goes to a file: only its tail matters, and only when it fails.
build_extension() {
  local start
  start=$(date +%s)
  if [ "${BUILD:-1}" = 0 ]; then
    echo "== build: skipped (BUILD=0)"
  elif ! timeout 400 python3 setup.py build_ext --inplace --build-temp /tmp/varpack-build >/tmp/build.log 2>&1; then
    echo "== the CUDA build failed; its last lines:"; tail -25 /tmp/build.log
    echo "== building the CPU-only extension instead"
    VARPACK_CUDA=0 timeout 200 python3 setup.py build_ext --inplace --build-temp /tmp/varpack-build-cpu \
      >/tmp/build-cpu.log 2>&1 || { tail -25 /tmp/build-cpu.log; return 1; }
  else
    echo "== build: $(( $(date +%s) - start )) s"
  fi
  python3 -c 'import torch, varpack; print("varpack CUDA kernel registered:", torch._C._dispatch_has_kernel_for_dispatch_key("varpack::varlen_fwd", "CUDA"))'
}
