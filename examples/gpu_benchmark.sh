#!/usr/bin/env bash
# The training benchmark on a GPU machine in one command: builds varpack's extension in place
# (with its CUDA kernels; if that build fails, a CPU-only one, so the torch-only modes still run
# and the varpack modes say "not available"), then runs the training benchmark and the saving
# curve. Everything lands in the output folder: run.log, results.{json,md}, loss_curves.png,
# parity.png, saving_curve.{json,md,png}.
#
#   bash examples/gpu_benchmark.sh OUT_DIR [extra train_packed.py options]
# SAVING_CURVE=0 skips the saving curve; VARPACK_CUDA=0 builds without the CUDA kernels; BUILD=0
# uses the extension already built in place (after scripts/gpu_test.sh in the same call).
# (with the `run` tool: give $OUT as OUT_DIR; nothing needs carrying: the extension needs only torch,
# a C++ compiler and nvcc)
set -uo pipefail
out=${1:?give an output folder}
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
source examples/build_extension.sh  # the environment and build_extension

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  build_extension || exit 1
  python3 examples/train_packed.py --out "$out" "$@"
  [ "${SAVING_CURVE:-1}" = 0 ] || python3 examples/saving_curve.py --out "$out"
} 2>&1 | tee "$out/run.log"
