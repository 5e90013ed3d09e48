#!/usr/bin/env bash
# The training benchmark on a GPU machine in one command: builds varpack's extension in place
# (with its CUDA kernels; if that build fails, a CPU-only one, so the torch-only modes still run
# and the varpack modes say "not available"), then runs the training benchmark and the saving
# curve. Everything lands in the output folder: run.log, results.{json,md}, loss_curves.png,
# parity.png, saving_curve.{json,md,png}.
#
#   bash examples/gpu_benchmark.sh OUT_DIR [extra train_packed.py options]
# SAVING_CURVE=0 skips the saving curve; VARPACK_CUDA=0 builds without the CUDA kernels; BUILD=0
# uses the extension already built in place (after scripts/gpu_run.sh in the same call).
# (with the `run` tool: give $OUT as OUT_DIR; nothing needs carrying: the extension needs only torch,
# a C++ compiler and nvcc)
set -uo pipefail
out=${1:?give an output folder}
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python MAX_JOBS=${MAX_JOBS:-$(nproc)}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  start=$(date +%s)
  # The compiler's output goes to a file: only its tail matters, and only when it fails.
  if [ "${BUILD:-1}" = 0 ]; then
    echo "== build: skipped (BUILD=0)"
  elif ! timeout 400 python3 setup.py build_ext --inplace --build-temp /tmp/varpack-build >/tmp/build.log 2>&1; then
    echo "== the CUDA build failed; its last lines:"; tail -25 /tmp/build.log
    echo "== building the CPU-only extension instead"
    VARPACK_CUDA=0 timeout 200 python3 setup.py build_ext --inplace --build-temp /tmp/varpack-build-cpu \
      >/tmp/build-cpu.log 2>&1 || { tail -25 /tmp/build-cpu.log; exit 1; }
  else
    echo "== build: $(( $(date +%s) - start )) s"
  fi
  python3 -c 'import torch, varpack; print("varpack CUDA kernel registered:", torch._C._dispatch_has_kernel_for_dispatch_key("varpack::varlen_fwd", "CUDA"))'
  python3 examples/train_packed.py --out "$out" "$@"
  [ "${SAVING_CURVE:-1}" = 0 ] || python3 examples/saving_curve.py --out "$out"
} 2>&1 | tee "$out/run.log"
