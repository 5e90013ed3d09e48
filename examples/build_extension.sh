# Sourced by the GPU scripts in examples/ (gpu_benchmark.sh, distributed_gpu.sh): points the
# compiler and loader at a carried libsimdjson where the machine lacks it (.gpu-deps, as
# scripts/gpu_run.sh describes), and defines build_extension, which builds varpack's extension in
# place with its CUDA kernels, or, if that build fails, a CPU-only one (so torch-only work still
# runs), printing the compiler's last lines only on failure. BUILD=0 skips the build.
if ! ldconfig -p | grep -q libsimdjson && [ -d .gpu-deps ]; then
  export CPATH=$PWD/.gpu-deps/include${CPATH:+:$CPATH}
  export LIBRARY_PATH=$PWD/.gpu-deps/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

build_extension() {
  local start=$SECONDS
  if [ "${BUILD:-1}" = 0 ]; then
    echo "== build: skipped (BUILD=0)"
  elif ! timeout 400 python3 setup.py build_ext --inplace --build-temp /tmp/varpack-build >/tmp/build.log 2>&1; then
    echo "== the CUDA build failed; its last lines:"; tail -25 /tmp/build.log
    echo "== building the CPU-only extension instead"
    VARPACK_CUDA=0 timeout 200 python3 setup.py build_ext --inplace --build-temp /tmp/varpack-build-cpu \
      >/tmp/build-cpu.log 2>&1 || { tail -25 /tmp/build-cpu.log; return 1; }
  else
    echo "== build: $((SECONDS - start)) s"
  fi
  python3 -c 'import torch, varpack; print("varpack CUDA kernel registered:", torch._C._dispatch_has_kernel_for_dispatch_key("varpack::varlen_fwd", "CUDA"))'
}
